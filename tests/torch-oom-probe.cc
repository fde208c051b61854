// SPDX-License-Identifier: MIT
/*
 * tests/torch-oom-probe.cc - libtorch-oom-probe.so, for
 * tests/torch/run_oom.py: calls an allocator as PyTorch calls its
 * pluggable allocator, and hands what it throws to PyTorch's own exception
 * translation (torch::translate_exception_to_python, which every binding
 * of torch's uses), so that the Python test sees the exception a user
 * would.  Called through ctypes.PyDLL: the GIL is held, and the Python
 * error it sets is raised on return.  No state, no locks.
 */
#include <cstddef>
#include <exception>

using alloc_fn = void *(size_t, int, void *);
using translate_fn = void(const std::exception_ptr &);

/* 0: allocated (and @*ptr set); 1: thrown and translated; -1: NULL. */
extern "C" __attribute__((visibility("default"))) int
stalloc_probe_alloc(alloc_fn *alloc, size_t size, translate_fn *translate,
		    void **ptr)
{
	try {
		*ptr = alloc(size, 0, nullptr);
		return *ptr ? 0 : -1;
	} catch (...) {
		translate(std::current_exception());
		return 1;
	}
}
