/* cli.c — rkv-cli, the command-line client for rkv.
 *
 * One command from the arguments (`rkv-cli -s URI get KEY`), or, without
 * one, commands from stdin one per line. Talks to the servers only through
 * the public client API (rkv.h). Parsing lives in cli_args.c (tested on its
 * own); this file connects, runs commands and prints their results.
 *
 * Output contract (scripts rely on it): a value is written raw, followed by
 * one newline, whether stdout is a terminal or not; incr/decr print the new
 * number; stats prints the server's "name value" lines; ping prints PONG;
 * writes (flush too) print nothing (OK on a terminal). Everything else — misses, refusals,
 * errors — goes to stderr as "rkv-cli: COMMAND: ...". Exit status: 0, 1
 * (miss or refused write), 2 (usage, connection or server error).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_args.h"
#include "rkv.h"
#include "util.h"

#define VALUE_BUF_START (64u << 10) /* grown on RKV_BUFFER_TOO_SMALL */

/* What a run shares between commands. */
struct cli_ctx {
    const struct cli_global *g; /* options */
    rkv_client *client;         /* connected lazily, once */
    char *buf;                  /* value / stats buffer, grown as needed */
    size_t buf_len;
    bool stdout_tty; /* print "OK" after writes */
};

static const char *status_hint(rkv_status st)
{
    switch (st) {
    case RKV_CONNECTION: return "; is rkv-server running and listening on that URI?";
    case RKV_AUTH: return "; pass the server's secret with --auth";
    case RKV_TIMEOUT: return "; the server did not answer in time (raise --timeout?)";
    case RKV_VERSION_MISMATCH: return "; run client and server of the same rkv version";
    case RKV_TOO_LARGE: return "; the server's configured limits are lower";
    case RKV_OUT_OF_MEMORY: return "; the server's memory is full and eviction is off";
    default: return "";
    }
}

/* Reports a failed command on stderr and returns its exit status. */
static int report(struct cli_ctx *x, const struct cli_command *c, rkv_status st)
{
    int code = cli_exit_code(st);
    fprintf(stderr, "rkv-cli: %s", c->name);
    if (c->key.len > 0) {
        fputc(' ', stderr);
        cli_print_escaped(stderr, c->key.s, c->key.len);
    }
    if (code == CLI_EXIT_MISS) {
        fprintf(stderr, ": %s\n", rkv_strerror(st));
        return code;
    }
    const char *detail = x->client ? rkv_last_error(x->client) : "";
    fprintf(stderr, ": %s", rkv_strerror(st));
    if (detail != NULL && detail[0] != '\0' && strcmp(detail, rkv_strerror(st)) != 0)
        fprintf(stderr, " (%s)", detail);
    fprintf(stderr, "%s\n", status_hint(st));
    return code;
}

static int ensure_connected(struct cli_ctx *x, const struct cli_command *c)
{
    if (x->client != NULL)
        return CLI_EXIT_OK;
    struct rkv_options opts = {
        .auth_secret = x->g->auth,
        .timeout_ms = x->g->timeout_ms,
    };
    rkv_status st = rkv_connect(x->g->servers, &opts, &x->client);
    if (st == RKV_OK)
        return CLI_EXIT_OK;
    x->client = NULL;
    if (rkv_last_error(NULL)[0]) /* the library's message names the server and the fix */
        fprintf(stderr, "rkv-cli: %s: %s\n", c->name, rkv_last_error(NULL));
    else
        fprintf(stderr, "rkv-cli: %s: connection to %s failed: %s%s\n", c->name, x->g->servers,
                rkv_strerror(st), status_hint(st));
    return CLI_EXIT_ERROR;
}

static bool grow(struct cli_ctx *x, size_t need)
{
    if (need <= x->buf_len)
        return true;
    char *b = realloc(x->buf, need);
    if (b == NULL) {
        fprintf(stderr, "rkv-cli: out of memory for a %zu-byte buffer\n", need);
        return false;
    }
    x->buf = b;
    x->buf_len = need;
    return true;
}

static int cmd_get(struct cli_ctx *x, const struct cli_command *c)
{
    struct rkv_item_info info;
    struct rkv_recache rc = { .recache_ttl = c->recache_ttl };
    size_t len = 0;
    rkv_status st;
    for (;;) {
        st = c->recache ? rkv_get_recache(x->client, c->key.s, c->key.len, x->buf, x->buf_len, &len,
                                          &info, &rc)
                        : rkv_get(x->client, c->key.s, c->key.len, x->buf, x->buf_len, &len, &info);
        if (st != RKV_BUFFER_TOO_SMALL)
            break;
        if (len <= x->buf_len || !grow(x, len))
            return report(x, c, st);
    }
    if (st != RKV_OK)
        return report(x, c, st);
    if (fwrite(x->buf, 1, len, stdout) != len || putchar('\n') == EOF)
        goto write_error;
    if (c->meta)
        fprintf(stderr, "version %llu flags %u ttl %u\n", (unsigned long long)info.version,
                info.user_flags, info.ttl_left);
    if (c->recache)
        fprintf(stderr, "recache%s%s%s\n", rc.marks & RKV_MARK_STALE ? " stale" : "",
                rc.marks & RKV_MARK_WON ? " won" : "", rc.marks & RKV_MARK_TAKEN ? " taken" : "");
    return CLI_EXIT_OK;
write_error:
    fprintf(stderr, "rkv-cli: get: writing the value failed: %s\n", strerror(errno));
    return CLI_EXIT_ERROR;
}

static int cmd_put(struct cli_ctx *x, const struct cli_command *c)
{
    uint64_t version;
    rkv_status st = rkv_put(x->client, c->key.s, c->key.len, c->value.s, c->value.len, &c->put,
                            &version);
    if (st != RKV_OK)
        return report(x, c, st);
    if (x->stdout_tty)
        printf("OK (version %llu)\n", (unsigned long long)version);
    return CLI_EXIT_OK;
}

static int cmd_del(struct cli_ctx *x, const struct cli_command *c)
{
    rkv_status st = rkv_delete(x->client, c->key.s, c->key.len);
    if (st != RKV_OK)
        return report(x, c, st);
    if (x->stdout_tty)
        puts("OK");
    return CLI_EXIT_OK;
}

static int cmd_incr(struct cli_ctx *x, const struct cli_command *c)
{
    uint64_t result;
    int64_t delta = (int64_t)c->delta;
    rkv_status st = rkv_incr(x->client, c->key.s, c->key.len, c->cmd == CLI_DECR ? -delta : delta,
                             &result);
    if (st != RKV_OK)
        return report(x, c, st);
    printf("%llu\n", (unsigned long long)result);
    return CLI_EXIT_OK;
}

static int stats_one(struct cli_ctx *x, const struct cli_command *c, unsigned shard)
{
    size_t len = 0;
    rkv_status st;
    for (;;) {
        st = rkv_stats(x->client, shard, x->buf, x->buf_len, &len);
        if (st != RKV_OK && st != RKV_BUFFER_TOO_SMALL)
            return report(x, c, st);
        if (len < x->buf_len && st == RKV_OK)
            break;
        if (len < x->buf_len || !grow(x, len + 1))
            return report(x, c, st == RKV_OK ? RKV_BUFFER_TOO_SMALL : st);
    }
    fwrite(x->buf, 1, len, stdout);
    if (len > 0 && x->buf[len - 1] != '\n')
        putchar('\n');
    return CLI_EXIT_OK;
}

static int cmd_stats(struct cli_ctx *x, const struct cli_command *c)
{
    unsigned shards = rkv_shard_count(x->client);
    if (!c->all_shards) {
        if (c->shard >= shards) {
            fprintf(stderr, "rkv-cli: stats: shard %u does not exist; there %s %u (0..%u)\n",
                    c->shard, shards == 1 ? "is" : "are", shards, shards - 1);
            return CLI_EXIT_ERROR;
        }
        return stats_one(x, c, c->shard);
    }
    int worst = CLI_EXIT_OK;
    for (unsigned s = 0; s < shards; s++) {
        if (shards > 1)
            printf("# shard %u\n", s);
        int rc = stats_one(x, c, s);
        worst = RKV_MAX(worst, rc);
    }
    return worst;
}

static int cmd_ping(struct cli_ctx *x, const struct cli_command *c)
{
    rkv_status st = rkv_ping(x->client);
    if (st != RKV_OK)
        return report(x, c, st);
    puts("PONG");
    return CLI_EXIT_OK;
}

static int cmd_flush(struct cli_ctx *x, const struct cli_command *c)
{
    rkv_status st = rkv_flush(x->client, c->delay);
    if (st != RKV_OK)
        return report(x, c, st);
    if (x->stdout_tty)
        puts("OK");
    return CLI_EXIT_OK;
}

static int run_command(struct cli_ctx *x, const struct cli_arg *args, size_t n, long line)
{
    struct cli_command c;
    char err[512];
    if (!cli_parse_command(args, n, &c, err, sizeof err)) {
        if (line > 0)
            fprintf(stderr, "rkv-cli: line %ld: %s\n", line, err);
        else
            fprintf(stderr, "rkv-cli: %s\n(rkv-cli --help shows the usage)\n", err);
        return CLI_EXIT_ERROR;
    }
    int rc = ensure_connected(x, &c);
    if (rc != CLI_EXIT_OK)
        return rc;
    switch (c.cmd) {
    case CLI_GET: rc = cmd_get(x, &c); break;
    case CLI_PUT: rc = cmd_put(x, &c); break;
    case CLI_DEL: rc = cmd_del(x, &c); break;
    case CLI_INCR:
    case CLI_DECR: rc = cmd_incr(x, &c); break;
    case CLI_STATS: rc = cmd_stats(x, &c); break;
    case CLI_PING: rc = cmd_ping(x, &c); break;
    case CLI_FLUSH: rc = cmd_flush(x, &c); break;
    }
    fflush(stdout);
    return rc;
}

/* Runs every line of stdin; the exit status is the worst of them. */
static int run_stdin(struct cli_ctx *x)
{
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    long lineno = 0;
    int worst = CLI_EXIT_OK;
    while ((got = getline(&line, &cap, stdin)) != -1) {
        size_t len = (size_t)got;
        lineno++;
        if (len > 0 && line[len - 1] == '\n')
            len--;
        struct cli_tokens toks;
        char err[256];
        if (!cli_tokenize(line, len, &toks, err, sizeof err)) {
            fprintf(stderr, "rkv-cli: line %ld: %s\n", lineno, err);
            worst = CLI_EXIT_ERROR;
            continue;
        }
        if (toks.count > 0) {
            int rc = run_command(x, toks.args, toks.count, lineno);
            worst = RKV_MAX(worst, rc);
        }
        cli_tokens_free(&toks);
    }
    if (ferror(stdin)) {
        fprintf(stderr, "rkv-cli: reading stdin failed: %s\n", strerror(errno));
        worst = CLI_EXIT_ERROR;
    }
    free(line);
    return worst;
}

int main(int argc, char **argv)
{
    struct cli_global g;
    int cmd_index;
    switch (cli_parse_global(argc, argv, &g, &cmd_index, stdout, stderr)) {
    case CLI_GLOBAL_RUN: break;
    case CLI_GLOBAL_EXIT_OK: return CLI_EXIT_OK;
    case CLI_GLOBAL_USAGE: return CLI_EXIT_ERROR;
    }
    struct cli_ctx x = { .g = &g, .stdout_tty = isatty(1) };
    int rc = CLI_EXIT_ERROR;
    if (!grow(&x, VALUE_BUF_START))
        goto out;
    if (cmd_index < argc) {
        size_t n = (size_t)(argc - cmd_index);
        struct cli_arg *args = calloc(n, sizeof *args);
        if (args == NULL) {
            fprintf(stderr, "rkv-cli: out of memory\n");
            goto out;
        }
        for (size_t i = 0; i < n; i++) {
            args[i].s = argv[cmd_index + (int)i];
            args[i].len = strlen(args[i].s);
        }
        rc = run_command(&x, args, n, 0);
        free(args);
    } else {
        rc = run_stdin(&x);
    }
out:
    if (fflush(stdout) != 0 && rc == CLI_EXIT_OK) {
        fprintf(stderr, "rkv-cli: writing stdout failed: %s\n", strerror(errno));
        rc = CLI_EXIT_ERROR;
    }
    rkv_close(x.client);
    free(x.buf);
    cli_global_free(&g);
    return rc;
}
