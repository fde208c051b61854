/* SPDX-License-Identifier: MIT */
/*
 * vmm/backend.h - the contract between the vmm core and a memory backend
 *
 * A backend provides, for one device, the five things CUDA virtual memory
 * management provides: virtual address reservations, physical chunks,
 * mapping a whole chunk at an address, access rights on mapped ranges, and
 * synchronisation with work in flight.  The vmm core (vmm/space.c) owns all
 * policy: it validates every argument, counts every call and keeps the
 * mapping table; a backend only performs the operation.
 *
 * Preconditions the core guarantees to every op (a backend may rely on
 * them and need not check them again):
 *   - the instance was opened successfully and is not closed;
 *   - calls on one instance are serialised by the caller, except
 *     ->synchronize, ->capturing and ->capture_relax, which may run
 *     concurrently with anything;
 *   - sizes are nonzero multiples of the granularity ->open reported;
 *   - addresses passed to ->map, ->unmap and ->set_access lie inside a range
 *     this instance reserved and are granularity aligned;
 *   - ->map maps a chunk (a segment of the core) whole (size == the size
 *     it was created with) at an unmapped address; ->unmap is given
 *     exactly one whole earlier mapping;
 *   - ->set_access covers only mapped addresses (it may span several
 *     adjacent mappings);
 *   - ->release_va is called only once every mapping inside is unmapped;
 *   - ->destroy_chunk may be called while the chunk is still mapped
 *     elsewhere only if the backend sets VMM_BE_DEFERRED_RELEASE.
 *
 * Every op returns 0 or a negative errno; on failure it has no effect and
 * it has recorded a message with sa_error() naming the call, the device and
 * the cause.  The driver's own error is kept in be->last_driver_error for
 * callers that want it (tests, the admin tool).
 */
#ifndef STALLOC_VMM_BACKEND_H
#define STALLOC_VMM_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct vmm_backend;

/* The kinds of driver work the core counts (enum vmm_call). */
enum vmm_call {
	VMM_CALL_RESERVE,
	VMM_CALL_RELEASE_VA,
	VMM_CALL_CREATE,
	VMM_CALL_DESTROY,
	VMM_CALL_MAP,
	VMM_CALL_UNMAP,
	VMM_CALL_SET_ACCESS,
	VMM_CALL_SYNC,
	VMM_CALL_ORDER,
	VMM_CALL_WAIT,
	VMM_CALL_NR
};

/* Backend capability flags. */
#define VMM_BE_DEFERRED_RELEASE 0x1 /* a mapped chunk may be destroyed */

/**
 * struct vmm_backend_info - what a backend reports when it opens a device
 * @name: "cuda" or "host"
 * @granularity: chunk and alignment granularity in bytes (a power of two)
 * @device_bytes: physical memory of the device
 * @flags: VMM_BE_* capabilities
 */
struct vmm_backend_info {
	const char *name;
	size_t granularity;
	uint64_t device_bytes;
	unsigned int flags;
};

/**
 * struct vmm_backend_ops - operations of one backend
 * @open: prepare device @be->device; fill @be->info.  May load a driver.
 * @close: undo @open.  Everything reserved or created is gone already.
 * @reserve_va: reserve @size bytes of address space aligned to @align (a
 *	power of two multiple of the granularity); *@va gets the start.
 * @release_va: give back a whole range @reserve_va returned.
 * @create_chunk: create @size bytes of physical memory; *@handle names it.
 * @destroy_chunk: release the physical memory of @handle.
 * @map: map chunk @handle (of @size bytes) at @va, with no access rights.
 * @unmap: unmap the single mapping [@va, @va + @size).
 * @set_access: allow the device, its peers in @be->peer_mask (and, on the
 *	host backend, the process) to read and write [@va, @va + @size), in
 *	one call.  Needed after every @map.
 * @synchronize: wait until work queued on @stream (NULL: all work on the
 *	device) has finished, so that memory it used may be unmapped.
 * @event_new: make an event for ordering streams (no timing); *@ev names it.
 * @event_free: destroy an event @event_new made.
 * @event_record: record @ev on @stream: it completes once the work queued
 *	on @stream so far is done.  Re-recording moves it to a later point;
 *	waits issued before keep the state they saw.
 * @stream_wait: make @stream's later work wait, on the device, for @ev's
 *	last recorded state; the host does not wait.
 * @event_sync: wait on the host until @ev's last recorded state is
 *	complete (the work of one stream only, not the whole device).
 * @event_query: *@done: is @ev's last recorded state complete now?  Never
 *	waits; "not yet" is no error.
 * @capturing: true (*@on) when @stream is being captured into a CUDA
 *	graph.  Safe to call during a capture.
 * @capture_relax: for the calling thread, make driver calls that are
 *	unsafe during a capture (mapping memory) allowed (@relax true;
 *	*@old gets the former mode) or restore mode *@old (@relax false).
 */
struct vmm_backend_ops {
	const char *name;
	int (*open)(struct vmm_backend *be);
	void (*close)(struct vmm_backend *be);
	int (*reserve_va)(struct vmm_backend *be, size_t size, size_t align,
			  uint64_t *va);
	int (*release_va)(struct vmm_backend *be, uint64_t va, size_t size);
	int (*create_chunk)(struct vmm_backend *be, size_t size,
			    uint64_t *handle);
	int (*destroy_chunk)(struct vmm_backend *be, uint64_t handle);
	int (*map)(struct vmm_backend *be, uint64_t va, size_t size,
		   uint64_t handle);
	int (*unmap)(struct vmm_backend *be, uint64_t va, size_t size);
	int (*set_access)(struct vmm_backend *be, uint64_t va, size_t size);
	int (*synchronize)(struct vmm_backend *be, void *stream);
	int (*event_new)(struct vmm_backend *be, uint64_t *ev);
	void (*event_free)(struct vmm_backend *be, uint64_t ev);
	int (*event_record)(struct vmm_backend *be, uint64_t ev, void *stream);
	int (*stream_wait)(struct vmm_backend *be, void *stream, uint64_t ev);
	int (*event_sync)(struct vmm_backend *be, uint64_t ev);
	int (*event_query)(struct vmm_backend *be, uint64_t ev, bool *done);
	int (*capturing)(struct vmm_backend *be, void *stream, bool *on);
	int (*capture_relax)(struct vmm_backend *be, bool relax, int *old);
};

/**
 * struct vmm_backend - one opened backend instance (one per device)
 * @ops: the backend
 * @device: device ordinal
 * @info: filled by @ops->open
 * @host_device_bytes: host backend: device memory to pretend (0: default)
 * @host_granularity: host backend: granularity (0: default 2 MiB)
 * @host_fork_copy: host backend: a forked child keeps a private copy of
 *	the memory (STALLOC_HOST_FORK=copy) instead of none of it
 * @peers: which other devices to grant access: NULL or "all" (those that
 *	can access this one), "none", or a comma list of ordinals
 * @peer_mask: filled by @ops->open: devices granted access besides
 *	@device (bit d for device d)
 * @priv: backend-private state
 * @last_driver_error: driver status of the last failing call (CUresult for
 *	cuda, errno for host), 0 if none
 */
struct vmm_backend {
	const struct vmm_backend_ops *ops;
	int device;
	struct vmm_backend_info info;
	uint64_t host_device_bytes;
	size_t host_granularity;
	bool host_fork_copy;
	const char *peers;
	uint64_t peer_mask;
	void *priv;
	int last_driver_error;
};

extern const struct vmm_backend_ops vmm_host_ops;
extern const struct vmm_backend_ops vmm_cuda_ops;

/* True when the CUDA driver can be loaded and has at least one device. */
bool vmm_cuda_available(void);

#endif /* STALLOC_VMM_BACKEND_H */
