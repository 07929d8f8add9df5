/* config.h — rkv-server's configuration: an INI file plus command-line flags.
 *
 * Sources, in the order they are applied (later wins):
 *   1. built-in defaults (rkv_server_config_defaults): each written once, in
 *      server/config.c's settings table, which `rkv-server --help` prints
 *      them from (the field comments below do not repeat them);
 *   2. the INI file named by --config FILE (inih syntax; sections [server],
 *      [table], [rpc], [rdma], [security], [stats]; see config/rkv.conf);
 *   3. command-line flags, one per file key (--memory 1G, --grace-ms 50 ...).
 *
 * Every value is validated where it is read: a bad value, an unknown section
 * or key, or a key given twice in the file is reported on stderr with the
 * file name and line (or the flag) and what would be accepted, e.g.
 *
 *   rkv-server: --memory: "12Q" is not a size; use a number with an optional K/M/G/T suffix, e.g. 256M
 *   rkv-server: /etc/rkv.conf:12: [table] grace_ms = -1: expected 0..60000
 *
 * After all sources are applied the combination is checked (max_value_len
 * fits a slab page, cq_size covers the credits, ...) and derived defaults are
 * filled in (max_value_len, the default listen URI), so a loaded config holds
 * the effective value of every field.
 */
#ifndef RKV_SERVER_CONFIG_H
#define RKV_SERVER_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define RKV_CONFIG_MAX_LISTEN  8u  /* listen URIs per server */
#define RKV_CONFIG_MAX_CPUS    64u /* entries in the worker pinning list */
#define RKV_CONFIG_MAX_WORKERS 64u
#define RKV_CONFIG_MIN_MEMORY  (8ull << 20)
#define RKV_CONFIG_MAX_FILE    (1u << 20) /* largest config file read */

/* Exit-style results of rkv_server_config_load(). */
enum {
    RKV_CONFIG_OK = 0,   /* run the server */
    RKV_CONFIG_EXIT = 1, /* --help or --version printed: exit 0 */
    RKV_CONFIG_BAD = 2,  /* a bad value, message printed: exit 2 */
};

/* How a worker waits for requests (worker.c). */
enum rkv_poll_mode {
    RKV_POLL_ADAPTIVE = 0, /* busy-poll while requests arrive; after poll_idle_us without one,
                              sleep on the connections' wake-ups (completion channel, ring
                              doorbell) until the next: no core burnt idle, no wake-up paid busy */
    RKV_POLL_BUSY,         /* busy-poll forever: a core per worker, the lowest latency */
    RKV_POLL_EVENT,        /* sleep as soon as a pass finds nothing: least CPU, a wake-up per
                              request when requests are spaced out */
};

/* One address to listen on: "rdma://HOST:PORT" or "shm:///abs/path.sock". */
struct rkv_listen_uri {
    char uri[256];
};

struct rkv_server_config {
    /* --config FILE: the INI file applied before the flags; "" = none. */
    char config_path[4096];

    /* [server] */
    /* --listen URI (repeatable) / listen = (repeatable, or a comma list).
     * Flags replace the file's list. Unset: shm://DIR/rkv.sock with DIR =
     * $RUNTIME_DIRECTORY (systemd), /run/rkv for root, $XDG_RUNTIME_DIR, /tmp. */
    struct rkv_listen_uri listen[RKV_CONFIG_MAX_LISTEN];
    unsigned listen_count;
    uint64_t memory;               /* --memory SIZE: table region bytes (>= 8M) */
    unsigned workers;              /* --workers N: request threads (1..64) */
    int cpus[RKV_CONFIG_MAX_CPUS]; /* --cpus LIST "0,2-3": worker i runs on cpus[i % cpu_count] */
    unsigned cpu_count;      /* 0 = no list: the server picks the NIC's NUMA node when known */
    int log_level;           /* --log-level error|warn|info|debug: enum rkv_log_level */
    char log_file[4096];     /* --log-file PATH: append log lines here; "" = stderr */
    int poll_mode;           /* --poll-mode adaptive|busy|event: enum rkv_poll_mode;
                                --event-mode / event_mode = yes is the older spelling of event */
    uint32_t poll_idle_us;   /* --poll-idle-us: adaptive mode sleeps after this long without work
                                (1..1000000) */
    bool hugepages_required; /* --hugepages-required: fail instead of falling back to normal pages */
    bool memory_check;       /* --memory-check on|off: refuse a --memory this machine cannot back
                                (RAM, cgroup limit, hugepages, memlock; server/memory_budget.h) */
    char state_file[4096];   /* --state-file PATH: a clean stop writes the region here, the next
                                start keeps it (server/state_file.h); "" = every start is empty */
    bool fd_store;           /* --fd-store on|off: hand the region to systemd's file-descriptor
                                store, start on one it hands back (server/fd_store.h); nothing
                                happens without $NOTIFY_SOCKET / $LISTEN_FDS */

    /* [table] */
    /* --slab-page-size: bytes per slab page = largest item (power of two 64K..16M) */
    uint32_t slab_page_size;
    /* --max-value-len: longest value (unset: slab page - item header - longest key) */
    uint32_t max_value_len;
    uint32_t grace_ms; /* --grace-ms: freed item memory is reused only after this long (0..60000) */
    /* --item-size-hint: the usual item size the index is sized for, one slot per this many heap
     * bytes (48..slab page size) */
    uint32_t item_size_hint;
    uint32_t default_ttl; /* --default-ttl SECONDS: applied when a PUT gives none; 0 = never expire */
    int evict;            /* --evict none|lru|random: enum rkv_evict_policy */

    /* [rpc] */
    unsigned credits; /* --credits: receive buffers = requests in flight per connection (1..4096) */
    uint32_t max_msg; /* --max-msg: bytes per request/reply message (RKV_MIN_MSG..RKV_MAX_MSG) */
    unsigned max_conns; /* --max-conns: authenticated connections at once (1..65536) */
    /* --max-unauth-conns: connections not past HELLO yet; a new one drops the oldest (1..4096) */
    unsigned max_unauth_conns;
    /* --hello-timeout-ms: a connection without HELLO is closed after this (10..600000) */
    unsigned hello_timeout_ms;

    /* [rdma] */
    char rdma_device[64]; /* --rdma-device NAME: e.g. mlx5_0; "" = the device rdma_cm binds the address to */
    int gid_index;            /* --gid-index: GID table index for RoCE; -1 = rdma_cm's choice */
    unsigned max_inline;      /* --max-inline: bytes sent inline with a work request (0..1024) */
    unsigned signal_interval; /* --signal-interval: signal one send in N (1..1024) */
    unsigned srq_depth;       /* --srq-depth: receive buffers per worker's SRQ; 0 = none */
    unsigned cq_size;         /* --cq-size: completion queue entries; 0 = 2 x (send + recv depth) */
    uint8_t tos;              /* --tos: IP type of service for RoCE traffic */
    /* --rdma-ack-timeout: RC ACK timeout exponent, each try waits 4.096 us x 2^N (1..31) */
    unsigned ack_timeout;
    /* --rdma-retry-count: RC retransmissions before a transfer fails (1..7; 7 = forever on Soft-RoCE) */
    unsigned retry_count;

    /* [security] */
    /* --tcp-allow-unauthenticated: tcp:// (memcached) on non-loopback despite a secret */
    bool tcp_allow_unauthenticated;
    char auth_secret[65]; /* --auth-secret / secret / secret_file: clients must present it; "" = none */

    /* [stats] */
    char stats_listen[128]; /* --stats-listen HOST:PORT: Prometheus text endpoint; "" = off */
};

/* Fill every field with its default (listen is left empty until load). */
void rkv_server_config_defaults(struct rkv_server_config *c);

/* Parse argv (getopt_long) with the config file applied first and flags on
 * top. Returns RKV_CONFIG_OK, RKV_CONFIG_EXIT when --help/--version was
 * printed, or RKV_CONFIG_BAD on a bad value (message already on stderr naming
 * the option or file line and what is accepted). `c` starts from defaults. */
int rkv_server_config_load(struct rkv_server_config *c, int argc, char **argv);

/* The same, with help/version text going to `out` and messages to `err`
 * (NULL: discard). For tests and tools that capture the messages. */
int rkv_server_config_load_to(struct rkv_server_config *c, int argc, char **argv, FILE *out,
                              FILE *err);

/* Apply an INI file on top of what `c` holds, then check and complete the
 * result (as load does). Returns RKV_CONFIG_OK or RKV_CONFIG_BAD. */
int rkv_server_config_read_file(struct rkv_server_config *c, const char *path, FILE *err);

/* Apply INI text of `len` bytes (need not be NUL-terminated); `name` labels
 * messages like a file name. Checks and completes like read_file. */
int rkv_server_config_parse(struct rkv_server_config *c, const char *text, size_t len,
                            const char *name, FILE *err);

void rkv_server_config_usage(FILE *out, const char *argv0);

/* One row of the settings table as --help shows it. */
struct rkv_setting_info {
    const char *section, *key; /* in the INI file */
    const char *flag;          /* long option without "--" */
    bool no_arg;               /* the flag takes no value */
    const char *default_value; /* spelt as in the file, shown "(default VALUE)"; or NULL */
    const char *default_words; /* with no value: what applies unset, shown "(default: WORDS)";
                                  NULL with default_value NULL: --help shows no default */
};

/* Row i of the settings table (0, 1, ... until it returns false). For tests
 * that hold --help and the defaults against the table. */
bool rkv_server_config_setting(size_t i, struct rkv_setting_info *out);

/* Parse a CPU list "0,2-3,8" into cpus[] (at most max entries, each below
 * 1024, no repeats). Returns the count, or -1 with a reason in why. */
int rkv_parse_cpu_list(const char *s, int *cpus, unsigned max, char *why, size_t why_len);

#endif
