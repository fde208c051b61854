// SPDX-License-Identifier: MIT
/*
 * tests/test-options.c - the option table (lib/options.c): parsing,
 * ranges, choices, the messages that name the variable and the range, and
 * the public view of the table
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lib/options.h"
#include "lib/util.h"

static void test_table(void **state)
{
	const struct stalloc_option *t;
	size_t nr, i, j;

	(void)state;
	t = stalloc_options(&nr);
	assert_int_equal(nr, SA_OPT_NR);
	for (i = 0; i < nr; i++) {
		assert_int_equal(strncmp(t[i].name, "STALLOC_", 8), 0);
		assert_string_equal(t[i].name, sa_opt_name((enum sa_opt)i));
		assert_true(*t[i].type && *t[i].def && *t[i].range &&
			    *t[i].scope && *t[i].help);
		for (j = 0; j < i; j++)
			assert_string_not_equal(t[i].name, t[j].name);
	}
}

static void test_sizes(void **state)
{
	uint64_t v;

	(void)state;
	unsetenv("STALLOC_CACHE_LIMIT");
	assert_int_equal(sa_opt_size(SA_OPT_CACHE_LIMIT, 5, &v), 0);
	assert_int_equal(v, 5);
	setenv("STALLOC_CACHE_LIMIT", "", 1); /* empty: unset */
	assert_int_equal(sa_opt_size(SA_OPT_CACHE_LIMIT, 5, &v), 0);
	assert_int_equal(v, 5);
	setenv("STALLOC_CACHE_LIMIT", "3M", 1);
	assert_int_equal(sa_opt_size(SA_OPT_CACHE_LIMIT, 5, &v), 0);
	assert_int_equal(v, 3 << 20);
	setenv("STALLOC_CACHE_LIMIT", "lots", 1);
	assert_int_equal(sa_opt_size(SA_OPT_CACHE_LIMIT, 5, &v), -EINVAL);
	assert_int_equal(v, 5);
	assert_non_null(
		strstr(stalloc_last_error(), "STALLOC_CACHE_LIMIT=\"lots\""));
	assert_non_null(strstr(stalloc_last_error(), "0 or more bytes"));
	unsetenv("STALLOC_CACHE_LIMIT");

	/* a count: no suffix, and its range */
	setenv("STALLOC_AUTO_ITERS", "0", 1);
	assert_int_equal(sa_opt_size(SA_OPT_AUTO_ITERS, 4, &v), -EINVAL);
	assert_non_null(strstr(stalloc_last_error(), "want 1 to 1048576"));
	setenv("STALLOC_AUTO_ITERS", "4K", 1);
	assert_int_equal(sa_opt_size(SA_OPT_AUTO_ITERS, 4, &v), -EINVAL);
	setenv("STALLOC_AUTO_ITERS", "-5", 1);
	assert_int_equal(sa_opt_size(SA_OPT_AUTO_ITERS, 4, &v), -EINVAL);
	setenv("STALLOC_AUTO_ITERS", "7", 1);
	assert_int_equal(sa_opt_size(SA_OPT_AUTO_ITERS, 4, &v), 0);
	assert_int_equal(v, 7);
	unsetenv("STALLOC_AUTO_ITERS");

	/* a size with a lower bound */
	setenv("STALLOC_VA_SIZE", "0", 1);
	assert_int_equal(sa_opt_size(SA_OPT_VA_SIZE, 1, &v), -EINVAL);
	assert_non_null(strstr(stalloc_last_error(), "want 1 or more"));
	unsetenv("STALLOC_VA_SIZE");
}

static void test_choices_and_bools(void **state)
{
	unsigned int k;
	bool on;

	(void)state;
	unsetenv("STALLOC_MODE");
	assert_int_equal(sa_opt_choice(SA_OPT_MODE, &k), 0);
	assert_int_equal(k, 0);
	setenv("STALLOC_MODE", "PLAN", 1);
	assert_int_equal(sa_opt_choice(SA_OPT_MODE, &k), 0);
	assert_int_equal(k, 2);
	assert_string_equal(stalloc_option_string("STALLOC_MODE"), "plan");
	setenv("STALLOC_MODE", "planned", 1);
	assert_int_equal(sa_opt_choice(SA_OPT_MODE, &k), -EINVAL);
	assert_non_null(
		strstr(stalloc_last_error(), "want off, trace, plan or auto"));
	assert_null(stalloc_option_string("STALLOC_MODE"));
	unsetenv("STALLOC_MODE");
	assert_string_equal(stalloc_option_string("STALLOC_MODE"), "off");

	unsetenv("STALLOC_CTL");
	assert_int_equal(sa_opt_bool(SA_OPT_CTL, &on), 0);
	assert_true(on);
	setenv("STALLOC_CTL", "0", 1);
	assert_int_equal(sa_opt_bool(SA_OPT_CTL, &on), 0);
	assert_false(on);
	setenv("STALLOC_CTL", "yes", 1);
	assert_int_equal(sa_opt_bool(SA_OPT_CTL, &on), -EINVAL);
	assert_non_null(strstr(stalloc_last_error(), "want 0 or 1"));
	unsetenv("STALLOC_CTL");

	/* paths: the value, else the table's default (maybe none) */
	unsetenv("STALLOC_TRACE");
	assert_string_equal(sa_opt_str(SA_OPT_TRACE), "stalloc-%p-%d.trace");
	unsetenv("STALLOC_PLAN");
	assert_null(sa_opt_str(SA_OPT_PLAN));
	setenv("STALLOC_PLAN", "/x/%r.plan", 1);
	assert_string_equal(stalloc_option_string("STALLOC_PLAN"),
			    "/x/%r.plan");
	unsetenv("STALLOC_PLAN");
}

static void test_public(void **state)
{
	uint64_t v;

	(void)state;
	assert_int_equal(stalloc_option_size("STALLOC_NOPE", 9, &v), -EINVAL);
	assert_int_equal(v, 9);
	assert_non_null(strstr(stalloc_last_error(), "STALLOC_NOPE"));
	assert_null(stalloc_option_string("STALLOC_NOPE"));
	assert_int_equal(stalloc_option_size("STALLOC_MODE", 9, &v), -EINVAL);
	setenv("STALLOC_CPU_MIN", "64K", 1);
	assert_int_equal(stalloc_option_size("STALLOC_CPU_MIN", 9, &v), 0);
	assert_int_equal(v, 64 << 10);
	unsetenv("STALLOC_CPU_MIN");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_table),
		cmocka_unit_test(test_sizes),
		cmocka_unit_test(test_choices_and_bools),
		cmocka_unit_test(test_public),
	};

	stalloc_set_log_level(STALLOC_LOG_NONE);
	return cmocka_run_group_tests_name("options", tests, NULL, NULL);
}
