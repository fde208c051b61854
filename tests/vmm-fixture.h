/* SPDX-License-Identifier: MIT */
/*
 * tests/vmm-fixture.h - what the vmm tests and benchmarks share
 *
 * A test names its backend ("host" or "cuda"); "cuda" runs on the driver
 * named by STALLOC_LIBCUDA (the fake driver under make check).  When that
 * driver is the fake one, fx_fake() gives its control interface, found with
 * dlopen(RTLD_NOLOAD) on the library the backend already loaded.
 */
#ifndef STALLOC_TESTS_VMM_FIXTURE_H
#define STALLOC_TESTS_VMM_FIXTURE_H

#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/*
 * Fill [p, p + n) with a pattern derived from @seed, one word every 16 KiB
 * (enough to tell chunks and pages apart, cheap in page faults); check it.
 */
#define FX_STRIDE 16384

static inline void fx_fill(uint64_t va, size_t n, uint64_t seed)
{
	uint64_t *p = (uint64_t *)(uintptr_t)va;
	size_t i;

	for (i = 0; i < n / 8; i += FX_STRIDE / 8)
		p[i] = seed ^ (i * 0x9e3779b97f4a7c15ULL);
}

static inline bool fx_check(uint64_t va, size_t n, uint64_t seed)
{
	const uint64_t *p = (const uint64_t *)(uintptr_t)va;
	size_t i;

	for (i = 0; i < n / 8; i += FX_STRIDE / 8)
		if (p[i] != (seed ^ (i * 0x9e3779b97f4a7c15ULL)))
			return false;
	return true;
}

#endif /* STALLOC_TESTS_VMM_FIXTURE_H */
