// SPDX-License-Identifier: MIT
/*
 * mapper/ctl-answer.c - the control socket's answers
 *
 * ctl_request() parses one request line ("COMMAND [--json]") and builds
 * the whole answer in memory: "ok\n" or "error MESSAGE\n", then the body
 * (ping, stats, maps, plan, trim, help), in text or JSON.  Everything it
 * reports comes from a snapshot per device (mapper_view_get(), which takes
 * and drops the device lock) and from vmm RCU readers: no allocator lock
 * is held while an answer is formatted, and an allocation failure only
 * truncates the answer (ctl_buf.oom).  The socket side is ctl-server.c;
 * the fuzz target drives ctl_request() directly.
 *
 * Locking: none of its own; see mapper.h for what the snapshot takes.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../lib/util.h"
#include "ctl.h"
#include "mapper.h"

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
	STAT(allocated, true),
	STAT(allocated_peak, true),
	STAT(reserved, true),
	STAT(reserved_peak, true),
	STAT(mapped, true),
	STAT(mapped_peak, true),
	STAT(dynamic_bytes, true),
	STAT(plan_hits, false),
	STAT(plan_misses, false),
	STAT(allocs, false),
	STAT(frees, false),
	STAT(bad_frees, false),
	STAT(oom, false),
	STAT(driver_calls, false),
	STAT(alloc_retries, false),
	STAT(allocated_total, true),
	STAT(freed_total, true),
	STAT(device_syncs, false),
	STAT(host_waits, false),
	STAT(driver_allocs, false),
	STAT(driver_alloc_bytes, true),
};
#undef STAT

#define PEAK(f)                                            \
	{                                                  \
#f, offsetof(struct stalloc_peak, f), true \
	}
static const struct stat_field peak_fields[] = {
	PEAK(reserved),	 PEAK(requested), PEAK(pool_used),
	PEAK(pool_idle), PEAK(dyn_live),  PEAK(dyn_warmup),
	PEAK(slabs),	 PEAK(dyn_free),  PEAK(cached),
};
#undef PEAK

static uint64_t peak_value(const struct stalloc_peak *p, size_t i)
{
	uint64_t v;

	memcpy(&v, (const char *)p + peak_fields[i].off, sizeof(v));
	return v;
}

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
		ctl_printf(b, ",\"peak\":{");
		for (i = 0; i < ARRAY_SIZE(peak_fields); i++)
			ctl_printf(b, "%s\"%s\":%" PRIu64, i ? "," : "",
				   peak_fields[i].name,
				   peak_value(&v->peak, i));
		ctl_printf(b, "}}");
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
	ctl_printf(b, "  at the reserved peak (allocation %" PRIu64 "):\n",
		   v->peak.allocs);
	for (i = 0; i < ARRAY_SIZE(peak_fields); i++) {
		uint64_t x = peak_value(&v->peak, i);

		ctl_printf(b, "    %-14s %20" PRIu64 "  %s\n",
			   peak_fields[i].name, x, human(x, h, sizeof(h)));
	}
	return 0;
}

static int dev_plan(struct ctl_buf *b, const struct mapper_view *v, bool json)
{
	uint64_t seen = v->st.plan_hits + v->st.plan_misses;
	const char *state =
		v->rejected ? "rejected by its check (its fallback)" :
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
	if (v->rejected)
		ctl_printf(b, "  plan          %s\n", v->plan_path);
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
