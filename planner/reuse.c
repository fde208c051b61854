// SPDX-License-Identifier: MIT
/*
 * planner/reuse.c - the dynamic reusable space of a plan
 *
 * For each dynamic request position, the window is the envelope of its
 * lifetimes over the steady iterations.  The static plan's buffers whose
 * lifetimes meet the window hold some addresses of the pool during it; the
 * rest of [0, pool) is free throughout the window, and the runtime places
 * a dynamic request of that position there first.  The ranges at least as
 * large as the position's smallest size are kept, largest first, at most
 * REUSE_MAX_RANGES of them.  A position whose requests outlive the
 * iteration (d->lasting) is given the whole iteration as its window: such
 * a request stays where it was put, over the next iterations too.
 *
 * The report replays each steady iteration's dynamic requests in order,
 * each first-fit into its position's ranges away from the dynamic requests
 * placed and still live, and takes, at the iteration with the most dynamic
 * bytes live at once, how many of those bytes were placed in the ranges.
 * No locking: pure functions of the plan and the trace.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../lib/util.h"
#include "planner.h"

#define REUSE_MAX_RANGES 32

static int range_by_offset(const void *a, const void *b)
{
	const struct plan_range *x = a, *y = b;

	return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static int range_by_len_desc(const void *a, const void *b)
{
	const struct plan_range *x = a, *y = b;

	if (x->len != y->len)
		return x->len > y->len ? -1 : 1;
	return range_by_offset(a, b);
}

/* Free ranges of the pool throughout dynamic position @d's window. */
static int dyn_ranges(struct stalloc_plan *p, struct plan_dyn *d,
		      struct plan_range *busy, struct plan_range *out)
{
	struct pack_buf w = {
		.size = 1, .start = d->start, .end = d->end, .wraps = d->wraps
	};
	size_t i, nb = 0, nr = 0;
	uint64_t at = 0;
	struct plan_range *nrng;

	if (d->lasting) {
		w.start = 0;
		w.end = p->horizon;
		w.wraps = false;
	}
	for (i = 0; i < p->nr_ent; i++) {
		struct pack_buf b;

		plan_entry_buf(&p->ent[i], &b);
		if (pack_lifetimes_overlap(&w, &b, p->horizon))
			busy[nb++] = (struct plan_range){ p->ent[i].offset,
							  p->ent[i].size };
	}
	qsort(busy, nb, sizeof(*busy), range_by_offset);
	for (i = 0; i <= nb; i++) {
		uint64_t next = i < nb ? busy[i].offset : p->pool;

		if (next > at && next - at >= d->size_min)
			out[nr++] = (struct plan_range){ at, next - at };
		if (i < nb && busy[i].offset + busy[i].len > at)
			at = busy[i].offset + busy[i].len;
	}
	qsort(out, nr, sizeof(*out), range_by_len_desc);
	if (nr > REUSE_MAX_RANGES)
		nr = REUSE_MAX_RANGES;
	qsort(out, nr, sizeof(*out), range_by_offset);
	nrng = realloc(p->ranges, (p->nr_ranges + nr + 1) * sizeof(*nrng));
	if (!nrng)
		return -ENOMEM;
	p->ranges = nrng;
	d->first_range = (uint32_t)p->nr_ranges;
	d->nr_ranges = (uint32_t)nr;
	memcpy(p->ranges + p->nr_ranges, out, nr * sizeof(*out));
	p->nr_ranges += nr;
	return 0;
}

struct placed {
	uint32_t free_ev;
	uint64_t offset, size;
	bool in_range;
};

static bool clashes(const struct placed *live, size_t n, uint64_t off,
		    uint64_t size)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (live[i].in_range && off < live[i].offset + live[i].size &&
		    live[i].offset < off + size)
			return true;
	return false;
}

/* First fit of @size in @d's ranges away from @live; false if none. */
static bool place(const struct stalloc_plan *p, const struct plan_dyn *d,
		  const struct placed *live, size_t n, uint64_t size,
		  uint64_t *off)
{
	uint32_t r;
	size_t i;

	for (r = 0; r < d->nr_ranges; r++) {
		const struct plan_range *rg = &p->ranges[d->first_range + r];
		uint64_t at = rg->offset;

		for (i = 0; i <= n && at + size <= rg->offset + rg->len; i++) {
			if (!clashes(live, n, at, size)) {
				*off = at;
				return true;
			}
			/* move past whichever live block is in the way */
			for (size_t j = 0; j < n; j++)
				if (live[j].in_range &&
				    at < live[j].offset + live[j].size &&
				    live[j].offset < at + size)
					at = live[j].offset + live[j].size;
		}
	}
	return false;
}

/* Replay one steady iteration's dynamic requests; peak and placed bytes. */
static int replay(const struct trace *t, const struct plan_seen *seen, size_t s,
		  const struct stalloc_plan *p, uint64_t *peak,
		  uint64_t *placed_at_peak)
{
	struct placed *live = malloc((seen->nr[s] + 1) * sizeof(*live));
	uint64_t bytes = 0, in_ranges = 0;
	size_t i, j, n = 0;

	if (!live)
		return -ENOMEM;
	*peak = *placed_at_peak = 0;
	for (i = 0; i < seen->nr[s]; i++) {
		const struct trace_event *a = &t->ev[seen->ev[s][i]];
		uint32_t di = seen->dyn[s][i];
		struct placed pl = { .free_ev = a->peer };

		if (!sa_round_up(a->size, p->align, &pl.size))
			pl.size = a->size;

		/* retire what was freed before this allocation */
		for (j = 0; j < n;) {
			if (live[j].free_ev != TRACE_NONE &&
			    live[j].free_ev < seen->ev[s][i]) {
				bytes -= live[j].size;
				in_ranges -= live[j].in_range ? live[j].size :
								0;
				live[j] = live[--n];
			} else {
				j++;
			}
		}
		if (di != PLAN_NOPOS)
			pl.in_range = place(p, &p->dyn[di], live, n, pl.size,
					    &pl.offset);
		live[n++] = pl;
		bytes += pl.size;
		in_ranges += pl.in_range ? pl.size : 0;
		if (bytes > *peak) {
			*peak = bytes;
			*placed_at_peak = in_ranges;
		}
	}
	free(live);
	return 0;
}

int plan_reuse(const struct trace *t, const struct plan_seen *seen,
	       struct stalloc_plan *p)
{
	struct plan_range *busy, *out;
	size_t i;
	int err = 0;

	busy = malloc((p->nr_ent + 1) * sizeof(*busy));
	out = malloc((p->nr_ent + 2) * sizeof(*out));
	if (!busy || !out)
		err = -ENOMEM;
	for (i = 0; !err && i < p->nr_dyn; i++)
		err = dyn_ranges(p, &p->dyn[i], busy, out);
	free(busy);
	free(out);
	for (i = 0; !err && i < seen->nr_iters; i++) {
		uint64_t peak, placed;

		err = replay(t, seen, i, p, &peak, &placed);
		if (!err && peak > p->sum.dynamic_bytes) {
			p->sum.dynamic_bytes = peak;
			p->sum.reusable_bytes = placed;
		}
	}
	if (err)
		return sa_error(-ENOMEM, "planner: out of memory");
	return 0;
}
