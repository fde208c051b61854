/* SPDX-License-Identifier: MIT */
/*
 * tools/cli/synth/synth.h - internals shared by the files of stalloc-synth
 *
 * The generator's state (struct gen), the configuration the options build
 * (struct cfg, struct sizes) and the calls between the three files:
 * tools/cli/stalloc-synth.c (usage, options, main),
 * tools/cli/synth/events.c (the buffered event writer, the counter-based
 * PRNG and the saved-tensor stacks) and tools/cli/synth/model.c (the model
 * and the pipeline schedule).
 * Not an interface outside stalloc-synth.  Single-threaded; no locking.
 */
#ifndef STALLOC_TOOLS_SYNTH_H
#define STALLOC_TOOLS_SYNTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum recompute { RC_NONE, RC_SELECTIVE, RC_FULL };

struct cfg {
	uint64_t layers, hidden, heads, ffn, seq, vocab, mbs, mbatches;
	uint64_t tp, stages, rank, vstages;
	uint64_t bucket, experts, topk, moe_ffn, moe_every;
	uint64_t iters, seed, dev;
	double imbalance;
	enum recompute recompute;
	bool interleaved, flash, seqpar, grad_at_step;
	bool small; /* small tensors at their own bytes (--small-tensors) */
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

/* events.c: the output buffer and its event lines */
void flush_buf(struct gen *g);
void put_str(struct gen *g, const char *s);
uint64_t ev_alloc(struct gen *g, uint64_t size);
void ev_free(struct gen *g, uint64_t id);
void ev_mark(struct gen *g, const char *label);

/* events.c: seeded routing and the saved-tensor stacks */
void route(struct gen *g, uint64_t layer, uint64_t mb);
void push(struct gen *g, struct stack *st, uint32_t kind, uint64_t id,
	  uint64_t gsize, uint32_t unit);
void keep(struct gen *g, struct stack *st, uint64_t size, uint64_t gsize);
void drop_all(struct gen *g);

/* model.c: write the whole trace to @f; 0 or -EIO on a write error */
int generate(const struct cfg *c, const struct sizes *s, FILE *f);

#endif /* STALLOC_TOOLS_SYNTH_H */
