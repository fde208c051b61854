// SPDX-License-Identifier: MIT
/*
 * tests/test-mapper-streams.c - the runtime's streams and graph pools
 *
 * On the fake driver (where the stream rule is checked: reuse of a block
 * on another stream waits for the stream that freed it; same-stream reuse
 * does not): checkpoint events and record_stream, device syncs kept rare,
 * destroyed streams, planned slots across streams, and a real capture as
 * torch.cuda.graph() makes one.  Graph pools run on the host backend too;
 * the rest skips there.  Set-up: tests/mapper-fixture.h.
 */
#include <dlfcn.h>
#include <errno.h>

#include "tests/mapper-fixture.h"

typedef int (*stream_create_fn)(void **s, unsigned int flags);

/* Two streams of the fake driver (a context is made current for them). */
static void fake_streams(void **a, void **b)
{
	int (*retain)(void **, int);
	int (*set)(void *);
	stream_create_fn create;
	void *h, *ctx;

	h = dlopen(getenv("STALLOC_LIBCUDA"), RTLD_NOW | RTLD_NOLOAD);
	assert_non_null(h);
	*(void **)&create = dlsym(h, "cuStreamCreate");
	*(void **)&retain = dlsym(h, "cuDevicePrimaryCtxRetain");
	*(void **)&set = dlsym(h, "cuCtxSetCurrent");
	assert_non_null(create);
	assert_int_equal(retain(&ctx, 0), 0);
	assert_int_equal(set(ctx), 0);
	assert_int_equal(create(a, 0), 0);
	assert_int_equal(create(b, 0), 0);
}

/*
 * Cross-stream reuse goes by checkpoint events (mapper/streams.h): one
 * stream records nothing; memory freed on a stream is handed to another
 * once its stream recorded a checkpoint after the free, by a wait on the
 * device; record_stream makes the free record at once; never a stall.
 */
static void test_streams(void **state)
{
	const struct fx_fake *fk = fx_fake();
	unsigned long r, n, sync, ssync;
	void *a, *b, *p0, *p, *q, *x, *s1, *s2;

	(void)state;
	if (!fk) {
		skip();
		return;
	}
	p0 = stalloc_malloc(4 * MB, 0, NULL); /* the device's first request */
	assert_non_null(p0);
	fake_streams(&a, &b);
	r = fk->calls("cuEventRecord");
	sync = fk->calls("cuCtxSynchronize");
	ssync = fk->calls("cuStreamSynchronize");
	stalloc_free(p0, 0, 0, NULL);
	assert_int_equal(fk->calls("cuEventRecord"), r); /* one stream */

	/* NULL has not checkpointed since its free: a takes new memory */
	p = stalloc_malloc(4 * MB, 0, a);
	assert_non_null(p);
	assert_ptr_not_equal(p, p0);
	/* NULL's next free checkpoints it (a wanted its memory) */
	q = stalloc_malloc(2 * MB, 0, NULL);
	stalloc_free(q, 0, 0, NULL);
	assert_int_equal(fk->calls("cuEventRecord"), r + 1);
	n = fk->calls("cuStreamWaitEvent");
	x = stalloc_malloc(4 * MB, 0, a); /* ready now: a waits, by event */
	assert_ptr_equal(x, p0);
	assert_int_equal(fk->calls("cuStreamWaitEvent"), n + 1);
	stalloc_free(x, 0, 0, a);
	x = stalloc_malloc(4 * MB, 0, a); /* same stream: nothing */
	assert_ptr_equal(x, p0);
	assert_int_equal(fk->calls("cuStreamWaitEvent"), n + 1);

	/* record_stream: the free records both streams' checkpoints */
	stalloc_record_stream(x, b);
	r = fk->calls("cuEventRecord");
	stalloc_free(x, 0, 0, a);
	assert_int_equal(fk->calls("cuEventRecord"), r + 2);
	x = stalloc_malloc(4 * MB, 0, b);
	assert_ptr_equal(x, p0);
	assert_int_equal(fk->calls("cuStreamWaitEvent"), n + 2);
	stalloc_free(x, 0, 0, b);
	stalloc_free(p, 0, 0, a);

	/* slab objects: the same rule */
	s1 = stalloc_malloc(1000, 0, a);
	stalloc_free(s1, 0, 0, a);
	s2 = stalloc_malloc(1000, 0, a);
	assert_ptr_equal(s1, s2);
	stalloc_free(s2, 0, 0, a);
	s2 = stalloc_malloc(1000, 0, b); /* not covered yet: elsewhere */
	assert_non_null(s2);
	assert_ptr_not_equal(s1, s2);
	stalloc_free(s2, 0, 0, b);

	assert_int_equal(fk->calls("cuCtxSynchronize"), sync);
	assert_int_equal(fk->calls("cuStreamSynchronize"), ssync);
	assert_int_equal(fk->violations(), 0);
}

/*
 * Two streams allocating and freeing over each other's memory, and the
 * record_stream pattern of NCCL collectives: device-wide syncs stay under
 * 1% of the allocations (PyTorch's own allocator makes none).
 */
static void test_stream_syncs(void **state)
{
	const struct fx_fake *fk = fx_fake();
	static struct blk live[64];
	unsigned long sync, allocs = 0;
	void *st[2];
	int i, k;

	(void)state;
	if (!fk) {
		skip();
		return;
	}
	live[0].p = stalloc_malloc(MB, 0, NULL);
	stalloc_free(live[0].p, 0, 0, NULL);
	fake_streams(&st[0], &st[1]);
	sync = fk->calls("cuCtxSynchronize");
	for (i = 0; i < 200; i++) {
		for (k = 0; k < 64; k++) {
			live[k].n = (size_t)(1 + (i * 64 + k) * 7919 % 97) *
				    64 * 1024;
			live[k].p = stalloc_malloc(live[k].n, 0, st[k & 1]);
			assert_non_null(live[k].p);
			allocs++;
		}
		for (k = 0; k < 64; k++)
			stalloc_free(live[k].p, live[k].n, 0, st[k & 1]);
	}
	for (i = 0; i < 3200; i++) {
		/* a bucket made on one stream, used by the collective's */
		void *t = stalloc_malloc(25 * MB, 0, st[0]);

		assert_non_null(t);
		allocs++;
		stalloc_record_stream(t, st[1]);
		stalloc_free(t, 25 * MB, 0, st[0]);
	}
	print_message("stream syncs: %lu device syncs for %lu allocations\n",
		      fk->calls("cuCtxSynchronize") - sync, allocs);
	assert_true((fk->calls("cuCtxSynchronize") - sync) * 100 <= allocs);
	assert_int_equal(fk->violations(), 0);
}

/*
 * A stream destroyed after its frees costs nothing: its handle is never
 * given to the driver again, and its memory comes back (the
 * out-of-memory path waits for the device).
 */
static void test_stream_destroyed(void **state)
{
	const struct fx_fake *fk = fx_fake();
	int (*destroy)(void *);
	void *a, *b, *p, *q;
	int i;

	(void)state;
	if (!fk) {
		skip();
		return;
	}
	stalloc_memory_fraction(1.0 / 16, 0); /* 64 MiB of FAKECUDA_MEM */
	p = stalloc_malloc(MB, 0, NULL);
	stalloc_free(p, 0, 0, NULL);
	fake_streams(&a, &b);
	*(void **)&destroy =
		dlsym(dlopen(getenv("STALLOC_LIBCUDA"), RTLD_NOW | RTLD_NOLOAD),
		      "cuStreamDestroy_v2");
	assert_non_null(destroy);
	p = stalloc_malloc(48 * MB, 0, a);
	assert_non_null(p);
	stalloc_free(p, 0, 0, a);
	assert_int_equal(destroy(a), 0);
	for (i = 0; i < 20; i++) {
		q = stalloc_malloc(48 * MB, 0, b);
		assert_non_null(q);
		stalloc_free(q, 0, 0, b);
	}
	assert_int_equal(fk->violations(), 0);
}

/*
 * Planned slots follow the stream rule too: iterations on one stream make
 * no driver call; the first iteration on another stream may wait for the
 * device once (the old stream had not checkpointed: a slot cannot go
 * elsewhere), after which the old stream checkpoints eagerly and later
 * iterations wait by events only; a planned block record_stream put on
 * another stream is handed over by events too.
 */
static void test_plan_streams(void **state)
{
	const struct fx_fake *fk = fx_fake();
	struct stalloc_stats st;
	struct blk live[6];
	unsigned long n, sync, stall;
	char plan[256];
	void *a, *b, *w, *p;
	int k, j;

	(void)state;
	if (!fk) {
		skip();
		return;
	}
	make_plan(plan, sizeof(plan));
	w = stalloc_malloc(32 * MB, 0, NULL);
	fake_streams(&a, &b);
	for (k = 0; k < 6; k++) {
		void *s = k < 4 ? a : b;

		if (k == 2) {
			n = fk->calls("cuStreamWaitEvent");
			sync = fk->calls("cuCtxSynchronize");
			stall = fk->calls("cuStreamSynchronize");
		}
		if (k == 4) {
			/* one stream so far: no driver call */
			assert_int_equal(fk->calls("cuStreamWaitEvent"), n);
			assert_int_equal(fk->calls("cuCtxSynchronize"), sync);
		}
		if (k == 5) /* a to b: at most one device sync */
			assert_true(fk->calls("cuCtxSynchronize") <= sync + 1);
		stalloc_mark("iteration");
		for (j = 0; j < 6; j++) {
			live[j].n = (size_t)(j + 1) * MB;
			live[j].p = stalloc_malloc(live[j].n, 0, s);
			assert_non_null(live[j].p);
		}
		assert_disjoint(live, 6);
		if (k == 5)
			stalloc_record_stream(live[0].p, a);
		for (j = 6; j-- > 0;)
			stalloc_free(live[j].p, live[j].n, 0, s);
	}
	assert_true(fk->calls("cuStreamWaitEvent") > n);
	assert_int_equal(fk->calls("cuStreamSynchronize"), stall);
	stalloc_stats(0, &st);
	assert_int_equal(st.plan_misses, 0);
	assert_int_equal(st.plan_hits, 1 + 6 * 6); /* the warm-up's too */
	/* the block record_stream named: handed over by events */
	sync = fk->calls("cuCtxSynchronize");
	n = fk->calls("cuStreamWaitEvent");
	stalloc_mark("iteration");
	p = stalloc_malloc(1 * MB, 0, b);
	assert_non_null(p);
	assert_int_equal(fk->calls("cuCtxSynchronize"), sync);
	assert_true(fk->calls("cuStreamWaitEvent") > n);
	stalloc_free(p, 0, 0, b);
	stalloc_free(w, 0, 0, NULL);
	assert_int_equal(fk->violations(), 0);
	unlink(plan);
}

/* The fake's controls, a plan, the weights and two streams. */
struct lend_fx {
	int (*hold)(void *stream, int busy);
	int (*launch)(void *stream, unsigned long long addr,
		      unsigned long long size, int write);
	char plan[256];
	void *a, *b, *w;
};

/* Set @f up; false (the test skipped) without the fake driver. */
static bool lend_setup(struct lend_fx *f)
{
	void *h;

	if (!fx_fake()) {
		skip();
		return false;
	}
	h = dlopen(getenv("STALLOC_LIBCUDA"), RTLD_NOW | RTLD_NOLOAD);
	*(void **)&f->hold = dlsym(h, "fakecuda_stream_hold");
	*(void **)&f->launch = dlsym(h, "fakecuda_launch");
	assert_true(f->hold && f->launch);
	make_plan(f->plan, sizeof(f->plan));
	f->w = stalloc_malloc(32 * MB, 0, NULL);
	fake_streams(&f->a, &f->b);
	return true;
}

/* An iteration's 6 activations on the compute stream, written there. */
static void lend_activations(struct lend_fx *f, struct blk *live)
{
	int j;

	for (j = 0; j < 6; j++) {
		live[j].n = (size_t)(j + 1) * MB;
		live[j].p = stalloc_malloc(live[j].n, 0, f->a);
		assert_non_null(live[j].p);
		assert_int_equal(
			f->launch(f->a, (uintptr_t)live[j].p, live[j].n, 1), 0);
	}
}

/*
 * Lending the plan's idle pool memory to a dynamic request unmaps pool
 * chunks whose last users' work may still run: the host waits for those
 * streams only (their checkpoint events), never for the whole device.  The
 * compute stream is held busy, so an unmap before its work completed is a
 * violation of the fake; a side stream's record_stream'd use is waited for
 * by its checkpoint.  Dynamic requests on the compute stream are lent the
 * activations' chunks (reserved stays at the pool's size); on the side
 * stream too, or they stay unlent: never a device-wide sync either way.
 */
static void test_plan_lend_streams(void **state)
{
	const struct fx_fake *fk = fx_fake();
	struct stalloc_stats st;
	struct lend_fx f;
	struct blk live[6];
	unsigned long sync, waits;
	void *x;
	int k, j;

	(void)state;
	if (!lend_setup(&f))
		return;
	sync = fk->calls("cuCtxSynchronize");
	waits = fk->calls("cuEventSynchronize");
	for (k = 0; k < 8; k++) {
		void *dyn = k < 5 ? f.a : f.b;

		assert_int_equal(f.hold(f.a, 1), 0);
		stalloc_mark("iteration");
		lend_activations(&f, live);
		assert_disjoint(live, 6);
		stalloc_record_stream(live[5].p, f.b); /* a collective's */
		for (j = 6; j-- > 0;)
			stalloc_free(live[j].p, live[j].n, 0, f.a);
		/* after the iteration: the activations' 21 MB are idle */
		x = stalloc_malloc(16 * MB, 0, dyn);
		assert_non_null(x);
		assert_int_equal(f.launch(dyn, (uintptr_t)x, 16 * MB, 1), 0);
		stalloc_free(x, 0, 0, dyn);
		if (k == 4) {
			stalloc_stats(0, &st);
			/* lent: the pool's 53 MB (in chunks) held, not 69 */
			assert_true(st.reserved_peak <=
				    32 * MB + 22 * MB + 2 * MB);
			/* the compute stream's work was waited for */
			assert_true(fk->calls("cuEventSynchronize") > waits);
		}
	}
	assert_int_equal(f.hold(f.a, 0), 0);
	print_message("lending: %lu device syncs, %lu event waits\n",
		      fk->calls("cuCtxSynchronize") - sync,
		      fk->calls("cuEventSynchronize") - waits);
	assert_int_equal(fk->calls("cuCtxSynchronize"), sync);
	assert_int_equal(fk->violations(), 0);
	stalloc_stats(0, &st);
	/* every planned request still hits; the inserted ones miss */
	assert_int_equal(st.plan_hits, 1 + 8 * 6);
	/* the runtime's own counts say the same */
	assert_int_equal(st.device_syncs, 0);
	assert_true(st.host_waits > 0);
	stalloc_free(f.w, 0, 0, NULL);
	unlink(f.plan);
}

/*
 * Lending waits only when it must: pool memory whose last users' work the
 * driver already reports complete -- covered by the stream's previous
 * checkpoint, while its latest one is still pending behind new work -- is
 * lent with no host wait (cuEventQuery, never cuEventSynchronize).
 */
static void test_plan_lend_done(void **state)
{
	const struct fx_fake *fk = fx_fake();
	struct stalloc_stats st;
	struct lend_fx f;
	struct blk live[6];
	unsigned long waits, queries;
	uint64_t host_waits;
	void *x;
	int k, j;

	(void)state;
	if (!lend_setup(&f))
		return;
	for (k = 0; k < 6; k++) {
		stalloc_mark("iteration");
		lend_activations(&f, live);
		/* collectives' buffers: their frees checkpoint a at once */
		stalloc_record_stream(live[4].p, f.b);
		stalloc_record_stream(live[5].p, f.b);
		for (j = 4; j-- > 0;)
			stalloc_free(live[j].p, live[j].n, 0, f.a);
		stalloc_free(live[4].p, live[4].n, 0, f.a); /* done at once */
		/* new work keeps a busy: its next checkpoint stays pending */
		assert_int_equal(f.hold(f.a, 1), 0);
		assert_int_equal(f.launch(f.a, (uintptr_t)f.w, 32 * MB, 1), 0);
		stalloc_free(live[5].p, live[5].n, 0, f.a);
		waits = fk->calls("cuEventSynchronize");
		queries = fk->calls("cuEventQuery");
		stalloc_stats(0, &st);
		host_waits = st.host_waits;
		/* the activations' idle chunks are lent, without a wait */
		x = stalloc_malloc(12 * MB, 0, f.a);
		assert_non_null(x);
		assert_int_equal(f.launch(f.a, (uintptr_t)x, 12 * MB, 1), 0);
		stalloc_stats(0, &st);
		if (k >= 3) { /* past the warm-up and its hand-over */
			assert_true(st.reserved_peak <=
				    32 * MB + 22 * MB + 2 * MB);
			assert_int_equal(fk->calls("cuEventSynchronize"),
					 waits);
			assert_true(fk->calls("cuEventQuery") > queries);
			assert_int_equal(st.host_waits, host_waits);
		}
		stalloc_free(x, 0, 0, f.a);
		assert_int_equal(f.hold(f.a, 0), 0);
	}
	assert_int_equal(fk->violations(), 0);
	stalloc_stats(0, &st);
	print_message("lending from complete work: %llu host waits in all\n",
		      (unsigned long long)st.host_waits);
	assert_int_equal(st.device_syncs, 0);
	stalloc_free(f.w, 0, 0, NULL);
	unlink(f.plan);
}

static int only_stream(void *ctx, void *stream)
{
	return stream == ctx;
}

static int drops;

static void count_drop(void *ctx)
{
	(void)ctx;
	drops++;
}

/*
 * CUDA graph pools: what a capture allocates is the pool's until it is
 * released; ordinary memory freed during the capture is set aside until it
 * ends; the pool reuses its own freed blocks; unknown ids are refused.
 */
static void test_graph_pool(void **state)
{
	void *cap = (void *)0x1000, *other = (void *)0x2000;
	void *x, *p, *q, *y, *z;
	const struct fx_fake *fk = fx_fake();
	unsigned long sync = fk ? fk->calls("cuCtxSynchronize") : 0;

	(void)state;
	if (fk) {
		void *a;

		x = stalloc_malloc(MB, 0, NULL);
		stalloc_free(x, 0, 0, NULL);
		fake_streams(&a, &cap);
		fake_streams(&other, &a);
		sync = fk->calls("cuCtxSynchronize");
	}
	x = stalloc_malloc(4 * MB, 0, cap); /* ordinary, before the capture */
	assert_non_null(x);
	drops = 0;
	assert_int_equal(
		stalloc_pool_begin(0, 7, 9, only_stream, cap, count_drop), 0);
	assert_int_equal(stalloc_pool_begin(0, 7, 9, NULL, NULL, NULL), -EBUSY);
	stalloc_free(x, 0, 0, cap); /* set aside: the graph may not get it */
	p = stalloc_malloc(4 * MB, 0, cap);
	assert_non_null(p);
	assert_ptr_not_equal(p, x);
	y = stalloc_malloc(4 * MB, 0, other); /* not the pool's stream */
	assert_ptr_not_equal(y, x);
	assert_ptr_not_equal(y, p);
	stalloc_free(p, 0, 0, cap); /* the pool reuses its own blocks */
	q = stalloc_malloc(4 * MB, 0, cap);
	assert_ptr_equal(q, p);
	assert_int_equal(stalloc_pool_end(0, 7, 9), 0);
	assert_int_equal(drops, 1);
	assert_int_equal(stalloc_pool_end(0, 7, 9), -ENOENT);

	/* after the capture: x is free again, q stays the graph's */
	z = stalloc_malloc(4 * MB, 0, cap);
	assert_ptr_not_equal(z, q);
	if (!fk) /* on the fake, x merged with memory of other streams */
		assert_ptr_equal(z, x);
	stalloc_free(q, 0, 0, cap);
	stalloc_free(z, 0, 0, cap);
	z = stalloc_malloc(4 * MB, 0, cap);
	assert_ptr_not_equal(z, q);
	stalloc_free(z, 0, 0, cap);
	stalloc_free(y, 0, 0, other);
	assert_int_equal(stalloc_pool_release(0, 7, 9), 0);
	assert_int_equal(stalloc_pool_release(0, 7, 9), -ENOENT);
	if (fk) {
		assert_int_equal(fk->calls("cuCtxSynchronize"), sync);
		assert_int_equal(fk->violations(), 0);
	}
}

/*
 * A real capture on the strict fake driver, as torch.cuda.graph() makes
 * one: pool hooks around cuStreamBeginCapture/EndCapture, allocations and
 * frees on the capturing stream, memory freed before on other streams
 * (the legacy one too), empty_cache and eager work elsewhere meanwhile.
 * The capture must not be invalidated and no rule broken.
 */
static void test_graph_capture(void **state)
{
	const struct fx_fake *fk = fx_fake();
	int (*begin)(void *, int), (*end)(void *, void **), (*gdestroy)(void *);
	unsigned long (*invalidated)(void);
	int (*launch)(void *, unsigned long long, unsigned long long, int);
	void *a, *cap, *h, *graph = NULL, *p[8], *x, *y, *n;
	int i;

	(void)state;
	if (!fk) {
		skip();
		return;
	}
	n = stalloc_malloc(8 * MB, 0, NULL);
	fake_streams(&a, &cap);
	h = dlopen(getenv("STALLOC_LIBCUDA"), RTLD_NOW | RTLD_NOLOAD);
	*(void **)&begin = dlsym(h, "cuStreamBeginCapture_v2");
	*(void **)&end = dlsym(h, "cuStreamEndCapture");
	*(void **)&gdestroy = dlsym(h, "cuGraphDestroy");
	*(void **)&invalidated = dlsym(h, "fakecuda_captures_invalidated");
	*(void **)&launch = dlsym(h, "fakecuda_launch");
	assert_true(begin && end && gdestroy && invalidated && launch);
	/* memory freed on other streams before the capture */
	x = stalloc_malloc(6 * MB, 0, a);
	assert_int_equal(launch(a, (uintptr_t)x, 6 * MB, 1), 0);
	stalloc_free(x, 0, 0, a);
	stalloc_free(n, 0, 0, NULL);
	y = stalloc_malloc(2 * MB, 0, NULL); /* eager, freed during capture */

	assert_int_equal(stalloc_pool_begin(0, 1, 1, only_stream, cap, NULL),
			 0);
	assert_int_equal(begin(cap, 0 /* CU_STREAM_CAPTURE_MODE_GLOBAL */), 0);
	for (i = 0; i < 8; i++) {
		size_t sz = i % 2 ? 1000 : (size_t)(i + 1) * MB;

		p[i] = stalloc_malloc(sz, 0, cap);
		assert_non_null(p[i]);
		assert_int_equal(launch(cap, (uintptr_t)p[i], sz, 1), 0);
		if (i >= 2) /* in-graph reuse */
			stalloc_free(p[i - 2], 0, 0, cap);
	}
	stalloc_free(y, 0, 0, NULL);
	stalloc_empty_cache();
	x = stalloc_malloc(4 * MB, 0, a); /* eager work on another stream */
	assert_non_null(x);
	assert_int_equal(end(cap, &graph), 0);
	assert_non_null(graph);
	assert_int_equal(stalloc_pool_end(0, 1, 1), 0);
	assert_int_equal(invalidated(), 0);

	stalloc_free(x, 0, 0, a);
	stalloc_free(p[6], 0, 0, cap);
	stalloc_free(p[7], 0, 0, cap);
	assert_int_equal(gdestroy(graph), 0);
	assert_int_equal(stalloc_pool_release(0, 1, 1), 0);
	x = stalloc_malloc(64 * MB, 0, a); /* after: everything usable */
	assert_non_null(x);
	stalloc_free(x, 0, 0, a);
	assert_int_equal(fk->violations(), 0);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		MAPPER_TEST(test_streams),
		MAPPER_TEST(test_stream_syncs),
		MAPPER_TEST(test_stream_destroyed),
		MAPPER_TEST(test_graph_pool),
		MAPPER_TEST(test_graph_capture),
		MAPPER_TEST(test_plan_streams),
		MAPPER_TEST(test_plan_lend_streams),
		MAPPER_TEST(test_plan_lend_done),
	};
	const char *group = mapper_init(argc, argv, "mapper-streams");

	if (!group)
		return 1;
	return mapper_done(
		cmocka_run_group_tests_name(group, tests, NULL, NULL));
}
