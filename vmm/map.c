// SPDX-License-Identifier: MIT
/*
 * vmm/map.c - map, unmap, remap and alias chunk-aligned ranges of a space
 *
 * Each chunk is its own driver mapping (a CUDA handle maps whole, at offset
 * 0), and a contiguous range gets one ->set_access after its chunks are
 * mapped.  A slot is published in the table only once its memory is mapped
 * and accessible, and withdrawn before it is unmapped, so an RCU reader never
 * finds a slot whose memory is not there.
 *
 * Failure rules: map and alias are all or nothing (what was mapped is
 * unmapped again, chunks created for the call are destroyed again); remap is
 * an alias followed by an unmap of the source, so a failure in its second
 * half leaves both ranges mapped (table and driver agree); a failing unmap
 * stops at the failing chunk and the table still lists exactly what is
 * mapped.  Arguments are checked before any driver call, so bad input never
 * changes anything.
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

static int vmm_be_map(struct vmm_space *s, uint64_t slot, struct vmm_chunk *c)
{
	return vmm_counted(s, VMM_CALL_MAP,
			   s->be.ops->map(&s->be, vmm_slot_va(s, slot),
					  s->chunk, c->handle));
}

static int vmm_be_unmap(struct vmm_space *s, uint64_t slot)
{
	return vmm_counted(s, VMM_CALL_UNMAP,
			   s->be.ops->unmap(&s->be, vmm_slot_va(s, slot),
					    s->chunk));
}

/* Best-effort undo of mappings the caller made but did not publish. */
static void vmm_undo_maps(struct vmm_space *s, uint64_t first, uint64_t n)
{
	uint64_t i;

	for (i = first; i < first + n; i++)
		if (vmm_be_unmap(s, i))
			sa_log(STALLOC_LOG_ERROR,
			       "vmm: device %d: cannot undo a mapping at "
			       "0x%llx; the driver keeps it until exit",
			       s->be.device,
			       (unsigned long long)vmm_slot_va(s, i));
}

/*
 * Map @chunks[0..n) at slots first.. and set access on the whole range; on
 * failure unmap what was mapped.  Publishes nothing.
 */
static int vmm_map_run(struct vmm_space *s, uint64_t first, uint64_t n,
		       struct vmm_chunk **chunks)
{
	uint64_t i;
	int err;

	for (i = 0; i < n; i++) {
		err = vmm_be_map(s, first + i, chunks[i]);
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
	vmm_undo_maps(s, first, i);
	return err;
}

static void vmm_publish(struct vmm_space *s, uint64_t first, uint64_t n,
			struct vmm_chunk **chunks)
{
	uint64_t i;

	for (i = 0; i < n; i++) {
		if (!chunks[i]->map_count++)
			cds_list_del(&chunks[i]->pool_node);
		rcu_set_pointer(&s->slots[first + i], chunks[i]);
	}
	s->st.bytes_mapped += n * s->chunk;
	if (s->st.bytes_mapped > s->st.bytes_mapped_peak)
		s->st.bytes_mapped_peak = s->st.bytes_mapped;
}

/* @c left a slot; back to the pool when it is mapped nowhere else. */
static void vmm_withdrawn(struct vmm_space *s, struct vmm_chunk *c)
{
	s->st.bytes_mapped -= s->chunk;
	if (!--c->map_count) {
		cds_list_add(&c->pool_node, &s->pool);
		s->st.chunks_pooled++;
	}
}

static int vmm_new_chunk(struct vmm_space *s, struct vmm_chunk **out)
{
	struct vmm_chunk *c = calloc(1, sizeof(*c));
	int err;

	if (!c)
		return sa_error(-ENOMEM, "vmm: out of host memory");
	err = vmm_counted(s, VMM_CALL_CREATE,
			  s->be.ops->create_chunk(&s->be, s->chunk,
						  &c->handle));
	if (err) {
		free(c);
		return err;
	}
	c->id = s->next_id++;
	/* Pooled until published, so that failure paths can treat all
	 * gathered chunks alike. */
	cds_list_add(&c->pool_node, &s->pool);
	s->st.chunks_created++;
	s->st.chunks_live++;
	s->st.chunks_pooled++;
	s->st.phys_bytes += s->chunk;
	if (s->st.phys_bytes > s->st.phys_bytes_peak)
		s->st.phys_bytes_peak = s->st.phys_bytes;
	*out = c;
	return 0;
}

/* Destroy chunks created by a failed call (they are pooled, unmapped). */
static void vmm_drop_new(struct vmm_space *s, struct vmm_chunk **chunks,
			 uint64_t n, uint64_t nr_new)
{
	CDS_LIST_HEAD(dead);
	uint64_t i;

	for (i = n - nr_new; i < n; i++) {
		struct vmm_chunk *c = chunks[i];

		if (vmm_counted(s, VMM_CALL_DESTROY,
				s->be.ops->destroy_chunk(&s->be, c->handle)))
			continue; /* stays pooled; trim or teardown retries */
		cds_list_move(&c->pool_node, &dead);
		s->st.chunks_pooled--;
		s->st.chunks_live--;
		s->st.chunks_destroyed++;
		s->st.phys_bytes -= s->chunk;
	}
	vmm_chunks_free(&dead);
}

/*
 * Gather @n chunks: pooled ones first (most recently used first, their
 * pages are likely still warm), then new ones.  *@nr_new gets the number
 * created, which come last in @chunks.
 */
static int vmm_gather(struct vmm_space *s, uint64_t n,
		      struct vmm_chunk **chunks, uint64_t *nr_new)
{
	uint64_t i = 0, have = s->st.chunks_pooled, limit;
	struct vmm_chunk *c;
	int err = 0;

	limit = s->phys_limit / s->chunk;
	*nr_new = 0;
	if (n > have && s->st.chunks_live + (n - have) > limit)
		return sa_error(-ENOMEM,
				"vmm: device %d: mapping %llu bytes would "
				"exceed the physical limit of %llu bytes "
				"(%llu held, %llu pooled)",
				s->be.device, (unsigned long long)n * s->chunk,
				(unsigned long long)s->phys_limit,
				(unsigned long long)s->st.phys_bytes,
				(unsigned long long)(have * s->chunk));
	cds_list_for_each_entry(c, &s->pool, pool_node) {
		if (i == n)
			break;
		chunks[i++] = c;
	}
	while (i < n) {
		err = vmm_new_chunk(s, &chunks[i]);
		if (err)
			break;
		i++;
		(*nr_new)++;
	}
	if (err) {
		vmm_drop_new(s, chunks, i, *nr_new);
		*nr_new = 0;
	}
	return err;
}

int vmm_map(struct vmm_space *s, uint64_t va, uint64_t bytes)
{
	struct vmm_chunk **chunks;
	uint64_t first, n, nr_new;
	int err;

	err = vmm_check_range(s, "map", va, bytes);
	if (err)
		return err;
	first = vmm_slot(s, va);
	n = bytes / s->chunk;
	chunks = malloc(n * sizeof(*chunks));
	if (!chunks)
		return sa_error(-ENOMEM, "vmm: out of host memory");
	pthread_mutex_lock(&s->lock);
	err = vmm_need_free(s, "map", first, n);
	if (err)
		goto out_unlock;
	err = vmm_gather(s, n, chunks, &nr_new);
	if (err)
		goto out_unlock;
	err = vmm_map_run(s, first, n, chunks);
	if (err) {
		vmm_drop_new(s, chunks, n, nr_new);
		goto out_unlock;
	}
	s->st.chunks_pooled -= n;
	vmm_publish(s, first, n, chunks);
	sa_trace(map, s->be.device, va, bytes);
out_unlock:
	pthread_mutex_unlock(&s->lock);
	free(chunks);
	return err;
}

/* Withdraw and unmap slots first..first+n; stops at the first failure. */
int vmm_unmap_run(struct vmm_space *s, uint64_t first, uint64_t n)
{
	uint64_t i;
	int err;

	for (i = first; i < first + n; i++) {
		struct vmm_chunk *c = s->slots[i];

		rcu_set_pointer(&s->slots[i], NULL);
		err = vmm_be_unmap(s, i);
		if (err) {
			rcu_set_pointer(&s->slots[i], c);
			return err;
		}
		vmm_withdrawn(s, c);
	}
	return 0;
}

static int vmm_sync_locked(struct vmm_space *s, unsigned int flags)
{
	if (flags & VMM_SYNCED)
		return 0;
	return vmm_counted(s, VMM_CALL_SYNC,
			   s->be.ops->synchronize(&s->be, NULL));
}

int vmm_unmap(struct vmm_space *s, uint64_t va, uint64_t bytes,
	      unsigned int flags)
{
	uint64_t first, n;
	int err;

	err = vmm_check_range(s, "unmap", va, bytes);
	if (err)
		return err;
	first = vmm_slot(s, va);
	n = bytes / s->chunk;
	pthread_mutex_lock(&s->lock);
	err = vmm_need_mapped(s, "unmap", first, n);
	if (!err)
		err = vmm_sync_locked(s, flags);
	if (!err)
		err = vmm_unmap_run(s, first, n);
	pthread_mutex_unlock(&s->lock);
	if (!err)
		sa_trace(unmap, s->be.device, va, bytes);
	return err;
}

/* Map the chunks at src slots also at dst slots (space lock held). */
static int vmm_alias_locked(struct vmm_space *s, const char *op, uint64_t src,
			    uint64_t dst, uint64_t bytes)
{
	uint64_t sfirst, dfirst, n, i;
	struct vmm_chunk **chunks;
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
	chunks = malloc(n * sizeof(*chunks));
	if (!chunks)
		return sa_error(-ENOMEM, "vmm: out of host memory");
	for (i = 0; i < n; i++)
		chunks[i] = s->slots[sfirst + i];
	err = vmm_map_run(s, dfirst, n, chunks);
	if (!err)
		vmm_publish(s, dfirst, n, chunks);
	free(chunks);
	return err;
}

int vmm_alias(struct vmm_space *s, uint64_t src, uint64_t dst, uint64_t bytes)
{
	int err;

	pthread_mutex_lock(&s->lock);
	err = vmm_alias_locked(s, "alias", src, dst, bytes);
	pthread_mutex_unlock(&s->lock);
	return err;
}

int vmm_remap(struct vmm_space *s, uint64_t from, uint64_t to, uint64_t bytes,
	      unsigned int flags)
{
	int err;

	pthread_mutex_lock(&s->lock);
	err = vmm_alias_locked(s, "remap", from, to, bytes);
	if (!err)
		err = vmm_sync_locked(s, flags);
	if (!err)
		err = vmm_unmap_run(s, vmm_slot(s, from), bytes / s->chunk);
	pthread_mutex_unlock(&s->lock);
	return err;
}
