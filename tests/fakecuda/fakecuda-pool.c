// SPDX-License-Identifier: MIT
/*
 * fakecuda-pool.c - the devices' physical memory: one file a device
 *
 * Physical memory of a device is one sparse memfd (its pool); a physical
 * handle (fakecuda-mem.c) is an extent (offset, size) of it.  Extents come
 * from a first-fit free list sorted by offset and kept coalesced; when
 * nothing fits the file grows, so fragmentation never causes a spurious
 * out of memory.  A freed extent's pages are punched out, so a new handle
 * always reads zeros; a free extent at the end of the file shrinks it.
 *
 * Invariants: the free list is sorted by offset, its extents neither touch
 * nor overlap, and none touches pool->end.  pool->used (kept by
 * fakecuda-mem.c) is at most fc_cfg.mem.
 *
 * Locking: all of it runs under fc_mutex (see fakecuda-internal.h).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fakecuda-internal.h"
#include "fakecuda.h"

struct fc_pool fc_pools[FC_MAX_DEV];

/* One pool a device, made at cuInit. */
CUresult fc_mem_init(void)
{
	char name[32];
	int dev = 0;

	for (dev = 0; dev < fc_cfg.ndev; dev++) {
		snprintf(name, sizeof(name), "fakecuda-dev%d", dev);
		fc_pools[dev].fd = memfd_create(name, MFD_CLOEXEC);
		if (fc_pools[dev].fd < 0)
			goto err_close;
	}
	return CUDA_SUCCESS;

err_close:
	perror("fakecuda: memfd_create");
	while (dev-- > 0)
		close(fc_pools[dev].fd);
	return CUDA_ERROR_OUT_OF_MEMORY;
}

/*
 * Take @size bytes of @pool's file, first fit, or grow the file; the
 * offset in *@off.  -1 if the file cannot grow.
 */
int fc_pool_alloc(struct fc_pool *pool, size_t size, off_t *off)
{
	struct fc_extent **pp, *x;

	for (pp = &pool->free; (x = *pp); pp = &x->next) {
		if (x->size < size)
			continue;
		*off = x->off;
		x->off += (off_t)size;
		x->size -= size;
		if (!x->size) {
			*pp = x->next;
			free(x);
		}
		return 0;
	}
	if (ftruncate(pool->fd, pool->end + (off_t)size))
		return -1;
	*off = pool->end;
	pool->end += (off_t)size;
	return 0;
}

static off_t extent_end(const struct fc_extent *x)
{
	return x->off + (off_t)x->size;
}

/* Punch [off, off+size) out and give it back to the free list. */
void fc_pool_free(struct fc_pool *pool, off_t off, size_t size)
{
	struct fc_extent **pp = &pool->free, *x, *next;

	fallocate(pool->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off,
		  (off_t)size);
	while (*pp && extent_end(*pp) < off)
		pp = &(*pp)->next;
	x = *pp;
	if (x && extent_end(x) == off) {
		x->size += size;
	} else {
		x = malloc(sizeof(*x));
		if (!x)
			return; /* lose the range; it is punched */
		x->off = off;
		x->size = size;
		x->next = *pp;
		*pp = x;
	}
	next = x->next;
	if (next && extent_end(x) == next->off) {
		x->size += next->size;
		x->next = next->next;
		free(next);
	}
	if (extent_end(x) == pool->end) {
		pool->end = x->off;
		*pp = x->next;
		free(x);
		if (ftruncate(pool->fd, pool->end))
			perror("fakecuda: ftruncate");
	}
}
