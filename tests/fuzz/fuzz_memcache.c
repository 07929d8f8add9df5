/* fuzz_memcache.c — libFuzzer target: the memcached text protocol parser.
 *
 * The input is a connection's byte stream. Like memcache_exec.c, we parse
 * command after command from it, and check what the parser promises: it
 * consumes at least one byte or asks for more, never more than it was
 * given; a "need more" asks for more than it has; every key, key list,
 * data block, opaque and argument it returns lies inside the input (we
 * touch every byte, so ASan flags a view outside it) or, for base64 keys,
 * inside the request; keyed commands have keys of 1..250 bytes; a meta
 * command's flags are memcached's (herd protection's N, R, h, l, I too).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "memcache_proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint8_t sink;

static void touch(const void *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        sink ^= ((const uint8_t *)p)[i];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* an exact-size copy, so reading one byte past the input is caught */
    char *in = malloc(size ? size : 1);
    memcpy(in, data, size);
    size_t off = 0;
    struct rkv_mc_req r;
    struct rkv_mc_stream st = { 0 }; /* long retrieval lines come in parts */
    while (off < size) {
        size_t used, need;
        enum rkv_mc_result res = rkv_mc_parse_stream(in + off, size - off, 4096, &st, &r, &used,
                                                     &need);
        if (res == RKV_MC_NEED_MORE) {
            if (need <= size - off)
                abort();
            break;
        }
        if (used == 0 || used > size - off)
            abort();
        if (res == RKV_MC_OK) {
            if (r.key != NULL && (r.key_len == 0 || r.key_len > RKV_MC_MAX_KEY))
                abort(); /* commands without a key (mn, stats, ...) have none */
            if (r.key != NULL)
                touch(r.key, r.key_len);
            if (r.keys) {
                const char *pos = r.keys, *end = r.keys + r.keys_len;
                const uint8_t *k;
                uint32_t kn;
                while (rkv_mc_next_key(&pos, end, &k, &kn))
                    touch(k, kn);
            }
            if (r.data)
                touch(r.data, r.bytes);
            if (r.opaque)
                touch(r.opaque, r.opaque_len);
            if (r.arg)
                touch(r.arg, r.arg_len);
            if (r.nret > RKV_MC_MAX_META_FLAGS)
                abort();
            uint64_t known = 0; /* a meta command takes memcached's flags only */
            for (const char *f = "bNTRlOPLkstcfvhuqFCMJDI"; *f; f++)
                known |= RKV_MC_F(*f);
            if (r.mflags & ~known)
                abort();
        } else if (res == RKV_MC_CLIENT_ERROR || res == RKV_MC_SERVER_ERROR) {
            if (r.error == NULL)
                abort();
            touch(r.error, strlen(r.error));
        }
        off += used;
        if (r.close || r.swallow)
            break;
    }
    free(in);
    return 0;
}
