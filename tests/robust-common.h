/* SPDX-License-Identifier: MIT */
/*
 * tests/robust-common.h - trace replay and overlap checking for the
 * reliability tests (test-robust.c, test-torture.c)
 *
 * A trace is loaded with the public trace reader and turned into a flat
 * array of events whose allocations carry dense indices (0..nr_allocs-1),
 * so that a replay keeps its pointers in a plain array and a perturbation
 * can insert, delete or move events without renaming anything.  Every
 * block a replay gets is checked against an interval set of the blocks
 * live at that moment (sorted by address; an overlap is counted, never
 * trusted), stamped with a word at each end, and checked again before it
 * is freed.
 *
 * Nothing here is thread-safe: each thread keeps its own replay state.
 */
#ifndef STALLOC_TESTS_ROBUST_COMMON_H
#define STALLOC_TESTS_ROBUST_COMMON_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stalloc/stalloc.h>
#include <stalloc/trace.h>

#include "tests/vmm-fixture.h"

/* One event: op 'a' (alloc @idx of @size), 'f' (free @idx), 'm' (@label). */
struct rb_ev {
	char op;
	uint32_t idx;
	uint64_t size;
	const char *label; /* static strings: "iteration" or "mark" */
};

struct rb_trace {
	struct rb_ev *ev;
	size_t n;
	size_t nr_allocs; /* allocation indices are < nr_allocs */
};

static inline const char *rb_label(const char *l)
{
	if (l && !strcmp(l, "iteration"))
		return "iteration";
	if (l && !strcmp(l, "eval"))
		return "eval";
	return "mark";
}

struct rb_pair {
	uint64_t id;
	size_t i;
};

static inline int rb_pair_cmp(const void *a, const void *b)
{
	const struct rb_pair *x = a, *y = b;

	if (x->id != y->id)
		return x->id < y->id ? -1 : 1;
	return x->i < y->i ? -1 : x->i > y->i;
}

/*
 * Load @path.  Allocations are numbered in trace order; a free gets the
 * number of the allocation it frees (the trace reader guarantees that
 * every free follows a live allocation of its ID: sorting by (ID, index)
 * puts each free right after its allocation).
 */
static inline int rb_trace_load(const char *path, struct rb_trace *t)
{
	struct stalloc_trace_event e;
	struct stalloc_trace *st;
	struct rb_pair *pairs;
	size_t i, np = 0;
	uint32_t nr = 0;
	int err;

	memset(t, 0, sizeof(*t));
	err = stalloc_trace_load(path, &st);
	if (err)
		return err;
	t->n = stalloc_trace_count(st);
	t->ev = calloc(t->n + 1, sizeof(*t->ev));
	pairs = calloc(t->n + 1, sizeof(*pairs));
	if (!t->ev || !pairs) {
		err = -ENOMEM;
		goto out_free;
	}
	for (i = 0; i < t->n; i++) {
		stalloc_trace_get(st, i, &e);
		t->ev[i].op = e.op;
		t->ev[i].size = e.size;
		if (e.op == 'm') {
			t->ev[i].label = rb_label(e.label);
			continue;
		}
		if (e.op == 'a')
			t->ev[i].idx = nr++;
		pairs[np].id = e.id;
		pairs[np++].i = i;
	}
	qsort(pairs, np, sizeof(*pairs), rb_pair_cmp);
	for (i = 1; i < np; i++)
		if (t->ev[pairs[i].i].op == 'f')
			t->ev[pairs[i].i].idx = t->ev[pairs[i - 1].i].idx;
	t->nr_allocs = nr;
	free(pairs);
	stalloc_trace_free(st);
	return 0;

out_free:
	free(pairs);
	free(t->ev);
	t->ev = NULL;
	stalloc_trace_free(st);
	return err;
}

static inline void rb_trace_free(struct rb_trace *t)
{
	free(t->ev);
	t->ev = NULL;
	t->n = 0;
}

/* Index of the @k-th "iteration" marker, or @t->n. */
static inline size_t rb_iteration(const struct rb_trace *t, unsigned int k)
{
	size_t i;

	for (i = 0; i < t->n; i++)
		if (t->ev[i].op == 'm' &&
		    !strcmp(t->ev[i].label, "iteration") && !k--)
			return i;
	return t->n;
}

/* ------------------------------------------------------- interval set */

struct rb_ivl {
	uint64_t lo, hi; /* [lo, hi) */
};

/* Live blocks, sorted by address, pairwise disjoint. */
struct rb_iset {
	struct rb_ivl *v;
	size_t n, cap;
};

/* First interval whose end is above @lo (binary search). */
static inline size_t rb_iset_upper(const struct rb_iset *s, uint64_t lo)
{
	size_t a = 0, b = s->n;

	while (a < b) {
		size_t m = a + (b - a) / 2;

		if (s->v[m].hi <= lo)
			a = m + 1;
		else
			b = m;
	}
	return a;
}

/* Add [lo, lo + len): false (set unchanged) if it overlaps a live block. */
static inline bool rb_iset_add(struct rb_iset *s, uint64_t lo, uint64_t len)
{
	size_t k = rb_iset_upper(s, lo);

	if (k < s->n && s->v[k].lo < lo + len)
		return false;
	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 256;
		struct rb_ivl *v = realloc(s->v, cap * sizeof(*v));

		if (!v)
			abort(); /* a test host out of memory */
		s->v = v;
		s->cap = cap;
	}
	memmove(&s->v[k + 1], &s->v[k], (s->n - k) * sizeof(*s->v));
	s->v[k].lo = lo;
	s->v[k].hi = lo + len;
	s->n++;
	return true;
}

/* Remove the block starting at @lo: false if there is none. */
static inline bool rb_iset_del(struct rb_iset *s, uint64_t lo)
{
	size_t k = rb_iset_upper(s, lo);

	if (k == s->n || s->v[k].lo != lo)
		return false;
	memmove(&s->v[k], &s->v[k + 1], (s->n - k - 1) * sizeof(*s->v));
	s->n--;
	return true;
}

static inline void rb_iset_free(struct rb_iset *s)
{
	free(s->v);
	memset(s, 0, sizeof(*s));
}

/* ---------------------------------------------------------- stamping */

/* xorshift64*: deterministic, seeded by the caller (never 0). */
static inline uint64_t rb_rng_next(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545f4914f6cdd1dULL;
}

static inline uint64_t rb_seed(const void *p, uint64_t tag)
{
	return (uint64_t)(uintptr_t)p * 0x9e3779b97f4a7c15ULL ^ tag;
}

/*
 * A word at each end of the block (the end may be unaligned), written and
 * read through the fixture: the block is device memory on the cuda backend
 * (STALLOC_BACKEND).
 */
static inline void rb_stamp_on(int dev, void *p, size_t n, uint64_t seed)
{
	const char *be = fx_env_backend();
	uint64_t inv = ~seed;

	if (n < 16)
		return;
	fx_poke_on(be, dev, (uintptr_t)p, &seed, 8);
	fx_poke_on(be, dev, (uintptr_t)p + n - 8, &inv, 8);
}

static inline bool rb_stamp_ok_on(int dev, const void *p, size_t n,
				  uint64_t seed)
{
	const char *be = fx_env_backend();
	uint64_t a = 0, b = 0;

	if (n < 16)
		return true;
	if (fx_peek_on(be, dev, &a, (uintptr_t)p, 8) ||
	    fx_peek_on(be, dev, &b, (uintptr_t)p + n - 8, 8))
		return false;
	return a == seed && b == ~seed;
}

/* The same for a block of device 0. */
static inline void rb_stamp(void *p, size_t n, uint64_t seed)
{
	rb_stamp_on(0, p, n, seed);
}

static inline bool rb_stamp_ok(const void *p, size_t n, uint64_t seed)
{
	return rb_stamp_ok_on(0, p, n, seed);
}

/* ------------------------------------------------------------- replay */

/* What one replay saw; the caller zeroes it. */
struct rb_result {
	uint64_t allocs; /* requests made */
	uint64_t nulls; /* of which answered NULL */
	uint64_t overlaps; /* blocks that overlapped a live block */
	uint64_t corrupt; /* blocks whose stamps changed while live */
	uint64_t checks; /* blocks checked against the live set */
};

/*
 * Replay @t on @device, on the default stream: every request is made,
 * every block checked against the live set and stamped, every free made
 * with the size given at allocation, every marker passed on.  Blocks the
 * trace never frees are freed at the end.  Returns 0, or -ENOMEM.
 */
static inline int rb_replay(const struct rb_trace *t, int device,
			    struct rb_result *r)
{
	struct rb_iset live = { 0 };
	struct rb_blk {
		void *p;
		uint64_t n;
	} * b;
	size_t i;

	b = calloc(t->nr_allocs + 1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	for (i = 0; i < t->n; i++) {
		const struct rb_ev *e = &t->ev[i];
		struct rb_blk *k = &b[e->idx];
		void *p;

		switch (e->op) {
		case 'a':
			r->allocs++;
			p = stalloc_malloc(e->size, device, NULL);
			if (!p) {
				r->nulls++;
				break;
			}
			r->checks++;
			if (!rb_iset_add(&live, (uintptr_t)p, e->size)) {
				r->overlaps++;
				fprintf(stderr,
					"replay: event %zu: block %p+%llu "
					"overlaps a live block\n",
					i, p, (unsigned long long)e->size);
				break; /* left alone: it may hold another's */
			}
			rb_stamp_on(device, p, e->size, rb_seed(p, e->idx));
			k->p = p;
			k->n = e->size;
			break;
		case 'f':
			if (!k->p)
				break;
			if (!rb_stamp_ok_on(device, k->p, k->n,
					    rb_seed(k->p, e->idx)))
				r->corrupt++;
			rb_iset_del(&live, (uintptr_t)k->p);
			stalloc_free(k->p, k->n, device, NULL);
			k->p = NULL;
			break;
		default:
			stalloc_mark(e->label);
		}
	}
	for (i = 0; i < t->nr_allocs; i++) {
		if (!b[i].p)
			continue;
		if (!rb_stamp_ok_on(device, b[i].p, b[i].n, rb_seed(b[i].p, i)))
			r->corrupt++;
		stalloc_free(b[i].p, b[i].n, device, NULL);
	}
	rb_iset_free(&live);
	free(b);
	return 0;
}

#endif /* STALLOC_TESTS_ROBUST_COMMON_H */
