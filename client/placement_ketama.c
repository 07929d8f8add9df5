/* placement_ketama.c — the ketama continuum, as libmemcached and twemproxy
 * build it (see placement.h).
 *
 * Each server gets RKV_KETAMA_POINTS points on a 32-bit circle, scaled by
 * its share of the total weight and rounded down to a multiple of 4: point
 * group i of server NAME is the MD5 digest of "NAME-i", read as four
 * little-endian 32-bit words. A key belongs to the server of the first
 * point at or after the key's hash (the first word of the key's MD5),
 * wrapping past the last point to the first. The share is computed in the
 * same float arithmetic as twemproxy's ketama_update(), so the point counts
 * agree to the last point. MD5 is libmd's.
 *
 * Points with equal values (astronomically rare) are ordered by server
 * index; twemproxy leaves their order to qsort.
 */
#include <math.h>
#include <md5.h>
#include <stdio.h>
#include <stdlib.h>

#include "placement.h"

uint32_t rkv_ketama_hash(const void *key, size_t key_len, unsigned alignment)
{
    uint8_t d[MD5_DIGEST_LENGTH];
    MD5_CTX ctx;
    MD5Init(&ctx);
    MD5Update(&ctx, key, key_len);
    MD5Final(d, &ctx);
    const uint8_t *w = d + 4 * alignment;
    return (uint32_t)w[0] | (uint32_t)w[1] << 8 | (uint32_t)w[2] << 16 | (uint32_t)w[3] << 24;
}

uint32_t rkv_ketama_points(uint32_t weight, uint32_t total_weight, unsigned nservers)
{
    /* float share, groups of 4 points, a double epsilon for a product that
     * lands a hair under a whole group: twemproxy's types, step by step */
    float share = (float)weight / (float)total_weight;
    float groups = share * RKV_KETAMA_POINTS / 4 * (float)nservers;
    return (uint32_t)(floorf((float)((double)groups + 0.0000000001)) * 4);
}

static int point_cmp(const void *a, const void *b)
{
    const struct rkv_ketama_point *x = a, *y = b;
    if (x->value != y->value)
        return x->value < y->value ? -1 : 1;
    return x->server < y->server ? -1 : x->server > y->server;
}

rkv_status rkv_ketama_build(const struct rkv_placement_server *servers, unsigned n,
                            struct rkv_ketama_point **points, uint32_t *npoints)
{
    uint32_t total = 0, want = 0, count = 0;
    for (unsigned i = 0; i < n; i++)
        total += servers[i].weight;
    for (unsigned i = 0; i < n; i++)
        want += rkv_ketama_points(servers[i].weight, total, n);
    struct rkv_ketama_point *pt = malloc((want ? want : 1) * sizeof *pt);
    if (pt == NULL)
        return RKV_NO_MEMORY;
    for (unsigned i = 0; i < n; i++) {
        uint32_t groups = rkv_ketama_points(servers[i].weight, total, n) / 4;
        for (uint32_t g = 0; g < groups; g++) {
            char label[RKV_PLACEMENT_NAME_MAX + 16];
            int len = snprintf(label, sizeof label, "%s-%u", servers[i].name, (unsigned)g);
            for (unsigned a = 0; a < 4; a++)
                pt[count++] = (struct rkv_ketama_point){
                    .value = rkv_ketama_hash(label, (size_t)len, a), .server = i
                };
        }
    }
    qsort(pt, count, sizeof *pt, point_cmp);
    *points = pt;
    *npoints = count;
    return RKV_OK;
}

uint32_t rkv_ketama_find(const struct rkv_ketama_point *points, uint32_t npoints, uint32_t hash)
{
    uint32_t lo = 0, hi = npoints;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (points[mid].value < hash)
            lo = mid + 1;
        else
            hi = mid;
    }
    return points[lo == npoints ? 0 : lo].server;
}
