/* SPDX-License-Identifier: MIT */
/*
 * stalloc.h - public interface of libstalloc
 *
 * stalloc is a GPU memory manager for deep-learning training: it records the
 * allocation requests of a few iterations, plans offline where every tensor
 * lives, and at run time hands out planned addresses from CUDA virtual
 * memory.  This header is the whole public C API; it is valid C99 and C++.
 *
 * Error conventions
 * -----------------
 * Functions that act return 0 on success and a negative errno value on
 * failure (-EINVAL for bad arguments, -ENOMEM when memory or the physical
 * limit runs out, -ENODEV when no usable driver or device is there, -EIO for
 * a driver failure that fits no other code).  Predicates return bool.  A
 * device address is never returned in-band: it comes back through an output
 * parameter, so 0 stays a legal address.  After a failure, the calling
 * thread's stalloc_last_error() names what failed and where.
 */
#ifndef STALLOC_STALLOC_H
#define STALLOC_STALLOC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define STALLOC_VERSION_MAJOR 0
#define STALLOC_VERSION_MINOR 1
#define STALLOC_VERSION_PATCH 0

/**
 * STALLOC_VERSION_NUM() - pack a version into one comparable integer
 * @major: major version
 * @minor: minor version
 * @patch: patch level
 */
#define STALLOC_VERSION_NUM(major, minor, patch) \
	(((major)*10000) + ((minor)*100) + (patch))

/* The version of the headers being compiled against. */
#define STALLOC_VERSION                                                   \
	STALLOC_VERSION_NUM(STALLOC_VERSION_MAJOR, STALLOC_VERSION_MINOR, \
			    STALLOC_VERSION_PATCH)

#if defined(__GNUC__)
#define STALLOC_API __attribute__((visibility("default")))
#else
#define STALLOC_API
#endif

/**
 * stalloc_version() - version of the library actually loaded
 *
 * Return: STALLOC_VERSION of the library at run time, which may differ from
 * the headers an application was built with.
 */
STALLOC_API int stalloc_version(void);

/**
 * stalloc_version_string() - the loaded library's version as "MAJOR.MINOR.PATCH"
 *
 * Return: a static string.
 */
STALLOC_API const char *stalloc_version_string(void);

/**
 * stalloc_last_error() - what the calling thread's last failure was
 *
 * Every function that fails records a one-line message naming the operation,
 * the object (device, address, file and line) and the cause, e.g.
 * "cuda: cuMemMap(0x7f0000000000, 2097152) on device 0: CUDA_ERROR_OUT_OF_MEMORY
 * (out of memory)".
 *
 * Return: the message, or "" when nothing failed on this thread yet.  The
 * string stays valid until the thread's next stalloc call.
 */
STALLOC_API const char *stalloc_last_error(void);

/**
 * stalloc_strerror() - describe a negative errno value returned by stalloc
 * @err: a value returned by a stalloc function
 *
 * Return: a static description; never NULL.
 */
STALLOC_API const char *stalloc_strerror(int err);

/**
 * enum stalloc_log_level - how much libstalloc prints to stderr
 * @STALLOC_LOG_NONE: nothing
 * @STALLOC_LOG_ERROR: failures the caller may not see otherwise (default)
 * @STALLOC_LOG_WARN: also fallbacks and degraded modes
 * @STALLOC_LOG_INFO: also set-up and tear-down of devices
 * @STALLOC_LOG_DEBUG: also every driver call that fails, and more
 *
 * The initial level comes from the environment variable STALLOC_LOG
 * (none, error, warn, info, debug).
 */
enum stalloc_log_level {
	STALLOC_LOG_NONE = 0,
	STALLOC_LOG_ERROR,
	STALLOC_LOG_WARN,
	STALLOC_LOG_INFO,
	STALLOC_LOG_DEBUG,
};

/**
 * stalloc_set_log_level() - change what libstalloc prints
 * @level: the new level
 *
 * Return: the previous level.
 */
STALLOC_API enum stalloc_log_level
stalloc_set_log_level(enum stalloc_log_level level);

#ifdef __cplusplus
}
#endif
#endif /* STALLOC_STALLOC_H */
