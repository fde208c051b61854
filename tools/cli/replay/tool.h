/* SPDX-License-Identifier: MIT */
/*
 * tools/cli/replay/tool.h - internals shared by the files of stalloc-replay
 *
 * The replay's state (struct replay), its arguments and results, and the
 * calls between tools/cli/stalloc-replay.c (options, the replay loop, main),
 * tools/cli/replay/setup.c (the prescan, the plan and the allocator set-up)
 * and tools/cli/replay/report.c (the JSON and human summaries, the peak
 * accounting fields).  Not the models' interface: that is
 * tools/cli/replay/replay.h.  Single-threaded; no locking.
 */
#ifndef STALLOC_TOOLS_REPLAY_TOOL_H
#define STALLOC_TOOLS_REPLAY_TOOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <stalloc/stalloc.h>
#include <stalloc/trace.h>

#include "replay.h"

#define MAX_DEV 16

enum policy { P_STALLOC, P_OFF, P_CACHING, P_EXPANDABLE, P_AUTO, NR_POLICIES };

extern const char *const policy_name[NR_POLICIES];

/*
 * What the real allocator did, from the trace's "# torch:" comment
 * (written by stalloc-import; Documentation/trace-format.rst).
 */
struct torch_rec {
	bool have_peak;
	uint64_t reserved_peak;
	uint64_t max_split;
	char allocator[16];
	char source[32];
};

struct args {
	const char *trace, *plan, *addr_log, *seg_log, *clobber;
	int policy;
	bool json, hold, stamp;
	uint64_t granularity, capacity, max_split;
	const char *cache_limit;
};

/* One allocation of the trace. */
struct rec {
	uint64_t id, start, end;
	uint64_t stream;
	int dev;
	struct cm_block *blk;
	bool ok; /* served (else it failed and its free is skipped) */
	bool in_tree;
	bool live; /* served and not yet freed */
};

/* Trace ID -> index of its live allocation; open addressing. */
struct idmap {
	uint64_t *key;
	size_t *val;
	size_t cap; /* a power of two */
	unsigned char *used;
};

struct replay {
	const struct args *a;
	struct stalloc_trace *t;
	struct rec *recs;
	size_t nr_recs;
	struct idmap ids;
	struct torch_rec torch;
	void *tree;
	FILE *log;
	struct cmodel *model[MAX_DEV];
	bool used[MAX_DEV];
	uint64_t peak_req[MAX_DEV];
	char plan_path[4096];
	char auto_dir[4096]; /* --policy auto: its trace and plan go here */
	bool plan_tmp;
	bool plan_steady; /* the plan plans a steady iteration */
	bool plan_rejected; /* its check rejected it: the runtime runs off */
	/* counters */
	uint64_t allocs, frees, failed, overlaps, marks, iter_marks;
	uint64_t corrupt, max_id; /* --stamp: allocations that lost bytes */
	uint64_t hits_at_mark, steady_allocs;
	/* driver calls at the last two "iteration" markers (libstalloc) */
	uint64_t calls_at_mark, calls_before_mark;
	double ms;
};

struct result {
	uint64_t peak_req, peak_res, hits, misses, dynamic, driver;
	uint64_t iter_driver; /* in the last iteration between two markers */
	bool has_iter_driver; /* libstalloc, two "iteration" markers seen */
	uint64_t bad_frees;
	uint64_t syncs, waits; /* the runtime's device syncs, host waits */
	uint64_t drv_allocs, drv_alloc_bytes; /* physical allocations made */
	bool plan_dropped;
	bool has_peak; /* @peak: the runtime's peak accounting (summed) */
	struct stalloc_peak peak;
};

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* tools/cli/stalloc-replay.c */
bool is_lib(const struct replay *r);
uint64_t lib_hits(void);
int idmap_init(struct idmap *m, size_t n);
void idmap_put(struct idmap *m, uint64_t key, size_t val);
bool idmap_take(struct idmap *m, uint64_t key, size_t *val);
void idmap_free(struct idmap *m);

/* tools/cli/replay/setup.c */
int prescan(struct replay *r);
uint64_t peak_requested(const struct replay *r);
int setup_stalloc(struct replay *r);
int setup_models(struct replay *r);
void read_torch_comment(struct replay *r);
bool torch_comparable(const struct replay *r);

/* tools/cli/replay/stamp.c */
int stamp_init(const char *clobber);
void stamp_put(struct replay *r, const struct rec *rc);
void stamp_check(struct replay *r, const struct rec *rc, const char *when);

/* tools/cli/replay/report.c */
void collect(const struct replay *r, struct result *res);
void print_json(const struct replay *r, const struct result *res);
void print_summary(const struct replay *r, const struct result *res);

#endif /* STALLOC_TOOLS_REPLAY_TOOL_H */
