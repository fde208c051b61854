// SPDX-License-Identifier: MIT
/*
 * bench/bench-mapper.c - cost of stalloc_malloc + stalloc_free
 *
 * The median of many alloc + free pairs (dynamic path, host backend, pages
 * already mapped), against glibc malloc + free of the same sizes in the
 * same run, on 1, 2 and 4 threads.  Numbers only; nothing asserted.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <stalloc/planner.h>
#include <stalloc/stalloc.h>

#include "mapper/mapper.h"

#define PAIRS 200000
#define SIZES 16

static size_t sizes[SIZES];

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void *run_stalloc(void *arg)
{
	double *ns = arg, t0 = now_ns();
	int i;

	for (i = 0; i < PAIRS; i++) {
		void *p = stalloc_malloc(sizes[i % SIZES], 0, NULL);

		stalloc_free(p, sizes[i % SIZES], 0, NULL);
	}
	*ns = (now_ns() - t0) / PAIRS;
	return NULL;
}

static void run_glibc_once(void)
{
	int i;

	for (i = 0; i < SIZES; i++) {
		void *p = malloc(sizes[i]);

		__asm__ volatile("" : : "r"(p) : "memory");
		free(p);
	}
}

static void *run_glibc(void *arg)
{
	double *ns = arg, t0 = now_ns();
	int i;

	for (i = 0; i < PAIRS; i++) {
		void *p = malloc(sizes[i % SIZES]);

		__asm__ volatile("" : : "r"(p) : "memory");
		free(p);
	}
	*ns = (now_ns() - t0) / PAIRS;
	return NULL;
}

static double threads(void *(*fn)(void *), int n)
{
	pthread_t t[8];
	double ns[8], sum = 0;
	int i;

	for (i = 0; i < n; i++)
		pthread_create(&t[i], NULL, fn, &ns[i]);
	for (i = 0; i < n; i++) {
		pthread_join(t[i], NULL);
		sum += ns[i];
	}
	return sum / n;
}

static int by_value(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

#define LIVE 1024
#define LOOKUPS 2000000

static void *live_ptrs[LIVE];

static void *run_lookups(void *arg)
{
	double *ns = arg, t0 = now_ns();
	unsigned int x = 12345, found = 0;
	int i;

	for (i = 0; i < LOOKUPS; i++) {
		x = x * 1103515245 + 12345;
		found += mapper_is_live(
			0, (uint64_t)(uintptr_t)live_ptrs[(x >> 8) % LIVE]);
	}
	*ns = (now_ns() - t0) / LOOKUPS;
	return found == LOOKUPS ? NULL : arg;
}

/* The free path's lock-free lookup, on 1, 2 and 4 threads at once. */
static void lookups(void)
{
	static const int nt[] = { 1, 2, 4 };
	unsigned int i;
	int k;

	for (k = 0; k < LIVE; k++)
		live_ptrs[k] = stalloc_malloc(4096, 0, NULL);
	printf("runtime, free-path lookup (lock-free hash, %d live blocks):",
	       LIVE);
	for (i = 0; i < 3; i++)
		printf(" %d thread%s %.1f ns%s", nt[i], nt[i] > 1 ? "s" : "",
		       threads(run_lookups, nt[i]), i < 2 ? "," : "\n");
	for (k = 0; k < LIVE; k++)
		stalloc_free(live_ptrs[k], 4096, 0, NULL);
}

/* One iteration: SIZES alloc + free pairs, with a marker first. */
static void iteration(void)
{
	int i;

	stalloc_mark("iteration");
	for (i = 0; i < SIZES; i++) {
		void *p = stalloc_malloc(sizes[i], 0, NULL);

		stalloc_free(p, sizes[i], 0, NULL);
	}
}

/* Trace a few iterations, plan them, then time planned pairs. */
static int planned(void)
{
	const char *trace = "/tmp/stalloc-bench-0.trace";
	const char *plan = "/tmp/stalloc-bench.plan";
	struct stalloc_plan *p;
	struct stalloc_stats a, b;
	static double per[20000];
	double t0, ns, g;
	int k, iters = 20000;

	setenv("STALLOC_MODE", "trace", 1);
	setenv("STALLOC_TRACE", "/tmp/stalloc-bench-%d.trace", 1);
	for (k = 0; k < 4; k++)
		iteration();
	stalloc_shutdown();
	if (stalloc_plan_file(trace, NULL, &p) || stalloc_plan_write(p, plan))
		return fprintf(stderr, "bench: %s\n", stalloc_last_error());
	stalloc_plan_free(p);
	setenv("STALLOC_MODE", "plan", 1);
	setenv("STALLOC_PLAN", plan, 1);
	for (k = 0; k < 3; k++)
		iteration();
	stalloc_stats(0, &a);
	for (k = 0; k < iters; k++) {
		t0 = now_ns();
		iteration();
		per[k] = (now_ns() - t0) / SIZES;
	}
	qsort(per, (size_t)iters, sizeof(*per), by_value);
	ns = per[iters / 2]; /* the median iteration's mean pair */
	stalloc_stats(0, &b);
	t0 = now_ns();
	for (k = 0; k < iters; k++)
		run_glibc_once();
	g = (now_ns() - t0) / ((double)iters * SIZES);
	printf("runtime, planned path (host backend): alloc + free pair "
	       "%.0f ns (median over iterations), glibc %.0f ns, "
	       "stalloc/glibc = %.2f; hits %llu of "
	       "%llu, driver calls per steady iteration %.2f\n",
	       ns, g, ns / g, (unsigned long long)(b.plan_hits - a.plan_hits),
	       (unsigned long long)iters * SIZES,
	       (double)(b.driver_calls - a.driver_calls) / iters);
	stalloc_shutdown();
	unlink(trace);
	unlink(plan);
	return 0;
}

int main(void)
{
	static const int nt[] = { 1, 2, 4 };
	unsigned int i;

	setenv("STALLOC_BACKEND", "host", 0);
	for (i = 0; i < SIZES; i++)
		sizes[i] = (size_t)512 << (i % 12);
	/* warm: map the pages once */
	run_stalloc(&(double){ 0 });
	printf("runtime, dynamic path (host backend): alloc + free pair, "
	       "mean over %d pairs per thread\n",
	       PAIRS);
	for (i = 0; i < 3; i++) {
		double s = threads(run_stalloc, nt[i]);
		double g = threads(run_glibc, nt[i]);

		printf("  %d thread%s: stalloc %.0f ns, glibc %.0f ns, "
		       "stalloc/glibc = %.2f\n",
		       nt[i], nt[i] > 1 ? "s" : " ", s, g, s / g);
	}
	lookups();
	stalloc_shutdown();
	return planned();
}
