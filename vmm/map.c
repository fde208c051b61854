// SPDX-License-Identifier: MIT
/*
 * vmm/map.c - map, unmap, remap and alias chunk-aligned ranges of a space
 *
 * A segment (struct vmm_seg) is one driver allocation of one or more
 * chunks; a CUDA handle maps whole, at offset 0, and cuMemUnmap cannot
 * unmap part of a mapping, so each segment is mapped whole (one ->map) and
 * unmapped whole (one ->unmap).  vmm_map() covers a range with as few
 * segments as it can (pooled ones that fit, then new ones of up to
 * s->seg_max chunks) and gives the whole range one ->set_access.  Each
 * mapping has a descriptor (struct vmm_ment) that every slot it covers
 * points to, so the table knows which chunks share a driver mapping.  A
 * slot is published in the table only once its memory is mapped and
 * accessible, and withdrawn before it is unmapped, so an RCU reader never
 * finds a slot whose memory is not there.
 *
 * Failure rules: map and alias are all or nothing (what was mapped is
 * unmapped again, segments created for the call are destroyed again);
 * remap is an alias followed by an unmap of the source, so a failure in its
 * second half leaves both ranges mapped (table and driver agree); a failing
 * unmap stops at the failing mapping and the table still lists exactly what
 * is mapped.  Arguments are checked before any driver call, so bad input
 * never changes anything.
 *
 * Locking: everything here runs under s->lock.  The device synchronisation
 * that precedes an unmap also runs under it, so no new mapping of the range
 * can appear in between.
 */
#include <errno.h>
#include <stdlib.h>

#include "../lib/util.h"
#include "../tracing/tp.h"
#include "vmm-internal.h"

/* -EBUSY unless every slot of [first, first + n) is free. */
static int vmm_need_free(struct vmm_space *s, const char *op, uint64_t first,
			 uint64_t n)
{
	uint64_t i;

	for (i = first; i < first + n; i++)
		if (s->slots[i])
			return sa_error(-EBUSY,
					"vmm: %s: 0x%llx on device %d is "
					"already mapped",
					op,
					(unsigned long long)vmm_slot_va(s, i),
					s->be.device);
	return 0;
}

/* -EINVAL unless every slot of [first, first + n) is mapped. */
static int vmm_need_mapped(struct vmm_space *s, const char *op, uint64_t first,
			   uint64_t n)
{
	uint64_t i;

	for (i = first; i < first + n; i++)
		if (!s->slots[i])
			return sa_error(-EINVAL,
					"vmm: %s: 0x%llx on device %d is not "
					"mapped",
					op,
					(unsigned long long)vmm_slot_va(s, i),
					s->be.device);
	return 0;
}

static uint64_t seg_bytes(const struct vmm_space *s, const struct vmm_seg *g)
{
	return (uint64_t)g->nr * s->chunk;
}

/* The slot after the last one mapping @e covers. */
static uint64_t ment_end(const struct vmm_ment *e)
{
	return e->first + e->seg->nr;
}

static int vmm_be_map(struct vmm_space *s, uint64_t slot, struct vmm_seg *g)
{
	return vmm_counted(s, VMM_CALL_MAP,
			   s->be.ops->map(&s->be, vmm_slot_va(s, slot),
					  seg_bytes(s, g), g->handle));
}

static int vmm_be_unmap(struct vmm_space *s, uint64_t slot,
			const struct vmm_seg *g)
{
	return vmm_counted(s, VMM_CALL_UNMAP,
			   s->be.ops->unmap(&s->be, vmm_slot_va(s, slot),
					    seg_bytes(s, g)));
}

/* Best-effort undo of mappings of @segs[0..k) the caller made at @first. */
static void vmm_undo_maps(struct vmm_space *s, uint64_t first,
			  struct vmm_seg **segs, uint64_t k)
{
	uint64_t i;

	for (i = 0; i < k; first += segs[i]->nr, i++)
		if (vmm_be_unmap(s, first, segs[i]))
			sa_log(STALLOC_LOG_ERROR,
			       "vmm: device %d: cannot undo a mapping at "
			       "0x%llx; the driver keeps it until exit",
			       s->be.device,
			       (unsigned long long)vmm_slot_va(s, first));
}

/*
 * Map @segs[0..k) back to back from slot @first (@n chunks in all) and set
 * access on the whole range with one call; on failure unmap what was
 * mapped.  Publishes nothing.
 */
static int vmm_map_run(struct vmm_space *s, uint64_t first, uint64_t n,
		       struct vmm_seg **segs, uint64_t k)
{
	uint64_t i, slot = first;
	int err;

	for (i = 0; i < k; slot += segs[i]->nr, i++) {
		err = vmm_be_map(s, slot, segs[i]);
		if (err)
			goto err_unmap;
	}
	err = vmm_counted(s, VMM_CALL_SET_ACCESS,
			  s->be.ops->set_access(&s->be, vmm_slot_va(s, first),
						n * s->chunk));
	if (err)
		goto err_unmap;
	return 0;

err_unmap:
	vmm_undo_maps(s, first, segs, i);
	return err;
}

/* Descriptors for @k mappings, allocated before any driver call. */
static int vmm_ments_alloc(struct vmm_ment **ments, uint64_t k)
{
	uint64_t i;

	for (i = 0; i < k; i++) {
		ments[i] = calloc(1, sizeof(**ments));
		if (!ments[i]) {
			while (i--)
				free(ments[i]);
			return sa_error(-ENOMEM, "vmm: out of host memory");
		}
	}
	return 0;
}

static void vmm_ments_free(struct vmm_ment **ments, uint64_t k)
{
	uint64_t i;

	for (i = 0; i < k; i++)
		free(ments[i]);
}

static void vmm_publish(struct vmm_space *s, uint64_t first,
			struct vmm_seg **segs, struct vmm_ment **ments,
			uint64_t k)
{
	uint64_t i, j;

	for (i = 0; i < k; i++) {
		struct vmm_seg *g = segs[i];
		struct vmm_ment *e = ments[i];

		e->seg = g;
		e->first = first;
		if (!g->map_count++) {
			cds_list_del(&g->pool_node);
			s->st.chunks_pooled -= g->nr;
		}
		for (j = 0; j < g->nr; j++)
			rcu_set_pointer(&s->slots[first + j], e);
		first += g->nr;
		s->st.mappings++;
		s->st.bytes_mapped += seg_bytes(s, g);
	}
	if (s->st.bytes_mapped > s->st.bytes_mapped_peak)
		s->st.bytes_mapped_peak = s->st.bytes_mapped;
}

static void ment_free_rcu(struct rcu_head *h)
{
	/* cppcheck-suppress nullPointer ; container_of idiom */
	free(caa_container_of(h, struct vmm_ment, rcu));
}

/* Withdraw and unmap the mapping @e (whole); the table stays exact. */
int vmm_unmap_ment(struct vmm_space *s, struct vmm_ment *e)
{
	struct vmm_seg *g = e->seg;
	uint64_t j;
	int err;

	for (j = 0; j < g->nr; j++)
		rcu_set_pointer(&s->slots[e->first + j], NULL);
	err = vmm_be_unmap(s, e->first, g);
	if (err) {
		for (j = 0; j < g->nr; j++)
			rcu_set_pointer(&s->slots[e->first + j], e);
		return err;
	}
	s->st.mappings--;
	s->st.bytes_mapped -= seg_bytes(s, g);
	if (!--g->map_count) {
		cds_list_add(&g->pool_node, &s->pool);
		s->st.chunks_pooled += g->nr;
	}
	/* readers may still hold @e */
	urcu_bp_call_rcu(&e->rcu, ment_free_rcu);
	return 0;
}

static int vmm_new_seg(struct vmm_space *s, uint64_t nr, struct vmm_seg **out)
{
	struct vmm_seg *g = calloc(1, sizeof(*g));
	int err;

	if (!g)
		return sa_error(-ENOMEM, "vmm: out of host memory");
	err = vmm_counted(s, VMM_CALL_CREATE,
			  s->be.ops->create_chunk(&s->be, nr * s->chunk,
						  &g->handle));
	if (err) {
		free(g);
		return err;
	}
	g->id = s->next_id;
	g->nr = (uint32_t)nr;
	s->next_id += nr;
	/* Pooled until published, so that failure paths can treat all
	 * gathered segments alike. */
	cds_list_add(&g->pool_node, &s->pool);
	s->st.chunks_created += nr;
	s->st.chunks_live += nr;
	s->st.chunks_pooled += nr;
	s->st.segs_created++;
	s->st.segs_live++;
	s->st.phys_bytes += nr * s->chunk;
	if (s->st.phys_bytes > s->st.phys_bytes_peak)
		s->st.phys_bytes_peak = s->st.phys_bytes;
	*out = g;
	return 0;
}

/* Release pooled segment @g to the driver; on success it goes on @dead. */
int vmm_seg_destroy(struct vmm_space *s, struct vmm_seg *g,
		    struct cds_list_head *dead)
{
	int err;

	err = vmm_counted(s, VMM_CALL_DESTROY,
			  s->be.ops->destroy_chunk(&s->be, g->handle));
	if (err)
		return err; /* stays pooled; trim or teardown retries */
	cds_list_move(&g->pool_node, dead);
	s->st.chunks_pooled -= g->nr;
	s->st.chunks_live -= g->nr;
	s->st.chunks_destroyed += g->nr;
	s->st.segs_live--;
	s->st.segs_destroyed++;
	s->st.phys_bytes -= seg_bytes(s, g);
	return 0;
}

/* Destroy the segments created by a failed call (pooled, unmapped). */
static void vmm_drop_new(struct vmm_space *s, struct vmm_seg **segs, uint64_t k,
			 uint64_t nr_new)
{
	CDS_LIST_HEAD(dead);
	uint64_t i;

	for (i = k - nr_new; i < k; i++)
		vmm_seg_destroy(s, segs[i], &dead);
	vmm_segs_free(&dead);
}

/* The pooled segment that fits in @left chunks best (the largest), or NULL. */
static struct vmm_seg *vmm_pool_fit(struct vmm_space *s, uint64_t left)
{
	struct vmm_seg *g, *best = NULL;

	cds_list_for_each_entry(g, &s->pool, pool_node)
		/* the analyzer loses track of the list moves in vmm_gather */
		/* NOLINTNEXTLINE(clang-analyzer-core.UndefinedBinaryOperatorResult) */
		if (g->nr <= left && (!best || g->nr > best->nr))
			best = g;
	return best;
}

/*
 * Make room for @nr_new new chunks: release the pooled segments not taken
 * for this call, which are all too large for what is asked.  Pooled memory
 * is a cache for reuse, never a reason to hold more: new memory is only
 * made once no idle memory is held beside it (so the memory held never
 * exceeds what is mapped plus what one call could not use).  -ENOMEM, with
 * nothing released, past the physical limit.
 */
static int vmm_make_room(struct vmm_space *s, uint64_t nr_new,
			 uint64_t nr_taken)
{
	uint64_t limit = s->phys_limit / s->chunk;
	uint64_t spare = s->st.chunks_pooled - nr_taken;
	CDS_LIST_HEAD(dead);
	struct vmm_seg *g;
	int err = 0;

	if (!nr_new)
		return 0;
	if (s->st.chunks_live - spare + nr_new > limit)
		return sa_error(
			-ENOMEM,
			"vmm: device %d: mapping %llu more bytes would "
			"exceed the physical limit of %llu bytes "
			"(%llu held, %llu pooled)",
			s->be.device, (unsigned long long)(nr_new * s->chunk),
			(unsigned long long)s->phys_limit,
			(unsigned long long)s->st.phys_bytes,
			(unsigned long long)(s->st.chunks_pooled * s->chunk));
	while (!err && !cds_list_empty(&s->pool)) {
		/* cppcheck-suppress nullPointer ; container_of idiom */
		g = cds_list_entry(s->pool.prev, struct vmm_seg, pool_node);
		err = vmm_seg_destroy(s, g, &dead);
	}
	vmm_segs_free(&dead);
	return err;
}

/*
 * Gather segments covering @n chunks: pooled ones that fit (largest first),
 * then new ones of up to s->seg_max chunks.  vmm_edge_chunks: when three or
 * more chunks are new, the first and the last get a segment of their own.
 * A caller maps the chunks under an allocation, and its end chunks are the
 * ones it shares with the neighbouring allocations; alone, they never keep
 * the large segments between them mapped once the allocation is freed.  *@k gets the number of
 * segments, *@nr_new the number created, which come last in @segs.
 */
static int vmm_gather(struct vmm_space *s, uint64_t n, unsigned int flags,
		      struct vmm_seg **segs, uint64_t *k, uint64_t *nr_new)
{
	uint64_t left = n, nr, seg_max;
	CDS_LIST_HEAD(taken);
	bool edges;
	struct vmm_seg *g;
	int err;

	*k = 0;
	*nr_new = 0;
	while (left && (g = vmm_pool_fit(s, left))) {
		cds_list_move(&g->pool_node, &taken);
		segs[(*k)++] = g;
		left -= g->nr;
	}
	err = vmm_make_room(s, left, n - left);
	seg_max = flags & VMM_FINE ? 1 : s->seg_max;
	edges = left >= 3 && seg_max > 1 && !(flags & VMM_WHOLE);
	while (!err && left) {
		/* the end chunks alone: see vmm_edge_chunks */
		if (edges && (!*nr_new || left == 1))
			nr = 1;
		else if (edges)
			nr = left - 1 < seg_max ? left - 1 : seg_max;
		else
			nr = left < seg_max ? left : seg_max;
		err = vmm_new_seg(s, nr, &segs[*k]);
		if (err)
			break;
		(*k)++;
		(*nr_new)++;
		left -= nr;
	}
	/* taken segments stay pooled until published */
	cds_list_splice(&taken, &s->pool);
	if (err) {
		vmm_drop_new(s, segs, *k, *nr_new);
		*k = 0;
		*nr_new = 0;
	}
	return err;
}

int vmm_map(struct vmm_space *s, uint64_t va, uint64_t bytes)
{
	return vmm_map_flags(s, va, bytes, 0);
}

int vmm_map_flags(struct vmm_space *s, uint64_t va, uint64_t bytes,
		  unsigned int flags)
{
	struct vmm_ment **ments = NULL;
	struct vmm_seg **segs;
	uint64_t first, n, k, nr_new;
	int err;

	err = vmm_check_child(s, "map") ?: vmm_check_range(s, "map", va, bytes);
	if (err)
		return err;
	first = vmm_slot(s, va);
	n = bytes / s->chunk;
	if (!n) /* vmm_check_range refuses it; said for the analyzer */
		return sa_error(-EINVAL, "vmm: map: empty range");
	segs = malloc(n * sizeof(*segs));
	ments = malloc(n * sizeof(*ments));
	if (!segs || !ments) {
		err = sa_error(-ENOMEM, "vmm: out of host memory");
		goto out_free;
	}
	sa_mutex_lock(&s->lock);
	err = vmm_need_free(s, "map", first, n);
	if (err)
		goto out_unlock;
	err = vmm_gather(s, n, flags, segs, &k, &nr_new);
	if (err)
		goto out_unlock;
	err = vmm_ments_alloc(ments, k);
	if (err)
		goto out_drop;
	err = vmm_map_run(s, first, n, segs, k);
	if (err)
		goto out_free_ments;
	vmm_publish(s, first, segs, ments, k);
	sa_trace(map, s->be.device, va, bytes);
	goto out_unlock;

out_free_ments:
	vmm_ments_free(ments, k);
out_drop:
	vmm_drop_new(s, segs, k, nr_new);
out_unlock:
	sa_mutex_unlock(&s->lock);
out_free:
	free(ments);
	free(segs);
	return err;
}

static int vmm_sync_locked(struct vmm_space *s, unsigned int flags)
{
	if (flags & VMM_SYNCED)
		return 0;
	return vmm_counted(s, VMM_CALL_SYNC,
			   s->be.ops->synchronize(&s->be, NULL));
}

static int vmm_straddles(struct vmm_space *s, uint64_t va, uint64_t bytes,
			 const struct vmm_ment *e)
{
	return sa_error(-EBUSY,
			"vmm: unmap [0x%llx, +%llu) on device %d: the segment "
			"mapped at [0x%llx, +%llu) reaches past the range; a "
			"segment is unmapped whole only",
			(unsigned long long)va, (unsigned long long)bytes,
			s->be.device,
			(unsigned long long)vmm_slot_va(s, e->first),
			(unsigned long long)seg_bytes(s, e->seg));
}

/*
 * Unmap the mappings lying wholly inside slots [first, first + n), all
 * mapped; stops at the first failure.
 */
static int vmm_unmap_inside(struct vmm_space *s, uint64_t first, uint64_t n)
{
	uint64_t i, next;
	int err = 0;

	for (i = first; !err && i < first + n; i = next) {
		struct vmm_ment *e = s->slots[i];

		next = ment_end(e); /* @e may be freed once unmapped */
		if (e->first >= first && next <= first + n)
			err = vmm_unmap_ment(s, e);
	}
	return err;
}

int vmm_unmap(struct vmm_space *s, uint64_t va, uint64_t bytes,
	      unsigned int flags)
{
	const struct vmm_ment *straddle = NULL;
	uint64_t first, n, i, inside = 0;
	int err, ret;

	err = vmm_check_child(s, "unmap") ?:
		      vmm_check_range(s, "unmap", va, bytes);
	if (err)
		return err;
	first = vmm_slot(s, va);
	n = bytes / s->chunk;
	sa_mutex_lock(&s->lock);
	err = vmm_need_mapped(s, "unmap", first, n);
	if (err)
		goto out_unlock;
	for (i = first; i < first + n; i = ment_end(s->slots[i])) {
		const struct vmm_ment *e = s->slots[i];

		if (e->first < first || ment_end(e) > first + n)
			straddle = straddle ? straddle : e;
		else
			inside++;
	}
	if (straddle) {
		err = vmm_straddles(s, va, bytes, straddle);
		if (!inside)
			goto out_unlock;
	}
	ret = vmm_sync_locked(s, flags) ?: vmm_unmap_inside(s, first, n);
	if (ret)
		err = ret;
out_unlock:
	sa_mutex_unlock(&s->lock);
	if (!err)
		sa_trace(unmap, s->be.device, va, bytes);
	return err;
}

/*
 * Chunk-aligned [*lo, *hi) around [va, va + bytes), clipped to the space:
 * false if nothing of it lies inside.
 */
static bool vmm_cover(const struct vmm_space *s, uint64_t va, uint64_t bytes,
		      uint64_t *lo, uint64_t *hi)
{
	uint64_t end;

	if (!bytes || va >= s->base + s->size || va + bytes <= s->base ||
	    va + bytes < va)
		return false;
	va = va < s->base ? s->base : va;
	end = va + bytes;
	end = end > s->base + s->size ? s->base + s->size : end;
	*lo = va - (va - s->base) % s->chunk;
	*hi = end + (s->chunk - (end - s->base) % s->chunk) % s->chunk;
	return true;
}

/*
 * RCU reader: the first unmapped slot in [i, end) (end if none) and, in
 * *@run_end, where that unmapped run ends.
 */
static uint64_t vmm_hole(struct vmm_space *s, uint64_t i, uint64_t end,
			 uint64_t *run_end)
{
	urcu_bp_read_lock();
	while (i < end && rcu_dereference(s->slots[i]))
		i++;
	for (*run_end = i;
	     *run_end < end && !rcu_dereference(s->slots[*run_end]);
	     (*run_end)++)
		;
	urcu_bp_read_unlock();
	return i;
}

void vmm_set_shrinker(struct vmm_space *s,
		      void (*fn)(void *ctx, uint64_t va, uint64_t bytes,
				 uint64_t over),
		      void *ctx)
{
	sa_mutex_lock(&s->lock);
	s->shrink = fn;
	s->shrink_ctx = ctx;
	sa_mutex_unlock(&s->lock);
}

void vmm_set_shrink_floor(struct vmm_space *s, uint64_t bytes)
{
	if (vmm_forked(s))
		return;
	sa_mutex_lock(&s->lock);
	s->shrink_floor = bytes;
	sa_mutex_unlock(&s->lock);
}

/*
 * How far mapping @missing more bytes would go past the physical peak, or
 * past the shrink floor where that is higher.
 */
static uint64_t vmm_over_peak(struct vmm_space *s, uint64_t missing)
{
	uint64_t want, top;

	sa_mutex_lock(&s->lock);
	want = s->st.bytes_mapped + missing;
	top = s->st.phys_bytes_peak > s->shrink_floor ? s->st.phys_bytes_peak :
							s->shrink_floor;
	want = want > top ? want - top : 0;
	sa_mutex_unlock(&s->lock);
	return want;
}

/*
 * Before mapping the holes of slots [first, end): let the shrinker give
 * back idle memory if they would raise the physical high water.
 */
static void vmm_shrink_for(struct vmm_space *s, uint64_t first, uint64_t end)
{
	uint64_t i, run, missing = 0, over;

	for (i = vmm_hole(s, first, end, &run); i < end;
	     i = vmm_hole(s, run, end, &run))
		missing += (run - i) * s->chunk;
	over = missing ? vmm_over_peak(s, missing) : 0;
	if (over)
		s->shrink(s->shrink_ctx, vmm_slot_va(s, first),
			  (end - first) * s->chunk, over);
}

int vmm_map_missing(struct vmm_space *s, uint64_t va, uint64_t bytes,
		    uint64_t *mapped)
{
	return vmm_map_missing_flags(s, va, bytes, 0, mapped);
}

int vmm_map_missing_flags(struct vmm_space *s, uint64_t va, uint64_t bytes,
			  unsigned int flags, uint64_t *mapped)
{
	uint64_t lo, hi, i, end, run;
	int err = 0;

	if (mapped)
		*mapped = 0;
	if (!vmm_cover(s, va, bytes, &lo, &hi) || vmm_forked(s))
		return vmm_check_child(s, "map") ?:
			       vmm_check_range(s, "map", va, bytes);
	end = vmm_slot(s, lo) + (hi - lo) / s->chunk;
	if (s->shrink)
		vmm_shrink_for(s, vmm_slot(s, lo), end);
	for (i = vmm_hole(s, vmm_slot(s, lo), end, &run); !err && i < end;
	     i = vmm_hole(s, run, end, &run)) {
		err = vmm_map_flags(s, vmm_slot_va(s, i), (run - i) * s->chunk,
				    flags);
		if (!err && mapped)
			*mapped += (run - i) * s->chunk;
	}
	return err;
}

/* Does some mapping lie wholly inside slots [first, first + n)? */
static bool vmm_any_inside(struct vmm_space *s, uint64_t first, uint64_t n)
{
	uint64_t i;

	for (i = first; i < first + n; i++) {
		const struct vmm_ment *e = s->slots[i];

		if (e && e->first >= first && ment_end(e) <= first + n)
			return true;
	}
	return false;
}

/*
 * The slots of the chunks wholly inside [va, va + bytes), clipped to the
 * space: [*first, *first + *n); false if there are none.
 */
static bool vmm_inside(struct vmm_space *s, uint64_t va, uint64_t bytes,
		       uint64_t *first, uint64_t *n)
{
	uint64_t lo, hi;

	if (!vmm_cover(s, va, bytes, &lo, &hi))
		return false;
	if (lo < va)
		lo += s->chunk;
	if (hi > va + bytes)
		hi -= s->chunk;
	if (lo >= hi)
		return false;
	*first = vmm_slot(s, lo);
	*n = (hi - lo) / s->chunk;
	return true;
}

bool vmm_any_present(struct vmm_space *s, uint64_t va, uint64_t bytes)
{
	uint64_t first, n;
	bool any;

	if (vmm_check_child(s, "unmap") ||
	    !vmm_inside(s, va, bytes, &first, &n))
		return false;
	sa_mutex_lock(&s->lock);
	any = vmm_any_inside(s, first, n);
	sa_mutex_unlock(&s->lock);
	return any;
}

int vmm_unmap_present(struct vmm_space *s, uint64_t va, uint64_t bytes,
		      unsigned int flags, uint64_t *released)
{
	uint64_t first, n, i, next, done = 0;
	int err;

	*released = 0;
	err = vmm_check_child(s, "unmap");
	if (err || !vmm_inside(s, va, bytes, &first, &n))
		return err;
	sa_mutex_lock(&s->lock);
	if (!vmm_any_inside(s, first, n))
		goto out_unlock;
	err = vmm_sync_locked(s, flags);
	for (i = first; !err && i < first + n; i = next) {
		struct vmm_ment *e = s->slots[i];
		uint64_t b;

		if (!e) {
			next = i + 1;
			continue;
		}
		next = ment_end(e); /* @e may be freed once unmapped */
		if (e->first < first || next > first + n)
			continue;
		b = seg_bytes(s, e->seg);
		err = vmm_unmap_ment(s, e);
		if (!err)
			done += b;
	}
out_unlock:
	sa_mutex_unlock(&s->lock);
	if (done)
		sa_trace(unmap, s->be.device, vmm_slot_va(s, first), done);
	*released = done;
	return err;
}

/* Map the segments at src slots also at dst slots (space lock held). */
static int vmm_alias_locked(struct vmm_space *s, const char *op, uint64_t src,
			    uint64_t dst, uint64_t bytes)
{
	uint64_t sfirst, dfirst, n, i, k = 0;
	struct vmm_ment **ments = NULL;
	struct vmm_seg **segs;
	int err;

	err = vmm_check_range(s, op, src, bytes) ?:
		      vmm_check_range(s, op, dst, bytes);
	if (err)
		return err;
	if (src < dst + bytes && dst < src + bytes)
		return sa_error(-EINVAL,
				"vmm: %s: ranges 0x%llx and 0x%llx of %llu "
				"bytes overlap",
				op, (unsigned long long)src,
				(unsigned long long)dst,
				(unsigned long long)bytes);
	sfirst = vmm_slot(s, src);
	dfirst = vmm_slot(s, dst);
	n = bytes / s->chunk;
	err = vmm_need_mapped(s, op, sfirst, n) ?:
						  vmm_need_free(s, op, dfirst, n);
	if (err)
		return err;
	if (s->slots[sfirst]->first != sfirst ||
	    ment_end(s->slots[sfirst + n - 1]) != sfirst + n)
		return sa_error(-EINVAL,
				"vmm: %s [0x%llx, +%llu) on device %d: the "
				"range cuts a segment mapping; segments move "
				"whole only",
				op, (unsigned long long)src,
				(unsigned long long)bytes, s->be.device);
	segs = malloc(n * sizeof(*segs));
	ments = malloc(n * sizeof(*ments));
	if (!segs || !ments) {
		err = sa_error(-ENOMEM, "vmm: out of host memory");
		goto out_free;
	}
	for (i = sfirst; i < sfirst + n; i = ment_end(s->slots[i]))
		segs[k++] = s->slots[i]->seg;
	err = vmm_ments_alloc(ments, k);
	if (err)
		goto out_free;
	err = vmm_map_run(s, dfirst, n, segs, k);
	if (err)
		vmm_ments_free(ments, k);
	else
		vmm_publish(s, dfirst, segs, ments, k);
out_free:
	free(ments);
	free(segs);
	return err;
}

int vmm_alias(struct vmm_space *s, uint64_t src, uint64_t dst, uint64_t bytes)
{
	int err = vmm_check_child(s, "alias");

	if (err)
		return err;
	sa_mutex_lock(&s->lock);
	err = vmm_alias_locked(s, "alias", src, dst, bytes);
	sa_mutex_unlock(&s->lock);
	return err;
}

int vmm_remap(struct vmm_space *s, uint64_t from, uint64_t to, uint64_t bytes,
	      unsigned int flags)
{
	int err = vmm_check_child(s, "remap");

	if (err)
		return err;
	sa_mutex_lock(&s->lock);
	err = vmm_alias_locked(s, "remap", from, to, bytes);
	if (!err)
		err = vmm_sync_locked(s, flags);
	if (!err)
		err = vmm_unmap_inside(s, vmm_slot(s, from), bytes / s->chunk);
	sa_mutex_unlock(&s->lock);
	return err;
}
