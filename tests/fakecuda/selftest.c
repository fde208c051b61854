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
	unsigned long (*captures_invalidated)(void);
	unsigned long (*live_graphs)(void);
	int (*launch)(void *, unsigned long long, unsigned long long, int);
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
	PFN_cuStreamBeginCapture_v10010 begin_capture;
	PFN_cuStreamEndCapture_v10000 end_capture;
	PFN_cuStreamIsCapturing_v10000 is_capturing;
	PFN_cuStreamGetCaptureInfo_v11030 capture_info;
	PFN_cuGraphDestroy_v10000 graph_destroy;
	PFN_cuThreadExchangeStreamCaptureMode_v10010 exchange_mode;
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
	SYM(captures_invalidated, "fakecuda_captures_invalidated");
	SYM(live_graphs, "fakecuda_live_graphs");
	SYM(launch, "fakecuda_launch");
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
	PROC(begin_capture, "cuStreamBeginCapture");
	PROC(end_capture, "cuStreamEndCapture");
	PROC(is_capturing, "cuStreamIsCapturing");
	PROC(capture_info, "cuStreamGetCaptureInfo");
	PROC(graph_destroy, "cuGraphDestroy");
	PROC(exchange_mode, "cuThreadExchangeStreamCaptureMode");
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

/* A control call that must (or must not) add exactly one violation. */
#define ONE_VIOL(call)                              \
	do {                                        \
		unsigned long v_ = fc.violations(); \
		expected_viol++;                    \
		CHECK((call) == 0);                 \
		CHECK(fc.violations() == v_ + 1);   \
	} while (0)
#define NO_VIOL(call)                               \
	do {                                        \
		unsigned long v_ = fc.violations(); \
		CHECK((call) == 0);                 \
		CHECK(fc.violations() == v_);       \
	} while (0)

/* A chunk of device memory for the tests below, readable and writable. */
struct chunk {
	CUdeviceptr va;
	CUmemGenericAllocationHandle h;
};

static void chunk_get(struct chunk *c)
{
	OK(cu.reserve(&c->va, 2 * GRAN, 0, 0, 0));
	OK(create(&c->h, 2 * GRAN, 0));
	OK(cu.map(c->va, 2 * GRAN, 0, c->h, 0));
	OK(set_access(c->va, 2 * GRAN, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE));
}

static void chunk_put(struct chunk *c)
{
	OK(cu.unmap(c->va, 2 * GRAN));
	OK(cu.mem_release(c->h));
	OK(cu.addr_free(c->va, 2 * GRAN));
}

/* End the capture on @s, which must have been invalidated. */
static void end_invalidated(CUstream s)
{
	CUgraph g = (CUgraph)(uintptr_t)1;

	CHECK_RC(cu.end_capture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
	CHECK(g == NULL);
}

/* Every potentially unsafe call fails under a global capture. */
static void capture_unsafe_test(CUstream s, CUstream t, CUevent ev)
{
	unsigned long inv;
	struct chunk c;
	int k;

	chunk_get(&c);
	for (k = 0; k < 5; k++) {
		inv = fc.captures_invalidated();
		OK(cu.begin_capture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
		switch (k) {
		case 0:
			VIOL(cu.ctx_sync(),
			     CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
			break;
		case 1:
			VIOL(cu.stream_sync(t),
			     CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
			break;
		case 2:
			VIOL(cu.event_sync(ev),
			     CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
			break;
		case 3:
			VIOL(cu.unmap(c.va, 2 * GRAN),
			     CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
			break;
		default:
			VIOL(cu.mem_release(c.h),
			     CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
			break;
		}
		CHECK(fc.captures_invalidated() == inv + 1);
		/* the invalidated capture refuses further work */
		CHECK_RC(cu.event_record(ev, s),
			 CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
		end_invalidated(s);
	}
	CHECK(fc.live_mappings() == 1 && fc.live_handles() == 1);
	chunk_put(&c);
}

/* A capture begun (and later ended) by another thread. */
struct capturer {
	CUcontext ctx;
	CUstream s;
	CUstreamCaptureMode mode;
	bool invalidated; /* by the other thread: the end fails */
	pthread_barrier_t begun, done;
};

static void *capturer(void *arg)
{
	struct capturer *c = arg;
	CUgraph g = NULL;

	OK(cu.ctx_set(c->ctx));
	OK(cu.begin_capture(c->s, c->mode));
	pthread_barrier_wait(&c->begun);
	pthread_barrier_wait(&c->done);
	if (c->invalidated) {
		end_invalidated(c->s);
	} else {
		OK(cu.end_capture(c->s, &g));
		OK(cu.graph_destroy(g));
	}
	OK(cu.ctx_set(NULL));
	return NULL;
}

/*
 * This thread's synchronisation against a capture of another thread
 * begun in @mode, with this thread's mode @mine: @refused says whether
 * the driver refuses it.
 */
static void capture_thread_case(CUcontext ctx0, CUstreamCaptureMode mode,
				CUstreamCaptureMode mine, bool refused)
{
	struct capturer c = { .ctx = ctx0, .mode = mode };
	CUstreamCaptureMode old = mine;
	pthread_t th;

	OK(cu.stream_create(&c.s, 0));
	pthread_barrier_init(&c.begun, NULL, 2);
	pthread_barrier_init(&c.done, NULL, 2);
	CHECK(pthread_create(&th, NULL, capturer, &c) == 0);
	pthread_barrier_wait(&c.begun);
	OK(cu.exchange_mode(&old));
	CHECK(old == CU_STREAM_CAPTURE_MODE_GLOBAL);
	if (refused)
		VIOL(cu.ctx_sync(), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
	else
		OK(cu.ctx_sync());
	c.invalidated = refused;
	OK(cu.exchange_mode(&old));
	CHECK(old == mine);
	pthread_barrier_wait(&c.done);
	pthread_join(th, NULL);
	pthread_barrier_destroy(&c.begun);
	pthread_barrier_destroy(&c.done);
	OK(cu.stream_destroy(c.s));
}

static void capture_test(CUcontext ctx0)
{
	CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
	CUstream s = NULL, t = NULL, nb = NULL;
	CUevent e = NULL, outside = NULL;
	CUstreamCaptureMode mode;
	cuuint64_t id = 0;
	CUgraph g = NULL;
	unsigned long inv = fc.captures_invalidated();

	OK(cu.stream_create(&s, 0));
	OK(cu.stream_create(&t, 0));
	OK(cu.stream_create(&nb, CU_STREAM_NON_BLOCKING));
	OK(cu.event_create(&e, CU_EVENT_DISABLE_TIMING));
	OK(cu.event_create(&outside, CU_EVENT_DISABLE_TIMING));

	/* A clean capture forks to t and joins back: a graph. */
	OK(cu.is_capturing(s, &st));
	CHECK(st == CU_STREAM_CAPTURE_STATUS_NONE);
	VIOL(cu.begin_capture(NULL, CU_STREAM_CAPTURE_MODE_GLOBAL),
	     CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
	VIOL(cu.begin_capture(s, (CUstreamCaptureMode)7),
	     CUDA_ERROR_INVALID_VALUE);
	OK(cu.begin_capture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
	OK(cu.capture_info(s, &st, &id, NULL, NULL, NULL));
	CHECK(st == CU_STREAM_CAPTURE_STATUS_ACTIVE && id != 0);
	VIOL(cu.begin_capture(s, CU_STREAM_CAPTURE_MODE_GLOBAL),
	     CUDA_ERROR_ILLEGAL_STATE);
	OK(cu.event_record(e, s));
	OK(cu.stream_wait(t, e, 0)); /* t joins the capture */
	OK(cu.is_capturing(t, &st));
	CHECK(st == CU_STREAM_CAPTURE_STATUS_ACTIVE);
	OK(cu.event_record(e, t));
	OK(cu.stream_wait(s, e, 0));
	/* streams outside the capture go on working */
	OK(cu.event_record(outside, nb));
	VIOL(cu.end_capture(t, &g), CUDA_ERROR_STREAM_CAPTURE_UNMATCHED);
	OK(cu.end_capture(s, &g));
	CHECK(g != NULL && fc.live_graphs() == 1);
	OK(cu.is_capturing(t, &st));
	CHECK(st == CU_STREAM_CAPTURE_STATUS_NONE);
	OK(cu.graph_destroy(g));
	VIOL(cu.graph_destroy(g), CUDA_ERROR_INVALID_VALUE);
	VIOL(cu.end_capture(s, &g), CUDA_ERROR_ILLEGAL_STATE);
	CHECK(fc.captures_invalidated() == inv);

	/* Waiting for uncaptured work: isolation (what stalloc did). */
	OK(cu.event_record(outside, t));
	OK(cu.begin_capture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
	VIOL(cu.stream_wait(s, outside, 0),
	     CUDA_ERROR_STREAM_CAPTURE_ISOLATION);
	OK(cu.is_capturing(s, &st));
	CHECK(st == CU_STREAM_CAPTURE_STATUS_INVALIDATED);
	end_invalidated(s);
	CHECK(fc.captures_invalidated() == inv + 1);

	/* Querying the capturing stream or a captured event. */
	OK(cu.begin_capture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
	VIOL(cu.stream_query(s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
	end_invalidated(s);
	OK(cu.begin_capture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
	OK(cu.event_record(e, s));
	VIOL(cu.event_query(e), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
	end_invalidated(s);
	OK(cu.begin_capture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
	VIOL(cu.stream_sync(s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
	end_invalidated(s);

	/* Work on the legacy stream beside a capturing blocking stream. */
	OK(cu.begin_capture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
	OK(cu.ctx_sync()); /* relaxed: unsafe calls are allowed */
	OK(cu.event_record(outside, CU_STREAM_PER_THREAD));
	VIOL(cu.event_record(outside, NULL),
	     CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
	end_invalidated(s);
	OK(cu.begin_capture(nb, CU_STREAM_CAPTURE_MODE_GLOBAL));
	OK(cu.event_record(outside, CU_STREAM_LEGACY)); /* nb: no tie */
	OK(cu.end_capture(nb, &g));
	OK(cu.graph_destroy(g));
	CHECK(fc.captures_invalidated() == inv + 5);

	capture_unsafe_test(s, t, outside);

	/* Capture modes: this thread's own captures... */
	OK(cu.begin_capture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
	VIOL(cu.ctx_sync(), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
	end_invalidated(s);
	mode = CU_STREAM_CAPTURE_MODE_RELAXED;
	OK(cu.exchange_mode(&mode));
	CHECK(mode == CU_STREAM_CAPTURE_MODE_GLOBAL);
	OK(cu.begin_capture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
	OK(cu.ctx_sync()); /* a relaxed thread may */
	OK(cu.end_capture(s, &g));
	OK(cu.graph_destroy(g));
	OK(cu.exchange_mode(&mode));
	CHECK(mode == CU_STREAM_CAPTURE_MODE_RELAXED);
	mode = (CUstreamCaptureMode)9;
	VIOL(cu.exchange_mode(&mode), CUDA_ERROR_INVALID_VALUE);
	/* ... and another thread's */
	capture_thread_case(ctx0, CU_STREAM_CAPTURE_MODE_GLOBAL,
			    CU_STREAM_CAPTURE_MODE_GLOBAL, true);
	capture_thread_case(ctx0, CU_STREAM_CAPTURE_MODE_GLOBAL,
			    CU_STREAM_CAPTURE_MODE_THREAD_LOCAL, false);
	capture_thread_case(ctx0, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
			    CU_STREAM_CAPTURE_MODE_GLOBAL, false);
	capture_thread_case(ctx0, CU_STREAM_CAPTURE_MODE_RELAXED,
			    CU_STREAM_CAPTURE_MODE_GLOBAL, false);

	CHECK(fc.live_graphs() == 0);
	OK(cu.event_destroy(e));
	OK(cu.event_destroy(outside));
	OK(cu.stream_destroy(s));
	OK(cu.stream_destroy(t));
	OK(cu.stream_destroy(nb));
}

/* The three default streams are distinct; handles keep to their context. */
static void default_stream_test(void)
{
	CUcontext c1 = NULL, popped = NULL;
	CUstream s = NULL, s1 = NULL;
	CUevent e1 = NULL;
	struct chunk c;

	CHECK(fc.stream_hold(CU_STREAM_PER_THREAD, 1) == 0);
	CHECK_RC(cu.stream_query(CU_STREAM_PER_THREAD), CUDA_ERROR_NOT_READY);
	OK(cu.stream_query(NULL));
	OK(cu.stream_query(CU_STREAM_LEGACY));
	OK(cu.stream_sync(CU_STREAM_PER_THREAD));
	CHECK(fc.stream_hold(CU_STREAM_LEGACY, 1) == 0);
	CHECK_RC(cu.stream_query(NULL), CUDA_ERROR_NOT_READY);
	OK(cu.stream_query(CU_STREAM_PER_THREAD));
	OK(cu.stream_sync(NULL));

	/* device 1's context: its stream and event are not device 0's */
	OK(cu.retain(&c1, 1));
	OK(cu.ctx_push(c1));
	OK(cu.stream_create(&s1, 0));
	OK(cu.event_create(&e1, 0));
	OK(cu.ctx_pop(&popped));
	CHECK(popped == c1);
	OK(cu.stream_create(&s, 0));
	VIOL(cu.event_record(e1, s), CUDA_ERROR_INVALID_HANDLE);
	OK(cu.event_record(e1, s1)); /* the current context does not matter */
	OK(cu.stream_wait(s, e1, 0)); /* nor across devices for a wait */
	chunk_get(&c);
	CHECK(fc.launch(s1, c.va, 64, 1) == CUDA_ERROR_INVALID_CONTEXT);
	expected_viol++;
	chunk_put(&c);
	OK(cu.event_destroy(e1));
	OK(cu.stream_destroy(s1));
	OK(cu.stream_destroy(s));
	VIOL(cu.stream_sync(s), CUDA_ERROR_INVALID_HANDLE);
	VIOL(cu.event_record(e1, NULL), CUDA_ERROR_INVALID_HANDLE);
	OK(cu.release(1));
}

/* The work model: conflicting accesses of streams must be ordered. */
static void work_test(void)
{
	CUstream s = NULL, t = NULL, nb = NULL;
	unsigned char buf[16];
	CUevent e = NULL;
	struct chunk c;
	CUdeviceptr va;

	chunk_get(&c);
	va = c.va;
	OK(cu.stream_create(&s, 0));
	OK(cu.stream_create(&t, 0));
	OK(cu.stream_create(&nb, CU_STREAM_NON_BLOCKING));
	OK(cu.event_create(&e, CU_EVENT_DISABLE_TIMING));

	/* Bad ranges are refused like copies. */
	CHECK(fc.launch(s, va + 2 * GRAN, 64, 0) == CUDA_ERROR_INVALID_VALUE);
	expected_viol++;
	CHECK(fc.calls("fakecuda_launch") > 0);

	/* Streams not held complete at once: anything after is ordered. */
	NO_VIOL(fc.launch(s, va, 4096, 1));
	NO_VIOL(fc.launch(t, va, 4096, 1));

	/* A held stream's write, then another stream's read: unordered... */
	CHECK(fc.stream_hold(s, 1) == 0);
	NO_VIOL(fc.launch(s, va, 4096, 1));
	ONE_VIOL(fc.launch(t, va + 100, 8, 0));
	/* ... unless the ranges are apart, or both only read */
	NO_VIOL(fc.launch(t, va + 4096, 4096, 1));
	NO_VIOL(fc.launch(s, va + GRAN, 64, 0));
	NO_VIOL(fc.launch(t, va + GRAN, 64, 0));
	ONE_VIOL(fc.launch(t, va + GRAN, 64, 1)); /* write after a read */
	/* an event recorded after the write orders the waiter */
	OK(cu.event_record(e, s));
	OK(cu.stream_wait(t, e, 0));
	NO_VIOL(fc.launch(t, va, 4096, 1));
	/* but not after work launched on s later */
	NO_VIOL(fc.launch(s, va + 8192, 64, 1));
	ONE_VIOL(fc.launch(t, va + 8192, 64, 0));
	/* the legacy stream is ordered after a blocking stream's work */
	NO_VIOL(fc.launch(NULL, va, 64, 0));
	/* unmapping memory a stream still uses */
	ONE_VIOL(cu.unmap(va, 2 * GRAN));
	OK(cu.map(va, 2 * GRAN, 0, c.h, 0));
	OK(set_access(va, 2 * GRAN, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE));
	OK(cu.stream_sync(s));

	/* Synchronisations complete the work: event, context, stream. */
	CHECK(fc.stream_hold(s, 1) == 0);
	NO_VIOL(fc.launch(s, va, 64, 1));
	OK(cu.event_record(e, s));
	OK(cu.event_sync(e));
	NO_VIOL(fc.launch(t, va, 64, 1));
	CHECK(fc.stream_hold(s, 1) == 0);
	NO_VIOL(fc.launch(s, va, 64, 1));
	OK(cu.ctx_sync());
	NO_VIOL(fc.launch(t, va, 64, 1));

	/* A non-blocking stream is not ordered with the legacy one: a
	 * synchronous copy (legacy stream work) races with it. */
	CHECK(fc.stream_hold(nb, 1) == 0);
	NO_VIOL(fc.launch(nb, va, 64, 1));
	ONE_VIOL(fc.launch(NULL, va, 64, 0));
	expected_viol++;
	CHECK(cu.dtoh(buf, va, sizeof(buf)) == CUDA_SUCCESS);
	/* the per-thread default stream is not ordered with s either */
	OK(cu.stream_sync(nb));
	CHECK(fc.stream_hold(s, 1) == 0);
	NO_VIOL(fc.launch(s, va, 64, 1));
	ONE_VIOL(fc.launch(CU_STREAM_PER_THREAD, va, 64, 1));
	NO_VIOL(fc.launch(CU_STREAM_LEGACY, va, 64, 1));
	OK(cu.stream_destroy(s)); /* completes its work */
	NO_VIOL(fc.launch(t, va, 64, 1));

	OK(cu.event_destroy(e));
	OK(cu.stream_destroy(t));
	OK(cu.stream_destroy(nb));
	chunk_put(&c);
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
	default_stream_test();
	capture_test(ctx0);
	work_test();
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
