// SPDX-License-Identifier: MIT
/*
 * tools/cli/replay/expandable.c - a model of PyTorch's expandable segments
 *
 * With expandable_segments:True (CUDACachingAllocator.cpp, Note
 * [Expandable Segments]) a pool does not cudaMalloc one segment per miss:
 * each stream gets, per pool, one virtual range as large as the device
 * memory plus an eighth (cuMemAddressReserve), and physical pages are
 * created and mapped into it as the allocator needs them -- 2 MiB pages
 * (kSmallBuffer) for the small pool, 20 MiB (kLargeBuffer) for the large
 * one.  A request that no cached block fits maps pages at the lowest
 * address where free and unmapped space together are large enough
 * (find_expandable_block, map_block); running out of memory unmaps every
 * page wholly inside a free block (unmap_block), and a segment left with
 * no page mapped is released.
 *
 * Invariants (on top of caching.c's): the blocks of an expandable segment
 * tile its whole range; an unmapped block is in its pool's unmapped set,
 * is never next to another unmapped block, and covers whole pages; a page
 * is mapped exactly when a mapped block covers part of it.
 */
#include <stdlib.h>
#include <string.h>

#include "model.h"

static bool allocatable(const struct cm_block *b)
{
	return b && !b->allocated;
}

/* Is there @size bytes of free or unmapped space from @b on? */
static bool has_space(const struct cm_block *b, uint64_t size)
{
	uint64_t bytes = 0;

	while (bytes < size && allocatable(b)) {
		bytes += b->size;
		b = b->next;
	}
	return bytes >= size;
}

static struct xseg *xseg_new(struct cmodel *m, uint64_t stream, bool small)
{
	struct xseg *es = cm_alloc_or_die(sizeof(*es));
	uint64_t va = m->cfg.capacity + m->cfg.capacity / 8;

	es->page = small ? CM_SMALL_BUFFER : CM_LARGE_BUFFER;
	es->nr_pages = (va + es->page - 1) / es->page;
	es->mapped = cm_alloc_or_die(es->nr_pages ? es->nr_pages : 1);
	es->base = cm_new_va(m, es->nr_pages * es->page, es->page);
	es->stream = stream;
	if (m->nr_xs == m->cap_xs) {
		size_t cap = m->cap_xs ? m->cap_xs * 2 : 8;
		struct xseg **v = cm_alloc_or_die(cap * sizeof(*v));

		if (m->nr_xs)
			memcpy(v, m->xs, m->nr_xs * sizeof(*v));
		free(m->xs);
		m->xs = v;
		m->cap_xs = cap;
	}
	m->xs[m->nr_xs++] = es;
	m->st.va_reserve++;
	m->st.segments++;
	return es;
}

static void xseg_free(struct cmodel *m, struct xseg *es)
{
	size_t i;

	for (i = 0; i < m->nr_xs; i++) {
		if (m->xs[i] == es) {
			m->xs[i] = m->xs[--m->nr_xs];
			break;
		}
	}
	free(es->mapped);
	free(es);
}

/*
 * ExpandableSegment::map(): create and map the pages under [ptr, ptr +
 * size), @ptr on a page boundary.  Returns the bytes mapped (whole pages),
 * or 0 when the device memory runs out (the pages made by this call are
 * released again).
 */
static uint64_t xseg_map(struct cmodel *m, struct xseg *es, uint64_t ptr,
			 uint64_t size)
{
	size_t begin = (ptr - es->base) / es->page;
	size_t end = (ptr + size - es->base + es->page - 1) / es->page;
	size_t i;

	for (i = begin; i < end; i++) {
		if (m->st.reserved + (i - begin + 1) * es->page >
		    m->cfg.capacity) {
			m->st.failed_calls++; /* cuMemCreate: out of memory */
			m->st.mem_release += i - begin;
			return 0;
		}
		m->st.mem_create++;
		m->st.created_bytes += es->page;
	}
	for (i = begin; i < end; i++)
		es->mapped[i] = 1;
	m->st.mem_map += end - begin;
	m->st.mem_set_access++;
	return (end - begin) * es->page;
}

/*
 * ExpandableSegment::unmap(): unmap and release the pages wholly inside
 * [ptr, ptr + size).  Sets *@uptr to where they start; returns their bytes.
 */
static uint64_t xseg_unmap(struct cmodel *m, struct xseg *es, uint64_t ptr,
			   uint64_t size, uint64_t *uptr)
{
	size_t begin = (ptr - es->base + es->page - 1) / es->page;
	size_t end = (ptr + size - es->base) / es->page;
	size_t i;

	*uptr = ptr;
	if (begin >= end)
		return 0;
	for (i = begin; i < end; i++)
		es->mapped[i] = 0;
	m->st.mem_unmap += end - begin;
	m->st.mem_release += end - begin;
	*uptr = es->base + begin * es->page;
	return (end - begin) * es->page;
}

/*
 * find_expandable_block(): the lowest address of the stream's segments
 * where free and unmapped space add up to @size, or a new segment.
 */
static struct cm_block *find_block(struct cmodel *m, uint64_t stream,
				   struct cm_pool *pool, uint64_t size)
{
	struct cm_block key = { .stream = stream };
	struct bset *s = &pool->unmapped;
	struct cm_block *c;
	struct xseg *es;
	size_t i;

	for (i = bset_lower_bound(s, &key);
	     i < s->n && s->v[i]->stream == stream; i++) {
		c = s->v[i];
		if (allocatable(c->prev))
			c = c->prev;
		if (has_space(c, size))
			return c;
	}
	es = xseg_new(m, stream, pool->small);
	c = cm_new_block(m, es->base, es->nr_pages * es->page, stream, pool);
	c->mapped = false;
	c->es = es;
	bset_insert(s, c);
	return c;
}

/* map_block(): map the first @size bytes of unmapped @b, merge it. */
static bool map_block(struct cmodel *m, struct cm_block *b, uint64_t size)
{
	struct cm_pool *pool = b->pool;
	uint64_t got = xseg_map(m, b->es, b->ptr, size);

	if (!got)
		return false;
	bset_erase(&pool->unmapped, b);
	b->mapped = true;
	if (got < b->size) {
		struct cm_block *rest = cm_new_block(
			m, b->ptr + got, b->size - got, b->stream, pool);

		rest->mapped = false;
		rest->es = b->es;
		rest->prev = b;
		rest->next = b->next;
		if (b->next)
			b->next->prev = rest;
		b->next = rest;
		bset_insert(&pool->unmapped, rest);
		b->size = got;
	}
	cm_merge(m, b, b->prev);
	cm_merge(m, b, b->next);
	bset_insert(&pool->blocks, b);
	cm_reserve(m, got);
	return true;
}

/* try_allocate_expandable_block(): map until a free block fits @size. */
struct cm_block *xs_try_allocate(struct cmodel *m, uint64_t stream,
				 struct cm_pool *pool, uint64_t size)
{
	struct cm_block *c = find_block(m, stream, pool, size);

	if (!c->mapped && !map_block(m, c, c->size < size ? c->size : size))
		return NULL;
	while (c->size < size) {
		/* free -> unmapped -> ...: map some of the next, merge */
		struct cm_block *next = c->next;
		uint64_t want = size - c->size;

		if (!map_block(m, next, want < next->size ? want : next->size))
			return NULL;
		c = next;
	}
	bset_erase(&pool->blocks, c);
	return c;
}

/* unmap_block(): give back the whole pages inside free block @b. */
static void unmap_block(struct cmodel *m, struct cm_block *b)
{
	struct cm_pool *pool = b->pool;
	uint64_t uptr, before, after;
	uint64_t usize = xseg_unmap(m, b->es, b->ptr, b->size, &uptr);

	if (!usize)
		return;
	bset_erase(&pool->blocks, b);
	before = uptr - b->ptr;
	if (before) {
		struct cm_block *f =
			cm_new_block(m, b->ptr, before, b->stream, pool);

		f->es = b->es;
		f->prev = b->prev;
		if (f->prev)
			f->prev->next = f;
		f->next = b;
		b->prev = f;
		bset_insert(&pool->blocks, f);
	}
	after = b->size - before - usize;
	if (after) {
		struct cm_block *f =
			cm_new_block(m, uptr + usize, after, b->stream, pool);

		f->es = b->es;
		f->next = b->next;
		if (f->next)
			f->next->prev = f;
		f->prev = b;
		b->next = f;
		bset_insert(&pool->blocks, f);
	}
	b->ptr = uptr;
	b->size = usize;
	b->mapped = false;
	cm_merge(m, b, b->prev);
	cm_merge(m, b, b->next);
	bset_insert(&pool->unmapped, b);
	cm_unreserve(m, usize);
}

/*
 * release_blocks()'s expandable part: unmap the pages of every free block
 * in @list; a segment left wholly unmapped is released
 * (release_expandable_segment).
 */
void xs_release_pool(struct cmodel *m, struct cm_pool *pool,
		     struct cm_block **list, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		struct cm_block *b = list[i];

		unmap_block(m, b);
		if (b->prev || b->next || b->mapped)
			continue;
		bset_erase(&pool->unmapped, b);
		xseg_free(m, b->es);
		cm_delete_block(m, b);
		m->st.va_free++;
		m->st.segments--;
	}
}

void xs_destroy_all(struct cmodel *m)
{
	while (m->nr_xs)
		xseg_free(m, m->xs[m->nr_xs - 1]);
	free(m->xs);
	m->xs = NULL;
	m->cap_xs = 0;
}
