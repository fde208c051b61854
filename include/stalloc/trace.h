/* SPDX-License-Identifier: MIT */
/*
 * stalloc/trace.h - read allocation traces, with each request's class
 *
 * For tools that look at traces (timelines, replays): parse a trace in
 * text format v1 (trace-format.rst), find its iterations and classify each
 * allocation as the planner does.  Conventions of stalloc.h: 0 or a
 * negative errno, and stalloc_last_error() names file and line.
 */
#ifndef STALLOC_TRACE_H
#define STALLOC_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include <stalloc/stalloc.h>

#ifdef __cplusplus
extern "C" {
#endif

struct stalloc_trace;

/**
 * enum stalloc_class - what the planner made of an allocation
 * @STALLOC_CLASS_NONE: set-up, first iteration, tear-down
 * @STALLOC_CLASS_PERSISTENT: weights, optimizer state
 * @STALLOC_CLASS_STATIC: repeats every iteration (cross too)
 * @STALLOC_CLASS_DYNAMIC: varies between iterations
 */
enum stalloc_class {
	STALLOC_CLASS_NONE = 0,
	STALLOC_CLASS_PERSISTENT,
	STALLOC_CLASS_STATIC,
	STALLOC_CLASS_DYNAMIC,
};

/**
 * struct stalloc_trace_event - one event of a trace
 * @op: 'a' allocation, 'f' free, 'm' marker
 * @seq: logical time
 * @id: the allocation's ID (alloc and free)
 * @size: bytes (a free: the size of what it frees)
 * @stream: stream key
 * @ns: timestamp key
 * @dev: device key
 * @cls: enum stalloc_class of the allocation (a free: of what it frees)
 * @label: a marker's label, else NULL
 */
struct stalloc_trace_event {
	char op;
	uint64_t seq;
	uint64_t id;
	uint64_t size;
	uint64_t stream;
	uint64_t ns;
	int dev;
	int cls;
	const char *label;
};

/**
 * stalloc_trace_load() - parse and classify a trace
 * @path: the trace file
 * @out: the trace, to be freed with stalloc_trace_free()
 *
 * Return: 0, or -EINVAL (naming file and line), -ENOENT, -EIO, -ENOMEM.
 */
STALLOC_API int stalloc_trace_load(const char *path,
				   struct stalloc_trace **out);

/**
 * stalloc_trace_count() - the number of events
 * @t: the trace
 *
 * Return: how many events @t has.
 */
STALLOC_API size_t stalloc_trace_count(const struct stalloc_trace *t);

/**
 * stalloc_trace_get() - one event
 * @t: the trace
 * @i: its index, 0 <= @i < stalloc_trace_count()
 * @e: filled in (@e->label is owned by @t)
 */
STALLOC_API void stalloc_trace_get(const struct stalloc_trace *t, size_t i,
				   struct stalloc_trace_event *e);

/**
 * stalloc_trace_iterations() - where the iterations start
 * @t: the trace
 * @first: set to an array of the event indices where iterations start
 *	(owned by @t)
 *
 * Return: the number of iterations (0 when no repetition was found).
 */
STALLOC_API size_t stalloc_trace_iterations(const struct stalloc_trace *t,
					    const size_t **first);

/**
 * stalloc_trace_free() - free a trace
 * @t: the trace, or NULL
 */
STALLOC_API void stalloc_trace_free(struct stalloc_trace *t);

#ifdef __cplusplus
}
#endif
#endif /* STALLOC_TRACE_H */
