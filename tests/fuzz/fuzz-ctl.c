// SPDX-License-Identifier: MIT
/*
 * tests/fuzz/fuzz-ctl.c - libFuzzer target for the control socket's
 * request handling (mapper/ctl-answer.c: ctl_request)
 *
 * A device is made once (host backend, no socket thread) with planned
 * nothing, a few dynamic and slab blocks live and some memory cached, so
 * that stats, maps, plan and trim walk real state.  The first input byte's
 * low bit says whether the client is the owner; the rest is the request.
 * Every answer must be 0 with printable text, or one of the documented
 * errors with nothing promised; trim must never be served to a non-owner.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <stalloc/stalloc.h>

#include "mapper/ctl.h"
#include "tests/fuzz/fuzz-common.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	setenv("STALLOC_BACKEND", "host", 1);
	setenv("STALLOC_HOST_MEM", "256M", 1);
	setenv("STALLOC_VA_SIZE", "1G", 1);
	setenv("STALLOC_MODE", "off", 1);
	setenv("STALLOC_CTL", "0", 1);
	stalloc_set_log_level(STALLOC_LOG_NONE);
	if (!stalloc_malloc(3 << 20, 0, NULL) || !stalloc_malloc(700, 0, NULL))
		abort();
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ctl_buf out = { 0 };
	bool owner;
	void *p;
	size_t i;
	int err;

	if (!size)
		return 0;
	owner = data[0] & 1;
	/* something to trim next time */
	p = stalloc_malloc(4 << 20, 0, NULL);
	stalloc_free(p, 0, 0, NULL);
	err = ctl_request((const char *)data + 1, size - 1, owner, &out);
	switch (err) {
	case 0:
		if (!out.len)
			fuzz_fail("an empty answer");
		for (i = 0; i < out.len; i++)
			if ((out.p[i] < 0x20 || out.p[i] > 0x7e) &&
			    out.p[i] != '\n')
				fuzz_fail("byte 0x%02x in the answer",
					  (unsigned char)out.p[i]);
		if (!owner && size >= 5 && !memcmp(data + 1, "trim", 4))
			fuzz_fail("trim served to a non-owner");
		break;
	case -EINVAL:
	case -E2BIG:
	case -ENOENT:
	case -EPERM:
	case -ENOMEM:
		break;
	default:
		fuzz_fail("undocumented error %d", err);
	}
	free(out.p);
	return 0;
}
