/* fuzz_trace.c — libFuzzer target for rkv-bench's --trace parser.
 *
 * Feeds arbitrary bytes to trace_load_buffer() (the same line parser as
 * --trace FILE) and checks the promises trace.h makes: a refused input
 * leaves nothing allocated and a message "fuzz:LINE: ..." or an empty-trace
 * message; an accepted one has every record's operation known, a key size
 * of at least 1, its anonymized key printable inside the arena, per-op
 * counts that add up, and trace_key() deterministic within the key size.
 * A broken promise aborts, which libFuzzer reports with the input.
 *
 * Build: CC=clang meson setup build-fuzz -Dfuzz=true && ninja -C build-fuzz
 * Run:   ./build-fuzz/tests/fuzz_trace tests/fuzz/corpus/trace -max_len=8192
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok)
{
    if (!ok)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct trace t;
    char err[512];
    if (trace_load_buffer(&t, "fuzz", (const char *)data, size, err, sizeof err) != 0) {
        check(t.recs == NULL && t.keys == NULL && t.count == 0);
        check(memchr(err, '\0', sizeof err) != NULL && strncmp(err, "fuzz", 4) == 0);
        return 0;
    }
    uint64_t sum = 0;
    check(t.count > 0);
    for (unsigned op = 0; op < TRACE_OP_COUNT; op++)
        sum += t.ops[op];
    check(sum == t.count);
    for (size_t i = 0; i < t.count; i++) {
        const struct trace_rec *r = &t.recs[i];
        check(r->op < TRACE_OP_COUNT && r->key_size >= 1 && r->key_len >= 1);
        check(r->key_off + r->key_len <= t.keys_len);
        for (uint32_t j = 0; j < r->key_len; j++)
            check(t.keys[r->key_off + j] > ' ' && t.keys[r->key_off + j] < 0x7f);
        if (trace_too_large(r, TRACE_VALUE_MAX))
            continue;
        char a[TRACE_KEY_MAX], b[TRACE_KEY_MAX];
        unsigned n = trace_key(&t, r, a);
        check(n == r->key_size && trace_key(&t, r, b) == n && memcmp(a, b, n) == 0);
    }
    trace_free(&t);
    return 0;
}
