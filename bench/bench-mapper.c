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

#include <stalloc/stalloc.h>

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
	stalloc_shutdown();
	return 0;
}
