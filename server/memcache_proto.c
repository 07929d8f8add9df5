/* memcache_proto.c — parse memcached text protocol commands (memcache_proto.h).
 *
 * Written to answer as memcached 1.6.18 does (its proto_text.c, read for
 * the behaviour; tests/mc_diff.c compares the two): the line is cut into
 * at most 23 space-separated tokens, the command is picked by memcached's
 * dispatch (the first letter, then the name, then its token-count check,
 * which answers a plain ERROR), and each command's checks run in
 * memcached's order with its error strings. Numbers are read the way its
 * safe_strto* helpers read them: strtol/strtoul/strtoull (so leading white
 * space, a sign and leading zeros are taken), the next character white
 * space or the token's end, the result cut to 32 bits where memcached keeps
 * 32. Nothing here trusts a length or a number from the input before
 * range-checking it.
 */
#include <string.h>

#include "memcache_proto.h"

#define MAX_TOKENS 23 /* memcached's tokenizer keeps 23 tokens (MAX_TOKENS less its end marker) */
#define META_MAX_TOKENS \
    19 /* meta commands: memcached's MFLAG_MAX_OPT_LENGTH (20) less the end marker */

#define BAD_FORMAT  "bad command line format"
#define BAD_EXPTIME "invalid exptime argument"
#define BAD_TOKEN   "bad token in command line format"

/* memcached's item overhead, for its item_size_ok(): the item header (48
 * bytes on a 64-bit build), the CAS (8), the key's NUL, the data's "\r\n";
 * client flags other than 0 take 4 bytes more. item_size_max is 1 MiB. */
#define MC_ITEM_SIZE_MAX (1u << 20)
#define MC_ITEM_OVERHEAD (48u + 8u + 1u + 2u)
/* memcached's read buffer: a line longer than this (not a get/gets) never
 * finds its end there, and it hangs up. One up to it that arrived at once
 * is served, as memcached serves it. */
#define MC_READ_BUFFER RKV_MC_READ_BUFFER

struct line {
    const char *tok[MAX_TOKENS];
    size_t tlen[MAX_TOKENS];
    unsigned n;       /* tokens (at most MAX_TOKENS) */
    const char *more; /* text after the 23rd token's space, or NULL */
    const char *end;  /* the end of the line's text */
};

/* memcached's tokenize_command(): runs of spaces separate; after the 23rd
 * token the rest of the line is left as it is (a retrieval line's further
 * keys). */
static void tokenize(const char *s, const char *e, struct line *l)
{
    l->n = 0;
    l->more = NULL;
    l->end = e;
    while (s < e) {
        if (*s == ' ') {
            s++;
            continue;
        }
        const char *t = s;
        while (s < e && *s != ' ')
            s++;
        l->tok[l->n] = t;
        l->tlen[l->n] = (size_t)(s - t);
        if (++l->n == MAX_TOKENS) {
            if (s < e && s + 1 < e)
                l->more = s + 1;
            return;
        }
    }
}

static bool tok_is(const struct line *l, unsigned i, const char *word)
{
    size_t n = strlen(word);
    return i < l->n && l->tlen[i] == n && memcmp(l->tok[i], word, n) == 0;
}

static bool is_space(char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r');
}

/* strtoull/strtol over s[0..n) as C reads it (white space, a sign, digits),
 * and memcached's check after it: something was read, no overflow, and the
 * next character is white space or the end. *neg: there was a '-'. */
static bool read_number(const char *s, size_t n, bool is_signed, uint64_t *mag, bool *neg)
{
    size_t i = 0;
    uint64_t v = 0;
    bool overflow = false;
    while (i < n && is_space(s[i]))
        i++;
    *neg = false;
    if (i < n && (s[i] == '+' || s[i] == '-'))
        *neg = s[i++] == '-';
    size_t digits = i;
    while (i < n && s[i] >= '0' && s[i] <= '9') {
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            overflow = true;
        else
            v = v * 10 + d;
        i++;
    }
    if (i == digits || overflow)
        return false;
    if (i < n && !is_space(s[i]))
        return false;
    if (is_signed && v > (*neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX))
        return false; /* strtol's ERANGE */
    *mag = v;
    return true;
}

/* safe_strtoull: an unsigned 64-bit number; one that reads as negative
 * (a '-' and a value with the top bit set) is refused. */
static bool mc_strtoull(const char *s, size_t n, uint64_t *out)
{
    uint64_t v;
    bool neg;
    if (!read_number(s, n, false, &v, &neg))
        return false;
    v = neg ? 0 - v : v;
    if ((int64_t)v < 0 && memchr(s, '-', n) != NULL)
        return false;
    *out = v;
    return true;
}

/* safe_strtoul: as safe_strtoull, then the low 32 bits. */
static bool mc_strtoul(const char *s, size_t n, uint32_t *out)
{
    uint64_t v;
    if (!mc_strtoull(s, n, &v))
        return false;
    *out = (uint32_t)v;
    return true;
}

/* safe_strtol: strtol into a long, then the low 32 bits as a signed
 * number. So 4294967295 is -1 (what clients holding exptime in an unsigned
 * 32-bit field send for a negative time) and 4294967297 is 1. */
static bool mc_strtol(const char *s, size_t n, int32_t *out)
{
    uint64_t v;
    bool neg;
    if (!read_number(s, n, true, &v, &neg))
        return false;
    *out = (int32_t)(uint32_t)(neg ? 0 - v : v);
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

uint32_t rkv_mc_max_value(uint32_t max_value, uint32_t key_len, uint32_t flags)
{
    uint64_t mc = MC_ITEM_SIZE_MAX - MC_ITEM_OVERHEAD - (flags ? 4u : 0u);
    uint64_t table = (uint64_t)max_value + RKV_MC_MAX_KEY;
    mc = mc > key_len ? mc - key_len : 0;
    table = table > key_len ? table - key_len : 0;
    return (uint32_t)(mc < table ? mc : table);
}

/* ------------------------------------------------------------ classic */

/* memcached's set_noreply_maybe(): the last token is "noreply". */
static bool noreply_last(const struct line *l)
{
    return tok_is(l, l->n - 1, "noreply");
}

/* get|gets|bget <key>*  /  gat|gats <exptime> <key>*: the keys are checked
 * when served (memcached answers the keys before a long one, then drops
 * their answers for the error). */
static enum rkv_mc_result parse_retrieval(const struct line *l, struct rkv_mc_req *r)
{
    unsigned first = 1;
    if (r->cmd == RKV_MC_GAT || r->cmd == RKV_MC_GATS) {
        int32_t exptime;
        if (!mc_strtol(l->tok[1], l->tlen[1], &exptime))
            return client_error(r, BAD_EXPTIME);
        r->exptime = exptime;
        first = 2;
    }
    if (first < l->n) {
        r->keys = l->tok[first];
        r->keys_len = (size_t)(l->end - l->tok[first]);
        set_key(r, l->tok[first], l->tlen[first] <= RKV_MC_MAX_KEY ? l->tlen[first] : 0);
        if (r->key_len == 0)
            r->key = NULL;
    } else {
        r->keys = l->end; /* "gat 10": no keys, END */
        r->keys_len = 0;
    }
    return RKV_MC_OK;
}

/* set|add|replace|append|prepend <key> <flags> <exptime> <bytes> [noreply]
 * cas <key> <flags> <exptime> <bytes> <cas unique> [noreply]
 * A token where noreply would go that is not "noreply" is ignored. The
 * data block is checked by the caller once the line is good. */
static enum rkv_mc_result parse_storage(const struct line *l, struct rkv_mc_req *r)
{
    int32_t exptime, bytes;
    r->noreply = noreply_last(l);
    if (l->tlen[1] > RKV_MC_MAX_KEY)
        return client_error(r, BAD_FORMAT);
    if (!mc_strtoul(l->tok[2], l->tlen[2], &r->flags) ||
        !mc_strtol(l->tok[3], l->tlen[3], &exptime) || !mc_strtol(l->tok[4], l->tlen[4], &bytes))
        return client_error(r, BAD_FORMAT);
    if (r->cmd == RKV_MC_CAS && !mc_strtoull(l->tok[5], l->tlen[5], &r->cas))
        return client_error(r, BAD_FORMAT);
    if (bytes < 0 || bytes > INT32_MAX - 2)
        return client_error(r, BAD_FORMAT);
    set_key(r, l->tok[1], l->tlen[1]);
    r->exptime = exptime;
    r->bytes = (uint32_t)bytes;
    return RKV_MC_OK;
}

/* delete <key> [0] [noreply]: memcached still takes a legacy time of 0 */
static enum rkv_mc_result parse_delete(const struct line *l, struct rkv_mc_req *r)
{
    if (l->n > 2) {
        bool zero = tok_is(l, 2, "0");
        r->noreply = noreply_last(l);
        if (!((l->n == 3 && (zero || r->noreply)) || (l->n == 4 && zero && r->noreply)))
            return client_error(r, "bad command line format.  Usage: delete <key> [noreply]");
    }
    if (l->tlen[1] > RKV_MC_MAX_KEY)
        return client_error(r, BAD_FORMAT);
    set_key(r, l->tok[1], l->tlen[1]);
    return RKV_MC_OK;
}

/* incr|decr <key> <value> [noreply]  /  touch <key> <exptime> [noreply] */
static enum rkv_mc_result parse_key_number(const struct line *l, struct rkv_mc_req *r)
{
    int32_t exptime;
    r->noreply = noreply_last(l);
    if (l->tlen[1] > RKV_MC_MAX_KEY)
        return client_error(r, BAD_FORMAT);
    set_key(r, l->tok[1], l->tlen[1]);
    if (r->cmd == RKV_MC_TOUCH) {
        if (!mc_strtol(l->tok[2], l->tlen[2], &exptime))
            return client_error(r, BAD_EXPTIME);
        r->exptime = exptime;
        return RKV_MC_OK;
    }
    return mc_strtoull(l->tok[2], l->tlen[2], &r->delta)
               ? RKV_MC_OK
               : client_error(r, "invalid numeric delta argument");
}

/* verbosity <level> [noreply]: rkv has no verbosity; the level is checked */
static enum rkv_mc_result parse_verbosity(const struct line *l, struct rkv_mc_req *r)
{
    uint32_t level;
    r->noreply = noreply_last(l);
    return mc_strtoul(l->tok[1], l->tlen[1], &level) ? RKV_MC_OK : client_error(r, BAD_FORMAT);
}

/* flush_all [delay] [noreply]: the first argument is the delay unless it
 * is all there is beside a final noreply ("flush_all 1 2" flushes in a
 * second, "flush_all noreply 5" is refused) */
static enum rkv_mc_result parse_flush_all(const struct line *l, struct rkv_mc_req *r)
{
    int32_t exptime;
    r->noreply = noreply_last(l);
    if (l->n != (r->noreply ? 2u : 1u)) {
        if (!mc_strtol(l->tok[1], l->tlen[1], &exptime))
            return client_error(r, BAD_EXPTIME);
        r->exptime = exptime;
    }
    return RKV_MC_OK;
}

/* ------------------------------------------------------------ meta */

static bool in_set(char c, const char *set)
{
    return c != 0 && strchr(set, c) != NULL;
}

/* The flags of a meta command from token `first` on, as memcached's
 * _meta_flag_preparse() reads them: every command takes every flag it
 * knows (and ignores those it has no use for); a repeated first letter or
 * an unknown one ends the reading; a bad value is remembered and the
 * reading goes on (the last bad value names the error). *errstr: its
 * reason. b decodes the key. */
static bool meta_flags(const struct line *l, unsigned first, struct rkv_mc_req *r, const char **errstr)
{
    bool seen[128] = { false }, bad = false;
    for (unsigned i = first; i < l->n; i++) {
        const char *t = l->tok[i];
        size_t n = l->tlen[i];
        unsigned char c = (unsigned char)t[0];
        if (c >= 127 || seen[c]) {
            *errstr = "duplicate flag";
            return false;
        }
        seen[c] = true;
        if (!in_set((char)c, "bNTRlOPLkstcfvhuqFCMJDI")) {
            *errstr = "invalid flag";
            return false;
        }
        r->mflags |= RKV_MC_F((char)c);
        if (r->nret < RKV_MC_MAX_META_FLAGS)
            r->ret[r->nret++] = (char)c;
        int32_t v32;
        switch (c) {
        case 'b': {
            long k = rkv_mc_base64_decode(l->tok[1], l->tlen[1], r->keybuf, sizeof r->keybuf);
            if (k <= 0) {
                *errstr = "error decoding key";
                bad = true;
            } else {
                r->key = r->keybuf;
                r->key_len = (uint32_t)k;
            }
            break;
        }
        case 'N':
        case 'T':
        case 'R':
            if (!mc_strtol(t + 1, n - 1, &v32)) {
                *errstr = BAD_TOKEN;
                bad = true;
            } else if (c == 'N') {
                r->vivify_ttl = v32;
            } else if (c == 'T') {
                r->exptime = v32;
            } else {
                r->recache_ttl = v32;
            }
            break;
        case 'O':
            r->opaque = t + 1;
            r->opaque_len = (uint32_t)(n - 1);
            r->opaque_too_long = n - 1 > RKV_MC_MAX_OPAQUE;
            break;
        case 'q': r->noreply = true; break;
        case 'F':
            if (!mc_strtoul(t + 1, n - 1, &r->flags))
                bad = true; /* memcached names no reason of its own for this one */
            break;
        case 'C':
            if (!mc_strtoull(t + 1, n - 1, &r->cas)) {
                *errstr = BAD_TOKEN;
                bad = true;
            }
            break;
        case 'M':
            if (n != 2) {
                *errstr = "incorrect length for M token";
                bad = true;
            } else {
                r->mode = t[1];
            }
            break;
        case 'J':
            if (!mc_strtoull(t + 1, n - 1, &r->initial)) {
                *errstr = "invalid numeric initial value";
                bad = true;
            }
            break;
        case 'D':
            if (!mc_strtoull(t + 1, n - 1, &r->delta)) {
                *errstr = "invalid numeric delta value";
                bad = true;
            }
            break;
        default: break; /* a flag without a value (a token after its letter is ignored) */
        }
    }
    return !bad;
}

/* mg|md|ma <key> <flags>*  /  ms <key> <datalen> <flags>*  /  me <key> */
static enum rkv_mc_result parse_meta(const struct line *l, struct rkv_mc_req *r)
{
    const char *errstr = BAD_FORMAT;
    enum rkv_mc_result res;
    if (r->cmd == RKV_MC_ME) {
        if (l->n < 2 || l->tlen[1] > RKV_MC_MAX_KEY)
            return client_error(r, BAD_FORMAT);
        return client_error(r, "me (meta debug) is not supported by rkv");
    }
    if (l->n < 2)
        return RKV_MC_ERROR;
    if (l->tlen[1] > RKV_MC_MAX_KEY)
        return client_error(r, BAD_FORMAT);
    set_key(r, l->tok[1], l->tlen[1]);
    r->delta = 1;
    if (r->cmd == RKV_MC_MS) {
        int32_t bytes;
        if (l->n == 2)
            return client_error(r, BAD_FORMAT);
        if (l->n >= META_MAX_TOKENS + 1)
            return client_error(r, "options flags too long");
        if (!mc_strtol(l->tok[2], l->tlen[2], &bytes) || bytes < 0 || bytes > INT32_MAX - 2)
            return client_error(r, BAD_FORMAT);
        r->bytes = (uint32_t)bytes;
        /* from here on a refusal skips the data block, as memcached does */
        r->swallow = (uint64_t)r->bytes + 2;
        if (!meta_flags(l, 3, r, &errstr))
            res = client_error(r, errstr);
        else if (r->mode != 0 && !in_set(r->mode, "EAPRS"))
            res = client_error(r, "invalid mode for ms M token"); /* memcached: before O's */
        else if (r->opaque_too_long)
            res = client_error(r, "opaque token too long");
        else
            res = RKV_MC_OK;
        if (res == RKV_MC_OK)
            r->swallow = 0;
        r->noreply = r->noreply && res == RKV_MC_OK; /* meta errors are always answered */
        return res;
    }
    if (l->n >= META_MAX_TOKENS + 1)
        return client_error(r, r->cmd == RKV_MC_MG ? "options flags are too long"
                                                   : "options flags too long");
    bool ok = meta_flags(l, 2, r, &errstr);
    if (r->cmd == RKV_MC_MG) {
        res = ok ? RKV_MC_OK : client_error(r, errstr);
    } else {
        res = ok ? RKV_MC_OK : client_error(r, "invalid or duplicate flag");
        if (res == RKV_MC_OK && r->cmd == RKV_MC_MA && r->mode != 0 && !in_set(r->mode, "I+D-"))
            res = client_error(r, "invalid mode for ma M token");
        if (res == RKV_MC_OK && r->cmd == RKV_MC_MD && r->opaque_too_long)
            res = client_error(r, "opaque token too long"); /* md reads it before acting */
    }
    r->noreply = r->noreply && res == RKV_MC_OK;
    return res;
}

/* ------------------------------------------------------------ dispatch */

/* What a line asks for, in memcached's order: meta commands (two letters,
 * m first), then by first letter and name; a name with the wrong number of
 * tokens is ERROR. */
static enum rkv_mc_result parse_line(const struct line *l, struct rkv_mc_req *r)
{
    unsigned n = l->n;
    if (n == 0 || l->tlen[0] < 2)
        return RKV_MC_ERROR;
    const char *t = l->tok[0];
    if (t[0] == 'm' && l->tlen[0] == 2) {
        switch (t[1]) {
        case 'g': r->cmd = RKV_MC_MG; break;
        case 's': r->cmd = RKV_MC_MS; break;
        case 'd': r->cmd = RKV_MC_MD; break;
        case 'a': r->cmd = RKV_MC_MA; break;
        case 'e': r->cmd = RKV_MC_ME; break;
        case 'n': r->cmd = RKV_MC_MN; return RKV_MC_OK;
        default: return RKV_MC_ERROR;
        }
        return parse_meta(l, r);
    }
    static const struct {
        const char *name;
        enum rkv_mc_cmd cmd;
        unsigned min, max; /* tokens, the command included */
    } commands[] = {
        { "get", RKV_MC_GET, 2, MAX_TOKENS },
        { "gets", RKV_MC_GETS, 2, MAX_TOKENS },
        { "gat", RKV_MC_GAT, 2, MAX_TOKENS },
        { "gats", RKV_MC_GATS, 2, MAX_TOKENS },
        { "bget", RKV_MC_GET, 2, MAX_TOKENS }, /* an ancient get memcached still takes */
        { "set", RKV_MC_SET, 5, 6 },
        { "add", RKV_MC_ADD, 5, 6 },
        { "append", RKV_MC_APPEND, 5, 6 },
        { "replace", RKV_MC_REPLACE, 5, 6 },
        { "prepend", RKV_MC_PREPEND, 5, 6 },
        { "cas", RKV_MC_CAS, 6, 7 },
        { "incr", RKV_MC_INCR, 3, 4 },
        { "decr", RKV_MC_DECR, 3, 4 },
        { "delete", RKV_MC_DELETE, 2, 4 },
        { "touch", RKV_MC_TOUCH, 3, 4 },
        { "stats", RKV_MC_STATS, 1, MAX_TOKENS },
        { "shutdown", RKV_MC_SHUTDOWN, 1, MAX_TOKENS },
        { "flush_all", RKV_MC_FLUSH_ALL, 1, 3 },
        { "version", RKV_MC_VERSION, 1, MAX_TOKENS },
        { "quit", RKV_MC_QUIT, 1, MAX_TOKENS },
        { "verbosity", RKV_MC_VERBOSITY, 2, 3 },
    };
    /* every g command wants a second token before its name is looked at */
    if (t[0] == 'g' && n < 2)
        return RKV_MC_ERROR;
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        if (!tok_is(l, 0, commands[i].name))
            continue;
        r->cmd = commands[i].cmd;
        if (n < commands[i].min || n > commands[i].max || (l->more && commands[i].max < MAX_TOKENS))
            return RKV_MC_ERROR;
        switch (r->cmd) {
        case RKV_MC_GET:
        case RKV_MC_GETS:
        case RKV_MC_GAT:
        case RKV_MC_GATS: return parse_retrieval(l, r);
        case RKV_MC_SET:
        case RKV_MC_ADD:
        case RKV_MC_REPLACE:
        case RKV_MC_APPEND:
        case RKV_MC_PREPEND:
        case RKV_MC_CAS: return parse_storage(l, r);
        case RKV_MC_DELETE: return parse_delete(l, r);
        case RKV_MC_INCR:
        case RKV_MC_DECR:
        case RKV_MC_TOUCH: return parse_key_number(l, r);
        case RKV_MC_VERBOSITY: return parse_verbosity(l, r);
        case RKV_MC_FLUSH_ALL: return parse_flush_all(l, r);
        case RKV_MC_STATS:
            r->arg = l->tok[0] + l->tlen[0];
            while (r->arg < l->end && *r->arg == ' ')
                r->arg++;
            r->arg_len = (size_t)(l->end - r->arg);
            return RKV_MC_OK;
        default: return RKV_MC_OK;
        }
    }
    /* not a command: memcached hangs up on what looks like an HTTP request
     * (its last token starts with "HTTP/"), else ERROR; not under the first
     * letters it dispatches on before it looks */
    if (in_set(t[0], "gsacidt"))
        return RKV_MC_ERROR;
    if (l->tlen[n - 1] >= 5 && memcmp(l->tok[n - 1], "HTTP/", 5) == 0)
        return RKV_MC_HANGUP;
    return RKV_MC_ERROR;
}

static bool has_data_block(enum rkv_mc_cmd c)
{
    return (c >= RKV_MC_SET && c <= RKV_MC_CAS) || c == RKV_MC_MS;
}

/* Whether a line with no end of line yet may go on past RKV_MC_MAX_LINE:
 * a get or gets after at most 100 spaces (memcached's multiget rule). */
static bool long_line_ok(const char *in, size_t len)
{
    size_t i = 0;
    while (i < len && in[i] == ' ')
        i++;
    if (i > 100)
        return false;
    return (len - i >= 4 && memcmp(in + i, "get ", 4) == 0) ||
           (len - i >= 5 && memcmp(in + i, "gets ", 5) == 0);
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
        r->keys = in;
        r->keys_len = (size_t)(end - in);
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

/* The text of a line: up to the "\n", less one "\r" before it (unless the
 * line is just "\r"), and up to a NUL, where memcached's C string ends. */
static const char *line_text_end(const char *in, const char *nl)
{
    const char *e = nl;
    if (e - in > 1 && e[-1] == '\r')
        e--;
    const char *nul = memchr(in, '\0', (size_t)(e - in));
    return nul ? nul : e;
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
    const char *nl = memchr(in, '\n', len);
    if (nl == NULL) {
        if (!keys && len > RKV_MC_MAX_LINE && !long_line_ok(in, len)) {
            req->close = true; /* memcached hangs up, no answer */
            *consumed = len;
            return RKV_MC_HANGUP;
        }
        if (len >= RKV_MC_MAX_GET_LINE) {
            const char *cut = memrchr(in, ' ', RKV_MC_MAX_GET_LINE);
            if (st == NULL || cut == NULL) {
                req->close = true; /* no key ends in 64 KiB */
                *consumed = len;
                if (st)
                    st->in_keys = false;
                return RKV_MC_HANGUP;
            }
            *consumed = (size_t)(cut - in) + 1; /* the keys before the last space */
            return retrieval_part(in, cut, true, st, req);
        }
        *need = len + 1;
        return RKV_MC_NEED_MORE;
    }
    size_t line_len = (size_t)(nl - in) + 1;
    const char *e = line_text_end(in, nl);
    *consumed = line_len;
    if (!keys && line_len > MC_READ_BUFFER && !long_line_ok(in, len)) {
        req->close = true; /* memcached's read buffer cannot hold it: it hangs up */
        return RKV_MC_HANGUP;
    }
    if (keys) { /* the end of a long line: its "\r" goes whatever comes before it */
        e = nl > in && nl[-1] == '\r' ? nl - 1 : nl;
        const char *nul = memchr(in, '\0', (size_t)(e - in));
        return retrieval_part(in, nul ? nul : e, false, st, req);
    }
    tokenize(in, e, &l);
    enum rkv_mc_result res = parse_line(&l, req);
    if (res == RKV_MC_HANGUP)
        req->close = true;
    if (res != RKV_MC_OK || !has_data_block(req->cmd))
        return res;

    if (req->bytes > rkv_mc_max_value(max_value, req->key_len, req->flags)) {
        req->swallow = (uint64_t)req->bytes + 2;
        req->error = "object too large for cache";
        if (req->cmd == RKV_MC_MS)
            req->noreply = false; /* meta errors are always answered */
        return RKV_MC_SERVER_ERROR;
    }
    size_t total = line_len + (size_t)req->bytes + 2;
    if (len < total) {
        *consumed = 0;
        *need = total;
        return RKV_MC_NEED_MORE;
    }
    *consumed = total;
    if (in[total - 2] != '\r' || in[total - 1] != '\n') {
        /* not stored; the block's bytes are gone, the next ones are a command */
        if (req->cmd == RKV_MC_MS)
            req->noreply = false;
        return client_error(req, "bad data chunk");
    }
    req->data = (const uint8_t *)in + line_len;
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

void rkv_mc_stream_resume(struct rkv_mc_stream *st, const struct rkv_mc_req *r)
{
    st->in_keys = true;
    st->cmd = r->cmd;
    st->exptime = r->exptime;
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

/* A character's value, 0 for '=', -1 outside the alphabet. */
static int b64_value(char c)
{
    if (c == '=')
        return 0;
    const char *p = c ? strchr(b64, c) : NULL;
    return p ? (int)(p - b64) : -1;
}

long rkv_mc_base64_decode(const char *in, size_t n, uint8_t *out, size_t cap)
{
    size_t count = 0, o = 0;
    for (size_t i = 0; i < n; i++)
        if (b64_value(in[i]) >= 0)
            count++;
    if (count == 0 || count % 4 != 0 || count / 4 * 3 > cap)
        return -1;
    uint32_t block = 0;
    unsigned got = 0, pad = 0;
    for (size_t i = 0; i < n; i++) {
        int v = b64_value(in[i]);
        if (v < 0)
            continue;
        pad += in[i] == '=';
        block = block << 6 | (uint32_t)v;
        if (++got < 4)
            continue;
        out[o++] = (uint8_t)(block >> 16);
        out[o++] = (uint8_t)(block >> 8);
        out[o++] = (uint8_t)block;
        got = 0;
        block = 0;
        if (pad) { /* the first padded quad is the last */
            if (pad > 2)
                return -1;
            o -= pad;
            break;
        }
    }
    return o > 0 ? (long)o : -1;
}
