/* SPDX-License-Identifier: MIT */
/*
 * fakecuda-internal.h - state and helpers shared by the fake driver's files
 *
 * fakecuda.c owns the global lock, configuration, call counters, fault
 * injection and the entry point table; fakecuda-ctx.c owns devices,
 * contexts, streams and events; fakecuda-mem.c owns virtual memory
 * management and copies.
 *
 * Locking: every driver entry point runs under fc_mutex, taken by
 * fc_enter() and dropped by fc_leave(), so all state reached from an entry
 * point (and everything declared here) is protected by it.  The only
 * unlocked state is the thread-local context stack in fakecuda-ctx.c.
 */
#ifndef FAKECUDA_INTERNAL_H
#define FAKECUDA_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda.h>

#define FC_API __attribute__((visibility("default")))
#define FC_MAX_DEV 8
#define FC_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define fc_container_of(ptr, type, member) \
	((type *)(void *)((char *)(ptr)-offsetof(type, member)))

/* cuda.h declares this older entry point for internal builds only. */
CUresult CUDAAPI cuStreamGetCaptureInfo_v2(CUstream h,
					   CUstreamCaptureStatus *status,
					   cuuint64_t *id, CUgraph *graph,
					   const CUgraphNode **deps,
					   size_t *ndeps);

/* Call kind flags: no cuInit needed, never fails on purpose, not "total". */
#define FC_F_NOINIT 0x1
#define FC_F_NOFAULT 0x2
#define FC_F_NOTOTAL 0x4
#define FC_F_ASIDE (FC_F_NOINIT | FC_F_NOTOTAL)

/* Every counted call kind, named by its unversioned entry point. */
#define FC_CALLS(X)                                    \
	X(cuInit, FC_F_NOINIT)                         \
	X(cuDriverGetVersion, FC_F_NOINIT)             \
	X(cuGetErrorString, FC_F_ASIDE | FC_F_NOFAULT) \
	X(cuGetErrorName, FC_F_ASIDE | FC_F_NOFAULT)   \
	X(cuGetProcAddress, FC_F_ASIDE)                \
	X(cuDeviceGetCount, 0)                         \
	X(cuDeviceGet, 0)                              \
	X(cuDeviceGetAttribute, 0)                     \
	X(cuDeviceGetName, 0)                          \
	X(cuDeviceTotalMem, 0)                         \
	X(cuDeviceCanAccessPeer, 0)                    \
	X(cuDevicePrimaryCtxRetain, 0)                 \
	X(cuDevicePrimaryCtxRelease, 0)                \
	X(cuCtxGetCurrent, 0)                          \
	X(cuCtxSetCurrent, 0)                          \
	X(cuCtxGetDevice, 0)                           \
	X(cuCtxPushCurrent, 0)                         \
	X(cuCtxPopCurrent, 0)                          \
	X(cuCtxSynchronize, 0)                         \
	X(cuStreamCreate, 0)                           \
	X(cuStreamDestroy, 0)                          \
	X(cuStreamSynchronize, 0)                      \
	X(cuStreamQuery, 0)                            \
	X(cuStreamWaitEvent, 0)                        \
	X(cuEventCreate, 0)                            \
	X(cuEventRecord, 0)                            \
	X(cuEventQuery, 0)                             \
	X(cuEventSynchronize, 0)                       \
	X(cuEventDestroy, 0)                           \
	X(cuMemAddressReserve, 0)                      \
	X(cuMemAddressFree, 0)                         \
	X(cuMemCreate, 0)                              \
	X(cuMemRelease, 0)                             \
	X(cuMemMap, 0)                                 \
	X(cuMemUnmap, 0)                               \
	X(cuMemSetAccess, 0)                           \
	X(cuMemGetAccess, 0)                           \
	X(cuMemGetAllocationGranularity, 0)            \
	X(cuMemsetD8, 0)                               \
	X(cuMemcpyHtoD, 0)                             \
	X(cuMemcpyDtoH, 0)                             \
	X(cuMemcpyDtoD, 0)                             \
	X(cuMemcpy, 0)                                 \
	X(cuStreamBeginCapture, 0)                     \
	X(cuStreamEndCapture, 0)                       \
	X(cuStreamIsCapturing, 0)                      \
	X(cuStreamGetCaptureInfo, 0)                   \
	X(cuGraphDestroy, 0)                           \
	X(cuThreadExchangeStreamCaptureMode, 0)        \
	X(fakecuda_launch, FC_F_NOTOTAL | FC_F_NOFAULT)

#define FC_CALL_ENUM(name, flags) FC_##name,
enum fc_call { FC_CALLS(FC_CALL_ENUM) FC_NCALLS };
#undef FC_CALL_ENUM

/* Configuration, read from the environment at the first cuInit. */
struct fc_config {
	int ndev;
	size_t mem; /* bytes per device */
	size_t gran; /* allocation granularity, a power of two */
	bool no_vmm;
	bool no_rdma; /* FAKECUDA_NO_RDMA: no GPUDirect RDMA with VMM */
	bool no_posix_fd; /* FAKECUDA_NO_POSIX_FD: no shareable fd handles */
	unsigned char peer[FC_MAX_DEV]; /* bit b of peer[a]: a can access b */
};

extern struct fc_config fc_cfg;
extern bool fc_inited;

/*
 * Entry point gate: fc_enter() takes the lock, counts the call, applies
 * injected faults and the cuInit rule, and returns what the entry point
 * must return at once if it is not CUDA_SUCCESS.  fc_leave() drops the
 * lock and passes @err through.  They pair up even when fc_enter() fails.
 */
CUresult fc_enter(enum fc_call call);
CUresult fc_leave(CUresult err);
void fc_lock(void);
void fc_unlock(void);

/* Report a rule violation of the current call; returns @err. */
CUresult fc_viol(CUresult err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static inline bool fc_dev_valid(long long dev)
{
	return dev >= 0 && dev < fc_cfg.ndev;
}

/*
 * Sorted registry of objects keyed by a 64-bit value (an address, a handle
 * or a token).  Objects embed struct fc_obj; the registry does not own them.
 */
struct fc_obj {
	uint64_t key;
};

struct fc_vec {
	struct fc_obj **v;
	size_t n;
	size_t cap;
};

size_t fc_vec_upper(const struct fc_vec *vec, uint64_t key);
struct fc_obj *fc_vec_find(const struct fc_vec *vec, uint64_t key);
int fc_vec_insert(struct fc_vec *vec, struct fc_obj *obj);
void fc_vec_remove(struct fc_vec *vec, size_t idx, size_t count);
void fc_vec_remove_key(struct fc_vec *vec, uint64_t key);

/* fakecuda-mem.c: create the devices' physical memory at cuInit. */
CUresult fc_mem_init(void);

/* fakecuda-ctx.c: can device @dev access memory of device @owner? */
static inline bool fc_peer_can(int dev, int owner)
{
	return dev == owner || (fc_cfg.peer[dev] >> owner & 1);
}

/* fakecuda-ctx.c: device of the usable current context, or an error. */
CUresult fc_ctx_current_dev(int *dev);
/* fakecuda-ctx.c: a potentially unsafe call under the capture rules. */
CUresult fc_capture_unsafe(const char *what);
/* fakecuda-ctx.c: [va, va+size) is being unmapped (pending work check). */
void fc_work_unmap(uint64_t va, uint64_t size);
/* fakecuda-ctx.c: a synchronous copy, work on the legacy stream. */
CUresult fc_work_sync_copy(uint64_t dst, uint64_t src, size_t n);
/* fakecuda-mem.c: [va, va+n) is mapped and @dev may read (and write) it. */
CUresult fc_dev_range_check(uint64_t va, size_t n, bool write, int dev);

#endif /* FAKECUDA_INTERNAL_H */
