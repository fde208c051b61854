// SPDX-License-Identifier: MIT
/*
 * lib/options.c - the option table and the functions that read it
 *
 * One row per STALLOC_* variable, in enum sa_opt's order (checked at
 * build time by the table's size).  Sizes accept K, M, G, T suffixes
 * (sa_parse_size); counts are sizes without a suffix; a choice is one of
 * a list (case-insensitive), @def naming the default.  Values are read from the environment on every call: callers
 * read them once, when a device is set up, so a test (or stalloc_shutdown
 * and a new first request) can change them.
 *
 * Locking: none; getenv() only.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "options.h"
#include "util.h"

enum opt_type { T_CHOICE, T_SIZE, T_COUNT, T_BOOL, T_PATH, T_STRING };

static const char *const type_names[] = { "choice", "size", "count",
					  "bool",   "path", "string" };

/**
 * struct opt - one row of the table
 * @min, @max: accepted range of a size, count or bool
 * @choices: a choice's values, NULL-terminated
 * @def: the default as the code applies it (choices, paths, bools), else
 *	NULL (the caller's, which @def_text describes)
 * @def_text: the default in words, for the documentation
 */
struct opt {
	const char *name;
	enum opt_type type;
	uint64_t min;
	uint64_t max;
	const char *const *choices;
	const char *def;
	const char *def_text;
	const char *scope;
	const char *help;
};

#define NOMAX UINT64_MAX

static const struct opt table[SA_OPT_NR] = {
	[SA_OPT_MODE] = { "STALLOC_MODE", T_CHOICE, 0, 0,
			  (const char *const[]){ "off", "trace", "plan", "auto",
						 NULL },
			  "off", "off", "library",
			  "off: the dynamic allocator only; trace: also "
			  "record every request; plan: serve the plan in "
			  "STALLOC_PLAN; auto: trace, plan in-process, "
			  "switch" },
	[SA_OPT_TRACE] = { "STALLOC_TRACE", T_PATH, 0, 0, NULL,
			   "stalloc-%p-%d.trace",
			   "stalloc-%p-%d.trace (auto: "
			   "/tmp/stalloc-auto-%p-%d.trace)",
			   "library",
			   "trace file pattern (%p pid, %d device, %r "
			   "rank: RANK, else LOCAL_RANK)" },
	[SA_OPT_PLAN] = { "STALLOC_PLAN", T_PATH, 0, 0, NULL, NULL, "none",
			  "library",
			  "plan file for plan mode (same patterns)" },
	[SA_OPT_AUTO_ITERS] = { "STALLOC_AUTO_ITERS", T_COUNT, 1, 1 << 20, NULL,
				NULL, "4", "library",
				"auto mode: iterations traced before "
				"planning (at least 3, unless "
				"STALLOC_AUTO_PLAN gives the plan; 7 or "
				"more let it plan two steps at a time)" },
	[SA_OPT_AUTO_CHECK] = { "STALLOC_AUTO_CHECK", T_BOOL, 0, 1, NULL, "1",
				"1", "library",
				"auto mode: 0 uses its plan without replaying "
				"the trace with it and in off mode first" },
	[SA_OPT_AUTO_PLAN] = { "STALLOC_AUTO_PLAN", T_PATH, 0, 0, NULL, NULL,
			       "none", "library",
			       "auto mode: switch to this plan instead of "
			       "planning the traced iterations, unchecked "
			       "(how auto mode's check replays a plan: "
			       "stalloc-replay --policy auto --plan)" },
	[SA_OPT_AUTO_SYNC] = { "STALLOC_AUTO_SYNC", T_BOOL, 0, 1, NULL, "0",
			       "0", "library",
			       "auto mode: 1 plans and checks at the marker "
			       "that ends the traced iterations, on the "
			       "thread that marks, and switches there: the "
			       "same switch every run (that step takes "
			       "longer)" },
	[SA_OPT_AUTO_FINE] = { "STALLOC_AUTO_FINE", T_BOOL, 0, 1, NULL, "1",
			       "1", "library",
			       "auto mode: 0 maps the traced iterations' "
			       "memory in segments of up to "
			       "STALLOC_SEGMENT_SIZE, as off mode does (fewer "
			       "driver calls while tracing; a higher peak)" },
	[SA_OPT_CACHE_LIMIT] = { "STALLOC_CACHE_LIMIT", T_SIZE, 0, NOMAX, NULL,
				 NULL, "0 (no limit)", "library",
				 "give cached memory back once more than "
				 "this is cached" },
	[SA_OPT_LEND] = { "STALLOC_LEND", T_BOOL, 0, 1, NULL, "1", "1",
			  "library",
			  "plan mode: 0 never unmaps idle memory for a "
			  "dynamic request (no device synchronisation on that "
			  "path; more memory)" },
	[SA_OPT_LEND_FINE] = { "STALLOC_LEND_FINE", T_BOOL, 0, 1, NULL, "1",
			       "1", "library",
			       "plan mode: 0 maps the plan's free ranges in "
			       "segments of up to STALLOC_SEGMENT_SIZE like "
			       "the rest of the pool (fewer driver calls in "
			       "iterations with dynamic requests; more "
			       "memory)" },
	[SA_OPT_STEADY_CALLS] = { "STALLOC_STEADY_CALLS", T_COUNT, 0, NOMAX,
				  NULL, NULL, "16", "library",
				  "plan and auto modes: driver calls a steady "
				  "iteration may spend giving idle memory back "
				  "at the high water (lending, shrinking); past "
				  "that the high water rises by its largest "
				  "give-back, never above the least online "
				  "policy's peak in the plan's check (with "
				  "dynamic positions: half-way from the "
				  "plan's own peak there to it; fewer calls, "
				  "more memory; a huge value: never)" },
	[SA_OPT_CTL] = { "STALLOC_CTL", T_BOOL, 0, 1, NULL, "1", "1", "library",
			 "0 turns the control socket off" },
	[SA_OPT_LOG] = { "STALLOC_LOG", T_CHOICE, 0, 0,
			 (const char *const[]){ "none", "error", "warn", "info",
						"debug", NULL },
			 "error", "error", "library",
			 "what is logged to stderr" },
	[SA_OPT_BACKEND] = { "STALLOC_BACKEND", T_CHOICE, 0, 0,
			     (const char *const[]){ "auto", "cuda", "host",
						    NULL },
			     "auto", "auto", "library",
			     "auto: cuda when a driver and a device are "
			     "there, else host" },
	[SA_OPT_LIBCUDA] = { "STALLOC_LIBCUDA", T_PATH, 0, 0, NULL,
			     "libcuda.so.1", "libcuda.so.1", "library",
			     "the driver library to load" },
	[SA_OPT_VA_SIZE] = { "STALLOC_VA_SIZE", T_SIZE, 1, NOMAX, NULL, NULL,
			     "4 x device memory", "library",
			     "address space reserved per device" },
	[SA_OPT_CHUNK_SIZE] = { "STALLOC_CHUNK_SIZE", T_SIZE, 1, NOMAX, NULL,
				NULL, "the granularity (2M)", "library",
				"mapping unit (a multiple of the "
				"granularity)" },
	[SA_OPT_SEGMENT_SIZE] = { "STALLOC_SEGMENT_SIZE", T_SIZE, 1, NOMAX,
				  NULL, NULL, "20M", "library",
				  "most bytes in one driver allocation "
				  "(rounded down to chunks, at least one)" },
	[SA_OPT_PHYS_LIMIT] = { "STALLOC_PHYS_LIMIT", T_SIZE, 1, NOMAX, NULL,
				NULL, "device memory", "library",
				"most physical bytes per device" },
	[SA_OPT_PEERS] = { "STALLOC_PEERS", T_STRING, 0, 0, NULL, "all", "all",
			   "library",
			   "devices granted access: all, none or a comma "
			   "list of ordinals" },
	[SA_OPT_HOST_MEM] = { "STALLOC_HOST_MEM", T_SIZE, 0, NOMAX, NULL, NULL,
			      "16G", "host backend",
			      "memory of the pretend device" },
	[SA_OPT_HOST_GRANULARITY] = { "STALLOC_HOST_GRANULARITY", T_SIZE, 0,
				      NOMAX, NULL, NULL, "2M", "host backend",
				      "granularity (a power of two, at "
				      "least the page size)" },
	[SA_OPT_HOST_FORK] = { "STALLOC_HOST_FORK", T_CHOICE, 0, 0,
			       (const char *const[]){ "none", "copy", NULL },
			       "none", "none", "host backend",
			       "what a forked child gets of the memory: none "
			       "(as with a GPU) or a private copy (CPU tensors; "
			       "the LD_PRELOAD library sets it)" },
	[SA_OPT_LTTNG] = { "STALLOC_LTTNG", T_BOOL, 0, 1, NULL, "0", "0",
			   "library", "1 loads the lttng-ust provider" },
	[SA_OPT_LTTNG_LIB] = { "STALLOC_LTTNG_LIB", T_PATH, 0, 0, NULL, NULL,
			       "libstalloc-lttng.so beside libstalloc",
			       "library", "the lttng-ust provider to load" },
	[SA_OPT_OOM] = { "STALLOC_OOM", T_CHOICE, 0, 0,
			 (const char *const[]){ "raise", "abort", NULL },
			 "raise", "raise", "torch",
			 "out of memory: raise PyTorch's error, or stop the "
			 "process with the report" },
	[SA_OPT_CPU_MIN] = { "STALLOC_CPU_MIN", T_SIZE, 1, NOMAX, NULL, NULL,
			     "1K", "preload",
			     "smallest CPU tensor served by stalloc" },
	[SA_OPT_CPU_ADDR_LOG] = { "STALLOC_CPU_ADDR_LOG", T_PATH, 0, 0, NULL,
				  NULL, "none", "preload",
				  "write every allocation's address here" },
	[SA_OPT_CPU_STATS] = { "STALLOC_CPU_STATS", T_PATH, 0, 0, NULL, NULL,
			       "none", "preload",
			       "write the statistics here as JSON at exit" },
	[SA_OPT_REPLAY] = { "STALLOC_REPLAY", T_PATH, 0, 0, NULL, NULL,
			    "stalloc-replay beside the program or the "
			    "library, else on PATH",
			    "stalloc-import, plan checks",
			    "the stalloc-replay program stalloc-import and the "
			    "plan check (stalloc-plan -o, auto mode) run" },
};

const char *sa_opt_name(enum sa_opt o)
{
	return table[o].name;
}

const char *sa_opt_raw(enum sa_opt o)
{
	const char *v = getenv(table[o].name);

	return v && *v ? v : NULL;
}

/* "1K", "20M" ... when @v is an exact multiple, else the number. */
static void fmt_size(uint64_t v, char *buf, size_t size)
{
	static const char units[] = "KMGTPE";
	int u = -1;

	while (v && v % 1024 == 0 && u < 5) {
		v /= 1024;
		u++;
	}
	if (u < 0)
		snprintf(buf, size, "%" PRIu64, v);
	else
		snprintf(buf, size, "%" PRIu64 "%c", v, units[u]);
}

/* The accepted values in words, e.g. "off, trace, plan or auto". */
static void range_text(const struct opt *op, char *buf, size_t size)
{
	const char *const *c;
	char lo[32], hi[32];
	size_t n = 0;

	switch (op->type) {
	case T_CHOICE:
		buf[0] = 0;
		for (c = op->choices; *c; c++)
			n += (size_t)snprintf(buf + n, n < size ? size - n : 0,
					      "%s%s",
					      c == op->choices ? "" :
					      c[1]	       ? ", " :
								 " or ",
					      *c);
		return;
	case T_SIZE:
	case T_COUNT:
		if (op->type == T_SIZE) {
			fmt_size(op->min, lo, sizeof(lo));
			fmt_size(op->max, hi, sizeof(hi));
		} else {
			snprintf(lo, sizeof(lo), "%" PRIu64, op->min);
			snprintf(hi, sizeof(hi), "%" PRIu64, op->max);
		}
		if (op->max == NOMAX)
			snprintf(buf, size, "%s or more%s", lo,
				 op->type == T_SIZE ? " bytes (K/M/G/T)" : "");
		else
			snprintf(buf, size, "%s to %s%s", lo, hi,
				 op->type == T_SIZE ? " bytes (K/M/G/T)" : "");
		return;
	case T_BOOL:
		snprintf(buf, size, "0 or 1");
		return;
	default:
		snprintf(buf, size, "any");
		return;
	}
}

static int bad_value(const struct opt *op, const char *v)
{
	char r[128];

	range_text(op, r, sizeof(r));
	return sa_error(-EINVAL,
			"environment: %s=\"%s\" is not accepted (want %s)",
			op->name, v, r);
}

int sa_opt_size(enum sa_opt o, uint64_t def, uint64_t *out)
{
	const struct opt *op = &table[o];
	const char *v = sa_opt_raw(o);
	uint64_t x;
	char *end;

	*out = def;
	if (!v)
		return 0;
	if (op->type == T_SIZE) {
		if (sa_parse_size(v, &x))
			return bad_value(op, v);
	} else {
		errno = 0;
		x = strtoull(v, &end, 10);
		if (errno || *end || end == v || *v == '-')
			return bad_value(op, v);
	}
	if (x < op->min || x > op->max)
		return bad_value(op, v);
	*out = x;
	return 0;
}

int sa_opt_bool(enum sa_opt o, bool *out)
{
	const struct opt *op = &table[o];
	const char *v = sa_opt_raw(o);

	*out = op->def && !strcmp(op->def, "1");
	if (!v)
		return 0;
	if (strcmp(v, "0") != 0 && strcmp(v, "1") != 0)
		return bad_value(op, v);
	*out = !strcmp(v, "1");
	return 0;
}

/* Index of @v in the choice list; -1 if none. */
static int choice_index(const char *const *choices, const char *v)
{
	int i;

	for (i = 0; v && choices[i]; i++)
		if (!strcasecmp(choices[i], v))
			return i;
	return -1;
}

int sa_opt_lookup(enum sa_opt o, const char *v)
{
	return table[o].type == T_CHOICE ? choice_index(table[o].choices, v) :
					   -1;
}

int sa_opt_choice(enum sa_opt o, unsigned int *idx)
{
	const struct opt *op = &table[o];
	const char *v = sa_opt_raw(o);
	int i;

	i = choice_index(op->choices, op->def);
	*idx = i < 0 ? 0 : (unsigned int)i;
	if (!v)
		return 0;
	i = choice_index(op->choices, v);
	if (i < 0)
		return bad_value(op, v);
	*idx = (unsigned int)i;
	return 0;
}

const char *sa_opt_str(enum sa_opt o)
{
	const char *v = sa_opt_raw(o);

	return v ? v : table[o].def;
}

/* ----------------------------------------------------- the public side */

static struct stalloc_option pub[SA_OPT_NR];
static char pub_range[SA_OPT_NR][128];

static void pub_init(void)
{
	size_t i;

	for (i = 0; i < SA_OPT_NR; i++) {
		range_text(&table[i], pub_range[i], sizeof(pub_range[i]));
		pub[i] = (struct stalloc_option){
			.name = table[i].name,
			.type = type_names[table[i].type],
			.def = table[i].def_text,
			.range = pub_range[i],
			.scope = table[i].scope,
			.help = table[i].help,
		};
	}
}

const struct stalloc_option *stalloc_options(size_t *nr)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	pthread_once(&once, pub_init);
	*nr = SA_OPT_NR;
	return pub;
}

static int find(const char *name)
{
	int i;

	for (i = 0; name && i < SA_OPT_NR; i++)
		if (!strcmp(table[i].name, name))
			return i;
	return sa_error(-EINVAL, "options: %s is not a stalloc option",
			name ? name : "(null)");
}

int stalloc_option_size(const char *name, uint64_t def, uint64_t *out)
{
	int i = find(name);

	*out = def;
	if (i < 0)
		return i;
	if (table[i].type != T_SIZE && table[i].type != T_COUNT &&
	    table[i].type != T_BOOL)
		return sa_error(-EINVAL, "options: %s is not a number", name);
	return sa_opt_size((enum sa_opt)i, def, out);
}

const char *stalloc_option_string(const char *name)
{
	int i = find(name);
	unsigned int k;

	if (i < 0)
		return NULL;
	if (table[i].type != T_CHOICE)
		return sa_opt_str((enum sa_opt)i);
	if (sa_opt_choice((enum sa_opt)i, &k))
		return NULL;
	return table[i].choices[k]; /* as spelled in the table */
}
