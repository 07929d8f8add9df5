/* test_memcache_proto.c — the memcached text protocol parser on its own:
 * every command's syntax as memcached 1.6.18 reads it (its tokenizer, its
 * number readers, its order of checks), the limits (key 250, line 2048 /
 * 65536 / 16384, value size per key), framing of partial input (need
 * more), memcached's error strings, which errors noreply silences and
 * where it hangs up, meta flags, base64 keys. */
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
    assert_int_equal(used, strlen("set k x 0 1\r\n")); /* only the line */
    assert_int_equal(parse("set k 0 0 -1\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    assert_int_equal(parse("set k 0 0 2147483646\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    assert_int_equal(parse("set k 0 0 99999999999999999999\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    assert_int_equal(parse("set k 0 0 1 2 3\r\nx\r\n", &r, &used), RKV_MC_ERROR);
    /* a word where noreply goes that is not noreply is ignored (memcached) */
    assert_int_equal(parse("set k 0 0 1 junk\r\nx\r\n", &r, &used), RKV_MC_OK);
    assert_false(r.noreply);
    assert_int_equal(parse("cas k 0 0 1 5 junk\r\nx\r\n", &r, &used), RKV_MC_OK);
    assert_int_equal(r.cas, 5);
    /* value too large: SERVER_ERROR, the data block is swallowed (a 1-byte
     * key leaves 249 bytes of its room to the value) */
    assert_int_equal(parse("set k 0 0 1273\r\n", &r, &used), RKV_MC_NEED_MORE);
    assert_int_equal(parse("set k 0 0 1274\r\n", &r, &used), RKV_MC_SERVER_ERROR);
    assert_string_equal(r.error, "object too large for cache");
    assert_int_equal(r.swallow, 1276);
    assert_false(r.close);
    /* bad data chunk: the line and its block's bytes are gone, the rest is
     * the next command; the connection lives (memcached) */
    assert_int_equal(parse("set k 0 0 1\r\nxyz\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    assert_string_equal(r.error, "bad data chunk");
    assert_int_equal(used, strlen("set k 0 0 1\r\nxyz"));
    assert_false(r.close);
    assert_false(r.noreply);
    assert_int_equal(parse("set k 0 0 1 noreply\r\nxyz\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    assert_true(r.noreply); /* silenced */
    /* key limits */
    char line[600];
    memset(line, 'a', sizeof line);
    memcpy(line, "set ", 4);
    snprintf(line + 4 + 251, sizeof line - 255, " 0 0 1\r\nx\r\n");
    assert_int_equal(parse(line, &r, &used), RKV_MC_CLIENT_ERROR);
    snprintf(line + 4 + 250, sizeof line - 254, " 0 0 1\r\nx\r\n");
    assert_int_equal(parse(line, &r, &used), RKV_MC_OK);
    assert_int_equal(r.key_len, 250);
    /* a key is any bytes but space: control characters too (memcached) */
    assert_int_equal(parse("set k\x01\t\ry\x7f 0 0 1\r\nx\r\n", &r, &used), RKV_MC_OK);
    assert_int_equal(r.key_len, 6);
    /* the key is checked before the numbers, noreply before both */
    snprintf(line + 4 + 251, sizeof line - 255, " x 0 1 noreply\r\nx\r\n");
    assert_int_equal(parse(line, &r, &used), RKV_MC_CLIENT_ERROR);
    assert_string_equal(r.error, "bad command line format");
    assert_true(r.noreply);
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
    /* more than 2048 bytes without a newline: memcached hangs up, with no
     * answer */
    static char big[RKV_MC_MAX_GET_LINE + 10]; /* static: gcc -O2 with ASan misjudges a malloc'd one */
    memset(big, 'x', sizeof big);
    assert_int_equal(rkv_mc_parse(big, RKV_MC_MAX_LINE + 1, MAXV, &r, &used, &need), RKV_MC_HANGUP);
    assert_true(r.close);
    assert_int_equal(rkv_mc_parse(big, RKV_MC_MAX_LINE, MAXV, &r, &used, &need), RKV_MC_NEED_MORE);
    /* get and gets lines may be longer (many keys), after at most 100
     * spaces; not gat, gats or bget */
    memcpy(big, "get ", 4);
    assert_int_equal(rkv_mc_parse(big, RKV_MC_MAX_LINE + 100, MAXV, &r, &used, &need),
                     RKV_MC_NEED_MORE);
    assert_int_equal(rkv_mc_parse(big, RKV_MC_MAX_GET_LINE, MAXV, &r, &used, &need), RKV_MC_HANGUP);
    memset(big, ' ', 100);
    memcpy(big + 100, "gets ", 5);
    assert_int_equal(rkv_mc_parse(big, RKV_MC_MAX_LINE + 100, MAXV, &r, &used, &need),
                     RKV_MC_NEED_MORE);
    memset(big, ' ', 101);
    assert_int_equal(rkv_mc_parse(big, RKV_MC_MAX_LINE + 100, MAXV, &r, &used, &need), RKV_MC_HANGUP);
    memcpy(big, "gat 10 ", 7);
    assert_int_equal(rkv_mc_parse(big, RKV_MC_MAX_LINE + 100, MAXV, &r, &used, &need), RKV_MC_HANGUP);
    /* a line whose end has come is served however long, up to memcached's
     * 16 KiB read buffer */
    memset(big, ' ', 16386);
    memcpy(big, "set k 0 0 1", 11);
    memcpy(big + 3000, "\r\nx\r\n", 5);
    assert_int_equal(rkv_mc_parse(big, 3005, MAXV, &r, &used, &need), RKV_MC_OK);
    assert_int_equal(used, 3005);
    memset(big + 3000, ' ', 5);
    memcpy(big + 16382, "\nx\r\n", 4); /* a line of 16383 bytes */
    assert_int_equal(rkv_mc_parse(big, 16386, MAXV, &r, &used, &need), RKV_MC_OK);
    assert_int_equal(used, 16386);
    memcpy(big + 16382, " \r\nx\r\n", 6); /* of 16385 */
    assert_int_equal(rkv_mc_parse(big, 16388, MAXV, &r, &used, &need), RKV_MC_HANGUP);
    assert_int_equal(parse("\r\n", &r, &used), RKV_MC_ERROR);
    assert_int_equal(parse("bogus a b\r\n", &r, &used), RKV_MC_ERROR);
    assert_int_equal(used, strlen("bogus a b\r\n"));
    /* an HTTP request line: hung up on (its last token starts HTTP/), but
     * not under a command letter memcached checks first */
    assert_int_equal(parse("GET / HTTP/1.0\r\n", &r, &used), RKV_MC_HANGUP);
    assert_true(r.close);
    assert_int_equal(parse("HTTP/1.1\r\n", &r, &used), RKV_MC_HANGUP);
    assert_int_equal(parse("sx HTTP/1.1\r\n", &r, &used), RKV_MC_ERROR);
    assert_int_equal(parse("mget HTTP/1.1\r\n", &r, &used), RKV_MC_HANGUP);
    /* a NUL ends the line's text (memcached reads a C string); the line
     * still ends at its newline */
    assert_int_equal(rkv_mc_parse("get a\0 b\r\nmn\r\n", 13, MAXV, &r, &used, &need), RKV_MC_OK);
    assert_int_equal(used, 10);
    assert_int_equal(r.keys_len, 1);
    assert_int_equal(rkv_mc_parse("\0get a\r\n", 9, MAXV, &r, &used, &need), RKV_MC_ERROR);
    /* a one-letter command, and tokens past 23 */
    assert_int_equal(parse("g a\r\n", &r, &used), RKV_MC_ERROR);
    assert_int_equal(parse("set a 0 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20\r\n", &r,
                           &used),
                     RKV_MC_ERROR);
}

/* Commands memcached takes that rkv refused, and answers it gives. */
static void test_memcached_commands(void **state)
{
    (void)state;
    struct rkv_mc_req r;
    size_t used;
    /* version, quit and mn take any arguments */
    assert_int_equal(parse("version foo bar\r\n", &r, &used), RKV_MC_OK);
    assert_int_equal(r.cmd, RKV_MC_VERSION);
    assert_int_equal(parse("version noreply\r\n", &r, &used), RKV_MC_OK);
    assert_int_equal(parse("quit foo\r\n", &r, &used), RKV_MC_OK);
    assert_int_equal(r.cmd, RKV_MC_QUIT);
    assert_int_equal(parse("mn foo bar\r\n", &r, &used), RKV_MC_OK);
    assert_int_equal(r.cmd, RKV_MC_MN);
    assert_int_equal(parse("mx\r\n", &r, &used), RKV_MC_ERROR);
    assert_int_equal(parse("shutdown graceful\r\n", &r, &used), RKV_MC_OK);
    assert_int_equal(r.cmd, RKV_MC_SHUTDOWN);
    /* verbosity checks its level; the noreply silences the error */
    assert_int_equal(parse("verbosity 1 foo\r\n", &r, &used), RKV_MC_OK);
    assert_int_equal(parse("verbosity invalid\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    assert_string_equal(r.error, "bad command line format");
    assert_false(r.noreply);
    assert_int_equal(parse("verbosity noreply\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    assert_true(r.noreply);
    assert_int_equal(parse("verbosity\r\n", &r, &used), RKV_MC_ERROR);
    /* bget is a get */
    assert_int_equal(parse("bget a b\r\n", &r, &used), RKV_MC_OK);
    assert_int_equal(r.cmd, RKV_MC_GET);
    /* incr/decr/touch: a fourth word not noreply is ignored; noreply in the
     * number's place makes the number bad and the error silent */
    assert_int_equal(parse("incr k 1 foo\r\n", &r, &used), RKV_MC_OK);
    assert_false(r.noreply);
    assert_int_equal(parse("touch k 10 foo\r\n", &r, &used), RKV_MC_OK);
    assert_int_equal(parse("incr k noreply\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    assert_true(r.noreply);
    /* delete's errors are silent under a noreply too */
    assert_int_equal(parse("delete k 10 noreply\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    assert_true(r.noreply);
    assert_int_equal(parse("delete k noreply 0\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    assert_false(r.noreply);
    assert_int_equal(parse("delete k 0 0\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    assert_int_equal(parse("delete\r\n", &r, &used), RKV_MC_ERROR);
    /* flush_all's */
    assert_int_equal(parse("flush_all noreply noreply\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    assert_true(r.noreply);
}

/* Numbers as memcached's safe_strto* read them. */
static void test_numbers(void **state)
{
    (void)state;
    struct rkv_mc_req r;
    size_t used;
    /* flags: strtoul, then 32 bits; a negative one is refused, "-0" is 0 */
    static const struct {
        const char *tok;
        uint32_t want;
    } flags_ok[] = {
        { "4294967296", 0 },
        { "4294967297", 1 },
        { "-0", 0 },
        { "+7", 7 },
        { "007", 7 },
        { "\t5", 5 },
        { "18446744073709551615", UINT32_MAX },
    };
    char line[128];
    for (size_t i = 0; i < sizeof flags_ok / sizeof flags_ok[0]; i++) {
        snprintf(line, sizeof line, "set k %s 0 1\r\nx\r\n", flags_ok[i].tok);
        assert_int_equal(parse(line, &r, &used), RKV_MC_OK);
        assert_int_equal(r.flags, flags_ok[i].want);
    }
    static const char *const flags_bad[] = { "-1", "abc", "1x", "18446744073709551616", "" };
    for (size_t i = 0; i < sizeof flags_bad / sizeof flags_bad[0]; i++) {
        snprintf(line, sizeof line, "set k %s 0 1 2\r\nx\r\n", flags_bad[i]);
        assert_int_not_equal(parse(line, &r, &used), RKV_MC_OK);
    }
    /* the length: strtol, then 32 bits as signed */
    assert_int_equal(parse("set k 0 0 4294967297\r\nx\r\n", &r, &used), RKV_MC_OK);
    assert_int_equal(r.bytes, 1);
    assert_int_equal(parse("set k 0 0 +1\r\nx\r\n", &r, &used), RKV_MC_OK);
    assert_int_equal(parse("set k 0 0 \v1\r\nx\r\n", &r, &used), RKV_MC_OK);
    assert_int_equal(parse("set k 0 0 4294967295\r\nx\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    /* a delta: strtoull; "-0" is 0, and a negative one that wraps to a
     * number without its top bit passes (memcached's check) */
    assert_int_equal(parse("incr k -0\r\n", &r, &used), RKV_MC_OK);
    assert_int_equal(r.delta, 0);
    assert_int_equal(parse("incr k -18446744073709551615\r\n", &r, &used), RKV_MC_OK);
    assert_int_equal(r.delta, 1);
    assert_int_equal(parse("incr k -9223372036854775808\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    assert_int_equal(parse("incr k 18446744073709551616\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    assert_int_equal(parse("incr k 0000000000000000000000000001\r\n", &r, &used), RKV_MC_OK);
    assert_int_equal(r.delta, 1);
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
    len = (size_t)sprintf(line, "gets");
    unsigned want = 0;
    while (len < total)
        len += (size_t)sprintf(line + len, " key:%06u", want++);
    len += (size_t)sprintf(line + len, "\r\nmn\r\n");
    /* the plain parser takes it whole once its end has come, and hangs up
     * on 64 KiB of it without an end */
    assert_int_equal(rkv_mc_parse(line, len, MAXV, &r, &used, &need), RKV_MC_OK);
    assert_int_equal(used, len - 4);
    assert_int_equal(rkv_mc_parse(line, RKV_MC_MAX_GET_LINE, MAXV, &r, &used, &need), RKV_MC_HANGUP);
    assert_true(r.close);
    /* the stream parser, given what a connection holds while the line is
     * still arriving (64 KiB at a time), serves it in parts */
    for (;;) {
        size_t have = len - off < RKV_MC_MAX_GET_LINE ? len - off : RKV_MC_MAX_GET_LINE;
        enum rkv_mc_result res = rkv_mc_parse_stream(line + off, have, MAXV, &st, &r, &used, &need);
        assert_int_equal(res, RKV_MC_OK);
        assert_int_equal(r.cmd, RKV_MC_GETS);
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
    assert_int_equal(rkv_mc_parse_stream(line + off, len - off, MAXV, &st, &r, &used, &need),
                     RKV_MC_OK);
    assert_int_equal(r.cmd, RKV_MC_MN); /* the next command is read as one */

    /* a part that ends inside a key waits for the rest */
    st = (struct rkv_mc_stream){ .in_keys = true, .cmd = RKV_MC_GET };
    assert_int_equal(rkv_mc_parse_stream("ke", 2, MAXV, &st, &r, &used, &need), RKV_MC_NEED_MORE);
    assert_int_equal(need, 3);
    assert_int_equal(rkv_mc_parse_stream("key\r\n", 5, MAXV, &st, &r, &used, &need), RKV_MC_OK);
    assert_int_equal(r.cmd, RKV_MC_GET);
    assert_false(r.more);
    assert_int_equal(r.keys_len, 3);
    /* a long key in a later part is the server's to refuse (memcached
     * answers the keys before it first): the part has it */
    st = (struct rkv_mc_stream){ .in_keys = true, .cmd = RKV_MC_GET };
    memset(line, 'x', RKV_MC_MAX_GET_LINE);
    line[300] = ' ';
    assert_int_equal(rkv_mc_parse_stream(line, RKV_MC_MAX_GET_LINE, MAXV, &st, &r, &used, &need),
                     RKV_MC_OK);
    assert_int_equal(r.keys_len, 300);
    assert_true(st.in_keys);
    /* the part that ends the line: any bytes but space are a key */
    st = (struct rkv_mc_stream){ .in_keys = true, .cmd = RKV_MC_GET };
    assert_int_equal(rkv_mc_parse_stream("a b\x01c\r\n", 7, MAXV, &st, &r, &used, &need), RKV_MC_OK);
    assert_false(st.in_keys);
    /* no space in a whole window: a key far too long, hung up on */
    st = (struct rkv_mc_stream){ .in_keys = true, .cmd = RKV_MC_GET };
    memset(line, 'x', RKV_MC_MAX_GET_LINE);
    assert_int_equal(rkv_mc_parse_stream(line, RKV_MC_MAX_GET_LINE, MAXV, &st, &r, &used, &need),
                     RKV_MC_HANGUP);
    assert_true(r.close);
    assert_false(st.in_keys);
    /* a long line that is not a get or gets is hung up on */
    st = (struct rkv_mc_stream){ 0 };
    memcpy(line, "set k ", 6);
    assert_int_equal(rkv_mc_parse_stream(line, RKV_MC_MAX_GET_LINE, MAXV, &st, &r, &used, &need),
                     RKV_MC_HANGUP);
    assert_true(r.close);
    free(line);
}

/* A retrieval stopped before a key (its answer filled the output): the rest
 * of its line is read as a part of the same command, gat's exptime kept. */
static void test_resumed_retrieval(void **state)
{
    (void)state;
    struct rkv_mc_stream st = { 0 };
    struct rkv_mc_req r;
    size_t used, need;
    const char *in = "gat 100 a b c\r\nmn\r\n";
    assert_int_equal(rkv_mc_parse_stream(in, strlen(in), MAXV, &st, &r, &used, &need), RKV_MC_OK);
    assert_int_equal(r.cmd, RKV_MC_GAT);
    assert_false(r.parted);
    const char *rest = strstr(in, " b");
    rkv_mc_stream_resume(&st, &r);
    assert_int_equal(rkv_mc_parse_stream(rest, strlen(rest), MAXV, &st, &r, &used, &need), RKV_MC_OK);
    assert_int_equal(r.cmd, RKV_MC_GAT);
    assert_int_equal(r.exptime, 100);
    assert_true(r.parted);
    assert_false(r.more);
    assert_int_equal(r.keys_len, 4);
    assert_memory_equal(r.keys, " b c", 4);
    assert_int_equal(used, strlen(" b c\r\n"));
    assert_false(st.in_keys);
    assert_int_equal(rkv_mc_parse_stream(rest + used, strlen(rest + used), MAXV, &st, &r, &used,
                                         &need),
                     RKV_MC_OK);
    assert_int_equal(r.cmd, RKV_MC_MN);
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
    assert_string_equal(r.error, "invalid exptime argument"); /* memcached 1.6's answer */
    /* gat with an exptime and no key: memcached answers END */
    assert_int_equal(parse("gat 10\r\n", &r, &used), RKV_MC_OK);
    assert_int_equal(r.keys_len, 0);
    /* a key over 250 bytes is refused when served, not here */
    char lk[300] = "get a ";
    memset(lk + 6, 'k', 251);
    strcpy(lk + 257, "\r\n");
    assert_int_equal(parse(lk, &r, &used), RKV_MC_OK);
    assert_int_equal(r.keys_len, 253);
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
    assert_false(r.noreply);
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
    assert_int_equal(parse("me\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    assert_string_equal(r.error, "bad command line format");
}

/* exptime as memcached 1.6 reads it: a decimal that fits in 64 bits, its
 * low 32 bits taken as a signed number. pylibmc (libmemcached) sends a
 * negative time as its unsigned 32-bit value: "set k 0 4294967295 1" must
 * be an item expired on arrival, as memcached stores it, not an error. */
static void test_exptime(void **state)
{
    (void)state;
    static const struct {
        const char *tok;
        int64_t want;
    } ok[] = {
        { "0", 0 },
        { "100", 100 },
        { "-1", -1 },
        { "+5", 5 },
        { "2592001", 2592001 },
        { "4294967295", -1 },
        { "4294967296", 0 },
        { "2147483648", INT32_MIN },
        { "2147483647", INT32_MAX },
        { "-2147483649", INT32_MAX },
        { "4294967396", 100 },
        { "9223372036854775807", -1 },
        { "-9223372036854775808", 0 },
    };
    static const char *const bad[] = {
        "9223372036854775808",
        "-9223372036854775809",
        "18446744073709551615",
        "99999999999999999999",
        "abc",
        "-",
        "+",
        "1x",
        "--1",
        "+-1",
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
        assert_int_equal(r.swallow, 0); /* memcached reads the data line as a command */
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
    assert_int_equal(parse("ms k 1 x\r\nx\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    assert_string_equal(r.error, "invalid flag");
    assert_int_equal(r.swallow, 3);
    assert_int_equal(parse("ms k 1 MZ q\r\nx\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    assert_string_equal(r.error, "invalid mode for ms M token");
    assert_false(r.noreply); /* meta errors are answered, q or not */
    assert_int_equal(r.swallow, 3);
    /* memcached refuses a key over 250 bytes, a missing length, more than
     * 19 tokens and a bad length before it knows the block: then the block
     * is read as a command */
    char line[320];
    snprintf(line, sizeof line, "ms %0300d 2\r\nhi\r\n", 1);
    assert_int_equal(parse(line, &r, &used), RKV_MC_CLIENT_ERROR);
    assert_int_equal(r.swallow, 0);
    assert_int_equal(parse("ms k\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    assert_int_equal(parse("ms k 2 b c f k s t v u q P L O T1 F1 C1 M1 J1\r\nhi\r\n", &r, &used),
                     RKV_MC_CLIENT_ERROR);
    assert_string_equal(r.error, "options flags too long");
    assert_int_equal(r.swallow, 0);
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
    assert_int_equal(r.nret, 9); /* every flag, in request order */
    assert_memory_equal(r.ret, "vcfkstOqT", 9);
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
    /* every command takes every flag memcached knows, and ignores those it
     * has no use for; a token after a flag letter is ignored */
    assert_int_equal(parse("mg foo D5 J1 M+ F1 C1 P L u I kjunk\r\n", &r, &used), RKV_MC_OK);
    assert_int_equal(parse("ma n s f v1\r\n", &r, &used), RKV_MC_OK);
    assert_int_equal(parse("md foo T5 v s F1 h l R1\r\n", &r, &used), RKV_MC_OK);
    assert_int_equal(parse("ma n I R5 h\r\n", &r, &used), RKV_MC_OK);
    /* refused: unknown flags, duplicates (by first letter; a letter past
     * ASCII reads as one), bad tokens, modes; each command's strings */
    assert_int_equal(parse("mg foo x\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    assert_string_equal(r.error, "invalid flag");
    assert_int_equal(parse("mg foo E\r\n", &r, &used), RKV_MC_CLIENT_ERROR); /* not in 1.6.18 */
    assert_int_equal(parse("mg foo v vv\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    assert_string_equal(r.error, "duplicate flag");
    assert_int_equal(parse("mg foo \xc3\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    assert_string_equal(r.error, "duplicate flag");
    assert_int_equal(parse("mg foo Tx\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    assert_string_equal(r.error, "bad token in command line format");
    assert_int_equal(parse("mg foo Fx\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    assert_string_equal(r.error, "bad command line format"); /* F names no reason */
    assert_int_equal(parse("mg foo MII\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    assert_string_equal(r.error, "incorrect length for M token");
    assert_int_equal(parse("mg foo Jx\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    assert_string_equal(r.error, "invalid numeric initial value");
    assert_int_equal(parse("mg foo Dx\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    assert_string_equal(r.error, "invalid numeric delta value");
    assert_int_equal(parse("mg foo Tx Dx\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    assert_string_equal(r.error, "invalid numeric delta value"); /* the last one */
    assert_int_equal(parse("md foo Tx\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    assert_string_equal(r.error, "invalid or duplicate flag");
    assert_int_equal(parse("ma foo x\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    assert_string_equal(r.error, "invalid or duplicate flag");
    assert_int_equal(parse("ma foo MX\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    assert_string_equal(r.error, "invalid mode for ma M token");
    assert_int_equal(parse("ma foo Md\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    assert_int_equal(parse("ms foo 1 Fx\r\nx\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    assert_int_equal(parse("ms foo 1 Ms\r\nx\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    assert_int_equal(parse("ms foo\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    /* 19 tokens are the most */
    assert_int_equal(parse("mg k I c f k s t v u q P L O T1 F1 C1 M1 J1\r\n", &r, &used), RKV_MC_OK);
    assert_int_equal(parse("mg k I c f k s t v u q P L O T1 F1 C1 M1 J1 D1\r\n", &r, &used),
                     RKV_MC_CLIENT_ERROR);
    assert_string_equal(r.error, "options flags are too long");
    assert_int_equal(parse("md k I c f k s t v u q P L O T1 F1 C1 M1 J1 D1\r\n", &r, &used),
                     RKV_MC_CLIENT_ERROR);
    assert_string_equal(r.error, "options flags too long");
    /* an opaque of 31 bytes is the longest: md refuses a longer one at
     * once, mg and ma when they answer (after acting, as memcached) */
    assert_int_equal(parse("mg foo O1234567890123456789012345678901\r\n", &r, &used), RKV_MC_OK);
    assert_false(r.opaque_too_long);
    assert_int_equal(parse("mg foo O12345678901234567890123456789012\r\n", &r, &used), RKV_MC_OK);
    assert_true(r.opaque_too_long);
    assert_int_equal(parse("md foo O12345678901234567890123456789012\r\n", &r, &used),
                     RKV_MC_CLIENT_ERROR);
    assert_string_equal(r.error, "opaque token too long");
    /* meta commands need a key; errors are answered, q or not */
    assert_int_equal(parse("mg\r\n", &r, &used), RKV_MC_ERROR);
    assert_int_equal(parse("ma\r\n", &r, &used), RKV_MC_ERROR);
    assert_int_equal(parse("mg foo q x\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    assert_false(r.noreply);
    /* herd protection: N, R, h, l on mg, I on ms and md; N and R read as
     * exptimes (a bad one refused) */
    assert_int_equal(parse("mg foo h l\r\n", &r, &used), RKV_MC_OK);
    assert_true(r.mflags & RKV_MC_F('h'));
    assert_true(r.mflags & RKV_MC_F('l'));
    assert_int_equal(parse("mg foo N30 R-5\r\n", &r, &used), RKV_MC_OK);
    assert_int_equal(r.vivify_ttl, 30);
    assert_int_equal(r.recache_ttl, -5);
    assert_int_equal(parse("mg foo R4294967297\r\n", &r, &used), RKV_MC_OK);
    assert_int_equal(r.recache_ttl, 1); /* memcached's 32 bits */
    assert_int_equal(parse("mg foo Rx\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    assert_string_equal(r.error, "bad token in command line format");
    assert_int_equal(parse("mg foo N\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    assert_string_equal(r.error, "bad token in command line format");
    assert_int_equal(parse("md foo I T30 q\r\n", &r, &used), RKV_MC_OK);
    assert_true(r.mflags & RKV_MC_F('I'));
    assert_true(r.noreply);
    assert_int_equal(parse("ms foo 1 I C5\r\nx\r\n", &r, &used), RKV_MC_OK);
    assert_true(r.mflags & RKV_MC_F('I'));
    assert_int_equal(r.swallow, 0);
    /* base64 keys decode to binary */
    assert_int_equal(parse("mg AAEC b v\r\n", &r, &used), RKV_MC_OK);
    assert_int_equal(r.key_len, 3);
    assert_memory_equal(r.key, "\0\1\2", 3);
    assert_int_equal(parse("mg A*== b v\r\n", &r, &used), RKV_MC_CLIENT_ERROR);
    assert_string_equal(r.error, "error decoding key");
}

static void test_base64(void **state)
{
    (void)state;
    const char *cases[][2] = { { "", "" },        { "f", "Zg==" },        { "fo", "Zm8=" },
                               { "foo", "Zm9v" }, { "foob", "Zm9vYg==" }, { "fooba", "Zm9vYmE=" } };
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
    uint8_t small[2], dec[16];
    assert_int_equal(rkv_mc_base64_decode("Zm9v", 4, small, sizeof small), -1);
    assert_int_equal(rkv_mc_base64_decode("Zm9", 3, small, sizeof small), -1);
    /* as memcached decodes: characters outside the alphabet are skipped, the
     * first padded quad ends it, three pads or none at all is an error */
    assert_int_equal(rkv_mc_base64_decode("Zm*9v", 5, dec, sizeof dec), 3);
    assert_memory_equal(dec, "foo", 3);
    assert_int_equal(rkv_mc_base64_decode("Zg==Zm9v", 8, dec, sizeof dec), 1);
    assert_memory_equal(dec, "f", 1);
    assert_int_equal(rkv_mc_base64_decode("Zm=v", 4, dec, sizeof dec), 2);
    assert_int_equal(rkv_mc_base64_decode("Z===", 4, dec, sizeof dec), -1);
    assert_int_equal(rkv_mc_base64_decode("====", 4, dec, sizeof dec), -1);
    assert_int_equal(rkv_mc_base64_decode("!!!!", 4, dec, sizeof dec), -1);
}

/* The largest data block: memcached's item limit per key and flags, within
 * the table's room for the key. */
static void test_value_limit(void **state)
{
    (void)state;
    assert_int_equal(rkv_mc_max_value(1048286, 1, 0), (1u << 20) - 60);
    assert_int_equal(rkv_mc_max_value(1048286, 1, 9), (1u << 20) - 64);
    assert_int_equal(rkv_mc_max_value(1048286, 250, 0), (1u << 20) - 309);
    assert_int_equal(rkv_mc_max_value(1000, 1, 0), 1000 + 249); /* a smaller table */
    struct rkv_mc_req r;
    size_t used, need;
    char line[64];
    snprintf(line, sizeof line, "set k 0 0 %u\r\n", (1u << 20) - 60);
    assert_int_equal(rkv_mc_parse(line, strlen(line), 1048286, &r, &used, &need), RKV_MC_NEED_MORE);
    snprintf(line, sizeof line, "set k 0 0 %u\r\n", (1u << 20) - 59);
    assert_int_equal(rkv_mc_parse(line, strlen(line), 1048286, &r, &used, &need),
                     RKV_MC_SERVER_ERROR);
    snprintf(line, sizeof line, "ms k %u F1 q\r\n", (1u << 20) - 63);
    assert_int_equal(rkv_mc_parse(line, strlen(line), 1048286, &r, &used, &need),
                     RKV_MC_SERVER_ERROR);
    assert_false(r.noreply); /* ms answers it, q or not */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_storage),
        cmocka_unit_test(test_storage_errors),
        cmocka_unit_test(test_framing),
        cmocka_unit_test(test_memcached_commands),
        cmocka_unit_test(test_numbers),
        cmocka_unit_test(test_retrieval),
        cmocka_unit_test(test_other_commands),
        cmocka_unit_test(test_meta),
        cmocka_unit_test(test_exptime),
        cmocka_unit_test(test_long_retrieval_line),
        cmocka_unit_test(test_resumed_retrieval),
        cmocka_unit_test(test_meta_set_refused_swallows),
        cmocka_unit_test(test_base64),
        cmocka_unit_test(test_value_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
