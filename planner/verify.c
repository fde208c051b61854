// SPDX-License-Identifier: MIT
/*
 * planner/verify.c - replay a plan's own trace with and without the plan
 *
 * A plan is made to beat the online allocator, and a plan that does not do
 * so even on the recording it was made from will not do so on the job's
 * later iterations either (MoE routing with another seed differs more, not
 * less).  stalloc_plan_check() measures it instead of predicting it: it
 * runs stalloc-replay on the trace, in plan mode and in off mode, through
 * the very runtime that will serve the job (host backend), and marks the
 * plan passed or rejected.  A rejected plan is still a valid plan file
 * (what it planned stays there to be read), but the runtime does not use
 * it (match_plan_pays()): the job runs the fallback, off mode whose free
 * memory is given back before new is mapped.  Since that fallback is the
 * alternative the job would get, a plan that passes against off mode is
 * replayed once more as rejected, and is rejected if the fallback does
 * no worse in memory and in driver calls (fallback_pays()).
 *
 * The replays run in child processes (posix_spawn: no fork of a process
 * that may hold a CUDA context and locks), with the caller's environment
 * less every STALLOC_* variable and LD_PRELOAD, so that a training
 * process's own settings (a trace path, a plan, a preloaded runtime)
 * cannot reach them.  No global state, no locks; the caller's plan is
 * written only on success.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../lib/options.h"
#include "../lib/util.h"
#include "planner.h"

extern char **environ;

/* The runtime's default chunk: the margin when the caller names none. */
#define PLAN_CHECK_CHUNK (2ull << 20)
/* Output of one replay kept for parsing (its JSON is a few KiB). */
#define VERIFY_OUT_MAX (1u << 20)

struct verify_run {
	uint64_t reserved;
	uint64_t calls; /* in the last iteration, between two markers */
	bool has_calls; /* the replay saw two iteration markers */
	uint64_t misses;
	bool dropped;
};

/*
 * The caller's environment without STALLOC_* and LD_PRELOAD, and with no
 * control socket (a replay is nobody's to inspect).
 */
static char **verify_env(void)
{
	static char no_ctl[] = "STALLOC_CTL=0";
	size_t n = 0, k = 0;
	char **env;

	while (environ[n])
		n++;
	env = calloc(n + 2, sizeof(*env));
	if (!env)
		return NULL;
	for (n = 0; environ[n]; n++)
		if (strncmp(environ[n], "STALLOC_", 8) != 0 &&
		    strncmp(environ[n], "LD_PRELOAD=", 11) != 0)
			env[k++] = environ[n];
	env[k] = no_ctl;
	return env;
}

/* @dir/@rel if it names an executable file. */
static bool verify_try(char *buf, size_t len, const char *dir, const char *rel)
{
	int n = snprintf(buf, len, "%s/%s", dir, rel);

	return n > 0 && (size_t)n < len && !access(buf, X_OK);
}

/*
 * $STALLOC_REPLAY; else stalloc-replay beside the running program (the
 * command-line tools), beside the library (a build tree, the Python
 * package) or in the install prefix's bin/ (the library in lib/); else
 * the one in $PATH.
 */
static void verify_tool(const char *replay, char *buf, size_t len)
{
	const char *env = sa_opt_raw(SA_OPT_REPLAY);
	char dir[4096], *slash;
	Dl_info info;
	ssize_t n;

	if (replay || (env && *env)) {
		snprintf(buf, len, "%s", replay ? replay : env);
		return;
	}
	n = readlink("/proc/self/exe", dir, sizeof(dir) - 1);
	if (n > 0) {
		dir[n] = '\0';
		slash = strrchr(dir, '/');
		if (slash) {
			*slash = '\0';
			if (verify_try(buf, len, dir, "stalloc-replay"))
				return;
		}
	}
	if (dladdr((void *)stalloc_plan_check, &info) && info.dli_fname &&
	    snprintf(dir, sizeof(dir), "%s", info.dli_fname) > 0) {
		slash = strrchr(dir, '/');
		if (slash) {
			*slash = '\0';
			if (verify_try(buf, len, dir, "stalloc-replay") ||
			    verify_try(buf, len, dir, "../bin/stalloc-replay"))
				return;
		}
	}
	snprintf(buf, len, "stalloc-replay");
}

static int verify_read(int fd, char **out)
{
	size_t len = 0, cap = 8192;
	char *buf = malloc(cap), *nb;
	ssize_t n;

	if (!buf)
		return -ENOMEM;
	for (;;) {
		if (cap - len < 4096 && cap < VERIFY_OUT_MAX) {
			nb = realloc(buf, cap * 2);
			if (!nb) {
				free(buf);
				return -ENOMEM;
			}
			buf = nb;
			cap *= 2;
		}
		n = read(fd, buf + len, cap - len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
		if (len + 1 >= cap) /* past the limit: keep the head */
			len = cap - 4096;
	}
	buf[len] = '\0';
	*out = buf;
	return 0;
}

/* The number after "KEY": in the replay's JSON; false if absent. */
static bool verify_key(const char *out, const char *key, uint64_t *v)
{
	char pat[64], *end;
	const char *p;

	snprintf(pat, sizeof(pat), "\"%s\": ", key);
	p = strstr(out, pat);
	if (!p)
		return false;
	p += strlen(pat);
	if (!strncmp(p, "true", 4) || !strncmp(p, "false", 5)) {
		*v = *p == 't';
		return true;
	}
	errno = 0;
	*v = strtoull(p, &end, 10);
	return !errno && end != p;
}

/* The last line of @out, for an error message. */
static const char *verify_last_line(char *out)
{
	size_t n = strlen(out);
	char *nl;

	while (n && out[n - 1] == '\n')
		out[--n] = '\0';
	nl = strrchr(out, '\n');
	return nl ? nl + 1 : out;
}

/*
 * The replay's report: exit 0, or 2 with the plan dropped (stalloc-replay
 * says so with that status, and still reports); anything else is a
 * replay that failed.
 */
static int verify_parse(const char *tool, char *out, int status,
			struct verify_run *r)
{
	uint64_t dropped = 0;
	bool parsed = verify_key(out, "peak_reserved_bytes", &r->reserved) &&
		      verify_key(out, "plan_misses", &r->misses) &&
		      verify_key(out, "plan_dropped", &dropped);

	if (!WIFEXITED(status) || !parsed ||
	    (WEXITSTATUS(status) && !(WEXITSTATUS(status) == 2 && dropped)))
		return sa_error(-EIO, "planner: check: %s %s %d: %s", tool,
				WIFEXITED(status) ? "exited" : "died of signal",
				WIFEXITED(status) ? WEXITSTATUS(status) :
						    WTERMSIG(status),
				*out ? verify_last_line(out) : "no report");
	r->dropped = dropped;
	r->has_calls = verify_key(out, "iteration_driver_calls", &r->calls);
	return 0;
}

/* Run @argv, its output read into a buffer; returns 0 or -errno. */
static int verify_spawn(char *const argv[], char **env, int *status, char **out)
{
	posix_spawn_file_actions_t fa;
	int pipefd[2], err;
	pid_t pid;

	if (pipe2(pipefd, O_CLOEXEC))
		return sa_error(-errno, "planner: check: pipe: %s",
				strerror(errno));
	err = posix_spawn_file_actions_init(&fa);
	if (err)
		goto err_pipe;
	err = posix_spawn_file_actions_adddup2(&fa, pipefd[1], 1)	  ?:
		      posix_spawn_file_actions_adddup2(&fa, pipefd[1], 2) ?:
		      posix_spawn_file_actions_addopen(&fa, 0, "/dev/null",
						       O_RDONLY, 0);
	if (!err)
		err = strchr(argv[0], '/') ?
			      posix_spawn(&pid, argv[0], &fa, NULL, argv, env) :
			      posix_spawnp(&pid, argv[0], &fa, NULL, argv, env);
	posix_spawn_file_actions_destroy(&fa);
	if (err)
		goto err_pipe;
	close(pipefd[1]);
	err = verify_read(pipefd[0], out);
	close(pipefd[0]);
	while (waitpid(pid, status, 0) < 0)
		if (errno != EINTR)
			return sa_error(-errno, "planner: check: waitpid: %s",
					strerror(errno));
	if (err) {
		free(*out);
		return sa_error(err, "planner: check: out of memory");
	}
	return 0;

err_pipe:
	close(pipefd[0]);
	close(pipefd[1]);
	return sa_error(-err, "planner: check: cannot run %s: %s", argv[0],
			strerror(err));
}

static int verify_one(const char *tool, char **env, const char *policy,
		      const char *plan_path, const char *trace,
		      uint64_t granularity, struct verify_run *r)
{
	char gran[32], *argv[12], *out = NULL;
	int k = 0, status = 0, err;

	argv[k++] = (char *)tool;
	argv[k++] = (char *)"--json";
	argv[k++] = (char *)"--policy";
	argv[k++] = (char *)policy;
	if (plan_path) {
		argv[k++] = (char *)"--plan";
		argv[k++] = (char *)plan_path;
	}
	if (granularity) {
		snprintf(gran, sizeof(gran), "%" PRIu64, granularity);
		argv[k++] = (char *)"--granularity";
		argv[k++] = gran;
	}
	argv[k++] = (char *)"--";
	argv[k++] = (char *)trace;
	argv[k] = NULL;
	err = verify_spawn(argv, env, &status, &out);
	if (err || !out)
		return err ? err : -ENOMEM;
	err = verify_parse(tool, out, status, r);
	free(out);
	return err;
}

/*
 * Replay @trace under the runtime's fallback for a rejected @plan (its
 * dynamic region gives free memory back before it maps new, and steady
 * iterations are held up to @c->online): @plan written again, marked
 * rejected with @c's peaks, beside @plan_path, and removed after.
 */
static int verify_fallback(const struct stalloc_plan *plan,
			   const char *plan_path, const char *tool, char **env,
			   const char *policy, const char *trace,
			   uint64_t granularity,
			   const struct stalloc_plan_verdict *c,
			   struct verify_run *r)
{
	struct stalloc_plan tmp = *plan;
	char *path;
	int fd, err;

	if (asprintf(&path, "%s.fallback.XXXXXX", plan_path) < 0)
		return sa_error(-ENOMEM, "planner: out of memory");
	fd = mkstemp(path);
	if (fd < 0) {
		err = errno;
		err = sa_error(-err, "planner: check: %s: %s", path,
			       strerror(err));
		goto out_free;
	}
	close(fd);
	tmp.check = STALLOC_CHECK_REJECT;
	tmp.check_planned = c->planned;
	tmp.check_off = c->off;
	tmp.check_online = c->online;
	err = stalloc_plan_write(&tmp, path);
	if (!err)
		err = verify_one(tool, env, policy, path, trace, granularity,
				 r);
	unlink(path);
out_free:
	free(path);
	return err;
}

/*
 * Does the fallback do better than the plan on its own trace: no more
 * memory at the peak and no more driver calls in the last iteration
 * (between the trace's last two markers), and less of one of them?  Then
 * the plan does not pay for itself.  Calls count only while the plan's own
 * are within the steady budget (STALLOC_STEADY_CALLS): memory alone would
 * give up plans whose steady iterations make no driver call for a few MiB
 * (a dense 4-stage rank: 38 MiB of 17 GiB against 2,081 calls in every
 * steady step), but on MoE workloads the plan lends and takes back memory
 * in every step too, and a plan that churns anyway has no quiet steps to
 * keep.  A tie on both keeps the plan: a short trace shows no difference,
 * and off mode's holes can still grow over a long run where the plan's
 * cannot.
 */
static bool fallback_pays(const struct stalloc_plan_verdict *c)
{
	bool quiet, calls_ok;
	uint64_t budget;

	if (sa_opt_size(SA_OPT_STEADY_CALLS, SA_STEADY_CALLS_DEFAULT, &budget))
		budget = SA_STEADY_CALLS_DEFAULT;
	quiet = c->planned_calls <= budget;
	calls_ok = !quiet || c->fallback_calls <= c->planned_calls;
	return c->fallback <= c->planned && calls_ok &&
	       (c->fallback < c->planned ||
		c->fallback_calls < c->planned_calls);
}

/*
 * Do the replays' last iterations tell a steady one's driver calls?  Not
 * in auto mode, whose check replays the traced iterations and one planned
 * iteration, the one that maps the pool; not without two iteration
 * markers.
 */
static bool steady_measured(const char *policy, const struct verify_run *with,
			    const struct verify_run *fb)
{
	return !strcmp(policy, "stalloc") && with->has_calls && fb->has_calls;
}

/*
 * Where the calls cannot be measured: will the plan's steady iterations
 * lend and take back memory anyway?  They do where its dynamic requests
 * need more, at their most, than its free space holds (step 4's report)
 * by a chunk or more: they then have no quiet steps to keep, and the
 * fallback pays where it holds less.
 */
static bool plan_lends(const struct stalloc_plan *plan)
{
	return plan->sum.dynamic_bytes >=
	       plan->sum.reusable_bytes + PLAN_CHECK_CHUNK;
}

static int plan_check(struct stalloc_plan *plan, const char *plan_path,
		      const char *trace, const char *replay,
		      uint64_t granularity, const char *policy,
		      struct stalloc_plan_verdict *out)
{
	struct verify_run with = { 0 }, off = { 0 }, cach = { 0 }, exp = { 0 },
			  fb = { 0 };
	struct stalloc_plan_verdict c = { 0 };
	struct timespec t0, t1;
	char tool[4096];
	char **env;
	int err;

	if (!plan || !plan_path || !trace)
		return sa_error(-EINVAL, "planner: check: no plan or trace");
	verify_tool(replay, tool, sizeof(tool));
	env = verify_env();
	if (!env)
		return sa_error(-ENOMEM, "planner: out of memory");
	clock_gettime(CLOCK_MONOTONIC, &t0);
	err = verify_one(tool, env, policy, plan_path, trace, granularity,
			 &with);
	if (!err)
		err = verify_one(tool, env, "off", NULL, trace, granularity,
				 &off);
	if (!err)
		err = verify_one(tool, env, "caching", NULL, trace, 0, &cach);
	if (!err)
		err = verify_one(tool, env, "expandable", NULL, trace, 0, &exp);
	if (err)
		goto out_env;
	c.planned = with.reserved;
	c.off = off.reserved;
	c.online = off.reserved;
	if (cach.reserved && cach.reserved < c.online)
		c.online = cach.reserved;
	if (exp.reserved && exp.reserved < c.online)
		c.online = exp.reserved;
	c.misses = with.misses;
	c.dropped = with.dropped;
	c.granularity = granularity ? granularity : PLAN_CHECK_CHUNK;
	plan->check = !c.dropped && c.planned <= c.off + c.granularity ?
			      STALLOC_CHECK_PASS :
			      STALLOC_CHECK_REJECT;
	if (plan->check == STALLOC_CHECK_PASS) {
		err = verify_fallback(plan, plan_path, tool, env, policy, trace,
				      granularity, &c, &fb);
		if (err)
			goto out_env;
		c.fallback = fb.reserved;
		c.calls_measured = steady_measured(policy, &with, &fb);
		if (c.calls_measured) {
			c.planned_calls = with.calls;
			c.fallback_calls = fb.calls;
		}
		if (c.calls_measured ?
			    fallback_pays(&c) :
			    c.fallback < c.planned && plan_lends(plan))
			plan->check = STALLOC_CHECK_REJECT;
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	c.check_ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 +
		     (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
	plan->check_planned = c.planned;
	plan->check_off = c.off;
	plan->check_online = c.online;
	plan->check_fallback = c.fallback;
	plan->sum.check = plan->check;
	plan->sum.check_planned = c.planned;
	plan->sum.check_off = c.off;
	plan->sum.check_online = c.online;
	plan->sum.check_fallback = c.fallback;
	if (out)
		*out = c;
out_env:
	free(env);
	return err;
}

int stalloc_plan_check(struct stalloc_plan *plan, const char *plan_path,
		       const char *trace, const char *replay,
		       uint64_t granularity, struct stalloc_plan_verdict *out)
{
	return plan_check(plan, plan_path, trace, replay, granularity,
			  "stalloc", out);
}

int stalloc_plan_check_auto(struct stalloc_plan *plan, const char *plan_path,
			    const char *trace, const char *replay,
			    uint64_t granularity,
			    struct stalloc_plan_verdict *out)
{
	return plan_check(plan, plan_path, trace, replay, granularity, "auto",
			  out);
}
