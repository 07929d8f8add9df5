/* json.c — see json.h. */
#include <math.h>
#include <string.h>

#include "json.h"

void json_init(struct json_writer *w, FILE *out)
{
    memset(w, 0, sizeof *w);
    w->out = out;
}

static void indent(struct json_writer *w)
{
    fputc('\n', w->out);
    for (unsigned i = 0; i < w->depth; i++)
        fputs("  ", w->out);
}

/* Length of the valid UTF-8 sequence at s (1..4), or 0 when it is not valid
 * (overlong forms, surrogates and code points above U+10FFFF included). */
static size_t utf8_sequence(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    size_t len;
    uint32_t cp;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2;
        cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10ffff ||
        (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

void json_write_escaped(FILE *out, const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned char c = p[i];
        switch (c) {
        case '"':
            fputs("\\\"", out);
            i++;
            continue;
        case '\\':
            fputs("\\\\", out);
            i++;
            continue;
        case '\b':
            fputs("\\b", out);
            i++;
            continue;
        case '\f':
            fputs("\\f", out);
            i++;
            continue;
        case '\n':
            fputs("\\n", out);
            i++;
            continue;
        case '\r':
            fputs("\\r", out);
            i++;
            continue;
        case '\t':
            fputs("\\t", out);
            i++;
            continue;
        default: break;
        }
        if (c < 0x20) {
            fprintf(out, "\\u%04x", c);
            i++;
            continue;
        }
        size_t len = utf8_sequence(p + i, n - i);
        if (len == 0) {
            fputs("\\ufffd", out);
            i++;
            continue;
        }
        fwrite(p + i, 1, len, out);
        i += len;
    }
}

/* Comma, newline, indentation and "key": before a value. */
static void member(struct json_writer *w, const char *key)
{
    if (w->depth > 0) {
        if (w->has_items[w->depth - 1])
            fputc(',', w->out);
        w->has_items[w->depth - 1] = true;
        indent(w);
    }
    if (key != NULL) {
        if (w->depth == 0)
            w->failed = true; /* a key outside any object */
        fputc('"', w->out);
        json_write_escaped(w->out, key, strlen(key));
        fputs("\": ", w->out);
    }
}

static void open_level(struct json_writer *w, const char *key, char bracket)
{
    member(w, key);
    fputc(bracket, w->out);
    if (w->depth >= JSON_MAX_DEPTH) {
        w->failed = true;
        return;
    }
    w->has_items[w->depth++] = false;
}

static void close_level(struct json_writer *w, char bracket)
{
    if (w->depth == 0) {
        w->failed = true;
        return;
    }
    bool had = w->has_items[--w->depth];
    if (had)
        indent(w);
    fputc(bracket, w->out);
}

void json_object_begin(struct json_writer *w, const char *key)
{
    open_level(w, key, '{');
}
void json_object_end(struct json_writer *w)
{
    close_level(w, '}');
}
void json_array_begin(struct json_writer *w, const char *key)
{
    open_level(w, key, '[');
}
void json_array_end(struct json_writer *w)
{
    close_level(w, ']');
}

void json_string_n(struct json_writer *w, const char *key, const char *s, size_t n)
{
    member(w, key);
    fputc('"', w->out);
    json_write_escaped(w->out, s, n);
    fputc('"', w->out);
}

void json_string(struct json_writer *w, const char *key, const char *s)
{
    if (s == NULL) {
        member(w, key);
        fputs("null", w->out);
        return;
    }
    json_string_n(w, key, s, strlen(s));
}

void json_u64(struct json_writer *w, const char *key, uint64_t v)
{
    member(w, key);
    fprintf(w->out, "%llu", (unsigned long long)v);
}

void json_double(struct json_writer *w, const char *key, double v)
{
    member(w, key);
    if (!isfinite(v))
        fputs("null", w->out);
    else
        fprintf(w->out, "%.15g", v);
}

void json_bool(struct json_writer *w, const char *key, bool v)
{
    member(w, key);
    fputs(v ? "true" : "false", w->out);
}

int json_finish(struct json_writer *w)
{
    fputc('\n', w->out);
    if (fflush(w->out) != 0 || ferror(w->out))
        return -1;
    return (w->failed || w->depth != 0) ? -1 : 0;
}
