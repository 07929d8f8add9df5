/* test_json_parse.c — the strict JSON reader behind rkv-bench --compare:
 * every value kind, escapes and surrogate pairs, lookups, rkv-bench's own
 * --json report read back, and malformed text refused with its position. */
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
#include "json_parse.h"

static struct json_value *parse_ok(const char *text)
{
    char err[256];
    struct json_value *v = json_parse(text, strlen(text), err, sizeof err);
    if (v == NULL)
        fail_msg("'%s': %s", text, err);
    return v;
}

static void values(void **state)
{
    (void)state;
    struct json_value *v = parse_ok(
        " {\"a\": [1, -2.5e3, 0, true, false, null, \"x\\n\\u00e9\\ud83d\\ude00\"],"
        " \"b\": {}, \"c\": [], \"a2\": 7, \"a2\": 8} ");
    assert_int_equal(v->type, JSON_OBJECT);
    assert_int_equal(v->count, 5);
    const struct json_value *a = json_member(v, "a");
    assert_int_equal(a->type, JSON_ARRAY);
    assert_int_equal(a->count, 7);
    assert_true(a->items[0].number == 1);
    assert_true(a->items[1].number == -2500);
    assert_true(a->items[3].boolean && !a->items[4].boolean);
    assert_int_equal(a->items[5].type, JSON_NULL);
    assert_string_equal(a->items[6].string, "x\n\xc3\xa9\xf0\x9f\x98\x80");
    assert_int_equal(json_member(v, "b")->count, 0);
    assert_true(json_number_of(v, "a2", 0) == 8); /* the last of a repeated name */
    assert_true(json_number_of(v, "nope", -1) == -1);
    assert_null(json_string_of(v, "a2"));
    assert_null(json_member(a, "x"));
    json_value_free(v);
}

static void refuses_bad_text(void **state)
{
    (void)state;
    static const struct {
        const char *text, *msg;
    } bad[] = {
        { "", "value is missing" },
        { "[1,]", "not a JSON value" },
        { "{\"a\" 1}", "expected ':'" },
        { "{a: 1}", "member name in quotes" },
        { "[01]", "expected ',' or ']'" },
        { "[1.]", "not a JSON value" },
        { "\"abc", "not closed" },
        { "\"a\tb\"", "control character" },
        { "\"\\x\"", "unknown escape" },
        { "\"\\ud800\"", "high surrogate" },
        { "\"\\udc00\"", "lone \\u low surrogate" },
        { "\"\\u12\"", "four hex digits" },
        { "[1] 2", "text after the end" },
        { "tru", "not a JSON value" },
        { "{\"a\":1,\n \"b\":}", "line 2, column 6" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char err[256] = "";
        assert_null(json_parse(bad[i].text, strlen(bad[i].text), err, sizeof err));
        if (strstr(err, bad[i].msg) == NULL)
            fail_msg("'%s': message '%s' lacks '%s'", bad[i].text, err, bad[i].msg);
    }
    char deep[200];
    memset(deep, '[', sizeof deep);
    char err[256];
    assert_null(json_parse(deep, sizeof deep, err, sizeof err));
    assert_non_null(strstr(err, "nested deeper than 64"));
}

/* rkv-bench's report parses, and the distribution sums to the ops. */
static void reads_the_bench_report(void **state)
{
    (void)state;
    char *argv[] = { (char *)"rkv-bench", (char *)"-s", (char *)"shm:///x", NULL };
    struct bench_config cfg;
    assert_int_equal(bench_parse_args(3, argv, &cfg, stdout, stderr), BENCH_ARGS_RUN);
    struct bench_results *r = malloc(sizeof *r);
    assert_non_null(r);
    bench_results_init(r);
    for (uint64_t v = 1; v < 5000000; v = v * 3 + 7)
        hist_record_n(&r->lat[BENCH_OP_GET], v, v % 5 + 1);
    r->duration_s = 2;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_int_equal(bench_report_json(f, &cfg, r), 0);
    fclose(f);
    struct json_value *v = parse_ok(text);
    const struct json_value *d = json_member(json_member(v, "get"), "distribution");
    assert_non_null(d);
    double sum = 0;
    for (size_t i = 0; i < d->count; i++)
        sum += d->items[i].items[1].number;
    assert_true(sum == (double)r->lat[BENCH_OP_GET].count);
    assert_string_equal(json_string_of(v, "loop"), "closed");
    assert_int_equal(json_member(v, "open_loop")->type, JSON_NULL);
    json_value_free(v);
    free(text);
    free(r);
    bench_config_free(&cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(values),
        cmocka_unit_test(refuses_bad_text),
        cmocka_unit_test(reads_the_bench_report),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
