/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * RC QP modify rules: which state transitions are legal, which attributes each requires and allows,
 * the range of every value, and what a transition does to the transport state (IBTA Vol 1
 * §11.2.4.2, §10.3.1 QP state diagram; ibv_modify_qp(3); Linux ib_modify_qp_is_ok()).
 */
#include <cerrno>

#include "pacer.h"
#include "qp.h"

namespace droce::rc {

namespace {

struct TransitionRule {
    bool legal = false;
    std::uint32_t required = 0;
    std::uint32_t optional = 0;
};

/**
 * Required and optional attributes of each RC state transition, as ibv_modify_qp(3) and the
 * kernel's ib_modify_qp_is_ok() define them (IBTA Vol 1 §11.2.4.2 / table 91 "QP state
 * transition").
 */
TransitionRule rc_transition(QpState from, QpState to) noexcept {
    constexpr std::uint32_t kAlways = kQpState | kQpCurState;
    if (to == QpState::reset || to == QpState::err) return {true, kQpState, kQpCurState};
    switch (from) {
    case QpState::reset:
        if (to == QpState::init)
            return {true, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags, 0};
        break;
    case QpState::init:
        if (to == QpState::init)
            return {true, 0, kAlways | kQpPkeyIndex | kQpPort | kQpAccessFlags};
        if (to == QpState::rtr)
            return {true,
                    kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn | kQpMaxDestRdAtomic |
                        kQpMinRnrTimer,
                    kQpCurState | kQpAltPath | kQpAccessFlags | kQpPkeyIndex};
        break;
    case QpState::rtr:
        if (to == QpState::rts)
            return {true,
                    kQpState | kQpSqPsn | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxQpRdAtomic,
                    kQpCurState | kQpAltPath | kQpAccessFlags | kQpMinRnrTimer | kQpPathMigState};
        break;
    case QpState::rts:
        if (to == QpState::rts)
            return {true, 0,
                    kAlways | kQpAccessFlags | kQpAltPath | kQpPathMigState | kQpMinRnrTimer};
        if (to == QpState::sqd) return {true, kQpState, kQpCurState | kQpEnSqdAsyncNotify};
        break;
    case QpState::sqd:
        if (to == QpState::rts)
            return {true, kQpState,
                    kQpCurState | kQpAccessFlags | kQpAltPath | kQpPathMigState | kQpMinRnrTimer};
        if (to == QpState::sqd)
            return {true, 0,
                    kAlways | kQpAv | kQpPathMtu | kQpTimeout | kQpRetryCnt | kQpRnrRetry |
                        kQpMaxQpRdAtomic | kQpMaxDestRdAtomic | kQpAccessFlags | kQpMinRnrTimer |
                        kQpPkeyIndex | kQpPort | kQpAltPath | kQpPathMigState};
        break;
    case QpState::sqe:
        if (to == QpState::rts) return {true, kQpState, kQpCurState | kQpAccessFlags};
        break;
    case QpState::err:
        break;
    }
    return {};
}
} // namespace

bool make_sq(Qp& qp, std::uint32_t depth) noexcept {
    // Both made before either is swapped in: no slot of qp.sq is ever without its SqWqeExt.
    SpscRing<SqWqe> ring(depth, std::nothrow);
    if (ring.capacity() == 0) return false;
    std::unique_ptr<SqWqeExt[]> ext(new (std::nothrow) SqWqeExt[ring.capacity()]);
    if (!ext) return false;
    qp.sq = std::move(ring);
    qp.sq_ext = std::move(ext);
    return true;
}

int qp_alloc_queues(Qp& qp) noexcept {
    SpscRing<RecvWqe> rq(qp.cap.max_recv_wr, std::nothrow);
    if (rq.capacity() == 0 || !make_sq(qp, qp.cap.max_send_wr)) return ENOMEM;
    qp.rq = std::move(rq);
    return 0;
}

void qp_reset(Qp& qp) noexcept {
    // In place: a QP modified to RESET keeps its rings (no allocation that could fail here).
    qp.sq.clear();
    qp.rq.clear();
    qp.req = RequesterState{};
    qp.comp = CompleterState{};
    qp.resp = ResponderState{};
    // DCQCN's profile, the line rate and the rate limit are the QP's settings, not its state.
    const Pacer keep = qp.pacer;
    qp.pacer = Pacer{};
    qp.pacer.dcqcn = keep.dcqcn;
    qp.pacer.line_rate_mbps = keep.line_rate_mbps;
    qp.pacer.rate_limit_mbps = keep.rate_limit_mbps;
    pacer_reset(qp);
    qp.state = QpState::reset;
    qp.attr.qp_state = QpState::reset;
}

int qp_modify(Qp* qp, const QpAttr& attr, std::uint32_t mask,
              std::span<const std::uint32_t> port_mtu, TransportCtx& ctx) noexcept {
    const QpState cur = qp->state;
    if ((mask & kQpCurState) && attr.cur_qp_state != cur) return EINVAL;
    const QpState next = (mask & kQpState) ? attr.qp_state : cur;
    if (static_cast<unsigned>(next) > static_cast<unsigned>(QpState::err)) return EINVAL;
    const TransitionRule rule = rc_transition(cur, next);
    if (!rule.legal) return EINVAL;
    if ((mask & rule.required) != rule.required) return EINVAL;
    if (mask & ~(rule.required | rule.optional)) return EINVAL;

    // Range checks before anything changes.
    if ((mask & kQpPort) && (attr.port_num < 1 || attr.port_num > port_mtu.size())) return EINVAL;
    const unsigned port_num = (mask & kQpPort) ? attr.port_num : qp->attr.port_num;
    if ((mask & kQpPathMtu) && (attr.path_mtu < Mtu::mtu256 || attr.path_mtu > Mtu::mtu4096 ||
                                mtu_bytes(attr.path_mtu) > port_mtu[port_num - 1u]))
        return EINVAL;
    if ((mask & kQpTimeout) && attr.timeout > 31) return EINVAL;
    if ((mask & kQpRetryCnt) && attr.retry_cnt > 7) return EINVAL;
    if ((mask & kQpRnrRetry) && attr.rnr_retry > 7) return EINVAL;
    if ((mask & kQpMinRnrTimer) && attr.min_rnr_timer > 31) return EINVAL;
    if ((mask & kQpMaxQpRdAtomic) && attr.max_rd_atomic > kMaxRdAtomic) return EINVAL;
    if ((mask & kQpMaxDestRdAtomic) && attr.max_dest_rd_atomic > kMaxRdAtomic) return EINVAL;
    if ((mask & kQpDestQpn) && attr.dest_qp_num > 0xffffff) return EINVAL;
    if ((mask & kQpAccessFlags) &&
        (attr.qp_access_flags & ~(kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead |
                                  kAccessRemoteAtomic | kAccessMwBind | kAccessRelaxedOrdering)))
        return EINVAL;
    if ((mask & kQpPkeyIndex) && attr.pkey_index != 0)
        return EINVAL; // one P_Key: 0xFFFF at index 0
    if ((mask & kQpAv) && (attr.ah_attr.port_num != 0 && attr.ah_attr.port_num > port_mtu.size()))
        return EINVAL;
    if ((mask & kQpAv) && attr.ah_attr.sgid_index != 0)
        return EINVAL; // one GID per port (gid_tbl_len 1): the port's own address

    QpAttr& a = qp->attr;
    if (mask & kQpAccessFlags) a.qp_access_flags = attr.qp_access_flags;
    if (mask & kQpPkeyIndex) a.pkey_index = attr.pkey_index;
    if (mask & kQpPort) a.port_num = attr.port_num;
    if (mask & kQpAv) a.ah_attr = attr.ah_attr;
    if (mask & kQpPathMtu) {
        a.path_mtu = attr.path_mtu;
        qp->mtu = mtu_bytes(attr.path_mtu);
    }
    if (mask & kQpDestQpn) a.dest_qp_num = attr.dest_qp_num;
    if (mask & kQpRqPsn) {
        a.rq_psn = attr.rq_psn & 0xffffff;
        qp->resp.expected_psn = Psn(a.rq_psn);
    }
    if (mask & kQpMaxDestRdAtomic) a.max_dest_rd_atomic = attr.max_dest_rd_atomic;
    if (mask & kQpMinRnrTimer) a.min_rnr_timer = attr.min_rnr_timer;
    if (mask & kQpSqPsn) {
        a.sq_psn = attr.sq_psn & 0xffffff;
        qp->req.next_psn = Psn(a.sq_psn);
        qp->comp.oldest_unacked = Psn(a.sq_psn);
    }
    if (mask & kQpTimeout) a.timeout = attr.timeout;
    if (mask & kQpRetryCnt) {
        a.retry_cnt = attr.retry_cnt;
        qp->req.retry_left = attr.retry_cnt;
    }
    if (mask & kQpRnrRetry) {
        a.rnr_retry = attr.rnr_retry;
        qp->req.rnr_retry_left = attr.rnr_retry;
    }
    if (mask & kQpMaxQpRdAtomic) a.max_rd_atomic = attr.max_rd_atomic;
    if (mask & kQpEnSqdAsyncNotify) a.sq_draining = true;

    if (next == QpState::reset) {
        qp_reset(*qp);
        return 0;
    }
    if (next == QpState::err && cur != QpState::err) {
        qp_enter_error(*qp, ctx);
        return 0;
    }
    qp->state = next;
    a.qp_state = next;
    return 0;
}

} // namespace droce::rc
