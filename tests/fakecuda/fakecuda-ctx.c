// SPDX-License-Identifier: MIT
/*
 * fakecuda-ctx.c - devices and their primary contexts
 *
 * Devices are ordinals 0..fc_cfg.ndev-1.  Each has one primary context, a
 * static struct CUctx_st whose address is the stable CUcontext handed out;
 * it is active while retained.  Its generation counter (gen) is bumped each
 * time the last retain goes, so streams and events created under an earlier
 * activation are recognised as belonging to a destroyed context.  The
 * calling thread's current context is the top of its context stack.
 *
 * Invariants: a context is usable (fc_ctx_usable()) only while retained;
 * releasing the last retain completes the work of its streams first.  The
 * context stack holds at most FC_CTX_STACK entries.
 *
 * Locking: all of it runs under fc_mutex (see fakecuda-internal.h), except
 * the thread-local context stack, which only its own thread touches.
 */
#include <stdio.h>

#include "fakecuda-internal.h"
#include "fakecuda.h"

#define FC_CTX_STACK 32

static struct CUctx_st fc_ctxs[FC_MAX_DEV] = {
	{ .dev = 0 }, { .dev = 1 }, { .dev = 2 }, { .dev = 3 },
	{ .dev = 4 }, { .dev = 5 }, { .dev = 6 }, { .dev = 7 },
};

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
/* Contexts                                                            */
/* ------------------------------------------------------------------ */

struct CUctx_st *fc_ctx_current(void)
{
	return fc_ctx_depth ? fc_ctx_stack[fc_ctx_depth - 1] : NULL;
}

bool fc_ctx_known(const struct CUctx_st *ctx)
{
	int i;

	for (i = 0; i < fc_cfg.ndev; i++)
		if (ctx == &fc_ctxs[i])
			return true;
	return false;
}

/* @ctx may be used for work: it exists and is retained. */
CUresult fc_ctx_usable(const struct CUctx_st *ctx)
{
	if (!ctx)
		return fc_viol(CUDA_ERROR_INVALID_CONTEXT,
			       "no current context");
	if (!fc_ctx_known(ctx))
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
		ctx = fc_ctx_current();
	err = fc_ctx_usable(ctx);
	if (err == CUDA_SUCCESS)
		*out = ctx;
	return err;
}

CUresult fc_ctx_current_dev(int *dev)
{
	struct CUctx_st *ctx = fc_ctx_current();
	CUresult err = fc_ctx_usable(ctx);

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
	fc_stream_legacy_init(&fc_ctxs[dev]);
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
		fc_ctx_sync(&fc_ctxs[dev]);
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
		*pctx = fc_ctx_current();
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
	err = fc_ctx_usable(ctx);
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
	CUresult err = fc_ctx_usable(ctx);

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
static CUresult ctx_synchronize(struct CUctx_st *ctx)
{
	CUresult err = ctx_pick(ctx, &ctx);

	if (err == CUDA_SUCCESS)
		err = fc_capture_check(NULL, NULL);
	if (err == CUDA_SUCCESS)
		fc_ctx_sync(ctx);
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

/* ------------------------------------------------------------------ */
/* Control interface                                                   */
/* ------------------------------------------------------------------ */

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
