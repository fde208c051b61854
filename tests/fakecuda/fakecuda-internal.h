/* SPDX-License-Identifier: MIT */
/*
 * fakecuda-internal.h - state and helpers shared by the fake driver's files
 *
 * fakecuda.c owns the global lock, configuration, call counters, fault
 * injection and the entry point table; fakecuda-ctx.c owns devices and
 * contexts; fakecuda-stream.c streams and events; fakecuda-capture.c
 * stream capture and its rules; fakecuda-work.c the work model (clocks,
 * pending accesses, completion, launches); fakecuda-mem.c virtual memory
 * management; fakecuda-pool.c the devices' physical memory; fakecuda-copy.c
 * copies and memset.
 *
 * Locking: every driver entry point runs under fc_mutex, taken by
 * fc_enter() and dropped by fc_leave(), so all state reached from an entry
 * point (and everything declared here) is protected by it.  The only
 * unlocked state is thread-local: the context stack (fakecuda-ctx.c), the
 * per-thread default streams (fakecuda-stream.c) and the capture mode
 * (fakecuda-capture.c).
 */
#ifndef FAKECUDA_INTERNAL_H
#define FAKECUDA_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

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
/*
 * Capture rules of a call kind (fc_capture_check()): refused on the
 * capture of the stream or event it names; potentially unsafe under the
 * thread's capture mode (it synchronises with the device or unmaps).
 */
#define FC_F_CAPOWN 0x8
#define FC_F_UNSAFE 0x10

/* Every counted call kind, named by its unversioned entry point. */
#define FC_CALLS(X)                                       \
	X(cuInit, FC_F_NOINIT)                            \
	X(cuDriverGetVersion, FC_F_NOINIT)                \
	X(cuGetErrorString, FC_F_ASIDE | FC_F_NOFAULT)    \
	X(cuGetErrorName, FC_F_ASIDE | FC_F_NOFAULT)      \
	X(cuGetProcAddress, FC_F_ASIDE)                   \
	X(cuDeviceGetCount, 0)                            \
	X(cuDeviceGet, 0)                                 \
	X(cuDeviceGetAttribute, 0)                        \
	X(cuDeviceGetName, 0)                             \
	X(cuDeviceTotalMem, 0)                            \
	X(cuDeviceCanAccessPeer, 0)                       \
	X(cuDevicePrimaryCtxRetain, 0)                    \
	X(cuDevicePrimaryCtxRelease, 0)                   \
	X(cuCtxGetCurrent, 0)                             \
	X(cuCtxSetCurrent, 0)                             \
	X(cuCtxGetDevice, 0)                              \
	X(cuCtxPushCurrent, 0)                            \
	X(cuCtxPopCurrent, 0)                             \
	X(cuCtxSynchronize, FC_F_UNSAFE)                  \
	X(cuStreamCreate, 0)                              \
	X(cuStreamDestroy, 0)                             \
	X(cuStreamSynchronize, FC_F_CAPOWN | FC_F_UNSAFE) \
	X(cuStreamQuery, FC_F_CAPOWN)                     \
	X(cuStreamWaitEvent, 0)                           \
	X(cuEventCreate, 0)                               \
	X(cuEventRecord, 0)                               \
	X(cuEventQuery, FC_F_CAPOWN)                      \
	X(cuEventSynchronize, FC_F_CAPOWN | FC_F_UNSAFE)  \
	X(cuEventDestroy, 0)                              \
	X(cuMemAddressReserve, 0)                         \
	X(cuMemAddressFree, 0)                            \
	X(cuMemCreate, 0)                                 \
	X(cuMemRelease, FC_F_UNSAFE)                      \
	X(cuMemMap, 0)                                    \
	X(cuMemUnmap, FC_F_UNSAFE)                        \
	X(cuMemSetAccess, 0)                              \
	X(cuMemGetAccess, 0)                              \
	X(cuMemGetAllocationGranularity, 0)               \
	X(cuMemsetD8, 0)                                  \
	X(cuMemcpyHtoD, 0)                                \
	X(cuMemcpyDtoH, 0)                                \
	X(cuMemcpyDtoD, 0)                                \
	X(cuMemcpy, 0)                                    \
	X(cuStreamBeginCapture, 0)                        \
	X(cuStreamEndCapture, 0)                          \
	X(cuStreamIsCapturing, 0)                         \
	X(cuStreamGetCaptureInfo, 0)                      \
	X(cuGraphDestroy, 0)                              \
	X(cuThreadExchangeStreamCaptureMode, 0)           \
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

/* fakecuda.c: name and flags of the call being served. */
const char *fc_call_name(void);
unsigned int fc_call_flags(void);
/* fakecuda.c: the size of @vec, or a counter, read under the lock. */
unsigned long fc_vec_count(const struct fc_vec *vec);
unsigned long fc_read_locked(const unsigned long *v);

/* fakecuda-pool.c: the devices' physical memory, one file each. */
/* A free range of a pool's file. */
struct fc_extent {
	off_t off;
	size_t size;
	struct fc_extent *next;
};

struct fc_pool {
	int fd;
	off_t end; /* file size */
	struct fc_extent *free; /* sorted by offset, coalesced */
	unsigned long long used; /* bytes of handles not yet freed */
};

extern struct fc_pool fc_pools[FC_MAX_DEV];

/* fakecuda-pool.c: create the devices' physical memory at cuInit. */
CUresult fc_mem_init(void);
int fc_pool_alloc(struct fc_pool *pool, size_t size, off_t *off);
/* fakecuda-pool.c: punch [off, off+size) out, back to the free list. */
void fc_pool_free(struct fc_pool *pool, off_t off, size_t size);
/* fakecuda-mem.c: [va, va+n) is mapped and @dev may read (and write) it. */
CUresult fc_dev_range_check(uint64_t va, size_t n, bool write, int dev);
/* fakecuda-mem.c: host view of checked device address @va; *@len left. */
unsigned char *fc_dev_alias(uint64_t va, size_t *len);
/* fakecuda-mem.c: @va lies in a reservation (unified addressing). */
bool fc_dev_addr(uint64_t va);

/* A device address as the pointer the host's calls take. */
static inline void *fc_va_ptr(uint64_t va)
{
	return (void *)(uintptr_t)va;
}

/* ---------------------------------------------------------------- */
/* Contexts, streams, events and captures                            */
/* ---------------------------------------------------------------- */

/* A device's primary context; its address is the CUcontext handed out. */
struct CUctx_st {
	int dev;
	unsigned long retains;
	unsigned long gen; /* bumped when the last retain goes */
};

/* Stream @id's work up to @seq. */
struct fc_tick {
	uint64_t id;
	uint64_t seq;
};

/* The work of other streams something is ordered after. */
struct fc_clock {
	struct fc_tick *t;
	size_t n;
};

enum fc_stream_kind { FC_S_USER, FC_S_LEGACY, FC_S_PTDS };

struct fc_capture {
	uint64_t id;
	struct CUctx_st *ctx;
	struct fc_stream *origin; /* where it began and must end */
	CUstreamCaptureMode mode;
	pthread_t thread; /* that began it */
	bool invalid;
	struct fc_capture *next;
};

struct fc_stream {
	struct fc_obj o; /* key: the CUstream token */
	struct CUctx_st *ctx;
	unsigned long gen; /* ctx->gen when created */
	enum fc_stream_kind kind;
	bool nonblocking;
	bool busy;
	uint64_t id; /* never reused: names the stream in clocks */
	uint64_t seq; /* work launched on it */
	struct fc_clock clock;
	struct fc_capture *cap; /* the capture it belongs to */
};

struct fc_event {
	struct fc_obj o; /* key: the CUevent token */
	struct CUctx_st *ctx;
	unsigned long gen;
	struct fc_stream *stream; /* the stream it waits for if pending */
	bool pending;
	bool recorded;
	struct fc_clock clock; /* taken from the stream at record */
	struct fc_capture *cap; /* recorded in this capture */
};

static inline struct fc_stream *fc_stream_of(struct fc_obj *o)
{
	return o ? fc_container_of(o, struct fc_stream, o) : NULL;
}

static inline struct fc_event *fc_event_of(struct fc_obj *o)
{
	return o ? fc_container_of(o, struct fc_event, o) : NULL;
}

/* Can device @dev access memory of device @owner? */
static inline bool fc_peer_can(int dev, int owner)
{
	return dev == owner || (fc_cfg.peer[dev] >> owner & 1);
}

/* fakecuda-ctx.c: the calling thread's current context, or NULL. */
struct CUctx_st *fc_ctx_current(void);
/* fakecuda-ctx.c: @ctx is one of the primary contexts. */
bool fc_ctx_known(const struct CUctx_st *ctx);
/* fakecuda-ctx.c: @ctx may be used for work: it exists and is retained. */
CUresult fc_ctx_usable(const struct CUctx_st *ctx);
/* fakecuda-ctx.c: device of the usable current context, or an error. */
CUresult fc_ctx_current_dev(int *dev);

/* fakecuda-stream.c: registered, legacy and per-thread streams; events. */
extern struct fc_vec fc_streams;
extern struct fc_stream fc_default_streams[FC_MAX_DEV];
extern struct fc_vec fc_ptds_all;
extern struct fc_vec fc_events;

/* Every stream: registered ones, the legacy ones, the per-thread ones. */
#define fc_for_each_stream(s, i)                                          \
	for ((i) = 0;                                                     \
	     (i) < fc_streams.n + FC_MAX_DEV + fc_ptds_all.n &&           \
	     ((s) = (i) < fc_streams.n ?                                  \
			    fc_stream_of(fc_streams.v[(i)]) :             \
		    (i) < fc_streams.n + FC_MAX_DEV ?                     \
			    &fc_default_streams[(i)-fc_streams.n] :       \
			    fc_stream_of(fc_ptds_all.v[(i)-fc_streams.n - \
						       FC_MAX_DEV]),      \
	     1);                                                          \
	     (i)++)

/* fakecuda-stream.c: a fresh token (never a valid address) under @tag. */
uint64_t fc_token_new(uint64_t tag);
/* fakecuda-stream.c: set up @ctx's legacy stream on its first retain. */
void fc_stream_legacy_init(struct CUctx_st *ctx);
/* fakecuda-stream.c: the live stream @h names (NULL: legacy), or an error. */
CUresult fc_stream_get(CUstream h, struct fc_stream **out);
/* fakecuda-stream.c: resolve @h without complaints; NULL if none. */
struct fc_stream *fc_stream_find(CUstream h);

/* fakecuda-capture.c: @c breaks a rule; it will give no graph. */
void fc_capture_invalidate(struct fc_capture *c);
/* fakecuda-capture.c: detach everything from capture @c and free it. */
void fc_capture_free(struct fc_capture *c);
/*
 * fakecuda-capture.c: the capture rules of the call being served, by its
 * FC_F_CAPOWN and FC_F_UNSAFE flags, once its arguments are checked; @own
 * is the capture of the stream or event it names (@on: which, in words).
 */
CUresult fc_capture_check(struct fc_capture *own, const char *on);
/* fakecuda-capture.c: may work be put on @s under the capture rules? */
CUresult fc_stream_work_check(struct fc_stream *s);

/* fakecuda-work.c: clocks; fc_clock_set/merge return -1 out of memory. */
int fc_clock_set(struct fc_clock *c, uint64_t id, uint64_t seq);
int fc_clock_merge(struct fc_clock *dst, const struct fc_clock *src);
void fc_clock_clear(struct fc_clock *c);
/* fakecuda-work.c: finish the work queued on @s; all of @ctx's streams. */
void fc_stream_complete(struct fc_stream *s);
void fc_ctx_sync(struct CUctx_st *ctx);
/* fakecuda-work.c: [va, va+size) is being unmapped (pending work check). */
void fc_work_unmap(uint64_t va, uint64_t size);
/* fakecuda-work.c: a synchronous copy, work on the legacy stream. */
CUresult fc_work_sync_copy(uint64_t dst, uint64_t src, size_t n);

#endif /* FAKECUDA_INTERNAL_H */
