/* numa.h — put the region and the workers on the RDMA NIC's NUMA node.
 *
 * A NIC DMAs into the region for every remote READ; memory and request
 * threads on the NIC's node avoid the cross-socket hop. The node comes from
 * the configured RDMA device, or from the netdev that owns an rdma:// listen
 * address. Machines with one node (or no NIC) get -1 and nothing changes.
 */
#ifndef RKV_NUMA_H
#define RKV_NUMA_H

#include "config.h"

/* The NUMA node of the server's RDMA NIC per its configuration, or -1. */
int rkv_numa_nic_node(const struct rkv_server_config *cfg);
/* Prefer `node` for this thread's new memory (node < 0: the default policy). */
void rkv_numa_prefer(int node);
/* The CPUs of `node` into cpus[] (at most max); returns the count or -1. */
int rkv_numa_node_cpus(int node, int *cpus, unsigned max);

#endif
