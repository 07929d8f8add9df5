/* server_list.c — see server_list.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server_list.h"
#include "util.h"

bool server_list_add(char **joined, unsigned *count, const char *value, bool allow_tcp, char *err,
                     size_t err_len)
{
    unsigned found = 0;
    for (const char *p = value;;) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        char uri[SERVER_URI_MAX + 1], scheme[8];
        const char *rest;
        if (n == 0) {
            snprintf(err, err_len,
                     "--server: '%s' has an empty URI; give shm://PATH or rdma://HOST:PORT", value);
            return false;
        }
        if (n > SERVER_URI_MAX) {
            snprintf(err, err_len, "--server: a URI is longer than %u bytes", SERVER_URI_MAX);
            return false;
        }
        memcpy(uri, p, n);
        uri[n] = '\0';
        bool tcp = rkv_uri_split(uri, scheme, sizeof scheme, &rest) && strcmp(scheme, "tcp") == 0;
        char host[256];
        uint16_t port;
        if (tcp && (!allow_tcp || !rkv_host_port(rest, host, sizeof host, &port))) {
            snprintf(err, err_len,
                     allow_tcp ? "--server: '%s' is not tcp://HOST:PORT"
                               : "--server: '%s' is a memcached address; this tool "
                                 "speaks rkv's protocol: use shm://PATH or rdma://HOST:PORT",
                     uri);
            return false;
        }
        if (!tcp && (!rkv_uri_split(uri, scheme, sizeof scheme, &rest) || *rest == '\0' ||
                     (strcmp(scheme, "shm") != 0 && strcmp(scheme, "rdma") != 0))) {
            snprintf(err, err_len,
                     "--server: '%s' is not a server URI; use shm://PATH or rdma://HOST:PORT%s",
                     uri, allow_tcp ? " (or tcp://HOST:PORT with --protocol memcache)" : "");
            return false;
        }
        found++;
        if (comma == NULL)
            break;
        p = comma + 1;
    }
    size_t old = *joined ? strlen(*joined) : 0;
    char *s = realloc(*joined, old + strlen(value) + 2);
    if (s == NULL) {
        snprintf(err, err_len, "--server: out of memory");
        return false;
    }
    if (old > 0)
        s[old++] = ',';
    strcpy(s + old, value);
    *joined = s;
    *count += found;
    return true;
}
