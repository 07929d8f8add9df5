/* qp_table.c — a worker's map from QP number to connection: see qp_table.h. */
#include <stdlib.h>

#include "qp_table.h"

/* Slots for `most` entries: a power of two, at least 2 x most (and 2). */
static uint32_t slots_for(uint32_t most)
{
    uint64_t n = 2;
    while (n < 2ull * most)
        n *= 2;
    return (uint32_t)n;
}

/* QP numbers are often consecutive: spread them (Fibonacci hashing). */
static uint32_t home_of(const struct rkv_qp_table *t, uint32_t qp_num)
{
    return (uint32_t)((qp_num * 0x9E3779B97F4A7C15ull) >> 32) & t->mask;
}

rkv_status rkv_qp_table_init(struct rkv_qp_table *t, uint32_t most)
{
    uint32_t n = slots_for(most);

    t->slots = calloc(n, sizeof *t->slots);
    t->mask = n - 1;
    t->count = 0;
    return t->slots != NULL ? RKV_OK : RKV_NO_MEMORY;
}

void rkv_qp_table_destroy(struct rkv_qp_table *t)
{
    free(t->slots);
    t->slots = NULL;
    t->count = 0;
}

/* The slot holding qp_num, or the free slot that ends its probe. */
static uint32_t probe(const struct rkv_qp_table *t, uint32_t qp_num)
{
    uint32_t i = home_of(t, qp_num);
    while (t->slots[i].conn != NULL && t->slots[i].qp_num != qp_num)
        i = (i + 1) & t->mask;
    return i;
}

bool rkv_qp_table_add(struct rkv_qp_table *t, uint32_t qp_num, void *conn)
{
    uint32_t i;

    if (conn == NULL || t->count + 1 > (t->mask + 1) / 2)
        return false;
    i = probe(t, qp_num);
    if (t->slots[i].conn != NULL)
        return false;
    t->slots[i] = (struct rkv_qp_slot){ .qp_num = qp_num, .conn = conn };
    t->count++;
    return true;
}

void *rkv_qp_table_find(const struct rkv_qp_table *t, uint32_t qp_num)
{
    return t->slots[probe(t, qp_num)].conn;
}

/* Whether home h lies cyclically in (hole, j]: then the entry at j may not
 * move back into the hole (it would leave its own probe path). */
static bool stays(uint32_t hole, uint32_t j, uint32_t h)
{
    return hole <= j ? hole < h && h <= j : hole < h || h <= j;
}

bool rkv_qp_table_remove(struct rkv_qp_table *t, uint32_t qp_num)
{
    uint32_t hole = probe(t, qp_num), j = hole;

    if (t->slots[hole].conn == NULL)
        return false;
    /* backward shift: pull later entries of the run into the hole */
    for (;;) {
        j = (j + 1) & t->mask;
        if (t->slots[j].conn == NULL)
            break;
        if (stays(hole, j, home_of(t, t->slots[j].qp_num)))
            continue;
        t->slots[hole] = t->slots[j];
        hole = j;
    }
    t->slots[hole] = (struct rkv_qp_slot){ 0 };
    t->count--;
    return true;
}

uint64_t rkv_qp_table_bytes(uint32_t most)
{
    return (uint64_t)slots_for(most) * sizeof(struct rkv_qp_slot);
}
