/* SPDX-License-Identifier: MIT */
/*
 * planner/csv.h - MiniMalloc CSV problems: id,lower,upper,size
 *
 * The header line names the columns (any order; id, lower, upper and size
 * required; other columns ignored).  Lifetimes are [lower, upper).  Ids are
 * kept as given (strings: "b1", "17").  Errors name the file and line.
 */
#ifndef STALLOC_PLANNER_CSV_H
#define STALLOC_PLANNER_CSV_H

#include <stddef.h>
#include <stdint.h>

#include "pack.h"

/**
 * struct csv_problem - a parsed CSV instance
 * @bufs: one buffer per data row, lifetimes as in the file
 * @ids: the id column of each row (NUL-terminated strings)
 * @nr: rows
 * @horizon: max upper
 * @capacity: from a file name like NAME.CAPACITY.csv, else 0
 */
struct csv_problem {
	struct pack_buf *bufs;
	char **ids;
	size_t nr;
	uint64_t horizon;
	uint64_t capacity;
};

/* Parse @path; 0, or -EINVAL / -ENOMEM / -ENOENT with sa_error() set. */
int csv_load(const char *path, struct csv_problem *out);
/* Parse @len bytes of @text (named @name in messages). */
int csv_parse(const char *name, const char *text, size_t len,
	      struct csv_problem *out);
void csv_free(struct csv_problem *p);

#endif /* STALLOC_PLANNER_CSV_H */
