/* util.h — small helpers both sides share: sizes, numbers, URIs, clocks. */
#ifndef RKV_UTIL_H
#define RKV_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#define RKV_ARRAY_SIZE(a)  (sizeof(a) / sizeof((a)[0]))
#define RKV_MIN(a, b)      ((a) < (b) ? (a) : (b))
#define RKV_MAX(a, b)      ((a) > (b) ? (a) : (b))
#define RKV_ALIGN_UP(x, a) (((x) + (a)-1) / (a) * (a))
#define RKV_LIKELY(x)      __builtin_expect(!!(x), 1)
#define RKV_UNLIKELY(x)    __builtin_expect(!!(x), 0)

/* The `type` whose `member` ptr points at: how a transport gets from the
 * generic struct it embeds (transport.h) back to its own. The unevaluated
 * comparison makes a ptr of another type than the member a compile error. */
#define RKV_CONTAINER_OF(ptr, type, member)                  \
    ((type *)(void *)((char *)(ptr)-offsetof(type, member) + \
                      0 * sizeof(&((type *)0)->member == (ptr))))

/* "4096", "64K", "256M", "4G", "1T" (binary units, optional "iB"/"B").
 * Returns false on anything else, on 0, or on overflow. */
bool rkv_parse_size(const char *s, uint64_t *out);

/* A whole decimal number in [min, max]; false on junk, sign errors or range. */
bool rkv_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out);

/* A stored value read as memcached's incr/decr reads it (safe_strtoull):
 * optional leading whitespace and '+', 1..20 digits that fit a u64, then
 * the end, a NUL or whitespace (memcached pads a shrunk counter with
 * spaces); a '-' only on zero. False on anything else. */
bool rkv_parse_counter(const void *text, size_t n, uint64_t *out);

/* "1.5 GiB" style text for messages. */
const char *rkv_format_size(uint64_t bytes, char *buf, size_t len);

/* Split "scheme://rest". Returns false when there is no "://" or the scheme
 * is longer than scheme_len-1. */
bool rkv_uri_split(const char *uri, char *scheme, size_t scheme_len, const char **rest);

/* Split "host:port" (IPv6 as "[addr]:port"); false when malformed. */
bool rkv_host_port(const char *s, char *host, size_t host_len, uint16_t *port);

/* `bytes` of zeroed memory in a mapping of its own (page-aligned, so any
 * alignment up to a page): its pages cost no RSS until written, and reads
 * of unwritten ones map the zero page. For bookkeeping kept per thread slot
 * or per size class that only the slots and classes in use touch. NULL
 * when out of memory. Give it back with rkv_zeroed_unmap(p, bytes). */
void *rkv_zeroed_map(size_t bytes);
void rkv_zeroed_unmap(void *p, size_t bytes);

/* Ask for the cache line at p with intent to write (x86 PREFETCHW: the line
 * comes exclusive, so the store that follows needs no second request to
 * take it from another core's cache, as a line a plain prefetch fetched
 * shared would). __builtin_prefetch(p, 1, 3) emits a plain prefetch there
 * unless the whole build targets PRFCHW; 0F 0D /1 runs as a no-op on the
 * x86-64 processors without it. */
static inline void rkv_prefetch_write(const void *p)
{
#if defined(__x86_64__)
    __asm__ volatile("prefetchw %0" : : "m"(*(const volatile char *)p));
#else
    __builtin_prefetch(p, 1, 3);
#endif
}

static inline uint64_t rkv_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#endif
