// SPDX-License-Identifier: MIT
/*
 * planner/pack-family.c - a skyline pass ranked by nested families
 *
 * A training step allocates a micro-batch's activations layer by layer and
 * frees them in the opposite order: their lifetimes nest, like the frames
 * of a stack.  Packed each directly above the one that contains it, such
 * a family has no hole at any moment.  With pipeline parallelism several
 * micro-batches are in flight at once (1F1B: a stage holds up to as many
 * as there are stages), so the families of consecutive micro-batches
 * overlap in staggered windows, and the gradients, allocated in the first
 * backward pass and kept to the end, cross them.  The orders of
 * pack-skyline.c and pack-window.c mix the families: a buffer of one
 * micro-batch lands in a hole another one left, the stack of a later
 * micro-batch is split in pieces around it, and the holes line up at the
 * peaks (a 2-stage 1F1B trace ended 1% above LOAD in any order tried).
 *
 * pack_family() partitions the group into laminar families -- sets of
 * buffers no two of which cross (either disjoint lifetimes or one inside
 * the other) -- greedily, the longest buffers first, each into the first
 * family it does not cross, and makes one skyline pass ranked by family
 * (the first family first), then by start, then by the latest end: in
 * every family each buffer comes right after its container, so it is
 * placed on it; the skyline still fills the lowest offset first, so the
 * families interleave where they do not compete.  The longest family (the
 * buffers that live to the end of the step) takes the bottom, the next
 * one the stacks it does not cross, and so on.  The same pass on a 2-stage
 * 1F1B trace ends at LOAD (0.0003% above it for 968 buffers).
 *
 * "Does the buffer cross a family?": the buffers come longest first, so a
 * member is at least as long as the new buffer, and the two cross exactly
 * when an endpoint of the member lies strictly inside the buffer's span.
 * Each family counts its endpoints per section in a Fenwick tree: one
 * query and two updates of O(log S) per buffer and family tried.  At most
 * PACK_FAM_MAX families are kept; a buffer that crosses all of them is
 * ranked after them, by start.
 *
 * Invariant: the group's offsets form a valid packing with peak g->peak
 * (the pass replaces them only with a better one, see pack-skyline.c).
 * Deterministic: every step is charged to the work budget, no clock.  No
 * locking: one ctx per thread.
 */
#include <errno.h>
#include <stdlib.h>

#include "lib/util.h"
#include "planner/pack-internal.h"

/* Families kept; what crosses them all is ranked after them. */
#define PACK_FAM_MAX 64

struct pack_fam_key {
	uint64_t k1;
	uint64_t k2;
	uint64_t k3;
	uint32_t pos;
};

/* Ascending keys, then group (input) order. */
static int pack_fam_key_cmp(const void *pa, const void *pb)
{
	const struct pack_fam_key *a = pa, *b = pb;

	if (a->k1 != b->k1)
		return a->k1 < b->k1 ? -1 : 1;
	if (a->k2 != b->k2)
		return a->k2 < b->k2 ? -1 : 1;
	if (a->k3 != b->k3)
		return a->k3 < b->k3 ? -1 : 1;
	return (a->pos > b->pos) - (a->pos < b->pos);
}

/* Endpoints counted in a Fenwick tree over local sections 0..n. */
struct pack_fam_tree {
	uint32_t *cnt;
	size_t n;
};

static void pack_fam_add(struct pack_fam_tree *t, size_t x)
{
	for (x++; x <= t->n; x += x & -x)
		t->cnt[x]++;
}

/* Endpoints at local sections [0, x). */
static uint64_t pack_fam_sum(const struct pack_fam_tree *t, size_t x)
{
	uint64_t s = 0;

	for (; x; x -= x & -x)
		s += t->cnt[x];
	return s;
}

/* The local span [*lo, *hi) of item @it, false when it has two pieces. */
static bool pack_fam_span(const struct pack_ctx *ctx,
			  const struct pack_item *it, size_t *lo, size_t *hi)
{
	*lo = ctx->loc[it->lo[0]];
	*hi = *lo + (it->hi[0] - it->lo[0]);
	return it->nr_iv == 1;
}

/*
 * Family of each group position into @fam (PACK_FAM_MAX: none), the
 * longest buffers first.  0 or -ENOMEM.
 */
static int pack_fam_assign(struct pack_ctx *ctx, const struct pack_group *g,
			   struct pack_fam_key *keys, uint32_t *fam)
{
	struct pack_fam_tree trees[PACK_FAM_MAX];
	size_t nr_fam = 0, i, f, lo, hi, n = g->nr_secs + 1, lg = 1;
	int err = 0;

	while (lg < 64 && (1ull << lg) < n)
		lg++;
	pack_charge(ctx, 2 * g->nr);
	for (i = 0; i < g->nr; i++) {
		const struct pack_item *it = &ctx->items[g->items[i]];

		pack_fam_span(ctx, it, &lo, &hi);
		keys[i].k1 = ~(uint64_t)(hi - lo);
		keys[i].k2 = lo;
		keys[i].k3 = 0;
		keys[i].pos = (uint32_t)i;
	}
	pack_charge(ctx, pack_sort_units(g->nr));
	qsort(keys, g->nr, sizeof(*keys), pack_fam_key_cmp);
	for (i = 0; i < g->nr && !err; i++) {
		uint32_t pos = keys[i].pos;
		const struct pack_item *it = &ctx->items[g->items[pos]];

		fam[pos] = PACK_FAM_MAX;
		if (!pack_fam_span(ctx, it, &lo, &hi))
			continue;
		for (f = 0; f < nr_fam; f++) {
			pack_charge(ctx, 2 * lg);
			/* No member endpoint strictly inside (lo, hi)? */
			if (pack_fam_sum(&trees[f], hi) ==
			    pack_fam_sum(&trees[f], lo + 1))
				break;
		}
		if (f == nr_fam) {
			if (nr_fam == PACK_FAM_MAX)
				continue;
			pack_charge(ctx, n);
			trees[f].n = n;
			trees[f].cnt = calloc(n + 1, sizeof(*trees[f].cnt));
			if (!trees[f].cnt) {
				err = -ENOMEM;
				break;
			}
			nr_fam++;
		}
		pack_charge(ctx, 2 * lg);
		pack_fam_add(&trees[f], lo);
		pack_fam_add(&trees[f], hi);
		fam[pos] = (uint32_t)f;
	}
	for (f = 0; f < nr_fam; f++)
		free(trees[f].cnt);
	return err;
}

int pack_family(struct pack_ctx *ctx, struct pack_group *g)
{
	struct pack_fam_key *keys = malloc((g->nr + 1) * sizeof(*keys));
	uint32_t *fam = malloc((g->nr + 1) * sizeof(*fam));
	uint32_t *order = malloc((g->nr + 1) * sizeof(*order));
	size_t i, lo, hi;
	int err = -ENOMEM;

	if (!keys || !fam || !order)
		goto out;
	err = pack_fam_assign(ctx, g, keys, fam);
	if (err)
		goto out;
	pack_charge(ctx, 2 * g->nr);
	for (i = 0; i < g->nr; i++) {
		const struct pack_item *it = &ctx->items[g->items[i]];

		pack_fam_span(ctx, it, &lo, &hi);
		keys[i].k1 = fam[i];
		keys[i].k2 = lo;
		keys[i].k3 = ~(uint64_t)hi;
		keys[i].pos = (uint32_t)i;
	}
	pack_charge(ctx, pack_sort_units(g->nr));
	qsort(keys, g->nr, sizeof(*keys), pack_fam_key_cmp);
	for (i = 0; i < g->nr; i++)
		order[i] = keys[i].pos;
	err = pack_skyline_ranked(ctx, g, order, "skyline-family");
out:
	free(order);
	free(fam);
	free(keys);
	return err;
}
