// SPDX-License-Identifier: MIT
/*
 * mapper/segs.c - where the pool is mapped one chunk per driver allocation
 *
 * A driver allocation (a vmm segment) maps whole and unmaps whole, so its
 * chunks can be lent (lend.c) only together: a segment reaching under a
 * block that is live stays mapped, however idle the rest of it is.  The
 * vmm cuts a slot's new memory into segments of up to 20 MiB, which suits
 * the space static slots use: what is idle there is known in advance and
 * comes and goes with whole slots.  The plan's free ranges are different:
 * dynamic requests (MoE routing) land there wherever a run of free space
 * stays clear longest (clear.c), of sizes the plan does not know, so what
 * is idle there at any moment is a patchwork that a segment spanning
 * several requests could only lend when all of them are gone.  Measured on
 * the suite's 52 MoE workloads: mapping the free ranges one chunk per
 * segment lets lending take what is idle and lowers the peak of most of
 * them (Documentation/mapper.rst), at the price of more driver calls in
 * the iterations with dynamic requests; static slots keep large segments.
 *
 * pool_segs_build() marks, once per plan, the pool chunks under any free
 * range of a dynamic position; map_slot() (match.c) maps those with one
 * chunk per driver allocation and the others as the vmm cuts them.
 * STALLOC_LEND_FINE=0 marks none, for jobs that would rather make fewer
 * driver calls than hold less memory.  The marks are a hint for memory and
 * driver calls only, never for correctness: lending still checks every
 * mapping against the blocks live now.  Without host memory for them the
 * marks are left out and every slot maps as the vmm cuts it.
 *
 * Built by match_init(), read-only after: no locking.
 */
#include <stdlib.h>

#include "../lib/util.h"
#include "match.h"

static int by_offset(const void *a, const void *b)
{
	const struct plan_range *x = a, *y = b;

	return (x->offset > y->offset) - (x->offset < y->offset);
}

/* Mark chunks [c, end) of the pool. */
static void mark(uint64_t *bits, uint64_t c, uint64_t end)
{
	for (; c < end; c++)
		bits[c / 64] |= 1ull << (c % 64);
}

/*
 * The ranges overlap a great deal (each dynamic position has its own, over
 * much the same free space: 18,420 ranges over 2.6 million chunks on a
 * 21 GB MoE rank), so they are sorted and merged first: each chunk is
 * marked once.
 */
bool pool_segs_build(struct matcher *m, bool fine)
{
	const struct stalloc_plan *p = m->plan;
	uint64_t n = m->pool_bytes / m->chunk, lo = 0, hi = 0;
	struct plan_range *v;
	size_t r, k = 0;

	if (!fine)
		return true; /* STALLOC_LEND_FINE=0: no marks */
	m->fine = calloc(n / 64 + 1, sizeof(*m->fine));
	v = malloc((p->nr_ranges + 1) * sizeof(*v));
	if (!m->fine || !v) {
		free(m->fine);
		m->fine = NULL;
		free(v);
		return false;
	}
	for (r = 0; r < p->nr_ranges; r++)
		if (p->ranges[r].len && p->ranges[r].offset < m->pool_bytes)
			v[k++] = p->ranges[r];
	qsort(v, k, sizeof(*v), by_offset);
	for (r = 0; r < k; r++) {
		uint64_t c = v[r].offset / m->chunk;
		uint64_t end =
			(v[r].offset + v[r].len + m->chunk - 1) / m->chunk;

		end = end < n ? end : n;
		if (c > hi) {
			mark(m->fine, lo, hi);
			lo = c;
		}
		hi = end > hi ? end : hi;
	}
	mark(m->fine, lo, hi);
	free(v);
	return true;
}

bool pool_chunk_fine(const struct matcher *m, uint64_t c)
{
	return m->fine && (m->fine[c / 64] >> (c % 64) & 1);
}
