/* SPDX-License-Identifier: MIT */
/*
 * mapper/mapper.h - the runtime's internal interface
 *
 * One struct mdev per device: its vmm space, its dynamic region and slabs,
 * its plan (the matcher), a lock-free hash table from address to block for
 * the free path, the trace recorder, and statistics.  The files:
 *
 *   alloc.c	the allocation fast path: stalloc_malloc, stalloc_free,
 *		stalloc_record_stream
 *   device.c	device life: set-up, modes, plan loading, fork, trimming,
 *		shutdown
 *   auto.c	markers and auto mode (trace, plan in a thread, switch)
 *   stats.c	statistics, out-of-memory reports, the control socket's
 *		snapshot
 *   dyn.c, slab.c, match.c, streams.c, graph.c	the allocators and
 *		stream and graph rules they share
 *   ctl-server.c, ctl-answer.c	the control socket
 *
 * Lock ordering (lib/lock.h ranks; a debug build checks it at run time):
 *
 *   ctl_lock			(ctl-server.c: the socket thread's start/stop)
 *     devs_lock		(device.c: the device table, fork, shutdown)
 *       mdev->lock		(one device's allocator; all of them, in
 *				 index order, at fork)
 *         vmm_space->lock	(vmm/: the space's slot table and pool;
 *				 the device synchronisation before an unmap
 *				 runs under it)
 *           trec_all_lock	(tracing/recorder.c: the recorder list)
 *             trec->lock	(one recorder's buffer; a snprintf only)
 *               trec->wlock	(one recorder's file; write(2) only)
 *
 * and the rules that do not fit a rank:
 *   - The RCU read side (urcu-bp) may be entered before mdev->lock (the
 *     free path looks its block up lock-free, then locks the device); so
 *     nothing that waits for a grace period (urcu_bp_synchronize_rcu,
 *     urcu_bp_barrier) may run under mdev->lock or inside a read section.
 *     Freed descriptors go through call_rcu instead.
 *   - No lock is held across a trace write to a file (the recorder queues
 *     buffers under trec->lock and writes them holding trec->wlock only),
 *     and the allocator takes mdev->lock only after a record is queued.
 *   - ctl_start() runs after devs_lock is dropped; ctl_stop() before it is
 *     taken.  The control thread reads devices through mapper_view_get()
 *     (mdev->lock, briefly) and vmm RCU readers.
 *   - The auto planner thread holds no lock while it plans; it takes
 *     mdev->lock only to publish its plan.
 *   - Whole-device synchronisations (vmm_sync) happen under mdev->lock
 *     and vmm_space->lock only: on the out-of-memory path and before an
 *     unmap, never on the allocation fast path.
 */
#ifndef STALLOC_MAPPER_MAPPER_H
#define STALLOC_MAPPER_MAPPER_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <urcu/list.h>
#include <urcu/urcu-bp.h>
#include <urcu/rculfhash.h>

#include <stalloc/stalloc.h>

#include "../lib/lock.h"
#include "../lib/util.h"
#include "../tracing/recorder.h"
#include "../vmm/vmm.h"
#include "graph.h"
#include "match.h"
#include "streams.h"

#define DYN_ALIGN 512
#define DYN_CLASSES 64

/* Small requests (at most SLAB_MAX_OBJ bytes) come from slabs. */
#define SLAB_CLASSES 14
#define SLAB_MAX_OBJ 65536
#define SLAB_BYTES ((uint64_t)256 * 1024)

struct slab;

/**
 * struct mblock - one block of the dynamic region
 * @addr: start (DYN_ALIGN aligned)
 * @size: bytes (a multiple of DYN_ALIGN)
 * @req: bytes requested (allocated blocks)
 * @id: trace ID (allocated blocks)
 * @tags: allocated: the streams using it (the allocating one, those
 *	record_stream named); free: the streams that used it and the number
 *	of its last free (mapper/streams.h)
 * @pool: the graph pool it belongs to (NULL: none)
 * @free: on a free list (a slab object: not allocated)
 * @slab: the slab it is an object of; for a dynamic block, the slab it
 *	holds, or NULL
 * @addr_node: all blocks of the region, in address order
 * @free_node: link in its size class while @free
 * @hnode: in the device's hash table while allocated
 * @rcu: deferred free: lock-free readers may hold the block
 */
struct mblock {
	uint64_t addr;
	uint64_t size;
	uint64_t req;
	uint64_t id;
	struct ss_tags tags;
	struct mpool *pool;
	uint64_t freed_at; /* free: the region's clock when it was freed */
	bool free;
	struct slab *slab;
	struct cds_list_head addr_node;
	struct cds_list_head free_node;
	struct cds_lfht_node hnode;
	struct rcu_head rcu;
};

/*
 * container_of for the three links of a block.  (cppcheck reads the
 * offsetof trick inside caa_container_of as a NULL dereference; it is not.)
 */
static inline struct mblock *mb_of_hnode(struct cds_lfht_node *n)
{
	/* cppcheck-suppress nullPointer */
	return caa_container_of(n, struct mblock, hnode);
}

static inline struct mblock *mb_of_addr(struct cds_list_head *n)
{
	/* cppcheck-suppress nullPointer */
	return caa_container_of(n, struct mblock, addr_node);
}

static inline struct mblock *mb_of_rcu(struct rcu_head *h)
{
	/* cppcheck-suppress nullPointer */
	return caa_container_of(h, struct mblock, rcu);
}

/**
 * struct dyn_region - the dynamic allocator's address range
 * @vmm: the device's space
 * @base: first address; blocks tile [base, top)
 * @top: end of the last block
 * @end: end of the range
 * @blocks: every block, by address
 * @free: free blocks by size class (floor of log2 of the size)
 * @free_bytes: bytes in free blocks
 * @ss: the device's streams (freed memory is handed out once ready)
 */
struct dyn_region {
	struct vmm_space *vmm;
	uint64_t base;
	uint64_t top;
	uint64_t end;
	struct cds_list_head blocks;
	struct cds_list_head free[DYN_CLASSES];
	uint64_t free_bytes;
	uint64_t clock; /* frees so far */
	struct sstreams *ss;
	bool fine; /* map one chunk per segment (see dyn_alloc()) */
};

struct mpool;

void dyn_init(struct dyn_region *d, struct vmm_space *vmm, uint64_t base,
	      uint64_t end, struct sstreams *ss);
/* Bytes in allocated blocks (a slab's block counts whole). */
static inline uint64_t dyn_used_bytes(const struct dyn_region *d)
{
	return d->top - d->base - d->free_bytes;
}
/*
 * Best fit of @size bytes for stream slot @slot among the free blocks
 * ready for it (streams.h); its pages are mapped and @slot waits for the
 * block's last users.  -ENOMEM when neither the free blocks nor the room
 * left can hold it, or mapping fails.
 */
int dyn_alloc(struct dyn_region *d, uint64_t size, unsigned int slot,
	      struct mblock **out);
/* Return a block; it merges with free neighbours. */
void dyn_free(struct dyn_region *d, struct mblock *b);
/*
 * Unmap every whole chunk inside free blocks whose last users' work is
 * complete, waiting for their streams (ss_settle(); @slot is the stream
 * the caller names, SS_MAX for none); with @may_sync, memory that cannot
 * be settled so is unmapped after one device synchronisation (a trim the
 * user asked for); bytes unmapped.
 */
uint64_t dyn_release(struct dyn_region *d, unsigned int slot, bool may_sync);
/* The same, least recently freed first, until @want bytes went; no sync. */
uint64_t dyn_release_some(struct dyn_region *d, uint64_t want,
			  unsigned int slot);
/* Free every block (tear-down; nothing may be allocated). */
void dyn_destroy(struct dyn_region *d);

/**
 * struct slab_cache - one device's slabs
 * @dyn: the region slabs are carved from
 * @partial: per class, the slabs with a free object
 * @all: every slab
 * @slabs: their number
 */
struct slab_cache {
	struct dyn_region *dyn;
	struct cds_list_head partial[SLAB_CLASSES];
	struct cds_list_head all;
	uint64_t slabs;
};

void slab_init(struct slab_cache *sc, struct dyn_region *dyn);
/* Is @size served from slabs? */
bool slab_takes(uint64_t size);
/* An object of at least @size bytes for stream slot @slot (as in dyn). */
int slab_alloc(struct slab_cache *sc, uint64_t size, unsigned int slot,
	       struct mblock **out);
void slab_free(struct slab_cache *sc, struct mblock *o);
/* Give every empty slab back to the dynamic region. */
void slab_trim(struct slab_cache *sc);
void slab_destroy(struct slab_cache *sc);

/* ------------------------------------------------------------- devices */

#define MAPPER_MAX_DEVICES 64

enum mdev_mode { MDEV_OFF, MDEV_TRACE, MDEV_PLAN, MDEV_AUTO };

/**
 * struct dev_hold - what steady iterations spend holding the high water
 * @budget: STALLOC_STEADY_CALLS
 * @calls: the space's driver calls at the last iteration marker
 * @shrunk: bytes the shrinker gave back since then
 * @over: the most it was asked for at once since then
 * @floor: the shrink floor set so far (vmm_set_shrink_floor())
 * @tried: the floor was raised at the last marker
 * @warned: gave up: the calls cannot be bought off (warned once)
 * @marks: iteration markers seen (a rejected plan's fallback: no matcher
 *	counts them)
 * @warmup: the rejected plan's iterations before its steady ones
 */
struct dev_hold {
	uint64_t budget;
	uint64_t calls;
	uint64_t shrunk;
	uint64_t over;
	uint64_t floor;
	bool tried;
	bool warned;
	uint64_t marks;
	uint64_t warmup;
};

/**
 * struct mdev - one device's allocator
 * @device: its ordinal
 * @mode: what STALLOC_MODE asked for
 * @lock: the allocator lock (rank SA_RANK_DEV): every field below that
 *	changes after set-up, unless said otherwise
 * @vmm: its address space
 * @dyn: the dynamic region
 * @slab_dyn: the slabs' own region, at the top of the space: slabs live
 *	long and pin the chunks under them, so they are kept together
 *	instead of among the dynamic blocks
 * @slab: slabs carved from @slab_dyn
 * @ss: its streams (mapper/streams.h)
 * @gp: CUDA graph pools
 * @blocks: live dynamic blocks by address (rculfhash, read lock-free)
 * @rec: trace recorder (trace mode, auto mode while tracing), or NULL
 * @planned: a usable plan is in use (read without the lock: atomics)
 * @match: the plan and where the requests are in it (when @planned)
 * @auto_iters: auto mode: iterations to trace before planning
 * @auto_marks: iteration markers seen while tracing
 * @auto_sync: STALLOC_AUTO_SYNC: plan at the marker, no thread
 * @auto_started: the planner thread @auto_thread was started
 * @auto_plan: its plan, published under @lock, taken at a marker
 * @auto_path: the trace it plans from
 * @auto_allocs: requests traced (atomic), for auto mode without markers
 * @auto_next_try: at that count, look again (atomic)
 * @auto_try_at: at that count, try to find the iterations in the trace so
 *	far (half as many again after each try)
 * @auto_busy: a try's planner thread runs (under @lock)
 * @auto_markerless: @auto_plan came from a try without markers
 * @auto_check: STALLOC_AUTO_CHECK: replay the trace with the plan first
 * @auto_snap: bytes of the trace written when the running try began
 * @plan_path: where the plan in use came from (introspection), or the
 *	plan its check rejected (@plan_rejected) and the two peaks
 * @plan_rejected: plan or auto mode was given a plan its check rejected
 * @rejected_cap: plan or auto mode, a rejected plan: the least an online policy
 *	reserved in its check, the most the steady iterations' high water may
 *	rise to save driver calls (0: no plan rejected; device.c)
 * @next_id: the last trace ID handed out
 * @st: statistics, under @lock (@st.bad_frees stays zero)
 * @bad_frees: frees of unknown or mismatched pointers (atomic, no lock)
 * @fraction: memory fraction PyTorch set (0: none)
 * @cache_limit: STALLOC_CACHE_LIMIT, the most cached bytes kept
 * @warm_trim: first planned iteration: dynamic memory freed is unmapped
 *	at once (read without the lock: atomics)
 * @orphan_next: after fork, the parent's devices of an older generation
 * @peak: where the reserved bytes were at their peak (stats.c)
 * @warm_id: the last trace ID made before the plan took over (0: not yet)
 * @warm_live: requested bytes of dynamic blocks made by then, still live
 * @hold: what steady iterations spend holding the high water
 */
struct mdev {
	int device;
	enum mdev_mode mode;
	struct sa_mutex lock;
	struct vmm_space *vmm;
	struct dyn_region dyn;
	struct dyn_region slab_dyn;
	struct slab_cache slab;
	struct sstreams ss;
	struct graph_pools gp;
	struct cds_lfht *blocks;
	struct trec *rec;
	bool planned;
	struct matcher match;
	uint64_t auto_iters;
	uint64_t auto_marks;
	bool auto_started;
	bool auto_sync;
	pthread_t auto_thread;
	struct stalloc_plan *auto_plan;
	char auto_path[4096];
	uint64_t auto_allocs;
	uint64_t auto_next_try;
	uint64_t auto_try_at;
	bool auto_busy;
	bool auto_markerless;
	bool auto_check;
	bool plan_rejected;
	uint64_t rejected_cap;
	bool warm_trim;
	uint64_t auto_snap;
	char plan_path[4096];
	uint64_t next_id;
	struct stalloc_stats st;
	uint64_t bad_frees;
	double fraction;
	uint64_t cache_limit;
	struct mdev *orphan_next;
	struct stalloc_peak peak;
	uint64_t warm_id;
	uint64_t warm_live;
	struct dev_hold hold;
};

/* The devices in use (RCU-published), and the parent's after a fork. */
extern struct mdev *mdev_table[MAPPER_MAX_DEVICES];
extern struct mdev *mdev_orphans[MAPPER_MAX_DEVICES];

/* device.c: make the device's state on first use; NULL and a message. */
struct mdev *dev_get_slow(int device);

/* The device's state, made on first use; NULL (and a message) on error. */
static inline struct mdev *dev_get(int device)
{
	struct mdev *d = NULL;

	if (likely(device >= 0 && device < MAPPER_MAX_DEVICES))
		d = rcu_dereference(mdev_table[device]);
	return likely(d) ? d : dev_get_slow(device);
}

/* The device's state if it was ever used, else NULL (no set-up). */
static inline struct mdev *dev_peek(int device)
{
	if (device < 0 || device >= MAPPER_MAX_DEVICES)
		return NULL;
	return rcu_dereference(mdev_table[device]);
}

/*
 * Lay out the space from @lo (the plan's pool lies below): the dynamic
 * region, then the slabs' region at the top.  Nothing may be allocated in
 * either yet.
 */
void dev_regions(struct mdev *d, uint64_t lo);
/* Tell the control socket that @plan (at @path) was rejected by its check. */
void dev_plan_rejected(struct mdev *d, const char *path,
		       const struct stalloc_plan *plan);
/*
 * Unmap what is free in the dynamic and the slabs' regions, once its last
 * users' work is complete (dyn_release(); @slot: the stream the caller
 * names, SS_MAX for none; @may_sync: else after one device sync).
 */
void dev_release(struct mdev *d, unsigned int slot, bool may_sync);
/* Is @addr in a range of the parent's devices (in a forked child)? */
bool dev_orphan_owns(int device, uint64_t addr);
/*
 * Give cached memory back (free chunks unmapped, pooled chunks released);
 * nothing while a graph is captured.  @slot: the stream the caller names;
 * SS_MAX (none: a trim the user asked for) may synchronise the device
 * once.  Device lock held, not inside an RCU read-side section.
 */
void dev_trim(struct mdev *d, unsigned int slot);
/* The STALLOC_CACHE_LIMIT policy: trim when the cache passes it. */
void dev_high_water(struct mdev *d, unsigned int slot);
/* Out of memory for @size: log what is allocated, reserved and mapped. */
void dev_report_oom(struct mdev *d, size_t size);
/*
 * The warm-up is over (the matcher told so): free what it left mapped in
 * the dynamic region.  @slot: the stream the caller names (SS_MAX: none).
 * Device lock held, no RCU read-side section.
 */
void dev_warmup_done(struct mdev *d, unsigned int slot);
/*
 * At an iteration marker of a planned run (device lock held): if the
 * iteration just ended spent more than STALLOC_STEADY_CALLS driver calls
 * giving memory back at the high water, let the high water rise by its
 * largest give-back, up to the least online peak in the plan's check.
 */
void dev_hold_iteration(struct mdev *d);
/*
 * The same at an iteration marker of a device whose plan its check
 * rejected (@rejected_cap set; device lock held).
 */
void dev_hold_fallback(struct mdev *d);

/* stats.c: take the peak accounting (a new reserved peak was reached). */
void dev_peak_take(struct mdev *d);

/* A new reserved peak?  Then account for it.  Device lock held. */
static inline void dev_peak_check(struct mdev *d)
{
	if (unlikely(vmm_phys_bytes(d->vmm) > d->peak.reserved))
		dev_peak_take(d);
}

/* auto.c: set up auto mode (dynamic region in the upper half, tracing). */
int dev_auto_start(struct mdev *d);
/* auto.c: an "iteration" marker in auto mode, not planned yet. */
void dev_auto_mark(struct mdev *d);
/* auto.c: a new device takes the markers made before it existed. */
void dev_mark_early(struct mdev *d);
/* auto.c: stalloc_shutdown(): the next devices start from no marker. */
void dev_marks_forget(void);
/*
 * auto.c: a request was traced in auto mode and no marker ever came: now
 * and then, find the iterations in the trace so far and switch to a plan.
 * Called with no lock held.
 */
void dev_auto_tick(struct mdev *d);

/* ---------------------------------- introspection (the control socket) */

enum mapper_owner {
	MAPPER_PLAN, /* a planned slot */
	MAPPER_REUSED, /* a dynamic request in the plan's free space */
	MAPPER_DYNAMIC, /* a block of the dynamic region */
	MAPPER_SLAB, /* a slab with objects allocated */
};

/* An allocated range [lo, hi) and what holds it. */
struct mapper_busy {
	uint64_t lo;
	uint64_t hi;
	enum mapper_owner owner;
};

/**
 * struct mapper_view - a snapshot of one device, for the control socket
 * @device: its ordinal
 * @mode: "off", "trace", "plan", "auto"
 * @vmm: its space (valid until stalloc_shutdown, which stops the socket
 *	first)
 * @pool_lo: the plan's pool [@pool_lo, @pool_hi) (empty without a plan)
 * @busy: allocated ranges, sorted by address; @nr_busy of them
 * @st: its statistics
 * @peak: where its reserved bytes were at their peak
 * @planned: a plan is in use; @disabled: it was dropped (another workload)
 * @rejected: no plan in use: the one given was rejected by its check
 * @plan_path: where the plan came from
 * @fingerprint, @nr_entries, @nr_positions, @warmup: the plan's
 * @cursor: the matcher's next expected position
 * @marks: iteration markers seen
 */
struct mapper_view {
	int device;
	const char *mode;
	struct vmm_space *vmm;
	uint64_t pool_lo;
	uint64_t pool_hi;
	struct mapper_busy *busy;
	size_t nr_busy;
	struct stalloc_stats st;
	struct stalloc_peak peak;
	bool planned;
	bool disabled;
	bool rejected;
	char plan_path[4096];
	uint64_t fingerprint;
	uint64_t nr_entries;
	uint64_t nr_positions;
	uint64_t warmup;
	uint64_t cursor;
	uint64_t marks;
};

/* Snapshot @device: 0, -ENOENT if it was never used, -ENOMEM. */
int mapper_view_get(int device, struct mapper_view *v);
void mapper_view_put(struct mapper_view *v);

/* The control socket: started with the first device, stopped at shutdown. */
void ctl_start(void);
void ctl_stop(void);

/*
 * Is @addr the start of a live block of the dynamic region of @device?  The
 * free path's lock-free lookup on its own (for benchmarks and tests).
 */
bool mapper_is_live(int device, uint64_t addr);

#endif /* STALLOC_MAPPER_MAPPER_H */
