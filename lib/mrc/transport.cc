/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * The MRC transport's table (rc::TransportOps), its QP rules and attributes, and the receive
 * dispatch by opcode.
 */
#include <cerrno>
#include <new>

#include "rc/pacer.h"
#include "state.h"

namespace droce::mrc {

using namespace detail;
using rc::Qp;
using wire::Opcode;

std::string_view to_string(EvState s) noexcept {
    switch (s) {
    case EvState::good:
        return "GOOD";
    case EvState::assumed_bad:
        return "ASSUMED_BAD";
    case EvState::denied:
        return "DENIED";
    }
    return "?";
}

namespace {

int create(Qp& qp) {
    auto* s = new (std::nothrow) State;
    if (s == nullptr) return ENOMEM;
    qp.transport_state.reset(s);
    return 0;
}

bool valid(const MrcAttr& a) noexcept {
    return a.mpr >= 1 && a.mpr <= kMaxMpr && a.mpr_dest >= 1 && a.mpr_dest <= kMaxMpr &&
           a.max_wimm >= 1 && a.max_wimm <= kMaxWimm && a.max_wimm_dest >= 1 &&
           a.max_wimm_dest <= kMaxWimm && a.timeout >= 1 && a.timeout <= kMaxTimeout &&
           a.linear_cnt <= kMaxLinearCnt && a.exp_cnt <= kExpCntInfinite && a.num_evs >= 1 &&
           a.num_evs <= kMaxEvs && a.min_active_evs <= a.num_evs && a.probe_successes >= 1 &&
           static_cast<std::uint32_t>(a.ev_base) + a.num_evs <= 0x10000u;
}

std::uint32_t run(Qp& qp, rc::TransportCtx& ctx, std::uint32_t budget,
                  bool* wait_release) noexcept {
    if (qp.state == rc::QpState::err) {
        if (!qp.sq.ready() && !qp.rq.ready()) return 0;
        rc::qp_enter_error(qp, ctx);
        if (qp.sq.ready()) *wait_release = true;
        return 1;
    }
    if (qp.state == rc::QpState::reset || qp.state == rc::QpState::init) return 0;
    State& s = state(qp);
    const std::uint64_t now = ctx.clock->now_ns();
    std::uint32_t work = responder_run(qp, s, ctx);
    work += paths_run(qp, s, ctx, now);
    work += requester_run(qp, s, ctx, budget, wait_release);
    return work;
}

bool has_work(const Qp& qp) noexcept {
    if (qp.state == rc::QpState::reset || qp.state == rc::QpState::init) return false;
    if (qp.state == rc::QpState::err) return qp.sq.ready() || qp.rq.ready();
    const State& s = state(qp);
    return responder_has_work(qp, s) || requester_has_work(qp, s);
}

void receive_request(Qp& qp, const wire::ParsedFrame& pkt, rc::TransportCtx& ctx) noexcept {
    // Data, probes and port status alike: a QP before RTR or in ERR answers nothing (a probe reply
    // would tell the peer a path to a dead QP is good).
    if (qp.state != rc::QpState::rtr && qp.state != rc::QpState::rts &&
        qp.state != rc::QpState::sqd)
        return;
    State& s = state(qp);
    switch (pkt.bth->opcode()) {
    case Opcode::MRC_WRITE:
    case Opcode::MRC_WRITE_LAST_WITH_IMMEDIATE:
        if (pkt.mdeth()->version != wire::kMrcVersion) break;
        data_receive(qp, s, pkt, ctx);
        return;
    case Opcode::MRC_PROBE:
        if (pkt.peth()->version != wire::kMrcVersion) break;
        probe_receive(qp, s, pkt, ctx);
        return;
    case Opcode::MRC_PORT_STATUS:
        if (pkt.epeth()->version != wire::kMrcVersion) break;
        port_status_receive(qp, s, pkt, ctx);
        return;
    default:
        break;
    }
    s.count(MrcCounter::bad_version);
}

void receive_response(Qp& qp, const wire::ParsedFrame& pkt, rc::TransportCtx& ctx) noexcept {
    State& s = state(qp);
    if (qp.state != rc::QpState::rts && qp.state != rc::QpState::sqd) return;
    switch (pkt.bth->opcode()) {
    case Opcode::MRC_SACK:
        if (pkt.seth()->version != wire::kMrcVersion) break;
        sack_receive(qp, s, pkt, ctx);
        return;
    case Opcode::MRC_NACK:
        if (pkt.neth()->version != wire::kMrcVersion) break;
        nack_receive(qp, s, pkt, ctx);
        return;
    case Opcode::MRC_PROBE_REPLY:
        if (pkt.peth()->version != wire::kMrcVersion) break;
        probe_reply_receive(s, pkt, ctx.clock->now_ns());
        return;
    default:
        break;
    }
    s.count(MrcCounter::bad_version);
}

void timer(Qp& qp, rc::TransportCtx& ctx) noexcept {
    if (qp.state != rc::QpState::rts && qp.state != rc::QpState::sqd) return;
    const std::uint64_t now = ctx.clock->now_ns();
    rc::pacer_on_time(qp, now);
    requester_timer(qp, state(qp), ctx, now);
}

std::uint64_t next_deadline(const Qp& qp) noexcept {
    if (qp.state != rc::QpState::rts && qp.state != rc::QpState::sqd) return 0;
    const State& s = state(qp);
    std::uint64_t d = 0;
    for (const std::uint64_t t : {s.ack_deadline_ns, s.rack_deadline_ns, paths_deadline(s),
                                  s.rtx_head != s.rtx_tail ? s.rtx_hold_until_ns : 0})
        if (t != 0 && (d == 0 || t < d)) d = t;
    return d;
}

int modify(Qp* qp, const rc::QpAttr& attr, std::uint32_t mask,
           std::span<const std::uint32_t> port_mtu, rc::TransportCtx& ctx) noexcept {
    const rc::QpState before = qp->state;
    if (const int err = rc::qp_modify(qp, attr, mask, port_mtu, ctx); err != 0) return err;
    State& s = state(*qp);
    if (qp->state == rc::QpState::reset) {
        responder_reset(s, Psn(0));
        requester_reset(s, Psn(0), qp->sq.consumer_index());
        s.remote_up_mask = 0xff;
        s.remote_ps_seen = false;
    } else if (qp->state == rc::QpState::rtr && before != rc::QpState::rtr) {
        responder_reset(s, Psn(qp->attr.rq_psn));
    } else if (qp->state == rc::QpState::rts && before == rc::QpState::rtr) {
        requester_reset(s, Psn(qp->attr.sq_psn), qp->sq.consumer_index());
    }
    return 0;
}

void paths_changed(Qp& qp, rc::TransportCtx& /*ctx*/) noexcept {
    build_evs(qp, state(qp));
}

void link_change(Qp& qp, rc::TransportCtx& ctx, unsigned port, bool up) noexcept {
    State& s = state(qp);
    if (!up && port < kMaxPlanes) planes_lost(s, static_cast<std::uint8_t>(1u << port));
    // Tell the peer (OCP MRC endpoint operation PORT_STATUS_UPDATE), a few copies on every plane
    // that is up, so it stops sending toward a dead plane (or comes back to a live one).
    ++s.ps_seq;
    s.ps_resend = 3;
    s.ps_due_ns = ctx.clock->now_ns();
}

std::span<const std::atomic<std::uint64_t>> counter_cells(const Qp& qp) noexcept {
    return state(qp).counters.cells();
}

} // namespace

int set_attr(Qp& qp, const MrcAttr& attr) noexcept {
    if (!is_mrc(qp) || !valid(attr)) return EINVAL;
    if (qp.state != rc::QpState::reset && qp.state != rc::QpState::init) return EBUSY;
    State& s = state(qp);
    s.attr = attr;
    s.explicit_evs = false; // num_evs paths from ev_base again (set_evs after this call)
    build_evs(qp, s);
    requester_reset(s, s.next_psn, qp.sq.consumer_index());
    return 0;
}

int set_requester_attr(Qp& qp, const MrcAttr& attr) noexcept {
    if (!is_mrc(qp)) return EINVAL;
    State& s = state(qp);
    MrcAttr a = s.attr;
    a.mpr = attr.mpr;
    a.max_wimm = attr.max_wimm;
    a.timeout = attr.timeout;
    a.linear_cnt = attr.linear_cnt;
    a.exp_cnt = attr.exp_cnt;
    if (!valid(a)) return EINVAL;
    if (qp.state != rc::QpState::reset && qp.state != rc::QpState::init &&
        qp.state != rc::QpState::rtr)
        return EBUSY;
    // The requester reads them when it starts (requester_reset at RTS) and as it sends: nothing
    // else to rebuild.
    s.attr = a;
    return 0;
}

const MrcAttr* get_attr(const Qp& qp) noexcept {
    return is_mrc(qp) ? &state(qp).attr : nullptr;
}

bool is_mrc(const Qp& qp) noexcept {
    // By family, not by table address: lib_mrc.so carries its own copy of this library, whose
    // table is another object with the same meaning.
    return qp.transport != nullptr && qp.transport->family == wire::Transport::mrc &&
           qp.transport_state != nullptr;
}

const MrcCounters* counters(const Qp& qp) noexcept {
    return is_mrc(qp) ? &state(qp).counters : nullptr;
}

const PlaneStats* plane_stats(const Qp& qp, unsigned plane) noexcept {
    return is_mrc(qp) && plane < kMaxPlanes ? &state(qp).planes[plane] : nullptr;
}

namespace {
EvInfo info_of(const Ev& e) noexcept {
    return EvInfo{e.hdr.udp_sport,  e.hdr.flow_label, e.plane, e.state,
                  e.avoid_until_ns, e.tx_pkts,        e.losses};
}
} // namespace

std::size_t ev_snapshot(const Qp& qp, std::span<EvInfo> out) noexcept {
    if (!is_mrc(qp)) return 0;
    const State& s = state(qp);
    const std::size_t n = std::min<std::size_t>(out.size(), s.num_evs);
    for (std::size_t i = 0; i < n; ++i) {
        out[i] = info_of(s.evs[i]);
    }
    return n;
}

bool ev_info(const Qp& qp, std::uint32_t ev, EvInfo& out) noexcept {
    if (!is_mrc(qp) || ev >= state(qp).num_evs) return false;
    out = info_of(state(qp).evs[ev]);
    return true;
}

int set_ev_denied(Qp& qp, std::uint32_t ev, bool deny) noexcept {
    if (!is_mrc(qp)) return EINVAL;
    State& s = state(qp);
    if (ev >= s.num_evs) return EINVAL;
    Ev& e = s.evs[ev];
    if (e.state == EvState::good) --s.good_evs;
    if (e.state == EvState::assumed_bad) --s.bad_evs;
    e.state = deny ? EvState::denied : EvState::good;
    if (e.state == EvState::good) ++s.good_evs;
    return 0;
}

int set_evs(Qp& qp, std::span<const EvSpec> evs) noexcept {
    if (!is_mrc(qp) || evs.empty() || evs.size() > kMaxEvs) return EINVAL;
    for (const EvSpec& e : evs)
        if (e.plane >= kMaxPlanes) return EINVAL;
    if (qp.state != rc::QpState::reset && qp.state != rc::QpState::init &&
        qp.state != rc::QpState::rtr)
        return EBUSY;
    State& s = state(qp);
    std::copy(evs.begin(), evs.end(), s.ev_specs.begin());
    s.explicit_evs = true;
    s.attr.num_evs = static_cast<std::uint16_t>(evs.size());
    s.attr.min_active_evs = std::min(s.attr.min_active_evs, s.attr.num_evs);
    s.num_evs = 0; // a new shape: every path starts afresh
    build_evs(qp, s);
    return 0;
}

int replace_ev(Qp& qp, std::uint32_t ev, std::uint16_t udp_sport,
               std::uint32_t flow_label) noexcept {
    if (!is_mrc(qp)) return EINVAL;
    State& s = state(qp);
    if (ev >= s.num_evs) return EINVAL;
    Ev& e = s.evs[ev];
    e.hdr.udp_sport = udp_sport;
    if (e.hdr.ipv6) e.hdr.flow_label = flow_label & 0xfffffu;
    if (s.explicit_evs) {
        s.ev_specs[ev].udp_sport = udp_sport;
        s.ev_specs[ev].flow_label = flow_label;
    }
    return 0;
}

int set_min_active_evs(Qp& qp, std::uint16_t min_active) noexcept {
    if (!is_mrc(qp)) return EINVAL;
    State& s = state(qp);
    if (min_active > s.attr.num_evs) return EINVAL;
    s.attr.min_active_evs = min_active;
    return 0;
}

void set_ev_event_hook(Qp& qp, EvEventFn fn, void* user) noexcept {
    if (!is_mrc(qp)) return;
    State& s = state(qp);
    s.ev_hook = fn;
    s.ev_hook_user = user;
}

WimmUse wimm_dest_use(const Qp& qp) noexcept {
    if (!is_mrc(qp)) return {};
    return WimmUse{state(qp).imm_count, state(qp).imm_max};
}

std::uint32_t max_psn_distance_rcvd(const Qp& qp) noexcept {
    return is_mrc(qp) ? state(qp).max_dist_rcvd : 0;
}

std::uint32_t max_psn_distance_sent(const Qp& qp) noexcept {
    return is_mrc(qp) ? state(qp).max_dist_sent : 0;
}

const rc::TransportOps kMrcTransport = {
    .name = "mrc",
    .run = &run,
    .has_work = &has_work,
    .receive_request = &receive_request,
    .receive_response = &receive_response,
    .timer = &timer,
    .next_deadline = &next_deadline,
    .modify = &modify,
    .send_opcodes = (1u << static_cast<unsigned>(rc::WrOpcode::rdma_write)) |
                    (1u << static_cast<unsigned>(rc::WrOpcode::rdma_write_with_imm)),
    .family = wire::Transport::mrc,
    .multiplane = true,
    .create = &create,
    .paths_changed = &paths_changed,
    .link_change = &link_change,
    .counter_names = kMrcCounterNames,
    .counter_cells = &counter_cells,
};

} // namespace droce::mrc
