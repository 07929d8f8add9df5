/* region_attack.c — every way a local client might try to write the table
 * region it was handed read-only (design.md invariant 5); see region_attack.h.
 *
 * Each route that works also does the damage (it overwrites the region's
 * first byte, the header magic), so a caller can check the region afterwards
 * as well as the count.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "region_attack.h"

static unsigned broke(const char *route)
{
    fprintf(stderr, "region_attack: %s WORKED (the region is writable by a client)\n", route);
    return 1;
}

/* write(2), pwrite, a writable shared mapping, mprotect of a read-only one,
 * ftruncate and a punched hole, all on one descriptor. */
static unsigned attack_fd(int fd, size_t size, const char *what)
{
    static const char evil = 'X';
    unsigned n = 0;
    char route[96];

    snprintf(route, sizeof route, "write(2) on the %s", what);
    if (write(fd, &evil, 1) == 1)
        n += broke(route);
    snprintf(route, sizeof route, "pwrite on the %s", what);
    if (pwrite(fd, &evil, 1, 0) == 1)
        n += broke(route);
    snprintf(route, sizeof route, "a PROT_WRITE MAP_SHARED mapping of the %s", what);
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p != MAP_FAILED) {
        *(volatile char *)p = evil;
        munmap(p, size);
        n += broke(route);
    }
    snprintf(route, sizeof route, "mprotect(PROT_WRITE) of a new read-only mapping of the %s", what);
    p = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    if (p != MAP_FAILED) {
        if (mprotect(p, size, PROT_READ | PROT_WRITE) == 0) {
            *(volatile char *)p = evil;
            n += broke(route);
        }
        munmap(p, size);
    }
    snprintf(route, sizeof route, "ftruncate of the %s", what);
    if (ftruncate(fd, 0) == 0 || ftruncate(fd, (off_t)size * 2) == 0)
        n += broke(route);
    snprintf(route, sizeof route, "fallocate(PUNCH_HOLE) on the %s", what);
    if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096) == 0)
        n += broke(route);
    return n;
}

unsigned region_write_attempts(int fd, size_t size, void *view)
{
    unsigned n = 0;
    char path[96];
    struct stat st;
    /* root and the region's owner (the server's uid) may reopen or chmod it;
     * for them only the seals stand in the way */
    bool privileged = geteuid() == 0 || (fstat(fd, &st) == 0 && st.st_uid == geteuid());

    if (view != NULL && mprotect(view, size, PROT_READ | PROT_WRITE) == 0) {
        *(volatile char *)view = 'X';
        n += broke("mprotect(PROT_WRITE) of the client's own mapping");
    }
    n += attack_fd(fd, size, "descriptor as received");
    if (view != NULL) {
        /* the mapping's own file link (root-only since Linux 4.3) */
        snprintf(path, sizeof path, "/proc/self/map_files/%lx-%lx", (unsigned long)view,
                 (unsigned long)view + size);
        int mf = open(path, O_RDWR | O_CLOEXEC);
        if (mf >= 0) {
            if (!privileged)
                n += broke("opening /proc/self/map_files O_RDWR without privileges");
            n += attack_fd(mf, size, "mapping reopened through map_files");
            close(mf);
        }
    }

    /* Take write access back: a mode change, then a reopen through /proc. */
    bool chmodded = fchmod(fd, 0666) == 0;
    if (chmodded && !privileged)
        n += broke("fchmod of the region by a client that does not own it");
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    int rw = open(path, O_RDWR | O_CLOEXEC);
    if (rw >= 0) {
        if (!privileged)
            n += broke("reopening /proc/self/fd/N O_RDWR without privileges");
        n += attack_fd(rw, size, "descriptor reopened O_RDWR");
        close(rw);
    }
    if (chmodded)
        (void)fchmod(fd, 0); /* leave the mode as the server set it */
    return n;
}
