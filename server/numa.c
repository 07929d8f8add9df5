/* numa.c — see numa.h. Reads sysfs; no libnuma needed for three calls. */
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "log.h"
#include "numa.h"
#include "util.h"

#define MPOL_DEFAULT   0
#define MPOL_PREFERRED 1

static int read_int_file(const char *path)
{
    char buf[32];
    FILE *f = fopen(path, "re");
    int v = -1;
    if (f == NULL)
        return -1;
    if (fgets(buf, sizeof buf, f))
        v = atoi(buf);
    fclose(f);
    return v;
}

/* The netdev that holds IPv4/IPv6 address `host`, or "" */
static void netdev_of(const char *host, char *ifname, size_t len)
{
    struct ifaddrs *ifa, *i;
    unsigned char want[16], have[16];
    int fam = strchr(host, ':') ? AF_INET6 : AF_INET;
    ifname[0] = '\0';
    if (inet_pton(fam, host, want) != 1 || getifaddrs(&ifa) != 0)
        return;
    for (i = ifa; i; i = i->ifa_next) {
        if (i->ifa_addr == NULL || i->ifa_addr->sa_family != fam)
            continue;
        size_t n = fam == AF_INET ? 4 : 16;
        memcpy(have,
               fam == AF_INET ? (void *)&((struct sockaddr_in *)(void *)i->ifa_addr)->sin_addr
                              : (void *)&((struct sockaddr_in6 *)(void *)i->ifa_addr)->sin6_addr,
               n);
        if (memcmp(want, have, n) == 0) {
            snprintf(ifname, len, "%s", i->ifa_name);
            break;
        }
    }
    freeifaddrs(ifa);
}

int rkv_numa_nic_node(const struct rkv_server_config *cfg)
{
    char path[512], host[256], ifname[64];
    uint16_t port;
    if (cfg->rdma_device[0]) {
        snprintf(path, sizeof path, "/sys/class/infiniband/%s/device/numa_node", cfg->rdma_device);
        return read_int_file(path);
    }
    for (unsigned i = 0; i < cfg->listen_count; i++) {
        const char *u = cfg->listen[i].uri;
        if (strncmp(u, "rdma://", 7) != 0 || !rkv_host_port(u + 7, host, sizeof host, &port))
            continue;
        netdev_of(host, ifname, sizeof ifname);
        if (ifname[0] == '\0')
            continue;
        snprintf(path, sizeof path, "/sys/class/net/%s/device/numa_node", ifname);
        int node = read_int_file(path);
        if (node >= 0)
            return node;
    }
    return -1;
}

void rkv_numa_prefer(int node)
{
    unsigned long mask[16] = { 0 };
    if (node >= 0 && node < (int)(sizeof mask * 8))
        mask[node / 64] = 1ul << (node % 64);
    long rc = node >= 0 ? syscall(SYS_set_mempolicy, MPOL_PREFERRED, mask, sizeof mask * 8)
                        : syscall(SYS_set_mempolicy, MPOL_DEFAULT, NULL, 0);
    if (rc != 0 && node >= 0)
        RKV_WARN("cannot prefer NUMA node %d for the region; it may land on another node", node);
}

int rkv_numa_node_cpus(int node, int *cpus, unsigned max)
{
    char path[128], list[4096], why[128];
    snprintf(path, sizeof path, "/sys/devices/system/node/node%d/cpulist", node);
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return -1;
    char *ok = fgets(list, sizeof list, f);
    fclose(f);
    if (ok == NULL)
        return -1;
    list[strcspn(list, "\n")] = '\0';
    return rkv_parse_cpu_list(list, cpus, max, why, sizeof why);
}
