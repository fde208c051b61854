// SPDX-License-Identifier: MIT
/*
 * mapper/slab.c - small dynamic requests from slabs
 *
 * Requests of at most SLAB_MAX_OBJ bytes are rounded up to one of
 * SLAB_CLASSES object sizes (multiples of 512 B growing by about 1.5x, so
 * at most a third is lost to rounding) and served from a slab: one block of
 * the dynamic region cut into equal objects.  A slab holds a stack of its
 * free object indexes and an array of block descriptors, one per object,
 * made once: an allocation pops an index and a free pushes it back, with no
 * best-fit search, no split and no merge, and small requests no longer
 * scatter holes over the dynamic region.
 *
 * Invariants: a slab with a free object is on its class's partial list; a
 * full one is on no list.  An empty slab is given back to the dynamic
 * region when its class has another slab with room, or on slab_trim(); so
 * each class keeps at most one empty slab cached.
 *
 * Streams: each object carries the tags of its last users, like a dynamic
 * block, and is handed out only when ready for the requesting stream
 * (streams.h); the top object of each partial slab of the class is tried.
 * A new slab's objects start as used on the stream that made it, at the
 * current free number: that stream was ordered after the block's previous
 * users when the block was handed out, so its next checkpoint covers them
 * all.  A slab given back to the region carries the union of its objects'
 * tags.
 *
 * Locking: the caller holds the device lock.  Object descriptors are
 * looked up lock-free on the free path, so a slab (with its descriptors)
 * is freed after an RCU grace period.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../lib/util.h"
#include "mapper.h"

static const uint32_t slab_sizes[SLAB_CLASSES] = {
	512,  1024,  1536,  2048,  3072,  4096,	 6144,
	8192, 12288, 16384, 24576, 32768, 49152, SLAB_MAX_OBJ,
};

/**
 * struct slab - one dynamic block cut into objects of one size
 * @block: the dynamic region's block under it
 * @cls: its size class
 * @nr: objects in it
 * @nr_free: free objects; their indexes are @stack[0 .. nr_free)
 * @listed: on the partial list
 * @node: on its class's partial list while it has a free object
 * @all_node: on the cache's list of every slab
 * @rcu: deferred free
 * @stack: free object indexes
 * @obj: one descriptor per object
 */
struct slab {
	struct mblock *block;
	unsigned int cls;
	uint32_t nr;
	uint32_t nr_free;
	bool listed;
	struct cds_list_head node;
	struct cds_list_head all_node;
	struct rcu_head rcu;
	uint32_t *stack;
	struct mblock obj[];
};

static unsigned int slab_class(uint64_t size)
{
	unsigned int c = 0;

	while (slab_sizes[c] < size)
		c++;
	return c;
}

void slab_init(struct slab_cache *sc, struct dyn_region *dyn)
{
	unsigned int c;

	memset(sc, 0, sizeof(*sc));
	sc->dyn = dyn;
	for (c = 0; c < SLAB_CLASSES; c++)
		CDS_INIT_LIST_HEAD(&sc->partial[c]);
	CDS_INIT_LIST_HEAD(&sc->all);
}

static void slab_free_rcu(struct rcu_head *h)
{
	/* cppcheck-suppress nullPointer */
	struct slab *s = caa_container_of(h, struct slab, rcu);

	free(s->stack);
	free(s);
}

static int slab_new(struct slab_cache *sc, unsigned int cls, unsigned int slot,
		    struct slab **out)
{
	uint32_t nr = (uint32_t)(SLAB_BYTES / slab_sizes[cls]), i;
	struct slab *s;
	int err;

	s = calloc(1, sizeof(*s) + nr * sizeof(s->obj[0]));
	if (!s)
		return sa_error(-ENOMEM, "mapper: out of host memory");
	s->stack = malloc(nr * sizeof(*s->stack));
	if (!s->stack) {
		err = sa_error(-ENOMEM, "mapper: out of host memory");
		goto err_free;
	}
	err = dyn_alloc(sc->dyn, SLAB_BYTES, slot, &s->block);
	if (err)
		goto err_free;
	s->block->slab = s; /* marks the block as a slab's (introspection) */
	s->cls = cls;
	s->nr = s->nr_free = nr;
	for (i = 0; i < nr; i++) {
		struct mblock *o = &s->obj[i];

		o->addr = s->block->addr + (uint64_t)i * slab_sizes[cls];
		o->size = slab_sizes[cls];
		o->free = true;
		o->slab = s;
		o->tags = ss_user(slot);
		o->tags.seq[0] = sc->dyn->ss->seq;
		/* hand out the lowest addresses first */
		s->stack[i] = nr - 1 - i;
	}
	cds_list_add(&s->node, &sc->partial[cls]);
	cds_list_add(&s->all_node, &sc->all);
	s->listed = true;
	sc->slabs++;
	*out = s;
	return 0;

err_free:
	free(s->stack);
	free(s);
	return err;
}

int slab_alloc(struct slab_cache *sc, uint64_t size, unsigned int slot,
	       struct mblock **out)
{
	struct sstreams *ss = sc->dyn->ss;
	unsigned int cls = slab_class(size);
	struct mblock *o = NULL;
	struct slab *s;
	int err;

	cds_list_for_each_entry(s, &sc->partial[cls], node) {
		o = &s->obj[s->stack[s->nr_free - 1]];
		if (ss_ready(ss, &o->tags, slot))
			break;
		o = NULL;
	}
	if (!o) {
		err = slab_new(sc, cls, slot, &s);
		if (err)
			return err;
		o = &s->obj[s->stack[s->nr_free - 1]];
	}
	err = ss_wait(ss, &o->tags, slot, false);
	if (err)
		return err;
	s->nr_free--;
	if (!s->nr_free) {
		cds_list_del(&s->node);
		s->listed = false;
	}
	o->free = false;
	o->tags = ss_user(slot);
	*out = o;
	return 0;
}

/* Give an empty slab's block back to the dynamic region. */
static void slab_release(struct slab_cache *sc, struct slab *s)
{
	uint32_t i;

	if (s->listed)
		cds_list_del(&s->node);
	cds_list_del(&s->all_node);
	s->block->slab = NULL;
	for (i = 0; i < s->nr; i++)
		ss_merge(sc->dyn->ss, &s->block->tags, &s->obj[i].tags);
	dyn_free(sc->dyn, s->block);
	sc->slabs--;
	urcu_bp_call_rcu(&s->rcu, slab_free_rcu);
}

void slab_free(struct slab_cache *sc, struct mblock *o)
{
	struct slab *s = o->slab;
	struct slab *other;

	o->free = true;
	o->req = 0;
	s->stack[s->nr_free++] = (uint32_t)(o - s->obj);
	if (!s->listed) {
		cds_list_add(&s->node, &sc->partial[s->cls]);
		s->listed = true;
	}
	if (s->nr_free < s->nr)
		return;
	/* empty: keep it only if it is its class's last slab with room */
	cds_list_for_each_entry(other, &sc->partial[s->cls], node)
		if (other != s) {
			slab_release(sc, s);
			return;
		}
}

bool slab_takes(uint64_t size)
{
	return size <= SLAB_MAX_OBJ;
}

void slab_trim(struct slab_cache *sc)
{
	struct slab *s, *tmp;
	unsigned int c;

	for (c = 0; c < SLAB_CLASSES; c++)
		cds_list_for_each_entry_safe(s, tmp, &sc->partial[c], node)
			if (s->nr_free == s->nr)
				slab_release(sc, s);
}

void slab_destroy(struct slab_cache *sc)
{
	struct slab *s, *tmp;

	/* tear-down: objects still allocated are the caller's leak */
	cds_list_for_each_entry_safe(s, tmp, &sc->all, all_node) {
		cds_list_del(&s->all_node);
		free(s->stack);
		/* cppcheck-suppress uninitvar */
		free(s);
	}
	slab_init(sc, sc->dyn);
}
