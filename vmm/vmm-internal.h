/* SPDX-License-Identifier: MIT */
/*
 * vmm/vmm-internal.h - structures shared by the files of vmm/ only
 */
#ifndef STALLOC_VMM_INTERNAL_H
#define STALLOC_VMM_INTERNAL_H

#include <pthread.h>

#include <urcu/list.h>
#include <urcu/urcu-bp.h>

#include "../lib/lock.h"
#include "vmm.h"

/**
 * struct vmm_seg - one segment: a physical allocation of consecutive chunks
 * @id: id of its first chunk; its chunks are @id .. @id + @nr - 1 (ids are
 *	unique in the space, from 1, in creation order)
 * @handle: the backend's handle
 * @nr: chunks in the segment (the driver allocation is @nr * chunk bytes)
 * @map_count: driver mappings of this segment (space lock)
 * @pool_node: link in the space's pool while @map_count is 0 (space lock)
 * @rcu: deferred free once the segment is destroyed
 *
 * A driver maps a handle whole, at offset 0, and unmaps whole mappings
 * only, so a segment is always mapped whole and unmapped whole.
 * @id, @handle and @nr never change, so an RCU reader may read them from any
 * segment it found in the table.  The descriptor is freed only after a grace
 * period once the segment is destroyed.
 */
struct vmm_seg {
	uint64_t id;
	uint64_t handle;
	uint32_t nr;
	unsigned int map_count;
	struct cds_list_head pool_node;
	struct rcu_head rcu;
};

/**
 * struct vmm_ment - one driver mapping: segment @seg mapped whole at slot
 *	@first (slots @first .. @first + @seg->nr - 1 point here)
 * @seg: the segment
 * @first: its first slot
 * @rcu: deferred free once unmapped
 *
 * Immutable once published; freed after a grace period.
 */
struct vmm_ment {
	struct vmm_seg *seg;
	uint64_t first;
	struct rcu_head rcu;
};

/**
 * struct vmm_space - one device's address space
 * @be: the opened backend
 * @lock: serialises writers (everything but lookups and call counters)
 * @base: start of the reservation
 * @size: size of the reservation, a multiple of @chunk
 * @chunk: chunk size in bytes
 * @seg_max: most chunks in one segment made by vmm_map()
 * @nr_slots: @size / @chunk
 * @slots: RCU-protected table: the mapping covering each slot, or NULL
 * @pool: segments mapped nowhere, most recently unmapped first
 * @phys_limit: most physical bytes the space may hold
 * @next_id: id of the next chunk created
 * @fork_gen: vmm_fork_gen when the space was made (see vmm_forked())
 * @shrink: called before a mapping raises the physical high water
 * @shrink_ctx: its argument
 * @shrink_floor: the shrinker is not called below this many bytes mapped
 * @st: statistics (calls[] and call_failures[] are atomic, the rest under
 *	@lock)
 */
struct vmm_space {
	struct vmm_backend be;
	struct sa_mutex lock;
	uint64_t base;
	uint64_t size;
	size_t chunk;
	uint64_t seg_max;
	uint64_t nr_slots;
	struct vmm_ment **slots;
	struct cds_list_head pool;
	uint64_t phys_limit;
	uint64_t next_id;
	unsigned long fork_gen;
	void (*shrink)(void *ctx, uint64_t va, uint64_t bytes, uint64_t over);
	void *shrink_ctx;
	uint64_t shrink_floor;
	struct vmm_stats st; /* under @lock; its calls[] stay zero */
	uint64_t calls[VMM_CALL_NR]; /* atomic, no lock */
	uint64_t call_failures[VMM_CALL_NR]; /* atomic, no lock */
};

/* Bumped in every child by a pthread_atfork handler (vmm/space.c). */
extern unsigned long vmm_fork_gen;

/* Count one backend call of kind @k that returned @err; returns @err. */
static inline int vmm_counted(struct vmm_space *s, enum vmm_call k, int err)
{
	__atomic_add_fetch(&s->calls[k], 1, __ATOMIC_RELAXED);
	if (err)
		__atomic_add_fetch(&s->call_failures[k], 1, __ATOMIC_RELAXED);
	return err;
}

/* Slot index of @va, which the caller checked is inside the space. */
static inline uint64_t vmm_slot(const struct vmm_space *s, uint64_t va)
{
	return (va - s->base) / s->chunk;
}

static inline uint64_t vmm_slot_va(const struct vmm_space *s, uint64_t i)
{
	return s->base + i * s->chunk;
}

int vmm_check_range(const struct vmm_space *s, const char *op, uint64_t va,
		    uint64_t bytes);
void vmm_segs_free(struct cds_list_head *list);
int vmm_seg_destroy(struct vmm_space *s, struct vmm_seg *g,
		    struct cds_list_head *dead);
int vmm_unmap_ment(struct vmm_space *s, struct vmm_ment *e);
int vmm_check_child(const struct vmm_space *s, const char *op);

#endif /* STALLOC_VMM_INTERNAL_H */
