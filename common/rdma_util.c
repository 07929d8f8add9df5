/* rdma_util.c — see rdma_util.h.
 *
 * The texts below follow the troubleshooting tables RDMA practitioners keep
 * (device missing, port DOWN, /dev/infiniband permissions, memlock, rkey
 * mismatch, UDP 4791 blocked): every message names what failed and the
 * command that usually fixes it.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "rdma_util.h"
#include "util.h"

#define CAP_IPC_LOCK_BIT 14 /* linux/capability.h: CAP_IPC_LOCK */

static const char NO_DEVICE_HINT[] =
    "load a driver or create a Soft-RoCE device with `rdma link add rxe0 type rxe netdev eth0`";

/* ------------------------------------------------------------ messages */

struct wc_text {
    const char *name;
    const char *hint;
};

static const struct wc_text wc_texts[] = {
    [IBV_WC_SUCCESS] = { "IBV_WC_SUCCESS", "success" },
    [IBV_WC_LOC_LEN_ERR] = { "IBV_WC_LOC_LEN_ERR",
                             "local length error: a message was longer than the receive buffer posted for it "
                             "(client and server disagree on max_msg?)" },
    [IBV_WC_LOC_QP_OP_ERR] = { "IBV_WC_LOC_QP_OP_ERR",
                               "local QP operation error: the QP could not execute the work request "
                               "(inline data over max_inline_data, or too many SGEs)" },
    [IBV_WC_LOC_EEC_OP_ERR] = { "IBV_WC_LOC_EEC_OP_ERR", "local EE context operation error" },
    [IBV_WC_LOC_PROT_ERR] = { "IBV_WC_LOC_PROT_ERR",
                              "local protection error: a local buffer lies outside its memory registration or the lkey is wrong" },
    [IBV_WC_WR_FLUSH_ERR] = { "IBV_WC_WR_FLUSH_ERR",
                              "flushed: the connection had already failed or was closed (an earlier completion holds the cause)" },
    [IBV_WC_MW_BIND_ERR] = { "IBV_WC_MW_BIND_ERR", "memory window bind error" },
    [IBV_WC_BAD_RESP_ERR] = { "IBV_WC_BAD_RESP_ERR",
                              "bad response: the peer answered with an unexpected packet" },
    [IBV_WC_LOC_ACCESS_ERR] = { "IBV_WC_LOC_ACCESS_ERR",
                                "local access error: a local buffer is not registered with the access the operation needs" },
    [IBV_WC_REM_INV_REQ_ERR] = { "IBV_WC_REM_INV_REQ_ERR",
                                 "remote invalid request: the peer refused the request (memory not registered, rkey mismatch, "
                                 "or a READ longer than the peer allows); check that client and server use the rkey from HELLO" },
    [IBV_WC_REM_ACCESS_ERR] = { "IBV_WC_REM_ACCESS_ERR",
                                "remote access error: rkey/address outside the server's region or the region isn't registered for remote read" },
    [IBV_WC_REM_OP_ERR] = { "IBV_WC_REM_OP_ERR",
                            "remote operation error: the peer could not complete the request (its queue pair failed)" },
    [IBV_WC_RETRY_EXC_ERR] = { "IBV_WC_RETRY_EXC_ERR",
                               "transport retries exceeded: the peer stopped answering (process gone, link or port down, "
                               "or RoCE's UDP port 4791 blocked by a firewall: `iptables -I INPUT -p udp --dport 4791 -j ACCEPT`)" },
    [IBV_WC_RNR_RETRY_EXC_ERR] = { "IBV_WC_RNR_RETRY_EXC_ERR",
                                   "receiver-not-ready retries exceeded: the peer had no receive buffer posted "
                                   "(more requests than credits, or it stopped re-posting)" },
    [IBV_WC_LOC_RDD_VIOL_ERR] = { "IBV_WC_LOC_RDD_VIOL_ERR", "local RDD violation" },
    [IBV_WC_REM_INV_RD_REQ_ERR] = { "IBV_WC_REM_INV_RD_REQ_ERR", "remote invalid RD request" },
    [IBV_WC_REM_ABORT_ERR] = { "IBV_WC_REM_ABORT_ERR", "remote aborted the operation" },
    [IBV_WC_INV_EECN_ERR] = { "IBV_WC_INV_EECN_ERR", "invalid EE context number" },
    [IBV_WC_INV_EEC_STATE_ERR] = { "IBV_WC_INV_EEC_STATE_ERR", "invalid EE context state" },
    [IBV_WC_FATAL_ERR] = { "IBV_WC_FATAL_ERR",
                           "fatal device error: the adapter failed; see `dmesg` and `ibv_devinfo`" },
    [IBV_WC_RESP_TIMEOUT_ERR] = { "IBV_WC_RESP_TIMEOUT_ERR",
                                  "response timeout: the peer did not respond in time" },
    [IBV_WC_GENERAL_ERR] = { "IBV_WC_GENERAL_ERR", "general error reported by the device" },
    [IBV_WC_TM_ERR] = { "IBV_WC_TM_ERR", "tag matching error" },
    [IBV_WC_TM_RNDV_INCOMPLETE] = { "IBV_WC_TM_RNDV_INCOMPLETE",
                                    "tag matching rendezvous incomplete" },
};

const char *rkv_rdma_wc_status_name(enum ibv_wc_status s)
{
    if ((unsigned)s < RKV_ARRAY_SIZE(wc_texts) && wc_texts[s].name != NULL)
        return wc_texts[s].name;
    return "IBV_WC_<unknown>";
}

const char *rkv_rdma_wc_status_hint(enum ibv_wc_status s)
{
    if ((unsigned)s < RKV_ARRAY_SIZE(wc_texts) && wc_texts[s].hint != NULL)
        return wc_texts[s].hint;
    return "unknown completion status: see ibv_wc_status_str() in your rdma-core version";
}

void rkv_rdma_wc_error(enum ibv_wc_status s, const char *what, char *err, size_t err_len)
{
    snprintf(err, err_len, "%s failed: %s (%s)", what, rkv_rdma_wc_status_name(s),
             rkv_rdma_wc_status_hint(s));
}

const char *rkv_rdma_async_event_text(enum ibv_event_type ev)
{
    switch (ev) {
    case IBV_EVENT_QP_ACCESS_ERR:
        return "IBV_EVENT_QP_ACCESS_ERR: the peer asked for access our QP or memory does not grant "
               "(e.g. a READ outside the registered buffer)";
    case IBV_EVENT_QP_REQ_ERR:
        return "IBV_EVENT_QP_REQ_ERR: the peer sent a request our QP could not accept";
    case IBV_EVENT_QP_FATAL: return "IBV_EVENT_QP_FATAL: the queue pair failed";
    case IBV_EVENT_CQ_ERR: return "IBV_EVENT_CQ_ERR: a completion queue overran";
    case IBV_EVENT_PORT_ERR: return "IBV_EVENT_PORT_ERR: the port went down (`ibv_devinfo`)";
    case IBV_EVENT_DEVICE_FATAL:
        return "IBV_EVENT_DEVICE_FATAL: the RDMA device failed (see `dmesg`)";
    default: return ibv_event_type_str(ev);
    }
}

bool rkv_rdma_async_reason(struct ibv_context *ctx, char *buf, size_t len)
{
    struct ibv_async_event ev;
    bool found = false;

    while (!found && ibv_get_async_event(ctx, &ev) == 0) {
        enum ibv_event_type type = ev.event_type;
        rkv_rdma_note_async(&ev);
        ibv_ack_async_event(&ev);
        switch (type) {
        case IBV_EVENT_QP_ACCESS_ERR:
        case IBV_EVENT_QP_REQ_ERR:
        case IBV_EVENT_QP_FATAL:
        case IBV_EVENT_CQ_ERR:
        case IBV_EVENT_PORT_ERR:
        case IBV_EVENT_DEVICE_FATAL:
            snprintf(buf, len, "%s", rkv_rdma_async_event_text(type));
            found = true;
            break;
        default: /* PORT_ACTIVE, GID_CHANGE, ...: not a cause */ break;
        }
    }
    return found;
}

void rkv_rdma_note_async(const struct ibv_async_event *ev)
{
    if (ev->event_type == IBV_EVENT_SRQ_LIMIT_REACHED && ev->element.srq != NULL &&
        ev->element.srq->srq_context != NULL)
        atomic_store((atomic_bool *)ev->element.srq->srq_context, true);
}

unsigned rkv_rdma_drain_async(struct ibv_context *ctx)
{
    struct ibv_async_event ev;
    unsigned n = 0;

    while (ibv_get_async_event(ctx, &ev) == 0) {
        rkv_rdma_note_async(&ev);
        ibv_ack_async_event(&ev);
        n++;
    }
    return n;
}

const char *rkv_rdma_port_state_name(enum ibv_port_state s)
{
    switch (s) {
    case IBV_PORT_NOP: return "NOP";
    case IBV_PORT_DOWN: return "DOWN";
    case IBV_PORT_INIT: return "INIT";
    case IBV_PORT_ARMED: return "ARMED";
    case IBV_PORT_ACTIVE: return "ACTIVE";
    case IBV_PORT_ACTIVE_DEFER: return "ACTIVE_DEFER";
    }
    return "UNKNOWN";
}

static const char *reject_reason_text(uint32_t reason)
{
    switch (reason) {
    case RKV_REJECT_TOO_MANY:
        return "it is at its connection limit (max_conns); close idle clients or raise max_conns";
    case RKV_REJECT_WRONG_DEVICE:
        return "the connection arrived on an RDMA device its region is not registered on; "
               "connect to the address of the device it listens on (see its rdma_device)";
    case RKV_REJECT_RESOURCES:
        return "it could not create the queue pair or buffers for us (see the server log: memlock or device limits)";
    case RKV_REJECT_LANE_KEY:
        return "a READ lane's key is not its own (the server restarted since the HELLO?)";
    }
    return "for an unknown reason (a newer server?)";
}

void rkv_rdma_cm_error(enum rdma_cm_event_type ev, int status, const void *private_data,
                       uint8_t private_len, const char *peer, char *err, size_t err_len)
{
    struct rkv_rdma_reject rej;

    switch (ev) {
    case RDMA_CM_EVENT_ADDR_ERROR:
        if (status == -ETIMEDOUT) { /* the route is there; nobody answered ARP / ND */
            snprintf(err, err_len,
                     "%s is unreachable: its address did not resolve in time (rdma_cm ADDR_ERROR, "
                     "ARP/ND timed out); is the server's host up, and the network between us?",
                     peer);
            break;
        }
        snprintf(err, err_len,
                 "cannot resolve %s to a local RDMA device (rdma_cm ADDR_ERROR, status %d): the route to it "
                 "must leave through an RDMA-capable interface (`rdma link show`, `ip route get`); "
                 "for Soft-RoCE: `rdma link add rxe0 type rxe netdev eth0`",
                 peer, status);
        break;
    case RDMA_CM_EVENT_ROUTE_ERROR:
        snprintf(err, err_len,
                 "no RDMA route to %s (rdma_cm ROUTE_ERROR, status %d): check that the port is ACTIVE "
                 "(`ibv_devinfo`) and the netdev has an address (rdma_cm cannot route over lo)",
                 peer, status);
        break;
    case RDMA_CM_EVENT_REJECTED:
        if (private_data != NULL && private_len >= sizeof rej) {
            memcpy(&rej, private_data, sizeof rej);
            if (rej.magic == RKV_RDMA_REJECT_MAGIC) {
                snprintf(err, err_len, "the rkv server at %s refused the connection: %s", peer,
                         reject_reason_text(rej.reason));
                break;
            }
        }
        if (status == 8 || status == -ECONNREFUSED) /* IB_CM_REJ_INVALID_SERVICE_ID / iWARP */
            snprintf(err, err_len,
                     "connection to %s rejected: nothing listens on that port (is rkv-server running "
                     "with an rdma:// listener there?)",
                     peer);
        else
            snprintf(err, err_len, "connection to %s rejected (rdma_cm REJECTED, reason %d)", peer,
                     status);
        break;
    case RDMA_CM_EVENT_UNREACHABLE:
        snprintf(err, err_len,
                 "%s is unreachable (rdma_cm UNREACHABLE, status %d): no answer to the connect request; "
                 "is the server up, its port ACTIVE, and RoCE's UDP port 4791 open "
                 "(`iptables -I INPUT -p udp --dport 4791 -j ACCEPT`)?",
                 peer, status);
        break;
    case RDMA_CM_EVENT_CONNECT_ERROR:
        snprintf(err, err_len,
                 "connecting to %s failed (rdma_cm CONNECT_ERROR, status %d): the queue pairs could not "
                 "be connected; check both ends' `ibv_devinfo` and the server log",
                 peer, status);
        break;
    case RDMA_CM_EVENT_DISCONNECTED:
        snprintf(err, err_len, "%s closed the connection", peer);
        break;
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
        snprintf(err, err_len, "the RDMA device used for %s was removed", peer);
        break;
    default:
        snprintf(err, err_len, "unexpected rdma_cm event %s (status %d) for %s", rdma_event_str(ev),
                 status, peer);
        break;
    }
}

void rkv_rdma_errno_error(int errnum, const char *what, char *err, size_t err_len)
{
    switch (errnum) {
    case EACCES:
    case EPERM:
        snprintf(err, err_len,
                 "%s: permission denied on /dev/infiniband: run as a user allowed to use RDMA "
                 "(e.g. in group rdma) or `chmod a+rw /dev/infiniband/*`",
                 what);
        break;
    case ENODEV:
    case ENOENT:
    case ENXIO:
    case ENOSYS:
        snprintf(err, err_len, "no RDMA device found (%s: %s): %s", what, strerror(errnum),
                 NO_DEVICE_HINT);
        break;
    case ENOMEM:
        snprintf(err, err_len,
                 "%s: cannot allocate or pin memory: the memlock limit is probably too low; "
                 "raise `ulimit -l` or set LimitMEMLOCK=infinity",
                 what);
        break;
    case EADDRINUSE:
        snprintf(err, err_len, "%s: address already in use: another process listens on that port",
                 what);
        break;
    case EADDRNOTAVAIL:
        snprintf(err, err_len, "%s: that address is not configured on this host (`ip addr`)", what);
        break;
    default: snprintf(err, err_len, "%s: %s", what, strerror(errnum)); break;
    }
}

/* ------------------------------------------------------------ checks */

bool rkv_rdma_memlock_ok(uint64_t limit, uint64_t need, bool cap_ipc_lock, const char *what,
                         char *err, size_t err_len)
{
    char lim_text[32], need_text[32];

    if (limit == (uint64_t)RLIM_INFINITY || cap_ipc_lock || need <= limit)
        return true;
    snprintf(err, err_len,
             "memlock limit %s is below the %s %s; raise `ulimit -l` or set LimitMEMLOCK=infinity",
             rkv_format_size(limit, lim_text, sizeof lim_text),
             rkv_format_size(need, need_text, sizeof need_text), what);
    return false;
}

bool rkv_rdma_status_has_ipc_lock(const char *proc_status)
{
    const char *line = proc_status;
    unsigned long long caps;

    while (line != NULL && *line != '\0') {
        if (strncmp(line, "CapEff:", 7) == 0) {
            char *end;
            errno = 0;
            caps = strtoull(line + 7, &end, 16);
            if (errno != 0 || end == line + 7)
                return false;
            return (caps >> CAP_IPC_LOCK_BIT) & 1u;
        }
        line = strchr(line, '\n');
        if (line != NULL)
            line++;
    }
    return false;
}

static bool self_has_ipc_lock(void)
{
    char buf[4096];
    ssize_t n;
    int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);

    if (fd < 0)
        return false;
    n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return false;
    buf[n] = '\0';
    return rkv_rdma_status_has_ipc_lock(buf);
}

rkv_status rkv_rdma_check_memlock(uint64_t need, const char *what, char *err, size_t err_len)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0)
        return RKV_OK; /* cannot tell; registration will say */
    if (rl.rlim_cur == RLIM_INFINITY)
        return RKV_OK;
    return rkv_rdma_memlock_ok((uint64_t)rl.rlim_cur, need, self_has_ipc_lock(), what, err, err_len)
               ? RKV_OK
               : RKV_NO_MEMORY;
}

const char *rkv_rdma_device_name(const struct ibv_context *ctx)
{
    return ctx != NULL && ctx->device != NULL ? ibv_get_device_name(ctx->device) : "?";
}

static void port_down_error(struct ibv_context *ctx, uint8_t port, enum ibv_port_state st,
                            char *err, size_t err_len)
{
    const char *dev = rkv_rdma_device_name(ctx);
    snprintf(err, err_len,
             "port %u of %s is %s, not ACTIVE: check the link (`ibv_devinfo -d %s`, `rdma link show`); "
             "for RoCE bring its netdev up (`ip link set DEV up`)",
             port, dev, rkv_rdma_port_state_name(st), dev);
}

rkv_status rkv_rdma_check_port(struct ibv_context *ctx, uint8_t port, char *err, size_t err_len)
{
    struct ibv_device_attr dattr;
    struct ibv_port_attr pattr;
    uint8_t first = port, last = port;
    enum ibv_port_state seen = IBV_PORT_NOP;

    if (port == 0) {
        if (ibv_query_device(ctx, &dattr) != 0) {
            rkv_rdma_errno_error(errno, "ibv_query_device", err, err_len);
            return RKV_CONNECTION;
        }
        first = 1;
        last = dattr.phys_port_cnt;
    }
    for (unsigned p = first; p <= last && p != 0; p++) {
        if (ibv_query_port(ctx, (uint8_t)p, &pattr) != 0) {
            rkv_rdma_errno_error(errno, "ibv_query_port", err, err_len);
            return RKV_CONNECTION;
        }
        if (pattr.state == IBV_PORT_ACTIVE)
            return RKV_OK;
        seen = pattr.state;
    }
    port_down_error(ctx, first, seen, err, err_len);
    return RKV_CONNECTION;
}

rkv_status rkv_rdma_check_gid(struct ibv_context *ctx, uint8_t port, int gid_index, char *err,
                              size_t err_len)
{
    static const union ibv_gid zero_gid;
    struct ibv_port_attr pattr;
    union ibv_gid gid;
    const char *dev = rkv_rdma_device_name(ctx);

    if (gid_index < 0)
        return RKV_OK;
    if (port == 0)
        port = 1;
    if (ibv_query_port(ctx, port, &pattr) != 0) {
        rkv_rdma_errno_error(errno, "ibv_query_port", err, err_len);
        return RKV_CONNECTION;
    }
    if (gid_index >= pattr.gid_tbl_len) {
        snprintf(err, err_len,
                 "GID index %d is out of range on %s port %u (its table has %d entries): pick one listed "
                 "in /sys/class/infiniband/%s/ports/%u/gids/ (RoCEv2 entries: gid_attrs/types)",
                 gid_index, dev, port, pattr.gid_tbl_len, dev, port);
        return RKV_INVALID;
    }
    if (ibv_query_gid(ctx, port, gid_index, &gid) != 0 || memcmp(&gid, &zero_gid, sizeof gid) == 0) {
        snprintf(err, err_len,
                 "GID index %d on %s port %u is empty: RoCE GIDs come from the netdev's IP addresses; "
                 "pick a filled entry in /sys/class/infiniband/%s/ports/%u/gids/ or add an address",
                 gid_index, dev, port, dev, port);
        return RKV_INVALID;
    }
    return RKV_OK;
}

rkv_status rkv_rdma_find_device(const char *name, struct ibv_context **out, char *err, size_t err_len)
{
    int n = 0;
    struct ibv_context **list = rdma_get_devices(&n);
    rkv_status st = RKV_CONNECTION;
    char names[256] = "";
    size_t used = 0;

    *out = NULL;
    if (list == NULL || n == 0) {
        snprintf(err, err_len, "no RDMA device found: %s", NO_DEVICE_HINT);
        goto done;
    }
    for (int i = 0; i < n; i++) {
        const char *dn = rkv_rdma_device_name(list[i]);
        if (name != NULL && strcmp(dn, name) == 0) {
            *out = list[i];
            st = RKV_OK;
            goto done;
        }
        int w = snprintf(names + used, sizeof names - used, "%s%s", i ? ", " : "", dn);
        if (w > 0 && (size_t)w < sizeof names - used)
            used += (size_t)w;
    }
    if (name == NULL && n == 1) {
        *out = list[0];
        st = RKV_OK;
    } else if (name == NULL) {
        snprintf(err, err_len,
                 "%d RDMA devices (%s) and no device named: set rdma_device to one of them, "
                 "or listen on an address of the one you want",
                 n, names);
        st = RKV_INVALID;
    } else {
        snprintf(err, err_len, "RDMA device \"%s\" not found; this host has: %s", name, names);
        st = RKV_INVALID;
    }
done:
    if (list != NULL)
        rdma_free_devices(list);
    return st;
}

/* rdma-core falls back to other device paths when opening a node fails, so
 * the errno it leaves says ENOENT even when the node exists and we may not
 * open it. Look at the nodes ourselves. */
static int cdev_errno(int e)
{
    DIR *d = opendir("/dev/infiniband");
    struct dirent *de;
    char path[300];

    if (d == NULL)
        return e;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "/dev/infiniband/%s", de->d_name);
        if (access(path, R_OK | W_OK) != 0 && errno == EACCES) {
            e = EACCES;
            break;
        }
    }
    closedir(d);
    return e;
}

void rkv_rdma_set_ack_timeout(struct rdma_cm_id *id, unsigned ack_timeout)
{
    uint8_t timeout = (uint8_t)(ack_timeout ? ack_timeout : RKV_RDMA_ACK_TIMEOUT);

    /* an old rdma_cm without the option keeps its default: not an error */
    (void)rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &timeout, sizeof timeout);
}

uint64_t rkv_rdma_detect_ns(unsigned ack_timeout, unsigned retry_count)
{
    return (4096ull << RKV_MIN(ack_timeout, RKV_RDMA_ACK_TIMEOUT_MAX)) * (retry_count + 1ull);
}

bool rkv_rdma_rc_check(unsigned ack_timeout, unsigned retry_count, const char *timeout_name,
                       const char *retry_name, char *err, size_t err_len)
{
    if (ack_timeout < RKV_RDMA_ACK_TIMEOUT_MIN || ack_timeout > RKV_RDMA_ACK_TIMEOUT_MAX) {
        snprintf(err, err_len,
                 "%s %u is out of range: use %u..%u (each try waits 4.096 us x 2^N "
                 "for the peer's ACK; %u = %.0f ms)",
                 timeout_name, ack_timeout, RKV_RDMA_ACK_TIMEOUT_MIN, RKV_RDMA_ACK_TIMEOUT_MAX,
                 RKV_RDMA_ACK_TIMEOUT, rkv_rdma_detect_ns(RKV_RDMA_ACK_TIMEOUT, 0) / 1e6);
        return false;
    }
    if (retry_count < RKV_RDMA_RETRY_COUNT_MIN || retry_count > RKV_RDMA_RETRY_COUNT_MAX) {
        snprintf(err, err_len,
                 "%s %u is out of range: use %u..%u (retransmissions before a "
                 "transfer fails)",
                 retry_name, retry_count, RKV_RDMA_RETRY_COUNT_MIN, RKV_RDMA_RETRY_COUNT_MAX);
        return false;
    }
    return true;
}

int rkv_rdma_accept(struct rdma_cm_id *id, struct rdma_conn_param *cp, unsigned retry_count)
{
    struct ibv_qp *qp = id->qp;
    struct ibv_qp_attr attr = { .qp_state = IBV_QPS_RTR };
    int mask = 0, rc;

    /* what librdmacm's rdma_accept() does, with our retry count at RTS */
    rc = rkv_rdma_modify_qp(id, qp, IBV_QPS_INIT, IBV_ACCESS_REMOTE_READ);
    if (rc != 0)
        return rc;
    if (rdma_init_qp_attr(id, &attr, &mask) != 0)
        return errno ? errno : EINVAL;
    attr.max_dest_rd_atomic = cp->responder_resources;
    rc = ibv_modify_qp(qp, &attr, mask & ~0xe00000);
    if (rc != 0)
        return rc;
    memset(&attr, 0, sizeof attr);
    attr.qp_state = IBV_QPS_RTS;
    if (rdma_init_qp_attr(id, &attr, &mask) != 0)
        return errno ? errno : EINVAL;
    attr.max_rd_atomic = cp->initiator_depth;
    attr.retry_cnt = (uint8_t)retry_count;
    rc = ibv_modify_qp(qp, &attr, (mask & ~0xe00000) | IBV_QP_RETRY_CNT);
    if (rc != 0)
        return rc;
    /* Without id->qp, rdma_accept() leaves the QP alone (as for rdma_establish). */
    cp->qp_num = qp->qp_num;
    id->qp = NULL;
    rc = rdma_accept(id, cp) == 0 ? 0 : errno ? errno : EIO;
    id->qp = qp;
    return rc;
}

bool rkv_rdma_sysfs_has_devices(void)
{
    DIR *d = opendir("/sys/class/infiniband");
    struct dirent *de;
    bool any = false;

    if (d == NULL)
        return false;
    while ((de = readdir(d)) != NULL)
        if (de->d_name[0] != '.')
            any = true;
    closedir(d);
    return any;
}

rkv_status rkv_rdma_open_id(void *context, struct rdma_event_channel **channel,
                            struct rdma_cm_id **id, char *err, size_t err_len)
{
    struct rdma_event_channel *ch = rdma_create_event_channel();
    int flags;

    *channel = NULL;
    *id = NULL;
    if (ch == NULL) {
        int e = cdev_errno(errno);
        if (e != EACCES && rkv_rdma_sysfs_has_devices() &&
            access("/dev/infiniband/rdma_cm", F_OK) != 0)
            snprintf(err, err_len,
                     "RDMA devices exist but /dev/infiniband/rdma_cm does not: "
                     "load the rdma_ucm module (`modprobe rdma_ucm`)");
        else
            rkv_rdma_errno_error(e, "rdma_create_event_channel (/dev/infiniband/rdma_cm)", err,
                                 err_len);
        return RKV_CONNECTION;
    }
    flags = fcntl(ch->fd, F_GETFL);
    if (flags < 0 || fcntl(ch->fd, F_SETFL, flags | O_NONBLOCK) != 0) {
        rkv_rdma_errno_error(errno, "fcntl(rdma_cm channel, O_NONBLOCK)", err, err_len);
        rdma_destroy_event_channel(ch);
        return RKV_CONNECTION;
    }
    if (rdma_create_id(ch, id, context, RDMA_PS_TCP) != 0) {
        rkv_rdma_errno_error(errno, "rdma_create_id", err, err_len);
        rdma_destroy_event_channel(ch);
        *id = NULL;
        return RKV_CONNECTION;
    }
    *channel = ch;
    return RKV_OK;
}

rkv_status rkv_rdma_parse_addr(const char *addr, bool passive, struct sockaddr_storage *out,
                               char *err, size_t err_len)
{
    char host[256];
    uint16_t port;
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
    struct addrinfo *res = NULL;
    int rc;

    if (addr == NULL || !rkv_host_port(addr, host, sizeof host, &port)) {
        snprintf(err, err_len,
                 "bad rdma address \"%s\": expected HOST:PORT (e.g. 192.0.2.1:7471 or [fe80::1]:7471)",
                 addr ? addr : "(null)");
        return RKV_INVALID;
    }
    if (passive)
        hints.ai_flags = AI_PASSIVE;
    rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0 || res == NULL) {
        snprintf(err, err_len, "cannot resolve host \"%s\": %s", host, gai_strerror(rc));
        return RKV_INVALID;
    }
    memset(out, 0, sizeof *out);
    memcpy(out, res->ai_addr, RKV_MIN((size_t)res->ai_addrlen, sizeof *out));
    freeaddrinfo(res);
    if (out->ss_family == AF_INET)
        ((struct sockaddr_in *)out)->sin_port = htons(port);
    else if (out->ss_family == AF_INET6)
        ((struct sockaddr_in6 *)out)->sin6_port = htons(port);
    else {
        snprintf(err, err_len, "host \"%s\" is neither IPv4 nor IPv6", host);
        return RKV_INVALID;
    }
    return RKV_OK;
}

bool rkv_rdma_addr_is_wildcard(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return ((const struct sockaddr_in *)(const void *)sa)->sin_addr.s_addr == htonl(INADDR_ANY);
    if (sa->sa_family == AF_INET6)
        return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr);
    return false;
}

void rkv_rdma_format_addr(const struct sockaddr *sa, char *buf, size_t len)
{
    char ip[INET6_ADDRSTRLEN] = "?";

    if (sa != NULL && sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)sa;
        inet_ntop(AF_INET, &in->sin_addr, ip, sizeof ip);
        snprintf(buf, len, "%s:%u", ip, ntohs(in->sin_port));
    } else if (sa != NULL && sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)sa;
        inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof ip);
        snprintf(buf, len, "[%s]:%u", ip, ntohs(in6->sin6_port));
    } else {
        snprintf(buf, len, "?");
    }
}

/* ------------------------------------------------------------ resources */

struct ibv_mr *rkv_rdma_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access, bool *relaxed,
                               const char *what, char *err, size_t err_len)
{
    char msg[96];
    struct ibv_mr *mr = ibv_reg_mr(pd, addr, len, access | IBV_ACCESS_RELAXED_ORDERING);

    *relaxed = mr != NULL;
    if (mr == NULL && (errno == EINVAL || errno == EOPNOTSUPP))
        mr = ibv_reg_mr(pd, addr, len, access);
    if (mr == NULL) {
        snprintf(msg, sizeof msg, "ibv_reg_mr(%s)", what);
        rkv_rdma_errno_error(errno, msg, err, err_len);
    }
    return mr;
}

rkv_status rkv_rdma_buf_alloc(struct ibv_pd *pd, size_t size, int access, const char *what,
                              struct rkv_rdma_buf *b, char *err, size_t err_len)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    bool relaxed;
    void *mem = NULL;

    memset(b, 0, sizeof *b);
    size = RKV_ALIGN_UP(RKV_MAX(size, (size_t)1), page);
    /* a mapping of its own (zeroed), not the heap: freeing it gives the
     * pages back to the system, where a freed heap block of this size would
     * keep them in the process (glibc raises its mmap threshold) */
    mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) {
        snprintf(err, err_len, "out of memory allocating %zu bytes for %s", size, what);
        return RKV_NO_MEMORY;
    }
    b->mr = rkv_rdma_reg_mr(pd, mem, size, access, &relaxed, what, err, err_len);
    if (b->mr == NULL) {
        munmap(mem, size);
        return RKV_NO_MEMORY;
    }
    b->mem = mem;
    b->size = size;
    return RKV_OK;
}

void rkv_rdma_buf_free(struct rkv_rdma_buf *b)
{
    if (b->mr != NULL)
        ibv_dereg_mr(b->mr);
    if (b->mem != NULL)
        munmap(b->mem, b->size);
    memset(b, 0, sizeof *b);
}

rkv_status rkv_rdma_query_caps(struct ibv_context *ctx, struct rkv_rdma_caps *caps, char *err,
                               size_t err_len)
{
    struct ibv_device_attr a;

    if (ibv_query_device(ctx, &a) != 0) {
        rkv_rdma_errno_error(errno, "ibv_query_device", err, err_len);
        return RKV_CONNECTION;
    }
    caps->max_qp_wr = a.max_qp_wr > 0 ? (uint32_t)a.max_qp_wr : 1;
    caps->max_cqe = a.max_cqe > 0 ? (uint32_t)a.max_cqe : 1;
    caps->max_rd_atom = (uint8_t)RKV_MIN(a.max_qp_rd_atom > 0 ? a.max_qp_rd_atom : 0, 255);
    caps->max_init_rd_atom = (uint8_t)RKV_MIN(a.max_qp_init_rd_atom > 0 ? a.max_qp_init_rd_atom : 0,
                                              255);
    caps->max_srq = a.max_srq > 0 ? (uint32_t)a.max_srq : 0;
    caps->max_srq_wr = a.max_srq_wr > 0 ? (uint32_t)a.max_srq_wr : 0;
    return RKV_OK;
}

rkv_status rkv_rdma_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_cq *send_cq,
                              struct ibv_cq *recv_cq, struct ibv_srq *srq, uint32_t send_wr,
                              uint32_t recv_wr, uint32_t *max_inline, struct ibv_qp **qp, char *err,
                              size_t err_len)
{
    uint32_t want = *max_inline;

    *qp = NULL;
    for (;;) {
        struct ibv_qp_init_attr a = {
            .send_cq = send_cq,
            .recv_cq = recv_cq,
            .srq = srq,
            .qp_type = IBV_QPT_RC,
            .sq_sig_all = 0,
            .cap = { .max_send_wr = send_wr,
                     .max_recv_wr = srq != NULL ? 0 : recv_wr,
                     .max_send_sge = 1,
                     .max_recv_sge = srq != NULL ? 0 : 1,
                     .max_inline_data = want },
        };
        if (id != NULL ? rdma_create_qp(id, pd, &a) == 0 : (*qp = ibv_create_qp(pd, &a)) != NULL) {
            if (id != NULL)
                *qp = id->qp;
            *max_inline = a.cap.max_inline_data;
            return RKV_OK;
        }
        if ((errno == EINVAL || errno == ENOMEM) && want > 0) {
            want /= 2; /* the device grants less inline data; ask for less */
            continue;
        }
        char what[96];
        snprintf(what, sizeof what, "rdma_create_qp(send %u, recv %u WRs)", send_wr, recv_wr);
        rkv_rdma_errno_error(errno, what, err, err_len);
        return RKV_CONNECTION;
    }
}

int rkv_rdma_modify_qp(struct rdma_cm_id *id, struct ibv_qp *qp, enum ibv_qp_state state, int access)
{
    struct ibv_qp_attr attr = { .qp_state = state };
    int mask = 0;

    if (rdma_init_qp_attr(id, &attr, &mask) != 0)
        return errno ? errno : EINVAL;
    mask &= ~0xe00000; /* like librdmacm: bits old kernels returned for RoCE (SMAC/VID) */
    if (mask & IBV_QP_ACCESS_FLAGS)
        attr.qp_access_flags = (unsigned)access;
    return ibv_modify_qp(qp, &attr, mask);
}

rkv_status rkv_rdma_open_device(const char *name, struct ibv_context **out, char *err, size_t err_len)
{
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    rkv_status st = RKV_CONNECTION;

    *out = NULL;
    if (list == NULL) {
        rkv_rdma_errno_error(errno, "ibv_get_device_list", err, err_len);
        return RKV_CONNECTION;
    }
    for (int i = 0; i < n; i++) {
        if (strcmp(ibv_get_device_name(list[i]), name) != 0)
            continue;
        *out = ibv_open_device(list[i]);
        if (*out != NULL) {
            int flags = fcntl((*out)->async_fd, F_GETFL); /* for rkv_rdma_async_reason() */
            if (flags >= 0)
                fcntl((*out)->async_fd, F_SETFL, flags | O_NONBLOCK);
            st = RKV_OK;
        } else
            rkv_rdma_errno_error(cdev_errno(errno), "ibv_open_device", err, err_len);
        goto done;
    }
    snprintf(err, err_len, "RDMA device \"%s\" disappeared (`ibv_devices`)", name);
done:
    ibv_free_device_list(list);
    return st;
}

/* ------------------------------------------------------------ send queue */

void rkv_rdma_sq_init(struct rkv_rdma_sq *sq, uint32_t depth, uint32_t keep, uint32_t interval)
{
    memset(sq, 0, sizeof *sq);
    sq->depth = depth;
    sq->keep = keep;
    sq->interval = interval ? interval : 1;
}

/* Poll once; returns completions seen (>= 0) or -EIO. */
static int sq_poll_once(struct rkv_rdma_sq *sq, struct ibv_cq *cq, enum ibv_wc_status *bad)
{
    struct ibv_wc wc[16];
    int n = ibv_poll_cq(cq, (int)RKV_ARRAY_SIZE(wc), wc);

    if (n < 0) {
        *bad = IBV_WC_GENERAL_ERR;
        return -EIO;
    }
    for (int i = 0; i < n; i++) {
        if (wc[i].status != IBV_WC_SUCCESS) {
            *bad = wc[i].status;
            return -EIO;
        }
        rkv_rdma_sq_done(sq, wc[i].wr_id);
    }
    return n;
}

int rkv_rdma_sq_poll(struct rkv_rdma_sq *sq, struct ibv_cq *cq, enum ibv_wc_status *bad)
{
    int n = sq_poll_once(sq, cq, bad);
    return n < 0 ? n : 0;
}

int rkv_rdma_sq_wait(struct rkv_rdma_sq *sq, struct ibv_cq *cq, uint32_t limit, uint64_t timeout_ns,
                     rkv_rdma_idle_fn idle, void *ctx, enum ibv_wc_status *bad)
{
    unsigned empty = 0;
    uint64_t deadline_ns = 0;

    while (sq->outstanding > limit) {
        if (sq->outstanding == sq->unsignaled)
            return -EDEADLK; /* nothing signaled is in flight: no completion will come */
        int n = sq_poll_once(sq, cq, bad);
        if (n < 0)
            return n;
        if (n == 0 && (++empty & 255u) == 0) {
            if (idle != NULL && idle(ctx))
                return -ECANCELED;
            uint64_t now = rkv_now_ns();
            if (deadline_ns == 0)
                deadline_ns = now + timeout_ns;
            else if (now > deadline_ns)
                return -ETIMEDOUT;
        }
    }
    return 0;
}

int rkv_rdma_post_sends(struct ibv_qp *qp, struct rkv_rdma_sq *sq, struct rkv_rdma_ring *ring,
                        const uint32_t *lens, unsigned n, uint32_t max_inline,
                        struct ibv_send_wr *wrs, struct ibv_sge *sges, unsigned *inlined)
{
    struct ibv_send_wr *bad = NULL;
    unsigned k = 0;

    if (n == 0) {
        *inlined = 0;
        return 0;
    }
    for (unsigned i = 0; i < n; i++) {
        bool signaled;
        sges[i] = (struct ibv_sge){
            .addr = (uintptr_t)rkv_rdma_ring_slot(ring, i),
            .length = lens[i],
            .lkey = ring->buf.mr->lkey,
        };
        wrs[i] = (struct ibv_send_wr){
            .next = i + 1 < n ? &wrs[i + 1] : NULL,
            .sg_list = &sges[i],
            .num_sge = 1,
            .opcode = IBV_WR_SEND,
        };
        wrs[i].wr_id = rkv_rdma_sq_take(sq, i + 1 == n, false, &signaled);
        if (signaled)
            wrs[i].send_flags |= IBV_SEND_SIGNALED;
        if (lens[i] <= max_inline) {
            wrs[i].send_flags |= IBV_SEND_INLINE;
            k++;
        }
    }
    ring->head = (ring->head + n) % ring->count;
    *inlined = k;
    return ibv_post_send(qp, wrs, &bad);
}

int rkv_rdma_post_recvs(struct ibv_qp *qp, const struct rkv_rdma_buf *buf, uint32_t stride,
                        const uint32_t *idx, unsigned n, struct ibv_recv_wr *wrs,
                        struct ibv_sge *sges)
{
    struct ibv_recv_wr *bad = NULL;

    if (n == 0)
        return 0;
    for (unsigned i = 0; i < n; i++) {
        sges[i] = (struct ibv_sge){
            .addr = (uintptr_t)(buf->mem + (size_t)idx[i] * stride),
            .length = stride,
            .lkey = buf->mr->lkey,
        };
        wrs[i] = (struct ibv_recv_wr){
            .wr_id = idx[i],
            .next = i + 1 < n ? &wrs[i + 1] : NULL,
            .sg_list = &sges[i],
            .num_sge = 1,
        };
    }
    return ibv_post_recv(qp, wrs, &bad);
}
