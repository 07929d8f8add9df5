/* trace.h — key traces for rkv-bench --trace, in the CSV format of
 * Twitter's public cache traces (github.com/twitter/cache-trace):
 *
 *   timestamp,anonymized key,key size,value size,client id,operation,TTL
 *
 * timestamp: whole seconds; key: the anonymized key (printable, no spaces or
 * commas); key size and value size: the original sizes in bytes; client id:
 * a number; operation: get, gets, set, add, replace, cas, append, prepend,
 * delete, incr or decr; TTL: seconds (0 for reads). Lines end in \n or \r\n;
 * the last may lack it.
 *
 * A trace is validated whole when it is loaded: the first malformed,
 * truncated or unknown-operation line fails the load with "NAME:LINE: why",
 * so rkv-bench sends nothing for a bad file. Every number is checked for
 * overflow against its field's width. Sizes beyond what a server takes are
 * not an error: such lines load, and the replay skips and counts them
 * (trace_too_large). The records keep the anonymized keys in one arena; the
 * key sent is that key padded or truncated to the line's key size
 * (trace_key), deterministically.
 */
#ifndef RKV_BENCH_TRACE_H
#define RKV_BENCH_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TRACE_LINE_MAX  4096u      /* longest line accepted, without its newline */
#define TRACE_KEY_MAX   250u       /* longest key a server takes (rkv and memcached) */
#define TRACE_VALUE_MAX (1u << 20) /* longest value replayed (memcached's default item) */

enum trace_op {
    TRACE_GET,
    TRACE_GETS,
    TRACE_SET,
    TRACE_ADD,
    TRACE_REPLACE,
    TRACE_CAS,
    TRACE_APPEND,
    TRACE_PREPEND,
    TRACE_DELETE,
    TRACE_INCR,
    TRACE_DECR,
    TRACE_OP_COUNT
};

/* One parsed line; key points into the line. */
struct trace_line {
    uint64_t timestamp;
    const char *key;
    size_t key_len;
    uint32_t key_size, value_size;
    uint64_t client_id;
    enum trace_op op;
    uint32_t ttl;
};

/* One loaded line. */
struct trace_rec {
    uint64_t timestamp;
    uint64_t key_off; /* the anonymized key: keys + key_off */
    uint32_t key_len;
    uint32_t key_size, value_size, ttl;
    uint8_t op; /* enum trace_op */
};

struct trace {
    struct trace_rec *recs; /* owned */
    size_t count, cap;
    char *keys; /* owned arena of anonymized keys */
    size_t keys_len, keys_cap;
    uint64_t ops[TRACE_OP_COUNT]; /* lines of each operation */
    uint64_t too_large;           /* lines over TRACE_KEY_MAX / TRACE_VALUE_MAX */
    uint32_t value_max;           /* largest value size of a line within the limits */
};

/* Parses one line (no newline; a trailing \r is allowed). 0, or -1 with
 * the reason in why. */
int trace_parse_line(const char *line, size_t len, struct trace_line *out, char *why, size_t why_len);

/* Loads a whole trace from memory (name: for messages) or a file into *t
 * (zeroed first). 0, or -1 with "NAME:LINE: why" (or why the file could not
 * be read, or that it holds no line) in err; t is freed on failure. */
int trace_load_buffer(struct trace *t, const char *name, const char *data, size_t len, char *err,
                      size_t err_len);
int trace_load_file(struct trace *t, const char *path, char *err, size_t err_len);
void trace_free(struct trace *t);

/* Whether replaying r is skipped: its key longer than TRACE_KEY_MAX or its
 * value longer than value_max. */
bool trace_too_large(const struct trace_rec *r, uint32_t value_max);

/* The key sent for r into buf (TRACE_KEY_MAX bytes): the anonymized key
 * truncated to r->key_size, or padded to it with characters drawn from a
 * hash of the key. Returns its length (r->key_size; r must not be
 * trace_too_large). */
unsigned trace_key(const struct trace *t, const struct trace_rec *r, char *buf);

/* "get" .. "decr". */
const char *trace_op_name(unsigned op);

#endif
