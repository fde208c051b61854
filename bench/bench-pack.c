// SPDX-License-Identifier: MIT
/*
 * bench/bench-pack.c - the static packer on CSV instances, verified
 *
 *   bench-pack [--budget MS] FILES...
 *
 * Loads each MiniMalloc CSV, packs it (default work budget: 10 nominal s
 * up to 5000 buffers, 1 s above; no wall-clock stop, so every figure but
 * the time is the same on every run), checks the packing with its own sweep (separate
 * from the planner's code) and prints one row per instance.  An instance
 * is within target when its gap to LOAD is at most 3% for the adversarial
 * MiniMalloc suite (files named NAME.CAPACITY.csv) and 0.05% otherwise.
 * Exit status 1 if any packing is invalid, 2 on usage or load errors.
 *
 * Single-threaded; no state beyond main().
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/util.h"
#include "planner/csv.h"
#include "planner/pack.h"

struct bench_ev {
	uint64_t t;
	uint32_t id;
	bool start;
};

struct bench_live {
	uint64_t off;
	uint64_t top;
};

static int bench_ev_cmp(const void *pa, const void *pb)
{
	const struct bench_ev *a = pa, *b = pb;

	if (a->t != b->t)
		return a->t < b->t ? -1 : 1;
	if (a->start != b->start)
		return a->start ? 1 : -1;
	return (a->id > b->id) - (a->id < b->id);
}

/* First index in @live (sorted by offset) with off >= @off. */
static size_t bench_find(const struct bench_live *live, size_t n, uint64_t off)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (live[mid].off < off)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Live buffers are disjoint, so a new one need only miss its neighbours. */
static bool bench_insert(struct bench_live *live, size_t *n,
			 const struct pack_buf *b)
{
	size_t i = bench_find(live, *n, b->offset);

	if (i < *n && live[i].off < b->offset + b->size)
		return false;
	if (i > 0 && live[i - 1].top > b->offset)
		return false;
	memmove(&live[i + 1], &live[i], (*n - i) * sizeof(*live));
	live[i].off = b->offset;
	live[i].top = b->offset + b->size;
	(*n)++;
	return true;
}

static void bench_remove(struct bench_live *live, size_t *n, uint64_t off)
{
	size_t i = bench_find(live, *n, off);

	if (i < *n && live[i].off == off) {
		memmove(&live[i], &live[i + 1], (*n - i - 1) * sizeof(*live));
		(*n)--;
	}
}

static size_t bench_events(const struct pack_buf *bufs, size_t nr,
			   uint64_t horizon, struct bench_ev *ev)
{
	size_t i, n = 0;

	for (i = 0; i < nr; i++) {
		const struct pack_buf *b = &bufs[i];
		uint64_t s = b->start, e = b->wraps ? horizon : b->end;

		if (s < e) {
			ev[n++] = (struct bench_ev){ s, (uint32_t)i, true };
			ev[n++] = (struct bench_ev){ e, (uint32_t)i, false };
		}
		if (b->wraps && b->end > 0) {
			ev[n++] = (struct bench_ev){ 0, (uint32_t)i, true };
			ev[n++] =
				(struct bench_ev){ b->end, (uint32_t)i, false };
		}
	}
	qsort(ev, n, sizeof(*ev), bench_ev_cmp);
	return n;
}

/* True if no two buffers live at the same time share an address. */
static bool bench_verify(const struct pack_buf *bufs, size_t nr,
			 uint64_t horizon, uint64_t *peak)
{
	struct bench_ev *ev = malloc(4 * nr * sizeof(*ev));
	struct bench_live *live = malloc(2 * nr * sizeof(*live));
	size_t i, n, nl = 0;
	bool ok = ev && live;

	*peak = 0;
	for (i = 0; ok && i < nr; i++)
		if (bufs[i].offset + bufs[i].size > *peak)
			*peak = bufs[i].offset + bufs[i].size;
	n = ok ? bench_events(bufs, nr, horizon, ev) : 0;
	for (i = 0; ok && i < n; i++) {
		const struct pack_buf *b = &bufs[ev[i].id];

		if (ev[i].start)
			ok = bench_insert(live, &nl, b);
		else
			bench_remove(live, &nl, b->offset);
	}
	free(live);
	free(ev);
	return ok;
}

struct bench_opts {
	uint64_t limit_ms;
	int within;
	int total;
	int invalid;
};

static int bench_one(const char *path, struct bench_opts *bo)
{
	struct pack_opts opts = { 0 };
	struct pack_result res = { 0 };
	struct csv_problem p;
	uint64_t peak;
	double gap;
	bool valid, hard;
	int err;

	err = csv_load(path, &p);
	if (err) {
		fprintf(stderr, "%s\n", stalloc_last_error());
		return err;
	}
	hard = p.capacity != 0;
	opts.budget_ms = bo->limit_ms ? bo->limit_ms :
			 p.nr <= 5000 ? 10000 :
					1000;
	err = pack_solve(p.bufs, p.nr, p.horizon, &opts, &res);
	if (err) {
		fprintf(stderr, "%s: %s\n", path, stalloc_last_error());
		csv_free(&p);
		return err;
	}
	valid = bench_verify(p.bufs, p.nr, p.horizon, &peak) &&
		peak == res.peak;
	gap = res.lower_bound ?
		      100.0 * ((double)res.peak / (double)res.lower_bound - 1) :
		      0;
	printf("%-22s %7zu %13llu %13llu %8.4f %-4s %-14s %9.1f %9.1f%s\n",
	       strrchr(path, '/') ? strrchr(path, '/') + 1 : path, p.nr,
	       (unsigned long long)res.lower_bound,
	       (unsigned long long)res.peak, gap, res.optimal ? "yes" : "no",
	       res.method, res.ms, res.work_ms, valid ? "" : "  INVALID");
	bo->total++;
	bo->invalid += !valid;
	bo->within += valid && gap <= (hard ? 3.0 : 0.05);
	csv_free(&p);
	return 0;
}

int main(int argc, char **argv)
{
	struct bench_opts bo = { 0 };
	int i = 1, bad = 0;

	if (i + 1 < argc && !strcmp(argv[i], "--budget")) {
		bo.limit_ms = strtoull(argv[i + 1], NULL, 10);
		i += 2;
	}
	if (i >= argc) {
		fprintf(stderr, "usage: %s [--budget MS] FILE.csv...\n",
			argv[0]);
		return 2;
	}
	printf("%-22s %7s %13s %13s %8s %-4s %-14s %9s %9s\n", "instance",
	       "buffers", "LOAD", "peak", "gap %", "opt", "method", "ms",
	       "work ms");
	for (; i < argc; i++)
		bad |= bench_one(argv[i], &bo) != 0;
	printf("%d of %d instances within target (3%% adversarial, 0.05%% real)\n",
	       bo.within, bo.total);
	if (bo.invalid)
		return 1;
	return bad ? 2 : 0;
}
