// SPDX-License-Identifier: MIT
/*
 * planner/pack-squeaky.c - skyline passes re-ranked by the squeaky wheel
 *
 * With pipeline parallelism of 4 stages or more (and with interleaved
 * schedules) no fixed ranking tried -- windows around the peak, area,
 * size, nested families, start, latest end -- packs a training step near
 * its lower bound: at each peak, early in the backward pass of a
 * micro-batch, the few tensors that micro-batch freed must lie right
 * under the buffer the backward pass allocates, with nothing of the other
 * micro-batches in flight above them, and which tensors those are shifts
 * from one micro-batch to the next.  A ranking that suits one peak
 * breaks another.
 *
 * pack_squeaky() learns the ranking instead (squeaky-wheel optimisation):
 * it makes one skyline pass ranked by start (then the latest end: each
 * buffer right after the ones that contain it), then passes from the
 * area order of pack-skyline.c, and after each pass the first item found
 * to end above the capacity -- the squeaky wheel -- moves halfway up the
 * ranking, so that the next pass places it before the items that took
 * its place.  Every pass that beats the group's best packing replaces it
 * (pack_skyline_probe()); a pass gives up as soon as it cannot.  Nothing
 * in it depends on the instance: no constant was tuned to a trace.
 *
 * Cost: one skyline pass and O(n) for the move per round; the rounds stop
 * when the group reaches the capacity or at @until_ms of work.
 *
 * Invariant: the group's offsets always form a valid packing with peak
 * g->peak.  Deterministic: only the work done stops it (pack-internal.h).
 * No locking: one ctx per thread.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lib/util.h"
#include "planner/pack-internal.h"

struct pack_sq_key {
	uint64_t k1;
	uint64_t k2;
	uint32_t pos;
};

/* Largest keys first, then group (input) order. */
static int pack_sq_key_cmp(const void *pa, const void *pb)
{
	const struct pack_sq_key *a = pa, *b = pb;

	if (a->k1 != b->k1)
		return a->k1 > b->k1 ? -1 : 1;
	if (a->k2 != b->k2)
		return a->k2 > b->k2 ? -1 : 1;
	return (a->pos > b->pos) - (a->pos < b->pos);
}

/*
 * @order gets the group's positions by start, then latest end (@by_start),
 * or by area, then size.  0 or -ENOMEM.
 */
static int pack_sq_rank(struct pack_ctx *ctx, const struct pack_group *g,
			bool by_start, uint32_t *order)
{
	struct pack_sq_key *keys = malloc((g->nr + 1) * sizeof(*keys));
	size_t i;

	if (!keys)
		return -ENOMEM;
	pack_charge(ctx, 4 * g->nr + pack_sort_units(g->nr));
	for (i = 0; i < g->nr; i++) {
		const struct pack_item *it = &ctx->items[g->items[i]];
		uint64_t area;

		if (__builtin_mul_overflow(it->size, it->len, &area))
			area = UINT64_MAX;
		/* Local sections keep the order of the global ones. */
		keys[i].k1 = by_start ? ~(uint64_t)ctx->loc[it->lo[0]] : area;
		keys[i].k2 = by_start ? it->hi[0] : it->size;
		keys[i].pos = (uint32_t)i;
	}
	qsort(keys, g->nr, sizeof(*keys), pack_sq_key_cmp);
	for (i = 0; i < g->nr; i++)
		order[i] = keys[i].pos;
	free(keys);
	return 0;
}

/* Move the item at rank @r to rank @r / 2; @rank maps positions to ranks. */
static void pack_sq_move(struct pack_ctx *ctx, uint32_t *order, uint32_t *rank,
			 uint32_t r)
{
	uint32_t to = r / 2, pos = order[r], i;

	pack_charge(ctx, 2 * (uint64_t)(r - to + 1));
	memmove(&order[to + 1], &order[to], (r - to) * sizeof(*order));
	order[to] = pos;
	for (i = to; i <= r; i++)
		rank[order[i]] = i;
}

int pack_squeaky(struct pack_ctx *ctx, struct pack_group *g, uint64_t cap,
		 double until_ms)
{
	uint32_t *order = malloc((g->nr + 1) * sizeof(*order));
	uint32_t *rank = malloc((g->nr + 1) * sizeof(*rank));
	struct pack_sky_probe pr = { .cap = cap };
	size_t i;
	int err = -ENOMEM;

	if (!order || !rank)
		goto out;
	err = pack_sq_rank(ctx, g, true, order);
	if (!err)
		err = pack_skyline_ranked(ctx, g, order, "skyline-start");
	if (!err && g->peak > cap)
		err = pack_sq_rank(ctx, g, false, order);
	if (err || g->peak <= cap)
		goto out;
	for (i = 0; i < g->nr; i++)
		rank[order[i]] = (uint32_t)i;
	while (g->peak > cap && !pack_past(ctx, until_ms)) {
		err = pack_skyline_probe(ctx, g, order, "skyline-squeaky", &pr);
		if (err || pr.blame == UINT32_MAX)
			break;
		pack_sq_move(ctx, order, rank, rank[pr.blame]);
	}
out:
	free(rank);
	free(order);
	return err;
}
