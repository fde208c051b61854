// SPDX-License-Identifier: MIT
/*
 * mapper/ctl-server.c - the control socket: a live process's mapping, on
 * request
 *
 * One unix stream socket per process, PID.sock in a per-user directory
 * (stalloc_ctl_dir(): $XDG_RUNTIME_DIR/stalloc, else /tmp/stalloc-UID),
 * which must be a real directory of ours with mode 0700.  A background
 * thread, started with the first device (STALLOC_CTL=0: never), accepts
 * one client at a time: it reads one request line (at most CTL_MAX_REQ
 * bytes, within CTL_TIMEOUT_MS), has ctl_request() (ctl-answer.c) answer
 * it, writes the answer and closes.
 *
 * Rules: only a peer of our uid, or root, is served (SO_PEERCRED), and only
 * our uid may trim; a slow client is dropped when its deadline passes; the
 * answer is written with no allocator lock held, without blocking past the
 * deadline, and never raises SIGPIPE.  Nothing a client does can stall or
 * crash the process: the thread is its only victim.
 *
 * Locking: ctl_lock guards the thread's start and stop (taken before any
 * device lock, never inside one: mapper.h); the thread itself holds no
 * lock while it serves.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "../lib/options.h"
#include "../lib/util.h"
#include "ctl.h"
#include "mapper.h"

#define CTL_TIMEOUT_MS 2000

static struct sa_mutex ctl_lock = SA_MUTEX_INIT(SA_RANK_CTL, "ctl_lock");
static bool ctl_running;
static pthread_t ctl_thread;
static int ctl_fd = -1;
static int ctl_wake[2] = { -1, -1 };
static char ctl_path[sizeof(((struct sockaddr_un *)0)->sun_path)];

/* ------------------------------------------------------------ server */

int stalloc_ctl_dir(char *buf, size_t size)
{
	const char *xdg = getenv("XDG_RUNTIME_DIR");
	int n;

	if (xdg && *xdg == '/')
		n = snprintf(buf, size, "%s/stalloc", xdg);
	else
		n = snprintf(buf, size, "/tmp/stalloc-%u", (unsigned)getuid());
	if (n < 0 || (size_t)n >= size)
		return sa_error(-ENAMETOOLONG,
				"ctl: the socket directory's name is too long");
	return 0;
}

/* Make or check the directory: ours, a real directory, mode 0700. */
static int ctl_check_dir(const char *dir)
{
	struct stat st;

	if (mkdir(dir, 0700) && errno != EEXIST)
		return sa_error(-errno, "ctl: mkdir %s: %s", dir,
				strerror(errno));
	if (lstat(dir, &st))
		return sa_error(-errno, "ctl: %s: %s", dir, strerror(errno));
	if (!S_ISDIR(st.st_mode) || st.st_uid != getuid() || (st.st_mode & 077))
		return sa_error(-EPERM,
				"ctl: %s is not a private directory of this "
				"user (want mode 0700, owner %u): no control "
				"socket",
				dir, (unsigned)getuid());
	return 0;
}

static int ctl_listen(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char dir[sizeof(sa.sun_path)];
	int fd, err, n;

	err = stalloc_ctl_dir(dir, sizeof(dir));
	if (!err)
		err = ctl_check_dir(dir);
	if (err)
		return err;
	n = snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%d.sock", dir,
		     (int)getpid());
	if (n < 0 || (size_t)n >= sizeof(sa.sun_path))
		return sa_error(-ENAMETOOLONG, "ctl: socket path too long");
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return sa_error(-errno, "ctl: socket: %s", strerror(errno));
	unlink(sa.sun_path); /* a stale one of a dead process of this pid */
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    chmod(sa.sun_path, 0600) || listen(fd, 8)) {
		err = sa_error(-errno, "ctl: %s: %s", sa.sun_path,
			       strerror(errno));
		goto err_close;
	}
	memcpy(ctl_path, sa.sun_path, sizeof(ctl_path));
	ctl_fd = fd;
	return 0;

err_close:
	close(fd);
	unlink(sa.sun_path);
	return err;
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Wait for @events on @fd until @deadline; false on timeout or error. */
static bool wait_fd(int fd, short events, int64_t deadline)
{
	struct pollfd p = { .fd = fd, .events = events };
	int64_t left;
	int r;

	do {
		left = deadline - now_ms();
		if (left <= 0)
			return false;
		r = poll(&p, 1, (int)left);
	} while (r < 0 && errno == EINTR);
	return r > 0;
}

/* Read one request line; its length, or -errno. */
static ssize_t read_request(int c, char *buf, int64_t deadline)
{
	size_t len = 0;
	ssize_t n;

	while (len < CTL_MAX_REQ) {
		if (!wait_fd(c, POLLIN, deadline))
			return -ETIMEDOUT;
		n = recv(c, buf + len, CTL_MAX_REQ - len, 0);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n <= 0)
			return len ? (ssize_t)len : -EINVAL;
		if (memchr(buf + len, '\n', (size_t)n))
			return (ssize_t)len + n;
		len += (size_t)n;
	}
	return -E2BIG;
}

static void send_all(int c, const char *p, size_t len, int64_t deadline)
{
	ssize_t n;

	while (len) {
		if (!wait_fd(c, POLLOUT, deadline))
			return; /* slow client: dropped */
		n = send(c, p, len, MSG_NOSIGNAL);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n <= 0)
			return;
		p += n;
		len -= (size_t)n;
	}
}

/*
 * Read what the client still sends (an oversized request) before closing,
 * so that it sees the answer rather than a reset; bounded by the deadline
 * and a few requests' worth.
 */
static void drain(int c, int64_t deadline)
{
	char sink[CTL_MAX_REQ];
	size_t total = 0;
	ssize_t n;

	shutdown(c, SHUT_WR);
	while (total < (size_t)64 * CTL_MAX_REQ &&
	       wait_fd(c, POLLIN, deadline)) {
		n = recv(c, sink, sizeof(sink), 0);
		if (n <= 0)
			break;
		total += (size_t)n;
	}
}

static void serve_client(int c)
{
	int64_t deadline = now_ms() + CTL_TIMEOUT_MS;
	struct ctl_buf out = { 0 };
	struct ucred cred;
	socklen_t clen = sizeof(cred);
	char req[CTL_MAX_REQ], head[128];
	ssize_t n;
	int err;

	if (getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &clen) ||
	    (cred.uid != getuid() && cred.uid != 0)) {
		err = -EPERM;
		goto answer;
	}
	n = read_request(c, req, deadline);
	if (n < 0) {
		err = (int)n;
		goto answer;
	}
	err = ctl_request(req, (size_t)n, cred.uid == getuid(), &out);
answer:
	if (err)
		snprintf(head, sizeof(head), "error %s\n", ctl_strerror(err));
	else
		snprintf(head, sizeof(head), "ok\n");
	send_all(c, head, strlen(head), deadline);
	if (!err)
		send_all(c, out.p, out.len, deadline);
	free(out.p);
	drain(c, deadline);
}

static void *ctl_main(void *arg)
{
	sigset_t all;

	(void)arg;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL); /* signals are the app's */
	for (;;) {
		struct pollfd p[2] = { { .fd = ctl_fd, .events = POLLIN },
				       { .fd = ctl_wake[0],
					 .events = POLLIN } };
		int c;

		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (p[1].revents)
			break;
		if (!(p[0].revents & POLLIN))
			continue;
		c = accept4(ctl_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (c < 0)
			continue;
		serve_client(c);
		close(c);
	}
	return NULL;
}

static void ctl_close_fds(void)
{
	if (ctl_fd >= 0)
		close(ctl_fd);
	if (ctl_wake[0] >= 0)
		close(ctl_wake[0]);
	if (ctl_wake[1] >= 0)
		close(ctl_wake[1]);
	ctl_fd = ctl_wake[0] = ctl_wake[1] = -1;
}

/* A forked child has no server thread; the socket is the parent's. */
static void ctl_atfork_child(void)
{
	ctl_running = false;
	ctl_path[0] = 0;
	ctl_close_fds();
	sa_mutex_init(&ctl_lock, SA_RANK_CTL, "ctl_lock");
}

void ctl_start(void)
{
	static bool atfork_done;
	bool on;

	if (sa_opt_bool(SA_OPT_CTL, &on)) {
		sa_log(STALLOC_LOG_ERROR, "%s: no control socket",
		       stalloc_last_error());
		return;
	}
	if (!on)
		return;
	sa_mutex_lock(&ctl_lock);
	if (ctl_running)
		goto out;
	if (!atfork_done) {
		pthread_atfork(NULL, NULL, ctl_atfork_child);
		atfork_done = true;
	}
	if (pipe2(ctl_wake, O_CLOEXEC)) {
		ctl_wake[0] = ctl_wake[1] = -1;
		goto out;
	}
	if (ctl_listen())
		goto err_fds;
	if (pthread_create(&ctl_thread, NULL, ctl_main, NULL))
		goto err_unlink;
	ctl_running = true;
	sa_log(STALLOC_LOG_INFO, "ctl: control socket %s", ctl_path);
	goto out;

err_unlink:
	unlink(ctl_path);
	ctl_path[0] = 0;
err_fds:
	sa_log(STALLOC_LOG_WARN, "%s", stalloc_last_error());
	ctl_close_fds();
out:
	sa_mutex_unlock(&ctl_lock);
}

void ctl_stop(void)
{
	sa_mutex_lock(&ctl_lock);
	if (ctl_running) {
		if (write(ctl_wake[1], "x", 1) < 0)
			sa_log(STALLOC_LOG_WARN, "ctl: cannot wake the server");
		pthread_join(ctl_thread, NULL);
		unlink(ctl_path);
		ctl_path[0] = 0;
		ctl_close_fds();
		ctl_running = false;
	}
	sa_mutex_unlock(&ctl_lock);
}

/* At exit (or unload) the socket goes; the thread dies with the process. */
__attribute__((destructor)) static void ctl_exit(void)
{
	if (ctl_running && ctl_path[0])
		unlink(ctl_path);
}
