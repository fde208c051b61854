// SPDX-License-Identifier: MIT
/*
 * tests/test-clear.c - how long the plan's free space stays free
 * (mapper/clear.c)
 *
 * clear_build() turns each free range of a plan into a step function of
 * the address; clear_for() must answer exactly what a scan of every entry
 * answers: the time from the range's window start to the first start of
 * an iteration entry over [off, off + size), counted round the iteration.
 * A hand-made plan pins the values; random plans are checked against that
 * scan at every offset and size of a grid.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "mapper/match.h"

/* The reference: a scan of every entry. */
static uint64_t scan(const struct stalloc_plan *p, uint64_t now, uint64_t off,
		     uint64_t size)
{
	uint64_t best = UINT64_MAX, d;
	size_t i;

	for (i = 0; i < p->nr_ent; i++) {
		const struct plan_entry *e = &p->ent[i];

		if (e->cls == PLAN_PERSISTENT || !e->size ||
		    e->offset >= off + size || e->offset + e->size <= off)
			continue;
		d = e->start >= now ? e->start - now :
				      e->start + p->horizon - now;
		if (d < best)
			best = d;
	}
	return best;
}

static void check_all(struct matcher *m)
{
	const struct stalloc_plan *p = m->plan;
	size_t d;
	uint32_t r;

	for (d = 0; d < p->nr_dyn; d++) {
		const struct plan_dyn *pd = &p->dyn[d];

		for (r = pd->first_range; r < pd->first_range + pd->nr_ranges;
		     r++) {
			const struct plan_range *rg = &p->ranges[r];
			uint64_t off, size;

			for (off = rg->offset; off < rg->offset + rg->len;
			     off += 16)
				for (size = 16;
				     off + size <= rg->offset + rg->len;
				     size += 48)
					assert_int_equal(
						clear_for(m, r, off, size),
						scan(p, pd->start, off, size));
		}
	}
}

/*
 * Pool of 400 bytes, horizon 100; the dynamic position's window opens at
 * 40 and its free range is [100, 300): entry A over [100, 200) starts at
 * 60, B over [150, 250) at 90, C over [250, 300) at 10 (next iteration:
 * 70 after the window opens); persistent D over [0, 100).
 */
static void test_clear_values(void **state)
{
	struct plan_entry ent[] = {
		{ .cls = PLAN_STATIC, .size = 100, .offset = 100, .start = 60 },
		{ .cls = PLAN_STATIC, .size = 100, .offset = 150, .start = 90 },
		{ .cls = PLAN_STATIC, .size = 50, .offset = 250, .start = 10 },
		{ .cls = PLAN_PERSISTENT, .size = 100, .offset = 0 },
	};
	struct plan_range rg = { .offset = 100, .len = 200 };
	struct plan_dyn dyn = { .start = 40, .end = 45, .nr_ranges = 1 };
	struct stalloc_plan p = { .horizon = 100,
				  .ent = ent,
				  .nr_ent = 4,
				  .dyn = &dyn,
				  .nr_dyn = 1,
				  .ranges = &rg,
				  .nr_ranges = 1 };
	struct matcher m = { .plan = &p };

	(void)state;
	assert_true(clear_build(&m));
	assert_int_equal(clear_for(&m, 0, 100, 50), 20); /* A */
	assert_int_equal(clear_for(&m, 0, 200, 50), 50); /* B */
	assert_int_equal(clear_for(&m, 0, 250, 50), 70); /* C, wrapped */
	assert_int_equal(clear_for(&m, 0, 190, 80), 20); /* A, B and C */
	assert_int_equal(clear_for(&m, 0, 210, 10), 50); /* inside B */
	check_all(&m);
	free(m.clear);
	free(m.clear_first);
}

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* Random plans: entries anywhere, ranges anywhere (a check of the tables,
 * not of a packing), persistent and empty entries among them. */
static void test_clear_random(void **state)
{
	uint64_t seed = 2026;
	int round;

	(void)state;
	for (round = 0; round < 200; round++) {
		struct plan_entry ent[40];
		struct plan_range rg[12];
		struct plan_dyn dyn[4];
		struct stalloc_plan p = {
			.horizon = 1000, .ent = ent, .dyn = dyn, .ranges = rg
		};
		struct matcher m = { .plan = &p };
		size_t i, nr_r = 0;

		p.nr_ent = 1 + rnd(&seed) % 40;
		for (i = 0; i < p.nr_ent; i++)
			ent[i] = (struct plan_entry){
				.cls = rnd(&seed) % 8 ? PLAN_STATIC :
							PLAN_PERSISTENT,
				.size = rnd(&seed) % 6 ?
						16 * (1 + rnd(&seed) % 40) :
						0,
				.offset = 16 * (rnd(&seed) % 64),
				.start = rnd(&seed) % 1000,
			};
		p.nr_dyn = 1 + rnd(&seed) % 4;
		for (i = 0; i < p.nr_dyn; i++) {
			uint32_t k, n = (uint32_t)(rnd(&seed) % 4);

			dyn[i] = (struct plan_dyn){ .start = rnd(&seed) % 1000,
						    .first_range =
							    (uint32_t)nr_r,
						    .nr_ranges = n };
			for (k = 0; k < n; k++)
				rg[nr_r++] = (struct plan_range){
					.offset = 16 * (rnd(&seed) % 64),
					.len = 16 * (1 + rnd(&seed) % 32),
				};
		}
		p.nr_ranges = nr_r;
		assert_true(clear_build(&m));
		if (nr_r)
			check_all(&m);
		free(m.clear);
		free(m.clear_first);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_clear_values),
		cmocka_unit_test(test_clear_random),
	};

	return cmocka_run_group_tests_name("clear", tests, NULL, NULL);
}
