// SPDX-License-Identifier: MIT
/*
 * lib/lock.c - the lock-order checker behind lib/lock.h
 *
 * Each thread keeps, in thread-local storage, the locks it holds in the
 * order it took them (at most LOCKDEP_DEPTH; deeper nesting is itself a
 * bug here).  Taking a lock whose rank is not above the innermost held
 * one (or, for a nested take, below it) prints both names and ranks and
 * aborts: a wrong order is a deadlock waiting for the right interleaving,
 * and the tests must find it on any interleaving.  Releasing in another
 * order than taking is allowed (the entry is removed wherever it is).
 *
 * Locking: none; the state is per thread.
 */
#include <stdio.h>
#include <stdlib.h>

#include "lock.h"

#define LOCKDEP_DEPTH 16

static __thread const struct sa_mutex *held[LOCKDEP_DEPTH];
static __thread unsigned int depth;

void sa_mutex_init(struct sa_mutex *l, unsigned int rank, const char *name)
{
	pthread_mutex_init(&l->m, NULL);
	l->rank = rank;
	l->name = name;
}

void sa_mutex_destroy(struct sa_mutex *l)
{
	pthread_mutex_destroy(&l->m);
}

static void lockdep_fail(const struct sa_mutex *l, const struct sa_mutex *top,
			 const char *why)
{
	fprintf(stderr,
		"stalloc: lock order violation: taking \"%s\" (rank %u) "
		"while holding \"%s\" (rank %u): %s\n",
		l->name, l->rank, top ? top->name : "-", top ? top->rank : 0,
		why);
	abort();
}

void sa_lockdep_acquire(const struct sa_mutex *l, bool nested)
{
	const struct sa_mutex *top = depth ? held[depth - 1] : NULL;
	unsigned int i;

	for (i = 0; i < depth; i++)
		if (held[i] == l)
			lockdep_fail(l, held[i], "already held by this thread");
	if (top && (nested ? l->rank < top->rank : l->rank <= top->rank))
		lockdep_fail(l, top,
			     "see \"Lock ordering\" in mapper/mapper.h");
	if (depth == LOCKDEP_DEPTH)
		lockdep_fail(l, top, "too many locks held at once");
	held[depth++] = l;
}

void sa_lockdep_release(const struct sa_mutex *l)
{
	unsigned int i;

	for (i = depth; i-- > 0;)
		if (held[i] == l) {
			for (; i + 1 < depth; i++)
				held[i] = held[i + 1];
			depth--;
			return;
		}
	lockdep_fail(l, NULL, "released but not held by this thread");
}

unsigned int sa_lockdep_depth(void)
{
	return depth;
}
