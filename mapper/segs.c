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
 * chunk per driver allocation and the others as the vmm cuts them.  The
 * marks are a hint for memory and driver calls only, never for
 * correctness: lending still checks every mapping against the blocks live
 * now.  Without host memory for them the marks are left out and every
 * slot maps as the vmm cuts it.
 *
 * Built by match_init(), read-only after: no locking.
 */
#include <stdlib.h>

#include "../lib/util.h"
#include "match.h"

static void mark(uint64_t *bits, uint64_t c)
{
	bits[c / 64] |= 1ull << (c % 64);
}

bool pool_segs_build(struct matcher *m)
{
	const struct stalloc_plan *p = m->plan;
	uint64_t n = m->pool_bytes / m->chunk, c, end;
	size_t r;

	m->fine = calloc(n / 64 + 1, sizeof(*m->fine));
	if (!m->fine)
		return false;
	for (r = 0; r < p->nr_ranges; r++) {
		const struct plan_range *g = &p->ranges[r];

		if (!g->len || g->offset >= m->pool_bytes)
			continue;
		c = g->offset / m->chunk;
		end = (g->offset + g->len + m->chunk - 1) / m->chunk;
		for (end = end < n ? end : n; c < end; c++)
			mark(m->fine, c);
	}
	return true;
}

bool pool_chunk_fine(const struct matcher *m, uint64_t c)
{
	return m->fine && (m->fine[c / 64] >> (c % 64) & 1);
}
