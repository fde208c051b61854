// SPDX-License-Identifier: MIT
/*
 * vmm/backend-cuda.c - the cuda backend: CUDA driver virtual memory management
 *
 * The driver is loaded with dlopen() at first use (STALLOC_LIBCUDA names
 * another library, e.g. the fake driver of the tests) and every entry point
 * is fetched with cuGetProcAddress_v2 asking for the ABI of CUDA 12.0, so
 * libstalloc has no link-time dependency on libcuda, loads on machines with
 * no driver, and works with drivers older than the headers.
 *
 * A device is usable if it reports CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_
 * MANAGEMENT_SUPPORTED.  The backend always works in the device's primary
 * context, which it retains at open and releases at close; it never adopts
 * whatever context happens to be current on the opening thread (a context
 * the application may destroy while we still hold memory in it).  Every
 * call runs in the primary context: unless it is current on the calling
 * thread already (the usual case under PyTorch, which works in the primary
 * context), it is pushed for the call and popped afterwards, so the
 * thread's context stack is left as found.
 *
 * Access: every mapping is made accessible, in one cuMemSetAccess with one
 * descriptor per device, to the owning device and to its peers: the devices
 * that can access it (cuDeviceCanAccessPeer), or those STALLOC_PEERS names.
 * cudaDeviceEnablePeerAccess does not reach VMM mappings, so without this
 * a peer GPU faults on our memory.
 *
 * Physical memory is created with gpuDirectRDMACapable when the device
 * reports CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, and
 * with the POSIX file descriptor handle type requested when it reports
 * CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED (for
 * NCCL and GPUDirect).  If cuMemCreate refuses them, it is retried once
 * without them, and they are not asked for again on that device.
 *
 * Every failing CUresult becomes a negative errno and a message naming the
 * call, its arguments, the device and the driver's error name and string.
 *
 * Locking: the driver table is written once under pthread_once and read
 * only afterwards.  Per-device calls are serialised by the vmm core.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>
#include <cudaTypedefs.h>

#include "../lib/options.h"
#include "../lib/util.h"
#include "backend.h"

#define CUDA_ABI_VERSION 12000

static struct cuda_driver {
	void *lib;
	int status; /* 0 or -ENODEV once loading was tried */
	char why[384]; /* why loading failed, repeated to each caller */
	PFN_cuInit_v2000 init;
	PFN_cuGetErrorName_v6000 error_name;
	PFN_cuGetErrorString_v6000 error_string;
	PFN_cuDeviceGetCount_v2000 device_count;
	PFN_cuDeviceGet_v2000 device_get;
	PFN_cuDeviceGetAttribute_v2000 device_attr;
	PFN_cuDeviceTotalMem_v3020 total_mem;
	PFN_cuDeviceCanAccessPeer_v4000 can_access_peer;
	PFN_cuDevicePrimaryCtxRetain_v7000 primary_retain;
	PFN_cuDevicePrimaryCtxRelease_v11000 primary_release;
	PFN_cuCtxGetCurrent_v4000 ctx_get_current;
	PFN_cuCtxPushCurrent_v4000 ctx_push;
	PFN_cuCtxPopCurrent_v4000 ctx_pop;
	PFN_cuCtxSynchronize_v2000 ctx_sync;
	PFN_cuStreamSynchronize_v2000 stream_sync;
	PFN_cuEventCreate_v2000 event_create;
	PFN_cuEventRecord_v2000 event_record;
	PFN_cuEventDestroy_v4000 event_destroy;
	PFN_cuStreamWaitEvent_v3020 stream_wait;
	PFN_cuEventSynchronize_v2000 event_sync;
	PFN_cuEventQuery_v2000 event_query;
	/* optional: NULL when the driver lacks them (nothing is captured) */
	PFN_cuStreamIsCapturing_v10000 stream_capturing;
	PFN_cuThreadExchangeStreamCaptureMode_v10010 capture_mode;
	PFN_cuMemAddressReserve_v10020 addr_reserve;
	PFN_cuMemAddressFree_v10020 addr_free;
	PFN_cuMemCreate_v10020 mem_create;
	PFN_cuMemRelease_v10020 mem_release;
	PFN_cuMemMap_v10020 mem_map;
	PFN_cuMemUnmap_v10020 mem_unmap;
	PFN_cuMemSetAccess_v10020 set_access;
	PFN_cuMemGetAllocationGranularity_v10020 granularity;
} drv;

static pthread_once_t drv_once = PTHREAD_ONCE_INIT;

#define CUDA_MAX_PEERS 64 /* bits of vmm_backend.peer_mask */

struct cuda_dev {
	CUdevice dev;
	CUcontext ctx; /* the device's primary context, retained */
	bool rdma; /* create with gpuDirectRDMACapable */
	unsigned int handle_types; /* requestedHandleTypes at create */
	int nr_access; /* descriptors in access[] */
	CUmemAccessDesc access[CUDA_MAX_PEERS]; /* owner first, then peers */
};

static const struct {
	const char *name;
	size_t offset;
} drv_syms[] = {
#define SYM(field, sym)                                  \
	{                                                \
		sym, offsetof(struct cuda_driver, field) \
	}
	SYM(init, "cuInit"),
	SYM(error_name, "cuGetErrorName"),
	SYM(error_string, "cuGetErrorString"),
	SYM(device_count, "cuDeviceGetCount"),
	SYM(device_get, "cuDeviceGet"),
	SYM(device_attr, "cuDeviceGetAttribute"),
	SYM(total_mem, "cuDeviceTotalMem"),
	SYM(can_access_peer, "cuDeviceCanAccessPeer"),
	SYM(primary_retain, "cuDevicePrimaryCtxRetain"),
	SYM(primary_release, "cuDevicePrimaryCtxRelease"),
	SYM(ctx_get_current, "cuCtxGetCurrent"),
	SYM(ctx_push, "cuCtxPushCurrent"),
	SYM(ctx_pop, "cuCtxPopCurrent"),
	SYM(ctx_sync, "cuCtxSynchronize"),
	SYM(stream_sync, "cuStreamSynchronize"),
	SYM(event_create, "cuEventCreate"),
	SYM(event_record, "cuEventRecord"),
	SYM(event_destroy, "cuEventDestroy"),
	SYM(stream_wait, "cuStreamWaitEvent"),
	SYM(event_sync, "cuEventSynchronize"),
	SYM(event_query, "cuEventQuery"),
	SYM(addr_reserve, "cuMemAddressReserve"),
	SYM(addr_free, "cuMemAddressFree"),
	SYM(mem_create, "cuMemCreate"),
	SYM(mem_release, "cuMemRelease"),
	SYM(mem_map, "cuMemMap"),
	SYM(mem_unmap, "cuMemUnmap"),
	SYM(set_access, "cuMemSetAccess"),
	SYM(granularity, "cuMemGetAllocationGranularity"),
};

/* Entry points used when the driver has them. */
static const struct {
	const char *name;
	size_t offset;
} drv_optional[] = {
	SYM(stream_capturing, "cuStreamIsCapturing"),
	SYM(capture_mode, "cuThreadExchangeStreamCaptureMode"),
#undef SYM
};

static void cuda_describe(CUresult rc, char *buf, size_t len)
{
	const char *name = NULL, *str = NULL;

	if (drv.error_name)
		drv.error_name(rc, &name);
	if (drv.error_string)
		drv.error_string(rc, &str);
	snprintf(buf, len, "%s (%s)", name ? name : "CUDA_ERROR_?",
		 str ? str : "no description");
}

static int cuda_errno(CUresult rc)
{
	switch (rc) {
	case CUDA_ERROR_OUT_OF_MEMORY:
		return -ENOMEM;
	case CUDA_ERROR_INVALID_VALUE:
		return -EINVAL;
	case CUDA_ERROR_NOT_SUPPORTED:
		return -ENOTSUP;
	case CUDA_ERROR_NOT_INITIALIZED:
	case CUDA_ERROR_DEINITIALIZED:
	case CUDA_ERROR_NO_DEVICE:
	case CUDA_ERROR_INVALID_DEVICE:
		return -ENODEV;
	default:
		return -EIO;
	}
}

/* Record a failed call @what (with its arguments) on @be; returns -errno. */
static int cuda_fail(struct vmm_backend *be, CUresult rc, const char *what)
{
	char desc[160];

	cuda_describe(rc, desc, sizeof(desc));
	if (be)
		be->last_driver_error = (int)rc;
	return sa_error(cuda_errno(rc), "cuda: %s on device %d: %s", what,
			be ? be->device : -1, desc);
}

typedef CUresult(CUDAAPI *getproc_fn)(const char *, void **, int, cuuint64_t,
				      CUdriverProcAddressQueryResult *);

static int drv_resolve(getproc_fn getproc)
{
	CUdriverProcAddressQueryResult st;
	size_t i;

	for (i = 0; i < ARRAY_SIZE(drv_syms); i++) {
		void *fn = NULL;
		CUresult rc = getproc(drv_syms[i].name, &fn, CUDA_ABI_VERSION,
				      CU_GET_PROC_ADDRESS_DEFAULT, &st);

		if (rc != CUDA_SUCCESS || !fn ||
		    st != CU_GET_PROC_ADDRESS_SUCCESS) {
			snprintf(drv.why, sizeof(drv.why),
				 "cuda: the driver has no %s for CUDA %d.%d "
				 "(cuGetProcAddress_v2 returned %d, status %d)",
				 drv_syms[i].name, CUDA_ABI_VERSION / 1000,
				 CUDA_ABI_VERSION % 1000 / 10, (int)rc,
				 (int)st);
			return -ENODEV;
		}
		memcpy((char *)&drv + drv_syms[i].offset, &fn, sizeof(fn));
	}
	for (i = 0; i < ARRAY_SIZE(drv_optional); i++) {
		void *fn = NULL;

		if (getproc(drv_optional[i].name, &fn, CUDA_ABI_VERSION,
			    CU_GET_PROC_ADDRESS_DEFAULT, &st) != CUDA_SUCCESS ||
		    st != CU_GET_PROC_ADDRESS_SUCCESS)
			fn = NULL;
		memcpy((char *)&drv + drv_optional[i].offset, &fn, sizeof(fn));
	}
	return 0;
}

static void drv_load(void)
{
	const char *path = sa_opt_str(SA_OPT_LIBCUDA);
	getproc_fn getproc;
	char desc[160];
	CUresult rc;

	drv.status = -ENODEV;
	if (!path || !*path)
		path = "libcuda.so.1";
	drv.lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!drv.lib) {
		snprintf(drv.why, sizeof(drv.why),
			 "cuda: cannot load the driver library %s: %s", path,
			 dlerror());
		return;
	}
	*(void **)&getproc = dlsym(drv.lib, "cuGetProcAddress_v2");
	if (!getproc) {
		snprintf(drv.why, sizeof(drv.why),
			 "cuda: %s has no cuGetProcAddress_v2 (driver older "
			 "than CUDA 12?)",
			 path);
		goto err_close;
	}
	if (drv_resolve(getproc))
		goto err_close;
	rc = drv.init(0);
	if (rc != CUDA_SUCCESS) {
		cuda_describe(rc, desc, sizeof(desc));
		snprintf(drv.why, sizeof(drv.why), "cuda: cuInit(0): %s", desc);
		goto err_close;
	}
	drv.status = 0;
	return;

err_close:
	/* The library stays loaded: dlclose of a driver is not safe. */
	memset((char *)&drv + offsetof(struct cuda_driver, init), 0,
	       sizeof(drv) - offsetof(struct cuda_driver, init));
}

static int drv_get(void)
{
	pthread_once(&drv_once, drv_load);
	if (drv.status)
		return sa_error(drv.status, "%s", drv.why);
	return 0;
}

bool vmm_cuda_available(void)
{
	int n = 0;

	pthread_once(&drv_once, drv_load);
	if (drv.status)
		return false;
	return drv.device_count(&n) == CUDA_SUCCESS && n > 0;
}

/*
 * Make the device's context current for one call: push it unless it is
 * current already; *@pushed says whether cuda_leave() must pop it.  We never
 * leave our context current on a thread: once the space is destroyed and
 * the primary context released, a thread would be left holding a dead one.
 */
static int cuda_enter(struct vmm_backend *be, bool *pushed)
{
	struct cuda_dev *d = be->priv;
	CUcontext cur = NULL;
	CUresult rc;

	*pushed = false;
	rc = drv.ctx_get_current(&cur);
	if (rc != CUDA_SUCCESS)
		return cuda_fail(be, rc, "cuCtxGetCurrent()");
	if (cur == d->ctx)
		return 0;
	rc = drv.ctx_push(d->ctx);
	if (rc != CUDA_SUCCESS)
		return cuda_fail(be, rc, "cuCtxPushCurrent()");
	*pushed = true;
	return 0;
}

static void cuda_leave(struct vmm_backend *be, bool pushed)
{
	CUcontext ctx;
	CUresult rc;

	if (!pushed)
		return;
	/* A context left pushed would outlive the space: try twice. */
	rc = drv.ctx_pop(&ctx);
	if (rc != CUDA_SUCCESS)
		rc = drv.ctx_pop(&ctx);
	if (rc != CUDA_SUCCESS)
		sa_log(STALLOC_LOG_ERROR,
		       "cuda: cuCtxPopCurrent() on device %d failed (%d): the "
		       "thread keeps our context pushed",
		       be->device, (int)rc);
}

static void cuda_prop(const struct vmm_backend *be, CUmemAllocationProp *p)
{
	memset(p, 0, sizeof(*p));
	p->type = CU_MEM_ALLOCATION_TYPE_PINNED;
	p->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	p->location.id = be->device;
}

/* An attribute that only enables extras: unknown or failing reads as 0. */
static int cuda_attr_or_0(struct cuda_dev *d, CUdevice_attribute attr)
{
	int v = 0;

	if (drv.device_attr(&v, attr, d->dev) != CUDA_SUCCESS)
		return 0;
	return v;
}

/* Can device @peer access memory on our device? */
static int cuda_peer_ok(struct vmm_backend *be, struct cuda_dev *d, int peer,
			bool *ok)
{
	CUdevice pdev;
	CUresult rc;
	int can = 0;

	rc = drv.device_get(&pdev, peer);
	if (rc == CUDA_SUCCESS)
		rc = drv.can_access_peer(&can, pdev, d->dev);
	if (rc != CUDA_SUCCESS)
		return cuda_fail(be, rc, "cuDeviceCanAccessPeer()");
	*ok = can != 0;
	return 0;
}

static void cuda_grant(struct vmm_backend *be, struct cuda_dev *d, int dev)
{
	CUmemAccessDesc *a = &d->access[d->nr_access++];

	memset(a, 0, sizeof(*a));
	a->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	a->location.id = dev;
	a->flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	if (dev != be->device)
		be->peer_mask |= 1ULL << dev;
}

/*
 * The access list: the device, then its peers per be->peers ("all" or
 * unset: every device that can access this one; "none"; or a comma list
 * of ordinals, each of which must be able to).
 */
static int cuda_peers(struct vmm_backend *be, struct cuda_dev *d, int nr_dev)
{
	const char *spec = be->peers;
	bool all = !spec || !*spec || !strcmp(spec, "all"), ok;
	int p, err;

	d->nr_access = 0;
	be->peer_mask = 0;
	cuda_grant(be, d, be->device);
	if (spec && !strcmp(spec, "none"))
		return 0;
	if (all) {
		for (p = 0; p < nr_dev && p < CUDA_MAX_PEERS; p++) {
			if (p == be->device)
				continue;
			err = cuda_peer_ok(be, d, p, &ok);
			if (err)
				return err;
			if (ok)
				cuda_grant(be, d, p);
		}
		return 0;
	}
	while (*spec) {
		char *end;
		long v = strtol(spec, &end, 10);

		if (end == spec || (*end && *end != ',') || v < 0 ||
		    v >= nr_dev || v >= CUDA_MAX_PEERS)
			return sa_error(-EINVAL,
					"cuda: STALLOC_PEERS \"%s\": want "
					"\"all\", \"none\" or a comma list of "
					"device ordinals below %d",
					be->peers, nr_dev);
		p = (int)v;
		if (p != be->device && !(be->peer_mask & (1ULL << p))) {
			err = cuda_peer_ok(be, d, p, &ok);
			if (err)
				return err;
			if (!ok)
				return sa_error(-EINVAL,
						"cuda: STALLOC_PEERS names "
						"device %d, which cannot "
						"access device %d",
						p, be->device);
			cuda_grant(be, d, p);
		}
		spec = *end ? end + 1 : end;
	}
	return 0;
}

static int cuda_query(struct vmm_backend *be, struct cuda_dev *d)
{
	CUmemAllocationProp prop;
	size_t gran = 0, bytes = 0;
	int vmm = 0;
	CUresult rc;

	rc = drv.device_attr(
		&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
		d->dev);
	if (rc != CUDA_SUCCESS)
		return cuda_fail(be, rc, "cuDeviceGetAttribute(VMM_SUPPORTED)");
	if (!vmm)
		return sa_error(-ENODEV,
				"cuda: device %d does not support virtual "
				"memory management",
				be->device);
	rc = drv.total_mem(&bytes, d->dev);
	if (rc != CUDA_SUCCESS)
		return cuda_fail(be, rc, "cuDeviceTotalMem()");
	cuda_prop(be, &prop);
	rc = drv.granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
	if (rc != CUDA_SUCCESS)
		return cuda_fail(be, rc, "cuMemGetAllocationGranularity()");
	if (!sa_is_pow2(gran))
		return sa_error(-ENODEV,
				"cuda: device %d reports granularity %zu, not "
				"a power of two",
				be->device, gran);
	d->rdma = cuda_attr_or_0(
		d, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED);
	if (cuda_attr_or_0(
		    d,
		    CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED))
		d->handle_types = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	be->info.name = "cuda";
	be->info.granularity = gran;
	be->info.device_bytes = bytes;
	be->info.flags = VMM_BE_DEFERRED_RELEASE;
	return 0;
}

static int cuda_open(struct vmm_backend *be)
{
	struct cuda_dev *d;
	int n = 0, err;
	CUresult rc;

	err = drv_get();
	if (err)
		return err;
	rc = drv.device_count(&n);
	if (rc != CUDA_SUCCESS)
		return cuda_fail(be, rc, "cuDeviceGetCount()");
	if (be->device < 0 || be->device >= n)
		return sa_error(-ENODEV, "cuda: no device %d (%d present)",
				be->device, n);
	d = calloc(1, sizeof(*d));
	if (!d)
		return sa_error(-ENOMEM, "cuda: out of memory opening device");
	rc = drv.device_get(&d->dev, be->device);
	if (rc != CUDA_SUCCESS) {
		err = cuda_fail(be, rc, "cuDeviceGet()");
		goto err_free;
	}
	err = cuda_query(be, d);
	if (err)
		goto err_free;
	err = cuda_peers(be, d, n);
	if (err)
		goto err_free;
	rc = drv.primary_retain(&d->ctx, d->dev);
	if (rc != CUDA_SUCCESS) {
		err = cuda_fail(be, rc, "cuDevicePrimaryCtxRetain()");
		goto err_free;
	}
	be->priv = d;
	return 0;

err_free:
	free(d);
	return err;
}

static void cuda_close(struct vmm_backend *be)
{
	struct cuda_dev *d = be->priv;
	CUresult rc;

	/* Tried twice, like every release at tear-down (see vmm/space.c). */
	rc = drv.primary_release(d->dev);
	if (rc != CUDA_SUCCESS)
		rc = drv.primary_release(d->dev);
	if (rc != CUDA_SUCCESS)
		cuda_fail(be, rc, "cuDevicePrimaryCtxRelease()");
	free(d);
	be->priv = NULL;
}

/*
 * Run one driver call in the device's context: @call is an expression
 * assigned to rc; @fmt and the rest describe it for the error message.
 */
#define CUDA_CALL(be, call, fmt, ...)                                 \
	({                                                            \
		bool __pushed;                                        \
		char __what[96];                                      \
		int __err = cuda_enter(be, &__pushed);                \
		CUresult rc;                                          \
		if (!__err) {                                         \
			rc = (call);                                  \
			cuda_leave(be, __pushed);                     \
			if (rc != CUDA_SUCCESS) {                     \
				snprintf(__what, sizeof(__what), fmt, \
					 __VA_ARGS__);                \
				__err = cuda_fail(be, rc, __what);    \
			}                                             \
		}                                                     \
		__err;                                                \
	})

static int cuda_reserve_va(struct vmm_backend *be, size_t size, size_t align,
			   uint64_t *va)
{
	CUdeviceptr p = 0;
	int err;

	err = CUDA_CALL(be, drv.addr_reserve(&p, size, align, 0, 0),
			"cuMemAddressReserve(%zu, align %zu)", size, align);
	if (!err)
		*va = p;
	return err;
}

static int cuda_release_va(struct vmm_backend *be, uint64_t va, size_t size)
{
	return CUDA_CALL(be, drv.addr_free(va, size),
			 "cuMemAddressFree(0x%llx, %zu)",
			 (unsigned long long)va, size);
}

static int cuda_create_chunk(struct vmm_backend *be, size_t size,
			     uint64_t *handle)
{
	CUmemGenericAllocationHandle h = 0;
	struct cuda_dev *d = be->priv;
	CUmemAllocationProp prop;
	int err;

	cuda_prop(be, &prop);
	prop.allocFlags.gpuDirectRDMACapable = d->rdma;
	prop.requestedHandleTypes = d->handle_types;
	err = CUDA_CALL(be, drv.mem_create(&h, size, &prop, 0),
			"cuMemCreate(%zu, rdma %d, handle types %#x)", size,
			(int)d->rdma, d->handle_types);
	if (err && err != -ENOMEM && (d->rdma || d->handle_types)) {
		sa_log(STALLOC_LOG_INFO,
		       "cuda: device %d: %s; retrying without GPUDirect RDMA "
		       "and shareable handle types, which are not asked for "
		       "again",
		       be->device, stalloc_last_error());
		d->rdma = false;
		d->handle_types = 0;
		cuda_prop(be, &prop);
		err = CUDA_CALL(be, drv.mem_create(&h, size, &prop, 0),
				"cuMemCreate(%zu)", size);
	}
	if (!err)
		*handle = h;
	return err;
}

static int cuda_destroy_chunk(struct vmm_backend *be, uint64_t handle)
{
	return CUDA_CALL(be, drv.mem_release(handle), "cuMemRelease(%#llx)",
			 (unsigned long long)handle);
}

static int cuda_map(struct vmm_backend *be, uint64_t va, size_t size,
		    uint64_t handle)
{
	return CUDA_CALL(be, drv.mem_map(va, size, 0, handle, 0),
			 "cuMemMap(0x%llx, %zu, handle %#llx)",
			 (unsigned long long)va, size,
			 (unsigned long long)handle);
}

static int cuda_unmap(struct vmm_backend *be, uint64_t va, size_t size)
{
	return CUDA_CALL(be, drv.mem_unmap(va, size), "cuMemUnmap(0x%llx, %zu)",
			 (unsigned long long)va, size);
}

static int cuda_set_access(struct vmm_backend *be, uint64_t va, size_t size)
{
	struct cuda_dev *d = be->priv;

	return CUDA_CALL(
		be, drv.set_access(va, size, d->access, (size_t)d->nr_access),
		"cuMemSetAccess(0x%llx, %zu, %d devices)",
		(unsigned long long)va, size, d->nr_access);
}

static int cuda_synchronize(struct vmm_backend *be, void *stream)
{
	if (stream)
		return CUDA_CALL(be, drv.stream_sync((CUstream)stream),
				 "cuStreamSynchronize(%p)", stream);
	return CUDA_CALL(be, drv.ctx_sync(), "%s", "cuCtxSynchronize()");
}

static int cuda_event_new(struct vmm_backend *be, uint64_t *ev)
{
	CUevent e = NULL;
	int err;

	err = CUDA_CALL(be, drv.event_create(&e, CU_EVENT_DISABLE_TIMING), "%s",
			"cuEventCreate()");
	if (!err)
		*ev = (uint64_t)(uintptr_t)e;
	return err;
}

static void cuda_event_free(struct vmm_backend *be, uint64_t ev)
{
	CUDA_CALL(be, drv.event_destroy((CUevent)(uintptr_t)ev),
		  "cuEventDestroy(%#llx)", (unsigned long long)ev);
}

static int cuda_event_record(struct vmm_backend *be, uint64_t ev, void *stream)
{
	return CUDA_CALL(
		be, drv.event_record((CUevent)(uintptr_t)ev, (CUstream)stream),
		"cuEventRecord(%p)", stream);
}

static int cuda_stream_wait(struct vmm_backend *be, void *stream, uint64_t ev)
{
	return CUDA_CALL(be,
			 drv.stream_wait((CUstream)stream,
					 (CUevent)(uintptr_t)ev, 0),
			 "cuStreamWaitEvent(%p)", stream);
}

static int cuda_event_sync(struct vmm_backend *be, uint64_t ev)
{
	return CUDA_CALL(be, drv.event_sync((CUevent)(uintptr_t)ev),
			 "cuEventSynchronize(%#llx)", (unsigned long long)ev);
}

static int cuda_event_query(struct vmm_backend *be, uint64_t ev, bool *done)
{
	bool pushed;
	int err = cuda_enter(be, &pushed);
	CUresult rc;

	*done = false;
	if (err)
		return err;
	rc = drv.event_query((CUevent)(uintptr_t)ev);
	cuda_leave(be, pushed);
	if (rc == CUDA_ERROR_NOT_READY)
		return 0;
	if (rc != CUDA_SUCCESS)
		return cuda_fail(be, rc, "cuEventQuery()");
	*done = true;
	return 0;
}

static int cuda_capturing(struct vmm_backend *be, void *stream, bool *on)
{
	CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
	int err = 0;

	if (drv.stream_capturing)
		err = CUDA_CALL(be, drv.stream_capturing((CUstream)stream, &st),
				"cuStreamIsCapturing(%p)", stream);
	*on = !err && st != CU_STREAM_CAPTURE_STATUS_NONE;
	return err;
}

/* The thread's capture mode: relaxed while we map memory, then restored. */
static int cuda_capture_relax(struct vmm_backend *be, bool relax, int *old)
{
	CUstreamCaptureMode mode = relax ? CU_STREAM_CAPTURE_MODE_RELAXED :
					   (CUstreamCaptureMode)*old;
	CUresult rc;

	if (!drv.capture_mode)
		return 0;
	rc = drv.capture_mode(&mode);
	if (rc != CUDA_SUCCESS)
		return cuda_fail(be, rc, "cuThreadExchangeStreamCaptureMode()");
	if (relax)
		*old = (int)mode;
	return 0;
}

const struct vmm_backend_ops vmm_cuda_ops = {
	.name = "cuda",
	.open = cuda_open,
	.close = cuda_close,
	.reserve_va = cuda_reserve_va,
	.release_va = cuda_release_va,
	.create_chunk = cuda_create_chunk,
	.destroy_chunk = cuda_destroy_chunk,
	.map = cuda_map,
	.unmap = cuda_unmap,
	.set_access = cuda_set_access,
	.synchronize = cuda_synchronize,
	.event_new = cuda_event_new,
	.event_free = cuda_event_free,
	.event_record = cuda_event_record,
	.stream_wait = cuda_stream_wait,
	.event_sync = cuda_event_sync,
	.event_query = cuda_event_query,
	.capturing = cuda_capturing,
	.capture_relax = cuda_capture_relax,
};
