/* region.h — the one block of memory the server lays its table out in.
 *
 * The region is a memfd so that the shm transport can pass it to local
 * clients (read-only) and the rdma transport can register it once. It is
 * backed by hugepages when the system has them (fewer TLB misses for the
 * server, fewer page-table entries for the NIC to walk), and fully populated
 * at creation: running out of hugepages is reported here, as an error or a
 * fallback with one warning, never later as a SIGBUS in the middle of a PUT.
 */
#ifndef RKV_REGION_H
#define RKV_REGION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rkv.h"
#include "transport.h"

/* Create a region of at least `size` bytes, zero-filled, mapped read-write
 * and shared. Tries, in order:
 *   1. 1 GiB hugepages, when size is a multiple of 1 GiB;
 *   2. 2 MiB hugepages, size rounded up to a multiple of 2 MiB;
 *   3. normal pages, with one warning that says how to reserve hugepages.
 * out->size is the mapped size (>= size); out->hugepages tells which kind it
 * got. out->base is the only writable mapping there will ever be: the memfd
 * is then made mode 0 and sealed (F_SEAL_SHRINK, GROW, FUTURE_WRITE, SEAL),
 * so no descriptor — a client's, reopened through /proc, even root's — can
 * write it, map it writable or change its size. Returns RKV_OK, RKV_INVALID
 * (size 0), RKV_NO_MEMORY, or RKV_INTERNAL when the kernel cannot seal it
 * (before Linux 5.1), with a message in err. */
rkv_status rkv_region_create(uint64_t size, struct rkv_region *out, char *err, size_t err_len);

/* Asked before each step of populating a normal-page region: true to go on
 * with `remaining` bytes still to take, false (a message in err) to stop;
 * creation then fails with RKV_NO_MEMORY and that message. Populating
 * threads ask it one at a time. */
struct rkv_region_guard {
    bool (*fits)(void *ctx, uint64_t remaining, char *err, size_t err_len); /* NULL: not asked */
    void *ctx;
    unsigned populate_threads; /* threads that fault the pages in; 0: one per CPU
                                  this thread may run on */
    /* Normal pages only. true: take every page now (fallocate, charged to
     * the memory cgroup like a fault) but leave its clearing to its first
     * touch, a region no NIC registers (registration pins, so faults, every
     * page anyway); false: fault every page in, cleared, now. */
    bool clear_on_first_touch;
    /* With clear_on_first_touch: asked once the region's size is known, a
     * range [*off, *off + *len) to leave untaken (its whole 4 KiB pages);
     * whoever uses it takes it first (rkv_region_take). NULL: none. */
    void (*untaken)(void *ctx, uint64_t size, uint64_t *off, uint64_t *len);
};

/* rkv_region_create, with a guard on the population of normal pages (the
 * server's: memory_budget.h). Either way the populated region is locked in
 * RAM (mlock) where the memlock limit allows, else one INFO note says so. */
rkv_status rkv_region_create_guarded(uint64_t size, const struct rkv_region_guard *guard,
                                     struct rkv_region *out, char *err, size_t err_len);

/* Unmap and close; safe on a zeroed or already destroyed region. */
void rkv_region_destroy(struct rkv_region *r);

/* Take the pages of [off, off + len) of a normal-page region now
 * (fallocate: charged to the memory cgroup; pages taken already stay as
 * they are), as the range a guard left untaken must be before it is
 * touched. Returns 0, ENOMEM or ENOSPC when there is no memory for it (a
 * fault would have OOM-killed instead), EINVAL for a range outside the
 * region or a hugepage region (all taken at creation). */
int rkv_region_take(const struct rkv_region *r, uint64_t off, uint64_t len);

/* A new O_RDONLY|O_CLOEXEC descriptor for the region's memfd (a duplicate of
 * out->ro_fd), which a peer can map only PROT_READ. The caller closes it.
 * Returns -1 (errno set) when the region has none. */
int rkv_region_readonly_fd(const struct rkv_region *r);

/* Take the region header's liveness lock (common/layout.h) for as long as
 * this thread serves the region; shm readers check it after every copy and
 * the kernel marks it if the process dies. Release it on clean shutdown.
 * Returns 0, or -1 with a message in err. */
struct rkv_region_header;
int rkv_region_hold_liveness(struct rkv_region_header *h, char *err, size_t err_len);
void rkv_region_release_liveness(struct rkv_region_header *h);

#endif
