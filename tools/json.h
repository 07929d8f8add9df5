/* json.h — a small streaming JSON writer for rkv-bench's --json report.
 *
 * Writes pretty-printed JSON to a FILE as the calls arrive, inserting commas
 * and indentation itself. Strings are escaped per RFC 8259: quote, backslash
 * and control characters are escaped, valid UTF-8 passes through, and bytes
 * that are not valid UTF-8 become U+FFFD so the output is always valid JSON.
 * Non-finite numbers (which JSON cannot express) are written as null.
 *
 * Every call takes the member name `key` when the value sits in an object
 * and NULL when it sits in an array or at the top level.
 */
#ifndef RKV_TOOLS_JSON_H
#define RKV_TOOLS_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define JSON_MAX_DEPTH 16

struct json_writer {
    FILE *out;                      /* where the text goes */
    unsigned depth;                 /* open objects/arrays */
    bool has_items[JSON_MAX_DEPTH]; /* per level: a member was already written (comma needed) */
    bool failed;                    /* nesting misuse seen; json_finish reports it */
};

void json_init(struct json_writer *w, FILE *out);

void json_object_begin(struct json_writer *w, const char *key);
void json_object_end(struct json_writer *w);
void json_array_begin(struct json_writer *w, const char *key);
void json_array_end(struct json_writer *w);

void json_string(struct json_writer *w, const char *key, const char *s);
void json_string_n(struct json_writer *w, const char *key, const char *s, size_t n);
void json_u64(struct json_writer *w, const char *key, uint64_t v);
void json_double(struct json_writer *w, const char *key, double v);
void json_bool(struct json_writer *w, const char *key, bool v);

/* Ends the document with a newline and flushes. 0 on success; -1 when the
 * nesting was wrong or the stream had a write error. */
int json_finish(struct json_writer *w);

/* Escapes s[0..n) as JSON string contents (without quotes) into out. */
void json_write_escaped(FILE *out, const char *s, size_t n);

#endif
