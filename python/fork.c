/* fork.c — what fork() does to the extension, and how the Clients survive it.
 *
 * A librkv handle belongs to the process that connected it (rkv.h,
 * "Processes"): a child of fork() shares its connections (the shm socket
 * and rings, the rdma verbs objects) and must make no call on it, not even
 * rkv_close. So each Client records the pid that connected it, and a Client
 * used in another process is closed there (client.c): its calls raise
 * rkv.ClientForked before they touch the client's lock, which a thread of
 * the parent may have held at the fork and nobody in the child will ever
 * let go; close() and the Client's end leave the handle alone.
 *
 * The pid is kept here rather than asked for per call (getpid() is a system
 * call): a pthread_atfork child handler sets it again in every child.
 *
 * A child opens Clients of its own, and rkv_connect takes a lock of librkv's
 * (the process's location-cache registry) that a thread of the parent inside
 * rkv_connect or rkv_close holds for a moment: forked then, the child would
 * wait for it forever. Each rkv_connect and rkv_close of the extension
 * therefore runs under `handle_guard`, shared, and the fork takes it
 * exclusively in the atfork prepare handler: no thread is inside either when
 * the process forks (a fork waits for a connect under way, at most its
 * timeout_ms). The forking thread holds the GIL there, and the threads it
 * waits for release the guard before they take the GIL back.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <unistd.h>

#include "rkv_py.h"

static pthread_rwlock_t handle_guard = PTHREAD_RWLOCK_INITIALIZER;
volatile pid_t fork_this_pid;
static bool watching;

static void before_fork(void)
{
    pthread_rwlock_wrlock(&handle_guard);
}

static void after_fork_parent(void)
{
    pthread_rwlock_unlock(&handle_guard);
}

/* The child's thread has a new tid, which glibc's unlock would not take
 * for the writer's: the child, alone, starts the guard afresh instead. */
static void after_fork_child(void)
{
    fork_this_pid = getpid();
    pthread_rwlock_init(&handle_guard, NULL);
}

/* Record this process's pid and watch for forks. Returns 0, or -1 with an
 * exception set. */
int fork_watch(void)
{
    fork_this_pid = getpid();
    if (watching)
        return 0;
    int err = pthread_atfork(before_fork, after_fork_parent, after_fork_child);
    watching = err == 0;
    if (err != 0) {
        errno = err;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    return 0;
}

void handle_guard_enter(void)
{
    pthread_rwlock_rdlock(&handle_guard);
}

void handle_guard_leave(void)
{
    pthread_rwlock_unlock(&handle_guard);
}
