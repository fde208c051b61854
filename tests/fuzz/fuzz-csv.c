// SPDX-License-Identifier: MIT
/*
 * tests/fuzz/fuzz-csv.c - libFuzzer target for the MiniMalloc CSV parser
 *
 * Feeds each input, as is (not NUL-terminated), to csv_parse() and checks
 * the invariants csv.c promises: on error the problem is left zeroed; on
 * success nr > 0, every size > 0, every lower < upper <= horizon, the
 * horizon is reached, and every id is a nonempty string.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "planner/csv.h"
#include "tests/fuzz/fuzz-common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_problem(const struct csv_problem *p)
{
	uint64_t top = 0;
	size_t i;

	if (!p->nr || !p->bufs || !p->ids)
		fuzz_fail("accepted problem is empty");
	for (i = 0; i < p->nr; i++) {
		const struct pack_buf *b = &p->bufs[i];

		if (!b->size)
			fuzz_fail("row %zu: size 0", i);
		if (b->start >= b->end || b->end > p->horizon)
			fuzz_fail(
				"row %zu: lifetime [%llu, %llu), horizon %llu",
				i, (unsigned long long)b->start,
				(unsigned long long)b->end,
				(unsigned long long)p->horizon);
		if (!p->ids[i] || !p->ids[i][0])
			fuzz_fail("row %zu: empty id", i);
		if (b->end > top)
			top = b->end;
	}
	if (top != p->horizon)
		fuzz_fail("horizon %llu, max upper %llu",
			  (unsigned long long)p->horizon,
			  (unsigned long long)top);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const struct csv_problem zero;
	struct csv_problem p;
	int err;

	memset(&p, 0x5a, sizeof(p));
	err = csv_parse("fuzz.csv", (const char *)data, size, &p);
	if (err) {
		if (err != -EINVAL && err != -ENOMEM)
			fuzz_fail("csv_parse returned %d", err);
		if (memcmp(&p, &zero, sizeof(p)) != 0)
			fuzz_fail("csv_parse failed but left @out set");
		return 0;
	}
	check_problem(&p);
	csv_free(&p);
	return 0;
}
