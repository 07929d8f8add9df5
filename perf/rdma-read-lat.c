/* rdma-read-lat.c — one RDMA READ at a time, timed, with every setup choice a flag.
 *
 * Why: rkv's READ measured slower than perftest's ib_read_lat at the same
 * size on Soft-RoCE. The two differ in how they set the READ up, not in
 * the READ: queue sizes (which size rxe's work-request and completion rings),
 * inline size and scatter entries (the size of each ring slot), READ depths,
 * path MTU, ACK timeout and retry count, the responder's memory (a small
 * buffer, or a 64 MiB memfd region as rkv-server registers) and where in it
 * a READ lands, the requester's memory, relaxed ordering, how many
 * completions one poll asks for. This tool times READs with each of those
 * set by a flag, so one guest run can change them one at a time
 * (scripts/rxe-vm/read-lat-factors.sh).
 *
 * Three kinds of case:
 *   self (default)  one process, two RC QPs on the device, each on its own
 *                   verbs context and PD (as two processes would have them),
 *                   connected to each other by hand (the GID at -x); the
 *                   requester READs the responder's memory. On rxe the
 *                   responder runs in the kernel, in the requester's
 *                   ibv_post_send, whichever process owns its QP.
 *                   `--like perftest` (the default) and `--like rkv` set
 *                   every choice as that program makes it; flags after it
 *                   change one.
 *   --rkv URI       rkv's own client transport (client/rdma_client.c: its
 *                   QP, CQs, buffers and READ path) against a running
 *                   rkv-server: HELLO, then READs of the region through
 *                   transport->read() with no GET code around them;
 *                   --stop PID (outside any --case) stops the server
 *                   (SIGSTOP) while the timed operations run, which rxe's
 *                   READs do not need (their responder is the kernel).
 *   --get URI       whole GETs through librkv (rkv_get of a random one of
 *                   --keys stored 16-byte keys with 32-byte values, as
 *                   rkv-bench's), through the location cache (warm) or,
 *                   with --cold, without one: a GET's latency over a
 *                   READ's, with both in one interleaved run.
 *
 * Cases: each `--case "LABEL: OPTIONS"` is one setup (the options outside
 * any --case, then its own); all are set up first, then READ round-robin,
 * one READ per case in turn, -n times each. Whatever else the machine does
 * (on a 2-core host running a TCG guest next to other work, wall-clock
 * runs of the same setup swing by 1.5x from one run to the next) then
 * falls on every case alike, and cases compare within one run.
 *
 * Per READ: the time from before ibv_post_send (transport->read) to the
 * poll that returned its completion, as ib_read_lat's t_typical counts it
 * (the median of post-to-post times in a loop that does nothing else).
 * Output: one line per case, its min, percentiles and mean in us, and the
 * share of READs within 1.5x its fastest. --switches adds the thread's
 * context switches per READ (getrusage around each READ, outside its time):
 * on rxe the responder runs as a tasklet, inline or in ksoftirqd (two
 * switches), and that choice is most of the spread between min and p50.
 *
 * A measuring tool for developers; not installed.
 *
 *   rdma-read-lat [-d DEV] [-x GID_INDEX] [-s BYTES] [-n READS] [-w WARMUP] [-l LABEL]
 *                 [--like perftest|rkv] [--sq N] [--rq N] [--inline N] [--sge N] [--cq N]
 *                 [--shared-cq 0|1] [--rd-atomic N] [--mtu 256..4096] [--timeout N] [--retry N]
 *                 [--region BYTES] [--region-kind anon|memfd|huge] [--spread BYTES]
 *                 [--local BYTES] [--dst-off N] [--poll N] [--relaxed 0|1] [--switches]
 *   rdma-read-lat --rkv rdma://HOST:PORT [--stop SERVER_PID] [-s BYTES] [-n READS] [-w WARMUP]
 *                 [--spread BYTES] [-l LABEL]
 *   rdma-read-lat --get URI [--keys N] [--cold] [-n GETS] [-w WARMUP] [-l LABEL]
 *   rdma-read-lat [COMMON OPTIONS] --case "LABEL: OPTIONS" --case "LABEL: OPTIONS" ...
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "protocol.h"
#include "rkv.h"
#include "transport.h"
#include "util.h"
#include "workload.h" /* wl_format_key: rkv-bench's keys */

#ifndef MFD_HUGETLB
#define MFD_HUGETLB 0x0004u
#endif

enum region_kind { REGION_ANON, REGION_MEMFD, REGION_HUGE };

/* Every choice that differs between ib_read_lat and rkv (client and server). */
struct setup {
    uint32_t sq, rq;        /* max_send_wr / max_recv_wr of both QPs */
    uint32_t inline_data;   /* max_inline_data */
    uint32_t sge;           /* max_send_sge */
    uint32_t cq;            /* send CQ entries (0: 2 x sq) */
    bool shared_cq;         /* receives complete on the send CQ */
    uint32_t rd_atomic;     /* max_rd_atomic / max_dest_rd_atomic (0: device max) */
    uint32_t mtu;           /* path MTU bytes (0: the port's active MTU) */
    uint8_t timeout, retry; /* RC ACK timeout exponent, retry count */
    size_t region;          /* responder's registered bytes */
    enum region_kind kind;
    size_t local;   /* requester's registered bytes */
    size_t dst_off; /* where in it a READ lands */
    int poll;       /* completions one ibv_poll_cq asks for */
    bool relaxed;   /* IBV_ACCESS_RELAXED_ORDERING on both MRs */
};

/* What ib_read_lat 4.5 does on a device it has no table entry for (rxe): one send
 * and one receive WR, no inline data, one CQ of one entry for both. */
static const struct setup like_perftest = {
    .sq = 1,
    .rq = 1,
    .inline_data = 0,
    .sge = 1,
    .cq = 1,
    .shared_cq = true,
    .rd_atomic = 0,
    .mtu = 0,
    .timeout = 14,
    .retry = 7,
    .region = 8192,
    .kind = REGION_ANON,
    .local = 8192,
    .dst_off = 0,
    .poll = 1,
    .relaxed = true,
};
/* What rkv's client (client/rdma_client.c) and server (server/rdma_server.c) do:
 * send depth MAX_CREDITS + MAX_READS + 2 x 16, receive MAX_CREDITS + 1, inline 256,
 * a send CQ of twice the send depth, the device's READ depth, rdma_cm's MTU (the
 * netdev's: 1024 on a 1500-byte link), 64 MiB memfd region, 2 MiB read buffer. */
static const struct setup like_rkv = {
    .sq = 352,
    .rq = 257,
    .inline_data = 256,
    .sge = 1,
    .cq = 704,
    .shared_cq = false,
    .rd_atomic = 0,
    .mtu = 1024,
    .timeout = 16,
    .retry = 6,
    .region = 64u << 20,
    .kind = REGION_MEMFD,
    .local = 2u << 20,
    .dst_off = 0,
    .poll = 16,
    .relaxed = true,
};

struct opts {
    const char *dev, *label, *rkv_uri;
    const char *get_uri; /* --get: rkv_get()s through librkv instead of READs */
    uint32_t keys;       /* --get: keys stored and read at random */
    bool cold;           /* --get: no location cache (every GET reads its buckets) */
    int gid_index;
    pid_t stop_pid; /* SIGSTOP this process (an rkv-server) while the READs run */
    bool switches;  /* count this thread's context switches across each READ */
    uint32_t size, reads, warmup;
    size_t spread; /* READs at random offsets within this many bytes; 0: one offset */
    struct setup s;
};

/* One side: its own context, PD, CQs, QP and memory. */
struct side {
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_cq *scq, *rcq;
    struct ibv_qp *qp;
    uint8_t *mem;
    size_t len;
    struct ibv_mr *mr;
    enum region_kind kind; /* how mem was allocated */
};

/* Print "rdma-read-lat: MESSAGE[: strerror(errnum)]" and exit 1. */
static void die(int errnum, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
static void die(int errnum, const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "rdma-read-lat: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    if (errnum != 0)
        fprintf(stderr, ": %s", strerror(errnum));
    fputc('\n', stderr);
    exit(1);
}

static uint64_t parse_num(const char *s, const char *what)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno != 0 || end == s)
        die(0, "%s needs a number", what);
    switch (*end) {
    case 'k':
    case 'K':
        v <<= 10;
        end++;
        break;
    case 'm':
    case 'M':
        v <<= 20;
        end++;
        break;
    default: break;
    }
    if (*end != '\0')
        die(0, "%s needs a number (with an optional K or M)", what);
    return v;
}

/* ------------------------------------------------------------ self mode */

static struct ibv_context *open_dev(const char *name)
{
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    struct ibv_context *ctx = NULL;

    if (list == NULL || n == 0)
        die(errno, "no RDMA device");
    for (int i = 0; i < n && ctx == NULL; i++)
        if (name == NULL || strcmp(ibv_get_device_name(list[i]), name) == 0)
            ctx = ibv_open_device(list[i]);
    ibv_free_device_list(list);
    if (ctx == NULL)
        die(errno, "cannot open RDMA device %s", name ? name : "(first)");
    return ctx;
}

static uint8_t *alloc_mem(size_t len, enum region_kind kind)
{
    void *p = NULL;

    if (kind == REGION_ANON) {
        if (posix_memalign(&p, 4096, len) != 0)
            die(0, "out of memory for a %zu-byte buffer", len);
    } else {
        int fd = memfd_create("rdma-read-lat", kind == REGION_HUGE ? MFD_HUGETLB : 0);
        if (fd < 0 || ftruncate(fd, (off_t)len) != 0)
            die(errno, "memfd_create(%s)", kind == REGION_HUGE ? "MFD_HUGETLB" : "0");
        p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
        close(fd);
        if (p == MAP_FAILED)
            die(errno, "mmap of the %s region failed (hugepages reserved?)",
                kind == REGION_HUGE ? "hugepage" : "memfd");
    }
    memset(p, 0x5a, len);
    return p;
}

static void side_open(struct side *sd, const struct opts *o, size_t len, enum region_kind kind,
                      int access)
{
    const struct setup *s = &o->s;
    uint32_t cqe = s->cq ? s->cq : 2 * s->sq;

    sd->ctx = open_dev(o->dev);
    sd->pd = ibv_alloc_pd(sd->ctx);
    if (sd->pd == NULL)
        die(errno, "ibv_alloc_pd");
    sd->scq = ibv_create_cq(sd->ctx, (int)cqe, NULL, NULL, 0);
    sd->rcq = s->shared_cq ? sd->scq : ibv_create_cq(sd->ctx, (int)(2 * s->rq), NULL, NULL, 0);
    if (sd->scq == NULL || sd->rcq == NULL)
        die(errno, "ibv_create_cq");
    struct ibv_qp_init_attr a = {
        .send_cq = sd->scq,
        .recv_cq = sd->rcq,
        .qp_type = IBV_QPT_RC,
        .sq_sig_all = 0,
        .cap = { .max_send_wr = s->sq,
                 .max_recv_wr = s->rq,
                 .max_send_sge = s->sge,
                 .max_recv_sge = 1,
                 .max_inline_data = s->inline_data },
    };
    sd->qp = ibv_create_qp(sd->pd, &a);
    if (sd->qp == NULL)
        die(errno, "ibv_create_qp");
    sd->len = len;
    sd->kind = kind;
    sd->mem = alloc_mem(len, kind);
    sd->mr = ibv_reg_mr(sd->pd, sd->mem, len,
                        access | (s->relaxed ? IBV_ACCESS_RELAXED_ORDERING : 0));
    if (sd->mr == NULL && s->relaxed && (errno == EINVAL || errno == EOPNOTSUPP))
        sd->mr = ibv_reg_mr(sd->pd, sd->mem, len, access);
    if (sd->mr == NULL)
        die(errno, "ibv_reg_mr (RLIMIT_MEMLOCK?)");
}

static void side_close(struct side *sd)
{
    if (sd->qp != NULL)
        ibv_destroy_qp(sd->qp);
    if (sd->mr != NULL)
        ibv_dereg_mr(sd->mr);
    if (sd->rcq != NULL && sd->rcq != sd->scq)
        ibv_destroy_cq(sd->rcq);
    if (sd->scq != NULL)
        ibv_destroy_cq(sd->scq);
    if (sd->pd != NULL)
        ibv_dealloc_pd(sd->pd);
    if (sd->ctx != NULL)
        ibv_close_device(sd->ctx);
    if (sd->mem != NULL) {
        if (sd->kind == REGION_ANON)
            free(sd->mem);
        else
            munmap(sd->mem, sd->len);
    }
    memset(sd, 0, sizeof *sd);
}

static enum ibv_mtu mtu_enum(uint32_t bytes, enum ibv_mtu active)
{
    switch (bytes) {
    case 256: return IBV_MTU_256;
    case 512: return IBV_MTU_512;
    case 1024: return IBV_MTU_1024;
    case 2048: return IBV_MTU_2048;
    case 4096: return IBV_MTU_4096;
    default: return active;
    }
}

/* INIT, RTR to `peer_qpn` at `gid`, RTS: what perftest's ctx_connect does. */
static void connect_qp(struct side *sd, uint32_t peer_qpn, const union ibv_gid *gid,
                       const struct opts *o, enum ibv_mtu mtu, uint8_t rd_atomic)
{
    struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT,
                             .pkey_index = 0,
                             .port_num = 1,
                             .qp_access_flags = IBV_ACCESS_REMOTE_READ };

    if (ibv_modify_qp(sd->qp, &a,
                      IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
        die(errno, "ibv_modify_qp(INIT)");
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = mtu;
    a.dest_qp_num = peer_qpn;
    a.rq_psn = 0;
    a.max_dest_rd_atomic = rd_atomic;
    a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = *gid;
    a.ah_attr.grh.sgid_index = (uint8_t)o->gid_index;
    a.ah_attr.grh.hop_limit = 64;
    a.ah_attr.port_num = 1;
    if (ibv_modify_qp(sd->qp, &a,
                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
        die(errno, "ibv_modify_qp(RTR)");
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTS;
    a.timeout = o->s.timeout;
    a.retry_cnt = o->s.retry;
    a.rnr_retry = 7;
    a.sq_psn = 0;
    a.max_rd_atomic = rd_atomic;
    if (ibv_modify_qp(sd->qp, &a,
                      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                          IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
        die(errno, "ibv_modify_qp(RTS)");
}

/* The offset of READ i: one place, or a pseudo-random size-aligned one in the spread. */
static uint64_t read_offset(const struct opts *o, uint64_t *rng, size_t region)
{
    size_t stride = RKV_ALIGN_UP((size_t)o->size, (size_t)64);
    size_t span = RKV_MIN(o->spread, region);

    if (span < 2 * stride)
        return 0;
    *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
    return ((*rng >> 33) % (span / stride)) * stride;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* One line: min, percentiles and mean in us; the share of READs within
 * 1.5x the fastest (on rxe, those whose responder ran without a switch to
 * ksoftirqd); with --switches, context switches per READ. */
static void report(const struct opts *o, uint64_t *ns, uint32_t n, uint64_t switches,
                   const char *extra)
{
    double sum = 0;
    uint32_t fast = 0;

    qsort(ns, n, sizeof *ns, cmp_u64);
    for (uint32_t i = 0; i < n; i++) {
        sum += (double)ns[i];
        fast += ns[i] * 2 <= ns[0] * 3;
    }
#define PCT(q) (ns[(uint64_t)n * (q) / 100] / 1e3)
    printf("%-30s %5u B x %5u: min %6.2f  p10 %6.2f  p25 %6.2f  p50 %6.2f  p75 %6.2f  p90 %6.2f  "
           "p99 %7.2f  mean %6.2f us  fast %4.1f%%",
           o->label, o->size, n, ns[0] / 1e3, PCT(10), PCT(25), PCT(50), PCT(75), PCT(90), PCT(99),
           sum / n / 1e3, 100.0 * fast / n);
#undef PCT
    if (o->switches)
        printf("  switches/READ %.2f", (double)switches / n);
    printf("%s\n", extra);
}

/* One line of the output: a setup and the READs timed on it. */
struct lat_case {
    struct opts o;
    unsigned id; /* its index among the cases */
    uint64_t rng;
    uint64_t *ns;      /* o.reads times */
    uint64_t switches; /* --switches: context switches during the timed READs */
    /* self mode */
    struct side req, resp;
    struct ibv_sge sge;
    struct ibv_send_wr wr;
    int batch;
    /* --rkv */
    struct rkv_ctrans *t;
    struct rkv_trans_counters ctr;
    struct rkv_read_op op;
    size_t base, span; /* READs at base + [0, span) of the region */
    /* --get */
    rkv_client *kv;
    char extra[160]; /* --get: the handle's counters per GET */
};

static void self_setup(struct lat_case *c)
{
    const struct opts *o = &c->o;
    const struct setup *s = &o->s;
    struct ibv_port_attr port;
    struct ibv_device_attr dev;
    union ibv_gid gid;

    if (s->dst_off + o->size > s->local || o->size > s->region)
        die(0, "%s: a %u-byte READ does not fit --local / --region", o->label, o->size);
    side_open(&c->resp, o, s->region, s->kind, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
    side_open(&c->req, o, s->local, REGION_ANON, IBV_ACCESS_LOCAL_WRITE);
    if (ibv_query_port(c->req.ctx, 1, &port) || ibv_query_device(c->req.ctx, &dev) ||
        ibv_query_gid(c->req.ctx, 1, o->gid_index, &gid))
        die(errno, "querying the device, port 1 or GID index %d (-x)", o->gid_index);
    uint8_t rd = (uint8_t)(s->rd_atomic
                               ? s->rd_atomic
                               : (uint32_t)RKV_MIN(dev.max_qp_rd_atom, dev.max_qp_init_rd_atom));
    enum ibv_mtu mtu = mtu_enum(s->mtu, port.active_mtu);
    connect_qp(&c->resp, c->req.qp->qp_num, &gid, o, mtu, rd);
    connect_qp(&c->req, c->resp.qp->qp_num, &gid, o, mtu, rd);

    struct ibv_qp_attr qa;
    struct ibv_qp_init_attr qi;
    if (ibv_query_qp(c->req.qp, &qa, IBV_QP_CAP, &qi) == 0)
        fprintf(stderr, "%s: granted send %u recv %u inline %u sge %u, rd_atomic %u, mtu %d\n",
                o->label, qi.cap.max_send_wr, qi.cap.max_recv_wr, qi.cap.max_inline_data,
                qi.cap.max_send_sge, rd, 128 << mtu);
    c->sge = (struct ibv_sge){ .addr = (uintptr_t)(c->req.mem + s->dst_off),
                               .length = o->size,
                               .lkey = c->req.mr->lkey };
    c->wr = (struct ibv_send_wr){ .sg_list = &c->sge,
                                  .num_sge = 1,
                                  .opcode = IBV_WR_RDMA_READ,
                                  .send_flags = IBV_SEND_SIGNALED,
                                  .wr.rdma.rkey = c->resp.mr->rkey };
    c->batch = RKV_MIN(RKV_MAX(s->poll, 1), 64);
}

/* One READ as ib_read_lat posts it: signaled, then poll until it completes. */
static uint64_t self_read(struct lat_case *c)
{
    struct ibv_send_wr *bad;
    struct ibv_wc wc[64];
    int got;

    c->wr.wr.rdma.remote_addr = (uintptr_t)c->resp.mem + read_offset(&c->o, &c->rng, c->o.s.region);
    uint64_t t0 = rkv_now_ns();
    if (ibv_post_send(c->req.qp, &c->wr, &bad) != 0)
        die(errno, "ibv_post_send");
    while ((got = ibv_poll_cq(c->req.scq, c->batch, wc)) == 0)
        ;
    uint64_t t1 = rkv_now_ns();
    if (got < 0 || wc[0].status != IBV_WC_SUCCESS)
        die(0, "READ failed: %s", got < 0 ? "poll" : ibv_wc_status_str(wc[0].status));
    return t1 - t0;
}

static void rkv_setup(struct lat_case *c)
{
    const struct rkv_client_transport *ops = &rkv_rdma_client_transport;
    const struct opts *o = &c->o;
    struct rkv_hello h;
    char err[400];
    const void *msg;
    size_t len;

    if (strncmp(o->rkv_uri, "rdma://", 7) != 0)
        die(0, "--rkv takes rdma://HOST:PORT, not \"%s\"", o->rkv_uri);
    if (ops->connect(o->rkv_uri + 7, NULL, &c->ctr, &c->t, err, sizeof err) != RKV_OK)
        die(0, "connect: %s", err);
    struct rkv_req req = { .opcode = RKV_OP_HELLO, .req_id = 1, .arg = RKV_PROTO_VERSION };
    uint32_t n = (uint32_t)rkv_req_build(ops->send_buf(c->t, 0), &req, "", NULL, 0, NULL, 0);
    const struct rkv_resp *rh;
    const uint8_t *payload;
    if (ops->send(c->t, &n, 1) != RKV_OK || ops->recv(c->t, &msg, &len, 5000) != RKV_OK)
        die(0, "HELLO: %s", ops->why(c->t));
    if (rkv_resp_parse(msg, len, &rh, &payload) != RKV_OK || rh->status != RKV_OK ||
        rkv_hello_parse(payload, rh->payload_len, &h) != RKV_OK)
        die(0, "HELLO refused or malformed (a server with --auth?)");
    ops->recv_done(c->t);
    if (ops->set_region(c->t, &h, err, sizeof err) != RKV_OK)
        die(0, "set_region: %s", err);
    c->op = (struct rkv_read_op){ .len = o->size, .dst = ops->local_buf(c->t, &len) };
    c->base = RKV_MIN((size_t)h.region_size / 2, (size_t)1 << 20); /* past header and index */
    c->span = (size_t)h.region_size - c->base - o->size;
    if (o->size > len || o->size + c->base > h.region_size)
        die(0, "a %u-byte READ does not fit the region or the read buffer", o->size);
}

/* One READ through rkv's transport, as a GET's read() makes it. */
static uint64_t rkv_read(struct lat_case *c)
{
    c->op.offset = c->base + read_offset(&c->o, &c->rng, c->span);
    uint64_t t0 = rkv_now_ns();
    if (rkv_rdma_client_transport.read(c->t, &c->op, 1) != RKV_OK)
        die(0, "READ: %s", rkv_rdma_client_transport.why(c->t));
    return rkv_now_ns() - t0;
}

#define GET_KEY_LEN   16 /* rkv-bench's: with a 32-byte value, an 88-byte item */
#define GET_VALUE_LEN 32

/* Key i of case `id`: each case stores its own keys, so that one case's
 * PUTs do not supersede the items another's location cache points at.
 * Formatted as rkv-bench formats its keys (wl_format_key, no snprintf): it
 * runs between timed GETs, and snprintf's code and data would evict the
 * GET's from the caches (under TCG, also its translated blocks). */
static void get_key(char *key, unsigned id, uint32_t i)
{
    wl_format_key(key, (uint64_t)id * 1000000000u + i % 1000000000u, GET_KEY_LEN);
}

/* Connect through librkv, store every key, GET each once (warm: the
 * location cache now knows them all). */
static void get_setup(struct lat_case *c)
{
    struct rkv_options ko = { .location_cache = c->o.cold ? (unsigned)-1 : 0 };
    char key[GET_KEY_LEN], value[GET_VALUE_LEN];
    size_t len;

    if (rkv_connect(c->o.get_uri, &ko, &c->kv) != RKV_OK)
        die(0, "--get: %s", rkv_last_error(NULL));
    memset(value, 'v', sizeof value);
    for (uint32_t i = 0; i < c->o.keys; i++) {
        get_key(key, c->id, i);
        if (rkv_put(c->kv, key, sizeof key, value, sizeof value, NULL, NULL) != RKV_OK ||
            rkv_get(c->kv, key, sizeof key, value, sizeof value, &len, NULL) != RKV_OK)
            die(0, "--get: storing key %u: %s", i, rkv_last_error(c->kv));
    }
    c->o.size = GET_VALUE_LEN;
    rkv_reset_counters(c->kv);
}

/* What the timed GETs (and the warm-up's) did, per GET. */
static void get_counters(struct lat_case *c)
{
    struct rkv_counters k;

    rkv_get_counters(c->kv, &k);
    double g = k.gets ? (double)k.gets : 1;
    snprintf(c->extra, sizeof c->extra,
             "  per GET: READs %.3f round trips %.3f cache hits %.3f "
             "forwards %.3f stale %.3f retries %.3f sends %.3f",
             k.reads / g, k.read_round_trips / g, k.cache_hits / g, k.forwards / g,
             k.cache_stale / g, k.verify_retries / g, k.sends / g);
}

/* One rkv_get() of a random stored key; it must find its value. */
static uint64_t get_one(struct lat_case *c)
{
    char key[GET_KEY_LEN], value[GET_VALUE_LEN];
    size_t len = 0;

    c->rng = c->rng * 6364136223846793005ull + 1442695040888963407ull;
    get_key(key, c->id, (uint32_t)((c->rng >> 33) % c->o.keys));
    uint64_t t0 = rkv_now_ns();
    rkv_status st = rkv_get(c->kv, key, sizeof key, value, sizeof value, &len, NULL);
    uint64_t t1 = rkv_now_ns();
    if (st != RKV_OK || len != GET_VALUE_LEN)
        die(0, "GET: %s", st != RKV_OK ? rkv_last_error(c->kv) : "wrong value length");
    return t1 - t0;
}

static void case_close(struct lat_case *c)
{
    if (c->kv != NULL)
        rkv_close(c->kv);
    if (c->t != NULL)
        rkv_rdma_client_transport.close(c->t);
    side_close(&c->req);
    side_close(&c->resp);
    free(c->ns);
    c->kv = NULL;
    c->t = NULL;
    c->ns = NULL;
}

/* Voluntary and involuntary context switches of this thread so far. */
static uint64_t thread_switches(void)
{
    struct rusage ru;

    if (getrusage(RUSAGE_THREAD, &ru) != 0)
        return 0;
    return (uint64_t)ru.ru_nvcsw + (uint64_t)ru.ru_nivcsw;
}

/* Set every case up, then READ round-robin, one per case in turn, so that
 * whatever else the machine does falls on every case alike. */
static void run_cases(struct lat_case *cases, unsigned n, pid_t stop_pid)
{
    const uint32_t warmup = cases[0].o.warmup, reads = cases[0].o.reads;

    for (unsigned k = 0; k < n; k++) {
        cases[k].id = k;
        cases[k].rng = 1;
        cases[k].ns = calloc(reads, sizeof *cases[k].ns);
        if (cases[k].ns == NULL)
            die(0, "out of memory");
        if (cases[k].o.get_uri != NULL)
            get_setup(&cases[k]);
        else if (cases[k].o.rkv_uri != NULL)
            rkv_setup(&cases[k]);
        else
            self_setup(&cases[k]);
    }
    if (stop_pid > 0 && kill(stop_pid, SIGSTOP) != 0)
        die(errno, "kill(%d, SIGSTOP)", (int)stop_pid);
    for (uint32_t i = 0; i < warmup + reads; i++)
        for (unsigned k = 0; k < n; k++) {
            uint64_t before = cases[k].o.switches ? thread_switches() : 0;
            uint64_t ns = cases[k].o.get_uri != NULL   ? get_one(&cases[k])
                          : cases[k].o.rkv_uri != NULL ? rkv_read(&cases[k])
                                                       : self_read(&cases[k]);
            if (i < warmup)
                continue;
            cases[k].ns[i - warmup] = ns;
            if (cases[k].o.switches)
                cases[k].switches += thread_switches() - before;
        }
    if (stop_pid > 0)
        kill(stop_pid, SIGCONT);
    for (unsigned k = 0; k < n; k++) {
        if (cases[k].kv != NULL)
            get_counters(&cases[k]);
        report(&cases[k].o, cases[k].ns, reads, cases[k].switches, cases[k].extra);
    }
    for (unsigned k = 0; k < n; k++)
        case_close(&cases[k]);
}

/* ------------------------------------------------------------ options */

enum {
    O_LIKE = 256,
    O_SQ,
    O_RQ,
    O_INLINE,
    O_SGE,
    O_CQ,
    O_SHARED_CQ,
    O_RD,
    O_MTU,
    O_TIMEOUT,
    O_RETRY,
    O_REGION,
    O_KIND,
    O_SPREAD,
    O_LOCAL,
    O_DST,
    O_POLL,
    O_RELAXED,
    O_RKV,
    O_STOP,
    O_SWITCHES,
    O_GET,
    O_KEYS,
    O_COLD
};

static void usage(void)
{
    fprintf(stderr,
            "usage: rdma-read-lat [-d DEV] [-x GID_INDEX] [-s BYTES] [-n READS] [-w WARMUP] [-l LABEL]\n"
            "         [--like perftest|rkv] [--sq N] [--rq N] [--inline N] [--sge N] [--cq N]\n"
            "         [--shared-cq 0|1] [--rd-atomic N] [--mtu 256..4096] [--timeout N] [--retry N]\n"
            "         [--region BYTES] [--region-kind anon|memfd|huge] [--spread BYTES]\n"
            "         [--local BYTES] [--dst-off N] [--poll N] [--relaxed 0|1] [--switches]\n"
            "       rdma-read-lat --rkv rdma://HOST:PORT [--stop SERVER_PID] [-s BYTES] [-n READS] [-w WARMUP]\n"
            "         [--spread BYTES] [-l LABEL]\n"
            "       rdma-read-lat --get URI [--keys N] [--cold] [-n GETS] [-w WARMUP] [-l LABEL]\n"
            "       rdma-read-lat [COMMON OPTIONS] --case \"LABEL: OPTIONS\" --case \"LABEL: OPTIONS\" ...\n");
    exit(2);
}

static void parse(int argc, char **argv, struct opts *o)
{
    static const struct option longs[] = {
        { "like", 1, 0, O_LIKE },
        { "sq", 1, 0, O_SQ },
        { "rq", 1, 0, O_RQ },
        { "inline", 1, 0, O_INLINE },
        { "sge", 1, 0, O_SGE },
        { "cq", 1, 0, O_CQ },
        { "shared-cq", 1, 0, O_SHARED_CQ },
        { "rd-atomic", 1, 0, O_RD },
        { "mtu", 1, 0, O_MTU },
        { "timeout", 1, 0, O_TIMEOUT },
        { "retry", 1, 0, O_RETRY },
        { "region", 1, 0, O_REGION },
        { "region-kind", 1, 0, O_KIND },
        { "spread", 1, 0, O_SPREAD },
        { "local", 1, 0, O_LOCAL },
        { "dst-off", 1, 0, O_DST },
        { "poll", 1, 0, O_POLL },
        { "relaxed", 1, 0, O_RELAXED },
        { "rkv", 1, 0, O_RKV },
        { "stop", 1, 0, O_STOP },
        { "switches", 0, 0, O_SWITCHES },
        { "get", 1, 0, O_GET },
        { "keys", 1, 0, O_KEYS },
        { "cold", 0, 0, O_COLD },
        { 0, 0, 0, 0 },
    };
    struct setup *s = &o->s;
    int c;

    *o = (struct opts){
        .label = "read", .gid_index = 1, .size = 2, .reads = 2000, .warmup = 100, .keys = 2000, .s = like_perftest
    };
    while ((c = getopt_long(argc, argv, "d:x:s:n:w:l:", longs, NULL)) != -1) {
        switch (c) {
        case 'd': o->dev = optarg; break;
        case 'x': o->gid_index = (int)parse_num(optarg, "-x"); break;
        case 's': o->size = (uint32_t)parse_num(optarg, "-s"); break;
        case 'n': o->reads = (uint32_t)parse_num(optarg, "-n"); break;
        case 'w': o->warmup = (uint32_t)parse_num(optarg, "-w"); break;
        case 'l': o->label = optarg; break;
        case O_LIKE:
            if (strcmp(optarg, "perftest") != 0 && strcmp(optarg, "rkv") != 0)
                die(0, "--like takes perftest or rkv, not \"%s\"", optarg);
            *s = optarg[0] == 'p' ? like_perftest : like_rkv;
            break;
        case O_SQ: s->sq = (uint32_t)parse_num(optarg, "--sq"); break;
        case O_RQ: s->rq = (uint32_t)parse_num(optarg, "--rq"); break;
        case O_INLINE: s->inline_data = (uint32_t)parse_num(optarg, "--inline"); break;
        case O_SGE: s->sge = (uint32_t)parse_num(optarg, "--sge"); break;
        case O_CQ: s->cq = (uint32_t)parse_num(optarg, "--cq"); break;
        case O_SHARED_CQ: s->shared_cq = parse_num(optarg, "--shared-cq") != 0; break;
        case O_RD: s->rd_atomic = (uint32_t)parse_num(optarg, "--rd-atomic"); break;
        case O_MTU: s->mtu = (uint32_t)parse_num(optarg, "--mtu"); break;
        case O_TIMEOUT: s->timeout = (uint8_t)parse_num(optarg, "--timeout"); break;
        case O_RETRY: s->retry = (uint8_t)parse_num(optarg, "--retry"); break;
        case O_REGION: s->region = (size_t)parse_num(optarg, "--region"); break;
        case O_KIND:
            if (strcmp(optarg, "anon") == 0)
                s->kind = REGION_ANON;
            else if (strcmp(optarg, "memfd") == 0)
                s->kind = REGION_MEMFD;
            else if (strcmp(optarg, "huge") == 0)
                s->kind = REGION_HUGE;
            else
                die(0, "--region-kind takes anon, memfd or huge, not \"%s\"", optarg);
            break;
        case O_SPREAD: o->spread = (size_t)parse_num(optarg, "--spread"); break;
        case O_LOCAL: s->local = (size_t)parse_num(optarg, "--local"); break;
        case O_DST: s->dst_off = (size_t)parse_num(optarg, "--dst-off"); break;
        case O_POLL: s->poll = (int)parse_num(optarg, "--poll"); break;
        case O_RELAXED: s->relaxed = parse_num(optarg, "--relaxed") != 0; break;
        case O_RKV: o->rkv_uri = optarg; break;
        case O_STOP: o->stop_pid = (pid_t)parse_num(optarg, "--stop"); break;
        case O_SWITCHES: o->switches = true; break;
        case O_GET: o->get_uri = optarg; break;
        case O_KEYS: o->keys = (uint32_t)parse_num(optarg, "--keys"); break;
        case O_COLD: o->cold = true; break;
        default: usage();
        }
    }
    if (optind != argc || o->size == 0 || o->reads == 0 || s->sq == 0 || s->rq == 0 ||
        s->sge == 0 || s->region == 0 || s->local == 0 || o->keys == 0)
        usage();
}

#define MAX_CASES 16
#define MAX_ARGS  128

/* argv for one case: the program, the options outside any --case, then the
 * case's own (its text after "LABEL:", split at spaces). `buf` holds the
 * label and the options' text; *label is NULL when the text has no colon. */
static int case_argv(int argc, char **argv, const char *text, char *buf, size_t buf_len, char **out,
                     const char **label)
{
    char *opts = buf, *colon;
    int n = 0;

    if ((size_t)snprintf(buf, buf_len, "%s", text) >= buf_len)
        die(0, "--case \"%.40s...\" is too long", text);
    *label = NULL;
    if ((colon = strchr(buf, ':')) != NULL) {
        *colon = '\0';
        *label = buf;
        opts = colon + 1;
    }
    out[n++] = argv[0];
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--case") == 0) {
            i++;
            continue;
        }
        if (n + 1 >= MAX_ARGS)
            die(0, "too many arguments");
        out[n++] = argv[i];
    }
    for (char *tok = strtok(opts, " "); tok != NULL; tok = strtok(NULL, " ")) {
        if (n + 1 >= MAX_ARGS)
            die(0, "too many arguments in --case \"%s\"", text);
        out[n++] = tok;
    }
    out[n] = NULL;
    return n;
}

int main(int argc, char **argv)
{
    static struct lat_case cases[MAX_CASES];
    static char bufs[MAX_CASES][1024];
    const char *texts[MAX_CASES];
    unsigned n = 0;

    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--case") == 0) {
            if (i + 1 >= argc || n == MAX_CASES)
                die(0, "--case takes \"LABEL: OPTIONS\" (at most %d cases)", MAX_CASES);
            texts[n++] = argv[++i];
        }
    if (n == 0)
        texts[n++] = "";
    for (unsigned k = 0; k < n; k++) {
        char *args[MAX_ARGS];
        const char *label;
        int m = case_argv(argc, argv, texts[k], bufs[k], sizeof bufs[k], args, &label);
        optind = 0; /* glibc: a full rescan of a new argv */
        parse(m, args, &cases[k].o);
        if (label != NULL)
            cases[k].o.label = label;
        if (cases[k].o.reads != cases[0].o.reads || cases[k].o.warmup != cases[0].o.warmup)
            die(0, "-n and -w belong outside --case: every case makes as many READs");
    }
    run_cases(cases, n, cases[0].o.stop_pid);
    return 0;
}
