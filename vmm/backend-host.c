// SPDX-License-Identifier: MIT
/*
 * vmm/backend-host.c - the host backend: CUDA-style VMM on host memory
 *
 * Physical memory of the pretend device is one sparse memfd of
 * device_bytes; a chunk is an extent of it, found first-fit in a bitmap of
 * granules, so that chunks never need a file descriptor each.  Mapping a
 * chunk is mmap(MAP_SHARED | MAP_FIXED) of its extent over the PROT_NONE
 * reservation: remapping elsewhere shows the same pages without a copy, and
 * a chunk may be mapped at two addresses at once.  A new mapping has no
 * access rights until ->set_access, as on CUDA.  Destroying a chunk punches
 * its pages out of the memfd, so memory really goes back to the system.
 *
 * Fork: by default reservations and mappings are marked MADV_DONTFORK, so
 * a forked child does not inherit device memory (as with CUDA) and its
 * writes can never reach the parent's tensors.  With STALLOC_HOST_FORK=copy
 * (CPU tensors, which a DataLoader worker reads) they are inherited, and
 * the child replaces the shared pages with a private copy right after fork
 * (vmm_fork_child_copy()), so again its writes stay its own.  This is the
 * one place the policy is decided.
 *
 * Locking: none of its own; the vmm core serialises calls per instance
 * (see the preconditions in backend.h).  ->synchronize has nothing to wait
 * for: host work is synchronous.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../lib/util.h"
#include "backend.h"

#define HOST_DEFAULT_BYTES ((uint64_t)16 << 30)

struct host_dev {
	int fd;
	uint64_t nr_granules;
	unsigned long *used; /* bitmap of granules in use */
};

#define BITS_PER_LONG (8 * sizeof(unsigned long))

static bool host_bit(const struct host_dev *h, uint64_t i)
{
	return h->used[i / BITS_PER_LONG] >> (i % BITS_PER_LONG) & 1;
}

static void host_set_bits(struct host_dev *h, uint64_t first, uint64_t n,
			  bool on)
{
	uint64_t i;

	for (i = first; i < first + n; i++) {
		unsigned long bit = 1UL << (i % BITS_PER_LONG);

		if (on)
			h->used[i / BITS_PER_LONG] |= bit;
		else
			h->used[i / BITS_PER_LONG] &= ~bit;
	}
}

/* First fit of @n free granules; false if the device is full. */
static bool host_find_run(const struct host_dev *h, uint64_t n, uint64_t *first)
{
	uint64_t i, run = 0;

	for (i = 0; i < h->nr_granules; i++) {
		if (h->used[i / BITS_PER_LONG] == ~0UL &&
		    i % BITS_PER_LONG == 0) {
			run = 0;
			i += BITS_PER_LONG - 1;
			continue;
		}
		run = host_bit(h, i) ? 0 : run + 1;
		if (run == n) {
			*first = i + 1 - n;
			return true;
		}
	}
	return false;
}

static int host_errno(struct vmm_backend *be, const char *call, uint64_t va,
		      uint64_t size)
{
	int err = errno;

	be->last_driver_error = err;
	return sa_error(err == ENOMEM ? -ENOMEM : -EIO,
			"host: %s(0x%llx, %llu) on device %d: %s", call,
			(unsigned long long)va, (unsigned long long)size,
			be->device, strerror(err));
}

static int host_open(struct vmm_backend *be)
{
	uint64_t bytes = be->host_device_bytes ? be->host_device_bytes :
						 HOST_DEFAULT_BYTES;
	size_t gran = be->host_granularity ? be->host_granularity : SZ_2M;
	struct host_dev *h;
	char name[32];

	if (!sa_is_pow2(gran) || gran < (size_t)sysconf(_SC_PAGESIZE))
		return sa_error(-EINVAL,
				"host: granularity %zu is not a power of two "
				"of at least a page",
				gran);
	if (!sa_is_multiple(bytes, gran))
		return sa_error(-EINVAL,
				"host: device memory %llu is not a multiple "
				"of the granularity %zu",
				(unsigned long long)bytes, gran);
	h = calloc(1, sizeof(*h));
	if (!h)
		return sa_error(-ENOMEM, "host: out of memory opening device");
	h->nr_granules = bytes / gran;
	h->used = calloc((h->nr_granules + BITS_PER_LONG - 1) / BITS_PER_LONG,
			 sizeof(unsigned long));
	if (!h->used)
		goto err_free;
	snprintf(name, sizeof(name), "stalloc-dev%d", be->device);
	h->fd = memfd_create(name, MFD_CLOEXEC);
	if (h->fd < 0) {
		host_errno(be, "memfd_create", 0, bytes);
		goto err_free_bitmap;
	}
	if (ftruncate(h->fd, (off_t)bytes)) {
		host_errno(be, "ftruncate", 0, bytes);
		goto err_close;
	}
	be->priv = h;
	be->info.name = "host";
	be->info.granularity = gran;
	be->info.device_bytes = bytes;
	be->info.flags = 0;
	return 0;

err_close:
	close(h->fd);
err_free_bitmap:
	free(h->used);
err_free:
	free(h);
	return -ENODEV;
}

static void host_close(struct vmm_backend *be)
{
	struct host_dev *h = be->priv;

	close(h->fd);
	free(h->used);
	free(h);
	be->priv = NULL;
}

/* Keep device memory out of forked children, unless they get a copy. */
static void host_dontfork(const struct vmm_backend *be, void *p, size_t size)
{
	if (!be->host_fork_copy)
		madvise(p, size, MADV_DONTFORK);
}

static int host_reserve_va(struct vmm_backend *be, size_t size, size_t align,
			   uint64_t *va)
{
	size_t span = size + align;
	uintptr_t p, start;
	void *m;

	if (span < size)
		return sa_error(-ENOMEM, "host: reservation of %zu overflows",
				size);
	m = mmap(NULL, span, PROT_NONE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (m == MAP_FAILED)
		return host_errno(be, "mmap", 0, span);
	p = (uintptr_t)m;
	start = (p + align - 1) & ~(uintptr_t)(align - 1);
	if (start > p)
		munmap(m, start - p);
	if (start + size < p + span)
		munmap((void *)(start + size), p + span - (start + size));
	host_dontfork(be, (void *)start, size);
	*va = start;
	return 0;
}

static int host_release_va(struct vmm_backend *be, uint64_t va, size_t size)
{
	if (munmap((void *)(uintptr_t)va, size))
		return host_errno(be, "munmap", va, size);
	return 0;
}

static int host_create_chunk(struct vmm_backend *be, size_t size,
			     uint64_t *handle)
{
	struct host_dev *h = be->priv;
	uint64_t n = size / be->info.granularity, first;

	if (!host_find_run(h, n, &first)) {
		be->last_driver_error = ENOSPC;
		return sa_error(-ENOMEM,
				"host: device %d has no %zu free bytes left",
				be->device, size);
	}
	host_set_bits(h, first, n, true);
	/* handle: (first granule + 1) << 24 | granules; never 0 */
	*handle = (first + 1) << 24 | n;
	return 0;
}

static void host_extent(const struct vmm_backend *be, uint64_t handle,
			uint64_t *off, uint64_t *len)
{
	*off = ((handle >> 24) - 1) * be->info.granularity;
	*len = (handle & 0xffffff) * be->info.granularity;
}

static int host_destroy_chunk(struct vmm_backend *be, uint64_t handle)
{
	struct host_dev *h = be->priv;
	uint64_t off, len;

	host_extent(be, handle, &off, &len);
	if (fallocate(h->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
		      (off_t)off, (off_t)len))
		return host_errno(be, "fallocate(PUNCH_HOLE)", off, len);
	host_set_bits(h, off / be->info.granularity, len / be->info.granularity,
		      false);
	return 0;
}

static int host_map(struct vmm_backend *be, uint64_t va, size_t size,
		    uint64_t handle)
{
	struct host_dev *h = be->priv;
	uint64_t off, len;
	void *p = (void *)(uintptr_t)va;

	host_extent(be, handle, &off, &len);
	if (mmap(p, size, PROT_NONE, MAP_SHARED | MAP_FIXED, h->fd,
		 (off_t)off) == MAP_FAILED)
		return host_errno(be, "mmap(MAP_FIXED)", va, size);
	host_dontfork(be, p, size);
	return 0;
}

static int host_unmap(struct vmm_backend *be, uint64_t va, size_t size)
{
	void *p = (void *)(uintptr_t)va;

	/* Put the reservation's PROT_NONE hole back; never munmap here. */
	if (mmap(p, size, PROT_NONE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1,
		 0) == MAP_FAILED)
		return host_errno(be, "mmap(hole)", va, size);
	host_dontfork(be, p, size);
	return 0;
}

static int host_set_access(struct vmm_backend *be, uint64_t va, size_t size)
{
	if (mprotect((void *)(uintptr_t)va, size, PROT_READ | PROT_WRITE))
		return host_errno(be, "mprotect", va, size);
	return 0;
}

static int host_synchronize(struct vmm_backend *be, void *stream)
{
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	return 0;
}

/*
 * Host work runs in order and to completion: an event is only a name, and
 * waiting on one is a memory fence.  Nothing is ever captured.
 */
static int host_event_new(struct vmm_backend *be, uint64_t *ev)
{
	static uint64_t next;

	*ev = __atomic_add_fetch(&next, 1, __ATOMIC_RELAXED);
	return 0;
}

static void host_event_free(struct vmm_backend *be, uint64_t ev)
{
}

static int host_event_record(struct vmm_backend *be, uint64_t ev, void *stream)
{
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	return 0;
}

static int host_stream_wait(struct vmm_backend *be, void *stream, uint64_t ev)
{
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	return 0;
}

static int host_event_sync(struct vmm_backend *be, uint64_t ev)
{
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	return 0;
}

static int host_event_query(struct vmm_backend *be, uint64_t ev, bool *done)
{
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	*done = true;
	return 0;
}

static int host_capturing(struct vmm_backend *be, void *stream, bool *on)
{
	*on = false;
	return 0;
}

static int host_capture_relax(struct vmm_backend *be, bool relax, int *old)
{
	if (relax)
		*old = 0;
	return 0;
}

const struct vmm_backend_ops vmm_host_ops = {
	.name = "host",
	.open = host_open,
	.close = host_close,
	.reserve_va = host_reserve_va,
	.release_va = host_release_va,
	.create_chunk = host_create_chunk,
	.destroy_chunk = host_destroy_chunk,
	.map = host_map,
	.unmap = host_unmap,
	.set_access = host_set_access,
	.synchronize = host_synchronize,
	.event_new = host_event_new,
	.event_free = host_event_free,
	.event_record = host_event_record,
	.stream_wait = host_stream_wait,
	.event_sync = host_event_sync,
	.event_query = host_event_query,
	.capturing = host_capturing,
	.capture_relax = host_capture_relax,
};
