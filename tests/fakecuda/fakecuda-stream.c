// SPDX-License-Identifier: MIT
/*
 * fakecuda-stream.c - streams and events
 *
 * Streams and events are registered objects; the CUstream/CUevent values
 * are opaque tokens (tag | sequence number, never valid addresses), so a
 * destroyed handle is never confused with a new one.  NULL and
 * CU_STREAM_LEGACY name the legacy default stream of the current context,
 * which synchronises implicitly with every blocking stream of the context;
 * CU_STREAM_PER_THREAD names the calling thread's own default stream of it,
 * a blocking stream like the others (ordered with the legacy one only).
 * An event records the clock of its stream (fakecuda-work.c) and a stream
 * that waits for it is ordered after that; recorded on a capturing stream
 * it belongs to the capture (fakecuda-capture.c).
 *
 * Invariants: a pending event points at a live stream; a stream or event
 * is alive while its context is retained in the generation it was made
 * in; destroying one frees it even when its context is gone.
 *
 * Locking: all of it runs under fc_mutex (see fakecuda-internal.h), except
 * the thread-local per-thread stream pointers (the streams themselves are
 * registered in fc_ptds_all, under the lock).
 */
#include <stdlib.h>

#include "fakecuda-internal.h"
#include "fakecuda.h"

#define FC_STREAM_TAG 0xf57e000000000000ULL
#define FC_EVENT_TAG 0xfe7e000000000000ULL
#define FC_EVENT_FLAGS                                      \
	(CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | \
	 CU_EVENT_INTERPROCESS)

struct fc_stream fc_default_streams[FC_MAX_DEV]; /* legacy ones */
struct fc_vec fc_streams;
struct fc_vec fc_ptds_all;
struct fc_vec fc_events;
static uint64_t fc_token_seq;
static uint64_t fc_stream_ids;

static __thread struct fc_stream *fc_ptds[FC_MAX_DEV];

uint64_t fc_token_new(uint64_t tag)
{
	return tag | (++fc_token_seq << 4);
}

/*
 * At unload (dlclose): the clocks of the streams that live in static
 * storage and the per-thread streams go, so that a leak checker sees only
 * the caller's leaks.  No thread may use the driver any more then.
 */
__attribute__((destructor)) static void clocks_fini(void)
{
	size_t i;

	for (i = 0; i < FC_MAX_DEV; i++)
		fc_clock_clear(&fc_default_streams[i].clock);
	for (i = 0; i < fc_ptds_all.n; i++) {
		struct fc_stream *st = fc_stream_of(fc_ptds_all.v[i]);

		fc_clock_clear(&st->clock);
		free(st);
	}
	free(fc_ptds_all.v);
	fc_ptds_all = (struct fc_vec){ 0 };
}

void fc_stream_legacy_init(struct CUctx_st *ctx)
{
	struct fc_stream *s = &fc_default_streams[ctx->dev];

	if (s->ctx)
		return;
	s->ctx = ctx;
	s->kind = FC_S_LEGACY;
	s->id = ++fc_stream_ids;
}

/* ------------------------------------------------------------------ */
/* Streams                                                             */
/* ------------------------------------------------------------------ */

static bool stream_is_default(CUstream h)
{
	return !h || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD;
}

/* The calling thread's per-thread default stream of @ctx, made on use. */
static struct fc_stream *ptds_of(struct CUctx_st *ctx)
{
	struct fc_stream *s = fc_ptds[ctx->dev];

	if (!s) {
		s = calloc(1, sizeof(*s));
		if (!s)
			return NULL;
		s->o.key = (uintptr_t)CU_STREAM_PER_THREAD;
		if (fc_vec_insert(&fc_ptds_all, &s->o)) {
			free(s);
			return NULL;
		}
		fc_ptds[ctx->dev] = s;
	}
	if (s->ctx != ctx || s->gen != ctx->gen) {
		s->ctx = ctx;
		s->gen = ctx->gen;
		s->kind = FC_S_PTDS;
		s->id = ++fc_stream_ids;
		s->seq = 0;
		fc_clock_clear(&s->clock);
	}
	return s;
}

/* Resolve @h without complaints; NULL if it names no live stream. */
struct fc_stream *fc_stream_find(CUstream h)
{
	struct CUctx_st *ctx = fc_ctx_current();

	if (stream_is_default(h)) {
		if (!ctx || !fc_ctx_known(ctx) || !ctx->retains)
			return NULL;
		if (h == CU_STREAM_PER_THREAD)
			return ptds_of(ctx);
		return &fc_default_streams[ctx->dev];
	}
	return fc_stream_of(fc_vec_find(&fc_streams, (uintptr_t)h));
}

static CUresult obj_alive(const struct CUctx_st *ctx, unsigned long gen,
			  const char *what)
{
	if (!ctx->retains || gen != ctx->gen)
		return fc_viol(CUDA_ERROR_CONTEXT_IS_DESTROYED,
			       "%s belongs to a released context", what);
	return CUDA_SUCCESS;
}

CUresult fc_stream_get(CUstream h, struct fc_stream **out)
{
	struct fc_stream *s = NULL;
	CUresult err;

	if (stream_is_default(h)) {
		err = fc_ctx_usable(fc_ctx_current());
		if (err != CUDA_SUCCESS)
			return err;
		*out = fc_stream_find(h);
		return *out ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
	}
	s = fc_stream_find(h);
	if (!s)
		return fc_viol(CUDA_ERROR_INVALID_HANDLE,
			       "stream %p unknown or destroyed", (void *)h);
	err = obj_alive(s->ctx, s->gen, "stream");
	if (err == CUDA_SUCCESS)
		*out = s;
	return err;
}

static CUresult event_get(CUevent h, struct fc_event **out)
{
	struct fc_event *e = fc_event_of(fc_vec_find(&fc_events, (uintptr_t)h));
	CUresult err;

	if (!e)
		return fc_viol(CUDA_ERROR_INVALID_HANDLE,
			       "event %p unknown or destroyed", (void *)h);
	err = obj_alive(e->ctx, e->gen, "event");
	if (err == CUDA_SUCCESS)
		*out = e;
	return err;
}

static CUresult stream_create(CUstream *ph, unsigned int flags)
{
	struct CUctx_st *ctx = fc_ctx_current();
	struct fc_stream *s = NULL;
	CUresult err;

	if (!ph)
		return fc_viol(CUDA_ERROR_INVALID_VALUE, "phStream is NULL");
	if (flags & ~(unsigned int)CU_STREAM_NON_BLOCKING)
		return fc_viol(CUDA_ERROR_INVALID_VALUE, "flags %#x unknown",
			       flags);
	err = fc_ctx_usable(ctx);
	if (err != CUDA_SUCCESS)
		return err;
	s = calloc(1, sizeof(*s));
	if (!s)
		return CUDA_ERROR_OUT_OF_MEMORY;
	s->o.key = fc_token_new(FC_STREAM_TAG);
	s->ctx = ctx;
	s->gen = ctx->gen;
	s->kind = FC_S_USER;
	s->nonblocking = flags & CU_STREAM_NON_BLOCKING;
	s->id = ++fc_stream_ids;
	if (fc_vec_insert(&fc_streams, &s->o)) {
		free(s);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*ph = (CUstream)(uintptr_t)s->o.key;
	return CUDA_SUCCESS;
}

FC_API CUresult cuStreamCreate(CUstream *ph, unsigned int flags)
{
	CUresult err = fc_enter(FC_cuStreamCreate);

	if (err == CUDA_SUCCESS)
		err = stream_create(ph, flags);
	return fc_leave(err);
}

/* Destroying frees the stream even when its context is gone. */
static CUresult stream_destroy(CUstream h)
{
	struct fc_stream *s = NULL;
	CUresult err;

	if (stream_is_default(h))
		return fc_viol(CUDA_ERROR_INVALID_HANDLE,
			       "the default stream cannot be destroyed");
	s = fc_stream_find(h);
	if (!s)
		return fc_viol(CUDA_ERROR_INVALID_HANDLE,
			       "stream %p unknown or destroyed", (void *)h);
	err = obj_alive(s->ctx, s->gen, "stream");
	fc_stream_complete(s);
	if (s->cap) {
		fc_capture_invalidate(s->cap);
		if (s->cap->origin == s)
			fc_capture_free(s->cap);
	}
	fc_vec_remove_key(&fc_streams, s->o.key);
	fc_clock_clear(&s->clock);
	free(s);
	return err;
}

FC_API CUresult cuStreamDestroy(CUstream h)
{
	CUresult err = fc_enter(FC_cuStreamDestroy);

	if (err == CUDA_SUCCESS)
		err = stream_destroy(h);
	return fc_leave(err);
}

FC_API CUresult cuStreamSynchronize(CUstream h)
{
	CUresult err = fc_enter(FC_cuStreamSynchronize);
	struct fc_stream *s = NULL;

	if (err == CUDA_SUCCESS)
		err = fc_stream_get(h, &s);
	if (err == CUDA_SUCCESS)
		err = fc_capture_check(s->cap, "a capturing stream");
	if (err == CUDA_SUCCESS)
		err = fc_stream_work_check(s);
	if (err == CUDA_SUCCESS)
		fc_stream_complete(s);
	return fc_leave(err);
}

FC_API CUresult cuStreamQuery(CUstream h)
{
	CUresult err = fc_enter(FC_cuStreamQuery);
	struct fc_stream *s = NULL;

	if (err == CUDA_SUCCESS)
		err = fc_stream_get(h, &s);
	if (err == CUDA_SUCCESS)
		err = fc_capture_check(s->cap, "a capturing stream");
	if (err == CUDA_SUCCESS)
		err = fc_stream_work_check(s);
	if (err == CUDA_SUCCESS && s->busy)
		err = CUDA_ERROR_NOT_READY;
	return fc_leave(err);
}

/*
 * A capturing stream may wait only for events recorded in its own capture;
 * a stream outside any capture that waits for a captured event joins that
 * capture.  Outside captures the waiter is ordered after what the event
 * saw (its clock).
 */
static CUresult wait_captured(struct fc_stream *s, struct fc_event *e)
{
	if (s->cap) {
		if (e->cap == s->cap || (!e->cap && !e->recorded))
			return CUDA_SUCCESS;
		fc_capture_invalidate(s->cap);
		if (e->cap) {
			fc_capture_invalidate(e->cap);
			return fc_viol(CUDA_ERROR_STREAM_CAPTURE_MERGE,
				       "waiting for an event of another "
				       "capture (captures invalidated)");
		}
		return fc_viol(CUDA_ERROR_STREAM_CAPTURE_ISOLATION,
			       "capturing stream %p waits for an event "
			       "recorded outside the capture (capture "
			       "invalidated)",
			       (void *)(uintptr_t)s->o.key);
	}
	if (e->cap) {
		if (e->cap->invalid)
			return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
		s->cap = e->cap; /* joins the capture */
		return CUDA_SUCCESS;
	}
	if (e->recorded && fc_clock_merge(&s->clock, &e->clock))
		return CUDA_ERROR_OUT_OF_MEMORY;
	return CUDA_SUCCESS;
}

static CUresult stream_wait_event(CUstream h, CUevent ev, unsigned int flags)
{
	struct fc_stream *s = NULL;
	struct fc_event *e = NULL;
	CUresult err;

	if (flags & ~(unsigned int)CU_EVENT_WAIT_EXTERNAL)
		return fc_viol(CUDA_ERROR_INVALID_VALUE, "flags %#x unknown",
			       flags);
	err = fc_stream_get(h, &s);
	if (err == CUDA_SUCCESS)
		err = event_get(ev, &e);
	if (err == CUDA_SUCCESS)
		err = fc_stream_work_check(s);
	if (err == CUDA_SUCCESS)
		err = wait_captured(s, e);
	return err;
}

FC_API CUresult cuStreamWaitEvent(CUstream h, CUevent ev, unsigned int flags)
{
	CUresult err = fc_enter(FC_cuStreamWaitEvent);

	if (err == CUDA_SUCCESS)
		err = stream_wait_event(h, ev, flags);
	return fc_leave(err);
}

/* ------------------------------------------------------------------ */
/* Events                                                              */
/* ------------------------------------------------------------------ */

static CUresult event_create(CUevent *ph, unsigned int flags)
{
	struct CUctx_st *ctx = fc_ctx_current();
	struct fc_event *e = NULL;
	CUresult err;

	if (!ph)
		return fc_viol(CUDA_ERROR_INVALID_VALUE, "phEvent is NULL");
	if ((flags & ~(unsigned int)FC_EVENT_FLAGS) ||
	    ((flags & CU_EVENT_INTERPROCESS) &&
	     !(flags & CU_EVENT_DISABLE_TIMING)))
		return fc_viol(CUDA_ERROR_INVALID_VALUE, "flags %#x invalid",
			       flags);
	err = fc_ctx_usable(ctx);
	if (err != CUDA_SUCCESS)
		return err;
	e = calloc(1, sizeof(*e));
	if (!e)
		return CUDA_ERROR_OUT_OF_MEMORY;
	e->o.key = fc_token_new(FC_EVENT_TAG);
	e->ctx = ctx;
	e->gen = ctx->gen;
	if (fc_vec_insert(&fc_events, &e->o)) {
		free(e);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*ph = (CUevent)(uintptr_t)e->o.key;
	return CUDA_SUCCESS;
}

FC_API CUresult cuEventCreate(CUevent *ph, unsigned int flags)
{
	CUresult err = fc_enter(FC_cuEventCreate);

	if (err == CUDA_SUCCESS)
		err = event_create(ph, flags);
	return fc_leave(err);
}

/*
 * On a capturing stream the record is captured (the event joins the
 * capture); otherwise the event takes the stream's clock and its own work
 * so far, pending while the stream is held.
 */
static CUresult event_record(CUevent ev, CUstream h)
{
	struct fc_stream *s = NULL;
	struct fc_event *e = NULL;
	CUresult err;

	err = event_get(ev, &e);
	if (err == CUDA_SUCCESS)
		err = fc_stream_get(h, &s);
	if (err == CUDA_SUCCESS && s->ctx != e->ctx)
		err = fc_viol(CUDA_ERROR_INVALID_HANDLE,
			      "event of device %d's context recorded on a "
			      "stream of device %d's",
			      e->ctx->dev, s->ctx->dev);
	if (err == CUDA_SUCCESS)
		err = fc_stream_work_check(s);
	if (err != CUDA_SUCCESS)
		return err;
	e->recorded = true;
	e->cap = s->cap;
	if (s->cap)
		return CUDA_SUCCESS;
	fc_clock_clear(&e->clock);
	if (fc_clock_merge(&e->clock, &s->clock) ||
	    fc_clock_set(&e->clock, s->id, s->seq))
		return CUDA_ERROR_OUT_OF_MEMORY;
	e->pending = s->busy;
	e->stream = s->busy ? s : NULL;
	return CUDA_SUCCESS;
}

FC_API CUresult cuEventRecord(CUevent ev, CUstream h)
{
	CUresult err = fc_enter(FC_cuEventRecord);

	if (err == CUDA_SUCCESS)
		err = event_record(ev, h);
	return fc_leave(err);
}

FC_API CUresult cuEventQuery(CUevent ev)
{
	CUresult err = fc_enter(FC_cuEventQuery);
	struct fc_event *e = NULL;

	if (err == CUDA_SUCCESS)
		err = event_get(ev, &e);
	if (err == CUDA_SUCCESS)
		err = fc_capture_check(e->cap,
				       "an event recorded in a capture");
	if (err == CUDA_SUCCESS && e->pending)
		err = CUDA_ERROR_NOT_READY;
	return fc_leave(err);
}

FC_API CUresult cuEventSynchronize(CUevent ev)
{
	CUresult err = fc_enter(FC_cuEventSynchronize);
	struct fc_event *e = NULL;

	if (err == CUDA_SUCCESS)
		err = event_get(ev, &e);
	if (err == CUDA_SUCCESS)
		err = fc_capture_check(e->cap,
				       "an event recorded in a capture");
	if (err == CUDA_SUCCESS && e->pending)
		fc_stream_complete(e->stream);
	return fc_leave(err);
}

/* Destroying frees the event even when its context is gone. */
static CUresult event_destroy(CUevent ev)
{
	struct fc_event *e =
		fc_event_of(fc_vec_find(&fc_events, (uintptr_t)ev));
	CUresult err;

	if (!e)
		return fc_viol(CUDA_ERROR_INVALID_HANDLE,
			       "event %p unknown or destroyed", (void *)ev);
	err = obj_alive(e->ctx, e->gen, "event");
	fc_vec_remove_key(&fc_events, e->o.key);
	fc_clock_clear(&e->clock);
	free(e);
	return err;
}

FC_API CUresult cuEventDestroy(CUevent ev)
{
	CUresult err = fc_enter(FC_cuEventDestroy);

	if (err == CUDA_SUCCESS)
		err = event_destroy(ev);
	return fc_leave(err);
}

/* ------------------------------------------------------------------ */
/* Control interface                                                   */
/* ------------------------------------------------------------------ */

FC_API int fakecuda_stream_hold(void *stream, int busy)
{
	struct fc_stream *s = NULL;

	fc_lock();
	s = fc_inited ? fc_stream_find((CUstream)stream) : NULL;
	if (s && busy)
		s->busy = true;
	else if (s)
		fc_stream_complete(s);
	fc_unlock();
	return s ? 0 : -1;
}

FC_API unsigned long fakecuda_live_streams(void)
{
	return fc_vec_count(&fc_streams);
}

FC_API unsigned long fakecuda_live_events(void)
{
	return fc_vec_count(&fc_events);
}
