/* SPDX-License-Identifier: MIT */
/*
 * stalloc/planner.h - plan a static allocation from an allocation trace
 *
 * The planner reads a trace (text format v1, see trace-format.rst) or a
 * MiniMalloc CSV problem, finds the iterations, classifies every request,
 * packs the repeating ones at offsets in one pool so that the peak is as
 * close as possible to the lower bound (the most bytes live at once), and
 * records, for the requests that vary, the address ranges the static plan
 * leaves free while they live.  Plans are written to and read from a
 * versioned, checksummed file (plan-format.rst).
 *
 * All functions follow stalloc.h's conventions: 0 or a negative errno, and
 * stalloc_last_error() says what and where (file and line for bad input).
 */
#ifndef STALLOC_PLANNER_H
#define STALLOC_PLANNER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <stalloc/stalloc.h>

#ifdef __cplusplus
extern "C" {
#endif

struct stalloc_plan;

/**
 * struct stalloc_plan_options - how to plan
 * @align: sizes are rounded up to this (a power of two); 0: 512 for
 *	traces (as on the GPU), 1 for CSV problems (planned as given)
 * @budget_ms: work budget of the packing search, in nominal milliseconds
 *	(about one millisecond of one core of a current x86 machine); 0: 1000.
 *	The search stops on the work it has done, never on the clock, so the
 *	same input and options give the same plan on any machine under any
 *	load
 * @time_limit_ms: wall-clock safety stop; 0: the larger of 60 s and 20
 *	times the budget.  Only when it fires (see
 *	stalloc_plan_summary.time_limit_hit) can the plan depend on the
 *	machine's speed or load
 * @capacity: 0, or the bytes available (CSV problems: taken from a file
 *	name NAME.CAPACITY.csv when 0)
 * @flags: STALLOC_PLAN_* flags
 */
struct stalloc_plan_options {
	uint64_t align;
	uint64_t time_limit_ms;
	uint64_t capacity;
	unsigned int flags;
	uint64_t budget_ms;
};

/**
 * STALLOC_PLAN_NO_PERSISTENT - plan only what repeats in an iteration
 *
 * A flag of struct stalloc_plan_options: the persistent requests are left
 * out (for plans made in-process, after those were allocated).
 */
#define STALLOC_PLAN_NO_PERSISTENT 0x1

/**
 * STALLOC_PLAN_EXACT_CLOCK - lifetimes on the reference iteration's clock
 *
 * A flag of struct stalloc_plan_options.  Where routing (MoE) shifts
 * requests from iteration to iteration, the planner measures lifetimes in
 * requests from each iteration's start, whose envelopes leave slack for a
 * run unlike the recorded ones, unless that slack costs over a twentieth of
 * the planned bytes; with this flag, always on the reference's clock (no
 * slack).  stalloc-plan and auto mode plan again so when the check rejects
 * a plan made with slack (stalloc_plan_summary.slack_clock).
 */
#define STALLOC_PLAN_EXACT_CLOCK 0x2

/**
 * enum stalloc_iter_source - how the iterations were found
 * @STALLOC_ITER_MARKERS: from "iteration" markers
 * @STALLOC_ITER_DETECTED: from the period of the request sequence
 * @STALLOC_ITER_NONE: no repetition: planned as one problem
 * @STALLOC_ITER_CSV: a CSV problem: no iterations
 * @STALLOC_ITER_FILE: read from a plan file
 */
enum stalloc_iter_source {
	STALLOC_ITER_MARKERS,
	STALLOC_ITER_DETECTED,
	STALLOC_ITER_NONE,
	STALLOC_ITER_CSV,
	STALLOC_ITER_FILE,
};

/**
 * enum stalloc_plan_check_state - was the plan replayed against its trace?
 * @STALLOC_CHECK_NONE: not checked (CSV problems, --no-check, version 1
 *	and 2 files)
 * @STALLOC_CHECK_PASS: replaying the trace with the plan reserved at most
 *	one chunk more than replaying it in off mode
 * @STALLOC_CHECK_REJECT: it reserved more, or the runtime dropped the plan:
 *	the runtime does not use the plan and runs as in off mode
 */
enum stalloc_plan_check_state {
	STALLOC_CHECK_NONE,
	STALLOC_CHECK_PASS,
	STALLOC_CHECK_REJECT,
};

/**
 * struct stalloc_plan_summary - what a plan is and how it was made
 * @requests: allocations in the input (CSV: rows)
 * @iterations: iterations found
 * @steady_iterations: iterations the plan covers (compared to classify)
 * @iter_source: enum stalloc_iter_source
 * @period_events: detected period in alloc/free events (or 0)
 * @static_requests: planned requests of one iteration (static + cross)
 * @cross_requests: of which freed in the next iteration (wrap around)
 * @persistent_requests: planned requests made before the iterations
 * @dynamic_requests: request positions that vary between iterations
 * @persistent_bytes: bytes of the persistent requests
 * @lower_bound: most bytes live at once among the planned requests
 * @peak: the plan's pool size
 * @dynamic_bytes: most dynamic bytes live at once, max over iterations
 * @reusable_bytes: of those, bytes placed in the free ranges of the plan
 * @plan_ms: wall time of planning
 * @budget_ms: the packing's work budget (nominal ms)
 * @work_ms: the work the packing did (nominal ms; the same on every run)
 * @time_limit_hit: the wall-clock safety stop cut the packing short: this
 *	plan may differ from one made on an idle or faster machine
 * @trace_peak: traces: the most bytes live at once during the steady
 *	iterations (all but the last), every request at its requested size
 * @live_peak: the same, counting only the planned requests: the true
 *	lower bound of any plan of them
 * @align_bytes: what rounding the planned sizes up to the alignment adds
 *	to @live_peak
 * @model_bytes: @lower_bound - @live_peak - @align_bytes: what the plan's
 *	lifetimes add (envelopes over the iterations, the two slots of an
 *	alternating position and persistent buffers living throughout)
 * @optimal: the packing is proven optimal
 * @fingerprint: the static request signature
 * @check: enum stalloc_plan_check_state (stalloc_plan_check())
 * @check_planned: checked plans: peak bytes reserved replaying the trace
 *	with the plan
 * @check_off: the same in off mode
 * @check_online: the least any online policy reserved there: off mode, and
 *	the models of PyTorch's caching allocator without and with
 *	expandable segments (@check_off in files written before it)
 * @stride: steps (iteration markers) per planned iteration past the
 *	warm-up: 1, or 2 where planning two steps as one holds less (a
 *	buffer kept until the next step's instance exists)
 * @check_fallback: the peak of the same replay under the runtime's
 *	fallback for a rejected plan (0: not measured)
 * @slack_clock: the plan has dynamic positions and its lifetimes were
 *	measured with slack for shifted runs (STALLOC_PLAN_EXACT_CLOCK);
 *	false for a plan read from a file (the file does not say)
 */
struct stalloc_plan_summary {
	uint64_t requests;
	uint64_t iterations;
	uint64_t steady_iterations;
	int iter_source;
	uint64_t period_events;
	uint64_t static_requests;
	uint64_t cross_requests;
	uint64_t persistent_requests;
	uint64_t dynamic_requests;
	uint64_t persistent_bytes;
	uint64_t lower_bound;
	uint64_t peak;
	uint64_t dynamic_bytes;
	uint64_t reusable_bytes;
	double plan_ms;
	bool optimal;
	uint64_t fingerprint;
	double budget_ms;
	double work_ms;
	bool time_limit_hit;
	uint64_t trace_peak;
	uint64_t live_peak;
	uint64_t align_bytes;
	int64_t model_bytes;
	int check;
	uint64_t check_planned;
	uint64_t check_off;
	uint64_t check_online;
	uint64_t stride;
	uint64_t check_fallback;
	bool slack_clock;
};

/**
 * struct stalloc_plan_buffer - one planned buffer, for checking a plan
 * @id: its name in the input (trace ID or CSV id), or NULL
 * @lower: lifetime start (SEQ units from the iteration start for traces)
 * @upper: lifetime end, exclusive (> lower; a buffer that wraps around the
 *	iteration boundary is reported as two buffers)
 * @size: bytes (rounded up to the alignment)
 * @offset: its offset in the pool
 */
struct stalloc_plan_buffer {
	const char *id;
	uint64_t lower;
	uint64_t upper;
	uint64_t size;
	uint64_t offset;
};

/**
 * stalloc_plan_file() - plan from a trace or CSV file
 * @path: the input; its format is told by its first line
 * @opts: options, or NULL for the defaults
 * @out: the plan, to be freed with stalloc_plan_free()
 *
 * Return: 0; -EINVAL for invalid input (stalloc_last_error() names the file,
 * the line and the problem); -ENOENT, -EIO, -ENOMEM; -ENOSPC if a capacity
 * was given and the plan does not fit (*@out is still set).
 */
STALLOC_API int stalloc_plan_file(const char *path,
				  const struct stalloc_plan_options *opts,
				  struct stalloc_plan **out);

/**
 * stalloc_plan_write() - write a plan file
 * @plan: the plan
 * @path: where; written to a temporary file and renamed into place
 *
 * Return: 0, or a negative errno naming the file (-EIO, -ENOMEM, ...).
 */
STALLOC_API int stalloc_plan_write(const struct stalloc_plan *plan,
				   const char *path);

/**
 * stalloc_plan_read() - read and validate a plan file
 * @path: the file
 * @out: the plan
 *
 * Everything is checked before the plan is returned: version, checksum,
 * field syntax, sizes and offsets inside the pool, lifetimes inside the
 * iteration, no two planned buffers overlapping in time and address, free
 * ranges inside the pool and the fingerprint.
 *
 * Return: 0, or -EINVAL naming the file, the line and the problem.
 */
STALLOC_API int stalloc_plan_read(const char *path, struct stalloc_plan **out);

/**
 * stalloc_plan_summary() - what a plan is
 * @plan: the plan
 * @sum: filled in
 */
STALLOC_API void stalloc_plan_summary(const struct stalloc_plan *plan,
				      struct stalloc_plan_summary *sum);

/**
 * stalloc_plan_for_each_buffer() - visit every planned buffer
 * @plan: the plan
 * @fn: called once per buffer (twice for one that wraps); a nonzero
 *	return stops the walk and is returned
 * @arg: passed to @fn
 *
 * Return: 0 when every buffer was visited, else what @fn returned.
 */
STALLOC_API int stalloc_plan_for_each_buffer(
	const struct stalloc_plan *plan,
	int (*fn)(const struct stalloc_plan_buffer *buf, void *arg), void *arg);

/**
 * stalloc_plan_boundaries() - where the iterations start
 * @plan: the plan
 * @seq: set to an array of the iterations' starting SEQs (owned by @plan)
 *
 * Return: the number of iterations (0 for CSV problems and plan files).
 */
STALLOC_API size_t stalloc_plan_boundaries(const struct stalloc_plan *plan,
					   const uint64_t **seq);

/**
 * struct stalloc_plan_verdict - how a plan fared against its own trace
 * @planned: peak bytes reserved replaying the trace with the plan
 * @off: the same in off mode (what the runtime does without a plan)
 * @online: the least of @off and the peaks of the models of PyTorch's
 *	caching allocator (without and with expandable segments) on the
 *	same trace: what the plan's steady iterations may rise to
 *	(STALLOC_STEADY_CALLS)
 * @misses: planned requests the runtime served elsewhere meanwhile
 * @dropped: the runtime gave up the plan during the replay
 * @granularity: the chunk size both replays used (the margin allowed)
 * @check_ms: wall time of the replays
 * @fallback: peak bytes reserved replaying the trace under the runtime's
 *	fallback for a rejected plan (0: not replayed, the plan was
 *	rejected already)
 * @planned_calls: driver calls in the last iteration (between the trace's
 *	last two iteration markers) of the replay with the plan
 * @fallback_calls: the same under the fallback
 * @calls_measured: both replays measured those calls (plan mode, two
 *	iteration markers); otherwise @planned_calls and @fallback_calls
 *	are 0
 */
struct stalloc_plan_verdict {
	uint64_t planned;
	uint64_t off;
	uint64_t online;
	uint64_t misses;
	bool dropped;
	uint64_t granularity;
	double check_ms;
	uint64_t fallback;
	uint64_t planned_calls;
	uint64_t fallback_calls;
	bool calls_measured;
};

/**
 * stalloc_plan_check() - replay the plan's own trace with and without it
 * @plan: the plan; its check state is set from the result
 * @plan_path: where @plan was written (the replay reads it from there)
 * @trace: the trace @plan was made from
 * @replay: the stalloc-replay program; NULL: $STALLOC_REPLAY, else the
 *	one beside the running program, else the one in $PATH
 * @granularity: the physical chunk size to replay with (0: the runtime's
 *	default, 2 MiB)
 * @out: the measurements (may be NULL)
 *
 * Runs the trace through the runtime on the host backend, in child
 * processes (no STALLOC_* variable and no LD_PRELOAD of the caller reaches
 * them): in plan mode with @plan_path, and in off mode.  A plan that
 * reserves more than one chunk above off mode at the peak, or that the
 * runtime drops, is marked rejected (STALLOC_CHECK_REJECT): written again,
 * the runtime then does not use it and runs its fallback (off mode whose
 * free memory is given back before new is mapped).  Two more replays, of
 * the models of PyTorch's caching allocator without and with expandable
 * segments, give @online.  A plan not rejected so far is replayed once
 * more as rejected, under that fallback, and is rejected too if the
 * fallback does better: no more memory at the peak and no more driver
 * calls in the trace's last iteration, and less of one (calls weighed
 * only while the plan's are within STALLOC_STEADY_CALLS; where they
 * cannot be measured, as in auto mode, only a plan that lends memory in
 * every step anyway, and only for less memory).  A tie keeps the plan.
 * Otherwise it is marked passed.
 *
 * Return: 0, or a negative errno when the check could not run (no replay
 * program, a replay that failed); @plan is then left unchecked.
 */
STALLOC_API int stalloc_plan_check(struct stalloc_plan *plan,
				   const char *plan_path, const char *trace,
				   const char *replay, uint64_t granularity,
				   struct stalloc_plan_verdict *out);

/**
 * stalloc_plan_check_auto() - the same, replayed as auto mode would use it
 * @plan: the plan; its check state is set from the result
 * @plan_path: where @plan was written
 * @trace: the trace @plan was made from, with 3 iteration markers at least
 * @replay: as for stalloc_plan_check()
 * @granularity: as for stalloc_plan_check()
 * @out: the measurements (may be NULL)
 *
 * Auto mode switches to a plan mid-run: what the traced iterations left
 * alive (weights, optimizer state) stays where off mode put it, beside the
 * pool.  So the run with the plan is replayed as that: the trace's
 * iterations up to its second-to-last iteration marker as auto mode
 * traces them, then the plan (stalloc-replay --policy auto --plan),
 * against off mode.
 *
 * Return: as for stalloc_plan_check().
 */
STALLOC_API int stalloc_plan_check_auto(struct stalloc_plan *plan,
					const char *plan_path,
					const char *trace, const char *replay,
					uint64_t granularity,
					struct stalloc_plan_verdict *out);

/**
 * stalloc_plan_free() - free a plan
 * @plan: the plan, or NULL
 */
STALLOC_API void stalloc_plan_free(struct stalloc_plan *plan);

#ifdef __cplusplus
}
#endif
#endif /* STALLOC_PLANNER_H */
