/* fd_store.c — the region kept in systemd's file-descriptor store (fd_store.h).
 *
 * The service manager's side of it is a few environment variables and one
 * datagram per descriptor; the record is a state header (state_file.c
 * encodes and decodes it) in a memfd of its own.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fd_store.h"
#include "sd_notify.h"
#include "slab.h"

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010 /* Linux 5.1 */
#endif

#define REGION_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL)

/* A decimal number from 1 to max, the whole string. */
static bool parse_count(const char *s, unsigned long long max, unsigned long long *out)
{
    char *end = NULL;
    if (s == NULL || *s < '0' || *s > '9')
        return false;
    errno = 0;
    *out = strtoull(s, &end, 10);
    return errno == 0 && *end == '\0' && *out >= 1 && *out <= max;
}

int rkv_fdstore_parse(const char *listen_pid, const char *listen_fds, const char *names, pid_t self,
                      struct rkv_fdstore_fds *out, char *err, size_t err_len)
{
    unsigned long long pid, count;
    *out = (struct rkv_fdstore_fds){ .region = -1, .state = -1 };
    if (listen_pid == NULL || !parse_count(listen_pid, INT32_MAX, &pid) ||
        pid != (unsigned long long)self)
        return 0; /* nothing handed to this process */
    if (!parse_count(listen_fds, RKV_FDSTORE_MAX_FDS, &count)) {
        snprintf(err, err_len, "LISTEN_FDS=%.32s is not a count of descriptors from 1 to %u",
                 listen_fds ? listen_fds : "", RKV_FDSTORE_MAX_FDS);
        return -1;
    }
    out->count = (unsigned)count;
    if (names == NULL)
        return 0; /* unnamed (socket activation's): none is ours */
    const char *p = names;
    for (unsigned i = 0; i < count; i++) {
        const char *colon = strchr(p, ':');
        size_t len = colon ? (size_t)(colon - p) : strlen(p);
        if ((colon == NULL) != (i + 1 == count)) {
            snprintf(err, err_len, "LISTEN_FDNAMES does not name each of the %llu descriptors",
                     count);
            return -1;
        }
        int *slot = len == strlen(RKV_FDSTORE_REGION) && memcmp(p, RKV_FDSTORE_REGION, len) == 0
                        ? &out->region
                    : len == strlen(RKV_FDSTORE_STATE) && memcmp(p, RKV_FDSTORE_STATE, len) == 0
                        ? &out->state
                        : NULL;
        if (slot != NULL && *slot >= 0) {
            snprintf(err, err_len, "LISTEN_FDNAMES names %.*s twice", (int)len, p);
            return -1;
        }
        if (slot != NULL)
            *slot = RKV_FDSTORE_FIRST_FD + (int)i;
        p = colon ? colon + 1 : p + len;
    }
    return 0;
}

/* Whether fd is a memfd: its /proc link names "/memfd:NAME". F_GET_SEALS
 * alone cannot tell, as another tmpfs file answers it too (F_SEAL_SEAL). */
static bool is_memfd(int fd)
{
    char link[64], target[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, target, sizeof target);
    return n >= 7 && memcmp(target, "/memfd:", 7) == 0;
}

int rkv_fdstore_check_region(int fd, uint64_t size, char *err, size_t err_len)
{
    struct stat st;
    int seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0 || fstat(fd, &st) != 0 || !is_memfd(fd)) {
        snprintf(err, err_len, "is not a memfd (%s)",
                 seals < 0 ? strerror(errno) : "another kind of file");
        return -1;
    }
    if ((seals & REGION_SEALS) != REGION_SEALS) {
        snprintf(err, err_len, "is not a sealed rkv region (seals %#x)", (unsigned)seals);
        return -1;
    }
    if ((uint64_t)st.st_size != size) {
        snprintf(err, err_len, "holds %llu bytes where its record promises %llu",
                 (unsigned long long)st.st_size, (unsigned long long)size);
        return -1;
    }
    return 0;
}

int rkv_fdstore_state_create(char *err, size_t err_len)
{
    int fd = memfd_create(RKV_FDSTORE_STATE, MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, RKV_STATE_HEADER_SIZE) != 0) {
        snprintf(err, err_len, "cannot make the fd store's record: %s", strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

int rkv_fdstore_read_state(int fd, struct rkv_state_header *out, char *err, size_t err_len)
{
    uint8_t buf[RKV_STATE_HEADER_SIZE + 1];
    char why[256];
    struct stat st;
    if (fstat(fd, &st) != 0 || (uint64_t)st.st_size != RKV_STATE_HEADER_SIZE) {
        snprintf(err, err_len, "is not a %u-byte record", RKV_STATE_HEADER_SIZE);
        return -1;
    }
    ssize_t n = pread(fd, buf, sizeof buf, 0);
    if (n < 0) {
        snprintf(err, err_len, "cannot be read: %s", strerror(errno));
        return -1;
    }
    if (!rkv_state_decode(buf, (size_t)n, out, why, sizeof why)) {
        snprintf(err, err_len, "%s", why);
        return -1;
    }
    return 0;
}

int rkv_fdstore_write_state(int fd, const struct rkv_state_header *h, char *err, size_t err_len)
{
    uint8_t buf[RKV_STATE_HEADER_SIZE];
    rkv_state_encode(h, buf);
    if (pwrite(fd, buf, sizeof buf, 0) != (ssize_t)sizeof buf) {
        snprintf(err, err_len, "cannot write the fd store's record: %s", strerror(errno));
        return -1;
    }
    return 0;
}

int rkv_fdstore_push(int fd, const char *name)
{
    char msg[128];
    snprintf(msg, sizeof msg, "FDSTORE=1\nFDNAME=%s", name);
    return rkv_sd_notify_fds(msg, &fd, 1);
}

int rkv_fdstore_remove(const char *name)
{
    char msg[128];
    snprintf(msg, sizeof msg, "FDSTOREREMOVE=1\nFDNAME=%s", name);
    return rkv_sd_notify(msg);
}

int rkv_fdstore_restore_point(const struct rkv_state_header *rec, uint64_t real_now_ns,
                              uint64_t mono_now_ns, uint32_t *clock, uint64_t *max_version)
{
    uint64_t down = real_now_ns > rec->stop_realtime_ns
                        ? (real_now_ns - rec->stop_realtime_ns) / 1000000000ull
                        : 0;
    *clock = down >= UINT32_MAX - rec->clock ? UINT32_MAX : rec->clock + (uint32_t)down;
    *max_version = rec->max_version;
    if (rec->running_mono_ns == 0)
        return 0;
    if (mono_now_ns < rec->running_mono_ns)
        return -1;
    /* the versions the crashed server handed out after its record grew at
     * most this fast: RKV_THREAD_SLOTS per nanosecond */
    uint64_t since = mono_now_ns - rec->running_mono_ns + 1000000000ull;
    uint64_t add = since > UINT64_MAX / RKV_THREAD_SLOTS ? UINT64_MAX : since * RKV_THREAD_SLOTS;
    *max_version = add > UINT64_MAX / 2 - rec->max_version ? UINT64_MAX / 2 : rec->max_version + add;
    return 0;
}
