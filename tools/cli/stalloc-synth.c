// SPDX-License-Identifier: MIT
/*
 * tools/cli/stalloc-synth.c - write a Megatron-like training trace (format v1)
 *
 * Models what one pipeline rank of a GPT-style model allocates: weights at
 * start-up, then per iteration the forward activations of every layer of
 * every micro-batch in the order of a 1F1B or interleaved pipeline schedule,
 * freed in reverse in the backward pass (with full or selective activation
 * recomputation), gradient buckets made in the backward pass and freed by
 * the next zero_grad (or after the step), Adam state made by the first
 * optimizer step, and MoE layers whose per-expert token buffers change size
 * with a seeded routing imbalance.  Documentation/workloads.rst says what is
 * modelled and what is not.  This file holds the usage, the options and
 * their checks; tools/cli/synth/model.c the model and the schedule,
 * tools/cli/synth/events.c the event writer, the PRNG and the stacks.
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

#include "synth/synth.h"

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
	"  --small-tensors        scalars and MoE token indices at the bytes\n"
	"                         PyTorch asks for (4; 8 per token), not 512\n"
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
	O_SMALL,
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
	{ "small-tensors", no_argument, NULL, O_SMALL },
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
	case O_SMALL:
		c->small = true;
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
