/* test_bench_args.c — rkv-bench's command-line parser: defaults, every flag
 * with good values, bad values with their message (naming the flag and the
 * accepted range) and exit status, YCSB presets and their overrides; and its
 * option table: every row named once, with help, listed by --help, its value
 * checked, its default the parser's. */
#include <limits.h>
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

#define MAX_ARGS 64

/* Captured output of one parse. */
struct parse {
    enum bench_args_result r;
    struct bench_config cfg;
    char *out, *err; /* what went to stdout / stderr */
};

/* argv[0] is "rkv-bench"; argv[argc] is NULL. */
static struct parse *parse_vec(int argc, char **argv)
{
    struct parse *p = calloc(1, sizeof *p);
    assert_non_null(p);
    size_t out_len, err_len;
    FILE *out = open_memstream(&p->out, &out_len);
    FILE *err = open_memstream(&p->err, &err_len);
    assert_non_null(out);
    assert_non_null(err);
    p->r = bench_parse_args(argc, argv, &p->cfg, out, err);
    fclose(out);
    fclose(err);
    return p;
}

static struct parse *parse_argv(const char *first, ...)
{
    char *argv[MAX_ARGS];
    int argc = 0;
    argv[argc++] = (char *)"rkv-bench";
    va_list ap;
    va_start(ap, first);
    for (const char *a = first; a != NULL; a = va_arg(ap, const char *)) {
        assert_true(argc < MAX_ARGS - 1);
        argv[argc++] = (char *)a;
    }
    va_end(ap);
    argv[argc] = NULL;
    return parse_vec(argc, argv);
}

static void parse_free(struct parse *p)
{
    if (p->r == BENCH_ARGS_RUN)
        bench_config_free(&p->cfg);
    free(p->out);
    free(p->err);
    free(p);
}

/* A bad command line: exit status 2 and a message containing `needle`. */
#define EXPECT_USAGE(needle, ...)                                 \
    do {                                                          \
        struct parse *p_ = parse_argv(__VA_ARGS__, NULL);         \
        assert_int_equal(p_->r, BENCH_ARGS_USAGE);                \
        if (strstr(p_->err, needle) == NULL)                      \
            fail_msg("message '%s' lacks '%s'", p_->err, needle); \
        assert_non_null(strstr(p_->err, "rkv-bench: "));          \
        parse_free(p_);                                           \
    } while (0)

static void defaults(void **state)
{
    (void)state;
    struct parse *p = parse_argv("-s", "shm:///tmp/x.sock", NULL);
    assert_int_equal(p->r, BENCH_ARGS_RUN);
    assert_string_equal(p->cfg.servers, "shm:///tmp/x.sock");
    assert_int_equal(p->cfg.server_count, 1);
    assert_int_equal(p->cfg.threads, 1);
    assert_int_equal(p->cfg.window, 1);
    assert_true(p->cfg.duration_s == 10.0);
    assert_int_equal(p->cfg.requests, 0);
    assert_int_equal(p->cfg.keys, 100000);
    assert_int_equal(p->cfg.key_size.min, 16);
    assert_int_equal(p->cfg.value_size.max, 32);
    assert_true(p->cfg.get_ratio == 0.9);
    assert_true(p->cfg.delete_ratio == 0.0);
    assert_int_equal(p->cfg.dist, BENCH_DIST_UNIFORM);
    assert_true(p->cfg.preload);
    assert_false(p->cfg.verify);
    assert_false(p->cfg.quiet);
    assert_null(p->cfg.json_path);
    assert_int_equal(p->cfg.seed, 1);
    assert_int_equal(p->cfg.write_kind, BENCH_WRITE_UPDATE);
    assert_string_equal(p->err, "");
    parse_free(p);
}

/* The cache workload's flags and what --trace refuses beside it. */
static void cache_workload(void **state)
{
    (void)state;
    struct parse *p = parse_argv("-s", "shm:///x", "--fill-on-miss", "--window", "8", NULL);
    assert_int_equal(p->r, BENCH_ARGS_RUN);
    assert_true(p->cfg.fill_on_miss);
    assert_null(p->cfg.trace_path);
    assert_int_equal(bench_window_mode(&p->cfg), BENCH_WINDOW_PIPELINED);
    parse_free(p);
    /* a trace: as long as the trace, no preload, lockstep batches */
    p = parse_argv("-s", "shm:///x", "--trace", "t.csv", "--window", "8", NULL);
    assert_int_equal(p->r, BENCH_ARGS_RUN);
    assert_string_equal(p->cfg.trace_path, "t.csv");
    assert_true(p->cfg.duration_s == 0);
    assert_false(p->cfg.preload);
    assert_false(p->cfg.fill_on_miss);
    assert_int_equal(bench_window_mode(&p->cfg), BENCH_WINDOW_LOCKSTEP);
    parse_free(p);
    p = parse_argv("-s", "shm:///x", "-d", "3", "--trace", "t.csv", "--fill-on-miss", NULL);
    assert_int_equal(p->r, BENCH_ARGS_RUN);
    assert_true(p->cfg.duration_s == 3);
    assert_true(p->cfg.fill_on_miss);
    parse_free(p);
    p = parse_argv("--protocol", "memcache", "-s", "tcp://h:1", "--trace", "t.csv", "--no-preload",
                   NULL);
    assert_int_equal(p->r, BENCH_ARGS_RUN);
    parse_free(p);
    EXPECT_USAGE("drop --rate", "-s", "shm:///x", "--trace", "t.csv", "--rate", "100");
    EXPECT_USAGE("drop --workload", "-s", "shm:///x", "--trace", "t.csv", "--workload", "A");
    EXPECT_USAGE("drop --verify", "-s", "shm:///x", "--trace", "t.csv", "--verify");
    EXPECT_USAGE("drop --preload", "-s", "shm:///x", "--preload", "--trace", "t.csv");
    EXPECT_USAGE("drop --keys, --key-size", "-s", "shm:///x", "--trace", "t.csv", "--keys", "10");
    EXPECT_USAGE("drop --keys, --key-size", "-s", "shm:///x", "--value-size", "9", "--trace",
                 "t.csv");
    EXPECT_USAGE("drop --keys, --key-size", "-s", "shm:///x", "--trace", "t.csv", "--dist", "zipf");
    EXPECT_USAGE("drop --processes", "-s", "shm:///x", "--trace", "t.csv", "-P", "2");
    EXPECT_USAGE("--trace: '' is not", "-s", "shm:///x", "--trace", "");
}

static void every_flag(void **state)
{
    (void)state;
    struct parse *p = parse_argv("-s", "shm:///a", "--server=rdma://10.0.0.1:7000,shm:///c",
                                 "--threads", "8", "--window=16", "--duration", "2.5s",
                                 "--requests", "1000", "--keys", "5000", "--key-size", "8-32",
                                 "--value-size", "1K-4K", "--get-ratio", "0.75", "--delete-ratio",
                                 "0.05", "--dist", "zipf:0.8", "--warmup", "500ms", "--no-preload",
                                 "--verify", "--json", "-", "--seed", "99", "--auth", "s3cret",
                                 "--timeout", "250", "--location-cache", "off", "-q", NULL);
    assert_int_equal(p->r, BENCH_ARGS_RUN);
    const struct bench_config *c = &p->cfg;
    assert_string_equal(c->servers, "shm:///a,rdma://10.0.0.1:7000,shm:///c");
    assert_int_equal(c->server_count, 3);
    assert_int_equal(c->threads, 8);
    assert_int_equal(c->window, 16);
    assert_true(c->duration_s == 2.5);
    assert_int_equal(c->requests, 1000);
    assert_int_equal(c->keys, 5000);
    assert_int_equal(c->key_size.min, 8);
    assert_int_equal(c->key_size.max, 32);
    assert_int_equal(c->value_size.min, 1024);
    assert_int_equal(c->value_size.max, 4096);
    assert_true(c->get_ratio == 0.75);
    assert_true(c->delete_ratio == 0.05);
    assert_int_equal(c->dist, BENCH_DIST_ZIPF);
    assert_true(c->theta == 0.8);
    assert_true(c->warmup_s == 0.5);
    assert_false(c->preload);
    assert_true(c->verify);
    assert_string_equal(c->json_path, "-");
    assert_int_equal(c->seed, 99);
    assert_string_equal(c->auth, "s3cret");
    assert_int_equal(c->timeout_ms, 250);
    assert_int_equal(c->location_cache, UINT_MAX);
    assert_true(c->quiet);
    struct bench_mix mix;
    bench_mix_of(c, &mix);
    assert_true(mix.put > 0.1999 && mix.put < 0.2001);
    char buf[32];
    assert_string_equal(bench_dist_string(c, buf, sizeof buf), "zipf:0.8");
    parse_free(p);

    /* short forms and units */
    p = parse_argv("-sshm:///a", "-t", "2", "-w4", "-d", "1m", "-n", "7", "-k", "10", "-r", "1",
                   "--dist", "zipf", "--value-size", "0", "--location-cache", "128", NULL);
    assert_int_equal(p->r, BENCH_ARGS_RUN);
    assert_int_equal(p->cfg.threads, 2);
    assert_int_equal(p->cfg.window, 4);
    assert_true(p->cfg.duration_s == 60.0);
    assert_int_equal(p->cfg.requests, 7);
    assert_int_equal(p->cfg.value_size.min, 0);
    assert_true(p->cfg.theta == 0.99);
    assert_int_equal(p->cfg.location_cache, 128);
    assert_int_equal(p->cfg.protocol, BENCH_PROTO_RKV);
    parse_free(p);

    /* --protocol memcache: connections default to one per request in flight */
    p = parse_argv("-s", "tcp://127.0.0.1:11211", "--protocol", "memcache", "-t", "2", "-w", "8",
                   "-P", "2", NULL);
    assert_int_equal(p->r, BENCH_ARGS_RUN);
    assert_int_equal(p->cfg.protocol, BENCH_PROTO_MEMCACHE);
    assert_int_equal(p->cfg.connections, 32);
    parse_free(p);
    p = parse_argv("-s", "tcp://[::1]:11211", "--protocol", "memcache", "-t", "2", "-w", "8",
                   "--connections", "4", NULL);
    assert_int_equal(p->r, BENCH_ARGS_RUN);
    assert_int_equal(p->cfg.connections, 4);
    parse_free(p);

    /* --requests alone: no default duration */
    p = parse_argv("-s", "shm:///a", "--requests", "100", NULL);
    assert_int_equal(p->r, BENCH_ARGS_RUN);
    assert_true(p->cfg.duration_s == 0.0);
    parse_free(p);
}

static void help_and_version(void **state)
{
    (void)state;
    struct parse *p = parse_argv("--help", NULL);
    assert_int_equal(p->r, BENCH_ARGS_EXIT_OK);
    assert_non_null(strstr(p->out, "--window"));
    assert_non_null(strstr(p->out, "Exit status"));
    parse_free(p);
    p = parse_argv("-V", NULL);
    assert_int_equal(p->r, BENCH_ARGS_EXIT_OK);
    assert_non_null(strstr(p->out, "rkv-bench "));
    parse_free(p);
}

static void bad_values(void **state)
{
    (void)state;
#define S "-s", "shm:///a"
    EXPECT_USAGE("no server given", "--threads", "2");
    EXPECT_USAGE("--threads: '0' is not a whole number in 1..1024", S, "--threads", "0");
    EXPECT_USAGE("--threads: '1025'", S, "--threads", "1025");
    EXPECT_USAGE("--threads: 'two'", S, "--threads", "two");
    EXPECT_USAGE("--threads: '-1'", S, "--threads", "-1");
    EXPECT_USAGE("--window: '0' is not a whole number in 1..1024", S, "--window", "0");
    EXPECT_USAGE("--window: '4x'", S, "-w", "4x");
    EXPECT_USAGE("--shared-handle shares one librkv handle", S, "--shared-handle", "-w", "4");
    EXPECT_USAGE("--duration: '0'", S, "--duration", "0");
    EXPECT_USAGE("--duration: '-5'", S, "--duration", "-5");
    EXPECT_USAGE("--duration: '10q'", S, "--duration", "10q");
    EXPECT_USAGE("--duration: '1e9'", S, "--duration", "1e9");
    EXPECT_USAGE("--warmup: 'x'", S, "--warmup", "x");
    EXPECT_USAGE("--requests: '0'", S, "--requests", "0");
    EXPECT_USAGE("--keys: '0' is not a whole number in 1..", S, "--keys", "0");
    EXPECT_USAGE("--key-size: '1' is not N or MIN-MAX with 2 <= MIN <= MAX <= 250", S, "--key-size",
                 "1");
    EXPECT_USAGE("--key-size: '251'", S, "--key-size", "251");
    EXPECT_USAGE("--key-size: '40-20'", S, "--key-size", "40-20");
    EXPECT_USAGE("--key-size: '-20'", S, "--key-size", "-20");
    EXPECT_USAGE("--value-size: '2M'", S, "--value-size", "2M");
    EXPECT_USAGE("--value-size: '10-'", S, "--value-size", "10-");
    EXPECT_USAGE("--get-ratio: '1.5' is not a number from 0 to 1", S, "--get-ratio", "1.5");
    EXPECT_USAGE("--get-ratio: 'nan'", S, "--get-ratio", "nan");
    EXPECT_USAGE("--delete-ratio: '-0.1'", S, "--delete-ratio", "-0.1");
    EXPECT_USAGE("exceed 1", S, "--get-ratio", "0.9", "--delete-ratio", "0.2");
    EXPECT_USAGE("--dist: 'zipf:1'", S, "--dist", "zipf:1");
    EXPECT_USAGE("--dist: 'zipf:0'", S, "--dist", "zipf:0");
    EXPECT_USAGE("--dist: 'pareto'", S, "--dist", "pareto");
    EXPECT_USAGE("--dist: 'uniform:0.5'", S, "--dist", "uniform:0.5");
    EXPECT_USAGE("--seed: 'abc'", S, "--seed", "abc");
    EXPECT_USAGE("--timeout: '0'", S, "--timeout", "0");
    EXPECT_USAGE("--location-cache: '0'", S, "--location-cache", "0");
    EXPECT_USAGE("--server: 'http://x' is not a server URI", "-s", "http://x");
    EXPECT_USAGE("--server: 'shm://' is not a server URI", "-s", "shm://");
    EXPECT_USAGE("empty URI", "-s", "shm:///a,,shm:///b");
    /* --protocol memcache: one tcp:// server; --connections shares the window */
    EXPECT_USAGE("'tcp://h' is not tcp://HOST:PORT", "-s", "tcp://h", "--protocol", "memcache");
    EXPECT_USAGE("add --protocol memcache", "-s", "tcp://h:1");
    EXPECT_USAGE("give one -s tcp://HOST:PORT", S, "--protocol", "memcache");
    EXPECT_USAGE("give one -s tcp://HOST:PORT", "-s", "tcp://h:1,tcp://h:2", "--protocol",
                 "memcache");
    EXPECT_USAGE("--protocol: 'redis' is not rkv or memcache", S, "--protocol", "redis");
    EXPECT_USAGE("--connections sets the TCP connections", S, "--connections", "2");
    EXPECT_USAGE("--connections: '0'", "-s", "tcp://h:1", "--protocol", "memcache", "--connections",
                 "0");
    EXPECT_USAGE("at most --window 4", "-s", "tcp://h:1", "--protocol", "memcache", "--threads",
                 "2", "--window", "4", "--connections", "10");
    EXPECT_USAGE("same number", "-s", "tcp://h:1", "--protocol", "memcache", "--threads", "2",
                 "--connections", "3");
    EXPECT_USAGE("--auth: memcached clients", "-s", "tcp://h:1", "--protocol", "memcache", "--auth",
                 "x");
    EXPECT_USAGE("unknown option '--bogus'", S, "--bogus");
    EXPECT_USAGE("unknown option '-x'", S, "-x");
    EXPECT_USAGE("unexpected argument 'extra'", S, "extra");
    EXPECT_USAGE("--threads needs a value", S, "--threads");
    EXPECT_USAGE("--verify takes no value", S, "--verify=yes");
    EXPECT_USAGE("--auth", S, "--auth", "");
    /* combinations */
    EXPECT_USAGE("--verify needs --value-size of at least 16", S, "--verify", "--value-size", "8");
    EXPECT_USAGE("--key-size 4 is too short for --keys 100000", S, "--key-size", "4");
    EXPECT_USAGE("per thread", S, "--window", "1024", "--value-size", "1M");
#undef S
}

static void workloads(void **state)
{
    (void)state;
    struct bench_mix mix;
    struct parse *p = parse_argv("-s", "shm:///a", "--workload", "a", NULL);
    assert_int_equal(p->r, BENCH_ARGS_RUN);
    assert_int_equal(p->cfg.workload, 'A');
    assert_true(p->cfg.get_ratio == 0.5);
    assert_int_equal(p->cfg.dist, BENCH_DIST_ZIPF);
    assert_true(p->cfg.theta == 0.99);
    parse_free(p);

    p = parse_argv("-s", "shm:///a", "--workload", "C", NULL);
    assert_true(p->cfg.get_ratio == 1.0);
    parse_free(p);

    p = parse_argv("-s", "shm:///a", "--workload", "D", NULL);
    assert_int_equal(p->cfg.dist, BENCH_DIST_LATEST);
    assert_int_equal(p->cfg.write_kind, BENCH_WRITE_INSERT);
    bench_mix_of(&p->cfg, &mix);
    assert_true(mix.insert > 0.0499 && mix.insert < 0.0501 && mix.put == 0);
    parse_free(p);

    p = parse_argv("-s", "shm:///a", "--workload", "F", NULL);
    assert_int_equal(p->cfg.write_kind, BENCH_WRITE_RMW);
    bench_mix_of(&p->cfg, &mix);
    assert_true(mix.rmw == 0.5 && mix.get == 0.5);
    parse_free(p);

    /* explicit flags win whatever their order */
    p = parse_argv("-s", "shm:///a", "--get-ratio", "0.7", "--dist", "uniform", "--workload", "B",
                   NULL);
    assert_int_equal(p->r, BENCH_ARGS_RUN);
    assert_true(p->cfg.get_ratio == 0.7);
    assert_int_equal(p->cfg.dist, BENCH_DIST_UNIFORM);
    parse_free(p);

    EXPECT_USAGE("cannot serve", "-s", "shm:///a", "--workload", "E");
    EXPECT_USAGE("range scans", "-s", "shm:///a", "--workload", "e");
    EXPECT_USAGE("--workload: 'G' is not a YCSB workload", "-s", "shm:///a", "--workload", "G");
    EXPECT_USAGE("--workload: 'AB'", "-s", "shm:///a", "--workload", "AB");
}

/* Open loop, processes, output files and --compare. */
static void open_loop_and_outputs(void **state)
{
    (void)state;
    struct parse *p = parse_argv("-s", "shm:///x", "--rate", "2500.5", "--arrival", "poisson", "-P",
                                 "3", "--hist-file", "h", "--timeseries", "t.csv", "--html",
                                 "r.html", NULL);
    assert_int_equal(p->r, BENCH_ARGS_RUN);
    assert_true(p->cfg.rate == 2500.5);
    assert_int_equal(p->cfg.arrival, BENCH_ARRIVAL_POISSON);
    assert_int_equal(p->cfg.processes, 3);
    assert_string_equal(p->cfg.hist_prefix, "h");
    assert_string_equal(p->cfg.timeseries_path, "t.csv");
    assert_string_equal(p->cfg.html_path, "r.html");
    parse_free(p);

    p = parse_argv("-s", "shm:///x", NULL);
    assert_true(p->cfg.rate == 0);
    assert_int_equal(p->cfg.arrival, BENCH_ARRIVAL_CONSTANT);
    assert_int_equal(p->cfg.processes, 1);
    parse_free(p);

    /* --clock: auto by default; tsc is for the closed loop only */
    p = parse_argv("-s", "shm:///x", NULL);
    assert_int_equal(p->cfg.clock, BENCH_CLOCK_AUTO);
    parse_free(p);
    p = parse_argv("-s", "shm:///x", "--clock", "monotonic", NULL);
    assert_int_equal(p->r, BENCH_ARGS_RUN);
    assert_int_equal(p->cfg.clock, BENCH_CLOCK_MONOTONIC);
    parse_free(p);
    p = parse_argv("-s", "shm:///x", "--clock", "tsc", NULL);
    assert_int_equal(p->cfg.clock, BENCH_CLOCK_TSC);
    parse_free(p);
    p = parse_argv("-s", "shm:///x", "--clock", "auto", "--rate", "10", NULL);
    assert_int_equal(p->r, BENCH_ARGS_RUN);
    parse_free(p);
    EXPECT_USAGE("--clock: 'rdtsc' is not auto, tsc or monotonic", "-s", "shm:///x", "--clock",
                 "rdtsc");
    EXPECT_USAGE("--clock tsc times closed-loop ops", "-s", "shm:///x", "--clock", "tsc", "--rate",
                 "10");

    p = parse_argv("--compare", "a.json", "b.json", "--html", "o.html", "c.json", NULL);
    assert_int_equal(p->r, BENCH_ARGS_RUN);
    assert_int_equal(p->cfg.compare_count, 3);
    assert_string_equal(p->cfg.compare[0], "a.json");
    assert_string_equal(p->cfg.compare[2], "c.json");
    parse_free(p);

    EXPECT_USAGE("--rate: '0' is not a number of operations per second", "-s", "shm:///x", "--rate",
                 "0");
    EXPECT_USAGE("--rate: 'fast'", "-s", "shm:///x", "--rate", "fast");
    EXPECT_USAGE("--arrival: 'bursty' is not constant or poisson", "-s", "shm:///x", "--rate", "1",
                 "--arrival", "bursty");
    EXPECT_USAGE("add --rate OPS", "-s", "shm:///x", "--arrival", "poisson");
    EXPECT_USAGE("--processes: '0' is not a whole number in 1..64", "-s", "shm:///x", "-P", "0");
    EXPECT_USAGE("keep the product at most 1024", "-s", "shm:///x", "-P", "64", "-t", "17");
    EXPECT_USAGE("--compare needs the JSON reports", "--compare", "--html", "x.html");
    EXPECT_USAGE("add --html FILE", "--compare", "a.json");
    EXPECT_USAGE("--compare runs no benchmark", "--compare", "a.json", "--html", "x", "-s",
                 "shm:///x");
    EXPECT_USAGE("unexpected argument 'a.json'", "-s", "shm:///x", "a.json");
}

/* ------------------------------------------------------------ the table */

/* Every row: a name of lowercase letters and dashes, used once (short names
 * too), a setter, help; a value's row names its value for --help. */
static void table_rows(void **state)
{
    (void)state;
    assert_true(bench_option_count > 30);
    for (size_t i = 0; i < bench_option_count; i++) {
        const struct bench_option *o = &bench_options[i];
        assert_non_null(o->name);
        if (o->name[0] == '\0' || strspn(o->name, "abcdefghijklmnopqrstuvwxyz-") != strlen(o->name))
            fail_msg("row %zu: name '%s' is not lowercase letters and dashes", i, o->name);
        assert_non_null(o->set);
        if (o->help == NULL || o->help[0] == '\0')
            fail_msg("--%s has no help", o->name);
        if (o->kind == BENCH_ARG_REQUIRED && (o->arg == NULL || o->arg[0] == '\0'))
            fail_msg("--%s takes a value but --help does not name it", o->name);
        for (size_t j = 0; j < i; j++) {
            if (strcmp(o->name, bench_options[j].name) == 0)
                fail_msg("--%s is in the table twice", o->name);
            if (o->short_name != 0 && o->short_name == bench_options[j].short_name)
                fail_msg("-%c is both --%s and --%s", o->short_name, bench_options[j].name, o->name);
        }
    }
    assert_non_null(bench_options[0].section); /* --help starts with a section */
}

/* --help lists every row: its names, the first words of its help, and no
 * placeholder left unfilled. */
static void help_lists_every_option(void **state)
{
    (void)state;
    struct parse *p = parse_argv("--help", NULL);
    assert_int_equal(p->r, BENCH_ARGS_EXIT_OK);
    assert_string_equal(p->err, "");
    for (size_t i = 0; i < bench_option_count; i++) {
        const struct bench_option *o = &bench_options[i];
        char want[128];
        if (o->short_name != 0)
            snprintf(want, sizeof want, "\n  -%c, --%s%s%s", o->short_name, o->name,
                     o->arg ? " " : "", o->arg ? o->arg : "");
        else
            snprintf(want, sizeof want, "\n      --%s%s%s", o->name, o->arg ? " " : "",
                     o->arg ? o->arg : "");
        const char *at = strstr(p->out, want);
        if (at == NULL || o->help == NULL) {
            fail_msg("--help does not list '%s' (or the row has no help)", want);
            continue;
        }
        size_t n = strcspn(o->help, "{\n"); /* the help's first words, before any placeholder */
        n = n < 60 ? n : 60;
        memcpy(want, o->help, n);
        want[n] = '\0';
        if (strstr(at, want) == NULL)
            fail_msg("--help does not show --%s's help '%s'", o->name, want);
        if (o->section != NULL && strstr(p->out, o->section) == NULL)
            fail_msg("--help lacks the section '%s'", o->section);
    }
    if (strchr(p->out, '{') != NULL || strchr(p->out, '}') != NULL)
        fail_msg("--help has a placeholder left: %s", strchr(p->out, '{'));
    parse_free(p);
}

/* Every value is checked: an empty one is refused naming the option (exit
 * status 2), and a switch refuses --NAME=VALUE. */
static void every_value_checked(void **state)
{
    (void)state;
    for (size_t i = 0; i < bench_option_count; i++) {
        const struct bench_option *o = &bench_options[i];
        char opt[64], needle[80];
        struct parse *p;
        if (o->kind == BENCH_ARG_REQUIRED) {
            snprintf(opt, sizeof opt, "--%s", o->name);
            p = parse_argv("-s", "shm:///a", opt, "", NULL);
            snprintf(needle, sizeof needle, "--%s: ", o->name);
        } else {
            snprintf(opt, sizeof opt, "--%s=yes", o->name);
            p = parse_argv("-s", "shm:///a", opt, NULL);
            snprintf(needle, sizeof needle, "--%s takes no value", o->name);
        }
        if (p->r != BENCH_ARGS_USAGE || strstr(p->err, needle) == NULL)
            fail_msg("%s: result %d, message '%s' (wanted exit status 2 and '%s')", opt, p->r,
                     p->err, needle);
        parse_free(p);
    }
}

/* A row's default is what a command line without the option gets: giving
 * it explicitly changes nothing in the row's field. (--rate 1 on both: an
 * explicit --arrival needs an open loop.) */
static void defaults_from_table(void **state)
{
    (void)state;
    char *base[] = { (char *)"rkv-bench", (char *)"-s", (char *)"shm:///a",
                     (char *)"--rate",    (char *)"1",  NULL };
    struct parse *bare = parse_vec(5, base);
    assert_int_equal(bare->r, BENCH_ARGS_RUN);
    for (size_t i = 0; i < bench_option_count; i++) {
        const struct bench_option *o = &bench_options[i];
        char opt[64];
        char *argv[8] = { base[0], base[1], base[2], base[3], base[4], opt, NULL, NULL };
        int argc = 6;
        if (o->def == NULL)
            continue;
        snprintf(opt, sizeof opt, "--%s", o->name);
        if (o->kind == BENCH_ARG_REQUIRED)
            argv[argc++] = (char *)o->def;
        struct parse *p = parse_vec(argc, argv);
        if (p->r != BENCH_ARGS_RUN)
            fail_msg("%s %s: its own default is refused: %s", opt, o->def, p->err);
        assert_true(o->size > 0);
        if (memcmp((char *)&p->cfg + o->offset, (char *)&bare->cfg + o->offset, o->size) != 0)
            fail_msg("%s %s is not what the parser starts from", opt, o->def);
        parse_free(p);
    }
    parse_free(bare);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(defaults),
        cmocka_unit_test(every_flag),
        cmocka_unit_test(help_and_version),
        cmocka_unit_test(bad_values),
        cmocka_unit_test(workloads),
        cmocka_unit_test(open_loop_and_outputs),
        cmocka_unit_test(cache_workload),
        cmocka_unit_test(table_rows),
        cmocka_unit_test(help_lists_every_option),
        cmocka_unit_test(every_value_checked),
        cmocka_unit_test(defaults_from_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
