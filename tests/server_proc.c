/* server_proc.c — see server_proc.h. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "server_proc.h"
#include "util.h"

void test_uri(char *buf, size_t len, unsigned n)
{
    const char *rdma = getenv("RKV_TEST_LISTEN");
    char host[128];
    uint16_t port;
    if (rdma && strncmp(rdma, "rdma://", 7) == 0 && rkv_host_port(rdma + 7, host, sizeof host, &port))
        snprintf(buf, len, "rdma://%s:%u", host, (unsigned)(port + n));
    else
        snprintf(buf, len, "shm:///tmp/rkv-test-%d-%u.sock", (int)getpid(), n);
}

rkv_client *connect_retry(const char *uri, const struct rkv_options *o, unsigned timeout_ms)
{
    uint64_t deadline = rkv_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    rkv_client *c = NULL;
    while (rkv_connect(uri, o, &c) != RKV_OK) {
        if (rkv_now_ns() > deadline)
            return NULL;
        usleep(20000);
    }
    return c;
}

void server_proc_hand_fds(const int *fds, unsigned n, const char *names)
{
    int high[16];
    char num[32];
    if (n > 16)
        _exit(127);
    /* above every target first, so no dup2 overwrites a source */
    for (unsigned i = 0; i < n; i++)
        if ((high[i] = fcntl(fds[i], F_DUPFD, 100)) < 0)
            _exit(127);
    for (unsigned i = 0; i < n; i++) {
        if (dup2(high[i], 3 + (int)i) < 0)
            _exit(127);
        close(high[i]);
    }
    snprintf(num, sizeof num, "%d", (int)getpid());
    setenv("LISTEN_PID", num, 1);
    snprintf(num, sizeof num, "%u", n);
    setenv("LISTEN_FDS", num, 1);
    setenv("LISTEN_FDNAMES", names, 1);
}

int fake_fdstore_open(struct fake_fdstore *m, const char *name)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    size_t len = strlen(name);
    m->region = m->state = -1;
    if (name[0] != '@' || len >= sizeof sa.sun_path)
        return -1;
    memcpy(sa.sun_path, name, len);
    sa.sun_path[0] = '\0';
    m->sock = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (m->sock < 0 || bind(m->sock, (struct sockaddr *)&sa,
                            (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len)) != 0)
        return -1;
    return setenv("NOTIFY_SOCKET", name, 1);
}

static int *fake_fdstore_slot(struct fake_fdstore *m, const char *msg)
{
    const char *name = strstr(msg, "FDNAME=");
    if (name == NULL)
        return NULL;
    name += strlen("FDNAME=");
    return strncmp(name, "rkv-region", 10) == 0 ? &m->region
           : strncmp(name, "rkv-state", 9) == 0 ? &m->state
                                                : NULL;
}

int fake_fdstore_until(struct fake_fdstore *m, const char *until, int timeout_ms)
{
    for (;;) {
        char buf[512];
        union {
            struct cmsghdr align;
            char b[CMSG_SPACE(sizeof(int) * 4)];
        } control;
        struct iovec iov = { .iov_base = buf, .iov_len = sizeof buf - 1 };
        struct msghdr msg = { .msg_iov = &iov,
                              .msg_iovlen = 1,
                              .msg_control = control.b,
                              .msg_controllen = sizeof control.b };
        struct pollfd p = { .fd = m->sock, .events = POLLIN };
        if (poll(&p, 1, timeout_ms) != 1)
            return -1;
        ssize_t n = recvmsg(m->sock, &msg, MSG_CMSG_CLOEXEC);
        if (n <= 0)
            return -1;
        buf[n] = '\0';
        int fd = -1;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
            if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
                c->cmsg_len == CMSG_LEN(sizeof(int)))
                memcpy(&fd, CMSG_DATA(c), sizeof fd);
        bool store = strstr(buf, "FDSTORE=1") != NULL, remove = strstr(buf, "FDSTOREREMOVE=1");
        int *slot = store || remove ? fake_fdstore_slot(m, buf) : NULL;
        if ((store || remove) && (slot == NULL || store != (fd >= 0))) {
            if (fd >= 0)
                close(fd);
            return -1;
        }
        if (slot != NULL) {
            if (*slot >= 0)
                close(*slot);
            *slot = fd;
        } else if (fd >= 0) {
            close(fd);
            return -1; /* a descriptor with no FDSTORE=1 */
        }
        if (strstr(buf, until))
            return 0;
    }
}

void fake_fdstore_close(struct fake_fdstore *m)
{
    unsetenv("NOTIFY_SOCKET");
    if (m->sock >= 0)
        close(m->sock);
    if (m->region >= 0)
        close(m->region);
    if (m->state >= 0)
        close(m->state);
    m->sock = m->region = m->state = -1;
}

static const int *hand_fds;
static unsigned hand_n;
static const char *hand_names;

int server_start_fds(struct server_proc *sp, const char *binary, const char *uri,
                     const char *const *extra, const int *fds, unsigned n, const char *names)
{
    hand_fds = fds;
    hand_n = n;
    hand_names = names;
    int rc = server_start(sp, binary, uri, extra);
    hand_fds = NULL;
    hand_n = 0;
    return rc;
}

int server_start(struct server_proc *sp, const char *binary, const char *uri, const char *const *extra)
{
    const char *argv[64];
    unsigned n = 0;
    argv[n++] = binary;
    argv[n++] = "--listen";
    argv[n++] = uri;
    argv[n++] = "--log-level";
    argv[n++] = getenv("RKV_TEST_SERVER_LOG") ? getenv("RKV_TEST_SERVER_LOG") : "warn";
    for (unsigned i = 0; extra && extra[i] && n < 62; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    snprintf(sp->uri, sizeof sp->uri, "%s", uri);

    pid_t test = getpid();
    sp->pid = fork();
    if (sp->pid < 0)
        return -1;
    if (sp->pid == 0) {
        /* The server dies with its test. A test that fails an assert (or
         * crashes) before it stops its servers would otherwise leave them
         * holding the test's stdout and stderr open: meson then waits out
         * the test's whole timeout and reports TIMEOUT instead of the
         * failure. SIGKILL when the test exits survives the exec. */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != test)
            _exit(127); /* the test is already gone */
        if (hand_n > 0)
            server_proc_hand_fds(hand_fds, hand_n, hand_names);
        execv(binary, (char *const *)argv);
        fprintf(stderr, "exec %s: %s\n", binary, strerror(errno));
        _exit(127);
    }
    /* ready when HELLO gets an answer (a server with a secret refuses ours) */
    for (int i = 0; i < 1500; i++) {
        int status;
        if (waitpid(sp->pid, &status, WNOHANG) == sp->pid) {
            fprintf(stderr, "rkv-server exited early (status %d)\n",
                    WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
            sp->pid = 0;
            return -1;
        }
        rkv_client *c;
        rkv_status st = rkv_connect(uri, NULL, &c);
        if (st == RKV_OK)
            rkv_close(c);
        if (st == RKV_OK || st == RKV_AUTH)
            return 0;
        usleep(20000);
    }
    server_kill(sp);
    return -1;
}

int server_start_tcp(struct server_proc *sp, const char *binary, unsigned uri_n, const char *host,
                     unsigned *port, const char *const *extra)
{
    char uri[256], tcp[300];
    const char *args[48];
    test_uri(uri, sizeof uri, uri_n);
    for (unsigned attempt = 0; attempt < 40; attempt++) {
        unsigned n = 0;
        *port = 20000 + (unsigned)((getpid() * 131u + uri_n * 17u + attempt * 7919u) % 40000u);
        snprintf(tcp, sizeof tcp, "tcp://%s:%u", host ? host : "127.0.0.1", *port);
        args[n++] = "--memory";
        args[n++] = "64M";
        args[n++] = "--workers";
        args[n++] = "2";
        args[n++] = "--listen";
        args[n++] = tcp;
        for (unsigned i = 0; extra && extra[i] && n < RKV_ARRAY_SIZE(args) - 1; i++)
            args[n++] = extra[i];
        args[n] = NULL;
        if (server_start(sp, binary, uri, args) == 0)
            return 0;
    }
    return -1;
}

int server_group_start(struct server_group *g, const char *binary, unsigned n, unsigned uri_base,
                       const char *name, const char *const *extra)
{
    const char *args[16] = { "--workers", "1" };
    for (unsigned i = 0; extra && extra[i] && i < RKV_ARRAY_SIZE(args) - 3; i++)
        args[2 + i] = extra[i];
    memset(g, 0, sizeof *g);
    if (n > SERVER_GROUP_MAX)
        return -1;
    g->n = n;
    snprintf(g->dir, sizeof g->dir, "/tmp/rkv-%s-XXXXXX", name);
    if (mkdtemp(g->dir) == NULL) {
        g->dir[0] = '\0';
        return -1;
    }
    for (unsigned i = 0; i < n; i++)
        if (server_start_tcp(&g->sp[i], binary, uri_base + i, NULL, &g->port[i], args) != 0)
            return -1;
    return 0;
}

int server_group_stop(struct server_group *g)
{
    int rc = 0;
    for (unsigned i = 0; i < g->n; i++)
        if (g->sp[i].pid > 0 && server_stop(&g->sp[i]) != 0)
            rc = -1;
    if (g->dir[0]) {
        char cmd[96];
        snprintf(cmd, sizeof cmd, "rm -rf %s", g->dir);
        if (system(cmd) != 0)
            rc = -1;
        g->dir[0] = '\0';
    }
    return rc;
}

int server_shards_start(struct server_proc *sp, unsigned n, const char *binary, unsigned uri_base,
                        const char *const *extra, const struct rkv_options *o, rkv_client **c)
{
    char uris[SERVER_GROUP_MAX * sizeof sp->uri + SERVER_GROUP_MAX] = "";
    *c = NULL;
    if (n > SERVER_GROUP_MAX)
        return -1;
    for (unsigned i = 0; i < n; i++) {
        char uri[sizeof sp->uri];
        test_uri(uri, sizeof uri, uri_base + i);
        if (server_start(&sp[i], binary, uri, extra) != 0)
            return -1;
        strcat(uris, i ? "," : "");
        strcat(uris, sp[i].uri);
    }
    *c = connect_retry(uris, o, 5000);
    return *c ? 0 : -1;
}

int server_shards_stop(struct server_proc *sp, unsigned n, rkv_client *c)
{
    int rc = 0;
    rkv_close(c);
    for (unsigned i = 0; i < n; i++)
        if (sp[i].pid > 0 && server_stop(&sp[i]) != 0)
            rc = -1;
    return rc;
}

int server_stop(struct server_proc *sp)
{
    int status = 0;
    if (sp->pid <= 0)
        return -1;
    kill(sp->pid, SIGTERM);
    for (int i = 0; i < 3000; i++) { /* a safety net for a stuck server, not a latency claim */
        if (waitpid(sp->pid, &status, WNOHANG) == sp->pid) {
            sp->pid = 0;
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        }
        usleep(10000);
    }
    fprintf(stderr, "rkv-server did not stop within 30 s of SIGTERM\n");
    server_kill(sp);
    return -1;
}

void server_kill(struct server_proc *sp)
{
    if (sp->pid > 0) {
        kill(sp->pid, SIGKILL);
        waitpid(sp->pid, NULL, 0);
    }
    sp->pid = 0;
}

/* Whether thread `tid` of `pid` cannot run: stopped (T), traced (t), or
 * gone (its stat unreadable, a zombie, dead). The state is the field after
 * the command name, which ends at the last ')'. */
static bool thread_stopped(pid_t pid, const char *tid)
{
    char path[320], stat[512];
    snprintf(path, sizeof path, "/proc/%d/task/%s/stat", (int)pid, tid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return true;
    size_t n = fread(stat, 1, sizeof stat - 1, f);
    fclose(f);
    stat[n] = '\0';
    const char *end = strrchr(stat, ')');
    if (end == NULL || end[1] != ' ')
        return false;
    return end[2] != '\0' && strchr("TtZX", end[2]) != NULL;
}

/* Whether every thread of `pid` is stopped; false also when /proc cannot
 * list them. */
static bool all_threads_stopped(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    if (d == NULL)
        return false;
    bool stopped = true;
    const struct dirent *e;
    while (stopped && (e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            stopped = thread_stopped(pid, e->d_name);
    closedir(d);
    return stopped;
}

int server_pause(struct server_proc *sp)
{
    if (sp->pid <= 0 || kill(sp->pid, SIGSTOP) != 0)
        return -1;
    for (int i = 0; i < 30000; i++) { /* a safety net, not a latency claim */
        if (all_threads_stopped(sp->pid))
            return 0;
        usleep(1000);
    }
    fprintf(stderr, "rkv-server's threads did not all stop within 30 s of SIGSTOP\n");
    return -1;
}

int server_resume(struct server_proc *sp)
{
    return sp->pid > 0 && kill(sp->pid, SIGCONT) == 0 ? 0 : -1;
}

bool server_stat(rkv_client *c, unsigned shard, const char *name, uint64_t *out)
{
    char text[8192], want[80];
    size_t len;
    if (rkv_stats(c, shard, text, sizeof text - 1, &len) != RKV_OK)
        return false;
    text[len < sizeof text - 1 ? len : sizeof text - 1] = '\0';
    snprintf(want, sizeof want, "\n%s ", name);
    const char *p = strstr(text, want);
    if (p == NULL)
        return false;
    *out = strtoull(p + strlen(want), NULL, 10);
    return true;
}
