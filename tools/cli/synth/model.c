// SPDX-License-Identifier: MIT
/*
 * tools/cli/synth/model.c - stalloc-synth's model of one pipeline rank
 *
 * Weights at start-up, then per iteration the forward activations of every
 * layer of every micro-batch in the order of a 1F1B or interleaved
 * schedule, freed in reverse by the backward pass (with full or selective
 * recomputation), gradient buckets, Adam state and MoE token buffers.
 * Invariants: each in-flight (model chunk, micro-batch) pair owns a stack
 * of what its forward pass saved; the backward pass pops it, so frees come
 * in reverse order, and a recomputation marker popped from it pushes the
 * recomputed tensors back; every free names a live ID.  The output is a
 * function of struct cfg alone.  Single-threaded; no locking.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "synth.h"

/* ------------------------------------------------------------ model */

/*
 * A scalar (a loss, a norm): the 4 bytes of a float with --small-tensors,
 * as PyTorch asks for them; else 512, what its allocator rounds them to.
 */
static uint64_t scalar(const struct gen *g)
{
	return g->c->small ? 4 : 512;
}

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
	if (c->small) /* tokens per expert: one int64 each */
		keep(g, st, 8 * c->experts, 0);
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
		if (c->small) /* the expert's token indices, int64 */
			keep(g, st, 8 * (uint64_t)g->counts[e], 0);
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
	g->losses[g->nlosses++] = ev_alloc(g, scalar(g));
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
	norm = ev_alloc(g, scalar(g)); /* the global gradient norm */
	for (ci = 0; ci < c->vstages; ci++) {
		struct chunk *ch = &g->chunks[ci];

		for (b = 0; b < ch->nbuckets; b++) {
			t = ev_alloc(g, scalar(g)); /* per-bucket norm */
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
		 ",schedule=%s,virtual=%" PRIu64 ",recompute=%s%s%s"
		 ",experts=%" PRIu64 ",top-k=%" PRIu64 ",imbalance=%.3f"
		 ",iterations=%" PRIu64 ",seed=%" PRIu64 "\n",
		 c->layers, c->hidden, c->heads, c->ffn, c->seq, c->vocab,
		 c->mbs, c->mbatches, c->tp, c->seqpar ? ",sp" : "", c->stages,
		 c->rank, c->interleaved ? "interleaved" : "1f1b", c->vstages,
		 rc[c->recompute], c->flash ? ",flash" : "",
		 c->small ? ",small" : "", c->experts, c->topk, c->imbalance,
		 c->iters, c->seed);
	put_str(g, line);
}

int generate(const struct cfg *c, const struct sizes *s, FILE *f)
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
