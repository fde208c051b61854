/* SPDX-License-Identifier: MIT */
/*
 * mapper/mapper.h - the runtime's internal interface
 *
 * One struct mdev per device: its vmm space, its dynamic region, a
 * lock-free hash table from address to block for the free path, the trace
 * recorder in trace mode, and statistics.  dyn.c is the dynamic region's
 * allocator; runtime.c the devices, modes and the public entry points.
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

#include "../vmm/vmm.h"
#include "graph.h"
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
 * @ent: its plan entry
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
	struct sstreams *ss;
};

struct mpool;

void dyn_init(struct dyn_region *d, struct vmm_space *vmm, uint64_t base,
	      uint64_t end, struct sstreams *ss);
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
/* Unmap every whole chunk inside free blocks; bytes unmapped. */
uint64_t dyn_release(struct dyn_region *d);
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

/* ---------------------------------- introspection (the control socket) */

#define MAPPER_MAX_DEVICES 64

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
 * @planned: a plan is in use; @disabled: it was dropped (another workload)
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
	bool planned;
	bool disabled;
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
