// SPDX-License-Identifier: MIT
/*
 * tools/stalloc-replay.c - replay a trace under stalloc or a model of
 * PyTorch's allocator, and compare what each holds
 *
 *   stalloc-replay [--policy stalloc|off|caching|expandable] [--plan PLAN]
 *                  [--json] [--addr-log FILE] [--segment-log FILE]
 *                  [--granularity BYTES]
 *                  [--capacity BYTES] [--max-split-size BYTES]
 *                  [--cache-limit BYTES] [--hold] TRACE
 *   stalloc-replay --compare [stalloc-import options] RECORD
 *
 * The trace's events are replayed in order, one device allocator per dev=
 * key.  stalloc and off run the real libstalloc (public API only) on the
 * host backend; caching and expandable run the models of
 * tools/replay/.  Every address handed out is checked against the blocks
 * live at that moment (a tree of disjoint intervals: an overlap compares
 * equal, so one search finds it), and --addr-log writes them for an
 * independent check.  Peak requested bytes come from the trace itself, so
 * every policy is measured against the same figure.
 *
 * --compare hands over to stalloc-import (found beside this program, else
 * in PATH), which imports a PyTorch snapshot or profiler trace, replays it
 * under every policy with this program and prints one table.
 *
 * Exit: 0 replayed; 1 two live blocks overlapped, an allocation failed or
 * a free was refused; 2 usage or bad input (an unknown policy, a missing
 * or malformed trace or plan, a plan made for another trace).
 * Single-threaded; with --hold, SIGINT and SIGTERM are blocked from the
 * start and taken with sigwait() once the replay is done.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <search.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <stalloc/planner.h>
#include <stalloc/stalloc.h>
#include <stalloc/trace.h>

#include "replay/replay.h"

#define MAX_DEV 16
#define DEFAULT_CAPACITY (1ULL << 40)
#define HOST_MEM_MIN (16ULL << 30)

enum policy { P_STALLOC, P_OFF, P_CACHING, P_EXPANDABLE, NR_POLICIES };

static const char *const policy_name[NR_POLICIES] = {
	[P_STALLOC] = "stalloc",
	[P_OFF] = "off",
	[P_CACHING] = "caching",
	[P_EXPANDABLE] = "expandable",
};

static const char usage[] =
	"usage: stalloc-replay [--policy stalloc|off|caching|expandable]\n"
	"                      [--plan PLAN] [--json] [--addr-log FILE]\n"
	"                      [--granularity BYTES] [--capacity BYTES]\n"
	"                      [--max-split-size BYTES] [--cache-limit BYTES]\n"
	"                      [--hold] TRACE\n"
	"       stalloc-replay --compare [--device N] RECORD\n"
	"\n"
	"Replay TRACE's allocations and frees in order and report the peak\n"
	"bytes requested and reserved, fragmentation and plan hits.\n"
	"\n"
	"  -p, --policy P          stalloc (default): libstalloc with a plan;\n"
	"                          off: libstalloc without one; caching:\n"
	"                          model of PyTorch's CUDACachingAllocator;\n"
	"                          expandable: the same with\n"
	"                          expandable_segments:True\n"
	"  -P, --plan PLAN         the plan (stalloc only; default: plan\n"
	"                          TRACE in-process into a temporary file)\n"
	"  -j, --json              print one JSON object\n"
	"  -a, --addr-log FILE     write \"ID ADDRESS SIZE\" per allocation\n"
	"  -S, --segment-log FILE  caching/expandable: write \"BASE SIZE\" per\n"
	"                          segment the model holds at the end\n"
	"  -g, --granularity B     stalloc/off: physical chunk size\n"
	"  -l, --cache-limit B     stalloc/off: STALLOC_CACHE_LIMIT (give the\n"
	"                          cache back past B bytes)\n"
	"  -c, --capacity B        device memory (default 1T); the models\n"
	"                          run out of memory past it, libstalloc\n"
	"                          gets it as STALLOC_PHYS_LIMIT\n"
	"  -s, --max-split-size B  caching/expandable: PyTorch's\n"
	"                          max_split_size_mb, in bytes (> 20M)\n"
	"  -H, --hold              stay alive after the replay until SIGINT\n"
	"                          or SIGTERM (stats stay queryable)\n"
	"      --compare           RECORD (a PyTorch snapshot pickle or\n"
	"                          profiler trace, or a trace): peak requested\n"
	"                          and reserved under caching, expandable,\n"
	"                          off and stalloc (runs stalloc-import)\n"
	"  -h, --help              this text\n"
	"\n"
	"Sizes take K, M, G, T suffixes.  Exit status: 0 replayed, 1 overlap\n"
	"or allocation failure, 2 usage or bad input.\n";

/*
 * What the real allocator did, from the trace's "# torch:" comment
 * (written by stalloc-import; Documentation/trace-format.rst).
 */
struct torch_rec {
	bool have_peak;
	uint64_t reserved_peak;
	uint64_t max_split;
	char allocator[16];
	char source[32];
};

struct args {
	const char *trace, *plan, *addr_log, *seg_log;
	int policy;
	bool json, hold;
	uint64_t granularity, capacity, max_split;
	const char *cache_limit;
};

/* One allocation of the trace. */
struct rec {
	uint64_t id, start, end;
	uint64_t stream;
	int dev;
	struct cm_block *blk;
	bool ok; /* served (else it failed and its free is skipped) */
	bool in_tree;
};

/* Trace ID -> index of its live allocation; open addressing. */
struct idmap {
	uint64_t *key;
	size_t *val;
	size_t cap; /* a power of two */
	unsigned char *used;
};

struct replay {
	const struct args *a;
	struct stalloc_trace *t;
	struct rec *recs;
	size_t nr_recs;
	struct idmap ids;
	struct torch_rec torch;
	void *tree;
	FILE *log;
	struct cmodel *model[MAX_DEV];
	bool used[MAX_DEV];
	uint64_t peak_req[MAX_DEV];
	char plan_path[4096];
	bool plan_tmp;
	bool plan_steady; /* the plan plans a steady iteration */
	/* counters */
	uint64_t allocs, frees, failed, overlaps, marks, iter_marks;
	uint64_t hits_at_mark, steady_allocs;
	double ms;
};

struct result {
	uint64_t peak_req, peak_res, hits, misses, dynamic, driver;
	uint64_t bad_frees;
	bool plan_dropped;
	bool has_peak; /* @peak: the runtime's peak accounting (summed) */
	struct stalloc_peak peak;
};

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* The peak accounting's fields, for printing (struct stalloc_peak). */
#define PEAK_FIELD(f)                                \
	{                                            \
#f, offsetof(struct stalloc_peak, f) \
	}
static const struct {
	const char *name;
	size_t off;
} peak_fields[] = {
	PEAK_FIELD(reserved),  PEAK_FIELD(requested), PEAK_FIELD(pool_used),
	PEAK_FIELD(pool_idle), PEAK_FIELD(dyn_live),  PEAK_FIELD(dyn_warmup),
	PEAK_FIELD(slabs),     PEAK_FIELD(dyn_free),  PEAK_FIELD(cached),
	PEAK_FIELD(allocs),
};
#undef PEAK_FIELD

static uint64_t peak_value(const struct stalloc_peak *p, size_t i)
{
	uint64_t v;

	memcpy(&v, (const char *)p + peak_fields[i].off, sizeof(v));
	return v;
}

/* Add @p's fields into @sum (several devices). */
static void peak_add(struct stalloc_peak *sum, const struct stalloc_peak *p)
{
	size_t i;

	for (i = 0; i < ARRAY_LEN(peak_fields); i++) {
		uint64_t v = peak_value(sum, i) + peak_value(p, i);

		memcpy((char *)sum + peak_fields[i].off, &v, sizeof(v));
	}
}

/* ------------------------------------------------------------ helpers */

static int bad_usage(const char *why, const char *what)
{
	fprintf(stderr, "stalloc-replay: %s%s%s\n%s", why, what ? ": " : "",
		what ? what : "", usage);
	return 2;
}

/* A size as the environment variables take it (stalloc_parse_size). */
static bool parse_size(const char *s, uint64_t *v)
{
	return stalloc_parse_size(s, v) == 0;
}

static bool is_pow2(uint64_t v)
{
	return v && !(v & (v - 1));
}

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static size_t hash64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	return (size_t)x;
}

static int idmap_init(struct idmap *m, size_t n)
{
	m->cap = 64;
	while (m->cap < 2 * n)
		m->cap *= 2;
	m->key = calloc(m->cap, sizeof(*m->key));
	m->val = calloc(m->cap, sizeof(*m->val));
	m->used = calloc(m->cap, 1);
	if (m->key && m->val && m->used)
		return 0;
	free(m->key);
	free(m->val);
	free(m->used);
	memset(m, 0, sizeof(*m));
	return -ENOMEM;
}

static void idmap_put(struct idmap *m, uint64_t key, size_t val)
{
	size_t i = hash64(key) & (m->cap - 1);

	while (m->used[i] && m->key[i] != key)
		i = (i + 1) & (m->cap - 1);
	m->used[i] = 1;
	m->key[i] = key;
	m->val[i] = val;
}

/* Take @key out, returning its value; backward-shift deletion. */
static bool idmap_take(struct idmap *m, uint64_t key, size_t *val)
{
	size_t mask = m->cap - 1, i = hash64(key) & mask, j;

	while (m->used[i] && m->key[i] != key)
		i = (i + 1) & mask;
	if (!m->used[i])
		return false;
	*val = m->val[i];
	m->used[i] = 0;
	for (j = (i + 1) & mask; m->used[j]; j = (j + 1) & mask) {
		size_t home = hash64(m->key[j]) & mask;

		/* move j back to i unless its home lies in (i, j] */
		if (((j - home) & mask) < ((j - i) & mask))
			continue;
		m->key[i] = m->key[j];
		m->val[i] = m->val[j];
		m->used[i] = 1;
		m->used[j] = 0;
		i = j;
	}
	return true;
}

static void idmap_free(struct idmap *m)
{
	free(m->key);
	free(m->val);
	free(m->used);
}

/* Disjoint intervals are ordered; overlapping ones compare equal. */
static int cmp_interval(const void *pa, const void *pb)
{
	const struct rec *a = pa, *b = pb;

	if (a->end <= b->start)
		return -1;
	if (b->end <= a->start)
		return 1;
	return 0;
}

static void no_free(void *p)
{
	(void)p;
}

/* ------------------------------------------------------------ set-up */

/*
 * Count the allocations, check the devices, and find each device's peak
 * of requested bytes live.
 */
static int prescan(struct replay *r)
{
	size_t i, n = stalloc_trace_count(r->t);
	uint64_t live[MAX_DEV] = { 0 };
	int *dev_of;
	struct idmap m;
	struct stalloc_trace_event e;

	for (i = 0; i < n; i++) {
		stalloc_trace_get(r->t, i, &e);
		if (e.op == 'a')
			r->nr_recs++;
	}
	dev_of = calloc(r->nr_recs + 1, sizeof(*dev_of));
	if (!dev_of || idmap_init(&m, r->nr_recs)) {
		free(dev_of);
		fputs("stalloc-replay: out of host memory\n", stderr);
		return 1;
	}
	r->nr_recs = 0;
	for (i = 0; i < n; i++) {
		size_t k;

		stalloc_trace_get(r->t, i, &e);
		if (e.op == 'a') {
			if (e.dev < 0 || e.dev >= MAX_DEV) {
				fprintf(stderr,
					"stalloc-replay: %s: allocation %" PRIu64
					" (seq %" PRIu64
					"): device %d out of range (0-%d)\n",
					r->a->trace, e.id, e.seq, e.dev,
					MAX_DEV - 1);
				free(dev_of);
				idmap_free(&m);
				return 2;
			}
			dev_of[r->nr_recs] = e.dev;
			idmap_put(&m, e.id, r->nr_recs++);
			r->used[e.dev] = true;
			live[e.dev] += e.size;
			if (live[e.dev] > r->peak_req[e.dev])
				r->peak_req[e.dev] = live[e.dev];
		} else if (e.op == 'f' && idmap_take(&m, e.id, &k)) {
			live[dev_of[k]] -= e.size;
		}
	}
	free(dev_of);
	idmap_free(&m);
	return 0;
}

static uint64_t peak_requested(const struct replay *r)
{
	uint64_t sum = 0;
	int d;

	for (d = 0; d < MAX_DEV; d++)
		sum += r->peak_req[d];
	return sum;
}

/* Plan TRACE in-process into a temporary file. */
static int plan_in_process(struct replay *r)
{
	const char *dir = getenv("TMPDIR");
	struct stalloc_plan *plan;
	int fd, err;

	snprintf(r->plan_path, sizeof(r->plan_path), "%s/stalloc-replay-XXXXXX",
		 dir && *dir ? dir : "/tmp");
	err = stalloc_plan_file(r->a->trace, NULL, &plan);
	if (err) {
		fprintf(stderr, "stalloc-replay: cannot plan %s: %s\n",
			r->a->trace, stalloc_last_error());
		return err == -EINVAL || err == -ENOENT ? 2 : 1;
	}
	fd = mkstemp(r->plan_path);
	if (fd < 0) {
		fprintf(stderr, "stalloc-replay: %s: %s\n", r->plan_path,
			strerror(errno));
		stalloc_plan_free(plan);
		return 1;
	}
	close(fd);
	r->plan_tmp = true;
	err = stalloc_plan_write(plan, r->plan_path);
	stalloc_plan_free(plan);
	if (err) {
		fprintf(stderr, "stalloc-replay: cannot write %s: %s\n",
			r->plan_path, stalloc_last_error());
		return 1;
	}
	return 0;
}

static void set_size_env(const char *name, uint64_t v)
{
	char buf[32];

	snprintf(buf, sizeof(buf), "%" PRIu64, v);
	setenv(name, buf, 1);
}

/*
 * libstalloc reads its environment when a device is first used: set it
 * now.  The host device gets room for the plan's pool and twice the
 * trace's peak (at least the default 16 GiB; the memfd is sparse).
 */
static int setup_stalloc(struct replay *r)
{
	const struct args *a = r->a;
	uint64_t pool = 0, need, mem = HOST_MEM_MIN;
	int err;

	if (a->policy == P_STALLOC) {
		struct stalloc_plan *plan;
		struct stalloc_plan_summary sum;

		if (a->plan) {
			snprintf(r->plan_path, sizeof(r->plan_path), "%s",
				 a->plan);
		} else {
			err = plan_in_process(r);
			if (err)
				return err;
		}
		/* the runtime would only warn: a bad plan is bad input */
		if (stalloc_plan_read(r->plan_path, &plan)) {
			fprintf(stderr, "stalloc-replay: %s\n",
				stalloc_last_error());
			return 2;
		}
		stalloc_plan_summary(plan, &sum);
		pool = sum.peak;
		/* none (one step, no period): the runtime runs as off */
		r->plan_steady = sum.static_requests > 0;
		stalloc_plan_free(plan);
	}
	setenv("STALLOC_BACKEND", "host", 0);
	setenv("STALLOC_MODE", a->policy == P_STALLOC ? "plan" : "off", 1);
	if (a->policy == P_STALLOC)
		setenv("STALLOC_PLAN", r->plan_path, 1);
	else
		unsetenv("STALLOC_PLAN");
	if (a->granularity) {
		set_size_env("STALLOC_CHUNK_SIZE", a->granularity);
		if (a->granularity < (2ULL << 20))
			set_size_env("STALLOC_HOST_GRANULARITY",
				     a->granularity);
	}
	need = 2 * (pool + peak_requested(r));
	if (a->capacity)
		need = need > a->capacity ? need : a->capacity;
	while (mem < need && mem < (1ULL << 46))
		mem *= 2;
	if (!stalloc_option_string("STALLOC_HOST_MEM")) /* unset */
		set_size_env("STALLOC_HOST_MEM", mem);
	if (a->capacity)
		set_size_env("STALLOC_PHYS_LIMIT", a->capacity);
	if (a->cache_limit)
		setenv("STALLOC_CACHE_LIMIT", a->cache_limit, 1);
	/* the runtime's warnings (a plan for another workload) are ours */
	setenv("STALLOC_LOG", "warn", 0); /* unless the user chose */
	return 0;
}

static int setup_models(struct replay *r)
{
	struct cm_config cfg = {
		.kind = r->a->policy == P_EXPANDABLE ? CM_EXPANDABLE :
						       CM_CACHING,
		.capacity = r->a->capacity ? r->a->capacity : DEFAULT_CAPACITY,
		.max_split_size = CM_UNLIMITED,
	};
	int d;

	/* the option, else the recorded allocator's setting */
	if (r->a->max_split)
		cfg.max_split_size = r->a->max_split;
	else if (r->torch.max_split > CM_LARGE_BUFFER)
		cfg.max_split_size = r->torch.max_split;

	for (d = 0; d < MAX_DEV; d++) {
		if (!r->used[d])
			continue;
		r->model[d] = cm_create(&cfg);
		if (!r->model[d]) {
			fputs("stalloc-replay: out of host memory\n", stderr);
			return 1;
		}
	}
	return 0;
}

/* One "key=value" of a "# torch:" comment. */
static void torch_key(struct torch_rec *t, const char *kv)
{
	const char *v = strchr(kv, '=');
	size_t klen;
	uint64_t n;

	if (!v)
		return;
	klen = (size_t)(v++ - kv);
	if (klen == 13 && !strncmp(kv, "reserved_peak", klen)) {
		if (!stalloc_parse_size(v, &n)) {
			t->reserved_peak = n;
			t->have_peak = true;
		}
	} else if (klen == 14 && !strncmp(kv, "max_split_size", klen)) {
		if (!stalloc_parse_size(v, &n))
			t->max_split = n;
	} else if (klen == 9 && !strncmp(kv, "allocator", klen)) {
		snprintf(t->allocator, sizeof(t->allocator), "%s", v);
	} else if (klen == 15 && !strncmp(kv, "reserved_source", klen)) {
		snprintf(t->source, sizeof(t->source), "%s", v);
	}
}

/*
 * The "# torch:" comment among the lines before the first event; the
 * trace reader has checked the file already, so this only reads.
 */
static void read_torch_comment(struct replay *r)
{
	struct torch_rec *t = &r->torch;
	FILE *f = fopen(r->a->trace, "r");
	char *line = NULL, *tok, *save;
	size_t cap = 0;

	snprintf(t->allocator, sizeof(t->allocator), "caching");
	if (!f)
		return;
	while (getline(&line, &cap, f) > 0) {
		line[strcspn(line, "\r\n")] = '\0';
		if (!strncmp(line, "stalloc-trace", 13) || !line[0])
			continue;
		if (line[0] != '#')
			break;
		if (strncmp(line, "# torch:", 8) != 0)
			continue;
		for (tok = strtok_r(line + 8, " \t", &save); tok;
		     tok = strtok_r(NULL, " \t", &save))
			torch_key(t, tok);
	}
	free(line);
	fclose(f);
}

/* The model's reserved peak against the recorded one, when comparable. */
static bool torch_comparable(const struct replay *r)
{
	return r->torch.have_peak && r->torch.reserved_peak &&
	       (r->a->policy == P_CACHING || r->a->policy == P_EXPANDABLE) &&
	       !strcmp(r->torch.allocator, policy_name[r->a->policy]);
}

/* ------------------------------------------------------------ replay */

static bool is_lib(const struct replay *r)
{
	return r->a->policy == P_STALLOC || r->a->policy == P_OFF;
}

static uint64_t lib_hits(void)
{
	struct stalloc_stats st;
	uint64_t sum = 0;
	int d;

	for (d = 0; d < MAX_DEV; d++)
		if (!stalloc_stats(d, &st))
			sum += st.plan_hits;
	return sum;
}

static void on_mark(struct replay *r, const struct stalloc_trace_event *e)
{
	const char *label = e->label ? e->label : "mark";

	r->marks++;
	if (!is_lib(r)) {
		int d;

		/* PyTorch's emptyCache(), seen by stalloc-import */
		if (!strcmp(label, "empty_cache"))
			for (d = 0; d < MAX_DEV; d++)
				if (r->model[d])
					cm_empty_cache(r->model[d]);
		return;
	}
	stalloc_mark(label);
	if (strcmp(label, "iteration") != 0)
		return;
	r->iter_marks++;
	r->hits_at_mark = lib_hits();
	r->steady_allocs = 0;
}

static void check_overlap(struct replay *r, struct rec *rc)
{
	void **node = tsearch(rc, &r->tree, cmp_interval);
	const struct rec *o;

	if (!node) {
		fputs("stalloc-replay: out of host memory\n", stderr);
		exit(1);
	}
	o = *node;
	if (o == rc) {
		rc->in_tree = true;
		return;
	}
	r->overlaps++;
	fprintf(stderr,
		"stalloc-replay: %s: allocation %" PRIu64 " [0x%" PRIx64
		", 0x%" PRIx64 ") overlaps live allocation %" PRIu64
		" [0x%" PRIx64 ", 0x%" PRIx64 ")\n",
		r->a->trace, rc->id, rc->start, rc->end, o->id, o->start,
		o->end);
}

static void on_alloc(struct replay *r, const struct stalloc_trace_event *e)
{
	struct rec *rc = &r->recs[r->allocs++];
	uint64_t addr = 0;
	int err = 0;

	rc->id = e->id;
	rc->stream = e->stream;
	rc->dev = e->dev;
	idmap_put(&r->ids, e->id, (size_t)(rc - r->recs));
	r->steady_allocs++;
	if (is_lib(r)) {
		void *p = stalloc_malloc(e->size, e->dev,
					 (void *)(uintptr_t)e->stream);

		addr = (uintptr_t)p;
		err = p ? 0 : -ENOMEM;
	} else {
		err = cm_malloc(r->model[e->dev], e->size, e->stream, &rc->blk,
				&addr);
	}
	if (err) {
		if (!r->failed++)
			fprintf(stderr,
				"stalloc-replay: %s: allocation %" PRIu64
				" of %" PRIu64 " bytes (seq %" PRIu64
				") failed: %s\n",
				r->a->trace, e->id, e->size, e->seq,
				is_lib(r) ? stalloc_last_error() :
					    "out of memory (--capacity)");
		if (r->log)
			fprintf(r->log, "%" PRIu64 " - %" PRIu64 "\n", e->id,
				e->size);
		return;
	}
	rc->ok = true;
	rc->start = addr;
	rc->end = addr + e->size;
	if (r->log)
		fprintf(r->log, "%" PRIu64 " 0x%" PRIx64 " %" PRIu64 "\n",
			e->id, addr, e->size);
	check_overlap(r, rc);
}

static void on_free(struct replay *r, const struct stalloc_trace_event *e)
{
	struct rec *rc;
	size_t k;

	if (!idmap_take(&r->ids, e->id, &k))
		return; /* the trace reader refuses such traces */
	rc = &r->recs[k];
	r->frees++;
	if (!rc->ok)
		return;
	if (rc->in_tree)
		tdelete(rc, &r->tree, cmp_interval);
	if (is_lib(r))
		stalloc_free((void *)(uintptr_t)rc->start, rc->end - rc->start,
			     rc->dev, (void *)(uintptr_t)e->stream);
	else
		cm_free(r->model[rc->dev], rc->blk);
}

static void run(struct replay *r)
{
	size_t i, n = stalloc_trace_count(r->t);
	struct stalloc_trace_event e;
	double t0 = now_ms();

	for (i = 0; i < n; i++) {
		stalloc_trace_get(r->t, i, &e);
		if (e.op == 'a')
			on_alloc(r, &e);
		else if (e.op == 'f')
			on_free(r, &e);
		else
			on_mark(r, &e);
	}
	r->ms = now_ms() - t0;
}

/* ------------------------------------------------------------ report */

static void collect(const struct replay *r, struct result *res)
{
	int d;

	memset(res, 0, sizeof(*res));
	res->peak_req = peak_requested(r);
	for (d = 0; d < MAX_DEV; d++) {
		if (!r->used[d])
			continue;
		if (is_lib(r)) {
			struct stalloc_stats st;
			struct stalloc_peak pk;

			if (stalloc_stats(d, &st))
				continue;
			if (!stalloc_peak(d, &pk)) {
				peak_add(&res->peak, &pk);
				res->has_peak = true;
			}
			res->peak_res += st.reserved_peak;
			res->hits += st.plan_hits;
			res->misses += st.plan_misses;
			res->driver += st.driver_calls;
			res->bad_frees += st.bad_frees;
		} else {
			struct cm_stats st;

			cm_get_stats(r->model[d], &st);
			res->peak_res += st.reserved_peak;
			res->driver += cm_driver_calls(&st);
		}
	}
	res->dynamic = r->allocs - r->failed - res->hits;
	/*
	 * A plan the runtime dropped (made for another workload) serves
	 * nothing after the first planned iteration: the last iteration
	 * then has requests and no hit.
	 */
	res->plan_dropped =
		r->a->policy == P_STALLOC && r->plan_steady &&
		(!res->hits || (r->iter_marks >= 2 && r->steady_allocs &&
				lib_hits() == r->hits_at_mark));
}

static double frag(const struct result *res)
{
	return res->peak_res ? ((double)res->peak_res - (double)res->peak_req) /
				       (double)res->peak_res :
			       0.0;
}

static double util(const struct result *res)
{
	return res->peak_res ? (double)res->peak_req / (double)res->peak_res :
			       0.0;
}

static void json_string(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
}

static void print_torch_json(const struct replay *r, const struct result *res)
{
	if (!r->torch.have_peak) {
		printf(", \"torch_reserved_peak_bytes\": null");
		return;
	}
	printf(", \"torch_reserved_peak_bytes\": %" PRIu64
	       ", \"torch_allocator\": ",
	       r->torch.reserved_peak);
	json_string(r->torch.allocator);
	printf(", \"torch_reserved_source\": ");
	json_string(r->torch.source);
	if (torch_comparable(r))
		printf(", \"model_vs_torch\": %.6f",
		       (double)res->peak_res / (double)r->torch.reserved_peak -
			       1.0);
	else
		printf(", \"model_vs_torch\": null");
}

static void print_json(const struct replay *r, const struct result *res)
{
	printf("{\"trace\": ");
	json_string(r->a->trace);
	printf(", \"policy\": \"%s\", \"plan\": ", policy_name[r->a->policy]);
	if (r->a->policy == P_STALLOC && !r->plan_tmp)
		json_string(r->plan_path);
	else
		printf(r->a->policy == P_STALLOC ? "\"(in-process)\"" : "null");
	printf(", \"allocs\": %" PRIu64 ", \"frees\": %" PRIu64
	       ", \"markers\": %" PRIu64 ", \"failed_allocs\": %" PRIu64
	       ", \"overlaps\": %" PRIu64 ", \"bad_frees\": %" PRIu64,
	       r->allocs, r->frees, r->marks, r->failed, r->overlaps,
	       res->bad_frees);
	printf(", \"peak_requested_bytes\": %" PRIu64
	       ", \"peak_reserved_bytes\": %" PRIu64
	       ", \"fragmentation\": %.6f, \"utilisation\": %.6f",
	       res->peak_req, res->peak_res, frag(res), util(res));
	print_torch_json(r, res);
	printf(", \"plan_hits\": %" PRIu64 ", \"plan_misses\": %" PRIu64
	       ", \"plan_dropped\": %s, \"dynamic_allocs\": %" PRIu64
	       ", \"driver_calls\": %" PRIu64,
	       res->hits, res->misses, res->plan_dropped ? "true" : "false",
	       res->dynamic, res->driver);
	if (res->has_peak) {
		size_t i;

		printf(", \"peak_accounting\": {");
		for (i = 0; i < ARRAY_LEN(peak_fields); i++)
			printf("%s\"%s\": %" PRIu64, i ? ", " : "",
			       peak_fields[i].name, peak_value(&res->peak, i));
		printf("}");
	}
	printf(", \"replay_ms\": %.3f}\n", r->ms);
}

static void human(uint64_t b, char *buf, size_t n)
{
	if (b >= (1ULL << 30))
		snprintf(buf, n, "%.2f GiB", (double)b / (1ULL << 30));
	else
		snprintf(buf, n, "%.1f MiB", (double)b / (1ULL << 20));
}

static void print_summary(const struct replay *r, const struct result *res)
{
	char h[32];

	printf("%-16s %s\n", "trace", r->a->trace);
	printf("%-16s %s", "policy", policy_name[r->a->policy]);
	if (r->a->policy == P_STALLOC)
		printf(" (plan %s)",
		       r->plan_tmp ? "made in-process" : r->plan_path);
	printf("\n%-16s %" PRIu64 " allocations, %" PRIu64 " frees, %" PRIu64
	       " markers\n",
	       "events", r->allocs, r->frees, r->marks);
	human(res->peak_req, h, sizeof(h));
	printf("%-16s %14" PRIu64 " B  (%s)\n", "peak requested", res->peak_req,
	       h);
	human(res->peak_res, h, sizeof(h));
	printf("%-16s %14" PRIu64 " B  (%s)\n", "peak reserved", res->peak_res,
	       h);
	if (r->torch.have_peak) {
		human(r->torch.reserved_peak, h, sizeof(h));
		printf("%-16s %14" PRIu64 " B  (%s, recorded, %s, %s)\n",
		       "torch reserved", r->torch.reserved_peak, h,
		       r->torch.allocator, r->torch.source);
		if (torch_comparable(r))
			printf("%-16s %+13.2f %%\n", "model vs torch",
			       100.0 * ((double)res->peak_res /
						(double)r->torch.reserved_peak -
					1.0));
	}
	printf("%-16s %14.4f\n", "fragmentation", frag(res));
	printf("%-16s %14.4f\n", "utilisation", util(res));
	printf("%-16s %14" PRIu64 "\n", "plan hits", res->hits);
	printf("%-16s %14" PRIu64 "\n", "plan misses", res->misses);
	printf("%-16s %14" PRIu64 "\n", "dynamic allocs", res->dynamic);
	printf("%-16s %14" PRIu64 "\n", "driver calls", res->driver);
	printf("%-16s %14" PRIu64 "\n", "failed allocs", r->failed);
	printf("%-16s %14" PRIu64 "\n", "overlaps", r->overlaps);
	printf("%-16s %14.3f ms\n", "replay", r->ms);
	if (res->has_peak) {
		size_t i;

		printf("at the reserved peak (allocation %" PRIu64 "):\n",
		       res->peak.allocs);
		for (i = 0; i + 1 < ARRAY_LEN(peak_fields); i++) {
			human(peak_value(&res->peak, i), h, sizeof(h));
			printf("  %-14s %14" PRIu64 " B  (%s)\n",
			       peak_fields[i].name, peak_value(&res->peak, i),
			       h);
		}
	}
}

/* ------------------------------------------------------------ main */

static int parse_args(int argc, char **argv, struct args *a)
{
	static const struct option opts[] = {
		{ "policy", required_argument, NULL, 'p' },
		{ "plan", required_argument, NULL, 'P' },
		{ "json", no_argument, NULL, 'j' },
		{ "addr-log", required_argument, NULL, 'a' },
		{ "segment-log", required_argument, NULL, 'S' },
		{ "granularity", required_argument, NULL, 'g' },
		{ "capacity", required_argument, NULL, 'c' },
		{ "max-split-size", required_argument, NULL, 's' },
		{ "cache-limit", required_argument, NULL, 'l' },
		{ "hold", no_argument, NULL, 'H' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	uint64_t v;
	int c, i;

	a->policy = P_STALLOC;
	while ((c = getopt_long(argc, argv, "p:P:ja:S:g:c:s:l:Hh", opts,
				NULL)) != -1) {
		switch (c) {
		case 'p':
			for (i = 0; i < NR_POLICIES; i++)
				if (!strcmp(optarg, policy_name[i]))
					break;
			if (i == NR_POLICIES)
				return bad_usage("unknown policy (stalloc, "
						 "off, caching, expandable)",
						 optarg);
			a->policy = i;
			break;
		case 'P':
			a->plan = optarg;
			break;
		case 'j':
			a->json = true;
			break;
		case 'a':
			a->addr_log = optarg;
			break;
		case 'S':
			a->seg_log = optarg;
			break;
		case 'g':
			if (!parse_size(optarg, &a->granularity) ||
			    !(is_pow2(a->granularity) ?
				      a->granularity >= 4096 :
				      !(a->granularity % (2ULL << 20))))
				return bad_usage("bad --granularity (a power "
						 "of two of at least 4K, or "
						 "a multiple of 2M)",
						 optarg);
			break;
		case 'c':
			if (!parse_size(optarg, &a->capacity) ||
			    a->capacity < (2ULL << 20))
				return bad_usage("bad --capacity (at least 2M)",
						 optarg);
			break;
		case 's':
			/* PyTorch: max_split_size_mb must be > 20 */
			if (!parse_size(optarg, &a->max_split) ||
			    a->max_split <= CM_LARGE_BUFFER)
				return bad_usage("bad --max-split-size (more "
						 "than 20M)",
						 optarg);
			break;
		case 'l':
			if (!parse_size(optarg, &v))
				return bad_usage("bad --cache-limit", optarg);
			a->cache_limit = optarg;
			break;
		case 'H':
			a->hold = true;
			break;
		case 'h':
			fputs(usage, stdout);
			exit(0);
		default:
			return bad_usage("bad option", NULL);
		}
	}
	if (optind != argc - 1)
		return bad_usage(optind < argc ? "one trace only" : "no trace",
				 NULL);
	a->trace = argv[optind];
	if (a->plan && a->policy != P_STALLOC)
		return bad_usage("--plan applies to --policy stalloc only",
				 a->plan);
	if (a->max_split && (a->policy == P_STALLOC || a->policy == P_OFF))
		return bad_usage("--max-split-size applies to the caching and "
				 "expandable models only",
				 NULL);
	if (a->seg_log && (a->policy == P_STALLOC || a->policy == P_OFF))
		return bad_usage("--segment-log applies to the caching and "
				 "expandable models only",
				 NULL);
	if (a->cache_limit && a->policy != P_STALLOC && a->policy != P_OFF)
		return bad_usage(
			"--cache-limit applies to stalloc and off only", NULL);
	if (a->granularity && a->policy != P_STALLOC && a->policy != P_OFF)
		return bad_usage("--granularity applies to stalloc and off "
				 "only (the models use PyTorch's sizes)",
				 NULL);
	return 0;
}

/*
 * --compare: exec stalloc-import --compare with the other arguments,
 * telling it to replay with this very program.
 */
static int run_compare(int argc, char **argv)
{
	static char prog[] = "stalloc-import", opt[] = "--compare";
	char self[4096], tool[4096 + 32], *slash;
	char **args = calloc((size_t)argc + 2, sizeof(*args));
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	int i, k = 0;

	if (!args) {
		fputs("stalloc-replay: out of host memory\n", stderr);
		return 1;
	}
	args[k++] = prog;
	args[k++] = opt;
	for (i = 1; i < argc; i++)
		if (strcmp(argv[i], "--compare") != 0)
			args[k++] = argv[i];
	args[k] = NULL;
	if (n > 0) {
		self[n] = '\0';
		setenv("STALLOC_REPLAY", self, 0);
		slash = strrchr(self, '/');
		if (slash) {
			*slash = '\0';
			snprintf(tool, sizeof(tool), "%s/stalloc-import", self);
			if (!access(tool, X_OK))
				execv(tool, args);
		}
	}
	execvp("stalloc-import", args);
	fprintf(stderr, "stalloc-replay: --compare needs stalloc-import: %s\n",
		strerror(errno));
	free(args);
	return 2;
}

static void log_segment(void *arg, uint64_t base, uint64_t size)
{
	fprintf(arg, "0x%" PRIx64 " %" PRIu64 "\n", base, size);
}

/* --segment-log: the models' segments at the end. */
static int write_segments(const struct replay *r)
{
	FILE *f = fopen(r->a->seg_log, "w");
	int d;

	if (!f) {
		fprintf(stderr, "stalloc-replay: %s: %s\n", r->a->seg_log,
			strerror(errno));
		return 1;
	}
	for (d = 0; d < MAX_DEV; d++)
		if (r->model[d])
			cm_segments(r->model[d], log_segment, f);
	if (fclose(f)) {
		fprintf(stderr, "stalloc-replay: %s: %s\n", r->a->seg_log,
			strerror(errno));
		return 1;
	}
	return 0;
}

static void hold(void)
{
	sigset_t set;
	int sig;

	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	printf("stalloc-replay: holding, pid %d\n", (int)getpid());
	fflush(stdout);
	sigwait(&set, &sig);
}

static void block_signals(void)
{
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	/* before libstalloc starts a thread, so every thread inherits it */
	pthread_sigmask(SIG_BLOCK, &set, NULL);
}

static void cleanup(struct replay *r)
{
	int d;

	if (is_lib(r))
		stalloc_shutdown();
	for (d = 0; d < MAX_DEV; d++)
		cm_destroy(r->model[d]);
	if (r->plan_tmp)
		unlink(r->plan_path);
	tdestroy(r->tree, no_free);
	idmap_free(&r->ids);
	free(r->recs);
	stalloc_trace_free(r->t);
}

static int setup(struct replay *r)
{
	int err = stalloc_trace_load(r->a->trace, &r->t);

	if (err) {
		fprintf(stderr, "stalloc-replay: %s\n", stalloc_last_error());
		return 2;
	}
	read_torch_comment(r);
	err = prescan(r);
	if (err)
		return err;
	r->recs = calloc(r->nr_recs + 1, sizeof(*r->recs));
	if (!r->recs || idmap_init(&r->ids, r->nr_recs)) {
		fputs("stalloc-replay: out of host memory\n", stderr);
		return 1;
	}
	return is_lib(r) ? setup_stalloc(r) : setup_models(r);
}

int main(int argc, char **argv)
{
	struct args a = { 0 };
	struct replay r = { .a = &a };
	struct result res;
	int rc, i;

	for (i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--compare"))
			return run_compare(argc, argv);
	rc = parse_args(argc, argv, &a);
	if (rc)
		return rc;
	if (a.hold)
		block_signals();
	rc = setup(&r);
	if (rc)
		goto out;
	if (a.addr_log) {
		r.log = fopen(a.addr_log, "w");
		if (!r.log) {
			fprintf(stderr, "stalloc-replay: %s: %s\n", a.addr_log,
				strerror(errno));
			rc = 2;
			goto out;
		}
	}
	run(&r);
	if (r.log && fclose(r.log)) {
		fprintf(stderr, "stalloc-replay: %s: %s\n", a.addr_log,
			strerror(errno));
		rc = 1;
	}
	r.log = NULL;
	if (a.seg_log && write_segments(&r))
		rc = 1;
	collect(&r, &res);
	if (a.json)
		print_json(&r, &res);
	else
		print_summary(&r, &res);
	fflush(stdout);
	if (r.overlaps || r.failed || res.bad_frees) {
		fprintf(stderr,
			"stalloc-replay: %s: %" PRIu64 " overlaps, %" PRIu64
			" failed allocations, %" PRIu64 " refused frees\n",
			a.trace, r.overlaps, r.failed, res.bad_frees);
		rc = 1;
	} else if (res.plan_dropped) {
		fprintf(stderr,
			"stalloc-replay: %s: the plan %s does not fit this "
			"trace (made for another workload?): the runtime "
			"dropped it and replayed in off mode\n",
			a.trace, a.plan ? a.plan : "made in-process");
		rc = 2;
	}
	if (a.hold)
		hold();
out:
	cleanup(&r);
	return rc;
}
