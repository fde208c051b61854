// SPDX-License-Identifier: MIT
/*
 * planner/pack-sweep.c - O(n log n) packing for very large groups
 *
 * The items are replayed as a heap simulation: in order of start section
 * (the largest first among equals), each item is freed when its end
 * section is reached and allocated first fit among the free gaps below the
 * heap top.  The gaps live in a treap keyed by offset whose nodes also
 * know the largest gap in their subtree, so first fit, insertion and
 * coalescing are O(log n).  The replay is also run backward in time (an
 * item then allocated at its end, freed at its start), which suits
 * training steps whose backward pass frees in the reverse order, and the
 * lower peak is kept.  Wrap-around items are stacked at the bottom
 * beforehand (the replay has no second lap).
 *
 * Invariants: gaps never touch each other (they are coalesced) nor the
 * heap top (it is lowered instead).  No locking: one ctx per thread.
 */
#include <errno.h>
#include <stdlib.h>

#include "lib/util.h"
#include "planner/pack-internal.h"

/* Node 0 is the empty tree. */
struct pack_treap {
	uint64_t *off;
	uint64_t *len;
	uint64_t *max;
	uint32_t *l;
	uint32_t *r;
	uint32_t *pri;
	uint32_t *free_list;
	size_t nr_free;
	uint32_t root;
	uint32_t rng;
	uint64_t top;
	uint64_t peak;
};

static void pack_treap_update(struct pack_treap *t, uint32_t x)
{
	uint64_t m = t->len[x];

	if (t->max[t->l[x]] > m)
		m = t->max[t->l[x]];
	if (t->max[t->r[x]] > m)
		m = t->max[t->r[x]];
	t->max[x] = m;
}

/* Split @x into offsets < @key (*a) and >= @key (*b). */
static void pack_treap_split(struct pack_treap *t, uint32_t x, uint64_t key,
			     uint32_t *a, uint32_t *b)
{
	if (!x) {
		*a = 0;
		*b = 0;
	} else if (t->off[x] < key) {
		pack_treap_split(t, t->r[x], key, &t->r[x], b);
		pack_treap_update(t, x);
		*a = x;
	} else {
		pack_treap_split(t, t->l[x], key, a, &t->l[x]);
		pack_treap_update(t, x);
		*b = x;
	}
}

static uint32_t pack_treap_merge(struct pack_treap *t, uint32_t a, uint32_t b)
{
	if (!a || !b)
		return a ? a : b;
	if (t->pri[a] > t->pri[b]) {
		t->r[a] = pack_treap_merge(t, t->r[a], b);
		pack_treap_update(t, a);
		return a;
	}
	t->l[b] = pack_treap_merge(t, a, t->l[b]);
	pack_treap_update(t, b);
	return b;
}

static void pack_treap_insert(struct pack_treap *t, uint64_t off, uint64_t len)
{
	uint32_t x = t->free_list[--t->nr_free], a, b;

	t->rng = t->rng * 1103515245u + 12345u;
	t->off[x] = off;
	t->len[x] = len;
	t->max[x] = len;
	t->l[x] = 0;
	t->r[x] = 0;
	t->pri[x] = t->rng;
	pack_treap_split(t, t->root, off, &a, &b);
	t->root = pack_treap_merge(t, pack_treap_merge(t, a, x), b);
}

static void pack_treap_remove(struct pack_treap *t, uint64_t off)
{
	uint32_t a, b, m;

	pack_treap_split(t, t->root, off, &a, &b);
	pack_treap_split(t, b, off + 1, &m, &b);
	if (m)
		t->free_list[t->nr_free++] = m;
	t->root = pack_treap_merge(t, a, b);
}

/* The lowest gap of at least @size bytes, or 0. */
static uint32_t pack_treap_first_fit(const struct pack_treap *t, uint64_t size)
{
	uint32_t x = t->root;

	while (x && t->max[x] >= size) {
		if (t->max[t->l[x]] >= size)
			x = t->l[x];
		else if (t->len[x] >= size)
			return x;
		else
			x = t->r[x];
	}
	return 0;
}

/* The gap with the largest offset < @key (@below) or >= @key, or 0. */
static uint32_t pack_treap_near(const struct pack_treap *t, uint64_t key,
				bool below)
{
	uint32_t x = t->root, found = 0;

	while (x) {
		if ((t->off[x] < key) == below) {
			found = x;
			x = below ? t->r[x] : t->l[x];
		} else {
			x = below ? t->l[x] : t->r[x];
		}
	}
	return found;
}

static uint64_t pack_heap_alloc(struct pack_treap *t, uint64_t size)
{
	uint32_t x = pack_treap_first_fit(t, size);
	uint64_t off, len;

	if (!x) {
		off = t->top;
		t->top += size;
		if (t->top > t->peak)
			t->peak = t->top;
		return off;
	}
	off = t->off[x];
	len = t->len[x];
	pack_treap_remove(t, off);
	if (len > size)
		pack_treap_insert(t, off + size, len - size);
	return off;
}

static void pack_heap_free(struct pack_treap *t, uint64_t off, uint64_t size)
{
	uint32_t x;

	if (off + size == t->top) {
		t->top = off;
		x = pack_treap_near(t, t->top, true);
		if (x && t->off[x] + t->len[x] == t->top) {
			t->top = t->off[x];
			pack_treap_remove(t, t->off[x]);
		}
		return;
	}
	x = pack_treap_near(t, off, true);
	if (x && t->off[x] + t->len[x] == off) {
		off = t->off[x];
		size += t->len[x];
		pack_treap_remove(t, off);
	}
	x = pack_treap_near(t, off + size, false);
	if (x && t->off[x] == off + size) {
		size += t->len[x];
		pack_treap_remove(t, t->off[x]);
	}
	pack_treap_insert(t, off, size);
}

static int pack_treap_init(struct pack_treap *t, size_t n)
{
	size_t i;

	t->off = calloc(n + 1, sizeof(*t->off));
	t->len = calloc(n + 1, sizeof(*t->len));
	t->max = calloc(n + 1, sizeof(*t->max));
	t->l = calloc(n + 1, sizeof(*t->l));
	t->r = calloc(n + 1, sizeof(*t->r));
	t->pri = calloc(n + 1, sizeof(*t->pri));
	t->free_list = malloc((n + 1) * sizeof(*t->free_list));
	if (!t->off || !t->len || !t->max || !t->l || !t->r || !t->pri ||
	    !t->free_list)
		return -ENOMEM;
	for (i = 0; i < n; i++)
		t->free_list[i] = (uint32_t)(n - i);
	t->nr_free = n;
	t->rng = 0x2545f491u;
	return 0;
}

static void pack_treap_free(struct pack_treap *t)
{
	free(t->off);
	free(t->len);
	free(t->max);
	free(t->l);
	free(t->r);
	free(t->pri);
	free(t->free_list);
}

/* Event keys: section << 33 | kind << 32 | position, frees first. */
static int pack_ev_cmp(const void *pa, const void *pb)
{
	uint64_t a = *(const uint64_t *)pa, b = *(const uint64_t *)pb;

	return (a > b) - (a < b);
}

/*
 * One replay, forward in time or (@rev) backward, each item allocated at
 * its first section in the replay's direction; offsets go to @off.
 */
static int pack_sweep_items(struct pack_ctx *ctx, struct pack_group *g,
			    struct pack_treap *t, uint64_t base, bool rev,
			    uint64_t *off, uint64_t *ev)
{
	uint64_t lo, hi;
	size_t i, n = 0;

	for (i = 0; i < g->nr; i++) {
		const struct pack_item *it = &ctx->items[g->items[i]];

		if (it->nr_iv > 1) {
			off[i] = it->off;
			continue;
		}
		lo = ctx->loc[it->lo[0]];
		hi = lo + it->hi[0] - it->lo[0];
		if (rev) {
			lo = g->nr_secs - lo;
			hi = g->nr_secs - hi;
			ev[n++] = hi << 33 | 1ull << 32 | i;
			ev[n++] = lo << 33 | i;
		} else {
			ev[n++] = lo << 33 | 1ull << 32 | i;
			ev[n++] = hi << 33 | i;
		}
	}
	qsort(ev, n, sizeof(*ev), pack_ev_cmp);
	for (i = 0; i < n; i++) {
		uint32_t k = (uint32_t)(ev[i] & 0xffffffffu);
		const struct pack_item *it = &ctx->items[g->items[k]];

		if (ev[i] & 1ull << 32)
			off[k] = base + pack_heap_alloc(t, it->size);
		else
			pack_heap_free(t, off[k] - base, it->size);
	}
	return 0;
}

int pack_sweep(struct pack_ctx *ctx, struct pack_group *g)
{
	struct pack_treap t = { 0 };
	uint64_t base = 0, *off, *ev;
	size_t i;
	int dir, err = 0;

	for (i = 0; i < g->nr; i++) {
		struct pack_item *it = &ctx->items[g->items[i]];

		if (it->nr_iv > 1) {
			it->off = base;
			base += it->size;
		}
	}
	off = calloc(g->nr + 1, sizeof(*off));
	ev = malloc((2 * g->nr + 1) * sizeof(*ev));
	if (!off || !ev) {
		free(ev);
		free(off);
		return -ENOMEM;
	}
	for (dir = 0; dir < 2 && !err; dir++) {
		if (dir && g->method && g->peak <= g->load)
			break;
		t = (struct pack_treap){ 0 };
		err = pack_treap_init(&t, g->nr + 1);
		if (!err)
			err = pack_sweep_items(ctx, g, &t, base, dir, off, ev);
		pack_treap_free(&t);
		if (err || (g->method && base + t.peak >= g->peak))
			continue;
		g->peak = base + t.peak;
		g->method = dir ? "sweep-rev" : "sweep";
		for (i = 0; i < g->nr; i++)
			ctx->items[g->items[i]].off = off[i];
	}
	free(ev);
	free(off);
	return err;
}
