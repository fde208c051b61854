// SPDX-License-Identifier: MIT
/*
 * planner/classify.c - classify the requests of a trace from data alone
 *
 * The steady iterations are all but the first (which usually creates
 * optimizer state) when there are three or more; the reference iteration
 * is, of the steady ones that have a successor (so that frees in the next
 * iteration are seen), the one whose request sizes most steady iterations
 * repeat exactly: not an odd one out such as DDP's first step, which
 * rebuilds its buckets.  Each steady iteration's allocations are aligned
 * to the reference's by position when they have as many (resized requests
 * stay paired by structure) unless a banded longest common subsequence of
 * their sizes shows them shifted, or pairs more where the steady
 * iterations' counts differ (the same count by chance); with another
 * count, by that subsequence (inserted, missing or resized requests; a
 * bounded look-ahead diff when the band is too large).  Then each
 * reference position is:
 *
 *   static      same size in every steady iteration, freed in the same
 *               iteration every time;
 *   cross       same size, freed in the next iteration every time (e.g.
 *               gradients freed by zero_grad): a wrap-around lifetime;
 *   alternate   the same, but freed only after the next iteration has
 *               allocated its own instance: two slots, used in even and
 *               odd iterations;
 *   dynamic     anything else: missing somewhere, size varies, freed at
 *               varying places or never;
 *
 * and an allocation made before the steady iterations that is still live
 * after the last one is persistent (weights, optimizer state).
 *
 * Lifetimes are envelopes over the steady iterations, so that the plan
 * holds for every iteration seen: in SEQ units from each iteration's
 * start, or (@warp) on the reference iteration's clock, where an event
 * falls between the matched allocations around it (warp_iters()) and the
 * shifts of variable runs cost nothing; plan.c picks one.
 * No locking: pure functions of the trace.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../lib/util.h"
#include "planner.h"

#define ALIGN_LOOKAHEAD 32
/*
 * The longest run of positions seen at one size amid varying ones that is
 * taken to vary too: the runtime matcher's look-ahead (mapper/match.h).
 */
#define ISLAND_MAX 8
/* The most cells of the banded alignment table (4 bytes each). */
#define ALIGN_LCS_CELLS (16u << 20)
#define NOPOS UINT32_MAX

enum free_where { FREE_WITHIN, FREE_NEXT, FREE_LATER };

struct cls_ctx {
	const struct trace *t;
	const struct plan_iters *it;
	uint64_t align;
	size_t first_steady, nr_steady, ref;
	uint64_t horizon;
	uint32_t **allocs; /* per iteration: alloc event indices */
	size_t *nr_allocs;
	uint32_t **map; /* per steady iteration: ref position -> its pos */
	uint32_t *last_match; /* per steady iteration: last mapped ref pos */
	uint64_t **warp; /* per steady iteration: event -> reference time */
	bool use_warp; /* lifetimes on the reference's clock (warp_iters()) */
	uint32_t *posdyn; /* ref position -> index in dyn[], or NOPOS */
	bool *island; /* ref position: a few steady ones amid varying ones */
};

static size_t iter_end(const struct plan_iters *it, size_t k)
{
	return k + 1 < it->nr ? it->first[k + 1] : it->end;
}

static uint64_t iter_len(const struct cls_ctx *c, size_t k)
{
	const struct plan_iters *it = c->it;

	if (k + 1 < it->nr)
		return it->seq[k + 1] - it->seq[k];
	return c->t->ev[iter_end(it, k) - 1].seq + 1 - it->seq[k];
}

/* In which iteration (relative to @k) the event with index @e lies. */
static enum free_where where(const struct cls_ctx *c, size_t k, uint32_t e)
{
	if (e == TRACE_NONE)
		return FREE_LATER;
	if (e < iter_end(c->it, k))
		return FREE_WITHIN;
	if (k + 1 < c->it->nr && e < iter_end(c->it, k + 1))
		return FREE_NEXT;
	return FREE_LATER;
}

static uint64_t asize(const struct cls_ctx *c, uint64_t size)
{
	uint64_t r;

	if (!sa_round_up(size, c->align, &r))
		return UINT64_MAX;
	return r;
}

static int collect_allocs(struct cls_ctx *c)
{
	const struct plan_iters *it = c->it;
	size_t k, i;

	c->allocs = calloc(it->nr, sizeof(*c->allocs));
	c->nr_allocs = calloc(it->nr, sizeof(*c->nr_allocs));
	if (!c->allocs || !c->nr_allocs)
		return -ENOMEM;
	for (k = 0; k < it->nr; k++) {
		size_t end = iter_end(it, k), n = 0;

		c->allocs[k] =
			calloc(end - it->first[k] + 1, sizeof(**c->allocs));
		if (!c->allocs[k])
			return -ENOMEM;
		for (i = it->first[k]; i < end; i++)
			if (c->t->ev[i].op == TRACE_ALLOC)
				c->allocs[k][n++] = (uint32_t)i;
		c->nr_allocs[k] = n;
	}
	return 0;
}

/*
 * Align iteration @k's allocations to the reference's: equal sizes match;
 * on a mismatch, look ahead a little in both for the nearest resync point.
 * A size mismatch with no resync nearby is taken as a resized request
 * (matched, classified dynamic later).
 */
static void align_iter(struct cls_ctx *c, size_t k, uint32_t *map)
{
	const uint32_t *ra = c->allocs[c->ref], *ka = c->allocs[k];
	size_t rn = c->nr_allocs[c->ref], kn = c->nr_allocs[k];
	size_t i = 0, j = 0, d;

#define SZ(a, x) (c->t->ev[(a)[x]].size)
	for (i = 0; i < rn; i++)
		map[i] = NOPOS;
	if (rn == kn) {
		for (i = 0; i < rn; i++)
			map[i] = (uint32_t)i;
		return;
	}
	for (i = 0; i < rn && j < kn;) {
		if (SZ(ra, i) == SZ(ka, j)) {
			map[i++] = (uint32_t)j++;
			continue;
		}
		for (d = 1; d <= ALIGN_LOOKAHEAD; d++) {
			if (j + d < kn && SZ(ra, i) == SZ(ka, j + d)) {
				j += d; /* requests inserted in iteration k */
				break;
			}
			if (i + d < rn && SZ(ra, i + d) == SZ(ka, j)) {
				i += d; /* requests missing from iteration k */
				break;
			}
		}
		if (d > ALIGN_LOOKAHEAD)
			map[i++] = (uint32_t)j++;
	}
#undef SZ
}

/* The banded table of align_iter_lcs(): diagonals j - i in [lo, hi]. */
struct lcs {
	uint32_t *cell;
	size_t rn, kn, w;
	long lo, hi;
};

static bool lcs_in(const struct lcs *l, size_t i, size_t j)
{
	long o = (long)j - (long)i;

	return o >= l->lo && o <= l->hi && j <= l->kn;
}

/* LCS of the reference's requests from @i and iteration k's from @j. */
static uint32_t *lcs_at(const struct lcs *l, size_t i, size_t j)
{
	return &l->cell[i * l->w + (size_t)((long)j - (long)i - l->lo)];
}

static uint64_t req_size(const struct cls_ctx *c, const uint32_t *allocs,
			 size_t x)
{
	return c->t->ev[allocs[x]].size;
}

static void lcs_fill(const struct cls_ctx *c, const uint32_t *ra,
		     const uint32_t *ka, struct lcs *l)
{
	size_t i, j;
	long o;

	for (i = l->rn + 1; i-- > 0;) {
		for (o = l->hi; o >= l->lo; o--) {
			long jj = (long)i + o;
			uint32_t best = 0;

			if (jj < 0 || jj > (long)l->kn)
				continue;
			j = (size_t)jj;
			if (i < l->rn && j < l->kn) {
				if (lcs_in(l, i + 1, j))
					best = *lcs_at(l, i + 1, j);
				if (lcs_in(l, i, j + 1) &&
				    *lcs_at(l, i, j + 1) > best)
					best = *lcs_at(l, i, j + 1);
				if (req_size(c, ra, i) == req_size(c, ka, j) &&
				    lcs_in(l, i + 1, j + 1) &&
				    *lcs_at(l, i + 1, j + 1) + 1 > best)
					best = *lcs_at(l, i + 1, j + 1) + 1;
			}
			*lcs_at(l, i, j) = best;
		}
	}
}

/*
 * The same by a longest common subsequence of the sizes, in a band of
 * ALIGN_LOOKAHEAD around the diagonals the count difference allows: the
 * most requests of equal size matched in order, so that a run of requests
 * whose sizes vary (an expert loop with one expert fewer) cannot pull the
 * static ones around it out of line, as a greedy resync on a coincidental
 * size can.  Between two matches, the requests left are paired in order
 * (resized requests), the surplus unmatched.  False when the band is too
 * big to hold (then the greedy alignment is used).
 */
static bool align_iter_lcs(struct cls_ctx *c, size_t k, uint32_t *map)
{
	const uint32_t *ra = c->allocs[c->ref], *ka = c->allocs[k];
	struct lcs l = { .rn = c->nr_allocs[c->ref], .kn = c->nr_allocs[k] };
	size_t i = 0, j = 0, pi = 0, pj = 0;

	l.lo = -(long)ALIGN_LOOKAHEAD +
	       (l.kn < l.rn ? (long)l.kn - (long)l.rn : 0);
	l.hi = ALIGN_LOOKAHEAD + (l.kn > l.rn ? (long)l.kn - (long)l.rn : 0);
	l.w = (size_t)(l.hi - l.lo + 1);
	if (l.rn + 1 > ALIGN_LCS_CELLS / l.w)
		return false;
	l.cell = calloc((l.rn + 1) * l.w, sizeof(*l.cell));
	if (!l.cell)
		return false;
	lcs_fill(c, ra, ka, &l);
	for (i = 0; i < l.rn; i++)
		map[i] = NOPOS;
	/* walk the matches; pair what lies between two of them in order */
	i = 0;
	while (i < l.rn && j < l.kn && lcs_in(&l, i, j)) {
		if (req_size(c, ra, i) == req_size(c, ka, j) &&
		    lcs_in(&l, i + 1, j + 1) &&
		    *lcs_at(&l, i, j) == *lcs_at(&l, i + 1, j + 1) + 1) {
			for (; pi < i && pj < j; pi++, pj++)
				map[pi] = (uint32_t)pj;
			map[i++] = (uint32_t)j++;
			pi = i;
			pj = j;
		} else if (lcs_in(&l, i + 1, j) &&
			   (!lcs_in(&l, i, j + 1) ||
			    *lcs_at(&l, i + 1, j) >= *lcs_at(&l, i, j + 1))) {
			i++;
		} else {
			j++;
		}
	}
	for (; pi < l.rn && pj < l.kn; pi++, pj++)
		map[pi] = (uint32_t)pj;
	free(l.cell);
	return true;
}

/* Reference positions that @map pairs with a request of the same size. */
static size_t same_sized(const struct cls_ctx *c, size_t k, const uint32_t *map)
{
	size_t i, n = c->nr_allocs[c->ref], same = 0;

	for (i = 0; i < n; i++)
		same += map[i] != NOPOS &&
			req_size(c, c->allocs[c->ref], i) ==
				req_size(c, c->allocs[k], map[i]);
	return same;
}

/* A steady iteration has another count of requests than the reference. */
static bool counts_vary(const struct cls_ctx *c)
{
	size_t s;

	for (s = 0; s < c->nr_steady; s++)
		if (c->nr_allocs[c->first_steady + s] != c->nr_allocs[c->ref])
			return true;
	return false;
}

/*
 * Iteration @k has as many requests as the reference; the diff of their
 * sizes paired them as @map says, @by_pos pair by position.  Were they
 * shifted -- requests inserted at one end and missing at the other, the
 * count the same by chance?  Then the diff pairs nearly all of them (3 in
 * 4 at least) and more than twice as many as the positions do.  Resized
 * requests (MoE routing) leave many unpaired by either: on a MoE rank
 * with routing imbalance 4, the diff paired 46%, positions 13%, and the
 * positions are right (each is the same expert's buffer).
 *
 * But where the steady iterations' counts differ, requests come and go
 * (idle experts allocate nothing) and an equal count is chance: the diff
 * decides when it pairs more than twice as many, however few.  On a
 * held-out MoE rank with small tensors (counts 2,431, 2,423, 2,423,
 * 2,431) the last iteration, paired by position, matched 223 requests
 * where the diff matched 1,098; every position after the first expert run
 * went dynamic, 81 of 2,431 stayed static, and run with other routing the
 * plan missed 304 of 429.  Where the positions are right, the diff pairs
 * only a few more, by chance among the resized ones (1,584 against 1,408
 * on another held-out rank: taken, they made 50 routed positions static
 * and the plan unmapped and mapped 16,090 times a step).
 */
static bool shifted(const struct cls_ctx *c, size_t k, const uint32_t *map,
		    size_t by_pos)
{
	size_t n = c->nr_allocs[c->ref], by_diff = same_sized(c, k, map);

	if (by_diff <= 2 * by_pos)
		return false;
	return counts_vary(c) || by_diff * 4 >= n * 3;
}

/*
 * Align iteration @k to the reference into @map: with as many requests,
 * position by position (sizes that differ are the same requests resized,
 * matched by structure) unless they were shifted; otherwise by the diff.
 */
static void align_one(struct cls_ctx *c, size_t k, uint32_t *map)
{
	size_t n = c->nr_allocs[c->ref], i, by_pos;

	if (c->nr_allocs[k] == n) {
		for (i = 0; i < n; i++)
			map[i] = (uint32_t)i;
		by_pos = same_sized(c, k, map);
		if (by_pos < n &&
		    (!align_iter_lcs(c, k, map) || !shifted(c, k, map, by_pos)))
			for (i = 0; i < n; i++)
				map[i] = (uint32_t)i;
		return;
	}
	if (!align_iter_lcs(c, k, map))
		align_iter(c, k, map);
}

static int align_all(struct cls_ctx *c)
{
	size_t s, rn = c->nr_allocs[c->ref];

	c->map = calloc(c->nr_steady + 1, sizeof(*c->map));
	c->last_match = calloc(c->nr_steady + 1, sizeof(*c->last_match));
	if (!c->map || !c->last_match)
		return -ENOMEM;
	for (s = 0; s < c->nr_steady; s++) {
		uint32_t pos;

		c->map[s] = calloc(rn + 1, sizeof(**c->map));
		if (!c->map[s])
			return -ENOMEM;
		align_one(c, c->first_steady + s, c->map[s]);
		for (pos = 0; pos < rn; pos++)
			if (c->map[s][pos] != NOPOS)
				c->last_match[s] = pos;
	}
	return 0;
}

static int push_entry(struct stalloc_plan *p, const struct plan_entry *e,
		      uint64_t id)
{
	struct plan_entry *ne;
	char **nn, buf[24];

	ne = realloc(p->ent, (p->nr_ent + 1) * sizeof(*ne));
	if (!ne)
		return -ENOMEM;
	p->ent = ne;
	nn = realloc(p->names, (p->nr_ent + 1) * sizeof(*nn));
	if (!nn)
		return -ENOMEM;
	p->names = nn;
	snprintf(buf, sizeof(buf), "%" PRIu64, id);
	p->names[p->nr_ent] = strdup(buf);
	if (!p->names[p->nr_ent])
		return -ENOMEM;
	p->ent[p->nr_ent++] = *e;
	return 0;
}

static int push_dyn(struct stalloc_plan *p, const struct plan_dyn *d)
{
	struct plan_dyn *nd = realloc(p->dyn, (p->nr_dyn + 1) * sizeof(*nd));

	if (!nd)
		return -ENOMEM;
	p->dyn = nd;
	p->dyn[p->nr_dyn++] = *d;
	return 0;
}

/*
 * Steady iteration @s's events on the reference iteration's clock, into
 * @w (@nx: scratch, one per event): an allocation matched to a reference
 * position at that position's time; any other event as long after the
 * last matched allocation as it was in its own iteration, but before the
 * next one (the reference's end after the last), so the reference itself
 * reads as before.  The alignment keeps the order of matched allocations,
 * so an event comes before or after each of them on this clock as it did
 * in its own iteration: lifetimes measured so overlap exactly where they
 * did.  Measured in SEQ units from each iteration's start instead, every
 * position after a run of routed requests moved with the run's length
 * from iteration to iteration, and the envelope of its lifetimes over
 * them grew by the spread (MoE with selective recompute: 611 MiB of the
 * pool's 3.9 GB).
 */
static void warp_one(const struct cls_ctx *c, size_t s, uint64_t *w,
		     uint64_t *nx)
{
	size_t k = c->first_steady + s, first = c->it->first[k];
	size_t n = iter_end(c->it, k) - first, i;
	uint64_t next = iter_len(c, c->ref), prev = 0, prev_seq = c->it->seq[k];
	uint64_t rseq = c->it->seq[c->ref];
	uint32_t pos, j;

	for (i = 0; i < n; i++)
		w[i] = UINT64_MAX;
	for (pos = 0; pos < c->nr_allocs[c->ref]; pos++) {
		j = c->map[s][pos];
		if (j != NOPOS)
			w[c->allocs[k][j] - first] =
				c->t->ev[c->allocs[c->ref][pos]].seq - rseq;
	}
	for (i = n; i-- > 0;) { /* the next matched allocation's time */
		nx[i] = next;
		if (w[i] < next)
			next = w[i];
	}
	for (i = 0; i < n; i++) {
		uint64_t sq = c->t->ev[first + i].seq;

		if (w[i] != UINT64_MAX) {
			if (w[i] >= prev) {
				prev = w[i];
				prev_seq = sq;
			}
			continue;
		}
		/* as long after the last matched allocation as it was, but
		 * before the next one */
		w[i] = prev + (sq - prev_seq);
		if (nx[i] && w[i] >= nx[i])
			w[i] = nx[i] - 1;
		if (w[i] < prev)
			w[i] = prev;
	}
}

static int warp_iters(struct cls_ctx *c)
{
	size_t s, n, most = 0;
	uint64_t *nx;

	c->warp = calloc(c->nr_steady + 1, sizeof(*c->warp));
	if (!c->warp)
		return -ENOMEM;
	for (s = 0; s < c->nr_steady; s++) {
		size_t k = c->first_steady + s;

		n = iter_end(c->it, k) - c->it->first[k];
		most = n > most ? n : most;
		c->warp[s] = malloc((n + 1) * sizeof(**c->warp));
		if (!c->warp[s])
			return -ENOMEM;
	}
	nx = malloc((most + 1) * sizeof(*nx));
	if (!nx)
		return -ENOMEM;
	for (s = 0; s < c->nr_steady; s++)
		warp_one(c, s, c->warp[s], nx);
	free(nx);
	return 0;
}

/* The time of event @e of steady iteration @s on the reference's clock. */
static uint64_t warped(const struct cls_ctx *c, size_t s, uint32_t e)
{
	size_t k = c->first_steady + s;

	if (!c->use_warp)
		return c->t->ev[e].seq - c->it->seq[k];
	return c->warp[s][e - c->it->first[k]];
}

/* What one reference position looks like across the steady iterations. */
struct pos_view {
	bool present, same_size;
	unsigned int within, next, later, judged;
	uint64_t size_min, size_max;
	uint64_t req; /* the one size asked for, or 0 if several */
	uint64_t req_min, req_max; /* the sizes asked for, unrounded */
	uint64_t start, end_within, end_next;
};

static void view_pos(const struct cls_ctx *c, uint32_t pos, struct pos_view *v)
{
	const struct trace *t = c->t;
	size_t s;

	memset(v, 0, sizeof(*v));
	v->present = v->same_size = true;
	v->size_min = v->start = UINT64_MAX;
	for (s = 0; s < c->nr_steady; s++) {
		size_t k = c->first_steady + s;
		uint32_t j = c->map[s][pos];
		const struct trace_event *a;
		enum free_where w;
		uint64_t sz, st;

		if (j == NOPOS) {
			/*
			 * The trace may stop before the end of its last
			 * iteration: what is missing after the last match
			 * there was never seen, not absent.
			 */
			if (k + 1 < c->it->nr || pos < c->last_match[s])
				v->present = false;
			continue;
		}
		a = &t->ev[c->allocs[k][j]];
		sz = asize(c, a->size);
		if (v->size_max && sz != v->size_max)
			v->same_size = false;
		if (!v->size_max)
			v->req = v->req_min = v->req_max = a->size;
		else if (a->size != v->req)
			v->req = 0;
		v->size_min = sz < v->size_min ? sz : v->size_min;
		v->size_max = sz > v->size_max ? sz : v->size_max;
		v->req_min = a->size < v->req_min ? a->size : v->req_min;
		v->req_max = a->size > v->req_max ? a->size : v->req_max;
		st = warped(c, s, c->allocs[k][j]);
		v->start = st < v->start ? st : v->start;
		w = where(c, k, a->peer);
		if (w == FREE_WITHIN) {
			uint64_t e = warped(c, s, a->peer);

			e = e > st ? e : st;
			v->within++;
			v->end_within = e > v->end_within ? e : v->end_within;
		} else if (w == FREE_NEXT) {
			uint64_t e =
				s + 1 < c->nr_steady ?
					warped(c, s + 1, a->peer) :
					t->ev[a->peer].seq - c->it->seq[k + 1];

			v->next++;
			v->end_next = e > v->end_next ? e : v->end_next;
		} else if (k + 2 < c->it->nr ||
			   (a->peer != TRACE_NONE && a->peer < c->it->end)) {
			v->later++;
		} else {
			/*
			 * Not freed before the trace's iterations end, and
			 * the next iteration is the last one seen: freed
			 * after it or in the trace's tear-down, we cannot
			 * tell which.
			 */
			continue;
		}
		v->judged++;
	}
}

static int classify_pos(struct cls_ctx *c, uint32_t pos, struct stalloc_plan *p)
{
	c->posdyn[pos] = NOPOS;
	const struct trace_event *ref = &c->t->ev[c->allocs[c->ref][pos]];
	struct plan_entry e = { .pos = pos, .start = 0 };
	struct plan_dyn d = { .pos = pos };
	struct pos_view v;

	view_pos(c, pos, &v);
	e.size = v.size_max;
	e.req = v.req;
	e.start = v.start;
	if (c->it->source == ITER_NONE) {
		/*
		 * No repetition (one recorded step, or no period): nothing
		 * says the next step repeats this one, so nothing is
		 * planned -- a plan of this pass would be an oracle of it.
		 * Every request is dynamic; a runtime given this plan runs
		 * as without one.
		 */
		d.size_min = d.size_max = v.size_max;
		d.req_min = d.req_max = v.req_max;
		d.start = v.start;
		d.end = c->horizon;
		c->posdyn[pos] = (uint32_t)p->nr_dyn;
		return push_dyn(p, &d);
	}
	if (c->island[pos])
		v.same_size = false; /* varies like its neighbours */
	if (v.present && v.same_size && v.within == v.judged && v.within > 0 &&
	    !v.next && !v.later) {
		e.cls = PLAN_STATIC;
		e.end = v.end_within;
		return push_entry(p, &e, ref->id);
	}
	if (v.present && v.same_size && v.next && !v.within && !v.later &&
	    v.end_next <= v.start) {
		e.cls = PLAN_CROSS;
		e.end = v.end_next;
		return push_entry(p, &e, ref->id);
	}
	if (v.present && v.same_size && v.next && !v.within && !v.later) {
		/*
		 * Freed in the next iteration after that iteration's own
		 * instance was allocated: two instances coexist, so it gets
		 * two slots, used in alternate iterations, each reserved
		 * for the whole iteration.
		 */
		int err;

		e.cls = PLAN_ALTERNATE;
		e.start = 0;
		e.end = c->horizon;
		err = push_entry(p, &e, ref->id);
		return err ? err : push_entry(p, &e, ref->id);
	}
	d.size_min = v.size_min;
	d.size_max = v.size_max;
	d.req_min = v.req_min;
	d.req_max = v.req_max;
	d.start = v.start;
	/*
	 * Outliving the iteration (state created late: an expert's first
	 * tokens), or not seen freed at all: its free ranges must stay
	 * clear for the whole iteration (reuse.c), or it sits on the slots
	 * of the next iteration's first half in every later one.
	 */
	d.lasting = v.later || (v.next && v.end_next > v.start) ||
		    (!v.within && !v.next);
	if (v.later || (v.next && v.end_next > v.start)) {
		d.end = c->horizon; /* lives to the end of the iteration */
	} else if (v.next) {
		d.end = v.end_next;
		d.wraps = true;
	} else {
		d.end = v.end_within > v.start ? v.end_within : c->horizon;
	}
	c->posdyn[pos] = (uint32_t)p->nr_dyn;
	return push_dyn(p, &d);
}

/*
 * Is the allocation @a, made before the first steady iteration, live
 * throughout the steady ones?  Never freed, freed after the last one, or
 * (with two or more) freed inside the last one: the last iteration's end
 * is a guess (cut to the longest earlier one), and the frees at exit can
 * land before it, which left buffers live through every steady iteration
 * unplanned.
 */
static bool is_persistent(const struct cls_ctx *c, const struct trace_event *a)
{
	size_t last = c->first_steady + c->nr_steady - 1;

	if (a->peer == TRACE_NONE || a->peer >= iter_end(c->it, last))
		return true;
	return c->nr_steady >= 2 && a->peer >= c->it->first[last];
}

/* Allocations before the first steady iteration live throughout them. */
static int classify_persistent(const struct cls_ctx *c, struct stalloc_plan *p)
{
	size_t i, start = c->it->first[c->first_steady];
	/* the warm-up's last iteration, if the steady ones have one before */
	size_t warm = c->first_steady ? c->it->first[c->first_steady - 1] :
					start;
	uint32_t pos = 0;
	int err = 0;

	p->warmstart = UINT32_MAX;
	for (i = 0; i < start && !err; i++) {
		const struct trace_event *a = &c->t->ev[i];
		struct plan_entry e = { .cls = PLAN_PERSISTENT };

		if (a->op != TRACE_ALLOC)
			continue;
		if (i >= warm && p->warmstart == UINT32_MAX)
			p->warmstart = pos;
		e.pos = pos++;
		if (!is_persistent(c, a))
			continue;
		e.size = asize(c, a->size);
		e.req = a->size;
		e.end = c->horizon;
		err = push_entry(p, &e, a->id);
	}
	p->nr_prologue = pos;
	if (p->warmstart > pos)
		p->warmstart = pos;
	return err;
}

/*
 * The class of every allocation event of the trace, for timelines: what the
 * plan covers by its position's class, a steady iteration's request the
 * reference lacks as dynamic, the rest (set-up, the first iteration, the
 * tear-down) 0, unclassified.
 */
static void fill_classes(const struct cls_ctx *c, const struct stalloc_plan *p,
			 uint8_t *cls)
{
	size_t i, s, start = c->it->first[c->first_steady];
	uint32_t pos, j;
	char *pcls = calloc(c->nr_allocs[c->ref] + 1, 1);

	memset(cls, 0, c->t->nr);
	if (!pcls)
		return;
	for (i = 0; i < p->nr_ent; i++)
		if (p->ent[i].cls != PLAN_PERSISTENT)
			pcls[p->ent[i].pos] = p->ent[i].cls;
	for (i = 0; i < start; i++) {
		const struct trace_event *a = &c->t->ev[i];

		if (a->op == TRACE_ALLOC && is_persistent(c, a))
			cls[i] = PLAN_PERSISTENT;
	}
	for (s = 0; s < c->nr_steady; s++) {
		size_t k = c->first_steady + s;

		for (j = 0; j < c->nr_allocs[k]; j++)
			cls[c->allocs[k][j]] = PLAN_DYNAMIC;
		for (pos = 0; pos < c->nr_allocs[c->ref]; pos++)
			if (c->map[s][pos] != NOPOS && pcls[pos])
				cls[c->allocs[k][c->map[s][pos]]] =
					(uint8_t)pcls[pos];
	}
	free(pcls);
}

static void pick_steady(struct cls_ctx *c)
{
	const struct plan_iters *it = c->it;

	c->first_steady = it->nr >= 3 ? 1 : it->nr - 1;
	c->nr_steady = it->nr - c->first_steady;
	c->ref = c->first_steady;
	if (c->ref + 1 >= it->nr)
		c->ref = it->nr - 1;
}

/* A hash of iteration @k's request sizes, in order (FNV-1a). */
static uint64_t sizes_hash(const struct cls_ctx *c, size_t k)
{
	uint64_t h = 0xcbf29ce484222325ULL;
	size_t i;

	for (i = 0; i < c->nr_allocs[k]; i++) {
		h ^= req_size(c, c->allocs[k], i);
		h *= 0x100000001b3ULL;
	}
	return h ^ c->nr_allocs[k];
}

/*
 * The reference: of the steady iterations with a successor, the one whose
 * sizes most steady iterations repeat (equal hashes), the earliest on a
 * tie -- the first steady one when none repeats another.
 */
static int pick_ref(struct cls_ctx *c)
{
	size_t s, u, n = c->nr_steady, best = 0, votes, most = 0;
	uint64_t *h;

	if (c->ref != c->first_steady || n < 3)
		return 0; /* no choice: fewer than two with a successor */
	h = malloc(n * sizeof(*h));
	if (!h)
		return -ENOMEM;
	for (s = 0; s < n; s++)
		h[s] = sizes_hash(c, c->first_steady + s);
	for (s = 0; s + 1 < n; s++) {
		for (u = 0, votes = 0; u < n; u++)
			votes += h[u] == h[s];
		if (votes > most) {
			most = votes;
			best = s;
		}
	}
	free(h);
	c->ref = c->first_steady + best;
	return 0;
}

/* Record the dynamic requests of steady iteration @s. */
static int seen_iter(const struct cls_ctx *c, size_t s, struct plan_seen *seen)
{
	size_t k = c->first_steady + s, n = c->nr_allocs[k], j, m = 0;
	uint32_t pos, *inv = malloc((n + 1) * sizeof(*inv));

	seen->ev[s] = malloc((n + 1) * sizeof(**seen->ev));
	seen->dyn[s] = malloc((n + 1) * sizeof(**seen->dyn));
	if (!inv || !seen->ev[s] || !seen->dyn[s]) {
		free(inv);
		return -ENOMEM;
	}
	for (j = 0; j < n; j++)
		inv[j] = NOPOS;
	for (pos = 0; pos < c->nr_allocs[c->ref]; pos++)
		if (c->map[s][pos] != NOPOS)
			inv[c->map[s][pos]] = pos;
	for (j = 0; j < n; j++) {
		if (inv[j] != NOPOS && c->posdyn[inv[j]] == NOPOS)
			continue; /* planned */
		seen->ev[s][m] = c->allocs[k][j];
		seen->dyn[s][m++] = inv[j] == NOPOS ? PLAN_NOPOS :
						      c->posdyn[inv[j]];
	}
	seen->nr[s] = m;
	seen->iter[s] = k;
	free(inv);
	return 0;
}

static int fill_seen(const struct cls_ctx *c, struct plan_seen *seen)
{
	size_t s;
	int err = 0;

	seen->nr_iters = c->nr_steady;
	seen->iter = calloc(c->nr_steady + 1, sizeof(*seen->iter));
	seen->ev = calloc(c->nr_steady + 1, sizeof(*seen->ev));
	seen->dyn = calloc(c->nr_steady + 1, sizeof(*seen->dyn));
	seen->nr = calloc(c->nr_steady + 1, sizeof(*seen->nr));
	if (!seen->iter || !seen->ev || !seen->dyn || !seen->nr)
		return -ENOMEM;
	for (s = 0; s < c->nr_steady && !err; s++)
		err = seen_iter(c, s, seen);
	return err;
}

void plan_seen_free(struct plan_seen *seen)
{
	size_t s;

	for (s = 0; seen->ev && s < seen->nr_iters; s++) {
		free(seen->ev[s]);
		free(seen->dyn[s]);
	}
	free(seen->iter);
	free(seen->ev);
	free(seen->dyn);
	free(seen->nr);
	memset(seen, 0, sizeof(*seen));
}

static void ctx_free(struct cls_ctx *c)
{
	size_t k;

	for (k = 0; c->warp && k < c->nr_steady; k++)
		free(c->warp[k]);
	free(c->warp);
	for (k = 0; c->allocs && k < c->it->nr; k++)
		free(c->allocs[k]);
	for (k = 0; c->map && k < c->nr_steady; k++)
		free(c->map[k]);
	free(c->allocs);
	free(c->nr_allocs);
	free(c->map);
	free(c->last_match);
	free(c->posdyn);
	free(c->island);
}

/*
 * The islands: runs of at most ISLAND_MAX positions seen at one size with,
 * on both sides, a position whose size varies.  Inside a block of routed
 * requests (an expert loop) a position the recording saw at one size -- an
 * expert that got every token each time, or none -- varies like the rest
 * under other routing; planned as static, it would take requests of the
 * wrong size and pull the matcher out of line.
 */
static int find_islands(struct cls_ctx *c)
{
	size_t n = c->nr_allocs[c->ref], pos, a, b;
	bool *varies = calloc(n + 1, sizeof(*varies));
	struct pos_view v;

	c->island = calloc(n + 1, sizeof(*c->island));
	if (!varies || !c->island) {
		free(varies);
		return -ENOMEM;
	}
	for (pos = 0; pos < n; pos++) {
		view_pos(c, (uint32_t)pos, &v);
		varies[pos] = !v.present || !v.same_size;
	}
	for (a = 0; a < n; a = b) {
		for (b = a; b < n && !varies[b]; b++)
			;
		if (b == a) {
			b++;
			continue;
		}
		/* [a, b) steady, varies[a - 1] and varies[b] if inside */
		if (a > 0 && b < n && b - a <= ISLAND_MAX)
			for (pos = a; pos < b; pos++)
				c->island[pos] = true;
	}
	free(varies);
	return 0;
}

/* The classes, lifetimes and seen requests of @c's positions into @o. */
static int classify_into(struct cls_ctx *c, const struct plan_cls_out *o)
{
	struct stalloc_plan *p = o->p;
	uint32_t pos;
	int err;

	memset(o->seen, 0, sizeof(*o->seen));
	err = classify_persistent(c, p);
	for (pos = 0; !err && pos < c->nr_allocs[c->ref]; pos++)
		err = classify_pos(c, pos, p);
	if (!err)
		err = fill_seen(c, o->seen);
	if (!err && o->ev_class)
		fill_classes(c, p, o->ev_class);
	if (err) {
		plan_seen_free(o->seen);
		return err;
	}
	p->align = c->align;
	p->horizon = c->horizon;
	p->nr_positions = (uint32_t)c->nr_allocs[c->ref];
	p->warmup = (uint32_t)c->first_steady;
	p->sum.steady_iterations = c->nr_steady;
	return 0;
}

int plan_classify(const struct trace *t, const struct plan_iters *it,
		  uint64_t align, const struct plan_cls_out *out,
		  const struct plan_cls_out *warped)
{
	struct cls_ctx c = { .t = t, .it = it, .align = align };
	size_t s;
	int err;

	memset(out->seen, 0, sizeof(*out->seen));
	if (warped)
		memset(warped->seen, 0, sizeof(*warped->seen));
	if (!it->nr)
		return sa_error(-EINVAL, "planner: %s: no iteration", t->name);
	pick_steady(&c);
	for (s = 0; s < c.nr_steady; s++) {
		uint64_t l = iter_len(&c, c.first_steady + s);

		c.horizon = l > c.horizon ? l : c.horizon;
	}
	err = collect_allocs(&c);
	if (!err)
		err = pick_ref(&c);
	if (!err)
		err = align_all(&c);
	if (!err)
		err = find_islands(&c);
	if (!err) {
		c.posdyn = malloc((c.nr_allocs[c.ref] + 1) * sizeof(*c.posdyn));
		err = c.posdyn ? classify_into(&c, out) : -ENOMEM;
	}
	/* no dynamic position, no variable run: the two clocks agree */
	if (!err && warped && out->p->nr_dyn) {
		err = warp_iters(&c);
		c.use_warp = true;
		if (!err)
			err = classify_into(&c, warped);
		if (err)
			plan_seen_free(out->seen);
	}
	ctx_free(&c);
	if (err == -ENOMEM)
		return sa_error(-ENOMEM, "planner: out of memory");
	return err;
}
