/* sd_notify.c — the service manager's readiness protocol (sd_notify.h).
 *
 * What libsystemd's sd_notify() does, without the library: $NOTIFY_SOCKET
 * is a path ("/run/systemd/notify") or an abstract name ("@..."), and the
 * message one datagram on a new unix socket.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include "sd_notify.h"

int rkv_sd_notify_fds(const char *state, const int *fds, unsigned nfds)
{
    const char *path = getenv("NOTIFY_SOCKET");
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    if (path == NULL || path[0] == '\0')
        return 0;
    size_t len = strlen(path);
    if ((path[0] != '/' && path[0] != '@') || len >= sizeof sa.sun_path ||
        nfds > RKV_SD_NOTIFY_MAX_FDS) {
        errno = EINVAL;
        return -1;
    }
    memcpy(sa.sun_path, path, len);
    if (sa.sun_path[0] == '@')
        sa.sun_path[0] = '\0'; /* an abstract socket */
    struct iovec iov = { .iov_base = (void *)state, .iov_len = strlen(state) };
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int) * RKV_SD_NOTIFY_MAX_FDS)];
    } control;
    struct msghdr msg = { .msg_name = &sa,
                          .msg_namelen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len),
                          .msg_iov = &iov,
                          .msg_iovlen = 1 };
    if (nfds > 0) { /* the descriptors ride along (SCM_RIGHTS): FDSTORE=1 */
        memset(&control, 0, sizeof control);
        msg.msg_control = control.buf;
        msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
        memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
    }
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL);
    int e = errno;
    close(fd);
    errno = e;
    return n == (ssize_t)iov.iov_len ? 0 : -1;
}

int rkv_sd_notify(const char *state)
{
    return rkv_sd_notify_fds(state, NULL, 0);
}
