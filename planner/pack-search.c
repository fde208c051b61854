// SPDX-License-Identifier: MIT
/*
 * planner/pack-search.c - exact search: does a group fit under a capacity?
 *
 * A depth-first branch and bound in the manner of MiniMalloc (Moffitt,
 * ASPLOS 2024).  Items are placed in non-decreasing offset order, each at
 * its minimum offset (the top of the highest placed item overlapping it),
 * so a node only chooses which item comes next.  Pruning:
 *  - canonical order: the next item's (offset, rank) must exceed the last
 *    one's, so each packing is reached once;
 *  - dominance: an item whose offset is at or above the lowest top any
 *    unplaced item could reach would leave a gap that item fills better;
 *  - section inference: in every section, the floor (what is already
 *    taken below, raised to the lowest offset any unplaced item there can
 *    still get) plus the unplaced bytes must fit under the capacity;
 *  - hatless pruning: when the item just placed overlaps no unplaced item
 *    and its subtree fails, the candidates after it fail too (any
 *    completion through them holds it at the same offset), so the node
 *    fails.
 * Static orders (ranks: lifetime width, area and the largest unplaced
 * section total, in three priorities) are tried round robin with a node
 * limit that doubles each round, so one order stuck in a bad subtree
 * cannot starve the others.  Like MiniMalloc, every subproblem split off
 * by the dynamic decomposition is ranked afresh from the current section
 * totals (this alone turns the challenging instances G, I and K from
 * unsolved in a minute to solved in seconds).  A run that ends without
 * hitting its node limit is a proof.
 *
 * Invariants: every change to min offsets, floors and ranks is logged and
 * undone on the way back up, so after a run the state is the initial one
 * again.  This is what lets the bisection of pack.c search one group at
 * many capacities from one set-up (ctx->search): the section and
 * neighbour lists cost the sum of squared section sizes, about 67 nominal
 * ms for a 500-buffer 4-stage training step, which late in the bisection
 * is a whole attempt's share (it then explored 16 nodes).
 * The group's item offsets are written only when a packing is found.
 * Recursion depth is the group's item count (bounded by pack.c).
 * No locking: one ctx per thread.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lib/util.h"
#include "planner/pack-internal.h"

#define PACK_ABORT (-EAGAIN)
/* Building the neighbour lists costs the sum of squared section sizes. */
#define PACK_SEARCH_MAX_WORK (64ull << 20)

enum pack_key_kind { PACK_KEY_WIDTH, PACK_KEY_AREA, PACK_KEY_TOTAL };

struct pack_rank_key {
	uint64_t k[3];
	uint32_t id;
};

struct pack_undo {
	uint32_t idx;
	uint64_t old;
};

struct pack_undo_log {
	struct pack_undo *v;
	size_t n;
	size_t cap;
};

struct pack_u32s {
	uint32_t *v;
	size_t n;
	size_t cap;
};

struct pack_search {
	struct pack_ctx *ctx;
	struct pack_group *g;
	uint64_t cap;
	size_t m;
	size_t S;
	uint64_t *size;
	uint32_t (*lo)[2];
	uint32_t (*hi)[2];
	uint32_t *nr_iv;
	uint32_t *nb_start;
	uint32_t *nb;
	uint32_t *sec_start;
	uint32_t *sec_items;
	uint64_t *floor;
	uint64_t *total;
	uint64_t *min_off;
	uint64_t *off;
	uint32_t *rank;
	struct pack_rank_key *keys;
	size_t h;
	struct pack_u32s rank_save;
	uint64_t *sol;
	uint32_t *span_lo;
	uint32_t *span_hi;
	uint32_t *cuts;
	struct pack_u32s parts;
	struct pack_u32s cutpts;
	uint32_t *sec_stamp;
	uint32_t sec_gen;
	struct pack_u32s affected;
	struct pack_u32s cand;
	struct pack_undo_log off_log;
	struct pack_undo_log floor_log;
	uint64_t nodes;
	uint64_t node_limit;
	uint64_t work;
	uint64_t steps;
	bool dead;
	bool hatless;
};

/*
 * The search's elementary steps are cheaper than the skyline's: they are
 * charged at a quarter of a work unit each (see PACK_WORK_PER_MS).
 */
static void pack_s_charge(struct pack_search *s, uint64_t steps)
{
	s->steps += steps;
	if (s->steps >= 64) {
		pack_charge(s->ctx, s->steps >> 2);
		s->steps &= 3;
	}
}

static int pack_u32s_push(struct pack_u32s *a, uint32_t x)
{
	if (a->n == a->cap) {
		size_t cap = a->cap ? a->cap * 2 : 64;
		uint32_t *v = realloc(a->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		a->v = v;
		a->cap = cap;
	}
	a->v[a->n++] = x;
	return 0;
}

static int pack_log(struct pack_undo_log *l, uint32_t idx, uint64_t old)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 256;
		struct pack_undo *v = realloc(l->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n].idx = idx;
	l->v[l->n++].old = old;
	return 0;
}

static void pack_undo_to(struct pack_undo_log *l, uint64_t *arr, size_t mark)
{
	while (l->n > mark) {
		l->n--;
		arr[l->v[l->n].idx] = l->v[l->n].old;
	}
}

/* ---------------------------------------------------------- set up */

static int pack_search_alloc(struct pack_search *s)
{
	size_t m = s->m, S = s->S;

	s->size = calloc(m, sizeof(*s->size));
	s->lo = calloc(m, sizeof(*s->lo));
	s->hi = calloc(m, sizeof(*s->hi));
	s->nr_iv = calloc(m, sizeof(*s->nr_iv));
	s->nb_start = calloc(m + 1, sizeof(*s->nb_start));
	s->sec_start = calloc(S + 1, sizeof(*s->sec_start));
	s->floor = calloc(S, sizeof(*s->floor));
	s->total = calloc(S, sizeof(*s->total));
	s->min_off = calloc(m, sizeof(*s->min_off));
	s->off = calloc(m, sizeof(*s->off));
	s->rank = calloc(m, sizeof(*s->rank));
	s->keys = calloc(m + 1, sizeof(*s->keys));
	s->sol = calloc(m, sizeof(*s->sol));
	s->span_lo = calloc(m, sizeof(*s->span_lo));
	s->span_hi = calloc(m, sizeof(*s->span_hi));
	s->cuts = calloc(S + 1, sizeof(*s->cuts));
	s->sec_stamp = calloc(S, sizeof(*s->sec_stamp));
	if (!s->size || !s->lo || !s->hi || !s->nr_iv || !s->nb_start ||
	    !s->sec_start || !s->floor || !s->total || !s->min_off || !s->off ||
	    !s->rank || !s->keys || !s->sol || !s->span_lo || !s->span_hi ||
	    !s->cuts || !s->sec_stamp)
		return -ENOMEM;
	return 0;
}

static void pack_search_free(struct pack_search *s)
{
	free(s->size);
	free(s->lo);
	free(s->hi);
	free(s->nr_iv);
	free(s->nb_start);
	free(s->nb);
	free(s->sec_start);
	free(s->sec_items);
	free(s->floor);
	free(s->total);
	free(s->min_off);
	free(s->off);
	free(s->rank);
	free(s->keys);
	free(s->rank_save.v);
	free(s->sol);
	free(s->span_lo);
	free(s->span_hi);
	free(s->cuts);
	free(s->parts.v);
	free(s->cutpts.v);
	free(s->sec_stamp);
	free(s->affected.v);
	free(s->cand.v);
	free(s->off_log.v);
	free(s->floor_log.v);
}

/* Items per section (CSR), and the section totals. */
static int pack_search_sections(struct pack_search *s)
{
	size_t i, sec, nr = 0;
	uint32_t k, *fill;

	for (i = 0; i < s->m; i++)
		for (k = 0; k < s->nr_iv[i]; k++)
			for (sec = s->lo[i][k]; sec < s->hi[i][k]; sec++) {
				s->sec_start[sec + 1]++;
				s->total[sec] += s->size[i];
				nr++;
			}
	for (sec = 0; sec < s->S; sec++) {
		uint64_t c = s->sec_start[sec + 1];

		s->work += c * c;
		s->sec_start[sec + 1] += s->sec_start[sec];
	}
	pack_charge(s->ctx, nr);
	if (s->work > PACK_SEARCH_MAX_WORK)
		return -E2BIG;
	/* These lists and the neighbour lists: full units, not search steps. */
	pack_charge(s->ctx, 2 * s->work + 4 * nr);
	s->sec_items = malloc((nr + 1) * sizeof(*s->sec_items));
	fill = calloc(s->S + 1, sizeof(*fill));
	if (!s->sec_items || !fill) {
		free(fill);
		return -ENOMEM;
	}
	for (i = 0; i < s->m; i++)
		for (k = 0; k < s->nr_iv[i]; k++)
			for (sec = s->lo[i][k]; sec < s->hi[i][k]; sec++)
				s->sec_items[s->sec_start[sec] + fill[sec]++] =
					(uint32_t)i;
	free(fill);
	return 0;
}

/*
 * Neighbour lists from the section lists: items sharing a section
 * overlap.  An item is listed once per neighbour thanks to a stamp.
 */
static int pack_search_neighbours(struct pack_search *s)
{
	struct pack_u32s all = { 0 };
	uint32_t *stamp = calloc(s->m, sizeof(*stamp));
	size_t i, sec, j;
	uint32_t k;
	int err = 0;

	if (!stamp)
		return -ENOMEM;
	for (i = 0; i < s->m && !err; i++) {
		s->nb_start[i] = (uint32_t)all.n;
		stamp[i] = (uint32_t)i + 1;
		for (k = 0; k < s->nr_iv[i]; k++)
			for (sec = s->lo[i][k]; sec < s->hi[i][k]; sec++)
				for (j = s->sec_start[sec];
				     j < s->sec_start[sec + 1] && !err; j++) {
					uint32_t o = s->sec_items[j];

					if (stamp[o] == i + 1)
						continue;
					stamp[o] = (uint32_t)i + 1;
					err = pack_u32s_push(&all, o);
				}
	}
	s->nb_start[s->m] = (uint32_t)all.n;
	s->nb = all.v;
	free(stamp);
	return err;
}

/*
 * Each item's span (first to last section, a wrap-around item spanning
 * both ends) and, per boundary between sections b and b + 1, how many
 * items cross it: a boundary no unplaced item crosses splits the search.
 */
static void pack_search_cuts(struct pack_search *s)
{
	size_t i, b;
	uint32_t k;

	for (i = 0; i < s->m; i++) {
		s->span_lo[i] = s->lo[i][0];
		s->span_hi[i] = s->hi[i][0];
		for (k = 1; k < s->nr_iv[i]; k++) {
			if (s->lo[i][k] < s->span_lo[i])
				s->span_lo[i] = s->lo[i][k];
			if (s->hi[i][k] > s->span_hi[i])
				s->span_hi[i] = s->hi[i][k];
		}
		for (b = s->span_lo[i]; b + 1 < s->span_hi[i]; b++)
			s->cuts[b]++;
	}
}

static int pack_search_init(struct pack_search *s)
{
	const struct pack_ctx *ctx = s->ctx;
	size_t i;
	uint32_t k;
	int err;

	err = pack_search_alloc(s);
	if (err)
		return err;
	for (i = 0; i < s->m; i++) {
		const struct pack_item *it = &ctx->items[s->g->items[i]];

		s->size[i] = it->size;
		s->nr_iv[i] = it->nr_iv;
		for (k = 0; k < it->nr_iv; k++) {
			s->lo[i][k] = ctx->loc[it->lo[k]];
			s->hi[i][k] = s->lo[i][k] + it->hi[k] - it->lo[k];
		}
	}
	err = pack_search_sections(s);
	if (!err)
		err = pack_search_neighbours(s);
	if (!err)
		pack_search_cuts(s);
	return err;
}

/* ---------------------------------------------------------- orders */

static const enum pack_key_kind pack_heuristics[][3] = {
	{ PACK_KEY_WIDTH, PACK_KEY_AREA, PACK_KEY_TOTAL },
	{ PACK_KEY_TOTAL, PACK_KEY_AREA, PACK_KEY_WIDTH },
	{ PACK_KEY_TOTAL, PACK_KEY_WIDTH, PACK_KEY_AREA },
};

static int pack_rank_cmp(const void *pa, const void *pb)
{
	const struct pack_rank_key *a = pa, *b = pb;
	int i;

	for (i = 0; i < 3; i++)
		if (a->k[i] != b->k[i])
			return a->k[i] > b->k[i] ? -1 : 1;
	return (a->id > b->id) - (a->id < b->id);
}

static uint64_t pack_key_of(const struct pack_search *s, size_t i,
			    enum pack_key_kind kind)
{
	const struct pack_item *it = &s->ctx->items[s->g->items[i]];
	uint64_t v = 0;
	size_t sec;
	uint32_t k;

	if (kind == PACK_KEY_AREA)
		return __builtin_mul_overflow(it->size, it->len, &v) ?
			       UINT64_MAX :
			       v;
	if (kind == PACK_KEY_WIDTH)
		return it->len;
	for (k = 0; k < s->nr_iv[i]; k++) {
		for (sec = s->lo[i][k]; sec < s->hi[i][k]; sec++)
			if (s->total[sec] > v)
				v = s->total[sec];
	}
	return v;
}

/*
 * Rank @n items (@items, or all when NULL) by heuristic s->h, as
 * MiniMalloc does for every (sub)problem: the section totals are the
 * current unplaced ones.
 */
static void pack_search_rank(struct pack_search *s, const uint32_t *items,
			     size_t n)
{
	struct pack_rank_key *keys = s->keys;
	size_t i;
	int j;

	pack_s_charge(s, 16 * n);
	for (i = 0; i < n; i++) {
		uint32_t u = items ? items[i] : (uint32_t)i;

		for (j = 0; j < 3; j++)
			keys[i].k[j] =
				pack_key_of(s, u, pack_heuristics[s->h][j]);
		keys[i].id = u;
	}
	pack_s_charge(s, 4 * pack_sort_units(n));
	qsort(keys, n, sizeof(*keys), pack_rank_cmp);
	for (i = 0; i < n; i++)
		s->rank[keys[i].id] = (uint32_t)i;
}

/* ---------------------------------------------------------- search */

static void pack_unplace(struct pack_search *s, uint32_t c, size_t off_mark,
			 size_t floor_mark)
{
	uint32_t k;
	size_t sec;

	pack_undo_to(&s->floor_log, s->floor, floor_mark);
	pack_undo_to(&s->off_log, s->min_off, off_mark);
	for (k = 0; k < s->nr_iv[c]; k++)
		for (sec = s->lo[c][k]; sec < s->hi[c][k]; sec++)
			s->total[sec] += s->size[c];
	s->off[c] = UINT64_MAX;
}

static int pack_mark_sections(struct pack_search *s, uint32_t v)
{
	uint32_t k;
	size_t sec;
	int err = 0;

	for (k = 0; k < s->nr_iv[v]; k++)
		for (sec = s->lo[v][k]; sec < s->hi[v][k] && !err; sec++) {
			if (s->sec_stamp[sec] == s->sec_gen)
				continue;
			s->sec_stamp[sec] = s->sec_gen;
			err = pack_u32s_push(&s->affected, (uint32_t)sec);
		}
	return err;
}

/* Raise neighbours' min offsets above @c's top. */
static int pack_raise_neighbours(struct pack_search *s, uint32_t c,
				 uint64_t top)
{
	uint32_t j;
	int err = 0;

	s->affected.n = 0;
	pack_s_charge(s, s->nb_start[c + 1] - s->nb_start[c]);
	if (++s->sec_gen == 0) {
		memset(s->sec_stamp, 0, s->S * sizeof(*s->sec_stamp));
		s->sec_gen = 1;
	}
	for (j = s->nb_start[c]; j < s->nb_start[c + 1] && !err; j++) {
		uint32_t v = s->nb[j];

		if (s->off[v] != UINT64_MAX)
			continue;
		s->hatless = false;
		if (s->min_off[v] >= top)
			continue;
		err = pack_log(&s->off_log, v, s->min_off[v]);
		s->min_off[v] = top;
		if (top + s->size[v] > s->cap)
			s->dead = true;
		if (!err)
			err = pack_mark_sections(s, v);
	}
	return err;
}

/*
 * A section's floor is at least the lowest offset left to its items.  The
 * items raised all went to @top, so a section whose floor is already
 * there cannot rise, and the scan of a section stops at the first
 * unplaced item at or below its floor (the floor then stays).
 */
static int pack_raise_floors(struct pack_search *s, uint64_t top)
{
	size_t i, j;
	int err = 0;

	for (i = 0; i < s->affected.n && !err; i++) {
		uint32_t sec = s->affected.v[i];
		uint64_t lo = UINT64_MAX, fl = s->floor[sec];

		if (fl >= top) {
			pack_s_charge(s, 1);
			continue;
		}
		for (j = s->sec_start[sec]; j < s->sec_start[sec + 1]; j++) {
			uint32_t v = s->sec_items[j];

			if (s->off[v] != UINT64_MAX)
				continue;
			if (s->min_off[v] <= fl) {
				lo = UINT64_MAX;
				break;
			}
			if (s->min_off[v] < lo)
				lo = s->min_off[v];
		}
		pack_s_charge(s, 1 + j - s->sec_start[sec]);
		if (lo != UINT64_MAX && fl < lo) {
			err = pack_log(&s->floor_log, sec, s->floor[sec]);
			s->floor[sec] = lo;
		}
	}
	return err;
}

static int pack_place(struct pack_search *s, uint32_t c)
{
	uint64_t top = s->min_off[c] + s->size[c];
	uint32_t k;
	size_t sec;
	int err = 0;

	s->off[c] = s->min_off[c];
	pack_s_charge(s, 4);
	for (k = 0; k < s->nr_iv[c]; k++)
		for (sec = s->lo[c][k]; sec < s->hi[c][k] && !err; sec++) {
			pack_s_charge(s, 2);
			err = pack_log(&s->floor_log, (uint32_t)sec,
				       s->floor[sec]);
			s->floor[sec] = top;
			s->total[sec] -= s->size[c];
		}
	if (!err)
		err = pack_raise_neighbours(s, c, top);
	if (!err)
		err = pack_raise_floors(s, top);
	return err;
}

/*
 * A subproblem: the unplaced items overlapping sections [slo, shi), which
 * no unplaced item outside it touches, listed in s->parts.v[at, at + n).
 */
struct pack_part {
	size_t at;
	size_t n;
	uint32_t slo;
	uint32_t shi;
};

static bool pack_fits(struct pack_search *s, const struct pack_part *pt,
		      uint64_t off)
{
	size_t sec;

	pack_s_charge(s, pt->shi - pt->slo);
	for (sec = pt->slo; sec < pt->shi; sec++) {
		uint64_t f = s->floor[sec] > off ? s->floor[sec] : off;

		if (f + s->total[sec] > s->cap)
			return false;
	}
	return true;
}

static void pack_record(struct pack_search *s)
{
	struct pack_group *g = s->g;
	size_t i;

	g->peak = 0;
	for (i = 0; i < s->m; i++) {
		s->ctx->items[g->items[i]].off = s->sol[i];
		if (s->sol[i] + s->size[i] > g->peak)
			g->peak = s->sol[i] + s->size[i];
	}
	g->method = "search";
}

/* Offset order, then rank: the order MiniMalloc's dynamic ordering uses. */
static void pack_sort_cands(struct pack_search *s, size_t base)
{
	uint32_t *c = s->cand.v;
	size_t i, j;

	for (i = base + 1; i < s->cand.n; i++) {
		uint32_t x = c[i];

		for (j = i; j > base; j--) {
			uint32_t y = c[j - 1];

			if (s->min_off[y] < s->min_off[x] ||
			    (s->min_off[y] == s->min_off[x] &&
			     s->rank[y] < s->rank[x]))
				break;
			c[j] = y;
		}
		c[j] = x;
	}
}

/* Candidates of @pt; *left gets how many of its items are unplaced. */
static int pack_candidates(struct pack_search *s, const struct pack_part *pt,
			   uint64_t last_off, uint32_t last_rank, size_t *left)
{
	const uint32_t *items = s->parts.v + pt->at;
	uint64_t min_top = UINT64_MAX;
	size_t i;
	int err = 0;

	*left = 0;
	pack_s_charge(s, 2 * pt->n);
	for (i = 0; i < pt->n; i++) {
		uint32_t u = items[i];

		if (s->off[u] != UINT64_MAX)
			continue;
		(*left)++;
		if (s->min_off[u] + s->size[u] < min_top)
			min_top = s->min_off[u] + s->size[u];
	}
	for (i = 0; i < pt->n && !err; i++) {
		uint32_t u = items[i];
		uint64_t o = s->min_off[u];

		if (s->off[u] != UINT64_MAX || o >= min_top || o < last_off ||
		    (o == last_off && s->rank[u] < last_rank))
			continue;
		err = pack_u32s_push(&s->cand, u);
	}
	return err;
}

static int pack_node(struct pack_search *s, const struct pack_part *pt,
		     uint64_t last_off, uint32_t last_rank);

/*
 * After placing @c: the boundaries inside @pt that no unplaced item
 * crosses any more cut it into subproblems solved one after the other.
 */
/* The unplaced items of @pt overlapping @sub's sections go to @sub. */
static int pack_sub_items(struct pack_search *s, const struct pack_part *pt,
			  struct pack_part *sub)
{
	size_t j;
	int err = 0;

	for (j = 0; j < pt->n && !err; j++) {
		uint32_t u = s->parts.v[pt->at + j];

		if (s->off[u] != UINT64_MAX || s->span_hi[u] <= sub->slo ||
		    s->span_lo[u] >= sub->shi)
			continue;
		err = pack_u32s_push(&s->parts, u);
		sub->n++;
	}
	return err;
}

/* Solve @sub afresh, ranked by its own totals; the ranks are restored. */
static int pack_sub_node(struct pack_search *s, const struct pack_part *sub)
{
	size_t mark = s->rank_save.n, i;
	int ret = 0;

	/* s->parts.v may move while @sub is searched: index it afresh. */
	for (i = 0; i < sub->n && !ret; i++)
		ret = pack_u32s_push(&s->rank_save,
				     s->rank[s->parts.v[sub->at + i]]);
	if (!ret) {
		pack_search_rank(s, s->parts.v + sub->at, sub->n);
		ret = pack_node(s, sub, 0, 0);
	}
	for (i = mark; i < s->rank_save.n; i++)
		s->rank[s->parts.v[sub->at + i - mark]] = s->rank_save.v[i];
	s->rank_save.n = mark;
	return ret;
}

static int pack_split(struct pack_search *s, const struct pack_part *pt,
		      uint32_t c)
{
	size_t cmark = s->cutpts.n, pmark = s->parts.n, i;
	uint32_t b, lo = pt->slo;
	int ret = 0;

	for (b = s->span_lo[c]; b + 1 < s->span_hi[c]; b++)
		if (!--s->cuts[b] && b + 1 > pt->slo && b + 1 < pt->shi && !ret)
			ret = pack_u32s_push(&s->cutpts, b + 1);
	if (ret)
		goto out;
	if (s->cutpts.n == cmark) {
		ret = pack_node(s, pt, s->off[c], s->rank[c] + 1);
		goto out;
	}
	ret = pack_u32s_push(&s->cutpts, pt->shi);
	if (ret)
		goto out;
	/* Each subproblem must succeed (1) for the next one to be tried. */
	ret = 1;
	for (i = cmark; i < s->cutpts.n && ret == 1; i++) {
		struct pack_part sub = { s->parts.n, 0, lo, s->cutpts.v[i] };

		lo = sub.shi;
		ret = pack_sub_items(s, pt, &sub);
		if (!ret)
			ret = sub.n ? pack_sub_node(s, &sub) : 1;
		s->parts.n = pmark;
	}
out:
	s->cutpts.n = cmark;
	for (b = s->span_lo[c]; b + 1 < s->span_hi[c]; b++)
		s->cuts[b]++;
	return ret;
}

static int pack_node(struct pack_search *s, const struct pack_part *pt,
		     uint64_t last_off, uint32_t last_rank)
{
	size_t base = s->cand.n, i, left;
	int ret = 0;

	if ((++s->nodes & 15) == 0 && pack_out_of_time(s->ctx))
		return -ETIME;
	if (s->nodes > s->node_limit)
		return PACK_ABORT;
	ret = pack_candidates(s, pt, last_off, last_rank, &left);
	if (ret || !left) {
		s->cand.n = base;
		return ret ? ret : 1;
	}
	pack_sort_cands(s, base);
	for (i = base; i < s->cand.n && !ret; i++) {
		uint32_t c = s->cand.v[i];
		size_t off_mark = s->off_log.n, floor_mark = s->floor_log.n;

		s->dead = false;
		s->hatless = true;
		ret = pack_place(s, c);
		if (!ret && !s->dead && pack_fits(s, pt, s->off[c]))
			ret = pack_split(s, pt, c);
		if (ret == 1)
			s->sol[c] = s->off[c];
		pack_unplace(s, c, off_mark, floor_mark);
		/*
		 * Hatless: nothing unplaced overlaps @c, so no other order of
		 * the candidates left can do better (MiniMalloc's rule).
		 */
		if (!ret && s->hatless)
			break;
	}
	s->cand.n = base;
	return ret;
}

static int pack_search_run(struct pack_search *s)
{
	struct pack_part all = { 0, s->m, 0, (uint32_t)s->S };
	uint64_t limit = s->m;
	size_t h, i;
	int ret;

	s->parts.n = 0;
	for (i = 0; i < s->m; i++) {
		s->off[i] = UINT64_MAX;
		ret = pack_u32s_push(&s->parts, (uint32_t)i);
		if (ret)
			return ret;
	}
	if (!pack_fits(s, &all, 0))
		return 0;
	for (;;) {
		limit *= 2;
		for (h = 0; h < ARRAY_SIZE(pack_heuristics); h++) {
			s->h = h;
			pack_search_rank(s, NULL, s->m);
			s->ctx->nodes += s->nodes;
			s->nodes = 0;
			s->node_limit = limit;
			ret = pack_node(s, &all, 0, 0);
			if (ret == 1)
				pack_record(s);
			if (ret != PACK_ABORT)
				return ret;
		}
	}
}

void pack_search_release(struct pack_ctx *ctx)
{
	if (ctx->search) {
		pack_search_free(ctx->search);
		free(ctx->search);
	}
	ctx->search = NULL;
}

/* ctx->search, built for @g unless it already is; 0 or -errno. */
static int pack_search_get(struct pack_ctx *ctx, struct pack_group *g)
{
	struct pack_search *s = ctx->search;
	int err;

	if (s && s->g == g)
		return 0;
	pack_search_release(ctx);
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->ctx = ctx;
	s->g = g;
	s->m = g->nr;
	s->S = g->nr_secs;
	err = pack_search_init(s);
	if (err) {
		pack_search_free(s);
		free(s);
		return err;
	}
	ctx->search = s;
	return 0;
}

int pack_search(struct pack_ctx *ctx, struct pack_group *g, uint64_t cap)
{
	struct pack_search *s;
	int ret;

	ret = pack_search_get(ctx, g);
	if (ret)
		return ret;
	s = ctx->search;
	s->cap = cap;
	s->nodes = 0;
	ret = pack_search_run(s);
	ctx->nodes += s->nodes;
	s->nodes = 0;
	return ret;
}
