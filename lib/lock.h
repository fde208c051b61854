/* SPDX-License-Identifier: MIT */
/*
 * lib/lock.h - ranked mutexes and the lock-order checker (internal)
 *
 * Every mutex of the library is a struct sa_mutex with a rank and a name.
 * A thread may only take a lock of a higher rank than every lock it holds
 * already (equal ranks only through sa_mutex_lock_nested(), for sets of
 * like locks taken in one fixed order, such as all device locks at fork).
 * The order itself is written in mapper/mapper.h ("Lock ordering").
 *
 * Built with STALLOC_LOCKDEP (make SANITIZE=1, make check-tsan, LOCKDEP=1),
 * each thread keeps the stack of the locks it holds, and taking one out of
 * order aborts the process naming both locks, before it can deadlock.
 * Without it the wrappers are plain pthread calls: nothing on the hot path.
 */
#ifndef STALLOC_LIB_LOCK_H
#define STALLOC_LIB_LOCK_H

#include <pthread.h>
#include <stdbool.h>

/* Ranks, outermost first (mapper.h explains each). */
enum sa_lock_rank {
	SA_RANK_CTL = 10, /* the control socket thread's start and stop */
	SA_RANK_DEVS = 20, /* the device table */
	SA_RANK_DEV = 30, /* one device's allocator */
	SA_RANK_VMM = 40, /* one vmm space */
	SA_RANK_TREC_ALL = 50, /* the list of trace recorders */
	SA_RANK_TREC = 60, /* one recorder's buffer */
	SA_RANK_TREC_WRITE = 70, /* one recorder's file */
	SA_RANK_LEAF = 100, /* takes no other lock */
};

struct sa_mutex {
	pthread_mutex_t m;
	unsigned int rank;
	const char *name;
};

#define SA_MUTEX_INIT(rank_, name_)                         \
	{                                                   \
		PTHREAD_MUTEX_INITIALIZER, (rank_), (name_) \
	}

void sa_mutex_init(struct sa_mutex *l, unsigned int rank, const char *name);
void sa_mutex_destroy(struct sa_mutex *l);

/* The checker (lib/lock.c); called by the wrappers under STALLOC_LOCKDEP. */
void sa_lockdep_acquire(const struct sa_mutex *l, bool nested);
void sa_lockdep_release(const struct sa_mutex *l);
/* Locks the calling thread holds now (0 without STALLOC_LOCKDEP). */
unsigned int sa_lockdep_depth(void);

static inline void sa_mutex_lock(struct sa_mutex *l)
{
#ifdef STALLOC_LOCKDEP
	sa_lockdep_acquire(l, false);
#endif
	pthread_mutex_lock(&l->m);
}

/* Take @l although a lock of its rank is held (a fixed order among them). */
static inline void sa_mutex_lock_nested(struct sa_mutex *l)
{
#ifdef STALLOC_LOCKDEP
	sa_lockdep_acquire(l, true);
#endif
	pthread_mutex_lock(&l->m);
}

static inline void sa_mutex_unlock(struct sa_mutex *l)
{
	pthread_mutex_unlock(&l->m);
#ifdef STALLOC_LOCKDEP
	sa_lockdep_release(l);
#endif
}

/* pthread_cond_wait on @l: it is dropped and retaken at the same place. */
static inline void sa_cond_wait(pthread_cond_t *c, struct sa_mutex *l)
{
	pthread_cond_wait(c, &l->m);
}

#endif /* STALLOC_LIB_LOCK_H */
