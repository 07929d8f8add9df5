/* reply_batch.c — when a connection's waiting replies are posted (see
 * reply_batch.h for the rules and why they cannot hang a client).
 */
#include "reply_batch.h"

enum rkv_reply_verdict rkv_reply_batch_decide(struct rkv_reply_batch *b, unsigned taken,
                                              bool last_more, bool may_hold)
{
    if (b->n == 0)
        return RKV_REPLY_NONE;
    if (taken > 0) {
        b->more = last_more;
        b->quiet = 0;
    } else {
        b->quiet++;
    }
    if (!may_hold || !b->more || b->n >= RKV_REPLY_BATCH)
        return RKV_REPLY_POST;
    if (b->quiet >= RKV_REPLY_HOLD_PASSES)
        return RKV_REPLY_EXPIRED;
    b->held = true;
    return RKV_REPLY_HOLD;
}

void rkv_reply_batch_posted(struct rkv_reply_batch *b)
{
    b->n = 0;
    b->quiet = 0;
    b->more = false;
    b->held = false;
}
