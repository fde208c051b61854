/* SPDX-License-Identifier: MIT */
/*
 * planner/trace.h - allocation traces, text format v1 (internal)
 *
 *   stalloc-trace 1
 *   a SEQ ID SIZE [key=value ...]   allocation (keys: stream=HEX dev=N ns=T)
 *   f SEQ ID [key=value ...]        free of allocation ID
 *   m SEQ LABEL                     marker ("iteration" starts one)
 *   # comment
 *
 * See Documentation/trace-format.rst.  The parser checks everything a
 * planner relies on: SEQ strictly increases, sizes are positive, every free
 * names a live allocation, no live ID is allocated again.  After parsing,
 * every alloc and its free point at each other through @peer.
 */
#ifndef STALLOC_PLANNER_TRACE_H
#define STALLOC_PLANNER_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TRACE_NONE UINT32_MAX

enum trace_op {
	TRACE_ALLOC = 'a',
	TRACE_FREE = 'f',
	TRACE_MARK = 'm',
};

/**
 * struct trace_event - one line of a trace
 * @seq: logical time (strictly increasing)
 * @id: alloc and free: the allocation's ID; mark: index into labels
 * @size: alloc: bytes; free: the size of the allocation freed
 * @stream: the stream key (0 if absent)
 * @ns: the ns key (0 if absent)
 * @line: line number in the file
 * @dev: the dev key (0 if absent)
 * @peer: alloc: index of its free (TRACE_NONE if never freed); free: index
 *	of its alloc
 * @op: enum trace_op
 */
struct trace_event {
	uint64_t seq;
	uint64_t id;
	uint64_t size;
	uint64_t stream;
	uint64_t ns;
	uint32_t line;
	int32_t dev;
	uint32_t peer;
	char op;
};

/**
 * struct trace - a parsed trace
 * @name: the file name, for messages
 * @ev: events in file order
 * @nr: number of events
 * @labels: distinct marker labels
 * @nr_labels: number of labels
 * @nr_allocs: number of allocations
 */
struct trace {
	char *name;
	struct trace_event *ev;
	size_t nr;
	size_t cap;
	char **labels;
	size_t nr_labels;
	size_t nr_allocs;
};

/* Parse the trace in @path; errors name the file and the line. */
int trace_load(const char *path, struct trace *t);
int trace_parse(const char *name, const char *text, size_t len,
		struct trace *t);
void trace_free(struct trace *t);
/* True if mark event @e has label @label. */
bool trace_mark_is(const struct trace *t, const struct trace_event *e,
		   const char *label);

#endif /* STALLOC_PLANNER_TRACE_H */
