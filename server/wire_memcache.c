/* wire_memcache.c — the memcached text protocol: memcached's clients over tcp.
 *
 * What connections accepted on a tcp listener speak (the tcp door). There
 * is no HELLO, so its clients cannot present the shared secret: with one
 * set, the listener opens only on loopback or when told to
 * (tcp_allow_unauthenticated). Nothing happens at accept: a connection's
 * first pass counts it against max_conns, shared with the other doors, and
 * refuses it over the limit. A pass answers every complete command that has
 * arrived, in order, with one send() (rkv_memcache_serve, memcache_exec.c);
 * answers never wait for a later pass, but one too large for the output
 * buffer is finished by later passes as the client reads it.
 */
#include "config.h"
#include "log.h"
#include "memcache_exec.h"
#include "server.h"
#include "tcp_server.h"
#include "wire.h"

/* memcached clients have no way to present the shared secret, so with one
 * set the tcp door opens only on loopback, or when told to. */
static int check_auth(const struct rkv_server_config *cfg, const char *uri, const char *addr)
{
    if (cfg->auth_secret[0] == '\0')
        return 0;
    if (cfg->tcp_allow_unauthenticated) {
        RKV_WARN("%s: memcached clients are not authenticated (tcp_allow_unauthenticated); "
                 "the shared secret guards only the rdma and shm doors",
                 uri);
        return 0;
    }
    if (rkv_tcp_is_loopback(addr)) {
        RKV_INFO("%s: memcached clients are not authenticated; this door is open to local "
                 "processes only (loopback)",
                 uri);
        return 0;
    }
    RKV_ERROR("cannot listen on %s: the server has a shared secret but memcached clients cannot "
              "present one; bind the tcp door to loopback (tcp://127.0.0.1:PORT) or set "
              "[security] tcp_allow_unauthenticated = yes (--tcp-allow-unauthenticated)",
              uri);
    return -1;
}

static unsigned serve_commands(struct rkv_worker *w, struct rkv_wconn *wc, bool may_hold)
{
    (void)may_hold; /* answers go out in the pass that computed them */
    return rkv_memcache_serve(w->srv, w, wc);
}

const struct rkv_wire rkv_wire_memcache = {
    .name = "memcached text protocol",
    .check_listener = check_auth,
    .serve = serve_commands,
};
