// SPDX-License-Identifier: MIT
/*
 * tracing/lttng-provider.c - build/libstalloc-lttng.so: stalloc's lttng-ust
 * probes and the table libstalloc calls them through
 *
 * Built only when lttng-ust's headers are there.  libstalloc loads it with
 * dlopen when STALLOC_LTTNG=1 (tracing/tp.c), so libstalloc itself never
 * depends on lttng-ust.  Each function fires one tracepoint; a tracepoint
 * that no session enabled costs next to nothing (lttng-ust's own check).
 */
#define TRACEPOINT_CREATE_PROBES
#define TRACEPOINT_DEFINE
#include "lttng-provider.h"

#include "tp.h"

static void tp_alloc(int dev, uint64_t ptr, uint64_t size, uint64_t stream,
		     int cls)
{
	tracepoint(stalloc, alloc, dev, ptr, size, stream, cls);
}

static void tp_free(int dev, uint64_t ptr, uint64_t size, uint64_t stream)
{
	tracepoint(stalloc, free, dev, ptr, size, stream);
}

static void tp_plan_hit(int dev, uint64_t ptr, uint64_t size, uint64_t offset)
{
	tracepoint(stalloc, plan_hit, dev, ptr, size, offset);
}

static void tp_plan_miss(int dev, uint64_t size)
{
	tracepoint(stalloc, plan_miss, dev, size);
}

static void tp_map(int dev, uint64_t va, uint64_t bytes)
{
	tracepoint(stalloc, map, dev, va, bytes);
}

static void tp_unmap(int dev, uint64_t va, uint64_t bytes)
{
	tracepoint(stalloc, unmap, dev, va, bytes);
}

static void tp_grow(int dev, uint64_t top)
{
	tracepoint(stalloc, grow, dev, top);
}

static void tp_shrink(int dev, uint64_t bytes)
{
	tracepoint(stalloc, shrink, dev, bytes);
}

static void tp_mark(const char *label)
{
	tracepoint(stalloc, mark, label);
}

static void tp_oom(int dev, uint64_t size)
{
	tracepoint(stalloc, oom, dev, size);
}

__attribute__((visibility("default")))
const struct sa_tp_ops stalloc_lttng_ops = {
	.version = SA_TP_VERSION,
	.alloc = tp_alloc,
	.free = tp_free,
	.plan_hit = tp_plan_hit,
	.plan_miss = tp_plan_miss,
	.map = tp_map,
	.unmap = tp_unmap,
	.grow = tp_grow,
	.shrink = tp_shrink,
	.mark = tp_mark,
	.oom = tp_oom,
};
