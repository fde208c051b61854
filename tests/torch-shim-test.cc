// SPDX-License-Identifier: MIT
/*
 * tests/torch-shim-test.cc - libstalloc-torch.so as PyTorch calls it
 *
 * Loads the shim with dlopen, as PyTorch's CUDAPluggableAllocator does, on
 * the host backend with a small pretend device, and checks: an allocation
 * past the device throws std::runtime_error naming the request and
 * stalloc's figures (never NULL), or, given a libc10.so (a stand-in for
 * PyTorch's, tests/mock-c10.cc, in either string ABI) loaded as PyTorch
 * loads its own, a c10::OutOfMemoryError that PyTorch's handlers catch as
 * such and as c10::Error, destroyed once caught; with STALLOC_OOM=abort a
 * child stops
 * with SIGABRT after printing the report; the graph pool hooks, called
 * with PyTorch's C++ types, route the filter's streams into the pool,
 * refuse a second begin and an unknown release with an exception, and
 * drop the filter.  TAP output.
 */
#include <dlfcn.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>

struct CUstream_st;
using pool_id = std::pair<unsigned long long, unsigned long long>;
using stream_filter = std::function<bool(CUstream_st *)>;
using malloc_fn = void *(size_t, int, void *);
using free_fn = void(void *, size_t, int, void *);
using begin_fn = void(int, pool_id, stream_filter);
using end_fn = void(int, pool_id);
using catch_fn = int(void (*)(void *), void *, bool, char *, size_t);

static malloc_fn *tmalloc;

static int tests, failed;

static void ok(bool cond, const char *what)
{
	tests++;
	if (!cond)
		failed++;
	printf("%sok %d - %s\n", cond ? "" : "not ", tests, what);
}

template <typename T> static T *sym(void *h, const char *name)
{
	T *fn = reinterpret_cast<T *>(dlsym(h, name));

	if (!fn) {
		printf("Bail out! %s: %s\n", name, dlerror());
		exit(1);
	}
	return fn;
}

static void oom_1g(void *)
{
	tmalloc(size_t(1) << 30, 0, nullptr);
}

static bool reports(const std::string &msg)
{
	return msg.find("CUDA out of memory") != std::string::npos &&
	       msg.find("1024.00 MiB") != std::string::npos &&
	       msg.find("allocated") != std::string::npos;
}

/* Out of memory caught by @c10's handlers, as PyTorch's bindings do. */
static void check_c10(void *c10)
{
	auto *catcher = sym<catch_fn>(c10, "mock_c10_catch");
	int *live = sym<int>(c10, "mock_c10_live");
	char what[1024];
	int got;

	got = catcher(oom_1g, nullptr, false, what, sizeof(what));
	ok(got == 1 && reports(what),
	   "out of memory is caught as c10::OutOfMemoryError with the report");
	printf("# %d: %s\n", got, what);
	ok(*live == 0, "the caught error was destroyed");
	got = catcher(oom_1g, nullptr, true, what, sizeof(what));
	ok(got == 2 && reports(what), "and as its base, c10::Error");
	ok(*live == 0, "that one too was destroyed");
}

int main(int argc, char **argv)
{
	void *c10 = nullptr;

	if (argc != 2 && argc != 3) {
		fprintf(stderr, "usage: %s LIBSTALLOC_TORCH [LIBC10]\n",
			argv[0]);
		return 2;
	}
	setenv("STALLOC_BACKEND", "host", 1);
	setenv("STALLOC_HOST_MEM", "64M", 1);
	setenv("STALLOC_CTL", "0", 1);
	setenv("STALLOC_LOG", "none", 1);
	void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		printf("Bail out! %s\n", dlerror());
		return 1;
	}
	if (argc == 3) { /* PyTorch loads its libraries RTLD_LOCAL */
		c10 = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
		if (!c10) {
			printf("Bail out! %s\n", dlerror());
			return 1;
		}
	}
	tmalloc = sym<malloc_fn>(h, "stalloc_torch_malloc");
	auto *tfree = sym<free_fn>(h, "stalloc_torch_free");
	auto *begin = sym<begin_fn>(h, "stalloc_torch_begin_allocate_to_pool");
	auto *end = sym<end_fn>(h, "stalloc_torch_end_allocate_to_pool");
	auto *release = sym<end_fn>(h, "stalloc_torch_release_pool");

	void *p = tmalloc(1 << 20, 0, nullptr);
	ok(p != nullptr, "an allocation that fits");
	if (c10) {
		check_c10(c10);
	} else {
		std::string msg;
		void *q = nullptr;

		try {
			q = tmalloc(size_t(1) << 30, 0, nullptr);
		} catch (const std::runtime_error &e) {
			msg = e.what();
		}
		ok(!q && reports(msg), "without libc10, out of memory throws "
				       "std::runtime_error with the report");
		printf("# %s\n", msg.c_str());
	}

	pid_t pid = fork();
	if (pid == 0) {
		setenv("STALLOC_OOM", "abort", 1);
		fclose(stderr); // the report is not this test's output
		tmalloc(size_t(1) << 30, 0, nullptr);
		_exit(0);
	}
	int status = 0;
	waitpid(pid, &status, 0);
	ok(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT,
	   "STALLOC_OOM=abort stops the process");

	auto *cap = reinterpret_cast<CUstream_st *>(0x100);
	auto *other = reinterpret_cast<CUstream_st *>(0x200);
	int calls = 0;
	begin(0, pool_id(3, 4), [&](CUstream_st *s) {
		calls++;
		return s == cap;
	});
	bool threw = false;
	try {
		begin(0, pool_id(3, 4), [](CUstream_st *) { return true; });
	} catch (const std::runtime_error &) {
		threw = true;
	}
	ok(threw, "a second begin of an active pool throws");
	void *g = tmalloc(1 << 20, 0, cap);
	void *o = tmalloc(1 << 20, 0, other);
	ok(g && o && calls >= 2, "the filter is asked for each allocation");
	tfree(g, 1 << 20, 0, cap);
	void *g2 = tmalloc(1 << 20, 0, cap);
	ok(g2 == g, "the pool reuses its block within the capture");
	end(0, pool_id(3, 4));
	calls = 0;
	void *e = tmalloc(1 << 20, 0, cap);
	ok(e != g2 && calls == 0, "after end: no filter, not the pool's");
	tfree(g2, 1 << 20, 0, cap);
	tfree(e, 1 << 20, 0, cap);
	tfree(o, 1 << 20, 0, other);
	release(0, pool_id(3, 4));
	threw = false;
	try {
		release(0, pool_id(3, 4));
	} catch (const std::runtime_error &) {
		threw = true;
	}
	ok(threw, "releasing an unknown pool throws");
	tfree(p, 1 << 20, 0, nullptr);
	printf("1..%d\n", tests);
	return failed ? 1 : 0;
}
