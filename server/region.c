/* region.c — the memfd-backed, hugepage-preferring table region (region.h).
 *
 * Why a memfd: the shm transport hands the same memory to local clients with
 * SCM_RIGHTS, as a read-only descriptor they cannot map writable; the rdma
 * transport registers the mapping once.
 *
 * Why nobody else can write it (design.md invariant 5): a read-only descriptor
 * alone is not enough — its holder could reopen /proc/self/fd/N read-write.
 * So, once the server's own writable mapping exists and the read-only
 * descriptor for clients is open, the memfd is
 *   - chmod'ed to 0: a reopen through /proc fails for every uid but root;
 *   - sealed F_SEAL_FUTURE_WRITE: no new writable mapping, write(2) or hole
 *     punch through any descriptor, not even root's (the server's mapping,
 *     made before the seal, keeps working), plus SHRINK, GROW and SEAL, so
 *     the size and the seals themselves never change.
 * What is left: root, and the server's own uid (which can ptrace it), can
 * still write the server's memory by other means; they are the boundary.
 *
 * Why populate at creation: hugetlb
 * pages are a fixed pool, and a region that was merely reserved would fault
 * them in on first write — a shortage would then surface as SIGBUS inside a
 * PUT. fallocate() takes every page now and fails with ENOSPC instead.
 * Normal pages are faulted in (taken, cleared, mapped and locked in one
 * pass) from one thread per CPU, in slices with a guard (the server's
 * re-checks RAM and its memory cgroup, memory_budget.h) asked before each,
 * since a memory cgroup at its limit OOM-kills rather than failing. A region
 * that no NIC registers (guard->clear_on_first_touch) is only taken, slice by
 * slice with the same guard, by fallocate(): the pages are the server's and
 * charged as before, and the kernel clears each at its first touch (a PUT's
 * copy, a client's first read), as memcached's pages are cleared when its
 * slabs first take them, instead of all of them before the server is ready.
 * Such a region may leave one range untaken (guard->untaken: the index's
 * room to grow, which a server of large items never needs); its user takes
 * it later with rkv_region_take(), which fails with ENOMEM instead of
 * faulting a page the memory cgroup has no room for.
 * The region is locked in RAM (mlock) where the memlock limit allows.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "layout.h"
#include "log.h"
#include "region.h"
#include "util.h"

#ifndef MFD_HUGETLB
#define MFD_HUGETLB 0x0004u
#endif
#ifndef MFD_HUGE_SHIFT
#define MFD_HUGE_SHIFT 26
#endif
#ifndef MFD_HUGE_2MB
#define MFD_HUGE_2MB (21u << MFD_HUGE_SHIFT)
#endif
#ifndef MFD_HUGE_1GB
#define MFD_HUGE_1GB (30u << MFD_HUGE_SHIFT)
#endif

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010 /* Linux 5.1 */
#endif

#define PAGE_4K              4096ull
#define SIZE_2M              (2ull << 20)
#define SIZE_1G              (1ull << 30)
#define POPULATE_CHUNK       (64ull << 20) /* normal pages taken between guard checks */
#define POPULATE_MAX_THREADS 64

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif
#ifndef MLOCK_ONFAULT
#define MLOCK_ONFAULT 0x01
#endif

/* One attempt's page kind: memfd flags and the size it rounds to. */
struct page_kind {
    const char *name;   /* for messages */
    unsigned mfd_flags; /* MFD_HUGETLB | MFD_HUGE_*, or 0 */
    uint64_t page;      /* bytes per page; the region rounds up to it */
};

/* A sealable memfd (hugetlb memfds accept MFD_ALLOW_SEALING since Linux
 * 4.16; an older kernel fails here and the next page kind is tried). */
static int region_memfd(unsigned kind_flags)
{
    return memfd_create("rkv-region", MFD_CLOEXEC | MFD_ALLOW_SEALING | kind_flags);
}

/* Hugetlb pages in one fallocate(), which fails with ENOSPC when the pool
 * is short and clears every page it takes. 0 or an errno. */
static int region_take_huge(int fd, uint64_t size)
{
    if (fallocate(fd, 0, 0, (off_t)size) != 0)
        return errno;
    return 0;
}

/* Normal pages are taken, cleared, mapped and (VM_LOCKONFAULT) locked in
 * one pass: POPULATE_CHUNK slices that `threads` threads claim in turn,
 * each asking the guard first. Why not fallocate() then MAP_POPULATE: on
 * tmpfs fallocate() only allocates; every page is still cleared at its
 * first fault, by one thread, in a second walk over the page cache, and
 * mlock() is a third. The clearing is most of the time (perf: clear_page
 * under shmem_fault), so it is what the threads share. */
struct populate {
    uint8_t *base;
    uint64_t size;
    int fd;                      /* the memfd, for fallocate() */
    bool take_only;              /* guard->clear_on_first_touch: fallocate(), no fault */
    uint64_t skip_off, skip_len; /* take_only: the range left untaken (guard->untaken) */
    const struct rkv_region_guard *guard;
    _Atomic uint64_t next; /* the next slice's offset */
    _Atomic uint64_t done; /* bytes populated */
    _Atomic int error;     /* first errno, or ECANCELED from the guard */
    pthread_mutex_t guard_lock;
    uint64_t start_ns;
    char *err;
    size_t err_len;
};

/* fallocate() [off, off + n) of the memfd: 0 or an errno. */
static int take_range(int fd, uint64_t off, uint64_t n)
{
    return n == 0 || fallocate(fd, 0, (off_t)off, (off_t)n) == 0 ? 0 : errno;
}

/* Take a slice's pages but those of the range left untaken. */
static int take_around(const struct populate *pp, uint64_t off, uint64_t n)
{
    uint64_t end = off + n, skip_end = pp->skip_off + pp->skip_len;
    if (pp->skip_len == 0 || skip_end <= off || pp->skip_off >= end)
        return take_range(pp->fd, off, n);
    int e = take_range(pp->fd, off, pp->skip_off > off ? pp->skip_off - off : 0);
    return e != 0 ? e : take_range(pp->fd, skip_end, end > skip_end ? end - skip_end : 0);
}

/* One slice's pages, taken only (fallocate) or writable: MADV_POPULATE_WRITE
 * (Linux 5.14), else a read of each page, which on a shared mapping faults
 * it in cleared. */
static int populate_slice(const struct populate *pp, uint64_t off, uint64_t n)
{
    uint8_t *p = pp->base + off;
    if (pp->take_only)
        return take_around(pp, off, n);
    if (madvise(p, n, MADV_POPULATE_WRITE) == 0)
        return 0;
    if (errno != EINVAL)
        return errno == EFAULT || errno == EHWPOISON ? EFAULT : errno; /* ENOMEM: out of RAM */
    for (uint64_t at = 0; at < n; at += 4096)
        (void)*(volatile uint8_t *)(p + at);
    return 0;
}

/* Ask the guard, with what is not populated yet still to come; a refusal
 * is recorded before the next thread may ask, so its message stays. */
static bool populate_fits(struct populate *pp)
{
    if (pp->guard == NULL || pp->guard->fits == NULL)
        return true;
    pthread_mutex_lock(&pp->guard_lock);
    bool ok = atomic_load(&pp->error) == 0 &&
              pp->guard->fits(pp->guard->ctx, pp->size - atomic_load(&pp->done), pp->err,
                              pp->err_len);
    if (!ok) {
        int none = 0;
        atomic_compare_exchange_strong(&pp->error, &none, ECANCELED);
    }
    pthread_mutex_unlock(&pp->guard_lock);
    return ok;
}

/* A quarter more of a region of 1 GiB or more is in: say so. */
static void populate_progress(struct populate *pp, uint64_t before, uint64_t after)
{
    uint64_t q = pp->size / 4;
    if (pp->size < SIZE_1G || before / q == after / q || after >= pp->size)
        return;
    char sz[32];
    RKV_INFO("region: %llu%% of %s populated after %.1f s", (unsigned long long)(after / q * 25),
             rkv_format_size(pp->size, sz, sizeof sz), (double)(rkv_now_ns() - pp->start_ns) / 1e9);
}

static void *populate_thread(void *arg)
{
    struct populate *pp = arg;
    for (;;) {
        uint64_t off = atomic_fetch_add(&pp->next, POPULATE_CHUNK);
        if (off >= pp->size || atomic_load(&pp->error) != 0)
            return NULL;
        uint64_t n = RKV_MIN(POPULATE_CHUNK, pp->size - off);
        int e = populate_fits(pp) ? populate_slice(pp, off, n) : ECANCELED;
        if (e != 0) {
            int none = 0;
            atomic_compare_exchange_strong(&pp->error, &none, e);
            return NULL;
        }
        uint64_t before = atomic_fetch_add(&pp->done, n);
        populate_progress(pp, before, before + n);
    }
}

/* CPUs this thread may run on (the populating threads inherit its memory
 * policy: the NIC's node when there is one), at least 1. */
static unsigned populate_threads(const struct rkv_region_guard *guard)
{
    if (guard != NULL && guard->populate_threads > 0)
        return guard->populate_threads;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return 1;
    return (unsigned)RKV_MAX(CPU_COUNT(&set), 1);
}

/* Populate the normal-page mapping `base` from up to that many threads.
 * Returns 0, an errno, or ECANCELED when the guard refused (message in err). */
static int region_populate(int fd, uint8_t *base, uint64_t size,
                           const struct rkv_region_guard *guard, char *err, size_t err_len)
{
    struct populate pp = { .base = base,
                           .size = size,
                           .fd = fd,
                           .take_only = guard != NULL && guard->clear_on_first_touch,
                           .guard = guard,
                           .err = err,
                           .err_len = err_len };
    if (pp.take_only && guard->untaken != NULL) {
        uint64_t off = 0, len = 0;
        guard->untaken(guard->ctx, size, &off, &len);
        off = RKV_MIN(off, size);
        uint64_t from = RKV_ALIGN_UP(off, PAGE_4K),
                 to = (off + RKV_MIN(len, size - off)) & ~(PAGE_4K - 1);
        if (to > from) {
            pp.skip_off = from;
            pp.skip_len = to - from;
        }
    }
    pthread_t tid[POPULATE_MAX_THREADS];
    unsigned want = RKV_MIN(populate_threads(guard), POPULATE_MAX_THREADS);
    unsigned n = (unsigned)RKV_MIN((uint64_t)want, (size + POPULATE_CHUNK - 1) / POPULATE_CHUNK);
    unsigned started = 0;
    char sz[32];
    pthread_mutex_init(&pp.guard_lock, NULL);
    pp.start_ns = rkv_now_ns();
    while (started + 1 < n && pthread_create(&tid[started], NULL, populate_thread, &pp) == 0)
        started++;
    populate_thread(&pp); /* this thread is one of them */
    for (unsigned i = 0; i < started; i++)
        pthread_join(tid[i], NULL);
    pthread_mutex_destroy(&pp.guard_lock);
    uint64_t ns = rkv_now_ns() - pp.start_ns;
    if (atomic_load(&pp.error) == 0)
        RKV_INFO("region: %s %s in %.3f s by %u thread(s) (%.2f GB/s)",
                 rkv_format_size(size, sz, sizeof sz),
                 pp.take_only ? "taken (cleared at first touch)" : "populated", (double)ns / 1e9,
                 started + 1, ns ? (double)size / (double)ns : 0.0);
    return atomic_load(&pp.error);
}

/* Keep the region in RAM where RLIMIT_MEMLOCK (or CAP_IPC_LOCK) allows:
 * hugetlb pages are all there already, so mlock() only marks them; normal
 * pages are locked as region_populate() faults them in (MLOCK_ONFAULT), so
 * locking costs no walk of its own. Otherwise say once that the region
 * may be swapped out. */
static void region_pin(void *base, uint64_t size, bool huge)
{
    char sz[32];
    if ((huge ? mlock(base, size) : mlock2(base, size, MLOCK_ONFAULT)) == 0)
        return;
    RKV_INFO("region: %s not locked in RAM (mlock: %s): it is populated but may be swapped "
             "out under memory pressure; raise the memlock limit (LimitMEMLOCK=infinity, "
             "`ulimit -l unlimited`) to lock it",
             rkv_format_size(size, sz, sizeof sz), strerror(errno));
}

/* Size the memfd, take every page now and map it. Returns 0 or an errno. */
static int region_map(int fd, uint64_t size, bool huge, const struct rkv_region_guard *guard,
                      void **base, char *err, size_t err_len)
{
    if (ftruncate(fd, (off_t)size) != 0)
        return errno;
    int e = huge ? region_take_huge(fd, size) : 0;
    if (e != 0)
        return e;
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | (huge ? MAP_POPULATE : 0), fd, 0);
    if (p == MAP_FAILED)
        return errno;
    region_pin(p, size, huge);
    if (!huge && (e = region_populate(fd, p, size, guard, err, err_len)) != 0) {
        munmap(p, size);
        return e;
    }
    *base = p;
    return 0;
}

/* The descriptor clients get: opened O_RDONLY through /proc while the memfd
 * still has its creation mode (region_seal() takes that away). */
static int region_open_readonly(int fd)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    return open(path, O_RDONLY | O_CLOEXEC);
}

/* Make the server's mapping (made before) the only way to write the memfd:
 * mode 0 and the seals in the file comment. Returns 0 or an errno. */
static int region_seal(int fd)
{
    if (fchmod(fd, 0) != 0)
        return errno;
    if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL) == 0)
        return 0;
    return errno;
}

/* Free / total 2 MiB hugepages from sysfs, 0/0 when unknown. */
static void hugepages_2m(uint64_t *free_pages, uint64_t *total_pages)
{
    static const char *const files[2] = {
        "/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages",
        "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages",
    };
    uint64_t *outs[2] = { free_pages, total_pages };
    for (int i = 0; i < 2; i++) {
        *outs[i] = 0;
        FILE *f = fopen(files[i], "re");
        if (f == NULL)
            continue;
        unsigned long long v;
        if (fscanf(f, "%llu", &v) == 1)
            *outs[i] = v;
        fclose(f);
    }
}

/* Try one page kind; 0 and a filled region, or the errno of the step that
 * failed (the caller falls through to the next kind). *sealing tells that
 * the memory was there but could not be made read-only for clients. */
static int region_try(const struct page_kind *k, uint64_t size, const struct rkv_region_guard *guard,
                      struct rkv_region *out, bool *sealing, char *err, size_t err_len)
{
    uint64_t rounded = RKV_ALIGN_UP(size, k->page);
    int fd = region_memfd(k->mfd_flags);
    if (fd < 0)
        return errno;
    void *base = NULL;
    int ro_fd = -1;
    int e = region_map(fd, rounded, k->mfd_flags != 0, guard, &base, err, err_len);
    *sealing = e == 0;
    if (e == 0 && (ro_fd = region_open_readonly(fd)) < 0)
        e = errno;
    if (e == 0)
        e = region_seal(fd);
    if (e != 0) {
        if (base != NULL)
            munmap(base, rounded);
        if (ro_fd >= 0)
            close(ro_fd);
        close(fd);
        return e;
    }
    out->base = base;
    out->size = rounded;
    out->fd = fd;
    out->ro_fd = ro_fd;
    out->hugepages = k->mfd_flags != 0;
    return 0;
}

rkv_status rkv_region_create(uint64_t size, struct rkv_region *out, char *err, size_t err_len)
{
    return rkv_region_create_guarded(size, NULL, out, err, err_len);
}

rkv_status rkv_region_create_guarded(uint64_t size, const struct rkv_region_guard *guard,
                                     struct rkv_region *out, char *err, size_t err_len)
{
    static const struct page_kind kinds[] = {
        { "1 GiB hugepages", MFD_HUGETLB | MFD_HUGE_1GB, SIZE_1G },
        { "2 MiB hugepages", MFD_HUGETLB | MFD_HUGE_2MB, SIZE_2M },
        { "normal pages", 0, 4096 },
    };
    char sz[32];
    int huge_err = 0;

    memset(out, 0, sizeof(*out));
    out->fd = out->ro_fd = -1;
    if (size == 0 || size > (uint64_t)SIZE_MAX / 2) {
        snprintf(err, err_len,
                 "region size %llu is out of range; give a size between 4 KiB and the machine's memory",
                 (unsigned long long)size);
        return RKV_INVALID;
    }
    rkv_format_size(size, sz, sizeof(sz));
    for (size_t i = 0; i < RKV_ARRAY_SIZE(kinds); i++) {
        const struct page_kind *k = &kinds[i];
        if (k->page == SIZE_1G && size % SIZE_1G != 0)
            continue;
        bool sealing = false;
        int e = region_try(k, size, guard, out, &sealing, err, err_len);
        if (e == 0) {
            if (out->hugepages) {
                RKV_INFO("region: %s on %s", sz, k->name);
            } else if (huge_err != 0) {
                uint64_t free_pages, total_pages;
                uint64_t need = RKV_ALIGN_UP(size, SIZE_2M) / SIZE_2M;
                hugepages_2m(&free_pages, &total_pages);
                uint64_t want = total_pages + (need > free_pages ? need - free_pages : 0);
                RKV_WARN("region: %s uses normal 4 KiB pages because 2 MiB hugepages are short "
                         "(%llu free, %llu needed: %s); for fewer TLB misses and faster RDMA "
                         "registration reserve them with `echo %llu > /proc/sys/vm/nr_hugepages` "
                         "(or vm.nr_hugepages in sysctl.conf) and restart",
                         sz, (unsigned long long)free_pages, (unsigned long long)need,
                         strerror(huge_err), (unsigned long long)want);
            }
            return RKV_OK;
        }
        if (e == ECANCELED)
            return RKV_NO_MEMORY; /* the guard's message is in err */
        if (k->mfd_flags == 0 && sealing) {
            snprintf(err, err_len,
                     "cannot make the %s region read-only for clients (%s): rkv "
                     "needs Linux 5.1 or later (memfd F_SEAL_FUTURE_WRITE) and /proc mounted",
                     sz, strerror(e));
            return RKV_INTERNAL;
        }
        if (k->mfd_flags == 0) {
            snprintf(err, err_len,
                     "cannot allocate the %s region (%s); lower the configured memory "
                     "size or free memory on this host",
                     sz, strerror(e));
            return RKV_NO_MEMORY;
        }
        huge_err = e;
        RKV_DEBUG("region: %s not available for %s: %s", k->name, sz, strerror(e));
    }
    snprintf(err, err_len, "no page kind could back the %s region", sz);
    return RKV_INTERNAL;
}

int rkv_region_take(const struct rkv_region *r, uint64_t off, uint64_t len)
{
    if (r->fd < 0 || r->hugepages || off > r->size || len > r->size - off)
        return EINVAL;
    uint64_t from = off / PAGE_4K * PAGE_4K, to = RKV_MIN(RKV_ALIGN_UP(off + len, PAGE_4K), r->size);
    return take_range(r->fd, from, to - from);
}

void rkv_region_destroy(struct rkv_region *r)
{
    if (r->base == NULL) /* zeroed, failed or already destroyed */
        return;
    munmap(r->base, r->size);
    if (r->fd >= 0)
        close(r->fd);
    if (r->ro_fd >= 0)
        close(r->ro_fd);
    r->base = NULL;
    r->size = 0;
    r->fd = r->ro_fd = -1;
    r->hugepages = false;
}

int rkv_region_readonly_fd(const struct rkv_region *r)
{
    if (r->ro_fd < 0) {
        errno = EBADF;
        return -1;
    }
    return fcntl(r->ro_fd, F_DUPFD_CLOEXEC, 0);
}

int rkv_region_hold_liveness(struct rkv_region_header *h, char *err, size_t err_len)
{
    RKV_STATIC_ASSERT(sizeof(pthread_mutex_t) <= sizeof h->liveness, "mutex fits the liveness slot");
    pthread_mutex_t *m = (pthread_mutex_t *)(void *)h->liveness;
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    int rc = pthread_mutex_init(m, &a);
    pthread_mutexattr_destroy(&a);
    if (rc == 0)
        rc = pthread_mutex_lock(m);
    if (rc != 0 || !rkv_region_server_alive(h)) {
        snprintf(err, err_len, "cannot take the region's liveness lock: %s",
                 strerror(rc ? rc : EINVAL));
        return -1;
    }
    return 0;
}

void rkv_region_release_liveness(struct rkv_region_header *h)
{
    pthread_mutex_unlock((pthread_mutex_t *)(void *)h->liveness);
}
