/* worker.c — a worker thread: the server's request loop.
 *
 * Each worker owns its connections outright (no locks on the request path).
 * A pass visits every active connection and has the wire protocol it was
 * accepted with serve it (wire.h): take what arrived, answer it, send the answers
 * (the rkv protocol: one doorbell per batch of replies, server/wire_rkv.c;
 * the memcached text protocol: one send(), server/wire_memcache.c). A
 * connection whose replies wait for the next pass (the rkv protocol holds
 * them while its client says more of its batch follows, a bounded number
 * of passes: reply_batch.h) keeps its worker passing: a worker holding
 * replies never sleeps.
 *
 * Waiting (poll_mode, config.h): adaptive (the default) busy-polls while
 * requests arrive and, after poll_idle_us without one, arms every
 * connection's wake-up, polls once more (a request that arrived before the
 * arming raises no wake-up) and sleeps in epoll, so an idle server burns no
 * CPU and a busy one pays no wake-up; busy never sleeps while it has
 * connections; event sleeps whenever a pass finds nothing.
 *
 * Parking (adaptive and event modes): a polled connection that has taken
 * no request for a while (max(poll_idle_us, 1 ms); at once in event mode,
 * and every one before the worker sleeps) is armed, looked at once more,
 * and left out of the sweep until its wake-up shows in the worker's epoll;
 * then it is swept again. So a pass costs what the active connections
 * cost, not the open ones: 10,000 idle connections cost a sweep nothing.
 * The worker looks at that epoll every HOUSE_EVERY passes while it spins;
 * the parked get a slow liveness round (alive(): a dead peer, pages to give
 * back, keepalive probes), each about every PARKED_VISIT_NS, and a
 * hang-up wakes a parked connection through epoll at once. Connections
 * not past HELLO are never parked (their deadline is checked every pass;
 * max_unauth_conns bounds them). busy mode parks nothing.
 *
 * Shared wake-ups (rdma on shared receive queues: one receive CQ per
 * worker): a connection may name, beside its own event_fd, an fd it shares
 * with the worker's other connections of its listener (wake_fd). The worker
 * watches each such fd once, while a connection names it, and when it is
 * readable calls the transport's wake(), which takes what arrived and makes
 * the event_fds of the armed connections with requests readable: the same
 * epoll then unparks them.
 *
 * Event-driven connections (the tcp door: a socket says when it has work)
 * are not in the polling sweep: they are served only when the worker's
 * epoll reports them, a batch of events per epoll_wait, the way memcached
 * serves its sockets — no recv() on a connection that has nothing, no pass
 * over idle ones. While polled connections keep the worker spinning it
 * looks at that epoll without waiting; otherwise it waits in it.
 *
 * New connections arrive through the inbox (main thread → worker), a list
 * with no bound of its own: every connection main accepted is served (the
 * listeners' limits bound how many there are). A connection that dies, or
 * that broke the protocol, is closed here and all of its resources go with
 * it (design.md invariant 6).
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "log.h"
#include "reply_batch.h"
#include "server.h"
#include "util.h"
#include "wire.h"

#define SLEEP_MS         100        /* longest sleep: re-check liveness and stop */
#define ALIVE_EVERY      1024       /* passes between liveness checks while busy */
#define HOUSE_EVERY      64         /* passes between looks at parking and the epoll while busy */
#define EVENTS           64         /* epoll events taken per epoll_wait */
#define PARK_IDLE_MIN_NS 1000000ull /* adaptive: idle this long at least to park */
#define PARKED_VISIT_NS  (500ull * 1000000ull) /* each parked connection's alive() this often */
#define PARK_NEVER       UINT64_MAX

/* A worker's connections: `polled` are swept every pass, `evented` only
 * when epoll reports them (rkv_server_transport.event_driven). */
struct worker_conns {
    struct rkv_wconn **v;
    unsigned n;
};

/* A wake-up fd some connections share (transport.h wake_fd), watched while
 * `refs` connections name it. */
struct rkv_worker_wake {
    int fd;   /* -1: a free entry */
    int epfd; /* the worker's epoll set */
    const struct rkv_server_transport *ops;
    void *ctx; /* what ops->wake takes */
    unsigned refs;
};

struct worker_set {
    struct rkv_worker_wake wakes[RKV_MAX_LISTENERS]; /* one per listener at most */
    struct worker_conns polled;                      /* swept every pass */
    struct worker_conns parked; /* polled ones waiting for their wake-up, not swept */
    struct worker_conns evented;
    unsigned cap;        /* all three together */
    int epfd;            /* the worker's epoll set */
    uint64_t park_ns;    /* idle this long: parked (PARK_NEVER: busy mode) */
    unsigned visit_next; /* parked: where the slow liveness round goes on */
    uint64_t visit_ns;   /* ... and when it last did */
};

void rkv_worker_give(struct rkv_worker *w, struct rkv_wconn *wc)
{
    wc->inbox_next = NULL;
    pthread_mutex_lock(&w->inbox_lock);
    if (w->inbox_tail != NULL)
        w->inbox_tail->inbox_next = wc;
    else
        w->inbox_head = wc;
    w->inbox_tail = wc;
    /* atomic too: the worker's loop peeks at it without the lock */
    __atomic_store_n(&w->inbox_count, w->inbox_count + 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&w->inbox_lock);
    rkv_worker_wake(w);
}

void rkv_worker_wake(struct rkv_worker *w)
{
    uint64_t one = 1;
    ssize_t r = write(w->wake_fd, &one, sizeof one);
    (void)r;
}

/* wc no longer names its shared wake-up: the last one out stops watching it. */
static void wake_leave(struct rkv_wconn *wc)
{
    struct rkv_worker_wake *k = wc->wake;

    wc->wake = NULL;
    if (k == NULL || --k->refs > 0)
        return;
    epoll_ctl(k->epfd, EPOLL_CTL_DEL, k->fd, NULL);
    k->fd = -1;
}

static void conn_close(struct rkv_worker *w, struct rkv_wconn *wc, const char *why)
{
    RKV_INFO("%s: connection %s closed (%s)", wc->ep->uri, wc->ops->peer(wc->conn), why);
    wake_leave(wc);
    rkv_admission_leave(w->srv, wc);
    wc->ops->close(wc->conn);
    free(wc);
    atomic_fetch_sub_explicit(&w->stats.conns, 1, memory_order_relaxed);
}

static void conns_add(struct worker_conns *cs, struct rkv_wconn *wc)
{
    wc->slot = cs->n;
    cs->v[cs->n++] = wc;
}

static void conns_remove(struct worker_conns *cs, struct rkv_wconn *wc)
{
    struct rkv_wconn *last = cs->v[--cs->n];
    cs->v[wc->slot] = last;
    last->slot = wc->slot;
}

static bool serve_evented(struct rkv_worker *w, struct worker_set *set, struct rkv_wconn *wc);

/* Watch wc's event_fd in the worker's epoll set: for its events() when it
 * is event-driven, else for the wake-up arm() asks for. */
static bool watch(struct worker_set *set, struct rkv_wconn *wc, int fd, int op)
{
    bool evented = wc->ops->event_driven;
    struct epoll_event ev = { .events = evented ? wc->ops->events(wc->conn) : EPOLLIN,
                              .data.ptr = wc };
    if (epoll_ctl(set->epfd, op, fd, &ev) != 0)
        return false;
    wc->events = ev.events;
    return true;
}

/* Watch the wake-up wc shares with others (wake_fd), if it names one and
 * no connection before it did. false: epoll_ctl failed. */
static bool wake_join(struct worker_set *set, struct rkv_wconn *wc)
{
    struct rkv_worker_wake *k = NULL;
    void *ctx;
    int fd = rkv_sconn_wake_fd(wc->ops, wc->conn, &ctx);

    if (fd < 0)
        return true;
    for (unsigned i = 0; i < RKV_ARRAY_SIZE(set->wakes); i++) {
        if (set->wakes[i].fd == fd) {
            k = &set->wakes[i];
            break;
        }
        if (set->wakes[i].fd < 0 && k == NULL)
            k = &set->wakes[i];
    }
    if (k == NULL)
        return false; /* not while listeners are at most RKV_MAX_LISTENERS */
    if (k->fd != fd) {
        struct epoll_event ev = { .events = EPOLLIN, .data.ptr = k };
        if (epoll_ctl(set->epfd, EPOLL_CTL_ADD, fd, &ev) != 0)
            return false;
        *k = (struct rkv_worker_wake){
            .fd = fd, .epfd = set->epfd, .ops = wc->ops, .ctx = ctx, .refs = 0
        };
    }
    k->refs++;
    wc->wake = k;
    return true;
}

static bool is_wake(const struct worker_set *set, const void *p)
{
    return p >= (const void *)set->wakes && p < (const void *)(set->wakes + RKV_MAX_LISTENERS);
}

static void take_inbox(struct rkv_worker *w, struct worker_set *set)
{
    pthread_mutex_lock(&w->inbox_lock);
    struct rkv_wconn *wc = w->inbox_head, *next;
    w->inbox_head = w->inbox_tail = NULL;
    __atomic_store_n(&w->inbox_count, 0, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&w->inbox_lock);
    for (; wc != NULL; wc = next) {
        next = wc->inbox_next;
        if (set->polled.n + set->parked.n + set->evented.n == set->cap) {
            atomic_fetch_add(&w->srv->conns_rejected, 1);
            conn_close(w, wc, "worker connection limit reached");
            continue;
        }
        int fd = rkv_sconn_event_fd(wc->ops, wc->conn);
        bool evented = wc->ops->event_driven && fd >= 0;
        if (fd >= 0 && (!watch(set, wc, fd, EPOLL_CTL_ADD) || !wake_join(set, wc))) {
            RKV_WARN("worker %u: epoll_ctl: %s; connection served by polling only", w->id,
                     strerror(errno));
            if (wc->events != 0)
                epoll_ctl(set->epfd, EPOLL_CTL_DEL, fd, NULL);
            wc->events = 0; /* never parked: nothing would wake it */
            evented = false;
        }
        wc->worked = true; /* its idle stretch starts at the next look */
        conns_add(evented ? &set->evented : &set->polled, wc);
        if (evented)
            serve_evented(w, set, wc); /* its first pass: admission, what came already */
    }
}

/* Close wc for the reason its state gives (or `why`). */
static void close_for(struct rkv_worker *w, struct rkv_wconn *wc, const char *why)
{
    conn_close(w, wc, why ? why : wc->closing ? "protocol error or refused" : "peer gone");
}

/* One pass over every polled connection; drops the dead, and those that did
 * not pass HELLO in time (admission.c). Returns requests taken; *held counts
 * the connections whose replies wait for the next pass (never with
 * !may_hold). */
static unsigned serve_all(struct rkv_worker *w, struct worker_conns *cs, bool check_alive,
                          bool may_hold, unsigned *held)
{
    unsigned work = 0;
    uint64_t now = 0;
    *held = 0;
    for (unsigned i = 0; i < cs->n;) {
        struct rkv_wconn *wc = cs->v[i];
        const char *why = NULL;
        unsigned got = wc->wire->serve(w, wc, may_hold);
        work += got;
        wc->worked |= got != 0;
        if (wc->closing)
            rkv_stat_bump(&w->stats.closed_bad, 1);
        if (!wc->closing && !wc->authed) {
            now = now ? now : rkv_now_ns();
            why = rkv_admission_check(w->srv, wc, now);
            if (why != NULL)
                atomic_fetch_add(&w->srv->unauth_dropped, 1);
        }
        if (wc->closing || why != NULL || (check_alive && !wc->ops->alive(wc->conn))) {
            conns_remove(cs, wc);
            close_for(w, wc, why);
            continue;
        }
        *held += wc->replies.n > 0;
        i++;
    }
    return work;
}

/* Serve an event-driven connection its epoll reported, then watch it for
 * what it waits for now (an epoll_ctl only when that changed); closes it
 * when it died. Returns whether it lives. */
static bool serve_evented(struct rkv_worker *w, struct worker_set *set, struct rkv_wconn *wc)
{
    const char *why = NULL;
    wc->wire->serve(w, wc, false);
    if (wc->closing)
        rkv_stat_bump(&w->stats.closed_bad, 1);
    if (!wc->closing && wc->ops->alive(wc->conn) && wc->ops->events(wc->conn) != wc->events &&
        !watch(set, wc, rkv_sconn_event_fd(wc->ops, wc->conn), EPOLL_CTL_MOD))
        why = "epoll_ctl failed";
    if (why != NULL || wc->closing || !wc->ops->alive(wc->conn)) {
        conns_remove(&set->evented, wc);
        close_for(w, wc, why);
        return false;
    }
    return true;
}

/* Whether wc may leave the sweep: past HELLO (the deadline of one that is
 * not is checked every pass), in the epoll set, no replies held. */
static bool parkable(const struct rkv_wconn *wc)
{
    return wc->authed && wc->events != 0 && wc->replies.n == 0;
}

/* Take wc (in set->polled, not mid-sweep) out of the sweep: arm its
 * wake-up, look once more (a request that came before the arming raises
 * none) and park it only if that found nothing; close it when the arming
 * found its peer gone (a hang-up would only wake it again). Returns
 * whether it left the sweep. */
static bool park(struct rkv_worker *w, struct worker_set *set, struct rkv_wconn *wc)
{
    rkv_sconn_arm(wc->ops, wc->conn);
    if (wc->wire->serve(w, wc, false) != 0 || wc->closing || wc->replies.n > 0) {
        wc->worked = true; /* the next pass serves it (or closes it) */
        return false;
    }
    conns_remove(&set->polled, wc);
    if (!wc->ops->alive(wc->conn)) {
        close_for(w, wc, NULL);
        return true;
    }
    conns_add(&set->parked, wc);
    wc->parked = true;
    rkv_stat_bump(&w->stats.parked, 1);
    return true;
}

/* Its wake-up came (a request, or a hang-up): back into the sweep. */
static void unpark(struct rkv_worker *w, struct worker_set *set, struct rkv_wconn *wc)
{
    rkv_stat_bump(&w->stats.parked, (uint64_t)-1);
    conns_remove(&set->parked, wc);
    conns_add(&set->polled, wc);
    wc->parked = false;
    wc->worked = true;
}

/* Park the polled connections idle for park_ns since the last look (all
 * that may be, with force). */
static void park_idle(struct rkv_worker *w, struct worker_set *set, uint64_t now, bool force)
{
    for (unsigned i = 0; i < set->polled.n;) {
        struct rkv_wconn *wc = set->polled.v[i];
        bool idle = force || (!wc->worked && now - wc->idle_since_ns >= set->park_ns);
        if (wc->worked) {
            wc->worked = false;
            wc->idle_since_ns = now;
        }
        if (idle && parkable(wc) && park(w, set, wc))
            continue; /* slot i holds another one now */
        i++;
    }
}

/* The slow liveness round of the parked: as many alive() calls as make each
 * one's about every PARKED_VISIT_NS; a dead one is closed. */
static void visit_parked(struct rkv_worker *w, struct worker_set *set, uint64_t now)
{
    struct worker_conns *cs = &set->parked;
    uint64_t due = (now - set->visit_ns) * cs->n / PARKED_VISIT_NS;
    if (due == 0)
        return; /* too soon: the time adds up until one is due */
    set->visit_ns = now;
    for (due = RKV_MIN(due, (uint64_t)cs->n); due > 0 && cs->n > 0; due--) {
        if (set->visit_next >= cs->n)
            set->visit_next = 0;
        struct rkv_wconn *wc = cs->v[set->visit_next];
        if (wc->ops->alive(wc->conn)) {
            set->visit_next++;
            continue;
        }
        conns_remove(cs, wc);
        rkv_stat_bump(&w->stats.parked, (uint64_t)-1);
        close_for(w, wc, NULL);
    }
}

/* Take up to EVENTS events (waiting at most timeout_ms) and serve the
 * event-driven connections among them; a parked connection's event puts it
 * back in the sweep, an active one's only ends the wait (the next pass
 * serves it). A shared wake-up has its transport's wake() make the
 * event_fds of the connections with requests readable: those are taken in
 * one more look without waiting. Returns the connections served or
 * unparked. */
static unsigned serve_events(struct rkv_worker *w, struct worker_set *set, int timeout_ms)
{
    struct epoll_event evs[EVENTS];
    unsigned served = 0;
    bool woke = false;
    for (int round = 0; round == 0 || (round == 1 && woke); round++) {
        int n = epoll_wait(set->epfd, evs, EVENTS, round == 0 ? timeout_ms : 0);
        for (int i = 0; i < n; i++) {
            struct rkv_wconn *wc = evs[i].data.ptr;
            if (is_wake(set, evs[i].data.ptr)) {
                struct rkv_worker_wake *k = evs[i].data.ptr;
                k->ops->wake(k->ctx);
                woke = true;
            } else if (wc == NULL) {
                uint64_t v;
                ssize_t r = read(w->wake_fd, &v, sizeof v);
                (void)r;
            } else if (wc->ops->event_driven) {
                serve_evented(w, set, wc);
                served++;
            } else if (wc->parked) {
                unpark(w, set, wc);
                served++;
            }
        }
    }
    return served;
}

/* Park every polled connection that may be and arm the rest's wake-up,
 * look once more at those, and wait in epoll
 * only if that finds nothing; event-driven connections that epoll reports
 * are served here. That look may hold replies like any pass (a marked
 * request that arrives during it is held, not posted at once), but the
 * worker never sleeps while it holds any: a sleeping worker owes none.
 * Returns the polled connections' requests taken. */
static unsigned sleep_until_work(struct rkv_worker *w, struct worker_set *set)
{
    struct worker_conns *cs = &set->polled;
    unsigned held;
    uint64_t now = rkv_now_ns();
    if (set->park_ns != PARK_NEVER)
        park_idle(w, set, now, true);
    for (unsigned i = 0; i < cs->n; i++) /* the rest: not past HELLO, or work came */
        rkv_sconn_arm(cs->v[i]->ops, cs->v[i]->conn);
    unsigned work = serve_all(w, cs, true, true, &held);
    if (work != 0 || held != 0)
        return work; /* arrived while arming; held replies keep the worker passing */
    visit_parked(w, set, now);
    rkv_stat_bump(&w->stats.sleeps, 1);
    serve_events(w, set, SLEEP_MS);
    return 0;
}

/* Whether the worker has gone without requests long enough to sleep:
 * *since is when the current idle stretch began (0: it begins now). */
static bool idle_for(uint64_t *since, uint64_t ns)
{
    uint64_t now = rkv_now_ns();
    if (*since == 0)
        *since = now;
    return now - *since >= ns;
}

/* Every HOUSE_EVERY passes while the worker spins: what the parked and
 * event-driven connections' epoll says, parking the idle, the parked's
 * slow liveness round. */
static void housekeep(struct rkv_worker *w, struct worker_set *set)
{
    uint64_t now = rkv_now_ns();
    if (set->parked.n > 0 || set->evented.n > 0)
        serve_events(w, set, 0);
    park_idle(w, set, now, false);
    visit_parked(w, set, now);
}

static void pin(struct rkv_worker *w)
{
    if (w->cpu < 0)
        return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(w->cpu, &set);
    int rc = pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    if (rc != 0)
        RKV_WARN("worker %u: cannot pin to CPU %d: %s; check the [server] cpus list", w->id, w->cpu,
                 strerror(rc));
}

static void *worker_main(void *arg)
{
    struct rkv_worker *w = arg;
    struct rkv_server *srv = w->srv;
    struct worker_set set = { .cap = srv->cfg.max_conns + srv->cfg.max_unauth_conns,
                              .epfd = epoll_create1(EPOLL_CLOEXEC) };
    int epfd = set.epfd;
    struct epoll_event ev = { .events = EPOLLIN, .data.ptr = NULL };

    for (unsigned i = 0; i < RKV_ARRAY_SIZE(set.wakes); i++)
        set.wakes[i].fd = -1;

    pin(w);
    set.polled.v = calloc(set.cap, sizeof *set.polled.v);
    set.parked.v = calloc(set.cap, sizeof *set.parked.v);
    set.evented.v = calloc(set.cap, sizeof *set.evented.v);
    if (set.polled.v == NULL || set.parked.v == NULL || set.evented.v == NULL || epfd < 0 ||
        epoll_ctl(epfd, EPOLL_CTL_ADD, w->wake_fd, &ev) != 0) {
        RKV_ERROR("worker %u: cannot start (out of memory or file descriptors)", w->id);
        atomic_store(&srv->stop, true);
        goto out;
    }
    const enum rkv_poll_mode mode = (enum rkv_poll_mode)srv->cfg.poll_mode;
    const uint64_t idle_ns = mode == RKV_POLL_EVENT ? 0 : srv->cfg.poll_idle_us * 1000ull;
    set.park_ns = mode == RKV_POLL_BUSY    ? PARK_NEVER
                  : mode == RKV_POLL_EVENT ? 0
                                           : RKV_MAX(idle_ns, PARK_IDLE_MIN_NS);
    uint64_t idle_since = 0;
    unsigned passes = 0, held = 0;
    while (!atomic_load_explicit(&srv->stop, memory_order_relaxed)) {
        if (__atomic_load_n(&w->inbox_count, __ATOMIC_RELAXED))
            take_inbox(w, &set);
        unsigned work = serve_all(w, &set.polled, ++passes % ALIVE_EVERY == 0, true, &held);
        if (set.park_ns != PARK_NEVER && passes % HOUSE_EVERY == 0)
            housekeep(w, &set);
        /* held replies: keep passing until they go (reply_batch.h bounds it) */
        if (work == 0 && set.polled.n > 0 &&
            (mode == RKV_POLL_BUSY || held > 0 || !idle_for(&idle_since, idle_ns))) {
            /* spinning on polled connections: look at the event-driven
             * ones without waiting; a client spinning on our CPU would
             * starve us both: yield now and then so it can run */
            if (set.evented.n > 0 && serve_events(w, &set, 0) != 0)
                continue;
            if (passes % 8 == 0)
                sched_yield();
            continue;
        }
        if (work == 0)
            work = sleep_until_work(w, &set);
        else if (set.evented.n > 0)
            serve_events(w, &set, 0);
        if (work != 0)
            idle_since = 0;
    }
    /* stopping: answer what already arrived, then close everything */
    take_inbox(w, &set);
    while (set.parked.n)
        unpark(w, &set, set.parked.v[set.parked.n - 1]);
    serve_all(w, &set.polled, false, false, &held);
    for (unsigned i = set.evented.n; i-- > 0;)
        serve_evented(w, &set, set.evented.v[i]);
    while (set.polled.n)
        conn_close(w, set.polled.v[--set.polled.n], "server shutting down");
    while (set.evented.n)
        conn_close(w, set.evented.v[--set.evented.n], "server shutting down");
out:
    free(set.polled.v);
    free(set.parked.v);
    free(set.evented.v);
    if (epfd >= 0)
        close(epfd);
    return NULL;
}

int rkv_worker_start(struct rkv_server *srv, struct rkv_worker *w, unsigned id)
{
    w->srv = srv;
    w->id = id;
    w->cpu = srv->cfg.cpu_count ? srv->cfg.cpus[id % srv->cfg.cpu_count] : -1;
    pthread_mutex_init(&w->inbox_lock, NULL);
    w->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (w->wake_fd < 0)
        return -errno;
    int rc = pthread_create(&w->thread, NULL, worker_main, w);
    if (rc != 0) {
        close(w->wake_fd);
        return -rc;
    }
    return 0;
}
