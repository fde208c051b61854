// SPDX-License-Identifier: MIT
/*
 * planner/plan-check.c - is a plan internally consistent?
 *
 * Run on every plan read from a file before anyone uses it, and on every
 * plan before it is written.  The overlap check sweeps the lifetimes in
 * time order (a wrap-around lifetime as its two pieces), keeping the live
 * buffers sorted by offset; a buffer that starts must fit between its
 * neighbours.  O(n log n + n * live).  No locking.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../lib/util.h"
#include "planner.h"

#define chk_err(what, fmt, ...) \
	sa_error(-EINVAL, "plan: %s: " fmt, (what), ##__VA_ARGS__)

struct piece {
	uint64_t t; /* time of the event */
	uint32_t ent;
	bool start;
};

static int piece_cmp(const void *a, const void *b)
{
	const struct piece *x = a, *y = b;

	if (x->t != y->t)
		return x->t < y->t ? -1 : 1;
	if (x->start != y->start)
		return x->start ? 1 : -1; /* ends first: lifetimes half-open */
	return x->ent < y->ent ? -1 : x->ent > y->ent;
}

static int check_entry(const struct stalloc_plan *p, size_t i, const char *what)
{
	const struct plan_entry *e = &p->ent[i];
	uint64_t top;

	if (!e->size || e->size % p->align)
		return chk_err(what,
			       "entry %zu: size %llu is zero or not a "
			       "multiple of the alignment %llu",
			       i, (unsigned long long)e->size,
			       (unsigned long long)p->align);
	if (__builtin_add_overflow(e->offset, e->size, &top) || top > p->pool)
		return chk_err(what,
			       "entry %zu: [%llu, +%llu) is outside the "
			       "pool of %llu bytes",
			       i, (unsigned long long)e->offset,
			       (unsigned long long)e->size,
			       (unsigned long long)p->pool);
	if (e->req && (e->req > e->size || e->size - e->req >= p->align))
		return chk_err(what,
			       "entry %zu: request of %llu bytes does not "
			       "round up to its size %llu",
			       i, (unsigned long long)e->req,
			       (unsigned long long)e->size);
	switch (e->cls) {
	case PLAN_PERSISTENT:
		if (e->pos >= p->nr_prologue || e->start ||
		    e->end != p->horizon)
			return chk_err(what,
				       "persistent entry %zu: position "
				       "or lifetime out of range",
				       i);
		return 0;
	case PLAN_STATIC:
		if (e->pos >= p->nr_positions || e->start >= e->end ||
		    e->end > p->horizon)
			return chk_err(what,
				       "static entry %zu: position or "
				       "lifetime [%llu, %llu) out of "
				       "range",
				       i, (unsigned long long)e->start,
				       (unsigned long long)e->end);
		return 0;
	case PLAN_ALTERNATE:
		/* pairs: [even slot, odd slot], same position and size */
		if (e->pos >= p->nr_positions || e->start ||
		    e->end != p->horizon ||
		    (plan_alt_first(p->ent, i) &&
		     (i + 1 >= p->nr_ent || plan_alt_first(p->ent, i + 1) ||
		      p->ent[i + 1].cls != PLAN_ALTERNATE ||
		      p->ent[i + 1].size != e->size)) ||
		    (!plan_alt_first(p->ent, i) &&
		     !plan_alt_first(p->ent, i - 1)))
			return chk_err(what,
				       "alternating entry %zu: not "
				       "one of a pair spanning the "
				       "iteration",
				       i);
		return 0;
	case PLAN_CROSS:
		if (e->pos >= p->nr_positions || e->end > e->start ||
		    e->start >= p->horizon)
			return chk_err(what,
				       "cross-iteration entry %zu: "
				       "position or lifetime out of "
				       "range",
				       i);
		return 0;
	default:
		return chk_err(what, "entry %zu: unknown class", i);
	}
}

static int u64_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/*
 * No position is planned twice (an alternating pair counts once) or both
 * planned and dynamic, and every iteration position is one or the other.
 * Sorting keys (prologue or iteration, position) needs no table sized by
 * the counts the file claims.
 */
static int check_positions(const struct stalloc_plan *p, const char *what)
{
	uint64_t *key = malloc((p->nr_ent + p->nr_dyn + 1) * sizeof(*key));
	size_t i, n = 0, in_iter = 0;
	int err = 0;

	if (!key)
		return sa_error(-ENOMEM, "plan: out of memory");
	for (i = 0; i < p->nr_ent; i++) {
		const struct plan_entry *e = &p->ent[i];

		if (e->cls == PLAN_ALTERNATE && !plan_alt_first(p->ent, i))
			continue;
		in_iter += e->cls != PLAN_PERSISTENT;
		key[n++] = (uint64_t)(e->cls != PLAN_PERSISTENT) << 32 | e->pos;
	}
	for (i = 0; i < p->nr_dyn; i++) {
		if (p->dyn[i].pos >= p->nr_positions) {
			err = chk_err(what,
				      "dynamic position %u is out of "
				      "range",
				      p->dyn[i].pos);
			goto out;
		}
		key[n++] = 1ULL << 32 | p->dyn[i].pos;
	}
	qsort(key, n, sizeof(*key), u64_cmp);
	for (i = 1; i < n && !err; i++)
		if (key[i] == key[i - 1])
			err = chk_err(what, "position %u is planned twice",
				      (unsigned int)key[i]);
	if (!err && in_iter + p->nr_dyn != p->nr_positions)
		err = chk_err(what, "%u positions announced, %zu given",
			      p->nr_positions, in_iter + p->nr_dyn);
out:
	free(key);
	return err;
}

/* Insert @e into the live set sorted by offset; -EINVAL if it overlaps. */
static int live_insert(const struct stalloc_plan *p, uint32_t *live, size_t *n,
		       uint32_t e, const char *what)
{
	const struct plan_entry *x = &p->ent[e];
	size_t lo = 0, hi = *n;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (p->ent[live[mid]].offset < x->offset)
			lo = mid + 1;
		else
			hi = mid;
	}
	if ((lo > 0 && p->ent[live[lo - 1]].offset + p->ent[live[lo - 1]].size >
			       x->offset) ||
	    (lo < *n && x->offset + x->size > p->ent[live[lo]].offset))
		return chk_err(what,
			       "entries %u and %u overlap in time and "
			       "address",
			       e, lo > 0 ? live[lo - 1] : live[lo]);
	memmove(live + lo + 1, live + lo, (*n - lo) * sizeof(*live));
	live[lo] = e;
	(*n)++;
	return 0;
}

static void live_remove(uint32_t *live, size_t *n, uint32_t e)
{
	size_t i;

	for (i = 0; i < *n; i++)
		if (live[i] == e) {
			memmove(live + i, live + i + 1,
				(*n - i - 1) * sizeof(*live));
			(*n)--;
			return;
		}
}

static size_t add_pieces(const struct stalloc_plan *p, uint32_t i,
			 struct piece *pc)
{
	const struct plan_entry *e = &p->ent[i];
	size_t n = 0;

	if (e->cls != PLAN_CROSS) {
		pc[n++] = (struct piece){ e->start, i, true };
		pc[n++] = (struct piece){ e->end, i, false };
		return n;
	}
	/* wrap-around: [start, horizon) and [0, end) */
	pc[n++] = (struct piece){ e->start, i, true };
	pc[n++] = (struct piece){ p->horizon, i, false };
	if (e->end) {
		pc[n++] = (struct piece){ 0, i, true };
		pc[n++] = (struct piece){ e->end, i, false };
	}
	return n;
}

static int check_overlaps(const struct stalloc_plan *p, const char *what)
{
	struct piece *pc = malloc((4 * p->nr_ent + 1) * sizeof(*pc));
	uint32_t *live = malloc((p->nr_ent + 1) * sizeof(*live));
	size_t i, n = 0, nl = 0;
	int err = 0;

	if (!pc || !live) {
		err = sa_error(-ENOMEM, "plan: out of memory");
		goto out;
	}
	for (i = 0; i < p->nr_ent; i++)
		n += add_pieces(p, (uint32_t)i, pc + n);
	qsort(pc, n, sizeof(*pc), piece_cmp);
	for (i = 0; i < n && !err; i++) {
		if (pc[i].start)
			err = live_insert(p, live, &nl, pc[i].ent, what);
		else
			live_remove(live, &nl, pc[i].ent);
	}
out:
	free(pc);
	free(live);
	return err;
}

/*
 * A free range must really be free: no planned buffer live at any moment of
 * the window may use an address in it, or the runtime would place a dynamic
 * request on top of a live tensor.  O(dynamic positions x entries).
 */
static int check_free(const struct stalloc_plan *p, const struct plan_dyn *d,
		      const char *what)
{
	struct pack_buf w = {
		.size = 1, .start = d->start, .end = d->end, .wraps = d->wraps
	};
	size_t i;
	uint32_t r;

	for (i = 0; i < p->nr_ent; i++) {
		const struct plan_entry *e = &p->ent[i];
		struct pack_buf b;

		plan_entry_buf(e, &b);
		if (!pack_lifetimes_overlap(&w, &b, p->horizon))
			continue;
		for (r = 0; r < d->nr_ranges; r++) {
			const struct plan_range *rg =
				&p->ranges[d->first_range + r];

			if (e->offset < rg->offset + rg->len &&
			    rg->offset < e->offset + e->size)
				return chk_err(what,
					       "dynamic position %u: "
					       "free range %u holds entry "
					       "%zu during the window",
					       d->pos, r, i);
		}
	}
	return 0;
}

static int check_dyn(const struct stalloc_plan *p, const char *what)
{
	size_t i;
	uint32_t r;

	for (i = 0; i < p->nr_dyn; i++) {
		const struct plan_dyn *d = &p->dyn[i];
		uint64_t prev_end = 0;

		if (!d->size_min || d->size_min > d->size_max ||
		    d->start >= p->horizon || d->end > p->horizon ||
		    (!d->wraps && d->end <= d->start) ||
		    (d->wraps && d->end > d->start))
			return chk_err(what,
				       "dynamic position %u: sizes or "
				       "window out of range",
				       d->pos);
		if ((d->req_min || d->req_max) &&
		    (!d->req_min || d->req_min > d->req_max ||
		     d->req_min > d->size_min ||
		     d->size_min - d->req_min >= p->align ||
		     d->req_max > d->size_max ||
		     d->size_max - d->req_max >= p->align))
			return chk_err(what,
				       "dynamic position %u: request bytes "
				       "%llu to %llu do not round up to its "
				       "sizes %llu to %llu",
				       d->pos, (unsigned long long)d->req_min,
				       (unsigned long long)d->req_max,
				       (unsigned long long)d->size_min,
				       (unsigned long long)d->size_max);
		if ((uint64_t)d->first_range + d->nr_ranges > p->nr_ranges)
			return chk_err(what,
				       "dynamic position %u: ranges "
				       "out of bounds",
				       d->pos);
		for (r = 0; r < d->nr_ranges; r++) {
			const struct plan_range *rg =
				&p->ranges[d->first_range + r];
			uint64_t end;

			if (!rg->len || rg->offset < prev_end ||
			    __builtin_add_overflow(rg->offset, rg->len, &end) ||
			    end > p->pool)
				return chk_err(what,
					       "dynamic position %u: "
					       "free range %u is empty, "
					       "unsorted or outside the "
					       "pool",
					       d->pos, r);
			prev_end = end;
		}
		if (check_free(p, d, what))
			return -EINVAL;
	}
	return 0;
}

int plan_validate(const struct stalloc_plan *p, const char *what)
{
	size_t i;
	int err;

	if (!sa_is_pow2(p->align))
		return chk_err(what, "alignment %llu is not a power of two",
			       (unsigned long long)p->align);
	if (p->nr_ent && !p->horizon)
		return chk_err(what, "empty horizon");
	for (i = 0; i < p->nr_ent; i++) {
		err = check_entry(p, i, what);
		if (err)
			return err;
	}
	err = check_positions(p, what);
	if (!err)
		err = check_overlaps(p, what);
	if (!err)
		err = check_dyn(p, what);
	if (!err && plan_fingerprint(p) != p->fingerprint)
		err = chk_err(what,
			      "fingerprint 0x%016llx does not match the "
			      "entries (0x%016llx)",
			      (unsigned long long)p->fingerprint,
			      (unsigned long long)plan_fingerprint(p));
	return err;
}
