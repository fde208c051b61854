// SPDX-License-Identifier: MIT
/*
 * tests/test-recorder.c - the native trace recorder
 *
 * Path patterns, a round trip (threads record, the planner's parser reads
 * the file back and finds every event, in SEQ order, with its keys; the
 * planner finds the iterations), and failures: an unwritable path, a file
 * system that fills up (the recorder stops, the caller goes on), fork.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "planner/planner.h"
#include "tracing/recorder.h"

static char dir[] = "/tmp/stalloc-rec-XXXXXX";

static void test_expand(void **state)
{
	char out[256], want[64];

	(void)state;
	setenv("RANK", "3", 1);
	assert_int_equal(trec_expand_path("t-%p-%d-%r-%%.trace", 7, out,
					  sizeof(out)),
			 0);
	snprintf(want, sizeof(want), "t-%d-7-3-%%.trace", (int)getpid());
	assert_string_equal(out, want);
	unsetenv("RANK");
	assert_int_equal(trec_expand_path("%r", 0, out, sizeof(out)), 0);
	assert_string_equal(out, "0");
	assert_int_equal(trec_expand_path("x%q", 0, out, sizeof(out)), -EINVAL);
	assert_non_null(strstr(stalloc_last_error(), "%q"));
	assert_int_equal(trec_expand_path("x%", 0, out, sizeof(out)), -EINVAL);
	assert_int_equal(trec_expand_path("", 0, out, sizeof(out)), -EINVAL);
	assert_int_equal(trec_expand_path("abcdefgh%p", 0, out, 8), -EINVAL);
}

#define THREADS 4
#define PER_THREAD 20000

struct worker {
	struct trec *r;
	int idx;
};

static void *work(void *arg)
{
	struct worker *w = arg;
	uint64_t i, base = (uint64_t)w->idx << 32;

	for (i = 0; i < PER_THREAD; i++) {
		trec_alloc(w->r, base | i, 512 * (1 + i % 7),
			   0x100 + (uint64_t)w->idx);
		if (i % 2)
			trec_free(w->r, base | (i - 1),
				  0x100 + (uint64_t)w->idx);
	}
	return NULL;
}

static void test_roundtrip(void **state)
{
	char pattern[256], path[256];
	struct worker w[THREADS];
	pthread_t t[THREADS];
	struct trace tr;
	struct trec *r;
	size_t i, allocs = 0, frees = 0, marks = 0;

	(void)state;
	snprintf(pattern, sizeof(pattern), "%s/rt-%%d.trace", dir);
	assert_int_equal(trec_open(pattern, 2, &r), 0);
	snprintf(path, sizeof(path), "%s/rt-2.trace", dir);
	assert_string_equal(trec_path(r), path);
	trec_mark(r, "iteration");
	for (i = 0; i < THREADS; i++) {
		w[i] = (struct worker){ r, (int)i };
		assert_int_equal(pthread_create(&t[i], NULL, work, &w[i]), 0);
	}
	for (i = 0; i < 5; i++)
		trec_mark(r, "in the middle"); /* one word on disk */
	for (i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	assert_int_equal(trec_events(r), THREADS * PER_THREAD * 3 / 2 + 6);
	assert_int_equal(trec_close(r), 0);
	/* the planner's parser checks SEQ order and every pairing */
	assert_int_equal(trace_load(path, &tr), 0);
	for (i = 0; i < tr.nr; i++) {
		const struct trace_event *e = &tr.ev[i];

		allocs += e->op == TRACE_ALLOC;
		frees += e->op == TRACE_FREE;
		marks += e->op == TRACE_MARK;
		if (e->op == TRACE_ALLOC) {
			assert_int_equal(e->dev, 2);
			assert_int_equal(e->stream, 0x100 + (e->id >> 32));
			assert_true(e->ns > 0);
		}
	}
	assert_int_equal(allocs, THREADS * PER_THREAD);
	assert_int_equal(frees, THREADS * PER_THREAD / 2);
	assert_int_equal(marks, 6);
	assert_true(trace_mark_is(&tr, &tr.ev[0], "iteration"));
	trace_free(&tr);
	unlink(path);
}

/* What the runtime's trace mode will do: record iterations, then plan. */
static void test_plan_recorded(void **state)
{
	char pattern[256];
	struct stalloc_plan *p;
	struct stalloc_plan_summary s;
	struct trec *r;
	uint64_t id = 1, k, j, weights = 0;

	(void)state;
	snprintf(pattern, sizeof(pattern), "%s/plan-%%p.trace", dir);
	assert_int_equal(trec_open(pattern, 0, &r), 0);
	trec_alloc(r, weights = id++, 1 << 20, 0);
	for (k = 0; k < 4; k++) {
		uint64_t act[8];

		trec_mark(r, "iteration");
		for (j = 0; j < 8; j++)
			trec_alloc(r, act[j] = id++, 4096 << j, 0);
		for (j = 8; j-- > 0;)
			trec_free(r, act[j], 0);
	}
	(void)weights;
	assert_int_equal(trec_close(r), 0);
	snprintf(pattern, sizeof(pattern), "%s/plan-%d.trace", dir,
		 (int)getpid());
	assert_int_equal(stalloc_plan_file(pattern, NULL, &p), 0);
	stalloc_plan_summary(p, &s);
	assert_int_equal(s.iterations, 4);
	assert_int_equal(s.dynamic_requests, 0);
	assert_int_equal(s.static_requests, 8);
	assert_int_equal(s.persistent_requests, 1);
	stalloc_plan_free(p);
	unlink(pattern);
}

static void test_unwritable(void **state)
{
	struct trec *r = NULL;

	(void)state;
	assert_int_equal(trec_open("/nonexistent-dir/x.trace", 0, &r), -EIO);
	assert_non_null(strstr(stalloc_last_error(), "/nonexistent-dir"));
	assert_null(r);
}

/*
 * A file that cannot grow past 64 KiB (RLIMIT_FSIZE, in a child): the
 * recorder stops at the first failed write, says so once, and the caller
 * goes on; close reports the loss.
 */
static int full_child(const char *path)
{
	struct rlimit lim = { 65536, 65536 };
	struct trec *r;
	int i;

	signal(SIGXFSZ, SIG_IGN);
	stalloc_set_log_level(STALLOC_LOG_NONE);
	if (setrlimit(RLIMIT_FSIZE, &lim) || trec_open(path, 0, &r))
		return 2;
	for (i = 0; i < 50000; i++)
		trec_alloc(r, (uint64_t)i, 512, 0);
	if (trec_ok(r))
		return 3;
	trec_alloc(r, 1ULL << 40, 512, 0); /* ignored, no crash */
	return trec_close(r) == -EIO ? 0 : 4;
}

static void test_disk_full(void **state)
{
	char path[256];
	int status;
	pid_t pid;

	(void)state;
	snprintf(path, sizeof(path), "%s/full.trace", dir);
	pid = fork();
	if (pid == 0)
		_exit(full_child(path));
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	unlink(path);
}

static void test_fork(void **state)
{
	char pattern[256];
	struct stat before, after;
	struct trec *r;
	int status;
	pid_t pid;

	(void)state;
	snprintf(pattern, sizeof(pattern), "%s/fork.trace", dir);
	assert_int_equal(trec_open(pattern, 0, &r), 0);
	trec_alloc(r, 1, 512, 0);
	assert_int_equal(trec_flush(r), 0);
	assert_int_equal(stat(pattern, &before), 0);
	pid = fork();
	if (pid == 0) {
		int i;

		/* the child's events must not reach the parent's file */
		for (i = 0; i < 10000; i++)
			trec_alloc(r, 100 + (uint64_t)i, 512, 0);
		trec_mark(r, "iteration");
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_int_equal(stat(pattern, &after), 0);
	assert_int_equal(after.st_size, before.st_size);
	trec_free(r, 1, 0);
	assert_int_equal(trec_close(r), 0);
	unlink(pattern);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_expand),
		cmocka_unit_test(test_roundtrip),
		cmocka_unit_test(test_plan_recorded),
		cmocka_unit_test(test_unwritable),
		cmocka_unit_test(test_disk_full),
		cmocka_unit_test(test_fork),
	};
	int ret;

	if (!mkdtemp(dir))
		return 1;
	ret = cmocka_run_group_tests_name("recorder", tests, NULL, NULL);
	rmdir(dir);
	return ret;
}
