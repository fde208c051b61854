/* SPDX-License-Identifier: MIT */
/*
 * tracing/recorder.h - the native trace recorder (internal)
 *
 * Writes allocation traces in text format v1 (Documentation/trace-format.rst)
 * with stream=, dev= and ns= keys: one file per process and device.  Any
 * thread may record; events get their SEQ in the order they are recorded.
 * Buffered: lines go to a 1 MiB buffer; a full buffer is written by the
 * thread that filled it after it has let go of the buffer lock, markers
 * and close flush, and so does process exit.  A write that fails disables
 * the recorder with one message: the training job goes on untraced.
 */
#ifndef STALLOC_TRACING_RECORDER_H
#define STALLOC_TRACING_RECORDER_H

#include <stdbool.h>
#include <stdint.h>

struct trec;

/* Expand a path pattern: sa_expand_path() of lib/util.h (%p, %d, %r, %%). */
int trec_expand_path(const char *pattern, int device, char *out, size_t size);

/* Create (truncate) the trace file for @device from @pattern. */
int trec_open(const char *pattern, int device, struct trec **out);
/* Record an allocation, a free, a marker (which flushes). */
void trec_alloc(struct trec *r, uint64_t id, uint64_t size, uint64_t stream);
void trec_free(struct trec *r, uint64_t id, uint64_t stream);
void trec_mark(struct trec *r, const char *label);
/* Write what is buffered; 0 or -EIO. */
int trec_flush(struct trec *r);
/* Flush, close and free; 0 or -EIO if anything was lost. */
int trec_close(struct trec *r);
/* Events recorded so far, and whether the recorder still writes. */
uint64_t trec_events(const struct trec *r);
bool trec_ok(const struct trec *r);
const char *trec_path(const struct trec *r);

#endif /* STALLOC_TRACING_RECORDER_H */
