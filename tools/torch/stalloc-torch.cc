// SPDX-License-Identifier: MIT
/*
 * tools/torch/stalloc-torch.cc - libstalloc-torch.so, PyTorch's side of the
 * boundary
 *
 * PyTorch's CUDAPluggableAllocator calls C function pointers, but two of
 * its contracts are C++: the graph pool hooks take a MempoolId_t
 * (std::pair of two unsigned long long) and a std::function stream filter
 * by value, and its own allocator reports out of memory by throwing.  This
 * small shim, the only C++ in stalloc, turns them into libstalloc's C API:
 *
 *   stalloc_torch_malloc/free   alloc and free; never returns NULL for a
 *                               non-zero request: out of memory throws
 *                               c10::OutOfMemoryError (Python sees
 *                               torch.OutOfMemoryError "CUDA out of
 *                               memory ...", see c10-error.cc) or, with
 *                               STALLOC_OOM=abort, prints the report and
 *                               aborts
 *   stalloc_torch_begin_allocate_to_pool, _end_allocate_to_pool,
 *   stalloc_torch_release_pool  the graph pool hooks (torch >= 2.3)
 *
 * Invariants: no exception crosses into libstalloc's C frames (the filter
 * is called through a noexcept trampoline); the filter copy lives until
 * libstalloc drops it.  Uses only the public header and libstdc++; no
 * PyTorch header or library at build time.  No locks of its own.
 */
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>

#include <stalloc/stalloc.h>

#include "shim.h"

#define SHIM_API extern "C" __attribute__((visibility("default")))

struct CUstream_st; // cudaStream_t is CUstream_st *

namespace
{

using pool_id = std::pair<unsigned long long, unsigned long long>;
using stream_filter = std::function<bool(CUstream_st *)>;

std::string mib(uint64_t bytes)
{
	char buf[64];

	snprintf(buf, sizeof(buf), "%.2f MiB", (double)bytes / (1 << 20));
	return buf;
}

// What PyTorch's own message says, and stalloc's figures by class.
std::string oom_report(size_t size, int device)
{
	struct stalloc_stats st;
	const char *why = stalloc_last_error();
	std::string msg = "CUDA out of memory (stalloc). Tried to allocate " +
			  mib(size) + " on device " + std::to_string(device);

	memset(&st, 0, sizeof(st));
	if (!stalloc_stats(device, &st))
		msg += ". stalloc: " + mib(st.allocated) + " allocated (" +
		       mib(st.allocated - st.dynamic_bytes) + " planned, " +
		       mib(st.dynamic_bytes) + " dynamic), " +
		       mib(st.reserved) + " reserved, " +
		       mib(st.reserved > st.allocated ?
				   st.reserved - st.allocated :
				   0) +
		       " cached; peak reserved " + mib(st.reserved_peak);
	if (why && *why)
		msg += std::string(" (") + why + ")";
	return msg;
}

int call_filter(void *ctx, void *stream) noexcept
{
	try {
		return (*static_cast<stream_filter *>(ctx))(
			static_cast<CUstream_st *>(stream));
	} catch (...) {
		return 0; // a filter that fails takes nothing into the pool
	}
}

void drop_filter(void *ctx) noexcept
{
	delete static_cast<stream_filter *>(ctx);
}

void check(int err, const char *what, int device, const pool_id &id)
{
	if (err)
		throw std::runtime_error(
			std::string("stalloc: ") + what + " (device " +
			std::to_string(device) + ", pool " +
			std::to_string(id.first) + "/" +
			std::to_string(id.second) + "): " + stalloc_strerror(err));
}

} // namespace

SHIM_API void *stalloc_torch_malloc(size_t size, int device, void *stream)
{
	void *p = stalloc_malloc(size, device, stream);
	const char *how;

	if (p || !size)
		return p;
	std::string msg = oom_report(size, device);
	how = stalloc_option_string("STALLOC_OOM"); /* NULL: not accepted */
	if (!how)
		msg += std::string(" [") + stalloc_last_error() + "]";
	if (how && !strcmp(how, "abort")) {
		fprintf(stderr, "stalloc: %s; stopping (STALLOC_OOM=abort)\n",
			msg.c_str());
		abort();
	}
	shim_throw_oom(msg);
}

SHIM_API void stalloc_torch_free(void *ptr, size_t size, int device,
				 void *stream)
{
	stalloc_free(ptr, size, device, stream);
}

SHIM_API void stalloc_torch_begin_allocate_to_pool(int device, pool_id id,
						   stream_filter filter)
{
	stream_filter *f = new stream_filter(std::move(filter));
	int err = stalloc_pool_begin(device, id.first, id.second, call_filter,
				     f, drop_filter);

	if (err) {
		delete f;
		check(err, "begin_allocate_to_pool", device, id);
	}
}

SHIM_API void stalloc_torch_end_allocate_to_pool(int device, pool_id id)
{
	check(stalloc_pool_end(device, id.first, id.second),
	      "end_allocate_to_pool", device, id);
}

SHIM_API void stalloc_torch_release_pool(int device, pool_id id)
{
	check(stalloc_pool_release(device, id.first, id.second),
	      "release_pool", device, id);
}
