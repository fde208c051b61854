// SPDX-License-Identifier: MIT
/*
 * mapper/clear.c - how long the plan's free space stays free
 *
 * A dynamic position's free ranges are the pool's space that no planned
 * slot uses during the position's window.  A request placed there is in
 * no slot's way only until the first iteration entry over it starts; one
 * that outlives its window (under another routing a run's positions take
 * other tensors than recorded: a kept buffer where a temporary was) holds
 * that slot, and every slot planned over the same space after it.  So of
 * the places a request fits, reuse() (match.c) takes the one that stays
 * clear longest after the window opens.
 *
 * For that, clear_build() computes once per plan, for each free range, the
 * time from its position's window start to the start of the first entry
 * over each address (counted round the iteration) as a step function of
 * the address: segments of constant value, in address order, adjacent
 * equal ones merged (about 7 per range on a 21 GB MoE rank).  A sweep over
 * the entries overlapping the range, in the order of offsets, with two
 * min-heaps of those open (by start time, by end): O(k log k) for k
 * entries, no sort per range.  clear_for() answers for [off, off + size) in
 * O(log s) plus the segments it covers.
 *
 * Built by match_init(), read-only after: no locking.  Without host memory
 * for them the tables are left out and clear_for() answers 0 everywhere:
 * reuse() then takes the first range with room, as before it had them.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../lib/util.h"
#include "match.h"

/* An entry's stretch of one range and how soon it starts. */
struct clear_iv {
	uint64_t lo, hi, until;
};

/* An iteration entry, in the order of offsets. */
struct clear_ent {
	uint64_t off;
	uint32_t i;
};

struct clear_build {
	const struct stalloc_plan *p;
	struct clear_ent *by_off; /* iteration entries, by offset */
	size_t nr;
	uint64_t max_size;
	struct clear_iv *iv; /* the current range's, by start */
	struct clear_iv **heap; /* open ones, soonest first */
	struct clear_iv **ends; /* open ones, by end */
	struct clear_seg *segs;
	size_t nr_segs, cap_segs;
	size_t first; /* the current range's first segment */
};

static int clear_by_off(const void *a, const void *b)
{
	const struct clear_ent *x = a, *y = b;

	return x->off < y->off ? -1 : x->off > y->off;
}

static uint64_t iv_key(const struct clear_iv *v, bool by_hi)
{
	return by_hi ? v->hi : v->until;
}

/* Min-heaps of open stretches, by how soon they start or where they end. */
static void heap_push(struct clear_iv **h, size_t *n, struct clear_iv *v,
		      bool by_hi)
{
	size_t i = (*n)++;

	while (i && iv_key(h[(i - 1) / 2], by_hi) > iv_key(v, by_hi)) {
		h[i] = h[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	h[i] = v;
}

static void heap_pop(struct clear_iv **h, size_t *n, bool by_hi)
{
	struct clear_iv *v = h[--(*n)];
	size_t i = 0, c;

	while ((c = 2 * i + 1) < *n) {
		if (c + 1 < *n && iv_key(h[c + 1], by_hi) < iv_key(h[c], by_hi))
			c++;
		if (iv_key(h[c], by_hi) >= iv_key(v, by_hi))
			break;
		h[i] = h[c];
		i = c;
	}
	if (*n)
		h[i] = v;
}

static bool seg_add(struct clear_build *b, uint64_t off, uint64_t until)
{
	if (b->nr_segs > b->first && b->segs[b->nr_segs - 1].until == until)
		return true;
	if (b->nr_segs == b->cap_segs) {
		size_t cap = b->cap_segs * 2 + 64;
		struct clear_seg *s = realloc(b->segs, cap * sizeof(*s));

		if (!s)
			return false;
		b->segs = s;
		b->cap_segs = cap;
	}
	b->segs[b->nr_segs++] =
		(struct clear_seg){ .off = off, .until = until };
	return true;
}

/* The entries over [a, b), clipped to it, into b->iv; their number. */
static size_t clear_overlaps(struct clear_build *b, uint64_t a, uint64_t e,
			     uint64_t now)
{
	const struct stalloc_plan *p = b->p;
	size_t lo = 0, hi = b->nr, n = 0;
	uint64_t from = a > b->max_size ? a - b->max_size : 0;

	while (lo < hi) { /* the first entry at or past @from */
		size_t mid = (lo + hi) / 2;

		if (b->by_off[mid].off < from)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (; lo < b->nr && b->by_off[lo].off < e; lo++) {
		const struct plan_entry *pe = &p->ent[b->by_off[lo].i];

		if (pe->offset + pe->size <= a)
			continue;
		b->iv[n++] = (struct clear_iv){
			.lo = pe->offset > a ? pe->offset : a,
			.hi = pe->offset + pe->size < e ?
				      pe->offset + pe->size :
				      e,
			.until = pe->start >= now ?
					 pe->start - now :
					 pe->start + p->horizon - now,
		};
	}
	return n;
}

/*
 * The step function of range [a, e) for a window opening at @now: a sweep
 * over the stretches in the order they begin (clear_overlaps() yields
 * them so), each boundary the next beginning or the nearest end.
 */
static bool clear_range(struct clear_build *b, uint64_t a, uint64_t e,
			uint64_t now)
{
	size_t n = clear_overlaps(b, a, e, now), next = 0, nu = 0, nh = 0;
	uint64_t at = a, to;

	while (at < e) {
		for (; next < n && b->iv[next].lo <= at; next++) {
			heap_push(b->heap, &nu, &b->iv[next], false);
			heap_push(b->ends, &nh, &b->iv[next], true);
		}
		while (nh && b->ends[0]->hi <= at)
			heap_pop(b->ends, &nh, true);
		while (nu && b->heap[0]->hi <= at)
			heap_pop(b->heap, &nu, false);
		if (!seg_add(b, at, nu ? b->heap[0]->until : UINT64_MAX))
			return false;
		to = e;
		if (next < n && b->iv[next].lo < to)
			to = b->iv[next].lo;
		if (nh && b->ends[0]->hi < to)
			to = b->ends[0]->hi;
		at = to;
	}
	return true;
}

static int clear_alloc(struct clear_build *b, struct matcher *m)
{
	const struct stalloc_plan *p = m->plan;
	size_t i;

	b->p = p;
	b->by_off = malloc((p->nr_ent + 1) * sizeof(*b->by_off));
	b->iv = malloc((p->nr_ent + 1) * sizeof(*b->iv));
	b->heap = malloc((p->nr_ent + 1) * sizeof(*b->heap));
	b->ends = malloc((p->nr_ent + 1) * sizeof(*b->ends));
	m->clear_first = malloc((p->nr_ranges + 1) * sizeof(*m->clear_first));
	if (!b->by_off || !b->iv || !b->heap || !b->ends || !m->clear_first)
		return -ENOMEM;
	for (i = 0; i < p->nr_ent; i++) {
		if (p->ent[i].cls == PLAN_PERSISTENT || !p->ent[i].size)
			continue;
		b->by_off[b->nr++] = (struct clear_ent){
			.off = p->ent[i].offset,
			.i = (uint32_t)i,
		};
		if (p->ent[i].size > b->max_size)
			b->max_size = p->ent[i].size;
	}
	qsort(b->by_off, b->nr, sizeof(*b->by_off), clear_by_off);
	return 0;
}

bool clear_build(struct matcher *m)
{
	const struct stalloc_plan *p = m->plan;
	struct clear_build b = { 0 };
	size_t d, r;
	int err;

	m->clear = NULL;
	m->clear_first = NULL;
	if (!p->nr_ranges)
		return true;
	err = clear_alloc(&b, m);
	for (d = 0; !err && d < p->nr_dyn; d++) {
		const struct plan_dyn *pd = &p->dyn[d];

		for (r = pd->first_range;
		     !err && r < pd->first_range + pd->nr_ranges; r++) {
			const struct plan_range *rg = &p->ranges[r];

			m->clear_first[r] = (uint32_t)b.nr_segs;
			b.first = b.nr_segs;
			if (!clear_range(&b, rg->offset, rg->offset + rg->len,
					 pd->start))
				err = -ENOMEM;
		}
	}
	if (!err)
		m->clear_first[p->nr_ranges] = (uint32_t)b.nr_segs;
	free(b.by_off);
	free(b.iv);
	free(b.heap);
	free(b.ends);
	if (err) {
		free(b.segs);
		free(m->clear_first);
		m->clear_first = NULL;
		return false;
	}
	m->clear = b.segs;
	return true;
}

uint64_t clear_for(const struct matcher *m, uint32_t range, uint64_t off,
		   uint64_t size)
{
	const struct clear_seg *s;
	size_t lo = 0, hi;
	uint64_t best = UINT64_MAX;

	if (!m->clear)
		return 0; /* no tables (no host memory for them) */
	s = m->clear + m->clear_first[range];
	hi = m->clear_first[range + 1] - m->clear_first[range];
	while (lo + 1 < hi) { /* the last segment starting at or before off */
		size_t mid = (lo + hi) / 2;

		if (s[mid].off <= off)
			lo = mid;
		else
			hi = mid;
	}
	hi = m->clear_first[range + 1] - m->clear_first[range];
	for (; lo < hi && s[lo].off < off + size; lo++)
		if (s[lo].until < best)
			best = s[lo].until;
	return best;
}
