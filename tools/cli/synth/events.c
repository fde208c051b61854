// SPDX-License-Identifier: MIT
/*
 * tools/cli/synth/events.c - stalloc-synth's event writer, PRNG and stacks
 *
 * Writes trace lines (format v1) into one buffer flushed in 1 MiB writes;
 * a failed write sets gen->oom and the rest is dropped.  Every ID is
 * allocated once (IDs never repeat) and SEQ increases by one per line.
 * The PRNG is counter-based (splitmix64 of a key): a draw is a function of
 * its key alone, so recomputation redraws alike and the same arguments
 * give a byte-identical trace.  The stacks hold what each forward pass
 * saved, popped in reverse by the backward pass (tools/cli/synth/model.c).
 * Single-threaded; no locking.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "synth.h"

/* ------------------------------------------------------------ output */

void flush_buf(struct gen *g)
{
	if (g->len && fwrite(g->buf, 1, g->len, g->f) != g->len)
		g->oom = true; /* reported as a write error at the end */
	g->len = 0;
}

void put_str(struct gen *g, const char *s)
{
	size_t n = strlen(s);

	if (g->len + n > BUF_SIZE)
		flush_buf(g);
	memcpy(g->buf + g->len, s, n);
	g->len += n;
}

static void put_u64(struct gen *g, uint64_t v)
{
	char t[24];
	int i = 0;

	do {
		t[i++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	while (i)
		g->buf[g->len++] = t[--i];
}

/* Every event line is at most ~120 bytes: make room once per line. */
static void line_begin(struct gen *g, char op)
{
	if (g->len + 160 > BUF_SIZE)
		flush_buf(g);
	g->buf[g->len++] = op;
	g->buf[g->len++] = ' ';
	put_u64(g, g->seq++);
	g->buf[g->len++] = ' ';
	g->events++;
}

uint64_t ev_alloc(struct gen *g, uint64_t size)
{
	uint64_t id = g->next_id++;

	line_begin(g, 'a');
	put_u64(g, id);
	g->buf[g->len++] = ' ';
	put_u64(g, size);
	put_str(g, " stream=0x0 dev=");
	put_u64(g, g->c->dev);
	put_str(g, " ns=");
	put_u64(g, g->ns);
	g->buf[g->len++] = '\n';
	/* a pretend clock: bigger tensors take longer to produce */
	g->ns += 400 + size / 4096;
	return id;
}

void ev_free(struct gen *g, uint64_t id)
{
	line_begin(g, 'f');
	put_u64(g, id);
	g->buf[g->len++] = '\n';
	g->ns += 100;
}

void ev_mark(struct gen *g, const char *label)
{
	line_begin(g, 'm');
	put_str(g, label);
	put_str(g, "\n");
}

/* ------------------------------------------------------------ PRNG */

/* splitmix64: a counter-based generator, so recomputation redraws alike. */
static uint64_t mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static double uniform(uint64_t *state)
{
	*state = mix64(*state);
	return (double)(*state >> 11) * (1.0 / 9007199254740992.0);
}

/* Irwin-Hall: the sum of 12 uniforms less 6 is close to N(0, 1). */
static double normal(uint64_t *state)
{
	double z = -6;
	int i;

	for (i = 0; i < 12; i++)
		z += uniform(state);
	return z;
}

/* e^x by scaling down, a Taylor polynomial and squaring back: no libm. */
static double exp_approx(double x)
{
	double y = x / 1024, r;
	int i;

	r = 1 + y * (1 + y / 2 * (1 + y / 3 * (1 + y / 4 * (1 + y / 5))));
	for (i = 0; i < 10; i++)
		r *= r;
	return r;
}

/*
 * Tokens routed to each expert of one MoE layer for one micro-batch of one
 * iteration: tokens x top-k assignments spread by log-normal weights, no
 * expert getting more than every token.  A function of its key alone.
 */
void route(struct gen *g, uint64_t layer, uint64_t mb)
{
	const struct cfg *c = g->c;
	uint64_t total = g->s.tokens * c->topk, sum = 0, e, k, cap;
	uint64_t st =
		mix64(c->seed ^ mix64(g->iter ^ mix64(mb ^ mix64(layer))));
	double w[1024], wsum = 0;

	if (!c->experts || c->experts > 1024)
		return;
	cap = g->s.tokens;
	for (e = 0; e < c->experts; e++) {
		w[e] = exp_approx(c->imbalance * normal(&st));
		wsum += w[e];
	}
	for (e = 0; e < c->experts; e++) {
		uint64_t n = (uint64_t)((double)total * w[e] / wsum);

		g->counts[e] = (uint32_t)(n > cap ? cap : n);
		sum += g->counts[e];
	}
	/* hand out what rounding and the cap left, from a random expert */
	k = mix64(st) % c->experts;
	while (sum < total) {
		uint64_t add = (total - sum) / c->experts;

		if (!add)
			add = 1;
		if (add > cap - g->counts[k])
			add = cap - g->counts[k];
		g->counts[k] += (uint32_t)add;
		sum += add;
		k = (k + 1) % c->experts;
	}
}

/* ------------------------------------------------------------ stacks */

void push(struct gen *g, struct stack *st, uint32_t kind, uint64_t id,
	  uint64_t gsize, uint32_t unit)
{
	if (st->n == st->cap) {
		size_t cap = st->cap ? 2 * st->cap : 64;
		struct ent *v = realloc(st->v, cap * sizeof(*v));

		if (!v) {
			g->oom = true;
			return;
		}
		st->v = v;
		st->cap = cap;
	}
	st->v[st->n++] = (struct ent){
		.id = id, .gsize = gsize, .kind = kind, .unit = unit
	};
}

/*
 * A tensor the backward pass needs.  @st NULL: the layer runs under
 * checkpointing (full recomputation's forward), so it is only held until
 * drop_all().
 */
void keep(struct gen *g, struct stack *st, uint64_t size, uint64_t gsize)
{
	uint64_t id;

	if (!size)
		return;
	id = ev_alloc(g, size);
	if (st)
		push(g, st, E_TENSOR, id, gsize, 0);
	else
		g->drop[g->ndrop++] = id;
}

void drop_all(struct gen *g)
{
	size_t i;

	for (i = 0; i < g->ndrop; i++)
		ev_free(g, g->drop[i]);
	g->ndrop = 0;
}
