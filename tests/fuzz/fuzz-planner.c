// SPDX-License-Identifier: MIT
/*
 * tests/fuzz/fuzz-planner.c - libFuzzer target for the whole planner
 *
 * Each input is a trace or a CSV problem (the planner tells them by the
 * first line).  It is planned with a 50 ms search budget; a plan made
 * must write, and a written plan must read back with the same
 * fingerprint, pool and request counts.  Keep inputs small (-max_len):
 * the cost per input grows with the number of requests.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <stalloc/planner.h>

#include "tests/fuzz/fuzz-common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct fuzz_file in = { .fd = -1 };
static const char *out_path; /* where plans are written back */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const struct stalloc_plan_options opts = { .budget_ms = 50 };
	struct stalloc_plan_summary s1, s2;
	struct stalloc_plan *p = NULL, *q;
	int err;

	fuzz_file_set(&in, "fuzz-planner", data, size);
	err = stalloc_plan_file(in.path, &opts, &p);
	if (err) {
		if (err != -EINVAL && err != -ENOMEM)
			fuzz_fail("stalloc_plan_file returned %d", err);
		stalloc_plan_free(p);
		return 0;
	}
	out_path = fuzz_scratch("planner");
	stalloc_plan_summary(p, &s1);
	if (s1.peak < s1.lower_bound)
		fuzz_fail("peak %llu below the lower bound %llu",
			  (unsigned long long)s1.peak,
			  (unsigned long long)s1.lower_bound);
	err = stalloc_plan_write(p, out_path);
	if (err)
		fuzz_fail("a plan made does not write: %d", err);
	err = stalloc_plan_read(out_path, &q);
	if (err)
		fuzz_fail("a written plan does not read back: %d", err);
	unlink(out_path);
	stalloc_plan_summary(q, &s2);
	if (s1.fingerprint != s2.fingerprint || s1.peak != s2.peak)
		fuzz_fail("the plan changed on write and read back");
	stalloc_plan_free(q);
	stalloc_plan_free(p);
	return 0;
}
