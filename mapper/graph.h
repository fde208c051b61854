/* SPDX-License-Identifier: MIT */
/*
 * mapper/graph.h - private pools for CUDA graph capture
 *
 * PyTorch's CUDAGraph calls its allocator's begin_allocate_to_pool before a
 * capture begins, end_allocate_to_pool once it ended, and release_pool when
 * the graph goes.  Memory allocated during the capture (on the streams the
 * pool's filter names) is the graph's: replays reuse those addresses, so
 * none of it may go to ordinary tensors until the pool is released.  And
 * ordinary memory freed during the capture may not go to the graph either:
 * it is set aside until the capture ends.
 */
#ifndef STALLOC_MAPPER_GRAPH_H
#define STALLOC_MAPPER_GRAPH_H

#include <stdbool.h>
#include <stdint.h>

#include <urcu/list.h>

struct mblock;
struct dyn_region;
struct slab_cache;
struct sstreams;

/**
 * struct mpool - one graph pool
 * @id: PyTorch's MempoolId_t (two numbers)
 * @active: between begin and end: allocations on its streams come here
 * @released: release_pool was called; blocks still live go back when freed
 * @filter: does an allocation on @stream belong to the pool (NULL: all)
 * @ctx: @filter's argument; @drop releases it (at end or release)
 * @free: blocks of the pool freed since: only the pool reuses them
 * @live: blocks of the pool allocated now
 * @node: on the device's list of pools
 */
struct mpool {
	uint64_t id[2];
	bool active;
	bool released;
	int (*filter)(void *ctx, void *stream);
	void *ctx;
	void (*drop)(void *ctx);
	struct cds_list_head free;
	uint64_t live;
	struct cds_list_head node;
};

/**
 * struct graph_pools - one device's pools
 * @pools: every pool not yet released and emptied
 * @deferred: ordinary blocks freed during a capture, set aside until it ends
 * @active: pools between begin and end
 */
struct graph_pools {
	struct cds_list_head pools;
	struct cds_list_head deferred;
	unsigned int active;
};

void gp_init(struct graph_pools *gp);
/* Tear-down: drop every pool (their blocks die with the region). */
void gp_destroy(struct graph_pools *gp);

/* The hooks.  Device lock held.  0, -ENOMEM, or -ENOENT for an unknown id. */
int gp_begin(struct graph_pools *gp, struct sstreams *ss, const uint64_t id[2],
	     int (*filter)(void *ctx, void *stream), void *ctx,
	     void (*drop)(void *ctx));
int gp_end(struct graph_pools *gp, struct sstreams *ss, struct dyn_region *dyn,
	   struct slab_cache *slab, const uint64_t id[2]);
int gp_release(struct graph_pools *gp, struct sstreams *ss,
	       struct dyn_region *dyn, const uint64_t id[2]);

/* The active pool an allocation on @stream belongs to, or NULL. */
struct mpool *gp_route(struct graph_pools *gp, void *stream);
/* @size bytes from @pool for stream slot @slot. */
int gp_alloc(struct mpool *pool, struct dyn_region *dyn, uint64_t size,
	     unsigned int slot, struct mblock **out);
/*
 * Block @b, freed on stream slot @slot (its tags updated already): kept
 * for its pool, set aside during a capture, or false for the caller to
 * free as usual.
 */
bool gp_free(struct graph_pools *gp, struct sstreams *ss,
	     struct dyn_region *dyn, struct mblock *b);

#endif /* STALLOC_MAPPER_GRAPH_H */
