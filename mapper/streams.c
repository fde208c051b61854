// SPDX-License-Identifier: MIT
/*
 * mapper/streams.c - checkpoint events that hand freed memory across streams
 *
 * See streams.h for the model.  Invariants: a stream's checkpoint only
 * moves forward (@ckpt grows; of its two events, the older is re-recorded
 * later on the same stream and becomes the current one), so "stream B
 * waits for A's checkpoint k" stays true once issued and covers every free
 * numbered up to k, and @prev_ckpt <= @ckpt; a stream handle reaches the
 * driver only inside ss_freed(), called from a free that names it (or
 * names memory record_stream put on it, as PyTorch's own allocator does).
 * During a graph capture (@capture) nothing is recorded and no new wait
 * is issued: recording on the legacy stream, or waiting on an event from
 * outside the capture, would invalidate it.
 *
 * Locking: the device lock, for every call; the vmm calls take the space
 * lock inside.
 */
#include <errno.h>
#include <string.h>

#include "../lib/util.h"
#include "streams.h"

void ss_init(struct sstreams *t, struct vmm_space *vmm)
{
	memset(t, 0, sizeof(*t));
	t->vmm = vmm;
	t->cur = SS_MAX;
}

void ss_destroy(struct sstreams *t)
{
	unsigned int i;

	for (i = 0; i < t->nr; i++) {
		if (t->s[i].ev)
			vmm_event_free(t->vmm, t->s[i].ev);
		if (t->s[i].prev_ev)
			vmm_event_free(t->vmm, t->s[i].prev_ev);
	}
	ss_init(t, t->vmm);
}

unsigned int ss_slot(struct sstreams *t, void *stream)
{
	unsigned int i;

	for (i = 0; i < t->nr; i++)
		if (t->s[i].handle == stream)
			return i;
	if (t->nr == SS_MAX)
		return SS_MAX - 1; /* shared: such memory waits for a sync */
	t->s[t->nr].handle = stream;
	return t->nr++;
}

void ss_tag(struct ss_tags *tags, unsigned int i, uint64_t seq)
{
	unsigned int k;

	for (k = 0; k < tags->nr; k++)
		if (tags->idx[k] == i) {
			if (seq > tags->seq[k])
				tags->seq[k] = seq;
			return;
		}
	if (tags->nr < SS_TAGS) {
		tags->idx[tags->nr] = (uint8_t)i;
		tags->seq[tags->nr++] = seq;
		return;
	}
	tags->all = true;
	if (seq > tags->all_seq)
		tags->all_seq = seq;
}

void ss_tag_sync(struct sstreams *t, struct ss_tags *tags)
{
	tags->sync_seq = ++t->seq;
}

void ss_merge(struct sstreams *t, struct ss_tags *a, const struct ss_tags *b)
{
	unsigned int k;

	if (b->sync_seq > t->synced && b->sync_seq > a->sync_seq)
		a->sync_seq = b->sync_seq;
	if (b->all && b->all_seq > t->synced) {
		a->all = true;
		if (b->all_seq > a->all_seq)
			a->all_seq = b->all_seq;
	}
	for (k = 0; k < b->nr; k++)
		if (!b->seq[k] || b->seq[k] > t->synced)
			ss_tag(a, b->idx[k], b->seq[k]);
}

/*
 * Record stream @i's checkpoint now: it covers every free so far.  The
 * current one becomes the previous (kept in its event), the event of the
 * one before is re-recorded.
 */
static void checkpoint(struct sstreams *t, unsigned int i)
{
	struct sstream *s = &t->s[i];
	uint64_t ev;

	if (t->capture || (t->nr == SS_MAX && i == SS_MAX - 1))
		return;
	ev = s->ev ? s->prev_ev : 0;
	if (!ev && vmm_event_new(t->vmm, &ev))
		return; /* left uncovered: the memory waits, it is not lost */
	if (vmm_event_record(t->vmm, ev, s->handle)) {
		if (!s->ev)
			s->ev = ev; /* keep it for the next try */
		else
			s->prev_ev = ev;
		return;
	}
	if (s->ev) {
		s->prev_ev = s->ev;
		s->prev_ckpt = s->ckpt;
	}
	s->ev = ev;
	t->checkpoints++;
	s->ckpt = t->seq;
	s->since = 0;
}

void ss_freed(struct sstreams *t, struct ss_tags *tags, unsigned int i)
{
	struct sstream *s = &t->s[i];
	bool shared;
	unsigned int k;

	++t->seq;
	/* every user freed it now (it was its users' to the end) */
	for (k = 0; k < tags->nr; k++)
		tags->seq[k] = t->seq;
	if (tags->all)
		tags->all_seq = t->seq;
	ss_tag(tags, i, t->seq);
	if (t->nr <= 1)
		return;
	shared = tags->all || tags->nr > 1;
	/* the other users: now, as PyTorch records its events at free */
	for (k = 0; k < tags->nr; k++)
		if (tags->idx[k] != i)
			checkpoint(t, tags->idx[k]);
	if (s->eager)
		s->eager--;
	else if (++s->since < SS_CKPT_EVERY && !shared)
		return;
	checkpoint(t, i);
}

/* Is the free numbered @seq on stream slot @j ready for stream @i? */
static bool slot_ready(struct sstreams *t, unsigned int j, uint64_t seq,
		       unsigned int i)
{
	struct sstream *s = &t->s[j];

	if (j == i && !(t->nr == SS_MAX && i == SS_MAX - 1))
		return true; /* a stream runs in order */
	if (s->ckpt < seq || !s->ev) {
		s->eager = SS_EAGER;
		return false;
	}
	/* a capture may not wait on an event recorded outside it */
	return !t->capture || t->s[i].waited[j] >= s->ckpt;
}

bool ss_ready_slow(struct sstreams *t, const struct ss_tags *tags,
		   unsigned int i)
{
	bool ready = tags->sync_seq <= t->synced;
	unsigned int k;

	if (tags->all && tags->all_seq > t->synced)
		for (k = 0; k < t->nr; k++)
			ready &= slot_ready(t, k, tags->all_seq, i);
	for (k = 0; k < tags->nr; k++)
		if (tags->seq[k] > t->synced)
			ready &= slot_ready(t, tags->idx[k], tags->seq[k], i);
	return ready;
}

static int wait_slot(struct sstreams *t, unsigned int j, unsigned int i)
{
	struct sstream *s = &t->s[j], *w = &t->s[i];
	int err;

	if (j == i || w->waited[j] >= s->ckpt)
		return 0;
	err = vmm_stream_wait(t->vmm, w->handle, s->ev);
	if (err)
		return err;
	t->waits++;
	w->waited[j] = s->ckpt;
	return 0;
}

int ss_wait(struct sstreams *t, const struct ss_tags *tags, unsigned int i,
	    bool may_sync)
{
	unsigned int k;
	int err = 0;

	if (ss_ready(t, tags, i)) {
		if (t->nr <= 1)
			return 0;
		if (tags->all && tags->all_seq > t->synced)
			for (k = 0; k < t->nr && !err; k++)
				err = wait_slot(t, k, i);
		for (k = 0; k < tags->nr && !err; k++)
			if (tags->seq[k] > t->synced)
				err = wait_slot(t, tags->idx[k], i);
		return err;
	}
	if (!may_sync || t->capture)
		return sa_error(-EAGAIN,
				"mapper: device %d: memory freed on another "
				"stream is not ready for this one yet%s",
				vmm_device(t->vmm),
				t->capture ? " (a graph capture is under way)" :
					     "");
	return ss_sync(t);
}

/*
 * Can stream slot @j's free numbered @seq be known complete: it is, or a
 * checkpoint covers it (@i's own can be recorded now)?
 */
static bool settleable(struct sstreams *t, unsigned int j, uint64_t seq,
		       unsigned int i)
{
	struct sstream *s = &t->s[j];

	if (!seq || (t->nr == SS_MAX && j == SS_MAX - 1))
		return false; /* in use, or a shared slot: no checkpoint */
	return seq <= t->synced || seq <= s->done ||
	       (s->ckpt >= seq && s->ev) || j == i;
}

/*
 * Make sure slot @j's free numbered @seq is complete: known so, or the
 * oldest checkpoint covering it -- the previous one if it does, the first
 * to complete (the latest cannot be done before it) -- reported complete
 * by the driver, or (@block) waited for on the host.
 */
static int settle_slot(struct sstreams *t, unsigned int j, uint64_t seq,
		       unsigned int i, bool block)
{
	struct sstream *s = &t->s[j];
	uint64_t ev, ckpt;
	bool done = false;
	int err;

	if (seq <= t->synced || seq <= s->done)
		return 0;
	if (s->ckpt < seq && j == i)
		checkpoint(t, i);
	if (s->prev_ev && s->prev_ckpt >= seq) {
		ev = s->prev_ev;
		ckpt = s->prev_ckpt;
	} else if (s->ev && s->ckpt >= seq) {
		ev = s->ev;
		ckpt = s->ckpt;
	} else {
		return -EAGAIN;
	}
	err = vmm_event_done(t->vmm, ev, &done);
	if (!err && !done) {
		if (!block)
			return -EAGAIN;
		err = vmm_event_sync(t->vmm, ev);
	}
	if (err)
		return err;
	if (ckpt > s->done)
		s->done = ckpt;
	return 0;
}

int ss_settle(struct sstreams *t, const struct ss_tags *tags, unsigned int i,
	      bool block)
{
	bool all = tags->all && tags->all_seq > t->synced;
	unsigned int k;
	int err = 0;

	if (tags->sync_seq > t->synced || t->capture)
		return -EAGAIN;
	/* check first, so that nothing is waited for in vain */
	for (k = 0; all && k < t->nr; k++)
		if (!settleable(t, k, tags->all_seq, i))
			return -EAGAIN;
	for (k = 0; k < tags->nr; k++)
		if (!settleable(t, tags->idx[k], tags->seq[k], i))
			return -EAGAIN;
	for (k = 0; all && k < t->nr && !err; k++)
		err = settle_slot(t, k, tags->all_seq, i, block);
	for (k = 0; k < tags->nr && !err; k++)
		err = settle_slot(t, tags->idx[k], tags->seq[k], i, block);
	return err;
}

int ss_sync(struct sstreams *t)
{
	int err;

	if (t->capture)
		return sa_error(-EAGAIN,
				"mapper: device %d: no device-wide sync during "
				"a graph capture",
				vmm_device(t->vmm));
	err = vmm_sync(t->vmm, NULL);
	if (err)
		return err;
	t->syncs++;
	t->synced = t->seq;
	return 0;
}
