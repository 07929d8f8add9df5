/* transports.c — the server transports rkv-server can listen on, by URI scheme.
 *
 * The one place a scheme string meets a transport: main.c and the tests
 * look listeners up here, and a new transport is added by adding its ops
 * table to this list.
 */
#include <string.h>

#include "transport.h"
#include "util.h"

static const struct rkv_server_transport *const transports[] = {
    &rkv_shm_server_transport, &rkv_rdma_server_transport,
    &rkv_tcp_server_transport, /* the tcp door: memcached text protocol (tcp_server.c) */
};

const struct rkv_server_transport *rkv_server_transport_by_scheme(const char *scheme)
{
    for (size_t i = 0; i < RKV_ARRAY_SIZE(transports); i++)
        if (strcmp(transports[i]->scheme, scheme) == 0)
            return transports[i];
    return NULL;
}
