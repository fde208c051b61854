/* SPDX-License-Identifier: MIT */
/*
 * lib/util.h - helpers shared by every subsystem (internal)
 *
 * Error reporting: a failing function records a message with sa_error(),
 * which also returns the error code so that the common pattern is
 * "return sa_error(-EINVAL, "vmm: ...", ...);".  The message goes to the
 * calling thread's buffer (stalloc_last_error()) and, depending on the log
 * level, to stderr.
 */
#ifndef STALLOC_LIB_UTIL_H
#define STALLOC_LIB_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <stalloc/stalloc.h>

#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#define SZ_1K ((size_t)1 << 10)
#define SZ_1M ((size_t)1 << 20)
#define SZ_2M ((size_t)2 << 20)
#define SZ_1G ((size_t)1 << 30)

#define __printf(a, b) __attribute__((format(printf, a, b)))

/* True when @x is a multiple of @a; @a need not be a power of two. */
static inline bool sa_is_multiple(uint64_t x, uint64_t a)
{
	return a && x % a == 0;
}

static inline bool sa_is_pow2(uint64_t x)
{
	return x && !(x & (x - 1));
}

/* Round @x up to a multiple of @a; false if the result would overflow. */
static inline bool sa_round_up(uint64_t x, uint64_t a, uint64_t *out)
{
	uint64_t r = x % a;

	if (!r) {
		*out = x;
		return true;
	}
	return !__builtin_add_overflow(x, a - r, out);
}

/* Record a message for stalloc_last_error() (and the debug log). */
void sa_record_error(int err, const char *fmt, ...) __printf(2, 3);
/*
 * Record @err with a message and evaluate to @err, for
 * "return sa_error(-EINVAL, ...);".  @err is evaluated twice: pass a
 * constant or a plain variable.
 */
#define sa_error(err, ...) (sa_record_error((err), __VA_ARGS__), (err))
/* Print a message at @level if the log level allows it. */
void sa_log(enum stalloc_log_level level, const char *fmt, ...) __printf(2, 3);
bool sa_log_enabled(enum stalloc_log_level level);

/*
 * Parse a byte count: decimal or 0x hex, optional suffix K, M, G, T (binary
 * units, an optional trailing "iB" or "B" accepted).  Returns 0 or -EINVAL.
 */
int sa_parse_size(const char *s, uint64_t *out);

/*
 * Read the whole file @path into a NUL-terminated buffer (free() it).
 * 0, or -ENOENT / -EIO / -ENOMEM with a message naming the file.
 */
int sa_read_file(const char *path, char **text, size_t *len);

/*
 * Expand a trace or plan path pattern into @out (@size bytes): %p the pid,
 * %d @device, %r the process's rank (RANK, else LOCAL_RANK, else 0: the
 * variables torchrun and torch.distributed set, so that each rank of a
 * data-parallel job has files of its own), %% a '%'.  0, or -EINVAL with a
 * message for an empty pattern, an unknown %-sequence, a rank that is not a
 * number, or a result that does not fit.
 */
int sa_expand_path(const char *pattern, int device, char *out, size_t size);

/* Write all of @s to @fd, retrying short writes; 0, or -1 with errno. */
int sa_write_all(int fd, const char *s, size_t len);

#endif /* STALLOC_LIB_UTIL_H */
