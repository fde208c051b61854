// SPDX-License-Identifier: MIT
/*
 * mapper/device.c - a device's life: set-up, modes, plan loading, fork,
 * trimming, memory fraction and shutdown
 *
 * A device's state is made on its first request (dev_get_slow) and
 * published in mdev_table[] with rcu_set_pointer, so the fast path finds
 * it with one load; it lives until stalloc_shutdown().  Modes
 * (STALLOC_MODE): "off" serves everything from the dynamic region;
 * "trace" also records every request (STALLOC_TRACE); "plan" serves the
 * plan STALLOC_PLAN from a pool at the start of the space, the dynamic
 * region after it; "auto" traces, plans in-process and switches (auto.c).
 * A plan that cannot be used is reported and the device goes on in off
 * mode: a bad plan never stops a training job.
 *
 * Fork: pthread_atfork takes devs_lock and every device lock in order, so
 * the child finds none held; the child drops every device into
 * mdev_orphans[] (a CUDA context does not survive fork), never frees or
 * uses them, and makes its own on first use.
 *
 * Locking: devs_lock guards the table's changes, fractions[] and fork;
 * see mapper.h ("Lock ordering").
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../lib/options.h"
#include "../lib/util.h"
#include "../tracing/tp.h"
#include "mapper.h"

struct mdev *mdev_table[MAPPER_MAX_DEVICES];
struct mdev *mdev_orphans[MAPPER_MAX_DEVICES];
static double fractions[MAPPER_MAX_DEVICES];
static struct sa_mutex devs_lock = SA_MUTEX_INIT(SA_RANK_DEVS, "devs_lock");
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static int parse_mode(enum mdev_mode *m)
{
	unsigned int k;
	int err = sa_opt_choice(SA_OPT_MODE, &k);

	/* the table's order is the enum's: off, trace, plan, auto */
	*m = (enum mdev_mode)k;
	return err;
}

/* What a shrink gave back, for the steady iterations' hold. */
static void hold_note(struct mdev *d, uint64_t got, uint64_t over)
{
	d->hold.shrunk += got;
	if (over > d->hold.over)
		d->hold.over = over;
}

/*
 * The vmm's shrinker, in plan mode: mapping [va, va + bytes) would raise
 * the physical high water by @over bytes.  Idle memory is unmapped first,
 * so that the mapping reuses its chunks instead of new ones: the dynamic
 * region's free blocks (least recently freed first), and for a dynamic
 * request also the pool's idle chunks -- lent: a slot that needs them maps
 * them back, reclaiming from the dynamic region in turn.  So the pool and
 * the dynamic region share physical memory instead of adding up, and the
 * plan's pool is never unmapped for the pool's own sake: a planned
 * iteration without dynamic requests makes no driver call.  Off mode
 * keeps its free memory cached (trimmed only past STALLOC_CACHE_LIMIT or
 * out of memory): unmapping there would cost driver calls and host waits
 * in every iteration -- but not where a plan was rejected: off mode is no
 * fallback for it (dev_rejected_cap()).  Before its unmaps a shrink waits
 * on the host for the streams that last used the memory, never for the
 * whole device (ss_settle(): the requesting stream's work so far, or
 * another stream's checkpoint; memory that cannot be waited for so stays
 * mapped, and is not lent); STALLOC_LEND=0 registers no shrinker.  A plan
 * dropped as another workload's leaves the blocks live in its pool there
 * until they are freed; what they leave idle is unmapped before anything
 * else (it stood beside off mode's memory for good: an MoE rank planned
 * from another routing held 328 MiB of it at its peak, 332 MiB over off
 * mode), then the dynamic region shrinks as in plan mode, under the same hold
 * (dev_hold_iteration()).  Auto mode's traced iterations shrink the
 * dynamic region too: they run as off mode, but only a few of them, and
 * their peak is the job's (the plan switched to after them cannot lower
 * it) -- the suite's auto line went from 32 losses to an online policy in
 * 65 workloads to 9.  Device lock held (every mapping is made under it).
 */
static void dev_shrink(void *ctx, uint64_t va, uint64_t bytes, uint64_t over)
{
	struct mdev *d = ctx;
	unsigned int slot = d->ss.cur;
	uint64_t got;

	if (d->ss.capture)
		return; /* no unmap while a graph is captured */
	if (!d->planned && d->rejected_cap) {
		/* a rejected plan's fallback, held (dev_rejected_cap()) */
		hold_note(d, dyn_release_some(&d->dyn, over, slot), over);
		return;
	}
	if (!d->planned && d->mode == MDEV_AUTO) {
		/* auto mode's traced iterations: their peak is the job's */
		dyn_release_some(&d->dyn, over, slot);
		return;
	}
	if (!d->planned)
		return;
	/* a dropped plan's pool hands out nothing again: its idle memory first */
	got = 0;
	if (d->match.disabled)
		got = match_lend(&d->match, va, bytes, over, slot);
	if (got < over)
		got += dyn_release_some(&d->dyn, over - got, slot);
	if (got < over && !d->match.disabled &&
	    (!match_owns(&d->match, va) || dyn_used_bytes(&d->dyn)))
		got += match_lend(&d->match, va, bytes, over - got, slot);
	hold_note(d, got, over);
}

static int dev_open_vmm(struct mdev *d)
{
	struct vmm_config cfg = { .device = d->device };
	bool lend;
	int err;

	err = sa_opt_size(SA_OPT_CACHE_LIMIT, 0, &d->cache_limit) ?:
		      sa_opt_bool(SA_OPT_LEND, &lend)		  ?:
		      sa_opt_size(SA_OPT_STEADY_CALLS, SA_STEADY_CALLS_DEFAULT,
				  &d->hold.budget);
	if (err)
		return err;
	err = vmm_space_create(&cfg, &d->vmm);
	if (err)
		return err;
	if (d->fraction > 0 && d->fraction < 1) {
		uint64_t lim = (uint64_t)((double)vmm_device_bytes(d->vmm) *
					  d->fraction);

		vmm_set_phys_limit(d->vmm, lim);
	}
	ss_init(&d->ss, d->vmm);
	if (lend)
		vmm_set_shrinker(d->vmm, dev_shrink, d);
	gp_init(&d->gp);
	dev_regions(d, vmm_base(d->vmm));
	return 0;
}

/* The slabs' region: a sixteenth of what lies above the pool, in chunks. */
void dev_regions(struct mdev *d, uint64_t lo)
{
	uint64_t end = vmm_base(d->vmm) + vmm_size(d->vmm);
	uint64_t chunk = vmm_chunk_bytes(d->vmm);
	uint64_t slabs = (end - lo) / 16 / chunk * chunk;

	if (slabs < chunk)
		slabs = chunk;
	dyn_init(&d->dyn, d->vmm, lo, end - slabs, &d->ss);
	dyn_init(&d->slab_dyn, d->vmm, end - slabs, end, &d->ss);
}

void dev_release(struct mdev *d, unsigned int slot, bool may_sync)
{
	dyn_release(&d->dyn, slot, may_sync);
	dyn_release(&d->slab_dyn, slot, may_sync);
}

/*
 * A plan rejected by its check leaves the device without a plan, but off
 * mode is no fallback: its free blocks keep their memory mapped, where
 * PyTorch's expandable segments map what is live (two held-out MoE ranks
 * whose plans were rejected reserved 82 and 24 MiB more than expandable
 * segments; on the second, off mode had been the least online policy on
 * the trace the plan was made from).  The dynamic region gives back its
 * free blocks' memory before it maps new past the high water (the
 * shrinker, dev_shrink()), as in plan mode, and the steady iterations hold
 * the high water as a planned run does (dev_hold_fallback()): where that
 * costs more than STALLOC_STEADY_CALLS driver calls an iteration, the high
 * water may rise, up to the least an online policy reserved in the check.
 */
static void dev_rejected_cap(struct mdev *d, const struct stalloc_plan *p)
{
	if (!p->check_online)
		return;
	d->rejected_cap = p->check_online;
	d->hold.warmup = p->warmup;
}

/*
 * @plan, read from or written to @path, was rejected by its check: say so
 * to the control socket (stallocctl plan), and fall back as
 * dev_rejected_cap() says.  Device lock held, or the device not yet
 * published.
 */
void dev_plan_rejected(struct mdev *d, const char *path,
		       const struct stalloc_plan *plan)
{
	char fb[64] = "";

	if (plan->check_fallback)
		snprintf(fb, sizeof(fb), ", %" PRIu64 " in this fallback",
			 plan->check_fallback);
	snprintf(d->plan_path, sizeof(d->plan_path),
		 "%.3900s (replayed on its trace: %" PRIu64
		 " bytes reserved with it, %" PRIu64 " in off mode%s)",
		 path, plan->check_planned, plan->check_off, fb);
	d->plan_rejected = true;
	dev_rejected_cap(d, plan);
}

/*
 * Plan mode: read STALLOC_PLAN and put the static pool at the start of the
 * space, the dynamic region after it.  A plan that cannot be used is
 * reported and the device goes on in off mode: a bad plan must never stop
 * a training job.
 */
static void dev_load_plan(struct mdev *d)
{
	const char *pat = sa_opt_raw(SA_OPT_PLAN);
	struct stalloc_plan *plan;
	char path[4096];
	uint64_t pool;
	int err;

	err = pat && *pat ? sa_expand_path(pat, d->device, path, sizeof(path)) :
			    sa_error(-EINVAL, "STALLOC_PLAN is not set");
	if (!err)
		err = stalloc_plan_read(path, &plan);
	if (!err && !match_plan_pays(plan)) {
		if (plan->check == STALLOC_CHECK_REJECT) {
			dev_plan_rejected(d, path, plan);
			sa_log(STALLOC_LOG_INFO,
			       "runtime: device %d: %s was rejected by its "
			       "check: running without it, free memory given "
			       "back before new is mapped",
			       d->device, d->plan_path);
		} else
			sa_log(STALLOC_LOG_INFO,
			       "runtime: device %d: %s plans no steady "
			       "iteration (one recorded step?): running as "
			       "in off mode",
			       d->device, path);
		stalloc_plan_free(plan);
		return;
	}
	if (!err)
		err = match_init(&d->match, plan, d->vmm, &d->ss);
	if (err) {
		sa_log(STALLOC_LOG_WARN,
		       "runtime: device %d: plan mode without a plan (%s): "
		       "continuing in off mode",
		       d->device, stalloc_last_error());
		return;
	}
	snprintf(d->plan_path, sizeof(d->plan_path), "%s", path);
	pool = match_pool_bytes(&d->match);
	dev_regions(d, vmm_base(d->vmm) + pool);
	d->planned = true;
}

static int dev_create(int device, struct mdev **out)
{
	struct mdev *d = calloc(1, sizeof(*d));
	int err;

	if (!d)
		return sa_error(-ENOMEM, "runtime: out of host memory");
	d->device = device;
	d->fraction = fractions[device];
	sa_mutex_init(&d->lock, SA_RANK_DEV, "mdev->lock");
	err = parse_mode(&d->mode);
	if (err)
		goto err_free;
	err = dev_open_vmm(d);
	if (err)
		goto err_free;
	slab_init(&d->slab, &d->slab_dyn);
	d->blocks = cds_lfht_new_flavor(
		1024, 1024, 0, CDS_LFHT_AUTO_RESIZE | CDS_LFHT_ACCOUNTING,
		&urcu_bp_flavor, NULL);
	if (!d->blocks) {
		err = sa_error(-ENOMEM, "runtime: out of host memory");
		goto err_vmm;
	}
	if (d->mode == MDEV_PLAN)
		dev_load_plan(d);
	if (d->mode == MDEV_AUTO) {
		err = dev_auto_start(d);
		if (err)
			goto err_ht;
	}
	if (d->mode == MDEV_TRACE) {
		err = trec_open(sa_opt_str(SA_OPT_TRACE), device, &d->rec);
		if (err)
			goto err_ht;
	}
	dev_mark_early(d);
	sa_log(STALLOC_LOG_INFO, "runtime: device %d ready (mode %s)", device,
	       d->planned	     ? "plan" :
	       d->mode == MDEV_TRACE ? "trace" :
	       d->mode == MDEV_AUTO  ? "auto, tracing" :
				       "off");
	*out = d;
	return 0;

err_ht:
	cds_lfht_destroy(d->blocks, NULL);
err_vmm:
	ss_destroy(&d->ss);
	vmm_space_destroy(d->vmm);
err_free:
	sa_mutex_destroy(&d->lock);
	free(d);
	return err;
}

static void fork_prepare(void)
{
	int i;

	sa_mutex_lock(&devs_lock);
	for (i = 0; i < MAPPER_MAX_DEVICES; i++)
		if (mdev_table[i])
			sa_mutex_lock_nested(&mdev_table[i]->lock);
}

static void fork_parent(void)
{
	int i;

	for (i = 0; i < MAPPER_MAX_DEVICES; i++)
		if (mdev_table[i])
			sa_mutex_unlock(&mdev_table[i]->lock);
	sa_mutex_unlock(&devs_lock);
}

/*
 * The child: every lock free again.  Every device is the parent's (a CUDA
 * context, its events and mappings mean nothing here; the vmm layer
 * refuses a space made before fork): it is dropped, never freed or used,
 * and made anew on the child's first use.
 */
static void fork_child(void)
{
	int i;

	for (i = 0; i < MAPPER_MAX_DEVICES; i++) {
		struct mdev *d = mdev_table[i];

		if (!d)
			continue;
		sa_mutex_unlock(&d->lock);
		/* the policy of host memory at fork (vmm/backend-host.c) */
		vmm_fork_child_copy(d->vmm);
		d->orphan_next = mdev_orphans[i];
		mdev_orphans[i] = d;
		mdev_table[i] = NULL; /* left to the parent */
	}
	sa_mutex_unlock(&devs_lock);
}

static void fork_register(void)
{
	pthread_atfork(fork_prepare, fork_parent, fork_child);
}

struct mdev *dev_get_slow(int device)
{
	struct mdev *d;
	int err = 0;

	if (unlikely(device < 0 || device >= MAPPER_MAX_DEVICES)) {
		sa_record_error(-EINVAL,
				"runtime: device %d out of range (0..%d)",
				device, MAPPER_MAX_DEVICES - 1);
		return NULL;
	}
	d = rcu_dereference(mdev_table[device]);
	if (likely(d))
		return d;
	pthread_once(&fork_once, fork_register);
	/*
	 * Before devs_lock: loading the lttng-ust provider may fork (its
	 * constructor makes the session daemon's wait area), and
	 * fork_prepare() takes devs_lock.
	 */
	sa_tp_init();
	sa_mutex_lock(&devs_lock);
	d = mdev_table[device];
	if (!d) {
		err = dev_create(device, &d);
		if (!err)
			rcu_set_pointer(&mdev_table[device], d);
	}
	sa_mutex_unlock(&devs_lock);
	if (err) {
		sa_log(STALLOC_LOG_ERROR, "%s", stalloc_last_error());
		return NULL;
	}
	ctl_start();
	return d;
}

/*
 * Give cached memory back: free chunks unmapped, pooled chunks released.
 * @slot: the stream the caller names (SS_MAX: none, a trim the user asked
 * for, which may synchronise the device once).
 */
void dev_trim(struct mdev *d, unsigned int slot)
{
	if (d->ss.capture)
		return; /* no unmap while a graph is captured */
	slab_trim(&d->slab);
	dev_release(d, slot, slot == SS_MAX);
	vmm_trim(d->vmm, 0);
}

/*
 * The high-water policy: when the physical memory held beyond what is
 * allocated passes STALLOC_CACHE_LIMIT, give the cache back.  Device lock
 * held, and no RCU read-side section (trimming waits for the device).
 */
void dev_high_water(struct mdev *d, unsigned int slot)
{
	struct vmm_stats vs;

	vmm_get_stats(d->vmm, &vs);
	if (vs.phys_bytes > d->st.allocated &&
	    vs.phys_bytes - d->st.allocated > d->cache_limit)
		dev_trim(d, slot);
}

/*
 * The warm-up is over: the first planned iteration begins.  What the
 * warm-up's requests left mapped in the dynamic region is unmapped, so
 * that its physical chunks (back in the vmm pool) are the ones the plan's
 * pool maps next: the warm-up and the plan share memory instead of adding
 * up.  Blocks the warm-up made that live on into the first planned
 * iteration (gradients freed by zero_grad, say) are unmapped as they are
 * freed, until that iteration ends.  Device lock held, no RCU read-side
 * section.
 */
void dev_warmup_done(struct mdev *d, unsigned int slot)
{
	bool first;

	if (likely(!d->match.warm_done) || d->ss.capture ||
	    !match_warm_over(&d->match, &first))
		return;
	/* stalloc_free reads it without the lock */
	__atomic_store_n(&d->warm_trim, first, __ATOMIC_RELAXED);
	if (first && !d->warm_id) {
		/* what the warm-up made and still holds, for the accounting */
		d->warm_id = d->next_id;
		d->warm_live = d->st.dynamic_bytes;
	}
	slab_trim(&d->slab);
	/*
	 * Never a device sync for it (the marker that ends the warm-up
	 * names no stream): what cannot be settled now goes as it is freed.
	 */
	dev_release(d, slot, false);
}

/*
 * Holding the high water has a price in steady iterations: idle memory the
 * shrinker gives back (lent pool chunks, unmapped dynamic blocks) is mapped
 * again later in the same iteration, every iteration -- on an H100 some 30
 * to 50 us per driver call: auto mode's dense GPT ran 2.5 times slower
 * per step than off mode for 246 MiB (bench/results/2026-11-27i-h100).
 * Where a steady iteration spends more than STALLOC_STEADY_CALLS driver
 * calls so, and what it gave back is one deficit rolled through memory
 * (at most twice its largest give-back), the high water may rise by that
 * largest give-back, so that the next iteration keeps it mapped -- but
 * never past the least any online policy (off mode, PyTorch's caching
 * allocator without and with expandable segments) reserved in the plan's
 * check: the memory a plan saves over them is not given up for speed.
 * With dynamic positions, never past half-way from the plan's own peak in
 * the check to that bound: a run whose routing differs from the recorded
 * one also moves the online policies' peaks (an MoE rank planned from
 * another seed: expandable segments 20 MiB under the check's bound, where
 * the hold had risen to it).
 * Where the give-backs are many times the largest (MoE: the pool and the
 * dynamic region trading memory all iteration), the high water is at that
 * bound already, or a rise was tried and the next iteration still spent
 * over the budget, the device keeps holding from then on, and one warning
 * says what the iterations spend if that is over four times the budget.
 *
 * hold_step() does it at an iteration marker for the iteration just ended:
 * @steady, it was a steady one; @cap, the bound (0: none known, the floor
 * never rises).
 */
static void hold_step(struct mdev *d, bool steady, uint64_t cap)
{
	struct dev_hold *h = &d->hold;
	uint64_t calls = 0, spent, shrunk = h->shrunk, over = h->over;
	uint64_t top;
	struct vmm_stats vs;
	bool tried = h->tried;
	char why[96];
	int k;

	vmm_get_stats(d->vmm, &vs);
	for (k = 0; k < VMM_CALL_NR; k++)
		calls += vs.calls[k];
	spent = calls - h->calls;
	h->calls = calls;
	h->shrunk = h->over = 0;
	h->tried = false;
	if (!steady || spent <= h->budget || !shrunk || h->warned)
		return;
	top = vs.phys_bytes_peak > h->floor ? vs.phys_bytes_peak : h->floor;
	if (!tried && shrunk <= 2 * over && top < cap) {
		h->floor = top + over < cap ? top + over : cap;
		h->tried = true;
		vmm_set_shrink_floor(d->vmm, h->floor);
		sa_log(STALLOC_LOG_INFO,
		       "runtime: device %d: a steady iteration made %" PRIu64
		       " driver calls giving back %" PRIu64
		       " bytes: the high water may rise to %" PRIu64,
		       d->device, spent, shrunk, h->floor);
		return;
	}
	h->warned = true;
	if (spent <= 4 * h->budget)
		return; /* a few calls over: not worth a warning */
	if (cap)
		snprintf(why, sizeof(why),
			 "the least an online policy reserved in the plan's "
			 "check: %" PRIu64,
			 cap);
	else
		snprintf(why, sizeof(why), "the plan was not checked");
	sa_log(STALLOC_LOG_WARN,
	       "runtime: device %d: a steady iteration made %" PRIu64
	       " driver calls giving back %" PRIu64
	       " bytes to hold the high water at %" PRIu64
	       " bytes (%s); STALLOC_MODE=off makes none",
	       d->device, spent, shrunk, top, why);
}

void dev_hold_iteration(struct mdev *d)
{
	const struct stalloc_plan *p = d->match.plan;
	uint64_t cap;

	/* the first planned iteration maps the pool and trims the warm-up */
	if (!p) {
		hold_step(d, false, 0);
		return;
	}
	cap = p->check == STALLOC_CHECK_PASS ? p->check_online : 0;
	if (cap && p->nr_dyn && p->check_planned < cap)
		cap = p->check_planned + (cap - p->check_planned) / 2;
	hold_step(d, d->match.marks >= p->warmup + 3, cap);
}

/* The same for a rejected plan's fallback (dev_rejected_cap()). */
void dev_hold_fallback(struct mdev *d)
{
	d->hold.marks++;
	hold_step(d, d->hold.marks >= d->hold.warmup + 3, d->rejected_cap);
}

void stalloc_init(int device_count)
{
	sa_log(STALLOC_LOG_INFO, "runtime: init for %d devices", device_count);
}

void stalloc_empty_cache(void)
{
	int i;

	for (i = 0; i < MAPPER_MAX_DEVICES; i++) {
		struct mdev *d = rcu_dereference(mdev_table[i]);

		if (!d)
			continue;
		sa_mutex_lock(&d->lock);
		dev_trim(d, SS_MAX);
		sa_mutex_unlock(&d->lock);
	}
}

void stalloc_memory_fraction(double fraction, int device)
{
	struct mdev *d;

	if (device < 0 || device >= MAPPER_MAX_DEVICES || !(fraction > 0) ||
	    fraction > 1) {
		sa_log(STALLOC_LOG_ERROR,
		       "runtime: memory fraction %g for "
		       "device %d is out of range",
		       fraction, device);
		return;
	}
	sa_mutex_lock(&devs_lock);
	fractions[device] = fraction;
	d = mdev_table[device];
	sa_mutex_unlock(&devs_lock);
	if (d) {
		sa_mutex_lock(&d->lock);
		d->fraction = fraction;
		sa_mutex_unlock(&d->lock);
		vmm_set_phys_limit(d->vmm,
				   (uint64_t)((double)vmm_device_bytes(d->vmm) *
					      fraction));
	}
}

/* Is @addr in the range of one of the parent's devices (a forked child)? */
bool dev_orphan_owns(int device, uint64_t addr)
{
	const struct mdev *o;

	for (o = mdev_orphans[device]; o; o = o->orphan_next)
		if (addr - vmm_base(o->vmm) < vmm_size(o->vmm))
			return true;
	return false;
}

int stalloc_owns(const void *ptr, int device)
{
	uint64_t addr = (uint64_t)(uintptr_t)ptr;
	struct mdev *d;

	if (device < 0 || device >= MAPPER_MAX_DEVICES)
		return 0;
	d = rcu_dereference(mdev_table[device]);
	if (d && addr - vmm_base(d->vmm) < vmm_size(d->vmm))
		return 1;
	return unlikely(mdev_orphans[device]) && dev_orphan_owns(device, addr);
}

void stalloc_shutdown(void)
{
	int i;

	ctl_stop(); /* it reads the devices */
	sa_mutex_lock(&devs_lock);
	for (i = 0; i < MAPPER_MAX_DEVICES; i++) {
		struct mdev *d = mdev_table[i];
		struct cds_lfht_iter iter;
		struct cds_lfht_node *node;

		if (!d)
			continue;
		rcu_set_pointer(&mdev_table[i], NULL);
		urcu_bp_synchronize_rcu();
		if (d->auto_started)
			pthread_join(d->auto_thread, NULL);
		stalloc_plan_free(d->auto_plan);
		if (d->rec && trec_close(d->rec))
			sa_log(STALLOC_LOG_ERROR, "%s", stalloc_last_error());
		/* blocks still allocated are the caller's leak: drop them */
		urcu_bp_read_lock();
		cds_lfht_first(d->blocks, &iter);
		while ((node = cds_lfht_iter_get_node(&iter))) {
			cds_lfht_del(d->blocks, node);
			cds_lfht_next(d->blocks, &iter);
		}
		urcu_bp_read_unlock();
		cds_lfht_destroy(d->blocks, NULL);
		urcu_bp_barrier();
		slab_destroy(&d->slab);
		dyn_destroy(&d->dyn);
		dyn_destroy(&d->slab_dyn);
		if (d->planned)
			match_destroy(&d->match);
		gp_destroy(&d->gp);
		ss_destroy(&d->ss);
		vmm_space_destroy(d->vmm);
		sa_mutex_destroy(&d->lock);
		free(d);
		fractions[i] = 0;
	}
	dev_marks_forget();
	sa_mutex_unlock(&devs_lock);
}
