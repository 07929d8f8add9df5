/* util.c — see util.h. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "util.h"

bool rkv_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    if (s == NULL || !isdigit((unsigned char)s[0]))
        return false;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < min || v > max)
        return false;
    *out = v;
    return true;
}

bool rkv_parse_counter(const void *text, size_t n, uint64_t *out)
{
    const uint8_t *v = text;
    size_t i = 0;
    uint64_t x = 0;
    bool neg = false, overflow = false;
    while (i < n && (v[i] == ' ' || (v[i] >= '\t' && v[i] <= '\r')))
        i++;
    if (i < n && (v[i] == '+' || v[i] == '-'))
        neg = v[i++] == '-';
    size_t digits = i;
    while (i < n && v[i] >= '0' && v[i] <= '9') {
        unsigned d = (unsigned)(v[i] - '0');
        if (x > (UINT64_MAX - d) / 10)
            overflow = true;
        else
            x = x * 10 + d;
        i++;
    }
    if (i == digits || overflow)
        return false;
    if (i < n && !(v[i] == 0 || v[i] == ' ' || (v[i] >= '\t' && v[i] <= '\r')))
        return false;
    x = neg ? 0 - x : x;
    if (neg && (int64_t)x < 0)
        return false; /* a negative number */
    *out = x;
    return true;
}

bool rkv_parse_size(const char *s, uint64_t *out)
{
    if (s == NULL || !isdigit((unsigned char)s[0]))
        return false;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || v == 0)
        return false;
    unsigned shift = 0;
    switch (toupper((unsigned char)*end)) {
    case 'K':
        shift = 10;
        end++;
        break;
    case 'M':
        shift = 20;
        end++;
        break;
    case 'G':
        shift = 30;
        end++;
        break;
    case 'T':
        shift = 40;
        end++;
        break;
    default: break;
    }
    if (shift && (end[0] == 'i' || end[0] == 'I'))
        end++;
    if (end[0] == 'B' || end[0] == 'b')
        end++;
    if (*end != '\0' || (shift && v > (UINT64_MAX >> shift)))
        return false;
    *out = (uint64_t)v << shift;
    return true;
}

const char *rkv_format_size(uint64_t bytes, char *buf, size_t len)
{
    static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
    double v = (double)bytes;
    unsigned u = 0;
    while (v >= 1024 && u + 1 < RKV_ARRAY_SIZE(units)) {
        v /= 1024;
        u++;
    }
    if (u == 0 || v == (double)(uint64_t)v)
        snprintf(buf, len, "%llu %s", (unsigned long long)v, units[u]);
    else
        snprintf(buf, len, "%.1f %s", v, units[u]);
    return buf;
}

bool rkv_uri_split(const char *uri, char *scheme, size_t scheme_len, const char **rest)
{
    const char *sep = uri ? strstr(uri, "://") : NULL;
    if (sep == NULL || sep == uri || (size_t)(sep - uri) >= scheme_len)
        return false;
    memcpy(scheme, uri, (size_t)(sep - uri));
    scheme[sep - uri] = '\0';
    *rest = sep + 3;
    return true;
}

bool rkv_host_port(const char *s, char *host, size_t host_len, uint16_t *port)
{
    const char *colon;
    const char *h = s;
    size_t hl;
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (close == NULL || close[1] != ':')
            return false;
        h = s + 1;
        hl = (size_t)(close - h);
        colon = close + 1;
    } else {
        colon = strrchr(s, ':');
        if (colon == NULL)
            return false;
        hl = (size_t)(colon - s);
    }
    uint64_t p;
    if (hl == 0 || hl >= host_len || !rkv_parse_u64(colon + 1, 1, 65535, &p))
        return false;
    memcpy(host, h, hl);
    host[hl] = '\0';
    *port = (uint16_t)p;
    return true;
}

void *rkv_zeroed_map(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

void rkv_zeroed_unmap(void *p, size_t bytes)
{
    if (p != NULL)
        munmap(p, bytes);
}
