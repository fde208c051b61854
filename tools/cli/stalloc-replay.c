// SPDX-License-Identifier: MIT
/*
 * tools/cli/stalloc-replay.c - replay a trace under stalloc or a model of
 * PyTorch's allocator, and compare what each holds
 *
 *   stalloc-replay [--policy stalloc|off|auto|caching|expandable]
 *                  [--plan PLAN]
 *                  [--json] [--addr-log FILE] [--segment-log FILE]
 *                  [--granularity BYTES]
 *                  [--capacity BYTES] [--max-split-size BYTES]
 *                  [--cache-limit BYTES] [--hold] TRACE
 *   stalloc-replay --compare [stalloc-import options] RECORD
 *
 * The trace's events are replayed in order, one device allocator per dev=
 * key.  stalloc, off and auto run the real libstalloc (public API only)
 * on the host backend (auto: STALLOC_MODE=auto with STALLOC_AUTO_SYNC, so
 * that it switches at the same marker every run); caching and expandable
 * run the models of
 * tools/cli/replay/.  Every address handed out is checked against the blocks
 * live at that moment (a tree of disjoint intervals: an overlap compares
 * equal, so one search finds it), and --addr-log writes them for an
 * independent check.  Peak requested bytes come from the trace itself, so
 * every policy is measured against the same figure.  This file holds the
 * options, the replay loop and main; tools/cli/replay/setup.c the set-up,
 * tools/cli/replay/report.c the results (tools/cli/replay/tool.h between them).
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
#include <dirent.h>
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

#include "replay/tool.h"

const char *const policy_name[NR_POLICIES] = {
	[P_STALLOC] = "stalloc", [P_OFF] = "off",
	[P_CACHING] = "caching", [P_EXPANDABLE] = "expandable",
	[P_AUTO] = "auto",
};

static const char usage[] =
	"usage: stalloc-replay [--policy stalloc|off|auto|caching|expandable]\n"
	"                      [--plan PLAN] [--json] [--addr-log FILE]\n"
	"                      [--granularity BYTES] [--capacity BYTES]\n"
	"                      [--max-split-size BYTES] [--cache-limit BYTES]\n"
	"                      [--hold] [--stamp] TRACE\n"
	"       stalloc-replay --compare [--device N] RECORD\n"
	"\n"
	"Replay TRACE's allocations and frees in order and report the peak\n"
	"bytes requested and reserved, fragmentation and plan hits.\n"
	"\n"
	"  -p, --policy P          stalloc (default): libstalloc with a plan;\n"
	"                          off: libstalloc without one; auto:\n"
	"                          libstalloc tracing the first iterations,\n"
	"                          planning them in-process and switching\n"
	"                          (STALLOC_MODE=auto); caching: model of\n"
	"                          PyTorch's CUDACachingAllocator;\n"
	"                          expandable: the same with\n"
	"                          expandable_segments:True\n"
	"  -P, --plan PLAN         stalloc: the plan (default: plan TRACE\n"
	"                          in-process into a temporary file); auto:\n"
	"                          switch to PLAN at the second-to-last\n"
	"                          iteration marker\n"
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
	"      --stamp             stalloc/off/auto: write each allocation's\n"
	"                          ID into its memory and check it is intact\n"
	"                          at its free (host backend or fake driver:\n"
	"                          finds memory shared or unmapped while\n"
	"                          live)\n"
	"      --stamp-clobber share:ID|unmap:ID\n"
	"                          --stamp, and plant a fault when ID is\n"
	"                          handed out (the checker's own test)\n"
	"  -H, --hold              stay alive after the replay until SIGINT\n"
	"                          or SIGTERM (stats stay queryable)\n"
	"      --compare           RECORD (a PyTorch snapshot pickle or\n"
	"                          profiler trace, or a trace): peak requested\n"
	"                          and reserved under caching, expandable,\n"
	"                          off and stalloc (runs stalloc-import)\n"
	"  -h, --help              this text\n"
	"\n"
	"Sizes take K, M, G, T suffixes.  Exit status: 0 replayed, 1 overlap,\n"
	"allocation failure or lost bytes, 2 usage or bad input.\n";

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

int idmap_init(struct idmap *m, size_t n)
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

void idmap_put(struct idmap *m, uint64_t key, size_t val)
{
	size_t i = hash64(key) & (m->cap - 1);

	while (m->used[i] && m->key[i] != key)
		i = (i + 1) & (m->cap - 1);
	m->used[i] = 1;
	m->key[i] = key;
	m->val[i] = val;
}

/* Take @key out, returning its value; backward-shift deletion. */
bool idmap_take(struct idmap *m, uint64_t key, size_t *val)
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

void idmap_free(struct idmap *m)
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

/* ------------------------------------------------------------ replay */

bool is_lib(const struct replay *r)
{
	return r->a->policy == P_STALLOC || r->a->policy == P_OFF ||
	       r->a->policy == P_AUTO;
}

uint64_t lib_hits(void)
{
	struct stalloc_stats st;
	uint64_t sum = 0;
	int d;

	for (d = 0; d < MAX_DEV; d++)
		if (!stalloc_stats(d, &st))
			sum += st.plan_hits;
	return sum;
}

/* Driver calls so far, over every device. */
static uint64_t lib_calls(void)
{
	struct stalloc_stats st;
	uint64_t sum = 0;
	int d;

	for (d = 0; d < MAX_DEV; d++)
		if (!stalloc_stats(d, &st))
			sum += st.driver_calls;
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
	r->calls_before_mark = r->calls_at_mark;
	r->calls_at_mark = lib_calls();
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
	rc->live = true;
	rc->start = addr;
	rc->end = addr + e->size;
	if (r->log)
		fprintf(r->log, "%" PRIu64 " 0x%" PRIx64 " %" PRIu64 "\n",
			e->id, addr, e->size);
	check_overlap(r, rc);
	if (r->a->stamp && is_lib(r)) {
		if (e->id > r->max_id)
			r->max_id = e->id;
		stamp_put(r, rc);
	}
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
	rc->live = false;
	if (rc->in_tree)
		tdelete(rc, &r->tree, cmp_interval);
	if (is_lib(r)) {
		if (r->a->stamp)
			stamp_check(r, rc, "before its free");
		stalloc_free((void *)(uintptr_t)rc->start, rc->end - rc->start,
			     rc->dev, (void *)(uintptr_t)e->stream);
	} else {
		cm_free(r->model[rc->dev], rc->blk);
	}
}

/* --stamp: the allocations still live at the end keep their bytes too. */
static void stamp_live(struct replay *r)
{
	size_t i;

	for (i = 0; i < r->allocs; i++)
		if (r->recs[i].live)
			stamp_check(r, &r->recs[i], "at the end");
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
		{ "stamp", no_argument, NULL, 'T' },
		{ "stamp-clobber", required_argument, NULL, 'C' },
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
						 "off, auto, caching, "
						 "expandable)",
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
		case 'T':
			a->stamp = true;
			break;
		case 'C':
			a->stamp = true;
			a->clobber = optarg;
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
	if (a->plan && a->policy != P_STALLOC && a->policy != P_AUTO)
		return bad_usage("--plan applies to --policy stalloc and auto "
				 "only",
				 a->plan);
	if (a->max_split && (a->policy == P_STALLOC || a->policy == P_OFF ||
			     a->policy == P_AUTO))
		return bad_usage("--max-split-size applies to the caching and "
				 "expandable models only",
				 NULL);
	if (a->seg_log && (a->policy == P_STALLOC || a->policy == P_OFF ||
			   a->policy == P_AUTO))
		return bad_usage("--segment-log applies to the caching and "
				 "expandable models only",
				 NULL);
	if (a->cache_limit && a->policy != P_STALLOC && a->policy != P_OFF &&
	    a->policy != P_AUTO)
		return bad_usage("--cache-limit applies to stalloc, off and "
				 "auto only",
				 NULL);
	if (a->granularity && a->policy != P_STALLOC && a->policy != P_OFF &&
	    a->policy != P_AUTO)
		return bad_usage("--granularity applies to stalloc, off and "
				 "auto only (the models use PyTorch's sizes)",
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

/* --policy auto: the trace and plan auto mode wrote, then the directory. */
static void remove_auto_dir(const char *dir)
{
	char path[4096 + 256 + 2];
	struct dirent *e;
	DIR *d = opendir(dir);

	while (d && (e = readdir(d)))
		if (strcmp(e->d_name, ".") != 0 &&
		    strcmp(e->d_name, "..") != 0) {
			snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
			unlink(path);
		}
	if (d)
		closedir(d);
	rmdir(dir);
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
	if (r->auto_dir[0])
		remove_auto_dir(r->auto_dir);
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
	if (a.stamp && stamp_init(a.clobber)) {
		rc = 2;
		goto out;
	}
	run(&r);
	if (a.stamp && is_lib(&r))
		stamp_live(&r);
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
	if (r.overlaps || r.failed || res.bad_frees || r.corrupt) {
		fprintf(stderr,
			"stalloc-replay: %s: %" PRIu64 " overlaps, %" PRIu64
			" failed allocations, %" PRIu64
			" refused frees, %" PRIu64
			" allocations that lost bytes\n",
			a.trace, r.overlaps, r.failed, res.bad_frees,
			r.corrupt);
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
