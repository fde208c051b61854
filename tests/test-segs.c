// SPDX-License-Identifier: MIT
/*
 * tests/test-segs.c - which pool chunks map one per driver allocation
 * (mapper/segs.c)
 *
 * pool_segs_build() marks exactly the chunks under the plan's free ranges
 * (the chunks a range touches at all, clipped to the pool, whatever the
 * ranges' order and overlaps); no other.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "mapper/match.h"

#define MB (1ull << 20)

/* Build @m's marks and compare them with @want: one '1' or '0' per chunk. */
static void assert_marks(struct matcher *m, const char *want)
{
	uint64_t c;

	assert_true(pool_segs_build(m, true));
	for (c = 0; want[c]; c++)
		assert_int_equal(pool_chunk_fine(m, c), want[c] == '1');
	free(m->fine);
}

static void test_segs_ranges(void **state)
{
	struct plan_range rg[] = {
		{ .offset = 3 * MB, .len = 6 * MB }, /* chunks 1 to 4 */
		{ .offset = 30 * MB, .len = MB }, /* chunk 15 */
		{ .offset = 12 * MB, .len = 0 }, /* empty: nothing */
		{ .offset = 38 * MB, .len = 8 * MB }, /* clipped: chunk 19 */
		{ .offset = 64 * MB, .len = MB }, /* past the pool */
	};
	struct stalloc_plan p = { .ranges = rg, .nr_ranges = 5 };
	struct matcher m = { .plan = &p,
			     .chunk = 2 * MB,
			     .pool_bytes = 40 * MB };

	(void)state;
	assert_false(pool_chunk_fine(&m, 1)); /* no marks yet: none */
	assert_marks(&m, "01111000000000010001");
}

/* Ranges in any order, overlapping and nested, are marked as their union. */
static void test_segs_overlap(void **state)
{
	struct plan_range rg[] = {
		{ .offset = 20 * MB, .len = 4 * MB }, /* chunks 10, 11 */
		{ .offset = 10 * MB, .len = 12 * MB }, /* chunks 5 to 10 */
		{ .offset = 12 * MB, .len = MB }, /* inside: chunk 6 */
		{ .offset = 4 * MB, .len = MB }, /* chunk 2 */
		{ .offset = 5 * MB, .len = MB }, /* chunk 2 again */
	};
	struct stalloc_plan p = { .ranges = rg, .nr_ranges = 5 };
	struct matcher m = { .plan = &p,
			     .chunk = 2 * MB,
			     .pool_bytes = 40 * MB };

	(void)state;
	assert_marks(&m, "00100111111100000000");
}

/* A plan without dynamic positions marks nothing. */
static void test_segs_none(void **state)
{
	struct stalloc_plan p = { 0 };
	struct matcher m = { .plan = &p,
			     .chunk = 2 * MB,
			     .pool_bytes = 200 * MB };

	(void)state;
	assert_marks(&m, "0000000000000000000000000000000000000000000000000"
			 "0000000000000000000000000000000000000000000000000");
}

/* STALLOC_LEND_FINE=0: no marks at all, whatever the ranges. */
static void test_segs_off(void **state)
{
	struct plan_range rg = { .offset = 0, .len = 40 * MB };
	struct stalloc_plan p = { .ranges = &rg, .nr_ranges = 1 };
	struct matcher m = { .plan = &p,
			     .chunk = 2 * MB,
			     .pool_bytes = 40 * MB };

	(void)state;
	assert_true(pool_segs_build(&m, false));
	assert_null(m.fine);
	assert_false(pool_chunk_fine(&m, 0));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_segs_ranges),
		cmocka_unit_test(test_segs_overlap),
		cmocka_unit_test(test_segs_none),
		cmocka_unit_test(test_segs_off),
	};

	return cmocka_run_group_tests_name("segs", tests, NULL, NULL);
}
