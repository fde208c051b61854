// SPDX-License-Identifier: MIT
/*
 * tests/test-mapper-plan.c - the runtime in plan and auto modes
 *
 * A small regular workload is traced and planned (make_plan()), then run
 * under the plan: every request hits, with or without markers; inserted
 * and resized requests miss and the plan recovers, a left-out one shifts
 * nothing, an iteration unlike the plan keeps it; another workload drops
 * the plan; a corrupt plan leaves the device in off mode; a dynamic
 * request goes to the space the plan leaves free, or borrows the pool's
 * idle chunks; auto mode plans in the background and switches mid-run.
 * Set-up: tests/mapper-fixture.h.
 */
#include <sys/stat.h>

#include "planner/planner.h"
#include "tests/mapper-fixture.h"

static void test_plan_mode(void **state)
{
	struct stalloc_stats st;
	struct blk live[6];
	char plan[256];
	void *w;
	int k;

	(void)state;
	make_plan(plan, sizeof(plan));
	w = stalloc_malloc(32 * MB, 0, NULL);
	for (k = 0; k < 6; k++) {
		stalloc_mark("iteration");
		workload_iter(live, 1, false, false);
	}
	stalloc_stats(0, &st);
	/*
	 * the weights, then 6 requests in each of the 6 iterations: the
	 * warm-up's are matched to their steady slots too
	 */
	assert_int_equal(st.plan_hits, 1 + 6 * 6);
	assert_int_equal(st.plan_misses, 0);
	assert_int_equal(st.dynamic_bytes, 0);
	/* mapped: the pool alone, the warm-up made no dynamic block */
	assert_true(st.mapped <= 32 * MB + 21 * MB + 2 * MB);
	assert_int_equal(st.mapped_peak, st.mapped);
	stalloc_free(w, 0, 0, NULL);
	unlink(plan);
}

/*
 * A request between an iteration's last planned one and the next marker --
 * a small unplanned block, allocated and freed -- is only a miss: it does
 * not start an iteration of its own, even right after the warm-up's last
 * iteration, where one ends with its last planned allocation (it would
 * then take the first slot loosely, shift the planned iteration onto the
 * wrong slots and get the plan dropped as another workload's).
 */
static void inserted_at_end(bool marks)
{
	struct stalloc_stats a, b;
	struct blk live[6];
	char plan[256];
	void *w, *x;
	int k;

	make_plan(plan, sizeof(plan));
	w = stalloc_malloc(32 * MB, 0, NULL);
	for (k = 0; k < 6; k++) {
		if (k == 3)
			stalloc_stats(0, &a);
		if (marks)
			stalloc_mark("iteration");
		workload_iter(live, 1, false, false);
		x = stalloc_malloc(4096, 0, NULL);
		assert_non_null(x);
		stalloc_free(x, 0, 0, NULL);
	}
	stalloc_stats(0, &b);
	/*
	 * With markers, every planned request hits, the warm-up's too.
	 * Without, the block may start the next iteration and borrow its
	 * first slot loosely until the slot's own request comes: a hit too.
	 */
	if (marks)
		assert_int_equal(b.plan_hits, 1 + 6 * 6);
	assert_true(b.plan_hits - a.plan_hits >= 3 * 6);
	assert_true(b.plan_hits - a.plan_hits <= 3 * 7);
	assert_true(b.plan_misses - a.plan_misses <= 3);
	assert_true(b.plan_misses <= 6);
	stalloc_free(w, 0, 0, NULL);
	unlink(plan);
}

static void test_plan_inserted_at_end(void **state)
{
	(void)state;
	inserted_at_end(true);
}

/* The same when iteration starts are told from the requests. */
static void test_plan_inserted_no_markers(void **state)
{
	(void)state;
	inserted_at_end(false);
}

/*
 * A request inserted in the prologue, before the weights, is not taken
 * for them: the weights keep their planned slot, the prologue count is
 * back in step, and every planned request of the iterations hits.
 */
static void test_plan_inserted_in_prologue(void **state)
{
	struct stalloc_stats st;
	struct blk live[6];
	char plan[256];
	void *w, *x;
	int k;

	(void)state;
	make_plan(plan, sizeof(plan));
	x = stalloc_malloc(4096, 0, NULL);
	assert_non_null(x);
	stalloc_free(x, 0, 0, NULL);
	w = stalloc_malloc(32 * MB, 0, NULL);
	stalloc_stats(0, &st);
	/* the weights in their slot, not in the dynamic region */
	assert_int_equal(st.dynamic_bytes, 0);
	assert_int_equal(st.plan_misses, 0);
	for (k = 0; k < 6; k++) {
		stalloc_mark("iteration");
		workload_iter(live, 1, false, false);
	}
	stalloc_stats(0, &st);
	assert_true(st.plan_hits >= 1 + 6 * 6);
	assert_int_equal(st.plan_misses, 0);
	assert_int_equal(st.dynamic_bytes, 0);
	stalloc_free(w, 0, 0, NULL);
	unlink(plan);
}

/* No markers at run time: iteration starts are told from the requests. */
static void test_plan_no_markers(void **state)
{
	struct stalloc_stats a, b;
	struct blk live[6];
	char plan[256];
	void *w;
	int k;

	(void)state;
	make_plan(plan, sizeof(plan));
	w = stalloc_malloc(32 * MB, 0, NULL);
	for (k = 0; k < 3; k++)
		workload_iter(live, 1, false, false);
	stalloc_stats(0, &a);
	for (k = 0; k < 3; k++)
		workload_iter(live, 1, false, false);
	stalloc_stats(0, &b);
	/* the prologue is the weights and the first iteration; then all hit */
	assert_int_equal(b.plan_hits - a.plan_hits, 3 * 6);
	assert_int_equal(b.plan_misses, a.plan_misses);
	assert_true(a.plan_hits >= 1 + 6);
	stalloc_free(w, 0, 0, NULL);
	unlink(plan);
}

/*
 * Plan the workload (make_plan()), allocate its weights and run its
 * warm-up and two planned iterations: the weights.
 */
static void *planned_start(char *plan, size_t len, struct blk *live)
{
	void *w;
	int k;

	make_plan(plan, len);
	w = stalloc_malloc(32 * MB, 0, NULL);
	assert_non_null(w);
	for (k = 0; k < 3; k++) {
		stalloc_mark("iteration");
		workload_iter(live, 1, false, false);
	}
	return w;
}

static void test_plan_perturbed(void **state)
{
	struct stalloc_stats a, b;
	struct blk live[6];
	char plan[256];
	void *w;

	(void)state;
	w = planned_start(plan, sizeof(plan), live);
	stalloc_stats(0, &a);
	stalloc_mark("iteration");
	workload_iter(live, 1, true, false); /* an inserted request */
	stalloc_mark("iteration");
	workload_iter(live, 1, false, true); /* a resized request */
	stalloc_mark("iteration");
	workload_iter(live, 1, false, false); /* and back to normal */
	stalloc_stats(0, &b);
	assert_true(b.plan_misses - a.plan_misses <= 3 * 2);
	assert_int_equal(b.plan_hits - a.plan_hits, 6 + 5 + 6);
	stalloc_free(w, 0, 0, NULL);
	unlink(plan);
}

/*
 * Trace 4 iterations of @one (its argument: the iteration), then @end (if
 * any: frees what lived throughout), plan them into @plan (files named
 * after @tag) and set plan mode with it; the plan's summary goes to *@s.
 */
static void plan_from_n(const char *tag, int n, void (*one)(int k),
			void (*end)(void), char *plan, size_t len,
			struct stalloc_plan_summary *s);

static void plan_from(const char *tag, void (*one)(int k), void (*end)(void),
		      char *plan, size_t len, struct stalloc_plan_summary *s)
{
	plan_from_n(tag, 4, one, end, plan, len, s);
}

/* The same with @n iterations traced. */
static void plan_from_n(const char *tag, int n, void (*one)(int k),
			void (*end)(void), char *plan, size_t len,
			struct stalloc_plan_summary *s)
{
	char pattern[256], trace[256];
	struct stalloc_plan *p;
	int k;

	snprintf(pattern, sizeof(pattern), "%s/%s-%%d.trace", dir, tag);
	snprintf(trace, sizeof(trace), "%s/%s-0.trace", dir, tag);
	snprintf(plan, len, "%s/%s.plan", dir, tag);
	setenv("STALLOC_MODE", "trace", 1);
	setenv("STALLOC_TRACE", pattern, 1);
	for (k = 0; k < n; k++) {
		stalloc_mark("iteration");
		one(k);
	}
	if (end)
		end();
	stalloc_shutdown();
	assert_int_equal(stalloc_plan_file(trace, NULL, &p), 0);
	stalloc_plan_summary(p, s);
	assert_int_equal(stalloc_plan_write(p, plan), 0);
	stalloc_plan_free(p);
	unlink(trace);
	setenv("STALLOC_MODE", "plan", 1);
	setenv("STALLOC_PLAN", plan, 1);
}

/*
 * One iteration of three live tensors, the first the largest; @skip leaves
 * it out.  The second's address goes to *@second.
 */
static void skip_iter(bool skip, void **second)
{
	static const size_t n[3] = { 4 * MB, 1 * MB, 2 * MB };
	void *p[3] = { NULL, NULL, NULL };
	int j;

	for (j = skip ? 1 : 0; j < 3; j++) {
		p[j] = stalloc_malloc(n[j], 0, NULL);
		assert_non_null(p[j]);
	}
	*second = p[1];
	for (j = 3; j-- > 0;)
		stalloc_free(p[j], 0, 0, NULL);
}

/*
 * A request the job leaves out does not shift the next one into its slot:
 * a smaller request fits the skipped one's larger slot, but its own slot,
 * a few positions ahead, is an exact match and comes first -- in a larger
 * slot it would stay past the slot's planned end, in the way of the slots
 * planned there after it.
 */
static void skip_once(int k)
{
	void *second;

	(void)k;
	skip_iter(false, &second);
}

static void test_plan_skipped(void **state)
{
	struct stalloc_plan_summary s;
	struct stalloc_stats a, b;
	char plan[256];
	void *mine, *got;
	int k;

	(void)state;
	plan_from("s", skip_once, NULL, plan, sizeof(plan), &s);
	for (k = 0; k < 3; k++) {
		stalloc_mark("iteration");
		skip_iter(false, &mine);
	}
	stalloc_stats(0, &a);
	stalloc_mark("iteration");
	skip_iter(true, &got);
	stalloc_stats(0, &b);
	assert_ptr_equal(got, mine);
	assert_int_equal(b.plan_hits - a.plan_hits, 2);
	assert_int_equal(b.plan_misses, a.plan_misses);
	unlink(plan);
}

/*
 * Runs of same-size tensors (a layer's activations): four of 2 MiB, four
 * of 1 MiB, all live at once.  @insert (bytes, 0: none) is allocated and
 * freed before the second one, which is @grow bytes larger than planned;
 * the tensors' addresses go to @at.
 */
static void run_iter(size_t insert, size_t grow, void **at)
{
	void *p[8];
	int j;

	for (j = 0; j < 8; j++) {
		if (insert && j == 1) {
			void *x = stalloc_malloc(insert, 0, NULL);

			assert_non_null(x);
			stalloc_free(x, 0, 0, NULL);
		}
		p[j] = stalloc_malloc((j < 4 ? 2 * MB : 1 * MB) +
					      (j == 1 ? grow : 0),
				      0, NULL);
		assert_non_null(p[j]);
		at[j] = p[j];
	}
	for (j = 8; j-- > 0;)
		stalloc_free(p[j], 0, 0, NULL);
}

static void run_once(int k)
{
	void *at[8];

	(void)k;
	run_iter(0, 0, at);
}

/*
 * Plan run_iter() (files named after @tag), run three planned iterations
 * and leave the tensors' addresses in @mine.
 */
static void run_planned(const char *tag, char *plan, size_t len, void **mine)
{
	struct stalloc_plan_summary s;
	int k;

	plan_from(tag, run_once, NULL, plan, len, &s);
	for (k = 0; k < 3; k++) {
		stalloc_mark("iteration");
		run_iter(0, 0, mine);
	}
}

/*
 * One iteration of run_iter(@insert, @grow): its hits and misses go to
 * @d, the addresses to @got; the next iteration, unperturbed, must be the
 * plan's again.
 */
static void run_perturbed(size_t insert, size_t grow, void **got,
			  struct stalloc_stats *d)
{
	struct stalloc_stats a, b;

	stalloc_stats(0, &a);
	stalloc_mark("iteration");
	run_iter(insert, grow, got);
	stalloc_stats(0, &b);
	d->plan_hits = b.plan_hits - a.plan_hits;
	d->plan_misses = b.plan_misses - a.plan_misses;
	stalloc_mark("iteration");
	run_iter(0, 0, got + 8);
	stalloc_stats(0, &a);
	assert_int_equal(a.plan_hits - b.plan_hits, 8);
	assert_int_equal(a.plan_misses, b.plan_misses);
}

/*
 * A request inserted before a run of same-size slots costs at most
 * itself.  One smaller than them takes the first slot loosely; then the
 * run's first tensor comes, of that slot's exact size: the last request
 * was the inserted one, and each tensor keeps its own slot (before, each
 * took the next one's and the last had none).  One of the next run's size
 * (1 MiB) jumps the cursor to that run; the skipped slots' requests then
 * come, and the first takes its own slot back (a plan without dynamic
 * positions skips nothing on purpose): again every tensor in its slot.
 * One of the run's own size cannot be told from the run's first tensor
 * when it comes: the run shifts by a slot, its last tensor misses, and
 * the next iteration is the plan's.
 */
static void test_plan_inserted_in_run(void **state)
{
	static const size_t inserts[] = { 512 * 1024, 4096, 1 * MB, 2 * MB };
	struct stalloc_stats d;
	char plan[256];
	void *mine[8], *got[16];
	size_t i;
	int j;

	(void)state;
	run_planned("run", plan, sizeof(plan), mine);
	for (i = 0; i < sizeof(inserts) / sizeof(inserts[0]); i++) {
		run_perturbed(inserts[i], 0, got, &d);
		if (inserts[i] < 2 * MB)
			for (j = 0; j < 8; j++)
				assert_ptr_equal(got[j], mine[j]);
		assert_true(d.plan_hits >= 7);
		assert_true(d.plan_misses <= 2);
	}
	unlink(plan);
}

/*
 * A tensor of a run of same-size slots grown by a few bytes (a longer
 * sequence) fits no slot and misses; the cursor goes past its slot, so
 * every other tensor of the run keeps its own (left at the slot, each
 * would take the one before it, and the last of the run would hold a
 * slot planned for another lifetime).
 */
static void test_plan_grown_in_run(void **state)
{
	static const size_t grows[] = { 512, 4096, 64 * 1024 };
	struct stalloc_stats d;
	char plan[256];
	void *mine[8], *got[16];
	size_t i;
	int j;

	(void)state;
	run_planned("grow", plan, sizeof(plan), mine);
	for (i = 0; i < sizeof(grows) / sizeof(grows[0]); i++) {
		run_perturbed(0, grows[i], got, &d);
		for (j = 0; j < 8; j++)
			if (j != 1)
				assert_ptr_equal(got[j], mine[j]);
		assert_int_equal(d.plan_hits, 7);
		assert_int_equal(d.plan_misses, 1);
	}
	unlink(plan);
}

/*
 * Seven tensors live together: the first's size varies with the
 * iteration @k (a dynamic position), the sixth is of 8 bytes.  @insert
 * (bytes, 0: none) is allocated and freed after the third.  Addresses to
 * @at.
 */
static void bytes_iter(int k, size_t insert, void **at)
{
	static const size_t n[7] = { 1 * MB, 2 * MB, 3 * MB, 4 * MB,
				     5 * MB, 8,	     6 * MB };
	void *p[7];
	int j;

	for (j = 0; j < 7; j++) {
		if (insert && j == 3) {
			void *x = stalloc_malloc(insert, 0, NULL);

			assert_non_null(x);
			stalloc_free(x, 0, 0, NULL);
		}
		p[j] = stalloc_malloc(n[j] + (j ? 0 : (size_t)k * 65536), 0,
				      NULL);
		assert_non_null(p[j]);
		at[j] = p[j];
	}
	for (j = 7; j-- > 0;)
		stalloc_free(p[j], 0, 0, NULL);
}

static void bytes_once(int k)
{
	void *at[7];

	bytes_iter(k, 0, at);
}

/*
 * A request of 4 bytes inserted before the fourth tensor rounds to the
 * 8-byte tensor's slot (512 bytes) two positions on, but is not that
 * tensor: the plan records each position's own bytes, so the inserted
 * one does not move the cursor there, and every static tensor keeps its
 * slot.  Matched by the rounded size, the cursor jumped to the 8-byte
 * slot; in a plan with dynamic positions whose sizes have not told yet
 * the positions jumped over are not taken back, and each tensor after
 * the jump missed or took a slot planned for another.
 */
static void test_plan_request_bytes(void **state)
{
	struct stalloc_plan_summary s;
	struct stalloc_stats a, b;
	char plan[256];
	void *mine[7], *got[7];
	int k, j;

	(void)state;
	plan_from("bytes", bytes_once, NULL, plan, sizeof(plan), &s);
	assert_true(s.dynamic_requests >= 1);
	for (k = 0; k < 3; k++) {
		stalloc_mark("iteration");
		bytes_iter(k, 0, mine);
	}
	stalloc_stats(0, &a);
	stalloc_mark("iteration");
	bytes_iter(1, 4, got);
	stalloc_stats(0, &b);
	for (j = 1; j < 7; j++)
		assert_ptr_equal(got[j], mine[j]);
	assert_true(b.plan_misses - a.plan_misses <= 1);
	unlink(plan);
}

/*
 * @n expert buffers of 64 to 76 KiB whose sizes vary with the routing
 * (iteration @k), each freed at once.
 */
static void small_experts(int k, int n)
{
	void *e;
	int j;

	for (j = 0; j < n; j++) {
		e = stalloc_malloc(
			64 * 1024 + (size_t)((k * (j % 3 + 1) + j) % 4) * 4096,
			0, NULL);
		assert_non_null(e);
		stalloc_free(e, 0, 0, NULL);
	}
}

/* Forty expert buffers (small_experts()), then run_iter(@insert, @grow). */
static void experts_run_iter(int k, size_t insert, size_t grow, void **at)
{
	small_experts(k, 40);
	run_iter(insert, grow, at);
}

static void experts_run_once(int k)
{
	void *at[8];

	experts_run_iter(k, 0, 0, at);
}

/*
 * The same in a plan with dynamic positions, once their sizes have told
 * them apart (sizes_tell()): the grown tensor's slot is stepped over, and
 * every other tensor of the run keeps its own.
 */
static void test_plan_grown_with_dynamic(void **state)
{
	struct stalloc_plan_summary s;
	struct stalloc_stats a, b;
	void *mine[8], *got[8];
	char plan[256];
	int k, j;

	(void)state;
	plan_from("gd", experts_run_once, NULL, plan, sizeof(plan), &s);
	assert_int_equal(s.dynamic_requests, 40);
	for (k = 0; k < 3; k++) {
		stalloc_mark("iteration");
		experts_run_iter(k, 0, 0, mine);
	}
	stalloc_stats(0, &a);
	stalloc_mark("iteration");
	experts_run_iter(k, 0, 4096, got);
	stalloc_stats(0, &b);
	for (j = 0; j < 8; j++)
		if (j != 1)
			assert_ptr_equal(got[j], mine[j]);
	assert_int_equal(b.plan_misses - a.plan_misses, 1);
	unlink(plan);
}

/*
 * A 1 MiB request inserted before a run of 2 MiB slots, in a plan with
 * dynamic positions whose sizes have told them apart: it jumps the cursor
 * to the 1 MiB run after, and the first 2 MiB tensor, of a slot the
 * cursor skipped, takes its own slot back (as in a plan without dynamic
 * positions: test_plan_inserted_in_run): every tensor in its slot.
 */
static void test_plan_inserted_with_dynamic(void **state)
{
	struct stalloc_plan_summary s;
	void *mine[8], *got[8];
	char plan[256];
	int k, j;

	(void)state;
	plan_from("id", experts_run_once, NULL, plan, sizeof(plan), &s);
	assert_int_equal(s.dynamic_requests, 40);
	for (k = 0; k < 3; k++) {
		stalloc_mark("iteration");
		experts_run_iter(k, 0, 0, mine);
	}
	stalloc_mark("iteration");
	experts_run_iter(k, MB, 0, got);
	for (j = 0; j < 8; j++)
		assert_ptr_equal(got[j], mine[j]);
	unlink(plan);
}

/*
 * A short-lived 256 KiB tensor, a long-lived one, a 4 KiB one, then a 256
 * KiB tensor planned where the first was; @leave leaves the first out.
 * Returns the last one's address.
 */
static void *borrow_iter(bool leave)
{
	void *s = leave ? NULL : stalloc_malloc(MB / 4, 0, NULL);
	void *l = stalloc_malloc(MB / 4, 0, NULL);
	void *t = stalloc_malloc(4096, 0, NULL);
	void *u;

	stalloc_free(s, 0, 0, NULL);
	u = stalloc_malloc(MB / 4, 0, NULL);
	assert_non_null(u);
	stalloc_free(u, 0, 0, NULL);
	stalloc_free(t, 0, 0, NULL);
	stalloc_free(l, 0, 0, NULL);
	return u;
}

static void borrow_once(int k)
{
	(void)k;
	borrow_iter(false);
}

/*
 * The first tensor left out: the long-lived one takes its slot (same
 * size, at the cursor) and holds it past its planned end, where the last
 * tensor is planned.  That one takes the long-lived tensor's own slot
 * instead, idle for as long as the plan gave it (borrow_passed()): no
 * miss.
 */
static void test_plan_borrow_passed(void **state)
{
	struct stalloc_plan_summary s;
	struct stalloc_stats a, b;
	char plan[256];
	int k;

	(void)state;
	plan_from("bp", borrow_once, NULL, plan, sizeof(plan), &s);
	for (k = 0; k < 3; k++) {
		stalloc_mark("iteration");
		borrow_iter(false);
	}
	stalloc_stats(0, &a);
	stalloc_mark("iteration");
	borrow_iter(true);
	stalloc_stats(0, &b);
	assert_int_equal(b.plan_misses, a.plan_misses);
	assert_int_equal(b.plan_hits - a.plan_hits, 3);
	unlink(plan);
}

/*
 * An iteration unlike the plan (an evaluation pass: every request misses)
 * keeps the plan: its requests borrow the idle slots' memory, and the next
 * training iteration is served from the plan again.  Past the iteration's
 * planned end, the matcher takes a request that looks like the next one's
 * start for a missed marker; when the requests then keep missing, it
 * stands aside until the next marker (MATCH_PROBE_MISSES): a handful of
 * misses, not one per request of the phase.
 */
static void test_plan_phase(void **state)
{
	struct stalloc_stats a, b, c;
	struct blk live[6];
	char plan[256];
	void *w;
	int k;

	(void)state;
	w = planned_start(plan, sizeof(plan), live);
	stalloc_stats(0, &a);
	stalloc_mark("iteration");
	for (k = 0; k < 8; k++) /* 48 requests, 36 of sizes not planned */
		workload_iter(live, 2, false, false);
	stalloc_stats(0, &b);
	/* MATCH_PROBE_MISSES (8), and the first pass's own */
	assert_true(b.plan_misses - a.plan_misses >= 8);
	assert_true(b.plan_misses - a.plan_misses <= 6 + 8);
	assert_true(b.plan_hits - a.plan_hits <= 12);
	stalloc_mark("iteration");
	workload_iter(live, 1, false, false);
	stalloc_stats(0, &c);
	assert_int_equal(c.plan_hits - b.plan_hits, 6);
	assert_int_equal(c.plan_misses, b.plan_misses);
	/* the pool (53 MB) and the phase's 42 MB shared chunks */
	assert_true(c.reserved_peak < 32 * MB + 21 * MB + 42 * MB);
	stalloc_free(w, 0, 0, NULL);
	unlink(plan);
}

/*
 * Plan the workload, then run it with @weights bytes of weights: @n
 * iterations at the scales @scale[0..n-1] (1: as planned, 2 or more: its
 * sizes that many times larger), then one more at @scale[n]; *@a and *@b
 * are the statistics before and after that last one.
 */
static void drop_run(size_t weights, const size_t *scale, int n,
		     struct stalloc_stats *a, struct stalloc_stats *b)
{
	enum stalloc_log_level old = stalloc_set_log_level(STALLOC_LOG_NONE);
	struct blk live[6];
	char plan[256];
	void *w;
	int k;

	make_plan(plan, sizeof(plan));
	w = stalloc_malloc(weights, 0, NULL);
	for (k = 0; k <= n; k++) {
		if (k == n)
			stalloc_stats(0, a);
		stalloc_mark("iteration");
		workload_iter(live, scale[k], false, false);
	}
	stalloc_stats(0, b);
	stalloc_free(w, 0, 0, NULL);
	unlink(plan);
	stalloc_set_log_level(old);
}

static void test_plan_other_workload(void **state)
{
	static const size_t scale[] = { 2, 2, 2, 2 }; /* another model */
	struct stalloc_stats a, b;

	(void)state;
	drop_run(64 * MB, scale, 3, &a, &b);
	/* dropped after the second planned iteration (the first differed
	 * too): all dynamic now */
	assert_int_equal(b.plan_hits, a.plan_hits);
	assert_int_equal(b.plan_misses, a.plan_misses);
}

/*
 * A dropped plan's pool keeps the memory of the blocks live in it until
 * they are freed, and not after: the weights (32 MB, in their planned
 * slot), freed once the plan was dropped, give their memory to the next
 * request above the high water.  Before, a dropped pool's chunks stayed
 * mapped beside off mode's memory for good (an MoE rank planned from
 * another routing: 328 MiB at its peak, 332 MiB over off mode).
 */
static void test_plan_dropped_pool(void **state)
{
	enum stalloc_log_level old = stalloc_set_log_level(STALLOC_LOG_NONE);
	/* the warm-up, then another workload: no size fits a slot */
	static const size_t scale[] = { 1, 7, 7, 7 };
	struct stalloc_stats a, b;
	struct blk live[6];
	char plan[256];
	void *w, *x;
	size_t k;

	(void)state;
	make_plan(plan, sizeof(plan));
	w = stalloc_malloc(32 * MB, 0, NULL);
	for (k = 0; k < sizeof(scale) / sizeof(scale[0]); k++) {
		stalloc_mark("iteration");
		workload_iter(live, scale[k], false, false);
	}
	stalloc_stats(0, &a);
	/* the weights and the warm-up hit; the plan is gone since */
	assert_int_equal(a.plan_hits, 1 + 6);
	stalloc_free(w, 0, 0, NULL);
	/* off mode's cache holds the iteration's 147 MB: 16 MB more */
	x = stalloc_malloc(147 * MB + 16 * MB, 0, NULL);
	assert_non_null(x);
	rb_stamp(x, 163 * MB, 9);
	assert_true(rb_stamp_ok(x, 163 * MB, 9));
	stalloc_stats(0, &b);
	assert_int_equal(b.plan_hits, a.plan_hits);
	/* taken from the weights' 32 MB: the high water stays */
	assert_true(b.reserved_peak <= a.reserved_peak + 2 * MB);
	stalloc_free(x, 0, 0, NULL);
	unlink(plan);
	stalloc_set_log_level(old);
}

/*
 * Off mode's fragmentation: sixteen blocks of 2 MiB, every other one
 * freed, then eight of 4 MiB, which fit none of the holes.
 */
static void frag_once(int k)
{
	void *a[16], *b[8];
	int j;

	(void)k;
	for (j = 0; j < 16; j++) {
		a[j] = stalloc_malloc(2 * MB, 0, NULL);
		assert_non_null(a[j]);
	}
	for (j = 0; j < 16; j += 2)
		stalloc_free(a[j], 0, 0, NULL);
	for (j = 0; j < 8; j++) {
		b[j] = stalloc_malloc(4 * MB, 0, NULL);
		assert_non_null(b[j]);
	}
	for (j = 0; j < 8; j++)
		stalloc_free(b[j], 0, 0, NULL);
	for (j = 1; j < 16; j += 2)
		stalloc_free(a[j], 0, 0, NULL);
}

/* Run frag_once() six times in @mode (plan: with @plan) into *@st. */
static void frag_run(const char *mode, const char *plan,
		     struct stalloc_stats *st)
{
	int k;

	setenv("STALLOC_MODE", mode, 1);
	setenv("STALLOC_PLAN", plan, 1);
	for (k = 0; k < 6; k++) {
		stalloc_mark("iteration");
		frag_once(k);
	}
	stalloc_stats(0, st);
	stalloc_shutdown();
}

/* The plan of frag_once(), rewritten as rejected by a check with @online. */
static void frag_rejected(char *plan, size_t len, uint64_t online)
{
	struct stalloc_plan_summary s;
	struct stalloc_plan *p;

	plan_from("frag", frag_once, NULL, plan, len, &s);
	stalloc_shutdown();
	assert_int_equal(stalloc_plan_read(plan, &p), 0);
	p->check = STALLOC_CHECK_REJECT;
	p->check_planned = 200 * MB;
	p->check_off = 64 * MB;
	p->check_online = online;
	assert_int_equal(stalloc_plan_write(p, plan), 0);
	stalloc_plan_free(p);
}

/*
 * A plan its check rejected: the device does not run as in off mode,
 * whose holes keep their memory (64 MiB at the peak: 16 in holes, 32 new
 * for the 4 MiB blocks), but gives back the holes' chunks before it maps
 * new past the high water: 48 MiB, what is live -- also where off mode was
 * the least online policy in the check (another run fragments otherwise).
 */
static void test_plan_rejected_fallback(void **state)
{
	enum stalloc_log_level old = stalloc_set_log_level(STALLOC_LOG_NONE);
	struct stalloc_stats off, fb, fb_off;
	char plan[256];

	(void)state;
	frag_rejected(plan, sizeof(plan), 48 * MB);
	frag_run("off", plan, &off);
	frag_run("plan", plan, &fb);
	assert_int_equal(off.reserved_peak, 64 * MB);
	assert_true(fb.reserved_peak <= 48 * MB);
	assert_int_equal(fb.plan_hits, 0);
	frag_rejected(plan, sizeof(plan), 64 * MB);
	frag_run("plan", plan, &fb_off);
	assert_true(fb_off.reserved_peak <= 48 * MB);
	assert_int_equal(fb_off.plan_hits, 0);
	unlink(plan);
	stalloc_set_log_level(old);
}

/*
 * One planned iteration unlike the plan (every size 7 times the planned
 * one: none fits a slot), then the workload again: the second planned
 * iteration follows the plan, so it is kept (dropping at the first cost
 * an MoE rank 684 MiB: Documentation/mapper.rst).
 */
static void test_plan_odd_iteration(void **state)
{
	/* the warm-up, the odd one, two more, then the one measured */
	static const size_t scale[] = { 1, 7, 1, 1, 1 };
	struct stalloc_stats a, b;

	(void)state;
	drop_run(32 * MB, scale, 4, &a, &b);
	assert_true(a.plan_misses >= 6);
	/* still planned: a whole iteration hits */
	assert_int_equal(b.plan_hits - a.plan_hits, 6);
	assert_int_equal(b.plan_misses, a.plan_misses);
}

static void test_plan_corrupt(void **state)
{
	enum stalloc_log_level old = stalloc_set_log_level(STALLOC_LOG_NONE);
	struct stalloc_stats st;
	char plan[256];
	FILE *f;
	void *p;

	(void)state;
	make_plan(plan, sizeof(plan));
	f = fopen(plan, "r+");
	assert_non_null(f);
	fseek(f, 40, SEEK_SET);
	fputc('#', f);
	fclose(f);
	p = stalloc_malloc(5 * MB, 0, NULL); /* off mode, with a warning */
	assert_non_null(p);
	stalloc_free(p, 0, 0, NULL);
	stalloc_stats(0, &st);
	assert_int_equal(st.plan_hits + st.plan_misses, 0);
	unlink(plan);
	stalloc_set_log_level(old);
}

/* One iteration with a request whose size varies (an expert buffer). */
static void *moe_iter(int k, void **b_out)
{
	void *a, *b, *c;

	a = stalloc_malloc(8 * MB, 0, NULL);
	stalloc_free(a, 0, 0, NULL);
	b = stalloc_malloc((size_t)(1 + k % 3) * MB, 0, NULL);
	rb_stamp(b, (size_t)(1 + k % 3) * MB, 7);
	stalloc_free(b, 0, 0, NULL);
	c = stalloc_malloc(8 * MB, 0, NULL);
	stalloc_free(c, 0, 0, NULL);
	*b_out = b;
	return a;
}

/* A dynamic request goes to the space the plan leaves free around it. */
static void moe_once(int k)
{
	void *b;

	moe_iter(k, &b);
}

static void test_plan_reuse(void **state)
{
	struct stalloc_plan_summary s;
	struct stalloc_stats st;
	char plan[256];
	void *a, *b;
	int k;

	(void)state;
	plan_from("r", moe_once, NULL, plan, sizeof(plan), &s);
	assert_int_equal(s.dynamic_requests, 1);
	for (k = 0; k < 5; k++) {
		stalloc_mark("iteration");
		a = moe_iter(k, &b);
		if (k >= 2) /* planned iterations: b lands where a was */
			assert_ptr_equal(a, b);
	}
	stalloc_stats(0, &st);
	assert_int_equal(st.allocated, 0);
	unlink(plan);
}

/*
 * A dynamic request the plan has no room for borrows the pool's idle
 * chunks (lent by remapping) instead of new memory, and the pool maps its
 * chunks back when its slots come round: the job never holds more than
 * the pool, where without lending it would hold the pool and the request.
 */
static void lend_run(bool lend, struct stalloc_stats *st)
{
	struct blk live[6];
	char plan[256];
	void *w, *x;
	int k;

	setenv("STALLOC_LEND", lend ? "1" : "0", 1);
	make_plan(plan, sizeof(plan));
	w = stalloc_malloc(32 * MB, 0, NULL);
	for (k = 0; k < 6; k++) {
		stalloc_mark("iteration");
		workload_iter(live, 1, false, false);
		/* after the iteration: the activations' 21 MB are idle */
		x = stalloc_malloc(16 * MB, 0, NULL);
		assert_non_null(x);
		rb_stamp(x, 16 * MB, 9);
		assert_true(rb_stamp_ok(x, 16 * MB, 9));
		stalloc_free(x, 0, 0, NULL);
	}
	stalloc_stats(0, st);
	stalloc_free(w, 0, 0, NULL);
	unlink(plan);
	unsetenv("STALLOC_LEND");
}

static void test_plan_lend(void **state)
{
	struct stalloc_stats st;

	(void)state;
	lend_run(true, &st);
	/* every planned request still hits; the inserted one misses */
	assert_int_equal(st.plan_hits, 1 + 6 * 6);
	/* the pool's 53 MB (rounded to chunks) held at most, not 69 */
	assert_true(st.reserved_peak <= 32 * MB + 22 * MB + 2 * MB);
}

/* STALLOC_LEND=0: the request gets memory of its own beside the pool. */
static void test_plan_no_lend(void **state)
{
	struct stalloc_stats st;

	(void)state;
	lend_run(false, &st);
	assert_int_equal(st.plan_hits, 1 + 6 * 6);
	assert_true(st.reserved_peak >= 32 * MB + 21 * MB + 16 * MB);
}

/*
 * A 24 MB temporary leaves its space to a dynamic request of 3 to 5 MB.
 * The pool maps that space (the dynamic position's free range) one chunk
 * per driver allocation: while the dynamic request lives, a 22 MB request
 * the plan does not know (too large for the free space left) borrows the
 * idle chunks beside it.  Mapped in the vmm's large segments (1 + 10 + 1
 * chunks) the dynamic request would pin the middle one and all but 2 MB
 * of the 22 would be new memory.
 */
static void fine_iter(int k, size_t extra)
{
	size_t n = (size_t)(3 + k % 3) * MB;
	void *t, *d, *x;

	t = stalloc_malloc(24 * MB, 0, NULL);
	assert_non_null(t);
	stalloc_free(t, 0, 0, NULL);
	d = stalloc_malloc(n, 0, NULL);
	assert_non_null(d);
	rb_stamp(d, n, 5);
	if (extra) {
		x = stalloc_malloc(extra, 0, NULL);
		assert_non_null(x);
		rb_stamp(x, extra, 6);
		assert_true(rb_stamp_ok(d, n, 5));
		assert_true(rb_stamp_ok(x, extra, 6));
		stalloc_free(x, 0, 0, NULL);
	}
	stalloc_free(d, 0, 0, NULL);
}

static void fine_once(int k)
{
	fine_iter(k, 0);
}

static void fine_run(bool fine, struct stalloc_stats *st)
{
	struct stalloc_plan_summary s;
	char plan[256];
	int k;

	setenv("STALLOC_LEND_FINE", fine ? "1" : "0", 1);
	plan_from("fine", fine_once, NULL, plan, sizeof(plan), &s);
	assert_int_equal(s.dynamic_requests, 1);
	for (k = 0; k < 4; k++) {
		stalloc_mark("iteration");
		fine_iter(k, k == 3 ? 22 * MB : 0);
	}
	stalloc_stats(0, st);
	unlink(plan);
	unsetenv("STALLOC_LEND_FINE");
}

static void test_plan_lend_fine(void **state)
{
	struct stalloc_stats st;

	(void)state;
	fine_run(true, &st);
	assert_int_equal(st.allocated, 0);
	assert_true(st.plan_hits >= 3);
	/*
	 * The pool's 24 MB and what the dynamic request's chunks keep from
	 * the 22 MB, not 24 + 20 MB.
	 */
	assert_true(st.reserved_peak <= 24 * MB + 6 * MB);
}

/* STALLOC_LEND_FINE=0: large segments, the 22 MB mostly new memory. */
static void test_plan_lend_coarse(void **state)
{
	struct stalloc_stats st;

	(void)state;
	fine_run(false, &st);
	assert_int_equal(st.allocated, 0);
	assert_true(st.plan_hits >= 3);
	assert_true(st.reserved_peak >= 24 * MB + 16 * MB);
}

/*
 * A persistent entry (weights, optimizer state) is never idle, so never
 * lent: its slot is mapped in segments as large as the vmm makes them,
 * with no segment of their own for chunks wholly inside it (VMM_WHOLE).
 * Its 40 MB take 2 driver allocations (not 1 + 10 + 8 + 1 chunks: 4), the
 * iteration's 6 MB slot 3 as before: 5 in all.
 */
static void whole_iter(void)
{
	void *a = stalloc_malloc(6 * MB, 0, NULL);

	assert_non_null(a);
	rb_stamp(a, 6 * MB, 4);
	assert_true(rb_stamp_ok(a, 6 * MB, 4));
	stalloc_free(a, 0, 0, NULL);
}

static void test_plan_whole_segments(void **state)
{
	struct stalloc_stats st;
	char plan[256];
	void *w;
	int k;

	(void)state;
	plan_persistent("whole", 40 * MB, whole_iter, plan, sizeof(plan));
	w = stalloc_malloc(40 * MB, 0, NULL);
	assert_non_null(w);
	rb_stamp(w, 40 * MB, 5);
	for (k = 0; k < 4; k++) {
		stalloc_mark("iteration");
		whole_iter();
	}
	assert_true(rb_stamp_ok(w, 40 * MB, 5));
	stalloc_stats(0, &st);
	assert_int_equal(st.plan_hits, 1 + 4);
	assert_true(st.reserved_peak <= 46 * MB);
	assert_int_equal(st.driver_allocs, 5);
	stalloc_free(w, 0, 0, NULL);
	unlink(plan);
}

/* Auto mode: traced, planned in the background, switched to mid-run. */
static void test_auto_mode(void **state)
{
	char pattern[256], path[256];
	struct stalloc_stats a, b;
	struct blk live[6];
	void *w;
	int k;

	(void)state;
	snprintf(pattern, sizeof(pattern), "%s/auto-%%d.trace", dir);
	snprintf(path, sizeof(path), "%s/auto-0.trace", dir);
	setenv("STALLOC_MODE", "auto", 1);
	setenv("STALLOC_AUTO_ITERS", "4", 1);
	setenv("STALLOC_TRACE", pattern, 1);
	w = stalloc_malloc(32 * MB, 0, NULL);
	for (k = 0; k < 5; k++) { /* 4 traced, the 5th while planning */
		stalloc_mark("iteration");
		workload_iter(live, 1, false, false);
	}
	/* the planner runs in the background; wait for its result */
	for (k = 0; k < 500; k++) {
		stalloc_mark("iteration");
		workload_iter(live, 1, false, false);
		stalloc_stats(0, &a);
		if (a.plan_hits)
			break;
		usleep(10000);
	}
	assert_true(a.plan_hits > 0);
	stalloc_mark("iteration");
	workload_iter(live, 1, false, false);
	stalloc_stats(0, &b);
	/* a whole planned iteration: every request hits */
	assert_int_equal(b.plan_hits - a.plan_hits, 6);
	assert_int_equal(b.plan_misses, a.plan_misses);
	stalloc_free(w, 0, 0, NULL);
	unsetenv("STALLOC_AUTO_ITERS");
	unlink(path);
	snprintf(path, sizeof(path), "%s/auto-0.trace.plan", dir);
	unlink(path);
}

/*
 * STALLOC_AUTO_SYNC=1: planned and checked at the marker that ends the
 * traced iterations, on the marking thread, and switched there: the very
 * next iteration is planned, every run (no waiting for a thread).  Its
 * check is test_auto_rejected's business: off here.
 */
/*
 * Auto mode tracing @iters iterations to files named after @tag, planning
 * synchronously and unchecked (auto_sync_done() undoes it).
 */
static void auto_sync_env(const char *tag, const char *iters)
{
	char pattern[256];

	snprintf(pattern, sizeof(pattern), "%s/%s-%%d.trace", dir, tag);
	setenv("STALLOC_AUTO_CHECK", "0", 1);
	setenv("STALLOC_MODE", "auto", 1);
	setenv("STALLOC_AUTO_ITERS", iters, 1);
	setenv("STALLOC_AUTO_SYNC", "1", 1);
	setenv("STALLOC_TRACE", pattern, 1);
}

static void auto_sync_done(const char *tag)
{
	char path[256];

	unsetenv("STALLOC_AUTO_ITERS");
	unsetenv("STALLOC_AUTO_SYNC");
	unsetenv("STALLOC_AUTO_CHECK");
	snprintf(path, sizeof(path), "%s/%s-0.trace", dir, tag);
	unlink(path);
	snprintf(path, sizeof(path), "%s/%s-0.trace.plan", dir, tag);
	unlink(path);
}

static void test_auto_sync(void **state)
{
	struct stalloc_stats a, b;
	struct blk live[6];
	void *w;
	int k;

	(void)state;
	auto_sync_env("sync", "3");
	w = stalloc_malloc(32 * MB, 0, NULL);
	for (k = 0; k < 3; k++) { /* traced */
		stalloc_mark("iteration");
		workload_iter(live, 1, false, false);
	}
	stalloc_stats(0, &a);
	assert_int_equal(a.plan_hits, 0);
	stalloc_mark("iteration"); /* plans, checks and switches here */
	workload_iter(live, 1, false, false);
	stalloc_stats(0, &b);
	assert_int_equal(b.plan_hits, 6);
	assert_int_equal(b.plan_misses, 0);
	stalloc_free(w, 0, 0, NULL);
	auto_sync_done("sync");
}

/*
 * A 20 MB request that does not fit the 16 MB hole a freed request left
 * below a live one: off mode keeps the hole mapped and maps 20 MB more;
 * auto mode's traced iterations give the hole back first (their peak is
 * the job's), so the 20 MB reuse its memory.  With @pin a 2 MB guard
 * stays above the 16 MB and a 4 MB request comes after the free, into the
 * hole (at its high end): it pins the chunks it lies on, and only the
 * others can go back -- all of them when the 16 MB were mapped one chunk
 * per segment (STALLOC_AUTO_FINE), else only those outside the segment it
 * shares (the vmm gives the end chunks of a mapping segments of their
 * own and the six between them one).
 */
static uint64_t traced_peak(const char *mode, bool pin)
{
	char pattern[256], path[256];
	struct stalloc_stats st;
	void *a, *g = NULL, *p, *b;

	snprintf(pattern, sizeof(pattern), "%s/hole-%%d.trace", dir);
	snprintf(path, sizeof(path), "%s/hole-0.trace", dir);
	setenv("STALLOC_MODE", mode, 1);
	setenv("STALLOC_TRACE", pattern, 1);
	stalloc_mark("iteration");
	a = stalloc_malloc(16 * MB, 0, NULL);
	assert_non_null(a);
	if (pin)
		g = stalloc_malloc(2 * MB, 0, NULL);
	else
		p = stalloc_malloc(2 * MB, 0, NULL);
	stalloc_free(a, 0, 0, NULL);
	if (pin) {
		assert_non_null(g);
		p = stalloc_malloc(4 * MB, 0, NULL);
	}
	assert_non_null(p);
	b = stalloc_malloc(20 * MB, 0, NULL);
	assert_non_null(b);
	rb_stamp(b, 20 * MB, 3);
	assert_true(rb_stamp_ok(b, 20 * MB, 3));
	stalloc_free(b, 0, 0, NULL);
	stalloc_free(p, 0, 0, NULL);
	if (g)
		stalloc_free(g, 0, 0, NULL);
	stalloc_stats(0, &st);
	stalloc_shutdown();
	unlink(path);
	return st.reserved_peak;
}

static void test_auto_traced_shrink(void **state)
{
	uint64_t off, traced;

	(void)state;
	off = traced_peak("off", false);
	traced = traced_peak("auto", false);
	assert_true(off >= 16 * MB + 2 * MB + 20 * MB);
	assert_true(traced <= 2 * MB + 20 * MB + 2 * MB);
}

/* A live block in the hole pins the chunks it lies on, not the others. */
static void test_auto_traced_fine(void **state)
{
	uint64_t fine, coarse;

	(void)state;
	fine = traced_peak("auto", true);
	setenv("STALLOC_AUTO_FINE", "0", 1);
	coarse = traced_peak("auto", true);
	unsetenv("STALLOC_AUTO_FINE");
	/* the 4 MB, the guard, the 20 MB and a chunk of slack */
	assert_true(fine <= 4 * MB + 2 * MB + 20 * MB + 2 * MB);
	/* the 16 MB but one end chunk, the guard, the 20 MB */
	assert_true(coarse >= 14 * MB + 2 * MB + 20 * MB);
}

/*
 * A stand-in for stalloc-replay: the run with the plan (plan mode, or auto
 * mode switching to it) reserves 2 chunks over off.
 */
static const char fake_replay[] =
	"#!/bin/sh\n"
	"r=100663296\n"
	"for a; do case $a in stalloc|auto) r=104857600;; esac; done\n"
	"env | grep -v '^STALLOC_CTL=0$' | grep -q '^STALLOC_' && exit 3\n"
	"echo \"{\\\"peak_reserved_bytes\\\": $r, \\\"plan_misses\\\": 0, "
	"\\\"plan_dropped\\\": false}\"\n";

/* The stand-in, as @tool in the scratch directory; STALLOC_REPLAY names it. */
static void write_fake_replay(char *tool, size_t len)
{
	FILE *f;

	snprintf(tool, len, "%s/fake-replay", dir);
	f = fopen(tool, "w");
	assert_non_null(f);
	fputs(fake_replay, f);
	assert_int_equal(fclose(f), 0);
	assert_int_equal(chmod(tool, 0755), 0);
	setenv("STALLOC_REPLAY", tool, 1);
}

/* The check state of the plan file @path, once it has one (or none). */
static int wait_verdict(const char *path, struct stalloc_plan_summary *sum)
{
	struct stalloc_plan *p = NULL;
	int k;

	for (k = 0; k < 500; k++) {
		if (!stalloc_plan_read(path, &p)) {
			stalloc_plan_summary(p, sum);
			stalloc_plan_free(p);
			if (sum->check != STALLOC_CHECK_NONE)
				return sum->check;
		}
		usleep(10000);
	}
	return STALLOC_CHECK_NONE;
}

/*
 * Auto mode whose plan loses to off mode on its own trace (a stand-in
 * replay says so): the plan is written beside the trace, marked rejected,
 * and never used; the device goes on in off mode.
 */
static void test_auto_rejected(void **state)
{
	char pattern[256], path[256], plan[272], tool[256];
	struct stalloc_plan_summary sum;
	struct stalloc_stats st;
	struct blk live[6];
	int k;

	(void)state;
	write_fake_replay(tool, sizeof(tool));
	snprintf(pattern, sizeof(pattern), "%s/auto-r-%%d.trace", dir);
	snprintf(path, sizeof(path), "%s/auto-r-0.trace", dir);
	snprintf(plan, sizeof(plan), "%s.plan", path);
	setenv("STALLOC_MODE", "auto", 1);
	setenv("STALLOC_AUTO_ITERS", "4", 1);
	setenv("STALLOC_TRACE", pattern, 1);
	for (k = 0; k < 5; k++) {
		stalloc_mark("iteration");
		workload_iter(live, 1, false, false);
	}
	/* the planner thread writes the plan twice: wait for the verdict */
	assert_int_equal(wait_verdict(plan, &sum), STALLOC_CHECK_REJECT);
	assert_int_equal(sum.check_planned, 104857600);
	assert_int_equal(sum.check_off, 100663296);
	for (k = 0; k < 20; k++) {
		stalloc_mark("iteration");
		workload_iter(live, 1, false, false);
	}
	stalloc_stats(0, &st);
	assert_int_equal(st.plan_hits, 0);
	assert_int_equal(st.plan_misses, 0);
	unsetenv("STALLOC_AUTO_ITERS");
	unsetenv("STALLOC_REPLAY");
	unlink(path);
	unlink(plan);
	unlink(tool);
}

/*
 * One step of a small layered model, no markers: a forward pass keeping
 * two activations per layer, a backward pass with a temporary per layer,
 * an optimizer temporary.  25 requests; the layers repeat inside it.
 */
static void layered_step(void)
{
	void *act[8][2], *g;
	int l;

	for (l = 0; l < 8; l++) {
		act[l][0] = stalloc_malloc(MB + (size_t)l * 65536, 0, NULL);
		act[l][1] = stalloc_malloc(256 * 1024, 0, NULL);
	}
	for (l = 8; l-- > 0;) {
		g = stalloc_malloc(512 * 1024, 0, NULL);
		stalloc_free(g, 0, 0, NULL);
		stalloc_free(act[l][1], 0, 0, NULL);
		stalloc_free(act[l][0], 0, 0, NULL);
	}
	g = stalloc_malloc(3 * MB, 0, NULL);
	stalloc_free(g, 0, 0, NULL);
}

/*
 * Auto mode without any marker: the iterations are found in the requests
 * (the step, not a layer), planned in the background, and the plan is
 * taken at an iteration start; then whole steps hit it.
 */
static void test_auto_no_markers(void **state)
{
	char pattern[256], path[256];
	struct stalloc_stats a, b;
	void *w;
	int k;

	(void)state;
	snprintf(pattern, sizeof(pattern), "%s/auto-nm-%%d.trace", dir);
	snprintf(path, sizeof(path), "%s/auto-nm-0.trace", dir);
	setenv("STALLOC_MODE", "auto", 1);
	setenv("STALLOC_TRACE", pattern, 1);
	w = stalloc_malloc(32 * MB, 0, NULL);
	for (k = 0; k < 2000; k++) {
		layered_step();
		stalloc_stats(0, &a);
		if (a.plan_hits)
			break;
		if (k > 40)
			usleep(2000); /* the planner thread's turn */
	}
	assert_true(a.plan_hits > 0);
	layered_step();
	stalloc_stats(0, &b);
	/* a whole step from the plan, none missed */
	assert_int_equal(b.plan_hits - a.plan_hits, 25);
	assert_int_equal(b.plan_misses, 0);
	stalloc_free(w, 0, 0, NULL);
	unlink(path);
	snprintf(path, sizeof(path), "%s/auto-nm-0.trace.plan", dir);
	unlink(path);
}

/*
 * The same without markers, the plan rejected by its check: replayed on a
 * copy of the trace as far as it was planned (removed after), no more tries,
 * no plan hit.
 */
static void test_auto_no_markers_rejected(void **state)
{
	char pattern[256], path[256], plan[272], part[272], tool[256];
	struct stalloc_plan_summary sum;
	struct stalloc_stats st;
	int k;

	(void)state;
	write_fake_replay(tool, sizeof(tool));
	snprintf(pattern, sizeof(pattern), "%s/auto-nr-%%d.trace", dir);
	snprintf(path, sizeof(path), "%s/auto-nr-0.trace", dir);
	snprintf(plan, sizeof(plan), "%s.plan", path);
	snprintf(part, sizeof(part), "%s.part", path);
	setenv("STALLOC_MODE", "auto", 1);
	setenv("STALLOC_TRACE", pattern, 1);
	for (k = 0; k < 2000; k++) {
		layered_step();
		if (!access(plan, F_OK))
			break;
		if (k > 40)
			usleep(2000); /* the planner thread's turn */
	}
	assert_int_equal(wait_verdict(plan, &sum), STALLOC_CHECK_REJECT);
	for (k = 0; k < 200; k++)
		layered_step();
	stalloc_stats(0, &st);
	assert_int_equal(st.plan_hits, 0);
	assert_int_equal(st.plan_misses, 0);
	assert_int_equal(access(part, F_OK), -1);
	unsetenv("STALLOC_REPLAY");
	unlink(path);
	unlink(plan);
	unlink(tool);
}

/*
 * One step of a workload whose first step also creates two persistent
 * buffers (optimizer state) of the size of a steady request planned a
 * little later: steady requests, the state, three blocks of another size,
 * then the steady request of the state's size.  @skip: how many of the
 * first steady requests this step leaves out.
 */
static void state_step(void **state_bufs, int skip)
{
	static const size_t sz[3] = { 1 * MB, 3 * MB / 2, 2 * MB };
	void *s[3] = { NULL, NULL, NULL }, *a, *x[3], *b;
	int i;

	for (i = skip; i < 3; i++)
		s[i] = stalloc_malloc(sz[i], 0, NULL);
	a = stalloc_malloc(4 * MB, 0, NULL);
	if (state_bufs) {
		state_bufs[0] = stalloc_malloc(8 * MB, 0, NULL);
		state_bufs[1] = stalloc_malloc(8 * MB, 0, NULL);
		assert_non_null(state_bufs[0]);
		assert_non_null(state_bufs[1]);
	}
	for (i = 0; i < 3; i++)
		x[i] = stalloc_malloc(3 * MB, 0, NULL);
	b = stalloc_malloc(8 * MB, 0, NULL);
	assert_non_null(a);
	assert_non_null(b);
	for (i = 0; i < 3; i++) {
		if (s[i])
			stalloc_free(s[i], 0, 0, NULL);
		stalloc_free(x[i], 0, 0, NULL);
	}
	stalloc_free(a, 0, 0, NULL);
	stalloc_free(b, 0, 0, NULL);
}

/*
 * The warm-up's last step leaves out requests before the optimizer state
 * (fewer tokens routed to a layer's experts, say): the state comes before
 * its planned prologue position, while the cursor waits at a position of
 * another size.  It must go to its persistent slots, not to the steady
 * slot of its size a few positions ahead: there it would never be freed,
 * and that slot's request would miss in every planned step.
 */
/* What lives throughout the recording of state_step(): weights, state. */
static void *rec_live[9];

static void state_once(int k)
{
	if (!k)
		rec_live[8] = stalloc_malloc(32 * MB, 0, NULL);
	state_step(k ? NULL : rec_live, 0);
}

static void state_end(void)
{
	stalloc_free(rec_live[0], 0, 0, NULL);
	stalloc_free(rec_live[1], 0, 0, NULL);
	stalloc_free(rec_live[8], 0, 0, NULL);
}

static void test_plan_state_early(void **state)
{
	struct stalloc_plan_summary s;
	struct stalloc_stats a, b;
	char plan[256];
	void *w, *st[2];
	int k;

	(void)state;
	plan_from("st", state_once, state_end, plan, sizeof(plan), &s);
	stalloc_mark("iteration");
	w = stalloc_malloc(32 * MB, 0, NULL);
	state_step(st, 2);
	stalloc_stats(0, &a);
	for (k = 0; k < 4; k++) {
		stalloc_mark("iteration");
		state_step(NULL, 0);
	}
	stalloc_stats(0, &b);
	/* the state in its planned slots, not in the dynamic region */
	assert_int_equal(a.dynamic_bytes, 0);
	/* every planned step: all 8 requests at their slots */
	assert_int_equal(b.plan_hits - a.plan_hits, 4 * 8);
	assert_int_equal(b.plan_misses, a.plan_misses);
	stalloc_free(st[0], 0, 0, NULL);
	stalloc_free(st[1], 0, 0, NULL);
	stalloc_free(w, 0, 0, NULL);
	unlink(plan);
}

/*
 * A step of @n expert buffers (small_experts()), then a 4 MiB and an
 * 8 MiB tensor; the first step (@st not NULL) creates two 8 MiB buffers of
 * optimizer state after the loop.
 */
static void drift_state_step(int k, int n, void **st)
{
	void *a, *b;

	small_experts(k, n);
	if (st) {
		st[0] = stalloc_malloc(8 * MB, 0, NULL);
		st[1] = stalloc_malloc(8 * MB, 0, NULL);
		assert_non_null(st[0]);
		assert_non_null(st[1]);
	}
	a = stalloc_malloc(4 * MB, 0, NULL);
	b = stalloc_malloc(8 * MB, 0, NULL);
	assert_non_null(a);
	assert_non_null(b);
	stalloc_free(b, 0, 0, NULL);
	stalloc_free(a, 0, 0, NULL);
}

static void drift_state_once(int k)
{
	if (!k)
		rec_live[8] = stalloc_malloc(32 * MB, 0, NULL);
	drift_state_step(k, 200, k ? NULL : rec_live);
}

/*
 * The warm-up routes 100 more requests than recorded before the optimizer
 * state, which comes 100 positions after its planned prologue position:
 * still its own (pro_late(): 64 positions and a quarter of the 201 since
 * the weights), not given up -- lost, the state would take the steady
 * 8 MiB slot for good, and its request would miss in every step.
 */
static void test_plan_state_drifted(void **state)
{
	struct stalloc_plan_summary s;
	struct stalloc_stats a, b;
	char plan[256];
	void *w, *st[2];
	int k;

	(void)state;
	plan_from("sd", drift_state_once, state_end, plan, sizeof(plan), &s);
	assert_int_equal(s.dynamic_requests, 200);
	stalloc_mark("iteration");
	w = stalloc_malloc(32 * MB, 0, NULL);
	drift_state_step(0, 300, st);
	stalloc_stats(0, &a);
	for (k = 1; k < 5; k++) {
		stalloc_mark("iteration");
		drift_state_step(k, 200, NULL);
	}
	stalloc_stats(0, &b);
	assert_int_equal(b.plan_misses, a.plan_misses);
	stalloc_free(st[0], 0, 0, NULL);
	stalloc_free(st[1], 0, 0, NULL);
	stalloc_free(w, 0, 0, NULL);
	unlink(plan);
}

/*
 * One step that, the first time (@st not NULL), creates optimizer state
 * after its activations: two buffers of each of 1, 2, 3 and 4 MiB, the
 * @leave th left out (-1: none), as for a parameter without gradient.
 */
static void opt_step(void **st, int leave)
{
	void *act[3];
	int i;

	for (i = 0; i < 3; i++) {
		act[i] = stalloc_malloc((size_t)(i + 5) * MB, 0, NULL);
		assert_non_null(act[i]);
	}
	for (i = 0; st && i < 8; i++) {
		st[i] = NULL;
		if (i == leave)
			continue;
		st[i] = stalloc_malloc((size_t)(i / 2 + 1) * MB, 0, NULL);
		assert_non_null(st[i]);
	}
	for (i = 0; i < 3; i++)
		stalloc_free(act[i], 0, 0, NULL);
}

/*
 * The warm-up leaves out one of the optimizer state's buffers: each one
 * after it still goes to its own persistent slot (taken by position
 * instead, each would take the slot planned for the one before it and
 * miss at every change of size), and the planned steps all hit.
 */
static void opt_once(int k)
{
	opt_step(k ? NULL : rec_live, -1);
}

static void opt_end(void)
{
	int i;

	for (i = 0; i < 8; i++)
		stalloc_free(rec_live[i], 0, 0, NULL);
}

static void test_plan_state_left_out(void **state)
{
	struct stalloc_plan_summary s;
	struct stalloc_stats a, b;
	char plan[256];
	void *st[8];
	int k, i;

	(void)state;
	plan_from("lo", opt_once, opt_end, plan, sizeof(plan), &s);
	stalloc_mark("iteration");
	opt_step(st, 2);
	stalloc_stats(0, &a);
	/* every buffer but the one left out in its persistent slot */
	assert_int_equal(a.plan_misses, 0);
	assert_int_equal(a.dynamic_bytes, 0);
	for (k = 0; k < 3; k++) {
		stalloc_mark("iteration");
		opt_step(NULL, -1);
	}
	stalloc_stats(0, &b);
	assert_int_equal(b.plan_hits - a.plan_hits, 3 * 3);
	assert_int_equal(b.plan_misses, 0);
	for (i = 0; i < 8; i++)
		if (st[i])
			stalloc_free(st[i], 0, 0, NULL);
	unlink(plan);
}

/*
 * One step that frees two 8 MiB activations early and, late in the step,
 * creates 8 MiB of optimizer state that lives on (@keep: where it goes;
 * NULL: not this step, as for an expert that got no tokens yet), as MoE
 * steps do for the experts that get their first tokens.  The state's
 * position is dynamic (present in some steps only) and outlives the step:
 * given the pool the activations leave free in the step's second half, it
 * sat on their slots in every later step, and they missed (the real
 * H100 MoE recording: 1,017 of its 1,660 misses, three such buffers).
 */
static void late_step(void **keep)
{
	void *a, *b, *c, *d;

	a = stalloc_malloc(8 * MB, 0, NULL);
	b = stalloc_malloc(8 * MB, 0, NULL);
	assert_non_null(a);
	assert_non_null(b);
	stalloc_free(a, 0, 0, NULL);
	c = stalloc_malloc(4 * MB, 0, NULL);
	assert_non_null(c);
	stalloc_free(b, 0, 0, NULL);
	d = stalloc_malloc(2 * MB, 0, NULL);
	assert_non_null(d);
	stalloc_free(d, 0, 0, NULL);
	if (keep) {
		*keep = stalloc_malloc(8 * MB, 0, NULL);
		assert_non_null(*keep);
	}
	stalloc_free(c, 0, 0, NULL);
}

static void *late_kept[16];

static void late_once(int k)
{
	late_step(k == 1 ? NULL : &late_kept[k]);
}

static void late_end(void)
{
	int k;

	for (k = 0; k < 16; k++) {
		if (late_kept[k])
			stalloc_free(late_kept[k], 0, 0, NULL);
		late_kept[k] = NULL;
	}
}

static void test_plan_late_state(void **state)
{
	struct stalloc_plan_summary s;
	struct stalloc_stats a, b;
	char plan[256];
	int k;

	(void)state;
	plan_from("late", late_once, late_end, plan, sizeof(plan), &s);
	assert_int_equal(s.dynamic_requests, 1);
	stalloc_mark("iteration");
	late_step(&late_kept[0]);
	stalloc_stats(0, &a);
	for (k = 1; k < 8; k++) {
		stalloc_mark("iteration");
		late_step(k % 3 ? &late_kept[k] : NULL);
	}
	stalloc_stats(0, &b);
	/* every planned step: its four activations at their slots */
	assert_int_equal(b.plan_hits - a.plan_hits, 7 * 4);
	assert_int_equal(b.plan_misses, a.plan_misses);
	late_end();
	unlink(plan);
}

/*
 * A loop that keeps the last step's logits until this step's exist
 * ("logits = model(x)"): 32 MiB of activations, 16 MiB of logits, the
 * old logits freed, a 32 MiB backward buffer; 64 MiB of weights made in
 * the first step.
 */
static void *pair_w, *pair_old;

static void pair_step(void)
{
	void *act, *lg, *bw;

	act = stalloc_malloc(32 * MB, 0, NULL);
	lg = stalloc_malloc(16 * MB, 0, NULL);
	assert_non_null(act);
	assert_non_null(lg);
	if (pair_old)
		stalloc_free(pair_old, 0, 0, NULL);
	pair_old = lg;
	bw = stalloc_malloc(32 * MB, 0, NULL);
	assert_non_null(bw);
	stalloc_free(act, 0, 0, NULL);
	stalloc_free(bw, 0, 0, NULL);
}

static void pair_once(int k)
{
	if (!k)
		pair_w = stalloc_malloc(64 * MB, 0, NULL);
	pair_step();
}

static void pair_end(void)
{
	stalloc_free(pair_old, 0, 0, NULL);
	stalloc_free(pair_w, 0, 0, NULL);
	pair_old = pair_w = NULL;
}

/*
 * Six steady steps: every request at its slot, no miss and no driver call
 * among them; the stats after them to *@b.
 */
static void pair_steady(struct stalloc_stats *b)
{
	struct stalloc_stats a;
	int k;

	stalloc_stats(0, &a);
	for (k = 0; k < 6; k++) {
		stalloc_mark("iteration");
		pair_step();
	}
	stalloc_stats(0, b);
	assert_int_equal(b->plan_hits - a.plan_hits, 6 * 3);
	assert_int_equal(b->plan_misses, a.plan_misses);
	assert_int_equal(b->driver_calls, a.driver_calls);
}

/*
 * Planned two steps at a time, the logits' two instances are ordinary
 * buffers: every request of every step at its slot, the markers between
 * a pair's steps passed over, the job held at the true peak (weights and
 * 80 MiB) where a plan of one step holds 96 MiB besides the weights, and
 * no driver call in a steady step.
 */
static void test_plan_pairs(void **state)
{
	struct stalloc_plan_summary s;
	struct stalloc_stats b;
	char plan[256];
	int k;

	(void)state;
	plan_from_n("pairs", 9, pair_once, pair_end, plan, sizeof(plan), &s);
	assert_int_equal(s.stride, 2);
	assert_int_equal(s.peak, 144 * MB);
	for (k = 0; k < 3; k++) { /* warm-up, first pair */
		stalloc_mark("iteration");
		pair_once(k);
	}
	pair_steady(&b);
	assert_int_equal(b.plan_misses, 0);
	assert_true(b.reserved_peak <= 144 * MB);
	pair_end();
	unlink(plan);
}

/*
 * Auto mode tracing enough steps of the logits loop to pair them: the plan
 * it makes in-process is one of two steps, and after the switch every
 * request of every step is at its slot with no driver call (with a plan
 * of one step, the logits' second slot is lent and taken back in every
 * step).
 */
static void test_auto_pairs(void **state)
{
	struct stalloc_stats a, b;
	int k;

	(void)state;
	auto_sync_env("apair", "9");
	for (k = 0; k < 9; k++) { /* traced */
		stalloc_mark("iteration");
		pair_once(k);
	}
	stalloc_stats(0, &a);
	assert_int_equal(a.plan_hits, 0);
	for (k = 0; k < 2; k++) { /* plans and switches at the first */
		stalloc_mark("iteration");
		pair_step();
	}
	pair_steady(&b);
	/* the weights and the pair's 80 MiB; one step at a time: 96, calls */
	assert_true(b.reserved <= 144 * MB);
	pair_end();
	auto_sync_done("apair");
}

/*
 * One iteration with a run of two expert buffers whose sizes vary, then a
 * static tensor of 6 MiB; @extra adds a third expert buffer (more tokens
 * routed than recorded).  Returns the static tensor's address.
 */
static void *experts_iter(int k, bool extra)
{
	void *e[3] = { NULL, NULL, NULL }, *t;
	int j;

	e[0] = stalloc_malloc((size_t)(1 + k % 3) * MB, 0, NULL);
	e[1] = stalloc_malloc((size_t)(2 + (k + 1) % 3) * MB, 0, NULL);
	if (extra)
		e[2] = stalloc_malloc(MB / 2, 0, NULL);
	t = stalloc_malloc(6 * MB, 0, NULL);
	assert_non_null(t);
	for (j = 0; j < 3; j++)
		if (e[j])
			stalloc_free(e[j], 0, 0, NULL);
	stalloc_free(t, 0, 0, NULL);
	return t;
}

static void experts_once(int k)
{
	experts_iter(k, false);
}

/*
 * A request more in a run of dynamic positions (the run ended in the
 * plan) is one more of the run: it does not take the static slot after
 * the run loosely, and that slot's own request finds it free.
 */
static void test_plan_dyn_run_longer(void **state)
{
	struct stalloc_plan_summary s;
	struct stalloc_stats a, b;
	char plan[256];
	void *t, *u;
	int k;

	(void)state;
	plan_from("xr", experts_once, NULL, plan, sizeof(plan), &s);
	assert_int_equal(s.dynamic_requests, 2);
	for (k = 0; k < 3; k++) {
		stalloc_mark("iteration");
		t = experts_iter(k, false);
	}
	stalloc_stats(0, &a);
	stalloc_mark("iteration");
	u = experts_iter(k, true);
	stalloc_stats(0, &b);
	assert_ptr_equal(u, t);
	assert_int_equal(b.plan_misses, a.plan_misses);
	unlink(plan);
}

/*
 * An expert loop: per expert, a buffer kept for the backward pass (about 2
 * MiB) and a temporary (about 128 KiB), sizes varying with the routing
 * (iteration @k); then eight 2 MiB tensors made while the kept buffers
 * live.  @insert puts a 512-byte request (a scalar logged) before the
 * tenth expert.  Returns the misses the iteration cost.
 */
#define DRIFT_EXPERTS 24
static uint64_t drift_iter(int k, bool insert)
{
	void *keep[DRIFT_EXPERTS], *t[8], *x;
	struct stalloc_stats a = { 0 }, b = { 0 };
	int j;

	stalloc_stats(0, &a);
	for (j = 0; j < DRIFT_EXPERTS; j++) {
		if (insert && j == 10) {
			x = stalloc_malloc(512, 0, NULL);
			stalloc_free(x, 0, 0, NULL);
		}
		keep[j] = stalloc_malloc(2 * MB + (size_t)((k * j + k) % 4) *
							  64 * (MB / 1024),
					 0, NULL);
		x = stalloc_malloc(
			MB / 8 + (size_t)((k * j + 2 * k) % 4) * 4096, 0, NULL);
		assert_non_null(keep[j]);
		stalloc_free(x, 0, 0, NULL);
	}
	for (j = 0; j < 8; j++)
		t[j] = stalloc_malloc(2 * MB, 0, NULL);
	for (j = 0; j < DRIFT_EXPERTS; j++)
		stalloc_free(keep[j], 0, 0, NULL);
	for (j = 0; j < 8; j++)
		stalloc_free(t[j], 0, 0, NULL);
	stalloc_stats(0, &b);
	return b.plan_misses - a.plan_misses;
}

static void drift_once(int k)
{
	drift_iter(k, false);
}

/*
 * A request inserted into a run of dynamic positions whose sizes have told
 * them apart so far: the run is re-aligned after two requests out of step,
 * so that the kept buffers do not take the temporaries' positions, whose
 * free space is the static tensors' after the loop (run_drift()).
 */
static void test_plan_drift_in_run(void **state)
{
	struct stalloc_plan_summary s;
	char plan[256];
	int k;

	(void)state;
	plan_from("dr", drift_once, NULL, plan, sizeof(plan), &s);
	assert_int_equal(s.dynamic_requests, 2 * DRIFT_EXPERTS);
	for (k = 0; k < 4; k++) {
		stalloc_mark("iteration");
		assert_int_equal(drift_iter(k, false), 0);
	}
	stalloc_mark("iteration");
	/* 8 misses when every kept buffer after the insertion is out of step */
	assert_true(drift_iter(1, true) <= 3);
	stalloc_mark("iteration");
	assert_int_equal(drift_iter(2, false), 0);
	unlink(plan);
}

/*
 * An expert loop of @experts requests of 1 to 1.375 MiB, each freed at
 * once, their sizes varying with the iteration @k.
 */
static void expert_loop(int k, int experts)
{
	int j;

	for (j = 0; j < experts; j++) {
		void *e = stalloc_malloc(
			MB + (size_t)((k * (j % 3 + 1) + j) % 4) * (MB / 8), 0,
			NULL);

		assert_non_null(e);
		stalloc_free(e, 0, 0, NULL);
	}
}

/*
 * Six tensors of 5 to 7.5 MiB (the same every iteration); with @keep they
 * live together and their addresses go to @t, else each is freed at once.
 */
static void six_tensors(bool keep, void **t)
{
	static const size_t tsz[6] = { 10, 12, 14, 11, 13, 15 }; /* MiB / 2 */
	int j;

	for (j = 0; j < 6; j++) {
		t[j] = stalloc_malloc(tsz[j] * (MB / 2), 0, NULL);
		assert_non_null(t[j]);
		if (!keep)
			stalloc_free(t[j], 0, 0, NULL);
	}
	for (j = 0; keep && j < 6; j++)
		stalloc_free(t[j], 0, 0, NULL);
}

/*
 * An expert loop of @experts buffers (about 1 MiB, sizes varying with the
 * routing, iteration @k), each freed at once, while a 40 MiB tensor lives;
 * then six tensors of 5 to 7.5 MiB live together in its place; their
 * addresses go to @t.
 */
static void exit_iter(int k, int experts, void **t)
{
	void *x = stalloc_malloc(40 * MB, 0, NULL);

	expert_loop(k, experts);
	stalloc_free(x, 0, 0, NULL);
	six_tensors(true, t);
}

static void exit_once(int k)
{
	void *t[6];

	exit_iter(k, 12, t);
}

/*
 * An expert loop eight requests shorter than recorded (fewer experts got
 * tokens): the tensors after it would go to the run's last positions;
 * four in a row matching the static positions after the run take the job
 * out of it, and the fourth and later tensors get their slots
 * (dyn_run_exit()).
 */
static void test_plan_dyn_run_shorter(void **state)
{
	struct stalloc_plan_summary s;
	void *t[6], *u[6];
	char plan[256];
	int k, j;

	(void)state;
	plan_from("rs", exit_once, NULL, plan, sizeof(plan), &s);
	assert_int_equal(s.dynamic_requests, 12);
	for (k = 0; k < 3; k++) {
		stalloc_mark("iteration");
		exit_iter(k, 12, t);
	}
	stalloc_mark("iteration");
	exit_iter(1, 4, u);
	for (j = 3; j < 6; j++)
		assert_ptr_equal(u[j], t[j]);
	unlink(plan);
}

/*
 * Two expert loops with the same six tensors after each: after the first,
 * inside the routed block (an island: planned with the loops' dynamic
 * positions), and after the second, where they are static.  Addresses of
 * the second six go to @t.
 */
static void twin_iter(int k, void **t)
{
	void *x = stalloc_malloc(40 * MB, 0, NULL);
	void *u[6];

	assert_non_null(x);
	expert_loop(k, 6);
	six_tensors(false, u);
	expert_loop(k + 1, 6);
	six_tensors(true, t);
	stalloc_free(x, 0, 0, NULL);
}

static void twin_once(int k)
{
	void *t[6];

	twin_iter(k, t);
}

/*
 * The tensors inside the routed block are the static block's twins: each
 * request there also matches the static positions after the next loop,
 * six in a row, which is what takes the job out of a run that ended early
 * (dyn_run_exit()).  But each also has its own position's one size: the
 * job is in step, and stays in the run.  Before, the cursor jumped to the
 * static block at the sixth, and the second loop and the static block
 * missed (an MoE pipeline rank: 457 misses in 1,744).
 */
/*
 * Three planned iterations of @steady, then @measured (iteration @k): it
 * misses @misses planned requests, and its six tensors get the planned
 * iterations' addresses.
 */
static void six_kept(void (*steady)(int k, void **t),
		     void (*measured)(int k, void **t), int k, uint64_t misses)
{
	struct stalloc_stats a, b;
	void *t[6], *u[6];
	int i, j;

	for (i = 0; i < 3; i++) {
		stalloc_mark("iteration");
		steady(i, t);
	}
	stalloc_stats(0, &a);
	stalloc_mark("iteration");
	measured(k, u);
	stalloc_stats(0, &b);
	assert_int_equal(b.plan_misses - a.plan_misses, misses);
	for (j = 0; j < 6; j++)
		assert_ptr_equal(u[j], t[j]);
}

static void test_plan_twin_block(void **state)
{
	struct stalloc_plan_summary s;
	char plan[256];

	(void)state;
	plan_from("tw", twin_once, NULL, plan, sizeof(plan), &s);
	/* the loops and the island between them */
	assert_int_equal(s.dynamic_requests, 18);
	six_kept(twin_iter, twin_iter, 3, 0);
	unlink(plan);
}

/*
 * exit_iter() with a loop of three more experts than recorded, the first
 * of them the size of the first tensor after the loop (top-1 routing: an
 * expert with that many tokens); the tensors' addresses go to @t.
 */
static void longer_iter(int k, void **t)
{
	void *x = stalloc_malloc(40 * MB, 0, NULL), *e;

	assert_non_null(x);
	expert_loop(k, 12);
	e = stalloc_malloc(5 * MB, 0, NULL);
	assert_non_null(e);
	stalloc_free(e, 0, 0, NULL);
	expert_loop(k + 1, 2);
	stalloc_free(x, 0, 0, NULL);
	six_tensors(true, t);
}

static void exit12_iter(int k, void **t)
{
	exit_iter(k, 12, t);
}

/*
 * The loop runs on past its recorded end, and its first extra buffer is
 * the exit's size: taken for the exit (a miss: the slot is under the
 * 40 MiB tensor, still live), then undone by the next buffer, which is
 * neither the next tensor's size nor one its slot would take
 * (exit_undone()).  Before, the cursor went on from the exit, the loop's
 * next buffers went to the tensors' positions, and the tensors missed.
 */
static void test_plan_exit_undone(void **state)
{
	struct stalloc_plan_summary s;
	char plan[256];

	(void)state;
	plan_from("xu", exit_once, NULL, plan, sizeof(plan), &s);
	assert_int_equal(s.dynamic_requests, 12);
	/* the extra buffer: the exit's slot is under the 40 MiB tensor */
	six_kept(exit12_iter, longer_iter, 1, 1);
	unlink(plan);
}

static void *loose_a;

/* A 256 KiB request, then an 8 MiB one and a 1 MiB one, all freed. */
static void loose_iter(bool small)
{
	void *r = small ? stalloc_malloc(MB / 4, 0, NULL) : NULL;
	void *a = stalloc_malloc(8 * MB, 0, NULL);
	void *b = stalloc_malloc(MB, 0, NULL);

	stalloc_free(b, 0, 0, NULL);
	stalloc_free(a, 0, 0, NULL);
	if (r)
		stalloc_free(r, 0, 0, NULL);
	loose_a = a;
}

static void loose_once(int k)
{
	(void)k;
	loose_iter(false);
}

/*
 * A request inserted where the plan has a slot 32 times its size: taken
 * loosely, it would hold the slot for as long as it lives, and the slot's
 * own request, next, would miss; it is served outside the plan instead
 * (too_loose()) and the slot's request finds it.
 */
static void test_plan_too_loose(void **state)
{
	struct stalloc_plan_summary s;
	char plan[256];
	void *a;
	int k;

	(void)state;
	plan_from("tl", loose_once, NULL, plan, sizeof(plan), &s);
	for (k = 0; k < 3; k++) {
		stalloc_mark("iteration");
		loose_iter(false);
	}
	a = loose_a;
	stalloc_mark("iteration");
	loose_iter(true);
	assert_ptr_equal(loose_a, a);
	unlink(plan);
}

/*
 * An expert loop of @experts requests (sizes of 1 to 1.375 MiB, each freed
 * at once), then six tensors, the third of an expert's size; their
 * addresses go to @t.
 */
static void long_iter(int k, int experts, void **t)
{
	static const size_t tsz[6] = { 10, 12, 9, 14, 11, 13 }; /* MiB / 8 */
	int j;

	expert_loop(k, experts);
	for (j = 0; j < 6; j++) {
		t[j] = stalloc_malloc(tsz[j] * (MB / 8), 0, NULL);
		assert_non_null(t[j]);
	}
	for (j = 0; j < 6; j++)
		stalloc_free(t[j], 0, 0, NULL);
}

static void long_once(int k)
{
	void *t[6];

	long_iter(k, 12, t);
}

/*
 * An expert loop two requests longer than recorded (more tokens routed),
 * the extra ones of the size of the third tensor after it: they must not
 * take that tensor's slot and carry the cursor into the block; every
 * tensor keeps its slot (run_longer()).
 */
static void test_plan_dyn_run_longer_exit(void **state)
{
	struct stalloc_plan_summary s;
	struct stalloc_stats a, b;
	void *t[6], *u[6];
	char plan[256];
	int k, j;

	(void)state;
	plan_from("rl", long_once, NULL, plan, sizeof(plan), &s);
	assert_int_equal(s.dynamic_requests, 12);
	for (k = 0; k < 3; k++) {
		stalloc_mark("iteration");
		long_iter(k, 12, t);
	}
	stalloc_mark("iteration");
	stalloc_stats(0, &a);
	long_iter(1, 14, u);
	stalloc_stats(0, &b);
	for (j = 0; j < 6; j++)
		assert_ptr_equal(u[j], t[j]);
	assert_int_equal(b.plan_misses, a.plan_misses);
	unlink(plan);
}

static void *reach_s;

/*
 * A 4 MiB tensor, six expert outputs kept to the end each followed by a
 * temporary freed at once (both of varying sizes: dynamic positions),
 * then an 8 MiB tensor.  @big: the third temporary is a 2 MiB buffer kept
 * to the end instead.
 */
static void reach_iter(int k, bool big)
{
	void *a = stalloc_malloc(4 * MB, 0, NULL), *kept[6], *keep = NULL;
	int j;

	assert_non_null(a);
	for (j = 0; j < 6; j++) {
		void *tmp;

		kept[j] = stalloc_malloc(
			MB / 4 + (size_t)((k + j) % 3) * (MB / 32), 0, NULL);
		assert_non_null(kept[j]);
		if (big && j == 2) {
			keep = stalloc_malloc(2 * MB, 0, NULL);
			assert_non_null(keep);
			continue;
		}
		tmp = stalloc_malloc(
			MB / 16 + (size_t)((k * j) % 3) * (MB / 128), 0, NULL);
		assert_non_null(tmp);
		stalloc_free(tmp, 0, 0, NULL);
	}
	reach_s = stalloc_malloc(8 * MB, 0, NULL);
	assert_non_null(reach_s);
	stalloc_free(reach_s, 0, 0, NULL);
	for (j = 0; j < 6; j++)
		stalloc_free(kept[j], 0, 0, NULL);
	if (keep)
		stalloc_free(keep, 0, 0, NULL);
	stalloc_free(a, 0, 0, NULL);
}

static void reach_once(int k)
{
	reach_iter(k, false);
}

/*
 * A request far out of the sizes its dynamic position was seen at (a kept
 * buffer where a temporary was) is not placed by that position's short
 * window: it would sit in the space the 8 MiB tensor's slot needs after
 * the run, and that tensor would miss (reuse_need()).
 */
static void test_plan_reuse_out_of_range(void **state)
{
	struct stalloc_plan_summary s;
	struct stalloc_stats a, b;
	char plan[256];
	void *slot;
	int k;

	(void)state;
	plan_from("ro", reach_once, NULL, plan, sizeof(plan), &s);
	assert_true(s.dynamic_requests >= 12);
	for (k = 0; k < 3; k++) {
		stalloc_mark("iteration");
		reach_iter(k, false);
	}
	slot = reach_s;
	stalloc_mark("iteration");
	stalloc_stats(0, &a);
	reach_iter(1, true);
	stalloc_stats(0, &b);
	assert_ptr_equal(reach_s, slot);
	assert_int_equal(b.plan_misses, a.plan_misses);
	unlink(plan);
}

/*
 * A 12 MiB buffer live during an expert loop of @experts requests, then
 * a 3 MiB tensor (@edge: issued) and eight tensors of expert sizes in its
 * place; their addresses go to @t.
 */
static void fit_iter(int k, int experts, bool edge, void **t)
{
	static const size_t tsz[8] = { 9, 10, 8, 11, 9, 10, 8, 11 }; /* /8 */
	void *x, *b = stalloc_malloc(12 * MB, 0, NULL);
	int j;

	assert_non_null(b);
	expert_loop(k, experts);
	stalloc_free(b, 0, 0, NULL);
	x = edge ? stalloc_malloc(3 * MB, 0, NULL) : NULL;
	for (j = 0; j < 8; j++) {
		t[j] = stalloc_malloc(tsz[j] * (MB / 8), 0, NULL);
		assert_non_null(t[j]);
	}
	for (j = 0; j < 8; j++)
		stalloc_free(t[j], 0, 0, NULL);
	if (x)
		stalloc_free(x, 0, 0, NULL);
}

static void fit_once(int k)
{
	void *t[8];

	fit_iter(k, 12, true, t);
}

/*
 * An expert loop eight requests shorter than recorded, the tensor at the
 * run's edge left out, and the tensors after it all of sizes the run's
 * positions were seen at: six in a row matching the static positions
 * after the edge take the job out of the run, and the sixth and later
 * tensors get their slots (dyn_run_exit()).
 */
static void test_plan_dyn_run_shorter_fit(void **state)
{
	struct stalloc_plan_summary s;
	void *t[8], *u[8];
	char plan[256];
	int k, j;

	(void)state;
	plan_from("rf", fit_once, NULL, plan, sizeof(plan), &s);
	assert_int_equal(s.dynamic_requests, 12);
	for (k = 0; k < 3; k++) {
		stalloc_mark("iteration");
		fit_iter(k, 12, true, t);
	}
	stalloc_mark("iteration");
	fit_iter(1, 4, false, u);
	for (j = 5; j < 8; j++) /* from the sixth on */
		assert_ptr_equal(u[j], t[j]);
	unlink(plan);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		MAPPER_TEST(test_plan_mode),
		MAPPER_TEST(test_plan_no_markers),
		MAPPER_TEST(test_plan_perturbed),
		MAPPER_TEST(test_plan_inserted_in_prologue),
		MAPPER_TEST(test_plan_inserted_at_end),
		MAPPER_TEST(test_plan_inserted_no_markers),
		MAPPER_TEST(test_plan_other_workload),
		MAPPER_TEST(test_plan_dropped_pool),
		MAPPER_TEST(test_plan_rejected_fallback),
		MAPPER_TEST(test_plan_odd_iteration),
		MAPPER_TEST(test_plan_corrupt),
		MAPPER_TEST(test_auto_mode),
		MAPPER_TEST(test_auto_sync),
		MAPPER_TEST(test_auto_traced_shrink),
		MAPPER_TEST(test_auto_traced_fine),
		MAPPER_TEST(test_auto_rejected),
		MAPPER_TEST(test_auto_no_markers),
		MAPPER_TEST(test_auto_no_markers_rejected),
		MAPPER_TEST(test_plan_reuse),
		MAPPER_TEST(test_plan_lend),
		MAPPER_TEST(test_plan_no_lend),
		MAPPER_TEST(test_plan_lend_fine),
		MAPPER_TEST(test_plan_lend_coarse),
		MAPPER_TEST(test_plan_whole_segments),
		MAPPER_TEST(test_plan_skipped),
		MAPPER_TEST(test_plan_inserted_in_run),
		MAPPER_TEST(test_plan_grown_in_run),
		MAPPER_TEST(test_plan_request_bytes),
		MAPPER_TEST(test_plan_phase),
		MAPPER_TEST(test_plan_state_early),
		MAPPER_TEST(test_plan_state_drifted),
		MAPPER_TEST(test_plan_state_left_out),
		MAPPER_TEST(test_plan_late_state),
		MAPPER_TEST(test_plan_pairs),
		MAPPER_TEST(test_auto_pairs),
		MAPPER_TEST(test_plan_dyn_run_longer),
		MAPPER_TEST(test_plan_drift_in_run),
		MAPPER_TEST(test_plan_dyn_run_shorter),
		MAPPER_TEST(test_plan_too_loose),
		MAPPER_TEST(test_plan_twin_block),
		MAPPER_TEST(test_plan_exit_undone),
		MAPPER_TEST(test_plan_dyn_run_longer_exit),
		MAPPER_TEST(test_plan_dyn_run_shorter_fit),
		MAPPER_TEST(test_plan_reuse_out_of_range),
		MAPPER_TEST(test_plan_grown_with_dynamic),
		MAPPER_TEST(test_plan_borrow_passed),
		MAPPER_TEST(test_plan_inserted_with_dynamic),
	};
	const char *group = mapper_init(argc, argv, "mapper-plan");

	if (!group)
		return 1;
	return mapper_done(
		cmocka_run_group_tests_name(group, tests, NULL, NULL));
}
