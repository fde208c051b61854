// SPDX-License-Identifier: MIT
/*
 * bench/bench-tp.c - what a tracepoint costs on the hot path
 *
 * The same loop of 10 million alloc tracepoints three ways in one run:
 * with no tracing at all (an empty loop, the baseline), with tracing off
 * (STALLOC_LTTNG unset: one relaxed load of a NULL table), and with the
 * provider loaded but no lttng session enabling the event.  Numbers only.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "tracing/tp.h"

#define N 10000000

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static double loop(int traced)
{
	double t0 = now_ns();
	int i;

	for (i = 0; i < N; i++) {
		if (traced)
			sa_trace(alloc, 0, (uint64_t)i, 512, 0, SA_TP_DYNAMIC);
		__asm__ volatile("" ::: "memory");
	}
	return (now_ns() - t0) / N;
}

int main(int argc, char **argv)
{
	double base = loop(0), off = loop(1), on;

	if (argc > 1)
		setenv("STALLOC_LTTNG_LIB", argv[1], 1);
	setenv("STALLOC_LTTNG", "1", 1);
	sa_tp_init();
	on = loop(1);
	printf("tracepoints: empty loop %.2f ns/iteration; tracing off +%.2f "
	       "ns; provider loaded, no session +%.2f ns%s\n",
	       base, off - base, on - base,
	       sa_tp ? "" : " (provider not found: not loaded)");
	return 0;
}
