/* SPDX-License-Identifier: MIT */
/*
 * tests/vmm-fixture.h - what the vmm tests and benchmarks share
 *
 * A test names its backend ("host" or "cuda"); "cuda" runs on the driver
 * named by STALLOC_LIBCUDA (the fake driver under make check), or on
 * libcuda.so.1 when it is unset.  When that driver is the fake one,
 * fx_fake() gives its control interface, found with dlopen(RTLD_NOLOAD) on
 * the library the backend already loaded.
 *
 * Device memory is not host memory: on the cuda backend no test may load
 * or store through a device address (the real driver and the fake both
 * fault).  fx_poke(), fx_peek(), fx_memset(), fx_copy() and the pattern
 * helpers fx_fill()/fx_check() move bytes with memcpy on the host backend
 * and with the driver's synchronous copies on the cuda backend, in the
 * primary context of device 0 (made current for the copy unless a context
 * is current already).  On the fake driver those calls are set aside from
 * its call counters and fault injection (fakecuda_aside()).
 */
#ifndef STALLOC_TESTS_VMM_FIXTURE_H
#define STALLOC_TESTS_VMM_FIXTURE_H

#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <stalloc/stalloc.h>

#include "vmm/vmm.h"

struct fx_fake {
	int (*fail_nth)(const char *call, unsigned long nth, int err);
	int (*fail_always)(const char *call, int err);
	void (*fail_clear)(void);
	unsigned long (*calls)(const char *call);
	unsigned long (*calls_total)(void);
	unsigned long (*live_reservations)(void);
	unsigned long (*live_handles)(void);
	unsigned long (*live_mappings)(void);
	unsigned long (*live_primary_retains)(void);
	unsigned long (*violations)(void);
};

/* The fake driver's controls, or NULL when the driver is not the fake. */
static inline const struct fx_fake *fx_fake(void)
{
	static struct fx_fake f;
	static int state; /* 0 unknown, 1 fake, -1 not */
	const char *path = getenv("STALLOC_LIBCUDA");
	void *h;

	if (state)
		return state > 0 ? &f : NULL;
	state = -1;
	if (!path || !vmm_cuda_available())
		return NULL;
	h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
	if (!h)
		return NULL;
#define FX_SYM(field) (*(void **)&f.field = dlsym(h, "fakecuda_" #field))
	if (!FX_SYM(fail_nth) || !FX_SYM(fail_always) || !FX_SYM(fail_clear) ||
	    !FX_SYM(calls) || !FX_SYM(calls_total) ||
	    !FX_SYM(live_reservations) || !FX_SYM(live_handles) ||
	    !FX_SYM(live_mappings) || !FX_SYM(live_primary_retains) ||
	    !FX_SYM(violations))
		return NULL;
#undef FX_SYM
	state = 1;
	return &f;
}

/* A small space: 64 chunks of address space, a 32-chunk physical limit. */
static inline int fx_space(const char *backend, uint64_t chunk,
			   struct vmm_space **out)
{
	struct vmm_config cfg = {
		.backend = backend,
		.device = 0,
		.va_bytes = 64 * chunk,
		.chunk_bytes = chunk,
		.phys_limit = 32 * chunk,
		.host_device_bytes = 64 * chunk,
	};

	return vmm_space_create(&cfg, out);
}

/* ------------------------------------------------ device memory access */

/* Whether @backend (a name, "auto" or NULL for auto) is the cuda backend. */
static inline bool fx_is_cuda(const char *backend)
{
	if (backend && !strcasecmp(backend, "cuda"))
		return true;
	if (backend && *backend && strcasecmp(backend, "auto"))
		return false;
	return vmm_cuda_available();
}

/* The backend stalloc_malloc() uses: STALLOC_BACKEND, resolved. */
static inline const char *fx_env_backend(void)
{
	static int cuda = -1; /* auto, resolved once */
	const char *b = getenv("STALLOC_BACKEND");

	if (b && *b && strcasecmp(b, "auto"))
		return b;
	if (cuda < 0)
		cuda = vmm_cuda_available();
	return cuda ? "cuda" : "host";
}

/*
 * The driver entry points the helpers use, without the CUDA headers (the
 * tests build without them): CUresult is an int, CUdeviceptr 64 bits.
 */
struct fx_drv {
	int (*ctx_get_current)(void **ctx);
	int (*ctx_get_device)(int *dev);
	int (*primary_retain)(void **ctx, int dev);
	int (*primary_release)(int dev);
	int (*ctx_push)(void *ctx);
	int (*ctx_pop)(void **ctx);
	int (*htod)(unsigned long long dst, const void *src, size_t n);
	int (*dtoh)(void *dst, unsigned long long src, size_t n);
	int (*dtod)(unsigned long long dst, unsigned long long src, size_t n);
	int (*memset8)(unsigned long long dst, unsigned char c, size_t n);
	int (*total_mem)(size_t *bytes, int dev);
	void (*aside)(int on); /* the fake's, else NULL */
	bool ok;
};

static struct fx_drv fx_drv_tab;
static pthread_once_t fx_drv_once = PTHREAD_ONCE_INIT;

static inline void fx_drv_load(void)
{
	typedef int (*getproc_fn)(const char *, void **, int,
				  unsigned long long, int *);
	static const struct {
		const char *name;
		size_t off;
	} syms[] = {
#define FX_DRV(field, name) { name, offsetof(struct fx_drv, field) }
		FX_DRV(ctx_get_current, "cuCtxGetCurrent"),
		FX_DRV(ctx_get_device, "cuCtxGetDevice"),
		FX_DRV(primary_retain, "cuDevicePrimaryCtxRetain"),
		FX_DRV(primary_release, "cuDevicePrimaryCtxRelease"),
		FX_DRV(ctx_push, "cuCtxPushCurrent"),
		FX_DRV(ctx_pop, "cuCtxPopCurrent"),
		FX_DRV(htod, "cuMemcpyHtoD"),
		FX_DRV(dtoh, "cuMemcpyDtoH"),
		FX_DRV(dtod, "cuMemcpyDtoD"),
		FX_DRV(memset8, "cuMemsetD8"),
		FX_DRV(total_mem, "cuDeviceTotalMem"),
#undef FX_DRV
	};
	const char *path = getenv("STALLOC_LIBCUDA");
	getproc_fn getproc;
	void *h;
	size_t i;

	if (!vmm_cuda_available()) /* loads the driver, runs cuInit */
		return;
	h = dlopen(path && *path ? path : "libcuda.so.1",
		   RTLD_NOW | RTLD_NOLOAD);
	if (!h)
		return;
	*(void **)&getproc = dlsym(h, "cuGetProcAddress_v2");
	if (!getproc)
		return;
	for (i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
		void *fn = NULL;
		int st = -1;

		/* 12000: the ABI the backend asks for (the _v2 entries) */
		if (getproc(syms[i].name, &fn, 12000, 0, &st) || !fn || st)
			return;
		memcpy((char *)&fx_drv_tab + syms[i].off, &fn, sizeof(fn));
	}
	*(void **)&fx_drv_tab.aside = dlsym(h, "fakecuda_aside");
	fx_drv_tab.ok = true;
}

/*
 * Enter device @dev's context for a copy: *@ctx is the primary context
 * pushed (to be popped and released by fx_drv_leave), NULL if a context of
 * @dev was current already.
 */
static inline const struct fx_drv *fx_drv_enter(int dev, void **ctx)
{
	const struct fx_drv *d = &fx_drv_tab;
	void *cur = NULL;
	int cur_dev = -1;

	pthread_once(&fx_drv_once, fx_drv_load);
	*ctx = NULL;
	if (!d->ok) {
		fprintf(stderr, "fixture: no driver to reach device memory\n");
		return NULL;
	}
	if (d->aside)
		d->aside(1);
	if (d->ctx_get_current(&cur) == 0 && cur &&
	    d->ctx_get_device(&cur_dev) == 0 && cur_dev == dev)
		return d;
	if (d->primary_retain(ctx, dev) == 0) {
		if (d->ctx_push(*ctx) == 0)
			return d;
		d->primary_release(dev);
	}
	*ctx = NULL;
	if (d->aside)
		d->aside(0);
	fprintf(stderr, "fixture: cannot make device %d's context current\n",
		dev);
	return NULL;
}

static inline void fx_drv_leave(const struct fx_drv *d, int dev, void *ctx)
{
	void *popped;

	if (ctx) {
		d->ctx_pop(&popped);
		d->primary_release(dev);
	}
	if (d->aside)
		d->aside(0);
}

/* Report a failed copy (with the driver's CUresult); returns -1. */
static inline int fx_copy_failed(const char *what, uint64_t va, size_t n,
				 int rc)
{
	fprintf(stderr, "fixture: %s 0x%llx + %zu: CUresult %d\n", what,
		(unsigned long long)va, n, rc);
	return -1;
}

/* Write @n bytes of @buf at address @va of device @dev; 0 or -1. */
static inline int fx_poke_on(const char *backend, int dev, uint64_t va,
			     const void *buf, size_t n)
{
	const struct fx_drv *d;
	void *ctx;
	int rc;

	if (!fx_is_cuda(backend)) {
		memcpy((void *)(uintptr_t)va, buf, n);
		return 0;
	}
	d = fx_drv_enter(dev, &ctx);
	if (!d)
		return -1;
	rc = d->htod(va, buf, n);
	fx_drv_leave(d, dev, ctx);
	return rc ? fx_copy_failed("cuMemcpyHtoD", va, n, rc) : 0;
}

/* The same on device 0. */
static inline int fx_poke(const char *backend, uint64_t va, const void *buf,
			  size_t n)
{
	return fx_poke_on(backend, 0, va, buf, n);
}

/* Read @n bytes at address @va of device @dev into @buf; 0 or -1. */
static inline int fx_peek_on(const char *backend, int dev, void *buf,
			     uint64_t va, size_t n)
{
	const struct fx_drv *d;
	void *ctx;
	int rc;

	if (!fx_is_cuda(backend)) {
		memcpy(buf, (const void *)(uintptr_t)va, n);
		return 0;
	}
	d = fx_drv_enter(dev, &ctx);
	if (!d)
		return -1;
	rc = d->dtoh(buf, va, n);
	fx_drv_leave(d, dev, ctx);
	return rc ? fx_copy_failed("cuMemcpyDtoH", va, n, rc) : 0;
}

/* The same on device 0. */
static inline int fx_peek(const char *backend, void *buf, uint64_t va, size_t n)
{
	return fx_peek_on(backend, 0, buf, va, n);
}

/* Set @n bytes at device address @va to @c; 0 or -1. */
static inline int fx_memset(const char *backend, uint64_t va, int c, size_t n)
{
	const struct fx_drv *d;
	void *ctx;
	int rc;

	if (!fx_is_cuda(backend)) {
		memset((void *)(uintptr_t)va, c, n);
		return 0;
	}
	d = fx_drv_enter(0, &ctx);
	if (!d)
		return -1;
	rc = d->memset8(va, (unsigned char)c, n);
	fx_drv_leave(d, 0, ctx);
	return rc ? fx_copy_failed("cuMemsetD8", va, n, rc) : 0;
}

/* Copy @n bytes from device address @src to @dst; 0 or -1. */
static inline int fx_copy(const char *backend, uint64_t dst, uint64_t src,
			  size_t n)
{
	const struct fx_drv *d;
	void *ctx;
	int rc;

	if (!fx_is_cuda(backend)) {
		memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src,
			n);
		return 0;
	}
	d = fx_drv_enter(0, &ctx);
	if (!d)
		return -1;
	rc = d->dtod(dst, src, n);
	fx_drv_leave(d, 0, ctx);
	return rc ? fx_copy_failed("cuMemcpyDtoD", dst, n, rc) : 0;
}

/* Total memory of device 0 on @backend (the host backend's STALLOC_HOST_MEM
 * as the tests set it), or 0 if unknown. */
static inline uint64_t fx_device_bytes(const char *backend)
{
	const struct fx_drv *d;
	uint64_t v = 0;
	size_t bytes = 0;
	void *ctx;

	if (!fx_is_cuda(backend)) {
		const char *s = getenv("STALLOC_HOST_MEM");

		return s && !stalloc_parse_size(s, &v) ? v : 0;
	}
	d = fx_drv_enter(0, &ctx);
	if (!d)
		return 0;
	if (d->total_mem(&bytes, 0))
		bytes = 0;
	fx_drv_leave(d, 0, ctx);
	return bytes;
}

/*
 * Fill [va, va + n) with a pattern derived from @seed, one word every
 * 16 KiB (enough to tell chunks and pages apart, cheap in page faults and
 * in driver calls); check it.  Both return false if a copy failed.
 */
#define FX_STRIDE 16384

static inline uint64_t fx_word(uint64_t seed, size_t i)
{
	return seed ^ (i * 0x9e3779b97f4a7c15ULL);
}

static inline bool fx_fill(const char *backend, uint64_t va, size_t n,
			   uint64_t seed)
{
	const struct fx_drv *d;
	bool ok = true;
	void *ctx;
	size_t i;

	if (!fx_is_cuda(backend)) {
		uint64_t *p = (uint64_t *)(uintptr_t)va;

		for (i = 0; i < n / 8; i += FX_STRIDE / 8)
			p[i] = fx_word(seed, i);
		return true;
	}
	d = fx_drv_enter(0, &ctx);
	if (!d)
		return false;
	for (i = 0; i < n / 8 && ok; i += FX_STRIDE / 8) {
		uint64_t w = fx_word(seed, i);
		int rc = d->htod(va + 8 * i, &w, 8);

		if (rc)
			ok = !fx_copy_failed("cuMemcpyHtoD", va + 8 * i, 8, rc);
	}
	fx_drv_leave(d, 0, ctx);
	return ok;
}

static inline bool fx_check(const char *backend, uint64_t va, size_t n,
			    uint64_t seed)
{
	const struct fx_drv *d;
	bool ok = true;
	void *ctx;
	size_t i;

	if (!fx_is_cuda(backend)) {
		const uint64_t *p = (const uint64_t *)(uintptr_t)va;

		for (i = 0; i < n / 8; i += FX_STRIDE / 8)
			if (p[i] != fx_word(seed, i))
				return false;
		return true;
	}
	d = fx_drv_enter(0, &ctx);
	if (!d)
		return false;
	for (i = 0; i < n / 8 && ok; i += FX_STRIDE / 8) {
		uint64_t w = 0;
		int rc = d->dtoh(&w, va + 8 * i, 8);

		if (rc)
			ok = !fx_copy_failed("cuMemcpyDtoH", va + 8 * i, 8, rc);
		else if (w != fx_word(seed, i))
			ok = false;
	}
	fx_drv_leave(d, 0, ctx);
	return ok;
}

#endif /* STALLOC_TESTS_VMM_FIXTURE_H */
