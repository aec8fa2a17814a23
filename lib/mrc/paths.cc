/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * MRC paths: the entropy values of a QP bound to planes, the spray order, path health (GOOD,
 * ASSUMED_BAD, DENIED; congestion avoidance), background probes, and the port status exchange
 * with the peer (OCP MRC: EV states, ev_min_active, EV probes, PORT_STATUS_UPDATE).
 */
#include <algorithm>

#include "state.h"

namespace droce::mrc::detail {

using wire::Opcode;

bool stage_ctl(rc::Qp& qp, State& s, rc::TransportCtx& ctx, Opcode op, int ev,
               const wire::MrcCtlFields& body) noexcept {
    if (ev < 0) return false;
    const Ev& e = s.evs[static_cast<std::size_t>(ev)];
    if (!(s.resolved_planes & (1u << e.plane))) return false; // no MAC for that plane's peer yet
    wire::PacketFields f{};
    f.opcode = op;
    f.dest_qp = qp.attr.dest_qp_num;
    f.psn = Psn(body.nack_psn);
    f.mrc_ctl = &body;
    return ctx.tx->append(e.hdr, e.plane, qp.loopback_peer, f, {}, nullptr, &qp.counters);
}

void build_evs(rc::Qp& qp, State& s) noexcept {
    const unsigned planes = std::max<unsigned>(1, std::min<unsigned>(qp.num_paths, kMaxPlanes));
    const bool same_shape = s.num_evs == s.attr.num_evs && s.num_planes == planes;
    s.num_planes = static_cast<std::uint8_t>(planes);
    s.num_evs = s.attr.num_evs;
    s.plane_ev_count.fill(0);
    s.resolved_planes = 0;
    for (unsigned p = 0; p < planes; ++p)
        if (qp.paths[p].hdr.dst_mac != wire::MacAddr{})
            s.resolved_planes = static_cast<std::uint8_t>(s.resolved_planes | (1u << p));
    s.good_evs = 0;
    s.bad_evs = 0;
    for (std::uint16_t i = 0; i < s.num_evs; ++i) {
        Ev& e = s.evs[i];
        const EvSpec* spec = s.explicit_evs ? &s.ev_specs[i] : nullptr;
        // A path on a port the QP does not span (fewer remote planes than the profile names) rides
        // the plane of the same number modulo what exists.
        const auto plane = static_cast<std::uint8_t>(spec ? spec->plane % planes : i % planes);
        if (!same_shape) e = Ev{};
        if (!same_shape && spec && spec->denied) e.state = EvState::denied;
        e.plane = plane;
        e.hdr = qp.paths[plane].hdr;
        e.hdr.udp_sport = spec ? spec->udp_sport : static_cast<std::uint16_t>(s.attr.ev_base + i);
        // ECN-capable (ECT(0)): MRC tells congestion (a CE mark: avoid the path a while) from
        // failure (a loss: retire it), so switches must be able to mark its packets.
        e.hdr.tos = static_cast<std::uint8_t>((e.hdr.tos & ~3u) | 2u);
        // The IPv6 flow label carries the entropy value too (OCP MRC STEV: EV bits spread over the
        // flow label and the UDP source port), so ECMP on either field follows the path.
        if (e.hdr.ipv6)
            e.hdr.flow_label =
                spec ? spec->flow_label & 0xfffffu : (e.hdr.flow_label & 0xff000u) | i;
        s.plane_evs[plane][s.plane_ev_count[plane]++] = i;
        if (e.state == EvState::good) ++s.good_evs;
        if (e.state == EvState::assumed_bad) ++s.bad_evs;
    }
}

std::uint8_t usable_planes(const State& s, const rc::TransportCtx& ctx) noexcept {
    const auto all = static_cast<std::uint8_t>((1u << s.num_planes) - 1u);
    return static_cast<std::uint8_t>(ctx.port_up_mask & s.remote_up_mask & s.resolved_planes & all);
}

namespace {

/** Next GOOD path of @p plane, not avoided if one is not, never @p avoid_ev if another exists. */
int pick_in_plane(State& s, unsigned plane, std::uint64_t now, int avoid_ev) noexcept {
    const std::uint16_t n = s.plane_ev_count[plane];
    int fallback = -1;
    for (std::uint16_t k = 0; k < n; ++k) {
        const std::uint16_t slot = static_cast<std::uint16_t>((s.plane_cursor[plane] + k) % n);
        const std::uint16_t ev = s.plane_evs[plane][slot];
        const Ev& e = s.evs[ev];
        if (e.state != EvState::good) continue;
        if (static_cast<int>(ev) == avoid_ev || e.avoid_until_ns > now) {
            if (fallback < 0) fallback = ev;
            continue;
        }
        s.plane_cursor[plane] = static_cast<std::uint16_t>(slot + 1);
        return ev;
    }
    return fallback;
}

} // namespace

int pick_data_ev(State& s, const rc::TransportCtx& ctx, std::uint64_t now, int avoid_ev) noexcept {
    const std::uint8_t usable = usable_planes(s, ctx);
    int fallback = -1;
    for (unsigned k = 0; k < s.num_planes; ++k) {
        const unsigned plane = (s.plane_rr + k) % s.num_planes;
        if (!(usable & (1u << plane))) continue;
        const int ev = pick_in_plane(s, plane, now, avoid_ev);
        if (ev < 0) continue;
        // A retransmission prefers another plane than its lost copy's.
        if (avoid_ev >= 0 && s.evs[static_cast<std::size_t>(avoid_ev)].plane == plane &&
            s.num_planes > 1) {
            if (fallback < 0) fallback = ev;
            continue;
        }
        s.plane_rr = static_cast<std::uint8_t>((plane + 1) % s.num_planes);
        return ev;
    }
    return fallback;
}

int pick_ctl_ev(State& s, const rc::TransportCtx& ctx, unsigned plane) noexcept {
    const std::uint8_t usable = usable_planes(s, ctx);
    for (unsigned k = 0; k < s.num_planes; ++k) {
        const unsigned p = (plane + k) % s.num_planes;
        if (!(usable & (1u << p)) || s.plane_ev_count[p] == 0) continue;
        const std::uint16_t slot = s.ctl_cursor[p]++ % s.plane_ev_count[p];
        return s.plane_evs[p][slot];
    }
    return -1;
}

void ev_lost(State& s, std::uint16_t ev, std::uint64_t now, std::uint8_t usable) noexcept {
    Ev& e = s.evs[ev];
    ++e.losses;
    if (e.state != EvState::good) return;
    // The floor counts paths that can carry traffic now: GOOD paths on a dead plane keep nothing
    // alive.
    std::uint32_t live = 0;
    for (unsigned p = 0; p < s.num_planes; ++p) {
        if (!(usable & (1u << p))) continue;
        for (std::uint16_t k = 0; k < s.plane_ev_count[p]; ++k)
            live += s.evs[s.plane_evs[p][k]].state == EvState::good;
    }
    if (live <= s.attr.min_active_evs) {
        s.count(MrcCounter::ev_floor_kept);
        return;
    }
    e.state = EvState::assumed_bad;
    e.probe_ok = 0;
    e.probe_out = false;
    e.probe_due_ns = now + s.attr.probe_interval_ns;
    --s.good_evs;
    ++s.bad_evs;
    if (s.next_probe_ns == 0 || e.probe_due_ns < s.next_probe_ns) s.next_probe_ns = e.probe_due_ns;
    s.count(MrcCounter::ev_assumed_bad);
    s.ev_event(ev, EvState::assumed_bad);
}

void ev_avoid(State& s, std::uint16_t ev, std::uint64_t now) noexcept {
    s.evs[ev].avoid_until_ns = now + s.attr.ecn_avoid_ns;
}

std::uint32_t paths_run(rc::Qp& qp, State& s, rc::TransportCtx& ctx, std::uint64_t now) noexcept {
    std::uint32_t staged = 0;
    if (s.ps_resend > 0 && now >= s.ps_due_ns) {
        // One copy on every plane that is up here: the peer hears it unless every one is lost.
        for (unsigned p = 0; p < s.num_planes; ++p) {
            if (!(ctx.port_up_mask & (1u << p))) continue;
            wire::MrcCtlFields& c = s.next_ctl();
            c.op = static_cast<std::uint8_t>(wire::EndpointOp::port_status);
            c.port_mask = ctx.port_up_mask;
            c.seq = s.ps_seq;
            const std::uint16_t slot =
                s.ctl_cursor[p]++ % std::max<std::uint16_t>(1, s.plane_ev_count[p]);
            if (stage_ctl(qp, s, ctx, Opcode::MRC_PORT_STATUS, s.plane_evs[p][slot], c)) {
                s.count(MrcCounter::port_status_sent);
                ++staged;
            }
        }
        --s.ps_resend;
        s.ps_due_ns = now + std::max<std::uint64_t>(s.attr.probe_interval_ns, 1000);
    }
    if (s.bad_evs > 0 && s.next_probe_ns != 0 && now >= s.next_probe_ns) {
        const std::uint8_t usable = usable_planes(s, ctx);
        std::uint64_t next = 0;
        for (std::uint16_t i = 0; i < s.num_evs; ++i) {
            Ev& e = s.evs[i];
            if (e.state != EvState::assumed_bad) continue;
            if (e.probe_due_ns <= now && (usable & (1u << e.plane))) {
                // Unanswered for four intervals: a failure (a reply only late, behind a queue,
                // still counts while it is within that).
                if (e.probe_out && now - e.probe_out_since_ns >= 4 * s.attr.probe_interval_ns) {
                    e.probe_ok = 0;
                    e.probe_out = false;
                }
                wire::MrcCtlFields& c = s.next_ctl();
                c.path = i;
                c.seq = ++s.probe_seq;
                c.timestamp_ns = now;
                if (!stage_ctl(qp, s, ctx, Opcode::MRC_PROBE, i, c)) break; // no room: next pass
                e.probe_seq = c.seq;
                if (!e.probe_out) {
                    e.probe_first_seq = c.seq;
                    e.probe_out_since_ns = now;
                }
                e.probe_out = true;
                e.probe_due_ns = now + s.attr.probe_interval_ns;
                s.count(MrcCounter::probes_sent);
                ++staged;
            }
            const std::uint64_t due = std::max(e.probe_due_ns, now + 1);
            if (next == 0 || due < next) next = due;
        }
        s.next_probe_ns = next;
    }
    return staged;
}

void probe_receive(rc::Qp& qp, State& s, const wire::ParsedFrame& pkt,
                   rc::TransportCtx& ctx) noexcept {
    const wire::Peth* p = pkt.peth();
    wire::MrcCtlFields& c = s.next_ctl();
    c.path = p->path.get();
    c.seq = p->seq.get();
    c.timestamp_ns = p->timestamp_ns.get();
    (void)stage_ctl(qp, s, ctx, Opcode::MRC_PROBE_REPLY, pick_ctl_ev(s, ctx, ctx.rx_port), c);
}

void probe_reply_receive(State& s, const wire::ParsedFrame& pkt, std::uint64_t now) noexcept {
    const wire::Peth* p = pkt.peth();
    const std::uint16_t ev = p->path.get();
    if (ev >= s.num_evs) {
        s.count(MrcCounter::stale_feedback);
        return;
    }
    Ev& e = s.evs[ev];
    const std::uint32_t seq = p->seq.get();
    if (e.state != EvState::assumed_bad || !e.probe_out ||
        static_cast<std::int32_t>(seq - e.probe_first_seq) < 0 ||
        static_cast<std::int32_t>(e.probe_seq - seq) < 0) {
        s.count(MrcCounter::stale_feedback);
        return;
    }
    s.count(MrcCounter::probe_replies_rcvd);
    e.probe_out = false;
    if (++e.probe_ok < s.attr.probe_successes) return;
    e.state = EvState::good;
    e.avoid_until_ns = 0;
    ++s.good_evs;
    --s.bad_evs;
    s.count(MrcCounter::ev_restored);
    s.ev_event(ev, EvState::good);
    (void)now;
}

void set_remote_ports(rc::Qp& /*qp*/, State& s, std::uint8_t mask,
                      rc::TransportCtx& /*ctx*/) noexcept {
    const std::uint8_t lost = static_cast<std::uint8_t>(s.remote_up_mask & ~mask);
    s.remote_up_mask = mask;
    if (lost) planes_lost(s, lost);
}

void port_status_receive(rc::Qp& qp, State& s, const wire::ParsedFrame& pkt,
                         rc::TransportCtx& ctx) noexcept {
    const wire::Epeth* e = pkt.epeth();
    if (e->op != static_cast<std::uint8_t>(wire::EndpointOp::port_status)) return;
    const std::uint32_t seq = e->seq.get();
    // Serial-number order: a copy older than the last one applied changes nothing.
    if (s.remote_ps_seen && static_cast<std::int32_t>(seq - s.remote_ps_seq) <= 0) return;
    s.remote_ps_seen = true;
    s.remote_ps_seq = seq;
    s.count(MrcCounter::port_status_rcvd);
    set_remote_ports(qp, s, e->port_mask, ctx);
}

std::uint64_t paths_deadline(const State& s) noexcept {
    std::uint64_t d = 0;
    if (s.bad_evs > 0) d = s.next_probe_ns;
    if (s.ps_resend > 0 && (d == 0 || s.ps_due_ns < d)) d = s.ps_due_ns;
    return d;
}

} // namespace droce::mrc::detail
