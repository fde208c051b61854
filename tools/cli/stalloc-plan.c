// SPDX-License-Identifier: MIT
/*
 * tools/cli/stalloc-plan.c - plan a static allocation from a trace or CSV
 *
 *   stalloc-plan [-o PLAN] [--json] [--emit-csv FILE] [--budget SEC]
 *                [--time-limit SEC] [--align BYTES] [--no-check]
 *                [--granularity BYTES] INPUT
 *
 * Exit status: 0 planned, 1 invalid input (the message names the file and
 * line) or a failure to write, 2 bad usage.  Uses the public API only.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <stalloc/planner.h>

static const char usage[] =
	"usage: stalloc-plan [-o PLAN] [--json] [--emit-csv FILE]\n"
	"                    [--budget SEC] [--time-limit SEC] [--align BYTES]\n"
	"                    [--no-check] [--granularity BYTES] INPUT\n"
	"\n"
	"Plan where every buffer of INPUT lives.  INPUT is an allocation\n"
	"trace (first line \"stalloc-trace 1\") or a MiniMalloc CSV problem\n"
	"(header id,lower,upper,size).\n"
	"\n"
	"  -o, --output PLAN     write the plan file\n"
	"  -j, --json            print one JSON object instead of a summary\n"
	"  -c, --emit-csv FILE   write every planned buffer as\n"
	"                        id,lower,upper,size,offset\n"
	"  -b, --budget SEC      packing work budget in nominal seconds of one\n"
	"                        core (default 1): the same INPUT and options\n"
	"                        give the same plan on any machine, any load\n"
	"  -t, --time-limit SEC  wall-clock safety stop (default: the larger\n"
	"                        of 60 and 20 x the budget); when it fires,\n"
	"                        the plan can depend on the machine's load\n"
	"  -a, --align BYTES     round sizes up to BYTES (default 512 for\n"
	"                        traces, 1 for CSV problems)\n"
	"  -n, --no-check        do not replay the trace to check the plan\n"
	"                        written with -o (by default a plan that\n"
	"                        reserves more than off mode on its own\n"
	"                        trace is marked rejected: the runtime then\n"
	"                        runs as in off mode)\n"
	"  -g, --granularity B   the physical chunk size the check replays\n"
	"                        with (default: the runtime's, 2 MiB)\n"
	"  -h, --help            this text\n"
	"\n"
	"Exit status: 0 planned, 1 invalid input or output error, 2 usage.\n";

struct args {
	const char *input, *output, *csv;
	bool json, no_check;
	uint64_t granularity;
	struct stalloc_plan_options opts;
	struct stalloc_plan_verdict check;
	uint64_t slack_planned; /* the rejected plan with slack, made again */
};

static int bad_usage(const char *why, const char *what)
{
	fprintf(stderr, "stalloc-plan: %s%s%s\n%s", why, what ? ": " : "",
		what ? what : "", usage);
	return 2;
}

static bool parse_u64(const char *s, uint64_t *v)
{
	char *end;

	if (!*s || *s == '-')
		return false;
	errno = 0;
	*v = strtoull(s, &end, 0);
	return !errno && !*end;
}

/* Seconds (0 < SEC <= one day) to milliseconds, at least 1. */
static bool parse_sec(const char *s, uint64_t *ms)
{
	double sec;
	char *end;

	sec = strtod(s, &end);
	if (*end || !(sec > 0) || sec > 86400)
		return false;
	*ms = (uint64_t)(sec * 1000 + 0.5);
	if (!*ms)
		*ms = 1;
	return true;
}

static int parse_args(int argc, char **argv, struct args *a)
{
	static const struct option lo[] = {
		{ "output", required_argument, NULL, 'o' },
		{ "json", no_argument, NULL, 'j' },
		{ "emit-csv", required_argument, NULL, 'c' },
		{ "budget", required_argument, NULL, 'b' },
		{ "time-limit", required_argument, NULL, 't' },
		{ "align", required_argument, NULL, 'a' },
		{ "no-check", no_argument, NULL, 'n' },
		{ "granularity", required_argument, NULL, 'g' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int ch;

	while ((ch = getopt_long(argc, argv, "o:jc:b:t:a:ng:h", lo, NULL)) !=
	       -1) {
		switch (ch) {
		case 'o':
			a->output = optarg;
			break;
		case 'j':
			a->json = true;
			break;
		case 'c':
			a->csv = optarg;
			break;
		case 'b':
			if (!parse_sec(optarg, &a->opts.budget_ms))
				return bad_usage("bad --budget", optarg);
			break;
		case 't':
			if (!parse_sec(optarg, &a->opts.time_limit_ms))
				return bad_usage("bad --time-limit", optarg);
			break;
		case 'a':
			if (!parse_u64(optarg, &a->opts.align) ||
			    !a->opts.align ||
			    (a->opts.align & (a->opts.align - 1)))
				return bad_usage("--align wants a power of two",
						 optarg);
			break;
		case 'n':
			a->no_check = true;
			break;
		case 'g':
			if (!parse_u64(optarg, &a->granularity) ||
			    !a->granularity ||
			    (a->granularity & (a->granularity - 1)))
				return bad_usage("--granularity wants a power "
						 "of two",
						 optarg);
			break;
		case 'h':
			fputs(usage, stdout);
			exit(0);
		default:
			return bad_usage("unknown option", NULL);
		}
	}
	if (optind != argc - 1)
		return bad_usage(optind < argc ? "one INPUT only" :
						 "no INPUT given",
				 NULL);
	a->input = argv[optind];
	return 0;
}

static int csv_row(const struct stalloc_plan_buffer *b, void *arg)
{
	FILE *f = arg;

	fprintf(f, "%s,%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 "\n",
		b->id ? b->id : "-", b->lower, b->upper, b->size, b->offset);
	return ferror(f) ? -EIO : 0;
}

static int emit_csv(const struct stalloc_plan *p, const char *path)
{
	FILE *f = fopen(path, "w");
	int err;

	if (!f) {
		fprintf(stderr, "stalloc-plan: %s: %s\n", path,
			strerror(errno));
		return -EIO;
	}
	fprintf(f, "id,lower,upper,size,offset\n");
	err = stalloc_plan_for_each_buffer(p, csv_row, f);
	if (fclose(f) || err) {
		fprintf(stderr, "stalloc-plan: %s: write failed\n", path);
		return -EIO;
	}
	return 0;
}

static const char *source_name(int src)
{
	static const char *const names[] = { "markers", "detected", "none",
					     "csv", "file" };

	return src >= 0 && src < 5 ? names[src] : "?";
}

static double gap(const struct stalloc_plan_summary *s)
{
	return s->lower_bound ? (double)s->peak / (double)s->lower_bound - 1 :
				0;
}

static const char *check_name(int check)
{
	static const char *const names[] = { "none", "pass", "reject" };

	return check >= 0 && check < 3 ? names[check] : "?";
}

static void print_json(const struct stalloc_plan *p, const struct args *a)
{
	const char *input = a->input;
	struct stalloc_plan_summary s;
	const uint64_t *b;
	size_t i, nb = stalloc_plan_boundaries(p, &b);

	stalloc_plan_summary(p, &s);
	printf("{\"input\": \"");
	for (i = 0; input[i]; i++)
		printf(input[i] == '"' || input[i] == '\\' ? "\\%c" : "%c",
		       input[i]);
	printf("\", \"requests\": %" PRIu64 ", \"lower_bound\": %" PRIu64
	       ", \"peak\": %" PRIu64 ", \"gap\": %.6f, \"optimal\": %s"
	       ", \"plan_ms\": %.3f, \"budget_ms\": %.0f, \"work_ms\": %.3f"
	       ", \"budget_used\": %.4f, \"time_limit_hit\": %s",
	       s.requests, s.lower_bound, s.peak, gap(&s),
	       s.optimal ? "true" : "false", s.plan_ms, s.budget_ms, s.work_ms,
	       s.budget_ms > 0 ? s.work_ms / s.budget_ms : 0,
	       s.time_limit_hit ? "true" : "false");
	printf(", \"trace_peak\": %" PRIu64 ", \"live_peak\": %" PRIu64
	       ", \"align_bytes\": %" PRIu64 ", \"model_bytes\": %" PRId64,
	       s.trace_peak, s.live_peak, s.align_bytes, s.model_bytes);
	printf(", \"iterations\": %" PRIu64 ", \"steady_iterations\": %" PRIu64
	       ", \"iteration_source\": \"%s\", \"period_events\": %" PRIu64
	       ", \"boundaries\": [",
	       s.iterations, s.steady_iterations, source_name(s.iter_source),
	       s.period_events);
	for (i = 0; i < nb; i++)
		printf("%s%" PRIu64, i ? ", " : "", b[i]);
	printf("], \"static_requests\": %" PRIu64
	       ", \"cross_requests\": %" PRIu64
	       ", \"persistent_requests\": %" PRIu64
	       ", \"dynamic_requests\": %" PRIu64
	       ", \"persistent_bytes\": %" PRIu64
	       ", \"dynamic_bytes\": %" PRIu64 ", \"reusable_bytes\": %" PRIu64
	       ", \"fingerprint\": \"0x%016" PRIx64 "\"",
	       s.static_requests, s.cross_requests, s.persistent_requests,
	       s.dynamic_requests, s.persistent_bytes, s.dynamic_bytes,
	       s.reusable_bytes, s.fingerprint);
	printf(", \"check\": \"%s\", \"check_planned\": %" PRIu64
	       ", \"check_off\": %" PRIu64 ", \"check_online\": %" PRIu64
	       ", \"check_fallback\": %" PRIu64,
	       check_name(s.check), s.check_planned, s.check_off,
	       s.check_online, s.check_fallback);
	if (a->check.calls_measured)
		printf(", \"check_planned_calls\": %" PRIu64
		       ", \"check_fallback_calls\": %" PRIu64,
		       a->check.planned_calls, a->check.fallback_calls);
	else
		printf(", \"check_planned_calls\": null"
		       ", \"check_fallback_calls\": null");
	printf(", \"check_misses\": %" PRIu64 ", \"check_ms\": %.3f"
	       ", \"stride\": %" PRIu64 ", \"clock\": \"%s\"",
	       a->check.misses, a->check.check_ms, s.stride,
	       s.slack_clock ? "slack" : "reference");
	if (a->slack_planned)
		printf(", \"slack_check_planned\": %" PRIu64 "}\n",
		       a->slack_planned);
	else
		printf(", \"slack_check_planned\": null}\n");
}

static double mib(uint64_t b)
{
	return (double)b / (1 << 20);
}

static void print_human(const struct stalloc_plan *p, const struct args *a)
{
	const char *input = a->input;
	struct stalloc_plan_summary s;
	const uint64_t *b;
	size_t i, nb = stalloc_plan_boundaries(p, &b);

	stalloc_plan_summary(p, &s);
	printf("%s: %" PRIu64 " requests", input, s.requests);
	if (s.iter_source == STALLOC_ITER_NONE)
		printf("; no repetition found: planned as one static "
		       "problem\n");
	else if (s.iter_source == STALLOC_ITER_CSV)
		printf(" (static problem)\n");
	else
		printf(", %" PRIu64 " iterations (%s%s), %" PRIu64 " steady\n",
		       s.iterations,
		       s.iter_source == STALLOC_ITER_MARKERS ? "from markers" :
							       "detected",
		       s.period_events ? ", period in events below" : "",
		       s.steady_iterations);
	if (s.stride > 1)
		printf("  planned %" PRIu64 " steps per iteration: a buffer "
		       "lives until the next step's instance exists; the "
		       "counts are of those iterations\n",
		       s.stride);
	if (s.period_events)
		printf("  period: %" PRIu64 " alloc/free events\n",
		       s.period_events);
	if (nb && s.iter_source != STALLOC_ITER_NONE) {
		printf("  iterations start at SEQ");
		for (i = 0; i < nb && i < 16; i++)
			printf(" %" PRIu64, b[i]);
		printf("%s\n", nb > 16 ? " ..." : "");
	}
	printf("  planned: %" PRIu64 " per iteration (%" PRIu64
	       " across iterations), %" PRIu64
	       " persistent (%.1f MiB); %" PRIu64 " dynamic positions\n",
	       s.static_requests, s.cross_requests, s.persistent_requests,
	       mib(s.persistent_bytes), s.dynamic_requests);
	printf("  pool %.3f MiB, lower bound %.3f MiB, gap %.4f%%%s, "
	       "planned in %.1f ms\n",
	       mib(s.peak), mib(s.lower_bound), 100 * gap(&s),
	       s.optimal ? " (optimal)" : "", s.plan_ms);
	if (s.live_peak)
		printf("  live peak of the planned requests %.3f MiB (all "
		       "requests %.3f MiB); the lower bound adds %.3f MiB of "
		       "alignment and %.3f MiB of modelled lifetimes\n",
		       mib(s.live_peak), mib(s.trace_peak), mib(s.align_bytes),
		       (double)s.model_bytes / (1 << 20));
	printf("  work: %.0f of %.0f nominal ms (%.1f%% of the budget)%s\n",
	       s.work_ms, s.budget_ms,
	       s.budget_ms > 0 ? 100 * s.work_ms / s.budget_ms : 0,
	       s.time_limit_hit ? "; the wall-clock safety stop fired: "
				  "this plan may depend on the machine's load" :
				  "");
	if (s.dynamic_requests)
		printf("  dynamic: at most %.3f MiB live at once, %.3f MiB of "
		       "it fits in the plan's free space\n",
		       mib(s.dynamic_bytes), mib(s.reusable_bytes));
	if (s.check != STALLOC_CHECK_NONE)
		printf("  check: its trace replayed reserves %.3f MiB with the "
		       "plan (%" PRIu64 " misses), %.3f MiB in off mode, "
		       "%.3f MiB under the least online policy: %s "
		       "(%.0f ms)\n",
		       mib(s.check_planned), a->check.misses, mib(s.check_off),
		       mib(s.check_online),
		       s.check == STALLOC_CHECK_PASS ?
			       "passed" :
			       "rejected, the runtime will run its fallback",
		       a->check.check_ms);
	if (a->slack_planned)
		printf("  the plan made with slack for shifted runs reserved "
		       "%.3f MiB and was rejected: this one, made on the "
		       "reference iteration's clock, passed\n",
		       mib(a->slack_planned));
	if (s.check_fallback && a->check.calls_measured)
		printf("  fallback for a rejected plan: %.3f MiB, %" PRIu64
		       " driver calls in the last iteration against the "
		       "plan's %" PRIu64 ": %s\n",
		       mib(s.check_fallback), a->check.fallback_calls,
		       a->check.planned_calls,
		       s.check == STALLOC_CHECK_PASS ?
			       "the plan pays" :
			       "it does better, the plan does not pay");
	else if (s.check_fallback)
		printf("  fallback for a rejected plan: %.3f MiB (driver calls "
		       "not measured): %s\n",
		       mib(s.check_fallback),
		       s.check == STALLOC_CHECK_PASS ?
			       "the plan pays" :
			       "it holds less and the plan lends anyway");
}

/*
 * @p was made with slack for shifted runs and its check rejected it: made
 * again on the reference iteration's clock (STALLOC_PLAN_EXACT_CLOCK) and
 * checked, in *@out if it passes (then written again, with its verdict).
 * Otherwise *@out is NULL and the file holds the new plan: the caller
 * writes @p back.
 */
static void check_exact(struct stalloc_plan *p, struct args *a,
			struct stalloc_plan **out)
{
	struct stalloc_plan_options o = a->opts;
	struct stalloc_plan_verdict v;
	struct stalloc_plan_summary s;
	struct stalloc_plan *q = NULL;
	int err;

	*out = NULL;
	stalloc_plan_summary(p, &s);
	if (s.check != STALLOC_CHECK_REJECT || !s.slack_clock)
		return;
	o.flags |= STALLOC_PLAN_EXACT_CLOCK;
	err = stalloc_plan_file(a->input, &o, &q);
	if ((err && err != -ENOSPC) || !q)
		goto out_free;
	if (stalloc_plan_write(q, a->output) ||
	    stalloc_plan_check(q, a->output, a->input, NULL, a->granularity,
			       &v))
		goto out_free;
	stalloc_plan_summary(q, &s);
	if (s.check != STALLOC_CHECK_PASS || stalloc_plan_write(q, a->output))
		goto out_free;
	a->slack_planned = a->check.planned;
	a->check = v;
	*out = q;
	return;
out_free:
	stalloc_plan_free(q);
}

/*
 * Replay the trace with the plan just written and without it, and write
 * the plan again with the verdict.  Only a trace's plan with a steady
 * iteration is checked: the others run as in off mode anyway; and only
 * one written to a regular file (a FIFO or a device cannot be read back).
 * A check that cannot run leaves the plan unchecked, with a warning.  A
 * rejected plan made with slack may give way to one without (*@pp).
 */
static int check_plan(struct stalloc_plan **pp, struct args *a)
{
	struct stalloc_plan_summary s;
	struct stalloc_plan *p = *pp, *q;
	struct stat st;

	stalloc_plan_summary(p, &s);
	if (a->no_check || !a->output || s.iter_source == STALLOC_ITER_CSV ||
	    !s.static_requests)
		return 0;
	if (stat(a->output, &st) || !S_ISREG(st.st_mode)) {
		fprintf(stderr,
			"stalloc-plan: warning: the plan is not checked: %s "
			"is not a regular file\n",
			a->output);
		return 0;
	}
	if (stalloc_plan_check(p, a->output, a->input, NULL, a->granularity,
			       &a->check)) {
		fprintf(stderr,
			"stalloc-plan: warning: the plan is not checked: %s\n",
			stalloc_last_error());
		return 0;
	}
	check_exact(p, a, &q);
	if (q) {
		stalloc_plan_free(p);
		*pp = q;
		return 0;
	}
	if (stalloc_plan_write(p, a->output)) {
		fprintf(stderr, "stalloc-plan: %s\n", stalloc_last_error());
		return -EIO;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct args a = { 0 };
	struct stalloc_plan *p;
	int err;

	err = parse_args(argc, argv, &a);
	if (err)
		return err;
	err = stalloc_plan_file(a.input, &a.opts, &p);
	if (err && !p) {
		fprintf(stderr, "stalloc-plan: %s\n", stalloc_last_error());
		return 1;
	}
	if (err == -ENOSPC)
		fprintf(stderr, "stalloc-plan: warning: %s\n",
			stalloc_last_error());
	if (a.output && stalloc_plan_write(p, a.output)) {
		fprintf(stderr, "stalloc-plan: %s\n", stalloc_last_error());
		err = -EIO;
	} else if (check_plan(&p, &a)) {
		err = -EIO;
	}
	if (a.json)
		print_json(p, &a);
	else
		print_human(p, &a);
	if (a.csv && emit_csv(p, a.csv))
		err = -EIO;
	stalloc_plan_free(p);
	return err && err != -ENOSPC ? 1 : 0;
}
