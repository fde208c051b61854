// SPDX-License-Identifier: MIT
/*
 * selftest.c - standalone test of the fake CUDA driver (libcuda-fake.so)
 *
 * Usage: selftest PATH-TO-libcuda-fake.so
 *
 * Loads the library with dlopen(), fetches every entry point through
 * cuGetProcAddress_v2 (as stalloc's cuda backend does) and the control
 * functions with dlsym(), then walks through the driver rules: mapping,
 * aliasing, remapping, deferred release, out of memory, fault injection,
 * streams and events, and a few threads hammering the VMM calls at once.
 * Every deliberate rule violation is counted here and compared with the
 * library's count; at the end nothing may be left alive.
 *
 * It runs single threaded except in thread_test(), whose workers share
 * nothing but the library (which serialises them behind its lock).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda.h>
#include <cudaTypedefs.h>

#include "fakecuda.h"

#define MIB (1024UL * 1024UL)
#define GRAN (2 * MIB)
#define DEV_MEM (64 * MIB)
#define NTHREADS 4
#define NITER 200

static int failures;
static unsigned long expected_viol;

static void fail(void)
{
	__atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
}

#define CHECK(cond)                                                            \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "selftest: %s:%d: CHECK(%s) failed\n", \
				__FILE__, __LINE__, #cond);                    \
			fail();                                                \
		}                                                              \
	} while (0)

#define CHECK_RC(call, want)                                         \
	do {                                                         \
		CUresult rc_ = (call);                               \
		if (rc_ != (want)) {                                 \
			fprintf(stderr,                              \
				"selftest: %s:%d: %s returned %d, "  \
				"expected %d\n",                     \
				__FILE__, __LINE__, #call, (int)rc_, \
				(int)(want));                        \
			fail();                                      \
		}                                                    \
	} while (0)

#define OK(call) CHECK_RC(call, CUDA_SUCCESS)
/* A call that breaks a rule on purpose. */
#define VIOL(call, want)              \
	do {                          \
		expected_viol++;      \
		CHECK_RC(call, want); \
	} while (0)

/* Control interface, from dlsym(). */
static struct {
	int (*fail_nth)(const char *, unsigned long, int);
	int (*fail_always)(const char *, int);
	int (*fail_nth_any)(unsigned long, int);
	void (*fail_clear)(void);
	unsigned long (*calls)(const char *);
	unsigned long (*calls_total)(void);
	void (*calls_reset)(void);
	unsigned long (*live_reservations)(void);
	unsigned long (*live_handles)(void);
	unsigned long (*live_mappings)(void);
	unsigned long (*live_primary_retains)(void);
	unsigned long (*live_streams)(void);
	unsigned long (*live_events)(void);
	unsigned long long (*phys_bytes)(int);
	unsigned long (*violations)(void);
	int (*stream_hold)(void *, int);
} fc;

/* Driver, from cuGetProcAddress_v2 at the CUDA 12.0 ABI. */
static PFN_cuGetProcAddress_v12000 getproc;
static struct {
	PFN_cuInit_v2000 init;
	PFN_cuDriverGetVersion_v2020 driver_version;
	PFN_cuGetErrorString_v6000 error_string;
	PFN_cuGetErrorName_v6000 error_name;
	PFN_cuDeviceGetCount_v2000 device_count;
	PFN_cuDeviceGet_v2000 device_get;
	PFN_cuDeviceGetAttribute_v2000 device_attr;
	PFN_cuDeviceGetName_v2000 device_name;
	PFN_cuDeviceTotalMem_v3020 total_mem;
	PFN_cuDevicePrimaryCtxRetain_v7000 retain;
	PFN_cuDevicePrimaryCtxRelease_v11000 release;
	PFN_cuCtxGetCurrent_v4000 ctx_get;
	PFN_cuCtxSetCurrent_v4000 ctx_set;
	PFN_cuCtxGetDevice_v2000 ctx_device;
	PFN_cuCtxPushCurrent_v4000 ctx_push;
	PFN_cuCtxPopCurrent_v4000 ctx_pop;
	PFN_cuCtxSynchronize_v2000 ctx_sync;
	PFN_cuStreamCreate_v2000 stream_create;
	PFN_cuStreamDestroy_v4000 stream_destroy;
	PFN_cuStreamSynchronize_v2000 stream_sync;
	PFN_cuStreamQuery_v2000 stream_query;
	PFN_cuStreamWaitEvent_v3020 stream_wait;
	PFN_cuEventCreate_v2000 event_create;
	PFN_cuEventRecord_v2000 event_record;
	PFN_cuEventQuery_v2000 event_query;
	PFN_cuEventSynchronize_v2000 event_sync;
	PFN_cuEventDestroy_v4000 event_destroy;
	PFN_cuMemAddressReserve_v10020 reserve;
	PFN_cuMemAddressFree_v10020 addr_free;
	PFN_cuMemCreate_v10020 create;
	PFN_cuMemRelease_v10020 mem_release;
	PFN_cuMemMap_v10020 map;
	PFN_cuMemUnmap_v10020 unmap;
	PFN_cuMemSetAccess_v10020 set_access;
	PFN_cuMemGetAccess_v10020 get_access;
	PFN_cuMemGetAllocationGranularity_v10020 granularity;
	PFN_cuMemsetD8_v3020 memset8;
	PFN_cuMemcpyHtoD_v3020 htod;
	PFN_cuMemcpyDtoH_v3020 dtoh;
	PFN_cuMemcpyDtoD_v3020 dtod;
	PFN_cuMemcpy_v4000 memcpy;
} cu;

static void *sym(void *lib, const char *name)
{
	void *p = dlsym(lib, name);

	if (!p) {
		fprintf(stderr, "selftest: %s missing: %s\n", name, dlerror());
		exit(2);
	}
	return p;
}

#define SYM(field, name) (*(void **)&fc.field = sym(lib, name))

static void load_control(void *lib)
{
	SYM(fail_nth, "fakecuda_fail_nth");
	SYM(fail_always, "fakecuda_fail_always");
	SYM(fail_nth_any, "fakecuda_fail_nth_any");
	SYM(fail_clear, "fakecuda_fail_clear");
	SYM(calls, "fakecuda_calls");
	SYM(calls_total, "fakecuda_calls_total");
	SYM(calls_reset, "fakecuda_calls_reset");
	SYM(live_reservations, "fakecuda_live_reservations");
	SYM(live_handles, "fakecuda_live_handles");
	SYM(live_mappings, "fakecuda_live_mappings");
	SYM(live_primary_retains, "fakecuda_live_primary_retains");
	SYM(live_streams, "fakecuda_live_streams");
	SYM(live_events, "fakecuda_live_events");
	SYM(phys_bytes, "fakecuda_phys_bytes");
	SYM(violations, "fakecuda_violations");
	SYM(stream_hold, "fakecuda_stream_hold");
	*(void **)&getproc = sym(lib, "cuGetProcAddress_v2");
}

static void proc(void **slot, const char *name)
{
	CUdriverProcAddressQueryResult st;
	CUresult rc;

	st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	rc = getproc(name, slot, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &st);

	if (rc != CUDA_SUCCESS || st != CU_GET_PROC_ADDRESS_SUCCESS || !*slot) {
		fprintf(stderr, "selftest: cuGetProcAddress_v2(%s): %d/%d\n",
			name, (int)rc, (int)st);
		exit(2);
	}
}

#define PROC(field, name) proc((void **)&cu.field, name)

static void load_driver(void)
{
	PROC(init, "cuInit");
	PROC(driver_version, "cuDriverGetVersion");
	PROC(error_string, "cuGetErrorString");
	PROC(error_name, "cuGetErrorName");
	PROC(device_count, "cuDeviceGetCount");
	PROC(device_get, "cuDeviceGet");
	PROC(device_attr, "cuDeviceGetAttribute");
	PROC(device_name, "cuDeviceGetName");
	PROC(total_mem, "cuDeviceTotalMem");
	PROC(retain, "cuDevicePrimaryCtxRetain");
	PROC(release, "cuDevicePrimaryCtxRelease");
	PROC(ctx_get, "cuCtxGetCurrent");
	PROC(ctx_set, "cuCtxSetCurrent");
	PROC(ctx_device, "cuCtxGetDevice");
	PROC(ctx_push, "cuCtxPushCurrent");
	PROC(ctx_pop, "cuCtxPopCurrent");
	PROC(ctx_sync, "cuCtxSynchronize");
	PROC(stream_create, "cuStreamCreate");
	PROC(stream_destroy, "cuStreamDestroy");
	PROC(stream_sync, "cuStreamSynchronize");
	PROC(stream_query, "cuStreamQuery");
	PROC(stream_wait, "cuStreamWaitEvent");
	PROC(event_create, "cuEventCreate");
	PROC(event_record, "cuEventRecord");
	PROC(event_query, "cuEventQuery");
	PROC(event_sync, "cuEventSynchronize");
	PROC(event_destroy, "cuEventDestroy");
	PROC(reserve, "cuMemAddressReserve");
	PROC(addr_free, "cuMemAddressFree");
	PROC(create, "cuMemCreate");
	PROC(mem_release, "cuMemRelease");
	PROC(map, "cuMemMap");
	PROC(unmap, "cuMemUnmap");
	PROC(set_access, "cuMemSetAccess");
	PROC(get_access, "cuMemGetAccess");
	PROC(granularity, "cuMemGetAllocationGranularity");
	PROC(memset8, "cuMemsetD8");
	PROC(htod, "cuMemcpyHtoD");
	PROC(dtoh, "cuMemcpyDtoH");
	PROC(dtod, "cuMemcpyDtoD");
	PROC(memcpy, "cuMemcpy");
}

static CUmemAllocationProp prop_for(int dev)
{
	CUmemAllocationProp p;

	memset(&p, 0, sizeof(p));
	p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	p.location.id = dev;
	return p;
}

static CUresult set_access(CUdeviceptr va, size_t size, int dev,
			   CUmemAccess_flags flags)
{
	CUmemAccessDesc d;

	memset(&d, 0, sizeof(d));
	d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	d.location.id = dev;
	d.flags = flags;
	return cu.set_access(va, size, &d, 1);
}

static CUresult create(CUmemGenericAllocationHandle *h, size_t size, int dev)
{
	CUmemAllocationProp p = prop_for(dev);

	return cu.create(h, size, &p, 0);
}

/* One byte of device memory, read and written through the driver. */
static unsigned char peek(CUdeviceptr va)
{
	unsigned char c = 0xee;

	OK(cu.dtoh(&c, va, 1));
	return c;
}

static void poke(CUdeviceptr va, unsigned char c)
{
	OK(cu.htod(va, &c, 1));
}

/* Whether a host load at @va kills a child process with SIGSEGV. */
static bool host_load_faults(CUdeviceptr va)
{
	int status = 0;
	pid_t pid = fork();

	if (pid == 0) {
		signal(SIGSEGV, SIG_DFL);
		_exit(*(volatile unsigned char *)(uintptr_t)va);
	}
	if (pid < 0 || waitpid(pid, &status, 0) != pid)
		return false;
	return WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV;
}

/* Everything before cuInit, and the lookup rules. */
static void lookup_test(void)
{
	CUdriverProcAddressQueryResult st;
	void *p12 = NULL, *p13 = NULL, *p;
	const char *s;
	int n = 0;

	VIOL(cu.device_count(&n), CUDA_ERROR_NOT_INITIALIZED);
	OK(cu.driver_version(&n));
	CHECK(n == 13000);
	CHECK_RC(getproc("cuNoSuchThing", &p, 12000, 0, &st),
		 CUDA_ERROR_NOT_FOUND);
	CHECK(st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND && !p);
	CHECK_RC(getproc("cuMemMap", &p, 10000, 0, &st), CUDA_ERROR_NOT_FOUND);
	CHECK(st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT && !p);
	CHECK_RC(getproc("cuMemMap", &p, 14000, 0, &st),
		 CUDA_ERROR_INVALID_VALUE);
	CHECK(st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
	OK(getproc("cuCtxSynchronize", &p12, 12000, 0, &st));
	OK(getproc("cuCtxSynchronize", &p13, 13000, 0, &st));
	CHECK(p12 && p13 && p12 != p13);
	OK(cu.error_name(CUDA_ERROR_OUT_OF_MEMORY, &s));
	CHECK(s && !strcmp(s, "CUDA_ERROR_OUT_OF_MEMORY"));
	OK(cu.error_string(CUDA_ERROR_INVALID_VALUE, &s));
	CHECK(s && !strcmp(s, "invalid argument"));
	CHECK_RC(cu.error_string((CUresult)12345, &s),
		 CUDA_ERROR_INVALID_VALUE);
	CHECK(s == NULL);
	VIOL(cu.init(1), CUDA_ERROR_INVALID_VALUE);
	OK(cu.init(0));
	OK(cu.init(0));
}

static void device_test(void)
{
	char name[64];
	size_t bytes = 0;
	CUdevice dev = -1;
	int n = 0, v = -1;

	OK(cu.device_count(&n));
	CHECK(n == 2);
	OK(cu.device_get(&dev, 1));
	CHECK(dev == 1);
	VIOL(cu.device_get(&dev, 2), CUDA_ERROR_INVALID_DEVICE);
	OK(cu.device_attr(
		&v, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
		0));
	CHECK(v == 1);
	OK(cu.device_attr(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0));
	CHECK(v == 9);
	OK(cu.device_attr(&v, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 0));
	CHECK(v == 1);
	OK(cu.total_mem(&bytes, 0));
	CHECK(bytes == DEV_MEM);
	/* FAKECUDA_FAIL made the first cuDeviceGetName fail. */
	CHECK_RC(cu.device_name(name, sizeof(name), 0), CUDA_ERROR_UNKNOWN);
	OK(cu.device_name(name, sizeof(name), 0));
	CHECK(strstr(name, "fakecuda") != NULL);
}

static void ctx_test(CUcontext *ctx0)
{
	CUcontext c = NULL, c2 = NULL;
	CUdevice dev = -1;

	VIOL(cu.ctx_sync(), CUDA_ERROR_INVALID_CONTEXT);
	VIOL(cu.ctx_pop(&c), CUDA_ERROR_INVALID_CONTEXT);
	OK(cu.retain(ctx0, 0));
	OK(cu.retain(&c2, 0));
	CHECK(*ctx0 && c2 == *ctx0);
	OK(cu.release(0));
	OK(cu.ctx_get(&c));
	CHECK(c == NULL);
	OK(cu.ctx_push(*ctx0));
	OK(cu.ctx_device(&dev));
	CHECK(dev == 0);
	OK(cu.ctx_sync());
	OK(cu.ctx_get(&c));
	CHECK(c == *ctx0);
	CHECK(fc.live_primary_retains() == 1);
}

/* Reserve, create, map, access, alias, unmap rules, remap, release. */
static void vmm_test(void)
{
	CUmemAllocationProp bad = prop_for(0);
	CUmemGenericAllocationHandle h, h2;
	CUdeviceptr va, va2;
	unsigned long long flags = 99;
	CUmemLocation loc = { CU_MEM_LOCATION_TYPE_DEVICE, 0 };
	unsigned char buf[64];
	size_t g = 0;
	int i;

	OK(cu.granularity(&g, &bad, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	CHECK(g == GRAN);
	bad.type = CU_MEM_ALLOCATION_TYPE_INVALID;
	VIOL(cu.granularity(&g, &bad, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
	     CUDA_ERROR_INVALID_VALUE);
	VIOL(cu.reserve(&va, GRAN + 4096, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
	VIOL(cu.reserve(&va, GRAN, 3 * GRAN, 0, 0), CUDA_ERROR_INVALID_VALUE);
	OK(cu.reserve(&va2, 2 * GRAN, 16 * GRAN, 0, 0));
	CHECK(va2 && va2 % (16 * GRAN) == 0);
	OK(cu.reserve(&va, 8 * GRAN, 0, 0, 0));
	CHECK(va && va % GRAN == 0);

	VIOL(create(&h, GRAN + 4096, 0), CUDA_ERROR_INVALID_VALUE);
	VIOL(create(&h, GRAN, 5), CUDA_ERROR_INVALID_DEVICE);
	OK(create(&h, 2 * GRAN, 0));
	CHECK(fc.live_handles() == 1 && fc.phys_bytes(0) == 2 * GRAN);
	VIOL(cu.map(va, GRAN, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
	VIOL(cu.map(va + 4096, 2 * GRAN, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
	VIOL(cu.map(va + 7 * GRAN, 2 * GRAN, 0, h, 0),
	     CUDA_ERROR_INVALID_VALUE);
	VIOL(cu.map(va, 2 * GRAN, 0, 0x1234, 0), CUDA_ERROR_INVALID_VALUE);
	OK(cu.map(va, 2 * GRAN, 0, h, 0));
	VIOL(cu.map(va + GRAN, 2 * GRAN, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
	OK(cu.get_access(&flags, &loc, va));
	CHECK(flags == CU_MEM_ACCESS_FLAGS_PROT_NONE);
	/* Not accessible yet: copies are refused. */
	VIOL(cu.memset8(va, 1, 16), CUDA_ERROR_INVALID_VALUE);
	VIOL(set_access(va, GRAN, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE),
	     CUDA_ERROR_INVALID_VALUE);
	OK(set_access(va, 2 * GRAN, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE));
	OK(cu.get_access(&flags, &loc, va + GRAN));
	CHECK(flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);

	for (i = 0; i < (int)sizeof(buf); i++)
		buf[i] = (unsigned char)(i * 7 + 1);
	OK(cu.htod(va + GRAN - 32, buf, sizeof(buf)));
	OK(cu.memset8(va, 0xab, 16));
	memset(buf, 0, sizeof(buf));
	OK(cu.dtoh(buf, va + GRAN - 32, sizeof(buf)));
	CHECK(buf[0] == 1 && buf[63] == (unsigned char)(63 * 7 + 1));
	CHECK(peek(va) == 0xab && peek(va + 15) == 0xab && !peek(va + 16));
	OK(cu.dtod(va + 100, va, 16));
	CHECK(peek(va + 100) == 0xab && peek(va + 115) == 0xab);
	/* Mapped, accessible to the device, yet not to the host. */
	CHECK(host_load_faults(va));
	CHECK(host_load_faults(va + GRAN + 5));
	/* cuMemcpy takes device and host addresses alike (UVA). */
	OK(cu.memcpy((CUdeviceptr)(uintptr_t)buf, va, 4));
	CHECK(buf[0] == 0xab && buf[3] == 0xab);
	buf[0] = 0x11;
	OK(cu.memcpy(va + 200, (CUdeviceptr)(uintptr_t)buf, 1));
	CHECK(peek(va + 200) == 0x11);
	OK(cu.memcpy(va + 201, va + 200, 1));
	CHECK(peek(va + 201) == 0x11);
	VIOL(cu.memcpy((CUdeviceptr)(uintptr_t)buf, va + 2 * GRAN, 1),
	     CUDA_ERROR_INVALID_VALUE);
	VIOL(cu.dtoh(buf, va + 2 * GRAN - 8, 16), CUDA_ERROR_INVALID_VALUE);

	/* Alias: the same handle at a second address shows the same bytes. */
	OK(cu.map(va + 4 * GRAN, 2 * GRAN, 0, h, 0));
	OK(set_access(va + 4 * GRAN, 2 * GRAN, 0,
		      CU_MEM_ACCESS_FLAGS_PROT_READWRITE));
	CHECK(peek(va + 4 * GRAN) == 0xab);
	poke(va + 4 * GRAN + GRAN + 5, 0x5a);
	CHECK(peek(va + GRAN + 5) == 0x5a);

	CHECK(fc.live_mappings() == 2);

	/* Unmap rules: no sub-range, no hole. */
	VIOL(cu.unmap(va, GRAN), CUDA_ERROR_INVALID_VALUE);
	VIOL(cu.unmap(va + GRAN, GRAN), CUDA_ERROR_INVALID_VALUE);
	VIOL(cu.unmap(va, 6 * GRAN), CUDA_ERROR_INVALID_VALUE);
	OK(cu.unmap(va, 2 * GRAN));

	/* Remap elsewhere keeps the bytes. */
	OK(cu.map(va + 2 * GRAN, 2 * GRAN, 0, h, 0));
	OK(set_access(va + 2 * GRAN, 4 * GRAN, 0,
		      CU_MEM_ACCESS_FLAGS_PROT_READ));
	CHECK(peek(va + 2 * GRAN) == 0xab);
	CHECK(peek(va + 2 * GRAN + GRAN + 5) == 0x5a);
	VIOL(cu.memset8(va + 2 * GRAN, 0, 1), CUDA_ERROR_INVALID_VALUE);
	OK(cu.dtoh(buf, va + 2 * GRAN, 8));
	CHECK(buf[0] == 0xab);
	/* A copy across two mappings: the end of h, then its start. */
	OK(cu.dtoh(buf, va + 4 * GRAN - 4, 8));
	CHECK(buf[0] == 0 && buf[3] == 0 && buf[4] == 0xab && buf[7] == 0xab);

	/* Two adjacent whole mappings unmap in one call. */
	OK(cu.unmap(va + 2 * GRAN, 4 * GRAN));
	OK(cu.map(va + 2 * GRAN, 2 * GRAN, 0, h, 0));
	OK(cu.map(va + 4 * GRAN, 2 * GRAN, 0, h, 0));

	/* Release while mapped is deferred; the handle dies at once. */
	OK(cu.mem_release(h));
	CHECK(fc.live_handles() == 0 && fc.phys_bytes(0) == 2 * GRAN);
	VIOL(cu.map(va, 2 * GRAN, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
	VIOL(cu.mem_release(h), CUDA_ERROR_INVALID_VALUE);
	VIOL(cu.addr_free(va, 8 * GRAN), CUDA_ERROR_INVALID_VALUE);
	OK(cu.unmap(va + 2 * GRAN, 2 * GRAN));
	CHECK(fc.phys_bytes(0) == 2 * GRAN);
	OK(cu.unmap(va + 4 * GRAN, 2 * GRAN));
	CHECK(fc.phys_bytes(0) == 0 && fc.live_mappings() == 0);

	/* Freed memory was punched out: a new handle reads zeros. */
	OK(create(&h2, 2 * GRAN, 0));
	OK(cu.map(va, 2 * GRAN, 0, h2, 0));
	OK(set_access(va, 2 * GRAN, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE));
	CHECK(peek(va) == 0 && peek(va + GRAN + 5) == 0);
	OK(cu.unmap(va, 2 * GRAN));
	OK(cu.mem_release(h2));

	VIOL(cu.addr_free(va, 4 * GRAN), CUDA_ERROR_INVALID_VALUE);
	OK(cu.addr_free(va, 8 * GRAN));
	OK(cu.addr_free(va2, 2 * GRAN));
	VIOL(cu.addr_free(va2, 2 * GRAN), CUDA_ERROR_INVALID_VALUE);
}

static void oom_test(void)
{
	CUmemGenericAllocationHandle a, b, c;

	OK(create(&a, DEV_MEM - 2 * GRAN, 0));
	CHECK_RC(create(&b, 4 * GRAN, 0), CUDA_ERROR_OUT_OF_MEMORY);
	OK(create(&b, 2 * GRAN, 0));
	CHECK_RC(create(&c, GRAN, 0), CUDA_ERROR_OUT_OF_MEMORY);
	OK(create(&c, 4 * GRAN, 1)); /* the other device has its own */
	CHECK(fc.phys_bytes(0) == DEV_MEM && fc.phys_bytes(1) == 4 * GRAN);
	OK(cu.mem_release(a));
	OK(cu.mem_release(b));
	OK(cu.mem_release(c));
	CHECK(fc.phys_bytes(0) == 0 && fc.phys_bytes(1) == 0);
}

static void fault_test(void)
{
	CUmemGenericAllocationHandle a = 0, b = 0, c = 0;
	CUdeviceptr va = 0;
	int n = 0;

	CHECK(fc.fail_nth("cuNoSuchCall", 1, 2) == -1);
	CHECK(fc.fail_nth("cuGetErrorString", 1, 2) == -1);
	CHECK(fc.fail_nth("cuMemCreate", 0, 2) == -1);
	fc.calls_reset();
	CHECK(fc.fail_nth("cuMemCreate", 2, CUDA_ERROR_OUT_OF_MEMORY) == 0);
	OK(create(&a, GRAN, 0));
	CHECK_RC(create(&b, GRAN, 0), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK(b == 0 && fc.live_handles() == 1 && fc.phys_bytes(0) == GRAN);
	OK(create(&b, GRAN, 0));
	CHECK(fc.calls("cuMemCreate") == 3 && fc.calls_total() == 3);

	CHECK(fc.fail_nth_any(2, CUDA_ERROR_UNKNOWN) == 0);
	OK(cu.reserve(&va, 2 * GRAN, 0, 0, 0));
	CHECK_RC(cu.map(va, GRAN, 0, a, 0), CUDA_ERROR_UNKNOWN);
	CHECK(fc.live_mappings() == 0);
	OK(cu.map(va, GRAN, 0, a, 0));

	CHECK(fc.fail_always("cuMemUnmap", CUDA_ERROR_LAUNCH_FAILED) == 0);
	CHECK_RC(cu.unmap(va, GRAN), CUDA_ERROR_LAUNCH_FAILED);
	CHECK_RC(cu.unmap(va, GRAN), CUDA_ERROR_LAUNCH_FAILED);
	CHECK(fc.live_mappings() == 1);
	CHECK(fc.fail_always("cuMemUnmap", 0) == 0);
	OK(cu.unmap(va, GRAN));

	CHECK(fc.fail_nth("cuDeviceGetCount", 1, CUDA_ERROR_UNKNOWN) == 0);
	fc.fail_clear();
	OK(cu.device_count(&n));
	OK(cu.mem_release(a));
	OK(cu.mem_release(b));
	OK(cu.addr_free(va, 2 * GRAN));
	CHECK(c == 0);
}

static void stream_test(void)
{
	CUstream s = NULL, gone;
	CUevent e1 = NULL, e2 = NULL;

	OK(cu.stream_create(&s, CU_STREAM_NON_BLOCKING));
	OK(cu.event_create(&e1, CU_EVENT_DISABLE_TIMING));
	OK(cu.event_create(&e2, 0));
	CHECK(fc.live_streams() == 1 && fc.live_events() == 2);
	OK(cu.event_record(e1, s));
	CHECK(fc.stream_hold(s, 1) == 0);
	OK(cu.event_query(e1)); /* recorded before the hold */
	OK(cu.event_record(e2, s));
	CHECK_RC(cu.event_query(e2), CUDA_ERROR_NOT_READY);
	CHECK_RC(cu.stream_query(s), CUDA_ERROR_NOT_READY);
	OK(cu.stream_wait(NULL, e2, 0));
	OK(cu.event_sync(e2));
	OK(cu.event_query(e2));
	OK(cu.stream_query(s));

	CHECK(fc.stream_hold(s, 1) == 0);
	OK(cu.event_record(e2, s));
	OK(cu.ctx_sync());
	OK(cu.event_query(e2));
	CHECK(fc.stream_hold(s, 1) == 0);
	OK(cu.event_record(e2, s));
	OK(cu.stream_sync(s));
	OK(cu.event_query(e2));

	/* The default stream of the current context. */
	CHECK(fc.stream_hold(NULL, 1) == 0);
	OK(cu.event_record(e1, NULL));
	CHECK_RC(cu.event_query(e1), CUDA_ERROR_NOT_READY);
	CHECK_RC(cu.stream_query(CU_STREAM_LEGACY), CUDA_ERROR_NOT_READY);
	OK(cu.stream_sync(NULL));
	OK(cu.event_query(e1));

	OK(cu.event_destroy(e1));
	OK(cu.event_destroy(e2));
	gone = s;
	OK(cu.stream_destroy(s));
	VIOL(cu.stream_query(gone), CUDA_ERROR_INVALID_HANDLE);
	VIOL(cu.event_query(e1), CUDA_ERROR_INVALID_HANDLE);
	VIOL(cu.stream_destroy(NULL), CUDA_ERROR_INVALID_HANDLE);
	CHECK(fc.stream_hold(gone, 1) == -1);
	CHECK(fc.live_streams() == 0 && fc.live_events() == 0);
}

/* Several threads, each with its own reservation, hammering VMM calls. */
static void *worker(void *arg)
{
	CUcontext ctx = arg;
	CUmemGenericAllocationHandle h;
	CUdeviceptr va;
	int i;

	OK(cu.ctx_set(ctx));
	OK(cu.reserve(&va, 4 * GRAN, 0, 0, 0));
	for (i = 0; i < NITER; i++) {
		OK(create(&h, GRAN, 0));
		OK(cu.map(va + (size_t)(i % 4) * GRAN, GRAN, 0, h, 0));
		OK(set_access(va + (size_t)(i % 4) * GRAN, GRAN, 0,
			      CU_MEM_ACCESS_FLAGS_PROT_READWRITE));
		OK(cu.memset8(va + (size_t)(i % 4) * GRAN, (unsigned char)i,
			      4096));
		CHECK(peek(va + (size_t)(i % 4) * GRAN + 4095) ==
		      (unsigned char)i);
		OK(cu.mem_release(h));
		OK(cu.unmap(va + (size_t)(i % 4) * GRAN, GRAN));
	}
	OK(cu.addr_free(va, 4 * GRAN));
	OK(cu.ctx_set(NULL));
	return NULL;
}

static void thread_test(CUcontext ctx0)
{
	pthread_t t[NTHREADS];
	int i;

	for (i = 0; i < NTHREADS; i++)
		CHECK(pthread_create(&t[i], NULL, worker, ctx0) == 0);
	for (i = 0; i < NTHREADS; i++)
		pthread_join(t[i], NULL);
}

static void teardown_test(void)
{
	CUcontext c = NULL;

	OK(cu.ctx_pop(&c));
	OK(cu.release(0));
	VIOL(cu.release(0), CUDA_ERROR_INVALID_CONTEXT);
	CHECK(fc.live_primary_retains() == 0);
	CHECK(fc.live_reservations() == 0);
	CHECK(fc.live_handles() == 0);
	CHECK(fc.live_mappings() == 0);
	CHECK(fc.live_streams() == 0 && fc.live_events() == 0);
	CHECK(fc.phys_bytes(0) == 0 && fc.phys_bytes(1) == 0);
}

int main(int argc, char **argv)
{
	CUcontext ctx0 = NULL;
	void *lib;

	if (argc != 2) {
		fprintf(stderr, "usage: %s libcuda-fake.so\n", argv[0]);
		return 2;
	}
	setenv("FAKECUDA_DEVICES", "2", 1);
	setenv("FAKECUDA_MEM", "64M", 1);
	setenv("FAKECUDA_GRANULARITY", "2M", 1);
	setenv("FAKECUDA_FAIL", "cuDeviceGetName:1:999", 1);
	lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		fprintf(stderr, "selftest: %s\n", dlerror());
		return 2;
	}
	load_control(lib);
	load_driver();

	lookup_test();
	device_test();
	ctx_test(&ctx0);
	vmm_test();
	oom_test();
	fault_test();
	stream_test();
	thread_test(ctx0);
	teardown_test();

	CHECK(fc.violations() == expected_viol);
	fprintf(stderr,
		"selftest: %lu violations (expected %lu), %d "
		"failures\n",
		fc.violations(), expected_viol, failures);
	dlclose(lib);
	if (failures)
		return 1;
	printf("selftest: PASS\n");
	return 0;
}
