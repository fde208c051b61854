// SPDX-License-Identifier: MIT
/*
 * planner/pack.c - static packing: validation, lower bound, decomposition
 *
 * pack_solve() checks every buffer before touching any offset, then
 * rotates time so that it starts at the cut where the fewest bytes are
 * live (pack_find_cut(): overlap and LOAD do not change under rotation, and
 * afterwards only the buffers live across the cut wrap around).  Those
 * that live throughout it stacks at the bottom, which never raises a
 * packing's peak; one that crosses the cut without living throughout is
 * an item of two intervals, [s, horizon) and [0, e), packed with the rest
 * (stacked too, it cost its size in full: one of two alternating
 * instances crosses every cut).  The items are split into groups (see
 * pack-internal.h) that are packed independently above the stack.  Each
 * group gets, in this order (pack_construct_group()): the window and
 * skyline passes of pack-window.c and pack-skyline.c, or instead the
 * sweep of pack-sweep.c for groups too big for them; then the best-fit
 * greedy of pack-greedy.c when it is affordable and the peak is above
 * the group's LOAD, the passes ranked by nested families (pack-family.c)
 * and by start (pack-start.c), for pipeline-parallel traces, and the
 * greedy's other orders.  While time remains and a peak is above the
 * lower bound, the groups above it are improved locally
 * (pack-improve.c), then pack-search.c looks for a packing of every
 * group under a capacity C, starting with C = LOAD and bisecting between
 * the best proven bound and the best packing found (the search's set-up
 * is built once per group and kept in ctx->search).
 *
 * Invariants: every group's item offsets always describe a valid packing
 * of that group (a search only replaces them with another valid one), so
 * the result is valid whenever time runs out.  Only the caller's @offset
 * fields are written, and only on success or -ENOSPC.
 *
 * No global state; calls are independent and may run in parallel.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lib/util.h"
#include "planner/pack-internal.h"

/* Beyond these, a group is not searched / not given the greedy. */
#define PACK_SEARCH_MAX_EDGES (8u << 20)
#define PACK_SEARCH_MAX_ITEMS 8000
#define PACK_GREEDY_MAX_EDGES (96u << 20)
/* The best-fit greedy (after the skyline one) costs O(E log E). */
#define PACK_BEST_FIT_MAX_EDGES (4u << 20)
/* Beyond this, a group gets no family-ranked pass (pack-family.c). */
#define PACK_FAMILY_MAX_ITEMS 65536
/* Of its share of the time, what a searchable group spends improving. */
#define PACK_LOCAL_SHARE 0.25
/* Of its share of the time, the window-ranked passes of a searchable group. */
#define PACK_WINDOW_SHARE 0.5
/* One search of the bisection gets 1 / this of the work left, at first. */
#define PACK_ATTEMPT_SHARE 8

double pack_elapsed_ms(const struct pack_ctx *ctx)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (double)(now.tv_sec - ctx->t0.tv_sec) * 1e3 +
	       (double)(now.tv_nsec - ctx->t0.tv_nsec) / 1e6;
}

static double pack_budget_ms(const struct pack_ctx *ctx)
{
	return (double)ctx->work_limit / PACK_WORK_PER_MS;
}

bool pack_out_of_time(struct pack_ctx *ctx)
{
	if (ctx->work >= ctx->work_limit || ctx->time_hit)
		return true;
	if (ctx->wall_limit_ms > 0 &&
	    pack_elapsed_ms(ctx) >= ctx->wall_limit_ms)
		ctx->time_hit = true;
	return ctx->time_hit;
}

bool pack_past(struct pack_ctx *ctx, double until_ms)
{
	return pack_work_ms(ctx) >= until_ms || pack_out_of_time(ctx);
}

/* The linear pieces of @b's lifetime; returns how many (0 to 2). */
static int pack_pieces(const struct pack_buf *b, uint64_t horizon,
		       uint64_t s[2], uint64_t e[2])
{
	int n = 0;

	if (!b->wraps) {
		s[0] = b->start;
		e[0] = b->end;
		return b->start < b->end;
	}
	if (b->start < horizon) {
		s[n] = b->start;
		e[n++] = horizon;
	}
	if (b->end > 0) {
		s[n] = 0;
		e[n++] = b->end;
	}
	return n;
}

bool pack_lifetimes_overlap(const struct pack_buf *a, const struct pack_buf *b,
			    uint64_t horizon)
{
	uint64_t as[2], ae[2], bs[2], be[2];
	int na = pack_pieces(a, horizon, as, ae);
	int nb = pack_pieces(b, horizon, bs, be);
	int i, j;

	for (i = 0; i < na; i++)
		for (j = 0; j < nb; j++)
			if (as[i] < be[j] && bs[j] < ae[i])
				return true;
	return false;
}

struct pack_event {
	uint64_t t;
	int64_t delta;
};

static int pack_event_cmp(const void *pa, const void *pb)
{
	const struct pack_event *a = pa, *b = pb;

	if (a->t != b->t)
		return a->t < b->t ? -1 : 1;
	/* Half-open lifetimes: frees at t come before allocations at t. */
	return (a->delta > 0) - (b->delta > 0);
}

static int pack_load(const struct pack_buf *bufs, size_t nr, uint64_t horizon,
		     uint64_t *out)
{
	struct pack_event *ev;
	uint64_t s[2], e[2], cur = 0, best = 0;
	size_t i, n = 0;
	int k, np;

	*out = 0;
	if (!nr)
		return 0;
	if (nr > SIZE_MAX / (4 * sizeof(*ev)))
		return -ENOMEM;
	ev = malloc(4 * nr * sizeof(*ev));
	if (!ev)
		return -ENOMEM;
	for (i = 0; i < nr; i++) {
		np = pack_pieces(&bufs[i], horizon, s, e);
		for (k = 0; k < np; k++) {
			ev[n++] = (struct pack_event){ s[k],
						       (int64_t)bufs[i].size };
			ev[n++] = (struct pack_event){ e[k],
						       -(int64_t)bufs[i].size };
		}
	}
	qsort(ev, n, sizeof(*ev), pack_event_cmp);
	for (i = 0; i < n; i++) {
		cur += (uint64_t)ev[i].delta;
		if (cur > best)
			best = cur;
	}
	free(ev);
	*out = best;
	return 0;
}

uint64_t pack_lower_bound(const struct pack_buf *bufs, size_t nr,
			  uint64_t horizon)
{
	uint64_t load;

	return pack_load(bufs, nr, horizon, &load) ? 0 : load;
}

static int pack_check_buf(const struct pack_buf *b, size_t i, uint64_t horizon)
{
	if (!b->size || b->size > INT64_MAX)
		return sa_error(-EINVAL, "pack: buffer %zu: bad size %llu", i,
				(unsigned long long)b->size);
	if (b->start > horizon || b->end > horizon)
		return sa_error(
			-EINVAL,
			"pack: buffer %zu: lifetime [%llu, %llu) beyond horizon %llu",
			i, (unsigned long long)b->start,
			(unsigned long long)b->end,
			(unsigned long long)horizon);
	if (!b->wraps && b->start >= b->end)
		return sa_error(-EINVAL,
				"pack: buffer %zu: empty lifetime [%llu, %llu)",
				i, (unsigned long long)b->start,
				(unsigned long long)b->end);
	if (b->wraps && (b->end > b->start || !horizon))
		return sa_error(
			-EINVAL,
			"pack: buffer %zu: wrap-around lifetime [%llu, %llu) with end after start",
			i, (unsigned long long)b->start,
			(unsigned long long)b->end);
	return 0;
}

static int pack_check(const struct pack_buf *bufs, size_t nr, uint64_t horizon)
{
	uint64_t total = 0;
	size_t i;
	int err;

	if (nr >= UINT32_MAX / 4)
		return sa_error(-EINVAL, "pack: %zu buffers: too many", nr);
	for (i = 0; i < nr; i++) {
		err = pack_check_buf(&bufs[i], i, horizon);
		if (err)
			return err;
		if (__builtin_add_overflow(total, bufs[i].size, &total) ||
		    total > INT64_MAX)
			return sa_error(
				-EINVAL,
				"pack: buffer sizes add up beyond 2^63");
	}
	return 0;
}

/*
 * A lifetime as a circular arc [a, a + len) of time units modulo @horizon
 * (len == horizon: lives throughout).
 */
static void pack_arc(const struct pack_buf *b, uint64_t horizon, uint64_t *a,
		     uint64_t *len)
{
	if (!b->wraps) {
		*a = b->start;
		*len = b->end - b->start;
	} else if (b->start == b->end) {
		*a = 0;
		*len = horizon;
	} else {
		*a = b->start == horizon ? 0 : b->start;
		/* start == 0 (checked: end <= start) lives throughout too. */
		*len = b->start ? b->end + horizon - b->start : horizon;
	}
}

/*
 * @b's lifetime after rotating time by -ctx->cut: sets [*s, *e), which
 * ends past the horizon when it crosses the cut, and returns false when
 * it lives throughout (it then goes to the bottom, outside any group).
 */
static bool pack_rotated(const struct pack_ctx *ctx, const struct pack_buf *b,
			 uint64_t *s, uint64_t *e)
{
	uint64_t a, len, h = ctx->horizon;

	pack_arc(b, h, &a, &len);
	a = a >= ctx->cut ? a - ctx->cut : a + h - ctx->cut;
	*s = a;
	*e = a + len;
	return len < h;
}

struct pack_cut_ev {
	uint64_t t;
	uint64_t size;
	bool end;
};

static int pack_cut_ev_cmp(const void *pa, const void *pb)
{
	const struct pack_cut_ev *a = pa, *b = pb;

	if (a->t != b->t)
		return a->t < b->t ? -1 : 1;
	return (int)b->end - (int)a->end;
}

/*
 * The cut: the time t0 at which the fewest bytes of buffers are live on
 * both sides (ties: fewest buffers, then the earliest t0; 0 when nothing
 * wraps).  Rotating time to start at t0 leaves only those buffers wrapping;
 * overlap and LOAD are rotation invariant, so a packing of the rotated
 * lifetimes is one of the original ones.
 */
static int pack_find_cut(struct pack_ctx *ctx, const struct pack_buf *bufs,
			 size_t nr)
{
	uint64_t h = ctx->horizon, a, len, cur = 0, best = UINT64_MAX;
	uint64_t nb = 0, best_nb = UINT64_MAX;
	struct pack_cut_ev *ev;
	bool any_wrap = false;
	size_t i, n = 0;

	for (i = 0; i < nr; i++)
		any_wrap |= bufs[i].wraps;
	ctx->cut = 0;
	if (!any_wrap || !h)
		return 0;
	ev = malloc(2 * nr * sizeof(*ev));
	if (!ev)
		return -ENOMEM;
	for (i = 0; i < nr; i++) {
		pack_arc(&bufs[i], h, &a, &len);
		if (len == h)
			continue;
		ev[n++] = (struct pack_cut_ev){ a, bufs[i].size, false };
		ev[n++] = (struct pack_cut_ev){ (a + len) % h, bufs[i].size,
						true };
		if (a + len >= h) {
			cur += bufs[i].size;
			nb++;
		}
	}
	qsort(ev, n, sizeof(*ev), pack_cut_ev_cmp);
	/* At each time: ends, then @cur is what crosses it, then starts. */
	for (i = 0; i < n;) {
		uint64_t t = ev[i].t;

		for (; i < n && ev[i].t == t && ev[i].end; i++) {
			cur -= ev[i].size;
			nb--;
		}
		if (cur < best || (cur == best && nb < best_nb)) {
			best = cur;
			best_nb = nb;
			ctx->cut = t;
		}
		for (; i < n && ev[i].t == t; i++) {
			cur += ev[i].size;
			nb++;
		}
	}
	free(ev);
	return 0;
}

static int pack_u64_cmp(const void *pa, const void *pb)
{
	uint64_t a = *(const uint64_t *)pa, b = *(const uint64_t *)pb;

	return (a > b) - (a < b);
}

static uint32_t pack_point_idx(const uint64_t *pts, size_t n, uint64_t t)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (pts[mid] < t)
			lo = mid + 1;
		else
			hi = mid;
	}
	return (uint32_t)lo;
}

/* Items for the buffers that do not live throughout, with sections. */
static int pack_build_items(struct pack_ctx *ctx, const struct pack_buf *bufs,
			    size_t nr)
{
	uint64_t *pts, s, e;
	size_t i, np = 0, u = 0;
	int err;

	err = pack_find_cut(ctx, bufs, nr);
	if (err)
		return err;
	ctx->items = calloc(nr ? nr : 1, sizeof(*ctx->items));
	pts = malloc((4 * nr + 1) * sizeof(*pts));
	if (!ctx->items || !pts) {
		free(pts);
		return -ENOMEM;
	}
	for (i = 0; i < nr; i++) {
		if (!pack_rotated(ctx, &bufs[i], &s, &e))
			continue;
		pts[np++] = s;
		pts[np++] = e <= ctx->horizon ? e : ctx->horizon;
		if (e > ctx->horizon) {
			pts[np++] = 0;
			pts[np++] = e - ctx->horizon;
		}
	}
	qsort(pts, np, sizeof(*pts), pack_u64_cmp);
	for (i = 0; i < np; i++)
		if (!u || pts[u - 1] != pts[i])
			pts[u++] = pts[i];
	ctx->nr_secs = u ? u - 1 : 0;
	for (i = 0; i < nr; i++) {
		struct pack_item *it = &ctx->items[ctx->nr_items];

		if (!pack_rotated(ctx, &bufs[i], &s, &e))
			continue;
		it->size = bufs[i].size;
		it->buf = (uint32_t)i;
		it->nr_iv = 1;
		it->lo[0] = pack_point_idx(pts, u, s);
		it->len = e - s;
		if (e > ctx->horizon) {
			/* crosses the cut: [s, horizon) and [0, e - horizon) */
			it->nr_iv = 2;
			it->hi[0] = pack_point_idx(pts, u, ctx->horizon);
			it->lo[1] = pack_point_idx(pts, u, 0);
			it->hi[1] = pack_point_idx(pts, u, e - ctx->horizon);
		} else {
			it->hi[0] = pack_point_idx(pts, u, e);
		}
		ctx->nr_items++;
	}
	free(pts);
	return 0;
}

static uint32_t pack_uf_find(uint32_t *parent, uint32_t x)
{
	while (parent[x] != x) {
		parent[x] = parent[parent[x]];
		x = parent[x];
	}
	return x;
}

/*
 * Runs of sections no lifetime crosses, merged by wrap-around items:
 * @run[s] gets the root run of section s.  Returns the number of runs.
 */
static int pack_find_runs(struct pack_ctx *ctx, uint32_t *run, uint32_t *parent)
{
	size_t S = ctx->nr_secs, i, s;
	int64_t *cross, c = 0;
	uint32_t r = 0;
	uint32_t k;

	cross = calloc(S + 1, sizeof(*cross));
	if (!cross)
		return -ENOMEM;
	for (i = 0; i < ctx->nr_items; i++)
		for (k = 0; k < ctx->items[i].nr_iv; k++) {
			cross[ctx->items[i].lo[k] + 1]++;
			cross[ctx->items[i].hi[k]]--;
		}
	for (s = 0; s < S; s++) {
		c += cross[s];
		if (s && !c)
			r++;
		run[s] = r;
		parent[r] = r;
	}
	free(cross);
	for (i = 0; i < ctx->nr_items; i++) {
		const struct pack_item *it = &ctx->items[i];
		uint32_t a, b;

		if (it->nr_iv < 2)
			continue;
		a = pack_uf_find(parent, run[it->lo[0]]);
		b = pack_uf_find(parent, run[it->lo[1]]);
		if (a != b)
			parent[a] = b;
	}
	for (s = 0; s < S; s++)
		run[s] = pack_uf_find(parent, run[s]);
	return 0;
}

/* Section loads (bytes live in each section), by a difference array. */
static int pack_section_loads(const struct pack_ctx *ctx, uint64_t **out)
{
	uint64_t *load = calloc(ctx->nr_secs + 1, sizeof(*load)), c = 0;
	size_t i, s;
	uint32_t k;

	if (!load)
		return -ENOMEM;
	for (i = 0; i < ctx->nr_items; i++)
		for (k = 0; k < ctx->items[i].nr_iv; k++) {
			load[ctx->items[i].lo[k]] += ctx->items[i].size;
			load[ctx->items[i].hi[k]] -= ctx->items[i].size;
		}
	for (s = 0; s < ctx->nr_secs; s++) {
		c += load[s];
		load[s] = c;
	}
	*out = load;
	return 0;
}

/* Counting sort of items and sections into groups, one per root run. */
static int pack_fill_groups(struct pack_ctx *ctx, const uint32_t *run,
			    uint32_t *gid, const uint64_t *load)
{
	size_t S = ctx->nr_secs, i, s, ng = 0;
	struct pack_group *g;
	uint32_t *pool;

	for (s = 0; s <= S; s++)
		gid[s] = UINT32_MAX;
	for (i = 0; i < ctx->nr_items; i++) {
		uint32_t r = run[ctx->items[i].lo[0]];

		if (gid[r] == UINT32_MAX)
			gid[r] = (uint32_t)ng++;
	}
	ctx->groups = calloc(ng ? ng : 1, sizeof(*ctx->groups));
	ctx->pool = malloc((ctx->nr_items + S + 1) * sizeof(*pool));
	ctx->loc = malloc((S + 1) * sizeof(*ctx->loc));
	if (!ctx->groups || !ctx->pool || !ctx->loc)
		return -ENOMEM;
	pool = ctx->pool;
	ctx->nr_groups = ng;
	for (i = 0; i < ctx->nr_items; i++)
		ctx->groups[gid[run[ctx->items[i].lo[0]]]].nr++;
	for (s = 0; s < S; s++)
		if (gid[run[s]] != UINT32_MAX)
			ctx->groups[gid[run[s]]].nr_secs++;
	for (i = 0; i < ng; i++) {
		g = &ctx->groups[i];
		g->items = pool;
		pool += g->nr;
		g->secs = pool;
		pool += g->nr_secs;
		g->nr = 0;
		g->nr_secs = 0;
	}
	for (i = 0; i < ctx->nr_items; i++) {
		g = &ctx->groups[gid[run[ctx->items[i].lo[0]]]];
		g->items[g->nr++] = (uint32_t)i;
	}
	for (s = 0; s < S; s++) {
		if (gid[run[s]] == UINT32_MAX)
			continue;
		g = &ctx->groups[gid[run[s]]];
		ctx->loc[s] = (uint32_t)g->nr_secs;
		g->secs[g->nr_secs++] = (uint32_t)s;
		if (load[s] > g->load)
			g->load = load[s];
	}
	return 0;
}

static int pack_build_groups(struct pack_ctx *ctx)
{
	size_t S = ctx->nr_secs;
	uint32_t *run, *tmp;
	uint64_t *load = NULL;
	int err = -ENOMEM;

	run = calloc(S + 1, sizeof(*run));
	tmp = calloc(S + 1, sizeof(*tmp));
	if (!run || !tmp)
		goto out;
	err = pack_find_runs(ctx, run, tmp);
	if (!err)
		err = pack_section_loads(ctx, &load);
	if (!err)
		err = pack_fill_groups(ctx, run, tmp, load);
out:
	free(load);
	free(tmp);
	free(run);
	return err;
}

static void pack_ctx_free(struct pack_ctx *ctx)
{
	size_t i;

	for (i = 0; i < ctx->nr_groups && ctx->groups; i++)
		free(ctx->groups[i].alt);
	free(ctx->pool);
	free(ctx->loc);
	free(ctx->groups);
	free(ctx->items);
	free(ctx->stamp);
	pack_search_release(ctx);
}

static bool pack_searchable(const struct pack_group *g)
{
	return g->nr <= PACK_SEARCH_MAX_ITEMS &&
	       g->edges <= PACK_SEARCH_MAX_EDGES;
}

/*
 * The constructive packings of group @g, the @left th last: skyline
 * passes (ranked around the peak, by reach and then by the first window,
 * by area, by size, then by nested families, then by other windows while
 * time is left), or the sweep for groups too big for them; the best-fit
 * greedy in the order the buffers start (an online allocator's packing:
 * no plan is worse) right after the first passes, whatever the time left;
 * then the greedy's other orders when affordable and a gap remains.  The
 * window passes may take the group's share of the time left, or a part of
 * it if the exact search can follow.
 */
static int pack_construct_group(struct pack_ctx *ctx, struct pack_group *g,
				size_t left)
{
	double budget = pack_budget_ms(ctx), now, until;
	int err = 0;

	if (g->edges <= PACK_GREEDY_MAX_EDGES) {
		err = pack_window_reach(ctx, g);
		if (!err)
			err = pack_window_group(ctx, g, g->load, budget, 0, 1);
		if (!err)
			err = pack_skyline(ctx, g);
		if (!err && g->edges <= PACK_BEST_FIT_MAX_EDGES &&
		    g->peak > g->load)
			err = pack_greedy(ctx, g, true);
		if (!err && g->peak > g->load && g->nr <= PACK_FAMILY_MAX_ITEMS)
			err = pack_family(ctx, g);
		if (!err && g->peak > g->load && g->nr <= PACK_FAMILY_MAX_ITEMS)
			err = pack_start_pass(ctx, g);
		if (!err && g->peak > g->load && g->nr <= PACK_FAMILY_MAX_ITEMS)
			err = pack_segments(ctx, g);
		if (!err && !ctx->no_search && g->peak > g->load) {
			now = pack_work_ms(ctx);
			until = now + (budget - now) / (double)left;
			if (pack_searchable(g))
				until = now + (until - now) * PACK_WINDOW_SHARE;
			err = pack_window_group(ctx, g, g->load, until, 1,
						SIZE_MAX);
		}
	}
	if (!err && !g->method)
		err = pack_sweep(ctx, g);
	/* (PACK_BEST_FIT_MAX_EDGES is below PACK_GREEDY_MAX_EDGES: the
	 * arrival order ran above whenever best fit is affordable) */
	if (!err && g->edges <= PACK_BEST_FIT_MAX_EDGES && g->peak > g->load)
		err = pack_greedy(ctx, g, false);
	if (!err && g->peak == g->load)
		g->optimal = true;
	return err;
}

static int pack_construct(struct pack_ctx *ctx)
{
	size_t i;
	int err;

	for (i = 0; i < ctx->nr_groups; i++) {
		struct pack_group *g = &ctx->groups[i];

		if (g->load > ctx->target)
			ctx->target = g->load;
		g->edges = pack_count_edges(ctx, g);
	}
	for (i = 0; i < ctx->nr_groups; i++) {
		err = pack_construct_group(ctx, &ctx->groups[i],
					   ctx->nr_groups - i);
		if (err)
			return err;
	}
	return 0;
}

/*
 * Local improvement of the groups above the target, each given an equal
 * share of the time left (a searchable one only a part of its share, and
 * only while it improves: the exact search comes next).
 */
static int pack_local(struct pack_ctx *ctx)
{
	double budget = pack_budget_ms(ctx), now, until;
	size_t i, left = 0;
	int err;

	for (i = 0; i < ctx->nr_groups; i++)
		left += ctx->groups[i].peak > ctx->target;
	for (i = 0; i < ctx->nr_groups && left; i++) {
		struct pack_group *g = &ctx->groups[i];

		if (g->peak <= ctx->target)
			continue;
		now = pack_work_ms(ctx);
		until = now + (budget - now) / (double)left--;
		if (pack_searchable(g))
			until = now + (until - now) * PACK_LOCAL_SHARE;
		err = pack_improve_group(ctx, g, ctx->target, until,
					 !pack_searchable(g));
		if (err)
			return err;
	}
	return 0;
}

static uint64_t pack_max_peak(const struct pack_ctx *ctx)
{
	uint64_t best = 0;
	size_t i;

	for (i = 0; i < ctx->nr_groups; i++)
		if (ctx->groups[i].peak > best)
			best = ctx->groups[i].peak;
	return best;
}

/*
 * Search every group above @cap for a packing under it.  Returns 1 when
 * all are now under, 0 when one is proven impossible, -ETIME when the
 * work limit stopped it undecided, -E2BIG when a group is too big to
 * search, or -ENOMEM.
 */
static int pack_search_all(struct pack_ctx *ctx, uint64_t cap)
{
	size_t i;
	int ret;

	for (i = 0; i < ctx->nr_groups; i++) {
		struct pack_group *g = &ctx->groups[i];

		if (g->peak <= cap)
			continue;
		if (!pack_searchable(g))
			return -E2BIG;
		ret = pack_search(ctx, g, cap);
		if (ret != 1)
			return ret;
	}
	return 1;
}

/*
 * One search for a packing under @cap, stopped after @share of the work
 * budget left (or the work budget itself): 1 found, 0 proven impossible,
 * -ETIME undecided, or an error.
 */
static int pack_attempt(struct pack_ctx *ctx, uint64_t cap, unsigned int share)
{
	uint64_t limit = ctx->work_limit;
	int ret;

	ctx->work_limit = ctx->work + (limit - ctx->work) / share;
	ret = pack_search_all(ctx, cap);
	ctx->work_limit = limit;
	return ret;
}

/*
 * Anytime bisection of the capacity between @lo (no packing below it
 * exists) and @hi, the best peak found (a valid packing is kept at every
 * moment).  Each search gets a share of the work left; one that ends
 * undecided moves the next capacity halfway up to @hi (a looser capacity
 * is easier to reach: MiniMalloc's challenging instances are solved at
 * their capacity in seconds, not at a LOAD below it), and when none is
 * left to try the bisection starts over from @lo with twice the share.
 * Sets *proven when the best peak is shown optimal.
 */
static int pack_improve(struct pack_ctx *ctx, bool *proven)
{
	uint64_t lo = ctx->target, hi = pack_max_peak(ctx), cap = lo;
	unsigned int share = PACK_ATTEMPT_SHARE;
	int ret;

	while (lo < hi && !pack_out_of_time(ctx)) {
		uint64_t work = ctx->work;

		ret = pack_attempt(ctx, cap, share);
		/* Too big to search, or (defensively) no work done: stop. */
		if (ret == -E2BIG || (ret == -ETIME && ctx->work == work))
			return 0;
		if (ret < 0 && ret != -ETIME)
			return ret;
		if (ret == 1) {
			hi = pack_max_peak(ctx);
			cap = lo + (hi - lo) / 2;
		} else if (!ret) {
			lo = cap + 1;
			cap = lo + (hi - lo) / 2;
		} else if (cap + 1 < hi) {
			cap += (hi - cap) / 2;
		} else {
			share = share > 1 ? share / 2 : 1;
			cap = lo;
		}
	}
	*proven = lo >= hi;
	return 0;
}

static const char *pack_method(const struct pack_ctx *ctx, uint64_t peak)
{
	size_t i;

	for (i = 0; i < ctx->nr_groups; i++)
		if (ctx->groups[i].peak == peak)
			return ctx->groups[i].method;
	return "stack";
}

/* Write the offsets: full-lifetime buffers stacked, groups above them. */
static uint64_t pack_store(const struct pack_ctx *ctx, struct pack_buf *bufs,
			   size_t nr)
{
	uint64_t base = 0, s, e;
	size_t i;

	for (i = 0; i < nr; i++) {
		if (pack_rotated(ctx, &bufs[i], &s, &e))
			continue;
		bufs[i].offset = base;
		base += bufs[i].size;
	}
	for (i = 0; i < ctx->nr_items; i++)
		bufs[ctx->items[i].buf].offset = base + ctx->items[i].off;
	return base;
}

/*
 * The work left when the search is done (or could not start: a group too
 * dense to search) goes to local improvement of the groups that set the
 * peak, an equal share each; the others do not change the pool.
 */
static int pack_local_rest(struct pack_ctx *ctx)
{
	double budget = pack_budget_ms(ctx), now;
	uint64_t peak = pack_max_peak(ctx);
	size_t i, left = 0;
	int err;

	for (i = 0; i < ctx->nr_groups; i++)
		left += ctx->groups[i].peak == peak;
	for (i = 0; i < ctx->nr_groups && left; i++) {
		struct pack_group *g = &ctx->groups[i];

		if (g->peak != peak)
			continue;
		now = pack_work_ms(ctx);
		err = pack_improve_group(ctx, g, ctx->target,
					 now + (budget - now) / (double)left--,
					 true);
		if (err)
			return err;
	}
	return 0;
}

/* The packings kept aside (pack-segments.c) where they are still lower. */
static void pack_take_alt(struct pack_ctx *ctx)
{
	size_t i, k;

	for (i = 0; i < ctx->nr_groups; i++) {
		struct pack_group *g = &ctx->groups[i];

		if (!g->alt || g->alt_peak >= g->peak)
			continue;
		for (k = 0; k < g->nr; k++)
			ctx->items[g->items[k]].off = g->alt[k];
		g->peak = g->alt_peak;
		g->method = g->alt_method;
		if (g->peak == g->load)
			g->optimal = true;
	}
}

static int pack_run(struct pack_ctx *ctx, struct pack_result *res)
{
	bool proven = false;
	int err;

	err = pack_build_groups(ctx);
	if (!err)
		err = pack_construct(ctx);
	if (!err && !ctx->no_search)
		err = pack_local(ctx);
	if (!err && !ctx->no_search)
		err = pack_improve(ctx, &proven);
	if (!err && !ctx->no_search && !proven && !pack_out_of_time(ctx) &&
	    pack_max_peak(ctx) > ctx->target)
		err = pack_local_rest(ctx);
	if (err)
		return err;
	pack_take_alt(ctx);
	res->peak = pack_max_peak(ctx);
	res->optimal = proven || res->peak == ctx->target;
	res->method = pack_method(ctx, res->peak);
	res->nodes = ctx->nodes;
	return 0;
}

int pack_solve(struct pack_buf *bufs, size_t nr, uint64_t horizon,
	       const struct pack_opts *opts, struct pack_result *res)
{
	struct pack_opts dflt = { 0 };
	struct pack_result r = { 0 };
	struct pack_ctx ctx = { 0 };
	double budget;
	uint64_t base;
	int err;

	if (!opts)
		opts = &dflt;
	err = pack_check(bufs, nr, horizon);
	if (err)
		return err;
	clock_gettime(CLOCK_MONOTONIC, &ctx.t0);
	budget = (double)(opts->budget_ms ? opts->budget_ms : 1000) *
		 PACK_WORK_PER_MS;
	ctx.work_limit = budget < 1e19 ? (uint64_t)budget : UINT64_MAX;
	ctx.wall_limit_ms = (double)opts->time_limit_ms;
	ctx.no_search = opts->no_search;
	ctx.horizon = horizon;
	err = pack_build_items(&ctx, bufs, nr);
	if (!err)
		err = pack_run(&ctx, &r);
	if (err) {
		pack_ctx_free(&ctx);
		return sa_error(err, "pack: %zu buffers: %s", nr,
				strerror(-err));
	}
	base = pack_store(&ctx, bufs, nr);
	pack_ctx_free(&ctx);
	r.peak += base;
	r.lower_bound = base + ctx.target;
	r.ms = pack_elapsed_ms(&ctx);
	r.work_ms = pack_work_ms(&ctx);
	r.time_limit_hit = ctx.time_hit;
	if (res)
		*res = r;
	if (opts->capacity && r.peak > opts->capacity)
		return sa_error(-ENOSPC,
				"pack: peak %llu exceeds capacity %llu",
				(unsigned long long)r.peak,
				(unsigned long long)opts->capacity);
	return 0;
}
