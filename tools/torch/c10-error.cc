// SPDX-License-Identifier: MIT
/*
 * tools/torch/c10-error.cc - out of memory as c10::OutOfMemoryError,
 * without PyTorch's headers or libraries at build time
 *
 * PyTorch's allocator reports out of memory by throwing
 * c10::OutOfMemoryError, which its Python bindings raise as
 * torch.OutOfMemoryError (torch.cuda.OutOfMemoryError, a RuntimeError).
 * That class only adds a type to c10::Error (it inherits the constructors
 * and overrides nothing), so the shim throws a real c10::Error, built by
 * libc10's exported Error(SourceLocation, std::string) in the process's
 * own libc10, under a type_info of its own named like
 * c10::OutOfMemoryError with c10::Error's as its base.  libstdc++ compares
 * type_info by name, so PyTorch's catch (const c10::OutOfMemoryError &)
 * takes it; catch (const c10::Error &) and catch (const std::exception &)
 * take it through the base.  Where no libc10 is loaded (a C++ program
 * without PyTorch) or it exports neither constructor, the shim throws
 * std::runtime_error as before.
 *
 * Invariants: the lookup runs once (a function-local static: thread-safe
 * initialisation); the exception object is larger than any c10::Error
 * (ERROR_ROOM); a constructor that throws frees it again.  No locks of its
 * own; dl_iterate_phdr takes the loader's.
 */
#include <cxxabi.h>
#include <dlfcn.h>
#include <link.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "shim.h"

#if !_GLIBCXX_USE_CXX11_ABI
#error "c10-error.cc builds the C++11-ABI string; see c10-error-abi0.cc"
#endif

namespace
{

/* sizeof(c10::Error) is about 200 bytes in PyTorch 1.13 to 2.9. */
constexpr size_t ERROR_ROOM = 4096;

const char *const ctor_cxx11 = "_ZN3c105ErrorC1ENS_14SourceLocationENSt7__"
			       "cxx1112basic_stringIcSt11char_traitsIcESaIcEEE";
const char *const ctor_abi0 = "_ZN3c105ErrorC1ENS_14SourceLocationESs";
const char *const error_type = "_ZTIN3c105ErrorE";

struct c10_error {
	void *ctor; /* NULL: no libc10, throw std::runtime_error */
	bool abi0;
	abi::__si_class_type_info *oom_type;
};

int add_libc10(struct dl_phdr_info *info, size_t, void *data)
{
	auto *paths = static_cast<std::vector<std::string> *>(data);
	const char *name = info->dlpi_name, *base;

	if (!name || !*name)
		return 0;
	base = strrchr(name, '/');
	base = base ? base + 1 : name;
	if (!strncmp(base, "libc10.so", 9))
		paths->push_back(name);
	return 0;
}

/* The constructor and type of the first loaded libc10 exporting them. */
c10_error find_c10_error()
{
	std::vector<std::string> paths;
	c10_error c = {};

	dl_iterate_phdr(add_libc10, &paths);
	for (const std::string &path : paths) {
		void *h = dlopen(path.c_str(), RTLD_LAZY | RTLD_NOLOAD);
		void *ctor, *type;

		if (!h)
			continue;
		ctor = dlsym(h, ctor_cxx11);
		c.abi0 = !ctor;
		if (!ctor)
			ctor = dlsym(h, ctor_abi0);
		type = dlsym(h, error_type);
		dlclose(h); /* PyTorch keeps it loaded */
		if (ctor && type) {
			c.ctor = ctor;
			c.oom_type = new abi::__si_class_type_info(
				"N3c1016OutOfMemoryErrorE",
				static_cast<const abi::__class_type_info *>(
					type));
			break;
		}
	}
	return c;
}

const c10_error &c10()
{
	static const c10_error c = find_c10_error();

	return c;
}

/* The exception's destructor: c10::Error's, through its vtable. */
void destroy_error(void *obj)
{
	static_cast<std::exception *>(obj)->~exception();
}

} // namespace

void shim_throw_oom(const std::string &msg)
{
	using error_ctor = void (*)(void *, shim_source_location, std::string);
	const c10_error &c = c10();
	shim_source_location loc = { "stalloc_torch_malloc", __FILE__,
				     __LINE__ };
	void *obj;

	if (!c.ctor)
		throw std::runtime_error(msg);
	obj = abi::__cxa_allocate_exception(ERROR_ROOM);
	memset(obj, 0, ERROR_ROOM);
	try {
		if (c.abi0)
			shim_c10_construct_abi0(c.ctor, obj, loc, msg.c_str());
		else
			reinterpret_cast<error_ctor>(c.ctor)(obj, loc, msg);
	} catch (...) {
		abi::__cxa_free_exception(obj);
		throw;
	}
	abi::__cxa_throw(obj, c.oom_type, destroy_error);
}
