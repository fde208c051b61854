// SPDX-License-Identifier: MIT
/*
 * tracing/tp.c - load the lttng-ust provider on demand
 *
 * With STALLOC_LTTNG=1, the first device to start loads the provider
 * library (STALLOC_LTTNG_LIB, else libstalloc-lttng.so next to this
 * library, else the dynamic linker's search) and publishes its table in
 * sa_tp.  Any failure is reported once and tracing stays off: a tracing
 * problem never affects the job.  pthread_once makes loading race free;
 * readers load sa_tp with a relaxed atomic (the table is immutable).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../lib/options.h"
#include "tp.h"

const struct sa_tp_ops *sa_tp;
static pthread_once_t sa_tp_once = PTHREAD_ONCE_INIT;

/* Directory of the library that holds this code, with a trailing '/'. */
static void own_dir(char *buf, size_t len)
{
	Dl_info info;
	const char *slash;

	buf[0] = 0;
	if (!dladdr((void *)own_dir, &info) || !info.dli_fname)
		return;
	slash = strrchr(info.dli_fname, '/');
	if (slash && (size_t)(slash - info.dli_fname + 1) < len)
		snprintf(buf, len, "%.*s/", (int)(slash - info.dli_fname),
			 info.dli_fname);
}

static void sa_tp_load(void)
{
	const char *lib;
	bool on;
	const struct sa_tp_ops *ops;
	char path[4096], dir[3072];
	void *h;

	if (sa_opt_bool(SA_OPT_LTTNG, &on)) {
		sa_log(STALLOC_LOG_ERROR, "%s: going on untraced",
		       stalloc_last_error());
		return;
	}
	if (!on)
		return;
	lib = sa_opt_raw(SA_OPT_LTTNG_LIB);
	if (!lib) {
		own_dir(dir, sizeof(dir));
		snprintf(path, sizeof(path), "%slibstalloc-lttng.so", dir);
		lib = path;
	}
	h = dlopen(lib, RTLD_NOW | RTLD_GLOBAL);
	if (!h)
		h = dlopen("libstalloc-lttng.so", RTLD_NOW | RTLD_GLOBAL);
	if (!h) {
		sa_log(STALLOC_LOG_ERROR,
		       "tracing: STALLOC_LTTNG=1 but the provider cannot be "
		       "loaded (%s): going on untraced",
		       dlerror());
		return;
	}
	ops = dlsym(h, "stalloc_lttng_ops");
	if (!ops || ops->version != SA_TP_VERSION) {
		sa_log(STALLOC_LOG_ERROR,
		       "tracing: %s is not a stalloc provider of version %d: "
		       "going on untraced",
		       lib, SA_TP_VERSION);
		return;
	}
	__atomic_store_n(&sa_tp, ops, __ATOMIC_RELEASE);
	sa_log(STALLOC_LOG_INFO, "tracing: lttng-ust provider loaded");
}

void sa_tp_init(void)
{
	pthread_once(&sa_tp_once, sa_tp_load);
}
