/* log.h — leveled, timestamped log lines to stderr or a file.
 *
 * One line per event; never called on a hot path (per request). Thread-safe:
 * each line is formatted into a local buffer and written with one write().
 */
#ifndef RKV_LOG_H
#define RKV_LOG_H

#include <stdio.h>

enum rkv_log_level { RKV_LOG_ERROR, RKV_LOG_WARN, RKV_LOG_INFO, RKV_LOG_DEBUG };

/* Set the threshold and destination (fd 2 unless rkv_log_open succeeds). */
void rkv_log_set_level(enum rkv_log_level lvl);
enum rkv_log_level rkv_log_get_level(void);
/* Parse "error|warn|info|debug"; returns -1 when unknown. */
int rkv_log_parse_level(const char *s);
/* Append to `path` instead of stderr; returns 0 or -errno. */
int rkv_log_open(const char *path);

void rkv_log(enum rkv_log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define RKV_ERROR(...) rkv_log(RKV_LOG_ERROR, __VA_ARGS__)
#define RKV_WARN(...)  rkv_log(RKV_LOG_WARN, __VA_ARGS__)
#define RKV_INFO(...)  rkv_log(RKV_LOG_INFO, __VA_ARGS__)
#define RKV_DEBUG(...)                            \
    do {                                          \
        if (rkv_log_get_level() >= RKV_LOG_DEBUG) \
            rkv_log(RKV_LOG_DEBUG, __VA_ARGS__);  \
    } while (0)

#endif
