/* test_hint_buffer.c — client/hint_buffer.c: no duplicate, no lost hint.
 *
 * The filter only decides when the buffer is scanned, so every test checks
 * what the buffer holds against a plain list: words sharing a filter bit are
 * all kept, a duplicate is refused, a take leaves the filter exact.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "hint_buffer.h"
#include "layout.h"

static rkv_hint word(unsigned i)
{
    return rkv_slot_make((uint16_t)(i * 7 + 1), i % 4, (uint64_t)(i + 1) * RKV_ITEM_ALIGN);
}

/* A word after `w` (by index from `from`) with w's filter bit. */
static rkv_hint same_bit(rkv_hint w, unsigned *from)
{
    for (;; (*from)++)
        if (word(*from) != w && rkv_hint_filter_bit(word(*from)) == rkv_hint_filter_bit(w))
            return word((*from)++);
}

static void test_distinct_and_duplicates(void **state)
{
    (void)state;
    struct rkv_hint_buffer b = { 0 };
    for (unsigned i = 0; i < RKV_HINT_BUFFER_CAP; i++) {
        assert_true(rkv_hint_buffer_add(&b, word(i)));
        assert_false(rkv_hint_buffer_add(&b, word(i)));     /* held already */
        assert_false(rkv_hint_buffer_add(&b, word(i / 2))); /* an older one */
    }
    assert_int_equal(b.n, RKV_HINT_BUFFER_CAP);
    assert_true(rkv_hint_buffer_full(&b));
    assert_false(rkv_hint_buffer_add(&b, word(1000))); /* full */
    for (unsigned i = 0; i < RKV_HINT_BUFFER_CAP; i++)
        assert_true(b.hints[i] == word(i));
    rkv_hint_buffer_clear(&b);
    assert_int_equal(b.n, 0);
    assert_true(rkv_hint_buffer_add(&b, word(0))); /* clear forgot it */
}

/* Words whose filter bit is taken by another word are kept all the same. */
static void test_shared_bit_keeps_every_word(void **state)
{
    (void)state;
    struct rkv_hint_buffer b = { 0 };
    unsigned from = 1;
    rkv_hint w[4] = { word(0) };
    for (unsigned i = 1; i < 4; i++)
        w[i] = same_bit(w[0], &from);
    for (unsigned i = 0; i < 4; i++) {
        assert_true(rkv_hint_buffer_add(&b, w[i]));
        for (unsigned k = 0; k <= i; k++)
            assert_false(rkv_hint_buffer_add(&b, w[k]));
    }
    assert_int_equal(b.n, 4);
}

/* A take hands out the newest and leaves the filter exact: what left can
 * come back, what stayed is still refused, a word whose bit only a taken
 * word had costs no scan (its bit is clear again). */
static void test_take(void **state)
{
    (void)state;
    struct rkv_hint_buffer b = { 0 };
    unsigned from = 1;
    rkv_hint a = word(0), c = same_bit(a, &from), d = word(500);
    assert_true(rkv_hint_buffer_add(&b, a));
    assert_true(rkv_hint_buffer_add(&b, d));
    assert_true(rkv_hint_buffer_add(&b, c));
    const rkv_hint *out;
    assert_int_equal(rkv_hint_buffer_take(&b, 2, &out), 2);
    assert_true(out[0] == d && out[1] == c);
    assert_int_equal(b.n, 1);
    unsigned bit = rkv_hint_filter_bit(d);
    if (bit != rkv_hint_filter_bit(a))
        assert_false(b.filter[bit / 64] >> (bit % 64) & 1);
    assert_false(rkv_hint_buffer_add(&b, a));
    assert_true(rkv_hint_buffer_add(&b, c));
    assert_true(rkv_hint_buffer_add(&b, d));
    assert_int_equal(rkv_hint_buffer_take(&b, 100, &out), 3);
    assert_true(out[0] == a && out[1] == c && out[2] == d);
    assert_int_equal(b.n, 0);
    for (unsigned i = 0; i < RKV_HINT_FILTER_WORDS; i++)
        assert_true(b.filter[i] == 0);
    assert_int_equal(rkv_hint_buffer_take(&b, 10, &out), 0);
    assert_true(rkv_hint_buffer_add(&b, a));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_distinct_and_duplicates),
        cmocka_unit_test(test_shared_bit_keeps_every_word),
        cmocka_unit_test(test_take),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
