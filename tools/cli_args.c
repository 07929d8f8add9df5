/* cli_args.c — see cli_args.h. */
#include <ctype.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cli_args.h"
#include "server_list.h"
#include "util.h"

void cli_usage(FILE *out)
{
    fputs("Usage: rkv-cli -s URI [--auth SECRET] [--timeout MS] [COMMAND [ARGS...]]\n"
          "Talks to rkv servers through librkv. Without a COMMAND, reads commands from\n"
          "stdin, one per line.\n"
          "\n"
          "Options:\n"
          "  -s, --server URI     shm://PATH or rdma://HOST:PORT; repeat (or separate with\n"
          "                       commas) to shard keys over several servers\n"
          "      --auth SECRET    shared secret the servers expect\n"
          "      --timeout MS     per-operation timeout in milliseconds (1..3600000)\n"
          "  -h, --help           this text;  -V, --version  the version\n"
          "\n"
          "Commands:\n"
          "  get KEY [--meta] [--recache SECONDS]\n"
          "                       print the value, then a newline (always, tty or not);\n"
          "                       --meta also prints 'version V flags F ttl T' to stderr;\n"
          "                       --recache prints 'recache' and stale, won or taken to\n"
          "                       stderr: won when this call is the one to refresh a stale\n"
          "                       item, or one with less than SECONDS (0: stale only) to live\n"
          "  put KEY VALUE [--ttl SECONDS|never] [--flags N] [--add|--replace|--cas VERSION]\n"
          "                       store VALUE (set is an alias); --add only if absent,\n"
          "                       --replace only if present, --cas only if the item's\n"
          "                       version is VERSION (see get --meta); --ttl 0 (the\n"
          "                       default) takes the server's --default-ttl, 'never'\n"
          "                       overrides it\n"
          "  del KEY              delete (delete is an alias)\n"
          "  incr KEY [DELTA]     add DELTA (default 1) to a decimal value; print it\n"
          "                       (wraps past 18446744073709551615 to 0, as memcached)\n"
          "  decr KEY [DELTA]     subtract DELTA (saturating at 0); print the result\n"
          "  stats [SHARD]        the server's statistics as 'name value' lines\n"
          "  ping                 round trip to every server; prints PONG\n"
          "  flush [DELAY]        remove every item from every server, now or in DELAY\n"
          "                       seconds (memcached's flush_all)\n"
          "Writes print nothing on success unless stdout is a terminal (then OK).\n"
          "'--' ends a command's options, so `put k -- --ttl` stores the value \"--ttl\".\n"
          "\n"
          "Stdin lines use the same syntax; \"...\" quotes allow spaces and the escapes\n"
          "\\xHH \\n \\r \\t \\0 \\\\ \\\" (binary keys and values), '...' is taken literally, and\n"
          "lines starting with # are comments. Every line is run; the exit status is\n"
          "the worst one.\n"
          "\n"
          "Exit status: 0 success; 1 a get/del/incr/decr of an absent key, or a put\n"
          "refused (--add: exists, --replace: absent, --cas: version mismatch);\n"
          "2 bad usage, connection or server error.\n",
          out);
}

static void global_error(FILE *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void global_error(FILE *err, const char *fmt, ...)
{
    va_list ap;
    fputs("rkv-cli: ", err);
    va_start(ap, fmt);
    vfprintf(err, fmt, ap);
    va_end(ap);
    fputs("\n(rkv-cli --help shows the usage)\n", err);
}

/* The value of an option given as "--opt V", "--opt=V", "-sV" or "-s V". */
static const char *option_value(int argc, char **argv, int *i, const char *inline_value)
{
    if (inline_value != NULL)
        return inline_value;
    if (*i + 1 >= argc)
        return NULL;
    return argv[++*i];
}

enum cli_global_result cli_parse_global(int argc, char **argv, struct cli_global *g, int *cmd_index,
                                        FILE *out, FILE *err)
{
    memset(g, 0, sizeof *g);
    int i;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *inl = NULL;
        char name[32];
        if (a[0] != '-')
            break; /* the command */
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (a[1] == '-') {
            const char *eq = strchr(a, '=');
            size_t n = eq ? (size_t)(eq - a) : strlen(a);
            if (n >= sizeof name)
                n = sizeof name - 1;
            memcpy(name, a, n);
            name[n] = '\0';
            inl = eq ? eq + 1 : NULL;
        } else {
            snprintf(name, sizeof name, "-%c", a[1]);
            inl = a[1] && a[2] ? a + 2 : NULL;
        }
        if (strcmp(name, "-h") == 0 || strcmp(name, "--help") == 0) {
            cli_usage(out);
            goto exit_ok;
        }
        if (strcmp(name, "-V") == 0 || strcmp(name, "--version") == 0) {
            fprintf(out, "rkv-cli %s\n", RKV_VERSION_STRING);
            goto exit_ok;
        }
        bool server = strcmp(name, "-s") == 0 || strcmp(name, "--server") == 0;
        bool auth = strcmp(name, "--auth") == 0;
        bool timeout = strcmp(name, "--timeout") == 0;
        if (!server && !auth && !timeout) {
            global_error(err, "unknown option '%s' (options go before the command)", a);
            goto usage;
        }
        const char *v = option_value(argc, argv, &i, inl);
        if (v == NULL) {
            global_error(err, "%s needs a value", name);
            goto usage;
        }
        if (server) {
            char msg[640];
            unsigned count = 0;
            if (!server_list_add(&g->servers, &count, v, false, msg, sizeof msg)) {
                global_error(err, "%s", msg);
                goto usage;
            }
        }
        if (auth) {
            if (*v == '\0') {
                global_error(err, "--auth: the secret is empty");
                goto usage;
            }
            g->auth = v;
        }
        if (timeout) {
            uint64_t ms;
            if (!rkv_parse_u64(v, 1, 3600000, &ms)) {
                global_error(err, "--timeout: '%s' is not a number of milliseconds in 1..3600000", v);
                goto usage;
            }
            g->timeout_ms = (unsigned)ms;
        }
    }
    if (g->servers == NULL) {
        global_error(err, "no server given; pass -s URI (e.g. -s shm:///run/rkv/rkv.sock)");
        goto usage;
    }
    *cmd_index = i;
    return CLI_GLOBAL_RUN;

exit_ok:
    cli_global_free(g);
    return CLI_GLOBAL_EXIT_OK;
usage:
    cli_global_free(g);
    return CLI_GLOBAL_USAGE;
}

void cli_global_free(struct cli_global *g)
{
    free(g->servers);
    g->servers = NULL;
}

/* ---- commands ---- */

static bool cli_fail(char *err, size_t err_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static bool cli_fail(char *err, size_t err_len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
    return false;
}

static bool arg_is(const struct cli_arg *a, const char *s)
{
    return a->len == strlen(s) && memcmp(a->s, s, a->len) == 0;
}

/* A decimal argument: rkv_parse_u64 on a NUL-free copy. */
static bool arg_u64(const struct cli_arg *a, uint64_t min, uint64_t max, uint64_t *out)
{
    char buf[32];
    if (a->len == 0 || a->len >= sizeof buf || memchr(a->s, '\0', a->len) != NULL)
        return false;
    memcpy(buf, a->s, a->len);
    buf[a->len] = '\0';
    return rkv_parse_u64(buf, min, max, out);
}

static bool check_key(const struct cli_command *c, char *err, size_t err_len)
{
    if (c->key.len == 0)
        return cli_fail(err, err_len, "%s: the key is empty; keys are 1..%u bytes", c->name,
                        CLI_MAX_KEY);
    if (c->key.len > CLI_MAX_KEY)
        return cli_fail(err, err_len, "%s: the key is %zu bytes; keys are 1..%u bytes", c->name,
                        c->key.len, CLI_MAX_KEY);
    return true;
}

static const struct {
    const char *name; /* as typed */
    enum cli_cmd cmd;
    size_t min_pos; /* positional arguments after the command */
    size_t max_pos;
    const char *usage; /* for messages */
} commands[] = {
    { "get", CLI_GET, 1, 1, "get KEY [--meta] [--recache SECONDS]" },
    { "put", CLI_PUT, 2, 2, "put KEY VALUE [--ttl S] [--flags N] [--add|--replace|--cas V]" },
    { "set", CLI_PUT, 2, 2, "set KEY VALUE [--ttl S] [--flags N] [--add|--replace|--cas V]" },
    { "del", CLI_DEL, 1, 1, "del KEY" },
    { "delete", CLI_DEL, 1, 1, "delete KEY" },
    { "incr", CLI_INCR, 1, 2, "incr KEY [DELTA]" },
    { "decr", CLI_DECR, 1, 2, "decr KEY [DELTA]" },
    { "stats", CLI_STATS, 0, 1, "stats [SHARD]" },
    { "ping", CLI_PING, 0, 0, "ping" },
    { "flush", CLI_FLUSH, 0, 1, "flush [DELAY]" },
};

/* A put/get option at args[*i]; advances *i past its value. */
static bool command_option(struct cli_command *c, const struct cli_arg *args, size_t n, size_t *i,
                           char *err, size_t err_len)
{
    const struct cli_arg *a = &args[*i];
    uint64_t v;
    int modes = 0;
    if (c->cmd == CLI_GET && arg_is(a, "--meta")) {
        c->meta = true;
        return true;
    }
    if (c->cmd == CLI_GET && arg_is(a, "--recache")) {
        if (*i + 1 >= n || !arg_u64(&args[*i + 1], 0, UINT32_MAX, &v))
            return cli_fail(err, err_len, "%s: --recache needs a number of seconds in 0..%u",
                            c->name, UINT32_MAX);
        c->recache = true;
        c->recache_ttl = (uint32_t)v;
        ++*i;
        return true;
    }
    if (c->cmd != CLI_PUT)
        return cli_fail(err, err_len, "%s: unknown option '%.*s'", c->name, (int)a->len, a->s);
    if (arg_is(a, "--add") || arg_is(a, "--replace")) {
        modes = c->put.mode != RKV_SET;
        c->put.mode = arg_is(a, "--add") ? RKV_ADD : RKV_REPLACE;
    } else if (arg_is(a, "--ttl") || arg_is(a, "--flags") || arg_is(a, "--cas")) {
        if (*i + 1 >= n)
            return cli_fail(err, err_len, "%s: %.*s needs a value", c->name, (int)a->len, a->s);
        const struct cli_arg *val = &args[++*i];
        if (arg_is(a, "--ttl")) {
            if (arg_is(val, "never"))
                v = RKV_TTL_NEVER;
            else if (!arg_u64(val, 0, RKV_TTL_NEVER - 1, &v))
                return cli_fail(err, err_len,
                                "%s: --ttl: '%.*s' is not a number of seconds in 0..%u "
                                "or 'never'",
                                c->name, (int)val->len, val->s, RKV_TTL_NEVER - 1);
            c->put.ttl = (uint32_t)v;
        } else if (arg_is(a, "--flags")) {
            if (!arg_u64(val, 0, UINT32_MAX, &v))
                return cli_fail(err, err_len, "%s: --flags: '%.*s' is not a whole number in 0..%u",
                                c->name, (int)val->len, val->s, UINT32_MAX);
            c->put.user_flags = (uint32_t)v;
        } else {
            if (!arg_u64(val, 1, UINT64_MAX, &v))
                return cli_fail(err, err_len,
                                "%s: --cas: '%.*s' is not an item version (1..%llu; "
                                "get --meta prints it)",
                                c->name, (int)val->len, val->s, (unsigned long long)UINT64_MAX);
            modes = c->put.mode != RKV_SET;
            c->put.mode = RKV_CAS;
            c->put.cas = v;
        }
    } else {
        return cli_fail(err, err_len, "%s: unknown option '%.*s'", c->name, (int)a->len, a->s);
    }
    if (modes)
        return cli_fail(err, err_len, "%s: give at most one of --add, --replace and --cas", c->name);
    return true;
}

bool cli_parse_command(const struct cli_arg *args, size_t n, struct cli_command *c, char *err,
                       size_t err_len)
{
    struct cli_arg pos[2];
    size_t npos = 0, k;
    memset(c, 0, sizeof *c);
    if (n == 0)
        return cli_fail(err, err_len,
                        "no command; use get, put, del, incr, decr, stats, ping or flush");
    for (k = 0; k < RKV_ARRAY_SIZE(commands); k++)
        if (arg_is(&args[0], commands[k].name))
            break;
    if (k == RKV_ARRAY_SIZE(commands))
        return cli_fail(err, err_len,
                        "unknown command '%.*s'; use get, put, del, incr, decr, stats, ping or flush",
                        (int)args[0].len, args[0].s);
    c->cmd = commands[k].cmd;
    c->name = commands[k].name;
    c->delta = 1;
    c->all_shards = true;

    bool options_done = false;
    for (size_t i = 1; i < n; i++) {
        const struct cli_arg *a = &args[i];
        if (!options_done && arg_is(a, "--")) {
            options_done = true;
            continue;
        }
        if (!options_done && a->len > 2 && a->s[0] == '-' && a->s[1] == '-') {
            if (!command_option(c, args, n, &i, err, err_len))
                return false;
            continue;
        }
        if (npos == commands[k].max_pos)
            return cli_fail(err, err_len, "%s: too many arguments; usage: %s", c->name,
                            commands[k].usage);
        pos[npos++] = *a;
    }
    if (npos < commands[k].min_pos)
        return cli_fail(err, err_len, "%s: missing arguments; usage: %s", c->name, commands[k].usage);

    uint64_t v;
    switch (c->cmd) {
    case CLI_PUT:
        c->value = pos[1];
        /* fall through */
    case CLI_GET:
    case CLI_DEL: c->key = pos[0]; return check_key(c, err, err_len);
    case CLI_INCR:
    case CLI_DECR:
        c->key = pos[0];
        if (npos == 2) {
            if (!arg_u64(&pos[1], 0, INT64_MAX, &v))
                return cli_fail(err, err_len, "%s: DELTA '%.*s' is not a whole number in 0..%lld",
                                c->name, (int)pos[1].len, pos[1].s, (long long)INT64_MAX);
            c->delta = v;
        }
        return check_key(c, err, err_len);
    case CLI_STATS:
        if (npos == 1) {
            if (!arg_u64(&pos[0], 0, UINT32_MAX, &v))
                return cli_fail(err, err_len,
                                "stats: SHARD '%.*s' is not a shard number (0 = first server)",
                                (int)pos[0].len, pos[0].s);
            c->shard = (unsigned)v;
            c->all_shards = false;
        }
        return true;
    case CLI_PING: return true;
    case CLI_FLUSH:
        if (npos == 1) {
            if (!arg_u64(&pos[0], 0, UINT32_MAX, &v))
                return cli_fail(err, err_len,
                                "flush: DELAY '%.*s' is not a whole number of seconds in "
                                "0..%u",
                                (int)pos[0].len, pos[0].s, UINT32_MAX);
            c->delay = (uint32_t)v;
        }
        return true;
    }
    return true;
}

/* ---- tokenizer ---- */

static int hex_digit(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    ch = (char)tolower((unsigned char)ch);
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    return -1;
}

bool cli_tokenize(const char *line, size_t len, struct cli_tokens *out, char *err, size_t err_len)
{
    memset(out, 0, sizeof *out);
    /* A token is never longer than its source; every token takes at least
     * one source byte plus a separator, so len/2 + 1 tokens at most. */
    out->storage = malloc(len + 1 + (len / 2 + 1));
    out->args = calloc(len / 2 + 1, sizeof *out->args);
    if (out->storage == NULL || out->args == NULL) {
        cli_fail(err, err_len, "out of memory");
        goto fail;
    }
    char *w = out->storage;
    size_t i = 0;
    while (i < len) {
        while (i < len && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r'))
            i++;
        if (i == len)
            break;
        if (out->count == 0 && line[i] == '#')
            break; /* comment line */
        char *start = w;
        char quote = line[i] == '"' || line[i] == '\'' ? line[i] : 0;
        size_t opened = i;
        if (quote)
            i++;
        for (;;) {
            if (i == len) {
                if (quote) {
                    cli_fail(err, err_len, "unterminated %c quote starting at column %zu", quote,
                             opened + 1);
                    goto fail;
                }
                break;
            }
            char ch = line[i];
            if (!quote && (ch == ' ' || ch == '\t' || ch == '\r'))
                break;
            if (quote && ch == quote) {
                i++;
                if (i < len && line[i] != ' ' && line[i] != '\t' && line[i] != '\r') {
                    cli_fail(err, err_len,
                             "closing quote at column %zu must be followed by a space", i);
                    goto fail;
                }
                break;
            }
            if (quote == '\'' && ch == '\\' && i + 1 < len && line[i + 1] == '\'') {
                *w++ = '\'';
                i += 2;
                continue;
            }
            if (quote == '"' && ch == '\\') {
                if (i + 1 == len) {
                    cli_fail(err, err_len, "a backslash ends the line at column %zu", i + 1);
                    goto fail;
                }
                char e = line[i + 1];
                i += 2;
                switch (e) {
                case 'n': *w++ = '\n'; break;
                case 'r': *w++ = '\r'; break;
                case 't': *w++ = '\t'; break;
                case '0': *w++ = '\0'; break;
                case '\\': *w++ = '\\'; break;
                case '"': *w++ = '"'; break;
                case 'x': {
                    int hi = i < len ? hex_digit(line[i]) : -1;
                    int lo = i + 1 < len ? hex_digit(line[i + 1]) : -1;
                    if (hi < 0 || lo < 0) {
                        cli_fail(err, err_len, "\\x at column %zu needs two hex digits", i - 1);
                        goto fail;
                    }
                    *w++ = (char)(hi << 4 | lo);
                    i += 2;
                    break;
                }
                default:
                    cli_fail(err, err_len,
                             "unknown escape \\%c at column %zu; use \\xHH, \\n, \\r, \\t, \\0, "
                             "\\\\ or \\\"",
                             e, i - 1);
                    goto fail;
                }
                continue;
            }
            *w++ = ch;
            i++;
        }
        out->args[out->count].s = start;
        out->args[out->count].len = (size_t)(w - start);
        out->count++;
        *w++ = '\0';
    }
    return true;

fail:
    cli_tokens_free(out);
    return false;
}

void cli_tokens_free(struct cli_tokens *t)
{
    free(t->storage);
    free(t->args);
    memset(t, 0, sizeof *t);
}

int cli_exit_code(rkv_status s)
{
    switch (s) {
    case RKV_OK: return CLI_EXIT_OK;
    case RKV_NOT_FOUND:
    case RKV_EXISTS:
    case RKV_NOT_STORED:
    case RKV_CAS_MISMATCH: return CLI_EXIT_MISS;
    default: return CLI_EXIT_ERROR;
    }
}

void cli_print_escaped(FILE *out, const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '\\')
            fputs("\\\\", out);
        else if (ch >= 0x21 && ch < 0x7f)
            fputc(ch, out);
        else
            fprintf(out, "\\x%02x", ch);
    }
}
