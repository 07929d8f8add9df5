/* fuzz_config.c — libFuzzer target for the rkv-server config file parser.
 *
 * Feeds arbitrary bytes to rkv_server_config_parse() (the same code path as
 * --config FILE: inih driven by config.c's line reader and key table) and,
 * when the bytes were accepted, checks that the result keeps the promises
 * config.h makes: every field inside its documented range, every string
 * terminated, the listen list non-empty. A broken promise aborts, which
 * libFuzzer reports as a crash together with the input.
 *
 * Build: CC=clang meson setup build-fuzz -Dfuzz=true && ninja -C build-fuzz
 * Run:   ./build-fuzz/tests/fuzz_config tests/fuzz/corpus/config -max_len=4096
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "layout.h"
#include "log.h"
#include "protocol.h"
#include "table.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok)
{
    if (!ok)
        abort();
}

static int terminated(const char *s, size_t cap)
{
    return memchr(s, '\0', cap) != NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct rkv_server_config c;
    rkv_server_config_defaults(&c);
    int rc = rkv_server_config_parse(&c, (const char *)data, size, "fuzz", NULL);
    check(rc == RKV_CONFIG_OK || rc == RKV_CONFIG_BAD);
    if (rc != RKV_CONFIG_OK)
        return 0;
    check(c.listen_count >= 1 && c.listen_count <= RKV_CONFIG_MAX_LISTEN);
    for (unsigned i = 0; i < c.listen_count; i++) {
        check(terminated(c.listen[i].uri, sizeof c.listen[i].uri));
        check(strncmp(c.listen[i].uri, "rdma://", 7) == 0 ||
              strncmp(c.listen[i].uri, "shm:///", 7) == 0 ||
              strncmp(c.listen[i].uri, "tcp://", 6) == 0);
    }
    check(c.memory >= RKV_CONFIG_MIN_MEMORY && c.memory >= 4ull * c.slab_page_size);
    check(c.workers >= 1 && c.workers <= RKV_CONFIG_MAX_WORKERS);
    check(c.cpu_count <= RKV_CONFIG_MAX_CPUS);
    for (unsigned i = 0; i < c.cpu_count; i++)
        check(c.cpus[i] >= 0 && c.cpus[i] < 1024);
    check(c.log_level >= RKV_LOG_ERROR && c.log_level <= RKV_LOG_DEBUG);
    check(terminated(c.log_file, sizeof c.log_file));
    check(c.slab_page_size >= (64u << 10) && c.slab_page_size <= (16u << 20) &&
          (c.slab_page_size & (c.slab_page_size - 1)) == 0);
    check(c.max_value_len >= 1 &&
          c.max_value_len <= c.slab_page_size - RKV_ITEM_HEADER_MAX - RKV_MAX_KEY_LEN);
    check(c.grace_ms <= 60000);
    check(c.evict == RKV_EVICT_NONE || c.evict == RKV_EVICT_LRU || c.evict == RKV_EVICT_RANDOM ||
          c.evict == RKV_EVICT_S3FIFO);
    check(c.credits >= 1 && c.credits <= 4096);
    check(c.max_msg >= RKV_MIN_MSG && c.max_msg <= RKV_MAX_MSG);
    check(c.max_conns >= 1 && c.max_conns <= 65536);
    check(terminated(c.rdma_device, sizeof c.rdma_device));
    check(c.gid_index >= -1 && c.gid_index <= 65535);
    check(c.max_inline <= 1024 && c.max_inline <= c.max_msg);
    check(c.signal_interval >= 1 && c.signal_interval <= 1024);
    check(c.cq_size == 0 || c.cq_size >= 2 * c.credits);
    check(terminated(c.auth_secret, sizeof c.auth_secret) && strlen(c.auth_secret) <= RKV_MAX_SECRET);
    check(terminated(c.stats_listen, sizeof c.stats_listen));
    return 0;
}
