/* bench_args.h — rkv-bench's configuration and its command-line parser.
 *
 * Kept apart from main so that the tests can run the parser on good and bad
 * command lines and check both the result and the message. The parser
 * validates every value (range, syntax, combinations) and names the flag and
 * the accepted range in its message.
 */
#ifndef RKV_BENCH_ARGS_H
#define RKV_BENCH_ARGS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "bench_clock.h"
#include "bench_schedule.h"
#include "rkv.h"

struct trace;

/* Limits the parser enforces (also printed by --help). */
#define BENCH_MAX_THREADS   1024u
#define BENCH_MAX_WINDOW    1024u
#define BENCH_MAX_KEYS      (UINT64_C(1) << 40)
#define BENCH_MIN_KEY_SIZE  2u
#define BENCH_MAX_KEY_SIZE  250u
#define BENCH_MAX_VALUE     (1u << 20)
#define BENCH_MAX_SECONDS   86400.0
#define BENCH_MAX_RATE      1e9 /* --rate, operations per second in total */
#define BENCH_MAX_PROCESSES 64u
#define BENCH_MAX_COMPARE   16u /* --compare reports */
/* Largest window × value size one thread may buffer for GETs and PUTs. */
#define BENCH_MAX_THREAD_BUFFER (256ull << 20)

/* How a key is picked for each operation. */
enum bench_dist {
    BENCH_DIST_UNIFORM, /* every key equally likely */
    BENCH_DIST_ZIPF,    /* scrambled zipfian over the key space */
    BENCH_DIST_LATEST,  /* zipfian over recency: the newest key is hottest */
};

/* What the writes of a workload are ("put" share = 1 - get - delete). */
enum bench_write_kind {
    BENCH_WRITE_UPDATE, /* rkv_put of an existing key (A, B, default) */
    BENCH_WRITE_INSERT, /* rkv_put of a new key past the key space (D) */
    BENCH_WRITE_RMW,    /* rkv_get, then rkv_put with RKV_CAS (F) */
};

/* What rkv-bench speaks to the server (--protocol). */
enum bench_protocol {
    BENCH_PROTO_RKV,      /* librkv: one-sided GETs, RPC writes (shm://, rdma://) */
    BENCH_PROTO_MEMCACHE, /* the memcached text protocol over TCP (tcp://) */
};

struct bench_range {
    uint32_t min, max; /* inclusive; min == max for a fixed size */
};

struct bench_config {
    char *servers;                    /* -s URIs joined with ',' (owned) */
    unsigned server_count;            /* how many -s URIs (or comma-separated parts) */
    unsigned threads;                 /* --threads: client threads, one handle each */
    unsigned window;                  /* --window: operations in flight per thread */
    bool lockstep;                    /* --lockstep: the window as batches (rkv_mget/rkv_mput) */
    bool shared_handle;               /* --shared-handle: one RKV_OPT_SHARED handle per process */
    double duration_s;                /* --duration; 0 = none (then --requests limits) */
    uint64_t requests;                /* --requests: total over all threads; 0 = none */
    uint64_t keys;                    /* --keys: size of the key space */
    struct bench_range key_size;      /* --key-size, bytes */
    struct bench_range value_size;    /* --value-size, bytes */
    double get_ratio;                 /* --get-ratio */
    double delete_ratio;              /* --delete-ratio */
    enum bench_write_kind write_kind; /* set by --workload */
    enum bench_dist dist;             /* --dist */
    double theta;                     /* zipf/latest skew */
    char workload;                    /* --workload letter, or 0 */
    double warmup_s;                  /* --warmup */
    bool preload;                     /* --preload / --no-preload */
    bool verify;                      /* --verify */
    const char *json_path;            /* --json FILE, "-" = stdout, NULL = none */
    uint64_t seed;                    /* --seed */
    const char *auth;                 /* --auth, or NULL */
    unsigned timeout_ms;              /* --timeout, 0 = library default */
    unsigned location_cache;          /* --location-cache: 0 = default, UINT_MAX = off */
    rkv_bucket_reads bucket_reads;    /* --bucket-reads: 0 = auto */
    bool quiet;                       /* -q */
    double rate; /* --rate: open loop, ops/s over all threads and processes; 0 = closed loop */
    enum bench_arrival arrival; /* --arrival: constant (default) or poisson (open loop only) */
    unsigned processes;         /* --processes: client processes, each with --threads threads */
    const char *hist_prefix; /* --hist-file PREFIX: PREFIX-get.hgrm ... (HdrHistogram text), or NULL */
    const char *timeseries_path;  /* --timeseries FILE: per-second CSV, or NULL */
    const char *html_path;        /* --html FILE: the report as one HTML page, or NULL */
    const char **compare;         /* --compare: JSON reports to draw (owned array, argv strings) */
    unsigned compare_count;       /* how many; > 0 means no benchmark runs */
    enum bench_protocol protocol; /* --protocol */
    enum bench_clock_mode clock;  /* --clock: what closed-loop latencies are timed with */
    const char *clock_name;       /* the clock chosen, for the report ("tsc 2300.0 MHz",
                                     "monotonic"): set by rkv-bench once calibrated; NULL: unsaid */
    unsigned connections;         /* --connections: memcache TCP connections over all threads
                                     and processes; default threads x processes x window */
    bool fill_on_miss;            /* --fill-on-miss: a GET that misses is followed by a SET */
    const char *trace_path;       /* --trace FILE: replay a key trace (trace.h), or NULL */
    const struct trace *trace;    /* that trace, loaded by rkv-bench (not the parser), or NULL */
};

enum bench_args_result {
    BENCH_ARGS_RUN = 0, /* run the benchmark */
    BENCH_ARGS_EXIT_OK, /* --help / --version printed; exit 0 */
    BENCH_ARGS_USAGE,   /* a bad command line; message printed; exit 2 */
};

/* ------------------------------------------------------------ the options
 *
 * Every option is one row of bench_options[] (bench_args.c): its names, what
 * it takes, its default, its help and how a value is applied; the parser,
 * the defaults and --help all come from the table. */

struct bench_option;

/* What applying one value did. */
enum bench_opt_result {
    BENCH_OPT_OK,      /* applied */
    BENCH_OPT_BAD,     /* not a valid value: "--NAME: 'VALUE' <bad>" is printed */
    BENCH_OPT_REFUSED, /* refused, and the setter printed why */
    BENCH_OPT_EXIT,    /* --help / --version printed: exit 0 */
};

/* Applies value v (NULL for an option that takes none) to cfg. set collects
 * which options the command line gave (bits private to bench_args.c). */
typedef enum bench_opt_result (*bench_opt_setter)(struct bench_config *cfg,
                                                  const struct bench_option *o, const char *v,
                                                  unsigned *set, FILE *out, FILE *err);

enum bench_arg_kind {
    BENCH_ARG_NONE,     /* a switch: --NAME (and --NAME=x is refused) */
    BENCH_ARG_REQUIRED, /* --NAME VALUE, --NAME=VALUE, -C VALUE, -CVALUE */
};

/* A choice among names (set_choice): the value stored for each. */
struct bench_choice {
    const char *name;
    int value;
};

struct bench_option {
    const char *name; /* long name, without "--" */
    char short_name;  /* -C, or 0 */
    enum bench_arg_kind kind;
    const char *arg; /* what --help shows after the name ("N", "FILE"), or NULL */
    const char *def; /* default, applied through set before the command line
                        (a switch: non-NULL = on); NULL = none */
    bench_opt_setter set;
    size_t offset, size; /* the field of struct bench_config set writes (size 0: none) */
    uint64_t min, max;   /* the accepted range, for the setters that have one */
    bool above_min;      /* numbers: min itself is refused */
    const struct bench_choice *choices; /* set_choice: NULL-terminated */
    unsigned set_bit;                   /* recorded in set when given (private) */
    const char *section;                /* --help: starts this section, or NULL */
    const char *help; /* --help: lines separated by \n; {min} {max} {default} expand */
    const char *bad;  /* after "--NAME: 'VALUE' " for a bad value; NULL: the setter's */
};

extern const struct bench_option bench_options[];
extern const size_t bench_option_count;

/* Parses argv into *cfg (defaults first). Messages and help go to `err` and
 * `out`. On BENCH_ARGS_RUN the caller frees with bench_config_free(). */
enum bench_args_result bench_parse_args(int argc, char **argv, struct bench_config *cfg, FILE *out,
                                        FILE *err);
void bench_config_free(struct bench_config *cfg);
void bench_usage(FILE *out);

/* "uniform", "zipf:0.99", "latest:0.99" into buf. */
const char *bench_dist_string(const struct bench_config *cfg, char *buf, size_t len);

/* Share of each operation kind, derived from the ratios and write kind. */
struct bench_mix {
    double get, put, del, rmw, insert; /* sum to 1 */
};
void bench_mix_of(const struct bench_config *cfg, struct bench_mix *mix);

#endif
