// SPDX-License-Identifier: MIT
/*
 * tests/lttng-demo.c - a small program using libstalloc, for the lttng test
 *
 * Three iterations of a few allocations and frees on device 0 (host backend
 * when there is no GPU).  Run in trace mode with STALLOC_LTTNG=1, it leaves
 * both a native trace and an lttng session to compare.  Public API only.
 */
#include <stdio.h>

#include <stalloc/stalloc.h>

int main(void)
{
	void *w, *p[5];
	int k, j;

	w = stalloc_malloc(1 << 20, 0, NULL);
	for (k = 0; k < 3; k++) {
		stalloc_mark("iteration");
		for (j = 0; j < 5; j++)
			p[j] = stalloc_malloc((size_t)(j + 1) * 4096, 0,
					      (void *)0x10);
		for (j = 5; j-- > 0;)
			stalloc_free(p[j], (size_t)(j + 1) * 4096, 0,
				     (void *)0x10);
	}
	stalloc_free(w, 1 << 20, 0, NULL);
	stalloc_shutdown();
	puts("lttng-demo: done");
	return 0;
}
