/* workload.h — what rkv-bench asks for: random numbers, key choice (uniform,
 * scrambled zipfian, latest), operation mix, and self-checking values.
 *
 * Everything here is deterministic given a seed, so a run can be repeated
 * and a value read back can be checked without remembering what was written:
 * a key is a pure function of its index, and a --verify value is a pure
 * function of (key index, version) that it carries in its first 16 bytes.
 */
#ifndef RKV_BENCH_WORKLOAD_H
#define RKV_BENCH_WORKLOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- random numbers: xoshiro256** seeded through splitmix64 ---- */

struct wl_rng {
    uint64_t s[4]; /* generator state, never all zero */
};

void wl_rng_seed(struct wl_rng *r, uint64_t seed);
uint64_t wl_rng_next(struct wl_rng *r);
/* Uniform double in [0, 1). */
double wl_rng_double(struct wl_rng *r);
/* Uniform integer in [0, n), n >= 1, without modulo bias. */
uint64_t wl_rng_below(struct wl_rng *r, uint64_t n);

/* A 64-bit finaliser (splitmix64's): a fixed, well-mixing hash of x. */
uint64_t wl_mix64(uint64_t x);

/* ---- zipfian ranks (Gray et al., "Quickly generating billion-record
 * synthetic databases", SIGMOD '94; as in YCSB's ZipfianGenerator) ---- */

struct wl_zipf {
    uint64_t n;      /* ranks are 0..n-1; rank 0 is the most popular */
    double theta;    /* skew, 0 < theta < 1 */
    double alpha;    /* 1 / (1 - theta) */
    double zetan;    /* sum over i = 1..n of 1 / i^theta */
    double eta;      /* (1 - (2/n)^(1-theta)) / (1 - zeta(2)/zetan) */
    double half_pow; /* 1 + 0.5^theta: the threshold for rank 1 */
};

/* Precomputes zeta(n): O(n) once, then each draw is O(1). */
void wl_zipf_init(struct wl_zipf *z, uint64_t n, double theta);
uint64_t wl_zipf_next(const struct wl_zipf *z, struct wl_rng *r);
/* Probability of rank i under the exact distribution: 1 / ((i+1)^theta * zetan). */
double wl_zipf_probability(const struct wl_zipf *z, uint64_t rank);

/* ---- a seeded bijection of [0, n): scrambles zipf ranks over the key space
 * so that hot keys land in unrelated buckets, with no two ranks sharing a
 * key (unlike hashing modulo n, which merges ranks). An invertible mixer on
 * the smallest power-of-two domain >= n, cycle-walked back into [0, n). ---- */

struct wl_perm {
    uint64_t n;     /* domain size */
    uint64_t mask;  /* 2^bits - 1 >= n - 1 */
    unsigned shift; /* xor-shift distance, about bits / 2 */
    uint64_t key;   /* seed-derived whitening, masked */
};

void wl_perm_init(struct wl_perm *p, uint64_t n, uint64_t seed);
uint64_t wl_perm_apply(const struct wl_perm *p, uint64_t x);

/* ---- keys: "k" + zero-padded decimal index, `len` bytes long ---- */

#define WL_KEY_MAX 250u

/* Bytes the key of index idx needs at least ("k" + its digits). */
unsigned wl_key_min_len(uint64_t idx);
/* Length of key idx for sizes in [min, max]: a fixed function of idx, never
 * below wl_key_min_len(idx). */
unsigned wl_key_len(uint64_t idx, unsigned min, unsigned max);
/* Writes the key (no NUL) into buf (>= len bytes); returns len. */
unsigned wl_format_key(char *buf, uint64_t idx, unsigned len);

/* ---- self-checking values (--verify) ----
 * Layout: key index (8 bytes LE) | version (8 bytes LE) | filler, where the
 * filler and the length are functions of (index, version). A reader checks
 * that the value names the key it asked for and that every byte and the
 * length are what that (index, version) produces: any torn, stale-slot,
 * foreign or truncated value fails. */

#define WL_VALUE_HEADER 16u

enum wl_check {
    WL_VALUE_OK = 0,
    WL_VALUE_SHORT,      /* shorter than the 16-byte header */
    WL_VALUE_WRONG_KEY,  /* carries another key's index */
    WL_VALUE_BAD_LENGTH, /* length is not the one its version was written with */
    WL_VALUE_CORRUPT,    /* filler bytes differ */
};

/* Value length for (idx, version) with sizes in [min, max]. */
uint32_t wl_value_len(uint64_t idx, uint64_t version, uint32_t min, uint32_t max);
/* Fills buf[0..len) for (idx, version); len >= WL_VALUE_HEADER. */
void wl_value_fill(void *buf, uint32_t len, uint64_t idx, uint64_t version);
/* What a value says about itself: the key index and version in its header
 * (both 0 when it is too short to say). */
struct wl_claim {
    uint64_t idx;
    uint64_t version;
};
/* Checks a value read for key idx; *claim receives what the value says. */
enum wl_check wl_value_check(const void *buf, size_t len, uint64_t idx, uint32_t min, uint32_t max,
                             struct wl_claim *claim);
const char *wl_check_name(enum wl_check c);

#endif
