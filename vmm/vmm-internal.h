/* SPDX-License-Identifier: MIT */
/*
 * vmm/vmm-internal.h - structures shared by the files of vmm/ only
 */
#ifndef STALLOC_VMM_INTERNAL_H
#define STALLOC_VMM_INTERNAL_H

#include <pthread.h>

#include <urcu/list.h>
#include <urcu/urcu-bp.h>

#include "vmm.h"

/**
 * struct vmm_chunk - one physical chunk
 * @id: number unique in its space, from 1, in creation order
 * @handle: the backend's handle
 * @map_count: slots this chunk is mapped at (space lock)
 * @pool_node: link in the space's pool while @map_count is 0 (space lock)
 * @rcu: deferred free once the chunk is destroyed
 *
 * @id and @handle never change, so an RCU reader may read them from any
 * chunk it found in the table.  The descriptor is freed only after a grace
 * period once the chunk is destroyed.
 */
struct vmm_chunk {
	uint64_t id;
	uint64_t handle;
	unsigned int map_count;
	struct cds_list_head pool_node;
	struct rcu_head rcu;
};

/**
 * struct vmm_space - one device's address space
 * @be: the opened backend
 * @lock: serialises writers (everything but lookups and call counters)
 * @base: start of the reservation
 * @size: size of the reservation, a multiple of @chunk
 * @chunk: chunk size in bytes
 * @nr_slots: @size / @chunk
 * @slots: RCU-protected table: chunk mapped at each slot, or NULL
 * @pool: chunks mapped nowhere, most recently unmapped first
 * @phys_limit: most physical bytes the space may hold
 * @next_id: id of the next chunk created
 * @st: statistics (calls[] and call_failures[] are atomic, the rest under
 *	@lock)
 */
struct vmm_space {
	struct vmm_backend be;
	pthread_mutex_t lock;
	uint64_t base;
	uint64_t size;
	size_t chunk;
	uint64_t nr_slots;
	struct vmm_chunk **slots;
	struct cds_list_head pool;
	uint64_t phys_limit;
	uint64_t next_id;
	struct vmm_stats st;
};

/* Count one backend call of kind @k that returned @err; returns @err. */
static inline int vmm_counted(struct vmm_space *s, enum vmm_call k, int err)
{
	__atomic_add_fetch(&s->st.calls[k], 1, __ATOMIC_RELAXED);
	if (err)
		__atomic_add_fetch(&s->st.call_failures[k], 1,
				   __ATOMIC_RELAXED);
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
void vmm_chunks_free(struct cds_list_head *list);
int vmm_unmap_run(struct vmm_space *s, uint64_t first, uint64_t n);

#endif /* STALLOC_VMM_INTERNAL_H */
