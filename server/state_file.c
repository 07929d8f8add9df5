/* state_file.c — the state file a clean stop keeps the cache in (state_file.h).
 *
 * The header is encoded field by field at fixed offsets (never a struct
 * dump), so its bytes are the same whatever the compiler pads, and decoded
 * the same way with every byte accounted for: a reserved byte that is not
 * zero is as much a refusal as a checksum that does not match. The region
 * follows the header unchanged; it is read straight into the new region's
 * mapping and verified there item by item (table.c rkv_table_attach).
 */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "layout.h"
#include "state_file.h"
#include "table.h"
#include "util.h"

/* Byte offsets in the header. */
enum {
    OFF_MAGIC = 0,
    OFF_STATE_VERSION = 8,
    OFF_FORMAT_VERSION = 12,
    OFF_RKV_VERSION = 16,
    OFF_REGION_SIZE = 48,
    OFF_PAGE_KIND = 56,
    OFF_SLAB_PAGE = 60,
    OFF_GROWTH = 64,
    OFF_MAX_KEY = 68,
    OFF_MAX_VALUE = 72,
    OFF_CLASS_COUNT = 76,
    OFF_BUCKETS = 80,
    OFF_HEAP_OFFSET = 88,
    OFF_HEAP_SIZE = 96,
    OFF_CLOCK = 104,
    OFF_RESERVED = 108,
    OFF_STOP_REALTIME = 112,
    OFF_MAX_VERSION = 120,
    OFF_REGION_SUM = 128,
    OFF_RUNNING_MONO = 136,
    OFF_END = 144,
    OFF_CHECKSUM = RKV_STATE_HEADER_SIZE - 8,
};
RKV_STATIC_ASSERT(OFF_RKV_VERSION + sizeof(((struct rkv_state_header *)0)->rkv_version) ==
                      OFF_REGION_SIZE,
                  "the version string fills its field");

#define IO_CHUNK (64u << 20) /* bytes per read()/write() call */

static void put32(uint8_t *b, size_t off, uint32_t v)
{
    memcpy(b + off, &v, sizeof v);
}
static void put64(uint8_t *b, size_t off, uint64_t v)
{
    memcpy(b + off, &v, sizeof v);
}
static uint32_t get32(const uint8_t *b, size_t off)
{
    uint32_t v;
    memcpy(&v, b + off, sizeof v);
    return v;
}
static uint64_t get64(const uint8_t *b, size_t off)
{
    uint64_t v;
    memcpy(&v, b + off, sizeof v);
    return v;
}

void rkv_state_encode(const struct rkv_state_header *h, uint8_t out[RKV_STATE_HEADER_SIZE])
{
    memset(out, 0, RKV_STATE_HEADER_SIZE);
    put64(out, OFF_MAGIC, RKV_STATE_MAGIC);
    put32(out, OFF_STATE_VERSION, h->state_version);
    put32(out, OFF_FORMAT_VERSION, h->format_version);
    memcpy(out + OFF_RKV_VERSION, h->rkv_version, sizeof h->rkv_version);
    out[OFF_RKV_VERSION + sizeof h->rkv_version - 1] = '\0';
    put64(out, OFF_REGION_SIZE, h->region_size);
    put32(out, OFF_PAGE_KIND, h->page_kind);
    put32(out, OFF_SLAB_PAGE, h->slab_page_size);
    put32(out, OFF_GROWTH, h->growth_millis);
    put32(out, OFF_MAX_KEY, h->max_key_len);
    put32(out, OFF_MAX_VALUE, h->max_value_len);
    put32(out, OFF_CLASS_COUNT, h->class_count);
    put64(out, OFF_BUCKETS, h->bucket_count);
    put64(out, OFF_HEAP_OFFSET, h->heap_offset);
    put64(out, OFF_HEAP_SIZE, h->heap_size);
    put32(out, OFF_CLOCK, h->clock);
    put64(out, OFF_STOP_REALTIME, h->stop_realtime_ns);
    put64(out, OFF_MAX_VERSION, h->max_version);
    put64(out, OFF_REGION_SUM, h->region_header_sum);
    put64(out, OFF_RUNNING_MONO, h->running_mono_ns);
    put64(out, OFF_CHECKSUM, XXH3_64bits(out, OFF_CHECKSUM));
}

bool rkv_state_decode(const uint8_t *buf, size_t len, struct rkv_state_header *out, char *err,
                      size_t err_len)
{
    memset(out, 0, sizeof *out);
    if (len < RKV_STATE_HEADER_SIZE) {
        snprintf(err, err_len, "is truncated: %zu bytes, shorter than its %u-byte header", len,
                 RKV_STATE_HEADER_SIZE);
        return false;
    }
    if (get64(buf, OFF_MAGIC) != RKV_STATE_MAGIC) {
        snprintf(err, err_len, "is not an rkv state file (no state file magic)");
        return false;
    }
    if (get32(buf, OFF_STATE_VERSION) != RKV_STATE_VERSION) {
        snprintf(err, err_len, "has state file format %u; this rkv-server reads format %u",
                 get32(buf, OFF_STATE_VERSION), RKV_STATE_VERSION);
        return false;
    }
    if (get64(buf, OFF_CHECKSUM) != XXH3_64bits(buf, OFF_CHECKSUM)) {
        snprintf(err, err_len, "has a damaged header (its checksum does not match)");
        return false;
    }
    bool zeros = get32(buf, OFF_RESERVED) == 0;
    for (size_t i = OFF_END; i < OFF_CHECKSUM && zeros; i++)
        zeros = buf[i] == 0;
    if (!zeros || memchr(buf + OFF_RKV_VERSION, '\0', sizeof out->rkv_version) == NULL) {
        snprintf(err, err_len, "has a malformed header (reserved bytes set or version unterminated)");
        return false;
    }
    out->state_version = get32(buf, OFF_STATE_VERSION);
    out->format_version = get32(buf, OFF_FORMAT_VERSION);
    memcpy(out->rkv_version, buf + OFF_RKV_VERSION, sizeof out->rkv_version);
    out->region_size = get64(buf, OFF_REGION_SIZE);
    out->page_kind = get32(buf, OFF_PAGE_KIND);
    out->slab_page_size = get32(buf, OFF_SLAB_PAGE);
    out->growth_millis = get32(buf, OFF_GROWTH);
    out->max_key_len = get32(buf, OFF_MAX_KEY);
    out->max_value_len = get32(buf, OFF_MAX_VALUE);
    out->class_count = get32(buf, OFF_CLASS_COUNT);
    out->bucket_count = get64(buf, OFF_BUCKETS);
    out->heap_offset = get64(buf, OFF_HEAP_OFFSET);
    out->heap_size = get64(buf, OFF_HEAP_SIZE);
    out->clock = get32(buf, OFF_CLOCK);
    out->stop_realtime_ns = get64(buf, OFF_STOP_REALTIME);
    out->max_version = get64(buf, OFF_MAX_VERSION);
    out->region_header_sum = get64(buf, OFF_REGION_SUM);
    out->running_mono_ns = get64(buf, OFF_RUNNING_MONO);
    return true;
}

/* A size as an option takes it: 1G, 64M, 4K, or bytes. */
static const char *option_size(uint64_t v, char *buf, size_t len)
{
    static const char suffix[] = "KMGT";
    unsigned u = 0;
    while (u < 4 && v >= 1024 && v % 1024 == 0) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%llu", (unsigned long long)v);
    else
        snprintf(buf, len, "%llu%c", (unsigned long long)v, suffix[u - 1]);
    return buf;
}

/* "2 MiB hugepages", "4 KiB pages" */
static const char *page_kind_name(uint32_t kind, char *buf, size_t len)
{
    char sz[32];
    snprintf(buf, len, "%s %s", rkv_format_size(kind, sz, sizeof sz),
             kind > 4096 ? "hugepages" : "pages");
    return buf;
}

bool rkv_state_match_source(const struct rkv_state_header *f, const struct rkv_state_header *w,
                            const char *source, const char *empty, char *err, size_t err_len)
{
    char a[32], b[32];
    if (f->format_version != w->format_version) {
        snprintf(err, err_len,
                 "%s was written by rkv %s with region format %u, and "
                 "this rkv-server %s uses format %u: a cache cannot be kept across that upgrade; "
                 "%s",
                 source, f->rkv_version, f->format_version, w->rkv_version, w->format_version, empty);
        return false;
    }
    if (f->region_size != w->region_size) {
        option_size(f->region_size, a, sizeof a);
        snprintf(err, err_len,
                 "%s was written with --memory %s; start with "
                 "--memory %s to keep the cache, or %s",
                 source, a, a, empty);
        return false;
    }
    if (f->slab_page_size != w->slab_page_size) {
        option_size(f->slab_page_size - rkv_table_page_pair_room(f->max_key_len), a, sizeof a);
        snprintf(err, err_len,
                 "%s was written with --slab-page-size %s; start with "
                 "--slab-page-size %s to keep the cache, or %s",
                 source, a, a, empty);
        return false;
    }
    if (f->max_value_len != w->max_value_len) {
        snprintf(err, err_len,
                 "%s was written with --max-value-len %u; start with "
                 "--max-value-len %u to keep the cache, or %s",
                 source, f->max_value_len, f->max_value_len, empty);
        return false;
    }
    if (f->page_kind != w->page_kind) {
        snprintf(err, err_len,
                 "%s was written from a region of %s and this start "
                 "got %s; start where the region gets %s again to keep the cache "
                 "(hugepages: vm.nr_hugepages; --hugepages-required makes sure), or %s",
                 source, page_kind_name(f->page_kind, a, sizeof a),
                 page_kind_name(w->page_kind, b, sizeof b), a, empty);
        return false;
    }
    if (f->max_key_len != w->max_key_len || f->growth_millis != w->growth_millis ||
        f->class_count != w->class_count || f->bucket_count != w->bucket_count ||
        f->heap_offset != w->heap_offset || f->heap_size != w->heap_size) {
        snprintf(err, err_len,
                 "%s was written by rkv %s with another table layout "
                 "(%llu buckets, heap of %llu bytes at %llu, %u size classes growing by %u.%03u, "
                 "keys up to %u bytes), and this rkv-server %s lays its options out "
                 "differently; start with the --item-size-hint it was written with, or %s",
                 source, f->rkv_version, (unsigned long long)f->bucket_count,
                 (unsigned long long)f->heap_size, (unsigned long long)f->heap_offset,
                 f->class_count, f->growth_millis / 1000, f->growth_millis % 1000, f->max_key_len,
                 w->rkv_version, empty);
        return false;
    }
    return true;
}

bool rkv_state_match(const struct rkv_state_header *f, const struct rkv_state_header *w,
                     const char *path, char *err, size_t err_len)
{
    char source[4200];
    snprintf(source, sizeof source, "--state-file %s", path);
    return rkv_state_match_source(f, w, source, "remove the file to start empty", err, err_len);
}

uint64_t rkv_state_region_header_sum(const void *region)
{
    return XXH3_64bits(region, RKV_HEADER_SIZE);
}

enum rkv_state_open_result rkv_state_open(const char *path, uid_t owner, int *fd,
                                          struct rkv_state_header *out, char *err, size_t err_len)
{
    static const char empty[] = "remove it to start empty";
    uint8_t buf[RKV_STATE_HEADER_SIZE];
    char why[256];
    struct stat st;
    *fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
    if (*fd < 0) {
        if (errno == ENOENT)
            return RKV_STATE_NONE;
        snprintf(err, err_len, "--state-file %s cannot be opened: %s; %s", path,
                 errno == ELOOP ? "it is a symbolic link" : strerror(errno), empty);
        return RKV_STATE_REFUSED;
    }
    if (fstat(*fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, err_len, "--state-file %s is not a regular file; %s", path, empty);
        goto refused;
    }
    if (st.st_uid != owner) {
        snprintf(err, err_len,
                 "--state-file %s is owned by uid %u, not by the server's uid %u; "
                 "chown it to keep the cache, or %s",
                 path, (unsigned)st.st_uid, (unsigned)owner, empty);
        goto refused;
    }
    if ((st.st_mode & 07777) != 0600) {
        snprintf(err, err_len,
                 "--state-file %s has mode %04o, not 0600 (the cache is readable "
                 "only by the server); chmod 600 it to keep the cache, or %s",
                 path, (unsigned)(st.st_mode & 07777), empty);
        goto refused;
    }
    ssize_t n = pread(*fd, buf, sizeof buf, 0);
    if (n < 0) {
        snprintf(err, err_len, "--state-file %s cannot be read: %s; %s", path, strerror(errno),
                 empty);
        goto refused;
    }
    if (!rkv_state_decode(buf, (size_t)n, out, why, sizeof why)) {
        snprintf(err, err_len, "--state-file %s %s; %s", path, why, empty);
        goto refused;
    }
    if (out->running_mono_ns != 0) {
        snprintf(err, err_len,
                 "--state-file %s holds a running server's record, not a clean stop's; %s", path,
                 empty);
        goto refused;
    }
    if ((uint64_t)st.st_size != RKV_STATE_HEADER_SIZE + out->region_size) {
        snprintf(err, err_len,
                 "--state-file %s is %s: %llu bytes where its header promises "
                 "%llu; %s",
                 path,
                 (uint64_t)st.st_size < RKV_STATE_HEADER_SIZE + out->region_size ? "truncated"
                                                                                 : "too long",
                 (unsigned long long)st.st_size,
                 (unsigned long long)(RKV_STATE_HEADER_SIZE + out->region_size), empty);
        goto refused;
    }
    return RKV_STATE_OK;

refused:
    close(*fd);
    *fd = -1;
    return RKV_STATE_REFUSED;
}

int rkv_state_read_region(int fd, const char *path, void *base, size_t size, char *err, size_t err_len)
{
    uint8_t *p = base;
    size_t done = 0;
    (void)posix_fadvise(fd, RKV_STATE_HEADER_SIZE, (off_t)size, POSIX_FADV_SEQUENTIAL);
    while (done < size) {
        size_t want = RKV_MIN(size - done, (size_t)IO_CHUNK);
        ssize_t n = pread(fd, p + done, want, (off_t)(RKV_STATE_HEADER_SIZE + done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            snprintf(err, err_len, "--state-file %s: reading the region failed at byte %zu: %s",
                     path, done, n < 0 ? strerror(errno) : "unexpected end of file");
            return -1;
        }
        done += (size_t)n;
    }
    return 0;
}

static int write_all(int fd, const uint8_t *p, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, p, RKV_MIN(len, (size_t)IO_CHUNK));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* The directory of path (a copy: dirname may change its argument). */
static void dir_of(const char *path, char *dir, size_t len)
{
    char copy[4096];
    snprintf(copy, sizeof copy, "%s", path);
    snprintf(dir, len, "%s", dirname(copy));
}

int rkv_state_save(const char *path, const struct rkv_state_header *h, const void *base,
                   size_t size, char *err, size_t err_len)
{
    char tmp[4096 + 8], dir[4096];
    uint8_t hdr[RKV_STATE_HEADER_SIZE];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp", path) >= sizeof tmp) {
        snprintf(err, err_len, "--state-file %s: the path is too long", path);
        return -1;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY, 0600);
    if (fd < 0) {
        snprintf(err, err_len, "--state-file %s: cannot create %s: %s", path, tmp, strerror(errno));
        return -1;
    }
    rkv_state_encode(h, hdr);
    const char *step = "write";
    if (fchmod(fd, 0600) != 0)
        step = "chmod";
    else if (write_all(fd, hdr, sizeof hdr) != 0 || write_all(fd, base, size) != 0)
        step = "write";
    else if (fsync(fd) != 0)
        step = "fsync";
    else
        step = NULL;
    if (close(fd) != 0 && step == NULL)
        step = "close";
    if (step == NULL && rename(tmp, path) != 0)
        step = "rename";
    if (step != NULL) {
        snprintf(err, err_len, "--state-file %s: %s of %s failed: %s", path, step, tmp,
                 strerror(errno));
        unlink(tmp);
        return -1;
    }
    dir_of(path, dir, sizeof dir);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) { /* the rename itself durable; a failure here loses nothing written */
        (void)fsync(dfd);
        close(dfd);
    }
    return 0;
}

int rkv_state_check_dir(const char *path, char *err, size_t err_len)
{
    char dir[4096];
    struct stat st;
    dir_of(path, dir, sizeof dir);
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || access(dir, W_OK | X_OK) != 0) {
        snprintf(err, err_len,
                 "--state-file %s: its directory %s %s; create it for the "
                 "server's user, or point --state-file elsewhere",
                 path, dir,
                 stat(dir, &st) != 0    ? "does not exist"
                 : !S_ISDIR(st.st_mode) ? "is not a directory"
                                        : "is not writable by the server");
        return -1;
    }
    return 0;
}

uint32_t rkv_state_page_kind(int region_fd)
{
    struct stat st;
    if (region_fd < 0 || fstat(region_fd, &st) != 0 || st.st_blksize <= 0)
        return 4096;
    return (uint32_t)st.st_blksize;
}
