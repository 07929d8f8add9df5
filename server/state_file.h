/* state_file.h — the file a clean stop keeps the cache in (--state-file).
 *
 * On SIGTERM/SIGINT, once the workers have stopped (no write in flight),
 * rkv-server writes PATH.tmp and renames it to PATH:
 *
 *   +---------------------------+ 0
 *   | state header              |  RKV_STATE_HEADER_SIZE bytes, fields below, little endian,
 *   |                           |  an XXH3-64 of everything before its last 8 bytes in them
 *   +---------------------------+ RKV_STATE_HEADER_SIZE
 *   | the region, byte for byte |  region_size bytes: region header, index, item heap
 *   +---------------------------+
 *
 * The region's bookkeeping outside the region (the slab allocator's) is
 * not kept: the next start rebuilds it from the index (rkv_table_attach).
 * The header says what configuration wrote the region (the fingerprint), the
 * clock and versions to go on from, and a checksum of the region's own
 * header page (hash seed, geometry); the index and the items are checked
 * item by item when attached, so a damaged item costs that item, not the
 * cache.
 *
 * A start with PATH present checks it all (rkv_state_open, rkv_state_match)
 * and refuses a file it cannot keep with one message naming the option that
 * keeps it or saying to remove the file (exit 2 in rkv-server); otherwise
 * it reads the region back, attaches it and removes PATH before serving, so
 * that a crash later cannot bring back an older snapshot.
 *
 * Encoding and checking are pure functions over bytes (unit-tested and
 * fuzzed: tests/fuzz/fuzz_state.c); the file functions do the I/O.
 */
#ifndef RKV_STATE_FILE_H
#define RKV_STATE_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define RKV_STATE_MAGIC       0x3145544154535652ull /* "RVSTATE1" */
#define RKV_STATE_VERSION     1u                    /* this header's layout */
#define RKV_STATE_HEADER_SIZE 4096u                 /* the region starts page-aligned in the file */

struct rkv_state_header {
    uint32_t state_version;  /* RKV_STATE_VERSION */
    uint32_t format_version; /* RKV_FORMAT_VERSION of the region (common/layout.h) */
    char rkv_version[32];    /* RKV_VERSION_STRING of the server that wrote it */
    /* the configuration fingerprint */
    uint64_t region_size; /* bytes of region (the --memory it got) */
    uint32_t page_kind;   /* bytes per page backing the region: 4096, 2 MiB, 1 GiB */
    uint32_t slab_page_size;
    uint32_t growth_millis; /* size class growth factor x 1000 */
    uint32_t max_key_len;
    uint32_t max_value_len;
    uint32_t class_count;
    uint64_t bucket_count; /* index geometry: the buckets it may grow to */
    uint64_t heap_offset;
    uint64_t heap_size;
    /* where the next server goes on from */
    uint32_t clock;             /* the server clock at the stop */
    uint64_t stop_realtime_ns;  /* CLOCK_REALTIME at the stop */
    uint64_t max_version;       /* at least every item's version */
    uint64_t region_header_sum; /* XXH3-64 of the region's first RKV_HEADER_SIZE bytes */
    /* 0: a clean stop wrote this header. Otherwise the record a running
     * server keeps in systemd's file-descriptor store (fd_store.h):
     * CLOCK_MONOTONIC when it wrote it, with the clock, CLOCK_REALTIME and
     * version of that moment in the fields above (region_header_sum 0). A
     * state file never holds one. */
    uint64_t running_mono_ns;
};

/* Header <-> bytes. encode writes all RKV_STATE_HEADER_SIZE bytes (checksum
 * included). decode accepts only a whole, undamaged header of this
 * version: false with a message in err for fewer than RKV_STATE_HEADER_SIZE
 * bytes, a wrong magic, another state version, a checksum that does not
 * match, a version string without its NUL or bytes that must be zero that
 * are not. */
void rkv_state_encode(const struct rkv_state_header *h, uint8_t out[RKV_STATE_HEADER_SIZE]);
bool rkv_state_decode(const uint8_t *buf, size_t len, struct rkv_state_header *out, char *err,
                      size_t err_len);

/* Whether the file's header `file` fits the server that would keep it
 * (`want`: this rkv's format and the configuration's fingerprint; its clock
 * and version fields are ignored). False with one message naming `path`,
 * what differs, and the option that keeps the cache or that removing the
 * file starts empty, e.g. "--state-file /x was written with --memory 1G;
 * start with --memory 1G to keep the cache, or remove the file to start
 * empty". */
bool rkv_state_match(const struct rkv_state_header *file, const struct rkv_state_header *want,
                     const char *path, char *err, size_t err_len);

/* rkv_state_match for a kept region from elsewhere: `source` names it in
 * the message ("--state-file /x", "the region in systemd's file-descriptor
 * store") and `empty` says how to start empty instead. */
bool rkv_state_match_source(const struct rkv_state_header *file, const struct rkv_state_header *want,
                            const char *source, const char *empty, char *err, size_t err_len);

/* The XXH3-64 of a region's header page (region_header_sum). */
uint64_t rkv_state_region_header_sum(const void *region);

/* What rkv_state_open found. */
enum rkv_state_open_result {
    RKV_STATE_NONE,    /* no file at path: start empty */
    RKV_STATE_OK,      /* *fd open at the region's first byte, *out decoded */
    RKV_STATE_REFUSED, /* a file that must not be used: message in err */
};

/* Open PATH as a state file: a regular file (not a symlink) owned by
 * `owner` with mode 0600, a header that decodes, and exactly
 * RKV_STATE_HEADER_SIZE + region_size bytes. */
enum rkv_state_open_result rkv_state_open(const char *path, uid_t owner, int *fd,
                                          struct rkv_state_header *out, char *err, size_t err_len);

/* Read `size` bytes of region from fd (rkv_state_open's) into base. 0, or
 * -1 with a message. */
int rkv_state_read_region(int fd, const char *path, void *base, size_t size, char *err,
                          size_t err_len);

/* Write header and region to PATH.tmp (mode 0600), fsync it, rename it to
 * PATH and fsync the directory. 0, or -1 with a message (PATH.tmp removed). */
int rkv_state_save(const char *path, const struct rkv_state_header *h, const void *base,
                   size_t size, char *err, size_t err_len);

/* Whether a state file can be written at PATH: its directory exists and is
 * writable. 0, or -1 with a message naming --state-file. */
int rkv_state_check_dir(const char *path, char *err, size_t err_len);

/* The bytes per page backing a region's memfd (st_blksize: the hugepage
 * size for hugetlb), 4096 when it cannot be told. */
uint32_t rkv_state_page_kind(int region_fd);

#endif
