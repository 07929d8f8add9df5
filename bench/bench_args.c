/* bench_args.c — see bench_args.h. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "bench_args.h"
#include "rkv.h"
#include "server_list.h"
#include "util.h"
#include "workload.h"

enum opt_id {
    OPT_SERVER, OPT_THREADS, OPT_WINDOW, OPT_DURATION, OPT_REQUESTS, OPT_KEYS,
    OPT_KEY_SIZE, OPT_VALUE_SIZE, OPT_GET_RATIO, OPT_DELETE_RATIO, OPT_DIST,
    OPT_WORKLOAD, OPT_WARMUP, OPT_PRELOAD, OPT_NO_PRELOAD, OPT_VERIFY, OPT_JSON,
    OPT_SEED, OPT_AUTH, OPT_TIMEOUT, OPT_LOCATION_CACHE, OPT_BUCKET_READS, OPT_QUIET, OPT_HELP,
    OPT_VERSION, OPT_RATE, OPT_ARRIVAL, OPT_PROCESSES, OPT_HIST_FILE, OPT_TIMESERIES,
    OPT_HTML, OPT_COMPARE, OPT_PROTOCOL, OPT_CONNECTIONS, OPT_LOCKSTEP, OPT_CLOCK,
};

/* Which settings the command line gave explicitly (a workload preset fills
 * in only the others, whatever the order of the flags). */
enum {
    SET_GET_RATIO = 1u << 0,
    SET_DIST      = 1u << 1,
    SET_ARRIVAL   = 1u << 2,
    SET_COMPARE   = 1u << 3,   /* --compare seen: bare arguments are report files */
    SET_CONNECTIONS = 1u << 4,
};

struct opt_def {
    const char *name;   /* long name without "--" */
    char short_name;    /* or 0 */
    bool has_arg;       /* takes a value */
    enum opt_id id;
};

static const struct opt_def options[] = {
    { "server",         's', true,  OPT_SERVER },
    { "threads",        't', true,  OPT_THREADS },
    { "window",         'w', true,  OPT_WINDOW },
    { "lockstep",       0,   false, OPT_LOCKSTEP },
    { "duration",       'd', true,  OPT_DURATION },
    { "requests",       'n', true,  OPT_REQUESTS },
    { "keys",           'k', true,  OPT_KEYS },
    { "key-size",       0,   true,  OPT_KEY_SIZE },
    { "value-size",     0,   true,  OPT_VALUE_SIZE },
    { "get-ratio",      'r', true,  OPT_GET_RATIO },
    { "delete-ratio",   0,   true,  OPT_DELETE_RATIO },
    { "dist",           0,   true,  OPT_DIST },
    { "workload",       0,   true,  OPT_WORKLOAD },
    { "warmup",         0,   true,  OPT_WARMUP },
    { "preload",        0,   false, OPT_PRELOAD },
    { "no-preload",     0,   false, OPT_NO_PRELOAD },
    { "verify",         0,   false, OPT_VERIFY },
    { "json",           0,   true,  OPT_JSON },
    { "seed",           0,   true,  OPT_SEED },
    { "auth",           0,   true,  OPT_AUTH },
    { "timeout",        0,   true,  OPT_TIMEOUT },
    { "location-cache", 0,   true,  OPT_LOCATION_CACHE },
    { "bucket-reads",   0,   true,  OPT_BUCKET_READS },
    { "quiet",          'q', false, OPT_QUIET },
    { "rate",           0,   true,  OPT_RATE },
    { "arrival",        0,   true,  OPT_ARRIVAL },
    { "processes",      'P', true,  OPT_PROCESSES },
    { "hist-file",      0,   true,  OPT_HIST_FILE },
    { "timeseries",     0,   true,  OPT_TIMESERIES },
    { "html",           0,   true,  OPT_HTML },
    { "compare",        0,   false, OPT_COMPARE },
    { "protocol",       0,   true,  OPT_PROTOCOL },
    { "connections",    0,   true,  OPT_CONNECTIONS },
    { "clock",          0,   true,  OPT_CLOCK },
    { "help",           'h', false, OPT_HELP },
    { "version",        'V', false, OPT_VERSION },
};

void bench_usage(FILE *out)
{
    fprintf(out,
"Usage: rkv-bench -s URI [options]\n"
"Load generator for rkv: drives one or more servers through librkv and reports\n"
"throughput, latency percentiles and the transport's per-operation counters.\n"
"\n"
"Servers and threads:\n"
"  -s, --server URI        server to load: shm://PATH or rdma://HOST:PORT; repeat\n"
"                          (or separate with commas) to shard keys over several\n"
"  -t, --threads N         client threads, each with its own handle (1..%u; 1)\n"
"  -w, --window N          operations in flight per thread (1..%u; 1): a steady\n"
"                          window through rkv_submit, each completion's slot\n"
"                          refilled at once; the report gives the mean depth\n"
"      --lockstep          the window as batches of N through rkv_mget/rkv_mput,\n"
"                          each waiting for its slowest op (the open loop's way)\n"
"      --auth SECRET       shared secret the servers expect\n"
"      --timeout MS        per-operation timeout (1..3600000; library default)\n"
"      --location-cache N|off  client location-cache entries (library default)\n"
"      --bucket-reads auto|together|first  how a cold GET reads its two buckets\n"
"                             (rkv_options.bucket_reads; default auto)\n"
"  -P, --processes N       fork N client processes, each with --threads threads\n"
"                          and handles; their histograms merge exactly (1..%u; 1)\n"
"      --protocol P        rkv (librkv; default) or memcache: the memcached text\n"
"                          protocol over TCP to one -s tcp://HOST:PORT (rkv's\n"
"                          tcp:// door or a memcached); a batch is pipelined over\n"
"                          the thread's connections\n"
"      --connections N     memcache: TCP connections in all (a multiple of\n"
"                          threads x processes, at most that x window; default\n"
"                          threads x processes x window: one request in flight each)\n"
"\n"
"Open loop (default: closed loop, each thread waits for a reply before the next):\n"
"      --rate OPS          send OPS operations per second in total (split over\n"
"                          threads and processes) on a fixed schedule; latency is\n"
"                          measured from each operation's intended send time, so\n"
"                          it includes the queueing a late reply causes\n"
"      --arrival KIND      constant (default) or poisson spacing of the sends\n"
"\n"
"How long:\n"
"  -d, --duration TIME     measure for TIME: 10, 2.5s, 500ms, 1m (default 10s)\n"
"  -n, --requests N        stop after N operations in total (over all threads)\n"
"      --warmup TIME       run the workload TIME before measuring (0)\n"
"\n"
"What:\n"
"  -k, --keys N            key space size (1..2^40; 100000)\n"
"      --key-size N|MIN-MAX    key bytes (%u..%u; 16); keys are \"k\" + index\n"
"      --value-size N|MIN-MAX  value bytes (0..1M; 32); K/M suffixes accepted\n"
"  -r, --get-ratio R       share of GETs, 0..1 (0.9); the rest are writes\n"
"      --delete-ratio R    share of DELETEs, 0..1 (0)\n"
"      --dist D            key choice: uniform, zipf[:THETA], latest[:THETA]\n"
"                          (THETA in (0,1), default 0.99; default dist uniform)\n"
"      --workload A..F     YCSB preset: A 50%% read/50%% update zipf; B 95/5 zipf;\n"
"                          C read-only zipf; D 95%% read/5%% insert, read-latest;\n"
"                          F 50%% read/50%% read-modify-write (get + CAS put).\n"
"                          E (range scans) does not apply to a key-value cache.\n"
"                          Flags given explicitly override the preset.\n"
"      --preload           write every key once before measuring (default)\n"
"      --no-preload        start from whatever the server holds\n"
"      --verify            values carry their key and version; every GET checks\n"
"                          them, and any bad value fails the run (exit 1)\n"
"      --seed N            random seed (1); same seed, same key sequence\n"
"\n"
"Output:\n"
"      --json FILE         also write the report as JSON to FILE ('-': stdout,\n"
"                          and the text report goes to stderr)\n"
"      --hist-file PREFIX  write each operation type's full latency distribution\n"
"                          in HdrHistogram's text format to PREFIX-get.hgrm,\n"
"                          PREFIX-put.hgrm, ... (microseconds)\n"
"      --timeseries FILE   per-second CSV: ops/s, p50, p99, errors per type\n"
"      --html FILE         the report as one self-contained HTML page with charts\n"
"      --compare A.json B.json ... --html FILE\n"
"                          draw saved --json reports on one page (runs nothing)\n"
"      --clock C           what a closed-loop op is timed with: auto (default:\n"
"                          the TSC where the kernel's clocksource is tsc, else\n"
"                          CLOCK_MONOTONIC), tsc or monotonic; the report names it\n"
"  -q, --quiet             no progress lines\n"
"  -h, --help              this text;  -V, --version  the version\n"
"\n"
"Exit status: 0 success, 1 the run failed (connection, errors, verification),\n"
"2 bad command line.\n",
        BENCH_MAX_THREADS, BENCH_MAX_WINDOW, BENCH_MAX_PROCESSES, BENCH_MIN_KEY_SIZE,
        BENCH_MAX_KEY_SIZE);
}

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
    double t = 0.99;
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

static void set_defaults(struct bench_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->threads = 1;
    cfg->window = 1;
    cfg->keys = 100000;
    cfg->key_size = (struct bench_range){ 16, 16 };
    cfg->value_size = (struct bench_range){ 32, 32 };
    cfg->get_ratio = 0.9;
    cfg->dist = BENCH_DIST_UNIFORM;
    cfg->theta = 0.99;
    cfg->preload = true;
    cfg->seed = 1;
    cfg->processes = 1;
}

/* YCSB presets; only settings not given explicitly are taken. */
static bool apply_workload(struct bench_config *cfg, unsigned set, FILE *err)
{
    double get = 0;
    enum bench_write_kind kind = BENCH_WRITE_UPDATE;
    enum bench_dist dist = BENCH_DIST_ZIPF;
    switch (cfg->workload) {
    case 0:   return true;
    case 'A': get = 0.5; break;
    case 'B': get = 0.95; break;
    case 'C': get = 1.0; break;
    case 'D': get = 0.95; kind = BENCH_WRITE_INSERT; dist = BENCH_DIST_LATEST; break;
    case 'F': get = 0.5; kind = BENCH_WRITE_RMW; break;
    case 'E':
        usage_error(err, "--workload E is YCSB's short range scans, which a key-value cache "
                    "cannot serve (rkv keeps no key order); use A, B, C, D or F");
        return false;
    default:
        usage_error(err, "--workload: '%c' is not a YCSB workload; use A, B, C, D or F", cfg->workload);
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
            usage_error(err, "a tcp:// server speaks the memcached protocol; add --protocol memcache");
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
        usage_error(err, "--connections %u: give each of the %u client threads the same number, "
                    "at most --window %u (a multiple of %u up to %u)", cfg->connections, clients,
                    cfg->window, clients, clients * cfg->window);
        return false;
    }
    return true;
}

/* Checks that span several flags, after all are known. */
static bool check_combination(struct bench_config *cfg, unsigned set, FILE *err)
{
    if (set & SET_COMPARE) {
        if (cfg->compare_count == 0) {
            usage_error(err, "--compare needs the JSON reports to draw: --compare A.json B.json --html FILE");
            return false;
        }
        if (cfg->html_path == NULL) {
            usage_error(err, "--compare draws reports into an HTML page; add --html FILE");
            return false;
        }
        if (cfg->servers != NULL || cfg->json_path != NULL || cfg->hist_prefix != NULL ||
            cfg->timeseries_path != NULL) {
            usage_error(err, "--compare runs no benchmark; drop -s, --json, --hist-file and --timeseries");
            return false;
        }
        return true;
    }
    if (cfg->clock == BENCH_CLOCK_TSC && cfg->rate > 0) {
        usage_error(err, "--clock tsc times closed-loop ops; an open-loop run (--rate) times from "
                    "intended send times on CLOCK_MONOTONIC: drop one of them");
        return false;
    }
    if ((set & SET_ARRIVAL) && cfg->rate == 0) {
        usage_error(err, "--arrival sets how an open-loop run spaces its sends; add --rate OPS");
        return false;
    }
    if ((uint64_t)cfg->threads * cfg->processes > BENCH_MAX_THREADS) {
        usage_error(err, "--processes %u x --threads %u is %u client threads; keep the product at most %u",
                    cfg->processes, cfg->threads, cfg->processes * cfg->threads, BENCH_MAX_THREADS);
        return false;
    }
    if (cfg->json_path != NULL && cfg->timeseries_path != NULL && strcmp(cfg->json_path, "-") == 0 &&
        strcmp(cfg->timeseries_path, "-") == 0) {
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
        usage_error(err, "--get-ratio %g plus --delete-ratio %g exceed 1; together they must be at most 1 "
                    "(the rest are writes)", cfg->get_ratio, cfg->delete_ratio);
        return false;
    }
    if (cfg->verify && cfg->value_size.min < WL_VALUE_HEADER) {
        usage_error(err, "--verify needs --value-size of at least %u bytes (a value carries its key "
                    "index and version); got %u", WL_VALUE_HEADER, cfg->value_size.min);
        return false;
    }
    unsigned need = wl_key_min_len(cfg->keys - 1);
    if (cfg->key_size.min < need) {
        usage_error(err, "--key-size %u is too short for --keys %llu: keys are \"k\" + index and the "
                    "last one needs %u bytes; use --key-size %u or more, or fewer --keys",
                    cfg->key_size.min, (unsigned long long)cfg->keys, need, need);
        return false;
    }
    uint64_t per_thread = (uint64_t)cfg->window * ((uint64_t)cfg->value_size.max * 2 + BENCH_MAX_KEY_SIZE);
    if (per_thread > BENCH_MAX_THREAD_BUFFER) {
        usage_error(err, "--window %u with --value-size up to %u needs %llu MiB of buffers per thread; "
                    "keep window x value size under %llu MiB", cfg->window, cfg->value_size.max,
                    (unsigned long long)(per_thread >> 20),
                    (unsigned long long)(BENCH_MAX_THREAD_BUFFER >> 21));
        return false;
    }
    if (cfg->duration_s == 0 && cfg->requests == 0)
        cfg->duration_s = 10;
    return true;
}

/* A report file after --compare. */
static bool add_compare(struct bench_config *cfg, const char *path, FILE *err)
{
    if (cfg->compare_count >= BENCH_MAX_COMPARE) {
        usage_error(err, "--compare takes at most %u reports; '%s' is one too many", BENCH_MAX_COMPARE, path);
        return false;
    }
    if (cfg->compare == NULL && (cfg->compare = calloc(BENCH_MAX_COMPARE, sizeof *cfg->compare)) == NULL) {
        usage_error(err, "out of memory");
        return false;
    }
    cfg->compare[cfg->compare_count++] = path;
    return true;
}

static const struct opt_def *find_long(const char *name, size_t len)
{
    for (size_t i = 0; i < RKV_ARRAY_SIZE(options); i++)
        if (strlen(options[i].name) == len && strncmp(options[i].name, name, len) == 0)
            return &options[i];
    return NULL;
}

static const struct opt_def *find_short(char c)
{
    for (size_t i = 0; i < RKV_ARRAY_SIZE(options); i++)
        if (options[i].short_name == c)
            return &options[i];
    return NULL;
}

/* Applies one option with its value (NULL for flags). */
static enum bench_args_result apply_option(struct bench_config *cfg, const struct opt_def *o,
                                           const char *v, unsigned *set, FILE *out, FILE *err)
{
    uint64_t u;
    switch (o->id) {
    case OPT_SERVER: {
        char msg[640];
        if (server_list_add(&cfg->servers, &cfg->server_count, v, true, msg, sizeof msg))
            break;
        usage_error(err, "%s", msg);
        return BENCH_ARGS_USAGE;
    }
    case OPT_THREADS:
        if (!rkv_parse_u64(v, 1, BENCH_MAX_THREADS, &u))
            goto range;
        cfg->threads = (unsigned)u;
        break;
    case OPT_WINDOW:
        if (!rkv_parse_u64(v, 1, BENCH_MAX_WINDOW, &u))
            goto range;
        cfg->window = (unsigned)u;
        break;
    case OPT_DURATION:
        if (!parse_seconds(v, &cfg->duration_s) || cfg->duration_s <= 0)
            goto range;
        break;
    case OPT_REQUESTS:
        if (!rkv_parse_u64(v, 1, UINT64_MAX / 2, &cfg->requests))
            goto range;
        break;
    case OPT_KEYS:
        if (!rkv_parse_u64(v, 1, BENCH_MAX_KEYS, &cfg->keys))
            goto range;
        break;
    case OPT_KEY_SIZE:
        if (!parse_range(v, BENCH_MIN_KEY_SIZE, BENCH_MAX_KEY_SIZE, &cfg->key_size))
            goto range;
        break;
    case OPT_VALUE_SIZE:
        if (!parse_range(v, 0, BENCH_MAX_VALUE, &cfg->value_size))
            goto range;
        break;
    case OPT_GET_RATIO:
        if (!parse_double(v, 0, 1, &cfg->get_ratio))
            goto range;
        *set |= SET_GET_RATIO;
        break;
    case OPT_DELETE_RATIO:
        if (!parse_double(v, 0, 1, &cfg->delete_ratio))
            goto range;
        break;
    case OPT_DIST:
        if (!parse_dist(v, &cfg->dist, &cfg->theta))
            goto range;
        *set |= SET_DIST;
        break;
    case OPT_WORKLOAD:
        if (strlen(v) != 1 || !isalpha((unsigned char)v[0])) {
            usage_error(err, "--workload: '%s' is not a YCSB workload; use A, B, C, D or F", v);
            return BENCH_ARGS_USAGE;
        }
        cfg->workload = (char)toupper((unsigned char)v[0]);
        break;
    case OPT_WARMUP:
        if (!parse_seconds(v, &cfg->warmup_s))
            goto range;
        break;
    case OPT_PRELOAD:    cfg->preload = true; break;
    case OPT_NO_PRELOAD: cfg->preload = false; break;
    case OPT_VERIFY:     cfg->verify = true; break;
    case OPT_LOCKSTEP:   cfg->lockstep = true; break;
    case OPT_JSON:
        if (*v == '\0')
            goto range;
        cfg->json_path = v;
        break;
    case OPT_SEED:
        if (!rkv_parse_u64(v, 0, UINT64_MAX, &cfg->seed))
            goto range;
        break;
    case OPT_AUTH:
        if (*v == '\0')
            goto range;
        cfg->auth = v;
        break;
    case OPT_TIMEOUT:
        if (!rkv_parse_u64(v, 1, 3600000, &u))
            goto range;
        cfg->timeout_ms = (unsigned)u;
        break;
    case OPT_LOCATION_CACHE:
        if (strcmp(v, "off") == 0)
            cfg->location_cache = UINT_MAX;
        else if (rkv_parse_u64(v, 1, UINT_MAX - 1, &u))
            cfg->location_cache = (unsigned)u;
        else
            goto range;
        break;
    case OPT_BUCKET_READS:
        if (strcmp(v, "auto") == 0)
            cfg->bucket_reads = RKV_BUCKET_READS_AUTO;
        else if (strcmp(v, "together") == 0)
            cfg->bucket_reads = RKV_BUCKET_READS_TOGETHER;
        else if (strcmp(v, "first") == 0)
            cfg->bucket_reads = RKV_BUCKET_READS_FIRST;
        else
            goto range;
        break;
    case OPT_QUIET:
        cfg->quiet = true;
        break;
    case OPT_RATE:
        if (!parse_double(v, 0, BENCH_MAX_RATE, &cfg->rate) || cfg->rate <= 0)
            goto range;
        break;
    case OPT_ARRIVAL:
        if (strcmp(v, "constant") == 0)
            cfg->arrival = BENCH_ARRIVAL_CONSTANT;
        else if (strcmp(v, "poisson") == 0)
            cfg->arrival = BENCH_ARRIVAL_POISSON;
        else
            goto range;
        *set |= SET_ARRIVAL;
        break;
    case OPT_CLOCK:
        if (strcmp(v, "auto") == 0)
            cfg->clock = BENCH_CLOCK_AUTO;
        else if (strcmp(v, "tsc") == 0)
            cfg->clock = BENCH_CLOCK_TSC;
        else if (strcmp(v, "monotonic") == 0)
            cfg->clock = BENCH_CLOCK_MONOTONIC;
        else
            goto range;
        break;
    case OPT_PROCESSES:
        if (!rkv_parse_u64(v, 1, BENCH_MAX_PROCESSES, &u))
            goto range;
        cfg->processes = (unsigned)u;
        break;
    case OPT_HIST_FILE:
    case OPT_TIMESERIES:
    case OPT_HTML:
        if (*v == '\0')
            goto range;
        if (o->id == OPT_HIST_FILE)
            cfg->hist_prefix = v;
        else if (o->id == OPT_TIMESERIES)
            cfg->timeseries_path = v;
        else
            cfg->html_path = v;
        break;
    case OPT_COMPARE:
        *set |= SET_COMPARE;
        break;
    case OPT_PROTOCOL:
        if (strcmp(v, "rkv") == 0)
            cfg->protocol = BENCH_PROTO_RKV;
        else if (strcmp(v, "memcache") == 0)
            cfg->protocol = BENCH_PROTO_MEMCACHE;
        else
            goto range;
        break;
    case OPT_CONNECTIONS:
        if (!rkv_parse_u64(v, 1, (uint64_t)BENCH_MAX_THREADS * BENCH_MAX_WINDOW, &u))
            goto range;
        cfg->connections = (unsigned)u;
        *set |= SET_CONNECTIONS;
        break;
    case OPT_HELP:
        bench_usage(out);
        return BENCH_ARGS_EXIT_OK;
    case OPT_VERSION:
        fprintf(out, "rkv-bench %s\n", RKV_VERSION_STRING);
        return BENCH_ARGS_EXIT_OK;
    }
    return BENCH_ARGS_RUN;

range:
    switch (o->id) {
    case OPT_THREADS:  usage_error(err, "--threads: '%s' is not a whole number in 1..%u", v, BENCH_MAX_THREADS); break;
    case OPT_WINDOW:   usage_error(err, "--window: '%s' is not a whole number in 1..%u", v, BENCH_MAX_WINDOW); break;
    case OPT_DURATION: usage_error(err, "--duration: '%s' is not a time above 0 and up to %.0f s (e.g. 10, 2.5s, 500ms, 1m)", v, BENCH_MAX_SECONDS); break;
    case OPT_WARMUP:   usage_error(err, "--warmup: '%s' is not a time from 0 to %.0f s (e.g. 2, 500ms)", v, BENCH_MAX_SECONDS); break;
    case OPT_REQUESTS: usage_error(err, "--requests: '%s' is not a whole number of at least 1", v); break;
    case OPT_KEYS:     usage_error(err, "--keys: '%s' is not a whole number in 1..%llu", v, (unsigned long long)BENCH_MAX_KEYS); break;
    case OPT_KEY_SIZE: usage_error(err, "--key-size: '%s' is not N or MIN-MAX with %u <= MIN <= MAX <= %u", v, BENCH_MIN_KEY_SIZE, BENCH_MAX_KEY_SIZE); break;
    case OPT_VALUE_SIZE: usage_error(err, "--value-size: '%s' is not N or MIN-MAX with 0 <= MIN <= MAX <= %u (1M)", v, BENCH_MAX_VALUE); break;
    case OPT_GET_RATIO: usage_error(err, "--get-ratio: '%s' is not a number from 0 to 1", v); break;
    case OPT_DELETE_RATIO: usage_error(err, "--delete-ratio: '%s' is not a number from 0 to 1", v); break;
    case OPT_DIST:     usage_error(err, "--dist: '%s' is not uniform, zipf[:THETA] or latest[:THETA] with 0 < THETA < 1", v); break;
    case OPT_SEED:     usage_error(err, "--seed: '%s' is not a whole number in 0..%llu", v, (unsigned long long)UINT64_MAX); break;
    case OPT_TIMEOUT:  usage_error(err, "--timeout: '%s' is not a number of milliseconds in 1..3600000", v); break;
    case OPT_LOCATION_CACHE: usage_error(err, "--location-cache: '%s' is not 'off' or a number of entries of at least 1", v); break;
    case OPT_BUCKET_READS: usage_error(err, "--bucket-reads: '%s' is not auto, together or first", v); break;
    case OPT_RATE:     usage_error(err, "--rate: '%s' is not a number of operations per second above 0 and up to %.0f", v, BENCH_MAX_RATE); break;
    case OPT_ARRIVAL:  usage_error(err, "--arrival: '%s' is not constant or poisson", v); break;
    case OPT_CLOCK:    usage_error(err, "--clock: '%s' is not auto, tsc or monotonic", v); break;
    case OPT_PROCESSES: usage_error(err, "--processes: '%s' is not a whole number in 1..%u", v, BENCH_MAX_PROCESSES); break;
    case OPT_PROTOCOL: usage_error(err, "--protocol: '%s' is not rkv or memcache", v); break;
    case OPT_CONNECTIONS: usage_error(err, "--connections: '%s' is not a whole number in 1..%u", v, BENCH_MAX_THREADS * BENCH_MAX_WINDOW); break;
    default:           usage_error(err, "--%s: '%s' is not a valid value", o->name, v); break;
    }
    return BENCH_ARGS_USAGE;
}

enum bench_args_result bench_parse_args(int argc, char **argv, struct bench_config *cfg,
                                        FILE *out, FILE *err)
{
    enum bench_args_result r = BENCH_ARGS_RUN;
    unsigned set = 0;
    set_defaults(cfg);
    for (int i = 1; i < argc && r == BENCH_ARGS_RUN; i++) {
        const char *a = argv[i];
        const struct opt_def *o = NULL;
        const char *value = NULL;
        if (strncmp(a, "--", 2) == 0 && a[2] != '\0') {
            const char *eq = strchr(a + 2, '=');
            size_t len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
            o = find_long(a + 2, len);
            if (o != NULL && eq != NULL) {
                if (!o->has_arg) {
                    usage_error(err, "--%s takes no value (got '%s')", o->name, a);
                    r = BENCH_ARGS_USAGE;
                    break;
                }
                value = eq + 1;
            }
        } else if (a[0] == '-' && a[1] != '\0' && a[1] != '-') {
            o = find_short(a[1]);
            if (o != NULL && a[2] != '\0') {
                if (!o->has_arg) {
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
        if (o->has_arg && value == NULL) {
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
    case BENCH_DIST_ZIPF:    snprintf(buf, len, "zipf:%g", cfg->theta); break;
    case BENCH_DIST_LATEST:  snprintf(buf, len, "latest:%g", cfg->theta); break;
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
    case BENCH_WRITE_RMW:    mix->rmw = writes; break;
    }
}
