// SPDX-License-Identifier: MIT
/*
 * tests/ctl-hold.c - a small regular job that stops half-way and waits,
 * for the control socket's end-to-end test (tests/test-ctl.sh)
 *
 *   ctl-hold STATSFILE
 *
 * Runs in the mode the environment says (trace to make a plan, plan to be
 * looked at): weights, then five iterations of three activations freed in
 * reverse, a small request from a slab and a dynamic one kept live, a
 * dynamic block freed (its chunks stay mapped, cached); in the
 * sixth iteration it stops with its activations live, writes its own
 * statistics to STATSFILE ("name value" lines), prints "ready PID" and
 * waits for SIGTERM or SIGINT; then it frees everything and shuts down.
 * Public API only.
 */
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <stalloc/stalloc.h>

#define MB (1UL << 20)

static void *get(size_t n)
{
	void *p = stalloc_malloc(n, 0, NULL);

	if (!p) {
		fprintf(stderr, "ctl-hold: out of memory for %zu\n", n);
		exit(1);
	}
	return p;
}

int main(int argc, char **argv)
{
	struct stalloc_stats st;
	void *w, *small, *dyn, *act[3];
	sigset_t stop_sigs;
	FILE *f;
	int k, j, sig;

	if (argc != 2) {
		fprintf(stderr, "usage: ctl-hold STATSFILE\n");
		return 2;
	}
	/*
	 * SIGTERM and SIGINT stay blocked in every thread (the library's
	 * threads inherit the mask) and are taken by sigwait() below: no
	 * other thread can swallow them, and none arriving early is lost.
	 */
	sigemptyset(&stop_sigs);
	sigaddset(&stop_sigs, SIGTERM);
	sigaddset(&stop_sigs, SIGINT);
	pthread_sigmask(SIG_BLOCK, &stop_sigs, NULL);
	w = get(4 * MB);
	for (k = 0; k < 6; k++) {
		stalloc_mark("iteration");
		for (j = 0; j < 3; j++)
			act[j] = get((size_t)(j + 1) * MB);
		if (k == 5)
			break;
		for (j = 3; j-- > 0;)
			stalloc_free(act[j], 0, 0, NULL);
	}
	small = get(1000);
	dyn = get(5 * MB + 512);
	stalloc_free(get(6 * MB), 0, 0, NULL); /* cached: free but mapped */
	if (stalloc_stats(0, &st))
		return 1;
	f = fopen(argv[1], "w");
	if (!f)
		return 1;
	fprintf(f,
		"allocated %" PRIu64 "\nmapped %" PRIu64 "\nreserved %" PRIu64
		"\nplan_hits %" PRIu64 "\nplan_misses %" PRIu64 "\n",
		st.allocated, st.mapped, st.reserved, st.plan_hits,
		st.plan_misses);
	fclose(f);
	printf("ready %d\n", (int)getpid());
	fflush(stdout);
	while (sigwait(&stop_sigs, &sig))
		;
	for (j = 3; j-- > 0;)
		stalloc_free(act[j], 0, 0, NULL);
	stalloc_free(dyn, 0, 0, NULL);
	stalloc_free(small, 0, 0, NULL);
	stalloc_free(w, 0, 0, NULL);
	stalloc_shutdown();
	return 0;
}
