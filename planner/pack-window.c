// SPDX-License-Identifier: MIT
/*
 * planner/pack-window.c - skyline passes ranked around the peak
 *
 * On real training graphs the lower bound is set by one tight spot: the
 * section where the most bytes are live, and its neighbourhood.  There,
 * every buffer live must stack without a hole, and the buffers that live
 * across the whole neighbourhood must lie below the ones that come and
 * go in it, or the latter leave holes the former cannot use (a 20 MB
 * buffer allocated right after the peak finds the hole a dying 327 MB
 * one left taken by a 409 MB buffer that starts a section later).  The
 * area order of pack-skyline.c ranks by whole lifetimes, so a buffer
 * that is long but starts just after the peak outranks one that spans
 * the peak, and the improvement of pack-improve.c cannot move either.
 *
 * pack_window_reach() is the first skyline pass a group gets: items live
 * at the most loaded section come first, ranked by how far they reach on
 * both sides of it (the fewer sections before or after it; a buffer that
 * spans the peak widely goes to the bottom), then by size; the others
 * after them, by size.  pack_window_group() re-runs the skyline with the
 * ranks taken from a window of sections around that section: by how
 * many of the window's sections an item lives in (the items spanning it
 * all go to the bottom, like the width heuristic of the exact search on
 * a problem cut to the window), then by size, then in input order.
 * Which width works differs between graphs (on the shared ones, radius
 * 64 sections for pangu_2.6B and resnet50, 32 to 512 for bert_base), so
 * the radii are tried from 64 outward, alternately wider and narrower
 * (64, 32, 128, 16, 256, 8, 512, 4, 1024, ...), until one reaches the
 * capacity, the window covers the group, or the time is up.  The caller
 * takes them in two goes: the first radius right after the pass ranked
 * by reach, the others after the area-ordered skyline.  A pass gives up
 * as soon as some item's lowest offset shows it cannot beat the best
 * packing (see pack-skyline.c).
 *
 * Invariant: the group's offsets always form a valid packing with peak
 * g->peak (a pass replaces them only with a better one).  Deterministic:
 * the passes stop on the work done (see pack-internal.h).  No locking: one ctx per thread.
 */
#include <errno.h>
#include <stdlib.h>

#include "lib/util.h"
#include "planner/pack-internal.h"

/*
 * Window radii, in sections: the first one, then alternately the next
 * wider (twice the last wider) and narrower (half the last narrower) one,
 * down to the smallest, then only wider ones.
 */
#define PACK_WIN_FIRST_RADIUS 64
#define PACK_WIN_MIN_RADIUS 4

struct pack_win_key {
	uint64_t width; /* sections of the window it lives in */
	uint64_t size;
	uint32_t pos;
};

/* Widest first, then largest, then in group (input) order. */
static int pack_win_key_cmp(const void *pa, const void *pb)
{
	const struct pack_win_key *a = pa, *b = pb;

	if (a->width != b->width)
		return a->width > b->width ? -1 : 1;
	if (a->size != b->size)
		return a->size > b->size ? -1 : 1;
	return (a->pos > b->pos) - (a->pos < b->pos);
}

/* The first local section where the most bytes of @g are live. */
static int pack_win_focus(struct pack_ctx *ctx, const struct pack_group *g,
			  size_t *focus)
{
	uint64_t *load = calloc(g->nr_secs + 1, sizeof(*load)), c = 0, best = 0;
	size_t i, s;
	uint32_t k;

	if (!load)
		return -ENOMEM;
	pack_charge(ctx, g->nr + g->nr_secs);
	for (i = 0; i < g->nr; i++) {
		const struct pack_item *it = &ctx->items[g->items[i]];

		for (k = 0; k < it->nr_iv; k++) {
			size_t lo = ctx->loc[it->lo[k]];

			load[lo] += it->size;
			load[lo + it->hi[k] - it->lo[k]] -= it->size;
		}
	}
	*focus = 0;
	for (s = 0; s < g->nr_secs; s++) {
		c += load[s];
		if (c > best) {
			best = c;
			*focus = s;
		}
	}
	free(load);
	return 0;
}

/* Sections of local range [a, b) that @it lives in. */
static uint64_t pack_win_width(const struct pack_ctx *ctx,
			       const struct pack_item *it, size_t a, size_t b)
{
	uint64_t w = 0;
	uint32_t k;

	for (k = 0; k < it->nr_iv; k++) {
		size_t lo = ctx->loc[it->lo[k]];
		size_t hi = lo + it->hi[k] - it->lo[k];

		if (lo < a)
			lo = a;
		if (hi > b)
			hi = b;
		if (lo < hi)
			w += hi - lo;
	}
	return w;
}

/*
 * How far @it reaches on both sides of local section @focus: the fewer
 * sections it lives in before or from it, 0 when not live there.
 */
static uint64_t pack_win_reach(const struct pack_ctx *ctx,
			       const struct pack_item *it, size_t focus)
{
	uint64_t best = 0;
	uint32_t k;

	for (k = 0; k < it->nr_iv; k++) {
		size_t lo = ctx->loc[it->lo[k]];
		size_t hi = lo + it->hi[k] - it->lo[k];

		if (lo <= focus && focus < hi)
			best = focus + 1 - lo < hi - focus ? focus + 1 - lo :
							     hi - focus;
	}
	return best;
}

/*
 * One skyline pass ranked by the window [a, b), or with b == 0 by the
 * reach around section a.
 */
static int pack_win_pass(struct pack_ctx *ctx, struct pack_group *g,
			 struct pack_win_key *keys, uint32_t *order, size_t a,
			 size_t b)
{
	size_t i;

	pack_charge(ctx, 4 * g->nr);
	for (i = 0; i < g->nr; i++) {
		const struct pack_item *it = &ctx->items[g->items[i]];

		keys[i].width = b ? pack_win_width(ctx, it, a, b) :
				    pack_win_reach(ctx, it, a);
		keys[i].size = it->size;
		keys[i].pos = (uint32_t)i;
	}
	pack_charge(ctx, pack_sort_units(g->nr));
	qsort(keys, g->nr, sizeof(*keys), pack_win_key_cmp);
	for (i = 0; i < g->nr; i++)
		order[i] = keys[i].pos;
	return pack_skyline_ranked(ctx, g, order, "skyline-window");
}

/*
 * The next radius: alternately a wider one (@up, doubling; 0 once the
 * window covers the group) and a narrower one (@down, halving); 0 when
 * none is left.  @wide: the last one was the wider one.
 */
static size_t pack_win_next(size_t *up, size_t *down, bool *wide)
{
	bool narrower = (*wide || !*up) && *down >= PACK_WIN_MIN_RADIUS;
	size_t rad;

	if (narrower) {
		rad = *down;
		*down /= 2;
	} else if (*up) {
		rad = *up;
		*up *= 2;
	} else {
		return 0;
	}
	*wide = !narrower;
	return rad;
}

int pack_window_reach(struct pack_ctx *ctx, struct pack_group *g)
{
	struct pack_win_key *keys = malloc((g->nr + 1) * sizeof(*keys));
	uint32_t *order = malloc((g->nr + 1) * sizeof(*order));
	size_t focus;
	int err = -ENOMEM;

	if (keys && order)
		err = pack_win_focus(ctx, g, &focus);
	if (!err)
		err = pack_win_pass(ctx, g, keys, order, focus, 0);
	free(order);
	free(keys);
	return err;
}

int pack_window_group(struct pack_ctx *ctx, struct pack_group *g, uint64_t cap,
		      double until_ms, size_t from, size_t count)
{
	struct pack_win_key *keys = malloc((g->nr + 1) * sizeof(*keys));
	uint32_t *order = malloc((g->nr + 1) * sizeof(*order));
	size_t S = g->nr_secs, focus, rad, up, down, a, b, i, end;
	bool wide;
	int err = -ENOMEM;

	if (!keys || !order)
		goto out;
	err = pack_win_focus(ctx, g, &focus);
	up = PACK_WIN_FIRST_RADIUS;
	down = up / 2;
	wide = false;
	end = count > SIZE_MAX - from ? SIZE_MAX : from + count;
	for (i = 0;
	     !err && i < end && g->peak > cap && !pack_past(ctx, until_ms);
	     i++) {
		rad = pack_win_next(&up, &down, &wide);
		if (!rad)
			break;
		a = focus > rad ? focus - rad : 0;
		b = S - focus > rad + 1 ? focus + rad + 1 : S;
		if (a == 0 && b == S)
			up = 0;
		if (i >= from)
			err = pack_win_pass(ctx, g, keys, order, a, b);
	}
out:
	free(order);
	free(keys);
	return err;
}
