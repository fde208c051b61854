// SPDX-License-Identifier: MIT
/*
 * tests/test-lock.c - the lock-order checker (lib/lock.h)
 *
 * Built with STALLOC_LOCKDEP whatever the build, so that the checker is
 * exercised in every make check: locks taken in rank order pass, the
 * reverse order, a second take of a held lock and a release of a lock not
 * held abort the (forked) process with both names on stderr.
 */
#define STALLOC_LOCKDEP 1

#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "lib/lock.h"

static struct sa_mutex dev_a = SA_MUTEX_INIT(SA_RANK_DEV, "mdev->lock");
static struct sa_mutex dev_b = SA_MUTEX_INIT(SA_RANK_DEV, "mdev->lock (b)");
static struct sa_mutex space = SA_MUTEX_INIT(SA_RANK_VMM, "vmm_space->lock");
static struct sa_mutex table = SA_MUTEX_INIT(SA_RANK_DEVS, "devs_lock");

static void test_in_order(void **state)
{
	(void)state;
	sa_mutex_lock(&table);
	sa_mutex_lock(&dev_a);
	sa_mutex_lock_nested(&dev_b); /* like locks, in a fixed order */
	sa_mutex_lock(&space);
	assert_int_equal(sa_lockdep_depth(), 4);
	/* released out of order: allowed */
	sa_mutex_unlock(&dev_a);
	sa_mutex_unlock(&space);
	sa_mutex_unlock(&table);
	sa_mutex_unlock(&dev_b);
	assert_int_equal(sa_lockdep_depth(), 0);
}

/*
 * Run @fn in a child; true if it died of SIGABRT with @a and @b in what it
 * wrote to stderr.
 */
static bool aborts_naming(void (*fn)(void), const char *a, const char *b)
{
	char out[1024] = "";
	int fds[2], status;
	ssize_t n, len = 0;
	pid_t pid;

	assert_int_equal(pipe(fds), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (!pid) {
		signal(SIGABRT, SIG_DFL);
		dup2(fds[1], 2);
		close(fds[0]);
		fn();
		_exit(0);
	}
	close(fds[1]);
	while ((n = read(fds[0], out + len, sizeof(out) - 1 - (size_t)len)) > 0)
		len += n;
	close(fds[0]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGABRT) {
		fprintf(stderr, "child did not abort (status %d): %s\n", status,
			out);
		return false;
	}
	if (!strstr(out, a) || !strstr(out, b)) {
		fprintf(stderr, "abort message lacks \"%s\"/\"%s\": %s\n", a, b,
			out);
		return false;
	}
	return true;
}

static void reverse_order(void)
{
	sa_mutex_lock(&space);
	sa_mutex_lock(&dev_a); /* a device lock inside a space lock */
}

static void same_rank_unnested(void)
{
	sa_mutex_lock(&dev_a);
	sa_mutex_lock(&dev_b);
}

static void twice(void)
{
	sa_mutex_lock(&table);
	sa_mutex_lock_nested(&table);
}

static void not_held(void)
{
	sa_mutex_unlock(&dev_a);
}

static void test_violations(void **state)
{
	(void)state;
	assert_true(aborts_naming(reverse_order, "\"mdev->lock\"",
				  "\"vmm_space->lock\""));
	assert_true(aborts_naming(same_rank_unnested, "\"mdev->lock (b)\"",
				  "\"mdev->lock\""));
	assert_true(aborts_naming(twice, "\"devs_lock\"", "already held"));
	assert_true(aborts_naming(not_held, "\"mdev->lock\"", "not held"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_in_order),
		cmocka_unit_test(test_violations),
	};

	return cmocka_run_group_tests_name("lock", tests, NULL, NULL);
}
