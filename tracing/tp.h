/* SPDX-License-Identifier: MIT */
/*
 * tracing/tp.h - tracepoints of libstalloc (internal)
 *
 * libstalloc has no link-time dependency on lttng-ust: its tracepoints are
 * calls through a table of functions that the separate provider library
 * (build/libstalloc-lttng.so, tracing/lttng-provider.c) fills, loaded with
 * dlopen only when STALLOC_LTTNG=1.  Until then the table pointer is NULL
 * and a tracepoint costs one relaxed load and a predicted branch.
 */
#ifndef STALLOC_TRACING_TP_H
#define STALLOC_TRACING_TP_H

#include <stdint.h>

#include "../lib/util.h"

/* Allocation classes in the alloc event. */
enum sa_tp_class {
	SA_TP_DYNAMIC = 0,
	SA_TP_PLANNED = 1,
	SA_TP_REUSED = 2,
};

/**
 * struct sa_tp_ops - the events (stalloc:NAME in lttng)
 * @version: SA_TP_VERSION of the provider
 */
struct sa_tp_ops {
	int version;
	void (*alloc)(int dev, uint64_t ptr, uint64_t size, uint64_t stream,
		      int cls);
	void (*free)(int dev, uint64_t ptr, uint64_t size, uint64_t stream);
	void (*plan_hit)(int dev, uint64_t ptr, uint64_t size, uint64_t offset);
	void (*plan_miss)(int dev, uint64_t size);
	void (*map)(int dev, uint64_t va, uint64_t bytes);
	void (*unmap)(int dev, uint64_t va, uint64_t bytes);
	void (*grow)(int dev, uint64_t top);
	void (*shrink)(int dev, uint64_t bytes);
	void (*mark)(const char *label);
	void (*oom)(int dev, uint64_t size);
};

#define SA_TP_VERSION 1

extern const struct sa_tp_ops *sa_tp;

/* Load the provider if STALLOC_LTTNG=1 (once; safe to call again). */
void sa_tp_init(void);

/* Fire event @ev if tracing is on. */
#define sa_trace(ev, ...)                                          \
	do {                                                       \
		const struct sa_tp_ops *__tp =                     \
			__atomic_load_n(&sa_tp, __ATOMIC_RELAXED); \
		if (unlikely(__tp))                                \
			__tp->ev(__VA_ARGS__);                     \
	} while (0)

#endif /* STALLOC_TRACING_TP_H */
