// SPDX-License-Identifier: MIT
/*
 * tests/test-util.c - public API basics and the shared helpers in lib/
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "lib/util.h"

static void test_version(void **state)
{
	char buf[32];

	(void)state;
	assert_int_equal(stalloc_version(), STALLOC_VERSION);
	snprintf(buf, sizeof(buf), "%d.%d.%d", STALLOC_VERSION_MAJOR,
		 STALLOC_VERSION_MINOR, STALLOC_VERSION_PATCH);
	assert_string_equal(stalloc_version_string(), buf);
	assert_true(STALLOC_VERSION_NUM(1, 2, 3) >
		    STALLOC_VERSION_NUM(1, 1, 99));
}

static void test_parse_size(void **state)
{
	static const struct {
		const char *s;
		uint64_t v;
	} good[] = {
		{ "0", 0 },
		{ "4096", 4096 },
		{ "0x1000", 4096 },
		{ "2M", 2ULL << 20 },
		{ "2MiB", 2ULL << 20 },
		{ "2mb", 2ULL << 20 },
		{ "16G", 16ULL << 30 },
		{ "1T", 1ULL << 40 },
		{ "64k", 65536 },
		{ "7B", 7 },
	};
	static const char *const bad[] = { "",
					   "-1",
					   "+3",
					   "M",
					   "2X",
					   "2MM",
					   "1e3",
					   "99999999999999999999",
					   "17000000000000G",
					   " 5",
					   "\t5" };
	uint64_t v;
	size_t i;

	(void)state;
	for (i = 0; i < ARRAY_SIZE(good); i++) {
		assert_int_equal(sa_parse_size(good[i].s, &v), 0);
		assert_int_equal(v, good[i].v);
		/* the public twin the tools use */
		assert_int_equal(stalloc_parse_size(good[i].s, &v), 0);
		assert_int_equal(v, good[i].v);
	}
	for (i = 0; i < ARRAY_SIZE(bad); i++) {
		assert_int_equal(sa_parse_size(bad[i], &v), -EINVAL);
		assert_int_equal(stalloc_parse_size(bad[i], &v), -EINVAL);
	}
}

static void test_errors(void **state)
{
	enum stalloc_log_level old;

	(void)state;
	old = stalloc_set_log_level(STALLOC_LOG_NONE);
	assert_int_equal(sa_error(-ENOMEM, "vmm: %s %d", "device", 3), -ENOMEM);
	assert_string_equal(stalloc_last_error(), "vmm: device 3");
	assert_string_equal(stalloc_strerror(-EINVAL), "invalid argument");
	assert_non_null(stalloc_strerror(-12345));
	assert_int_equal(stalloc_set_log_level(old), STALLOC_LOG_NONE);
}

static void test_expand_path(void **state)
{
	char out[256], want[64];

	(void)state;
	unsetenv("RANK");
	unsetenv("LOCAL_RANK");
	assert_int_equal(sa_expand_path("r%r-%d.plan", 2, out, sizeof(out)), 0);
	assert_string_equal(out, "r0-2.plan");
	setenv("LOCAL_RANK", "5", 1);
	assert_int_equal(sa_expand_path("r%r", 0, out, sizeof(out)), 0);
	assert_string_equal(out, "r5");
	setenv("RANK", "12", 1); /* RANK wins over LOCAL_RANK */
	assert_int_equal(
		sa_expand_path("/t/%r/%p-%d-%%.trace", 7, out, sizeof(out)), 0);
	snprintf(want, sizeof(want), "/t/12/%d-7-%%.trace", (int)getpid());
	assert_string_equal(out, want);
	/* exactly fits, and one byte short */
	assert_int_equal(sa_expand_path("ab%r", 0, out, 5), 0);
	assert_string_equal(out, "ab12");
	assert_int_equal(sa_expand_path("ab%r", 0, out, 4), -EINVAL);
	assert_non_null(strstr(stalloc_last_error(), "too long"));
	assert_int_equal(sa_expand_path("abcd", 0, out, 4), -EINVAL);
	/* a rank that is not a number must not become part of a path */
	setenv("RANK", "../x", 1);
	assert_int_equal(sa_expand_path("%r", 0, out, sizeof(out)), -EINVAL);
	assert_non_null(strstr(stalloc_last_error(), "RANK=\"../x\""));
	unsetenv("RANK");
	setenv("LOCAL_RANK", "-1", 1);
	assert_int_equal(sa_expand_path("%r", 0, out, sizeof(out)), -EINVAL);
	assert_non_null(strstr(stalloc_last_error(), "LOCAL_RANK"));
	unsetenv("LOCAL_RANK");
	/* a rank is not needed where the pattern has no %r */
	setenv("RANK", "bad", 1);
	assert_int_equal(sa_expand_path("p%p", 0, out, sizeof(out)), 0);
	unsetenv("RANK");
	assert_int_equal(sa_expand_path("x%q", 0, out, sizeof(out)), -EINVAL);
	assert_non_null(strstr(stalloc_last_error(), "%q"));
	assert_int_equal(sa_expand_path("x%", 0, out, sizeof(out)), -EINVAL);
	assert_int_equal(sa_expand_path("", 0, out, sizeof(out)), -EINVAL);
	assert_int_equal(sa_expand_path(NULL, 0, out, sizeof(out)), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_version),
		cmocka_unit_test(test_parse_size),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_expand_path),
	};

	return cmocka_run_group_tests_name("util", tests, NULL, NULL);
}
