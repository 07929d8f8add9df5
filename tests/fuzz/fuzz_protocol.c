/* fuzz_protocol.c — libFuzzer target: the RPC parsers on arbitrary bytes.
 *
 * The server's rkv_req_parse() and the client's rkv_resp_parse() and
 * rkv_hello_parse() see bytes from the network, and so does the region
 * header a client validates with rkv_header_valid() before trusting its
 * geometry (and every slot word with rkv_slot_valid()). Whatever they accept must
 * stay inside the message: we touch every byte of every part they return,
 * so ASan flags any view that points outside the input.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lookup.h"
#include "protocol.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint8_t sink;

static void touch(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        sink ^= p[i];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* messages arrive in 8-byte aligned buffers, as transports deliver them */
    uint8_t *msg = malloc(size ? size : 1);
    if (msg == NULL)
        return 0;
    memcpy(msg, data, size);

    struct rkv_req_view v;
    sink ^= (uint8_t)rkv_req_more(msg, size); /* the worker reads the mark of any message */
    if (rkv_req_parse(msg, size, RKV_MAX_KEY_LEN, 1u << 20, &v) == RKV_OK) {
        touch(v.key, v.hdr->key_len);
        if (v.value)
            touch(v.value, v.hdr->value_len);
        if (v.remote)
            touch((const uint8_t *)v.remote, sizeof *v.remote);
        touch(v.hints, (size_t)v.hdr->hint_count * 8);
    }
    const struct rkv_resp *r;
    const uint8_t *payload;
    if (rkv_resp_parse(msg, size, &r, &payload) == RKV_OK) {
        touch(payload, r->payload_len);
        struct rkv_hello h;
        (void)rkv_hello_parse(payload, r->payload_len, &h);
    }
    /* the region header a client reads at connect: validation must hold up
     * on any bytes, and a header it accepts must describe an in-bounds layout */
    struct rkv_region_header h;
    memset(&h, 0, sizeof h);
    memcpy(&h, data, size < sizeof h ? size : sizeof h);
    if (rkv_header_valid(&h, h.region_size)) {
        if (h.heap_offset + h.heap_size > h.region_size ||
            h.index_offset + h.index_capacity * sizeof(struct rkv_bucket) > h.region_size)
            abort();
        uint64_t off;
        uint32_t len;
        for (unsigned i = 0; i + 8 <= size && i < 256; i += 8) {
            uint64_t slot;
            memcpy(&slot, data + i, sizeof slot);
            if (rkv_slot_valid(&h, slot, &off, &len) && off + len > h.region_size)
                abort();
        }
    }
    free(msg);
    return 0;
}
