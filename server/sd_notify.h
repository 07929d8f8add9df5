/* sd_notify.h — tell the service manager how start-up and shutdown go.
 *
 * The systemd unit is Type=notify: systemd counts the server started only
 * when it says READY=1, once it answers requests — after the region is
 * populated and a --state-file verified, which for a large region takes
 * seconds to minutes — so units ordered after it start against a server
 * that serves. The protocol is one datagram to $NOTIFY_SOCKET; without
 * that variable (not under systemd) nothing is sent.
 */
#ifndef RKV_SD_NOTIFY_H
#define RKV_SD_NOTIFY_H

/* Send `state` ("READY=1\nSTATUS=...") to $NOTIFY_SOCKET. Returns 0 (sent,
 * or no socket to send to) or -1 (errno set); a failure is not fatal to the
 * caller: the service manager then sees a start that times out. */
int rkv_sd_notify(const char *state);

/* The most descriptors one message carries. */
#define RKV_SD_NOTIFY_MAX_FDS 4

/* rkv_sd_notify, with descriptors passed along (SCM_RIGHTS): how a service
 * hands systemd what its file-descriptor store keeps ("FDSTORE=1\nFDNAME=x").
 * The caller keeps its own copies. */
int rkv_sd_notify_fds(const char *state, const int *fds, unsigned nfds);

#endif
