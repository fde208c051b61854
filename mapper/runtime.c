// SPDX-License-Identifier: MIT
/*
 * mapper/runtime.c - devices, modes and the public allocator entry points
 *
 * A device's state is made on its first request and published in devs[]
 * with rcu_set_pointer, so the fast path finds it with one load.  Each
 * device has one mutex for its allocator: an allocation or a free takes it
 * once; the free path's lookup (address to block) goes through a lock-free
 * rculfhash under the urcu-bp read lock, so a bad pointer is told without
 * any lock.  Trace records are written after the device lock is dropped.
 *
 * Modes (STALLOC_MODE): "off" serves everything from the dynamic region;
 * "trace" also records every request (STALLOC_TRACE).  Planned modes come
 * with the matcher.
 *
 * Locking order: devs_lock (device creation and shutdown only) before a
 * device's lock; never the other way.  fork() takes them all in that order
 * (pthread_atfork), so the child finds none held; its devices are left
 * behind untouched (a CUDA context does not survive fork) and made anew if
 * the child uses the device.  No lock is held across a trace
 * write.  Failure never crashes the caller: NULL and a message.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../lib/util.h"
#include "../tracing/recorder.h"
#include "../tracing/tp.h"
#include "mapper.h"
#include "match.h"

#define MAX_DEVICES MAPPER_MAX_DEVICES

enum mode { MODE_OFF, MODE_TRACE, MODE_PLAN, MODE_AUTO };

#define AUTO_ITERS_DEFAULT 4

struct mdev {
	int device;
	enum mode mode;
	pthread_mutex_t lock;
	struct vmm_space *vmm;
	struct dyn_region dyn;
	struct slab_cache slab;
	struct sstreams ss;
	struct graph_pools gp;
	struct cds_lfht *blocks;
	struct trec *rec;
	bool planned; /* plan mode with a usable plan */
	struct matcher match;
	/* auto mode: iterations traced, the planner thread, its result */
	uint64_t auto_iters;
	uint64_t auto_marks;
	bool auto_started;
	pthread_t auto_thread;
	struct stalloc_plan *auto_plan; /* published by the thread (lock) */
	char auto_path[4096];
	char plan_path[4096]; /* where the plan came from (introspection) */
	uint64_t next_id;
	struct stalloc_stats st;
	double fraction;
	uint64_t cache_limit; /* STALLOC_CACHE_LIMIT: most cached bytes */
	bool warm_trim; /* first planned iteration: no dynamic cache */
	struct mdev *orphan_next; /* an older generation's, after fork */
};

static struct mdev *devs[MAX_DEVICES];
/* after fork: the parent's devices, never used again, their ranges told */
static struct mdev *orphans[MAX_DEVICES];
static bool orphan_owns(int device, uint64_t addr);
static double fractions[MAX_DEVICES];
static pthread_mutex_t devs_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static unsigned long hash_ptr(uint64_t p)
{
	p ^= p >> 33;
	p *= 0xff51afd7ed558ccdULL;
	p ^= p >> 33;
	return (unsigned long)p;
}

static int match_addr(struct cds_lfht_node *node, const void *key)
{
	const struct mblock *b = mb_of_hnode(node);

	return b->addr == *(const uint64_t *)key;
}

/* The dynamic block at @addr; the caller holds the RCU read lock. */
static struct cds_lfht_node *find_block(struct mdev *d, uint64_t addr)
{
	struct cds_lfht_iter iter;

	cds_lfht_lookup(d->blocks, hash_ptr(addr), match_addr, &addr, &iter);
	return cds_lfht_iter_get_node(&iter);
}

static int parse_mode(enum mode *m)
{
	const char *s = getenv("STALLOC_MODE");

	if (!s || !*s || !strcasecmp(s, "off")) {
		*m = MODE_OFF;
		return 0;
	}
	if (!strcasecmp(s, "trace")) {
		*m = MODE_TRACE;
		return 0;
	}
	if (!strcasecmp(s, "plan")) {
		*m = MODE_PLAN;
		return 0;
	}
	if (!strcasecmp(s, "auto")) {
		*m = MODE_AUTO;
		return 0;
	}
	return sa_error(-EINVAL,
			"runtime: STALLOC_MODE=\"%s\" is not supported here "
			"(want off, trace, plan or auto)",
			s);
}

static int dev_open_vmm(struct mdev *d)
{
	struct vmm_config cfg = { .device = d->device };
	int err;

	err = sa_env_size("STALLOC_CACHE_LIMIT", 0, &d->cache_limit);
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
	gp_init(&d->gp);
	dyn_init(&d->dyn, d->vmm, vmm_base(d->vmm),
		 vmm_base(d->vmm) + vmm_size(d->vmm), &d->ss);
	return 0;
}

/*
 * Plan mode: read STALLOC_PLAN and put the static pool at the start of the
 * space, the dynamic region after it.  A plan that cannot be used is
 * reported and the device goes on in off mode: a bad plan must never stop
 * a training job.
 */
static void dev_load_plan(struct mdev *d)
{
	const char *pat = getenv("STALLOC_PLAN");
	struct stalloc_plan *plan;
	char path[4096];
	uint64_t pool;
	int err;

	err = pat && *pat ?
		      trec_expand_path(pat, d->device, path, sizeof(path)) :
		      sa_error(-EINVAL, "STALLOC_PLAN is not set");
	if (!err)
		err = stalloc_plan_read(path, &plan);
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
	dyn_init(&d->dyn, d->vmm, vmm_base(d->vmm) + pool,
		 vmm_base(d->vmm) + vmm_size(d->vmm), &d->ss);
	d->planned = true;
}

static int dev_auto_start(struct mdev *d);

static int dev_create(int device, struct mdev **out)
{
	struct mdev *d = calloc(1, sizeof(*d));
	int err;

	if (!d)
		return sa_error(-ENOMEM, "runtime: out of host memory");
	d->device = device;
	d->fraction = fractions[device];
	pthread_mutex_init(&d->lock, NULL);
	sa_tp_init();
	err = parse_mode(&d->mode);
	if (err)
		goto err_free;
	err = dev_open_vmm(d);
	if (err)
		goto err_free;
	slab_init(&d->slab, &d->dyn);
	d->blocks = cds_lfht_new_flavor(
		1024, 1024, 0, CDS_LFHT_AUTO_RESIZE | CDS_LFHT_ACCOUNTING,
		&urcu_bp_flavor, NULL);
	if (!d->blocks) {
		err = sa_error(-ENOMEM, "runtime: out of host memory");
		goto err_vmm;
	}
	if (d->mode == MODE_PLAN)
		dev_load_plan(d);
	if (d->mode == MODE_AUTO) {
		err = dev_auto_start(d);
		if (err)
			goto err_ht;
	}
	if (d->mode == MODE_TRACE) {
		const char *pat = getenv("STALLOC_TRACE");

		err = trec_open(pat && *pat ? pat : "stalloc-%p-%d.trace",
				device, &d->rec);
		if (err)
			goto err_ht;
	}
	sa_log(STALLOC_LOG_INFO, "runtime: device %d ready (mode %s)", device,
	       d->planned	     ? "plan" :
	       d->mode == MODE_TRACE ? "trace" :
				       "off");
	*out = d;
	return 0;

err_ht:
	cds_lfht_destroy(d->blocks, NULL);
err_vmm:
	ss_destroy(&d->ss);
	vmm_space_destroy(d->vmm);
err_free:
	pthread_mutex_destroy(&d->lock);
	free(d);
	return err;
}

/*
 * Auto mode: trace the first STALLOC_AUTO_ITERS iterations (the dynamic
 * region starts half-way up the space, leaving the lower half for the
 * pool), then plan in a background thread and switch to the plan at an
 * iteration start, without a restart.
 */
static int dev_auto_start(struct mdev *d)
{
	const char *pat = getenv("STALLOC_TRACE");
	uint64_t iters;
	int err;

	err = sa_env_size("STALLOC_AUTO_ITERS", AUTO_ITERS_DEFAULT, &iters);
	if (err)
		return err;
	d->auto_iters = iters < 3 ? 3 : iters;
	err = trec_open(pat && *pat ? pat : "/tmp/stalloc-auto-%p-%d.trace",
			d->device, &d->rec);
	if (err)
		return err;
	snprintf(d->auto_path, sizeof(d->auto_path), "%s", trec_path(d->rec));
	dyn_init(&d->dyn, d->vmm, vmm_base(d->vmm) + vmm_size(d->vmm) / 2,
		 vmm_base(d->vmm) + vmm_size(d->vmm), &d->ss);
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
	pthread_mutex_lock(&d->lock);
	d->auto_plan = p;
	pthread_mutex_unlock(&d->lock);
	return NULL;
}

/* At an iteration marker: stop tracing and plan, or switch to the plan. */
static void dev_auto_mark(struct mdev *d)
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
			d->mode = MODE_OFF;
			sa_log(STALLOC_LOG_WARN,
			       "runtime: device %d: auto mode cannot plan: "
			       "continuing in off mode",
			       d->device);
		}
		return;
	}
	pthread_mutex_lock(&d->lock);
	p = d->auto_plan;
	d->auto_plan = NULL;
	if (p && !match_init(&d->match, p, d->vmm, &d->ss)) {
		/* the marker being handled starts a planned iteration */
		d->match.marks = p->warmup;
		d->match.pro_pos = p->nr_prologue;
		d->match.pro_next = d->match.nr_pro;
		snprintf(d->plan_path, sizeof(d->plan_path), "%.4000s (auto)",
			 d->auto_path);
		/* stalloc_free reads it without the lock */
		__atomic_store_n(&d->planned, true, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&d->lock);
	if (d->planned)
		sa_log(STALLOC_LOG_INFO,
		       "runtime: device %d: switched to the plan made in-process",
		       d->device);
}

static void fork_prepare(void)
{
	int i;

	pthread_mutex_lock(&devs_lock);
	for (i = 0; i < MAX_DEVICES; i++)
		if (devs[i])
			pthread_mutex_lock(&devs[i]->lock);
}

static void fork_parent(void)
{
	int i;

	for (i = 0; i < MAX_DEVICES; i++)
		if (devs[i])
			pthread_mutex_unlock(&devs[i]->lock);
	pthread_mutex_unlock(&devs_lock);
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

	for (i = 0; i < MAX_DEVICES; i++) {
		struct mdev *d = devs[i];

		if (!d)
			continue;
		pthread_mutex_unlock(&d->lock);
		d->orphan_next = orphans[i];
		orphans[i] = d;
		devs[i] = NULL; /* left to the parent */
	}
	pthread_mutex_unlock(&devs_lock);
}

static void fork_register(void)
{
	pthread_atfork(fork_prepare, fork_parent, fork_child);
}

/* The device's state, made on first use; NULL (and a message) on error. */
static struct mdev *dev_get(int device)
{
	struct mdev *d;
	int err = 0;

	if (unlikely(device < 0 || device >= MAX_DEVICES)) {
		sa_record_error(-EINVAL,
				"runtime: device %d out of range (0..%d)",
				device, MAX_DEVICES - 1);
		return NULL;
	}
	d = rcu_dereference(devs[device]);
	if (likely(d))
		return d;
	pthread_once(&fork_once, fork_register);
	pthread_mutex_lock(&devs_lock);
	d = devs[device];
	if (!d) {
		err = dev_create(device, &d);
		if (!err)
			rcu_set_pointer(&devs[device], d);
	}
	pthread_mutex_unlock(&devs_lock);
	if (err) {
		sa_log(STALLOC_LOG_ERROR, "%s", stalloc_last_error());
		return NULL;
	}
	ctl_start();
	return d;
}

static void stats_alloc(struct mdev *d, const struct mblock *b)
{
	d->st.allocs++;
	d->st.allocated += b->req;
	if (d->st.allocated > d->st.allocated_peak)
		d->st.allocated_peak = d->st.allocated;
}

static void report_oom(struct mdev *d, size_t size)
{
	struct stalloc_stats st = { 0 };

	stalloc_stats(d->device, &st);
	sa_log(STALLOC_LOG_ERROR,
	       "runtime: device %d: out of memory for %zu bytes (%s): "
	       "allocated %" PRIu64 ", reserved %" PRIu64 " (peak %" PRIu64
	       "), mapped %" PRIu64,
	       d->device, size, stalloc_last_error(), st.allocated, st.reserved,
	       st.reserved_peak, st.mapped);
}

/* Give cached memory back: free chunks unmapped, pooled chunks released. */
static void dev_trim(struct mdev *d)
{
	if (d->ss.capture)
		return; /* no unmap while a graph is captured */
	slab_trim(&d->slab);
	dyn_release(&d->dyn);
	vmm_trim(d->vmm, 0);
}

/*
 * The high-water policy: when the physical memory held beyond what is
 * allocated passes STALLOC_CACHE_LIMIT, give the cache back.  Device lock
 * held, and no RCU read-side section (trimming waits for a grace period).
 */
static void high_water(struct mdev *d)
{
	struct vmm_stats vs;

	vmm_get_stats(d->vmm, &vs);
	if (vs.phys_bytes > d->st.allocated &&
	    vs.phys_bytes - d->st.allocated > d->cache_limit)
		dev_trim(d);
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
static void warmup_done(struct mdev *d)
{
	if (likely(!d->match.warm_done) || d->ss.capture)
		return;
	d->match.warm_done = false;
	/* stalloc_free reads it without the lock */
	__atomic_store_n(&d->warm_trim,
			 d->match.marks == d->match.plan->warmup + 1,
			 __ATOMIC_RELAXED);
	slab_trim(&d->slab);
	dyn_release(&d->dyn);
}

/*
 * Serve @size from the plan (a planned slot, or the plan's free space for
 * a dynamic position): true and *@addr set.  Device lock held.
 */
static bool plan_alloc(struct mdev *d, uint64_t size, uint64_t id, void *stream,
		       uint64_t *addr, int *cls)
{
	uint32_t ent;
	bool miss, hit;

	hit = match_alloc(&d->match, size, id, stream, addr, &ent, &miss);
	warmup_done(d); /* an iteration start told from the requests */
	if (!hit) {
		d->st.plan_misses += miss;
		if (miss)
			sa_trace(plan_miss, d->device, size);
		return false;
	}
	d->st.allocs++;
	d->st.allocated += size;
	if (d->st.allocated > d->st.allocated_peak)
		d->st.allocated_peak = d->st.allocated;
	if (ent == MATCH_REUSED) {
		d->st.dynamic_bytes += size;
		*cls = SA_TP_REUSED;
		return true;
	}
	d->st.plan_hits++;
	sa_trace(plan_hit, d->device, *addr, size, *addr - d->match.base);
	*cls = SA_TP_PLANNED;
	return true;
}

static void *dyn_done(struct mdev *d, struct mblock *b, size_t size,
		      void *stream);

/* @size bytes for stream slot @slot: a slab object, or a dynamic block. */
static int dyn_take(struct mdev *d, size_t size, unsigned int slot,
		    struct mblock **b)
{
	return slab_takes(size) ? slab_alloc(&d->slab, size, slot, b) :
				  dyn_alloc(&d->dyn, size, slot, b);
}

/* Out of memory for @size: count, report, NULL.  Drops the device lock. */
static void *dyn_fail(struct mdev *d, size_t size)
{
	d->st.oom++;
	pthread_mutex_unlock(&d->lock);
	sa_trace(oom, d->device, size);
	report_oom(d, size);
	return NULL;
}

/*
 * A request while a graph pool is active: to the pool if its filter takes
 * @stream, else the ordinary way, never from the plan (plans stay out of
 * captured regions).  Mapping memory during a capture needs the relaxed
 * capture mode, as PyTorch's own allocator uses for cudaMalloc.  Device
 * lock held; dropped here.
 */
static void *graph_alloc(struct mdev *d, size_t size, void *stream)
{
	struct mpool *pool = gp_route(&d->gp, stream);
	unsigned int slot = ss_slot(&d->ss, stream);
	struct mblock *b;
	int err, old = 0;

	err = vmm_capture_relax(d->vmm, true, &old);
	if (!err) {
		err = pool ? gp_alloc(pool, &d->dyn, size, slot, &b) :
			     dyn_take(d, size, slot, &b);
		vmm_capture_relax(d->vmm, false, &old);
	}
	if (unlikely(err))
		return dyn_fail(d, size);
	return dyn_done(d, b, size, stream);
}

void *stalloc_malloc(size_t size, int device, void *stream)
{
	struct mdev *d;
	struct mblock *b;
	unsigned int slot;
	int err, tries;

	if (unlikely(!size)) {
		sa_record_error(-EINVAL,
				"runtime: zero-size request on device %d",
				device);
		return NULL;
	}
	d = dev_get(device);
	if (unlikely(!d))
		return NULL;
	pthread_mutex_lock(&d->lock);
	if (unlikely(d->gp.active))
		return graph_alloc(d, size, stream);
	if (d->planned) {
		uint64_t addr, id = ++d->next_id;
		int cls;

		if (plan_alloc(d, size, id, stream, &addr, &cls)) {
			pthread_mutex_unlock(&d->lock);
			if (d->rec)
				trec_alloc(d->rec, id, size,
					   (uint64_t)(uintptr_t)stream);
			sa_trace(alloc, device, addr, size,
				 (uint64_t)(uintptr_t)stream, cls);
			return (void *)(uintptr_t)addr;
		}
	}
	slot = ss_slot(&d->ss, stream);
	for (tries = 0;; tries++) {
		err = dyn_take(d, size, slot, &b);
		if (!err || err != -ENOMEM || tries)
			break;
		/*
		 * Out of memory: wait for the device, so that memory freed
		 * on other streams is ready, trim, then once more.
		 */
		if (d->ss.nr > 1 && !d->ss.capture)
			ss_sync(&d->ss);
		dev_trim(d);
	}
	if (unlikely(err))
		return dyn_fail(d, size);
	return dyn_done(d, b, size, stream);
}

/*
 * A dynamic block @b was found for a request of @size on @stream: publish
 * it, count it, trace it.  Device lock held; dropped here.
 */
static void *dyn_done(struct mdev *d, struct mblock *b, size_t size,
		      void *stream)
{
	int device = d->device;

	d->st.dynamic_bytes += size;
	b->req = size;
	b->id = ++d->next_id;
	cds_lfht_add(d->blocks, hash_ptr(b->addr), &b->hnode);
	stats_alloc(d, b);
	pthread_mutex_unlock(&d->lock);
	if (d->rec)
		trec_alloc(d->rec, b->id, size, (uint64_t)(uintptr_t)stream);
	sa_trace(alloc, device, b->addr, size, (uint64_t)(uintptr_t)stream,
		 SA_TP_DYNAMIC);
	return (void *)(uintptr_t)b->addr;
}

static void bad_free(struct mdev *d, const void *ptr, const char *why)
{
	__atomic_add_fetch(&d->st.bad_frees, 1, __ATOMIC_RELAXED);
	sa_log(STALLOC_LOG_ERROR,
	       "runtime: device %d: free of %p: %s; left "
	       "alone",
	       d->device, ptr, why);
}

/* Free a block the matcher handed out (it lies in the pool). */
static void plan_free(struct mdev *d, void *ptr, size_t size, void *stream)
{
	uint64_t addr = (uint64_t)(uintptr_t)ptr;
	struct match_live l;
	size_t i;

	pthread_mutex_lock(&d->lock);
	if (unlikely(!match_find(&d->match, addr, &i))) {
		pthread_mutex_unlock(&d->lock);
		bad_free(d, ptr, "not allocated by stalloc, or already freed");
		return;
	}
	l = d->match.live[i];
	if (unlikely(size && size != l.req)) {
		pthread_mutex_unlock(&d->lock);
		bad_free(d, ptr, "size differs from the allocation's");
		return;
	}
	match_forget(&d->match, i, stream);
	d->st.frees++;
	d->st.allocated -= l.req;
	if (l.ent == MATCH_REUSED)
		d->st.dynamic_bytes -= l.req;
	pthread_mutex_unlock(&d->lock);
	if (d->rec)
		trec_free(d->rec, l.id, (uint64_t)(uintptr_t)stream);
	sa_trace(free, d->device, addr, l.req, (uint64_t)(uintptr_t)stream);
}

void stalloc_free(void *ptr, size_t size, int device, void *stream)
{
	uint64_t addr = (uint64_t)(uintptr_t)ptr, id;
	struct cds_lfht_node *node;
	struct mblock *b;
	struct mdev *d;

	if (!ptr)
		return;
	if (unlikely(device >= 0 && device < MAX_DEVICES && orphans[device]) &&
	    orphan_owns(device, addr))
		return; /* the parent's memory, in a forked child: its to free */
	d = dev_get(device);
	if (unlikely(!d))
		return;
	if (__atomic_load_n(&d->planned, __ATOMIC_ACQUIRE) &&
	    match_owns(&d->match, addr)) {
		plan_free(d, ptr, size, stream);
		return;
	}
	urcu_bp_read_lock();
	node = find_block(d, addr);
	if (unlikely(!node)) {
		urcu_bp_read_unlock();
		bad_free(d, ptr, "not allocated by stalloc, or already freed");
		return;
	}
	b = mb_of_hnode(node);
	if (unlikely(size && size != b->req)) {
		urcu_bp_read_unlock();
		bad_free(d, ptr, "size differs from the allocation's");
		return;
	}
	pthread_mutex_lock(&d->lock);
	if (unlikely(cds_lfht_del(d->blocks, node))) {
		pthread_mutex_unlock(&d->lock);
		urcu_bp_read_unlock();
		bad_free(d, ptr, "freed twice at once");
		return;
	}
	id = b->id;
	d->st.frees++;
	d->st.allocated -= b->req;
	d->st.dynamic_bytes -= b->req;
	ss_freed(&d->ss, &b->tags, ss_slot(&d->ss, stream));
	if (unlikely(b->pool || d->gp.active) &&
	    gp_free(&d->gp, &d->ss, &d->dyn, b))
		; /* kept for its graph, or set aside until the capture ends */
	else if (b->slab)
		slab_free(&d->slab, b);
	else
		dyn_free(&d->dyn, b);
	pthread_mutex_unlock(&d->lock);
	urcu_bp_read_unlock();
	/*
	 * Trimming waits for an RCU grace period (vmm_trim): never inside
	 * the read-side section above.
	 */
	if (unlikely(d->cache_limit ||
		     __atomic_load_n(&d->warm_trim, __ATOMIC_RELAXED))) {
		pthread_mutex_lock(&d->lock);
		if (d->ss.capture)
			; /* no unmap while a graph is captured */
		else if (d->warm_trim)
			dyn_release(&d->dyn);
		else
			high_water(d);
		pthread_mutex_unlock(&d->lock);
	}
	if (d->rec)
		trec_free(d->rec, id, (uint64_t)(uintptr_t)stream);
	sa_trace(free, device, addr, size, (uint64_t)(uintptr_t)stream);
}

bool mapper_is_live(int device, uint64_t addr)
{
	struct mdev *d;
	bool live;

	if (device < 0 || device >= MAX_DEVICES)
		return false;
	d = rcu_dereference(devs[device]);
	if (!d)
		return false;
	urcu_bp_read_lock();
	live = find_block(d, addr) != NULL;
	urcu_bp_read_unlock();
	return live;
}

/* Is @addr in the range of one of the parent's devices (a forked child)? */
static bool orphan_owns(int device, uint64_t addr)
{
	const struct mdev *o;

	for (o = orphans[device]; o; o = o->orphan_next)
		if (addr - vmm_base(o->vmm) < vmm_size(o->vmm))
			return true;
	return false;
}

int stalloc_owns(const void *ptr, int device)
{
	uint64_t addr = (uint64_t)(uintptr_t)ptr;
	struct mdev *d;

	if (device < 0 || device >= MAX_DEVICES)
		return 0;
	d = rcu_dereference(devs[device]);
	if (d && addr - vmm_base(d->vmm) < vmm_size(d->vmm))
		return 1;
	return unlikely(orphans[device]) && orphan_owns(device, addr);
}

/* record_stream of a block in the plan's pool: true if it was one. */
static bool plan_record_stream(struct mdev *d, uint64_t addr, void *stream)
{
	size_t i;
	bool found;

	if (!__atomic_load_n(&d->planned, __ATOMIC_ACQUIRE) ||
	    !match_owns(&d->match, addr))
		return false;
	pthread_mutex_lock(&d->lock);
	found = match_find(&d->match, addr, &i);
	if (found)
		match_record_stream(&d->match, i, stream);
	pthread_mutex_unlock(&d->lock);
	return found;
}

void stalloc_record_stream(void *ptr, void *stream)
{
	uint64_t addr = (uint64_t)(uintptr_t)ptr;
	struct cds_lfht_node *node;
	int i;

	/* the block is on some device: find it, mark it used by 2 streams */
	for (i = 0; i < MAX_DEVICES; i++) {
		struct mdev *d = rcu_dereference(devs[i]);

		if (!d)
			continue;
		if (plan_record_stream(d, addr, stream))
			return;
		urcu_bp_read_lock();
		node = find_block(d, addr);
		if (node) {
			struct mblock *b = mb_of_hnode(node);

			pthread_mutex_lock(&d->lock);
			ss_tag(&b->tags, ss_slot(&d->ss, stream), 0);
			pthread_mutex_unlock(&d->lock);
			urcu_bp_read_unlock();
			return;
		}
		urcu_bp_read_unlock();
	}
	sa_log(STALLOC_LOG_WARN,
	       "runtime: record_stream of %p: not "
	       "allocated by stalloc",
	       ptr);
}

enum pool_op { POOL_BEGIN, POOL_END, POOL_RELEASE };

/* One graph pool hook on @device's pool @id, under the device lock. */
static int pool_hook(int device, enum pool_op op, uint64_t id0, uint64_t id1,
		     int (*filter)(void *ctx, void *stream), void *ctx,
		     void (*drop)(void *ctx))
{
	const uint64_t id[2] = { id0, id1 };
	struct mdev *d = dev_get(device);
	int err;

	if (!d)
		return -EINVAL;
	pthread_mutex_lock(&d->lock);
	switch (op) {
	case POOL_BEGIN:
		err = gp_begin(&d->gp, &d->ss, id, filter, ctx, drop);
		break;
	case POOL_END:
		err = gp_end(&d->gp, &d->ss, &d->dyn, &d->slab, id);
		break;
	default:
		err = gp_release(&d->gp, &d->ss, &d->dyn, id);
		break;
	}
	pthread_mutex_unlock(&d->lock);
	if (err)
		sa_log(STALLOC_LOG_ERROR, "%s", stalloc_last_error());
	return err;
}

int stalloc_pool_begin(int device, uint64_t id0, uint64_t id1,
		       int (*filter)(void *ctx, void *stream), void *ctx,
		       void (*drop)(void *ctx))
{
	return pool_hook(device, POOL_BEGIN, id0, id1, filter, ctx, drop);
}

int stalloc_pool_end(int device, uint64_t id0, uint64_t id1)
{
	return pool_hook(device, POOL_END, id0, id1, NULL, NULL, NULL);
}

int stalloc_pool_release(int device, uint64_t id0, uint64_t id1)
{
	return pool_hook(device, POOL_RELEASE, id0, id1, NULL, NULL, NULL);
}

void stalloc_mark(const char *label)
{
	bool iteration = label && !strcmp(label, "iteration");
	int i;

	sa_trace(mark, label ? label : "mark");
	for (i = 0; i < MAX_DEVICES; i++) {
		struct mdev *d = rcu_dereference(devs[i]);
		bool ok = true;

		if (!d)
			continue;
		if (d->rec)
			trec_mark(d->rec, label ? label : "mark");
		if (d->mode == MODE_AUTO && iteration && !d->planned)
			dev_auto_mark(d);
		if (!d->planned || !iteration)
			continue;
		pthread_mutex_lock(&d->lock);
		ok = match_iteration(&d->match);
		warmup_done(d);
		pthread_mutex_unlock(&d->lock);
		if (!ok)
			sa_log(STALLOC_LOG_WARN,
			       "runtime: device %d: the plan does not fit this "
			       "workload (fingerprint 0x%016llx, most planned "
			       "requests differ): continuing in off mode",
			       d->device,
			       (unsigned long long)d->match.plan->fingerprint);
	}
}

void stalloc_init(int device_count)
{
	sa_log(STALLOC_LOG_INFO, "runtime: init for %d devices", device_count);
}

void stalloc_empty_cache(void)
{
	int i;

	for (i = 0; i < MAX_DEVICES; i++) {
		struct mdev *d = rcu_dereference(devs[i]);

		if (!d)
			continue;
		pthread_mutex_lock(&d->lock);
		dev_trim(d);
		pthread_mutex_unlock(&d->lock);
	}
}

void stalloc_memory_fraction(double fraction, int device)
{
	struct mdev *d;

	if (device < 0 || device >= MAX_DEVICES || !(fraction > 0) ||
	    fraction > 1) {
		sa_log(STALLOC_LOG_ERROR,
		       "runtime: memory fraction %g for "
		       "device %d is out of range",
		       fraction, device);
		return;
	}
	pthread_mutex_lock(&devs_lock);
	fractions[device] = fraction;
	d = devs[device];
	pthread_mutex_unlock(&devs_lock);
	if (d) {
		pthread_mutex_lock(&d->lock);
		d->fraction = fraction;
		pthread_mutex_unlock(&d->lock);
		vmm_set_phys_limit(d->vmm,
				   (uint64_t)((double)vmm_device_bytes(d->vmm) *
					      fraction));
	}
}

int stalloc_stats(int device, struct stalloc_stats *st)
{
	struct vmm_stats vs;
	struct mdev *d;
	int k;

	if (device < 0 || device >= MAX_DEVICES)
		return sa_error(-EINVAL, "runtime: device %d out of range",
				device);
	d = rcu_dereference(devs[device]);
	if (!d)
		return sa_error(-ENOENT, "runtime: device %d was never used",
				device);
	pthread_mutex_lock(&d->lock);
	*st = d->st;
	st->bad_frees = __atomic_load_n(&d->st.bad_frees, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&d->lock);
	vmm_get_stats(d->vmm, &vs);
	st->reserved = vs.phys_bytes;
	st->reserved_peak = vs.phys_bytes_peak;
	st->mapped = vs.bytes_mapped;
	st->mapped_peak = vs.bytes_mapped_peak;
	st->driver_calls = 0;
	for (k = 0; k < VMM_CALL_NR; k++)
		st->driver_calls += vs.calls[k];
	return 0;
}

static const char *mode_name(const struct mdev *d)
{
	if (d->planned)
		return d->mode == MODE_AUTO ? "auto (planned)" : "plan";
	switch (d->mode) {
	case MODE_TRACE:
		return "trace";
	case MODE_AUTO:
		return "auto (tracing)";
	case MODE_PLAN:
		return "off (no usable plan)";
	default:
		return "off";
	}
}

static bool view_add(struct mapper_view *v, size_t *cap, uint64_t lo,
		     uint64_t hi, enum mapper_owner owner)
{
	if (v->nr_busy == *cap) {
		size_t n = *cap * 2 + 64;
		struct mapper_busy *nb = realloc(v->busy, n * sizeof(*nb));

		if (!nb)
			return false;
		v->busy = nb;
		*cap = n;
	}
	v->busy[v->nr_busy++] = (struct mapper_busy){ lo, hi, owner };
	return true;
}

/* The allocated ranges of @d, in address order.  Device lock held. */
static bool view_busy(struct mdev *d, struct mapper_view *v)
{
	const struct matcher *m = &d->match;
	struct mblock *b;
	size_t cap = 0, i;

	for (i = 0; d->planned && i < m->nr_live; i++)
		if (!view_add(v, &cap, m->base + m->live[i].off,
			      m->base + m->live[i].off + m->live[i].size,
			      m->live[i].ent == MATCH_REUSED ? MAPPER_REUSED :
							       MAPPER_PLAN))
			return false;
	cds_list_for_each_entry(b, &d->dyn.blocks, addr_node)
		if (!b->free &&
		    !view_add(v, &cap, b->addr, b->addr + b->size,
			      b->slab ? MAPPER_SLAB : MAPPER_DYNAMIC))
			return false;
	return true;
}

int mapper_view_get(int device, struct mapper_view *v)
{
	struct mdev *d;
	bool ok;

	memset(v, 0, sizeof(*v));
	if (stalloc_stats(device, &v->st))
		return -ENOENT;
	d = rcu_dereference(devs[device]);
	v->device = device;
	v->vmm = d->vmm;
	pthread_mutex_lock(&d->lock);
	v->mode = mode_name(d);
	v->planned = d->planned;
	if (d->planned) {
		const struct matcher *m = &d->match;

		v->pool_lo = m->base;
		v->pool_hi = m->base + m->pool_bytes;
		v->disabled = m->disabled;
		v->fingerprint = m->plan->fingerprint;
		v->nr_entries = m->plan->nr_ent;
		v->nr_positions = m->plan->nr_positions;
		v->warmup = m->plan->warmup;
		v->cursor = m->cursor;
		v->marks = m->marks;
		snprintf(v->plan_path, sizeof(v->plan_path), "%s",
			 d->plan_path);
	}
	ok = view_busy(d, v);
	pthread_mutex_unlock(&d->lock);
	if (!ok) {
		mapper_view_put(v);
		return -ENOMEM;
	}
	return 0;
}

void mapper_view_put(struct mapper_view *v)
{
	free(v->busy);
	v->busy = NULL;
	v->nr_busy = 0;
}

void stalloc_shutdown(void)
{
	int i;

	ctl_stop(); /* it reads the devices */
	pthread_mutex_lock(&devs_lock);
	for (i = 0; i < MAX_DEVICES; i++) {
		struct mdev *d = devs[i];
		struct cds_lfht_iter iter;
		struct cds_lfht_node *node;

		if (!d)
			continue;
		rcu_set_pointer(&devs[i], NULL);
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
		if (d->planned)
			match_destroy(&d->match);
		gp_destroy(&d->gp);
		ss_destroy(&d->ss);
		vmm_space_destroy(d->vmm);
		pthread_mutex_destroy(&d->lock);
		free(d);
		fractions[i] = 0;
	}
	pthread_mutex_unlock(&devs_lock);
}
