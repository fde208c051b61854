// SPDX-License-Identifier: MIT
/*
 * mapper/dyn.c - the dynamic region: best fit over VMM-backed blocks
 *
 * Blocks tile [base, top) in address order; free ones also sit in a list
 * per size class (floor(log2(size))).  An allocation takes the smallest
 * free block that fits (scanning its own class, then the first non-empty
 * larger class), splitting off the rest; failing that, the region grows at
 * its top.  A request larger than a chunk is carved from the high end of a
 * free block below the top, smaller ones from the low end: the two kinds
 * then meet less in one hole, and a small long-lived block does not cut
 * the hole a large one leaves in two (on the real cs336 recording off
 * mode reserves 102 MiB less; Documentation/mapper.rst has the suite).
 * Pages are mapped on demand: the chunks under a block are mapped when it
 * is handed out if they are not already (vmm_map_missing), so the region
 * grows by mapping and never moves or copies anything; with @fine (auto
 * mode's traced iterations, auto.c) one chunk per segment, so that any
 * free chunk can be given back, not only segments no live block pins.
 * dyn_release() unmaps the mappings that lie wholly inside free blocks
 * (vmm_unmap_present), which is how it shrinks; dyn_release_some() stops
 * once enough went, least recently freed blocks first (each free block
 * keeps the region's free count at its free, @freed_at), those whose last
 * users' work is already reported complete before any the host would have
 * to wait for.  Before an unmap the block's last users' work must be
 * complete, on their own streams only (ss_settle()); a block whose users
 * cannot be waited for that way stays mapped, except on a trim that names
 * no stream, which synchronises the device once.
 *
 * Streams: a free block carries the tags of its last users (streams.h).
 * Only blocks ready for the requesting stream are handed out; the stream
 * then waits, on the device, for their checkpoints; same-stream reuse
 * waits for nothing, since a stream runs in order.  Merged blocks carry
 * the union of their tags.
 *
 * Locking: the caller holds the device lock for every call.  Block
 * descriptors that merge away are freed after an RCU grace period
 * (call_rcu), because the free path looks blocks up without the lock.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../lib/util.h"
#include "../tracing/tp.h"
#include "mapper.h"

static unsigned int size_class(uint64_t size)
{
	return 63 - (unsigned int)__builtin_clzll(size);
}

static void free_block_rcu(struct rcu_head *h)
{
	free(mb_of_rcu(h));
}

static void retire(struct mblock *b)
{
	urcu_bp_call_rcu(&b->rcu, free_block_rcu);
}

static void put_free(struct dyn_region *d, struct mblock *b)
{
	b->free = true;
	cds_list_add(&b->free_node, &d->free[size_class(b->size)]);
	d->free_bytes += b->size;
}

static void take_free(struct dyn_region *d, struct mblock *b)
{
	b->free = false;
	cds_list_del(&b->free_node);
	d->free_bytes -= b->size;
}

void dyn_init(struct dyn_region *d, struct vmm_space *vmm, uint64_t base,
	      uint64_t end, struct sstreams *ss)
{
	int c;

	memset(d, 0, sizeof(*d));
	d->vmm = vmm;
	d->base = d->top = base;
	d->end = end;
	d->ss = ss;
	CDS_INIT_LIST_HEAD(&d->blocks);
	for (c = 0; c < DYN_CLASSES; c++)
		CDS_INIT_LIST_HEAD(&d->free[c]);
}

/* Is @b the last block, the one at the region's top? */
static bool at_top(const struct dyn_region *d, const struct mblock *b)
{
	return b->addr_node.next == &d->blocks;
}

static struct mblock *best_fit(struct dyn_region *d, uint64_t size,
			       unsigned int slot)
{
	struct mblock *b, *best = NULL;
	unsigned int c;

	for (c = size_class(size); c < DYN_CLASSES && !best; c++)
		cds_list_for_each_entry(b, &d->free[c], free_node)
			if (b->size >= size &&
			    (!best || b->size < best->size) &&
			    ss_ready(d->ss, &b->tags, slot))
				best = b;
	return best;
}

/*
 * Cut @size bytes for a request out of free block @b (taken off its free
 * list): its first @size bytes, or its last when @high; the rest stays a
 * free block.  Returns the request's block.
 */
static struct mblock *split(struct dyn_region *d, struct mblock *b,
			    uint64_t size, bool high)
{
	uint64_t keep = high ? b->size - size : size;
	struct mblock *n;

	if (b->size - size < DYN_ALIGN)
		return b;
	n = calloc(1, sizeof(*n));
	if (!n)
		return b; /* the whole block: correct, slightly wasteful */
	n->addr = b->addr + keep;
	n->size = b->size - keep;
	n->tags = b->tags;
	n->freed_at = b->freed_at;
	b->size = keep;
	cds_list_add(&n->addr_node, &b->addr_node);
	if (!high) {
		put_free(d, n);
		return b;
	}
	put_free(d, b);
	return n;
}

static int grow(struct dyn_region *d, uint64_t size, unsigned int slot,
		struct mblock **out)
{
	struct mblock *last = NULL, *b;
	uint64_t need = size;

	if (!cds_list_empty(&d->blocks)) {
		last = mb_of_addr(d->blocks.prev);
		if (last->free && ss_ready(d->ss, &last->tags, slot))
			need = size - last->size;
		else
			last = NULL;
	}
	if (need > d->end - d->top)
		return sa_error(-ENOMEM,
				"mapper: device %d: the dynamic region is "
				"full (%llu bytes wanted)",
				vmm_device(d->vmm), (unsigned long long)size);
	if (last) {
		take_free(d, last);
		last->size = size;
		d->top += need;
		sa_trace(grow, vmm_device(d->vmm), d->top);
		*out = last;
		return 0;
	}
	b = calloc(1, sizeof(*b));
	if (!b)
		return sa_error(-ENOMEM, "mapper: out of host memory");
	b->addr = d->top;
	b->size = size;
	d->top += size;
	sa_trace(grow, vmm_device(d->vmm), d->top);
	cds_list_add_tail(&b->addr_node, &d->blocks);
	*out = b;
	return 0;
}

int dyn_alloc(struct dyn_region *d, uint64_t size, unsigned int slot,
	      struct mblock **out)
{
	struct mblock *b;
	int err;

	if (!sa_round_up(size, DYN_ALIGN, &size))
		return sa_error(-ENOMEM, "mapper: size overflows");
	b = best_fit(d, size, slot);
	if (b) {
		take_free(d, b);
		b = split(d, b, size,
			  size > vmm_chunk_bytes(d->vmm) && !at_top(d, b));
	} else {
		err = grow(d, size, slot, &b);
		if (err)
			return err;
	}
	d->ss->cur = slot; /* the shrinker's (streams.h) */
	err = vmm_map_missing_flags(d->vmm, b->addr, b->size,
				    d->fine ? VMM_FINE : 0, NULL);
	d->ss->cur = SS_MAX;
	if (!err)
		err = ss_wait(d->ss, &b->tags, slot, false);
	if (err) {
		dyn_free(d, b);
		return err;
	}
	b->tags = ss_user(slot);
	*out = b;
	return 0;
}

/* Merge free @b with its free neighbours; returns the merged block. */
static struct mblock *merge(struct dyn_region *d, struct mblock *b)
{
	struct mblock *n;

	if (!at_top(d, b)) {
		n = mb_of_addr(b->addr_node.next);
		if (n->free) {
			take_free(d, n);
			b->size += n->size;
			ss_merge(d->ss, &b->tags, &n->tags);
			cds_list_del(&n->addr_node);
			retire(n);
		}
	}
	if (b->addr_node.prev != &d->blocks) {
		n = mb_of_addr(b->addr_node.prev);
		if (n->free) {
			take_free(d, n);
			n->size += b->size;
			ss_merge(d->ss, &n->tags, &b->tags);
			cds_list_del(&b->addr_node);
			retire(b);
			b = n;
		}
	}
	return b;
}

void dyn_free(struct dyn_region *d, struct mblock *b)
{
	b->req = 0;
	b = merge(d, b);
	b->freed_at = ++d->clock;
	put_free(d, b);
}

static int by_freed_at(const void *a, const void *b)
{
	const struct mblock *x = *(struct mblock *const *)a;
	const struct mblock *y = *(struct mblock *const *)b;

	return (x->freed_at > y->freed_at) - (x->freed_at < y->freed_at);
}

/*
 * Unmap the chunks wholly inside free block @b once its users' work is
 * complete (ss_settle(), stream slot @slot named by the caller; the host
 * waits for their streams only if @block); the bytes unmapped.  Memory not
 * known complete stays mapped unless @may_sync: then the device is
 * synchronised, once (later blocks find it synced).
 */
static uint64_t release_block(struct dyn_region *d, struct mblock *b,
			      unsigned int slot, bool may_sync, bool block)
{
	uint64_t chunk = vmm_chunk_bytes(d->vmm), base = vmm_base(d->vmm);
	uint64_t bytes = b->size, got;

	/* nothing lies past the last block: its tail chunk goes too */
	if (at_top(d, b))
		bytes += (chunk - (b->addr + b->size - base) % chunk) % chunk;
	if (!vmm_any_present(d->vmm, b->addr, bytes) ||
	    (ss_settle(d->ss, &b->tags, slot, block) &&
	     (!may_sync || ss_sync(d->ss))))
		return 0;
	vmm_unmap_present(d->vmm, b->addr, bytes, VMM_SYNCED, &got);
	return got;
}

/* Every free block, in address order: no host memory needed. */
static uint64_t release_all(struct dyn_region *d, unsigned int slot,
			    bool may_sync)
{
	uint64_t released = 0;
	struct mblock *b;

	cds_list_for_each_entry(b, &d->blocks, addr_node)
		if (b->free)
			released += release_block(d, b, slot, may_sync, true);
	return released;
}

uint64_t dyn_release_some(struct dyn_region *d, uint64_t want,
			  unsigned int slot)
{
	uint64_t released = 0;
	struct mblock *b, **v = NULL;
	size_t n = 0, i;
	int pass;

	cds_list_for_each_entry(b, &d->blocks, addr_node)
		n += b->free;
	if (n)
		v = malloc(n * sizeof(*v));
	if (!v) {
		/* out of host memory: the simple way */
		released = n ? release_all(d, slot, false) : 0;
		goto out_trace;
	}
	n = 0;
	cds_list_for_each_entry(b, &d->blocks, addr_node)
		if (b->free)
			v[n++] = b;
	/*
	 * Least recently freed first: the least likely to be reused soon.
	 * What is known complete first; the host waits only if that is short.
	 */
	qsort(v, n, sizeof(*v), by_freed_at);
	for (pass = 0; pass < 2 && released < want; pass++)
		for (i = 0; i < n && released < want; i++)
			released += release_block(d, v[i], slot, false, pass);
	free(v);
out_trace:
	if (released)
		sa_trace(shrink, vmm_device(d->vmm), released);
	return released;
}

uint64_t dyn_release(struct dyn_region *d, unsigned int slot, bool may_sync)
{
	uint64_t released = release_all(d, slot, may_sync);

	if (released)
		sa_trace(shrink, vmm_device(d->vmm), released);
	return released;
}

void dyn_destroy(struct dyn_region *d)
{
	struct mblock *b, *tmp;

	cds_list_for_each_entry_safe(b, tmp, &d->blocks, addr_node) {
		cds_list_del(&b->addr_node);
		free(b);
	}
	dyn_init(d, d->vmm, d->base, d->end, d->ss);
}
