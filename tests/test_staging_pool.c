/* test_staging_pool.c — the rdma server's staging pool (server/staging_pool.h):
 * buffers made on demand up to the bound, takers served in arrival order,
 * a bounded wait that ends in RKV_TIMEOUT, a failed make given back. */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "staging_pool.h"

struct fake {
    unsigned made, unmade;
    bool fail; /* the next make fails */
};

static void *fake_make(void *ctx)
{
    struct fake *f = ctx;
    if (f->fail) {
        f->fail = false;
        return NULL;
    }
    f->made++;
    return malloc(64);
}

static void fake_unmake(void *ctx, void *buf)
{
    struct fake *f = ctx;
    f->unmade++;
    free(buf);
}

static uint64_t waits(struct rkv_staging_pool *p)
{
    pthread_mutex_lock(&p->lock);
    uint64_t w = p->waits;
    pthread_mutex_unlock(&p->lock);
    return w;
}

static void test_made_on_demand_then_bounded(void **state)
{
    (void)state;
    struct fake f = { 0 };
    struct rkv_staging_pool p;
    void *a, *b, *c;

    assert_int_equal(RKV_OK, rkv_staging_pool_init(&p, 2, fake_make, fake_unmake, &f));
    assert_int_equal(0, f.made); /* nothing until asked */
    assert_int_equal(RKV_OK, rkv_staging_take(&p, 0, &a));
    assert_int_equal(RKV_OK, rkv_staging_take(&p, 0, &b));
    assert_int_equal(2, f.made);
    /* both out: a third waits, and with nothing given back times out */
    assert_int_equal(RKV_TIMEOUT, rkv_staging_take(&p, 1000000, &c));
    assert_int_equal(1, waits(&p));
    assert_null(p.head); /* the timed-out waiter left the queue */
    rkv_staging_give(&p, a);
    assert_int_equal(RKV_OK, rkv_staging_take(&p, 0, &c));
    assert_ptr_equal(a, c); /* reused, not made */
    assert_int_equal(2, f.made);
    rkv_staging_give(&p, b);
    rkv_staging_give(&p, c);
    rkv_staging_pool_destroy(&p);
    assert_int_equal(2, f.unmade);
}

static void test_failed_make_is_given_back(void **state)
{
    (void)state;
    struct fake f = { .fail = true };
    struct rkv_staging_pool p;
    void *a;

    assert_int_equal(RKV_OK, rkv_staging_pool_init(&p, 1, fake_make, fake_unmake, &f));
    assert_int_equal(RKV_NO_MEMORY, rkv_staging_take(&p, 0, &a));
    assert_int_equal(0, p.made); /* the place is free again */
    assert_int_equal(RKV_OK, rkv_staging_take(&p, 0, &a));
    rkv_staging_give(&p, a);
    rkv_staging_pool_destroy(&p);
}

struct taker {
    struct rkv_staging_pool *p;
    int id;
    atomic_int *order; /* ids in the order they got the buffer */
    atomic_int *n;
    rkv_status st;
};

static void *take_and_give(void *arg)
{
    struct taker *t = arg;
    void *buf;
    t->st = rkv_staging_take(t->p, 60ull * 1000000000ull, &buf);
    if (t->st == RKV_OK) {
        atomic_store(&t->order[atomic_fetch_add(t->n, 1)], t->id);
        rkv_staging_give(t->p, buf);
    }
    return NULL;
}

/* With the one buffer out, takers are served in the order they came: a
 * buffer given back goes to the oldest waiter, and no later taker barges. */
static void test_waiters_served_in_order(void **state)
{
    (void)state;
    struct fake f = { 0 };
    struct rkv_staging_pool p;
    atomic_int order[3] = { 0 }, n = 0;
    struct taker t[3];
    pthread_t th[3];
    void *held;

    assert_int_equal(RKV_OK, rkv_staging_pool_init(&p, 1, fake_make, fake_unmake, &f));
    assert_int_equal(RKV_OK, rkv_staging_take(&p, 0, &held));
    for (int i = 0; i < 3; i++) {
        t[i] = (struct taker){ .p = &p, .id = i + 1, .order = order, .n = &n };
        assert_int_equal(0, pthread_create(&th[i], NULL, take_and_give, &t[i]));
        while (waits(&p) < (uint64_t)i + 1) /* until it is queued */
            sched_yield();
    }
    rkv_staging_give(&p, held);
    for (int i = 0; i < 3; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(RKV_OK, t[i].st);
    }
    assert_int_equal(3, atomic_load(&n));
    for (int i = 0; i < 3; i++)
        assert_int_equal(i + 1, atomic_load(&order[i]));
    assert_int_equal(1, f.made);
    rkv_staging_pool_destroy(&p);
    assert_int_equal(1, f.unmade);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_made_on_demand_then_bounded),
        cmocka_unit_test(test_failed_make_is_given_back),
        cmocka_unit_test(test_waiters_served_in_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
