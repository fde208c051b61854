// SPDX-License-Identifier: MIT
/*
 * tools/cli/stalloc-timeline.c - draw a trace's memory timeline as SVG
 *
 *   stalloc-timeline [-o OUT.svg] [--plan PLAN] TRACE
 *
 * Panel 1: bytes live over the trace's logical time, stacked by class
 * (persistent, static, dynamic, unclassified), with the most bytes live at
 * once (the lower bound of any allocator), the plan's pool when a plan is
 * given, and the iteration starts.  Time is cut into at most BUCKETS
 * columns; each column shows the moment of its highest total, so peaks
 * are never smoothed away.  Panel 2 (--plan): the plan's buffers in the
 * address x time plane, one rectangle each (the largest MAX_RECTS when
 * there are more; the caption says how many were left out).
 *
 * Exit: 0 drawn, 1 bad input or output error, 2 usage.  Public API only.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stalloc/planner.h>
#include <stalloc/trace.h>

#define W 1000
#define PANEL_H 320
#define LEFT 80
#define RIGHT 20
#define TOP 40
#define GAP 70
#define BUCKETS 1200
#define MAX_RECTS 20000
#define NR_CLASSES 4

static const char usage[] =
	"usage: stalloc-timeline [-o OUT.svg] [--plan PLAN] TRACE\n"
	"\n"
	"Draw TRACE's bytes live over time, stacked by class, as SVG (default\n"
	"output: TRACE's name with .svg, in the current directory).  With\n"
	"--plan, add the plan's pool and a panel of its address x time layout.\n";

/* stacking order, bottom first, and colours */
static const int order[NR_CLASSES] = { STALLOC_CLASS_PERSISTENT,
				       STALLOC_CLASS_STATIC,
				       STALLOC_CLASS_DYNAMIC,
				       STALLOC_CLASS_NONE };
static const char *const cname[NR_CLASSES] = {
	[STALLOC_CLASS_NONE] = "unclassified",
	[STALLOC_CLASS_PERSISTENT] = "persistent",
	[STALLOC_CLASS_STATIC] = "static",
	[STALLOC_CLASS_DYNAMIC] = "dynamic",
};
static const char *const ccolor[NR_CLASSES] = {
	[STALLOC_CLASS_NONE] = "#c8c8c8",
	[STALLOC_CLASS_PERSISTENT] = "#5b7fb5",
	[STALLOC_CLASS_STATIC] = "#6fbf73",
	[STALLOC_CLASS_DYNAMIC] = "#f0a040",
};

struct column {
	uint64_t seq;
	uint64_t live[NR_CLASSES];
	uint64_t total;
	bool used;
};

struct timeline {
	struct column col[BUCKETS];
	uint64_t seq0, seq1, peak;
	size_t *marks;
	size_t nr_marks;
	uint64_t *mark_seq;
};

static void human(uint64_t b, char *buf, size_t n)
{
	if (!b)
		snprintf(buf, n, "0");
	else if (b >= (1ULL << 30))
		snprintf(buf, n, "%.2f GiB", (double)b / (1ULL << 30));
	else if (b >= (1ULL << 20))
		snprintf(buf, n, "%.1f MiB", (double)b / (1ULL << 20));
	else
		snprintf(buf, n, "%.1f KiB", (double)b / 1024);
}

/* A round step giving about @n ticks over @span. */
static uint64_t tick_step(uint64_t span, int n)
{
	uint64_t step = 1;

	while (span / step > (uint64_t)n * 5)
		step *= 10;
	if (span / step > (uint64_t)n * 2)
		step *= 5;
	else if (span / step > (uint64_t)n)
		step *= 2;
	return step ? step : 1;
}

static int collect(const struct stalloc_trace *t, struct timeline *tl)
{
	size_t i, n = stalloc_trace_count(t);
	uint64_t live[NR_CLASSES] = { 0 }, total = 0, span;
	struct stalloc_trace_event e;

	stalloc_trace_get(t, 0, &e);
	tl->seq0 = e.seq;
	stalloc_trace_get(t, n - 1, &e);
	tl->seq1 = e.seq + 1;
	span = tl->seq1 - tl->seq0;
	tl->mark_seq = calloc(n + 1, sizeof(*tl->mark_seq));
	if (!tl->mark_seq)
		return -ENOMEM;
	for (i = 0; i < n; i++) {
		struct column *c;
		size_t b;

		stalloc_trace_get(t, i, &e);
		if (e.op == 'm') {
			if (e.label && !strcmp(e.label, "iteration"))
				tl->mark_seq[tl->nr_marks++] = e.seq;
			continue;
		}
		if (e.op == 'a') {
			live[e.cls] += e.size;
			total += e.size;
		} else {
			live[e.cls] -= e.size;
			total -= e.size;
		}
		if (total > tl->peak)
			tl->peak = total;
		b = (size_t)((e.seq - tl->seq0) * BUCKETS / span);
		c = &tl->col[b < BUCKETS ? b : BUCKETS - 1];
		if (!c->used || total > c->total) {
			memcpy(c->live, live, sizeof(live));
			c->total = total;
			c->seq = e.seq;
			c->used = true;
		}
	}
	return 0;
}

static double px_x(const struct timeline *tl, uint64_t seq)
{
	return LEFT + (double)(seq - tl->seq0) * (W - LEFT - RIGHT) /
			      (double)(tl->seq1 - tl->seq0);
}

static double px_y(uint64_t top, uint64_t v, int y0)
{
	return y0 + PANEL_H - (double)v * PANEL_H / (double)(top ? top : 1);
}

/* A round byte step: whole MiB or GiB multiples when the range allows. */
static uint64_t byte_step(uint64_t top)
{
	if (top >= (8ULL << 30))
		return tick_step(top >> 30, 5) << 30;
	if (top >= (8ULL << 20))
		return tick_step(top >> 20, 5) << 20;
	return tick_step(top, 5);
}

static void axes(FILE *f, int y0, uint64_t ytop, uint64_t x0, uint64_t x1,
		 const char *xlabel, const char *ylabel)
{
	uint64_t s = byte_step(ytop), v;
	char buf[32];

	fprintf(f,
		"<g class=\"axes\" stroke=\"#333\" fill=\"none\">"
		"<path d=\"M%d %d V%d H%d\"/></g>\n",
		LEFT, y0, y0 + PANEL_H, W - RIGHT);
	for (v = 0; v <= ytop; v += s) {
		double y = px_y(ytop, v, y0);

		human(v, buf, sizeof(buf));
		fprintf(f,
			"<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" "
			"stroke=\"#eee\"/><text x=\"%d\" y=\"%.1f\" "
			"text-anchor=\"end\">%s</text>\n",
			LEFT, W - RIGHT, y, y, LEFT - 4, y + 4, buf);
	}
	s = tick_step(x1 - x0, 8);
	for (v = (x0 + s - 1) / s * s; v <= x1; v += s) {
		double x = LEFT + (double)(v - x0) * (W - LEFT - RIGHT) /
					  (double)(x1 - x0 ? x1 - x0 : 1);

		fprintf(f,
			"<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">"
			"%" PRIu64 "</text>\n",
			x, y0 + PANEL_H + 16, v);
	}
	fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">%s</text>\n",
		(LEFT + W - RIGHT) / 2, y0 + PANEL_H + 34, xlabel);
	fprintf(f,
		"<text x=\"14\" y=\"%d\" text-anchor=\"middle\" "
		"transform=\"rotate(-90 14 %d)\">%s</text>\n",
		y0 + PANEL_H / 2, y0 + PANEL_H / 2, ylabel);
}

static void hline(FILE *f, int y0, uint64_t ytop, uint64_t v, const char *color,
		  const char *cls, const char *what)
{
	double y = px_y(ytop, v, y0);
	char buf[32];

	human(v, buf, sizeof(buf));
	fprintf(f,
		"<g class=\"%s\"><line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" "
		"y2=\"%.1f\" stroke=\"%s\" stroke-width=\"1.5\" "
		"stroke-dasharray=\"6 3\"/><text x=\"%d\" y=\"%.1f\" "
		"text-anchor=\"end\" fill=\"%s\">%s %s</text></g>\n",
		cls, LEFT, W - RIGHT, y, y, color, W - RIGHT - 4, y - 4, color,
		what, buf);
}

static void stacks(FILE *f, const struct timeline *tl, uint64_t ytop)
{
	int k, c, b;

	fprintf(f, "<g class=\"stacks\">\n");
	for (k = 0; k < NR_CLASSES; k++) {
		int cls = order[k];

		fprintf(f, "<path class=\"class-%s\" fill=\"%s\" d=\"",
			cname[cls], ccolor[cls]);
		/* top edge left to right, then bottom edge back */
		for (b = 0; b < BUCKETS; b++) {
			const struct column *col = &tl->col[b];
			uint64_t top = 0;

			if (!col->used)
				continue;
			for (c = 0; c <= k; c++)
				top += col->live[order[c]];
			fprintf(f, "%s%.1f %.1f", b ? " L" : "M",
				px_x(tl, col->seq), px_y(ytop, top, TOP));
		}
		for (b = BUCKETS; b-- > 0;) {
			const struct column *col = &tl->col[b];
			uint64_t bot = 0;

			if (!col->used)
				continue;
			for (c = 0; c < k; c++)
				bot += col->live[order[c]];
			fprintf(f, " L%.1f %.1f", px_x(tl, col->seq),
				px_y(ytop, bot, TOP));
		}
		fprintf(f, " Z\"/>\n");
	}
	fprintf(f, "</g>\n");
}

static void legend(FILE *f)
{
	int k;

	for (k = 0; k < NR_CLASSES; k++)
		fprintf(f,
			"<rect x=\"%d\" y=\"22\" width=\"10\" height=\"10\" "
			"fill=\"%s\"/><text x=\"%d\" y=\"31\">%s</text>\n",
			LEFT + 130 * k, ccolor[order[k]], LEFT + 130 * k + 14,
			cname[order[k]]);
}

struct rect_ctx {
	struct stalloc_plan_buffer *b;
	size_t n, cap;
};

static int take_buf(const struct stalloc_plan_buffer *b, void *arg)
{
	struct rect_ctx *r = arg;

	if (r->n == r->cap) {
		size_t cap = r->cap ? 2 * r->cap : 4096;
		struct stalloc_plan_buffer *nb =
			realloc(r->b, cap * sizeof(*nb));

		if (!nb)
			return -ENOMEM;
		r->b = nb;
		r->cap = cap;
	}
	r->b[r->n++] = *b;
	return 0;
}

static int by_area_desc(const void *x, const void *y)
{
	const struct stalloc_plan_buffer *a = x, *b = y;
	double aa = (double)(a->upper - a->lower) * (double)a->size;
	double ab = (double)(b->upper - b->lower) * (double)b->size;

	return aa < ab ? 1 : aa > ab ? -1 : 0;
}

static int plan_panel(FILE *f, const struct stalloc_plan *p, int y0)
{
	struct stalloc_plan_summary s;
	struct rect_ctx r = { 0 };
	uint64_t horizon = 0;
	size_t i, shown;
	char buf[32];

	stalloc_plan_summary(p, &s);
	if (stalloc_plan_for_each_buffer(p, take_buf, &r)) {
		free(r.b);
		return -ENOMEM;
	}
	for (i = 0; i < r.n; i++)
		horizon = r.b[i].upper > horizon ? r.b[i].upper : horizon;
	shown = r.n;
	if (shown > MAX_RECTS) {
		qsort(r.b, r.n, sizeof(*r.b), by_area_desc);
		shown = MAX_RECTS;
	}
	human(s.peak, buf, sizeof(buf));
	fprintf(f,
		"<text x=\"%d\" y=\"%d\" font-weight=\"bold\">plan: %zu "
		"buffers in a pool of %s, one iteration%s</text>\n",
		LEFT, y0 - 10, r.n, buf, shown < r.n ? " (largest shown)" : "");
	axes(f, y0, s.peak, 0, horizon, "SEQ within the planned iteration",
	     "address");
	fprintf(f, "<g class=\"plan\" stroke=\"#2d5f2e\" stroke-width=\"0.3\" "
		   "fill=\"#9fd3a2\">\n");
	for (i = 0; i < shown; i++) {
		const struct stalloc_plan_buffer *b = &r.b[i];
		double x = LEFT + (double)b->lower * (W - LEFT - RIGHT) /
					  (double)(horizon ? horizon : 1);
		double w = (double)(b->upper - b->lower) * (W - LEFT - RIGHT) /
			   (double)(horizon ? horizon : 1);

		fprintf(f,
			"<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
			"height=\"%.1f\"/>\n",
			x, px_y(s.peak, b->offset + b->size, y0),
			w > 0.3 ? w : 0.3,
			(double)b->size * PANEL_H /
				(double)(s.peak ? s.peak : 1));
	}
	fprintf(f, "</g>\n");
	if (shown < r.n)
		fprintf(f,
			"<text x=\"%d\" y=\"%d\">%zu smaller buffers not "
			"drawn</text>\n",
			LEFT, y0 + PANEL_H + 50, r.n - shown);
	free(r.b);
	return 0;
}

static int draw(FILE *f, const char *name, const struct stalloc_trace *t,
		const struct stalloc_plan *p)
{
	struct timeline *tl = calloc(1, sizeof(*tl));
	struct stalloc_plan_summary s = { 0 };
	uint64_t ytop;
	size_t i;
	int h = TOP + PANEL_H + GAP + (p ? PANEL_H + GAP : 0), err;
	char buf[32];

	if (!tl)
		return -ENOMEM;
	err = collect(t, tl);
	if (err)
		goto out;
	if (p)
		stalloc_plan_summary(p, &s);
	ytop = tl->peak > s.peak ? tl->peak : s.peak;
	ytop += ytop / 10 + 1;
	fprintf(f,
		"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
		"<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" "
		"height=\"%d\" viewBox=\"0 0 %d %d\" "
		"font-family=\"sans-serif\" font-size=\"11\">\n"
		"<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
		W, h, W, h);
	human(tl->peak, buf, sizeof(buf));
	fprintf(f, "<text x=\"%d\" y=\"14\" font-weight=\"bold\">", LEFT);
	for (i = 0; name[i]; i++)
		fprintf(f, strchr("<>&\"", name[i]) ? "_" : "%c", name[i]);
	fprintf(f, ": bytes live, peak %s</text>\n", buf);
	legend(f);
	fprintf(f, "<g class=\"timeline\">\n");
	axes(f, TOP, ytop, tl->seq0, tl->seq1, "logical time (SEQ)",
	     "bytes live");
	stacks(f, tl, ytop);
	fprintf(f, "<g class=\"iterations\" stroke=\"#888\" "
		   "stroke-dasharray=\"2 2\">\n");
	for (i = 0; i < tl->nr_marks; i++)
		fprintf(f,
			"<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\"/>\n",
			px_x(tl, tl->mark_seq[i]), px_x(tl, tl->mark_seq[i]),
			TOP, TOP + PANEL_H);
	fprintf(f, "</g>\n");
	hline(f, TOP, ytop, tl->peak, "#b03030", "lower-bound",
	      "most live at once:");
	if (p)
		hline(f, TOP, ytop, s.peak, "#2050a0", "planned-peak",
		      "planned pool:");
	fprintf(f, "</g>\n");
	if (p)
		err = plan_panel(f, p, TOP + PANEL_H + GAP);
	fprintf(f, "</svg>\n");
out:
	free(tl->mark_seq);
	free(tl);
	return err;
}

static char *default_out(const char *trace)
{
	const char *base = strrchr(trace, '/');
	size_t n;
	char *out;

	base = base ? base + 1 : trace;
	n = strlen(base);
	if (n > 6 && !strcmp(base + n - 6, ".trace"))
		n -= 6;
	out = malloc(n + 5);
	if (out)
		snprintf(out, n + 5, "%.*s.svg", (int)n, base);
	return out;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "output", required_argument, NULL, 'o' },
		{ "plan", required_argument, NULL, 'p' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *plan_path = NULL, *out_arg = NULL;
	struct stalloc_plan *p = NULL;
	struct stalloc_trace *t;
	char *out = NULL;
	int ch, err;
	FILE *f;

	while ((ch = getopt_long(argc, argv, "o:p:h", lo, NULL)) != -1) {
		if (ch == 'o') {
			out_arg = optarg;
		} else if (ch == 'p') {
			plan_path = optarg;
		} else if (ch == 'h') {
			fputs(usage, stdout);
			return 0;
		} else {
			fputs(usage, stderr);
			return 2;
		}
	}
	if (optind != argc - 1) {
		fprintf(stderr, "stalloc-timeline: one TRACE wanted\n%s",
			usage);
		return 2;
	}
	if (stalloc_trace_load(argv[optind], &t)) {
		fprintf(stderr, "stalloc-timeline: %s\n", stalloc_last_error());
		free(out);
		return 1;
	}
	if (plan_path && stalloc_plan_read(plan_path, &p)) {
		fprintf(stderr, "stalloc-timeline: %s\n", stalloc_last_error());
		stalloc_trace_free(t);
		free(out);
		return 1;
	}
	out = out_arg ? strdup(out_arg) : default_out(argv[optind]);
	f = out ? fopen(out, "w") : NULL;
	if (!f) {
		fprintf(stderr, "stalloc-timeline: %s: %s\n", out ? out : "?",
			strerror(errno));
		err = -EIO;
	} else {
		err = draw(f, argv[optind], t, p);
		if (fclose(f) || err) {
			fprintf(stderr, "stalloc-timeline: %s: write failed\n",
				out);
			err = -EIO;
		}
	}
	stalloc_plan_free(p);
	stalloc_trace_free(t);
	free(out);
	return err ? 1 : 0;
}
