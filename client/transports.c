/* transports.c — the client transports librkv knows, by URI scheme.
 *
 * The one place a scheme string meets a transport: rkv_connect() and the
 * tests look transports up here, and a new transport is added by adding
 * its ops table to this list.
 */
#include <string.h>

#include "transport.h"
#include "util.h"

static const struct rkv_client_transport *const transports[] = {
    &rkv_shm_client_transport,
    &rkv_rdma_client_transport,
};

const struct rkv_client_transport *rkv_client_transport_by_scheme(const char *scheme)
{
    for (size_t i = 0; i < RKV_ARRAY_SIZE(transports); i++)
        if (strcmp(transports[i]->scheme, scheme) == 0)
            return transports[i];
    return NULL;
}
