/* SPDX-License-Identifier: MIT */
/*
 * planner/pack-internal.h - what the packer's files share (private)
 *
 * pack.c validates the input, rotates time to start at the cut where the
 * fewest bytes are live, puts the buffers live across that cut (the only
 * ones that still wrap around) at the bottom, compresses time
 * into sections (the spans between consecutive lifetime endpoints) and
 * splits the rest into independent groups: runs of sections that no
 * lifetime crosses, merged when a wrap-around buffer links two of them.
 * Each group is then packed on its own from offset 0 by the skyline passes
 * of pack-window.c, pack-skyline.c, pack-family.c and pack-start.c (the
 * sweep of pack-sweep.c for huge groups) and pack-greedy.c and, where a
 * gap to the lower bound remains, improved by pack-improve.c and
 * pack-search.c.
 *
 * Determinism: every loop that may run long charges its steps to
 * ctx->work (pack_charge()) and stops on the work it has done, never on
 * the clock: pack_work_ms() converts the work into nominal milliseconds
 * (PACK_WORK_PER_MS, calibrated so that one nominal millisecond is about
 * one millisecond of one core of the development machine) and every share
 * of the budget is computed from it.  The same input and options therefore
 * give the same packing on any machine under any load.  The wall clock is
 * read only by pack_out_of_time() as a safety stop (ctx->wall_limit_ms);
 * when that fires, ctx->time_hit is set and the result may differ.
 */
#ifndef STALLOC_PLANNER_PACK_INTERNAL_H
#define STALLOC_PLANNER_PACK_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "pack.h"

struct pack_search;

/**
 * struct pack_item - one buffer as the solvers see it
 * @size: bytes
 * @len: time units live (an ordering key)
 * @off: offset inside its group's packing
 * @buf: index into the caller's array
 * @nr_iv: 1, or 2 for a wrap-around buffer live at both ends
 * @lo, @hi: section ranges [lo, hi) it is live in
 */
struct pack_item {
	uint64_t size;
	uint64_t len;
	uint64_t off;
	uint32_t buf;
	uint32_t nr_iv;
	uint32_t lo[2];
	uint32_t hi[2];
};

/**
 * struct pack_group - buffers that can be packed independently of the rest
 * @items: indices into ctx->items
 * @secs: the sections the group spans, ascending
 * @load: most bytes of the group live in one section
 * @peak: peak of its current packing
 * @edges: overlapping pairs (the cost of the greedy and of the search)
 * @method: what produced the current packing
 * @optimal: @peak proven minimal for the group
 * @alt: NULL, or another packing kept aside (offsets by group position):
 *	one that beat the constructive passes but that the improvement is
 *	not to start from (pack-segments.c); taken at the end if lower
 * @alt_peak, @alt_method: its peak and what produced it
 */
struct pack_group {
	uint32_t *items;
	size_t nr;
	uint32_t *secs;
	size_t nr_secs;
	uint64_t load;
	uint64_t peak;
	uint64_t edges;
	const char *method;
	bool optimal;
	uint64_t *alt;
	uint64_t alt_peak;
	const char *alt_method;
};

/**
 * struct pack_ctx - one pack_solve() call
 * @target: the peak every group must reach for the whole to reach LOAD
 * @cut: time rotated to 0 (see pack.c); only buffers live across it wrap:
 *	those that live throughout go to the bottom, the others are items
 *	of two intervals
 * @nodes: search nodes explored so far
 * @work: work units done so far (see pack_charge())
 * @work_limit: the budget, in work units
 * @wall_limit_ms: the wall-clock safety stop (0: none)
 * @time_hit: the safety stop fired: the result depends on the clock
 * @pool: storage of every group's @items and @secs
 * @loc: per section, its index in its group's @secs (a lifetime piece
 *	lies in one run of sections, so its local range is contiguous too)
 * @stamp: per item scratch for deduplication (pack-greedy.c)
 * @search: the exact search's state for the group last searched, kept
 *	for the next search of that group (pack-search.c)
 */
struct pack_ctx {
	struct pack_item *items;
	size_t nr_items;
	size_t nr_secs;
	struct pack_group *groups;
	size_t nr_groups;
	uint64_t target;
	struct timespec t0;
	uint64_t work;
	uint64_t work_limit;
	double wall_limit_ms;
	bool time_hit;
	bool no_search;
	uint64_t horizon;
	uint64_t cut;
	uint64_t nodes;
	uint32_t *pool;
	uint32_t *loc;
	uint32_t *stamp;
	uint32_t stamp_gen;
	struct pack_search *search;
};

/*
 * Work units per nominal millisecond.  A unit is one elementary step
 * (an item or neighbour visited, a segment-tree level walked); about
 * 3 ns on the development machine.
 */
#define PACK_WORK_PER_MS 320000.0

static inline void pack_charge(struct pack_ctx *ctx, uint64_t units)
{
	ctx->work += units;
}

/* What sorting @n elements with qsort() costs, in work units. */
static inline uint64_t pack_sort_units(uint64_t n)
{
	uint64_t lg = 1;

	while (lg < 64 && (1ull << lg) < n)
		lg++;
	return 2 * n * lg;
}

/* The work done so far, in nominal milliseconds (deterministic). */
static inline double pack_work_ms(const struct pack_ctx *ctx)
{
	return (double)ctx->work / PACK_WORK_PER_MS;
}

/* Wall-clock milliseconds since ctx->t0 (for reports only). */
double pack_elapsed_ms(const struct pack_ctx *ctx);
/*
 * The budget is spent, or the wall-clock safety stop fired (sticky:
 * ctx->time_hit).
 */
bool pack_out_of_time(struct pack_ctx *ctx);
/* pack_out_of_time(), or the work done reached @until_ms nominal ms. */
bool pack_past(struct pack_ctx *ctx, double until_ms);

/*
 * Greedy best fit; sets item offsets and g->peak, or keeps the group's
 * current packing (g->method set) when it is better.  @arrival: the
 * buffers in the order they start only (an online best-fit allocator's
 * packing), whatever the time left; else the other orders while there is.
 */
int pack_greedy(struct pack_ctx *ctx, struct pack_group *g, bool arrival);
/*
 * Bottom-up greedy (always fill the lowest free offset); keeps the
 * group's current packing when it is better.  O(n log n log S) a pass.
 */
int pack_skyline(struct pack_ctx *ctx, struct pack_group *g);
/*
 * One bottom-up pass with the ranks given: @order lists the group's
 * positions (indices into g->items), first rank first.  Keeps the
 * group's packing when it is better; the new one is called @name.  A
 * pass stops early when it cannot beat the group's peak or the time is
 * up.  0 or -ENOMEM.
 */
int pack_skyline_ranked(struct pack_ctx *ctx, struct pack_group *g,
			const uint32_t *order, const char *name);
/*
 * A skyline pass ranked by how far items reach on both sides of the most
 * loaded section, the widest first (pack-window.c).  Keeps the group's
 * packing when it is better.  0 or -ENOMEM.
 */
int pack_window_reach(struct pack_ctx *ctx, struct pack_group *g);
/*
 * Skyline passes ranked by windows around the most loaded section, the
 * @from th to the (@from + @count - 1) th of its sequence of radii
 * (pack-window.c), until @until_ms of work (see pack_past()) or until @g's peak is at most @cap.
 * 0 or -ENOMEM.
 */
int pack_window_group(struct pack_ctx *ctx, struct pack_group *g, uint64_t cap,
		      double until_ms, size_t from, size_t count);
/*
 * A skyline pass ranked by nested (laminar) families, the longest first,
 * then by start (pack-family.c).  Keeps the group's packing when it is
 * better.  0 or -ENOMEM.
 */
int pack_family(struct pack_ctx *ctx, struct pack_group *g);
/*
 * A skyline pass ranked by start, then latest end (pack-start.c); keeps
 * the group's packing when it is better.  0 or -ENOMEM.
 */
int pack_start_pass(struct pack_ctx *ctx, struct pack_group *g);
/*
 * Best fit in the order items start (then in the order they end, the
 * latest first), inside segments that never merge, a new one of an
 * item's size when none fits (pack-segments.c).  A packing lower than the
 * group's goes to g->alt, for pack.c to take at the end if still lower:
 * the improvement goes on from the group's own packing, which it often
 * lowers further.  Groups with wrap-around items are left as they are.
 * 0 or -ENOMEM.
 */
int pack_segments(struct pack_ctx *ctx, struct pack_group *g);
/* A placed item's address range [off, top). */
struct pack_span {
	uint64_t off;
	uint64_t top;
};

/**
 * struct pack_window - a re-packing of some of a group's items
 * @ids: item indices: @nr_fixed fixed ones (offsets kept), then the
 *	ones to place, in order
 * @base, @width: local sections [base, base + width) hold every
 *	lifetime piece of @ids
 */
struct pack_window {
	const uint32_t *ids;
	size_t nr_fixed;
	size_t nr;
	size_t base;
	size_t width;
};

/*
 * Place the non-fixed items of @w one by one at the best (@first_fit: the
 * lowest) gap among the placed or fixed items overlapping them; *peak gets
 * their highest top.  0 or -ENOMEM.
 */
int pack_greedy_repack(struct pack_ctx *ctx, struct pack_group *g,
		       const struct pack_window *w, bool first_fit,
		       uint64_t *peak);
/*
 * Until @until_ms of work (see pack_past()) or until @g's peak is at most
 * @cap, re-pack the items live
 * where its peak is set, around the fixed rest; keeps a re-packing when
 * it lowers the peak.  Without @persist, stops at the first round that
 * improves nothing instead of going on with random orders.  0 or -ENOMEM.
 */
int pack_improve_group(struct pack_ctx *ctx, struct pack_group *g, uint64_t cap,
		       double until_ms, bool persist);
/* Online first fit in start order: O(n log n), for very large groups. */
int pack_sweep(struct pack_ctx *ctx, struct pack_group *g);
/* Overlapping pairs in @g, counted by a sweep (wrap pieces counted apart). */
uint64_t pack_count_edges(const struct pack_ctx *ctx,
			  const struct pack_group *g);

/*
 * Branch and bound for a packing of @g with peak <= @cap.  Returns 1 when
 * found (offsets and g->peak updated), 0 when proven impossible, -ETIME
 * when the work budget ran out, -E2BIG when @g has too many overlapping
 * pairs to search, or -ENOMEM.  What the search builds from @g alone
 * (section and neighbour lists) is kept in ctx->search for the next call
 * on @g: the bisection searches one group at many capacities.
 */
int pack_search(struct pack_ctx *ctx, struct pack_group *g, uint64_t cap);
/* Free ctx->search. */
void pack_search_release(struct pack_ctx *ctx);

#endif /* STALLOC_PLANNER_PACK_INTERNAL_H */
