/* SPDX-License-Identifier: MIT */
/*
 * mapper/ctl.h - the control socket's request handling (internal; the
 * fuzz target drives ctl_request() directly)
 */
#ifndef STALLOC_MAPPER_CTL_H
#define STALLOC_MAPPER_CTL_H

#include <stdbool.h>
#include <stddef.h>

#include "../lib/util.h"

/* Longest request line, newline included. */
#define CTL_MAX_REQ 256

/* A growing answer; @oom once an allocation failed (the rest is dropped). */
struct ctl_buf {
	char *p;
	size_t len;
	size_t cap;
	bool oom;
};

void ctl_printf(struct ctl_buf *b, const char *fmt, ...) __printf(2, 3);
/* Room for @more bytes; false (and @oom) if there is no memory. */
bool ctl_grow(struct ctl_buf *b, size_t more);

/*
 * Answer one request line of @len bytes (a trailing newline allowed) into
 * @out.  @owner: the client runs as the process's user (trim needs it).
 * Return: 0, or -EINVAL (malformed), -E2BIG, -ENOENT (unknown command),
 * -EPERM, -ENOMEM; ctl_strerror() says it in words.
 */
int ctl_request(const char *req, size_t len, bool owner, struct ctl_buf *out);
const char *ctl_strerror(int err);

#endif /* STALLOC_MAPPER_CTL_H */
