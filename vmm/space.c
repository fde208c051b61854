// SPDX-License-Identifier: MIT
/*
 * vmm/space.c - per-device address spaces: set-up, tear-down, lookups, stats
 *
 * A space is one reservation of va_bytes, cut into chunk-sized slots.  The
 * slot table is an array of RCU-protected pointers to mapping descriptors:
 * a dense array is the natural map from slot index to mapping (O(1), no
 * hashing, 8 bytes per chunk of address space), and readers walk it under
 * urcu_bp_read_lock() only.
 *
 * Invariants (under s->lock):
 *   - slots[i] == e != NULL iff the backend has segment e->seg mapped whole
 *     at slot e->first <= i < e->first + e->seg->nr, with access set;
 *   - seg->map_count == the number of mapping descriptors naming it;
 *   - a segment is on s->pool iff its map_count is 0, and st.chunks_pooled
 *     counts the chunks of the pooled segments;
 *   - st.chunks_live * chunk == st.phys_bytes <= phys_limit (unless the
 *     limit was lowered since).
 *
 * Fork: a pthread_atfork child handler bumps vmm_fork_gen; a space whose
 * fork_gen differs belongs to the parent, and every call on it fails with
 * -ECHILD before taking any lock (a lock held by a parent thread at fork
 * stays held for ever in the child).
 *
 * Locking: s->lock (a mutex) serialises writers; readers take none.  Segment
 * descriptors leave the table before a grace period and are freed after it
 * (vmm_segs_free, with call_rcu: no caller ever waits for readers).  The
 * backend's ->synchronize that precedes an unmap runs under s->lock (map.c,
 * and vmm_destroy here), so no new mapping of the range appears in between;
 * only vmm_sync() calls it without the lock.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../lib/options.h"
#include "../lib/util.h"
#include "vmm-internal.h"

#define VMM_VA_FACTOR 4
#define VMM_MAX_SLOTS ((uint64_t)1 << 28) /* 2 GiB of table at most */
#define VMM_SEGMENT_DEFAULT (20ULL << 20) /* PyTorch's large segments */

unsigned long vmm_fork_gen;
static pthread_once_t vmm_atfork_once = PTHREAD_ONCE_INIT;

static void vmm_atfork_child(void)
{
	__atomic_add_fetch(&vmm_fork_gen, 1, __ATOMIC_RELAXED);
}

static void vmm_atfork_register(void)
{
	if (pthread_atfork(NULL, NULL, vmm_atfork_child))
		sa_log(STALLOC_LOG_ERROR,
		       "vmm: pthread_atfork failed: a forked child cannot "
		       "tell that its spaces belong to the parent");
}

void vmm_fork_child_copy(struct vmm_space *s)
{
	uint64_t i, n;

	/* (called before vmm's own child handler: vmm_forked() may not say) */
	if (!s->be.host_fork_copy || s->be.ops != &vmm_host_ops)
		return;
	/* the child is single-threaded here: the table is read as it is */
	for (i = 0; i < s->nr_slots; i += n ? n : 1) {
		const struct vmm_ment *e = s->slots[i];
		void *at, *tmp;
		size_t len;

		n = 0;
		if (!e || e->first != i)
			continue;
		n = e->seg->nr;
		at = (void *)(uintptr_t)vmm_slot_va(s, i);
		len = n * s->chunk;
		tmp = mmap(NULL, len, PROT_READ | PROT_WRITE,
			   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (tmp != MAP_FAILED) {
			memcpy(tmp, at, len);
			if (mremap(tmp, len, len, MREMAP_MAYMOVE | MREMAP_FIXED,
				   at) != MAP_FAILED)
				continue;
			munmap(tmp, len);
		}
		/* no memory for a copy: the child may read, never write */
		mprotect(at, len, PROT_READ);
	}
}

bool vmm_forked(const struct vmm_space *s)
{
	return s->fork_gen != __atomic_load_n(&vmm_fork_gen, __ATOMIC_RELAXED);
}

int vmm_check_child(const struct vmm_space *s, const char *op)
{
	if (!vmm_forked(s))
		return 0;
	return sa_error(-ECHILD,
			"vmm: %s on device %d in process %d, a child forked "
			"from the one that made the space: device state does "
			"not survive fork",
			op, s->be.device, (int)getpid());
}

static const char *const vmm_call_names[VMM_CALL_NR] = {
	[VMM_CALL_RESERVE] = "reserve",
	[VMM_CALL_RELEASE_VA] = "release_va",
	[VMM_CALL_CREATE] = "create",
	[VMM_CALL_DESTROY] = "destroy",
	[VMM_CALL_MAP] = "map",
	[VMM_CALL_UNMAP] = "unmap",
	[VMM_CALL_SET_ACCESS] = "set_access",
	[VMM_CALL_SYNC] = "sync",
	[VMM_CALL_ORDER] = "order",
	[VMM_CALL_WAIT] = "wait",
};

const char *vmm_call_name(enum vmm_call call)
{
	return call < VMM_CALL_NR ? vmm_call_names[call] : "?";
}

static int vmm_pick_backend(const struct vmm_config *cfg,
			    const struct vmm_backend_ops **ops)
{
	const char *name = cfg->backend;
	unsigned int k;
	int err;

	if (!name) {
		/* the table's order: auto, cuda, host */
		err = sa_opt_choice(SA_OPT_BACKEND, &k);
		if (err)
			return err;
		name = k == 1 ? "cuda" : k == 2 ? "host" : "auto";
	}
	if (!*name || !strcasecmp(name, "auto")) {
		*ops = vmm_cuda_available() ? &vmm_cuda_ops : &vmm_host_ops;
		return 0;
	}
	if (!strcasecmp(name, "cuda")) {
		*ops = &vmm_cuda_ops;
		return 0;
	}
	if (!strcasecmp(name, "host")) {
		*ops = &vmm_host_ops;
		return 0;
	}
	return sa_error(-EINVAL,
			"vmm: unknown backend \"%s\" (want cuda, host or auto)",
			name);
}

/* A config value: the field if set, else the option @o, else @def. */
static int vmm_setting(uint64_t field, enum sa_opt o, uint64_t def,
		       uint64_t *out)
{
	if (field) {
		*out = field;
		return 0;
	}
	return sa_opt_size(o, def, out);
}

static int vmm_geometry(struct vmm_space *s, const struct vmm_config *cfg)
{
	const struct vmm_backend_info *bi = &s->be.info;
	uint64_t chunk, va, limit;
	int err;

	err = vmm_setting(cfg->chunk_bytes, SA_OPT_CHUNK_SIZE, bi->granularity,
			  &chunk);
	if (err)
		return err;
	if (!sa_is_multiple(chunk, bi->granularity) ||
	    chunk / bi->granularity >= (1u << 24))
		return sa_error(-EINVAL,
				"vmm: chunk size %llu is not a multiple of the "
				"device %d granularity %zu (or too large)",
				(unsigned long long)chunk, s->be.device,
				bi->granularity);
	s->chunk = chunk;
	err = vmm_setting(cfg->segment_bytes, SA_OPT_SEGMENT_SIZE,
			  VMM_SEGMENT_DEFAULT, &s->seg_max);
	if (err)
		return err;
	s->seg_max /= chunk;
	if (!s->seg_max)
		s->seg_max = 1;
	if (s->seg_max > UINT32_MAX)
		s->seg_max = UINT32_MAX;
	err = vmm_setting(cfg->phys_limit, SA_OPT_PHYS_LIMIT, bi->device_bytes,
			  &limit);
	if (err)
		return err;
	s->phys_limit = limit;
	if (__builtin_mul_overflow(bi->device_bytes, VMM_VA_FACTOR, &va))
		va = UINT64_MAX / 2;
	err = vmm_setting(cfg->va_bytes, SA_OPT_VA_SIZE, va, &va);
	if (err)
		return err;
	if (!va || !sa_round_up(va, chunk, &va) || va / chunk > VMM_MAX_SLOTS ||
	    va > SIZE_MAX / 2)
		return sa_error(-EINVAL,
				"vmm: address space of %llu bytes for device "
				"%d is empty or too large",
				(unsigned long long)va, s->be.device);
	s->size = va;
	s->nr_slots = va / chunk;
	return 0;
}

static int vmm_open_backend(struct vmm_space *s, const struct vmm_config *cfg)
{
	const struct vmm_backend_ops *ops = NULL;
	int err;

	err = vmm_pick_backend(cfg, &ops);
	if (err)
		return err;
	s->be.ops = ops;
	s->be.device = cfg->device;
	s->be.peers = cfg->peers ? cfg->peers : sa_opt_raw(SA_OPT_PEERS);
	err = vmm_setting(cfg->host_device_bytes, SA_OPT_HOST_MEM, 0,
			  &s->be.host_device_bytes);
	if (!err) {
		unsigned int k;

		/* the table's order: none, copy */
		err = sa_opt_choice(SA_OPT_HOST_FORK, &k);
		s->be.host_fork_copy = k == 1;
	}
	if (!err) {
		uint64_t g;

		err = vmm_setting(cfg->host_granularity,
				  SA_OPT_HOST_GRANULARITY, 0, &g);
		s->be.host_granularity = (size_t)g;
	}
	if (err)
		return err;
	return ops->open(&s->be);
}

int vmm_space_create(const struct vmm_config *cfg, struct vmm_space **out)
{
	struct vmm_space *s;
	int err;

	if (cfg->device < 0)
		return sa_error(-EINVAL, "vmm: device %d is negative",
				cfg->device);
	s = calloc(1, sizeof(*s));
	if (!s)
		return sa_error(-ENOMEM, "vmm: out of memory for device %d",
				cfg->device);
	pthread_once(&vmm_atfork_once, vmm_atfork_register);
	s->fork_gen = __atomic_load_n(&vmm_fork_gen, __ATOMIC_RELAXED);
	sa_mutex_init(&s->lock, SA_RANK_VMM, "vmm_space->lock");
	CDS_INIT_LIST_HEAD(&s->pool);
	s->next_id = 1;
	err = vmm_open_backend(s, cfg);
	if (err)
		goto err_free;
	err = vmm_geometry(s, cfg);
	if (err)
		goto err_close;
	s->slots = calloc(s->nr_slots, sizeof(*s->slots));
	if (!s->slots) {
		err = sa_error(-ENOMEM, "vmm: no memory for %llu slots",
			       (unsigned long long)s->nr_slots);
		goto err_close;
	}
	err = vmm_counted(s, VMM_CALL_RESERVE,
			  s->be.ops->reserve_va(&s->be, s->size,
						s->be.info.granularity,
						&s->base));
	if (err)
		goto err_free_slots;
	sa_log(STALLOC_LOG_INFO,
	       "vmm: device %d (%s): %llu bytes reserved at 0x%llx, chunk %zu, "
	       "segments up to %llu bytes, physical limit %llu, peers %#llx",
	       s->be.device, s->be.info.name, (unsigned long long)s->size,
	       (unsigned long long)s->base, s->chunk,
	       (unsigned long long)s->seg_max * s->chunk,
	       (unsigned long long)s->phys_limit,
	       (unsigned long long)s->be.peer_mask);
	*out = s;
	return 0;

err_free_slots:
	free(s->slots);
err_close:
	s->be.ops->close(&s->be);
err_free:
	sa_mutex_destroy(&s->lock);
	free(s);
	return err;
}

/*
 * Tear-down runs each release once more if it fails: an injected or
 * transient driver error should not leak device memory.  What still fails
 * is logged and left to the driver's own clean-up at process exit.
 */
#define VMM_TEARDOWN_TRIES 2

static void vmm_teardown_unmap(struct vmm_space *s)
{
	uint64_t i, next;
	int err, t;

	for (i = 0; i < s->nr_slots; i = next) {
		struct vmm_ment *e = s->slots[i];

		if (!e) {
			next = i + 1;
			continue;
		}
		next = e->first + e->seg->nr;
		for (t = 0, err = -EIO; err && t < VMM_TEARDOWN_TRIES; t++)
			err = vmm_unmap_ment(s, e);
		if (err)
			sa_log(STALLOC_LOG_ERROR, "%s", stalloc_last_error());
	}
}

void vmm_space_destroy(struct vmm_space *s)
{
	int err, t;

	if (!s)
		return;
	if (vmm_forked(s)) {
		/*
		 * The parent's device state: no driver call, no lock (a
		 * parent thread may have held it at fork).  The descriptors
		 * are left to the process's exit.
		 */
		free(s->slots);
		free(s);
		return;
	}
	sa_mutex_lock(&s->lock);
	if (vmm_counted(s, VMM_CALL_SYNC, s->be.ops->synchronize(&s->be, NULL)))
		sa_log(STALLOC_LOG_ERROR, "%s", stalloc_last_error());
	vmm_teardown_unmap(s);
	sa_mutex_unlock(&s->lock);
	for (t = 0; t < VMM_TEARDOWN_TRIES; t++)
		if (!vmm_trim(s, 0))
			break;
	urcu_bp_barrier(); /* the descriptors' deferred frees are done */
	if (s->st.chunks_live || s->st.bytes_mapped) {
		sa_log(STALLOC_LOG_ERROR,
		       "vmm: device %d: %llu chunks could not be released; "
		       "the reservation at 0x%llx is left in place",
		       s->be.device, (unsigned long long)s->st.chunks_live,
		       (unsigned long long)s->base);
		goto out_close;
	}
	for (t = 0, err = -EIO; err && t < VMM_TEARDOWN_TRIES; t++)
		err = vmm_counted(s, VMM_CALL_RELEASE_VA,
				  s->be.ops->release_va(&s->be, s->base,
							s->size));
	if (err)
		sa_log(STALLOC_LOG_ERROR, "%s", stalloc_last_error());
out_close:
	s->be.ops->close(&s->be);
	free(s->slots);
	sa_mutex_destroy(&s->lock);
	free(s);
}

int vmm_check_range(const struct vmm_space *s, const char *op, uint64_t va,
		    uint64_t bytes)
{
	uint64_t end;

	if (!bytes || __builtin_add_overflow(va, bytes, &end) || va < s->base ||
	    end > s->base + s->size)
		return sa_error(-EINVAL,
				"vmm: %s [0x%llx, +%llu) on device %d: not "
				"inside the space [0x%llx, +%llu)",
				op, (unsigned long long)va,
				(unsigned long long)bytes, s->be.device,
				(unsigned long long)s->base,
				(unsigned long long)s->size);
	if ((va - s->base) % s->chunk || bytes % s->chunk)
		return sa_error(-EINVAL,
				"vmm: %s [0x%llx, +%llu) on device %d: not "
				"aligned to the chunk size %zu",
				op, (unsigned long long)va,
				(unsigned long long)bytes, s->be.device,
				s->chunk);
	return 0;
}

static void seg_free_rcu(struct rcu_head *h)
{
	/* cppcheck-suppress nullPointer ; container_of idiom */
	free(caa_container_of(h, struct vmm_seg, rcu));
}

/*
 * Readers may still hold descriptors they found in the table: free them
 * after a grace period.  call_rcu, not synchronize_rcu: callers may hold
 * locks that a reader waits for (the runtime's device lock), and waiting
 * for readers there would deadlock.
 */
void vmm_segs_free(struct cds_list_head *list)
{
	struct vmm_seg *g, *tmp;

	cds_list_for_each_entry_safe(g, tmp, list, pool_node) {
		cds_list_del(&g->pool_node);
		urcu_bp_call_rcu(&g->rcu, seg_free_rcu);
	}
}

int vmm_trim(struct vmm_space *s, uint64_t keep_bytes)
{
	CDS_LIST_HEAD(dead);
	struct vmm_seg *g;
	int err = vmm_check_child(s, "trim");

	if (err)
		return err;
	sa_mutex_lock(&s->lock);
	while (s->st.chunks_pooled * s->chunk > keep_bytes) {
		/* Release the least recently used segment first. */
		/* cppcheck-suppress nullPointer ; container_of idiom */
		g = cds_list_entry(s->pool.prev, struct vmm_seg, pool_node);
		err = vmm_seg_destroy(s, g, &dead);
		if (err)
			break;
	}
	sa_mutex_unlock(&s->lock);
	vmm_segs_free(&dead);
	return err;
}

int vmm_sync(struct vmm_space *s, void *stream)
{
	int err = vmm_check_child(s, "sync");

	if (err)
		return err;
	return vmm_counted(s, VMM_CALL_SYNC,
			   s->be.ops->synchronize(&s->be, stream));
}

int vmm_event_new(struct vmm_space *s, uint64_t *ev)
{
	int err;

	sa_mutex_lock(&s->lock);
	err = vmm_counted(s, VMM_CALL_ORDER, s->be.ops->event_new(&s->be, ev));
	sa_mutex_unlock(&s->lock);
	return err;
}

void vmm_event_free(struct vmm_space *s, uint64_t ev)
{
	sa_mutex_lock(&s->lock);
	s->be.ops->event_free(&s->be, ev);
	sa_mutex_unlock(&s->lock);
}

int vmm_event_record(struct vmm_space *s, uint64_t ev, void *stream)
{
	int err = vmm_check_child(s, "stream_after");

	if (err)
		return err;
	sa_mutex_lock(&s->lock);
	err = vmm_counted(s, VMM_CALL_ORDER,
			  s->be.ops->event_record(&s->be, ev, stream));
	sa_mutex_unlock(&s->lock);
	return err;
}

int vmm_stream_wait(struct vmm_space *s, void *stream, uint64_t ev)
{
	int err;

	sa_mutex_lock(&s->lock);
	err = vmm_counted(s, VMM_CALL_ORDER,
			  s->be.ops->stream_wait(&s->be, stream, ev));
	sa_mutex_unlock(&s->lock);
	return err;
}

int vmm_event_sync(struct vmm_space *s, uint64_t ev)
{
	int err = vmm_check_child(s, "event_sync");

	if (err)
		return err;
	/* no space lock: the host waits, and others may map meanwhile */
	return vmm_counted(s, VMM_CALL_WAIT, s->be.ops->event_sync(&s->be, ev));
}

int vmm_event_done(struct vmm_space *s, uint64_t ev, bool *done)
{
	int err = vmm_check_child(s, "event_query");

	*done = false;
	if (err)
		return err;
	return vmm_counted(s, VMM_CALL_ORDER,
			   s->be.ops->event_query(&s->be, ev, done));
}

bool vmm_capturing(struct vmm_space *s, void *stream)
{
	bool on = false;

	s->be.ops->capturing(&s->be, stream, &on);
	return on;
}

int vmm_capture_relax(struct vmm_space *s, bool relax, int *old)
{
	return s->be.ops->capture_relax(&s->be, relax, old);
}

bool vmm_lookup(struct vmm_space *s, uint64_t va, struct vmm_translation *t)
{
	struct vmm_ment *e;
	uint64_t i;

	if (va < s->base || va - s->base >= s->size || vmm_forked(s))
		return false;
	i = vmm_slot(s, va);
	urcu_bp_read_lock();
	e = rcu_dereference(s->slots[i]);
	if (e) {
		t->chunk_id = e->seg->id + (i - e->first);
		t->handle = e->seg->handle;
		t->slot_va = vmm_slot_va(s, i);
		t->chunk_offset = va - t->slot_va;
		t->seg_va = vmm_slot_va(s, e->first);
		t->seg_bytes = (uint64_t)e->seg->nr * s->chunk;
	}
	urcu_bp_read_unlock();
	return e != NULL;
}

bool vmm_is_mapped(struct vmm_space *s, uint64_t va, uint64_t bytes)
{
	uint64_t i, last;
	bool ok = true;

	if (!bytes || va < s->base || va - s->base >= s->size ||
	    bytes > s->size - (va - s->base) || vmm_forked(s))
		return false;
	last = vmm_slot(s, va + bytes - 1);
	urcu_bp_read_lock();
	for (i = vmm_slot(s, va); ok && i <= last; i++)
		ok = rcu_dereference(s->slots[i]) != NULL;
	urcu_bp_read_unlock();
	return ok;
}

int vmm_for_each_mapping(struct vmm_space *s,
			 int (*fn)(const struct vmm_mapping *m, void *arg),
			 void *arg)
{
	struct vmm_mapping m = { 0 };
	uint64_t i, prev_id = 0;
	int ret = vmm_check_child(s, "for_each_mapping");

	urcu_bp_read_lock();
	for (i = 0; i <= s->nr_slots && !ret; i++) {
		struct vmm_ment *e =
			i < s->nr_slots ? rcu_dereference(s->slots[i]) : NULL;
		uint64_t id = e ? e->seg->id + (i - e->first) : 0;

		if (e && m.nr_chunks) {
			m.contiguous_ids &= id == prev_id + 1;
			m.nr_chunks++;
			m.bytes += s->chunk;
			m.nr_segs += i == e->first;
		} else if (e) {
			m = (struct vmm_mapping){ .va = vmm_slot_va(s, i),
						  .bytes = s->chunk,
						  .first_chunk_id = id,
						  .nr_chunks = 1,
						  .contiguous_ids = true,
						  .nr_segs = 1 };
		} else if (m.nr_chunks) {
			ret = fn(&m, arg);
			m.nr_chunks = 0;
		}
		prev_id = id;
	}
	urcu_bp_read_unlock();
	return ret;
}

uint64_t vmm_phys_bytes(const struct vmm_space *s)
{
	return s->st.phys_bytes;
}

uint64_t vmm_mapped_bytes(const struct vmm_space *s)
{
	return s->st.bytes_mapped;
}

void vmm_get_stats(struct vmm_space *s, struct vmm_stats *st)
{
	int k;

	if (vmm_forked(s)) {
		*st = s->st; /* the lock may be held for ever here */
	} else {
		sa_mutex_lock(&s->lock);
		*st = s->st;
		sa_mutex_unlock(&s->lock);
	}
	for (k = 0; k < VMM_CALL_NR; k++) {
		st->calls[k] = __atomic_load_n(&s->calls[k], __ATOMIC_RELAXED);
		st->call_failures[k] =
			__atomic_load_n(&s->call_failures[k], __ATOMIC_RELAXED);
	}
}

void vmm_reset_peaks(struct vmm_space *s)
{
	if (vmm_forked(s))
		return;
	sa_mutex_lock(&s->lock);
	s->st.bytes_mapped_peak = s->st.bytes_mapped;
	s->st.phys_bytes_peak = s->st.phys_bytes;
	sa_mutex_unlock(&s->lock);
}

uint64_t vmm_base(const struct vmm_space *s)
{
	return s->base;
}

uint64_t vmm_size(const struct vmm_space *s)
{
	return s->size;
}

size_t vmm_chunk_bytes(const struct vmm_space *s)
{
	return s->chunk;
}

size_t vmm_granularity(const struct vmm_space *s)
{
	return s->be.info.granularity;
}

uint64_t vmm_segment_bytes(const struct vmm_space *s)
{
	return s->seg_max * s->chunk;
}

uint64_t vmm_peer_mask(const struct vmm_space *s)
{
	return s->be.peer_mask;
}

int vmm_device(const struct vmm_space *s)
{
	return s->be.device;
}

const char *vmm_backend_name(const struct vmm_space *s)
{
	return s->be.info.name;
}

uint64_t vmm_phys_limit(const struct vmm_space *s)
{
	return s->phys_limit;
}

uint64_t vmm_device_bytes(const struct vmm_space *s)
{
	return s->be.info.device_bytes;
}

void vmm_set_phys_limit(struct vmm_space *s, uint64_t bytes)
{
	if (vmm_forked(s))
		return;
	sa_mutex_lock(&s->lock);
	s->phys_limit = bytes;
	sa_mutex_unlock(&s->lock);
}
