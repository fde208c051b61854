// SPDX-License-Identifier: MIT
/*
 * planner/csv.c - read MiniMalloc CSV problems (id,lower,upper,size)
 *
 * The whole file is read into memory and parsed line by line; nothing is
 * modified in place, so csv_parse() works on any caller buffer, including
 * one that is not NUL-terminated or that holds NUL bytes.  Every field is
 * validated before it is stored, and every failure names the file and the
 * line (1-based).  On error @out is left zeroed and nothing leaks.
 *
 * Invariants of a parsed problem: nr > 0, every size > 0, every
 * lower < upper <= horizon, ids[i] a NUL-terminated copy of the id field.
 *
 * No global state, no locking: the functions are reentrant.
 */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "lib/util.h"
#include "planner/csv.h"

enum csv_col { CSV_ID, CSV_LOWER, CSV_UPPER, CSV_SIZE, CSV_NR_COLS };

static const char *const csv_col_names[CSV_NR_COLS] = { "id", "lower", "upper",
							"size" };

/* A slice of the input: one line or one field. */
struct csv_span {
	const char *p;
	size_t len;
};

/* Where the required columns are, and how many columns a row must have. */
struct csv_header {
	size_t col[CSV_NR_COLS];
	size_t nr_fields;
};

struct csv_reader {
	const char *name;
	const char *pos;
	const char *end;
	size_t line;
};

static bool csv_is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\r';
}

static struct csv_span csv_trim(struct csv_span s)
{
	while (s.len && csv_is_space(s.p[0])) {
		s.p++;
		s.len--;
	}
	while (s.len && csv_is_space(s.p[s.len - 1]))
		s.len--;
	return s;
}

static bool csv_span_eq(struct csv_span s, const char *word)
{
	return s.len == strlen(word) && !memcmp(s.p, word, s.len);
}

/* Next line (without its '\n'); false at the end of the input. */
static bool csv_next_line(struct csv_reader *r, struct csv_span *line)
{
	const char *nl;

	if (r->pos >= r->end)
		return false;
	nl = memchr(r->pos, '\n', (size_t)(r->end - r->pos));
	line->p = r->pos;
	line->len = nl ? (size_t)(nl - r->pos) : (size_t)(r->end - r->pos);
	r->pos = nl ? nl + 1 : r->end;
	r->line++;
	return true;
}

static size_t csv_count_fields(struct csv_span line)
{
	size_t n = 1, i;

	for (i = 0; i < line.len; i++)
		n += line.p[i] == ',';
	return n;
}

/* Cut the next field (trimmed) off the front of @rest. */
static struct csv_span csv_field(struct csv_span *rest)
{
	const char *comma = memchr(rest->p, ',', rest->len);
	struct csv_span f = { rest->p, rest->len };

	if (comma) {
		f.len = (size_t)(comma - rest->p);
		rest->p = comma + 1;
		rest->len -= f.len + 1;
	} else {
		rest->p += rest->len;
		rest->len = 0;
	}
	return csv_trim(f);
}

static bool csv_is_blank(struct csv_span line)
{
	return csv_trim(line).len == 0;
}

static int csv_parse_header(struct csv_reader *r, struct csv_header *h)
{
	struct csv_span line, rest, f;
	bool seen[CSV_NR_COLS] = { false };
	size_t i, c;

	do {
		if (!csv_next_line(r, &line))
			return sa_error(-EINVAL, "csv: %s: empty file",
					r->name);
	} while (csv_is_blank(line));
	if (memchr(line.p, '\0', line.len))
		return sa_error(-EINVAL, "csv: %s:%zu: NUL byte in header",
				r->name, r->line);
	h->nr_fields = csv_count_fields(line);
	rest = line;
	for (i = 0; i < h->nr_fields; i++) {
		f = csv_field(&rest);
		for (c = 0; c < CSV_NR_COLS; c++) {
			if (!csv_span_eq(f, csv_col_names[c]))
				continue;
			if (seen[c])
				return sa_error(
					-EINVAL,
					"csv: %s:%zu: duplicate column %s",
					r->name, r->line, csv_col_names[c]);
			seen[c] = true;
			h->col[c] = i;
		}
	}
	for (c = 0; c < CSV_NR_COLS; c++)
		if (!seen[c])
			return sa_error(-EINVAL,
					"csv: %s:%zu: header lacks column %s",
					r->name, r->line, csv_col_names[c]);
	return 0;
}

/* A decimal uint64 with nothing else in the field. */
static int csv_parse_u64(const struct csv_reader *r, struct csv_span f,
			 const char *what, uint64_t *out)
{
	uint64_t v = 0;
	size_t i;

	if (!f.len)
		return sa_error(-EINVAL, "csv: %s:%zu: empty %s", r->name,
				r->line, what);
	if (f.p[0] == '-')
		return sa_error(-EINVAL, "csv: %s:%zu: negative %s", r->name,
				r->line, what);
	for (i = 0; i < f.len; i++) {
		unsigned int d = (unsigned char)f.p[i] - '0';

		if (d > 9)
			return sa_error(-EINVAL,
					"csv: %s:%zu: %s is not a number",
					r->name, r->line, what);
		if (__builtin_mul_overflow(v, 10, &v) ||
		    __builtin_add_overflow(v, d, &v))
			return sa_error(-EINVAL, "csv: %s:%zu: %s overflows",
					r->name, r->line, what);
	}
	*out = v;
	return 0;
}

static int csv_grow(struct csv_problem *p, size_t *cap)
{
	struct pack_buf *bufs;
	char **ids;
	size_t n = *cap ? *cap * 2 : 256;

	if (n > SIZE_MAX / sizeof(*bufs))
		return -ENOMEM;
	bufs = realloc(p->bufs, n * sizeof(*bufs));
	if (!bufs)
		return -ENOMEM;
	p->bufs = bufs;
	ids = realloc(p->ids, n * sizeof(*ids));
	if (!ids)
		return -ENOMEM;
	p->ids = ids;
	*cap = n;
	return 0;
}

static int csv_check_row(const struct csv_reader *r, struct csv_span *f,
			 struct pack_buf *b)
{
	int err;

	if (!f[CSV_ID].len)
		return sa_error(-EINVAL, "csv: %s:%zu: empty id", r->name,
				r->line);
	err = csv_parse_u64(r, f[CSV_LOWER], "lower", &b->start);
	if (!err)
		err = csv_parse_u64(r, f[CSV_UPPER], "upper", &b->end);
	if (!err)
		err = csv_parse_u64(r, f[CSV_SIZE], "size", &b->size);
	if (err)
		return err;
	if (!b->size)
		return sa_error(-EINVAL, "csv: %s:%zu: size is 0", r->name,
				r->line);
	if (b->end <= b->start)
		return sa_error(-EINVAL,
				"csv: %s:%zu: upper %llu <= lower %llu",
				r->name, r->line, (unsigned long long)b->end,
				(unsigned long long)b->start);
	b->wraps = false;
	b->offset = 0;
	return 0;
}

static int csv_parse_row(const struct csv_reader *r, const struct csv_header *h,
			 struct csv_span line, struct csv_problem *p)
{
	struct csv_span f[CSV_NR_COLS] = { { NULL, 0 } };
	struct csv_span rest = line, cur;
	struct pack_buf *b = &p->bufs[p->nr];
	size_t nf = csv_count_fields(line), i, c;
	int err;

	if (memchr(line.p, '\0', line.len))
		return sa_error(-EINVAL, "csv: %s:%zu: NUL byte", r->name,
				r->line);
	if (nf != h->nr_fields)
		return sa_error(-EINVAL,
				"csv: %s:%zu: %zu fields, header has %zu",
				r->name, r->line, nf, h->nr_fields);
	for (i = 0; i < nf; i++) {
		cur = csv_field(&rest);
		for (c = 0; c < CSV_NR_COLS; c++)
			if (h->col[c] == i)
				f[c] = cur;
	}
	err = csv_check_row(r, f, b);
	if (err)
		return err;
	p->ids[p->nr] = strndup(f[CSV_ID].p, f[CSV_ID].len);
	if (!p->ids[p->nr])
		return sa_error(-ENOMEM, "csv: %s:%zu: out of memory", r->name,
				r->line);
	if (b->end > p->horizon)
		p->horizon = b->end;
	p->nr++;
	return 0;
}

/* NAME.CAPACITY.csv -> CAPACITY; 0 when the name has no such part. */
static uint64_t csv_capacity_from_name(const char *name)
{
	const char *base = strrchr(name, '/');
	size_t len, i;
	uint64_t v = 0;

	base = base ? base + 1 : name;
	len = strlen(base);
	if (len < 4 || strcmp(base + len - 4, ".csv") != 0)
		return 0;
	len -= 4;
	for (i = len; i > 0 && base[i - 1] >= '0' && base[i - 1] <= '9'; i--)
		;
	if (i == len || i < 2 || base[i - 1] != '.')
		return 0;
	for (; i < len; i++)
		if (__builtin_mul_overflow(v, 10, &v) ||
		    __builtin_add_overflow(v, (uint64_t)(base[i] - '0'), &v))
			return 0;
	return v;
}

int csv_parse(const char *name, const char *text, size_t len,
	      struct csv_problem *out)
{
	struct csv_reader r = { name, text, text + len, 0 };
	struct csv_problem p = { 0 };
	struct csv_header h;
	struct csv_span line;
	size_t cap = 0;
	int err;

	memset(out, 0, sizeof(*out));
	err = csv_parse_header(&r, &h);
	if (err)
		return err;
	while (csv_next_line(&r, &line)) {
		if (csv_is_blank(line))
			continue;
		if (p.nr == cap && csv_grow(&p, &cap)) {
			err = sa_error(-ENOMEM, "csv: %s:%zu: out of memory",
				       name, r.line);
			goto err_free;
		}
		err = csv_parse_row(&r, &h, line, &p);
		if (err)
			goto err_free;
	}
	if (!p.nr) {
		err = sa_error(-EINVAL, "csv: %s:%zu: no buffers", name,
			       r.line);
		goto err_free;
	}
	p.capacity = csv_capacity_from_name(name);
	*out = p;
	return 0;

err_free:
	csv_free(&p);
	return err;
}

int csv_load(const char *path, struct csv_problem *out)
{
	char *text = NULL;
	size_t len = 0;
	int err;

	memset(out, 0, sizeof(*out));
	err = sa_read_file(path, &text, &len);
	if (err)
		return err;
	err = csv_parse(path, text, len, out);
	free(text);
	return err;
}

void csv_free(struct csv_problem *p)
{
	size_t i;

	if (!p)
		return;
	for (i = 0; p->ids && i < p->nr; i++)
		free(p->ids[i]);
	free(p->ids);
	free(p->bufs);
	memset(p, 0, sizeof(*p));
}
