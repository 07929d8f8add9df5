/* test_memory_budget.c — server/memory_budget.c against fixtures: parsing
 * /proc/meminfo, cgroup v1 and v2 files, /proc/self/cgroup with
 * /proc/self/mountinfo, the walk up a (fake) cgroup tree taking the tightest
 * limit; the arithmetic of need, room, the check's message and the largest
 * accepted --memory; and the region population guard (region.c) stopping
 * creation with its message.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "memory_budget.h"
#include "region.h"
#include "shm_ring.h"
#include "slab.h"
#include "table.h"
#include "util.h"

#define MIB (1ull << 20)
#define GIB (1ull << 30)

/* ------------------------------------------------------------ parsing */

static const char meminfo[] = "MemTotal:       24684084 kB\n"
                              "MemFree:        24075560 kB\n"
                              "MemAvailable:   22340864 kB\n"
                              "Buffers:           11472 kB\n";

static void test_meminfo(void **state)
{
    (void)state;
    uint64_t t, a;
    assert_true(rkv_meminfo_parse(meminfo, &t, &a));
    assert_int_equal(t, 24684084ull * 1024);
    assert_int_equal(a, 22340864ull * 1024);
    /* before 3.14 there is no MemAvailable: unknown, not zero */
    assert_false(rkv_meminfo_parse("MemTotal: 100 kB\nMemFree: 50 kB\n", &t, &a));
    assert_false(rkv_meminfo_parse("MemAvailable: lots\n", &t, &a));
    assert_false(rkv_meminfo_parse("MemAvailable: 12 MB\n", &t, &a));
    assert_false(rkv_meminfo_parse("", &t, &a));
    assert_false(rkv_meminfo_parse(NULL, &t, &a));
    /* a key only matches at a line start */
    assert_false(rkv_meminfo_parse("XMemAvailable: 5 kB\n", &t, &a));
}

static void test_cgroup_values(void **state)
{
    (void)state;
    uint64_t v;
    assert_true(rkv_cgroup_parse_value("2147483648\n", &v));
    assert_int_equal(v, 2 * GIB);
    assert_true(rkv_cgroup_parse_value("max\n", &v)); /* v2 */
    assert_true(v == RKV_MEM_UNLIMITED);
    assert_true(rkv_cgroup_parse_value("9223372036854771712\n", &v)); /* v1 "no limit" */
    assert_true(v == RKV_MEM_UNLIMITED);
    assert_false(rkv_cgroup_parse_value("12abc\n", &v));
    assert_false(rkv_cgroup_parse_value("maximum\n", &v));
    assert_false(rkv_cgroup_parse_value("", &v));
    assert_false(rkv_cgroup_parse_value("-1\n", &v));

    static const char stat_v1[] = "cache 4096\ninactive_file 100\ntotal_inactive_file 8192\n";
    assert_true(rkv_cgroup_stat_value(stat_v1, "total_inactive_file", &v));
    assert_int_equal(v, 8192);
    assert_true(rkv_cgroup_stat_value(stat_v1, "inactive_file", &v));
    assert_int_equal(v, 100);
    assert_false(rkv_cgroup_stat_value(stat_v1, "active_file", &v));
}

static const char mountinfo_v1[] =
    "23 1 0:21 / / rw - ext4 /dev/vda rw\n"
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
    "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
static const char proc_cgroup_v1[] = "8:pids:/\n"
                                     "4:memory:/process_api/abc\n"
                                     "1:cpu:/\n"
                                     "0::/\n";

static void test_locate(void **state)
{
    (void)state;
    char mount[512], dir[1024];
    /* v1 memory wins over the v2 hierarchy that has no memory controller */
    assert_int_equal(rkv_cgroup_locate(proc_cgroup_v1, mountinfo_v1, mount, sizeof mount, dir,
                                       sizeof dir),
                     1);
    assert_string_equal(mount, "/sys/fs/cgroup/memory");
    assert_string_equal(dir, "/sys/fs/cgroup/memory/process_api/abc");

    /* pure v2, with a mount point that needs unescaping and a container
     * whose mount root is its own cgroup */
    static const char mi_v2[] =
        "30 23 0:26 /kubepods/pod1 /sys/fs/cgroup\\040x rw - cgroup2 cgroup2 rw,nsdelegate\n";
    assert_int_equal(rkv_cgroup_locate("0::/kubepods/pod1/app\n", mi_v2, mount, sizeof mount, dir,
                                       sizeof dir),
                     2);
    assert_string_equal(mount, "/sys/fs/cgroup x");
    assert_string_equal(dir, "/sys/fs/cgroup x/app");
    /* the root cgroup itself */
    assert_int_equal(rkv_cgroup_locate("0::/\n", "1 0 0:1 / /cg rw - cgroup2 none rw\n", mount,
                                       sizeof mount, dir, sizeof dir),
                     2);
    assert_string_equal(dir, "/cg");

    /* outside the mounted subtree, or nothing mounted: unknown */
    assert_int_equal(rkv_cgroup_locate("0::/other\n", mi_v2, mount, sizeof mount, dir, sizeof dir),
                     0);
    assert_int_equal(rkv_cgroup_locate("0::/kubepods/pod10\n", mi_v2, mount, sizeof mount, dir,
                                       sizeof dir),
                     0);
    assert_int_equal(rkv_cgroup_locate(proc_cgroup_v1, "23 1 0:21 / / rw - ext4 /dev/vda rw\n",
                                       mount, sizeof mount, dir, sizeof dir),
                     0);
    /* "memory" must be a whole controller name */
    assert_int_equal(rkv_cgroup_locate("4:memoryx:/a\n", mountinfo_v1, mount, sizeof mount, dir,
                                       sizeof dir),
                     0);
    assert_int_equal(rkv_cgroup_locate(NULL, mountinfo_v1, mount, sizeof mount, dir, sizeof dir), 0);
}

/* ------------------------------------------------------------ a fake cgroup tree */

static char root[64];

static void put(const char *rel, const char *text)
{
    char path[1024];
    snprintf(path, sizeof path, "%s%s", root, rel);
    for (char *s = strchr(path + strlen(root) + 1, '/'); s; s = strchr(s + 1, '/')) {
        *s = '\0';
        mkdir(path, 0755);
        *s = '/';
    }
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static int tree_setup(void **state)
{
    (void)state;
    snprintf(root, sizeof root, "/tmp/rkv-membudget-XXXXXX");
    return mkdtemp(root) ? 0 : -1;
}

static int tree_teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    return system(cmd) == 0 ? 0 : -1;
}

static void test_cgroup_read_v1_tightest_ancestor(void **state)
{
    (void)state;
    struct rkv_mem_cgroup cg;
    const char *m = "/sys/fs/cgroup/memory";
    put("/sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
    put("/sys/fs/cgroup/memory/memory.usage_in_bytes", "999999999\n");
    /* the parent is the tight one: 2 GiB, 1.5 GiB used (0.25 GiB of it
     * reclaimable cache) leaves 0.75 GiB; the leaf's own 4 GiB leaves more */
    put("/sys/fs/cgroup/memory/a/memory.limit_in_bytes", "2147483648\n");
    put("/sys/fs/cgroup/memory/a/memory.usage_in_bytes", "1610612736\n");
    put("/sys/fs/cgroup/memory/a/memory.stat", "cache 1\ntotal_inactive_file 268435456\n");
    put("/sys/fs/cgroup/memory/a/b/memory.limit_in_bytes", "4294967296\n");
    put("/sys/fs/cgroup/memory/a/b/memory.usage_in_bytes", "1048576\n");
    rkv_cgroup_read(root, m, "/sys/fs/cgroup/memory/a/b", 1, &cg);
    assert_true(cg.known);
    assert_int_equal(cg.version, 1);
    assert_int_equal(cg.limit, 2 * GIB);
    assert_string_equal(cg.dir, "/sys/fs/cgroup/memory/a");
    assert_int_equal(rkv_mem_cgroup_room(&cg), 2 * GIB - (1536 * MIB - 256 * MIB));

    /* no level limited: unknown */
    rkv_cgroup_read(root, m, "/sys/fs/cgroup/memory", 1, &cg);
    assert_false(cg.known);
    assert_true(rkv_mem_cgroup_room(&cg) == RKV_MEM_UNLIMITED);
    /* a dir outside the mount, a bad version: unknown */
    rkv_cgroup_read(root, m, "/elsewhere/a", 1, &cg);
    assert_false(cg.known);
    rkv_cgroup_read(root, m, "/sys/fs/cgroup/memory/a", 3, &cg);
    assert_false(cg.known);
}

static void test_cgroup_read_v2(void **state)
{
    (void)state;
    struct rkv_mem_cgroup cg;
    put("/cg2/memory.current", "123\n"); /* the root has no memory.max */
    put("/cg2/sys.slice/memory.max", "max\n");
    put("/cg2/sys.slice/memory.current", "5000\n");
    put("/cg2/sys.slice/rkv.service/memory.max", "536870912\n");
    put("/cg2/sys.slice/rkv.service/memory.current", "104857600\n");
    put("/cg2/sys.slice/rkv.service/memory.stat", "anon 1\ninactive_file 4194304\nactive_file 9\n");
    rkv_cgroup_read(root, "/cg2", "/cg2/sys.slice/rkv.service", 2, &cg);
    assert_true(cg.known);
    assert_int_equal(cg.version, 2);
    assert_int_equal(cg.limit, 512 * MIB);
    assert_int_equal(cg.usage, 100 * MIB);
    assert_int_equal(cg.reclaimable, 4 * MIB);
    assert_int_equal(rkv_mem_cgroup_room(&cg), 512 * MIB - 96 * MIB);
    /* over its limit (usage can exceed it briefly): no room, not a wrap */
    put("/cg2/sys.slice/rkv.service/memory.current", "636870912\n");
    rkv_cgroup_read(root, "/cg2", "/cg2/sys.slice/rkv.service", 2, &cg);
    assert_int_equal(rkv_mem_cgroup_room(&cg), 0);
}

/* rkv_mem_probe on a whole fake machine: procfs and sysfs side by side. */
static void test_probe_fake_machine(void **state)
{
    (void)state;
    char procfs[128], sysfs[128];
    struct rkv_mem_env env;
    put("/proc/meminfo", meminfo);
    put("/proc/self/cgroup", "0::/job\n");
    put("/proc/self/mountinfo", "30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
    put("/proc/self/status", "Name:\tx\nCapEff:\t0000000000000000\n");
    put("/sys/fs/cgroup/job/memory.max", "1073741824\n");
    put("/sys/fs/cgroup/job/memory.current", "0\n");
    put("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages", "100\n");
    put("/sys/kernel/mm/hugepages/hugepages-2048kB/resv_hugepages", "30\n");
    put("/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages", "120\n");
    snprintf(procfs, sizeof procfs, "%s/proc", root);
    snprintf(sysfs, sizeof sysfs, "%s/sys", root);
    rkv_mem_probe(procfs, sysfs, &env);
    assert_true(env.meminfo_known);
    assert_int_equal(env.mem_available, 22340864ull * 1024);
    assert_true(env.cgroup.known);
    assert_int_equal(env.cgroup.limit, GIB);
    assert_string_equal(env.cgroup.dir, "/sys/fs/cgroup/job");
    assert_int_equal(env.huge[0].page_size, 2 * MIB);
    assert_int_equal(env.huge[0].free_pages, 70); /* reserved pages are taken */
    assert_int_equal(env.huge[0].total_pages, 120);
    assert_int_equal(env.huge[1].page_size, 0); /* no 1 GiB pool */
    assert_false(env.cap_ipc_lock);
}

/* ------------------------------------------------------------ arithmetic */

static void config_for(struct rkv_server_config *c, const char *listen)
{
    rkv_server_config_defaults(c);
    snprintf(c->listen[0].uri, sizeof c->listen[0].uri, "%s", listen);
    c->listen_count = 1;
    c->max_value_len = c->slab_page_size - 40 - 250;
}

static void env_ram(struct rkv_mem_env *e, uint64_t available)
{
    memset(e, 0, sizeof *e);
    e->meminfo_known = true;
    e->mem_total = available + GIB;
    e->mem_available = available;
    e->memlock = RKV_MEM_UNLIMITED;
}

static void test_headroom(void **state)
{
    (void)state;
    assert_int_equal(rkv_mem_headroom(32 * MIB), 32 * MIB);  /* all of a tiny amount */
    assert_int_equal(rkv_mem_headroom(256 * MIB), 64 * MIB); /* the floor */
    assert_int_equal(rkv_mem_headroom(32 * GIB), 2 * GIB);   /* 1/16 */
}

static void test_need_shm(void **state)
{
    (void)state;
    struct rkv_server_config c;
    struct rkv_mem_env e;
    struct rkv_mem_need n;
    struct rkv_shm_layout l;
    char err[160];
    config_for(&c, "shm:///tmp/x.sock");
    c.max_conns = 10;
    c.workers = 2;
    env_ram(&e, 100 * GIB);
    rkv_mem_need_compute(&c, 1 * GIB, &e, &n);
    assert_int_equal(n.page_size, 4096);
    assert_int_equal(n.region, GIB);
    assert_int_equal(n.page_tables, GIB / 4096 * 8);
    /* s3fifo: an 8-byte free-queue entry and two 4-byte words per smallest
     * item, plus 72 bytes per slab page, plus the magazines of the 2 workers
     * and the main thread: each a cache-line-aligned slab_mag per size
     * class; plus the ghost's 2-byte entry per 256 bytes of region */
    /* the table's page: the largest item and room for a second header and key */
    uint32_t page = c.slab_page_size + rkv_table_page_pair_room(RKV_MAX_KEY_LEN);
    uint64_t mags = rkv_slab_mag_bytes(page, RKV_TABLE_GROWTH, RKV_TABLE_FINE_LIMIT);
    uint32_t sizes[RKV_MAX_CLASSES], classes;
    assert_int_equal(rkv_slab_classes(page, RKV_TABLE_GROWTH, RKV_TABLE_FINE_LIMIT, sizes, &classes,
                                      err, sizeof err),
                     RKV_OK);
    assert_true(mags >= classes * 64ull && mags % 64 == 0);
    assert_int_equal(n.bookkeeping,
                     GIB / RKV_MIN_ITEM_SIZE * 16 + GIB / page * 72 + 3 * mags + GIB / 256 * 2);
    /* per connection: what the server touches of the shm_server.c memfd
     * (control page, reply ring; the client writes the request ring and
     * staging, and is charged for them), the request copies, structures
     * and kernel objects */
    assert_int_equal(rkv_shm_layout_init(&l, 64, 4096, page, err, sizeof err), RKV_OK);
    uint64_t ring = (l.slot_stride * 64 + 4095) / 4096 * 4096;
    /* max_conns and the max_unauth_conns not yet past HELLO */
    assert_int_equal(n.conns, (10 + c.max_unauth_conns) * (4096 + 2 * ring + 4096 + 8192));
    assert_int_equal(n.locked, 0); /* no rdma: nothing registered */
    assert_int_equal(n.ram, n.region + n.page_tables + n.bookkeeping + n.conns + n.process);
    /* evict none: no LRU words */
    c.evict = 0;
    rkv_mem_need_compute(&c, 1 * GIB, &e, &n);
    assert_int_equal(n.bookkeeping, GIB / RKV_MIN_ITEM_SIZE * 8 + GIB / page * 72 + 3 * mags);
}

static void test_need_hugepages_and_rdma(void **state)
{
    (void)state;
    struct rkv_server_config c;
    struct rkv_mem_env e;
    struct rkv_mem_need n;
    config_for(&c, "rdma://0.0.0.0:7000");
    env_ram(&e, 100 * GIB);
    e.huge[0] = (struct rkv_mem_huge){ 2 * MIB, 600, 600 };
    e.huge[1] = (struct rkv_mem_huge){ GIB, 2, 2 };
    /* 2 GiB: 1 GiB pages; the region is not RAM */
    rkv_mem_need_compute(&c, 2 * GIB, &e, &n);
    assert_int_equal(n.page_size, GIB);
    assert_int_equal(n.ram, n.page_tables + n.bookkeeping + n.conns + n.process);
    assert_true(n.locked > n.region); /* region + registered buffers */
    /* 3 GiB: too few 1 GiB pages, too few 2 MiB pages: normal pages, as region.c falls back */
    rkv_mem_need_compute(&c, 3 * GIB, &e, &n);
    assert_int_equal(n.page_size, 4096);
    /* 1001 MiB (not a GiB multiple): 2 MiB pages, rounded up */
    rkv_mem_need_compute(&c, 1001 * MIB, &e, &n);
    assert_int_equal(n.page_size, 2 * MIB);
    assert_int_equal(n.region, 1002 * MIB);
}

/* rdma registers nothing per connection on a shared receive queue: replies
 * come from each worker's pool (srq_depth buffers) and requests from its
 * queue, so what is pinned is the region and, per worker, the queue, the
 * pool and one staging buffer, whatever max_conns is. Without a queue each
 * connection registers its credits' receive buffers (and still no replies). */
static void test_need_rdma_registers_per_worker(void **state)
{
    (void)state;
    struct rkv_server_config c;
    struct rkv_mem_env e;
    struct rkv_mem_need a, b;
    config_for(&c, "rdma://0.0.0.0:7000");
    env_ram(&e, 100 * GIB);
    c.workers = 2;
    uint64_t staging = RKV_ALIGN_UP((uint64_t)(1u << 20) + (64u << 10), 4096);
    uint64_t per_worker = 2ull * c.srq_depth * c.max_msg + staging;
    rkv_mem_need_compute(&c, 64 * MIB, &e, &a);
    assert_int_equal(a.locked, a.region + 2 * per_worker);
    c.max_conns *= 4;
    rkv_mem_need_compute(&c, 64 * MIB, &e, &b);
    assert_int_equal(b.locked, a.locked);
    assert_true(b.conns > a.conns); /* the QPs' queues still grow with them */
    c.srq_depth = 0;                /* the pool then takes the default depth */
    rkv_mem_need_compute(&c, 64 * MIB, &e, &b);
    uint64_t conns = (uint64_t)c.max_conns + c.max_unauth_conns;
    assert_int_equal(b.locked,
                     b.region + 2 * (1024ull * c.max_msg + staging) + conns * c.credits * c.max_msg);
}

/* The tcp door's connections hold an input buffer of one command and an
 * output buffer of max(8 MiB, two values and a line), grown on demand: the
 * budget counts both at their limits, and a machine that cannot hold
 * max_conns of them gets a lower max_conns, as for the other doors. */
static void test_need_tcp(void **state)
{
    (void)state;
    struct rkv_server_config c;
    struct rkv_mem_env e;
    struct rkv_mem_need n;
    config_for(&c, "tcp://127.0.0.1:11211");
    c.max_conns = 10;
    env_ram(&e, 100 * GIB);
    rkv_mem_need_compute(&c, 256 * MIB, &e, &n);
    uint64_t per = (c.max_value_len + 65536 + 2) + 8 * MIB + 4096;
    assert_int_equal(n.conns, (10 + c.max_unauth_conns) * per);
    assert_int_equal(n.ram, n.region + n.page_tables + n.bookkeeping + n.conns + n.process);
    /* beside shm (a smaller connection), the costlier tcp one counts */
    snprintf(c.listen[1].uri, sizeof c.listen[1].uri, "shm:///tmp/x.sock");
    c.listen_count = 2;
    rkv_mem_need_compute(&c, 256 * MIB, &e, &n);
    assert_int_equal(n.conns, (10 + c.max_unauth_conns) * per);
    /* 8 MiB values: the output holds two of them */
    c.slab_page_size = 16 * MIB;
    c.max_value_len = 8 * MIB;
    rkv_mem_need_compute(&c, 256 * MIB, &e, &n);
    assert_int_equal(n.conns,
                     (10 + c.max_unauth_conns) * ((8 * MIB + 65538) + (16 * MIB + 65536) + 4096));

    /* 1024 connections of ~9 MiB do not fit 2 GiB beside 256 MiB: fewer */
    config_for(&c, "tcp://127.0.0.1:11211");
    env_ram(&e, 2 * GIB);
    unsigned conns;
    char msg[2048];
    assert_false(rkv_mem_check(&c, 256 * MIB, &e, msg, sizeof msg));
    assert_true(rkv_mem_admit(&c, 256 * MIB, &e, &conns, msg, sizeof msg));
    assert_true(conns >= RKV_MEM_MIN_CONNS && conns < 1024);
    c.max_conns = conns;
    assert_true(rkv_mem_check(&c, 256 * MIB, &e, msg, sizeof msg));
    c.max_conns = conns + 1;
    assert_false(rkv_mem_check(&c, 256 * MIB, &e, msg, sizeof msg));
}

static void test_check_memavailable(void **state)
{
    (void)state;
    struct rkv_server_config c;
    struct rkv_mem_env e;
    char msg[2048];
    config_for(&c, "shm:///tmp/x.sock");
    env_ram(&e, 21 * GIB + 300 * MIB);
    unsigned conns;
    assert_true(rkv_mem_check(&c, 1 * GIB, &e, msg, sizeof msg));
    assert_false(rkv_mem_admit(&c, 1ull << 40, &e, &conns, msg, sizeof msg));
    assert_non_null(strstr(msg, "--memory 1 TiB cannot be backed"));
    assert_non_null(strstr(msg, "MemAvailable 21.3 GiB"));
    assert_non_null(strstr(msg, "lower --memory to at most"));
    assert_non_null(strstr(msg, "--memory-check=off"));
    assert_null(strchr(msg, '\n')); /* one message, one line */

    /* the largest accepted fits (with max_conns lowered as far as it may
     * be), one MiB more does not */
    uint64_t big = rkv_mem_largest(&c, &e);
    assert_true(big > 10 * GIB && big < 21 * GIB);
    assert_true(rkv_mem_admit(&c, big, &e, &conns, msg, sizeof msg));
    /* a MiB more of --memory costs about 1.5 MiB with the bookkeeping for
     * 32-byte items and a connection over half a MiB: the MiB-rounded
     * largest may leave room for two more than the fewest */
    assert_true(conns >= RKV_MEM_MIN_CONNS && conns <= RKV_MEM_MIN_CONNS + 2);
    assert_false(rkv_mem_admit(&c, big + MIB, &e, &conns, msg, sizeof msg));
    char most[64];
    snprintf(most, sizeof most, "at most %.1f GiB", (double)big / (double)GIB);
    assert_non_null(strstr(msg, most));

    /* no meminfo, no cgroup: nothing to refuse against */
    e.meminfo_known = false;
    assert_true(rkv_mem_check(&c, 16ull << 40, &e, msg, sizeof msg));
}

static void test_check_cgroup(void **state)
{
    (void)state;
    struct rkv_server_config c;
    struct rkv_mem_env e;
    char msg[2048];
    config_for(&c, "shm:///tmp/x.sock");
    c.max_conns = 4;
    env_ram(&e, 20 * GIB);
    e.cgroup = (struct rkv_mem_cgroup){ .known = true,
                                        .version = 1,
                                        .limit = 2 * GIB,
                                        .usage = 40 * MIB,
                                        .dir = "/sys/fs/cgroup/memory/job" };
    assert_false(rkv_mem_check(&c, 8 * GIB, &e, msg, sizeof msg));
    assert_non_null(strstr(msg, "--memory 8 GiB cannot be backed"));
    assert_non_null(
        strstr(msg, "cgroup memory limit 2 GiB (/sys/fs/cgroup/memory/job, v1: 40 MiB in use)"));
    assert_non_null(strstr(msg, "raise the cgroup's limit"));
    /* 2 GiB - 40 MiB - 128 MiB headroom holds a 1 GiB region and its bookkeeping */
    assert_true(rkv_mem_check(&c, 1 * GIB, &e, msg, sizeof msg));
    uint64_t big = rkv_mem_largest(&c, &e);
    assert_true(big >= GIB && big < 2 * GIB);
    /* in 512 MiB, 1024 connections' buffers (0.55 GiB) do not fit beside a
     * 16 MiB region: the check alone refuses it, admission lowers
     * max_conns to the most that fit, which is at least RKV_MEM_MIN_CONNS */
    unsigned conns;
    c.max_conns = 1024;
    e.cgroup.limit = 512 * MIB;
    assert_false(rkv_mem_check(&c, 16 * MIB, &e, msg, sizeof msg));
    assert_true(rkv_mem_admit(&c, 16 * MIB, &e, &conns, msg, sizeof msg));
    assert_true(conns >= RKV_MEM_MIN_CONNS && conns < 1024);
    struct rkv_server_config run = c;
    run.max_conns = conns;
    assert_true(rkv_mem_check(&run, 16 * MIB, &e, msg, sizeof msg));
    run.max_conns = conns + 1;
    assert_false(rkv_mem_check(&run, 16 * MIB, &e, msg, sizeof msg));
    assert_true(rkv_mem_largest(&c, &e) > 16 * MIB);
    /* in 100 MiB, not even RKV_MEM_MIN_CONNS connections fit: refused */
    e.cgroup.limit = 100 * MIB;
    assert_int_equal(rkv_mem_largest(&c, &e), 0);
    assert_false(rkv_mem_admit(&c, 16 * MIB, &e, &conns, msg, sizeof msg));
    assert_non_null(strstr(msg, "lower max_conns"));
    assert_non_null(strstr(msg, "32 connections' buffers")); /* 16 + 16 not past HELLO */
}

static void test_check_hugepages_required_and_memlock(void **state)
{
    (void)state;
    struct rkv_server_config c;
    struct rkv_mem_env e;
    char msg[2048];
    config_for(&c, "shm:///tmp/x.sock");
    env_ram(&e, 20 * GIB);
    e.huge[0] = (struct rkv_mem_huge){ 2 * MIB, 10, 10 };
    c.hugepages_required = true;
    assert_false(rkv_mem_check(&c, 64 * MIB, &e, msg, sizeof msg));
    assert_non_null(
        strstr(msg, "hugepages_required is set but only 10 2 MiB hugepages are free (32 needed"));
    assert_true(rkv_mem_check(&c, 20 * MIB, &e, msg, sizeof msg));

    config_for(&c, "rdma://0.0.0.0:7000");
    e.memlock = 64 * MIB;
    assert_false(rkv_mem_check(&c, 256 * MIB, &e, msg, sizeof msg));
    assert_non_null(strstr(msg, "--memory 256 MiB: memlock limit 64 MiB is below"));
    e.cap_ipc_lock = true; /* CAP_IPC_LOCK: the limit does not bind */
    assert_true(rkv_mem_check(&c, 256 * MIB, &e, msg, sizeof msg));
}

/* ------------------------------------------------------------ the population guard */

struct guard_log {
    unsigned calls, stop_at;
    uint64_t last_remaining;
};

static bool guard_fits(void *ctx, uint64_t remaining, char *err, size_t err_len)
{
    struct guard_log *g = ctx;
    if (g->calls > 0)
        assert_true(remaining < g->last_remaining); /* it counts down */
    g->last_remaining = remaining;
    if (++g->calls < g->stop_at)
        return true;
    snprintf(err, err_len, "guard says stop at %u", g->calls);
    return false;
}

static void test_region_guard(void **state)
{
    (void)state;
    struct rkv_region r;
    char err[256] = "";
    /* 136 MiB of normal pages (this host may have hugepages: the guard sees
     * only a normal-page population, so skip when the region got hugepages) */
    struct guard_log g = { 0, 1000, 0 };
    struct rkv_region_guard guard = { guard_fits, &g, 1 }; /* one thread: calls in order */
    assert_int_equal(rkv_region_create_guarded(136 * MIB, &guard, &r, err, sizeof err), RKV_OK);
    bool huge = r.hugepages;
    rkv_region_destroy(&r);
    if (huge)
        skip();
    assert_int_equal(g.calls, 3); /* 64 MiB steps: 136, 72, 8 left */
    assert_int_equal(g.last_remaining, 8 * MIB);

    g = (struct guard_log){ 0, 2, 0 };
    assert_int_equal(rkv_region_create_guarded(136 * MIB, &guard, &r, err, sizeof err),
                     RKV_NO_MEMORY);
    assert_string_equal(err, "guard says stop at 2");
    assert_null(r.base);
}

/* This process's resident shared-memory pages (RssShmem), in bytes. */
static uint64_t rss_shmem(void)
{
    FILE *f = fopen("/proc/self/status", "re");
    assert_non_null(f);
    char line[256];
    unsigned long long kb = 0;
    bool found = false;
    while (!found && fgets(line, sizeof line, f) != NULL)
        found = sscanf(line, "RssShmem: %llu kB", &kb) == 1;
    fclose(f);
    assert_true(found);
    return (uint64_t)kb * 1024;
}

/* A region no NIC registers (clear_on_first_touch): every page is taken
 * (the memfd's blocks), slice by slice with the guard asked as before, but
 * none is faulted in until touched; touched, each reads zero and takes a
 * write. A refusal still fails creation with the guard's message. */
static void test_region_take_only(void **state)
{
    (void)state;
    struct rkv_region r;
    char err[256] = "";
    struct guard_log g = { 0, 1000, 0 };
    struct rkv_region_guard guard = { guard_fits, &g, 1, true };
    uint64_t before = rss_shmem();
    assert_int_equal(rkv_region_create_guarded(136 * MIB, &guard, &r, err, sizeof err), RKV_OK);
    if (r.hugepages) {
        rkv_region_destroy(&r);
        skip();
    }
    uint64_t created = rss_shmem();
    struct stat st;
    assert_int_equal(fstat(rkv_region_readonly_fd(&r), &st), 0);
    assert_true((uint64_t)st.st_blocks * 512 >= 136 * MIB); /* taken */
    assert_true(created < before + 16 * MIB);               /* not faulted in */
    assert_int_equal(g.calls, 3);
    for (uint64_t off = 0; off < r.size; off += 4096) {
        volatile uint8_t *p = (volatile uint8_t *)r.base + off;
        assert_int_equal(*p, 0);
        *p = 1;
    }
    assert_true(rss_shmem() >= created + 128 * MIB); /* the measure sees touched pages */
    rkv_region_destroy(&r);

    g = (struct guard_log){ 0, 2, 0 };
    assert_int_equal(rkv_region_create_guarded(136 * MIB, &guard, &r, err, sizeof err),
                     RKV_NO_MEMORY);
    assert_string_equal(err, "guard says stop at 2");
    assert_null(r.base);
}

/* Guard calls from several populating threads, one at a time. */
struct guard_shared {
    _Atomic unsigned calls, inside;
    unsigned stop_at;
    uint64_t max_remaining, min_remaining;
};

static bool guard_shared_fits(void *ctx, uint64_t remaining, char *err, size_t err_len)
{
    struct guard_shared *g = ctx;
    assert_int_equal(atomic_fetch_add(&g->inside, 1), 0); /* never two at once */
    unsigned n = atomic_fetch_add(&g->calls, 1) + 1;
    g->max_remaining = RKV_MAX(g->max_remaining, remaining);
    g->min_remaining = RKV_MIN(g->min_remaining, remaining);
    atomic_fetch_sub(&g->inside, 1);
    if (n < g->stop_at)
        return true;
    snprintf(err, err_len, "guard says stop at %u", n);
    return false;
}

/* Four threads populate 264 MiB (five slices): the guard is asked once per
 * slice, one at a time, never with more than the region nor less than the
 * last slice still to come; the region is zero and writable. A refusal
 * from any thread fails creation with the guard's message. */
static void test_region_guard_threads(void **state)
{
    (void)state;
    struct rkv_region r;
    char err[256] = "";
    struct guard_shared g = { .stop_at = 1000, .min_remaining = UINT64_MAX };
    struct rkv_region_guard guard = { guard_shared_fits, &g, 4 };
    assert_int_equal(rkv_region_create_guarded(264 * MIB, &guard, &r, err, sizeof err), RKV_OK);
    if (r.hugepages) {
        rkv_region_destroy(&r);
        skip();
    }
    assert_int_equal(atomic_load(&g.calls), 5);
    assert_true(g.max_remaining == 264 * MIB);
    assert_true(g.min_remaining >= 8 * MIB);
    for (uint64_t off = 0; off < r.size; off += 4096) {
        volatile uint8_t *p = (volatile uint8_t *)r.base + off;
        assert_int_equal(*p, 0);
        *p = 1;
    }
    rkv_region_destroy(&r);

    g = (struct guard_shared){ .stop_at = 3, .min_remaining = UINT64_MAX };
    assert_int_equal(rkv_region_create_guarded(264 * MIB, &guard, &r, err, sizeof err),
                     RKV_NO_MEMORY);
    assert_string_equal(err, "guard says stop at 3");
    assert_null(r.base);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_meminfo),
        cmocka_unit_test(test_cgroup_values),
        cmocka_unit_test(test_locate),
        cmocka_unit_test(test_cgroup_read_v1_tightest_ancestor),
        cmocka_unit_test(test_cgroup_read_v2),
        cmocka_unit_test(test_probe_fake_machine),
        cmocka_unit_test(test_headroom),
        cmocka_unit_test(test_need_shm),
        cmocka_unit_test(test_need_hugepages_and_rdma),
        cmocka_unit_test(test_need_rdma_registers_per_worker),
        cmocka_unit_test(test_need_tcp),
        cmocka_unit_test(test_check_memavailable),
        cmocka_unit_test(test_check_cgroup),
        cmocka_unit_test(test_check_hugepages_required_and_memlock),
        cmocka_unit_test(test_region_guard),
        cmocka_unit_test(test_region_take_only),
        cmocka_unit_test(test_region_guard_threads),
    };
    return cmocka_run_group_tests(tests, tree_setup, tree_teardown);
}
