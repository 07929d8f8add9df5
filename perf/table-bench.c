/* table-bench.c — how many PUTs a second one table takes from T threads.
 *
 * In-process, no transport: T writer threads (thread i pinned to CPU
 * i mod the CPUs this process may use) apply SETs of keys drawn uniformly
 * from K keys (16-byte keys, 32-byte values) to one table that was filled
 * with all K keys first, so nearly every PUT replaces an item: build it,
 * publish it, retire the old one. Each run is a fixed number of PUTs per
 * thread (-n) or a fixed time (-s). The thread counts given with -t run in
 * turn, -r rounds of them (1, 2, 1, 2, ...), so that load from other
 * processes on a shared machine falls on every count alike; the summary is
 * each count's median and its ratio to the first count's. Each run also
 * says how many CPUs its writers got (CPU time / wall time) and PUTs per
 * CPU-second: on a machine shared with other work, a count that got fewer
 * CPUs than threads was starved, not slowed by the table. With -n, a run of
 * several threads also says which share of it came after the first writer
 * was done (`tail`): writers that run at different speeds (a VM's vCPUs on
 * unequally busy host cores) leave the slowest one alone at the end, which
 * lowers `cpus` and the rate without any waiting in the table. One run of the
 * first count before the rounds warms the heap (limbo reuse) and is not
 * counted.
 *
 * -e picks the eviction policy (default lru, as rkv-server): with eviction
 * on, each PUT also checks its class's evict-ahead reserve. -m sets the
 * region size in MiB: by default it holds every key twice over, so nothing
 * is evicted; smaller than the keys need, every run evicts (a full cache, the
 * usual state of a server), and each run line says how many.
 *
 * -l times every lock hold and wait (rkv_table_config.lock_timing) and
 * prints, per kind (a write's bucket stripes, the whole index, the slab
 * allocator's class and page locks), acquisitions per PUT, the mean hold, the
 * share of acquisitions that found the lock taken, their mean wait and the
 * longest hold; timing costs clock reads per hold, so throughput runs go
 * without it.
 *
 * A measuring tool for developers; not installed.
 *
 *   table-bench [-t 1,2] [-k KEYS] [-n PUTS_PER_THREAD | -s SECONDS] [-r ROUNDS] [-e none|lru|random]
 *               [-m REGION_MIB] [-l]
 */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "region.h"
#include "table.h"
#include "util.h"

#define KEY_LEN     16u
#define VALUE_LEN   32u
#define MAX_THREADS 64u
#define MAX_ROUNDS  64u
#define CLASS_BYTES 128u /* a 16 + 32 byte item's size class, for sizing the region */

struct options {
    unsigned threads[MAX_THREADS];
    unsigned counts; /* entries in threads[] */
    uint64_t keys;
    uint64_t puts; /* per thread per run; 0 with seconds */
    uint64_t seconds;
    unsigned rounds;
    bool lock_timing;
    enum rkv_evict_policy evict;
    uint64_t region_mib; /* 0: room for every key twice over */
};

struct bench {
    struct rkv_table *t;
    const struct options *o;
    int go;    /* writers start when set (atomic) */
    int stop;  /* -s: writers stop when set (atomic) */
    int ready; /* writers pinned and waiting (atomic) */
};

/* One writer thread's state, on lines of its own: done and failed change on
 * every PUT, and a line shared with the next writer's would be traffic the
 * table does not cause. */
struct writer {
    struct bench *b;
    pthread_t tid;
    unsigned id;
    int cpu; /* -1: not pinned */
    uint64_t done, failed, ns, cpu_ns;
} __attribute__((aligned(RKV_CACHELINE)));

/* CPU time this thread has run, in ns. */
static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Key k as KEY_LEN bytes: 'k' and 15 hex digits (no division: the key's
 * making should cost little next to the PUT it is for). */
static void key_of(uint64_t k, uint8_t key[KEY_LEN])
{
    static const char hex[] = "0123456789abcdef";
    key[0] = 'k';
    for (unsigned i = KEY_LEN - 1; i > 0; i--, k >>= 4)
        key[i] = (uint8_t)hex[k & 15];
}

static uint64_t next_rand(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static void *writer_main(void *p)
{
    struct writer *w = p;
    struct bench *b = w->b;
    uint8_t key[KEY_LEN], value[VALUE_LEN];
    uint64_t x = 0x9e3779b97f4a7c15ull * (w->id + 1) + (uint64_t)w->cpu;
    struct rkv_value_src src = { .data = value, .len = VALUE_LEN };

    if (w->cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(w->cpu, &set);
        pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    }
    memset(value, 'v', sizeof value);
    __atomic_add_fetch(&b->ready, 1, __ATOMIC_RELEASE);
    while (!__atomic_load_n(&b->go, __ATOMIC_ACQUIRE))
        sched_yield();
    uint64_t start = rkv_now_ns(), cpu = thread_cpu_ns();
    for (uint64_t i = 0; b->o->puts == 0 || i < b->o->puts; i++) {
        if (b->o->puts == 0 && (i & 255) == 0 && __atomic_load_n(&b->stop, __ATOMIC_RELAXED))
            break;
        key_of(next_rand(&x) % b->o->keys, key);
        memcpy(value, &i, sizeof i);
        w->failed += rkv_table_put(b->t, key, KEY_LEN, &src, RKV_SET, 0, 0, 0, NULL) != RKV_OK;
        w->done++;
    }
    w->ns = rkv_now_ns() - start;
    w->cpu_ns = thread_cpu_ns() - cpu;
    return NULL;
}

/* The CPUs this process may run on, in order; how many. */
static unsigned allowed_cpus(int *cpus, unsigned cap)
{
    cpu_set_t set;
    unsigned n = 0;
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return 0;
    for (int c = 0; c < CPU_SETSIZE && n < cap; c++)
        if (CPU_ISSET(c, &set))
            cpus[n++] = c;
    return n;
}

/* One kind of lock over a run: acquisitions per PUT, mean hold, the share
 * that found it taken, the mean wait of those, the longest hold so far. */
static void lock_line(const char *kind, const struct rkv_lock_stats *before,
                      const struct rkv_lock_stats *after, uint64_t puts)
{
    uint64_t holds = after->holds - before->holds, waits = after->contended - before->contended;
    printf("    lock %-7s  %6.3f per PUT  hold %6.0f ns  contended %6.3f %%  wait %7.0f ns  "
           "max hold %.1f us\n",
           kind, puts ? (double)holds / (double)puts : 0.0,
           holds ? (double)(after->hold_ns - before->hold_ns) / (double)holds : 0.0,
           holds ? 100.0 * (double)waits / (double)holds : 0.0,
           waits ? (double)(after->wait_ns - before->wait_ns) / (double)waits : 0.0,
           (double)after->hold_max_ns / 1e3);
}

/* One run with `threads` writers: PUTs a second, all threads together. */
static double run(struct rkv_table *t, const struct options *o, unsigned threads)
{
    static struct writer w[MAX_THREADS];
    int cpus[CPU_SETSIZE];
    unsigned ncpu = allowed_cpus(cpus, CPU_SETSIZE);
    struct bench b = { .t = t, .o = o };
    struct rkv_table_stats before, after;

    rkv_table_get_stats(t, &before);
    for (unsigned i = 0; i < threads; i++) {
        w[i] = (struct writer){ .b = &b, .id = i, .cpu = ncpu ? cpus[i % ncpu] : -1 };
        if (pthread_create(&w[i].tid, NULL, writer_main, &w[i]) != 0) {
            fprintf(stderr, "table-bench: cannot start writer thread %u\n", i);
            exit(1);
        }
    }
    while (__atomic_load_n(&b.ready, __ATOMIC_ACQUIRE) < (int)threads)
        sched_yield();
    uint64_t start = rkv_now_ns();
    __atomic_store_n(&b.go, 1, __ATOMIC_RELEASE);
    if (o->puts == 0) {
        struct timespec ts = { .tv_sec = (time_t)o->seconds };
        nanosleep(&ts, NULL);
        __atomic_store_n(&b.stop, 1, __ATOMIC_RELAXED);
    }
    uint64_t done = 0, failed = 0, cpu_ns = 0, first_ns = UINT64_MAX, last_ns = 0;
    for (unsigned i = 0; i < threads; i++) {
        pthread_join(w[i].tid, NULL);
        done += w[i].done;
        failed += w[i].failed;
        cpu_ns += w[i].cpu_ns;
        first_ns = RKV_MIN(first_ns, w[i].ns);
        last_ns = RKV_MAX(last_ns, w[i].ns);
    }
    double secs = (double)(rkv_now_ns() - start) / 1e9;
    double rate = (double)done / secs;
    double load[3] = { 0 };
    if (getloadavg(load, 3) < 1)
        load[0] = -1;
    rkv_table_get_stats(t, &after);
    printf("threads %2u  puts %9llu  %6.3f s  %10.0f puts/s  %9.0f per thread  cpus %.2f  "
           "%8.0f puts/cpu-s  load %.2f",
           threads, (unsigned long long)done, secs, rate, rate / threads,
           (double)cpu_ns / 1e9 / secs, (double)done / ((double)cpu_ns / 1e9), load[0]);
    if (threads > 1 && o->puts != 0) /* the share of the run after the first writer finished */
        printf("  tail %.0f %%",
               last_ns ? 100.0 * (double)(last_ns - first_ns) / (double)last_ns : 0.0);
    if (after.evictions != before.evictions)
        printf("  evicted %llu", (unsigned long long)(after.evictions - before.evictions));
    if (failed)
        printf("  FAILED %llu", (unsigned long long)failed);
    printf("\n");
    if (o->lock_timing) {
        lock_line("stripes", &before.lock_stripes, &after.lock_stripes, done);
        lock_line("index", &before.lock_index, &after.lock_index, done);
        lock_line("slab", &before.lock_slab, &after.lock_slab, done);
    }
    fflush(stdout);
    return rate;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int usage(const char *why)
{
    fprintf(stderr,
            "table-bench: %s\n"
            "usage: table-bench [-t THREADS,...] [-k KEYS] [-n PUTS_PER_THREAD | -s SECONDS] "
            "[-r ROUNDS] [-e none|lru|random] [-m REGION_MIB] [-l]\n"
            "  -t  thread counts to compare, at most %u each (default 1,2)\n"
            "  -k  distinct keys (default 100000)\n"
            "  -n  PUTs per thread per run (default 1000000)\n"
            "  -s  seconds per run instead of -n\n"
            "  -r  rounds of all thread counts, alternating (default 3, at most %u)\n"
            "  -e  eviction policy (default lru)\n"
            "  -m  region size in MiB (default: every key fits twice; smaller evicts)\n"
            "  -l  time lock holds and waits per kind\n",
            why, MAX_THREADS, MAX_ROUNDS);
    return 2;
}

static bool parse_threads(char *arg, struct options *o)
{
    o->counts = 0;
    for (char *save = NULL, *tok = strtok_r(arg, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        uint64_t v;
        if (o->counts == MAX_THREADS || !rkv_parse_u64(tok, 1, MAX_THREADS, &v))
            return false;
        o->threads[o->counts++] = (unsigned)v;
    }
    return o->counts > 0;
}

int main(int argc, char **argv)
{
    struct options o = {
        .threads = { 1, 2 }, .counts = 2, .keys = 100000, .puts = 1000000, .rounds = 3, .evict = RKV_EVICT_LRU
    };
    uint64_t v;
    int opt;

    rkv_log_set_level(RKV_LOG_ERROR);
    while ((opt = getopt(argc, argv, "t:k:n:s:r:e:m:l")) != -1) {
        switch (opt) {
        case 't':
            if (!parse_threads(optarg, &o))
                return usage("-t wants a comma-separated list of thread counts, 1..64 each");
            break;
        case 'k':
            if (!rkv_parse_u64(optarg, 1, 1ull << 26, &o.keys))
                return usage("-k wants a key count in 1..67108864");
            break;
        case 'n':
            if (!rkv_parse_u64(optarg, 1, 1ull << 40, &o.puts))
                return usage("-n wants a positive number of PUTs");
            o.seconds = 0;
            break;
        case 's':
            if (!rkv_parse_u64(optarg, 1, 3600, &o.seconds))
                return usage("-s wants seconds in 1..3600");
            o.puts = 0;
            break;
        case 'r':
            if (!rkv_parse_u64(optarg, 1, MAX_ROUNDS, &v))
                return usage("-r wants a number of rounds in 1..64");
            o.rounds = (unsigned)v;
            break;
        case 'e':
            if (strcmp(optarg, "none") == 0)
                o.evict = RKV_EVICT_NONE;
            else if (strcmp(optarg, "lru") == 0)
                o.evict = RKV_EVICT_LRU;
            else if (strcmp(optarg, "random") == 0)
                o.evict = RKV_EVICT_RANDOM;
            else
                return usage("-e wants none, lru or random");
            break;
        case 'l': o.lock_timing = true; break;
        case 'm':
            if (!rkv_parse_u64(optarg, 4, 1ull << 20, &o.region_mib))
                return usage("-m wants a region size in MiB, 4..1048576");
            break;
        default: return usage("unknown option");
        }
    }
    if (optind != argc)
        return usage("unexpected argument");

    /* Twice the items' class bytes, plus the index at one slot per item
     * and a bit: room enough that no PUT evicts or waits for the limbo. */
    uint64_t heap = RKV_ALIGN_UP(2 * o.keys * CLASS_BYTES + (8ull << 20), 2ull << 20);
    struct rkv_table_config c = { .lock_timing = o.lock_timing, .grace_ms = 10, .evict = o.evict };
    struct rkv_region region;
    struct rkv_table *t = NULL;
    char err[512];
    uint8_t key[KEY_LEN], value[VALUE_LEN] = { 0 };
    struct rkv_value_src src = { .data = value, .len = VALUE_LEN };

    uint64_t region_bytes = o.region_mib ? o.region_mib << 20 : heap * 2;
    if (rkv_region_create(region_bytes, &region, err, sizeof err) != RKV_OK ||
        rkv_table_create(region.base, region.size, &c, &t, err, sizeof err) != RKV_OK) {
        fprintf(stderr, "table-bench: %s\n", err);
        return 1;
    }
    for (uint64_t k = 0; k < o.keys; k++) {
        key_of(k, key);
        rkv_status st = rkv_table_put(t, key, KEY_LEN, &src, RKV_SET, 0, 0, 0, NULL);
        if (st != RKV_OK) {
            fprintf(stderr, "table-bench: filling key %llu of %llu failed with status %d\n",
                    (unsigned long long)k, (unsigned long long)o.keys, st);
            return 1;
        }
    }
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    static const char *const policy[] = { "none", "lru", "random" };
    printf("table-bench: %llu keys of %u B, %u B values, %s per run, evict %s, %ld CPUs online\n",
           (unsigned long long)o.keys, KEY_LEN, VALUE_LEN, o.puts ? "fixed PUTs" : "fixed time",
           policy[o.evict], ncpu);

    static double rates[MAX_THREADS][MAX_ROUNDS];
    printf("warm-up (not counted): ");
    run(t, &o, o.threads[0]);
    for (unsigned r = 0; r < o.rounds; r++)
        for (unsigned i = 0; i < o.counts; i++)
            rates[i][r] = run(t, &o, o.threads[i]);

    printf("median of %u rounds:\n", o.rounds);
    double first = 0;
    for (unsigned i = 0; i < o.counts; i++) {
        qsort(rates[i], o.rounds, sizeof(double), cmp_double);
        double med = rates[i][o.rounds / 2];
        if (i == 0)
            first = med;
        printf("threads %2u  %10.0f puts/s  %.2fx threads %u\n", o.threads[i], med, med / first,
               o.threads[0]);
    }
    rkv_table_destroy(t);
    rkv_region_destroy(&region);
    return 0;
}
