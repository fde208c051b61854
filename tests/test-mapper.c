// SPDX-License-Identifier: MIT
/*
 * tests/test-mapper.c - the runtime's public entry points (off and trace)
 *
 * Runs on the host backend, and with "cuda" as argument on the driver
 * STALLOC_LIBCUDA names (the fake one: where the stream rule is checked:
 * reuse of a block on another stream waits for the stream that freed it;
 * same-stream reuse does not) or on libcuda.so.1.  Blocks are stamped and
 * checked through the fixture's copies, never through host pointers.
 * Every test ends with stalloc_shutdown(), so each starts from nothing.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include <stalloc/planner.h>
#include <stalloc/stalloc.h>

#include "tests/robust-common.h"
#include "tests/vmm-fixture.h"

#define MB (1ULL << 20)

static char dir[] = "/tmp/stalloc-map-XXXXXX";

static int setup(void **state)
{
	(void)state;
	setenv("STALLOC_MODE", "off", 1);
	setenv("STALLOC_HOST_MEM", "1G", 1);
	setenv("STALLOC_VA_SIZE", "4G", 1);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	stalloc_shutdown();
	return 0;
}

struct blk {
	char *p;
	size_t n;
};

static int by_addr(const void *a, const void *b)
{
	const struct blk *x = a, *y = b;

	return x->p < y->p ? -1 : x->p > y->p;
}

/* Independent check: no two live blocks overlap. */
static void assert_disjoint(struct blk *b, size_t n)
{
	struct blk *s = malloc(n * sizeof(*s));
	size_t i;

	memcpy(s, b, n * sizeof(*s));
	qsort(s, n, sizeof(*s), by_addr);
	for (i = 1; i < n; i++)
		assert_true(s[i - 1].p + s[i - 1].n <= s[i].p);
	free(s);
}

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

/* ----------------------------------------------------------- plan mode */

/*
 * One iteration of a small regular workload: 6 activations, freed in
 * reverse.  @extra inserts a request, @resize changes one size.
 */
static void workload_iter(struct blk *live, size_t scale, bool extra,
			  bool resize)
{
	void *x = NULL;
	int j;

	for (j = 0; j < 6; j++) {
		live[j].n = (size_t)(j + 1) * MB * scale;
		if (resize && j == 4)
			live[j].n += 4096;
		if (extra && j == 2)
			x = stalloc_malloc(3 * MB + 512, 0, NULL);
		live[j].p = stalloc_malloc(live[j].n, 0, NULL);
		assert_non_null(live[j].p);
		rb_stamp(live[j].p, live[j].n, j);
	}
	assert_disjoint(live, 6);
	for (j = 6; j-- > 0;) {
		assert_true(rb_stamp_ok(live[j].p, live[j].n, (uint64_t)j));
		stalloc_free(live[j].p, live[j].n, 0, NULL);
	}
	if (x)
		stalloc_free(x, 0, 0, NULL);
}

/* Trace the workload, plan it, and leave the plan in @plan. */
static void make_plan(char *plan, size_t len)
{
	char pattern[256], trace[256];
	struct stalloc_plan *p;
	struct blk live[6];
	void *w;
	int k;

	snprintf(pattern, sizeof(pattern), "%s/p-%%d.trace", dir);
	snprintf(trace, sizeof(trace), "%s/p-0.trace", dir);
	snprintf(plan, len, "%s/p.plan", dir);
	setenv("STALLOC_MODE", "trace", 1);
	setenv("STALLOC_TRACE", pattern, 1);
	w = stalloc_malloc(32 * MB, 0, NULL);
	for (k = 0; k < 4; k++) {
		stalloc_mark("iteration");
		workload_iter(live, 1, false, false);
	}
	stalloc_free(w, 0, 0, NULL);
	stalloc_shutdown();
	assert_int_equal(stalloc_plan_file(trace, NULL, &p), 0);
	assert_int_equal(stalloc_plan_write(p, plan), 0);
	stalloc_plan_free(p);
	unlink(trace);
	setenv("STALLOC_MODE", "plan", 1);
	setenv("STALLOC_PLAN", plan, 1);
}

static void test_plan_mode(void **state)
{
	struct stalloc_stats st;
	struct blk live[6];
	char plan[256];
	void *w;
	int k;

	(void)state;
	make_plan(plan, sizeof(plan));
	w = stalloc_malloc(32 * MB, 0, NULL);
	for (k = 0; k < 6; k++) {
		stalloc_mark("iteration");
		workload_iter(live, 1, false, false);
	}
	stalloc_stats(0, &st);
	/* the weights, then 6 requests in each of the 5 planned iterations */
	assert_int_equal(st.plan_hits, 1 + 5 * 6);
	assert_int_equal(st.plan_misses, 0);
	assert_int_equal(st.dynamic_bytes, 0);
	/* mapped: the pool (plus the warm-up's dynamic blocks) */
	assert_true(st.mapped <= 32 * MB + 21 * MB + 32 * MB);
	stalloc_free(w, 0, 0, NULL);
	unlink(plan);
}

/* No markers at run time: iteration starts are told from the requests. */
static void test_plan_no_markers(void **state)
{
	struct stalloc_stats a, b;
	struct blk live[6];
	char plan[256];
	void *w;
	int k;

	(void)state;
	make_plan(plan, sizeof(plan));
	w = stalloc_malloc(32 * MB, 0, NULL);
	for (k = 0; k < 3; k++)
		workload_iter(live, 1, false, false);
	stalloc_stats(0, &a);
	for (k = 0; k < 3; k++)
		workload_iter(live, 1, false, false);
	stalloc_stats(0, &b);
	/* the prologue is the weights and the first iteration; then all hit */
	assert_int_equal(b.plan_hits - a.plan_hits, 3 * 6);
	assert_int_equal(b.plan_misses, a.plan_misses);
	assert_true(a.plan_hits >= 1 + 6);
	stalloc_free(w, 0, 0, NULL);
	unlink(plan);
}

static void test_plan_perturbed(void **state)
{
	struct stalloc_stats a, b;
	struct blk live[6];
	char plan[256];
	void *w;
	int k;

	(void)state;
	make_plan(plan, sizeof(plan));
	w = stalloc_malloc(32 * MB, 0, NULL);
	for (k = 0; k < 3; k++) {
		stalloc_mark("iteration");
		workload_iter(live, 1, false, false);
	}
	stalloc_stats(0, &a);
	stalloc_mark("iteration");
	workload_iter(live, 1, true, false); /* an inserted request */
	stalloc_mark("iteration");
	workload_iter(live, 1, false, true); /* a resized request */
	stalloc_mark("iteration");
	workload_iter(live, 1, false, false); /* and back to normal */
	stalloc_stats(0, &b);
	assert_true(b.plan_misses - a.plan_misses <= 3 * 2);
	assert_int_equal(b.plan_hits - a.plan_hits, 6 + 5 + 6);
	stalloc_free(w, 0, 0, NULL);
	unlink(plan);
}

static void test_plan_other_workload(void **state)
{
	enum stalloc_log_level old = stalloc_set_log_level(STALLOC_LOG_NONE);
	struct stalloc_stats a, b;
	struct blk live[6];
	char plan[256];
	void *w;
	int k;

	(void)state;
	make_plan(plan, sizeof(plan));
	w = stalloc_malloc(64 * MB, 0, NULL); /* another model */
	for (k = 0; k < 3; k++) {
		stalloc_mark("iteration");
		workload_iter(live, 2, false, false);
	}
	stalloc_stats(0, &a);
	stalloc_mark("iteration");
	workload_iter(live, 2, false, false);
	stalloc_stats(0, &b);
	/* dropped after the first planned iteration: all dynamic now */
	assert_int_equal(b.plan_hits, a.plan_hits);
	assert_int_equal(b.plan_misses, a.plan_misses);
	stalloc_free(w, 0, 0, NULL);
	unlink(plan);
	stalloc_set_log_level(old);
}

static void test_plan_corrupt(void **state)
{
	enum stalloc_log_level old = stalloc_set_log_level(STALLOC_LOG_NONE);
	struct stalloc_stats st;
	char plan[256];
	FILE *f;
	void *p;

	(void)state;
	make_plan(plan, sizeof(plan));
	f = fopen(plan, "r+");
	assert_non_null(f);
	fseek(f, 40, SEEK_SET);
	fputc('#', f);
	fclose(f);
	p = stalloc_malloc(5 * MB, 0, NULL); /* off mode, with a warning */
	assert_non_null(p);
	stalloc_free(p, 0, 0, NULL);
	stalloc_stats(0, &st);
	assert_int_equal(st.plan_hits + st.plan_misses, 0);
	unlink(plan);
	stalloc_set_log_level(old);
}

/* One iteration with a request whose size varies (an expert buffer). */
static void *moe_iter(int k, void **b_out)
{
	void *a, *b, *c;

	a = stalloc_malloc(8 * MB, 0, NULL);
	stalloc_free(a, 0, 0, NULL);
	b = stalloc_malloc((size_t)(1 + k % 3) * MB, 0, NULL);
	rb_stamp(b, (size_t)(1 + k % 3) * MB, 7);
	stalloc_free(b, 0, 0, NULL);
	c = stalloc_malloc(8 * MB, 0, NULL);
	stalloc_free(c, 0, 0, NULL);
	*b_out = b;
	return a;
}

/* A dynamic request goes to the space the plan leaves free around it. */
static void test_plan_reuse(void **state)
{
	char pattern[256], trace[256], plan[256];
	struct stalloc_plan *p;
	struct stalloc_plan_summary s;
	struct stalloc_stats st;
	void *a, *b;
	int k;

	(void)state;
	snprintf(pattern, sizeof(pattern), "%s/r-%%d.trace", dir);
	snprintf(trace, sizeof(trace), "%s/r-0.trace", dir);
	snprintf(plan, sizeof(plan), "%s/r.plan", dir);
	setenv("STALLOC_MODE", "trace", 1);
	setenv("STALLOC_TRACE", pattern, 1);
	for (k = 0; k < 4; k++) {
		stalloc_mark("iteration");
		moe_iter(k, &b);
	}
	stalloc_shutdown();
	assert_int_equal(stalloc_plan_file(trace, NULL, &p), 0);
	stalloc_plan_summary(p, &s);
	assert_int_equal(s.dynamic_requests, 1);
	assert_int_equal(stalloc_plan_write(p, plan), 0);
	stalloc_plan_free(p);
	setenv("STALLOC_MODE", "plan", 1);
	setenv("STALLOC_PLAN", plan, 1);
	for (k = 0; k < 5; k++) {
		stalloc_mark("iteration");
		a = moe_iter(k, &b);
		if (k >= 2) /* planned iterations: b lands where a was */
			assert_ptr_equal(a, b);
	}
	stalloc_stats(0, &st);
	assert_int_equal(st.allocated, 0);
	unlink(trace);
	unlink(plan);
}

/* Auto mode: traced, planned in the background, switched to mid-run. */
static void test_auto_mode(void **state)
{
	char pattern[256], path[256];
	struct stalloc_stats a, b;
	struct blk live[6];
	void *w;
	int k;

	(void)state;
	snprintf(pattern, sizeof(pattern), "%s/auto-%%d.trace", dir);
	snprintf(path, sizeof(path), "%s/auto-0.trace", dir);
	setenv("STALLOC_MODE", "auto", 1);
	setenv("STALLOC_AUTO_ITERS", "4", 1);
	setenv("STALLOC_TRACE", pattern, 1);
	w = stalloc_malloc(32 * MB, 0, NULL);
	for (k = 0; k < 5; k++) { /* 4 traced, the 5th while planning */
		stalloc_mark("iteration");
		workload_iter(live, 1, false, false);
	}
	/* the planner runs in the background; wait for its result */
	for (k = 0; k < 500; k++) {
		stalloc_mark("iteration");
		workload_iter(live, 1, false, false);
		stalloc_stats(0, &a);
		if (a.plan_hits)
			break;
		usleep(10000);
	}
	assert_true(a.plan_hits > 0);
	stalloc_mark("iteration");
	workload_iter(live, 1, false, false);
	stalloc_stats(0, &b);
	/* a whole planned iteration: every request hits */
	assert_int_equal(b.plan_hits - a.plan_hits, 6);
	assert_int_equal(b.plan_misses, a.plan_misses);
	stalloc_free(w, 0, 0, NULL);
	unsetenv("STALLOC_AUTO_ITERS");
	unlink(path);
}

/* ------------------------------------------------- streams (fake driver) */

typedef int (*stream_create_fn)(void **s, unsigned int flags);

/* Two streams of the fake driver (a context is made current for them). */
static void fake_streams(void **a, void **b)
{
	int (*retain)(void **, int);
	int (*set)(void *);
	stream_create_fn create;
	void *h, *ctx;

	h = dlopen(getenv("STALLOC_LIBCUDA"), RTLD_NOW | RTLD_NOLOAD);
	assert_non_null(h);
	*(void **)&create = dlsym(h, "cuStreamCreate");
	*(void **)&retain = dlsym(h, "cuDevicePrimaryCtxRetain");
	*(void **)&set = dlsym(h, "cuCtxSetCurrent");
	assert_non_null(create);
	assert_int_equal(retain(&ctx, 0), 0);
	assert_int_equal(set(ctx), 0);
	assert_int_equal(create(a, 0), 0);
	assert_int_equal(create(b, 0), 0);
}

/*
 * Cross-stream reuse goes by checkpoint events (mapper/streams.h): one
 * stream records nothing; memory freed on a stream is handed to another
 * once its stream recorded a checkpoint after the free, by a wait on the
 * device; record_stream makes the free record at once; never a stall.
 */
static void test_streams(void **state)
{
	const struct fx_fake *fk = fx_fake();
	unsigned long r, n, sync, ssync;
	void *a, *b, *p0, *p, *q, *x, *s1, *s2;

	(void)state;
	if (!fk) {
		skip();
		return;
	}
	p0 = stalloc_malloc(4 * MB, 0, NULL); /* the device's first request */
	assert_non_null(p0);
	fake_streams(&a, &b);
	r = fk->calls("cuEventRecord");
	sync = fk->calls("cuCtxSynchronize");
	ssync = fk->calls("cuStreamSynchronize");
	stalloc_free(p0, 0, 0, NULL);
	assert_int_equal(fk->calls("cuEventRecord"), r); /* one stream */

	/* NULL has not checkpointed since its free: a takes new memory */
	p = stalloc_malloc(4 * MB, 0, a);
	assert_non_null(p);
	assert_ptr_not_equal(p, p0);
	/* NULL's next free checkpoints it (a wanted its memory) */
	q = stalloc_malloc(2 * MB, 0, NULL);
	stalloc_free(q, 0, 0, NULL);
	assert_int_equal(fk->calls("cuEventRecord"), r + 1);
	n = fk->calls("cuStreamWaitEvent");
	x = stalloc_malloc(4 * MB, 0, a); /* ready now: a waits, by event */
	assert_ptr_equal(x, p0);
	assert_int_equal(fk->calls("cuStreamWaitEvent"), n + 1);
	stalloc_free(x, 0, 0, a);
	x = stalloc_malloc(4 * MB, 0, a); /* same stream: nothing */
	assert_ptr_equal(x, p0);
	assert_int_equal(fk->calls("cuStreamWaitEvent"), n + 1);

	/* record_stream: the free records both streams' checkpoints */
	stalloc_record_stream(x, b);
	r = fk->calls("cuEventRecord");
	stalloc_free(x, 0, 0, a);
	assert_int_equal(fk->calls("cuEventRecord"), r + 2);
	x = stalloc_malloc(4 * MB, 0, b);
	assert_ptr_equal(x, p0);
	assert_int_equal(fk->calls("cuStreamWaitEvent"), n + 2);
	stalloc_free(x, 0, 0, b);
	stalloc_free(p, 0, 0, a);

	/* slab objects: the same rule */
	s1 = stalloc_malloc(1000, 0, a);
	stalloc_free(s1, 0, 0, a);
	s2 = stalloc_malloc(1000, 0, a);
	assert_ptr_equal(s1, s2);
	stalloc_free(s2, 0, 0, a);
	s2 = stalloc_malloc(1000, 0, b); /* not covered yet: elsewhere */
	assert_non_null(s2);
	assert_ptr_not_equal(s1, s2);
	stalloc_free(s2, 0, 0, b);

	assert_int_equal(fk->calls("cuCtxSynchronize"), sync);
	assert_int_equal(fk->calls("cuStreamSynchronize"), ssync);
	assert_int_equal(fk->violations(), 0);
}

/*
 * Two streams allocating and freeing over each other's memory, and the
 * record_stream pattern of NCCL collectives: device-wide syncs stay under
 * 1% of the allocations (PyTorch's own allocator makes none).
 */
static void test_stream_syncs(void **state)
{
	const struct fx_fake *fk = fx_fake();
	static struct blk live[64];
	unsigned long sync, allocs = 0;
	void *st[2];
	int i, k;

	(void)state;
	if (!fk) {
		skip();
		return;
	}
	live[0].p = stalloc_malloc(MB, 0, NULL);
	stalloc_free(live[0].p, 0, 0, NULL);
	fake_streams(&st[0], &st[1]);
	sync = fk->calls("cuCtxSynchronize");
	for (i = 0; i < 200; i++) {
		for (k = 0; k < 64; k++) {
			live[k].n = (size_t)(1 + (i * 64 + k) * 7919 % 97) *
				    64 * 1024;
			live[k].p = stalloc_malloc(live[k].n, 0, st[k & 1]);
			assert_non_null(live[k].p);
			allocs++;
		}
		for (k = 0; k < 64; k++)
			stalloc_free(live[k].p, live[k].n, 0, st[k & 1]);
	}
	for (i = 0; i < 3200; i++) {
		/* a bucket made on one stream, used by the collective's */
		void *t = stalloc_malloc(25 * MB, 0, st[0]);

		assert_non_null(t);
		allocs++;
		stalloc_record_stream(t, st[1]);
		stalloc_free(t, 25 * MB, 0, st[0]);
	}
	print_message("stream syncs: %lu device syncs for %lu allocations\n",
		      fk->calls("cuCtxSynchronize") - sync, allocs);
	assert_true((fk->calls("cuCtxSynchronize") - sync) * 100 <= allocs);
	assert_int_equal(fk->violations(), 0);
}

/*
 * A stream destroyed after its frees costs nothing: its handle is never
 * given to the driver again, and its memory comes back (the
 * out-of-memory path waits for the device).
 */
static void test_stream_destroyed(void **state)
{
	const struct fx_fake *fk = fx_fake();
	int (*destroy)(void *);
	void *a, *b, *p, *q;
	int i;

	(void)state;
	if (!fk) {
		skip();
		return;
	}
	stalloc_memory_fraction(1.0 / 16, 0); /* 64 MiB of FAKECUDA_MEM */
	p = stalloc_malloc(MB, 0, NULL);
	stalloc_free(p, 0, 0, NULL);
	fake_streams(&a, &b);
	*(void **)&destroy =
		dlsym(dlopen(getenv("STALLOC_LIBCUDA"), RTLD_NOW | RTLD_NOLOAD),
		      "cuStreamDestroy_v2");
	assert_non_null(destroy);
	p = stalloc_malloc(48 * MB, 0, a);
	assert_non_null(p);
	stalloc_free(p, 0, 0, a);
	assert_int_equal(destroy(a), 0);
	for (i = 0; i < 20; i++) {
		q = stalloc_malloc(48 * MB, 0, b);
		assert_non_null(q);
		stalloc_free(q, 0, 0, b);
	}
	assert_int_equal(fk->violations(), 0);
}

/*
 * Planned slots follow the stream rule too: iterations on one stream make
 * no driver call; the first iteration on another stream may wait for the
 * device once (the old stream had not checkpointed: a slot cannot go
 * elsewhere), after which the old stream checkpoints eagerly and later
 * iterations wait by events only; a planned block record_stream put on
 * another stream is handed over by events too.
 */
static void test_plan_streams(void **state)
{
	const struct fx_fake *fk = fx_fake();
	struct stalloc_stats st;
	struct blk live[6];
	unsigned long n, sync, stall;
	char plan[256];
	void *a, *b, *w, *p;
	int k, j;

	(void)state;
	if (!fk) {
		skip();
		return;
	}
	make_plan(plan, sizeof(plan));
	w = stalloc_malloc(32 * MB, 0, NULL);
	fake_streams(&a, &b);
	for (k = 0; k < 6; k++) {
		void *s = k < 4 ? a : b;

		if (k == 2) {
			n = fk->calls("cuStreamWaitEvent");
			sync = fk->calls("cuCtxSynchronize");
			stall = fk->calls("cuStreamSynchronize");
		}
		if (k == 4) {
			/* one stream so far: no driver call */
			assert_int_equal(fk->calls("cuStreamWaitEvent"), n);
			assert_int_equal(fk->calls("cuCtxSynchronize"), sync);
		}
		if (k == 5) /* a to b: at most one device sync */
			assert_true(fk->calls("cuCtxSynchronize") <= sync + 1);
		stalloc_mark("iteration");
		for (j = 0; j < 6; j++) {
			live[j].n = (size_t)(j + 1) * MB;
			live[j].p = stalloc_malloc(live[j].n, 0, s);
			assert_non_null(live[j].p);
		}
		assert_disjoint(live, 6);
		if (k == 5)
			stalloc_record_stream(live[0].p, a);
		for (j = 6; j-- > 0;)
			stalloc_free(live[j].p, live[j].n, 0, s);
	}
	assert_true(fk->calls("cuStreamWaitEvent") > n);
	assert_int_equal(fk->calls("cuStreamSynchronize"), stall);
	stalloc_stats(0, &st);
	assert_int_equal(st.plan_misses, 0);
	assert_int_equal(st.plan_hits, 1 + 5 * 6);
	/* the block record_stream named: handed over by events */
	sync = fk->calls("cuCtxSynchronize");
	n = fk->calls("cuStreamWaitEvent");
	stalloc_mark("iteration");
	p = stalloc_malloc(1 * MB, 0, b);
	assert_non_null(p);
	assert_int_equal(fk->calls("cuCtxSynchronize"), sync);
	assert_true(fk->calls("cuStreamWaitEvent") > n);
	stalloc_free(p, 0, 0, b);
	stalloc_free(w, 0, 0, NULL);
	assert_int_equal(fk->violations(), 0);
	unlink(plan);
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

static int only_stream(void *ctx, void *stream)
{
	return stream == ctx;
}

static int drops;

static void count_drop(void *ctx)
{
	(void)ctx;
	drops++;
}

/*
 * CUDA graph pools: what a capture allocates is the pool's until it is
 * released; ordinary memory freed during the capture is set aside until it
 * ends; the pool reuses its own freed blocks; unknown ids are refused.
 */
static void test_graph_pool(void **state)
{
	void *cap = (void *)0x1000, *other = (void *)0x2000;
	void *x, *p, *q, *y, *z;
	const struct fx_fake *fk = fx_fake();
	unsigned long sync = fk ? fk->calls("cuCtxSynchronize") : 0;

	(void)state;
	if (fk) {
		void *a;

		x = stalloc_malloc(MB, 0, NULL);
		stalloc_free(x, 0, 0, NULL);
		fake_streams(&a, &cap);
		fake_streams(&other, &a);
		sync = fk->calls("cuCtxSynchronize");
	}
	x = stalloc_malloc(4 * MB, 0, cap); /* ordinary, before the capture */
	assert_non_null(x);
	drops = 0;
	assert_int_equal(
		stalloc_pool_begin(0, 7, 9, only_stream, cap, count_drop), 0);
	assert_int_equal(stalloc_pool_begin(0, 7, 9, NULL, NULL, NULL), -EBUSY);
	stalloc_free(x, 0, 0, cap); /* set aside: the graph may not get it */
	p = stalloc_malloc(4 * MB, 0, cap);
	assert_non_null(p);
	assert_ptr_not_equal(p, x);
	y = stalloc_malloc(4 * MB, 0, other); /* not the pool's stream */
	assert_ptr_not_equal(y, x);
	assert_ptr_not_equal(y, p);
	stalloc_free(p, 0, 0, cap); /* the pool reuses its own blocks */
	q = stalloc_malloc(4 * MB, 0, cap);
	assert_ptr_equal(q, p);
	assert_int_equal(stalloc_pool_end(0, 7, 9), 0);
	assert_int_equal(drops, 1);
	assert_int_equal(stalloc_pool_end(0, 7, 9), -ENOENT);

	/* after the capture: x is free again, q stays the graph's */
	z = stalloc_malloc(4 * MB, 0, cap);
	assert_ptr_not_equal(z, q);
	if (!fk) /* on the fake, x merged with memory of other streams */
		assert_ptr_equal(z, x);
	stalloc_free(q, 0, 0, cap);
	stalloc_free(z, 0, 0, cap);
	z = stalloc_malloc(4 * MB, 0, cap);
	assert_ptr_not_equal(z, q);
	stalloc_free(z, 0, 0, cap);
	stalloc_free(y, 0, 0, other);
	assert_int_equal(stalloc_pool_release(0, 7, 9), 0);
	assert_int_equal(stalloc_pool_release(0, 7, 9), -ENOENT);
	if (fk) {
		assert_int_equal(fk->calls("cuCtxSynchronize"), sync);
		assert_int_equal(fk->violations(), 0);
	}
}

/*
 * A real capture on the strict fake driver, as torch.cuda.graph() makes
 * one: pool hooks around cuStreamBeginCapture/EndCapture, allocations and
 * frees on the capturing stream, memory freed before on other streams
 * (the legacy one too), empty_cache and eager work elsewhere meanwhile.
 * The capture must not be invalidated and no rule broken.
 */
static void test_graph_capture(void **state)
{
	const struct fx_fake *fk = fx_fake();
	int (*begin)(void *, int), (*end)(void *, void **), (*gdestroy)(void *);
	unsigned long (*invalidated)(void);
	int (*launch)(void *, unsigned long long, unsigned long long, int);
	void *a, *cap, *h, *graph = NULL, *p[8], *x, *y, *n;
	int i;

	(void)state;
	if (!fk) {
		skip();
		return;
	}
	n = stalloc_malloc(8 * MB, 0, NULL);
	fake_streams(&a, &cap);
	h = dlopen(getenv("STALLOC_LIBCUDA"), RTLD_NOW | RTLD_NOLOAD);
	*(void **)&begin = dlsym(h, "cuStreamBeginCapture_v2");
	*(void **)&end = dlsym(h, "cuStreamEndCapture");
	*(void **)&gdestroy = dlsym(h, "cuGraphDestroy");
	*(void **)&invalidated = dlsym(h, "fakecuda_captures_invalidated");
	*(void **)&launch = dlsym(h, "fakecuda_launch");
	assert_true(begin && end && gdestroy && invalidated && launch);
	/* memory freed on other streams before the capture */
	x = stalloc_malloc(6 * MB, 0, a);
	assert_int_equal(launch(a, (uintptr_t)x, 6 * MB, 1), 0);
	stalloc_free(x, 0, 0, a);
	stalloc_free(n, 0, 0, NULL);
	y = stalloc_malloc(2 * MB, 0, NULL); /* eager, freed during capture */

	assert_int_equal(stalloc_pool_begin(0, 1, 1, only_stream, cap, NULL),
			 0);
	assert_int_equal(begin(cap, 0 /* CU_STREAM_CAPTURE_MODE_GLOBAL */), 0);
	for (i = 0; i < 8; i++) {
		size_t sz = i % 2 ? 1000 : (size_t)(i + 1) * MB;

		p[i] = stalloc_malloc(sz, 0, cap);
		assert_non_null(p[i]);
		assert_int_equal(launch(cap, (uintptr_t)p[i], sz, 1), 0);
		if (i >= 2) /* in-graph reuse */
			stalloc_free(p[i - 2], 0, 0, cap);
	}
	stalloc_free(y, 0, 0, NULL);
	stalloc_empty_cache();
	x = stalloc_malloc(4 * MB, 0, a); /* eager work on another stream */
	assert_non_null(x);
	assert_int_equal(end(cap, &graph), 0);
	assert_non_null(graph);
	assert_int_equal(stalloc_pool_end(0, 1, 1), 0);
	assert_int_equal(invalidated(), 0);

	stalloc_free(x, 0, 0, a);
	stalloc_free(p[6], 0, 0, cap);
	stalloc_free(p[7], 0, 0, cap);
	assert_int_equal(gdestroy(graph), 0);
	assert_int_equal(stalloc_pool_release(0, 1, 1), 0);
	x = stalloc_malloc(64 * MB, 0, a); /* after: everything usable */
	assert_non_null(x);
	stalloc_free(x, 0, 0, a);
	assert_int_equal(fk->violations(), 0);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
		T(test_basic),		T(test_reuse),
		T(test_bad_input),	T(test_empty_cache),
		T(test_high_water),	T(test_oom),
		T(test_threads),	T(test_trace_then_plan),
		T(test_plan_mode),	T(test_plan_no_markers),
		T(test_plan_perturbed), T(test_plan_other_workload),
		T(test_plan_corrupt),	T(test_auto_mode),
		T(test_plan_reuse),	T(test_streams),
		T(test_stream_syncs),	T(test_stream_destroyed),
		T(test_graph_pool),	T(test_graph_capture),
		T(test_fork),		T(test_plan_streams),
		T(test_slab),		T(test_driver_faults),
#undef T
	};
	const char *backend = argc > 1 ? argv[1] : "host";
	int ret;

	if (!mkdtemp(dir))
		return 1;
	setenv("STALLOC_BACKEND", backend, 1);
	setenv("FAKECUDA_MEM", "1G", 1); /* read at cuInit: the same device */
	if (getenv("TEST_FILTER"))
		cmocka_set_test_filter(getenv("TEST_FILTER"));
	ret = cmocka_run_group_tests_name(
		!strcmp(backend, "cuda") ? "mapper/cuda" : "mapper/host", tests,
		NULL, NULL);
	rmdir(dir);
	return ret;
}
