// SPDX-License-Identifier: MIT
/*
 * tests/test-mapper.c - the runtime's public entry points: off and trace
 *
 * The dynamic path in off mode (sizes, reuse, bad input, the cache and its
 * limit, out of memory, threads, slabs, driver failures, fork) and trace
 * mode (a traced workload, then planned).  Plan and auto modes are in
 * test-mapper-plan.c, streams and graph pools in test-mapper-streams.c;
 * what they share, and how they run, is in tests/mapper-fixture.h.
 */
#include <errno.h>
#include <pthread.h>
#include <sys/wait.h>

#include "tests/mapper-fixture.h"

static void test_basic(void **state)
{
	static const size_t sizes[] = { 1,	511,	    512,
					513,	4096,	    100000,
					2 * MB, 3 * MB + 7, 64 * MB };
	struct blk b[9];
	struct stalloc_stats st;
	size_t i, total = 0;

	(void)state;
	for (i = 0; i < 9; i++) {
		b[i].n = sizes[i];
		b[i].p = stalloc_malloc(sizes[i], 0, NULL);
		assert_non_null(b[i].p);
		assert_int_equal((uintptr_t)b[i].p % 512, 0);
		rb_stamp(b[i].p, b[i].n, i);
		total += sizes[i];
	}
	assert_disjoint(b, 9);
	for (i = 0; i < 9; i++)
		assert_true(rb_stamp_ok(b[i].p, b[i].n, i));
	assert_int_equal(stalloc_stats(0, &st), 0);
	assert_int_equal(st.allocated, total);
	assert_int_equal(st.allocs, 9);
	assert_true(st.mapped >= total && st.reserved >= total);
	for (i = 0; i < 9; i++)
		stalloc_free(b[i].p, b[i].n, 0, NULL);
	assert_int_equal(stalloc_stats(0, &st), 0);
	assert_int_equal(st.allocated, 0);
	assert_int_equal(st.frees, 9);
	assert_int_equal(st.bad_frees, 0);
	assert_int_equal(st.allocated_peak, total);
}

static void test_reuse(void **state)
{
	struct stalloc_stats a, b;
	void *p, *q;

	(void)state;
	p = stalloc_malloc(10 * MB, 0, NULL);
	assert_non_null(p);
	stalloc_free(p, 10 * MB, 0, NULL);
	stalloc_stats(0, &a);
	q = stalloc_malloc(10 * MB, 0, NULL);
	stalloc_stats(0, &b);
	assert_ptr_equal(p, q); /* best fit takes the block back */
	assert_int_equal(b.driver_calls, a.driver_calls); /* nothing mapped */
	stalloc_free(q, 0, 0, NULL); /* size 0: not checked */
}

/*
 * A request larger than a chunk takes the high end of a hole below the
 * top, a smaller one the low end: both fit the 16 MiB hole, with no
 * growth, and the large one ends where the hole did.
 */
static void test_two_ended(void **state)
{
	struct stalloc_stats a, b;
	void *h, *fence, *big, *small;

	(void)state;
	h = stalloc_malloc(16 * MB, 0, NULL);
	fence = stalloc_malloc(4 * MB, 0, NULL);
	assert_non_null(h);
	assert_non_null(fence);
	stalloc_free(h, 0, 0, NULL);
	stalloc_stats(0, &a);
	big = stalloc_malloc(8 * MB, 0, NULL);
	small = stalloc_malloc(1 * MB, 0, NULL);
	stalloc_stats(0, &b);
	assert_ptr_equal((char *)big + 8 * MB, fence);
	assert_ptr_equal(small, h);
	assert_int_equal(b.reserved, a.reserved);
	stalloc_free(big, 0, 0, NULL);
	stalloc_free(small, 0, 0, NULL);
	stalloc_free(fence, 0, 0, NULL);
}

static void test_bad_input(void **state)
{
	enum stalloc_log_level old = stalloc_set_log_level(STALLOC_LOG_NONE);
	struct stalloc_stats st;
	int on_stack;
	void *p;

	(void)state;
	assert_null(stalloc_malloc(0, 0, NULL));
	assert_non_null(strstr(stalloc_last_error(), "zero-size"));
	assert_null(stalloc_malloc(512, -1, NULL));
	assert_non_null(strstr(stalloc_last_error(), "device -1"));
	assert_null(stalloc_malloc(512, 64, NULL));
	p = stalloc_malloc(4096, 0, NULL);
	assert_non_null(p);
	stalloc_free(&on_stack, 4, 0, NULL); /* not ours */
	stalloc_free((char *)p + 512, 0, 0, NULL); /* inside a block */
	stalloc_free(p, 1234, 0, NULL); /* wrong size: left alone */
	rb_stamp(p, 4096, 9);
	assert_true(rb_stamp_ok(p, 4096, 9));
	stalloc_free(p, 4096, 0, NULL);
	stalloc_free(p, 4096, 0, NULL); /* twice */
	stalloc_free(NULL, 0, 0, NULL); /* ignored */
	stalloc_free(p, 0, 99, NULL); /* bad device */
	assert_int_equal(stalloc_stats(0, &st), 0);
	assert_int_equal(st.bad_frees, 4);
	assert_int_equal(st.frees, 1);
	assert_int_equal(st.allocated, 0);
	assert_int_equal(stalloc_stats(5, &st), -ENOENT);
	assert_int_equal(stalloc_stats(-5, &st), -EINVAL);
	stalloc_set_log_level(old);
}

static void test_empty_cache(void **state)
{
	struct stalloc_stats st;
	void *p[8];
	int i;

	(void)state;
	for (i = 0; i < 8; i++)
		p[i] = stalloc_malloc(8 * MB, 0, NULL);
	for (i = 0; i < 8; i++)
		stalloc_free(p[i], 8 * MB, 0, NULL);
	stalloc_stats(0, &st);
	assert_true(st.reserved >= 64 * MB); /* cached */
	stalloc_empty_cache();
	stalloc_stats(0, &st);
	assert_int_equal(st.mapped, 0);
	assert_int_equal(st.reserved, 0);
	/* and it grows again on demand */
	p[0] = stalloc_malloc(8 * MB, 0, NULL);
	assert_non_null(p[0]);
	rb_stamp(p[0], 8 * MB, 1);
	stalloc_free(p[0], 8 * MB, 0, NULL);
}

/* STALLOC_CACHE_LIMIT: the cache is given back past the high-water mark. */
static void test_high_water(void **state)
{
	struct stalloc_stats st;
	void *p[8];
	int i;

	(void)state;
	setenv("STALLOC_CACHE_LIMIT", "16M", 1);
	for (i = 0; i < 8; i++)
		p[i] = stalloc_malloc(8 * MB, 0, NULL);
	for (i = 0; i < 8; i++)
		stalloc_free(p[i], 8 * MB, 0, NULL);
	stalloc_stats(0, &st);
	/* 64 MiB freed; no more than the limit (plus a chunk) stays */
	assert_true(st.reserved <= 16 * MB + 2 * MB);
	unsetenv("STALLOC_CACHE_LIMIT");
}

static void test_oom(void **state)
{
	enum stalloc_log_level old = stalloc_set_log_level(STALLOC_LOG_NONE);
	uint64_t dev_bytes = fx_device_bytes(fx_env_backend());
	struct stalloc_stats st;
	void *p, *q;

	(void)state;
	/*
	 * 256 MiB of the device: a quarter of the 1 GiB the host backend and
	 * the fake driver are given, a sliver of a real GPU.
	 */
	assert_true(dev_bytes >= 512 * MB);
	stalloc_memory_fraction((double)(256 * MB) / (double)dev_bytes, 0);
	p = stalloc_malloc(200 * MB, 0, NULL);
	assert_non_null(p);
	assert_null(stalloc_malloc(100 * MB, 0, NULL));
	stalloc_stats(0, &st);
	assert_int_equal(st.oom, 1);
	assert_int_equal(st.alloc_retries, 1); /* trimmed, tried again */
	assert_int_equal(st.allocated_total, 200 * MB);
	q = stalloc_malloc(40 * MB, 0, NULL);
	assert_non_null(q);
	stalloc_free(p, 0, 0, NULL);
	/* the freed 200 MiB is cached; the retry path trims and reuses */
	p = stalloc_malloc(210 * MB, 0, NULL);
	assert_non_null(p);
	stalloc_free(p, 0, 0, NULL);
	stalloc_free(q, 0, 0, NULL);
	stalloc_set_log_level(old);
}

#define THREADS 4
#define ROUNDS 20000

static void *churn(void *arg)
{
	uint64_t x = 0x9e3779b97f4a7c15ULL * (uintptr_t)arg + 1;
	struct blk live[32] = { { 0 } };
	int r, failed = 0;

	for (r = 0; r < ROUNDS && !failed; r++) {
		int k;

		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		k = (int)(x % 32);
		if (live[k].p) {
			failed |= !rb_stamp_ok(live[k].p, live[k].n,
					       (uintptr_t)live[k].p);
			stalloc_free(live[k].p, live[k].n, 0, NULL);
			live[k].p = NULL;
		} else {
			live[k].n = 1 + (size_t)((x >> 20) % (1 << 20));
			live[k].p = stalloc_malloc(live[k].n, 0, NULL);
			failed |= !live[k].p;
			if (live[k].p)
				rb_stamp(live[k].p, live[k].n,
					 (uintptr_t)live[k].p);
		}
	}
	for (r = 0; r < 32; r++)
		if (live[r].p)
			stalloc_free(live[r].p, live[r].n, 0, NULL);
	return (void *)(uintptr_t)failed;
}

static volatile int trimming;

/* Trims (which wait for RCU grace periods) while the others churn. */
static void *trimmer(void *arg)
{
	(void)arg;
	while (trimming) {
		stalloc_empty_cache();
		usleep(1000);
	}
	return NULL;
}

static void test_threads(void **state)
{
	pthread_t t[THREADS], trim;
	struct stalloc_stats st;
	void *ret;
	int i;

	(void)state;
	trimming = 1;
	assert_int_equal(pthread_create(&trim, NULL, trimmer, NULL), 0);
	for (i = 0; i < THREADS; i++)
		assert_int_equal(pthread_create(&t[i], NULL, churn,
						(void *)(uintptr_t)i),
				 0);
	for (i = 0; i < THREADS; i++) {
		pthread_join(t[i], &ret);
		assert_null(ret);
	}
	trimming = 0;
	pthread_join(trim, NULL);
	stalloc_stats(0, &st);
	assert_int_equal(st.allocated, 0);
	assert_int_equal(st.bad_frees, 0);
	assert_int_equal(st.allocs, st.frees);
}

/* Trace mode: a regular workload, traced, then planned. */
static void test_trace_then_plan(void **state)
{
	char pattern[256], path[256];
	struct stalloc_plan *p;
	struct stalloc_plan_summary s;
	void *w, *act[6];
	int k, j;

	(void)state;
	snprintf(pattern, sizeof(pattern), "%s/t-%%d.trace", dir);
	snprintf(path, sizeof(path), "%s/t-0.trace", dir);
	setenv("STALLOC_MODE", "trace", 1);
	setenv("STALLOC_TRACE", pattern, 1);
	w = stalloc_malloc(32 * MB, 0, NULL); /* weights */
	for (k = 0; k < 4; k++) {
		stalloc_mark("iteration");
		for (j = 0; j < 6; j++)
			act[j] = stalloc_malloc((size_t)(j + 1) * MB, 0, NULL);
		for (j = 6; j-- > 0;)
			stalloc_free(act[j], 0, 0, NULL);
	}
	stalloc_free(w, 0, 0, NULL);
	stalloc_shutdown(); /* closes the trace */
	assert_int_equal(stalloc_plan_file(path, NULL, &p), 0);
	stalloc_plan_summary(p, &s);
	assert_int_equal(s.iterations, 4);
	assert_int_equal(s.static_requests, 6);
	assert_int_equal(s.persistent_requests, 1);
	assert_int_equal(s.dynamic_requests, 0);
	assert_int_equal(s.peak, s.lower_bound);
	stalloc_plan_free(p);
	unlink(path);
	setenv("STALLOC_MODE", "off", 1);
}

/*
 * Small requests come from slabs: no overlap, data kept, packed densely
 * (a thousand 512-byte objects within a few slabs), a double free is told,
 * and empty slabs go back on empty_cache.
 */
static void test_slab(void **state)
{
	enum stalloc_log_level old;
	static struct blk b[3000];
	struct stalloc_stats st;
	uintptr_t lo = UINTPTR_MAX, hi = 0;
	size_t i;

	(void)state;
	for (i = 0; i < 3000; i++) {
		b[i].n = i < 1000 ? 512 : 1 + (i * 7919) % 65536;
		b[i].p = stalloc_malloc(b[i].n, 0, NULL);
		assert_non_null(b[i].p);
		assert_int_equal((uintptr_t)b[i].p % 512, 0);
		rb_stamp(b[i].p, b[i].n, i);
		if (i < 1000) {
			lo = (uintptr_t)b[i].p < lo ? (uintptr_t)b[i].p : lo;
			hi = (uintptr_t)b[i].p > hi ? (uintptr_t)b[i].p : hi;
		}
	}
	/* 1000 x 512 B = 500 KiB: two slabs of 256 KiB, and a bit */
	assert_true(hi - lo < 3 * 256 * 1024);
	for (i = 0; i < 3000; i++)
		assert_true(rb_stamp_ok(b[i].p, b[i].n, i));
	assert_disjoint(b, 3000);
	for (i = 0; i < 3000; i += 2)
		stalloc_free(b[i].p, b[i].n, 0, NULL);
	for (i = 0; i < 3000; i += 2) {
		b[i].p = stalloc_malloc(b[i].n, 0, NULL);
		assert_non_null(b[i].p);
		rb_stamp(b[i].p, b[i].n, i);
	}
	assert_disjoint(b, 3000);
	for (i = 0; i < 3000; i++) {
		assert_true(rb_stamp_ok(b[i].p, b[i].n, i));
		stalloc_free(b[i].p, b[i].n, 0, NULL);
	}
	old = stalloc_set_log_level(STALLOC_LOG_NONE);
	stalloc_free(b[0].p, b[0].n, 0, NULL); /* twice */
	stalloc_set_log_level(old);
	stalloc_stats(0, &st);
	assert_int_equal(st.bad_frees, 1);
	assert_int_equal(st.allocated, 0);
	assert_int_equal(st.frees, 4500);
	stalloc_empty_cache();
	stalloc_stats(0, &st);
	assert_int_equal(st.mapped, 0);
}

/* Driver failures under the allocator: NULL, no leak, then recovery. */
static void test_driver_faults(void **state)
{
	enum stalloc_log_level old = stalloc_set_log_level(STALLOC_LOG_NONE);
	const struct fx_fake *fk = fx_fake();
	struct stalloc_stats st;
	void *p, *q;
	int n;

	(void)state;
	if (!fk) {
		skip();
		return;
	}
	p = stalloc_malloc(4 * MB, 0, NULL);
	assert_non_null(p);
	for (n = 1; n <= 3; n++) {
		/* the nth map of the next request fails: retry or NULL */
		fk->fail_nth("cuMemMap", (unsigned long)n, 2);
		q = stalloc_malloc(16 * MB, 0, NULL);
		if (q) {
			rb_stamp(q, 16 * MB, 3);
			stalloc_free(q, 0, 0, NULL);
		}
		fk->fail_clear();
	}
	fk->fail_always("cuMemCreate", 2);
	assert_null(stalloc_malloc(64 * MB, 0, NULL));
	fk->fail_clear();
	q = stalloc_malloc(64 * MB, 0, NULL);
	assert_non_null(q);
	stalloc_free(q, 0, 0, NULL);
	stalloc_free(p, 0, 0, NULL);
	stalloc_stats(0, &st);
	assert_int_equal(st.allocated, 0);
	assert_true(st.oom >= 1);
	stalloc_shutdown();
	assert_int_equal(fk->live_mappings(), 0);
	assert_int_equal(fk->live_handles(), 0);
	assert_int_equal(fk->live_reservations(), 0);
	assert_int_equal(fk->violations(), 0);
	stalloc_set_log_level(old);
}

static void *fork_churn(void *arg)
{
	volatile int *stop = arg;

	while (!*stop) {
		void *p = stalloc_malloc(3 * MB, 0, NULL);

		stalloc_free(p, 0, 0, NULL);
	}
	return NULL;
}

/*
 * fork() while another thread allocates: the child never deadlocks on a
 * lock held at fork time, and it does not touch the parent's device state
 * (it starts afresh).
 */
static void test_fork(void **state)
{
	/* a real driver refuses CUDA in a forked child: a clean NULL then */
	bool real = !strcmp(getenv("STALLOC_BACKEND"), "cuda") && !fx_fake();
	volatile int stop = 0;
	int i, status, bad = 0;
	pthread_t t;

	(void)state;
	stalloc_free(stalloc_malloc(MB, 0, NULL), 0, 0, NULL);
	assert_int_equal(pthread_create(&t, NULL, fork_churn, (void *)&stop),
			 0);
	for (i = 0; i < 20; i++) {
		pid_t pid = fork();

		if (pid == 0) {
			struct stalloc_stats st;
			void *p;

			alarm(10); /* a deadlock fails the test, not CI */
			if (!stalloc_stats(0, &st))
				_exit(3); /* the parent's device, reused */
			p = stalloc_malloc(MB, 0, NULL);
			if (!p)
				_exit(real ? 0 : 4);
			stalloc_free(p, 0, 0, NULL);
			_exit(0);
		}
		if (pid < 0 || waitpid(pid, &status, 0) != pid ||
		    !WIFEXITED(status) || WEXITSTATUS(status))
			bad++;
	}
	stop = 1;
	pthread_join(t, NULL);
	assert_int_equal(bad, 0);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		MAPPER_TEST(test_basic),
		MAPPER_TEST(test_reuse),
		MAPPER_TEST(test_two_ended),
		MAPPER_TEST(test_bad_input),
		MAPPER_TEST(test_empty_cache),
		MAPPER_TEST(test_high_water),
		MAPPER_TEST(test_oom),
		MAPPER_TEST(test_threads),
		MAPPER_TEST(test_trace_then_plan),
		MAPPER_TEST(test_fork),
		MAPPER_TEST(test_slab),
		MAPPER_TEST(test_driver_faults),
	};
	const char *group = mapper_init(argc, argv, "mapper");

	if (!group)
		return 1;
	return mapper_done(
		cmocka_run_group_tests_name(group, tests, NULL, NULL));
}
