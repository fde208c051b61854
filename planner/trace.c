// SPDX-License-Identifier: MIT
/*
 * planner/trace.c - parse and check allocation traces (text format v1)
 *
 * The parser reads the whole file, splits it into lines and fields in place,
 * and stops at the first malformed line with "FILE:LINE: what".  Pairing
 * allocations with frees does not need a hash table: the (ID, index) pairs
 * of all allocs and frees are sorted, and each ID's events must then
 * alternate alloc, free, alloc, ...; the first break, in file order, is the
 * error reported.  O(n log n) time, no per-event allocation.
 *
 * Invariants after a successful parse: events are in file order with
 * strictly increasing SEQ; every free's @peer is its alloc and every
 * alloc's @peer is its free or TRACE_NONE; a free's @size is its alloc's.
 *
 * No locking: a trace is built and then read by one thread at a time.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../lib/util.h"
#include "trace.h"

#define TRACE_MAX_FIELDS 16

struct trace_line {
	const char *name;
	uint32_t no;
	char *field[TRACE_MAX_FIELDS];
	int nr;
};

#define trace_err(l, fmt, ...)                                      \
	sa_error(-EINVAL, "trace: %s:%u: " fmt, (l)->name, (l)->no, \
		 ##__VA_ARGS__)

static bool parse_u64(const char *s, int base, uint64_t *out)
{
	uint64_t v = 0;
	int d;

	if (base == 16 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))
		s += 2;
	if (!*s)
		return false;
	for (; *s; s++) {
		if (*s >= '0' && *s <= '9')
			d = *s - '0';
		else if (base == 16 && (*s | 0x20) >= 'a' && (*s | 0x20) <= 'f')
			d = (*s | 0x20) - 'a' + 10;
		else
			return false;
		if (v > (UINT64_MAX - (uint64_t)d) / (uint64_t)base)
			return false;
		v = v * (uint64_t)base + (uint64_t)d;
	}
	*out = v;
	return true;
}

/* An ID is decimal, or hexadecimal with a 0x prefix. */
static bool parse_id(const char *s, uint64_t *out)
{
	if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))
		return parse_u64(s, 16, out);
	return parse_u64(s, 10, out);
}

static int trace_keys(struct trace_line *l, int first, struct trace_event *e)
{
	uint64_t v;
	int i;

	for (i = first; i < l->nr; i++) {
		char *k = l->field[i], *val = strchr(k, '=');

		if (!val || val == k)
			return trace_err(l, "expected key=value, got \"%s\"",
					 k);
		*val++ = 0;
		if (!strcmp(k, "stream")) {
			if (!parse_u64(val, 16, &e->stream))
				return trace_err(l, "stream=%s is not hex",
						 val);
		} else if (!strcmp(k, "dev")) {
			if (!parse_u64(val, 10, &v) || v > INT32_MAX)
				return trace_err(l, "dev=%s is not a device",
						 val);
			e->dev = (int32_t)v;
		} else if (!strcmp(k, "ns")) {
			if (!parse_u64(val, 10, &e->ns))
				return trace_err(l, "ns=%s is not a number",
						 val);
		}
		/* unknown keys are ignored: later versions may add some */
	}
	return 0;
}

static int trace_label(struct trace *t, const char *label, uint64_t *idx)
{
	char **nl;
	size_t i;

	for (i = 0; i < t->nr_labels; i++)
		if (!strcmp(t->labels[i], label)) {
			*idx = i;
			return 0;
		}
	nl = realloc(t->labels, (t->nr_labels + 1) * sizeof(*nl));
	if (!nl)
		return sa_error(-ENOMEM, "trace: out of memory");
	t->labels = nl;
	t->labels[t->nr_labels] = strdup(label);
	if (!t->labels[t->nr_labels])
		return sa_error(-ENOMEM, "trace: out of memory");
	*idx = t->nr_labels++;
	return 0;
}

static struct trace_event *trace_push(struct trace *t)
{
	struct trace_event *ne;

	if (t->nr == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 4096;

		ne = realloc(t->ev, cap * sizeof(*ne));
		if (!ne)
			return NULL;
		t->ev = ne;
		t->cap = cap;
	}
	ne = &t->ev[t->nr];
	memset(ne, 0, sizeof(*ne));
	return ne;
}

static int trace_event_line(struct trace *t, struct trace_line *l)
{
	const char *op = l->field[0];
	struct trace_event *e;
	int want;

	if (strlen(op) != 1 || !strchr("afm", op[0]))
		return trace_err(l, "unknown event \"%s\" (want a, f or m)",
				 op);
	want = op[0] == 'a' ? 4 : 3;
	if (l->nr < want)
		return trace_err(l, "'%c' needs %d fields, has %d", op[0], want,
				 l->nr);
	if (op[0] == 'm' && l->nr > 3)
		return trace_err(l, "a marker label must be one word");
	e = trace_push(t);
	if (!e)
		return sa_error(-ENOMEM, "trace: %s: out of memory", l->name);
	e->op = op[0];
	e->line = l->no;
	e->peer = TRACE_NONE;
	if (!parse_u64(l->field[1], 10, &e->seq))
		return trace_err(l, "SEQ \"%s\" is not a number", l->field[1]);
	if (t->nr && e->seq <= t->ev[t->nr - 1].seq)
		return trace_err(l,
				 "SEQ %llu does not increase (previous %llu)",
				 (unsigned long long)e->seq,
				 (unsigned long long)t->ev[t->nr - 1].seq);
	if (op[0] == 'm') {
		int err = trace_label(t, l->field[2], &e->id);

		if (err)
			return err;
		t->nr++;
		return 0;
	}
	if (!parse_id(l->field[2], &e->id))
		return trace_err(l, "ID \"%s\" is not a number", l->field[2]);
	if (op[0] == 'a') {
		if (!parse_u64(l->field[3], 10, &e->size) || !e->size)
			return trace_err(l,
					 "size \"%s\" is not a positive "
					 "number",
					 l->field[3]);
		t->nr_allocs++;
	}
	t->nr++;
	return trace_keys(l, want, e);
}

/* Split @s (one line, no newline) into fields; false if too many. */
static bool trace_split(char *s, struct trace_line *l)
{
	l->nr = 0;
	for (;;) {
		while (*s == ' ' || *s == '\t' || *s == '\r')
			*s++ = 0;
		if (!*s)
			return true;
		if (l->nr == TRACE_MAX_FIELDS)
			return false;
		l->field[l->nr++] = s;
		while (*s && *s != ' ' && *s != '\t' && *s != '\r')
			s++;
	}
}

struct id_ref {
	uint64_t id;
	uint32_t idx;
};

static int id_ref_cmp(const void *a, const void *b)
{
	const struct id_ref *x = a, *y = b;

	if (x->id != y->id)
		return x->id < y->id ? -1 : 1;
	return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* Pair allocs and frees; report the earliest broken line. */
static int trace_pair(struct trace *t)
{
	struct id_ref *r;
	size_t i, n = 0;
	uint32_t bad = UINT32_MAX;
	const char *why = NULL;

	r = malloc((t->nr ? t->nr : 1) * sizeof(*r));
	if (!r)
		return sa_error(-ENOMEM, "trace: %s: out of memory", t->name);
	for (i = 0; i < t->nr; i++)
		if (t->ev[i].op != TRACE_MARK)
			r[n++] = (struct id_ref){ t->ev[i].id, (uint32_t)i };
	qsort(r, n, sizeof(*r), id_ref_cmp);
	for (i = 0; i < n; i++) {
		struct trace_event *e = &t->ev[r[i].idx];
		struct trace_event *prev = NULL;
		const char *bad_why = NULL;

		if (i && r[i - 1].id == r[i].id)
			prev = &t->ev[r[i - 1].idx];
		if (e->op == TRACE_FREE && (!prev || prev->op == TRACE_FREE))
			bad_why = "free of an ID that is not live";
		else if (e->op == TRACE_ALLOC && prev &&
			 prev->op == TRACE_ALLOC)
			bad_why = "allocation of an ID that is still live";
		if (bad_why) {
			if (r[i].idx < bad) {
				bad = r[i].idx;
				why = bad_why;
			}
		} else if (e->op == TRACE_FREE && prev) {
			e->peer = r[i - 1].idx;
			e->size = prev->size;
			prev->peer = r[i].idx;
		}
	}
	free(r);
	if (why)
		return sa_error(-EINVAL, "trace: %s:%u: %s (ID %llu)", t->name,
				t->ev[bad].line, why,
				(unsigned long long)t->ev[bad].id);
	return 0;
}

static int trace_header(struct trace_line *l)
{
	uint64_t v;

	if (l->nr != 2 || strcmp(l->field[0], "stalloc-trace") != 0)
		return trace_err(l, "not a stalloc trace (want \"stalloc-trace "
				    "1\" as the first line)");
	if (!parse_u64(l->field[1], 10, &v) || v != 1)
		return trace_err(l,
				 "trace format version %s is not supported "
				 "(this is version 1)",
				 l->field[1]);
	return 0;
}

int trace_parse(const char *name, const char *text, size_t len, struct trace *t)
{
	struct trace_line l = { .name = name };
	char *buf, *s, *nl;
	bool header = false;
	int err = 0;

	memset(t, 0, sizeof(*t));
	t->name = strdup(name);
	buf = malloc(len + 1);
	if (!t->name || !buf) {
		free(buf);
		return sa_error(-ENOMEM, "trace: %s: out of memory", name);
	}
	memcpy(buf, text, len);
	buf[len] = 0;
	if (memchr(buf, 0, len)) {
		l.no = 1;
		for (s = buf; s < (char *)memchr(buf, 0, len); s++)
			l.no += *s == '\n';
		err = trace_err(&l, "NUL byte in a text trace");
		goto out;
	}
	for (s = buf; *s && !err; s = nl ? nl + 1 : s + strlen(s)) {
		nl = strchr(s, '\n');
		l.no++;
		if (nl)
			*nl = 0;
		if (s[strspn(s, " \t")] == '#')
			continue; /* a comment, however many words */
		if (!trace_split(s, &l))
			err = trace_err(&l, "too many fields");
		else if (!l.nr)
			continue;
		else if (!nl)
			err = trace_err(&l, "truncated: the last line has no "
					    "newline");
		else if (!header) {
			err = trace_header(&l);
			header = true;
		} else {
			err = trace_event_line(t, &l);
		}
	}
	if (!err && !header)
		err = sa_error(-EINVAL, "trace: %s: empty file", name);
	if (!err && !t->nr_allocs)
		err = sa_error(-EINVAL, "trace: %s: no allocation in the trace",
			       name);
	if (!err)
		err = trace_pair(t);
out:
	free(buf);
	if (err)
		trace_free(t);
	return err;
}

int trace_load(const char *path, struct trace *t)
{
	size_t len;
	char *text;
	int err;

	err = sa_read_file(path, &text, &len);
	if (err)
		return err;
	err = trace_parse(path, text, len, t);
	free(text);
	return err;
}

void trace_free(struct trace *t)
{
	size_t i;

	for (i = 0; i < t->nr_labels; i++)
		free(t->labels[i]);
	free(t->labels);
	free(t->ev);
	free(t->name);
	memset(t, 0, sizeof(*t));
}

bool trace_mark_is(const struct trace *t, const struct trace_event *e,
		   const char *label)
{
	return e->op == TRACE_MARK && e->id < t->nr_labels &&
	       !strcmp(t->labels[e->id], label);
}
