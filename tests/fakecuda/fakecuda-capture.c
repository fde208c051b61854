// SPDX-License-Identifier: MIT
/*
 * fakecuda-capture.c - stream capture, its rules and the graphs it makes
 *
 * A capture begins on one stream, spreads to streams that wait on its
 * captured events (fakecuda-stream.c) and ends on the stream that began
 * it.  Captured work does not run.  The rules of the real driver are
 * enforced: potentially unsafe calls under the thread's capture mode, no
 * synchronisation with or query of a capturing stream or captured event,
 * no legacy stream work beside a capturing blocking stream, no waits
 * across capture bounds; a broken rule invalidates the capture, and
 * cuStreamEndCapture then gives no graph.  Which calls the rules cover is
 * said once, by the FC_F_CAPOWN and FC_F_UNSAFE flags of FC_CALLS
 * (fakecuda-internal.h); fc_capture_check() applies them.
 *
 * Invariants: a stream or event in a capture points at a live struct
 * fc_capture, on the fc_captures list, freed (and detached from every
 * stream and event) when the capture ends or its origin stream goes.
 * Graphs are tokens in fc_graphs until cuGraphDestroy.
 *
 * Locking: all of it runs under fc_mutex (see fakecuda-internal.h), except
 * the thread-local capture mode, which only its own thread touches.
 */
#include <stdlib.h>

#include "fakecuda-internal.h"
#include "fakecuda.h"

#define FC_GRAPH_TAG 0xf9a0000000000000ULL

static struct fc_vec fc_graphs;
static struct fc_capture *fc_captures;
static uint64_t fc_capture_ids;
static unsigned long fc_ncap_invalidated;

static __thread CUstreamCaptureMode fc_thread_mode; /* 0: GLOBAL */

/* ------------------------------------------------------------------ */
/* Capture rules                                                       */
/* ------------------------------------------------------------------ */

void fc_capture_invalidate(struct fc_capture *c)
{
	if (!c->invalid)
		fc_ncap_invalidated++;
	c->invalid = true;
}

/* Detach everything from capture @c and free it. */
void fc_capture_free(struct fc_capture *c)
{
	struct fc_capture **pp;
	struct fc_stream *s;
	size_t i;

	fc_for_each_stream(s, i) if (s->cap == c) s->cap = NULL;
	for (i = 0; i < fc_events.n; i++) {
		struct fc_event *e = fc_event_of(fc_events.v[i]);

		if (e->cap == c) {
			e->cap = NULL;
			e->recorded = false;
		}
	}
	for (pp = &fc_captures; *pp; pp = &(*pp)->next) {
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	}
	free(c);
}

/*
 * The capture rules of the call being served, once its arguments are
 * checked.  FC_F_CAPOWN: synchronising with or querying a capturing stream
 * or a captured event (@own, its capture; @on says which) is refused and
 * invalidates the capture.  FC_F_UNSAFE: a potentially unsafe call (one
 * that synchronises with the device or unmaps memory) under the capture
 * rules of cuThreadExchangeStreamCaptureMode: prohibited while this thread
 * has a capture of its own that is not relaxed, or, in global mode, while
 * any thread has a global capture.  A prohibited call invalidates those
 * captures and is a violation.
 */
CUresult fc_capture_check(struct fc_capture *own, const char *on)
{
	unsigned int flags = fc_call_flags();
	struct fc_capture *c;
	bool hit = false;

	if ((flags & FC_F_CAPOWN) && own) {
		fc_capture_invalidate(own);
		return fc_viol(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
			       "%s on %s (capture invalidated)", fc_call_name(),
			       on);
	}
	if (!(flags & FC_F_UNSAFE) ||
	    fc_thread_mode == CU_STREAM_CAPTURE_MODE_RELAXED)
		return CUDA_SUCCESS;
	for (c = fc_captures; c; c = c->next) {
		if (c->mode == CU_STREAM_CAPTURE_MODE_RELAXED)
			continue;
		if (pthread_equal(c->thread, pthread_self()) ||
		    (fc_thread_mode == CU_STREAM_CAPTURE_MODE_GLOBAL &&
		     c->mode == CU_STREAM_CAPTURE_MODE_GLOBAL)) {
			fc_capture_invalidate(c);
			hit = true;
		}
	}
	if (hit)
		return fc_viol(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
			       "%s while a stream capture is active (capture "
			       "invalidated)",
			       fc_call_name());
	return CUDA_SUCCESS;
}

/*
 * Work on @s: the legacy stream synchronises implicitly with every blocking
 * stream of its context, so it may not be used while one of them captures;
 * a stream of an invalidated capture refuses further work.
 */
CUresult fc_stream_work_check(struct fc_stream *s)
{
	struct fc_stream *t;
	size_t i;

	if (s->cap && s->cap->invalid)
		return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
	if (s->kind != FC_S_LEGACY)
		return CUDA_SUCCESS;
	fc_for_each_stream(t, i)
	{
		if (!t->cap || t->ctx != s->ctx || t->nonblocking)
			continue;
		fc_capture_invalidate(t->cap);
		return fc_viol(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,
			       "work on the legacy default stream while stream "
			       "%p of its context captures (capture "
			       "invalidated)",
			       (void *)(uintptr_t)t->o.key);
	}
	return CUDA_SUCCESS;
}

/* Legacy and blocking streams of one context order each other's work. */
/* ------------------------------------------------------------------ */
/* Stream capture                                                      */
/* ------------------------------------------------------------------ */

static CUresult begin_capture(CUstream h, CUstreamCaptureMode mode)
{
	struct fc_capture *c;
	struct fc_stream *s = NULL;
	CUresult err;

	if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL &&
	    mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
	    mode != CU_STREAM_CAPTURE_MODE_RELAXED)
		return fc_viol(CUDA_ERROR_INVALID_VALUE, "mode %d unknown",
			       (int)mode);
	err = fc_stream_get(h, &s);
	if (err != CUDA_SUCCESS)
		return err;
	if (s->kind == FC_S_LEGACY)
		return fc_viol(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
			       "the legacy default stream cannot capture");
	if (s->cap)
		return fc_viol(CUDA_ERROR_ILLEGAL_STATE,
			       "stream %p captures already",
			       (void *)(uintptr_t)s->o.key);
	c = calloc(1, sizeof(*c));
	if (!c)
		return CUDA_ERROR_OUT_OF_MEMORY;
	c->id = ++fc_capture_ids;
	c->ctx = s->ctx;
	c->origin = s;
	c->mode = mode;
	c->thread = pthread_self();
	c->next = fc_captures;
	fc_captures = c;
	s->cap = c;
	return CUDA_SUCCESS;
}

FC_API CUresult cuStreamBeginCapture_v2(CUstream h, CUstreamCaptureMode mode)
{
	CUresult err = fc_enter(FC_cuStreamBeginCapture);

	if (err == CUDA_SUCCESS)
		err = begin_capture(h, mode);
	return fc_leave(err);
}

static CUresult end_capture(CUstream h, CUgraph *graph)
{
	struct fc_stream *s = NULL;
	struct fc_capture *c;
	struct fc_obj *g;
	CUresult err;

	if (!graph)
		return fc_viol(CUDA_ERROR_INVALID_VALUE, "phGraph is NULL");
	*graph = NULL;
	err = fc_stream_get(h, &s);
	if (err != CUDA_SUCCESS)
		return err;
	c = s->cap;
	if (!c)
		return fc_viol(CUDA_ERROR_ILLEGAL_STATE,
			       "stream %p is not capturing",
			       (void *)(uintptr_t)s->o.key);
	if (c->origin != s)
		return fc_viol(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED,
			       "stream %p joined a capture it did not begin",
			       (void *)(uintptr_t)s->o.key);
	if (c->mode != CU_STREAM_CAPTURE_MODE_RELAXED &&
	    !pthread_equal(c->thread, pthread_self()))
		return fc_viol(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD,
			       "capture ended by another thread than began "
			       "it");
	if (c->invalid) {
		fc_capture_free(c);
		return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
	}
	fc_capture_free(c);
	g = calloc(1, sizeof(*g));
	if (!g)
		return CUDA_ERROR_OUT_OF_MEMORY;
	g->key = fc_token_new(FC_GRAPH_TAG);
	if (fc_vec_insert(&fc_graphs, g)) {
		free(g);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*graph = (CUgraph)(uintptr_t)g->key;
	return CUDA_SUCCESS;
}

FC_API CUresult cuStreamEndCapture(CUstream h, CUgraph *graph)
{
	CUresult err = fc_enter(FC_cuStreamEndCapture);

	if (err == CUDA_SUCCESS)
		err = end_capture(h, graph);
	return fc_leave(err);
}

static CUresult capture_info(CUstream h, CUstreamCaptureStatus *status,
			     cuuint64_t *id, CUgraph *graph,
			     const CUgraphNode **deps, size_t *ndeps)
{
	struct fc_stream *s = NULL;
	CUresult err;

	if (!status)
		return fc_viol(CUDA_ERROR_INVALID_VALUE,
			       "captureStatus is NULL");
	err = fc_stream_get(h, &s);
	if (err != CUDA_SUCCESS)
		return err;
	*status = !s->cap	  ? CU_STREAM_CAPTURE_STATUS_NONE :
		  s->cap->invalid ? CU_STREAM_CAPTURE_STATUS_INVALIDATED :
				    CU_STREAM_CAPTURE_STATUS_ACTIVE;
	if (id && s->cap)
		*id = s->cap->id;
	if (graph)
		*graph = NULL; /* the graph being built is not modelled */
	if (deps)
		*deps = NULL;
	if (ndeps)
		*ndeps = 0;
	return CUDA_SUCCESS;
}

FC_API CUresult cuStreamIsCapturing(CUstream h, CUstreamCaptureStatus *status)
{
	CUresult err = fc_enter(FC_cuStreamIsCapturing);

	if (err == CUDA_SUCCESS)
		err = capture_info(h, status, NULL, NULL, NULL, NULL);
	return fc_leave(err);
}

FC_API CUresult cuStreamGetCaptureInfo_v2(CUstream h,
					  CUstreamCaptureStatus *status,
					  cuuint64_t *id, CUgraph *graph,
					  const CUgraphNode **deps,
					  size_t *ndeps)
{
	CUresult err = fc_enter(FC_cuStreamGetCaptureInfo);

	if (err == CUDA_SUCCESS)
		err = capture_info(h, status, id, graph, deps, ndeps);
	return fc_leave(err);
}

FC_API CUresult cuStreamGetCaptureInfo_v3(CUstream h,
					  CUstreamCaptureStatus *status,
					  cuuint64_t *id, CUgraph *graph,
					  const CUgraphNode **deps,
					  const CUgraphEdgeData **edges,
					  size_t *ndeps)
{
	CUresult err = fc_enter(FC_cuStreamGetCaptureInfo);

	if (err == CUDA_SUCCESS)
		err = capture_info(h, status, id, graph, deps, ndeps);
	if (err == CUDA_SUCCESS && edges)
		*edges = NULL;
	return fc_leave(err);
}

FC_API CUresult cuGraphDestroy(CUgraph graph)
{
	CUresult err = fc_enter(FC_cuGraphDestroy);
	struct fc_obj *g = NULL;

	if (err == CUDA_SUCCESS) {
		g = fc_vec_find(&fc_graphs, (uintptr_t)graph);
		if (!g)
			err = fc_viol(CUDA_ERROR_INVALID_VALUE,
				      "graph %p unknown or destroyed",
				      (void *)graph);
	}
	if (err == CUDA_SUCCESS) {
		fc_vec_remove_key(&fc_graphs, g->key);
		free(g);
	}
	return fc_leave(err);
}

FC_API CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
	CUresult err = fc_enter(FC_cuThreadExchangeStreamCaptureMode);
	CUstreamCaptureMode old = fc_thread_mode;

	if (err == CUDA_SUCCESS && !mode)
		err = fc_viol(CUDA_ERROR_INVALID_VALUE, "mode is NULL");
	if (err == CUDA_SUCCESS && *mode != CU_STREAM_CAPTURE_MODE_GLOBAL &&
	    *mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
	    *mode != CU_STREAM_CAPTURE_MODE_RELAXED)
		err = fc_viol(CUDA_ERROR_INVALID_VALUE, "mode %d unknown",
			      (int)*mode);
	if (err == CUDA_SUCCESS) {
		fc_thread_mode = *mode;
		*mode = old;
	}
	return fc_leave(err);
}

/* ------------------------------------------------------------------ */
/* Control interface                                                   */
/* ------------------------------------------------------------------ */

FC_API unsigned long fakecuda_captures_invalidated(void)
{
	return fc_read_locked(&fc_ncap_invalidated);
}

FC_API unsigned long fakecuda_live_graphs(void)
{
	return fc_vec_count(&fc_graphs);
}
