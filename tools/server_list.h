/* server_list.h — the -s/--server option both rkv-bench and rkv-cli take.
 *
 * Each -s value is one server URI or several separated by commas; all of
 * them are joined with commas into the one string rkv_connect() shards over.
 * Every URI is checked here (scheme shm:// or rdma://, and tcp://HOST:PORT
 * where the caller can speak memcached; something after it) so that a typo
 * is a usage error naming the flag, not a failed connection.
 */
#ifndef RKV_TOOLS_SERVER_LIST_H
#define RKV_TOOLS_SERVER_LIST_H

#include <stdbool.h>
#include <stddef.h>

/* Longest single URI accepted. */
#define SERVER_URI_MAX 511u

/* Checks `value` and appends it to *joined (malloc'ed, NULL at first),
 * adding its URIs to *count. On a bad value returns false with a message
 * (starting "--server: ") in err and leaves *joined as it was. */
bool server_list_add(char **joined, unsigned *count, const char *value, bool allow_tcp, char *err,
                     size_t err_len);

#endif
