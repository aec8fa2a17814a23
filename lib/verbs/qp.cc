/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * Protection domains, memory regions, RC queue pairs (create / modify / query / destroy,
 * ibv_post_send, ibv_post_recv, the ibv_qp_ex ibv_wr_* interface) and address handles of droce's
 * libibverbs.
 *
 * Work requests are converted to droce's rc::SendWqe / rc::RecvWqe (whose enums carry the ibverbs
 * values) and posted on the QP's rings under the QP's send / receive spinlock. Immediate data is
 * __be32 in verbs and host order in droce: converted here. Inline data is gathered from the
 * application's buffers at post time, so they are free when the call returns.
 */
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "common/say_once.h"
#include "provider.h"
#include "rc/params.h"
#include "wr_convert.h"

namespace droce::verbs {
namespace {

// ---------------------------------------------------------------- conversions

/** Fills @p w from @p wr. @return 0 or EINVAL (bad opcode, too many SGEs, inline data too long). */
int to_send_wqe(const ibv_send_wr& wr, rc::SendWqe& w) noexcept {
    if (wr.num_sge < 0 || static_cast<std::uint32_t>(wr.num_sge) > rc::kMaxSge) return EINVAL;
    if (wr.num_sge > 0 && !wr.sg_list) return EINVAL;
    if (static_cast<unsigned>(wr.opcode) > IBV_WR_SEND_WITH_INV) return EINVAL;
    w.wr_id = wr.wr_id;
    w.opcode = static_cast<rc::WrOpcode>(wr.opcode);
    w.send_flags =
        wr.send_flags & (IBV_SEND_FENCE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED | IBV_SEND_INLINE);
    w.imm_data = 0;
    w.invalidate_rkey = 0;
    w.remote_addr = 0;
    w.rkey = 0;
    w.compare_add = 0;
    w.swap = 0;
    switch (wr.opcode) {
    case IBV_WR_SEND_WITH_IMM:
        w.imm_data = be32toh(wr.imm_data);
        break;
    case IBV_WR_RDMA_WRITE_WITH_IMM:
        w.imm_data = be32toh(wr.imm_data);
        [[fallthrough]];
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_READ:
        w.remote_addr = wr.wr.rdma.remote_addr;
        w.rkey = wr.wr.rdma.rkey;
        break;
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
        w.remote_addr = wr.wr.atomic.remote_addr;
        w.rkey = wr.wr.atomic.rkey;
        w.compare_add = wr.wr.atomic.compare_add;
        w.swap = wr.wr.atomic.swap;
        break;
    case IBV_WR_SEND_WITH_INV:
        w.invalidate_rkey = wr.invalidate_rkey;
        break;
    default:
        break;
    }
    if ((wr.send_flags & IBV_SEND_INLINE) && wr.opcode != IBV_WR_RDMA_READ &&
        wr.opcode != IBV_WR_ATOMIC_CMP_AND_SWP && wr.opcode != IBV_WR_ATOMIC_FETCH_AND_ADD) {
        std::uint32_t len = 0;
        for (int i = 0; i < wr.num_sge; ++i) {
            const ibv_sge& s = wr.sg_list[i];
            if (s.length > rc::kMaxInlineData - len) return EINVAL;
            std::memcpy(w.inline_data + len, reinterpret_cast<const void*>(s.addr), s.length);
            len += s.length;
        }
        w.num_sge = 0;
        w.length = len;
        return 0;
    }
    w.send_flags &= ~static_cast<std::uint32_t>(IBV_SEND_INLINE);
    w.num_sge = static_cast<std::uint32_t>(wr.num_sge);
    std::uint32_t len = 0;
    for (int i = 0; i < wr.num_sge; ++i) {
        w.sg_list[i] = rc::Sge{wr.sg_list[i].addr, wr.sg_list[i].length, wr.sg_list[i].lkey};
        len += wr.sg_list[i].length;
    }
    w.length = len;
    return 0;
}

rc::QpAttr to_qp_attr(const ibv_qp_attr& a) noexcept {
    rc::QpAttr q;
    q.qp_state = static_cast<rc::QpState>(a.qp_state);
    q.cur_qp_state = static_cast<rc::QpState>(a.cur_qp_state);
    q.path_mtu = static_cast<rc::Mtu>(a.path_mtu);
    q.qkey = a.qkey;
    q.rq_psn = a.rq_psn;
    q.sq_psn = a.sq_psn;
    q.dest_qp_num = a.dest_qp_num;
    q.qp_access_flags = static_cast<std::uint32_t>(a.qp_access_flags);
    q.pkey_index = a.pkey_index;
    q.max_rd_atomic = a.max_rd_atomic;
    q.max_dest_rd_atomic = a.max_dest_rd_atomic;
    q.min_rnr_timer = a.min_rnr_timer;
    q.port_num = a.port_num;
    q.timeout = a.timeout != 0 && a.timeout < VQp::kMinAckTimeout ? VQp::kMinAckTimeout : a.timeout;
    q.retry_cnt = a.retry_cnt;
    q.rnr_retry = a.rnr_retry;
    q.sq_draining = a.sq_draining != 0;
    std::memcpy(q.ah_attr.dgid.data(), a.ah_attr.grh.dgid.raw, 16);
    q.ah_attr.sgid_index = a.ah_attr.grh.sgid_index;
    q.ah_attr.port_num = a.ah_attr.port_num;
    q.ah_attr.traffic_class = a.ah_attr.grh.traffic_class;
    q.ah_attr.hop_limit = a.ah_attr.grh.hop_limit;
    q.ah_attr.flow_label = a.ah_attr.grh.flow_label;
    q.ah_attr.sl = a.ah_attr.sl;
    return q;
}

void from_qp_attr(const rc::Qp& qp, ibv_qp_attr& a) noexcept {
    const rc::QpAttr& q = qp.attr;
    std::memset(&a, 0, sizeof a);
    a.qp_state = static_cast<ibv_qp_state>(qp.state);
    a.cur_qp_state = a.qp_state;
    a.path_mtu = static_cast<ibv_mtu>(q.path_mtu);
    a.path_mig_state = IBV_MIG_MIGRATED;
    a.qkey = q.qkey;
    // Live PSNs (as rxe and ConnectX report them): the next PSN the requester sends from RTS on,
    // the PSN the responder expects from RTR on; before that, what modify set. RC transport only
    // (a multipath QP keeps its PSNs in its own state).
    const bool rc_live = qp.transport == &rc::kRcTransport;
    a.rq_psn = rc_live && qp.state >= rc::QpState::rtr ? qp.resp.expected_psn.value() : q.rq_psn;
    a.sq_psn = rc_live && qp.state >= rc::QpState::rts ? qp.req.next_psn.value() : q.sq_psn;
    a.dest_qp_num = q.dest_qp_num;
    a.qp_access_flags = static_cast<unsigned>(q.qp_access_flags);
    a.cap.max_send_wr = qp.cap.max_send_wr;
    a.cap.max_recv_wr = qp.cap.max_recv_wr;
    a.cap.max_send_sge = qp.cap.max_send_sge;
    a.cap.max_recv_sge = qp.cap.max_recv_sge;
    a.cap.max_inline_data = qp.cap.max_inline_data;
    std::memcpy(a.ah_attr.grh.dgid.raw, q.ah_attr.dgid.data(), 16);
    a.ah_attr.grh.sgid_index = q.ah_attr.sgid_index;
    a.ah_attr.grh.traffic_class = q.ah_attr.traffic_class;
    a.ah_attr.grh.hop_limit = q.ah_attr.hop_limit;
    a.ah_attr.grh.flow_label = q.ah_attr.flow_label;
    a.ah_attr.is_global = 1;
    a.ah_attr.sl = q.ah_attr.sl;
    a.ah_attr.port_num = q.ah_attr.port_num;
    a.pkey_index = q.pkey_index;
    a.sq_draining = qp.state == rc::QpState::sqd ? q.sq_draining : 0;
    a.max_rd_atomic = q.max_rd_atomic;
    a.max_dest_rd_atomic = q.max_dest_rd_atomic;
    a.min_rnr_timer = q.min_rnr_timer;
    a.port_num = q.port_num;
    a.timeout = q.timeout;
    a.retry_cnt = q.retry_cnt;
    a.rnr_retry = q.rnr_retry;
}

// ---------------------------------------------------------------- datapath

/**
 * ibv_post_send (context op): posts the chain @p wr in order, in chunks of VQp::kScratch, until the
 * first WR that cannot be posted. Inline data is copied now. Any thread (per-QP spinlock).
 * Unless DROCE_PROGRESS=thread, the calling thread then runs up to DROCE_PROGRESS_PASSES engine
 * passes itself when no other thread is running the engine (Device::post_send), so the WQEs leave
 * at once.
 * @return 0; EINVAL (QP not in RTS/SQD/ERR, opcode droce does not support such as LOCAL_INV or
 *         BIND_MW, more SGEs than the QP's max_send_sge, inline data above max_inline_data or on
 *         READ/atomic, atomic SGE not 8 bytes); ENOMEM (send queue full). *bad_wr = the first WR
 *         not posted (those before it are posted).
 */
int post_send(ibv_qp* ibqp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
    VQp* qp = from_ibv<VQp>(ibqp);
    rc::SendWqe* buf = qp->scratch.get();
    int rc = 0;
    qp->sq_lock.lock();
    ibv_send_wr* head = wr;
    while (head && rc == 0) {
        std::uint32_t n = 0;
        ibv_send_wr* w = head;
        for (; w && n < VQp::kScratch; w = w->next, ++n) {
            if ((rc = to_send_wqe(*w, buf[n])) != 0) break;
        }
        std::uint32_t bad = n;
        if (n > 0) {
            int prc = qp->ctx->dev->post_send(qp->native, buf, n, &bad, qp->ctx->drive_passes);
            if (prc != 0) rc = prc;
        }
        if (rc != 0) {
            // The first WR not posted: index `bad` of this chunk (or the one that failed
            // conversion).
            ibv_send_wr* b = head;
            for (std::uint32_t i = 0; i < bad && b; ++i)
                b = b->next;
            if (bad_wr) *bad_wr = b;
            break;
        }
        head = w;
    }
    qp->sq_lock.unlock();
    return rc;
}

/**
 * ibv_post_recv (context op): posts the chain @p wr in order. Any thread (per-QP spinlock).
 * @return 0; EINVAL (QP in RESET, too many SGEs); ENOMEM (receive queue full). *bad_wr = the first
 *         WR not posted.
 */
int post_recv(ibv_qp* ibqp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
    VQp* qp = from_ibv<VQp>(ibqp);
    int rc = 0;
    rc::RecvWqe r;
    qp->rq_lock.lock();
    for (; wr; wr = wr->next) {
        if ((rc = recv_wqe_from(*wr, r)) != 0) break;
        std::uint32_t bad = 0;
        if ((rc = qp->ctx->dev->post_recv(qp->native, &r, 1, &bad)) != 0) break;
    }
    if (rc != 0 && bad_wr) *bad_wr = wr;
    qp->rq_lock.unlock();
    return rc;
}

// ---------------------------------------------------------------- ibv_wr_* (ibv_qp_ex)

VQp* qx(ibv_qp_ex* q) noexcept {
    return from_ibv<VQp>(q);
}

/** The WQE being built: a new slot of the batch (or the spare slot past the end once it is full).
 */
rc::SendWqe& wr_new(ibv_qp_ex* q, rc::WrOpcode op) noexcept {
    VQp* qp = qx(q);
    rc::SendWqe* w;
    if (qp->batch_n < qp->batch_cap) {
        w = &qp->batch[qp->batch_n++];
    } else {
        if (qp->batch_err == 0) qp->batch_err = ENOMEM;
        w = &qp->batch[qp->batch_cap]; // spare slot: keeps the calls harmless until wr_complete
    }
    w->wr_id = q->wr_id;
    w->opcode = op;
    w->send_flags = q->wr_flags & (IBV_SEND_FENCE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED);
    w->imm_data = 0;
    w->invalidate_rkey = 0;
    w->remote_addr = 0;
    w->rkey = 0;
    w->compare_add = 0;
    w->swap = 0;
    w->num_sge = 0;
    w->length = 0;
    return *w;
}
rc::SendWqe* wr_cur(ibv_qp_ex* q) noexcept {
    VQp* qp = qx(q);
    if (qp->batch_n == 0) {
        if (qp->batch_err == 0) qp->batch_err = EINVAL; // a setter without a WR
        return &qp->batch[qp->batch_cap];
    }
    return qp->batch_err == ENOMEM ? &qp->batch[qp->batch_cap] : &qp->batch[qp->batch_n - 1];
}
void wr_unsupported(ibv_qp_ex* q) noexcept {
    VQp* qp = qx(q);
    if (qp->batch_err == 0) qp->batch_err = EOPNOTSUPP;
}

/**
 * ibv_wr_start: opens a batch and holds the QP's send lock until ibv_wr_complete / ibv_wr_abort
 * (so one thread builds a batch at a time). WRs are built in the QP's batch (max_send_wr entries).
 */
void wr_start(ibv_qp_ex* q) {
    VQp* qp = qx(q);
    qp->sq_lock.lock();
    qp->batch_n = 0;
    qp->batch_err = 0;
}
/**
 * ibv_wr_complete: posts the batch and releases the send lock. @return 0; the first error a builder
 * recorded (EOPNOTSUPP: an unsupported ibv_wr_* such as local_inv or bind_mw; EINVAL: a setter
 * without a WR, too many SGEs, inline data above 256 bytes; ENOMEM: more WRs than max_send_wr) and
 * then nothing is posted; or post_send's errors for the batch (WRs before the bad one are posted).
 */
int wr_complete(ibv_qp_ex* q) {
    VQp* qp = qx(q);
    int rc = qp->batch_err;
    if (rc == 0 && qp->batch_n > 0) {
        std::uint32_t bad = 0;
        rc = qp->ctx->dev->post_send(qp->native, qp->batch.get(), qp->batch_n, &bad,
                                     qp->ctx->drive_passes);
    }
    qp->batch_n = 0;
    qp->sq_lock.unlock();
    return rc;
}
void wr_abort(ibv_qp_ex* q) {
    VQp* qp = qx(q);
    qp->batch_n = 0;
    qp->sq_lock.unlock();
}
void wr_rdma_write(ibv_qp_ex* q, uint32_t rkey, uint64_t remote_addr) {
    rc::SendWqe& w = wr_new(q, rc::WrOpcode::rdma_write);
    w.rkey = rkey;
    w.remote_addr = remote_addr;
}
void wr_rdma_write_imm(ibv_qp_ex* q, uint32_t rkey, uint64_t remote_addr, __be32 imm) {
    rc::SendWqe& w = wr_new(q, rc::WrOpcode::rdma_write_with_imm);
    w.rkey = rkey;
    w.remote_addr = remote_addr;
    w.imm_data = be32toh(imm);
}
void wr_rdma_read(ibv_qp_ex* q, uint32_t rkey, uint64_t remote_addr) {
    rc::SendWqe& w = wr_new(q, rc::WrOpcode::rdma_read);
    w.rkey = rkey;
    w.remote_addr = remote_addr;
}
void wr_send(ibv_qp_ex* q) {
    wr_new(q, rc::WrOpcode::send);
}
void wr_send_imm(ibv_qp_ex* q, __be32 imm) {
    wr_new(q, rc::WrOpcode::send_with_imm).imm_data = be32toh(imm);
}
void wr_send_inv(ibv_qp_ex* q, uint32_t rkey) {
    wr_new(q, rc::WrOpcode::send_with_inv).invalidate_rkey = rkey;
}
void wr_atomic_cmp_swp(ibv_qp_ex* q, uint32_t rkey, uint64_t remote_addr, uint64_t compare,
                       uint64_t swap) {
    rc::SendWqe& w = wr_new(q, rc::WrOpcode::atomic_cmp_and_swp);
    w.rkey = rkey;
    w.remote_addr = remote_addr;
    w.compare_add = compare;
    w.swap = swap;
}
void wr_atomic_fetch_add(ibv_qp_ex* q, uint32_t rkey, uint64_t remote_addr, uint64_t add) {
    rc::SendWqe& w = wr_new(q, rc::WrOpcode::atomic_fetch_and_add);
    w.rkey = rkey;
    w.remote_addr = remote_addr;
    w.compare_add = add;
}
void wr_set_sge(ibv_qp_ex* q, uint32_t lkey, uint64_t addr, uint32_t length) {
    rc::SendWqe* w = wr_cur(q);
    w->send_flags &= ~static_cast<std::uint32_t>(rc::kSendInline);
    w->num_sge = 1;
    w->sg_list[0] = rc::Sge{addr, length, lkey};
    w->length = length;
}
void wr_set_sge_list(ibv_qp_ex* q, size_t num_sge, const ibv_sge* sg) {
    rc::SendWqe* w = wr_cur(q);
    if (num_sge > rc::kMaxSge || (num_sge && !sg)) {
        VQp* qp = qx(q);
        if (qp->batch_err == 0) qp->batch_err = EINVAL;
        return;
    }
    w->send_flags &= ~static_cast<std::uint32_t>(rc::kSendInline);
    w->num_sge = static_cast<std::uint32_t>(num_sge);
    std::uint32_t len = 0;
    for (size_t i = 0; i < num_sge; ++i) {
        w->sg_list[i] = rc::Sge{sg[i].addr, sg[i].length, sg[i].lkey};
        len += sg[i].length;
    }
    w->length = len;
}
void wr_set_inline_data_list(ibv_qp_ex* q, size_t num_buf, const ibv_data_buf* bufs) {
    rc::SendWqe* w = wr_cur(q);
    std::size_t len = 0;
    for (size_t i = 0; i < num_buf; ++i) {
        if (bufs[i].length > rc::kMaxInlineData - len) {
            VQp* qp = qx(q);
            if (qp->batch_err == 0) qp->batch_err = EINVAL;
            return;
        }
        std::memcpy(w->inline_data + len, bufs[i].addr, bufs[i].length);
        len += bufs[i].length;
    }
    w->send_flags |= rc::kSendInline;
    w->num_sge = 0;
    w->length = static_cast<std::uint32_t>(len);
}
void wr_set_inline_data(ibv_qp_ex* q, void* addr, size_t length) {
    ibv_data_buf b{addr, length};
    wr_set_inline_data_list(q, 1, &b);
}
// Not supported on droce: the batch fails with EOPNOTSUPP at wr_complete.
void wr_bind_mw(ibv_qp_ex* q, ibv_mw*, uint32_t, const ibv_mw_bind_info*) {
    wr_unsupported(q);
}
void wr_local_inv(ibv_qp_ex* q, uint32_t) {
    wr_unsupported(q);
}
void wr_send_tso(ibv_qp_ex* q, void*, uint16_t, uint16_t) {
    wr_unsupported(q);
}
void wr_set_ud_addr(ibv_qp_ex* q, ibv_ah*, uint32_t, uint32_t) {
    wr_unsupported(q);
}
void wr_set_xrc_srqn(ibv_qp_ex* q, uint32_t) {
    wr_unsupported(q);
}
void wr_atomic_write(ibv_qp_ex* q, uint32_t, uint64_t, const void*) {
    wr_unsupported(q);
}

/**
 * Removes the completions of QP @p qpn from @p cq, keeping the others in order (what a hardware
 * provider does when a QP goes to RESET or is destroyed: its CQEs must not be polled afterwards).
 * Control path, engines stopped (ControlGuard): this thread is then the ring's only producer.
 */
void purge_cq(ibv_cq* ibcq, std::uint32_t qpn) {
    VCq* cq = from_ibv<VCq>(ibcq);
    rc::Cq& c = *cq->native;
    cq->lock.lock();
    std::vector<rc::Cqe> keep;
    const std::uint32_t n = c.ring.ready();
    for (std::uint32_t i = 0; i < n; ++i) {
        const rc::Cqe& e = c.ring.slot(c.ring.consumer_index() + i);
        if (e.qp_num != qpn) keep.push_back(e);
    }
    c.ring.release(n);
    for (const rc::Cqe& e : keep) {
        c.ring.producer_slot() = e;
        c.ring.publish();
    }
    cq->lock.unlock();
}

void purge_cqs(ibv_qp* qp) {
    purge_cq(qp->send_cq, qp->qp_num);
    if (qp->recv_cq != qp->send_cq) purge_cq(qp->recv_cq, qp->qp_num);
}

constexpr std::uint64_t kSupportedSendOps =
    IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND |
    IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
    IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_SEND_WITH_INV;

// ---------------------------------------------------------------- create

ibv_qp* create_qp_common(ibv_context* context, ibv_pd* pd, ibv_qp_init_attr_ex* a) {
    g_qp_attempted.store(true, std::memory_order_relaxed);
    if (!pd || !a->send_cq || !a->recv_cq) return fail<ibv_qp>(EINVAL);
    if (a->qp_type != IBV_QPT_RC) { // UC, UD, XRC, raw: not on droce
        switch (a->qp_type) {
        case IBV_QPT_UD:
            DROCE_UNSUPPORTED("ibv_create_qp of a UD QP (IBV_QPT_UD)");
            break;
        case IBV_QPT_UC:
            DROCE_UNSUPPORTED("ibv_create_qp of a UC QP (IBV_QPT_UC)");
            break;
        case IBV_QPT_RAW_PACKET:
            DROCE_UNSUPPORTED("ibv_create_qp of a raw packet QP (IBV_QPT_RAW_PACKET)");
            break;
        default:
            DROCE_UNSUPPORTED("ibv_create_qp of an XRC or driver QP (only IBV_QPT_RC)");
            break;
        }
        return fail<ibv_qp>(EOPNOTSUPP);
    }
    if (a->srq) {
        DROCE_UNSUPPORTED("ibv_create_qp with an SRQ");
        return fail<ibv_qp>(EOPNOTSUPP);
    }
    if (pd->context != context || a->send_cq->context != context || a->recv_cq->context != context)
        return fail<ibv_qp>(EINVAL);
    VContext* c = vctx_of(context);
    auto* qp = new (std::nothrow) VQp;
    if (!qp) return fail<ibv_qp>(ENOMEM);
    rc::QpCap cap;
    cap.max_send_wr = a->cap.max_send_wr;
    cap.max_recv_wr = a->cap.max_recv_wr;
    cap.max_send_sge = a->cap.max_send_sge;
    cap.max_recv_sge = a->cap.max_recv_sge;
    cap.max_inline_data = a->cap.max_inline_data;
    int err = 0;
    {
        ControlGuard guard(c->dev);
        qp->native =
            c->dev->create_qp(from_ibv<VPd>(pd)->native, from_ibv<VCq>(a->send_cq)->native,
                              from_ibv<VCq>(a->recv_cq)->native, cap, a->sq_sig_all != 0, &err);
    }
    if (!qp->native) {
        delete qp;
        return fail<ibv_qp>(err);
    }
    qp->ctx = c;
    qp->scratch.reset(new (std::nothrow) rc::SendWqe[VQp::kScratch]);
    qp->batch_cap = qp->native->cap.max_send_wr;
    qp->batch.reset(new (std::nothrow) rc::SendWqe[qp->batch_cap + 1]);
    if (!qp->scratch || !qp->batch) {
        ControlGuard guard(c->dev);
        c->dev->destroy_qp(qp->native);
        delete qp;
        return fail<ibv_qp>(ENOMEM);
    }
    {
        ControlGuard guard(c->dev);
        try {
            c->vdev->qps[qp->native->qpn] = &qp->qpx.qp_base;
        } catch (...) {
            c->dev->destroy_qp(qp->native);
            delete qp;
            return fail<ibv_qp>(ENOMEM);
        }
    }
    a->cap.max_send_wr = qp->native->cap.max_send_wr;
    a->cap.max_recv_wr = qp->native->cap.max_recv_wr;
    a->cap.max_send_sge = qp->native->cap.max_send_sge;
    a->cap.max_recv_sge = qp->native->cap.max_recv_sge;
    a->cap.max_inline_data = qp->native->cap.max_inline_data;
    ibv_qp& b = qp->qpx.qp_base;
    b.context = context;
    b.qp_context = a->qp_context;
    b.pd = pd;
    b.send_cq = a->send_cq;
    b.recv_cq = a->recv_cq;
    b.srq = nullptr;
    b.handle = qp->native->qpn;
    b.qp_num = qp->native->qpn;
    b.state = IBV_QPS_RESET;
    b.qp_type = IBV_QPT_RC;
    pthread_mutex_init(&b.mutex, nullptr);
    pthread_cond_init(&b.cond, nullptr);
    b.events_completed = 0;
    ibv_qp_ex& x = qp->qpx;
    x.comp_mask = 0;
    x.wr_atomic_cmp_swp = wr_atomic_cmp_swp;
    x.wr_atomic_fetch_add = wr_atomic_fetch_add;
    x.wr_bind_mw = wr_bind_mw;
    x.wr_local_inv = wr_local_inv;
    x.wr_rdma_read = wr_rdma_read;
    x.wr_rdma_write = wr_rdma_write;
    x.wr_rdma_write_imm = wr_rdma_write_imm;
    x.wr_send = wr_send;
    x.wr_send_imm = wr_send_imm;
    x.wr_send_inv = wr_send_inv;
    x.wr_send_tso = wr_send_tso;
    x.wr_set_ud_addr = wr_set_ud_addr;
    x.wr_set_xrc_srqn = wr_set_xrc_srqn;
    x.wr_set_inline_data = wr_set_inline_data;
    x.wr_set_inline_data_list = wr_set_inline_data_list;
    x.wr_set_sge = wr_set_sge;
    x.wr_set_sge_list = wr_set_sge_list;
    x.wr_start = wr_start;
    x.wr_complete = wr_complete;
    x.wr_abort = wr_abort;
    x.wr_atomic_write = wr_atomic_write;
    return &b;
}

/**
 * A path MTU larger than the port carries is refused with EINVAL (Device::modify_qp), and the
 * program says only "Failed to modify QP": says why on stderr (@p why, from
 * Device::path_mtu_refusal), once per process. Control path.
 */
void tell_path_mtu(const char* verb, const std::string& why) noexcept {
    static std::atomic<bool> told{false};
    if (!why.empty()) (void)say_once(told, "%s: %s", verb, why.c_str());
}

/**
 * An address without a GRH (is_global = 0) is refused with EINVAL, as by a ConnectX or rxe RoCE
 * port; the programs that pass one print only "Failed to modify QP to RTR". Says why on stderr,
 * once per process. @p verb: the call that refused it. Control path.
 */
void tell_no_grh(const char* verb) noexcept {
    static std::atomic<bool> told{false};
    (void)say_once(told,
                   "%s: an address without a GRH (ah_attr.is_global = 0) is refused with EINVAL: "
                   "RoCE reaches a peer by its GID, as on a ConnectX or rxe port. Give the GID "
                   "index (ibv_rc_pingpong -g 0, perftest -x 0); qperf's RDMA tests give none and "
                   "run on RoCE only with -cm1 (rdma_cm, which droce does not have)",
                   verb);
}

ibv_qp* create_qp_ex(ibv_context* context, ibv_qp_init_attr_ex* a) {
    if (!context || !a) return fail<ibv_qp>(EINVAL);
    const std::uint32_t known =
        IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS | IBV_QP_INIT_ATTR_CREATE_FLAGS;
    if (a->comp_mask & ~known) return fail<ibv_qp>(EOPNOTSUPP); // XRCD, TSO, RSS: not on droce
    if (!(a->comp_mask & IBV_QP_INIT_ATTR_PD)) return fail<ibv_qp>(EINVAL);
    if ((a->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && a->create_flags)
        return fail<ibv_qp>(EOPNOTSUPP);
    if ((a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) &&
        (a->send_ops_flags & ~kSupportedSendOps))
        return fail<ibv_qp>(EOPNOTSUPP);
    return create_qp_common(context, a->pd, a);
}

} // namespace

void install_qp_ops(VContext& c) noexcept {
    c.vctx.context.ops.post_send = post_send;
    c.vctx.context.ops.post_recv = post_recv;
    c.vctx.create_qp_ex = create_qp_ex;
    // Verbs that verbs.h dispatches inline: with no op it returns EOPNOTSUPP without a word, so
    // these ops exist only to say what is not supported (README: Unsupported).
    c.vctx.context.ops.alloc_mw = [](ibv_pd*, ibv_mw_type) -> ibv_mw* {
        DROCE_UNSUPPORTED("ibv_alloc_mw (memory windows)");
        return fail<ibv_mw>(EOPNOTSUPP);
    };
    c.vctx.create_srq_ex = [](ibv_context*, ibv_srq_init_attr_ex*) -> ibv_srq* {
        DROCE_UNSUPPORTED("ibv_create_srq_ex");
        return fail<ibv_srq>(EOPNOTSUPP);
    };
    c.vctx.open_xrcd = [](ibv_context*, ibv_xrcd_init_attr*) -> ibv_xrcd* {
        DROCE_UNSUPPORTED("ibv_open_xrcd (XRC)");
        return fail<ibv_xrcd>(EOPNOTSUPP);
    };
    c.vctx.open_qp = [](ibv_context*, ibv_qp_open_attr*) -> ibv_qp* {
        DROCE_UNSUPPORTED("ibv_open_qp");
        return fail<ibv_qp>(EOPNOTSUPP);
    };
    c.vctx.alloc_dm = [](ibv_context*, ibv_alloc_dm_attr*) -> ibv_dm* {
        DROCE_UNSUPPORTED("ibv_alloc_dm (device memory)");
        return fail<ibv_dm>(EOPNOTSUPP);
    };
    c.vctx.create_wq = [](ibv_context*, ibv_wq_init_attr*) -> ibv_wq* {
        DROCE_UNSUPPORTED("ibv_create_wq");
        return fail<ibv_wq>(EOPNOTSUPP);
    };
}

} // namespace droce::verbs

using namespace droce;
using namespace droce::verbs;

// ---------------------------------------------------------------- PD

/** @return a PD, or NULL with errno EINVAL / ENOMEM. */
extern "C" ibv_pd* ibv_alloc_pd(ibv_context* context) {
    if (!context) return fail<ibv_pd>(EINVAL);
    VContext* c = vctx_of(context);
    auto* pd = new (std::nothrow) VPd;
    if (!pd) return fail<ibv_pd>(ENOMEM);
    int err = 0;
    {
        ControlGuard guard(c->dev);
        pd->native = c->dev->alloc_pd(&err);
    }
    if (!pd->native) {
        delete pd;
        return fail<ibv_pd>(err);
    }
    pd->pd.context = context;
    pd->pd.handle = pd->native->handle;
    return &pd->pd;
}

/** @return 0, EINVAL (NULL), EBUSY (MRs or QPs still use it). */
extern "C" int ibv_dealloc_pd(ibv_pd* ibpd) {
    if (!ibpd) return EINVAL;
    VPd* pd = from_ibv<VPd>(ibpd);
    {
        ControlGuard guard(vctx_of(ibpd->context)->dev);
        if (int e = vctx_of(ibpd->context)->dev->dealloc_pd(pd->native); e != 0) return e;
    }
    delete pd;
    return 0;
}

// ---------------------------------------------------------------- MR

namespace {
ibv_mr* reg_mr_common(ibv_pd* ibpd, void* addr, size_t length, uint64_t iova, unsigned access) {
    if (!ibpd) return fail<ibv_mr>(EINVAL);
    // droce names registered memory by its virtual address: an iova other than addr is not
    // supported.
    if (iova != reinterpret_cast<std::uintptr_t>(addr)) {
        DROCE_UNSUPPORTED("ibv_reg_mr_iova with an iova other than the address");
        return fail<ibv_mr>(EOPNOTSUPP);
    }
    if (access & IBV_ACCESS_ON_DEMAND) {
        DROCE_UNSUPPORTED("on-demand paging (IBV_ACCESS_ON_DEMAND)");
        return fail<ibv_mr>(EOPNOTSUPP);
    }
    VPd* pd = from_ibv<VPd>(ibpd);
    auto* mr = new (std::nothrow) VMr;
    if (!mr) return fail<ibv_mr>(ENOMEM);
    int err = 0;
    {
        ControlGuard guard(vctx_of(ibpd->context)->dev);
        mr->native = vctx_of(ibpd->context)->dev->reg_mr(pd->native, addr, length, access, &err);
    }
    if (!mr->native) {
        delete mr;
        return fail<ibv_mr>(err);
    }
    mr->access = access;
    mr->mr.context = ibpd->context;
    mr->mr.pd = ibpd;
    mr->mr.addr = addr;
    mr->mr.length = length;
    mr->mr.handle = mr->native->lkey;
    mr->mr.lkey = mr->native->lkey;
    mr->mr.rkey = mr->native->rkey;
    return &mr->mr;
}
} // namespace

#undef ibv_reg_mr
#undef ibv_reg_mr_iova
/**
 * Registers @p length bytes at @p addr. IBV_ACCESS_RELAXED_ORDERING (and the other optional-range
 * bits) are accepted and ignored. @return the MR, or NULL with errno EINVAL (bad PD, flags: remote
 * write or atomic without local write, range), EFAULT (a page of the range not mapped, not
 * readable, or read-only with local write asked: a kernel provider's pinning fails the same way),
 * ENOMEM (4096 MRs), EOPNOTSUPP (ON_DEMAND).
 */
extern "C" ibv_mr* ibv_reg_mr(ibv_pd* pd, void* addr, size_t length, int access) {
    return reg_mr_common(pd, addr, length, reinterpret_cast<std::uintptr_t>(addr),
                         static_cast<unsigned>(access));
}
/** As ibv_reg_mr; @p iova must equal @p addr (else EOPNOTSUPP). */
extern "C" ibv_mr* ibv_reg_mr_iova(ibv_pd* pd, void* addr, size_t length, uint64_t iova,
                                   int access) {
    return reg_mr_common(pd, addr, length, iova, static_cast<unsigned>(access));
}
/** As ibv_reg_mr; @p iova must equal @p addr (else EOPNOTSUPP). */
extern "C" ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t length, uint64_t iova,
                                    unsigned int access) {
    return reg_mr_common(pd, addr, length, iova, access);
}

/**
 * Changes an MR's translation (@p addr, @p length), PD and / or access flags (@p flags:
 * IBV_REREG_MR_CHANGE_*), keeping its lkey and rkey (as a hardware MR keeps its key). The new
 * attributes are checked by registering them first (a scratch registration, released at once), so
 * the MR stays as it was when they are refused.
 * @return 0; IBV_REREG_MR_ERR_INPUT with errno EINVAL (bad flags, PD of another context, a new
 *         translation without an address or with length 0, access flags without
 *         IBV_REREG_MR_CHANGE_ACCESS - both as libibverbs refuses them -, range or access refused
 *         as by ibv_reg_mr), EFAULT (memory refused as by ibv_reg_mr), ENOMEM (MR
 *         table full for the scratch registration) or
 *         EOPNOTSUPP (ON_DEMAND); the MR is unchanged then.
 */
extern "C" int ibv_rereg_mr(ibv_mr* ibmr, int flags, ibv_pd* pd, void* addr, size_t length,
                            int access) {
    errno = EINVAL;
    if (!ibmr || flags <= 0 || (flags & ~IBV_REREG_MR_FLAGS_SUPPORTED))
        return IBV_REREG_MR_ERR_INPUT;
    if ((flags & IBV_REREG_MR_CHANGE_PD) && (!pd || pd->context != ibmr->context))
        return IBV_REREG_MR_ERR_INPUT;
    // As libibverbs checks before calling a provider: a new translation needs an address and a
    // length, and access flags come only with IBV_REREG_MR_CHANGE_ACCESS (else they would be
    // silently dropped).
    if ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) && (!addr || length == 0))
        return IBV_REREG_MR_ERR_INPUT;
    if (access != 0 && !(flags & IBV_REREG_MR_CHANGE_ACCESS)) return IBV_REREG_MR_ERR_INPUT;
    VMr* mr = from_ibv<VMr>(ibmr);
    ibv_pd* new_pd = (flags & IBV_REREG_MR_CHANGE_PD) ? pd : ibmr->pd;
    void* new_addr = (flags & IBV_REREG_MR_CHANGE_TRANSLATION) ? addr : ibmr->addr;
    size_t new_len = (flags & IBV_REREG_MR_CHANGE_TRANSLATION) ? length : ibmr->length;
    unsigned new_access =
        (flags & IBV_REREG_MR_CHANGE_ACCESS) ? static_cast<unsigned>(access) : mr->access;
    ibv_mr* scratch = reg_mr_common(new_pd, new_addr, new_len,
                                    reinterpret_cast<std::uintptr_t>(new_addr), new_access);
    if (!scratch) return IBV_REREG_MR_ERR_INPUT; // errno from the registration
    VMr* s = from_ibv<VMr>(scratch);
    {
        // Engine of this device quiescent: no packet sees the MR half-updated.
        ControlGuard guard(vctx_of(ibmr->context)->dev);
        mem::Mr& n = *mr->native;
        n.pd = s->native->pd;
        n.iova = s->native->iova;
        n.length = s->native->length;
        n.host = s->native->host;
        n.access = s->native->access;
        vctx_of(ibmr->context)->dev->dereg_mr(s->native);
    }
    mr->access = new_access;
    ibmr->pd = new_pd;
    ibmr->addr = new_addr;
    ibmr->length = new_len;
    delete s;
    return 0;
}

/** @return 0 or EINVAL. */
extern "C" int ibv_dereg_mr(ibv_mr* ibmr) {
    if (!ibmr) return EINVAL;
    VMr* mr = from_ibv<VMr>(ibmr);
    {
        ControlGuard guard(vctx_of(ibmr->context)->dev);
        if (int e = vctx_of(ibmr->context)->dev->dereg_mr(mr->native); e != 0) return e;
    }
    delete mr;
    return 0;
}

// ---------------------------------------------------------------- QP

/**
 * Creates an RC QP. @return the QP (in RESET), or NULL with errno EINVAL (NULL PD/CQ, objects of
 * another context, caps above rc/params.h), EOPNOTSUPP (not RC, SRQ), ENOMEM (1024 QPs).
 * init_attr->cap is updated with the capacities granted.
 */
extern "C" ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* init) {
    if (!pd || !init) return fail<ibv_qp>(EINVAL);
    ibv_qp_init_attr_ex a{};
    a.qp_context = init->qp_context;
    a.send_cq = init->send_cq;
    a.recv_cq = init->recv_cq;
    a.srq = init->srq;
    a.cap = init->cap;
    a.qp_type = init->qp_type;
    a.sq_sig_all = init->sq_sig_all;
    a.comp_mask = IBV_QP_INIT_ATTR_PD;
    a.pd = pd;
    ibv_qp* qp = create_qp_common(pd->context, pd, &a);
    if (qp) init->cap = a.cap;
    return qp;
}

/** The ibv_qp_ex of a QP (every droce QP has one). */
extern "C" ibv_qp_ex* ibv_qp_to_qp_ex(ibv_qp* qp) {
    return qp ? &from_ibv<VQp>(qp)->qpx : nullptr;
}

namespace {
/**
 * Whether ibv_modify_qp may take IBV_QP_RATE_LIMIT with @p attr and @p mask on @p qp (engine
 * quiescent): a rate of 0 (no limit) or within VQp::kRateLimitMinKbps .. kRateLimitMaxKbps, on
 * the RTR -> RTS or RTS -> RTS transition only (a modify without IBV_QP_STATE stays in its state),
 * where the kernel's ib_modify_qp_is_ok takes IB_QP_RATE_LIMIT for an RC QP.
 */
bool rate_limit_allowed(const rc::Qp& qp, const ibv_qp_attr& attr, std::uint32_t mask) {
    if (attr.rate_limit != 0 &&
        (attr.rate_limit < VQp::kRateLimitMinKbps || attr.rate_limit > VQp::kRateLimitMaxKbps))
        return false;
    const bool state_given = (mask & IBV_QP_STATE) != 0;
    if (state_given && attr.qp_state != IBV_QPS_RTS) return false;
    return qp.state == rc::QpState::rts || (state_given && qp.state == rc::QpState::rtr);
}
} // namespace

/**
 * ibv_modify_qp for RC (IBTA Vol 1 §11.2.4.2): see droce::Device::modify_qp. A QP that goes to
 * RESET loses its completions still in its CQs (as with a hardware provider). IBV_QP_AV needs a
 * global route (is_global = 1: RoCE addresses by GID). @return 0, EINVAL (illegal transition,
 * missing or extra attributes, values out of range), EOPNOTSUPP (alternate path). IBV_QP_RATE_LIMIT
 * (kb/s, 0 = none) paces the QP (rc/pacer.h), as mlx5's packet pacing does: EINVAL outside
 * packet_pacing_caps or on another transition than RTR -> RTS and RTS -> RTS (rate_limit_allowed).
 * IBV_QP_TIMEOUT 1 - 9 runs as VQp::kMinAckTimeout (10, 4.2 ms), as rxe's jiffy does; ibv_query_qp
 * reports the value set.
 */
extern "C" int ibv_modify_qp(ibv_qp* ibqp, ibv_qp_attr* attr, int attr_mask) {
    if (!ibqp || !attr) return EINVAL;
    const auto mask = static_cast<std::uint32_t>(attr_mask);
    // IBV_QP_RATE_LIMIT (packet pacing, as mlx5) is the only attribute past IBV_QP_DEST_QPN.
    if (mask & ~(((1u << 21) - 1u) | IBV_QP_RATE_LIMIT)) return EOPNOTSUPP;
    if (mask & IBV_QP_ALT_PATH) return EOPNOTSUPP;
    if ((mask & IBV_QP_AV) && !attr->ah_attr.is_global) {
        tell_no_grh("ibv_modify_qp");
        return EINVAL;
    }
    VQp* qp = from_ibv<VQp>(ibqp);
    const rc::QpAttr a = to_qp_attr(*attr);
    int rc;
    {
        ControlGuard guard(qp->ctx->dev);
        // Checked before anything changes: a refused rate leaves the QP as it was.
        if ((mask & IBV_QP_RATE_LIMIT) && !rate_limit_allowed(*qp->native, *attr, mask))
            return EINVAL;
        const std::uint32_t verbs_mask = mask & ~static_cast<std::uint32_t>(IBV_QP_RATE_LIMIT);
        rc = verbs_mask != 0 || !(mask & IBV_QP_RATE_LIMIT)
                 ? qp->ctx->dev->modify_qp(qp->native, a, verbs_mask)
                 : 0;
        // ibv_qp_attr.rate_limit is in kb/s; 0 removes the limit.
        if (rc == 0 && (mask & IBV_QP_RATE_LIMIT))
            rc = qp->ctx->dev->set_qp_rate_limit(qp->native, attr->rate_limit / 1000.0);
        if (rc == EINVAL && (mask & IBV_QP_PATH_MTU) && attr->path_mtu >= IBV_MTU_256 &&
            attr->path_mtu <= IBV_MTU_4096)
            tell_path_mtu("ibv_modify_qp",
                          qp->ctx->dev->path_mtu_refusal(
                              (mask & IBV_QP_PORT) ? attr->port_num : qp->native->attr.port_num,
                              rc::mtu_bytes(a.path_mtu)));
        if (rc == 0 && (mask & IBV_QP_TIMEOUT))
            qp->timeout_set = attr->timeout != a.timeout ? attr->timeout : 0xff;
        if (rc == 0) ibqp->state = static_cast<ibv_qp_state>(qp->native->state);
        if (rc == 0 && qp->native->state == rc::QpState::reset) purge_cqs(ibqp);
    }
    return rc;
}

/** @return 0 with *attr and *init_attr filled (every field, whatever @p attr_mask), or EINVAL. */
extern "C" int ibv_query_qp(ibv_qp* ibqp, ibv_qp_attr* attr, int attr_mask,
                            ibv_qp_init_attr* init_attr) {
    (void)attr_mask;
    if (!ibqp || !attr || !init_attr) return EINVAL;
    VQp* qp = from_ibv<VQp>(ibqp);
    {
        ControlGuard guard(qp->ctx->dev);
        from_qp_attr(*qp->native, *attr);
        if (qp->timeout_set != 0xff) attr->timeout = qp->timeout_set;
    }
    std::memset(init_attr, 0, sizeof *init_attr);
    init_attr->qp_context = ibqp->qp_context;
    init_attr->send_cq = ibqp->send_cq;
    init_attr->recv_cq = ibqp->recv_cq;
    init_attr->srq = nullptr;
    init_attr->cap = attr->cap;
    init_attr->qp_type = IBV_QPT_RC;
    init_attr->sq_sig_all = qp->native->sq_sig_all ? 1 : 0;
    ibqp->state = attr->qp_state;
    return 0;
}

/** @return 0 or EINVAL. Outstanding WQEs are dropped without completions, and the QP's completions
 *  still in its CQs are removed. */
extern "C" int ibv_destroy_qp(ibv_qp* ibqp) {
    if (!ibqp) return EINVAL;
    VQp* qp = from_ibv<VQp>(ibqp);
    {
        ControlGuard guard(qp->ctx->dev);
        const std::uint32_t qpn = qp->native->qpn;
        if (int e = qp->ctx->dev->destroy_qp(qp->native); e != 0) return e;
        qp->ctx->vdev->qps.erase(qpn);
        purge_cqs(ibqp);
    }
    pthread_mutex_destroy(&ibqp->mutex);
    pthread_cond_destroy(&ibqp->cond);
    delete qp;
    return 0;
}

// ---------------------------------------------------------------- AH

/**
 * An address handle (droce has no UD QPs, so it only records the attributes). @return the AH, or
 * NULL with errno EINVAL (bad port, no GRH: RoCE needs is_global) or ENOMEM.
 */
extern "C" ibv_ah* ibv_create_ah(ibv_pd* pd, ibv_ah_attr* attr) {
    if (!pd || !attr) return fail<ibv_ah>(EINVAL);
    VContext* c = vctx_of(pd->context);
    if (attr->port_num < 1 || attr->port_num > c->dev->num_ports()) return fail<ibv_ah>(EINVAL);
    if (!attr->is_global) {
        tell_no_grh("ibv_create_ah");
        return fail<ibv_ah>(EINVAL);
    }
    auto* ah = new (std::nothrow) VAh;
    if (!ah) return fail<ibv_ah>(ENOMEM);
    ah->ah.context = pd->context;
    ah->ah.pd = pd;
    ah->ah.handle = 0;
    ah->attr = *attr;
    return &ah->ah;
}

/** @return 0 or EINVAL. */
extern "C" int ibv_destroy_ah(ibv_ah* ah) {
    if (!ah) return EINVAL;
    delete from_ibv<VAh>(ah);
    return 0;
}
