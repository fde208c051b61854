// SPDX-License-Identifier: MIT
/*
 * tests/test-torture.c - many threads, two devices, planned and random
 * traffic at once
 *
 * For each thread count (TORTURE_THREADS, default "2,4,8,16"), for
 * TORTURE_MS milliseconds (default 2000): one thread replays the shared
 * dense training trace in plan mode on device 0 (its prologue once, then
 * its third iteration over and over, gradients carried from one pass to
 * the next), and the others allocate and free random sizes (small, medium
 * and a few large) on devices 0 and 1, emptying the cache now and then.
 * Every thread checks its own blocks against its own live set and stamps
 * them; a block's stamps are checked before it is freed.
 *
 * Eight times per configuration every thread stops at a barrier (a
 * quiescent point): the blocks of all threads must be pairwise disjoint on
 * each device, and each device's statistics must agree with them
 * (allocs - frees == blocks live, allocated == their bytes).  At the end
 * every block is freed: allocated 0, allocs == frees, no bad free; after
 * stalloc_shutdown() the fake driver (argument "cuda") holds nothing.
 *
 * Built as is for make check (and ASan with SANITIZE=1) and with
 * -fsanitize=thread by make check-tsan.
 *
 * Locking: the threads share nothing but the allocator, the stop and
 * pause flags (atomics) and the barrier; the main thread reads the
 * threads' records only between two barrier waits, when they are stopped.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include <stalloc/planner.h>
#include <stalloc/stalloc.h>

#include "tests/robust-common.h"
#include "tests/vmm-fixture.h"

#define NR_DEV 2
#define SLOTS 64
#define MAX_THREADS 64
#define EPOCHS 8

static char dir[] = "/tmp/stalloc-torture-XXXXXX";
static char plan_path[256];
static struct rb_trace dense;

/* One block a thread holds. */
struct tblk {
	void *p;
	uint64_t n;
	int dev;
	uint64_t seed;
};

struct worker {
	pthread_t tid;
	int no;
	bool planned;
	uint64_t rng;
	/* random traffic */
	struct tblk slot[SLOTS];
	/* planned traffic: the trace's blocks, then one pass's by position */
	struct tblk *b, *prev, *cur;
	size_t pos;
	bool looping;
	/* this thread's own view */
	struct rb_iset live[NR_DEV];
	uint64_t ops, nulls, overlaps, corrupt;
};

/* Where the trace's iterations 1, 2 and 3 start, and their allocations. */
static size_t it1, it2, it3, nr_pass, a1, a2;

static struct worker workers[MAX_THREADS];
static int nr_workers;
static int stop, pause_req;
static pthread_barrier_t barrier;

static void take(struct worker *w, struct tblk *k, uint64_t size, int dev,
		 uint64_t tag)
{
	void *p = stalloc_malloc(size, dev, NULL);

	w->ops++;
	if (!p) {
		w->nulls++;
		return;
	}
	if (!rb_iset_add(&w->live[dev], (uintptr_t)p, size)) {
		w->overlaps++;
		return;
	}
	k->p = p;
	k->n = size;
	k->dev = dev;
	k->seed = rb_seed(p, tag);
	rb_stamp_on(dev, p, size, k->seed);
}

static void give(struct worker *w, struct tblk *k)
{
	if (!k->p)
		return;
	w->ops++;
	if (!rb_stamp_ok_on(k->dev, k->p, k->n, k->seed))
		w->corrupt++;
	rb_iset_del(&w->live[k->dev], (uintptr_t)k->p);
	/* the size is optional in the ABI: give it half of the time */
	stalloc_free(k->p, (w->ops & 1) ? k->n : 0, k->dev, NULL);
	k->p = NULL;
}

static void random_op(struct worker *w)
{
	uint64_t x = rb_rng_next(&w->rng);
	struct tblk *k = &w->slot[x % SLOTS];
	uint64_t size, r = (x >> 8) % 100;

	if (k->p) {
		give(w, k);
		return;
	}
	if (r < 60)
		size = 1 + (x >> 16) % 4096;
	else if (r < 95)
		size = 1 + (x >> 16) % (256 << 10);
	else
		size = 1 + (x >> 16) % (4 << 20);
	take(w, k, size, (int)((x >> 6) & 1), x);
	if ((x >> 40) % 2048 == 0)
		stalloc_empty_cache();
	if ((x >> 40) % 64 == 1) {
		struct stalloc_stats st;

		stalloc_stats(0, &st);
	}
}

/* One event of the planned replay on device 0. */
static void planned_op(struct worker *w)
{
	const struct rb_ev *e = &dense.ev[w->pos];
	struct tblk *k = NULL;
	size_t i;

	if (!w->looping) {
		k = &w->b[e->idx];
	} else if (e->op != 'm') {
		if (e->idx >= a2 && e->idx < a2 + nr_pass)
			k = &w->cur[e->idx - a2];
		else if (e->idx >= a1 && e->idx < a1 + nr_pass)
			k = &w->prev[e->idx - a1];
	}
	if (e->op == 'm')
		stalloc_mark(e->label);
	else if (e->op == 'a' && k)
		take(w, k, e->size, 0, e->idx);
	else if (k)
		give(w, k);
	if (++w->pos < (w->looping ? it3 : it2))
		return;
	/* end of the prologue or of a pass: what was made is carried */
	for (i = 0; i < nr_pass; i++) {
		if (!w->looping) {
			w->prev[i] = w->b[a1 + i];
			w->b[a1 + i].p = NULL;
		} else {
			give(w, &w->prev[i]); /* not freed by the pass */
			w->prev[i] = w->cur[i];
			w->cur[i].p = NULL;
		}
	}
	w->looping = true;
	w->pos = it2;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	size_t i;

	while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE)) {
		if (__atomic_load_n(&pause_req, __ATOMIC_ACQUIRE)) {
			pthread_barrier_wait(&barrier); /* stopped */
			pthread_barrier_wait(&barrier); /* checked */
			continue;
		}
		if (w->planned)
			planned_op(w);
		else
			random_op(w);
	}
	for (i = 0; i < SLOTS; i++)
		give(w, &w->slot[i]);
	if (w->planned) {
		for (i = 0; i < dense.nr_allocs; i++)
			give(w, &w->b[i]);
		for (i = 0; i < nr_pass; i++) {
			give(w, &w->prev[i]);
			give(w, &w->cur[i]);
		}
	}
	return NULL;
}

/* ------------------------------------------------------ global checks */

struct gblk {
	uint64_t lo, hi;
};

static int gblk_cmp(const void *a, const void *b)
{
	const struct gblk *x = a, *y = b;

	return x->lo < y->lo ? -1 : x->lo > y->lo;
}

static void collect(const struct tblk *k, size_t n, int dev, struct gblk *g,
		    size_t *ng, uint64_t *bytes)
{
	size_t i;

	for (i = 0; i < n; i++) {
		if (!k[i].p || k[i].dev != dev)
			continue;
		g[*ng].lo = (uintptr_t)k[i].p;
		g[(*ng)++].hi = (uintptr_t)k[i].p + k[i].n;
		*bytes += k[i].n;
	}
}

/* At a quiescent point: all blocks disjoint, statistics agree. */
static void check_quiescent(void)
{
	size_t cap =
		(size_t)nr_workers * SLOTS + dense.nr_allocs + 2 * nr_pass + 1;
	struct gblk *g = malloc(cap * sizeof(*g));
	int dev, i;

	assert_non_null(g);
	for (dev = 0; dev < NR_DEV; dev++) {
		struct stalloc_stats st;
		uint64_t bytes = 0;
		size_t n = 0, j;

		for (i = 0; i < nr_workers; i++) {
			struct worker *w = &workers[i];

			collect(w->slot, SLOTS, dev, g, &n, &bytes);
			if (!w->planned)
				continue;
			collect(w->b, dense.nr_allocs, dev, g, &n, &bytes);
			collect(w->prev, nr_pass, dev, g, &n, &bytes);
			collect(w->cur, nr_pass, dev, g, &n, &bytes);
		}
		qsort(g, n, sizeof(*g), gblk_cmp);
		for (j = 1; j < n; j++)
			assert_true(g[j - 1].hi <= g[j].lo);
		if (stalloc_stats(dev, &st) == -ENOENT) {
			assert_int_equal(n, 0);
			continue;
		}
		assert_int_equal(st.allocs - st.frees, n);
		assert_int_equal(st.allocated, bytes);
		assert_int_equal(st.bad_frees, 0);
	}
	free(g);
}

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void torture(int threads, unsigned long ms)
{
	uint64_t ops = 0, hits = 0;
	struct stalloc_stats st;
	double t0 = now_ms();
	int i, e, dev;

	memset(workers, 0, sizeof(workers));
	nr_workers = threads;
	stop = 0;
	pause_req = 0;
	assert_int_equal(pthread_barrier_init(&barrier, NULL,
					      (unsigned int)threads + 1),
			 0);
	for (i = 0; i < threads; i++) {
		struct worker *w = &workers[i];

		w->no = i;
		w->rng = 0x9e3779b97f4a7c15ULL * (uint64_t)(i + 1);
		w->planned = i == 0;
		if (w->planned) {
			w->b = calloc(dense.nr_allocs + 1, sizeof(*w->b));
			w->prev = calloc(nr_pass + 1, sizeof(*w->prev));
			w->cur = calloc(nr_pass + 1, sizeof(*w->cur));
			assert_true(w->b && w->prev && w->cur);
		}
	}
	for (i = 0; i < threads; i++)
		assert_int_equal(pthread_create(&workers[i].tid, NULL,
						worker_main, &workers[i]),
				 0);
	for (e = 0; e < EPOCHS; e++) {
		usleep((useconds_t)(ms * 1000 / EPOCHS));
		__atomic_store_n(&pause_req, 1, __ATOMIC_RELEASE);
		pthread_barrier_wait(&barrier);
		check_quiescent();
		__atomic_store_n(&pause_req, 0, __ATOMIC_RELEASE);
		pthread_barrier_wait(&barrier);
	}
	__atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
	for (i = 0; i < threads; i++) {
		struct worker *w = &workers[i];

		assert_int_equal(pthread_join(w->tid, NULL), 0);
		assert_int_equal(w->overlaps, 0);
		assert_int_equal(w->corrupt, 0);
		assert_int_equal(w->nulls, 0);
		assert_int_equal(w->live[0].n + w->live[1].n, 0);
		ops += w->ops;
		rb_iset_free(&w->live[0]);
		rb_iset_free(&w->live[1]);
		free(w->b);
		free(w->prev);
		free(w->cur);
	}
	pthread_barrier_destroy(&barrier);
	for (dev = 0; dev < NR_DEV; dev++) {
		assert_int_equal(stalloc_stats(dev, &st), 0);
		assert_int_equal(st.allocated, 0);
		assert_int_equal(st.allocs, st.frees);
		assert_int_equal(st.bad_frees, 0);
		if (!dev)
			hits = st.plan_hits;
	}
	/* the planned thread did reach the plan */
	assert_true(hits > 0);
	print_message("# torture %d threads (1 planned), %d devices: %lu ms, "
		      "%llu operations, %llu plan hits, %d quiescent "
		      "checks, %.0f ms wall\n",
		      threads, NR_DEV, ms, (unsigned long long)ops,
		      (unsigned long long)hits, EPOCHS, now_ms() - t0);
}

static void test_torture(void **state)
{
	const struct fx_fake *fk;
	const char *list = getenv("TORTURE_THREADS");
	const char *ms_env = getenv("TORTURE_MS");
	unsigned long ms = ms_env ? strtoul(ms_env, NULL, 10) : 2000;
	char *dup, *tok, *save = NULL;
	int nr = 0;

	(void)state;
	dup = strdup(list ? list : "2,4,8,16");
	assert_non_null(dup);
	for (tok = strtok_r(dup, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		int t = atoi(tok);

		if (t < 2 || t > MAX_THREADS) {
			print_message("# TORTURE_THREADS: %s is not in "
				      "2..%d\n",
				      tok, MAX_THREADS);
			fail();
		}
		torture(t, ms);
		stalloc_shutdown();
		fk = fx_fake();
		if (fk) {
			assert_int_equal(fk->live_mappings(), 0);
			assert_int_equal(fk->live_handles(), 0);
			assert_int_equal(fk->live_reservations(), 0);
			assert_int_equal(fk->violations(), 0);
		}
		nr++;
	}
	free(dup);
	assert_true(nr > 0);
}

/* Plan the dense trace; find the passes the planned thread loops over. */
static int setup(void **state)
{
	const char *shared = getenv("SHARED");
	struct stalloc_plan *p;
	char path[512], pat[300];
	size_t i, n1 = 0, n2 = 0;

	(void)state;
	snprintf(path, sizeof(path), "%s/workloads/cpu-torch/gpt-dense.trace",
		 shared ? shared : "../shared");
	snprintf(plan_path, sizeof(plan_path), "%s/p-0.plan", dir);
	if (rb_trace_load(path, &dense) || stalloc_plan_file(path, NULL, &p)) {
		fprintf(stderr, "test-torture: %s\n", stalloc_last_error());
		return -1;
	}
	if (stalloc_plan_write(p, plan_path)) {
		fprintf(stderr, "test-torture: %s\n", stalloc_last_error());
		stalloc_plan_free(p);
		return -1;
	}
	stalloc_plan_free(p);
	it1 = rb_iteration(&dense, 1);
	it2 = rb_iteration(&dense, 2);
	it3 = rb_iteration(&dense, 3);
	a1 = a2 = SIZE_MAX;
	for (i = it1; i < it3 && it3 < dense.n; i++) {
		if (dense.ev[i].op != 'a')
			continue;
		if (i < it2 && !n1++)
			a1 = dense.ev[i].idx;
		if (i > it2 && !n2++)
			a2 = dense.ev[i].idx;
	}
	nr_pass = n2;
	if (!n1 || n1 != n2 || a2 != a1 + n1) {
		fprintf(stderr, "test-torture: %s: iterations 1 and 2 differ\n",
			path);
		return -1;
	}
	/* device 0 follows the plan; device 1 has none (off mode) */
	snprintf(pat, sizeof(pat), "%s/p-%%d.plan", dir);
	setenv("STALLOC_MODE", "plan", 1);
	setenv("STALLOC_PLAN", pat, 1);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	stalloc_shutdown();
	rb_trace_free(&dense);
	unlink(plan_path);
	return 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_torture),
	};
	const char *backend = argc > 1 ? argv[1] : "host";
	int ret;

	if (!mkdtemp(dir))
		return 1;
	stalloc_set_log_level(STALLOC_LOG_NONE);
	setenv("STALLOC_BACKEND", backend, 1);
	setenv("STALLOC_HOST_MEM", "4G", 1);
	setenv("STALLOC_VA_SIZE", "16G", 1);
	setenv("FAKECUDA_MEM", "4G", 1);
	setenv("FAKECUDA_DEVICES", "2", 1);
	ret = cmocka_run_group_tests_name(
		!strcmp(backend, "cuda") ? "torture/cuda" : "torture/host",
		tests, setup, teardown);
	rmdir(dir);
	return ret;
}
