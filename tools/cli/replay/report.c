// SPDX-License-Identifier: MIT
/*
 * tools/cli/replay/report.c - stalloc-replay's results: JSON and summary
 *
 * Collects what the replay measured (peaks of requested and reserved
 * bytes, plan hits and misses, dynamic bytes, driver calls and physical
 * allocations, the runtime's peak accounting summed over devices) and
 * prints it as one JSON object
 * (--json) or a human summary.  Invariants: reads the replay's state only;
 * the JSON keys are an interface (tools/python/stalloc, bench/).
 * Single-threaded; no locking.
 */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <stalloc/planner.h>
#include <stalloc/stalloc.h>
#include <stalloc/trace.h>

#include "tool.h"

/* The peak accounting's fields, for printing (struct stalloc_peak). */
#define PEAK_FIELD(f)                                \
	{                                            \
#f, offsetof(struct stalloc_peak, f) \
	}
static const struct {
	const char *name;
	size_t off;
} peak_fields[] = {
	PEAK_FIELD(reserved),  PEAK_FIELD(requested), PEAK_FIELD(pool_used),
	PEAK_FIELD(pool_idle), PEAK_FIELD(dyn_live),  PEAK_FIELD(dyn_warmup),
	PEAK_FIELD(slabs),     PEAK_FIELD(dyn_free),  PEAK_FIELD(cached),
	PEAK_FIELD(allocs),
};
#undef PEAK_FIELD

static uint64_t peak_value(const struct stalloc_peak *p, size_t i)
{
	uint64_t v;

	memcpy(&v, (const char *)p + peak_fields[i].off, sizeof(v));
	return v;
}

/* Add @p's fields into @sum (several devices). */
static void peak_add(struct stalloc_peak *sum, const struct stalloc_peak *p)
{
	size_t i;

	for (i = 0; i < ARRAY_LEN(peak_fields); i++) {
		uint64_t v = peak_value(sum, i) + peak_value(p, i);

		memcpy((char *)sum + peak_fields[i].off, &v, sizeof(v));
	}
}

void collect(const struct replay *r, struct result *res)
{
	int d;

	memset(res, 0, sizeof(*res));
	res->peak_req = peak_requested(r);
	for (d = 0; d < MAX_DEV; d++) {
		if (!r->used[d])
			continue;
		if (is_lib(r)) {
			struct stalloc_stats st;
			struct stalloc_peak pk;

			if (stalloc_stats(d, &st))
				continue;
			if (!stalloc_peak(d, &pk)) {
				peak_add(&res->peak, &pk);
				res->has_peak = true;
			}
			res->peak_res += st.reserved_peak;
			res->hits += st.plan_hits;
			res->misses += st.plan_misses;
			res->driver += st.driver_calls;
			res->syncs += st.device_syncs;
			res->waits += st.host_waits;
			res->drv_allocs += st.driver_allocs;
			res->drv_alloc_bytes += st.driver_alloc_bytes;
			res->bad_frees += st.bad_frees;
		} else {
			struct cm_stats st;

			cm_get_stats(r->model[d], &st);
			res->peak_res += st.reserved_peak;
			res->driver += cm_driver_calls(&st);
			res->drv_allocs += st.cuda_malloc + st.mem_create;
			res->drv_alloc_bytes += st.created_bytes;
		}
	}
	res->dynamic = r->allocs - r->failed - res->hits;
	/* libstalloc: the last iteration with a marker at both ends */
	res->has_iter_driver = is_lib(r) && r->iter_marks >= 2;
	res->iter_driver = r->calls_at_mark - r->calls_before_mark;
	/*
	 * A plan the runtime dropped (made for another workload) serves
	 * nothing after the first planned iteration: the last iteration
	 * then has requests and no hit.
	 */
	res->plan_dropped =
		r->a->policy == P_STALLOC && r->plan_steady &&
		(!res->hits || (r->iter_marks >= 2 && r->steady_allocs &&
				lib_hits() == r->hits_at_mark));
}

static double frag(const struct result *res)
{
	return res->peak_res ? ((double)res->peak_res - (double)res->peak_req) /
				       (double)res->peak_res :
			       0.0;
}

static double util(const struct result *res)
{
	return res->peak_res ? (double)res->peak_req / (double)res->peak_res :
			       0.0;
}

static void json_string(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
}

static void print_torch_json(const struct replay *r, const struct result *res)
{
	if (!r->torch.have_peak) {
		printf(", \"torch_reserved_peak_bytes\": null");
		return;
	}
	printf(", \"torch_reserved_peak_bytes\": %" PRIu64
	       ", \"torch_allocator\": ",
	       r->torch.reserved_peak);
	json_string(r->torch.allocator);
	printf(", \"torch_reserved_source\": ");
	json_string(r->torch.source);
	if (torch_comparable(r))
		printf(", \"model_vs_torch\": %.6f",
		       (double)res->peak_res / (double)r->torch.reserved_peak -
			       1.0);
	else
		printf(", \"model_vs_torch\": null");
}

void print_json(const struct replay *r, const struct result *res)
{
	printf("{\"trace\": ");
	json_string(r->a->trace);
	printf(", \"policy\": \"%s\", \"plan\": ", policy_name[r->a->policy]);
	if (r->a->policy == P_STALLOC && !r->plan_tmp)
		json_string(r->plan_path);
	else
		printf(r->a->policy == P_STALLOC ? "\"(in-process)\"" : "null");
	printf(", \"plan_rejected\": %s", r->plan_rejected ? "true" : "false");
	printf(", \"allocs\": %" PRIu64 ", \"frees\": %" PRIu64
	       ", \"markers\": %" PRIu64 ", \"failed_allocs\": %" PRIu64
	       ", \"overlaps\": %" PRIu64 ", \"bad_frees\": %" PRIu64,
	       r->allocs, r->frees, r->marks, r->failed, r->overlaps,
	       res->bad_frees);
	if (r->a->stamp)
		printf(", \"lost_allocs\": %" PRIu64, r->corrupt);
	printf(", \"peak_requested_bytes\": %" PRIu64
	       ", \"peak_reserved_bytes\": %" PRIu64
	       ", \"fragmentation\": %.6f, \"utilisation\": %.6f",
	       res->peak_req, res->peak_res, frag(res), util(res));
	print_torch_json(r, res);
	printf(", \"plan_hits\": %" PRIu64 ", \"plan_misses\": %" PRIu64
	       ", \"plan_dropped\": %s, \"dynamic_allocs\": %" PRIu64
	       ", \"driver_calls\": %" PRIu64,
	       res->hits, res->misses, res->plan_dropped ? "true" : "false",
	       res->dynamic, res->driver);
	if (res->has_iter_driver)
		printf(", \"iteration_driver_calls\": %" PRIu64,
		       res->iter_driver);
	else
		printf(", \"iteration_driver_calls\": null");
	printf(", \"device_syncs\": %" PRIu64 ", \"host_waits\": %" PRIu64
	       ", \"driver_allocs\": %" PRIu64
	       ", \"driver_alloc_bytes\": %" PRIu64,
	       res->syncs, res->waits, res->drv_allocs, res->drv_alloc_bytes);
	if (res->has_peak) {
		size_t i;

		printf(", \"peak_accounting\": {");
		for (i = 0; i < ARRAY_LEN(peak_fields); i++)
			printf("%s\"%s\": %" PRIu64, i ? ", " : "",
			       peak_fields[i].name, peak_value(&res->peak, i));
		printf("}");
	}
	printf(", \"replay_ms\": %.3f}\n", r->ms);
}

static void human(uint64_t b, char *buf, size_t n)
{
	if (b >= (1ULL << 30))
		snprintf(buf, n, "%.2f GiB", (double)b / (1ULL << 30));
	else
		snprintf(buf, n, "%.1f MiB", (double)b / (1ULL << 20));
}

void print_summary(const struct replay *r, const struct result *res)
{
	char h[32];

	printf("%-16s %s\n", "trace", r->a->trace);
	printf("%-16s %s", "policy", policy_name[r->a->policy]);
	if (r->a->policy == P_STALLOC)
		printf(" (plan %s%s)",
		       r->plan_tmp ? "made in-process" : r->plan_path,
		       r->plan_rejected ?
			       ", rejected by its check: the fallback" :
			       "");
	printf("\n%-16s %" PRIu64 " allocations, %" PRIu64 " frees, %" PRIu64
	       " markers\n",
	       "events", r->allocs, r->frees, r->marks);
	human(res->peak_req, h, sizeof(h));
	printf("%-16s %14" PRIu64 " B  (%s)\n", "peak requested", res->peak_req,
	       h);
	human(res->peak_res, h, sizeof(h));
	printf("%-16s %14" PRIu64 " B  (%s)\n", "peak reserved", res->peak_res,
	       h);
	if (r->torch.have_peak) {
		human(r->torch.reserved_peak, h, sizeof(h));
		printf("%-16s %14" PRIu64 " B  (%s, recorded, %s, %s)\n",
		       "torch reserved", r->torch.reserved_peak, h,
		       r->torch.allocator, r->torch.source);
		if (torch_comparable(r))
			printf("%-16s %+13.2f %%\n", "model vs torch",
			       100.0 * ((double)res->peak_res /
						(double)r->torch.reserved_peak -
					1.0));
	}
	printf("%-16s %14.4f\n", "fragmentation", frag(res));
	printf("%-16s %14.4f\n", "utilisation", util(res));
	printf("%-16s %14" PRIu64 "\n", "plan hits", res->hits);
	printf("%-16s %14" PRIu64 "\n", "plan misses", res->misses);
	printf("%-16s %14" PRIu64 "\n", "dynamic allocs", res->dynamic);
	printf("%-16s %14" PRIu64 "\n", "driver calls", res->driver);
	if (res->has_iter_driver)
		printf("%-16s %14" PRIu64 "  (between its last two markers)\n",
		       "  last iteration", res->iter_driver);
	human(res->drv_alloc_bytes, h, sizeof(h));
	printf("%-16s %14" PRIu64 "  (%s in all)\n", "driver allocs",
	       res->drv_allocs, h);
	printf("%-16s %14" PRIu64 "\n", "device syncs", res->syncs);
	printf("%-16s %14" PRIu64 "\n", "host waits", res->waits);
	printf("%-16s %14" PRIu64 "\n", "failed allocs", r->failed);
	printf("%-16s %14" PRIu64 "\n", "overlaps", r->overlaps);
	if (r->a->stamp)
		printf("%-16s %14" PRIu64 "\n", "lost allocs", r->corrupt);
	printf("%-16s %14.3f ms\n", "replay", r->ms);
	if (res->has_peak) {
		size_t i;

		printf("at the reserved peak (allocation %" PRIu64 "):\n",
		       res->peak.allocs);
		for (i = 0; i + 1 < ARRAY_LEN(peak_fields); i++) {
			human(peak_value(&res->peak, i), h, sizeof(h));
			printf("  %-14s %14" PRIu64 " B  (%s)\n",
			       peak_fields[i].name, peak_value(&res->peak, i),
			       h);
		}
	}
}
