/* doctor.c — rkv-doctor: checks this machine for the usual reasons RDMA is
 * slow or broken, and says in plain words how to fix each one.
 *
 *   rkv-doctor [--config FILE] [--memory SIZE] [--cpus LIST] [--device NAME] [--json]
 *
 * It reads the server's configuration (the same parser as rkv-server) to
 * know the region size, CPUs, device, GID index and listen addresses to
 * judge against. The checks themselves live in doctor_checks.c; this file
 * gathers what only libibverbs and the running process can tell (active MTU,
 * provider libraries, memlock limit, user and groups) and prints the report.
 * The memory check shares server/memory_budget.c with rkv-server's start-up
 * refusal, so both name the same limit and the same largest --memory.
 * Exit status: 0 when no check FAILs, 1 otherwise, 2 on a bad command line.
 */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "config.h"
#include "doctor_checks.h"
#include "memory_budget.h"
#include "rkv.h"
#include "util.h"

#define MAX_GROUPS 256

static void doctor_usage(FILE *out)
{
    fprintf(out, "Usage: rkv-doctor [OPTION]...\n"
                 "Check this machine for what makes RDMA slow or broken, and how to fix it.\n\n"
                 "  -c, --config FILE   judge against this rkv-server config (region size, CPUs,\n"
                 "                      device, GID index, listen addresses)\n"
                 "  -m, --memory SIZE   region size to check memory, memlock and hugepages for\n"
                 "                      (default: the config's, else 256M); the report also gives\n"
                 "                      the largest --memory rkv-server would accept here\n"
                 "      --cpus LIST     worker CPUs to check against the NIC's NUMA node, e.g. 0,2-3\n"
                 "      --device NAME   only judge this RDMA device's NUMA node and GID index\n"
                 "      --json          print the results as JSON\n"
                 "  -h, --help          show this help\n"
                 "  -V, --version       show the version\n\n"
                 "Each line is [ ok ], [info], [warn] or [FAIL], with a fix where there is one.\n"
                 "Exit status: 0 when nothing FAILs, 1 otherwise, 2 on a bad option.\n"
                 "RKV_DOCTOR_SYSFS, RKV_DOCTOR_PROCFS and RKV_DOCTOR_DEVFS replace /sys, /proc and\n"
                 "/dev (for tests; libibverbs is not asked then).\n");
}

/* What libibverbs says about the devices sysfs listed: whether a provider
 * claims each, whether it opens, and each port's active and maximum MTU. */
static void probe_verbs(struct doctor_device *devs, unsigned n)
{
    int num = 0;
    struct ibv_device **list = ibv_get_device_list(&num);
    for (unsigned i = 0; i < n; i++)
        devs[i].verbs_checked = true;
    if (list == NULL)
        return;
    for (int k = 0; k < num; k++) {
        const char *name = ibv_get_device_name(list[k]);
        struct doctor_device *dev = NULL;
        for (unsigned i = 0; i < n && dev == NULL; i++)
            if (name != NULL && strcmp(devs[i].name, name) == 0)
                dev = &devs[i];
        if (dev == NULL)
            continue;
        dev->verbs_listed = true;
        struct ibv_context *ctx = ibv_open_device(list[k]);
        if (ctx == NULL) {
            snprintf(dev->verbs_error, sizeof dev->verbs_error, "ibv_open_device: %s",
                     strerror(errno));
            continue;
        }
        for (unsigned p = 0; p < dev->port_count; p++) {
            struct ibv_port_attr attr;
            struct doctor_port *port = &dev->ports[p];
            if (ibv_query_port(ctx, (uint8_t)port->num, &attr) != 0) {
                snprintf(dev->verbs_error, sizeof dev->verbs_error, "ibv_query_port(%u): %s",
                         port->num, strerror(errno));
                continue;
            }
            /* enum ibv_mtu: IBV_MTU_256 = 1 ... IBV_MTU_4096 = 5 */
            if (attr.active_mtu >= IBV_MTU_256 && attr.active_mtu <= IBV_MTU_4096)
                port->active_mtu = 128 << attr.active_mtu;
            if (attr.max_mtu >= IBV_MTU_256 && attr.max_mtu <= IBV_MTU_4096)
                port->max_mtu = 128 << attr.max_mtu;
        }
        struct ibv_device_attr da;
        if (ibv_query_device(ctx, &da) == 0) {
            dev->max_qp = da.max_qp > 0 ? (uint32_t)da.max_qp : 0;
            dev->max_cq = da.max_cq > 0 ? (uint32_t)da.max_cq : 0;
            dev->max_srq = da.max_srq > 0 ? (uint32_t)da.max_srq : 0;
        }
        ibv_close_device(ctx);
    }
    ibv_free_device_list(list);
}

/* Load the config (or the defaults), reporting a bad file as a FAIL with the
 * parser's own message. Returns false when the file was refused. */
static bool load_config(struct doctor_report *r, struct rkv_server_config *c, const char *path)
{
    char *msg = NULL;
    size_t len = 0;
    FILE *err = open_memstream(&msg, &len);
    int rc;
    rkv_server_config_defaults(c);
    if (path != NULL)
        rc = rkv_server_config_read_file(c, path, err);
    else
        rc = rkv_server_config_parse(c, "", 0, "defaults", err);
    if (err != NULL)
        fclose(err);
    if (rc == RKV_CONFIG_OK && path != NULL) {
        char mem[32];
        doctor_add(r, DOCTOR_OK, "config", NULL,
                   "%s loads: memory %s, %u listen address%s, "
                   "%u worker%s",
                   path, rkv_format_size(c->memory, mem, sizeof mem), c->listen_count,
                   c->listen_count == 1 ? "" : "es", c->workers, c->workers == 1 ? "" : "s");
    } else if (rc == RKV_CONFIG_OK) {
        char mem[32];
        doctor_add(r, DOCTOR_INFO, "config", "pass --config FILE to judge a server's settings",
                   "no --config: judging rkv-server's defaults (memory %s, listen %s)",
                   rkv_format_size(c->memory, mem, sizeof mem), c->listen[0].uri);
    } else {
        if (msg != NULL)
            msg[strcspn(msg, "\n")] = '\0';
        doctor_add(r, DOCTOR_FAIL, "config", "fix the file; rkv-server refuses it the same way",
                   "%s", msg && msg[0] ? msg : "the config file is invalid");
        rkv_server_config_defaults(c);
        rkv_server_config_parse(c, "", 0, "defaults", NULL);
    }
    free(msg);
    return rc == RKV_CONFIG_OK;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        { "config", required_argument, NULL, 'c' }, { "memory", required_argument, NULL, 'm' },
        { "cpus", required_argument, NULL, 'C' },   { "device", required_argument, NULL, 'D' },
        { "json", no_argument, NULL, 'j' },         { "help", no_argument, NULL, 'h' },
        { "version", no_argument, NULL, 'V' },      { NULL, 0, NULL, 0 },
    };
    const char *config_path = NULL, *device = NULL, *cpus_arg = NULL;
    uint64_t memory = 0;
    bool json = false;
    int opt;
    while ((opt = getopt_long(argc, argv, "c:m:hV", opts, NULL)) != -1) {
        switch (opt) {
        case 'c': config_path = optarg; break;
        case 'D': device = optarg; break;
        case 'C': cpus_arg = optarg; break;
        case 'j': json = true; break;
        case 'm':
            if (!rkv_parse_size(optarg, &memory)) {
                fprintf(stderr,
                        "rkv-doctor: --memory: \"%s\" is not a size; use a number with "
                        "an optional K/M/G/T suffix, e.g. 256M\n",
                        optarg);
                return 2;
            }
            break;
        case 'h': doctor_usage(stdout); return 0;
        case 'V': printf("rkv-doctor %s\n", RKV_VERSION_STRING); return 0;
        default: fprintf(stderr, "rkv-doctor: see rkv-doctor --help\n"); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "rkv-doctor: unexpected argument \"%s\"; see rkv-doctor --help\n",
                argv[optind]);
        return 2;
    }

    struct doctor_env env;
    struct doctor_report report;
    struct rkv_server_config cfg;
    doctor_env_init(&env);
    doctor_report_init(&report);
    load_config(&report, &cfg, config_path);

    int cpus[RKV_CONFIG_MAX_CPUS];
    unsigned cpu_count = cfg.cpu_count;
    memcpy(cpus, cfg.cpus, sizeof cpus);
    if (cpus_arg != NULL) {
        char why[160];
        int n = rkv_parse_cpu_list(cpus_arg, cpus, RKV_CONFIG_MAX_CPUS, why, sizeof why);
        if (n < 0) {
            fprintf(stderr, "rkv-doctor: --cpus: \"%s\" is not a CPU list; %s; e.g. 0,2-3\n",
                    cpus_arg, why);
            doctor_report_free(&report);
            return 2;
        }
        cpu_count = (unsigned)n;
    }

    /* The rdma:// listen hosts, to check they belong to an RDMA port. */
    char hosts[RKV_CONFIG_MAX_LISTEN][256];
    const char *host_ptrs[RKV_CONFIG_MAX_LISTEN];
    unsigned host_count = 0;
    bool rdma = false;
    for (unsigned i = 0; i < cfg.listen_count; i++) {
        char scheme[8];
        const char *rest;
        uint16_t port;
        if (!rkv_uri_split(cfg.listen[i].uri, scheme, sizeof scheme, &rest) ||
            strcmp(scheme, "rdma") != 0)
            continue;
        rdma = true;
        if (rkv_host_port(rest, hosts[host_count], sizeof hosts[0], &port)) {
            host_ptrs[host_count] = hosts[host_count];
            host_count++;
        }
    }
    struct doctor_wanted want = {
        .region = memory ? memory : cfg.memory,
        .rdma = rdma,
        .hugepages_required = cfg.hugepages_required,
        .gid_index = cfg.gid_index,
        .device = device ? device : (cfg.rdma_device[0] ? cfg.rdma_device : NULL),
        .cpus = cpus,
        .cpu_count = cpu_count,
        .rdma_hosts = host_ptrs,
        .rdma_host_count = host_count,
    };

    static struct doctor_device devs[DOCTOR_MAX_DEVICES];
    bool class_missing;
    unsigned n = doctor_scan_devices(&env, devs, DOCTOR_MAX_DEVICES, &class_missing);
    if (n > 0 && strcmp(env.sysfs, "/sys") == 0)
        probe_verbs(devs, n);

    struct rlimit rl;
    uint64_t memlock = 0, nofile = 0, nofile_hard = 0;
    if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0)
        memlock = rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : (uint64_t)rl.rlim_cur;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        nofile = rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : (uint64_t)rl.rlim_cur;
        nofile_hard = rl.rlim_max == RLIM_INFINITY ? UINT64_MAX : (uint64_t)rl.rlim_max;
    }
    if (rdma) { /* what the connections register: the server's own sum */
        struct rkv_mem_env menv = { 0 };
        struct rkv_mem_need need;
        cfg.memory = want.region;
        rkv_mem_need_compute(&cfg, want.region, &menv, &need);
        want.conns_locked = need.locked > need.region ? need.locked - need.region : 0;
    }
    gid_t groups[MAX_GROUPS];
    int ngroups = getgroups(MAX_GROUPS, groups);
    if (ngroups < 0)
        ngroups = 0;

    doctor_check_devices(&report, devs, n, class_missing, &want);
    doctor_check_userspace(&report, devs, n);
    doctor_check_ports(&report, devs, n);
    doctor_check_mtu(&report, devs, n);
    doctor_check_gids(&report, devs, n, &want);
    doctor_check_listen_addresses(&report, devs, n, &want);
    doctor_check_device_files(&report, &env, n, &want, geteuid(), getegid(), groups, ngroups);
    doctor_check_memlock(&report, memlock, doctor_has_cap_ipc_lock(&env), n, &want);
    doctor_check_hugepages(&report, &env, &want);
    cfg.memory = want.region;
    doctor_check_memory(&report, &env, &cfg);
    doctor_check_numa(&report, &env, devs, n, &want);
    doctor_check_governor(&report, &env);
    doctor_check_firewall(&report, devs, n);
    doctor_check_rc(&report, &cfg);
    doctor_check_nofile(&report, nofile, nofile_hard, &cfg);
    doctor_check_device_limits(&report, devs, n, &cfg, &want);

    if (json)
        doctor_print_json(&report, stdout);
    else
        doctor_print_text(&report, stdout);
    int status = doctor_failed(&report) ? 1 : 0;
    doctor_report_free(&report);
    return status;
}
