/* memcache_exec.h — the memcached text protocol served from rkv's table.
 *
 * The tcp door's request handler (memcache_exec.c): what rkv_handle_request
 * is to an rkv connection, rkv_memcache_serve is to a tcp one.
 */
#ifndef RKV_MEMCACHE_EXEC_H
#define RKV_MEMCACHE_EXEC_H

#include "server.h"

/* One pass over a tcp connection owned by worker w: answer every complete
 * command that has arrived, in order, with one write. Returns the commands
 * answered (0: nothing to do). */
unsigned rkv_memcache_serve(struct rkv_server *srv, struct rkv_worker *w, struct rkv_wconn *wc);

#endif
