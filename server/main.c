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
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "log.h"
#include "memory_budget.h"
#include "metrics_http.h"
#include "numa.h"
#include "region.h"
#include "server.h"
#include "tcp_server.h"
#include "util.h"

/* memcached clients have no way to present the shared secret, so with one
 * set the tcp door opens only on loopback, or when told to. */
static int check_tcp_auth(const struct rkv_server_config *cfg, const char *uri, const char *addr)
{
    if (cfg->auth_secret[0] == '\0')
        return 0;
    if (cfg->tcp_allow_unauthenticated) {
        RKV_WARN("%s: memcached clients are not authenticated (tcp_allow_unauthenticated); "
                 "the shared secret guards only the rdma and shm doors", uri);
        return 0;
    }
    if (rkv_tcp_is_loopback(addr)) {
        RKV_INFO("%s: memcached clients are not authenticated; this door is open to local "
                 "processes only (loopback)", uri);
        return 0;
    }
    RKV_ERROR("cannot listen on %s: the server has a shared secret but memcached clients cannot "
              "present one; bind the tcp door to loopback (tcp://127.0.0.1:PORT) or set "
              "[security] tcp_allow_unauthenticated = yes (--tcp-allow-unauthenticated)", uri);
    return -1;
}

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
    for (unsigned i = 0; i < cfg->listen_count; i++) {
        struct rkv_listen_ep *ep = &srv->listeners[srv->nlisteners];
        char scheme[8], err[512] = "";
        const char *addr;
        memcpy(ep->uri, cfg->listen[i].uri, sizeof ep->uri);
        ep->uri[sizeof ep->uri - 1] = '\0';
        if (!rkv_uri_split(ep->uri, scheme, sizeof scheme, &addr) ||
            (ep->ops = rkv_server_transport_by_scheme(scheme)) == NULL) {
            RKV_ERROR("cannot listen on %s: unknown transport; use rdma://HOST:PORT, shm://PATH "
                      "or tcp://HOST:PORT", ep->uri);
            return -1;
        }
        if (ep->ops->protocol == RKV_WIRE_MEMCACHE && check_tcp_auth(cfg, ep->uri, addr) != 0)
            return -1;
        rkv_status st = ep->ops->listen(addr, &srv->region, &p, &ep->l, err, sizeof err);
        if (st != RKV_OK) {
            RKV_ERROR("cannot listen on %s: %s", ep->uri, err[0] ? err : rkv_strerror(st));
            return -1;
        }
        srv->nlisteners++;
        RKV_INFO("listening on %s", ep->uri);
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
        struct rkv_worker *w = &srv->workers[(*next_worker)++ % srv->nworkers];
        if (wc == NULL) {
            RKV_WARN("%s: refusing %s: out of memory", ep->uri, ep->ops->peer(conn));
            atomic_fetch_add(&srv->conns_rejected, 1);
            ep->ops->close(conn);
            continue;
        }
        *wc = (struct rkv_wconn){ .ops = ep->ops, .conn = conn, .ep = ep };
        /* the memcached protocol has no HELLO: memcache_exec.c counts it against max_conns */
        if (ep->ops->protocol == RKV_WIRE_RKV && rkv_admission_admit(srv, wc)) {
            RKV_WARN("%s: %u connections are waiting for HELLO (max_unauth_conns); dropping the "
                     "oldest for %s", ep->uri, srv->cfg.max_unauth_conns, ep->ops->peer(conn));
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
            pfd[n++] = (struct pollfd){
                .fd = srv->listeners[i].ops->listener_fd(srv->listeners[i].l), .events = POLLIN };
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

/* Population guard: the rest of the need (beyond the region) is `ctx`. */
static bool region_still_fits(void *ctx, uint64_t remaining, char *err, size_t err_len)
{
    return rkv_mem_still_fits(remaining, *(const uint64_t *)ctx, err, err_len);
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
                 "server more memory", cfg->max_conns, conns, cfg->max_conns,
                 rkv_format_size(cfg->memory, sz, sizeof sz), conns);
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

static int setup_table(struct rkv_server *srv)
{
    char err[2048] = "", sz[32];
    struct rkv_server_config *cfg = &srv->cfg;
    uint64_t rest = 0;
    if (check_memory(cfg, &rest) != 0)
        return -1;
    const struct rkv_region_guard guard = { .fits = region_still_fits, .ctx = &rest };
    int node = place_on_nic_node(cfg);
    rkv_numa_prefer(node);
    rkv_status st = rkv_region_create_guarded(cfg->memory, cfg->memory_check ? &guard : NULL,
                                              &srv->region, err, sizeof err);
    if (node >= 0)
        rkv_numa_prefer(-1);
    if (st != RKV_OK) {
        RKV_ERROR("cannot allocate the %s region: %s", rkv_format_size(cfg->memory, sz, sizeof sz), err);
        return -1;
    }
    if (cfg->hugepages_required && !srv->region.hugepages) {
        RKV_ERROR("hugepages_required is set but the region got normal pages; reserve hugepages "
                  "(echo N > /proc/sys/vm/nr_hugepages) or unset it");
        return -1;
    }
    struct rkv_table_config tc = {
        .slab_page_size = cfg->slab_page_size, .max_key_len = RKV_MAX_KEY_LEN,
        .max_value_len = cfg->max_value_len, .grace_ms = cfg->grace_ms,
        .default_ttl = cfg->default_ttl, .evict = (enum rkv_evict_policy)cfg->evict,
    };
    st = rkv_table_create(srv->region.base, srv->region.size, &tc, &srv->table, err, sizeof err);
    if (st != RKV_OK) {
        RKV_ERROR("cannot lay out the table: %s", err);
        return -1;
    }
    const struct rkv_region_header *h = rkv_table_header(srv->table);
    if (rkv_region_hold_liveness((struct rkv_region_header *)h, err, sizeof err) != 0) {
        RKV_ERROR("%s", err);
        return -1;
    }
    RKV_INFO("region %s (%s), %llu buckets, heap %s, largest value %u bytes",
             rkv_format_size(srv->region.size, sz, sizeof sz),
             srv->region.hugepages ? "hugepages" : "normal pages",
             (unsigned long long)h->bucket_count, rkv_format_size(h->heap_size, err, sizeof err),
             h->max_value_len);
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
        fprintf(stderr, "rkv-server: cannot open log file %s: %s\n", srv.cfg.log_file, strerror(errno));
        return 2;
    }
    srv.start_ns = rkv_now_ns();
    srv.region.fd = srv.region.ro_fd = -1;
    sigfd = make_signalfd();
    if (sigfd < 0) {
        RKV_ERROR("cannot create a signal fd: %s", strerror(errno));
        goto out;
    }
    if (setup_table(&srv) != 0)
        goto out;
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
    RKV_INFO("rkv-server %s ready: %u worker(s), %s polling", RKV_VERSION_STRING, srv.nworkers,
             srv.cfg.poll_mode == RKV_POLL_BUSY ? "busy" :
             srv.cfg.poll_mode == RKV_POLL_EVENT ? "event" : "adaptive");
    serve_until_signal(&srv, sigfd, tickfd, metricsfd);
    rc = 0;
out:
    /* we no longer accept; workers answer what arrived and close their
     * connections before the listeners (and their registrations) go */
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
