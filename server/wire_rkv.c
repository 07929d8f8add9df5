/* wire_rkv.c — the rkv protocol: rkv's messages over a message transport.
 *
 * What connections accepted on an shm or rdma listener speak. At accept a
 * connection takes a slot among those waiting for HELLO (admission.c): it
 * must HELLO, with the shared secret when one is set, within
 * hello_timeout_ms, and a flood of silent peers crowds out only its own
 * oldest. A pass over it takes the requests that arrived, answers each with
 * rkv_handle_request (request.c) straight into the transport's reply
 * buffers, looks again for requests that came in meanwhile (they join the
 * same batch), and then posts all replies with one reply() call: one
 * doorbell (one chained ibv_post_send, one ring publish) and one chained
 * repost of the receive buffers. Counted as `replies` and `reply_doorbells`
 * (stats.c). When the last request taken says more of its client batch
 * follows (RKV_REQ_MORE), the replies wait for it instead, a bounded number
 * of passes (reply_batch.h: `reply_holds`, `reply_hold_expired`); the
 * worker keeps passing while any wait and never sleeps.
 */
#include "log.h"
#include "protocol.h"
#include "reply_batch.h"
#include "server.h"
#include "wire.h"

/* Take a HELLO slot; say so when that crowded out an older connection. */
static bool admit_until_hello(struct rkv_server *srv, struct rkv_wconn *wc)
{
    if (!rkv_admission_admit(srv, wc))
        return false;
    RKV_WARN("%s: %u connections are waiting for HELLO (max_unauth_conns); dropping the "
             "oldest for %s",
             wc->ep->uri, srv->cfg.max_unauth_conns, wc->ops->peer(wc->conn));
    return true;
}

/* Post a connection's waiting replies with one doorbell. */
static void post_replies(struct rkv_worker *w, struct rkv_wconn *wc, enum rkv_reply_verdict v)
{
    struct rkv_reply_batch *b = &wc->replies;
    if (wc->ops->reply(wc->conn, b->lens, b->n) != RKV_OK)
        wc->closing = true;
    rkv_stat_bump(&w->stats.replies, b->n);
    rkv_stat_bump(&w->stats.reply_doorbells, 1);
    rkv_stat_bump(&w->stats.reply_holds, b->held);
    rkv_stat_bump(&w->stats.reply_hold_expired, v == RKV_REPLY_EXPIRED);
    rkv_reply_batch_posted(b);
}

/* One pass: requests that arrive while they are answered join the batch,
 * up to RKV_REPLY_BATCH; the replies then go out, or wait for the rest of
 * the client's batch when may_hold (reply_batch.h). */
static unsigned serve_requests(struct rkv_worker *w, struct rkv_wconn *wc, bool may_hold)
{
    const struct rkv_msg_transport_ops *msg = wc->ops->msg;
    struct rkv_reply_batch *b = &wc->replies;
    struct rkv_msg msgs[RKV_REPLY_BATCH];
    unsigned taken = 0, got;
    bool more = false;
    while (rkv_reply_batch_room(b) > 0 && !wc->closing &&
           (got = wc->ops->poll(wc->conn, msgs, rkv_reply_batch_room(b))) > 0) {
        for (unsigned i = 0; i < got; i++) {
            void *out = msg->reply_buf(wc->conn, b->n);
            rkv_reply_batch_add(b, rkv_handle_request(w->srv, w, wc, &msgs[i], out));
        }
        more = rkv_req_more(msgs[got - 1].data, msgs[got - 1].len);
        taken += got;
    }
    if (b->n == 0)
        return 0; /* the idle pass: nothing taken, nothing waits */
    enum rkv_reply_verdict v = rkv_reply_batch_decide(b, taken, more, may_hold && !wc->closing);
    if (v == RKV_REPLY_POST || v == RKV_REPLY_EXPIRED)
        post_replies(w, wc, v);
    return taken;
}

const struct rkv_wire rkv_wire_rkv = {
    .name = "rkv protocol",
    .accept = admit_until_hello,
    .serve = serve_requests,
};
