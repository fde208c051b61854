// SPDX-License-Identifier: MIT
/*
 * mapper/graph.c - private pools for CUDA graph capture
 *
 * A pool's blocks are ordinary blocks of the dynamic region, marked with
 * their pool (mblock->pool).  Freed, they go on the pool's own list, not
 * the region's free lists, so only the pool hands them out again (a
 * replay reuses them in the order the capture did).  Released, the pool's
 * blocks go back to the region, tagged for a device sync first: replays
 * ran on streams the allocator never saw.  Ordinary blocks freed while a
 * capture is under way are set aside (@deferred) and freed when the last
 * capture ends, as PyTorch's own allocator does.
 *
 * While any pool is active the streams record nothing and wait on nothing
 * new (sstreams.capture): a capture must see no capture-unsafe call.
 *
 * Locking: the device lock for every call.
 */
#include <errno.h>
#include <stdlib.h>

#include "../lib/util.h"
#include "mapper.h"

void gp_init(struct graph_pools *gp)
{
	CDS_INIT_LIST_HEAD(&gp->pools);
	CDS_INIT_LIST_HEAD(&gp->deferred);
	gp->active = 0;
}

static void pool_drop(struct mpool *p)
{
	if (p->drop)
		p->drop(p->ctx);
	p->drop = NULL;
	p->filter = NULL;
}

void gp_destroy(struct graph_pools *gp)
{
	struct mpool *p, *tmp;

	cds_list_for_each_entry_safe(p, tmp, &gp->pools, node) {
		cds_list_del(&p->node);
		pool_drop(p);
		free(p);
	}
	gp_init(gp);
}

static struct mpool *pool_find(struct graph_pools *gp, const uint64_t id[2])
{
	struct mpool *p;

	cds_list_for_each_entry(p, &gp->pools, node)
		if (p->id[0] == id[0] && p->id[1] == id[1] && !p->released)
			return p;
	return NULL;
}

int gp_begin(struct graph_pools *gp, struct sstreams *ss, const uint64_t id[2],
	     int (*filter)(void *ctx, void *stream), void *ctx,
	     void (*drop)(void *ctx))
{
	struct mpool *p = pool_find(gp, id);

	if (p && p->active)
		return sa_error(-EBUSY,
				"mapper: graph pool (%llu, %llu) is already "
				"being allocated to",
				(unsigned long long)id[0],
				(unsigned long long)id[1]);
	if (!p) {
		p = calloc(1, sizeof(*p));
		if (!p)
			return sa_error(-ENOMEM, "mapper: out of host memory");
		p->id[0] = id[0];
		p->id[1] = id[1];
		CDS_INIT_LIST_HEAD(&p->free);
		cds_list_add(&p->node, &gp->pools);
	}
	p->filter = filter;
	p->ctx = ctx;
	p->drop = drop;
	p->active = true;
	gp->active++;
	ss->capture++;
	return 0;
}

static void pool_deactivate(struct graph_pools *gp, struct sstreams *ss,
			    struct mpool *p)
{
	p->active = false;
	pool_drop(p);
	gp->active--;
	ss->capture--;
}

int gp_end(struct graph_pools *gp, struct sstreams *ss, struct dyn_region *dyn,
	   struct slab_cache *slab, const uint64_t id[2])
{
	struct mpool *p = pool_find(gp, id);
	struct mblock *b, *tmp;

	if (!p || !p->active)
		return sa_error(-ENOENT,
				"mapper: graph pool (%llu, %llu) is not being "
				"allocated to",
				(unsigned long long)id[0],
				(unsigned long long)id[1]);
	pool_deactivate(gp, ss, p);
	if (gp->active)
		return 0;
	/* the last capture ended: what was set aside is free now */
	cds_list_for_each_entry_safe(b, tmp, &gp->deferred, free_node) {
		cds_list_del(&b->free_node);
		if (b->slab)
			slab_free(slab, b);
		else
			dyn_free(dyn, b);
	}
	return 0;
}

/* Give a released pool's block back to the region: a device sync first. */
static void pool_return(struct sstreams *ss, struct dyn_region *dyn,
			struct mblock *b)
{
	b->pool = NULL;
	ss_tag_sync(ss, &b->tags);
	dyn_free(dyn, b);
}

int gp_release(struct graph_pools *gp, struct sstreams *ss,
	       struct dyn_region *dyn, const uint64_t id[2])
{
	struct mpool *p = pool_find(gp, id);
	struct mblock *b, *tmp;

	if (!p)
		return sa_error(-ENOENT, "mapper: no graph pool (%llu, %llu)",
				(unsigned long long)id[0],
				(unsigned long long)id[1]);
	if (p->active)
		pool_deactivate(gp, ss, p);
	p->released = true;
	cds_list_for_each_entry_safe(b, tmp, &p->free, free_node) {
		cds_list_del(&b->free_node);
		pool_return(ss, dyn, b);
	}
	if (!p->live) {
		cds_list_del(&p->node);
		free(p);
	}
	return 0;
}

struct mpool *gp_route(struct graph_pools *gp, void *stream)
{
	struct mpool *p;

	cds_list_for_each_entry(p, &gp->pools, node)
		if (p->active && (!p->filter || p->filter(p->ctx, stream)))
			return p;
	return NULL;
}

int gp_alloc(struct mpool *pool, struct dyn_region *dyn, uint64_t size,
	     unsigned int slot, struct mblock **out)
{
	struct mblock *b, *best = NULL;
	int err;

	if (!sa_round_up(size, DYN_ALIGN, &size))
		return sa_error(-ENOMEM, "mapper: size overflows");
	/* the pool's own freed blocks first, if one fits without much waste */
	cds_list_for_each_entry(b, &pool->free, free_node)
		if (b->size >= size && b->size - size <= size / 4 &&
		    (!best || b->size < best->size) &&
		    ss_ready(dyn->ss, &b->tags, slot))
			best = b;
	if (best) {
		err = ss_wait(dyn->ss, &best->tags, slot, false);
		if (err)
			return err;
		cds_list_del(&best->free_node);
		best->tags = ss_user(slot);
		*out = best;
	} else {
		err = dyn_alloc(dyn, size, slot, out);
		if (err)
			return err;
		(*out)->pool = pool;
	}
	pool->live++;
	return 0;
}

bool gp_free(struct graph_pools *gp, struct sstreams *ss,
	     struct dyn_region *dyn, struct mblock *b)
{
	struct mpool *p = b->pool;

	if (p) {
		p->live--;
		if (!p->released) {
			cds_list_add(&b->free_node, &p->free);
			return true;
		}
		pool_return(ss, dyn, b);
		if (!p->live) {
			cds_list_del(&p->node);
			free(p);
		}
		return true;
	}
	if (!gp->active)
		return false;
	cds_list_add(&b->free_node, &gp->deferred);
	return true;
}

/* ------------------------------------------- the public pool hooks */

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
	sa_mutex_lock(&d->lock);
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
	sa_mutex_unlock(&d->lock);
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
