// SPDX-License-Identifier: MIT
/*
 * mapper/match.c - serve requests at their planned addresses
 *
 * The matcher keeps a cursor over the planned iteration's request
 * positions.  Before the plan's warm-up is over (the first iterations,
 * which create optimizer state) it counts prologue allocations and serves
 * the persistent ones.  In a planned iteration, a request is matched to a
 * position near the cursor, in this order: a dynamic position at the
 * cursor takes any request at all (its sizes vary); a static one a request
 * of exactly its size; then the next MATCH_AHEAD static positions one of
 * exactly theirs (the job may have issued fewer requests than planned);
 * then the cursor's position any request no larger than its slot; then
 * the dynamic positions ahead and the MATCH_BEHIND static ones before a
 * request of their size (range).  The cursor then moves past the match.
 * So an inserted request matches nothing and leaves the cursor where it
 * was, a missing one is skipped over, a resized one costs itself only:
 * never a cascade of misses (a grown one moves the cursor past its slot:
 * resized_at_cursor()).  In a run of dynamic positions the count of
 * requests keeps the cursor in step; the sizes re-align it after an
 * insertion where they have been telling (run_drift(), sizes_tell()), and
 * confirm that the job left a run early (dyn_run_exit()) or stayed in it
 * past its end (run_longer()).  A slot over four times a request's size
 * is not taken loosely (too_loose()).  A dynamic request goes where the
 * plan's free space stays clear longest (reuse(), clear.c) -- one out of
 * its position's sizes only where it stays clear as long as its
 * neighbours live (reuse_need()).  A static request whose slot a block
 * placed out of step holds takes a passed position's idle slot
 * (borrow_passed()).  In the prologue, persistent entries go by position,
 * by exact size when late (pro_find()), past one whose request was left
 * out, and, in the warm-up's last iteration, by exact size when early
 * (warm_early()) -- and in plans with dynamic positions by size alone
 * there (warm_by_size()), where the warm-up's tail starts no iteration
 * before the cursor is near the end (warm_wrapped()).  With markers, an
 * iteration whose start was inferred (its marker missing) and whose first
 * requests then miss was none -- an evaluation or a graph capture after a
 * step -- and the matcher stands aside until the next marker
 * (probe_inferred()).
 *
 * Before a slot is handed out, the planned blocks live now (kept sorted by
 * offset) are searched for one overlapping it, in O(log n); if one does --
 * the job strayed from the plan -- the request is served dynamically.  The
 * pool's chunks are mapped the first time a slot needs them and then stay
 * mapped.
 *
 * Streams: a freed block leaves its tags on the pool chunks under it
 * (streams.h).  Handing out a slot for stream S first makes S wait, on the
 * device, for the checkpoints of every other stream tagged there; a slot
 * whose chunks are not covered yet (their stream has not checkpointed
 * since) cannot go elsewhere, and waits for the whole device instead
 * (counted in the streams' syncs).  A dynamic request placed in the plan's
 * free space only takes ready chunks.  Same-stream reuse waits for nothing,
 * so a one-stream job makes no driver call.
 *
 * At the end of the first planned iteration the sizes seen at the planned
 * positions are hashed like the plan's fingerprint; a mismatch disables the
 * plan (the job goes on with the dynamic allocator) with one warning.
 *
 * Locking: every call runs under the device lock.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "../lib/options.h"
#include "../lib/util.h"
#include "match.h"

static bool matcher_tables(struct matcher *m)
{
	const struct stalloc_plan *p = m->plan;
	size_t i;

	m->iter_ent = malloc((p->nr_positions + 1) * sizeof(*m->iter_ent));
	m->dyn_of = malloc((p->nr_positions + 1) * sizeof(*m->dyn_of));
	m->pro_list = calloc(p->nr_ent + 1, sizeof(*m->pro_list));
	m->seen_size = calloc(p->nr_ent + 1, sizeof(*m->seen_size));
	m->cap_live = p->nr_ent + 16;
	m->live = malloc(m->cap_live * sizeof(*m->live));
	if (!m->iter_ent || !m->dyn_of || !m->pro_list || !m->seen_size ||
	    !m->live)
		return false;
	memset(m->iter_ent, 0xff, (p->nr_positions + 1) * sizeof(*m->iter_ent));
	memset(m->dyn_of, 0xff, (p->nr_positions + 1) * sizeof(*m->dyn_of));
	for (i = 0; i < p->nr_ent; i++) {
		const struct plan_entry *e = &p->ent[i];

		if (e->cls == PLAN_PERSISTENT)
			m->pro_list[m->nr_pro++] = (uint32_t)i;
		else if (e->cls != PLAN_ALTERNATE || plan_alt_first(p->ent, i))
			m->iter_ent[e->pos] = (int32_t)i;
	}
	for (i = 0; i < p->nr_dyn; i++)
		m->dyn_of[p->dyn[i].pos] = (int32_t)i;
	/* persistent entries are written in prologue order; make sure */
	for (i = 1; i < m->nr_pro; i++)
		if (p->ent[m->pro_list[i]].pos < p->ent[m->pro_list[i - 1]].pos)
			return false;
	return true;
}

/* Does the iteration under way record its sizes for fingerprint_ok()? */
static bool checking(const struct matcher *m)
{
	return m->marks == m->plan->warmup + 1 ||
	       (m->suspect && m->marks == m->plan->warmup + 2);
}

bool match_plan_pays(const struct stalloc_plan *plan)
{
	size_t i;

	if (plan->check == STALLOC_CHECK_REJECT)
		return false;
	for (i = 0; i < plan->nr_ent; i++)
		if (plan->ent[i].cls != PLAN_PERSISTENT)
			return true;
	return false;
}

uint64_t match_pool_bytes(const struct matcher *m)
{
	uint64_t r;

	if (!sa_round_up(m->plan->pool, m->chunk, &r))
		return UINT64_MAX;
	return r;
}

int match_init(struct matcher *m, struct stalloc_plan *plan,
	       struct vmm_space *vmm, struct sstreams *ss)
{
	bool fine;
	int err;

	memset(m, 0, sizeof(*m));
	m->plan = plan;
	m->vmm = vmm;
	m->ss = ss;
	m->base = vmm_base(vmm);
	m->chunk = vmm_chunk_bytes(vmm);
	m->loose = UINT32_MAX;
	m->exit_pos = UINT32_MAX;
	m->exit_took = UINT32_MAX;
	m->pro_loose = UINT32_MAX;
	if (match_pool_bytes(m) > vmm_size(vmm) / 2) {
		match_destroy(m);
		return sa_error(-ENOMEM,
				"runtime: device %d: the plan's pool of %llu "
				"bytes does not fit the address space",
				vmm_device(vmm),
				(unsigned long long)plan->pool);
	}
	m->pool_bytes = match_pool_bytes(m);
	m->use = calloc(m->pool_bytes / m->chunk + 1, sizeof(*m->use));
	if (!m->use || !matcher_tables(m)) {
		match_destroy(m);
		return sa_error(-ENOMEM, "runtime: out of host memory");
	}
	err = sa_opt_bool(SA_OPT_LEND_FINE, &fine);
	if (err) {
		match_destroy(m);
		return err;
	}
	if (!pool_segs_build(m, fine))
		sa_log(STALLOC_LOG_WARN,
		       "runtime: device %d: no host memory to mark the plan's "
		       "free ranges; its pool maps in large segments",
		       vmm_device(vmm));
	if (!clear_build(m)) /* reuse() then takes the first range with room */
		sa_log(STALLOC_LOG_WARN,
		       "runtime: device %d: no host memory for the tables of "
		       "the plan's free space; going on without them",
		       vmm_device(vmm));
	return 0;
}

void match_destroy(struct matcher *m)
{
	free(m->iter_ent);
	free(m->dyn_of);
	free(m->pro_list);
	free(m->seen_size);
	free(m->live);
	free(m->use);
	free(m->clear);
	free(m->clear_first);
	free(m->fine);
	stalloc_plan_free(m->plan);
	memset(m, 0, sizeof(*m));
}

/* Index of the first live block with offset >= @off. */
static size_t live_find(const struct matcher *m, uint64_t off)
{
	size_t lo = 0, hi = m->nr_live;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (m->live[mid].off < off)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static bool range_free(const struct matcher *m, uint64_t off, uint64_t size)
{
	size_t i = live_find(m, off);

	if (i > 0 && m->live[i - 1].off + m->live[i - 1].size > off)
		return false;
	return i == m->nr_live || m->live[i].off >= off + size;
}

static bool live_add(struct matcher *m, uint64_t off, uint64_t size,
		     uint32_t ent)
{
	/* req and id are filled in by match_alloc once it succeeded */
	size_t i = live_find(m, off);

	if (m->nr_live == m->cap_live) {
		size_t cap = m->cap_live * 2 + 16;
		struct match_live *nl = realloc(m->live, cap * sizeof(*nl));

		if (!nl)
			return false;
		m->live = nl;
		m->cap_live = cap;
	}
	memmove(m->live + i + 1, m->live + i,
		(m->nr_live - i) * sizeof(*m->live));
	m->live_bytes += size;
	m->live[i] =
		(struct match_live){ .off = off, .size = size, .ent = ent };
	m->nr_live++;
	return true;
}

static void live_remove(struct matcher *m, size_t i)
{
	m->live_bytes -= m->live[i].size;
	memmove(m->live + i, m->live + i + 1,
		(m->nr_live - i - 1) * sizeof(*m->live));
	m->nr_live--;
}

bool match_find(const struct matcher *m, uint64_t addr, size_t *idx)
{
	size_t i = live_find(m, addr - m->base);

	if (i == m->nr_live || m->live[i].off != addr - m->base)
		return false;
	*idx = i;
	return true;
}

void match_forget(struct matcher *m, size_t idx, void *stream)
{
	const struct match_live *l = &m->live[idx];
	uint64_t c = l->off / m->chunk,
		 last = (l->off + l->size - 1) / m->chunk;
	struct ss_tags t = l->users;

	ss_freed(m->ss, &t, ss_slot(m->ss, stream));
	for (; c <= last; c++)
		ss_merge(m->ss, &m->use[c], &t);
	live_remove(m, idx);
}

void match_record_stream(struct matcher *m, size_t idx, void *stream)
{
	ss_tag(&m->live[idx].users, ss_slot(m->ss, stream), 0);
}

/*
 * Order @stream after the last users of the chunks under [off, off + size)
 * (a device sync only if @may_sync and they are not covered yet) and make
 * it their only user.
 */
static int wait_use(struct matcher *m, uint64_t off, uint64_t size,
		    void *stream, bool may_sync)
{
	uint64_t c = off / m->chunk, last = (off + size - 1) / m->chunk;
	struct ss_tags t = { 0 };
	int err;

	for (; c <= last; c++)
		ss_merge(m->ss, &t, &m->use[c]);
	err = ss_wait(m->ss, &t, ss_slot(m->ss, stream), may_sync);
	if (err)
		return err;
	c = off / m->chunk;
	memset(&m->use[c], 0, (last - c + 1) * sizeof(m->use[0]));
	return 0;
}

static int map_slot(struct matcher *m, uint64_t off, uint64_t size,
		    void *stream, bool whole);

/*
 * The lowest offset in free range @rg where @size is away from live
 * blocks: one search, then a walk over the blocks in order (the live set
 * is sorted by offset and its blocks do not overlap).
 */
static bool range_fit(const struct matcher *m, const struct plan_range *rg,
		      uint64_t size, uint64_t *off)
{
	uint64_t at = rg->offset, end = rg->offset + rg->len;
	size_t i = live_find(m, at);

	if (i > 0 && m->live[i - 1].off + m->live[i - 1].size > at)
		at = m->live[i - 1].off + m->live[i - 1].size;
	for (; i < m->nr_live && m->live[i].off < at + size && at + size <= end;
	     i++)
		if (m->live[i].off + m->live[i].size > at)
			at = m->live[i].off + m->live[i].size;
	if (at + size > end)
		return false;
	*off = at;
	return true;
}

/*
 * @size in dynamic position @d's free ranges, away from every live block
 * (planned or reused): the plan's free space during the position's
 * window.  A request that outlives its window is still safe: it is in the
 * live set, and a planned slot it would overlap is refused.  Of the first
 * fit in each range, the one that stays clear of planned slots longest
 * after the window opens (clear.c): under another routing, a run's
 * positions take other tensors than recorded (an expert's kept buffer
 * where a short-lived one was), and such a request, in space a slot needs
 * right after the window, made that slot's request miss, and every one
 * after it over the same space (MoE imbalance 4 from another seed: 17
 * misses behind one 40 KB buffer).  Only where it stays clear for at
 * least @need after the window opens (0: anywhere it fits).
 */
static bool reuse(struct matcher *m, const struct plan_dyn *d, uint64_t size,
		  uint64_t need, void *stream, uint64_t *addr)
{
	uint64_t best = 0, best_clear = 0, at, c;
	bool found = false;
	uint32_t r;

	for (r = d->first_range; r < d->first_range + d->nr_ranges; r++) {
		if (!range_fit(m, &m->plan->ranges[r], size, &at))
			continue;
		c = clear_for(m, r, at, size);
		if (c < need)
			continue;
		if (!found || c > best_clear) {
			found = true;
			best = at;
			best_clear = c;
		}
	}
	if (!found || map_slot(m, best, size, stream, false) ||
	    wait_use(m, best, size, stream, false) ||
	    !live_add(m, best, size, MATCH_REUSED))
		return false;
	*addr = m->base + best;
	return true;
}

/*
 * Map what is not mapped yet of pool chunks [lo, hi): runs of chunks under
 * the free ranges one chunk per driver allocation, the others as the vmm
 * cuts them (segs.c), with @flags.  The caller marks the range busy.
 */
static int map_chunks(struct matcher *m, uint64_t lo, uint64_t hi,
		      unsigned int flags, uint64_t *got)
{
	uint64_t c, end, g;
	bool fine;
	int err = 0;

	for (c = lo; c < hi && !err; c = end) {
		fine = pool_chunk_fine(m, c);
		for (end = c + 1; end < hi && pool_chunk_fine(m, end) == fine;
		     end++)
			;
		err = vmm_map_missing_flags(m->vmm, m->base + c * m->chunk,
					    (end - c) * m->chunk,
					    fine ? VMM_FINE : flags, &g);
		*got += g;
	}
	return err;
}

/*
 * The same for slot [@off, @off + @size) of a persistent entry (weights,
 * optimizer state): live from the prologue to the end, it is never idle,
 * so never lent, and its chunks need not be cut for lending.  The chunks
 * it shares with its neighbours (its partly covered end chunks) get a
 * segment of their own, so that lending can still take an idle
 * neighbour's memory apart from it; the chunks wholly inside it go in as
 * few segments as the vmm allows (VMM_WHOLE), not one more at each end.
 */
static int map_whole(struct matcher *m, uint64_t off, uint64_t size,
		     uint64_t lo, uint64_t hi, uint64_t *got)
{
	int err = 0;

	if (off % m->chunk && hi - lo > 1) {
		err = map_chunks(m, lo, lo + 1, 0, got);
		lo++;
	}
	if (!err && (off + size) % m->chunk && hi - lo > 1) {
		err = map_chunks(m, hi - 1, hi, 0, got);
		hi--;
	}
	return err ?: map_chunks(m, lo, hi, VMM_WHOLE, got);
}

/*
 * Map the pool chunks under [off, off + size) not mapped yet (@whole: a
 * persistent entry's).  While it maps, lending leaves the whole range alone
 * (the shrinker is called once per run).
 */
static int map_slot(struct matcher *m, uint64_t off, uint64_t size,
		    void *stream, bool whole)
{
	uint64_t lo = off / m->chunk,
		 hi = (off + size + m->chunk - 1) / m->chunk;
	uint64_t got = 0;
	int err;

	/* only the matcher maps the pool: once all of it is, nothing to do */
	if (likely(m->mapped_bytes >= m->pool_bytes))
		return 0;
	m->ss->cur = ss_slot(m->ss, stream); /* the shrinker's (streams.h) */
	m->busy_off = lo * m->chunk;
	m->busy_bytes = (hi - lo) * m->chunk;
	err = whole ? map_whole(m, off, size, lo, hi, &got) :
		      map_chunks(m, lo, hi, 0, &got);
	m->busy_bytes = 0;
	m->ss->cur = SS_MAX;
	m->mapped_bytes += got;
	return err;
}

/* The entry planned at iteration position @pos for this iteration. */
static int32_t entry_at(const struct matcher *m, uint32_t pos)
{
	int32_t e = m->iter_ent[pos];

	/* alternating pairs: the even slot in even planned iterations */
	if (e >= 0 && m->plan->ent[e].cls == PLAN_ALTERNATE &&
	    (m->marks - m->plan->warmup) % 2 == 0)
		e++;
	return e;
}

/*
 * Is the request being placed, of @asize after rounding, @pe's exactly?
 * Its bytes too where the plan recorded them: a 4-byte request and an
 * 8-byte one both take 512 after rounding, and with only the rounded size
 * a small request ahead of its place took a slot up to MATCH_AHEAD
 * positions on, and the requests between then missed (the H100 MoE
 * recordings: half of their 1,510 misses).
 */
static bool ent_takes(const struct matcher *m, const struct plan_entry *pe,
		      uint64_t asize)
{
	return asize == pe->size && (!pe->req || pe->req == m->bytes);
}

/* Is the request being placed within the sizes seen at dynamic @d? */
static bool dyn_takes(const struct matcher *m, const struct plan_dyn *d,
		      uint64_t asize)
{
	if (d->req_max)
		return m->bytes >= d->req_min && m->bytes <= d->req_max;
	return asize >= d->size_min && asize <= d->size_max;
}

/* Does position @pos take a request of @size (@loose: up to its slot)? */
static bool fits(const struct matcher *m, uint32_t pos, uint64_t size,
		 bool loose)
{
	int32_t e = entry_at(m, pos), d = m->dyn_of[pos];

	if (e >= 0)
		return loose ? size <= m->plan->ent[e].size :
			       ent_takes(m, &m->plan->ent[e], size);
	if (d >= 0)
		return dyn_takes(m, &m->plan->dyn[d], size);
	return false;
}

/* Is position @pos a static one whose slot is free now? */
static bool slot_free(const struct matcher *m, uint32_t pos)
{
	int32_t e = entry_at(m, pos);

	return e >= 0 &&
	       range_free(m, m->plan->ent[e].offset, m->plan->ent[e].size);
}

/* Position @k takes requests of varying sizes (no static entry). */
static bool is_dyn(const struct matcher *m, uint32_t k)
{
	return entry_at(m, k) < 0 && m->dyn_of[k] >= 0;
}

/*
 * The position near the cursor this request matches, or -1; *@loose
 * (may be NULL) tells a request taken by a larger slot than its size.
 */
static int64_t find_pos(const struct matcher *m, uint64_t size, bool *loose)
{
	uint32_t n = m->plan->nr_positions, k;

	/*
	 * A dynamic position takes whatever comes: its sizes vary (MoE
	 * routing), so a size says nothing there.  Otherwise an exact match
	 * ahead comes before a looser one at the cursor: the job may be
	 * ahead of the cursor (it issued fewer requests than planned: an
	 * expert with no tokens, a slot whose request missed), and a small
	 * request in a large slot would hold it past its planned end, in the
	 * way of the slots planned there after it.
	 */
	if (loose)
		*loose = false;
	/*
	 * The last request took a slot loosely, and this one is that slot's
	 * exact size: the last was an inserted request, this one the slot's
	 * own.  Otherwise, with slots of one size in a row, each request
	 * would take the next one's slot and the iteration drift off the plan.
	 */
	if (m->loose < n && fits(m, m->loose, size, false))
		return m->loose;
	if (m->cursor < n && is_dyn(m, m->cursor))
		return m->cursor;
	if (m->cursor < n && fits(m, m->cursor, size, false))
		return m->cursor;
	for (k = m->skip_lo; k < m->skip_hi && k < m->cursor; k++)
		if (slot_free(m, k) && fits(m, k, size, false))
			return k;
	for (k = 1; k <= MATCH_AHEAD && m->cursor + k < n; k++)
		if (!is_dyn(m, m->cursor + k) &&
		    fits(m, m->cursor + k, size, false))
			break;
	if (k > 1) {
		uint32_t b;

		for (b = 1; b <= MATCH_BEHIND && b <= m->cursor; b++)
			if (slot_free(m, m->cursor - b) &&
			    fits(m, m->cursor - b, size, false))
				return m->cursor - b;
	}
	if (k <= MATCH_AHEAD && m->cursor + k < n)
		return m->cursor + k;
	/*
	 * Just past a run of dynamic positions, a request that matches
	 * nothing ahead is one more of that run (more tokens routed than
	 * recorded, a request inserted among them), not a shrunk one: it
	 * must not take the next static slot, whose own request comes next.
	 */
	if (m->cursor > 0 && m->cursor <= n && is_dyn(m, m->cursor - 1))
		return m->cursor - 1;
	if (m->cursor < n && fits(m, m->cursor, size, true)) {
		if (loose)
			*loose = true;
		return m->cursor;
	}
	for (k = 1; k <= MATCH_AHEAD && m->cursor + k < n; k++)
		if (is_dyn(m, m->cursor + k) &&
		    fits(m, m->cursor + k, size, false))
			return m->cursor + k;
	for (k = 1; k <= MATCH_BEHIND && k <= m->cursor; k++)
		if (fits(m, m->cursor - k, size, false))
			return m->cursor - k;
	return -1;
}

static bool serve(struct matcher *m, int32_t e, void *stream, uint64_t *addr,
		  uint32_t *ent)
{
	const struct plan_entry *pe = &m->plan->ent[e];

	if (!range_free(m, pe->offset, pe->size) ||
	    map_slot(m, pe->offset, pe->size, stream,
		     pe->cls == PLAN_PERSISTENT) ||
	    wait_use(m, pe->offset, pe->size, stream, !m->ss->capture) ||
	    !live_add(m, pe->offset, pe->size, (uint32_t)e))
		return false;
	*addr = m->base + pe->offset;
	*ent = (uint32_t)e;
	return true;
}

static bool in_warmup(const struct matcher *m);

/*
 * Does the prologue count say nothing of where the job is?  In the
 * warm-up's last iteration of a plan with dynamic positions it varies
 * with routing (28 requests more than recorded on an 8-expert MoE at
 * imbalance 4): there, a persistent entry is matched by its size up to
 * MATCH_WARM_LATE positions late, and a smaller request that comes at
 * its planned count does not take it.  By the count, nine small requests
 * took the slots of the optimizer state created at the warm-up's end
 * (given up once eight late), and the state, served at the steady slots
 * of its size, held them in every planned iteration: 976 misses.  A larger
 * request at the count still takes the entry, and misses there: that is
 * the entry's own, grown, and served as a steady request instead it would
 * hold a steady slot for good.
 */
static bool warm_by_size(const struct matcher *m)
{
	return m->plan->nr_dyn && in_warmup(m);
}

/*
 * How many positions late persistent entry @pe may come: MATCH_AHEAD,
 * and where the count says nothing (warm_by_size()) MATCH_WARM_LATE and a
 * 1/MATCH_WARM_DRIFT of the positions between the last entry matched and
 * @pe -- the count drifts with the routed requests in between.  The
 * optimizer state created at the end of an MoE pipeline rank's warm-up
 * came 70 positions late (1,337 after the parameters): given up at 64, its
 * nine tensors took steady slots for good, and half the planned requests
 * of every iteration missed (1,217 of 2,435).  Not for entries smaller
 * than a chunk: steady requests of their sizes are common (scalars, all
 * 512 bytes once aligned), one taken late shifts the entries after it
 * (17 misses more on the H100 MoE recordings), and such an entry, lost,
 * holds only a small slot.
 */
static uint32_t pro_late(const struct matcher *m, const struct plan_entry *pe)
{
	if (!warm_by_size(m))
		return MATCH_AHEAD;
	if (pe->size < m->chunk)
		return MATCH_WARM_LATE;
	return MATCH_WARM_LATE +
	       (pe->pos > m->pro_sync ? pe->pos - m->pro_sync : 0) /
		       MATCH_WARM_DRIFT;
}

/*
 * The persistent entry a prologue request of @size at prologue position
 * @pos is, as an index into pro_list, or -1: the next one, if planned at
 * @pos (whatever the size: a smaller request takes its slot, a larger one
 * misses), or planned up to MATCH_AHEAD positions before @pos and exactly
 * @size.  A request inserted earlier in the prologue (a tensor logged, a
 * warm-up batch) shifts the count: matched by position alone, every
 * persistent entry after it would be lost, and their tensors, living to
 * the end, would hold steady slots in every iteration.  Only the next
 * entry: the warm-up's steady requests come among them, often of their
 * sizes.  Entries left more than pro_late() behind are given up.
 */
static int64_t pro_find(struct matcher *m, uint32_t pos, uint64_t size)
{
	const struct plan_entry *pe;

	for (; m->pro_next < m->nr_pro; m->pro_next++) {
		pe = &m->plan->ent[m->pro_list[m->pro_next]];
		if (pos <= pe->pos || pos - pe->pos <= pro_late(m, pe))
			break;
	}
	if (m->pro_next == m->nr_pro)
		return -1;
	pe = &m->plan->ent[m->pro_list[m->pro_next]];
	if (pe->pos == pos && !ent_takes(m, pe, size) &&
	    m->pro_next + 1 < m->nr_pro) {
		const struct plan_entry *pn =
			&m->plan->ent[m->pro_list[m->pro_next + 1]];

		/*
		 * Not this entry's size but exactly the next one's, planned
		 * right after it: this entry's request was left out (a
		 * parameter without gradient, a frozen layer).  Taken
		 * loosely instead, every request after it would take the
		 * entry of the one before it, and miss at each change of
		 * size.
		 */
		if (pn->pos == pos + 1 && ent_takes(m, pn, size))
			return (int64_t)m->pro_next + 1;
	}
	if (size < pe->size && warm_by_size(m))
		return -1;
	if (pe->pos == pos || (ent_takes(m, pe, size) && pe->pos < pos))
		return (int64_t)m->pro_next;
	return -1;
}

static bool prologue_alloc(struct matcher *m, uint64_t size, void *stream,
			   uint64_t *addr, uint32_t *ent, bool *miss)
{
	uint32_t e = m->pro_loose;
	int64_t i;

	/*
	 * The last request took entry e's slot though smaller, and this
	 * one is e's exact size: the last was an inserted request (freed,
	 * or the slot is busy and this one misses), this is e's own.
	 */
	m->pro_loose = UINT32_MAX;
	if (e == UINT32_MAX || !ent_takes(m, &m->plan->ent[e], size)) {
		i = pro_find(m, m->pro_pos, size);
		if (i < 0) {
			m->pro_pos++;
			return false;
		}
		e = m->pro_list[i];
		m->pro_next = (size_t)i + 1;
		/* in step with the plan's count again */
		m->pro_pos = m->plan->ent[e].pos + 1;
		m->pro_sync = m->plan->ent[e].pos;
		if (size < m->plan->ent[e].size)
			m->pro_loose = e;
	}
	m->seen_size[e] = size;
	if (size > m->plan->ent[e].size ||
	    !serve(m, (int32_t)e, stream, addr, ent)) {
		*miss = true;
		return false;
	}
	return true;
}

/* Record the request on the block just added at @addr. */
static void note(struct matcher *m, uint64_t addr, uint64_t req, uint64_t id,
		 void *stream)
{
	size_t i;

	if (match_find(m, addr, &i)) {
		m->live[i].req = req;
		m->live[i].id = id;
		m->live[i].users = ss_user(ss_slot(m->ss, stream));
	}
}

static bool match_place(struct matcher *m, uint64_t size, void *stream,
			uint64_t *addr, uint32_t *ent, bool *miss);
static void implicit_iteration(struct matcher *m, uint64_t asize);
static void inferred_iteration(struct matcher *m);
static void missed_marker(struct matcher *m, uint64_t asize);
static void probe_inferred(struct matcher *m, bool missed);

bool match_alloc(struct matcher *m, uint64_t size, uint64_t id, void *stream,
		 uint64_t *addr, uint32_t *ent, bool *miss)
{
	bool hit = match_place(m, size, stream, addr, ent, miss);

	if (hit)
		note(m, *addr, size, id, stream);
	return hit;
}

/*
 * Have the sizes of the requests at dynamic positions been telling: 60 of
 * the last 64 within the sizes their position was seen at?  Not under
 * routing from another seed (the synthetic MoE rows fit 50 to 80%).
 */
static bool sizes_tell(const struct matcher *m)
{
	return m->dyn_seen >= 64 &&
	       __builtin_popcountll(m->dyn_hist) >= MATCH_SIZES_TELL;
}

/*
 * A request that no position takes, larger than the static slot at the
 * cursor: that slot's request, grown (a longer sequence, a padded batch).
 * The cursor goes past the slot, so that the next request finds its own;
 * left at the slot, the next request of a run of one size would take it,
 * each one after it the slot of the one before, and the run would end
 * on slots whose lifetimes are not theirs.  Were it an inserted request
 * instead, the slot's own request finds it again behind the cursor.  In a
 * plan with dynamic positions, only while their sizes have been telling
 * (sizes_tell()): under other routing such a request is most often one
 * more of a run of them (more tokens routed than recorded), and several
 * would carry the cursor past the slots that follow (MoE imbalance 4:
 * +306 MiB).
 */
static void resized_at_cursor(struct matcher *m, uint64_t asize)
{
	int32_t e;

	if (m->cursor >= m->plan->nr_positions ||
	    (m->plan->nr_dyn && !sizes_tell(m)))
		return;
	e = entry_at(m, m->cursor);
	if (e >= 0 && asize > m->plan->ent[e].size)
		m->cursor++;
}

/* Is @k a dynamic position that takes @size by the sizes it was seen at? */
static bool dyn_fits(const struct matcher *m, int64_t k, uint64_t size)
{
	return k >= 0 && k < m->plan->nr_positions && is_dyn(m, (uint32_t)k) &&
	       fits(m, (uint32_t)k, size, false);
}

/*
 * Dynamic position @pos takes a request of @size whatever its size, so
 * that the run keeps in step with the count of requests when routing
 * changes their sizes.  A request inserted into the run, or one left out,
 * shifts that count: every later request of the run takes its neighbour's
 * position, whose free space in the plan is free for another window, and
 * those that outlive it stand in the way of the static slots planned
 * there after the run (one scalar logged inside an expert loop cost 12
 * misses).  The sizes tell, though not one request alone (routing moves a
 * size across its neighbour's range now and then): when
 * MATCH_DRIFT_VOTES requests in a row fit the sizes of the position
 * before theirs and not their own -- none in between fitting its own or
 * the position after's and not that one -- the run is one behind, and
 * this request is taken as the position before's; likewise ahead.  A
 * request that says the other way ends the count: under routing from
 * another seed an expert that got every token is out of its position's
 * recorded sizes and inside a neighbour's, and requests voting ahead,
 * behind, ahead moved the cursor ahead in step with nothing (a held-out
 * MoE rank: the run's twin block then passed for its exit, 340 misses,
 * 38 MiB over off mode).  The position that takes the request.
 */
static int64_t run_drift(struct matcher *m, int64_t pos, uint64_t size)
{
	bool own = dyn_fits(m, pos, size);
	bool back, ahead;

	m->dyn_hist = m->dyn_hist << 1 | own;
	if (m->dyn_seen < 64)
		m->dyn_seen++;
	if (!sizes_tell(m))
		return pos;
	back = dyn_fits(m, pos - 1, size);
	ahead = dyn_fits(m, pos + 1, size);

	if ((own || ahead) && !back)
		m->votes_back = 0;
	if ((own || back) && !ahead)
		m->votes_ahead = 0;
	if (!own && back && ++m->votes_back >= MATCH_DRIFT_VOTES) {
		m->votes_back = m->votes_ahead = 0;
		return pos - 1;
	}
	if (!own && ahead && ++m->votes_ahead >= MATCH_DRIFT_VOTES) {
		m->votes_back = m->votes_ahead = 0;
		return pos + 1;
	}
	return pos;
}

/* Does static position @k take @asize exactly, its slot free? */
static bool exit_fits(const struct matcher *m, uint32_t k, uint64_t asize)
{
	return k < m->plan->nr_positions && !is_dyn(m, k) &&
	       fits(m, k, asize, false) && slot_free(m, k);
}

/* Forget the chain of requests matching a run's exit (dyn_run_exit()). */
static void exit_forget(struct matcher *m)
{
	m->exit_pos = UINT32_MAX;
	m->exit_took = UINT32_MAX;
	m->exit_took_slot = false;
	m->exit_seen = 0;
	m->exit_strong = m->exit_drift = m->exit_vary = false;
}

/* The size of the @i-th of the job's last @len requests (run_note()). */
static uint64_t last_size(const struct matcher *m, uint32_t len, uint32_t i)
{
	return m->run_sizes[(m->run_head + MATCH_EXIT_RUN - len + i) %
			    MATCH_EXIT_RUN];
}

/*
 * Were the job's last @len requests, all taken by dynamic positions, the
 * sizes of the @len static positions from the cursor, in order?
 */
static bool took_block(const struct matcher *m, uint32_t len)
{
	bool vary = false;
	uint32_t i;

	if (len > m->run_len)
		return false;
	for (i = 0; i < len; i++) {
		uint64_t size = last_size(m, len, i);
		int32_t e = entry_at(m, m->cursor + i);

		if (e < 0 || m->plan->ent[e].size != size)
			return false;
		vary |= size != last_size(m, len, 0);
	}
	return vary;
}

/*
 * Where the job may be after a run shorter than recorded whose exit block
 * repeats the run's last block (the block of a busy expert after those of
 * the others): the run's positions, which take any size, took the exit
 * block's requests one to one, and the job is past that block.  So: the
 * first static position that takes @asize, at most MATCH_EXIT_RUN after
 * the cursor, such that the last requests were the sizes of the static
 * positions between (took_block()).  0 if none.
 */
static uint32_t past_twin(const struct matcher *m, uint64_t asize)
{
	uint32_t len;

	for (len = MATCH_EXIT_CONFIRM; len <= MATCH_EXIT_RUN; len++)
		if (exit_fits(m, m->cursor + len, asize) && took_block(m, len))
			return m->cursor + len;
	return 0;
}

/* Would position @q have taken a request of @size? */
static bool pos_took(const struct matcher *m, uint32_t q, uint64_t size)
{
	int32_t e = entry_at(m, q), d = m->dyn_of[q];

	if (e >= 0)
		return m->plan->ent[e].size == size;
	return d >= 0 && m->plan->dyn[d].size_min <= size &&
	       size <= m->plan->dyn[d].size_max;
}

/*
 * Does the job's last MATCH_RESYNC_LEN requests' sequence end at position
 * @k (exclusive): each the size position k - MATCH_RESYNC_LEN + i takes,
 * of two sizes or more, most of those positions static?
 */
static bool ends_at(const struct matcher *m, uint32_t k)
{
	uint32_t w = MATCH_RESYNC_LEN, i, fixed = 0;
	bool vary = false;

	if (m->run_len < w || k < w)
		return false;
	for (i = 0; i < w; i++) {
		uint64_t size = last_size(m, w, i);

		if (!pos_took(m, k - w + i, size))
			return false;
		fixed += entry_at(m, k - w + i) >= 0;
		vary |= size != last_size(m, w, 0);
	}
	return vary && 2 * fixed > w;
}

/*
 * The job may be lost past a run's end: the run ended in the plan, no exit
 * was found near, and more than MATCH_EXIT_RUN requests in a row have been
 * served at the run's last position (the job left the run for a stretch
 * of the plan further on; on the H100 MoE recording the rest of two
 * steps, 1,000 requests each, went so).  Not sooner: a run longer than
 * recorded is served there too, and looked for at once, the plan further
 * on matched such a run's requests by chance on held-out MoE ranks (2 to
 * 10 MiB more).  The first static position within MATCH_RESYNC of the
 * cursor that takes @asize and where the job's last requests end
 * (ends_at()), or 0.
 */
static uint32_t resync_ahead(const struct matcher *m, uint64_t asize)
{
	uint32_t n = m->plan->nr_positions, k;

	for (k = m->cursor + MATCH_EXIT_RUN + 1;
	     k < n && k <= m->cursor + MATCH_RESYNC; k++)
		if (exit_fits(m, k, asize) && ends_at(m, k))
			return k;
	return 0;
}

/*
 * The cursor is at a dynamic run's exit (the static position after it)
 * and a request of @asize is not that position's size: the job's run is
 * longer than the recorded one (more tokens routed, an expert recorded
 * with none), and the request is one more of the run -- unless it and
 * the next match MATCH_EXIT_LONGER static positions in a row just ahead
 * (the exit's own request was left out).  Before this rule, any request
 * of a size found among the next MATCH_AHEAD static positions took that
 * slot: expert buffers of 8 KB or 2 MB are common, so an over-long run
 * carried the cursor into the static block after it, and that block's
 * own requests then missed, and pushed the cursor on into the next run
 * (MoE imbalance 4 from another seed: 292 misses, 36 MiB over off).
 * The position that takes the request.
 */
static int64_t run_longer(struct matcher *m, uint32_t x, uint32_t seen,
			  uint64_t asize)
{
	uint32_t n = m->plan->nr_positions, k;

	if (x < n && exit_fits(m, x + seen, asize)) {
		if (seen + 1 >= MATCH_EXIT_LONGER)
			return x + seen;
		m->exit_pos = x;
		m->exit_seen = seen + 1;
		m->exit_drift = true; /* not the exit's size: not in step */
		return m->cursor - 1;
	}
	for (k = m->cursor + 1; k <= m->cursor + MATCH_AHEAD && k < n; k++)
		if (exit_fits(m, k, asize))
			break;
	if (k > m->cursor + MATCH_AHEAD || k >= n)
		k = past_twin(m, asize);
	if (!k && ++m->run_stay > MATCH_EXIT_RUN)
		k = resync_ahead(m, asize);
	if (k) {
		m->exit_pos = k;
		m->exit_seen = 1;
		m->exit_drift = true;
	}
	return m->cursor - 1;
}

/*
 * A request taken loosely by a slot more than four times its size and at
 * least a chunk larger: the job is not where the cursor is (an expert's
 * buffer where the plan has an attention block), and the slack would be
 * held for as long as the request lives -- at MoE imbalance 4's peak, 79
 * MiB in 11 such slots.  The cursor still moves past the slot, and the
 * slot's own request, if it comes next, still finds it (m->loose).
 */
static bool too_loose(const struct matcher *m, int32_t e, uint64_t asize)
{
	uint64_t slot = m->plan->ent[e].size;

	return slot - asize >= m->chunk && slot / 4 > asize;
}

/*
 * The last request took the exit of a dynamic run (the static position
 * after it) by its size alone, and this one, of @asize, is not the next
 * position's size (nor a smaller request that slot would take), nor that
 * of a static position a little ahead: the last was one more of the run
 * -- an expert buffer of the exit's size, common under top-1 routing --
 * and the job is still in it.  A request of the exit's size again is the
 * exit's own.  Without this the cursor went on from the exit and this
 * request took a dynamic position further on, in the next run: the job
 * was a run behind the cursor, and the static block between the runs and
 * the next run missed (MoE top-1, imbalance 4, from another seed: 110
 * misses, 53 now).  When the last request could not have the exit's slot
 * (a block out of step held it), its match was weaker still: then only a
 * request of the sizes seen at the run's last position undoes it (one of
 * another size there was served at the run's end, in the plan's free
 * space, and held memory that a plan that had lost its way needed: 14 MiB
 * on a pipeline rank whose plan missed 70% of its requests).  Nor is it
 * undone by a request larger than the next slot while the run's sizes
 * have been telling: that is the slot's own request, grown
 * (resized_at_cursor()).  @slot: the last request got a slot.
 */
static bool exit_undone(const struct matcher *m, uint64_t asize, bool slot)
{
	uint32_t n = m->plan->nr_positions, k;
	int32_t e;

	if (m->cursor >= n || fits(m, m->cursor, asize, false))
		return false;
	e = entry_at(m, m->cursor);
	if (e >= 0 && asize < m->plan->ent[e].size && !too_loose(m, e, asize) &&
	    !fits(m, m->cursor - 1, asize, false))
		return false;
	if (e >= 0 && asize > m->plan->ent[e].size && sizes_tell(m))
		return false; /* that slot's request, grown */
	for (k = m->cursor + 1; k <= m->cursor + MATCH_AHEAD && k < n; k++)
		if (!is_dyn(m, k) && fits(m, k, asize, false))
			return false;
	return slot || dyn_fits(m, (int64_t)m->cursor - 2, asize);
}

/*
 * Is @asize the one size dynamic position @pos was seen at?  Such a
 * position inside a routed block (an island, or an expert that got the
 * same tokens in every recorded iteration) says the job is where the
 * cursor is.
 */
static bool in_step(const struct matcher *m, uint32_t pos, uint64_t asize)
{
	const struct plan_dyn *d = &m->plan->dyn[m->dyn_of[pos]];

	if (d->req_max)
		return d->req_min == d->req_max && m->bytes == d->req_min;
	return d->size_min == d->size_max && asize == d->size_min;
}

/*
 * At dynamic position @m->cursor, a request of @asize: is the job past
 * the run?  Requests in a row matching the static positions after it
 * exactly say so (fewer experts got tokens than recorded): the last of
 * them takes its slot and the cursor follows.  Until then each is served
 * at the cursor as before.  Without this the cursor stayed in the run,
 * whose positions took the requests after it, and its slots took the
 * next ones: a long-lived tensor in a slot planned short held it, and
 * every slot planned over it later missed (MoE imbalance 4 from another
 * seed: 210 misses, 84 MiB over off).
 *
 * One exact match is not enough: an expert with every token is the size
 * of a hidden state, and one with a few that of a small fixed tensor.
 * MATCH_EXIT_CONFIRM in a row do where one of them was out of the sizes
 * the run's position was seen at; MATCH_EXIT_CONFIRM_FIT where each fitted
 * (under skewed routing a position's recorded sizes span most sizes, and
 * a run ended early went unnoticed until the cursor reached the exit).
 * The match may begin at any of the MATCH_EXIT_SKIP positions after the
 * run's first static one: a position at a run's edge that the recording
 * saw at one size (an expert busy in every recorded iteration) is often
 * not issued under other routing.  At the exit itself, run_longer().
 *
 * But not when every one of those requests was also the one size of its
 * own position (in_step()) and they are of two sizes or more: a block of
 * tensors inside the routed block (an island of positions planned
 * dynamic) that is the twin of the static block after the run -- a
 * pipeline rank's per-micro-batch tensors between two expert loops --
 * matches the exit block request for request, and the job is in step,
 * not past the run.  Taken for an exit, the cursor jumped to the twin's
 * last slot and the second loop and the static block missed: an MoE
 * pipeline rank outside the suite planned from its own trace missed 463 of
 * 1,620 planned requests, none now.  Requests of one size (six 240-byte
 * buffers in a row on the H100 MoE recordings) say nothing of which block
 * the job is in; there the exit stands (1,661 misses on one recording
 * without this, 1,540 with it, 1,507 before the twin rule).
 */
static int64_t dyn_run_exit(struct matcher *m, uint64_t asize)
{
	uint32_t n = m->plan->nr_positions, x = m->exit_pos, k, lim;
	uint32_t seen = m->exit_seen, took = m->exit_took;
	bool strong = m->exit_strong, drift = m->exit_drift;
	bool took_slot = m->exit_took_slot;
	bool vary = m->exit_vary, own;

	exit_forget(m);
	if (took < n && m->cursor == took + 1 &&
	    exit_undone(m, asize, took_slot))
		return took - 1;
	if (m->cursor < n && m->cursor > 0 && !is_dyn(m, m->cursor) &&
	    is_dyn(m, m->cursor - 1) && !fits(m, m->cursor, asize, false))
		return run_longer(m, x, seen, asize);
	if (m->cursor >= n || !is_dyn(m, m->cursor))
		return -1;
	own = fits(m, m->cursor, asize, false);
	if (x < n && exit_fits(m, x + seen, asize)) {
		strong |= !own;
		drift |= !in_step(m, m->cursor, asize);
		seen++;
		vary |= asize != m->exit_size;
		if ((drift || !vary) &&
		    seen >= (strong ? MATCH_EXIT_CONFIRM :
				      MATCH_EXIT_CONFIRM_FIT))
			return x + seen - 1;
		m->exit_pos = x;
		m->exit_seen = seen;
		m->exit_strong = strong;
		m->exit_drift = drift;
		m->exit_vary = vary;
		return -1;
	}
	for (k = m->cursor + 1;
	     k < n && is_dyn(m, k) && k - m->cursor <= MATCH_EXIT_RUN; k++)
		;
	for (lim = k + MATCH_EXIT_SKIP; k <= lim && k < n; k++)
		if (exit_fits(m, k, asize)) {
			m->exit_pos = k;
			m->exit_seen = 1;
			m->exit_strong = !own;
			m->exit_drift = !in_step(m, m->cursor, asize);
			m->exit_vary = false;
			m->exit_size = asize;
			break;
		}
	return -1;
}

/*
 * Static entry @e's slot is taken: a block placed out of step holds it (a
 * request took the slot of a position not its own -- the one before was
 * left out, or an inserted request made the cursor jump -- and lives past
 * that slot's planned end).  A position the cursor passed whose slot is
 * free now (its request was left out, or placed elsewhere) leaves the slot
 * idle for the rest of its planned lifetime, in which the plan puts
 * nothing else there.  So a static slot of @e's exact size among the last
 * MATCH_BORROW_BEHIND positions, free, planned to live from before @e's
 * start to after its end, takes @e's request.
 */
static bool borrow_passed(struct matcher *m, int32_t e, void *stream,
			  uint64_t *addr, uint32_t *ent)
{
	const struct plan_entry *pe = &m->plan->ent[e];
	uint32_t k = pe->pos,
		 lo = k > MATCH_BORROW_BEHIND ? k - MATCH_BORROW_BEHIND : 0;

	if (pe->cls != PLAN_STATIC)
		return false;
	while (k-- > lo) {
		int32_t qe = entry_at(m, k);
		const struct plan_entry *q;

		if (qe < 0)
			continue;
		q = &m->plan->ent[qe];
		if (q->cls == PLAN_STATIC && q->size == pe->size &&
		    q->start <= pe->start && q->end >= pe->end &&
		    serve(m, qe, stream, addr, ent))
			return true;
	}
	return false;
}

/*
 * How long the plan's free space must stay clear for a request of @asize
 * at dynamic position @pos, from the position's window start: 0 where the
 * request is within the sizes the position was seen at.  One out of them
 * is, most likely, a neighbour's tensor (the run shifted by routing), and
 * may live as long as the longest-lived of the positions within
 * MATCH_REUSE_NEAR either side in its run (UINT64_MAX, no reuse, if one
 * of them lives across the iteration's end).  Placed by its own window, a
 * kept buffer at a temporary's position (an 8 MB expert output where a
 * 250 KB one was recorded) held the space a slot planned after the
 * window needed, and every slot planned over it after that (MoE
 * imbalance 4 from another seed: 22 MiB over off, 274 misses).
 */
static uint64_t reuse_need(const struct matcher *m, uint32_t pos,
			   uint64_t asize)
{
	const struct plan_dyn *d = &m->plan->dyn[m->dyn_of[pos]];
	uint32_t n = m->plan->nr_positions, lo, hi, q;
	uint64_t end = d->end;

	if (fits(m, pos, asize, false))
		return 0;
	lo = pos > MATCH_REUSE_NEAR ? pos - MATCH_REUSE_NEAR : 0;
	hi = pos + MATCH_REUSE_NEAR < n ? pos + MATCH_REUSE_NEAR : n - 1;
	for (q = pos; q > lo && is_dyn(m, q - 1); q--)
		;
	for (; q <= hi && is_dyn(m, q); q++) {
		const struct plan_dyn *dq = &m->plan->dyn[m->dyn_of[q]];

		if (dq->wraps || d->wraps)
			return UINT64_MAX;
		if (dq->end > end)
			end = dq->end;
	}
	return end - d->start;
}

/* Note a request of @asize taken by a dynamic position (@dyn) or not. */
static void run_note(struct matcher *m, bool dyn, uint64_t asize)
{
	if (!dyn) {
		m->run_len = m->run_stay = 0;
		return;
	}
	m->run_sizes[m->run_head] = asize;
	m->run_head = (m->run_head + 1) % MATCH_EXIT_RUN;
	if (m->run_len < MATCH_EXIT_RUN)
		m->run_len++;
}

/*
 * Match a request of @asize near the cursor and serve it there: true when
 * served.  Otherwise *@missed says the plan expected something else here
 * (no position takes it, or its slot is not free), not merely that a
 * dynamic position's free space had no room.
 */
static bool place_near_cursor(struct matcher *m, uint64_t asize, void *stream,
			      uint64_t *addr, uint32_t *ent, bool *missed)
{
	bool loose = false, at_exit;
	int64_t pos = dyn_run_exit(m, asize);
	int32_t e;

	if (pos < 0)
		pos = find_pos(m, asize, &loose);
	m->loose = loose ? (uint32_t)pos : UINT32_MAX;
	*missed = pos < 0;
	if (pos < 0) {
		resized_at_cursor(m, asize);
		return false;
	}
	if (pos > m->cursor && (!m->plan->nr_dyn || sizes_tell(m))) {
		m->skip_lo = m->cursor;
		m->skip_hi = (uint32_t)pos;
	} else if (pos >= (int64_t)m->skip_hi + MATCH_AHEAD) {
		m->skip_lo = m->skip_hi = 0; /* long past: they were left out */
	}
	if (is_dyn(m, (uint32_t)pos))
		pos = run_drift(m, pos, asize);
	at_exit = pos == m->cursor && pos > 0 && !loose &&
		  is_dyn(m, (uint32_t)pos - 1);
	m->cursor = (uint32_t)pos + 1;
	e = entry_at(m, (uint32_t)pos);
	run_note(m, e < 0, asize);
	if (e < 0) {
		/* a dynamic position: the plan's free space first */
		if (!reuse(m, &m->plan->dyn[m->dyn_of[pos]], asize,
			   reuse_need(m, (uint32_t)pos, asize), stream, addr))
			return false;
		*ent = MATCH_REUSED;
		return true;
	}
	if (checking(m) && !m->seen_size[e])
		m->seen_size[e] = asize;
	if (loose && too_loose(m, e, asize)) {
		*missed = true;
		return false;
	}
	*missed = !serve(m, e, stream, addr, ent) &&
		  !borrow_passed(m, e, stream, addr, ent);
	if (at_exit) {
		m->exit_took = (uint32_t)pos;
		m->exit_took_slot = !*missed;
	}
	return !*missed;
}

/*
 * The warm-up's last iteration (the one before the first planned
 * iteration: in_warmup()) issues a steady iteration's requests among the
 * optimizer state it creates.  Those are matched as in a planned iteration
 * and served at their slots where free -- the plan keeps them clear of the
 * persistent entries -- so that the warm-up does not build a dynamic region
 * of its own beside the pool; one that matches nothing is served
 * dynamically, and is no miss.  After MATCH_WARM_MISSES of those the
 * warm-up is not like the steady iteration (a first iteration that
 * allocates differently): the rest of it is served dynamically, so that
 * few of its blocks stand in the planned iterations' way.
 */
static bool warm_place(struct matcher *m, uint64_t asize, void *stream,
		       uint64_t *addr, uint32_t *ent)
{
	bool missed, hit;

	if (m->warm_misses > MATCH_WARM_MISSES)
		return false; /* this warm-up is not the steady iteration */
	hit = place_near_cursor(m, asize, stream, addr, ent, &missed);
	m->warm_misses += missed;
	return hit;
}

/*
 * In the warm-up's last iteration, a request of exactly the next
 * persistent entry's size that comes before the entry's planned position
 * (this warm-up issued fewer requests than the recorded one: fewer tokens
 * routed, a layer's expert with none) is that entry, unless the steady
 * position at the cursor takes it.  Matched to a steady slot further
 * ahead instead, it would never be freed and would hold that slot, and
 * every slot overlapping it, in every planned iteration.
 */
static bool warm_early(struct matcher *m, uint64_t asize, void *stream,
		       uint64_t *addr, uint32_t *ent)
{
	uint32_t n = m->plan->nr_positions, e;
	const struct plan_entry *pe;

	if (m->pro_next >= m->nr_pro)
		return false;
	e = m->pro_list[m->pro_next];
	pe = &m->plan->ent[e];
	if (!ent_takes(m, pe, asize) || pe->pos < m->pro_pos ||
	    (m->cursor < n && fits(m, m->cursor, asize, false)) ||
	    (m->loose < n && fits(m, m->loose, asize, false)) ||
	    !serve(m, (int32_t)e, stream, addr, ent))
		return false;
	m->pro_next++;
	m->pro_pos = pe->pos + 1; /* in step with the plan's count again */
	m->pro_sync = pe->pos;
	m->seen_size[e] = asize;
	return true;
}

/*
 * Is the next prologue request in the warm-up's last iteration?  With
 * markers, after the warm-up's last one; without, from the prologue
 * position the plan says that iteration started at.
 */
static bool in_warmup(const struct matcher *m)
{
	if (!m->plan->warmup)
		return false;
	if (m->marked)
		return m->marks == m->plan->warmup;
	return m->pro_pos >= m->plan->warmstart &&
	       m->pro_pos < m->plan->nr_prologue;
}

static bool match_place(struct matcher *m, uint64_t size, void *stream,
			uint64_t *addr, uint32_t *ent, bool *miss)
{
	uint64_t asize;

	*miss = false;
	if (m->disabled || !sa_round_up(size, m->plan->align, &asize))
		return false;
	m->bytes = size;
	m->since_mark++;
	if (unlikely(m->syncing)) {
		/* not a miss: the plan has not started yet */
		if (!fits(m, 0, asize, false))
			return false;
		m->syncing = false;
		inferred_iteration(m);
		if (m->disabled)
			return false;
	}
	if (!m->marked)
		implicit_iteration(m, asize);
	else if (m->standby)
		return false; /* not an iteration: not a miss either */
	else
		missed_marker(m, asize);
	if (m->disabled)
		return false;
	if (m->marks <= m->plan->warmup) {
		bool warm = in_warmup(m);

		if (prologue_alloc(m, asize, stream, addr, ent, miss))
			return true;
		if (*miss || !warm)
			return false;
		if (warm_early(m, asize, stream, addr, ent))
			return true;
		return warm_place(m, asize, stream, addr, ent);
	}
	if (place_near_cursor(m, asize, stream, addr, ent, miss)) {
		probe_inferred(m, false);
		return true;
	}
	probe_inferred(m, *miss);
	return false;
}

/* The sizes seen in the first planned iteration, hashed like the plan. */
static bool fingerprint_ok(const struct matcher *m)
{
	const struct stalloc_plan *p = m->plan;
	struct stalloc_plan seen = *p;
	struct plan_entry *ent = malloc((p->nr_ent + 1) * sizeof(*ent));
	uint64_t fp;
	size_t i;

	if (!ent)
		return true; /* cannot tell: keep the plan */
	memcpy(ent, p->ent, p->nr_ent * sizeof(*ent));
	for (i = 0; i < p->nr_ent; i++) {
		uint64_t s = m->seen_size[i];

		if (ent[i].cls == PLAN_ALTERNATE && !plan_alt_first(ent, i))
			s = m->seen_size[i - 1] ? m->seen_size[i - 1] : s;
		else if (ent[i].cls == PLAN_ALTERNATE && !s)
			s = m->seen_size[i + 1];
		ent[i].size = s;
	}
	seen.ent = ent;
	fp = plan_fingerprint(&seen);
	free(ent);
	return fp == p->fingerprint;
}

/* Planned requests seen at their exact planned size (pairs once). */
static size_t exact_matches(const struct matcher *m, size_t *total)
{
	const struct stalloc_plan *p = m->plan;
	size_t i, exact = 0;

	*total = 0;
	for (i = 0; i < p->nr_ent; i++) {
		if (p->ent[i].cls == PLAN_ALTERNATE) {
			if (!plan_alt_first(p->ent, i))
				continue;
			exact += m->seen_size[i] == p->ent[i].size ||
				 m->seen_size[i + 1] == p->ent[i].size;
		} else {
			exact += m->seen_size[i] == p->ent[i].size;
		}
		(*total)++;
	}
	return exact;
}

static bool next_iteration(struct matcher *m)
{
	size_t exact, total;

	m->marks++;
	m->cursor = 0;
	m->since_mark = 0;
	/*
	 * The warm-up's last step comes before a planned iteration as the
	 * planned iteration's last step does.
	 */
	if (m->plan->stride > 1 && m->marks == m->plan->warmup && m->marked)
		m->cursor = m->plan->stride_pos;
	m->loose = UINT32_MAX;
	exit_forget(m);
	m->skip_lo = m->skip_hi = 0;
	m->votes_back = m->votes_ahead = 0;
	m->run_len = m->run_stay = 0;
	m->warm_misses = 0;
	if (m->marks == m->plan->warmup + 1 || m->marks == m->plan->warmup + 2)
		m->warm_done = true;
	if (m->disabled || m->marks < m->plan->warmup + 2 ||
	    m->marks > m->plan->warmup + 2 + m->suspect || fingerprint_ok(m))
		return true;
	/*
	 * A planned iteration differs from the plan.  A few strays are what
	 * the matcher absorbs; a plan made for another workload (most
	 * requests differ) is dropped -- when the second planned iteration
	 * differs too: one odd iteration (an MoE step whose routing derailed
	 * the matcher for a while) is no reason to give up a plan that the
	 * next ones follow, and a plan for another workload differs in
	 * every iteration.
	 */
	exact = exact_matches(m, &total);
	if (exact * 2 >= total) {
		sa_log(STALLOC_LOG_WARN,
		       "runtime: device %d: %zu of %zu planned requests "
		       "differ from the plan; going on with it",
		       vmm_device(m->vmm), total - exact, total);
		return true;
	}
	if (!m->suspect) {
		sa_log(STALLOC_LOG_WARN,
		       "runtime: device %d: %zu of %zu planned requests "
		       "differ from the plan in its first iteration; the "
		       "next one decides",
		       vmm_device(m->vmm), total - exact, total);
		m->suspect = true;
		memset(m->seen_size, 0,
		       m->plan->nr_ent * sizeof(*m->seen_size));
		return true;
	}
	/*
	 * No slot is handed out again: what the pool's live blocks leave
	 * idle goes to the dynamic region when it would map new memory
	 * (match_lend(), from the shrinker), not at once with a device sync.
	 */
	m->disabled = true;
	return false;
}

/*
 * A marker inside a planned iteration of several steps (plan->stride): the
 * plan covers two steps as one, and the matcher follows the requests
 * across the step between them as across any other.
 */
static bool mid_step(struct matcher *m)
{
	if (m->plan->stride <= 1 || m->marks <= m->plan->warmup) {
		m->steps = 0;
		return false;
	}
	if (++m->steps < m->plan->stride)
		return true;
	m->steps = 0;
	return false;
}

bool match_iteration(struct matcher *m)
{
	m->marked = true;
	if (m->standby) {
		/* the inferred start was wrong: this one is the iteration's */
		m->standby = m->implicit = false;
		m->steps = 0;
		return next_iteration(m);
	}
	if (m->implicit) {
		m->implicit = false;
		m->steps = 0;
		/* late: the iteration it starts began a few requests ago */
		if (m->cursor <= 2 * MATCH_AHEAD)
			return true;
		return next_iteration(m);
	}
	if (mid_step(m))
		return true;
	return next_iteration(m);
}

/*
 * No "iteration" marker ever came: tell iteration starts from the requests.
 * The prologue ends after its last planned allocation; an iteration ends
 * when its last position was matched, or when a request near its end fits
 * the start of the next one better than anything left.
 */
/* Does one of an iteration's first positions take a request of @asize? */
static bool starts_iteration(const struct matcher *m, uint64_t asize)
{
	uint32_t n = m->plan->nr_positions, k;

	for (k = 0; k < MATCH_AHEAD && k < n; k++)
		if (fits(m, k, asize, false))
			return true;
	return false;
}

/*
 * Does a request of @asize, near the end of the iteration, belong to the
 * next one?  Yes when nothing near the cursor takes it and one of the
 * next iteration's first positions does.
 */
static bool wrapped(const struct matcher *m, uint64_t asize)
{
	if (m->cursor + MATCH_AHEAD < m->plan->nr_positions ||
	    find_pos(m, asize, NULL) >= 0)
		return false;
	return starts_iteration(m, asize);
}

/* An iteration start told from the requests, not from a marker. */
static void inferred_iteration(struct matcher *m)
{
	if (!next_iteration(m))
		sa_log(STALLOC_LOG_WARN,
		       "runtime: device %d: the plan does not fit this "
		       "workload: continuing without it",
		       vmm_device(m->vmm));
}

static void implicit_iteration(struct matcher *m, uint64_t asize)
{
	const struct stalloc_plan *p = m->plan;

	if (m->marks <= p->warmup) {
		/* past the prologue, the first request the iteration takes */
		if (m->pro_pos < p->nr_prologue || !starts_iteration(m, asize))
			return;
		m->marks = p->warmup;
	} else if (m->cursor < p->nr_positions && !wrapped(m, asize)) {
		return;
	}
	inferred_iteration(m);
}

/*
 * Markers come, but one is late or missing: the next iteration's first
 * requests are recognised as they are without it.  The marker, if it comes
 * after all, then starts nothing new (see match_iteration).
 */
/*
 * Past the warm-up's prologue count, does a request of @asize start the
 * first planned iteration?  The count varies with routing (a warm-up
 * issuing more expert requests than recorded passes it early), so while
 * the warm-up's last iteration is matched to the steady positions (fewer
 * than MATCH_WARM_MISSES non-matches) the test is a planned iteration's:
 * the cursor near the iteration's end and nothing there taking the request
 * (wrapped()).  Taking a 2 MB tensor in the warm-up's tail for the start
 * shifted the first planned iteration by that tail, most of its requests
 * missed, and the plan was dropped (MoE imbalance 4 from another seed:
 * 700 MiB over off).
 */
static bool warm_wrapped(const struct matcher *m, uint64_t asize)
{
	if (m->warm_misses <= MATCH_WARM_MISSES)
		return wrapped(m, asize);
	return starts_iteration(m, asize);
}

/*
 * With markers, has the warm-up's last iteration issued fewer requests
 * than it did when recorded (less MATCH_AHEAD)?  Then it has not ended,
 * whatever the count of prologue positions says: that count jumps when a
 * persistent entry is matched, and a gradient bucket taken for the Adam
 * state of its size, some 280 positions early, put it past the prologue
 * 148 requests before the warm-up's end.  The next request was taken for
 * the first planned iteration's start, the real one was then matched as
 * the second, and the plan was dropped -- on the very trace it was made
 * from (a held-out MoE rank with small tensors at their own bytes: the
 * planner's check rejected the plan).
 */
static bool warm_short(const struct matcher *m)
{
	const struct stalloc_plan *p = m->plan;

	return m->marked && p->warmstart < p->nr_prologue &&
	       m->since_mark + MATCH_AHEAD < p->nr_prologue - p->warmstart;
}

static void missed_marker(struct matcher *m, uint64_t asize)
{
	const struct stalloc_plan *p = m->plan;

	if (m->implicit || m->marks < p->warmup)
		return;
	/*
	 * The warm-up's last iteration ends with its last allocation: the
	 * next one is the first request a planned iteration takes.  Anything
	 * else before it (a block allocated between the steps) is no start.
	 */
	if (m->marks == p->warmup ?
		    m->pro_pos < p->nr_prologue || warm_short(m) ||
			    !warm_wrapped(m, asize) :
		    !wrapped(m, asize))
		return;
	m->implicit = true;
	m->probe_seen = m->probe_misses = 0;
	inferred_iteration(m);
}

/*
 * After a missed marker, is the iteration inferred from the requests one?
 * Jobs that mark their iterations end them with work of another kind (an
 * evaluation, a CUDA graph's capture and replays, a checkpoint) whose
 * first request can look like an iteration's start: matched as an
 * iteration, its requests missed one after the other (599 misses after
 * the last step of an H100 recording of a small GPT) or took slots of
 * their size that the next real iteration needs.  When MATCH_PROBE_MISSES
 * of its first MATCH_PROBE requests missed, more than half of those seen,
 * the matcher stands aside until the next marker.
 */
static void probe_inferred(struct matcher *m, bool missed)
{
	if (!m->implicit || m->probe_seen >= MATCH_PROBE)
		return;
	m->probe_seen++;
	m->probe_misses += missed;
	if (m->probe_misses < MATCH_PROBE_MISSES ||
	    2 * m->probe_misses <= m->probe_seen)
		return;
	m->standby = true;
	sa_log(STALLOC_LOG_INFO,
	       "runtime: device %d: the requests after iteration %" PRIu64
	       " do not follow the plan: unplanned until the next marker",
	       vmm_device(m->vmm), m->marks - 1);
}

void match_start_planned(struct matcher *m)
{
	m->marks = m->plan->warmup;
	m->pro_pos = m->plan->nr_prologue;
	m->pro_next = m->nr_pro;
}

void match_start_synced(struct matcher *m)
{
	match_start_planned(m);
	m->syncing = true;
}

bool match_warm_over(struct matcher *m, bool *first)
{
	if (!m->warm_done)
		return false;
	m->warm_done = false;
	*first = m->marks == m->plan->warmup + 1;
	return true;
}
