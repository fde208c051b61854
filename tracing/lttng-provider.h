/* SPDX-License-Identifier: MIT */
/*
 * tracing/lttng-provider.h - the stalloc lttng-ust tracepoint provider
 *
 * Events stalloc:alloc, free, plan_hit, plan_miss, map, unmap, grow,
 * shrink, mark, oom.  Included twice by lttng-provider.c, as lttng-ust
 * wants (once with TRACEPOINT_CREATE_PROBES).  See Documentation/tracing.rst
 * for the fields.
 */
#undef TRACEPOINT_PROVIDER
#define TRACEPOINT_PROVIDER stalloc

#undef TRACEPOINT_INCLUDE
#define TRACEPOINT_INCLUDE "./tracing/lttng-provider.h"

#if !defined(STALLOC_LTTNG_PROVIDER_H) || defined(TRACEPOINT_HEADER_MULTI_READ)
#define STALLOC_LTTNG_PROVIDER_H

#include <lttng/tracepoint.h>

TRACEPOINT_EVENT(stalloc, alloc,
		 TP_ARGS(int, dev, uint64_t, ptr, uint64_t, size, uint64_t,
			 stream, int, cls),
		 TP_FIELDS(ctf_integer(int, dev, dev) ctf_integer_hex(
			 uint64_t, ptr, ptr) ctf_integer(uint64_t, size, size)
				   ctf_integer_hex(uint64_t, stream, stream)
					   ctf_integer(int, cls, cls)))

TRACEPOINT_EVENT(
	stalloc, free,
	TP_ARGS(int, dev, uint64_t, ptr, uint64_t, size, uint64_t, stream),
	TP_FIELDS(ctf_integer(int, dev, dev) ctf_integer_hex(uint64_t, ptr, ptr)
			  ctf_integer(uint64_t, size, size)
				  ctf_integer_hex(uint64_t, stream, stream)))

TRACEPOINT_EVENT(
	stalloc, plan_hit,
	TP_ARGS(int, dev, uint64_t, ptr, uint64_t, size, uint64_t, offset),
	TP_FIELDS(ctf_integer(int, dev, dev) ctf_integer_hex(uint64_t, ptr, ptr)
			  ctf_integer(uint64_t, size, size)
				  ctf_integer(uint64_t, offset, offset)))

TRACEPOINT_EVENT(stalloc, plan_miss, TP_ARGS(int, dev, uint64_t, size),
		 TP_FIELDS(ctf_integer(int, dev, dev)
				   ctf_integer(uint64_t, size, size)))

TRACEPOINT_EVENT(stalloc, map, TP_ARGS(int, dev, uint64_t, va, uint64_t, bytes),
		 TP_FIELDS(ctf_integer(int, dev, dev)
				   ctf_integer_hex(uint64_t, va, va)
					   ctf_integer(uint64_t, bytes, bytes)))

TRACEPOINT_EVENT(stalloc, unmap,
		 TP_ARGS(int, dev, uint64_t, va, uint64_t, bytes),
		 TP_FIELDS(ctf_integer(int, dev, dev)
				   ctf_integer_hex(uint64_t, va, va)
					   ctf_integer(uint64_t, bytes, bytes)))

TRACEPOINT_EVENT(stalloc, grow, TP_ARGS(int, dev, uint64_t, top),
		 TP_FIELDS(ctf_integer(int, dev, dev)
				   ctf_integer_hex(uint64_t, top, top)))

TRACEPOINT_EVENT(stalloc, shrink, TP_ARGS(int, dev, uint64_t, bytes),
		 TP_FIELDS(ctf_integer(int, dev, dev)
				   ctf_integer(uint64_t, bytes, bytes)))

TRACEPOINT_EVENT(stalloc, mark, TP_ARGS(const char *, label),
		 TP_FIELDS(ctf_string(label, label)))

TRACEPOINT_EVENT(stalloc, oom, TP_ARGS(int, dev, uint64_t, size),
		 TP_FIELDS(ctf_integer(int, dev, dev)
				   ctf_integer(uint64_t, size, size)))

#endif /* STALLOC_LTTNG_PROVIDER_H */

#include <lttng/tracepoint-event.h>
