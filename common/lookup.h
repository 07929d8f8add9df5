/* lookup.h — the GET algorithm, written once against "read these bytes".
 *
 * A lookup never trusts what it reads: the region may be changing under the
 * read (RDMA READ or shm memcpy races the server's writes). Per key:
 *
 *   cached location?  ── 1 READ of the item ── verified → hit
 *        │      └─ our key, superseded, with a forward → 1 READ of the
 *        │         replacement (at most RKV_LOOKUP_MAX_FORWARDS hops), verified → hit
 *        │ (stale, deleted, other key, torn, too many hops)
 *        ▼
 *   READ the candidate buckets → slots with our fingerprint
 *   READ those items → verify checksum, key, obsolete, expiry
 *   nothing matched → re-READ both buckets; a miss is reported only when both
 *   bucket versions are even and unchanged since each was read (no
 *   concurrent move), else retry.
 *
 * A bucket whose version carries another level than the reader's geometry
 * expects (index_geom.h: the index grew since the reader learned its
 * geometry) is never trusted: at the end of the round the lookup re-reads the
 * header's geometry word (one 8-byte READ) and the key hashes again.
 *
 * The transport's cost model (rkv_lookup_ctx.cost) decides how the buckets
 * are read; the algorithm is the same. When round trips cost and a second
 * READ in a doorbell is nearly free (an RDMA NIC), both candidate buckets go
 * in one round trip. When each read costs about a round trip (shm, where a
 * read is a memcpy; Soft-RoCE, which serves READs one by one), the first
 * bucket is read alone and the second only when the first held no match:
 * the server fills a key's first bucket first, so most keys live there and a
 * cold GET reads one bucket and the item.
 *
 * A verified value is copied to the caller's buffer before the next round
 * reuses the scratch memory. Torn or obsolete reads retry, at most
 * max_retries times per key, and are counted. Many keys run in lockstep so a
 * batch costs the same round trips as one key. The hot path allocates nothing.
 */
#ifndef RKV_LOOKUP_H
#define RKV_LOOKUP_H

#include <stddef.h>
#include <stdint.h>

#include "hash.h"
#include "layout.h"
#include "rkv.h"
#include "transport.h"

/* Read ops[0..n-1] in one round trip; RKV_OK or a transport error. */
typedef rkv_status (*rkv_read_fn)(void *ctx, const struct rkv_read_op *ops, unsigned n);

#define RKV_LOOKUP_MAX_CAND     (2 * RKV_SLOTS_PER_BUCKET)
#define RKV_LOOKUP_MAX_FORWARDS 2 /* forward hops from a cached location before the buckets */

struct rkv_lookup_ctx {
    const struct rkv_region_header *geom; /* validated with rkv_header_valid() */
    rkv_read_fn read;
    void *read_ctx;
    /* optional: start loading what a read of [offset, offset+len) will
     * read (read_ctx is its ctx); called where a read's source is known
     * before its round is planned (a cached location) */
    void (*prefetch)(void *ctx, uint64_t offset, uint32_t len);
    uint8_t *scratch;        /* where reads land (the transport's local buffer) */
    size_t scratch_len;      /* >= rkv_lookup_scratch_need(geom, 1) */
    struct rkv_read_op *ops; /* room for ops_cap read ops */
    unsigned ops_cap;        /* >= RKV_LOOKUP_MAX_CAND */
    unsigned max_retries;    /* per key */
    uint32_t now;            /* server clock for expiry (common/clock.h); 0 = ignore expiry */
    enum rkv_read_cost cost; /* the transport's cost model (transport.h; 0: round trips cost) */
    uint64_t index_word;     /* the index geometry word learned since geom was copied (0:
                                * none; the larger of it and geom's is used): the lookup's */
    bool stale;              /* lookup-private: a bucket of this round was at another level */
    uint64_t geom_reads;     /* out: header geometry re-reads (the index grew), accumulated */
    uint64_t retries;        /* out: verification retries, accumulated */
    uint64_t forwards;       /* out: forward hops followed, accumulated */
};

/* One key of a lookup batch. Fields after `status` are the lookup's own. */
struct rkv_lookup {
    const void *key;      /* in */
    uint32_t key_len;     /* in */
    uint64_t cached_slot; /* in: a location to try first, or 0; its fingerprint
                             bits need not be the key's (a cache's tag): the
                             key's own are used where they are 0 */
    void *buf;            /* in: where the value goes (may be NULL if buf_len 0) */
    size_t buf_len;       /* in */
    rkv_status status;    /* out: OK, NOT_FOUND, BUFFER_TOO_SMALL, RETRY_EXHAUSTED;
                             * INVALID / TOO_LARGE for a bad key or buf */
    size_t value_len;     /* out: value length (also on BUFFER_TOO_SMALL) */
    uint64_t version;     /* out: item version (CAS token) */
    uint32_t user_flags;  /* out */
    uint32_t expire_at;   /* out: server clock second, 0 = never */
    uint64_t state;       /* out: the item's state word as read (layout.h: its meta flags;
                             a hint, outside the checksum) */
    uint64_t slot;        /* out: slot word it was found through (caches, hints);
                             through cached_slot (or a forward from it) with
                             cached_slot's fingerprint bits, never 0 */
    int cache_used;       /* out: 1 when served through cached_slot (and forwards) */

    /* lookup-private state */
    uint8_t phase;
    uint8_t ncand, next_cand;
    uint8_t bucket_next; /* next candidate bucket to read (0, 1; 2 = both read) */
    uint8_t hops;        /* forwards followed from cached_slot */
    uint64_t at_slot;    /* the location PHASE_CACHE reads: cached_slot or a forward */
    uint32_t at_len;     /* its item's bytes (rkv_slot_valid, checked once) */
    unsigned tries;
    uint16_t fp;        /* the key's fingerprint; 0 until hashed (a GET
                           served through cached_slot never is) */
    uint64_t bucket[2]; /* the key's candidate buckets (once hashed) */
    uint64_t bucket_version[2];
    uint8_t bucket_level[2]; /* the level each should be at (index_geom.h) */
    uint64_t cand[RKV_LOOKUP_MAX_CAND];
    uint32_t cand_len[RKV_LOOKUP_MAX_CAND]; /* each candidate's item bytes (checked once) */
    uint8_t *land;                          /* this round's landing area in scratch */
    unsigned nread;                         /* reads this round */
};

/* A key's hash at the index geometry header h publishes now (h valid). */
void rkv_header_hash_key(const struct rkv_region_header *h, const void *key, size_t key_len,
                         struct rkv_key_hash *out);

/* Bytes of scratch a batch of n keys needs at least to make progress. */
size_t rkv_lookup_scratch_need(const struct rkv_region_header *geom, unsigned n);

/* Keys whose buckets ctx's scratch holds at once, beside the largest item:
 * the batch size one rkv_lookup_batch() round serves whole (>= 1 when
 * scratch_len >= rkv_lookup_scratch_need(geom, 1)). */
unsigned rkv_lookup_batch_fit(const struct rkv_lookup_ctx *ctx);

/* The step-wise form a pipelined client drives (client/client.c): start a
 * key once, then run rounds over whichever keys are pending, adding new ones
 * between rounds. rkv_lookup_start() hashes and checks the key (a bad key or
 * buffer is done at once, with RKV_INVALID / RKV_TOO_LARGE); the key's
 * cached_slot, buf and buf_len must be set before. */
void rkv_lookup_start(const struct rkv_lookup_ctx *ctx, struct rkv_lookup *l);

/* Whether l has its final status (it needs no more rounds). */
static inline bool rkv_lookup_done(const struct rkv_lookup *l)
{
    return l->status != RKV_INTERNAL;
}

/* One round trip for the keys of ls[0..n-1] that are not done: plan the
 * reads each needs (those that do not fit the scratch wait for the next
 * round), read them all at once, advance each key on what came back. At
 * least one key must be pending. Returns RKV_OK, or the transport's error
 * (the keys then stay as they were; the caller gives up on them), or
 * RKV_INTERNAL when the scratch holds no key's reads. */
rkv_status rkv_lookup_round(struct rkv_lookup_ctx *ctx, struct rkv_lookup *const *ls, unsigned n);

/* Look up ls[0..n-1], RKV_LOOKUP_BATCH_CHUNK keys in lockstep at a time.
 * Returns RKV_OK when every key has a status, or the transport error that
 * stopped the batch. */
#define RKV_LOOKUP_BATCH_CHUNK 64
rkv_status rkv_lookup_batch(struct rkv_lookup_ctx *ctx, struct rkv_lookup *ls, unsigned n);

/* What a copy of an item read for `key` (len = bytes read) turned out to be. */
enum rkv_verify {
    RKV_VERIFY_OK,
    RKV_VERIFY_OTHER_KEY,
    RKV_VERIFY_EXPIRED,
    RKV_VERIFY_OBSOLETE,
    RKV_VERIFY_TORN
};
enum rkv_verify rkv_item_verify(const struct rkv_item *it, size_t len, const void *key,
                                uint32_t key_len, uint64_t seed, uint32_t now);

/* Whether a slot word points at a plausible item of this region; on success
 * *offset and *len give the range to read. */
bool rkv_slot_valid(const struct rkv_region_header *geom, uint64_t slot, uint64_t *offset,
                    uint32_t *len);

#endif
