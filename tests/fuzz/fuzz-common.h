/* SPDX-License-Identifier: MIT */
/*
 * tests/fuzz/fuzz-common.h - helpers shared by the libFuzzer targets
 *
 * The plan reader and the planner take a path, not a buffer, so the
 * targets put each input in a memfd and pass "/proc/self/fd/N"; the
 * library opens that path afresh and reads from offset 0.  Plans written
 * by the planner target go to a private directory under /dev/shm (the
 * writer needs a directory: it writes PATH.tmp and renames it).
 */
#ifndef STALLOC_TESTS_FUZZ_COMMON_H
#define STALLOC_TESTS_FUZZ_COMMON_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <stalloc/stalloc.h>

/* Abort with a message: libFuzzer saves the input as a crash. */
#define fuzz_fail(...)                                                        \
	do {                                                                  \
		fprintf(stderr, "fuzz: " __VA_ARGS__);                        \
		fprintf(stderr, " (last error: %s)\n", stalloc_last_error()); \
		abort();                                                      \
	} while (0)

/**
 * struct fuzz_file - a memfd holding the current input
 * @fd: the memfd, or -1 before the first use
 * @path: "/proc/self/fd/N"
 */
struct fuzz_file {
	int fd;
	char path[64];
};

/* Replace the contents of @f with @len bytes of @data. */
static inline void fuzz_file_set(struct fuzz_file *f, const char *name,
				 const void *data, size_t len)
{
	const char *p = data;
	ssize_t n;

	if (f->fd <= 0) {
		f->fd = memfd_create(name, MFD_CLOEXEC);
		if (f->fd < 0) {
			perror("fuzz: memfd_create");
			abort();
		}
		snprintf(f->path, sizeof(f->path), "/proc/self/fd/%d", f->fd);
	}
	if (ftruncate(f->fd, 0) < 0 || lseek(f->fd, 0, SEEK_SET) < 0) {
		perror("fuzz: ftruncate");
		abort();
	}
	while (len) {
		n = write(f->fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			perror("fuzz: write");
			abort();
		}
		p += n;
		len -= (size_t)n;
	}
}

/*
 * A scratch file in /dev/shm for plans written back by a target (named
 * after @tag), made on first use and removed at exit.
 */
static char fuzz_dir[64], fuzz_out[96];

static void fuzz_scratch_cleanup(void)
{
	unlink(fuzz_out);
	rmdir(fuzz_dir);
}

static inline const char *fuzz_scratch(const char *tag)
{
	if (fuzz_out[0])
		return fuzz_out;
	snprintf(fuzz_dir, sizeof(fuzz_dir), "/dev/shm/stalloc-fuzz-%s.XXXXXX",
		 tag);
	if (!mkdtemp(fuzz_dir)) {
		perror("fuzz: mkdtemp");
		abort();
	}
	snprintf(fuzz_out, sizeof(fuzz_out), "%s/plan", fuzz_dir);
	atexit(fuzz_scratch_cleanup);
	return fuzz_out;
}

#endif /* STALLOC_TESTS_FUZZ_COMMON_H */
