/* SPDX-License-Identifier: MIT */
/*
 * planner/pack.h - static packing: offsets for buffers with lifetimes
 *
 * The Dynamic Storage Allocation problem: each buffer has a size and a
 * lifetime; give every buffer an offset so that no two buffers whose
 * lifetimes overlap share an address, with the peak (max offset + size) as
 * low as possible.  The lower bound LOAD is the most bytes live at any time.
 *
 * Lifetimes are half-open [start, end) in logical time units inside
 * [0, horizon].  A buffer with wraps = true lives [start, horizon) and
 * [0, end) (end <= start): a periodic schedule's buffer that is allocated
 * in one iteration and freed in the next, so that the plan repeated every
 * iteration cannot collide with itself.  A buffer with start == 0 and
 * end == horizon lives throughout.
 */
#ifndef STALLOC_PLANNER_PACK_H
#define STALLOC_PLANNER_PACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/**
 * struct pack_buf - one buffer to place
 * @size: bytes (> 0)
 * @start: first time unit it is live
 * @end: first time unit it is no longer live (see @wraps)
 * @wraps: lives [start, horizon) and [0, end)
 * @offset: output: the planned offset
 */
struct pack_buf {
	uint64_t size;
	uint64_t start;
	uint64_t end;
	bool wraps;
	uint64_t offset;
};

/**
 * struct pack_opts - how hard to try
 * @budget_ms: work budget, in nominal milliseconds (0: 1000): the search
 *	stops on the work it has done, so the result depends only on the
 *	input and the options, never on the machine or its load
 * @time_limit_ms: wall-clock safety stop (0: none); when it fires before
 *	the budget is spent, the result depends on the clock (and
 *	pack_result.time_limit_hit says so)
 * @capacity: 0, or the most bytes available: a solution above it is
 *	reported with -ENOSPC but still returned (best found)
 * @no_search: only the constructive heuristics, no improvement or exact
 *	search (for very large instances or tests)
 */
struct pack_opts {
	uint64_t budget_ms;
	uint64_t time_limit_ms;
	uint64_t capacity;
	bool no_search;
};

/**
 * struct pack_result - what pack_solve found
 * @peak: max over buffers of offset + size
 * @lower_bound: LOAD, max bytes live at one time
 * @optimal: the peak is proven optimal (equals LOAD, or search exhausted)
 * @ms: wall time spent
 * @method: which method produced the returned solution (static string)
 * @nodes: search nodes explored by the exact search (0 if not run)
 * @work_ms: work done, in nominal milliseconds (at most the budget, plus
 *	the group's first pass: see pack-skyline.c)
 * @time_limit_hit: the wall-clock safety stop fired (the result may then
 *	differ between runs)
 */
struct pack_result {
	uint64_t peak;
	uint64_t lower_bound;
	bool optimal;
	double ms;
	const char *method;
	uint64_t nodes;
	double work_ms;
	bool time_limit_hit;
};

/*
 * Place @nr buffers (every @bufs[i].offset is set).  Returns 0, -EINVAL
 * for an invalid buffer (zero size, lifetime outside [0, horizon], empty
 * lifetime), -ENOMEM, or -ENOSPC when the best peak found exceeds
 * opts->capacity.
 */
int pack_solve(struct pack_buf *bufs, size_t nr, uint64_t horizon,
	       const struct pack_opts *opts, struct pack_result *res);

/* LOAD: the most bytes live at any one time. */
uint64_t pack_lower_bound(const struct pack_buf *bufs, size_t nr,
			  uint64_t horizon);

/* True if lifetimes of @a and @b intersect (wrap-around aware). */
bool pack_lifetimes_overlap(const struct pack_buf *a, const struct pack_buf *b,
			    uint64_t horizon);

#endif /* STALLOC_PLANNER_PACK_H */
