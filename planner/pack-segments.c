// SPDX-License-Identifier: MIT
/*
 * planner/pack-segments.c - best fit inside segments that never merge
 *
 * A caching allocator keeps each block it got from the driver (a segment)
 * apart: a free range is merged with its free neighbours inside its
 * segment, never across two segments, and a request that no cached range
 * fits gets a new segment of its own size.  Replayed on a 3-stage
 * interleaved pipeline rank of 12 GB, PyTorch's caching allocator reserved
 * 1.0% above the peak of live bytes where every packing of this planner
 * ended 1.8% above it: the best fit of pack-greedy.c in the same order (an
 * allocator over one contiguous arena) lets the hole a large activation
 * leaves be cut by a small long-lived buffer and then merged into a
 * larger hole beside it, and the next large activation of that size no
 * longer fits anywhere but on top.  Segments keep holes the size of what
 * made them.
 *
 * pack_segments() runs the items of a group in the order they start (at a
 * section, the ones ending there first, then those starting, in group
 * order): each takes the smallest free range that fits it (the lowest
 * segment, then offset, on a tie), split to its size, or else a new
 * segment of its exact size above the others; an item that ends gives its
 * range back, merged with its free neighbours in the segment.  The
 * segments laid one above the other in the order they were made are a
 * packing whose peak is their total.  Then the same backwards in time (a
 * packing is one whichever way time runs: the items in the order they
 * end, the latest first): on the 12 GB rank forwards ends 1.78% above
 * LOAD, backwards 0.90%, and the planned run reserves 16 MiB less than
 * the caching allocator instead of 100 MiB more.  The lower of the two,
 * if lower than the group's packing, is kept aside (g->alt) and taken at
 * the end if the improvement of the group's own packing did not go lower
 * (pack.c): the improvement often does, from the other passes' packings,
 * and started from this one it lost 2 MiB on the suite's MoE ranks at
 * imbalance 0.  PyTorch's own constants (2 and 20 MiB segments, two pools
 * by size) are a driver's concern, not a plan's, and are left out.  On
 * most traces it is no better than the other packings: it is one more
 * candidate, cheap next to them.
 *
 * Groups with an item of two intervals (a wrap-around buffer) are left to
 * the other passes.  Cost: a sort of the 2 n events; the free ranges are
 * kept in an array sorted by (size, segment, offset), so a take or a give
 * back costs a binary search and a move of the array's tail, charged to
 * the work budget.  Deterministic.  No locking: one ctx per thread.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lib/util.h"
#include "planner/pack-internal.h"

/* A range of a segment, free or taken; neighbours link within it. */
struct pack_seg_blk {
	uint64_t off; /* from the segment's base */
	uint64_t size;
	uint32_t seg;
	uint32_t prev; /* PACK_SEG_NONE at the segment's ends */
	uint32_t next;
	bool free;
};

#define PACK_SEG_NONE UINT32_MAX

struct pack_seg_ev {
	uint32_t sec; /* global section */
	uint32_t start; /* 0: the item ends here, 1: it starts here */
	uint32_t pos; /* position in the group */
};

struct pack_segs {
	struct pack_ctx *ctx;
	struct pack_seg_blk *blk;
	uint32_t nr_blk;
	uint32_t *fr; /* free ranges (block ids), by (size, seg, off) */
	uint32_t nr_fr;
	uint64_t *seg_size;
	uint32_t nr_seg;
	uint32_t *at; /* block id of each group position */
};

static int pack_seg_ev_cmp(const void *pa, const void *pb)
{
	const struct pack_seg_ev *a = pa, *b = pb;

	if (a->sec != b->sec)
		return a->sec < b->sec ? -1 : 1;
	if (a->start != b->start)
		return a->start < b->start ? -1 : 1;
	return (a->pos > b->pos) - (a->pos < b->pos);
}

/* Does block @x come before block @y in the free array's order? */
static bool pack_seg_before(const struct pack_segs *s, uint32_t x, uint32_t y)
{
	const struct pack_seg_blk *a = &s->blk[x], *b = &s->blk[y];

	if (a->size != b->size)
		return a->size < b->size;
	if (a->seg != b->seg)
		return a->seg < b->seg;
	return a->off < b->off;
}

/* The first free range not before block @id (or of size >= @size). */
static uint32_t pack_seg_lower(const struct pack_segs *s, uint32_t id,
			       uint64_t size)
{
	uint32_t lo = 0, hi = s->nr_fr, mid;

	while (lo < hi) {
		mid = lo + (hi - lo) / 2;
		if (id != PACK_SEG_NONE ? pack_seg_before(s, s->fr[mid], id) :
					  s->blk[s->fr[mid]].size < size)
			lo = mid + 1;
		else
			hi = mid;
	}
	pack_charge(s->ctx, 64); /* up to 32 steps of two units */
	return lo;
}

static void pack_seg_fr_add(struct pack_segs *s, uint32_t id)
{
	uint32_t k = pack_seg_lower(s, id, 0);

	memmove(&s->fr[k + 1], &s->fr[k], (s->nr_fr - k) * sizeof(*s->fr));
	s->fr[k] = id;
	s->nr_fr++;
	s->blk[id].free = true;
	pack_charge(s->ctx, (s->nr_fr - k) / 8 + 1);
}

static void pack_seg_fr_del_at(struct pack_segs *s, uint32_t k)
{
	s->blk[s->fr[k]].free = false;
	s->nr_fr--;
	memmove(&s->fr[k], &s->fr[k + 1], (s->nr_fr - k) * sizeof(*s->fr));
	pack_charge(s->ctx, (s->nr_fr - k) / 8 + 1);
}

static void pack_seg_fr_del(struct pack_segs *s, uint32_t id)
{
	pack_seg_fr_del_at(s, pack_seg_lower(s, id, 0));
}

/* A new block after @prev in its segment (the ids never run out: 2 n). */
static uint32_t pack_seg_blk_new(struct pack_segs *s, uint32_t seg,
				 uint64_t off, uint64_t size, uint32_t prev,
				 uint32_t next)
{
	uint32_t id = s->nr_blk++;

	s->blk[id] = (struct pack_seg_blk){
		.off = off, .size = size, .seg = seg, .prev = prev, .next = next
	};
	if (prev != PACK_SEG_NONE)
		s->blk[prev].next = id;
	if (next != PACK_SEG_NONE)
		s->blk[next].prev = id;
	return id;
}

/* Take @size bytes for group position @pos. */
static void pack_seg_take(struct pack_segs *s, uint32_t pos, uint64_t size)
{
	uint32_t k = pack_seg_lower(s, PACK_SEG_NONE, size), id;
	struct pack_seg_blk *b;

	if (k == s->nr_fr) {
		s->seg_size[s->nr_seg] = size;
		s->at[pos] = pack_seg_blk_new(s, s->nr_seg++, 0, size,
					      PACK_SEG_NONE, PACK_SEG_NONE);
		return;
	}
	id = s->fr[k];
	pack_seg_fr_del_at(s, k);
	b = &s->blk[id];
	if (b->size > size) {
		uint32_t rest = pack_seg_blk_new(s, b->seg, b->off + size,
						 b->size - size, id, b->next);

		s->blk[id].size = size;
		pack_seg_fr_add(s, rest);
	}
	s->at[pos] = id;
}

/* Block @b, right after @a in its segment, becomes part of @a. */
static void pack_seg_absorb(struct pack_segs *s, uint32_t a, uint32_t b)
{
	s->blk[a].size += s->blk[b].size;
	s->blk[a].next = s->blk[b].next;
	if (s->blk[b].next != PACK_SEG_NONE)
		s->blk[s->blk[b].next].prev = a;
}

/*
 * Give group position @pos's range back, merged with free neighbours
 * (each out of the free array before its size changes: it is the key).
 */
static void pack_seg_give(struct pack_segs *s, uint32_t pos)
{
	uint32_t id = s->at[pos], n = s->blk[id].next, p = s->blk[id].prev;

	if (n != PACK_SEG_NONE && s->blk[n].free) {
		pack_seg_fr_del(s, n);
		pack_seg_absorb(s, id, n);
	}
	if (p != PACK_SEG_NONE && s->blk[p].free) {
		pack_seg_fr_del(s, p);
		pack_seg_absorb(s, p, id);
		id = p;
	}
	pack_seg_fr_add(s, id);
}

/* Run the events; the offsets of the packing into @off; its peak. */
static uint64_t pack_seg_run(struct pack_segs *s, const struct pack_group *g,
			     const struct pack_seg_ev *ev, uint64_t *off)
{
	uint64_t base = 0;
	size_t i;

	for (i = 0; i < 2 * g->nr; i++) {
		if (ev[i].start)
			pack_seg_take(s, ev[i].pos,
				      s->ctx->items[g->items[ev[i].pos]].size);
		else
			pack_seg_give(s, ev[i].pos);
	}
	/* the segments' bases: one above the other, in order made */
	for (i = 0; i < s->nr_seg; i++) {
		uint64_t sz = s->seg_size[i];

		s->seg_size[i] = base;
		base += sz;
	}
	for (i = 0; i < g->nr; i++) {
		const struct pack_seg_blk *b = &s->blk[s->at[i]];

		off[i] = s->seg_size[b->seg] + b->off;
	}
	pack_charge(s->ctx, 4 * g->nr);
	return base;
}

static bool pack_seg_applies(const struct pack_ctx *ctx,
			     const struct pack_group *g)
{
	size_t i;

	if (!g->nr || g->nr > UINT32_MAX / 4)
		return false;
	for (i = 0; i < g->nr; i++)
		if (ctx->items[g->items[i]].nr_iv != 1)
			return false;
	return true;
}

/* One run, forwards or @backward in time; keeps the better packing. */
static int pack_seg_pass(struct pack_ctx *ctx, struct pack_group *g,
			 bool backward)
{
	uint32_t end = (uint32_t)ctx->nr_secs;
	struct pack_segs s = { .ctx = ctx };
	struct pack_seg_ev *ev = NULL;
	uint64_t *off = NULL, peak;
	size_t i;
	int err = -ENOMEM;

	ev = malloc(2 * g->nr * sizeof(*ev));
	off = malloc(g->nr * sizeof(*off));
	s.blk = calloc(2 * g->nr, sizeof(*s.blk));
	s.fr = calloc(2 * g->nr, sizeof(*s.fr));
	s.seg_size = malloc(g->nr * sizeof(*s.seg_size));
	s.at = calloc(g->nr, sizeof(*s.at));
	if (!ev || !off || !s.blk || !s.fr || !s.seg_size || !s.at)
		goto out;
	for (i = 0; i < g->nr; i++) {
		const struct pack_item *it = &ctx->items[g->items[i]];
		uint32_t lo = it->lo[0], hi = it->hi[0];

		/* backwards, an item starts at its end and ends at its start */
		ev[2 * i] =
			(struct pack_seg_ev){ .sec = backward ? end - hi : lo,
					      .start = 1,
					      .pos = (uint32_t)i };
		ev[2 * i + 1] =
			(struct pack_seg_ev){ .sec = backward ? end - lo : hi,
					      .pos = (uint32_t)i };
	}
	pack_charge(ctx, pack_sort_units(2 * g->nr));
	qsort(ev, 2 * g->nr, sizeof(*ev), pack_seg_ev_cmp);
	peak = pack_seg_run(&s, g, ev, off);
	if (peak < g->peak && (!g->alt || peak < g->alt_peak)) {
		if (!g->alt) {
			g->alt = off;
			off = NULL;
		} else {
			memcpy(g->alt, off, g->nr * sizeof(*off));
		}
		g->alt_peak = peak;
		g->alt_method = backward ? "segments-backward" : "segments";
	}
	err = 0;
out:
	free(s.at);
	free(s.seg_size);
	free(s.fr);
	free(s.blk);
	free(off);
	free(ev);
	return err;
}

int pack_segments(struct pack_ctx *ctx, struct pack_group *g)
{
	int err;

	if (!pack_seg_applies(ctx, g))
		return 0;
	err = pack_seg_pass(ctx, g, false);
	if (!err && g->peak > g->load)
		err = pack_seg_pass(ctx, g, true);
	return err;
}
