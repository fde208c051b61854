// SPDX-License-Identifier: MIT
/*
 * mapper/ctl.c - the control socket: a live process's mapping, on request
 *
 * One unix stream socket per process, PID.sock in a per-user directory
 * (stalloc_ctl_dir(): $XDG_RUNTIME_DIR/stalloc, else /tmp/stalloc-UID),
 * which must be a real directory of ours with mode 0700.  A background
 * thread, started with the first device (STALLOC_CTL=0: never), accepts
 * one client at a time: it reads one request line (at most CTL_MAX_REQ
 * bytes, within CTL_TIMEOUT_MS), answers and closes.  The protocol is text:
 * "COMMAND [--json]\n"; the answer is "ok\n" or "error MESSAGE\n", then the
 * body.  Commands: ping, stats, maps, plan, trim, help.
 *
 * Rules: only a peer of our uid, or root, is served (SO_PEERCRED), and only
 * our uid may trim; a malformed request gets an error; a slow client is
 * dropped when its deadline passes; the answer is built in memory from a
 * snapshot (mapper_view_get() takes and drops the device lock) and written
 * with no allocator lock held, without blocking past the deadline, and
 * never raises SIGPIPE.  Nothing a client does can stall or crash the
 * process: the thread is its only victim.
 *
 * Locking: ctl_lock guards the thread's start and stop; the thread reads
 * devices through mapper_view_get() and vmm RCU readers only.
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

#include "../lib/util.h"
#include "ctl.h"
#include "mapper.h"

#define CTL_TIMEOUT_MS 2000

static pthread_mutex_t ctl_lock = PTHREAD_MUTEX_INITIALIZER;
static bool ctl_running;
static pthread_t ctl_thread;
static int ctl_fd = -1;
static int ctl_wake[2] = { -1, -1 };
static char ctl_path[sizeof(((struct sockaddr_un *)0)->sun_path)];

/* ------------------------------------------------------------ buffers */

void ctl_printf(struct ctl_buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (b->oom)
		return;
	/*
	 * Measure, then write: answers are small.  (clang-tidy 14's analyzer
	 * takes ap for uninitialised right after va_start: a false report.)
	 */
	va_start(ap, fmt);
	/* NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized) */
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0 || !ctl_grow(b, (size_t)n + 1)) {
		b->oom = true;
		return;
	}
	va_start(ap, fmt);
	/* NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized) */
	n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

bool ctl_grow(struct ctl_buf *b, size_t more)
{
	size_t cap = b->cap ? b->cap : 4096;
	char *p;

	while (cap - b->len < more)
		cap *= 2;
	if (cap == b->cap)
		return true;
	p = realloc(b->p, cap);
	if (!p) {
		b->oom = true;
		return false;
	}
	b->p = p;
	b->cap = cap;
	return true;
}

/* A JSON string (quotes included). */
static void json_str(struct ctl_buf *b, const char *s)
{
	ctl_printf(b, "\"");
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			ctl_printf(b, "\\%c", c);
		else if (c < 0x20 || c >= 0x7f)
			ctl_printf(b, "\\u%04x", c);
		else
			ctl_printf(b, "%c", c);
	}
	ctl_printf(b, "\"");
}

/* Bytes for people: 512 B, 1.5 KiB, 20.0 MiB... */
static const char *human(uint64_t v, char *buf, size_t size)
{
	static const char *const unit[] = { "B",   "KiB", "MiB",
					    "GiB", "TiB", "PiB" };
	double x = (double)v;
	unsigned int u = 0;

	while (x >= 1024 && u + 1 < ARRAY_SIZE(unit)) {
		x /= 1024;
		u++;
	}
	if (!u)
		snprintf(buf, size, "%" PRIu64 " B", v);
	else
		snprintf(buf, size, "%.1f %s", x, unit[u]);
	return buf;
}

/* ------------------------------------------------------------ answers */

/* Call @fn for each device in use, as a JSON array or one after another. */
static void for_each_device(struct ctl_buf *b, bool json,
			    int (*fn)(struct ctl_buf *b,
				      const struct mapper_view *v, bool json))
{
	struct mapper_view v;
	bool first = true;
	int dev;

	if (json)
		ctl_printf(b, "{\"pid\":%d,\"devices\":[", (int)getpid());
	for (dev = 0; dev < MAPPER_MAX_DEVICES; dev++) {
		if (mapper_view_get(dev, &v))
			continue;
		if (json && !first)
			ctl_printf(b, ",");
		if (!json && !first)
			ctl_printf(b, "\n");
		fn(b, &v, json);
		first = false;
		mapper_view_put(&v);
	}
	if (json)
		ctl_printf(b, "]}\n");
	else if (first)
		ctl_printf(b, "no device in use yet\n");
}

#define STAT(f, bytes)                                       \
	{                                                    \
#f, offsetof(struct stalloc_stats, f), bytes \
	}
static const struct stat_field {
	const char *name;
	size_t off;
	bool bytes;
} stat_fields[] = {
	STAT(allocated, true),	   STAT(allocated_peak, true),
	STAT(reserved, true),	   STAT(reserved_peak, true),
	STAT(mapped, true),	   STAT(mapped_peak, true),
	STAT(dynamic_bytes, true), STAT(plan_hits, false),
	STAT(plan_misses, false),  STAT(allocs, false),
	STAT(frees, false),	   STAT(bad_frees, false),
	STAT(oom, false),	   STAT(driver_calls, false),
};
#undef STAT

static uint64_t stat_value(const struct stalloc_stats *st, size_t i)
{
	uint64_t v;

	memcpy(&v, (const char *)st + stat_fields[i].off, sizeof(v));
	return v;
}

static int dev_stats(struct ctl_buf *b, const struct mapper_view *v, bool json)
{
	char h[32];
	size_t i;

	if (json) {
		ctl_printf(b, "{\"device\":%d,\"mode\":", v->device);
		json_str(b, v->mode);
		ctl_printf(b, ",\"backend\":");
		json_str(b, vmm_backend_name(v->vmm));
		for (i = 0; i < ARRAY_SIZE(stat_fields); i++)
			ctl_printf(b, ",\"%s\":%" PRIu64, stat_fields[i].name,
				   stat_value(&v->st, i));
		ctl_printf(b, "}");
		return 0;
	}
	ctl_printf(b, "device %d: mode %s, backend %s\n", v->device, v->mode,
		   vmm_backend_name(v->vmm));
	for (i = 0; i < ARRAY_SIZE(stat_fields); i++) {
		uint64_t x = stat_value(&v->st, i);

		ctl_printf(b, "  %-16s %20" PRIu64 "%s%s\n",
			   stat_fields[i].name, x,
			   stat_fields[i].bytes ? "  " : "",
			   stat_fields[i].bytes ? human(x, h, sizeof(h)) : "");
	}
	return 0;
}

static int dev_plan(struct ctl_buf *b, const struct mapper_view *v, bool json)
{
	uint64_t seen = v->st.plan_hits + v->st.plan_misses;
	const char *state =
		!v->planned ? "none" :
		v->disabled ? "dropped (made for another workload)" :
			      "in use";

	if (json) {
		ctl_printf(b, "{\"device\":%d,\"mode\":", v->device);
		json_str(b, v->mode);
		ctl_printf(b, ",\"state\":");
		json_str(b, state);
		ctl_printf(b, ",\"plan\":");
		json_str(b, v->plan_path);
		ctl_printf(b,
			   ",\"fingerprint\":\"0x%016" PRIx64
			   "\",\"entries\":%" PRIu64 ",\"positions\":%" PRIu64
			   ",\"warmup\":%" PRIu64 ",\"cursor\":%" PRIu64
			   ",\"iterations\":%" PRIu64 ",\"plan_hits\":%" PRIu64
			   ",\"plan_misses\":%" PRIu64
			   ",\"pool_bytes\":%" PRIu64 "}",
			   v->fingerprint, v->nr_entries, v->nr_positions,
			   v->warmup, v->cursor, v->marks, v->st.plan_hits,
			   v->st.plan_misses, v->pool_hi - v->pool_lo);
		return 0;
	}
	ctl_printf(b, "device %d: mode %s, plan %s\n", v->device, v->mode,
		   state);
	if (!v->planned)
		return 0;
	ctl_printf(b,
		   "  plan          %s\n"
		   "  fingerprint   0x%016" PRIx64 "\n"
		   "  entries       %" PRIu64 " (%" PRIu64
		   " positions per iteration, warm-up %" PRIu64 ")\n"
		   "  cursor        %" PRIu64 "\n"
		   "  iterations    %" PRIu64 " markers seen\n"
		   "  hits          %" PRIu64 "\n"
		   "  misses        %" PRIu64 "\n"
		   "  hit rate      %.2f%%\n",
		   v->plan_path, v->fingerprint, v->nr_entries, v->nr_positions,
		   v->warmup, v->cursor, v->marks, v->st.plan_hits,
		   v->st.plan_misses,
		   seen ? 100.0 * (double)v->st.plan_hits / (double)seen : 0.0);
	return 0;
}

static int dev_maps(struct ctl_buf *b, const struct mapper_view *v, bool json);

static void answer_ping(struct ctl_buf *b, bool json)
{
	char cmd[256] = "";
	ssize_t n = 0;
	int fd, i;

	fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		n = read(fd, cmd, sizeof(cmd) - 1);
		close(fd);
	}
	for (i = 0; i < n - 1; i++)
		if (!cmd[i])
			cmd[i] = ' ';
	if (json) {
		ctl_printf(b, "{\"pid\":%d,\"version\":", (int)getpid());
		json_str(b, stalloc_version_string());
		ctl_printf(b, ",\"cmdline\":");
		json_str(b, cmd);
		ctl_printf(b, "}\n");
	} else {
		ctl_printf(b, "pid %d, stalloc %s: %s\n", (int)getpid(),
			   stalloc_version_string(), cmd);
	}
}

static void answer_trim(struct ctl_buf *b, bool json)
{
	uint64_t before = 0, after = 0;
	struct stalloc_stats st;
	int dev;

	for (dev = 0; dev < MAPPER_MAX_DEVICES; dev++)
		if (!stalloc_stats(dev, &st))
			before += st.reserved;
	stalloc_empty_cache();
	for (dev = 0; dev < MAPPER_MAX_DEVICES; dev++)
		if (!stalloc_stats(dev, &st))
			after += st.reserved;
	if (json)
		ctl_printf(b,
			   "{\"reserved_before\":%" PRIu64
			   ",\"reserved_after\":%" PRIu64 "}\n",
			   before, after);
	else
		ctl_printf(b,
			   "trimmed: reserved %" PRIu64 " -> %" PRIu64
			   " bytes\n",
			   before, after);
}

int ctl_request(const char *req, size_t len, bool owner, struct ctl_buf *out)
{
	char cmd[16] = "", opt[16] = "";
	bool json;
	size_t i;

	if (len && req[len - 1] == '\n')
		len--;
	if (len && req[len - 1] == '\r')
		len--;
	for (i = 0; i < len; i++)
		if ((unsigned char)req[i] < 0x20 ||
		    (unsigned char)req[i] > 0x7e)
			return -EINVAL;
	if (len >= CTL_MAX_REQ)
		return -E2BIG;
	{
		char line[CTL_MAX_REQ + 1];
		char extra[2];
		int n;

		memcpy(line, req, len);
		line[len] = 0;
		n = sscanf(line, "%15s %15s %1s", cmd, opt, extra);
		if (n < 1 || n > 2 || (n == 2 && strcmp(opt, "--json") != 0))
			return -EINVAL;
		json = n == 2;
	}
	if (!strcmp(cmd, "ping")) {
		answer_ping(out, json);
	} else if (!strcmp(cmd, "stats")) {
		for_each_device(out, json, dev_stats);
	} else if (!strcmp(cmd, "maps")) {
		for_each_device(out, json, dev_maps);
	} else if (!strcmp(cmd, "plan")) {
		for_each_device(out, json, dev_plan);
	} else if (!strcmp(cmd, "trim")) {
		if (!owner)
			return -EPERM;
		answer_trim(out, json);
	} else if (!strcmp(cmd, "help")) {
		ctl_printf(out, "ping stats maps plan trim help "
				"(each may take --json)\n");
	} else {
		return -ENOENT;
	}
	return out->oom ? -ENOMEM : 0;
}

const char *ctl_strerror(int err)
{
	switch (err) {
	case -EINVAL:
		return "malformed request (want: COMMAND [--json])";
	case -E2BIG:
		return "request too long";
	case -ENOENT:
		return "unknown command (try help)";
	case -EPERM:
		return "permission denied";
	case -ENOMEM:
		return "out of memory";
	case -ETIMEDOUT:
		return "request timed out";
	default:
		return "failed";
	}
}

/* ------------------------------------------------------------ maps */

/* The row of the maps table being built, and where the walk is. */
struct maps_walk {
	struct ctl_buf *b;
	const struct mapper_view *v;
	bool json;
	size_t j; /* first busy range that may reach the next slot */
	unsigned int rows;
	bool open;
	uint64_t lo, hi, first_id, last_id;
	unsigned int owners; /* bit per enum mapper_owner */
	bool in_pool;
};

static const char *const owner_names[] = { "plan", "reused", "dynamic",
					   "slab" };

static void owner_string(unsigned int owners, bool in_pool, char *buf,
			 size_t size)
{
	size_t k, n = 0;

	buf[0] = 0;
	if (!owners) {
		snprintf(buf, size, "%s", in_pool ? "plan-pool" : "dynamic");
		return;
	}
	for (k = 0; k < ARRAY_SIZE(owner_names); k++)
		if (owners & (1u << k))
			n += (size_t)snprintf(buf + n, size - n, "%s%s",
					      n ? "+" : "", owner_names[k]);
}

static const char *row_state(const struct maps_walk *w)
{
	if (w->owners & (1u << MAPPER_PLAN))
		return "static";
	return w->owners ? "dynamic" : "free-mapped";
}

static void row_flush(struct maps_walk *w)
{
	uint64_t chunks = w->last_id - w->first_id + 1;
	char owner[64], h[32], ids[48];

	if (!w->open)
		return;
	owner_string(w->owners, w->in_pool, owner, sizeof(owner));
	if (w->json) {
		ctl_printf(w->b,
			   "%s{\"start\":\"0x%" PRIx64 "\",\"end\":\"0x%" PRIx64
			   "\",\"bytes\":%" PRIu64 ",\"chunks\":%" PRIu64
			   ",\"first_chunk_id\":%" PRIu64
			   ",\"last_chunk_id\":%" PRIu64
			   ",\"state\":\"%s\",\"owner\":\"%s\"}",
			   w->rows ? "," : "", w->lo, w->hi, w->hi - w->lo,
			   chunks, w->first_id, w->last_id, row_state(w),
			   owner);
	} else {
		if (chunks == 1)
			snprintf(ids, sizeof(ids), "%" PRIu64, w->first_id);
		else
			snprintf(ids, sizeof(ids), "%" PRIu64 "-%" PRIu64,
				 w->first_id, w->last_id);
		ctl_printf(w->b,
			   "  0x%014" PRIx64 "  0x%014" PRIx64
			   "  %10s  %6" PRIu64 "  %-13s  %-11s  %s\n",
			   w->lo, w->hi, human(w->hi - w->lo, h, sizeof(h)),
			   chunks, ids, row_state(w), owner);
	}
	w->rows++;
	w->open = false;
}

/* Which owners hold part of [lo, hi)?  The busy ranges are disjoint. */
static unsigned int slot_owners(struct maps_walk *w, uint64_t lo, uint64_t hi)
{
	const struct mapper_view *v = w->v;
	unsigned int owners = 0;
	size_t k;

	while (w->j < v->nr_busy && v->busy[w->j].hi <= lo)
		w->j++;
	for (k = w->j; k < v->nr_busy && v->busy[k].lo < hi; k++)
		owners |= 1u << v->busy[k].owner;
	return owners;
}

static void maps_slot(struct maps_walk *w, uint64_t va, uint64_t chunk,
		      uint64_t id)
{
	bool in_pool = va >= w->v->pool_lo && va < w->v->pool_hi;
	unsigned int owners = slot_owners(w, va, va + chunk);

	if (w->open && (w->hi != va || w->last_id + 1 != id ||
			w->owners != owners || w->in_pool != in_pool))
		row_flush(w);
	if (!w->open) {
		w->open = true;
		w->lo = va;
		w->first_id = id;
		w->owners = owners;
		w->in_pool = in_pool;
	}
	w->hi = va + chunk;
	w->last_id = id;
}

static int maps_run(const struct vmm_mapping *m, void *arg)
{
	struct maps_walk *w = arg;
	uint64_t chunk = vmm_chunk_bytes(w->v->vmm), k;
	struct vmm_translation t;

	for (k = 0; k < m->nr_chunks; k++) {
		uint64_t va = m->va + k * chunk;

		if (!vmm_lookup(w->v->vmm, va, &t))
			continue; /* unmapped since the run was read */
		maps_slot(w, va, chunk, t.chunk_id);
	}
	return w->b->oom ? -ENOMEM : 0;
}

static int dev_maps(struct ctl_buf *b, const struct mapper_view *v, bool json)
{
	struct maps_walk w = { .b = b, .v = v, .json = json };
	uint64_t chunk = vmm_chunk_bytes(v->vmm);
	char h1[32], h2[32];

	if (json) {
		ctl_printf(b, "{\"device\":%d,\"mode\":", v->device);
		json_str(b, v->mode);
		ctl_printf(b, ",\"backend\":");
		json_str(b, vmm_backend_name(v->vmm));
		ctl_printf(b,
			   ",\"chunk_bytes\":%" PRIu64
			   ",\"mapped_bytes\":%" PRIu64
			   ",\"reserved_bytes\":%" PRIu64 ",\"ranges\":[",
			   chunk, v->st.mapped, v->st.reserved);
	} else {
		ctl_printf(b,
			   "device %d: mode %s, backend %s, chunk %s, "
			   "%" PRIu64 " chunks mapped (%s)\n",
			   v->device, v->mode, vmm_backend_name(v->vmm),
			   human(chunk, h1, sizeof(h1)), v->st.mapped / chunk,
			   human(v->st.mapped, h2, sizeof(h2)));
		ctl_printf(b, "  %-16s  %-16s  %10s  %6s  %-13s  %-11s  %s\n",
			   "START", "END", "SIZE", "CHUNKS", "CHUNK IDS",
			   "STATE", "OWNER");
	}
	vmm_for_each_mapping(v->vmm, maps_run, &w);
	row_flush(&w);
	if (json)
		ctl_printf(b, "]}");
	else if (!w.rows)
		ctl_printf(b, "  (nothing mapped)\n");
	return 0;
}

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
	pthread_mutex_init(&ctl_lock, NULL);
}

void ctl_start(void)
{
	static bool atfork_done;
	const char *env = getenv("STALLOC_CTL");

	if (env && !strcmp(env, "0"))
		return;
	pthread_mutex_lock(&ctl_lock);
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
	pthread_mutex_unlock(&ctl_lock);
}

void ctl_stop(void)
{
	pthread_mutex_lock(&ctl_lock);
	if (ctl_running) {
		if (write(ctl_wake[1], "x", 1) < 0)
			sa_log(STALLOC_LOG_WARN, "ctl: cannot wake the server");
		pthread_join(ctl_thread, NULL);
		unlink(ctl_path);
		ctl_path[0] = 0;
		ctl_close_fds();
		ctl_running = false;
	}
	pthread_mutex_unlock(&ctl_lock);
}

/* At exit (or unload) the socket goes; the thread dies with the process. */
__attribute__((destructor)) static void ctl_exit(void)
{
	if (ctl_running && ctl_path[0])
		unlink(ctl_path);
}
