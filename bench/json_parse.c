/* json_parse.c — see json_parse.h. */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_parse.h"

struct reader {
    const char *s;
    size_t i, n;
    unsigned depth;
    char *err;
    size_t err_len;
    bool failed;
};

static void json_fail(struct reader *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void json_fail(struct reader *r, const char *fmt, ...)
{
    if (r->failed)
        return;
    r->failed = true;
    unsigned line = 1, col = 1;
    for (size_t i = 0; i < r->i && i < r->n; i++, col++)
        if (r->s[i] == '\n') {
            line++;
            col = 0;
        }
    int k = snprintf(r->err, r->err_len, "line %u, column %u: ", line, col);
    if (k < 0 || (size_t)k >= r->err_len)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err + k, r->err_len - (size_t)k, fmt, ap);
    va_end(ap);
}

static void skip_ws(struct reader *r)
{
    while (r->i < r->n &&
           (r->s[r->i] == ' ' || r->s[r->i] == '\t' || r->s[r->i] == '\n' || r->s[r->i] == '\r'))
        r->i++;
}

static bool literal(struct reader *r, const char *word)
{
    size_t len = strlen(word);
    if (r->n - r->i < len || memcmp(r->s + r->i, word, len) != 0)
        return false;
    r->i += len;
    return true;
}

static int hex4(const char *p)
{
    int v = 0;
    for (int k = 0; k < 4; k++) {
        char c = p[k];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= c - '0';
        else if (c >= 'a' && c <= 'f')
            v |= c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            v |= c - 'A' + 10;
        else
            return -1;
    }
    return v;
}

static size_t put_utf8(char *o, uint32_t cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xc0 | cp >> 6);
        o[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | cp >> 12);
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | cp >> 18);
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* A string at r->i (the opening quote), decoded into a new buffer. */
static char *parse_string(struct reader *r)
{
    r->i++; /* the quote */
    size_t start = r->i, end = start;
    while (end < r->n && r->s[end] != '"')
        end += r->s[end] == '\\' ? 2 : 1;
    if (end >= r->n) {
        json_fail(r, "a string is not closed");
        return NULL;
    }
    char *out = malloc(end - start + 1), *o = out; /* decoding never grows */
    if (out == NULL) {
        json_fail(r, "out of memory");
        return NULL;
    }
    while (r->i < end) {
        unsigned char c = (unsigned char)r->s[r->i];
        if (c < 0x20) {
            json_fail(r, "a control character inside a string (escape it)");
            goto bad;
        }
        if (c != '\\') {
            *o++ = (char)c;
            r->i++;
            continue;
        }
        char e = r->s[r->i + 1];
        r->i += 2;
        switch (e) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '/': *o++ = '/'; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u': {
            int hi = r->i + 4 <= end ? hex4(r->s + r->i) : -1;
            if (hi < 0) {
                json_fail(r, "\\u needs four hex digits");
                goto bad;
            }
            r->i += 4;
            uint32_t cp = (uint32_t)hi;
            if (hi >= 0xd800 && hi <= 0xdbff) {
                int lo = r->i + 6 <= end && r->s[r->i] == '\\' && r->s[r->i + 1] == 'u'
                             ? hex4(r->s + r->i + 2)
                             : -1;
                if (lo < 0xdc00 || lo > 0xdfff) {
                    json_fail(r, "a \\u high surrogate without its low surrogate");
                    goto bad;
                }
                r->i += 6;
                cp = 0x10000 + (((uint32_t)hi - 0xd800) << 10) + ((uint32_t)lo - 0xdc00);
            } else if (hi >= 0xdc00 && hi <= 0xdfff) {
                json_fail(r, "a lone \\u low surrogate");
                goto bad;
            }
            o += put_utf8(o, cp);
            break;
        }
        default: json_fail(r, "unknown escape \\%c", e); goto bad;
        }
    }
    r->i = end + 1;
    *o = '\0';
    return out;
bad:
    free(out);
    return NULL;
}

/* -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
static bool parse_number(struct reader *r, double *out)
{
    size_t i = r->i;
    const char *s = r->s;
    if (i < r->n && s[i] == '-')
        i++;
    if (i < r->n && s[i] == '0') {
        i++;
    } else if (i < r->n && s[i] >= '1' && s[i] <= '9') {
        while (i < r->n && s[i] >= '0' && s[i] <= '9')
            i++;
    } else {
        return false;
    }
    if (i < r->n && s[i] == '.') {
        i++;
        if (i >= r->n || s[i] < '0' || s[i] > '9')
            return false;
        while (i < r->n && s[i] >= '0' && s[i] <= '9')
            i++;
    }
    if (i < r->n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < r->n && (s[i] == '+' || s[i] == '-'))
            i++;
        if (i >= r->n || s[i] < '0' || s[i] > '9')
            return false;
        while (i < r->n && s[i] >= '0' && s[i] <= '9')
            i++;
    }
    char buf[64];
    if (i - r->i >= sizeof buf)
        return false;
    memcpy(buf, s + r->i, i - r->i);
    buf[i - r->i] = '\0';
    *out = strtod(buf, NULL);
    r->i = i;
    return true;
}

static bool parse_value(struct reader *r, struct json_value *v);

/* Appends a member to an array or object; returns its slot. */
static struct json_value *grow(struct reader *r, struct json_value *v, size_t *cap, char *key)
{
    if (v->count == *cap) {
        size_t ncap = *cap ? *cap * 2 : 8;
        struct json_value *items = realloc(v->items, ncap * sizeof *items);
        if (items == NULL) {
            json_fail(r, "out of memory");
            free(key);
            return NULL;
        }
        v->items = items;
        if (v->type == JSON_OBJECT) {
            char **keys = realloc(v->keys, ncap * sizeof *keys);
            if (keys == NULL) {
                json_fail(r, "out of memory");
                free(key);
                return NULL;
            }
            v->keys = keys;
        }
        *cap = ncap;
    }
    if (v->type == JSON_OBJECT)
        v->keys[v->count] = key;
    struct json_value *slot = &v->items[v->count++];
    memset(slot, 0, sizeof *slot);
    return slot;
}

static bool parse_container(struct reader *r, struct json_value *v, char close)
{
    size_t cap = 0;
    if (++r->depth > JSON_PARSE_MAX_DEPTH) {
        json_fail(r, "nested deeper than %d levels", JSON_PARSE_MAX_DEPTH);
        return false;
    }
    r->i++; /* the bracket */
    skip_ws(r);
    if (r->i < r->n && r->s[r->i] == close) {
        r->i++;
        r->depth--;
        return true;
    }
    for (;;) {
        char *key = NULL;
        skip_ws(r);
        if (close == '}') {
            if (r->i >= r->n || r->s[r->i] != '"') {
                json_fail(r, "expected a member name in quotes");
                return false;
            }
            if ((key = parse_string(r)) == NULL)
                return false;
            skip_ws(r);
            if (r->i >= r->n || r->s[r->i] != ':') {
                free(key);
                json_fail(r, "expected ':' after a member name");
                return false;
            }
            r->i++;
        }
        struct json_value *slot = grow(r, v, &cap, key);
        if (slot == NULL || !parse_value(r, slot))
            return false;
        skip_ws(r);
        if (r->i < r->n && r->s[r->i] == ',') {
            r->i++;
            continue;
        }
        if (r->i < r->n && r->s[r->i] == close) {
            r->i++;
            r->depth--;
            return true;
        }
        json_fail(r, "expected ',' or '%c'", close);
        return false;
    }
}

static bool parse_value(struct reader *r, struct json_value *v)
{
    skip_ws(r);
    if (r->i >= r->n) {
        json_fail(r, "a value is missing (the text ends)");
        return false;
    }
    char c = r->s[r->i];
    switch (c) {
    case '{': v->type = JSON_OBJECT; return parse_container(r, v, '}');
    case '[': v->type = JSON_ARRAY; return parse_container(r, v, ']');
    case '"': v->type = JSON_STRING; return (v->string = parse_string(r)) != NULL;
    case 't':
    case 'f':
    case 'n':
        if (literal(r, "true") || literal(r, "false")) {
            v->type = JSON_BOOL;
            v->boolean = c == 't';
            return true;
        }
        if (literal(r, "null")) {
            v->type = JSON_NULL;
            return true;
        }
        break;
    default:
        v->type = JSON_NUMBER;
        if (parse_number(r, &v->number))
            return true;
        break;
    }
    v->type = JSON_NULL;
    json_fail(r, "not a JSON value");
    return false;
}

static void free_members(struct json_value *v)
{
    for (size_t i = 0; i < v->count; i++) {
        free_members(&v->items[i]);
        if (v->type == JSON_OBJECT)
            free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->string);
}

struct json_value *json_parse(const char *text, size_t len, char *err, size_t err_len)
{
    struct reader r = { .s = text, .n = len, .err = err, .err_len = err_len };
    struct json_value *v = calloc(1, sizeof *v);
    if (v == NULL) {
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    if (parse_value(&r, v)) {
        skip_ws(&r);
        if (r.i == r.n)
            return v;
        json_fail(&r, "text after the end of the value");
    }
    json_value_free(v);
    return NULL;
}

void json_value_free(struct json_value *v)
{
    if (v == NULL)
        return;
    free_members(v);
    free(v);
}

const struct json_value *json_member(const struct json_value *obj, const char *key)
{
    if (obj == NULL || obj->type != JSON_OBJECT)
        return NULL;
    for (size_t i = obj->count; i-- > 0;)
        if (strcmp(obj->keys[i], key) == 0)
            return &obj->items[i];
    return NULL;
}

double json_number_of(const struct json_value *obj, const char *key, double fallback)
{
    const struct json_value *v = json_member(obj, key);
    return v != NULL && v->type == JSON_NUMBER ? v->number : fallback;
}

const char *json_string_of(const struct json_value *obj, const char *key)
{
    const struct json_value *v = json_member(obj, key);
    return v != NULL && v->type == JSON_STRING ? v->string : NULL;
}
