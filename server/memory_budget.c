/* memory_budget.c — what a configuration takes against what the machine
 * offers (memory_budget.h).
 *
 * Three parts: parsers of /proc and cgroup file contents; the arithmetic
 * (need, room, the check and its message); and rkv_mem_probe(), the only
 * code here that opens files. Sizes mirror the allocations in region.c,
 * slab.c, shm_server.c, rdma_server.c and worker.c; when one of those
 * changes what it allocates, rkv_mem_need_compute() changes with it.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "layout.h"
#include "memory_budget.h"
#include "qp_table.h"
#include "rdma_srq.h"
#include "rdma_util.h"
#include "reply_batch.h"
#include "reply_pool.h"
#include "shm_ring.h"
#include "slab.h"
#include "table.h"
#include "tcp_server.h"
#include "util.h"

#define MIB               (1ull << 20)
#define PAGE_4K           4096ull
#define HUGE_2M           (2ull << 20)
#define HUGE_1G           (1ull << 30)
#define CG_UNLIMITED_FROM (1ull << 62) /* v1 reports "no limit" as ~2^63 */
#define HEADROOM_MIN      (64ull << 20)
#define HEADROOM_SHIFT    4 /* keep 1/16 free */
/* PROCESS_BASE: code, libraries, heap, main thread (measured: 2.7 MiB RSS besides the region) */
#define PROCESS_BASE     (32ull << 20)
#define WORKER_STACK     (1ull << 20) /* stack pages a worker touches, generously */
#define CONN_STRUCTS     4096ull      /* a transport's *_sconn + rkv_wconn and allocator slack */
#define SLAB_PAGE_BOOK   72ull        /* struct slab_page (64) + its pool entry (8) */
#define QUEUE_ENTRY      8ull         /* slab.c: one free-queue entry per item */
#define LRU_WORD         4ull         /* slab.c: one meta word per item, per block */
#define SHM_STAGING_MIN  (1ull << 20) /* shm_server.c SHM_DEFAULT_STAGING */
#define CONN_KERNEL      8192ull      /* socket, memfd, mappings, epoll entry (measured ~4 KiB) */
#define RDMA_QUEUE_ENTRY 64ull        /* per WQE / CQE, a generous provider average */
#define FILE_MAX         65536

/* ------------------------------------------------------------ parsing */

/* A decimal number at *p, skipping leading blanks; advances *p. */
static bool parse_u64_at(const char **p, uint64_t *out)
{
    const char *s = *p;
    char *end;
    while (*s == ' ' || *s == '\t')
        s++;
    if (!isdigit((unsigned char)*s))
        return false;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0)
        return false;
    *out = v;
    *p = end;
    return true;
}

/* The line after `key` at a line start in text, or NULL. */
static const char *line_value(const char *text, const char *key)
{
    size_t klen = strlen(key);
    for (const char *line = text; line != NULL && *line != '\0';) {
        if (strncmp(line, key, klen) == 0)
            return line + klen;
        line = strchr(line, '\n');
        if (line != NULL)
            line++;
    }
    return NULL;
}

static bool meminfo_kb(const char *text, const char *key, uint64_t *bytes)
{
    const char *p = line_value(text, key);
    uint64_t kb;
    if (p == NULL || !parse_u64_at(&p, &kb) || kb > UINT64_MAX / 1024)
        return false;
    while (*p == ' ')
        p++;
    if (strncmp(p, "kB", 2) != 0)
        return false;
    *bytes = kb * 1024;
    return true;
}

bool rkv_meminfo_parse(const char *text, uint64_t *total, uint64_t *available)
{
    uint64_t t = 0, a;
    if (text == NULL || !meminfo_kb(text, "MemAvailable:", &a))
        return false;
    (void)meminfo_kb(text, "MemTotal:", &t);
    *total = t;
    *available = a;
    return true;
}

bool rkv_cgroup_parse_value(const char *text, uint64_t *out)
{
    const char *p = text;
    uint64_t v;
    if (text == NULL)
        return false;
    while (*p == ' ')
        p++;
    if (strncmp(p, "max", 3) == 0 && (p[3] == '\0' || p[3] == '\n')) {
        *out = RKV_MEM_UNLIMITED;
        return true;
    }
    if (!parse_u64_at(&p, &v) || (*p != '\0' && *p != '\n'))
        return false;
    *out = v >= CG_UNLIMITED_FROM ? RKV_MEM_UNLIMITED : v;
    return true;
}

bool rkv_cgroup_stat_value(const char *text, const char *key, uint64_t *out)
{
    char k[80];
    const char *p;
    if (text == NULL || (size_t)snprintf(k, sizeof k, "%s ", key) >= sizeof k)
        return false;
    p = line_value(text, k);
    return p != NULL && parse_u64_at(&p, out);
}

/* Is `item` one of the comma-separated words of list[0, len)? */
static bool in_list(const char *list, size_t len, const char *item)
{
    size_t ilen = strlen(item);
    for (size_t i = 0; i < len;) {
        size_t j = i;
        while (j < len && list[j] != ',')
            j++;
        if (j - i == ilen && memcmp(list + i, item, ilen) == 0)
            return true;
        i = j + 1;
    }
    return false;
}

/* The cgroup path of this process in the v1 memory hierarchy (want_v2
 * false) or the v2 one, from /proc/self/cgroup. */
static bool cgroup_path(const char *proc_cgroup, bool want_v2, char *path, size_t len)
{
    for (const char *line = proc_cgroup; line != NULL && *line != '\0';) {
        const char *eol = strchr(line, '\n');
        size_t n = eol ? (size_t)(eol - line) : strlen(line);
        const char *c1 = memchr(line, ':', n);
        const char *c2 = c1 ? memchr(c1 + 1, ':', n - (size_t)(c1 + 1 - line)) : NULL;
        if (c2 != NULL) {
            size_t clen = (size_t)(c2 - c1 - 1);
            bool v2 = c1 - line == 1 && line[0] == '0' && clen == 0;
            bool mem = !v2 && in_list(c1 + 1, clen, "memory");
            size_t plen = n - (size_t)(c2 + 1 - line);
            if (((want_v2 && v2) || (!want_v2 && mem)) && plen > 0 && plen < len) {
                memcpy(path, c2 + 1, plen);
                path[plen] = '\0';
                return true;
            }
        }
        line = eol ? eol + 1 : NULL;
    }
    return false;
}

/* Copy mountinfo field [s, s+n) into out, undoing its \ooo escapes. */
static bool unescape(const char *s, size_t n, char *out, size_t len)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (ch == '\\' && i + 3 < n && s[i + 1] >= '0' && s[i + 1] <= '3' && s[i + 2] >= '0' &&
            s[i + 2] <= '7' && s[i + 3] >= '0' && s[i + 3] <= '7') {
            ch = (char)((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
            i += 3;
        }
        if (o + 1 >= len)
            return false;
        out[o++] = ch;
    }
    out[o] = '\0';
    return true;
}

/* The mount root and mount point of the first cgroup (v1 with the memory
 * controller, or cgroup2) mount in mountinfo. */
static bool cgroup_mount(const char *mountinfo, bool want_v2, char *root, size_t root_len,
                         char *point, size_t point_len)
{
    for (const char *line = mountinfo; line != NULL && *line != '\0';) {
        const char *eol = strchr(line, '\n');
        size_t n = eol ? (size_t)(eol - line) : strlen(line);
        const char *f[6]; /* start of fields 1..5 (root = 3, point = 4) */
        size_t fl[6];
        unsigned nf = 0;
        for (size_t i = 0; i < n && nf < 6;) {
            while (i < n && line[i] == ' ')
                i++;
            size_t j = i;
            while (j < n && line[j] != ' ')
                j++;
            if (j > i) {
                f[nf] = line + i;
                fl[nf++] = j - i;
            }
            i = j;
        }
        const char *sep = nf == 6 ? strstr(line, " - ") : NULL;
        if (sep != NULL && sep < line + n) {
            const char *fs = sep + 3;
            const char *fs_end = memchr(fs, ' ', (size_t)(line + n - fs));
            const char *opts = fs_end ? memchr(fs_end + 1, ' ', (size_t)(line + n - fs_end - 1))
                                      : NULL;
            size_t fslen = fs_end ? (size_t)(fs_end - fs) : 0;
            bool match = want_v2 ? (fslen == 7 && memcmp(fs, "cgroup2", 7) == 0)
                                 : (fslen == 6 && memcmp(fs, "cgroup", 6) == 0 && opts != NULL &&
                                    in_list(opts + 1, (size_t)(line + n - opts - 1), "memory"));
            if (match && unescape(f[3], fl[3], root, root_len) &&
                unescape(f[4], fl[4], point, point_len))
                return true;
        }
        line = eol ? eol + 1 : NULL;
    }
    return false;
}

int rkv_cgroup_locate(const char *proc_cgroup, const char *mountinfo, char *mount, size_t mount_len,
                      char *dir, size_t dir_len)
{
    char path[1024], root[1024];
    if (proc_cgroup == NULL || mountinfo == NULL)
        return 0;
    for (int v = 1; v <= 2; v++) {
        if (!cgroup_path(proc_cgroup, v == 2, path, sizeof path) ||
            !cgroup_mount(mountinfo, v == 2, root, sizeof root, mount, mount_len))
            continue;
        size_t rlen = strcmp(root, "/") == 0 ? 0 : strlen(root);
        const char *rel = path + rlen;
        if (rlen > 0 && (strncmp(path, root, rlen) != 0 || (*rel != '\0' && *rel != '/')))
            continue; /* our cgroup is outside what is mounted here */
        if (strcmp(rel, "/") == 0)
            rel = "";
        if ((size_t)snprintf(dir, dir_len, "%s%s", mount, rel) >= dir_len)
            continue;
        return v;
    }
    return 0;
}

/* Read a small file into buf (NUL-terminated); false when it cannot. */
static bool read_text(const char *path, char *buf, size_t len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    size_t got = 0;
    if (fd < 0)
        return false;
    while (got + 1 < len) {
        ssize_t n = read(fd, buf + got, len - 1 - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    buf[got] = '\0';
    return got > 0;
}

static bool read_cg_value(const char *root, const char *dir, const char *file, uint64_t *out)
{
    char path[1200], text[64];
    return (size_t)snprintf(path, sizeof path, "%s%s/%s", root, dir, file) < sizeof path &&
           read_text(path, text, sizeof text) && rkv_cgroup_parse_value(text, out);
}

void rkv_cgroup_read(const char *root, const char *mount, const char *dir, int version,
                     struct rkv_mem_cgroup *out)
{
    static const char *const files[2][3] = {
        { "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file" },
        { "memory.max", "memory.current", "inactive_file" },
    };
    char cur[1024], path[1200];
    char *stat = malloc(FILE_MAX);
    size_t mlen = strlen(mount);

    memset(out, 0, sizeof *out);
    if (stat == NULL || (version != 1 && version != 2) || strlen(dir) >= sizeof cur ||
        strncmp(dir, mount, mlen) != 0) {
        free(stat);
        return;
    }
    const char *const *f = files[version - 1];
    snprintf(cur, sizeof cur, "%s", dir);
    for (;;) {
        struct rkv_mem_cgroup lv = { .known = true, .version = version };
        if (read_cg_value(root, cur, f[0], &lv.limit) && lv.limit != RKV_MEM_UNLIMITED &&
            read_cg_value(root, cur, f[1], &lv.usage)) {
            snprintf(path, sizeof path, "%s%s/memory.stat", root, cur);
            if (!read_text(path, stat, FILE_MAX) ||
                !rkv_cgroup_stat_value(stat, f[2], &lv.reclaimable))
                lv.reclaimable = 0;
            snprintf(lv.dir, sizeof lv.dir, "%s", cur);
            if (!out->known || rkv_mem_cgroup_room(&lv) < rkv_mem_cgroup_room(out))
                *out = lv;
        }
        if (strlen(cur) <= mlen)
            break;
        char *slash = strrchr(cur, '/');
        if (slash == NULL || (size_t)(slash - cur) < mlen)
            break;
        *slash = '\0';
        if (strlen(cur) < mlen)
            break;
    }
    free(stat);
}

/* ------------------------------------------------------------ arithmetic */

static uint64_t sat_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static uint64_t sat_mul(uint64_t a, uint64_t b)
{
    return b != 0 && a > UINT64_MAX / b ? UINT64_MAX : a * b;
}

uint64_t rkv_mem_headroom(uint64_t avail)
{
    return RKV_MIN(avail, RKV_MAX(HEADROOM_MIN, avail >> HEADROOM_SHIFT));
}

uint64_t rkv_mem_cgroup_room(const struct rkv_mem_cgroup *cg)
{
    if (!cg->known || cg->limit == RKV_MEM_UNLIMITED)
        return RKV_MEM_UNLIMITED;
    uint64_t used = cg->usage - RKV_MIN(cg->usage, cg->reclaimable);
    return cg->limit > used ? cg->limit - used : 0;
}

/* The page kind region.c will get for `memory` (it tries 1 GiB pages for a
 * multiple of 1 GiB, then 2 MiB, then normal pages). */
static uint64_t page_kind(uint64_t memory, const struct rkv_mem_env *env)
{
    const struct rkv_mem_huge *h2 = &env->huge[0], *h1 = &env->huge[1];
    if (h1->page_size == HUGE_1G && memory % HUGE_1G == 0 &&
        sat_mul(h1->free_pages, HUGE_1G) >= memory)
        return HUGE_1G;
    if (h2->page_size == HUGE_2M && sat_mul(h2->free_pages, HUGE_2M) >= RKV_ALIGN_UP(memory, HUGE_2M))
        return HUGE_2M;
    return PAGE_4K;
}

static bool listens_on(const struct rkv_server_config *cfg, const char *scheme)
{
    size_t n = strlen(scheme);
    for (unsigned i = 0; i < cfg->listen_count; i++)
        if (strncmp(cfg->listen[i].uri, scheme, n) == 0 &&
            strncmp(cfg->listen[i].uri + n, "://", 3) == 0)
            return true;
    return false;
}

/* shm_server.c shm_conn_create(), a connection in use: what the server is
 * charged for — the control block's page, the reply ring it writes and its
 * private request copies, its structures and kernel objects. Memfd pages
 * cost only once touched and are charged to the process that touches them
 * first: the request ring and the staging area, which the client writes,
 * are the client's (perf/conn-cost.py shows it). An idle connection gives
 * all but the control page back (shm_server.c conn_trim): about 8 KiB. */
/* The table's slab page: the largest item and room for a second header
 * and key (main.c table_config). */
static uint64_t server_page(const struct rkv_server_config *cfg)
{
    return (uint64_t)cfg->slab_page_size + rkv_table_page_pair_room(RKV_MAX_KEY_LEN);
}

static uint64_t shm_conn_bytes(const struct rkv_server_config *cfg)
{
    struct rkv_shm_layout l;
    char err[160];
    uint64_t staging = RKV_MAX(SHM_STAGING_MIN, server_page(cfg));
    if (rkv_shm_layout_init(&l, cfg->credits, cfg->max_msg, staging, err, sizeof err) != RKV_OK)
        return 0; /* the listener refuses this configuration itself */
    uint64_t ring = (uint64_t)l.slot_stride * l.credits;
    return (uint64_t)l.req_off + RKV_ALIGN_UP(ring, PAGE_4K) + RKV_ALIGN_UP(ring, PAGE_4K) +
           CONN_STRUCTS + CONN_KERNEL;
}

/* rdma_server.c rdma_conn_create(): its receive buffers and receive CQ
 * when it has no shared receive queue (srq_depth 0; on one, its QP
 * completes its receives on its worker's CQ: rdma_worker_bytes), its FIFOs,
 * its send queue and send CQ; replies come from its worker's pool. Sets
 * *registered to the part registered (pinned) with the NIC. */
static uint64_t rdma_conn_bytes(const struct rkv_server_config *cfg, uint64_t *registered)
{
    uint64_t credits = cfg->credits;
    uint64_t send_depth = RKV_MIN(credits, (uint64_t)RKV_REPLY_BATCH) +
                          2ull * RKV_MAX(cfg->signal_interval, 1u) - 1;
    uint64_t recv_depth = cfg->srq_depth != 0 ? 0 : credits;
    uint64_t recv_cqe = cfg->srq_depth != 0 ? 0 : RKV_MAX((uint64_t)cfg->cq_size, credits + 1);
    uint64_t cqe = RKV_MAX((uint64_t)cfg->cq_size, send_depth) + recv_cqe;
    /* polled, lens, reply_of, sent_buf (4 bytes each), sent_wr (8) */
    uint64_t fifos = credits * (4 * sizeof(uint32_t) + sizeof(uint64_t));
    *registered = RKV_ALIGN_UP(recv_depth * cfg->max_msg, PAGE_4K);
    return *registered + fifos + (cqe + send_depth + recv_depth) * RDMA_QUEUE_ENTRY + CONN_STRUCTS;
}

/* Per worker, all registered but the scratch and the receive CQ: its
 * shared receive queue at its largest (rdma_srq.c: srq_depth buffers of
 * max_msg and their queue entries; none without), with the receive CQ its
 * connections share (as deep as the queue), the stash beside it (a
 * completion per buffer) and its QP table (qp_table.h: room for every
 * connection); its reply pool at its bound (reply_pool.h: srq_depth
 * buffers, at least 2 x credits, in whole chunks; srq_depth 0 gives the
 * pool the default depth), one staging buffer of the listener's pool
 * (staging_pool.h: one per worker at most), and its scratch arrays. */
static uint64_t rdma_worker_bytes(const struct rkv_server_config *cfg, uint64_t *registered)
{
    uint64_t credits = cfg->credits;
    uint64_t depth = RKV_ALIGN_UP((uint64_t)cfg->srq_depth, RKV_SRQ_CHUNK);
    uint64_t pool = RKV_ALIGN_UP(RKV_MAX((uint64_t)(cfg->srq_depth != 0 ? cfg->srq_depth
                                                                        : RKV_RDMA_DEFAULT_SRQ_DEPTH),
                                         2 * credits),
                                 (uint64_t)RKV_REPLY_POOL_CHUNK);
    uint64_t scratch = credits *
                       (sizeof(uint32_t) + sizeof(struct ibv_wc) + sizeof(struct ibv_send_wr) +
                        sizeof(struct ibv_recv_wr) + 2 * sizeof(struct ibv_sge));
    uint64_t reg = depth * cfg->max_msg + pool * cfg->max_msg +
                   RKV_ALIGN_UP((uint64_t)RKV_RDMA_STAGING_SIZE, PAGE_4K);
    uint64_t recv_cq = depth == 0 ? 0
                                  : RKV_MAX((uint64_t)cfg->cq_size, depth) * RDMA_QUEUE_ENTRY +
                                        depth * sizeof(struct ibv_wc) +
                                        rkv_qp_table_bytes(cfg->max_conns + cfg->max_unauth_conns +
                                                           RKV_QP_TABLE_SLACK);
    *registered = (uint64_t)cfg->workers * reg;
    return (uint64_t)cfg->workers * (reg + depth * RDMA_QUEUE_ENTRY + recv_cq + scratch);
}

/* tcp_server.c: both buffers at their limits (they grow on demand up to
 * them) and the connection's own epoll instance. Kernel socket buffers are
 * the kernel's (bounded by net.ipv4.tcp_mem), not counted here. */
static uint64_t tcp_conn_bytes(const struct rkv_server_config *cfg)
{
    return (uint64_t)rkv_tcp_in_max(cfg->max_value_len) + rkv_tcp_out_max(cfg->max_value_len) +
           CONN_STRUCTS;
}

void rkv_mem_need_compute(const struct rkv_server_config *cfg, uint64_t memory,
                          const struct rkv_mem_env *env, struct rkv_mem_need *out)
{
    uint64_t reg_per_conn = 0, shm = 0, rdma = 0, tcp = 0, per_workers = 0, reg_workers = 0;
    memset(out, 0, sizeof *out);
    out->page_size = page_kind(memory, env);
    out->region = RKV_ALIGN_UP(memory, out->page_size);
    out->page_tables = RKV_ALIGN_UP(out->region / out->page_size * 8, PAGE_4K);

    /* slab.c, for a heap of the smallest items (RKV_MIN_ITEM_SIZE):
     * the page table and pool, a free-queue entry per item, and with LRU
     * eviction up to two blocks of meta words per page. */
    uint64_t items = out->region / RKV_MIN_ITEM_SIZE;
    uint64_t per_item = QUEUE_ENTRY + (rkv_evict_uses_access(cfg->evict) ? 2 * LRU_WORD : 0);
    out->bookkeeping = sat_add(out->region / server_page(cfg) * SLAB_PAGE_BOOK,
                               sat_mul(items, per_item));
    /* s3fifo's ghost (evict_ghost.c) */
    out->bookkeeping = sat_add(out->bookkeeping,
                               sat_mul(rkv_evict_ghost_entries(cfg->evict, out->region), 2));
    /* and the magazines of every thread that writes: the workers and the
     * main thread (its tick frees expired items) */
    uint64_t writers = RKV_MIN((uint64_t)cfg->workers + 1, RKV_THREAD_SLOTS);
    out->bookkeeping = sat_add(out->bookkeeping,
                               sat_mul(writers,
                                       rkv_slab_mag_bytes((uint32_t)server_page(cfg),
                                                          RKV_TABLE_GROWTH, RKV_TABLE_FINE_LIMIT)));

    if (listens_on(cfg, "shm"))
        shm = shm_conn_bytes(cfg);
    if (listens_on(cfg, "rdma")) {
        rdma = rdma_conn_bytes(cfg, &reg_per_conn);
        per_workers = rdma_worker_bytes(cfg, &reg_workers);
    }
    if (listens_on(cfg, "tcp"))
        tcp = tcp_conn_bytes(cfg);
    /* max_conns counts connections over every listener together; the
     * transports also hold max_unauth_conns not yet past HELLO */
    uint64_t nconns = (uint64_t)cfg->max_conns + cfg->max_unauth_conns;
    out->conns = sat_add(sat_mul(nconns, RKV_MAX(RKV_MAX(shm, rdma), tcp)), per_workers);
    /* a worker's three connection lists (worker.c: polled, parked, evented) */
    out->process = PROCESS_BASE +
                   (uint64_t)cfg->workers * (WORKER_STACK + 3 * nconns * sizeof(void *));
    out->ram = sat_add(sat_add(out->page_size == PAGE_4K ? out->region : 0, out->page_tables),
                       sat_add(sat_add(out->bookkeeping, out->conns), out->process));
    if (rdma != 0)
        out->locked = sat_add(sat_add(out->region, sat_mul(nconns, reg_per_conn)), reg_workers);
}

/* Which limit binds. */
enum mem_limit { FITS, BY_HUGEPAGES, BY_MEMLOCK, BY_MEMAVAILABLE, BY_CGROUP };

/* The bytes of RAM the server may take from MemAvailable and the cgroup,
 * after headroom, and which of the two is tighter. */
static uint64_t ram_room(const struct rkv_mem_env *env, enum mem_limit *by)
{
    uint64_t room = RKV_MEM_UNLIMITED;
    *by = FITS;
    if (env->meminfo_known) {
        room = env->mem_available - rkv_mem_headroom(env->mem_available);
        *by = BY_MEMAVAILABLE;
    }
    uint64_t cg = rkv_mem_cgroup_room(&env->cgroup);
    if (cg != RKV_MEM_UNLIMITED) {
        uint64_t keep = rkv_mem_headroom(env->cgroup.limit);
        cg = cg > keep ? cg - keep : 0;
        if (cg < room) {
            room = cg;
            *by = BY_CGROUP;
        }
    }
    return room;
}

static enum mem_limit judge(const struct rkv_server_config *cfg, uint64_t memory,
                            const struct rkv_mem_env *env, struct rkv_mem_need *need)
{
    enum mem_limit by;
    rkv_mem_need_compute(cfg, memory, env, need);
    if (cfg->hugepages_required && need->page_size == PAGE_4K)
        return BY_HUGEPAGES;
    if (need->locked != 0 &&
        !rkv_rdma_memlock_ok(env->memlock, need->locked, env->cap_ipc_lock, "", NULL, 0))
        return BY_MEMLOCK;
    return need->ram <= ram_room(env, &by) ? FITS : by;
}

/* cfg with max_conns lowered as far as rkv_mem_admit may lower it. */
static struct rkv_server_config fewest_conns(const struct rkv_server_config *cfg)
{
    struct rkv_server_config c = *cfg;
    c.max_conns = RKV_MIN(cfg->max_conns, RKV_MEM_MIN_CONNS);
    return c;
}

uint64_t rkv_mem_largest(const struct rkv_server_config *given, const struct rkv_mem_env *env)
{
    struct rkv_mem_need need;
    const struct rkv_server_config c = fewest_conns(given), *cfg = &c;
    uint64_t lo = 0, hi = (16ull << 40) / MIB; /* config.c's largest --memory, in MiB */
    if (judge(cfg, RKV_CONFIG_MIN_MEMORY, env, &need) != FITS)
        return 0;
    lo = RKV_CONFIG_MIN_MEMORY / MIB;
    while (lo < hi) { /* need grows with memory: the largest that fits */
        uint64_t mid = lo + (hi - lo + 1) / 2;
        if (judge(cfg, mid * MIB, env, &need) == FITS)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo * MIB;
}

/* "region 8 GiB on normal pages, bookkeeping 2 GiB, 1040 connections 0.5 GiB, ..." */
static void need_breakdown(const struct rkv_server_config *cfg, const struct rkv_mem_need *n,
                           char *buf, size_t len)
{
    char r[32], kind[32], b[32], c[32], p[32];
    rkv_format_size(n->page_size, kind, sizeof kind);
    snprintf(buf, len,
             "region %s on %s%s, allocator bookkeeping up to %s, %u connections' "
             "buffers %s, page tables and workers %s",
             rkv_format_size(n->region, r, sizeof r), n->page_size == PAGE_4K ? "normal pages" : kind,
             n->page_size == PAGE_4K ? "" : " hugepages (not counted as RAM)",
             rkv_format_size(n->bookkeeping, b, sizeof b), cfg->max_conns + cfg->max_unauth_conns,
             rkv_format_size(n->conns, c, sizeof c),
             rkv_format_size(n->page_tables + n->process, p, sizeof p));
}

/* "cgroup memory limit 2 GiB (DIR: 12 MiB in use)" or "MemAvailable 21.3 GiB" */
static void source_text(const struct rkv_mem_env *env, enum mem_limit by, char *buf, size_t len)
{
    char a[32], u[32];
    if (by == BY_CGROUP)
        snprintf(buf, len, "cgroup memory limit %s (%s, v%d: %s in use)",
                 rkv_format_size(env->cgroup.limit, a, sizeof a), env->cgroup.dir,
                 env->cgroup.version,
                 rkv_format_size(env->cgroup.usage -
                                     RKV_MIN(env->cgroup.usage, env->cgroup.reclaimable),
                                 u, sizeof u));
    else
        snprintf(buf, len, "MemAvailable %s of MemTotal %s (/proc/meminfo)",
                 rkv_format_size(env->mem_available, a, sizeof a),
                 rkv_format_size(env->mem_total, u, sizeof u));
}

bool rkv_mem_check(const struct rkv_server_config *cfg, uint64_t memory,
                   const struct rkv_mem_env *env, char *msg, size_t msg_len)
{
    struct rkv_mem_need need;
    char asked[32], got[32], most[32] = "", parts[320], src[1200], lock[256];
    enum mem_limit by = judge(cfg, memory, env, &need);
    uint64_t largest;

    if (by == FITS)
        return true;
    largest = rkv_mem_largest(cfg, env);
    rkv_format_size(memory, asked, sizeof asked);
    if (largest != 0)
        snprintf(most, sizeof most, "%s", rkv_format_size(largest, got, sizeof got));
    switch (by) {
    case BY_HUGEPAGES: {
        uint64_t want = RKV_ALIGN_UP(memory, HUGE_2M) / HUGE_2M;
        snprintf(msg, msg_len,
                 "--memory %s: hugepages_required is set but only %llu 2 MiB "
                 "hugepages are free (%llu needed; /sys/kernel/mm/hugepages); reserve them with "
                 "`echo %llu > /proc/sys/vm/nr_hugepages`, or unset hugepages_required",
                 asked, (unsigned long long)env->huge[0].free_pages, (unsigned long long)want,
                 (unsigned long long)(env->huge[0].total_pages + want -
                                      RKV_MIN(want, env->huge[0].free_pages)));
        break;
    }
    case BY_MEMLOCK:
        /* name the region alone when it alone is over the limit */
        if (rkv_rdma_memlock_ok(env->memlock, need.region, false, "region", lock, sizeof lock))
            rkv_rdma_memlock_ok(env->memlock, need.locked, false,
                                "region and connection buffers rdma registers", lock, sizeof lock);
        snprintf(msg, msg_len, "--memory %s: %s%s%s, or lower memory or max_conns", asked, lock,
                 largest ? "; the largest --memory this limit allows is " : "", largest ? most : "");
        break;
    default: {
        enum mem_limit b2;
        rkv_format_size(ram_room(env, &b2), got, sizeof got);
        need_breakdown(cfg, &need, parts, sizeof parts);
        source_text(env, by, src, sizeof src);
        char total[32];
        snprintf(msg, msg_len,
                 "--memory %s cannot be backed: this configuration needs %s of RAM "
                 "(%s) but the server can get %s: %s, less headroom kept free; %s%s%s, "
                 "%s, or pass --memory-check=off to start anyway",
                 asked, rkv_format_size(need.ram, total, sizeof total), parts, got, src,
                 largest ? "lower --memory to at most " : "lower max_conns", largest ? most : "",
                 largest ? " (or lower max_conns)" : "",
                 by == BY_CGROUP ? "raise the cgroup's limit (MemoryMax= / --memory of the container)"
                                 : "free memory on this host");
        break;
    }
    }
    return false;
}

bool rkv_mem_admit(const struct rkv_server_config *cfg, uint64_t memory,
                   const struct rkv_mem_env *env, unsigned *max_conns, char *msg, size_t msg_len)
{
    struct rkv_server_config c = fewest_conns(cfg);
    struct rkv_mem_need need;
    *max_conns = cfg->max_conns;
    if (judge(cfg, memory, env, &need) == FITS)
        return true;
    if (!rkv_mem_check(&c, memory, env, msg, msg_len))
        return false;
    unsigned lo = c.max_conns, hi = cfg->max_conns - 1; /* lo fits, cfg->max_conns does not */
    while (lo < hi) { /* need grows with max_conns: the largest that fits */
        c.max_conns = lo + (hi - lo + 1) / 2;
        if (judge(&c, memory, env, &need) == FITS)
            lo = c.max_conns;
        else
            hi = c.max_conns - 1;
    }
    *max_conns = lo;
    return true;
}

void rkv_mem_describe(const struct rkv_server_config *cfg, uint64_t memory,
                      const struct rkv_mem_env *env, char *buf, size_t len)
{
    struct rkv_mem_need need;
    enum mem_limit by;
    char total[32], got[32], parts[320], src[1200];
    rkv_mem_need_compute(cfg, memory, env, &need);
    uint64_t room = ram_room(env, &by);
    need_breakdown(cfg, &need, parts, sizeof parts);
    if (by == FITS)
        snprintf(src, sizeof src, "no limit known");
    else
        source_text(env, by, src, sizeof src);
    snprintf(buf, len, "needs up to %s of RAM (%s); the server can get %s: %s, less headroom",
             rkv_format_size(need.ram, total, sizeof total), parts,
             room == RKV_MEM_UNLIMITED ? "any amount" : rkv_format_size(room, got, sizeof got), src);
}

/* ------------------------------------------------------------ the real files */

static void probe_huge(const char *sysfs, uint64_t page_size, struct rkv_mem_huge *h)
{
    static const char *const names[3] = { "free_hugepages", "resv_hugepages", "nr_hugepages" };
    uint64_t v[3] = { 0, 0, 0 };
    char path[700], text[32];
    memset(h, 0, sizeof *h);
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/kernel/mm/hugepages/hugepages-%llukB/%s", sysfs,
                 (unsigned long long)(page_size >> 10), names[i]);
        const char *p = text;
        if (!read_text(path, text, sizeof text) || !parse_u64_at(&p, &v[i])) {
            if (i == 0)
                return;
            v[i] = 0;
        }
    }
    h->page_size = page_size;
    h->free_pages = v[0] - RKV_MIN(v[0], v[1]);
    h->total_pages = v[2];
}

/* RAM and cgroup only: what population re-reads as it goes. */
static void probe_ram(const char *procfs, const char *sysfs, struct rkv_mem_env *env)
{
    char path[700], root[512], mount[512], dir[1024];
    char *buf = malloc(3 * FILE_MAX);
    env->meminfo_known = false;
    memset(&env->cgroup, 0, sizeof env->cgroup);
    if (buf == NULL)
        return;
    char *cg = buf + FILE_MAX, *mi = buf + 2 * FILE_MAX;
    snprintf(path, sizeof path, "%s/meminfo", procfs);
    if (read_text(path, buf, FILE_MAX))
        env->meminfo_known = rkv_meminfo_parse(buf, &env->mem_total, &env->mem_available);
    /* mount points are absolute: under a fake sysfs they live beside it */
    snprintf(root, sizeof root, "%s", sysfs);
    char *slash = strrchr(root, '/');
    if (strcmp(sysfs, "/sys") == 0 || slash == NULL)
        root[0] = '\0';
    else
        *slash = '\0';
    snprintf(path, sizeof path, "%s/self/cgroup", procfs);
    bool have = read_text(path, cg, FILE_MAX);
    snprintf(path, sizeof path, "%s/self/mountinfo", procfs);
    if (have && read_text(path, mi, FILE_MAX)) {
        int v = rkv_cgroup_locate(cg, mi, mount, sizeof mount, dir, sizeof dir);
        if (v != 0)
            rkv_cgroup_read(root, mount, dir, v, &env->cgroup);
    }
    free(buf);
}

void rkv_mem_probe(const char *procfs, const char *sysfs, struct rkv_mem_env *env)
{
    struct rlimit rl;
    char path[700], status[4096];
    memset(env, 0, sizeof *env);
    probe_ram(procfs, sysfs, env);
    probe_huge(sysfs, HUGE_2M, &env->huge[0]);
    probe_huge(sysfs, HUGE_1G, &env->huge[1]);
    env->memlock = RKV_MEM_UNLIMITED;
    if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        env->memlock = (uint64_t)rl.rlim_cur;
    snprintf(path, sizeof path, "%s/self/status", procfs);
    env->cap_ipc_lock = read_text(path, status, sizeof status) &&
                        rkv_rdma_status_has_ipc_lock(status);
}

bool rkv_mem_still_fits(uint64_t remaining, uint64_t other, char *msg, size_t msg_len)
{
    struct rkv_mem_env env;
    enum mem_limit by;
    char rest[32], got[32], src[1200];
    memset(&env, 0, sizeof env);
    probe_ram("/proc", "/sys", &env);
    uint64_t room = ram_room(&env, &by);
    if (sat_add(remaining, other) <= room)
        return true;
    source_text(&env, by, src, sizeof src);
    snprintf(msg, msg_len,
             "--memory: memory ran short while the region was populated: %s more "
             "is needed but the server can now get %s: %s, less headroom kept free; lower "
             "--memory, free memory, or pass --memory-check=off to start anyway",
             rkv_format_size(sat_add(remaining, other), rest, sizeof rest),
             rkv_format_size(room, got, sizeof got), src);
    return false;
}
