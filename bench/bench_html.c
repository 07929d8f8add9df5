/* bench_html.c — see bench_html.h. */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bench_html.h"
#include "hdr_text.h"
#include "histogram.h"
#include "json.h"

#define W                760.0 /* chart size in SVG units */
#define H                380.0
#define ML               70.0 /* margins: left, right, top, bottom */
#define MR               20.0
#define MT               20.0
#define MB               50.0
#define MAX_REPORT_BYTES (64u << 20)
#define MARKERS_MAX      60 /* series up to this many seconds get a dot per second */

static const char *const kinds[] = { "get", "put", "delete", "rmw" };
#define KINDS (sizeof kinds / sizeof kinds[0])
static const char *const colors[] = { "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                      "#9467bd", "#8c564b", "#e377c2", "#17becf" };
static const char *const dashes[] = { "", "6 3", "2 3", "10 3 2 3" }; /* one per kind */

struct axis {
    double lo, hi; /* data range (log10 of it when log) */
    bool log;
    double p0, p1; /* pixels */
};

static double axis_map(const struct axis *a, double v)
{
    if (a->log)
        v = log10(v > 0 ? v : 1e-9);
    double f = a->hi > a->lo ? (v - a->lo) / (a->hi - a->lo) : 0.5;
    if (f < 0)
        f = 0;
    if (f > 1)
        f = 1;
    return a->p0 + f * (a->p1 - a->p0);
}

/* HTML text: escapes & < > " '. */
static void esc(FILE *o, const char *s)
{
    for (; s != NULL && *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", o); break;
        case '<': fputs("&lt;", o); break;
        case '>': fputs("&gt;", o); break;
        case '"': fputs("&quot;", o); break;
        case '\'': fputs("&#39;", o); break;
        default: fputc(*s, o); break;
        }
    }
}

/* A latency in microseconds, short: 0.42 us, 31.5 us, 1.20 ms, 2.0 s. */
static void fmt_us(char *b, size_t n, double v)
{
    if (!isfinite(v))
        snprintf(b, n, "-");
    else if (v < 10)
        snprintf(b, n, "%.2f us", v);
    else if (v < 1000)
        snprintf(b, n, "%.1f us", v);
    else if (v < 1e6)
        snprintf(b, n, "%.2f ms", v / 1e3);
    else
        snprintf(b, n, "%.2f s", v / 1e6);
}

/* ---- data out of a report ---- */

/* The exact histogram of one kind; false when the report has none. */
static bool report_hist(const struct json_value *rep, const char *kind, struct histogram *h)
{
    const struct json_value *d = json_member(json_member(rep, kind), "distribution");
    hist_init(h);
    if (d == NULL || d->type != JSON_ARRAY)
        return false;
    for (size_t i = 0; i < d->count; i++) {
        const struct json_value *p = &d->items[i];
        if (p->type != JSON_ARRAY || p->count != 2 || p->items[0].type != JSON_NUMBER ||
            p->items[1].type != JSON_NUMBER || p->items[0].number < 0 || p->items[1].number < 0)
            continue;
        hist_record_n(h, (uint64_t)p->items[0].number, (uint64_t)p->items[1].number);
    }
    return h->count > 0;
}

static const struct json_value *series_of(const struct json_value *rep)
{
    const struct json_value *s = json_member(rep, "timeseries");
    return s != NULL && s->type == JSON_ARRAY ? s : NULL;
}

/* ---- chart frame ---- */

static void svg_begin(FILE *o, const char *id, const char *title)
{
    fprintf(o,
            "<figure>\n<svg id=\"%s\" class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" "
            "viewBox=\"0 0 %.0f %.0f\" width=\"%.0f\" height=\"%.0f\" role=\"img\" aria-label=\"",
            id, W, H, W, H);
    esc(o, title);
    fprintf(o, "\">\n<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" class=\"plot\"/>\n",
            ML, MT, W - ML - MR, H - MT - MB);
}

static void svg_end(FILE *o, const char *caption)
{
    fputs("</svg>\n<figcaption>", o);
    esc(o, caption);
    fputs("</figcaption>\n</figure>\n", o);
}

static void grid_x(FILE *o, double x, const char *label)
{
    fprintf(o,
            "<line class=\"grid\" x1=\"%.1f\" y1=\"%.0f\" x2=\"%.1f\" y2=\"%.0f\"/>"
            "<text class=\"tick\" x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\">",
            x, MT, x, H - MB, x, H - MB + 16);
    esc(o, label);
    fputs("</text>\n", o);
}

static void grid_y(FILE *o, double y, const char *label)
{
    fprintf(o,
            "<line class=\"grid\" x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\"/>"
            "<text class=\"tick\" x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">",
            ML, y, W - MR, y, ML - 6, y + 4);
    esc(o, label);
    fputs("</text>\n", o);
}

static void axis_titles(FILE *o, const char *x, const char *y)
{
    fprintf(o, "<text class=\"axis\" x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">",
            (ML + W - MR) / 2, H - 12);
    esc(o, x);
    fprintf(o,
            "</text>\n<text class=\"axis\" transform=\"translate(16 %.0f) rotate(-90)\" "
            "text-anchor=\"middle\">",
            (MT + H - MB) / 2);
    esc(o, y);
    fputs("</text>\n", o);
}

/* Decade grid lines of a log latency axis (us). */
static void log_grid_y(FILE *o, const struct axis *a)
{
    for (double d = floor(a->lo); d <= a->hi + 1e-9; d++) {
        char b[32];
        fmt_us(b, sizeof b, pow(10, d));
        grid_y(o, axis_map(a, pow(10, d)), b);
    }
}

/* A latency axis (log, us) covering [lo, hi] in whole decades. */
static struct axis latency_axis(double lo, double hi)
{
    if (!(lo > 0))
        lo = 0.1;
    if (!(hi > lo))
        hi = lo * 10;
    struct axis a = { floor(log10(lo)), ceil(log10(hi)), true, H - MB, MT };
    if (a.hi <= a.lo)
        a.hi = a.lo + 1;
    return a;
}

struct series_style {
    unsigned run, kind;
};

static void polyline_begin(FILE *o, struct series_style st)
{
    fprintf(o, "<polyline class=\"series\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\"",
            colors[st.run % (sizeof colors / sizeof colors[0])]);
    if (dashes[st.kind % KINDS][0])
        fprintf(o, " stroke-dasharray=\"%s\"", dashes[st.kind % KINDS]);
    fputs(" points=\"", o);
}

static void polyline_end(FILE *o, const char *label)
{
    fputs("\"><title>", o);
    esc(o, label);
    fputs("</title></polyline>\n", o);
}

/* Legend entries below the plot area's top-left, one per line. */
static void legend(FILE *o, unsigned index, struct series_style st, const char *label)
{
    double x = ML + 10, y = MT + 16 + 16.0 * index;
    fprintf(o,
            "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"%s\" stroke-width=\"2\"",
            x, y - 4, x + 24, y - 4, colors[st.run % (sizeof colors / sizeof colors[0])]);
    if (dashes[st.kind % KINDS][0])
        fprintf(o, " stroke-dasharray=\"%s\"", dashes[st.kind % KINDS]);
    fprintf(o, "/><text class=\"legend\" x=\"%.0f\" y=\"%.0f\">", x + 30, y);
    esc(o, label);
    fputs("</text>\n", o);
}

/* ---- the charts ---- */

static void chart_percentiles(FILE *o, const struct json_value *const *reps,
                              const char *const *labels, size_t n, struct histogram *h)
{
    double lo = INFINITY, hi = 0, max_count = 10;
    for (size_t r = 0; r < n; r++)
        for (unsigned k = 0; k < KINDS; k++)
            if (report_hist(reps[r], kinds[k], h)) {
                uint64_t a, b;
                hist_bucket_range(hist_bucket_of(h->min), &a, &b);
                lo = fmin(lo, (double)b / 1000);
                hist_bucket_range(hist_bucket_of(h->max), &a, &b);
                hi = fmax(hi, (double)b / 1000);
                max_count = fmax(max_count, (double)h->count);
            }
    /* x: log10(1/(1-p)) up to the decade past the sample count (1/(1-p) = N
     * is the last distinct percentile N samples have). */
    struct axis x = { 0, ceil(log10(max_count)), false, ML, W - MR };
    struct axis y = latency_axis(lo, hi);
    svg_begin(o, "latency-by-percentile", "Latency by percentile");
    for (double d = 0; d <= x.hi; d++) {
        char b[32];
        if (d == 0)
            snprintf(b, sizeof b, "0%%");
        else
            snprintf(b, sizeof b, "%.*f%%", d > 2 ? (int)d - 2 : 0, 100 - 100 / pow(10, d));
        grid_x(o, axis_map(&x, d), b);
    }
    log_grid_y(o, &y);
    unsigned shown = 0;
    for (size_t r = 0; r < n; r++) {
        for (unsigned k = 0; k < KINDS; k++) {
            if (!report_hist(reps[r], kinds[k], h))
                continue;
            char label[160];
            snprintf(label, sizeof label, "%s %s", labels[r], kinds[k]);
            struct series_style st = { (unsigned)r, k };
            struct hdr_iter it;
            polyline_begin(o, st);
            hdr_iter_init(&it, h, HDR_TEXT_TICKS);
            while (hdr_iter_next(&it)) {
                double inv = it.percentile >= 100 ? pow(10, x.hi) : 100.0 / (100.0 - it.percentile);
                fprintf(o, "%.1f,%.1f ", axis_map(&x, log10(inv)),
                        axis_map(&y, (double)it.value / 1000));
            }
            polyline_end(o, label);
            legend(o, shown++, st, label);
        }
    }
    axis_titles(o, "percentile (log scale of 1/(1-p))", "latency");
    svg_end(o, "Latency by percentile: each line is one operation kind of one run, from its full "
               "distribution; the right end is the maximum.");
}

/* The value of a series row: total ops/s, or one kind's p99. */
static double row_value(const struct json_value *row, const char *kind, const char *field)
{
    return json_number_of(json_member(row, kind), field, NAN);
}

static void chart_over_time(FILE *o, const struct json_value *const *reps,
                            const char *const *labels, size_t n, bool p99)
{
    double tmax = 1, lo = INFINITY, hi = 0;
    for (size_t r = 0; r < n; r++) {
        const struct json_value *s = series_of(reps[r]);
        for (size_t i = 0; s != NULL && i < s->count; i++) {
            tmax = fmax(tmax, json_number_of(&s->items[i], "t_s", 0));
            for (unsigned k = 0; k <= KINDS; k++) {
                double v = row_value(&s->items[i], k < KINDS ? kinds[k] : "total",
                                     p99 ? "p99_us" : "ops_per_sec");
                if (isfinite(v) && (k < KINDS) == p99) {
                    lo = fmin(lo, v);
                    hi = fmax(hi, v);
                }
            }
        }
    }
    struct axis x = { 0, tmax, false, ML, W - MR };
    struct axis y = p99 ? latency_axis(lo, hi)
                        : (struct axis){ 0, hi > 0 ? hi * 1.1 : 1, false, H - MB, MT };
    svg_begin(o, p99 ? "p99-over-time" : "throughput-over-time",
              p99 ? "p99 latency over time" : "Throughput over time");
    double step = pow(10, floor(log10(tmax)));
    if (tmax / step < 4)
        step /= 2;
    for (double t = 0; t <= tmax + 1e-9; t += step) {
        char b[32];
        snprintf(b, sizeof b, "%g s", t);
        grid_x(o, axis_map(&x, t), b);
    }
    if (p99) {
        log_grid_y(o, &y);
    } else {
        double ystep = pow(10, floor(log10(y.hi)));
        if (y.hi / ystep < 4)
            ystep /= 2;
        for (double v = 0; v <= y.hi; v += ystep) {
            char b[32];
            if (v >= 1e6)
                snprintf(b, sizeof b, "%gM", v / 1e6);
            else if (v >= 1e3)
                snprintf(b, sizeof b, "%gk", v / 1e3);
            else
                snprintf(b, sizeof b, "%g", v);
            grid_y(o, axis_map(&y, v), b);
        }
    }
    unsigned shown = 0;
    for (size_t r = 0; r < n; r++) {
        const struct json_value *s = series_of(reps[r]);
        if (s == NULL || s->count == 0)
            continue;
        for (unsigned k = 0; k <= KINDS; k++) {
            if ((k < KINDS) != p99)
                continue;
            const char *kind = k < KINDS ? kinds[k] : "total";
            bool any = false;
            for (size_t i = 0; i < s->count && !any; i++)
                any = isfinite(row_value(&s->items[i], kind, p99 ? "p99_us" : "ops_per_sec"));
            if (!any)
                continue;
            char label[160];
            snprintf(label, sizeof label, "%s %s", labels[r], p99 ? kind : "all operations");
            struct series_style st = { (unsigned)r, k < KINDS ? k : 0 };
            polyline_begin(o, st);
            for (size_t i = 0; i < s->count; i++) {
                double v = row_value(&s->items[i], kind, p99 ? "p99_us" : "ops_per_sec");
                if (isfinite(v))
                    fprintf(o, "%.1f,%.1f ", axis_map(&x, json_number_of(&s->items[i], "t_s", 0)),
                            axis_map(&y, v));
            }
            polyline_end(o, label);
            /* Markers on short series: one or two seconds draw no visible line. */
            for (size_t i = 0; s->count <= MARKERS_MAX && i < s->count; i++) {
                double v = row_value(&s->items[i], kind, p99 ? "p99_us" : "ops_per_sec");
                if (isfinite(v))
                    fprintf(o, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n",
                            axis_map(&x, json_number_of(&s->items[i], "t_s", 0)), axis_map(&y, v),
                            colors[st.run % (sizeof colors / sizeof colors[0])]);
            }
            legend(o, shown++, st, label);
        }
    }
    axis_titles(o, "seconds into the measurement",
                p99 ? "p99 latency in each second" : "operations per second");
    svg_end(o, p99 ? "p99 of each second, per operation kind and run."
                   : "Operations completed in each second, all kinds together, per run.");
}

/* The GETs' hit rate of each interval (--fill-on-miss, --trace), per run,
 * on a 0..100% axis. */
static void chart_hit_rate(FILE *o, const struct json_value *const *reps, const char *const *labels,
                           size_t n)
{
    double tmax = 1;
    for (size_t r = 0; r < n; r++) {
        const struct json_value *s = series_of(reps[r]);
        for (size_t i = 0; s != NULL && i < s->count; i++)
            tmax = fmax(tmax, json_number_of(&s->items[i], "t_s", 0));
    }
    struct axis x = { 0, tmax, false, ML, W - MR };
    struct axis y = { 0, 100, false, H - MB, MT };
    svg_begin(o, "hit-rate-over-time", "Hit rate over time");
    double step = pow(10, floor(log10(tmax)));
    if (tmax / step < 4)
        step /= 2;
    for (double t = 0; t <= tmax + 1e-9; t += step) {
        char b[32];
        snprintf(b, sizeof b, "%g s", t);
        grid_x(o, axis_map(&x, t), b);
    }
    for (int v = 0; v <= 100; v += 20) {
        char b[16];
        snprintf(b, sizeof b, "%d%%", v);
        grid_y(o, axis_map(&y, v), b);
    }
    unsigned shown = 0;
    for (size_t r = 0; r < n; r++) {
        const struct json_value *s = series_of(reps[r]);
        size_t points = 0;
        for (size_t i = 0; s != NULL && i < s->count; i++)
            points += isfinite(json_number_of(&s->items[i], "hit_rate", NAN));
        if (points == 0)
            continue;
        struct series_style st = { (unsigned)r, 0 };
        polyline_begin(o, st);
        for (size_t i = 0; i < s->count; i++) {
            double v = json_number_of(&s->items[i], "hit_rate", NAN);
            if (isfinite(v))
                fprintf(o, "%.1f,%.1f ", axis_map(&x, json_number_of(&s->items[i], "t_s", 0)),
                        axis_map(&y, v * 100));
        }
        polyline_end(o, labels[r]);
        for (size_t i = 0; points <= MARKERS_MAX && i < s->count; i++) {
            double v = json_number_of(&s->items[i], "hit_rate", NAN);
            if (isfinite(v))
                fprintf(o, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n",
                        axis_map(&x, json_number_of(&s->items[i], "t_s", 0)), axis_map(&y, v * 100),
                        colors[st.run % (sizeof colors / sizeof colors[0])]);
        }
        legend(o, shown++, st, labels[r]);
    }
    axis_titles(o, "seconds into the measurement", "GET hit rate in each second");
    svg_end(o, "Share of the GETs of each second that found their key, per run (a cache "
               "workload: --fill-on-miss or --trace).");
}

/* ---- tables ---- */

/* A table cell: numbers with `decimals` places (-1: %g), strings, booleans, "-". */
static void cell_num(FILE *o, const struct json_value *v, int decimals)
{
    fputs("<td>", o);
    if (v != NULL && v->type == JSON_NUMBER && decimals < 0)
        fprintf(o, "%g", v->number);
    else if (v != NULL && v->type == JSON_NUMBER)
        fprintf(o, "%.*f", decimals, v->number);
    else if (v != NULL && v->type == JSON_STRING)
        esc(o, v->string);
    else if (v != NULL && v->type == JSON_BOOL)
        fputs(v->boolean ? "yes" : "no", o);
    else
        fputc('-', o);
    fputs("</td>", o);
}

static void summary_table(FILE *o, const struct json_value *const *reps, const char *const *labels,
                          size_t n)
{
    fputs("<h2>Summary</h2>\n<table id=\"summary\"><tr><th>run</th><th>kind</th><th>ops/s</th>"
          "<th>ops</th><th>p50</th><th>p90</th><th>p99</th><th>p99.9</th><th>max</th><th>errors</th></tr>\n",
          o);
    for (size_t r = 0; r < n; r++) {
        for (unsigned k = 0; k <= KINDS; k++) {
            const char *kind = k < KINDS ? kinds[k] : "total";
            const struct json_value *op = json_member(reps[r], kind);
            if (op == NULL || json_number_of(op, "ops", 0) == 0)
                continue;
            fputs("<tr><td>", o);
            esc(o, labels[r]);
            fprintf(o, "</td><td>%s</td>", kind);
            cell_num(o, json_member(op, "ops_per_sec"), 0);
            cell_num(o, json_member(op, "ops"), 0);
            static const char *const pct[] = { "p50_us", "p90_us", "p99_us", "p999_us", "max_us" };
            for (size_t i = 0; i < sizeof pct / sizeof pct[0]; i++) {
                char b[32];
                fmt_us(b, sizeof b, json_number_of(op, pct[i], NAN));
                fprintf(o, "<td>%s</td>", b);
            }
            cell_num(o, json_member(op, "errors"), 0);
            fputs("</tr>\n", o);
        }
    }
    fputs("</table>\n", o);
    for (size_t r = 0; r < n; r++) {
        const struct json_value *ol = json_member(reps[r], "open_loop");
        if (ol == NULL || ol->type != JSON_OBJECT)
            continue;
        const struct json_value *ok = json_member(ol, "rate_reached");
        bool reached = ok != NULL && ok->type == JSON_BOOL && ok->boolean;
        fprintf(o, "<p class=\"%s\">", reached ? "ok" : "warn");
        esc(o, labels[r]);
        fprintf(o,
                ": open loop, target %.0f ops/s (%s), achieved %.1f ops/s%s; sends up to %.3f ms "
                "late, %.0f due operations never sent. Latency is counted from each operation's "
                "intended send time.</p>\n",
                json_number_of(ol, "target_ops_per_sec", NAN),
                json_string_of(ol, "arrival") ? json_string_of(ol, "arrival") : "?",
                json_number_of(ol, "achieved_ops_per_sec", NAN),
                reached ? "" : " &mdash; TARGET RATE NOT REACHED",
                json_number_of(ol, "max_send_lag_us", NAN) / 1000, json_number_of(ol, "missed", NAN));
    }
}

struct field {
    const char *key, *label;
    int decimals; /* for numbers; -1: %g */
};

static void fields_table(FILE *o, const char *id, const char *title, const struct field *f, size_t nf,
                         const struct json_value *const *reps, const char *const *labels, size_t n)
{
    fprintf(o, "<h2>%s</h2>\n<table id=\"%s\"><tr><th></th>", title, id);
    for (size_t r = 0; r < n; r++) {
        fputs("<th>", o);
        esc(o, labels[r]);
        fputs("</th>", o);
    }
    fputs("</tr>\n", o);
    for (size_t i = 0; i < nf; i++) {
        fprintf(o, "<tr><th>%s</th>", f[i].label);
        for (size_t r = 0; r < n; r++) {
            const struct json_value *v = json_member(reps[r], f[i].key);
            if (v != NULL && v->type == JSON_ARRAY) {
                fputs("<td>", o);
                for (size_t k = 0; k < v->count; k++) {
                    if (k)
                        fputs(", ", o);
                    if (v->items[k].type == JSON_STRING)
                        esc(o, v->items[k].string);
                }
                fputs("</td>", o);
            } else {
                cell_num(o, v, f[i].decimals);
            }
        }
        fputs("</tr>\n", o);
    }
    fputs("</table>\n", o);
}

/* Whether a report ran a cache workload (--fill-on-miss or --trace). */
static bool has_cache(const struct json_value *rep)
{
    const struct json_value *c = json_member(rep, "cache");
    const struct json_value *fill = c != NULL ? json_member(c, "fill_on_miss") : NULL;
    const struct json_value *t = c != NULL ? json_member(c, "trace") : NULL;
    return (fill != NULL && fill->type == JSON_BOOL && fill->boolean) ||
           (t != NULL && t->type == JSON_OBJECT);
}

static void cache_table(FILE *o, const struct json_value *const *reps, const char *const *labels,
                        size_t n)
{
    fputs("<table id=\"cache\"><tr><th>run</th><th>hit rate</th><th>fill on miss</th>"
          "<th>fills</th><th>trace</th><th>lines replayed</th><th>skipped (too large)</th></tr>\n",
          o);
    for (size_t r = 0; r < n; r++) {
        const struct json_value *c = json_member(reps[r], "cache");
        if (!has_cache(reps[r]))
            continue;
        const struct json_value *t = json_member(c, "trace");
        bool tr = t != NULL && t->type == JSON_OBJECT;
        double hr = json_number_of(c, "hit_rate", NAN);
        fputs("<tr><td>", o);
        esc(o, labels[r]);
        if (isfinite(hr))
            fprintf(o, "</td><td>%.2f%%</td>", hr * 100);
        else
            fputs("</td><td>-</td>", o);
        cell_num(o, json_member(c, "fill_on_miss"), 0);
        cell_num(o, json_member(c, "fills"), 0);
        cell_num(o, tr ? json_member(t, "file") : NULL, 0);
        cell_num(o, tr ? json_member(t, "replayed") : NULL, 0);
        cell_num(o, tr ? json_member(t, "skipped") : NULL, 0);
        fputs("</tr>\n", o);
    }
    fputs("</table>\n", o);
}

static const struct field params[] = {
    { "tool", "tool", -1 },
    { "version", "version", -1 },
    { "servers", "servers", -1 },
    { "loop", "loop", -1 },
    { "processes", "processes", 0 },
    { "threads", "threads", 0 },
    { "window", "window", 0 },
    { "duration_s", "measured (s)", 3 },
    { "keys", "keys", 0 },
    { "key_size", "key bytes", 0 },
    { "value_size", "value bytes (min)", 0 },
    { "value_size_max", "value bytes (max)", 0 },
    { "dist", "key distribution", -1 },
    { "workload", "YCSB workload", -1 },
    { "preload", "preloaded", -1 },
    { "verify", "values verified", -1 },
    { "seed", "seed", 0 },
    { "ops_per_sec", "ops/s (all)", 0 },
    { "errors", "errors", 0 },
};

static const struct field transport[] = {
    { "reads_per_get", "READs / GET", 3 },
    { "round_trips_per_get", "round trips / GET", 3 },
    { "doorbells_per_request", "doorbells / request", 3 },
    { "inline_share", "sends inline (share)", 3 },
    { "cache_hits_per_get", "location-cache hits / GET", 3 },
    { "forwards_per_get", "forwards / GET", 3 },
    { "verify_retries", "verification retries", 0 },
    { "reconnects", "reconnects", 0 },
};

static const char style[] =
    "body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1100px}"
    "h1{font-size:22px}h2{font-size:17px;margin-top:28px}"
    "table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}"
    "th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}"
    ".note{background:#fff8e1;border-left:4px solid #f0b400;padding:6px 10px}"
    ".warn{color:#b00020;font-weight:bold}.ok{color:#1b5e20}"
    "figure{margin:12px 0}figcaption{color:#555;font-size:13px}"
    ".chart .plot{fill:#fff;stroke:#999}.chart .grid{stroke:#e3e3e3}"
    ".chart text{font:11px system-ui,sans-serif;fill:#333}.chart .axis{font-size:12px}"
    ".chart .legend{font-size:11px}";

int bench_html_write(FILE *o, const struct json_value *const *reps, const char *const *labels,
                     size_t n)
{
    struct histogram *h = malloc(sizeof *h);
    if (h == NULL)
        return -1;
    fprintf(o,
            "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            "<title>rkv-bench report</title>\n<style>%s</style>\n</head>\n<body>\n"
            "<h1>rkv-bench report</h1>\n<p>",
            style);
    for (size_t r = 0; r < n; r++) {
        fputs(r ? ", " : "Runs: ", o);
        esc(o, labels[r]);
    }
    fputs(".</p>\n", o);
    for (size_t r = 0; r < n; r++) {
        const char *note = json_string_of(reps[r], "note");
        if (note == NULL)
            continue;
        fputs("<p class=\"note\"><b>", o);
        esc(o, labels[r]);
        fputs(":</b> ", o);
        esc(o, note);
        fputs("</p>\n", o);
    }
    summary_table(o, reps, labels, n);
    fputs("<h2>Latency by percentile</h2>\n", o);
    chart_percentiles(o, reps, labels, n, h);
    fputs("<h2>Over time</h2>\n", o);
    chart_over_time(o, reps, labels, n, false);
    chart_over_time(o, reps, labels, n, true);
    bool cache = false;
    for (size_t r = 0; r < n; r++)
        cache |= has_cache(reps[r]);
    if (cache) {
        fputs("<h2>Cache</h2>\n", o);
        cache_table(o, reps, labels, n);
        chart_hit_rate(o, reps, labels, n);
    }
    fields_table(o, "parameters", "Parameters", params, sizeof params / sizeof params[0], reps,
                 labels, n);
    fields_table(o, "transport", "Transport counters", transport,
                 sizeof transport / sizeof transport[0], reps, labels, n);
    fputs("<p>How to read this page: docs/bench.md, section \"Reading the HTML report\".</p>\n"
          "</body>\n</html>\n",
          o);
    free(h);
    return fflush(o) != 0 || ferror(o) ? -1 : 0;
}

/* ---- --compare ---- */

static char *read_file(const char *path, size_t *len, FILE *err)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        fprintf(err, "rkv-bench: --compare: cannot read '%s': %s\n", path, strerror(errno));
        return NULL;
    }
    char *buf = malloc(MAX_REPORT_BYTES);
    size_t n = buf ? fread(buf, 1, MAX_REPORT_BYTES, f) : 0;
    bool too_big = buf != NULL && n == MAX_REPORT_BYTES;
    bool failed = ferror(f);
    fclose(f);
    if (buf == NULL || too_big || failed) {
        fprintf(err, "rkv-bench: --compare: '%s': %s\n", path,
                buf == NULL ? "out of memory"
                : too_big   ? "larger than 64 MiB; is it a report?"
                            : strerror(errno));
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

int bench_html_compare(const char *const *paths, size_t n, const char *html_path, FILE *err)
{
    struct json_value *reps[BENCH_HTML_MAX_RUNS] = { NULL };
    char names[BENCH_HTML_MAX_RUNS][128];
    const char *labels[BENCH_HTML_MAX_RUNS];
    int rc = -1;
    if (n > BENCH_HTML_MAX_RUNS)
        n = BENCH_HTML_MAX_RUNS;
    for (size_t i = 0; i < n; i++) {
        size_t len;
        char msg[256];
        char *text = read_file(paths[i], &len, err);
        if (text == NULL)
            goto out;
        reps[i] = json_parse(text, len, msg, sizeof msg);
        free(text);
        if (reps[i] == NULL || reps[i]->type != JSON_OBJECT) {
            fprintf(err, "rkv-bench: --compare: '%s' is not a JSON report: %s\n", paths[i],
                    reps[i] == NULL ? msg : "the top level is not an object");
            goto out;
        }
        const char *label = json_string_of(reps[i], "label");
        if (label == NULL) {
            const char *base = strrchr(paths[i], '/');
            base = base ? base + 1 : paths[i];
            size_t bl = strlen(base);
            if (bl > 5 && strcmp(base + bl - 5, ".json") == 0)
                bl -= 5;
            snprintf(names[i], sizeof names[i], "%.*s", (int)bl, base);
            label = names[i];
        }
        labels[i] = label;
    }
    FILE *o = fopen(html_path, "w");
    if (o == NULL) {
        fprintf(err, "rkv-bench: --html: cannot write '%s': %s\n", html_path, strerror(errno));
        goto out;
    }
    int w = bench_html_write(o, (const struct json_value *const *)reps, labels, n);
    if (fclose(o) != 0 || w != 0)
        fprintf(err, "rkv-bench: --html: writing '%s' failed: %s\n", html_path, strerror(errno));
    else
        rc = 0;
out:
    for (size_t i = 0; i < n; i++)
        json_value_free(reps[i]);
    return rc;
}
