/* SPDX-License-Identifier: BSD-3-Clause */
#include "device.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "wire/udp_sport.h"

namespace droce {

using rc::QpState;

bool gid_is_ipv4(const wire::Ipv6Addr& gid) noexcept {
    static constexpr std::uint8_t kPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return std::memcmp(gid.data(), kPrefix, sizeof kPrefix) == 0;
}

wire::Ipv6Addr gid_from_ipv4(std::uint8_t a, std::uint8_t b, std::uint8_t c, std::uint8_t d) noexcept {
    return {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, a, b, c, d};
}

Device::Device(std::string name, Clock& clock, std::vector<PortSpec> ports)
    : name_(std::move(name)), clock_(&clock), ports_(std::move(ports)), tx_(ports_.size()),
      mrs_(rc::kMaxMr), neigh_(clock, 256), qps_(rc::kMaxQp) {
    live_qps_.reserve(rc::kMaxQp); // create_qp inserts without allocating
    for (const PortSpec& ps : ports_) {
        NeighPortAddrs addrs;
        addrs.mac = ps.mac;
        if (gid_is_ipv4(ps.gid)) addrs.ipv4 = ipv4_of_mapped(ps.gid);
        else addrs.add_ipv6(ps.gid);
        responders_.emplace_back(neigh_, addrs);
        link_was_up_.push_back(ps.driver ? ps.driver->link_up() : false);
    }
    ctx_.clock = clock_;
    ctx_.mrs = &mrs_;
    ctx_.dev_counters = &counters_;
    ctx_.emit = &Device::emit;
    ctx_.emit_ctx = this;
    ctx_.defer_acks = true; // one ACK per QP per rx burst; poll() flushes them (responder_run)
    // Copy or transmit by reference, per port, decided once here (CONVENTIONS rule 4).
    for (unsigned p = 0; p < ports_.size(); ++p) {
        zc_min_payload_.push_back(UINT32_MAX);
        set_tx_by_reference(p, rc::kTxByRefMinPayload);
    }
    doorbell_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
}

Device::~Device() {
    if (doorbell_fd_ >= 0) close(doorbell_fd_);
    for (unsigned p = 0; p < ports_.size(); ++p) {
        if (tx_[p].count) ports_[p].driver->free_bulk(tx_[p].pending.data(), tx_[p].count);
        tx_[p].count = 0;
    }
    while (loopback_.size() > 0) {
        PktBuf* buf = loopback_.bufs[loopback_.head++ % LoopbackQueue::kDepth];
        ports_[buf->port].driver->free_bulk(&buf, 1);
    }
    // TxRefs that segments still point at (a driver or a peer holds payload sent by reference): give
    // the ports a moment to release them; what stays out is left allocated rather than freed under
    // a release callback that may still run (as EthPort leaves a pool with mbufs out).
    for (auto& q : qps_)
        if (q && q->tx_refs) retired_tx_refs_.push_back({std::move(q->tx_refs), q->sq.capacity()});
    const auto all_released = [this] {
        for (auto& r : retired_tx_refs_)
            for (std::uint32_t i = 0; i < r.n; ++i)
                if (!r.refs[i].released()) return false;
        return true;
    };
    for (int round = 0; round < 100 && !all_released(); ++round) {
        for (auto& ps : ports_)
            if (ps.driver) ps.driver->tx_reclaim();
        usleep(1000);
    }
    if (!all_released())
        for (auto& r : retired_tx_refs_) (void)r.refs.release(); // leaked on purpose, see above
}

// ---------------------------------------------------------------- control path

mem::Pd* Device::alloc_pd(int* err) noexcept {
    auto pd = std::unique_ptr<mem::Pd>(new (std::nothrow) mem::Pd{next_pd_handle_++});
    if (!pd) {
        *err = ENOMEM;
        return nullptr;
    }
    pds_.push_back(std::move(pd));
    *err = 0;
    return pds_.back().get();
}

int Device::dealloc_pd(mem::Pd* pd) noexcept {
    if (!pd) return 0;
    auto it = std::find_if(pds_.begin(), pds_.end(), [&](auto& p) { return p.get() == pd; });
    if (it == pds_.end()) return EINVAL;
    for (auto& q : qps_)
        if (q && q->pd == pd) return EBUSY;
    if (mrs_.uses_pd(pd)) return EBUSY;
    pds_.erase(it);
    return 0;
}

mem::Mr* Device::reg_mr(mem::Pd* pd, void* addr, std::uint64_t length, std::uint32_t access, int* err) noexcept {
    // A PD of another device (or a freed one) is EINVAL, as a foreign handle is for ibv_reg_mr.
    if (pd && std::none_of(pds_.begin(), pds_.end(), [&](auto& p) { return p.get() == pd; })) {
        *err = EINVAL;
        return nullptr;
    }
    return mrs_.register_mr(pd, addr, length, reinterpret_cast<std::uintptr_t>(addr), access, err);
}

int Device::dereg_mr(mem::Mr* mr) noexcept { return mrs_.deregister(mr); }

rc::Cq* Device::create_cq(std::uint32_t cqe, int* err) noexcept {
    if (cqe == 0 || cqe > rc::kMaxCqe) {
        *err = EINVAL;
        return nullptr;
    }
    auto cq = std::unique_ptr<rc::Cq>(new (std::nothrow) rc::Cq);
    if (!cq) {
        *err = ENOMEM;
        return nullptr;
    }
    cq->ring = SpscRing<rc::Cqe>(cqe);
    cq->cqn = next_cqn_++;
    cqs_.push_back(std::move(cq));
    *err = 0;
    return cqs_.back().get();
}

int Device::destroy_cq(rc::Cq* cq) noexcept {
    if (!cq) return 0;
    auto it = std::find_if(cqs_.begin(), cqs_.end(), [&](auto& c) { return c.get() == cq; });
    if (it == cqs_.end()) return EINVAL;
    for (auto& q : qps_)
        if (q && (q->send_cq == cq || q->recv_cq == cq)) return EBUSY;
    cqs_.erase(it);
    return 0;
}

namespace {
void reset_qp_state(rc::Qp& qp) {
    qp.sq = SpscRing<rc::SendWqe>(qp.cap.max_send_wr);
    qp.rq = SpscRing<rc::RecvWqe>(qp.cap.max_recv_wr);
    qp.req = rc::RequesterState{};
    qp.comp = rc::CompleterState{};
    qp.resp = rc::ResponderState{};
    qp.pacer = rc::Pacer{};
    qp.state = QpState::reset;
    qp.attr.qp_state = QpState::reset;
}
} // namespace

rc::Qp* Device::create_qp(mem::Pd* pd, rc::Cq* send_cq, rc::Cq* recv_cq, const rc::QpCap& cap, bool sq_sig_all,
                          int* err) noexcept {
    if (!pd || !send_cq || !recv_cq || cap.max_send_wr == 0 || cap.max_send_wr > rc::kMaxQpWr ||
        cap.max_recv_wr > rc::kMaxQpWr || cap.max_send_sge > rc::kMaxSge || cap.max_recv_sge > rc::kMaxSge ||
        cap.max_inline_data > rc::kMaxInlineData) {
        *err = EINVAL;
        return nullptr;
    }
    // PD and CQs must be this device's: the engine would otherwise complete into another device's CQ
    // and check keys against a PD this device's MRs can never match.
    const auto mine = [](const auto& v, const void* obj) {
        return std::any_of(v.begin(), v.end(), [&](auto& o) { return o.get() == obj; });
    };
    if (!mine(pds_, pd) || !mine(cqs_, send_cq) || !mine(cqs_, recv_cq)) {
        *err = EINVAL;
        return nullptr;
    }
    auto slot = std::find_if(qps_.begin(), qps_.end(), [](auto& q) { return !q; });
    if (slot == qps_.end()) {
        *err = ENOMEM;
        return nullptr;
    }
    auto qp = std::unique_ptr<rc::Qp>(new (std::nothrow) rc::Qp);
    if (!qp) {
        *err = ENOMEM;
        return nullptr;
    }
    qp->qpn = rc::kFirstQpn + static_cast<std::uint32_t>(slot - qps_.begin());
    qp->pd = pd;
    qp->send_cq = send_cq;
    qp->recv_cq = recv_cq;
    qp->cap = cap;
    // The rings may hold at least what was asked; report the real depth back like ibv_create_qp.
    qp->cap.max_recv_wr = std::max<std::uint32_t>(cap.max_recv_wr, 1);
    qp->sq_sig_all = sq_sig_all;
    reset_qp_state(*qp);
    qp->tx_refs.reset(new (std::nothrow) TxRef[qp->sq.capacity()]);
    if (!qp->tx_refs) {
        *err = ENOMEM;
        return nullptr;
    }
    qp->cap.max_send_wr = qp->sq.capacity();
    qp->cap.max_recv_wr = qp->rq.capacity();
    rc::Qp* raw = qp.get();
    *slot = std::move(qp);
    // QPN order; never reallocates (capacity kMaxQp reserved in the constructor).
    live_qps_.insert(std::lower_bound(live_qps_.begin(), live_qps_.end(), raw,
                                      [](const rc::Qp* a, const rc::Qp* b) { return a->qpn < b->qpn; }),
                     raw);
    *err = 0;
    return raw;
}

int Device::destroy_qp(rc::Qp* qp) noexcept {
    if (!qp) return 0;
    // Found by address, never by reading *qp: a QP destroyed before (or another device's) is EINVAL
    // without touching freed memory, as destroy_cq and dealloc_pd already do.
    auto it = std::find_if(qps_.begin(), qps_.end(), [&](auto& q) { return q.get() == qp; });
    if (it == qps_.end()) return EINVAL;
    // Payload the QP lent to a driver by reference may still be out (a PMD's tx ring, a peer): the
    // segments' release callbacks will write to its TxRefs, so the device keeps them (~Device).
    rc::Qp& q = **it;
    for (std::uint32_t i = 0; q.tx_refs && i < q.sq.capacity(); ++i) {
        if (!q.tx_refs[i].released()) {
            retired_tx_refs_.push_back({std::move(q.tx_refs), q.sq.capacity()});
            break;
        }
    }
    live_qps_.erase(std::find(live_qps_.begin(), live_qps_.end(), qp));
    it->reset();
    return 0;
}

rc::Qp* Device::qp_by_num(std::uint32_t qpn) noexcept {
    if (qpn < rc::kFirstQpn || qpn - rc::kFirstQpn >= qps_.size()) return nullptr;
    return qps_[qpn - rc::kFirstQpn].get();
}

namespace {
using namespace rc;

struct TransitionRule {
    bool legal = false;
    std::uint32_t required = 0;
    std::uint32_t optional = 0;
};

/**
 * Required and optional attributes of each RC state transition, as ibv_modify_qp(3) and the kernel's
 * ib_modify_qp_is_ok() define them (IBTA Vol 1 §11.2.4.2 / table 91 "QP state transition").
 */
TransitionRule rc_transition(QpState from, QpState to) noexcept {
    constexpr std::uint32_t kAlways = kQpState | kQpCurState;
    if (to == QpState::reset || to == QpState::err) return {true, kQpState, kQpCurState};
    switch (from) {
    case QpState::reset:
        if (to == QpState::init) return {true, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags, 0};
        break;
    case QpState::init:
        if (to == QpState::init) return {true, 0, kAlways | kQpPkeyIndex | kQpPort | kQpAccessFlags};
        if (to == QpState::rtr)
            return {true,
                    kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn | kQpMaxDestRdAtomic | kQpMinRnrTimer,
                    kQpCurState | kQpAltPath | kQpAccessFlags | kQpPkeyIndex};
        break;
    case QpState::rtr:
        if (to == QpState::rts)
            return {true, kQpState | kQpSqPsn | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxQpRdAtomic,
                    kQpCurState | kQpAltPath | kQpAccessFlags | kQpMinRnrTimer | kQpPathMigState};
        break;
    case QpState::rts:
        if (to == QpState::rts)
            return {true, 0, kAlways | kQpAccessFlags | kQpAltPath | kQpPathMigState | kQpMinRnrTimer};
        if (to == QpState::sqd) return {true, kQpState, kQpCurState | kQpEnSqdAsyncNotify};
        break;
    case QpState::sqd:
        if (to == QpState::rts)
            return {true, kQpState, kQpCurState | kQpAccessFlags | kQpAltPath | kQpPathMigState | kQpMinRnrTimer};
        if (to == QpState::sqd)
            return {true, 0,
                    kAlways | kQpAv | kQpPathMtu | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxQpRdAtomic |
                        kQpMaxDestRdAtomic | kQpAccessFlags | kQpMinRnrTimer | kQpPkeyIndex | kQpPort |
                        kQpAltPath | kQpPathMigState};
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

void Device::set_path(rc::Qp& qp) noexcept {
    const PortSpec& port = ports_[qp.attr.port_num - 1u];
    const AddressVector& av = qp.attr.ah_attr;
    wire::PathHeaders& p = qp.path;
    p.src_mac = port.mac;
    p.dst_mac = av.dmac;
    // An address vector without a MAC (the verbs case: only a GID) is resolved by ARP / ND, unless
    // the GID is one of this device's own: then the QP talks to a QP of this device through the
    // loopback queue, as a NIC loops back traffic between its own functions.
    qp.path_resolved = av.dmac != wire::MacAddr{};
    qp.loopback_peer = false;
    for (const PortSpec& own : ports_) {
        if (own.gid != av.dgid) continue;
        p.dst_mac = own.mac;
        qp.path_resolved = true;
        qp.loopback_peer = true;
        break;
    }
    p.ipv6 = !gid_is_ipv4(av.dgid);
    p.src_ip = port.gid;
    p.dst_ip = av.dgid;
    p.tos = av.traffic_class;
    p.ttl = av.hop_limit ? av.hop_limit : 64;
    p.flow_label = av.flow_label;
    p.udp_sport = wire::rdma_udp_sport(av.flow_label, qp.qpn, qp.attr.dest_qp_num);
    if (p.ipv6 && p.flow_label == 0) p.flow_label = wire::flow_label_from_qpns(qp.qpn, qp.attr.dest_qp_num);
}

int Device::modify_qp(rc::Qp* qp, const rc::QpAttr& attr, std::uint32_t mask) noexcept {
    // Found by address before *qp is read: a destroyed or foreign QP is EINVAL (control path, O(kMaxQp)).
    if (!qp || std::none_of(qps_.begin(), qps_.end(), [&](auto& q) { return q.get() == qp; })) return EINVAL;
    const QpState cur = qp->state;
    if ((mask & kQpCurState) && attr.cur_qp_state != cur) return EINVAL;
    const QpState next = (mask & kQpState) ? attr.qp_state : cur;
    if (static_cast<unsigned>(next) > static_cast<unsigned>(QpState::err)) return EINVAL;
    const TransitionRule rule = rc_transition(cur, next);
    if (!rule.legal) return EINVAL;
    if ((mask & rule.required) != rule.required) return EINVAL;
    if (mask & ~(rule.required | rule.optional)) return EINVAL;

    // Range checks before anything changes.
    if ((mask & kQpPort) && (attr.port_num < 1 || attr.port_num > ports_.size())) return EINVAL;
    const unsigned port_num = (mask & kQpPort) ? attr.port_num : qp->attr.port_num;
    if ((mask & kQpPathMtu) &&
        (attr.path_mtu < Mtu::mtu256 || attr.path_mtu > Mtu::mtu4096 ||
         mtu_bytes(attr.path_mtu) > ports_[port_num - 1u].mtu))
        return EINVAL;
    if ((mask & kQpTimeout) && attr.timeout > 31) return EINVAL;
    if ((mask & kQpRetryCnt) && attr.retry_cnt > 7) return EINVAL;
    if ((mask & kQpRnrRetry) && attr.rnr_retry > 7) return EINVAL;
    if ((mask & kQpMinRnrTimer) && attr.min_rnr_timer > 31) return EINVAL;
    if ((mask & kQpMaxQpRdAtomic) && attr.max_rd_atomic > kMaxRdAtomic) return EINVAL;
    if ((mask & kQpMaxDestRdAtomic) && attr.max_dest_rd_atomic > kMaxRdAtomic) return EINVAL;
    if ((mask & kQpDestQpn) && attr.dest_qp_num > 0xffffff) return EINVAL;
    if ((mask & kQpAccessFlags) &&
        (attr.qp_access_flags & ~(kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic |
                                  kAccessMwBind | kAccessRelaxedOrdering)))
        return EINVAL;
    if ((mask & kQpPkeyIndex) && attr.pkey_index != 0) return EINVAL; // one P_Key: 0xFFFF at index 0
    if ((mask & kQpAv) && (attr.ah_attr.port_num != 0 && attr.ah_attr.port_num > ports_.size())) return EINVAL;

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
    if (mask & (kQpAv | kQpDestQpn | kQpPort)) set_path(*qp);

    if (next == QpState::reset) {
        reset_qp_state(*qp);
        return 0;
    }
    if (next == QpState::err && cur != QpState::err) {
        rc::qp_enter_error(*qp, ctx_);
        return 0;
    }
    qp->state = next;
    a.qp_state = next;
    return 0;
}

// ---------------------------------------------------------------- application datapath

int Device::post_send(rc::Qp* qp, const rc::SendWqe* wrs, std::uint32_t n, std::uint32_t* bad) noexcept {
    *bad = 0;
    // A QP of another device is EINVAL (O(1): the QPN indexes this device's table).
    if (!qp || qp_by_num(qp->qpn) != qp || (n > 0 && !wrs)) return EINVAL;
    // ibv_post_send before RTS is refused; in ERR the WQEs are accepted and flushed (IBTA §10.7.3.1).
    if (qp->state != QpState::rts && qp->state != QpState::sqd && qp->state != QpState::err) return EINVAL;
    for (std::uint32_t i = 0; i < n; ++i) {
        const rc::SendWqe& w = wrs[i];
        *bad = i;
        switch (w.opcode) {
        case WrOpcode::send:
        case WrOpcode::send_with_imm:
        case WrOpcode::send_with_inv:
        case WrOpcode::rdma_write:
        case WrOpcode::rdma_write_with_imm:
        case WrOpcode::rdma_read:
        case WrOpcode::atomic_cmp_and_swp:
        case WrOpcode::atomic_fetch_and_add: break;
        default: return EINVAL; // LOCAL_INV, BIND_MW: not supported on droce (README)
        }
        const bool is_atomic =
            w.opcode == WrOpcode::atomic_cmp_and_swp || w.opcode == WrOpcode::atomic_fetch_and_add;
        const bool is_inline = (w.send_flags & kSendInline) != 0;
        if (is_inline) {
            if (w.opcode == WrOpcode::rdma_read || is_atomic) return EINVAL;
            if (w.length > qp->cap.max_inline_data && w.length > 0) return EINVAL;
        } else if (w.num_sge > qp->cap.max_send_sge || w.num_sge > kMaxSge) {
            return EINVAL;
        }
        if (is_atomic && (w.num_sge != 1 || w.sg_list[0].length != 8)) return EINVAL;
        if (qp->sq.free_slots() == 0) return ENOMEM;
        rc::SendWqe& slot = qp->sq.producer_slot();
        slot.wr_id = w.wr_id;
        slot.opcode = w.opcode;
        slot.send_flags = w.send_flags;
        slot.imm_data = w.imm_data;
        slot.invalidate_rkey = w.invalidate_rkey;
        slot.remote_addr = w.remote_addr;
        slot.rkey = w.rkey;
        slot.compare_add = w.compare_add;
        slot.swap = w.swap;
        if (is_inline) {
            // The application's copy is already in w.inline_data (native API) and length says how much.
            slot.num_sge = 0;
            slot.length = w.length;
            std::memcpy(slot.inline_data, w.inline_data, w.length);
        } else {
            slot.num_sge = w.num_sge;
            std::uint64_t total = 0;
            for (std::uint32_t s = 0; s < w.num_sge; ++s) {
                slot.sg_list[s] = w.sg_list[s];
                total += w.sg_list[s].length;
            }
            if (total > kMaxMsgSize) return EINVAL;
            slot.length = static_cast<std::uint32_t>(total);
        }
        slot.state = rc::WqeState::posted;
        slot.sent_bytes = 0;
        slot.recv_bytes = 0;
        slot.atomic_result = 0;
        slot.npkts = 0;
        slot.status = WcStatus::success;
        qp->sq.publish();
    }
    *bad = n;
    if (asleep_.load(std::memory_order_seq_cst)) ring_doorbell();
    return 0;
}

int Device::post_recv(rc::Qp* qp, const rc::RecvWqe* wrs, std::uint32_t n, std::uint32_t* bad) noexcept {
    *bad = 0;
    if (!qp || qp_by_num(qp->qpn) != qp || (n > 0 && !wrs) || qp->state == QpState::reset) return EINVAL;
    for (std::uint32_t i = 0; i < n; ++i) {
        *bad = i;
        const rc::RecvWqe& w = wrs[i];
        if (w.num_sge > qp->cap.max_recv_sge || w.num_sge > kMaxSge) return EINVAL;
        if (qp->rq.free_slots() == 0) return ENOMEM;
        rc::RecvWqe& slot = qp->rq.producer_slot();
        slot.wr_id = w.wr_id;
        slot.num_sge = w.num_sge;
        std::uint64_t total = 0;
        for (std::uint32_t s = 0; s < w.num_sge; ++s) {
            slot.sg_list[s] = w.sg_list[s];
            total += w.sg_list[s].length;
        }
        slot.length = static_cast<std::uint32_t>(std::min<std::uint64_t>(total, kMaxMsgSize));
        qp->rq.publish();
    }
    *bad = n;
    if (asleep_.load(std::memory_order_seq_cst)) ring_doorbell();
    return 0;
}

std::uint32_t Device::poll_cq(rc::Cq* cq, rc::Cqe* out, std::uint32_t n) noexcept {
    if (!cq || !out) return 0;
    std::uint32_t got = std::min(n, cq->ring.ready());
    for (std::uint32_t i = 0; i < got; ++i) out[i] = cq->ring.slot(cq->ring.consumer_index() + i);
    cq->ring.release(got);
    return got;
}

// ---------------------------------------------------------------- engine

bool Device::emit(void* self, rc::Qp& qp, const wire::PacketFields& f,
                  std::span<const std::span<const std::uint8_t>> payload, TxRef* ref) noexcept {
    auto* dev = static_cast<Device*>(self);
    if (!qp.path_resolved) {
        qp.counters.inc(Counter::tx_wait_neigh);
        return false;
    }
    const unsigned port = qp.attr.port_num - 1u;
    TxQueue& q = dev->tx_[port];
    if (!qp.loopback_peer && q.count == kTxBatch) dev->flush_tx(port);
    if (qp.loopback_peer ? dev->loopback_.size() == LoopbackQueue::kDepth : q.count == kTxBatch) {
        dev->counters_.inc(Counter::tx_no_buffer);
        return false;
    }
    PortDriver* drv = dev->ports_[port].driver;
    PktBuf* buf = nullptr;
    if (drv->alloc_bulk(&buf, 1) != 1) {
        dev->counters_.inc(Counter::tx_no_buffer);
        return false;
    }
    buf->port = static_cast<std::uint8_t>(port);
    if (ref != nullptr && dev->send_by_reference(port, qp, payload, f, buf, ref)) {
        q.pending[q.count++] = buf;
        qp.counters.inc(Counter::sent_pkts);
        return true;
    }
    const std::size_t len = wire::build_frame(qp.path, f, payload, buf->room());
    if (len == 0) {
        drv->free_bulk(&buf, 1);
        dev->counters_.inc(Counter::tx_no_buffer);
        return false;
    }
    buf->len = static_cast<std::uint32_t>(len);
    qp.counters.inc(Counter::sent_pkts);
    if (qp.loopback_peer) {
        dev->loopback_.bufs[dev->loopback_.tail++ % LoopbackQueue::kDepth] = buf;
        qp.counters.inc(Counter::loopback_pkts);
    } else {
        q.pending[q.count++] = buf;
    }
    return true;
}

std::uint32_t Device::drain_loopback(std::uint32_t budget) noexcept {
    // Only the frames queued before this call: the ACKs and responses they cause wait for the next
    // pass, so one pass is bounded even when two QPs of this device talk back and forth.
    std::uint32_t n = std::min(budget, loopback_.size());
    for (std::uint32_t i = 0; i < n; ++i) {
        PktBuf* buf = loopback_.bufs[loopback_.head++ % LoopbackQueue::kDepth];
        receive(*buf);
        ports_[buf->port].driver->free_bulk(&buf, 1);
    }
    return n;
}

bool Device::send_by_reference(unsigned port, const rc::Qp& qp, std::span<const std::span<const std::uint8_t>> payload,
                               const wire::PacketFields& f, PktBuf* buf, TxRef* ref) noexcept {
    // zc_min_payload_ was chosen when the device was set up: UINT32_MAX on ports that copy.
    std::size_t len = 0;
    for (auto s : payload) len += s.size();
    if (len < zc_min_payload_[port]) return false;
    // A frame to a QP of this device goes through the loopback queue to the receive path, which
    // reads frame() as one buffer: copied.
    if (qp.loopback_peer) return false;
    wire::SplitFrame sf;
    if (!wire::build_frame_split(qp.path, f, payload, buf->room(), sf)) return false;
    buf->len = static_cast<std::uint32_t>(sf.header_len);
    if (!ports_[port].driver->attach_payload(buf, payload, sf.trailer_bytes(), ref)) {
        counters_.inc(Counter::tx_zc_copied);
        return false; // buf unchanged: the caller builds the whole frame over the headers
    }
    counters_.inc(Counter::tx_zc_pkts);
    return true;
}

void Device::set_tx_by_reference(unsigned port, std::uint32_t min_payload) noexcept {
    if (port >= ports_.size()) return;
    zc_min_payload_[port] =
        ports_[port].driver && ports_[port].driver->tx_by_reference() ? min_payload : UINT32_MAX;
}

void Device::flush_tx(unsigned port) noexcept {
    TxQueue& q = tx_[port];
    if (q.count == 0) return;
    const std::uint16_t sent = ports_[port].driver->tx_burst(q.pending.data(), q.count);
    // The driver owns pending[0..sent); keep the rest, in order, for the next flush.
    std::copy(q.pending.begin() + sent, q.pending.begin() + q.count, q.pending.begin());
    q.count = static_cast<std::uint16_t>(q.count - sent);
}

void Device::receive(PktBuf& buf) noexcept {
    wire::ParsedFrame pkt;
    const wire::RejectReason r = wire::parse_frame(buf.frame(), pkt);
    parse_counters_.count(r);
    if (r != wire::RejectReason::ok) {
        // Not RoCE at all (ARP, ND, other traffic) is no error for the transport; malformed RoCE is.
        if (r == wire::RejectReason::bad_icrc) counters_.inc(Counter::rx_dropped_bad_icrc);
        else if (pkt.udp && pkt.udp->dst_port.get() == wire::kRoceV2Port) counters_.inc(Counter::rx_dropped_malformed);
        else if (buf.port < responders_.size()) {
            std::array<std::uint8_t, kNeighMaxReply> reply{};
            const NeighRx nr = responders_[buf.port].handle_frame(buf.frame(), reply);
            if (nr.reply_len > 0) queue_raw(buf.port, std::span(reply.data(), nr.reply_len));
        }
        return;
    }
    if (pkt.bth->opcode() == wire::Opcode::CNP) return; // DCQCN reaction point: a later issue
    if (wire::transport_of(pkt.bth->opcode()) != wire::Transport::rc) {
        counters_.inc(Counter::rx_dropped_bad_qp);
        return;
    }
    rc::Qp* qp = qp_by_num(pkt.bth->dest_qp());
    if (!qp || qp->state == QpState::reset || qp->state == QpState::init) {
        counters_.inc(Counter::rx_dropped_bad_qp);
        return;
    }
    // RC packets must come from the connected peer (rxe check_addr): same source address.
    const wire::Ipv6Addr& peer = qp->path.dst_ip;
    const bool from_peer = pkt.ipv4 ? std::memcmp(pkt.ipv4->src.data(), peer.data() + 12, 4) == 0
                                    : std::memcmp(pkt.ipv6->src.data(), peer.data(), 16) == 0;
    if (!from_peer) {
        counters_.inc(Counter::rx_dropped_bad_qp);
        return;
    }
    qp->counters.inc(Counter::rcvd_pkts);
    if (pkt.info->is(wire::OpFlags::response)) rc::completer_receive(*qp, pkt, ctx_);
    else rc::responder_receive(*qp, pkt, ctx_);
}

bool Device::queue_raw(unsigned port, std::span<const std::uint8_t> frame) noexcept {
    TxQueue& q = tx_[port];
    if (q.count == kTxBatch) flush_tx(port);
    PktBuf* buf = nullptr;
    if (q.count == kTxBatch || ports_[port].driver->alloc_bulk(&buf, 1) != 1) {
        counters_.inc(Counter::tx_no_buffer);
        return false;
    }
    if (frame.size() > buf->capacity) {
        ports_[port].driver->free_bulk(&buf, 1);
        return false;
    }
    std::memcpy(buf->data, frame.data(), frame.size());
    buf->len = static_cast<std::uint32_t>(frame.size());
    buf->port = static_cast<std::uint8_t>(port);
    q.pending[q.count++] = buf;
    counters_.inc(Counter::neigh_tx);
    return true;
}

bool Device::add_static_neighbor(const wire::Ipv6Addr& ip, const wire::MacAddr& mac) noexcept {
    return neigh_.add_static(ip, mac);
}

void Device::resolve_paths() noexcept {
    for (rc::Qp* qp : live_qps_) {
        if (qp->path_resolved || qp->state == QpState::reset || qp->state == QpState::init) continue;
        const NeighLookup l = neigh_.lookup(qp->path.dst_ip);
        if (l.result == NeighResolve::resolved) {
            qp->path.dst_mac = l.mac;
            qp->attr.ah_attr.dmac = l.mac;
            qp->path_resolved = true;
        }
        if (l.send_request) {
            const unsigned port = qp->attr.port_num - 1u;
            std::array<std::uint8_t, kNeighMaxReply> req{};
            const std::size_t n = responders_[port].build_request(qp->path.dst_ip, req);
            if (n) queue_raw(port, std::span(req.data(), n));
        }
    }
}

void Device::check_links() noexcept {
    for (unsigned p = 0; p < ports_.size(); ++p) {
        const bool up = ports_[p].driver->link_up();
        if (up == link_was_up_[p]) continue;
        link_was_up_[p] = up;
        counters_.inc(up ? Counter::link_upped : Counter::link_downed);
        if (on_link_change) on_link_change(p, up);
    }
}

std::uint32_t Device::poll() noexcept {
    std::uint32_t work = 0;
    bool wait_release = false;
    // Control-rate work: link state and neighbour resolution need not run on every pass.
    if ((polls_++ & 255u) == 0) {
        check_links();
        resolve_paths();
    }
    std::array<PktBuf*, kBurst> bufs{};
    for (unsigned p = 0; p < ports_.size(); ++p) {
        PortDriver* drv = ports_[p].driver;
        const std::uint16_t n = drv->rx_burst(bufs.data(), kBurst);
        for (std::uint16_t i = 0; i < n; ++i) receive(*bufs[i]);
        if (n) drv->free_bulk(bufs.data(), n);
        work += n;
    }
    work += drain_loopback(kBurst);
    for (rc::Qp* qp : live_qps_) {
        if (qp->state == QpState::reset) continue;
        if (qp->state == QpState::err) {
            // WQEs posted after the QP failed are flushed here, once each.
            if (qp->sq.ready() || qp->rq.ready()) {
                rc::qp_enter_error(*qp, ctx_);
                if (qp->sq.ready()) wait_release = true; // held payload: completes once released
                ++work;
            }
            continue;
        }
        rc::completer_timers(*qp, ctx_);
        if (qp->state == QpState::err) continue;
        // Acknowledged WQEs whose payload a driver held: complete them once released.
        if (qp->sq.consumer_index() != qp->comp.acked_wqe && rc::completer_reap(*qp)) wait_release = true;
        rc::responder_run(*qp, ctx_, kBurst);
        work += rc::requester_run(*qp, ctx_, kBurst);
    }
    // PMDs free sent mbufs lazily (memif zero-copy only in its next tx burst). A completion waits
    // for a release: when this pass had nothing else to do, ask the ports (an empty memif burst may
    // cost an eventfd write, so not while traffic flows: the next real burst frees them anyway), and
    // count it as work so that the engine keeps polling instead of sleeping on the doorbell.
    const bool reclaim = wait_release && work == 0;
    for (unsigned p = 0; p < ports_.size(); ++p) {
        if (reclaim && tx_[p].count == 0) ports_[p].driver->tx_reclaim();
        flush_tx(p);
    }
    return work + (wait_release ? 1u : 0u);
}

void Device::ring_doorbell() noexcept {
    if (doorbell_fd_ < 0) return;
    const std::uint64_t one = 1;
    [[maybe_unused]] ssize_t r = write(doorbell_fd_, &one, sizeof one);
}

void Device::sleep_until_doorbell(std::uint64_t max_ns) noexcept {
    asleep_.store(true, std::memory_order_seq_cst);
    bool work = loopback_.size() > 0; // looped-back frames or WQEs not yet started by the requester
    for (const rc::Qp* qp : live_qps_)
        if (qp->state != QpState::reset && qp->sq.producer_index() != qp->req.next_wqe) work = true;
    if (!work && doorbell_fd_ >= 0) {
        std::uint64_t wait = max_ns;
        const std::uint64_t deadline = next_deadline_ns();
        const std::uint64_t now = clock_->now_ns();
        if (deadline) wait = deadline > now ? std::min(wait, deadline - now) : 0;
        if (wait > 0) {
            pollfd pfd{doorbell_fd_, POLLIN, 0};
            timespec ts{static_cast<time_t>(wait / 1'000'000'000u), static_cast<long>(wait % 1'000'000'000u)};
            ppoll(&pfd, 1, &ts, nullptr);
            std::uint64_t drained;
            [[maybe_unused]] ssize_t r = read(doorbell_fd_, &drained, sizeof drained);
        }
    }
    asleep_.store(false, std::memory_order_seq_cst);
}

Counters Device::total_counters() const noexcept {
    Counters sum = counters_;
    for (auto& qp : qps_)
        if (qp)
            for (std::size_t i = 0; i < kNumCounters; ++i) sum.v[i] += qp->counters.v[i];
    return sum;
}

std::uint64_t Device::next_deadline_ns() const noexcept {
    std::uint64_t best = 0;
    for (const rc::Qp* qp : live_qps_) {
        const std::uint64_t d = rc::completer_next_deadline(*qp);
        if (d && (best == 0 || d < best)) best = d;
    }
    return best;
}

} // namespace droce
