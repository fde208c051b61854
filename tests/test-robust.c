// SPDX-License-Identifier: MIT
/*
 * tests/test-robust.c - replayed real traces under driver faults and
 * perturbations
 *
 * The shared CPU-training traces (the .trace files of
 * $SHARED/workloads/cpu-torch) are planned first, then replayed through the public allocator entry points
 * (tests/robust-common.h checks every block against the blocks live at
 * that moment).
 *
 * fault sweep (argument "faults", fake driver): for plan mode and off mode,
 * a clean replay counts the driver calls C of a replay plus tear-down;
 * then for N = 1 + ROBUST_FAULT_OFFSET, then every ROBUST_FAULT_STEP (default
 * 50; 1 sweeps every N) up to C, the Nth call fails, alternately with
 * CUDA_ERROR_OUT_OF_MEMORY and CUDA_ERROR_UNKNOWN.
 * Each replay must see no overlap and no corrupted block, the allocator
 * may only answer NULL or serve the request elsewhere (a planned request
 * served dynamically is a fallback), and after stalloc_shutdown() the
 * driver must hold no reservation, handle or mapping, with no rule broken.
 *
 * perturbations (argument "perturb", host backend): ROBUST_PERTURB
 * (default 1000) seeded perturbations of each trace -- inserted, deleted,
 * resized and reordered requests, an extra eval pass, a missing iteration
 * marker -- replayed in plan mode with the unperturbed trace's plan: no
 * overlap, no corruption, no NULL, nothing left allocated; the
 * distribution of plan hit rates per kind is printed as TAP comments.
 * ROBUST_JOBS (default 4) child processes share the perturbations (the
 * runtime is per process; a shutdown mostly waits for RCU grace periods,
 * which overlap across processes); each perturbation's seed depends on its
 * number only, so the figures do not depend on the split.
 *
 * The figures are printed as "# " lines; nothing here asserts a timing.
 */
#include <dlfcn.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include <stalloc/planner.h>
#include <stalloc/stalloc.h>

#include "tests/robust-common.h"
#include "tests/vmm-fixture.h"

#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CUDA_ERROR_UNKNOWN 999

static const char *const trace_names[] = { "gpt-dense", "gpt-moe" };
#define NR_TRACES 2

static char dir[] = "/tmp/stalloc-robust-XXXXXX";
static struct rb_trace traces[NR_TRACES];
static char plans[NR_TRACES][256];

static unsigned long env_ulong(const char *name, unsigned long def)
{
	const char *s = getenv(name);
	char *end;
	unsigned long v;

	if (!s || !*s)
		return def;
	v = strtoul(s, &end, 10);
	if (*end) {
		fprintf(stderr, "test-robust: %s=\"%s\" is not a number\n",
			name, s);
		exit(2);
	}
	return v;
}

/* Load and plan the shared traces once (group setup). */
static int load_traces(void **state)
{
	const char *shared = getenv("SHARED");
	char path[512];
	int i, err;

	(void)state;
	if (!shared)
		shared = "../shared";
	for (i = 0; i < NR_TRACES; i++) {
		struct stalloc_plan *p;

		snprintf(path, sizeof(path), "%s/workloads/cpu-torch/%s.trace",
			 shared, trace_names[i]);
		err = rb_trace_load(path, &traces[i]);
		if (!err)
			err = stalloc_plan_file(path, NULL, &p);
		if (err) {
			fprintf(stderr, "test-robust: %s: %s\n", path,
				stalloc_last_error());
			return -1;
		}
		snprintf(plans[i], sizeof(plans[i]), "%s/%s.plan", dir,
			 trace_names[i]);
		err = stalloc_plan_write(p, plans[i]);
		stalloc_plan_free(p);
		if (err) {
			fprintf(stderr, "test-robust: %s\n",
				stalloc_last_error());
			return -1;
		}
	}
	return 0;
}

static int free_traces(void **state)
{
	int i;

	(void)state;
	for (i = 0; i < NR_TRACES; i++) {
		rb_trace_free(&traces[i]);
		unlink(plans[i]);
	}
	return 0;
}

static void set_mode(int trace, bool plan)
{
	setenv("STALLOC_MODE", plan ? "plan" : "off", 1);
	setenv("STALLOC_PLAN", plans[trace], 1);
}

/* --------------------------------------------------------- fault sweep */

static int (*fail_nth_any)(unsigned long nth, int err);

static void assert_nothing_left(const struct fx_fake *fk)
{
	assert_int_equal(fk->live_mappings(), 0);
	assert_int_equal(fk->live_handles(), 0);
	assert_int_equal(fk->live_reservations(), 0);
	assert_int_equal(fk->violations(), 0);
}

struct sweep_figures {
	unsigned long calls; /* driver calls of a clean replay */
	unsigned long injected; /* faults that fired */
	unsigned long nulls; /* NULL answers */
	unsigned long fallbacks; /* planned requests served elsewhere */
	unsigned long dropped; /* replays where the plan was not used */
	unsigned long absorbed; /* faults that cost the caller nothing */
};

static void sweep(int trace, bool plan)
{
	static const int errs[] = { CUDA_ERROR_OUT_OF_MEMORY,
				    CUDA_ERROR_UNKNOWN };
	const struct fx_fake *fk = fx_fake();
	unsigned long step = env_ulong("ROBUST_FAULT_STEP", 50);
	unsigned long offset = env_ulong("ROBUST_FAULT_OFFSET", 0);
	struct sweep_figures f = { 0 };
	struct stalloc_stats st, clean;
	struct rb_result r = { 0 };
	unsigned long n, c0;
	unsigned int k = 0;
	void *p;

	if (!fk || !fail_nth_any) {
		print_message("# fault sweep needs the fake driver "
			      "(STALLOC_LIBCUDA)\n");
		fail();
	}
	if (!step)
		step = 1;
	set_mode(trace, plan);
	/* load the driver first: cuInit runs once per process */
	p = stalloc_malloc(512, 0, NULL);
	assert_non_null(p);
	stalloc_free(p, 512, 0, NULL);
	stalloc_shutdown();
	assert_nothing_left(fk);

	c0 = fk->calls_total();
	assert_int_equal(rb_replay(&traces[trace], 0, &r), 0);
	assert_int_equal(stalloc_stats(0, &clean), 0);
	stalloc_shutdown();
	f.calls = fk->calls_total() - c0;
	assert_int_equal(r.nulls + r.overlaps + r.corrupt, 0);
	assert_int_equal(clean.allocated, 0);
	assert_true(r.checks == traces[trace].nr_allocs);
	assert_true(f.calls > 0);
	if (plan)
		assert_true(clean.plan_hits > 0);
	assert_nothing_left(fk);

	for (n = 1 + offset % step; n <= f.calls; n += step) {
		int err = errs[k++ % 2];

		memset(&r, 0, sizeof(r));
		memset(&st, 0, sizeof(st));
		fk->fail_clear();
		c0 = fk->calls_total();
		assert_int_equal(fail_nth_any(n, err), 0);
		assert_int_equal(rb_replay(&traces[trace], 0, &r), 0);
		if (stalloc_stats(0, &st))
			memset(&st, 0, sizeof(st)); /* the device never came */
		stalloc_shutdown();
		fk->fail_clear();
		if (fk->calls_total() - c0 < n)
			continue; /* the fault did not fire */
		f.injected++;
		if (r.overlaps || r.corrupt || st.allocated || st.bad_frees)
			print_message("# %s %s: fault at call %lu (err %d): "
				      "%llu overlaps, %llu corrupt, %llu "
				      "allocated\n",
				      trace_names[trace], plan ? "plan" : "off",
				      n, err, (unsigned long long)r.overlaps,
				      (unsigned long long)r.corrupt,
				      (unsigned long long)st.allocated);
		assert_int_equal(r.overlaps, 0);
		assert_int_equal(r.corrupt, 0);
		assert_int_equal(st.allocated, 0);
		assert_int_equal(st.bad_frees, 0);
		assert_nothing_left(fk);
		f.nulls += r.nulls;
		if (plan && st.plan_hits + st.plan_misses == 0)
			f.dropped++;
		else if (plan && st.plan_hits < clean.plan_hits)
			f.fallbacks += clean.plan_hits - st.plan_hits;
		if (!r.nulls && (!plan || st.plan_hits >= clean.plan_hits))
			f.absorbed++;
	}
	print_message("# faults %s %s: %lu driver calls per replay, N step "
		      "%lu, %lu faults injected, %lu NULL "
		      "returns, %lu planned requests fell back, %lu replays "
		      "without the plan, %lu faults absorbed; nothing leaked\n",
		      trace_names[trace], plan ? "plan" : "off", f.calls, step,
		      f.injected, f.nulls, f.fallbacks, f.dropped, f.absorbed);
	assert_true(f.injected > 0);
}

static void test_faults_dense_plan(void **state)
{
	(void)state;
	sweep(0, true);
}

static void test_faults_dense_off(void **state)
{
	(void)state;
	sweep(0, false);
}

static void test_faults_moe_plan(void **state)
{
	(void)state;
	sweep(1, true);
}

static void test_faults_moe_off(void **state)
{
	(void)state;
	sweep(1, false);
}

/* ------------------------------------------------------- perturbations */

enum pkind { P_INSERT, P_DELETE, P_RESIZE, P_REORDER, P_EVAL, P_NOMARK, P_NR };

static const char *const pkind_names[P_NR] = {
	"insert", "delete", "resize", "reorder", "eval-pass", "no-marker",
};

static size_t rng_below(uint64_t *s, size_t n)
{
	return n ? (size_t)(rb_rng_next(s) % n) : 0;
}

/* A growable copy of a trace being perturbed. */
struct ptrace {
	struct rb_trace t;
	size_t cap;
};

static void pt_init(struct ptrace *pt, const struct rb_trace *src, size_t extra)
{
	pt->cap = src->n + extra + 1;
	pt->t.ev = calloc(pt->cap, sizeof(*pt->t.ev));
	assert_non_null(pt->t.ev);
	memcpy(pt->t.ev, src->ev, src->n * sizeof(*src->ev));
	pt->t.n = src->n;
	pt->t.nr_allocs = src->nr_allocs;
}

static void pt_insert(struct ptrace *pt, size_t at, const struct rb_ev *e)
{
	struct rb_trace *t = &pt->t;

	assert_true(t->n < pt->cap && at <= t->n);
	memmove(&t->ev[at + 1], &t->ev[at], (t->n - at) * sizeof(*t->ev));
	t->ev[at] = *e;
	t->n++;
}

static void pt_remove(struct ptrace *pt, size_t at)
{
	struct rb_trace *t = &pt->t;

	memmove(&t->ev[at], &t->ev[at + 1], (t->n - at - 1) * sizeof(*t->ev));
	t->n--;
}

/* A random allocation event at or after @from, or t->n if there is none. */
static size_t pick_alloc(const struct rb_trace *t, size_t from, uint64_t *s)
{
	size_t i, k;

	for (k = 0; k < 64; k++) {
		i = from + rng_below(s, t->n - from);
		if (t->ev[i].op == 'a')
			return i;
	}
	return t->n;
}

static size_t find_free(const struct rb_trace *t, size_t a)
{
	size_t i;

	for (i = a + 1; i < t->n; i++)
		if (t->ev[i].op == 'f' && t->ev[i].idx == t->ev[a].idx)
			return i;
	return t->n;
}

static unsigned int nr_iterations(const struct rb_trace *t)
{
	unsigned int k = 0;

	while (rb_iteration(t, k) < t->n)
		k++;
	return k;
}

/*
 * The forward part of the iteration starting at @it (up to its first other
 * marker), replayed with fresh indices before @at; blocks it does not free
 * are freed at its end.
 */
static void add_eval(struct ptrace *pt, size_t it, size_t at)
{
	struct rb_trace *t = &pt->t;
	uint32_t base = (uint32_t)t->nr_allocs, first = UINT32_MAX, last = 0;
	struct rb_ev *seg;
	size_t i, n = 0, end;
	bool *open;

	for (end = it + 1; end < t->n && t->ev[end].op != 'm'; end++)
		;
	seg = calloc(2 * (end - it) + 2, sizeof(*seg));
	assert_non_null(seg);
	seg[n++] = (struct rb_ev){ .op = 'm', .label = "eval" };
	for (i = it + 1; i < end; i++) {
		if (t->ev[i].op == 'a') {
			first = first < t->ev[i].idx ? first : t->ev[i].idx;
			last = t->ev[i].idx;
		}
	}
	open = calloc(last + 2, sizeof(*open));
	assert_non_null(open);
	for (i = it + 1; i < end; i++) {
		struct rb_ev e = t->ev[i];

		if (first == UINT32_MAX || e.idx < first || e.idx > last)
			continue; /* frees something from before the pass */
		open[e.idx] = e.op == 'a';
		e.idx = base + e.idx - first;
		seg[n++] = e;
	}
	for (i = last + 1; first != UINT32_MAX && i-- > first;)
		if (open[i])
			seg[n++] = (struct rb_ev){
				.op = 'f', .idx = (uint32_t)(base + i - first)
			};
	if (first != UINT32_MAX)
		t->nr_allocs = base + last - first + 1;
	for (i = n; i-- > 0;)
		pt_insert(pt, at, &seg[i]);
	free(open);
	free(seg);
}

/* Build perturbation @kind of @src into @pt (seeded by @s). */
static void perturb(struct ptrace *pt, const struct rb_trace *src,
		    enum pkind kind, uint64_t *s)
{
	struct rb_trace *t;
	unsigned int iters = nr_iterations(src), k, n = 1 + rng_below(s, 3);
	size_t steady = rb_iteration(src, 1), i, j;

	assert_true(iters >= 3 && steady < src->n);
	pt_init(pt, src, 2 * src->n);
	t = &pt->t;
	switch (kind) {
	case P_INSERT:
		for (k = 0; k < n; k++) {
			struct rb_ev a = { .op = 'a',
					   .idx = (uint32_t)t->nr_allocs++ };

			i = steady + 1 + rng_below(s, t->n - steady - 1);
			j = pick_alloc(t, 0, s);
			/* a size the job uses, or any multiple of 512 */
			a.size = rng_below(s, 2) && j < t->n ?
					 t->ev[j].size :
					 512 * (1 + rng_below(s, 8192));
			pt_insert(pt, i, &a);
			a.op = 'f';
			j = i + 1 + rng_below(s, 64);
			pt_insert(pt, j < t->n ? j : t->n, &a);
		}
		break;
	case P_DELETE:
		for (k = 0; k < n; k++) {
			i = pick_alloc(t, steady, s);
			if (i == t->n)
				continue;
			j = find_free(t, i);
			if (j < t->n)
				pt_remove(pt, j);
			pt_remove(pt, i);
		}
		break;
	case P_RESIZE:
		for (k = 0; k < n; k++) {
			i = pick_alloc(t, steady, s);
			if (i == t->n)
				continue;
			switch (rng_below(s, 4)) {
			case 0:
				t->ev[i].size += 512;
				break;
			case 1:
				if (t->ev[i].size > 1024)
					t->ev[i].size -= 512;
				break;
			case 2:
				t->ev[i].size *= 2;
				break;
			default:
				t->ev[i].size = 1 + rng_below(s, 64 << 20);
			}
		}
		break;
	case P_REORDER:
		/* move a request up to 8 events later, never past its free
		 * or a marker */
		for (k = 0; k < n; k++) {
			size_t d = 1 + rng_below(s, 8);

			i = pick_alloc(t, steady, s);
			while (i < t->n && d-- && i + 1 < t->n &&
			       t->ev[i + 1].op != 'm' &&
			       t->ev[i + 1].idx != t->ev[i].idx) {
				struct rb_ev x = t->ev[i];

				t->ev[i] = t->ev[i + 1];
				t->ev[i + 1] = x;
				i++;
			}
		}
		break;
	case P_EVAL:
		/* before iteration k (2..iters-1): iteration k-1's forward */
		k = 2 + (unsigned int)rng_below(s, iters - 2);
		add_eval(pt, rb_iteration(t, k - 1), rb_iteration(t, k));
		break;
	case P_NOMARK:
		pt_remove(pt, rb_iteration(t, 1 + (unsigned int)rng_below(
							  s, iters - 1)));
		break;
	default:
		break;
	}
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static void print_dist(const char *trace, const char *kind, const char *what,
		       double *v, size_t n)
{
	double sum = 0;
	size_t i;

	if (!n)
		return;
	qsort(v, n, sizeof(*v), cmp_double);
	for (i = 0; i < n; i++)
		sum += v[i];
	print_message("# perturb %s %-9s %s: n %zu min %.4f p5 %.4f median "
		      "%.4f mean %.4f\n",
		      trace, kind, what, n, v[0], v[n * 5 / 100], v[n / 2],
		      sum / (double)n);
}

/* What one perturbed replay gave; written by a worker, read by the parent. */
struct presult {
	bool done;
	uint64_t overlaps, corrupt, nulls, allocated, bad_frees;
	uint64_t allocs, checks, hits, misses;
};

/* The clean replay's number: the last one, made by worker 0. */
static unsigned long clean_index;

static void perturb_one(int trace, unsigned long i, uint64_t seed,
			struct presult *res)
{
	/* each perturbation has its own seed: any one can be rerun */
	uint64_t s = (seed * 0x9e3779b97f4a7c15ULL) ^ ((uint64_t)trace << 40) ^
		     (i + 1);
	struct rb_result r = { 0 };
	struct stalloc_stats st = { 0 };
	struct ptrace pt;

	rb_rng_next(&s);
	if (i == clean_index) {
		pt.t = traces[trace];
	} else {
		perturb(&pt, &traces[trace], (enum pkind)(i % P_NR), &s);
	}
	if (rb_replay(&pt.t, 0, &r) || stalloc_stats(0, &st))
		r.nulls++; /* counted as a failure */
	stalloc_shutdown();
	if (i != clean_index)
		rb_trace_free(&pt.t);
	*res = (struct presult){
		.done = true,
		.overlaps = r.overlaps,
		.corrupt = r.corrupt,
		.nulls = r.nulls,
		.allocated = st.allocated,
		.bad_frees = st.bad_frees,
		.allocs = r.allocs,
		.checks = r.checks,
		.hits = st.plan_hits,
		.misses = st.plan_misses,
	};
}

/* Run perturbations @w, @w + jobs, ... in a child; results in @res. */
static pid_t perturb_worker(int trace, unsigned long count, uint64_t seed,
			    unsigned long w, unsigned long jobs,
			    struct presult *res)
{
	pid_t pid = fork();
	unsigned long i;

	if (pid)
		return pid;
	if (!w)
		perturb_one(trace, count, seed, &res[count]);
	for (i = w; i < count; i += jobs)
		perturb_one(trace, i, seed, &res[i]);
	_exit(0);
}

static void perturb_trace(int trace)
{
	unsigned long count = env_ulong("ROBUST_PERTURB", 1000);
	unsigned long jobs = env_ulong("ROBUST_JOBS", 4);
	uint64_t seed = env_ulong("ROBUST_SEED", 1);
	uint64_t overlaps = 0, checks = 0;
	double *rate[P_NR], *kept[P_NR];
	size_t nr[P_NR] = { 0 };
	struct presult *res, clean;
	unsigned long i;
	int k;

	/*
	 * Only the workers use the runtime: a child forked after the parent
	 * started liburcu's call_rcu thread would wait for it for ever.
	 */
	set_mode(trace, true);
	clean_index = count;
	res = mmap(NULL, (count + 2) * sizeof(*res), PROT_READ | PROT_WRITE,
		   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(res != MAP_FAILED);
	if (jobs < 1)
		jobs = 1;
	{
		pid_t pid[64];
		int status;

		jobs = jobs > 64 ? 64 : jobs;
		for (i = 0; i < jobs; i++) {
			pid[i] = perturb_worker(trace, count, seed, i, jobs,
						res);
			assert_true(pid[i] > 0);
		}
		for (i = 0; i < jobs; i++) {
			assert_int_equal(waitpid(pid[i], &status, 0), pid[i]);
			if (!WIFEXITED(status) || WEXITSTATUS(status))
				print_message("# perturb worker %lu: status "
					      "0x%x\n",
					      i, status);
			assert_true(WIFEXITED(status) && !WEXITSTATUS(status));
		}
	}
	clean = res[count];
	assert_true(clean.done);
	assert_int_equal(clean.nulls + clean.overlaps + clean.corrupt, 0);
	assert_true(clean.hits > 0);
	print_message("# perturb %s clean replay: %llu hits, %llu misses, "
		      "hit rate %.4f\n",
		      trace_names[trace], (unsigned long long)clean.hits,
		      (unsigned long long)clean.misses,
		      (double)clean.hits / (double)(clean.hits + clean.misses));
	for (k = 0; k < P_NR; k++) {
		rate[k] = calloc(count + 1, sizeof(double));
		kept[k] = calloc(count + 1, sizeof(double));
		assert_true(rate[k] && kept[k]);
	}
	for (i = 0; i < count; i++) {
		const struct presult *p = &res[i];
		enum pkind kind = (enum pkind)(i % P_NR);
		uint64_t looked = p->hits + p->misses;

		assert_true(p->done);
		if (p->overlaps || p->corrupt || p->nulls || p->allocated ||
		    p->bad_frees)
			print_message("# perturb %s #%lu (%s): %llu overlaps, "
				      "%llu corrupt, %llu NULL, %llu "
				      "allocated, %llu bad frees\n",
				      trace_names[trace], i, pkind_names[kind],
				      (unsigned long long)p->overlaps,
				      (unsigned long long)p->corrupt,
				      (unsigned long long)p->nulls,
				      (unsigned long long)p->allocated,
				      (unsigned long long)p->bad_frees);
		assert_int_equal(p->overlaps, 0);
		assert_int_equal(p->corrupt, 0);
		assert_int_equal(p->nulls, 0);
		assert_int_equal(p->allocated, 0);
		assert_int_equal(p->bad_frees, 0);
		assert_int_equal(p->checks, p->allocs);
		overlaps += p->overlaps;
		checks += p->checks;
		rate[kind][nr[kind]] =
			looked ? (double)p->hits / (double)looked : 0;
		kept[kind][nr[kind]++] = (double)p->hits / (double)clean.hits;
	}
	munmap(res, (count + 2) * sizeof(*res));
	print_message("# perturb %s: %lu perturbations (seed %llu, %lu "
		      "workers), %llu blocks checked, %llu overlaps\n",
		      trace_names[trace], count, (unsigned long long)seed, jobs,
		      (unsigned long long)checks, (unsigned long long)overlaps);
	for (k = 0; k < P_NR; k++) {
		print_dist(trace_names[trace], pkind_names[k], "hit rate",
			   rate[k], nr[k]);
		print_dist(trace_names[trace], pkind_names[k], "hits kept",
			   kept[k], nr[k]);
		free(rate[k]);
		free(kept[k]);
	}
	assert_true(count == 0 || checks > 0);
}

static void test_perturb_dense(void **state)
{
	(void)state;
	perturb_trace(0);
}

static void test_perturb_moe(void **state)
{
	(void)state;
	perturb_trace(1);
}

static int teardown(void **state)
{
	(void)state;
	stalloc_shutdown();
	return 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest faults[] = {
		cmocka_unit_test_teardown(test_faults_dense_plan, teardown),
		cmocka_unit_test_teardown(test_faults_dense_off, teardown),
		cmocka_unit_test_teardown(test_faults_moe_plan, teardown),
		cmocka_unit_test_teardown(test_faults_moe_off, teardown),
	};
	const struct CMUnitTest perturbs[] = {
		cmocka_unit_test_teardown(test_perturb_dense, teardown),
		cmocka_unit_test_teardown(test_perturb_moe, teardown),
	};
	const char *what = argc > 1 ? argv[1] : "perturb";
	int ret;

	if (!mkdtemp(dir))
		return 1;
	stalloc_set_log_level(STALLOC_LOG_NONE);
	setenv("STALLOC_HOST_MEM", "2G", 1);
	setenv("STALLOC_VA_SIZE", "8G", 1);
	setenv("FAKECUDA_MEM", "2G", 1);
	if (getenv("TEST_FILTER"))
		cmocka_set_test_filter(getenv("TEST_FILTER"));
	if (!strcmp(what, "faults")) {
		void *h;

		setenv("STALLOC_BACKEND", "cuda", 1);
		/* the driver is loaded at the first request */
		stalloc_free(stalloc_malloc(512, 0, NULL), 512, 0, NULL);
		stalloc_shutdown();
		h = dlopen(getenv("STALLOC_LIBCUDA"), RTLD_NOW | RTLD_NOLOAD);
		if (h)
			*(void **)&fail_nth_any =
				dlsym(h, "fakecuda_fail_nth_any");
		ret = cmocka_run_group_tests_name("robust/faults", faults,
						  load_traces, free_traces);
	} else if (!strcmp(what, "perturb")) {
		setenv("STALLOC_BACKEND", "host", 1);
		ret = cmocka_run_group_tests_name("robust/perturb", perturbs,
						  load_traces, free_traces);
	} else {
		fprintf(stderr, "usage: test-robust [faults|perturb]\n");
		ret = 2;
	}
	rmdir(dir);
	return ret;
}
