// SPDX-License-Identifier: MIT
/*
 * mapper/auto.c - markers and auto mode
 *
 * stalloc_mark() writes a marker into every recording device's trace and,
 * for "iteration", moves the matcher on (plan and auto modes).  Auto mode
 * traces the first STALLOC_AUTO_ITERS iterations (the dynamic region
 * starts half-way up the space, leaving the lower half for the pool), then
 * plans them in a background thread and switches to the plan at an
 * iteration start, without a restart; if it cannot plan, the device goes
 * on in off mode.
 *
 * Locking: the planner thread holds no lock while planning and publishes
 * its plan under the device lock; the switch happens under the device
 * lock at a marker.  Markers arrive on the training thread.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "../lib/options.h"
#include "../lib/util.h"
#include "../tracing/tp.h"
#include "mapper.h"

#define AUTO_ITERS_DEFAULT 4

int dev_auto_start(struct mdev *d)
{
	const char *pat = sa_opt_raw(SA_OPT_TRACE);
	uint64_t iters;
	int err;

	err = sa_opt_size(SA_OPT_AUTO_ITERS, AUTO_ITERS_DEFAULT, &iters);
	if (err)
		return err;
	d->auto_iters = iters;
	err = trec_open(pat ? pat : "/tmp/stalloc-auto-%p-%d.trace", d->device,
			&d->rec);
	if (err)
		return err;
	snprintf(d->auto_path, sizeof(d->auto_path), "%s", trec_path(d->rec));
	dev_regions(d, vmm_base(d->vmm) + vmm_size(d->vmm) / 2);
	return 0;
}

static void *auto_planner(void *arg)
{
	struct stalloc_plan_options o = { .flags = STALLOC_PLAN_NO_PERSISTENT };
	struct mdev *d = arg;
	struct stalloc_plan *p;

	if (stalloc_plan_file(d->auto_path, &o, &p)) {
		sa_log(STALLOC_LOG_WARN,
		       "runtime: device %d: auto mode could not plan (%s): "
		       "continuing in off mode",
		       d->device, stalloc_last_error());
		return NULL;
	}
	sa_mutex_lock(&d->lock);
	d->auto_plan = p;
	sa_mutex_unlock(&d->lock);
	return NULL;
}

/* At an iteration marker: stop tracing and plan, or switch to the plan. */
void dev_auto_mark(struct mdev *d)
{
	struct stalloc_plan *p;
	int err;

	if (!d->auto_started && ++d->auto_marks > d->auto_iters) {
		/* the traced iterations are complete: plan them */
		err = trec_close(d->rec);
		d->rec = NULL;
		d->auto_started = true;
		if (err ||
		    pthread_create(&d->auto_thread, NULL, auto_planner, d)) {
			d->auto_started = false;
			d->mode = MDEV_OFF;
			sa_log(STALLOC_LOG_WARN,
			       "runtime: device %d: auto mode cannot plan: "
			       "continuing in off mode",
			       d->device);
		}
		return;
	}
	sa_mutex_lock(&d->lock);
	p = d->auto_plan;
	d->auto_plan = NULL;
	if (p && !match_plan_pays(p)) {
		sa_log(STALLOC_LOG_INFO,
		       "runtime: device %d: the traced iterations give no steady "
		       "plan: going on in off mode",
		       d->device);
		stalloc_plan_free(p);
		d->mode = MDEV_OFF;
		p = NULL;
	}
	if (p && !match_init(&d->match, p, d->vmm, &d->ss)) {
		/* the marker being handled starts a planned iteration */
		match_start_planned(&d->match);
		snprintf(d->plan_path, sizeof(d->plan_path), "%.4000s (auto)",
			 d->auto_path);
		/* stalloc_free reads it without the lock */
		__atomic_store_n(&d->planned, true, __ATOMIC_RELEASE);
	}
	sa_mutex_unlock(&d->lock);
	if (d->planned)
		sa_log(STALLOC_LOG_INFO,
		       "runtime: device %d: switched to the plan made in-process",
		       d->device);
}

void stalloc_mark(const char *label)
{
	bool iteration = label && !strcmp(label, "iteration");
	int i;

	sa_trace(mark, label ? label : "mark");
	for (i = 0; i < MAPPER_MAX_DEVICES; i++) {
		struct mdev *d = rcu_dereference(mdev_table[i]);
		bool ok = true;

		if (!d)
			continue;
		if (d->rec)
			trec_mark(d->rec, label ? label : "mark");
		if (d->mode == MDEV_AUTO && iteration && !d->planned)
			dev_auto_mark(d);
		if (!d->planned || !iteration)
			continue;
		sa_mutex_lock(&d->lock);
		ok = match_iteration(&d->match);
		dev_warmup_done(d);
		sa_mutex_unlock(&d->lock);
		if (!ok)
			sa_log(STALLOC_LOG_WARN,
			       "runtime: device %d: the plan does not fit this "
			       "workload (fingerprint 0x%016llx, most planned "
			       "requests differ): continuing in off mode",
			       d->device,
			       (unsigned long long)d->match.plan->fingerprint);
	}
}
