/* test_memcache_proto.c — the memcached text protocol parser on its own:
 * every command's syntax, the limits (key 250, line 2048 / 65536, value
 * size), framing of partial input (need more), memcached's error strings
 * and where it closes, meta flags, base64 keys. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "memcache_proto.h"

#define MAXV 1024u

static enum rkv_mc_result parse(const char *s, struct rkv_mc_req *r, size_t *used)
{
    size_t need;
    return rkv_mc_parse(s, strlen(s), MAXV, r, used, &need);
}

static void test_storage(void **state)
{
    (void)state;
    struct rkv_mc_req r;
    size_t used;
    const char *s = "set foo 42 100 3\r\nbar\r\nget foo\r\n";
    assert_int_equal(parse(s, &r, &used), RKV_MC_OK);
    assert_int_equal(r.cmd, RKV_MC_SET);
    assert_int_equal(used, strlen("set foo 42 100 3\r\nbar\r\n"));
    assert_memory_equal(r.key, "foo", 3);
    assert_int_equal(r.key_len, 3);
    assert_int_equal(r.flags, 42);
    assert_int_equal(r.exptime, 100);
    assert_int_equal(r.bytes, 3);
    assert_memory_equal(r.data, "bar", 3);
    assert_false(r.noreply);

    assert_int_equal(parse("cas k 0 -1 2 77 noreply\r\nhi\r\n", &r, &used), RKV_MC_OK);
    assert_int_equal(r.cmd, RKV_MC_CAS);
    assert_int_equal(r.cas, 77);
    assert_int_equal(r.exptime, -1);
    assert_true(r.noreply);

    const char *names[] = { "add", "replace", "append", "prepend" };
    const enum rkv_mc_cmd cmds[] = { RKV_MC_ADD, RKV_MC_REPLACE, RKV_MC_APPEND, RKV_MC_PREPEND };
    for (unsigned i = 0; i < 4; i++) {
        char line[64];
        snprintf(line, sizeof line, "%s k 1 2 0\r\n\r\n", names[i]);
        assert_int_equal(parse(line, &r, &used), RKV_MC_OK);
        assert_int_equal(r.cmd, cmds[i]);
        assert_int_equal(r.bytes, 0);
        assert_int_equal(used, strlen(line));
    }
    /* a bare "\n" ends a line too; runs of spaces separate */
    assert_int_equal(parse("set  k   0 0 1\nx\r\n", &r, &used), RKV_MC_OK);
    assert_int_equal(r.key_len, 1);
}

static void test_storage_errors(void **state)
{
    (void)state;
    struct rkv_mc_req r;
    size_t used, need;
    assert_int_equal(parse("set k 0 0\r\n", &r, &used), RKV_MC_ERROR);
    assert_int_equal(parse("set k x 0 1\r\nx\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    assert_string_equal(r.error, "bad command line format");
    assert_int_equal(used, strlen("set k x 0 1\r\n"));   /* only the line */
    assert_int_equal(parse("set k 4294967296 0 1\r\nx\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    assert_int_equal(parse("set k 0 0 -1\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    assert_int_equal(parse("set k 0 0 99999999999\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    assert_int_equal(parse("set k 0 0 1 junk\r\nx\r\n", &r, &used), RKV_MC_ERROR);
    /* value too large: SERVER_ERROR, the data block is swallowed */
    assert_int_equal(parse("set k 0 0 1025\r\n", &r, &used), RKV_MC_SERVER_ERROR);
    assert_string_equal(r.error, "object too large for cache");
    assert_int_equal(r.swallow, 1027);
    assert_false(r.close);
    /* bad data chunk: memcached closes */
    assert_int_equal(parse("set k 0 0 1\r\nxyz\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    assert_string_equal(r.error, "bad data chunk");
    assert_true(r.close);
    /* key limits */
    char line[600];
    memset(line, 'a', sizeof line);
    memcpy(line, "set ", 4);
    snprintf(line + 4 + 251, sizeof line - 255, " 0 0 1\r\nx\r\n");
    assert_int_equal(parse(line, &r, &used), RKV_MC_CLIENT_ERROR);
    snprintf(line + 4 + 250, sizeof line - 254, " 0 0 1\r\nx\r\n");
    assert_int_equal(parse(line, &r, &used), RKV_MC_OK);
    assert_int_equal(r.key_len, 250);
    assert_int_equal(parse("set k\x01y 0 0 1\r\nx\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    /* partial: need the whole data block */
    const char *s = "set k 0 0 5\r\nab";
    assert_int_equal(rkv_mc_parse(s, strlen(s), MAXV, &r, &used, &need), RKV_MC_NEED_MORE);
    assert_int_equal(need, strlen("set k 0 0 5\r\n") + 7);
    assert_int_equal(used, 0);
}

static void test_framing(void **state)
{
    (void)state;
    struct rkv_mc_req r;
    size_t used, need;
    assert_int_equal(rkv_mc_parse("get fo", 6, MAXV, &r, &used, &need), RKV_MC_NEED_MORE);
    assert_int_equal(need, 7);
    /* a line longer than 2048 without a newline is refused and closes */
    char *big = malloc(RKV_MC_MAX_GET_LINE + 10);
    memset(big, 'x', RKV_MC_MAX_GET_LINE + 10);
    assert_int_equal(rkv_mc_parse(big, RKV_MC_MAX_LINE, MAXV, &r, &used, &need), RKV_MC_CLIENT_ERROR);
    assert_string_equal(r.error, "line too long");
    assert_true(r.close);
    assert_int_equal(rkv_mc_parse(big, RKV_MC_MAX_LINE - 1, MAXV, &r, &used, &need), RKV_MC_NEED_MORE);
    /* retrieval lines may be longer (many keys) */
    memcpy(big, "get ", 4);
    assert_int_equal(rkv_mc_parse(big, RKV_MC_MAX_LINE + 100, MAXV, &r, &used, &need), RKV_MC_NEED_MORE);
    assert_int_equal(rkv_mc_parse(big, RKV_MC_MAX_GET_LINE, MAXV, &r, &used, &need), RKV_MC_CLIENT_ERROR);
    free(big);
    assert_int_equal(parse("\r\n", &r, &used), RKV_MC_ERROR);
    assert_int_equal(parse("bogus a b\r\n", &r, &used), RKV_MC_ERROR);
    assert_int_equal(used, strlen("bogus a b\r\n"));
}

/* A retrieval line longer than RKV_MC_MAX_GET_LINE (libmemcached's mget of
 * thousands of keys is one "get" line): served in parts, each with the
 * complete keys so far, the command remembered until the line ends. */
static void test_long_retrieval_line(void **state)
{
    (void)state;
    struct rkv_mc_stream st = { 0 };
    struct rkv_mc_req r;
    size_t used, need, len = 0, off = 0, nkeys = 0, parts = 0;
    const size_t total = 3 * RKV_MC_MAX_GET_LINE;
    char *line = malloc(total + 64);
    len = (size_t)sprintf(line, "gats 100");
    unsigned want = 0;
    while (len < total)
        len += (size_t)sprintf(line + len, " key:%06u", want++);
    len += (size_t)sprintf(line + len, "\r\nmn\r\n");
    /* the plain parser still refuses it */
    assert_int_equal(rkv_mc_parse(line, len, MAXV, &r, &used, &need), RKV_MC_CLIENT_ERROR);
    assert_true(r.close);
    for (;;) {
        enum rkv_mc_result res = rkv_mc_parse_stream(line + off, len - off, MAXV, &st, &r, &used, &need);
        assert_int_equal(res, RKV_MC_OK);
        assert_int_equal(r.cmd, RKV_MC_GATS);
        assert_int_equal(r.exptime, 100);
        assert_true(r.parted);
        assert_true(used > 0 && used <= RKV_MC_MAX_GET_LINE);
        const char *pos = r.keys, *end = r.keys + r.keys_len;
        const uint8_t *k;
        uint32_t kn;
        while (rkv_mc_next_key(&pos, end, &k, &kn)) {
            char expect[16];
            snprintf(expect, sizeof expect, "key:%06zu", nkeys++);
            assert_int_equal(kn, strlen(expect));
            assert_memory_equal(k, expect, kn);
        }
        off += used;
        parts++;
        if (!r.more)
            break;
        assert_true(st.in_keys);
    }
    assert_int_equal(nkeys, want);
    assert_true(parts >= 3);
    assert_false(st.in_keys);
    assert_int_equal(rkv_mc_parse_stream(line + off, len - off, MAXV, &st, &r, &used, &need), RKV_MC_OK);
    assert_int_equal(r.cmd, RKV_MC_MN);   /* the next command is read as one */

    /* a part that ends inside a key waits for the rest */
    st = (struct rkv_mc_stream){ .in_keys = true, .cmd = RKV_MC_GET };
    assert_int_equal(rkv_mc_parse_stream("ke", 2, MAXV, &st, &r, &used, &need), RKV_MC_NEED_MORE);
    assert_int_equal(need, 3);
    assert_int_equal(rkv_mc_parse_stream("key\r\n", 5, MAXV, &st, &r, &used, &need), RKV_MC_OK);
    assert_int_equal(r.cmd, RKV_MC_GET);
    assert_false(r.more);
    assert_int_equal(r.keys_len, 3);
    /* a bad key in a later part: refused, and the connection closes */
    st = (struct rkv_mc_stream){ .in_keys = true, .cmd = RKV_MC_GET };
    memset(line, 'x', RKV_MC_MAX_GET_LINE);
    line[300] = ' ';
    assert_int_equal(rkv_mc_parse_stream(line, RKV_MC_MAX_GET_LINE, MAXV, &st, &r, &used, &need),
                     RKV_MC_CLIENT_ERROR);
    assert_true(r.close);
    assert_false(st.in_keys);
    /* ... and in the part that ends the line (values of earlier parts went out) */
    st = (struct rkv_mc_stream){ .in_keys = true, .cmd = RKV_MC_GET };
    assert_int_equal(rkv_mc_parse_stream("a b\x01c\r\n", 7, MAXV, &st, &r, &used, &need),
                     RKV_MC_CLIENT_ERROR);
    assert_true(r.close);
    assert_false(st.in_keys);
    /* no space in a whole window: a key far too long, closes */
    st = (struct rkv_mc_stream){ .in_keys = true, .cmd = RKV_MC_GET };
    memset(line, 'x', RKV_MC_MAX_GET_LINE);
    assert_int_equal(rkv_mc_parse_stream(line, RKV_MC_MAX_GET_LINE, MAXV, &st, &r, &used, &need),
                     RKV_MC_CLIENT_ERROR);
    assert_string_equal(r.error, "line too long");
    assert_true(r.close);
    /* a long line that is not a retrieval still closes */
    st = (struct rkv_mc_stream){ 0 };
    memcpy(line, "set k ", 6);
    assert_int_equal(rkv_mc_parse_stream(line, RKV_MC_MAX_GET_LINE, MAXV, &st, &r, &used, &need),
                     RKV_MC_CLIENT_ERROR);
    assert_true(r.close);
    free(line);
}

static void test_retrieval(void **state)
{
    (void)state;
    struct rkv_mc_req r;
    size_t used;
    assert_int_equal(parse("gets a bb  ccc\r\n", &r, &used), RKV_MC_OK);
    assert_int_equal(r.cmd, RKV_MC_GETS);
    const char *pos = r.keys, *end = r.keys + r.keys_len;
    const uint8_t *k;
    uint32_t kn;
    const char *want[] = { "a", "bb", "ccc" };
    for (unsigned i = 0; i < 3; i++) {
        assert_true(rkv_mc_next_key(&pos, end, &k, &kn));
        assert_int_equal(kn, strlen(want[i]));
        assert_memory_equal(k, want[i], kn);
    }
    assert_false(rkv_mc_next_key(&pos, end, &k, &kn));
    assert_int_equal(parse("gat 100 a b\r\n", &r, &used), RKV_MC_OK);
    assert_int_equal(r.exptime, 100);
    assert_int_equal(r.key_len, 1);
    assert_int_equal(parse("get\r\n", &r, &used), RKV_MC_ERROR);
    assert_int_equal(parse("gats x a\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    assert_string_equal(r.error, "invalid exptime argument");   /* memcached 1.6's answer */
    /* more keys than memcached's 24 tokens still parse */
    char line[512] = "get";
    for (int i = 0; i < 40; i++)
        snprintf(line + strlen(line), sizeof line - strlen(line), " k%d", i);
    strcat(line, "\r\n");
    assert_int_equal(parse(line, &r, &used), RKV_MC_OK);
}

static void test_other_commands(void **state)
{
    (void)state;
    struct rkv_mc_req r;
    size_t used;
    assert_int_equal(parse("delete k\r\n", &r, &used), RKV_MC_OK);
    assert_int_equal(r.cmd, RKV_MC_DELETE);
    assert_int_equal(parse("delete k noreply\r\n", &r, &used), RKV_MC_OK);
    assert_true(r.noreply);
    assert_int_equal(parse("delete k 0 noreply\r\n", &r, &used), RKV_MC_OK);
    assert_int_equal(parse("delete k 5\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    assert_int_equal(parse("incr k 18446744073709551615\r\n", &r, &used), RKV_MC_OK);
    assert_int_equal(r.delta, UINT64_MAX);
    assert_int_equal(parse("decr k -1\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    assert_string_equal(r.error, "invalid numeric delta argument");
    assert_int_equal(parse("touch k 10 noreply\r\n", &r, &used), RKV_MC_OK);
    assert_int_equal(r.cmd, RKV_MC_TOUCH);
    assert_true(r.noreply);
    assert_int_equal(parse("stats settings\r\n", &r, &used), RKV_MC_OK);
    assert_int_equal(r.arg_len, 8);
    assert_int_equal(parse("stats\r\n", &r, &used), RKV_MC_OK);
    assert_int_equal(r.arg_len, 0);
    assert_int_equal(parse("version\r\n", &r, &used), RKV_MC_OK);
    assert_int_equal(parse("verbosity 1 noreply\r\n", &r, &used), RKV_MC_OK);
    assert_true(r.noreply);
    assert_int_equal(parse("flush_all 0\r\n", &r, &used), RKV_MC_OK);
    assert_int_equal(r.cmd, RKV_MC_FLUSH_ALL);
    /* memcached's rules: up to two arguments; the first is the delay unless
     * all there is beside a final noreply (measured against 1.6.18) */
    assert_int_equal(parse("flush_all\r\n", &r, &used), RKV_MC_OK);
    assert_false(r.noreply);
    assert_int_equal(r.exptime, 0);
    assert_int_equal(parse("flush_all noreply\r\n", &r, &used), RKV_MC_OK);
    assert_true(r.noreply);
    assert_int_equal(parse("flush_all 10 noreply\r\n", &r, &used), RKV_MC_OK);
    assert_true(r.noreply);
    assert_int_equal(r.exptime, 10);
    assert_int_equal(parse("flush_all 1 2\r\n", &r, &used), RKV_MC_OK);
    assert_false(r.noreply);
    assert_int_equal(r.exptime, 1);
    assert_int_equal(parse("flush_all -1\r\n", &r, &used), RKV_MC_OK);
    assert_int_equal(r.exptime, -1);
    assert_int_equal(parse("flush_all noreply 5\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    assert_string_equal(r.error, "invalid exptime argument");
    assert_int_equal(parse("flush_all 5 noreply extra\r\n", &r, &used), RKV_MC_ERROR);
    assert_int_equal(parse("quit\r\n", &r, &used), RKV_MC_OK);
    assert_int_equal(r.cmd, RKV_MC_QUIT);
    assert_int_equal(parse("mn\r\n", &r, &used), RKV_MC_OK);
    assert_int_equal(parse("me k\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
}

/* exptime as memcached 1.6 reads it: a decimal that fits in 64 bits, its
 * low 32 bits taken as a signed number. pylibmc (libmemcached) sends a
 * negative time as its unsigned 32-bit value: "set k 0 4294967295 1" must
 * be an item expired on arrival, as memcached stores it, not an error. */
static void test_exptime(void **state)
{
    (void)state;
    static const struct { const char *tok; int64_t want; } ok[] = {
        { "0", 0 }, { "100", 100 }, { "-1", -1 }, { "+5", 5 }, { "2592001", 2592001 },
        { "4294967295", -1 }, { "4294967296", 0 }, { "2147483648", INT32_MIN },
        { "2147483647", INT32_MAX }, { "-2147483649", INT32_MAX }, { "4294967396", 100 },
        { "9223372036854775807", -1 }, { "-9223372036854775808", 0 },
    };
    static const char *const bad[] = {
        "9223372036854775808", "-9223372036854775809", "18446744073709551615",
        "99999999999999999999", "abc", "-", "+", "1x", "--1", "+-1",
    };
    struct rkv_mc_req r;
    size_t used;
    char line[128];
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        snprintf(line, sizeof line, "set k 0 %s 1\r\nx\r\n", ok[i].tok);
        assert_int_equal(parse(line, &r, &used), RKV_MC_OK);
        assert_int_equal(r.exptime, ok[i].want);
        snprintf(line, sizeof line, "touch k %s\r\n", ok[i].tok);
        assert_int_equal(parse(line, &r, &used), RKV_MC_OK);
        assert_int_equal(r.exptime, ok[i].want);
        snprintf(line, sizeof line, "gat %s k\r\n", ok[i].tok);
        assert_int_equal(parse(line, &r, &used), RKV_MC_OK);
        assert_int_equal(r.exptime, ok[i].want);
        snprintf(line, sizeof line, "mg k v T%s\r\n", ok[i].tok);
        assert_int_equal(parse(line, &r, &used), RKV_MC_OK);
        assert_int_equal(r.exptime, ok[i].want);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(line, sizeof line, "set k 0 %s 1\r\nx\r\n", bad[i]);
        assert_int_equal(parse(line, &r, &used), RKV_MC_CLIENT_ERROR);
        assert_string_equal(r.error, "bad command line format");
        assert_int_equal(r.swallow, 0);   /* memcached reads the data line as a command */
        snprintf(line, sizeof line, "touch k %s\r\n", bad[i]);
        assert_int_equal(parse(line, &r, &used), RKV_MC_CLIENT_ERROR);
        assert_string_equal(r.error, "invalid exptime argument");
        snprintf(line, sizeof line, "gat %s k\r\n", bad[i]);
        assert_int_equal(parse(line, &r, &used), RKV_MC_CLIENT_ERROR);
        assert_string_equal(r.error, "invalid exptime argument");
        snprintf(line, sizeof line, "flush_all %s\r\n", bad[i]);
        assert_int_equal(parse(line, &r, &used), RKV_MC_CLIENT_ERROR);
        assert_string_equal(r.error, "invalid exptime argument");
    }
}

/* A refused ms (a bad flag or key after a good datalen): memcached answers
 * the error and skips the data block, which is not read as a command. */
static void test_meta_set_refused_swallows(void **state)
{
    (void)state;
    struct rkv_mc_req r;
    size_t used;
    assert_int_equal(parse("ms k 5 Tabc\r\nhello\r\nmn\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    assert_int_equal(used, strlen("ms k 5 Tabc\r\n"));
    assert_int_equal(r.swallow, 7);
    assert_int_equal(parse("ms k 1 h\r\nx\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    assert_string_equal(r.error, "invalid flag");
    assert_int_equal(r.swallow, 3);
    char line[320];
    snprintf(line, sizeof line, "ms %0300d 2\r\nhi\r\n", 1);   /* key too long */
    assert_int_equal(parse(line, &r, &used), RKV_MC_CLIENT_ERROR);
    assert_int_equal(r.swallow, 4);
    /* a bad datalen leaves nothing to skip (memcached: the same) */
    assert_int_equal(parse("ms k x\r\nhi\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    assert_int_equal(r.swallow, 0);
    /* mg has no data block */
    assert_int_equal(parse("mg k Tabc\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    assert_int_equal(r.swallow, 0);
}

static void test_meta(void **state)
{
    (void)state;
    struct rkv_mc_req r;
    size_t used;
    assert_int_equal(parse("mg foo v c f k s t Oop q T30\r\n", &r, &used), RKV_MC_OK);
    assert_int_equal(r.cmd, RKV_MC_MG);
    assert_true(r.noreply);
    assert_true(r.mflags & RKV_MC_F('v'));
    assert_int_equal(r.exptime, 30);
    assert_int_equal(r.opaque_len, 2);
    assert_int_equal(r.nret, 6);
    assert_memory_equal(r.ret, "cfksto", 5);
    assert_int_equal(parse("ms foo 2 F5 T-1 C9 MA c\r\nhi\r\n", &r, &used), RKV_MC_OK);
    assert_int_equal(r.cmd, RKV_MC_MS);
    assert_int_equal(r.flags, 5);
    assert_int_equal(r.exptime, -1);
    assert_int_equal(r.cas, 9);
    assert_int_equal(r.mode, 'A');
    assert_memory_equal(r.data, "hi", 2);
    assert_int_equal(parse("ma n N0 J10 D3 MD v\r\n", &r, &used), RKV_MC_OK);
    assert_int_equal(r.initial, 10);
    assert_int_equal(r.delta, 3);
    assert_int_equal(parse("ma n\r\n", &r, &used), RKV_MC_OK);
    assert_int_equal(r.delta, 1);
    assert_int_equal(parse("md foo q Lpath\r\n", &r, &used), RKV_MC_OK);
    assert_int_equal(parse("md foo C77 k\r\n", &r, &used), RKV_MC_OK);
    assert_true(r.mflags & RKV_MC_F('C'));
    assert_int_equal(r.cas, 77);
    /* refused: unknown or unsupported flags, duplicates, bad tokens and modes */
    assert_int_equal(parse("mg foo h\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    assert_string_equal(r.error, "invalid flag");
    assert_int_equal(parse("mg foo v v\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    assert_int_equal(parse("ms foo 1 Fx\r\nx\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    assert_int_equal(parse("ms foo 1 MZ\r\nx\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    assert_int_equal(parse("ms foo\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    assert_int_equal(parse("mg foo O123456789012345678901234567890123\r\n", &r, &used),
                     RKV_MC_CLIENT_ERROR);
    assert_int_equal(parse("mg\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    /* base64 keys decode to binary */
    assert_int_equal(parse("mg AAEC b v\r\n", &r, &used), RKV_MC_OK);
    assert_int_equal(r.key_len, 3);
    assert_memory_equal(r.key, "\0\1\2", 3);
    assert_int_equal(parse("mg A*== b v\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
}

static void test_base64(void **state)
{
    (void)state;
    const char *cases[][2] = { { "", "" }, { "f", "Zg==" }, { "fo", "Zm8=" }, { "foo", "Zm9v" },
                               { "foob", "Zm9vYg==" }, { "fooba", "Zm9vYmE=" } };
    for (unsigned i = 0; i < 6; i++) {
        char enc[16];
        uint8_t dec[16];
        size_t n = rkv_mc_base64_encode((const uint8_t *)cases[i][0], strlen(cases[i][0]), enc);
        assert_int_equal(n, strlen(cases[i][1]));
        assert_memory_equal(enc, cases[i][1], n);
        if (n == 0)
            continue;
        long d = rkv_mc_base64_decode(enc, n, dec, sizeof dec);
        assert_int_equal(d, (long)strlen(cases[i][0]));
        assert_memory_equal(dec, cases[i][0], (size_t)d);
    }
    uint8_t small[2];
    assert_int_equal(rkv_mc_base64_decode("Zm9v", 4, small, sizeof small), -1);
    assert_int_equal(rkv_mc_base64_decode("Zm=v", 4, small, sizeof small), -1);
    assert_int_equal(rkv_mc_base64_decode("Zm9", 3, small, sizeof small), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_storage),
        cmocka_unit_test(test_storage_errors),
        cmocka_unit_test(test_framing),
        cmocka_unit_test(test_retrieval),
        cmocka_unit_test(test_other_commands),
        cmocka_unit_test(test_meta),
        cmocka_unit_test(test_exptime),
        cmocka_unit_test(test_long_retrieval_line),
        cmocka_unit_test(test_meta_set_refused_swallows),
        cmocka_unit_test(test_base64),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
