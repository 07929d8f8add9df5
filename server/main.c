/* main.c — rkv-server: start up, accept connections, tick, shut down.
 *
 * Start-up order matters for clear failures: configuration (exit 2 on a bad
 * value), then the region (hugepages, memory), the table in it, the
 * listeners (which register the region with each RDMA device), and only
 * then the workers. The main thread then waits in poll() on the listeners,
 * a 1-second timer (server clock, expiry, grace periods) and a signalfd.
 * SIGINT/SIGTERM stop accepting, let workers answer what has arrived, close
 * every connection, free everything and exit 0.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "fd_store.h"
#include "log.h"
#include "memory_budget.h"
#include "metrics_http.h"
#include "numa.h"
#include "region.h"
#include "sd_notify.h"
#include "server.h"
#include "state_file.h"
#include "util.h"
#include "wire.h"

static int open_listeners(struct rkv_server *srv)
{
    const struct rkv_server_config *cfg = &srv->cfg;
    /* Transports hold at most every authenticated connection plus every one
     * still waiting for HELLO (admission.c), and count their refusals. A
     * socket directory that systemd did not create is made. */
    struct rkv_strans_params p;
    rkv_strans_params_init(&p);
    p.credits = cfg->credits;
    p.max_msg = cfg->max_msg;
    p.max_conns = cfg->max_conns + cfg->max_unauth_conns;
    p.rejected = &srv->conns_rejected;
    p.make_dir = true;
    p.device = cfg->rdma_device[0] ? cfg->rdma_device : NULL;
    p.cq_size = cfg->cq_size;
    p.max_inline = cfg->max_inline;
    p.signal_interval = cfg->signal_interval;
    p.tos = cfg->tos;
    p.gid_index = cfg->gid_index;
    p.ack_timeout = cfg->ack_timeout;
    p.retry_count = cfg->retry_count;
    p.workers = cfg->workers;
    p.srq_depth = cfg->srq_depth;
    p.no_srq = cfg->srq_depth == 0;
    for (unsigned i = 0; i < cfg->listen_count; i++) {
        struct rkv_listen_ep *ep = &srv->listeners[srv->nlisteners];
        char scheme[8], err[512] = "";
        const char *addr;
        memcpy(ep->uri, cfg->listen[i].uri, sizeof ep->uri);
        ep->uri[sizeof ep->uri - 1] = '\0';
        if (!rkv_uri_split(ep->uri, scheme, sizeof scheme, &addr) ||
            (ep->ops = rkv_server_transport_by_scheme(scheme)) == NULL ||
            (ep->wire = rkv_wire_by_scheme(scheme)) == NULL) {
            RKV_ERROR("cannot listen on %s: unknown transport; use rdma://HOST:PORT, shm://PATH "
                      "or tcp://HOST:PORT",
                      ep->uri);
            return -1;
        }
        if (rkv_wire_check_listener(ep->wire, cfg, ep->uri, addr) != 0)
            return -1;
        rkv_status st = ep->ops->listen(addr, &srv->region, &p, &ep->l, err, sizeof err);
        if (st != RKV_OK) {
            RKV_ERROR("cannot listen on %s: %s", ep->uri, err[0] ? err : rkv_strerror(st));
            return -1;
        }
        srv->nlisteners++;
        RKV_INFO("listening on %s (%s)", ep->uri, ep->wire->name);
    }
    return 0;
}

/* Accept everything pending on one listener; hand each to a worker. */
static void accept_all(struct rkv_server *srv, struct rkv_listen_ep *ep, unsigned *next_worker)
{
    for (;;) {
        struct rkv_sconn *conn = NULL;
        rkv_status st = ep->ops->accept(ep->l, &conn);
        if (st != RKV_OK || conn == NULL)
            return;
        struct rkv_wconn *wc = calloc(1, sizeof *wc);
        int owner = rkv_sconn_worker_of(ep->ops, conn);
        struct rkv_worker *w = &srv->workers[owner >= 0 ? (unsigned)owner % srv->nworkers
                                                        : (*next_worker)++ % srv->nworkers];
        if (wc == NULL) {
            RKV_WARN("%s: refusing %s: out of memory", ep->uri, ep->ops->peer(conn));
            atomic_fetch_add(&srv->conns_rejected, 1);
            ep->ops->close(conn);
            continue;
        }
        *wc = (struct rkv_wconn){ .ops = ep->ops, .wire = ep->wire, .conn = conn, .ep = ep };
        if (rkv_wire_accept(wc->wire, srv, wc)) { /* crowded one out: its worker closes it */
            for (unsigned i = 0; i < srv->nworkers; i++)
                rkv_worker_wake(&srv->workers[i]);
        }
        atomic_fetch_add_explicit(&w->stats.conns, 1, memory_order_relaxed);
        RKV_INFO("%s: connection %s accepted by worker %u", ep->uri, ep->ops->peer(conn), w->id);
        rkv_worker_give(w, wc);
        atomic_fetch_add(&srv->conns_total, 1);
    }
}

static int make_signalfd(void)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, NULL); /* inherited by every worker */
    sigdelset(&set, SIGPIPE);
    return signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
}

static int make_ticker(void)
{
    int fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
    struct itimerspec its = { .it_interval = { 1, 0 }, .it_value = { 1, 0 } };
    if (fd >= 0 && timerfd_settime(fd, 0, &its, NULL) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static void serve_until_signal(struct rkv_server *srv, int sigfd, int tickfd, int metricsfd)
{
    struct pollfd pfd[RKV_MAX_LISTENERS + 3];
    unsigned next_worker = 0;
    for (;;) {
        unsigned n = 0;
        pfd[n++] = (struct pollfd){ .fd = sigfd, .events = POLLIN };
        pfd[n++] = (struct pollfd){ .fd = tickfd, .events = POLLIN };
        for (unsigned i = 0; i < srv->nlisteners; i++)
            pfd[n++] = (struct pollfd){ .fd = srv->listeners[i].ops->listener_fd(srv->listeners[i].l),
                                        .events = POLLIN };
        pfd[n++] = (struct pollfd){ .fd = metricsfd, .events = POLLIN }; /* -1: ignored */
        if (poll(pfd, n, 1000) < 0 && errno != EINTR) {
            RKV_ERROR("poll: %s", strerror(errno));
            return;
        }
        if (pfd[0].revents & POLLIN) {
            struct signalfd_siginfo si;
            if (read(sigfd, &si, sizeof si) == (ssize_t)sizeof si) {
                RKV_INFO("signal %u: shutting down", si.ssi_signo);
                return;
            }
        }
        bool ticked = false;
        if (pfd[1].revents & POLLIN) {
            uint64_t ticks;
            if (read(tickfd, &ticks, sizeof ticks) > 0)
                rkv_table_tick(srv->table);
            ticked = true;
        }
        /* Every tick too: handshakes that stay silent expire even when no
         * other peer makes the listener readable. */
        for (unsigned i = 0; i < srv->nlisteners; i++)
            if (pfd[2 + i].revents || ticked)
                accept_all(srv, &srv->listeners[i], &next_worker);
        if (pfd[n - 1].revents & POLLIN)
            rkv_metrics_serve(metricsfd, srv);
        if (atomic_load(&srv->stop))
            return; /* a worker failed to start */
    }
}

static int start_workers(struct rkv_server *srv)
{
    for (unsigned i = 0; i < srv->cfg.workers; i++) {
        int rc = rkv_worker_start(srv, &srv->workers[i], i);
        if (rc != 0) {
            RKV_ERROR("cannot start worker %u: %s", i, strerror(-rc));
            return -1;
        }
        srv->nworkers++;
    }
    return 0;
}

/* Memory and workers on the NIC's NUMA node unless told otherwise. */
static int place_on_nic_node(struct rkv_server_config *cfg)
{
    int node = rkv_numa_nic_node(cfg);
    if (node < 0)
        return -1;
    if (cfg->cpu_count == 0) {
        int n = rkv_numa_node_cpus(node, cfg->cpus, RKV_CONFIG_MAX_CPUS);
        cfg->cpu_count = n > 0 ? (unsigned)n : 0;
    }
    RKV_INFO("the RDMA NIC is on NUMA node %d: region memory there%s", node,
             cfg->cpu_count ? ", workers pinned to the configured/node CPUs" : "");
    return node;
}

/* What the population guard knows: the server's need beyond the region,
 * and how its table will lay the region out. */
struct region_plan {
    uint64_t rest;
    struct rkv_table_config tc;
    uint64_t untaken; /* set by region_untaken */
};

/* Population guard: the rest of the need (beyond the region). */
static bool region_still_fits(void *ctx, uint64_t remaining, char *err, size_t err_len)
{
    return rkv_mem_still_fits(remaining, ((const struct region_plan *)ctx)->rest, err, err_len);
}

/* Population guard: leave untaken the index's room past the buckets it
 * starts with; the index takes it as it grows (table.h cfg.take). */
static void region_untaken(void *ctx, uint64_t size, uint64_t *off, uint64_t *len)
{
    struct region_plan *p = ctx;
    struct rkv_region_header g;
    char err[256];
    *off = *len = 0;
    if (rkv_table_plan(size, &p->tc, &g, err, sizeof err) != RKV_OK)
        return; /* rkv_table_create says why */
    uint64_t used = g.index_offset + g.index_base * sizeof(struct rkv_bucket);
    if (g.heap_offset > used) {
        *off = p->untaken = used;
        *len = g.heap_offset - used;
    }
}

/* Refuse a --memory this machine cannot back, before anything is allocated,
 * and lower max_conns when not every connection's buffers fit beside the
 * region (memory_budget.h); *rest gets what the server needs beyond the
 * region, for the population guard. */
static int check_memory(struct rkv_server_config *cfg, uint64_t *rest)
{
    static char msg[2048];
    char sz[32];
    struct rkv_mem_env env;
    struct rkv_mem_need need;
    unsigned conns;
    rkv_mem_probe("/proc", "/sys", &env);
    if (!cfg->memory_check) {
        RKV_INFO("memory check off (memory_check = no): not comparing the region with what "
                 "this machine can back");
        return 0;
    }
    if (!rkv_mem_admit(cfg, cfg->memory, &env, &conns, msg, sizeof msg)) {
        RKV_ERROR("%s", msg);
        return -1;
    }
    if (conns < cfg->max_conns) {
        RKV_WARN("max_conns lowered from %u to %u: the buffers of %u connections do not fit "
                 "beside the %s region in the memory this machine offers; later peers get "
                 "\"server busy\". Set max_conns to at most %u, lower --memory, or give the "
                 "server more memory",
                 cfg->max_conns, conns, cfg->max_conns, rkv_format_size(cfg->memory, sz, sizeof sz),
                 conns);
        cfg->max_conns = conns;
    }
    /* the guard protects population: connection buffers come later, as
     * peers connect, so they are not asked for while the region fills */
    rkv_mem_need_compute(cfg, cfg->memory, &env, &need);
    *rest = need.ram - need.conns - (need.page_size == 4096 ? need.region : 0);
    rkv_mem_describe(cfg, cfg->memory, &env, msg, sizeof msg);
    RKV_INFO("memory: %s", msg);
    return 0;
}

/* ------------------------------------------------------------ --state-file */

static bool srv_state_kept; /* the table is the state file's: remove the file before serving */

/* The table configuration the server lays its region out with: slab_page_size
 * is the largest item, and the table's pages are larger by the room for a
 * second header and key, so that two values of half of it share a page
 * (rkv_table_page_pair_room). */
static struct rkv_table_config table_config(const struct rkv_server_config *cfg)
{
    return (struct rkv_table_config){
        .slab_page_size = cfg->slab_page_size + rkv_table_page_pair_room(RKV_MAX_KEY_LEN),
        .max_key_len = RKV_MAX_KEY_LEN,
        .max_value_len = cfg->max_value_len,
        .grace_ms = cfg->grace_ms,
        .item_size_hint = cfg->item_size_hint,
        .default_ttl = cfg->default_ttl,
        .evict = (enum rkv_evict_policy)cfg->evict,
    };
}

/* The table's take(): the region's untaken pages, charged now. */
static int region_take(void *ctx, uint64_t off, uint64_t len)
{
    return rkv_region_take(ctx, off, len);
}

/* The table's configuration for this server's region. */
static struct rkv_table_config region_table_config(struct rkv_server *srv)
{
    struct rkv_table_config tc = table_config(&srv->cfg);
    if (srv->room_untaken != 0) {
        tc.room_untaken = srv->room_untaken;
        tc.take = region_take;
        tc.take_ctx = &srv->region;
    }
    return tc;
}

/* The state header's fingerprint of this server: format, version and the
 * configuration the region was laid out with. 0, or -1 with a message. */
static int state_fingerprint(const struct rkv_server *srv, struct rkv_state_header *h, char *err,
                             size_t err_len)
{
    struct rkv_table_config tc = table_config(&srv->cfg);
    struct rkv_region_header g;
    if (rkv_table_plan(srv->region.size, &tc, &g, err, err_len) != RKV_OK)
        return -1;
    memset(h, 0, sizeof *h);
    h->state_version = RKV_STATE_VERSION;
    h->format_version = RKV_FORMAT_VERSION;
    snprintf(h->rkv_version, sizeof h->rkv_version, "%s", RKV_VERSION_STRING);
    h->region_size = srv->region.size;
    h->page_kind = rkv_state_page_kind(srv->region.fd);
    h->slab_page_size = g.slab_page_size;
    h->growth_millis = (uint32_t)(RKV_TABLE_GROWTH * 1000 + 0.5);
    h->max_key_len = g.max_key_len;
    h->max_value_len = g.max_value_len;
    h->class_count = g.class_count;
    h->bucket_count = g.index_capacity;
    h->heap_offset = g.heap_offset;
    h->heap_size = g.heap_size;
    return 0;
}

static double gbps(uint64_t bytes, uint64_t ns)
{
    return ns ? (double)bytes / (double)ns : 0; /* bytes per ns = GB/s */
}

/* Where a kept region comes from: a state file, or systemd's fd store. */
struct kept_source {
    const char *name;            /* for messages: "--state-file PATH", or the store */
    const char *empty;           /* how to start empty instead */
    int file_fd;                 /* a state file at its region's first byte, or -1 */
    int region_fd;               /* the fd store's region memfd, or -1 */
    struct rkv_state_header rec; /* the file's header or the store's record */
};

static const char store_name[] = "the region in systemd's file-descriptor store";
static const char store_empty[] = "start with --fd-store off (fd_store = no), or stop the "
                                  "service (which empties its store), to start empty";

/* The kept region's bytes into the new region: read from the state file,
 * or copied from the stored memfd (mapped read-only: sealed, it can never
 * be mapped writable again). 0, or -1 with a message. */
static int kept_copy(struct rkv_server *srv, const struct kept_source *src, char *err, size_t err_len)
{
    if (src->file_fd >= 0)
        return rkv_state_read_region(src->file_fd, src->name + strlen("--state-file "),
                                     srv->region.base, srv->region.size, err, err_len);
    if (rkv_fdstore_check_region(src->region_fd, srv->region.size, err, err_len) != 0)
        return -1;
    void *kept = mmap(NULL, srv->region.size, PROT_READ, MAP_SHARED, src->region_fd, 0);
    if (kept == MAP_FAILED) {
        snprintf(err, err_len, "cannot be mapped: %s", strerror(errno));
        return -1;
    }
    memcpy(srv->region.base, kept, srv->region.size);
    munmap(kept, srv->region.size);
    return 0;
}

/* Keep the region of `src`: check it against this server, copy it into the
 * region, attach the table. 0, or 2 (refused: the message says what keeps
 * the region or how to start empty). */
static int state_keep(struct rkv_server *srv, const struct kept_source *src)
{
    const struct rkv_state_header *file = &src->rec;
    const char *path = src->name;
    bool crashed = file->running_mono_ns != 0;
    char err[2048] = "", sz[32];
    struct rkv_state_header want;
    if (state_fingerprint(srv, &want, err, sizeof err) != 0) {
        RKV_ERROR("cannot lay out the table: %s", err);
        return 2;
    }
    if (!rkv_state_match_source(file, &want, path, src->empty, err, sizeof err)) {
        RKV_ERROR("%s", err);
        return 2;
    }
    uint64_t t0 = rkv_now_ns();
    if (kept_copy(srv, src, err, sizeof err) != 0) {
        RKV_ERROR("%s%s%s; %s", src->file_fd >= 0 ? "" : path, src->file_fd >= 0 ? "" : " ", err,
                  src->empty);
        return 2;
    }
    uint64_t t1 = rkv_now_ns();
    /* a crashed server's header page moved on after its record (clock,
     * generation, liveness): the attach checks its geometry instead */
    if (!crashed && rkv_state_region_header_sum(srv->region.base) != file->region_header_sum) {
        RKV_ERROR("%s has a damaged region header (its checksum does not match); %s", path,
                  src->empty);
        return 2;
    }
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    uint64_t real = (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec;
    uint64_t down = real > file->stop_realtime_ns ? (real - file->stop_realtime_ns) / 1000000000ull
                                                  : 0;
    struct rkv_table_restore r;
    if (rkv_fdstore_restore_point(file, real, rkv_now_ns(), &r.clock, &r.max_version) != 0) {
        RKV_ERROR("%s has a record from another boot; %s", path, src->empty);
        return 2;
    }
    struct rkv_table_config tc = region_table_config(srv);
    struct rkv_table_attach_report rep;
    if (rkv_table_attach(srv->region.base, srv->region.size, &tc, &r, &srv->table, &rep, err,
                         sizeof err) != RKV_OK) {
        RKV_ERROR("%s cannot be kept: %s; %s", path, err, src->empty);
        return 2;
    }
    uint64_t t2 = rkv_now_ns();
    char why[512] = "";
    size_t at = 0;
    uint64_t dropped = 0, bad = 0;
    for (unsigned i = 0; i < RKV_DROP_COUNT; i++) {
        if (rep.dropped[i] == 0)
            continue;
        dropped += rep.dropped[i];
        bad += i != RKV_DROP_EXPIRED ? rep.dropped[i] : 0;
        at += (size_t)snprintf(why + at, at < sizeof why ? sizeof why - at : 0, "%s%s %llu",
                               at ? ", " : " (", rkv_table_drop_name((enum rkv_table_drop)i),
                               (unsigned long long)rep.dropped[i]);
    }
    if (at > 0 && at + 2 < sizeof why)
        strcat(why, ")");
    RKV_INFO("%s (written by rkv-server %s) after %s: kept %llu items (%s) on %llu slab pages, "
             "dropped %llu%s; %s %s in %.3f s (%.2f GB/s), verified in %.3f s (%.3f s per GiB "
             "of region, %.2f us per item); %s %llu s, clock %u -> %u",
             path, file->rkv_version, crashed ? "a crash (no clean stop)" : "a clean stop",
             (unsigned long long)rep.kept, rkv_format_size(rep.kept_bytes, err, sizeof err),
             (unsigned long long)rep.pages, (unsigned long long)dropped, why,
             src->file_fd >= 0 ? "read" : "copied", rkv_format_size(srv->region.size, sz, sizeof sz),
             (double)(t1 - t0) / 1e9, gbps(srv->region.size, t1 - t0), (double)(t2 - t1) / 1e9,
             (double)(t2 - t1) / (double)srv->region.size * 1.073741824,
             rep.kept + dropped ? (double)(t2 - t1) / 1e3 / (double)(rep.kept + dropped) : 0.0,
             crashed ? "record written" : "down", (unsigned long long)down, file->clock, r.clock);
    if (bad > 0)
        RKV_WARN("%s: %llu items failed verification and were dropped (not served)", path,
                 (unsigned long long)bad);
    return 0;
}

/* A clean stop: the region, with no write in flight, to --state-file. 0 or -1. */
static int state_save(struct rkv_server *srv)
{
    const char *path = srv->cfg.state_file;
    char err[2048] = "", sz[32];
    struct rkv_state_header h;
    struct rkv_table_stats ts;
    if (state_fingerprint(srv, &h, err, sizeof err) != 0) {
        RKV_ERROR("--state-file %s not written: %s", path, err);
        return -1;
    }
    struct timespec now;
    rkv_table_stop_state(srv->table, &h.clock, &h.max_version);
    clock_gettime(CLOCK_REALTIME, &now);
    h.stop_realtime_ns = (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec;
    h.region_header_sum = rkv_state_region_header_sum(srv->region.base);
    rkv_table_get_stats(srv->table, &ts);
    uint64_t t0 = rkv_now_ns();
    if (rkv_state_save(path, &h, srv->region.base, srv->region.size, err, sizeof err) != 0) {
        RKV_ERROR("%s: the cache is not kept", err);
        return -1;
    }
    uint64_t t1 = rkv_now_ns();
    RKV_INFO("state file %s: wrote %s (%llu items) in %.3f s (%.2f GB/s); the next start with "
             "the same configuration keeps them",
             path, rkv_format_size(srv->region.size, sz, sizeof sz), (unsigned long long)ts.items,
             (double)(t1 - t0) / 1e9, gbps(srv->region.size, t1 - t0));
    return 0;
}

static int setup_region_table(struct rkv_server *srv, const struct kept_source *src);

/* ------------------------------------------------------------ --fd-store */

static int srv_record_fd = -1; /* the record this server keeps in the fd store */

/* Let what the store handed over go: ours closed, the store's removed. */
static void fdstore_drop(struct rkv_fdstore_fds *fds)
{
    if (fds->region >= 0) {
        close(fds->region);
        fds->region = -1;
    }
    if (fds->state >= 0) {
        close(fds->state);
        fds->state = -1;
    }
    (void)rkv_fdstore_remove(RKV_FDSTORE_REGION);
    (void)rkv_fdstore_remove(RKV_FDSTORE_STATE);
}

/* What systemd's fd store handed this start (--fd-store): 1 with src set
 * to its region and record, 0 for nothing to keep, 2 for a refusal. A
 * region without its record, or a record without its region, is not
 * kept: the start is empty, with a note. */
static int fdstore_take(struct kept_source *src)
{
    char err[512] = "";
    struct rkv_fdstore_fds fds;
    if (rkv_fdstore_parse(getenv("LISTEN_PID"), getenv("LISTEN_FDS"), getenv("LISTEN_FDNAMES"),
                          getpid(), &fds, err, sizeof err) != 0) {
        RKV_ERROR("the descriptors systemd handed over: %s", err);
        return 2;
    }
    unsetenv("LISTEN_PID");
    unsetenv("LISTEN_FDS");
    unsetenv("LISTEN_FDNAMES");
    for (unsigned i = 0; i < fds.count; i++) /* none of them outlives an exec */
        (void)fcntl(RKV_FDSTORE_FIRST_FD + (int)i, F_SETFD, FD_CLOEXEC);
    if (fds.region < 0 || fds.state < 0) {
        if (fds.region >= 0 || fds.state >= 0) {
            RKV_WARN("systemd's file-descriptor store holds %s without %s: starting empty",
                     fds.region >= 0 ? "a region" : "a record",
                     fds.region >= 0 ? "its record" : "a region");
            fdstore_drop(&fds);
        }
        return 0;
    }
    int rc = rkv_fdstore_read_state(fds.state, &src->rec, err, sizeof err);
    close(fds.state);
    if (rc != 0) {
        RKV_ERROR("the record of %s %s; %s", store_name, err, store_empty);
        close(fds.region);
        return 2;
    }
    src->name = store_name;
    src->empty = store_empty;
    src->file_fd = -1;
    src->region_fd = fds.region;
    RKV_INFO("%s: %s", store_name,
             src->rec.running_mono_ns ? "the server before did not stop cleanly; verifying "
                                        "every item"
                                      : "kept at a clean stop");
    return 1;
}

/* This server's record: its fingerprint, clock, version and the time;
 * `running` for the record of a server that serves (a crash leaves it),
 * else a clean stop's (no write in flight). 0 or -1. */
static int fdstore_record(struct rkv_server *srv, bool running)
{
    char err[512];
    struct rkv_state_header h;
    struct timespec now;
    if (state_fingerprint(srv, &h, err, sizeof err) != 0) {
        RKV_ERROR("the fd store's record: %s", err);
        return -1;
    }
    rkv_table_stop_state(srv->table, &h.clock, &h.max_version);
    clock_gettime(CLOCK_REALTIME, &now);
    h.stop_realtime_ns = (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec;
    if (running)
        h.running_mono_ns = rkv_now_ns();
    else
        h.region_header_sum = rkv_state_region_header_sum(srv->region.base);
    if (rkv_fdstore_write_state(srv_record_fd, &h, err, sizeof err) != 0) {
        RKV_ERROR("%s", err);
        return -1;
    }
    return 0;
}

/* Once the table exists: a new record (running), then the region, to the
 * store (what an earlier server stored there is gone: fdstore_drop). The
 * record goes first: a crash between the two leaves a record without its
 * region, an empty start; never a region beside an older record. Nothing
 * without a service manager. 0 or -1. */
static int fdstore_give(struct rkv_server *srv)
{
    char err[512] = "";
    const char *sock = getenv("NOTIFY_SOCKET");
    if (!srv->cfg.fd_store || sock == NULL || sock[0] == '\0')
        return 0;
    if ((srv_record_fd = rkv_fdstore_state_create(err, sizeof err)) < 0) {
        RKV_ERROR("%s", err);
        return -1;
    }
    if (fdstore_record(srv, true) != 0 || rkv_fdstore_push(srv_record_fd, RKV_FDSTORE_STATE) != 0) {
        RKV_ERROR("cannot hand systemd the fd store's record: %s", strerror(errno));
        return -1;
    }
    int ro = rkv_region_readonly_fd(&srv->region);
    int rc = ro >= 0 ? rkv_fdstore_push(ro, RKV_FDSTORE_REGION) : -1;
    int e = errno;
    if (ro >= 0)
        close(ro);
    if (rc != 0) {
        RKV_ERROR("cannot hand systemd the region (FDSTORE=1): %s", strerror(e));
        return -1;
    }
    RKV_INFO("the region is in systemd's file-descriptor store (a restart after a crash keeps "
             "what it verifies; the unit needs FileDescriptorStoreMax=2)");
    return 0;
}

/* Systemd's fd store (--fd-store) if it handed one over, else the state
 * file (--state-file) if there is one, then the region and the table.
 * Returns 0, -1 (exit 1) or 2 (a kept region refused: exit 2). */
static int setup_table(struct rkv_server *srv)
{
    char err[2048] = "";
    struct rkv_server_config *cfg = &srv->cfg;
    struct kept_source src = { .file_fd = -1, .region_fd = -1 };
    char file_name[4200];
    int kept = 0;
    if (cfg->fd_store && (kept = fdstore_take(&src)) == 2)
        return 2;
    if (kept == 1 && cfg->state_file[0]) {
        /* the store's is at least as new; the file goes before serving */
        srv_state_kept = true;
    } else if (cfg->state_file[0]) {
        switch (rkv_state_open(cfg->state_file, geteuid(), &src.file_fd, &src.rec, err, sizeof err)) {
        case RKV_STATE_REFUSED: RKV_ERROR("%s", err); return 2;
        case RKV_STATE_NONE:
            if (rkv_state_check_dir(cfg->state_file, err, sizeof err) != 0) {
                RKV_ERROR("%s", err);
                return 2;
            }
            RKV_INFO("no state file at %s: starting empty (a first start, or the last stop was "
                     "not clean: a crash, SIGKILL or power loss keeps nothing)",
                     cfg->state_file);
            break;
        case RKV_STATE_OK:
            snprintf(file_name, sizeof file_name, "--state-file %s", cfg->state_file);
            src.name = file_name;
            src.empty = "remove the file to start empty";
            srv_state_kept = true;
            kept = 1;
            break;
        }
    }
    int rc = setup_region_table(srv, kept == 1 ? &src : NULL);
    if (src.file_fd >= 0)
        close(src.file_fd);
    if (src.region_fd >= 0) { /* copied: the store lets it go (refused: the failed unit does) */
        struct rkv_fdstore_fds fds = { .region = src.region_fd, .state = -1 };
        if (rc == 0)
            fdstore_drop(&fds);
        else
            close(src.region_fd);
    }
    return rc;
}

/* Whether any listener is rdma://, so that the NIC registers the region. */
static bool listens_rdma(const struct rkv_server_config *cfg)
{
    for (unsigned i = 0; i < cfg->listen_count; i++)
        if (strncmp(cfg->listen[i].uri, "rdma://", 7) == 0)
            return true;
    return false;
}

/* The region, and the table in it: laid out new, or (src) a kept one. */
static int setup_region_table(struct rkv_server *srv, const struct kept_source *src)
{
    char err[2048] = "", sz[32];
    struct rkv_server_config *cfg = &srv->cfg;
    struct region_plan plan = { .tc = table_config(cfg) };
    if (check_memory(cfg, &plan.rest) != 0)
        return -1;
    int node = place_on_nic_node(cfg);
    int node_cpus[RKV_CONFIG_MAX_CPUS];
    int ncpus = node >= 0 ? rkv_numa_node_cpus(node, node_cpus, RKV_CONFIG_MAX_CPUS) : 0;
    /* one populating thread per CPU of the node the memory goes to; pages
     * cleared at their first touch unless a NIC registers (pins) them all */
    const struct rkv_region_guard guard = { .fits = cfg->memory_check ? region_still_fits : NULL,
                                            .ctx = &plan,
                                            .populate_threads = ncpus > 0 ? (unsigned)ncpus : 0,
                                            .clear_on_first_touch = !listens_rdma(cfg),
                                            .untaken = region_untaken };
    rkv_numa_prefer(node);
    rkv_status st = rkv_region_create_guarded(cfg->memory, &guard, &srv->region, err, sizeof err);
    if (node >= 0)
        rkv_numa_prefer(-1);
    if (st != RKV_OK) {
        RKV_ERROR("cannot allocate the %s region: %s", rkv_format_size(cfg->memory, sz, sizeof sz),
                  err);
        return -1;
    }
    if (cfg->hugepages_required && !srv->region.hugepages) {
        RKV_ERROR("hugepages_required is set but the region got normal pages; reserve hugepages "
                  "(echo N > /proc/sys/vm/nr_hugepages) or unset it");
        return -1;
    }
    srv->room_untaken = srv->region.hugepages ? 0 : plan.untaken;
    struct rkv_table_config tc = region_table_config(srv);
    if (src != NULL) {
        int rc = state_keep(srv, src);
        if (rc != 0)
            return rc;
    } else if ((st = rkv_table_create(srv->region.base, srv->region.size, &tc, &srv->table, err,
                                      sizeof err)) != RKV_OK) {
        RKV_ERROR("cannot lay out the table: %s", err);
        return -1;
    }
    const struct rkv_region_header *h = rkv_table_header(srv->table);
    if (rkv_region_hold_liveness((struct rkv_region_header *)h, err, sizeof err) != 0) {
        RKV_ERROR("%s", err);
        return -1;
    }
    struct rkv_index_geom ig;
    rkv_header_geom(h, &ig);
    RKV_INFO("region %s (%s), %llu buckets growing to %llu, heap %s, largest value %u bytes",
             rkv_format_size(srv->region.size, sz, sizeof sz),
             srv->region.hugepages ? "hugepages" : "normal pages",
             (unsigned long long)rkv_index_count(&ig), (unsigned long long)h->index_capacity,
             rkv_format_size(h->heap_size, err, sizeof err), h->max_value_len);
    return 0;
}

int main(int argc, char **argv)
{
    static struct rkv_server srv; /* large; and zeroed */
    int sigfd = -1, tickfd = -1, metricsfd = -1, rc = 1;

    rkv_server_config_defaults(&srv.cfg);
    switch (rkv_server_config_load(&srv.cfg, argc, argv)) {
    case RKV_CONFIG_OK: break;
    case RKV_CONFIG_EXIT: return 0;
    default: return 2;
    }
    rkv_log_set_level((enum rkv_log_level)srv.cfg.log_level);
    if (srv.cfg.log_file[0] && rkv_log_open(srv.cfg.log_file) != 0) {
        fprintf(stderr, "rkv-server: cannot open log file %s: %s\n", srv.cfg.log_file,
                strerror(errno));
        return 2;
    }
    srv.start_ns = rkv_now_ns();
    srv.region.fd = srv.region.ro_fd = -1;
    sigfd = make_signalfd();
    if (sigfd < 0) {
        RKV_ERROR("cannot create a signal fd: %s", strerror(errno));
        goto out;
    }
    if ((rc = setup_table(&srv)) != 0) {
        rc = rc == 2 ? 2 : 1;
        goto out;
    }
    rc = 1;
    if (rkv_admission_init(&srv) != 0) {
        RKV_ERROR("out of memory for %u connection slots", srv.cfg.max_unauth_conns);
        goto out;
    }
    /* After the table: ticks then fall just after each second of its clock
     * (common/clock.h), so the header shows the clock shm readers go by. */
    tickfd = make_ticker();
    if (tickfd < 0) {
        RKV_ERROR("cannot create the 1-second timer: %s", strerror(errno));
        goto out;
    }
    if (open_listeners(&srv) != 0 || start_workers(&srv) != 0)
        goto out;
    if (srv.cfg.stats_listen[0] && (metricsfd = rkv_metrics_listen(srv.cfg.stats_listen)) < 0)
        goto out;
    if (fdstore_give(&srv) != 0)
        goto out;
    /* Kept: the file goes before anything is served, so that a crash from
     * here on starts empty instead of bringing back this older snapshot. */
    if (srv_state_kept && unlink(srv.cfg.state_file) != 0 && errno != ENOENT) {
        RKV_ERROR("--state-file %s cannot be removed after keeping it: %s; not serving, since a "
                  "crash would bring it back stale",
                  srv.cfg.state_file, strerror(errno));
        goto out;
    }
    RKV_INFO("rkv-server %s ready: %u worker(s), %s polling", RKV_VERSION_STRING, srv.nworkers,
             srv.cfg.poll_mode == RKV_POLL_BUSY    ? "busy"
             : srv.cfg.poll_mode == RKV_POLL_EVENT ? "event"
                                                   : "adaptive");
    if (rkv_sd_notify("READY=1\nSTATUS=serving") != 0)
        RKV_WARN("cannot tell systemd the server is ready (NOTIFY_SOCKET=%s): %s",
                 getenv("NOTIFY_SOCKET"), strerror(errno));
    serve_until_signal(&srv, sigfd, tickfd, metricsfd);
    rc = 0;
out:
    /* we no longer accept; workers answer what arrived and close their
     * connections before the listeners (and their registrations) go */
    (void)rkv_sd_notify(srv.table && srv.cfg.state_file[0] && rc == 0
                            ? "STOPPING=1\nSTATUS=writing the state file"
                            : "STOPPING=1");
    atomic_store(&srv.stop, true);
    for (unsigned i = 0; i < srv.nworkers; i++) {
        rkv_worker_wake(&srv.workers[i]);
        pthread_join(srv.workers[i].thread, NULL);
        close(srv.workers[i].wake_fd);
        pthread_mutex_destroy(&srv.workers[i].inbox_lock);
    }
    for (unsigned i = 0; i < srv.nlisteners; i++)
        srv.listeners[i].ops->close_listener(srv.listeners[i].l);
    if (srv.table) /* shm readers now see the server gone */
        rkv_region_release_liveness((struct rkv_region_header *)rkv_table_header(srv.table));
    /* A clean stop with the workers gone (no write in flight): keep the cache. */
    if (rc == 0 && srv.table && srv_record_fd >= 0 && fdstore_record(&srv, false) != 0)
        rc = 1;
    if (rc == 0 && srv.table && srv.cfg.state_file[0] && state_save(&srv) != 0)
        rc = 1;
    if (srv.table)
        rkv_table_destroy(srv.table);
    if (srv.region.base)
        rkv_region_destroy(&srv.region);
    rkv_admission_free(&srv);
    if (sigfd >= 0)
        close(sigfd);
    if (tickfd >= 0)
        close(tickfd);
    if (metricsfd >= 0)
        close(metricsfd);
    if (rc == 0)
        RKV_INFO("stopped cleanly");
    return rc;
}
