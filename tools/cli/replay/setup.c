// SPDX-License-Identifier: MIT
/*
 * tools/cli/replay/setup.c - stalloc-replay's set-up before the replay
 *
 * Reads the trace once (prescan: allocation count, devices, each device's
 * peak of requested bytes live), makes or loads the plan, sets up
 * libstalloc (stalloc, off: the host backend, its size variables set from
 * the options) or the models of PyTorch's allocator (caching, expandable),
 * and reads the trace's "# torch:" comment.  Invariants: the peak of
 * requested bytes is the trace's own, the same for every policy.
 * Single-threaded; no locking.
 */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <stalloc/planner.h>
#include <stalloc/stalloc.h>
#include <stalloc/trace.h>

#include "tool.h"

#define DEFAULT_CAPACITY (1ULL << 40)
#define HOST_MEM_MIN (16ULL << 30)

/*
 * Count the allocations, check the devices, and find each device's peak
 * of requested bytes live.
 */
int prescan(struct replay *r)
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

uint64_t peak_requested(const struct replay *r)
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
 * --policy auto: auto mode traces into a directory of its own, under
 * $TMPDIR or /tmp (removed at the end with what it holds: the trace, the
 * plan), and plans at the
 * marker that ends the traced iterations (STALLOC_AUTO_SYNC), so that the
 * switch comes at the same place every run.
 */
/* The trace's "iteration" markers. */
static uint64_t iteration_marks(const struct replay *r)
{
	size_t i, n = stalloc_trace_count(r->t);
	struct stalloc_trace_event e;
	uint64_t k = 0;

	for (i = 0; i < n; i++) {
		stalloc_trace_get(r->t, i, &e);
		k += e.op != 'a' && e.op != 'f' && e.label &&
		     !strcmp(e.label, "iteration");
	}
	return k;
}

/*
 * --policy auto --plan PLAN: auto mode that switches to PLAN (not planned,
 * not checked: STALLOC_AUTO_PLAN) at the trace's second-to-last iteration
 * marker -- the iterations before it run as auto mode's traced ones, the
 * one after it is the hand-over.  This is how auto mode's check replays a
 * plan (planner/verify.c), on a trace that ends with the switching marker.
 */
static int setup_auto_plan(struct replay *r)
{
	uint64_t marks = iteration_marks(r);

	if (marks < 3) {
		fprintf(stderr,
			"stalloc-replay: %s: --policy auto --plan needs 3 "
			"iteration markers at least (%llu)\n",
			r->a->trace, (unsigned long long)marks);
		return 2;
	}
	set_size_env("STALLOC_AUTO_ITERS", marks - 2);
	setenv("STALLOC_AUTO_PLAN", r->a->plan, 1);
	snprintf(r->plan_path, sizeof(r->plan_path), "%s", r->a->plan);
	return 0;
}

static int setup_auto(struct replay *r)
{
	const char *tmp = getenv("TMPDIR");
	char pattern[sizeof(r->auto_dir) + 32];

	snprintf(r->auto_dir, sizeof(r->auto_dir),
		 "%.3000s/stalloc-replay-auto-XXXXXX",
		 tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(r->auto_dir)) {
		fprintf(stderr, "stalloc-replay: %s: %s\n", r->auto_dir,
			strerror(errno));
		r->auto_dir[0] = 0;
		return 1;
	}
	snprintf(pattern, sizeof(pattern), "%s/auto-%%d.trace", r->auto_dir);
	setenv("STALLOC_TRACE", pattern, 1);
	setenv("STALLOC_AUTO_SYNC", "1", 1);
	unsetenv("STALLOC_AUTO_PLAN");
	return r->a->plan ? setup_auto_plan(r) : 0;
}

/*
 * libstalloc reads its environment when a device is first used: set it
 * now.  The host device gets room for the plan's pool and twice the
 * trace's peak (at least the default 16 GiB; the memfd is sparse).
 */
int setup_stalloc(struct replay *r)
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
		/* none (one step, no period) or rejected by its check:
		 * the runtime runs as off */
		r->plan_rejected = sum.check == STALLOC_CHECK_REJECT;
		r->plan_steady = sum.static_requests > 0 && !r->plan_rejected;
		stalloc_plan_free(plan);
	}
	setenv("STALLOC_BACKEND", "host", 0);
	setenv("STALLOC_MODE",
	       a->policy == P_STALLOC ? "plan" :
	       a->policy == P_AUTO    ? "auto" :
					"off",
	       1);
	if (a->policy == P_STALLOC)
		setenv("STALLOC_PLAN", r->plan_path, 1);
	else
		unsetenv("STALLOC_PLAN");
	if (a->policy == P_AUTO) {
		err = setup_auto(r);
		if (err)
			return err;
	}
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

int setup_models(struct replay *r)
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
void read_torch_comment(struct replay *r)
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
bool torch_comparable(const struct replay *r)
{
	return r->torch.have_peak && r->torch.reserved_peak &&
	       (r->a->policy == P_CACHING || r->a->policy == P_EXPANDABLE) &&
	       !strcmp(r->torch.allocator, policy_name[r->a->policy]);
}
