// SPDX-License-Identifier: MIT
/*
 * tools/stalloc-synth.c - write a Megatron-like training trace (format v1)
 *
 * Models what one pipeline rank of a GPT-style model allocates: weights at
 * start-up, then per iteration the forward activations of every layer of
 * every micro-batch in the order of a 1F1B or interleaved pipeline schedule,
 * freed in reverse in the backward pass (with full or selective activation
 * recomputation), gradient buckets made in the backward pass and freed by
 * the next zero_grad (or after the step), Adam state made by the first
 * optimizer step, and MoE layers whose per-expert token buffers change size
 * with a seeded routing imbalance.  Documentation/workloads.rst says what is
 * modelled and what is not.
 *
 * Invariants: the output is a function of the arguments alone (its own
 * counter-based PRNG, no clock, no rand()), so the same arguments give a
 * byte-identical trace; every ID is allocated once (IDs never repeat), every
 * free names a live ID, SEQ increases by one per line.  Each in-flight
 * (model chunk, micro-batch) pair owns a stack of what its forward pass
 * saved; the backward pass pops it, so frees come in reverse order, and a
 * recomputation marker popped from it pushes the recomputed tensors back.
 * Single-threaded; no locking.  From libstalloc it uses only
 * stalloc_parse_size().
 *
 * Exit status: 0 written, 1 write error, 2 bad usage.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stalloc/stalloc.h>

static const char usage[] =
	"usage: stalloc-synth [OPTIONS] [-o FILE]\n"
	"\n"
	"Write the allocation trace (format v1) of one pipeline rank of a\n"
	"Megatron-like GPT training job.  Same options, same bytes.\n"
	"\n"
	"model:\n"
	"  --layers N             transformer layers in the model (8)\n"
	"  --hidden N             hidden size (1024)\n"
	"  --heads N              attention heads (16)\n"
	"  --ffn N                MLP hidden size (4 x hidden)\n"
	"  --seq N                sequence length (1024)\n"
	"  --vocab N              vocabulary size (32000)\n"
	"  --micro-batch-size N   sequences per micro-batch (1)\n"
	"  --micro-batches N      micro-batches per iteration (8)\n"
	"  --flash-attn           no attention score matrices\n"
	"parallelism:\n"
	"  --tp N                 tensor-parallel degree (1)\n"
	"  --sequence-parallel    split replicated activations by tp too\n"
	"  --stages N             pipeline stages (4)\n"
	"  --rank N               the pipeline rank traced (0, the first)\n"
	"  --schedule S           1f1b or interleaved (1f1b)\n"
	"  --virtual-stages N     model chunks per rank, interleaved (2)\n"
	"memory options:\n"
	"  --recompute R          none, selective or full (none)\n"
	"  --bucket-size BYTES    gradient bucket size (32M)\n"
	"  --grad-free W          next (zero_grad at the next iteration's\n"
	"                         start) or step (after the step) (next)\n"
	"mixture of experts:\n"
	"  --experts N            experts per MoE layer, 0 = dense (0)\n"
	"  --top-k N              experts per token (2)\n"
	"  --moe-ffn N            expert MLP hidden size (--ffn)\n"
	"  --moe-every N          every Nth layer is MoE (1)\n"
	"  --imbalance X          spread of the routing imbalance, 0-8 (0.5)\n"
	"run:\n"
	"  --iterations N         training iterations (4)\n"
	"  --seed N               seed of the routing imbalance (1)\n"
	"  --device N             dev= of every event (0)\n"
	"  -o, --output FILE      write there instead of stdout\n"
	"  -h, --help             this text\n"
	"\n"
	"Sizes accept K, M, G suffixes (binary).  Exit status: 0 written,\n"
	"1 write error, 2 bad usage.\n";

enum recompute { RC_NONE, RC_SELECTIVE, RC_FULL };

struct cfg {
	uint64_t layers, hidden, heads, ffn, seq, vocab, mbs, mbatches;
	uint64_t tp, stages, rank, vstages;
	uint64_t bucket, experts, topk, moe_ffn, moe_every;
	uint64_t iters, seed, dev;
	double imbalance;
	enum recompute recompute;
	bool interleaved, flash, seqpar, grad_at_step;
	const char *output;
};

/* Bytes of every tensor kind, computed once with overflow checks. */
struct sizes {
	uint64_t tokens; /* tokens per tp rank for replicated tensors */
	uint64_t ids, ln_stats, ln_out, qkv, scores, attn_mask, lse, ctx;
	uint64_t hid, dmask, fc, logits, logits32, router, topk_idx, topk_w;
	uint64_t perm;
};

/* Stack entry kinds: what the backward pass does when it pops one. */
enum ent_kind {
	E_TENSOR, /* free it (after making its gradient when gsize) */
	E_FRAME, /* a unit's backward ends: its weight gradients exist */
	E_FRAME_FULL, /* the same, after recomputing the layer first */
	E_ATTN, /* selective recomputation of the attention core */
};

struct ent {
	uint64_t id, gsize;
	uint32_t kind, unit;
};

struct stack {
	struct ent *v;
	size_t n, cap;
};

struct bucket {
	uint64_t bytes, id, adam[3];
	uint32_t start_unit;
	bool live;
};

/* One model chunk of this rank (one for 1F1B, vstages interleaved). */
struct chunk {
	uint64_t gstage; /* global virtual stage */
	bool first, last; /* holds the embedding / the output head */
	uint32_t nunits; /* head, layers backwards, embedding */
	struct bucket *buckets;
	int32_t *bucket_at; /* unit -> bucket starting there, or -1 */
	uint32_t nbuckets;
};

struct gen {
	const struct cfg *c;
	struct sizes s;
	FILE *f;
	char *buf;
	size_t len;
	uint64_t seq, next_id, ns, iter, events;
	struct chunk *chunks;
	struct bucket *all_buckets; /* the chunks' buckets and bucket_at */
	int32_t *all_bucket_at;
	struct stack *stacks; /* [chunk * mbatches + mb] */
	uint64_t *drop, *tmp_ids, *losses;
	size_t ndrop, nlosses;
	uint32_t *counts; /* tokens per expert of the layer at hand */
	bool oom;
};

#define BUF_SIZE (1u << 20)

/* ------------------------------------------------------------ output */

static void flush_buf(struct gen *g)
{
	if (g->len && fwrite(g->buf, 1, g->len, g->f) != g->len)
		g->oom = true; /* reported as a write error at the end */
	g->len = 0;
}

static void put_str(struct gen *g, const char *s)
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

static uint64_t ev_alloc(struct gen *g, uint64_t size)
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

static void ev_free(struct gen *g, uint64_t id)
{
	line_begin(g, 'f');
	put_u64(g, id);
	g->buf[g->len++] = '\n';
	g->ns += 100;
}

static void ev_mark(struct gen *g, const char *label)
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
static void route(struct gen *g, uint64_t layer, uint64_t mb)
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

static void push(struct gen *g, struct stack *st, uint32_t kind, uint64_t id,
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
static void keep(struct gen *g, struct stack *st, uint64_t size, uint64_t gsize)
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

static void drop_all(struct gen *g)
{
	size_t i;

	for (i = 0; i < g->ndrop; i++)
		ev_free(g, g->drop[i]);
	g->ndrop = 0;
}

/* ------------------------------------------------------------ model */

static bool is_moe(const struct cfg *c, uint64_t global_layer)
{
	return c->experts && global_layer % c->moe_every == 0;
}

static uint64_t layers_per_chunk(const struct cfg *c)
{
	return c->layers / (c->stages * c->vstages);
}

/*
 * Units of a chunk, in backward order: the output head (last stage), its
 * layers from the last to the first, the embedding (first stage).  Each is
 * one frame on the stacks and one group of weights.
 */
static uint64_t unit_layer(const struct gen *g, const struct chunk *ch,
			   uint32_t unit, int *what)
{
	uint64_t lpc = layers_per_chunk(g->c);

	if (ch->last) {
		if (!unit) {
			*what = 'h';
			return 0;
		}
		unit--;
	}
	if (unit >= lpc) {
		*what = 'e';
		return 0;
	}
	*what = 'l';
	return ch->gstage * lpc + (lpc - 1 - unit);
}

static uint32_t layer_unit(const struct gen *g, const struct chunk *ch,
			   uint64_t l)
{
	return (uint32_t)((ch->last ? 1 : 0) + layers_per_chunk(g->c) - 1 - l);
}

/* Weight tensors of a unit (bf16), or with @alloc NULL their total. */
static uint64_t unit_weights(struct gen *g, const struct chunk *ch,
			     uint32_t unit, bool alloc)
{
	const struct cfg *c = g->c;
	uint64_t h = c->hidden, t = c->tp, total = 0, w[12], e;
	uint64_t l = 0;
	size_t n = 0, i;
	int what;

	l = unit_layer(g, ch, unit, &what);
	if (what == 'h') {
		w[n++] = 2 * h; /* final layernorm */
		w[n++] = 2 * h;
		if (c->stages * c->vstages > 1)
			w[n++] = 2 * c->vocab / t * h; /* tied copy */
	} else if (what == 'e') {
		w[n++] = 2 * c->vocab / t * h;
		w[n++] = 2 * c->seq * h; /* learned positions */
	} else {
		w[n++] = 2 * h; /* layernorm 1 */
		w[n++] = 2 * h;
		w[n++] = 6 * h * h / t; /* QKV */
		w[n++] = 6 * h / t;
		w[n++] = 2 * h * h / t; /* projection */
		w[n++] = 2 * h;
		w[n++] = 2 * h; /* layernorm 2 */
		w[n++] = 2 * h;
		if (is_moe(c, l)) {
			w[n++] = 2 * h * c->experts; /* router */
		} else {
			w[n++] = 2 * h * c->ffn / t;
			w[n++] = 2 * c->ffn / t;
			w[n++] = 2 * c->ffn / t * h;
			w[n++] = 2 * h;
		}
	}
	for (i = 0; i < n; i++) {
		total += w[i];
		if (alloc)
			ev_alloc(g, w[i]);
	}
	if (what == 'l' && is_moe(c, l)) {
		for (e = 0; e < c->experts; e++) {
			total += 4 * h * c->moe_ffn / t;
			if (alloc) {
				ev_alloc(g, 2 * h * c->moe_ffn / t);
				ev_alloc(g, 2 * c->moe_ffn / t * h);
			}
		}
	}
	return total;
}

/* Attention softmax, its dropout mask and output: saved or recomputed. */
static void attn_core(struct gen *g, struct stack *st, uint64_t ids[3])
{
	const struct sizes *s = &g->s;
	uint64_t scores = ev_alloc(g, s->scores);

	ids[0] = ev_alloc(g, s->scores); /* softmax output */
	ev_free(g, scores);
	ids[1] = ev_alloc(g, s->attn_mask);
	ids[2] = ev_alloc(g, s->scores); /* after dropout */
	if (st) {
		push(g, st, E_TENSOR, ids[0], s->scores, 0);
		push(g, st, E_TENSOR, ids[1], 0, 0);
		push(g, st, E_TENSOR, ids[2], s->scores, 0);
	}
}

/* Dropout, then the residual add: the sub-layer's output. */
static void residual(struct gen *g, struct stack *st, uint64_t produced)
{
	const struct sizes *s = &g->s;
	uint64_t dropped, out;

	keep(g, st, s->dmask, 0);
	dropped = ev_alloc(g, s->hid);
	ev_free(g, produced);
	out = ev_alloc(g, s->hid);
	ev_free(g, dropped);
	if (st)
		push(g, st, E_TENSOR, out, 0, 0);
	else
		g->drop[g->ndrop++] = out;
}

static void moe_mlp(struct gen *g, struct stack *st, uint64_t layer,
		    uint64_t mb)
{
	const struct cfg *c = g->c;
	const struct sizes *s = &g->s;
	uint64_t perm, comb, e, fc;

	keep(g, st, s->router, s->router); /* router logits */
	keep(g, st, s->router, s->router); /* probabilities */
	keep(g, st, s->topk_w, s->topk_w);
	keep(g, st, s->topk_idx, 0);
	route(g, layer, mb);
	perm = ev_alloc(g, s->perm);
	for (e = 0; e < c->experts; e++)
		keep(g, st, 2 * (uint64_t)g->counts[e] * c->hidden,
		     2 * (uint64_t)g->counts[e] * c->hidden);
	ev_free(g, perm);
	for (e = 0; e < c->experts; e++) {
		g->tmp_ids[e] = UINT64_MAX;
		if (!g->counts[e])
			continue; /* an empty expert allocates nothing */
		fc = 2 * (uint64_t)g->counts[e] * (c->moe_ffn / c->tp);
		keep(g, st, fc, fc);
		keep(g, st, fc, fc);
		g->tmp_ids[e] =
			ev_alloc(g, 2 * (uint64_t)g->counts[e] * c->hidden);
	}
	comb = ev_alloc(g, s->hid);
	for (e = 0; e < c->experts; e++)
		if (g->tmp_ids[e] != UINT64_MAX)
			ev_free(g, g->tmp_ids[e]);
	residual(g, st, comb);
}

enum fwd_mode {
	FWD_SAVE, /* plain forward: everything the backward needs is kept */
	FWD_CKPT, /* full recomputation's forward: keep the output only */
	FWD_RECOMPUTE, /* full recomputation's rerun in the backward */
};

/* One transformer layer's forward pass for one micro-batch. */
static void layer_fwd(struct gen *g, const struct chunk *ch, struct stack *st,
		      uint64_t l, uint64_t mb, enum fwd_mode mode)
{
	const struct cfg *c = g->c;
	const struct sizes *s = &g->s;
	uint64_t gl = ch->gstage * layers_per_chunk(c) + l;
	struct stack *sv = mode == FWD_CKPT ? NULL : st;
	uint64_t core[3], proj, fc2;
	uint32_t unit = layer_unit(g, ch, l);
	bool drop_core = c->recompute == RC_SELECTIVE && mode != FWD_RECOMPUTE;
	int i;

	push(g, st, mode == FWD_CKPT ? E_FRAME_FULL : E_FRAME, 0, 0, unit);
	/* attention block */
	keep(g, sv, s->ln_stats, 0);
	keep(g, sv, s->ln_out, s->ln_out);
	keep(g, sv, s->qkv, s->qkv);
	if (c->flash) {
		keep(g, sv, s->lse, 0);
	} else if (drop_core && sv) {
		attn_core(g, NULL, core);
		push(g, sv, E_ATTN, 0, 0, unit);
	} else {
		attn_core(g, sv, core);
		if (!sv)
			for (i = 0; i < 3; i++)
				g->drop[g->ndrop++] = core[i];
	}
	keep(g, sv, s->ctx, s->ctx);
	if (drop_core && sv && !c->flash)
		for (i = 0; i < 3; i++)
			ev_free(g, core[i]);
	proj = ev_alloc(g, s->hid);
	if (!sv)
		drop_all(g); /* only the residual stream survives */
	residual(g, sv, proj);
	/* MLP block */
	keep(g, sv, s->ln_stats, 0);
	keep(g, sv, s->ln_out, s->ln_out);
	if (is_moe(c, gl)) {
		moe_mlp(g, sv, gl, mb);
	} else {
		keep(g, sv, s->fc, s->fc); /* GeLU input */
		keep(g, sv, s->fc, s->fc); /* GeLU output */
		fc2 = ev_alloc(g, s->hid);
		residual(g, sv, fc2);
	}
	if (!sv) {
		/* the layer output is the last one held: it stays */
		uint64_t out = g->drop[--g->ndrop];

		drop_all(g);
		push(g, st, E_TENSOR, out, 0, 0);
	}
}

static struct stack *stack_of(struct gen *g, uint64_t ci, uint64_t mb)
{
	return &g->stacks[ci * g->c->mbatches + mb];
}

static void forward(struct gen *g, uint64_t ci, uint64_t mb)
{
	const struct cfg *c = g->c;
	const struct sizes *s = &g->s;
	struct chunk *ch = &g->chunks[ci];
	struct stack *st = stack_of(g, ci, mb);
	uint64_t l, lpc = layers_per_chunk(c), x, t;
	enum fwd_mode mode = c->recompute == RC_FULL ? FWD_CKPT : FWD_SAVE;

	if (ch->first) {
		keep(g, st, s->ids, 0); /* tokens */
		keep(g, st, s->ids, 0); /* position ids */
		push(g, st, E_FRAME, 0, 0, ch->nunits - 1);
		x = ev_alloc(g, s->hid); /* embedding lookup */
		residual(g, st, x);
	} else {
		keep(g, st, s->hid, 0); /* received from the previous stage */
	}
	if (ch->last) {
		keep(g, st, s->ids, 0); /* labels */
		keep(g, st, s->ids / 2, 0); /* loss mask */
	}
	for (l = 0; l < lpc; l++)
		layer_fwd(g, ch, st, l, mb, mode);
	if (!ch->last) {
		/* sent on: Megatron frees the output's storage right away */
		if (st->n && st->v[st->n - 1].kind == E_TENSOR)
			ev_free(g, st->v[--st->n].id);
		return;
	}
	push(g, st, E_FRAME, 0, 0, 0);
	keep(g, st, s->ln_stats, 0);
	keep(g, st, s->ln_out, s->ln_out);
	x = ev_alloc(g, s->logits);
	keep(g, st, s->logits32, s->logits); /* softmax, in place */
	ev_free(g, x);
	t = ev_alloc(g, 4 * s->tokens); /* per-token loss */
	g->losses[g->nlosses++] = ev_alloc(g, 512);
	ev_free(g, t);
}

/* The backward pass of a unit is done: its weight gradients exist. */
static void wgrad(struct gen *g, struct chunk *ch, uint32_t unit)
{
	int32_t b = ch->bucket_at[unit];

	if (b < 0 || ch->buckets[b].live)
		return;
	ch->buckets[b].id = ev_alloc(g, ch->buckets[b].bytes);
	ch->buckets[b].live = true;
}

static void backward(struct gen *g, uint64_t ci, uint64_t mb)
{
	const struct cfg *c = g->c;
	struct chunk *ch = &g->chunks[ci];
	struct stack *st = stack_of(g, ci, mb);
	uint64_t grad, ng, l;
	uint64_t core[3];
	struct ent e;

	/* the loss's gradient, or the output's received from the next stage */
	grad = ev_alloc(g, ch->last ? 512 : g->s.hid);
	while (st->n && !g->oom) {
		e = st->v[--st->n];
		switch (e.kind) {
		case E_TENSOR:
			if (e.gsize) {
				ng = ev_alloc(g, e.gsize);
				ev_free(g, e.id);
				ev_free(g, grad);
				grad = ng;
			} else {
				ev_free(g, e.id);
			}
			break;
		case E_FRAME_FULL:
			/* rerun the layer, its input is still held below */
			l = layers_per_chunk(c) - 1 -
			    (e.unit - (ch->last ? 1 : 0));
			layer_fwd(g, ch, st, l, mb, FWD_RECOMPUTE);
			break;
		case E_ATTN:
			attn_core(g, st, core);
			break;
		default:
			wgrad(g, ch, e.unit);
			break;
		}
	}
	ev_free(g, grad); /* sent to the previous stage, or consumed */
}

static void optimizer_step(struct gen *g)
{
	const struct cfg *c = g->c;
	uint64_t ci, t, norm;
	uint32_t b;
	int k;

	for (ci = 0; ci < c->vstages; ci++) {
		struct chunk *ch = &g->chunks[ci];

		for (b = 0; b < ch->nbuckets; b++) {
			struct bucket *bk = &ch->buckets[b];

			if (g->iter != 1)
				continue;
			/* Adam: exp_avg, exp_avg_sq, fp32 master weights */
			for (k = 0; k < 3; k++)
				bk->adam[k] = ev_alloc(g, bk->bytes);
		}
	}
	norm = ev_alloc(g, 512); /* the global gradient norm */
	for (ci = 0; ci < c->vstages; ci++) {
		struct chunk *ch = &g->chunks[ci];

		for (b = 0; b < ch->nbuckets; b++) {
			t = ev_alloc(g, 512); /* per-bucket norm */
			ev_free(g, t);
		}
	}
	for (ci = 0; ci < c->vstages; ci++) {
		struct chunk *ch = &g->chunks[ci];

		for (b = 0; b < ch->nbuckets; b++) {
			t = ev_alloc(g, ch->buckets[b].bytes); /* clipped */
			ev_free(g, t);
		}
	}
	ev_free(g, norm);
	for (t = 0; t < g->nlosses; t++)
		ev_free(g, g->losses[t]);
	g->nlosses = 0;
}

static void free_grads(struct gen *g)
{
	uint64_t ci;
	uint32_t b;

	for (ci = 0; ci < g->c->vstages; ci++)
		for (b = 0; b < g->chunks[ci].nbuckets; b++) {
			struct bucket *bk = &g->chunks[ci].buckets[b];

			if (bk->live)
				ev_free(g, bk->id);
			bk->live = false;
		}
}

/* The virtual micro-batch k of the schedule: its chunk and micro-batch. */
static void vmb(const struct cfg *c, uint64_t k, bool fwd, uint64_t *ci,
		uint64_t *mb)
{
	uint64_t pv = c->stages * c->vstages, in = k % pv;

	*ci = in / c->stages;
	if (!fwd)
		*ci = c->vstages - 1 - *ci;
	*mb = k / pv * c->stages + in % c->stages;
}

/* One iteration: warm-up forwards, steady one-forward-one-backward, drain. */
static void iteration(struct gen *g)
{
	const struct cfg *c = g->c;
	uint64_t total = c->mbatches * c->vstages, warm, k, ci, mb;

	if (c->interleaved)
		warm = (c->stages - c->rank - 1) * 2 +
		       (c->vstages - 1) * c->stages;
	else
		warm = c->stages - c->rank - 1;
	if (warm > total)
		warm = total;
	for (k = 0; k < warm; k++) {
		vmb(c, k, true, &ci, &mb);
		forward(g, ci, mb);
	}
	for (k = 0; k < total - warm; k++) {
		vmb(c, warm + k, true, &ci, &mb);
		forward(g, ci, mb);
		vmb(c, k, false, &ci, &mb);
		backward(g, ci, mb);
	}
	for (k = total - warm; k < total; k++) {
		vmb(c, k, false, &ci, &mb);
		backward(g, ci, mb);
	}
}

/* Chunks, their units and gradient buckets (params in backward order). */
static int setup(struct gen *g)
{
	const struct cfg *c = g->c;
	uint64_t ci, lpc = layers_per_chunk(c), acc;
	uint32_t u;

	g->chunks = calloc(c->vstages, sizeof(*g->chunks));
	g->stacks = calloc(c->vstages * c->mbatches, sizeof(*g->stacks));
	g->drop = calloc(64 + 4 * c->experts, sizeof(*g->drop));
	g->tmp_ids = calloc(c->experts + 1, sizeof(*g->tmp_ids));
	g->counts = calloc(c->experts + 1, sizeof(*g->counts));
	g->losses = calloc(c->mbatches, sizeof(*g->losses));
	g->buf = malloc(BUF_SIZE);
	g->all_buckets = calloc(c->vstages * (lpc + 2), sizeof(struct bucket));
	g->all_bucket_at = calloc(c->vstages * (lpc + 2), sizeof(int32_t));
	if (!g->chunks || !g->stacks || !g->drop || !g->tmp_ids || !g->counts ||
	    !g->losses || !g->buf || !g->all_buckets || !g->all_bucket_at)
		return -ENOMEM;
	for (ci = 0; ci < c->vstages; ci++) {
		struct chunk *ch = &g->chunks[ci];

		ch->gstage = ci * c->stages + c->rank;
		ch->first = ch->gstage == 0;
		ch->last = ch->gstage == c->stages * c->vstages - 1;
		ch->nunits = (uint32_t)(lpc + ch->first + ch->last);
		ch->buckets = &g->all_buckets[ci * (lpc + 2)];
		ch->bucket_at = &g->all_bucket_at[ci * (lpc + 2)];
		acc = 0;
		for (u = 0; u < ch->nunits; u++) {
			/* fp32 main gradients: twice the bf16 weights */
			uint64_t bytes = 2 * unit_weights(g, ch, u, false);

			ch->bucket_at[u] = -1;
			if (!acc) {
				ch->bucket_at[u] = (int32_t)ch->nbuckets;
				ch->buckets[ch->nbuckets].start_unit = u;
				ch->nbuckets++;
			}
			ch->buckets[ch->nbuckets - 1].bytes += bytes;
			acc += bytes;
			if (acc >= c->bucket)
				acc = 0;
		}
	}
	return 0;
}

static void teardown(struct gen *g)
{
	uint64_t i;

	if (g->stacks)
		for (i = 0; i < g->c->vstages * g->c->mbatches; i++)
			free(g->stacks[i].v);
	free(g->chunks);
	free(g->all_buckets);
	free(g->all_bucket_at);
	free(g->stacks);
	free(g->drop);
	free(g->tmp_ids);
	free(g->counts);
	free(g->losses);
	free(g->buf);
}

static void header(struct gen *g)
{
	const struct cfg *c = g->c;
	static const char *const rc[] = { "none", "selective", "full" };
	char line[512];

	put_str(g, "stalloc-trace 1\n");
	snprintf(line, sizeof(line),
		 "# stalloc-synth layers=%" PRIu64 ",hidden=%" PRIu64
		 ",heads=%" PRIu64 ",ffn=%" PRIu64 ",seq=%" PRIu64
		 ",vocab=%" PRIu64 ",mbs=%" PRIu64 ",micro-batches=%" PRIu64
		 ",tp=%" PRIu64 "%s,stages=%" PRIu64 ",rank=%" PRIu64
		 ",schedule=%s,virtual=%" PRIu64 ",recompute=%s%s"
		 ",experts=%" PRIu64 ",top-k=%" PRIu64 ",imbalance=%.3f"
		 ",iterations=%" PRIu64 ",seed=%" PRIu64 "\n",
		 c->layers, c->hidden, c->heads, c->ffn, c->seq, c->vocab,
		 c->mbs, c->mbatches, c->tp, c->seqpar ? ",sp" : "", c->stages,
		 c->rank, c->interleaved ? "interleaved" : "1f1b", c->vstages,
		 rc[c->recompute], c->flash ? ",flash" : "", c->experts,
		 c->topk, c->imbalance, c->iters, c->seed);
	put_str(g, line);
}

static int generate(const struct cfg *c, const struct sizes *s, FILE *f)
{
	struct gen g = { .c = c, .s = *s, .f = f, .ns = 1000000000 };
	uint64_t ci;
	uint32_t u;
	int err;

	err = setup(&g);
	if (err)
		goto out_teardown;
	header(&g);
	/* model construction: weights, embedding first */
	for (ci = 0; ci < c->vstages; ci++)
		for (u = g.chunks[ci].nunits; u-- > 0;)
			unit_weights(&g, &g.chunks[ci], u, true);
	for (g.iter = 1; g.iter <= c->iters && !g.oom; g.iter++) {
		ev_mark(&g, "iteration");
		if (!c->grad_at_step)
			free_grads(&g); /* zero_grad(set_to_none=True) */
		iteration(&g);
		optimizer_step(&g);
		if (c->grad_at_step)
			free_grads(&g);
	}
	flush_buf(&g);
	err = g.oom ? -EIO : 0;
out_teardown:
	teardown(&g);
	return err;
}

/* ------------------------------------------------------------ options */

static int bad_usage(const char *why, const char *what)
{
	fprintf(stderr, "stalloc-synth: %s%s%s\n", why, what ? ": " : "",
		what ? what : "");
	fprintf(stderr, "Try 'stalloc-synth --help'.\n");
	return 2;
}

/* A size as the environment variables take it (stalloc_parse_size). */
static bool parse_size(const char *s, uint64_t *v)
{
	return stalloc_parse_size(s, v) == 0;
}

enum {
	O_LAYERS = 256,
	O_HIDDEN,
	O_HEADS,
	O_FFN,
	O_SEQ,
	O_VOCAB,
	O_MBS,
	O_MBATCHES,
	O_TP,
	O_STAGES,
	O_RANK,
	O_VSTAGES,
	O_BUCKET,
	O_EXPERTS,
	O_TOPK,
	O_MOE_FFN,
	O_MOE_EVERY,
	O_ITERS,
	O_SEED,
	O_DEV,
	O_NUM_END, /* the numeric options end here */
	O_SCHEDULE,
	O_RECOMPUTE,
	O_GRAD_FREE,
	O_IMBALANCE,
	O_FLASH,
	O_SEQPAR,
};

/* Bounds of the numeric options, in the order of the enum. */
static const struct {
	uint64_t min, max;
} bounds[O_NUM_END - O_LAYERS] = {
	{ 1, 4096 }, /* layers */
	{ 1, 1 << 20 }, /* hidden */
	{ 1, 4096 }, /* heads */
	{ 1, 1 << 22 }, /* ffn */
	{ 1, 1 << 22 }, /* seq */
	{ 1, 1 << 24 }, /* vocab */
	{ 1, 4096 }, /* micro-batch size */
	{ 1, 1 << 16 }, /* micro-batches */
	{ 1, 1024 }, /* tp */
	{ 1, 1024 }, /* stages */
	{ 0, 1023 }, /* rank */
	{ 1, 64 }, /* virtual stages */
	{ 1, 1ull << 40 }, /* bucket size */
	{ 0, 1024 }, /* experts */
	{ 1, 1024 }, /* top-k */
	{ 1, 1 << 22 }, /* moe ffn */
	{ 1, 4096 }, /* moe every */
	{ 1, 1 << 20 }, /* iterations */
	{ 0, UINT64_MAX }, /* seed */
	{ 0, 1023 }, /* device */
};

static uint64_t *num_field(struct cfg *c, int opt)
{
	uint64_t *const f[] = {
		&c->layers,    &c->hidden,  &c->heads, &c->ffn,
		&c->seq,       &c->vocab,   &c->mbs,   &c->mbatches,
		&c->tp,	       &c->stages,  &c->rank,  &c->vstages,
		&c->bucket,    &c->experts, &c->topk,  &c->moe_ffn,
		&c->moe_every, &c->iters,   &c->seed,  &c->dev,
	};

	return f[opt - O_LAYERS];
}

static const struct option long_opts[] = {
	{ "layers", required_argument, NULL, O_LAYERS },
	{ "hidden", required_argument, NULL, O_HIDDEN },
	{ "heads", required_argument, NULL, O_HEADS },
	{ "ffn", required_argument, NULL, O_FFN },
	{ "seq", required_argument, NULL, O_SEQ },
	{ "vocab", required_argument, NULL, O_VOCAB },
	{ "micro-batch-size", required_argument, NULL, O_MBS },
	{ "micro-batches", required_argument, NULL, O_MBATCHES },
	{ "tp", required_argument, NULL, O_TP },
	{ "stages", required_argument, NULL, O_STAGES },
	{ "rank", required_argument, NULL, O_RANK },
	{ "virtual-stages", required_argument, NULL, O_VSTAGES },
	{ "bucket-size", required_argument, NULL, O_BUCKET },
	{ "experts", required_argument, NULL, O_EXPERTS },
	{ "top-k", required_argument, NULL, O_TOPK },
	{ "moe-ffn", required_argument, NULL, O_MOE_FFN },
	{ "moe-every", required_argument, NULL, O_MOE_EVERY },
	{ "iterations", required_argument, NULL, O_ITERS },
	{ "seed", required_argument, NULL, O_SEED },
	{ "device", required_argument, NULL, O_DEV },
	{ "schedule", required_argument, NULL, O_SCHEDULE },
	{ "recompute", required_argument, NULL, O_RECOMPUTE },
	{ "grad-free", required_argument, NULL, O_GRAD_FREE },
	{ "imbalance", required_argument, NULL, O_IMBALANCE },
	{ "flash-attn", no_argument, NULL, O_FLASH },
	{ "sequence-parallel", no_argument, NULL, O_SEQPAR },
	{ "output", required_argument, NULL, 'o' },
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

static int parse_word(const char *arg, const char *const *words, int n)
{
	int i;

	for (i = 0; i < n; i++)
		if (!strcmp(arg, words[i]))
			return i;
	return -1;
}

static int parse_opt(struct cfg *c, int ch, const char *arg)
{
	static const char *const sched[] = { "1f1b", "interleaved" };
	static const char *const rc[] = { "none", "selective", "full" };
	static const char *const gf[] = { "next", "step" };
	char what[128];
	uint64_t v;
	char *end;
	int w;

	if (ch >= O_LAYERS && ch < O_NUM_END) {
		snprintf(what, sizeof(what),
			 "--%s wants a number in [%" PRIu64 ", %" PRIu64 "]",
			 long_opts[ch - O_LAYERS].name,
			 bounds[ch - O_LAYERS].min, bounds[ch - O_LAYERS].max);
		if (!parse_size(arg, &v) || v < bounds[ch - O_LAYERS].min ||
		    v > bounds[ch - O_LAYERS].max)
			return bad_usage(what, arg);
		*num_field(c, ch) = v;
		return 0;
	}
	switch (ch) {
	case O_SCHEDULE:
		w = parse_word(arg, sched, 2);
		if (w < 0)
			return bad_usage("--schedule wants 1f1b or interleaved",
					 arg);
		c->interleaved = w == 1;
		return 0;
	case O_RECOMPUTE:
		w = parse_word(arg, rc, 3);
		if (w < 0)
			return bad_usage(
				"--recompute wants none, selective or full",
				arg);
		c->recompute = (enum recompute)w;
		return 0;
	case O_GRAD_FREE:
		w = parse_word(arg, gf, 2);
		if (w < 0)
			return bad_usage("--grad-free wants next or step", arg);
		c->grad_at_step = w == 1;
		return 0;
	case O_IMBALANCE:
		errno = 0;
		c->imbalance = strtod(arg, &end);
		if (errno || end == arg || *end || !(c->imbalance >= 0) ||
		    c->imbalance > 8)
			return bad_usage("--imbalance wants a number in [0, 8]",
					 arg);
		return 0;
	case O_FLASH:
		c->flash = true;
		return 0;
	case O_SEQPAR:
		c->seqpar = true;
		return 0;
	case 'o':
		c->output = arg;
		return 0;
	default:
		return bad_usage("unknown option", NULL);
	}
}

static bool mul(uint64_t *acc, uint64_t x)
{
	return !__builtin_mul_overflow(*acc, x, acc);
}

/* a x b x c x d with an overflow check; 0 on overflow. */
static uint64_t prod(uint64_t a, uint64_t b, uint64_t c, uint64_t d, bool *ok)
{
	uint64_t v = a;

	if (!mul(&v, b) || !mul(&v, c) || !mul(&v, d))
		*ok = false;
	return v;
}

static int check_cfg(struct cfg *c, bool vset, struct sizes *s)
{
	uint64_t t = c->tp, sp = c->seqpar ? c->tp : 1, tok;
	char what[160];
	bool ok = true;

	if (!c->ffn)
		c->ffn = 4 * c->hidden;
	if (!c->moe_ffn)
		c->moe_ffn = c->ffn;
	if (c->interleaved && !vset)
		c->vstages = 2;
	if (!c->interleaved && c->vstages != 1)
		return bad_usage(
			"--virtual-stages needs --schedule interleaved", NULL);
	if (c->interleaved && c->vstages < 2)
		return bad_usage("--schedule interleaved needs --virtual-stages"
				 " of 2 or more",
				 NULL);
	if (c->interleaved && c->mbatches % c->stages)
		return bad_usage("--schedule interleaved needs --micro-batches"
				 " to be a multiple of --stages",
				 NULL);
	if (c->rank >= c->stages)
		return bad_usage("--rank must be less than --stages", NULL);
	if (c->layers % (c->stages * c->vstages)) {
		snprintf(what, sizeof(what),
			 "--layers (%" PRIu64 ") must be a multiple of "
			 "stages x virtual stages (%" PRIu64 ")",
			 c->layers, c->stages * c->vstages);
		return bad_usage(what, NULL);
	}
	if (c->hidden % c->heads)
		return bad_usage("--hidden must be a multiple of --heads",
				 NULL);
	if (c->heads % t || c->hidden % t || c->ffn % t || c->vocab % t ||
	    c->moe_ffn % t)
		return bad_usage("--tp must divide --heads, --hidden, --ffn, "
				 "--moe-ffn and --vocab",
				 NULL);
	if (c->seqpar && (c->seq * c->mbs) % t)
		return bad_usage("--sequence-parallel needs --tp to divide "
				 "the tokens of a micro-batch",
				 NULL);
	if (c->experts && c->topk > c->experts)
		return bad_usage("--top-k must not exceed --experts", NULL);
	if (c->experts && c->moe_every > c->layers)
		return bad_usage("--moe-every exceeds --layers", NULL);
	tok = c->seq * c->mbs / sp;
	s->tokens = tok;
	s->ids = prod(8, c->seq, c->mbs, 1, &ok);
	s->ln_stats = prod(8, tok, 1, 1, &ok);
	s->ln_out = prod(2, tok, c->hidden, 1, &ok);
	s->hid = s->ln_out;
	s->dmask = prod(tok, c->hidden, 1, 1, &ok);
	s->qkv = prod(6, c->seq * c->mbs, c->hidden / t, 1, &ok);
	s->ctx = prod(2, c->seq * c->mbs, c->hidden / t, 1, &ok);
	s->scores = prod(2, c->heads / t, c->seq, c->seq, &ok);
	s->scores = prod(s->scores, c->mbs, 1, 1, &ok);
	s->attn_mask = s->scores / 2;
	s->lse = prod(4, c->heads / t, c->seq, c->mbs, &ok);
	s->fc = prod(2, c->seq * c->mbs, c->ffn / t, 1, &ok);
	s->logits = prod(2, c->seq * c->mbs, c->vocab / t, 1, &ok);
	s->logits32 = 2 * s->logits;
	s->router = prod(4, tok, c->experts, 1, &ok);
	s->topk_idx = prod(8, tok, c->topk, 1, &ok);
	s->topk_w = prod(4, tok, c->topk, 1, &ok);
	s->perm = prod(2, tok, c->topk, c->hidden, &ok);
	/* all weights of the model, with room for fp32 copies */
	prod(c->hidden,
	     8 * c->hidden + 4 * c->ffn + 4 * c->experts * c->moe_ffn +
		     2 * c->experts + 16,
	     c->layers, 16, &ok);
	prod(c->vocab + c->seq, c->hidden, 16, 1, &ok);
	prod(s->logits32, 4, 1, 1, &ok);
	if (!ok || tok > UINT32_MAX)
		return bad_usage("tensor sizes overflow 64 bits: "
				 "smaller --seq, --hidden or --vocab",
				 NULL);
	return 0;
}

int main(int argc, char **argv)
{
	struct cfg c = {
		.layers = 8,
		.hidden = 1024,
		.heads = 16,
		.seq = 1024,
		.vocab = 32000,
		.mbs = 1,
		.mbatches = 8,
		.tp = 1,
		.stages = 4,
		.vstages = 1,
		.bucket = 32ull << 20,
		.topk = 2,
		.moe_every = 1,
		.iters = 4,
		.seed = 1,
		.imbalance = 0.5,
	};
	struct sizes s;
	bool vset = false;
	FILE *f = stdout;
	int ch, err;

	while ((ch = getopt_long(argc, argv, "o:h", long_opts, NULL)) != -1) {
		if (ch == 'h') {
			fputs(usage, stdout);
			return 0;
		}
		if (ch == '?')
			return bad_usage("bad option", NULL);
		vset |= ch == O_VSTAGES;
		err = parse_opt(&c, ch, optarg);
		if (err)
			return err;
	}
	if (optind != argc)
		return bad_usage("unexpected argument", argv[optind]);
	err = check_cfg(&c, vset, &s);
	if (err)
		return err;
	if (c.output) {
		f = fopen(c.output, "w");
		if (!f) {
			fprintf(stderr, "stalloc-synth: %s: %s\n", c.output,
				strerror(errno));
			return 1;
		}
	}
	err = generate(&c, &s, f);
	if (fflush(f) || ferror(f))
		err = -EIO;
	if (f != stdout && fclose(f))
		err = -EIO;
	if (err) {
		fprintf(stderr, "stalloc-synth: %s: %s\n",
			c.output ? c.output : "stdout", strerror(-err));
		return 1;
	}
	return 0;
}
