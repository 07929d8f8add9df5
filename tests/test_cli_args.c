/* test_cli_args.c — rkv-cli's parsing: global options, every command with
 * good and bad arguments, the stdin tokenizer's quoting and escapes (binary
 * keys and values), exit statuses, and escaped printing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cli_args.h"

/* ---- global options ---- */

struct global_run {
    enum cli_global_result r;
    struct cli_global g;
    int cmd_index;
    char *out, *err;
};

static struct global_run *run_global(int argc, char **argv)
{
    struct global_run *x = calloc(1, sizeof *x);
    size_t ol, el;
    FILE *out = open_memstream(&x->out, &ol), *err = open_memstream(&x->err, &el);
    assert_non_null(x);
    x->r = cli_parse_global(argc, argv, &x->g, &x->cmd_index, out, err);
    fclose(out);
    fclose(err);
    return x;
}

static void free_global(struct global_run *x)
{
    cli_global_free(&x->g);
    free(x->out);
    free(x->err);
    free(x);
}

static void global_options(void **state)
{
    (void)state;
    char *a1[] = { "rkv-cli", "-s", "shm:///a",  "--server=rdma://h:7",
                   "--auth",  "pw", "--timeout", "300",
                   "get",     "k",  NULL };
    struct global_run *x = run_global(10, a1);
    assert_int_equal(x->r, CLI_GLOBAL_RUN);
    assert_string_equal(x->g.servers, "shm:///a,rdma://h:7");
    assert_string_equal(x->g.auth, "pw");
    assert_int_equal(x->g.timeout_ms, 300);
    assert_int_equal(x->cmd_index, 8);
    free_global(x);

    /* no command: stdin mode (cmd_index == argc) */
    char *a2[] = { "rkv-cli", "-sshm:///a", NULL };
    x = run_global(2, a2);
    assert_int_equal(x->r, CLI_GLOBAL_RUN);
    assert_int_equal(x->cmd_index, 2);
    free_global(x);

    /* "--" ends the options: a command could then start with "-" */
    char *a3[] = { "rkv-cli", "-s", "shm:///a", "--", "get", NULL };
    x = run_global(5, a3);
    assert_int_equal(x->cmd_index, 4);
    free_global(x);

    char *a4[] = { "rkv-cli", "--help", NULL };
    x = run_global(2, a4);
    assert_int_equal(x->r, CLI_GLOBAL_EXIT_OK);
    assert_non_null(strstr(x->out, "Exit status"));
    assert_non_null(strstr(x->out, "incr KEY [DELTA]"));
    free_global(x);
}

static void global_errors(void **state)
{
    (void)state;
    struct {
        int argc;
        char *argv[6];
        const char *needle;
    } cases[] = {
        { 2, { "rkv-cli", "get" }, "no server given" },
        { 3, { "rkv-cli", "-s", "tcp://x" }, "'tcp://x' is a memcached address" },
        { 3, { "rkv-cli", "-s", "shm:///a,," }, "has an empty URI" },
        { 2, { "rkv-cli", "-s" }, "-s needs a value" },
        { 4, { "rkv-cli", "-s", "shm:///a", "--bogus" }, "unknown option '--bogus'" },
        { 5, { "rkv-cli", "-s", "shm:///a", "--timeout", "0" }, "--timeout: '0'" },
        { 5, { "rkv-cli", "-s", "shm:///a", "--timeout", "9999999" }, "1..3600000" },
        { 5, { "rkv-cli", "-s", "shm:///a", "--auth", "" }, "--auth: the secret is empty" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct global_run *x = run_global(cases[i].argc, cases[i].argv);
        assert_int_equal(x->r, CLI_GLOBAL_USAGE);
        if (strstr(x->err, cases[i].needle) == NULL)
            fail_msg("case %zu: '%s' lacks '%s'", i, x->err, cases[i].needle);
        assert_null(x->g.servers);
        free_global(x);
    }
}

/* ---- commands ---- */

/* Parses a command given as NULL-terminated C strings. */
static bool parse_words(struct cli_command *c, char *err, size_t err_len, ...)
{
    struct cli_arg args[16];
    size_t n = 0;
    va_list ap;
    va_start(ap, err_len);
    for (const char *w = va_arg(ap, const char *); w != NULL; w = va_arg(ap, const char *)) {
        args[n].s = w;
        args[n++].len = strlen(w);
    }
    va_end(ap);
    return cli_parse_command(args, n, c, err, err_len);
}

static void good_commands(void **state)
{
    (void)state;
    struct cli_command c;
    char err[256];
    assert_true(parse_words(&c, err, sizeof err, "get", "user:1", NULL));
    assert_int_equal(c.cmd, CLI_GET);
    assert_memory_equal(c.key.s, "user:1", 6);
    assert_int_equal(c.key.len, 6);
    assert_false(c.meta);
    assert_true(parse_words(&c, err, sizeof err, "get", "--meta", "k", NULL));
    assert_true(c.meta);
    assert_false(c.recache);
    assert_true(parse_words(&c, err, sizeof err, "get", "k", "--recache", "30", NULL));
    assert_true(c.recache);
    assert_int_equal(c.recache_ttl, 30);
    assert_memory_equal(c.key.s, "k", 1);
    assert_false(parse_words(&c, err, sizeof err, "get", "k", "--recache", NULL));
    assert_false(parse_words(&c, err, sizeof err, "get", "k", "--recache", "x", NULL));

    assert_true(parse_words(&c, err, sizeof err, "put", "k", "hello world", NULL));
    assert_int_equal(c.cmd, CLI_PUT);
    assert_int_equal(c.value.len, 11);
    assert_int_equal(c.put.mode, RKV_SET);
    assert_int_equal(c.put.ttl, 0);

    assert_true(parse_words(&c, err, sizeof err, "set", "k", "v", "--ttl", "60", "--flags", "7",
                            "--add", NULL));
    assert_int_equal(c.cmd, CLI_PUT);
    assert_int_equal(c.put.mode, RKV_ADD);
    assert_int_equal(c.put.ttl, 60);
    assert_int_equal(c.put.user_flags, 7);
    assert_true(parse_words(&c, err, sizeof err, "put", "k", "v", "--ttl", "never", NULL));
    assert_int_equal(c.put.ttl, RKV_TTL_NEVER);
    assert_true(parse_words(&c, err, sizeof err, "put", "k", "v", "--ttl", "4294967294", NULL));
    assert_int_equal(c.put.ttl, 4294967294u);

    assert_true(parse_words(&c, err, sizeof err, "put", "--replace", "k", "v", NULL));
    assert_int_equal(c.put.mode, RKV_REPLACE);
    assert_true(parse_words(&c, err, sizeof err, "put", "k", "v", "--cas", "12345678901", NULL));
    assert_int_equal(c.put.mode, RKV_CAS);
    assert_int_equal(c.put.cas, 12345678901ull);

    /* "--" lets a value look like an option; an empty value is fine */
    assert_true(parse_words(&c, err, sizeof err, "put", "k", "--", "--ttl", NULL));
    assert_memory_equal(c.value.s, "--ttl", 5);
    assert_true(parse_words(&c, err, sizeof err, "put", "k", "", NULL));
    assert_int_equal(c.value.len, 0);
    assert_true(parse_words(&c, err, sizeof err, "put", "k", "-", NULL));
    assert_int_equal(c.value.len, 1);

    assert_true(parse_words(&c, err, sizeof err, "del", "k", NULL));
    assert_int_equal(c.cmd, CLI_DEL);
    assert_true(parse_words(&c, err, sizeof err, "delete", "k", NULL));
    assert_int_equal(c.cmd, CLI_DEL);

    assert_true(parse_words(&c, err, sizeof err, "incr", "n", NULL));
    assert_int_equal(c.cmd, CLI_INCR);
    assert_int_equal(c.delta, 1);
    assert_true(parse_words(&c, err, sizeof err, "decr", "n", "9223372036854775807", NULL));
    assert_int_equal(c.cmd, CLI_DECR);
    assert_int_equal(c.delta, INT64_MAX);

    assert_true(parse_words(&c, err, sizeof err, "stats", NULL));
    assert_true(c.all_shards);
    assert_true(parse_words(&c, err, sizeof err, "stats", "2", NULL));
    assert_false(c.all_shards);
    assert_int_equal(c.shard, 2);
    assert_true(parse_words(&c, err, sizeof err, "ping", NULL));
    assert_int_equal(c.cmd, CLI_PING);
    assert_true(parse_words(&c, err, sizeof err, "flush", NULL));
    assert_int_equal(c.cmd, CLI_FLUSH);
    assert_int_equal(c.delay, 0);
    assert_true(parse_words(&c, err, sizeof err, "flush", "4294967295", NULL));
    assert_int_equal(c.delay, UINT32_MAX);

    char key250[251];
    memset(key250, 'k', 250);
    key250[250] = '\0';
    assert_true(parse_words(&c, err, sizeof err, "get", key250, NULL));
}

static void bad_commands(void **state)
{
    (void)state;
    struct cli_command c;
    char err[256];
    char key251[252];
    memset(key251, 'k', 251);
    key251[251] = '\0';
#define BAD(needle, ...)                                                   \
    do {                                                                   \
        assert_false(parse_words(&c, err, sizeof err, __VA_ARGS__, NULL)); \
        if (strstr(err, needle) == NULL)                                   \
            fail_msg("'%s' lacks '%s'", err, needle);                      \
    } while (0)
    BAD("unknown command 'fetch'", "fetch", "k");
    BAD("get: missing arguments; usage: get KEY", "get");
    BAD("get: too many arguments", "get", "a", "b");
    BAD("get: the key is empty", "get", "");
    BAD("get: the key is 251 bytes; keys are 1..250 bytes", "get", key251);
    BAD("get: unknown option '--ttl'", "get", "k", "--ttl");
    BAD("put: missing arguments", "put", "k");
    BAD("put: --ttl needs a value", "put", "k", "v", "--ttl");
    BAD("put: --ttl: 'soon'", "put", "k", "v", "--ttl", "soon");
    BAD("put: --ttl: '-1'", "put", "k", "v", "--ttl", "-1");
    BAD("put: --ttl: '4294967296'", "put", "k", "v", "--ttl", "4294967296");
    BAD("put: --ttl: '4294967295' is not a number of seconds in 0..4294967294 or 'never'", "put",
        "k", "v", "--ttl", "4294967295");
    BAD("put: --flags: 'x'", "put", "k", "v", "--flags", "x");
    BAD("put: --cas: '0' is not an item version", "put", "k", "v", "--cas", "0");
    BAD("at most one of --add, --replace and --cas", "put", "k", "v", "--add", "--replace");
    BAD("at most one of --add, --replace and --cas", "put", "k", "v", "--cas", "5", "--add");
    BAD("put: unknown option '--xx'", "put", "k", "v", "--xx");
    BAD("incr: DELTA '-3' is not a whole number", "incr", "k", "-3");
    BAD("incr: DELTA '9223372036854775808'", "incr", "k", "9223372036854775808");
    BAD("decr: too many arguments", "decr", "k", "1", "2");
    BAD("del: missing arguments", "del");
    BAD("stats: SHARD 'one'", "stats", "one");
    BAD("ping: too many arguments", "ping", "x");
    BAD("flush: DELAY 'soon' is not a whole number of seconds", "flush", "soon");
    BAD("flush: DELAY '4294967296'", "flush", "4294967296");
    BAD("flush: too many arguments", "flush", "1", "2");
#undef BAD
    assert_false(cli_parse_command(NULL, 0, &c, err, sizeof err));
    assert_non_null(strstr(err, "no command"));
}

/* ---- tokenizer ---- */

static struct cli_tokens tokenize_ok(const char *line, size_t len)
{
    struct cli_tokens t;
    char err[256];
    if (!cli_tokenize(line, len, &t, err, sizeof err))
        fail_msg("'%s' did not tokenize: %s", line, err);
    return t;
}

static void tokenizer(void **state)
{
    (void)state;
    struct cli_tokens t = tokenize_ok("  put  key   value  ", 20);
    assert_int_equal(t.count, 3);
    assert_string_equal(t.args[0].s, "put");
    assert_string_equal(t.args[2].s, "value");
    cli_tokens_free(&t);

    const char *l2 = "put \"a key\" \"x\\x00y\\n\\t\\\\\\\"\\xFF\" it''s 'a\\'b' \"\"";
    t = tokenize_ok(l2, strlen(l2));
    assert_int_equal(t.count, 6);
    assert_int_equal(t.args[1].len, 5);
    assert_memory_equal(t.args[1].s, "a key", 5);
    assert_int_equal(t.args[2].len, 8);
    assert_memory_equal(t.args[2].s, "x\0y\n\t\\\"\xff", 8);
    assert_string_equal(t.args[3].s, "it''s"); /* not a quote at token start */
    assert_string_equal(t.args[4].s, "a'b");
    assert_int_equal(t.args[5].len, 0);
    cli_tokens_free(&t);

    /* comments, blank lines, CR line ends, tabs */
    t = tokenize_ok("# get k", 7);
    assert_int_equal(t.count, 0);
    cli_tokens_free(&t);
    t = tokenize_ok("", 0);
    assert_int_equal(t.count, 0);
    cli_tokens_free(&t);
    t = tokenize_ok("\tget\tk#1\r", 9);
    assert_int_equal(t.count, 2);
    assert_string_equal(t.args[1].s, "k#1");
    cli_tokens_free(&t);

    /* a NUL inside the line (from a binary stdin) is a byte like any other */
    t = tokenize_ok("get a\0b", 7);
    assert_int_equal(t.count, 2);
    assert_int_equal(t.args[1].len, 3);
    cli_tokens_free(&t);
}

static void tokenizer_errors(void **state)
{
    (void)state;
    const struct {
        const char *line;
        const char *needle;
    } cases[] = {
        { "get \"abc", "unterminated \" quote starting at column 5" },
        { "get 'abc", "unterminated ' quote" },
        { "get \"a\"b", "closing quote at column 7 must be followed by a space" },
        { "get \"a\\q\"", "unknown escape \\q" },
        { "get \"a\\x4\"", "needs two hex digits" },
        { "get \"a\\xZZ\"", "needs two hex digits" },
        { "get \"a\\", "a backslash ends the line" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct cli_tokens t;
        char err[256];
        assert_false(cli_tokenize(cases[i].line, strlen(cases[i].line), &t, err, sizeof err));
        if (strstr(err, cases[i].needle) == NULL)
            fail_msg("'%s': '%s' lacks '%s'", cases[i].line, err, cases[i].needle);
        assert_null(t.args);
    }
}

/* A tokenized line feeds cli_parse_command: binary key and value survive. */
static void tokenized_command(void **state)
{
    (void)state;
    const char *line = "put \"k\\x00\\x01\" \"v\\xff\\x00\" --ttl 5";
    struct cli_tokens t = tokenize_ok(line, strlen(line));
    struct cli_command c;
    char err[256];
    assert_true(cli_parse_command(t.args, t.count, &c, err, sizeof err));
    assert_int_equal(c.key.len, 3);
    assert_memory_equal(c.key.s, "k\0\1", 3);
    assert_int_equal(c.value.len, 3);
    assert_memory_equal(c.value.s, "v\xff\0", 3);
    assert_int_equal(c.put.ttl, 5);
    cli_tokens_free(&t);
}

static void exit_codes_and_escaping(void **state)
{
    (void)state;
    assert_int_equal(cli_exit_code(RKV_OK), 0);
    assert_int_equal(cli_exit_code(RKV_NOT_FOUND), 1);
    assert_int_equal(cli_exit_code(RKV_EXISTS), 1);
    assert_int_equal(cli_exit_code(RKV_NOT_STORED), 1);
    assert_int_equal(cli_exit_code(RKV_CAS_MISMATCH), 1);
    assert_int_equal(cli_exit_code(RKV_CONNECTION), 2);
    assert_int_equal(cli_exit_code(RKV_TIMEOUT), 2);
    assert_int_equal(cli_exit_code(RKV_NOT_NUMBER), 2);
    assert_int_equal(cli_exit_code(RKV_TOO_LARGE), 2);

    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    cli_print_escaped(f, "ab c\\\0\xff~", 8);
    fclose(f);
    assert_string_equal(buf, "ab\\x20c\\\\\\x00\\xff~");
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(global_options),    cmocka_unit_test(global_errors),
        cmocka_unit_test(good_commands),     cmocka_unit_test(bad_commands),
        cmocka_unit_test(tokenizer),         cmocka_unit_test(tokenizer_errors),
        cmocka_unit_test(tokenized_command), cmocka_unit_test(exit_codes_and_escaping),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
