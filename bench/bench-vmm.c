// SPDX-License-Identifier: MIT
/*
 * bench/bench-vmm.c - cost of the vmm layer on one backend
 *
 * Prints, for the backend named on the command line ("host" or "cuda"):
 *   - map and unmap cost per chunk through vmm_map()/vmm_unmap(), and the
 *     same driver work done directly on the backend ops in the same process
 *     (the baseline): the ratio is what the vmm layer adds;
 *   - remap cost per chunk (moving pages, no copy) against a copy of the
 *     same bytes (memcpy; on cuda the driver's device-to-device copy);
 *   - RCU lookup cost against a plain array read;
 *   - driver calls per GiB mapped for several chunk sizes;
 *   - driver calls per GiB mapped with segments (the default) against one
 *     granule-sized handle per chunk (the old layout), in the same run,
 *     for requests of several sizes.
 * No timing is asserted anywhere; these are numbers for people.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lib/util.h"
#include "tests/vmm-fixture.h"
#include "vmm/vmm-internal.h"

#define NR_CHUNKS 64
#define ROUNDS 20

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static struct vmm_space *make_space(const char *backend, uint64_t chunk,
				    uint64_t nr_chunks)
{
	struct vmm_config cfg = {
		.backend = backend,
		.va_bytes = 4 * nr_chunks * chunk,
		.chunk_bytes = chunk,
		.phys_limit = 2 * nr_chunks * chunk,
		.host_device_bytes = 2 * nr_chunks * chunk,
	};
	struct vmm_space *s;

	if (vmm_space_create(&cfg, &s)) {
		fprintf(stderr, "bench: %s\n", stalloc_last_error());
		exit(1);
	}
	return s;
}

/* The same driver work as vmm_map + vmm_unmap, straight on the backend. */
static double raw_map_unmap(struct vmm_space *s, uint64_t *handles)
{
	struct vmm_backend *be = &s->be;
	double t0, t = 0;
	int r, i;

	for (i = 0; i < NR_CHUNKS; i++)
		if (be->ops->create_chunk(be, s->chunk, &handles[i]))
			exit(1);
	for (r = 0; r < ROUNDS; r++) {
		t0 = now_ns();
		for (i = 0; i < NR_CHUNKS; i++)
			be->ops->map(be, s->base + i * s->chunk, s->chunk,
				     handles[i]);
		be->ops->set_access(be, s->base, NR_CHUNKS * s->chunk);
		be->ops->synchronize(be, NULL);
		for (i = 0; i < NR_CHUNKS; i++)
			be->ops->unmap(be, s->base + i * s->chunk, s->chunk);
		t += now_ns() - t0;
	}
	for (i = 0; i < NR_CHUNKS; i++)
		be->ops->destroy_chunk(be, handles[i]);
	return t / ROUNDS / NR_CHUNKS;
}

static double vmm_map_unmap(struct vmm_space *s)
{
	double t0, t = 0;
	int r;

	/* first round creates the chunks; time the pooled steady state */
	vmm_map(s, s->base, NR_CHUNKS * s->chunk);
	vmm_unmap(s, s->base, NR_CHUNKS * s->chunk, 0);
	for (r = 0; r < ROUNDS; r++) {
		t0 = now_ns();
		if (vmm_map(s, s->base, NR_CHUNKS * s->chunk) ||
		    vmm_unmap(s, s->base, NR_CHUNKS * s->chunk, 0)) {
			fprintf(stderr, "bench: %s\n", stalloc_last_error());
			exit(1);
		}
		t += now_ns() - t0;
	}
	return t / ROUNDS / NR_CHUNKS;
}

/*
 * Remapping @bytes back and forth against copying them back and forth
 * (memcpy on the host backend, the driver's device-to-device copy on the
 * cuda backend: device memory is not reachable from the host).
 */
static void bench_remap(struct vmm_space *s)
{
	uint64_t bytes = NR_CHUNKS * s->chunk, a = s->base, b = a + bytes;
	const char *be = vmm_backend_name(s);
	double t0, remap, copy;
	int r;

	vmm_map(s, a, bytes);
	if (fx_memset(be, a, 1, bytes))
		exit(1);
	t0 = now_ns();
	for (r = 0; r < ROUNDS; r++) {
		vmm_remap(s, a, b, bytes, 0);
		vmm_remap(s, b, a, bytes, 0);
	}
	remap = (now_ns() - t0) / (2.0 * ROUNDS);
	if (vmm_map(s, b, bytes)) {
		fprintf(stderr, "bench: %s\n", stalloc_last_error());
		exit(1);
	}
	t0 = now_ns();
	for (r = 0; r < ROUNDS; r++) {
		if (fx_copy(be, b, a, bytes) || fx_copy(be, a, b, bytes))
			exit(1);
	}
	copy = (now_ns() - t0) / (2.0 * ROUNDS);
	vmm_unmap(s, b, bytes, 0);
	printf("  remap %llu MiB: %.0f us (%.2f us/chunk); a copy of the same "
	       "bytes: %.0f us; remap/copy = %.3f\n",
	       (unsigned long long)(bytes >> 20), remap / 1e3,
	       remap / 1e3 / NR_CHUNKS, copy / 1e3, remap / copy);
	vmm_unmap(s, a, bytes, 0);
}

static void bench_lookup(struct vmm_space *s)
{
	uint64_t i, n = 4000000, hits = 0, sum = 0;
	struct vmm_translation t;
	uint64_t *plain = calloc(NR_CHUNKS, sizeof(*plain));
	double t0, rcu, flat;

	vmm_map(s, s->base, NR_CHUNKS * s->chunk);
	t0 = now_ns();
	for (i = 0; i < n; i++)
		hits += vmm_lookup(s, s->base + (i % NR_CHUNKS) * s->chunk, &t);
	rcu = (now_ns() - t0) / n;
	t0 = now_ns();
	for (i = 0; i < n; i++)
		sum += __atomic_load_n(&plain[i % NR_CHUNKS], __ATOMIC_ACQUIRE);
	flat = (now_ns() - t0) / n;
	printf("  lookup (RCU reader): %.1f ns; plain array read: %.1f ns; "
	       "ratio %.1f (%llu hits)\n",
	       rcu, flat, rcu / (flat > 0.05 ? flat : 0.05),
	       (unsigned long long)(hits + sum));
	vmm_unmap(s, s->base, NR_CHUNKS * s->chunk, 0);
	free(plain);
}

static void bench_calls_per_gib(const char *backend, uint64_t gran)
{
	static const unsigned int mult[] = { 1, 4, 16 };
	size_t k;

	for (k = 0; k < ARRAY_SIZE(mult); k++) {
		uint64_t chunk = gran * mult[k], n = (1ULL << 30) / chunk;
		struct vmm_space *s = make_space(backend, chunk, n);
		struct vmm_stats st;
		uint64_t calls = 0;
		int c;

		if (vmm_map(s, s->base, 1ULL << 30)) {
			fprintf(stderr, "bench: %s\n", stalloc_last_error());
			exit(1);
		}
		vmm_unmap(s, s->base, 1ULL << 30, 0);
		vmm_get_stats(s, &st);
		for (c = 0; c < VMM_CALL_NR; c++)
			calls += st.calls[c];
		printf("  driver calls per GiB mapped+unmapped, chunk %4llu "
		       "MiB: %llu (map %llu, set_access %llu, create %llu, "
		       "unmap %llu)\n",
		       (unsigned long long)(chunk >> 20),
		       (unsigned long long)(calls - st.calls[VMM_CALL_RESERVE]),
		       (unsigned long long)st.calls[VMM_CALL_MAP],
		       (unsigned long long)st.calls[VMM_CALL_SET_ACCESS],
		       (unsigned long long)st.calls[VMM_CALL_CREATE],
		       (unsigned long long)st.calls[VMM_CALL_UNMAP]);
		vmm_space_destroy(s);
	}
}

/* Map ~1 GiB in requests of @req bytes, unmap them, trim: calls per GiB. */
static double seg_calls(const char *backend, uint64_t gran, uint64_t seg,
			uint64_t req)
{
	uint64_t n = (1ULL << 30) / req, calls, i;
	struct vmm_config cfg = {
		.backend = backend,
		.va_bytes = 2ULL << 30,
		.chunk_bytes = gran,
		.phys_limit = 2ULL << 30,
		.host_device_bytes = 2ULL << 30,
		.segment_bytes = seg,
	};
	struct vmm_space *s;
	struct vmm_stats st;

	if (vmm_space_create(&cfg, &s)) {
		fprintf(stderr, "bench: %s\n", stalloc_last_error());
		exit(1);
	}
	for (i = 0; i < n; i++)
		if (vmm_map(s, s->base + i * req, req)) {
			fprintf(stderr, "bench: %s\n", stalloc_last_error());
			exit(1);
		}
	for (i = 0; i < n; i++)
		vmm_unmap(s, s->base + i * req, req, VMM_SYNCED);
	vmm_trim(s, 0);
	vmm_get_stats(s, &st);
	vmm_space_destroy(s);
	calls = st.calls[VMM_CALL_CREATE] + st.calls[VMM_CALL_MAP] +
		st.calls[VMM_CALL_SET_ACCESS] + st.calls[VMM_CALL_UNMAP] +
		st.calls[VMM_CALL_DESTROY];
	return (double)calls * (1ULL << 30) / (double)(n * req);
}

static void bench_segments(const char *backend, uint64_t gran)
{
	static const uint64_t reqs[] = { 2, 8, 20, 64, 256, 1024 }; /* MiB */
	size_t k;

	printf("  driver calls per GiB mapped+unmapped+released "
	       "(create, map, set_access, unmap, destroy), granule %llu KiB:\n",
	       (unsigned long long)(gran >> 10));
	for (k = 0; k < ARRAY_SIZE(reqs); k++) {
		uint64_t req = reqs[k] << 20;
		double one, seg;

		if (req % gran)
			continue;
		one = seg_calls(backend, gran, gran, req);
		seg = seg_calls(backend, gran, 0, req);
		printf("    requests of %4llu MiB: %6.0f with one handle per "
		       "granule, %5.0f with segments: %5.1fx fewer\n",
		       (unsigned long long)reqs[k], one, seg, one / seg);
	}
}

int main(int argc, char **argv)
{
	const char *backend = argc > 1 ? argv[1] : "host";
	uint64_t handles[NR_CHUNKS];
	struct vmm_space *s = make_space(backend, 0, 0);
	uint64_t gran = vmm_granularity(s);
	double raw, vmm;

	vmm_space_destroy(s);
	s = make_space(backend, gran, NR_CHUNKS);
	printf("vmm on the %s backend (granularity %llu KiB, %d chunks, "
	       "%d rounds)\n",
	       vmm_backend_name(s), (unsigned long long)(gran >> 10), NR_CHUNKS,
	       ROUNDS);
	raw = raw_map_unmap(s, handles);
	vmm = vmm_map_unmap(s);
	printf("  map+unmap per chunk: vmm %.2f us, raw backend %.2f us, "
	       "vmm/raw = %.2f\n",
	       vmm / 1e3, raw / 1e3, vmm / raw);
	bench_remap(s);
	bench_lookup(s);
	vmm_space_destroy(s);
	bench_calls_per_gib(backend, gran);
	bench_segments(backend, gran);
	return 0;
}
