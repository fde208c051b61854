/* SPDX-License-Identifier: MIT */
/*
 * mapper/match.h - matching requests to a plan (internal)
 */
#ifndef STALLOC_MAPPER_MATCH_H
#define STALLOC_MAPPER_MATCH_H

#include <stdbool.h>
#include <stdint.h>

#include "../planner/planner.h"
#include "../vmm/vmm.h"
#include "streams.h"

/* Look-ahead and look-behind of the cursor, in request positions. */
#define MATCH_AHEAD 8
#define MATCH_BEHIND 2

/* Requests in a row out of step in a dynamic run before it is re-aligned. */
#define MATCH_DRIFT_VOTES 2
/* ... and only if this many of the last 64 fitted their own position. */
#define MATCH_SIZES_TELL 60

/* How far back a request whose slot is taken may borrow a passed one's. */
#define MATCH_BORROW_BEHIND 64

/* Non-matches in the warm-up's last iteration before it is not matched. */
#define MATCH_WARM_MISSES 32
/* How late a persistent entry may come there (plans with dynamic runs), */
#define MATCH_WARM_LATE 64
/* ... and a 1/this of the positions since the count was last in step */
#define MATCH_WARM_DRIFT 4
/* requests in a row that must match a dynamic run's exit to leave it */
#define MATCH_EXIT_CONFIRM 4
/* ... when every one of them also fitted the run's sizes */
#define MATCH_EXIT_CONFIRM_FIT 6
/* static positions past a run's end where that match may begin */
#define MATCH_EXIT_SKIP 4
/* requests in a row matching past a run's exit to leave an over-long run */
#define MATCH_EXIT_LONGER 2
/* positions either side whose windows bound an out-of-range request's */
#define MATCH_REUSE_NEAR 2
/* how far past the cursor a dynamic run's exit may be for that */
#define MATCH_EXIT_RUN 32
/* how far past a run's end a lost job is looked for, on how many requests */
#define MATCH_RESYNC 512
#define MATCH_RESYNC_LEN 12

/*
 * An iteration whose marker did not come (its start inferred from the
 * requests) that misses this many of its first MATCH_PROBE requests, more
 * than half of those seen, was no iteration: the matcher stands aside.
 */
#define MATCH_PROBE 32
#define MATCH_PROBE_MISSES 8

/* The entry number of a dynamic request placed in the plan's free space. */
#define MATCH_REUSED UINT32_MAX

/*
 * A block the matcher handed out: a planned slot, or a dynamic request in
 * the plan's free space.  The matcher's live set is also how such blocks
 * are found again at free: no hash table, no descriptor to allocate.
 */
struct match_live {
	uint64_t off;
	uint64_t size; /* the slot's bytes */
	uint64_t req; /* the request's bytes */
	uint64_t id; /* its trace ID */
	struct ss_tags users; /* its stream, and those record_stream named */
	uint32_t ent;
};

/* From @off on, until the next segment: clear so long after the window. */
struct clear_seg {
	uint64_t off;
	uint64_t until;
};

/**
 * struct matcher - one device's plan and where it is in it
 * @plan: the plan (owned)
 * @vmm: the device's space; the pool starts at @base
 * @iter_ent: position -> entry index (the even slot for alternating
 *	entries), or -1
 * @dyn_of: position -> dynamic position index, or -1
 * @pro_list: the persistent entries, by prologue position
 * @nr_pro: their number; @pro_next: the next one to come
 * @bytes: the request being placed, before rounding to the plan's
 *	alignment (entries that recorded theirs take only those bytes)
 * @cursor: the next expected position of the iteration
 * @loose: the position the last request took loosely (a slot larger than
 *	it), or UINT32_MAX
 * @pro_pos: prologue allocations seen (kept in step with the plan's
 *	count when a persistent entry matches)
 * @pro_loose: the persistent entry the last prologue request took
 *	loosely (a slot larger than it), or UINT32_MAX
 * @votes_back, @votes_ahead: requests in a row at dynamic positions that
 *	fit the sizes of the position before (after) theirs and not their
 *	own (run_drift())
 * @dyn_hist: one bit per request at a dynamic position, the last one
 *	lowest: was it within the sizes its position was seen at?
 * @dyn_seen: such requests so far, up to 64
 * @run_sizes: the sizes of the last requests taken by dynamic positions,
 *	a ring (the last one at @run_head - 1), for past_twin()
 * @run_len: how many of them came in a row, up to MATCH_EXIT_RUN
 * @run_stay: requests in a row served at a run's end, no exit in sight
 *	(run_longer())
 * @marks: iteration markers seen
 * @live: planned blocks live now, sorted by offset
 * @use: per pool chunk, the tags of its last users (streams.h); emptied
 *	when a slot over it is handed out, since that user now runs after
 *	them all
 * @ss: the device's streams
 * @seen_size: sizes seen at planned positions in the first planned
 *	iteration (and the second, when the first differed), for the
 *	fingerprint check
 * @suspect: the first planned iteration differed from the plan: the
 *	second decides whether it is dropped
 * @warm_done: the first planned iteration just began or ended: the
 *	warm-up's dynamic memory can go (the runtime clears it)
 * @warm_misses: requests of the warm-up's last iteration that matched
 *	no free slot
 * @disabled: the plan does not fit this workload: served dynamically
 * @marked: markers were seen; without them iteration starts are inferred
 * @implicit: with markers, this iteration's start was inferred (its marker
 *	was missing or late)
 * @probe_seen: requests of an inferred iteration (@implicit) so far
 * @probe_misses: how many of them missed
 * @standby: the inferred iteration was none (its requests did not follow
 *	the plan): nothing is matched until the next marker
 * @steps: markers since the planned iteration began (plans of
 *	plan->stride steps per iteration)
 */
struct matcher {
	struct stalloc_plan *plan;
	struct vmm_space *vmm;
	uint64_t base;
	uint64_t pool_bytes;
	int32_t *iter_ent;
	int32_t *dyn_of;
	uint32_t *pro_list;
	size_t nr_pro;
	size_t pro_next;
	uint64_t bytes;
	uint32_t cursor;
	uint32_t loose;
	uint32_t skip_lo;
	uint32_t skip_hi;
	struct clear_seg *clear; /* per free range, from clear_first[] */
	uint32_t *clear_first; /* per free range, then the total */
	uint32_t exit_pos; /* a dynamic run's exit the job may be at */
	uint32_t exit_seen; /* requests in a row that matched from there */
	bool exit_strong; /* one of them was out of its position's sizes */
	bool exit_drift; /* one of them was not its position's one size */
	bool exit_vary; /* they were of more than one size */
	uint64_t exit_size; /* the first one's */
	uint32_t exit_took; /* a run's exit the last request took, or none */
	bool exit_took_slot; /* ... and it got the exit's slot */
	uint32_t pro_pos;
	uint32_t pro_sync; /* a persistent entry's position: last in step */
	uint32_t pro_loose;
	uint32_t votes_back;
	uint32_t votes_ahead;
	uint64_t dyn_hist;
	uint32_t dyn_seen;
	uint64_t run_sizes[MATCH_EXIT_RUN];
	uint32_t run_head;
	uint32_t run_len;
	uint32_t run_stay;
	uint64_t marks;
	struct match_live *live;
	size_t nr_live;
	size_t cap_live;
	struct ss_tags *use;
	struct sstreams *ss;
	uint64_t chunk;
	uint64_t *fine; /* per pool chunk, a bit: one chunk per segment */
	uint64_t busy_off; /* map_slot() is mapping [busy_off, + busy_bytes) */
	uint64_t busy_bytes;
	uint64_t mapped_bytes; /* of the pool */
	uint64_t live_bytes; /* slot bytes of @live */
	uint64_t *seen_size;
	bool suspect;
	bool warm_done;
	uint64_t warm_misses;
	bool syncing; /* wait for the start of an iteration */
	bool disabled;
	bool marked; /* "iteration" markers come */
	bool implicit;
	uint32_t probe_seen;
	uint32_t probe_misses;
	uint32_t since_mark; /* requests since the iteration began */
	bool standby;
	uint32_t steps;
};

/*
 * Can @plan do better than no plan?  Not without a steady iteration (a
 * recording of one step: only persistent entries, or nothing planned): the
 * runtime then runs exactly as in off mode.
 */
bool match_plan_pays(const struct stalloc_plan *plan);
/*
 * How long after its position's window opens [@off, @off + @size) of free
 * range @range stays clear of planned slots (clear.c); clear_build()
 * makes the tables at match_init() (false: no host memory for them, and
 * clear_for() answers 0).
 */
bool clear_build(struct matcher *m);
uint64_t clear_for(const struct matcher *m, uint32_t range, uint64_t off,
		   uint64_t size);
/*
 * Mark the pool chunks under the plan's free ranges, to be mapped one
 * chunk per driver allocation (segs.c), at match_init(), unless !@fine:
 * false without host memory for the marks (m->fine stays NULL: none is).
 */
bool pool_segs_build(struct matcher *m, bool fine);
/* Is pool chunk @c mapped one chunk per driver allocation? */
bool pool_chunk_fine(const struct matcher *m, uint64_t c);
/* Take @plan (owned from now on); the pool starts at the space's base. */
int match_init(struct matcher *m, struct stalloc_plan *plan,
	       struct vmm_space *vmm, struct sstreams *ss);
void match_destroy(struct matcher *m);
/* Bytes of address space the pool takes, rounded to chunks. */
uint64_t match_pool_bytes(const struct matcher *m);
/*
 * A request of @size for @stream: true and *@addr, *@ent set if it is
 * served from the plan (after making @stream wait for the streams that
 * used the slot's chunks last) -- at its planned slot, or (*@ent == MATCH_REUSED) in the free space
 * the plan leaves to its dynamic position; false to serve it from the
 * dynamic region (*@miss: the plan expected something else here).
 */
bool match_alloc(struct matcher *m, uint64_t size, uint64_t id, void *stream,
		 uint64_t *addr, uint32_t *ent, bool *miss);
/*
 * Lend the pool's idle memory (mapper/lend.c): unmap mappings under no
 * live block, those the plan needs last first, until @want bytes went, so
 * that a dynamic request maps their physical memory instead of new.  A
 * slot that needs them again maps them back.  Nothing under [@va, @va +
 * @bytes), the range about to be mapped, is lent, nor a mapping whose last
 * users' work cannot be waited for on their own streams (ss_settle(); @slot
 * names the requesting stream, SS_MAX none): never a device-wide
 * synchronisation.  The bytes unmapped.
 */
uint64_t match_lend(struct matcher *m, uint64_t va, uint64_t bytes,
		    uint64_t want, unsigned int slot);
/* True if @addr is in the pool's address range. */
static inline bool match_owns(const struct matcher *m, uint64_t addr)
{
	return addr - m->base < m->pool_bytes;
}
/* The live block starting at @addr: its index in m->live, or false. */
bool match_find(const struct matcher *m, uint64_t addr, size_t *idx);
/* Live block @idx was freed; @stream last used it. */
void match_forget(struct matcher *m, size_t idx, void *stream);
/* Live block @idx is also used on @stream (record_stream). */
void match_record_stream(struct matcher *m, size_t idx, void *stream);
/*
 * An "iteration" marker.  Returns false when the iteration just ended was
 * the first planned one and its requests do not fit the plan (fingerprint
 * mismatch): the matcher is then disabled.
 */
bool match_iteration(struct matcher *m);

/*
 * A plan made in-process (auto mode) takes over at an iteration marker:
 * the prologue and the warm-up it describes are behind, so the marker
 * being handled starts a planned iteration.
 */
void match_start_planned(struct matcher *m);
/*
 * The warm-up just ended (@warm_done): true once, clearing it; *@first
 * tells that the first planned iteration is the one beginning.
 */
bool match_warm_over(struct matcher *m, bool *first);
/*
 * The same, but at any moment of an iteration (auto mode without
 * markers): nothing is served until a request matches the iteration's
 * first position, which then starts a planned iteration.
 */
void match_start_synced(struct matcher *m);

#endif /* STALLOC_MAPPER_MATCH_H */
