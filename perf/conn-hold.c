/* conn-hold.c — opens N librkv connections to one server and holds them.
 *
 * The client half of perf/conn-cost.py, which measures what a connection
 * costs the server: it connects N handles (no location cache, so the
 * holder stays small), optionally has each do one PUT of VALUE bytes (a
 * value past max_msg travels through the connection's staging area), then
 * prints "ready N" and waits for a line (or end of file) on stdin before
 * closing them all. Errors go to stderr with the handle's reason.
 *
 *   conn-hold URI N [VALUE_BYTES]
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rkv.h"

static int usage(void)
{
    fprintf(stderr, "usage: conn-hold URI N [VALUE_BYTES]\n");
    return 2;
}

/* A decimal count in [0, max], or -1. */
static long parse_count(const char *s, long max)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    return errno != 0 || *s == '\0' || *end != '\0' || v < 0 || v > max ? -1 : v;
}

/* One PUT of `len` bytes under a key of its own. */
static int put_once(rkv_client *c, long i, const char *value, size_t len)
{
    char key[32];
    int klen = snprintf(key, sizeof key, "conn-hold-%ld", i);
    rkv_status st = rkv_put(c, key, (size_t)klen, value, len, NULL, NULL);
    if (st != RKV_OK) {
        fprintf(stderr, "conn-hold: put on connection %ld: %s\n", i, rkv_last_error(c));
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3 || argc > 4)
        return usage();
    long n = parse_count(argv[2], 1000000);
    long vlen = argc == 4 ? parse_count(argv[3], 16l << 20) : 0;
    if (n < 0 || vlen < 0)
        return usage();
    rkv_client **cs = calloc((size_t)n + 1, sizeof *cs);
    char *value = malloc((size_t)vlen + 1);
    struct rkv_options o = { .location_cache = (unsigned)-1 };
    int rc = 1;
    long i;
    if (cs == NULL || value == NULL)
        goto out;
    memset(value, 'v', (size_t)vlen);
    for (i = 0; i < n; i++) {
        if (rkv_connect(argv[1], &o, &cs[i]) != RKV_OK) {
            fprintf(stderr, "conn-hold: connection %ld: %s\n", i, rkv_last_error(NULL));
            goto out;
        }
        if (vlen > 0 && put_once(cs[i], i, value, (size_t)vlen) != 0)
            goto out;
    }
    printf("ready %ld\n", n);
    fflush(stdout);
    char line[16];
    if (fgets(line, sizeof line, stdin) == NULL && ferror(stdin))
        goto out;
    rc = 0;
out:
    for (i = 0; cs != NULL && i < n; i++)
        rkv_close(cs[i]);
    free(cs);
    free(value);
    return rc;
}
