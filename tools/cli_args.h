/* cli_args.h — rkv-cli's command-line and command-line-of-stdin parsing.
 *
 * rkv-cli takes one command from its arguments, or reads commands from stdin
 * one per line. Both paths end in cli_parse_command() on a list of byte
 * strings: from argv as given, from stdin after cli_tokenize() has split the
 * line and undone its quoting ("..." with \xHH, \n, \t, \r, \\ and \" escapes;
 * '...' literal). Kept apart from main so tests can call every piece.
 */
#ifndef RKV_TOOLS_CLI_ARGS_H
#define RKV_TOOLS_CLI_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "rkv.h"

#define CLI_MAX_KEY 250u

/* Exit statuses. */
enum {
    CLI_EXIT_OK = 0,    /* the command did what it was asked */
    CLI_EXIT_MISS = 1,  /* get/del/incr of an absent key; put refused (exists, not stored, CAS) */
    CLI_EXIT_ERROR = 2, /* bad usage, connection or server error */
};

/* Options before the command. */
struct cli_global {
    char *servers;       /* -s URIs joined with ',' (owned) */
    const char *auth;    /* --auth SECRET, or NULL */
    unsigned timeout_ms; /* --timeout MS, 0 = library default */
};

enum cli_global_result {
    CLI_GLOBAL_RUN = 0, /* *cmd_index is where the command starts (== argc: read stdin) */
    CLI_GLOBAL_EXIT_OK, /* --help or --version printed */
    CLI_GLOBAL_USAGE,   /* message printed; exit 2 */
};

enum cli_global_result cli_parse_global(int argc, char **argv, struct cli_global *g, int *cmd_index,
                                        FILE *out, FILE *err);
void cli_global_free(struct cli_global *g);
void cli_usage(FILE *out);

/* A binary-safe byte string (pointing into argv or a token buffer). */
struct cli_arg {
    const char *s; /* bytes, NUL-terminated for convenience but may contain NULs */
    size_t len;    /* their number */
};

enum cli_cmd { CLI_GET, CLI_PUT, CLI_DEL, CLI_INCR, CLI_DECR, CLI_STATS, CLI_PING, CLI_FLUSH };

struct cli_command {
    enum cli_cmd cmd;
    const char *name;           /* the command as spelt, for messages */
    struct cli_arg key;         /* get/put/del/incr/decr */
    struct cli_arg value;       /* put */
    struct rkv_put_options put; /* put: mode, ttl, cas, flags */
    uint64_t delta;             /* incr/decr, default 1 */
    bool meta;                  /* get --meta: print version/flags/ttl to stderr */
    bool recache;               /* get --recache: rkv_get_recache, its marks to stderr */
    uint32_t recache_ttl;       /* get --recache SECONDS: its threshold (0: stale only) */
    bool all_shards;            /* stats without SHARD */
    unsigned shard;             /* stats SHARD */
    uint32_t delay;             /* flush DELAY seconds, default 0 (now) */
};

/* Parses args[0] (the command) and its arguments. Returns false with a
 * message in err (without "rkv-cli: ") when they are wrong. */
bool cli_parse_command(const struct cli_arg *args, size_t n, struct cli_command *cmd, char *err,
                       size_t err_len);

/* Tokens of one stdin line, unescaped into one owned buffer. */
struct cli_tokens {
    struct cli_arg *args; /* count entries */
    size_t count;
    char *storage; /* the bytes the args point into */
};

/* Splits a line (without its newline) into tokens. Returns false with a
 * message when a quote is unterminated, an escape is malformed, or a closing
 * quote is followed by something other than a space. An empty line or a
 * '#' comment gives zero tokens. */
bool cli_tokenize(const char *line, size_t len, struct cli_tokens *out, char *err, size_t err_len);
void cli_tokens_free(struct cli_tokens *t);

/* Exit status for a command that ended with status s. */
int cli_exit_code(rkv_status s);

/* Writes bytes printable: ASCII graphic characters as they are, others as \xHH
 * (and \\ for a backslash), so a key in a message is always readable. */
void cli_print_escaped(FILE *out, const char *s, size_t len);

#endif
