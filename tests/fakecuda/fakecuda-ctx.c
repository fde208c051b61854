// SPDX-License-Identifier: MIT
/*
 * fakecuda-ctx.c - devices, primary contexts, streams and events of the fake
 *
 * Devices are ordinals 0..fc_cfg.ndev-1.  Each has one primary context, a
 * static struct CUctx_st whose address is the stable CUcontext handed out;
 * it is active while retained.  Its generation counter (gen) is bumped each
 * time the last retain goes, so streams and events created under an earlier
 * activation are recognised as belonging to a destroyed context.
 *
 * Streams and events are registered objects; the CUstream/CUevent values
 * are opaque tokens (tag | sequence number, never valid addresses), so a
 * destroyed handle is never confused with a new one.  NULL, CU_STREAM_LEGACY
 * and CU_STREAM_PER_THREAD name the default stream of the current context's
 * device.  Work is instantaneous except on a stream a test holds busy with
 * fakecuda_stream_hold(): events recorded there stay pending until the
 * stream's work completes (stream or context synchronisation, synchronising
 * such an event, destroying the stream or releasing the hold).  Invariant: a
 * pending event points at a registered or default stream.
 *
 * Locking: all of it runs under fc_mutex (see fakecuda-internal.h), except
 * the context stack, which is thread local and so needs no lock.
 */
#include <stdio.h>
#include <stdlib.h>

#include "fakecuda-internal.h"
#include "fakecuda.h"

#define FC_CTX_STACK 32
#define FC_STREAM_TAG 0xf57e000000000000ULL
#define FC_EVENT_TAG 0xfe7e000000000000ULL
#define FC_EVENT_FLAGS                                      \
	(CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | \
	 CU_EVENT_INTERPROCESS)

struct CUctx_st {
	int dev;
	unsigned long retains;
	unsigned long gen;
};

struct fc_stream {
	struct fc_obj o; /* key: the CUstream token */
	struct CUctx_st *ctx;
	unsigned long gen; /* ctx->gen when created */
	bool busy;
};

struct fc_event {
	struct fc_obj o; /* key: the CUevent token */
	struct CUctx_st *ctx;
	unsigned long gen;
	struct fc_stream *stream; /* the stream it waits for if pending */
	bool pending;
};

static struct CUctx_st fc_ctxs[FC_MAX_DEV] = {
	{ .dev = 0 }, { .dev = 1 }, { .dev = 2 }, { .dev = 3 },
	{ .dev = 4 }, { .dev = 5 }, { .dev = 6 }, { .dev = 7 },
};

static struct fc_stream fc_default_streams[FC_MAX_DEV];
static struct fc_vec fc_streams;
static struct fc_vec fc_events;
static uint64_t fc_token_seq;

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
/* Work completion                                                     */
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
}

static void ctx_sync(struct CUctx_st *ctx)
{
	size_t i;

	stream_complete(&fc_default_streams[ctx->dev]);
	for (i = 0; i < fc_streams.n; i++) {
		struct fc_stream *s = stream_of(fc_streams.v[i]);

		if (s->ctx == ctx)
			stream_complete(s);
	}
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

/* Resolve @h without complaints; NULL if it names no live stream. */
static struct fc_stream *stream_find(CUstream h)
{
	struct CUctx_st *ctx = ctx_current();

	if (stream_is_default(h)) {
		if (!ctx || !ctx_known(ctx) || !ctx->retains)
			return NULL;
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
		if (err == CUDA_SUCCESS)
			*out = stream_find(h);
		return err;
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
	fc_vec_remove_key(&fc_streams, s->o.key);
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

FC_API CUresult cuStreamSynchronize(CUstream h)
{
	CUresult err = fc_enter(FC_cuStreamSynchronize);
	struct fc_stream *s = NULL;

	if (err == CUDA_SUCCESS)
		err = stream_get(h, &s);
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
	if (err == CUDA_SUCCESS && s->busy)
		err = CUDA_ERROR_NOT_READY;
	return fc_leave(err);
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

static CUresult event_record(CUevent ev, CUstream h)
{
	struct fc_stream *s = NULL;
	struct fc_event *e = NULL;
	CUresult err;

	err = event_get(ev, &e);
	if (err == CUDA_SUCCESS)
		err = stream_get(h, &s);
	if (err != CUDA_SUCCESS)
		return err;
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

FC_API CUresult cuEventQuery(CUevent ev)
{
	CUresult err = fc_enter(FC_cuEventQuery);
	struct fc_event *e = NULL;

	if (err == CUDA_SUCCESS)
		err = event_get(ev, &e);
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
