// SPDX-License-Identifier: MIT
/*
 * tests/test-vmm-faults.c - the cuda backend under failing drivers
 *
 * Runs on the fake driver only.  The sweep makes the Nth call of each
 * driver entry point fail, for every N the scenario reaches, and checks
 * after every step that the vmm table agrees with the driver (mappings,
 * handles), that mapped memory still holds what was written, and that after
 * tear-down nothing is left: no reservation, handle, mapping or retained
 * context.  The probe tests run this program again in a child with a
 * missing, broken or refusing driver and check the error it reports.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "lib/util.h"
#include "tests/vmm-fixture.h"

#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CUDA_ERROR_UNKNOWN 999

static const struct fx_fake *fk;
static unsigned long nr_injected;

struct scen {
	struct vmm_space *s;
	uint64_t base, chunk;
};

static void check_consistent(struct scen *sc)
{
	struct vmm_stats st;

	vmm_get_stats(sc->s, &st);
	assert_int_equal(fk->violations(), 0);
	assert_int_equal(fk->live_mappings(), st.mappings);
	assert_int_equal(fk->live_handles(), st.segs_live);
	assert_int_equal(st.phys_bytes, st.chunks_live * sc->chunk);
	assert_true(st.chunks_pooled <= st.chunks_live);
}

/* Every mapped slot among @first..@first+n holds @seed's pattern. */
static void check_data(struct scen *sc, unsigned int first, unsigned int n,
		       uint64_t seed)
{
	unsigned int i;

	for (i = first; i < first + n; i++) {
		uint64_t va = sc->base + i * sc->chunk;

		if (vmm_is_mapped(sc->s, va, sc->chunk))
			assert_true(fx_check("cuda", va, sc->chunk,
					     seed + i - first));
	}
}

static void fill(struct scen *sc, unsigned int first, unsigned int n,
		 uint64_t seed)
{
	unsigned int i;

	for (i = first; i < first + n; i++)
		assert_true(fx_fill("cuda", sc->base + i * sc->chunk, sc->chunk,
				    seed + i - first));
}

#define VA(sc, slot) ((sc)->base + (uint64_t)(slot) * (sc)->chunk)
#define BYTES(sc, n) ((uint64_t)(n) * (sc)->chunk)

/* Each step may fail; the state must stay consistent whatever happens. */
static int step(struct scen *sc, int err)
{
	if (err)
		assert_true(strlen(stalloc_last_error()) > 0);
	check_consistent(sc);
	return err;
}

/* Returns the number of steps that failed. */
static int scenario(void)
{
	struct scen sc;
	int failed = 0;

	if (fx_space("cuda", 2 << 20, &sc.s)) {
		assert_true(strlen(stalloc_last_error()) > 0);
		return 1;
	}
	sc.base = vmm_base(sc.s);
	sc.chunk = vmm_chunk_bytes(sc.s);
	if (!step(&sc, vmm_map(sc.s, VA(&sc, 0), BYTES(&sc, 4))))
		fill(&sc, 0, 4, 100);
	else
		failed++;
	failed += !!step(&sc, vmm_remap(sc.s, VA(&sc, 0), VA(&sc, 10),
					BYTES(&sc, 4), 0));
	check_data(&sc, 0, 4, 100);
	check_data(&sc, 10, 4, 100);
	failed += !!step(&sc, vmm_alias(sc.s, VA(&sc, 10), VA(&sc, 20),
					BYTES(&sc, 4)));
	check_data(&sc, 20, 4, 100);
	failed += !!step(&sc, vmm_unmap(sc.s, VA(&sc, 20), BYTES(&sc, 4), 0));
	if (!step(&sc, vmm_map(sc.s, VA(&sc, 30), BYTES(&sc, 3))))
		fill(&sc, 30, 3, 200);
	else
		failed++;
	failed += !!step(&sc, vmm_unmap(sc.s, VA(&sc, 10), BYTES(&sc, 4),
					VMM_SYNCED));
	failed += !!step(&sc, vmm_trim(sc.s, sc.chunk));
	failed += !!step(&sc, vmm_map(sc.s, VA(&sc, 40), BYTES(&sc, 6)));
	check_data(&sc, 30, 3, 200);
	vmm_space_destroy(sc.s);
	return failed;
}

static const char *cur_kind = "none";
static unsigned long cur_n;

static void assert_nothing_left(void)
{
	if (fk->live_mappings() || fk->live_handles() ||
	    fk->live_reservations() || fk->live_primary_retains() ||
	    fk->violations())
		fprintf(stderr,
			"after failing call %lu of %s: mappings %lu handles "
			"%lu reservations %lu contexts %lu violations %lu\n",
			cur_n, cur_kind, fk->live_mappings(),
			fk->live_handles(), fk->live_reservations(),
			fk->live_primary_retains(), fk->violations());
	assert_int_equal(fk->live_mappings(), 0);
	assert_int_equal(fk->live_handles(), 0);
	assert_int_equal(fk->live_reservations(), 0);
	assert_int_equal(fk->live_primary_retains(), 0);
	assert_int_equal(fk->violations(), 0);
}

static void test_clean_run(void **state)
{
	(void)state;
	fk->fail_clear();
	assert_int_equal(scenario(), 0);
	assert_nothing_left();
}

static const char *const kinds[] = {
	"cuDeviceGetCount",
	"cuDeviceGet",
	"cuDeviceGetAttribute",
	"cuDeviceTotalMem",
	"cuMemGetAllocationGranularity",
	"cuDevicePrimaryCtxRetain",
	"cuDevicePrimaryCtxRelease",
	"cuCtxGetCurrent",
	"cuCtxPushCurrent",
	"cuCtxPopCurrent",
	"cuCtxSynchronize",
	"cuMemAddressReserve",
	"cuMemAddressFree",
	"cuMemCreate",
	"cuMemRelease",
	"cuMemMap",
	"cuMemUnmap",
	"cuMemSetAccess",
};

static void sweep_kind(const char *kind)
{
	unsigned long n, before;

	for (n = 1;; n++) {
		int err = n % 2 ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_UNKNOWN;

		fk->fail_clear();
		cur_kind = kind;
		cur_n = n;
		before = fk->calls(kind);
		assert_int_equal(fk->fail_nth(kind, n, err), 0);
		scenario();
		assert_nothing_left();
		if (fk->calls(kind) - before < n)
			break; /* the scenario no longer reaches call n */
		nr_injected++;
	}
	fk->fail_clear();
}

static void test_fault_sweep(void **state)
{
	size_t i;

	(void)state;
	for (i = 0; i < ARRAY_SIZE(kinds); i++)
		sweep_kind(kinds[i]);
	printf("# fault sweep: %lu injected failures over %zu driver calls "
	       "kinds, nothing leaked\n",
	       nr_injected, ARRAY_SIZE(kinds));
	assert_true(nr_injected > 50);
}

/* A driver that fails every call of one kind: errors, but no leak. */
static void test_sticky_failures(void **state)
{
	size_t i;

	(void)state;
	for (i = 0; i < ARRAY_SIZE(kinds); i++) {
		/*
		 * A release (or a pop) that always fails cannot be undone:
		 * the driver keeps the object.  Those are swept once above.
		 */
		if (strstr(kinds[i], "Release") || strstr(kinds[i], "Free") ||
		    strstr(kinds[i], "Unmap") || strstr(kinds[i], "Pop"))
			continue;
		fk->fail_clear();
		cur_kind = kinds[i];
		cur_n = 0;
		assert_int_equal(fk->fail_always(kinds[i], CUDA_ERROR_UNKNOWN),
				 0);
		scenario();
		fk->fail_clear();
		assert_nothing_left();
	}
}

/* ------------------------------------------------------------- probes */

static char self[4096];

/* Run "self probe" with @env; return its exit code, its output in @out. */
static int probe(const char *env, char *out, size_t len)
{
	char cmd[8192];
	size_t n;
	FILE *p;
	int st;

	snprintf(cmd, sizeof(cmd), "env %s '%s' probe 2>/dev/null", env, self);
	p = popen(cmd, "r");
	assert_non_null(p);
	n = fread(out, 1, len - 1, p);
	out[n] = 0;
	st = pclose(p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_missing_driver(void **state)
{
	char out[1024], env[4200];
	const char *fake = getenv("STALLOC_LIBCUDA");

	(void)state;
	assert_int_equal(probe("STALLOC_LIBCUDA=/nonexistent/libcuda.so.1", out,
			       sizeof(out)),
			 ENODEV);
	assert_non_null(strstr(out, "cannot load the driver library"));
	assert_int_equal(probe("STALLOC_LIBCUDA=libm.so.6", out, sizeof(out)),
			 ENODEV);
	assert_non_null(strstr(out, "no cuGetProcAddress_v2"));
	snprintf(env, sizeof(env),
		 "STALLOC_LIBCUDA=%s FAKECUDA_FAIL=cuInit:1:3", fake);
	assert_int_equal(probe(env, out, sizeof(out)), ENODEV);
	assert_non_null(strstr(out, "cuInit"));
	snprintf(env, sizeof(env), "STALLOC_LIBCUDA=%s FAKECUDA_NO_VMM=1",
		 fake);
	assert_int_equal(probe(env, out, sizeof(out)), ENODEV);
	assert_non_null(strstr(out, "virtual memory management"));
	snprintf(env, sizeof(env), "STALLOC_LIBCUDA=%s FAKECUDA_DEVICES=0",
		 fake);
	assert_int_equal(probe(env, out, sizeof(out)), ENODEV);
	assert_non_null(strstr(out, "CUDA_ERROR_NO_DEVICE"));
	/* "auto" falls back to the host backend when there is no driver */
	assert_int_equal(
		probe("STALLOC_LIBCUDA=/nonexistent STALLOC_BACKEND=auto "
		      "PROBE_BACKEND=auto",
		      out, sizeof(out)),
		0);
	assert_non_null(strstr(out, "backend host"));
}

static int run_probe(void)
{
	const char *b = getenv("PROBE_BACKEND");
	struct vmm_config cfg = { .backend = b ? b : "cuda",
				  .va_bytes = 64 << 20 };
	struct vmm_space *s;
	int err = vmm_space_create(&cfg, &s);

	if (err) {
		printf("%s\n", stalloc_last_error());
		return -err;
	}
	printf("backend %s\n", vmm_backend_name(s));
	vmm_space_destroy(s);
	return 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_clean_run),
		cmocka_unit_test(test_fault_sweep),
		cmocka_unit_test(test_sticky_failures),
		cmocka_unit_test(test_missing_driver),
	};
	ssize_t n;

	if (argc > 1 && !strcmp(argv[1], "probe"))
		return run_probe();
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		return 1;
	self[n] = 0;
	/* Driver errors are expected here by the hundred: keep them quiet. */
	stalloc_set_log_level(STALLOC_LOG_NONE);
	fk = fx_fake();
	if (!fk) {
		fprintf(stderr, "vmm/faults: needs STALLOC_LIBCUDA=<fake "
				"driver>\n");
		return 1;
	}
	return cmocka_run_group_tests_name("vmm/faults", tests, NULL, NULL);
}
