/* memcache_proto.c — parse memcached text protocol commands (memcache_proto.h).
 *
 * One function per command family: the line is split into at most
 * MAX_TOKENS space-separated tokens (memcached's tokenizer: runs of spaces
 * separate, a trailing "\r" is dropped), then checked the way memcached 1.6
 * checks it, answering with its error strings. Nothing here trusts a length
 * or a number from the input before range-checking it.
 */
#include <string.h>

#include "memcache_proto.h"

#define MAX_TOKENS 24   /* memcached's MAX_TOKENS: command + 23 arguments */

#define BAD_FORMAT "bad command line format"
#define BAD_EXPTIME "invalid exptime argument"

struct line {
    const char *tok[MAX_TOKENS];
    size_t tlen[MAX_TOKENS];
    unsigned ntok;
    const char *rest;      /* text after the first two tokens (retrieval key lists) */
    const char *end;       /* end of the line, "\r" excluded */
};

static bool is_cmd(const struct line *l, unsigned i, const char *name)
{
    size_t n = strlen(name);
    return i < l->ntok && l->tlen[i] == n && memcmp(l->tok[i], name, n) == 0;
}

/* Split [s, e) on spaces. Tokens past MAX_TOKENS make ntok = MAX_TOKENS + 1. */
static void tokenize(const char *s, const char *e, struct line *l)
{
    l->ntok = 0;
    l->end = e;
    l->rest = e;
    while (s < e) {
        while (s < e && *s == ' ')
            s++;
        if (s == e)
            break;
        const char *t = s;
        while (s < e && *s != ' ')
            s++;
        if (l->ntok == MAX_TOKENS) {
            l->ntok = MAX_TOKENS + 1;
            return;
        }
        l->tok[l->ntok] = t;
        l->tlen[l->ntok] = (size_t)(s - t);
        l->ntok++;
        if (l->ntok == 1)
            l->rest = s;
    }
}

/* An unsigned decimal of at most 20 digits that fits max. */
static bool parse_u64(const char *s, size_t n, uint64_t max, uint64_t *out)
{
    uint64_t v = 0;
    if (n == 0 || n > 20)
        return false;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    if (v > max)
        return false;
    *out = v;
    return true;
}

/* An exptime as memcached 1.6 reads one (safe_strtol: strtol into a long,
 * then stored in an int32_t): an optionally signed decimal that fits in 64
 * bits, of which the low 32 are the exptime as a signed number. So
 * 4294967295 is -1 (expired), which is what clients that hold exptime in
 * an unsigned 32-bit field (pylibmc over libmemcached) send for a negative
 * time, and 4294967296 is 0 (no expiry) as in memcached. */
static bool parse_exptime(const char *s, size_t n, int64_t *out)
{
    uint64_t v;
    bool neg = n > 0 && s[0] == '-', sign = n > 0 && (s[0] == '-' || s[0] == '+');
    if (!parse_u64(s + sign, n - sign, neg ? (uint64_t)INT64_MAX + 1 : INT64_MAX, &v))
        return false;
    *out = (int32_t)(uint32_t)(neg ? 0 - v : v);
    return true;
}

static bool key_ok(const char *k, size_t n)
{
    if (n == 0 || n > RKV_MC_MAX_KEY)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)k[i] < 0x21 || (unsigned char)k[i] == 0x7f)
            return false;
    return true;
}

static enum rkv_mc_result client_error(struct rkv_mc_req *r, const char *why)
{
    r->error = why;
    return RKV_MC_CLIENT_ERROR;
}

static void set_key(struct rkv_mc_req *r, const char *k, size_t n)
{
    r->key = (const uint8_t *)k;
    r->key_len = (uint32_t)n;
}

/* ------------------------------------------------------------ classic */

static bool noreply_at(const struct line *l, unsigned i)
{
    return is_cmd(l, i, "noreply");
}

/* The key list [p, end) of a retrieval command: every key valid. */
static bool retrieval_keys(const char *p, const char *end, struct rkv_mc_req *r)
{
    const uint8_t *k;
    uint32_t kn;
    const char *pos = p;
    r->keys = p;
    r->keys_len = (size_t)(end - p);
    while (rkv_mc_next_key(&pos, end, &k, &kn))
        if (!key_ok((const char *)k, kn))
            return false;
    return true;
}

/* get|gets <key>*  /  gat|gats <exptime> <key>* */
static enum rkv_mc_result parse_retrieval(const struct line *l, struct rkv_mc_req *r)
{
    unsigned first = 1;
    if (r->cmd == RKV_MC_GAT || r->cmd == RKV_MC_GATS) {
        if (l->ntok < 3)
            return RKV_MC_ERROR;
        if (!parse_exptime(l->tok[1], l->tlen[1], &r->exptime))
            return client_error(r, BAD_EXPTIME);
        first = 2;
    } else if (l->ntok < 2) {
        return RKV_MC_ERROR;
    }
    /* keys: from token `first` to the end of the line (may exceed MAX_TOKENS) */
    if (!retrieval_keys(l->tok[first], l->end, r))
        return client_error(r, BAD_FORMAT);
    set_key(r, l->tok[first], l->tlen[first]);
    return RKV_MC_OK;
}

/* set|add|replace|append|prepend <key> <flags> <exptime> <bytes> [noreply]
 * cas <key> <flags> <exptime> <bytes> <cas unique> [noreply]
 * The data block is checked by the caller once the line is good. */
static enum rkv_mc_result parse_storage(const struct line *l, struct rkv_mc_req *r)
{
    unsigned nargs = r->cmd == RKV_MC_CAS ? 6 : 5;
    uint64_t flags, bytes;
    if (l->ntok != nargs && !(l->ntok == nargs + 1 && noreply_at(l, nargs)))
        return RKV_MC_ERROR;
    r->noreply = l->ntok == nargs + 1;
    if (!key_ok(l->tok[1], l->tlen[1]) ||
        !parse_u64(l->tok[2], l->tlen[2], UINT32_MAX, &flags) ||
        !parse_exptime(l->tok[3], l->tlen[3], &r->exptime) ||
        !parse_u64(l->tok[4], l->tlen[4], INT32_MAX - 2, &bytes) ||
        (r->cmd == RKV_MC_CAS && !parse_u64(l->tok[5], l->tlen[5], UINT64_MAX, &r->cas)))
        return client_error(r, BAD_FORMAT);
    set_key(r, l->tok[1], l->tlen[1]);
    r->flags = (uint32_t)flags;
    r->bytes = (uint32_t)bytes;
    return RKV_MC_OK;
}

static enum rkv_mc_result parse_delete(const struct line *l, struct rkv_mc_req *r)
{
    /* delete <key> [0] [noreply]: memcached still takes a legacy time of 0 */
    unsigned n = l->ntok;
    if (n >= 3 && noreply_at(l, n - 1)) {
        r->noreply = true;
        n--;
    }
    if (n == 3 && !is_cmd(l, 2, "0"))
        return client_error(r, "bad command line format.  Usage: delete <key> [noreply]");
    if (n < 2 || n > 3)
        return RKV_MC_ERROR;
    if (!key_ok(l->tok[1], l->tlen[1]))
        return client_error(r, BAD_FORMAT);
    set_key(r, l->tok[1], l->tlen[1]);
    return RKV_MC_OK;
}

/* incr|decr <key> <value> [noreply]  /  touch <key> <exptime> [noreply] */
static enum rkv_mc_result parse_key_number(const struct line *l, struct rkv_mc_req *r)
{
    if (l->ntok != 3 && !(l->ntok == 4 && noreply_at(l, 3)))
        return RKV_MC_ERROR;
    r->noreply = l->ntok == 4;
    if (!key_ok(l->tok[1], l->tlen[1]))
        return client_error(r, BAD_FORMAT);
    set_key(r, l->tok[1], l->tlen[1]);
    if (r->cmd == RKV_MC_TOUCH)
        return parse_exptime(l->tok[2], l->tlen[2], &r->exptime) ? RKV_MC_OK
                                                                   : client_error(r, BAD_EXPTIME);
    return parse_u64(l->tok[2], l->tlen[2], UINT64_MAX, &r->delta) ? RKV_MC_OK
                                                                    : client_error(r, "invalid numeric delta argument");
}

/* stats [args] / verbosity <n> [noreply] / flush_all [delay] [noreply] / version / quit / mn */
static enum rkv_mc_result parse_admin(const struct line *l, struct rkv_mc_req *r)
{
    unsigned n = l->ntok;
    r->arg = l->rest;
    while (r->arg < l->end && *r->arg == ' ')
        r->arg++;
    r->arg_len = (size_t)(l->end - r->arg);
    switch (r->cmd) {
    case RKV_MC_STATS:
        return RKV_MC_OK;
    case RKV_MC_VERSION:
    case RKV_MC_QUIT:
    case RKV_MC_MN:
        return n == 1 ? RKV_MC_OK : RKV_MC_ERROR;
    case RKV_MC_VERBOSITY:
        if (n >= 2 && noreply_at(l, n - 1)) {
            r->noreply = true;
            n--;
        }
        return n == 2 ? RKV_MC_OK : RKV_MC_ERROR;
    case RKV_MC_FLUSH_ALL:
        /* memcached takes up to two arguments and reads the first as the
         * delay unless it is all there is beside a final noreply: so
         * "flush_all 1 2" flushes in a second, "flush_all noreply 5" is
         * refused */
        if (n > 3)
            return RKV_MC_ERROR;
        r->noreply = n >= 2 && noreply_at(l, n - 1);
        if (n != (r->noreply ? 2u : 1u) && !parse_exptime(l->tok[1], l->tlen[1], &r->exptime))
            return client_error(r, BAD_EXPTIME);
        return RKV_MC_OK;
    default:
        return RKV_MC_ERROR;
    }
}

/* ------------------------------------------------------------ meta */

/* Flags each meta command takes; a flag outside its set is refused. */
#define MG_FLAGS (RKV_MC_F('b') | RKV_MC_F('c') | RKV_MC_F('f') | RKV_MC_F('k') | RKV_MC_F('O') | \
                  RKV_MC_F('q') | RKV_MC_F('s') | RKV_MC_F('t') | RKV_MC_F('v') | RKV_MC_F('T') | \
                  RKV_MC_F('u'))
#define MS_FLAGS (RKV_MC_F('b') | RKV_MC_F('c') | RKV_MC_F('C') | RKV_MC_F('F') | RKV_MC_F('k') | \
                  RKV_MC_F('O') | RKV_MC_F('q') | RKV_MC_F('T') | RKV_MC_F('M'))
#define MD_FLAGS (RKV_MC_F('b') | RKV_MC_F('C') | RKV_MC_F('k') | RKV_MC_F('O') | RKV_MC_F('q'))
#define MA_FLAGS (RKV_MC_F('b') | RKV_MC_F('N') | RKV_MC_F('J') | RKV_MC_F('D') | \
                  RKV_MC_F('M') | RKV_MC_F('q') | RKV_MC_F('t') | RKV_MC_F('c') | \
                  RKV_MC_F('v') | RKV_MC_F('k') | RKV_MC_F('O'))
/* Flags that are echoed back (return flags), kept in request order. */
#define RETURN_FLAGS (RKV_MC_F('c') | RKV_MC_F('f') | RKV_MC_F('k') | \
                      RKV_MC_F('O') | RKV_MC_F('s') | RKV_MC_F('t'))

/* One flag token; `allowed` is the command's set. */
static enum rkv_mc_result meta_flag(const char *t, size_t n, uint64_t allowed, struct rkv_mc_req *r)
{
    char c = t[0];
    const char *arg = t + 1;
    size_t an = n - 1;
    uint64_t v;
    if (c == 'P' || c == 'L')
        return RKV_MC_OK; /* proxy hints: ignored, as memcached does */
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) || !(allowed & RKV_MC_F(c)))
        return client_error(r, "invalid flag");
    if (r->mflags & RKV_MC_F(c))
        return client_error(r, "duplicate flag");
    r->mflags |= RKV_MC_F(c);
    if ((RETURN_FLAGS & RKV_MC_F(c)) && r->nret < RKV_MC_MAX_META_FLAGS)
        r->ret[r->nret++] = c;
    switch (c) {
    case 'q':
        r->noreply = true;
        return RKV_MC_OK;
    case 'O':
        if (an > RKV_MC_MAX_OPAQUE)
            return client_error(r, "opaque token too long");
        r->opaque = arg;
        r->opaque_len = (uint32_t)an;
        return RKV_MC_OK;
    case 'C':
        return parse_u64(arg, an, UINT64_MAX, &r->cas) ? RKV_MC_OK : client_error(r, "bad token in command line format");
    case 'F':
        if (!parse_u64(arg, an, UINT32_MAX, &v))
            return client_error(r, "bad token in command line format");
        r->flags = (uint32_t)v;
        return RKV_MC_OK;
    case 'T':
        return parse_exptime(arg, an, &r->exptime) ? RKV_MC_OK : client_error(r, "bad token in command line format");
    case 'N':
        return parse_exptime(arg, an, &r->vivify_ttl) ? RKV_MC_OK : client_error(r, "bad token in command line format");
    case 'J':
        return parse_u64(arg, an, UINT64_MAX, &r->initial) ? RKV_MC_OK : client_error(r, "bad token in command line format");
    case 'D':
        return parse_u64(arg, an, UINT64_MAX, &r->delta) ? RKV_MC_OK : client_error(r, "bad token in command line format");
    case 'M':
        if (an != 1)
            return client_error(r, "bad mode switch");
        r->mode = arg[0];
        if (r->cmd == RKV_MC_MS && !strchr("EAPRSeaprs", r->mode))
            return client_error(r, "invalid mode for ms");
        if (r->cmd == RKV_MC_MA && !strchr("I+D-id", r->mode))
            return client_error(r, "invalid mode for ma");
        return RKV_MC_OK;
    default:
        return an == 0 ? RKV_MC_OK : client_error(r, "bad token in command line format");
    }
}

/* The flags from token `first` on, then the key (token 1, base64 under b). */
static enum rkv_mc_result parse_meta_flags_key(const struct line *l, unsigned first,
                                               uint64_t allowed, struct rkv_mc_req *r)
{
    enum rkv_mc_result res;
    for (unsigned i = first; i < l->ntok; i++)
        if ((res = meta_flag(l->tok[i], l->tlen[i], allowed, r)) != RKV_MC_OK)
            return res;
    if (r->mflags & RKV_MC_F('b')) {
        long n = rkv_mc_base64_decode(l->tok[1], l->tlen[1], r->keybuf, sizeof r->keybuf);
        if (n <= 0)
            return client_error(r, "error decoding key");
        r->key = r->keybuf;
        r->key_len = (uint32_t)n;
    } else if (!key_ok(l->tok[1], l->tlen[1])) {
        return client_error(r, BAD_FORMAT);
    } else {
        set_key(r, l->tok[1], l->tlen[1]);
    }
    return RKV_MC_OK;
}

/* mg|md|ma <key> <flags>*  /  ms <key> <datalen> <flags>*  /  me <key> */
static enum rkv_mc_result parse_meta(const struct line *l, struct rkv_mc_req *r)
{
    static const uint64_t allowed[] = {
        [RKV_MC_MG] = MG_FLAGS, [RKV_MC_MS] = MS_FLAGS, [RKV_MC_MD] = MD_FLAGS, [RKV_MC_MA] = MA_FLAGS,
    };
    unsigned first = 2;
    enum rkv_mc_result res;
    if (l->ntok < 2)
        return client_error(r, BAD_FORMAT);
    if (l->ntok > MAX_TOKENS)
        return client_error(r, "options flags are too long");
    if (r->cmd == RKV_MC_ME)
        return client_error(r, "me (meta debug) is not supported by rkv");
    r->delta = 1;
    if (r->cmd == RKV_MC_MS) {
        uint64_t bytes;
        if (l->ntok < 3 || !parse_u64(l->tok[2], l->tlen[2], INT32_MAX - 2, &bytes))
            return client_error(r, BAD_FORMAT);
        r->bytes = (uint32_t)bytes;
        first = 3;
    }
    res = parse_meta_flags_key(l, first, allowed[r->cmd], r);
    if (res != RKV_MC_OK && r->cmd == RKV_MC_MS)
        r->swallow = (uint64_t)r->bytes + 2;   /* memcached skips the data block of a refused ms */
    return res;
}

/* ------------------------------------------------------------ dispatch */

static const struct {
    const char *name;
    enum rkv_mc_cmd cmd;
} commands[] = {
    { "get", RKV_MC_GET }, { "gets", RKV_MC_GETS }, { "gat", RKV_MC_GAT }, { "gats", RKV_MC_GATS },
    { "touch", RKV_MC_TOUCH }, { "set", RKV_MC_SET }, { "add", RKV_MC_ADD },
    { "replace", RKV_MC_REPLACE }, { "append", RKV_MC_APPEND }, { "prepend", RKV_MC_PREPEND },
    { "cas", RKV_MC_CAS }, { "delete", RKV_MC_DELETE }, { "incr", RKV_MC_INCR },
    { "decr", RKV_MC_DECR }, { "mg", RKV_MC_MG }, { "ms", RKV_MC_MS }, { "md", RKV_MC_MD },
    { "ma", RKV_MC_MA }, { "mn", RKV_MC_MN }, { "me", RKV_MC_ME }, { "stats", RKV_MC_STATS },
    { "version", RKV_MC_VERSION }, { "verbosity", RKV_MC_VERBOSITY },
    { "flush_all", RKV_MC_FLUSH_ALL }, { "quit", RKV_MC_QUIT },
};

static bool is_retrieval(const char *s, size_t n)
{
    return (n >= 4 && memcmp(s, "get ", 4) == 0) || (n >= 5 && memcmp(s, "gets ", 5) == 0) ||
           (n >= 4 && memcmp(s, "gat ", 4) == 0) || (n >= 5 && memcmp(s, "gats ", 5) == 0);
}

static enum rkv_mc_result parse_line(const struct line *l, struct rkv_mc_req *r)
{
    if (l->ntok == 0)
        return RKV_MC_ERROR;
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        if (!is_cmd(l, 0, commands[i].name))
            continue;
        r->cmd = commands[i].cmd;
        switch (r->cmd) {
        case RKV_MC_GET: case RKV_MC_GETS: case RKV_MC_GAT: case RKV_MC_GATS:
            return parse_retrieval(l, r);
        case RKV_MC_SET: case RKV_MC_ADD: case RKV_MC_REPLACE: case RKV_MC_APPEND:
        case RKV_MC_PREPEND: case RKV_MC_CAS:
            return l->ntok > MAX_TOKENS ? RKV_MC_ERROR : parse_storage(l, r);
        case RKV_MC_DELETE:
            return l->ntok > MAX_TOKENS ? RKV_MC_ERROR : parse_delete(l, r);
        case RKV_MC_INCR: case RKV_MC_DECR: case RKV_MC_TOUCH:
            return l->ntok > MAX_TOKENS ? RKV_MC_ERROR : parse_key_number(l, r);
        case RKV_MC_MG: case RKV_MC_MS: case RKV_MC_MD: case RKV_MC_MA: case RKV_MC_ME:
            return parse_meta(l, r);
        default:
            return l->ntok > MAX_TOKENS ? RKV_MC_ERROR : parse_admin(l, r);
        }
    }
    return RKV_MC_ERROR;
}

static bool has_data_block(enum rkv_mc_cmd c)
{
    return (c >= RKV_MC_SET && c <= RKV_MC_CAS) || c == RKV_MC_MS;
}

/* The keys of a long retrieval line in [in, end), the line going on
 * (more) or ending here: its command comes from *st (in_keys) or from the
 * line's start (not yet in_keys; then *st learns it). */
static enum rkv_mc_result retrieval_part(const char *in, const char *end, bool more,
                                         struct rkv_mc_stream *st, struct rkv_mc_req *r)
{
    enum rkv_mc_result res = RKV_MC_OK;
    if (!st->in_keys) {
        struct line l;
        tokenize(in, end, &l);
        res = parse_line(&l, r);
    } else {
        r->cmd = st->cmd;
        r->exptime = st->exptime;
        if (!retrieval_keys(in, end, r))
            res = client_error(r, BAD_FORMAT);
    }
    st->in_keys = more && res == RKV_MC_OK;
    st->cmd = r->cmd;
    st->exptime = r->exptime;
    r->parted = true;
    r->more = st->in_keys;
    /* an error in a part: the rest of the line cannot be told from the next
     * command, and the parts before went out as VALUEs already */
    r->close = r->close || res != RKV_MC_OK;
    return res;
}

static enum rkv_mc_result parse_any(const char *in, size_t len, uint32_t max_value,
                                    struct rkv_mc_stream *st, struct rkv_mc_req *req,
                                    size_t *consumed, size_t *need)
{
    struct line l;
    memset(req, 0, offsetof(struct rkv_mc_req, keybuf));
    req->error = NULL;
    req->close = false;
    req->swallow = 0;
    req->parted = req->more = false;
    *consumed = 0;
    *need = 0;

    bool keys = st && st->in_keys;
    size_t limit = keys || is_retrieval(in, len) ? RKV_MC_MAX_GET_LINE : RKV_MC_MAX_LINE;
    const char *nl = memchr(in, '\n', len < limit ? len : limit);
    if (nl == NULL) {
        const char *cut = len >= limit ? memrchr(in, ' ', limit) : NULL;
        if (cut != NULL && st != NULL && limit == RKV_MC_MAX_GET_LINE) {
            *consumed = (size_t)(cut - in) + 1;      /* the keys before the last space */
            return retrieval_part(in, cut, true, st, req);
        }
        if (len >= limit) {
            req->close = true;
            *consumed = len;
            if (st)
                st->in_keys = false;
            return client_error(req, "line too long");
        }
        *need = len + 1;
        return RKV_MC_NEED_MORE;
    }
    size_t line_len = (size_t)(nl - in) + 1;
    const char *e = nl;
    if (e > in && e[-1] == '\r')
        e--;
    *consumed = line_len;
    if (keys)
        return retrieval_part(in, e, false, st, req);
    tokenize(in, e, &l);
    enum rkv_mc_result res = parse_line(&l, req);
    if (res != RKV_MC_OK || !has_data_block(req->cmd))
        return res;

    if (req->bytes > max_value) {
        req->swallow = (uint64_t)req->bytes + 2;
        req->error = "object too large for cache";
        return RKV_MC_SERVER_ERROR;
    }
    size_t total = line_len + (size_t)req->bytes + 2;
    if (len < total) {
        *consumed = 0;
        *need = total;
        return RKV_MC_NEED_MORE;
    }
    if (in[total - 2] != '\r' || in[total - 1] != '\n') {
        req->close = true;
        *consumed = total;
        return client_error(req, "bad data chunk");
    }
    req->data = (const uint8_t *)in + line_len;
    *consumed = total;
    return RKV_MC_OK;
}

enum rkv_mc_result rkv_mc_parse(const char *in, size_t len, uint32_t max_value,
                                struct rkv_mc_req *req, size_t *consumed, size_t *need)
{
    return parse_any(in, len, max_value, NULL, req, consumed, need);
}

enum rkv_mc_result rkv_mc_parse_stream(const char *in, size_t len, uint32_t max_value,
                                       struct rkv_mc_stream *st, struct rkv_mc_req *req,
                                       size_t *consumed, size_t *need)
{
    return parse_any(in, len, max_value, st, req, consumed, need);
}

bool rkv_mc_next_key(const char **pos, const char *end, const uint8_t **key, uint32_t *key_len)
{
    const char *s = *pos;
    while (s < end && *s == ' ')
        s++;
    if (s == end)
        return false;
    const char *t = s;
    while (s < end && *s != ' ')
        s++;
    *key = (const uint8_t *)t;
    *key_len = (uint32_t)(s - t);
    *pos = s;
    return true;
}

/* ------------------------------------------------------------ base64 */

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t rkv_mc_base64_encode(const uint8_t *in, size_t n, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)in[i + 1] << 8;
        if (i + 2 < n)
            v |= in[i + 2];
        out[o++] = b64[(v >> 18) & 63];
        out[o++] = b64[(v >> 12) & 63];
        out[o++] = i + 1 < n ? b64[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < n ? b64[v & 63] : '=';
    }
    return o;
}

static int b64_value(char c)
{
    const char *p = c ? strchr(b64, c) : NULL;
    return p ? (int)(p - b64) : -1;
}

long rkv_mc_base64_decode(const char *in, size_t n, uint8_t *out, size_t cap)
{
    size_t o = 0;
    if (n == 0 || n % 4 != 0)
        return -1;
    for (size_t i = 0; i < n; i += 4) {
        int v[4];
        unsigned pad = 0;
        for (unsigned j = 0; j < 4; j++) {
            bool last = i + 4 == n;
            if (in[i + j] == '=' && last && j >= 2 && (j == 3 || in[i + 3] == '=')) {
                v[j] = 0;
                pad++;
            } else if ((v[j] = b64_value(in[i + j])) < 0) {
                return -1;
            }
        }
        uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        if (o + 3 - pad > cap)
            return -1;
        out[o++] = (uint8_t)(w >> 16);
        if (pad < 2)
            out[o++] = (uint8_t)(w >> 8);
        if (pad < 1)
            out[o++] = (uint8_t)w;
    }
    return (long)o;
}
