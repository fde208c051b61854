// SPDX-License-Identifier: MIT
/*
 * planner/plan.c - from an input file to a plan; the plan's public API
 *
 * A trace goes through iteration finding, classification, static packing of
 * the persistent, cross-iteration and static requests of one iteration, and
 * the reusable space of the dynamic ones.  A CSV problem is packed as given.
 * The plan's fingerprint hashes the static request signature so that the
 * runtime can tell a plan made for another workload.
 *
 * No locking: a plan is built by one thread and read-only afterwards.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../lib/util.h"
#include "csv.h"
#include "planner.h"

#define PLAN_TRACE_ALIGN 512
#define PLAN_BUDGET_MS 1000
/* The default safety stop: the larger of this and 20 times the budget. */
#define PLAN_SAFETY_MS 60000

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* FNV-1a over little-endian 64-bit words. */
static uint64_t fnv_word(uint64_t h, uint64_t w)
{
	int i;

	for (i = 0; i < 8; i++) {
		h ^= (w >> (8 * i)) & 0xff;
		h *= 0x100000001b3ULL;
	}
	return h;
}

uint64_t plan_fingerprint(const struct stalloc_plan *p)
{
	uint64_t h = 0xcbf29ce484222325ULL;
	size_t i;

	h = fnv_word(h, p->align);
	h = fnv_word(h, p->nr_positions);
	h = fnv_word(h, p->nr_prologue);
	h = fnv_word(h, p->warmup);
	if (p->stride > 1) { /* plans of one step per iteration: as before */
		h = fnv_word(h, p->stride);
		h = fnv_word(h, p->stride_pos);
	}
	for (i = 0; i < p->nr_ent; i++) {
		h = fnv_word(h, (uint64_t)p->ent[i].cls << 32 | p->ent[i].pos);
		h = fnv_word(h, p->ent[i].size);
	}
	return h;
}

void plan_entry_buf(const struct plan_entry *e, struct pack_buf *b)
{
	b->size = e->size;
	b->start = e->start;
	b->end = e->end;
	b->wraps = e->cls == PLAN_CROSS;
}

static int plan_alloc(struct stalloc_plan **out)
{
	*out = calloc(1, sizeof(**out));
	if (!*out)
		return sa_error(-ENOMEM, "planner: out of memory");
	return 0;
}

/* Pack the entries of @p; sets offsets, pool, lower bound. */
static int plan_pack(struct stalloc_plan *p,
		     const struct stalloc_plan_options *opts, uint64_t capacity)
{
	struct pack_opts o = { .budget_ms = opts->budget_ms,
			       .time_limit_ms = opts->time_limit_ms,
			       .capacity = capacity };
	struct pack_result r;
	struct pack_buf *b;
	size_t i;
	int err;

	if (!p->nr_ent)
		return 0;
	b = calloc(p->nr_ent, sizeof(*b));
	if (!b)
		return sa_error(-ENOMEM, "planner: out of memory");
	for (i = 0; i < p->nr_ent; i++)
		plan_entry_buf(&p->ent[i], &b[i]);
	err = pack_solve(b, p->nr_ent, p->horizon, &o, &r);
	if (!err || err == -ENOSPC) {
		for (i = 0; i < p->nr_ent; i++)
			p->ent[i].offset = b[i].offset;
		p->pool = r.peak;
		p->sum.lower_bound = r.lower_bound;
		p->sum.optimal = r.optimal;
		p->sum.work_ms = r.work_ms;
		p->sum.time_limit_hit = r.time_limit_hit;
	}
	free(b);
	return err;
}

static void count_classes(struct stalloc_plan *p)
{
	size_t i;

	for (i = 0; i < p->nr_ent; i++) {
		switch (p->ent[i].cls) {
		case PLAN_PERSISTENT:
			p->sum.persistent_requests++;
			p->sum.persistent_bytes += p->ent[i].size;
			break;
		case PLAN_CROSS:
			p->sum.cross_requests++;
			p->sum.static_requests++;
			break;
		case PLAN_ALTERNATE: /* one request, two slots */
			p->sum.cross_requests += plan_alt_first(p->ent, i);
			p->sum.static_requests += plan_alt_first(p->ent, i);
			break;
		default:
			p->sum.static_requests++;
			break;
		}
	}
	p->sum.dynamic_requests = p->nr_dyn;
	p->sum.peak = p->pool;
	p->sum.stride = p->stride > 1 ? p->stride : 1;
	p->fingerprint = plan_fingerprint(p);
	p->sum.fingerprint = p->fingerprint;
}

/* Remove the persistent entries (they come first, in prologue order). */
static void drop_persistent(struct stalloc_plan *p)
{
	size_t i, n = 0;

	for (i = 0; i < p->nr_ent; i++) {
		if (p->ent[i].cls == PLAN_PERSISTENT) {
			free(p->names[i]);
			continue;
		}
		p->ent[n] = p->ent[i];
		p->names[n++] = p->names[i];
	}
	p->nr_ent = n;
}

/* LOAD of @p's entries: the most bytes they have live at one time. */
static int plan_load(const struct stalloc_plan *p, uint64_t *load)
{
	struct pack_buf *b = calloc(p->nr_ent + 1, sizeof(*b));
	size_t i;

	if (!b)
		return sa_error(-ENOMEM, "planner: out of memory");
	for (i = 0; i < p->nr_ent; i++)
		plan_entry_buf(&p->ent[i], &b[i]);
	*load = pack_lower_bound(b, p->nr_ent, p->horizon);
	free(b);
	return 0;
}

/*
 * Classify @t into @p, @seen and @cls on one of two clocks (classify.c).
 * SEQ units from each iteration's start give envelopes that also cover
 * how variable runs (MoE routing) shift every position after them: slack
 * that absorbs a planned iteration running unlike the recorded ones, at
 * a cost (1% of the pool on the suite's MoE rows; 8-16% with selective
 * recompute, two stages or 16 experts, where the plan then lost to
 * caching by 90-300 MiB).  The reference's clock costs nothing but leaves
 * no slack (on those rows, imbalance 4 from another seed: +140 misses).
 * So the exact clock only where the envelopes cost over a
 * PLAN_WARP_GAIN-th of the load (5%: at 2%, top-1 routing took it for a
 * 2.1% gain, and a first planned iteration run unlike the recorded ones
 * then lost the plan); both classifications are made, the packing is
 * done once.  With @exact (STALLOC_PLAN_EXACT_CLOCK: a plan with slack
 * that its check rejected, made again) the reference's clock always; a
 * plan left with slack says so (sum.slack_clock).
 */
#define PLAN_WARP_GAIN 20
/* Steps planned as one, pairs needed, bytes the pairing must save. */
#define PLAN_PAIR 2
#define PLAN_PAIR_MIN 3
#define PLAN_PAIR_GAIN (2ULL << 20)
/* ... and the most dynamic positions a plan of one step may have: 1% */
#define PLAN_PAIR_DYN 100

static int classify_best(const struct trace *t, const struct plan_iters *it,
			 uint64_t align, bool exact, struct stalloc_plan *p,
			 struct plan_seen *seen, uint8_t *cls)
{
	struct stalloc_plan w = { 0 };
	struct plan_seen ws = { 0 };
	struct plan_cls_out out = { p, seen, cls }, wout = { &w, &ws, NULL };
	uint64_t lc, lw;
	int err;

	wout.ev_class = malloc(t->nr + 1);
	if (!wout.ev_class)
		return sa_error(-ENOMEM, "planner: out of memory");
	err = plan_classify(t, it, align, &out, &wout);
	if (err)
		goto out_free;
	/* @w stays empty without dynamic positions (plan_classify()) */
	if (p->nr_dyn && !plan_load(p, &lc) && !plan_load(&w, &lw) &&
	    (exact || lw + lc / PLAN_WARP_GAIN < lc)) {
		plan_release(p);
		*p = w;
		memset(&w, 0, sizeof(w));
		plan_seen_free(seen);
		*seen = ws;
		memset(&ws, 0, sizeof(ws));
		memcpy(cls, wout.ev_class, t->nr + 1);
	} else if (p->nr_dyn) {
		p->sum.slack_clock = true;
	}
	plan_release(&w);
	plan_seen_free(&ws);
out_free:
	free(wout.ev_class);
	return err;
}

static bool has_alternate(const struct stalloc_plan *p)
{
	size_t i;

	for (i = 0; i < p->nr_ent; i++)
		if (p->ent[i].cls == PLAN_ALTERNATE)
			return true;
	return false;
}

/* @it with its iterations past the first (the warm-up) two by two. */
static int iters_paired(const struct plan_iters *it, struct plan_iters *out)
{
	size_t k, j = 1;

	*out = *it;
	out->first = malloc((it->nr + 1) * sizeof(*out->first));
	out->seq = malloc((it->nr + 1) * sizeof(*out->seq));
	if (!out->first || !out->seq) {
		free(out->first);
		free(out->seq);
		return sa_error(-ENOMEM, "planner: out of memory");
	}
	out->first[0] = it->first[0];
	out->seq[0] = it->seq[0];
	for (k = 1; k < it->nr; k += 2, j++) {
		out->first[j] = it->first[k];
		out->seq[j] = it->seq[k];
	}
	out->nr = j;
	out->period = it->period * PLAN_PAIR;
	return 0;
}

/*
 * Where the second step of a pair starts, in allocations from the pair's
 * start: the count most steady pairs of @pit agree on (@it has the steps),
 * below @nr.  The runtime starts the warm-up's last step there: it comes
 * before the first planned pair as a pair's second step does.
 */
static uint32_t second_step(const struct trace *t, const struct plan_iters *it,
			    const struct plan_iters *pit, uint32_t nr)
{
	uint32_t *n = calloc(pit->nr + 1, sizeof(*n)), best = 0;
	size_t j, u, k, votes, most = 0;

	if (!n)
		return 0; /* the warm-up's last step then matched from 0 */
	for (j = 1; j + 1 < pit->nr; j++)
		for (k = pit->first[j]; k < it->first[2 * j]; k++)
			n[j] += t->ev[k].op == TRACE_ALLOC;
	for (j = 1; j + 1 < pit->nr; j++) {
		for (u = 1, votes = 0; u + 1 < pit->nr; u++)
			votes += n[u] == n[j];
		if (votes > most) {
			most = votes;
			best = n[j];
		}
	}
	free(n);
	return best < nr ? best : 0;
}

/*
 * A buffer that lives until the next step has allocated its own instance
 * (a training loop's "logits = model(x)" keeps the last step's until the
 * new ones are assigned) gets two slots that each live throughout a plan
 * of one step (PLAN_ALTERNATE): its size once more than the trace ever
 * holds.  Planned two steps at a time, its instances are ordinary buffers
 * -- one within the pair, one across the pairs' boundary -- whose slots
 * others use while they are gone.  Tried only for a job that repeats
 * itself (at most 1% of the positions dynamic): under MoE routing two
 * steps vary more than one, LOAD fell only because planned requests
 * became dynamic, the runs held more, and a pair planned from 7 traced
 * steps differed from the next pair so much that the plan was dropped --
 * where lending already gives the alternating slots' idle memory to the
 * dynamic requests.  Taken when it lowers LOAD by at least PLAN_PAIR_GAIN
 * bytes without more dynamic positions per step, with three pairs or
 * more to classify and markers to count steps by at run time; *@p,
 * *@seen, *@cls and *@it are then the paired ones.
 */
static int plan_pairs(const struct trace *t, struct plan_iters *it,
		      uint64_t align, bool exact, struct stalloc_plan *p,
		      struct plan_seen *seen, uint8_t **cls)
{
	struct stalloc_plan w = { 0 };
	struct plan_seen ws = { 0 };
	struct plan_iters pit;
	uint64_t l1 = 0, l2 = 0;
	uint8_t *wcls;
	int err;

	if (!has_alternate(p) || it->source != ITER_MARKERS ||
	    (it->nr - 1) / PLAN_PAIR < PLAN_PAIR_MIN ||
	    (uint64_t)p->nr_dyn * PLAN_PAIR_DYN > p->nr_positions)
		return 0;
	err = iters_paired(it, &pit);
	if (err)
		return err;
	wcls = malloc(t->nr + 1);
	if (!wcls) {
		iters_free(&pit);
		return sa_error(-ENOMEM, "planner: out of memory");
	}
	err = classify_best(t, &pit, align, exact, &w, &ws, wcls);
	if (!err)
		err = plan_load(p, &l1) ?: plan_load(&w, &l2);
	/* and only where no position planned a step at a time varies now */
	if (err || l2 + PLAN_PAIR_GAIN > l1 ||
	    w.nr_dyn > PLAN_PAIR * p->nr_dyn) {
		plan_release(&w);
		plan_seen_free(&ws);
		free(wcls);
		iters_free(&pit);
		return err;
	}
	w.stride = PLAN_PAIR;
	w.stride_pos = second_step(t, it, &pit, w.nr_positions);
	plan_release(p);
	*p = w;
	plan_seen_free(seen);
	*seen = ws;
	free(*cls);
	*cls = wcls;
	iters_free(it);
	*it = pit;
	return 0;
}

static int plan_trace(const char *path, uint64_t align,
		      const struct stalloc_plan_options *o,
		      struct stalloc_plan *p)
{
	bool exact = o->flags & STALLOC_PLAN_EXACT_CLOCK;
	struct plan_seen seen = { 0 };
	struct plan_iters it;
	uint8_t *cls = NULL;
	struct trace t;
	size_t k;
	int err;

	err = trace_load(path, &t);
	if (err)
		return err;
	err = iters_find(&t, &it);
	if (err)
		goto out_trace;
	cls = malloc(t.nr + 1);
	if (!cls) {
		err = sa_error(-ENOMEM, "planner: out of memory");
		goto out_iters;
	}
	err = classify_best(&t, &it, align, exact, p, &seen, cls);
	if (!err)
		err = plan_pairs(&t, &it, align, exact, p, &seen, &cls);
	if (err)
		goto out_iters;
	if (o->flags & STALLOC_PLAN_NO_PERSISTENT)
		drop_persistent(p);
	err = plan_pack(p, o, o->capacity);
	if (!err || err == -ENOSPC) {
		int rerr = plan_reuse(&t, &seen, p);

		if (!rerr)
			rerr = plan_bounds(&t, &it, cls, align,
					   !(o->flags &
					     STALLOC_PLAN_NO_PERSISTENT),
					   &p->sum);
		err = rerr ? rerr : err;
	}
	p->sum.requests = t.nr_allocs;
	p->sum.iterations = it.source == ITER_NONE ? 1 : it.nr;
	p->sum.iter_source = it.source == ITER_MARKERS ? STALLOC_ITER_MARKERS :
			     it.source == ITER_DETECTED ?
							 STALLOC_ITER_DETECTED :
							 STALLOC_ITER_NONE;
	p->sum.period_events = it.period;
	p->boundaries = malloc((it.nr + 1) * sizeof(*p->boundaries));
	if (!p->boundaries && !err)
		err = sa_error(-ENOMEM, "planner: out of memory");
	for (k = 0; p->boundaries && k < it.nr; k++)
		p->boundaries[k] = it.seq[k];
	p->nr_boundaries = p->boundaries ? it.nr : 0;
	plan_seen_free(&seen);
out_iters:
	free(cls);
	iters_free(&it);
out_trace:
	trace_free(&t);
	return err;
}

static int plan_csv(const char *path, uint64_t align,
		    const struct stalloc_plan_options *o,
		    struct stalloc_plan *p)
{
	struct csv_problem c;
	size_t i;
	int err;

	err = csv_load(path, &c);
	if (err)
		return err;
	p->ent = calloc(c.nr, sizeof(*p->ent));
	p->names = calloc(c.nr, sizeof(*p->names));
	if (!p->ent || !p->names) {
		err = sa_error(-ENOMEM, "planner: out of memory");
		goto out;
	}
	for (i = 0; i < c.nr; i++) {
		struct plan_entry *e = &p->ent[i];

		e->pos = (uint32_t)i;
		e->cls = PLAN_STATIC;
		e->start = c.bufs[i].start;
		e->end = c.bufs[i].end;
		if (!sa_round_up(c.bufs[i].size, align, &e->size)) {
			err = sa_error(-EINVAL,
				       "csv: %s: row %zu: size "
				       "overflows when aligned",
				       path, i + 1);
			goto out;
		}
		p->names[i] = c.ids[i];
		c.ids[i] = NULL;
	}
	p->nr_ent = c.nr;
	p->align = align;
	p->horizon = c.horizon;
	p->nr_positions = (uint32_t)c.nr;
	p->sum.requests = c.nr;
	p->sum.iter_source = STALLOC_ITER_CSV;
	err = plan_pack(p, o, o->capacity ? o->capacity : c.capacity);
out:
	csv_free(&c);
	return err;
}

/* The input's kind from its first non-empty line. */
static int sniff(const char *path, bool *is_trace)
{
	char line[256];
	FILE *f = fopen(path, "r");

	if (!f)
		return sa_error(errno == ENOENT ? -ENOENT : -EIO, "%s: %s",
				path, strerror(errno));
	*is_trace = false;
	while (fgets(line, sizeof(line), f)) {
		if (line[strspn(line, " \t\r\n")] == 0)
			continue;
		*is_trace = !strncmp(line, "stalloc-trace", 13);
		if (!strncmp(line, "stalloc-plan", 12)) {
			fclose(f);
			return sa_error(-EINVAL,
					"%s:1: this is a plan, not a "
					"trace or a CSV problem",
					path);
		}
		break;
	}
	fclose(f);
	return 0;
}

int stalloc_plan_file(const char *path, const struct stalloc_plan_options *opts,
		      struct stalloc_plan **out)
{
	struct stalloc_plan_options o = { 0 };
	struct stalloc_plan *p;
	double t0 = now_ms();
	bool is_trace;
	uint64_t align;
	int err;

	*out = NULL;
	if (opts)
		o = *opts;
	if (!o.budget_ms)
		o.budget_ms = PLAN_BUDGET_MS;
	if (!o.time_limit_ms)
		o.time_limit_ms =
			o.budget_ms <= PLAN_SAFETY_MS / 20 ? PLAN_SAFETY_MS :
			o.budget_ms < UINT64_MAX / 20	   ? 20 * o.budget_ms :
							     UINT64_MAX;
	if (o.align && !sa_is_pow2(o.align))
		return sa_error(-EINVAL,
				"planner: alignment %llu is not a "
				"power of two",
				(unsigned long long)o.align);
	err = sniff(path, &is_trace);
	if (err)
		return err;
	align = o.align ? o.align : is_trace ? PLAN_TRACE_ALIGN : 1;
	err = plan_alloc(&p);
	if (err)
		return err;
	err = is_trace ? plan_trace(path, align, &o, p) :
			 plan_csv(path, align, &o, p);
	if (err && err != -ENOSPC) {
		stalloc_plan_free(p);
		return err;
	}
	count_classes(p);
	p->sum.budget_ms = (double)o.budget_ms;
	p->sum.plan_ms = now_ms() - t0;
	*out = p;
	return err;
}

void stalloc_plan_summary(const struct stalloc_plan *p,
			  struct stalloc_plan_summary *sum)
{
	*sum = p->sum;
}

size_t stalloc_plan_boundaries(const struct stalloc_plan *p,
			       const uint64_t **seq)
{
	*seq = p->boundaries;
	return p->nr_boundaries;
}

int stalloc_plan_for_each_buffer(
	const struct stalloc_plan *p,
	int (*fn)(const struct stalloc_plan_buffer *buf, void *arg), void *arg)
{
	size_t i;
	int ret = 0;

	for (i = 0; i < p->nr_ent && !ret; i++) {
		const struct plan_entry *e = &p->ent[i];
		struct stalloc_plan_buffer b = {
			.id = p->names ? p->names[i] : NULL,
			.size = e->size,
			.offset = e->offset,
			.lower = e->start,
			.upper = e->end,
		};

		if (e->cls != PLAN_CROSS) {
			ret = fn(&b, arg);
			continue;
		}
		/* a wrap-around lifetime is two pieces at one address */
		b.upper = p->horizon;
		if (b.lower < b.upper)
			ret = fn(&b, arg);
		b.lower = 0;
		b.upper = e->end;
		if (!ret && b.upper > 0)
			ret = fn(&b, arg);
	}
	return ret;
}

void plan_release(struct stalloc_plan *p)
{
	size_t i;

	for (i = 0; p->names && i < p->nr_ent; i++)
		free(p->names[i]);
	free(p->names);
	free(p->ent);
	free(p->dyn);
	free(p->ranges);
	free(p->boundaries);
	memset(p, 0, sizeof(*p));
}

void stalloc_plan_free(struct stalloc_plan *p)
{
	if (!p)
		return;
	plan_release(p);
	free(p);
}
