/* admission.c — how many connections may wait for HELLO, and for how long.
 *
 * A connection counts as unauthenticated from accept until its HELLO (with
 * the secret, when one is set) succeeds. Peers that connect and stay silent
 * must not be able to lock out real clients (design.md invariant 6), so:
 *
 *   - at most max_unauth_conns are unauthenticated at once. Each holds one
 *     slot of srv->unauth, which stores its ticket (a number that grows with
 *     every accept). When all slots are taken, the main thread hands the
 *     oldest ticket's slot to the newcomer; the worker owning the crowded-out
 *     connection sees its ticket gone and closes it. A flood of silent peers
 *     thus only ever displaces itself; a real client, whose HELLO follows
 *     its connect within a round trip, gets in.
 *   - each is closed when hello_timeout_ms pass without HELLO; workers check
 *     on every pass, and wake at least every 100 ms even when idle.
 *   - at most max_conns are authenticated: one more gets RKV_SERVER_BUSY.
 *
 * Slots are written by the main thread (claim) and by the owning worker
 * (release, with a compare-and-swap of its own ticket), so neither takes a
 * lock and a release never frees a slot that has meanwhile been handed on.
 */
#include <stdlib.h>

#include "log.h"
#include "server.h"
#include "util.h"

int rkv_admission_init(struct rkv_server *srv)
{
    srv->unauth = calloc(srv->cfg.max_unauth_conns, sizeof *srv->unauth);
    return srv->unauth != NULL ? 0 : -1;
}

void rkv_admission_free(struct rkv_server *srv)
{
    free(srv->unauth);
    srv->unauth = NULL;
}

bool rkv_admission_admit(struct rkv_server *srv, struct rkv_wconn *wc)
{
    unsigned n = srv->cfg.max_unauth_conns, oldest = 0;
    uint64_t ticket = ++srv->next_ticket;

    wc->ticket = ticket;
    wc->hello_deadline_ns = rkv_now_ns() + (uint64_t)srv->cfg.hello_timeout_ms * 1000000ull;
    for (;;) {
        uint64_t oldest_ticket = UINT64_MAX;
        for (unsigned i = 0; i < n; i++) {
            uint64_t t = atomic_load_explicit(&srv->unauth[i], memory_order_relaxed);
            if (t == 0) {
                oldest = i;
                oldest_ticket = 0;
                break;
            }
            if (t < oldest_ticket) {
                oldest = i;
                oldest_ticket = t;
            }
        }
        /* Fails only when the owner released it meanwhile: look again. */
        if (atomic_compare_exchange_strong(&srv->unauth[oldest], &oldest_ticket, ticket)) {
            wc->unauth_slot = oldest;
            return oldest_ticket != 0;
        }
    }
}

/* Give the slot back if it is still ours. */
static void release_slot(struct rkv_server *srv, struct rkv_wconn *wc)
{
    uint64_t mine = wc->ticket;
    atomic_compare_exchange_strong(&srv->unauth[wc->unauth_slot], &mine, 0);
}

const char *rkv_admission_check(struct rkv_server *srv, struct rkv_wconn *wc, uint64_t now_ns)
{
    if (wc->authed)
        return NULL;
    if (atomic_load_explicit(&srv->unauth[wc->unauth_slot], memory_order_relaxed) != wc->ticket)
        return "crowded out by newer connections that have not sent HELLO either "
               "(max_unauth_conns)";
    if (now_ns >= wc->hello_deadline_ns)
        return "no HELLO within hello_timeout_ms";
    return NULL;
}

bool rkv_admission_authenticate(struct rkv_server *srv, struct rkv_wconn *wc)
{
    uint64_t n = atomic_fetch_add(&srv->conns_authed, 1);
    if (n >= srv->cfg.max_conns) {
        atomic_fetch_sub(&srv->conns_authed, 1);
        atomic_fetch_add(&srv->conns_rejected, 1);
        return false;
    }
    release_slot(srv, wc);
    wc->authed = true;
    return true;
}

void rkv_admission_leave(struct rkv_server *srv, struct rkv_wconn *wc)
{
    if (wc->authed)
        atomic_fetch_sub(&srv->conns_authed, 1);
    else if (wc->ticket != 0) /* 0: its wire protocol admits none at accept (memcache) */
        release_slot(srv, wc);
}
