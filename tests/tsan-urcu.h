/* SPDX-License-Identifier: MIT */
/*
 * tests/tsan-urcu.h - make liburcu's pointer publication visible to TSan
 *
 * Forced into every file of the ThreadSanitizer build (make check-tsan,
 * -include).  liburcu 0.13 publishes pointers with inline assembly
 * (rcu_set_pointer: a barrier and a plain store) and reads them with a
 * volatile load (rcu_dereference): correct on the hardware, invisible to
 * TSan, which then reports every first use of a published object (a
 * device's state, a chunk) as a race with its initialisation.  Here the
 * same operations become __atomic release stores and acquire loads --
 * what they mean, and what TSan understands.  Including the urcu headers
 * first means their include guards keep these definitions in force.
 */
#ifndef STALLOC_TESTS_TSAN_URCU_H
#define STALLOC_TESTS_TSAN_URCU_H

/*
 * Forced in before a file's own first lines: files that ask for the GNU
 * API themselves (the fake driver) must still get it.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <urcu/pointer.h>

#undef rcu_dereference
#define rcu_dereference(p) __atomic_load_n(&(p), __ATOMIC_ACQUIRE)
#undef rcu_set_pointer
#define rcu_set_pointer(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#undef rcu_assign_pointer
#define rcu_assign_pointer(p, v) __atomic_store_n(&(p), (v), __ATOMIC_RELEASE)

#endif /* STALLOC_TESTS_TSAN_URCU_H */
