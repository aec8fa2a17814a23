/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * mrc_bench: an RDMA WRITE bandwidth sweep over one MRC QP between two processes, written against
 * droce's declaration of the OCP MRC application API (lib/mrcapi/include/mrc.h) and linked with
 * lib_mrc.so: the same job as the OCP repository's benchmark example, in droce's own code.
 *
 *   server:  mrc_bench -d DEVICE [-p TCP_PORT] [options]
 *   client:  mrc_bench -d DEVICE [-p TCP_PORT] [options] SERVER_IP
 *
 * Both sides open the verbs device, check MRC support, create an MRC context, PD, two CQs and an
 * MRC QP, register one buffer (send area, receive area, two 8-byte signal words), bring the QP to
 * INIT and swap QPN, PSN, rkey, buffer address and GID over TCP, then go to RTR and RTS. For each
 * message size, doubling from the minimum to the maximum:
 *   1. the server clears its receive area, posts one receive (for the immediate) and says "ready"
 *      over TCP;
 *   2. the client WRITEs the message ITERS times into the server's receive area (a window of
 * TX_DEPTH WRITEs, one signaled every CQ_MOD), then one WRITE with immediate (the message size)
 * that puts the size into the server's signal word: the end signal;
 *   3. the server waits for the immediate's completion, checks the immediate, the signal word and
 *      every byte of the receive area against the pattern, and answers over TCP;
 *   4. the client prints size, iterations, Gb/s, million messages per second and the verdict.
 * Exit status 0 only when every size was verified.
 *
 * With -P PORT (both sides) the sweep is replaced by three phases of the largest size: all ports
 * up; port PORT taken down through the controller API (mrc_ctl_modify_port, droce's mrc_ctl.h) by
 * the client once half of the phase's WRITEs completed; the port back up. Each phase is verified
 * and its throughput printed: the QP goes on, without error, on the planes that are left.
 */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <getopt.h>
#include <mrc.h>
#include <mrc_ctl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { TX_DEPTH = 128, CQ_MOD = 16, CQE = 512 };

struct peer_info {
    uint32_t qpn;
    uint32_t psn;
    uint32_t rkey;
    uint32_t pad;
    uint64_t addr;
    uint8_t gid[16];
};

struct bench {
    const char* dev_name;
    const char* server_ip; /* the client connects to it; NULL on the server */
    int tcp_port;
    int gid_index;
    int iters;
    size_t min_size;
    size_t max_size;
    enum ibv_mtu mtu;
    int plane_down;    /* -P: the 1-based port the client takes down mid-run (0: the sweep) */
    uint64_t down_at;  /* WRITEs completed in the current phase before the port goes down */

    struct ibv_context* ctx;
    struct ibv_pd* pd;
    struct mrc_context* mctx;
    struct mrc_cq* scq;
    struct mrc_cq* rcq;
    struct mrc_qp* qp;
    struct ibv_mr* mr;
    uint8_t* buf;
    size_t buf_len;
    int sock;
    struct peer_info me;
    struct peer_info peer;
};

static int die(const char* what) {
    fprintf(stderr, "mrc_bench: %s: %s\n", what, strerror(errno));
    return 1;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The byte the client writes at offset i of a message of size n (a new pattern per size). */
static uint8_t pattern(size_t i, size_t n) {
    return (uint8_t)(i * 7u + n * 13u + (i >> 8));
}

static uint8_t* send_area(struct bench* b) {
    return b->buf;
}
static uint8_t* recv_area(struct bench* b) {
    return b->buf + b->max_size;
}
static volatile uint64_t* signal_word(struct bench* b) {
    return (volatile uint64_t*)(void*)(b->buf + 2 * b->max_size);
}

/* ------------------------------------------------------------------ TCP */

static int xfer(int fd, void* p, size_t n, int sending) {
    uint8_t* c = p;
    while (n > 0) {
        ssize_t r = sending ? send(fd, c, n, MSG_NOSIGNAL) : recv(fd, c, n, MSG_WAITALL);
        if (r <= 0) {
            if (r == 0) errno = ECONNRESET;
            return -1;
        }
        c += r;
        n -= (size_t)r;
    }
    return 0;
}

static int tcp_setup(struct bench* b) {
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)b->tcp_port);
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0) return -1;
    int one = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (b->server_ip) {
        if (inet_pton(AF_INET, b->server_ip, &a.sin_addr) != 1) {
            errno = EINVAL;
            return -1;
        }
        for (int tries = 0;; ++tries) { /* the server may still be starting */
            if (connect(s, (struct sockaddr*)&a, sizeof a) == 0) break;
            if (tries == 100) return -1;
            usleep(100000);
        }
        b->sock = s;
    } else {
        a.sin_addr.s_addr = htonl(INADDR_ANY);
        if (bind(s, (struct sockaddr*)&a, sizeof a) != 0 || listen(s, 1) != 0) return -1;
        printf("server: listening on TCP port %d\n", b->tcp_port);
        fflush(stdout);
        b->sock = accept(s, NULL, NULL);
        close(s);
        if (b->sock < 0) return -1;
    }
    setsockopt(b->sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return 0;
}

/* ------------------------------------------------------------------ MRC set-up */

static int open_device(struct bench* b) {
    int n = 0;
    struct ibv_device** list = ibv_get_device_list(&n);
    if (!list) return die("ibv_get_device_list");
    for (int i = 0; i < n && !b->ctx; ++i)
        if (!b->dev_name || strcmp(ibv_get_device_name(list[i]), b->dev_name) == 0)
            b->ctx = ibv_open_device(list[i]);
    ibv_free_device_list(list);
    if (!b->ctx) return die("no such device, or ibv_open_device failed");
    struct mrc_device_attr attr;
    int supported = 0;
    if (mrc_query_device_ex(b->ctx, NULL, &attr, &supported) != 0)
        return die("mrc_query_device_ex");
    if (!supported) {
        fprintf(stderr, "mrc_bench: the device does not do MRC\n");
        return 1;
    }
    uint32_t cur = 0;
    mrc_query_version(&cur, NULL, NULL, NULL);
    printf("MRC API %u.%u.%u; device %s: max_wimm %u/%u, max_mpr %u, caps 0x%x\n", cur >> 24,
           (cur >> 16) & 0xff, cur & 0xffff, ibv_get_device_name(b->ctx->device),
           attr.wimm_attr.max_wimm, attr.wimm_attr.max_wimm_dest, attr.mpr_attr.max_mpr, attr.cap);
    struct mrc_context_attr ca = {MRC_API_VER_USED, MRC_VENDOR_API_VER_USED};
    b->mctx = mrc_create_context(b->ctx, &ca);
    if (!b->mctx) return die("mrc_create_context");
    b->pd = ibv_alloc_pd(b->ctx);
    if (!b->pd) return die("ibv_alloc_pd");
    b->scq = mrc_create_cq(b->mctx, CQE, NULL, NULL, 0);
    b->rcq = mrc_create_cq(b->mctx, CQE, NULL, NULL, 0);
    if (!b->scq || !b->rcq) return die("mrc_create_cq");
    struct mrc_qp_init_attr qa;
    memset(&qa, 0, sizeof qa);
    qa.send_cq = b->scq;
    qa.recv_cq = b->rcq;
    qa.pd = b->pd;
    qa.cap.max_send_wr = TX_DEPTH + 1;
    qa.cap.max_recv_wr = 4;
    qa.cap.max_send_sge = 1;
    qa.cap.max_recv_sge = 1;
    qa.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM;
    qa.protocol_version = MRC_PROTOCOL_VERSION_1;
    b->qp = mrc_create_qp(b->mctx, &qa);
    if (!b->qp) return die("mrc_create_qp");
    b->buf_len = 2 * b->max_size + 2 * sizeof(uint64_t);
    if (posix_memalign((void**)&b->buf, 4096, b->buf_len) != 0) return die("posix_memalign");
    memset(b->buf, 0, b->buf_len);
    b->mr = ibv_reg_mr(b->pd, b->buf, b->buf_len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (!b->mr) return die("ibv_reg_mr");
    return 0;
}

static int connect_qp(struct bench* b) {
    struct ibv_qp_attr v;
    memset(&v, 0, sizeof v);
    v.qp_state = IBV_QPS_INIT;
    v.pkey_index = 0;
    v.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
    int rc =
        mrc_modify_qp(b->qp, &v, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_ACCESS_FLAGS, NULL, 0);
    if (rc) return errno = rc, die("mrc_modify_qp to INIT");

    union ibv_gid gid;
    if (ibv_query_gid(b->ctx, 1, b->gid_index, &gid)) return die("ibv_query_gid");
    if (mrc_get_qpn(b->qp, &b->me.qpn)) return die("mrc_get_qpn");
    srand48((long)time(NULL) ^ (long)getpid());
    b->me.psn = (uint32_t)lrand48() & 0xffffff;
    b->me.rkey = b->mr->rkey;
    b->me.addr = (uint64_t)(uintptr_t)b->buf;
    memcpy(b->me.gid, gid.raw, 16);
    if (tcp_setup(b)) return die("TCP set-up");
    if (xfer(b->sock, &b->me, sizeof b->me, 1) || xfer(b->sock, &b->peer, sizeof b->peer, 0))
        return die("QP information exchange");
    char peer_gid[INET6_ADDRSTRLEN];
    inet_ntop(AF_INET6, b->peer.gid, peer_gid, sizeof peer_gid);
    printf("local QPN 0x%06x PSN 0x%06x, peer QPN 0x%06x PSN 0x%06x GID %s\n", b->me.qpn, b->me.psn,
           b->peer.qpn, b->peer.psn, peer_gid);

    /* RTR: the peer's GID of port 1 (lib_mrc finds the peer on the other planes), the responder's
     * MRC attributes. */
    memset(&v, 0, sizeof v);
    v.qp_state = IBV_QPS_RTR;
    v.path_mtu = b->mtu;
    v.ah_attr.is_global = 1;
    memcpy(v.ah_attr.grh.dgid.raw, b->peer.gid, 16);
    v.ah_attr.grh.sgid_index = (uint8_t)b->gid_index;
    v.ah_attr.port_num = 1;
    v.dest_qp_num = b->peer.qpn;
    v.rq_psn = b->peer.psn;
    struct mrc_qp_attr m;
    memset(&m, 0, sizeof m);
    m.mpr.mpr_dest = 16;
    m.wimm.max_wimm_dest = 16;
    rc = mrc_modify_qp(b->qp, &v,
                       IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN,
                       &m, MRC_QP_MPR_DEST | MRC_QP_MAX_WIMM_DEST);
    if (rc) return errno = rc, die("mrc_modify_qp to RTR");

    /* RTS: the requester's MRC attributes. */
    memset(&v, 0, sizeof v);
    v.qp_state = IBV_QPS_RTS;
    v.sq_psn = b->me.psn;
    memset(&m, 0, sizeof m);
    m.mpr.mpr = 16;
    m.wimm.max_wimm = 16;
    m.timeout = 14;
    m.retry.linear_cnt = 7;
    m.retry.exp_cnt = 7;
    rc = mrc_modify_qp(b->qp, &v, IBV_QP_STATE | IBV_QP_SQ_PSN, &m,
                       MRC_QP_MPR | MRC_QP_MAX_WIMM | MRC_QP_TIMEOUT | MRC_QP_RETRY_CNT);
    if (rc) return errno = rc, die("mrc_modify_qp to RTS");
    return 0;
}

/* ------------------------------------------------------------------ the sweep */

static int post_write(struct bench* b, size_t len, int signaled, uint64_t wr_id) {
    struct ibv_sge sge = {(uint64_t)(uintptr_t)send_area(b), (uint32_t)len, b->mr->lkey};
    struct ibv_send_wr wr, *bad = NULL;
    memset(&wr, 0, sizeof wr);
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = signaled ? IBV_SEND_SIGNALED : 0;
    wr.wr.rdma.remote_addr = b->peer.addr + b->max_size; /* the server's receive area */
    wr.wr.rdma.rkey = b->peer.rkey;
    return mrc_post_send(b->qp, &wr, &bad);
}

/* Polls @cq for one completion (successful, else an error). */
static int wait_one(struct mrc_cq* cq, struct ibv_wc* wc) {
    for (;;) {
        int n = mrc_poll_cq(cq, 1, wc);
        if (n < 0) return -1;
        if (n == 1) return wc->status == IBV_WC_SUCCESS ? 0 : -1;
    }
}

/* Takes port b->plane_down out of service (@up 0) or back (@up 1): the controller API. */
static int set_port(struct bench* b, int up) {
    struct mrc_ctl_port_attr a;
    memset(&a, 0, sizeof a);
    a.port_admin_state = up ? MRC_CTL_PORT_ADMIN_ENABLED : MRC_CTL_PORT_ADMIN_DISABLED;
    return mrc_ctl_modify_port(b->mctx, (uint8_t)b->plane_down, &a, MRC_CTL_PORT_ADMIN_STATE);
}

static int client_size(struct bench* b, size_t size, double* secs) {
    for (size_t i = 0; i < size; ++i)
        send_area(b)[i] = pattern(i, size);
    char ready = 0;
    if (xfer(b->sock, &ready, 1, 0)) return die("waiting for the server");
    struct ibv_wc wc[16];
    uint64_t posted = 0, completed = 0;
    const uint64_t total = (uint64_t)b->iters;
    const double t0 = now_s();
    while (completed < total) {
        while (posted < total && posted - completed < TX_DEPTH) {
            const int signaled = (posted % CQ_MOD) == CQ_MOD - 1 || posted == total - 1;
            if (post_write(b, size, signaled, posted)) return die("mrc_post_send");
            ++posted;
        }
        int n = mrc_poll_cq(b->scq, 16, wc);
        if (n < 0) return die("mrc_poll_cq");
        for (int k = 0; k < n; ++k) {
            if (wc[k].status != IBV_WC_SUCCESS) {
                fprintf(stderr, "mrc_bench: WRITE %llu: %s\n", (unsigned long long)wc[k].wr_id,
                        ibv_wc_status_str(wc[k].status));
                return 1;
            }
            /* A signaled WRITE completes the unsignaled ones before it too. */
            completed = wc[k].wr_id + 1;
        }
        if (b->down_at && completed >= b->down_at) {
            b->down_at = 0;
            if (set_port(b, 0)) return die("mrc_ctl_modify_port (down)");
        }
    }
    *secs = now_s() - t0;
    /* The end signal: WRITE with immediate of the size into the server's signal word. */
    *(volatile uint64_t*)(void*)(b->buf + 2 * b->max_size + sizeof(uint64_t)) = size;
    struct ibv_sge sge = {(uint64_t)(uintptr_t)(b->buf + 2 * b->max_size + sizeof(uint64_t)),
                          sizeof(uint64_t), b->mr->lkey};
    struct ibv_send_wr wr, *bad = NULL;
    memset(&wr, 0, sizeof wr);
    wr.wr_id = UINT64_MAX;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.imm_data = htobe32((uint32_t)size);
    wr.wr.rdma.remote_addr = b->peer.addr + 2 * b->max_size;
    wr.wr.rdma.rkey = b->peer.rkey;
    if (mrc_post_send(b->qp, &wr, &bad)) return die("mrc_post_send (WRITE with immediate)");
    if (wait_one(b->scq, wc)) return die("WRITE with immediate completion");
    return 0;
}

static int server_size(struct bench* b, size_t size) {
    memset(recv_area(b), 0, size);
    *signal_word(b) = 0;
    struct ibv_recv_wr r, *bad = NULL;
    memset(&r, 0, sizeof r);
    r.wr_id = size;
    if (mrc_post_recv(b->qp, &r, &bad)) return die("mrc_post_recv");
    char ready = 1;
    if (xfer(b->sock, &ready, 1, 1)) return die("telling the client");
    struct ibv_wc wc;
    if (wait_one(b->rcq, &wc)) return die("immediate completion");
    int ok = wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM && (wc.wc_flags & IBV_WC_WITH_IMM) &&
             be32toh(wc.imm_data) == (uint32_t)size && wc.byte_len == sizeof(uint64_t) &&
             *signal_word(b) == size;
    size_t bad_bytes = 0;
    for (size_t i = 0; i < size; ++i)
        bad_bytes += recv_area(b)[i] != pattern(i, size);
    if (bad_bytes) fprintf(stderr, "mrc_bench: size %zu: %zu bytes wrong\n", size, bad_bytes);
    ok = ok && bad_bytes == 0;
    char verdict = ok ? 'Y' : 'N';
    if (xfer(b->sock, &verdict, 1, 1)) return die("answering the client");
    return ok ? 0 : 1;
}

static int sweep(struct bench* b) {
    int failures = 0;
    if (b->server_ip)
        printf("\n %-10s %-10s %-12s %-14s %s\n", "size", "iters", "Gb/s", "Mmsg/s", "verified");
    for (size_t size = b->min_size;; size *= 2) {
        if (size > b->max_size) size = b->max_size;
        if (b->server_ip) {
            double secs = 0;
            if (client_size(b, size, &secs)) return 1;
            char verdict = 0;
            if (xfer(b->sock, &verdict, 1, 0)) return die("server's answer");
            const double bytes = (double)size * b->iters;
            printf(" %-10zu %-10d %-12.3f %-14.4f %s\n", size, b->iters, bytes * 8 / secs / 1e9,
                   b->iters / secs / 1e6, verdict == 'Y' ? "yes" : "NO");
            fflush(stdout);
            failures += verdict != 'Y';
        } else {
            failures += server_size(b, size) != 0;
        }
        if (size == b->max_size) break;
    }
    printf("%s: %d sizes failed verification\n", b->server_ip ? "client" : "server", failures);
    return failures != 0;
}

/* -P: three verified phases of the largest size, the client's port going down in the second. */
static int phases(struct bench* b) {
    int failures = 0;
    const size_t size = b->max_size;
    if (b->server_ip)
        printf("\n %-8s %-28s %-10s %-10s %-12s %s\n", "phase", "ports", "size", "iters", "Gb/s",
               "verified");
    for (int ph = 1; ph <= 3; ++ph) {
        if (b->server_ip) {
            char what[64];
            if (ph == 1) snprintf(what, sizeof what, "all up");
            if (ph == 2) snprintf(what, sizeof what, "port %d down after %d", b->plane_down, b->iters / 2);
            if (ph == 3) {
                if (set_port(b, 1)) return die("mrc_ctl_modify_port (up)");
                snprintf(what, sizeof what, "port %d back up", b->plane_down);
            }
            b->down_at = ph == 2 ? (uint64_t)(b->iters / 2) : 0;
            double secs = 0;
            if (client_size(b, size, &secs)) return 1;
            char verdict = 0;
            if (xfer(b->sock, &verdict, 1, 0)) return die("server's answer");
            printf(" %-8d %-28s %-10zu %-10d %-12.3f %s\n", ph, what, size, b->iters,
                   (double)size * b->iters * 8 / secs / 1e9, verdict == 'Y' ? "yes" : "NO");
            fflush(stdout);
            failures += verdict != 'Y';
        } else {
            failures += server_size(b, size) != 0;
        }
    }
    printf("%s: %d phases failed verification\n", b->server_ip ? "client" : "server", failures);
    return failures != 0;
}

static void cleanup(struct bench* b) {
    if (b->qp) mrc_destroy_qp(b->qp);
    if (b->scq) mrc_destroy_cq(b->scq);
    if (b->rcq) mrc_destroy_cq(b->rcq);
    if (b->mr) ibv_dereg_mr(b->mr);
    if (b->pd) ibv_dealloc_pd(b->pd);
    if (b->mctx) mrc_destroy_context(b->mctx);
    if (b->ctx) ibv_close_device(b->ctx);
    if (b->sock >= 0) close(b->sock);
    free(b->buf);
}

static void usage(void) {
    fprintf(stderr, "usage: mrc_bench -d DEVICE [-p TCP_PORT] [-g GID_INDEX] [-m MTU] [-n ITERS]\n"
                    "                 [-S MIN_SIZE] [-s MAX_SIZE] [-P PORT] [SERVER_IP]\n");
}

int main(int argc, char** argv) {
    struct bench b;
    memset(&b, 0, sizeof b);
    b.sock = -1;
    b.tcp_port = 18186;
    b.iters = 1000;
    b.min_size = 1;
    b.max_size = 1 << 20;
    b.mtu = IBV_MTU_4096;
    int c;
    while ((c = getopt(argc, argv, "d:p:g:m:n:S:s:P:h")) != -1) {
        switch (c) {
        case 'd':
            b.dev_name = optarg;
            break;
        case 'p':
            b.tcp_port = atoi(optarg);
            break;
        case 'g':
            b.gid_index = atoi(optarg);
            break;
        case 'n':
            b.iters = atoi(optarg);
            break;
        case 'S':
            b.min_size = strtoull(optarg, NULL, 0);
            break;
        case 's':
            b.max_size = strtoull(optarg, NULL, 0);
            break;
        case 'P':
            b.plane_down = atoi(optarg);
            break;
        case 'm':
            switch (atoi(optarg)) {
            case 256:
                b.mtu = IBV_MTU_256;
                break;
            case 512:
                b.mtu = IBV_MTU_512;
                break;
            case 1024:
                b.mtu = IBV_MTU_1024;
                break;
            case 2048:
                b.mtu = IBV_MTU_2048;
                break;
            case 4096:
                b.mtu = IBV_MTU_4096;
                break;
            default:
                usage();
                return 2;
            }
            break;
        default:
            usage();
            return 2;
        }
    }
    if (optind < argc) b.server_ip = argv[optind];
    if (b.iters <= 0 || b.min_size == 0 || b.min_size > b.max_size) {
        usage();
        return 2;
    }
    int rc = open_device(&b);
    if (rc == 0) rc = connect_qp(&b);
    if (rc == 0) rc = b.plane_down ? phases(&b) : sweep(&b);
    cleanup(&b);
    return rc;
}
