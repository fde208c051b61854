/* SPDX-License-Identifier: MIT */
/*
 * stalloc.h - public interface of libstalloc
 *
 * stalloc is a GPU memory manager for deep-learning training: it records the
 * allocation requests of a few iterations, plans offline where every tensor
 * lives, and at run time hands out planned addresses from CUDA virtual
 * memory.  This header is the runtime's public C API (stalloc/planner.h and
 * stalloc/trace.h add the planner and trace reading); it is valid C99 and
 * C++.
 *
 * Error conventions
 * -----------------
 * Functions that act return 0 on success and a negative errno value on
 * failure (-EINVAL for bad arguments, -ENOMEM when memory or the physical
 * limit runs out, -ENODEV when no usable driver or device is there, -EIO for
 * a driver failure that fits no other code).  Predicates return bool.  A
 * device address is never returned in-band: it comes back through an output
 * parameter, so 0 stays a legal address.  After a failure, the calling
 * thread's stalloc_last_error() names what failed and where.
 */
#ifndef STALLOC_STALLOC_H
#define STALLOC_STALLOC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * STALLOC_VERSION_MAJOR - major version of these headers (the soname's)
 */
#define STALLOC_VERSION_MAJOR 0
/**
 * STALLOC_VERSION_MINOR - minor version of these headers
 */
#define STALLOC_VERSION_MINOR 1
/**
 * STALLOC_VERSION_PATCH - patch level of these headers
 */
#define STALLOC_VERSION_PATCH 0

/**
 * STALLOC_VERSION_NUM() - pack a version into one comparable integer
 * @major: major version
 * @minor: minor version
 * @patch: patch level
 */
#define STALLOC_VERSION_NUM(major, minor, patch) \
	(((major)*10000) + ((minor)*100) + (patch))

/**
 * STALLOC_VERSION - the version of the headers being compiled against
 *
 * STALLOC_VERSION_NUM() of the three numbers above; compare it with
 * stalloc_version().
 */
#define STALLOC_VERSION                                                   \
	STALLOC_VERSION_NUM(STALLOC_VERSION_MAJOR, STALLOC_VERSION_MINOR, \
			    STALLOC_VERSION_PATCH)

#if defined(__GNUC__)
#define STALLOC_API __attribute__((visibility("default")))
#else
#define STALLOC_API
#endif

/**
 * stalloc_version() - version of the library actually loaded
 *
 * Return: STALLOC_VERSION of the library at run time, which may differ from
 * the headers an application was built with.
 */
STALLOC_API int stalloc_version(void);

/**
 * stalloc_version_string() - the loaded library's version as "MAJOR.MINOR.PATCH"
 *
 * Return: a static string.
 */
STALLOC_API const char *stalloc_version_string(void);

/**
 * stalloc_last_error() - what the calling thread's last failure was
 *
 * Every function that fails records a one-line message naming the operation,
 * the object (device, address, file and line) and the cause, e.g.
 * "cuda: cuMemMap(0x7f0000000000, 2097152) on device 0: CUDA_ERROR_OUT_OF_MEMORY
 * (out of memory)".
 *
 * Return: the message, or "" when nothing failed on this thread yet.  The
 * string stays valid until the thread's next stalloc call.
 */
STALLOC_API const char *stalloc_last_error(void);

/**
 * stalloc_strerror() - describe a negative errno value returned by stalloc
 * @err: a value returned by a stalloc function
 *
 * Return: a static description; never NULL.
 */
STALLOC_API const char *stalloc_strerror(int err);

/**
 * enum stalloc_log_level - how much libstalloc prints to stderr
 * @STALLOC_LOG_NONE: nothing
 * @STALLOC_LOG_ERROR: failures the caller may not see otherwise (default)
 * @STALLOC_LOG_WARN: also fallbacks and degraded modes
 * @STALLOC_LOG_INFO: also set-up and tear-down of devices
 * @STALLOC_LOG_DEBUG: also every driver call that fails, and more
 *
 * The initial level comes from the environment variable STALLOC_LOG
 * (none, error, warn, info, debug).
 */
enum stalloc_log_level {
	STALLOC_LOG_NONE = 0,
	STALLOC_LOG_ERROR,
	STALLOC_LOG_WARN,
	STALLOC_LOG_INFO,
	STALLOC_LOG_DEBUG,
};

/**
 * stalloc_set_log_level() - change what libstalloc prints
 * @level: the new level
 *
 * Return: the previous level.
 */
STALLOC_API enum stalloc_log_level
stalloc_set_log_level(enum stalloc_log_level level);

/**
 * stalloc_parse_size() - read a byte count as the environment variables do
 * @s: decimal or 0x hex, with an optional K, M, G or T suffix (binary
 *	units; "KiB", "KB" and "B" are also taken)
 * @out: the value
 *
 * Return: 0, or -EINVAL for anything else (a sign, blanks, overflow).
 */
STALLOC_API int stalloc_parse_size(const char *s, uint64_t *out);

/* ------------------------------------------------------------ runtime */

/*
 * The allocator a training job loads.  The first request for a device
 * creates its state: a vmm address space (one large reservation), and in it
 * the dynamic region, which grows by mapping chunks and shrinks by
 * unmapping them.  STALLOC_MODE picks the mode: "off" (the default: the
 * dynamic allocator only), "trace" (also record every request to
 * STALLOC_TRACE, a path pattern with %p pid, %d device, %r RANK; default
 * "stalloc-%p-%d.trace"), "plan" (serve the plan file STALLOC_PLAN) or
 * "auto" (trace, plan in-process, switch).  See Documentation/mapper.rst.
 */

/**
 * struct stalloc_stats - what one device's allocator holds and did
 * @allocated: bytes handed out and not yet freed (as requested)
 * @allocated_peak: most bytes handed out at once
 * @reserved: bytes of physical memory held from the device
 * @reserved_peak: most physical bytes held at once
 * @mapped: bytes of address space mapped
 * @mapped_peak: most bytes mapped at once
 * @plan_hits: requests served at their planned address
 * @plan_misses: requests the plan expected but that were served otherwise
 * @dynamic_bytes: bytes handed out by the dynamic allocator now
 * @allocs: requests served
 * @frees: frees done
 * @bad_frees: frees of pointers stalloc did not hand out (or freed twice)
 * @oom: requests that failed for lack of memory
 * @driver_calls: driver calls made (all kinds)
 * @alloc_retries: requests that failed at first and were retried after
 *	cached memory was given back (PyTorch's num_alloc_retries)
 * @allocated_total: bytes ever handed out (as requested)
 * @freed_total: bytes ever freed
 * @device_syncs: device-wide synchronisations (cuCtxSynchronize) made:
 *	out of memory with several streams, a planned slot whose last users
 *	had not checkpointed, a trim that names no stream -- never on the
 *	ordinary allocation or free path
 * @host_waits: host waits for one stream's work (cuEventSynchronize on
 *	its checkpoint), before freed memory is unmapped
 * @driver_allocs: physical allocations made (cuMemCreate handles: one per
 *	segment of one or more chunks)
 * @driver_alloc_bytes: bytes they held, in all (made since the start,
 *	released or not)
 */
struct stalloc_stats {
	uint64_t allocated;
	uint64_t allocated_peak;
	uint64_t reserved;
	uint64_t reserved_peak;
	uint64_t mapped;
	uint64_t mapped_peak;
	uint64_t plan_hits;
	uint64_t plan_misses;
	uint64_t dynamic_bytes;
	uint64_t allocs;
	uint64_t frees;
	uint64_t bad_frees;
	uint64_t oom;
	uint64_t driver_calls;
	uint64_t alloc_retries;
	uint64_t allocated_total;
	uint64_t freed_total;
	uint64_t device_syncs;
	uint64_t host_waits;
	uint64_t driver_allocs;
	uint64_t driver_alloc_bytes;
};

/**
 * stalloc_malloc() - allocate device memory (PyTorch's pluggable "alloc")
 * @size: bytes; 0 returns NULL
 * @device: device ordinal
 * @stream: the CUDA stream the memory will be used on (NULL: default)
 *
 * Return: the address, or NULL when out of memory (after trimming cached
 * memory and retrying; one message says why, with the device's stats) or on
 * bad arguments (stalloc_last_error() says which).
 */
STALLOC_API void *stalloc_malloc(size_t size, int device, void *stream);

/**
 * stalloc_free() - free what stalloc_malloc() returned (PyTorch's "free")
 * @ptr: the address (NULL is ignored)
 * @size: the size given at allocation (checked when nonzero)
 * @device: its device
 * @stream: the stream it was last used on
 *
 * A pointer stalloc did not hand out, or one already freed, is reported
 * (counted in bad_frees) and left alone.
 */
STALLOC_API void stalloc_free(void *ptr, size_t size, int device, void *stream);

/**
 * stalloc_init() - PyTorch's "init" hook
 * @device_count: the number of devices
 *
 * Only logged: each device's state is made on its first request.
 */
STALLOC_API void stalloc_init(int device_count);

/**
 * stalloc_empty_cache() - give cached memory back (PyTorch's "empty_cache")
 *
 * On every device used: empty slabs go back to the dynamic region, every
 * whole chunk inside a free block is unmapped, and the physical chunks are
 * released to the driver.  Nothing is unmapped while a graph pool is
 * active.
 */
STALLOC_API void stalloc_empty_cache(void);

/**
 * stalloc_memory_fraction() - cap a device's physical memory
 * @fraction: of the device's memory, in (0, 1]
 * @device: device ordinal
 *
 * PyTorch's "set_memory_fraction": applies at once to a device in use (to
 * its next mappings) and to one used later.  A bad value is reported and
 * ignored.
 */
STALLOC_API void stalloc_memory_fraction(double fraction, int device);

/**
 * stalloc_record_stream() - @ptr is also used on @stream
 * @ptr: an address stalloc_malloc() returned
 * @stream: another stream that uses it
 *
 * PyTorch's "record_stream": once @ptr is freed, its memory is handed out
 * to another stream only after @stream's work on it is done.  An address
 * stalloc did not hand out is reported and ignored.
 */
STALLOC_API void stalloc_record_stream(void *ptr, void *stream);

/**
 * stalloc_pool_begin() - allocate to a CUDA graph's private pool
 * @device: the device
 * @id0: the pool's id (PyTorch's MempoolId_t, first half)
 * @id1: its second half
 * @filter: does an allocation on @stream go to the pool (nonzero: yes); NULL
 *	sends every allocation on @device there
 * @ctx: @filter's first argument
 * @drop: called with @ctx when the pool stops being allocated to (may be
 *	NULL)
 *
 * Call it before the capture begins and stalloc_pool_end() once it ended:
 * memory allocated in between (on the streams @filter names) is the
 * graph's, reused only by the pool until stalloc_pool_release(); ordinary
 * memory freed during the capture is set aside until it ends; and while a
 * pool is active stalloc makes no capture-unsafe driver call (no sync, no
 * unmap, no event on the legacy stream).  The same id may be begun again
 * (graphs sharing a pool).
 *
 * Return: 0 or a negative errno (-EBUSY: the pool is already active;
 * -ENOMEM).
 */
STALLOC_API int stalloc_pool_begin(int device, uint64_t id0, uint64_t id1,
				   int (*filter)(void *ctx, void *stream),
				   void *ctx, void (*drop)(void *ctx));

/**
 * stalloc_pool_end() - the capture ended: stop allocating to the pool
 * @device: the device
 * @id0: the pool's id, first half
 * @id1: its second half
 *
 * Return: 0, or -ENOENT when the pool is not active.
 */
STALLOC_API int stalloc_pool_end(int device, uint64_t id0, uint64_t id1);

/**
 * stalloc_pool_release() - the graph is gone: its pool's memory goes back
 * @device: the device
 * @id0: the pool's id, first half
 * @id1: its second half
 *
 * The pool's free blocks go back at once, its live ones when freed; their
 * next user waits for the whole device first (replays ran on streams
 * stalloc never saw).
 *
 * Return: 0, or -ENOENT when there is no such pool.
 */
STALLOC_API int stalloc_pool_release(int device, uint64_t id0, uint64_t id1);

/**
 * stalloc_mark() - mark a point of the training loop
 * @label: one word; "iteration" starts an iteration
 */
STALLOC_API void stalloc_mark(const char *label);

/**
 * stalloc_owns() - is @ptr inside a device's reservation?
 * @ptr: any address
 * @device: device ordinal
 *
 * One range check, no lock: for programs that mix stalloc's memory with
 * another allocator's (the CPU preload library sends a free to glibc when
 * this says no).  True does not mean @ptr is allocated.
 *
 * Return: nonzero if @ptr lies in @device's reserved address range.
 */
STALLOC_API int stalloc_owns(const void *ptr, int device);

/**
 * stalloc_ctl_dir() - where this user's control sockets live
 * @buf: filled with the directory's path
 * @size: bytes at @buf
 *
 * $XDG_RUNTIME_DIR/stalloc, or /tmp/stalloc-UID.  Each process using
 * stalloc serves PID.sock there (STALLOC_CTL=0 turns it off); stallocctl
 * talks to it.  See Documentation/admin-guide.rst.
 *
 * Return: 0, or -ENAMETOOLONG.
 */
STALLOC_API int stalloc_ctl_dir(char *buf, size_t size);

/**
 * stalloc_stats() - one device's statistics
 * @device: device ordinal
 * @st: filled in
 *
 * Return: 0, -EINVAL for a bad device, -ENOENT if the device was never used.
 */
STALLOC_API int stalloc_stats(int device, struct stalloc_stats *st);

/**
 * struct stalloc_peak - where every reserved byte was at the reserved peak
 * @reserved: physical bytes held at the peak; the sum of the fields below
 *	from @pool_used to @cached
 * @requested: bytes the live allocations had asked for at that moment
 * @pool_used: planned slots live (and dynamic requests placed in the plan's
 *	free space), slot bytes
 * @pool_idle: the plan's pool mapped but under no live slot at that moment
 * @dyn_live: dynamic blocks allocated (slabs apart), block bytes
 * @dyn_warmup: requested bytes of the dynamic blocks made before the plan
 *	took over that were still live (the warm-up's leftovers; part of
 *	@dyn_live)
 * @slabs: slabs for small requests, whole
 * @dyn_free: the dynamic region mapped but in no allocated block: free
 *	blocks kept mapped, and the rounding of blocks to whole chunks
 * @cached: physical memory held but mapped nowhere (kept for reuse)
 * @allocs: allocations served when the peak was reached
 */
struct stalloc_peak {
	uint64_t reserved;
	uint64_t requested;
	uint64_t pool_used;
	uint64_t pool_idle;
	uint64_t dyn_live;
	uint64_t dyn_warmup;
	uint64_t slabs;
	uint64_t dyn_free;
	uint64_t cached;
	uint64_t allocs;
};

/**
 * stalloc_peak() - the peak accounting of one device
 * @device: device ordinal
 * @p: filled in: the breakdown taken when the reserved bytes last reached a
 *	new peak
 *
 * Return: 0, -EINVAL for a bad device, -ENOENT if the device was never used.
 */
STALLOC_API int stalloc_peak(int device, struct stalloc_peak *p);

/**
 * struct stalloc_option - one configuration variable, as documented
 * @name: the environment variable (``STALLOC_...``)
 * @type: "choice", "size" (bytes, K/M/G/T suffixes), "count", "bool"
 *	(0 or 1), "path" or "string"
 * @def: the default, in words
 * @range: the accepted values, in words
 * @scope: who reads it: "library", "host backend", "preload" (the
 *	LD_PRELOAD library), "torch" (the PyTorch shim) or "stalloc-import"
 * @help: what it does
 */
struct stalloc_option {
	const char *name;
	const char *type;
	const char *def;
	const char *range;
	const char *scope;
	const char *help;
};

/**
 * stalloc_options() - every configuration variable stalloc reads
 * @nr: set to their number
 *
 * The one option table (lib/options.c); the README's table and
 * Documentation/options.rst are generated from it (stalloc-options).
 *
 * Return: the table, in a fixed order; valid for the life of the process.
 */
STALLOC_API const struct stalloc_option *stalloc_options(size_t *nr);

/**
 * stalloc_option_size() - a size or count option's value
 * @name: the variable, one of stalloc_options()
 * @def: the value when it is unset or empty
 * @out: set to the value
 *
 * Return: 0, or -EINVAL (the message names the variable, the value and the
 * accepted range) for a malformed or out-of-range value or an unknown
 * @name; *@out is @def then.
 */
STALLOC_API int stalloc_option_size(const char *name, uint64_t def,
				    uint64_t *out);

/**
 * stalloc_option_string() - a choice, path or string option's value
 * @name: the variable, one of stalloc_options()
 *
 * A choice is checked against its values (case-insensitive) and returned
 * as spelled in the table.
 *
 * Return: the value, the default when unset (NULL when there is none), or
 * NULL with -EINVAL recorded (stalloc_last_error()) for a value outside
 * the accepted range or an unknown @name.
 */
STALLOC_API const char *stalloc_option_string(const char *name);

/**
 * stalloc_reset_peak() - start a device's peaks again from now
 * @device: device ordinal
 *
 * allocated_peak, reserved_peak and mapped_peak become the current values
 * (torch.cuda.reset_peak_memory_stats() under the Python helper).
 *
 * Return: 0, -EINVAL for a bad device, -ENOENT if the device was never used.
 */
STALLOC_API int stalloc_reset_peak(int device);

/**
 * stalloc_shutdown() - release every device's memory and state
 *
 * For tests and for programs that want to give everything back before they
 * exit.  No other stalloc call may run during it; the first request after
 * it starts afresh, reading the environment again.
 */
STALLOC_API void stalloc_shutdown(void);

#ifdef __cplusplus
}
#endif
#endif /* STALLOC_STALLOC_H */
