// SPDX-License-Identifier: MIT
/*
 * lib/util.c - error messages, logging and small parsers
 *
 * The last-error buffer is thread local, so no lock is needed to record an
 * error.  The log level is one atomic int read with relaxed ordering; stderr
 * writes are whole lines (one fprintf per message, stdio locks the stream).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include "options.h"
#include "util.h"

#define SA_ERRBUF_LEN 512

static __thread char sa_errbuf[SA_ERRBUF_LEN];
static int sa_level = -1;
static pthread_once_t sa_level_once = PTHREAD_ONCE_INIT;

static void sa_level_init(void)
{
	/* the table's order is the levels' (none, error, ... debug) */
	const char *env = sa_opt_raw(SA_OPT_LOG);
	int level = sa_opt_lookup(SA_OPT_LOG, env ? env : "error");

	if (level < 0) {
		/* not sa_error: recording an error logs, which needs this */
		fprintf(stderr,
			"stalloc: warning: STALLOC_LOG=\"%s\" is not accepted "
			"(want none, error, warn, info or debug): using "
			"error\n",
			env);
		level = STALLOC_LOG_ERROR;
	}
	__atomic_store_n(&sa_level, level, __ATOMIC_RELAXED);
}

static int sa_level_get(void)
{
	pthread_once(&sa_level_once, sa_level_init);
	return __atomic_load_n(&sa_level, __ATOMIC_RELAXED);
}

bool sa_log_enabled(enum stalloc_log_level level)
{
	return (int)level <= sa_level_get();
}

enum stalloc_log_level stalloc_set_log_level(enum stalloc_log_level level)
{
	pthread_once(&sa_level_once, sa_level_init);
	return (enum stalloc_log_level)__atomic_exchange_n(
		&sa_level, (int)level, __ATOMIC_RELAXED);
}

static void __attribute__((format(printf, 2, 0)))
sa_vlog(enum stalloc_log_level level, const char *fmt, va_list ap)
{
	static const char *const tags[] = { "", "error", "warning", "info",
					    "debug" };
	char line[SA_ERRBUF_LEN];

	if (!sa_log_enabled(level))
		return;
	vsnprintf(line, sizeof(line), fmt, ap);
	fprintf(stderr, "stalloc: %s: %s\n", tags[level], line);
}

void sa_log(enum stalloc_log_level level, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	sa_vlog(level, fmt, ap);
	va_end(ap);
}

void sa_record_error(int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(sa_errbuf, sizeof(sa_errbuf), fmt, ap);
	va_end(ap);
	sa_log(STALLOC_LOG_DEBUG, "%s (%s)", sa_errbuf, stalloc_strerror(err));
}

const char *stalloc_last_error(void)
{
	return sa_errbuf;
}

const char *stalloc_strerror(int err)
{
	switch (err) {
	case 0:
		return "success";
	case -EINVAL:
		return "invalid argument";
	case -ENOMEM:
		return "out of memory or over the physical limit";
	case -ENODEV:
		return "no usable driver or device";
	case -EIO:
		return "driver call failed";
	case -EBUSY:
		return "range already in use";
	case -ENOENT:
		return "not found";
	case -ENOTSUP:
		return "not supported by this device or backend";
	case -EOVERFLOW:
		return "value too large";
	default:
		return "unknown error";
	}
}

int stalloc_version(void)
{
	return STALLOC_VERSION;
}

#define SA_STR2(x) #x
#define SA_STR(x) SA_STR2(x)

const char *stalloc_version_string(void)
{
	return SA_STR(STALLOC_VERSION_MAJOR) "." SA_STR(
		STALLOC_VERSION_MINOR) "." SA_STR(STALLOC_VERSION_PATCH);
}

static int sa_suffix_shift(const char *p, unsigned int *shift)
{
	static const char units[] = "KMGT";
	const char *u;

	*shift = 0;
	if (!*p)
		return 0;
	u = strchr(units, *p & ~0x20);
	if (u && *p != '\0') {
		*shift = 10 * (unsigned int)(u - units + 1);
		p++;
		if ((*p & ~0x20) == 'I')
			p++;
	}
	if ((*p & ~0x20) == 'B')
		p++;
	return *p ? -EINVAL : 0;
}

int sa_parse_size(const char *s, uint64_t *out)
{
	unsigned long long v;
	unsigned int shift;
	char *end;

	if (!s || !*s || *s == '-' || *s == '+' || *s == ' ' || *s == '\t')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno || end == s || sa_suffix_shift(end, &shift))
		return -EINVAL;
	if (shift && v > (UINT64_MAX >> shift))
		return -EINVAL;
	*out = (uint64_t)v << shift;
	return 0;
}

int stalloc_parse_size(const char *s, uint64_t *out)
{
	return sa_parse_size(s, out);
}

/* The rank for %r: RANK, else LOCAL_RANK, else "0"; NULL if not a number. */
static const char *sa_rank(const char **from)
{
	static const char *const vars[] = { "RANK", "LOCAL_RANK" };
	const char *v;
	size_t i;

	for (i = 0; i < ARRAY_SIZE(vars); i++) {
		v = getenv(vars[i]);
		if (!v || !*v)
			continue;
		*from = vars[i];
		if (strlen(v) > 9 || v[strspn(v, "0123456789")])
			return NULL;
		return v;
	}
	*from = NULL;
	return "0";
}

int sa_expand_path(const char *pattern, int device, char *out, size_t size)
{
	const char *rank, *from;
	size_t n = 0;
	int w;

	if (!pattern || !*pattern)
		return sa_error(-EINVAL, "path pattern: empty path");
	for (; *pattern; pattern++) {
		char c = pattern[1];

		w = 1;
		if (*pattern != '%') {
			if (n + 1 < size)
				out[n] = *pattern;
			goto next;
		}
		pattern++;
		if (c == 'p') {
			w = snprintf(out + n, n < size ? size - n : 0, "%d",
				     (int)getpid());
		} else if (c == 'd') {
			w = snprintf(out + n, n < size ? size - n : 0, "%d",
				     device);
		} else if (c == 'r') {
			rank = sa_rank(&from);
			if (!rank)
				return sa_error(-EINVAL,
						"path pattern: %%r: %s=\"%s\" "
						"is not a rank (want a number)",
						from, getenv(from));
			w = snprintf(out + n, n < size ? size - n : 0, "%s",
				     rank);
		} else if (c == '%') {
			if (n + 1 < size)
				out[n] = '%';
		} else {
			return sa_error(-EINVAL,
					"path pattern: unknown %%%c (want %%p, "
					"%%d, %%r or %%%%)",
					c ? c : '?');
		}
next:
		n += (size_t)w;
		if (n >= size)
			return sa_error(-EINVAL, "path pattern: path too long");
	}
	out[n] = 0;
	return 0;
}

int sa_read_file(const char *path, char **text, size_t *len)
{
	size_t got = 0, cap = 1 << 16;
	char *buf, *nbuf;
	ssize_t n;
	int fd, err;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return sa_error(errno == ENOENT ? -ENOENT : -EIO, "%s: %s",
				path, strerror(errno));
	buf = malloc(cap);
	if (!buf) {
		err = sa_error(-ENOMEM, "%s: out of memory", path);
		goto err_close;
	}
	for (;;) {
		if (cap - got < 2) {
			nbuf = cap > SIZE_MAX / 2 ? NULL :
						    realloc(buf, cap * 2);
			if (!nbuf) {
				err = sa_error(-ENOMEM, "%s: out of memory",
					       path);
				goto err_free;
			}
			buf = nbuf;
			cap *= 2;
		}
		n = read(fd, buf + got, cap - got - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			err = sa_error(-EIO, "%s: %s", path, strerror(errno));
			goto err_free;
		}
		if (!n)
			break;
		got += (size_t)n;
	}
	close(fd);
	buf[got] = 0;
	*text = buf;
	*len = got;
	return 0;

err_free:
	free(buf);
err_close:
	close(fd);
	return err;
}

int sa_write_all(int fd, const char *s, size_t len)
{
	while (len) {
		ssize_t n = write(fd, s, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		s += n;
		len -= (size_t)n;
	}
	return 0;
}
