// SPDX-License-Identifier: MIT
/*
 * tools/preload/stalloc-cpu.c - libstalloc-cpu.so, an LD_PRELOAD library
 * that puts PyTorch's CPU tensors into libstalloc (host backend)
 *
 * PyTorch 1.13 allocates every CPU tensor in c10::alloc_cpu(), which calls
 * posix_memalign(64, n), and frees it in c10::free_cpu(), which calls
 * free().  This library interposes posix_memalign, aligned_alloc, memalign
 * and free.  An aligned allocation is served by stalloc_malloc(size, 0,
 * NULL) when its return address lies in libc10.so's text and its size is
 * at least STALLOC_CPU_MIN; everything else goes to glibc (__libc_memalign,
 * __libc_free).  A free goes to stalloc_free() when stalloc_owns() says the
 * pointer lies in stalloc's reservation (one range check), to glibc
 * otherwise.  STALLOC_BACKEND is forced to "host"; STALLOC_MODE,
 * STALLOC_PLAN, STALLOC_TRACE, STALLOC_AUTO_ITERS work as in the runtime
 * (Documentation/mapper.rst).
 *
 * Invariants:
 * - a pointer inside stalloc's reservation never goes to glibc, and a
 *   pointer outside it never goes to stalloc: no allocator ever sees the
 *   other's memory, so a mix-up cannot corrupt either heap;
 * - stalloc_shutdown() is never called: tensors freed by static destructors
 *   after ours must still find the reservation;
 * - if libstalloc fails to set up, routing stops for good after one warning
 *   and every request goes to glibc.
 *
 * Locking and re-entrancy:
 * - libstalloc's own code may call free() and posix_memalign(): a
 *   thread-local guard (initial-exec TLS, so reading it never allocates)
 *   sends every call made while the thread is inside libstalloc straight to
 *   glibc;
 * - libc10's text range is published once with release/acquire atomics;
 *   the counters are relaxed atomics;
 * - the address log (STALLOC_CPU_ADDR_LOG) is a buffer under log_lock, a
 *   plain mutex that never calls malloc; a free is logged before the block
 *   goes back to stalloc and an allocation after it came out, so the log's
 *   order never shows two live blocks overlapping when none did.
 *
 * Fork: the host backend maps memfd pages MAP_SHARED, so a child would
 * write into its parent's tensors.  STALLOC_HOST_FORK=copy (set here) makes
 * the host backend's fork policy give the child a private copy of every
 * mapping (vmm/backend-host.c, the one place that policy lives); this
 * library's child handler only stops routing: the child's new tensors come
 * from glibc, its frees of inherited stalloc blocks are dropped (they are
 * the parent's to free), and it never takes a lock another thread of the
 * parent may have held at fork.
 */
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <malloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <stalloc/stalloc.h>

#define CPU_API __attribute__((visibility("default")))
#define CPU_MIN_DEFAULT 1024
#define LOG_BUF_SIZE 65536

/* glibc's own allocator entry points (exported by libc.so.6). */
extern void *__libc_memalign(size_t alignment, size_t size);
extern void __libc_free(void *ptr);

static __thread int in_stalloc __attribute__((tls_model("initial-exec")));

static bool ready; /* constructor ran, settings read */
static bool disabled; /* libstalloc failed: glibc only */
static bool in_child; /* after fork: glibc only */
static size_t cpu_min = CPU_MIN_DEFAULT;
static uintptr_t c10_lo, c10_hi; /* libc10.so's text; c10_hi set last */
static unsigned long long dl_adds_seen;

static struct {
	unsigned long long routed, routed_bytes, small, other, fallback;
	unsigned long long frees, child_frees;
} cnt;

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static int log_fd = -1;
static bool log_direct; /* after the destructor: write each line at once */
static size_t log_len;
static unsigned long long log_id;
static char log_buf[LOG_BUF_SIZE];

static void count(unsigned long long *c, unsigned long long n)
{
	__atomic_fetch_add(c, n, __ATOMIC_RELAXED);
}

/* stderr as it was at start: some programs close it before exiting */
static int warn_fd = STDERR_FILENO;

static void warn_msg(const char *msg)
{
	ssize_t r = write(warn_fd, msg, strlen(msg));

	(void)r;
}

/* ------------------------------------------------------ glibc fallbacks */

static bool pow2(size_t x)
{
	return x && !(x & (x - 1));
}

static int glibc_posix_memalign(void **out, size_t align, size_t size)
{
	void *p;

	if (align % sizeof(void *) || !pow2(align / sizeof(void *)))
		return EINVAL;
	p = __libc_memalign(align, size);
	if (!p)
		return ENOMEM;
	*out = p;
	return 0;
}

/* ------------------------------------------------------ the address log */

static void log_flush_locked(void)
{
	size_t off = 0;

	while (off < log_len) {
		ssize_t r = write(log_fd, log_buf + off, log_len - off);

		if (r <= 0)
			break;
		off += (size_t)r;
	}
	log_len = 0;
}

static char *put_hex(char *s, uint64_t v)
{
	char tmp[16];
	int n = 0;

	*s++ = '0';
	*s++ = 'x';
	do {
		tmp[n++] = "0123456789abcdef"[v & 15];
		v >>= 4;
	} while (v);
	while (n)
		*s++ = tmp[--n];
	return s;
}

static char *put_dec(char *s, uint64_t v)
{
	char tmp[20];
	int n = 0;

	do {
		tmp[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	while (n)
		*s++ = tmp[--n];
	return s;
}

/* "a ID ADDR SIZE" for an allocation, "f ADDR" for a free. */
static void log_event(bool alloc, const void *ptr, size_t size)
{
	char line[80], *s = line;

	if (log_fd < 0 || in_child)
		return;
	pthread_mutex_lock(&log_lock);
	*s++ = alloc ? 'a' : 'f';
	*s++ = ' ';
	if (alloc) {
		s = put_dec(s, log_id++);
		*s++ = ' ';
	}
	s = put_hex(s, (uint64_t)(uintptr_t)ptr);
	if (alloc) {
		*s++ = ' ';
		s = put_dec(s, size);
	}
	*s++ = '\n';
	if (log_len + (size_t)(s - line) > sizeof(log_buf))
		log_flush_locked();
	memcpy(log_buf + log_len, line, (size_t)(s - line));
	log_len += (size_t)(s - line);
	if (log_direct)
		log_flush_locked();
	pthread_mutex_unlock(&log_lock);
}

/* ------------------------------------------------------ who is calling */

struct c10_search {
	unsigned long long adds;
	bool unchanged;
	uintptr_t lo, hi;
};

static bool is_c10(const char *path)
{
	const char *base = strrchr(path, '/');

	base = base ? base + 1 : path;
	return !strncmp(base, "libc10.so", 9) &&
	       (base[9] == '\0' || base[9] == '.');
}

static int c10_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct c10_search *cs = arg;
	int i;

	if (size >= offsetof(struct dl_phdr_info, dlpi_subs) && !cs->adds) {
		/* first object: has anything been loaded since last time? */
		cs->adds = info->dlpi_adds;
		if (cs->adds ==
		    __atomic_load_n(&dl_adds_seen, __ATOMIC_RELAXED)) {
			cs->unchanged = true;
			return 1;
		}
	}
	if (!info->dlpi_name || !is_c10(info->dlpi_name))
		return 0;
	for (i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];

		if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X))
			continue;
		cs->lo = info->dlpi_addr + ph->p_vaddr;
		cs->hi = cs->lo + ph->p_memsz;
		return 1;
	}
	return 0;
}

/*
 * Is @ra, a return address, inside libc10.so?  Until libc10 is found, each
 * call asks the loader whether objects were added since the last search
 * (one callback) and searches them only then.
 */
static bool from_c10(uintptr_t ra)
{
	uintptr_t hi = __atomic_load_n(&c10_hi, __ATOMIC_ACQUIRE);
	struct c10_search cs = { 0 };

	if (hi)
		return ra >= c10_lo && ra < hi;
	dl_iterate_phdr(c10_cb, &cs);
	if (cs.unchanged)
		return false;
	__atomic_store_n(&dl_adds_seen, cs.adds, __ATOMIC_RELAXED);
	if (!cs.hi)
		return false;
	c10_lo = cs.lo;
	__atomic_store_n(&c10_hi, cs.hi, __ATOMIC_RELEASE);
	return ra >= cs.lo && ra < cs.hi;
}

/* ------------------------------------------------------ the entry points */

/*
 * Serve one aligned request: stalloc for libc10's tensors, glibc for the
 * rest.  Returns 0 or an errno value, as posix_memalign does.
 */
static int cpu_alloc(void **out, size_t align, size_t size, uintptr_t ra)
{
	void *p;

	if (!ready || disabled || in_child || in_stalloc || align > 512 ||
	    !pow2(align))
		return glibc_posix_memalign(out, align, size);
	if (!from_c10(ra)) {
		count(&cnt.other, 1);
		return glibc_posix_memalign(out, align, size);
	}
	if (size < cpu_min) {
		count(&cnt.small, 1);
		return glibc_posix_memalign(out, align, size);
	}
	in_stalloc = 1;
	p = stalloc_malloc(size, 0, NULL);
	if (!p) {
		struct stalloc_stats st;

		if (stalloc_stats(0, &st) == -ENOENT &&
		    !__atomic_exchange_n(&disabled, true, __ATOMIC_RELAXED)) {
			warn_msg("stalloc-cpu: warning: libstalloc cannot "
				 "start (");
			warn_msg(stalloc_last_error());
			warn_msg("): every allocation goes to glibc\n");
		}
		in_stalloc = 0;
		count(&cnt.fallback, 1);
		return glibc_posix_memalign(out, align, size);
	}
	in_stalloc = 0;
	count(&cnt.routed, 1);
	count(&cnt.routed_bytes, size);
	log_event(true, p, size);
	*out = p;
	return 0;
}

CPU_API int posix_memalign(void **memptr, size_t alignment, size_t size)
{
	uintptr_t ra = (uintptr_t)__builtin_return_address(0);

	if (alignment % sizeof(void *) || !pow2(alignment / sizeof(void *)))
		return EINVAL;
	return cpu_alloc(memptr, alignment, size, ra);
}

CPU_API void *aligned_alloc(size_t alignment, size_t size)
{
	uintptr_t ra = (uintptr_t)__builtin_return_address(0);
	void *p = NULL;
	int err;

	if (!pow2(alignment)) {
		errno = EINVAL;
		return NULL;
	}
	if (alignment < sizeof(void *))
		alignment = sizeof(void *);
	err = cpu_alloc(&p, alignment, size, ra);
	if (err)
		errno = err;
	return err ? NULL : p;
}

CPU_API void *memalign(size_t alignment, size_t size)
{
	uintptr_t ra = (uintptr_t)__builtin_return_address(0);
	void *p = NULL;
	int err;

	if (!pow2(alignment) || alignment < sizeof(void *))
		return __libc_memalign(alignment, size);
	err = cpu_alloc(&p, alignment, size, ra);
	if (err)
		errno = err;
	return err ? NULL : p;
}

CPU_API void free(void *ptr)
{
	if (!ptr)
		return;
	if (in_stalloc || !stalloc_owns(ptr, 0)) {
		__libc_free(ptr);
		return;
	}
	if (in_child) {
		/* the parent's block: the parent frees it */
		count(&cnt.child_frees, 1);
		return;
	}
	log_event(false, ptr, 0);
	in_stalloc = 1;
	stalloc_free(ptr, 0, 0, NULL);
	in_stalloc = 0;
	count(&cnt.frees, 1);
}

/* ------------------------------------------------------ fork */

/*
 * What a child gets of the tensors is the host backend's fork policy
 * (STALLOC_HOST_FORK=copy, set below: a private copy of every mapping, made
 * by the runtime's own fork handler).  Here only the log: its lock is held
 * across fork, and the child starts with an empty buffer and no file.
 */
static void fork_prepare(void)
{
	pthread_mutex_lock(&log_lock);
}

static void fork_parent(void)
{
	pthread_mutex_unlock(&log_lock);
}

static void fork_child(void)
{
	in_child = true;
	log_len = 0;
	if (log_fd >= 0)
		close(log_fd);
	log_fd = -1;
	pthread_mutex_unlock(&log_lock);
}

/* ------------------------------------------------------ set-up, exit */

static const char *mode_name(void)
{
	const char *m = stalloc_option_string("STALLOC_MODE");

	return m ? m : "(not accepted)";
}

static void write_stats(const char *path)
{
	struct stalloc_stats st = { 0 };
	bool used;
	FILE *f;

	in_stalloc = 1;
	used = !stalloc_stats(0, &st);
	in_stalloc = 0;
	f = fopen(path, "w");
	if (!f) {
		warn_msg(
			"stalloc-cpu: warning: cannot write STALLOC_CPU_STATS\n");
		return;
	}
	fprintf(f,
		"{\"pid\": %d, \"mode\": \"%s\", \"c10_found\": %s, "
		"\"disabled\": %s, \"min_size\": %zu, \"device_used\": %s,\n"
		" \"routed\": %llu, \"routed_bytes\": %llu, \"frees\": %llu, "
		"\"small\": %llu, \"other\": %llu, \"fallback\": %llu,\n"
		" \"allocated_peak\": %llu, \"reserved_peak\": %llu, "
		"\"mapped_peak\": %llu, \"mapped\": %llu,\n"
		" \"plan_hits\": %llu, \"plan_misses\": %llu, "
		"\"allocs\": %llu, \"stalloc_frees\": %llu, "
		"\"bad_frees\": %llu, \"oom\": %llu, \"driver_calls\": %llu}\n",
		(int)getpid(), mode_name(), c10_hi ? "true" : "false",
		disabled ? "true" : "false", cpu_min, used ? "true" : "false",
		cnt.routed, cnt.routed_bytes, cnt.frees, cnt.small, cnt.other,
		cnt.fallback, (unsigned long long)st.allocated_peak,
		(unsigned long long)st.reserved_peak,
		(unsigned long long)st.mapped_peak,
		(unsigned long long)st.mapped, (unsigned long long)st.plan_hits,
		(unsigned long long)st.plan_misses,
		(unsigned long long)st.allocs, (unsigned long long)st.frees,
		(unsigned long long)st.bad_frees, (unsigned long long)st.oom,
		(unsigned long long)st.driver_calls);
	fclose(f);
}

/* STALLOC_CPU_MIN: a byte count (the option table's rules). */
static void read_min(void)
{
	uint64_t v;

	if (stalloc_option_size("STALLOC_CPU_MIN", CPU_MIN_DEFAULT, &v)) {
		fprintf(stderr, "stalloc-cpu: warning: %s: using %d\n",
			stalloc_last_error(), CPU_MIN_DEFAULT);
		return;
	}
	cpu_min = v > SIZE_MAX ? SIZE_MAX : (size_t)v;
}

static void __attribute__((constructor)) cpu_init(void)
{
	const char *be = stalloc_option_string("STALLOC_BACKEND");
	const char *path = stalloc_option_string("STALLOC_CPU_ADDR_LOG");

	if (!be || !strcmp(be, "cuda")) /* auto when unset */
		fprintf(stderr,
			"stalloc-cpu: STALLOC_BACKEND=%s ignored: CPU tensors "
			"use the host backend\n",
			be ? be : "(not accepted)");
	setenv("STALLOC_BACKEND", "host", 1);
	/* a child (a DataLoader worker) reads the tensors it inherits */
	setenv("STALLOC_HOST_FORK", "copy", 1);
	/* the runtime's one-time warnings (bad plan, ...) must be seen */
	setenv("STALLOC_LOG", "warn", 0);
	read_min();
	if (path && *path) {
		log_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
			      0644);
		if (log_fd < 0)
			fprintf(stderr,
				"stalloc-cpu: warning: STALLOC_CPU_ADDR_LOG: "
				"cannot open %s: %s\n",
				path, strerror(errno));
	}
	warn_fd = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
	if (warn_fd < 0)
		warn_fd = STDERR_FILENO;
	pthread_atfork(fork_prepare, fork_parent, fork_child);
	ready = true;
}

static void __attribute__((destructor)) cpu_fini(void)
{
	const char *path = stalloc_option_string("STALLOC_CPU_STATS");

	if (in_child)
		return;
	if (!c10_hi)
		warn_msg("stalloc-cpu: warning: libc10.so was never loaded "
			 "(not a PyTorch program?): every allocation went to "
			 "glibc\n");
	/* a wrapper (time, sh) must not overwrite its child's figures */
	if (path && *path && c10_hi)
		write_stats(path);
	pthread_mutex_lock(&log_lock);
	if (log_fd >= 0)
		log_flush_locked();
	log_direct = true;
	pthread_mutex_unlock(&log_lock);
}
