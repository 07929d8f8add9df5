/* reply_batch.h — a connection's answered requests whose replies are not
 * posted yet, and when to post them.
 *
 * A worker (worker.c) answers what it polled from a connection into the
 * transport's reply buffers and then posts those replies with one doorbell.
 * Over rdma a client's batch of requests (one chained post, one doorbell)
 * reaches the server one receive completion at a time, and a worker that
 * polls faster than they arrive would answer each part with a doorbell of
 * its own. So a client marks every request of a batch but the last with
 * RKV_REQ_MORE (protocol.h), and the worker holds a connection's replies
 * while the last request it took from it carries the mark:
 *
 *   the last request taken is unmarked     post (the client's batch is complete)
 *   RKV_REPLY_BATCH replies are waiting     post (the most one batch holds)
 *   RKV_REPLY_HOLD_PASSES worker passes in a row found nothing new on the
 *     connection                            post (the marked request's successor is
 *                                           late, or the client lied: it only
 *                                           delays itself)
 *   the caller may not hold (the connection is closing, the worker stops)
 *                                           post
 *   otherwise                               hold
 *
 * The bound is a count of passes, not a clock: a pass serves every
 * connection of the worker, so a held connection never delays another
 * (design.md invariant 6), and
 * a worker holding replies keeps passing (it never sleeps then, worker.c).
 * A held request also holds its receive buffer, i.e. the client's credit;
 * the client marks only a request whose successor is in the same post, so
 * it never waits for a credit while the server waits for that successor.
 * Old clients never set the mark: every batch is posted at once, as before.
 * tests/test_reply_batch.c plays each rule.
 */
#ifndef RKV_REPLY_BATCH_H
#define RKV_REPLY_BATCH_H

#include <stdbool.h>
#include <stdint.h>

#define RKV_REPLY_BATCH 32u /* replies posted with one doorbell at most */
/* Passes without news before held replies go. A pass over one idle
 * connection costs well under a microsecond on a real host (an empty CQ or
 * ring poll, and the idle loop's sched_yield every 8 passes), so a lying
 * mark costs its sender about a millisecond at most there; Soft-RoCE under
 * qemu TCG delivers the requests of one post further apart than 1,024
 * passes about half the time
 * (docs/results/2026-12-01-reply-more-follow-mark.md). */
#define RKV_REPLY_HOLD_PASSES 8192u

struct rkv_reply_batch {
    uint32_t lens[RKV_REPLY_BATCH]; /* byte count of reply i (in the transport's reply_buf i) */
    unsigned n;                     /* replies written and not yet posted */
    unsigned quiet;                 /* passes in a row that took nothing new while n > 0 */
    bool more;                      /* the last request taken carried RKV_REQ_MORE */
    bool held;                      /* these replies waited at least one pass */
};

/* What rkv_reply_batch_decide() says to do with the replies waiting. */
enum rkv_reply_verdict {
    RKV_REPLY_NONE = 0, /* nothing waits */
    RKV_REPLY_HOLD,     /* keep them for the marked request's successor */
    RKV_REPLY_POST,     /* post them now */
    RKV_REPLY_EXPIRED,  /* post them now: held RKV_REPLY_HOLD_PASSES passes in vain */
};

/* Replies the batch can still take this pass. */
static inline unsigned rkv_reply_batch_room(const struct rkv_reply_batch *b)
{
    return RKV_REPLY_BATCH - b->n;
}

/* Record the reply to a request just answered: len bytes in reply_buf(n). */
static inline void rkv_reply_batch_add(struct rkv_reply_batch *b, uint32_t len)
{
    b->lens[b->n++] = len;
}

/* End of a pass over the connection: `taken` requests were answered in it
 * (already added), the last of them marked when `last_more`; `may_hold`
 * is false when the replies must go now. Returns the verdict; on POST and
 * EXPIRED the caller posts lens[0..n-1] and calls rkv_reply_batch_posted(). */
enum rkv_reply_verdict rkv_reply_batch_decide(struct rkv_reply_batch *b, unsigned taken,
                                              bool last_more, bool may_hold);

/* The waiting replies were posted: the batch starts empty. */
void rkv_reply_batch_posted(struct rkv_reply_batch *b);

#endif
