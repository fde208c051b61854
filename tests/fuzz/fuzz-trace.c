// SPDX-License-Identifier: MIT
/*
 * tests/fuzz/fuzz-trace.c - libFuzzer target for the trace parser
 *
 * Feeds each input, as is (not NUL-terminated, so ASan sees any read past
 * the end), to trace_parse().  A trace it accepts must satisfy what the
 * header promises the planner: SEQ strictly increases, sizes are positive,
 * every alloc and its free point at each other through @peer, and mark
 * IDs index the label table.
 */
#include <stdint.h>
#include <stdlib.h>

#include "planner/trace.h"
#include "tests/fuzz/fuzz-common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_trace(const struct trace *t)
{
	const struct trace_event *e, *p;
	size_t i, allocs = 0;

	if (!t->nr || !t->nr_allocs || !t->ev)
		fuzz_fail("accepted trace has no events");
	for (i = 0; i < t->nr; i++) {
		e = &t->ev[i];
		if (i && e->seq <= t->ev[i - 1].seq)
			fuzz_fail("event %zu: SEQ does not increase", i);
		switch (e->op) {
		case TRACE_ALLOC:
			allocs++;
			if (!e->size)
				fuzz_fail("event %zu: alloc of size 0", i);
			if (e->peer == TRACE_NONE)
				break;
			if (e->peer <= i || e->peer >= t->nr)
				fuzz_fail("event %zu: bad peer %u", i, e->peer);
			p = &t->ev[e->peer];
			if (p->op != TRACE_FREE || p->peer != i ||
			    p->id != e->id || p->size != e->size)
				fuzz_fail("event %zu: peer not its free", i);
			break;
		case TRACE_FREE:
			if (e->peer >= i)
				fuzz_fail("event %zu: bad peer %u", i, e->peer);
			p = &t->ev[e->peer];
			if (p->op != TRACE_ALLOC || p->peer != i)
				fuzz_fail("event %zu: peer not its alloc", i);
			break;
		case TRACE_MARK:
			if (e->id >= t->nr_labels || !t->labels[e->id])
				fuzz_fail("event %zu: bad label %llu", i,
					  (unsigned long long)e->id);
			if (!trace_mark_is(t, e, t->labels[e->id]))
				fuzz_fail("event %zu: label mismatch", i);
			break;
		default:
			fuzz_fail("event %zu: op %d", i, e->op);
		}
	}
	if (allocs != t->nr_allocs)
		fuzz_fail("nr_allocs %zu, counted %zu", t->nr_allocs, allocs);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct trace t;
	int err;

	err = trace_parse("fuzz", (const char *)data, size, &t);
	if (err && err != -EINVAL && err != -ENOMEM)
		fuzz_fail("trace_parse returned %d", err);
	if (!err)
		check_trace(&t);
	trace_free(&t);
	return 0;
}
