/* fd_store.h — the region kept in systemd's file-descriptor store (--fd-store).
 *
 * Once the table exists, rkv-server hands the service manager two
 * descriptors over $NOTIFY_SOCKET (FDSTORE=1, SCM_RIGHTS), which it keeps
 * while the service restarts and passes to the next start
 * (LISTEN_PID/LISTEN_FDS/LISTEN_FDNAMES, from fd 3):
 *
 *   RKV_FDSTORE_REGION  the region's sealed memfd itself (region.h): what
 *                       the server wrote up to its last instant, a crash
 *                       included;
 *   RKV_FDSTORE_STATE   a memfd of RKV_STATE_HEADER_SIZE bytes holding a
 *                       state header (state_file.h): while the server runs,
 *                       a "running" record (running_mono_ns set) with the
 *                       fingerprint and the clock and version of its start;
 *                       after a clean stop, the header a state file would
 *                       get.
 *
 * The next start validates both (seals, size, header, fingerprint: the state
 * file's rules and messages), copies the region into its own new sealed
 * region (a memfd sealed against writes can never be mapped writable
 * again) and attaches it with every item verified. After a clean stop that
 * is a restart without a file; after a crash, the running record tells it
 * not to trust the region's header checksum and how far the clock and the
 * versions may have gone. Parsing and checking are pure or work on a
 * descriptor (unit-tested; the record's decoder is fuzz_state's).
 */
#ifndef RKV_FD_STORE_H
#define RKV_FD_STORE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "state_file.h"

#define RKV_FDSTORE_REGION   "rkv-region"
#define RKV_FDSTORE_STATE    "rkv-state"
#define RKV_FDSTORE_FIRST_FD 3 /* SD_LISTEN_FDS_START */
#define RKV_FDSTORE_MAX_FDS  64

/* The descriptors handed to this start that are the store's; -1 when absent. */
struct rkv_fdstore_fds {
    int region;
    int state;
    unsigned count; /* LISTEN_FDS: descriptors handed, ours or not */
};

/* Which handed descriptors are ours, from the values of LISTEN_PID,
 * LISTEN_FDS and LISTEN_FDNAMES (NULL when unset) and this process's pid.
 * Nothing handed (no LISTEN_PID, or another process's) is 0 with both -1.
 * -1 with a message for a LISTEN_FDS that is not a count from 1 to
 * RKV_FDSTORE_MAX_FDS, names that are not one per descriptor, or one of our
 * names twice. Other names, or none (LISTEN_FDNAMES unset), are not ours. */
int rkv_fdstore_parse(const char *listen_pid, const char *listen_fds, const char *names, pid_t self,
                      struct rkv_fdstore_fds *out, char *err, size_t err_len);

/* The region descriptor is the sealed memfd a server made (seals shrink,
 * grow, future-write and seal) of exactly `size` bytes. 0, or -1 with a
 * message. */
int rkv_fdstore_check_region(int fd, uint64_t size, char *err, size_t err_len);

/* A new, empty state record memfd (close-on-exec). -1 with a message. */
int rkv_fdstore_state_create(char *err, size_t err_len);

/* Read and decode the record in a state memfd: exactly
 * RKV_STATE_HEADER_SIZE bytes that rkv_state_decode accepts. 0, or -1 with
 * a message. */
int rkv_fdstore_read_state(int fd, struct rkv_state_header *out, char *err, size_t err_len);

/* Replace the record in a state memfd. 0, or -1 with a message. */
int rkv_fdstore_write_state(int fd, const struct rkv_state_header *h, char *err, size_t err_len);

/* Hand fd to the service manager's store under `name`; remove what it
 * stores under `name`. 0, or -1 (errno set); 0 also when there is no
 * service manager ($NOTIFY_SOCKET unset). */
int rkv_fdstore_push(int fd, const char *name);
int rkv_fdstore_remove(const char *name);

/* Where a kept region's table goes on from, given its record and the
 * clocks now: the clock at the record plus the whole seconds of realtime
 * since; for a running record (a crash), versions above any the crashed
 * server can have handed out — its versions grow with CLOCK_MONOTONIC
 * (table.c version_new), so the record's version plus the monotonic time
 * since, in version units, plus a second's margin. -1 when a running
 * record's monotonic time is ahead of now (it cannot be from this boot). */
int rkv_fdstore_restore_point(const struct rkv_state_header *rec, uint64_t real_now_ns,
                              uint64_t mono_now_ns, uint32_t *clock, uint64_t *max_version);

#endif
