/* server_proc.h — start and stop a real rkv-server process from a test.
 *
 * Integration tests run the real binary: server_start() forks and execs it
 * with the given flags plus --listen URI, then waits until a client can
 * connect (or the process dies, which fails the test with its exit status).
 * server_stop() sends SIGTERM and returns the exit status, so a test can
 * require a clean shutdown. A server is SIGKILLed when the thread that
 * started it exits (PR_SET_PDEATHSIG), so a test that fails or crashes
 * before it stops its servers ends at once instead of leaving them to hold
 * its output open; start servers from the test's main thread.
 */
#ifndef RKV_TEST_SERVER_PROC_H
#define RKV_TEST_SERVER_PROC_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "rkv.h"

struct server_proc {
    pid_t pid;
    char uri[256];
};

/* argv: extra flags, NULL-terminated. Returns 0 when the server answers. */
int server_start(struct server_proc *sp, const char *binary, const char *uri,
                 const char *const *extra_args);
/* server_start() playing systemd's file-descriptor store: the server gets
 * fds[0..n) as descriptors 3.. with LISTEN_PID, LISTEN_FDS and
 * LISTEN_FDNAMES (names, colon-separated) set as systemd sets them. */
int server_start_fds(struct server_proc *sp, const char *binary, const char *uri,
                     const char *const *extra, const int *fds, unsigned n, const char *names);
/* The child's half of it, between fork and exec (_exit(127) on failure). */
void server_proc_hand_fds(const int *fds, unsigned n, const char *names);

/* The service manager's end of the file-descriptor store: a NOTIFY_SOCKET
 * datagram socket (an abstract name) and what servers stored in it. */
struct fake_fdstore {
    int sock;
    int region, state; /* the stored "rkv-region" and "rkv-state", -1 when not */
};
/* Bind `name` ("@..."), set NOTIFY_SOCKET to it. 0 or -1. */
int fake_fdstore_open(struct fake_fdstore *m, const char *name);
/* Take messages, keeping what FDSTORE=1 stores and dropping what
 * FDSTOREREMOVE=1 removes, until one contains `until`. 0, or -1 on a
 * malformed message or nothing for timeout_ms. */
int fake_fdstore_until(struct fake_fdstore *m, const char *until, int timeout_ms);
/* Unset NOTIFY_SOCKET, close the socket and what it stores. */
void fake_fdstore_close(struct fake_fdstore *m);

/* server_start() with shm URI test_uri(uri_n) plus a tcp door on HOST
 * (NULL = 127.0.0.1) at a port drawn from the pid and uri_n: a port taken by
 * someone else makes the server exit, and the next one is tried. *port is
 * the one it listens on. Returns 0 when the server answers. */
int server_start_tcp(struct server_proc *sp, const char *binary, unsigned uri_n, const char *host,
                     unsigned *port, const char *const *extra_args);

/* Several servers, each with a tcp door (server_start_tcp, one worker), and
 * a fresh directory for the test's own files (configs, a client script):
 * what the memcached-client tests (test_twemproxy, test_libmemcached)
 * stand on. */
#define SERVER_GROUP_MAX 4
struct server_group {
    struct server_proc sp[SERVER_GROUP_MAX];
    unsigned port[SERVER_GROUP_MAX]; /* their tcp doors */
    unsigned n;                      /* servers asked for */
    char dir[64];                    /* /tmp/rkv-NAME-XXXXXX, or "" */
};

/* n servers at uri_n uri_base, uri_base + 1, ... and the directory named
 * after `name`, each with one worker and the `extra` arguments (NULL: none;
 * a later --memory wins over server_start_tcp's). 0 when all answer; on
 * failure what started is left for server_group_stop. */
int server_group_start(struct server_group *g, const char *binary, unsigned n, unsigned uri_base,
                       const char *name, const char *const *extra);
/* Stop every server, remove the directory; 0 when every server stopped
 * cleanly and the directory went. */
int server_group_stop(struct server_group *g);

/* n servers (server_start at test_uri(uri_base), test_uri(uri_base + 1),
 * ..., each with the `extra` flags) and one handle sharded over them all
 * (connect_retry with options o, NULL for the defaults), in *c: what the
 * pipelining and shared-handle tests stand on. 0 when every server answers
 * and the handle connected; on failure what started is left for
 * server_shards_stop. */
int server_shards_start(struct server_proc *sp, unsigned n, const char *binary, unsigned uri_base,
                        const char *const *extra, const struct rkv_options *o, rkv_client **c);
/* Close the handle (c may be NULL) and stop the servers that started: 0
 * when every one stopped cleanly. */
int server_shards_stop(struct server_proc *sp, unsigned n, rkv_client *c);

/* SIGTERM, wait; returns the exit status (or 128+signal). */
int server_stop(struct server_proc *sp);
/* SIGKILL, wait. */
void server_kill(struct server_proc *sp);

/* SIGSTOP the server and return once every one of its threads has stopped
 * (state T in /proc/PID/task/TID/stat). kill() returns as soon as the signal
 * is queued: the thread picked to take it stops only when it next runs, and
 * only then are the others told to stop, so on a busy machine a worker can
 * go on serving requests for milliseconds after kill() returns. After
 * server_pause() nothing the server does can happen before server_resume().
 * Returns 0, or -1 when kill() fails or the threads are not all stopped
 * within 30 s (a safety net). */
int server_pause(struct server_proc *sp);
/* SIGCONT. Returns 0, or -1 when kill() fails. */
int server_resume(struct server_proc *sp);

/* A fresh URI for this test: shm:///tmp/rkv-test-PID-N.sock, or, when the
 * environment sets RKV_TEST_LISTEN=rdma://IP:PORT, that address with the
 * port advanced by n (so restarted servers do not collide). */
void test_uri(char *buf, size_t len, unsigned n);

/* Connect with retries for up to timeout_ms; NULL on failure. */
rkv_client *connect_retry(const char *uri, const struct rkv_options *o, unsigned timeout_ms);

/* The value of stat `name` of the handle's server `shard` (rkv_stats);
 * false when the call fails or the stat is absent. */
bool server_stat(rkv_client *c, unsigned shard, const char *name, uint64_t *out);

#endif
