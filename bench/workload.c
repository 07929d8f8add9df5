/* workload.c — see workload.h. */
#include <math.h>
#include <string.h>

#include "workload.h"

#define GOLDEN 0x9e3779b97f4a7c15ull

/* ---- random numbers ---- */

uint64_t wl_mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

void wl_rng_seed(struct wl_rng *r, uint64_t seed)
{
    for (unsigned i = 0; i < 4; i++) {
        seed += GOLDEN;
        r->s[i] = wl_mix64(seed);
    }
    if ((r->s[0] | r->s[1] | r->s[2] | r->s[3]) == 0)
        r->s[0] = 1;
}

static inline uint64_t rotl(uint64_t x, unsigned k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t wl_rng_next(struct wl_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double wl_rng_double(struct wl_rng *r)
{
    return (double)(wl_rng_next(r) >> 11) * 0x1.0p-53;
}

uint64_t wl_rng_below(struct wl_rng *r, uint64_t n)
{
    /* Lemire's multiply-and-reject: unbiased, usually one multiplication. */
    unsigned __int128 m = (unsigned __int128)wl_rng_next(r) * n;
    uint64_t low = (uint64_t)m;
    if (low < n) {
        uint64_t threshold = -n % n;
        while (low < threshold) {
            m = (unsigned __int128)wl_rng_next(r) * n;
            low = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}

/* ---- zipfian ---- */

/* Exact sums cost one pow() per key; past this many keys the tail is
 * summed with Euler–Maclaurin, which is accurate to ~1e-12 there. */
#define ZETA_EXACT_LIMIT 10000000ull

static double zeta(uint64_t n, double theta)
{
    uint64_t exact = n < ZETA_EXACT_LIMIT ? n : ZETA_EXACT_LIMIT;
    double sum = 0;
    for (uint64_t i = 1; i <= exact; i++)
        sum += 1.0 / pow((double)i, theta);
    if (n == exact)
        return sum;
    /* sum_{i=m+1..n} f(i) ≈ ∫_m^n f + (f(n) - f(m))/2 + (f'(n) - f'(m))/12 */
    double m = (double)exact, nn = (double)n, s = 1.0 - theta;
    double integral = (pow(nn, s) - pow(m, s)) / s;
    double ends = (pow(nn, -theta) - pow(m, -theta)) / 2;
    double slope = (-theta * pow(nn, -theta - 1) + theta * pow(m, -theta - 1)) / 12;
    return sum + integral + ends + slope;
}

void wl_zipf_init(struct wl_zipf *z, uint64_t n, double theta)
{
    z->n = n;
    z->theta = theta;
    z->alpha = 1.0 / (1.0 - theta);
    z->zetan = zeta(n, theta);
    double zeta2 = zeta(2, theta);
    z->eta = (1.0 - pow(2.0 / (double)n, 1.0 - theta)) / (1.0 - zeta2 / z->zetan);
    z->half_pow = 1.0 + pow(0.5, theta);
}

uint64_t wl_zipf_next(const struct wl_zipf *z, struct wl_rng *r)
{
    double u = wl_rng_double(r);
    double uz = u * z->zetan;
    if (uz < 1.0 || z->n == 1)
        return 0;
    if (uz < z->half_pow)
        return 1;
    uint64_t rank = (uint64_t)((double)z->n * pow(z->eta * u - z->eta + 1.0, z->alpha));
    return rank < z->n ? rank : z->n - 1;
}

double wl_zipf_probability(const struct wl_zipf *z, uint64_t rank)
{
    return 1.0 / (pow((double)(rank + 1), z->theta) * z->zetan);
}

/* ---- permutation ---- */

void wl_perm_init(struct wl_perm *p, uint64_t n, uint64_t seed)
{
    unsigned bits = 0;
    while (bits < 64 && ((n - 1) >> bits) != 0)
        bits++;
    p->n = n;
    p->mask = bits == 64 ? UINT64_MAX : (UINT64_C(1) << bits) - 1;
    p->shift = bits / 2 ? bits / 2 : 1;
    p->key = wl_mix64(seed ^ GOLDEN) & p->mask;
}

/* A bijection of [0, mask]: odd multiplications and right xor-shifts are
 * each invertible modulo a power of two. */
static uint64_t perm_round(const struct wl_perm *p, uint64_t x)
{
    x ^= p->key;
    x = (x * 0xbf58476d1ce4e5b9ull) & p->mask;
    x ^= x >> p->shift;
    x = (x * 0x94d049bb133111ebull) & p->mask;
    x ^= x >> p->shift;
    x = (x * 0xd6e8feb86659fd93ull) & p->mask;
    x ^= x >> p->shift;
    return x;
}

uint64_t wl_perm_apply(const struct wl_perm *p, uint64_t x)
{
    /* Cycle-walking: the domain is < 2n, so on average < 2 rounds. */
    do {
        x = perm_round(p, x);
    } while (x >= p->n);
    return x;
}

/* ---- keys ---- */

static const uint64_t pow10_of[20] = {
    1ull,
    10ull,
    100ull,
    1000ull,
    10000ull,
    100000ull,
    1000000ull,
    10000000ull,
    100000000ull,
    1000000000ull,
    10000000000ull,
    100000000000ull,
    1000000000000ull,
    10000000000000ull,
    100000000000000ull,
    1000000000000000ull,
    10000000000000000ull,
    100000000000000000ull,
    1000000000000000000ull,
    10000000000000000000ull,
};

/* Digits of v from its bit length (log10(2) ~ 1233/4096), corrected by one
 * compare: no division (a key is formatted per operation). */
static unsigned decimal_digits(uint64_t v)
{
    uint64_t u = v | 1; /* 0 has one digit, as 1 */
    unsigned t = (unsigned)((64 - __builtin_clzll(u)) * 1233) >> 12;
    return t + (u >= pow10_of[t]);
}

unsigned wl_key_min_len(uint64_t idx)
{
    return 1 + decimal_digits(idx);
}

unsigned wl_key_len(uint64_t idx, unsigned min, unsigned max)
{
    unsigned len = min;
    if (max > min)
        len = min + (unsigned)(wl_mix64(idx ^ 0x6b65796c656e6774ull) % (max - min + 1));
    unsigned need = wl_key_min_len(idx);
    return len < need ? need : len;
}

/* buf[from, to) = '0': 8-byte stores (the last one overlapping), no call. */
static void fill_zeros(char *buf, unsigned from, unsigned to)
{
    static const char zeros[8] = "00000000";
    if (to - from < 8) {
        for (unsigned p = from; p < to; p++)
            buf[p] = '0';
        return;
    }
    for (unsigned p = from; p + 8 <= to; p += 8)
        memcpy(buf + p, zeros, 8);
    memcpy(buf + to - 8, zeros, 8);
}

unsigned wl_format_key(char *buf, uint64_t idx, unsigned len)
{
    static const char pairs[] = "00010203040506070809101112131415161718192021222324"
                                "25262728293031323334353637383940414243444546474849"
                                "50515253545556575859606162636465666768697071727374"
                                "75767778798081828384858687888990919293949596979899";
    unsigned i = len - 1;
    buf[0] = 'k';
    fill_zeros(buf, 1, len);                  /* the padding first: the digits overwrite its end */
    for (; i >= 1 && idx > UINT32_MAX; i--) { /* digits above 32 bits: one a division */
        buf[i] = (char)('0' + idx % 10);
        idx /= 10;
    }
    uint32_t v = (uint32_t)idx;     /* the rest in 32-bit arithmetic */
    if (i >= 8 && v < 100000000u) { /* the usual: 8 digits (its zeros are
                                       the padding's), four pairs, no loop */
        uint32_t hi = v / 10000, lo = v % 10000;
        memcpy(buf + i - 7, pairs + 2 * (hi / 100), 2);
        memcpy(buf + i - 5, pairs + 2 * (hi % 100), 2);
        memcpy(buf + i - 3, pairs + 2 * (lo / 100), 2);
        memcpy(buf + i - 1, pairs + 2 * (lo % 100), 2);
        return len;
    }
    for (; i >= 2 && v >= 10; i -= 2) { /* two digits a division */
        unsigned r = v % 100;
        v /= 100;
        buf[i] = pairs[2 * r + 1];
        buf[i - 1] = pairs[2 * r];
    }
    if (i >= 1 && v != 0) /* one digit left (the lowest, if short) */
        buf[i] = (char)('0' + v % 10);
    return len;
}

/* ---- values ---- */

static void put_le64(uint8_t *p, uint64_t v)
{
    for (unsigned i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static uint64_t filler_seed(uint64_t idx, uint64_t version)
{
    return wl_mix64(idx * GOLDEN ^ wl_mix64(version));
}

uint32_t wl_value_len(uint64_t idx, uint64_t version, uint32_t min, uint32_t max)
{
    if (max <= min)
        return min;
    return min +
           (uint32_t)(wl_mix64(filler_seed(idx, version) ^ 0x6c656e) % ((uint64_t)max - min + 1));
}

void wl_value_fill(void *buf, uint32_t len, uint64_t idx, uint64_t version)
{
    uint8_t *p = buf;
    put_le64(p, idx);
    put_le64(p + 8, version);
    uint64_t state = filler_seed(idx, version);
    for (uint32_t off = WL_VALUE_HEADER; off < len; off += 8) {
        state += GOLDEN;
        uint64_t w = wl_mix64(state);
        uint32_t n = len - off < 8 ? len - off : 8;
        memcpy(p + off, &w, n);
    }
}

enum wl_check wl_value_check(const void *buf, size_t len, uint64_t idx, uint32_t min, uint32_t max,
                             struct wl_claim *claim)
{
    const uint8_t *p = buf;
    claim->idx = claim->version = 0;
    if (len < WL_VALUE_HEADER)
        return WL_VALUE_SHORT;
    claim->idx = get_le64(p);
    claim->version = get_le64(p + 8);
    if (claim->idx != idx)
        return WL_VALUE_WRONG_KEY;
    if (len != wl_value_len(idx, claim->version, min, max))
        return WL_VALUE_BAD_LENGTH;
    uint64_t state = filler_seed(idx, claim->version);
    for (size_t off = WL_VALUE_HEADER; off < len; off += 8) {
        state += GOLDEN;
        uint64_t w = wl_mix64(state);
        size_t n = len - off < 8 ? len - off : 8;
        if (memcmp(p + off, &w, n) != 0)
            return WL_VALUE_CORRUPT;
    }
    return WL_VALUE_OK;
}

const char *wl_check_name(enum wl_check c)
{
    switch (c) {
    case WL_VALUE_OK: return "ok";
    case WL_VALUE_SHORT: return "shorter than its 16-byte header";
    case WL_VALUE_WRONG_KEY: return "written for another key";
    case WL_VALUE_BAD_LENGTH: return "length differs from the one written";
    case WL_VALUE_CORRUPT: return "bytes differ from the ones written";
    }
    return "unknown";
}
