// SPDX-License-Identifier: MIT
/*
 * tests/test-pack.c - the planner's CSV reader and static packer
 *
 * Packings are checked by an overlap test written here, independent of
 * planner/pack.c: wrap-aware lifetime pieces compared pairwise, O(n^2).
 * Random instances come from a fixed-seed generator, so runs repeat.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lib/util.h"
#include "planner/csv.h"
#include "planner/pack.h"

/* ------------------------------------------------------------ csv */

static int parse(const char *text, struct csv_problem *p)
{
	return csv_parse("t.csv", text, strlen(text), p);
}

static void test_csv_good(void **state)
{
	struct csv_problem p;
	const char *text;

	(void)state;
	assert_int_equal(parse("size, upper ,extra,lower,id\r\n"
			       "4,3,x,0,b1\r\n"
			       " 8 ,9,y, 3 ,17\r\n\r\n",
			       &p),
			 0);
	assert_int_equal(p.nr, 2);
	assert_string_equal(p.ids[0], "b1");
	assert_string_equal(p.ids[1], "17");
	assert_int_equal(p.bufs[1].size, 8);
	assert_int_equal(p.bufs[1].start, 3);
	assert_int_equal(p.bufs[1].end, 9);
	assert_int_equal(p.horizon, 9);
	assert_int_equal(p.capacity, 0);
	csv_free(&p);

	text = "id,lower,upper,size\nx,0,1,5";
	assert_int_equal(csv_parse("dir/A.1048576.csv", text, strlen(text), &p),
			 0);
	assert_int_equal(p.nr, 1);
	assert_int_equal(p.capacity, 1048576);
	csv_free(&p);
}

static void expect_bad(const char *text, const char *line)
{
	struct csv_problem p;

	assert_int_equal(parse(text, &p), -EINVAL);
	assert_non_null(strstr(stalloc_last_error(), line));
	assert_null(p.bufs);
	assert_int_equal(p.nr, 0);
}

static void test_csv_bad(void **state)
{
	(void)state;
	expect_bad("", "empty");
	expect_bad("id,lower,size\n1,0,4\n", "t.csv:1:");
	expect_bad("id,lower,upper,size\n", "no buffers");
	expect_bad("id,lower,upper,size\n1,0,3,4\n2,0,3\n", "t.csv:3:");
	expect_bad("id,lower,upper,size\n1,0,3,4,5\n", "t.csv:2:");
	expect_bad("id,lower,upper,size\n1,0,x3,4\n", "t.csv:2:");
	expect_bad("id,lower,upper,size\n1,-1,3,4\n", "t.csv:2:");
	expect_bad("id,lower,upper,size\n1,0,3,18446744073709551616\n",
		   "t.csv:2:");
	expect_bad("id,lower,upper,size\n1,0,3,0\n", "t.csv:2:");
	expect_bad("id,lower,upper,size\n1,3,3,4\n", "t.csv:2:");
	expect_bad("id,lower,upper,size\n\n1,4,3,4\n", "t.csv:3:");
	expect_bad("id,lower,upper,size\n,0,3,4\n", "t.csv:2:");
	expect_bad("id,lower,upper,size,id\n", "t.csv:1:");
	expect_bad("id,lower,upper,size\n1,0,,4\n", "t.csv:2:");
}

static void test_csv_load(void **state)
{
	struct csv_problem p;

	(void)state;
	assert_int_equal(csv_load("/nonexistent/x.csv", &p), -ENOENT);
	assert_non_null(strstr(stalloc_last_error(), "/nonexistent/x.csv"));
}

/* Random bytes must never crash the reader. */
static void test_csv_garbage(void **state)
{
	static const char alphabet[] = "0123456789,\n\r -x#\0idlowerupsz";
	struct csv_problem p;
	char buf[256];
	unsigned int seed = 7;
	int i, j, n;

	(void)state;
	for (i = 0; i < 2000; i++) {
		n = (int)(rand_r(&seed) % sizeof(buf));
		j = 0;
		if (i & 1)
			j = snprintf(buf, sizeof(buf), "id,lower,upper,size\n");
		for (; j < n; j++)
			buf[j] =
				alphabet[rand_r(&seed) % (sizeof(alphabet) - 1)];
		if (!csv_parse("g.csv", buf, (size_t)(n > j ? n : j), &p))
			csv_free(&p);
	}
}

/* ------------------------------------------------------ checkers */

static int pieces(const struct pack_buf *b, uint64_t horizon, uint64_t s[2],
		  uint64_t e[2])
{
	int n = 0;

	if (!b->wraps) {
		s[0] = b->start;
		e[0] = b->end;
		return 1;
	}
	if (b->start < horizon) {
		s[n] = b->start;
		e[n++] = horizon;
	}
	if (b->end) {
		s[n] = 0;
		e[n++] = b->end;
	}
	return n;
}

static bool live_together(const struct pack_buf *a, const struct pack_buf *b,
			  uint64_t horizon)
{
	uint64_t as[2], ae[2], bs[2], be[2];
	int na = pieces(a, horizon, as, ae), nb = pieces(b, horizon, bs, be);
	int i, j;

	for (i = 0; i < na; i++)
		for (j = 0; j < nb; j++)
			if (as[i] < be[j] && bs[j] < ae[i])
				return true;
	return false;
}

static void check_packing(const struct pack_buf *b, size_t n, uint64_t horizon,
			  const struct pack_result *r)
{
	uint64_t peak = 0;
	size_t i, j;

	for (i = 0; i < n; i++) {
		if (b[i].offset + b[i].size > peak)
			peak = b[i].offset + b[i].size;
		for (j = i + 1; j < n; j++) {
			if (!live_together(&b[i], &b[j], horizon))
				continue;
			if (b[i].offset < b[j].offset + b[j].size &&
			    b[j].offset < b[i].offset + b[i].size)
				fail_msg("buffers %zu and %zu collide", i, j);
		}
	}
	assert_int_equal(peak, r->peak);
	assert_true(r->peak >= r->lower_bound);
}

/* Bytes live at each time unit, summed by brute force. */
static uint64_t brute_load(const struct pack_buf *b, size_t n, uint64_t horizon)
{
	uint64_t t, best = 0, cur, s[2], e[2];
	size_t i;
	int k, np;

	for (t = 0; t < horizon; t++) {
		cur = 0;
		for (i = 0; i < n; i++) {
			np = pieces(&b[i], horizon, s, e);
			for (k = 0; k < np; k++)
				if (s[k] <= t && t < e[k])
					cur += b[i].size;
		}
		if (cur > best)
			best = cur;
	}
	return best;
}

/* ------------------------------------------------------ instances */

static void random_instance(struct pack_buf *b, size_t n, uint64_t horizon,
			    unsigned int *seed, bool wraps, uint64_t max_size)
{
	size_t i;

	for (i = 0; i < n; i++) {
		uint64_t s = rand_r(seed) % horizon;
		uint64_t len = 1 + rand_r(seed) % (horizon / 3 + 1);
		int kind = rand_r(seed) % 10;

		memset(&b[i], 0, sizeof(b[i]));
		b[i].size = 1 + rand_r(seed) % max_size;
		if (kind == 0) {
			b[i].start = 0;
			b[i].end = horizon;
		} else if (wraps && kind == 1) {
			b[i].wraps = true;
			b[i].start = horizon / 2 + s % (horizon / 2 + 1);
			b[i].end = s % (b[i].start + 1);
		} else {
			b[i].start = s;
			b[i].end = s + len > horizon ? horizon : s + len;
		}
		b[i].offset = UINT64_MAX;
	}
}

static void run_random(size_t n, uint64_t horizon, bool wraps, bool search,
		       int rounds, unsigned int seed)
{
	struct pack_opts opts = { .budget_ms = 50, .no_search = !search };
	struct pack_buf *b = calloc(n, sizeof(*b));
	struct pack_result r;
	int i;

	assert_non_null(b);
	for (i = 0; i < rounds; i++) {
		random_instance(b, n, horizon, &seed, wraps, 1 + i % 1000);
		assert_int_equal(pack_solve(b, n, horizon, &opts, &r), 0);
		check_packing(b, n, horizon, &r);
		assert_int_equal(r.lower_bound,
				 pack_lower_bound(b, n, horizon));
		if (horizon <= 64)
			assert_int_equal(r.lower_bound,
					 brute_load(b, n, horizon));
	}
	free(b);
}

static void test_pack_small(void **state)
{
	(void)state;
	run_random(12, 16, false, true, 150, 1);
	run_random(12, 16, true, true, 150, 2);
	run_random(40, 64, true, false, 100, 3);
	/* Sparse in time: the search splits into subproblems. */
	run_random(24, 96, false, true, 200, 7);
	run_random(24, 96, true, true, 200, 8);
}

/*
 * The least peak of @b by exhaustion: pushed down as far as it goes, a
 * packing has every item at 0 or on an overlapping one, so placing items
 * in the order of their offsets, each tries 0 and the tops of the placed
 * items it overlaps.  @off: the offsets, UINT64_MAX for unplaced items.
 */
static void brute_opt(const struct pack_buf *b, size_t n, uint64_t horizon,
		      size_t left, uint64_t *off, uint64_t peak, uint64_t *best)
{
	size_t i, j, k;

	if (peak >= *best)
		return;
	if (!left) {
		*best = peak;
		return;
	}
	for (i = 0; i < n; i++) {
		if (off[i] != UINT64_MAX)
			continue;
		for (j = 0; j <= n; j++) {
			uint64_t o = j == n ? 0 : off[j] + b[j].size;
			bool ok =
				j == n ||
				(off[j] != UINT64_MAX &&
				 pack_lifetimes_overlap(&b[i], &b[j], horizon));

			for (k = 0; k < n && ok; k++)
				ok = off[k] == UINT64_MAX ||
				     !pack_lifetimes_overlap(&b[i], &b[k],
							     horizon) ||
				     o >= off[k] + b[k].size ||
				     off[k] >= o + b[i].size;
			if (!ok)
				continue;
			off[i] = o;
			brute_opt(b, n, horizon, left - 1, off,
				  o + b[i].size > peak ? o + b[i].size : peak,
				  best);
			off[i] = UINT64_MAX;
		}
	}
}

/*
 * The exact search's pruning (canonical order, dominance, section
 * inference, hatless) loses no packing: on small instances without
 * wrap-around buffers the peak found is the optimum found by exhaustion,
 * and no peak above that optimum is ever marked optimal.
 */
static void test_pack_search_exact(void **state)
{
	enum { N = 7 };
	struct pack_opts opts = { .budget_ms = 200 };
	struct pack_buf b[N];
	struct pack_result r;
	unsigned int seed = 11;
	uint64_t off[N], best;
	int i;

	(void)state;
	for (i = 0; i < 300; i++) {
		random_instance(b, N, 8, &seed, i % 3 == 0, 9);
		assert_int_equal(pack_solve(b, N, 8, &opts, &r), 0);
		check_packing(b, N, 8, &r);
		best = UINT64_MAX;
		memset(off, 0xff, sizeof(off));
		brute_opt(b, N, 8, N, off, 0, &best);
		if (r.peak != best)
			assert_false(r.optimal);
		assert_true(r.peak >= best);
		/* A base of wrap-around buffers may cost more. */
		if (i % 3)
			assert_int_equal(r.peak, best);
	}
}

static void test_pack_medium(void **state)
{
	(void)state;
	run_random(1000, 500, false, false, 6, 4);
	run_random(1000, 500, true, false, 6, 5);
	run_random(200, 100, true, true, 4, 6);
}

static void test_pack_optimal(void **state)
{
	static const char text[] = "id,lower,upper,size\n"
				   "b1,0,3,4\nb2,3,9,4\nb3,0,9,4\n"
				   "b4,9,21,4\nb5,0,21,4\n";
	struct csv_problem p;
	struct pack_result r;

	(void)state;
	assert_int_equal(parse(text, &p), 0);
	assert_int_equal(pack_solve(p.bufs, p.nr, p.horizon, NULL, &r), 0);
	check_packing(p.bufs, p.nr, p.horizon, &r);
	assert_int_equal(r.lower_bound, 12);
	assert_int_equal(r.peak, 12);
	assert_true(r.optimal);
	csv_free(&p);
}

static void test_pack_wrap_overlap(void **state)
{
	struct pack_buf a = { .size = 1, .start = 8, .end = 2, .wraps = true };
	struct pack_buf b = { .size = 1, .start = 2, .end = 8 };
	struct pack_buf c = { .size = 1, .start = 1, .end = 3 };
	struct pack_buf d = { .size = 1, .start = 9, .end = 10 };

	(void)state;
	assert_false(pack_lifetimes_overlap(&a, &b, 10));
	assert_true(pack_lifetimes_overlap(&a, &c, 10));
	assert_true(pack_lifetimes_overlap(&d, &a, 10));
	assert_false(pack_lifetimes_overlap(&d, &b, 10));
}

static void test_pack_invalid(void **state)
{
	struct pack_buf bad[] = {
		{ .size = 0, .start = 0, .end = 1 },
		{ .size = 1, .start = 2, .end = 2 },
		{ .size = 1, .start = 0, .end = 11 },
		{ .size = 1, .start = 2, .end = 3, .wraps = true },
	};
	struct pack_buf ok = { .size = 1, .start = 0, .end = 1, .offset = 77 };
	struct pack_result r;
	size_t i;

	(void)state;
	for (i = 0; i < ARRAY_SIZE(bad); i++) {
		struct pack_buf two[2] = { ok, bad[i] };

		assert_int_equal(pack_solve(two, 2, 10, NULL, &r), -EINVAL);
		assert_int_equal(two[0].offset, 77);
	}
}

/*
 * A training step repeated: weights live throughout, activations nest in
 * the forward and backward passes, and gradients made in the backward
 * pass live into the next step (wrap around).  Rotating time to the cut
 * after the optimizer step leaves no wrap-around buffer but the weights,
 * so the packing should come close to LOAD.
 */
static void test_pack_rotation(void **state)
{
	enum { NW = 20, NA = 300, NG = 300, N = NW + NA + NG };
	const uint64_t H = 4000;
	struct pack_opts opts = { .budget_ms = 200 };
	struct pack_buf *b = calloc(N, sizeof(*b));
	unsigned int seed = 11;
	struct pack_result r;
	size_t i;

	(void)state;
	assert_non_null(b);
	for (i = 0; i < N; i++) {
		b[i].size = 1 + rand_r(&seed) % 4096;
		b[i].offset = UINT64_MAX;
		if (i < NW) {
			b[i].start = 0;
			b[i].end = H;
		} else if (i < NW + NA) {
			b[i].start = 200 + 5 * (i - NW);
			b[i].end = 3800 - 5 * (i - NW);
		} else {
			b[i].wraps = true;
			b[i].start = 1900 + 6 * (i - NW - NA);
			b[i].end = 1 + (i - NW - NA) % 150;
		}
	}
	assert_int_equal(pack_solve(b, N, H, &opts, &r), 0);
	check_packing(b, N, H, &r);
	assert_int_equal(r.lower_bound, pack_lower_bound(b, N, H));
	assert_true(r.peak - r.lower_bound <= r.lower_bound / 50);
	assert_true(!r.optimal || r.peak == r.lower_bound);
	free(b);
}

/*
 * Two instances of one buffer that alternate, as a training loop that keeps
 * last step's logits until this step's are assigned: @a from 1 to 8, @b
 * from 7 round the end to 2, so one of them crosses every cut of least
 * load; @c lives while @b is gone.  LOAD is 8: @b and @c share an offset.
 * Stacked at the bottom for the whole horizon, the crossing one cost its
 * size (12).
 */
static void test_pack_cut_crossing(void **state)
{
	struct pack_buf b[3] = {
		{ .size = 4, .start = 1, .end = 8 },
		{ .size = 4, .start = 7, .end = 2, .wraps = true },
		{ .size = 4, .start = 2, .end = 7 },
	};
	struct pack_result r;

	(void)state;
	assert_int_equal(pack_solve(b, 3, 10, NULL, &r), 0);
	check_packing(b, 3, 10, &r);
	assert_int_equal(r.lower_bound, 8);
	assert_int_equal(r.peak, 8);
	assert_true(r.optimal);
	assert_int_equal(b[1].offset, b[2].offset);
}

static void test_pack_capacity(void **state)
{
	struct pack_buf b[3] = {
		{ .size = 4, .start = 0, .end = 5 },
		{ .size = 4, .start = 1, .end = 6 },
		{ .size = 4, .start = 2, .end = 7 },
	};
	struct pack_opts opts = { .capacity = 10 };
	struct pack_result r;

	(void)state;
	assert_int_equal(pack_solve(b, 3, 7, &opts, &r), -ENOSPC);
	check_packing(b, 3, 7, &r);
	assert_int_equal(r.peak, 12);
	opts.capacity = 12;
	assert_int_equal(pack_solve(b, 3, 7, &opts, &r), 0);
}

/*
 * An O(n log n + pairs) overlap check for big packings: buffers sorted by
 * start, each compared with the ones starting before it ends (no
 * wrap-around buffers here).
 */
static int start_cmp(const void *pa, const void *pb)
{
	const struct pack_buf *a = *(const struct pack_buf *const *)pa;
	const struct pack_buf *b = *(const struct pack_buf *const *)pb;

	return (a->start > b->start) - (a->start < b->start);
}

static void check_big_packing(const struct pack_buf *b, size_t n,
			      const struct pack_result *r)
{
	const struct pack_buf **v = calloc(n + 1, sizeof(*v));
	uint64_t peak = 0;
	size_t i, j;

	assert_non_null(v);
	for (i = 0; i < n; i++) {
		assert_false(b[i].wraps);
		v[i] = &b[i];
		if (b[i].offset + b[i].size > peak)
			peak = b[i].offset + b[i].size;
	}
	qsort(v, n, sizeof(*v), start_cmp);
	for (i = 0; i < n; i++)
		for (j = i + 1; j < n && v[j]->start < v[i]->end; j++)
			if (v[i]->offset < v[j]->offset + v[j]->size &&
			    v[j]->offset < v[i]->offset + v[i]->size)
				fail_msg("buffers at %zu and %zu collide",
					 (size_t)(v[i] - b),
					 (size_t)(v[j] - b));
	assert_int_equal(peak, r->peak);
	assert_true(r->peak >= r->lower_bound);
	free(v);
}

/*
 * Real training graphs (MindSpore dumps in the shared workloads) whose
 * area-ordered skyline leaves a gap: tiny long-lived buffers above a
 * hole at the peak, a buffer allocated just after the peak whose hole a
 * later long-lived one took.  The window-ranked passes must reach the
 * lower bound; the limit is generous so that a loaded machine (or the
 * sanitizers) cannot make the test depend on time.  Skipped when the
 * shared workloads are not there.
 */
static void test_pack_real_graphs(void **state)
{
	static const char *const names[] = { "bert_base", "pangu_2.6B", "S_1" };
	struct pack_opts opts = { .budget_ms = 30000 };
	const char *shared = getenv("SHARED");
	struct csv_problem p;
	struct pack_result r;
	char path[4096];
	size_t i, done = 0;

	(void)state;
	if (!shared)
		shared = "../shared";
	for (i = 0; i < ARRAY_SIZE(names); i++) {
		snprintf(path, sizeof(path), "%s/workloads/idealloc/%s.csv",
			 shared, names[i]);
		if (csv_load(path, &p) == -ENOENT)
			continue;
		assert_int_equal(pack_solve(p.bufs, p.nr, p.horizon, &opts, &r),
				 0);
		check_big_packing(p.bufs, p.nr, &r);
		assert_int_equal(r.lower_bound,
				 pack_lower_bound(p.bufs, p.nr, p.horizon));
		if (r.peak != r.lower_bound)
			fail_msg("%s: peak %llu, lower bound %llu", names[i],
				 (unsigned long long)r.peak,
				 (unsigned long long)r.lower_bound);
		assert_true(r.optimal);
		assert_string_equal(r.method, "skyline-window");
		csv_free(&p);
		done++;
	}
	if (!done)
		skip();
}

/*
 * A wall-clock safety stop far below what one skyline pass takes: the
 * first pass still finishes (a group needs one packing), the later ones
 * give up, what comes back is a valid packing, and the result says that
 * the clock cut it short.
 */
static void test_pack_time_cut(void **state)
{
	enum { N = 40000 };
	const uint64_t H = 20000;
	struct pack_opts opts = { .time_limit_ms = 1, .budget_ms = 100000 };
	struct pack_buf *b = calloc(N, sizeof(*b));
	unsigned int seed = 23;
	struct pack_result r;
	size_t i;

	(void)state;
	assert_non_null(b);
	for (i = 0; i < N; i++) {
		uint64_t s = rand_r(&seed) % H;
		/* Long lifetimes: many overlapping pairs, slow passes. */
		uint64_t len = 1 + rand_r(&seed) % (H / 4);

		b[i].size = 1 + rand_r(&seed) % 100000;
		b[i].start = s;
		b[i].end = s + len > H ? H : s + len;
		b[i].offset = UINT64_MAX;
	}
	assert_int_equal(pack_solve(b, N, H, &opts, &r), 0);
	check_big_packing(b, N, &r);
	assert_int_equal(r.lower_bound, pack_lower_bound(b, N, H));
	assert_true(r.time_limit_hit);
	free(b);
}

/*
 * The work budget, not the clock, stops the search: an instance with a
 * gap the budget cannot close, packed twice, gives the same offsets and
 * the same work done, and the work stays within the budget plus one pass.
 */
static void test_pack_budget_deterministic(void **state)
{
	enum { N = 3000 };
	const uint64_t H = 2000;
	struct pack_opts opts = { .budget_ms = 20 };
	struct pack_buf *a = calloc(N, sizeof(*a));
	struct pack_buf *b = calloc(N, sizeof(*b));
	struct pack_result ra, rb;
	unsigned int seed = 5;
	size_t i;

	(void)state;
	assert_non_null(a);
	assert_non_null(b);
	for (i = 0; i < N; i++) {
		uint64_t s = rand_r(&seed) % H;
		uint64_t len = 1 + rand_r(&seed) % (H / 8);

		a[i].size = 1 + rand_r(&seed) % 4096;
		a[i].start = s;
		a[i].end = s + len > H ? H : s + len;
	}
	memcpy(b, a, N * sizeof(*a));
	assert_int_equal(pack_solve(a, N, H, &opts, &ra), 0);
	assert_int_equal(pack_solve(b, N, H, &opts, &rb), 0);
	check_big_packing(a, N, &ra);
	assert_false(ra.time_limit_hit);
	assert_true(ra.peak > ra.lower_bound);
	assert_true(ra.work_ms >= 20);
	assert_true(ra.work_ms == rb.work_ms);
	assert_int_equal(ra.peak, rb.peak);
	for (i = 0; i < N; i++)
		assert_int_equal(a[i].offset, b[i].offset);
	free(b);
	free(a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_csv_good),
		cmocka_unit_test(test_csv_bad),
		cmocka_unit_test(test_csv_load),
		cmocka_unit_test(test_csv_garbage),
		cmocka_unit_test(test_pack_small),
		cmocka_unit_test(test_pack_search_exact),
		cmocka_unit_test(test_pack_medium),
		cmocka_unit_test(test_pack_optimal),
		cmocka_unit_test(test_pack_wrap_overlap),
		cmocka_unit_test(test_pack_invalid),
		cmocka_unit_test(test_pack_rotation),
		cmocka_unit_test(test_pack_cut_crossing),
		cmocka_unit_test(test_pack_capacity),
		cmocka_unit_test(test_pack_real_graphs),
		cmocka_unit_test(test_pack_time_cut),
		cmocka_unit_test(test_pack_budget_deterministic),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
