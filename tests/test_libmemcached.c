/* test_libmemcached.c — libmemcached, the C client most memcached clients
 * wrap, against rkv's tcp doors, with librkv reading the same tables.
 *
 * Three rkv servers, each with a tcp:// door and an shm:// listener on
 * loopback. The third-party client is libmemcached through pylibmc
 * (/usr/bin/python3) and libmemcached's own tools; librkv reads and writes
 * one-sidedly over shm.
 *
 * 1. One server: pylibmc runs set/get/gets/cas/add/replace/append/prepend/
 *    incr/decr/delete/touch, client flags, expiry (relative, absolute, a
 *    negative time, which pylibmc sends as 4294967295), a multi-get of 5,000
 *    keys (one "get" line of ~220 KB) and a value over the size limit,
 *    checking each answer; then librkv finds what it left: values, flags,
 *    CAS unique = item version, TTLs, expired keys gone.
 * 2. The reverse: librkv writes keys with flags, pylibmc reads them (value,
 *    flags, gets' CAS = the version librkv got) and a cas with that version
 *    succeeds; librkv sees the new value.
 * 3. libmemcached's tools: memccp, memccat, memcexist, memctouch, memcrm,
 *    memcstat, memcping (memcached_version), memcslap.
 * 4. libmemcached's own ketama (behavior "ketama_weighted": libketama's
 *    continuum with MD5; servers "127.0.0.1:P0", "127.0.0.1:P1:2",
 *    "127.0.0.1:P2", no proxy) writes N keys straight to the three servers;
 *    librkv with ketama placement over the same names and weights finds
 *    every one on the server libmemcached chose, and every server has some.
 * 5. The reverse: librkv writes N keys with ketama, pylibmc reads them all.
 * 6. libmemcached's spymemcached-compatible ketama (distribution "consistent
 *    ketama spy", weighted) writes N keys; librkv finds them all with the
 *    servers named as that mode names them (name=/HOST:PORT).
 *
 * N is RKV_TEST_LIBMEMCACHED_KEYS, default 10000. Skipped (exit 77) when
 * /usr/bin/python3 has no pylibmc or a libmemcached tool is missing
 * (scripts/install-deps.sh installs python3-pylibmc and libmemcached-tools).
 * No sleeps, no clocks but TTLs checked against generous bounds.
 */
#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "rkv.h"
#include "server_proc.h"

#define NSERVERS 3

static const char *server_bin;
static unsigned nkeys = 10000;

struct env {
    struct server_group g; /* NSERVERS servers, their tcp doors, the directory */
    rkv_client *one;       /* server 0 alone */
    rkv_client *ring;      /* ketama over the three, named as libmemcached names them */
    rkv_client *spy;       /* the same, named as libmemcached's spymemcached mode names them */
};

/* ------------------------------------------------------------ the client */

/* pylibmc with bytes as they are and the flags given: a value is a
 * (bytes, flags) pair. Flags keep bit 3 clear: pylibmc inflates a value
 * whose flags have it (its zlib flag) before handing it over. */
static const char client_py[] =
    "import sys, time, pylibmc\n"
    "\n"
    "class Raw(pylibmc.Client):\n"
    "    def __init__(self, servers, behaviors):\n"
    "        # a loaded machine answers late, not wrong: 30 s before libmemcached gives up\n"
    "        super().__init__(servers, behaviors=dict(behaviors, connect_timeout=30000,\n"
    "                                                 _poll_timeout=30000))\n"
    "    def serialize(self, value): return value\n"
    "    def deserialize(self, data, flags): return (data, flags)\n"
    "\n"
    "bad = 0\n"
    "def check(what, got, want):\n"
    "    global bad\n"
    "    if got != want:\n"
    "        print('%s: %r, expected %r' % (what, got, want)); bad += 1\n"
    "\n"
    "def item(prefix, i):\n"
    "    key = '%s:%05d' % (prefix, i)\n"
    "    reps = 1 + i % 5 + (40 if i % 101 == 0 else 0)\n"
    "    return key, ('%s|%d|' % (key, i)).encode() * reps, (i * 2654435761) % 2**32 & ~8\n"
    "\n"
    "mode, out = sys.argv[1], sys.argv[2]\n"
    "ports = [int(p) for p in sys.argv[3].split(',')]\n"
    "report = open(out, 'w')\n"
    "\n"
    "if mode == 'ops':\n"
    "    c = Raw(['127.0.0.1:%d' % ports[0]], behaviors={'cas': True})\n"
    "    check('set', c.set('lm:a', (b'alpha', 5)), True)\n"
    "    check('get', c.get('lm:a'), (b'alpha', 5))\n"
    "    (v, cas) = c.gets('lm:a')\n"
    "    check('gets', v, (b'alpha', 5))\n"
    "    check('cas stale', c.cas('lm:a', (b'never', 1), cas + 1), False)\n"
    "    check('cas', c.cas('lm:a', (b'beta', 6), cas), True)\n"
    "    check('cas again', c.cas('lm:a', (b'never', 1), cas), False)\n"
    "    check('add taken', c.add('lm:a', (b'x', 0)), False)\n"
    "    check('add', c.add('lm:b', (b'bee', 0xfffffff7)), True)\n"
    "    check('replace missing', c.replace('lm:none', (b'x', 0)), False)\n"
    "    check('replace', c.replace('lm:b', (b'bee2', 0xfffffff7)), True)\n"
    "    check('append', c.append('lm:a', (b'++', 0)), True)\n"
    "    check('prepend', c.prepend('lm:a', (b'--', 0)), True)\n"
    "    check('append missing', c.append('lm:none', (b'x', 0)), False)\n"
    "    check('after append', c.get('lm:a'), (b'--beta++', 6))\n"
    "    check('set n', c.set('lm:n', (b'10', 0)), True)\n"
    "    check('incr', c.incr('lm:n', 32), 42)\n"
    "    check('decr', c.decr('lm:n', 2), 40)\n"
    "    check('decr saturates', c.decr('lm:n', 1000), 0)\n"
    "    check('set max', c.set('lm:max', (b'18446744073709551615', 0)), True)\n"
    "    check('incr wraps', c.incr('lm:max', 2), 1)\n"
    "    try:\n"
    "        c.incr('lm:none', 1); check('incr missing', 'found', 'NotFound')\n"
    "    except pylibmc.NotFound: pass\n"
    "    check('set gone', c.set('lm:gone', (b'x', 0)), True)\n"
    "    check('delete', c.delete('lm:gone'), True)\n"
    "    check('delete missing', c.delete('lm:gone'), False)\n"
    "    check('get deleted', c.get('lm:gone'), None)\n"
    "    check('set ttl', c.set('lm:ttl', (b't', 0), time=1000), True)\n"
    "    check('touch', c.touch('lm:a', 2000), True)\n"
    "    check('touch missing', c.touch('lm:none', 10), False)\n"
    "    check('set absolute', c.set('lm:abs', (b'abs', 0), time=int(time.time()) + 3000), True)\n"
    "    check('set past', c.set('lm:past', (b'x', 0), time=int(time.time()) - 100), True)\n"
    "    check('get past', c.get('lm:past'), None)\n"
    "    # pylibmc sends a negative time as its unsigned 32-bit value, 4294967295\n"
    "    check('set negative', c.set('lm:neg', (b'x', 0), time=-1), True)\n"
    "    check('get negative', c.get('lm:neg'), None)\n"
    "    check('set to touch', c.set('lm:tgone', (b'x', 0)), True)\n"
    "    check('touch negative', c.touch('lm:tgone', -1), True)\n"
    "    check('get touched', c.get('lm:tgone'), None)\n"
    "    check('set empty', c.set('lm:empty', (b'', 3)), True)\n"
    "    check('set long key', c.set('k' * 250, (b'v', 1)), True)\n"
    "    check('get long key', c.get('k' * 250), (b'v', 1))\n"
    "    try:\n"
    "        c.set('lm:big', (b'x' * (2 << 20), 0)); check('set too big', 'stored', 'TooBig')\n"
    "    except pylibmc.TooBig: pass\n"
    "    check('after too big', c.get('lm:a'), (b'--beta++', 6))\n"
    "    # one get line of ~220 KB: memcached answers multigets of any length\n"
    "    keys = ['lm:multi:%05d:a-key-long-enough-for-a-long-line' % i for i in range(5000)]\n"
    "    check('set_multi', c.set_multi({k: (k.encode(), i & ~8) for i, k in enumerate(keys)}), [])\n"
    "    got = c.get_multi(keys + ['lm:none'])\n"
    "    check('get_multi count', len(got), len(keys))\n"
    "    check('get_multi', all(got.get(k) == (k.encode(), i & ~8) for i, k in enumerate(keys)), True)\n"
    "    check('delete_multi', c.delete_multi(keys[:100]), True)\n"
    "    check('after delete_multi', len(c.get_multi(keys)), len(keys) - 100)\n"
    "    nr = Raw(['127.0.0.1:%d' % ports[0]], behaviors={'_noreply': True})\n"
    "    nr.set('lm:noreply', (b'quiet', 17))   # the same connection answers the get after it\n"
    "    check('noreply then get', nr.get('lm:noreply'), (b'quiet', 17))\n"
    "    stats = c.get_stats()[0][1]   # libmemcached's memcached_stat_st\n"
    "    check('version', stats['version'].startswith(b'1.6.'), True)\n"
    "    check('limit_maxbytes', int(stats['limit_maxbytes']) > 0, True)\n"
    "    check('bytes', int(stats['bytes']) > 0, True)\n"
    "    check('curr_items', int(stats['curr_items']) >= 4900, True)\n"
    "    for k in ['lm:a', 'lm:b', 'lm:n', 'lm:max', 'lm:ttl', 'lm:abs', 'lm:empty', 'lm:noreply']:\n"
    "        (v, cas) = c.gets(k)\n"
    "        report.write('item %s %s %d %d\\n' % (k, (v[0] or b'').hex() or '-', v[1], cas))\n"
    "    for k in ['lm:gone', 'lm:past', 'lm:neg', 'lm:tgone']:\n"
    "        report.write('gone %s\\n' % k)\n"
    "elif mode == 'check':\n"
    "    c = Raw(['127.0.0.1:%d' % ports[0]], behaviors={'cas': True})\n"
    "    for line in open(sys.argv[4]):\n"
    "        k, hexv, flags, version = line.split()\n"
    "        want = (bytes.fromhex(hexv), int(flags))\n"
    "        got = c.gets(k)\n"
    "        check('gets ' + k, got, (want, int(version)))\n"
    "    check('cas with the librkv version', c.cas(k, (b'from libmemcached', 77), int(version)), True)\n"
    "else:\n"
    "    # libmemcached's libketama-compatible continuum: MD5, 160 points per\n"
    "    # server at an even share, the weight after the second colon\n"
    "    servers = ['127.0.0.1:%d' % ports[0], '127.0.0.1:%d:2' % ports[1], '127.0.0.1:%d' % ports[2]]\n"
    "    behaviors = {'ketama_weighted': True}\n"
    "    if mode == 'spy-write':   # spymemcached's labels: '/HOST:PORT-i'\n"
    "        behaviors['distribution'] = 'consistent ketama spy'\n"
    "    c = Raw(servers, behaviors=behaviors)\n"
    "    prefix, count = sys.argv[4], int(sys.argv[5])\n"
    "    for start in range(0, count, 500):\n"
    "        items = [item(prefix, i) for i in range(start, min(count, start + 500))]\n"
    "        if mode != 'ring-read':\n"
    "            failed = c.set_multi({k: (v, f) for k, v, f in items})\n"
    "            check('set_multi', failed, [])\n"
    "        else:\n"
    "            got = c.get_multi([k for k, _, _ in items])\n"
    "            for k, v, f in items:\n"
    "                check(k, got.get(k), (v, f))\n"
    "report.close()\n"
    "print('pylibmc %s: %d bad' % (mode, bad))\n"
    "sys.exit(1 if bad else 0)\n";

static int run_client(const struct env *e, const char *mode, const char *args)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/client.py %s %s/%s.out %u,%u,%u %s", e->g.dir,
             mode, e->g.dir, mode, e->g.port[0], e->g.port[1], e->g.port[2], args);
    return system(cmd);
}

/* Item i of a prefix, as client_py's item() makes it. */
static size_t item(const char *prefix, unsigned i, char *key, char *value, uint32_t *flags)
{
    char unit[64];
    snprintf(key, 32, "%s:%05u", prefix, i);
    int ul = snprintf(unit, sizeof unit, "%s|%u|", key, i);
    unsigned reps = 1 + i % 5 + (i % 101 == 0 ? 40 : 0);
    for (unsigned r = 0; r < reps; r++)
        memcpy(value + r * (unsigned)ul, unit, (size_t)ul);
    *flags = (uint32_t)(i * 2654435761u) & ~8u;
    return reps * (size_t)ul;
}

static size_t unhex(const char *hex, char *out)
{
    size_t n = 0;
    if (strcmp(hex, "-") == 0)
        return 0;
    for (; hex[0] && hex[1]; hex += 2) {
        unsigned b;
        assert_int_equal(sscanf(hex, "%2x", &b), 1);
        out[n++] = (char)b;
    }
    return n;
}

/* ------------------------------------------------------------ setup */

static int teardown(void **state)
{
    struct env *e = *state;
    int rc = 0;
    if (e == NULL)
        return 0;
    rkv_close(e->one);
    rkv_close(e->ring);
    rkv_close(e->spy);
    if (server_group_stop(&e->g) != 0)
        rc = -1;
    free(e);
    return rc;
}

static int setup(void **state)
{
    struct env *e = calloc(1, sizeof *e);
    char list[1024], path[128];
    *state = e;
    if (e == NULL)
        return -1;
    /* room for a page in every size class (133 at 1 MiB pages): the tests'
     * many value sizes then never make a server move a page between classes
     * and evict a key that a later check reads */
    const char *const memory[] = { "--memory", "160M", NULL };
    if (server_group_start(&e->g, server_bin, NSERVERS, 40, "libmemcached", memory) != 0)
        return -1;
    snprintf(path, sizeof path, "%s/client.py", e->g.dir);
    FILE *f = fopen(path, "w");
    if (f == NULL || fputs(client_py, f) < 0 || fclose(f) != 0)
        return -1;
    e->one = connect_retry(e->g.sp[0].uri, NULL, 20000);
    /* libmemcached names a server HOST:PORT (HOST alone for 11211), as
     * twemproxy does: tcp= derives the same name */
    snprintf(list, sizeof list,
             "%s?placement=ketama&tcp=127.0.0.1:%u,%s?tcp=127.0.0.1:%u&weight=2,%s?tcp=127.0.0.1:%u",
             e->g.sp[0].uri, e->g.port[0], e->g.sp[1].uri, e->g.port[1], e->g.sp[2].uri,
             e->g.port[2]);
    e->ring = connect_retry(list, NULL, 20000);
    /* its spymemcached mode names them "/HOST:PORT", whatever the port */
    snprintf(list, sizeof list,
             "%s?placement=ketama&name=/127.0.0.1:%u,%s?name=/127.0.0.1:%u&weight=2,"
             "%s?name=/127.0.0.1:%u",
             e->g.sp[0].uri, e->g.port[0], e->g.sp[1].uri, e->g.port[1], e->g.sp[2].uri,
             e->g.port[2]);
    e->spy = connect_retry(list, NULL, 20000);
    if (e->one == NULL || e->ring == NULL || e->spy == NULL) {
        fprintf(stderr, "librkv: %s\n", rkv_last_error(NULL));
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------ one server */

static void test_libmemcached_to_librkv(void **state)
{
    struct env *e = *state;
    char path[160], line[4096], key[300], hex[2100], want[1100], got[1100];
    assert_int_equal(run_client(e, "ops", ""), 0);
    snprintf(path, sizeof path, "%s/ops.out", e->g.dir);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    unsigned items = 0, gone = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned flags;
        uint64_t cas;
        size_t len = 0;
        struct rkv_item_info info;
        if (sscanf(line, "item %299s %2099s %u %" SCNu64, key, hex, &flags, &cas) == 4) {
            size_t n = unhex(hex, want);
            rkv_status st = rkv_get(e->one, key, strlen(key), got, sizeof got, &len, &info);
            if (st != RKV_OK)
                fail_msg("librkv get %s: %s", key, rkv_strerror(st));
            assert_int_equal(len, n);
            assert_memory_equal(got, want, n);
            assert_int_equal(info.user_flags, flags);
            assert_int_equal(info.version, cas); /* CAS unique = item version */
            if (strcmp(key, "lm:ttl") == 0)      /* time=1000: relative */
                assert_true(info.ttl_left > 0 && info.ttl_left <= 1000);
            else if (strcmp(key, "lm:a") == 0) /* touched to 2000 */
                assert_true(info.ttl_left > 1000 && info.ttl_left <= 2000);
            else if (strcmp(key, "lm:abs") == 0) /* a unix time 3000 s ahead */
                assert_true(info.ttl_left > 2000 && info.ttl_left <= 3001);
            else
                assert_int_equal(info.ttl_left, 0);
            items++;
        } else if (sscanf(line, "gone %299s", key) == 1) {
            rkv_status st = rkv_get(e->one, key, strlen(key), got, sizeof got, &len, NULL);
            if (st != RKV_NOT_FOUND)
                fail_msg("librkv get %s: %s, libmemcached saw it gone", key, rkv_strerror(st));
            gone++;
        }
    }
    fclose(f);
    assert_int_equal(items, 8);
    assert_int_equal(gone, 4);
    /* the multi-get's keys are there too, the first 100 deleted */
    for (unsigned i = 0; i < 5000; i += 7) {
        size_t len;
        struct rkv_item_info info;
        snprintf(key, sizeof key, "lm:multi:%05u:a-key-long-enough-for-a-long-line", i);
        rkv_status st = rkv_get(e->one, key, strlen(key), got, sizeof got, &len, &info);
        assert_int_equal(st, i < 100 ? RKV_NOT_FOUND : RKV_OK);
        if (st == RKV_OK) {
            assert_int_equal(len, strlen(key));
            assert_memory_equal(got, key, len);
            assert_int_equal(info.user_flags, i & ~8u);
        }
    }
}

static void test_librkv_to_libmemcached(void **state)
{
    struct env *e = *state;
    char path[160], key[32], value[64], last_key[32] = "";
    uint64_t last_version = 0;
    snprintf(path, sizeof path, "%s/expect", e->g.dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    for (unsigned i = 0; i < 200; i++) {
        snprintf(key, sizeof key, "lr:%u", i);
        int n = snprintf(value, sizeof value, "written by librkv %u", i);
        struct rkv_put_options o = { .user_flags = (i * 2654435761u) & ~8u };
        uint64_t version;
        assert_int_equal(rkv_put(e->one, key, strlen(key), value, (size_t)n, &o, &version), RKV_OK);
        fprintf(f, "%s ", key);
        for (int b = 0; b < n; b++)
            fprintf(f, "%02x", (unsigned char)value[b]);
        fprintf(f, " %u %" PRIu64 "\n", o.user_flags, version);
        snprintf(last_key, sizeof last_key, "%s", key);
        last_version = version;
    }
    assert_int_equal(fclose(f), 0);
    char args[200];
    snprintf(args, sizeof args, "%s", path);
    assert_int_equal(run_client(e, "check", args), 0);
    /* the cas that libmemcached made with librkv's version took */
    char got[64];
    size_t len;
    struct rkv_item_info info;
    assert_int_equal(rkv_get(e->one, last_key, strlen(last_key), got, sizeof got, &len, &info),
                     RKV_OK);
    assert_int_equal(len, strlen("from libmemcached"));
    assert_memory_equal(got, "from libmemcached", len);
    assert_int_equal(info.user_flags, 77);
    assert_true(info.version > last_version);
}

/* libmemcached's command-line tools against the door. */
static void test_tools(void **state)
{
    struct env *e = *state;
    char cmd[512], file[128], servers[64], got[64];
    size_t len;
    snprintf(servers, sizeof servers, "--servers=127.0.0.1:%u", e->g.port[0]);
    snprintf(file, sizeof file, "%s/tool-item", e->g.dir);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fputs("copied by memccp\n", f);
    assert_int_equal(fclose(f), 0);
    snprintf(cmd, sizeof cmd,
             "cd %s && memccp %s tool-item && memcexist %s tool-item && "
             "memccat %s tool-item | grep -qx 'copied by memccp' && memctouch %s --expire=500 tool-item",
             e->g.dir, servers, servers, servers, servers);
    assert_int_equal(system(cmd), 0);
    struct rkv_item_info info;
    assert_int_equal(rkv_get(e->one, "tool-item", 9, got, sizeof got, &len, &info), RKV_OK);
    assert_int_equal(len, strlen("copied by memccp\n"));
    assert_true(info.ttl_left > 0 && info.ttl_left <= 500);
    snprintf(cmd, sizeof cmd, "memcrm %s tool-item && ! memcexist %s tool-item", servers, servers);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(rkv_get(e->one, "tool-item", 9, got, sizeof got, &len, NULL), RKV_NOT_FOUND);
    /* memcached_version(): VERSION must parse as a memcached release */
    snprintf(cmd, sizeof cmd, "memcping %s && memcstat %s | grep -q 'version: 1\\.6\\.'", servers,
             servers);
    assert_int_equal(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "memcslap %s --concurrency=2 --execute-number=2000 >/dev/null",
             servers);
    assert_int_equal(system(cmd), 0);
}

/* ------------------------------------------------------------ ketama */

/* libmemcached (`mode` of client_py) writes nkeys keys of `prefix` to the
 * three servers; kv, a ketama handle over them, finds every one. */
static void ring_to_librkv(struct env *e, rkv_client *kv, const char *mode, const char *prefix)
{
    static char want[4096], got[4096];
    char key[32], args[64];
    /* stored = items gained + items evicted meanwhile */
    uint64_t before[NSERVERS], evicted[NSERVERS], items, ev, total = 0;
    for (unsigned s = 0; s < NSERVERS; s++) {
        assert_true(server_stat(kv, s, "items", &before[s]));
        assert_true(server_stat(kv, s, "evictions", &evicted[s]));
    }
    snprintf(args, sizeof args, "%s %u", prefix, nkeys);
    assert_int_equal(run_client(e, mode, args), 0);
    unsigned bad = 0;
    for (unsigned i = 0; i < nkeys; i++) {
        uint32_t flags;
        size_t n = item(prefix, i, key, want, &flags), len = 0;
        struct rkv_item_info info;
        rkv_status st = rkv_get(kv, key, strlen(key), got, sizeof got, &len, &info);
        if (st != RKV_OK || len != n || memcmp(got, want, n) != 0 || info.user_flags != flags) {
            if (bad++ < 5)
                print_message("%s (ketama: server %u): %s, %zu bytes, flags %u; libmemcached "
                              "wrote %zu bytes, flags %u\n",
                              key, rkv_shard_of(kv, key, strlen(key)), rkv_strerror(st), len,
                              info.user_flags, n, flags);
        }
    }
    print_message("librkv read %u keys libmemcached placed (%s): %u wrong\n", nkeys, mode, bad);
    assert_int_equal(bad, 0);
    for (unsigned s = 0; s < NSERVERS; s++) {
        assert_true(server_stat(kv, s, "items", &items));
        assert_true(server_stat(kv, s, "evictions", &ev));
        items += ev - evicted[s];
        print_message("server %u (weight %u): %llu of libmemcached's keys\n", s, s == 1 ? 2 : 1,
                      (unsigned long long)(items - before[s]));
        assert_true(items > before[s]); /* libmemcached used every server */
        total += items - before[s];
    }
    assert_int_equal(total, nkeys);
}

static void test_ketama_libmemcached_to_librkv(void **state)
{
    ring_to_librkv(*state, ((struct env *)*state)->ring, "ring-write", "lk:p");
}

/* libmemcached's MEMCACHED_DISTRIBUTION_CONSISTENT_KETAMA_SPY, weighted:
 * the same continuum over other labels, which name= gives librkv. */
static void test_ketama_spy_libmemcached_to_librkv(void **state)
{
    ring_to_librkv(*state, ((struct env *)*state)->spy, "spy-write", "lk:s");
}

static void test_ketama_librkv_to_libmemcached(void **state)
{
    struct env *e = *state;
    static char value[4096];
    char key[32], args[64];
    for (unsigned i = 0; i < nkeys; i++) {
        uint32_t flags;
        size_t n = item("lk:r", i, key, value, &flags);
        struct rkv_put_options o = { .user_flags = flags };
        rkv_status st = rkv_put(e->ring, key, strlen(key), value, n, &o, NULL);
        if (st != RKV_OK)
            fail_msg("rkv_put %s: %s (%s)", key, rkv_strerror(st), rkv_last_error(e->ring));
    }
    snprintf(args, sizeof args, "lk:r %u", nkeys);
    assert_int_equal(run_client(e, "ring-read", args), 0);
}

int main(int argc, char **argv)
{
    static const char *const tools[] = { "memccp", "memccat",  "memcexist", "memctouch",
                                         "memcrm", "memcstat", "memcping",  "memcslap" };
    if (argc < 2) {
        fprintf(stderr, "usage: %s PATH/TO/rkv-server\n", argv[0]);
        return 2;
    }
    server_bin = argv[1];
    if (getenv("RKV_TEST_LIBMEMCACHED_KEYS"))
        nkeys = (unsigned)strtoul(getenv("RKV_TEST_LIBMEMCACHED_KEYS"), NULL, 10);
    if (system("/usr/bin/python3 -c 'import pylibmc' 2>/dev/null") != 0) {
        printf("test_libmemcached: skipped: /usr/bin/python3 has no pylibmc; "
               "scripts/install-deps.sh installs it (apt-get install python3-pylibmc)\n");
        return 77;
    }
    for (size_t i = 0; i < sizeof tools / sizeof tools[0]; i++) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "command -v %s >/dev/null 2>&1", tools[i]);
        if (system(cmd) != 0) {
            printf("test_libmemcached: skipped: %s is not installed; scripts/install-deps.sh "
                   "installs it (apt-get install libmemcached-tools)\n",
                   tools[i]);
            return 77;
        }
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_libmemcached_to_librkv),
        cmocka_unit_test(test_librkv_to_libmemcached),
        cmocka_unit_test(test_tools),
        cmocka_unit_test(test_ketama_libmemcached_to_librkv),
        cmocka_unit_test(test_ketama_librkv_to_libmemcached),
        cmocka_unit_test(test_ketama_spy_libmemcached_to_librkv),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
