/* metrics_http.h — Prometheus text endpoint for the server's stats. */
#ifndef RKV_METRICS_HTTP_H
#define RKV_METRICS_HTTP_H

#include "server.h"

/* Listen on "HOST:PORT" (numeric); returns the non-blocking fd or -1 (logged). */
int rkv_metrics_listen(const char *host_port);
/* Accept one scrape on the readable listen fd and answer it. */
void rkv_metrics_serve(int listen_fd, struct rkv_server *srv);

#endif
