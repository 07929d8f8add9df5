/* test_state_file.c — the state file's header and file checks
 * (server/state_file.c).
 *
 * The header round-trips; each fingerprint field that differs from the
 * server's is refused with a message naming the option that keeps the file
 * (or saying to remove it); every single flipped bit of an encoded header
 * is caught; a short header, a short or long file, another owner, a mode
 * other than 0600, a symlink or a directory are refused; a saved file opens
 * and reads back the region it was given, leaving no temporary behind.
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
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "layout.h"
#include "state_file.h"
#include "state_sample.h"

static struct rkv_state_header sample(void)
{
    return state_sample();
}

static void test_round_trip(void **state)
{
    (void)state;
    uint8_t buf[RKV_STATE_HEADER_SIZE];
    char err[256];
    struct rkv_state_header h = sample(), back;
    rkv_state_encode(&h, buf);
    assert_true(rkv_state_decode(buf, sizeof buf, &back, err, sizeof err));
    assert_memory_equal(&h, &back, sizeof h);
    assert_true(rkv_state_match(&back, &h, "/x", err, sizeof err));
    /* longer input (the region follows the header) is fine */
    uint8_t more[RKV_STATE_HEADER_SIZE + 16] = { 0 };
    memcpy(more, buf, sizeof buf);
    assert_true(rkv_state_decode(more, sizeof more, &back, err, sizeof err));
}

/* One field of the file differs from the server's: refused, with `want`
 * in the message. */
struct field_case {
    const char *name;
    void (*change)(struct rkv_state_header *);
    const char *want;
};

static void ch_format(struct rkv_state_header *h)
{
    h->format_version = 2;
}
static void ch_region(struct rkv_state_header *h)
{
    h->region_size = 1ull << 30;
}
static void ch_slab(struct rkv_state_header *h)
{
    h->slab_page_size = 2u << 20;
}
static void ch_value(struct rkv_state_header *h)
{
    h->max_value_len = 1000;
}
static void ch_kind(struct rkv_state_header *h)
{
    h->page_kind = 2u << 20;
}
static void ch_key(struct rkv_state_header *h)
{
    h->max_key_len = 200;
}
static void ch_growth(struct rkv_state_header *h)
{
    h->growth_millis = 1500;
}
static void ch_classes(struct rkv_state_header *h)
{
    h->class_count = 100;
}
static void ch_buckets(struct rkv_state_header *h)
{
    h->bucket_count = 65536;
}
static void ch_heap_off(struct rkv_state_header *h)
{
    h->heap_offset += 4096;
}
static void ch_heap_size(struct rkv_state_header *h)
{
    h->heap_size -= 1u << 20;
}

static void test_every_mismatch_refused(void **state)
{
    (void)state;
    static const struct field_case cases[] = {
        { "format", ch_format, "with region format 2, and this rkv-server 0.1.0 uses format" },
        { "region", ch_region,
          "was written with --memory 1G; start with --memory 1G to keep "
          "the cache, or remove the file to start empty" },
        { "slab", ch_slab, "was written with --slab-page-size 2M; start with --slab-page-size 2M" },
        { "value", ch_value,
          "was written with --max-value-len 1000; start with --max-value-len 1000" },
        { "kind", ch_kind, "written from a region of 2 MiB hugepages and this start got 4 KiB pages" },
        { "key", ch_key, "keys up to 200 bytes" },
        { "growth", ch_growth, "growing by 1.500" },
        { "classes", ch_classes, "100 size classes" },
        { "buckets", ch_buckets, "65536 buckets" },
        { "heap offset", ch_heap_off, "at 8396800" },
        { "heap size", ch_heap_size, "heap of 56623104 bytes" },
    };
    struct rkv_state_header want = sample();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct rkv_state_header file = sample();
        char err[1024] = "";
        uint8_t buf[RKV_STATE_HEADER_SIZE];
        cases[i].change(&file);
        rkv_state_encode(&file, buf); /* through the bytes, as a start reads it */
        assert_true(rkv_state_decode(buf, sizeof buf, &file, err, sizeof err));
        assert_false(rkv_state_match(&file, &want, "/var/lib/rkv/rkv.state", err, sizeof err));
        if (strstr(err, cases[i].want) == NULL)
            fail_msg("%s: \"%s\" does not say \"%s\"", cases[i].name, err, cases[i].want);
        assert_non_null(strstr(err, "--state-file /var/lib/rkv/rkv.state"));
        assert_non_null(strstr(err, "remove the file to start empty"));
    }
    /* the clock, versions and sums are not the configuration's */
    struct rkv_state_header file = sample();
    char err[256];
    file.clock = 1;
    file.max_version = 7;
    file.stop_realtime_ns = 0;
    file.region_header_sum = 0;
    assert_true(rkv_state_match(&file, &want, "/x", err, sizeof err));
}

static void test_flipped_bits_detected(void **state)
{
    (void)state;
    uint8_t buf[RKV_STATE_HEADER_SIZE];
    char err[256];
    struct rkv_state_header h = sample(), back;
    rkv_state_encode(&h, buf);
    for (size_t i = 0; i < sizeof buf; i++)
        for (unsigned b = 0; b < 8; b++) {
            buf[i] ^= (uint8_t)(1u << b);
            if (rkv_state_decode(buf, sizeof buf, &back, err, sizeof err))
                fail_msg("a flip of bit %u of byte %zu was not detected", b, i);
            buf[i] ^= (uint8_t)(1u << b);
        }
    assert_true(rkv_state_decode(buf, sizeof buf, &back, err, sizeof err));
    buf[200] ^= 1;
    assert_false(rkv_state_decode(buf, sizeof buf, &back, err, sizeof err));
    assert_non_null(strstr(err, "damaged header"));
    buf[200] ^= 1;
    buf[0] ^= 1;
    assert_false(rkv_state_decode(buf, sizeof buf, &back, err, sizeof err));
    assert_non_null(strstr(err, "not an rkv state file"));
}

static void test_truncated_header(void **state)
{
    (void)state;
    uint8_t buf[RKV_STATE_HEADER_SIZE];
    char err[256];
    struct rkv_state_header h = sample(), back;
    rkv_state_encode(&h, buf);
    for (size_t n = 0; n < sizeof buf; n += 97) {
        assert_false(rkv_state_decode(buf, n, &back, err, sizeof err));
        assert_non_null(strstr(err, "truncated"));
    }
}

/* ------------------------------------------------------------ files */

struct dir {
    char path[64];
    char file[96];
};

static void dir_make(struct dir *d)
{
    snprintf(d->path, sizeof d->path, "/tmp/rkv-test-state-XXXXXX");
    assert_non_null(mkdtemp(d->path));
    snprintf(d->file, sizeof d->file, "%s/rkv.state", d->path);
}

static void dir_free(struct dir *d)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", d->path);
    assert_int_equal(system(cmd), 0);
}

static const size_t REGION = 1u << 20;

/* A saved file of a 1 MiB "region" with a pattern. */
static void save_sample(struct dir *d, uint8_t **region)
{
    char err[512] = "";
    struct rkv_state_header h = sample();
    h.region_size = REGION;
    *region = malloc(REGION);
    assert_non_null(*region);
    for (size_t i = 0; i < REGION; i++)
        (*region)[i] = (uint8_t)(i * 131 + 7);
    assert_int_equal(rkv_state_save(d->file, &h, *region, REGION, err, sizeof err), 0);
}

static enum rkv_state_open_result try_open(const char *path, uid_t owner, char *err, size_t len)
{
    struct rkv_state_header h;
    int fd = -1;
    enum rkv_state_open_result r = rkv_state_open(path, owner, &fd, &h, err, len);
    if (r == RKV_STATE_OK) {
        assert_true(fd >= 0);
        close(fd);
    } else {
        assert_int_equal(fd, -1);
    }
    return r;
}

static void test_save_open_read(void **state)
{
    (void)state;
    struct dir d;
    uint8_t *region, *back = malloc(REGION);
    char err[512] = "", tmp[128];
    struct stat st;
    assert_non_null(back);
    dir_make(&d);
    assert_int_equal(rkv_state_check_dir(d.file, err, sizeof err), 0);
    assert_int_equal(try_open(d.file, geteuid(), err, sizeof err), RKV_STATE_NONE);
    save_sample(&d, &region);
    snprintf(tmp, sizeof tmp, "%s.tmp", d.file);
    assert_int_equal(stat(tmp, &st), -1); /* renamed, nothing left behind */
    assert_int_equal(stat(d.file, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0600);
    assert_int_equal((size_t)st.st_size, RKV_STATE_HEADER_SIZE + REGION);

    struct rkv_state_header h;
    int fd = -1;
    assert_int_equal(rkv_state_open(d.file, geteuid(), &fd, &h, err, sizeof err), RKV_STATE_OK);
    assert_int_equal(h.region_size, REGION);
    assert_int_equal(h.clock, 12345);
    assert_int_equal(rkv_state_read_region(fd, d.file, back, REGION, err, sizeof err), 0);
    assert_memory_equal(back, region, REGION);
    close(fd);
    free(region);
    free(back);
    dir_free(&d);
}

static void test_files_refused(void **state)
{
    (void)state;
    struct dir d;
    uint8_t *region;
    char err[512] = "", other[128];
    dir_make(&d);
    save_sample(&d, &region);
    free(region);

    /* another owner */
    assert_int_equal(try_open(d.file, geteuid() + 1, err, sizeof err), RKV_STATE_REFUSED);
    assert_non_null(strstr(err, "is owned by uid"));
    assert_non_null(strstr(err, "chown it to keep the cache, or remove it to start empty"));
    /* a mode other than 0600 */
    assert_int_equal(chmod(d.file, 0644), 0);
    assert_int_equal(try_open(d.file, geteuid(), err, sizeof err), RKV_STATE_REFUSED);
    assert_non_null(strstr(err, "has mode 0644, not 0600"));
    assert_int_equal(chmod(d.file, 0600), 0);
    assert_int_equal(try_open(d.file, geteuid(), err, sizeof err), RKV_STATE_OK);
    /* the region cut short, or longer than the header says */
    assert_int_equal(truncate(d.file, RKV_STATE_HEADER_SIZE + REGION - 1), 0);
    assert_int_equal(try_open(d.file, geteuid(), err, sizeof err), RKV_STATE_REFUSED);
    assert_non_null(strstr(err, "is truncated"));
    assert_int_equal(truncate(d.file, RKV_STATE_HEADER_SIZE + REGION + 1), 0);
    assert_int_equal(try_open(d.file, geteuid(), err, sizeof err), RKV_STATE_REFUSED);
    assert_non_null(strstr(err, "is too long"));
    /* the header cut short */
    assert_int_equal(truncate(d.file, 100), 0);
    assert_int_equal(try_open(d.file, geteuid(), err, sizeof err), RKV_STATE_REFUSED);
    assert_non_null(strstr(err, "is truncated: 100 bytes"));
    /* a symlink to a good file, and a directory */
    save_sample(&d, &region);
    free(region);
    snprintf(other, sizeof other, "%s/link", d.path);
    assert_int_equal(symlink(d.file, other), 0);
    assert_int_equal(try_open(other, geteuid(), err, sizeof err), RKV_STATE_REFUSED);
    assert_non_null(strstr(err, "symbolic link"));
    assert_int_equal(try_open(d.path, geteuid(), err, sizeof err), RKV_STATE_REFUSED);
    assert_non_null(strstr(err, "not a regular file"));
    /* a directory that does not exist */
    snprintf(other, sizeof other, "%s/no/such/rkv.state", d.path);
    assert_int_equal(rkv_state_check_dir(other, err, sizeof err), -1);
    assert_non_null(strstr(err, "does not exist"));
    dir_free(&d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_every_mismatch_refused),
        cmocka_unit_test(test_flipped_bits_detected),
        cmocka_unit_test(test_truncated_header),
        cmocka_unit_test(test_save_open_read),
        cmocka_unit_test(test_files_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
