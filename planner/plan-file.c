// SPDX-License-Identifier: MIT
/*
 * planner/plan-file.c - write, read and validate plan files (format v6;
 * versions 1 to 5 still read)
 *
 * A plan file is text, one record per line, ending with a CRC-32 (zlib) of
 * every byte before the checksum line.  The reader checks the checksum
 * first, then parses each line strictly (file:line in every message), then
 * validates the plan as a whole (plan_validate): sizes and offsets inside
 * the pool, lifetimes inside the iteration, unique positions, no two
 * planned buffers overlapping in both time and address, free ranges inside
 * the pool and disjoint, and the fingerprint.  Nothing is returned before
 * all of that holds.  See Documentation/plan-format.rst.
 *
 * Writing goes to PATH.tmp, fsync'ed, then renamed over PATH (when PATH is
 * a regular file or does not exist yet; anything else, a device or a FIFO,
 * is written to directly), so a reader never sees half a plan.  No
 * locking.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "../lib/util.h"
#include "planner.h"

#define PLAN_MAGIC "stalloc-plan"
/*
 * 1: no warmstart, 2: no check, 3: no stride, 4: a stride of 2 steps and
 * no request bytes; all still read.  Version 5 always has a stride line
 * (1 step: "stride 1 0") and each entry's request bytes.
 */
#define PLAN_VERSION 6
#define PLAN_MAX_STRIDE 2

/* ---------------------------------------------------------------- write */

struct sbuf {
	char *s;
	size_t len, cap;
	bool oom;
};

static void __printf(2, 3) sb_printf(struct sbuf *b, const char *fmt, ...)
{
	char *piece = NULL;
	va_list ap;
	size_t need;
	int n;

	va_start(ap, fmt);
	n = vasprintf(&piece, fmt, ap);
	va_end(ap);
	if (n < 0)
		piece = NULL; /* undefined after a failure */
	if (n < 0 || b->oom) {
		b->oom = true;
		goto out;
	}
	need = b->len + (size_t)n + 1;
	if (need > b->cap) {
		size_t cap = b->cap ? b->cap : 1 << 16;
		char *ns;

		while (cap < need)
			cap *= 2;
		ns = realloc(b->s, cap);
		if (!ns) {
			b->oom = true;
			goto out;
		}
		b->s = ns;
		b->cap = cap;
	}
	memcpy(b->s + b->len, piece, (size_t)n + 1);
	b->len += (size_t)n;
out:
	free(piece);
}

/* Indexed by enum stalloc_plan_check_state. */
static const char *const check_names[] = { "none", "pass", "reject" };

static void emit(const struct stalloc_plan *p, struct sbuf *b)
{
	size_t i;
	uint32_t r;

	sb_printf(b, "%s %d\n", PLAN_MAGIC, PLAN_VERSION);
	sb_printf(b,
		  "# written by stalloc %s: %zu planned buffers, %zu "
		  "dynamic positions\n",
		  stalloc_version_string(), p->nr_ent, p->nr_dyn);
	sb_printf(b, "fingerprint 0x%016" PRIx64 "\n", p->fingerprint);
	sb_printf(b,
		  "align %" PRIu64 "\npool %" PRIu64 "\nhorizon %" PRIu64 "\n",
		  p->align, p->pool, p->horizon);
	sb_printf(b, "positions %u\nprologue %u\nwarmup %u\nwarmstart %u\n",
		  p->nr_positions, p->nr_prologue, p->warmup, p->warmstart);
	sb_printf(b, "stride %u %u\n", p->stride > 1 ? p->stride : 1,
		  p->stride > 1 ? p->stride_pos : 0);
	sb_printf(b,
		  "check %s %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 "\n",
		  check_names[p->check], p->check_planned, p->check_off,
		  p->check_online, p->check_fallback);
	sb_printf(b, "entries %zu\n", p->nr_ent);
	for (i = 0; i < p->nr_ent; i++) {
		const struct plan_entry *e = &p->ent[i];

		sb_printf(b,
			  "e %c %u %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64
			  " %" PRIu64 "\n",
			  e->cls, e->pos, e->size, e->offset, e->start, e->end,
			  e->req);
	}
	sb_printf(b, "dynamic %zu\n", p->nr_dyn);
	for (i = 0; i < p->nr_dyn; i++) {
		const struct plan_dyn *d = &p->dyn[i];

		sb_printf(b,
			  "d %u %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64
			  " %" PRIu64 " %" PRIu64 " %d %u",
			  d->pos, d->size_min, d->size_max, d->req_min,
			  d->req_max, d->start, d->end, d->wraps, d->nr_ranges);
		for (r = 0; r < d->nr_ranges; r++) {
			const struct plan_range *rg =
				&p->ranges[d->first_range + r];

			sb_printf(b, " %" PRIu64 ":%" PRIu64, rg->offset,
				  rg->len);
		}
		sb_printf(b, "\n");
	}
}

/*
 * Is @path a regular file, or nothing yet?  Only then is the plan written
 * beside it and renamed over it: a rename would replace a device (such as
 * /dev/null), a FIFO or a symbolic link itself instead of writing to it.
 */
static bool plan_regular_target(const char *path)
{
	struct stat st;

	if (lstat(path, &st))
		return errno == ENOENT;
	return S_ISREG(st.st_mode);
}

/* Write @b to @path as it is (not atomically: it is no regular file). */
static int plan_write_direct(const char *path, const struct sbuf *b)
{
	int fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC);
	int err = 0;

	if (fd < 0)
		return sa_error(-EIO, "plan: %s: %s", path, strerror(errno));
	if (sa_write_all(fd, b->s, b->len))
		err = sa_error(-EIO, "plan: %s: %s", path, strerror(errno));
	close(fd);
	return err;
}

int stalloc_plan_write(const struct stalloc_plan *p, const char *path)
{
	struct sbuf b = { 0 };
	char tmp[4096];
	uLong crc;
	int fd, err;

	err = plan_validate(p, "planner: internal plan");
	if (err)
		return err;
	emit(p, &b);
	crc = crc32(0L, (const Bytef *)b.s, (uInt)b.len);
	sb_printf(&b, "checksum 0x%08lx\n", (unsigned long)crc);
	if (b.oom) {
		free(b.s);
		return sa_error(-ENOMEM, "plan: %s: out of memory", path);
	}
	if (!plan_regular_target(path)) {
		err = plan_write_direct(path, &b);
		goto out;
	}
	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= sizeof(tmp)) {
		free(b.s);
		return sa_error(-EINVAL, "plan: %s: path too long", path);
	}
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		err = sa_error(-EIO, "plan: %s: %s", tmp, strerror(errno));
		goto out;
	}
	if (sa_write_all(fd, b.s, b.len) || fsync(fd)) {
		err = sa_error(-EIO, "plan: %s: %s", tmp, strerror(errno));
		close(fd);
		unlink(tmp);
		goto out;
	}
	close(fd);
	if (rename(tmp, path)) {
		err = sa_error(-EIO, "plan: %s: %s", path, strerror(errno));
		unlink(tmp);
	}
out:
	free(b.s);
	return err;
}

/* ----------------------------------------------------------------- read */

struct cursor {
	const char *name;
	char *s; /* next line */
	unsigned int no; /* number of the line last returned */
	char *f[8 + 2 * 64];
	int nr;
	uint64_t lines; /* lines in the file: a bound on every count */
};

#define cur_err(c, fmt, ...)                                       \
	sa_error(-EINVAL, "plan: %s:%u: " fmt, (c)->name, (c)->no, \
		 ##__VA_ARGS__)

/* Next line that is not a comment, split into fields; false at the end. */
static bool next_line(struct cursor *c)
{
	while (*c->s) {
		char *line = c->s, *nl = strchr(line, '\n'), *t, *save;

		c->no++;
		c->s = nl ? nl + 1 : line + strlen(line);
		if (nl)
			*nl = 0;
		if (line[0] == '#')
			continue;
		c->nr = 0;
		for (t = strtok_r(line, " \t\r", &save); t;
		     t = strtok_r(NULL, " \t\r", &save)) {
			if (c->nr == (int)ARRAY_SIZE(c->f))
				break;
			c->f[c->nr++] = t;
		}
		if (c->nr)
			return true;
	}
	return false;
}

static bool num(const char *s, uint64_t *v)
{
	char *end;

	/* decimal only: "010" is ten, not eight */
	if (!s || *s < '0' || *s > '9')
		return false;
	errno = 0;
	*v = strtoull(s, &end, 10);
	return !errno && !*end;
}

/* Expect "KEY VALUE" and parse VALUE. */
static int keyval(struct cursor *c, const char *key, uint64_t *v)
{
	if (!next_line(c))
		return cur_err(c, "file ends before \"%s\"", key);
	if (c->nr != 2 || strcmp(c->f[0], key) != 0)
		return cur_err(c, "expected \"%s VALUE\"", key);
	if (!strcmp(key, "fingerprint")) {
		char *end;

		/* the one hexadecimal field: 0x and 16 digits */
		errno = 0;
		*v = strtoull(c->f[1], &end, 16);
		if (strncmp(c->f[1], "0x", 2) != 0 || errno || *end)
			return cur_err(c, "fingerprint \"%s\" is not 0xHEX",
				       c->f[1]);
		return 0;
	}
	if (!num(c->f[1], v))
		return cur_err(c, "%s \"%s\" is not a number", key, c->f[1]);
	return 0;
}

/*
 * "stride STEPS POS" (version 4 on, 2 steps; version 5, also "stride 1 0";
 * earlier files: one step each)
 */
static int read_stride(struct cursor *c, struct stalloc_plan *p,
		       uint64_t version)
{
	uint64_t n, pos;

	if (!next_line(c))
		return cur_err(c, "file ends before \"stride\"");
	if (c->nr != 3 || strcmp(c->f[0], "stride") != 0 || !num(c->f[1], &n) ||
	    !num(c->f[2], &pos))
		return cur_err(c, "expected \"stride STEPS POSITION\"");
	if (version > 4 && n == 1 && !pos)
		return 0; /* one step per iteration */
	if (n < 2 || n > PLAN_MAX_STRIDE)
		return cur_err(c, "stride %llu is not 2 to %d",
			       (unsigned long long)n, PLAN_MAX_STRIDE);
	if (pos >= p->nr_positions)
		return cur_err(c,
			       "the last step's position %llu is past the "
			       "iteration's %u",
			       (unsigned long long)pos, p->nr_positions);
	p->stride = (uint32_t)n;
	p->stride_pos = (uint32_t)pos;
	return 0;
}

/*
 * "check STATE PLANNED OFF [ONLINE]" (version 3 on; earlier files: not
 * checked); version 6 on, "check STATE PLANNED OFF ONLINE FALLBACK".
 */
static int read_check(struct cursor *c, struct stalloc_plan *p,
		      uint64_t version)
{
	int k, most = version > 5 ? 6 : 5;

	if (!next_line(c))
		return cur_err(c, "file ends before \"check\"");
	if (c->nr < 4 || c->nr > most || (version > 5 && c->nr != 6) ||
	    strcmp(c->f[0], "check") != 0)
		return version > 5 ? cur_err(c, "expected \"check STATE "
						"PLANNED OFF ONLINE "
						"FALLBACK\"") :
				     cur_err(c, "expected \"check STATE "
						"PLANNED OFF [ONLINE]\"");
	for (k = 0; k < (int)ARRAY_SIZE(check_names); k++)
		if (!strcmp(c->f[1], check_names[k]))
			break;
	if (k == (int)ARRAY_SIZE(check_names))
		return cur_err(c,
			       "check state \"%s\" is not none, pass or "
			       "reject",
			       c->f[1]);
	if (!num(c->f[2], &p->check_planned) || !num(c->f[3], &p->check_off))
		return cur_err(c, "check bytes \"%s %s\" are not numbers",
			       c->f[2], c->f[3]);
	p->check_online = p->check_off; /* written before it was recorded */
	if (c->nr >= 5 && !num(c->f[4], &p->check_online))
		return cur_err(c, "check bytes \"%s\" are not a number",
			       c->f[4]);
	p->check_fallback = 0; /* not measured before version 6 */
	if (c->nr == 6 && !num(c->f[5], &p->check_fallback))
		return cur_err(c, "check bytes \"%s\" are not a number",
			       c->f[5]);
	if (k == STALLOC_CHECK_NONE && (p->check_planned || p->check_off ||
					p->check_online || p->check_fallback))
		return cur_err(c, "an unchecked plan has no check bytes");
	if (p->check_online > p->check_off)
		return cur_err(c,
			       "check bytes: ONLINE %" PRIu64
			       " is above OFF %" PRIu64,
			       p->check_online, p->check_off);
	p->check = k;
	return 0;
}

static int read_entry(struct cursor *c, struct plan_entry *e, uint64_t version)
{
	int fields = version > 4 ? 8 : 7;
	uint64_t pos;

	if (!next_line(c))
		return cur_err(c, "file ends inside the entries");
	if (c->nr != fields || strcmp(c->f[0], "e") != 0 ||
	    strlen(c->f[1]) != 1)
		return cur_err(c,
			       "expected \"e CLASS POS SIZE OFFSET START "
			       "END%s\"",
			       version > 4 ? " REQUEST" : "");
	e->cls = c->f[1][0];
	if (!strchr("pxsa", e->cls))
		return cur_err(c, "unknown class '%c' (want p, s, x or a)",
			       e->cls);
	if (!num(c->f[2], &pos) || pos > UINT32_MAX ||
	    !num(c->f[3], &e->size) || !num(c->f[4], &e->offset) ||
	    !num(c->f[5], &e->start) || !num(c->f[6], &e->end) ||
	    (fields > 7 && !num(c->f[7], &e->req)))
		return cur_err(c, "malformed number in an entry");
	e->pos = (uint32_t)pos;
	return 0;
}

/*
 * "d POS MIN MAX START END WRAPS N RANGES..."; from version 5 on the
 * request bytes follow MAX: "d POS MIN MAX REQMIN REQMAX START ...".
 */
static int read_dyn(struct cursor *c, struct stalloc_plan *p,
		    struct plan_dyn *d, uint64_t version)
{
	int x = version > 4 ? 2 : 0; /* the fields REQMIN REQMAX */
	uint64_t pos, wraps, nr, i;
	struct plan_range *nrng;

	if (!next_line(c))
		return cur_err(c, "file ends inside the dynamic positions");
	if (c->nr < 8 + x || strcmp(c->f[0], "d") != 0)
		return cur_err(c,
			       "expected \"d POS MIN MAX%s START END WRAPS "
			       "N RANGES...\"",
			       x ? " REQMIN REQMAX" : "");
	if (!num(c->f[1], &pos) || pos > UINT32_MAX ||
	    !num(c->f[2], &d->size_min) || !num(c->f[3], &d->size_max) ||
	    (x && (!num(c->f[4], &d->req_min) || !num(c->f[5], &d->req_max))) ||
	    !num(c->f[4 + x], &d->start) || !num(c->f[5 + x], &d->end) ||
	    !num(c->f[6 + x], &wraps) || wraps > 1 || !num(c->f[7 + x], &nr))
		return cur_err(c, "malformed number in a dynamic position");
	if (nr != (uint64_t)(c->nr - 8 - x))
		return cur_err(c, "%llu ranges announced, %d given",
			       (unsigned long long)nr, c->nr - 8 - x);
	d->pos = (uint32_t)pos;
	d->wraps = wraps;
	d->first_range = (uint32_t)p->nr_ranges;
	d->nr_ranges = (uint32_t)nr;
	nrng = realloc(p->ranges, (p->nr_ranges + nr + 1) * sizeof(*nrng));
	if (!nrng)
		return sa_error(-ENOMEM, "plan: out of memory");
	p->ranges = nrng;
	for (i = 0; i < nr; i++) {
		struct plan_range *rg = &p->ranges[p->nr_ranges++];
		char *colon = strchr(c->f[8 + x + i], ':');

		if (!colon)
			return cur_err(c, "range \"%s\" is not OFFSET:LEN",
				       c->f[8 + x + i]);
		*colon = 0;
		if (!num(c->f[8 + x + i], &rg->offset) ||
		    !num(colon + 1, &rg->len))
			return cur_err(c, "malformed range");
	}
	return 0;
}

/* Verify and strip the final checksum line. */
static int check_crc(const char *name, char *text, size_t len)
{
	char *last, *end;
	unsigned long want;
	uLong got;

	if (!len || text[len - 1] != '\n')
		return sa_error(-EINVAL,
				"plan: %s: truncated (no final "
				"checksum line)",
				name);
	text[len - 1] = 0;
	last = strrchr(text, '\n');
	last = last ? last + 1 : text;
	if (strncmp(last, "checksum 0x", 11) != 0)
		return sa_error(-EINVAL,
				"plan: %s: truncated (the last line "
				"is not a checksum)",
				name);
	errno = 0;
	want = strtoul(last + 11, &end, 16);
	if (errno || end == last + 11 || *end)
		return sa_error(-EINVAL, "plan: %s: malformed checksum line",
				name);
	got = crc32(0L, (const Bytef *)text, (uInt)(last - text));
	if (got != want)
		return sa_error(-EINVAL,
				"plan: %s: checksum mismatch (file "
				"says 0x%08lx, contents give 0x%08lx):"
				" corrupted",
				name, want, (unsigned long)got);
	*last = 0;
	return 0;
}

static int parse_counts(struct cursor *c, struct stalloc_plan *p,
			uint64_t version, uint64_t *nent)
{
	uint64_t v;
	int err;

	err = keyval(c, "fingerprint", &p->fingerprint) ?:
		      keyval(c, "align", &p->align)	?:
		      keyval(c, "pool", &p->pool)	?:
		      keyval(c, "horizon", &p->horizon) ?:
		      keyval(c, "positions", &v);
	if (err)
		return err;
	if (v > UINT32_MAX)
		return cur_err(c, "too many positions");
	p->nr_positions = (uint32_t)v;
	err = keyval(c, "prologue", &v);
	if (err)
		return err;
	if (v > UINT32_MAX)
		return cur_err(c, "too many prologue positions");
	p->nr_prologue = (uint32_t)v;
	err = keyval(c, "warmup", &v);
	if (err)
		return err;
	if (v > UINT32_MAX)
		return cur_err(c, "warm-up too long");
	p->warmup = (uint32_t)v;
	v = p->nr_prologue;
	err = version > 1 ? keyval(c, "warmstart", &v) : 0;
	if (err)
		return err;
	if (v > p->nr_prologue)
		return cur_err(c, "warmstart %llu is past the prologue (%u)",
			       (unsigned long long)v, p->nr_prologue);
	p->warmstart = (uint32_t)v;
	p->stride = 1;
	err = version > 3 ? read_stride(c, p, version) : 0;
	if (err)
		return err;
	err = version > 2 ? read_check(c, p, version) : 0;
	if (err)
		return err;
	err = keyval(c, "entries", nent);
	/* each entry is a line: a count beyond the file is a lie */
	if (!err && *nent > c->lines)
		return cur_err(c,
			       "%llu entries announced, but the file has "
			       "%llu lines",
			       (unsigned long long)*nent,
			       (unsigned long long)c->lines);
	return err;
}

static int parse(struct cursor *c, struct stalloc_plan *p)
{
	uint64_t v, nent, ndyn, i;
	int err;

	if (!next_line(c) || c->nr != 2 || strcmp(c->f[0], PLAN_MAGIC) != 0)
		return cur_err(c, "not a stalloc plan");
	if (!num(c->f[1], &v) || v < 1 || v > PLAN_VERSION)
		return cur_err(c,
			       "plan format version %s is not supported "
			       "(this is version %d)",
			       c->f[1], PLAN_VERSION);
	err = parse_counts(c, p, v, &nent);
	if (err)
		return err;
	p->ent = calloc(nent + 1, sizeof(*p->ent));
	if (!p->ent)
		return sa_error(-ENOMEM, "plan: out of memory");
	for (i = 0; i < nent && !err; i++)
		err = read_entry(c, &p->ent[p->nr_ent++], v);
	if (!err)
		err = keyval(c, "dynamic", &ndyn);
	if (!err && ndyn > c->lines)
		err = cur_err(c,
			      "%llu dynamic positions announced, but the "
			      "file has %llu lines",
			      (unsigned long long)ndyn,
			      (unsigned long long)c->lines);
	if (err)
		return err;
	p->dyn = calloc(ndyn + 1, sizeof(*p->dyn));
	if (!p->dyn)
		return sa_error(-ENOMEM, "plan: out of memory");
	for (i = 0; i < ndyn && !err; i++)
		err = read_dyn(c, p, &p->dyn[p->nr_dyn++], v);
	if (!err && next_line(c))
		err = cur_err(c, "unexpected line after the dynamic positions");
	return err;
}

static void summarise_read(struct stalloc_plan *p)
{
	size_t i;

	memset(&p->sum, 0, sizeof(p->sum));
	p->sum.iter_source = STALLOC_ITER_FILE;
	for (i = 0; i < p->nr_ent; i++) {
		if (p->ent[i].cls == PLAN_PERSISTENT) {
			p->sum.persistent_requests++;
			p->sum.persistent_bytes += p->ent[i].size;
		} else {
			p->sum.static_requests++;
			p->sum.cross_requests += p->ent[i].cls == PLAN_CROSS;
		}
	}
	p->sum.requests = p->nr_ent + p->nr_dyn;
	p->sum.dynamic_requests = p->nr_dyn;
	p->sum.peak = p->pool;
	p->sum.fingerprint = p->fingerprint;
	p->sum.check = p->check;
	p->sum.check_planned = p->check_planned;
	p->sum.check_off = p->check_off;
	p->sum.check_online = p->check_online;
	p->sum.check_fallback = p->check_fallback;
	p->sum.stride = p->stride > 1 ? p->stride : 1;
}

int stalloc_plan_read(const char *path, struct stalloc_plan **out)
{
	struct cursor c = { .name = path };
	struct stalloc_plan *p;
	size_t len;
	char *text;
	int err;

	*out = NULL;
	err = sa_read_file(path, &text, &len);
	if (err)
		return err;
	if (memchr(text, 0, len)) {
		err = sa_error(-EINVAL, "plan: %s: NUL byte: not a text plan",
			       path);
		goto out_text;
	}
	err = check_crc(path, text, len);
	if (err)
		goto out_text;
	p = calloc(1, sizeof(*p));
	if (!p) {
		err = sa_error(-ENOMEM, "plan: out of memory");
		goto out_text;
	}
	c.s = text;
	for (c.lines = 1; *text; text++)
		c.lines += *text == '\n';
	text = c.s;
	err = parse(&c, p);
	if (!err)
		err = plan_validate(p, path);
	if (err) {
		stalloc_plan_free(p);
		goto out_text;
	}
	summarise_read(p);
	*out = p;
out_text:
	free(text);
	return err;
}
