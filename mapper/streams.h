/* SPDX-License-Identifier: MIT */
/*
 * mapper/streams.h - handing freed memory from one stream to another
 *
 * Every free is numbered (a device-wide sequence).  Freed memory carries
 * tags: the streams that used it and the number of the free.  Each stream
 * a device has seen owns one event, its checkpoint, re-recorded on that
 * stream from time to time, always during a call that names the stream
 * (its free, or a free of memory record_stream put on it): no stream
 * handle is given to the driver after the call that named it, so a stream
 * destroyed after its frees costs nothing.  Memory freed on stream A is
 * ready for stream B once A's checkpoint was recorded after that free; B
 * then waits for the event on the device (cuStreamWaitEvent), once per
 * checkpoint, and the host never stalls.  Memory not yet covered is left
 * alone by the dynamic allocator (and its owner checkpoints at its next
 * free); only the plan's fixed slots, which cannot go elsewhere, fall back
 * to a device-wide synchronisation, counted in @syncs.
 *
 * A job on one stream records nothing: with one stream every free is
 * ordered by the stream itself.
 *
 * Locking: the device lock, for every call.
 */
#ifndef STALLOC_MAPPER_STREAMS_H
#define STALLOC_MAPPER_STREAMS_H

#include <stdbool.h>
#include <stdint.h>

#include "../vmm/vmm.h"

#define SS_MAX 32 /* streams tracked per device; more share the last slot */
#define SS_TAGS 4 /* streams one free range remembers; more: all of them */
#define SS_CKPT_EVERY 8 /* frees on a stream between its checkpoints */
#define SS_EAGER 256 /* frees checkpointed one by one once another waited */

/**
 * struct ss_tags - who used a range, and when each last freed it
 * @all: more than SS_TAGS streams: every stream, up to free number @all_seq
 * @nr: streams in @idx
 * @idx: their slots in the device's table
 * @seq: for each, the number of its last free of the range (0: it uses
 *	the range now, nothing to wait for yet)
 * @sync_seq: work of streams nobody named may use it (a CUDA graph's
 *	replays): ready only once the device was synchronised after free
 *	number @sync_seq (0: none)
 */
struct ss_tags {
	bool all;
	uint8_t nr;
	uint8_t idx[SS_TAGS];
	uint64_t all_seq;
	uint64_t sync_seq;
	uint64_t seq[SS_TAGS];
};

/**
 * struct sstream - one stream a device has seen
 * @handle: the stream (compared, never given to the driver outside a call
 *	that names it)
 * @ev: its checkpoint event (0 before the first)
 * @ckpt: frees numbered up to @ckpt are covered by @ev
 * @prev_ev: the checkpoint before, in an event of its own (0: none yet):
 *	older, so more likely complete when the host asks (ss_settle())
 * @prev_ckpt: frees numbered up to @prev_ckpt are covered by @prev_ev
 * @since: frees on it since its last checkpoint
 * @eager: another stream wanted memory it freed after its checkpoint: its
 *	next @eager frees checkpoint at once
 * @done: frees numbered up to @done are complete on the device (the host
 *	waited for a checkpoint)
 * @waited: for each stream slot i, the checkpoint of i this stream already
 *	waits for
 */
struct sstream {
	void *handle;
	uint64_t ev;
	uint64_t ckpt;
	uint64_t prev_ev;
	uint64_t prev_ckpt;
	uint64_t done;
	uint32_t since;
	uint32_t eager;
	uint64_t waited[SS_MAX];
};

/**
 * struct sstreams - one device's streams
 * @vmm: its space (events)
 * @s: the streams, in the order they were seen; @nr of them
 * @seq: the last free's number
 * @synced: every free up to this number is complete (a device sync)
 * @capture: a graph capture is under way: record and wait on nothing
 * @syncs: device-wide synchronisations the plan's slots needed
 * @checkpoints: events recorded
 * @waits: cuStreamWaitEvent calls
 * @cur: while a request maps memory, the slot of the stream it names (the
 *	shrinker's, for ss_settle()); SS_MAX otherwise
 */
struct sstreams {
	struct vmm_space *vmm;
	struct sstream s[SS_MAX];
	unsigned int nr;
	uint64_t seq;
	uint64_t synced;
	unsigned int capture;
	uint64_t syncs;
	uint64_t checkpoints;
	uint64_t waits;
	unsigned int cur;
};

void ss_init(struct sstreams *t, struct vmm_space *vmm);
/* Destroy the events (tear-down). */
void ss_destroy(struct sstreams *t);

/* The slot of @stream (a new one the first time it is seen). */
unsigned int ss_slot(struct sstreams *t, void *stream);

/* Add the users of @b to @a (pairs the device already waited for go). */
void ss_merge(struct sstreams *t, struct ss_tags *a, const struct ss_tags *b);
/* Add slot @i, which freed the range at number @seq (0: uses it now). */
void ss_tag(struct ss_tags *tags, unsigned int i, uint64_t seq);
/* Mark a range as used by unknown streams until the next device sync. */
void ss_tag_sync(struct sstreams *t, struct ss_tags *tags);
/* Tags of a range stream slot @i uses now. */
static inline struct ss_tags ss_user(unsigned int i)
{
	return (struct ss_tags){ .nr = 1, .idx = { (uint8_t)i } };
}

/*
 * A free on stream @i of memory whose users (the allocating stream, those
 * record_stream named) are in *@tags: number it, add @i, and checkpoint
 * the streams when it is time -- at once for memory several streams used,
 * as PyTorch records its events; else every SS_CKPT_EVERY frees, or at each
 * of the next SS_EAGER frees once another stream waited for its memory.
 */
void ss_freed(struct sstreams *t, struct ss_tags *tags, unsigned int i);

/*
 * Wait for the whole device (the out-of-memory path): everything freed so
 * far is ready for every stream.  Not during a capture (-EAGAIN).
 */
int ss_sync(struct sstreams *t);

/*
 * Before memory tagged @tags is unmapped: make sure its users' work is
 * complete, never waiting for the whole device.  The oldest checkpoint
 * covering a user's free (the stream's previous one where it does, else
 * its latest) settles it at once if the driver reports it complete; else,
 * with @block, the host waits for that checkpoint (counted as "wait").  @i is
 * the slot of the stream the current call names (it is checkpointed now
 * if need be), or SS_MAX for none.  Another stream's work is settled
 * through its checkpoints, which must already cover its free.  -EAGAIN
 * when that cannot be: without @block the work is not known complete yet;
 * a capture is under way, a stream's free is not covered yet, the memory
 * is in use or a graph's replays used it; such memory is to stay mapped
 * for now.
 */
int ss_settle(struct sstreams *t, const struct ss_tags *tags, unsigned int i,
	      bool block);

/*
 * May stream @i use memory tagged @tags now, without a device sync (and,
 * during a capture, without any new wait)?  Makes the streams it would
 * wait for eager when not.
 */
bool ss_ready_slow(struct sstreams *t, const struct ss_tags *tags,
		   unsigned int i);

static inline bool ss_ready(struct sstreams *t, const struct ss_tags *tags,
			    unsigned int i)
{
	/* one stream, or memory nobody used, or used only by stream @i */
	if (tags->sync_seq > t->synced)
		return false;
	if (t->nr <= 1 || !tags->nr ||
	    (tags->nr == 1 && tags->idx[0] == i && !tags->all))
		return true;
	return ss_ready_slow(t, tags, i);
}

/*
 * Make stream @i wait for the users of memory tagged @tags: on their
 * checkpoints when ready, else (@may_sync) with a device-wide sync.
 * -EAGAIN when not ready and no sync is allowed (a capture).
 */
int ss_wait(struct sstreams *t, const struct ss_tags *tags, unsigned int i,
	    bool may_sync);

#endif /* STALLOC_MAPPER_STREAMS_H */
