/* trace.c — Twitter cache-trace CSV lines for rkv-bench --trace; see trace.h. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace.h"

#define TRACE_FIELDS 7

static const char *const op_names[TRACE_OP_COUNT] = {
    "get", "gets", "set", "add", "replace", "cas", "append", "prepend", "delete", "incr", "decr",
};

static const char *const field_names[TRACE_FIELDS] = {
    "timestamp", "key", "key size", "value size", "client id", "operation", "TTL",
};

const char *trace_op_name(unsigned op)
{
    return op < TRACE_OP_COUNT ? op_names[op] : "?";
}

static int fail(char *why, size_t why_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(char *why, size_t why_len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, why_len, fmt, ap);
    va_end(ap);
    return -1;
}

/* A decimal number of [s, s + n) in 0..max: digits only, no sign or spaces,
 * checked for overflow digit by digit. */
static bool parse_num(const char *s, size_t n, uint64_t max, uint64_t *out)
{
    uint64_t v = 0;
    if (n == 0)
        return false;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (max - d) / 10)
            return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

int trace_parse_line(const char *line, size_t len, struct trace_line *out, char *why, size_t why_len)
{
    const char *f[TRACE_FIELDS];
    size_t flen[TRACE_FIELDS];
    unsigned nf = 0;
    if (len > 0 && line[len - 1] == '\r')
        len--;
    if (len == 0)
        return fail(why, why_len,
                    "an empty line; expected %u comma-separated fields "
                    "(timestamp,key,key size,value size,client id,operation,TTL)",
                    TRACE_FIELDS);
    if (memchr(line, '\0', len) != NULL)
        return fail(why, why_len, "a NUL byte in the line");
    for (size_t start = 0;;) {
        const char *comma = memchr(line + start, ',', len - start);
        size_t end = comma ? (size_t)(comma - line) : len;
        if (nf < TRACE_FIELDS) {
            f[nf] = line + start;
            flen[nf] = end - start;
        }
        nf++;
        if (comma == NULL)
            break;
        start = end + 1;
    }
    if (nf != TRACE_FIELDS)
        return fail(why, why_len,
                    "%u field%s, expected %u (timestamp,key,key size,value size,"
                    "client id,operation,TTL)%s",
                    nf, nf == 1 ? "" : "s", TRACE_FIELDS, nf < TRACE_FIELDS ? "; truncated?" : "");

    uint64_t v[TRACE_FIELDS] = { 0 };
    static const uint64_t max[TRACE_FIELDS] = { UINT64_MAX, 0, UINT32_MAX, UINT32_MAX,
                                                UINT64_MAX, 0, UINT32_MAX };
    for (unsigned i = 0; i < TRACE_FIELDS; i++) {
        if (i == 1 || i == 5)
            continue;
        if (!parse_num(f[i], flen[i], max[i], &v[i]))
            return fail(why, why_len, "%s '%.*s' is not a whole number from 0 to %llu",
                        field_names[i], (int)(flen[i] > 40 ? 40 : flen[i]), f[i],
                        (unsigned long long)max[i]);
    }
    if (flen[1] == 0)
        return fail(why, why_len, "an empty key");
    for (size_t i = 0; i < flen[1]; i++) {
        unsigned char c = (unsigned char)f[1][i];
        if (c <= ' ' || c >= 0x7f)
            return fail(why, why_len,
                        "the key has byte 0x%02x at offset %zu; keys are printable "
                        "ASCII without spaces",
                        c, i);
    }
    if (v[2] == 0)
        return fail(why, why_len, "key size 0; a key has at least one byte");
    unsigned op = 0;
    while (op < TRACE_OP_COUNT &&
           !(strlen(op_names[op]) == flen[5] && memcmp(op_names[op], f[5], flen[5]) == 0))
        op++;
    if (op == TRACE_OP_COUNT)
        return fail(why, why_len,
                    "unknown operation '%.*s' (expected get, gets, set, add, "
                    "replace, cas, append, prepend, delete, incr or decr)",
                    (int)(flen[5] > 40 ? 40 : flen[5]), f[5]);
    *out = (struct trace_line){
        .timestamp = v[0],
        .key = f[1],
        .key_len = flen[1],
        .key_size = (uint32_t)v[2],
        .value_size = (uint32_t)v[3],
        .client_id = v[4],
        .op = (enum trace_op)op,
        .ttl = (uint32_t)v[6],
    };
    return 0;
}

void trace_free(struct trace *t)
{
    free(t->recs);
    free(t->keys);
    memset(t, 0, sizeof *t);
}

bool trace_too_large(const struct trace_rec *r, uint32_t value_max)
{
    return r->key_size > TRACE_KEY_MAX || r->value_size > value_max;
}

/* Appends a parsed line. 0, or -1 when out of memory. */
static int add(struct trace *t, const struct trace_line *l)
{
    if (t->count == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 1024;
        struct trace_rec *r = realloc(t->recs, cap * sizeof *r);
        if (r == NULL)
            return -1;
        t->recs = r;
        t->cap = cap;
    }
    if (t->keys_cap - t->keys_len < l->key_len) {
        size_t cap = t->keys_cap ? t->keys_cap * 2 : 65536;
        while (cap - t->keys_len < l->key_len)
            cap *= 2;
        char *k = realloc(t->keys, cap);
        if (k == NULL)
            return -1;
        t->keys = k;
        t->keys_cap = cap;
    }
    memcpy(t->keys + t->keys_len, l->key, l->key_len);
    struct trace_rec *r = &t->recs[t->count++];
    *r = (struct trace_rec){ .timestamp = l->timestamp,
                             .key_off = t->keys_len,
                             .key_len = (uint32_t)l->key_len,
                             .key_size = l->key_size,
                             .value_size = l->value_size,
                             .ttl = l->ttl,
                             .op = (uint8_t)l->op };
    t->keys_len += l->key_len;
    t->ops[l->op]++;
    if (trace_too_large(r, TRACE_VALUE_MAX))
        t->too_large++;
    else if (r->value_size > t->value_max)
        t->value_max = r->value_size;
    return 0;
}

/* One line (without its \n) of name at lineno into t. */
static int take_line(struct trace *t, const char *name, size_t lineno, const char *line, size_t len,
                     char *err, size_t err_len)
{
    struct trace_line l;
    char why[256];
    if (len > TRACE_LINE_MAX) {
        snprintf(err, err_len, "%s:%zu: a line longer than %u bytes", name, lineno, TRACE_LINE_MAX);
        return -1;
    }
    if (trace_parse_line(line, len, &l, why, sizeof why) != 0) {
        snprintf(err, err_len, "%s:%zu: %s", name, lineno, why);
        return -1;
    }
    if (add(t, &l) != 0) {
        snprintf(err, err_len, "%s:%zu: out of memory for the trace (%zu lines so far)", name,
                 lineno, t->count);
        return -1;
    }
    return 0;
}

static int finish(struct trace *t, const char *name, char *err, size_t err_len)
{
    if (t->count > 0)
        return 0;
    snprintf(err, err_len,
             "%s: an empty trace (no lines); expected lines of "
             "timestamp,key,key size,value size,client id,operation,TTL",
             name);
    trace_free(t);
    return -1;
}

int trace_load_buffer(struct trace *t, const char *name, const char *data, size_t len, char *err,
                      size_t err_len)
{
    memset(t, 0, sizeof *t);
    size_t lineno = 0;
    for (size_t pos = 0; pos < len;) {
        const char *nl = memchr(data + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - data) : len;
        if (take_line(t, name, ++lineno, data + pos, end - pos, err, err_len) != 0) {
            trace_free(t);
            return -1;
        }
        pos = end + 1;
    }
    return finish(t, name, err, err_len);
}

int trace_load_file(struct trace *t, const char *path, char *err, size_t err_len)
{
    memset(t, 0, sizeof *t);
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        snprintf(err, err_len, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    char *line = NULL;
    size_t cap = 0, lineno = 0;
    ssize_t n;
    int rc = 0;
    errno = 0;
    while ((n = getline(&line, &cap, f)) >= 0) {
        size_t len = (size_t)n;
        if (len > 0 && line[len - 1] == '\n')
            len--;
        if ((rc = take_line(t, path, ++lineno, line, len, err, err_len)) != 0)
            break;
    }
    if (rc == 0 && ferror(f)) {
        snprintf(err, err_len, "%s: read failed after line %zu: %s", path, lineno, strerror(errno));
        rc = -1;
    }
    free(line);
    fclose(f);
    if (rc != 0) {
        trace_free(t);
        return -1;
    }
    return finish(t, path, err, err_len);
}

unsigned trace_key(const struct trace *t, const struct trace_rec *r, char *buf)
{
    static const char alphabet[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    const char *key = t->keys + r->key_off;
    unsigned size = r->key_size;
    if (r->key_len >= size) {
        memcpy(buf, key, size);
        return size;
    }
    memcpy(buf, key, r->key_len);
    /* FNV-1a of the key, then a splitmix64 stream of pad characters. */
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint32_t i = 0; i < r->key_len; i++)
        h = (h ^ (unsigned char)key[i]) * 0x100000001b3ull;
    for (unsigned i = r->key_len; i < size; i++) {
        uint64_t z = (h += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        buf[i] = alphabet[z % (sizeof alphabet - 1)];
    }
    return size;
}
