// SPDX-License-Identifier: MIT
/*
 * mapper/lend.c - lend the plan's idle pool memory to dynamic requests
 *
 * The pool is packed for the plan's static requests; a dynamic request
 * (MoE routing, a request the plan did not expect) that does not fit the
 * plan's free space goes to the dynamic region, which would map new
 * physical memory beside the pool.  Before it does so past the physical
 * high water, the device's shrinker (device.c) calls match_lend(): the
 * pool's chunks under no live block are unmapped -- their physical
 * memory goes to the vmm's pool of segments, where the dynamic mapping
 * takes it -- and a slot that needs them later maps them back (map_slot()
 * in match.c), reclaiming from the dynamic region in turn.  Memory moves
 * by remapping, never by copying.
 *
 * What to lend: the mappings the plan needs last.  Each iteration entry's
 * chunks are due at its position, counted from the cursor (an entry the
 * cursor passed is due in the next iteration); a mapping wholly inside a
 * gap between live blocks is due when the first of its chunks is.  The
 * latest-due go first, so that what is lent stays lent for as long as
 * possible.  A mapping reaching under a live block is not lent (it unmaps
 * whole), nor one under the range the caller is about to map.
 *
 * Before a mapping is unmapped, the work of its chunks' last users (the
 * tags freed blocks left on them) must be complete, on those streams only,
 * never the whole device (ss_settle()).  A first pass lends only what the
 * driver already reports complete (a covering checkpoint whose event is
 * done: no wait); only if that is not enough does a second pass wait on
 * the host (the requesting stream's work so far through a checkpoint
 * recorded now, another stream's through its last checkpoint).  A mapping
 * whose users cannot be waited for so is not lent.  A stream waited for
 * once stays done up to that point, so one call waits at most once per
 * stream.
 *
 * A plan dropped as another workload's (match.c) hands out no slot again:
 * its pool's idle mappings go to the dynamic region the same way, first,
 * and are never mapped back.
 *
 * Cost: one pass over the iteration's entries and the pool's chunks per
 * call, and at most one host wait per stream that used what is lent.  Only
 * called when the physical high water would rise, never in a planned
 * iteration without dynamic requests.
 *
 * Locking: the device lock, held by every caller.
 */
#include <stdlib.h>

#include "../lib/util.h"
#include "match.h"

/*
 * A pool mapping under no live block, when the plan needs it next, and
 * who used it last.
 */
struct lend_cand {
	uint64_t off;
	uint64_t bytes;
	uint64_t due;
	struct ss_tags users;
};

/* Positions from the cursor until position @pos comes round. */
static uint64_t due_in(const struct matcher *m, uint32_t pos)
{
	uint32_t n = m->plan->nr_positions;

	return pos >= m->cursor ? pos - m->cursor :
				  (uint64_t)pos + n - m->cursor;
}

/* @due[c]: when pool chunk c is next in a slot (UINT64_MAX: never). */
static void chunks_due(const struct matcher *m, uint64_t *due, uint64_t nr)
{
	const struct stalloc_plan *p = m->plan;
	uint64_t c, last, when;
	size_t i;

	for (c = 0; c < nr; c++)
		due[c] = UINT64_MAX;
	for (i = 0; i < p->nr_ent; i++) {
		const struct plan_entry *e = &p->ent[i];

		if (e->cls == PLAN_PERSISTENT || !e->size)
			continue;
		when = due_in(m, e->pos);
		last = (e->offset + e->size - 1) / m->chunk;
		for (c = e->offset / m->chunk; c <= last && c < nr; c++)
			if (when < due[c])
				due[c] = when;
	}
}

/* Append the mappings wholly inside pool gap [lo, hi) to @v. */
static size_t gap_cands(struct matcher *m, uint64_t lo, uint64_t hi,
			const uint64_t *due, struct lend_cand *v, size_t n)
{
	struct vmm_translation t;
	uint64_t at = (lo + m->chunk - 1) / m->chunk * m->chunk;
	uint64_t end = hi / m->chunk * m->chunk, c, d;

	while (at < end) {
		if (!vmm_lookup(m->vmm, m->base + at, &t)) {
			at += m->chunk;
			continue;
		}
		if (t.seg_va < m->base + at ||
		    t.seg_va + t.seg_bytes > m->base + end) {
			/* reaches under a live block: not lendable */
			at = t.seg_va + t.seg_bytes - m->base;
			continue;
		}
		v[n] = (struct lend_cand){ .off = at, .bytes = t.seg_bytes };
		d = UINT64_MAX;
		for (c = at / m->chunk; c < (at + t.seg_bytes) / m->chunk;
		     c++) {
			d = due[c] < d ? due[c] : d;
			ss_merge(m->ss, &v[n].users, &m->use[c]);
		}
		v[n++].due = d;
		at += t.seg_bytes;
	}
	return n;
}

/* Drop the candidates under [@va, @va + @bytes), about to be mapped. */
static size_t drop_busy(const struct matcher *m, uint64_t va, uint64_t bytes,
			struct lend_cand *v, size_t n)
{
	size_t i, k = 0;

	for (i = 0; i < n; i++)
		if (m->base + v[i].off >= va + bytes ||
		    va >= m->base + v[i].off + v[i].bytes)
			v[k++] = v[i];
	return k;
}

static int by_due_desc(const void *a, const void *b)
{
	const struct lend_cand *x = a, *y = b;

	if (x->due != y->due)
		return x->due < y->due ? 1 : -1;
	return (x->off > y->off) - (x->off < y->off);
}

uint64_t match_lend(struct matcher *m, uint64_t va, uint64_t bytes,
		    uint64_t want, unsigned int slot)
{
	uint64_t nr = m->pool_bytes / m->chunk, at = 0, freed = 0, got;
	struct lend_cand *v = NULL;
	uint64_t *due = NULL;
	size_t n = 0, i;
	int pass;

	if (m->mapped_bytes <= m->live_bytes || !nr)
		return 0;
	due = malloc(nr * sizeof(*due));
	v = malloc(nr * sizeof(*v));
	if (!due || !v)
		goto out_free;
	chunks_due(m, due, nr);
	for (i = 0; i <= m->nr_live; i++) {
		uint64_t end = i < m->nr_live ? m->live[i].off : m->pool_bytes;

		if (end > at)
			n = gap_cands(m, at, end, due, v, n);
		if (i < m->nr_live && m->live[i].off + m->live[i].size > at)
			at = m->live[i].off + m->live[i].size;
	}
	n = drop_busy(m, va, bytes, v, n);
	if (m->busy_bytes)
		n = drop_busy(m, m->base + m->busy_off, m->busy_bytes, v, n);
	qsort(v, n, sizeof(*v), by_due_desc);
	/* what is known complete first: the host waits only if that is short */
	for (pass = 0; pass < 2 && freed < want; pass++)
		for (i = 0; i < n && freed < want; i++) {
			if (!v[i].bytes ||
			    ss_settle(m->ss, &v[i].users, slot, pass))
				continue; /* lent, or not known complete */
			if (vmm_unmap_present(m->vmm, m->base + v[i].off,
					      v[i].bytes, VMM_SYNCED, &got))
				goto out_free;
			freed += got;
			m->mapped_bytes -= got;
			v[i].bytes = 0;
		}
out_free:
	free(v);
	free(due);
	return freed;
}
