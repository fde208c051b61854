// SPDX-License-Identifier: MIT
/*
 * tools/cli/stallocctl.c - look inside a live stalloc process
 *
 *   stallocctl list [--json]
 *   stallocctl [-p PID | -S SOCKET] [--json] maps|stats|plan|trim|ping
 *
 * Each process that uses libstalloc serves a control socket, PID.sock in
 * the directory stalloc_ctl_dir() names (see Documentation/admin-guide.rst).
 * This tool sends one request line and prints the answer; the process
 * formats it, so the human and the JSON forms always agree.  Without -p the
 * only live process is taken.  Exit: 0 done, 1 the process or its answer
 * failed (dead pid, stale socket, refused), 2 usage.
 */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <stalloc/stalloc.h>

#define MAX_ANSWER (64u << 20)

static const char usage[] =
	"usage: stallocctl list [--json]\n"
	"       stallocctl [-p PID | -S SOCKET] [--json] "
	"maps|stats|plan|trim|ping\n"
	"  list   processes with a control socket\n"
	"  maps   physical mapping per device: virtual ranges, chunk ids,\n"
	"         state (static, dynamic, free-mapped), owner\n"
	"  stats  allocator statistics per device\n"
	"  plan   the plan in use: file, fingerprint, cursor, hits, misses\n"
	"  trim   give cached memory back (the process's owner only)\n"
	"  ping   pid, version and command line\n";

/* Is @pid a live process (ours or not)? */
static bool pid_alive(long pid)
{
	return kill((pid_t)pid, 0) == 0 || errno == EPERM;
}

static int sock_path(long pid, char *buf, size_t size)
{
	char dir[108];
	int n;

	if (stalloc_ctl_dir(dir, sizeof(dir)))
		return -1;
	n = snprintf(buf, size, "%s/%ld.sock", dir, pid);
	return n < 0 || (size_t)n >= size ? -1 : 0;
}

/*
 * Send @req to the socket at @path; the answer's body in *@body (malloc'd).
 * Return: 0 ok; 1 the server said error (message printed) or the socket
 * failed (printed, naming @what).
 */
static int ask(const char *path, const char *what, const char *req, char **body,
	       bool quiet)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	size_t len = 0, cap = 65536;
	char *buf, *nl;
	ssize_t n;
	int fd;

	*body = NULL;
	if (strlen(path) >= sizeof(sa.sun_path)) {
		fprintf(stderr, "stallocctl: %s: socket path too long\n", path);
		return 1;
	}
	memcpy(sa.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		if (!quiet)
			fprintf(stderr,
				"stallocctl: %s: cannot connect to %s: %s\n",
				what, path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return 1;
	}
	buf = malloc(cap + 1);
	if (!buf || write(fd, req, strlen(req)) != (ssize_t)strlen(req))
		goto err_io;
	shutdown(fd, SHUT_WR);
	while ((n = read(fd, buf + len, cap - len)) > 0) {
		len += (size_t)n;
		if (len == cap) {
			char *nb;

			if (cap >= MAX_ANSWER)
				goto err_io;
			cap *= 2;
			nb = realloc(buf, cap + 1);
			if (!nb)
				goto err_io;
			buf = nb;
		}
	}
	close(fd);
	buf[len] = 0;
	nl = strchr(buf, '\n');
	if (!nl ||
	    (strncmp(buf, "ok\n", 3) != 0 && strncmp(buf, "error ", 6) != 0)) {
		if (!quiet)
			fprintf(stderr, "stallocctl: %s: malformed answer\n",
				what);
		free(buf);
		return 1;
	}
	if (buf[0] == 'e') {
		if (!quiet)
			fprintf(stderr, "stallocctl: %s: %.*s\n", what,
				(int)(nl - buf - 6), buf + 6);
		free(buf);
		return 1;
	}
	memmove(buf, nl + 1, len - (size_t)(nl + 1 - buf) + 1);
	*body = buf;
	return 0;

err_io:
	if (!quiet)
		fprintf(stderr, "stallocctl: %s: %s\n", what,
			buf ? "read failed or answer too long" :
			      "out of memory");
	free(buf);
	close(fd);
	return 1;
}

/* The pids with a socket in the directory; *@nr of them. */
static long *scan(size_t *nr)
{
	char dir[108];
	struct dirent *e;
	long *pids = NULL;
	size_t cap = 0;
	DIR *d;

	*nr = 0;
	if (stalloc_ctl_dir(dir, sizeof(dir)))
		return NULL;
	d = opendir(dir);
	if (!d)
		return NULL;
	while ((e = readdir(d))) {
		char *end;
		long pid = strtol(e->d_name, &end, 10);

		if (pid <= 0 || strcmp(end, ".sock") != 0)
			continue;
		if (*nr == cap) {
			long *np;

			cap = cap * 2 + 16;
			np = realloc(pids, cap * sizeof(*np));
			if (!np)
				break;
			pids = np;
		}
		pids[(*nr)++] = pid;
	}
	closedir(d);
	return pids;
}

static int cmd_list(bool json)
{
	size_t nr, i, shown = 0;
	long *pids = scan(&nr);

	if (json)
		printf("[");
	else
		printf("%-8s  %-7s  %s\n", "PID", "STATUS", "COMMAND");
	for (i = 0; i < nr; i++) {
		char path[128], what[32], *body = NULL;
		bool alive = pid_alive(pids[i]);
		int r = 1;

		if (sock_path(pids[i], path, sizeof(path)))
			continue;
		snprintf(what, sizeof(what), "pid %ld", pids[i]);
		if (alive)
			r = ask(path, what, json ? "ping --json\n" : "ping\n",
				&body, true);
		if (json) {
			char *nl = body ? strrchr(body, '\n') : NULL;

			if (nl)
				*nl = 0;
			printf("%s{\"pid\":%ld,\"status\":\"%s\",\"ping\":%s}",
			       shown ? "," : "", pids[i],
			       !alive ? "stale" :
			       r      ? "unreachable" :
					"live",
			       r ? "null" : body);
		} else {
			printf("%-8ld  %-7s  %s", pids[i],
			       !alive ? "stale" :
			       r      ? "unreach" :
					"live",
			       r ? "(no answer)\n" : body);
		}
		shown++;
		free(body);
	}
	if (json)
		printf("]\n");
	else if (!shown)
		printf("(no process with a control socket)\n");
	free(pids);
	return 0;
}

/* The only live process with a socket; 0 if none or several (printed). */
static long only_pid(void)
{
	size_t nr, i, live = 0;
	long *pids = scan(&nr), pid = 0;

	for (i = 0; i < nr; i++)
		if (pid_alive(pids[i])) {
			pid = pids[i];
			live++;
		}
	free(pids);
	if (live == 1)
		return pid;
	if (live)
		fprintf(stderr,
			"stallocctl: %zu processes have a control socket: "
			"pick one with -p (see stallocctl list)\n",
			live);
	else
		fprintf(stderr, "stallocctl: no process with a control "
				"socket\n");
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "pid", required_argument, NULL, 'p' },
		{ "socket", required_argument, NULL, 'S' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *sock = NULL, *cmd;
	char path[128], what[64], req[32], *body;
	static const char *const cmds[] = { "maps", "stats", "plan", "trim",
					    "ping" };
	bool json = false, known = false;
	long pid = 0;
	size_t k;
	int c;

	while ((c = getopt_long(argc, argv, "p:S:jh", opts, NULL)) != -1) {
		char *end;

		switch (c) {
		case 'p':
			pid = strtol(optarg, &end, 10);
			if (*end || pid <= 0) {
				fprintf(stderr, "stallocctl: bad pid '%s'\n",
					optarg);
				return 2;
			}
			break;
		case 'S':
			sock = optarg;
			break;
		case 'j':
			json = true;
			break;
		case 'h':
			fputs(usage, stdout);
			return 0;
		default:
			fputs(usage, stderr);
			return 2;
		}
	}
	if (optind != argc - 1) {
		fputs(usage, stderr);
		return 2;
	}
	cmd = argv[optind];
	if (!strcmp(cmd, "list"))
		return cmd_list(json);
	for (k = 0; k < sizeof(cmds) / sizeof(cmds[0]); k++)
		known |= !strcmp(cmd, cmds[k]);
	if (!known) {
		fprintf(stderr, "stallocctl: unknown command '%s'\n%s", cmd,
			usage);
		return 2;
	}
	if (!sock) {
		if (!pid)
			pid = only_pid();
		if (!pid)
			return 1;
		if (!pid_alive(pid)) {
			fprintf(stderr,
				"stallocctl: no process with pid %ld%s\n", pid,
				sock_path(pid, path, sizeof(path)) ||
						access(path, F_OK) ?
					"" :
					" (its control socket is stale)");
			return 1;
		}
		if (sock_path(pid, path, sizeof(path)))
			return 1;
		sock = path;
	}
	if (pid)
		snprintf(what, sizeof(what), "pid %ld", pid);
	else
		snprintf(what, sizeof(what), "socket");
	snprintf(req, sizeof(req), "%s%s\n", cmd, json ? " --json" : "");
	if (ask(sock, what, req, &body, false))
		return 1;
	fputs(body, stdout);
	free(body);
	return 0;
}
