/* SPDX-License-Identifier: MIT */
/*
 * tests/mapper-fixture.h - what the runtime's test programs share
 *
 * test-mapper (off and trace modes, the dynamic path), test-mapper-plan
 * (plan and auto modes) and test-mapper-streams (streams and graph pools on
 * the fake driver) run on the host backend, and with "cuda" as argument on
 * the driver STALLOC_LIBCUDA names (the fake one under make check) or on
 * libcuda.so.1.  Blocks are stamped and checked through the fixture's
 * copies, never through host pointers.  Every test ends with
 * stalloc_shutdown() (teardown()), so each starts from nothing; files go
 * to a scratch directory made by mapper_init() and removed at the end.
 */
#ifndef STALLOC_TESTS_MAPPER_FIXTURE_H
#define STALLOC_TESTS_MAPPER_FIXTURE_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include <stalloc/planner.h>
#include <stalloc/stalloc.h>

#include "tests/robust-common.h"
#include "tests/vmm-fixture.h"

#define MB (1ULL << 20)

static char dir[] = "/tmp/stalloc-map-XXXXXX";

static inline int setup(void **state)
{
	(void)state;
	setenv("STALLOC_MODE", "off", 1);
	setenv("STALLOC_HOST_MEM", "1G", 1);
	setenv("STALLOC_VA_SIZE", "4G", 1);
	return 0;
}

static inline int teardown(void **state)
{
	(void)state;
	stalloc_shutdown();
	return 0;
}

struct blk {
	char *p;
	size_t n;
};

static inline int by_addr(const void *a, const void *b)
{
	const struct blk *x = a, *y = b;

	return x->p < y->p ? -1 : x->p > y->p;
}

/* Independent check: no two live blocks overlap. */
static inline void assert_disjoint(struct blk *b, size_t n)
{
	struct blk *s = malloc(n * sizeof(*s));
	size_t i;

	memcpy(s, b, n * sizeof(*s));
	qsort(s, n, sizeof(*s), by_addr);
	for (i = 1; i < n; i++)
		assert_true(s[i - 1].p + s[i - 1].n <= s[i].p);
	free(s);
}

/*
 * One iteration of a small regular workload: 6 activations, freed in
 * reverse.  @extra inserts a request, @resize changes one size.
 */
static inline void workload_iter(struct blk *live, size_t scale, bool extra,
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

/*
 * Trace @w_bytes allocated first and kept, then four iterations of
 * @iter; plan the trace (files named after @tag) and leave the plan in
 * @plan, the runtime set to plan mode with it.
 */
static inline void plan_persistent(const char *tag, size_t w_bytes,
				   void (*iter)(void), char *plan, size_t len)
{
	char pattern[256], trace[256];
	struct stalloc_plan *p;
	void *w;
	int k;

	snprintf(pattern, sizeof(pattern), "%s/%s-%%d.trace", dir, tag);
	snprintf(trace, sizeof(trace), "%s/%s-0.trace", dir, tag);
	snprintf(plan, len, "%s/%s.plan", dir, tag);
	setenv("STALLOC_MODE", "trace", 1);
	setenv("STALLOC_TRACE", pattern, 1);
	w = stalloc_malloc(w_bytes, 0, NULL);
	for (k = 0; k < 4; k++) {
		stalloc_mark("iteration");
		iter();
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

static inline void make_plan_iter(void)
{
	struct blk live[6];

	workload_iter(live, 1, false, false);
}

/* Trace the workload, plan it, and leave the plan in @plan. */
static inline void make_plan(char *plan, size_t len)
{
	plan_persistent("p", 32 * MB, make_plan_iter, plan, len);
}

/*
 * The scratch directory, the backend (argv[1], "host" by default) and the
 * fake driver's memory; the cmocka group is named @prog/cuda or @prog/host.
 * Returns the group's name, NULL if the directory cannot be made.
 */
static inline const char *mapper_init(int argc, char **argv, const char *prog)
{
	static char group[64];
	const char *backend = argc > 1 ? argv[1] : "host";

	if (!mkdtemp(dir))
		return NULL;
	setenv("STALLOC_BACKEND", backend, 1);
	setenv("FAKECUDA_MEM", "1G", 1); /* read at cuInit: the same device */
	if (getenv("TEST_FILTER"))
		cmocka_set_test_filter(getenv("TEST_FILTER"));
	snprintf(group, sizeof(group), "%s/%s", prog,
		 !strcmp(backend, "cuda") ? "cuda" : "host");
	return group;
}

/* After the group ran: the scratch directory goes; returns @ret. */
static inline int mapper_done(int ret)
{
	rmdir(dir);
	return ret;
}

/* A test of the table, with the fixture's set-up and teardown. */
#define MAPPER_TEST(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

#endif /* STALLOC_TESTS_MAPPER_FIXTURE_H */
