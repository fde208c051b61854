// SPDX-License-Identifier: MIT
/*
 * planner/trace-api.c - the public trace reader (stalloc/trace.h)
 *
 * Parses a trace, finds its iterations and runs the planner's
 * classification to give each allocation (and its free) a class.  The
 * result is read-only; no locking.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <stalloc/trace.h>

#include "../lib/util.h"
#include "planner.h"

struct stalloc_trace {
	struct trace t;
	struct plan_iters it;
	uint8_t *cls;
};

static int public_class(uint8_t c)
{
	switch (c) {
	case PLAN_PERSISTENT:
		return STALLOC_CLASS_PERSISTENT;
	case PLAN_STATIC:
	case PLAN_CROSS:
	case PLAN_ALTERNATE:
		return STALLOC_CLASS_STATIC;
	case PLAN_DYNAMIC:
		return STALLOC_CLASS_DYNAMIC;
	default:
		return STALLOC_CLASS_NONE;
	}
}

int stalloc_trace_load(const char *path, struct stalloc_trace **out)
{
	struct stalloc_plan p = { 0 };
	struct plan_seen seen = { 0 };
	struct plan_cls_out cout = { &p, &seen, NULL };
	struct stalloc_trace *st;
	int err;

	*out = NULL;
	st = calloc(1, sizeof(*st));
	if (!st)
		return sa_error(-ENOMEM, "trace: out of memory");
	err = trace_load(path, &st->t);
	if (err)
		goto err_free;
	err = iters_find(&st->t, &st->it);
	if (err)
		goto err_trace;
	st->cls = calloc(st->t.nr + 1, 1);
	if (!st->cls) {
		err = sa_error(-ENOMEM, "trace: out of memory");
		goto err_iters;
	}
	cout.ev_class = st->cls;
	err = plan_classify(&st->t, &st->it, 1, &cout, NULL);
	plan_seen_free(&seen);
	plan_release(&p);
	if (err)
		goto err_cls;
	*out = st;
	return 0;

err_cls:
	free(st->cls);
err_iters:
	iters_free(&st->it);
err_trace:
	trace_free(&st->t);
err_free:
	free(st);
	return err;
}

size_t stalloc_trace_count(const struct stalloc_trace *t)
{
	return t->t.nr;
}

void stalloc_trace_get(const struct stalloc_trace *t, size_t i,
		       struct stalloc_trace_event *e)
{
	const struct trace_event *ev = &t->t.ev[i];
	size_t a = ev->op == TRACE_FREE ? ev->peer : i;

	memset(e, 0, sizeof(*e));
	e->op = ev->op;
	e->seq = ev->seq;
	e->stream = ev->stream;
	e->ns = ev->ns;
	e->dev = ev->dev;
	if (ev->op == TRACE_MARK) {
		e->label = t->t.labels[ev->id];
		return;
	}
	e->id = ev->id;
	e->size = ev->size;
	e->cls = public_class(t->cls[a]);
}

size_t stalloc_trace_iterations(const struct stalloc_trace *t,
				const size_t **first)
{
	*first = t->it.first;
	return t->it.source == ITER_NONE ? 0 : t->it.nr;
}

void stalloc_trace_free(struct stalloc_trace *t)
{
	if (!t)
		return;
	free(t->cls);
	iters_free(&t->it);
	trace_free(&t->t);
	free(t);
}
