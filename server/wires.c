/* wires.c — the wire protocol each listen URI's scheme selects.
 *
 * The one place a scheme meets a wire protocol, as server/transports.c is
 * where it meets a transport: main.c looks a listener's wire up here when
 * it opens it, and every connection accepted there speaks it. A scheme
 * pairs a wire with a transport that carries what the wire needs: the rkv
 * protocol needs a message transport (rkv_msg_transport_ops), the memcached
 * text protocol the tcp byte stream (tests/test_wire.c checks each pair).
 */
#include <string.h>

#include "util.h"
#include "wire.h"

static const struct {
    const char *scheme;
    const struct rkv_wire *wire;
} wires[] = {
    { "shm", &rkv_wire_rkv },
    { "rdma", &rkv_wire_rkv },
    { "tcp", &rkv_wire_memcache },
};

const struct rkv_wire *rkv_wire_by_scheme(const char *scheme)
{
    for (size_t i = 0; i < RKV_ARRAY_SIZE(wires); i++)
        if (strcmp(wires[i].scheme, scheme) == 0)
            return wires[i].wire;
    return NULL;
}
