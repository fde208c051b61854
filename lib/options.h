/* SPDX-License-Identifier: MIT */
/*
 * lib/options.h - the one option table: every STALLOC_* variable (internal)
 *
 * The library reads its configuration only through these functions; each
 * variable has one entry in lib/options.c with its type, default, accepted
 * range, scope and help, from which the README's table and
 * Documentation/options.rst are generated (build/stalloc-options).  A
 * malformed or out-of-range value is refused with a message that names
 * the variable, the value and what is accepted.
 */
#ifndef STALLOC_LIB_OPTIONS_H
#define STALLOC_LIB_OPTIONS_H

#include <stdbool.h>
#include <stdint.h>

/*
 * STALLOC_STEADY_CALLS's default: about a millisecond of driver work (the
 * runtime's steady budget; the plan's check weighs calls against it).
 */
#define SA_STEADY_CALLS_DEFAULT 16

enum sa_opt {
	SA_OPT_MODE,
	SA_OPT_TRACE,
	SA_OPT_PLAN,
	SA_OPT_AUTO_ITERS,
	SA_OPT_AUTO_CHECK,
	SA_OPT_AUTO_SYNC,
	SA_OPT_AUTO_PLAN,
	SA_OPT_AUTO_FINE,
	SA_OPT_CACHE_LIMIT,
	SA_OPT_LEND,
	SA_OPT_LEND_FINE,
	SA_OPT_STEADY_CALLS,
	SA_OPT_CTL,
	SA_OPT_LOG,
	SA_OPT_BACKEND,
	SA_OPT_LIBCUDA,
	SA_OPT_VA_SIZE,
	SA_OPT_CHUNK_SIZE,
	SA_OPT_SEGMENT_SIZE,
	SA_OPT_PHYS_LIMIT,
	SA_OPT_PEERS,
	SA_OPT_HOST_MEM,
	SA_OPT_HOST_GRANULARITY,
	SA_OPT_HOST_FORK,
	SA_OPT_LTTNG,
	SA_OPT_LTTNG_LIB,
	SA_OPT_OOM,
	SA_OPT_CPU_MIN,
	SA_OPT_CPU_ADDR_LOG,
	SA_OPT_CPU_STATS,
	SA_OPT_REPLAY,
	SA_OPT_NR
};

/* The raw value: NULL when unset or empty. */
const char *sa_opt_raw(enum sa_opt o);
/* A size, count or bool: @def when unset; -EINVAL names the range. */
int sa_opt_size(enum sa_opt o, uint64_t def, uint64_t *out);
/* A bool (0 or 1): the table's default when unset; -EINVAL otherwise. */
int sa_opt_bool(enum sa_opt o, bool *out);
/* A choice: its index in the table's list (the default when unset). */
int sa_opt_choice(enum sa_opt o, unsigned int *idx);
/* A choice's index of @v, or -1; records no error (the logger uses it). */
int sa_opt_lookup(enum sa_opt o, const char *v);
/* A path or string: the value, else the table's default (may be NULL). */
const char *sa_opt_str(enum sa_opt o);
/* The variable's name, for messages. */
const char *sa_opt_name(enum sa_opt o);

#endif /* STALLOC_LIB_OPTIONS_H */
