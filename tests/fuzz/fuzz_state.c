/* fuzz_state.c — libFuzzer target for the state file's header parser.
 *
 * A state file (--state-file) is read at start from disk, where anything may
 * have happened to it. Feeds arbitrary bytes to rkv_state_decode() and, when
 * they were accepted, checks the promises state_file.h makes: the header
 * encodes back to exactly the bytes it came from (every byte accounted
 * for), its version string is terminated, and rkv_state_match() against a
 * server's fingerprint answers with a terminated message that names the
 * file whenever it refuses. The same bytes, cut at NULs into LISTEN_PID,
 * LISTEN_FDS and LISTEN_FDNAMES, go to the fd store's rkv_fdstore_parse():
 * it answers 0 or -1, a refusal with a message, and names only descriptors
 * it was handed. A broken promise aborts.
 *
 * Build: CC=clang meson setup build-fuzz -Dfuzz=true && ninja -C build-fuzz
 * Run:   ./build-fuzz/tests/fuzz/fuzz_state tests/fuzz/corpus/state -max_len=8192
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../state_sample.h"
#include "fd_store.h"
#include "layout.h"
#include "state_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok)
{
    if (!ok)
        abort();
}

/* The fd store's view of the bytes: three NUL-separated environment values. */
static void fuzz_fdstore_env(const uint8_t *data, size_t size)
{
    char env[3][256];
    const char *val[3] = { NULL, NULL, NULL };
    size_t at = 0;
    for (unsigned i = 0; i < 3 && at < size; i++) {
        size_t n = 0;
        while (at < size && data[at] != '\0' && n < sizeof env[i] - 1)
            env[i][n++] = (char)data[at++];
        env[i][n] = '\0';
        val[i] = env[i];
        at++;
    }
    struct rkv_fdstore_fds f;
    char err[256];
    memset(err, 'x', sizeof err);
    err[sizeof err - 1] = '\0';
    int rc = rkv_fdstore_parse(val[0], val[1], val[2], 4242, &f, err, sizeof err);
    check(rc == 0 || rc == -1);
    if (rc == -1) {
        check(memchr(err, '\0', sizeof err) != NULL && err[0] != 'x');
        return;
    }
    check(f.count <= RKV_FDSTORE_MAX_FDS);
    check(f.region == -1 ||
          (f.region >= RKV_FDSTORE_FIRST_FD && f.region < RKV_FDSTORE_FIRST_FD + (int)f.count));
    check(f.state == -1 ||
          (f.state >= RKV_FDSTORE_FIRST_FD && f.state < RKV_FDSTORE_FIRST_FD + (int)f.count));
    check(f.region == -1 || f.region != f.state);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct rkv_state_header h;
    fuzz_fdstore_env(data, size);
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
