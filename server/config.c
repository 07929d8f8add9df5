/* config.c — see config.h.
 *
 * One table (settings[]) names every setting once: its INI section and key,
 * its command-line flag, where it lives in struct rkv_server_config, how
 * its value is checked, and its default. The INI handler and the getopt loop
 * both look a setting up in that table and call the same setter, so a file
 * line and a flag are validated by exactly the same code. Setters never
 * print: they describe a bad value in a `struct problem`, and the caller
 * words the message for its source (flag or file line).
 *
 * A default is written only in its row: rkv_server_config_defaults() applies
 * it through the row's setter, as if a file said it, and --help prints it
 * from the row.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ini.h>

#include "config.h"
#include "layout.h"
#include "log.h"
#include "protocol.h"
#include "rdma_util.h"
#include "rkv.h"
#include "table.h"
#include "transport.h"
#include "util.h"

#define PROG         "rkv-server"
#define SHM_PATH_MAX 107u  /* sizeof(sockaddr_un.sun_path) - 1 */
#define CPU_ID_MAX   1023u /* CPU_SETSIZE - 1 */
#define SHOW_MAX     80u   /* longest value echoed back in a message */

/* What was wrong with a value: `what` reads after the quoted value ("is not
 * a size"), `expect` says what would be accepted. A flag's message shows
 * both; a file line's message shows the value and `expect`. */
struct problem {
    const char *what;
    char expect[256];
};

struct setting;
typedef bool (*setter_fn)(struct rkv_server_config *c, const struct setting *s, const char *v,
                          struct problem *p);

/* One configurable value. */
struct setting {
    const char *section; /* INI section without brackets */
    const char *key;     /* INI key */
    const char *flag;    /* long option without "--" */
    char short_flag;     /* or 0 */
    bool no_arg;         /* the flag takes no value (means "yes") */
    bool repeatable;     /* may appear on several lines / flags accumulate */
    uint8_t dup_group;   /* settings that exclude each other in one file share it */
    setter_fn set;
    size_t offset;             /* field in struct rkv_server_config */
    size_t field_size;         /* sizeof that field */
    uint64_t min, max;         /* numeric range (setters that use it) */
    const char *arg;           /* argument name in --help */
    const char *help;          /* one line for --help, which appends the default */
    const char *default_value; /* spelt as in the file; applied through `set` and shown as
                                  "(default VALUE)"; NULL: the field starts zero or empty */
    const char *default_words; /* without a default_value: what applies unset (derived by
                                  finish(), or no value), shown as "(default: WORDS)" */
};

static void problem_set(struct problem *p, const char *what, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void problem_set(struct problem *p, const char *what, const char *fmt, ...)
{
    va_list ap;
    p->what = what;
    va_start(ap, fmt);
    vsnprintf(p->expect, sizeof p->expect, fmt, ap);
    va_end(ap);
}

static void *field(struct rkv_server_config *c, const struct setting *s)
{
    return (char *)c + s->offset;
}

/* Store an unsigned value into a field of any of the integer widths used. */
static void store_uint(void *dst, size_t size, uint64_t v)
{
    switch (size) {
    case 1: *(uint8_t *)dst = (uint8_t)v; break;
    case 2: *(uint16_t *)dst = (uint16_t)v; break;
    case 4: *(uint32_t *)dst = (uint32_t)v; break;
    default: *(uint64_t *)dst = v; break;
    }
}

static bool has_control_chars(const char *v)
{
    for (const unsigned char *q = (const unsigned char *)v; *q; q++)
        if (*q < 0x20 || *q == 0x7f)
            return true;
    return false;
}

/* ------------------------------------------------------------ setters */

static bool set_uint(struct rkv_server_config *c, const struct setting *s, const char *v,
                     struct problem *p)
{
    uint64_t n;
    if (!rkv_parse_u64(v, s->min, s->max, &n)) {
        problem_set(p, isdigit((unsigned char)v[0]) ? "is out of range" : "is not a whole number",
                    "expected %llu..%llu", (unsigned long long)s->min, (unsigned long long)s->max);
        return false;
    }
    store_uint(field(c, s), s->field_size, n);
    return true;
}

static bool set_size(struct rkv_server_config *c, const struct setting *s, const char *v,
                     struct problem *p)
{
    uint64_t n;
    char lo[32], hi[32];
    if (!rkv_parse_size(v, &n)) {
        problem_set(p, "is not a size", "use a number with an optional K/M/G/T suffix, e.g. 256M");
        return false;
    }
    if (n < s->min || n > s->max) {
        problem_set(p, "is out of range", "expected a size from %s to %s",
                    rkv_format_size(s->min, lo, sizeof lo), rkv_format_size(s->max, hi, sizeof hi));
        return false;
    }
    store_uint(field(c, s), s->field_size, n);
    return true;
}

static bool set_pow2_size(struct rkv_server_config *c, const struct setting *s, const char *v,
                          struct problem *p)
{
    uint64_t n;
    if (rkv_parse_size(v, &n) && n >= s->min && n <= s->max && (n & (n - 1)) == 0) {
        store_uint(field(c, s), s->field_size, n);
        return true;
    }
    problem_set(p, "is not an allowed page size", "expected a power of two from 64K to 16M, e.g. 1M");
    return false;
}

static bool parse_bool(const char *v, bool *out, struct problem *p)
{
    static const char *const yes[] = { "yes", "true", "on", "1" };
    static const char *const no[] = { "no", "false", "off", "0" };
    for (size_t i = 0; i < RKV_ARRAY_SIZE(yes); i++) {
        if (strcasecmp(v, yes[i]) == 0 || strcasecmp(v, no[i]) == 0) {
            *out = strcasecmp(v, yes[i]) == 0;
            return true;
        }
    }
    problem_set(p, "is not yes or no", "expected yes/no (or true/false, on/off, 1/0)");
    return false;
}

static bool set_bool(struct rkv_server_config *c, const struct setting *s, const char *v,
                     struct problem *p)
{
    return parse_bool(v, (bool *)field(c, s), p);
}

static bool set_log_level(struct rkv_server_config *c, const struct setting *s, const char *v,
                          struct problem *p)
{
    int lvl = rkv_log_parse_level(v);
    if (lvl < 0) {
        problem_set(p, "is not a log level", "expected error, warn, info or debug");
        return false;
    }
    *(int *)field(c, s) = lvl;
    return true;
}

static bool set_evict(struct rkv_server_config *c, const struct setting *s, const char *v,
                      struct problem *p)
{
    static const struct {
        const char *name;
        enum rkv_evict_policy policy;
    } policies[] = {
        { "none", RKV_EVICT_NONE },
        { "lru", RKV_EVICT_LRU },
        { "random", RKV_EVICT_RANDOM },
        { "s3fifo", RKV_EVICT_S3FIFO },
    };
    for (size_t i = 0; i < RKV_ARRAY_SIZE(policies); i++) {
        if (strcmp(v, policies[i].name) == 0) {
            *(int *)field(c, s) = (int)policies[i].policy;
            return true;
        }
    }
    problem_set(p, "is not an eviction policy",
                "expected none (PUT fails when full), lru, random or s3fifo");
    return false;
}

static bool set_poll_mode(struct rkv_server_config *c, const struct setting *s, const char *v,
                          struct problem *p)
{
    static const struct {
        const char *name;
        enum rkv_poll_mode mode;
    } modes[] = {
        { "adaptive", RKV_POLL_ADAPTIVE },
        { "busy", RKV_POLL_BUSY },
        { "event", RKV_POLL_EVENT },
    };
    for (size_t i = 0; i < RKV_ARRAY_SIZE(modes); i++) {
        if (strcmp(v, modes[i].name) == 0) {
            *(int *)field(c, s) = (int)modes[i].mode;
            return true;
        }
    }
    problem_set(p, "is not a poll mode",
                "expected adaptive (spin, then sleep when idle), busy "
                "(always spin) or event (sleep whenever idle)");
    return false;
}

/* event_mode = yes|no (--event-mode): the older switch; yes is poll_mode
 * event, no the busy polling it used to mean. */
static bool set_event_mode(struct rkv_server_config *c, const struct setting *s, const char *v,
                           struct problem *p)
{
    bool on;
    (void)s;
    if (!parse_bool(v, &on, p))
        return false;
    c->poll_mode = on ? RKV_POLL_EVENT : RKV_POLL_BUSY;
    return true;
}

static bool set_gid_index(struct rkv_server_config *c, const struct setting *s, const char *v,
                          struct problem *p)
{
    uint64_t n;
    if (strcmp(v, "-1") == 0 || strcmp(v, "auto") == 0) {
        *(int *)field(c, s) = -1;
        return true;
    }
    if (!rkv_parse_u64(v, s->min, s->max, &n)) {
        problem_set(p, "is not a GID index",
                    "expected auto (or -1) or %llu..%llu; "
                    "rkv-doctor lists the port's GIDs",
                    (unsigned long long)s->min, (unsigned long long)s->max);
        return false;
    }
    *(int *)field(c, s) = (int)n;
    return true;
}

/* A string copied into a char array field: non-empty, no control bytes. */
static bool set_text(struct rkv_server_config *c, const struct setting *s, const char *v,
                     struct problem *p)
{
    size_t n = strlen(v);
    if (n == 0 || n >= s->field_size || has_control_chars(v)) {
        problem_set(p, "is not usable", "expected 1..%zu printable bytes", s->field_size - 1);
        return false;
    }
    memcpy(field(c, s), v, n + 1);
    return true;
}

static bool set_device(struct rkv_server_config *c, const struct setting *s, const char *v,
                       struct problem *p)
{
    size_t n = strlen(v);
    bool ok = n > 0 && n < s->field_size;
    for (size_t i = 0; ok && i < n; i++)
        ok = isalnum((unsigned char)v[i]) || v[i] == '_' || v[i] == '-' || v[i] == '.';
    if (!ok) {
        problem_set(p, "is not a device name",
                    "expected a name like mlx5_0 or rxe0 (letters, digits, _ - .; "
                    "ibv_devices lists them)");
        return false;
    }
    memcpy(field(c, s), v, n + 1);
    return true;
}

/* Check a listen URI; on success `v` may be stored. */
static bool check_listen_uri(const char *v, struct problem *p)
{
    char scheme[8], host[256];
    const char *rest;
    uint16_t port;
    if (strlen(v) >= sizeof(((struct rkv_listen_uri *)0)->uri)) {
        problem_set(p, "is too long", "a listen URI has at most %zu bytes",
                    sizeof(((struct rkv_listen_uri *)0)->uri) - 1);
        return false;
    }
    if (!rkv_uri_split(v, scheme, sizeof scheme, &rest) ||
        (strcmp(scheme, "rdma") != 0 && strcmp(scheme, "shm") != 0 && strcmp(scheme, "tcp") != 0)) {
        problem_set(p, "is not a listen URI",
                    "expected rdma://HOST:PORT (e.g. rdma://0.0.0.0:7000), shm:///absolute/path.sock "
                    "or tcp://HOST:PORT (memcached text protocol, e.g. tcp://127.0.0.1:11211)");
        return false;
    }
    if (strcmp(scheme, "rdma") == 0 || strcmp(scheme, "tcp") == 0) {
        bool tcp = strcmp(scheme, "tcp") == 0;
        if (!rkv_host_port(rest, host, sizeof host, &port) || has_control_chars(host)) {
            problem_set(p, tcp ? "is not tcp://HOST:PORT" : "is not rdma://HOST:PORT",
                        "expected %s://HOST:PORT with a port 1..65535, e.g. %s", scheme,
                        tcp ? "tcp://127.0.0.1:11211 or tcp://[::1]:11211"
                            : "rdma://192.0.2.1:7000 or rdma://[::]:7000");
            return false;
        }
        return true;
    }
    if (rest[0] != '/' || rest[1] == '\0' || rest[strlen(rest) - 1] == '/' ||
        has_control_chars(rest) || strlen(rest) > SHM_PATH_MAX) {
        problem_set(p, "is not shm:///PATH",
                    "expected shm:// followed by an absolute socket path of at most %u bytes, "
                    "e.g. shm:///run/rkv/rkv.sock",
                    SHM_PATH_MAX);
        return false;
    }
    return true;
}

/* listen: one URI or a comma-separated list, appended to the list. */
static bool set_listen(struct rkv_server_config *c, const struct setting *s, const char *v,
                       struct problem *p)
{
    (void)s;
    char item[512];
    const char *cur = v;
    for (;;) {
        const char *comma = strchr(cur, ',');
        size_t n = comma ? (size_t)(comma - cur) : strlen(cur);
        while (n > 0 && isspace((unsigned char)*cur)) {
            cur++;
            n--;
        }
        while (n > 0 && isspace((unsigned char)cur[n - 1]))
            n--;
        if (n == 0) {
            problem_set(p, "has an empty entry",
                        "expected one URI or a comma-separated list of rdma://HOST:PORT and "
                        "shm:///PATH URIs");
            return false;
        }
        if (n >= sizeof item)
            n = sizeof item - 1; /* check_listen_uri rejects it as too long */
        memcpy(item, cur, n);
        item[n] = '\0';
        if (!check_listen_uri(item, p))
            return false;
        for (unsigned i = 0; i < c->listen_count; i++) {
            if (strcmp(c->listen[i].uri, item) == 0) {
                problem_set(p, "repeats an address", "%s is already listed; list each address once",
                            item);
                return false;
            }
        }
        if (c->listen_count >= RKV_CONFIG_MAX_LISTEN) {
            problem_set(p, "is one address too many", "at most %u listen URIs",
                        RKV_CONFIG_MAX_LISTEN);
            return false;
        }
        memcpy(c->listen[c->listen_count++].uri, item, n + 1);
        if (comma == NULL)
            return true;
        cur = comma + 1;
    }
}

int rkv_parse_cpu_list(const char *s, int *cpus, unsigned max, char *why, size_t why_len)
{
    unsigned count = 0;
    const char *cur = s;
    char item[32];
    for (;;) {
        const char *comma = strchr(cur, ',');
        size_t n = comma ? (size_t)(comma - cur) : strlen(cur);
        while (n > 0 && isspace((unsigned char)*cur)) {
            cur++;
            n--;
        }
        while (n > 0 && isspace((unsigned char)cur[n - 1]))
            n--;
        if (n == 0 || n >= sizeof item) {
            snprintf(why, why_len, "an entry is empty or too long");
            return -1;
        }
        memcpy(item, cur, n);
        item[n] = '\0';
        uint64_t lo, hi;
        char *dash = strchr(item, '-');
        if (dash != NULL)
            *dash = '\0';
        if (!rkv_parse_u64(item, 0, CPU_ID_MAX, &lo) ||
            !rkv_parse_u64(dash ? dash + 1 : item, 0, CPU_ID_MAX, &hi) || hi < lo) {
            snprintf(why, why_len, "\"%.*s\" is not a CPU number 0..%u or a range A-B with A <= B",
                     (int)n, cur, CPU_ID_MAX);
            return -1;
        }
        for (uint64_t cpu = lo; cpu <= hi; cpu++) {
            for (unsigned i = 0; i < count; i++) {
                if (cpus[i] == (int)cpu) {
                    snprintf(why, why_len, "CPU %llu is listed twice", (unsigned long long)cpu);
                    return -1;
                }
            }
            if (count >= max) {
                snprintf(why, why_len, "more than %u CPUs", max);
                return -1;
            }
            cpus[count++] = (int)cpu;
        }
        if (comma == NULL)
            return (int)count;
        cur = comma + 1;
    }
}

static bool set_cpus(struct rkv_server_config *c, const struct setting *s, const char *v,
                     struct problem *p)
{
    (void)s;
    int cpus[RKV_CONFIG_MAX_CPUS];
    char why[160];
    if (v[0] == '\0' || strcmp(v, "auto") == 0) {
        c->cpu_count = 0;
        return true;
    }
    int n = rkv_parse_cpu_list(v, cpus, RKV_CONFIG_MAX_CPUS, why, sizeof why);
    if (n < 0) {
        problem_set(p, "is not a CPU list", "%s; expected e.g. 0,2-3 or auto", why);
        return false;
    }
    memcpy(c->cpus, cpus, (size_t)n * sizeof cpus[0]);
    c->cpu_count = (unsigned)n;
    return true;
}

static bool set_host_port(struct rkv_server_config *c, const struct setting *s, const char *v,
                          struct problem *p)
{
    char host[128];
    uint16_t port;
    if (v[0] == '\0' || strcmp(v, "off") == 0) {
        ((char *)field(c, s))[0] = '\0';
        return true;
    }
    if (strlen(v) >= s->field_size || !rkv_host_port(v, host, sizeof host, &port) ||
        has_control_chars(v)) {
        problem_set(p, "is not HOST:PORT",
                    "expected HOST:PORT with a port 1..65535 (e.g. 127.0.0.1:9121) or off");
        return false;
    }
    memcpy(field(c, s), v, strlen(v) + 1);
    return true;
}

/* A shared secret: 1..RKV_MAX_SECRET printable, non-space ASCII bytes. */
static bool check_secret(const char *v, struct problem *p)
{
    size_t n = strlen(v);
    bool ok = n > 0 && n <= RKV_MAX_SECRET;
    for (size_t i = 0; ok && i < n; i++)
        ok = v[i] > 0x20 && v[i] < 0x7f;
    if (!ok)
        problem_set(p, "is not a usable secret",
                    "expected 1..%u printable ASCII characters without spaces, e.g. from "
                    "`openssl rand -hex 32`",
                    RKV_MAX_SECRET);
    return ok;
}

static bool set_secret(struct rkv_server_config *c, const struct setting *s, const char *v,
                       struct problem *p)
{
    (void)s;
    if (!check_secret(v, p))
        return false;
    memcpy(c->auth_secret, v, strlen(v) + 1);
    return true;
}

/* secret_file: the secret is the file's first line (a final newline is
 * dropped). The file must be a regular file no larger than a secret. */
static bool set_secret_file(struct rkv_server_config *c, const struct setting *s, const char *v,
                            struct problem *p)
{
    (void)s;
    char buf[RKV_MAX_SECRET + 3];
    struct stat st;
    ssize_t n = -1;
    int fd = open(v, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
        problem_set(p, "cannot be opened",
                    "%s; create it (e.g. `openssl rand -hex 32 > FILE; "
                    "chmod 600 FILE`) or fix the path",
                    strerror(errno));
        return false;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        problem_set(p, "is not a regular file", "point secret_file at a file holding the secret");
        goto fail;
    }
    n = read(fd, buf, sizeof buf - 1);
    if (n < 0) {
        problem_set(p, "cannot be read", "%s", strerror(errno));
        goto fail;
    }
    buf[n] = '\0';
    if (n > 0 && buf[n - 1] == '\n')
        buf[--n] = '\0';
    if (n > 0 && buf[n - 1] == '\r')
        buf[--n] = '\0';
    if (memchr(buf, '\0', (size_t)n) != NULL || !check_secret(buf, p)) {
        problem_set(p, "does not hold a usable secret",
                    "the file must hold one line of 1..%u printable ASCII characters without "
                    "spaces, e.g. from `openssl rand -hex 32`",
                    RKV_MAX_SECRET);
        goto fail;
    }
    memcpy(c->auth_secret, buf, (size_t)n + 1);
    close(fd);
    return true;
fail:
    close(fd);
    return false;
}

/* ------------------------------------------------------------ the table */

#define F(name) \
    offsetof(struct rkv_server_config, name), sizeof(((struct rkv_server_config *)0)->name)

enum { GROUP_SECRET = 200, GROUP_POLL_MODE };

/* The last two fields of a row: its default (struct setting). */
#define DEFAULT_VALUE(v) (v), NULL
#define DEFAULT_WORDS(w) NULL, (w)
#define NO_DEFAULT       NULL, NULL
/* A default another file owns as a bare number, spelt as text. */
#define SPELL(n)      SPELL_TEXT(n)
#define SPELL_TEXT(n) #n

static const struct setting settings[] = {
    { "server", "listen", "listen", 'l', false, true, 0, set_listen, F(listen), 0, 0, "URI",
      "listen on rdma://HOST:PORT, shm:///PATH or tcp://HOST:PORT (memcached text protocol); "
      "repeatable",
      DEFAULT_WORDS("shm://RUNDIR/rkv.sock") },
    { "server", "memory", "memory", 'm', false, false, 0, set_size, F(memory),
      RKV_CONFIG_MIN_MEMORY, 16ull << 40, "SIZE", "table region size", DEFAULT_VALUE("256M") },
    { "server", "workers", "workers", 'w', false, false, 0, set_uint, F(workers), 1,
      RKV_CONFIG_MAX_WORKERS, "N", "request threads", DEFAULT_VALUE("1") },
    { "server", "cpus", "cpus", 0, false, false, 0, set_cpus, F(cpus), 0, 0, "LIST",
      "pin workers to these CPUs, e.g. 0,2-3; auto: the NIC's NUMA node", DEFAULT_VALUE("auto") },
    { "server", "log_level", "log-level", 0, false, false, 0, set_log_level, F(log_level), 0, 0,
      "LEVEL", "error, warn, info or debug", DEFAULT_VALUE("info") },
    { "server", "log_file", "log-file", 0, false, false, 0, set_text, F(log_file), 0, 0, "PATH",
      "append log lines to PATH", DEFAULT_WORDS("stderr") },
    { "server", "poll_mode", "poll-mode", 0, false, false, GROUP_POLL_MODE, set_poll_mode,
      F(poll_mode), 0, 0, "MODE",
      "adaptive (spin, sleep after --poll-idle-us idle), busy or "
      "event",
      DEFAULT_VALUE("adaptive") },
    { "server", "event_mode", "event-mode", 0, true, false, GROUP_POLL_MODE, set_event_mode,
      F(poll_mode), 0, 0, NULL, "the same as --poll-mode event", NO_DEFAULT },
    { "server", "poll_idle_us", "poll-idle-us", 0, false, false, 0, set_uint, F(poll_idle_us), 1,
      1000000, "US", "adaptive mode: sleep after US without a request", DEFAULT_VALUE("200") },
    { "server", "hugepages_required", "hugepages-required", 0, true, false, 0, set_bool,
      F(hugepages_required), 0, 0, NULL, "fail instead of falling back to normal pages",
      DEFAULT_VALUE("no") },
    { "server", "memory_check", "memory-check", 0, false, false, 0, set_bool, F(memory_check), 0, 0,
      "on|off", "refuse a --memory this machine cannot back", DEFAULT_VALUE("on") },
    { "server", "state_file", "state-file", 0, false, false, 0, set_text, F(state_file), 0, 0, "PATH",
      "keep the cache across a clean restart: written at stop, read back and removed at "
      "start",
      DEFAULT_WORDS("none, every start is empty") },
    { "server", "fd_store", "fd-store", 0, false, false, 0, set_bool, F(fd_store), 0, 0, "on|off",
      "under systemd (FileDescriptorStoreMax=2): keep the region in the service manager's "
      "file-descriptor store, and start on it after a crash or restart",
      DEFAULT_VALUE("on") },
    { "table", "slab_page_size", "slab-page-size", 0, false, false, 0, set_pow2_size,
      F(slab_page_size), 64u << 10, 16u << 20, "SIZE", "slab page = largest item",
      DEFAULT_VALUE("1M") },
    { "table", "max_value_len", "max-value-len", 0, false, false, 0, set_size, F(max_value_len), 1,
      16u << 20, "SIZE", "longest value", DEFAULT_WORDS("what a slab page holds") },
    { "table", "item_size_hint", "item-size-hint", 0, false, false, 0, set_size, F(item_size_hint),
      RKV_MIN_ITEM_SIZE, 16u << 20, "SIZE",
      "usual item size (28-byte header + key + value) to size the index for at start: one slot "
      "per SIZE bytes of heap (it may grow from there)",
      DEFAULT_WORDS("none: the index starts small and grows as items need buckets") },
    { "table", "grace_ms", "grace-ms", 0, false, false, 0, set_uint, F(grace_ms), 0, 60000, "MS",
      "reuse freed memory only after MS", DEFAULT_VALUE("100") },
    { "table", "default_ttl", "default-ttl", 0, false, false, 0, set_uint, F(default_ttl), 0,
      INT32_MAX, "SECONDS", "TTL for PUTs that give none; 0 = never", DEFAULT_VALUE("0") },
    { "table", "evict", "evict", 0, false, false, 0, set_evict, F(evict), 0, 0, "POLICY",
      "none, lru, random or s3fifo", DEFAULT_VALUE("s3fifo") },
    { "rpc", "credits", "credits", 0, false, false, 0, set_uint, F(credits), 1, 4096, "N",
      "requests in flight per connection", DEFAULT_VALUE(SPELL(RKV_STRANS_DEFAULT_CREDITS)) },
    { "rpc", "max_msg", "max-msg", 0, false, false, 0, set_size, F(max_msg), RKV_MIN_MSG, RKV_MAX_MSG,
      "SIZE", "bytes per request message", DEFAULT_VALUE(SPELL(RKV_STRANS_DEFAULT_MAX_MSG)) },
    { "rpc", "max_conns", "max-conns", 0, false, false, 0, set_uint, F(max_conns), 1, 65536, "N",
      "authenticated connections at once", DEFAULT_VALUE(SPELL(RKV_STRANS_DEFAULT_MAX_CONNS)) },
    { "rpc", "max_unauth_conns", "max-unauth-conns", 0, false, false, 0, set_uint,
      F(max_unauth_conns), 1, 4096, "N",
      "connections not past HELLO yet; the oldest is dropped "
      "for a new one",
      DEFAULT_VALUE("16") },
    { "rpc", "hello_timeout_ms", "hello-timeout-ms", 0, false, false, 0, set_uint, F(hello_timeout_ms),
      10, 600000, "MS", "close a connection without HELLO after MS", DEFAULT_VALUE("5000") },
    { "rdma", "device", "rdma-device", 0, false, false, 0, set_device, F(rdma_device), 0, 0, "NAME",
      "RDMA device, e.g. mlx5_0", DEFAULT_WORDS("rdma_cm's choice") },
    { "rdma", "gid_index", "gid-index", 0, false, false, 0, set_gid_index, F(gid_index), 0, 65535,
      "N", "RoCE GID index; auto: rdma_cm's choice", DEFAULT_VALUE("auto") },
    { "rdma", "max_inline", "max-inline", 0, false, false, 0, set_uint, F(max_inline), 0, 1024,
      "BYTES", "inline data per send", DEFAULT_VALUE(SPELL(RKV_RDMA_SERVER_INLINE)) },
    { "rdma", "signal_interval", "signal-interval", 0, false, false, 0, set_uint, F(signal_interval),
      1, 1024, "N", "signal one send in N", DEFAULT_VALUE(SPELL(RKV_RDMA_DEFAULT_SIGNAL)) },
    { "rdma", "cq_size", "cq-size", 0, false, false, 0, set_uint, F(cq_size), 0, 4u << 20, "N",
      "completion queue entries; 0 = automatic", DEFAULT_VALUE("0") },
    { "rdma", "srq_depth", "srq-depth", 0, false, false, 0, set_uint, F(srq_depth), 0, 65536, "N",
      "receive buffers per worker's shared receive queue, at most; 0 = a queue per connection",
      DEFAULT_VALUE(SPELL(RKV_RDMA_DEFAULT_SRQ_DEPTH)) },
    { "rdma", "tos", "tos", 0, false, false, 0, set_uint, F(tos), 0, 255, "N",
      "IP type of service for RoCE", DEFAULT_VALUE("0") },
    { "rdma", "ack_timeout", "rdma-ack-timeout", 0, false, false, 0, set_uint, F(ack_timeout),
      RKV_RDMA_ACK_TIMEOUT_MIN, RKV_RDMA_ACK_TIMEOUT_MAX, "N",
      "RC ACK timeout: each try waits "
      "4.096 us x 2^N",
      DEFAULT_VALUE(SPELL(RKV_RDMA_ACK_TIMEOUT)) },
    { "rdma", "retry_count", "rdma-retry-count", 0, false, false, 0, set_uint, F(retry_count),
      RKV_RDMA_RETRY_COUNT_MIN, RKV_RDMA_RETRY_COUNT_MAX, "N",
      "RC retransmissions before a "
      "transfer to a silent peer fails; Soft-RoCE retries forever at 7",
      DEFAULT_VALUE(SPELL(RKV_RDMA_RETRY_COUNT)) },
    { "security", "secret", "auth-secret", 0, false, false, GROUP_SECRET, set_secret,
      F(auth_secret), 0, 0, "SECRET",
      "shared secret clients must present; visible in ps, so "
      "prefer --auth-secret-file",
      DEFAULT_WORDS("none") },
    { "security", "secret_file", "auth-secret-file", 0, false, false, GROUP_SECRET, set_secret_file,
      F(auth_secret), 0, 0, "FILE", "read the shared secret from FILE", NO_DEFAULT },
    { "security", "tcp_allow_unauthenticated", "tcp-allow-unauthenticated", 0, true, false, 0,
      set_bool, F(tcp_allow_unauthenticated), 0, 0, NULL,
      "with a secret, open tcp:// (memcached, "
      "which cannot authenticate) on non-loopback addresses too",
      DEFAULT_VALUE("no") },
    { "stats", "listen", "stats-listen", 0, false, false, 0, set_host_port, F(stats_listen), 0, 0,
      "HOST:PORT", "serve Prometheus text metrics, e.g. 127.0.0.1:9121", DEFAULT_VALUE("off") },
};

#undef F
#undef DEFAULT_VALUE
#undef DEFAULT_WORDS
#undef NO_DEFAULT
#undef SPELL
#undef SPELL_TEXT

#define N_SETTINGS RKV_ARRAY_SIZE(settings)
static const char *const sections[] = { "server", "table", "rpc", "rdma", "security", "stats" };

/* ------------------------------------------------------------ messages */

static void say(FILE *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(FILE *err, const char *fmt, ...)
{
    if (err == NULL)
        return;
    va_list ap;
    va_start(ap, fmt);
    fputs(PROG ": ", err);
    vfprintf(err, fmt, ap);
    fputc('\n', err);
    va_end(ap);
}

/* A value as it may be echoed in a message: control bytes become '?', and
 * anything past SHOW_MAX bytes becomes "...". */
static const char *shown(const char *v, char *buf, size_t len)
{
    size_t i = 0;
    for (; v[i] != '\0' && i + 4 < len && i < SHOW_MAX; i++)
        buf[i] = ((unsigned char)v[i] < 0x20 || v[i] == 0x7f) ? '?' : v[i];
    if (v[i] != '\0')
        buf[i++] = '.', buf[i++] = '.', buf[i++] = '.';
    buf[i] = '\0';
    return buf;
}

/* ------------------------------------------------------------ defaults */

/* The directory a default shm socket goes to (see config.h). */
static void default_listen(struct rkv_server_config *c)
{
    const char *candidates[3] = { getenv("RUNTIME_DIRECTORY"), geteuid() == 0 ? "/run/rkv" : NULL,
                                  getenv("XDG_RUNTIME_DIR") };
    const char *dir = "/tmp";
    for (size_t i = 0; i < RKV_ARRAY_SIZE(candidates); i++) {
        const char *d = candidates[i];
        /* RUNTIME_DIRECTORY may list several directories separated by ':'. */
        if (d != NULL && d[0] == '/' && strchr(d, ':') == NULL && !has_control_chars(d) &&
            strlen(d) + sizeof "/rkv.sock" <= SHM_PATH_MAX) {
            dir = d;
            break;
        }
    }
    snprintf(c->listen[0].uri, sizeof c->listen[0].uri, "shm://%s/rkv.sock", dir);
    c->listen_count = 1;
}

void rkv_server_config_defaults(struct rkv_server_config *c)
{
    memset(c, 0, sizeof *c);
    /* Each row's default_value, as a file would give it; every other field
     * stays zero or empty, and finish() derives listen and max_value_len. */
    for (size_t i = 0; i < N_SETTINGS; i++) {
        const struct setting *s = &settings[i];
        struct problem p;
        if (s->default_value != NULL && !s->set(c, s, s->default_value, &p)) {
            fprintf(stderr, PROG ": internal error: the default [%s] %s = %s is refused: %s\n",
                    s->section, s->key, s->default_value, p.expect);
            abort();
        }
    }
}

/* Check the combination of values and fill derived defaults. */
static int finish(struct rkv_server_config *c, FILE *err)
{
    char a[32], b[32];
    uint32_t value_room = c->slab_page_size - RKV_ITEM_HEADER_MAX - RKV_MAX_KEY_LEN;
    if (c->max_value_len == 0) {
        c->max_value_len = value_room;
    } else if (c->max_value_len > value_room) {
        say(err,
            "max_value_len %u does not fit a slab page of %s (at most %u bytes after the "
            "item header and the longest key); raise slab_page_size or lower max_value_len",
            c->max_value_len, rkv_format_size(c->slab_page_size, a, sizeof a), value_room);
        return RKV_CONFIG_BAD;
    }
    if (c->memory < 4ull * c->slab_page_size) {
        say(err,
            "memory %s holds fewer than 4 slab pages of %s; raise memory or lower "
            "slab_page_size",
            rkv_format_size(c->memory, a, sizeof a), rkv_format_size(c->slab_page_size, b, sizeof b));
        return RKV_CONFIG_BAD;
    }
    if (c->cq_size != 0 && c->cq_size < 2u * c->credits) {
        say(err,
            "cq_size %u is below 2 x credits (%u); raise cq_size or set it to 0 "
            "(automatic)",
            c->cq_size, 2u * c->credits);
        return RKV_CONFIG_BAD;
    }
    if (c->max_inline > c->max_msg) {
        say(err, "max_inline %u is larger than max_msg %u; lower max_inline", c->max_inline,
            c->max_msg);
        return RKV_CONFIG_BAD;
    }
    if (c->listen_count == 0)
        default_listen(c);
    return RKV_CONFIG_OK;
}

/* ------------------------------------------------------------ INI file */

/* Parser state shared by the line reader and the inih handler. */
struct ini_state {
    struct rkv_server_config *c;
    const char *name;              /* file name for messages */
    const char *text;              /* the whole file */
    size_t len, pos;               /* its length, and the next unread byte */
    unsigned lineno;               /* line last handed to inih */
    unsigned set_line[N_SETTINGS]; /* line a key was set on (duplicates) */
    unsigned err_line;             /* first error's line; 0 = none yet */
    char msg[768];                 /* first error's message */
};

static void config_ini_fail(struct ini_state *st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void config_ini_fail(struct ini_state *st, const char *fmt, ...)
{
    if (st->err_line != 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(st->msg, sizeof st->msg, fmt, ap);
    va_end(ap);
    st->err_line = st->lineno;
}

static bool known_section(const char *name, size_t len)
{
    for (size_t i = 0; i < RKV_ARRAY_SIZE(sections); i++)
        if (strlen(sections[i]) == len && memcmp(name, sections[i], len) == 0)
            return true;
    return false;
}

/* fgets-style reader for inih over st->text, one line per call, counting
 * lines so messages can name them. Stops at the first error: a NUL byte, or
 * a line longer than inih's buffer (which it would otherwise split). */
static char *ini_read_line(char *str, int num, void *stream)
{
    struct ini_state *st = stream;
    if (st->err_line != 0 || st->pos >= st->len || num < 3)
        return NULL;
    const char *start = st->text + st->pos;
    const char *nl = memchr(start, '\n', st->len - st->pos);
    size_t n = nl ? (size_t)(nl - start) + 1 : st->len - st->pos;
    st->lineno++;
    if (memchr(start, '\0', n) != NULL) {
        config_ini_fail(st, "contains a NUL byte; a config file is text");
        return NULL;
    }
    if (n > (size_t)num - 1) {
        config_ini_fail(st, "is longer than %d characters; shorten it (long paths: use a symlink)",
                        num - 3);
        return NULL;
    }
    memcpy(str, start, n);
    str[n] = '\0';
    st->pos += n;
    /* inih reports a section only through the keys under it; check the
     * header itself so an empty misspelt section is refused too. */
    const char *q = str;
    if (st->lineno == 1 && strncmp(q, "\xef\xbb\xbf", 3) == 0)
        q += 3;
    while (*q == ' ' || *q == '\t')
        q++;
    const char *close = q[0] == '[' ? strchr(q, ']') : NULL;
    if (close != NULL && !known_section(q + 1, (size_t)(close - q - 1))) {
        char name[SHOW_MAX + 8], copy[SHOW_MAX + 8];
        size_t len = RKV_MIN((size_t)(close - q - 1), sizeof copy - 1);
        memcpy(copy, q + 1, len);
        copy[len] = '\0';
        config_ini_fail(st,
                        "[%s] is not a section; sections are [server], [table], [rpc], [rdma], "
                        "[security] and [stats]",
                        shown(copy, name, sizeof name));
        return NULL;
    }
    return str;
}

static void list_keys(const char *section, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < N_SETTINGS && used < len; i++)
        if (strcmp(settings[i].section, section) == 0)
            used += (size_t)snprintf(buf + used, len - used, "%s%s", used ? ", " : "",
                                     settings[i].key);
}

static int on_ini_entry(void *user, const char *section, const char *name, const char *value)
{
    struct ini_state *st = user;
    char v[SHOW_MAX + 8], keys[256];
    struct problem p;
    if (st->err_line != 0)
        return 0;
    if (!known_section(section, strlen(section))) {
        if (section[0] == '\0')
            config_ini_fail(st,
                            "%s = %s comes before any [section]; put it under [server], [table], "
                            "[rpc], [rdma], [security] or [stats]",
                            shown(name, keys, sizeof keys), shown(value, v, sizeof v));
        else
            config_ini_fail(st,
                            "[%s] is not a section; sections are [server], [table], [rpc], [rdma], "
                            "[security] and [stats]",
                            shown(section, keys, sizeof keys));
        return 0;
    }
    const struct setting *s = NULL;
    for (size_t i = 0; i < N_SETTINGS && s == NULL; i++)
        if (strcmp(settings[i].section, section) == 0 && strcmp(settings[i].key, name) == 0)
            s = &settings[i];
    if (s == NULL) {
        char shown_name[SHOW_MAX + 8];
        list_keys(section, keys, sizeof keys);
        config_ini_fail(st, "[%s] %s: unknown key; [%s] accepts %s", section,
                        shown(name, shown_name, sizeof shown_name), section, keys);
        return 0;
    }
    size_t idx = (size_t)(s - settings);
    for (size_t i = 0; i < N_SETTINGS && !s->repeatable; i++) {
        bool same = i == idx || (s->dup_group != 0 && settings[i].dup_group == s->dup_group);
        if (same && st->set_line[i] != 0) {
            config_ini_fail(st,
                            "[%s] %s: %s already set on line %u; give each key once (a line "
                            "starting with a space continues the previous key)",
                            section, name, i == idx ? "this key was" : settings[i].key,
                            st->set_line[i]);
            return 0;
        }
    }
    if (!s->set(st->c, s, value, &p)) {
        config_ini_fail(st, "[%s] %s = %s: %s", section, name, shown(value, v, sizeof v), p.expect);
        return 0;
    }
    st->set_line[idx] = st->lineno;
    return 1;
}

/* Apply INI text without the final check (load applies flags first). */
static int apply_ini(struct rkv_server_config *c, const char *text, size_t len, const char *name,
                     FILE *err)
{
    struct ini_state st;
    memset(&st, 0, sizeof st);
    st.c = c;
    st.name = name;
    st.text = text;
    st.len = len;
    int rc = ini_parse_stream(ini_read_line, &st, on_ini_entry, &st);
    if (rc > 0 && (st.err_line == 0 || (unsigned)rc < st.err_line)) {
        say(err,
            "%s:%d: not a [section] or key = value line; fix or remove it (comments "
            "start with # or ;)",
            name, rc);
        return RKV_CONFIG_BAD;
    }
    if (st.err_line != 0) {
        say(err, "%s:%u: %s", name, st.err_line, st.msg);
        return RKV_CONFIG_BAD;
    }
    if (rc != 0) {
        say(err, "%s: the INI parser failed (%d); check the file", name, rc);
        return RKV_CONFIG_BAD;
    }
    return RKV_CONFIG_OK;
}

/* Read a whole config file (a regular file of at most RKV_CONFIG_MAX_FILE
 * bytes) into a malloc'd buffer. */
static int read_whole_file(const char *path, char **out, size_t *out_len, FILE *err)
{
    struct stat st;
    char *buf = NULL;
    size_t got = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
        say(err, "cannot open config file %s: %s; pass an existing file to --config", path,
            strerror(errno));
        return RKV_CONFIG_BAD;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > RKV_CONFIG_MAX_FILE) {
        say(err,
            "config file %s is not a regular file of at most %u bytes; pass the INI file "
            "to --config",
            path, RKV_CONFIG_MAX_FILE);
        goto fail;
    }
    buf = malloc((size_t)st.st_size + 1);
    if (buf == NULL) {
        say(err, "out of memory reading %s", path);
        goto fail;
    }
    while (got < (size_t)st.st_size) {
        ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            say(err, "cannot read config file %s: %s", path, n < 0 ? strerror(errno) : "short read");
            goto fail;
        }
        got += (size_t)n;
    }
    close(fd);
    *out = buf;
    *out_len = got;
    return RKV_CONFIG_OK;
fail:
    free(buf);
    close(fd);
    return RKV_CONFIG_BAD;
}

static int apply_file(struct rkv_server_config *c, const char *path, FILE *err)
{
    char *text = NULL;
    size_t len = 0;
    int rc = read_whole_file(path, &text, &len, err);
    if (rc == RKV_CONFIG_OK)
        rc = apply_ini(c, text, len, path, err);
    free(text);
    return rc;
}

int rkv_server_config_parse(struct rkv_server_config *c, const char *text, size_t len,
                            const char *name, FILE *err)
{
    int rc = apply_ini(c, text, len, name, err);
    return rc == RKV_CONFIG_OK ? finish(c, err) : rc;
}

int rkv_server_config_read_file(struct rkv_server_config *c, const char *path, FILE *err)
{
    int rc = apply_file(c, path, err);
    return rc == RKV_CONFIG_OK ? finish(c, err) : rc;
}

/* ------------------------------------------------------------ flags */

enum { OPT_HELP = 'h', OPT_VERSION = 'V', OPT_CONFIG = 'c', OPT_SETTING = 1000 };

/* Fill the getopt_long tables from settings[]. */
static void build_options(struct option *opts, char *shorts, size_t shorts_len)
{
    size_t n = 0, k = 0;
    k += (size_t)snprintf(shorts, shorts_len, "+:hVc:");
    opts[n++] = (struct option){ "help", no_argument, NULL, OPT_HELP };
    opts[n++] = (struct option){ "version", no_argument, NULL, OPT_VERSION };
    opts[n++] = (struct option){ "config", required_argument, NULL, OPT_CONFIG };
    for (size_t i = 0; i < N_SETTINGS; i++) {
        const struct setting *s = &settings[i];
        opts[n++] = (struct option){ s->flag, s->no_arg ? no_argument : required_argument, NULL,
                                     OPT_SETTING + (int)i };
        if (s->short_flag && k + 3 < shorts_len) {
            shorts[k++] = s->short_flag;
            shorts[k++] = ':';
            shorts[k] = '\0';
        }
    }
    opts[n] = (struct option){ NULL, 0, NULL, 0 };
}

static const struct setting *setting_for(int opt)
{
    if (opt >= OPT_SETTING && (size_t)(opt - OPT_SETTING) < N_SETTINGS)
        return &settings[opt - OPT_SETTING];
    for (size_t i = 0; i < N_SETTINGS; i++)
        if (settings[i].short_flag != 0 && settings[i].short_flag == opt)
            return &settings[i];
    return NULL;
}

void rkv_server_config_usage(FILE *out, const char *argv0)
{
    fprintf(out,
            "Usage: %s [--config FILE] [OPTION]...\n"
            "rkv-server: the rkv remote-memory key-value cache server.\n"
            "Flags override the config file; every flag has a key in the file (see rkv.conf).\n\n"
            "  -c, --config FILE          INI config file applied before the flags\n",
            argv0);
    for (size_t i = 0; i < N_SETTINGS; i++) {
        const struct setting *s = &settings[i];
        char left[64];
        snprintf(left, sizeof left, "%s%c%s--%s%s%s", s->short_flag ? "-" : "    ",
                 s->short_flag ? s->short_flag : ' ', s->short_flag ? ", " : "", s->flag,
                 s->arg ? " " : "", s->arg ? s->arg : "");
        if (s->default_value != NULL)
            fprintf(out, "  %-26s %s (default %s)\n", left, s->help, s->default_value);
        else if (s->default_words != NULL)
            fprintf(out, "  %-26s %s (default: %s)\n", left, s->help, s->default_words);
        else
            fprintf(out, "  %-26s %s\n", left, s->help);
    }
    fprintf(out, "  -h, --help                 show this help and exit\n"
                 "  -V, --version              show the version and exit\n\n"
                 "Sizes take K/M/G/T suffixes (binary). Exit status: 0 ok, 2 bad configuration.\n");
}

bool rkv_server_config_setting(size_t i, struct rkv_setting_info *out)
{
    if (i >= N_SETTINGS)
        return false;
    const struct setting *s = &settings[i];
    *out = (struct rkv_setting_info){ .section = s->section,
                                      .key = s->key,
                                      .flag = s->flag,
                                      .no_arg = s->no_arg,
                                      .default_value = s->default_value,
                                      .default_words = s->default_words };
    return true;
}

int rkv_server_config_load_to(struct rkv_server_config *c, int argc, char **argv, FILE *out, FILE *err)
{
    struct option opts[N_SETTINGS + 4];
    char shorts[64];
    char v[SHOW_MAX + 8];
    const char *argv0 = argc > 0 && argv[0] ? argv[0] : PROG;
    bool listen_from_flags = false;
    struct problem p;
    int opt, rc;

    rkv_server_config_defaults(c);
    build_options(opts, shorts, sizeof shorts);

    /* Pass 1: --help, --version and --config, which must act first. */
    opterr = 0;
    optind = 0;
    while ((opt = getopt_long(argc, argv, shorts, opts, NULL)) != -1) {
        if (opt == OPT_HELP) {
            if (out)
                rkv_server_config_usage(out, argv0);
            return RKV_CONFIG_EXIT;
        }
        if (opt == OPT_VERSION) {
            if (out)
                fprintf(out, "rkv-server %s\n", RKV_VERSION_STRING);
            return RKV_CONFIG_EXIT;
        }
        if (opt == OPT_CONFIG) {
            if (strlen(optarg) >= sizeof c->config_path) {
                say(err, "--config: the path is longer than %zu bytes", sizeof c->config_path - 1);
                return RKV_CONFIG_BAD;
            }
            strcpy(c->config_path, optarg);
        }
    }
    if (c->config_path[0] != '\0' && (rc = apply_file(c, c->config_path, err)) != RKV_CONFIG_OK)
        return rc;

    /* Pass 2: every other flag, on top of the file. */
    optind = 0;
    while ((opt = getopt_long(argc, argv, shorts, opts, NULL)) != -1) {
        const struct setting *s = setting_for(opt);
        if (opt == OPT_CONFIG)
            continue;
        if (opt == '?' || opt == ':') {
            const char *bad = optind > 0 && optind <= argc ? argv[optind - 1] : "?";
            char shortbuf[3] = { '-', (char)optopt, '\0' };
            if (optopt != 0 && strncmp(bad, "--", 2) != 0)
                bad = shortbuf;
            if (opt == ':')
                say(err, "%s needs a value; see %s --help", shown(bad, v, sizeof v), argv0);
            else if (optopt != 0 && strncmp(bad, "--", 2) == 0)
                say(err, "%s: this flag takes no value; leave out the =VALUE",
                    shown(bad, v, sizeof v));
            else
                say(err, "%s is not an option; see %s --help", shown(bad, v, sizeof v), argv0);
            return RKV_CONFIG_BAD;
        }
        if (s == NULL) {
            say(err, "internal error: option %d has no setting", opt);
            return RKV_CONFIG_BAD;
        }
        const char *value = s->no_arg ? "yes" : optarg;
        if (s->set == set_listen && !listen_from_flags) {
            c->listen_count = 0; /* flags replace the file's list */
            listen_from_flags = true;
        }
        if (!s->set(c, s, value, &p)) {
            say(err, "--%s: \"%s\" %s; %s", s->flag, shown(value, v, sizeof v), p.what, p.expect);
            return RKV_CONFIG_BAD;
        }
    }
    if (optind < argc) {
        say(err, "unexpected argument \"%s\"; options start with -- (see %s --help)",
            shown(argv[optind], v, sizeof v), argv0);
        return RKV_CONFIG_BAD;
    }
    return finish(c, err);
}

int rkv_server_config_load(struct rkv_server_config *c, int argc, char **argv)
{
    return rkv_server_config_load_to(c, argc, argv, stdout, stderr);
}
