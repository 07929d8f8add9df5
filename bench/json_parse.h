/* json_parse.h — a small strict JSON reader (RFC 8259) for rkv-bench
 * --compare, which draws saved --json reports.
 *
 * Parses a whole document into a tree. Strict: one value, no trailing
 * commas, no comments, no leading zeros, no unescaped control characters
 * in strings, valid \u escapes (surrogate pairs joined); nesting is limited
 * to JSON_PARSE_MAX_DEPTH. Errors say where (line and column) and what.
 * Numbers are doubles (counts stay exact up to 2^53).
 */
#ifndef RKV_BENCH_JSON_PARSE_H
#define RKV_BENCH_JSON_PARSE_H

#include <stdbool.h>
#include <stddef.h>

#define JSON_PARSE_MAX_DEPTH 64

enum json_type { JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT };

struct json_value {
    enum json_type type;
    bool boolean;             /* JSON_BOOL */
    double number;            /* JSON_NUMBER */
    char *string;             /* JSON_STRING: decoded UTF-8, NUL-terminated (owned) */
    size_t count;             /* JSON_ARRAY / JSON_OBJECT: members */
    struct json_value *items; /* their values (owned) */
    char **keys;              /* JSON_OBJECT: their names (owned) */
};

/* The tree of text[0..len), or NULL with a message in err. */
struct json_value *json_parse(const char *text, size_t len, char *err, size_t err_len);
void json_value_free(struct json_value *v);

/* Member `key` of an object (the last one when repeated), or NULL. */
const struct json_value *json_member(const struct json_value *obj, const char *key);
/* A number member, or `fallback` when absent or not a number. */
double json_number_of(const struct json_value *obj, const char *key, double fallback);
/* A string member, or NULL. */
const char *json_string_of(const struct json_value *obj, const char *key);

#endif
