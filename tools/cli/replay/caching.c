// SPDX-License-Identifier: MIT
/*
 * tools/cli/replay/caching.c - a model of PyTorch's CUDACachingAllocator
 *
 * DeviceCachingAllocator (c10/cuda/CUDACachingAllocator.cpp) step by step,
 * for one device, without a device: malloc() rounds the request
 * (round_size), picks the small or large pool (get_pool), looks for the
 * best cached block (get_free_block), else asks the driver for a segment
 * (alloc_block: cudaMalloc of get_allocation_size(), or a mapping in an
 * expandable segment, see expandable.c), else frees oversize cached
 * blocks (release_available_cached_blocks) or the whole cache
 * (release_cached_blocks) and tries again, else fails (OutOfMemoryError).
 * The block found is split when should_split() says so.  free() merges a
 * block with its free neighbours (try_merge_blocks) and caches it.
 *
 * Invariants: a free mapped block is in exactly one pool's size set and
 * never next to another free mapped block of its segment; an allocated
 * block is in no set; st.reserved is the sum of the segments (or mapped
 * pages) held.  Not modelled: CUDA graphs and private pools, events and
 * record_stream (a trace has no kernels), roundup_power2_divisions and
 * garbage_collection_threshold (off by default), memory fraction (the
 * capacity plays its part).  Single-threaded: the replay is.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

void *cm_alloc_or_die(size_t n)
{
	void *p = calloc(1, n);

	if (!p) {
		fputs("stalloc-replay: model: out of host memory\n", stderr);
		exit(1);
	}
	return p;
}

/* ------------------------------------------------------- sorted sets */

/* BlockComparatorSize: stream, then size, then address. */
static int cmp_size(const struct cm_block *a, const struct cm_block *b)
{
	if (a->stream != b->stream)
		return a->stream < b->stream ? -1 : 1;
	if (a->size != b->size)
		return a->size < b->size ? -1 : 1;
	if (a->ptr != b->ptr)
		return a->ptr < b->ptr ? -1 : 1;
	return 0;
}

/* BlockComparatorAddress: stream, then address. */
static int cmp_addr(const struct cm_block *a, const struct cm_block *b)
{
	if (a->stream != b->stream)
		return a->stream < b->stream ? -1 : 1;
	if (a->ptr != b->ptr)
		return a->ptr < b->ptr ? -1 : 1;
	return 0;
}

/* The first element not below @key. */
size_t bset_lower_bound(const struct bset *s, const struct cm_block *key)
{
	size_t lo = 0, hi = s->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (s->cmp(s->v[mid], key) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

void bset_insert(struct bset *s, struct cm_block *b)
{
	size_t i = bset_lower_bound(s, b);

	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 64;
		struct cm_block **v = realloc(s->v, cap * sizeof(*v));

		if (!v) {
			fputs("stalloc-replay: model: out of host memory\n",
			      stderr);
			exit(1);
		}
		s->v = v;
		s->cap = cap;
	}
	memmove(&s->v[i + 1], &s->v[i], (s->n - i) * sizeof(*s->v));
	s->v[i] = b;
	s->n++;
}

void bset_erase(struct bset *s, const struct cm_block *b)
{
	size_t i = bset_lower_bound(s, b);

	if (i == s->n || s->v[i] != b) {
		/* a broken invariant: the model is wrong, not the input */
		fprintf(stderr,
			"stalloc-replay: model: block 0x%llx+%llu not in its "
			"set\n",
			(unsigned long long)b->ptr,
			(unsigned long long)b->size);
		abort();
	}
	memmove(&s->v[i], &s->v[i + 1], (s->n - i - 1) * sizeof(*s->v));
	s->n--;
}

static void bset_erase_at(struct bset *s, size_t i)
{
	memmove(&s->v[i], &s->v[i + 1], (s->n - i - 1) * sizeof(*s->v));
	s->n--;
}

/* ------------------------------------------------------------ blocks */

struct cm_block *cm_new_block(struct cmodel *m, uint64_t ptr, uint64_t size,
			      uint64_t stream, struct cm_pool *pool)
{
	struct cm_block *b = cm_alloc_or_die(sizeof(*b));

	b->ptr = ptr;
	b->size = size;
	b->stream = stream;
	b->pool = pool;
	b->mapped = true;
	b->all_next = m->all;
	if (m->all)
		m->all->all_prev = b;
	m->all = b;
	return b;
}

void cm_delete_block(struct cmodel *m, struct cm_block *b)
{
	if (b->all_prev)
		b->all_prev->all_next = b->all_next;
	else
		m->all = b->all_next;
	if (b->all_next)
		b->all_next->all_prev = b->all_prev;
	free(b);
}

/*
 * try_merge_blocks(): @dst (in no set) takes in its free neighbour @src
 * when both are mapped or both unmapped.  Returns the bytes taken in.
 */
uint64_t cm_merge(struct cmodel *m, struct cm_block *dst, struct cm_block *src)
{
	uint64_t size;

	if (!src || src->allocated || dst->mapped != src->mapped)
		return 0;
	bset_erase(src->mapped ? &src->pool->blocks : &src->pool->unmapped,
		   src);
	if (dst->prev == src) {
		dst->ptr = src->ptr;
		dst->prev = src->prev;
		if (dst->prev)
			dst->prev->next = dst;
	} else {
		dst->next = src->next;
		if (dst->next)
			dst->next->prev = dst;
	}
	size = src->size;
	dst->size += size;
	cm_delete_block(m, src);
	return size;
}

void cm_reserve(struct cmodel *m, uint64_t bytes)
{
	m->st.reserved += bytes;
	if (m->st.reserved > m->st.reserved_peak)
		m->st.reserved_peak = m->st.reserved;
}

void cm_unreserve(struct cmodel *m, uint64_t bytes)
{
	m->st.reserved -= bytes;
}

/* Fresh addresses: a released segment's range is never handed out again. */
uint64_t cm_new_va(struct cmodel *m, uint64_t bytes, uint64_t align)
{
	uint64_t va = (m->next_va + align - 1) / align * align;

	m->next_va = va + bytes;
	return va;
}

/* ------------------------------------------------------------ policy */

/* round_size(): at least kMinBlockSize, a multiple of it. */
static uint64_t round_size(uint64_t size)
{
	if (size < CM_MIN_BLOCK)
		return CM_MIN_BLOCK;
	return (size + CM_MIN_BLOCK - 1) / CM_MIN_BLOCK * CM_MIN_BLOCK;
}

/* get_allocation_size(): what cudaMalloc is asked for. */
static uint64_t allocation_size(uint64_t size)
{
	if (size <= CM_SMALL_SIZE)
		return CM_SMALL_BUFFER;
	if (size < CM_MIN_LARGE_ALLOC)
		return CM_LARGE_BUFFER;
	return (size + CM_ROUND_LARGE - 1) / CM_ROUND_LARGE * CM_ROUND_LARGE;
}

static bool expandable(const struct cmodel *m)
{
	return m->cfg.kind == CM_EXPANDABLE;
}

/* should_split() */
static bool should_split(const struct cmodel *m, const struct cm_block *b,
			 uint64_t size)
{
	uint64_t remaining = b->size - size;

	if (b->pool->small || expandable(m))
		return remaining >= CM_MIN_BLOCK;
	return size < m->cfg.max_split_size && remaining > CM_SMALL_SIZE;
}

/* In expandable segments a free block may grow into the pages after it. */
static uint64_t expandable_size(const struct cm_block *b)
{
	return b->size + (b->next && !b->next->mapped ? b->next->size : 0);
}

/* get_free_block(): best fit by (stream, size, address). */
static struct cm_block *get_free_block(struct cmodel *m, struct cm_pool *pool,
				       uint64_t stream, uint64_t size)
{
	struct bset *s = &pool->blocks;
	struct cm_block key = { .stream = stream, .size = size };
	uint64_t mss = m->cfg.max_split_size;
	struct cm_block *b;
	size_t i = bset_lower_bound(s, &key);

	if (i == s->n || s->v[i]->stream != stream)
		return NULL;
	while (s->v[i]->es && i + 1 < s->n && s->v[i + 1]->stream == stream &&
	       expandable_size(s->v[i + 1]) < expandable_size(s->v[i]))
		i++;
	b = s->v[i];
	/* an oversize block never serves a request below max_split_size */
	if (size < mss && b->size >= mss)
		return NULL;
	/* and serves an oversize request only within kLargeBuffer */
	if (size >= mss && b->size >= size + CM_LARGE_BUFFER)
		return NULL;
	bset_erase_at(s, i);
	return b;
}

/* alloc_block(): a new segment from cudaMalloc (or an expandable one). */
static struct cm_block *alloc_block(struct cmodel *m, struct cm_pool *pool,
				    uint64_t stream, uint64_t size,
				    uint64_t alloc_size, bool retry)
{
	struct cm_block *b;

	if (retry)
		m->st.retries++;
	if (expandable(m))
		return xs_try_allocate(m, stream, pool, size);
	if (m->st.reserved + alloc_size > m->cfg.capacity) {
		m->st.failed_calls++; /* cudaErrorMemoryAllocation */
		return NULL;
	}
	b = cm_new_block(m, cm_new_va(m, alloc_size, CM_SMALL_BUFFER),
			 alloc_size, stream, pool);
	m->st.cuda_malloc++;
	m->st.created_bytes += alloc_size;
	m->st.segments++;
	cm_reserve(m, alloc_size);
	return b;
}

/* release_block(): cudaFree of a whole cached segment. */
static void release_block(struct cmodel *m, struct cm_block *b)
{
	bset_erase(&b->pool->blocks, b);
	m->st.cuda_free++;
	m->st.segments--;
	cm_unreserve(m, b->size);
	cm_delete_block(m, b);
}

/*
 * release_available_cached_blocks(): with a max_split_size, free the
 * smallest oversize cached block that covers the request, or else the
 * largest ones until their total does.
 */
static bool release_available(struct cmodel *m, struct cm_pool *pool,
			      uint64_t stream, uint64_t size)
{
	uint64_t mss = m->cfg.max_split_size, released = 0;
	struct bset *s = &pool->blocks;
	struct cm_block key = { .stream = stream };
	size_t i;

	if (mss == CM_UNLIMITED || expandable(m))
		return false;
	key.size = size < mss ? mss : size;
	i = bset_lower_bound(s, &key);
	if (i < s->n && s->v[i]->stream == stream) {
		release_block(m, s->v[i]);
		return true;
	}
	if (i == 0)
		return false;
	i--;
	while (released < key.size && s->v[i]->size >= mss &&
	       s->v[i]->stream == stream) {
		struct cm_block *cur = s->v[i];

		released += cur->size;
		release_block(m, cur); /* erases index i; i - 1 stays */
		if (i == 0)
			break;
		i--;
	}
	return released >= key.size;
}

/* release_blocks() of one pool: every unsplit cached segment goes. */
static void release_pool(struct cmodel *m, struct cm_pool *pool)
{
	struct bset *s = &pool->blocks;
	struct cm_block **list;
	size_t i, n = 0, nx = 0;

	if (!s->n)
		return;
	list = cm_alloc_or_die(s->n * sizeof(*list));
	/* expandable blocks go first in @list, whole segments after */
	for (i = 0; i < s->n; i++)
		if (s->v[i]->es)
			list[nx++] = s->v[i];
	n = nx;
	for (i = 0; i < s->n; i++)
		if (!s->v[i]->es && !s->v[i]->prev && !s->v[i]->next)
			list[n++] = s->v[i];
	for (i = nx; i < n; i++)
		release_block(m, list[i]);
	xs_release_pool(m, pool, list, nx);
	free(list);
}

/* release_cached_blocks(): large pool, then small. */
static void release_cached(struct cmodel *m)
{
	release_pool(m, &m->large);
	release_pool(m, &m->small);
}

/* alloc_found_block(): split off the rest when asked, hand out. */
static struct cm_block *alloc_found(struct cmodel *m, struct cm_block *b,
				    uint64_t size, uint64_t stream, bool split)
{
	if (split) {
		struct cm_block *rest = b;

		b = cm_new_block(m, rest->ptr, size, stream, rest->pool);
		b->es = rest->es;
		b->prev = rest->prev;
		if (b->prev)
			b->prev->next = b;
		b->next = rest;
		rest->prev = b;
		rest->ptr += size;
		rest->size -= size;
		bset_insert(&rest->pool->blocks, rest);
	}
	b->allocated = true;
	m->st.allocated += b->size;
	if (m->st.allocated > m->st.allocated_peak)
		m->st.allocated_peak = m->st.allocated;
	return b;
}

int cm_malloc(struct cmodel *m, uint64_t size, uint64_t stream,
	      struct cm_block **out, uint64_t *addr)
{
	struct cm_pool *pool;
	struct cm_block *b;
	uint64_t asize;

	if (!size)
		return -EINVAL;
	size = round_size(size);
	pool = size <= CM_SMALL_SIZE ? &m->small : &m->large;
	asize = allocation_size(size);
	b = get_free_block(m, pool, stream, size);
	if (!b)
		b = alloc_block(m, pool, stream, size, asize, false);
	if (!b && release_available(m, pool, stream, size))
		b = alloc_block(m, pool, stream, size, asize, false);
	if (!b) {
		release_cached(m);
		b = alloc_block(m, pool, stream, size, asize, true);
	}
	if (!b) {
		m->st.ooms++;
		return -ENOSPC;
	}
	b = alloc_found(m, b, size, stream, should_split(m, b, size));
	*out = b;
	*addr = b->ptr;
	return 0;
}

/* free() and free_block(): merge with free neighbours, cache. */
void cm_free(struct cmodel *m, struct cm_block *b)
{
	b->allocated = false;
	m->st.allocated -= b->size;
	cm_merge(m, b, b->prev);
	cm_merge(m, b, b->next);
	bset_insert(&b->pool->blocks, b);
}

void cm_empty_cache(struct cmodel *m)
{
	release_cached(m);
}

struct cmodel *cm_create(const struct cm_config *cfg)
{
	struct cmodel *m = calloc(1, sizeof(*m));

	if (!m)
		return NULL;
	m->cfg = *cfg;
	if (!m->cfg.max_split_size)
		m->cfg.max_split_size = CM_UNLIMITED;
	m->small.small = true;
	m->small.blocks.cmp = cmp_size;
	m->small.unmapped.cmp = cmp_addr;
	m->large.blocks.cmp = cmp_size;
	m->large.unmapped.cmp = cmp_addr;
	m->next_va = 1ULL << 40;
	return m;
}

void cm_destroy(struct cmodel *m)
{
	struct cm_block *b, *next;

	if (!m)
		return;
	for (b = m->all; b; b = next) {
		next = b->all_next;
		free(b);
	}
	xs_destroy_all(m);
	free(m->small.blocks.v);
	free(m->small.unmapped.v);
	free(m->large.blocks.v);
	free(m->large.unmapped.v);
	free(m);
}

void cm_get_stats(const struct cmodel *m, struct cm_stats *st)
{
	*st = m->st;
}

void cm_segments(const struct cmodel *m,
		 void (*fn)(void *arg, uint64_t base, uint64_t size), void *arg)
{
	const struct cm_block *b, *c;
	size_t i, p, q;

	for (b = m->all; b; b = b->all_next) {
		uint64_t size = 0;

		if (b->es || b->prev)
			continue; /* not the first block of a cudaMalloc */
		for (c = b; c; c = c->next)
			size += c->size;
		fn(arg, b->ptr, size);
	}
	for (i = 0; i < m->nr_xs; i++) {
		const struct xseg *es = m->xs[i];

		for (p = 0; p < es->nr_pages; p = q) {
			for (q = p; q < es->nr_pages && es->mapped[q]; q++)
				;
			if (q > p)
				fn(arg, es->base + p * es->page,
				   (q - p) * es->page);
			else
				q++;
		}
	}
}

uint64_t cm_driver_calls(const struct cm_stats *st)
{
	return st->cuda_malloc + st->cuda_free + st->mem_create + st->mem_map +
	       st->mem_set_access + st->mem_unmap + st->mem_release +
	       st->va_reserve + st->va_free + st->failed_calls;
}
