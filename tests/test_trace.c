/* test_trace.c — rkv-bench's --trace parser (bench/trace.c): good lines of
 * every operation, each kind of bad line refused with its file and line
 * number in the message, numbers checked for overflow, sizes beyond a
 * server's limits loaded but marked for skipping, an empty trace refused,
 * and keys padded or truncated to their size deterministically. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "trace.h"

static void parses_every_operation(void **state)
{
    (void)state;
    static const char *const ops[] = { "get",    "gets",    "set",    "add",  "replace", "cas",
                                       "append", "prepend", "delete", "incr", "decr" };
    for (unsigned i = 0; i < TRACE_OP_COUNT; i++) {
        char line[128], why[256];
        struct trace_line l;
        int n = snprintf(line, sizeof line, "17,nz:u:eeW511W3dcH3,29,1245,3,%s,600", ops[i]);
        assert_int_equal(trace_parse_line(line, (size_t)n, &l, why, sizeof why), 0);
        assert_int_equal(l.op, i);
        assert_string_equal(trace_op_name(i), ops[i]);
        assert_int_equal(l.timestamp, 17);
        assert_int_equal(l.key_len, strlen("nz:u:eeW511W3dcH3"));
        assert_memory_equal(l.key, "nz:u:eeW511W3dcH3", l.key_len);
        assert_int_equal(l.key_size, 29);
        assert_int_equal(l.value_size, 1245);
        assert_int_equal(l.client_id, 3);
        assert_int_equal(l.ttl, 600);
    }
}

static void loads_a_trace(void **state)
{
    (void)state;
    const char *text = "0,a,10,100,1,get,0\r\n"
                       "0,a,10,100,1,set,3600\n"
                       "1,bb,300,5,2,get,0\n"    /* key too long: loaded, skipped */
                       "2,c,8,2000000,2,set,0\n" /* value too large */
                       "18446744073709551615,d,250,1048576,18446744073709551615,delete,4294967295";
    struct trace t;
    char err[512];
    assert_int_equal(trace_load_buffer(&t, "t.csv", text, strlen(text), err, sizeof err), 0);
    assert_int_equal(t.count, 5);
    assert_int_equal(t.ops[TRACE_GET], 2);
    assert_int_equal(t.ops[TRACE_SET], 2);
    assert_int_equal(t.ops[TRACE_DELETE], 1);
    assert_int_equal(t.too_large, 2);
    assert_int_equal(t.value_max, 1048576);
    assert_false(trace_too_large(&t.recs[0], TRACE_VALUE_MAX));
    assert_true(trace_too_large(&t.recs[2], TRACE_VALUE_MAX));
    assert_true(trace_too_large(&t.recs[3], TRACE_VALUE_MAX));
    assert_false(trace_too_large(&t.recs[4], TRACE_VALUE_MAX));
    assert_true(trace_too_large(&t.recs[4], 1000)); /* a smaller server limit */
    assert_int_equal(t.recs[4].timestamp, UINT64_MAX);
    assert_int_equal(t.recs[4].ttl, UINT32_MAX);
    assert_int_equal(t.recs[1].ttl, 3600);
    trace_free(&t);
}

/* Each bad line, as line 3 of a file whose first two lines are good: the
 * load fails with "bad.csv:3: " and the reason. */
static void refuses_bad_lines(void **state)
{
    (void)state;
    static const struct {
        const char *line, *why;
    } cases[] = {
        { "0,k,10,100,1,get", "6 fields, expected 7" }, /* truncated */
        { "0,k,10", "3 fields, expected 7" },
        { "0,k,10,100,1,get,0,9", "8 fields, expected 7" },
        { "", "an empty line" },
        { "\r", "an empty line" },
        { "0,k,10,100,1,fetch,0", "unknown operation 'fetch'" },
        { "0,k,10,100,1,GET,0", "unknown operation 'GET'" },
        { "0,k,10,100,1,,0", "unknown operation ''" },
        { "x,k,10,100,1,get,0", "timestamp 'x' is not a whole number" },
        { "-1,k,10,100,1,get,0", "timestamp '-1' is not a whole number" },
        { "18446744073709551616,k,10,100,1,get,0", "timestamp '18446744073709551616'" },
        { "0,k,4294967296,100,1,get,0",
          "key size '4294967296' is not a whole number from 0 to 4294967295" },
        { "0,k,10,99999999999,1,get,0", "value size '99999999999'" },
        { "0,k,10,1e3,1,get,0", "value size '1e3'" },
        { "0,k,10, 100,1,get,0", "value size ' 100'" },
        { "0,k,10,100,c7,get,0", "client id 'c7'" },
        { "0,k,10,100,1,set,4294967296", "TTL '4294967296'" },
        { "0,k,10,100,1,set,", "TTL '' is not" },
        { "0,,10,100,1,get,0", "an empty key" },
        { "0,a b,10,100,1,get,0", "the key has byte 0x20 at offset 1" },
        { "0,k,0,100,1,get,0", "key size 0" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[256], err[512];
        struct trace t;
        int n = snprintf(text, sizeof text,
                         "0,a,10,100,1,get,0\n1,b,10,100,1,set,0\n%s\n"
                         "2,c,10,100,1,get,0\n",
                         cases[i].line);
        int rc = trace_load_buffer(&t, "bad.csv", text, (size_t)n, err, sizeof err);
        if (rc == 0 || strncmp(err, "bad.csv:3: ", 11) != 0 || strstr(err, cases[i].why) == NULL)
            fail_msg("case '%s': rc %d, message '%s'; wanted 'bad.csv:3: ...%s...'", cases[i].line,
                     rc, rc ? err : "", cases[i].why);
        assert_null(t.recs);
    }
}

static void refuses_odd_bytes_and_long_lines(void **state)
{
    (void)state;
    struct trace t;
    char err[512];
    static const char nul[] = "0,a,10,100,1,get,0\n0,a\0b,10,100,1,get,0\n";
    assert_int_equal(trace_load_buffer(&t, "n.csv", nul, sizeof nul - 1, err, sizeof err), -1);
    assert_non_null(strstr(err, "n.csv:2: a NUL byte"));
    size_t len = TRACE_LINE_MAX + 100;
    char *big = malloc(len);
    assert_non_null(big);
    memset(big, 'k', len);
    memcpy(big, "0,", 2);
    assert_int_equal(trace_load_buffer(&t, "l.csv", big, len, err, sizeof err), -1);
    assert_non_null(strstr(err, "l.csv:1: a line longer than"));
    free(big);
}

static void refuses_an_empty_trace(void **state)
{
    (void)state;
    struct trace t;
    char err[512];
    assert_int_equal(trace_load_buffer(&t, "e.csv", "", 0, err, sizeof err), -1);
    assert_non_null(strstr(err, "e.csv: an empty trace"));
    /* A file: empty, missing, and one good line without a final newline. */
    char path[] = "/tmp/test_trace_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(trace_load_file(&t, path, err, sizeof err), -1);
    assert_non_null(strstr(err, "an empty trace"));
    assert_int_equal(write(fd, "5,key,3,7,1,gets,0", 18), 18);
    close(fd);
    assert_int_equal(trace_load_file(&t, path, err, sizeof err), 0);
    assert_int_equal(t.count, 1);
    assert_int_equal(t.recs[0].op, TRACE_GETS);
    trace_free(&t);
    FILE *f = fopen(path, "a");
    assert_non_null(f);
    fputs("\n6,key,3,7,1,frob,0\n", f);
    fclose(f);
    assert_int_equal(trace_load_file(&t, path, err, sizeof err), -1);
    assert_non_null(strstr(err, ":2: unknown operation 'frob'"));
    unlink(path);
    assert_int_equal(trace_load_file(&t, path, err, sizeof err), -1);
    assert_non_null(strstr(err, "cannot open"));
}

static void keys_padded_and_truncated(void **state)
{
    (void)state;
    const char *text = "0,abcdef,3,1,1,get,0\n0,abcdef,6,1,1,get,0\n0,abcdef,40,1,1,get,0\n"
                       "0,abcdeg,40,1,1,get,0\n0,abcdef,250,1,1,get,0\n";
    struct trace t;
    char err[512], k1[TRACE_KEY_MAX], k2[TRACE_KEY_MAX];
    assert_int_equal(trace_load_buffer(&t, "k.csv", text, strlen(text), err, sizeof err), 0);
    assert_int_equal(trace_key(&t, &t.recs[0], k1), 3);
    assert_memory_equal(k1, "abc", 3);
    assert_int_equal(trace_key(&t, &t.recs[1], k1), 6);
    assert_memory_equal(k1, "abcdef", 6);
    assert_int_equal(trace_key(&t, &t.recs[2], k1), 40);
    assert_memory_equal(k1, "abcdef", 6);
    for (unsigned i = 0; i < 40; i++)
        assert_true(k1[i] > ' ' && k1[i] < 0x7f);
    assert_int_equal(trace_key(&t, &t.recs[2], k2), 40);
    assert_memory_equal(k1, k2, 40); /* deterministic */
    assert_int_equal(trace_key(&t, &t.recs[3], k2), 40);
    assert_memory_not_equal(k1 + 6, k2 + 6, 34); /* the pad follows the key */
    assert_int_equal(trace_key(&t, &t.recs[4], k2), 250);
    assert_memory_equal(k1, k2, 40); /* a prefix of the longer pad */
    trace_free(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(parses_every_operation),
        cmocka_unit_test(loads_a_trace),
        cmocka_unit_test(refuses_bad_lines),
        cmocka_unit_test(refuses_odd_bytes_and_long_lines),
        cmocka_unit_test(refuses_an_empty_trace),
        cmocka_unit_test(keys_padded_and_truncated),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
