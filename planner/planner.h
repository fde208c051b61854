/* SPDX-License-Identifier: MIT */
/*
 * planner/planner.h - the planner's internal interface
 *
 * A trace goes through: iteration finding (period.c), classification of
 * every allocation of the planned iteration (classify.c), static packing
 * (pack.c), the dynamic reusable space (reuse.c); the result is a struct
 * stalloc_plan (plan.c), which plan-file.c writes and reads back.
 */
#ifndef STALLOC_PLANNER_PLANNER_H
#define STALLOC_PLANNER_PLANNER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <stalloc/planner.h>

#include "pack.h"
#include "trace.h"

/* ------------------------------------------------------------ iterations */

enum iter_source {
	ITER_MARKERS, /* "iteration" markers */
	ITER_DETECTED, /* period found in the request sequence */
	ITER_NONE, /* no repetition: one static problem */
};

/**
 * struct plan_iters - where the iterations of a trace are
 * @source: how they were found
 * @nr: number of iterations
 * @first: event index of each iteration's first event; iteration k is
 *	[first[k], first[k + 1]) and the last one ends at @end
 * @seq: each iteration's starting SEQ (its marker's, or its first event's)
 * @end: one past the last event of the last iteration
 * @period: detected period in alloc/free events (ITER_DETECTED)
 * @coverage: fraction of events that repeat one period later
 */
struct plan_iters {
	enum iter_source source;
	size_t nr;
	size_t *first;
	uint64_t *seq;
	size_t end;
	size_t period;
	double coverage;
};

int iters_find(const struct trace *t, struct plan_iters *it);
void iters_free(struct plan_iters *it);

/* ------------------------------------------------------------ the plan */

/* Entry classes, as written in plan files. */
enum plan_class {
	PLAN_PERSISTENT = 'p', /* allocated before the steady iterations */
	PLAN_CROSS = 'x', /* freed in the next iteration: wraps */
	PLAN_STATIC = 's', /* same size, same position, every iteration */
	PLAN_ALTERNATE = 'a', /* lives past its next instance: two slots,
				* used in even and odd iterations */
	PLAN_DYNAMIC = 'd', /* varies: served online */
};

/**
 * struct plan_entry - one planned buffer
 * @pos: persistent: index among the allocations before the first steady
 *	iteration; others: index among the allocations of an iteration
 * @cls: enum plan_class (never PLAN_DYNAMIC); PLAN_ALTERNATE entries come
 *	in pairs, the even iterations' slot first
 * @size: bytes, rounded up to the plan's alignment
 * @req: the request's own bytes when every recorded instance asked for
 *	exactly those (@size rounds them up), else 0: requests of a few
 *	bytes all round to one alignment unit, and only these tell a 4-byte
 *	position from an 8-byte one (plan format version 5 on)
 * @offset: offset in the static pool
 * @start: lifetime start, SEQ units from the iteration's start
 * @end: lifetime end; for PLAN_CROSS, end <= start and the buffer lives
 *	[start, horizon) and [0, end)
 */
struct plan_entry {
	uint32_t pos;
	char cls;
	uint64_t size;
	uint64_t req;
	uint64_t offset;
	uint64_t start;
	uint64_t end;
};

struct plan_range {
	uint64_t offset;
	uint64_t len;
};

/**
 * struct plan_dyn - a dynamic request position and where it may go
 * @pos: index among the allocations of an iteration
 * @size_min: smallest size seen at @pos
 * @size_max: largest size seen at @pos (both rounded to the alignment)
 * @req_min: smallest request seen at @pos, in its own bytes; 0 when not
 *	known (plan format versions before 5)
 * @req_max: largest request seen at @pos, in its own bytes, or 0
 * @start: lifetime window (envelope over the iterations seen)
 * @end: window end; @wraps as for PLAN_CROSS
 * @wraps: the window crosses the iteration boundary
 * @first_range: index into the plan's ranges
 * @nr_ranges: free ranges of the static pool throughout the window
 */
struct plan_dyn {
	uint32_t pos;
	uint64_t size_min;
	uint64_t size_max;
	uint64_t req_min;
	uint64_t req_max;
	uint64_t start;
	uint64_t end;
	bool wraps;
	bool lasting; /* outlives the iteration: not in the file */
	uint32_t first_range;
	uint32_t nr_ranges;
};

/* How an entry was named in the input, for --emit-csv. */
struct plan_name {
	char *id;
};

struct stalloc_plan {
	/* what a plan file holds */
	uint64_t fingerprint;
	uint64_t align;
	uint64_t pool;
	uint64_t horizon;
	uint32_t nr_positions;
	uint32_t nr_prologue;
	uint32_t warmup; /* iteration starts before the first planned one */
	uint32_t warmstart; /* prologue position where the warm-up's last
			     * iteration starts (nr_prologue: not known) */
	uint32_t stride; /* markers per planned iteration past the warm-up
			  * (1, or 2: two steps planned as one) */
	uint32_t stride_pos; /* stride 2: the position where the planned
			      * iteration's second step starts */
	int check; /* enum stalloc_plan_check_state (planner/check.c) */
	uint64_t check_planned; /* peak reserved replaying with the plan */
	uint64_t check_off; /* the same in off mode */
	uint64_t check_online; /* the least of off and the caching models */
	uint64_t check_fallback; /* the same under a rejected plan's fallback */
	struct plan_entry *ent;
	size_t nr_ent;
	struct plan_dyn *dyn;
	size_t nr_dyn;
	struct plan_range *ranges;
	size_t nr_ranges;
	/* what planning found (not in the file) */
	struct stalloc_plan_summary sum;
	char **names; /* per entry, NULL if not known */
	uint64_t *boundaries;
	size_t nr_boundaries;
};

#define PLAN_NOPOS UINT32_MAX

/**
 * struct plan_seen - the dynamic requests of each steady iteration
 * @nr_iters: steady iterations
 * @iter: their indices in struct plan_iters
 * @ev: per steady iteration, the alloc events that are dynamic
 * @dyn: for each of those, its index in the plan's dyn[], or PLAN_NOPOS
 *	for a request the reference iteration does not have
 * @nr: per steady iteration, the number of those
 */
struct plan_seen {
	size_t nr_iters;
	size_t *iter;
	uint32_t **ev;
	uint32_t **dyn;
	size_t *nr;
};

uint64_t plan_fingerprint(const struct stalloc_plan *p);
/* Entry @i is the even-iteration slot of an alternating pair. */
static inline bool plan_alt_first(const struct plan_entry *ent, size_t i)
{
	return ent[i].cls == PLAN_ALTERNATE &&
	       !(i && ent[i - 1].cls == PLAN_ALTERNATE &&
		 ent[i - 1].pos == ent[i].pos);
}

/* The packing view of an entry's lifetime. */
void plan_entry_buf(const struct plan_entry *e, struct pack_buf *b);
void plan_release(struct stalloc_plan *p);
void plan_seen_free(struct plan_seen *seen);

/*
 * What a classification fills: @p's entries (offsets not yet set) and
 * dynamic positions; @seen, the dynamic requests of each iteration;
 * @ev_class, if not NULL, one enum plan_class (or 0) per trace event.
 */
struct plan_cls_out {
	struct stalloc_plan *p;
	struct plan_seen *seen;
	uint8_t *ev_class;
};

/*
 * Classify the trace into @out, lifetimes in SEQ units from each
 * iteration's start (envelopes that also cover the shifts of variable
 * runs); and, if @warped is not NULL and @out has dynamic positions,
 * once more into it with lifetimes on the reference iteration's clock
 * (exact for the alignment, no slack; without variable runs the clocks
 * agree and @warped is left empty).  The alignment is made once.
 */
int plan_classify(const struct trace *t, const struct plan_iters *it,
		  uint64_t align, const struct plan_cls_out *out,
		  const struct plan_cls_out *warped);
/*
 * With the entries placed: the free ranges of each dynamic position, and
 * how many of the dynamic bytes fit there (p->sum).
 */
int plan_reuse(const struct trace *t, const struct plan_seen *seen,
	       struct stalloc_plan *p);
/*
 * With the lower bound known: the trace's peak of live bytes, that of the
 * planned requests, and what alignment and the model's lifetimes add
 * (bound.c; p->sum).  @cls: the event classes of plan_classify();
 * @persistent: the persistent requests are planned.
 */
int plan_bounds(const struct trace *t, const struct plan_iters *it,
		const uint8_t *cls, uint64_t align, bool persistent,
		struct stalloc_plan_summary *sum);
/* Check a plan's internal consistency; errors name @what. */
int plan_validate(const struct stalloc_plan *p, const char *what);

#endif /* STALLOC_PLANNER_PLANNER_H */
