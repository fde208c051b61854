// SPDX-License-Identifier: MIT
/*
 * fakecuda.c - core of the fake CUDA driver: lock, counters, faults, lookup
 *
 * This file owns the single lock that serialises every entry point, the
 * per-kind call counters, the fault injection rules, the configuration read
 * at cuInit, the error strings and cuGetProcAddress with its table of entry
 * points (each checked against its PFN_..._vNNNN typedef at compile time).
 *
 * Invariants: fc_inited is set once, by the first successful cuInit, and
 * fc_cfg does not change after that.  A fault rule is live while its
 * countdown (left) is nonzero; it fires when the countdown reaches zero and
 * the call it fires on does nothing but return the rule's error.
 *
 * Locking: fc_mutex protects everything here and in the other files;
 * fc_enter() takes it and fc_leave() drops it.  Control functions
 * (fakecuda_*) take it themselves.  Nothing here calls back into an entry
 * point, so the lock is never taken recursively.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cudaTypedefs.h>

#include "fakecuda-internal.h"
#include "fakecuda.h"

/* The legacy four-argument cuGetProcAddress is exported under its own name. */
#undef cuGetProcAddress
CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int version,
				  cuuint64_t flags);

#define FC_DRIVER_VERSION 13000
#define FC_MAX_RULES 32
#define FC_ANY (-2) /* rule call: any kind; -1 is "unknown" */

#define FC_DEF_DEVICES 1
#define FC_DEF_MEM (16ULL << 30)
#define FC_DEF_GRAN (2ULL << 20)

struct fc_call_info {
	const char *name;
	unsigned int flags;
};

#define FC_CALL_INFO(n, f) [FC_##n] = { #n, f },
static const struct fc_call_info fc_call_info[FC_NCALLS] = { FC_CALLS(
	FC_CALL_INFO) };
#undef FC_CALL_INFO

/* A pending "fail the nth call" request. */
struct fc_rule {
	int call; /* enum fc_call, or FC_ANY */
	unsigned long left; /* matching calls until it fires; 0: unused */
	CUresult err;
};

static pthread_mutex_t fc_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t fc_env_once = PTHREAD_ONCE_INIT;

struct fc_config fc_cfg;
bool fc_inited;

static enum fc_call fc_cur; /* call being served, for messages */
static unsigned long fc_ncalls[FC_NCALLS];
static unsigned long fc_ntotal;
static unsigned long fc_nviol;
static struct fc_rule fc_rules[FC_MAX_RULES];
static CUresult fc_always[FC_NCALLS];
static __thread bool fc_aside; /* this thread's calls are not counted */

/* ------------------------------------------------------------------ */
/* Sorted registries                                                   */
/* ------------------------------------------------------------------ */

/* Index of the first object whose key is greater than @key. */
size_t fc_vec_upper(const struct fc_vec *vec, uint64_t key)
{
	size_t lo = 0, hi = vec->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (vec->v[mid]->key <= key)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

struct fc_obj *fc_vec_find(const struct fc_vec *vec, uint64_t key)
{
	size_t i = fc_vec_upper(vec, key);

	if (i == 0 || vec->v[i - 1]->key != key)
		return NULL;
	return vec->v[i - 1];
}

int fc_vec_insert(struct fc_vec *vec, struct fc_obj *obj)
{
	size_t i;

	if (vec->n == vec->cap) {
		size_t cap = vec->cap ? vec->cap * 2 : 16;
		struct fc_obj **v = realloc(vec->v, cap * sizeof(*v));

		if (!v)
			return -1;
		vec->v = v;
		vec->cap = cap;
	}
	i = fc_vec_upper(vec, obj->key);
	memmove(&vec->v[i + 1], &vec->v[i], (vec->n - i) * sizeof(*vec->v));
	vec->v[i] = obj;
	vec->n++;
	return 0;
}

void fc_vec_remove(struct fc_vec *vec, size_t idx, size_t count)
{
	memmove(&vec->v[idx], &vec->v[idx + count],
		(vec->n - idx - count) * sizeof(*vec->v));
	vec->n -= count;
	if (vec->n == 0) {
		free(vec->v);
		vec->v = NULL;
		vec->cap = 0;
	}
}

void fc_vec_remove_key(struct fc_vec *vec, uint64_t key)
{
	size_t i = fc_vec_upper(vec, key);

	if (i > 0 && vec->v[i - 1]->key == key)
		fc_vec_remove(vec, i - 1, 1);
}

/* For the control interface: they take the lock themselves. */
unsigned long fc_vec_count(const struct fc_vec *vec)
{
	unsigned long n;

	fc_lock();
	n = vec->n;
	fc_unlock();
	return n;
}

unsigned long fc_read_locked(const unsigned long *v)
{
	unsigned long n;

	fc_lock();
	n = *v;
	fc_unlock();
	return n;
}

/* ------------------------------------------------------------------ */
/* Lock, gate and violations                                           */
/* ------------------------------------------------------------------ */

void fc_lock(void)
{
	pthread_mutex_lock(&fc_mutex);
}

void fc_unlock(void)
{
	pthread_mutex_unlock(&fc_mutex);
}

static bool fc_rule_matches(const struct fc_rule *r, enum fc_call call)
{
	if (r->call == FC_ANY)
		return !(fc_call_info[call].flags & FC_F_NOTOTAL);
	return r->call == (int)call;
}

/* Count down the rules matching @call; the error of one that fires. */
static CUresult fc_fault(enum fc_call call)
{
	CUresult err = CUDA_SUCCESS;
	size_t i;

	if (fc_call_info[call].flags & FC_F_NOFAULT)
		return CUDA_SUCCESS;
	for (i = 0; i < FC_MAX_RULES; i++) {
		struct fc_rule *r = &fc_rules[i];

		if (!r->left || !fc_rule_matches(r, call))
			continue;
		if (--r->left == 0 && err == CUDA_SUCCESS)
			err = r->err;
	}
	if (err == CUDA_SUCCESS)
		err = fc_always[call];
	return err;
}

CUresult fc_enter(enum fc_call call)
{
	CUresult err;

	fc_lock();
	fc_cur = call;
	if (!fc_aside) {
		fc_ncalls[call]++;
		if (!(fc_call_info[call].flags & FC_F_NOTOTAL))
			fc_ntotal++;
		err = fc_fault(call);
		if (err != CUDA_SUCCESS)
			return err;
	}
	if (!fc_inited && !(fc_call_info[call].flags & FC_F_NOINIT))
		return fc_viol(CUDA_ERROR_NOT_INITIALIZED,
			       "called before cuInit");
	return CUDA_SUCCESS;
}

CUresult fc_leave(CUresult err)
{
	fc_unlock();
	return err;
}

const char *fc_call_name(void)
{
	return fc_call_info[fc_cur].name;
}

unsigned int fc_call_flags(void)
{
	return fc_call_info[fc_cur].flags;
}

static bool fc_env_true(const char *name)
{
	const char *s = getenv(name);

	return s && *s && strcmp(s, "0");
}

CUresult fc_viol(CUresult err, const char *fmt, ...)
{
	char msg[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fc_nviol++;
	fprintf(stderr, "fakecuda: violation: %s: %s\n",
		fc_call_info[fc_cur].name, msg);
	if (fc_env_true("FAKECUDA_ABORT"))
		abort();
	return err;
}

/* ------------------------------------------------------------------ */
/* Fault injection and counters (control interface)                    */
/* ------------------------------------------------------------------ */

static int fc_call_lookup(const char *name)
{
	int i;

	if (!name)
		return -1;
	for (i = 0; i < FC_NCALLS; i++)
		if (!strcmp(fc_call_info[i].name, name))
			return i;
	return -1;
}

/* Caller holds the lock. */
static int fc_add_rule(int call, unsigned long nth, int err)
{
	size_t i;

	if (nth == 0 || err == CUDA_SUCCESS)
		return -1;
	if (call != FC_ANY && (fc_call_info[call].flags & FC_F_NOFAULT))
		return -1;
	for (i = 0; i < FC_MAX_RULES; i++) {
		if (fc_rules[i].left)
			continue;
		fc_rules[i].call = call;
		fc_rules[i].left = nth;
		fc_rules[i].err = (CUresult)err;
		return 0;
	}
	return -1;
}

/* Caller holds the lock. */
static int fc_set_always(int call, int err)
{
	if (fc_call_info[call].flags & FC_F_NOFAULT)
		return -1;
	fc_always[call] = (CUresult)err;
	return 0;
}

FC_API int fakecuda_fail_nth(const char *call, unsigned long nth, int err)
{
	int c = fc_call_lookup(call);
	int ret;

	if (c < 0)
		return -1;
	fc_lock();
	ret = fc_add_rule(c, nth, err);
	fc_unlock();
	return ret;
}

FC_API int fakecuda_fail_always(const char *call, int err)
{
	int c = fc_call_lookup(call);
	int ret;

	if (c < 0)
		return -1;
	fc_lock();
	ret = fc_set_always(c, err);
	fc_unlock();
	return ret;
}

FC_API int fakecuda_fail_nth_any(unsigned long nth, int err)
{
	int ret;

	fc_lock();
	ret = fc_add_rule(FC_ANY, nth, err);
	fc_unlock();
	return ret;
}

FC_API void fakecuda_fail_clear(void)
{
	fc_lock();
	memset(fc_rules, 0, sizeof(fc_rules));
	memset(fc_always, 0, sizeof(fc_always));
	fc_unlock();
}

FC_API unsigned long fakecuda_calls(const char *call)
{
	int c = fc_call_lookup(call);

	return c < 0 ? 0 : fc_read_locked(&fc_ncalls[c]);
}

FC_API unsigned long fakecuda_calls_total(void)
{
	return fc_read_locked(&fc_ntotal);
}

FC_API void fakecuda_calls_reset(void)
{
	fc_lock();
	memset(fc_ncalls, 0, sizeof(fc_ncalls));
	fc_ntotal = 0;
	fc_unlock();
}

FC_API void fakecuda_aside(int on)
{
	fc_aside = on;
}

FC_API unsigned long fakecuda_violations(void)
{
	return fc_read_locked(&fc_nviol);
}

/*
 * Apply one FAKECUDA_FAIL entry "CALL:N:ERR" (CALL may be "*" for any call,
 * N may be "*" for every call).  Caller holds the lock.
 */
static int fc_env_fault(char *entry)
{
	char *n = strchr(entry, ':');
	char *e = n ? strchr(n + 1, ':') : NULL;
	unsigned long nth = 0;
	char *end;
	long err;
	int call;

	if (!e)
		return -1;
	*n++ = '\0';
	*e++ = '\0';
	call = strcmp(entry, "*") ? fc_call_lookup(entry) : FC_ANY;
	errno = 0;
	err = strtol(e, &end, 10);
	if (call == -1 || *e == '\0' || *end || errno || err <= 0)
		return -1;
	if (!strcmp(n, "*"))
		return call == FC_ANY ? -1 : fc_set_always(call, (int)err);
	nth = strtoul(n, &end, 10);
	if (*n == '\0' || *end)
		return -1;
	return fc_add_rule(call, nth, (int)err);
}

static void fc_env_faults(void)
{
	const char *env = getenv("FAKECUDA_FAIL");
	char *copy, *entry, *save = NULL;
	char orig[128];

	if (!env || !*env)
		return;
	copy = strdup(env);
	if (!copy)
		return;
	fc_lock();
	for (entry = strtok_r(copy, ",", &save); entry;
	     entry = strtok_r(NULL, ",", &save)) {
		snprintf(orig, sizeof(orig), "%s", entry);
		if (fc_env_fault(entry))
			fprintf(stderr,
				"fakecuda: warning: bad FAKECUDA_FAIL entry "
				"'%s' ignored\n",
				orig);
	}
	fc_unlock();
	free(copy);
}

/* ------------------------------------------------------------------ */
/* Configuration and cuInit                                            */
/* ------------------------------------------------------------------ */

/* Parse "123", "0x10", "4K", "16G" ... into bytes; -1 if malformed. */
static int fc_parse_size(const char *s, unsigned long long *out)
{
	unsigned long long v, mult = 1;
	char *end;

	errno = 0;
	v = strtoull(s, &end, 0);
	if (end == s || errno || *s == '-')
		return -1;
	switch (*end) {
	case 'T':
	case 't':
		mult <<= 10;
		/* fall through */
	case 'G':
	case 'g':
		mult <<= 10;
		/* fall through */
	case 'M':
	case 'm':
		mult <<= 10;
		/* fall through */
	case 'K':
	case 'k':
		mult <<= 10;
		end++;
		break;
	default:
		break;
	}
	if (*end || (v && mult > ~0ULL / v))
		return -1;
	*out = v * mult;
	return 0;
}

/* Read size variable @name into *@out; leave *@out alone if unset/bad. */
static void fc_env_size(const char *name, unsigned long long *out)
{
	const char *s = getenv(name);

	if (!s)
		return;
	if (fc_parse_size(s, out))
		fprintf(stderr, "fakecuda: warning: bad %s '%s' ignored\n",
			name, s);
}

/*
 * FAKECUDA_PEER: "all" (default: every device can access every other),
 * "none", or a comma list of A:B pairs, each meaning device A can access
 * the memory of device B.
 */
static void fc_env_peers(struct fc_config *cfg)
{
	const char *s = getenv("FAKECUDA_PEER");
	int a, b, n;

	memset(cfg->peer, 0, sizeof(cfg->peer));
	if (!s || !*s || !strcmp(s, "all")) {
		memset(cfg->peer, 0xff, sizeof(cfg->peer));
		return;
	}
	if (!strcmp(s, "none"))
		return;
	while (*s) {
		if (sscanf(s, "%d:%d%n", &a, &b, &n) != 2 || a < 0 ||
		    a >= FC_MAX_DEV || b < 0 || b >= FC_MAX_DEV) {
			fprintf(stderr,
				"fakecuda: warning: bad FAKECUDA_PEER entry "
				"at \"%s\"\n",
				s);
			return;
		}
		cfg->peer[a] |= (unsigned char)(1u << b);
		s += n;
		if (*s == ',')
			s++;
	}
}

static void fc_read_config(struct fc_config *cfg)
{
	unsigned long long ndev = FC_DEF_DEVICES, mem = FC_DEF_MEM;
	unsigned long long gran = FC_DEF_GRAN;
	long page = sysconf(_SC_PAGESIZE);

	fc_env_size("FAKECUDA_DEVICES", &ndev);
	fc_env_size("FAKECUDA_MEM", &mem);
	fc_env_size("FAKECUDA_GRANULARITY", &gran);
	if (ndev > FC_MAX_DEV) {
		fprintf(stderr,
			"fakecuda: warning: FAKECUDA_DEVICES capped "
			"at %d\n",
			FC_MAX_DEV);
		ndev = FC_MAX_DEV;
	}
	if (gran < (unsigned long long)page || (gran & (gran - 1)) ||
	    gran > (1ULL << 40)) {
		fprintf(stderr,
			"fakecuda: warning: FAKECUDA_GRANULARITY %llu "
			"is not a power of two >= the page size, using %llu\n",
			gran, FC_DEF_GRAN);
		gran = FC_DEF_GRAN;
	}
	cfg->ndev = (int)ndev;
	cfg->gran = gran;
	cfg->mem = mem & ~(gran - 1);
	cfg->no_vmm = fc_env_true("FAKECUDA_NO_VMM");
	cfg->no_rdma = fc_env_true("FAKECUDA_NO_RDMA");
	cfg->no_posix_fd = fc_env_true("FAKECUDA_NO_POSIX_FD");
	fc_env_peers(cfg);
}

static CUresult fc_init(unsigned int flags)
{
	CUresult err;

	if (flags)
		return fc_viol(CUDA_ERROR_INVALID_VALUE, "flags %#x not 0",
			       flags);
	if (fc_inited)
		return CUDA_SUCCESS;
	fc_read_config(&fc_cfg);
	if (fc_cfg.ndev == 0)
		return CUDA_ERROR_NO_DEVICE;
	err = fc_mem_init();
	if (err != CUDA_SUCCESS)
		return err;
	fc_inited = true;
	return CUDA_SUCCESS;
}

FC_API CUresult cuInit(unsigned int flags)
{
	CUresult err;

	pthread_once(&fc_env_once, fc_env_faults);
	err = fc_enter(FC_cuInit);
	if (err == CUDA_SUCCESS)
		err = fc_init(flags);
	return fc_leave(err);
}

FC_API CUresult cuDriverGetVersion(int *version)
{
	CUresult err = fc_enter(FC_cuDriverGetVersion);

	if (err != CUDA_SUCCESS)
		return fc_leave(err);
	if (!version)
		return fc_leave(
			fc_viol(CUDA_ERROR_INVALID_VALUE, "version is NULL"));
	*version = FC_DRIVER_VERSION;
	return fc_leave(CUDA_SUCCESS);
}

/* ------------------------------------------------------------------ */
/* Error strings                                                       */
/* ------------------------------------------------------------------ */

struct fc_errstr {
	CUresult code;
	const char *name;
	const char *desc;
};

#define FC_ERR(code, desc)        \
	{                         \
		code, #code, desc \
	}
static const struct fc_errstr fc_errstrs[] = {
	FC_ERR(CUDA_SUCCESS, "no error"),
	FC_ERR(CUDA_ERROR_INVALID_VALUE, "invalid argument"),
	FC_ERR(CUDA_ERROR_OUT_OF_MEMORY, "out of memory"),
	FC_ERR(CUDA_ERROR_NOT_INITIALIZED, "initialization error"),
	FC_ERR(CUDA_ERROR_DEINITIALIZED, "driver shutting down"),
	FC_ERR(CUDA_ERROR_STUB_LIBRARY, "CUDA driver is a stub library"),
	FC_ERR(CUDA_ERROR_DEVICE_UNAVAILABLE,
	       "CUDA-capable device(s) is/are busy or unavailable"),
	FC_ERR(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected"),
	FC_ERR(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal"),
	FC_ERR(CUDA_ERROR_INVALID_CONTEXT, "invalid device context"),
	FC_ERR(CUDA_ERROR_CONTEXT_ALREADY_CURRENT, "context already current"),
	FC_ERR(CUDA_ERROR_MAP_FAILED, "mapping of buffer object failed"),
	FC_ERR(CUDA_ERROR_UNMAP_FAILED, "unmapping of buffer object failed"),
	FC_ERR(CUDA_ERROR_ALREADY_MAPPED, "resource already mapped"),
	FC_ERR(CUDA_ERROR_NOT_MAPPED, "resource not mapped"),
	FC_ERR(CUDA_ERROR_ECC_UNCORRECTABLE, "uncorrectable ECC error "
					     "encountered"),
	FC_ERR(CUDA_ERROR_OPERATING_SYSTEM, "OS call failed or operation "
					    "not supported on this OS"),
	FC_ERR(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle"),
	FC_ERR(CUDA_ERROR_ILLEGAL_STATE, "the operation cannot be performed "
					 "in the present state"),
	FC_ERR(CUDA_ERROR_NOT_FOUND, "named symbol not found"),
	FC_ERR(CUDA_ERROR_NOT_READY, "device not ready"),
	FC_ERR(CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was "
					   "encountered"),
	FC_ERR(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "too many resources "
						   "requested for launch"),
	FC_ERR(CUDA_ERROR_LAUNCH_TIMEOUT, "the launch timed out and was "
					  "terminated"),
	FC_ERR(CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, "primary context active"),
	FC_ERR(CUDA_ERROR_CONTEXT_IS_DESTROYED, "context is destroyed"),
	FC_ERR(CUDA_ERROR_ASSERT, "device-side assert triggered"),
	FC_ERR(CUDA_ERROR_MISALIGNED_ADDRESS, "misaligned address"),
	FC_ERR(CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure"),
	FC_ERR(CUDA_ERROR_NOT_PERMITTED, "operation not permitted"),
	FC_ERR(CUDA_ERROR_NOT_SUPPORTED, "operation not supported"),
	FC_ERR(CUDA_ERROR_SYSTEM_NOT_READY, "system not yet initialized"),
	FC_ERR(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH,
	       "system has unsupported "
	       "display driver / cuda driver combination"),
	FC_ERR(CUDA_ERROR_TIMEOUT, "wait operation timed out"),
	FC_ERR(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
	       "operation not permitted when stream is capturing"),
	FC_ERR(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
	       "operation failed due to a previous error during capture"),
	FC_ERR(CUDA_ERROR_STREAM_CAPTURE_MERGE,
	       "operation would result in a merge of separate capture "
	       "sequences"),
	FC_ERR(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED,
	       "capture was not ended in the same stream as it began"),
	FC_ERR(CUDA_ERROR_STREAM_CAPTURE_ISOLATION,
	       "dependency created on uncaptured work in another stream"),
	FC_ERR(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,
	       "operation would make the legacy stream depend on a capturing "
	       "blocking stream"),
	FC_ERR(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD,
	       "attempt to terminate a thread-local capture sequence from "
	       "another thread"),
	FC_ERR(CUDA_ERROR_UNKNOWN, "unknown error"),
};
#undef FC_ERR

static const struct fc_errstr *fc_errstr(CUresult code)
{
	size_t i;

	for (i = 0; i < FC_ARRAY_SIZE(fc_errstrs); i++)
		if (fc_errstrs[i].code == code)
			return &fc_errstrs[i];
	return NULL;
}

/* Shared body of cuGetErrorString and cuGetErrorName. */
static CUresult fc_error_text(CUresult code, const char **str, bool name)
{
	const struct fc_errstr *e = fc_errstr(code);

	if (!str)
		return fc_viol(CUDA_ERROR_INVALID_VALUE, "pStr is NULL");
	*str = NULL;
	if (!e)
		return CUDA_ERROR_INVALID_VALUE;
	*str = name ? e->name : e->desc;
	return CUDA_SUCCESS;
}

FC_API CUresult cuGetErrorString(CUresult error, const char **str)
{
	CUresult err = fc_enter(FC_cuGetErrorString);

	if (err == CUDA_SUCCESS)
		err = fc_error_text(error, str, false);
	return fc_leave(err);
}

FC_API CUresult cuGetErrorName(CUresult error, const char **str)
{
	CUresult err = fc_enter(FC_cuGetErrorName);

	if (err == CUDA_SUCCESS)
		err = fc_error_text(error, str, true);
	return fc_leave(err);
}

/* ------------------------------------------------------------------ */
/* cuGetProcAddress                                                    */
/* ------------------------------------------------------------------ */

/*
 * X(symbol, version it became current, implementation): the version picks
 * the PFN_<symbol>_v<version> typedef the implementation is checked against.
 * Entries of one symbol are listed in increasing version order.
 */
#define FC_PROCS(X)                                                            \
	X(cuInit, 2000, cuInit)                                                \
	X(cuDriverGetVersion, 2020, cuDriverGetVersion)                        \
	X(cuGetErrorString, 6000, cuGetErrorString)                            \
	X(cuGetErrorName, 6000, cuGetErrorName)                                \
	X(cuGetProcAddress, 11030, cuGetProcAddress)                           \
	X(cuGetProcAddress, 12000, cuGetProcAddress_v2)                        \
	X(cuDeviceGetCount, 2000, cuDeviceGetCount)                            \
	X(cuDeviceGet, 2000, cuDeviceGet)                                      \
	X(cuDeviceGetAttribute, 2000, cuDeviceGetAttribute)                    \
	X(cuDeviceGetName, 2000, cuDeviceGetName)                              \
	X(cuDeviceTotalMem, 3020, cuDeviceTotalMem)                            \
	X(cuDeviceCanAccessPeer, 4000, cuDeviceCanAccessPeer)                  \
	X(cuDevicePrimaryCtxRetain, 7000, cuDevicePrimaryCtxRetain)            \
	X(cuDevicePrimaryCtxRelease, 11000, cuDevicePrimaryCtxRelease)         \
	X(cuCtxGetCurrent, 4000, cuCtxGetCurrent)                              \
	X(cuCtxSetCurrent, 4000, cuCtxSetCurrent)                              \
	X(cuCtxGetDevice, 2000, cuCtxGetDevice)                                \
	X(cuCtxGetDevice, 13000, cuCtxGetDevice_v2)                            \
	X(cuCtxPushCurrent, 4000, cuCtxPushCurrent)                            \
	X(cuCtxPopCurrent, 4000, cuCtxPopCurrent)                              \
	X(cuCtxSynchronize, 2000, cuCtxSynchronize)                            \
	X(cuCtxSynchronize, 13000, cuCtxSynchronize_v2)                        \
	X(cuStreamCreate, 2000, cuStreamCreate)                                \
	X(cuStreamDestroy, 4000, cuStreamDestroy)                              \
	X(cuStreamSynchronize, 2000, cuStreamSynchronize)                      \
	X(cuStreamQuery, 2000, cuStreamQuery)                                  \
	X(cuStreamWaitEvent, 3020, cuStreamWaitEvent)                          \
	X(cuEventCreate, 2000, cuEventCreate)                                  \
	X(cuEventRecord, 2000, cuEventRecord)                                  \
	X(cuEventQuery, 2000, cuEventQuery)                                    \
	X(cuEventSynchronize, 2000, cuEventSynchronize)                        \
	X(cuEventDestroy, 4000, cuEventDestroy)                                \
	X(cuMemAddressReserve, 10020, cuMemAddressReserve)                     \
	X(cuMemAddressFree, 10020, cuMemAddressFree)                           \
	X(cuMemCreate, 10020, cuMemCreate)                                     \
	X(cuMemRelease, 10020, cuMemRelease)                                   \
	X(cuMemMap, 10020, cuMemMap)                                           \
	X(cuMemUnmap, 10020, cuMemUnmap)                                       \
	X(cuMemSetAccess, 10020, cuMemSetAccess)                               \
	X(cuMemGetAccess, 10020, cuMemGetAccess)                               \
	X(cuMemGetAllocationGranularity, 10020, cuMemGetAllocationGranularity) \
	X(cuMemsetD8, 3020, cuMemsetD8)                                        \
	X(cuMemcpyHtoD, 3020, cuMemcpyHtoD)                                    \
	X(cuMemcpyDtoH, 3020, cuMemcpyDtoH)                                    \
	X(cuMemcpyDtoD, 3020, cuMemcpyDtoD)                                    \
	X(cuMemcpy, 4000, cuMemcpy)                                            \
	X(cuStreamBeginCapture, 10010, cuStreamBeginCapture_v2)                \
	X(cuStreamEndCapture, 10000, cuStreamEndCapture)                       \
	X(cuStreamIsCapturing, 10000, cuStreamIsCapturing)                     \
	X(cuStreamGetCaptureInfo, 11030, cuStreamGetCaptureInfo_v2)            \
	X(cuStreamGetCaptureInfo, 12030, cuStreamGetCaptureInfo_v3)            \
	X(cuGraphDestroy, 10000, cuGraphDestroy)                               \
	X(cuThreadExchangeStreamCaptureMode, 10010,                            \
	  cuThreadExchangeStreamCaptureMode)

#define FC_PROC_CHECK(sym, ver, fn)                                      \
	_Static_assert(__builtin_types_compatible_p(__typeof__(&fn),     \
						    PFN_##sym##_v##ver), \
		       #fn " does not match PFN_" #sym "_v" #ver);
FC_PROCS(FC_PROC_CHECK)
#undef FC_PROC_CHECK

struct fc_proc {
	const char *name;
	int version;
	void *fn;
};

#define FC_PROC_ENTRY(sym, ver, fn) { #sym, ver, (void *)fn },
static const struct fc_proc fc_procs[] = { FC_PROCS(FC_PROC_ENTRY) };
#undef FC_PROC_ENTRY

static void fc_set_status(CUdriverProcAddressQueryResult *status,
			  CUdriverProcAddressQueryResult value)
{
	if (status)
		*status = value;
}

/* The newest entry for @symbol not newer than @version. */
static const struct fc_proc *fc_proc_find(const char *symbol, int version,
					  bool *known)
{
	const struct fc_proc *best = NULL;
	size_t i;

	*known = false;
	for (i = 0; i < FC_ARRAY_SIZE(fc_procs); i++) {
		if (strcmp(fc_procs[i].name, symbol))
			continue;
		*known = true;
		if (fc_procs[i].version <= version)
			best = &fc_procs[i];
	}
	return best;
}

static CUresult fc_proc_lookup(const char *symbol, void **pfn, int version,
			       cuuint64_t flags,
			       CUdriverProcAddressQueryResult *status)
{
	const cuuint64_t known_flags =
		CU_GET_PROC_ADDRESS_LEGACY_STREAM |
		CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
	const struct fc_proc *p;
	bool known;

	if (!symbol || !pfn)
		return fc_viol(CUDA_ERROR_INVALID_VALUE,
			       "symbol or pfn is NULL");
	if (flags & ~known_flags)
		return fc_viol(CUDA_ERROR_INVALID_VALUE, "flags %#llx unknown",
			       (unsigned long long)flags);
	*pfn = NULL;
	if (version > FC_DRIVER_VERSION) {
		fc_set_status(status,
			      CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
		return CUDA_ERROR_INVALID_VALUE;
	}
	p = fc_proc_find(symbol, version, &known);
	if (!p) {
		fc_set_status(
			status,
			known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT :
				CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
		return CUDA_ERROR_NOT_FOUND;
	}
	*pfn = p->fn;
	fc_set_status(status, CU_GET_PROC_ADDRESS_SUCCESS);
	return CUDA_SUCCESS;
}

FC_API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
				    cuuint64_t flags,
				    CUdriverProcAddressQueryResult *status)
{
	CUresult err = fc_enter(FC_cuGetProcAddress);

	if (err == CUDA_SUCCESS)
		err = fc_proc_lookup(symbol, pfn, version, flags, status);
	return fc_leave(err);
}

FC_API CUresult cuGetProcAddress(const char *symbol, void **pfn, int version,
				 cuuint64_t flags)
{
	CUresult err = fc_enter(FC_cuGetProcAddress);

	if (err == CUDA_SUCCESS)
		err = fc_proc_lookup(symbol, pfn, version, flags, NULL);
	return fc_leave(err);
}
