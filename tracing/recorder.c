// SPDX-License-Identifier: MIT
/*
 * tracing/recorder.c - write allocation traces (format v1) from a live process
 *
 * Each event is formatted straight into the current buffer under r->lock,
 * which also hands out SEQ, so buffer order is SEQ order.  When the buffer
 * is full (or a marker or flush asks), it is taken out and replaced under
 * the lock; the taking thread then writes it to the file *after* dropping
 * r->lock, holding only r->wlock.  Buffers carry a generation number and
 * are written strictly in generation order (r->wcond), so the file is in
 * SEQ order even when two threads write buffers at once.
 *
 * Invariants: r->cur always has room for one more line; r->written_gen is
 * the generation of the next buffer to be written.  Locking: r->lock is
 * held for a snprintf and never across I/O; r->wlock only across I/O;
 * neither is ever taken by the allocator's locks' holders in a way that
 * could deadlock, since the recorder takes no other lock.  A failed write
 * or allocation sets r->failed: one message, then silence.  After fork, the
 * child's recorders are inert (its buffers are the parent's to write).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <urcu/list.h>

#include "../lib/lock.h"
#include "../lib/util.h"
#include "recorder.h"

#define TREC_BUF (1U << 20)
#define TREC_LINE 160 /* longest line we format, with room to spare */

struct trec_buf {
	char *data;
	size_t len;
	uint64_t gen;
};

struct trec {
	struct sa_mutex lock;
	struct trec_buf cur;
	uint64_t seq;
	uint64_t next_gen;
	uint64_t events;
	struct sa_mutex wlock;
	pthread_cond_t wcond;
	uint64_t written_gen;
	int fd;
	int device;
	unsigned long fork_gen;
	bool failed;
	struct cds_list_head node;
	char path[PATH_MAX];
};

static CDS_LIST_HEAD(trec_all);
static struct sa_mutex trec_all_lock =
	SA_MUTEX_INIT(SA_RANK_TREC_ALL, "trec_all_lock");
static pthread_once_t trec_once = PTHREAD_ONCE_INIT;
static unsigned long trec_fork_gen;

static void trec_atexit(void)
{
	struct trec *r;

	sa_mutex_lock(&trec_all_lock);
	cds_list_for_each_entry(r, &trec_all, node)
		trec_flush(r);
	sa_mutex_unlock(&trec_all_lock);
}

static void trec_child(void)
{
	/* recorders opened before the fork belong to the parent */
	trec_fork_gen++;
	sa_mutex_init(&trec_all_lock, SA_RANK_TREC_ALL, "trec_all_lock");
	CDS_INIT_LIST_HEAD(&trec_all);
}

static void trec_init(void)
{
	atexit(trec_atexit);
	pthread_atfork(NULL, NULL, trec_child);
}

int trec_expand_path(const char *pattern, int device, char *out, size_t size)
{
	return sa_expand_path(pattern, device, out, size);
}

static int trec_new_buf(struct trec_buf *b, uint64_t gen)
{
	b->data = malloc(TREC_BUF);
	b->len = 0;
	b->gen = gen;
	return b->data ? 0 : -ENOMEM;
}

static void trec_fail(struct trec *r, const char *why)
{
	if (!__atomic_exchange_n(&r->failed, true, __ATOMIC_ACQ_REL))
		sa_log(STALLOC_LOG_ERROR,
		       "trace: %s: %s; recording stops, the job goes on",
		       r->path, why);
}

/* Write buffer @b in its turn; frees its data. */
static void trec_write(struct trec *r, struct trec_buf *b)
{
	sa_mutex_lock(&r->wlock);
	while (r->written_gen != b->gen)
		sa_cond_wait(&r->wcond, &r->wlock);
	if (!__atomic_load_n(&r->failed, __ATOMIC_ACQUIRE) &&
	    sa_write_all(r->fd, b->data, b->len))
		trec_fail(r, strerror(errno));
	r->written_gen++;
	pthread_cond_broadcast(&r->wcond);
	sa_mutex_unlock(&r->wlock);
	free(b->data);
	b->data = NULL;
}

/* Take the current buffer out if @force or full; r->lock held. */
static bool trec_take(struct trec *r, bool force, struct trec_buf *out)
{
	if (!(force ? r->cur.len > 0 : r->cur.len + TREC_LINE > TREC_BUF))
		return false;
	*out = r->cur;
	if (trec_new_buf(&r->cur, ++r->next_gen)) {
		/* keep going without a buffer: nothing more is recorded */
		r->cur.len = 0;
		__atomic_store_n(&r->failed, true, __ATOMIC_RELEASE);
	}
	return true;
}

static bool trec_live(const struct trec *r)
{
	return r && !__atomic_load_n(&r->failed, __ATOMIC_ACQUIRE) &&
	       r->fork_gen == trec_fork_gen;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* Append one event: @op 'a', 'f' or 'm'. */
static void trec_event(struct trec *r, char op, uint64_t id, uint64_t size,
		       uint64_t stream, const char *label)
{
	struct trec_buf full = { 0 };
	uint64_t ns = now_ns();
	bool take;
	char *at;
	int n;

	if (!trec_live(r))
		return;
	sa_mutex_lock(&r->lock);
	if (!r->cur.data) {
		sa_mutex_unlock(&r->lock);
		trec_fail(r, "out of memory");
		return;
	}
	at = r->cur.data + r->cur.len;
	if (op == 'a')
		n = snprintf(at, TREC_LINE,
			     "a %" PRIu64 " %" PRIu64 " %" PRIu64
			     " stream=%" PRIx64 " dev=%d ns=%" PRIu64 "\n",
			     r->seq, id, size, stream, r->device, ns);
	else if (op == 'f')
		n = snprintf(at, TREC_LINE,
			     "f %" PRIu64 " %" PRIu64 " stream=%" PRIx64
			     " dev=%d ns=%" PRIu64 "\n",
			     r->seq, id, stream, r->device, ns);
	else
		n = snprintf(at, TREC_LINE, "m %" PRIu64 " %.64s\n", r->seq,
			     label);
	if (n > 0 && n < TREC_LINE) {
		r->cur.len += (size_t)n;
		r->seq++;
		r->events++;
	}
	take = trec_take(r, op == 'm', &full);
	sa_mutex_unlock(&r->lock);
	if (take)
		trec_write(r, &full);
}

void trec_alloc(struct trec *r, uint64_t id, uint64_t size, uint64_t stream)
{
	trec_event(r, 'a', id, size, stream, NULL);
}

void trec_free(struct trec *r, uint64_t id, uint64_t stream)
{
	trec_event(r, 'f', id, 0, stream, NULL);
}

void trec_mark(struct trec *r, const char *label)
{
	char word[65];
	size_t i;

	/* a label is one word */
	for (i = 0; label && label[i] && i < sizeof(word) - 1; i++)
		word[i] = label[i] == ' ' || label[i] == '\t' ||
					  label[i] == '\n' ?
				  '_' :
				  label[i];
	word[i] = 0;
	trec_event(r, 'm', 0, 0, 0, i ? word : "mark");
}

int trec_flush(struct trec *r)
{
	struct trec_buf full = { 0 };
	bool take;

	if (!trec_live(r))
		return r && r->fork_gen == trec_fork_gen ? -EIO : 0;
	sa_mutex_lock(&r->lock);
	take = r->cur.data && trec_take(r, true, &full);
	sa_mutex_unlock(&r->lock);
	if (take)
		trec_write(r, &full);
	return trec_ok(r) ? 0 : -EIO;
}

int trec_open(const char *pattern, int device, struct trec **out)
{
	char head[160];
	struct trec *r;
	int err, n;

	pthread_once(&trec_once, trec_init);
	r = calloc(1, sizeof(*r));
	if (!r)
		return sa_error(-ENOMEM, "trace: out of memory");
	err = trec_expand_path(pattern, device, r->path, sizeof(r->path));
	if (err)
		goto err_free;
	r->fd = open(r->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (r->fd < 0) {
		err = sa_error(-EIO, "trace: %s: %s", r->path, strerror(errno));
		goto err_free;
	}
	n = snprintf(head, sizeof(head),
		     "stalloc-trace 1\n# stalloc %s, pid %d, device %d\n",
		     stalloc_version_string(), (int)getpid(), device);
	if (sa_write_all(r->fd, head, (size_t)n)) {
		err = sa_error(-EIO, "trace: %s: %s", r->path, strerror(errno));
		goto err_close;
	}
	if (trec_new_buf(&r->cur, 0)) {
		err = sa_error(-ENOMEM, "trace: out of memory");
		goto err_close;
	}
	r->device = device;
	r->fork_gen = trec_fork_gen;
	sa_mutex_init(&r->lock, SA_RANK_TREC, "trec->lock");
	sa_mutex_init(&r->wlock, SA_RANK_TREC_WRITE, "trec->wlock");
	pthread_cond_init(&r->wcond, NULL);
	sa_mutex_lock(&trec_all_lock);
	cds_list_add(&r->node, &trec_all);
	sa_mutex_unlock(&trec_all_lock);
	*out = r;
	return 0;

err_close:
	close(r->fd);
	unlink(r->path);
err_free:
	free(r);
	return err;
}

int trec_close(struct trec *r)
{
	int err;

	if (!r)
		return 0;
	err = trec_flush(r);
	if (r->fork_gen == trec_fork_gen) {
		sa_mutex_lock(&trec_all_lock);
		cds_list_del(&r->node);
		sa_mutex_unlock(&trec_all_lock);
	}
	if (close(r->fd) && !err)
		err = sa_error(-EIO, "trace: %s: %s", r->path, strerror(errno));
	else if (err)
		err = sa_error(-EIO, "trace: %s: events were lost", r->path);
	free(r->cur.data);
	sa_mutex_destroy(&r->lock);
	sa_mutex_destroy(&r->wlock);
	pthread_cond_destroy(&r->wcond);
	free(r);
	return err;
}

uint64_t trec_events(const struct trec *r)
{
	return __atomic_load_n(&r->events, __ATOMIC_RELAXED);
}

bool trec_ok(const struct trec *r)
{
	return !__atomic_load_n(&r->failed, __ATOMIC_ACQUIRE);
}

const char *trec_path(const struct trec *r)
{
	return r->path;
}
