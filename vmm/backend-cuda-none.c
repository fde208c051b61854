// SPDX-License-Identifier: MIT
/*
 * vmm/backend-cuda-none.c - the cuda backend when built without CUDA headers
 *
 * Built instead of backend-cuda.c when $(CUDA_HOME)/include/cuda.h is
 * missing: the backend exists, reports itself unavailable, and opening it
 * fails with a message saying why.  No state, no locking.
 */
#include <errno.h>

#include "../lib/util.h"
#include "backend.h"

bool vmm_cuda_available(void)
{
	return false;
}

static int none_open(struct vmm_backend *be)
{
	return sa_error(-ENODEV,
			"cuda: libstalloc was built without the CUDA headers "
			"(set CUDA_HOME and rebuild); device %d unavailable",
			be->device);
}

const struct vmm_backend_ops vmm_cuda_ops = {
	.name = "cuda",
	.open = none_open,
};
