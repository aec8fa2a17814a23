/* SPDX-License-Identifier: BSD-3-Clause */
#include "device.h"
#include "mem/access.h"
#include "rc/pacer.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "wire/udp_sport.h"

namespace droce {

using namespace rc; // the engine runs the RC transport: Qp, WrOpcode, QpState ...

namespace {
/** The states in which a QP takes requests or responses from the wire (Device::receiving_qps). */
bool receives(QpState s) noexcept {
    return s == QpState::rtr || s == QpState::rts || s == QpState::sqd || s == QpState::sqe;
}
} // namespace

Device::Device(std::string name, Clock& clock, std::vector<PortSpec> ports)
    : name_(std::move(name)), clock_(&clock), ports_(std::move(ports)), tx_(ports_.size()),
      tx_cache_(ports_.size()), tx_stage_room_(ports_.size(), 0), mrs_(rc::kMaxMr),
      neigh_(clock, 256), qps_(rc::kMaxQp) {
    live_qps_.reserve(rc::kMaxQp); // create_qp inserts without allocating
    qps_by_addr_.reserve(rc::kMaxQp);
    active_.reserve(rc::kMaxQp); // activate() appends without allocating
    active_flag_.assign(rc::kMaxQp, 0);
    err_seen_.assign(rc::kMaxQp, 0);
    counted_receiving_.assign(rc::kMaxQp, 0);
    for (const PortSpec& ps : ports_) {
        port_mtu_.push_back(ps.mtu);
        if (wire::is_ipv4_mapped(ps.gid)) {
            std::uint32_t v4;
            std::memcpy(&v4, ps.gid.data() + 12, sizeof v4);
            own_ipv4_.push_back(v4);
        } else {
            own_ipv6_.push_back(ps.gid);
        }
    }
    for (const PortSpec& ps : ports_) {
        NeighPortAddrs addrs;
        addrs.mac = ps.mac;
        if (is_ipv4_mapped(ps.gid)) {
            addrs.ipv4 = ipv4_of_mapped(ps.gid);
        } else {
            addrs.add_ipv6(ps.gid);
        }
        responders_.emplace_back(neigh_, addrs);
        link_was_up_.push_back(ps.driver ? ps.driver->link_up() : false);
        admin_up_.push_back(true);
    }
    ctx_.num_ports = static_cast<std::uint8_t>(ports_.size());
    ctx_.port_up_mask = 0;
    for (unsigned p = 0; p < ports_.size(); ++p)
        if (link_was_up_[p])
            ctx_.port_up_mask = static_cast<std::uint8_t>(ctx_.port_up_mask | (1u << p));
    ports_up_.store(ctx_.port_up_mask, std::memory_order_relaxed);
    ctx_.clock = clock_;
    ctx_.mrs = &mrs_;
    ctx_.dev_counters = &counters_;
    ctx_.tx = &stage_;
    ctx_.defer_acks = true; // one ACK per QP per rx burst; poll() flushes them (responder_run)
    // Copy or transmit by reference, per port, decided once here.
    for (unsigned p = 0; p < ports_.size(); ++p) {
        zc_min_payload_.push_back(UINT32_MAX);
        set_tx_by_reference(p, rc::kTxByRefMinPayload);
#if defined(__x86_64__) // streaming stores (transmit.cc) are written for x86-64 only
        tx_stream_.push_back(ports_[p].driver && ports_[p].driver->tx_read_by_peer() ? 1 : 0);
#else
        tx_stream_.push_back(0);
#endif
    }
    doorbell_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    wake_fds_.push_back({doorbell_fd_, POLLIN, 0});
    for (unsigned p = 0; p < ports_.size(); ++p) {
        const int fd = ports_[p].driver ? ports_[p].driver->rx_interrupt_fd() : -1;
        if (fd < 0) continue;
        wake_fds_.push_back({fd, POLLIN, 0});
        irq_ports_.push_back(p);
    }
    // After every responder exists: responders_ no longer moves, so its counter cells stay put.
    registry_.add("device", kCounterNames, counters_.cells());
    registry_.add("device/parse", wire::kRejectReasonNames, parse_counters_.cells());
    for (unsigned p = 0; p < responders_.size(); ++p)
        registry_.add("port" + std::to_string(p + 1) + "/neigh", kNeighCounterNames,
                      responders_[p].counters().cells());
}

Device::~Device() {
    if (doorbell_fd_ >= 0) close(doorbell_fd_);
    for (unsigned p = 0; p < ports_.size(); ++p) {
        if (tx_[p].count) ports_[p].driver->free_bulk(tx_[p].pending.data(), tx_[p].count);
        tx_[p].count = 0;
        if (tx_cache_[p].count)
            ports_[p].driver->free_bulk(tx_cache_[p].bufs.data(), tx_cache_[p].count);
        tx_cache_[p].count = 0;
    }
    while (loopback_.size() > 0) {
        PktBuf* buf = loopback_.bufs[loopback_.head++ % LoopbackQueue::kDepth];
        ports_[buf->port].driver->free_bulk(&buf, 1);
    }
    // TxRefs that segments still point at (a driver or a peer holds payload sent by reference):
    // give the ports a moment to release them; what stays out is left allocated rather than freed
    // under a release callback that may still run (as EthPort leaves a pool with mbufs out).
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
        for (auto& r : retired_tx_refs_)
            (void)r.refs.release(); // leaked on purpose, see above
}

// ---------------------------------------------------------------- control path

namespace {
/** Appends @p v to @p vec; false (nothing appended, @p v not consumed) when growing it found no
 *  memory: control verbs answer ENOMEM, they do not throw. */
template <typename T>
bool push_back_nothrow(std::vector<T>& vec, T&& v) noexcept {
    try {
        vec.push_back(std::move(v));
        return true;
    } catch (const std::bad_alloc&) {
        return false;
    }
}
} // namespace

mem::Pd* Device::alloc_pd(int* err) noexcept {
    ControlSection section(*this);
    auto pd = std::unique_ptr<mem::Pd>(new (std::nothrow) mem::Pd{next_pd_handle_++});
    if (!pd) {
        *err = ENOMEM;
        return nullptr;
    }
    if (!push_back_nothrow(pds_, std::move(pd))) {
        *err = ENOMEM;
        return nullptr;
    }
    *err = 0;
    return pds_.back().get();
}

int Device::dealloc_pd(mem::Pd* pd) noexcept {
    ControlSection section(*this);
    if (!pd) return 0;
    auto it = std::find_if(pds_.begin(), pds_.end(), [&](auto& p) { return p.get() == pd; });
    if (it == pds_.end()) return EINVAL;
    for (auto& q : qps_)
        if (q && q->pd == pd) return EBUSY;
    if (mrs_.uses_pd(pd)) return EBUSY;
    pds_.erase(it);
    return 0;
}

mem::Mr* Device::reg_mr(mem::Pd* pd, void* addr, std::uint64_t length, std::uint32_t access,
                        int* err) noexcept {
    // Before the section: it reads /proc/self/maps, and the engine does not wait for that.
    if (pd != nullptr && addr != nullptr) {
        if (int e = mem::check_host_range(addr, length, (access & mem::kAccessLocalWrite) != 0);
            e != 0) {
            *err = e;
            return nullptr;
        }
    }
    ControlSection section(*this);
    // A PD of another device (or a freed one) is EINVAL, as a foreign handle is for ibv_reg_mr.
    if (pd && std::none_of(pds_.begin(), pds_.end(), [&](auto& p) { return p.get() == pd; })) {
        *err = EINVAL;
        return nullptr;
    }
    return mrs_.register_mr(pd, addr, length, reinterpret_cast<std::uintptr_t>(addr), access, err);
}

void Device::set_ack_hold(bool on) noexcept {
    ControlSection section(*this);
    ctx_.hold_acks = on;
}

int Device::dereg_mr(mem::Mr* mr) noexcept {
    ControlSection section(*this);
    return mrs_.deregister(mr);
}

rc::Cq* Device::create_cq(std::uint32_t cqe, int* err) noexcept {
    ControlSection section(*this);
    if (cqe == 0 || cqe > rc::kMaxCqe) {
        *err = EINVAL;
        return nullptr;
    }
    auto cq = std::unique_ptr<rc::Cq>(new (std::nothrow) rc::Cq);
    if (!cq) {
        *err = ENOMEM;
        return nullptr;
    }
    cq->ring = SpscRing<rc::Cqe>(cqe, std::nothrow);
    if (cq->ring.capacity() == 0 || !push_back_nothrow(cqs_, std::move(cq))) {
        *err = ENOMEM;
        return nullptr;
    }
    cqs_.back()->cqn = next_cqn_++;
    *err = 0;
    return cqs_.back().get();
}

int Device::destroy_cq(rc::Cq* cq) noexcept {
    ControlSection section(*this);
    if (!cq) return 0;
    auto it = std::find_if(cqs_.begin(), cqs_.end(), [&](auto& c) { return c.get() == cq; });
    if (it == cqs_.end()) return EINVAL;
    for (auto& q : qps_)
        if (q && (q->send_cq == cq || q->recv_cq == cq)) return EBUSY;
    cqs_.erase(it);
    return 0;
}

namespace {
/** live_qps_'s order. */
constexpr auto by_qpn = [](const rc::Qp* a, const rc::Qp* b) { return a->qpn < b->qpn; };
} // namespace

rc::Qp* Device::create_qp(mem::Pd* pd, rc::Cq* send_cq, rc::Cq* recv_cq, const rc::QpCap& cap,
                          bool sq_sig_all, int* err, const rc::TransportOps& transport) noexcept {
    if (!pd || !send_cq || !recv_cq || cap.max_send_wr > rc::kMaxQpWr ||
        cap.max_recv_wr > rc::kMaxQpWr || cap.max_send_sge > rc::kMaxSge ||
        cap.max_recv_sge > rc::kMaxSge || cap.max_inline_data > rc::kMaxInlineData) {
        *err = EINVAL;
        return nullptr;
    }
    // Built before the control section: allocating and zeroing a QP (its PSN ring, its queues)
    // touches tens of KiB, and the engine should not wait for that.
    auto qp = std::unique_ptr<rc::Qp>(new (std::nothrow) rc::Qp);
    if (!qp) {
        *err = ENOMEM;
        return nullptr;
    }
    qp->transport = &transport;
    qp->pd = pd;
    qp->send_cq = send_cq;
    qp->recv_cq = recv_cq;
    qp->cap = cap;
    // The rings may hold at least what was asked; report the real depth back like ibv_create_qp.
    qp->cap.max_recv_wr = std::max<std::uint32_t>(cap.max_recv_wr, 1);
    qp->sq_sig_all = sq_sig_all;
    if (const int e = rc::qp_alloc_queues(*qp); e != 0) {
        *err = e;
        return nullptr;
    }
    rc::qp_reset(*qp);
    rc::pacer_set_dcqcn(*qp, dcqcn_, 0);
    qp->tx_refs.reset(new (std::nothrow) TxRef[qp->sq.capacity()]);
    if (!qp->tx_refs) {
        *err = ENOMEM;
        return nullptr;
    }
    qp->cap.max_send_wr = qp->sq.capacity();
    qp->cap.max_recv_wr = qp->rq.capacity();
    if (transport.create) {
        if (const int e = transport.create(*qp); e != 0) {
            *err = e;
            return nullptr;
        }
    }

    ControlSection section(*this);
    // PD and CQs must be this device's: the engine would otherwise complete into another device's
    // CQ and check keys against a PD this device's MRs can never match.
    const auto mine = [](const auto& v, const void* obj) {
        return std::any_of(v.begin(), v.end(), [&](auto& o) { return o.get() == obj; });
    };
    if (!mine(pds_, pd) || !mine(cqs_, send_cq) || !mine(cqs_, recv_cq)) {
        *err = EINVAL;
        return nullptr;
    }
    auto slot =
        std::find_if(qps_.begin() + free_slot_hint_, qps_.end(), [](auto& q) { return !q; });
    free_slot_hint_ = static_cast<std::uint32_t>(slot - qps_.begin());
    if (slot == qps_.end()) {
        *err = ENOMEM;
        return nullptr;
    }
    qp->qpn = first_qpn_ + static_cast<std::uint32_t>(slot - qps_.begin());
    err_seen_[static_cast<std::size_t>(slot - qps_.begin())] = 0;
    rc::Qp* raw = qp.get();
    *slot = std::move(qp);
    // QPN order; never reallocates (capacity kMaxQp reserved in the constructor).
    live_qps_.insert(std::lower_bound(live_qps_.begin(), live_qps_.end(), raw, by_qpn), raw);
    ctx_.prefetch_qp_state = live_qps_.size() >= kPrefetchMinQps;
    qps_by_addr_.insert(
        std::lower_bound(qps_by_addr_.begin(), qps_by_addr_.end(), raw, std::less<const rc::Qp*>{}),
        raw);
    char scope[16];
    std::snprintf(scope, sizeof scope, "qp/0x%06x", raw->qpn);
    registry_.add(scope, kCounterNames, raw->counters.cells());
    if (transport.counter_cells)
        registry_.add(std::string(scope) + "/" + std::string(transport.name),
                      transport.counter_names, transport.counter_cells(*raw));
    *err = 0;
    return raw;
}

bool Device::owns_qp(const rc::Qp* qp) const noexcept {
    // std::less: a total order on pointers, whatever object they point into.
    return std::binary_search(qps_by_addr_.begin(), qps_by_addr_.end(), qp,
                              std::less<const rc::Qp*>{});
}

void Device::send_held_acks() noexcept {
    ControlSection section(*this);
    for (rc::Qp* qp : live_qps_)
        send_held_ack(*qp);
}

int Device::destroy_qp(rc::Qp* qp) noexcept {
    // Freed after the section ends (declared before it): the engine need not wait for the free.
    std::unique_ptr<rc::Qp> doomed;
    ControlSection section(*this);
    if (!qp) return 0;
    // Found by address, never by reading *qp: a QP destroyed before (or another device's) is EINVAL
    // without touching freed memory, as destroy_cq and dealloc_pd already do.
    if (!owns_qp(qp)) return EINVAL;
    auto it = qps_.begin() + qp_index(qp->qpn);
    // Payload the QP lent to a driver by reference may still be out (a PMD's tx ring, a peer): the
    // segments' release callbacks will write to its TxRefs, so the device keeps them (~Device).
    rc::Qp& q = **it;
    send_held_ack(q);
    for (std::uint32_t i = 0; q.tx_refs && i < q.sq.capacity(); ++i) {
        if (!q.tx_refs[i].released()) {
            retired_tx_refs_.push_back({std::move(q.tx_refs), q.sq.capacity()});
            break;
        }
    }
    live_qps_.erase(std::lower_bound(live_qps_.begin(), live_qps_.end(), qp, by_qpn));
    ctx_.prefetch_qp_state = live_qps_.size() >= kPrefetchMinQps;
    qps_by_addr_.erase(
        std::lower_bound(qps_by_addr_.begin(), qps_by_addr_.end(), qp, std::less<const rc::Qp*>{}));
    const std::uint32_t slot = qp_index(qp->qpn);
    free_slot_hint_ = std::min(free_slot_hint_, slot);
    if (counted_receiving_[slot]) {
        counted_receiving_[slot] = 0;
        receiving_qps_.fetch_sub(1, std::memory_order_relaxed);
    }
    timers_.set(slot, 0);
    if (active_flag_[slot]) {
        active_flag_[slot] = 0;
        active_.erase(std::find(active_.begin(), active_.end(), slot));
    }
    registry_.remove(qp->counters.cells().data());
    if (qp->transport->counter_cells) registry_.remove(qp->transport->counter_cells(*qp).data());
    doomed = std::move(*it);
    return 0;
}

rc::Qp* Device::qp_by_num(std::uint32_t qpn) noexcept {
    const std::uint32_t i = qpn - first_qpn_; // below first_qpn_ wraps to a huge index
    if (i >= qps_.size()) return nullptr;
    return qps_[i].get();
}

int Device::set_qpn_steering_slot(std::uint8_t slot) noexcept {
    ControlSection section(*this);
    if (!live_qps_.empty()) return EBUSY;
    first_qpn_ = (static_cast<std::uint32_t>(slot) << kQpnSteeringShift) + rc::kFirstQpn;
    return 0;
}

void Device::build_path(rc::Qp& qp, unsigned port_index, unsigned path_index,
                        const wire::Ipv6Addr& dgid, const wire::MacAddr& dmac) noexcept {
    const PortSpec& port = ports_[port_index];
    const AddressVector& av = qp.attr.ah_attr;
    qp.paths[path_index].port = static_cast<std::uint8_t>(port_index);
    wire::PathHeaders& p = qp.paths[path_index].hdr;
    p.src_mac = port.mac;
    p.dst_mac = dmac;
    // An address vector without a MAC (the verbs case: only a GID) is resolved by ARP / ND, unless
    // the GID is one of this device's own: then the QP talks to a QP of this device through the
    // loopback queue, as a NIC loops back traffic between its own functions.
    bool own_gid = false;
    for (const PortSpec& own : ports_) {
        if (own.gid != dgid) continue;
        p.dst_mac = own.mac;
        qp.loopback_peer = true;
        own_gid = true;
        break;
    }
    if (!own_gid && dmac == wire::MacAddr{}) {
        if (port.l3) {
            p.dst_mac = kL3PortNextHopMac; // the kernel routes: nothing to resolve
        } else {
            qp.path_resolved = false;
            paths_pending_ = true;
            // The ARP request leaves on the next pass, not at the next control-rate one (every
            // 256th, far apart when the engine naps between passes).
            polls_ &= ~255u;
        }
    }
    p.ipv6 = !is_ipv4_mapped(dgid);
    p.src_ip = port.gid;
    p.dst_ip = dgid;
    p.tos = av.traffic_class;
    // With DCQCN the QP's packets are ECN-capable (ECT(0)), so that switches mark rather than drop.
    if (qp.pacer.dcqcn != nullptr) p.tos = static_cast<std::uint8_t>((p.tos & ~3u) | 2u);
    p.ttl = av.hop_limit ? av.hop_limit : 64;
    p.flow_label = av.flow_label;
    p.udp_sport = wire::rdma_udp_sport(av.flow_label, qp.qpn, qp.attr.dest_qp_num);
    if (p.ipv6 && p.flow_label == 0)
        p.flow_label = wire::flow_label_from_qpns(qp.qpn, qp.attr.dest_qp_num);
}

void Device::set_path(rc::Qp& qp) noexcept {
    const AddressVector& av = qp.attr.ah_attr;
    qp.path_resolved = true;
    qp.loopback_peer = false;
    if (!qp.transport->multiplane) {
        qp.num_paths = 1; // RC: one path, on the QP's port
        build_path(qp, qp.attr.port_num - 1u, 0, av.dgid, av.dmac);
    } else {
        // One path per port (plane), toward the peer's address on that plane when the control
        // path gave one (set_remote_planes), else toward the AV's GID and MAC.
        qp.num_paths = static_cast<std::uint8_t>(ports_.size());
        for (unsigned p = 0; p < ports_.size(); ++p) {
            const bool own = p < qp.num_remote_planes;
            build_path(qp, p, p, own ? qp.remote_planes[p].gid : av.dgid,
                       own ? qp.remote_planes[p].mac : av.dmac);
        }
    }
    if (qp.transport->paths_changed) qp.transport->paths_changed(qp, ctx_);
    // DCQCN's line rate: the QP's port, or for a multiplane QP the sum of its planes (its rate is
    // one per QP: the planes share its pacer).
    double line = 0;
    for (unsigned i = 0; i < qp.num_paths; ++i)
        line += ports_[qp.paths[i].port].line_rate_mbps;
    if (line != qp.pacer.line_rate_mbps) rc::pacer_set_dcqcn(qp, qp.pacer.dcqcn, line);
}

int Device::set_remote_planes(rc::Qp* qp, std::span<const rc::RemotePlane> planes) noexcept {
    ControlSection section(*this);
    if (!owns_qp(qp)) return EINVAL; // null is not a live QP
    if (!qp->transport->multiplane || planes.size() > ports_.size()) return EINVAL;
    std::copy(planes.begin(), planes.end(), qp->remote_planes.begin());
    qp->num_remote_planes = static_cast<std::uint8_t>(planes.size());
    if (qp->state != QpState::reset && qp->state != QpState::init) set_path(*qp);
    activate(qp_index(qp->qpn));
    return 0;
}

void Device::set_dcqcn(const cc::DcqcnProfile* profile) noexcept {
    ControlSection section(*this);
    dcqcn_ = profile;
}

int Device::set_qp_dcqcn(rc::Qp* qp, const cc::DcqcnProfile* profile) noexcept {
    ControlSection section(*this);
    if (!owns_qp(qp)) return EINVAL; // null is not a live QP
    rc::pacer_set_dcqcn(*qp, profile, ports_[qp->attr.port_num - 1u].line_rate_mbps);
    if (qp->state != QpState::reset && qp->state != QpState::init) set_path(*qp); // ECT bits
    sync_timer(*qp);
    activate(qp_index(qp->qpn));
    return 0;
}

int Device::set_qp_rate_limit(rc::Qp* qp, double mbps) noexcept {
    ControlSection section(*this);
    if (mbps < 0 || !owns_qp(qp)) return EINVAL;
    rc::pacer_set_rate_limit(*qp, mbps);
    activate(qp_index(qp->qpn));
    return 0;
}

int Device::set_port_admin(unsigned port, bool up) noexcept {
    ControlSection section(*this);
    if (port >= ports_.size()) return EINVAL;
    admin_up_[port] = up;
    return 0;
}

int Device::modify_qp(rc::Qp* qp, const rc::QpAttr& attr, std::uint32_t mask) noexcept {
    ControlSection section(*this);
    // Found by address before *qp is read: a destroyed or foreign QP is EINVAL.
    if (!owns_qp(qp)) return EINVAL; // null is not a live QP
    if ((mask & rc::kQpState) && attr.qp_state != QpState::rts) send_held_ack(*qp);
    const int err = qp->transport->modify(qp, attr, mask, port_mtu_, ctx_);
    if (err != 0) return err;
    // By the slot's flag, not the state before: the engine moves a QP to ERR on its own.
    std::uint8_t& counted = counted_receiving_[qp_index(qp->qpn)];
    if (receives(qp->state) != (counted != 0)) {
        if (counted)
            receiving_qps_.fetch_sub(1, std::memory_order_relaxed);
        else
            receiving_qps_.fetch_add(1, std::memory_order_relaxed);
        counted = counted ? 0 : 1;
    }
    if (mask & (rc::kQpAv | rc::kQpDestQpn | rc::kQpPort)) set_path(*qp);
    // ERR reached by the application's own modify raises no QP fatal event (on_qp_fatal); RESET
    // re-arms it.
    err_seen_[qp_index(qp->qpn)] = qp->state == QpState::err;
    // The engine is between passes (the section): its schedule may be changed here directly. A
    // QP that moved (to RTS with WQEs waiting, to ERR with WQEs to flush) runs on the next pass.
    sync_timer(*qp);
    activate(qp_index(qp->qpn));
    return 0;
}

std::string Device::path_mtu_refusal(unsigned port_num, std::uint32_t path_mtu_bytes) const {
    if (port_num < 1 || port_num > ports_.size()) return {};
    const std::uint32_t largest = ports_[port_num - 1].mtu;
    if (path_mtu_bytes <= largest) return {};
    return "path MTU " + std::to_string(path_mtu_bytes) + " is larger than port " +
           std::to_string(port_num) + "'s largest, " + std::to_string(largest) +
           " (the port's IP MTU in the config): EINVAL, as on a ConnectX or rxe port; ask for " +
           std::to_string(largest) + " or less (perftest: -m " + std::to_string(largest) +
           "), or use a config whose ports carry it (mtu = 4200 carries 4096)";
}

bool Device::add_static_neighbor(const wire::Ipv6Addr& ip, const wire::MacAddr& mac) noexcept {
    ControlSection section(*this);
    return neigh_.add_static(ip, mac);
}

void Device::resolve_paths() noexcept {
    bool pending = false;
    for (rc::Qp* qp : live_qps_) {
        if (qp->path_resolved) continue;
        pending = true; // a QP in RESET/INIT keeps it set until it resolves or is destroyed
        if (qp->state == QpState::reset || qp->state == QpState::init) continue;
        bool all = true;
        bool some = false; // a path resolved in this call
        for (unsigned i = 0; i < qp->num_paths; ++i) {
            rc::Path& path = qp->paths[i];
            if (path.hdr.dst_mac != wire::MacAddr{}) continue;
            const NeighLookup l = neigh_.lookup(path.hdr.dst_ip);
            if (l.result == NeighResolve::resolved) {
                path.hdr.dst_mac = l.mac;
                if (i == 0) qp->attr.ah_attr.dmac = l.mac;
                some = true;
            } else {
                all = false;
            }
            if (l.send_request) {
                std::array<std::uint8_t, kNeighMaxReply> req{};
                const std::size_t n = responders_[path.port].build_request(path.hdr.dst_ip, req);
                if (n) queue_raw(path.port, std::span(req.data(), n), Counter::neigh_tx);
            }
        }
        if (all) {
            qp->path_resolved = true;
            if (qp->transport->paths_changed) qp->transport->paths_changed(*qp, ctx_);
            activate(qp_index(qp->qpn)); // WQEs held back by tx_wait_neigh go now
        } else if (some && qp->transport->multiplane && qp->transport->paths_changed) {
            // A multiplane QP sends over the planes that resolved while the others are asked
            // again (one peer address nobody answers must not hold the whole QP).
            qp->transport->paths_changed(*qp, ctx_);
            activate(qp_index(qp->qpn));
        }
    }
    paths_pending_ = pending;
}

void Device::check_links() noexcept {
    for (unsigned p = 0; p < ports_.size(); ++p) {
        const bool up = admin_up_[p] && ports_[p].driver->link_up();
        if (up == link_was_up_[p]) continue;
        link_was_up_[p] = up;
        counters_.inc(up ? Counter::link_upped : Counter::link_downed);
        if (up)
            ctx_.port_up_mask = static_cast<std::uint8_t>(ctx_.port_up_mask | (1u << p));
        else
            ctx_.port_up_mask = static_cast<std::uint8_t>(ctx_.port_up_mask & ~(1u << p));
        ports_up_.store(ctx_.port_up_mask, std::memory_order_relaxed);
        for (rc::Qp* qp : live_qps_) {
            if (!qp->transport->link_change) continue;
            qp->transport->link_change(*qp, ctx_, p, up);
            activate(qp_index(qp->qpn));
        }
        if (on_link_change) on_link_change(p, up);
    }
}

CounterSnapshot Device::total_counters() const noexcept {
    CounterSnapshot sum = counters_.snapshot();
    for (const rc::Qp* qp : live_qps_) {
        const CounterSnapshot q = qp->counters.snapshot();
        for (std::size_t i = 0; i < kNumCounters; ++i)
            sum.v[i] += q.v[i];
    }
    return sum;
}

} // namespace droce
