// SPDX-License-Identifier: MIT
/*
 * mapper/auto.c - markers and auto mode
 *
 * stalloc_mark() writes a marker into every recording device's trace and,
 * for "iteration", moves the matcher on (plan and auto modes).  Auto mode
 * traces the first STALLOC_AUTO_ITERS iterations (the dynamic region
 * starts half-way up the space, leaving the lower half for the pool), then
 * plans them in a background thread, checks the plan by replaying the
 * trace with it and in off mode (TRACE.plan, planner/verify.c), and
 * switches to it at an iteration start, without a restart; if it cannot
 * plan, or the check rejects the plan, the device goes on in off mode.
 * With STALLOC_AUTO_SYNC=1 it plans and checks at the marker that ends the
 * traced iterations, on the marking thread, and switches at that marker:
 * the same run every time (stalloc-replay --policy auto measures so).
 * STALLOC_AUTO_PLAN gives the plan instead (read, not made, not checked):
 * how the check replays a plan the way auto mode would switch to it.
 *
 * Locking: the planner thread holds no lock while planning and checking
 * (the replays are child processes) and publishes its plan under the
 * device lock; the switch happens under the device lock at a marker.
 * Markers arrive on the training thread.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../lib/options.h"
#include "../lib/util.h"
#include "../tracing/tp.h"
#include "mapper.h"

#define AUTO_ITERS_DEFAULT 4
/* Without markers: the first try to find iterations, in traced requests. */
#define AUTO_FIRST_TRY 512
/* While a try's thread runs: look for its result every this many. */
#define AUTO_POLL 64

int dev_auto_start(struct mdev *d)
{
	const char *pat = sa_opt_raw(SA_OPT_TRACE);
	uint64_t iters;
	bool fine;
	int err;

	err = sa_opt_size(SA_OPT_AUTO_ITERS, AUTO_ITERS_DEFAULT, &iters) ?:
		      sa_opt_bool(SA_OPT_AUTO_CHECK, &d->auto_check)	 ?:
		      sa_opt_bool(SA_OPT_AUTO_SYNC, &d->auto_sync)	 ?:
		      sa_opt_bool(SA_OPT_AUTO_FINE, &fine);
	if (err)
		return err;
	if (iters < 3 && !sa_opt_raw(SA_OPT_AUTO_PLAN))
		return sa_error(-EINVAL,
				"environment: STALLOC_AUTO_ITERS=%llu: auto "
				"mode plans from 3 traced iterations at least",
				(unsigned long long)iters);
	d->auto_iters = iters;
	err = trec_open(pat ? pat : "/tmp/stalloc-auto-%p-%d.trace", d->device,
			&d->rec);
	if (err)
		return err;
	snprintf(d->auto_path, sizeof(d->auto_path), "%s", trec_path(d->rec));
	d->auto_next_try = d->auto_try_at = AUTO_FIRST_TRY;
	dev_regions(d, vmm_base(d->vmm) + vmm_size(d->vmm) / 2);
	/*
	 * The traced iterations run as off mode and their peak is the job's
	 * (device.c gives idle memory back at the high water): mapped one
	 * chunk per segment, every free chunk can go back, not only the
	 * segments no live block pins.  The suite's 132 traces with the
	 * switch at the marker (STALLOC_AUTO_SYNC=1): auto mode's geometric
	 * mean 1.10% -> 0.66%, 118 lower, none higher; more driver calls
	 * while tracing (the 16 GB interleaved rank: 21,844 -> 85,181 in
	 * all).  Documentation/mapper.rst, auto mode.
	 */
	d->dyn.fine = fine;
	return 0;
}

/*
 * Without markers, a try succeeds when the planner found the iterations
 * itself (the step, not a layer: planner/period.c), at least as many as
 * auto mode traces, and planned a steady one.
 */
static bool try_found(const struct mdev *d, const struct stalloc_plan *p)
{
	struct stalloc_plan_summary sum;

	stalloc_plan_summary(p, &sum);
	return sum.iter_source == STALLOC_ITER_DETECTED &&
	       sum.iterations >= d->auto_iters && match_plan_pays(p);
}

/*
 * The first @bytes of the trace, copied to @path: what a try without
 * markers planned, while the recorder goes on appending.
 */
static int auto_snapshot(const struct mdev *d, const char *path, uint64_t bytes)
{
	char buf[65536];
	int in, out, err = 0;
	ssize_t n;

	in = open(d->auto_path, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return sa_error(-errno, "runtime: %s: %s", d->auto_path,
				strerror(errno));
	out = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (out < 0) {
		err = sa_error(-errno, "runtime: %s: %s", path,
			       strerror(errno));
		goto out_in;
	}
	while (bytes && !err) {
		n = read(in, buf, bytes < sizeof(buf) ? bytes : sizeof(buf));
		if (n <= 0 || write(out, buf, (size_t)n) != n)
			err = sa_error(-EIO,
				       "runtime: %s: cannot copy the "
				       "trace",
				       path);
		else
			bytes -= (uint64_t)n;
	}
	if (close(out) && !err)
		err = sa_error(-EIO, "runtime: %s: %s", path, strerror(errno));
out_in:
	close(in);
	return err;
}

/* Where auto mode writes its plan: beside the trace, as TRACE.plan. */
static void auto_plan_path(const struct mdev *d, char *buf, size_t len)
{
	snprintf(buf, len, "%s.plan", d->auto_path);
}

/*
 * Replay the traced iterations with @p and in off mode (planner/verify.c).
 * The plan is written beside the trace for it (and for the user:
 * STALLOC_PLAN takes that file as it is), then again with the verdict.  A
 * rejected plan stays in @p, marked: match_plan_pays() refuses it.  A try
 * without markers is replayed on a copy of the trace as far as it planned
 * it.  A check that cannot run (no stalloc-replay found) leaves the plan
 * unchecked and in use, as before there was a check.
 */
static void auto_check(struct mdev *d, struct stalloc_plan *p, bool markerless)
{
	char path[4096 + 8], copy[4096 + 8];
	const char *trace = d->auto_path;
	struct stalloc_plan_verdict c;
	bool again;
	int err;

	auto_plan_path(d, path, sizeof(path));
	snprintf(copy, sizeof(copy), "%s.part", d->auto_path);
	err = stalloc_plan_write(p, path);
	if (!err && markerless) {
		err = auto_snapshot(d, copy, d->auto_snap);
		trace = copy;
	}
	/* with markers, as this mode will switch to it: the hand-over too */
	if (!err && markerless)
		err = stalloc_plan_check(p, path, trace, NULL,
					 vmm_chunk_bytes(d->vmm), &c);
	else if (!err)
		err = stalloc_plan_check_auto(p, path, trace, NULL,
					      vmm_chunk_bytes(d->vmm), &c);
	if (markerless)
		unlink(copy);
	if (err) {
		sa_log(STALLOC_LOG_WARN,
		       "runtime: device %d: auto mode's plan is not checked "
		       "(%s): using it unchecked",
		       d->device, stalloc_last_error());
		return;
	}
	if (stalloc_plan_write(p, path))
		sa_log(STALLOC_LOG_WARN, "runtime: device %d: %s", d->device,
		       stalloc_last_error());
	again = p->check == STALLOC_CHECK_REJECT && p->sum.slack_clock &&
		!markerless;
	sa_log(p->check == STALLOC_CHECK_PASS || again ? STALLOC_LOG_INFO :
							 STALLOC_LOG_WARN,
	       "runtime: device %d: auto mode's plan %s, replayed on its "
	       "trace, reserves %" PRIu64
	       " bytes at the peak, off mode %" PRIu64
	       ", the fallback for a rejected plan %" PRIu64
	       " (0: not measured): %s",
	       d->device, path, c.planned, c.off, c.fallback,
	       p->check == STALLOC_CHECK_PASS ? "using it" :
	       again ? "planning again on the reference iteration's clock" :
		       "going on without it, free memory given back before "
		       "new is mapped");
}

/*
 * @p, checked, was rejected and made with slack for shifted runs (MoE
 * routing): plan again on the reference iteration's clock and check that
 * one.  Returns the plan to use: the new one if it passed, else @p (its
 * file written back).  Not for a try without markers, whose trace grows
 * meanwhile past what the first plan and its check read.
 */
static struct stalloc_plan *auto_exact(struct mdev *d, struct stalloc_plan *p,
				       const struct stalloc_plan_options *o,
				       bool markerless)
{
	struct stalloc_plan_options x = *o;
	struct stalloc_plan_summary s;
	struct stalloc_plan *q = NULL;
	char path[4096 + 8];

	stalloc_plan_summary(p, &s);
	if (s.check != STALLOC_CHECK_REJECT || !s.slack_clock || markerless)
		return p;
	x.flags |= STALLOC_PLAN_EXACT_CLOCK;
	if (stalloc_plan_file(d->auto_path, &x, &q))
		goto out_keep;
	auto_check(d, q, markerless);
	stalloc_plan_summary(q, &s);
	if (s.check == STALLOC_CHECK_PASS) {
		stalloc_plan_free(p);
		return q;
	}
out_keep:
	stalloc_plan_free(q);
	auto_plan_path(d, path, sizeof(path));
	if (stalloc_plan_write(p, path))
		sa_log(STALLOC_LOG_WARN, "runtime: device %d: %s", d->device,
		       stalloc_last_error());
	return p;
}

/* Auto mode's plan was rejected by its check (device lock held). */
static void auto_rejected(struct mdev *d, const struct stalloc_plan *p)
{
	char path[4096 + 8];

	auto_plan_path(d, path, sizeof(path));
	dev_plan_rejected(d, path, p);
}

/* How much of the trace a try without markers plans (0 or -errno). */
static int auto_snap_take(struct mdev *d)
{
	struct stat st;

	if (stat(d->auto_path, &st))
		return -errno;
	d->auto_snap = (uint64_t)st.st_size;
	return 0;
}

static void *auto_planner(void *arg)
{
	struct stalloc_plan_options o = { .flags = STALLOC_PLAN_NO_PERSISTENT };
	const char *given = sa_opt_raw(SA_OPT_AUTO_PLAN);
	struct mdev *d = arg;
	struct stalloc_plan *p = NULL;
	bool markerless = d->auto_markerless;

	if (given && !markerless) {
		/* STALLOC_AUTO_PLAN: this plan, as it is (a check's replay) */
		if (stalloc_plan_read(given, &p)) {
			sa_log(STALLOC_LOG_WARN,
			       "runtime: device %d: auto mode: %s: "
			       "continuing in off mode",
			       d->device, stalloc_last_error());
			p = NULL;
		}
	} else if (stalloc_plan_file(d->auto_path, &o, &p)) {
		if (!markerless)
			sa_log(STALLOC_LOG_WARN,
			       "runtime: device %d: auto mode could not plan "
			       "(%s): continuing in off mode",
			       d->device, stalloc_last_error());
		p = NULL;
	} else if (markerless && !try_found(d, p)) {
		stalloc_plan_free(p); /* not yet: a later try */
		p = NULL;
	} else if (d->auto_check && !given && match_plan_pays(p)) {
		auto_check(d, p, markerless);
		p = auto_exact(d, p, &o, markerless);
	}
	sa_mutex_lock(&d->lock);
	d->auto_plan = p;
	d->auto_busy = false;
	sa_mutex_unlock(&d->lock);
	return NULL;
}

/*
 * Serve from @p (owned from now on), made in-process: from the marker being
 * handled, or (@synced) from the next iteration start the requests show.
 * Device lock held.
 */
static bool auto_use(struct mdev *d, struct stalloc_plan *p, bool synced)
{
	if (match_init(&d->match, p, d->vmm, &d->ss))
		return false;
	if (synced)
		match_start_synced(&d->match);
	else
		match_start_planned(&d->match);
	d->dyn.fine = false; /* from now on mapped as in plan mode */
	snprintf(d->plan_path, sizeof(d->plan_path), "%.4000s (auto%s)",
		 d->auto_path,
		 synced ? ", iterations found without markers" : "");
	/* stalloc_free reads it without the lock */
	__atomic_store_n(&d->planned, true, __ATOMIC_RELEASE);
	return true;
}

void dev_auto_tick(struct mdev *d)
{
	uint64_t n = __atomic_add_fetch(&d->auto_allocs, 1, __ATOMIC_RELAXED);
	bool switched = false, start = false;

	if (likely(n < __atomic_load_n(&d->auto_next_try, __ATOMIC_RELAXED)))
		return;
	sa_mutex_lock(&d->lock);
	if (d->auto_marks || d->planned || d->mode != MDEV_AUTO) {
		/* markers drive it, or it is over */
		__atomic_store_n(&d->auto_next_try, UINT64_MAX,
				 __ATOMIC_RELAXED);
	} else if (d->auto_plan && !match_plan_pays(d->auto_plan)) {
		/* found, but rejected by its check (said): no more tries */
		auto_rejected(d, d->auto_plan);
		stalloc_plan_free(d->auto_plan);
		d->auto_plan = NULL;
		d->mode = MDEV_OFF;
		__atomic_store_n(&d->auto_next_try, UINT64_MAX,
				 __ATOMIC_RELAXED);
	} else if (d->auto_plan) {
		switched = auto_use(d, d->auto_plan, true);
		d->auto_plan = NULL;
	} else if (d->auto_busy) {
		__atomic_store_n(&d->auto_next_try, n + AUTO_POLL,
				 __ATOMIC_RELAXED);
	} else if (n >= d->auto_try_at) {
		if (d->auto_started)
			pthread_join(d->auto_thread, NULL);
		d->auto_started = false;
		d->auto_busy = start = true;
		d->auto_markerless = true;
		d->auto_try_at = n + n / 2;
		__atomic_store_n(&d->auto_next_try, n + AUTO_POLL,
				 __ATOMIC_RELAXED);
	} else {
		__atomic_store_n(&d->auto_next_try, d->auto_try_at,
				 __ATOMIC_RELAXED);
	}
	sa_mutex_unlock(&d->lock);
	if (start) {
		/* the planner reads what the recorder wrote so far (and its
		 * check replays as much) */
		if (trec_flush(d->rec) || auto_snap_take(d) ||
		    pthread_create(&d->auto_thread, NULL, auto_planner, d)) {
			sa_mutex_lock(&d->lock);
			d->auto_busy = false;
			sa_mutex_unlock(&d->lock);
			return;
		}
		d->auto_started = true;
	}
	if (switched) {
		/* as at a marker: tracing stops with the switch */
		trec_close(d->rec);
		d->rec = NULL;
		sa_log(STALLOC_LOG_INFO,
		       "runtime: device %d: found the iterations without "
		       "markers after %llu requests; switching to the plan at "
		       "the next iteration start",
		       d->device, (unsigned long long)n);
	}
}

/* At an iteration marker: stop tracing and plan, or switch to the plan. */
/*
 * Markers came after all: they drive auto mode from now on, and the tries
 * without them end (a try under way is waited for, its plan dropped).
 */
static void markers_take_over(struct mdev *d)
{
	__atomic_store_n(&d->auto_next_try, UINT64_MAX, __ATOMIC_RELAXED);
	if (d->auto_started)
		pthread_join(d->auto_thread, NULL);
	sa_mutex_lock(&d->lock);
	stalloc_plan_free(d->auto_plan);
	d->auto_plan = NULL;
	d->auto_started = d->auto_busy = d->auto_markerless = false;
	sa_mutex_unlock(&d->lock);
}

void dev_auto_mark(struct mdev *d)
{
	struct stalloc_plan *p;
	int err;

	if (unlikely(d->auto_markerless))
		markers_take_over(d);

	if (!d->auto_started && ++d->auto_marks > d->auto_iters) {
		/* the traced iterations are complete: plan them */
		err = trec_close(d->rec);
		d->rec = NULL;
		if (!err && d->auto_sync) {
			/* here and now; no plan: off mode from here on */
			auto_planner(d);
			sa_mutex_lock(&d->lock);
			if (!d->auto_plan)
				d->mode = MDEV_OFF;
			sa_mutex_unlock(&d->lock);
			goto switch_plan;
		}
		d->auto_started = true;
		if (err ||
		    pthread_create(&d->auto_thread, NULL, auto_planner, d)) {
			d->auto_started = false;
			sa_mutex_lock(&d->lock); /* the shrinker reads it */
			d->mode = MDEV_OFF;
			sa_mutex_unlock(&d->lock);
			sa_log(STALLOC_LOG_WARN,
			       "runtime: device %d: auto mode cannot plan: "
			       "continuing in off mode",
			       d->device);
		}
		return;
	}
switch_plan:
	sa_mutex_lock(&d->lock);
	p = d->auto_plan;
	d->auto_plan = NULL;
	if (p && p->check == STALLOC_CHECK_REJECT)
		auto_rejected(d, p);
	if (p && !match_plan_pays(p)) {
		if (p->check != STALLOC_CHECK_REJECT) /* (said already) */
			sa_log(STALLOC_LOG_INFO,
			       "runtime: device %d: the traced iterations give "
			       "no steady plan: going on in off mode",
			       d->device);
		stalloc_plan_free(p);
		d->mode = MDEV_OFF;
		p = NULL;
	}
	if (p)
		auto_use(d, p, false);
	sa_mutex_unlock(&d->lock);
	if (d->planned)
		sa_log(STALLOC_LOG_INFO,
		       "runtime: device %d: switched to the plan made in-process",
		       d->device);
}

/* "iteration" markers before any device existed (stalloc_mark). */
static unsigned long early_marks;

/* A marker for device @d: recorded, counted in auto mode, matched. */
static void dev_mark(struct mdev *d, const char *label, bool iteration)
{
	bool ok;

	if (d->rec)
		trec_mark(d->rec, label);
	if (d->mode == MDEV_AUTO && iteration && !d->planned)
		dev_auto_mark(d);
	if (!d->planned && iteration && d->rejected_cap) {
		sa_mutex_lock(&d->lock);
		dev_hold_fallback(d);
		sa_mutex_unlock(&d->lock);
	}
	if (!d->planned || !iteration)
		return;
	sa_mutex_lock(&d->lock);
	ok = match_iteration(&d->match);
	dev_warmup_done(d, SS_MAX);
	dev_hold_iteration(d);
	sa_mutex_unlock(&d->lock);
	if (!ok)
		sa_log(STALLOC_LOG_WARN,
		       "runtime: device %d: the plan does not fit this "
		       "workload (fingerprint 0x%016llx, most planned "
		       "requests differ): continuing in off mode",
		       d->device,
		       (unsigned long long)d->match.plan->fingerprint);
}

/*
 * A job that marks its first iteration before its first allocation (the
 * loop's top comes first) marks it before the device exists: the device
 * takes that marker when it is made, so that its recording starts with it
 * -- as an imported recording does -- and a plan's warm-up is counted from
 * it.  Several such markers count as one: the device's life begins in the
 * last of those iterations.
 */
void dev_mark_early(struct mdev *d)
{
	if (__atomic_load_n(&early_marks, __ATOMIC_RELAXED))
		dev_mark(d, "iteration", true);
}

void dev_marks_forget(void)
{
	__atomic_store_n(&early_marks, 0, __ATOMIC_RELAXED);
}

void stalloc_mark(const char *label)
{
	bool iteration = label && !strcmp(label, "iteration");
	int i;

	sa_trace(mark, label ? label : "mark");
	if (iteration)
		__atomic_add_fetch(&early_marks, 1, __ATOMIC_RELAXED);
	for (i = 0; i < MAPPER_MAX_DEVICES; i++) {
		struct mdev *d = rcu_dereference(mdev_table[i]);

		if (d)
			dev_mark(d, label ? label : "mark", iteration);
	}
}
