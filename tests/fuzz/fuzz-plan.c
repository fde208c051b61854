// SPDX-License-Identifier: MIT
/*
 * tests/fuzz/fuzz-plan.c - libFuzzer target for the plan file reader
 *
 * stalloc_plan_read() first checks a CRC-32 of everything before the last
 * line, so almost every mutated input would stop there.  Each input is
 * therefore read twice: once unmodified (the checksum and truncation
 * checks), and once with its checksum fixed up: the last line is dropped
 * if it is a "checksum" line, a newline is added if missing, and
 * "checksum 0x%08lx\n" over the rest is appended, so the parser and the
 * validator see the input.  A plan that reads must write, and what it
 * writes must read back with the same summary.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include <stalloc/planner.h>

#include "tests/fuzz/fuzz-common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct fuzz_file in = { .fd = -1 };
static const char *out_path; /* where plans are written back */

static int at_plan_buffer(const struct stalloc_plan_buffer *b, void *arg)
{
	uint64_t *pool = arg;

	if (!b->size || b->lower >= b->upper || b->offset > *pool ||
	    b->size > *pool - b->offset)
		fuzz_fail("buffer [%llu, %llu) size %llu at %llu, pool %llu",
			  (unsigned long long)b->lower,
			  (unsigned long long)b->upper,
			  (unsigned long long)b->size,
			  (unsigned long long)b->offset,
			  (unsigned long long)*pool);
	return 0;
}

/* Read the plan now in @in; check what a valid plan promises. */
static void read_one(void)
{
	struct stalloc_plan_summary s1, s2;
	struct stalloc_plan *p, *q;
	int err;

	err = stalloc_plan_read(in.path, &p);
	if (err) {
		if (err != -EINVAL && err != -ENOMEM)
			fuzz_fail("stalloc_plan_read returned %d", err);
		if (p)
			fuzz_fail("stalloc_plan_read failed but set *out");
		return;
	}
	out_path = fuzz_scratch("plan");
	stalloc_plan_summary(p, &s1);
	stalloc_plan_for_each_buffer(p, at_plan_buffer, &s1.peak);
	err = stalloc_plan_write(p, out_path);
	if (err)
		fuzz_fail("a plan that was read does not write: %d", err);
	err = stalloc_plan_read(out_path, &q);
	if (err)
		fuzz_fail("a written plan does not read back: %d", err);
	unlink(out_path);
	stalloc_plan_summary(q, &s2);
	if (s1.fingerprint != s2.fingerprint || s1.peak != s2.peak ||
	    s1.requests != s2.requests ||
	    s1.static_requests != s2.static_requests ||
	    s1.dynamic_requests != s2.dynamic_requests)
		fuzz_fail("the plan changed on write and read back");
	stalloc_plan_free(q);
	stalloc_plan_free(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *s = (const char *)data, *last;
	size_t body = size, n;
	char *buf;
	uLong crc;

	/* Unmodified: the checksum and truncation checks. */
	fuzz_file_set(&in, "fuzz-plan", data, size);
	read_one();

	/* Checksum fixed up: the parser and the validator. */
	if (body && s[body - 1] == '\n') {
		last = memrchr(s, '\n', body - 1);
		last = last ? last + 1 : s;
		if (s + body - last > 8 && !memcmp(last, "checksum", 8))
			body = (size_t)(last - s);
	}
	buf = malloc(body + 32);
	if (!buf)
		return 0;
	memcpy(buf, s, body);
	if (body && buf[body - 1] != '\n')
		buf[body++] = '\n';
	crc = crc32(0L, (const Bytef *)buf, (uInt)body);
	n = body + (size_t)sprintf(buf + body, "checksum 0x%08lx\n",
				   (unsigned long)crc);
	fuzz_file_set(&in, "fuzz-plan", buf, n);
	free(buf);
	read_one();
	return 0;
}
