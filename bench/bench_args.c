/* bench_args.c — see bench_args.h.
 *
 * The options are a table (bench_options[], like server/config.c's
 * settings): one row per option with its names, what it takes, its default,
 * its help and the setter that applies a value, mostly a generic one writing
 * the row's field of struct bench_config within the row's range. The
 * defaults, the parser and --help all read the table; what spans several
 * options is checked after the whole command line (check_combination).
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "bench_args.h"
#include "rkv.h"
#include "server_list.h"
#include "util.h"
#include "workload.h"

/* The skew of zipf and latest when none is given (also a preset's). */
#define DEFAULT_THETA 0.99

/* Which settings the command line gave explicitly (a workload preset fills
 * in only the others, whatever the order of the flags). */
enum {
    SET_GET_RATIO = 1u << 0,
    SET_DIST = 1u << 1,
    SET_ARRIVAL = 1u << 2,
    SET_COMPARE = 1u << 3, /* --compare seen: bare arguments are report files */
    SET_CONNECTIONS = 1u << 4,
    SET_DURATION = 1u << 5,
    SET_PRELOAD = 1u << 6,        /* --preload or --no-preload given */
    SET_WORKLOAD_FLAGS = 1u << 7, /* --keys, --key-size, --value-size, --dist, ratios */
    SET_TRACE = 1u << 8,
};

static void usage_error(FILE *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void usage_error(FILE *err, const char *fmt, ...)
{
    va_list ap;
    fputs("rkv-bench: ", err);
    va_start(ap, fmt);
    vfprintf(err, fmt, ap);
    va_end(ap);
    fputs("\n(rkv-bench --help lists every option)\n", err);
}

/* A finite decimal number in [min, max]. */
static bool parse_double(const char *s, double min, double max, double *out)
{
    if (s == NULL || *s == '\0' || isspace((unsigned char)*s))
        return false;
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (errno != 0 || *end != '\0' || !isfinite(v) || v < min || v > max)
        return false;
    *out = v;
    return true;
}

/* Seconds as "10", "2.5s", "500ms", "1m", "1h" into [0, BENCH_MAX_SECONDS]. */
static bool parse_seconds(const char *s, double *out)
{
    if (s == NULL || !(isdigit((unsigned char)*s) || *s == '.'))
        return false;
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (errno != 0 || !isfinite(v))
        return false;
    if (strcmp(end, "ms") == 0)
        v /= 1000;
    else if (strcmp(end, "m") == 0 || strcmp(end, "min") == 0)
        v *= 60;
    else if (strcmp(end, "h") == 0)
        v *= 3600;
    else if (*end != '\0' && strcmp(end, "s") != 0)
        return false;
    if (v < 0 || v > BENCH_MAX_SECONDS)
        return false;
    *out = v;
    return true;
}

/* A byte count: "0", "4096", "4K", "1M" (binary units). */
static bool parse_bytes(const char *s, uint64_t *out)
{
    if (s != NULL && strcmp(s, "0") == 0) {
        *out = 0;
        return true;
    }
    return rkv_parse_size(s, out);
}

/* "N" or "MIN-MAX" with both in [lo, hi] and MIN <= MAX. */
static bool parse_range(const char *s, uint32_t lo, uint32_t hi, struct bench_range *out)
{
    char first[32];
    const char *dash = strchr(s, '-');
    uint64_t a, b;
    if (dash == NULL) {
        if (!parse_bytes(s, &a))
            return false;
        b = a;
    } else {
        size_t n = (size_t)(dash - s);
        if (n == 0 || n >= sizeof first)
            return false;
        memcpy(first, s, n);
        first[n] = '\0';
        if (!parse_bytes(first, &a) || !parse_bytes(dash + 1, &b))
            return false;
    }
    if (a < lo || b > hi || a > b)
        return false;
    out->min = (uint32_t)a;
    out->max = (uint32_t)b;
    return true;
}

/* "uniform" | "zipf[:THETA]" | "latest[:THETA]". */
static bool parse_dist(const char *s, enum bench_dist *dist, double *theta)
{
    const char *colon = strchr(s, ':');
    size_t n = colon ? (size_t)(colon - s) : strlen(s);
    double t = DEFAULT_THETA;
    if (n == 7 && strncmp(s, "uniform", 7) == 0 && colon == NULL) {
        *dist = BENCH_DIST_UNIFORM;
        return true;
    }
    if (colon != NULL && (!parse_double(colon + 1, 0, 1, &t) || t <= 0 || t >= 1))
        return false;
    if (n == 4 && strncmp(s, "zipf", 4) == 0)
        *dist = BENCH_DIST_ZIPF;
    else if (n == 6 && strncmp(s, "latest", 6) == 0)
        *dist = BENCH_DIST_LATEST;
    else
        return false;
    *theta = t;
    return true;
}

/* ------------------------------------------------------------ setters */

static void *field(struct bench_config *cfg, const struct bench_option *o)
{
    return (char *)cfg + o->offset;
}

/* An unsigned value into a field of any of the integer widths used
 * (unsigned, uint64_t, and the enums of choices). */
static void store_uint(void *dst, size_t size, uint64_t v)
{
    switch (size) {
    case 1: *(uint8_t *)dst = (uint8_t)v; break;
    case 2: *(uint16_t *)dst = (uint16_t)v; break;
    case 4: *(uint32_t *)dst = (uint32_t)v; break;
    default: *(uint64_t *)dst = v; break;
    }
}

#define SETTER(name)                                                                          \
    static enum bench_opt_result name(struct bench_config *cfg, const struct bench_option *o, \
                                      const char *v, unsigned *set, FILE *out, FILE *err)

/* A whole number in min..max. */
SETTER(set_uint)
{
    (void)set, (void)out, (void)err;
    uint64_t u;
    if (!rkv_parse_u64(v, o->min, o->max, &u))
        return BENCH_OPT_BAD;
    store_uint(field(cfg, o), o->size, u);
    return BENCH_OPT_OK;
}

/* A number in min..max (above min with above_min). */
SETTER(set_double)
{
    (void)set, (void)out, (void)err;
    double d;
    if (!parse_double(v, (double)o->min, (double)o->max, &d) || (o->above_min && d <= (double)o->min))
        return BENCH_OPT_BAD;
    *(double *)field(cfg, o) = d;
    return BENCH_OPT_OK;
}

/* A time ("10", "2.5s", "500ms", "1m", "1h") in min..max seconds. */
SETTER(set_seconds)
{
    (void)set, (void)out, (void)err;
    double d;
    if (!parse_seconds(v, &d) || d < (double)o->min || d > (double)o->max ||
        (o->above_min && d <= (double)o->min))
        return BENCH_OPT_BAD;
    *(double *)field(cfg, o) = d;
    return BENCH_OPT_OK;
}

/* "N" or "MIN-MAX" bytes within min..max. */
SETTER(set_range)
{
    (void)set, (void)out, (void)err;
    return parse_range(v, (uint32_t)o->min, (uint32_t)o->max, field(cfg, o)) ? BENCH_OPT_OK
                                                                             : BENCH_OPT_BAD;
}

/* A non-empty string, kept (argv outlives the config). */
SETTER(set_text)
{
    (void)set, (void)out, (void)err;
    if (*v == '\0')
        return BENCH_OPT_BAD;
    *(const char **)field(cfg, o) = v;
    return BENCH_OPT_OK;
}

/* One of the row's choices. */
SETTER(set_choice)
{
    (void)set, (void)out, (void)err;
    for (const struct bench_choice *c = o->choices; c->name != NULL; c++) {
        if (strcmp(v, c->name) == 0) {
            store_uint(field(cfg, o), o->size, (uint64_t)c->value);
            return BENCH_OPT_OK;
        }
    }
    return BENCH_OPT_BAD;
}

/* A switch that sets its bool; set_false, one that clears it. */
SETTER(set_true)
{
    (void)v, (void)set, (void)out, (void)err;
    *(bool *)field(cfg, o) = true;
    return BENCH_OPT_OK;
}

SETTER(set_false)
{
    (void)v, (void)set, (void)out, (void)err;
    *(bool *)field(cfg, o) = false;
    return BENCH_OPT_OK;
}

SETTER(set_server)
{
    (void)o, (void)set, (void)out;
    char msg[640];
    if (server_list_add(&cfg->servers, &cfg->server_count, v, true, msg, sizeof msg))
        return BENCH_OPT_OK;
    usage_error(err, "%s", msg);
    return BENCH_OPT_REFUSED;
}

/* --requests: a whole number; given without --duration, the run has no
 * time limit (the default duration is dropped, whatever the order). */
SETTER(set_requests)
{
    enum bench_opt_result r = set_uint(cfg, o, v, set, out, err);
    if (r == BENCH_OPT_OK && !(*set & SET_DURATION))
        cfg->duration_s = 0;
    return r;
}

SETTER(set_dist)
{
    (void)o, (void)set, (void)out, (void)err;
    return parse_dist(v, &cfg->dist, &cfg->theta) ? BENCH_OPT_OK : BENCH_OPT_BAD;
}

/* A YCSB letter; apply_workload takes the preset once every flag is known. */
SETTER(set_workload)
{
    (void)o, (void)set, (void)out, (void)err;
    if (strlen(v) != 1 || !isalpha((unsigned char)v[0]))
        return BENCH_OPT_BAD;
    cfg->workload = (char)toupper((unsigned char)v[0]);
    return BENCH_OPT_OK;
}

/* "off", or a number of entries within min..max. */
SETTER(set_location_cache)
{
    (void)set, (void)out, (void)err;
    uint64_t u;
    if (strcmp(v, "off") == 0)
        cfg->location_cache = UINT_MAX;
    else if (rkv_parse_u64(v, o->min, o->max, &u))
        cfg->location_cache = (unsigned)u;
    else
        return BENCH_OPT_BAD;
    return BENCH_OPT_OK;
}

/* --trace FILE: the run lasts as long as the trace, unless --duration
 * was given too (whatever the order). */
SETTER(set_trace)
{
    enum bench_opt_result r = set_text(cfg, o, v, set, out, err);
    if (r == BENCH_OPT_OK && !(*set & SET_DURATION))
        cfg->duration_s = 0;
    return r;
}

/* --compare: the bare arguments that follow are reports (add_compare). */
SETTER(set_compare)
{
    (void)cfg, (void)o, (void)v, (void)set, (void)out, (void)err;
    return BENCH_OPT_OK;
}

SETTER(show_help)
{
    (void)cfg, (void)o, (void)v, (void)set, (void)err;
    bench_usage(out);
    return BENCH_OPT_EXIT;
}

SETTER(show_version)
{
    (void)cfg, (void)o, (void)v, (void)set, (void)err;
    fprintf(out, "rkv-bench %s\n", RKV_VERSION_STRING);
    return BENCH_OPT_EXIT;
}

/* ------------------------------------------------------------ the table */

static const struct bench_choice bucket_reads_choices[] = {
    { "auto", RKV_BUCKET_READS_AUTO },
    { "together", RKV_BUCKET_READS_TOGETHER },
    { "first", RKV_BUCKET_READS_FIRST },
    { NULL, 0 },
};
static const struct bench_choice protocol_choices[] = {
    { "rkv", BENCH_PROTO_RKV },
    { "memcache", BENCH_PROTO_MEMCACHE },
    { NULL, 0 },
};
static const struct bench_choice arrival_choices[] = {
    { "constant", BENCH_ARRIVAL_CONSTANT },
    { "poisson", BENCH_ARRIVAL_POISSON },
    { NULL, 0 },
};
static const struct bench_choice clock_choices[] = {
    { "auto", BENCH_CLOCK_AUTO },
    { "tsc", BENCH_CLOCK_TSC },
    { "monotonic", BENCH_CLOCK_MONOTONIC },
    { NULL, 0 },
};

#define F(f) \
    .offset = offsetof(struct bench_config, f), .size = sizeof(((struct bench_config *)0)->f)
#define VALUE(metavar) .kind = BENCH_ARG_REQUIRED, .arg = (metavar)

/* In --help's order. */
const struct bench_option bench_options[] = {
    { .name = "server",
      .short_name = 's',
      VALUE("URI"),
      .set = set_server,
      .section = "Servers and threads:",
      .help = "server to load: shm://PATH or rdma://HOST:PORT; repeat\n"
              "(or separate with commas) to shard keys over several" },
    { .name = "threads",
      .short_name = 't',
      VALUE("N"),
      .def = "1",
      .set = set_uint,
      F(threads),
      .min = 1,
      .max = BENCH_MAX_THREADS,
      .help = "client threads, each with its own handle ({min}..{max}; {default})" },
    { .name = "window",
      .short_name = 'w',
      VALUE("N"),
      .def = "1",
      .set = set_uint,
      F(window),
      .min = 1,
      .max = BENCH_MAX_WINDOW,
      .help = "operations in flight per thread ({min}..{max}; {default}): a steady\n"
              "window through rkv_submit, each completion's slot\n"
              "refilled at once; the report gives the mean depth" },
    { .name = "lockstep",
      .set = set_true,
      F(lockstep),
      .help = "the window as batches of N through rkv_mget/rkv_mput,\n"
              "each waiting for its slowest op (the open loop's way)" },
    { .name = "shared-handle",
      .set = set_true,
      F(shared_handle),
      .help = "one handle (RKV_OPT_SHARED) for all of a process's\n"
              "threads instead of one each; the counters are then the\n"
              "handle's, read by thread 0 (--window 1 or --lockstep)" },
    { .name = "auth",
      VALUE("SECRET"),
      .set = set_text,
      F(auth),
      .help = "shared secret the servers expect" },
    { .name = "timeout",
      VALUE("MS"),
      .set = set_uint,
      F(timeout_ms),
      .min = 1,
      .max = 3600000,
      .help = "per-operation timeout ({min}..{max}; library default)",
      .bad = "is not a number of milliseconds in {min}..{max}" },
    { .name = "location-cache",
      VALUE("N|off"),
      .set = set_location_cache,
      F(location_cache),
      .min = 1,
      .max = UINT_MAX - 1,
      .help = "client location-cache entries (library default)",
      .bad = "is not 'off' or a number of entries of at least {min}" },
    { .name = "bucket-reads",
      VALUE("auto|together|first"),
      .def = "auto",
      .set = set_choice,
      F(bucket_reads),
      .choices = bucket_reads_choices,
      .help = "how a cold GET reads its two buckets\n"
              "(rkv_options.bucket_reads; default {default})" },
    { .name = "processes",
      .short_name = 'P',
      VALUE("N"),
      .def = "1",
      .set = set_uint,
      F(processes),
      .min = 1,
      .max = BENCH_MAX_PROCESSES,
      .help = "fork N client processes, each with --threads threads\n"
              "and handles; their histograms merge exactly ({min}..{max}; {default})" },
    { .name = "protocol",
      VALUE("P"),
      .def = "rkv",
      .set = set_choice,
      F(protocol),
      .choices = protocol_choices,
      .help = "rkv (librkv; default) or memcache: the memcached text\n"
              "protocol over TCP to one -s tcp://HOST:PORT (rkv's\n"
              "tcp:// door or a memcached); a batch is pipelined over\n"
              "the thread's connections" },
    { .name = "connections",
      VALUE("N"),
      .set = set_uint,
      F(connections),
      .min = 1,
      .max = (uint64_t)BENCH_MAX_THREADS * BENCH_MAX_WINDOW,
      .set_bit = SET_CONNECTIONS,
      .help = "memcache: TCP connections in all (a multiple of\n"
              "threads x processes, at most that x window; default\n"
              "threads x processes x window: one request in flight each)" },

    { .name = "rate",
      VALUE("OPS"),
      .set = set_double,
      F(rate),
      .min = 0,
      .max = (uint64_t)BENCH_MAX_RATE,
      .above_min = true,
      .section = "Open loop (default: closed loop, each thread waits for a reply before the next):",
      .help = "send OPS operations per second in total (split over\n"
              "threads and processes) on a fixed schedule; latency is\n"
              "measured from each operation's intended send time, so\n"
              "it includes the queueing a late reply causes",
      .bad = "is not a number of operations per second above {min} and up to {max}" },
    { .name = "arrival",
      VALUE("KIND"),
      .def = "constant",
      .set = set_choice,
      F(arrival),
      .choices = arrival_choices,
      .set_bit = SET_ARRIVAL,
      .help = "constant (default) or poisson spacing of the sends" },

    { .name = "duration",
      .short_name = 'd',
      VALUE("TIME"),
      .def = "10s",
      .set = set_seconds,
      F(duration_s),
      .min = 0,
      .max = (uint64_t)BENCH_MAX_SECONDS,
      .above_min = true,
      .set_bit = SET_DURATION,
      .section = "How long:",
      .help = "measure for TIME: 10, 2.5s, 500ms, 1m (default {default};\n"
              "none with --requests alone)",
      .bad = "is not a time above {min} and up to {max} s (e.g. 10, 2.5s, 500ms, 1m)" },
    { .name = "requests",
      .short_name = 'n',
      VALUE("N"),
      .set = set_requests,
      F(requests),
      .min = 1,
      .max = UINT64_MAX / 2,
      .help = "stop after N operations in total (over all threads)",
      .bad = "is not a whole number of at least {min}" },
    { .name = "warmup",
      VALUE("TIME"),
      .def = "0",
      .set = set_seconds,
      F(warmup_s),
      .min = 0,
      .max = (uint64_t)BENCH_MAX_SECONDS,
      .help = "run the workload TIME before measuring ({default})",
      .bad = "is not a time from {min} to {max} s (e.g. 2, 500ms)" },

    { .name = "keys",
      .short_name = 'k',
      VALUE("N"),
      .def = "100000",
      .set = set_uint,
      F(keys),
      .min = 1,
      .max = BENCH_MAX_KEYS,
      .section = "What:",
      .set_bit = SET_WORKLOAD_FLAGS,
      .help = "key space size (1..2^40; {default})" },
    { .name = "key-size",
      VALUE("N|MIN-MAX"),
      .def = "16",
      .set = set_range,
      F(key_size),
      .min = BENCH_MIN_KEY_SIZE,
      .max = BENCH_MAX_KEY_SIZE,
      .set_bit = SET_WORKLOAD_FLAGS,
      .help = "key bytes ({min}..{max}; {default}); keys are \"k\" + index",
      .bad = "is not N or MIN-MAX with {min} <= MIN <= MAX <= {max}" },
    { .name = "value-size",
      VALUE("N|MIN-MAX"),
      .def = "32",
      .set = set_range,
      F(value_size),
      .min = 0,
      .max = BENCH_MAX_VALUE,
      .set_bit = SET_WORKLOAD_FLAGS,
      .help = "value bytes (0..1M; {default}); K/M suffixes accepted",
      .bad = "is not N or MIN-MAX with {min} <= MIN <= MAX <= {max} (1M)" },
    { .name = "get-ratio",
      .short_name = 'r',
      VALUE("R"),
      .def = "0.9",
      .set = set_double,
      F(get_ratio),
      .min = 0,
      .max = 1,
      .set_bit = SET_GET_RATIO | SET_WORKLOAD_FLAGS,
      .help = "share of GETs, 0..1 ({default}); the rest are writes" },
    { .name = "delete-ratio",
      VALUE("R"),
      .def = "0",
      .set = set_double,
      F(delete_ratio),
      .min = 0,
      .max = 1,
      .set_bit = SET_WORKLOAD_FLAGS,
      .help = "share of DELETEs, 0..1 ({default})" },
    { .name = "dist",
      VALUE("D"),
      .def = "uniform",
      .set = set_dist,
      F(dist),
      .set_bit = SET_DIST,
      .help = "key choice: uniform, zipf[:THETA], latest[:THETA]\n"
              "(THETA in (0,1), default 0.99; default dist {default})",
      .bad = "is not uniform, zipf[:THETA] or latest[:THETA] with 0 < THETA < 1" },
    { .name = "workload",
      VALUE("A..F"),
      .set = set_workload,
      F(workload),
      .help = "YCSB preset: A 50% read/50% update zipf; B 95/5 zipf;\n"
              "C read-only zipf; D 95% read/5% insert, read-latest;\n"
              "F 50% read/50% read-modify-write (get + CAS put).\n"
              "E (range scans) does not apply to a key-value cache.\n"
              "Flags given explicitly override the preset.",
      .bad = "is not a YCSB workload; use A, B, C, D or F" },
    { .name = "preload",
      .def = "on",
      .set = set_true,
      F(preload),
      .set_bit = SET_PRELOAD,
      .help = "write every key once before measuring (default)" },
    { .name = "no-preload",
      .set = set_false,
      F(preload),
      .set_bit = SET_PRELOAD,
      .help = "start from whatever the server holds" },
    { .name = "verify",
      .set = set_true,
      F(verify),
      .help = "values carry their key and version; every GET checks\n"
              "them, and any bad value fails the run (exit 1)" },
    { .name = "seed",
      VALUE("N"),
      .def = "1",
      .set = set_uint,
      F(seed),
      .min = 0,
      .max = UINT64_MAX,
      .help = "random seed ({default}); same seed, same key sequence" },

    { .name = "fill-on-miss",
      .set = set_true,
      F(fill_on_miss),
      .section = "Cache workload:",
      .help = "cache-aside: every GET that misses is followed by a SET\n"
              "of its key (value of --value-size, or the trace line's),\n"
              "as an application fronting a database does; the report\n"
              "gives the hit rate (hits / GETs), overall and per second.\n"
              "The SETs show as PUTs and do not count toward --requests" },
    { .name = "trace",
      VALUE("FILE"),
      .set = set_trace,
      F(trace_path),
      .set_bit = SET_TRACE,
      .help = "replay FILE, a key trace in Twitter's cache-trace CSV\n"
              "(timestamp,key,key size,value size,client id,operation,\n"
              "TTL), in order and as fast as the window allows (threads\n"
              "take successive batches of --window lines); keys are the\n"
              "key padded or cut to its size, values of the line's size.\n"
              "The whole file is validated first: a bad line is an error\n"
              "with its line number and nothing is sent (exit 2). Lines\n"
              "with a key or value over the server's limits are skipped\n"
              "and counted. Runs until the trace ends (or --duration,\n"
              "--requests lines); no preload; --keys, --dist, ratios and\n"
              "--value-size do not apply" },

    { .name = "json",
      VALUE("FILE"),
      .set = set_text,
      F(json_path),
      .section = "Output:",
      .help = "also write the report as JSON to FILE ('-': stdout,\n"
              "and the text report goes to stderr)" },
    { .name = "hist-file",
      VALUE("PREFIX"),
      .set = set_text,
      F(hist_prefix),
      .help = "write each operation type's full latency distribution\n"
              "in HdrHistogram's text format to PREFIX-get.hgrm,\n"
              "PREFIX-put.hgrm, ... (microseconds)" },
    { .name = "timeseries",
      VALUE("FILE"),
      .set = set_text,
      F(timeseries_path),
      .help = "per-second CSV: ops/s, p50, p99, errors per type" },
    { .name = "html",
      VALUE("FILE"),
      .set = set_text,
      F(html_path),
      .help = "the report as one self-contained HTML page with charts" },
    { .name = "compare",
      .arg = "A.json B.json ...",
      .set = set_compare,
      .set_bit = SET_COMPARE,
      .help = "draw saved --json reports on one page with --html FILE\n"
              "(runs nothing)" },
    { .name = "clock",
      VALUE("C"),
      .def = "auto",
      .set = set_choice,
      F(clock),
      .choices = clock_choices,
      .help = "what a closed-loop op is timed with: auto (default:\n"
              "the TSC where the kernel's clocksource is tsc, else\n"
              "CLOCK_MONOTONIC), tsc or monotonic; the report names it" },
    { .name = "quiet", .short_name = 'q', .set = set_true, F(quiet), .help = "no progress lines" },
    { .name = "help", .short_name = 'h', .set = show_help, .help = "this text" },
    { .name = "version", .short_name = 'V', .set = show_version, .help = "the version" },
};
const size_t bench_option_count = RKV_ARRAY_SIZE(bench_options);

#undef VALUE
#undef F

/* A row's text with {min}, {max} and {default} filled in. */
static void expand(const struct bench_option *o, const char *text, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = '\0';
    for (const char *p = text; *p != '\0' && n + 1 < len;) {
        char num[32];
        const char *put = NULL;
        size_t skip = 0;
        if (strncmp(p, "{min}", 5) == 0) {
            snprintf(num, sizeof num, "%llu", (unsigned long long)o->min);
            put = num, skip = 5;
        } else if (strncmp(p, "{max}", 5) == 0) {
            snprintf(num, sizeof num, "%llu", (unsigned long long)o->max);
            put = num, skip = 5;
        } else if (strncmp(p, "{default}", 9) == 0) {
            put = o->def ? o->def : "none", skip = 9;
        }
        if (put == NULL) {
            buf[n++] = *p++;
            buf[n] = '\0';
            continue;
        }
        n += (size_t)snprintf(buf + n, len - n, "%s", put);
        if (n >= len)
            n = len - 1;
        p += skip;
    }
}

/* The message after "--NAME: 'VALUE' " for a value the row's setter refused:
 * the row's own, or its setter's kind ("is not auto, tsc or monotonic"). */
static void bad_text(const struct bench_option *o, char *buf, size_t len)
{
    if (o->bad != NULL) {
        expand(o, o->bad, buf, len);
    } else if (o->set == set_uint) {
        expand(o, "is not a whole number in {min}..{max}", buf, len);
    } else if (o->set == set_double) {
        expand(o, "is not a number from {min} to {max}", buf, len);
    } else if (o->choices != NULL) {
        size_t n = (size_t)snprintf(buf, len, "is not");
        for (const struct bench_choice *c = o->choices; c->name != NULL && n < len; c++)
            n += (size_t)snprintf(buf + n, len - n, "%s%s",
                                  c == o->choices     ? " "
                                  : c[1].name == NULL ? " or "
                                                      : ", ",
                                  c->name);
    } else {
        snprintf(buf, len, "is not a valid value");
    }
}

/* The defaults: zero, then each row's default through its own setter. */
static void set_defaults(struct bench_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->theta = DEFAULT_THETA;
    for (size_t i = 0; i < bench_option_count; i++) {
        const struct bench_option *o = &bench_options[i];
        unsigned ignored = 0;
        if (o->def == NULL)
            continue;
        enum bench_opt_result r = o->set(cfg, o, o->kind == BENCH_ARG_NONE ? NULL : o->def,
                                         &ignored, stdout, stderr);
        if (r != BENCH_OPT_OK)
            abort(); /* a default its own setter refuses: the table is wrong (test_bench_args) */
    }
}

/* --help: the table, section by section; an option's help starts in column
 * 27 (on the next line when its names are too long) and continues there. */
void bench_usage(FILE *out)
{
    enum { HELP_COL = 26 };
    fputs("Usage: rkv-bench -s URI [options]\n"
          "Load generator for rkv: drives one or more servers through librkv and reports\n"
          "throughput, latency percentiles and the transport's per-operation counters.\n",
          out);
    for (size_t i = 0; i < bench_option_count; i++) {
        const struct bench_option *o = &bench_options[i];
        char left[96], help[1024];
        if (o->section != NULL)
            fprintf(out, "\n%s\n", o->section);
        if (o->short_name != 0)
            snprintf(left, sizeof left, "  -%c, --%s%s%s", o->short_name, o->name,
                     o->arg ? " " : "", o->arg ? o->arg : "");
        else
            snprintf(left, sizeof left, "      --%s%s%s", o->name, o->arg ? " " : "",
                     o->arg ? o->arg : "");
        expand(o, o->help, help, sizeof help);
        size_t w = strlen(left);
        if (w + 2 <= HELP_COL)
            fprintf(out, "%s%*s", left, (int)(HELP_COL - w), "");
        else if (w + 2 <= HELP_COL + 8)
            fprintf(out, "%s  ", left);
        else
            fprintf(out, "%s\n%*s", left, HELP_COL, "");
        for (const char *line = help; *line != '\0';) {
            const char *nl = strchr(line, '\n');
            size_t n = nl ? (size_t)(nl - line) : strlen(line);
            if (line != help)
                fprintf(out, "%*s", HELP_COL, "");
            fprintf(out, "%.*s\n", (int)n, line);
            line += n + (nl != NULL);
        }
    }
    fputs("\nExit status: 0 success, 1 the run failed (connection, errors, verification),\n"
          "2 bad command line.\n",
          out);
}

/* YCSB presets; only settings not given explicitly are taken. */
static bool apply_workload(struct bench_config *cfg, unsigned set, FILE *err)
{
    double get = 0;
    enum bench_write_kind kind = BENCH_WRITE_UPDATE;
    enum bench_dist dist = BENCH_DIST_ZIPF;
    switch (cfg->workload) {
    case 0: return true;
    case 'A': get = 0.5; break;
    case 'B': get = 0.95; break;
    case 'C': get = 1.0; break;
    case 'D':
        get = 0.95;
        kind = BENCH_WRITE_INSERT;
        dist = BENCH_DIST_LATEST;
        break;
    case 'F':
        get = 0.5;
        kind = BENCH_WRITE_RMW;
        break;
    case 'E':
        usage_error(err, "--workload E is YCSB's short range scans, which a key-value cache "
                         "cannot serve (rkv keeps no key order); use A, B, C, D or F");
        return false;
    default:
        usage_error(err, "--workload: '%c' is not a YCSB workload; use A, B, C, D or F",
                    cfg->workload);
        return false;
    }
    cfg->write_kind = kind;
    if (!(set & SET_GET_RATIO))
        cfg->get_ratio = get;
    if (!(set & SET_DIST))
        cfg->dist = dist;
    return true;
}

/* --protocol against the servers, --connections against the threads. */
static bool check_protocol(struct bench_config *cfg, unsigned set, FILE *err)
{
    bool tcp = strstr(cfg->servers, "tcp://") != NULL;
    unsigned clients = cfg->threads * cfg->processes;
    if (cfg->protocol == BENCH_PROTO_RKV) {
        if (tcp) {
            usage_error(err,
                        "a tcp:// server speaks the memcached protocol; add --protocol memcache");
            return false;
        }
        if (set & SET_CONNECTIONS) {
            usage_error(err, "--connections sets the TCP connections of --protocol memcache; librkv "
                             "keeps one connection per server and thread");
            return false;
        }
        return true;
    }
    if (!tcp || cfg->server_count != 1) {
        usage_error(err, "--protocol memcache drives one server: give one -s tcp://HOST:PORT");
        return false;
    }
    if (cfg->auth != NULL) {
        usage_error(err, "--auth: memcached clients cannot present rkv's secret; drop --auth");
        return false;
    }
    if (!(set & SET_CONNECTIONS))
        cfg->connections = clients * cfg->window;
    if (cfg->connections % clients != 0 || cfg->connections / clients > cfg->window) {
        usage_error(err,
                    "--connections %u: give each of the %u client threads the same number, "
                    "at most --window %u (a multiple of %u up to %u)",
                    cfg->connections, clients, cfg->window, clients, clients * cfg->window);
        return false;
    }
    return true;
}

/* --trace against the flags that make the generated workload. */
static bool check_trace(struct bench_config *cfg, unsigned set, FILE *err)
{
    const char *clash = cfg->rate > 0                         ? "--rate"
                        : cfg->workload                       ? "--workload"
                        : cfg->verify                         ? "--verify"
                        : (set & SET_PRELOAD) && cfg->preload ? "--preload"
                        : (set & SET_WORKLOAD_FLAGS) || (set & SET_DIST)
                            ? "--keys, --key-size, "
                              "--value-size, --dist and the ratios"
                        : cfg->processes > 1 ? "--processes"
                                             : NULL;
    if (clash != NULL) {
        usage_error(err,
                    "--trace replays the trace's own keys, sizes and operations in order, as "
                    "fast as it can, from one process; drop %s",
                    clash);
        return false;
    }
    cfg->preload = false;
    return true;
}

/* Checks that span several flags, after all are known. */
static bool check_combination(struct bench_config *cfg, unsigned set, FILE *err)
{
    if (set & SET_COMPARE) {
        if (cfg->compare_count == 0) {
            usage_error(err,
                        "--compare needs the JSON reports to draw: --compare A.json B.json --html FILE");
            return false;
        }
        if (cfg->html_path == NULL) {
            usage_error(err, "--compare draws reports into an HTML page; add --html FILE");
            return false;
        }
        if (cfg->servers != NULL || cfg->json_path != NULL || cfg->hist_prefix != NULL ||
            cfg->timeseries_path != NULL) {
            usage_error(err,
                        "--compare runs no benchmark; drop -s, --json, --hist-file and --timeseries");
            return false;
        }
        return true;
    }
    if ((set & SET_TRACE) && !check_trace(cfg, set, err))
        return false;
    if (cfg->clock == BENCH_CLOCK_TSC && cfg->rate > 0) {
        usage_error(err, "--clock tsc times closed-loop ops; an open-loop run (--rate) times from "
                         "intended send times on CLOCK_MONOTONIC: drop one of them");
        return false;
    }
    if (cfg->shared_handle && (cfg->protocol == BENCH_PROTO_MEMCACHE || cfg->trace != NULL ||
                               (cfg->window > 1 && !cfg->lockstep))) {
        usage_error(err, "--shared-handle shares one librkv handle between the threads: not with "
                         "--protocol memcache or --trace, and a --window over 1 needs --lockstep "
                         "(a pipelined window's completions are the handle's, not a thread's)");
        return false;
    }
    if ((set & SET_ARRIVAL) && cfg->rate == 0) {
        usage_error(err, "--arrival sets how an open-loop run spaces its sends; add --rate OPS");
        return false;
    }
    if ((uint64_t)cfg->threads * cfg->processes > BENCH_MAX_THREADS) {
        usage_error(err,
                    "--processes %u x --threads %u is %u client threads; keep the product at most %u",
                    cfg->processes, cfg->threads, cfg->processes * cfg->threads, BENCH_MAX_THREADS);
        return false;
    }
    if (cfg->json_path != NULL && cfg->timeseries_path != NULL &&
        strcmp(cfg->json_path, "-") == 0 && strcmp(cfg->timeseries_path, "-") == 0) {
        usage_error(err, "--json - and --timeseries - both want stdout; give one of them a file");
        return false;
    }
    if (cfg->servers == NULL) {
        usage_error(err, "no server given; pass -s URI (e.g. -s shm:///run/rkv/rkv.sock)");
        return false;
    }
    if (!check_protocol(cfg, set, err))
        return false;
    if (cfg->get_ratio + cfg->delete_ratio > 1.0 + 1e-9) {
        usage_error(err,
                    "--get-ratio %g plus --delete-ratio %g exceed 1; together they must be at most 1 "
                    "(the rest are writes)",
                    cfg->get_ratio, cfg->delete_ratio);
        return false;
    }
    if (cfg->verify && cfg->value_size.min < WL_VALUE_HEADER) {
        usage_error(err,
                    "--verify needs --value-size of at least %u bytes (a value carries its key "
                    "index and version); got %u",
                    WL_VALUE_HEADER, cfg->value_size.min);
        return false;
    }
    unsigned need = wl_key_min_len(cfg->keys - 1);
    if (cfg->trace_path == NULL && cfg->key_size.min < need) {
        usage_error(err,
                    "--key-size %u is too short for --keys %llu: keys are \"k\" + index and the "
                    "last one needs %u bytes; use --key-size %u or more, or fewer --keys",
                    cfg->key_size.min, (unsigned long long)cfg->keys, need, need);
        return false;
    }
    uint64_t per_thread = (uint64_t)cfg->window *
                          ((uint64_t)cfg->value_size.max * 2 + BENCH_MAX_KEY_SIZE);
    if (per_thread > BENCH_MAX_THREAD_BUFFER) {
        usage_error(err,
                    "--window %u with --value-size up to %u needs %llu MiB of buffers per thread; "
                    "keep window x value size under %llu MiB",
                    cfg->window, cfg->value_size.max, (unsigned long long)(per_thread >> 20),
                    (unsigned long long)(BENCH_MAX_THREAD_BUFFER >> 21));
        return false;
    }
    return true;
}

/* A report file after --compare. */
static bool add_compare(struct bench_config *cfg, const char *path, FILE *err)
{
    if (cfg->compare_count >= BENCH_MAX_COMPARE) {
        usage_error(err, "--compare takes at most %u reports; '%s' is one too many",
                    BENCH_MAX_COMPARE, path);
        return false;
    }
    if (cfg->compare == NULL &&
        (cfg->compare = calloc(BENCH_MAX_COMPARE, sizeof *cfg->compare)) == NULL) {
        usage_error(err, "out of memory");
        return false;
    }
    cfg->compare[cfg->compare_count++] = path;
    return true;
}

static const struct bench_option *find_long(const char *name, size_t len)
{
    for (size_t i = 0; i < bench_option_count; i++)
        if (strlen(bench_options[i].name) == len && strncmp(bench_options[i].name, name, len) == 0)
            return &bench_options[i];
    return NULL;
}

static const struct bench_option *find_short(char c)
{
    for (size_t i = 0; i < bench_option_count; i++)
        if (bench_options[i].short_name == c)
            return &bench_options[i];
    return NULL;
}

/* Applies one option with its value (NULL for a switch). */
static enum bench_args_result apply_option(struct bench_config *cfg, const struct bench_option *o,
                                           const char *v, unsigned *set, FILE *out, FILE *err)
{
    char bad[256];
    switch (o->set(cfg, o, v, set, out, err)) {
    case BENCH_OPT_OK: *set |= o->set_bit; return BENCH_ARGS_RUN;
    case BENCH_OPT_EXIT: return BENCH_ARGS_EXIT_OK;
    case BENCH_OPT_BAD:
        bad_text(o, bad, sizeof bad);
        usage_error(err, "--%s: '%s' %s", o->name, v ? v : "", bad);
        return BENCH_ARGS_USAGE;
    case BENCH_OPT_REFUSED:
    default: return BENCH_ARGS_USAGE;
    }
}

enum bench_args_result bench_parse_args(int argc, char **argv, struct bench_config *cfg, FILE *out,
                                        FILE *err)
{
    enum bench_args_result r = BENCH_ARGS_RUN;
    unsigned set = 0;
    set_defaults(cfg);
    for (int i = 1; i < argc && r == BENCH_ARGS_RUN; i++) {
        const char *a = argv[i];
        const struct bench_option *o = NULL;
        const char *value = NULL;
        if (strncmp(a, "--", 2) == 0 && a[2] != '\0') {
            const char *eq = strchr(a + 2, '=');
            size_t len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
            o = find_long(a + 2, len);
            if (o != NULL && eq != NULL) {
                if (o->kind == BENCH_ARG_NONE) {
                    usage_error(err, "--%s takes no value (got '%s')", o->name, a);
                    r = BENCH_ARGS_USAGE;
                    break;
                }
                value = eq + 1;
            }
        } else if (a[0] == '-' && a[1] != '\0' && a[1] != '-') {
            o = find_short(a[1]);
            if (o != NULL && a[2] != '\0') {
                if (o->kind == BENCH_ARG_NONE) {
                    usage_error(err, "-%c takes no value (got '%s')", a[1], a);
                    r = BENCH_ARGS_USAGE;
                    break;
                }
                value = a + 2;
            }
        } else if (set & SET_COMPARE) {
            if (!add_compare(cfg, a, err)) {
                r = BENCH_ARGS_USAGE;
                break;
            }
            continue;
        } else {
            usage_error(err, "unexpected argument '%s'; options start with - or --", a);
            r = BENCH_ARGS_USAGE;
            break;
        }
        if (o == NULL) {
            usage_error(err, "unknown option '%s'", a);
            r = BENCH_ARGS_USAGE;
            break;
        }
        if (o->kind == BENCH_ARG_REQUIRED && value == NULL) {
            if (i + 1 >= argc) {
                usage_error(err, "--%s needs a value", o->name);
                r = BENCH_ARGS_USAGE;
                break;
            }
            value = argv[++i];
        }
        r = apply_option(cfg, o, value, &set, out, err);
    }
    if (r == BENCH_ARGS_RUN && (!apply_workload(cfg, set, err) || !check_combination(cfg, set, err)))
        r = BENCH_ARGS_USAGE;
    if (r != BENCH_ARGS_RUN)
        bench_config_free(cfg);
    return r;
}

void bench_config_free(struct bench_config *cfg)
{
    free(cfg->servers);
    cfg->servers = NULL;
    free(cfg->compare);
    cfg->compare = NULL;
    cfg->compare_count = 0;
}

const char *bench_dist_string(const struct bench_config *cfg, char *buf, size_t len)
{
    switch (cfg->dist) {
    case BENCH_DIST_UNIFORM: snprintf(buf, len, "uniform"); break;
    case BENCH_DIST_ZIPF: snprintf(buf, len, "zipf:%g", cfg->theta); break;
    case BENCH_DIST_LATEST: snprintf(buf, len, "latest:%g", cfg->theta); break;
    }
    return buf;
}

void bench_mix_of(const struct bench_config *cfg, struct bench_mix *mix)
{
    double writes = 1.0 - cfg->get_ratio - cfg->delete_ratio;
    if (writes < 0)
        writes = 0;
    memset(mix, 0, sizeof *mix);
    mix->get = cfg->get_ratio;
    mix->del = cfg->delete_ratio;
    switch (cfg->write_kind) {
    case BENCH_WRITE_UPDATE: mix->put = writes; break;
    case BENCH_WRITE_INSERT: mix->insert = writes; break;
    case BENCH_WRITE_RMW: mix->rmw = writes; break;
    }
}
