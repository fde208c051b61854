/* SPDX-License-Identifier: MIT */
/*
 * tools/cli/replay/replay.h - models of PyTorch's CUDA caching allocator
 *
 * The replay tool compares stalloc with what PyTorch would have done on the
 * same requests.  These models follow c10/cuda/CUDACachingAllocator.cpp
 * (DeviceCachingAllocator): the classic allocator (segments from
 * cudaMalloc) and expandable segments (one growing virtual segment per
 * stream and pool, mapped page by page).  Nothing here touches a device:
 * addresses are numbers, and "driver calls" are counted, not made.
 * Documentation/replay.rst lists every rule modelled and where it comes
 * from.  Only public stalloc headers are used (none needed, in fact).
 */
#ifndef STALLOC_TOOLS_REPLAY_H
#define STALLOC_TOOLS_REPLAY_H

#include <stdbool.h>
#include <stdint.h>

/* PyTorch's constants (CUDACachingAllocator.cpp). */
#define CM_MIN_BLOCK (512ULL) /* kMinBlockSize */
#define CM_SMALL_SIZE (1ULL << 20) /* kSmallSize */
#define CM_SMALL_BUFFER (2ULL << 20) /* kSmallBuffer */
#define CM_LARGE_BUFFER (20ULL << 20) /* kLargeBuffer */
#define CM_MIN_LARGE_ALLOC (10ULL << 20) /* kMinLargeAlloc */
#define CM_ROUND_LARGE (2ULL << 20) /* kRoundLarge */

/* No max_split_size: PyTorch's default (SIZE_MAX). */
#define CM_UNLIMITED UINT64_MAX

enum cm_kind {
	CM_CACHING, /* expandable_segments:False (the default) */
	CM_EXPANDABLE, /* expandable_segments:True */
};

/**
 * struct cm_config - what is modelled
 * @kind: enum cm_kind
 * @capacity: device memory in bytes; a cudaMalloc or cuMemCreate that
 *	would take the bytes held past it fails (out of memory)
 * @max_split_size: PYTORCH_CUDA_ALLOC_CONF max_split_size_mb, in bytes;
 *	CM_UNLIMITED (or 0) for none
 */
struct cm_config {
	int kind;
	uint64_t capacity;
	uint64_t max_split_size;
};

/**
 * struct cm_stats - what the model holds and did
 * @allocated: bytes of blocks handed out (rounded sizes)
 * @allocated_peak: most of them at once
 * @reserved: bytes held from the device (cudaMalloc'd segments, or pages
 *	mapped in expandable segments); PyTorch's reserved_bytes
 * @reserved_peak: most of them at once
 * @segments: segments now (cudaMalloc'd, or expandable segments reserved)
 * @cuda_malloc: cudaMalloc calls that succeeded
 * @cuda_free: cudaFree calls
 * @mem_create: cuMemCreate calls that succeeded (one per page)
 * @mem_map: cuMemMap calls
 * @mem_set_access: cuMemSetAccess calls (one per range mapped)
 * @mem_unmap: cuMemUnmap calls
 * @mem_release: cuMemRelease calls
 * @va_reserve: cuMemAddressReserve calls
 * @va_free: cuMemAddressFree calls
 * @failed_calls: cudaMalloc or cuMemCreate calls refused for capacity
 * @created_bytes: bytes the cudaMalloc and cuMemCreate calls that
 *	succeeded allocated, in all
 * @retries: allocations that went through release_cached_blocks()
 * @ooms: allocations that failed (PyTorch raises OutOfMemoryError)
 */
struct cm_stats {
	uint64_t allocated, allocated_peak;
	uint64_t reserved, reserved_peak;
	uint64_t segments;
	uint64_t cuda_malloc, cuda_free;
	uint64_t mem_create, mem_map, mem_set_access, mem_unmap, mem_release;
	uint64_t va_reserve, va_free;
	uint64_t failed_calls;
	uint64_t created_bytes;
	uint64_t retries, ooms;
};

struct cmodel;
struct cm_block;

/**
 * cm_create() - a model of one device's allocator
 * @cfg: what to model (copied)
 *
 * Return: the model, or NULL when out of host memory.
 */
struct cmodel *cm_create(const struct cm_config *cfg);

/* Everything goes, allocated or not. */
void cm_destroy(struct cmodel *m);

/**
 * cm_malloc() - DeviceCachingAllocator::malloc()
 * @m: the model
 * @size: bytes requested (> 0)
 * @stream: the stream key
 * @out: the block, to be given to cm_free()
 * @addr: its address
 *
 * Return: 0; -ENOSPC when the device is out of memory even after freeing
 * the cache (PyTorch's OutOfMemoryError; nothing is changed but the cache
 * released and the counters); -EINVAL for a zero size.
 */
int cm_malloc(struct cmodel *m, uint64_t size, uint64_t stream,
	      struct cm_block **out, uint64_t *addr);

/* DeviceCachingAllocator::free() of a block cm_malloc() returned. */
void cm_free(struct cmodel *m, struct cm_block *b);

/* emptyCache(): release_cached_blocks(). */
void cm_empty_cache(struct cmodel *m);

void cm_get_stats(const struct cmodel *m, struct cm_stats *st);

/**
 * cm_segments() - the address ranges the model holds from the device now
 * @m: the model
 * @fn: called once per range: a cudaMalloc'd segment, or a run of mapped
 *	pages of an expandable segment (in no particular order)
 * @arg: passed to @fn
 */
void cm_segments(const struct cmodel *m,
		 void (*fn)(void *arg, uint64_t base, uint64_t size),
		 void *arg);

/* Driver calls the model counted, of every kind. */
uint64_t cm_driver_calls(const struct cm_stats *st);

#endif /* STALLOC_TOOLS_REPLAY_H */
