/* doctor_checks.h — rkv-doctor's checks, separate from its main() so the
 * unit test (tests/test_doctor.c) runs them against a fake sysfs/procfs/dev
 * tree it builds in a temporary directory.
 *
 * Two steps. Gathering reads facts from the file system (under the roots in
 * struct doctor_env, overridable with RKV_DOCTOR_SYSFS, RKV_DOCTOR_PROCFS and
 * RKV_DOCTOR_DEVFS) into plain structs; rkv-doctor adds what only libibverbs
 * can say (active MTU, whether a provider library claims each device).
 * Checking turns facts into results: one line each, with a level, what was
 * found in plain words, and how to fix it. Check functions read no global
 * state except through the env roots, so a test can drive every branch.
 */
#ifndef RKV_DOCTOR_CHECKS_H
#define RKV_DOCTOR_CHECKS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#define DOCTOR_MAX_DEVICES   16u
#define DOCTOR_MAX_PORTS     4u
#define DOCTOR_MAX_GIDS      16u /* non-empty GID entries kept per port */
#define DOCTOR_ROCE_UDP_PORT 4791u

enum doctor_level { DOCTOR_OK, DOCTOR_INFO, DOCTOR_WARN, DOCTOR_FAIL };

/* Where the kernel's files are: "/sys", "/proc", "/dev" unless overridden. */
struct doctor_env {
    char sysfs[512];
    char procfs[512];
    char devfs[512];
};

/* One result line. */
struct doctor_result {
    enum doctor_level level;
    char check[24];    /* short name: "device", "port", "mtu", "gid", "memlock", ... */
    char message[640]; /* what was found and why it matters */
    char fix[512];     /* what to do about it; "" when nothing */
};

struct doctor_report {
    struct doctor_result *items;
    unsigned count, cap;
    unsigned counts[4]; /* results per level */
};

/* One non-empty entry of a port's GID table. */
struct doctor_gid {
    unsigned index;
    char text[48];      /* compact IPv6 form, e.g. ::ffff:192.0.2.1 */
    char type[24];      /* "RoCE v2", "IB/RoCE v1", or "" (InfiniBand) */
    char netdev[32];    /* the netdev it belongs to (RoCE) */
    bool ipv4;          /* an IPv4-mapped GID */
    char ipv4_text[16]; /* dotted quad when ipv4 */
};

struct doctor_port {
    unsigned num;        /* 1-based port number */
    int state;           /* 1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE, 5 ACTIVE_DEFER; 0 unknown */
    char state_text[24]; /* "ACTIVE" */
    int phys_state;      /* 2 Polling, 3 Disabled, 5 LinkUp, ...; 0 unknown */
    char phys_text[32];  /* "LinkUp" */
    char link_layer[16]; /* "Ethernet" (RoCE) or "InfiniBand" */
    char rate[48];       /* "100 Gb/sec (4X EDR)" */
    char netdev[32];     /* RoCE: the netdev under the port; "" unknown */
    int netdev_mtu;      /* its MTU in bytes; 0 unknown */
    int active_mtu;      /* from ibv_query_port, bytes; 0 unknown */
    int max_mtu;         /* likewise */
    struct doctor_gid gids[DOCTOR_MAX_GIDS];
    unsigned gid_count;
};

struct doctor_device {
    char name[64];   /* "mlx5_0", "rxe0" */
    char driver[64]; /* kernel driver: "mlx5_core", "rxe", "siw", ... */
    char pci[32];    /* PCI address when it has one */
    bool software;   /* Soft-RoCE (rxe) or Soft-iWARP (siw) */
    int node_type;   /* 1 CA, 2 switch, 3 router, 4 RNIC; 0 unknown */
    int numa_node;   /* -1 unknown or none */
    struct doctor_port ports[DOCTOR_MAX_PORTS];
    unsigned port_count;
    /* Filled by rkv-doctor from libibverbs (tests set them by hand). */
    bool verbs_checked;    /* the facts below were looked up */
    bool verbs_listed;     /* ibv_get_device_list() returned it */
    char verbs_error[128]; /* why it could not be opened/queried; "" ok */
    /* ibv_query_device's limits; 0 unknown (not queried, or it failed) */
    uint32_t max_qp, max_cq, max_srq;
};

/* What the server will be asked to do: from --config / --memory / --cpus. */
struct doctor_wanted {
    uint64_t region; /* table region bytes */
    bool rdma;       /* an rdma:// listen URI is configured */
    bool hugepages_required;
    int gid_index;      /* -1 auto */
    const char *device; /* configured RDMA device, or NULL */
    const int *cpus;    /* configured worker CPUs (or NULL) */
    unsigned cpu_count;
    const char *const *rdma_hosts; /* hosts of the rdma:// listen URIs */
    unsigned rdma_host_count;
    uint64_t conns_locked; /* rdma: bytes every connection registers together (max_conns +
                              max_unauth_conns, server/memory_budget.h); 0 unknown */
};

/* Roots from RKV_DOCTOR_SYSFS / _PROCFS / _DEVFS, else /sys, /proc, /dev. */
void doctor_env_init(struct doctor_env *env);

void doctor_report_init(struct doctor_report *r);
void doctor_report_free(struct doctor_report *r);
void doctor_add(struct doctor_report *r, enum doctor_level level, const char *check,
                const char *fix, const char *format, ...) __attribute__((format(printf, 5, 6)));
bool doctor_failed(const struct doctor_report *r);
/* "[ ok ] check: message" lines, each with an indented "fix:" line when there is one. */
void doctor_print_text(const struct doctor_report *r, FILE *out);
void doctor_print_json(const struct doctor_report *r, FILE *out);
const char *doctor_level_tag(enum doctor_level level);

/* ---- gathering */

/* RDMA devices under SYSFS/class/infiniband, sorted by name. Returns the
 * count; *class_missing tells whether the class directory does not exist
 * (the kernel has no RDMA core loaded). */
unsigned doctor_scan_devices(const struct doctor_env *env, struct doctor_device *devs, unsigned max,
                             bool *class_missing);

/* CapEff of PROCFS/self/status has CAP_IPC_LOCK (memlock does not apply). */
bool doctor_has_cap_ipc_lock(const struct doctor_env *env);

/* ---- checks (each adds one or more results) */

void doctor_check_devices(struct doctor_report *r, const struct doctor_device *devs, unsigned n,
                          bool class_missing, const struct doctor_wanted *w);
/* libibverbs' view: a device sysfs shows but no provider claims, or one that cannot be opened. */
void doctor_check_userspace(struct doctor_report *r, const struct doctor_device *devs, unsigned n);
void doctor_check_ports(struct doctor_report *r, const struct doctor_device *devs, unsigned n);
void doctor_check_mtu(struct doctor_report *r, const struct doctor_device *devs, unsigned n);
void doctor_check_gids(struct doctor_report *r, const struct doctor_device *devs, unsigned n,
                       const struct doctor_wanted *w);
void doctor_check_listen_addresses(struct doctor_report *r, const struct doctor_device *devs,
                                   unsigned n, const struct doctor_wanted *w);
/* uverbs* and rdma_cm under DEVFS/infiniband, judged for `uid` and its groups. */
void doctor_check_device_files(struct doctor_report *r, const struct doctor_env *env,
                               unsigned ndevs, const struct doctor_wanted *w, uid_t uid, gid_t gid,
                               const gid_t *groups, int ngroups);
/* limit: RLIMIT_MEMLOCK soft limit in bytes, UINT64_MAX for unlimited. */
void doctor_check_memlock(struct doctor_report *r, uint64_t limit, bool cap_ipc_lock,
                          unsigned ndevs, const struct doctor_wanted *w);
/* RAM, the memory cgroup and hugepages this process could get, whether
 * cfg->memory fits (server/memory_budget.h, as rkv-server judges it at start)
 * and the largest --memory that would. */
struct rkv_server_config;
void doctor_check_memory(struct doctor_report *r, const struct doctor_env *env,
                         const struct rkv_server_config *cfg);
void doctor_check_hugepages(struct doctor_report *r, const struct doctor_env *env,
                            const struct doctor_wanted *w);
void doctor_check_numa(struct doctor_report *r, const struct doctor_env *env,
                       const struct doctor_device *devs, unsigned n, const struct doctor_wanted *w);
void doctor_check_governor(struct doctor_report *r, const struct doctor_env *env);
void doctor_check_firewall(struct doctor_report *r, const struct doctor_device *devs, unsigned n);
/* The open-files limit (soft, hard; UINT64_MAX unlimited) against the
 * descriptors max_conns + max_unauth_conns connections take: one each (and a
 * few for the server itself). */
void doctor_check_nofile(struct doctor_report *r, uint64_t soft, uint64_t hard,
                         const struct rkv_server_config *cfg);
/* Each queried device's max_qp / max_cq / max_srq against what the
 * connections take on it: a QP and two CQs each, and a shared receive queue
 * per worker; skipped for a device whose limits are unknown. */
void doctor_check_device_limits(struct doctor_report *r, const struct doctor_device *devs, unsigned n,
                                const struct rkv_server_config *cfg, const struct doctor_wanted *w);
/* The server's RC retransmission settings ([rdma] ack_timeout, retry_count)
 * and the worst-case time to notice a dead peer they give. */
void doctor_check_rc(struct doctor_report *r, const struct rkv_server_config *cfg);

/* The largest InfiniBand MTU (256..4096) a RoCE port gets on a netdev of
 * this MTU; 0 when even 256 does not fit. */
int doctor_roce_mtu(int netdev_mtu);

#endif
