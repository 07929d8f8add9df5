/* memcache_proto.h — the memcached text protocol: framing and parsing.
 *
 * Pure functions over a byte buffer (no I/O, no table, no allocation), so
 * the parser is unit-tested and fuzzed on its own. rkv_mc_parse() takes the
 * unconsumed input of one connection and returns the first command in it:
 * either complete (command line plus, for storage commands, the data block
 * and its "\r\n"), or "need more bytes", or an error that says what to
 * answer and whether memcached would close the connection. The rules are
 * memcached 1.6.18's, as its proto_text.c applies them (tests/mc_diff.c
 * checks them against the real one): a line ends at "\n" (one "\r" before
 * it dropped) and at a NUL; tokens are separated by spaces, 23 of them at
 * most (a retrieval line's further keys follow); a key is 1..250 bytes of
 * anything but space; numbers are read with strtol/strtoul/strtoull and
 * memcached's checks around them; errors come in memcached's order with
 * its strings, and a classic command's "noreply" silences its errors too.
 * A line with no "\n" in its first RKV_MC_MAX_LINE bytes is hung up on,
 * unless it is a get/gets line (many keys): that one is served in parts by
 * rkv_mc_parse_stream() once RKV_MC_MAX_GET_LINE bytes hold no end of line,
 * as memcached serves multigets of any length (libmemcached sends one
 * "get" line for all the keys of an mget). The binary protocol is not
 * spoken.
 */
#ifndef RKV_MEMCACHE_PROTO_H
#define RKV_MEMCACHE_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RKV_MC_MAX_KEY        250u    /* memcached's KEY_MAX_LENGTH */
#define RKV_MC_MAX_LINE       2048u   /* bytes without "\n" after which memcached hangs up */
#define RKV_MC_MAX_GET_LINE   65536u  /* a get/gets line (many keys) is served in parts of this */
#define RKV_MC_READ_BUFFER    16384u  /* memcached's read buffer: what it reads at a time */
#define RKV_MC_MAX_OPAQUE     31u     /* meta O(token): memcached takes 32 bytes with the O */
#define RKV_MC_MAX_META_FLAGS 24u     /* return flags echoed per meta command */
#define RKV_MC_REL_EXPTIME    2592000 /* exptime above this is a unix time (30 days) */

enum rkv_mc_cmd {
    RKV_MC_GET,
    RKV_MC_GETS,
    RKV_MC_GAT,
    RKV_MC_GATS,
    RKV_MC_TOUCH,
    RKV_MC_SET,
    RKV_MC_ADD,
    RKV_MC_REPLACE,
    RKV_MC_APPEND,
    RKV_MC_PREPEND,
    RKV_MC_CAS,
    RKV_MC_DELETE,
    RKV_MC_INCR,
    RKV_MC_DECR,
    RKV_MC_MG,
    RKV_MC_MS,
    RKV_MC_MD,
    RKV_MC_MA,
    RKV_MC_MN,
    RKV_MC_ME,
    RKV_MC_STATS,
    RKV_MC_VERSION,
    RKV_MC_VERBOSITY,
    RKV_MC_FLUSH_ALL,
    RKV_MC_QUIT,
    RKV_MC_SHUTDOWN,
    RKV_MC_CMD_COUNT
};

enum rkv_mc_result {
    RKV_MC_NEED_MORE = 0, /* no complete command yet; *need says how many bytes one takes */
    RKV_MC_OK,            /* a command in *req, *consumed bytes long */
    RKV_MC_ERROR,         /* answer "ERROR" (unknown command) */
    RKV_MC_CLIENT_ERROR,  /* answer "CLIENT_ERROR <req->error>" */
    RKV_MC_SERVER_ERROR,  /* answer "SERVER_ERROR <req->error>" */
    RKV_MC_HANGUP, /* close without an answer (memcached: an HTTP request, a line too long) */
};
/* An ERROR, CLIENT_ERROR or SERVER_ERROR with req->noreply set is not
 * answered: a classic command's trailing "noreply" silences its errors. */

/* Meta flags, one bit per letter: RKV_MC_F('v'). */
#define RKV_MC_F(ch) (1ull << ((ch) >= 'a' ? (ch) - 'a' + 26 : (ch) - 'A'))

/* One parsed command. Pointers point into the input buffer (or, for a
 * base64 key, into keybuf) and stay valid until that input is consumed. */
struct rkv_mc_req {
    enum rkv_mc_cmd cmd;
    const uint8_t *key; /* the (first) key */
    uint32_t key_len;
    const char *keys;    /* get/gets/gat/gats: the keys, space-separated (rkv_mc_next_key); */
    size_t keys_len;     /* a key may be over 250 bytes: memcached refuses it when it gets to it */
    uint32_t flags;      /* storage: client flags; meta: F(token) */
    int64_t exptime;     /* storage, touch, gat: memcached exptime; meta: T(token) */
    uint64_t cas;        /* cas: the unique; meta: C(token) */
    uint64_t delta;      /* incr/decr; meta ma: D(token) (default 1) */
    uint32_t bytes;      /* storage: data block length */
    const uint8_t *data; /* storage: the data block (bytes long) */
    bool noreply;        /* classic "noreply" (its errors too); meta q */
    const char *arg;     /* stats/verbosity/flush_all: the rest of the line (may be "") */
    size_t arg_len;
    /* meta commands */
    uint64_t mflags;                 /* RKV_MC_F(letter) for each flag given */
    char ret[RKV_MC_MAX_META_FLAGS]; /* every flag's letter, in request order (answers follow it) */
    unsigned nret;
    const char *opaque; /* O(token) */
    uint32_t opaque_len;
    bool opaque_too_long; /* mg, ma: an O over 31 bytes, refused as memcached does: after the
                             * command acted, when it gets to the flag in its answer */
    char mode;            /* M(token): ms E/A/P/R/S, ma I/+/D/- (0 = default) */
    int64_t vivify_ttl;   /* N(token) */
    int64_t recache_ttl;  /* mg R(token): win the recache below this remaining TTL */
    uint64_t initial;     /* ma J(token) */
    uint8_t keybuf[RKV_MC_MAX_KEY]; /* the decoded key of a base64 (b) meta key */
    /* errors */
    const char *error; /* reason after CLIENT_ERROR / SERVER_ERROR */
    bool close;        /* close the connection after answering (memcached does) */
    uint64_t swallow;  /* bytes after *consumed to discard unseen (a refused data block) */
    bool parted;       /* retrieval: a part of a line too long for one (rkv_mc_parse_stream) */
    bool more;         /* ... and not its last: more keys follow (no END yet) */
};

/* A connection's place inside a retrieval line it answers in parts: one
 * longer than RKV_MC_MAX_GET_LINE (rkv_mc_parse_stream), or one whose
 * answer outgrew the output buffer (rkv_mc_stream_resume);
 * zero-initialised = not in one. */
struct rkv_mc_stream {
    bool in_keys;        /* the input continues a retrieval line's key list */
    enum rkv_mc_cmd cmd; /* its command: get, gets, gat or gats */
    int64_t exptime;     /* gat, gats: the line's exptime */
};

/* Parse the first command of in[0..len). max_value: the table's
 * max_value_len, the largest value for a key of RKV_MC_MAX_KEY bytes
 * (rkv_mc_max_value gives a data block's limit). On
 * RKV_MC_NEED_MORE, *need is the input length that would complete it (the
 * caller buffers at least that much). On every other result *consumed bytes
 * are done with (the whole command, or the line in error). */
enum rkv_mc_result rkv_mc_parse(const char *in, size_t len, uint32_t max_value,
                                struct rkv_mc_req *req, size_t *consumed, size_t *need);

/* rkv_mc_parse() for a connection's stream: a get/gets line with no end
 * within RKV_MC_MAX_GET_LINE bytes is returned in parts, each RKV_MC_OK
 * with the complete keys so far and req->more set (answer them, no END);
 * *st remembers the command until the part that ends the line (more
 * false). A part with no complete key in RKV_MC_MAX_GET_LINE bytes (a key
 * far over 250 bytes) is hung up on. rkv_mc_parse() hangs up on such a
 * line at once. */
enum rkv_mc_result rkv_mc_parse_stream(const char *in, size_t len, uint32_t max_value,
                                       struct rkv_mc_stream *st, struct rkv_mc_req *req,
                                       size_t *consumed, size_t *need);

/* The answer to retrieval command r stopped before a key (the output was
 * full) and the caller consumed its input up to that key: the input goes on
 * with the rest of r's key list, a part of r (req->parted) for
 * rkv_mc_parse_stream to return. */
void rkv_mc_stream_resume(struct rkv_mc_stream *st, const struct rkv_mc_req *r);

/* The largest data block a key of key_len bytes with these client flags
 * may carry: memcached's (its item, with header, CAS, key and "\r\n",
 * within item_size_max, 1 MiB; 4 bytes less when the flags are not 0),
 * and within the table's: max_value for the longest key, a shorter key
 * leaving its room to the value. Larger ones get SERVER_ERROR and are
 * swallowed. */
uint32_t rkv_mc_max_value(uint32_t max_value, uint32_t key_len, uint32_t flags);

/* The next key of a retrieval command's key list; false at the end. */
bool rkv_mc_next_key(const char **pos, const char *end, const uint8_t **key, uint32_t *key_len);

/* Standard base64 (with padding) of n bytes into out (4 * ceil(n / 3) bytes). */
size_t rkv_mc_base64_encode(const uint8_t *in, size_t n, char *out);
/* Decode as memcached does (characters outside the alphabet are skipped,
 * the first padded quad ends it); returns the length, or -1 on bad input
 * (or none: memcached refuses an empty key) or more than cap bytes. */
long rkv_mc_base64_decode(const char *in, size_t n, uint8_t *out, size_t cap);

#endif
