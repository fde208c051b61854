// SPDX-License-Identifier: MIT
/*
 * planner/pack-greedy.c - the best-fit greedy packing of one group
 *
 * pack_greedy() places the items one by one in several orders (start time
 * -- as an online best-fit allocator would, run apart and first -- then
 * size, lifetime length, area), each at the best-fitting gap among
 * the already placed items whose lifetimes overlap it, and keeps the best
 * order's packing.  The overlapping placed items are found with a segment
 * tree over the group's sections: an item is filed in the "cover" list of
 * the O(log S) canonical nodes of its section range and in the "part" list
 * of the nodes on the paths from its end leaves to the root, so a query
 * visits O(log S) lists and reports each overlapping item at least once
 * (a stamp per item drops repeats).  The cost of one order is
 * O(E log E) for E overlapping pairs.  pack_greedy_repack() places a
 * window's items the same way around the ones it keeps fixed, for the local
 * improvement of pack-improve.c.  (The fallback for groups with too many
 * overlapping pairs is pack_sweep(), in pack-sweep.c.)
 *
 * Invariant: when pack_greedy() returns 0, the group's item offsets form a
 * valid packing whose peak is g->peak.  No locking: one ctx per thread.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lib/util.h"
#include "planner/pack-internal.h"

/* A node's list: a slice of the tree's pool, sized for the whole group. */
struct pack_vec {
	uint32_t *v;
	uint32_t n;
	uint32_t cap;
};

/*
 * One allocation: @node holds the 2 P cover lists, then the 2 P part ones;
 * leaf i is local section @base + i.
 */
struct pack_tree {
	size_t P;
	size_t base;
	uint32_t *pool;
	struct pack_vec node[];
};

struct pack_key {
	uint64_t k1;
	uint64_t k2;
	uint32_t id;
};

struct pack_greedy_state {
	struct pack_ctx *ctx;
	struct pack_group *g;
	struct pack_tree *tree;
	struct pack_span *nb;
	struct pack_key *keys;
	uint64_t *best_off;
	bool first_fit;
};

/*
 * File @id in the nodes for local sections [lo, hi); with @count, only
 * reserve room (cap) for it: every order inserts the same ranges.
 */
static void pack_vec_add(struct pack_vec *v, uint32_t id, bool count)
{
	if (count)
		v->cap++;
	else if (v->n < v->cap)
		v->v[v->n++] = id;
}

static struct pack_vec *pack_cover(struct pack_tree *t, size_t i)
{
	return &t->node[i];
}

static struct pack_vec *pack_part(struct pack_tree *t, size_t i)
{
	return &t->node[2 * t->P + i];
}

static void pack_tree_insert(struct pack_tree *t, size_t lo, size_t hi,
			     uint32_t id, bool count)
{
	size_t l, r, a, b;

	/* Clipped to the tree: fixed items may reach beyond it. */
	if (lo < t->base)
		lo = t->base;
	if (hi > t->base + t->P)
		hi = t->base + t->P;
	if (lo >= hi)
		return;
	l = lo - t->base + t->P;
	r = hi - t->base + t->P;
	a = l;
	b = r - 1;

	for (; l < r; l >>= 1, r >>= 1) {
		if (l & 1)
			pack_vec_add(pack_cover(t, l++), id, count);
		if (r & 1)
			pack_vec_add(pack_cover(t, --r), id, count);
	}
	for (; a != b; a >>= 1, b >>= 1) {
		pack_vec_add(pack_part(t, a), id, count);
		pack_vec_add(pack_part(t, b), id, count);
	}
	for (; a; a >>= 1)
		pack_vec_add(pack_part(t, a), id, count);
}

static size_t pack_local_lo(const struct pack_ctx *ctx,
			    const struct pack_item *it, uint32_t k)
{
	return ctx->loc[it->lo[k]];
}

static size_t pack_local_hi(const struct pack_ctx *ctx,
			    const struct pack_item *it, uint32_t k)
{
	return ctx->loc[it->lo[k]] + (it->hi[k] - it->lo[k]);
}

/*
 * A tree over local sections [base, base + width), with room in a pool
 * for the lists of the items @ids[0...n) (all inside that range).
 */
static struct pack_tree *pack_tree_new(const struct pack_ctx *ctx,
				       const uint32_t *ids, size_t n,
				       size_t base, size_t width)
{
	struct pack_tree *t;
	size_t i, P = 1, total = 0;
	uint32_t k;

	while (P < width)
		P *= 2;
	t = calloc(1, sizeof(*t) + 4 * P * sizeof(t->node[0]));
	if (!t)
		return NULL;
	t->P = P;
	t->base = base;
	for (i = 0; i < n; i++) {
		const struct pack_item *it = &ctx->items[ids[i]];

		for (k = 0; k < it->nr_iv; k++)
			pack_tree_insert(t, pack_local_lo(ctx, it, k),
					 pack_local_hi(ctx, it, k), 0, true);
	}
	for (i = 0; i < 4 * P; i++)
		total += t->node[i].cap;
	t->pool = malloc((total + 1) * sizeof(*t->pool));
	if (!t->pool) {
		free(t);
		return NULL;
	}
	for (total = 0, i = 0; i < 4 * P; i++) {
		t->node[i].v = t->pool + total;
		total += t->node[i].cap;
	}
	return t;
}

static void pack_tree_reset(struct pack_tree *t)
{
	size_t i;

	for (i = 0; i < 4 * t->P; i++)
		t->node[i].n = 0;
}

static void pack_tree_free(struct pack_tree *t)
{
	if (!t)
		return;
	free(t->pool);
	free(t);
}

static size_t pack_report(struct pack_greedy_state *st,
			  const struct pack_vec *v, size_t n)
{
	const struct pack_item *items = st->ctx->items;
	uint32_t *stamp = st->ctx->stamp, gen = st->ctx->stamp_gen, i;
	struct pack_span *nb = st->nb;

	for (i = 0; i < v->n; i++) {
		uint32_t id = v->v[i];

		if (stamp[id] == gen)
			continue;
		stamp[id] = gen;
		nb[n].off = items[id].off;
		nb[n].top = items[id].off + items[id].size;
		n++;
	}
	return n;
}

/* Placed items overlapping local sections [lo, hi) go to st->nb[n...]. */
static size_t pack_tree_query(struct pack_greedy_state *st, size_t lo,
			      size_t hi, size_t n)
{
	struct pack_tree *t = st->tree;
	size_t l, r, a, b;

	if (lo >= hi || lo < t->base || hi - t->base > t->P)
		return n;
	l = lo - t->base + t->P;
	r = hi - t->base + t->P;
	/* Items covering an ancestor of either end leaf, each path once. */
	for (a = l, b = r - 1; a; a >>= 1, b >>= 1) {
		n = pack_report(st, pack_cover(t, a), n);
		if (b != a)
			n = pack_report(st, pack_cover(t, b), n);
	}
	for (; l < r; l >>= 1, r >>= 1) {
		if (l & 1) {
			n = pack_report(st, pack_cover(t, l), n);
			n = pack_report(st, pack_part(t, l++), n);
		}
		if (r & 1) {
			--r;
			n = pack_report(st, pack_cover(t, r), n);
			n = pack_report(st, pack_part(t, r), n);
		}
	}
	return n;
}

static int pack_span_cmp(const void *pa, const void *pb)
{
	const struct pack_span *a = pa, *b = pb;

	return (a->off > b->off) - (a->off < b->off);
}

/*
 * The lowest offset of the smallest gap that fits (@first: of the lowest
 * gap that fits), else the top.
 */
static uint64_t pack_best_fit(struct pack_span *nb, size_t n, uint64_t size,
			      bool first)
{
	uint64_t cur = 0, best = UINT64_MAX, best_gap = UINT64_MAX;
	size_t i;

	qsort(nb, n, sizeof(*nb), pack_span_cmp);
	for (i = 0; i < n; i++) {
		if (nb[i].off > cur) {
			uint64_t gap = nb[i].off - cur;

			if (gap >= size && first)
				return cur;
			if (gap >= size && gap < best_gap) {
				best_gap = gap;
				best = cur;
			}
		}
		if (nb[i].top > cur)
			cur = nb[i].top;
	}
	return best != UINT64_MAX ? best : cur;
}

/* File placed item @id in the tree. */
static void pack_tree_add(struct pack_tree *t, const struct pack_ctx *ctx,
			  uint32_t id)
{
	const struct pack_item *it = &ctx->items[id];
	uint32_t k;

	for (k = 0; k < it->nr_iv; k++)
		pack_tree_insert(t, pack_local_lo(ctx, it, k),
				 pack_local_hi(ctx, it, k), id, false);
}

static int pack_place(struct pack_greedy_state *st, uint32_t id, uint64_t *peak)
{
	struct pack_ctx *ctx = st->ctx;
	struct pack_item *it = &ctx->items[id];
	size_t n = 0;
	uint32_t k;

	if (++ctx->stamp_gen == 0) {
		memset(ctx->stamp, 0, ctx->nr_items * sizeof(*ctx->stamp));
		ctx->stamp_gen = 1;
	}
	for (k = 0; k < it->nr_iv; k++)
		n = pack_tree_query(st, pack_local_lo(ctx, it, k),
				    pack_local_hi(ctx, it, k), n);
	/* The query's lists and the sort of what it found. */
	pack_charge(ctx, 8 + 2 * n + pack_sort_units(n));
	it->off = pack_best_fit(st->nb, n, it->size, st->first_fit);
	if (it->off + it->size > *peak)
		*peak = it->off + it->size;
	pack_tree_add(st->tree, ctx, id);
	return 0;
}

static int pack_key_cmp(const void *pa, const void *pb)
{
	const struct pack_key *a = pa, *b = pb;

	if (a->k1 != b->k1)
		return a->k1 < b->k1 ? -1 : 1;
	if (a->k2 != b->k2)
		return a->k2 < b->k2 ? -1 : 1;
	return (a->id > b->id) - (a->id < b->id);
}

enum pack_order {
	PACK_BY_START, /* first: see pack_greedy_run() */
	PACK_BY_SIZE,
	PACK_BY_LENGTH,
	PACK_BY_AREA,
	PACK_NR_ORDERS
};

static const char *const pack_order_names[PACK_NR_ORDERS] = {
	"greedy-start", "greedy-size", "greedy-length", "greedy-area"
};

static void pack_make_key(const struct pack_item *it, enum pack_order o,
			  struct pack_key *key)
{
	uint64_t area;

	switch (o) {
	case PACK_BY_SIZE:
		key->k1 = ~it->size;
		key->k2 = ~it->len;
		break;
	case PACK_BY_LENGTH:
		key->k1 = ~it->len;
		key->k2 = ~it->size;
		break;
	case PACK_BY_AREA:
		if (__builtin_mul_overflow(it->size, it->len, &area))
			area = UINT64_MAX;
		key->k1 = ~area;
		key->k2 = ~it->size;
		break;
	default:
		key->k1 = it->nr_iv > 1 ? 0 : (uint64_t)it->lo[0] + 1;
		key->k2 = ~it->size;
		break;
	}
}

/* One greedy pass in order @o; returns 0 with *peak set, or -ENOMEM. */
static int pack_greedy_order(struct pack_greedy_state *st, enum pack_order o,
			     uint64_t *peak)
{
	struct pack_group *g = st->g;
	size_t i;
	int err;

	for (i = 0; i < g->nr; i++) {
		pack_make_key(&st->ctx->items[g->items[i]], o, &st->keys[i]);
		st->keys[i].id = g->items[i];
	}
	pack_charge(st->ctx, pack_sort_units(g->nr));
	qsort(st->keys, g->nr, sizeof(*st->keys), pack_key_cmp);
	pack_tree_reset(st->tree);
	*peak = 0;
	for (i = 0; i < g->nr; i++) {
		err = pack_place(st, st->keys[i].id, peak);
		if (err)
			return err;
	}
	return 0;
}

static void pack_save(struct pack_greedy_state *st, bool restore)
{
	struct pack_group *g = st->g;
	size_t i;

	for (i = 0; i < g->nr; i++) {
		uint64_t *off = &st->ctx->items[g->items[i]].off;

		if (restore)
			*off = st->best_off[i];
		else
			st->best_off[i] = *off;
	}
}

/*
 * @arrival: PACK_BY_START alone, whatever the time left (placing each
 * buffer as it arrives, best fit, is what an online allocator does: every
 * plan stays at least that good); else the other orders while time is
 * left and a gap remains.
 */
static int pack_greedy_run(struct pack_greedy_state *st, bool arrival)
{
	struct pack_ctx *ctx = st->ctx;
	struct pack_group *g = st->g;
	int from = arrival ? PACK_BY_START : PACK_BY_START + 1;
	int to = arrival ? PACK_BY_START + 1 : PACK_NR_ORDERS;
	uint64_t peak;
	int o, err;

	if (g->method)
		pack_save(st, false);
	else
		g->peak = UINT64_MAX;
	for (o = from; o < to; o++) {
		if ((o > from || (g->method && !arrival)) &&
		    (g->peak <= g->load || pack_out_of_time(ctx)))
			break;
		err = pack_greedy_order(st, (enum pack_order)o, &peak);
		if (err)
			return err;
		if (peak < g->peak) {
			g->peak = peak;
			g->method = pack_order_names[o];
			pack_save(st, false);
		}
	}
	pack_save(st, true);
	return 0;
}

int pack_greedy(struct pack_ctx *ctx, struct pack_group *g, bool arrival)
{
	struct pack_greedy_state st = { ctx, g, NULL, NULL, NULL, NULL, false };
	int err = -ENOMEM;

	if (!ctx->stamp) {
		ctx->stamp = calloc(ctx->nr_items, sizeof(*ctx->stamp));
		if (!ctx->stamp)
			return -ENOMEM;
	}
	st.nb = malloc(g->nr * sizeof(*st.nb));
	st.keys = malloc(g->nr * sizeof(*st.keys));
	st.best_off = calloc(g->nr, sizeof(*st.best_off));
	st.tree = pack_tree_new(ctx, g->items, g->nr, 0, g->nr_secs);
	if (st.nb && st.keys && st.best_off && st.tree)
		err = pack_greedy_run(&st, arrival);
	pack_tree_free(st.tree);
	free(st.best_off);
	free(st.keys);
	free(st.nb);
	return err;
}

int pack_greedy_repack(struct pack_ctx *ctx, struct pack_group *g,
		       const struct pack_window *w, bool first_fit,
		       uint64_t *peak)
{
	struct pack_greedy_state st = { ctx,  g,    NULL,     NULL,
					NULL, NULL, first_fit };
	size_t i;
	int err = -ENOMEM;

	if (!ctx->stamp) {
		ctx->stamp = calloc(ctx->nr_items, sizeof(*ctx->stamp));
		if (!ctx->stamp)
			return -ENOMEM;
	}
	st.nb = malloc((w->nr + 1) * sizeof(*st.nb));
	st.tree = pack_tree_new(ctx, w->ids, w->nr, w->base, w->width);
	if (!st.nb || !st.tree)
		goto out;
	/* The tree: its nodes, each item filed twice and its fixed ones. */
	pack_charge(ctx, 4 * st.tree->P + 16 * w->nr);
	for (i = 0; i < w->nr_fixed; i++)
		pack_tree_add(st.tree, ctx, w->ids[i]);
	*peak = 0;
	for (; i < w->nr; i++)
		pack_place(&st, w->ids[i], peak);
	err = 0;
out:
	pack_tree_free(st.tree);
	free(st.nb);
	return err;
}

static int pack_u64_cmp(const void *pa, const void *pb)
{
	uint64_t a = *(const uint64_t *)pa, b = *(const uint64_t *)pb;

	return (a > b) - (a < b);
}

uint64_t pack_count_edges(const struct pack_ctx *ctx,
			  const struct pack_group *g)
{
	uint64_t *ev, active = 0, edges = 0;
	size_t i, n = 0;
	uint32_t k;

	ev = malloc(4 * g->nr * sizeof(*ev));
	if (!ev)
		return UINT64_MAX;
	for (i = 0; i < g->nr; i++) {
		const struct pack_item *it = &ctx->items[g->items[i]];

		for (k = 0; k < it->nr_iv; k++) {
			/* Ends sort before starts in the same section. */
			ev[n++] = (uint64_t)it->lo[k] << 1 | 1;
			ev[n++] = (uint64_t)it->hi[k] << 1;
		}
	}
	qsort(ev, n, sizeof(*ev), pack_u64_cmp);
	for (i = 0; i < n; i++) {
		if (ev[i] & 1)
			edges += active++;
		else
			active--;
	}
	free(ev);
	return edges;
}
