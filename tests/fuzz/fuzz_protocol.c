/* fuzz_protocol.c — libFuzzer target: the RPC parsers on arbitrary bytes.
 *
 * The server's rkv_req_parse() and the client's rkv_resp_parse() and
 * rkv_hello_parse() see bytes from the network. Whatever they accept must
 * stay inside the message: we touch every byte of every part they return,
 * so ASan flags any view that points outside the input.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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
    free(msg);
    return 0;
}
