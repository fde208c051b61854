// SPDX-License-Identifier: MIT
/*
 * mapper/alloc.c - the allocation fast path: stalloc_malloc, stalloc_free,
 * stalloc_record_stream
 *
 * A device's state is found with one RCU load (dev_get(), mapper.h).  An
 * allocation takes the device lock once: the plan first (a planned slot,
 * or the plan's free space), else a slab object or a dynamic block.  The
 * free path finds a dynamic block through the lock-free rculfhash under
 * the urcu-bp read lock, so a bad pointer is told without any lock, then
 * takes the device lock once.  Trace records and tracepoints are written
 * after the device lock is dropped; nothing here logs or counts under
 * another lock.  The slow paths (out of memory, graph capture, trimming at
 * the cache limit) sit behind one unlikely branch each.
 *
 * Locking: mapper.h ("Lock ordering").  Failure never crashes the caller:
 * NULL and a message (stalloc_last_error()).
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "../lib/util.h"
#include "../tracing/tp.h"
#include "mapper.h"

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

static void stats_alloc(struct mdev *d, const struct mblock *b)
{
	d->st.allocs++;
	d->st.allocated += b->req;
	d->st.allocated_total += b->req;
	if (d->st.allocated > d->st.allocated_peak)
		d->st.allocated_peak = d->st.allocated;
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
	/* an iteration start told from the requests */
	if (unlikely(d->match.warm_done))
		dev_warmup_done(d, ss_slot(&d->ss, stream));
	if (!hit) {
		d->st.plan_misses += miss;
		if (miss)
			sa_trace(plan_miss, d->device, size);
		return false;
	}
	d->st.allocs++;
	d->st.allocated += size;
	d->st.allocated_total += size;
	if (d->st.allocated > d->st.allocated_peak)
		d->st.allocated_peak = d->st.allocated;
	dev_peak_check(d);
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
	sa_mutex_unlock(&d->lock);
	sa_trace(oom, d->device, size);
	dev_report_oom(d, size);
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
	sa_mutex_lock(&d->lock);
	if (unlikely(d->gp.active))
		return graph_alloc(d, size, stream);
	if (d->planned) {
		uint64_t addr, id = ++d->next_id;
		int cls;

		if (plan_alloc(d, size, id, stream, &addr, &cls)) {
			sa_mutex_unlock(&d->lock);
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
		dev_trim(d, slot);
		d->st.alloc_retries++;
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
	dev_peak_check(d);
	sa_mutex_unlock(&d->lock);
	if (d->rec) {
		trec_alloc(d->rec, b->id, size, (uint64_t)(uintptr_t)stream);
		if (unlikely(d->mode == MDEV_AUTO))
			dev_auto_tick(d);
	}
	sa_trace(alloc, device, b->addr, size, (uint64_t)(uintptr_t)stream,
		 SA_TP_DYNAMIC);
	return (void *)(uintptr_t)b->addr;
}

static void bad_free(struct mdev *d, const void *ptr, const char *why)
{
	__atomic_add_fetch(&d->bad_frees, 1, __ATOMIC_RELAXED);
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

	sa_mutex_lock(&d->lock);
	if (unlikely(!match_find(&d->match, addr, &i))) {
		sa_mutex_unlock(&d->lock);
		bad_free(d, ptr, "not allocated by stalloc, or already freed");
		return;
	}
	l = d->match.live[i];
	if (unlikely(size && size != l.req)) {
		sa_mutex_unlock(&d->lock);
		bad_free(d, ptr, "size differs from the allocation's");
		return;
	}
	match_forget(&d->match, i, stream);
	d->st.frees++;
	d->st.allocated -= l.req;
	d->st.freed_total += l.req;
	if (l.ent == MATCH_REUSED)
		d->st.dynamic_bytes -= l.req;
	sa_mutex_unlock(&d->lock);
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
	if (unlikely(device >= 0 && device < MAPPER_MAX_DEVICES &&
		     mdev_orphans[device]) &&
	    dev_orphan_owns(device, addr))
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
	sa_mutex_lock(&d->lock);
	if (unlikely(cds_lfht_del(d->blocks, node))) {
		sa_mutex_unlock(&d->lock);
		urcu_bp_read_unlock();
		bad_free(d, ptr, "freed twice at once");
		return;
	}
	id = b->id;
	d->st.frees++;
	d->st.allocated -= b->req;
	d->st.freed_total += b->req;
	d->st.dynamic_bytes -= b->req;
	if (unlikely(id <= d->warm_id))
		d->warm_live -= b->req; /* a warm-up leftover goes */
	ss_freed(&d->ss, &b->tags, ss_slot(&d->ss, stream));
	if (unlikely(b->pool || d->gp.active) &&
	    gp_free(&d->gp, &d->ss, &d->dyn, b))
		; /* kept for its graph, or set aside until the capture ends */
	else if (b->slab)
		slab_free(&d->slab, b);
	else
		dyn_free(&d->dyn, b);
	sa_mutex_unlock(&d->lock);
	urcu_bp_read_unlock();
	/*
	 * Trimming unmaps, and an unmap waits for the device first:
	 * kept out of the read-side section above, which would hold back
	 * grace periods that long.  It waits for none itself (call_rcu).
	 */
	if (unlikely(d->cache_limit ||
		     __atomic_load_n(&d->warm_trim, __ATOMIC_RELAXED))) {
		sa_mutex_lock(&d->lock);
		if (d->ss.capture)
			; /* no unmap while a graph is captured */
		else if (d->warm_trim)
			dev_release(d, ss_slot(&d->ss, stream), false);
		else
			dev_high_water(d, ss_slot(&d->ss, stream));
		sa_mutex_unlock(&d->lock);
	}
	if (d->rec)
		trec_free(d->rec, id, (uint64_t)(uintptr_t)stream);
	sa_trace(free, device, addr, size, (uint64_t)(uintptr_t)stream);
}

bool mapper_is_live(int device, uint64_t addr)
{
	struct mdev *d;
	bool live;

	if (device < 0 || device >= MAPPER_MAX_DEVICES)
		return false;
	d = rcu_dereference(mdev_table[device]);
	if (!d)
		return false;
	urcu_bp_read_lock();
	live = find_block(d, addr) != NULL;
	urcu_bp_read_unlock();
	return live;
}

/* record_stream of a block in the plan's pool: true if it was one. */
static bool plan_record_stream(struct mdev *d, uint64_t addr, void *stream)
{
	size_t i;
	bool found;

	if (!__atomic_load_n(&d->planned, __ATOMIC_ACQUIRE) ||
	    !match_owns(&d->match, addr))
		return false;
	sa_mutex_lock(&d->lock);
	found = match_find(&d->match, addr, &i);
	if (found)
		match_record_stream(&d->match, i, stream);
	sa_mutex_unlock(&d->lock);
	return found;
}

void stalloc_record_stream(void *ptr, void *stream)
{
	uint64_t addr = (uint64_t)(uintptr_t)ptr;
	struct cds_lfht_node *node;
	int i;

	/* the block is on some device: find it, mark it used by 2 streams */
	for (i = 0; i < MAPPER_MAX_DEVICES; i++) {
		struct mdev *d = rcu_dereference(mdev_table[i]);

		if (!d)
			continue;
		if (plan_record_stream(d, addr, stream))
			return;
		urcu_bp_read_lock();
		node = find_block(d, addr);
		if (node) {
			struct mblock *b = mb_of_hnode(node);

			sa_mutex_lock(&d->lock);
			ss_tag(&b->tags, ss_slot(&d->ss, stream), 0);
			sa_mutex_unlock(&d->lock);
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
