/* fuzz_state.c — libFuzzer target for the state file's header parser.
 *
 * A state file (--state-file) is read at start from disk, where anything may
 * have happened to it. Feeds arbitrary bytes to rkv_state_decode() and, when
 * they were accepted, checks the promises state_file.h makes: the header
 * encodes back to exactly the bytes it came from (every byte accounted
 * for), its version string is terminated, and rkv_state_match() against a
 * server's fingerprint answers with a terminated message that names the
 * file whenever it refuses. A broken promise aborts.
 *
 * Build: CC=clang meson setup build-fuzz -Dfuzz=true && ninja -C build-fuzz
 * Run:   ./build-fuzz/tests/fuzz/fuzz_state tests/fuzz/corpus/state -max_len=8192
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../state_sample.h"
#include "layout.h"
#include "state_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok)
{
    if (!ok)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct rkv_state_header h;
    char err[1024];
    memset(err, 'x', sizeof err);
    err[sizeof err - 1] = '\0';
    if (!rkv_state_decode(data, size, &h, err, sizeof err)) {
        check(memchr(err, '\0', sizeof err) != NULL && err[0] != '\0');
        return 0;
    }
    uint8_t again[RKV_STATE_HEADER_SIZE];
    rkv_state_encode(&h, again);
    check(memcmp(again, data, RKV_STATE_HEADER_SIZE) == 0);
    check(memchr(h.rkv_version, '\0', sizeof h.rkv_version) != NULL);
    check(h.state_version == RKV_STATE_VERSION);

    struct rkv_state_header want = state_sample();
    memset(err, 'x', sizeof err - 1);
    if (!rkv_state_match(&h, &want, "/fuzz/rkv.state", err, sizeof err)) {
        check(memchr(err, '\0', sizeof err) != NULL);
        check(strstr(err, "--state-file /fuzz/rkv.state") != NULL);
    }
    return 0;
}
