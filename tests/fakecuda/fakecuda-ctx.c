// SPDX-License-Identifier: MIT
/*
 * fakecuda-ctx.c - devices, contexts, streams, events, captures and work
 *
 * Devices are ordinals 0..fc_cfg.ndev-1.  Each has one primary context, a
 * static struct CUctx_st whose address is the stable CUcontext handed out;
 * it is active while retained.  Its generation counter (gen) is bumped each
 * time the last retain goes, so streams and events created under an earlier
 * activation are recognised as belonging to a destroyed context.
 *
 * Streams and events are registered objects; the CUstream/CUevent values
 * are opaque tokens (tag | sequence number, never valid addresses), so a
 * destroyed handle is never confused with a new one.  NULL and
 * CU_STREAM_LEGACY name the legacy default stream of the current context,
 * which synchronises implicitly with every blocking stream of the context;
 * CU_STREAM_PER_THREAD names the calling thread's own default stream of it,
 * a blocking stream like the others (ordered with the legacy one only).
 *
 * Work model: every stream numbers the work launched on it (seq) and keeps
 * a clock, the work of other streams it is ordered after (stream id ->
 * seq), fed by cuStreamWaitEvent from the clock an event took at record.
 * Work is instantaneous except on a stream a test holds busy with
 * fakecuda_stream_hold(): its accesses (fakecuda_launch) and events stay
 * pending until the stream's work completes (stream, event or context
 * synchronisation, destroying the stream, releasing the hold).  An access
 * that conflicts with a pending access of another stream it is not ordered
 * after is a violation, as is unmapping memory with pending accesses.
 *
 * Capture: a capture begins on one stream, spreads to streams that wait on
 * its captured events and ends on the stream that began it.  Captured work
 * does not run.  The rules of the real driver are enforced: potentially
 * unsafe calls under the thread's capture mode, no legacy stream work
 * beside a capturing blocking stream, no waits across capture bounds; a
 * broken rule invalidates the capture, and cuStreamEndCapture then gives
 * no graph.
 *
 * Invariants: a pending event points at a live stream; a pending access
 * belongs to a held stream; a stream or event in a capture points at a
 * live struct fc_capture, freed when the capture ends.
 *
 * Locking: all of it runs under fc_mutex (see fakecuda-internal.h), except
 * the thread-local context stack, capture mode and per-thread streams
 * pointers (the streams themselves are registered in fc_ptds_all).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "fakecuda-internal.h"
#include "fakecuda.h"

#define FC_CTX_STACK 32
#define FC_STREAM_TAG 0xf57e000000000000ULL
#define FC_EVENT_TAG 0xfe7e000000000000ULL
#define FC_GRAPH_TAG 0xf9a0000000000000ULL
#define FC_EVENT_FLAGS                                      \
	(CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | \
	 CU_EVENT_INTERPROCESS)

struct CUctx_st {
	int dev;
	unsigned long retains;
	unsigned long gen;
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

/* An access by work not yet completed (on a held stream). */
struct fc_access {
	struct fc_stream *s;
	uint64_t seq;
	uint64_t va, size;
	bool write;
	struct fc_access *next;
};

static struct CUctx_st fc_ctxs[FC_MAX_DEV] = {
	{ .dev = 0 }, { .dev = 1 }, { .dev = 2 }, { .dev = 3 },
	{ .dev = 4 }, { .dev = 5 }, { .dev = 6 }, { .dev = 7 },
};

static struct fc_stream fc_default_streams[FC_MAX_DEV]; /* legacy ones */
static struct fc_vec fc_streams;
static struct fc_vec fc_ptds_all;
static struct fc_vec fc_events;
static struct fc_vec fc_graphs;
static struct fc_capture *fc_captures;
static struct fc_access *fc_pending;
static uint64_t fc_token_seq;
static uint64_t fc_stream_ids;
static uint64_t fc_capture_ids;
static unsigned long fc_ncap_invalidated;

static __thread struct fc_stream *fc_ptds[FC_MAX_DEV];
static __thread CUstreamCaptureMode fc_thread_mode; /* 0: GLOBAL */
static __thread struct CUctx_st *fc_ctx_stack[FC_CTX_STACK];
static __thread unsigned int fc_ctx_depth;

/* ------------------------------------------------------------------ */
/* Devices                                                             */
/* ------------------------------------------------------------------ */

static CUresult dev_check(CUdevice dev)
{
	if (!fc_dev_valid(dev))
		return fc_viol(CUDA_ERROR_INVALID_DEVICE,
			       "device %d out of range (%d devices)", dev,
			       fc_cfg.ndev);
	return CUDA_SUCCESS;
}

FC_API CUresult cuDeviceGetCount(int *count)
{
	CUresult err = fc_enter(FC_cuDeviceGetCount);

	if (err != CUDA_SUCCESS)
		return fc_leave(err);
	if (!count)
		return fc_leave(
			fc_viol(CUDA_ERROR_INVALID_VALUE, "count is NULL"));
	*count = fc_cfg.ndev;
	return fc_leave(CUDA_SUCCESS);
}

FC_API CUresult cuDeviceGet(CUdevice *dev, int ordinal)
{
	CUresult err = fc_enter(FC_cuDeviceGet);

	if (err == CUDA_SUCCESS && !dev)
		err = fc_viol(CUDA_ERROR_INVALID_VALUE, "device is NULL");
	if (err == CUDA_SUCCESS)
		err = dev_check(ordinal);
	if (err == CUDA_SUCCESS)
		*dev = ordinal;
	return fc_leave(err);
}

/* Value of attribute @attr of device @dev; a plausible Hopper part. */
static int dev_attr_value(CUdevice_attribute attr, CUdevice dev)
{
	switch (attr) {
	case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
		return !fc_cfg.no_vmm;
	case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
	case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY:
		return 1;
	case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
		return 9;
	case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
		return 1024;
	case CU_DEVICE_ATTRIBUTE_WARP_SIZE:
		return 32;
	case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
		return 132;
	case CU_DEVICE_ATTRIBUTE_CLOCK_RATE:
		return 1980000;
	case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH:
		return 5120;
	case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID:
		return 0x10 + dev;
	case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED:
		return !fc_cfg.no_rdma;
	case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED:
		return !fc_cfg.no_posix_fd;
	default:
		return 0; /* minor version 0, and "unsupported" */
	}
}

FC_API CUresult cuDeviceGetAttribute(int *value, CUdevice_attribute attr,
				     CUdevice dev)
{
	CUresult err = fc_enter(FC_cuDeviceGetAttribute);

	if (err == CUDA_SUCCESS && !value)
		err = fc_viol(CUDA_ERROR_INVALID_VALUE, "value is NULL");
	if (err == CUDA_SUCCESS &&
	    (attr <= 0 || attr >= CU_DEVICE_ATTRIBUTE_MAX))
		err = fc_viol(CUDA_ERROR_INVALID_VALUE, "attribute %d unknown",
			      (int)attr);
	if (err == CUDA_SUCCESS)
		err = dev_check(dev);
	if (err == CUDA_SUCCESS)
		*value = dev_attr_value(attr, dev);
	return fc_leave(err);
}

FC_API CUresult cuDeviceCanAccessPeer(int *can, CUdevice dev, CUdevice peer)
{
	CUresult err = fc_enter(FC_cuDeviceCanAccessPeer);

	if (err == CUDA_SUCCESS && !can)
		err = fc_viol(CUDA_ERROR_INVALID_VALUE,
			      "canAccessPeer is NULL");
	if (err == CUDA_SUCCESS)
		err = dev_check(dev);
	if (err == CUDA_SUCCESS)
		err = dev_check(peer);
	if (err == CUDA_SUCCESS && dev == peer)
		err = fc_viol(CUDA_ERROR_INVALID_DEVICE,
			      "device %d asked about itself", dev);
	if (err == CUDA_SUCCESS)
		*can = fc_peer_can(dev, peer);
	return fc_leave(err);
}

FC_API int fakecuda_set_peer(int dev, int owner, int can)
{
	if (dev < 0 || dev >= FC_MAX_DEV || owner < 0 || owner >= FC_MAX_DEV)
		return -1;
	fc_lock();
	if (can)
		fc_cfg.peer[dev] |= (unsigned char)(1u << owner);
	else
		fc_cfg.peer[dev] &= (unsigned char)~(1u << owner);
	fc_unlock();
	return 0;
}

FC_API CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
	CUresult err = fc_enter(FC_cuDeviceGetName);

	if (err == CUDA_SUCCESS && (!name || len <= 0))
		err = fc_viol(CUDA_ERROR_INVALID_VALUE, "name NULL or len %d",
			      len);
	if (err == CUDA_SUCCESS)
		err = dev_check(dev);
	if (err == CUDA_SUCCESS)
		snprintf(name, (size_t)len, "fakecuda device %d", dev);
	return fc_leave(err);
}

FC_API CUresult cuDeviceTotalMem(size_t *bytes, CUdevice dev)
{
	CUresult err = fc_enter(FC_cuDeviceTotalMem);

	if (err == CUDA_SUCCESS && !bytes)
		err = fc_viol(CUDA_ERROR_INVALID_VALUE, "bytes is NULL");
	if (err == CUDA_SUCCESS)
		err = dev_check(dev);
	if (err == CUDA_SUCCESS)
		*bytes = fc_cfg.mem;
	return fc_leave(err);
}

/* ------------------------------------------------------------------ */
/* Clocks, captures and work completion                                */
/* ------------------------------------------------------------------ */

static struct fc_stream *stream_of(struct fc_obj *o)
{
	return o ? fc_container_of(o, struct fc_stream, o) : NULL;
}

static struct fc_event *event_of(struct fc_obj *o)
{
	return o ? fc_container_of(o, struct fc_event, o) : NULL;
}

static uint64_t token_new(uint64_t tag)
{
	return tag | (++fc_token_seq << 4);
}

/* The work of stream @id up to @seq that @c is ordered after (0: none). */
static uint64_t clock_get(const struct fc_clock *c, uint64_t id)
{
	size_t i;

	for (i = 0; i < c->n; i++)
		if (c->t[i].id == id)
			return c->t[i].seq;
	return 0;
}

/* Order @c after stream @id's work up to @seq; -1 out of memory. */
static int clock_set(struct fc_clock *c, uint64_t id, uint64_t seq)
{
	struct fc_tick *t;
	size_t i;

	for (i = 0; i < c->n; i++) {
		if (c->t[i].id != id)
			continue;
		if (c->t[i].seq < seq)
			c->t[i].seq = seq;
		return 0;
	}
	t = realloc(c->t, (c->n + 1) * sizeof(*t));
	if (!t)
		return -1;
	t[c->n].id = id;
	t[c->n].seq = seq;
	c->t = t;
	c->n++;
	return 0;
}

static int clock_merge(struct fc_clock *dst, const struct fc_clock *src)
{
	size_t i;

	for (i = 0; i < src->n; i++)
		if (clock_set(dst, src->t[i].id, src->t[i].seq))
			return -1;
	return 0;
}

static void clock_clear(struct fc_clock *c)
{
	free(c->t);
	c->t = NULL;
	c->n = 0;
}

/*
 * At unload (dlclose): the clocks of the streams that live in static
 * storage and the per-thread streams go, so that a leak checker sees only
 * the caller's leaks.  No thread may use the driver any more then.
 */
__attribute__((destructor)) static void clocks_fini(void)
{
	size_t i;

	for (i = 0; i < FC_MAX_DEV; i++)
		clock_clear(&fc_default_streams[i].clock);
	for (i = 0; i < fc_ptds_all.n; i++) {
		struct fc_stream *st = stream_of(fc_ptds_all.v[i]);

		clock_clear(&st->clock);
		free(st);
	}
	free(fc_ptds_all.v);
	fc_ptds_all = (struct fc_vec){ 0 };
}

/* Every stream: registered ones, the legacy ones, the per-thread ones. */
#define for_each_stream(s, i)                                          \
	for ((i) = 0;                                                  \
	     (i) < fc_streams.n + FC_MAX_DEV + fc_ptds_all.n &&        \
	     ((s) = (i) < fc_streams.n ?                               \
			    stream_of(fc_streams.v[(i)]) :             \
		    (i) < fc_streams.n + FC_MAX_DEV ?                  \
			    &fc_default_streams[(i)-fc_streams.n] :    \
			    stream_of(fc_ptds_all.v[(i)-fc_streams.n - \
						    FC_MAX_DEV]),      \
	     1);                                                       \
	     (i)++)

static void capture_invalidate(struct fc_capture *c)
{
	if (!c->invalid)
		fc_ncap_invalidated++;
	c->invalid = true;
}

/* Detach everything from capture @c and free it. */
static void capture_free(struct fc_capture *c)
{
	struct fc_capture **pp;
	struct fc_stream *s;
	size_t i;

	for_each_stream(s, i) if (s->cap == c) s->cap = NULL;
	for (i = 0; i < fc_events.n; i++) {
		struct fc_event *e = event_of(fc_events.v[i]);

		if (e->cap == c) {
			e->cap = NULL;
			e->recorded = false;
		}
	}
	for (pp = &fc_captures; *pp; pp = &(*pp)->next) {
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	}
	free(c);
}

/*
 * A potentially unsafe call (one that synchronises with the device or
 * unmaps memory) under the capture rules of cuThreadExchangeStreamCapture
 * Mode: prohibited while this thread has a capture of its own that is not
 * relaxed, or, in global mode, while any thread has a global capture.
 * A prohibited call invalidates those captures and is a violation.
 */
CUresult fc_capture_unsafe(const char *what)
{
	struct fc_capture *c;
	bool hit = false;

	if (fc_thread_mode == CU_STREAM_CAPTURE_MODE_RELAXED)
		return CUDA_SUCCESS;
	for (c = fc_captures; c; c = c->next) {
		if (c->mode == CU_STREAM_CAPTURE_MODE_RELAXED)
			continue;
		if (pthread_equal(c->thread, pthread_self()) ||
		    (fc_thread_mode == CU_STREAM_CAPTURE_MODE_GLOBAL &&
		     c->mode == CU_STREAM_CAPTURE_MODE_GLOBAL)) {
			capture_invalidate(c);
			hit = true;
		}
	}
	if (hit)
		return fc_viol(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
			       "%s while a stream capture is active (capture "
			       "invalidated)",
			       what);
	return CUDA_SUCCESS;
}

/*
 * Work on @s: the legacy stream synchronises implicitly with every blocking
 * stream of its context, so it may not be used while one of them captures;
 * a stream of an invalidated capture refuses further work.
 */
static CUresult stream_work_check(struct fc_stream *s)
{
	struct fc_stream *t;
	size_t i;

	if (s->cap && s->cap->invalid)
		return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
	if (s->kind != FC_S_LEGACY)
		return CUDA_SUCCESS;
	for_each_stream(t, i)
	{
		if (!t->cap || t->ctx != s->ctx || t->nonblocking)
			continue;
		capture_invalidate(t->cap);
		return fc_viol(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,
			       "work on the legacy default stream while stream "
			       "%p of its context captures (capture "
			       "invalidated)",
			       (void *)(uintptr_t)t->o.key);
	}
	return CUDA_SUCCESS;
}

/* Legacy and blocking streams of one context order each other's work. */
static bool implicitly_ordered(const struct fc_stream *a,
			       const struct fc_stream *b)
{
	if (a->ctx != b->ctx)
		return false;
	return (a->kind == FC_S_LEGACY && !b->nonblocking) ||
	       (b->kind == FC_S_LEGACY && !a->nonblocking);
}

static const char *access_name(bool write)
{
	return write ? "write" : "read";
}

/*
 * Check an access of [va, va+size) by @s against every pending access of
 * another stream that conflicts with it (one of them writes); @launch also
 * records it, pending while @s is held.  An unordered access is a
 * violation; the work happens anyway, as on a device.
 */
static CUresult work_access(struct fc_stream *s, uint64_t va, uint64_t size,
			    bool write, bool launch)
{
	struct fc_access *a;

	for (a = fc_pending; a; a = a->next) {
		if (a->s == s || a->va >= va + size || va >= a->va + a->size ||
		    (!a->write && !write))
			continue;
		if (clock_get(&s->clock, a->s->id) >= a->seq ||
		    implicitly_ordered(s, a->s))
			continue;
		fc_viol(CUDA_SUCCESS,
			"%s of [0x%llx, +%llu) on stream %p is not ordered after "
			"the pending %s of [0x%llx, +%llu) on stream %p",
			access_name(write), (unsigned long long)va,
			(unsigned long long)size, (void *)(uintptr_t)s->o.key,
			access_name(a->write), (unsigned long long)a->va,
			(unsigned long long)a->size,
			(void *)(uintptr_t)a->s->o.key);
		break;
	}
	if (!launch)
		return CUDA_SUCCESS;
	s->seq++;
	if (!s->busy)
		return CUDA_SUCCESS; /* done at once */
	a = calloc(1, sizeof(*a));
	if (!a)
		return CUDA_ERROR_OUT_OF_MEMORY;
	a->s = s;
	a->seq = s->seq;
	a->va = va;
	a->size = size;
	a->write = write;
	a->next = fc_pending;
	fc_pending = a;
	return CUDA_SUCCESS;
}

/* Drop the pending accesses of @s (@s NULL: of [va, va+size)); count. */
static unsigned long pending_drop(const struct fc_stream *s, uint64_t va,
				  uint64_t size)
{
	struct fc_access **pp = &fc_pending, *a;
	unsigned long n = 0;

	while ((a = *pp)) {
		bool hit = s ? a->s == s :
			       !(a->va >= va + size || va >= a->va + a->size);

		if (!hit) {
			pp = &a->next;
			continue;
		}
		*pp = a->next;
		free(a);
		n++;
	}
	return n;
}

/* Unmapping [va, va+size): no stream may still have work on it. */
void fc_work_unmap(uint64_t va, uint64_t size)
{
	if (pending_drop(NULL, va, size))
		fc_viol(CUDA_SUCCESS,
			"unmapping [0x%llx, +%llu) while a stream still uses "
			"the memory (pending work)",
			(unsigned long long)va, (unsigned long long)size);
}

/* Finish the work queued on @s: drop the hold, complete its events. */
static void stream_complete(struct fc_stream *s)
{
	size_t i;

	s->busy = false;
	for (i = 0; i < fc_events.n; i++) {
		struct fc_event *e = event_of(fc_events.v[i]);

		if (e->pending && e->stream == s) {
			e->pending = false;
			e->stream = NULL;
		}
	}
	pending_drop(s, 0, 0);
}

static void ctx_sync(struct CUctx_st *ctx)
{
	struct fc_stream *s;
	size_t i;

	for_each_stream(s, i) if (s->ctx == ctx) stream_complete(s);
}

/* ------------------------------------------------------------------ */
/* Contexts                                                            */
/* ------------------------------------------------------------------ */

static struct CUctx_st *ctx_current(void)
{
	return fc_ctx_depth ? fc_ctx_stack[fc_ctx_depth - 1] : NULL;
}

static bool ctx_known(const struct CUctx_st *ctx)
{
	int i;

	for (i = 0; i < fc_cfg.ndev; i++)
		if (ctx == &fc_ctxs[i])
			return true;
	return false;
}

/* @ctx may be used for work: it exists and is retained. */
static CUresult ctx_usable(const struct CUctx_st *ctx)
{
	if (!ctx)
		return fc_viol(CUDA_ERROR_INVALID_CONTEXT,
			       "no current context");
	if (!ctx_known(ctx))
		return fc_viol(CUDA_ERROR_INVALID_CONTEXT, "context %p unknown",
			       (const void *)ctx);
	if (!ctx->retains)
		return fc_viol(CUDA_ERROR_CONTEXT_IS_DESTROYED,
			       "primary context of device %d is released",
			       ctx->dev);
	return CUDA_SUCCESS;
}

/* @ctx, or the current context if @ctx is NULL; it must be usable. */
static CUresult ctx_pick(struct CUctx_st *ctx, struct CUctx_st **out)
{
	CUresult err;

	if (!ctx)
		ctx = ctx_current();
	err = ctx_usable(ctx);
	if (err == CUDA_SUCCESS)
		*out = ctx;
	return err;
}

CUresult fc_ctx_current_dev(int *dev)
{
	struct CUctx_st *ctx = ctx_current();
	CUresult err = ctx_usable(ctx);

	if (err == CUDA_SUCCESS)
		*dev = ctx->dev;
	return err;
}

static CUresult primary_retain(CUcontext *pctx, CUdevice dev)
{
	CUresult err;

	if (!pctx)
		return fc_viol(CUDA_ERROR_INVALID_VALUE, "pctx is NULL");
	err = dev_check(dev);
	if (err != CUDA_SUCCESS)
		return err;
	fc_ctxs[dev].retains++;
	if (!fc_default_streams[dev].ctx) {
		fc_default_streams[dev].ctx = &fc_ctxs[dev];
		fc_default_streams[dev].kind = FC_S_LEGACY;
		fc_default_streams[dev].id = ++fc_stream_ids;
	}
	*pctx = &fc_ctxs[dev];
	return CUDA_SUCCESS;
}

static CUresult primary_release(CUdevice dev)
{
	CUresult err = dev_check(dev);

	if (err != CUDA_SUCCESS)
		return err;
	if (!fc_ctxs[dev].retains)
		return fc_viol(CUDA_ERROR_INVALID_CONTEXT,
			       "device %d: released more often than retained",
			       dev);
	if (--fc_ctxs[dev].retains == 0) {
		ctx_sync(&fc_ctxs[dev]);
		fc_ctxs[dev].gen++;
	}
	return CUDA_SUCCESS;
}

FC_API CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	CUresult err = fc_enter(FC_cuDevicePrimaryCtxRetain);

	if (err == CUDA_SUCCESS)
		err = primary_retain(pctx, dev);
	return fc_leave(err);
}

FC_API CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
	CUresult err = fc_enter(FC_cuDevicePrimaryCtxRelease);

	if (err == CUDA_SUCCESS)
		err = primary_release(dev);
	return fc_leave(err);
}

FC_API CUresult cuCtxGetCurrent(CUcontext *pctx)
{
	CUresult err = fc_enter(FC_cuCtxGetCurrent);

	if (err == CUDA_SUCCESS && !pctx)
		err = fc_viol(CUDA_ERROR_INVALID_VALUE, "pctx is NULL");
	if (err == CUDA_SUCCESS)
		*pctx = ctx_current();
	return fc_leave(err);
}

static CUresult ctx_set_current(struct CUctx_st *ctx)
{
	CUresult err;

	if (!ctx) {
		if (fc_ctx_depth)
			fc_ctx_depth--;
		return CUDA_SUCCESS;
	}
	err = ctx_usable(ctx);
	if (err != CUDA_SUCCESS)
		return err;
	if (!fc_ctx_depth)
		fc_ctx_depth = 1;
	fc_ctx_stack[fc_ctx_depth - 1] = ctx;
	return CUDA_SUCCESS;
}

FC_API CUresult cuCtxSetCurrent(CUcontext ctx)
{
	CUresult err = fc_enter(FC_cuCtxSetCurrent);

	if (err == CUDA_SUCCESS)
		err = ctx_set_current(ctx);
	return fc_leave(err);
}

static CUresult ctx_push(struct CUctx_st *ctx)
{
	CUresult err = ctx_usable(ctx);

	if (err != CUDA_SUCCESS)
		return err;
	if (fc_ctx_depth == FC_CTX_STACK)
		return fc_viol(CUDA_ERROR_OUT_OF_MEMORY,
			       "context stack deeper than %d (push without "
			       "pop?)",
			       FC_CTX_STACK);
	fc_ctx_stack[fc_ctx_depth++] = ctx;
	return CUDA_SUCCESS;
}

FC_API CUresult cuCtxPushCurrent(CUcontext ctx)
{
	CUresult err = fc_enter(FC_cuCtxPushCurrent);

	if (err == CUDA_SUCCESS)
		err = ctx_push(ctx);
	return fc_leave(err);
}

FC_API CUresult cuCtxPopCurrent(CUcontext *pctx)
{
	CUresult err = fc_enter(FC_cuCtxPopCurrent);

	if (err == CUDA_SUCCESS && !fc_ctx_depth)
		err = fc_viol(CUDA_ERROR_INVALID_CONTEXT,
			      "context stack is empty");
	if (err != CUDA_SUCCESS)
		return fc_leave(err);
	fc_ctx_depth--;
	if (pctx)
		*pctx = fc_ctx_stack[fc_ctx_depth];
	return fc_leave(CUDA_SUCCESS);
}

static CUresult ctx_get_device(CUdevice *dev, struct CUctx_st *ctx)
{
	CUresult err;

	if (!dev)
		return fc_viol(CUDA_ERROR_INVALID_VALUE, "device is NULL");
	err = ctx_pick(ctx, &ctx);
	if (err == CUDA_SUCCESS)
		*dev = ctx->dev;
	return err;
}

FC_API CUresult cuCtxGetDevice(CUdevice *dev)
{
	CUresult err = fc_enter(FC_cuCtxGetDevice);

	if (err == CUDA_SUCCESS)
		err = ctx_get_device(dev, NULL);
	return fc_leave(err);
}

FC_API CUresult cuCtxGetDevice_v2(CUdevice *dev, CUcontext ctx)
{
	CUresult err = fc_enter(FC_cuCtxGetDevice);

	if (err == CUDA_SUCCESS)
		err = ctx_get_device(dev, ctx);
	return fc_leave(err);
}

/* ------------------------------------------------------------------ */
/* Streams and events                                                  */
/* ------------------------------------------------------------------ */

static CUresult ctx_synchronize(struct CUctx_st *ctx)
{
	CUresult err = ctx_pick(ctx, &ctx);

	if (err == CUDA_SUCCESS)
		err = fc_capture_unsafe("cuCtxSynchronize");
	if (err == CUDA_SUCCESS)
		ctx_sync(ctx);
	return err;
}

FC_API CUresult cuCtxSynchronize(void)
{
	CUresult err = fc_enter(FC_cuCtxSynchronize);

	if (err == CUDA_SUCCESS)
		err = ctx_synchronize(NULL);
	return fc_leave(err);
}

FC_API CUresult cuCtxSynchronize_v2(CUcontext ctx)
{
	CUresult err = fc_enter(FC_cuCtxSynchronize);

	if (err == CUDA_SUCCESS)
		err = ctx_synchronize(ctx);
	return fc_leave(err);
}

static bool stream_is_default(CUstream h)
{
	return !h || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD;
}

/* The calling thread's per-thread default stream of @ctx, made on use. */
static struct fc_stream *ptds_of(struct CUctx_st *ctx)
{
	struct fc_stream *s = fc_ptds[ctx->dev];

	if (!s) {
		s = calloc(1, sizeof(*s));
		if (!s)
			return NULL;
		s->o.key = (uintptr_t)CU_STREAM_PER_THREAD;
		if (fc_vec_insert(&fc_ptds_all, &s->o)) {
			free(s);
			return NULL;
		}
		fc_ptds[ctx->dev] = s;
	}
	if (s->ctx != ctx || s->gen != ctx->gen) {
		s->ctx = ctx;
		s->gen = ctx->gen;
		s->kind = FC_S_PTDS;
		s->id = ++fc_stream_ids;
		s->seq = 0;
		clock_clear(&s->clock);
	}
	return s;
}

/* Resolve @h without complaints; NULL if it names no live stream. */
static struct fc_stream *stream_find(CUstream h)
{
	struct CUctx_st *ctx = ctx_current();

	if (stream_is_default(h)) {
		if (!ctx || !ctx_known(ctx) || !ctx->retains)
			return NULL;
		if (h == CU_STREAM_PER_THREAD)
			return ptds_of(ctx);
		return &fc_default_streams[ctx->dev];
	}
	return stream_of(fc_vec_find(&fc_streams, (uintptr_t)h));
}

static CUresult obj_alive(const struct CUctx_st *ctx, unsigned long gen,
			  const char *what)
{
	if (!ctx->retains || gen != ctx->gen)
		return fc_viol(CUDA_ERROR_CONTEXT_IS_DESTROYED,
			       "%s belongs to a released context", what);
	return CUDA_SUCCESS;
}

static CUresult stream_get(CUstream h, struct fc_stream **out)
{
	struct fc_stream *s = NULL;
	CUresult err;

	if (stream_is_default(h)) {
		err = ctx_usable(ctx_current());
		if (err != CUDA_SUCCESS)
			return err;
		*out = stream_find(h);
		return *out ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
	}
	s = stream_find(h);
	if (!s)
		return fc_viol(CUDA_ERROR_INVALID_HANDLE,
			       "stream %p unknown or destroyed", (void *)h);
	err = obj_alive(s->ctx, s->gen, "stream");
	if (err == CUDA_SUCCESS)
		*out = s;
	return err;
}

static CUresult event_get(CUevent h, struct fc_event **out)
{
	struct fc_event *e = event_of(fc_vec_find(&fc_events, (uintptr_t)h));
	CUresult err;

	if (!e)
		return fc_viol(CUDA_ERROR_INVALID_HANDLE,
			       "event %p unknown or destroyed", (void *)h);
	err = obj_alive(e->ctx, e->gen, "event");
	if (err == CUDA_SUCCESS)
		*out = e;
	return err;
}

static CUresult stream_create(CUstream *ph, unsigned int flags)
{
	struct CUctx_st *ctx = ctx_current();
	struct fc_stream *s = NULL;
	CUresult err;

	if (!ph)
		return fc_viol(CUDA_ERROR_INVALID_VALUE, "phStream is NULL");
	if (flags & ~(unsigned int)CU_STREAM_NON_BLOCKING)
		return fc_viol(CUDA_ERROR_INVALID_VALUE, "flags %#x unknown",
			       flags);
	err = ctx_usable(ctx);
	if (err != CUDA_SUCCESS)
		return err;
	s = calloc(1, sizeof(*s));
	if (!s)
		return CUDA_ERROR_OUT_OF_MEMORY;
	s->o.key = token_new(FC_STREAM_TAG);
	s->ctx = ctx;
	s->gen = ctx->gen;
	s->kind = FC_S_USER;
	s->nonblocking = flags & CU_STREAM_NON_BLOCKING;
	s->id = ++fc_stream_ids;
	if (fc_vec_insert(&fc_streams, &s->o)) {
		free(s);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*ph = (CUstream)(uintptr_t)s->o.key;
	return CUDA_SUCCESS;
}

FC_API CUresult cuStreamCreate(CUstream *ph, unsigned int flags)
{
	CUresult err = fc_enter(FC_cuStreamCreate);

	if (err == CUDA_SUCCESS)
		err = stream_create(ph, flags);
	return fc_leave(err);
}

/* Destroying frees the stream even when its context is gone. */
static CUresult stream_destroy(CUstream h)
{
	struct fc_stream *s = NULL;
	CUresult err;

	if (stream_is_default(h))
		return fc_viol(CUDA_ERROR_INVALID_HANDLE,
			       "the default stream cannot be destroyed");
	s = stream_find(h);
	if (!s)
		return fc_viol(CUDA_ERROR_INVALID_HANDLE,
			       "stream %p unknown or destroyed", (void *)h);
	err = obj_alive(s->ctx, s->gen, "stream");
	stream_complete(s);
	if (s->cap) {
		capture_invalidate(s->cap);
		if (s->cap->origin == s)
			capture_free(s->cap);
	}
	fc_vec_remove_key(&fc_streams, s->o.key);
	clock_clear(&s->clock);
	free(s);
	return err;
}

FC_API CUresult cuStreamDestroy(CUstream h)
{
	CUresult err = fc_enter(FC_cuStreamDestroy);

	if (err == CUDA_SUCCESS)
		err = stream_destroy(h);
	return fc_leave(err);
}

/* Synchronising with or querying a capturing stream is not allowed. */
static CUresult capturing_refused(struct fc_stream *s, const char *what)
{
	if (!s->cap)
		return CUDA_SUCCESS;
	capture_invalidate(s->cap);
	return fc_viol(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
		       "%s on a capturing stream (capture invalidated)", what);
}

FC_API CUresult cuStreamSynchronize(CUstream h)
{
	CUresult err = fc_enter(FC_cuStreamSynchronize);
	struct fc_stream *s = NULL;

	if (err == CUDA_SUCCESS)
		err = stream_get(h, &s);
	if (err == CUDA_SUCCESS)
		err = capturing_refused(s, "cuStreamSynchronize");
	if (err == CUDA_SUCCESS)
		err = fc_capture_unsafe("cuStreamSynchronize");
	if (err == CUDA_SUCCESS)
		err = stream_work_check(s);
	if (err == CUDA_SUCCESS)
		stream_complete(s);
	return fc_leave(err);
}

FC_API CUresult cuStreamQuery(CUstream h)
{
	CUresult err = fc_enter(FC_cuStreamQuery);
	struct fc_stream *s = NULL;

	if (err == CUDA_SUCCESS)
		err = stream_get(h, &s);
	if (err == CUDA_SUCCESS)
		err = capturing_refused(s, "cuStreamQuery");
	if (err == CUDA_SUCCESS)
		err = stream_work_check(s);
	if (err == CUDA_SUCCESS && s->busy)
		err = CUDA_ERROR_NOT_READY;
	return fc_leave(err);
}

/*
 * A capturing stream may wait only for events recorded in its own capture;
 * a stream outside any capture that waits for a captured event joins that
 * capture.  Outside captures the waiter is ordered after what the event
 * saw (its clock).
 */
static CUresult wait_captured(struct fc_stream *s, struct fc_event *e)
{
	if (s->cap) {
		if (e->cap == s->cap || (!e->cap && !e->recorded))
			return CUDA_SUCCESS;
		capture_invalidate(s->cap);
		if (e->cap) {
			capture_invalidate(e->cap);
			return fc_viol(CUDA_ERROR_STREAM_CAPTURE_MERGE,
				       "waiting for an event of another "
				       "capture (captures invalidated)");
		}
		return fc_viol(CUDA_ERROR_STREAM_CAPTURE_ISOLATION,
			       "capturing stream %p waits for an event "
			       "recorded outside the capture (capture "
			       "invalidated)",
			       (void *)(uintptr_t)s->o.key);
	}
	if (e->cap) {
		if (e->cap->invalid)
			return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
		s->cap = e->cap; /* joins the capture */
		return CUDA_SUCCESS;
	}
	if (e->recorded && clock_merge(&s->clock, &e->clock))
		return CUDA_ERROR_OUT_OF_MEMORY;
	return CUDA_SUCCESS;
}

static CUresult stream_wait_event(CUstream h, CUevent ev, unsigned int flags)
{
	struct fc_stream *s = NULL;
	struct fc_event *e = NULL;
	CUresult err;

	if (flags & ~(unsigned int)CU_EVENT_WAIT_EXTERNAL)
		return fc_viol(CUDA_ERROR_INVALID_VALUE, "flags %#x unknown",
			       flags);
	err = stream_get(h, &s);
	if (err == CUDA_SUCCESS)
		err = event_get(ev, &e);
	if (err == CUDA_SUCCESS)
		err = stream_work_check(s);
	if (err == CUDA_SUCCESS)
		err = wait_captured(s, e);
	return err;
}

FC_API CUresult cuStreamWaitEvent(CUstream h, CUevent ev, unsigned int flags)
{
	CUresult err = fc_enter(FC_cuStreamWaitEvent);

	if (err == CUDA_SUCCESS)
		err = stream_wait_event(h, ev, flags);
	return fc_leave(err);
}

static CUresult event_create(CUevent *ph, unsigned int flags)
{
	struct CUctx_st *ctx = ctx_current();
	struct fc_event *e = NULL;
	CUresult err;

	if (!ph)
		return fc_viol(CUDA_ERROR_INVALID_VALUE, "phEvent is NULL");
	if ((flags & ~(unsigned int)FC_EVENT_FLAGS) ||
	    ((flags & CU_EVENT_INTERPROCESS) &&
	     !(flags & CU_EVENT_DISABLE_TIMING)))
		return fc_viol(CUDA_ERROR_INVALID_VALUE, "flags %#x invalid",
			       flags);
	err = ctx_usable(ctx);
	if (err != CUDA_SUCCESS)
		return err;
	e = calloc(1, sizeof(*e));
	if (!e)
		return CUDA_ERROR_OUT_OF_MEMORY;
	e->o.key = token_new(FC_EVENT_TAG);
	e->ctx = ctx;
	e->gen = ctx->gen;
	if (fc_vec_insert(&fc_events, &e->o)) {
		free(e);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*ph = (CUevent)(uintptr_t)e->o.key;
	return CUDA_SUCCESS;
}

FC_API CUresult cuEventCreate(CUevent *ph, unsigned int flags)
{
	CUresult err = fc_enter(FC_cuEventCreate);

	if (err == CUDA_SUCCESS)
		err = event_create(ph, flags);
	return fc_leave(err);
}

/*
 * On a capturing stream the record is captured (the event joins the
 * capture); otherwise the event takes the stream's clock and its own work
 * so far, pending while the stream is held.
 */
static CUresult event_record(CUevent ev, CUstream h)
{
	struct fc_stream *s = NULL;
	struct fc_event *e = NULL;
	CUresult err;

	err = event_get(ev, &e);
	if (err == CUDA_SUCCESS)
		err = stream_get(h, &s);
	if (err == CUDA_SUCCESS && s->ctx != e->ctx)
		err = fc_viol(CUDA_ERROR_INVALID_HANDLE,
			      "event of device %d's context recorded on a "
			      "stream of device %d's",
			      e->ctx->dev, s->ctx->dev);
	if (err == CUDA_SUCCESS)
		err = stream_work_check(s);
	if (err != CUDA_SUCCESS)
		return err;
	e->recorded = true;
	e->cap = s->cap;
	if (s->cap)
		return CUDA_SUCCESS;
	clock_clear(&e->clock);
	if (clock_merge(&e->clock, &s->clock) ||
	    clock_set(&e->clock, s->id, s->seq))
		return CUDA_ERROR_OUT_OF_MEMORY;
	e->pending = s->busy;
	e->stream = s->busy ? s : NULL;
	return CUDA_SUCCESS;
}

FC_API CUresult cuEventRecord(CUevent ev, CUstream h)
{
	CUresult err = fc_enter(FC_cuEventRecord);

	if (err == CUDA_SUCCESS)
		err = event_record(ev, h);
	return fc_leave(err);
}

/* A captured event has no work to query or wait for until launched. */
static CUresult captured_refused(struct fc_event *e, const char *what)
{
	if (!e->cap)
		return CUDA_SUCCESS;
	capture_invalidate(e->cap);
	return fc_viol(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
		       "%s on an event recorded in a capture (capture "
		       "invalidated)",
		       what);
}

FC_API CUresult cuEventQuery(CUevent ev)
{
	CUresult err = fc_enter(FC_cuEventQuery);
	struct fc_event *e = NULL;

	if (err == CUDA_SUCCESS)
		err = event_get(ev, &e);
	if (err == CUDA_SUCCESS)
		err = captured_refused(e, "cuEventQuery");
	if (err == CUDA_SUCCESS && e->pending)
		err = CUDA_ERROR_NOT_READY;
	return fc_leave(err);
}

FC_API CUresult cuEventSynchronize(CUevent ev)
{
	CUresult err = fc_enter(FC_cuEventSynchronize);
	struct fc_event *e = NULL;

	if (err == CUDA_SUCCESS)
		err = event_get(ev, &e);
	if (err == CUDA_SUCCESS)
		err = captured_refused(e, "cuEventSynchronize");
	if (err == CUDA_SUCCESS)
		err = fc_capture_unsafe("cuEventSynchronize");
	if (err == CUDA_SUCCESS && e->pending)
		stream_complete(e->stream);
	return fc_leave(err);
}

/* Destroying frees the event even when its context is gone. */
static CUresult event_destroy(CUevent ev)
{
	struct fc_event *e = event_of(fc_vec_find(&fc_events, (uintptr_t)ev));
	CUresult err;

	if (!e)
		return fc_viol(CUDA_ERROR_INVALID_HANDLE,
			       "event %p unknown or destroyed", (void *)ev);
	err = obj_alive(e->ctx, e->gen, "event");
	fc_vec_remove_key(&fc_events, e->o.key);
	clock_clear(&e->clock);
	free(e);
	return err;
}

FC_API CUresult cuEventDestroy(CUevent ev)
{
	CUresult err = fc_enter(FC_cuEventDestroy);

	if (err == CUDA_SUCCESS)
		err = event_destroy(ev);
	return fc_leave(err);
}

/* ------------------------------------------------------------------ */
/* Stream capture                                                      */
/* ------------------------------------------------------------------ */

static CUresult begin_capture(CUstream h, CUstreamCaptureMode mode)
{
	struct fc_capture *c;
	struct fc_stream *s = NULL;
	CUresult err;

	if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL &&
	    mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
	    mode != CU_STREAM_CAPTURE_MODE_RELAXED)
		return fc_viol(CUDA_ERROR_INVALID_VALUE, "mode %d unknown",
			       (int)mode);
	err = stream_get(h, &s);
	if (err != CUDA_SUCCESS)
		return err;
	if (s->kind == FC_S_LEGACY)
		return fc_viol(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
			       "the legacy default stream cannot capture");
	if (s->cap)
		return fc_viol(CUDA_ERROR_ILLEGAL_STATE,
			       "stream %p captures already",
			       (void *)(uintptr_t)s->o.key);
	c = calloc(1, sizeof(*c));
	if (!c)
		return CUDA_ERROR_OUT_OF_MEMORY;
	c->id = ++fc_capture_ids;
	c->ctx = s->ctx;
	c->origin = s;
	c->mode = mode;
	c->thread = pthread_self();
	c->next = fc_captures;
	fc_captures = c;
	s->cap = c;
	return CUDA_SUCCESS;
}

FC_API CUresult cuStreamBeginCapture_v2(CUstream h, CUstreamCaptureMode mode)
{
	CUresult err = fc_enter(FC_cuStreamBeginCapture);

	if (err == CUDA_SUCCESS)
		err = begin_capture(h, mode);
	return fc_leave(err);
}

static CUresult end_capture(CUstream h, CUgraph *graph)
{
	struct fc_stream *s = NULL;
	struct fc_capture *c;
	struct fc_obj *g;
	CUresult err;

	if (!graph)
		return fc_viol(CUDA_ERROR_INVALID_VALUE, "phGraph is NULL");
	*graph = NULL;
	err = stream_get(h, &s);
	if (err != CUDA_SUCCESS)
		return err;
	c = s->cap;
	if (!c)
		return fc_viol(CUDA_ERROR_ILLEGAL_STATE,
			       "stream %p is not capturing",
			       (void *)(uintptr_t)s->o.key);
	if (c->origin != s)
		return fc_viol(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED,
			       "stream %p joined a capture it did not begin",
			       (void *)(uintptr_t)s->o.key);
	if (c->mode != CU_STREAM_CAPTURE_MODE_RELAXED &&
	    !pthread_equal(c->thread, pthread_self()))
		return fc_viol(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD,
			       "capture ended by another thread than began "
			       "it");
	if (c->invalid) {
		capture_free(c);
		return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
	}
	capture_free(c);
	g = calloc(1, sizeof(*g));
	if (!g)
		return CUDA_ERROR_OUT_OF_MEMORY;
	g->key = token_new(FC_GRAPH_TAG);
	if (fc_vec_insert(&fc_graphs, g)) {
		free(g);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*graph = (CUgraph)(uintptr_t)g->key;
	return CUDA_SUCCESS;
}

FC_API CUresult cuStreamEndCapture(CUstream h, CUgraph *graph)
{
	CUresult err = fc_enter(FC_cuStreamEndCapture);

	if (err == CUDA_SUCCESS)
		err = end_capture(h, graph);
	return fc_leave(err);
}

static CUresult capture_info(CUstream h, CUstreamCaptureStatus *status,
			     cuuint64_t *id, CUgraph *graph,
			     const CUgraphNode **deps, size_t *ndeps)
{
	struct fc_stream *s = NULL;
	CUresult err;

	if (!status)
		return fc_viol(CUDA_ERROR_INVALID_VALUE,
			       "captureStatus is NULL");
	err = stream_get(h, &s);
	if (err != CUDA_SUCCESS)
		return err;
	*status = !s->cap	  ? CU_STREAM_CAPTURE_STATUS_NONE :
		  s->cap->invalid ? CU_STREAM_CAPTURE_STATUS_INVALIDATED :
				    CU_STREAM_CAPTURE_STATUS_ACTIVE;
	if (id && s->cap)
		*id = s->cap->id;
	if (graph)
		*graph = NULL; /* the graph being built is not modelled */
	if (deps)
		*deps = NULL;
	if (ndeps)
		*ndeps = 0;
	return CUDA_SUCCESS;
}

FC_API CUresult cuStreamIsCapturing(CUstream h, CUstreamCaptureStatus *status)
{
	CUresult err = fc_enter(FC_cuStreamIsCapturing);

	if (err == CUDA_SUCCESS)
		err = capture_info(h, status, NULL, NULL, NULL, NULL);
	return fc_leave(err);
}

FC_API CUresult cuStreamGetCaptureInfo_v2(CUstream h,
					  CUstreamCaptureStatus *status,
					  cuuint64_t *id, CUgraph *graph,
					  const CUgraphNode **deps,
					  size_t *ndeps)
{
	CUresult err = fc_enter(FC_cuStreamGetCaptureInfo);

	if (err == CUDA_SUCCESS)
		err = capture_info(h, status, id, graph, deps, ndeps);
	return fc_leave(err);
}

FC_API CUresult cuStreamGetCaptureInfo_v3(CUstream h,
					  CUstreamCaptureStatus *status,
					  cuuint64_t *id, CUgraph *graph,
					  const CUgraphNode **deps,
					  const CUgraphEdgeData **edges,
					  size_t *ndeps)
{
	CUresult err = fc_enter(FC_cuStreamGetCaptureInfo);

	if (err == CUDA_SUCCESS)
		err = capture_info(h, status, id, graph, deps, ndeps);
	if (err == CUDA_SUCCESS && edges)
		*edges = NULL;
	return fc_leave(err);
}

FC_API CUresult cuGraphDestroy(CUgraph graph)
{
	CUresult err = fc_enter(FC_cuGraphDestroy);
	struct fc_obj *g = NULL;

	if (err == CUDA_SUCCESS) {
		g = fc_vec_find(&fc_graphs, (uintptr_t)graph);
		if (!g)
			err = fc_viol(CUDA_ERROR_INVALID_VALUE,
				      "graph %p unknown or destroyed",
				      (void *)graph);
	}
	if (err == CUDA_SUCCESS) {
		fc_vec_remove_key(&fc_graphs, g->key);
		free(g);
	}
	return fc_leave(err);
}

FC_API CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
	CUresult err = fc_enter(FC_cuThreadExchangeStreamCaptureMode);
	CUstreamCaptureMode old = fc_thread_mode;

	if (err == CUDA_SUCCESS && !mode)
		err = fc_viol(CUDA_ERROR_INVALID_VALUE, "mode is NULL");
	if (err == CUDA_SUCCESS && *mode != CU_STREAM_CAPTURE_MODE_GLOBAL &&
	    *mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
	    *mode != CU_STREAM_CAPTURE_MODE_RELAXED)
		err = fc_viol(CUDA_ERROR_INVALID_VALUE, "mode %d unknown",
			      (int)*mode);
	if (err == CUDA_SUCCESS) {
		fc_thread_mode = *mode;
		*mode = old;
	}
	return fc_leave(err);
}

/* ------------------------------------------------------------------ */
/* Work                                                                */
/* ------------------------------------------------------------------ */

/* A synchronous copy: work on the current context's legacy stream. */
CUresult fc_work_sync_copy(uint64_t dst, uint64_t src, size_t n)
{
	struct fc_stream *s = NULL;
	CUresult err = stream_get(CU_STREAM_LEGACY, &s);

	if (err == CUDA_SUCCESS)
		err = stream_work_check(s);
	if (err == CUDA_SUCCESS && dst)
		err = work_access(s, dst, n, true, false);
	if (err == CUDA_SUCCESS && src)
		err = work_access(s, src, n, false, false);
	return err;
}

static CUresult launch(CUstream h, uint64_t va, uint64_t size, bool write)
{
	struct fc_stream *s = NULL;
	CUresult err;

	err = stream_get(h, &s);
	if (err == CUDA_SUCCESS && s->ctx != ctx_current())
		err = fc_viol(CUDA_ERROR_INVALID_CONTEXT,
			      "stream %p belongs to device %d's context, not "
			      "the current one",
			      (void *)h, s->ctx->dev);
	if (err == CUDA_SUCCESS)
		err = stream_work_check(s);
	if (err == CUDA_SUCCESS)
		err = fc_dev_range_check(va, size, write, s->ctx->dev);
	if (err == CUDA_SUCCESS && !s->cap) /* captured: runs later */
		err = work_access(s, va, size, write, true);
	return err;
}

FC_API int fakecuda_launch(void *stream, unsigned long long addr,
			   unsigned long long size, int write)
{
	CUresult err = fc_enter(FC_fakecuda_launch);

	if (err == CUDA_SUCCESS)
		err = launch((CUstream)stream, addr, size, write);
	return (int)fc_leave(err);
}

/* ------------------------------------------------------------------ */
/* Control interface                                                   */
/* ------------------------------------------------------------------ */

FC_API int fakecuda_stream_hold(void *stream, int busy)
{
	struct fc_stream *s = NULL;

	fc_lock();
	s = fc_inited ? stream_find((CUstream)stream) : NULL;
	if (s && busy)
		s->busy = true;
	else if (s)
		stream_complete(s);
	fc_unlock();
	return s ? 0 : -1;
}

FC_API unsigned long fakecuda_captures_invalidated(void)
{
	unsigned long n;

	fc_lock();
	n = fc_ncap_invalidated;
	fc_unlock();
	return n;
}

FC_API unsigned long fakecuda_live_graphs(void)
{
	unsigned long n;

	fc_lock();
	n = fc_graphs.n;
	fc_unlock();
	return n;
}

FC_API unsigned long fakecuda_live_primary_retains(void)
{
	unsigned long n = 0;
	int i;

	fc_lock();
	for (i = 0; i < FC_MAX_DEV; i++)
		n += fc_ctxs[i].retains;
	fc_unlock();
	return n;
}

FC_API unsigned long fakecuda_live_streams(void)
{
	unsigned long n;

	fc_lock();
	n = fc_streams.n;
	fc_unlock();
	return n;
}

FC_API unsigned long fakecuda_live_events(void)
{
	unsigned long n;

	fc_lock();
	n = fc_events.n;
	fc_unlock();
	return n;
}
