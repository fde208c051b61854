// SPDX-License-Identifier: MIT
/*
 * fakecuda-mem.c - virtual memory management of the fake driver
 *
 * A physical handle is an extent (offset, size) of its device's pool, a
 * sparse memfd (fakecuda-pool.c), so one handle can be mapped at several
 * addresses and remapped without copying; only the sum of live handles is
 * limited, to fc_cfg.mem.
 *
 * Device memory is not host memory: reservations are PROT_NONE anonymous
 * mappings aligned as asked, and stay PROT_NONE whatever is mapped in them,
 * so a host load or store at a device address faults as it would on a real
 * GPU.  Each handle has a private alias, a MAP_SHARED view of its extent
 * that only the fake touches; cuMemMap and cuMemSetAccess only record the
 * mapping and its rights, and the copy and set calls (fakecuda-copy.c)
 * reach the bytes through the alias of the handle mapped at each address
 * (fc_dev_alias()).
 *
 * Invariants: every mapping lies inside one reservation and overlaps no
 * other mapping; a handle lives (in fc_handles, its bytes counted in its
 * pool's used) until it is released by the caller and no longer mapped;
 * pool->used is at most fc_cfg.mem.
 *
 * Locking: all of it runs under fc_mutex (see fakecuda-internal.h).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdlib.h>
#include <sys/mman.h>

#include "fakecuda-internal.h"
#include "fakecuda.h"

#define FC_HANDLE_TAG 0xfcda000000000000ULL
#define FC_RW CU_MEM_ACCESS_FLAGS_PROT_READWRITE
#define FC_RO CU_MEM_ACCESS_FLAGS_PROT_READ

struct fc_handle {
	struct fc_obj o; /* key: the handle value */
	int dev;
	off_t off;
	size_t size;
	unsigned char *alias; /* the fake's own view of the extent */
	unsigned long nmaps;
	bool released; /* by the caller; freed at nmaps 0 */
	bool rdma; /* prop->allocFlags.gpuDirectRDMACapable */
	unsigned int handle_types; /* prop->requestedHandleTypes */
	int ctx_dev; /* device of the context current at create, or -1 */
};

struct fc_res {
	struct fc_obj o; /* key: base address */
	size_t size;
};

struct fc_map {
	struct fc_obj o; /* key: address */
	size_t size;
	struct fc_handle *h;
	unsigned char access[FC_MAX_DEV]; /* CUmemAccess_flags */
};

static struct fc_vec fc_handles;
static struct fc_vec fc_resv;
static struct fc_vec fc_maps;
static uint64_t fc_handle_seq;
static unsigned long fc_nlive_handles;

static struct fc_handle *handle_of(struct fc_obj *o)
{
	return o ? fc_container_of(o, struct fc_handle, o) : NULL;
}

static struct fc_res *res_of(struct fc_obj *o)
{
	return o ? fc_container_of(o, struct fc_res, o) : NULL;
}

static struct fc_map *map_of(struct fc_obj *o)
{
	return o ? fc_container_of(o, struct fc_map, o) : NULL;
}

static bool gran_aligned(uint64_t v)
{
	return !(v & (fc_cfg.gran - 1));
}

static CUresult size_violation(size_t size)
{
	return fc_viol(CUDA_ERROR_INVALID_VALUE,
		       "size %zu is not a nonzero multiple of the granularity "
		       "%zu",
		       size, fc_cfg.gran);
}

/* ------------------------------------------------------------------ */
/* Lookups and checks                                                  */
/* ------------------------------------------------------------------ */

static CUresult vmm_check(void)
{
	if (fc_cfg.no_vmm)
		return fc_viol(CUDA_ERROR_NOT_SUPPORTED,
			       "devices have no VMM support (FAKECUDA_NO_VMM)");
	return CUDA_SUCCESS;
}

static CUresult range_check(uint64_t va, size_t size)
{
	if (!size)
		return fc_viol(CUDA_ERROR_INVALID_VALUE, "size is 0");
	if (size > UINT64_MAX - va)
		return fc_viol(CUDA_ERROR_INVALID_VALUE,
			       "range 0x%llx + %zu wraps around",
			       (unsigned long long)va, size);
	return CUDA_SUCCESS;
}

/* The reservation holding all of [va, va+size), or NULL. */
static struct fc_res *res_holding(uint64_t va, size_t size)
{
	size_t i = fc_vec_upper(&fc_resv, va);
	struct fc_res *r;

	if (!i)
		return NULL;
	r = res_of(fc_resv.v[i - 1]);
	if (va - r->o.key >= r->size || size > r->size - (va - r->o.key))
		return NULL;
	return r;
}

static CUresult res_check(uint64_t va, size_t size)
{
	if (!res_holding(va, size))
		return fc_viol(CUDA_ERROR_INVALID_VALUE,
			       "[0x%llx, +%zu) is not inside one reservation",
			       (unsigned long long)va, size);
	return CUDA_SUCCESS;
}

/* Index of the mapping containing @va. */
static bool map_index(uint64_t va, size_t *idx)
{
	size_t i = fc_vec_upper(&fc_maps, va);
	struct fc_map *m;

	if (!i)
		return false;
	m = map_of(fc_maps.v[i - 1]);
	if (va - m->o.key >= m->size)
		return false;
	*idx = i - 1;
	return true;
}

static bool map_overlaps(uint64_t va, size_t size)
{
	size_t i = fc_vec_upper(&fc_maps, va);

	if (i && va - fc_maps.v[i - 1]->key < map_of(fc_maps.v[i - 1])->size)
		return true;
	return i < fc_maps.n && fc_maps.v[i]->key - va < size;
}

/*
 * The mappings [*first, *first + *count) cover [va, va+size) without a
 * hole.  With @whole, the range must also start and end on mapping bounds.
 */
static CUresult map_span(uint64_t va, size_t size, bool whole, size_t *first,
			 size_t *count)
{
	uint64_t at, end = va + size;
	size_t i;

	if (!map_index(va, &i))
		return fc_viol(CUDA_ERROR_INVALID_VALUE, "0x%llx is not mapped",
			       (unsigned long long)va);
	at = fc_maps.v[i]->key;
	if (whole && at != va)
		return fc_viol(CUDA_ERROR_INVALID_VALUE,
			       "0x%llx is inside the mapping at 0x%llx "
			       "(sub-range)",
			       (unsigned long long)va, (unsigned long long)at);
	*first = i;
	for (; at < end; i++) {
		if (i == fc_maps.n || fc_maps.v[i]->key != at)
			return fc_viol(CUDA_ERROR_INVALID_VALUE,
				       "[0x%llx, +%zu) has a hole at 0x%llx",
				       (unsigned long long)va, size,
				       (unsigned long long)at);
		at += map_of(fc_maps.v[i])->size;
	}
	if (whole && at != end)
		return fc_viol(CUDA_ERROR_INVALID_VALUE,
			       "[0x%llx, +%zu) ends inside the mapping ending "
			       "at 0x%llx (sub-range)",
			       (unsigned long long)va, size,
			       (unsigned long long)at);
	*count = i - *first;
	return CUDA_SUCCESS;
}

static CUresult handle_get(uint64_t id, struct fc_handle **out)
{
	struct fc_handle *h = handle_of(fc_vec_find(&fc_handles, id));

	if (!h)
		return fc_viol(CUDA_ERROR_INVALID_VALUE, "handle %#llx unknown",
			       (unsigned long long)id);
	if (h->released)
		return fc_viol(CUDA_ERROR_INVALID_VALUE,
			       "handle %#llx already released",
			       (unsigned long long)id);
	*out = h;
	return CUDA_SUCCESS;
}

static CUresult prop_check(const CUmemAllocationProp *prop)
{
	if (!prop)
		return fc_viol(CUDA_ERROR_INVALID_VALUE, "prop is NULL");
	if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED)
		return fc_viol(CUDA_ERROR_INVALID_VALUE,
			       "prop->type %d is not PINNED", (int)prop->type);
	if (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
		return fc_viol(CUDA_ERROR_INVALID_VALUE,
			       "prop->location.type %d is not DEVICE",
			       (int)prop->location.type);
	if (!fc_dev_valid(prop->location.id))
		return fc_viol(CUDA_ERROR_INVALID_DEVICE,
			       "prop->location.id %d is no device",
			       prop->location.id);
	if (prop->requestedHandleTypes &
	    ~(unsigned int)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return fc_viol(CUDA_ERROR_NOT_SUPPORTED,
			       "requestedHandleTypes %#x not supported",
			       (unsigned int)prop->requestedHandleTypes);
	if (prop->win32HandleMetaData)
		return fc_viol(CUDA_ERROR_INVALID_VALUE,
			       "win32HandleMetaData is not NULL");
	return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* Reservations                                                        */
/* ------------------------------------------------------------------ */

static CUresult reserve_check(CUdeviceptr *ptr, size_t size, size_t *align,
			      unsigned long long flags)
{
	if (!ptr)
		return fc_viol(CUDA_ERROR_INVALID_VALUE, "ptr is NULL");
	if (flags)
		return fc_viol(CUDA_ERROR_INVALID_VALUE, "flags %#llx not 0",
			       flags);
	if (!size || !gran_aligned(size))
		return size_violation(size);
	if (!*align)
		*align = fc_cfg.gran;
	if ((*align & (*align - 1)) || !gran_aligned(*align))
		return fc_viol(CUDA_ERROR_INVALID_VALUE,
			       "alignment %zu is not a power of two multiple "
			       "of the granularity %zu",
			       *align, fc_cfg.gran);
	return CUDA_SUCCESS;
}

/* mmap @size bytes of PROT_NONE aligned to @align; 0 on failure. */
static uint64_t reserve_aligned(size_t size, size_t align)
{
	const int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
	uint64_t base, start, end;
	void *p;

	if (size > SIZE_MAX - align)
		return 0;
	p = mmap(NULL, size + align, PROT_NONE, flags, -1, 0);
	if (p == MAP_FAILED)
		return 0;
	base = (uintptr_t)p;
	start = (base + align - 1) & ~(uint64_t)(align - 1);
	end = base + size + align;
	if (start > base)
		munmap(p, start - base);
	if (end > start + size)
		munmap(fc_va_ptr(start + size), end - (start + size));
	return start;
}

static CUresult mem_reserve(CUdeviceptr *ptr, size_t size, size_t align,
			    unsigned long long flags)
{
	struct fc_res *r;
	CUresult err;

	err = reserve_check(ptr, size, &align, flags);
	if (err != CUDA_SUCCESS)
		return err;
	r = calloc(1, sizeof(*r));
	if (!r)
		return CUDA_ERROR_OUT_OF_MEMORY;
	r->o.key = reserve_aligned(size, align);
	if (!r->o.key)
		goto err_free;
	r->size = size;
	if (fc_vec_insert(&fc_resv, &r->o))
		goto err_unmap;
	*ptr = r->o.key;
	return CUDA_SUCCESS;

err_unmap:
	munmap(fc_va_ptr(r->o.key), size);
err_free:
	free(r);
	return CUDA_ERROR_OUT_OF_MEMORY;
}

FC_API CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size,
				    size_t alignment, CUdeviceptr addr,
				    unsigned long long flags)
{
	CUresult err = fc_enter(FC_cuMemAddressReserve);

	if (err == CUDA_SUCCESS)
		err = vmm_check();
	if (err == CUDA_SUCCESS)
		err = mem_reserve(ptr, size, alignment, flags);
	return fc_leave(err);
}

static CUresult mem_address_free(CUdeviceptr ptr, size_t size)
{
	struct fc_res *r = res_of(fc_vec_find(&fc_resv, ptr));

	if (!r || r->size != size)
		return fc_viol(CUDA_ERROR_INVALID_VALUE,
			       "[0x%llx, +%zu) is not a reservation%s",
			       (unsigned long long)ptr, size,
			       r ? " (size differs)" : "");
	if (map_overlaps(ptr, size))
		return fc_viol(CUDA_ERROR_INVALID_VALUE,
			       "reservation 0x%llx still has mappings",
			       (unsigned long long)ptr);
	munmap(fc_va_ptr(ptr), size);
	fc_vec_remove_key(&fc_resv, ptr);
	free(r);
	return CUDA_SUCCESS;
}

FC_API CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
	CUresult err = fc_enter(FC_cuMemAddressFree);

	if (err == CUDA_SUCCESS)
		err = vmm_check();
	if (err == CUDA_SUCCESS)
		err = mem_address_free(ptr, size);
	return fc_leave(err);
}

/* ------------------------------------------------------------------ */
/* Physical handles                                                    */
/* ------------------------------------------------------------------ */

static CUresult create_check(CUmemGenericAllocationHandle *out, size_t size,
			     const CUmemAllocationProp *prop,
			     unsigned long long flags)
{
	if (!out)
		return fc_viol(CUDA_ERROR_INVALID_VALUE, "handle is NULL");
	if (flags)
		return fc_viol(CUDA_ERROR_INVALID_VALUE, "flags %#llx not 0",
			       flags);
	if (!size || !gran_aligned(size))
		return size_violation(size);
	return prop_check(prop);
}

static CUresult mem_create(CUmemGenericAllocationHandle *out, size_t size,
			   const CUmemAllocationProp *prop,
			   unsigned long long flags)
{
	struct fc_handle *h = NULL;
	struct fc_pool *pool;
	CUresult err;

	err = create_check(out, size, prop, flags);
	if (err != CUDA_SUCCESS)
		return err;
	pool = &fc_pools[prop->location.id];
	if (size > fc_cfg.mem - pool->used)
		return CUDA_ERROR_OUT_OF_MEMORY;
	h = calloc(1, sizeof(*h));
	if (!h)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (fc_pool_alloc(pool, size, &h->off))
		goto err_free;
	h->alias = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED,
			pool->fd, h->off);
	if (h->alias == MAP_FAILED)
		goto err_extent;
	h->o.key = FC_HANDLE_TAG | ++fc_handle_seq;
	h->dev = prop->location.id;
	h->size = size;
	h->rdma = prop->allocFlags.gpuDirectRDMACapable;
	h->handle_types = (unsigned int)prop->requestedHandleTypes;
	if (fc_ctx_current_dev(&h->ctx_dev) != CUDA_SUCCESS)
		h->ctx_dev = -1;
	if (fc_vec_insert(&fc_handles, &h->o))
		goto err_unmap;
	pool->used += size;
	fc_nlive_handles++;
	*out = h->o.key;
	return CUDA_SUCCESS;

err_unmap:
	munmap(h->alias, size);
err_extent:
	fc_pool_free(pool, h->off, size);
err_free:
	free(h);
	return CUDA_ERROR_OUT_OF_MEMORY;
}

FC_API CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
			    const CUmemAllocationProp *prop,
			    unsigned long long flags)
{
	CUresult err = fc_enter(FC_cuMemCreate);

	if (err == CUDA_SUCCESS)
		err = vmm_check();
	if (err == CUDA_SUCCESS)
		err = mem_create(handle, size, prop, flags);
	return fc_leave(err);
}

/* Give a released, unmapped handle's memory back. */
static void handle_free(struct fc_handle *h)
{
	struct fc_pool *pool = &fc_pools[h->dev];

	munmap(h->alias, h->size);
	fc_pool_free(pool, h->off, h->size);
	pool->used -= h->size;
	fc_vec_remove_key(&fc_handles, h->o.key);
	free(h);
}

static CUresult mem_release(CUmemGenericAllocationHandle id)
{
	struct fc_handle *h = NULL;
	CUresult err;

	err = handle_get(id, &h);
	if (err == CUDA_SUCCESS)
		err = fc_capture_check(NULL, NULL);
	if (err != CUDA_SUCCESS)
		return err;
	h->released = true;
	fc_nlive_handles--;
	if (!h->nmaps)
		handle_free(h);
	return CUDA_SUCCESS;
}

FC_API CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
	CUresult err = fc_enter(FC_cuMemRelease);

	if (err == CUDA_SUCCESS)
		err = vmm_check();
	if (err == CUDA_SUCCESS)
		err = mem_release(handle);
	return fc_leave(err);
}

/* ------------------------------------------------------------------ */
/* Mappings and access                                                 */
/* ------------------------------------------------------------------ */

static CUresult map_check(CUdeviceptr va, size_t size, size_t offset,
			  const struct fc_handle *h, unsigned long long flags)
{
	if (offset)
		return fc_viol(CUDA_ERROR_INVALID_VALUE, "offset %zu is not 0",
			       offset);
	if (flags)
		return fc_viol(CUDA_ERROR_INVALID_VALUE, "flags %#llx not 0",
			       flags);
	if (size != h->size)
		return fc_viol(CUDA_ERROR_INVALID_VALUE,
			       "size %zu differs from the handle's %zu", size,
			       h->size);
	if (!va || !gran_aligned(va))
		return fc_viol(CUDA_ERROR_INVALID_VALUE,
			       "address 0x%llx is not granularity aligned",
			       (unsigned long long)va);
	if (range_check(va, size) != CUDA_SUCCESS ||
	    res_check(va, size) != CUDA_SUCCESS)
		return CUDA_ERROR_INVALID_VALUE; /* reported */
	if (map_overlaps(va, size))
		return fc_viol(CUDA_ERROR_INVALID_VALUE,
			       "[0x%llx, +%zu) overlaps a mapping",
			       (unsigned long long)va, size);
	return CUDA_SUCCESS;
}

static CUresult mem_map(CUdeviceptr va, size_t size, size_t offset,
			CUmemGenericAllocationHandle id,
			unsigned long long flags)
{
	struct fc_handle *h = NULL;
	struct fc_map *m;
	CUresult err;

	err = handle_get(id, &h);
	if (err == CUDA_SUCCESS)
		err = map_check(va, size, offset, h, flags);
	if (err != CUDA_SUCCESS)
		return err;
	m = calloc(1, sizeof(*m));
	if (!m)
		return CUDA_ERROR_OUT_OF_MEMORY;
	m->o.key = va;
	m->size = size;
	m->h = h;
	if (fc_vec_insert(&fc_maps, &m->o)) {
		free(m);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	h->nmaps++;
	return CUDA_SUCCESS;
}

FC_API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
			 CUmemGenericAllocationHandle handle,
			 unsigned long long flags)
{
	CUresult err = fc_enter(FC_cuMemMap);

	if (err == CUDA_SUCCESS)
		err = vmm_check();
	if (err == CUDA_SUCCESS)
		err = mem_map(ptr, size, offset, handle, flags);
	return fc_leave(err);
}

/* Whole mappings exactly covering [va, va+size) in one reservation. */
static CUresult whole_span(uint64_t va, size_t size, size_t *first,
			   size_t *count)
{
	CUresult err = range_check(va, size);

	if (err == CUDA_SUCCESS)
		err = res_check(va, size);
	if (err == CUDA_SUCCESS)
		err = map_span(va, size, true, first, count);
	return err;
}

static void map_drop(struct fc_map *m)
{
	struct fc_handle *h = m->h;

	if (--h->nmaps == 0 && h->released)
		handle_free(h);
	free(m);
}

static CUresult mem_unmap(CUdeviceptr va, size_t size)
{
	size_t first = 0, count = 0, i;
	CUresult err;

	err = whole_span(va, size, &first, &count);
	if (err == CUDA_SUCCESS)
		err = fc_capture_check(NULL, NULL);
	if (err != CUDA_SUCCESS)
		return err;
	fc_work_unmap(va, size);
	for (i = first; i < first + count; i++)
		map_drop(map_of(fc_maps.v[i]));
	fc_vec_remove(&fc_maps, first, count);
	return CUDA_SUCCESS;
}

FC_API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
	CUresult err = fc_enter(FC_cuMemUnmap);

	if (err == CUDA_SUCCESS)
		err = vmm_check();
	if (err == CUDA_SUCCESS)
		err = mem_unmap(ptr, size);
	return fc_leave(err);
}

static CUresult location_check(const CUmemLocation *loc)
{
	if (loc->type != CU_MEM_LOCATION_TYPE_DEVICE)
		return fc_viol(CUDA_ERROR_INVALID_VALUE,
			       "location type %d is not DEVICE",
			       (int)loc->type);
	if (!fc_dev_valid(loc->id))
		return fc_viol(CUDA_ERROR_INVALID_DEVICE,
			       "location id %d is no device", loc->id);
	return CUDA_SUCCESS;
}

static CUresult desc_check(const CUmemAccessDesc *desc, size_t count)
{
	CUresult err;
	size_t i;

	if (!desc || !count)
		return fc_viol(CUDA_ERROR_INVALID_VALUE,
			       "no access descriptors");
	for (i = 0; i < count; i++) {
		err = location_check(&desc[i].location);
		if (err != CUDA_SUCCESS)
			return err;
		if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE &&
		    desc[i].flags != FC_RO && desc[i].flags != FC_RW)
			return fc_viol(CUDA_ERROR_INVALID_VALUE,
				       "access flags %#x unknown",
				       (unsigned int)desc[i].flags);
	}
	return CUDA_SUCCESS;
}

static CUresult mem_set_access(CUdeviceptr va, size_t size,
			       const CUmemAccessDesc *desc, size_t count)
{
	size_t first = 0, n = 0, i, j;
	CUresult err;

	err = desc_check(desc, count);
	if (err == CUDA_SUCCESS)
		err = whole_span(va, size, &first, &n);
	if (err != CUDA_SUCCESS)
		return err;
	/* like the driver: a device that cannot reach the owner is refused */
	for (i = first; i < first + n; i++)
		for (j = 0; j < count; j++)
			if (!fc_peer_can(desc[j].location.id,
					 map_of(fc_maps.v[i])->h->dev))
				return CUDA_ERROR_INVALID_DEVICE;
	for (i = first; i < first + n; i++) {
		struct fc_map *m = map_of(fc_maps.v[i]);

		for (j = 0; j < count; j++)
			m->access[desc[j].location.id] =
				(unsigned char)desc[j].flags;
	}
	return CUDA_SUCCESS;
}

FC_API CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size,
			       const CUmemAccessDesc *desc, size_t count)
{
	CUresult err = fc_enter(FC_cuMemSetAccess);

	if (err == CUDA_SUCCESS)
		err = vmm_check();
	if (err == CUDA_SUCCESS)
		err = mem_set_access(ptr, size, desc, count);
	return fc_leave(err);
}

static CUresult mem_get_access(unsigned long long *flags,
			       const CUmemLocation *loc, CUdeviceptr va)
{
	CUresult err;
	size_t i;

	if (!flags || !loc)
		return fc_viol(CUDA_ERROR_INVALID_VALUE,
			       "flags or location is NULL");
	err = location_check(loc);
	if (err != CUDA_SUCCESS)
		return err;
	if (!map_index(va, &i))
		return fc_viol(CUDA_ERROR_INVALID_VALUE, "0x%llx is not mapped",
			       (unsigned long long)va);
	*flags = map_of(fc_maps.v[i])->access[loc->id];
	return CUDA_SUCCESS;
}

FC_API CUresult cuMemGetAccess(unsigned long long *flags,
			       const CUmemLocation *location, CUdeviceptr ptr)
{
	CUresult err = fc_enter(FC_cuMemGetAccess);

	if (err == CUDA_SUCCESS)
		err = vmm_check();
	if (err == CUDA_SUCCESS)
		err = mem_get_access(flags, location, ptr);
	return fc_leave(err);
}

static CUresult mem_granularity(size_t *gran, const CUmemAllocationProp *prop,
				CUmemAllocationGranularity_flags option)
{
	CUresult err;

	if (!gran)
		return fc_viol(CUDA_ERROR_INVALID_VALUE, "granularity is NULL");
	if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
	    option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
		return fc_viol(CUDA_ERROR_INVALID_VALUE, "option %d unknown",
			       (int)option);
	err = prop_check(prop);
	if (err == CUDA_SUCCESS)
		*gran = fc_cfg.gran;
	return err;
}

FC_API CUresult cuMemGetAllocationGranularity(
	size_t *granularity, const CUmemAllocationProp *prop,
	CUmemAllocationGranularity_flags option)
{
	CUresult err = fc_enter(FC_cuMemGetAllocationGranularity);

	if (err == CUDA_SUCCESS)
		err = vmm_check();
	if (err == CUDA_SUCCESS)
		err = mem_granularity(granularity, prop, option);
	return fc_leave(err);
}

/* ------------------------------------------------------------------ */
/* Device ranges, for copies and launches                              */
/* ------------------------------------------------------------------ */

/*
 * [va, va+n) is mapped without a hole and the current context's device
 * may read it (@write: and write it).  n is not 0.
 */
CUresult fc_dev_range_check(uint64_t va, size_t n, bool write, int dev)
{
	unsigned char need = write ? FC_RW : FC_RO;
	size_t first = 0, count = 0, i;
	CUresult err;

	err = range_check(va, n);
	if (err == CUDA_SUCCESS)
		err = map_span(va, n, false, &first, &count);
	if (err != CUDA_SUCCESS)
		return err;
	for (i = first; i < first + count; i++) {
		struct fc_map *m = map_of(fc_maps.v[i]);

		if ((m->access[dev] & need) != need)
			return fc_viol(CUDA_ERROR_INVALID_VALUE,
				       "mapping at 0x%llx is not %s for "
				       "device %d",
				       (unsigned long long)m->o.key,
				       write ? "writable" : "readable", dev);
	}
	return CUDA_SUCCESS;
}

/*
 * The fake's own view of the checked device address @va, through the alias
 * of the handle mapped there, and in *@len the bytes of that mapping from
 * @va on.
 */
unsigned char *fc_dev_alias(uint64_t va, size_t *len)
{
	size_t i = 0;
	struct fc_map *m;

	map_index(va, &i);
	m = map_of(fc_maps.v[i]);
	*len = m->o.key + m->size - va;
	return m->h->alias + (va - m->o.key);
}

/* Unified addressing: an address inside a reservation is the device's. */
bool fc_dev_addr(uint64_t va)
{
	return va && res_holding(va, 1);
}

/* ------------------------------------------------------------------ */
/* Control interface                                                   */
/* ------------------------------------------------------------------ */

FC_API unsigned long fakecuda_live_reservations(void)
{
	return fc_vec_count(&fc_resv);
}

FC_API unsigned long fakecuda_live_handles(void)
{
	return fc_read_locked(&fc_nlive_handles);
}

FC_API unsigned long fakecuda_live_mappings(void)
{
	return fc_vec_count(&fc_maps);
}

FC_API unsigned long long fakecuda_phys_bytes(int dev)
{
	unsigned long long n = 0;

	fc_lock();
	if (fc_inited && fc_dev_valid(dev))
		n = fc_pools[dev].used;
	fc_unlock();
	return n;
}

FC_API int fakecuda_access_flags(unsigned long long va, int dev)
{
	int flags = -1;
	size_t i;

	fc_lock();
	if (dev >= 0 && dev < FC_MAX_DEV && map_index(va, &i))
		flags = map_of(fc_maps.v[i])->access[dev];
	fc_unlock();
	return flags;
}

FC_API int fakecuda_handle_props(unsigned long long va, int *rdma,
				 unsigned int *handle_types, int *ctx_dev)
{
	struct fc_handle *h;
	size_t i;

	fc_lock();
	if (!map_index(va, &i)) {
		fc_unlock();
		return -1;
	}
	h = map_of(fc_maps.v[i])->h;
	*rdma = h->rdma;
	*handle_types = h->handle_types;
	*ctx_dev = h->ctx_dev;
	fc_unlock();
	return 0;
}
