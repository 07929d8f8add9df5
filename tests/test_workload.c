/* test_workload.c — rkv-bench's workload pieces: random numbers, the
 * zipfian generator against its exact distribution, the key permutation
 * (a bijection), key formatting, and self-checking values that must catch
 * every kind of wrong value. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "workload.h"

static void rng_is_deterministic_and_bounded(void **state)
{
    (void)state;
    struct wl_rng a, b, c;
    wl_rng_seed(&a, 42);
    wl_rng_seed(&b, 42);
    wl_rng_seed(&c, 43);
    int same_as_c = 0;
    for (int i = 0; i < 1000; i++) {
        uint64_t x = wl_rng_next(&a);
        assert_int_equal(x, wl_rng_next(&b));
        same_as_c += x == wl_rng_next(&c);
    }
    assert_true(same_as_c < 3);
    unsigned counts[7] = { 0 };
    for (int i = 0; i < 70000; i++) {
        uint64_t v = wl_rng_below(&a, 7);
        assert_true(v < 7);
        counts[v]++;
        double d = wl_rng_double(&a);
        assert_true(d >= 0.0 && d < 1.0);
    }
    for (int i = 0; i < 7; i++) /* 10000 expected; 5 sigma is ~470 */
        assert_true(counts[i] > 9500 && counts[i] < 10500);
    assert_int_equal(wl_rng_below(&a, 1), 0);
}

/* Draw ranks and compare the head of the distribution with the exact
 * zipfian probabilities. Ranks 0 and 1 are exact in Gray's method; the
 * rest follow its continuous approximation, so the check on them is the
 * mass of the top 100 ranks. */
static void zipf_matches_distribution(void **state)
{
    (void)state;
    const uint64_t n = 10000, draws = 2000000;
    struct wl_zipf z;
    struct wl_rng r;
    wl_zipf_init(&z, n, 0.99);
    wl_rng_seed(&r, 7);
    uint64_t *hist = calloc(n, sizeof *hist);
    assert_non_null(hist);
    for (uint64_t i = 0; i < draws; i++) {
        uint64_t k = wl_zipf_next(&z, &r);
        assert_true(k < n);
        hist[k]++;
    }
    for (uint64_t k = 0; k < 2; k++) {
        double want = wl_zipf_probability(&z, k) * (double)draws;
        assert_true(fabs((double)hist[k] - want) < 0.01 * want);
    }
    double top_want = 0, top_got = 0;
    for (uint64_t k = 0; k < 100; k++) {
        top_want += wl_zipf_probability(&z, k);
        top_got += (double)hist[k] / (double)draws;
    }
    assert_true(fabs(top_got - top_want) < 0.03 * top_want);
    /* skew: the hottest key is far hotter than the median one */
    assert_true(hist[0] > 100 * (hist[n / 2] + 1));
    free(hist);

    /* a one-key space always draws rank 0 */
    wl_zipf_init(&z, 1, 0.5);
    for (int i = 0; i < 100; i++)
        assert_int_equal(wl_zipf_next(&z, &r), 0);
}

/* Past the exact-sum limit zeta is extended analytically; it must continue
 * the exact sum to within floating-point noise. */
static void zipf_zeta_tail_is_accurate(void **state)
{
    (void)state;
    struct wl_zipf exact, approx;
    const uint64_t base = 10000000, extra = 1000;
    wl_zipf_init(&exact, base, 0.99);
    wl_zipf_init(&approx, base + extra, 0.99);
    double tail = 0;
    for (uint64_t i = base + 1; i <= base + extra; i++)
        tail += pow((double)i, -0.99);
    assert_true(fabs(approx.zetan - exact.zetan - tail) < 1e-9 * exact.zetan);
}

static void permutation_is_bijection(void **state)
{
    (void)state;
    const uint64_t sizes[] = { 1, 2, 3, 7, 8, 9, 1000, 65537 };
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        uint64_t n = sizes[s];
        struct wl_perm p;
        wl_perm_init(&p, n, 12345);
        unsigned char *seen = calloc(n, 1);
        assert_non_null(seen);
        uint64_t moved = 0;
        for (uint64_t x = 0; x < n; x++) {
            uint64_t y = wl_perm_apply(&p, x);
            assert_true(y < n);
            assert_int_equal(seen[y], 0);
            seen[y] = 1;
            moved += y != x;
        }
        if (n >= 1000)
            assert_true(moved > n * 9 / 10); /* it does scramble */
        free(seen);
    }
    /* another seed, another permutation */
    struct wl_perm a, b;
    wl_perm_init(&a, 1000, 1);
    wl_perm_init(&b, 1000, 2);
    int same = 0;
    for (uint64_t x = 0; x < 1000; x++)
        same += wl_perm_apply(&a, x) == wl_perm_apply(&b, x);
    assert_true(same < 20);
}

static int cmp_keys(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void keys_are_formatted_and_unique(void **state)
{
    (void)state;
    char buf[256];
    assert_int_equal(wl_key_min_len(0), 2);
    assert_int_equal(wl_key_min_len(9), 2);
    assert_int_equal(wl_key_min_len(10), 3);
    assert_int_equal(wl_key_min_len(99999), 6);
    unsigned len = wl_format_key(buf, 42, 16);
    assert_int_equal(len, 16);
    assert_memory_equal(buf, "k000000000000042", 16);
    len = wl_format_key(buf, 7, 2);
    assert_memory_equal(buf, "k7", 2);
    /* a key never comes out shorter than its index needs */
    assert_int_equal(wl_key_len(123456, 4, 4), 7);

    enum { N = 5000 };
    char **keys = calloc(N, sizeof *keys);
    assert_non_null(keys);
    for (uint64_t i = 0; i < N; i++) {
        unsigned l = wl_key_len(i, 8, 40);
        assert_true(l >= 8 && l <= 40);
        assert_int_equal(l, wl_key_len(i, 8, 40)); /* a function of the index */
        keys[i] = calloc(l + 1, 1);
        assert_non_null(keys[i]);
        wl_format_key(keys[i], i, l);
        assert_int_equal(strlen(keys[i]), l);
    }
    qsort(keys, N, sizeof *keys, cmp_keys);
    for (int i = 1; i < N; i++)
        assert_int_not_equal(strcmp(keys[i - 1], keys[i]), 0);
    for (int i = 0; i < N; i++)
        free(keys[i]);
    free(keys);
}

/* The formatting rkv-bench has always written, digit by digit: the faster
 * one must write the same bytes (a key set is the same across versions). */
static void format_by_digits(char *buf, uint64_t idx, unsigned len)
{
    unsigned i = len - 1;
    buf[0] = 'k';
    for (; i >= 1 && idx != 0; i--) {
        buf[i] = (char)('0' + idx % 10);
        idx /= 10;
    }
    for (; i >= 1; i--)
        buf[i] = '0';
}

static void check_key(uint64_t idx, unsigned len)
{
    char want[64], got[64];
    unsigned digits = 1;
    for (uint64_t v = idx; v >= 10; v /= 10)
        digits++;
    assert_int_equal(wl_key_min_len(idx), 1 + digits);
    format_by_digits(want, idx, len);
    assert_int_equal(wl_format_key(got, idx, len), len);
    assert_memory_equal(got, want, len);
}

/* Every power of ten and its neighbours, all short lengths (too short
 * ones keep the low digits, as ever), and a spread of indexes. */
static void keys_format_as_digit_by_digit(void **state)
{
    (void)state;
    uint64_t p = 1;
    for (unsigned e = 0; e < 20; e++, p *= 10)
        for (uint64_t d = 0; d < 3; d++)
            for (unsigned len = 1; len <= 60; len++) { /* padding of 0..59: bytes, words */
                check_key(p - 1 + d, len);
                if (p > 1)
                    check_key(p - 2 + d, len);
            }
    for (unsigned len = 1; len <= 24; len++)
        check_key(UINT64_MAX, len);
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (unsigned i = 0; i < 20000; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        check_key(i, 16);
        check_key(x >> (i % 64), 1 + i % 24);
    }
}

static void values_check_roundtrip(void **state)
{
    (void)state;
    uint8_t buf[2048];
    struct wl_claim claim;
    const uint32_t sizes[][2] = { { 16, 16 }, { 17, 17 }, { 31, 31 }, { 16, 1000 }, { 1024, 2048 } };
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        for (uint64_t idx = 0; idx < 50; idx++) {
            uint64_t version = (idx + 1) << 44 | (idx * 7 + 1);
            uint32_t len = wl_value_len(idx, version, sizes[s][0], sizes[s][1]);
            assert_true(len >= sizes[s][0] && len <= sizes[s][1]);
            wl_value_fill(buf, len, idx, version);
            assert_int_equal(wl_value_check(buf, len, idx, sizes[s][0], sizes[s][1], &claim),
                             WL_VALUE_OK);
            assert_int_equal(claim.idx, idx);
            assert_int_equal(claim.version, version);
        }
    }
}

static void values_catch_wrong_ones(void **state)
{
    (void)state;
    uint8_t buf[256];
    struct wl_claim claim;
    const uint64_t idx = 77, version = 5;
    uint32_t len = wl_value_len(idx, version, 64, 64);
    wl_value_fill(buf, len, idx, version);

    /* another key's value */
    assert_int_equal(wl_value_check(buf, len, idx + 1, 64, 64, &claim), WL_VALUE_WRONG_KEY);
    assert_int_equal(claim.idx, idx);
    /* truncated or too short */
    assert_int_equal(wl_value_check(buf, len - 1, idx, 64, 64, &claim), WL_VALUE_BAD_LENGTH);
    assert_int_equal(wl_value_check(buf, 15, idx, 64, 64, &claim), WL_VALUE_SHORT);
    /* any single flipped filler byte, first and last included */
    for (uint32_t off = 16; off < len; off++) {
        buf[off] ^= 0x01;
        assert_int_equal(wl_value_check(buf, len, idx, 64, 64, &claim), WL_VALUE_CORRUPT);
        buf[off] ^= 0x01;
    }
    /* a torn value: header of one version, body of another */
    uint8_t other[256];
    wl_value_fill(other, len, idx, version + 1);
    memcpy(other, buf, 16);
    assert_int_equal(wl_value_check(other, len, idx, 64, 64, &claim), WL_VALUE_CORRUPT);
    /* with variable sizes, a version's length is fixed: a value cut to
     * another legal length fails */
    uint32_t vlen = wl_value_len(idx, version, 16, 200);
    wl_value_fill(buf, vlen, idx, version);
    uint32_t other_len = vlen > 16 ? vlen - 1 : vlen + 1;
    assert_int_equal(wl_value_check(buf, other_len, idx, 16, 200, &claim), WL_VALUE_BAD_LENGTH);
    assert_string_equal(wl_check_name(WL_VALUE_OK), "ok");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rng_is_deterministic_and_bounded),
        cmocka_unit_test(zipf_matches_distribution),
        cmocka_unit_test(zipf_zeta_tail_is_accurate),
        cmocka_unit_test(permutation_is_bijection),
        cmocka_unit_test(keys_are_formatted_and_unique),
        cmocka_unit_test(keys_format_as_digit_by_digit),
        cmocka_unit_test(values_check_roundtrip),
        cmocka_unit_test(values_catch_wrong_ones),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
