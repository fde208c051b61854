/* SPDX-License-Identifier: MIT */
/*
 * tools/torch/shim.h - internal to libstalloc-torch.so
 *
 * c10::Error's constructor Error(SourceLocation, std::string) is the one
 * every PyTorch since 1.x exports from libc10.  Its std::string is that of
 * the ABI libc10 was built with: the C++11 one (conda, Debian, pip wheels
 * since 2.7) or the older one (pip wheels before 2.7), so the shim builds
 * the argument in whichever TU matches: c10-error.cc (C++11) or
 * c10-error-abi0.cc (compiled with _GLIBCXX_USE_CXX11_ABI=0).
 */
#ifndef STALLOC_TORCH_SHIM_H
#define STALLOC_TORCH_SHIM_H

#include <cstdint>
#include <string>

/* c10::SourceLocation: the same three fields in every PyTorch. */
struct shim_source_location {
	const char *function;
	const char *file;
	uint32_t line;
};

/*
 * Construct a c10::Error at @obj with @ctor, the pre-C++11-ABI constructor
 * (c10-error-abi0.cc).  May throw what the constructor throws.
 */
void shim_c10_construct_abi0(void *ctor, void *obj,
			     const shim_source_location &loc, const char *msg);

/*
 * Throw out of memory as PyTorch's own allocator does: a
 * c10::OutOfMemoryError with @msg, which PyTorch raises as
 * torch.OutOfMemoryError, where libc10 is loaded; a std::runtime_error
 * (RuntimeError) where it is not.
 */
[[noreturn]] void shim_throw_oom(const std::string &msg);

#endif /* STALLOC_TORCH_SHIM_H */
