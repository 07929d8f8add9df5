/* test_doctor.c — rkv-doctor's checks against fake sysfs/procfs/dev trees.
 *
 * Each test builds the files a kernel would show (a Soft-RoCE device as
 * rdma_rxe really lays it out, a ConnectX-like PCI device with a port down,
 * hugepage pools, NUMA nodes, cpufreq governors, /dev/infiniband modes) in a
 * temporary directory, points struct doctor_env at it, and checks the level
 * and wording of what the doctor reports.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "config.h"
#include "doctor_checks.h"

struct fixture {
    char root[64];
    struct doctor_env env;
    struct doctor_report report;
};

/* root/rel into path, creating the directories above it. */
static void make_parents(const struct fixture *f, const char *rel, char *path, size_t len)
{
    snprintf(path, len, "%s/%s", f->root, rel);
    for (char *slash = strchr(path + strlen(f->root) + 1, '/'); slash;
         slash = strchr(slash + 1, '/')) {
        *slash = '\0';
        mkdir(path, 0755);
        *slash = '/';
    }
}

static void write_file(const struct fixture *f, const char *rel, const char *text)
{
    char path[1024];
    make_parents(f, rel, path, sizeof path);
    FILE *out = fopen(path, "w");
    assert_non_null(out);
    fputs(text, out);
    fclose(out);
}

static void make_link(const struct fixture *f, const char *rel, const char *target)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", f->root, rel);
    assert_int_equal(symlink(target, path), 0);
}

static void make_dir(const struct fixture *f, const char *rel)
{
    char path[1024];
    make_parents(f, rel, path, sizeof path);
    mkdir(path, 0755);
}

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    snprintf(f->root, sizeof f->root, "/tmp/rkv-test-doctor-XXXXXX");
    assert_non_null(mkdtemp(f->root));
    snprintf(f->env.sysfs, sizeof f->env.sysfs, "%s/sys", f->root);
    snprintf(f->env.procfs, sizeof f->env.procfs, "%s/proc", f->root);
    snprintf(f->env.devfs, sizeof f->env.devfs, "%s/dev", f->root);
    doctor_report_init(&f->report);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    char cmd[128];
    doctor_report_free(&f->report);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->root);
    assert_int_equal(system(cmd), 0);
    free(f);
    return 0;
}

/* Results of `level` from `check` whose message (or fix) contains `text`. */
static unsigned count(const struct doctor_report *r, enum doctor_level level, const char *check,
                      const char *text)
{
    unsigned n = 0;
    for (unsigned i = 0; i < r->count; i++) {
        const struct doctor_result *it = &r->items[i];
        if (it->level == level && strcmp(it->check, check) == 0 &&
            (text == NULL || strstr(it->message, text) != NULL || strstr(it->fix, text) != NULL))
            n++;
    }
    return n;
}

static void reset(struct fixture *f)
{
    doctor_report_free(&f->report);
    doctor_report_init(&f->report);
}

static const struct doctor_wanted default_want = { .region = 256ull << 20, .gid_index = -1 };

/* rxe0 on rxedummy0 exactly as Linux 6.1's rdma_rxe shows it. */
static void make_soft_roce(struct fixture *f, const char *mtu)
{
    write_file(f, "sys/class/infiniband/rxe0/node_type", "1: CA\n");
    write_file(f, "sys/class/infiniband/rxe0/parent", "rxedummy0\n");
    write_file(f, "sys/class/infiniband/rxe0/ports/1/state", "4: ACTIVE\n");
    write_file(f, "sys/class/infiniband/rxe0/ports/1/phys_state", "5: LinkUp\n");
    write_file(f, "sys/class/infiniband/rxe0/ports/1/link_layer", "Ethernet\n");
    write_file(f, "sys/class/infiniband/rxe0/ports/1/rate", "2.5 Gb/sec (1X SDR)\n");
    write_file(f, "sys/class/infiniband/rxe0/ports/1/gids/0",
               "fe80:0000:0000:0000:8c68:04ff:fec1:3cc3\n");
    write_file(f, "sys/class/infiniband/rxe0/ports/1/gids/1",
               "0000:0000:0000:0000:0000:ffff:c000:0201\n");
    write_file(f, "sys/class/infiniband/rxe0/ports/1/gids/2",
               "0000:0000:0000:0000:0000:0000:0000:0000\n");
    write_file(f, "sys/class/infiniband/rxe0/ports/1/gids/3",
               "0000:0000:0000:0000:0000:0000:0000:0000\n");
    write_file(f, "sys/class/infiniband/rxe0/ports/1/gid_attrs/types/0", "RoCE v2\n");
    write_file(f, "sys/class/infiniband/rxe0/ports/1/gid_attrs/types/1", "RoCE v2\n");
    write_file(f, "sys/class/infiniband/rxe0/ports/1/gid_attrs/ndevs/0", "rxedummy0\n");
    write_file(f, "sys/class/infiniband/rxe0/ports/1/gid_attrs/ndevs/1", "rxedummy0\n");
    write_file(f, "sys/class/net/rxedummy0/mtu", mtu);
}

/* mlx5_0: a PCI device on NUMA node 1; port 1 RoCE and down, port 2 IB in INIT. */
static void make_hardware(struct fixture *f)
{
    write_file(f, "sys/devices/pci0000:00/0000:3b:00.0/numa_node", "1\n");
    make_dir(f, "sys/bus/pci/drivers/mlx5_core");
    make_link(f, "sys/devices/pci0000:00/0000:3b:00.0/driver", "../../../bus/pci/drivers/mlx5_core");
    write_file(f, "sys/class/infiniband/mlx5_0/node_type", "1: CA\n");
    make_link(f, "sys/class/infiniband/mlx5_0/device", "../../../devices/pci0000:00/0000:3b:00.0");
    write_file(f, "sys/class/infiniband/mlx5_0/ports/1/state", "1: DOWN\n");
    write_file(f, "sys/class/infiniband/mlx5_0/ports/1/phys_state", "3: Disabled\n");
    write_file(f, "sys/class/infiniband/mlx5_0/ports/1/link_layer", "Ethernet\n");
    write_file(f, "sys/class/infiniband/mlx5_0/ports/1/gids/0",
               "fe80:0000:0000:0000:0202:c9ff:fe00:0001\n");
    write_file(f, "sys/class/infiniband/mlx5_0/ports/1/gid_attrs/types/0", "IB/RoCE v1\n");
    write_file(f, "sys/class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs/0", "ens1f0\n");
    write_file(f, "sys/class/net/ens1f0/mtu", "9000\n");
    write_file(f, "sys/class/infiniband/mlx5_0/ports/2/state", "2: INIT\n");
    write_file(f, "sys/class/infiniband/mlx5_0/ports/2/phys_state", "5: LinkUp\n");
    write_file(f, "sys/class/infiniband/mlx5_0/ports/2/link_layer", "InfiniBand\n");
    write_file(f, "sys/class/infiniband/mlx5_0/ports/2/gids/0",
               "fe80:0000:0000:0000:0202:c9ff:fe00:0002\n");
}

/* ------------------------------------------------------------ tests */

static void test_env_override(void **state)
{
    (void)state;
    struct doctor_env env;
    setenv("RKV_DOCTOR_SYSFS", "/fake/sys", 1);
    setenv("RKV_DOCTOR_PROCFS", "/fake/proc", 1);
    unsetenv("RKV_DOCTOR_DEVFS");
    doctor_env_init(&env);
    assert_string_equal(env.sysfs, "/fake/sys");
    assert_string_equal(env.procfs, "/fake/proc");
    assert_string_equal(env.devfs, "/dev");
    unsetenv("RKV_DOCTOR_SYSFS");
    unsetenv("RKV_DOCTOR_PROCFS");
    doctor_env_init(&env);
    assert_string_equal(env.sysfs, "/sys");
    assert_string_equal(env.procfs, "/proc");
}

static void test_no_devices(void **state)
{
    struct fixture *f = *state;
    struct doctor_device devs[DOCTOR_MAX_DEVICES];
    struct doctor_wanted want = default_want;
    bool missing;
    assert_int_equal(doctor_scan_devices(&f->env, devs, DOCTOR_MAX_DEVICES, &missing), 0);
    assert_true(missing);
    doctor_check_devices(&f->report, devs, 0, missing, &want);
    assert_int_equal(count(&f->report, DOCTOR_WARN, "device", "rdma link add rxe0 type rxe"), 1);
    assert_int_equal(count(&f->report, DOCTOR_WARN, "device", "shm://"), 1);
    assert_int_equal(count(&f->report, DOCTOR_WARN, "device", "RDMA core is not loaded"), 1);
    assert_false(doctor_failed(&f->report));

    /* An rdma:// listener makes it a failure; an empty class dir is named as such. */
    reset(f);
    make_dir(f, "sys/class/infiniband");
    assert_int_equal(doctor_scan_devices(&f->env, devs, DOCTOR_MAX_DEVICES, &missing), 0);
    assert_false(missing);
    want.rdma = true;
    doctor_check_devices(&f->report, devs, 0, missing, &want);
    assert_int_equal(count(&f->report, DOCTOR_FAIL, "device", "is empty"), 1);
    assert_true(doctor_failed(&f->report));

    /* No device: the device-file check has nothing to say. */
    reset(f);
    doctor_check_device_files(&f->report, &f->env, 0, &want, 1000, 1000, NULL, 0);
    assert_int_equal(f->report.count, 0);
}

static void test_soft_roce(void **state)
{
    struct fixture *f = *state;
    struct doctor_device devs[DOCTOR_MAX_DEVICES];
    struct doctor_wanted want = default_want;
    bool missing;
    make_soft_roce(f, "1500\n");
    assert_int_equal(doctor_scan_devices(&f->env, devs, DOCTOR_MAX_DEVICES, &missing), 1);
    const struct doctor_device *d = &devs[0];
    assert_string_equal(d->name, "rxe0");
    assert_true(d->software);
    assert_string_equal(d->driver, "rxe");
    assert_int_equal(d->numa_node, -1);
    assert_int_equal(d->port_count, 1);
    const struct doctor_port *p = &d->ports[0];
    assert_int_equal(p->state, 4);
    assert_string_equal(p->state_text, "ACTIVE");
    assert_int_equal(p->phys_state, 5);
    assert_string_equal(p->link_layer, "Ethernet");
    assert_string_equal(p->netdev, "rxedummy0");
    assert_int_equal(p->netdev_mtu, 1500);
    assert_int_equal(p->gid_count, 2); /* the zero entries are skipped */
    assert_int_equal(p->gids[1].index, 1);
    assert_true(p->gids[1].ipv4);
    assert_string_equal(p->gids[1].ipv4_text, "192.0.2.1");
    assert_string_equal(p->gids[1].text, "::ffff:192.0.2.1");
    assert_false(p->gids[0].ipv4);

    doctor_check_devices(&f->report, devs, 1, missing, &want);
    assert_int_equal(count(&f->report, DOCTOR_INFO, "device", "Soft-RoCE"), 1);
    doctor_check_ports(&f->report, devs, 1);
    assert_int_equal(count(&f->report, DOCTOR_OK, "port", "rxe0 port 1: ACTIVE, LinkUp"), 1);
    doctor_check_mtu(&f->report, devs, 1);
    assert_int_equal(count(&f->report, DOCTOR_WARN, "mtu", "RDMA MTU is 1024 bytes"), 1);
    assert_int_equal(count(&f->report, DOCTOR_WARN, "mtu", "ip link set dev rxedummy0 mtu 4200"), 1);
    doctor_check_gids(&f->report, devs, 1, &want);
    assert_int_equal(count(&f->report, DOCTOR_OK, "gid", "use gid_index = 1"), 1);
    assert_int_equal(count(&f->report, DOCTOR_INFO, "gid", "0 fe80::8c68:4ff:fec1:3cc3 (RoCE v2"), 1);
    doctor_check_firewall(&f->report, devs, 1);
    assert_int_equal(count(&f->report, DOCTOR_INFO, "firewall", "4791"), 1);
    assert_false(doctor_failed(&f->report));

    /* Configured GID indexes: the IPv6 one is allowed, an empty one fails. */
    reset(f);
    want.gid_index = 0;
    doctor_check_gids(&f->report, devs, 1, &want);
    assert_int_equal(count(&f->report, DOCTOR_INFO, "gid", "configured gid_index 0"), 1);
    reset(f);
    want.gid_index = 7;
    doctor_check_gids(&f->report, devs, 1, &want);
    assert_int_equal(count(&f->report, DOCTOR_FAIL, "gid", "gid_index 7 is empty"), 1);
    assert_int_equal(count(&f->report, DOCTOR_FAIL, "gid", "set gid_index = 1"), 1);
    reset(f);
    want.gid_index = 1;
    doctor_check_gids(&f->report, devs, 1, &want);
    assert_int_equal(count(&f->report, DOCTOR_OK, "gid", "IPv4 RoCE v2 GID"), 1);
    assert_false(doctor_failed(&f->report));

    /* Listen addresses are matched against the GID table. */
    reset(f);
    const char *hosts[] = { "192.0.2.1", "10.9.9.9", "0.0.0.0", "kv.example" };
    want.rdma_hosts = hosts;
    want.rdma_host_count = 4;
    doctor_check_listen_addresses(&f->report, devs, 1, &want);
    assert_int_equal(count(&f->report, DOCTOR_OK, "listen", "rdma://192.0.2.1 is on rxe0 port 1"), 1);
    assert_int_equal(count(&f->report, DOCTOR_FAIL, "listen", "no RDMA port has the address 10.9.9.9"),
                     1);
    assert_int_equal(count(&f->report, DOCTOR_OK, "listen", "every address"), 1);
    assert_int_equal(count(&f->report, DOCTOR_INFO, "listen", "host name"), 1);

    /* A jumbo netdev gives the full 4096-byte MTU. */
    reset(f);
    write_file(f, "sys/class/net/rxedummy0/mtu", "9000\n");
    assert_int_equal(doctor_scan_devices(&f->env, devs, DOCTOR_MAX_DEVICES, &missing), 1);
    doctor_check_mtu(&f->report, devs, 1);
    assert_int_equal(count(&f->report, DOCTOR_OK, "mtu", "RDMA MTU 4096 (rxedummy0 MTU 9000)"), 1);
    /* ... unless the port itself reports less. */
    reset(f);
    devs[0].ports[0].active_mtu = 1024;
    devs[0].ports[0].max_mtu = 1024;
    doctor_check_mtu(&f->report, devs, 1);
    assert_int_equal(count(&f->report, DOCTOR_WARN, "mtu", "active MTU 1024 is below the 4096"), 1);
}

static void test_hardware_ports(void **state)
{
    struct fixture *f = *state;
    struct doctor_device devs[DOCTOR_MAX_DEVICES];
    struct doctor_wanted want = default_want;
    bool missing;
    make_hardware(f);
    make_soft_roce(f, "1500\n");
    assert_int_equal(doctor_scan_devices(&f->env, devs, DOCTOR_MAX_DEVICES, &missing), 2);
    /* sorted by name */
    assert_string_equal(devs[0].name, "mlx5_0");
    assert_string_equal(devs[1].name, "rxe0");
    const struct doctor_device *d = &devs[0];
    assert_false(d->software);
    assert_string_equal(d->driver, "mlx5_core");
    assert_string_equal(d->pci, "0000:3b:00.0");
    assert_int_equal(d->numa_node, 1);
    assert_int_equal(d->port_count, 2);
    assert_string_equal(d->ports[0].netdev, "ens1f0");
    assert_int_equal(d->ports[0].netdev_mtu, 9000);
    assert_string_equal(d->ports[1].link_layer, "InfiniBand");

    doctor_check_devices(&f->report, devs, 1, missing, &want);
    assert_int_equal(count(&f->report, DOCTOR_OK, "device", "driver mlx5_core, PCI 0000:3b:00.0"), 1);
    doctor_check_ports(&f->report, devs, 1);
    assert_int_equal(count(&f->report, DOCTOR_FAIL, "port",
                           "mlx5_0 port 1 is DOWN (physical state Disabled"),
                     1);
    assert_int_equal(count(&f->report, DOCTOR_FAIL, "port", "ip link set ens1f0 up"), 1);
    assert_int_equal(count(&f->report, DOCTOR_FAIL, "port", "opensm"), 1);
    doctor_check_gids(&f->report, devs, 1, &want);
    assert_int_equal(count(&f->report, DOCTOR_WARN, "gid", "only RoCE v1 GIDs"), 1);
    assert_true(doctor_failed(&f->report));

    /* InfiniBand MTU: active below the port's maximum is a warning. */
    reset(f);
    devs[0].ports[1].active_mtu = 2048;
    devs[0].ports[1].max_mtu = 4096;
    doctor_check_mtu(&f->report, devs, 1);
    assert_int_equal(count(&f->report, DOCTOR_WARN, "mtu",
                           "active MTU 2048 is below the port's maximum 4096"),
                     1);
    reset(f);
    devs[0].ports[1].active_mtu = 4096;
    doctor_check_mtu(&f->report, devs, 1);
    assert_int_equal(count(&f->report, DOCTOR_OK, "mtu", "mlx5_0 port 2: active MTU 4096"), 1);

    /* A configured device that does not exist. */
    reset(f);
    want.device = "mlx5_9";
    doctor_check_devices(&f->report, devs, 2, missing, &want);
    assert_int_equal(count(&f->report, DOCTOR_FAIL, "device", "devices: mlx5_0, rxe0"), 1);
}

static void test_userspace(void **state)
{
    struct fixture *f = *state;
    struct doctor_device devs[3];
    memset(devs, 0, sizeof devs);
    strcpy(devs[0].name, "a");
    strcpy(devs[0].driver, "mlx5_core");
    devs[0].verbs_checked = true;
    strcpy(devs[1].name, "b");
    devs[1].verbs_checked = devs[1].verbs_listed = true;
    strcpy(devs[1].verbs_error, "ibv_open_device: Permission denied");
    strcpy(devs[2].name, "c");
    devs[2].verbs_checked = devs[2].verbs_listed = true;
    doctor_check_userspace(&f->report, devs, 3);
    assert_int_equal(count(&f->report, DOCTOR_FAIL, "verbs", "ibverbs-providers"), 1);
    assert_int_equal(count(&f->report, DOCTOR_FAIL, "verbs", "cannot open b: ibv_open_device"), 1);
    assert_int_equal(count(&f->report, DOCTOR_OK, "verbs", "opens c"), 1);
}

static void test_device_files(void **state)
{
    struct fixture *f = *state;
    struct doctor_wanted want = default_want;
    char path[512];
    struct stat st;

    /* No /dev/infiniband at all. */
    want.rdma = true;
    doctor_check_device_files(&f->report, &f->env, 1, &want, 1000, 1000, NULL, 0);
    assert_int_equal(count(&f->report, DOCTOR_FAIL, "devfiles", "modprobe ib_uverbs"), 1);
    assert_int_equal(count(&f->report, DOCTOR_FAIL, "rdma_cm", "modprobe rdma_ucm"), 1);

    /* uverbs0 owner-only: another user cannot open it; root can. The
     * checks are judged for the uid/gids given, so no chown is needed. */
    reset(f);
    write_file(f, "dev/infiniband/uverbs0", "");
    snprintf(path, sizeof path, "%s/dev/infiniband/uverbs0", f->root);
    assert_int_equal(chmod(path, 0600), 0);
    assert_int_equal(stat(path, &st), 0);
    uid_t other = st.st_uid + 1000;
    gid_t other_gid = st.st_gid + 1000, file_group = st.st_gid;
    want.rdma = false;
    doctor_check_device_files(&f->report, &f->env, 1, &want, other, other_gid, NULL, 0);
    assert_int_equal(count(&f->report, DOCTOR_FAIL, "devfiles", "Couldn't open device"), 1);
    assert_int_equal(count(&f->report, DOCTOR_FAIL, "devfiles", "mode 600"), 1);
    assert_int_equal(count(&f->report, DOCTOR_WARN, "rdma_cm", "missing"), 1);
    reset(f);
    doctor_check_device_files(&f->report, &f->env, 1, &want, 0, 0, NULL, 0);
    assert_int_equal(count(&f->report, DOCTOR_OK, "devfiles", NULL), 1);
    reset(f);
    doctor_check_device_files(&f->report, &f->env, 1, &want, st.st_uid, other_gid, NULL, 0);
    assert_int_equal(count(&f->report, DOCTOR_OK, "devfiles", NULL), 1); /* the owner */

    /* Group access works for a member of the file's group only. */
    reset(f);
    assert_int_equal(chmod(path, 0660), 0);
    write_file(f, "dev/infiniband/rdma_cm", "");
    snprintf(path, sizeof path, "%s/dev/infiniband/rdma_cm", f->root);
    assert_int_equal(chmod(path, 0666), 0);
    doctor_check_device_files(&f->report, &f->env, 1, &want, other, other_gid, &file_group, 1);
    assert_int_equal(count(&f->report, DOCTOR_OK, "devfiles", "1 uverbs device file"), 1);
    assert_int_equal(count(&f->report, DOCTOR_OK, "rdma_cm", NULL), 1);
    assert_false(doctor_failed(&f->report));
    reset(f);
    doctor_check_device_files(&f->report, &f->env, 1, &want, other, other_gid, NULL, 0);
    assert_int_equal(count(&f->report, DOCTOR_FAIL, "devfiles", NULL), 1);

    /* rdma_cm not writable for others. */
    reset(f);
    assert_int_equal(chmod(path, 0600), 0);
    doctor_check_device_files(&f->report, &f->env, 1, &want, other, other_gid, &file_group, 1);
    assert_int_equal(count(&f->report, DOCTOR_FAIL, "rdma_cm", "cannot open it"), 1);
}

static void test_memlock(void **state)
{
    struct fixture *f = *state;
    struct doctor_wanted want = default_want;
    doctor_check_memlock(&f->report, 64 << 10, false, 1, &want);
    assert_int_equal(count(&f->report, DOCTOR_FAIL, "memlock",
                           "memlock limit 64 KiB is below the 256 MiB region"),
                     1);
    assert_int_equal(count(&f->report, DOCTOR_FAIL, "memlock", "LimitMEMLOCK=infinity"), 1);
    reset(f);
    doctor_check_memlock(&f->report, 64 << 10, false, 0, &want);
    assert_int_equal(count(&f->report, DOCTOR_WARN, "memlock", NULL), 1);
    reset(f);
    doctor_check_memlock(&f->report, 64 << 10, true, 1, &want);
    assert_int_equal(count(&f->report, DOCTOR_INFO, "memlock", "CAP_IPC_LOCK"), 1);
    reset(f);
    doctor_check_memlock(&f->report, UINT64_MAX, false, 1, &want);
    assert_int_equal(count(&f->report, DOCTOR_OK, "memlock", "unlimited"), 1);
    reset(f);
    doctor_check_memlock(&f->report, 1ull << 30, false, 1, &want);
    assert_int_equal(count(&f->report, DOCTOR_OK, "memlock", "1 GiB covers"), 1);
    /* Just the region is not enough: buffers and queues need room too. */
    reset(f);
    doctor_check_memlock(&f->report, 256ull << 20, false, 1, &want);
    assert_int_equal(count(&f->report, DOCTOR_FAIL, "memlock", NULL), 1);
}

/* Connections' registered buffers count against memlock beside the region. */
static void test_memlock_conns(void **state)
{
    struct fixture *f = *state;
    struct doctor_wanted want = default_want;
    want.conns_locked = 512ull << 20;
    doctor_check_memlock(&f->report, 1ull << 30, false, 1, &want);
    assert_int_equal(count(&f->report, DOCTOR_OK, "memlock", "connections' registered buffers"), 1);
    reset(f);
    doctor_check_memlock(&f->report, 512ull << 20, false, 1, &want);
    assert_int_equal(count(&f->report, DOCTOR_WARN, "memlock",
                           "covers the 256 MiB region but not the buffers max_conns connections "
                           "register beside it (256.0 MiB more)"),
                     1);
    reset(f);
    doctor_check_memlock(&f->report, 128ull << 20, false, 1, &want);
    assert_int_equal(count(&f->report, DOCTOR_FAIL, "memlock", NULL), 1);
}

/* ulimit -n against max_conns + max_unauth_conns (and the server's own). */
static void test_nofile(void **state)
{
    struct fixture *f = *state;
    struct rkv_server_config cfg;
    rkv_server_config_defaults(&cfg);
    cfg.max_conns = 10000;
    doctor_check_nofile(&f->report, 65536, 65536, &cfg);
    assert_int_equal(count(&f->report, DOCTOR_OK, "nofile", "limit 65536 covers max_conns 10000"), 1);
    reset(f);
    doctor_check_nofile(&f->report, UINT64_MAX, UINT64_MAX, &cfg);
    assert_int_equal(count(&f->report, DOCTOR_OK, "nofile", "limit unlimited covers"), 1);
    reset(f);
    doctor_check_nofile(&f->report, 1024, 4096, &cfg);
    assert_int_equal(count(&f->report, DOCTOR_WARN, "nofile",
                           "open-files limit 1024 (hard 4096) is below the 10080 descriptors"),
                     1);
    assert_int_equal(count(&f->report, DOCTOR_WARN, "nofile", "LimitNOFILE=65536"), 1);
    assert_false(doctor_failed(&f->report));
}

/* A device's max_qp / max_cq / max_srq against the connections, skipped
 * when unknown (no device, or not queried). */
static void test_device_limits(void **state)
{
    struct fixture *f = *state;
    struct rkv_server_config cfg;
    struct doctor_wanted want = default_want;
    struct doctor_device dev = {
        .name = "mlx5_0", .max_qp = 131072, .max_cq = 16777216, .max_srq = 8388608
    };
    rkv_server_config_defaults(&cfg);
    cfg.max_conns = 6400;
    cfg.workers = 4;
    want.rdma = true;
    doctor_check_device_limits(&f->report, &dev, 1, &cfg, &want);
    assert_int_equal(count(&f->report, DOCTOR_OK, "rdma-limits", "mlx5_0: max_qp 131072 covers 6416"),
                     1);
    assert_int_equal(count(&f->report, DOCTOR_OK, "rdma-limits", "max_cq 16777216 covers 12832"), 1);
    assert_int_equal(count(&f->report, DOCTOR_OK, "rdma-limits", "max_srq 8388608 covers 4"), 1);
    reset(f);
    dev.max_qp = 4096; /* a small device: the QPs do not fit */
    dev.max_srq = 2;
    doctor_check_device_limits(&f->report, &dev, 1, &cfg, &want);
    assert_int_equal(count(&f->report, DOCTOR_WARN, "rdma-limits",
                           "mlx5_0: max_qp is 4096, below the 6416 the server takes"),
                     1);
    assert_int_equal(count(&f->report, DOCTOR_WARN, "rdma-limits", "max_srq is 2, below the 4"), 1);
    reset(f);
    want.rdma = false; /* no rdma listener: the numbers, no verdict */
    doctor_check_device_limits(&f->report, &dev, 1, &cfg, &want);
    assert_int_equal(count(&f->report, DOCTOR_INFO, "rdma-limits", "no rdma listener"), 1);
    reset(f);
    dev.max_qp = 0; /* not queried */
    want.rdma = true;
    doctor_check_device_limits(&f->report, &dev, 1, &cfg, &want);
    doctor_check_device_limits(&f->report, NULL, 0, &cfg, &want);
    assert_int_equal(f->report.count, 0);
}

static void test_cap_ipc_lock(void **state)
{
    struct fixture *f = *state;
    assert_false(doctor_has_cap_ipc_lock(&f->env));
    write_file(f, "proc/self/status",
               "Name:\trkv\nCapInh:\t0000000000000000\nCapEff:\t0000000000004000\n");
    assert_true(doctor_has_cap_ipc_lock(&f->env));
    write_file(f, "proc/self/status", "Name:\trkv\nCapEff:\t000001ffffffbfff\n");
    assert_false(doctor_has_cap_ipc_lock(&f->env));
}

static void test_hugepages(void **state)
{
    struct fixture *f = *state;
    struct doctor_wanted want = default_want;
    doctor_check_hugepages(&f->report, &f->env, &want);
    assert_int_equal(count(&f->report, DOCTOR_WARN, "hugepages", "offers no hugepages"), 1);

    reset(f);
    write_file(f, "sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages", "10\n");
    write_file(f, "sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages", "12\n");
    write_file(f, "sys/kernel/mm/hugepages/hugepages-1048576kB/free_hugepages", "0\n");
    write_file(f, "sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages", "0\n");
    doctor_check_hugepages(&f->report, &f->env, &want);
    assert_int_equal(count(&f->report, DOCTOR_WARN, "hugepages",
                           "2 MiB: 10 free of 12; 1 GiB: 0 free of 0"),
                     1);
    assert_int_equal(count(&f->report, DOCTOR_WARN, "hugepages", "`echo 128 > "), 1);
    reset(f);
    want.hugepages_required = true;
    doctor_check_hugepages(&f->report, &f->env, &want);
    assert_int_equal(count(&f->report, DOCTOR_FAIL, "hugepages", "will refuse to start"), 1);

    reset(f);
    write_file(f, "sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages", "128\n");
    doctor_check_hugepages(&f->report, &f->env, &want);
    assert_int_equal(count(&f->report, DOCTOR_OK, "hugepages",
                           "fits in free 2 MiB hugepages (128 free of 12"),
                     1);

    reset(f);
    want.region = 1ull << 30;
    write_file(f, "sys/kernel/mm/hugepages/hugepages-1048576kB/free_hugepages", "1\n");
    doctor_check_hugepages(&f->report, &f->env, &want);
    assert_int_equal(count(&f->report, DOCTOR_OK, "hugepages", "1 GiB hugepages"), 1);
}

/* The memory the server could get, from a fake /proc and cgroup v2 tree,
 * judged by the same code rkv-server refuses with (server/memory_budget.c). */
static void test_memory(void **state)
{
    struct fixture *f = *state;
    struct rkv_server_config cfg;
    rkv_server_config_defaults(&cfg);
    assert_int_equal(rkv_server_config_parse(&cfg, "", 0, "defaults", NULL), RKV_CONFIG_OK);
    cfg.max_conns = 4;
    write_file(f, "proc/meminfo", "MemTotal: 25165824 kB\nMemAvailable: 22334668 kB\n");
    write_file(f, "proc/self/cgroup", "0::/rkv.service\n");
    write_file(f, "proc/self/mountinfo", "30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
    write_file(f, "sys/fs/cgroup/rkv.service/memory.max", "2147483648\n");
    write_file(f, "sys/fs/cgroup/rkv.service/memory.current", "0\n");
    write_file(f, "sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages", "16\n");
    write_file(f, "sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages", "16\n");

    cfg.memory = 256ull << 20;
    doctor_check_memory(&f->report, &f->env, &cfg);
    assert_int_equal(count(&f->report, DOCTOR_INFO, "memory",
                           "MemAvailable 21.3 GiB of MemTotal 24 GiB"),
                     1);
    assert_int_equal(count(&f->report, DOCTOR_INFO, "memory", "cgroup memory limit 2 GiB"), 1);
    assert_int_equal(count(&f->report, DOCTOR_INFO, "memory", "2 MiB hugepages 16 free of 16"), 1);
    assert_int_equal(count(&f->report, DOCTOR_OK, "memory", "--memory 256 MiB fits"), 1);
    assert_int_equal(count(&f->report, DOCTOR_INFO, "memory",
                           "the largest --memory rkv-server accepts"),
                     1);

    reset(f);
    cfg.memory = 8ull << 30;
    doctor_check_memory(&f->report, &f->env, &cfg);
    assert_int_equal(count(&f->report, DOCTOR_FAIL, "memory", "--memory 8 GiB cannot be backed"), 1);
    assert_int_equal(count(&f->report, DOCTOR_FAIL, "memory",
                           "cgroup memory limit 2 GiB (/sys/fs/cgroup/rkv.service"),
                     1);

    reset(f); /* no MemAvailable: a warning, not a refusal */
    write_file(f, "proc/meminfo", "MemTotal: 25165824 kB\n");
    write_file(f, "sys/fs/cgroup/rkv.service/memory.max", "max\n");
    doctor_check_memory(&f->report, &f->env, &cfg);
    assert_int_equal(count(&f->report, DOCTOR_WARN, "memory", "has no MemAvailable"), 1);
    assert_int_equal(count(&f->report, DOCTOR_OK, "memory", "fits"), 1);
}

static void test_numa(void **state)
{
    struct fixture *f = *state;
    struct doctor_wanted want = default_want;
    struct doctor_device dev;
    memset(&dev, 0, sizeof dev);
    strcpy(dev.name, "mlx5_0");
    dev.numa_node = 1;
    write_file(f, "sys/devices/system/cpu/online", "0-3\n");

    /* One node: nothing to get wrong. */
    write_file(f, "sys/devices/system/node/node0/cpulist", "0-3\n");
    doctor_check_numa(&f->report, &f->env, &dev, 1, &want);
    assert_int_equal(count(&f->report, DOCTOR_OK, "numa", "one NUMA node"), 1);

    write_file(f, "sys/devices/system/node/node0/cpulist", "0-1\n");
    write_file(f, "sys/devices/system/node/node1/cpulist", "2-3\n");
    reset(f);
    doctor_check_numa(&f->report, &f->env, &dev, 1, &want);
    assert_int_equal(count(&f->report, DOCTOR_INFO, "numa", "NUMA node 1 (CPUs 2-3)"), 1);

    int off_node[] = { 0, 1 }, on_node[] = { 3, 2 }, offline[] = { 2, 7 };
    reset(f);
    want.cpus = off_node;
    want.cpu_count = 2;
    doctor_check_numa(&f->report, &f->env, &dev, 1, &want);
    assert_int_equal(count(&f->report, DOCTOR_WARN, "numa", "2 of the 2 configured CPUs (e.g. CPU 0)"),
                     1);
    assert_int_equal(count(&f->report, DOCTOR_WARN, "numa", "set cpus = 2-3"), 1);
    reset(f);
    want.cpus = on_node;
    doctor_check_numa(&f->report, &f->env, &dev, 1, &want);
    assert_int_equal(count(&f->report, DOCTOR_OK, "numa", "all on NUMA node 1"), 1);
    reset(f);
    want.cpus = offline;
    doctor_check_numa(&f->report, &f->env, &dev, 1, &want);
    assert_int_equal(count(&f->report, DOCTOR_FAIL, "numa",
                           "CPU 7 in the configured cpus is not online here (online: 0-3)"),
                     1);

    /* Unknown node of a hardware device; software devices are not judged. */
    reset(f);
    want.cpu_count = 0;
    dev.numa_node = -1;
    doctor_check_numa(&f->report, &f->env, &dev, 1, &want);
    assert_int_equal(count(&f->report, DOCTOR_INFO, "numa", "does not say"), 1);
    reset(f);
    dev.software = true;
    doctor_check_numa(&f->report, &f->env, &dev, 1, &want);
    assert_int_equal(f->report.count, 0);
}

/* The server's RC settings and the dead-peer times they give. */
static void test_rc(void **state)
{
    struct fixture *f = *state;
    struct rkv_server_config cfg;
    rkv_server_config_defaults(&cfg);
    doctor_check_rc(&f->report, &cfg);
    assert_int_equal(count(&f->report, DOCTOR_INFO, "rdma-rc",
                           "ack_timeout 16 (268.4 ms per try) x "
                           "(retry_count 6 + 1) tries: a transfer to a dead peer fails within 1.88 s"),
                     1);
    assert_int_equal(count(&f->report, DOCTOR_INFO, "rdma-rc", "loses its slot within 2.88 s"), 1);
    assert_int_equal(f->report.count, 1);

    reset(f);
    cfg.ack_timeout = 7; /* 524 us per try */
    doctor_check_rc(&f->report, &cfg);
    assert_int_equal(count(&f->report, DOCTOR_WARN, "rdma-rc", "waits only 524 us for an ACK"), 1);

    reset(f);
    cfg.ack_timeout = 22; /* 17.2 s per try, 7 tries */
    doctor_check_rc(&f->report, &cfg);
    assert_int_equal(count(&f->report, DOCTOR_WARN, "rdma-rc", "for up to 121 s"), 1);

    reset(f);
    cfg.ack_timeout = 16;
    cfg.retry_count = 7;
    doctor_check_rc(&f->report, &cfg);
    assert_int_equal(count(&f->report, DOCTOR_WARN, "rdma-rc",
                           "Soft-RoCE (rdma_rxe) takes 7 to mean retry forever"),
                     1);
    assert_false(doctor_failed(&f->report));
}

static void test_governor(void **state)
{
    struct fixture *f = *state;
    make_dir(f, "sys/devices/system/cpu/cpu0");
    make_dir(f, "sys/devices/system/cpu/cpufreq");
    doctor_check_governor(&f->report, &f->env);
    assert_int_equal(count(&f->report, DOCTOR_INFO, "governor", "no CPU frequency scaling"), 1);

    reset(f);
    write_file(f, "sys/devices/system/cpu/cpu0/cpufreq/scaling_governor", "performance\n");
    write_file(f, "sys/devices/system/cpu/cpu1/cpufreq/scaling_governor", "powersave\n");
    write_file(f, "sys/devices/system/cpu/cpu2/cpufreq/scaling_governor", "performance\n");
    write_file(f, "sys/devices/system/cpu/cpu10/cpufreq/scaling_governor", "powersave\n");
    doctor_check_governor(&f->report, &f->env);
    assert_int_equal(count(&f->report, DOCTOR_WARN, "governor",
                           "2 of 4 CPUs use the powersave governor"),
                     1);
    assert_int_equal(count(&f->report, DOCTOR_WARN, "governor",
                           "cpupower frequency-set -g performance"),
                     1);

    reset(f);
    write_file(f, "sys/devices/system/cpu/cpu1/cpufreq/scaling_governor", "performance\n");
    write_file(f, "sys/devices/system/cpu/cpu10/cpufreq/scaling_governor", "performance\n");
    doctor_check_governor(&f->report, &f->env);
    assert_int_equal(count(&f->report, DOCTOR_OK, "governor", "all 4 CPUs"), 1);
}

static void test_roce_mtu(void **state)
{
    (void)state;
    assert_int_equal(doctor_roce_mtu(1500), 1024);
    assert_int_equal(doctor_roce_mtu(2200), 2048);
    assert_int_equal(doctor_roce_mtu(4200), 4096);
    assert_int_equal(doctor_roce_mtu(4191), 2048);
    assert_int_equal(doctor_roce_mtu(9000), 4096);
    assert_int_equal(doctor_roce_mtu(65536), 4096);
    assert_int_equal(doctor_roce_mtu(300), 0);
}

static void test_output(void **state)
{
    struct fixture *f = *state;
    char *text = NULL;
    size_t len = 0;
    doctor_add(&f->report, DOCTOR_OK, "a", NULL, "fine");
    doctor_add(&f->report, DOCTOR_FAIL, "b", "do \"this\"", "broken %d", 7);
    assert_true(doctor_failed(&f->report));
    assert_int_equal(f->report.counts[DOCTOR_OK], 1);
    assert_int_equal(f->report.counts[DOCTOR_FAIL], 1);

    FILE *out = open_memstream(&text, &len);
    doctor_print_text(&f->report, out);
    fclose(out);
    assert_non_null(strstr(text, "[ ok ] a: fine\n[FAIL] b: broken 7\n       fix: do \"this\"\n"));
    assert_non_null(strstr(text, "1 ok, 0 info, 0 warn, 1 FAIL"));
    free(text);

    out = open_memstream(&text, &len);
    doctor_print_json(&f->report, out);
    fclose(out);
    assert_non_null(strstr(text, "\"level\": \"fail\""));
    assert_non_null(strstr(text, "\"fix\": \"do \\\"this\\\"\""));
    assert_non_null(strstr(text, "\"failed\": true"));
    free(text);
}

/* ------------------------------------------------------------ the program */

static const char *doctor_path; /* argv[1]: the rkv-doctor executable */

/* Run rkv-doctor with the fixture's roots; returns its exit status and
 * leaves its stdout in out (malloc'd). */
static int run_doctor(const struct fixture *f, const char *args, char **out)
{
    char cmd[2048];
    size_t len = 0, cap = 0;
    snprintf(cmd, sizeof cmd,
             "RKV_DOCTOR_SYSFS='%s' RKV_DOCTOR_PROCFS='%s' RKV_DOCTOR_DEVFS='%s' "
             "'%s' %s",
             f->env.sysfs, f->env.procfs, f->env.devfs, doctor_path, args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    *out = NULL;
    for (int c; (c = fgetc(p)) != EOF;) {
        if (len + 2 > cap) {
            cap = cap ? cap * 2 : 4096;
            *out = realloc(*out, cap);
            assert_non_null(*out);
        }
        (*out)[len++] = (char)c;
        (*out)[len] = '\0';
    }
    int status = pclose(p);
    assert_true(WIFEXITED(status));
    return WEXITSTATUS(status);
}

static void test_program(void **state)
{
    struct fixture *f = *state;
    char *out = NULL, args[512];
    if (doctor_path == NULL)
        skip();

    /* No RDMA anywhere and only shm configured: warnings, exit 0. */
    make_dir(f, "sys");
    assert_int_equal(run_doctor(f, "--memory 64M", &out), 0);
    assert_non_null(strstr(out, "[warn] device: no RDMA device found"));
    assert_non_null(strstr(out, "0 FAIL"));
    free(out);

    /* Soft-RoCE, a config listening on an address no port has: exit 1. */
    make_soft_roce(f, "1500\n");
    write_file(f, "rkv.conf",
               "[server]\nlisten = rdma://192.0.2.1:7000, rdma://10.9.9.9:7000\n"
               "[rdma]\ngid_index = 1\n");
    snprintf(args, sizeof args, "--json --config '%s/rkv.conf'", f->root);
    assert_int_equal(run_doctor(f, args, &out), 1);
    assert_non_null(strstr(out, "\"failed\": true"));
    assert_non_null(strstr(out, "no RDMA port has the address 10.9.9.9"));
    assert_non_null(strstr(out, "rdma://192.0.2.1 is on rxe0 port 1"));
    assert_non_null(strstr(out, "the configured gid_index 1 is rxe0 port 1's IPv4 RoCE v2 GID"));
    free(out);

    /* A refused config file is a FAIL naming the line. */
    write_file(f, "rkv.conf", "[table]\ngrace_ms = -1\n");
    snprintf(args, sizeof args, "--config '%s/rkv.conf'", f->root);
    assert_int_equal(run_doctor(f, args, &out), 1);
    assert_non_null(strstr(out, "[FAIL] config: rkv-server: "));
    assert_non_null(strstr(out, "rkv.conf:2: [table] grace_ms = -1: expected 0..60000"));
    free(out);

    /* A bad option is exit 2. */
    assert_int_equal(run_doctor(f, "--memory 12Q 2>/dev/null", &out), 2);
    free(out);
}

int main(int argc, char **argv)
{
    doctor_path = argc > 1 ? argv[1] : NULL;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_env_override),
        cmocka_unit_test_setup_teardown(test_no_devices, setup, teardown),
        cmocka_unit_test_setup_teardown(test_soft_roce, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hardware_ports, setup, teardown),
        cmocka_unit_test_setup_teardown(test_userspace, setup, teardown),
        cmocka_unit_test_setup_teardown(test_device_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_memlock, setup, teardown),
        cmocka_unit_test_setup_teardown(test_memlock_conns, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nofile, setup, teardown),
        cmocka_unit_test_setup_teardown(test_device_limits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cap_ipc_lock, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hugepages, setup, teardown),
        cmocka_unit_test_setup_teardown(test_memory, setup, teardown),
        cmocka_unit_test_setup_teardown(test_numa, setup, teardown),
        cmocka_unit_test_setup_teardown(test_governor, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rc, setup, teardown),
        cmocka_unit_test(test_roce_mtu),
        cmocka_unit_test_setup_teardown(test_output, setup, teardown),
        cmocka_unit_test_setup_teardown(test_program, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
