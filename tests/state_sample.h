/* state_sample.h — a state file header as a server with the defaults and
 * --memory 64M writes it (server/state_file.h): the fingerprint the state
 * file tests and the fuzz target (tests/fuzz/fuzz_state.c) compare against,
 * with a stop's clock, time and versions filled in. */
#ifndef RKV_TEST_STATE_SAMPLE_H
#define RKV_TEST_STATE_SAMPLE_H

#include "layout.h"
#include "state_file.h"

static inline struct rkv_state_header state_sample(void)
{
    return (struct rkv_state_header){
        .state_version = RKV_STATE_VERSION,
        .format_version = RKV_FORMAT_VERSION,
        .rkv_version = "0.1.0",
        .region_size = 64ull << 20,
        .page_kind = 4096,
        .slab_page_size = 1u << 20,
        .growth_millis = 1250,
        .max_key_len = 250,
        .max_value_len = 1048286,
        .class_count = 101,
        .bucket_count = 131072,
        .heap_offset = 8392704,
        .heap_size = 55ull << 20,
        .clock = 12345,
        .stop_realtime_ns = 1764750000123456789ull,
        .max_version = 0x123456789abcdefull,
        .region_header_sum = 0xfeedfacecafebeefull,
    };
}

#endif
