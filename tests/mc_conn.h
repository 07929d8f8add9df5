/* mc_conn.h — a test's tcp connection to a memcached-protocol door (rkv's
 * tcp:// listener, memcached, or a proxy in front of them) on 127.0.0.1:
 * connect, send a whole buffer, read n bytes or one line.
 *
 * Nothing here fails a test by itself: each call says what happened and the
 * caller asserts on it, so cmocka tests and plain programs (mc_diff) share
 * these. A blocking connection gets a receive timeout, so that a door that
 * stops answering fails the read instead of hanging the test.
 */
#ifndef RKV_TEST_MC_CONN_H
#define RKV_TEST_MC_CONN_H

#include <stdbool.h>
#include <stddef.h>

#define MC_CONN_TIMEOUT_S 20 /* mc_connect's receive timeout */

struct mc_conn_opts {
    int rcvbuf;         /* SO_RCVBUF, set before connect (the window the peer sees); 0 = default */
    unsigned timeout_s; /* SO_RCVTIMEO; 0 = none */
    bool nonblock;      /* O_NONBLOCK once connected */
};

/* Connect to 127.0.0.1:port with TCP_NODELAY and the options (NULL: the
 * defaults above). Returns the fd (close-on-exec), or -1. */
int mc_connect_opts(unsigned port, const struct mc_conn_opts *o);
/* mc_connect_opts with a receive timeout of MC_CONN_TIMEOUT_S. */
int mc_connect(unsigned port);

/* Send all n bytes (MSG_NOSIGNAL); false when the connection failed. */
bool mc_send_all(int fd, const void *p, size_t n);
/* mc_send_all of a NUL-terminated string. */
bool mc_send_str(int fd, const char *s);
/* Read until n bytes came, or EOF, an error or the receive timeout: the
 * number of bytes read. */
size_t mc_recv_n(int fd, char *buf, size_t n);
/* Read one line, up to and including its '\n' (or cap - 1 bytes, or what
 * came before EOF), into buf, NUL-terminated: its length (0 at EOF). */
size_t mc_read_line(int fd, char *buf, size_t cap);

#endif
