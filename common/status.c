/* status.c — rkv_status names, shared by the library, the server and tools. */
#include "rkv.h"

static const char *const status_names[RKV_STATUS_COUNT] = {
    [RKV_OK] = "ok",
    [RKV_NOT_FOUND] = "not found",
    [RKV_EXISTS] = "key exists",
    [RKV_NOT_STORED] = "not stored: key absent",
    [RKV_CAS_MISMATCH] = "cas mismatch: the item changed",
    [RKV_OUT_OF_MEMORY] = "server out of memory",
    [RKV_TOO_LARGE] = "key or value too large",
    [RKV_BUFFER_TOO_SMALL] = "buffer too small for the value",
    [RKV_INVALID] = "invalid argument",
    [RKV_NOT_NUMBER] = "value is not a decimal number",
    [RKV_PROTOCOL] = "protocol error",
    [RKV_VERSION_MISMATCH] = "protocol version mismatch",
    [RKV_AUTH] = "authentication failed",
    [RKV_CONNECTION] = "connection failed",
    [RKV_TIMEOUT] = "timed out",
    [RKV_RETRY_EXHAUSTED] = "item kept changing during the read",
    [RKV_SERVER_BUSY] = "server busy; retry later",
    [RKV_NO_MEMORY] = "out of local memory",
    [RKV_INTERNAL] = "internal error",
    [RKV_WINDOW_FULL] = "the window is full; take completions first",
};

const char *rkv_strerror(rkv_status s)
{
    return (unsigned)s < RKV_STATUS_COUNT ? status_names[s] : "unknown status";
}

const char *rkv_status_name(rkv_status s)
{
    static const char *const ids[RKV_STATUS_COUNT] = {
        [RKV_OK] = "ok",
        [RKV_NOT_FOUND] = "not_found",
        [RKV_EXISTS] = "exists",
        [RKV_NOT_STORED] = "not_stored",
        [RKV_CAS_MISMATCH] = "cas_mismatch",
        [RKV_OUT_OF_MEMORY] = "out_of_memory",
        [RKV_TOO_LARGE] = "too_large",
        [RKV_BUFFER_TOO_SMALL] = "buffer_too_small",
        [RKV_INVALID] = "invalid",
        [RKV_NOT_NUMBER] = "not_number",
        [RKV_PROTOCOL] = "protocol",
        [RKV_VERSION_MISMATCH] = "version_mismatch",
        [RKV_AUTH] = "auth",
        [RKV_CONNECTION] = "connection",
        [RKV_TIMEOUT] = "timeout",
        [RKV_RETRY_EXHAUSTED] = "retry_exhausted",
        [RKV_SERVER_BUSY] = "server_busy",
        [RKV_NO_MEMORY] = "no_memory",
        [RKV_INTERNAL] = "internal",
        [RKV_WINDOW_FULL] = "window_full",
    };
    if ((unsigned)s >= RKV_STATUS_COUNT || ids[s] == NULL)
        return "unknown";
    return ids[s];
}
