// SPDX-License-Identifier: MIT
/*
 * planner/period.c - find the iterations of a trace
 *
 * With "iteration" markers the markers say where iterations start.
 * Without them the period is found from the request sequence itself:
 *
 *   1. Each alloc and free becomes a token (its kind and size; a free's
 *      size is its allocation's).
 *   2. Every k-gram of tokens (k = 8) is hashed; sorting the (hash,
 *      position) pairs gives, for each k-gram, the distance to its next
 *      occurrence.  Distances that occur often are candidate periods: a
 *      k-gram that occurs once per iteration votes for the iteration
 *      length, one inside a repeated layer votes for the layer's.
 *   3. Each candidate d is scored by its coverage, the fraction of
 *      positions i with token[i] == token[i + d].  The iteration period
 *      repeats (nearly) everything; a layer period does not.
 *   4. A candidate must also explain the whole recording, not a part of
 *      it: cut the trace into windows of d tokens (the first one, with the
 *      prologue, left out when there are three or more), each window of
 *      an iteration period holds one whole iteration's worth of phases,
 *      so every window reaches the same peak of live bytes (routing may
 *      move it a little).  A layer's or a pipeline phase's windows climb
 *      through the forward pass and fall through the backward one: their
 *      peaks spread over most of the range of live bytes.  A candidate
 *      whose window peaks spread over more than a quarter of that range
 *      is not the iteration.  Nor is one after whose last repetition the
 *      trace goes on allocating (more than that quarter): a recording of
 *      iterations ends with its last one and the tear-down's frees, while
 *      a micro-batch or a pipeline phase is followed by the rest of its
 *      iteration (the optimizer step).  With one recorded iteration no
 *      candidate passes, and the trace gets no steady plan rather than a
 *      wrong one.
 *      Among those that pass, the smallest candidate within 2% of the best
 *      coverage wins, if that coverage is at least 50% and there are two
 *      periods (a multiple of the iteration covers as much as it does).
 *   5. Boundaries: the phase with the fewest bytes live (the natural cut
 *      between iterations) is taken in the last full period; its k-gram is
 *      the anchor, and boundaries are placed a period apart, each snapped
 *      to the nearest occurrence of the anchor within an eighth of a
 *      period, so inserted or missing requests do not shift the rest.
 *
 * Without repetition, the whole trace is one iteration and one static
 * problem.  No locking: pure functions of the trace.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../lib/util.h"
#include "planner.h"

#define PERIOD_K 8
#define PERIOD_CANDIDATES 48
#define PERIOD_MIN_COVERAGE 0.5
#define PERIOD_SLACK 4UL
#define PERIOD_SPREAD 4 /* window peaks within 1/4 of the live range */

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return x;
}

struct hpos {
	uint64_t h;
	size_t pos;
};

static int hpos_cmp(const void *a, const void *b)
{
	const struct hpos *x = a, *y = b;

	if (x->h != y->h)
		return x->h < y->h ? -1 : 1;
	return x->pos < y->pos ? -1 : x->pos > y->pos;
}

static int u64_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

struct period_ctx {
	const struct trace *t;
	size_t n; /* tokens */
	uint64_t *tok; /* token per alloc/free */
	size_t *ev; /* event index of each token */
	uint64_t *gram; /* hash of the k-gram starting at each token */
	uint64_t *live; /* bytes live before each token */
	size_t k;
};

/*
 * Fraction of (sampled) positions i whose token comes back about @d later:
 * token[i] == token[i + d'] for some |d' - d| <= slack, so that a few
 * inserted or missing requests do not hide the repetition after them.  The
 * slack grows with the period (none below 128 events), or short periods
 * would match anything.
 */
static double coverage(const struct period_ctx *c, size_t d)
{
	size_t i, same = 0, tried = 0, step = c->n > (1 << 16) ? 4 : 1;
	size_t x, slack = d / 128 < PERIOD_SLACK ? d / 128 : PERIOD_SLACK;

	if (d + slack >= c->n)
		return 0;
	for (i = 0; i + d + slack < c->n; i += step) {
		tried++;
		for (x = d - slack; x <= d + slack; x++)
			if (c->tok[i] == c->tok[i + x]) {
				same++;
				break;
			}
	}
	return tried ? (double)same / (double)tried : 0;
}

/* Collect up to @max candidate periods with their votes. */
static size_t candidates(const struct period_ctx *c, uint64_t *cand,
			 uint64_t *votes, size_t max)
{
	size_t i, n = c->n - c->k + 1, nd = 0, nc = 0;
	struct hpos *hp = malloc(n * sizeof(*hp));
	uint64_t *d = malloc(n * sizeof(*d));

	for (i = 0; i < max; i++)
		votes[i] = 0;
	if (!hp || !d)
		goto out;
	for (i = 0; i < n; i++)
		hp[i] = (struct hpos){ c->gram[i], i };
	qsort(hp, n, sizeof(*hp), hpos_cmp);
	for (i = 1; i < n; i++)
		if (hp[i].h == hp[i - 1].h)
			d[nd++] = hp[i].pos - hp[i - 1].pos;
	qsort(d, nd, sizeof(*d), u64_cmp);
	for (i = 0; i < nd;) {
		size_t j = i, slot, m;

		while (j < nd && d[j] == d[i])
			j++;
		/* keep the @max most voted distances */
		for (slot = 0, m = 1; m < max; m++)
			if (votes[m] < votes[slot])
				slot = m;
		if (j - i > votes[slot]) {
			cand[slot] = d[i];
			votes[slot] = j - i;
		}
		i = j;
	}
	for (i = 0; i < max; i++)
		if (votes[i] >= 2) {
			cand[nc] = cand[i];
			votes[nc++] = votes[i];
		}
out:
	free(hp);
	free(d);
	return nc;
}

/*
 * Does the trace allocate at most @limit bytes after the last repetition of
 * @d (after the last k-gram that also occurs about @d earlier)?  A trace of
 * iterations ends with its last iteration (perhaps cut short) and the frees
 * of the tear-down; a part of one iteration (a micro-batch, a pipeline
 * phase) is followed by the rest of it, an optimizer step that allocates.
 * Walks back from the end, adding each token that falls into the tail, and
 * stops as soon as the limit is passed.
 */
static bool tail_quiet(const struct period_ctx *c, size_t d, uint64_t limit)
{
	size_t i, x, slack;
	uint64_t bytes = 0;

	slack = d / 128 < PERIOD_SLACK ? d / 128 : PERIOD_SLACK;
	for (i = c->n - c->k + 1; i-- > d + slack;) {
		const struct trace_event *e;

		for (x = d - slack; x <= d + slack; x++)
			if (c->gram[i] == c->gram[i - x])
				return true;
		e = &c->t->ev[c->ev[i + c->k - 1]];
		if (e->op == TRACE_ALLOC) {
			bytes += e->size;
			if (bytes > limit)
				return false;
		}
	}
	return false; /* never repeats */
}

/*
 * Does @d explain the whole recording?  The peaks of live bytes of its
 * windows (d tokens each; the first, with the prologue, left out when there
 * are three or more) may spread over at most a quarter of the range of live
 * bytes those windows cover, and what the trace allocates after the last
 * repetition may not exceed that quarter either.  See the comment at the
 * top.
 */
static bool explains_whole(const struct period_ctx *c, size_t d)
{
	size_t m = c->n / d, k, i;
	uint64_t lo = UINT64_MAX, hi = 0, plo = UINT64_MAX, phi = 0;

	if (m < 2)
		return false;
	for (k = m >= 3; k < m; k++) {
		uint64_t peak = 0;

		for (i = k * d; i < (k + 1) * d; i++) {
			if (c->live[i] > peak)
				peak = c->live[i];
			if (c->live[i] < lo)
				lo = c->live[i];
		}
		if (peak > hi)
			hi = peak;
		if (peak < plo)
			plo = peak;
		if (peak > phi)
			phi = peak;
	}
	return phi - plo <= (hi - lo) / PERIOD_SPREAD &&
	       tail_quiet(c, d, (hi - lo) / PERIOD_SPREAD);
}

/*
 * Among the candidates that explain the whole recording, the smallest
 * whose coverage is within 2% of the best, then the
 * most voted candidate near it (coverage tolerates a little slack, votes
 * do not).
 */
static bool pick_period(struct period_ctx *c, size_t *period, double *cov)
{
	uint64_t cand[PERIOD_CANDIDATES], votes[PERIOD_CANDIDATES];
	double cv[PERIOD_CANDIDATES], top = 0;
	size_t i, nc, low = 0, best = 0;
	uint64_t best_votes = 0;

	nc = candidates(c, cand, votes, PERIOD_CANDIDATES);
	for (i = 0; i < nc; i++) {
		cv[i] = 2 * cand[i] <= c->n ? coverage(c, cand[i]) : 0;
		if (cv[i] >= PERIOD_MIN_COVERAGE && !explains_whole(c, cand[i]))
			cv[i] = 0;
		if (cv[i] > top)
			top = cv[i];
	}
	if (top < PERIOD_MIN_COVERAGE)
		return false;
	for (i = 0; i < nc; i++)
		if (cv[i] >= top - 0.02 && (!low || cand[i] < low))
			low = cand[i];
	for (i = 0; i < nc; i++)
		if (cand[i] >= low && cand[i] <= low + 2 * PERIOD_SLACK &&
		    votes[i] > best_votes) {
			best = cand[i];
			best_votes = votes[i];
		}
	*period = best;
	*cov = top;
	return true;
}

/*
 * The anchor: the token position with the fewest bytes live in the last
 * period that is followed by a full period (the natural cut between two
 * iterations).
 */
static size_t pick_anchor(const struct period_ctx *c, size_t p)
{
	size_t i, lo, best;
	uint64_t best_live = UINT64_MAX;

	lo = c->n - c->k > 2 * p ? c->n - c->k - 2 * p : 0;
	best = lo;
	for (i = lo; i < lo + p && i < c->n && i + c->k <= c->n; i++)
		if (c->live[i] < best_live) {
			best_live = c->live[i];
			best = i;
		}
	return best;
}

/* Nearest position to @want (within @win) whose k-gram is @h, or @want. */
static size_t snap(const struct period_ctx *c, size_t want, size_t win,
		   uint64_t h, bool *found)
{
	size_t dlt;

	*found = false;
	for (dlt = 0; dlt <= win; dlt++) {
		if (want + dlt + c->k <= c->n && c->gram[want + dlt] == h) {
			*found = true;
			return want + dlt;
		}
		if (dlt <= want && c->gram[want - dlt] == h) {
			*found = true;
			return want - dlt;
		}
	}
	return want;
}

static int add_boundary(struct plan_iters *it, const struct trace *t, size_t ev)
{
	size_t *nf = realloc(it->first, (it->nr + 1) * sizeof(*nf));
	uint64_t *ns;

	if (!nf)
		return sa_error(-ENOMEM, "planner: out of memory");
	it->first = nf;
	ns = realloc(it->seq, (it->nr + 1) * sizeof(*ns));
	if (!ns)
		return sa_error(-ENOMEM, "planner: out of memory");
	it->seq = ns;
	it->first[it->nr] = ev;
	it->seq[it->nr] = t->ev[ev].seq;
	it->nr++;
	return 0;
}

static int boundaries(struct period_ctx *c, struct plan_iters *it, size_t p)
{
	size_t anchor = pick_anchor(c, p), win = p / 8, pos, *b, nb = 0, i;
	uint64_t h = c->gram[anchor];
	bool found = true;
	int err = 0;

	b = calloc((c->n / p + 3) * 2, sizeof(*b));
	if (!b)
		return sa_error(-ENOMEM, "planner: out of memory");
	/* backwards from the anchor, then forwards; stop where it fades */
	for (pos = anchor; found;) {
		b[nb++] = pos;
		if (pos < p || nb > c->n / p + 2)
			break;
		pos = snap(c, pos - p, win, h, &found);
	}
	for (i = 0; i < nb / 2; i++) {
		size_t x = b[i];

		b[i] = b[nb - 1 - i];
		b[nb - 1 - i] = x;
	}
	for (pos = anchor + p; pos + c->k <= c->n; pos += p) {
		pos = snap(c, pos, win, h, &found);
		if (!found)
			break;
		b[nb++] = pos;
	}
	for (i = 0; i < nb && !err; i++)
		err = add_boundary(it, c->t, c->ev[b[i]]);
	free(b);
	return err;
}

/*
 * The last iteration runs to the next marker that never comes: bound it to
 * the longest earlier steady iteration, so that the trace's tear-down (the
 * frees of weights and gradients at exit) is not taken for part of it, and
 * drop it if it is cut short (the trace stopped inside it).
 */
static void bound_last(const struct trace *t, struct plan_iters *it)
{
	size_t k, i, last = it->nr - 1;
	uint64_t lmax = 0, limit;

	for (k = it->nr > 2; k < last; k++)
		if (it->seq[k + 1] - it->seq[k] > lmax)
			lmax = it->seq[k + 1] - it->seq[k];
	limit = it->seq[last] + lmax;
	for (i = it->first[last]; i < t->nr && t->ev[i].seq < limit; i++)
		;
	it->end = i;
	if (t->ev[i - 1].seq + 1 - it->seq[last] < lmax - lmax / 8) {
		it->end = it->first[last];
		it->nr--;
	}
}

static int find_markers(const struct trace *t, struct plan_iters *it)
{
	size_t i;
	int err = 0;

	for (i = 0; i < t->nr && !err; i++)
		if (trace_mark_is(t, &t->ev[i], "iteration"))
			err = add_boundary(it, t, i);
	return err;
}

static int find_period(const struct trace *t, struct plan_iters *it)
{
	struct period_ctx c = { .t = t };
	size_t i, j, p = 0;
	uint64_t live = 0;
	int err = -ENOMEM;

	c.tok = malloc(t->nr * sizeof(*c.tok));
	c.ev = malloc(t->nr * sizeof(*c.ev));
	c.gram = malloc(t->nr * sizeof(*c.gram));
	c.live = malloc(t->nr * sizeof(*c.live));
	if (!c.tok || !c.ev || !c.gram || !c.live)
		goto out;
	for (i = 0; i < t->nr; i++)
		if (t->ev[i].op != TRACE_MARK) {
			const struct trace_event *e = &t->ev[i];

			c.live[c.n] = live;
			live = e->op == TRACE_ALLOC ? live + e->size :
						      live - e->size;
			c.tok[c.n] = mix64(e->size * 2 + (e->op == TRACE_FREE));
			c.ev[c.n++] = i;
		}
	err = 0;
	c.k = c.n / 4 < PERIOD_K ? c.n / 4 : PERIOD_K;
	if (c.k < 1 || c.n < 4)
		goto out;
	for (i = 0; i + c.k <= c.n; i++) {
		uint64_t h = 0;

		for (j = 0; j < c.k; j++)
			h = mix64(h ^ c.tok[i + j]) + j;
		c.gram[i] = h;
	}
	if (pick_period(&c, &p, &it->coverage)) {
		it->period = p;
		it->source = ITER_DETECTED;
		err = boundaries(&c, it, p);
	}
out:
	free(c.tok);
	free(c.ev);
	free(c.gram);
	free(c.live);
	if (err == -ENOMEM)
		return sa_error(-ENOMEM, "planner: out of memory");
	return err;
}

int iters_find(const struct trace *t, struct plan_iters *it)
{
	int err;

	memset(it, 0, sizeof(*it));
	it->end = t->nr;
	it->source = ITER_MARKERS;
	err = find_markers(t, it);
	if (!err && !it->nr) {
		it->end = t->nr;
		err = find_period(t, it);
	}
	if (!err && it->nr >= 2)
		bound_last(t, it);
	if (!err && it->nr < 2) {
		/* no repetition: the whole trace is one iteration */
		it->nr = 0;
		it->end = t->nr;
		it->period = 0;
		it->source = ITER_NONE;
		err = add_boundary(it, t, 0);
	}
	if (err)
		iters_free(it);
	return err;
}

void iters_free(struct plan_iters *it)
{
	free(it->first);
	free(it->seq);
	memset(it, 0, sizeof(*it));
}
