/* bench_timeseries.c — see bench_timeseries.h. */
#include <stdlib.h>
#include <string.h>

#include "bench_timeseries.h"

static const char *const names[BENCH_OP_COUNT + 1] = { "get", "put", "delete", "rmw", "total" };

const char *bench_op_name(unsigned op)
{
    return op <= BENCH_OP_COUNT ? names[op] : "?";
}

void bench_tick_init(struct bench_tick *t)
{
    memset(t, 0, sizeof *t);
    for (unsigned i = 0; i < BENCH_OP_COUNT; i++)
        hist_init(&t->lat[i]);
}

void bench_tick_merge(struct bench_tick *dst, const struct bench_tick *src)
{
    for (unsigned i = 0; i < BENCH_OP_COUNT; i++) {
        hist_merge(&dst->lat[i], &src->lat[i]);
        dst->errors[i] += src->errors[i];
    }
    dst->get_hits += src->get_hits;
    dst->get_misses += src->get_misses;
    if (src->end_s > dst->end_s)
        dst->end_s = src->end_s;
    if (src->length_s > dst->length_s)
        dst->length_s = src->length_s;
}

static void fill(struct bench_row_op *o, const struct histogram *h, uint64_t errors)
{
    o->ops = h->count;
    o->errors = errors;
    o->p50_ns = hist_percentile(h, 50);
    o->p99_ns = hist_percentile(h, 99);
}

int bench_series_add(struct bench_series *s, const struct bench_tick *t, struct histogram *scratch)
{
    if (s->count == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        struct bench_row *rows = realloc(s->rows, cap * sizeof *rows);
        if (rows == NULL)
            return -1;
        s->rows = rows;
        s->cap = cap;
    }
    struct bench_row *r = &s->rows[s->count++];
    memset(r, 0, sizeof *r);
    r->end_s = t->end_s;
    r->length_s = t->length_s;
    r->get_hits = t->get_hits;
    r->get_misses = t->get_misses;
    uint64_t errors = 0;
    hist_init(scratch);
    for (unsigned i = 0; i < BENCH_OP_COUNT; i++) {
        fill(&r->op[i], &t->lat[i], t->errors[i]);
        hist_merge(scratch, &t->lat[i]);
        errors += t->errors[i];
    }
    fill(&r->op[BENCH_OP_COUNT], scratch, errors);
    return 0;
}

void bench_series_free(struct bench_series *s)
{
    free(s->rows);
    memset(s, 0, sizeof *s);
}

double bench_row_rate(const struct bench_row *r, unsigned op)
{
    return r->length_s > 0 ? (double)r->op[op].ops / r->length_s : 0.0;
}

int bench_series_write_csv(FILE *out, const struct bench_series *s)
{
    fputs("time_s,interval_s", out);
    for (unsigned op = 0; op <= BENCH_OP_COUNT; op++)
        fprintf(out, ",%s_ops_per_s,%s_p50_us,%s_p99_us,%s_errors", names[op], names[op], names[op],
                names[op]);
    fputs(",get_hit_rate\n", out);
    for (size_t i = 0; i < s->count; i++) {
        const struct bench_row *r = &s->rows[i];
        fprintf(out, "%.3f,%.3f", r->end_s, r->length_s);
        for (unsigned op = 0; op <= BENCH_OP_COUNT; op++) {
            const struct bench_row_op *o = &r->op[op];
            fprintf(out, ",%.1f,", bench_row_rate(r, op));
            if (o->ops > 0)
                fprintf(out, "%.3f,%.3f", (double)o->p50_ns / 1000, (double)o->p99_ns / 1000);
            else
                fputc(',', out);
            fprintf(out, ",%llu", (unsigned long long)o->errors);
        }
        double hr = bench_hit_rate(r->get_hits, r->get_misses);
        if (hr >= 0)
            fprintf(out, ",%.4f\n", hr);
        else
            fputs(",\n", out);
    }
    return fflush(out) != 0 || ferror(out) ? -1 : 0;
}
