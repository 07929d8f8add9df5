/* test_bench_report.c — rkv-bench's reports: the JSON writer's escaping and
 * nesting, and the --json report parsed back by a strict JSON parser (every
 * documented field present, numbers well-formed, values the ones put in),
 * plus the text report's content. */
#include <ctype.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "bench_args.h"
#include "bench_report.h"
#include "bench_timeseries.h"
#include "json.h"

/* ---- a strict RFC 8259 parser that flattens a document into
 * "path = raw value" entries ("get.p50_us", "servers[1]") ---- */

#define MAX_ENTRIES 512

struct flat {
    char path[MAX_ENTRIES][96];
    char value[MAX_ENTRIES][128]; /* raw text; strings decoded, without quotes */
    char kind[MAX_ENTRIES];       /* 'n'umber 's'tring 'b'ool 'z' null 'o'bject 'a'rray */
    int count;
};

struct parser {
    const char *s;
    size_t i, n;
    struct flat *f;
};

static void skip_ws(struct parser *p)
{
    while (p->i < p->n && strchr(" \t\r\n", p->s[p->i]))
        p->i++;
}

static bool add(struct parser *p, const char *path, char kind, const char *v, size_t len)
{
    if (p->f->count >= MAX_ENTRIES || len >= sizeof p->f->value[0])
        return false;
    int k = p->f->count++;
    snprintf(p->f->path[k], sizeof p->f->path[k], "%s", path);
    memcpy(p->f->value[k], v, len);
    p->f->value[k][len] = '\0';
    p->f->kind[k] = kind;
    return true;
}

static bool parse_value(struct parser *p, const char *path);

/* A string into out (decoded; \u escapes kept only for ASCII, else '?'). */
static bool parse_string(struct parser *p, char *out, size_t cap)
{
    size_t o = 0;
    if (p->i >= p->n || p->s[p->i] != '"')
        return false;
    p->i++;
    while (p->i < p->n) {
        unsigned char c = (unsigned char)p->s[p->i++];
        if (c == '"') {
            out[o] = '\0';
            return true;
        }
        if (c < 0x20)
            return false; /* raw control character */
        if (c == '\\') {
            if (p->i >= p->n)
                return false;
            char e = p->s[p->i++];
            switch (e) {
            case '"': c = '"'; break;
            case '\\': c = '\\'; break;
            case '/': c = '/'; break;
            case 'b': c = '\b'; break;
            case 'f': c = '\f'; break;
            case 'n': c = '\n'; break;
            case 'r': c = '\r'; break;
            case 't': c = '\t'; break;
            case 'u': {
                unsigned v = 0;
                for (int k = 0; k < 4; k++) {
                    if (p->i >= p->n || !isxdigit((unsigned char)p->s[p->i]))
                        return false;
                    char h = p->s[p->i++];
                    v = v * 16 +
                        (unsigned)(isdigit((unsigned char)h) ? h - '0' : tolower(h) - 'a' + 10);
                }
                c = v < 0x80 ? (unsigned char)v : '?';
                break;
            }
            default: return false;
            }
        }
        if (o + 1 >= cap)
            return false;
        out[o++] = (char)c;
    }
    return false;
}

static bool parse_number(struct parser *p, const char *path)
{
    size_t start = p->i;
    const char *s = p->s;
    if (p->i < p->n && s[p->i] == '-')
        p->i++;
    if (p->i >= p->n || !isdigit((unsigned char)s[p->i]))
        return false;
    if (s[p->i] == '0')
        p->i++;
    else
        while (p->i < p->n && isdigit((unsigned char)s[p->i]))
            p->i++;
    if (p->i < p->n && s[p->i] == '.') {
        p->i++;
        if (p->i >= p->n || !isdigit((unsigned char)s[p->i]))
            return false;
        while (p->i < p->n && isdigit((unsigned char)s[p->i]))
            p->i++;
    }
    if (p->i < p->n && (s[p->i] == 'e' || s[p->i] == 'E')) {
        p->i++;
        if (p->i < p->n && (s[p->i] == '+' || s[p->i] == '-'))
            p->i++;
        if (p->i >= p->n || !isdigit((unsigned char)s[p->i]))
            return false;
        while (p->i < p->n && isdigit((unsigned char)s[p->i]))
            p->i++;
    }
    return add(p, path, 'n', s + start, p->i - start);
}

static bool parse_value(struct parser *p, const char *path)
{
    char sub[96];
    skip_ws(p);
    if (p->i >= p->n)
        return false;
    char c = p->s[p->i];
    if (c == '{') {
        p->i++;
        if (!add(p, path, 'o', "", 0))
            return false;
        skip_ws(p);
        if (p->i < p->n && p->s[p->i] == '}') {
            p->i++;
            return true;
        }
        for (;;) {
            char key[64];
            skip_ws(p);
            if (!parse_string(p, key, sizeof key))
                return false;
            skip_ws(p);
            if (p->i >= p->n || p->s[p->i++] != ':')
                return false;
            snprintf(sub, sizeof sub, "%s%s%s", path, path[0] ? "." : "", key);
            if (!parse_value(p, sub))
                return false;
            skip_ws(p);
            if (p->i < p->n && p->s[p->i] == ',') {
                p->i++;
                continue;
            }
            if (p->i < p->n && p->s[p->i] == '}') {
                p->i++;
                return true;
            }
            return false;
        }
    }
    if (c == '[') {
        p->i++;
        if (!add(p, path, 'a', "", 0))
            return false;
        skip_ws(p);
        if (p->i < p->n && p->s[p->i] == ']') {
            p->i++;
            return true;
        }
        for (int k = 0;; k++) {
            snprintf(sub, sizeof sub, "%s[%d]", path, k);
            if (!parse_value(p, sub))
                return false;
            skip_ws(p);
            if (p->i < p->n && p->s[p->i] == ',') {
                p->i++;
                continue;
            }
            if (p->i < p->n && p->s[p->i] == ']') {
                p->i++;
                return true;
            }
            return false;
        }
    }
    if (c == '"') {
        char v[128];
        return parse_string(p, v, sizeof v) && add(p, path, 's', v, strlen(v));
    }
    if (strncmp(p->s + p->i, "true", 4) == 0 || strncmp(p->s + p->i, "null", 4) == 0) {
        bool t = p->s[p->i] == 't';
        p->i += 4;
        return add(p, path, t ? 'b' : 'z', t ? "true" : "null", 4);
    }
    if (strncmp(p->s + p->i, "false", 5) == 0) {
        p->i += 5;
        return add(p, path, 'b', "false", 5);
    }
    return parse_number(p, path);
}

static bool parse_json(const char *text, struct flat *f)
{
    struct parser p = { text, 0, strlen(text), f };
    f->count = 0;
    if (!parse_value(&p, ""))
        return false;
    skip_ws(&p);
    return p.i == p.n; /* nothing after the document */
}

static int find(const struct flat *f, const char *path)
{
    for (int k = 0; k < f->count; k++)
        if (strcmp(f->path[k], path) == 0)
            return k;
    return -1;
}

static double number_at(const struct flat *f, const char *path)
{
    int k = find(f, path);
    if (k < 0)
        fail_msg("field %s missing", path);
    if (f->kind[k] != 'n')
        fail_msg("field %s is '%c' = %s, not a number", path, f->kind[k], f->value[k]);
    return strtod(f->value[k], NULL);
}

/* ---- the tests ---- */

static char *capture(void (*fn)(FILE *, void *), void *arg)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    fn(f, arg);
    fclose(f);
    return buf;
}

static void write_escapes(FILE *f, void *arg)
{
    (void)arg;
    struct json_writer w;
    json_init(&w, f);
    json_object_begin(&w, NULL);
    json_string(&w, "quote", "a\"b\\c/d");
    json_string(&w, "ctrl", "tab\there\nnl\x01\x1f");
    json_string(&w, "utf8", "caf\xc3\xa9 \xe2\x82\xac");
    json_string(&w, "bad", "x\xff\xc3y\xed\xa0\x80z"); /* invalid byte, cut sequence, surrogate */
    json_string_n(&w, "nul", "a\0b", 3);
    json_string(&w, "we\"ird key", "v");
    json_double(&w, "inf", (double)INFINITY);
    json_double(&w, "nan", (double)NAN);
    json_double(&w, "small", 1e-7);
    json_double(&w, "neg", -2.5);
    json_u64(&w, "big", UINT64_MAX);
    json_bool(&w, "yes", true);
    json_array_begin(&w, "empty");
    json_array_end(&w);
    json_object_begin(&w, "nested");
    json_array_begin(&w, "list");
    json_u64(&w, NULL, 1);
    json_string(&w, NULL, "two");
    json_array_end(&w);
    json_object_end(&w);
    json_object_end(&w);
    assert_int_equal(json_finish(&w), 0);
}

static void json_writer_escapes(void **state)
{
    (void)state;
    char *text = capture(write_escapes, NULL);
    struct flat *f = calloc(1, sizeof *f);
    assert_non_null(f);
    if (!parse_json(text, f))
        fail_msg("not valid JSON:\n%s", text);
    assert_string_equal(f->value[find(f, "quote")], "a\"b\\c/d");
    assert_string_equal(f->value[find(f, "ctrl")], "tab\there\nnl\x01\x1f");
    assert_non_null(strstr(text, "\\u0001"));
    assert_non_null(strstr(text, "caf\xc3\xa9 \xe2\x82\xac")); /* valid UTF-8 passes through */
    assert_non_null(strstr(text, "x\\ufffd\\ufffdy\\ufffd\\ufffd\\ufffdz"));
    assert_non_null(strstr(text, "a\\u0000b"));
    assert_true(find(f, "we\"ird key") >= 0);
    assert_int_equal(f->kind[find(f, "inf")], 'z');
    assert_int_equal(f->kind[find(f, "nan")], 'z');
    assert_true(number_at(f, "small") == 1e-7);
    assert_true(number_at(f, "neg") == -2.5);
    assert_string_equal(f->value[find(f, "big")], "18446744073709551615");
    assert_string_equal(f->value[find(f, "yes")], "true");
    assert_int_equal(f->kind[find(f, "empty")], 'a');
    assert_true(number_at(f, "nested.list[0]") == 1);
    assert_string_equal(f->value[find(f, "nested.list[1]")], "two");
    free(f);
    free(text);
}

static void json_writer_detects_misuse(void **state)
{
    (void)state;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    struct json_writer w;
    json_init(&w, f);
    json_object_begin(&w, NULL);
    json_u64(&w, "a", 1);
    assert_int_equal(json_finish(&w), -1); /* object left open */
    json_init(&w, f);
    json_object_end(&w);
    assert_int_equal(json_finish(&w), -1); /* closed what was never opened */
    json_init(&w, f);
    json_u64(&w, "key", 1);
    assert_int_equal(json_finish(&w), -1); /* a key outside an object */
    fclose(f);
    free(buf);
}

/* Made-up results with known percentiles. */
static struct bench_results *sample_results(void)
{
    struct bench_results *r = malloc(sizeof *r);
    assert_non_null(r);
    bench_results_init(r);
    for (uint64_t v = 1; v <= 100; v++)
        hist_record_n(&r->lat[BENCH_OP_GET], v * 1000, 9); /* 1..100 us, 900 GETs */
    hist_record_n(&r->lat[BENCH_OP_PUT], 20000, 100);      /* 100 PUTs at 20 us */
    r->get_hits = 850;
    r->get_misses = 50;
    r->errors[RKV_TIMEOUT] = 2;
    r->duration_s = 2.0;
    r->counters = (struct rkv_counters){
        .gets = 900,
        .puts = 100,
        .reads = 1800,
        .read_round_trips = 900,
        .doorbells = 500,
        .sends = 100,
        .inline_sends = 75,
        .verify_retries = 3,
        .cache_hits = 450,
        .forwards = 90,
        .cache_stale = 9,
        .read_lanes = 2,
        .read_lanes_td = 1,
    };
    return r;
}

struct report_arg {
    const struct bench_config *cfg;
    const struct bench_results *r;
    int rc;
};

static void write_json_report(FILE *f, void *arg)
{
    struct report_arg *a = arg;
    a->rc = bench_report_json(f, a->cfg, a->r);
}

static void write_text_report(FILE *f, void *arg)
{
    struct report_arg *a = arg;
    bench_report_text(f, a->cfg, a->r);
}

static void parse_config(struct bench_config *cfg, char **argv, int argc)
{
    FILE *null = fopen("/dev/null", "w");
    assert_non_null(null);
    assert_int_equal(bench_parse_args(argc, argv, cfg, null, null), BENCH_ARGS_RUN);
    fclose(null);
}

static void json_report_fields(void **state)
{
    (void)state;
    char *argv[] = { "rkv-bench", "-s",         "shm:///tmp/a \"q\".sock",
                     "-s",        "rdma://h:1", "--threads",
                     "4",         "--window",   "8",
                     "--dist",    "zipf:0.9",   NULL };
    struct bench_config cfg;
    parse_config(&cfg, argv, 11);
    cfg.clock_name = "tsc 2300.0 MHz";
    struct bench_results *r = sample_results();
    struct report_arg a = { &cfg, r, -1 };
    char *text = capture(write_json_report, &a);
    assert_non_null(strstr(text, "\"clock\":"));
    assert_non_null(strstr(text, "\"tsc 2300.0 MHz\""));
    assert_int_equal(a.rc, 0);
    struct flat *f = calloc(1, sizeof *f);
    assert_non_null(f);
    if (!parse_json(text, f))
        fail_msg("report is not valid JSON:\n%s", text);

    /* every documented top-level and per-op field */
    static const char *const numbers[] = {
        "ops",
        "duration_s",
        "ops_per_sec",
        "threads",
        "window",
        "key_size",
        "value_size",
        "key_size_max",
        "value_size_max",
        "keys",
        "errors",
        "verify_failures",
        "reads_per_get",
        "round_trips_per_get",
        "doorbells_per_request",
        "inline_share",
        "verify_retries",
        "cache_hits",
        "cache_hits_per_get",
        "reconnects",
        "seed",
        "get.ops",
        "get.ops_per_sec",
        "get.p50_us",
        "get.p90_us",
        "get.p99_us",
        "get.p999_us",
        "get.max_us",
        "get.min_us",
        "get.mean_us",
        "get.hits",
        "get.misses",
        "put.ops",
        "put.ops_per_sec",
        "put.p50_us",
        "put.p99_us",
        "delete.ops",
        "delete.misses",
        "rmw.ops",
        "rmw.conflicts",
        "counters.reads",
        "counters.doorbells",
        "forwards",
        "forwards_per_get",
        "counters.forwards",
        "counters.cache_stale",
        "counters.read_lanes",
        "counters.read_lanes_td",
        "mix.get",
        "mix.put",
        "errors_by_status.timeout",
        "total.ops",
        "total.ops_per_sec",
        "total.p50_us",
        "total.p99_us",
        "total.p999_us",
    };
    for (size_t i = 0; i < sizeof numbers / sizeof numbers[0]; i++)
        (void)number_at(f, numbers[i]);

    assert_true(number_at(f, "ops") == 1000);
    assert_true(number_at(f, "ops_per_sec") == 500);
    assert_true(number_at(f, "duration_s") == 2);
    assert_true(number_at(f, "threads") == 4);
    assert_true(number_at(f, "window") == 8);
    /* Little's law: 9 x (1+...+100) us of GETs + 100 x 20 us of PUTs = 47.45 ms
     * in flight over 2 s and 4 threads */
    assert_true(fabs(number_at(f, "mean_in_flight") - 0.04745 / 8) <= 0.04745 / 8 / 100);
    assert_true(number_at(f, "errors") == 2);
    assert_true(number_at(f, "get.ops") == 900);
    assert_true(number_at(f, "get.ops_per_sec") == 450);
    /* 1..100 us each 9 times: p50 = 50 us, p99 = 99 us, within 1/128 */
    assert_true(fabs(number_at(f, "get.p50_us") - 50) <= 50.0 / 128);
    assert_true(fabs(number_at(f, "get.p99_us") - 99) <= 99.0 / 128);
    assert_true(number_at(f, "get.max_us") == 100);
    /* all 1000 ops: 900 GETs at 1..100 us, 100 PUTs at 20 us: ranks 1..171 are
     * below 20 us, 172..280 at 20 us, then 9 per us: rank 500 is 45 us */
    assert_true(number_at(f, "total.ops") == 1000);
    assert_true(fabs(number_at(f, "total.p50_us") - 45) <= 45.0 / 128);
    assert_true(number_at(f, "total.max_us") == 100);
    assert_true(number_at(f, "get.min_us") == 1);
    assert_true(number_at(f, "get.hits") == 850);
    assert_true(number_at(f, "put.p50_us") >= 20 && number_at(f, "put.p50_us") <= 20 + 20.0 / 128);
    assert_true(number_at(f, "reads_per_get") == 2);
    assert_true(number_at(f, "round_trips_per_get") == 1);
    assert_true(number_at(f, "doorbells_per_request") == 0.5);
    assert_true(number_at(f, "inline_share") == 0.75);
    assert_true(number_at(f, "cache_hits_per_get") == 0.5);
    assert_true(number_at(f, "forwards_per_get") == 0.1);
    assert_true(number_at(f, "counters.cache_stale") == 9);
    assert_true(number_at(f, "counters.read_lanes") == 2);
    assert_true(number_at(f, "counters.read_lanes_td") == 1);
    assert_true(number_at(f, "verify_retries") == 3);
    /* no deletes: count 0, latencies null (never a made-up 0) */
    assert_true(number_at(f, "delete.ops") == 0);
    assert_int_equal(f->kind[find(f, "delete.p50_us")], 'z');
    /* strings: escaped on the way out, intact on the way back */
    assert_string_equal(f->value[find(f, "servers[0]")], "shm:///tmp/a \"q\".sock");
    assert_string_equal(f->value[find(f, "servers[1]")], "rdma://h:1");
    assert_string_equal(f->value[find(f, "dist")], "zipf:0.9");
    assert_string_equal(f->value[find(f, "tool")], "rkv-bench");
    assert_int_equal(f->kind[find(f, "workload")], 'z');
    free(f);
    free(text);
    free(r);
    bench_config_free(&cfg);
}

static void text_report_content(void **state)
{
    (void)state;
    char *argv[] = { "rkv-bench", "-s", "shm:///x", NULL };
    struct bench_config cfg;
    parse_config(&cfg, argv, 3);
    struct bench_results *r = sample_results();
    r->verify_failures = 1;
    struct report_arg a = { &cfg, r, 0 };
    char *text = capture(write_text_report, &a);
    assert_non_null(strstr(text, "GET"));
    assert_non_null(strstr(text, "PUT"));
    assert_null(strstr(text, "DELETE")); /* no deletes: no row */
    assert_non_null(strstr(text, "TOTAL"));
    assert_non_null(strstr(text, "timeout 2"));
    assert_non_null(strstr(text, "verification failed 1"));
    assert_non_null(strstr(text, "2.00 READs/GET"));
    assert_non_null(strstr(text, "75.0% sends inline"));
    assert_non_null(strstr(text, "450.0")); /* GET ops/s */
    assert_null(strstr(text, "timed by"));  /* no clock named: none said */
    assert_int_equal(bench_results_errors(r), 3);
    free(text);
    cfg.clock_name = "tsc 2300.0 MHz"; /* what rkv-bench sets once calibrated */
    text = capture(write_text_report, &a);
    assert_non_null(strstr(text, "s measured, timed by tsc 2300.0 MHz\n"));
    free(text);
    free(r);
    bench_config_free(&cfg);
}

struct series_arg {
    const struct bench_config *cfg;
    const struct bench_results *r;
    const struct bench_series *s;
};

static void write_text_series(FILE *f, void *arg)
{
    struct series_arg *a = arg;
    bench_report_text_series(f, a->cfg, a->r, a->s);
}

static void write_json_series(FILE *f, void *arg)
{
    struct series_arg *a = arg;
    assert_int_equal(bench_report_json_series(f, a->cfg, a->r, a->s), 0);
}

/* The cache workload's report: the hit rate overall and by interval (text,
 * JSON, CSV), the fills, and a trace's per-operation counts. */
static void cache_report(void **state)
{
    (void)state;
    char *argv[] = { "rkv-bench", "-s", "shm:///x", "--fill-on-miss", "--trace", "t.csv", NULL };
    struct bench_config cfg;
    parse_config(&cfg, argv, 6);
    assert_true(cfg.fill_on_miss);
    struct bench_results *r = sample_results(); /* 850 hits, 50 misses */
    r->fills = 50;
    r->trace_ops[TRACE_GET] = 900;
    r->trace_ok[TRACE_GET] = 850;
    r->trace_missed[TRACE_GET] = 50;
    r->trace_ops[TRACE_SET] = 100;
    r->trace_ok[TRACE_SET] = 100;
    r->trace_skipped = 7;
    struct bench_row rows[3] = {
        { .end_s = 1, .length_s = 1, .get_hits = 350, .get_misses = 50 },
        { .end_s = 2, .length_s = 1, .get_hits = 500, .get_misses = 0 },
        { .end_s = 2.5, .length_s = 0.5 }, /* no GETs: no hit rate */
    };
    struct bench_series series = { .rows = rows, .count = 3, .cap = 3 };
    struct series_arg a = { &cfg, r, &series };
    char *text = capture(write_text_series, &a);
    assert_non_null(
        strstr(text, "trace t.csv, keys and values as the trace gives them, misses filled"));
    assert_non_null(strstr(text, "Cache: hit rate 94.44% (850 hits / 900 GETs); 50 misses filled "
                                 "with a SET\n"));
    assert_non_null(strstr(text, "by interval (2): min 87.5%, max 100.0%; 1.0s 87.5% 2.0s 100.0%\n"));
    assert_non_null(
        strstr(text, "Trace: t.csv: 1000 lines replayed; skipped: 7 (key or value too large)\n"));
    assert_non_null(strstr(text, "get             900  ok 850, missed 50\n"));
    assert_null(strstr(text, "delete  ")); /* no such lines: no row */
    free(text);

    text = capture(write_json_series, &a);
    struct flat *f = calloc(1, sizeof *f);
    assert_non_null(f);
    if (!parse_json(text, f))
        fail_msg("report is not valid JSON:\n%s", text);
    assert_true(fabs(number_at(f, "get.hit_rate") - 850.0 / 900) < 1e-9);
    assert_true(fabs(number_at(f, "cache.hit_rate") - 850.0 / 900) < 1e-9);
    assert_true(number_at(f, "cache.fills") == 50);
    assert_true(number_at(f, "cache.trace.replayed") == 1000);
    assert_true(number_at(f, "cache.trace.skipped") == 7);
    assert_true(number_at(f, "cache.trace.ops.get.count") == 900);
    assert_true(number_at(f, "cache.trace.ops.get.missed") == 50);
    assert_true(number_at(f, "cache.trace.ops.set.ok") == 100);
    assert_true(fabs(number_at(f, "timeseries[0].hit_rate") - 0.875) < 1e-9);
    assert_true(number_at(f, "timeseries[1].hit_rate") == 1);
    assert_int_equal(f->kind[find(f, "timeseries[2].hit_rate")], 'z');
    assert_string_equal(f->value[find(f, "cache.trace.file")], "t.csv");
    free(f);
    free(text);

    char *csv = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&csv, &len);
    assert_non_null(m);
    assert_int_equal(bench_series_write_csv(m, &series), 0);
    fclose(m);
    assert_non_null(strstr(csv, ",get_hit_rate\n"));
    assert_non_null(strstr(csv, ",0.8750\n"));
    assert_non_null(strstr(csv, ",1.0000\n"));
    free(csv);

    /* no GETs at all: a hit rate of none, never a made-up 0 */
    assert_true(bench_hit_rate(0, 0) < 0);
    free(r);
    bench_config_free(&cfg);
}

static void results_merge(void **state)
{
    (void)state;
    struct bench_results *a = sample_results(), *b = sample_results();
    b->duration_s = 3.0;
    bench_results_merge(a, b);
    assert_int_equal(bench_results_ops(a), 2000);
    assert_int_equal(a->get_hits, 1700);
    assert_int_equal(a->errors[RKV_TIMEOUT], 4);
    assert_int_equal(a->counters.reads, 3600);
    assert_int_equal(a->counters.inline_sends, 150);
    assert_true(a->duration_s == 3.0);
    assert_string_equal(bench_status_id(RKV_CAS_MISMATCH), "cas_mismatch");
    assert_string_equal(bench_status_id((rkv_status)999), "unknown");
    for (unsigned s = 0; s < RKV_STATUS_COUNT; s++)
        assert_string_not_equal(bench_status_id((rkv_status)s), "unknown");
    free(a);
    free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(json_writer_escapes), cmocka_unit_test(json_writer_detects_misuse),
        cmocka_unit_test(json_report_fields),  cmocka_unit_test(text_report_content),
        cmocka_unit_test(cache_report),        cmocka_unit_test(results_merge),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
