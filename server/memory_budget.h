/* memory_budget.h — does this machine have the memory a configuration takes?
 *
 * rkv-server populates its whole region at start (region.c), and a region
 * the machine cannot back does not fail politely: shared memory is not in
 * the server's RSS, so the global OOM killer picks other processes first
 * (the shell, the desktop), and in a memory cgroup the kernel enforces the
 * limit by SIGKILL, not by an error. So before allocating anything the
 * server compares what its configuration takes (struct rkv_mem_need) with
 * what it can get (struct rkv_mem_env) and refuses a size that does not fit,
 * with one message that names --memory, both numbers, where the limit comes
 * from and what to do. rkv-doctor prints the same numbers and the largest
 * --memory that would be accepted.
 *
 * What the server can get is the tightest of:
 *   - MemAvailable (/proc/meminfo): what the kernel can hand out without
 *     swapping;
 *   - its memory cgroup: limit - (usage - inactive file cache), for every
 *     ancestor up to the hierarchy's root (v1 memory.limit_in_bytes /
 *     memory.usage_in_bytes, v2 memory.max / memory.current);
 *   - for a region on hugepages: free minus reserved pages of that size
 *     (hugetlb pages are a pool outside MemAvailable and, by default, outside
 *     the memory cgroup);
 *   - for rdma listeners: RLIMIT_MEMLOCK, which must cover what is
 *     registered (unless CAP_IPC_LOCK).
 * A share of RAM and of the cgroup limit (rkv_mem_headroom) is kept free:
 * the kernel, page tables and the page cache need room, and a memcg at its
 * limit OOM-kills rather than failing an allocation.
 *
 * What a configuration takes (worst case, from the real sizes in server/):
 * the region rounded to its page kind; the page tables mapping it; the slab
 * allocator's bookkeeping outside the region (page table, per-class free
 * queues of 8 bytes per item with geometric growth, LRU stamps) for a heap
 * full of the smallest items, and the magazines of every thread that writes
 * (the workers and the main thread); max_conns connections' buffers (shm: the ring
 * memfd with its staging area and a private request copy; rdma: receive and
 * reply buffers, queues; tcp: input and output buffers at their limits);
 * each worker's connection array and stack; and the process itself.
 *
 * Connection buffers are allocated as peers connect, not at start, so they do
 * not decide alone whether a --memory is refused: like Redis lowering
 * maxclients to the file-descriptor limit, a server whose max_conns
 * connections' buffers do not all fit beside the region runs with the
 * max_conns that does fit (rkv_mem_admit; it logs a warning and later
 * peers get RKV_SERVER_BUSY), and a --memory is refused only when not even
 * RKV_MEM_MIN_CONNS connections (or max_conns, when smaller) would fit.
 * Connections counted are max_conns + max_unauth_conns: the transports hold
 * that many.
 *
 * The parsing and arithmetic are pure functions of file contents, so
 * tests/test_memory_budget.c checks them with fixtures; rkv_mem_probe() is the
 * thin part that reads the real files (under a procfs and sysfs root).
 */
#ifndef RKV_MEMORY_BUDGET_H
#define RKV_MEMORY_BUDGET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"

#define RKV_MEM_UNLIMITED  UINT64_MAX
#define RKV_MEM_HUGE_KINDS 2u  /* 2 MiB and 1 GiB pages, as region.c tries them */
#define RKV_MEM_MIN_CONNS  16u /* max_conns is never lowered below this (see above) */

/* One memory cgroup level that limits the server (the tightest one found). */
struct rkv_mem_cgroup {
    bool known;           /* a limited cgroup was found */
    int version;          /* 1 or 2 */
    uint64_t limit;       /* bytes: memory.limit_in_bytes / memory.max */
    uint64_t usage;       /* bytes charged now: memory.usage_in_bytes / memory.current */
    uint64_t reclaimable; /* inactive file cache in usage (memory.stat), given back on demand */
    char dir[1024];       /* the cgroup directory, for messages */
};

/* One hugepage size's pool (sysfs /kernel/mm/hugepages/hugepages-<n>kB). */
struct rkv_mem_huge {
    uint64_t page_size;   /* bytes per page; 0 = the kernel has no such pool */
    uint64_t free_pages;  /* free_hugepages - resv_hugepages */
    uint64_t total_pages; /* nr_hugepages */
};

/* What the machine offers this process. */
struct rkv_mem_env {
    bool meminfo_known;     /* /proc/meminfo had MemAvailable */
    uint64_t mem_total;     /* MemTotal, bytes */
    uint64_t mem_available; /* MemAvailable, bytes */
    struct rkv_mem_cgroup cgroup;
    struct rkv_mem_huge huge[RKV_MEM_HUGE_KINDS]; /* [0] 2 MiB, [1] 1 GiB */
    uint64_t memlock;  /* RLIMIT_MEMLOCK soft limit, RKV_MEM_UNLIMITED when none */
    bool cap_ipc_lock; /* CAP_IPC_LOCK: memlock does not bind */
};

/* What a configuration takes, in bytes. */
struct rkv_mem_need {
    uint64_t region;      /* the region, rounded up to its page kind */
    uint64_t page_size;   /* the page kind region.c will get: 4096, 2 MiB or 1 GiB */
    uint64_t page_tables; /* the server's page tables mapping the region */
    uint64_t bookkeeping; /* slab page table, free queues and LRU stamps (smallest items),
                             and each writer thread's magazines */
    uint64_t conns;       /* max_conns + max_unauth_conns connections' buffers, on the
                             costliest transport listened on */
    uint64_t process;     /* workers (connection arrays, stacks) and the process itself */
    uint64_t ram;         /* what comes out of RAM / the cgroup: all the above, less the
                             region when it is on hugepages */
    uint64_t locked;      /* rdma: bytes registered per RLIMIT_MEMLOCK; 0 without rdma */
};

/* ---- pure parsing (tests feed fixture text) ---- */

/* MemTotal and MemAvailable from /proc/meminfo text. False when MemAvailable
 * is missing (kernels before 3.14) or malformed. */
bool rkv_meminfo_parse(const char *text, uint64_t *total, uint64_t *available);

/* One cgroup value file: a byte count, or "max" (v2); v1's "no limit"
 * (PAGE_COUNTER_MAX, about 2^63) and anything >= 2^62 read as
 * RKV_MEM_UNLIMITED. False when malformed. */
bool rkv_cgroup_parse_value(const char *text, uint64_t *out);

/* The value of `key` in memory.stat text ("key value" lines); false when
 * absent or malformed. */
bool rkv_cgroup_stat_value(const char *text, const char *key, uint64_t *out);

/* Where this process's memory cgroup is, from /proc/self/cgroup and
 * /proc/self/mountinfo text: the hierarchy's mount point (`mount`) and the
 * cgroup directory under it (`dir`, mount + the cgroup path relative to the
 * mount's root). A v1 memory controller wins over v2 (it is the one that
 * limits when both are mounted). Returns the version, 1 or 2, or 0 when
 * neither is mounted or the process is outside the mounted subtree. */
int rkv_cgroup_locate(const char *proc_cgroup, const char *mountinfo, char *mount, size_t mount_len,
                      char *dir, size_t dir_len);

/* Walk from the cgroup directory `dir` up to `mount`, each path prefixed by
 * `root` ("" for the real file system), and keep the level with the least
 * room (limit - usage + reclaimable) in out. out->known stays false when no
 * level has a limit. */
void rkv_cgroup_read(const char *root, const char *mount, const char *dir, int version,
                     struct rkv_mem_cgroup *out);

/* ---- pure arithmetic ---- */

/* Bytes of `avail` the server leaves untouched: 1/16, at least 64 MiB
 * (all of avail when it is smaller). */
uint64_t rkv_mem_headroom(uint64_t avail);

/* Bytes the cgroup can still charge, before headroom; RKV_MEM_UNLIMITED when
 * none limits. */
uint64_t rkv_mem_cgroup_room(const struct rkv_mem_cgroup *cg);

/* What `cfg`, with its memory replaced by `memory`, takes on a machine like
 * `env` (which decides the page kind, as region.c would). */
void rkv_mem_need_compute(const struct rkv_server_config *cfg, uint64_t memory,
                          const struct rkv_mem_env *env, struct rkv_mem_need *out);

/* True when `memory` fits. Otherwise false, with one message in msg naming
 * --memory, what it needs, what is available, where that limit comes from
 * and what to do. */
bool rkv_mem_check(const struct rkv_server_config *cfg, uint64_t memory,
                   const struct rkv_mem_env *env, char *msg, size_t msg_len);

/* One line for the log and rkv-doctor: what `memory` needs, what the server
 * can get and from where ("MemAvailable ...", "cgroup memory limit ..."). */
void rkv_mem_describe(const struct rkv_server_config *cfg, uint64_t memory,
                      const struct rkv_mem_env *env, char *buf, size_t len);

/* The largest --memory (a multiple of 1 MiB) rkv_mem_admit accepts for cfg
 * on env (with max_conns lowered as far as it may be); 0 when not even
 * RKV_CONFIG_MIN_MEMORY fits. */
uint64_t rkv_mem_largest(const struct rkv_server_config *cfg, const struct rkv_mem_env *env);

/* The start-up decision. True when `memory` fits with at least
 * min(max_conns, RKV_MEM_MIN_CONNS) connections; *max_conns gets what the
 * server should run with: cfg->max_conns, or the largest smaller value whose
 * buffers fit. Otherwise false with rkv_mem_check's message for the
 * smallest max_conns allowed. */
bool rkv_mem_admit(const struct rkv_server_config *cfg, uint64_t memory,
                   const struct rkv_mem_env *env, unsigned *max_conns, char *msg, size_t msg_len);

/* ---- the thin part: the real files ---- */

/* Fill env from procfs ("/proc") and sysfs ("/sys"): meminfo, the memory
 * cgroup (its mount points as mountinfo gives them, under sysfs's parent
 * when sysfs is not "/sys"), hugepage pools, RLIMIT_MEMLOCK and CapEff. */
void rkv_mem_probe(const char *procfs, const char *sysfs, struct rkv_mem_env *env);

/* While the region is populated: true when the `remaining` bytes still to
 * populate (plus `other`, the rest of the need still to come) fit what RAM
 * and the cgroup offer now, after headroom; else false with a message like
 * rkv_mem_check's. Reads /proc and the cgroup files again each call. */
bool rkv_mem_still_fits(uint64_t remaining, uint64_t other, char *msg, size_t msg_len);

#endif
