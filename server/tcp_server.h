/* tcp_server.h — the byte-stream side of the tcp transport (tcp_server.c).
 *
 * rkv_tcp_server_transport is an rkv_server_transport like shm and rdma:
 * main accepts its connections, a worker serves them when its epoll says
 * their socket is ready (event_driven). It carries a byte stream, not
 * messages (it has no rkv_msg_transport_ops): the memcached text protocol
 * (wire_memcache.c), which besides poll and reply works with the stream
 * view below (memcache_exec.c):
 *
 *   poll(c, msgs, 1)  reads what the socket has (bounded by the input
 *                     buffer) and returns 1 with msgs[0] = all unconsumed
 *                     input, or 0 when there is none or the output is
 *                     backed up (a client that does not read gets no more
 *                     answers computed for it);
 *   rkv_tcp_out_*     append to the connection's output buffer (bounded);
 *   reply(c, &n, 1)   consumes n input bytes and writes the output with one
 *                     send() (the rest waits for EPOLLOUT). Complete input
 *                     left unconsumed (a command stopped on a full output)
 *                     keeps EPOLLOUT asked for, so the next pass comes as
 *                     soon as the socket takes more.
 *
 * Buffers: input grows to hold one whole command (line + data block, up to
 * in_max), output up to out_max; both shrink back when drained. A client
 * whose unread replies fill the output while its own input fills the input
 * buffer is dropped (it stopped reading).
 */
#ifndef RKV_TCP_SERVER_H
#define RKV_TCP_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "memcache_proto.h"
#include "transport.h"
#include "util.h"

extern const struct rkv_server_transport rkv_tcp_server_transport;

#define RKV_TCP_BACKLOG 1024 /* listen() backlog of a tcp door (stats settings: tcp_backlog) */

/* A connection's buffer limits for a table whose values reach
 * max_value_len: the input holds one command (the longest retrieval line,
 * or a storage line with its block), the output max(8 MiB, two values and
 * a line): an answer longer than that streams through it (memcache_exec.c).
 * The listener applies them; memory_budget.c counts them. */
#define RKV_TCP_OUT_MIN_MAX (8u << 20)
static inline size_t rkv_tcp_in_max(uint32_t max_value_len)
{
    return (size_t)max_value_len + RKV_MC_MAX_GET_LINE + 2;
}
static inline size_t rkv_tcp_out_max(uint32_t max_value_len)
{
    return RKV_MAX((size_t)RKV_TCP_OUT_MIN_MAX, 2 * (size_t)max_value_len + RKV_MC_MAX_GET_LINE);
}

/* Ask for room to buffer `n` input bytes (one command's worth); false when
 * that is over the connection's input limit. */
bool rkv_tcp_want_input(struct rkv_sconn *c, size_t n);
/* Discard the next n input bytes (a refused data block), even unseen ones. */
void rkv_tcp_skip_input(struct rkv_sconn *c, uint64_t n);

/* Room for n more output bytes, or NULL when it would pass out_max. */
char *rkv_tcp_out_reserve(struct rkv_sconn *c, size_t n);
void rkv_tcp_out_commit(struct rkv_sconn *c, size_t n);
/* The output length now, and cutting it back to such a mark (an answer
 * that did not fit is taken back whole). */
size_t rkv_tcp_out_mark(const struct rkv_sconn *c);
void rkv_tcp_out_rewind(struct rkv_sconn *c, size_t mark);
/* Bytes of output not yet written to the socket. */
size_t rkv_tcp_out_pending(const struct rkv_sconn *c);
/* More output waits than the connection may compute answers for (half its
 * limit): take no more commands until the client reads. */
bool rkv_tcp_out_backed_up(const struct rkv_sconn *c);
/* Close once the output is written (quit, refused connection). */
void rkv_tcp_close_after_output(struct rkv_sconn *c, const char *why);

/* Count every byte received and sent from now on into these counters (the
 * serving worker's, bumped with rkv_stat_bump: only it calls poll and reply). */
void rkv_tcp_count_io(struct rkv_sconn *c, _Atomic uint64_t *bytes_in, _Atomic uint64_t *bytes_out);

/* The connection's place in a long retrieval line (rkv_mc_parse_stream). */
struct rkv_mc_stream *rkv_tcp_mc_stream(struct rkv_sconn *c);

/* Whether every address HOST resolves to is a loopback address. */
bool rkv_tcp_is_loopback(const char *host_port);

#endif
