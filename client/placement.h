/* placement.h — which of a handle's servers owns a key.
 *
 * Two policies behind one call, rkv_placement_pick():
 *
 *   jump    Lamping & Veach's jump consistent hash of the key's XXH3-64
 *           (shard.c): rkv's own, no state, the default.
 *   ketama  the MD5 continuum libmemcached and twemproxy build
 *           (placement_ketama.c), so librkv finds a key on the server a
 *           memcached client or twemproxy (distribution: ketama, hash: md5)
 *           wrote it to. Each server is placed by its name and weight.
 *
 * The policy comes from rkv_options.placement or from the URI list: each
 * URI may end in "?KEY=VALUE&..." with
 *
 *   placement=jump|ketama   the list's policy (URIs that say must agree)
 *   name=NAME               ketama: the server's name, verbatim (what a
 *                           twemproxy "HOST:PORT:WEIGHT NAME" line names it)
 *   tcp=HOST:PORT           ketama: the server's memcached address as the
 *                           memcached clients list it; the name is derived as
 *                           they derive it: "HOST:PORT", "HOST" alone when
 *                           PORT is 11211
 *   weight=N                ketama: its share, 1..65535 (default 1)
 *
 * Without name= or tcp= a server is named from its URI's address the way
 * tcp= derives a name. rkv_placement_add() reads and strips the parameters.
 */
#ifndef RKV_PLACEMENT_H
#define RKV_PLACEMENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rkv.h"

#define RKV_PLACEMENT_NAME_MAX   255 /* bytes of a ketama server name */
#define RKV_PLACEMENT_WEIGHT_MAX 65535u
#define RKV_KETAMA_POINTS        160 /* continuum points per server at an even share */

/* One server as the URI list describes it. */
struct rkv_placement_server {
    char name[RKV_PLACEMENT_NAME_MAX + 1]; /* its name on the ketama continuum */
    uint32_t weight;                       /* its ketama share; 1 unless weight= */
    bool ketama_params;                    /* name=, tcp= or weight= was given */
};

/* A point of the continuum: hash value → server index. */
struct rkv_ketama_point {
    uint32_t value;
    uint32_t server;
};

struct rkv_placer {         /* a handle's servers and the policy that maps keys onto them */
    rkv_placement kind;     /* asked for; JUMP or KETAMA once built */
    rkv_placement uri_kind; /* what the URIs said (DEFAULT: nothing) */
    unsigned nservers;
    struct rkv_placement_server *servers; /* nservers of them */
    struct rkv_ketama_point *points;      /* KETAMA: sorted by value, then server */
    uint32_t npoints;
};

/* Start an empty placement of policy `kind` (rkv_options.placement).
 * Returns: RKV_OK, RKV_INVALID (not an rkv_placement; err says so). */
rkv_status rkv_placement_init(struct rkv_placer *p, rkv_placement kind, char *err, size_t err_len);

/* Add the next server: read the "?..." parameters of `uri` and cut them off
 * it in place (the transport sees only "scheme://address").
 * Returns: RKV_OK, RKV_INVALID (a malformed or conflicting parameter),
 * RKV_NO_MEMORY; err says which and what to do. */
rkv_status rkv_placement_add(struct rkv_placer *p, char *uri, char *err, size_t err_len);

/* Settle the policy after the last server and build the ketama continuum.
 * Returns: RKV_OK, RKV_INVALID (ketama parameters under jump, two servers
 * with one name), RKV_NO_MEMORY; err says which. */
rkv_status rkv_placement_build(struct rkv_placer *p, char *err, size_t err_len);

/* The index (0..nservers-1) of the server that owns a key; key_hash is its
 * rkv_shard_hash() (jump uses it, ketama hashes the key bytes with MD5).
 * Allocation-free. */
unsigned rkv_placement_pick(const struct rkv_placer *p, const void *key, size_t key_len,
                            uint64_t key_hash);

void rkv_placement_free(struct rkv_placer *p);

/* ---- ketama (placement_ketama.c) */

/* Word `alignment` (0..3) of the key's MD5 digest, little-endian: ketama's
 * hash of a continuum point (and, at alignment 0, twemproxy's `hash: md5`). */
uint32_t rkv_ketama_hash(const void *key, size_t key_len, unsigned alignment);

/* Continuum points of a server of `weight` among `nservers` whose weights
 * sum to total_weight: RKV_KETAMA_POINTS scaled by its share, a multiple
 * of 4. */
uint32_t rkv_ketama_points(uint32_t weight, uint32_t total_weight, unsigned nservers);

/* Build the continuum of servers[0..n-1] into *points (malloc'd, sorted).
 * Returns: RKV_OK, RKV_NO_MEMORY. */
rkv_status rkv_ketama_build(const struct rkv_placement_server *servers, unsigned n,
                            struct rkv_ketama_point **points, uint32_t *npoints);

/* The server of the first point at or after hash, wrapping to the first. */
uint32_t rkv_ketama_find(const struct rkv_ketama_point *points, uint32_t npoints, uint32_t hash);

#endif
