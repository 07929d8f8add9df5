/* test_server_proc.c — the test harness's server outlives no test.
 *
 * A test that fails an assert or crashes before it stops the servers it
 * started must not leave them running: they hold the test's stdout and
 * stderr, so meson waits for the test's whole timeout and reports TIMEOUT
 * (180 s) instead of the failure. Here a child plays such a test: it starts
 * a real rkv-server through server_start() with its output on a pipe, tells
 * the parent the server's pid, and exits without stopping it. The parent,
 * made a child subreaper so the orphaned server becomes its child, then
 * reads the pipe: end of file means every holder of its write end is gone,
 * server included. The 60 s bound on that read is a safety net only.
 *
 * Usage: test_server_proc PATH/TO/rkv-server
 */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "server_proc.h"

#define SAFETY_MS 60000

static const char *server_bin;

/* The failing test: start a server on `out`, report its pid, exit 1. */
static void failing_test(int out, int report)
{
    static const char *const extra[] = { "--memory", "16M", "--event-mode", NULL };
    struct server_proc sp;
    char uri[256];

    dup2(out, STDOUT_FILENO);
    dup2(out, STDERR_FILENO);
    close(out);
    test_uri(uri, sizeof uri, 1);
    pid_t pid = server_start(&sp, server_bin, uri, extra) == 0 ? sp.pid : 0;
    if (write(report, &pid, sizeof pid) != (ssize_t)sizeof pid)
        _exit(2);
    _exit(1); /* what a failed assert ends in */
}

/* Read `fd` to its end; false when the safety net ran out first. */
static bool drain_to_eof(int fd)
{
    char buf[4096];
    for (;;) {
        struct pollfd pfd = { .fd = fd, .events = POLLIN };
        if (poll(&pfd, 1, SAFETY_MS) != 1)
            return false;
        ssize_t n = read(fd, buf, sizeof buf);
        if (n == 0)
            return true;
        if (n < 0 && errno != EINTR)
            return false;
    }
}

static void test_server_dies_with_its_test(void **state)
{
    (void)state;
    int out[2], report[2], status;
    pid_t server = 0;

    assert_int_equal(0, prctl(PR_SET_CHILD_SUBREAPER, 1));
    assert_int_equal(0, pipe(out));
    assert_int_equal(0, pipe(report));
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        close(out[0]);
        close(report[0]);
        failing_test(out[1], report[1]);
    }
    close(out[1]);
    close(report[1]);
    assert_int_equal(sizeof server, read(report[0], &server, sizeof server));
    close(report[0]);
    assert_int_equal(child, waitpid(child, &status, 0));
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 1);
    assert_true(server > 0); /* the server did start */

    bool eof = drain_to_eof(out[0]);
    close(out[0]);
    if (!eof) {
        kill(server, SIGKILL);
        waitpid(server, NULL, 0);
        fail_msg("rkv-server %d outlived the test that started it and kept its output open",
                 (int)server);
    }
    assert_int_equal(server, waitpid(server, &status, 0)); /* reparented to us */
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s PATH/TO/rkv-server\n", argv[0]);
        return 2;
    }
    server_bin = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_server_dies_with_its_test),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
