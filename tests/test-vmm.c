// SPDX-License-Identifier: MIT
/*
 * tests/test-vmm.c - the vmm/ suite, run once per backend
 *
 * The same tests run against the host backend and against the cuda backend
 * on the fake driver (group "cuda"), so both backends are held to the same
 * contract; "cuda" also runs on a real driver (STALLOC_LIBCUDA unset).
 * Device memory is only reached through the fixture's fx_* copies.  Tests
 * that need the fake driver's controls (fault injection, call counters,
 * live-object counts) skip on the host backend and on a real driver.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/vmm-fixture.h"
#include "vmm/vmm-internal.h"

#define MB (1ULL << 20)

static const char *backend; /* of the group being run */
static uint64_t chunk; /* chunk size the group uses */

struct fx {
	struct vmm_space *s;
	uint64_t base;
	uint64_t chunk;
};

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	if (!f || fx_space(backend, chunk, &f->s)) {
		fprintf(stderr, "setup: %s\n", stalloc_last_error());
		free(f);
		return -1;
	}
	f->base = vmm_base(f->s);
	f->chunk = vmm_chunk_bytes(f->s);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;
	const struct fx_fake *fk = fx_fake();

	vmm_space_destroy(f->s);
	free(f);
	if (fk && !strcmp(backend, "cuda")) {
		/* Nothing the space held may outlive it. */
		if (fk->live_reservations() || fk->live_handles() ||
		    fk->live_mappings() || fk->live_primary_retains() ||
		    fk->violations()) {
			fprintf(stderr,
				"teardown: leak or violation: res %lu handles "
				"%lu maps %lu ctx %lu violations %lu\n",
				fk->live_reservations(), fk->live_handles(),
				fk->live_mappings(), fk->live_primary_retains(),
				fk->violations());
			return -1;
		}
	}
	return 0;
}

static uint64_t va_at(const struct fx *f, unsigned int slot)
{
	return f->base + slot * f->chunk;
}

static void test_geometry(void **state)
{
	struct fx *f = *state;
	struct vmm_stats st;

	assert_string_equal(vmm_backend_name(f->s), backend);
	assert_int_equal(vmm_chunk_bytes(f->s), chunk);
	assert_int_equal(vmm_size(f->s), 64 * chunk);
	assert_int_equal(vmm_phys_limit(f->s), 32 * chunk);
	assert_true(f->base != 0);
	assert_int_equal(f->base % vmm_granularity(f->s), 0);
	vmm_get_stats(f->s, &st);
	assert_int_equal(st.calls[VMM_CALL_RESERVE], 1);
	assert_int_equal(st.bytes_mapped + st.phys_bytes + st.chunks_live, 0);
	assert_false(vmm_is_mapped(f->s, f->base, f->chunk));
}

static void test_map_write_read(void **state)
{
	struct fx *f = *state;
	struct vmm_translation t;
	struct vmm_stats st;

	assert_int_equal(vmm_map(f->s, va_at(f, 2), 3 * f->chunk), 0);
	assert_true(fx_fill(backend, va_at(f, 2), 3 * f->chunk, 42));
	assert_true(fx_check(backend, va_at(f, 2), 3 * f->chunk, 42));
	assert_true(vmm_is_mapped(f->s, va_at(f, 2), 3 * f->chunk));
	assert_false(vmm_is_mapped(f->s, va_at(f, 1), 2 * f->chunk));
	assert_true(vmm_lookup(f->s, va_at(f, 3) + 100, &t));
	assert_int_equal(t.slot_va, va_at(f, 3));
	assert_int_equal(t.chunk_offset, 100);
	assert_int_equal(t.chunk_id, 2);
	assert_false(vmm_lookup(f->s, va_at(f, 5), &t));
	assert_false(vmm_lookup(f->s, f->base - 1, &t));
	vmm_get_stats(f->s, &st);
	assert_int_equal(st.bytes_mapped, 3 * f->chunk);
	assert_int_equal(st.phys_bytes, 3 * f->chunk);
	assert_int_equal(st.chunks_created, 3);
	/* three or more new chunks: the end ones get a segment each */
	assert_int_equal(st.segs_created, 3);
	assert_int_equal(st.mappings, 3);
	assert_int_equal(st.calls[VMM_CALL_CREATE], 3);
	assert_int_equal(st.calls[VMM_CALL_MAP], 3);
	/* one access call for the whole contiguous range */
	assert_int_equal(st.calls[VMM_CALL_SET_ACCESS], 1);
	assert_int_equal(vmm_unmap(f->s, va_at(f, 2), 3 * f->chunk, 0), 0);
	vmm_get_stats(f->s, &st);
	assert_int_equal(st.bytes_mapped, 0);
	assert_int_equal(st.bytes_mapped_peak, 3 * f->chunk);
	assert_int_equal(st.chunks_pooled, 3);
	assert_int_equal(st.calls[VMM_CALL_SYNC], 1);
}

static void test_remap_moves_pages(void **state)
{
	struct fx *f = *state;
	struct vmm_translation t;
	struct vmm_stats before, after;

	assert_int_equal(vmm_map(f->s, va_at(f, 0), 4 * f->chunk), 0);
	assert_true(fx_fill(backend, va_at(f, 0), 4 * f->chunk, 7));
	vmm_get_stats(f->s, &before);
	assert_int_equal(
		vmm_remap(f->s, va_at(f, 0), va_at(f, 40), 4 * f->chunk, 0), 0);
	assert_true(fx_check(backend, va_at(f, 40), 4 * f->chunk, 7));
	assert_false(vmm_is_mapped(f->s, va_at(f, 0), f->chunk));
	assert_true(vmm_lookup(f->s, va_at(f, 41), &t));
	assert_int_equal(t.chunk_id, 2); /* the same physical chunk */
	vmm_get_stats(f->s, &after);
	assert_int_equal(after.chunks_created, before.chunks_created);
	assert_int_equal(after.phys_bytes, before.phys_bytes);
	assert_int_equal(after.bytes_mapped, 4 * f->chunk);
	/* moving back and forth never copies or creates */
	assert_int_equal(vmm_remap(f->s, va_at(f, 40), va_at(f, 10),
				   4 * f->chunk, VMM_SYNCED),
			 0);
	assert_true(fx_check(backend, va_at(f, 10), 4 * f->chunk, 7));
	assert_int_equal(vmm_unmap(f->s, va_at(f, 10), 4 * f->chunk, 0), 0);
}

static void test_alias(void **state)
{
	struct fx *f = *state;
	struct vmm_translation a, b;
	struct vmm_stats st;
	uint64_t pa = va_at(f, 1), pb = va_at(f, 20), w;

	assert_int_equal(vmm_map(f->s, va_at(f, 1), 2 * f->chunk), 0);
	assert_int_equal(
		vmm_alias(f->s, va_at(f, 1), va_at(f, 20), 2 * f->chunk), 0);
	w = 0x1234;
	assert_int_equal(fx_poke(backend, pa, &w, 8), 0);
	w = 0;
	assert_int_equal(fx_peek(backend, &w, pb, 8), 0);
	assert_int_equal(w, 0x1234);
	w = 0x5678;
	assert_int_equal(fx_poke(backend, pb + f->chunk, &w, 8), 0);
	w = 0;
	assert_int_equal(fx_peek(backend, &w, pa + f->chunk, 8), 0);
	assert_int_equal(w, 0x5678);
	assert_true(vmm_lookup(f->s, va_at(f, 1), &a));
	assert_true(vmm_lookup(f->s, va_at(f, 20), &b));
	assert_int_equal(a.chunk_id, b.chunk_id);
	vmm_get_stats(f->s, &st);
	assert_int_equal(st.bytes_mapped, 4 * f->chunk);
	assert_int_equal(st.phys_bytes, 2 * f->chunk);
	/* the alias keeps the pages after the first mapping goes */
	assert_int_equal(vmm_unmap(f->s, va_at(f, 1), 2 * f->chunk, 0), 0);
	w = 0;
	assert_int_equal(fx_peek(backend, &w, pb, 8), 0);
	assert_int_equal(w, 0x1234);
	vmm_get_stats(f->s, &st);
	assert_int_equal(st.chunks_pooled, 0);
	assert_int_equal(vmm_unmap(f->s, va_at(f, 20), 2 * f->chunk, 0), 0);
	vmm_get_stats(f->s, &st);
	assert_int_equal(st.chunks_pooled, 2);
}

static void test_pool_reuse_and_trim(void **state)
{
	struct fx *f = *state;
	struct vmm_stats st;
	uint64_t w = ~0ULL;

	assert_int_equal(vmm_map(f->s, va_at(f, 0), 8 * f->chunk), 0);
	assert_true(fx_memset(backend, va_at(f, 0), 0x5a, 8 * f->chunk) == 0);
	assert_int_equal(vmm_unmap(f->s, va_at(f, 0), 8 * f->chunk, 0), 0);
	assert_int_equal(vmm_map(f->s, va_at(f, 20), 8 * f->chunk), 0);
	vmm_get_stats(f->s, &st);
	assert_int_equal(st.chunks_created, 8); /* reused, none new */
	assert_int_equal(st.segs_created, 3); /* 1 + 6 + 1 chunks */
	assert_int_equal(vmm_unmap(f->s, va_at(f, 20), 8 * f->chunk, 0), 0);
	/*
	 * The 6-chunk segment is too large for 5: the two 1-chunk ones
	 * serve, and since idle memory never stands beside new memory the
	 * 6 chunks go back before three new ones are made.
	 */
	assert_int_equal(vmm_map(f->s, va_at(f, 30), 5 * f->chunk), 0);
	vmm_get_stats(f->s, &st);
	assert_int_equal(st.chunks_created, 11);
	assert_int_equal(st.chunks_pooled, 0);
	assert_int_equal(st.chunks_destroyed, 6);
	assert_int_equal(st.segs_live, 5);
	assert_int_equal(st.phys_bytes, 5 * f->chunk);
	assert_int_equal(st.phys_bytes_peak, 8 * f->chunk);
	assert_int_equal(vmm_trim(f->s, f->chunk), 0);
	vmm_get_stats(f->s, &st);
	assert_int_equal(st.chunks_destroyed, 6);
	assert_int_equal(vmm_unmap(f->s, va_at(f, 30), 5 * f->chunk, 0), 0);
	assert_int_equal(vmm_trim(f->s, 0), 0);
	vmm_get_stats(f->s, &st);
	assert_int_equal(st.chunks_live, 0);
	assert_int_equal(st.phys_bytes, 0);
	/*
	 * A recreated chunk starts zeroed: the pages really went back.  Only
	 * the host backend and the fake promise zeros; a real driver's
	 * cuMemCreate does not.
	 */
	assert_int_equal(vmm_map(f->s, va_at(f, 0), f->chunk), 0);
	assert_int_equal(fx_peek(backend, &w, va_at(f, 0), 8), 0);
	if (strcmp(backend, "cuda") || fx_fake())
		assert_int_equal(w, 0);
}

/*
 * VMM_FINE: one segment per new chunk, so that any chunk can be unmapped
 * alone; pooled segments that fit are still taken first.
 */
static void test_map_fine(void **state)
{
	struct fx *f = *state;
	struct vmm_translation t;
	struct vmm_stats st;
	uint64_t got;
	int i;

	assert_int_equal(
		vmm_map_flags(f->s, va_at(f, 0), 5 * f->chunk, VMM_FINE), 0);
	vmm_get_stats(f->s, &st);
	assert_int_equal(st.segs_created, 5); /* not 1 + 3 + 1 */
	for (i = 0; i < 5; i++) {
		assert_true(vmm_lookup(f->s, va_at(f, i) + 4096, &t));
		assert_int_equal(t.seg_va, va_at(f, i));
		assert_int_equal(t.seg_bytes, f->chunk);
	}
	assert_true(fx_fill(backend, va_at(f, 3), 2 * f->chunk, 7));
	/* the middle chunk goes alone; its neighbours keep their data */
	assert_int_equal(vmm_unmap(f->s, va_at(f, 2), f->chunk, 0), 0);
	assert_false(vmm_is_mapped(f->s, va_at(f, 2), f->chunk));
	assert_true(vmm_is_mapped(f->s, va_at(f, 3), 2 * f->chunk));
	assert_true(fx_check(backend, va_at(f, 3), 2 * f->chunk, 7));
	/* a plain mapping takes the three pooled chunks, then 1 + 3 + 1 */
	assert_int_equal(vmm_unmap(f->s, va_at(f, 3), 2 * f->chunk, 0), 0);
	assert_int_equal(vmm_map(f->s, va_at(f, 10), 8 * f->chunk), 0);
	vmm_get_stats(f->s, &st);
	assert_int_equal(st.segs_created, 5 + 3);
	assert_int_equal(vmm_unmap(f->s, va_at(f, 10), 8 * f->chunk, 0), 0);
	/* pooled segments are taken first, even large ones */
	assert_int_equal(vmm_map_missing_flags(f->s, va_at(f, 20), 6 * f->chunk,
					       VMM_FINE, &got),
			 0);
	assert_int_equal(got, 6 * f->chunk);
	vmm_get_stats(f->s, &st);
	assert_int_equal(st.segs_created, 8);
	assert_int_equal(vmm_unmap(f->s, va_at(f, 20), 6 * f->chunk, 0), 0);
}

/*
 * VMM_WHOLE: no segments of their own for the end chunks -- one segment per
 * up to the segment size -- for a caller that unmaps the range whole.
 */
static void test_map_whole(void **state)
{
	struct fx *f = *state;
	struct vmm_translation t;
	struct vmm_stats st;
	uint64_t per = vmm_segment_bytes(f->s) / f->chunk, n = per + 1;

	assert_int_equal(
		vmm_map_flags(f->s, va_at(f, 0), 5 * f->chunk, VMM_WHOLE), 0);
	vmm_get_stats(f->s, &st);
	assert_int_equal(st.segs_created, 1); /* not 1 + 3 + 1 */
	assert_true(vmm_lookup(f->s, va_at(f, 4) + 4096, &t));
	assert_int_equal(t.seg_va, va_at(f, 0));
	assert_int_equal(t.seg_bytes, 5 * f->chunk);
	assert_true(fx_fill(backend, va_at(f, 0), 5 * f->chunk, 9));
	assert_true(fx_check(backend, va_at(f, 0), 5 * f->chunk, 9));
	/* it still cannot be unmapped in part */
	assert_int_equal(vmm_unmap(f->s, va_at(f, 1), f->chunk, 0), -EBUSY);
	assert_int_equal(vmm_unmap(f->s, va_at(f, 0), 5 * f->chunk, 0), 0);
	/* past the segment size: a full segment, then the rest */
	if (n > 16)
		return; /* small chunks: more than the space holds */
	assert_int_equal(vmm_trim(f->s, 0), 0);
	assert_int_equal(vmm_map_missing_flags(f->s, va_at(f, 10), n * f->chunk,
					       VMM_WHOLE, NULL),
			 0);
	vmm_get_stats(f->s, &st);
	assert_int_equal(st.segs_created, 1 + 2);
	assert_true(vmm_lookup(f->s, va_at(f, 10), &t));
	assert_int_equal(t.seg_bytes, per * f->chunk);
	assert_int_equal(vmm_unmap(f->s, va_at(f, 10), n * f->chunk, 0), 0);
}

/* Expect @err from a call and nothing changed in the stats or driver. */
#define EXPECT_REJECT(f, call, err)                            \
	do {                                                   \
		struct vmm_stats __b, __a;                     \
		vmm_get_stats((f)->s, &__b);                   \
		assert_int_equal((call), (err));               \
		assert_true(strlen(stalloc_last_error()) > 0); \
		vmm_get_stats((f)->s, &__a);                   \
		assert_memory_equal(&__a, &__b, sizeof(__a));  \
	} while (0)

static void test_bad_input(void **state)
{
	struct fx *f = *state;
	uint64_t c = f->chunk, end = f->base + vmm_size(f->s);

	EXPECT_REJECT(f, vmm_map(f->s, va_at(f, 0), 0), -EINVAL);
	EXPECT_REJECT(f, vmm_map(f->s, va_at(f, 0) + 4096, c), -EINVAL);
	EXPECT_REJECT(f, vmm_map(f->s, va_at(f, 0), c + 4096), -EINVAL);
	EXPECT_REJECT(f, vmm_map(f->s, f->base - c, c), -EINVAL);
	EXPECT_REJECT(f, vmm_map(f->s, end - c, 2 * c), -EINVAL);
	EXPECT_REJECT(f, vmm_map(f->s, end, c), -EINVAL);
	EXPECT_REJECT(f, vmm_map(f->s, va_at(f, 1), UINT64_MAX - c + 1),
		      -EINVAL);
	EXPECT_REJECT(f, vmm_map(f->s, UINT64_MAX - c + 1, c), -EINVAL);
	assert_int_equal(vmm_map(f->s, va_at(f, 4), 2 * c), 0);
	/* mapping over a mapped range, even partly */
	EXPECT_REJECT(f, vmm_map(f->s, va_at(f, 5), 2 * c), -EBUSY);
	EXPECT_REJECT(f, vmm_map(f->s, va_at(f, 3), 2 * c), -EBUSY);
	/* unmapping what is not (wholly) mapped */
	EXPECT_REJECT(f, vmm_unmap(f->s, va_at(f, 0), c, 0), -EINVAL);
	EXPECT_REJECT(f, vmm_unmap(f->s, va_at(f, 5), 2 * c, 0), -EINVAL);
	EXPECT_REJECT(f, vmm_unmap(f->s, va_at(f, 4), 0, 0), -EINVAL);
	/* part of a segment: it is unmapped whole or not at all */
	EXPECT_REJECT(f, vmm_unmap(f->s, va_at(f, 4), c, 0), -EBUSY);
	assert_non_null(strstr(stalloc_last_error(), "whole"));
	EXPECT_REJECT(f, vmm_alias(f->s, va_at(f, 5), va_at(f, 20), c),
		      -EINVAL);
	EXPECT_REJECT(f, vmm_remap(f->s, va_at(f, 4), va_at(f, 20), c, 0),
		      -EINVAL);
	/* remap / alias: overlap, unmapped source, mapped destination */
	EXPECT_REJECT(f, vmm_remap(f->s, va_at(f, 4), va_at(f, 5), c, 0),
		      -EBUSY);
	EXPECT_REJECT(f, vmm_remap(f->s, va_at(f, 4), va_at(f, 3), 2 * c, 0),
		      -EINVAL);
	EXPECT_REJECT(f, vmm_remap(f->s, va_at(f, 9), va_at(f, 20), c, 0),
		      -EINVAL);
	EXPECT_REJECT(f, vmm_alias(f->s, va_at(f, 4), va_at(f, 5), c), -EBUSY);
	EXPECT_REJECT(f, vmm_alias(f->s, va_at(f, 4), end, c), -EINVAL);
	assert_true(vmm_is_mapped(f->s, va_at(f, 4), 2 * c));
	assert_int_equal(vmm_unmap(f->s, va_at(f, 4), 2 * c, 0), 0);
}

static void test_physical_limit(void **state)
{
	struct fx *f = *state;
	struct vmm_stats st;
	uint64_t c = f->chunk;

	/* 32 chunks is the limit; 40 cannot all be backed */
	EXPECT_REJECT(f, vmm_map(f->s, va_at(f, 0), 40 * c), -ENOMEM);
	assert_int_equal(vmm_map(f->s, va_at(f, 0), 30 * c), 0);
	EXPECT_REJECT(f, vmm_map(f->s, va_at(f, 30), 3 * c), -ENOMEM);
	assert_int_equal(vmm_map(f->s, va_at(f, 30), 2 * c), 0);
	EXPECT_REJECT(f, vmm_map(f->s, va_at(f, 32), c), -ENOMEM);
	/* an alias needs no new memory */
	assert_int_equal(vmm_alias(f->s, va_at(f, 30), va_at(f, 40), 2 * c), 0);
	assert_int_equal(vmm_unmap(f->s, va_at(f, 30), 2 * c, 0), 0);
	vmm_get_stats(f->s, &st);
	assert_int_equal(st.chunks_pooled, 0); /* still mapped at 40 */
	assert_int_equal(vmm_unmap(f->s, va_at(f, 40), 2 * c, 0), 0);
	/* the pooled 2-chunk segment is too large for 1 chunk and is
	 * released to make room under the limit */
	assert_int_equal(vmm_map(f->s, va_at(f, 50), c), 0);
	vmm_get_stats(f->s, &st);
	assert_int_equal(st.phys_bytes, 31 * c);
	assert_int_equal(st.chunks_created, 33);
	assert_int_equal(st.chunks_destroyed, 2);
	assert_int_equal(st.chunks_pooled, 0);
}

static int count_run(const struct vmm_mapping *m, void *arg)
{
	struct vmm_mapping *runs = arg;

	runs[runs[0].nr_chunks + 1] = *m;
	runs[0].nr_chunks++;
	return 0;
}

static void test_mapping_runs(void **state)
{
	struct fx *f = *state;
	struct vmm_mapping runs[8];
	uint64_t c = f->chunk;

	memset(runs, 0, sizeof(runs));
	assert_int_equal(vmm_map(f->s, va_at(f, 0), c), 0);
	assert_int_equal(vmm_map(f->s, va_at(f, 1), 2 * c), 0);
	assert_int_equal(vmm_map(f->s, va_at(f, 3), 2 * c), 0);
	assert_int_equal(vmm_alias(f->s, va_at(f, 0), va_at(f, 63), c), 0);
	assert_int_equal(vmm_for_each_mapping(f->s, count_run, runs), 0);
	assert_int_equal(runs[0].nr_chunks, 2);
	assert_int_equal(runs[1].va, va_at(f, 0));
	assert_int_equal(runs[1].nr_chunks, 5);
	assert_int_equal(runs[1].bytes, 5 * c);
	assert_int_equal(runs[1].nr_segs, 3);
	assert_true(runs[1].contiguous_ids);
	assert_int_equal(runs[2].va, va_at(f, 63));
	assert_int_equal(runs[2].first_chunk_id, 1);
}

static void test_config_errors(void **state)
{
	struct vmm_config cfg = { .backend = backend, .va_bytes = 64 * MB };
	struct vmm_space *s = NULL;

	(void)state;
	cfg.chunk_bytes = chunk + 4096;
	assert_int_equal(vmm_space_create(&cfg, &s), -EINVAL);
	assert_non_null(strstr(stalloc_last_error(), "chunk size"));
	cfg.chunk_bytes = 0;
	cfg.backend = "tpu";
	assert_int_equal(vmm_space_create(&cfg, &s), -EINVAL);
	assert_non_null(strstr(stalloc_last_error(), "tpu"));
	cfg.backend = backend;
	cfg.device = -1;
	assert_int_equal(vmm_space_create(&cfg, &s), -EINVAL);
	cfg.device = 0;
	setenv("STALLOC_PHYS_LIMIT", "12Q", 1);
	assert_int_equal(vmm_space_create(&cfg, &s), -EINVAL);
	assert_non_null(strstr(stalloc_last_error(), "STALLOC_PHYS_LIMIT"));
	unsetenv("STALLOC_PHYS_LIMIT");
	if (!strcmp(backend, "cuda")) {
		cfg.device = 7;
		assert_int_equal(vmm_space_create(&cfg, &s), -ENODEV);
		assert_non_null(strstr(stalloc_last_error(), "no device 7"));
	}
	assert_null(s);
}

static void test_chunk_multiple(void **state)
{
	struct vmm_config cfg = { .backend = backend,
				  .va_bytes = 64 * MB,
				  .chunk_bytes = 3 * chunk,
				  .host_device_bytes = 48 * chunk };
	struct vmm_space *s;
	uint64_t base;

	(void)state;
	assert_int_equal(vmm_space_create(&cfg, &s), 0);
	base = vmm_base(s);
	assert_int_equal(vmm_size(s) % (3 * chunk), 0);
	assert_int_equal(vmm_map(s, base + 6 * chunk, 6 * chunk), 0);
	assert_true(fx_fill(backend, base + 6 * chunk, 6 * chunk, 3));
	assert_int_equal(vmm_remap(s, base + 6 * chunk, base, 6 * chunk, 0), 0);
	assert_true(fx_check(backend, base, 6 * chunk, 3));
	assert_int_equal(vmm_map(s, base + chunk, 3 * chunk), -EINVAL);
	vmm_space_destroy(s);
}

/* ---------------------------------------------------------------- fork */

static void test_fork_child_untouched(void **state)
{
	struct fx *f = *state;
	int status;
	pid_t pid;

	assert_int_equal(vmm_map(f->s, va_at(f, 0), 2 * f->chunk), 0);
	assert_true(fx_fill(backend, va_at(f, 0), 2 * f->chunk, 99));
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(0); /* the child never touches the allocator */
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	assert_true(fx_check(backend, va_at(f, 0), 2 * f->chunk, 99));
	assert_int_equal(
		vmm_remap(f->s, va_at(f, 0), va_at(f, 8), 2 * f->chunk, 0), 0);
	assert_true(fx_check(backend, va_at(f, 8), 2 * f->chunk, 99));
	assert_int_equal(vmm_map(f->s, va_at(f, 0), f->chunk), 0);
	assert_true(fx_fill(backend, va_at(f, 0), f->chunk, 5));
	assert_true(fx_check(backend, va_at(f, 0), f->chunk, 5));
}

/*
 * STALLOC_HOST_FORK=copy (host backend): a child keeps a private copy of
 * the memory -- it reads what the parent wrote, its writes never reach the
 * parent.  Default: the child inherits none of it.
 */
static void test_fork_copy(void **state)
{
	struct vmm_config cfg = { .backend = "host",
				  .va_bytes = 64 * chunk,
				  .chunk_bytes = chunk,
				  .host_device_bytes = 64 * chunk };
	volatile unsigned char *p;
	struct vmm_space *s;
	int status;
	pid_t pid;

	(void)state;
	if (strcmp(backend, "host"))
		skip();
	setenv("STALLOC_HOST_FORK", "copy", 1);
	assert_int_equal(vmm_space_create(&cfg, &s), 0);
	unsetenv("STALLOC_HOST_FORK");
	assert_int_equal(vmm_map(s, vmm_base(s), 2 * chunk), 0);
	p = (volatile unsigned char *)(uintptr_t)vmm_base(s);
	memset((void *)(uintptr_t)p, 7, 2 * chunk);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		vmm_fork_child_copy(s);
		/* the parent's bytes, and a write of its own */
		if (p[0] != 7 || p[2 * chunk - 1] != 7)
			_exit(1);
		p[0] = 9;
		p[chunk] = 9;
		_exit(p[0] == 9 ? 0 : 2);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	assert_int_equal(p[0], 7); /* the child's writes stayed there */
	assert_int_equal(p[chunk], 7);
	vmm_space_destroy(s);
}

/* ------------------------------------------------------------ segments */

static void test_unmap_whole_segments(void **state)
{
	struct fx *f = *state;
	struct vmm_translation t;
	struct vmm_stats st;
	uint64_t c = f->chunk;

	/* 4 new chunks: segments of 1, 2 and 1 chunks */
	assert_int_equal(vmm_map(f->s, va_at(f, 0), 4 * c), 0);
	assert_true(vmm_lookup(f->s, va_at(f, 2), &t));
	assert_int_equal(t.seg_va, va_at(f, 1));
	assert_int_equal(t.seg_bytes, 2 * c);
	assert_int_equal(t.chunk_id, 3);
	/* slot 0 goes; the segment at 1..2 reaches past the range, stays */
	assert_int_equal(vmm_unmap(f->s, va_at(f, 0), 2 * c, 0), -EBUSY);
	assert_false(vmm_is_mapped(f->s, va_at(f, 0), c));
	assert_true(vmm_is_mapped(f->s, va_at(f, 1), 3 * c));
	vmm_get_stats(f->s, &st);
	assert_int_equal(st.bytes_mapped, 3 * c);
	assert_int_equal(st.mappings, 2);
	assert_int_equal(st.chunks_pooled, 1);
	assert_int_equal(vmm_unmap(f->s, va_at(f, 1), 3 * c, 0), 0);
}

/* vmm_map_missing fills holes only; vmm_unmap_present takes whole maps. */
static void test_map_missing_unmap_present(void **state)
{
	struct fx *f = *state;
	uint64_t c = f->chunk, got;
	struct vmm_stats st;

	assert_int_equal(vmm_map(f->s, va_at(f, 1), c), 0);
	assert_int_equal(vmm_map(f->s, va_at(f, 4), c), 0);
	/* unaligned ends: the chunks around them are covered */
	assert_int_equal(vmm_map_missing(f->s, va_at(f, 0) + 100,
					 va_at(f, 6) - 1 - va_at(f, 0) - 100,
					 &got),
			 0);
	assert_int_equal(got, 4 * c);
	assert_true(vmm_is_mapped(f->s, va_at(f, 0), 6 * c));
	assert_false(vmm_is_mapped(f->s, va_at(f, 6), c));
	assert_int_equal(vmm_map_missing(f->s, va_at(f, 0), 6 * c, &got), 0);
	assert_int_equal(got, 0);
	vmm_get_stats(f->s, &st);
	assert_int_equal(st.bytes_mapped, 6 * c);

	/* a chunk only partly inside stays; slot 0 is not inside */
	assert_int_equal(vmm_unmap_present(f->s, va_at(f, 0) + 1, 6 * c - 1, 0,
					   &got),
			 0);
	assert_int_equal(got, 5 * c);
	assert_true(vmm_is_mapped(f->s, va_at(f, 0), c));
	assert_false(vmm_is_mapped(f->s, va_at(f, 1), c));
	/* nothing mapped there: nothing to do, no error */
	assert_int_equal(vmm_unmap_present(f->s, va_at(f, 1), 5 * c, 0, &got),
			 0);
	assert_int_equal(got, 0);

	/* a mapping reaching past the range is left whole */
	assert_int_equal(vmm_map(f->s, va_at(f, 7), 2 * c), 0);
	assert_int_equal(vmm_unmap_present(f->s, va_at(f, 8), c, 0, &got), 0);
	if (vmm_is_mapped(f->s, va_at(f, 8), c)) {
		assert_int_equal(got, 0);
		assert_true(vmm_is_mapped(f->s, va_at(f, 7), 2 * c));
	}
	assert_int_equal(vmm_unmap_present(f->s, va_at(f, 0), 9 * c, 0, &got),
			 0);
	assert_false(vmm_is_mapped(f->s, va_at(f, 0), c));
	assert_false(vmm_is_mapped(f->s, va_at(f, 7), c));
	/* outside the space: the range error of vmm_map */
	assert_int_equal(vmm_map_missing(f->s, f->base - 4 * c, c, NULL),
			 -EINVAL);
}

/* The shrinker's calls: how many, and how far past the high water. */
struct shrink_log {
	int calls;
	uint64_t over;
};

static void log_shrink(void *ctx, uint64_t va, uint64_t bytes, uint64_t over)
{
	struct shrink_log *l = ctx;

	(void)va;
	(void)bytes;
	l->calls++;
	l->over = over;
}

/*
 * The shrinker is called before a mapping raises the physical high water,
 * with how far past it; under a shrink floor the high water may rise to
 * the floor first.
 */
static void test_shrink_floor(void **state)
{
	struct fx *f = *state;
	struct shrink_log l = { 0 };
	uint64_t c = f->chunk, got;

	vmm_set_shrinker(f->s, log_shrink, &l);
	assert_int_equal(vmm_map_missing(f->s, va_at(f, 0), 2 * c, NULL), 0);
	assert_int_equal(l.calls, 1); /* past the high water of 0 */
	assert_int_equal(l.over, 2 * c);
	assert_int_equal(vmm_unmap_present(f->s, va_at(f, 0), 2 * c, 0, &got),
			 0);
	assert_int_equal(got, 2 * c);
	/* back under the high water (2 chunks): no call */
	assert_int_equal(vmm_map_missing(f->s, va_at(f, 4), 2 * c, NULL), 0);
	assert_int_equal(l.calls, 1);
	/* a floor of 5 chunks: the high water rises to it without a call */
	vmm_set_shrink_floor(f->s, 5 * c);
	assert_int_equal(vmm_map_missing(f->s, va_at(f, 6), 3 * c, NULL), 0);
	assert_int_equal(l.calls, 1);
	/* past the floor: called, for what goes past it */
	assert_int_equal(vmm_map_missing(f->s, va_at(f, 9), 2 * c, NULL), 0);
	assert_int_equal(l.calls, 2);
	assert_int_equal(l.over, 2 * c);
	vmm_set_shrinker(f->s, NULL, NULL);
}

/* Driver calls that map and unmap (and create and release) memory. */
static uint64_t map_calls(const struct vmm_stats *st)
{
	return st->calls[VMM_CALL_CREATE] + st->calls[VMM_CALL_MAP] +
	       st->calls[VMM_CALL_SET_ACCESS] + st->calls[VMM_CALL_UNMAP] +
	       st->calls[VMM_CALL_DESTROY];
}

/* Map 8 blocks of 64 chunks one call each, unmap them, trim: calls/GiB. */
static double calls_per_gib(uint64_t segment_bytes)
{
	struct vmm_config cfg = { .backend = backend,
				  .va_bytes = 1024 * chunk,
				  .chunk_bytes = chunk,
				  .phys_limit = 512 * chunk,
				  .host_device_bytes = 1024 * chunk,
				  .segment_bytes = segment_bytes };
	struct vmm_space *s;
	struct vmm_stats st;
	uint64_t base, block = 64 * chunk;
	int i;

	assert_int_equal(vmm_space_create(&cfg, &s), 0);
	base = vmm_base(s);
	for (i = 0; i < 8; i++)
		assert_int_equal(vmm_map(s, base + i * block, block), 0);
	for (i = 0; i < 8; i++)
		assert_int_equal(
			vmm_unmap(s, base + i * block, block, VMM_SYNCED), 0);
	assert_int_equal(vmm_trim(s, 0), 0);
	vmm_get_stats(s, &st);
	vmm_space_destroy(s);
	return (double)map_calls(&st) * (1 << 30) / (8.0 * block);
}

static void test_segments_fewer_calls(void **state)
{
	double one, seg;

	(void)state;
	one = calls_per_gib(chunk); /* one chunk per handle, as before */
	seg = calls_per_gib(0); /* the default segment size */
	print_message("calls per GiB: %.0f with one chunk per handle, %.0f "
		      "with segments (%.1fx fewer)\n",
		      one, seg, one / seg);
	assert_true(one >= 5 * seg);
}

/* ----------------------------------------------- driver-only: the fake */

#define RW 3 /* CU_MEM_ACCESS_FLAGS_PROT_READWRITE */

static void *fake_sym(const char *name)
{
	void *h = dlopen(getenv("STALLOC_LIBCUDA"), RTLD_NOW | RTLD_NOLOAD);

	return h ? dlsym(h, name) : NULL;
}

static int peer_space(const char *peers, struct vmm_space **s)
{
	struct vmm_config cfg = { .backend = "cuda",
				  .va_bytes = 64 * chunk,
				  .chunk_bytes = chunk,
				  .peers = peers };

	return vmm_space_create(&cfg, s);
}

static void test_peers(void **state)
{
	int (*set_peer)(int, int, int) = fake_sym("fakecuda_set_peer");
	int (*flags)(unsigned long long, int) =
		fake_sym("fakecuda_access_flags");
	struct vmm_space *s;
	uint64_t va;
	int d;

	(void)state;
	if (!fx_fake() || strcmp(backend, "cuda") || !set_peer || !flags)
		skip();
	/* default: every device that can access device 0 (4 devices) */
	assert_int_equal(peer_space(NULL, &s), 0);
	assert_int_equal(vmm_peer_mask(s), 0xe);
	va = vmm_base(s);
	assert_int_equal(vmm_map(s, va, 2 * chunk), 0);
	for (d = 0; d < 4; d++)
		assert_int_equal(flags(va + chunk, d), RW);
	/* later mappings too, and one access call for all the devices */
	assert_int_equal(vmm_alias(s, va, va + 8 * chunk, 2 * chunk), 0);
	assert_int_equal(flags(va + 9 * chunk, 3), RW);
	vmm_space_destroy(s);

	assert_int_equal(peer_space("none", &s), 0);
	assert_int_equal(vmm_peer_mask(s), 0);
	assert_int_equal(vmm_map(s, vmm_base(s), chunk), 0);
	assert_int_equal(flags(vmm_base(s), 0), RW);
	assert_int_equal(flags(vmm_base(s), 1), 0);
	vmm_space_destroy(s);

	assert_int_equal(peer_space("2,0", &s), 0);
	assert_int_equal(vmm_peer_mask(s), 0x4);
	assert_int_equal(vmm_map(s, vmm_base(s), chunk), 0);
	assert_int_equal(flags(vmm_base(s), 2), RW);
	assert_int_equal(flags(vmm_base(s), 1), 0);
	vmm_space_destroy(s);

	/* device 3 cannot reach device 0: "all" leaves it out ... */
	set_peer(3, 0, 0);
	assert_int_equal(peer_space("all", &s), 0);
	assert_int_equal(vmm_peer_mask(s), 0x6);
	/* ... and a device that loses access makes mapping fail cleanly */
	set_peer(2, 0, 0);
	assert_true(vmm_map(s, vmm_base(s), chunk) < 0);
	assert_non_null(strstr(stalloc_last_error(), "cuMemSetAccess"));
	assert_false(vmm_is_mapped(s, vmm_base(s), chunk));
	set_peer(2, 0, 1);
	vmm_space_destroy(s);
	/* naming it is an error */
	assert_int_equal(peer_space("3", &s), -EINVAL);
	assert_non_null(strstr(stalloc_last_error(), "cannot access"));
	assert_int_equal(peer_space("1,x", &s), -EINVAL);
	set_peer(3, 0, 1);
}

static void test_rdma_handle_types(void **state)
{
	struct fx *f = *state;
	int (*props)(unsigned long long, int *, unsigned int *, int *) =
		fake_sym("fakecuda_handle_props");
	const struct fx_fake *fk = fx_fake();
	unsigned int types = 9;
	int rdma = 9, ctx = 9;
	unsigned long n;

	if (!fk || strcmp(backend, "cuda") || !props)
		skip();
	assert_int_equal(vmm_map(f->s, va_at(f, 0), f->chunk), 0);
	assert_int_equal(props(va_at(f, 0), &rdma, &types, &ctx), 0);
	assert_int_equal(rdma, 1);
	assert_int_equal(types,
			 1); /* CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR */
	assert_int_equal(ctx, 0);
	/* refused with them: retried once without, and not asked again */
	n = fk->calls("cuMemCreate");
	fk->fail_nth("cuMemCreate", 1, 801 /* CUDA_ERROR_NOT_SUPPORTED */);
	assert_int_equal(vmm_map(f->s, va_at(f, 1), f->chunk), 0);
	assert_int_equal(fk->calls("cuMemCreate"), n + 2);
	assert_int_equal(props(va_at(f, 1), &rdma, &types, &ctx), 0);
	assert_int_equal(rdma, 0);
	assert_int_equal(types, 0);
	assert_int_equal(vmm_map(f->s, va_at(f, 2), f->chunk), 0);
	assert_int_equal(fk->calls("cuMemCreate"), n + 3);
	assert_int_equal(props(va_at(f, 2), &rdma, &types, &ctx), 0);
	assert_int_equal(rdma, 0);
}

typedef int (*ctx_fn)(void *);
typedef int (*retain_fn)(void **, int);
typedef int (*release_fn)(int);

static void test_primary_context(void **state)
{
	retain_fn retain = fake_sym("cuDevicePrimaryCtxRetain");
	release_fn release = fake_sym("cuDevicePrimaryCtxRelease_v2");
	ctx_fn push = fake_sym("cuCtxPushCurrent_v2");
	int (*pop)(void **) = fake_sym("cuCtxPopCurrent_v2");
	int (*get)(void **) = fake_sym("cuCtxGetCurrent");
	int (*props)(unsigned long long, int *, unsigned int *, int *) =
		fake_sym("fakecuda_handle_props");
	const struct fx_fake *fk = fx_fake();
	void *mine = NULL, *cur = NULL, *popped;
	struct vmm_space *s;
	unsigned long base;
	unsigned int types;
	int rdma, ctx = -1;

	(void)state;
	if (!fk || strcmp(backend, "cuda") || !retain || !release || !push ||
	    !pop || !get || !props)
		skip();
	base = fk->live_primary_retains();
	/* another device's context is current: ours is used, theirs kept */
	assert_int_equal(retain(&mine, 1), 0);
	assert_int_equal(push(mine), 0);
	assert_int_equal(peer_space(NULL, &s), 0);
	assert_int_equal(fk->live_primary_retains(), base + 2);
	assert_int_equal(vmm_map(s, vmm_base(s), chunk), 0);
	assert_int_equal(props(vmm_base(s), &rdma, &types, &ctx), 0);
	assert_int_equal(ctx, 0);
	assert_int_equal(get(&cur), 0);
	assert_ptr_equal(cur, mine);
	vmm_space_destroy(s);
	assert_int_equal(pop(&popped), 0);
	assert_int_equal(release(1), 0);
	/* device 0's primary current: retained by the space all the same,
	 * so the caller releasing its own retain cannot pull it away */
	assert_int_equal(retain(&mine, 0), 0);
	assert_int_equal(push(mine), 0);
	assert_int_equal(peer_space(NULL, &s), 0);
	assert_int_equal(fk->live_primary_retains(), base + 2);
	assert_int_equal(pop(&popped), 0);
	assert_int_equal(release(0), 0);
	assert_int_equal(vmm_map(s, vmm_base(s), chunk), 0);
	assert_true(fx_fill("cuda", vmm_base(s), chunk, 11));
	assert_true(fx_check("cuda", vmm_base(s), chunk, 11));
	assert_int_equal(get(&cur), 0);
	assert_null(cur);
	vmm_space_destroy(s);
	assert_int_equal(fk->live_primary_retains(), base);
}

/* ---------------------------------------------------- fork, lock held */

struct holder {
	struct vmm_space *s;
	pthread_mutex_t m;
	pthread_cond_t cv;
	int state; /* 1: holding, 2: told to let go */
};

static void *hold_lock(void *arg)
{
	struct holder *h = arg;

	sa_mutex_lock(&h->s->lock);
	pthread_mutex_lock(&h->m);
	h->state = 1;
	pthread_cond_broadcast(&h->cv);
	while (h->state != 2)
		pthread_cond_wait(&h->cv, &h->m);
	pthread_mutex_unlock(&h->m);
	sa_mutex_unlock(&h->s->lock);
	return NULL;
}

static int child_calls(struct fx *f)
{
	struct vmm_translation t;
	struct vmm_stats st;

	alarm(10); /* a hang dies of SIGALRM */
	if (!vmm_forked(f->s))
		return 1;
	if (vmm_map(f->s, va_at(f, 4), f->chunk) != -ECHILD ||
	    !strstr(stalloc_last_error(), "fork"))
		return 2;
	if (vmm_unmap(f->s, va_at(f, 0), f->chunk, 0) != -ECHILD ||
	    vmm_trim(f->s, 0) != -ECHILD || vmm_sync(f->s, NULL) != -ECHILD)
		return 3;
	if (vmm_lookup(f->s, va_at(f, 0), &t))
		return 4;
	vmm_get_stats(f->s, &st);
	vmm_space_destroy(f->s);
	return 0;
}

static void test_fork_lock_held(void **state)
{
	struct fx *f = *state;
	struct holder h = { .s = f->s,
			    .m = PTHREAD_MUTEX_INITIALIZER,
			    .cv = PTHREAD_COND_INITIALIZER };
	pthread_t th;
	int status;
	pid_t pid;

	assert_int_equal(vmm_map(f->s, va_at(f, 0), f->chunk), 0);
	assert_int_equal(pthread_create(&th, NULL, hold_lock, &h), 0);
	pthread_mutex_lock(&h.m);
	while (h.state != 1)
		pthread_cond_wait(&h.cv, &h.m);
	pthread_mutex_unlock(&h.m);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(child_calls(f));
	assert_int_equal(waitpid(pid, &status, 0), pid);
	pthread_mutex_lock(&h.m);
	h.state = 2;
	pthread_cond_broadcast(&h.cv);
	pthread_mutex_unlock(&h.m);
	pthread_join(th, NULL);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	/* the parent goes on as before */
	assert_false(vmm_forked(f->s));
	assert_int_equal(vmm_map(f->s, va_at(f, 1), f->chunk), 0);
}

/* --------------------------------------------------------- concurrency */

#define NR_WRITERS 4
#define NR_READERS 2
#define ROUNDS 100

struct conc {
	struct fx *f;
	int idx;
	volatile int stop;
	unsigned long lookups, hits;
	int failed;
};

/* Each writer owns 12 slots: 4 for mapping, 4 to remap to, 4 to alias. */
static void *writer(void *arg)
{
	struct conc *c = arg;
	struct fx *f = c->f;
	uint64_t a = va_at(f, 12 * c->idx), b = a + 4 * f->chunk;
	uint64_t d = b + 4 * f->chunk, n = 1 + c->idx % 3;
	int r;

	for (r = 0; r < ROUNDS && !c->failed; r++) {
		uint64_t bytes = n * f->chunk, seed = (uint64_t)r << 8 | c->idx;

		if (vmm_map(f->s, a, bytes))
			c->failed = 1;
		if (!fx_fill(backend, a, bytes, seed))
			c->failed = 6;
		if (vmm_remap(f->s, a, b, bytes, VMM_SYNCED) ||
		    !fx_check(backend, b, bytes, seed))
			c->failed = 2;
		if (vmm_alias(f->s, b, d, bytes) ||
		    !fx_check(backend, d, bytes, seed))
			c->failed = 3;
		if (vmm_unmap(f->s, b, bytes, VMM_SYNCED) ||
		    vmm_unmap(f->s, d, bytes, 0))
			c->failed = 4;
		if (r % 50 == 49 && vmm_trim(f->s, 4 * f->chunk))
			c->failed = 5;
	}
	return NULL;
}

static void *reader(void *arg)
{
	struct conc *c = arg;
	struct fx *f = c->f;
	uint64_t x = 88172645463325252ULL ^ (uint64_t)c->idx;
	struct vmm_translation t;

	while (!c->stop) {
		uint64_t slot;

		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		slot = x % (12 * NR_WRITERS);
		c->lookups++;
		if (vmm_lookup(f->s, va_at(f, (unsigned int)slot) + 8, &t)) {
			c->hits++;
			if (!t.chunk_id || t.chunk_offset != 8 ||
			    t.slot_va != va_at(f, (unsigned int)slot))
				c->failed = 1;
		}
	}
	return NULL;
}

static void test_concurrent(void **state)
{
	struct fx *f = *state;
	struct conc w[NR_WRITERS], r[NR_READERS];
	pthread_t wt[NR_WRITERS], rt[NR_READERS];
	struct vmm_stats st;
	int i;

	for (i = 0; i < NR_READERS; i++) {
		r[i] = (struct conc){ .f = f, .idx = i };
		assert_int_equal(pthread_create(&rt[i], NULL, reader, &r[i]),
				 0);
	}
	for (i = 0; i < NR_WRITERS; i++) {
		w[i] = (struct conc){ .f = f, .idx = i };
		assert_int_equal(pthread_create(&wt[i], NULL, writer, &w[i]),
				 0);
	}
	for (i = 0; i < NR_WRITERS; i++) {
		pthread_join(wt[i], NULL);
		assert_int_equal(w[i].failed, 0);
	}
	for (i = 0; i < NR_READERS; i++) {
		r[i].stop = 1;
		pthread_join(rt[i], NULL);
		assert_int_equal(r[i].failed, 0);
		assert_true(r[i].lookups > 0);
	}
	vmm_get_stats(f->s, &st);
	assert_int_equal(st.bytes_mapped, 0);
	assert_int_equal(st.chunks_live, st.chunks_pooled);
	assert_int_equal(st.chunks_live,
			 st.chunks_created - st.chunks_destroyed);
	assert_int_equal(st.phys_bytes, st.chunks_live * f->chunk);
	assert_true(st.phys_bytes_peak <= vmm_phys_limit(f->s));
}

/* ------------------------------------------------------ driver-only */

static void test_unmap_synchronises(void **state)
{
	struct fx *f = *state;
	const struct fx_fake *fk = fx_fake();
	unsigned long n;

	if (!fk || strcmp(backend, "cuda"))
		skip();
	assert_int_equal(vmm_map(f->s, va_at(f, 0), f->chunk), 0);
	assert_int_equal(vmm_map(f->s, va_at(f, 1), f->chunk), 0);
	n = fk->calls("cuCtxSynchronize");
	assert_int_equal(vmm_unmap(f->s, va_at(f, 0), f->chunk, 0), 0);
	assert_int_equal(fk->calls("cuCtxSynchronize"), n + 1);
	assert_int_equal(vmm_unmap(f->s, va_at(f, 1), f->chunk, VMM_SYNCED), 0);
	assert_int_equal(fk->calls("cuCtxSynchronize"), n + 1);
	/* a failing synchronisation keeps the mapping */
	assert_int_equal(vmm_map(f->s, va_at(f, 0), f->chunk), 0);
	fk->fail_nth("cuCtxSynchronize", 1, 999 /* CUDA_ERROR_UNKNOWN */);
	assert_int_equal(vmm_unmap(f->s, va_at(f, 0), f->chunk, 0), -EIO);
	assert_non_null(strstr(stalloc_last_error(), "cuCtxSynchronize"));
	assert_true(vmm_is_mapped(f->s, va_at(f, 0), f->chunk));
	assert_int_equal(fk->live_mappings(), 1);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
		T(test_geometry),
		T(test_map_write_read),
		T(test_remap_moves_pages),
		T(test_alias),
		T(test_pool_reuse_and_trim),
		T(test_map_fine),
		T(test_map_whole),
		T(test_bad_input),
		T(test_physical_limit),
		T(test_mapping_runs),
		T(test_fork_child_untouched),
		T(test_concurrent),
		T(test_unmap_synchronises),
		T(test_unmap_whole_segments),
		T(test_map_missing_unmap_present),
		T(test_shrink_floor),
		T(test_peers),
		T(test_rdma_handle_types),
		T(test_primary_context),
		T(test_fork_lock_held),
		cmocka_unit_test(test_segments_fewer_calls),
		cmocka_unit_test(test_fork_copy),
		cmocka_unit_test(test_config_errors),
		cmocka_unit_test(test_chunk_multiple),
#undef T
	};
	int fails = 0;

	if (getenv("TEST_FILTER")) /* e.g. TEST_FILTER=test_alias */
		cmocka_set_test_filter(getenv("TEST_FILTER"));
	chunk = 2 * MB;
	if (argc < 2 || !strcmp(argv[1], "host")) {
		backend = "host";
		fails += cmocka_run_group_tests_name("vmm/host", tests, NULL,
						     NULL);
		/* a small granularity exercises other geometry */
		setenv("STALLOC_HOST_GRANULARITY", "64K", 1);
		chunk = 64 * 1024;
		fails += cmocka_run_group_tests_name("vmm/host-64k", tests,
						     NULL, NULL);
		unsetenv("STALLOC_HOST_GRANULARITY");
		chunk = 2 * MB;
	}
	if (argc < 2 || !strcmp(argv[1], "cuda")) {
		/* the fake driver: devices for the peer tests */
		setenv("FAKECUDA_DEVICES", "4", 0);
		if (!vmm_cuda_available()) {
			fprintf(stderr, "vmm/cuda: no driver (%s)\n",
				stalloc_last_error());
			return fails + 1;
		}
		backend = "cuda";
		fails += cmocka_run_group_tests_name("vmm/cuda", tests, NULL,
						     NULL);
	}
	return fails;
}
