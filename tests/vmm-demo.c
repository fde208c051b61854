// SPDX-License-Identifier: MIT
/*
 * tests/vmm-demo.c - a walk through the vmm layer (make demo)
 *
 * On the backend STALLOC_BACKEND picks (auto: cuda when a GPU is there,
 * else host memory): reserve an address space, map a "static pool" and a
 * "dynamic region", write through them, grow the dynamic region by moving
 * its pages rather than copying them, alias a chunk, print the mapping
 * table and the counters, give the memory back.  Later subsystems replace
 * this demo with planned replays of real training traces.  Device memory
 * is written and read with the driver's copies (tests/vmm-fixture.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "lib/util.h"
#include "tests/vmm-fixture.h"

static int print_run(const struct vmm_mapping *m, void *arg)
{
	(void)arg;
	printf("    0x%012llx  %6llu MiB  chunks %llu..%llu%s\n",
	       (unsigned long long)m->va, (unsigned long long)(m->bytes >> 20),
	       (unsigned long long)m->first_chunk_id,
	       (unsigned long long)(m->first_chunk_id + m->nr_chunks - 1),
	       m->contiguous_ids ? "" : " (not in creation order)");
	return 0;
}

static void show(struct vmm_space *s, const char *what)
{
	struct vmm_stats st;
	uint64_t calls = 0;
	int k;

	vmm_get_stats(s, &st);
	for (k = 0; k < VMM_CALL_NR; k++)
		calls += st.calls[k];
	printf("\n%s\n  mapping table:\n", what);
	vmm_for_each_mapping(s, print_run, NULL);
	printf("  mapped %llu MiB (peak %llu), physical %llu MiB in %llu "
	       "chunks (%llu pooled), driver calls %llu\n",
	       (unsigned long long)(st.bytes_mapped >> 20),
	       (unsigned long long)(st.bytes_mapped_peak >> 20),
	       (unsigned long long)(st.phys_bytes >> 20),
	       (unsigned long long)st.chunks_live,
	       (unsigned long long)st.chunks_pooled, (unsigned long long)calls);
}

static int check(int err)
{
	if (err) {
		fprintf(stderr, "demo: %s\n", stalloc_last_error());
		exit(1);
	}
	return err;
}

int main(void)
{
	struct vmm_config cfg = { .backend = NULL, .va_bytes = 4ULL << 30 };
	struct vmm_space *s;
	uint64_t base, pool, dyn, c;

	check(vmm_space_create(&cfg, &s));
	base = vmm_base(s);
	c = vmm_chunk_bytes(s);
	printf("stalloc %s vmm demo: backend %s, device %d\n",
	       stalloc_version_string(), vmm_backend_name(s), vmm_device(s));
	printf("  reserved %llu GiB of address space at 0x%llx, chunk %llu "
	       "KiB, physical limit %llu MiB\n",
	       (unsigned long long)(vmm_size(s) >> 30),
	       (unsigned long long)base, (unsigned long long)(c >> 10),
	       (unsigned long long)(vmm_phys_limit(s) >> 20));

	pool = base;
	dyn = base + (1ULL << 30);
	check(vmm_map(s, pool, 64 * c));
	check(vmm_map(s, dyn, 8 * c));
	if (!fx_fill(vmm_backend_name(s), dyn, 8 * c, 2026))
		check(-EIO);
	show(s, "1. static pool (64 chunks) and dynamic region (8 chunks):");

	/* Grow the dynamic region: move its pages up, map more after them. */
	check(vmm_remap(s, dyn, dyn + (512ULL << 20), 8 * c, 0));
	check(vmm_map(s, dyn + (512ULL << 20) + 8 * c, 8 * c));
	printf("\n2. dynamic region moved by remapping, contents %s\n",
	       fx_check(vmm_backend_name(s), dyn + (512ULL << 20), 8 * c,
			2026) ?
		       "intact" :
		       "CORRUPTED");
	show(s, "   after growing it by 8 chunks:");

	check(vmm_alias(s, pool, base + (3ULL << 30), c));
	show(s, "3. one chunk of the pool aliased at a second address:");

	check(vmm_unmap(s, base + (3ULL << 30), c, 0));
	check(vmm_unmap(s, pool, 64 * c, 0));
	show(s, "4. pool unmapped; its chunks wait in the chunk pool:");
	check(vmm_trim(s, 0));
	show(s, "5. pool trimmed: physical memory went back to the driver:");
	vmm_space_destroy(s);
	printf("\ndone.\n");
	return 0;
}
