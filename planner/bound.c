// SPDX-License-Identifier: MIT
/*
 * planner/bound.c - the true bounds of a trace's plan
 *
 * The packer's lower bound (LOAD) is the most bytes its model has live at
 * once: sizes rounded up to the alignment, lifetimes as the classification
 * made them (envelopes over the steady iterations, cross-iteration buffers
 * wrapping around, both slots of an alternating position and every
 * persistent buffer living throughout).  plan_bounds() measures what that
 * model costs against the trace itself, over the steady iterations that
 * have a successor (the last one's tail holds the frees at exit):
 *
 *   trace_peak   the most bytes live at once, every request counted at its
 *                requested size, as they occurred;
 *   live_peak    the same, counting only the requests the plan places;
 *   align_bytes  what rounding the planned requests' sizes up adds to
 *                live_peak at its worst moment;
 *   model_bytes  lower_bound - (live_peak + align_bytes): what the
 *                lifetimes of the model add (never negative: the model's
 *                lifetimes contain the real ones).
 *
 * A pure function of the trace, its iterations and the event classes; no
 * global state.
 */
#include <errno.h>
#include <stdlib.h>

#include "../lib/util.h"
#include "planner.h"

struct bound_sums {
	uint64_t all, planned, aligned;
	uint64_t best_all, best_planned, best_aligned;
};

static bool bound_planned(uint8_t cls, bool persistent)
{
	switch (cls) {
	case PLAN_PERSISTENT:
		return persistent;
	case PLAN_STATIC:
	case PLAN_CROSS:
	case PLAN_ALTERNATE:
		return true;
	default:
		return false;
	}
}

static void bound_event(const struct trace *t, const uint8_t *cls, size_t i,
			uint64_t align, bool persistent, struct bound_sums *s)
{
	const struct trace_event *e = &t->ev[i];
	size_t a = e->op == TRACE_ALLOC ? i : e->peer;
	uint64_t size = t->ev[a].size, asize = size;
	bool add = e->op == TRACE_ALLOC;

	if (!sa_round_up(size, align, &asize))
		asize = size;
	if (add)
		s->all += size;
	else
		s->all -= size;
	if (!bound_planned(cls[a], persistent))
		return;
	if (add) {
		s->planned += size;
		s->aligned += asize;
	} else {
		s->planned -= size;
		s->aligned -= asize;
	}
}

static void bound_max(struct bound_sums *s)
{
	if (s->all > s->best_all)
		s->best_all = s->all;
	if (s->planned > s->best_planned)
		s->best_planned = s->planned;
	if (s->aligned > s->best_aligned)
		s->best_aligned = s->aligned;
}

/*
 * The window: from the first steady iteration's start to the last
 * iteration's start (or the trace's end when only one steady iteration).
 * The sums are taken before and after each event inside it, so what is
 * live when the window opens counts even before anything moves.
 */
int plan_bounds(const struct trace *t, const struct plan_iters *it,
		const uint8_t *cls, uint64_t align, bool persistent,
		struct stalloc_plan_summary *sum)
{
	struct bound_sums s = { 0 };
	size_t first, last, i;
	uint64_t from, to;

	if (!it->nr)
		return 0;
	first = it->nr >= 3 ? 1 : it->nr - 1;
	last = it->nr - first >= 2 ? it->nr - 1 : it->nr;
	from = it->seq[first];
	to = last < it->nr ? it->seq[last] : UINT64_MAX;
	for (i = 0; i < t->nr && t->ev[i].seq < to; i++) {
		if (t->ev[i].op == TRACE_MARK)
			continue;
		if (t->ev[i].op == TRACE_FREE && t->ev[i].peer == TRACE_NONE)
			return sa_error(-EINVAL,
					"planner: %s: free without "
					"its allocation",
					t->name);
		if (t->ev[i].seq >= from)
			bound_max(&s);
		bound_event(t, cls, i, align, persistent, &s);
		if (t->ev[i].seq >= from)
			bound_max(&s);
	}
	sum->trace_peak = s.best_all;
	sum->live_peak = s.best_planned;
	sum->align_bytes = s.best_aligned - s.best_planned;
	sum->model_bytes = (int64_t)(sum->lower_bound - s.best_aligned);
	return 0;
}
