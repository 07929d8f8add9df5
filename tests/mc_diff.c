/* mc_diff.c — a differential tester: rkv-server's tcp door against memcached.
 *
 * The door's goal is every reply byte for byte as memcached 1.6.18 gives
 * it. This program proves it by experiment: it starts a fresh memcached
 * (`-p PORT -U 0 -m M -t 1 -o no_lru_crawler,no_lru_maintainer`, `-u root`
 * when run as root) and a fresh rkv-server with a tcp door (`--memory M
 * --workers 1 --grace-ms 1`), makes
 * seeded random command streams over the whole text and meta grammar —
 * valid, edge and malformed (bad tokens, too many tokens, keys of 250 and
 * 251 bytes, negative and huge exptimes and lengths, noreply on everything
 * that takes it, pipelined batches, lines split across several sends,
 * base64 keys, values near item_size_max, append chains, herd protection:
 * mg N/R/h/l/u, ms I and md I, whose W/Z/X marks the tally counts) —
 * sends the same stream to both and compares what comes back.
 *
 * Framing: a step (one command, or a pipelined batch) is followed by
 * "mn\r\n"; both replies are read, structurally (a VALUE or VA line's data
 * block is skipped by its length), until that MN, or until the server
 * hangs up where memcached does (quit, an HTTP request line, 2 KiB without
 * a newline), with a bounded wait. The generator keeps the stream in line
 * with memcached's framing (a refused storage line's data block is a line
 * of its own, a bad data chunk is exactly its declared length).
 *
 * The allow-list (`rules[]` below) is the one place where the two servers'
 * replies may differ, each with its reason; everything else must match
 * byte for byte. A run's tally prints how often each rule applied.
 *
 * A difference is shrunk before it is printed (delta debugging: steps are
 * dropped while the difference persists, on servers reset between tries),
 * then printed as the commands with both servers' replies.
 *
 * Phases: each seed runs a fresh server pair with room for everything
 * (normal phase: every reply compared), then a fresh pair with small memory
 * (pressure phase: big values and append chains past the memory; the two
 * evict different items, so replies are compared by shape, see
 * R_PRESSURE).
 *
 * The reference is made deterministic: memcached's LRU crawler and
 * maintainer threads take item references (which decide whether an incr
 * updates in place) and reclaim flushed items at moments of their own, so
 * two memcacheds given the same stream answer differently with them on;
 * --self-check runs memcached on both sides (0 differences with these
 * settings). rkv runs with a grace period of 1 ms: a write that must reuse
 * freed memory waits it out (one-sided readers need it; there are none).
 *
 * Not generated (documented in docs/design.md): memcached's server
 * administration (slabs, lru, lru_crawler, watch, cache_memlimit,
 * extstore: rkv has none and answers ERROR), stats with other arguments,
 * exptimes that run out during a run, a data block too large to send
 * (memcached answers only once it has swallowed it), lines over 2 KiB
 * split across sends (whether memcached hangs up depends on its reads),
 * pipelined batches over 12 KiB or split across sends (where each
 * server's reads fall decides what memcached has written out when a later
 * command drops its unsent answers).
 * MC_DIFF_DEBUG=1 prints both normalised replies of a differing step.
 *
 *   mc_diff --rkv PATH [--memcached PATH] [--seed N] [--seeds K]
 *           [--commands N] [--memory MB] [--pressure-memory MB]
 *           [--pressure-share PCT] [--max-diffs N] [--timeout-ms MS]
 *
 * --commands is per seed. Exit status: 0 no difference, 1 differences
 * (printed), 2 usage or infrastructure error, 77 memcached not installed.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "mc_conn.h"
#include "server_proc.h"

#define RKV_MIN_(a, b) ((a) < (b) ? (a) : (b))

/* ------------------------------------------------------------ allow-list */

/* Every way the servers' replies may differ, and why. Nothing else is
 * normalised or skipped. docs/design.md's tcp door section points here. */
enum rule {
    R_CAS,         /* CAS uniques compared as first-seen ordinals per server */
    R_TOUCH_CAS,   /* rkv: touch, gat, gats, mg T give the item a new CAS */
    R_VERSION,     /* the version string */
    R_STATS,       /* stats values */
    R_TTL_TICK,    /* remaining TTL (t flag) within a clock tick or two */
    R_KEY_FORM,    /* a meta k flag: base64 or plain, compared by its bytes */
    R_ME,          /* me (meta debug) refused by rkv */
    R_PRESSURE,    /* small-memory phase: replies compared by shape */
    R_FLUSH_LATER, /* flush_all with a delay: only its reply compared */
    R_SIGN_SCAN,   /* memcached refuses arithmetic on a value >= 2^63 at random */
    R_BLANK_SCAN,  /* memcached does arithmetic on a value of blanks with bytes past its end */
    R_COUNT
};

static const struct {
    const char *name;
    const char *why;
} rules[R_COUNT] = {
    [R_CAS] = { "cas-ordinals",
                "CAS uniques are each server's own counter (memcached counts stores, rkv "
                "versions are clock-based): each server's values are replaced by the order "
                "in which they were first seen, and a command that quotes a key's CAS gets "
                "the one that server last showed for it" },
    [R_TOUCH_CAS] = { "touch-new-cas",
                      "rkv writes out of place, so touch, gat, gats and mg T store a new "
                      "item version (a new CAS) where memcached keeps the CAS: the versions "
                      "a touch makes count as the one the item had before it (the tester "
                      "reads rkv's CAS with a hidden `mg KEY c` before and after a touching "
                      "command), and a command that quotes the key's CAS gets rkv's "
                      "current one; an ms I whose C quotes another CAS, on a key touched since "
                      "it was set, is not compared (the new version can order the other way "
                      "around it) and the key is resynced" },
    [R_VERSION] = { "version-string", "`version` and `stats` name the release: 1.6.18 against "
                                      "1.6.18-rkv-<rkv version>; the rest of the line must match" },
    [R_STATS] = { "stats-values",
                  "`stats` and `stats settings` answer each server's own counters and "
                  "settings: a block of STAT lines ending in END compares as one unit; "
                  "stats with other arguments are not generated (the stats groups are a "
                  "change of their own)" },
    [R_TTL_TICK] = { "ttl-tick",
                     "a remaining TTL (mg/ma t) and the seconds since the last access (mg l) "
                     "are counted on each server's clock, which "
                     "ticks at its own instant: equal within 1 s, a t within 2 s (memcached "
                     "reads a unix-time exptime against its start on the wall clock, while "
                     "its clock runs on the monotonic one, each truncated to a second, and "
                     "ticks on a timer: its remainder can be a second further off); after a "
                     "touch to the past "
                     "both print a negative remainder as an unsigned number (its value "
                     "depends on the server's uptime)" },
    [R_KEY_FORM] = { "key-form",
                     "memcached echoes a key (meta k) in the form the item was stored with "
                     "(base64 and ` b` when an ms or ma with b made it), rkv in the form of "
                     "the request (rkv keeps no per-item key form): k tokens compare by the "
                     "key bytes they stand for" },
    [R_ME] = { "me-refused", "`me` (meta debug: last access, fetched, slab class) shows memcached "
                             "internals rkv does not have; rkv refuses it: not compared (its argument "
                             "errors are)" },
    [R_PRESSURE] = { "pressure-shapes",
                     "with small memory (rkv --memory, memcached -m) the two servers evict "
                     "different items at different times: every reply is compared by shape "
                     "(hit or miss, stored or not, found or not are one class each; VALUE "
                     "blocks dropped; q flags are not generated, their silence depends on "
                     "the outcome); errors, framing and the too-large limit must match" },
    [R_FLUSH_LATER] = { "flush-later",
                        "memcached flushes lazily: a flush_all with a delay, or at a unix time "
                        "before its start (which it takes as none), after an immediate one brings "
                        "back items it had not yet reclaimed; only its reply is compared, and "
                        "both servers are flushed at once after it" },
    [R_SIGN_SCAN] = { "mc-sign-scan",
                      "memcached 1.6.18 reads an item's value of 2^63 or more as a number "
                      "only if a strchr for a '-' sign, run past the value's end into "
                      "whatever bytes its slab chunk held before, meets a NUL first (fixed in "
                      "1.6.22): a step in which memcached refuses an incr, decr or ma as "
                      "non-numeric, where one on a key no other command of the step names "
                      "leaves memcached's value such a number and rkv's another (rkv did it), "
                      "is not compared and the key is resynced" },
    [R_BLANK_SCAN] = { "mc-blank-scan",
                       "memcached 1.6.18 reads a counter with strtoull on the value in place: "
                       "on a value of blanks only, strtoull skips them and the value's "
                       "\\r\\n and reads digits out of the bytes its slab chunk held before, "
                       "past the value's end (a value ' ' over an old '12345' increments to "
                       "46): a step with an incr, decr or ma that rkv refuses as non-numeric "
                       "on a value of blanks only (rkv's value, which no other command of the "
                       "step names, shows it) is not compared and the key is resynced" },
};

static uint64_t rule_hits[R_COUNT];

static void rule_hit(enum rule r)
{
    rule_hits[r]++;
}

/* ------------------------------------------------------------ options */

struct options {
    const char *rkv_bin, *mc_bin;
    uint64_t seed;
    unsigned seeds;
    uint64_t commands; /* per seed */
    unsigned memory_mb, pressure_mb;
    unsigned pressure_pct; /* share of a seed's commands in the pressure phase */
    unsigned episode;      /* steps between resets (the unit a difference is shrunk in) */
    unsigned max_diffs;
    unsigned timeout_ms;
    bool verbose;
    bool self_check; /* memcached on both sides: checks the tester itself */
};

static struct options opt = {
    .seed = 1,
    .seeds = 1,
    .commands = 20000,
    .memory_mb = 256,
    .pressure_mb = 8,
    .pressure_pct = 10,
    .episode = 300,
    .max_diffs = 5,
    .timeout_ms = 10000,
};

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "mc_diff: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(2);
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ------------------------------------------------------------ bytes */

struct buf {
    uint8_t *p;
    size_t len, cap;
};

static void buf_reserve(struct buf *b, size_t n)
{
    if (b->len + n <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n)
        cap *= 2;
    b->p = realloc(b->p, cap);
    if (b->p == NULL)
        die("out of memory");
    b->cap = cap;
}

static void buf_put(struct buf *b, const void *p, size_t n)
{
    if (n > (SIZE_MAX >> 2)) /* never: a length gone negative (and it bounds n for gcc) */
        die("buffer length out of range");
    buf_reserve(b, n + 1);
    if (n)
        memcpy(b->p + b->len, p, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void buf_puts(struct buf *b, const char *s)
{
    buf_put(b, s, strlen(s));
}

static void buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void buf_printf(struct buf *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp)
        die("buf_printf: line too long");
    buf_put(b, tmp, (size_t)n);
}

static void buf_free(struct buf *b)
{
    free(b->p);
    *b = (struct buf){ 0 };
}

/* C-string style, for printing commands and replies. */
static void print_escaped(FILE *f, const uint8_t *p, size_t n, size_t max)
{
    fputc('"', f);
    for (size_t i = 0; i < n && i < max; i++) {
        uint8_t c = p[i];
        if (c == '\r')
            fputs("\\r", f);
        else if (c == '\n')
            fputs("\\n", f);
        else if (c == '\t')
            fputs("\\t", f);
        else if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20 || c >= 0x7f)
            fprintf(f, "\\x%02x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
    if (n > max)
        fprintf(f, "... (%zu bytes)", n);
}

/* ------------------------------------------------------------ random */

static uint64_t rng_state;

static uint64_t rnd(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static unsigned rn(unsigned n)
{
    return n ? (unsigned)(rnd() % n) : 0;
}

static bool pct(unsigned p)
{
    return rn(100) < p;
}

/* ------------------------------------------------------------ base64 */

static const char b64chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static size_t b64_encode(const uint8_t *in, size_t n, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)in[i + 1] << 8;
        if (i + 2 < n)
            v |= in[i + 2];
        out[o++] = b64chars[(v >> 18) & 63];
        out[o++] = b64chars[(v >> 12) & 63];
        out[o++] = i + 1 < n ? b64chars[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < n ? b64chars[v & 63] : '=';
    }
    out[o] = 0;
    return o;
}

/* Canonical decode (only for the tester's own key-form comparison). */
static long b64_decode(const char *in, size_t n, uint8_t *out)
{
    size_t o = 0;
    if (n == 0 || n % 4)
        return -1;
    for (size_t i = 0; i < n; i += 4) {
        uint32_t w = 0;
        unsigned pad = 0;
        for (unsigned j = 0; j < 4; j++) {
            const char *q = in[i + j] == '=' ? NULL : strchr(b64chars, in[i + j]);
            if (in[i + j] == '=')
                pad++;
            else if (q == NULL || in[i + j] == 0)
                return -1;
            w = w << 6 | (q ? (uint32_t)(q - b64chars) : 0);
        }
        out[o++] = (uint8_t)(w >> 16);
        if (pad < 2)
            out[o++] = (uint8_t)(w >> 8);
        if (pad < 1)
            out[o++] = (uint8_t)w;
    }
    return (long)o;
}

/* ------------------------------------------------------------ keys */

/* The key pool: short keys the commands share (so they interact), and the
 * edge cases: 1, 249 and 250 bytes, control characters, bytes >= 0x80, a
 * carriage return inside a key. K_LONG (251 bytes) is never valid. */
#define NPLAIN 8
enum { K_ONE = NPLAIN, K_249, K_250, K_CTRL, K_HIGH, K_CR, NKEYS, K_LONG = NKEYS };

struct key {
    uint8_t b[260];
    size_t n;
};
static struct key keys[NKEYS + 1];

static void keys_init(void)
{
    for (unsigned i = 0; i < NPLAIN; i++)
        keys[i].n = (size_t)sprintf((char *)keys[i].b, "k%u", i);
    keys[K_ONE].n = (size_t)sprintf((char *)keys[K_ONE].b, "x");
    keys[K_249].n = 249;
    memset(keys[K_249].b, 'y', 249);
    keys[K_250].n = 250;
    memset(keys[K_250].b, 'z', 250);
    keys[K_LONG].n = 251;
    memset(keys[K_LONG].b, 'w', 251);
    keys[K_CTRL].n = (size_t)sprintf((char *)keys[K_CTRL].b, "c\x01\x7f\t_");
    keys[K_HIGH].n = (size_t)sprintf((char *)keys[K_HIGH].b, "h\xc3\xa9\xff");
    keys[K_CR].n = (size_t)sprintf((char *)keys[K_CR].b, "r\rr");
}

static int key_index(const uint8_t *p, size_t n)
{
    for (int i = 0; i <= K_LONG; i++)
        if (keys[i].n == n && memcmp(keys[i].b, p, n) == 0)
            return i;
    return -1;
}

/* ------------------------------------------------------------ commands */

enum kind {
    KD_STORE,
    KD_GET,
    KD_TOUCHGET,
    KD_TOUCH,
    KD_DELETE,
    KD_ARITH,
    KD_MG,
    KD_MGT,
    KD_MS,
    KD_MD,
    KD_MA,
    KD_MN,
    KD_ME,
    KD_STATS,
    KD_VERSION,
    KD_VERBOSITY,
    KD_FLUSH,
    KD_QUIT,
    KD_OTHER,
};

#define C_CLOSES   1u  /* memcached hangs up after it */
#define C_NOCMP    2u  /* not compared (rule in cmd.rule) */
#define C_RESYNC   4u  /* afterwards delete the key on both servers */
#define C_NOSYNC   8u  /* sent alone, then the hang-up is awaited (no mn after it) */
#define C_CASREAD  16u /* its reply shows CAS values of its key (meta c) */
#define C_BIG      32u /* a large value: never split, never batched */
#define C_FLUSHFIX 64u /* a delayed flush_all: an immediate one follows (hidden) */

#define MAX_CASREF 2

struct cmd {
    struct buf text;
    struct {
        size_t off;
        int key;
        bool zero;
    } cas[MAX_CASREF]; /* placeholders */
    unsigned ncas;
    int key;       /* the pool key it is about, -1 none */
    bool junk_key; /* a meta key that is no pool key's base64 */
    enum kind kind;
    unsigned flags;
    enum rule rule; /* with C_NOCMP */
    unsigned mn;    /* MN lines it answers (an mn command) */
};

static void cmd_free(struct cmd *c)
{
    buf_free(&c->text);
}

/* A placeholder for the key's CAS as the server showed it last. */
static void cmd_cas(struct cmd *c, int key)
{
    if (c->ncas < MAX_CASREF) {
        c->cas[c->ncas].off = c->text.len;
        c->cas[c->ncas].key = key;
        c->cas[c->ncas].zero = false;
        c->ncas++;
    }
}

/* ------------------------------------------------------------ generator */

static bool pressure; /* the phase being generated */

static void put_key(struct cmd *c, int k)
{
    buf_put(&c->text, keys[k].b, keys[k].n);
}

/* A pool key, now and then the 251-byte one. */
static int pick_key(bool allow_long)
{
    unsigned r = rn(100);
    if (allow_long && r < 2)
        return K_LONG;
    if (r < 80)
        return (int)rn(NPLAIN);
    return K_ONE + (int)rn(NKEYS - K_ONE);
}

static const char *pick(const char *const *v, size_t n)
{
    return v[rn((unsigned)n)];
}
#define PICK(...)                              \
    pick((const char *const[]){ __VA_ARGS__ }, \
         sizeof((const char *const[]){ __VA_ARGS__ }) / sizeof(const char *))

/* Numbers as clients send them, and as they should not. */
static void put_flags(struct cmd *c)
{
    if (pct(50))
        buf_puts(&c->text, "0");
    else if (pct(70))
        buf_printf(&c->text, "%u", rn(100000));
    else
        buf_puts(&c->text, PICK("4294967295", "4294967296", "-1", "abc", "+7", "007", "-0",
                                "18446744073709551615", "99999999999999999999", "1x", "\t5"));
}

/* An exptime that does not run out while a run lasts (a tick earlier or
 * later on one server would change a reply): none, far, or already past. */
static void put_exptime(struct cmd *c)
{
    unsigned r = rn(100);
    if (r < 45)
        buf_puts(&c->text, "0");
    else if (r < 70)
        buf_printf(&c->text, "%u", 1000 + rn(100000));
    else if (r < 78)
        buf_puts(&c->text, PICK("-1", "-100000", "4294967295", "9223372036854775807"));
    else if (r < 84)
        buf_puts(&c->text, PICK("2592000", "2592001", "1000000000", "4294967396", "+500"));
    else if (r < 90)
        buf_printf(&c->text, "%lld", (long long)time(NULL) + 100000 + rn(1000));
    else
        buf_puts(&c->text, PICK("abc", "99999999999999999999", "-9223372036854775809", "1.5",
                                "0x10", "\t7000"));
}

/* memcached's safe_strtol on a token (strtol, then the low 32 bits):
 * the length a storage line declares, or false. */
static bool mc_strtol32(const char *s, int32_t *out)
{
    char *end;
    errno = 0;
    long l = strtol(s, &end, 10);
    if (errno == ERANGE || end == s)
        return false;
    if (*end != 0 && !(*end == ' ' || (*end >= '\t' && *end <= '\r')))
        return false;
    *out = (int32_t)l;
    return true;
}

static const char data_chars[] = "abcdefghijklnoprstuvwxyz0123456789"; /* no m, q: never "mn", "quit" */

static void put_value_bytes(struct buf *b, size_t n)
{
    buf_reserve(b, n + 1);
    unsigned mode = rn(100);
    for (size_t i = 0; i < n; i++) {
        uint8_t ch;
        if (mode < 5)
            ch = (uint8_t)rnd(); /* binary, \r\n and NUL included */
        else
            ch = (uint8_t)data_chars[rn(sizeof data_chars - 1)];
        b->p[b->len++] = ch;
    }
    b->p[b->len] = 0;
}

/* memcached's largest value for a key of nkey bytes: item_size_max
 * (1 MiB) less its item header (48), the CAS (8), the key and its NUL,
 * the client flags' 4 bytes when they are not 0, and the data's "\r\n". */
static size_t mc_max_value(size_t nkey, bool flags)
{
    return (1u << 20) - 48 - 8 - (nkey + 1) - (flags ? 4 : 0) - 2;
}

/* Keys that may hold big values (over 100 KB): multi-key gets leave them
 * out, so a reply stays a few MB at most. */
static bool big_key(int key)
{
    return key == 6 || key == 7 || key == K_249 || key == K_250 || (pressure && key < 3);
}

/* A value: mostly short; numbers for incr; now and then large or at
 * memcached's limit. */
static size_t pick_value_len(int key)
{
    unsigned r = rn(1000);
    size_t nkey = key >= 0 ? keys[key].n : 2;
    if (!big_key(key) && r >= 960)
        r = rn(960);
    if (r < 400)
        return rn(12);
    if (r < 800)
        return rn(200);
    if (r < 960)
        return rn(4000);
    if (r < 985 || pressure)
        return 10000 + rn(pressure ? 300000 : 100000);
    size_t lim = mc_max_value(nkey, pct(50));
    return lim - 3 + rn(7);
}

static bool noreply_ok(void)
{
    return !pressure;
}

/* The end of a data block memcached reads: mostly "\r\n"; sometimes not
 * (a bad data chunk of exactly len + 2 bytes, so the stream stays in line). */
static void put_terminator(struct cmd *c, size_t len)
{
    unsigned r = rn(100);
    if (r < 96)
        buf_puts(&c->text, "\r\n");
    else if (r < 98)
        buf_puts(&c->text, "XY"); /* the mn that follows is the next command */
    else if (len > 0 && r < 99)
        buf_puts(&c->text, "\r\r\r\n"); /* two bytes too many: "\r\n" is an empty line */
    else
        buf_puts(&c->text, "\n\r\n"); /* "\n\r": bad; then an empty line */
}

/* memcached's number readers (util.c), on a token: strtol/strtoul/strtoull
 * (leading white space and a sign taken), then the next character must be
 * white space or the end; an unsigned one that reads as negative is refused
 * when the token has a '-'. */
static bool mc_end_ok(const char *s, const char *e)
{
    return e != s && (*e == 0 || *e == ' ' || (*e >= '\t' && *e <= '\r'));
}

static bool mc_strtoul_ok(const char *s)
{
    char *e;
    errno = 0;
    unsigned long l = strtoul(s, &e, 10);
    return errno != ERANGE && mc_end_ok(s, e) && !((long)l < 0 && strchr(s, '-'));
}

static bool mc_strtoull_ok(const char *s)
{
    char *e;
    errno = 0;
    unsigned long long l = strtoull(s, &e, 10);
    return errno != ERANGE && mc_end_ok(s, e) && !((long long)l < 0 && strchr(s, '-'));
}

/* A value: its bytes into b. Numbers (for incr) now and then. line_safe: it
 * may be read as a command line (its storage line refused): plain
 * characters only, at most 2000 of them. */
static void gen_value(struct buf *b, int key, bool line_safe)
{
    b->len = 0;
    if (pct(15)) {
        buf_puts(b, PICK("0", "1", "99", "100", " 5", "5 ", "18446744073709551615",
                         "18446744073709551616", "-1", "-0", "+7", "12ab", "007", "1 2", "9", "10",
                         "999", "4294967296"));
        if (!line_safe || !memchr(b->p, ' ', b->len))
            return;
        b->len = 0;
    }
    size_t n = pick_value_len(key);
    if (line_safe) {
        if (n > 2000)
            n = 2000;
        for (size_t i = 0; i < n; i++)
            buf_put(b, &data_chars[rn(sizeof data_chars - 1)], 1);
        return;
    }
    put_value_bytes(b, n);
}

/* set/add/replace/append/prepend/cas KEY FLAGS EXPTIME BYTES [CAS] [noreply] */
static void gen_storage(struct cmd *c)
{
    static const char *const names[] = { "set", "add", "replace", "append", "prepend", "cas" };
    unsigned w = rn(100);
    unsigned which = w < 40 ? 0 : w < 52 ? 1 : w < 62 ? 2 : w < 74 ? 3 : w < 84 ? 4 : 5;
    bool cas = which == 5;
    int k = pick_key(true);
    c->key = k;
    c->kind = KD_STORE;
    struct buf flags = { 0 }, exptime = { 0 }, val = { 0 };
    struct cmd tmp = { .key = -1 };
    put_flags(&tmp);
    buf_put(&flags, tmp.text.p, tmp.text.len);
    tmp.text.len = 0;
    put_exptime(&tmp);
    buf_put(&exptime, tmp.text.p, tmp.text.len);
    cmd_free(&tmp);
    /* the cas unique, the trailing token */
    const char *castok = NULL;
    if (cas && pct(25))
        castok = PICK("0", "18446744073709551000", "abc", "-1", "1");
    const char *trail = "";
    unsigned t = rn(100);
    if (t < 15 && noreply_ok())
        trail = " noreply";
    else if (t < 18)
        trail = PICK(" junk", " noreply extra", " 0", " NOREPLY");
    else if (t < 19)
        trail = "  ";
    /* the length token */
    char lentok[48];
    bool lie = pct(12);
    if (lie)
        snprintf(lentok, sizeof lentok, "%s",
                 PICK("-1", "abc", "4294967297", "2147483646", "4294967295", "+3", "0003", "3x",
                      "99999999999999999999", "2147483647", "\v2"));
    /* Does memcached take the line (and read a block)? Its checks, in its
     * order: the token count, the key, flags, exptime, length, cas. */
    int32_t declared = 0;
    bool ntok_ok = strcmp(trail, " noreply extra") != 0;
    bool accepted = ntok_ok && k != K_LONG && mc_strtoul_ok((const char *)flags.p) &&
                    mc_strtol32((const char *)exptime.p, &declared) &&
                    (!cas || castok == NULL || mc_strtoull_ok(castok));
    gen_value(&val, k, !accepted || lie);
    if ((which == 3 || which == 4) && !big_key(k) && val.len > 200)
        val.len = 200; /* append chains on small keys stay small */
    if (!lie)
        snprintf(lentok, sizeof lentok, "%zu", val.len);
    accepted = accepted && mc_strtol32(lentok, &declared) && declared >= 0 &&
               declared <= INT_MAX - 2 && (!cas || castok == NULL || mc_strtoull_ok(castok));
    if (accepted && lie) {
        /* 4294967297 reads as 1, +3 and 0003 as 3: a block of that length */
        if ((size_t)declared > 64)
            accepted = false; /* never generated */
        else
            gen_value(&val, k, false), val.len = RKV_MIN_(val.len, (size_t)declared);
        while (val.len < (size_t)declared)
            buf_puts(&val, "v");
    }
    if (val.len > 100000)
        c->flags |= C_BIG;

    buf_printf(&c->text, "%s ", names[which]);
    put_key(c, k);
    buf_printf(&c->text, " %s %s %s", (const char *)flags.p, (const char *)exptime.p, lentok);
    if (cas) {
        buf_puts(&c->text, " ");
        if (castok)
            buf_puts(&c->text, castok);
        else
            cmd_cas(c, k);
    }
    buf_puts(&c->text, trail);
    buf_puts(&c->text, pct(95) ? "\r\n" : "\n");
    buf_put(&c->text, val.p, val.len);
    if (accepted)
        put_terminator(c, val.len);
    else
        buf_puts(&c->text, "\r\n"); /* read as a line of its own */
    buf_free(&flags);
    buf_free(&exptime);
    buf_free(&val);
}

/* get/gets/gat/gats/bget KEYS */
static void gen_retrieval(struct cmd *c)
{
    const char *name = PICK("get", "get", "gets", "gets", "gat", "gats", "bget");
    bool touch = name[1] == 'a';
    c->kind = touch ? KD_TOUCHGET : KD_GET;
    buf_puts(&c->text, name);
    if (touch) {
        buf_puts(&c->text, " ");
        put_exptime(c);
    }
    unsigned nk = pct(5) ? 20 + rn(20) : rn(4) + (pct(95) ? 1 : 0);
    for (unsigned i = 0; i < nk; i++) {
        int k = pick_key(true);
        while (nk > 3 && big_key(k))
            k = pick_key(true);
        buf_puts(&c->text, pct(5) ? "  " : " ");
        put_key(c, k);
        if (i == 0)
            c->key = k;
    }
    if (pct(3))
        buf_puts(&c->text, " ");
    buf_puts(&c->text, pct(97) ? "\r\n" : "\n");
}

static void gen_touch(struct cmd *c)
{
    int k = pick_key(true);
    c->key = k;
    c->kind = KD_TOUCH;
    buf_puts(&c->text, "touch ");
    put_key(c, k);
    buf_puts(&c->text, " ");
    put_exptime(c);
    if (pct(15) && noreply_ok())
        buf_puts(&c->text, " noreply");
    else if (pct(3))
        buf_puts(&c->text, PICK(" junk", " noreply x"));
    buf_puts(&c->text, "\r\n");
}

static void gen_delete(struct cmd *c)
{
    int k = pick_key(true);
    c->key = k;
    c->kind = KD_DELETE;
    buf_puts(&c->text, "delete ");
    put_key(c, k);
    unsigned r = rn(100);
    if (r < 60)
        ;
    else if (r < 75 && noreply_ok())
        buf_puts(&c->text, " noreply");
    else if (r < 82)
        buf_puts(&c->text, " 0");
    else if (r < 88 && noreply_ok())
        buf_puts(&c->text, " 0 noreply");
    else if (noreply_ok())
        buf_puts(&c->text, PICK(" 10", " 10 noreply", " noreply 0", " x", " 0 x", " 0 0",
                                " 0 noreply x", " noreply noreply"));
    buf_puts(&c->text, "\r\n");
}

static void gen_arith(struct cmd *c)
{
    int k = pick_key(true);
    c->key = k;
    c->kind = KD_ARITH;
    buf_puts(&c->text, pct(50) ? "incr " : "decr ");
    put_key(c, k);
    buf_puts(&c->text, " ");
    if (pct(80))
        buf_printf(&c->text, "%u", rn(1000));
    else
        buf_puts(&c->text, PICK("18446744073709551615", "18446744073709551610", "9223372036854775808",
                                "-1", "abc", "+5", "-0", "18446744073709551616", "0"));
    if (pct(12) && noreply_ok())
        buf_puts(&c->text, " noreply");
    else if (pct(3))
        buf_puts(&c->text, " junk");
    buf_puts(&c->text, "\r\n");
}

static void put_opaque(struct cmd *c)
{
    unsigned n = pct(90) ? rn(8) : 28 + rn(8); /* memcached's limit: 32 bytes with the O */
    buf_puts(&c->text, "O");
    for (unsigned i = 0; i < n; i++)
        buf_put(&c->text, &data_chars[rn(sizeof data_chars - 1)], 1);
}

/* The key of a meta command: as it is, or base64 with the b flag (true).
 * *toklen: the key token's length (memcached refuses one over 250). */
static bool put_meta_key(struct cmd *c, int k, size_t *toklen)
{
    size_t at = c->text.len;
    bool b = true;
    if (pct(15) && k != K_LONG) {
        char enc[400];
        b64_encode(keys[k].b, keys[k].n, enc);
        buf_puts(&c->text, enc);
    } else if (pct(2)) {
        /* not the pool key: no CAS or touch of it may be mapped to that key */
        c->key = -1;
        buf_puts(&c->text, PICK("A*==", "QQ", "====", "QUJD=", "Q=Q=", "YWJj.ZGVm"));
        c->junk_key = true; /* a key the resync cannot name: no herd-protection flags */
    } else {
        put_key(c, k);
        b = false;
    }
    if (toklen)
        *toklen = c->text.len - at;
    return b;
}

/* Meta flags: the ones each command uses, some it ignores, and refused ones. */
static void put_meta_flags(struct cmd *c, const char *usual, bool b)
{
    unsigned n = pct(97) ? rn(6) : 16 + rn(8);
    bool seen[128] = { false };
    if (b)
        buf_puts(&c->text, " b");
    for (unsigned i = 0; i < n; i++) {
        char f;
        unsigned r = rn(100);
        if (r < 80)
            f = usual[rn((unsigned)strlen(usual))];
        else if (r < 92)
            f = "vstfckOqTFCMJDPLuSE"[rn(19)];
        else if (r < 96 && !pressure)
            f = "xyzZWX!%"[rn(8)];
        else
            f = "NRhlI"[rn(5)];
        if (seen[(unsigned char)f] && pct(90) && n < 16)
            continue;
        if (f == 'q' && !noreply_ok())
            continue;
        if (c->junk_key && strchr("NRhlI", f) != NULL)
            continue;
        seen[(unsigned char)f] = true;
        buf_puts(&c->text, " ");
        switch (f) {
        case 'O': put_opaque(c); break;
        case 'T':
        case 'N':
            buf_puts(&c->text, f == 'T' ? "T" : "N");
            put_exptime(c);
            break;
        case 'R':
            /* a recache time no generated TTL is within a tick of
             * (put_exptime's: 100, 500, 1000..101000, 2592000 seconds) */
            if (pct(90))
                buf_printf(&c->text, "R%s",
                           PICK("0", "-5", "50", "700", "200000", "3000000", "abc", ""));
            else
                buf_printf(&c->text, "R%lld", (long long)time(NULL) + 150000);
            break;
        case 'F':
            buf_puts(&c->text, "F");
            put_flags(c);
            break;
        case 'C':
            buf_puts(&c->text, "C");
            if (pct(80)) {
                cmd_cas(c, c->key);
                c->flags |= C_CASREAD; /* its reply may not be mapped to a key otherwise */
            } else {
                buf_puts(&c->text, PICK("0", "18446744073709551000", "abc", ""));
            }
            break;
        case 'M':
            if (c->kind == KD_MS)
                buf_printf(&c->text, "M%s", PICK("E", "A", "P", "R", "S", "e", "s", "X", "", "SS"));
            else
                buf_printf(&c->text, "M%s", PICK("I", "+", "D", "-", "i", "d", "X", "", "II"));
            break;
        case 'J':
            buf_printf(&c->text, "J%s", PICK("0", "10", "18446744073709551615", "abc", "-1"));
            break;
        case 'D':
            buf_printf(&c->text, "D%s", PICK("1", "5", "100", "18446744073709551615", "abc", ""));
            break;
        case 'c':
            buf_puts(&c->text, pct(95) ? "c" : "cxyz");
            c->flags |= C_CASREAD;
            break;
        default:
            buf_put(&c->text, &f, 1);
            if (pct(3))
                buf_puts(&c->text, "1"); /* a flag that takes no token, with one */
            break;
        }
    }
}

static void gen_mg(struct cmd *c)
{
    int k = pick_key(true);
    c->key = k;
    c->kind = KD_MG;
    buf_puts(&c->text, "mg");
    if (pct(1)) {
        buf_puts(&c->text, "\r\n");
        return;
    }
    buf_puts(&c->text, " ");
    bool b = put_meta_key(c, k, NULL);
    /* a third of them as a herd-protected client reads: vivify, recache */
    put_meta_flags(c, pct(33) ? "vNNRRhltcs" : "vvsstfckOqkvTNRhlu", b);
    /* a T flag (a token after the key starting with T): a touch */
    const char *sp = strchr((const char *)c->text.p + 3, ' ');
    if (sp != NULL && strstr(sp, " T") != NULL)
        c->kind = KD_MGT;
    buf_puts(&c->text, "\r\n");
}

static void gen_ms(struct cmd *c)
{
    int k = pick_key(true);
    c->key = k;
    c->kind = KD_MS;
    buf_puts(&c->text, "ms");
    if (pct(1)) {
        buf_puts(&c->text, "\r\n");
        return;
    }
    buf_puts(&c->text, " ");
    size_t keytok;
    bool b = put_meta_key(c, k, &keytok);
    if (pct(2)) {
        buf_puts(&c->text, "\r\n"); /* "ms KEY": no length */
        return;
    }
    size_t vlen = pct(10) ? rn(6) : pick_value_len(k);
    char lentok[48];
    if (pct(92))
        snprintf(lentok, sizeof lentok, "%zu", vlen);
    else
        snprintf(lentok, sizeof lentok, "%s",
                 PICK("-1", "abc", "4294967297", "2147483646", "+3", "3x"));
    buf_puts(&c->text, " ");
    buf_puts(&c->text, lentok);
    put_meta_flags(c, "TFCMqkcOTFSI", b);
    buf_puts(&c->text, "\r\n");
    /* memcached refuses a key over 250 bytes, more than 19 tokens and a bad
     * length before it knows the block: then the block is a line */
    size_t ntok = 1;
    for (size_t i = 1; i < c->text.len; i++)
        if (c->text.p[i - 1] == ' ' && c->text.p[i] != ' ')
            ntok++;
    int32_t declared;
    bool valid = mc_strtol32(lentok, &declared) && declared >= 0 && declared <= INT_MAX - 2;
    if (valid && keytok <= 250 && ntok <= 19) {
        if ((size_t)declared > 100000)
            c->flags |= C_BIG;
        put_value_bytes(&c->text, (size_t)declared);
        put_terminator(c, (size_t)declared);
    } else {
        size_t l = vlen > 2000 ? 2000 : vlen;
        for (size_t i = 0; i < l; i++)
            buf_put(&c->text, &data_chars[rn(sizeof data_chars - 1)], 1);
        buf_puts(&c->text, "\r\n");
    }
}

static void gen_md(struct cmd *c)
{
    int k = pick_key(true);
    c->key = k;
    c->kind = KD_MD;
    buf_puts(&c->text, "md");
    if (pct(1)) {
        buf_puts(&c->text, "\r\n");
        return;
    }
    buf_puts(&c->text, " ");
    bool b = put_meta_key(c, k, NULL);
    put_meta_flags(c, pct(33) ? "IIIT" : "qkOCkTI", b); /* a third invalidate */
    buf_puts(&c->text, "\r\n");
}

static void gen_ma(struct cmd *c)
{
    int k = pick_key(true);
    c->key = k;
    c->kind = KD_MA;
    buf_puts(&c->text, "ma");
    if (pct(1)) {
        buf_puts(&c->text, "\r\n");
        return;
    }
    buf_puts(&c->text, " ");
    bool b = put_meta_key(c, k, NULL);
    put_meta_flags(c, "NJDMqvtckOTvN", b);
    buf_puts(&c->text, "\r\n");
}

/* Everything else: mn, me, stats, version, verbosity, flush_all, quit,
 * unknown words, HTTP, empty and odd lines. */
static void gen_misc(struct cmd *c, bool in_batch)
{
    unsigned r = rn(100);
    c->kind = KD_OTHER;
    if (r < 12) {
        c->kind = KD_MN;
        c->mn = 1;
        buf_puts(&c->text, PICK("mn\r\n", "mn\r\n", "mn foo\r\n", "mn  \r\n", "mn a b c\r\n"));
    } else if (r < 18) {
        int k = pick_key(true);
        c->key = k;
        c->kind = KD_ME;
        buf_puts(&c->text, "me");
        if (pct(85)) {
            buf_puts(&c->text, " ");
            put_key(c, k);
            if (k != K_LONG) {
                c->flags |= C_NOCMP;
                c->rule = R_ME;
            }
        }
        buf_puts(&c->text, "\r\n");
    } else if (r < 24) {
        c->kind = KD_STATS;
        buf_puts(&c->text, PICK("stats\r\n", "stats settings\r\n"));
    } else if (r < 32) {
        c->kind = KD_VERSION;
        buf_puts(&c->text, PICK("version\r\n", "version foo bar\r\n", "version noreply\r\n"));
    } else if (r < 42) {
        c->kind = KD_VERBOSITY;
        buf_puts(&c->text,
                 PICK("verbosity 1\r\n", "verbosity 0 noreply\r\n", "verbosity\r\n",
                      "verbosity invalid\r\n", "verbosity noreply\r\n", "verbosity 1 foo\r\n",
                      "verbosity 1 2 3\r\n", "verbosity -1\r\n", "verbosity 99999999999\r\n"));
    } else if (r < 50) {
        c->kind = KD_FLUSH;
        if (pressure)
            buf_puts(&c->text, PICK("flush_all\r\n", "flush_all 0\r\n", "flush_all -1\r\n"));
        else if (pct(80)) {
            buf_puts(&c->text, PICK("flush_all\r\n", "flush_all 0\r\n", "flush_all noreply\r\n",
                                    "flush_all 0 noreply\r\n", "flush_all -5\r\n",
                                    "flush_all foo\r\n", "flush_all noreply 5\r\n",
                                    "flush_all 1 2 3\r\n", "flush_all noreply noreply\r\n"));
        } else {
            /* A delay, or a unix time before memcached started (which it
             * takes as no flush): memcached flushes lazily, so items an
             * earlier flush left in place come back, or not, as its LRU
             * crawler got to them. Only the reply is compared; a hidden
             * flush_all follows. */
            c->flags |= C_FLUSHFIX;
            buf_puts(&c->text, PICK("flush_all 100000\r\n", "flush_all 100000 x\r\n",
                                    "flush_all 1000000000\r\n", "flush_all 100000 noreply\r\n"));
        }
    } else if (r < 54 && !in_batch) {
        c->kind = KD_QUIT;
        c->flags |= C_CLOSES;
        buf_puts(&c->text, PICK("quit\r\n", "quit foo\r\n", "quit noreply\r\n"));
    } else if (r < 58 && !in_batch) {
        c->flags |= C_CLOSES;
        buf_puts(&c->text, PICK("GET / HTTP/1.0\r\n", "POST /x HTTP/1.1\r\n", "HTTP/1.1\r\n",
                                "foo bar HTTP/2\r\n"));
    } else if (r < 60 && !in_batch) {
        /* a long line without a newline: memcached hangs up at 2048 bytes */
        c->flags |= C_CLOSES | C_NOSYNC;
        size_t n = 2100 + rn(3000);
        buf_puts(&c->text, PICK("set k0 0 0 1", "mg k0 v", "gat 0 k0", "bogus"));
        for (size_t i = c->text.len; i < n; i++)
            buf_puts(&c->text, pct(50) ? " " : "a");
    } else if (r < 62) {
        /* a long get line: memcached reads it whole */
        buf_puts(&c->text, "get");
        c->kind = KD_GET;
        unsigned n = 300 + rn(600);
        for (unsigned i = 0; i < n; i++) {
            buf_puts(&c->text, " ");
            put_key(c, 3 + (int)rn(3)); /* k3..k5: never big_key() */
        }
        buf_puts(&c->text, "\r\n");
    } else if (r < 64) {
        buf_puts(&c->text, PICK("shutdown\r\n", "shutdown graceful\r\n", "shutdown now\r\n"));
    } else if (r < 66) {
        /* a NUL ends memcached's command line (it reads it as a C string) */
#define NUL_LINE(s)     \
    {                   \
        s, sizeof s - 1 \
    }
        static const struct {
            const char *s;
            size_t n;
        } nul[] = {
            NUL_LINE("get k0\0 k1\r\n"),
            NUL_LINE("\0get k0\r\n"),
            NUL_LINE("mg k0 v\0 k\r\n"),
            NUL_LINE("set k0 0 0 1\0junk\r\nx\r\n"),
        };
#undef NUL_LINE
        unsigned i = rn(4);
        buf_put(&c->text, nul[i].s, nul[i].n);
    } else if (r < 80) {
        buf_puts(&c->text,
                 PICK("\r\n", "\n", " \r\n", "\r\r\n", "x\r\n", "gx\r\n", "g\r\n", "mx\r\n",
                      "m\r\n", "getx k0\r\n", "GET k0\r\n", "sett k0 0 0 1\r\n", "bogus\r\n",
                      "  get k0\r\n", "get\tk0\r\n", "incr\r\n", "decr k0\r\n", "touch k0\r\n",
                      "delete\r\n", "delete a b c d\r\n", "cas k0 0 0 1\r\n", "set k0 0 0\r\n",
                      "gets\r\n", "gat\r\n", "gat 10\r\n", "gats 0\r\n", "gat abc k0\r\n", "ma\r\n",
                      "md\r\n", "me\r\n", "mg\r\n", "ms\r\n", "ms k0\r\n", "cache_memlimi 5\r\n",
                      "stat\r\n", "versions\r\n"));
    } else {
        /* many tokens: memcached's tokenizer keeps 23 and the rest */
        const char *name = PICK("set", "get", "mg", "ms", "md", "ma", "delete", "incr", "touch",
                                "flush_all", "verbosity", "version", "mn", "gat", "bogus");
        buf_puts(&c->text, name);
        unsigned n = 18 + rn(10);
        bool meta = name[0] == 'm' && strlen(name) == 2;
        for (unsigned i = 0; i < n; i++) {
            if (i == 0 || !meta)
                buf_printf(&c->text, " %s", i == 0 ? "k0" : PICK("k1", "0", "1", "noreply", "v"));
            else
                buf_printf(&c->text, " %c", "vstfkcuPL"[rn(9)]);
        }
        buf_puts(&c->text, "\r\n");
        if (strcmp(name, "ms") == 0) /* its block, if the length is accepted */
            buf_puts(&c->text, "xx\r\n");
        if (strcmp(name, "mn") == 0)
            c->mn = 1, c->kind = KD_MN;
    }
}

/* One command. */
static void gen_cmd(struct cmd *c, bool in_batch)
{
    *c = (struct cmd){ .key = -1 };
    unsigned r = rn(100);
    if (pressure) {
        /* big values, append chains on few keys */
        if (r < 45) {
            gen_storage(c);
        } else if (r < 60) {
            c->kind = KD_STORE;
            int k = (int)rn(3);
            c->key = k;
            size_t n = 20000 + rn(200000);
            c->flags |= C_BIG;
            buf_printf(&c->text, "%s k%d 0 0 %zu\r\n", pct(70) ? "append" : "prepend", k, n);
            put_value_bytes(&c->text, n);
            buf_puts(&c->text, "\r\n");
        } else if (r < 75) {
            gen_retrieval(c);
        } else if (r < 80) {
            gen_arith(c);
        } else if (r < 85) {
            gen_delete(c);
        } else if (r < 90) {
            gen_ms(c);
        } else if (r < 95) {
            gen_mg(c);
        } else {
            gen_misc(c, in_batch);
        }
        return;
    }
    if (r < 28)
        gen_storage(c);
    else if (r < 45)
        gen_retrieval(c);
    else if (r < 49)
        gen_touch(c);
    else if (r < 54)
        gen_delete(c);
    else if (r < 61)
        gen_arith(c);
    else if (r < 71)
        gen_mg(c);
    else if (r < 80)
        gen_ms(c);
    else if (r < 84)
        gen_md(c);
    else if (r < 89)
        gen_ma(c);
    else
        gen_misc(c, in_batch);
}

/* A step: one command, or a pipelined batch of several. */
struct step {
    struct cmd *cmds;
    unsigned n;
    bool split; /* sent in pieces */
};

static bool batchable(const struct cmd *c)
{
    return !(c->flags & (C_CLOSES | C_NOCMP | C_RESYNC | C_NOSYNC | C_CASREAD | C_BIG | C_FLUSHFIX)) &&
           c->kind != KD_TOUCH && c->kind != KD_TOUCHGET && c->kind != KD_MGT && c->ncas == 0;
}

static void gen_step(struct step *s)
{
    *s = (struct step){ 0 };
    unsigned want = pct(8) ? 2 + rn(7) : 1;
    s->cmds = calloc(want, sizeof *s->cmds);
    if (want == 1) {
        gen_cmd(&s->cmds[0], false);
        s->n = 1;
    } else {
        /* at most 12 KiB: read whole by both servers (16 KiB at a time),
         * so which answers memcached has written out when a long key drops
         * the unsent ones, and which items its unsent answers hold, does
         * not depend on where each server's reads fall */
        size_t bytes = 0;
        for (unsigned tries = 0; s->n < want && tries < want * 4; tries++) {
            gen_cmd(&s->cmds[s->n], true);
            if (batchable(&s->cmds[s->n]) && bytes + s->cmds[s->n].text.len <= 12288) {
                bytes += s->cmds[s->n].text.len;
                s->n++;
            } else {
                cmd_free(&s->cmds[s->n]);
            }
        }
        if (s->n == 0) {
            gen_cmd(&s->cmds[0], false);
            s->n = 1;
        }
    }
    /* a batch is not split: where its pieces meet decides what memcached
     * has written out when a later command drops the unsent answers */
    s->split = s->n == 1 && pct(2) && !(s->cmds[0].flags & (C_BIG | C_NOSYNC));
}

static void step_free(struct step *s)
{
    for (unsigned i = 0; i < s->n; i++)
        cmd_free(&s->cmds[i]);
    free(s->cmds);
    *s = (struct step){ 0 };
}

/* ------------------------------------------------------------ servers */

enum { S_MC, S_RKV, NSIDES };
static const char *const side_name[NSIDES] = { "memcached", "rkv" };

struct casmap {
    uint64_t *v;
    unsigned *ord;
    size_t n, cap;
    unsigned next;
};

static unsigned casmap_find(const struct casmap *m, uint64_t v)
{
    for (size_t i = 0; i < m->n; i++)
        if (m->v[i] == v)
            return m->ord[i];
    return 0;
}

static void casmap_add(struct casmap *m, uint64_t v, unsigned ord)
{
    if (m->n == m->cap) {
        m->cap = m->cap ? m->cap * 2 : 64;
        m->v = realloc(m->v, m->cap * sizeof *m->v);
        m->ord = realloc(m->ord, m->cap * sizeof *m->ord);
    }
    m->v[m->n] = v;
    m->ord[m->n] = ord;
    m->n++;
}

struct side {
    int fd;
    unsigned port;
    pid_t mc_pid;          /* memcached */
    struct server_proc sp; /* rkv */
    struct casmap cas;
    uint64_t lastcas[NKEYS + 1];
    bool lastcas_known[NKEYS + 1];
    bool has_src[NKEYS + 1]; /* rkv, during a touching step: the key's CAS before it */
    uint64_t src[NKEYS + 1];
    struct casmap alias; /* rkv: a version a touch made -> (as .ord) an index in alias_src */
    uint64_t *alias_src;
    struct buf reply;
    bool closed;
    bool timed_out;
};

static struct side sides[NSIDES];

static void side_reset_state(struct side *s)
{
    s->cas.n = 0;
    s->cas.next = 0;
    memset(s->lastcas_known, 0, sizeof s->lastcas_known);
    memset(s->has_src, 0, sizeof s->has_src);
    s->alias.n = 0;
}

static const struct mc_conn_opts nonblocking = { .nonblock = true };

static unsigned free_port(void)
{
    struct sockaddr_in a = { .sin_family = AF_INET };
    socklen_t len = sizeof a;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0)
        die("cannot find a free port: %s", strerror(errno));
    close(fd);
    return ntohs(a.sin_port);
}

static void start_memcached(struct side *s, unsigned mb)
{
    for (unsigned attempt = 0; attempt < 20; attempt++) {
        char port[16], mem[16];
        s->port = free_port();
        snprintf(port, sizeof port, "%u", s->port);
        snprintf(mem, sizeof mem, "%u", mb);
        /* -o no_lru_crawler,no_lru_maintainer: memcached's background LRU
         * threads take item references at moments of their own, and it
         * writes an incr/decr result in place (space-padded) only while no
         * other reference exists; with them on, two memcacheds answer the
         * same stream differently (--self-check shows it) */
        const char *argv[16] = {
            opt.mc_bin, "-p", port, "-U", "0", "-m", mem, "-t", "1", "-l", "127.0.0.1", "-o", "no_lru_crawler,no_lru_maintainer"
        };
        unsigned n = 13;
        if (geteuid() == 0) {
            argv[n++] = "-u";
            argv[n++] = "root";
        }
        argv[n] = NULL;
        pid_t parent = getpid();
        s->mc_pid = fork();
        if (s->mc_pid < 0)
            die("fork: %s", strerror(errno));
        if (s->mc_pid == 0) {
            if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
                _exit(127);
            int devnull = open("/dev/null", O_RDWR);
            dup2(devnull, 1);
            dup2(devnull, 2);
            execv(opt.mc_bin, (char *const *)argv);
            _exit(127);
        }
        for (int i = 0; i < 500; i++) {
            int st;
            if (waitpid(s->mc_pid, &st, WNOHANG) == s->mc_pid) {
                s->mc_pid = 0;
                break; /* the port was taken meanwhile: another */
            }
            int fd = mc_connect_opts(s->port, &nonblocking);
            if (fd >= 0) {
                close(fd);
                return;
            }
            usleep(10000);
        }
        if (s->mc_pid > 0) {
            kill(s->mc_pid, SIGKILL);
            waitpid(s->mc_pid, NULL, 0);
            s->mc_pid = 0;
        }
    }
    die("memcached (%s) did not start", opt.mc_bin);
}

static unsigned rkv_instance;

static void start_rkv(struct side *s, unsigned mb)
{
    char mem[16];
    snprintf(mem, sizeof mem, "%uM", mb);
    /* --grace-ms 1: a writer that must reuse freed memory waits out the
     * grace period one-sided readers need (none here); under the pressure
     * phase that is most writes, 100 ms each by default */
    const char *const extra[] = {
        "--memory",    mem,
        "--workers",   "1",
        "--grace-ms",  "1",
        "--log-level", getenv("RKV_TEST_SERVER_LOG") ? getenv("RKV_TEST_SERVER_LOG") : "error",
        NULL
    };
    if (server_start_tcp(&s->sp, opt.rkv_bin, rkv_instance++, NULL, &s->port, extra) != 0)
        die("rkv-server (%s) did not start", opt.rkv_bin);
}

static void stop_servers(void)
{
    for (int i = 0; i < NSIDES; i++) {
        if (sides[i].fd >= 0)
            close(sides[i].fd);
        sides[i].fd = -1;
    }
    for (int i = 0; i < NSIDES; i++) {
        if (sides[i].mc_pid > 0) {
            kill(sides[i].mc_pid, SIGKILL); /* a cache: nothing to save */
            waitpid(sides[i].mc_pid, NULL, 0);
            sides[i].mc_pid = 0;
        }
    }
    if (sides[S_RKV].sp.pid > 0) {
        int st = server_stop(&sides[S_RKV].sp);
        if (st != 0)
            die("rkv-server did not stop cleanly (status %d)", st);
    }
}

static void reconnect(void)
{
    for (int i = 0; i < NSIDES; i++) {
        if (sides[i].fd >= 0)
            close(sides[i].fd);
        sides[i].fd = mc_connect_opts(sides[i].port, &nonblocking);
        if (sides[i].fd < 0)
            die("cannot connect to %s on port %u: %s", side_name[i], sides[i].port, strerror(errno));
        sides[i].closed = false;
    }
}

static unsigned cur_mb;

static void start_servers(unsigned mb)
{
    cur_mb = mb;
    for (int i = 0; i < NSIDES; i++)
        sides[i].fd = -1;
    start_memcached(&sides[S_MC], mb);
    if (opt.self_check)
        start_memcached(&sides[S_RKV], mb);
    else
        start_rkv(&sides[S_RKV], mb);
    reconnect();
}

/* ------------------------------------------------------------ io */

/* Whether the reply in p[0..n) is complete: the want_mn-th MN line (a
 * VALUE or VA line's data block skipped by its length). *off and *mn keep
 * the place between calls (start both at 0). */
/* The first "\r\n" in p[0..n), or NULL. (memmem here made gcc -O2 with
 * ASan warn of a NULL buffer it cannot have.) */
static const uint8_t *find_crlf(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i + 1 < n; i++)
        if (p[i] == '\r' && p[i + 1] == '\n')
            return p + i;
    return NULL;
}

static bool reply_done(const uint8_t *p, size_t n, unsigned want_mn, size_t *off, unsigned *mn)
{
    size_t i = *off;
    while (i < n) {
        const uint8_t *nl = find_crlf(p + i, n - i);
        if (nl == NULL)
            return false;
        size_t ll = (size_t)(nl - (p + i)), next = i + ll + 2;
        char line[64];
        size_t cl = ll < sizeof line - 1 ? ll : sizeof line - 1;
        memcpy(line, p + i, cl);
        line[cl] = 0;
        unsigned long long len;
        bool is_mn = false;
        if (ll >= 6 && memcmp(line, "VALUE ", 6) == 0) {
            /* VALUE key flags bytes [cas]: the key has no spaces */
            const uint8_t *q = p + i + 6, *e = p + i + ll;
            const uint8_t *sp1 = memchr(q, ' ', (size_t)(e - q));
            const uint8_t *sp2 = sp1 ? memchr(sp1 + 1, ' ', (size_t)(e - sp1 - 1)) : NULL;
            if (sp2 && sscanf((const char *)sp2 + 1, "%llu", &len) == 1)
                next += len + 2;
        } else if (ll >= 3 && memcmp(line, "VA ", 3) == 0 && sscanf(line + 3, "%llu", &len) == 1) {
            next += len + 2;
        } else if (ll == 2 && memcmp(line, "MN", 2) == 0) {
            is_mn = true;
        }
        if (next > n)
            return false;
        i = next;
        *off = i;
        if (is_mn && ++*mn == want_mn)
            return true;
    }
    return false;
}

struct out {
    const uint8_t *p;
    size_t len, off;
};

/* Send both renderings (split: in pieces with a pause between) and read
 * both replies until each is complete, closed, or the wait runs out. */
static void exchange(struct buf tosend[NSIDES], bool split, unsigned want_mn, bool nosync)
{
    struct out o[NSIDES];
    for (int i = 0; i < NSIDES; i++) {
        o[i] = (struct out){ tosend[i].p, tosend[i].len, 0 };
        sides[i].reply.len = 0;
        sides[i].timed_out = false;
    }
    if (split) {
        /* the same cut points (relative) on both: pieces of ~1/3 */
        size_t cuts[2] = { 1 + rn(8), 0 };
        for (unsigned piece = 0; piece < 3; piece++) {
            for (int i = 0; i < NSIDES; i++) {
                size_t end = piece == 0   ? RKV_MIN_(o[i].len, cuts[0])
                             : piece == 1 ? RKV_MIN_(o[i].len, o[i].len / 2 + 1)
                                          : o[i].len;
                while (o[i].off < end) {
                    ssize_t w = send(sides[i].fd, o[i].p + o[i].off, end - o[i].off, MSG_NOSIGNAL);
                    if (w > 0)
                        o[i].off += (size_t)w;
                    else if (w < 0 && errno == EAGAIN)
                        usleep(100);
                    else
                        break;
                }
            }
            usleep(1000);
        }
    }
    uint64_t deadline = now_ms() + opt.timeout_ms;
    bool done[NSIDES] = { false, false };
    size_t parsed[NSIDES] = { 0, 0 };
    unsigned mns[NSIDES] = { 0, 0 };
    if (nosync)
        deadline = now_ms() + 1500; /* the hang-up: memcached's comes when it reads 2 KiB */
    for (;;) {
        struct pollfd pf[NSIDES];
        int live = 0;
        for (int i = 0; i < NSIDES; i++) {
            pf[i] = (struct pollfd){ .fd = -1 };
            if (done[i])
                continue;
            pf[i].fd = sides[i].fd;
            pf[i].events = POLLIN | (o[i].off < o[i].len ? POLLOUT : 0);
            live++;
        }
        if (live == 0)
            break;
        int64_t left = (int64_t)deadline - (int64_t)now_ms();
        if (left <= 0) {
            for (int i = 0; i < NSIDES; i++)
                if (!done[i])
                    sides[i].timed_out = true;
            break;
        }
        if (poll(pf, NSIDES, (int)left) < 0 && errno != EINTR)
            die("poll: %s", strerror(errno));
        for (int i = 0; i < NSIDES; i++) {
            if (done[i] || pf[i].fd < 0)
                continue;
            if ((pf[i].revents & POLLOUT) && o[i].off < o[i].len) {
                ssize_t w = send(sides[i].fd, o[i].p + o[i].off, o[i].len - o[i].off, MSG_NOSIGNAL);
                if (w > 0)
                    o[i].off += (size_t)w;
                else if (w < 0 && errno != EAGAIN)
                    o[i].off = o[i].len; /* reset: the read sees it */
            }
            if (pf[i].revents & (POLLIN | POLLHUP | POLLERR)) {
                for (;;) {
                    buf_reserve(&sides[i].reply, 65536);
                    ssize_t r = recv(sides[i].fd, sides[i].reply.p + sides[i].reply.len, 65536, 0);
                    if (r > 0) {
                        sides[i].reply.len += (size_t)r;
                        continue;
                    }
                    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
                        sides[i].closed = true;
                        done[i] = true;
                    }
                    break;
                }
                if (!done[i] && !nosync &&
                    reply_done(sides[i].reply.p, sides[i].reply.len, want_mn, &parsed[i], &mns[i]))
                    done[i] = true;
            }
        }
    }
    /* whatever else already arrived belongs to this step too */
    for (int i = 0; i < NSIDES; i++) {
        while (!sides[i].closed) {
            buf_reserve(&sides[i].reply, 65536);
            ssize_t r = recv(sides[i].fd, sides[i].reply.p + sides[i].reply.len, 65536, 0);
            if (r > 0)
                sides[i].reply.len += (size_t)r;
            else {
                if (r == 0)
                    sides[i].closed = true;
                break;
            }
        }
        buf_reserve(&sides[i].reply, 1);
        sides[i].reply.p[sides[i].reply.len] = 0;
    }
}

/* A side's whole answer to one short hidden command (the resync and the
 * CAS query), read up to its first line end (and a VALUE/VA block). */
static void hidden(int side, const char *cmd, struct buf *ans)
{
    struct buf sb[NSIDES] = { { 0 } };
    ans->len = 0;
    buf_puts(&sb[side], cmd);
    buf_puts(&sb[side], "mn\r\n");
    int other = 1 - side;
    int ofd = sides[other].fd;
    sides[other].fd = -1;
    /* one side only: run the exchange loop with the other switched off */
    struct out o = { sb[side].p, sb[side].len, 0 };
    sides[side].reply.len = 0;
    uint64_t deadline = now_ms() + opt.timeout_ms;
    size_t parsed = 0;
    unsigned mns = 0;
    while (now_ms() < deadline) {
        if (o.off < o.len) {
            ssize_t w = send(sides[side].fd, o.p + o.off, o.len - o.off, MSG_NOSIGNAL);
            if (w > 0)
                o.off += (size_t)w;
        }
        struct pollfd pf = { .fd = sides[side].fd, .events = POLLIN };
        poll(&pf, 1, 50);
        buf_reserve(&sides[side].reply, 65536);
        ssize_t r = recv(sides[side].fd, sides[side].reply.p + sides[side].reply.len, 65536, 0);
        if (r > 0)
            sides[side].reply.len += (size_t)r;
        else if (r == 0)
            break;
        if (reply_done(sides[side].reply.p, sides[side].reply.len, 1, &parsed, &mns))
            break;
    }
    buf_put(ans, sides[side].reply.p, sides[side].reply.len);
    sides[other].fd = ofd;
    buf_free(&sb[0]);
    buf_free(&sb[1]);
}

/* ------------------------------------------------------------ normalising */

/* Replace a CAS value of the given side by its ordinal; key may be -1. */
static unsigned cas_ordinal(int side, uint64_t v, int key)
{
    struct side *s = &sides[side];
    unsigned ord = casmap_find(&s->cas, v);
    if (ord == 0) {
        /* a version a touch made counts as the one the item had before
         * (that one may itself be a touch's) */
        if (side == S_RKV) {
            uint64_t cur = v;
            bool have = false;
            unsigned al;
            if (key >= 0 && s->has_src[key]) {
                cur = s->src[key];
                have = true;
            } else if ((al = casmap_find(&s->alias, v)) != 0) {
                cur = s->alias_src[al - 1];
                have = true;
            }
            for (unsigned hops = 0; have && hops < 64 && casmap_find(&s->cas, cur) == 0; hops++) {
                if ((al = casmap_find(&s->alias, cur)) == 0)
                    break;
                cur = s->alias_src[al - 1];
            }
            if (have) {
                ord = casmap_find(&s->cas, cur);
                if (ord == 0) {
                    ord = ++s->cas.next;
                    casmap_add(&s->cas, cur, ord);
                }
                rule_hit(R_TOUCH_CAS);
            }
        }
        if (ord == 0)
            ord = ++s->cas.next;
        casmap_add(&s->cas, v, ord);
    }
    rule_hit(R_CAS);
    if (key >= 0) {
        s->lastcas[key] = v;
        s->lastcas_known[key] = true;
    }
    return ord;
}

struct unit {
    const uint8_t *p;    /* the header line */
    size_t len;          /* without its "\r\n" */
    const uint8_t *data; /* a VALUE/VA block, or NULL */
    size_t dlen;
};

/* Split a reply into units: each line, with its data block if it has one. */
static size_t split_units(const uint8_t *p, size_t n, struct unit *u, size_t max, size_t *rest)
{
    size_t i = 0, k = 0;
    while (i < n && k < max) {
        const uint8_t *nl = find_crlf(p + i, n - i);
        if (nl == NULL)
            break;
        size_t ll = (size_t)(nl - (p + i)), next = i + ll + 2;
        u[k] = (struct unit){ p + i, ll, NULL, 0 };
        unsigned long long len = 0;
        char line[64];
        size_t cl = ll < sizeof line - 1 ? ll : sizeof line - 1;
        memcpy(line, p + i, cl);
        line[cl] = 0;
        bool has = false;
        if (ll >= 6 && memcmp(line, "VALUE ", 6) == 0) {
            const uint8_t *q = p + i + 6, *e = p + i + ll;
            const uint8_t *sp1 = memchr(q, ' ', (size_t)(e - q));
            const uint8_t *sp2 = sp1 ? memchr(sp1 + 1, ' ', (size_t)(e - sp1 - 1)) : NULL;
            has = sp2 && sscanf((const char *)sp2 + 1, "%llu", &len) == 1;
        } else if (ll >= 3 && memcmp(line, "VA ", 3) == 0) {
            has = sscanf(line + 3, "%llu", &len) == 1;
        }
        if (has) {
            if (next + len + 2 > n)
                break;
            u[k].data = p + next;
            u[k].dlen = len + 2;
            next += len + 2;
        }
        k++;
        i = next;
    }
    *rest = i;
    return k;
}

static bool is_meta_line(const uint8_t *p, size_t n)
{
    static const char *const codes[] = { "HD", "VA", "EN", "NF", "NS", "EX" };
    if (n < 2 || (n > 2 && p[2] != ' '))
        return false;
    for (unsigned i = 0; i < 6; i++)
        if (memcmp(p, codes[i], 2) == 0)
            return true;
    return false;
}

static bool all_digits(const uint8_t *p, size_t n)
{
    if (n == 0 || n > 20)
        return false;
    for (size_t i = 0; i < n; i++)
        if (p[i] < '0' || p[i] > '9')
            return false;
    return true;
}

static void put_hex(struct buf *b, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        buf_printf(b, "%02x", p[i]);
}

/* The normalised text of a side's reply to a step, one unit a line. key:
 * the key meta c values belong to (single-command steps), or -1. */
static void normalise(int side, const struct buf *reply, int key, bool shapes, struct buf *out)
{
    /* one array for every call: a unit takes at least a line end */
    static struct unit *u;
    static size_t ucap;
    size_t need = reply->len / 2 + 1, rest;
    if (need > ucap) {
        ucap = need;
        u = realloc(u, sizeof *u * ucap);
        if (u == NULL)
            die("out of memory");
    }
    size_t n = split_units(reply->p, reply->len, u, ucap, &rest);
    out->len = 0;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *p = u[i].p;
        size_t len = u[i].len;
        /* stats: a run of STAT lines and its END */
        if (len >= 5 && memcmp(p, "STAT ", 5) == 0) {
            while (i + 1 < n && u[i + 1].len >= 5 && memcmp(u[i + 1].p, "STAT ", 5) == 0)
                i++;
            if (i + 1 < n && u[i + 1].len == 3 && memcmp(u[i + 1].p, "END", 3) == 0)
                i++;
            buf_puts(out, "<stats>\n");
            rule_hit(R_STATS);
            continue;
        }
        if (len >= 8 && memcmp(p, "VERSION ", 8) == 0) {
            buf_puts(out, "VERSION <version>\n");
            rule_hit(R_VERSION);
            continue;
        }
        if (shapes) {
            static const char *const outcomes[] = {
                "STORED",
                "NOT_STORED",
                "EXISTS",
                "NOT_FOUND",
                "DELETED",
                "TOUCHED",
                "SERVER_ERROR out of memory storing object",
                "SERVER_ERROR out of memory",
                "CLIENT_ERROR cannot increment or decrement non-numeric value",
            };
            bool oc = all_digits(p, len);
            for (unsigned j = 0; j < sizeof outcomes / sizeof outcomes[0] && !oc; j++)
                oc = len == strlen(outcomes[j]) && memcmp(p, outcomes[j], len) == 0;
            if (oc) {
                buf_puts(out, "<outcome>\n");
                rule_hit(R_PRESSURE);
                continue;
            }
            if (len >= 6 && memcmp(p, "VALUE ", 6) == 0) {
                rule_hit(R_PRESSURE);
                continue;
            }
            if (is_meta_line(p, len)) {
                buf_puts(out, "<meta>\n");
                rule_hit(R_PRESSURE);
                continue;
            }
        }
        if (len >= 6 && memcmp(p, "VALUE ", 6) == 0) {
            /* VALUE key flags bytes [cas] */
            const uint8_t *e = p + len, *t[5];
            size_t tl[5], nt = 0;
            for (const uint8_t *q = p; q < e && nt < 5;) {
                const uint8_t *sp = memchr(q, ' ', (size_t)(e - q));
                const uint8_t *te = sp ? sp : e;
                t[nt] = q;
                tl[nt++] = (size_t)(te - q);
                q = sp ? sp + 1 : e;
            }
            if (nt == 5 && all_digits(t[4], tl[4])) {
                int k = key_index(t[1], tl[1]);
                uint64_t v = strtoull((const char *)t[4], NULL, 10);
                buf_put(out, p, (size_t)(t[4] - p));
                buf_printf(out, "#%u", cas_ordinal(side, v, k));
            } else {
                buf_put(out, p, len);
            }
        } else if (is_meta_line(p, len)) {
            /* meta flags: c -> ordinal, k -> key bytes */
            const uint8_t *q = p, *e = p + len;
            bool first = true;
            while (q < e) {
                const uint8_t *sp = memchr(q, ' ', (size_t)(e - q));
                const uint8_t *te = sp ? sp : e;
                size_t tl = (size_t)(te - q);
                if (!first)
                    buf_puts(out, " ");
                if (!first && tl > 1 && q[0] == 'c' && all_digits(q + 1, tl - 1)) {
                    uint64_t v = strtoull((const char *)q + 1, NULL, 10);
                    buf_printf(out, "c#%u", cas_ordinal(side, v, key));
                } else if (!first && tl >= 1 && q[0] == 'k') {
                    bool enc = sp && (size_t)(e - sp) >= 2 && sp[1] == 'b' &&
                               (sp + 2 == e || sp[2] == ' ');
                    uint8_t raw[400];
                    long rn_ = enc && tl - 1 < sizeof raw
                                   ? b64_decode((const char *)q + 1, tl - 1, raw)
                                   : -1;
                    buf_puts(out, "k=");
                    if (rn_ >= 0) {
                        put_hex(out, raw, (size_t)rn_);
                        te = sp + 2; /* the " b" went with it */
                    } else {
                        put_hex(out, q + 1, tl - 1);
                    }
                    rule_hit(R_KEY_FORM);
                } else {
                    buf_put(out, q, tl);
                }
                first = false;
                q = te < e ? te + 1 : e;
            }
        } else {
            buf_put(out, p, len);
        }
        buf_puts(out, "\n");
        if (u[i].data) {
            if (!shapes || !(len >= 3 && memcmp(p, "VA ", 3) == 0)) {
                buf_puts(out, "  data ");
                put_hex(out, u[i].data, u[i].dlen > 64 ? 64 : u[i].dlen);
                if (u[i].dlen > 64) {
                    /* a checksum for the rest */
                    uint64_t h = 1469598103934665603ull;
                    for (size_t j = 0; j < u[i].dlen; j++)
                        h = (h ^ u[i].data[j]) * 1099511628211ull;
                    buf_printf(out, "..%zu:%016" PRIx64, u[i].dlen, h);
                }
                buf_puts(out, "\n");
            }
        }
    }
    if (rest < reply->len) {
        buf_puts(out, "partial ");
        put_hex(out, reply->p + rest, reply->len - rest > 64 ? 64 : reply->len - rest);
        buf_puts(out, "\n");
    }
}

/* Coverage of herd protection: memcached's mg answers with each mark
 * (W won, Z token sent before, X stale), as the run's tally shows them. */
static uint64_t herd_marks[3];

static void count_herd_marks(const struct buf *b)
{
    static const char *const mark[3] = { " W", " Z", " X" };
    for (unsigned m = 0; m < 3; m++)
        for (size_t i = 0; i + 2 < b->len; i++)
            if (memcmp(b->p + i, mark[m], 2) == 0 && (b->p[i + 2] == ' ' || b->p[i + 2] == '\n'))
                herd_marks[m]++;
}

/* A meta line's t or l token value, for the tick tolerance. */
static bool ttl_close(const char *a, size_t al, const char *b, size_t bl)
{
    if (al < 2 || bl < 2 || (a[0] != 't' && a[0] != 'l') || b[0] != a[0])
        return false;
    char x[32], y[32];
    if (al >= sizeof x || bl >= sizeof y)
        return false;
    memcpy(x, a + 1, al - 1);
    x[al - 1] = 0;
    memcpy(y, b + 1, bl - 1);
    y[bl - 1] = 0;
    char *ex, *ey;
    long long vx = strtoll(x, &ex, 10), vy = strtoll(y, &ey, 10);
    if (*ex || *ey)
        return false;
    if (vx >= 2147483648ll && vy >= 2147483648ll)
        return true; /* both a negative remainder as unsigned */
    return llabs(vx - vy) <= (a[0] == 't' ? 2 : 1);
}

/* Normalised lines equal, a t token within a tick. */
static bool same(const struct buf *a, const struct buf *b)
{
    if (a->len == b->len && memcmp(a->p, b->p, a->len) == 0)
        return true;
    const char *p = (const char *)a->p, *q = (const char *)b->p;
    const char *pe = p + a->len, *qe = q + b->len;
    bool tick = false;
    while (p < pe && q < qe) {
        const char *pl = memchr(p, '\n', (size_t)(pe - p)), *ql = memchr(q, '\n', (size_t)(qe - q));
        if (!pl || !ql)
            return false;
        size_t lp = (size_t)(pl - p), lq = (size_t)(ql - q);
        if (lp != lq || memcmp(p, q, lp) != 0) {
            if (!is_meta_line((const uint8_t *)p, lp) || !is_meta_line((const uint8_t *)q, lq))
                return false;
            /* token by token */
            const char *x = p, *y = q;
            while (x < pl && y < ql) {
                const char *xs = memchr(x, ' ', (size_t)(pl - x)),
                           *ys = memchr(y, ' ', (size_t)(ql - y));
                const char *xe = xs ? xs : pl, *ye = ys ? ys : ql;
                size_t xl = (size_t)(xe - x), yl = (size_t)(ye - y);
                if (!(xl == yl && memcmp(x, y, xl) == 0)) {
                    if (!ttl_close(x, xl, y, yl))
                        return false;
                    tick = true;
                }
                x = xe < pl ? xe + 1 : pl;
                y = ye < ql ? ye + 1 : ql;
            }
            if (x != pl || y != ql)
                return false;
        }
        p = pl + 1;
        q = ql + 1;
    }
    if (p != pe || q != qe)
        return false;
    if (tick)
        rule_hit(R_TTL_TICK);
    return true;
}

/* ------------------------------------------------------------ running */

struct result {
    bool differs;
    char where[2][160];     /* the first normalised lines that differ */
    struct buf raw[NSIDES]; /* what each server sent */
    bool closed[NSIDES], timed_out[NSIDES];
};

static void result_free(struct result *r)
{
    for (int i = 0; i < NSIDES; i++)
        buf_free(&r->raw[i]);
}

/* The decimal CAS a side shows for a key (a hidden `mg KEY c` on rkv for
 * a touched key: R_TOUCH_CAS). */
static void render_cas(int side, int key, struct buf *b)
{
    struct side *s = &sides[side];
    if (key >= 0 && key != K_LONG && s->lastcas_known[key])
        buf_printf(b, "%" PRIu64, s->lastcas[key]);
    else
        buf_puts(b, "18446744073709551000"); /* no item has it */
}

/* rkv's CAS for a key now (a hidden `mg KEY c u`): R_TOUCH_CAS. A read
 * may change an item (u keeps it unfetched, but a stale item hands its
 * win token to the first mg), so memcached gets the same read. */
static bool rkv_cas_now(int key, uint64_t *v)
{
    struct buf cmd = { 0 }, ans = { 0 };
    unsigned long long x = 0;
    buf_puts(&cmd, "mg ");
    buf_put(&cmd, keys[key].b, keys[key].n);
    buf_puts(&cmd, " c u\r\n");
    hidden(S_MC, (const char *)cmd.p, &ans);
    buf_free(&ans);
    ans = (struct buf){ 0 };
    hidden(S_RKV, (const char *)cmd.p, &ans);
    bool ok = ans.len > 4 && memcmp(ans.p, "HD c", 4) == 0 &&
              sscanf((const char *)ans.p + 4, "%llu", &x) == 1;
    buf_free(&cmd);
    buf_free(&ans);
    *v = x;
    return ok;
}

/* The pool keys a touching command touches. */
static unsigned touched_keys(const struct cmd *c, int *out, unsigned max)
{
    unsigned n = 0;
    if (c->kind != KD_TOUCHGET) {
        if (c->key >= 0 && c->key != K_LONG)
            out[n++] = c->key;
        return n;
    }
    const uint8_t *p = c->text.p, *e = memchr(p, '\n', c->text.len);
    unsigned tok = 0;
    if (e == NULL)
        return 0;
    if (e > p + 1 && e[-1] == '\r')
        e--;
    while (p < e) {
        while (p < e && *p == ' ')
            p++;
        const uint8_t *t = p;
        while (p < e && *p != ' ')
            p++;
        if (++tok <= 2 || p == t)
            continue; /* gat/gats and the exptime */
        int k = key_index(t, (size_t)(p - t));
        bool dup = false;
        for (unsigned i = 0; i < n; i++)
            dup |= out[i] == k;
        if (k >= 0 && k != K_LONG && !dup && n < max)
            out[n++] = k;
    }
    return n;
}

static void render(int side, const struct cmd *c, struct buf *b)
{
    size_t at = 0;
    for (unsigned i = 0; i < c->ncas; i++) {
        buf_put(b, c->text.p + at, c->cas[i].off - at);
        render_cas(side, c->cas[i].key, b);
        at = c->cas[i].off;
    }
    buf_put(b, c->text.p + at, c->text.len - at);
}

/* Whether a side's value for a key (a VA block) is a decimal of 2^63 or
 * more, as memcached reads it: digits, then spaces (an in-place incr pads). */
static bool value_high_bit(const struct buf *ans)
{
    const char *p = (const char *)ans->p, *e = p + ans->len;
    const char *nl = ans->len > 3 && memcmp(p, "VA ", 3) == 0 ? memchr(p, '\n', ans->len) : NULL;
    if (nl == NULL)
        return false;
    const char *d = nl + 1, *q = d;
    uint64_t v = 0;
    while (q < e && *q >= '0' && *q <= '9') {
        if (v > (UINT64_MAX - (uint64_t)(*q - '0')) / 10)
            return false; /* does not fit: memcached refuses it anyway */
        v = v * 10 + (uint64_t)(*q++ - '0');
    }
    if (q == d)
        return false;
    while (q < e && *q == ' ')
        q++;
    return q + 1 < e && q[0] == '\r' && q[1] == '\n' && v >= (UINT64_C(1) << 63);
}

/* Set key's item on both servers aside: deleted, its last CAS forgotten. */
static void resync_key(int key)
{
    for (int i = 0; i < NSIDES; i++) {
        struct buf cmd = { 0 }, ans = { 0 };
        buf_puts(&cmd, "delete ");
        buf_put(&cmd, keys[key].b, keys[key].n);
        buf_puts(&cmd, "\r\n");
        hidden(i, (const char *)cmd.p, &ans);
        buf_free(&cmd);
        buf_free(&ans);
        sides[i].lastcas_known[key] = false;
    }
}

/* A side's `mg KEY v` answer, by a hidden command. */
static void hidden_value(int side, int key, struct buf *ans)
{
    struct buf cmd = { 0 };
    buf_puts(&cmd, "mg ");
    buf_put(&cmd, keys[key].b, keys[key].n);
    buf_puts(&cmd, " v\r\n");
    hidden(side, (const char *)cmd.p, ans);
    buf_free(&cmd);
}

/* Whether step command j's key is named by no other command of the step. */
static bool key_alone(const struct step *s, unsigned j)
{
    for (unsigned k = 0; k < s->n; k++)
        if (k != j && s->cmds[k].key == s->cmds[j].key)
            return false;
    return true;
}

/* R_SIGN_SCAN: a step in which memcached refused an incr, decr or ma as
 * non-numeric, with an incr, decr or ma on a key no other command of the
 * step names, whose value memcached still shows as a number of 2^63 or more
 * (its item unchanged: refused) while rkv's is another (rkv did it). A step
 * of that one command is the same rule. The key is then resynced. */
static bool sign_scan_refusal(const struct step *s, const struct result *res)
{
    static const char refused[] = "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n";
    const struct buf *m = &res->raw[S_MC];
    if (opt.self_check || memmem(m->p, m->len, refused, sizeof refused - 1) == NULL)
        return false;
    for (unsigned j = 0; j < s->n; j++) {
        const struct cmd *c = &s->cmds[j];
        if ((c->kind != KD_ARITH && c->kind != KD_MA) || c->key < 0 || c->key == K_LONG ||
            !key_alone(s, j))
            continue;
        struct buf mv = { 0 }, rv = { 0 };
        hidden_value(S_MC, c->key, &mv);
        hidden_value(S_RKV, c->key, &rv);
        bool scanned = value_high_bit(&mv) && rv.len > 3 && memcmp(rv.p, "VA ", 3) == 0 &&
                       (mv.len != rv.len || memcmp(mv.p, rv.p, mv.len) != 0);
        buf_free(&mv);
        buf_free(&rv);
        if (scanned) {
            resync_key(c->key);
            rule_hit(R_SIGN_SCAN);
            return true;
        }
    }
    return false;
}

/* Whether an `mg KEY v` answer is a value of one or more blanks (the bytes
 * strtoull skips) and nothing else. */
static bool value_blank(const struct buf *ans)
{
    const char *p = (const char *)ans->p;
    const char *nl = ans->len > 3 && memcmp(p, "VA ", 3) == 0 ? memchr(p, '\n', ans->len) : NULL;
    if (nl == NULL)
        return false;
    unsigned long n = strtoul(p + 3, NULL, 10);
    const char *d = nl + 1;
    if (n == 0 || (size_t)(d - p) + n + 2 > ans->len)
        return false;
    for (unsigned long i = 0; i < n; i++)
        if (!isspace((unsigned char)d[i]))
            return false;
    return true;
}

/* R_BLANK_SCAN: a step with an incr, decr or ma on a key no other command
 * of the step names, which rkv refused as non-numeric on a value of blanks
 * (rkv's value after the step is the one it refused). The key is then
 * resynced. */
static bool blank_scan_refusal(const struct step *s, const struct result *res)
{
    static const char refused[] = "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n";
    const struct buf *r = &res->raw[S_RKV];
    if (opt.self_check || memmem(r->p, r->len, refused, sizeof refused - 1) == NULL)
        return false;
    for (unsigned j = 0; j < s->n; j++) {
        const struct cmd *c = &s->cmds[j];
        if ((c->kind != KD_ARITH && c->kind != KD_MA) || c->key < 0 || c->key == K_LONG)
            continue;
        if (!key_alone(s, j))
            continue;
        struct buf ans = { 0 };
        hidden_value(S_RKV, c->key, &ans);
        bool blank = value_blank(&ans);
        buf_free(&ans);
        if (blank) {
            resync_key(c->key);
            rule_hit(R_BLANK_SCAN);
            return true;
        }
    }
    return false;
}

/* Run one step on both servers; compare unless a rule says not to. */
/* Keys a touch gave a new CAS in rkv since they were last set (R_TOUCH_CAS):
 * an ms I with a C quoting another item's CAS may then fall below the
 * item's CAS in rkv and above it in memcached (a stale store there, EX
 * here), so such an ms is not compared and its key is resynced. */
static bool touched_since_set[NKEYS];

/* Whether a meta command's line has flag f (a token after the key). */
static bool meta_flag(const struct cmd *c, char f)
{
    const uint8_t *p = c->text.p, *e = memchr(p, '\n', c->text.len);
    unsigned tok = 0;
    while (e != NULL && p < e) {
        while (p < e && *p == ' ')
            p++;
        if (p < e && ++tok > 2 && *p == (uint8_t)f)
            return true;
        while (p < e && *p != ' ')
            p++;
    }
    return false;
}

/* Before a step: which of its ms I C commands meet a touched key (in the
 * step's order: a touch earlier in a batch counts); their keys in out. */
static unsigned touched_stale_stores(const struct step *s, int *out, unsigned max)
{
    unsigned n = 0;
    for (unsigned j = 0; j < s->n; j++) {
        const struct cmd *c = &s->cmds[j];
        int tk[48];
        if (c->kind == KD_TOUCH || c->kind == KD_TOUCHGET || c->kind == KD_MGT) {
            unsigned nt = touched_keys(c, tk, 48);
            for (unsigned i = 0; i < nt; i++)
                touched_since_set[tk[i]] = true;
        } else if (c->key >= 0 && c->key != K_LONG && c->text.len > 4 &&
                   (memcmp(c->text.p, "set ", 4) == 0 || memcmp(c->text.p, "delete ", 7) == 0)) {
            touched_since_set[c->key] = false;
        } else if (c->kind == KD_MS && c->key >= 0 && c->key != K_LONG &&
                   touched_since_set[c->key] && meta_flag(c, 'I') && meta_flag(c, 'C') && n < max) {
            out[n++] = c->key;
        }
    }
    return n;
}

static void run_step(const struct step *s, bool shapes, struct result *res)
{
    struct buf sb[NSIDES] = { { 0 } };
    unsigned want_mn = 1;
    bool nocmp = false, closes = false, nosync = false;
    for (unsigned j = 0; j < s->n; j++) {
        const struct cmd *c = &s->cmds[j];
        want_mn += c->mn;
        nocmp |= (c->flags & C_NOCMP) != 0;
        closes |= (c->flags & C_CLOSES) != 0;
        nosync |= (c->flags & C_NOSYNC) != 0;
    }
    int stale_keys[16];
    unsigned nstale = touched_stale_stores(s, stale_keys, 16);
    if (nstale > 0 && !opt.self_check) {
        nocmp = true;
        rule_hit(R_TOUCH_CAS);
    }
    /* a touch on rkv: its CAS before, for the versions the touch makes */
    const struct cmd *c0 = &s->cmds[0];
    int tk[48];
    unsigned ntk = 0;
    bool touching = !opt.self_check && s->n == 1 &&
                    (c0->kind == KD_TOUCH || c0->kind == KD_TOUCHGET || c0->kind == KD_MGT);
    if (touching) {
        ntk = touched_keys(c0, tk, 48);
        for (unsigned i = 0; i < ntk; i++)
            sides[S_RKV].has_src[tk[i]] = rkv_cas_now(tk[i], &sides[S_RKV].src[tk[i]]);
    }
    for (int i = 0; i < NSIDES; i++) {
        for (unsigned j = 0; j < s->n; j++)
            render(i, &s->cmds[j], &sb[i]);
        if (!nosync)
            buf_puts(&sb[i], "mn\r\n");
    }
    exchange(sb, s->split, want_mn, nosync);
    *res = (struct result){ 0 };
    for (int i = 0; i < NSIDES; i++) {
        buf_put(&res->raw[i], sides[i].reply.p, sides[i].reply.len);
        res->closed[i] = sides[i].closed;
        res->timed_out[i] = sides[i].timed_out;
    }
    int key = s->n == 1 ? c0->key : -1;
    struct buf norm[NSIDES] = { { 0 } };
    for (int i = 0; i < NSIDES && !nocmp; i++) {
        normalise(i, &res->raw[i], key, shapes, &norm[i]);
        if (res->timed_out[i])
            buf_puts(&norm[i], "<no reply in time>\n");
        if (res->closed[i])
            buf_puts(&norm[i], "<closed>\n");
    }
    /* and after: its version now counts as the one it had, when it shows
     * (and is what a command quoting the key's CAS gets, if memcached's
     * was seen) */
    for (unsigned i = 0; i < ntk; i++) {
        struct side *r = &sides[S_RKV];
        uint64_t v;
        int k = tk[i];
        if (r->has_src[k] && rkv_cas_now(k, &v) && v != r->src[k] && casmap_find(&r->cas, v) == 0) {
            r->alias_src = realloc(r->alias_src, sizeof *r->alias_src * (r->alias.n + 1));
            r->alias_src[r->alias.n] = r->src[k];
            casmap_add(&r->alias, v, (unsigned)r->alias.n + 1);
            /* what memcached last showed is still its CAS: rkv's is the new one */
            if (r->lastcas_known[k] && r->lastcas[k] == r->src[k])
                r->lastcas[k] = v;
        }
        r->has_src[k] = false;
    }
    if (nocmp) {
        if (nstale == 0)
            rule_hit(s->cmds[0].rule);
        for (unsigned j = 0; j < s->n; j++)
            if (s->cmds[j].flags & C_NOCMP)
                rule_hit(s->cmds[j].rule);
        res->differs = res->closed[S_MC] != res->closed[S_RKV];
    } else {
        res->differs = !same(&norm[S_MC], &norm[S_RKV]) && !sign_scan_refusal(s, res) &&
                       !blank_scan_refusal(s, res);
        count_herd_marks(&norm[S_MC]);
    }
    if (res->differs && getenv("MC_DIFF_DEBUG")) {
        for (unsigned j = 0; j < s->n; j++) {
            fprintf(stderr, "--- command (kind %d): ", s->cmds[j].kind);
            print_escaped(stderr, s->cmds[j].text.p, s->cmds[j].text.len, 300);
            fprintf(stderr, "\n");
        }
        fprintf(stderr, "--- memcached normalised:\n%s--- rkv normalised:\n%s---\n",
                norm[S_MC].p ? (const char *)norm[S_MC].p : "",
                norm[S_RKV].p ? (const char *)norm[S_RKV].p : "");
    }
    if (res->differs) {
        /* the first line that differs, for the report */
        const char *a = (const char *)norm[S_MC].p, *b = (const char *)norm[S_RKV].p;
        size_t i = 0, line = 0;
        while (a && b && a[i] && a[i] == b[i]) {
            if (a[i] == '\n')
                line = i + 1;
            i++;
        }
        for (int side = 0; side < NSIDES; side++) {
            const char *t = side == S_MC ? a : b;
            const char *e = t ? strchr(t + line, '\n') : NULL;
            snprintf(res->where[side], sizeof res->where[side], "line %zu: %.*s", line,
                     t ? (int)(e ? (size_t)(e - (t + line)) : strlen(t + line)) : 0,
                     t ? t + line : "");
        }
    }
    for (int i = 0; i < NSIDES; i++) {
        buf_free(&norm[i]);
        buf_free(&sb[i]);
    }
    if (closes || res->closed[S_MC] || res->closed[S_RKV] || res->timed_out[S_MC] ||
        res->timed_out[S_RKV])
        reconnect();
    for (unsigned j = 0; j < s->n; j++) {
        if (s->cmds[j].flags & C_FLUSHFIX) {
            rule_hit(R_FLUSH_LATER);
            for (int i = 0; i < NSIDES; i++) {
                struct buf ans = { 0 };
                hidden(i, "flush_all\r\n", &ans);
                buf_free(&ans);
                memset(sides[i].lastcas_known, 0, sizeof sides[i].lastcas_known);
            }
            break;
        }
    }
    /* resync a key a not-compared command may have left differently */
    for (unsigned j = 0; j < s->n; j++) {
        const struct cmd *c = &s->cmds[j];
        if ((c->flags & C_RESYNC) && c->key >= 0 && c->key != K_LONG) {
            for (int i = 0; i < NSIDES; i++) {
                struct buf cmd = { 0 }, ans = { 0 };
                buf_puts(&cmd, "delete ");
                buf_put(&cmd, keys[c->key].b, keys[c->key].n);
                buf_puts(&cmd, "\r\n");
                hidden(i, (const char *)cmd.p, &ans);
                buf_free(&cmd);
                buf_free(&ans);
                sides[i].lastcas_known[c->key] = false;
            }
        }
    }
    for (unsigned j = 0; j < nstale && !opt.self_check; j++) { /* touched_since_set */
        for (int i = 0; i < NSIDES; i++) {
            struct buf cmd = { 0 }, ans = { 0 };
            buf_puts(&cmd, "delete ");
            buf_put(&cmd, keys[stale_keys[j]].b, keys[stale_keys[j]].n);
            buf_puts(&cmd, "\r\n");
            hidden(i, (const char *)cmd.p, &ans);
            buf_free(&cmd);
            buf_free(&ans);
            sides[i].lastcas_known[stale_keys[j]] = false;
        }
        touched_since_set[stale_keys[j]] = false;
    }
}

/* Both servers back to empty: a fresh connection, flush_all. The pressure
 * phase restarts them (what memory holds is part of its state). */
static void reset_servers(bool restart)
{
    memset(touched_since_set, 0, sizeof touched_since_set);
    if (restart) {
        stop_servers();
        start_servers(cur_mb);
    } else {
        reconnect();
        for (int i = 0; i < NSIDES; i++) {
            struct buf ans = { 0 };
            hidden(i, "flush_all\r\n", &ans);
            if (ans.len < 4 || memcmp(ans.p, "OK\r\n", 4) != 0)
                die("%s did not take flush_all", side_name[i]);
            buf_free(&ans);
        }
    }
    for (int i = 0; i < NSIDES; i++)
        side_reset_state(&sides[i]);
}

/* Run steps[0..n) from a reset; true when the last one differs. */
static bool replay(const struct step *steps, size_t n, bool shapes, bool restart, struct result *last)
{
    reset_servers(restart);
    struct result r = { 0 };
    for (size_t i = 0; i < n; i++) {
        result_free(&r);
        run_step(&steps[i], shapes, &r);
    }
    if (last)
        *last = r;
    else
        result_free(&r);
    return r.differs;
}

static unsigned shrink_tries;

/* Delta debugging over the steps before the failing one (kept last). */
static size_t shrink(struct step *steps, size_t n, bool shapes, bool restart)
{
    unsigned budget = restart ? 60 : 400;
    shrink_tries = 0;
    /* the failing step alone? */
    if (n > 1) {
        struct step only = steps[n - 1];
        shrink_tries++;
        if (replay(&only, 1, shapes, restart, NULL)) {
            steps[0] = steps[n - 1];
            return 1;
        }
    }
    size_t chunks = 2;
    while (n > 1 && shrink_tries < budget) {
        size_t pre = n - 1;
        if (chunks > pre)
            chunks = pre;
        size_t size = (pre + chunks - 1) / chunks;
        bool reduced = false;
        for (size_t c = 0; c < chunks && shrink_tries < budget; c++) {
            size_t lo = c * size, hi = RKV_MIN_(pre, lo + size);
            if (lo >= hi)
                continue;
            /* without steps [lo, hi) */
            struct step *t = malloc(sizeof *t * n);
            size_t m = 0;
            for (size_t i = 0; i < n; i++)
                if (i < lo || i >= hi)
                    t[m++] = steps[i];
            shrink_tries++;
            if (replay(t, m, shapes, restart, NULL)) {
                memcpy(steps, t, sizeof *t * m);
                n = m;
                reduced = true;
                free(t);
                chunks = chunks > 2 ? chunks - 1 : 2;
                break;
            }
            free(t);
        }
        if (!reduced) {
            if (chunks >= pre)
                break;
            chunks = RKV_MIN_(pre, chunks * 2);
        }
    }
    return n;
}

static void print_reply(const char *who, const struct result *r, int side)
{
    fprintf(stdout, "      %-9s ", who);
    print_escaped(stdout, r->raw[side].p, r->raw[side].len, 600);
    if (r->timed_out[side])
        fprintf(stdout, " <no reply in %u ms>", opt.timeout_ms);
    if (r->closed[side])
        fprintf(stdout, " <closed>");
    fprintf(stdout, "\n");
}

/* The reproducer: each step's commands and both replies (the trailing
 * "mn\r\n" the tester sends after each step and its "MN\r\n" included). */
static void print_repro(const struct step *steps, size_t n, bool shapes, bool restart)
{
    reset_servers(restart);
    for (size_t i = 0; i < n; i++) {
        struct result r;
        run_step(&steps[i], shapes, &r);
        for (unsigned j = 0; j < steps[i].n; j++) {
            struct buf b = { 0 };
            render(S_MC, &steps[i].cmds[j], &b);
            fprintf(stdout, "    %s ", j == 0 ? ">" : "+");
            print_escaped(stdout, b.p, b.len, 400);
            if (steps[i].cmds[j].ncas)
                fprintf(stdout, "   (CAS as memcached showed it)");
            fprintf(stdout, "\n");
            buf_free(&b);
        }
        if (steps[i].split)
            fprintf(stdout, "      (sent in pieces)\n");
        print_reply("memcached", &r, S_MC);
        print_reply("rkv", &r, S_RKV);
        if (r.differs)
            fprintf(stdout, "      ^ differs: memcached %s\n                 rkv       %s\n",
                    r.where[S_MC], r.where[S_RKV]);
        result_free(&r);
    }
}

struct tally {
    uint64_t commands, steps, episodes, diffs, seeds;
};
static struct tally tally;

/* A short signature of a difference, so each kind is printed once. */
static void signature(const struct step *s, const struct result *r, char *out, size_t cap)
{
    char word[16] = "";
    const uint8_t *p = s->cmds[0].text.p;
    size_t i = 0;
    while (i < s->cmds[0].text.len && i < sizeof word - 1 && p[i] != ' ' && p[i] != '\r' &&
           p[i] != '\n') {
        word[i] = (char)p[i];
        i++;
    }
    word[i] = 0;
    char a[24] = "", b[24] = "";
    for (int side = 0; side < NSIDES; side++) {
        char *d = side == S_MC ? a : b;
        size_t k = 0;
        for (size_t j = 0; j < r->raw[side].len && k < 20; j++) {
            uint8_t ch = r->raw[side].p[j];
            if (ch == '\r' || ch == '\n')
                break;
            if (ch >= 'A' && ch <= 'Z')
                d[k++] = (char)ch;
            else if (ch == ' ' || ch == '_')
                d[k++] = '_';
        }
        d[k] = 0;
        if (r->closed[side])
            strcat(d, "!c");
        if (r->timed_out[side])
            strcat(d, "!t");
    }
    snprintf(out, cap, "%s|%s|%s", word, a, b);
}

static char seen_sigs[64][96];
static unsigned nsigs;

/* One episode of generated steps from a reset. */
static void run_episode(unsigned nsteps, bool shapes, bool restart, uint64_t seed, unsigned ep,
                        uint64_t *cmds_left)
{
    struct step *steps = calloc(nsteps, sizeof *steps);
    size_t n = 0;
    reset_servers(restart);
    tally.episodes++;
    for (; n<nsteps && * cmds_left> 0; n++) {
        gen_step(&steps[n]);
        struct result r;
        uint64_t t_step = now_ms();
        run_step(&steps[n], shapes, &r);
        if (opt.verbose && now_ms() - t_step > 100) {
            printf("slow step (%" PRIu64 " ms): ", now_ms() - t_step);
            print_escaped(stdout, steps[n].cmds[0].text.p, steps[n].cmds[0].text.len, 200);
            printf("\n   ");
            print_escaped(stdout, r.raw[S_MC].p, r.raw[S_MC].len, 200);
            printf("\n   ");
            print_escaped(stdout, r.raw[S_RKV].p, r.raw[S_RKV].len, 200);
            printf("\n");
        }
        tally.steps++;
        tally.commands += steps[n].n;
        *cmds_left = *cmds_left > steps[n].n ? *cmds_left - steps[n].n : 0;
        if (!r.differs) {
            result_free(&r);
            continue;
        }
        tally.diffs++;
        char sig[96];
        signature(&steps[n], &r, sig, sizeof sig);
        bool known = false;
        for (unsigned i = 0; i < nsigs; i++)
            known |= strcmp(seen_sigs[i], sig) == 0;
        if (!known && nsigs < 64)
            snprintf(seen_sigs[nsigs++], sizeof seen_sigs[0], "%s", sig);
        if (opt.verbose)
            printf("difference at seed %" PRIu64 " episode %u step %zu: memcached %s / rkv %s\n",
                   seed, ep, n, r.where[S_MC], r.where[S_RKV]);
        if (known || nsigs > opt.max_diffs) {
            if (opt.verbose)
                fprintf(stdout,
                        "difference (seen before: %s) at seed %" PRIu64 " episode %u step %zu\n",
                        sig, seed, ep, n);
            result_free(&r);
            n++;
            break; /* the rest of the episode would follow from it */
        }
        result_free(&r);
        /* shrink a copy: the steps from the reset to this one */
        size_t m = n + 1;
        struct step *work = malloc(sizeof *work * m);
        memcpy(work, steps, sizeof *work * m);
        size_t k = shrink(work, m, shapes, restart);
        fprintf(stdout,
                "\ndifference %u (seed %" PRIu64 ", %s phase, episode %u, step %zu; "
                "shrunk to %zu step%s in %u tries): %s\n",
                nsigs, seed, shapes ? "pressure" : "normal", ep, n, k, k == 1 ? "" : "s",
                shrink_tries, sig);
        fprintf(stdout, "  from fresh servers (after a flush_all), each step followed by mn:\n");
        print_repro(work, k, shapes, restart);
        fflush(stdout);
        free(work);
        n++;
        break;
    }
    for (size_t i = 0; i < n; i++)
        step_free(&steps[i]);
    free(steps);
}

static void run_phase(uint64_t seed, uint64_t commands, bool shapes, unsigned mb)
{
    if (commands == 0)
        return;
    pressure = shapes;
    start_servers(mb);
    uint64_t left = commands;
    for (unsigned ep = 0; left > 0; ep++)
        run_episode(opt.episode, shapes, shapes, seed, ep, &left);
    stop_servers();
}

static void usage(FILE *f)
{
    fprintf(f, "usage: mc_diff --rkv PATH [--memcached PATH] [--seed N] [--seeds K] [--commands N]\n"
               "               [--memory MB] [--pressure-memory MB] [--pressure-share PCT]\n"
               "               [--episode STEPS] [--max-diffs N] [--timeout-ms MS] [--verbose]\n"
               "               [--rules] [--self-check]\n"
               "--self-check runs memcached on both sides (a check of the tester itself:\n"
               "every reply must match there with no rule but the CAS ordinals).\n");
}

static void print_rules(void)
{
    printf("allow-list (the only ways replies may differ):\n");
    for (int i = 0; i < R_COUNT; i++)
        printf("  %-26s %s\n", rules[i].name, rules[i].why);
}

static const char *find_on_path(const char *name)
{
    static char found[4096];
    const char *path = getenv("PATH");
    if (path == NULL)
        path = "/usr/local/bin:/usr/bin:/bin";
    while (*path) {
        const char *e = strchr(path, ':');
        size_t l = e ? (size_t)(e - path) : strlen(path);
        snprintf(found, sizeof found, "%.*s/%s", (int)l, path, name);
        if (l > 0 && access(found, X_OK) == 0)
            return found;
        path += l + (e ? 1 : 0);
    }
    return NULL;
}

static uint64_t parse_num(const char *s, const char *what)
{
    char *e;
    errno = 0;
    unsigned long long v = strtoull(s, &e, 10);
    if (errno || *e || e == s)
        die("%s: not a number: %s", what, s);
    return v;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool takes = true;
        if (strcmp(a, "--rkv") == 0 && v)
            opt.rkv_bin = v;
        else if (strcmp(a, "--memcached") == 0 && v)
            opt.mc_bin = v;
        else if (strcmp(a, "--seed") == 0 && v)
            opt.seed = parse_num(v, a);
        else if (strcmp(a, "--seeds") == 0 && v)
            opt.seeds = (unsigned)parse_num(v, a);
        else if (strcmp(a, "--commands") == 0 && v)
            opt.commands = parse_num(v, a);
        else if (strcmp(a, "--memory") == 0 && v)
            opt.memory_mb = (unsigned)parse_num(v, a);
        else if (strcmp(a, "--pressure-memory") == 0 && v)
            opt.pressure_mb = (unsigned)parse_num(v, a);
        else if (strcmp(a, "--pressure-share") == 0 && v)
            opt.pressure_pct = (unsigned)parse_num(v, a);
        else if (strcmp(a, "--episode") == 0 && v)
            opt.episode = (unsigned)parse_num(v, a);
        else if (strcmp(a, "--max-diffs") == 0 && v)
            opt.max_diffs = (unsigned)parse_num(v, a);
        else if (strcmp(a, "--timeout-ms") == 0 && v)
            opt.timeout_ms = (unsigned)parse_num(v, a);
        else {
            takes = false;
            if (strcmp(a, "--verbose") == 0)
                opt.verbose = true;
            else if (strcmp(a, "--self-check") == 0)
                opt.self_check = true;
            else if (strcmp(a, "--rules") == 0) {
                print_rules();
                return 0;
            } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
                usage(stdout);
                return 0;
            } else {
                usage(stderr);
                return 2;
            }
        }
        if (takes)
            i++;
    }
    if (opt.rkv_bin == NULL && !opt.self_check) {
        usage(stderr);
        return 2;
    }
    if (opt.mc_bin == NULL)
        opt.mc_bin = find_on_path("memcached");
    if (opt.mc_bin == NULL) {
        printf("mc_diff: SKIP: memcached is not on PATH (scripts/install-deps.sh installs it); "
               "nothing to compare against\n");
        return 77;
    }
    if (!opt.self_check && access(opt.rkv_bin, X_OK) != 0)
        die("%s: %s", opt.rkv_bin, strerror(errno));
    if (opt.episode == 0 || opt.pressure_pct > 100)
        die("--episode must be > 0 and --pressure-share at most 100");
    signal(SIGPIPE, SIG_IGN);
    keys_init();
    for (int i = 0; i < NSIDES; i++)
        sides[i].fd = -1;

    uint64_t t0 = now_ms();
    for (unsigned s = 0; s < opt.seeds; s++) {
        uint64_t seed = opt.seed + s;
        uint64_t pcmds = opt.commands * opt.pressure_pct / 100;
        rng_state = seed * 0x2545f4914f6cdd1dull + 1;
        run_phase(seed, opt.commands - pcmds, false, opt.memory_mb);
        rng_state = seed * 0x9e3779b97f4a7c15ull + 7;
        run_phase(seed, pcmds, true, opt.pressure_mb);
        tally.seeds++;
    }
    uint64_t ms = now_ms() - t0;
    printf("\nmc_diff: %" PRIu64 " commands in %" PRIu64 " steps, %" PRIu64 " episodes, %" PRIu64
           " seeds (%" PRIu64 "..%" PRIu64 "), %.1f s: %" PRIu64 " difference%s (%u kinds)\n",
           tally.commands, tally.steps, tally.episodes, tally.seeds, opt.seed,
           opt.seed + opt.seeds - 1, (double)ms / 1000.0, tally.diffs, tally.diffs == 1 ? "" : "s",
           nsigs);
    printf("allow-list rules applied:");
    for (int i = 0; i < R_COUNT; i++)
        printf(" %s=%" PRIu64, rules[i].name, rule_hits[i]);
    printf("\nherd marks compared: W=%" PRIu64 " Z=%" PRIu64 " X=%" PRIu64 "\n", herd_marks[0],
           herd_marks[1], herd_marks[2]);
    return tally.diffs ? 1 : 0;
}
