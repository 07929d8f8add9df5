/* doctor_checks.c — see doctor_checks.h.
 *
 * The advice follows the usual reasons RDMA is slow or broken, as the
 * practitioners' guides list them: no device or no provider, a port that is
 * not ACTIVE, an MTU smaller than the path allows, the wrong GID index for
 * RoCE v2, a memlock limit below the registered region, no hugepages, threads
 * on the wrong NUMA node, a power-saving CPU governor, /dev/infiniband
 * permissions ("Couldn't open device"), no rdma_cm, and UDP 4791 blocked.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "doctor_checks.h"
#include "json.h"
#include "memory_budget.h"
#include "rdma_util.h"
#include "util.h"

#define MAX_CPU_IDS      1024u
#define CAP_IPC_LOCK_BIT 14u

/* snprintf for paths and messages: false when the text did not fit (a path
 * that long is treated as absent; a message is cut short). */
static bool fmt(char *buf, size_t len, const char *format, ...) __attribute__((format(printf, 3, 4)));
static bool fmt(char *buf, size_t len, const char *format, ...)
{
    va_list ap;
    va_start(ap, format);
    int n = vsnprintf(buf, len, format, ap);
    va_end(ap);
    return n >= 0 && (size_t)n < len;
}

/* Append to a list being built in buf; stops quietly when it is full. */
static void append(char *buf, size_t len, size_t *used, const char *format, ...)
    __attribute__((format(printf, 4, 5)));
static void append(char *buf, size_t len, size_t *used, const char *format, ...)
{
    va_list ap;
    if (*used >= len - 1)
        return;
    va_start(ap, format);
    int n = vsnprintf(buf + *used, len - *used, format, ap);
    va_end(ap);
    if (n > 0)
        *used = RKV_MIN(*used + (size_t)n, len - 1);
}

/* ------------------------------------------------------------ report */

void doctor_env_init(struct doctor_env *env)
{
    const char *sys = getenv("RKV_DOCTOR_SYSFS");
    const char *proc = getenv("RKV_DOCTOR_PROCFS");
    const char *dev = getenv("RKV_DOCTOR_DEVFS");
    fmt(env->sysfs, sizeof env->sysfs, "%s", sys && *sys ? sys : "/sys");
    fmt(env->procfs, sizeof env->procfs, "%s", proc && *proc ? proc : "/proc");
    fmt(env->devfs, sizeof env->devfs, "%s", dev && *dev ? dev : "/dev");
}

void doctor_report_init(struct doctor_report *r)
{
    memset(r, 0, sizeof *r);
}

void doctor_report_free(struct doctor_report *r)
{
    free(r->items);
    memset(r, 0, sizeof *r);
}

void doctor_add(struct doctor_report *r, enum doctor_level level, const char *check,
                const char *fix, const char *format, ...)
{
    if (r->count == r->cap) {
        unsigned cap = r->cap ? r->cap * 2 : 32;
        struct doctor_result *items = realloc(r->items, cap * sizeof *items);
        if (items == NULL) {
            fprintf(stderr, "rkv-doctor: out of memory; result \"%s\" dropped\n", check);
            return;
        }
        r->items = items;
        r->cap = cap;
    }
    struct doctor_result *it = &r->items[r->count++];
    va_list ap;
    it->level = level;
    fmt(it->check, sizeof it->check, "%s", check);
    fmt(it->fix, sizeof it->fix, "%s", fix ? fix : "");
    va_start(ap, format);
    vsnprintf(it->message, sizeof it->message, format, ap);
    va_end(ap);
    r->counts[level]++;
}

bool doctor_failed(const struct doctor_report *r)
{
    return r->counts[DOCTOR_FAIL] > 0;
}

const char *doctor_level_tag(enum doctor_level level)
{
    static const char *const tags[] = { "[ ok ]", "[info]", "[warn]", "[FAIL]" };
    return tags[level];
}

void doctor_print_text(const struct doctor_report *r, FILE *out)
{
    for (unsigned i = 0; i < r->count; i++) {
        const struct doctor_result *it = &r->items[i];
        fprintf(out, "%s %s: %s\n", doctor_level_tag(it->level), it->check, it->message);
        if (it->fix[0] != '\0')
            fprintf(out, "       fix: %s\n", it->fix);
    }
    fprintf(out, "rkv-doctor: %u ok, %u info, %u warn, %u FAIL\n", r->counts[DOCTOR_OK],
            r->counts[DOCTOR_INFO], r->counts[DOCTOR_WARN], r->counts[DOCTOR_FAIL]);
}

void doctor_print_json(const struct doctor_report *r, FILE *out)
{
    static const char *const names[] = { "ok", "info", "warn", "fail" };
    struct json_writer w;
    json_init(&w, out);
    json_object_begin(&w, NULL);
    json_array_begin(&w, "checks");
    for (unsigned i = 0; i < r->count; i++) {
        const struct doctor_result *it = &r->items[i];
        json_object_begin(&w, NULL);
        json_string(&w, "level", names[it->level]);
        json_string(&w, "check", it->check);
        json_string(&w, "message", it->message);
        json_string(&w, "fix", it->fix);
        json_object_end(&w);
    }
    json_array_end(&w);
    json_object_begin(&w, "summary");
    for (unsigned l = 0; l < 4; l++)
        json_u64(&w, names[l], r->counts[l]);
    json_object_end(&w);
    json_bool(&w, "failed", doctor_failed(r));
    json_object_end(&w);
    json_finish(&w);
}

/* ------------------------------------------------------------ file helpers */

/* First line of a file, without its newline; false when unreadable. */
static bool read_line(const char *path, char *buf, size_t len)
{
    FILE *f = fopen(path, "re");
    bool ok = false;
    if (f == NULL)
        return false;
    if (fgets(buf, (int)len, f) != NULL) {
        buf[strcspn(buf, "\n")] = '\0';
        ok = true;
    }
    fclose(f);
    return ok;
}

static bool read_long(const char *path, long *out)
{
    char buf[64], *end;
    if (!read_line(path, buf, sizeof buf))
        return false;
    errno = 0;
    long v = strtol(buf, &end, 10);
    if (errno != 0 || end == buf)
        return false;
    *out = v;
    return true;
}

/* sysfs "4: ACTIVE" → 4 and "ACTIVE". */
static int read_numbered(const char *path, char *text, size_t len)
{
    char buf[64], *end;
    text[0] = '\0';
    if (!read_line(path, buf, sizeof buf))
        return 0;
    long v = strtol(buf, &end, 10);
    if (end == buf || *end != ':')
        return 0;
    end++;
    while (*end == ' ')
        end++;
    fmt(text, len, "%s", end);
    return (int)v;
}

/* Basename of a symlink's target, "" when it is not a link. */
static void link_basename(const char *path, char *out, size_t len)
{
    char target[1024];
    ssize_t n = readlink(path, target, sizeof target - 1);
    out[0] = '\0';
    if (n <= 0)
        return;
    target[n] = '\0';
    const char *slash = strrchr(target, '/');
    fmt(out, len, "%s", slash ? slash + 1 : target);
}

/* Numeric entries of a directory, ascending; returns the count (<= max). */
static unsigned numeric_entries(const char *dir, const char *prefix, unsigned *out, unsigned max)
{
    DIR *d = opendir(dir);
    unsigned n = 0;
    size_t plen = strlen(prefix);
    if (d == NULL)
        return 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        uint64_t v;
        if (strncmp(e->d_name, prefix, plen) != 0 ||
            !rkv_parse_u64(e->d_name + plen, 0, UINT32_MAX, &v))
            continue;
        /* insertion sort keeps the smallest `max` entries in order */
        unsigned pos = n;
        while (pos > 0 && out[pos - 1] > v)
            pos--;
        if (pos >= max)
            continue;
        unsigned end = n < max ? n : max - 1;
        memmove(out + pos + 1, out + pos, (end - pos) * sizeof *out);
        out[pos] = (unsigned)v;
        if (n < max)
            n++;
    }
    closedir(d);
    return n;
}

/* A kernel CPU list ("0-3,8") into a membership table of MAX_CPU_IDS. */
static bool read_cpu_set(const char *path, bool *set, unsigned *count)
{
    char buf[4096], why[128];
    int ids[MAX_CPU_IDS];
    memset(set, 0, MAX_CPU_IDS * sizeof *set);
    *count = 0;
    if (!read_line(path, buf, sizeof buf))
        return false;
    int n = rkv_parse_cpu_list(buf, ids, MAX_CPU_IDS, why, sizeof why);
    if (n < 0)
        return false;
    for (int i = 0; i < n; i++)
        set[ids[i]] = true;
    *count = (unsigned)n;
    return true;
}

/* ------------------------------------------------------------ gathering */

static void scan_gids(const char *port_dir, struct doctor_port *p)
{
    char path[1400], buf[128];
    unsigned idx[4096];
    fmt(path, sizeof path, "%s/gids", port_dir);
    unsigned n = numeric_entries(path, "", idx, RKV_ARRAY_SIZE(idx));
    for (unsigned i = 0; i < n && p->gid_count < DOCTOR_MAX_GIDS; i++) {
        struct in6_addr a;
        static const struct in6_addr zero;
        fmt(path, sizeof path, "%s/gids/%u", port_dir, idx[i]);
        if (!read_line(path, buf, sizeof buf) || inet_pton(AF_INET6, buf, &a) != 1 ||
            memcmp(&a, &zero, sizeof a) == 0)
            continue;
        struct doctor_gid *g = &p->gids[p->gid_count++];
        memset(g, 0, sizeof *g);
        g->index = idx[i];
        inet_ntop(AF_INET6, &a, g->text, sizeof g->text);
        if (IN6_IS_ADDR_V4MAPPED(&a)) {
            g->ipv4 = true;
            inet_ntop(AF_INET, &a.s6_addr[12], g->ipv4_text, sizeof g->ipv4_text);
        }
        fmt(path, sizeof path, "%s/gid_attrs/types/%u", port_dir, idx[i]);
        if (!read_line(path, g->type, sizeof g->type))
            g->type[0] = '\0';
        fmt(path, sizeof path, "%s/gid_attrs/ndevs/%u", port_dir, idx[i]);
        if (!read_line(path, g->netdev, sizeof g->netdev))
            g->netdev[0] = '\0';
        if (p->netdev[0] == '\0' && g->netdev[0] != '\0')
            memcpy(p->netdev, g->netdev, sizeof p->netdev);
    }
}

static void scan_port(const struct doctor_env *env, const char *dev_dir, const char *parent,
                      unsigned num, struct doctor_port *p)
{
    char dir[1100], path[1400];
    long mtu;
    memset(p, 0, sizeof *p);
    p->num = num;
    fmt(dir, sizeof dir, "%s/ports/%u", dev_dir, num);
    fmt(path, sizeof path, "%s/state", dir);
    p->state = read_numbered(path, p->state_text, sizeof p->state_text);
    fmt(path, sizeof path, "%s/phys_state", dir);
    p->phys_state = read_numbered(path, p->phys_text, sizeof p->phys_text);
    fmt(path, sizeof path, "%s/link_layer", dir);
    if (!read_line(path, p->link_layer, sizeof p->link_layer))
        p->link_layer[0] = '\0';
    fmt(path, sizeof path, "%s/rate", dir);
    if (!read_line(path, p->rate, sizeof p->rate))
        p->rate[0] = '\0';
    scan_gids(dir, p);
    if (p->netdev[0] == '\0' && parent[0] != '\0' && strcmp(p->link_layer, "Ethernet") == 0)
        fmt(p->netdev, sizeof p->netdev, "%s", parent);
    if (p->netdev[0] != '\0') {
        fmt(path, sizeof path, "%s/class/net/%s/mtu", env->sysfs, p->netdev);
        if (read_long(path, &mtu) && mtu > 0 && mtu <= 1 << 20)
            p->netdev_mtu = (int)mtu;
    }
}

static int compare_names(const void *a, const void *b)
{
    return strcmp(((const struct doctor_device *)a)->name, ((const struct doctor_device *)b)->name);
}

unsigned doctor_scan_devices(const struct doctor_env *env, struct doctor_device *devs, unsigned max,
                             bool *class_missing)
{
    char class_dir[600], dev_dir[1100], path[1400], parent[64], node_text[32];
    unsigned ports[DOCTOR_MAX_PORTS];
    unsigned n = 0;
    fmt(class_dir, sizeof class_dir, "%s/class/infiniband", env->sysfs);
    DIR *d = opendir(class_dir);
    *class_missing = d == NULL;
    if (d == NULL)
        return 0;
    for (struct dirent *e; (e = readdir(d)) != NULL && n < max;) {
        if (e->d_name[0] == '.' || strlen(e->d_name) >= sizeof devs[0].name)
            continue;
        struct doctor_device *dev = &devs[n++];
        memset(dev, 0, sizeof *dev);
        fmt(dev->name, sizeof dev->name, "%s", e->d_name);
        dev->numa_node = -1;
    }
    closedir(d);
    qsort(devs, n, sizeof *devs, compare_names);

    for (unsigned i = 0; i < n; i++) {
        struct doctor_device *dev = &devs[i];
        long numa;
        fmt(dev_dir, sizeof dev_dir, "%s/%s", class_dir, dev->name);
        fmt(path, sizeof path, "%s/node_type", dev_dir);
        dev->node_type = read_numbered(path, node_text, sizeof node_text);
        fmt(path, sizeof path, "%s/device/driver", dev_dir);
        link_basename(path, dev->driver, sizeof dev->driver);
        fmt(path, sizeof path, "%s/device", dev_dir);
        link_basename(path, dev->pci, sizeof dev->pci);
        if (strchr(dev->pci, ':') == NULL)
            dev->pci[0] = '\0';
        fmt(path, sizeof path, "%s/device/numa_node", dev_dir);
        if (read_long(path, &numa) && numa >= 0 && numa < 4096)
            dev->numa_node = (int)numa;
        /* rxe and siw have no PCI device; they name the netdev they sit on. */
        fmt(path, sizeof path, "%s/parent", dev_dir);
        if (!read_line(path, parent, sizeof parent))
            parent[0] = '\0';
        if (dev->driver[0] == '\0' && parent[0] != '\0') {
            dev->software = true;
            fmt(dev->driver, sizeof dev->driver, "%s", dev->node_type == 4 ? "siw" : "rxe");
        }
        fmt(path, sizeof path, "%s/ports", dev_dir);
        unsigned np = numeric_entries(path, "", ports, DOCTOR_MAX_PORTS);
        for (unsigned k = 0; k < np; k++)
            scan_port(env, dev_dir, parent, ports[k], &dev->ports[dev->port_count++]);
    }
    return n;
}

bool doctor_has_cap_ipc_lock(const struct doctor_env *env)
{
    char path[600], line[256];
    bool has = false;
    fmt(path, sizeof path, "%s/self/status", env->procfs);
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return false;
    while (fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, "CapEff:", 7) == 0) {
            unsigned long long caps = strtoull(line + 7, NULL, 16);
            has = (caps >> CAP_IPC_LOCK_BIT) & 1;
            break;
        }
    }
    fclose(f);
    return has;
}

/* ------------------------------------------------------------ checks */

static bool is_roce(const struct doctor_port *p)
{
    return strcmp(p->link_layer, "Ethernet") == 0;
}

/* Devices the checks look at: all, or the configured one. */
static bool selected(const struct doctor_device *dev, const struct doctor_wanted *w)
{
    return w == NULL || w->device == NULL || w->device[0] == '\0' ||
           strcmp(w->device, dev->name) == 0;
}

void doctor_check_devices(struct doctor_report *r, const struct doctor_device *devs, unsigned n,
                          bool class_missing, const struct doctor_wanted *w)
{
    if (n == 0) {
        doctor_add(r, w->rdma ? DOCTOR_FAIL : DOCTOR_WARN, "device",
                   "with an RDMA NIC, load its driver (e.g. `modprobe mlx5_ib`) and install "
                   "rdma-core. Without one, Soft-RoCE makes any Ethernet netdev an RDMA device "
                   "for testing: `modprobe rdma_rxe && rdma link add rxe0 type rxe netdev eth0`. "
                   "Clients on this host need no RDMA at all: listen = shm:///run/rkv/rkv.sock",
                   "no RDMA device found (%s)%s",
                   class_missing ? "the kernel's RDMA core is not loaded: no class/infiniband in sysfs"
                                 : "class/infiniband in sysfs is empty",
                   w->rdma ? "; the configured rdma:// listener cannot start"
                           : "; rkv can still serve clients on this host over shm://");
        return;
    }
    for (unsigned i = 0; i < n; i++) {
        const struct doctor_device *d = &devs[i];
        if (d->software)
            doctor_add(r, DOCTOR_INFO, "device", "fine for tests; for speed use a hardware RDMA NIC",
                       "%s is %s on netdev %s: software RDMA, correct but CPU-bound and much "
                       "slower than a NIC (tens of µs per operation)",
                       d->name,
                       strcmp(d->driver, "siw") == 0 ? "Soft-iWARP (siw)" : "Soft-RoCE (rdma_rxe)",
                       d->port_count && d->ports[0].netdev[0] ? d->ports[0].netdev : "?");
        else if (d->driver[0] != '\0')
            doctor_add(r, DOCTOR_OK, "device", NULL, "%s: hardware RDMA device, driver %s%s%s",
                       d->name, d->driver, d->pci[0] ? ", PCI " : "", d->pci);
        else
            doctor_add(r, DOCTOR_INFO, "device", NULL,
                       "%s: RDMA device with no driver link in sysfs (node type %d)", d->name,
                       d->node_type);
    }
    if (w->device != NULL && w->device[0] != '\0') {
        char names[256];
        size_t used = 0;
        bool found = false;
        names[0] = '\0';
        for (unsigned i = 0; i < n; i++) {
            found |= strcmp(devs[i].name, w->device) == 0;
            append(names, sizeof names, &used, "%s%s", i ? ", " : "", devs[i].name);
        }
        if (!found)
            doctor_add(r, DOCTOR_FAIL, "device",
                       "set [rdma] device to one of the devices listed, or remove it",
                       "the configured device %s does not exist here (devices: %s)", w->device,
                       names);
    }
}

void doctor_check_userspace(struct doctor_report *r, const struct doctor_device *devs, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        const struct doctor_device *d = &devs[i];
        if (!d->verbs_checked)
            continue;
        if (!d->verbs_listed)
            doctor_add(r, DOCTOR_FAIL, "verbs",
                       "install the user-space provider: `apt-get install ibverbs-providers` "
                       "(rdma-core); providers are listed in /etc/libibverbs.d/",
                       "%s is in sysfs but libibverbs does not list it: no user-space provider "
                       "claims driver %s, so programs see no device",
                       d->name, d->driver[0] ? d->driver : "?");
        else if (d->verbs_error[0] != '\0')
            doctor_add(r, DOCTOR_FAIL, "verbs",
                       "see the device-file check below; running as root shows whether it is a "
                       "permission problem",
                       "cannot open %s: %s", d->name, d->verbs_error);
        else
            doctor_add(r, DOCTOR_OK, "verbs", NULL, "libibverbs opens %s and queries its ports",
                       d->name);
    }
}

void doctor_check_ports(struct doctor_report *r, const struct doctor_device *devs, unsigned n)
{
    char fix[512];
    for (unsigned i = 0; i < n; i++) {
        const struct doctor_device *d = &devs[i];
        if (d->port_count == 0)
            doctor_add(r, DOCTOR_WARN, "port", "check `ibv_devinfo -d DEVICE`",
                       "%s has no ports in sysfs", d->name);
        for (unsigned k = 0; k < d->port_count; k++) {
            const struct doctor_port *p = &d->ports[k];
            const char *kind = is_roce(p)         ? "Ethernet (RoCE)"
                               : p->link_layer[0] ? p->link_layer
                                                  : "?";
            if (p->state == 4 || p->state == 5) {
                doctor_add(r, DOCTOR_OK, "port", NULL, "%s port %u: %s, %s, %s, %s", d->name,
                           p->num, p->state_text, p->phys_text[0] ? p->phys_text : "?", kind,
                           p->rate[0] ? p->rate : "rate unknown");
                continue;
            }
            const char *nd = p->netdev[0] ? p->netdev : "NETDEV";
            if (p->phys_state == 3 && is_roce(p))
                fmt(fix, sizeof fix, "the port is disabled: `ip link set %s up`", nd);
            else if (p->phys_state == 3)
                fmt(fix, sizeof fix, "the port is disabled: `ibportstate LID %u enable`", p->num);
            else if (is_roce(p))
                fmt(fix, sizeof fix,
                    "bring the netdev up and check its link: `ip link set "
                    "%s up; ip -br link show %s` (cable, transceiver, switch port; "
                    "Soft-RoCE follows its netdev's carrier)",
                    nd, nd);
            else if (p->state == 2 || p->state == 3)
                fmt(fix, sizeof fix,
                    "no subnet manager has configured the port: run opensm "
                    "on one host of the fabric (`systemctl start opensm`) or enable the "
                    "switch's subnet manager");
            else
                fmt(fix, sizeof fix,
                    "check the cable or transceiver and the switch port "
                    "(`ibstat`); physical state Polling means no link partner");
            doctor_add(r, DOCTOR_FAIL, "port", fix,
                       "%s port %u is %s (physical state %s, %s): no traffic passes until it is "
                       "ACTIVE",
                       d->name, p->num, p->state_text[0] ? p->state_text : "unknown",
                       p->phys_text[0] ? p->phys_text : "unknown", kind);
        }
    }
}

int doctor_roce_mtu(int netdev_mtu)
{
    /* RoCE v2 headers inside the Ethernet payload: IP/GRH 40, UDP 8, BTH 12,
     * extended headers up to 32, ICRC 4 — the kernel subtracts about this. */
    int room = netdev_mtu - 96;
    for (int mtu = 4096; mtu >= 256; mtu /= 2)
        if (room >= mtu)
            return mtu;
    return 0;
}

void doctor_check_mtu(struct doctor_report *r, const struct doctor_device *devs, unsigned n)
{
    char fix[512];
    for (unsigned i = 0; i < n; i++) {
        const struct doctor_device *d = &devs[i];
        for (unsigned k = 0; k < d->port_count; k++) {
            const struct doctor_port *p = &d->ports[k];
            if (!is_roce(p)) {
                if (p->active_mtu == 0)
                    doctor_add(r, DOCTOR_INFO, "mtu", NULL,
                               "%s port %u: active MTU unknown (libibverbs could not query it)",
                               d->name, p->num);
                else if (p->max_mtu > p->active_mtu)
                    doctor_add(r, DOCTOR_WARN, "mtu",
                               "raise the partition MTU in the subnet manager (opensm "
                               "partitions.conf: Default=0x7fff, ipoib, mtu=5 : ALL=full;)",
                               "%s port %u: active MTU %d is below the port's maximum %d: the "
                               "subnet manager or the peer limits it",
                               d->name, p->num, p->active_mtu, p->max_mtu);
                else
                    doctor_add(r, DOCTOR_OK, "mtu", NULL, "%s port %u: active MTU %d", d->name,
                               p->num, p->active_mtu);
                continue;
            }
            if (p->netdev_mtu == 0) {
                doctor_add(r, DOCTOR_INFO, "mtu", NULL,
                           "%s port %u: cannot find the netdev under the port to compare MTUs",
                           d->name, p->num);
                continue;
            }
            int allowed = doctor_roce_mtu(p->netdev_mtu);
            int active = p->active_mtu ? p->active_mtu : allowed;
            if (allowed < 4096) {
                fmt(fix, sizeof fix,
                    "if every host and switch port on the path takes jumbo frames, raise "
                    "it on all of them together (a mismatch drops packets): `ip link set "
                    "dev %s mtu 4200` (or 9000)",
                    p->netdev);
                doctor_add(r, DOCTOR_WARN, "mtu", fix,
                           "%s port %u: RDMA MTU is %d bytes because %s's MTU is %d: transfers "
                           "larger than that (big values, bucket reads) take more packets",
                           d->name, p->num, active, p->netdev, p->netdev_mtu);
            } else if (p->active_mtu != 0 && p->active_mtu < allowed) {
                doctor_add(r, DOCTOR_WARN, "mtu", "check the port's max MTU with `ibv_devinfo -v`",
                           "%s port %u: active MTU %d is below the %d that %s's MTU %d allows "
                           "(port maximum %d)",
                           d->name, p->num, p->active_mtu, allowed, p->netdev, p->netdev_mtu,
                           p->max_mtu);
            } else {
                doctor_add(r, DOCTOR_OK, "mtu", NULL, "%s port %u: RDMA MTU %d (%s MTU %d)",
                           d->name, p->num, active, p->netdev, p->netdev_mtu);
            }
        }
    }
}

static const struct doctor_gid *find_gid(const struct doctor_port *p, unsigned index)
{
    for (unsigned i = 0; i < p->gid_count; i++)
        if (p->gids[i].index == index)
            return &p->gids[i];
    return NULL;
}

static bool is_v2(const struct doctor_gid *g)
{
    return strcmp(g->type, "RoCE v2") == 0;
}

void doctor_check_gids(struct doctor_report *r, const struct doctor_device *devs, unsigned n,
                       const struct doctor_wanted *w)
{
    char list[640], fix[512];
    for (unsigned i = 0; i < n; i++) {
        const struct doctor_device *d = &devs[i];
        for (unsigned k = 0; k < d->port_count; k++) {
            const struct doctor_port *p = &d->ports[k];
            if (!is_roce(p))
                continue;
            if (p->gid_count == 0) {
                fmt(fix, sizeof fix,
                    "give the netdev an address and bring it up: `ip link "
                    "set %s up; ip addr add ADDRESS/PREFIX dev %s`",
                    p->netdev[0] ? p->netdev : "NETDEV", p->netdev[0] ? p->netdev : "NETDEV");
                doctor_add(r, DOCTOR_FAIL, "gid", fix,
                           "%s port %u has an empty GID table: RoCE needs an address on the "
                           "netdev",
                           d->name, p->num);
                continue;
            }
            size_t used = 0;
            const struct doctor_gid *best = NULL, *any_v2 = NULL;
            for (unsigned g = 0; g < p->gid_count; g++) {
                const struct doctor_gid *x = &p->gids[g];
                append(list, sizeof list, &used, "%s%u %s (%s%s%s)", g ? "; " : "", x->index,
                       x->text, x->type[0] ? x->type : "type ?", x->netdev[0] ? ", " : "", x->netdev);
                if (is_v2(x) && any_v2 == NULL)
                    any_v2 = x;
                if (is_v2(x) && x->ipv4 && best == NULL)
                    best = x;
            }
            doctor_add(r, DOCTOR_INFO, "gid", NULL, "%s port %u GID table: %s", d->name, p->num,
                       list);
            if (best != NULL)
                doctor_add(r, DOCTOR_OK, "gid", NULL,
                           "%s port %u: use gid_index = %u, the RoCE v2 GID of IPv4 %s on %s "
                           "(routable; rdma_cm picks it when rkv listens on rdma://%s:PORT)",
                           d->name, p->num, best->index, best->ipv4_text, best->netdev,
                           best->ipv4_text);
            else if (any_v2 != NULL)
                doctor_add(r, DOCTOR_WARN, "gid",
                           "give the netdev an IPv4 address (`ip addr add ADDRESS/PREFIX dev "
                           "NETDEV`), or make clients and server use the IPv6 address",
                           "%s port %u has RoCE v2 GIDs but none for an IPv4 address", d->name,
                           p->num);
            else
                doctor_add(r, DOCTOR_WARN, "gid",
                           "use RoCE v2: it is the kernel's default mode; on ConnectX set it with "
                           "`cma_roce_mode -d DEVICE -p PORT -m 2`",
                           "%s port %u has only RoCE v1 GIDs: v1 is not routable and many networks "
                           "drop it",
                           d->name, p->num);

            if (w->gid_index < 0 || !selected(d, w))
                continue;
            const struct doctor_gid *cfg = find_gid(p, (unsigned)w->gid_index);
            if (best != NULL)
                fmt(fix, sizeof fix, "set gid_index = %u, or auto", best->index);
            else
                fmt(fix, sizeof fix, "set gid_index = auto");
            if (cfg == NULL)
                doctor_add(r, DOCTOR_FAIL, "gid", fix,
                           "the configured gid_index %d is empty on %s port %u: connections "
                           "fail",
                           w->gid_index, d->name, p->num);
            else if (!is_v2(cfg))
                doctor_add(r, DOCTOR_WARN, "gid", fix,
                           "the configured gid_index %d on %s port %u is %s, not RoCE v2",
                           w->gid_index, d->name, p->num,
                           cfg->type[0] ? cfg->type : "of unknown type");
            else if (cfg != best)
                doctor_add(r, DOCTOR_INFO, "gid", fix,
                           "the configured gid_index %d on %s port %u is RoCE v2 for %s; clients "
                           "must use the same address family",
                           w->gid_index, d->name, p->num, cfg->text);
            else
                doctor_add(r, DOCTOR_OK, "gid", NULL,
                           "the configured gid_index %d is %s port %u's IPv4 RoCE v2 GID",
                           w->gid_index, d->name, p->num);
        }
    }
}

void doctor_check_listen_addresses(struct doctor_report *r, const struct doctor_device *devs,
                                   unsigned n, const struct doctor_wanted *w)
{
    for (unsigned h = 0; h < w->rdma_host_count; h++) {
        const char *host = w->rdma_hosts[h];
        struct in_addr a4;
        struct in6_addr a6;
        char canon[48];
        bool found = false;
        if (strcmp(host, "0.0.0.0") == 0 || strcmp(host, "::") == 0) {
            doctor_add(r, DOCTOR_OK, "listen", NULL,
                       "rdma://%s listens on every address of every RDMA device", host);
            continue;
        }
        if (inet_pton(AF_INET, host, &a4) == 1) {
            inet_ntop(AF_INET, &a4, canon, sizeof canon);
        } else if (inet_pton(AF_INET6, host, &a6) == 1) {
            inet_ntop(AF_INET6, &a6, canon, sizeof canon);
        } else {
            doctor_add(r, DOCTOR_INFO, "listen",
                       "listen on an IP address of the RDMA netdev instead of a name",
                       "rdma://%s is a host name; rkv-doctor does not resolve it", host);
            continue;
        }
        for (unsigned i = 0; i < n && !found; i++) {
            for (unsigned k = 0; k < devs[i].port_count && !found; k++) {
                const struct doctor_port *p = &devs[i].ports[k];
                for (unsigned g = 0; g < p->gid_count && !found; g++) {
                    const struct doctor_gid *x = &p->gids[g];
                    if (strcmp(x->ipv4 ? x->ipv4_text : x->text, canon) != 0)
                        continue;
                    found = true;
                    doctor_add(r, DOCTOR_OK, "listen", NULL,
                               "rdma://%s is on %s port %u (%s, GID index %u)", host, devs[i].name,
                               p->num, x->netdev[0] ? x->netdev : "?", x->index);
                }
            }
        }
        if (!found)
            doctor_add(r, DOCTOR_FAIL, "listen",
                       "listen on an address of the RDMA netdev (`ip -br addr`; rdma link show "
                       "names the netdev of each device), or on 0.0.0.0",
                       "no RDMA port has the address %s: rdma_cm cannot bind rdma://%s (\"No such "
                       "device\" or \"Cannot assign requested address\")",
                       canon, host);
    }
}

/* Can a process of uid/gid/groups read and write this file? */
static bool can_read_write(const struct stat *st, uid_t uid, gid_t gid, const gid_t *groups,
                           int ngroups)
{
    if (uid == 0)
        return true;
    if (st->st_uid == uid)
        return (st->st_mode & (S_IRUSR | S_IWUSR)) == (S_IRUSR | S_IWUSR);
    bool in_group = st->st_gid == gid;
    for (int i = 0; i < ngroups && !in_group; i++)
        in_group = groups[i] == st->st_gid;
    if (in_group)
        return (st->st_mode & (S_IRGRP | S_IWGRP)) == (S_IRGRP | S_IWGRP);
    return (st->st_mode & (S_IROTH | S_IWOTH)) == (S_IROTH | S_IWOTH);
}

void doctor_check_device_files(struct doctor_report *r, const struct doctor_env *env,
                               unsigned ndevs, const struct doctor_wanted *w, uid_t uid, gid_t gid,
                               const gid_t *groups, int ngroups)
{
    char dir[600], path[700], fix[512];
    unsigned idx[64];
    struct stat st;
    if (ndevs == 0)
        return;
    fmt(dir, sizeof dir, "%s/infiniband", env->devfs);
    unsigned n = numeric_entries(dir, "uverbs", idx, RKV_ARRAY_SIZE(idx));
    if (n == 0) {
        doctor_add(r, DOCTOR_FAIL, "devfiles",
                   "load the verbs module: `modprobe ib_uverbs` (rdma-core's rdma-load-modules "
                   "service loads it at boot)",
                   "no %s/uverbs* device files: the ib_uverbs module is not loaded, so programs "
                   "cannot reach the RDMA devices",
                   dir);
    }
    unsigned ok = 0;
    for (unsigned i = 0; i < n; i++) {
        fmt(path, sizeof path, "%s/uverbs%u", dir, idx[i]);
        if (stat(path, &st) != 0)
            continue;
        if (can_read_write(&st, uid, gid, groups, ngroups)) {
            ok++;
            continue;
        }
        fmt(fix, sizeof fix,
            "run as root, add the user to the file's group (`usermod -aG GROUP USER`), or "
            "allow everyone with a udev rule: KERNEL==\"uverbs*\", MODE=\"0666\" in "
            "/etc/udev/rules.d/90-rdma.rules (quick test: `chmod a+rw %s/uverbs*`)",
            dir);
        doctor_add(r, DOCTOR_FAIL, "devfiles", fix,
                   "%s is mode %03o, owner %u:%u: this user (uid %u) cannot open it, so verbs "
                   "programs fail with \"Couldn't open device\" / permission denied",
                   path, (unsigned)(st.st_mode & 0777), (unsigned)st.st_uid, (unsigned)st.st_gid,
                   (unsigned)uid);
    }
    if (n > 0 && ok == n)
        doctor_add(r, DOCTOR_OK, "devfiles", NULL,
                   "%u uverbs device file%s in %s, readable and "
                   "writable by this user",
                   n, n == 1 ? "" : "s", dir);

    fmt(path, sizeof path, "%s/rdma_cm", dir);
    if (stat(path, &st) != 0)
        doctor_add(r, w->rdma ? DOCTOR_FAIL : DOCTOR_WARN, "rdma_cm", "load it: `modprobe rdma_ucm`",
                   "%s is missing: the rdma_ucm module is not loaded, and rkv connects with "
                   "rdma_cm",
                   path);
    else if (!can_read_write(&st, uid, gid, groups, ngroups))
        doctor_add(r, DOCTOR_FAIL, "rdma_cm",
                   "`chmod a+rw` it or add a udev rule: "
                   "KERNEL==\"rdma_cm\", MODE=\"0666\"",
                   "%s is mode %03o: this user cannot open it", path, (unsigned)(st.st_mode & 0777));
    else
        doctor_add(r, DOCTOR_OK, "rdma_cm", NULL, "%s is present and usable", path);
}

void doctor_check_memlock(struct doctor_report *r, uint64_t limit, bool cap_ipc_lock,
                          unsigned ndevs, const struct doctor_wanted *w)
{
    char lim[32], reg[32];
    /* The region plus what the connections register (or, unknown, a
     * generous allowance for them). */
    uint64_t need = w->conns_locked ? w->region + w->conns_locked
                                    : w->region + w->region / 16 + (16ull << 20);
    static const char fix[] =
        "raise it for the server: LimitMEMLOCK=infinity in the systemd unit (rkv-server.service "
        "has it), `ulimit -l unlimited` in the shell that starts rkv-server, or "
        "`* - memlock unlimited` in /etc/security/limits.conf";
    rkv_format_size(w->region, reg, sizeof reg);
    if (limit == UINT64_MAX) {
        doctor_add(r, DOCTOR_OK, "memlock", NULL,
                   "memlock limit is unlimited: the %s region can be registered", reg);
        return;
    }
    rkv_format_size(limit, lim, sizeof lim);
    if (limit >= need && w->conns_locked)
        doctor_add(r, DOCTOR_OK, "memlock", NULL,
                   "memlock limit %s covers the %s region and the connections' registered buffers",
                   lim, reg);
    else if (limit >= need)
        doctor_add(r, DOCTOR_OK, "memlock", NULL, "memlock limit %s covers the %s region", lim, reg);
    else if (limit >= w->region && !cap_ipc_lock && w->conns_locked)
        doctor_add(r, DOCTOR_WARN, "memlock", fix,
                   "memlock limit %s covers the %s region but not the buffers max_conns "
                   "connections register beside it (%.1f MiB more): the server starts with fewer "
                   "connections (max_conns lowered) or refuses clients it cannot register",
                   lim, reg, (double)(need - limit) / (1 << 20));
    else if (cap_ipc_lock)
        doctor_add(r, DOCTOR_INFO, "memlock", fix,
                   "memlock limit %s is below the %s region, but this process has CAP_IPC_LOCK "
                   "(root), which lifts the limit for RDMA registration; a server started as "
                   "another user, or without the capability, would fail to register it",
                   lim, reg);
    else
        doctor_add(r, ndevs > 0 || w->rdma ? DOCTOR_FAIL : DOCTOR_WARN, "memlock", fix,
                   "memlock limit %s is below the %s region: registering it for RDMA fails "
                   "with \"Cannot allocate memory\"",
                   lim, reg);
}

void doctor_check_hugepages(struct doctor_report *r, const struct doctor_env *env,
                            const struct doctor_wanted *w)
{
    char dir[600], path[1400], reg[32], size_text[32], fix[600], summary[256];
    unsigned sizes_kb[8];
    long free_pages, total_pages;
    size_t used = 0;
    uint64_t small_size = 0;
    rkv_format_size(w->region, reg, sizeof reg);
    fmt(dir, sizeof dir, "%s/kernel/mm/hugepages", env->sysfs);
    /* Directories are named hugepages-<size>kB, one per supported size. */
    DIR *d = opendir(dir);
    unsigned n = 0;
    if (d != NULL) {
        for (struct dirent *e; (e = readdir(d)) != NULL && n < RKV_ARRAY_SIZE(sizes_kb);) {
            unsigned kb;
            char tail[4];
            if (sscanf(e->d_name, "hugepages-%ukB%3s", &kb, tail) == 1 && kb > 0)
                sizes_kb[n++] = kb;
        }
        closedir(d);
    }
    for (unsigned i = 1; i < n; i++) /* smallest page size first */
        for (unsigned j = i; j > 0 && sizes_kb[j - 1] > sizes_kb[j]; j--) {
            unsigned t = sizes_kb[j];
            sizes_kb[j] = sizes_kb[j - 1];
            sizes_kb[j - 1] = t;
        }
    summary[0] = '\0';
    for (unsigned i = 0; i < n; i++) {
        uint64_t size = (uint64_t)sizes_kb[i] << 10;
        fmt(path, sizeof path, "%s/hugepages-%ukB/free_hugepages", dir, sizes_kb[i]);
        if (!read_long(path, &free_pages) || free_pages < 0)
            continue;
        fmt(path, sizeof path, "%s/hugepages-%ukB/nr_hugepages", dir, sizes_kb[i]);
        if (!read_long(path, &total_pages) || total_pages < 0)
            total_pages = free_pages;
        rkv_format_size(size, size_text, sizeof size_text);
        if ((uint64_t)free_pages * size >= w->region) {
            doctor_add(r, DOCTOR_OK, "hugepages", NULL,
                       "the %s region fits in free %s hugepages (%ld free of %ld)", reg, size_text,
                       free_pages, total_pages);
            return;
        }
        append(summary, sizeof summary, &used, "%s%s: %ld free of %ld", used ? "; " : "", size_text,
               free_pages, total_pages);
        if (small_size == 0 || size < small_size)
            small_size = size;
    }
    if (n == 0 || small_size == 0) {
        doctor_add(r, w->hugepages_required ? DOCTOR_FAIL : DOCTOR_WARN, "hugepages",
                   "use a kernel with CONFIG_HUGETLBFS (all distribution kernels have it)",
                   "this kernel offers no hugepages (no %s): rkv-server uses normal 4 KiB pages%s",
                   dir,
                   w->hugepages_required ? ", but hugepages_required = yes: it will not start" : "");
        return;
    }
    rkv_format_size(small_size, size_text, sizeof size_text);
    uint64_t pages = (w->region + small_size - 1) / small_size;
    fmt(fix, sizeof fix,
        "reserve them before starting the server: `echo %llu > %s/hugepages-%llukB/"
        "nr_hugepages` (%llu x %s); to keep it across reboots set vm.nr_hugepages = %llu in "
        "/etc/sysctl.d/ or boot with hugepagesz=1G hugepages=N",
        (unsigned long long)pages, dir, (unsigned long long)(small_size >> 10),
        (unsigned long long)pages, size_text, (unsigned long long)pages);
    doctor_add(r, w->hugepages_required ? DOCTOR_FAIL : DOCTOR_WARN, "hugepages", fix,
               "not enough free hugepages for the %s region (%s): rkv-server %s", reg, summary,
               w->hugepages_required
                   ? "will refuse to start (hugepages_required = yes)"
                   : "falls back to 4 KiB pages: more TLB misses in the server and more "
                     "address-translation misses in the NIC on every remote read");
}

void doctor_check_numa(struct doctor_report *r, const struct doctor_env *env,
                       const struct doctor_device *devs, unsigned n, const struct doctor_wanted *w)
{
    char path[700], list[256], fix[512];
    unsigned nodes[64], online_count, node_count_cpus;
    bool online[MAX_CPU_IDS], on_node[MAX_CPU_IDS];

    fmt(path, sizeof path, "%s/devices/system/cpu/online", env->sysfs);
    bool have_online = read_cpu_set(path, online, &online_count);
    for (unsigned i = 0; have_online && i < w->cpu_count; i++) {
        int cpu = w->cpus[i];
        if (cpu < 0 || (unsigned)cpu >= MAX_CPU_IDS || !online[cpu]) {
            char online_text[128];
            if (!read_line(path, online_text, sizeof online_text))
                online_text[0] = '\0';
            doctor_add(r, DOCTOR_FAIL, "numa", "list online CPUs in cpus =, or use cpus = auto",
                       "CPU %d in the configured cpus is not online here (online: %s)", cpu,
                       online_text);
            return;
        }
    }

    fmt(path, sizeof path, "%s/devices/system/node", env->sysfs);
    unsigned node_count = numeric_entries(path, "node", nodes, RKV_ARRAY_SIZE(nodes));
    if (node_count <= 1) {
        doctor_add(r, DOCTOR_OK, "numa", NULL,
                   "one NUMA node: no cross-socket placement to get wrong");
        return;
    }
    for (unsigned i = 0; i < n; i++) {
        const struct doctor_device *d = &devs[i];
        if (d->software || !selected(d, w))
            continue;
        if (d->numa_node < 0) {
            doctor_add(r, DOCTOR_INFO, "numa", NULL,
                       "%u NUMA nodes, but the kernel does not say which one %s is on", node_count,
                       d->name);
            continue;
        }
        fmt(path, sizeof path, "%s/devices/system/node/node%d/cpulist", env->sysfs, d->numa_node);
        if (!read_cpu_set(path, on_node, &node_count_cpus) || !read_line(path, list, sizeof list)) {
            doctor_add(r, DOCTOR_INFO, "numa", NULL,
                       "%s is on NUMA node %d (its CPU list is "
                       "unreadable)",
                       d->name, d->numa_node);
            continue;
        }
        if (w->cpu_count == 0) {
            doctor_add(r, DOCTOR_INFO, "numa", NULL,
                       "%s is on NUMA node %d (CPUs %s); with cpus = auto rkv-server pins its "
                       "workers there",
                       d->name, d->numa_node, list);
            continue;
        }
        unsigned off = 0;
        int first_off = -1;
        for (unsigned c = 0; c < w->cpu_count; c++) {
            if (!on_node[w->cpus[c]]) {
                off++;
                if (first_off < 0)
                    first_off = w->cpus[c];
            }
        }
        if (off == 0) {
            doctor_add(r, DOCTOR_OK, "numa", NULL,
                       "the configured CPUs are all on NUMA node %d with %s", d->numa_node, d->name);
            continue;
        }
        fmt(fix, sizeof fix,
            "set cpus = %s and keep the server's memory there too "
            "(`numactl --cpunodebind=%d --membind=%d rkv-server ...`)",
            list, d->numa_node, d->numa_node);
        doctor_add(r, DOCTOR_WARN, "numa", fix,
                   "%u of the %u configured CPUs (e.g. CPU %d) are not on NUMA node %d where %s "
                   "sits: every request and DMA crosses the socket interconnect (10-20%% slower)",
                   off, w->cpu_count, first_off, d->numa_node, d->name);
    }
}

void doctor_check_governor(struct doctor_report *r, const struct doctor_env *env)
{
    char path[700], gov[64], other[64] = "";
    unsigned cpus[MAX_CPU_IDS];
    unsigned with_freq = 0, performance = 0;
    fmt(path, sizeof path, "%s/devices/system/cpu", env->sysfs);
    unsigned n = numeric_entries(path, "cpu", cpus, MAX_CPU_IDS);
    for (unsigned i = 0; i < n; i++) {
        fmt(path, sizeof path, "%s/devices/system/cpu/cpu%u/cpufreq/scaling_governor", env->sysfs,
            cpus[i]);
        if (!read_line(path, gov, sizeof gov))
            continue;
        with_freq++;
        if (strcmp(gov, "performance") == 0)
            performance++;
        else if (other[0] == '\0')
            fmt(other, sizeof other, "%s", gov);
    }
    if (with_freq == 0)
        doctor_add(r, DOCTOR_INFO, "governor", NULL,
                   "no CPU frequency scaling interface (a VM, or scaling is off): nothing to tune");
    else if (performance == with_freq)
        doctor_add(r, DOCTOR_OK, "governor", NULL, "all %u CPUs use the performance governor",
                   with_freq);
    else
        doctor_add(r, DOCTOR_WARN, "governor",
                   "`cpupower frequency-set -g performance`, or `echo performance | tee "
                   "/sys/devices/system/cpu/cpu*/cpufreq/scaling_governor`; also consider "
                   "disabling deep C-states in the BIOS",
                   "%u of %u CPUs use the %s governor, not performance: the clock drops between "
                   "requests and each wake-up adds microseconds",
                   with_freq - performance, with_freq, other);
}

void doctor_check_firewall(struct doctor_report *r, const struct doctor_device *devs, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        for (unsigned k = 0; k < devs[i].port_count; k++) {
            if (!is_roce(&devs[i].ports[k]))
                continue;
            doctor_add(r, DOCTOR_INFO, "firewall",
                       "allow it on every host: `iptables -I INPUT -p udp --dport 4791 -j ACCEPT` "
                       "(nftables: `nft add rule inet filter input udp dport 4791 accept`)",
                       "RoCE v2 (and rdma_cm's connection setup over it) is UDP port %u: if "
                       "connections time out while ping works, a firewall is dropping it",
                       DOCTOR_ROCE_UDP_PORT);
            return;
        }
    }
}

/* ------------------------------------------------------------ memory */

/* What the server could get here (RAM, cgroup, hugepages), whether the
 * configuration's --memory fits and the largest one that would: the same
 * server/memory_budget.c code rkv-server refuses with at start. */
void doctor_check_memory(struct doctor_report *r, const struct doctor_env *env,
                         const struct rkv_server_config *cfg)
{
    static char msg[2048];
    char a[32], b[32], c[32], huge[160] = "", cg[1200];
    struct rkv_mem_env me;
    size_t used = 0;
    rkv_mem_probe(env->procfs, env->sysfs, &me);

    for (unsigned i = 0; i < RKV_MEM_HUGE_KINDS; i++)
        if (me.huge[i].page_size != 0)
            append(huge, sizeof huge, &used, "%s%s hugepages %llu free of %llu", used ? ", " : "",
                   rkv_format_size(me.huge[i].page_size, a, sizeof a),
                   (unsigned long long)me.huge[i].free_pages,
                   (unsigned long long)me.huge[i].total_pages);
    if (me.cgroup.known)
        fmt(cg, sizeof cg, "cgroup memory limit %s (%s, v%d: %s in use, %s reclaimable)",
            rkv_format_size(me.cgroup.limit, a, sizeof a), me.cgroup.dir, me.cgroup.version,
            rkv_format_size(me.cgroup.usage, b, sizeof b),
            rkv_format_size(me.cgroup.reclaimable, c, sizeof c));
    else
        fmt(cg, sizeof cg, "no memory cgroup limit");
    if (me.meminfo_known)
        doctor_add(r, DOCTOR_INFO, "memory", NULL, "RAM: MemAvailable %s of MemTotal %s; %s; %s",
                   rkv_format_size(me.mem_available, a, sizeof a),
                   rkv_format_size(me.mem_total, b, sizeof b), cg, used ? huge : "no hugepages");
    else
        doctor_add(r, DOCTOR_WARN, "memory", "mount /proc (kernel 3.14 or later has MemAvailable)",
                   "%s/meminfo has no MemAvailable: rkv-server cannot judge the RAM it may take; %s",
                   env->procfs, cg);

    uint64_t largest = rkv_mem_largest(cfg, &me);
    rkv_format_size(cfg->memory, a, sizeof a);
    rkv_format_size(largest, b, sizeof b);
    unsigned conns;
    if (rkv_mem_admit(cfg, cfg->memory, &me, &conns, msg, sizeof msg)) {
        struct rkv_server_config run = *cfg;
        run.max_conns = conns;
        rkv_mem_describe(&run, cfg->memory, &me, msg, sizeof msg);
        if (conns < cfg->max_conns)
            doctor_add(r, DOCTOR_WARN, "memory",
                       "set max_conns to at most the number above, "
                       "lower --memory, or give the server more memory",
                       "--memory %s fits with max_conns lowered from %u to %u (rkv-server "
                       "lowers it at start): %s",
                       a, cfg->max_conns, conns, msg);
        else
            doctor_add(r, DOCTOR_OK, "memory", NULL, "--memory %s fits: %s", a, msg);
    } else {
        doctor_add(r, DOCTOR_FAIL, "memory",
                   largest ? "lower --memory (see the largest below), "
                             "lower max_conns, or free memory; --memory-check=off starts anyway"
                           : "lower max_conns or free memory; --memory-check=off starts anyway",
                   "rkv-server refuses this: %s", msg);
    }
    if (largest != 0)
        doctor_add(r, DOCTOR_INFO, "memory", NULL,
                   "the largest --memory rkv-server accepts here "
                   "with this configuration: %s",
                   b);
}

/* ------------------------------------------------------------ RC retransmission */

#define RC_SLOT_WARN_NS (60ull * 1000000000ull) /* a vanished client holding its slot longer */
#define RC_TRY_WARN_NS  1000000ull              /* tries shorter than a congested fabric's delays */

void doctor_check_rc(struct doctor_report *r, const struct rkv_server_config *cfg)
{
    uint64_t per_try = rkv_rdma_detect_ns(cfg->ack_timeout, 0);
    uint64_t detect = rkv_rdma_detect_ns(cfg->ack_timeout, cfg->retry_count);
    uint64_t slot = detect + RKV_RDMA_KEEPALIVE_MS * 1000000ull;

    doctor_add(r, DOCTOR_INFO, "rdma-rc", NULL,
               "RC retransmission: ack_timeout %u (%.1f ms per try) x (retry_count %u + 1) tries: "
               "a transfer to a dead peer fails within %.2f s; a connection idle for %u ms is "
               "probed, so a vanished client loses its slot within %.2f s (clients set their own: "
               "rkv_options rdma_ack_timeout, rdma_retry_count, default %u and %u)",
               cfg->ack_timeout, per_try / 1e6, cfg->retry_count, detect / 1e9,
               RKV_RDMA_KEEPALIVE_MS, slot / 1e9, RKV_RDMA_ACK_TIMEOUT, RKV_RDMA_RETRY_COUNT);
    if (per_try < RC_TRY_WARN_NS)
        doctor_add(r, DOCTOR_WARN, "rdma-rc", "raise [rdma] ack_timeout to 8 or more (1 ms per try)",
                   "ack_timeout %u waits only %.0f us for an ACK: a congested switch or a PFC "
                   "pause delays ACKs longer, so transfers retry needlessly and connections break",
                   cfg->ack_timeout, per_try / 1e3);
    if (cfg->retry_count == 7)
        doctor_add(r, DOCTOR_WARN, "rdma-rc", "set [rdma] retry_count to 6 or less on Soft-RoCE",
                   "retry_count 7: Soft-RoCE (rdma_rxe) takes 7 to mean retry forever, so there a "
                   "dead peer is never noticed by RC");
    if (slot > RC_SLOT_WARN_NS)
        doctor_add(r, DOCTOR_WARN, "rdma-rc", "lower [rdma] ack_timeout or retry_count",
                   "a client that vanished holds its connection slot and credits for up to %.0f s",
                   slot / 1e9);
}

/* Descriptors the server takes beside its connections: listeners, epoll
 * sets, eventfds, the region, the log, a reserve. */
#define SERVER_OWN_FDS 64u

/* A limit as text: "unlimited" or the number. */
static const char *limit_text(uint64_t v, char *buf, size_t len)
{
    if (v == UINT64_MAX)
        return "unlimited";
    snprintf(buf, len, "%llu", (unsigned long long)v);
    return buf;
}

void doctor_check_nofile(struct doctor_report *r, uint64_t soft, uint64_t hard,
                         const struct rkv_server_config *cfg)
{
    uint64_t need = (uint64_t)cfg->max_conns + cfg->max_unauth_conns + SERVER_OWN_FDS;
    char s_text[24], h_text[24];
    static const char fix[] =
        "raise it for the server: LimitNOFILE=65536 in the systemd unit (rkv-server.service "
        "has it), `ulimit -n 65536` in the shell that starts rkv-server, or lower max_conns";
    if (soft >= need)
        doctor_add(r, DOCTOR_OK, "nofile", NULL,
                   "open-files limit %s covers max_conns %u + max_unauth_conns %u connections "
                   "(one descriptor each)",
                   limit_text(soft, s_text, sizeof s_text), cfg->max_conns, cfg->max_unauth_conns);
    else
        doctor_add(r, DOCTOR_WARN, "nofile", fix,
                   "open-files limit %s (hard %s) is below the %llu descriptors max_conns %u + "
                   "max_unauth_conns %u connections take: past it the server refuses clients as "
                   "busy (\"out of file descriptors\")",
                   limit_text(soft, s_text, sizeof s_text), limit_text(hard, h_text, sizeof h_text),
                   (unsigned long long)need, cfg->max_conns, cfg->max_unauth_conns);
}

/* One limit of one device: ok or a warning naming it. */
static void device_limit(struct doctor_report *r, const struct doctor_device *d, const char *what,
                         uint32_t have, uint64_t need, const char *per, const char *fix)
{
    if (have >= need)
        doctor_add(r, DOCTOR_OK, "rdma-limits", NULL, "%s: %s %u covers %llu (%s)", d->name, what,
                   have, (unsigned long long)need, per);
    else
        doctor_add(r, DOCTOR_WARN, "rdma-limits", fix,
                   "%s: %s is %u, below the %llu the server takes (%s): connections past it "
                   "are refused",
                   d->name, what, have, (unsigned long long)need, per);
}

void doctor_check_device_limits(struct doctor_report *r, const struct doctor_device *devs, unsigned n,
                                const struct rkv_server_config *cfg, const struct doctor_wanted *w)
{
    static const char fix[] = "lower max_conns to what the device holds, or use a device with "
                              "more (ibv_devinfo -v shows its limits)";
    uint64_t conns = (uint64_t)cfg->max_conns + cfg->max_unauth_conns;
    for (unsigned i = 0; i < n; i++) {
        const struct doctor_device *d = &devs[i];
        if (d->max_qp == 0 || (w->device != NULL && strcmp(w->device, d->name) != 0))
            continue; /* not queried, or not the server's */
        if (!w->rdma) {
            doctor_add(r, DOCTOR_INFO, "rdma-limits", NULL,
                       "%s: max_qp %u, max_cq %u, max_srq %u (no rdma listener configured)",
                       d->name, d->max_qp, d->max_cq, d->max_srq);
            continue;
        }
        device_limit(r, d, "max_qp", d->max_qp, conns, "one QP per connection", fix);
        device_limit(r, d, "max_cq", d->max_cq, 2 * conns, "a send and a receive CQ each", fix);
        device_limit(r, d, "max_srq", d->max_srq, cfg->workers, "a shared receive queue per worker",
                     "lower workers");
    }
}
