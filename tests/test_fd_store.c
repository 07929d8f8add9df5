/* test_fd_store.c — the region kept in systemd's file-descriptor store.
 *
 * The test plays the service manager: it owns the NOTIFY_SOCKET datagram
 * socket a real rkv-server talks to, keeps what the server stores there
 * (FDSTORE=1 with the descriptor in SCM_RIGHTS, FDSTOREREMOVE=1) and hands
 * it to the next server as systemd does (descriptors from 3, LISTEN_PID,
 * LISTEN_FDS, LISTEN_FDNAMES):
 *
 *   - after SIGKILL every stored item comes back with its value, the log
 *     says the server before did not stop cleanly, and a new write gets a
 *     larger version than any before; the stored region cannot be written
 *     through the stored descriptor (tests/region_attack.c's routes);
 *   - after a clean stop the record says so and every item comes back;
 *   - a byte flipped in one item's value loses that item only (a miss,
 *     counted as a checksum drop), the rest are kept;
 *   - a byte flipped in the region header, a record of another --memory, a
 *     damaged record, a region of the wrong size, one not sealed, a file
 *     that is no memfd: each refused, exit 2, one error line with the
 *     reason.
 *
 * Every wait is for a message or an answer (60 s safety bounds), never for
 * time.
 *
 * Usage: test_fd_store PATH/TO/rkv-server
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "fd_store.h"
#include "layout.h"
#include "region_attack.h"
#include "rkv.h"
#include "server_proc.h"
#include "state_file.h"

#define NKEYS 400

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif
#define SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL)

static const char *server_bin;
static unsigned uri_seq = 10;

/* The service manager's side (server_proc.h), the log and the address. */
struct manager {
    struct fake_fdstore fs;
    int region, state; /* aliases of fs's, refreshed by manager_until */
    char log[64];      /* the servers' --log-file */
    char uri[256];
};

static void manager_open(struct manager *m)
{
    char name[108];
    snprintf(name, sizeof name, "@rkv-test-fdstore-%d-%u", (int)getpid(), uri_seq);
    assert_int_equal(fake_fdstore_open(&m->fs, name), 0);
    m->region = m->state = -1;
    snprintf(m->log, sizeof m->log, "/tmp/rkv-test-fdstore-%d-%u.log", (int)getpid(), uri_seq);
    unlink(m->log);
    test_uri(m->uri, sizeof m->uri, uri_seq++);
}

static void manager_close(struct manager *m)
{
    fake_fdstore_close(&m->fs);
    unlink(m->log);
}

/* Take messages, keeping what they store, until one contains `until`. */
static void manager_until(struct manager *m, const char *until)
{
    assert_int_equal(fake_fdstore_until(&m->fs, until, 60000), 0);
    m->region = m->fs.region;
    m->state = m->fs.state;
}

static const char *const args_32m[] = { "--memory",   "32M", "--log-level", "info",
                                        "--log-file", NULL,  NULL };

static void server_args(const struct manager *m, const char *args[7])
{
    memcpy(args, args_32m, sizeof args_32m);
    args[5] = m->log;
}

/* A server, first start: up and READY=1 with both descriptors stored. */
static void first_start(struct manager *m, struct server_proc *sp)
{
    const char *args[7];
    server_args(m, args);
    assert_int_equal(server_start(sp, server_bin, m->uri, args), 0);
    manager_until(m, "READY=1");
    assert_true(m->region >= 0 && m->state >= 0);
}

/* The next start on the store's descriptors (region, state: override them
 * when >= 0). */
static void restart_on(struct manager *m, struct server_proc *sp, int region, int state)
{
    const char *args[7];
    server_args(m, args);
    int fds[2] = { region >= 0 ? region : m->region, state >= 0 ? state : m->state };
    assert_int_equal(server_start_fds(sp, server_bin, m->uri, args, fds, 2,
                                      RKV_FDSTORE_REGION ":" RKV_FDSTORE_STATE),
                     0);
    manager_until(m, "READY=1");
}

static void key_of(char *k, size_t len, unsigned i)
{
    snprintf(k, len, "fdkey:%u", i);
}

static size_t value_of(char *v, size_t cap, unsigned i)
{
    int n = snprintf(v, cap, "val:%05u:", i);
    size_t len = (size_t)n + 40 + i % 200;
    for (size_t j = (size_t)n; j < len; j++)
        v[j] = (char)('a' + (i + j) % 26);
    return len;
}

/* NKEYS items; the largest version they got. */
static uint64_t store_all(const char *uri)
{
    rkv_client *c = connect_retry(uri, NULL, 60000);
    assert_non_null(c);
    uint64_t max = 0;
    for (unsigned i = 0; i < NKEYS; i++) {
        char k[32], v[512];
        uint64_t ver = 0;
        key_of(k, sizeof k, i);
        size_t n = value_of(v, sizeof v, i);
        assert_int_equal(rkv_put(c, k, strlen(k), v, n, NULL, &ver), RKV_OK);
        max = ver > max ? ver : max;
    }
    rkv_close(c);
    return max;
}

/* Every item back as stored but `lost` (or -1); a new write's version above `max`. */
static void check_all(const char *uri, int lost, uint64_t max)
{
    rkv_client *c = connect_retry(uri, NULL, 60000);
    assert_non_null(c);
    for (unsigned i = 0; i < NKEYS; i++) {
        char k[32], v[512], got[512];
        size_t n, gl = 0;
        key_of(k, sizeof k, i);
        n = value_of(v, sizeof v, i);
        rkv_status st = rkv_get(c, k, strlen(k), got, sizeof got, &gl, NULL);
        if ((int)i == lost) {
            assert_int_equal(st, RKV_NOT_FOUND);
            continue;
        }
        if (st != RKV_OK || gl != n || memcmp(got, v, n) != 0)
            fail_msg("key %s: status %d, %zu bytes (want %zu)", k, st, gl, n);
    }
    uint64_t ver = 0;
    assert_int_equal(rkv_put(c, "after", 5, "x", 1, NULL, &ver), RKV_OK);
    assert_true(ver > max);
    rkv_close(c);
}

static char *read_all(const char *path)
{
    static char buf[1 << 16];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    buf[n > 0 ? n : 0] = '\0';
    return buf;
}

/* A copy of the region in fd as a new sealed memfd, byte `flip` inverted. */
static int forged_region(int fd, size_t flip)
{
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    size_t size = (size_t)st.st_size;
    const uint8_t *src = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    assert_true(src != MAP_FAILED);
    int out = memfd_create("forged", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    assert_true(out >= 0);
    assert_int_equal(ftruncate(out, (off_t)size), 0);
    uint8_t *dst = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, out, 0);
    assert_true(dst != MAP_FAILED);
    memcpy(dst, src, size);
    dst[flip] ^= 0xff;
    munmap(dst, size);
    munmap((void *)src, size);
    assert_int_equal(fcntl(out, F_ADD_SEALS, SEALS), 0);
    return out;
}

/* Where item i's value starts in the region of fd. */
static size_t value_offset(int fd, unsigned i)
{
    struct stat st;
    char tag[16];
    assert_int_equal(fstat(fd, &st), 0);
    const char *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    assert_true(p != MAP_FAILED);
    snprintf(tag, sizeof tag, "val:%05u:", i);
    const char *at = memmem(p, (size_t)st.st_size, tag, strlen(tag));
    assert_non_null(at);
    size_t off = (size_t)(at - p);
    munmap((void *)p, (size_t)st.st_size);
    return off;
}

/* Run a server on fds to its exit: its status, its output in out. */
static int run_to_exit(const struct manager *m, const char *memory, int region, int state,
                       char *out, size_t cap)
{
    char path[] = "/tmp/rkv-test-fdstore-out-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *argv[] = { server_bin, "--listen",    m->uri, "--memory",
                           memory,     "--log-level", "info", NULL };
    int fds[2] = { region, state };
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fd, STDERR_FILENO);
        dup2(fd, STDOUT_FILENO);
        unsetenv("NOTIFY_SOCKET");
        server_proc_hand_fds(fds, 2, RKV_FDSTORE_REGION ":" RKV_FDSTORE_STATE);
        execv(server_bin, (char *const *)argv);
        _exit(127);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    ssize_t r = pread(fd, out, cap - 1, 0);
    out[r > 0 ? r : 0] = '\0';
    close(fd);
    unlink(path);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* Exit 2 with exactly one error line, containing `why`. */
static void assert_refused(const struct manager *m, const char *memory, int region, int state,
                           const char *why)
{
    char out[8192];
    int rc = run_to_exit(m, memory, region, state, out, sizeof out);
    unsigned errors = 0;
    for (const char *p = out; (p = strstr(p, " error ")) != NULL; p++)
        errors++;
    if (rc != 2 || errors != 1 || strstr(out, why) == NULL)
        fail_msg("want exit 2 and one error naming \"%s\"; exit %d, output:\n%s", why, rc, out);
}

static void test_crash_keeps_the_cache(void **state)
{
    (void)state;
    struct manager m;
    struct server_proc sp;
    manager_open(&m);
    first_start(&m, &sp);
    uint64_t max = store_all(m.uri);
    server_kill(&sp);
    struct stat st;
    assert_int_equal(fstat(m.region, &st), 0);
    /* the copy systemd holds is as read-only as a client's */
    assert_int_equal(region_write_attempts(m.region, (size_t)st.st_size, NULL), 0);
    struct rkv_state_header rec;
    char err[256];
    assert_int_equal(rkv_fdstore_read_state(m.state, &rec, err, sizeof err), 0);
    assert_true(rec.running_mono_ns != 0);
    restart_on(&m, &sp, -1, -1);
    check_all(m.uri, -1, max);
    const char *log = read_all(m.log);
    assert_non_null(strstr(log, "did not stop cleanly"));
    assert_non_null(strstr(log, "after a crash (no clean stop): kept 400 items"));
    /* and again, from the second server's store */
    server_kill(&sp);
    restart_on(&m, &sp, -1, -1);
    check_all(m.uri, -1, max);
    assert_int_equal(server_stop(&sp), 0);
    manager_close(&m);
}

static void test_clean_stop_keeps_the_cache(void **state)
{
    (void)state;
    struct manager m;
    struct server_proc sp;
    manager_open(&m);
    first_start(&m, &sp);
    uint64_t max = store_all(m.uri);
    assert_int_equal(server_stop(&sp), 0);
    struct rkv_state_header rec;
    char err[256];
    assert_int_equal(rkv_fdstore_read_state(m.state, &rec, err, sizeof err), 0);
    assert_int_equal(rec.running_mono_ns, 0);
    assert_true(rec.max_version >= max);
    restart_on(&m, &sp, -1, -1);
    check_all(m.uri, -1, max);
    assert_non_null(strstr(read_all(m.log), "after a clean stop: kept 400 items"));
    assert_int_equal(server_stop(&sp), 0);
    manager_close(&m);
}

static void test_damaged_item_dropped(void **state)
{
    (void)state;
    struct manager m;
    struct server_proc sp;
    manager_open(&m);
    first_start(&m, &sp);
    uint64_t max = store_all(m.uri);
    server_kill(&sp);
    int forged = forged_region(m.region, value_offset(m.region, 7) + 12);
    restart_on(&m, &sp, forged, -1);
    close(forged);
    check_all(m.uri, 7, max);
    const char *log = read_all(m.log);
    assert_non_null(strstr(log, "kept 399 items"));
    assert_non_null(strstr(log, "checksum 1"));
    assert_int_equal(server_stop(&sp), 0);
    manager_close(&m);
}

static void test_damage_refused(void **state)
{
    (void)state;
    struct manager m;
    struct server_proc sp;
    manager_open(&m);
    first_start(&m, &sp);
    store_all(m.uri);
    server_kill(&sp);
    /* a crash's region: its header's geometry is checked */
    int forged = forged_region(m.region, offsetof(struct rkv_region_header, index_base));
    assert_refused(&m, "32M", forged, m.state, "laid out differently");
    close(forged);
    /* the sealed copy of another size */
    int small = memfd_create("small", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    assert_int_equal(ftruncate(small, 1 << 20), 0);
    assert_int_equal(fcntl(small, F_ADD_SEALS, SEALS), 0);
    assert_refused(&m, "32M", small, m.state, "holds 1048576 bytes");
    close(small);
    /* not sealed: anyone holding it could write it */
    struct stat st;
    assert_int_equal(fstat(m.region, &st), 0);
    int open_fd = memfd_create("open", MFD_CLOEXEC);
    assert_int_equal(ftruncate(open_fd, st.st_size), 0);
    assert_refused(&m, "32M", open_fd, m.state, "not a sealed rkv region");
    close(open_fd);
    /* not a memfd: a file on a disk, and one on tmpfs (which, unlike a
     * disk's, answers F_GET_SEALS) where /dev/shm is one */
    static const char *const dirs[] = { "/dev/shm", "/tmp" };
    int file = -1; /* the last one, /tmp's, is kept for the record's test */
    for (size_t d = 0; d < sizeof dirs / sizeof dirs[0]; d++) {
        char path[64];
        snprintf(path, sizeof path, "%s/rkv-test-fdstore-file-XXXXXX", dirs[d]);
        int f = mkstemp(path);
        if (f < 0)
            continue;
        unlink(path);
        assert_int_equal(ftruncate(f, st.st_size), 0);
        assert_refused(&m, "32M", f, m.state, "is not a memfd");
        if (file >= 0)
            close(file);
        file = f;
    }
    assert_true(file >= 0);
    /* the record: of another --memory, damaged, or not a record */
    assert_refused(&m, "16M", m.region, m.state, "was written with --memory 32M");
    uint8_t rec[RKV_STATE_HEADER_SIZE];
    assert_int_equal(pread(m.state, rec, sizeof rec, 0), (ssize_t)sizeof rec);
    rec[60] ^= 0x10;
    int bad = memfd_create("bad-record", MFD_CLOEXEC);
    assert_int_equal(pwrite(bad, rec, sizeof rec, 0), (ssize_t)sizeof rec);
    assert_refused(&m, "32M", m.region, bad, "has a damaged header");
    close(bad);
    assert_refused(&m, "32M", m.region, file, "is not a 4096-byte record");
    close(file);
    /* a clean stop's record: the header page's checksum */
    restart_on(&m, &sp, -1, -1);
    assert_int_equal(server_stop(&sp), 0);
    forged = forged_region(m.region, offsetof(struct rkv_region_header, hash_seed));
    assert_refused(&m, "32M", forged, m.state, "damaged region header");
    close(forged);
    manager_close(&m);
}

/* A region without its record (a crash between the two) starts empty. */
static void test_region_alone_starts_empty(void **state)
{
    (void)state;
    struct manager m;
    struct server_proc sp;
    const char *args[7];
    manager_open(&m);
    first_start(&m, &sp);
    store_all(m.uri);
    server_kill(&sp);
    server_args(&m, args);
    assert_int_equal(server_start_fds(&sp, server_bin, m.uri, args, &m.region, 1, RKV_FDSTORE_REGION),
                     0);
    manager_until(&m, "READY=1");
    rkv_client *c = connect_retry(m.uri, NULL, 60000);
    char got[512];
    size_t gl;
    assert_non_null(c);
    assert_int_equal(rkv_get(c, "fdkey:1", 7, got, sizeof got, &gl, NULL), RKV_NOT_FOUND);
    rkv_close(c);
    assert_non_null(strstr(read_all(m.log), "without its record: starting empty"));
    assert_int_equal(server_stop(&sp), 0);
    manager_close(&m);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s RKV_SERVER_BINARY\n", argv[0]);
        return 2;
    }
    server_bin = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crash_keeps_the_cache),
        cmocka_unit_test(test_clean_stop_keeps_the_cache),
        cmocka_unit_test(test_damaged_item_dropped),
        cmocka_unit_test(test_damage_refused),
        cmocka_unit_test(test_region_alone_starts_empty),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
