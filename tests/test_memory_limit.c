/* test_memory_limit.c — the real rkv-server inside a child memory cgroup
 * with a small limit: a --memory the cgroup cannot hold is refused at start
 * (exit 1, one message naming the limit), a 1 TiB --memory is refused before
 * anything is allocated, a fitting one starts, and --memory-check=off is
 * honoured.
 *
 * Every server runs bounded by the cgroup from its first instruction: the
 * forked child writes its own pid into cgroup.procs before it execs, so even
 * a broken check cannot take the host's memory. The cgroup is created under
 * this test's own memory cgroup (v1 memory.limit_in_bytes or v2 memory.max,
 * found through /proc/self/cgroup and /proc/self/mountinfo with the server's
 * own memory_budget.c) and removed afterwards. Where no writable memory
 * cgroup is found the test is skipped (exit 77) with the reason.
 *
 *   test_memory_limit RKV_SERVER_BINARY
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "memory_budget.h"
#include "server_proc.h"

#define LIMIT   (256ull << 20)
#define WAIT_MS 60000 /* safety net only: a refusal takes milliseconds */

static const char *server_bin;
static char cg_dir[1200]; /* the child cgroup */
static int cg_version;
static unsigned uri_seq;

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return NULL;
    char *buf = calloc(1, 1 << 16);
    if (buf != NULL)
        (void)fread(buf, 1, (1 << 16) - 1, f);
    fclose(f);
    return buf;
}

static bool write_file(const char *dir, const char *name, const char *text)
{
    char path[1300];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = write(fd, text, strlen(text));
    close(fd);
    return n == (ssize_t)strlen(text);
}

static uint64_t read_value(const char *name)
{
    char path[1300], text[64] = "";
    uint64_t v = 0;
    snprintf(path, sizeof path, "%s/%s", cg_dir, name);
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return UINT64_MAX;
    if (fgets(text, sizeof text, f) == NULL || !rkv_cgroup_parse_value(text, &v))
        v = UINT64_MAX;
    fclose(f);
    return v;
}

/* Create the child cgroup with LIMIT; NULL or why not. */
static const char *cgroup_create(void)
{
    static char why[1500];
    char *cg = slurp("/proc/self/cgroup"), *mi = slurp("/proc/self/mountinfo");
    char mount[512], dir[1024], limit[32];
    cg_version = cg && mi ? rkv_cgroup_locate(cg, mi, mount, sizeof mount, dir, sizeof dir) : 0;
    free(cg);
    free(mi);
    if (cg_version == 0)
        return "no memory cgroup (v1 memory controller or cgroup2) is mounted for this process";
    snprintf(cg_dir, sizeof cg_dir, "%s/rkv-test-%d", dir, (int)getpid());
    if (mkdir(cg_dir, 0755) != 0) {
        snprintf(why, sizeof why,
                 "cannot create %s: %s (run as root, or give this user a "
                 "delegated cgroup)",
                 cg_dir, strerror(errno));
        return why;
    }
    snprintf(limit, sizeof limit, "%llu", (unsigned long long)LIMIT);
    if (!write_file(cg_dir, cg_version == 1 ? "memory.limit_in_bytes" : "memory.max", limit)) {
        snprintf(why, sizeof why, "cannot set the memory limit of %s (v%d): %s%s", cg_dir,
                 cg_version, strerror(errno),
                 cg_version == 2
                     ? "; the memory controller is not enabled in the parent's cgroup.subtree_control"
                     : "");
        rmdir(cg_dir);
        return why;
    }
    return NULL;
}

static void cgroup_remove(void)
{
    for (int i = 0; i < 100 && rmdir(cg_dir) != 0 && errno == EBUSY; i++) {
        struct timespec ts = { 0, 10 * 1000 * 1000 };
        nanosleep(&ts, NULL); /* a reaped child leaves cgroup.procs asynchronously */
    }
}

/* Fork; the child joins the cgroup, then execs the server with its stderr
 * in log_path. Returns the pid. */
static pid_t spawn(const char *log_path, const char *const *args)
{
    const char *argv[24];
    unsigned n = 0;
    argv[n++] = server_bin;
    for (; *args != NULL && n < 23; args++)
        argv[n++] = *args;
    argv[n] = NULL;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char me[32];
        snprintf(me, sizeof me, "%d", (int)getpid());
        int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0 || !write_file(cg_dir, "cgroup.procs", me))
            _exit(99); /* never run the server outside the cgroup */
        dup2(fd, STDERR_FILENO);
        dup2(fd, STDOUT_FILENO);
        execv(server_bin, (char *const *)argv);
        _exit(98);
    }
    return pid;
}

/* Wait for pid (bounded by WAIT_MS, a safety net); the exit status, or
 * 128 + signal. */
static int wait_exit(pid_t pid)
{
    int st;
    for (int ms = 0; ms < WAIT_MS; ms++) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        struct timespec ts = { 0, 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    fail_msg("the server did not exit within %d ms", WAIT_MS);
    return -1;
}

/* Run the server to its exit: status, and its log in *log (caller frees). */
static int run_to_exit(const char *const *args, char **log)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/rkv-memlimit-%d.log", (int)getpid());
    int status = wait_exit(spawn(path, args));
    *log = slurp(path);
    unlink(path);
    assert_non_null(*log);
    return status;
}

/* The one error line of a refusal, for the report. */
static void show_refusal(const char *log)
{
    const char *e = strstr(log, "error ");
    print_message("    refusal: %.*s\n", e ? (int)strcspn(e, "\n") : 0, e ? e : "");
}

static void test_over_cgroup_limit_refused(void **state)
{
    (void)state;
    char uri[256], *log;
    test_uri(uri, sizeof uri, uri_seq++);
    const char *args[] = { "--memory", "1G", "--max-conns", "4", "--listen", uri, NULL };
    int status = run_to_exit(args, &log);
    show_refusal(log);
    assert_int_equal(status, 1);
    assert_non_null(strstr(log, "--memory 1 GiB cannot be backed"));
    assert_non_null(strstr(log, "cgroup memory limit 256 MiB"));
    assert_non_null(strstr(log, cg_dir));
    assert_non_null(strstr(log, "--memory-check=off"));
    assert_null(strstr(log, "ready"));
    free(log);
}

static void test_terabyte_refused_before_allocating(void **state)
{
    (void)state;
    char uri[256], *log;
    test_uri(uri, sizeof uri, uri_seq++);
    const char *args[] = { "--memory", "1T", "--listen", uri, NULL };
    (void)write_file(cg_dir, cg_version == 1 ? "memory.max_usage_in_bytes" : "memory.peak", "0");
    int status = run_to_exit(args, &log);
    show_refusal(log);
    assert_int_equal(status, 1);
    assert_non_null(strstr(log, "--memory 1 TiB cannot be backed"));
    free(log);
    /* refused before the region: the cgroup never held more than the process */
    uint64_t peak = read_value(cg_version == 1 ? "memory.max_usage_in_bytes" : "memory.peak");
    if (peak != UINT64_MAX)
        assert_true(peak < (64ull << 20));
}

/* Start (in the cgroup), connect a client to args[5] (the URI), PUT, stop:
 * the exit status and its log. */
static int start_serve_stop(const char *const *args, char **log)
{
    char path[64];
    int status;
    snprintf(path, sizeof path, "/tmp/rkv-memlimit-%d.log", (int)getpid());
    pid_t pid = spawn(path, args);
    rkv_client *c = connect_retry(args[5], NULL, WAIT_MS);
    bool ok = c != NULL && rkv_put(c, "k", 1, "v", 1, NULL, NULL) == RKV_OK;
    if (c != NULL)
        rkv_close(c);
    kill(pid, SIGTERM);
    status = wait_exit(pid);
    *log = slurp(path);
    unlink(path);
    assert_non_null(*log);
    if (!ok)
        print_message("%s", *log);
    assert_true(ok);
    return status;
}

static void test_fitting_memory_starts(void **state)
{
    (void)state;
    char uri[256], *log;
    test_uri(uri, sizeof uri, uri_seq++);
    const char *args[] = { "--memory", "32M", "--max-conns", "4", "--listen", uri, NULL };
    assert_int_equal(start_serve_stop(args, &log), 0);
    assert_non_null(strstr(log, "memory: needs up to"));
    assert_non_null(strstr(log, "cgroup memory limit 256 MiB"));
    free(log);
}

static void test_check_off_is_honoured(void **state)
{
    (void)state;
    char uri[256], *log;
    test_uri(uri, sizeof uri, uri_seq++);
    /* 16 MiB fits the cgroup; 1024 connections' buffers would not, so the
     * check lowers max_conns to what fits and says so; off leaves it */
    const char *on[] = { "--memory", "16M", "--max-conns", "1024", "--listen", uri, NULL };
    assert_int_equal(start_serve_stop(on, &log), 0);
    assert_non_null(strstr(log, "max_conns lowered from 1024 to "));
    free(log);
    const char *off[] = { "--memory", "16M", "--max-conns",        "1024",
                          "--listen", uri,   "--memory-check=off", NULL };
    assert_int_equal(start_serve_stop(off, &log), 0);
    assert_null(strstr(log, "cannot be backed"));
    assert_null(strstr(log, "max_conns lowered"));
    assert_non_null(strstr(log, "memory check off"));
    free(log);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s RKV_SERVER_BINARY\n", argv[0]);
        return 2;
    }
    server_bin = argv[1];
    const char *why = cgroup_create();
    if (why != NULL) {
        printf("SKIP: %s\n", why);
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_terabyte_refused_before_allocating),
        cmocka_unit_test(test_over_cgroup_limit_refused),
        cmocka_unit_test(test_fitting_memory_starts),
        cmocka_unit_test(test_check_off_is_honoured),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    cgroup_remove();
    return rc;
}
