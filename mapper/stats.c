// SPDX-License-Identifier: MIT
/*
 * mapper/stats.c - statistics, out-of-memory reports and the control
 * socket's snapshot of a device
 *
 * The counters themselves are updated on the allocation paths under the
 * device lock (alloc.c); here they are read: stalloc_stats() copies them
 * under the lock and adds the vmm layer's figures (stalloc_reset_peak()
 * restarts the peaks), mapper_view_get() takes a whole snapshot (allocated
 * ranges included) for the control socket so that an answer is formatted
 * with no lock held.
 *
 * Locking: the device lock, briefly, per call; never called with it held.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../lib/util.h"
#include "mapper.h"

void dev_report_oom(struct mdev *d, size_t size)
{
	struct stalloc_stats st = { 0 };

	stalloc_stats(d->device, &st);
	sa_log(STALLOC_LOG_ERROR,
	       "runtime: device %d: out of memory for %zu bytes (%s): "
	       "allocated %" PRIu64 ", reserved %" PRIu64 " (peak %" PRIu64
	       "), mapped %" PRIu64,
	       d->device, size, stalloc_last_error(), st.allocated, st.reserved,
	       st.reserved_peak, st.mapped);
}

void dev_peak_take(struct mdev *d)
{
	struct stalloc_peak *p = &d->peak;
	uint64_t mapped = vmm_mapped_bytes(d->vmm), pool_mapped = 0;
	uint64_t blocks =
		dyn_used_bytes(&d->dyn) + dyn_used_bytes(&d->slab_dyn);
	uint64_t dyn_mapped;

	p->reserved = vmm_phys_bytes(d->vmm);
	p->requested = d->st.allocated;
	p->allocs = d->st.allocs;
	p->pool_used = p->pool_idle = 0;
	if (d->planned) {
		pool_mapped = d->match.mapped_bytes;
		p->pool_used = d->match.live_bytes;
		p->pool_idle = pool_mapped > p->pool_used ?
				       pool_mapped - p->pool_used :
				       0;
	}
	p->slabs = d->slab.slabs * SLAB_BYTES;
	p->dyn_live = blocks > p->slabs ? blocks - p->slabs : 0;
	p->dyn_warmup = d->warm_id ? d->warm_live : 0;
	dyn_mapped = mapped - pool_mapped;
	p->dyn_free = dyn_mapped > blocks ? dyn_mapped - blocks : 0;
	p->cached = p->reserved > mapped ? p->reserved - mapped : 0;
}

/* The state of @device for a query: -EINVAL out of range, -ENOENT unused. */
static int dev_used(int device, struct mdev **out)
{
	if (device < 0 || device >= MAPPER_MAX_DEVICES)
		return sa_error(-EINVAL, "runtime: device %d out of range",
				device);
	*out = dev_peek(device);
	if (!*out)
		return sa_error(-ENOENT, "runtime: device %d was never used",
				device);
	return 0;
}

int stalloc_peak(int device, struct stalloc_peak *p)
{
	struct mdev *d;
	int err = dev_used(device, &d);

	if (err)
		return err;
	sa_mutex_lock(&d->lock);
	*p = d->peak;
	sa_mutex_unlock(&d->lock);
	return 0;
}

int stalloc_stats(int device, struct stalloc_stats *st)
{
	struct vmm_stats vs;
	struct mdev *d;
	int k, err = dev_used(device, &d);

	if (err)
		return err;
	sa_mutex_lock(&d->lock);
	*st = d->st;
	st->bad_frees = __atomic_load_n(&d->bad_frees, __ATOMIC_RELAXED);
	sa_mutex_unlock(&d->lock);
	vmm_get_stats(d->vmm, &vs);
	st->reserved = vs.phys_bytes;
	st->reserved_peak = vs.phys_bytes_peak;
	st->mapped = vs.bytes_mapped;
	st->mapped_peak = vs.bytes_mapped_peak;
	st->driver_calls = 0;
	for (k = 0; k < VMM_CALL_NR; k++)
		st->driver_calls += vs.calls[k];
	st->device_syncs = vs.calls[VMM_CALL_SYNC];
	st->host_waits = vs.calls[VMM_CALL_WAIT];
	st->driver_allocs = vs.segs_created;
	st->driver_alloc_bytes = vs.chunks_created * vmm_chunk_bytes(d->vmm);
	return 0;
}

int stalloc_reset_peak(int device)
{
	struct mdev *d;
	int err = dev_used(device, &d);

	if (err)
		return err;
	sa_mutex_lock(&d->lock);
	d->st.allocated_peak = d->st.allocated;
	sa_mutex_unlock(&d->lock);
	vmm_reset_peaks(d->vmm);
	return 0;
}

static const char *mode_name(const struct mdev *d)
{
	if (d->planned)
		return d->mode == MDEV_AUTO ? "auto (planned)" : "plan";
	switch (d->mode) {
	case MDEV_TRACE:
		return "trace";
	case MDEV_AUTO:
		return "auto (tracing)";
	case MDEV_PLAN:
		return "off (no usable plan)";
	default:
		return "off";
	}
}

static bool view_add(struct mapper_view *v, size_t *cap, uint64_t lo,
		     uint64_t hi, enum mapper_owner owner)
{
	if (v->nr_busy == *cap) {
		size_t n = *cap * 2 + 64;
		struct mapper_busy *nb = realloc(v->busy, n * sizeof(*nb));

		if (!nb)
			return false;
		v->busy = nb;
		*cap = n;
	}
	v->busy[v->nr_busy++] = (struct mapper_busy){ lo, hi, owner };
	return true;
}

/* The allocated ranges of @d, in address order.  Device lock held. */
static bool view_busy(struct mdev *d, struct mapper_view *v)
{
	const struct matcher *m = &d->match;
	struct mblock *b;
	size_t cap = 0, i;

	for (i = 0; d->planned && i < m->nr_live; i++)
		if (!view_add(v, &cap, m->base + m->live[i].off,
			      m->base + m->live[i].off + m->live[i].size,
			      m->live[i].ent == MATCH_REUSED ? MAPPER_REUSED :
							       MAPPER_PLAN))
			return false;
	cds_list_for_each_entry(b, &d->dyn.blocks, addr_node)
		if (!b->free &&
		    !view_add(v, &cap, b->addr, b->addr + b->size,
			      b->slab ? MAPPER_SLAB : MAPPER_DYNAMIC))
			return false;
	cds_list_for_each_entry(b, &d->slab_dyn.blocks, addr_node)
		if (!b->free &&
		    !view_add(v, &cap, b->addr, b->addr + b->size, MAPPER_SLAB))
			return false;
	return true;
}

int mapper_view_get(int device, struct mapper_view *v)
{
	struct mdev *d;
	bool ok;

	memset(v, 0, sizeof(*v));
	if (stalloc_stats(device, &v->st))
		return -ENOENT;
	d = rcu_dereference(mdev_table[device]);
	v->device = device;
	v->vmm = d->vmm;
	sa_mutex_lock(&d->lock);
	v->mode = mode_name(d);
	v->peak = d->peak;
	v->planned = d->planned;
	v->rejected = !d->planned && d->plan_rejected;
	if (v->rejected)
		snprintf(v->plan_path, sizeof(v->plan_path), "%s",
			 d->plan_path);
	if (d->planned) {
		const struct matcher *m = &d->match;

		v->pool_lo = m->base;
		v->pool_hi = m->base + m->pool_bytes;
		v->disabled = m->disabled;
		v->fingerprint = m->plan->fingerprint;
		v->nr_entries = m->plan->nr_ent;
		v->nr_positions = m->plan->nr_positions;
		v->warmup = m->plan->warmup;
		v->cursor = m->cursor;
		v->marks = m->marks;
		snprintf(v->plan_path, sizeof(v->plan_path), "%s",
			 d->plan_path);
	}
	ok = view_busy(d, v);
	sa_mutex_unlock(&d->lock);
	if (!ok) {
		mapper_view_put(v);
		return -ENOMEM;
	}
	return 0;
}

void mapper_view_put(struct mapper_view *v)
{
	free(v->busy);
	v->busy = NULL;
	v->nr_busy = 0;
}
