// SPDX-License-Identifier: MIT
/*
 * tools/cli/stalloc-options.c - every STALLOC_* variable, from the library's
 * option table
 *
 *   stalloc-options		the table with each variable's value now
 *				(exit 1 if the library refuses one)
 *   stalloc-options --markdown	the README's table
 *   stalloc-options --rst	the table of Documentation/options.rst
 *
 * Both open and end with a blank line.  The README and the documentation
 * carry the generated text between marker lines; tests/options.tests checks that they are up to date
 * (make options-doc rewrites them).  Public API only.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stalloc/stalloc.h>

static void usage(FILE *f)
{
	fprintf(f, "usage: stalloc-options [--markdown | --rst]\n");
}

static bool numeric(const struct stalloc_option *o)
{
	return !strcmp(o->type, "size") || !strcmp(o->type, "count") ||
	       !strcmp(o->type, "bool");
}

/* The value now, as the library reads it; false if it refuses it. */
static bool value_now(const struct stalloc_option *o, char *buf, size_t size)
{
	const char *v = getenv(o->name);
	uint64_t x;
	bool ok;

	if (!v || !*v) {
		snprintf(buf, size, "(unset)");
		return true;
	}
	ok = numeric(o) ? !stalloc_option_size(o->name, 0, &x) :
			  stalloc_option_string(o->name) != NULL;
	if (ok)
		snprintf(buf, size, "%s", v);
	else
		snprintf(buf, size, "%s (refused: %s)", v,
			 stalloc_last_error());
	return ok;
}

static int list(const struct stalloc_option *t, size_t nr)
{
	char val[512];
	int bad = 0;
	size_t i;

	for (i = 0; i < nr; i++) {
		bad += !value_now(&t[i], val, sizeof(val));
		printf("%s (%s, read by the %s)\n  %s\n"
		       "  default: %s; accepted: %s\n  now: %s\n",
		       t[i].name, t[i].type, t[i].scope, t[i].help, t[i].def,
		       t[i].range, val);
	}
	return bad ? 1 : 0;
}

static void markdown(const struct stalloc_option *t, size_t nr)
{
	bool lib;
	size_t i;

	printf("\n| variable | meaning | default | accepted |\n"
	       "|---|---|---|---|\n");
	for (i = 0; i < nr; i++) {
		lib = !strcmp(t[i].scope, "library");
		printf("| `%s` | %s%s%s%s | %s | %s |\n", t[i].name, t[i].help,
		       lib ? "" : " (", lib ? "" : t[i].scope, lib ? "" : ")",
		       t[i].def, t[i].range);
	}
	printf("\n");
}

/* One reST list-table cell line: "   * - TEXT" or "     - TEXT". */
static void cell(bool first, const char *text)
{
	printf("%s%s\n", first ? "   * - " : "     - ", text);
}

static void rst(const struct stalloc_option *t, size_t nr)
{
	char name[96];
	size_t i;

	printf("\n.. list-table::\n   :header-rows: 1\n"
	       "   :widths: 22 8 10 40 20 20\n\n");
	cell(true, "Variable");
	cell(false, "Type");
	cell(false, "Read by");
	cell(false, "Meaning");
	cell(false, "Default");
	cell(false, "Accepted");
	for (i = 0; i < nr; i++) {
		snprintf(name, sizeof(name), "``%s``", t[i].name);
		cell(true, name);
		cell(false, t[i].type);
		cell(false, t[i].scope);
		cell(false, t[i].help);
		cell(false, t[i].def);
		cell(false, t[i].range);
	}
	printf("\n");
}

int main(int argc, char **argv)
{
	const struct stalloc_option *t;
	size_t nr;

	stalloc_set_log_level(STALLOC_LOG_NONE);
	t = stalloc_options(&nr);
	if (argc == 1)
		return list(t, nr);
	if (argc == 2 && !strcmp(argv[1], "--markdown")) {
		markdown(t, nr);
		return 0;
	}
	if (argc == 2 && !strcmp(argv[1], "--rst")) {
		rst(t, nr);
		return 0;
	}
	if (argc == 2 &&
	    (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
		usage(stdout);
		return 0;
	}
	usage(stderr);
	return 2;
}
