// SPDX-License-Identifier: MIT
/*
 * tools/cli/replay/stamp.c - --stamp: does every live allocation keep its
 * bytes?
 *
 * The overlap check (check_overlap()) compares addresses; it cannot see
 * two live allocations at different addresses that share physical memory
 * (a chunk lent while still in use, an alias mapped at two places), or a
 * live allocation whose chunk was unmapped or replaced under it.  With
 * --stamp the replay writes a stamp (the allocation's trace ID, scrambled)
 * into every allocation when it is handed out: at its first and last
 * eight bytes and at the first eight bytes of each STAMP_STEP-aligned
 * block inside it, so that every chunk it covers holds one.  Before the
 * allocation is freed, and at the end for those still live, every stamp
 * is read back: one that changed is a corruption, reported with the
 * allocation and the stamp found (whose allocation wrote over it); a read
 * that faults is an allocation whose memory was unmapped under it.
 *
 * Only libstalloc's policies are stamped, and only on a backend whose
 * device memory the host can read and write (the host backend, the fake
 * driver).  Cost: one write and one read per 64 KiB of each allocation;
 * the pages written are touched, so the replay's resident memory grows by
 * a page per 64 KiB held at once.
 *
 * The checker's own test (tests/replay.sh) plants both faults with
 * --stamp-clobber share:ID or unmap:ID: when allocation ID is
 * handed out, the live allocation handed out before it gets ID's stamp
 * over its first one, or loses access to its first page (mprotect).
 *
 * Single-threaded, like the replay; the fault handler jumps back to the
 * check that faulted.
 */
#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tool.h"

#define STAMP_STEP (64ULL << 10)
#define STAMP_SALT 0x5a1105eedULL

static sigjmp_buf stamp_env;
static volatile sig_atomic_t stamp_armed;

static void stamp_fault(int sig)
{
	if (!stamp_armed)
		return; /* not ours: the default action follows */
	stamp_armed = 0;
	siglongjmp(stamp_env, sig);
}

static enum { CLOBBER_NONE, CLOBBER_SHARE, CLOBBER_UNMAP } clobber;
static uint64_t clobber_id;

/* --stamp-clobber share:ID|unmap:ID (the checker's own test), or NULL. */
static int clobber_parse(const char *v)
{
	char *end;

	if (!v || !*v)
		return 0;
	if (!strncmp(v, "share:", 6))
		clobber = CLOBBER_SHARE;
	else if (!strncmp(v, "unmap:", 6))
		clobber = CLOBBER_UNMAP;
	else
		goto bad;
	clobber_id = strtoull(v + 6, &end, 10);
	if (end != v + 6 && !*end)
		return 0;
bad:
	fprintf(stderr,
		"stalloc-replay: --stamp-clobber %s: not share:ID or "
		"unmap:ID\n",
		v);
	return -1;
}

/*
 * The handler for faults during a check (SIGSEGV, SIGBUS), once: a fault
 * outside a check takes the default action, and one inside takes the
 * handler off (installed again for the next check).
 */
static int stamp_handler(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = stamp_fault;
	sa.sa_flags = SA_NODEFER | SA_RESETHAND;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGSEGV, &sa, NULL) || sigaction(SIGBUS, &sa, NULL)) {
		perror("stalloc-replay: --stamp: sigaction");
		return -1;
	}
	return 0;
}

/* Take the fault to plant (@clobber, or NULL), install the handler. */
int stamp_init(const char *clobber_arg)
{
	return clobber_parse(clobber_arg) ?: stamp_handler();
}

static uint64_t stamp_of(uint64_t id)
{
	return (id + 1) * 0x9e3779b97f4a7c15ULL ^ STAMP_SALT;
}

/* Trace ID of stamp @v, if @v is one (else UINT64_MAX). */
static uint64_t id_of(uint64_t v)
{
	/* 0x9e3779b97f4a7c15 * 0xf1de83e19937733d == 1 mod 2^64 */
	uint64_t id = (v ^ STAMP_SALT) * 0xf1de83e19937733dULL;

	return id ? id - 1 : UINT64_MAX;
}

/*
 * Call @fn on each stamp position of [@start, @end) (8-byte aligned, the
 * last one at most end - 8) until it returns false.
 */
static bool each_pos(uint64_t start, uint64_t end,
		     bool (*fn)(uint64_t pos, uint64_t v), uint64_t v)
{
	uint64_t first = (start + 7) & ~7ULL, last, at;

	if (end < first + 8)
		return true;
	last = (end - 8) & ~7ULL;
	if (!fn(first, v))
		return false;
	for (at = (first / STAMP_STEP + 1) * STAMP_STEP; at < last;
	     at += STAMP_STEP)
		if (!fn(at, v))
			return false;
	return last == first || fn(last, v);
}

static bool put(uint64_t pos, uint64_t v)
{
	*(volatile uint64_t *)(uintptr_t)pos = v;
	return true;
}

static uint64_t bad_pos, bad_val;

static bool same(uint64_t pos, uint64_t v)
{
	uint64_t got = *(volatile uint64_t *)(uintptr_t)pos;

	if (got == v)
		return true;
	bad_pos = pos;
	bad_val = got;
	return false;
}

/* Run @fn over @rc's stamps; a fault becomes -1, a changed stamp 1. */
static int guarded(const struct rec *rc, bool (*fn)(uint64_t, uint64_t))
{
	bool intact;

	stamp_armed = 1;
	if (sigsetjmp(stamp_env, 1)) {
		stamp_handler(); /* SA_RESETHAND took it off */
		return -1;
	}
	intact = each_pos(rc->start, rc->end, fn, stamp_of(rc->id));
	stamp_armed = 0;
	return !intact;
}

/* Plant the fault --stamp-clobber names on the last live one. */
static void plant(struct replay *r, const struct rec *rc)
{
	long page = sysconf(_SC_PAGESIZE);
	const struct rec *v = rc;

	while (v > r->recs && !(--v)->live)
		;
	if (!v->live || v == rc || v->end < v->start + 8)
		return;
	if (clobber == CLOBBER_SHARE)
		*(volatile uint64_t *)(uintptr_t)((v->start + 7) & ~7ULL) =
			stamp_of(rc->id);
	else
		mprotect((void *)(uintptr_t)(v->start & ~(uint64_t)(page - 1)),
			 (size_t)page, PROT_NONE);
}

void stamp_put(struct replay *r, const struct rec *rc)
{
	if (clobber && rc->id == clobber_id)
		plant(r, rc);
	if (guarded(rc, put) < 0) {
		r->corrupt++;
		fprintf(stderr,
			"stalloc-replay: %s: --stamp: allocation %" PRIu64
			" [0x%" PRIx64 ", 0x%" PRIx64
			") is not writable where it was handed out\n",
			r->a->trace, rc->id, rc->start, rc->end);
	}
}

void stamp_check(struct replay *r, const struct rec *rc, const char *when)
{
	uint64_t other;
	int err = guarded(rc, same);

	if (!err)
		return;
	r->corrupt++;
	if (err < 0) {
		fprintf(stderr,
			"stalloc-replay: %s: --stamp: allocation %" PRIu64
			" [0x%" PRIx64 ", 0x%" PRIx64
			") faults %s: its memory was unmapped while live\n",
			r->a->trace, rc->id, rc->start, rc->end, when);
		return;
	}
	other = id_of(bad_val);
	if (other <= r->max_id && other != rc->id)
		fprintf(stderr,
			"stalloc-replay: %s: --stamp: allocation %" PRIu64
			" [0x%" PRIx64 ", 0x%" PRIx64
			") lost its bytes at 0x%" PRIx64
			" %s: allocation %" PRIu64
			" wrote there (memory shared "
			"while both were live)\n",
			r->a->trace, rc->id, rc->start, rc->end, bad_pos, when,
			other);
	else
		fprintf(stderr,
			"stalloc-replay: %s: --stamp: allocation %" PRIu64
			" [0x%" PRIx64 ", 0x%" PRIx64
			") lost its bytes at 0x%" PRIx64
			" %s: found 0x%016" PRIx64 " (memory replaced while "
			"live)\n",
			r->a->trace, rc->id, rc->start, rc->end, bad_pos, when,
			bad_val);
}
