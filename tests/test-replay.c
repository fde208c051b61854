// SPDX-License-Identifier: MIT
/*
 * tests/test-replay.c - the models of PyTorch's allocator (tools/cli/replay/)
 *
 * Each case is small enough to work out by hand from the rules of
 * CUDACachingAllocator.cpp; the comment above each check says how its
 * expected figure comes about.  MiB = 1048576 bytes.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "tools/cli/replay/replay.h"

#define MIB (1ULL << 20)

static struct cmodel *model(int kind, uint64_t capacity, uint64_t mss)
{
	struct cm_config cfg = {
		.kind = kind,
		.capacity = capacity ? capacity : (1ULL << 40),
		.max_split_size = mss,
	};
	struct cmodel *m = cm_create(&cfg);

	assert_non_null(m);
	return m;
}

static struct cm_block *get(struct cmodel *m, uint64_t size, uint64_t stream,
			    uint64_t *addr)
{
	struct cm_block *b = NULL;
	uint64_t a = 0;

	assert_int_equal(cm_malloc(m, size, stream, &b, &a), 0);
	if (addr)
		*addr = a;
	return b;
}

static struct cm_stats stats(const struct cmodel *m)
{
	struct cm_stats st;

	cm_get_stats(m, &st);
	return st;
}

/* ------------------------------------------------------------ caching */

static void test_small_pool(void **state)
{
	struct cmodel *m = model(CM_CACHING, 0, 0);
	uint64_t a1, a2;

	(void)state;
	get(m, 1000, 0, &a1);
	/* 1000 B <= 1 MiB: small pool, one 2 MiB cudaMalloc (kSmallBuffer) */
	assert_int_equal(stats(m).reserved, 2 * MIB);
	assert_int_equal(stats(m).cuda_malloc, 1);
	/* rounded up to a multiple of 512 (kMinBlockSize): 1024 */
	assert_int_equal(stats(m).allocated, 1024);
	get(m, 1, 0, &a2);
	/* the 2 MiB segment was split: the next request comes after it,
	 * rounded to 512 B, and no new segment is made */
	assert_int_equal(a2, a1 + 1024);
	assert_int_equal(stats(m).allocated, 1024 + 512);
	assert_int_equal(stats(m).reserved_peak, 2 * MIB);
	cm_destroy(m);
}

static void test_large_20mib(void **state)
{
	struct cmodel *m = model(CM_CACHING, 0, 0);
	uint64_t a1, a2;

	(void)state;
	get(m, 3 * MIB, 0, &a1);
	/* 1 MiB < 3 MiB < 10 MiB (kMinLargeAlloc): a 20 MiB segment */
	assert_int_equal(stats(m).reserved, 20 * MIB);
	get(m, 5 * MIB, 0, &a2);
	/* the 17 MiB left (> kSmallSize) was split off and now serves
	 * 5 MiB right after the first block: still 20 MiB reserved */
	assert_int_equal(a2, a1 + 3 * MIB);
	assert_int_equal(stats(m).reserved_peak, 20 * MIB);
	assert_int_equal(stats(m).cuda_malloc, 1);
	cm_destroy(m);
}

static void test_large_rounding(void **state)
{
	struct cmodel *m = model(CM_CACHING, 0, 0);

	(void)state;
	get(m, 11 * MIB + 1, 0, NULL);
	/* >= 10 MiB: cudaMalloc of the size rounded up to 2 MiB
	 * (kRoundLarge): 11 MiB + 512 -> 12 MiB */
	assert_int_equal(stats(m).reserved, 12 * MIB);
	/* the 1 MiB - 512 left is not > kSmallSize: no split, the whole
	 * 12 MiB block is allocated */
	assert_int_equal(stats(m).allocated, 12 * MIB);
	cm_destroy(m);
}

static void test_split_coalesce(void **state)
{
	struct cmodel *m = model(CM_CACHING, 0, 0);
	struct cm_block *a, *b, *c;
	uint64_t pa, pb, pd;

	(void)state;
	a = get(m, 1024, 0, &pa);
	b = get(m, 1024, 0, &pb);
	c = get(m, 1024, 0, NULL);
	cm_free(m, b);
	/* best fit: the freed 1024 B hole in the middle, not the tail */
	get(m, 600, 0, &pd);
	assert_int_equal(pd, pb);
	cm_free(m, a);
	cm_free(m, c);
	/* one 1024 B block still live: the segment is split, so emptying
	 * the cache gives nothing back */
	cm_empty_cache(m);
	assert_int_equal(stats(m).reserved, 2 * MIB);
	cm_destroy(m);

	m = model(CM_CACHING, 0, 0);
	a = get(m, 1024, 0, NULL);
	b = get(m, 1024, 0, NULL);
	c = get(m, 1024, 0, NULL);
	cm_free(m, b);
	cm_free(m, a);
	cm_free(m, c);
	/* every free merged with its free neighbours: one 2 MiB block,
	 * unsplit, which empty_cache releases with one cudaFree */
	cm_empty_cache(m);
	assert_int_equal(stats(m).reserved, 0);
	assert_int_equal(stats(m).cuda_free, 1);
	assert_int_equal(stats(m).reserved_peak, 2 * MIB);
	cm_destroy(m);
}

static void test_per_stream(void **state)
{
	struct cmodel *m = model(CM_CACHING, 0, 0);
	uint64_t a1, a2;

	(void)state;
	cm_free(m, get(m, 12 * MIB, 1, &a1));
	get(m, 12 * MIB, 2, &a2);
	/* stream 1's cached 12 MiB segment is not for stream 2: a second
	 * cudaMalloc, 24 MiB reserved */
	assert_int_not_equal(a1, a2);
	assert_int_equal(stats(m).reserved_peak, 24 * MIB);
	get(m, 12 * MIB, 1, &a2);
	/* stream 1 finds its own cached block again */
	assert_int_equal(a2, a1);
	assert_int_equal(stats(m).cuda_malloc, 2);
	cm_destroy(m);
}

static void test_oom_retry(void **state)
{
	struct cmodel *m = model(CM_CACHING, 20 * MIB, 0);
	struct cm_block *b = NULL;
	uint64_t a;

	(void)state;
	cm_free(m, get(m, 12 * MIB, 1, NULL));
	get(m, 12 * MIB, 2, NULL);
	/* 12 + 12 MiB > 20 MiB: the first cudaMalloc fails, the cached
	 * segment of stream 1 is freed (release_cached_blocks) and the
	 * retry succeeds: 12 MiB held, the peak never passed 12 MiB */
	assert_int_equal(stats(m).reserved, 12 * MIB);
	assert_int_equal(stats(m).reserved_peak, 12 * MIB);
	assert_int_equal(stats(m).retries, 1);
	assert_int_equal(stats(m).cuda_free, 1);
	assert_int_equal(stats(m).failed_calls, 1);
	/* 10 MiB more cannot fit even with the cache empty: OOM */
	assert_int_equal(cm_malloc(m, 10 * MIB, 2, &b, &a), -ENOSPC);
	assert_int_equal(stats(m).ooms, 1);
	assert_int_equal(stats(m).reserved, 12 * MIB);
	cm_destroy(m);
}

static void test_max_split_size(void **state)
{
	struct cmodel *m = model(CM_CACHING, 0, 0);
	uint64_t a1, a2;

	(void)state;
	/* without max_split_size a cached 40 MiB block serves 12 MiB,
	 * split: still 40 MiB reserved */
	cm_free(m, get(m, 40 * MIB, 0, &a1));
	get(m, 12 * MIB, 0, &a2);
	assert_int_equal(a2, a1);
	assert_int_equal(stats(m).reserved_peak, 40 * MIB);
	cm_destroy(m);

	m = model(CM_CACHING, 0, 32 * MIB);
	cm_free(m, get(m, 40 * MIB, 0, &a1));
	get(m, 12 * MIB, 0, &a2);
	/* with max_split_size 32 MiB the 40 MiB block is oversize and
	 * never serves a request below 32 MiB: a new 12 MiB segment */
	assert_int_not_equal(a2, a1);
	assert_int_equal(stats(m).reserved_peak, 52 * MIB);
	get(m, 39 * MIB, 0, &a2);
	/* an oversize request takes it whole, being within kLargeBuffer
	 * (40 < 39 + 20 MiB), unsplit: 40 + 12 MiB allocated */
	assert_int_equal(a2, a1);
	assert_int_equal(stats(m).allocated, 52 * MIB);
	cm_destroy(m);

	m = model(CM_CACHING, 50 * MIB, 32 * MIB);
	cm_free(m, get(m, 40 * MIB, 0, &a1));
	get(m, 12 * MIB, 0, NULL);
	/* 40 + 12 MiB > 50 MiB: release_available_cached_blocks frees the
	 * oversize block (no full release_cached_blocks retry) */
	assert_int_equal(stats(m).reserved, 12 * MIB);
	assert_int_equal(stats(m).reserved_peak, 40 * MIB);
	assert_int_equal(stats(m).retries, 0);
	assert_int_equal(stats(m).cuda_free, 1);
	cm_destroy(m);
}

/* --------------------------------------------------------- expandable */

static void test_xs_small(void **state)
{
	struct cmodel *m = model(CM_EXPANDABLE, 0, 0);
	uint64_t a1, a2;

	(void)state;
	get(m, 1000, 0, &a1);
	/* one segment reserved for (stream 0, small pool), one 2 MiB page
	 * created and mapped, one set_access */
	assert_int_equal(stats(m).va_reserve, 1);
	assert_int_equal(stats(m).reserved, 2 * MIB);
	assert_int_equal(stats(m).mem_create, 1);
	assert_int_equal(stats(m).mem_map, 1);
	assert_int_equal(stats(m).mem_set_access, 1);
	get(m, 1000, 0, &a2);
	/* the rest of the page serves the next one: nothing mapped */
	assert_int_equal(a2, a1 + 1024);
	assert_int_equal(stats(m).mem_map, 1);
	cm_destroy(m);
}

static void test_xs_grow(void **state)
{
	struct cmodel *m = model(CM_EXPANDABLE, 0, 0);
	struct cmodel *c = model(CM_CACHING, 0, 0);
	struct cm_block *b1, *b2;
	uint64_t a1, a2;

	(void)state;
	b1 = get(m, 3 * MIB, 0, &a1);
	/* large pool: one 20 MiB page */
	assert_int_equal(stats(m).reserved, 20 * MIB);
	b2 = get(m, 25 * MIB, 0, &a2);
	/* the 17 MiB free after the first block grows into one more
	 * 20 MiB page: 25 MiB fits at a1 + 3 MiB, 40 MiB held */
	assert_int_equal(a2, a1 + 3 * MIB);
	assert_int_equal(stats(m).reserved_peak, 40 * MIB);
	assert_int_equal(stats(m).mem_map, 2);
	/* the classic allocator needs a 26 MiB segment: 46 MiB */
	get(c, 3 * MIB, 0, NULL);
	get(c, 25 * MIB, 0, NULL);
	assert_int_equal(stats(c).reserved_peak, 46 * MIB);
	cm_free(m, b1);
	cm_free(m, b2);
	cm_empty_cache(m);
	/* everything free: both pages unmapped and released, and the
	 * segment, left wholly unmapped, released too */
	assert_int_equal(stats(m).reserved, 0);
	assert_int_equal(stats(m).mem_unmap, 2);
	assert_int_equal(stats(m).va_free, 1);
	assert_int_equal(stats(m).segments, 0);
	cm_destroy(c);
	cm_destroy(m);
}

/* cm_segments(): ranges and bytes as the model holds them. */
struct seg_sum {
	uint64_t bytes, n, lo;
};

static void add_seg(void *arg, uint64_t base, uint64_t size)
{
	struct seg_sum *s = arg;

	s->bytes += size;
	s->n++;
	if (!s->lo || base < s->lo)
		s->lo = base;
}

static void test_segments(void **state)
{
	struct cmodel *c = model(CM_CACHING, 0, 0);
	struct cmodel *x = model(CM_EXPANDABLE, 0, 0);
	struct seg_sum s = { 0 };
	uint64_t a;

	(void)state;
	get(c, 1000, 0, &a); /* a 2 MiB small segment */
	get(c, 3 * MIB, 0, NULL); /* a 20 MiB large one */
	get(c, 25 * MIB, 0, NULL); /* 26 MiB */
	cm_segments(c, add_seg, &s);
	assert_int_equal(s.n, 3);
	assert_int_equal(s.bytes, stats(c).reserved);
	assert_int_equal(s.bytes, 48 * MIB);
	s = (struct seg_sum){ 0 };
	get(x, 3 * MIB, 0, NULL);
	get(x, 25 * MIB, 0, NULL);
	/* one expandable segment, two pages mapped in one run */
	cm_segments(x, add_seg, &s);
	assert_int_equal(s.n, 1);
	assert_int_equal(s.bytes, 40 * MIB);
	cm_destroy(c);
	cm_destroy(x);
}

static void test_xs_streams_oom(void **state)
{
	struct cmodel *m = model(CM_EXPANDABLE, 40 * MIB, 0);
	struct cm_block *b = NULL;
	uint64_t a;

	(void)state;
	cm_free(m, get(m, 15 * MIB, 1, NULL));
	get(m, 30 * MIB, 2, NULL);
	/* stream 2 has a segment of its own; its two 20 MiB pages do not
	 * fit next to stream 1's cached page (60 > 40 MiB): the OOM path
	 * unmaps stream 1's free page and the retry maps 40 MiB */
	assert_int_equal(stats(m).va_reserve, 2);
	assert_int_equal(stats(m).reserved, 40 * MIB);
	assert_int_equal(stats(m).reserved_peak, 40 * MIB);
	assert_int_equal(stats(m).retries, 1);
	assert_int_equal(stats(m).va_free, 1);
	/* 10 MiB more on stream 2: the 10 MiB left in its second page */
	get(m, 10 * MIB, 2, NULL);
	/* and nothing more fits */
	assert_int_equal(cm_malloc(m, 1 * MIB + 1, 2, &b, &a), -ENOSPC);
	assert_int_equal(stats(m).ooms, 1);
	cm_destroy(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_small_pool),
		cmocka_unit_test(test_large_20mib),
		cmocka_unit_test(test_large_rounding),
		cmocka_unit_test(test_split_coalesce),
		cmocka_unit_test(test_per_stream),
		cmocka_unit_test(test_oom_retry),
		cmocka_unit_test(test_max_split_size),
		cmocka_unit_test(test_xs_small),
		cmocka_unit_test(test_xs_grow),
		cmocka_unit_test(test_xs_streams_oom),
		cmocka_unit_test(test_segments),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
