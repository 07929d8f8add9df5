/* test_config.c — rkv-server configuration: defaults, INI files, flags on
 * top, and every way a bad value is refused (with the message it gets).
 *
 * Messages are captured with open_memstream so each error test checks both
 * the result (RKV_CONFIG_BAD = exit 2) and that the message names the flag or
 * file line and what is accepted.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "config.h"
#include "layout.h"
#include "log.h"
#include "table.h"
#include "transport.h"

#ifndef RKV_EXAMPLE_CONF
#error "RKV_EXAMPLE_CONF must name config/rkv.conf"
#endif

/* Captured output of one load. */
struct capture {
    char *out, *err;
    size_t out_len, err_len;
};

static void capture_free(struct capture *cap)
{
    free(cap->out);
    free(cap->err);
    memset(cap, 0, sizeof *cap);
}

/* Run rkv_server_config_load_to with argv given as a NULL-terminated list. */
static int load_args(struct rkv_server_config *c, struct capture *cap, ...)
{
    char *argv[64];
    int argc = 0;
    va_list ap;
    va_start(ap, cap);
    argv[argc++] = (char *)"rkv-server";
    for (char *a = va_arg(ap, char *); a != NULL && argc < 63; a = va_arg(ap, char *))
        argv[argc++] = a;
    va_end(ap);
    argv[argc] = NULL;
    FILE *out = open_memstream(&cap->out, &cap->out_len);
    FILE *err = open_memstream(&cap->err, &cap->err_len);
    assert_non_null(out);
    assert_non_null(err);
    int rc = rkv_server_config_load_to(c, argc, argv, out, err);
    fclose(out);
    fclose(err);
    return rc;
}

static int parse_text(struct rkv_server_config *c, struct capture *cap, const char *text, size_t len)
{
    FILE *err = open_memstream(&cap->err, &cap->err_len);
    assert_non_null(err);
    rkv_server_config_defaults(c);
    int rc = rkv_server_config_parse(c, text, len, "t.conf", err);
    fclose(err);
    return rc;
}

/* A temporary file holding `text`; returns its path in a static buffer per slot. */
static const char *temp_file(int slot, const char *text)
{
    static char paths[4][64];
    snprintf(paths[slot], sizeof paths[slot], "/tmp/rkv-test-config-%d-XXXXXX", slot);
    int fd = mkstemp(paths[slot]);
    assert_true(fd >= 0);
    size_t n = strlen(text);
    assert_int_equal(write(fd, text, n), (ssize_t)n);
    close(fd);
    return paths[slot];
}

/* ------------------------------------------------------------ defaults */

static void test_defaults(void **state)
{
    (void)state;
    struct rkv_server_config c;
    struct capture cap = { 0 };
    assert_int_equal(load_args(&c, &cap, NULL), RKV_CONFIG_OK);
    assert_int_equal(cap.err_len, 0);
    assert_string_equal(c.config_path, "");
    assert_int_equal(c.listen_count, 1);
    assert_true(strncmp(c.listen[0].uri, "shm:///", 7) == 0);
    assert_non_null(strstr(c.listen[0].uri, "/rkv.sock"));
    assert_int_equal(c.memory, 256ull << 20);
    assert_int_equal(c.workers, 1);
    assert_int_equal(c.cpu_count, 0);
    assert_int_equal(c.log_level, RKV_LOG_INFO);
    assert_string_equal(c.log_file, "");
    assert_int_equal(c.poll_mode, RKV_POLL_ADAPTIVE);
    assert_int_equal(c.poll_idle_us, 200);
    assert_false(c.hugepages_required);
    assert_true(c.memory_check);
    assert_true(c.fd_store);
    assert_int_equal(c.slab_page_size, 1u << 20);
    assert_int_equal(c.max_value_len, (1u << 20) - RKV_ITEM_HEADER_MAX - RKV_MAX_KEY_LEN);
    assert_int_equal(c.grace_ms, 100);
    assert_int_equal(c.default_ttl, 0);
    assert_int_equal(c.evict, RKV_EVICT_S3FIFO);
    assert_int_equal(c.credits, 64);
    assert_int_equal(c.max_msg, 4096);
    assert_int_equal(c.max_conns, 4096);
    assert_int_equal(c.max_unauth_conns, 16);
    assert_int_equal(c.hello_timeout_ms, 5000);
    assert_string_equal(c.rdma_device, "");
    assert_int_equal(c.gid_index, -1);
    assert_int_equal(c.max_inline, 48);
    assert_int_equal(c.signal_interval, 16);
    assert_int_equal(c.cq_size, 0);
    assert_int_equal(c.tos, 0);
    assert_int_equal(c.ack_timeout, 16);
    assert_int_equal(c.retry_count, 6);
    assert_string_equal(c.auth_secret, "");
    assert_string_equal(c.stats_listen, "");
    capture_free(&cap);
}

static void test_default_listen_follows_runtime_directory(void **state)
{
    (void)state;
    struct rkv_server_config c;
    struct capture cap = { 0 };
    setenv("RUNTIME_DIRECTORY", "/run/rkv-test", 1);
    assert_int_equal(load_args(&c, &cap, NULL), RKV_CONFIG_OK);
    assert_string_equal(c.listen[0].uri, "shm:///run/rkv-test/rkv.sock");
    capture_free(&cap);
    /* A relative value is not trusted. */
    setenv("RUNTIME_DIRECTORY", "relative/dir", 1);
    assert_int_equal(load_args(&c, &cap, NULL), RKV_CONFIG_OK);
    assert_null(strstr(c.listen[0].uri, "relative"));
    unsetenv("RUNTIME_DIRECTORY");
    capture_free(&cap);
}

static void test_help_and_version(void **state)
{
    (void)state;
    struct rkv_server_config c;
    struct capture cap = { 0 };
    assert_int_equal(load_args(&c, &cap, "--memory", "1G", "--help", NULL), RKV_CONFIG_EXIT);
    assert_non_null(strstr(cap.out, "--memory SIZE"));
    assert_non_null(strstr(cap.out, "--stats-listen HOST:PORT"));
    capture_free(&cap);
    assert_int_equal(load_args(&c, &cap, "-V", NULL), RKV_CONFIG_EXIT);
    assert_non_null(strstr(cap.out, "rkv-server 0.1.0"));
    capture_free(&cap);
}

/* The line of --help that describes --FLAG (its left column names it, after
 * any short option), copied into line; false when there is none or more than one. */
static bool help_line(const char *help, const char *flag, char *line, size_t len)
{
    unsigned found = 0;
    for (const char *at = help; *at != '\0';) {
        const char *end = strchr(at, '\n');
        size_t n = end ? (size_t)(end - at) : strlen(at);
        const char *q = at + strspn(at, " ");
        if (q[0] == '-' && q[1] != '-' && q[2] == ',')
            q += 3 + strspn(q + 3, " ");
        size_t f = strlen(flag);
        if (strncmp(q, "--", 2) == 0 && strncmp(q + 2, flag, f) == 0 &&
            (q[2 + f] == ' ' || q[2 + f] == '\n' || q[2 + f] == '\0')) {
            snprintf(line, len, "%.*s", (int)n, at);
            found++;
        }
        at += n + (end != NULL);
    }
    return found == 1;
}

/* The settings table is where each default is written: --help shows, on
 * each setting's line, the default its row holds (a value, or words for one
 * that is derived or absent), and no line claims another. */
static void test_help_shows_table_defaults(void **state)
{
    (void)state;
    struct rkv_server_config c;
    struct capture cap = { 0 };
    struct rkv_setting_info info;
    assert_int_equal(load_args(&c, &cap, "--help", NULL), RKV_CONFIG_EXIT);
    size_t i = 0;
    for (; rkv_server_config_setting(i, &info); i++) {
        char line[512], want[160];
        if (!help_line(cap.out, info.flag, line, sizeof line))
            fail_msg("--help has not exactly one line for --%s", info.flag);
        if (info.default_value != NULL)
            snprintf(want, sizeof want, " (default %s)", info.default_value);
        else if (info.default_words != NULL)
            snprintf(want, sizeof want, " (default: %s)", info.default_words);
        else
            want[0] = '\0';
        size_t n = strlen(line), w = strlen(want);
        if (w > 0 && (n < w || strcmp(line + n - w, want) != 0))
            fail_msg("--help line \"%s\" does not end with \"%s\"", line, want);
        const char *claim = strstr(line, "(default");
        if (claim != NULL && claim != line + n - w + 1)
            fail_msg("--help line \"%s\" names a default its row does not hold", line);
    }
    assert_true(i > 30);
    capture_free(&cap);
}

/* A default_value is exactly what the defaults hold: giving it in a file
 * (or as a flag) changes nothing. */
static void test_table_defaults_change_nothing(void **state)
{
    (void)state;
    struct rkv_server_config c, d;
    struct capture cap = { 0 };
    struct rkv_setting_info info;
    assert_int_equal(parse_text(&d, &cap, "", 0), RKV_CONFIG_OK);
    capture_free(&cap);
    for (size_t i = 0; rkv_server_config_setting(i, &info); i++) {
        if (info.default_value == NULL)
            continue;
        char text[256], flag[64];
        int n = snprintf(text, sizeof text, "[%s]\n%s = %s\n", info.section, info.key,
                         info.default_value);
        assert_int_equal(parse_text(&c, &cap, text, (size_t)n), RKV_CONFIG_OK);
        if (memcmp(&c, &d, sizeof c) != 0)
            fail_msg("[%s] %s = %s is not the default", info.section, info.key, info.default_value);
        capture_free(&cap);
        if (info.no_arg)
            continue; /* a flag without a value can only say "yes" */
        snprintf(flag, sizeof flag, "--%s", info.flag);
        assert_int_equal(load_args(&c, &cap, flag, info.default_value, NULL), RKV_CONFIG_OK);
        capture_free(&cap);
        struct rkv_server_config plain;
        assert_int_equal(load_args(&plain, &cap, NULL), RKV_CONFIG_OK);
        capture_free(&cap);
        if (memcmp(&c, &plain, sizeof c) != 0)
            fail_msg("%s %s is not the default", flag, info.default_value);
    }
}

/* The listener settings' defaults are the listeners' own: rkv-server run
 * with no [rpc] or [rdma] settings passes what rkv_strans_params_init()
 * gives a listener that is handed none. */
static void test_transport_defaults_are_the_listeners(void **state)
{
    (void)state;
    struct rkv_server_config c;
    struct rkv_strans_params p;
    rkv_server_config_defaults(&c);
    rkv_strans_params_init(&p);
    assert_int_equal(c.credits, p.credits);
    assert_int_equal(c.max_msg, p.max_msg);
    assert_int_equal(c.max_conns, p.max_conns);
    assert_int_equal(c.gid_index, p.gid_index);
    assert_int_equal(c.max_inline, p.max_inline);
    assert_int_equal(c.signal_interval, p.signal_interval);
    assert_int_equal(c.cq_size, p.cq_size);
    assert_int_equal(c.tos, p.tos);
    assert_int_equal(c.ack_timeout, p.ack_timeout);
    assert_int_equal(c.retry_count, p.retry_count);
    assert_string_equal(c.rdma_device, "");
    assert_null(p.device);
}

/* ------------------------------------------------------------ files and flags */

static const char full_conf[] = "# every key\n"
                                "[server]\n"
                                "listen = rdma://0.0.0.0:7000, shm:///tmp/a.sock\n"
                                "listen = rdma://[::1]:7001\n"
                                "memory = 1G\n"
                                "workers = 4\n"
                                "cpus = 0, 2-3\n"
                                "log_level = debug\n"
                                "log_file = /var/log/rkv.log\n"
                                "poll_mode = busy\n"
                                "poll_idle_us = 350\n"
                                "hugepages_required = true\n"
                                "memory_check = off\n"
                                "state_file = /var/lib/rkv/rkv.state\n"
                                "fd_store = no\n"
                                "[table]\n"
                                "slab_page_size = 2M ; inline comment\n"
                                "max_value_len = 1M\n"
                                "item_size_hint = 100K\n"
                                "grace_ms = 250\n"
                                "default_ttl = 3600\n"
                                "evict = random\n"
                                "[rpc]\n"
                                "credits = 128\n"
                                "max_msg = 8K\n"
                                "max_conns = 100\n"
                                "[rdma]\n"
                                "device = mlx5_0\n"
                                "gid_index = 3\n"
                                "max_inline = 128\n"
                                "signal_interval = 8\n"
                                "cq_size = 4096\n"
                                "tos = 106\n"
                                "ack_timeout = 14\n"
                                "retry_count = 3\n"
                                "[security]\n"
                                "secret = s3cr3t\n"
                                "[stats]\n"
                                "listen = 127.0.0.1:9121\n";

static void test_file_sets_every_key(void **state)
{
    (void)state;
    struct rkv_server_config c;
    struct capture cap = { 0 };
    const char *path = temp_file(0, full_conf);
    assert_int_equal(load_args(&c, &cap, "--config", path, NULL), RKV_CONFIG_OK);
    assert_string_equal(c.config_path, path);
    assert_int_equal(c.listen_count, 3);
    assert_string_equal(c.listen[0].uri, "rdma://0.0.0.0:7000");
    assert_string_equal(c.listen[1].uri, "shm:///tmp/a.sock");
    assert_string_equal(c.listen[2].uri, "rdma://[::1]:7001");
    assert_int_equal(c.memory, 1ull << 30);
    assert_int_equal(c.workers, 4);
    assert_int_equal(c.cpu_count, 3);
    assert_int_equal(c.cpus[0], 0);
    assert_int_equal(c.cpus[1], 2);
    assert_int_equal(c.cpus[2], 3);
    assert_int_equal(c.log_level, RKV_LOG_DEBUG);
    assert_string_equal(c.log_file, "/var/log/rkv.log");
    assert_int_equal(c.poll_mode, RKV_POLL_BUSY);
    assert_int_equal(c.poll_idle_us, 350);
    assert_true(c.hugepages_required);
    assert_false(c.memory_check);
    assert_string_equal(c.state_file, "/var/lib/rkv/rkv.state");
    assert_false(c.fd_store);
    assert_int_equal(c.slab_page_size, 2u << 20);
    assert_int_equal(c.max_value_len, 1u << 20);
    assert_int_equal(c.item_size_hint, 100u << 10);
    assert_int_equal(c.grace_ms, 250);
    assert_int_equal(c.default_ttl, 3600);
    assert_int_equal(c.evict, RKV_EVICT_RANDOM);
    assert_int_equal(c.credits, 128);
    assert_int_equal(c.max_msg, 8192);
    assert_int_equal(c.max_conns, 100);
    assert_string_equal(c.rdma_device, "mlx5_0");
    assert_int_equal(c.gid_index, 3);
    assert_int_equal(c.max_inline, 128);
    assert_int_equal(c.signal_interval, 8);
    assert_int_equal(c.cq_size, 4096);
    assert_int_equal(c.tos, 106);
    assert_int_equal(c.ack_timeout, 14);
    assert_int_equal(c.retry_count, 3);
    assert_string_equal(c.auth_secret, "s3cr3t");
    assert_string_equal(c.stats_listen, "127.0.0.1:9121");
    unlink(path);
    capture_free(&cap);
}

static void test_flags_override_file(void **state)
{
    (void)state;
    struct rkv_server_config c;
    struct capture cap = { 0 };
    const char *path = temp_file(0, full_conf);
    /* Flags come after the file whatever their position relative to --config. */
    assert_int_equal(load_args(&c, &cap, "--memory", "512M", "--config", path, "--evict", "none",
                               "--listen", "shm:///tmp/b.sock", "-w", "2", "--event-mode",
                               "--gid-index", "auto", "--stats-listen", "off", "--rdma-ack-timeout",
                               "18", NULL),
                     RKV_CONFIG_OK);
    assert_int_equal(c.ack_timeout, 18);
    assert_int_equal(c.retry_count, 3); /* the file's */
    assert_int_equal(c.memory, 512ull << 20);
    assert_int_equal(c.evict, RKV_EVICT_NONE);
    assert_int_equal(c.workers, 2);
    assert_int_equal(c.gid_index, -1);
    assert_string_equal(c.stats_listen, "");
    assert_int_equal(c.poll_mode, RKV_POLL_EVENT); /* --event-mode over the file's busy */
    /* --listen replaces the file's list rather than adding to it. */
    assert_int_equal(c.listen_count, 1);
    assert_string_equal(c.listen[0].uri, "shm:///tmp/b.sock");
    /* Keys no flag touched keep the file's value. */
    assert_int_equal(c.grace_ms, 250);
    assert_string_equal(c.rdma_device, "mlx5_0");
    unlink(path);
    capture_free(&cap);
}

static void test_listen_repeatable(void **state)
{
    (void)state;
    struct rkv_server_config c;
    struct capture cap = { 0 };
    assert_int_equal(load_args(&c, &cap, "--listen", "rdma://192.0.2.1:7000", "-l",
                               "shm:///run/x.sock", "--listen", "rdma://host.example:1", NULL),
                     RKV_CONFIG_OK);
    assert_int_equal(c.listen_count, 3);
    assert_string_equal(c.listen[0].uri, "rdma://192.0.2.1:7000");
    assert_string_equal(c.listen[1].uri, "shm:///run/x.sock");
    assert_string_equal(c.listen[2].uri, "rdma://host.example:1");
    capture_free(&cap);

    /* Eight fit; the ninth is refused. */
    char uris[9][40];
    for (int i = 0; i < 9; i++)
        snprintf(uris[i], sizeof uris[i], "rdma://10.0.0.1:%d", 7000 + i);
    assert_int_equal(load_args(&c, &cap, "-l", uris[0], "-l", uris[1], "-l", uris[2], "-l", uris[3],
                               "-l", uris[4], "-l", uris[5], "-l", uris[6], "-l", uris[7], NULL),
                     RKV_CONFIG_OK);
    assert_int_equal(c.listen_count, 8);
    capture_free(&cap);
    assert_int_equal(load_args(&c, &cap, "-l", uris[0], "-l", uris[1], "-l", uris[2], "-l", uris[3],
                               "-l", uris[4], "-l", uris[5], "-l", uris[6], "-l", uris[7], "-l",
                               uris[8], NULL),
                     RKV_CONFIG_BAD);
    assert_non_null(strstr(cap.err, "at most 8 listen URIs"));
    capture_free(&cap);
}

static void test_secret_file(void **state)
{
    (void)state;
    struct rkv_server_config c;
    struct capture cap = { 0 };
    const char *secret = temp_file(1, "0123456789abcdef\n");
    assert_int_equal(load_args(&c, &cap, "--auth-secret-file", secret, NULL), RKV_CONFIG_OK);
    assert_string_equal(c.auth_secret, "0123456789abcdef");
    capture_free(&cap);

    char conf[256];
    snprintf(conf, sizeof conf, "[security]\nsecret_file = %s\n", secret);
    assert_int_equal(parse_text(&c, &cap, conf, strlen(conf)), RKV_CONFIG_OK);
    assert_string_equal(c.auth_secret, "0123456789abcdef");
    capture_free(&cap);
    unlink(secret);

    /* 65 characters: one too many. */
    secret = temp_file(1, "00000000001111111111222222222233333333334444444444555555555566666\n");
    assert_int_equal(load_args(&c, &cap, "--auth-secret-file", secret, NULL), RKV_CONFIG_BAD);
    assert_non_null(strstr(cap.err, "--auth-secret-file"));
    assert_non_null(strstr(cap.err, "does not hold a usable secret"));
    capture_free(&cap);
    unlink(secret);

    /* A FIFO is refused without blocking on it. */
    char dir[] = "/tmp/rkv-test-fifo-XXXXXX", fifo[64];
    assert_non_null(mkdtemp(dir));
    snprintf(fifo, sizeof fifo, "%s/secret", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_int_equal(load_args(&c, &cap, "--auth-secret-file", fifo, NULL), RKV_CONFIG_BAD);
    assert_non_null(strstr(cap.err, "is not a regular file"));
    capture_free(&cap);
    unlink(fifo);
    rmdir(dir);
}

/* poll_mode and its older spelling event_mode: yes was event, no busy. */
static void test_poll_mode_spellings(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        int mode;
    } cases[] = {
        { "[server]\npoll_mode = adaptive\n", RKV_POLL_ADAPTIVE },
        { "[server]\npoll_mode = busy\n", RKV_POLL_BUSY },
        { "[server]\npoll_mode = event\n", RKV_POLL_EVENT },
        { "[server]\nevent_mode = yes\n", RKV_POLL_EVENT },
        { "[server]\nevent_mode = no\n", RKV_POLL_BUSY },
    };
    struct rkv_server_config c;
    struct capture cap = { 0 };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rkv_server_config_defaults(&c);
        assert_int_equal(rkv_server_config_parse(&c, cases[i].text, strlen(cases[i].text), "t.conf",
                                                 NULL),
                         RKV_CONFIG_OK);
        assert_int_equal(c.poll_mode, cases[i].mode);
    }
    assert_int_equal(load_args(&c, &cap, "--event-mode", "--poll-mode", "busy", NULL), RKV_CONFIG_OK);
    assert_int_equal(c.poll_mode, RKV_POLL_BUSY); /* the later flag wins */
    capture_free(&cap);
    assert_int_equal(load_args(&c, &cap, "--poll-mode", "event", "--poll-idle-us", "1", NULL),
                     RKV_CONFIG_OK);
    assert_int_equal(c.poll_mode, RKV_POLL_EVENT);
    assert_int_equal(c.poll_idle_us, 1);
    capture_free(&cap);
}

static void test_cpu_list(void **state)
{
    (void)state;
    int cpus[RKV_CONFIG_MAX_CPUS];
    char why[128];
    assert_int_equal(rkv_parse_cpu_list("0,2-3", cpus, 64, why, sizeof why), 3);
    assert_int_equal(cpus[0], 0);
    assert_int_equal(cpus[1], 2);
    assert_int_equal(cpus[2], 3);
    assert_int_equal(rkv_parse_cpu_list(" 7 , 4-5 ", cpus, 64, why, sizeof why), 3);
    assert_int_equal(cpus[0], 7);
    assert_int_equal(cpus[1], 4);
    assert_int_equal(cpus[2], 5);
    assert_int_equal(rkv_parse_cpu_list("1023", cpus, 64, why, sizeof why), 1);
    assert_int_equal(rkv_parse_cpu_list("0-63", cpus, 64, why, sizeof why), 64);
    assert_int_equal(cpus[63], 63);
    assert_int_equal(rkv_parse_cpu_list("0-64", cpus, 64, why, sizeof why), -1);
    assert_non_null(strstr(why, "more than 64"));
    assert_int_equal(rkv_parse_cpu_list("3-1", cpus, 64, why, sizeof why), -1);
    assert_int_equal(rkv_parse_cpu_list("1,1", cpus, 64, why, sizeof why), -1);
    assert_non_null(strstr(why, "listed twice"));
    assert_int_equal(rkv_parse_cpu_list("1024", cpus, 64, why, sizeof why), -1);
    assert_int_equal(rkv_parse_cpu_list("0,,1", cpus, 64, why, sizeof why), -1);
    assert_int_equal(rkv_parse_cpu_list("", cpus, 64, why, sizeof why), -1);
    assert_int_equal(rkv_parse_cpu_list("-1", cpus, 64, why, sizeof why), -1);
    assert_int_equal(rkv_parse_cpu_list("1-", cpus, 64, why, sizeof why), -1);
    assert_int_equal(rkv_parse_cpu_list("a", cpus, 64, why, sizeof why), -1);

    struct rkv_server_config c;
    struct capture cap = { 0 };
    assert_int_equal(load_args(&c, &cap, "--cpus", "1,3-4", NULL), RKV_CONFIG_OK);
    assert_int_equal(c.cpu_count, 3);
    assert_int_equal(c.cpus[2], 4);
    capture_free(&cap);
    assert_int_equal(load_args(&c, &cap, "--cpus", "auto", NULL), RKV_CONFIG_OK);
    assert_int_equal(c.cpu_count, 0);
    capture_free(&cap);
}

static void test_example_config_is_valid(void **state)
{
    (void)state;
    struct rkv_server_config c, d;
    struct capture cap = { 0 };
    assert_int_equal(load_args(&c, &cap, "--config", RKV_EXAMPLE_CONF, NULL), RKV_CONFIG_OK);
    assert_int_equal(cap.err_len, 0);
    capture_free(&cap);
    /* The example documents the defaults: it must load to the same values
     * (apart from where it came from and the listen list it spells out). */
    assert_int_equal(load_args(&d, &cap, NULL), RKV_CONFIG_OK);
    capture_free(&cap);
    assert_int_equal(c.memory, d.memory);
    assert_int_equal(c.workers, d.workers);
    assert_int_equal(c.log_level, d.log_level);
    assert_int_equal(c.slab_page_size, d.slab_page_size);
    assert_int_equal(c.max_value_len, d.max_value_len);
    assert_int_equal(c.grace_ms, d.grace_ms);
    assert_int_equal(c.evict, d.evict);
    assert_int_equal(c.credits, d.credits);
    assert_int_equal(c.max_msg, d.max_msg);
    assert_int_equal(c.max_conns, d.max_conns);
    assert_int_equal(c.max_unauth_conns, d.max_unauth_conns);
    assert_int_equal(c.hello_timeout_ms, d.hello_timeout_ms);
    assert_int_equal(c.gid_index, d.gid_index);
    assert_int_equal(c.max_inline, d.max_inline);
    assert_int_equal(c.signal_interval, d.signal_interval);
    assert_int_equal(c.cq_size, d.cq_size);
    assert_int_equal(c.tos, d.tos);
    assert_int_equal(c.ack_timeout, d.ack_timeout);
    assert_int_equal(c.retry_count, d.retry_count);
    assert_int_equal(c.poll_mode, d.poll_mode);
    assert_int_equal(c.poll_idle_us, d.poll_idle_us);
    assert_int_equal(c.hugepages_required, d.hugepages_required);
    assert_int_equal(c.memory_check, d.memory_check);
    assert_string_equal(c.state_file, d.state_file);
}

/* ------------------------------------------------------------ refused flags */

struct bad_flags {
    const char *args[6]; /* NULL-terminated */
    const char *message; /* expected in the captured stderr */
};

static const struct bad_flags bad_flag_cases[] = {
    { { "--memory", "12Q" },
      "rkv-server: --memory: \"12Q\" is not a size; use a number with an "
      "optional K/M/G/T suffix, e.g. 256M\n" },
    { { "--memory", "1M" }, "--memory: \"1M\" is out of range; expected a size from 8 MiB" },
    { { "-m", "0" }, "--memory: \"0\" is not a size" },
    { { "--workers", "0" }, "--workers: \"0\" is out of range; expected 1..64" },
    { { "--workers", "65" }, "expected 1..64" },
    { { "--workers", "-1" }, "--workers: \"-1\" is not a whole number; expected 1..64" },
    { { "--workers", "2x" }, "expected 1..64" },
    { { "--log-level", "loud" }, "expected error, warn, info or debug" },
    { { "--evict", "fifo" }, "expected none (PUT fails when full), lru, random or s3fifo" },
    { { "--slab-page-size", "3M" }, "expected a power of two from 64K to 16M" },
    { { "--slab-page-size", "32K" }, "expected a power of two from 64K to 16M" },
    { { "--slab-page-size", "32M" }, "expected a power of two from 64K to 16M" },
    { { "--grace-ms", "60001" }, "--grace-ms: \"60001\" is out of range; expected 0..60000" },
    { { "--item-size-hint", "31" }, "--item-size-hint: \"31\" is out of range" },
    { { "--default-ttl", "4294967296" }, "--default-ttl" },
    { { "--credits", "0" }, "expected 1..4096" },
    { { "--credits", "4097" }, "expected 1..4096" },
    { { "--max-msg", "100" }, "--max-msg: \"100\" is out of range" },
    { { "--max-msg", "2M" }, "--max-msg" },
    { { "--max-conns", "0" }, "expected 1..65536" },
    { { "--max-unauth-conns", "0" }, "expected 1..4096" },
    { { "--hello-timeout-ms", "5" }, "expected 10..600000" },
    { { "--gid-index", "x" }, "expected auto (or -1) or 0..65535" },
    { { "--gid-index", "-2" }, "--gid-index" },
    { { "--max-inline", "1025" }, "expected 0..1024" },
    { { "--signal-interval", "0" }, "expected 1..1024" },
    { { "--tos", "256" }, "expected 0..255" },
    { { "--rdma-ack-timeout", "0" }, "--rdma-ack-timeout: \"0\" is out of range; expected 1..31" },
    { { "--rdma-ack-timeout", "32" }, "expected 1..31" },
    { { "--rdma-ack-timeout", "fast" }, "is not a whole number; expected 1..31" },
    { { "--rdma-retry-count", "0" }, "--rdma-retry-count: \"0\" is out of range; expected 1..7" },
    { { "--rdma-retry-count", "8" }, "expected 1..7" },
    { { "--rdma-device", "mlx5 0" }, "is not a device name" },
    { { "--rdma-device", "" }, "is not a device name" },
    { { "--listen", "udp://1.2.3.4:5" }, "expected rdma://HOST:PORT" },
    { { "--listen", "tcp://host" }, "is not tcp://HOST:PORT" },
    { { "--listen", "tcp://host:0" }, "is not tcp://HOST:PORT" },
    { { "--listen", "rdma://host" }, "is not rdma://HOST:PORT" },
    { { "--listen", "rdma://host:0" }, "is not rdma://HOST:PORT" },
    { { "--listen", "rdma://host:65536" }, "is not rdma://HOST:PORT" },
    { { "--listen", "shm://relative.sock" }, "is not shm:///PATH" },
    { { "--listen", "shm:///" }, "is not shm:///PATH" },
    { { "--listen", "shm:///tmp/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.sock" },
      "at most 107 bytes" },
    { { "--listen", "rdma://h:1,,shm:///x" }, "has an empty entry" },
    { { "--listen", "rdma://h:1", "--listen", "rdma://h:1" }, "already listed" },
    { { "--stats-listen", "9121" }, "expected HOST:PORT" },
    { { "--cpus", "3-1" }, "--cpus: \"3-1\" is not a CPU list" },
    { { "--event-mode=no" }, "--event-mode=no: this flag takes no value" },
    { { "--poll-mode", "spin" }, "--poll-mode: \"spin\" is not a poll mode; expected adaptive" },
    { { "--poll-mode", "" }, "is not a poll mode" },
    { { "--poll-idle-us", "0" }, "--poll-idle-us: \"0\" is out of range; expected 1..1000000" },
    { { "--poll-idle-us", "1000001" }, "expected 1..1000000" },
    { { "--poll-idle-us", "200us" }, "expected 1..1000000" },
    { { "--auth-secret", "has space" }, "is not a usable secret" },
    { { "--auth-secret", "0123456789012345678901234567890123456789012345678901234567890123x" },
      "is not a usable secret" },
    { { "--auth-secret-file", "/nonexistent/rkv-secret" }, "cannot be opened; No such file" },
    { { "--log-file", "" }, "--log-file" },
    { { "--bogus" }, "--bogus is not an option; see rkv-server --help" },
    { { "-x" }, "-x is not an option" },
    { { "--memory" }, "--memory needs a value" },
    { { "stray" }, "unexpected argument \"stray\"" },
    { { "--config", "/nonexistent/rkv.conf" }, "cannot open config file /nonexistent/rkv.conf" },
    { { "--config", "/tmp" }, "is not a regular file" },
    /* Combinations. */
    { { "--max-value-len", "2M" }, "does not fit a slab page of 1 MiB" },
    { { "--cq-size", "100" }, "cq_size 100 is below 2 x credits (128)" },
    { { "--memory", "8M", "--slab-page-size", "4M" }, "holds fewer than 4 slab pages" },
    { { "--max-msg", "512", "--max-inline", "1024" }, "max_inline 1024 is larger than max_msg 512" },
};

static void test_bad_flags(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof bad_flag_cases / sizeof bad_flag_cases[0]; i++) {
        const struct bad_flags *t = &bad_flag_cases[i];
        struct rkv_server_config c;
        struct capture cap = { 0 };
        int rc = load_args(&c, &cap, t->args[0], t->args[1], t->args[2], t->args[3], t->args[4],
                           t->args[5]);
        if (rc != RKV_CONFIG_BAD || cap.err == NULL || strstr(cap.err, t->message) == NULL)
            fail_msg("case %zu (%s): rc %d, stderr \"%s\", wanted \"%s\"", i, t->args[0], rc,
                     cap.err ? cap.err : "", t->message);
        assert_int_equal(rc, 2);
        capture_free(&cap);
    }
}

/* ------------------------------------------------------------ refused files */

struct bad_file {
    const char *text;
    const char *message;
};

static const struct bad_file bad_file_cases[] = {
    { "[table]\ngrace_ms = -1\n", "rkv-server: t.conf:2: [table] grace_ms = -1: expected 0..60000\n" },
    { "[server]\nmemory = 12Q\n", "t.conf:2: [server] memory = 12Q: use a number with an optional "
                                  "K/M/G/T suffix, e.g. 256M" },
    { "\n\n[tabel]\nevict = lru\n", "t.conf:3: [tabel] is not a section; sections are [server]" },
    { "[server]\nworkers = 2\n[tble]\n", "t.conf:3: [tble] is not a section" },
    { "[ server ]\n", "t.conf:1: [ server ] is not a section" },
    { "memory = 1G\n", "t.conf:1: memory = 1G comes before any [section]" },
    { "[table]\nmemory = 1G\n", "t.conf:2: [table] memory: unknown key; [table] accepts "
                                "slab_page_size, max_value_len, item_size_hint, grace_ms, default_ttl, "
                                "evict" },
    { "[server]\nworkers = 2\nworkers = 3\n", "t.conf:3: [server] workers: this key was already "
                                              "set on line 2" },
    { "[security]\nsecret = abc\nsecret_file = /etc/passwd\n",
      "t.conf:3: [security] secret_file: secret already set on line 2" },
    { "[server]\nthis line has no equals sign\n", "t.conf:2: not a [section] or key = value line" },
    { "[server\nworkers = 2\n", "t.conf:1: not a [section] or key = value line" },
    { "[server]\nevent_mode = maybe\n", "t.conf:2: [server] event_mode = maybe: expected yes/no" },
    { "[server]\npoll_mode = sometimes\n", "t.conf:2: [server] poll_mode = sometimes: expected "
                                           "adaptive" },
    { "[server]\npoll_mode = busy\nevent_mode = yes\n",
      "t.conf:3: [server] event_mode: poll_mode already set on line 2" },
    { "[server]\nlisten = rdma://a:1, rdma://a:1\n", "rdma://a:1 is already listed" },
    { "[rdma]\ndevice = bad\x1b[31m\n", "[rdma] device = bad?[31m: expected a name like mlx5_0" },
    { "[rpc]\ncredits = 8\n[rdma]\ncq_size = 10\n", "cq_size 10 is below 2 x credits (16)" },
    { "[server]\nworkers =\n", "t.conf:2: [server] workers = : expected 1..64" },
    { "[rdma]\nack_timeout = 40\n", "t.conf:2: [rdma] ack_timeout = 40: expected 1..31" },
    { "[rdma]\nretry_count = -1\n", "t.conf:2: [rdma] retry_count = -1: expected 1..7" },
    { "[server]\nworkers = 2\n  3\n",
      "t.conf:3: [server] workers: this key was already set on line 2" },
};

static void test_bad_files(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof bad_file_cases / sizeof bad_file_cases[0]; i++) {
        const struct bad_file *t = &bad_file_cases[i];
        struct rkv_server_config c;
        struct capture cap = { 0 };
        int rc = parse_text(&c, &cap, t->text, strlen(t->text));
        if (rc != RKV_CONFIG_BAD || cap.err == NULL || strstr(cap.err, t->message) == NULL)
            fail_msg("case %zu: rc %d, stderr \"%s\", wanted \"%s\"", i, rc, cap.err ? cap.err : "",
                     t->message);
        capture_free(&cap);
    }
}

static void test_file_binary_and_long_lines(void **state)
{
    (void)state;
    struct rkv_server_config c;
    struct capture cap = { 0 };
    static const char nul_text[] = "[server]\nworkers = 2\0 3\n";
    assert_int_equal(parse_text(&c, &cap, nul_text, sizeof nul_text - 1), RKV_CONFIG_BAD);
    assert_non_null(strstr(cap.err, "t.conf:2: contains a NUL byte"));
    capture_free(&cap);

    char long_line[1024];
    int n = snprintf(long_line, sizeof long_line, "[server]\nlog_file = /");
    memset(long_line + n, 'a', 600);
    strcpy(long_line + n + 600, "\n");
    assert_int_equal(parse_text(&c, &cap, long_line, strlen(long_line)), RKV_CONFIG_BAD);
    assert_non_null(strstr(cap.err, "t.conf:2: is longer than"));
    capture_free(&cap);

    /* No final newline, CRLF line ends and a BOM are all fine. */
    static const char crlf[] = "\xef\xbb\xbf[server]\r\nworkers = 5\r\n[rpc]\r\ncredits = 9";
    assert_int_equal(parse_text(&c, &cap, crlf, sizeof crlf - 1), RKV_CONFIG_OK);
    assert_int_equal(c.workers, 5);
    assert_int_equal(c.credits, 9);
    capture_free(&cap);

    /* A file's error stops loading before any flag is looked at. */
    const char *path = temp_file(2, "[server]\nworkers = 0\n");
    assert_int_equal(load_args(&c, &cap, "--config", path, "--workers", "2", NULL), RKV_CONFIG_BAD);
    assert_non_null(strstr(cap.err, ":2: [server] workers = 0: expected 1..64"));
    capture_free(&cap);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_default_listen_follows_runtime_directory),
        cmocka_unit_test(test_help_and_version),
        cmocka_unit_test(test_help_shows_table_defaults),
        cmocka_unit_test(test_table_defaults_change_nothing),
        cmocka_unit_test(test_transport_defaults_are_the_listeners),
        cmocka_unit_test(test_file_sets_every_key),
        cmocka_unit_test(test_flags_override_file),
        cmocka_unit_test(test_listen_repeatable),
        cmocka_unit_test(test_secret_file),
        cmocka_unit_test(test_poll_mode_spellings),
        cmocka_unit_test(test_cpu_list),
        cmocka_unit_test(test_example_config_is_valid),
        cmocka_unit_test(test_bad_flags),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_file_binary_and_long_lines),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
