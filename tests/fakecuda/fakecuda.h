/* SPDX-License-Identifier: MIT */
/*
 * fakecuda.h - control interface of the fake CUDA driver (libcuda-fake.so)
 *
 * The fake driver implements, on host memory, the subset of the CUDA driver
 * API that stalloc's cuda backend uses, and enforces the driver's rules for
 * virtual memory management.  Tests reach these control functions with
 * dlsym() on the same handle the backend loaded (dlopen of the same path
 * returns the same handle), or by linking against the library.
 *
 * Call kinds are named by the driver entry point without version suffix,
 * e.g. "cuMemMap", "cuMemCreate", "cuCtxSynchronize".
 *
 * Environment, read at cuInit:
 *   FAKECUDA_DEVICES=N        number of devices (default 1, max 8)
 *   FAKECUDA_MEM=BYTES        memory per device (default 16 GiB; suffixes K M G)
 *   FAKECUDA_GRANULARITY=B    allocation granularity (default 2 MiB)
 *   FAKECUDA_NO_VMM=1         devices report no VMM support
 *   FAKECUDA_NO_RDMA=1        devices report no GPUDirect RDMA with VMM
 *                             (CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_
 *                             CUDA_VMM_SUPPORTED 0; default 1)
 *   FAKECUDA_NO_POSIX_FD=1    devices report no POSIX fd handle type
 *   FAKECUDA_PEER=SPEC        which device can access which one's memory
 *                             (cuDeviceCanAccessPeer, cuMemSetAccess):
 *                             "all" (default), "none", or a comma list of
 *                             A:B pairs, "device A can access device B"
 *   FAKECUDA_FAIL=CALL:N:ERR  make the Nth call of CALL fail with CUresult ERR
 *                             (decimal); several entries separated by commas;
 *                             CALL "*" counts calls of any kind, N "*" makes
 *                             every call of CALL fail.  Counting starts at the
 *                             first cuInit, which is itself counted.
 * Read at each violation:
 *   FAKECUDA_ABORT=1          abort() on a rule violation (for a backtrace)
 *
 * cuMemSetAccess granting a device that cannot access the memory's owner
 * fails with CUDA_ERROR_INVALID_DEVICE and changes nothing, like the driver
 * (it is not counted as a violation).
 * Device memory is not host memory: the host faults (SIGSEGV) on a load or
 * store at a device address, mapped or not, as on a real GPU.  Tests move
 * bytes with cuMemcpyHtoD/DtoH/DtoD, cuMemcpy and cuMemsetD8, which need a
 * current context and a range mapped without a hole with the context's
 * device granted access (read for a source, read-write for a destination);
 * anything else returns CUDA_ERROR_INVALID_VALUE and is a violation.
 *
 * Every rule violation is counted (fakecuda_violations()) and printed to
 * stderr as "fakecuda: violation: <call>: <what>".  An injected failure has
 * no side effect: the call does nothing and returns the error.
 * cuGetErrorString/cuGetErrorName never fail on purpose; they and
 * cuGetProcAddress are counted under their own names but not in
 * fakecuda_calls_total() nor by fakecuda_fail_nth_any().
 */
#ifndef FAKECUDA_H
#define FAKECUDA_H

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Make the nth (1-based, counted from now) call of @call return @err.
 * The fakecuda_fail_* functions return 0, or -1 for an unknown call name,
 * a call that is never failed on purpose, nth or err 0 (nth variants), or
 * no room for another rule (32 pending at most).
 */
int fakecuda_fail_nth(const char *call, unsigned long nth, int err);
/* Make every call of @call fail with @err (0 clears) from now on. */
int fakecuda_fail_always(const char *call, int err);
/* Make the nth driver call of any kind (1-based, counted from now) fail. */
int fakecuda_fail_nth_any(unsigned long nth, int err);
/* Clear all injected faults. */
void fakecuda_fail_clear(void);
/* Number of calls of @call made so far (failed ones included). */
unsigned long fakecuda_calls(const char *call);
/* Number of driver calls of any kind made so far. */
unsigned long fakecuda_calls_total(void);
/* Zero the call counters (not the live objects). */
void fakecuda_calls_reset(void);
/* Objects alive now: reservations, physical handles, mappings, contexts
 * retained, events, streams. */
unsigned long fakecuda_live_reservations(void);
unsigned long fakecuda_live_handles(void);
unsigned long fakecuda_live_mappings(void);
unsigned long fakecuda_live_primary_retains(void);
unsigned long fakecuda_live_streams(void);
unsigned long fakecuda_live_events(void);
/* Bytes of physical memory in live handles on @dev. */
unsigned long long fakecuda_phys_bytes(int dev);
/* Number of rule violations detected (each also printed to stderr). */
unsigned long fakecuda_violations(void);
/*
 * With @on nonzero, the calling thread's driver calls are set aside from
 * the bookkeeping until it calls this again with 0: they are not counted
 * (fakecuda_calls, fakecuda_calls_total) and never failed on purpose, but
 * every rule still applies to them.  Test fixtures use it to read and
 * write device memory without shifting a fault sweep or a call count.
 */
void fakecuda_aside(int on);

/*
 * Hold @stream (a CUstream; NULL or CU_STREAM_LEGACY: the calling thread's
 * current context's default stream) busy, or with @busy 0 let its work
 * complete.  While held, events recorded on it afterwards stay pending
 * (cuEventQuery: CUDA_ERROR_NOT_READY) and cuStreamQuery reports
 * CUDA_ERROR_NOT_READY; cuStreamSynchronize on it, cuEventSynchronize on
 * such an event, cuCtxSynchronize in its context, cuStreamDestroy or
 * releasing the context's last retain complete the work and end the hold.
 * Returns 0, or -1 if @stream names no live stream.
 */
int fakecuda_stream_hold(void *stream, int busy);

/* Let device @dev access device @owner's memory (@can 1) or not (0). */
int fakecuda_set_peer(int dev, int owner, int can);
/*
 * Access flags (CUmemAccess_flags) device @dev has on the mapping holding
 * @va, or -1 if @va is not mapped.
 */
int fakecuda_access_flags(unsigned long long va, int dev);
/*
 * Properties of the handle mapped at @va: gpuDirectRDMACapable,
 * requestedHandleTypes, and the device of the context current when it
 * was created (-1: none).  0, or -1 if @va is not mapped.
 */
int fakecuda_handle_props(unsigned long long va, int *rdma,
			  unsigned int *handle_types, int *ctx_dev);
/*
 * Streams.  NULL and CU_STREAM_LEGACY are the legacy default stream of the
 * current context, CU_STREAM_PER_THREAD the calling thread's per-thread
 * default stream of it: distinct streams.  The legacy stream is ordered
 * implicitly with every blocking stream of its context (and so is work on
 * it with theirs); the per-thread one and streams made with cuStreamCreate
 * are ordered with the legacy stream only (NON_BLOCKING ones not even).
 * A destroyed stream or event: CUDA_ERROR_INVALID_HANDLE; one of a released
 * context: CUDA_ERROR_CONTEXT_IS_DESTROYED; recording an event on a stream
 * of another context: CUDA_ERROR_INVALID_HANDLE; all violations.
 *
 * Stream capture (cuStreamBeginCapture_v2, cuStreamEndCapture,
 * cuStreamIsCapturing, cuStreamGetCaptureInfo _v2/_v3, cuGraphDestroy,
 * cuThreadExchangeStreamCaptureMode) follows the driver's rules:
 *   - Potentially unsafe calls (cuCtxSynchronize, cuStreamSynchronize,
 *     cuEventSynchronize, cuMemUnmap, cuMemRelease) fail with
 *     CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED while the calling thread has a
 *     capture not begun in RELAXED mode, or, if its mode
 *     (cuThreadExchangeStreamCaptureMode, default GLOBAL) is GLOBAL, while
 *     any thread has a GLOBAL capture;
 *   - synchronising or querying a capturing stream, or querying or
 *     synchronising an event recorded in a capture:
 *     CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
 *   - work on the legacy stream (records, waits, synchronous copies,
 *     fakecuda_launch) while a blocking stream of its context captures:
 *     CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
 *   - a capturing stream waiting for an event recorded outside the capture:
 *     CUDA_ERROR_STREAM_CAPTURE_ISOLATION (of another capture:
 *     CUDA_ERROR_STREAM_CAPTURE_MERGE).
 * Each of these is a violation and invalidates the capture: its streams
 * refuse further work with CUDA_ERROR_STREAM_CAPTURE_INVALIDATED and
 * cuStreamEndCapture returns that error and no graph.  Recording an event
 * on a capturing stream captures it; a stream outside captures that waits
 * for a captured event joins the capture.  Captured work does not run.
 */
/* Captures invalidated so far (each counted once). */
unsigned long fakecuda_captures_invalidated(void);
/* Graphs made by cuStreamEndCapture and not yet destroyed. */
unsigned long fakecuda_live_graphs(void);

/*
 * Simulate a kernel on @stream (a CUstream, or NULL / CU_STREAM_LEGACY /
 * CU_STREAM_PER_THREAD) that reads (@write 0) or writes (@write 1) the
 * device range [@addr, @addr + @size).  The stream must belong to the
 * current context (else CUDA_ERROR_INVALID_CONTEXT) and the range must be
 * mapped with the device's access (else CUDA_ERROR_INVALID_VALUE).
 * Ordering rule: every earlier access by another stream that conflicts
 * (overlaps, and one of the two writes) and has not completed must be
 * ordered before it: by cuStreamWaitEvent on an event recorded on that
 * stream after the access, or implicitly (legacy vs blocking stream of one
 * context).  Work on a stream not held (fakecuda_stream_hold) completes at
 * once, so anything after it is ordered; a held stream's accesses stay
 * pending until its work completes.  An unordered access is a violation
 * (the launch still happens and returns 0).  Synchronous copies are checked
 * the same way, as work on the legacy stream.  Unmapping memory that
 * pending work accesses is a violation too.  On a capturing stream only
 * the range is checked: captured work does not run.
 * Returns 0 or the CUresult of the failure.
 */
int fakecuda_launch(void *stream, unsigned long long addr,
		    unsigned long long size, int write);

#ifdef __cplusplus
}
#endif
#endif /* FAKECUDA_H */
