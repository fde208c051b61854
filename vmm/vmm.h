/* SPDX-License-Identifier: MIT */
/*
 * vmm/vmm.h - the virtual memory layer (internal interface)
 *
 * One struct vmm_space per device: a single large virtual address
 * reservation cut into chunk-sized slots (the chunk size, a multiple of the
 * backend's granularity), physical segments of one or more chunks (one
 * driver allocation each, mapped and unmapped whole), a pool of segments
 * mapped nowhere, and a mapping table from each slot to the driver mapping
 * covering it.  vmm_map() gives a range segments as large as it can (up to
 * the segment size), so mapping costs few driver calls; a segment can only
 * be unmapped whole (see vmm_unmap()).
 *
 * Concurrency: every function that changes a space takes its mutex, so
 * writers are serialised.  vmm_lookup() and vmm_for_each_mapping() are RCU
 * readers (liburcu, urcu-bp flavour): they never block and may run
 * concurrently with any writer.  Chunk descriptors are freed only after a
 * grace period, so a reader that found one may read its fields.
 *
 * Addresses are uint64_t device addresses; they are always returned
 * through output parameters, never in-band.
 */
#ifndef STALLOC_VMM_VMM_H
#define STALLOC_VMM_VMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"

struct vmm_space;

/**
 * struct vmm_config - how to build a space
 * @backend: "host", "cuda" or "auto" (cuda when a driver and device are
 *	there, else host); NULL reads STALLOC_BACKEND, default "auto"
 * @device: device ordinal
 * @va_bytes: size of the reservation; 0: STALLOC_VA_SIZE or 4 times the
 *	device's memory
 * @chunk_bytes: physical chunk size, a multiple of the granularity; 0:
 *	STALLOC_CHUNK_SIZE or the granularity
 * @phys_limit: most physical bytes the space may hold; 0: STALLOC_PHYS_LIMIT
 *	or the device's memory
 * @host_device_bytes: host backend only: memory of the pretend device; 0:
 *	STALLOC_HOST_MEM or 16 GiB
 * @host_granularity: host backend only: granularity; 0:
 *	STALLOC_HOST_GRANULARITY or 2 MiB
 * @segment_bytes: most bytes in one segment (one driver allocation) that
 *	vmm_map() makes, rounded down to chunks; 0: STALLOC_SEGMENT_SIZE or
 *	20 MiB; the chunk size gives one chunk per segment
 * @peers: devices besides @device that get access to every mapping:
 *	"all" (every device that can access this one), "none", or a comma
 *	list of ordinals; NULL reads STALLOC_PEERS, default "all"
 */
struct vmm_config {
	const char *backend;
	int device;
	uint64_t va_bytes;
	uint64_t chunk_bytes;
	uint64_t phys_limit;
	uint64_t host_device_bytes;
	uint64_t host_granularity;
	uint64_t segment_bytes;
	const char *peers;
};

/**
 * struct vmm_stats - counters of one space
 * @chunks_created: physical chunks created since the space was made
 * @chunks_destroyed: physical chunks released to the driver
 * @chunks_live: chunks that exist now (mapped or pooled)
 * @chunks_pooled: chunks that exist but are mapped nowhere
 * @bytes_mapped: bytes of the reservation mapped now
 * @bytes_mapped_peak: most bytes ever mapped at once
 * @phys_bytes: bytes of physical memory held now (chunks_live * chunk)
 * @phys_bytes_peak: most physical bytes ever held at once
 * @segs_created: segments (driver allocations) created
 * @segs_destroyed: segments released to the driver
 * @segs_live: segments that exist now
 * @mappings: driver mappings now (a segment mapped at two places counts 2)
 * @calls: driver calls by kind (enum vmm_call)
 * @call_failures: failed driver calls by kind
 */
struct vmm_stats {
	uint64_t chunks_created;
	uint64_t chunks_destroyed;
	uint64_t chunks_live;
	uint64_t chunks_pooled;
	uint64_t bytes_mapped;
	uint64_t bytes_mapped_peak;
	uint64_t phys_bytes;
	uint64_t phys_bytes_peak;
	uint64_t segs_created;
	uint64_t segs_destroyed;
	uint64_t segs_live;
	uint64_t mappings;
	uint64_t calls[VMM_CALL_NR];
	uint64_t call_failures[VMM_CALL_NR];
};

/**
 * struct vmm_translation - what vmm_lookup() finds for an address
 * @chunk_id: the physical chunk's id (unique in its space, from 1)
 * @handle: the backend's handle of the chunk
 * @chunk_offset: offset of the address inside the chunk
 * @slot_va: start of the chunk-sized slot holding the address
 * @seg_va: start of the driver mapping (a whole segment) holding it
 * @seg_bytes: size of that mapping: the least that can be unmapped there
 */
struct vmm_translation {
	uint64_t chunk_id;
	uint64_t handle;
	uint64_t chunk_offset;
	uint64_t slot_va;
	uint64_t seg_va;
	uint64_t seg_bytes;
};

/**
 * struct vmm_mapping - one run of the mapping table (vmm_for_each_mapping)
 * @va: start of the run
 * @bytes: length of the run
 * @first_chunk_id: chunk mapped at @va
 * @nr_chunks: chunks in the run (consecutive slots, each with a chunk)
 * @contiguous_ids: true if the run's chunk ids are consecutive
 * @nr_segs: driver mappings (segments) in the run
 */
struct vmm_mapping {
	uint64_t va;
	uint64_t bytes;
	uint64_t first_chunk_id;
	uint64_t nr_chunks;
	bool contiguous_ids;
	uint64_t nr_segs;
};

/* Flag for vmm_unmap(), vmm_remap(): the caller has synchronised. */
#define VMM_SYNCED 0x1
/* vmm_map_flags(): new memory in segments of one chunk each */
#define VMM_FINE 0x2
/*
 * vmm_map_flags(): no segment of its own for the range's end chunks (the
 * caller never unmaps the range but whole): fewer, larger segments
 */
#define VMM_WHOLE 0x4

int vmm_space_create(const struct vmm_config *cfg, struct vmm_space **out);
/*
 * Synchronise, unmap everything, release every chunk and the reservation.
 * No other call on @s, reader or writer, may run during or after it.
 */
void vmm_space_destroy(struct vmm_space *s);

/*
 * True in a process forked from the one that made @s: CUDA state does not
 * survive fork, so every call on @s there fails with -ECHILD (without
 * taking any lock a parent thread may have held at fork) and
 * vmm_space_destroy() only frees host memory.
 */
bool vmm_forked(const struct vmm_space *s);
/*
 * In a forked child, right after fork (the caller knows it is one): with
 * the host backend and
 * STALLOC_HOST_FORK=copy, replace every mapping the child inherited (shared
 * with the parent) by a private copy, so that the child reads what the
 * parent had and its writes stay its own.  Nothing otherwise.  No lock, no
 * malloc: for an atfork child handler.
 */
void vmm_fork_child_copy(struct vmm_space *s);

/* Geometry: start and size of the reservation, chunk size, backend. */
uint64_t vmm_base(const struct vmm_space *s);
uint64_t vmm_size(const struct vmm_space *s);
size_t vmm_chunk_bytes(const struct vmm_space *s);
size_t vmm_granularity(const struct vmm_space *s);
/*
 * Physical bytes held now.  The caller serialises with the space's writers
 * (the runtime reads it under its device lock, the only place it maps).
 */
uint64_t vmm_phys_bytes(const struct vmm_space *s);
/* Bytes mapped now (same rule). */
uint64_t vmm_mapped_bytes(const struct vmm_space *s);
/* Most bytes in one segment vmm_map() makes. */
uint64_t vmm_segment_bytes(const struct vmm_space *s);
/* Devices granted access besides the owner: bit d for device d. */
uint64_t vmm_peer_mask(const struct vmm_space *s);
int vmm_device(const struct vmm_space *s);
const char *vmm_backend_name(const struct vmm_space *s);
uint64_t vmm_phys_limit(const struct vmm_space *s);
uint64_t vmm_device_bytes(const struct vmm_space *s);
/*
 * Change the physical limit.  Memory held above a lowered limit stays; new
 * mappings fail with -ENOMEM until enough is given back.
 */
void vmm_set_phys_limit(struct vmm_space *s, uint64_t bytes);

/*
 * Map physical segments over the chunk-aligned range [va, va + bytes) and
 * make it accessible (one access call for the range).  Pooled segments that
 * fit are used first (largest first), the rest gets new segments of up to
 * the segment size; a pooled segment too large for any request is released
 * when the physical limit needs the room.  All or nothing: on failure
 * nothing was mapped.  -EINVAL for a range outside the
 * reservation or not chunk aligned, -EBUSY if part of it is mapped, -ENOMEM
 * past the physical limit, -EIO (or the driver's code) for a driver failure.
 */
int vmm_map(struct vmm_space *s, uint64_t va, uint64_t bytes);
/*
 * vmm_map() with @flags: VMM_FINE makes the new memory one segment per
 * chunk (pooled segments that fit are still taken first), so that any of
 * its chunks can be unmapped alone later -- where what is idle changes
 * chunk by chunk.
 */
int vmm_map_flags(struct vmm_space *s, uint64_t va, uint64_t bytes,
		  unsigned int flags);

/*
 * Unmap [va, va + bytes), which must be wholly mapped; segments mapped
 * nowhere else go back to the pool.  Unless VMM_SYNCED is given, the device
 * is synchronised first (CUDA does not wait for kernels before unmapping).
 * -EINVAL if part of the range is not mapped (nothing changes).  A segment
 * can only be unmapped whole: the mappings lying wholly inside the range are
 * unmapped, one reaching past either end stays mapped and the call returns
 * -EBUSY (after unmapping the others; nothing changes if no mapping lies
 * wholly inside).  vmm_lookup() tells where a mapping starts and ends.  A
 * driver failure part way leaves the table describing exactly what is
 * still mapped.
 */
int vmm_unmap(struct vmm_space *s, uint64_t va, uint64_t bytes,
	      unsigned int flags);

/*
 * Map whatever is not mapped yet of the chunks under [va, va + bytes) (any
 * alignment; the chunks around it are covered), one vmm_map() per
 * unmapped run; *@mapped (if not NULL) gets the bytes it mapped.  Cheap
 * when all is mapped already (one RCU read-side section, a load per
 * chunk).  On failure the runs mapped before stay mapped (whole, usable
 * chunks) and the error is vmm_map()'s.
 */
int vmm_map_missing(struct vmm_space *s, uint64_t va, uint64_t bytes,
		    uint64_t *mapped);
/* The same, each unmapped run with vmm_map_flags(@flags). */
int vmm_map_missing_flags(struct vmm_space *s, uint64_t va, uint64_t bytes,
			  unsigned int flags, uint64_t *mapped);

/*
 * Register @fn as the space's shrinker: vmm_map_missing() calls it, in its
 * caller's context and without the space's lock, before it maps memory
 * that would take the bytes mapped @over bytes past the physical high
 * water (the peak of physical bytes held), with the chunk-aligned range it
 * is about to map.  The shrinker may unmap idle memory elsewhere (with
 * vmm_unmap_present()), whose chunks the mapping then reuses instead of
 * new ones.  NULL: none (the default).
 */
void vmm_set_shrinker(struct vmm_space *s,
		      void (*fn)(void *ctx, uint64_t va, uint64_t bytes,
				 uint64_t over),
		      void *ctx);

/*
 * Let the physical high water rise to @bytes without calling the
 * shrinker: it is called only for a mapping that would take the bytes
 * mapped past both the high water and @bytes (0, the default: the high
 * water alone).
 */
void vmm_set_shrink_floor(struct vmm_space *s, uint64_t bytes);

/*
 * The reverse: unmap every mapping lying wholly inside [va, va + bytes)
 * (chunks only partly inside, unmapped slots and mappings reaching past
 * either end are left alone), after one device synchronisation unless
 * VMM_SYNCED (none when nothing is to be unmapped).  *@released gets the
 * bytes unmapped, also when a driver failure stops it part way (the error
 * is returned; the table stays exact).
 */
int vmm_unmap_present(struct vmm_space *s, uint64_t va, uint64_t bytes,
		      unsigned int flags, uint64_t *released);
/* Would vmm_unmap_present() unmap anything of [va, va + bytes)? */
bool vmm_any_present(struct vmm_space *s, uint64_t va, uint64_t bytes);

/*
 * Move the chunks mapped at [from, from + bytes) to [to, to + bytes) without
 * copying: same physical pages, new addresses.  The ranges must not
 * overlap; the destination must be unmapped; the source must consist of
 * whole segment mappings (-EINVAL otherwise).  Synchronises first unless
 * VMM_SYNCED.  All or nothing.
 */
int vmm_remap(struct vmm_space *s, uint64_t from, uint64_t to, uint64_t bytes,
	      unsigned int flags);

/*
 * Map the chunks already mapped at [src, src + bytes) also at
 * [dst, dst + bytes) (both addresses show the same bytes).  The source
 * must consist of whole segment mappings (-EINVAL otherwise).  All or
 * nothing.
 */
int vmm_alias(struct vmm_space *s, uint64_t src, uint64_t dst, uint64_t bytes);

/* RCU reader: what is mapped at @va.  false if nothing is. */
bool vmm_lookup(struct vmm_space *s, uint64_t va, struct vmm_translation *t);

/* True if every byte of [va, va + bytes) is mapped (RCU reader). */
bool vmm_is_mapped(struct vmm_space *s, uint64_t va, uint64_t bytes);

/*
 * RCU reader: call @fn for each run of mapped slots, in address order; stop
 * and return @fn's value when it returns nonzero.
 */
int vmm_for_each_mapping(struct vmm_space *s,
			 int (*fn)(const struct vmm_mapping *m, void *arg),
			 void *arg);

/*
 * Release pooled segments to the driver, least recently used first, until
 * at most @keep_bytes stay pooled.
 */
int vmm_trim(struct vmm_space *s, uint64_t keep_bytes);

/* Wait for work on @stream (NULL: the whole device). */
int vmm_sync(struct vmm_space *s, void *stream);

/*
 * Events, for handing memory used on one stream to another without
 * stalling the host: vmm_event_record() marks the work queued on @stream so
 * far; vmm_stream_wait() makes @stream's later work wait for it, on the
 * device.  An event is a backend handle (never 0 once made).
 */
int vmm_event_new(struct vmm_space *s, uint64_t *ev);
void vmm_event_free(struct vmm_space *s, uint64_t ev);
int vmm_event_record(struct vmm_space *s, uint64_t ev, void *stream);
int vmm_stream_wait(struct vmm_space *s, void *stream, uint64_t ev);
/*
 * Wait on the host for @ev's last recorded state: the work of the one
 * stream it was recorded on, never the whole device (counted as "wait").
 */
int vmm_event_sync(struct vmm_space *s, uint64_t ev);
/*
 * *@done: is @ev's last recorded state complete?  Never waits (counted as
 * "order", like recording an event).
 */
int vmm_event_done(struct vmm_space *s, uint64_t ev, bool *done);

/* Is @stream being captured into a CUDA graph?  (false when unknown) */
bool vmm_capturing(struct vmm_space *s, void *stream);
/*
 * The calling thread's capture mode: relaxed (@relax true, *@old gets the
 * former mode), so that mapping memory during a capture is allowed, or
 * back to *@old (@relax false).
 */
int vmm_capture_relax(struct vmm_space *s, bool relax, int *old);

void vmm_get_stats(struct vmm_space *s, struct vmm_stats *st);
/* Start the peaks (mapped, physical) again from the current values. */
void vmm_reset_peaks(struct vmm_space *s);
const char *vmm_call_name(enum vmm_call call);

#endif /* STALLOC_VMM_VMM_H */
