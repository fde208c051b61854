// SPDX-License-Identifier: MIT
/*
 * fakecuda-copy.c - synchronous copies and memset of the fake driver
 *
 * cuMemsetD8, cuMemcpyHtoD/DtoH/DtoD and cuMemcpy (unified addressing: an
 * address inside a reservation is the device's, any other the host's).
 * Each needs a usable current context, and device ranges mapped without a
 * hole with the rights the copy needs for the context's device
 * (fc_dev_range_check()); it is work on the legacy stream of the context
 * (fc_work_sync_copy()).  Device bytes are reached through the alias of
 * the handle mapped at each address (fc_dev_alias()), never through the
 * device address itself, which faults on the host as on a GPU.
 *
 * Invariants: a copy moves nothing unless every check passed; device to
 * device goes through a bounce buffer, so the ranges may overlap.
 *
 * Locking: all of it runs under fc_mutex (see fakecuda-internal.h).
 */
#include <stdlib.h>
#include <string.h>

#include "fakecuda-internal.h"
#include "fakecuda.h"

/*
 * Common checks of a copy of @n bytes: a usable current context, a host
 * pointer if there is one, and the device ranges @dst (written) and @src
 * (read), each skipped when 0.
 */
static CUresult copy_check(uint64_t dst, uint64_t src, const void *host,
			   bool has_host, size_t n)
{
	CUresult err;
	int dev = 0;

	err = fc_ctx_current_dev(&dev);
	if (err != CUDA_SUCCESS || !n)
		return err;
	if (has_host && !host)
		return fc_viol(CUDA_ERROR_INVALID_VALUE,
			       "host pointer is NULL");
	if (dst)
		err = fc_dev_range_check(dst, n, true, dev);
	if (err == CUDA_SUCCESS && src)
		err = fc_dev_range_check(src, n, false, dev);
	if (err == CUDA_SUCCESS)
		err = fc_work_sync_copy(dst, src, n);
	return err;
}

enum fc_xfer { FC_TO_DEV, FC_FROM_DEV, FC_SET };

/*
 * Move @n bytes between the checked device range at @va and @buf (or set
 * them to *@buf with FC_SET), one mapping at a time, through the aliases.
 */
static void dev_xfer(uint64_t va, unsigned char *buf, size_t n,
		     enum fc_xfer how)
{
	while (n) {
		size_t len = 0;
		unsigned char *at = fc_dev_alias(va, &len);

		if (len > n)
			len = n;
		if (how == FC_TO_DEV)
			memcpy(at, buf, len);
		else if (how == FC_FROM_DEV)
			memcpy(buf, at, len);
		else
			memset(at, *buf, len);
		va += len;
		n -= len;
		if (how != FC_SET)
			buf += len;
	}
}

/* Device to device through a bounce buffer: the ranges may overlap. */
static CUresult dev_copy(uint64_t dst, uint64_t src, size_t n)
{
	unsigned char *tmp = malloc(n);

	if (!tmp)
		return CUDA_ERROR_OUT_OF_MEMORY;
	dev_xfer(src, tmp, n, FC_FROM_DEV);
	dev_xfer(dst, tmp, n, FC_TO_DEV);
	free(tmp);
	return CUDA_SUCCESS;
}

FC_API CUresult cuMemsetD8(CUdeviceptr dst, unsigned char uc, size_t n)
{
	CUresult err = fc_enter(FC_cuMemsetD8);

	if (err == CUDA_SUCCESS && !dst)
		err = fc_viol(CUDA_ERROR_INVALID_VALUE, "dstDevice is 0");
	if (err == CUDA_SUCCESS)
		err = copy_check(dst, 0, NULL, false, n);
	if (err == CUDA_SUCCESS && n)
		dev_xfer(dst, &uc, n, FC_SET);
	return fc_leave(err);
}

FC_API CUresult cuMemcpyHtoD(CUdeviceptr dst, const void *src, size_t n)
{
	CUresult err = fc_enter(FC_cuMemcpyHtoD);

	if (err == CUDA_SUCCESS && !dst)
		err = fc_viol(CUDA_ERROR_INVALID_VALUE, "dstDevice is 0");
	if (err == CUDA_SUCCESS)
		err = copy_check(dst, 0, src, true, n);
	if (err == CUDA_SUCCESS && n)
		dev_xfer(dst, (unsigned char *)(uintptr_t)src, n, FC_TO_DEV);
	return fc_leave(err);
}

FC_API CUresult cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t n)
{
	CUresult err = fc_enter(FC_cuMemcpyDtoH);

	if (err == CUDA_SUCCESS && !src)
		err = fc_viol(CUDA_ERROR_INVALID_VALUE, "srcDevice is 0");
	if (err == CUDA_SUCCESS)
		err = copy_check(0, src, dst, true, n);
	if (err == CUDA_SUCCESS && n)
		dev_xfer(src, dst, n, FC_FROM_DEV);
	return fc_leave(err);
}

FC_API CUresult cuMemcpyDtoD(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	CUresult err = fc_enter(FC_cuMemcpyDtoD);

	if (err == CUDA_SUCCESS && (!dst || !src))
		err = fc_viol(CUDA_ERROR_INVALID_VALUE, "device pointer is 0");
	if (err == CUDA_SUCCESS)
		err = copy_check(dst, src, NULL, false, n);
	if (err == CUDA_SUCCESS && n)
		err = dev_copy(dst, src, n);
	return fc_leave(err);
}

static CUresult mem_copy(uint64_t dst, uint64_t src, size_t n)
{
	bool ddev = fc_dev_addr(dst), sdev = fc_dev_addr(src);
	CUresult err;

	if (!dst || !src)
		return fc_viol(CUDA_ERROR_INVALID_VALUE, "pointer is 0");
	err = copy_check(ddev ? dst : 0, sdev ? src : 0, NULL, false, n);
	if (err != CUDA_SUCCESS || !n)
		return err;
	if (ddev && sdev)
		return dev_copy(dst, src, n);
	if (ddev)
		dev_xfer(dst, fc_va_ptr(src), n, FC_TO_DEV);
	else if (sdev)
		dev_xfer(src, fc_va_ptr(dst), n, FC_FROM_DEV);
	else
		memmove(fc_va_ptr(dst), fc_va_ptr(src), n);
	return CUDA_SUCCESS;
}

FC_API CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	CUresult err = fc_enter(FC_cuMemcpy);

	if (err == CUDA_SUCCESS)
		err = mem_copy(dst, src, n);
	return fc_leave(err);
}
