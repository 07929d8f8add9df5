/* fuzz_lookup.c — libFuzzer target: GET verification on hostile memory.
 *
 * A client reads whatever a (possibly buggy or malicious) server's region
 * holds. Here the index and heap of a well-formed region are filled with the
 * fuzzer's bytes and keys are looked up through common/lookup.c. The lookup
 * must never read outside the region or its scratch buffer, never return a
 * value longer than what it claims, and always terminate.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lookup.h"
#include "transport.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define BUCKETS   8u
#define HEAP_SIZE 4096u
#define REGION    (RKV_HEADER_SIZE + BUCKETS * 64u + HEAP_SIZE)

struct fake_remote {
    uint8_t *region;
};

static rkv_status fake_read(void *ctx, const struct rkv_read_op *ops, unsigned n)
{
    struct fake_remote *r = ctx;
    for (unsigned i = 0; i < n; i++) {
        if (ops[i].offset > REGION || ops[i].len > REGION - ops[i].offset)
            abort(); /* the lookup asked for bytes outside the region */
        memcpy(ops[i].dst, r->region + ops[i].offset, ops[i].len);
    }
    return RKV_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static uint8_t region[REGION] __attribute__((aligned(64)));
    static uint8_t scratch[2 * 64 * 4 + HEAP_SIZE] __attribute__((aligned(64)));
    struct rkv_read_op ops[64];
    struct rkv_region_header *h = (struct rkv_region_header *)(void *)region;

    memset(region, 0, sizeof region);
    *h = (struct rkv_region_header){
        .magic = RKV_REGION_MAGIC,
        .format_version = RKV_FORMAT_VERSION,
        .header_size = RKV_HEADER_SIZE,
        .generation = 1,
        .region_size = REGION,
        .index_offset = RKV_HEADER_SIZE,
        .index_base = BUCKETS,
        .index_capacity = BUCKETS,
        .heap_offset = RKV_HEADER_SIZE + BUCKETS * 64,
        .heap_size = HEAP_SIZE,
        .slab_page_size = 4096,
        .class_count = 7,
        .max_key_len = 64,
        .max_value_len = 1024,
        .hash_seed = 7,
        .clock = 100,
        /* 32: a shape may name more than the slot; 36, 52: items at either
         * parity (layout.h: where the state word and checksum sit) */
        .class_size = { 32, 36, 52, 64, 256, 1024, 4096 },
    };
    if (!rkv_header_valid(h, REGION))
        abort();
    size_t n = size < BUCKETS * 64 + HEAP_SIZE ? size : BUCKETS * 64 + HEAP_SIZE;
    memcpy(region + RKV_HEADER_SIZE, data, n);

    struct fake_remote fr = { .region = region };
    struct rkv_lookup_ctx ctx = {
        .geom = h,
        .read = fake_read,
        .read_ctx = &fr,
        .scratch = scratch,
        .scratch_len = sizeof scratch,
        .ops = ops,
        .ops_cap = 64,
        .max_retries = 4,
        .now = 100,
    };
    /* keys: a few fixed ones and the first bytes of the input */
    char out[3][64];
    struct rkv_lookup ls[3] = {
        { .key = "a", .key_len = 1, .buf = out[0], .buf_len = sizeof out[0] },
        { .key = data,
          .key_len = size ? (uint32_t)(size < 16 ? size : 16) : 1,
          .buf = out[1],
          .buf_len = sizeof out[1] },
        { .key = "key",
          .key_len = 3,
          .buf = out[2],
          .buf_len = sizeof out[2],
          .cached_slot = size >= 8 ? *(const uint64_t *)(const void *)data : 0 },
    };
    if (size == 0)
        ls[1].key = "z";
    if (rkv_lookup_batch(&ctx, ls, 3) != RKV_OK)
        abort();
    for (unsigned i = 0; i < 3; i++)
        if (ls[i].status == RKV_OK && ls[i].value_len > ls[i].buf_len)
            abort();
    return 0;
}
