// SPDX-License-Identifier: MIT
/*
 * planner/pack-skyline.c - bottom-up greedy packing of one group
 *
 * pack_skyline() builds the packing the exact search would reach first
 * with no backtracking (MiniMalloc's canonical placements): it always
 * fills the lowest offset any unplaced item can take, choosing among the
 * items that can go there the one first in a static order (area, then
 * size, or size, then lifetime; the first only for very large groups).
 * An item's lowest offset is the highest top already placed in its
 * sections (the "skyline"), kept in a segment tree; the items wait in a
 * heap keyed by (lowest offset, rank) whose keys are refreshed lazily: the
 * root whose offset went up sinks back with its new key.
 * pack_skyline_ranked() makes one pass in an order given by the caller
 * (pack-window.c).
 *
 * Heights only rise, so an item's current lowest offset bounds the one it
 * will get: a pass that is to beat a packing gives up as soon as one item
 * could only end at or above that packing's peak, or when the work budget
 * is spent.  A group's first pass always finishes: one pass is the least
 * the budget buys.  Each heap step charges the tree's depth to the budget.
 *
 * Placing an item at the skyline maximum x of its sections sets them all
 * to x + size, which is above every value there, so a section's height
 * is the largest tag on its root path and no lazy propagation is needed.
 *
 * Invariant: when it returns 0, the group's item offsets form a valid
 * packing whose peak is g->peak (the best order's, or the packing it had
 * before if that was better).  No locking: one ctx per thread.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lib/util.h"
#include "planner/pack-internal.h"

struct pack_sky_ent {
	uint64_t key;
	uint32_t rank;
	uint32_t id;
};

struct pack_sky {
	struct pack_ctx *ctx;
	struct pack_group *g;
	size_t P;
	uint64_t *mx; /* max height below a node */
	uint64_t *tag; /* height set on the node's whole range */
	struct pack_sky_ent *heap;
	size_t nr_heap;
	uint32_t *order; /* ranked items, g->items indices */
	uint64_t *off;
	uint64_t step; /* work units of one heap step: the tree's depth */
};

static uint64_t pack_max64(uint64_t a, uint64_t b)
{
	return a > b ? a : b;
}

/*
 * Highest top placed in local sections [lo, hi): the canonical nodes'
 * maxima and the tags above them, which all lie on the paths from the
 * two end leaves to the root (a tag inside the range is below a maximum).
 */
static uint64_t pack_sky_query(const struct pack_sky *t, size_t lo, size_t hi)
{
	size_t l = lo + t->P, r = hi + t->P, x;
	uint64_t m = 0;

	for (; l < r; l >>= 1, r >>= 1) {
		if (l & 1)
			m = pack_max64(m, t->mx[l++]);
		if (r & 1)
			m = pack_max64(m, t->mx[--r]);
	}
	for (x = (lo + t->P) >> 1; x; x >>= 1)
		m = pack_max64(m, t->tag[x]);
	for (x = (hi - 1 + t->P) >> 1; x; x >>= 1)
		m = pack_max64(m, t->tag[x]);
	return m;
}

/* Local sections [lo, hi) become @v high (@v is above all of them). */
static void pack_sky_set(struct pack_sky *t, size_t lo, size_t hi, uint64_t v)
{
	size_t l = lo + t->P, r = hi + t->P, a = l, b = r - 1;

	for (; l < r; l >>= 1, r >>= 1) {
		if (l & 1) {
			t->tag[l] = v;
			t->mx[l++] = v;
		}
		if (r & 1) {
			t->tag[--r] = v;
			t->mx[r] = v;
		}
	}
	for (a >>= 1; a; a >>= 1)
		t->mx[a] = pack_max64(t->mx[a], v);
	for (b >>= 1; b; b >>= 1)
		t->mx[b] = pack_max64(t->mx[b], v);
}

static bool pack_sky_less(const struct pack_sky_ent *a,
			  const struct pack_sky_ent *b)
{
	return a->key != b->key ? a->key < b->key : a->rank < b->rank;
}

/* Put @e at the root and let it sink to its place. */
static void pack_sky_sift(struct pack_sky *t, struct pack_sky_ent e)
{
	size_t i = 0, n = t->nr_heap;

	for (;;) {
		size_t c = 2 * i + 1;

		if (c >= n)
			break;
		if (c + 1 < n && pack_sky_less(&t->heap[c + 1], &t->heap[c]))
			c++;
		if (!pack_sky_less(&t->heap[c], &e))
			break;
		t->heap[i] = t->heap[c];
		i = c;
	}
	t->heap[i] = e;
}

static void pack_sky_pop(struct pack_sky *t)
{
	if (--t->nr_heap)
		pack_sky_sift(t, t->heap[t->nr_heap]);
}

static size_t pack_sky_lo(const struct pack_ctx *ctx,
			  const struct pack_item *it, uint32_t k)
{
	return ctx->loc[it->lo[k]];
}

static size_t pack_sky_hi(const struct pack_ctx *ctx,
			  const struct pack_item *it, uint32_t k)
{
	return ctx->loc[it->lo[k]] + (it->hi[k] - it->lo[k]);
}

static uint64_t pack_sky_min_off(const struct pack_sky *t,
				 const struct pack_item *it)
{
	uint64_t m = 0;
	uint32_t k;

	for (k = 0; k < it->nr_iv; k++)
		m = pack_max64(m, pack_sky_query(t, pack_sky_lo(t->ctx, it, k),
						 pack_sky_hi(t->ctx, it, k)));
	return m;
}

/*
 * One bottom-up pass in the order of t->order; returns the peak, or
 * UINT64_MAX when it gave up: an item's top reached @bound (the pass
 * cannot beat it) or the time ran out.  With no bound (UINT64_MAX: the
 * group has no packing yet) it always finishes.
 */
static uint64_t pack_sky_pass(struct pack_sky *t, uint64_t bound)
{
	struct pack_ctx *ctx = t->ctx;
	uint64_t peak = 0, pops = 0;
	size_t i;
	uint32_t k;

	memset(t->mx, 0, 2 * t->P * sizeof(*t->mx));
	memset(t->tag, 0, 2 * t->P * sizeof(*t->tag));
	/* All keys 0, ranks ascending: already a heap. */
	for (i = 0; i < t->g->nr; i++)
		t->heap[i] =
			(struct pack_sky_ent){ 0, (uint32_t)i, t->order[i] };
	t->nr_heap = t->g->nr;
	while (t->nr_heap) {
		struct pack_sky_ent e = t->heap[0];
		const struct pack_item *it = &ctx->items[t->g->items[e.id]];
		uint64_t m;

		pack_charge(ctx, t->step);
		if (bound != UINT64_MAX && (++pops & 1023) == 0 &&
		    pack_out_of_time(ctx))
			return UINT64_MAX;
		m = pack_sky_min_off(t, it);
		/* Heights only rise: @m bounds the item's final offset. */
		if (m + it->size >= bound)
			return UINT64_MAX;
		/*
		 * Keys are lower bounds of the offsets: a risen item is still
		 * the first when it stays at the root with its new key.
		 */
		if (m > e.key) {
			e.key = m;
			pack_sky_sift(t, e);
			if (t->heap[0].id != e.id)
				continue;
		}
		pack_sky_pop(t);
		t->off[e.id] = m;
		for (k = 0; k < it->nr_iv; k++)
			pack_sky_set(t, pack_sky_lo(ctx, it, k),
				     pack_sky_hi(ctx, it, k), m + it->size);
		peak = pack_max64(peak, m + it->size);
	}
	return peak;
}

struct pack_sky_key {
	uint64_t k1;
	uint64_t k2;
	uint32_t id;
};

static int pack_sky_key_cmp(const void *pa, const void *pb)
{
	const struct pack_sky_key *a = pa, *b = pb;

	if (a->k1 != b->k1)
		return a->k1 > b->k1 ? -1 : 1;
	if (a->k2 != b->k2)
		return a->k2 > b->k2 ? -1 : 1;
	return (a->id > b->id) - (a->id < b->id);
}

enum { PACK_SKY_AREA, PACK_SKY_SIZE, PACK_SKY_NR_ORDERS };

/*
 * Above this many items a group gets the area order only: a pass costs
 * hundreds of ms there (S_1: 28 k items, 440 ms) and the size order never
 * won on such groups, so the time goes to pack-improve.c instead.
 */
#define PACK_SKY_ONE_ORDER_ITEMS 16384

static const char *const pack_sky_names[PACK_SKY_NR_ORDERS] = {
	"skyline-area", "skyline-size"
};

/* Rank the items (largest key first) into t->order. */
static int pack_sky_rank(struct pack_sky *t, int o)
{
	struct pack_sky_key *keys = malloc(t->g->nr * sizeof(*keys));
	size_t i;

	if (!keys)
		return -ENOMEM;
	pack_charge(t->ctx, 4 * t->g->nr);
	for (i = 0; i < t->g->nr; i++) {
		const struct pack_item *it = &t->ctx->items[t->g->items[i]];
		uint64_t area;

		if (__builtin_mul_overflow(it->size, it->len, &area))
			area = UINT64_MAX;
		keys[i].k1 = o == PACK_SKY_AREA ? area : it->size;
		keys[i].k2 = o == PACK_SKY_AREA ? it->size : it->len;
		keys[i].id = (uint32_t)i;
	}
	pack_charge(t->ctx, pack_sort_units(t->g->nr));
	qsort(keys, t->g->nr, sizeof(*keys), pack_sky_key_cmp);
	for (i = 0; i < t->g->nr; i++)
		t->order[i] = keys[i].id;
	free(keys);
	return 0;
}

static int pack_sky_run(struct pack_sky *t)
{
	struct pack_group *g = t->g;
	uint64_t peak;
	size_t i;
	int o, err;

	for (o = 0; o < PACK_SKY_NR_ORDERS; o++) {
		if (g->method &&
		    (g->peak <= g->load || pack_out_of_time(t->ctx)))
			break;
		if (o && g->nr > PACK_SKY_ONE_ORDER_ITEMS)
			break;
		err = pack_sky_rank(t, o);
		if (err)
			return err;
		peak = pack_sky_pass(t, g->method ? g->peak : UINT64_MAX);
		if (peak == UINT64_MAX)
			continue;
		g->peak = peak;
		g->method = pack_sky_names[o];
		for (i = 0; i < g->nr; i++)
			t->ctx->items[g->items[i]].off = t->off[i];
	}
	return 0;
}

/* One pass in the order @order (group positions, first rank first). */
static int pack_sky_run_ranked(struct pack_sky *t, const uint32_t *order,
			       const char *name)
{
	struct pack_group *g = t->g;
	uint64_t peak;
	size_t i;

	memcpy(t->order, order, g->nr * sizeof(*order));
	peak = pack_sky_pass(t, g->method ? g->peak : UINT64_MAX);
	if (peak == UINT64_MAX)
		return 0;
	g->peak = peak;
	g->method = name;
	for (i = 0; i < g->nr; i++)
		t->ctx->items[g->items[i]].off = t->off[i];
	return 0;
}

static int pack_sky_common(struct pack_ctx *ctx, struct pack_group *g,
			   const uint32_t *order, const char *name)
{
	struct pack_sky t = { 0 };
	int err = -ENOMEM;

	t.ctx = ctx;
	t.g = g;
	t.P = 1;
	t.step = 4;
	while (t.P < g->nr_secs) {
		t.P *= 2;
		t.step += 2;
	}
	t.mx = malloc(2 * t.P * sizeof(*t.mx));
	t.tag = malloc(2 * t.P * sizeof(*t.tag));
	t.heap = malloc((g->nr + 1) * sizeof(*t.heap));
	t.order = malloc((g->nr + 1) * sizeof(*t.order));
	t.off = malloc((g->nr + 1) * sizeof(*t.off));
	if (t.mx && t.tag && t.heap && t.order && t.off)
		err = order ? pack_sky_run_ranked(&t, order, name) :
			      pack_sky_run(&t);
	free(t.off);
	free(t.order);
	free(t.heap);
	free(t.tag);
	free(t.mx);
	return err;
}

int pack_skyline(struct pack_ctx *ctx, struct pack_group *g)
{
	return pack_sky_common(ctx, g, NULL, NULL);
}

int pack_skyline_ranked(struct pack_ctx *ctx, struct pack_group *g,
			const uint32_t *order, const char *name)
{
	return pack_sky_common(ctx, g, order, name);
}
