// SPDX-License-Identifier: MIT
/*
 * tools/torch/c10-error-abi0.cc - c10::Error for a libc10 built with the
 * pre-C++11 std::string ABI (PyTorch pip wheels before 2.7)
 *
 * Compiled with -D_GLIBCXX_USE_CXX11_ABI=0, so std::string here is the one
 * such a libc10 takes (mangled "Ss").  Only shim_c10_construct_abi0() is
 * in it: no other std::string of this ABI leaves this file.  No locks.
 */
#include "shim.h"

void shim_c10_construct_abi0(void *ctor, void *obj,
			     const shim_source_location &loc, const char *msg)
{
	using error_ctor = void (*)(void *, shim_source_location, std::string);

	reinterpret_cast<error_ctor>(ctor)(obj, loc, std::string(msg));
}
