// SPDX-License-Identifier: MIT
/*
 * fakecuda-work.c - the work model: clocks, pending accesses, completion
 *
 * Every stream numbers the work launched on it (seq) and keeps a clock,
 * the work of other streams it is ordered after (stream id -> seq), fed by
 * cuStreamWaitEvent from the clock an event took at record.  Work is
 * instantaneous except on a stream a test holds busy with
 * fakecuda_stream_hold(): its accesses (fakecuda_launch) and events stay
 * pending until the stream's work completes (stream, event or context
 * synchronisation, destroying the stream, releasing the hold).  An access
 * that conflicts with a pending access of another stream it is not ordered
 * after is a violation, as is unmapping memory with pending accesses.
 * Legacy and blocking streams of one context are ordered implicitly.
 *
 * Invariants: a pending access belongs to a held stream; completing a
 * stream drops its pending accesses and settles its pending events.
 *
 * Locking: all of it runs under fc_mutex (see fakecuda-internal.h).
 */
#include <stdlib.h>

#include "fakecuda-internal.h"
#include "fakecuda.h"

/* An access by work not yet completed (on a held stream). */
struct fc_access {
	struct fc_stream *s;
	uint64_t seq;
	uint64_t va, size;
	bool write;
	struct fc_access *next;
};

static struct fc_access *fc_pending;

/* ------------------------------------------------------------------ */
/* Clocks                                                              */
/* ------------------------------------------------------------------ */

/* The work of stream @id up to @seq that @c is ordered after (0: none). */
static uint64_t clock_get(const struct fc_clock *c, uint64_t id)
{
	size_t i;

	for (i = 0; i < c->n; i++)
		if (c->t[i].id == id)
			return c->t[i].seq;
	return 0;
}

/* Order @c after stream @id's work up to @seq; -1 out of memory. */
int fc_clock_set(struct fc_clock *c, uint64_t id, uint64_t seq)
{
	struct fc_tick *t;
	size_t i;

	for (i = 0; i < c->n; i++) {
		if (c->t[i].id != id)
			continue;
		if (c->t[i].seq < seq)
			c->t[i].seq = seq;
		return 0;
	}
	t = realloc(c->t, (c->n + 1) * sizeof(*t));
	if (!t)
		return -1;
	t[c->n].id = id;
	t[c->n].seq = seq;
	c->t = t;
	c->n++;
	return 0;
}

int fc_clock_merge(struct fc_clock *dst, const struct fc_clock *src)
{
	size_t i;

	for (i = 0; i < src->n; i++)
		if (fc_clock_set(dst, src->t[i].id, src->t[i].seq))
			return -1;
	return 0;
}

void fc_clock_clear(struct fc_clock *c)
{
	free(c->t);
	c->t = NULL;
	c->n = 0;
}

/* ------------------------------------------------------------------ */
/* Accesses and completion                                             */
/* ------------------------------------------------------------------ */

static bool implicitly_ordered(const struct fc_stream *a,
			       const struct fc_stream *b)
{
	if (a->ctx != b->ctx)
		return false;
	return (a->kind == FC_S_LEGACY && !b->nonblocking) ||
	       (b->kind == FC_S_LEGACY && !a->nonblocking);
}

static const char *access_name(bool write)
{
	return write ? "write" : "read";
}

/*
 * Check an access of [va, va+size) by @s against every pending access of
 * another stream that conflicts with it (one of them writes); @launch also
 * records it, pending while @s is held.  An unordered access is a
 * violation; the work happens anyway, as on a device.
 */
static CUresult work_access(struct fc_stream *s, uint64_t va, uint64_t size,
			    bool write, bool launch)
{
	struct fc_access *a;

	for (a = fc_pending; a; a = a->next) {
		if (a->s == s || a->va >= va + size || va >= a->va + a->size ||
		    (!a->write && !write))
			continue;
		if (clock_get(&s->clock, a->s->id) >= a->seq ||
		    implicitly_ordered(s, a->s))
			continue;
		fc_viol(CUDA_SUCCESS,
			"%s of [0x%llx, +%llu) on stream %p is not ordered after "
			"the pending %s of [0x%llx, +%llu) on stream %p",
			access_name(write), (unsigned long long)va,
			(unsigned long long)size, (void *)(uintptr_t)s->o.key,
			access_name(a->write), (unsigned long long)a->va,
			(unsigned long long)a->size,
			(void *)(uintptr_t)a->s->o.key);
		break;
	}
	if (!launch)
		return CUDA_SUCCESS;
	s->seq++;
	if (!s->busy)
		return CUDA_SUCCESS; /* done at once */
	a = calloc(1, sizeof(*a));
	if (!a)
		return CUDA_ERROR_OUT_OF_MEMORY;
	a->s = s;
	a->seq = s->seq;
	a->va = va;
	a->size = size;
	a->write = write;
	a->next = fc_pending;
	fc_pending = a;
	return CUDA_SUCCESS;
}

/* Drop the pending accesses of @s (@s NULL: of [va, va+size)); count. */
static unsigned long pending_drop(const struct fc_stream *s, uint64_t va,
				  uint64_t size)
{
	struct fc_access **pp = &fc_pending, *a;
	unsigned long n = 0;

	while ((a = *pp)) {
		bool hit = s ? a->s == s :
			       !(a->va >= va + size || va >= a->va + a->size);

		if (!hit) {
			pp = &a->next;
			continue;
		}
		*pp = a->next;
		free(a);
		n++;
	}
	return n;
}

/* Unmapping [va, va+size): no stream may still have work on it. */
void fc_work_unmap(uint64_t va, uint64_t size)
{
	if (pending_drop(NULL, va, size))
		fc_viol(CUDA_SUCCESS,
			"unmapping [0x%llx, +%llu) while a stream still uses "
			"the memory (pending work)",
			(unsigned long long)va, (unsigned long long)size);
}

/* Finish the work queued on @s: drop the hold, complete its events. */
void fc_stream_complete(struct fc_stream *s)
{
	size_t i;

	s->busy = false;
	for (i = 0; i < fc_events.n; i++) {
		struct fc_event *e = fc_event_of(fc_events.v[i]);

		if (e->pending && e->stream == s) {
			e->pending = false;
			e->stream = NULL;
		}
	}
	pending_drop(s, 0, 0);
}

void fc_ctx_sync(struct CUctx_st *ctx)
{
	struct fc_stream *s;
	size_t i;

	fc_for_each_stream(s, i) if (s->ctx == ctx) fc_stream_complete(s);
}
/* ------------------------------------------------------------------ */
/* Work                                                                */
/* ------------------------------------------------------------------ */

/* A synchronous copy: work on the current context's legacy stream. */
CUresult fc_work_sync_copy(uint64_t dst, uint64_t src, size_t n)
{
	struct fc_stream *s = NULL;
	CUresult err = fc_stream_get(CU_STREAM_LEGACY, &s);

	if (err == CUDA_SUCCESS)
		err = fc_stream_work_check(s);
	if (err == CUDA_SUCCESS && dst)
		err = work_access(s, dst, n, true, false);
	if (err == CUDA_SUCCESS && src)
		err = work_access(s, src, n, false, false);
	return err;
}

static CUresult launch(CUstream h, uint64_t va, uint64_t size, bool write)
{
	struct fc_stream *s = NULL;
	CUresult err;

	err = fc_stream_get(h, &s);
	if (err == CUDA_SUCCESS && s->ctx != fc_ctx_current())
		err = fc_viol(CUDA_ERROR_INVALID_CONTEXT,
			      "stream %p belongs to device %d's context, not "
			      "the current one",
			      (void *)h, s->ctx->dev);
	if (err == CUDA_SUCCESS)
		err = fc_stream_work_check(s);
	if (err == CUDA_SUCCESS)
		err = fc_dev_range_check(va, size, write, s->ctx->dev);
	if (err == CUDA_SUCCESS && !s->cap) /* captured: runs later */
		err = work_access(s, va, size, write, true);
	return err;
}

FC_API int fakecuda_launch(void *stream, unsigned long long addr,
			   unsigned long long size, int write)
{
	CUresult err = fc_enter(FC_fakecuda_launch);

	if (err == CUDA_SUCCESS)
		err = launch((CUstream)stream, addr, size, write);
	return (int)fc_leave(err);
}
