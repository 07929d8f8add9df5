/* test_sd_notify.c — the server tells systemd when it serves (Type=notify).
 *
 * A real rkv-server started with NOTIFY_SOCKET naming a datagram socket
 * this test holds (a path, then an abstract name): the first message
 * after the file-descriptor store's (test_fd_store) is READY=1, and by
 * then the server answers; SIGTERM brings STOPPING=1.
 * Every wait is for a message (poll, with a 60 s safety bound), never for
 * time. Without NOTIFY_SOCKET, rkv_sd_notify sends nothing and succeeds;
 * a malformed one is an error.
 *
 * Usage: test_sd_notify PATH/TO/rkv-server
 */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <cmocka.h>

#include "rkv.h"
#include "sd_notify.h"
#include "server_proc.h"

static const char *server_bin;

/* A datagram socket bound to `name` (a path, or "@..." abstract). */
static int notify_socket(const char *name)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    size_t len = strlen(name);
    assert_true(len < sizeof sa.sun_path);
    memcpy(sa.sun_path, name, len);
    if (name[0] == '@')
        sa.sun_path[0] = '\0';
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa,
                          (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len)),
                     0);
    return fd;
}

/* The next message but the file-descriptor store's (FDSTORE=1, whose
 * descriptors recv() discards), NUL-terminated into buf. */
static void next_message(int fd, char *buf, size_t cap)
{
    do {
        struct pollfd p = { .fd = fd, .events = POLLIN };
        assert_int_equal(poll(&p, 1, 60000), 1);
        ssize_t n = recv(fd, buf, cap - 1, 0);
        assert_true(n > 0);
        buf[n] = '\0';
    } while (strncmp(buf, "FDSTORE=1", 9) == 0);
}

static void ready_then_stopping(const char *name)
{
    char msg[256], uri[256];
    int fd = notify_socket(name);
    setenv("NOTIFY_SOCKET", name, 1);
    struct server_proc sp;
    test_uri(uri, sizeof uri, 1);
    assert_int_equal(server_start(&sp, server_bin, uri, NULL), 0);
    unsetenv("NOTIFY_SOCKET");
    next_message(fd, msg, sizeof msg);
    assert_non_null(strstr(msg, "READY=1"));
    rkv_client *c = connect_retry(sp.uri, NULL, 5000);
    assert_non_null(c);
    assert_int_equal(rkv_put(c, "k", 1, "v", 1, NULL, NULL), RKV_OK);
    rkv_close(c);
    assert_int_equal(server_stop(&sp), 0);
    next_message(fd, msg, sizeof msg);
    assert_non_null(strstr(msg, "STOPPING=1"));
    close(fd);
    if (name[0] == '/')
        unlink(name);
}

static void test_path_socket(void **state)
{
    (void)state;
    char name[64];
    snprintf(name, sizeof name, "/tmp/rkv-test-notify-%d.sock", (int)getpid());
    ready_then_stopping(name);
}

static void test_abstract_socket(void **state)
{
    (void)state;
    char name[64];
    snprintf(name, sizeof name, "@rkv-test-notify-%d", (int)getpid());
    ready_then_stopping(name);
}

static void test_no_socket(void **state)
{
    (void)state;
    unsetenv("NOTIFY_SOCKET");
    assert_int_equal(rkv_sd_notify("READY=1"), 0);
    setenv("NOTIFY_SOCKET", "relative/path", 1);
    assert_int_equal(rkv_sd_notify("READY=1"), -1);
    assert_int_equal(errno, EINVAL);
    unsetenv("NOTIFY_SOCKET");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s RKV_SERVER_BINARY\n", argv[0]);
        return 2;
    }
    server_bin = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_path_socket),
        cmocka_unit_test(test_abstract_socket),
        cmocka_unit_test(test_no_socket),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
