/* fuzz_placement.c — libFuzzer target for librkv's placement: the URI
 * parameters ("?placement=ketama&name=...&tcp=...&weight=N") and the ketama
 * continuum built from them (client/placement.c, placement_ketama.c,
 * compiled here so they are instrumented).
 *
 * The input is a URI list split at commas, as rkv_connect splits it (each
 * URI cut at 255 bytes, its buffer's size). Whatever is accepted must keep
 * placement.h's promises: the parameters cut off each URI, names
 * terminated and at most RKV_PLACEMENT_NAME_MAX bytes, weights in
 * 1..RKV_PLACEMENT_WEIGHT_MAX, a continuum sorted and no larger than 160
 * points a server, and every key placed on a server that exists. A broken
 * promise aborts, which libFuzzer reports with the input.
 *
 * Build: CC=clang meson setup build-fuzz -Dfuzz=true && ninja -C build-fuzz
 * Run:   ./build-fuzz/tests/fuzz/fuzz_placement tests/fuzz/corpus/placement
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "placement.h"
#include "shard.h"

#define MAX_URIS 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok)
{
    if (!ok)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512], uri[256];
    struct rkv_placer p;
    /* the first byte picks rkv_options.placement, out-of-range values too */
    rkv_placement kind = size ? (rkv_placement)(data[0] % 4) : RKV_PLACEMENT_DEFAULT;
    rkv_status st = rkv_placement_init(&p, kind, err, sizeof err);
    size_t pos = size ? 1 : 0;
    unsigned n = 0;
    while (st == RKV_OK && pos < size && n < MAX_URIS) {
        const uint8_t *comma = memchr(data + pos, ',', size - pos);
        size_t len = comma ? (size_t)(comma - (data + pos)) : size - pos;
        size_t take = len < sizeof uri ? len : sizeof uri - 1;
        memcpy(uri, data + pos, take);
        uri[take] = '\0';
        st = rkv_placement_add(&p, uri, err, sizeof err);
        check(st != RKV_OK || strchr(uri, '?') == NULL);
        n++;
        pos += len + 1;
    }
    if (st == RKV_OK && n > 0)
        st = rkv_placement_build(&p, err, sizeof err);
    if (st == RKV_OK && n > 0) {
        check(p.kind == RKV_PLACEMENT_JUMP || p.kind == RKV_PLACEMENT_KETAMA);
        check(p.nservers == n);
        for (unsigned i = 0; i < n; i++) {
            check(strlen(p.servers[i].name) <= RKV_PLACEMENT_NAME_MAX);
            check(p.servers[i].weight >= 1 && p.servers[i].weight <= RKV_PLACEMENT_WEIGHT_MAX);
        }
        if (p.kind == RKV_PLACEMENT_KETAMA) {
            check(p.npoints <= (uint64_t)n * RKV_KETAMA_POINTS + 4 * n);
            for (uint32_t i = 0; i < p.npoints; i++) {
                check(p.points[i].server < n);
                check(i == 0 || p.points[i - 1].value <= p.points[i].value);
            }
        }
        check(rkv_placement_pick(&p, data, size, rkv_shard_hash(data, size)) < n);
    }
    check(st == RKV_OK || st == RKV_INVALID || st == RKV_NO_MEMORY);
    check(st == RKV_OK || err[0] != '\0');
    rkv_placement_free(&p);
    return 0;
}
