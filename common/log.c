/* log.c — see log.h. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

static enum rkv_log_level log_level = RKV_LOG_INFO;
static int log_fd = 2;

static const char *const level_names[] = { "error", "warn", "info", "debug" };

void rkv_log_set_level(enum rkv_log_level lvl)
{
    log_level = lvl;
}
enum rkv_log_level rkv_log_get_level(void)
{
    return log_level;
}

int rkv_log_parse_level(const char *s)
{
    for (int i = 0; i <= RKV_LOG_DEBUG; i++)
        if (strcmp(s, level_names[i]) == 0)
            return i;
    return -1;
}

int rkv_log_open(const char *path)
{
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return -errno;
    if (log_fd > 2)
        close(log_fd);
    log_fd = fd;
    return 0;
}

void rkv_log(enum rkv_log_level lvl, const char *fmt, ...)
{
    if (lvl > log_level)
        return;
    char line[1024];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(line, sizeof line, "%Y-%m-%dT%H:%M:%S", &tm);
    n += (size_t)snprintf(line + n, sizeof line - n, ".%03ldZ %-5s ", ts.tv_nsec / 1000000,
                          level_names[lvl]);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - n - 1, fmt, ap);
    va_end(ap);
    n = m < 0 ? n : (n + (size_t)m > sizeof line - 2 ? sizeof line - 2 : n + (size_t)m);
    line[n++] = '\n';
    ssize_t w = write(log_fd, line, n);
    (void)w;
}
