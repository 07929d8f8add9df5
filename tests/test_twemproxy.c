/* test_twemproxy.c — twemproxy in front of three rkv servers, librkv beside it.
 *
 * The drop-in topology: three rkv servers, each with a tcp:// door and an
 * shm:// listener on loopback; nutcracker (twemproxy) fronts the tcp doors
 * with `distribution: ketama`, `hash: md5`; librkv reads the same servers
 * one-sidedly over shm with ketama placement, the servers named as
 * twemproxy names them (one derived from HOST:PORT, one given a name of
 * its own and weight 2, one HOST:PORT again).
 *
 * 1. pymemcache (a third-party client) writes N keys through the proxy
 *    (values of several sizes, per-key flags); librkv finds every one, value
 *    and flags, with one-sided GETs on the server ketama names, and the
 *    keys are spread over all three servers.
 * 2. librkv writes N other keys; pymemcache reads every one back through
 *    the proxy, value and flags.
 *
 * N is RKV_TEST_TWEMPROXY_KEYS, default 10000. Skipped (exit 77) when
 * nutcracker or /usr/bin/python3's pymemcache is missing
 * (scripts/install-deps.sh installs both). No sleeps but a bounded poll for
 * nutcracker to listen.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "mc_conn.h"
#include "rkv.h"
#include "server_proc.h"

#define NSERVERS 3

static const char *server_bin, *nutcracker_bin;
static unsigned nkeys = 10000;

struct env {
    struct server_group g; /* NSERVERS servers, their tcp doors, the directory */
    pid_t proxy;           /* nutcracker */
    unsigned proxy_port;
    rkv_client *kv; /* ketama over the three shm listeners */
};

/* ------------------------------------------------------------ the items */

/* Item i of a prefix, as client_py below makes it too: the key,
 * its value ("KEY|i|" repeated 1..5 times, 45 times for every 101st) and
 * its flags. */
static size_t item(const char *prefix, unsigned i, char *key, char *value, uint32_t *flags)
{
    char unit[64];
    snprintf(key, 32, "%s:%05u", prefix, i);
    int ul = snprintf(unit, sizeof unit, "%s|%u|", key, i);
    unsigned reps = 1 + i % 5 + (i % 101 == 0 ? 40 : 0);
    for (unsigned r = 0; r < reps; r++)
        memcpy(value + r * (unsigned)ul, unit, (size_t)ul);
    *flags = (uint32_t)(i * 2654435761u);
    return reps * (size_t)ul;
}

/* ------------------------------------------------------------ nutcracker */

static const char *find_nutcracker(void)
{
    static const char *const where[] = { "/usr/sbin/nutcracker", "/usr/bin/nutcracker",
                                         "/usr/local/sbin/nutcracker", "/usr/local/bin/nutcracker" };
    const char *env = getenv("RKV_NUTCRACKER");
    if (env)
        return access(env, X_OK) == 0 ? env : NULL;
    for (size_t i = 0; i < sizeof where / sizeof where[0]; i++)
        if (access(where[i], X_OK) == 0)
            return where[i];
    return NULL;
}

/* Whether the port stores a probe key on our servers: "STORED" through it
 * and librkv finds the key (PROXY_OURS), "STORED" but not on our servers
 * (PROXY_FOREIGN: someone else's server has the port), or not yet. */
enum proxy_probe { PROXY_NOT_YET, PROXY_OURS, PROXY_FOREIGN };
static enum proxy_probe proxy_answers(const struct env *e, unsigned attempt)
{
    char key[64], req[128], buf[16], v;
    size_t got = 0, len;
    int kl = snprintf(key, sizeof key, "rkv-twemproxy-probe-%d-%u", (int)getpid(), attempt);
    int rl = snprintf(req, sizeof req, "set %s 0 0 1\r\nx\r\n", key);
    int fd = mc_connect(e->proxy_port);
    if (fd < 0)
        return PROXY_NOT_YET;
    if (mc_send_all(fd, req, (size_t)rl))
        got = mc_recv_n(fd, buf, 8);
    close(fd);
    if (got != 8 || memcmp(buf, "STORED\r\n", 8) != 0)
        return PROXY_NOT_YET;
    if (rkv_get(e->kv, key, (size_t)kl, &v, 1, &len, NULL) != RKV_OK || v != 'x')
        return PROXY_FOREIGN;
    return rkv_delete(e->kv, key, (size_t)kl) == RKV_OK ? PROXY_OURS : PROXY_NOT_YET;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_true(fputs(text, f) >= 0);
    assert_int_equal(fclose(f), 0);
}

static void show_log(const struct env *e)
{
    char cmd[160];
    snprintf(cmd, sizeof cmd, "tail -n 20 %s/nutcracker.log >&2", e->g.dir);
    if (system(cmd) != 0)
        fprintf(stderr, "(no nutcracker log)\n");
}

/* nutcracker on a port drawn from the pid (retrying one that is taken:
 * nutcracker then exits), until it stores through to our servers. The
 * second server is named "beta" with weight 2, as librkv's URI says. */
static int start_proxy(struct env *e)
{
    for (unsigned attempt = 0; attempt < 20; attempt++) {
        char conf[1024], path[128], stats[16];
        e->proxy_port = 20000 + (unsigned)((getpid() * 137u + 5003u + attempt * 7919u) % 40000u);
        snprintf(stats, sizeof stats, "%u", 20000 + (e->proxy_port - 20000 + 1) % 40000u);
        snprintf(conf, sizeof conf,
                 "rkv:\n"
                 "  listen: 127.0.0.1:%u\n"
                 "  hash: md5\n"
                 "  distribution: ketama\n"
                 "  timeout: 20000\n"
                 "  auto_eject_hosts: false\n"
                 "  servers:\n"
                 "   - 127.0.0.1:%u:1\n"
                 "   - 127.0.0.1:%u:2 beta\n"
                 "   - 127.0.0.1:%u:1\n",
                 e->proxy_port, e->g.port[0], e->g.port[1], e->g.port[2]);
        snprintf(path, sizeof path, "%s/nutcracker.yml", e->g.dir);
        write_file(path, conf);
        char log[128], pid[128];
        snprintf(log, sizeof log, "%s/nutcracker.log", e->g.dir);
        snprintf(pid, sizeof pid, "%s/nutcracker.pid", e->g.dir);
        e->proxy = fork();
        if (e->proxy < 0)
            return -1;
        if (e->proxy == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL); /* a test killed by its timeout takes it along */
            execl(nutcracker_bin, nutcracker_bin, "-c", path, "-s", stats, "-a", "127.0.0.1", "-o",
                  log, "-p", pid, "-v", "4", (char *)NULL);
            fprintf(stderr, "exec %s: %s\n", nutcracker_bin, strerror(errno));
            _exit(127);
        }
        for (unsigned i = 0; i < 1500; i++) { /* a 30 s safety net */
            int status;
            if (waitpid(e->proxy, &status, WNOHANG) == e->proxy) {
                fprintf(stderr, "nutcracker exited (status %d) on port %u; trying another\n",
                        WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status),
                        e->proxy_port);
                show_log(e);
                e->proxy = 0;
                break;
            }
            enum proxy_probe pr = proxy_answers(e, attempt);
            if (pr == PROXY_OURS)
                return 0;
            if (pr == PROXY_FOREIGN) {
                fprintf(stderr, "port %u answers for someone else's server; trying another\n",
                        e->proxy_port);
                kill(e->proxy, SIGKILL);
                waitpid(e->proxy, NULL, 0);
                e->proxy = 0;
                break;
            }
            usleep(20000);
        }
        if (e->proxy > 0) {
            show_log(e);
            kill(e->proxy, SIGKILL);
            waitpid(e->proxy, NULL, 0);
            e->proxy = 0;
            return -1;
        }
    }
    return -1;
}

/* ------------------------------------------------------------ the client */

static const char client_py[] =
    "import sys\n"
    "from pymemcache.client.base import Client\n"
    "\n"
    "port, mode, prefix, count = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])\n"
    "\n"
    "def item(i):\n"
    "    key = '%s:%05d' % (prefix, i)\n"
    "    reps = 1 + i % 5 + (40 if i % 101 == 0 else 0)\n"
    "    return key, ('%s|%d|' % (key, i)).encode() * reps, (i * 2654435761) % 2**32\n"
    "\n"
    "class Raw:\n"
    "    # bytes as they are; a key's flags are its item's\n"
    "    def serialize(self, key, value):\n"
    "        return value, item(int(key.rsplit(b':', 1)[1]))[2]\n"
    "    def deserialize(self, key, value, flags):\n"
    "        return value, flags\n"
    "\n"
    "c = Client(('127.0.0.1', port), serde=Raw(), timeout=30, connect_timeout=30)\n"
    "bad = 0\n"
    "for start in range(0, count, 100):\n"
    "    items = [item(i) for i in range(start, min(count, start + 100))]\n"
    "    if mode == 'write':\n"
    "        failed = c.set_many({k: v for k, v, _ in items}, noreply=False)\n"
    "        for k in failed:\n"
    "            print('set %s through the proxy: not stored' % k); bad += 1\n"
    "    else:\n"
    "        got = c.get_many([k for k, _, _ in items])\n"
    "        for k, v, f in items:\n"
    "            if got.get(k) != (v, f):\n"
    "                print('%s through the proxy: %r, librkv wrote %r' % (k, got.get(k), (v, f)))\n"
    "                bad += 1\n"
    "c.close()\n"
    "print('pymemcache %s %d keys through the proxy: %d bad' % (mode, count, bad))\n"
    "sys.exit(1 if bad else 0)\n";

static int run_client(const struct env *e, const char *mode, const char *prefix)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/client.py %u %s %s %u", e->g.dir, e->proxy_port,
             mode, prefix, nkeys);
    return system(cmd);
}

/* ------------------------------------------------------------ setup */

static int teardown(void **state)
{
    struct env *e = *state;
    int rc = 0;
    if (e == NULL)
        return 0;
    rkv_close(e->kv);
    if (e->proxy > 0) {
        kill(e->proxy, SIGTERM);
        waitpid(e->proxy, NULL, 0);
    }
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
    if (server_group_start(&e->g, server_bin, NSERVERS, 0, "twemproxy", NULL) != 0)
        return -1;
    snprintf(path, sizeof path, "%s/client.py", e->g.dir);
    write_file(path, client_py);
    /* server 0 and 2 named from their tcp doors, server 1 "beta" of weight 2 */
    snprintf(list, sizeof list,
             "%s?placement=ketama&tcp=127.0.0.1:%u,%s?name=beta&weight=2,%s?tcp=127.0.0.1:%u",
             e->g.sp[0].uri, e->g.port[0], e->g.sp[1].uri, e->g.sp[2].uri, e->g.port[2]);
    e->kv = connect_retry(list, NULL, 20000);
    if (e->kv == NULL) {
        fprintf(stderr, "librkv: %s\n", rkv_last_error(NULL));
        return -1;
    }
    return start_proxy(e);
}

/* ------------------------------------------------------------ tests */

static void test_proxy_to_librkv(void **state)
{
    struct env *e = *state;
    static char want[4096], got[4096];
    char key[32];
    uint64_t before[NSERVERS], items, total = 0;
    for (unsigned s = 0; s < NSERVERS; s++)
        assert_true(server_stat(e->kv, s, "items", &before[s]));
    assert_int_equal(run_client(e, "write", "tw:p"), 0);

    struct rkv_counters c0, c1;
    rkv_get_counters(e->kv, &c0);
    unsigned bad = 0;
    for (unsigned i = 0; i < nkeys; i++) {
        uint32_t flags;
        size_t n = item("tw:p", i, key, want, &flags), len = 0;
        struct rkv_item_info info;
        rkv_status st = rkv_get(e->kv, key, strlen(key), got, sizeof got, &len, &info);
        if (st != RKV_OK || len != n || memcmp(got, want, n) != 0 || info.user_flags != flags) {
            if (bad++ < 5)
                print_message("%s (ketama: server %u): %s, %zu bytes, flags %u; the proxy wrote "
                              "%zu bytes, flags %u\n",
                              key, rkv_shard_of(e->kv, key, strlen(key)), rkv_strerror(st), len,
                              info.user_flags, n, flags);
        }
    }
    rkv_get_counters(e->kv, &c1);
    print_message("librkv read %u keys one-sidedly: %u wrong; %llu READs, %llu requests sent\n",
                  nkeys, bad, (unsigned long long)(c1.reads - c0.reads),
                  (unsigned long long)(c1.sends - c0.sends));
    assert_int_equal(bad, 0);
    assert_true(c1.gets - c0.gets == nkeys && c1.get_hits - c0.get_hits == nkeys);
    assert_true(c1.reads - c0.reads >= nkeys); /* every GET was a READ */
    for (unsigned s = 0; s < NSERVERS; s++) {
        assert_true(server_stat(e->kv, s, "items", &items));
        print_message("server %u: %llu of the proxy's keys\n", s,
                      (unsigned long long)(items - before[s]));
        assert_true(items > before[s]); /* the proxy used every server */
        total += items - before[s];
    }
    assert_int_equal(total, nkeys);
}

static void test_librkv_to_proxy(void **state)
{
    struct env *e = *state;
    static char value[4096];
    char key[32];
    for (unsigned i = 0; i < nkeys; i++) {
        uint32_t flags;
        size_t n = item("tw:r", i, key, value, &flags);
        struct rkv_put_options o = { .user_flags = flags };
        rkv_status st = rkv_put(e->kv, key, strlen(key), value, n, &o, NULL);
        if (st != RKV_OK)
            fail_msg("rkv_put %s: %s (%s)", key, rkv_strerror(st), rkv_last_error(e->kv));
    }
    assert_int_equal(run_client(e, "read", "tw:r"), 0);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s PATH/TO/rkv-server\n", argv[0]);
        return 2;
    }
    server_bin = argv[1];
    if (getenv("RKV_TEST_TWEMPROXY_KEYS"))
        nkeys = (unsigned)strtoul(getenv("RKV_TEST_TWEMPROXY_KEYS"), NULL, 10);
    nutcracker_bin = find_nutcracker();
    if (nutcracker_bin == NULL) {
        printf("test_twemproxy: skipped: nutcracker (twemproxy) is not installed; "
               "scripts/install-deps.sh installs it (apt-get install nutcracker)\n");
        return 77;
    }
    if (system("/usr/bin/python3 -c 'import pymemcache' 2>/dev/null") != 0) {
        printf("test_twemproxy: skipped: /usr/bin/python3 has no pymemcache; "
               "scripts/install-deps.sh installs it (apt-get install python3-pymemcache)\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_proxy_to_librkv),
        cmocka_unit_test(test_librkv_to_proxy),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
