/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * The MRC requester: sprays WRITE packets over the paths, takes SACKs and NACKs, finds losses
 * (NACK, RACK on the SACKs, ACK timeout), retransmits only the holes on another path, and completes
 * WQEs in order once the cumulative PSN passes their last packet.
 *
 * Windows: a new PSN leaves only while next_psn - cum < MPR (the smaller of this QP's mpr and the
 * peer's advertised mpr_dest, in 128-PSN units), while the packets in flight are under max_inflight
 * (when set) and, for the first packet of a WRITE with immediate, while fewer than max_wimm are in
 * flight. Retransmissions go first and need no window (their PSNs are inside it already).
 *
 * Loss detection (RACK, RFC 8985, adapted): a SACK tells which packet sent latest has arrived
 * (rack_send_ns) and its round trip (rack_rtt_ns); a hole sent before it is lost once
 * rack_rtt_ns + reorder window passed since it was sent. Reordering shorter than that window
 * causes no retransmission. A hole with nothing sent after it (the tail) is found by the ACK timer.
 */
#include <algorithm>
#include <array>
#include <span>

#include "rc/pacer.h"
#include "state.h"

namespace droce::mrc::detail {

using rc::Qp;
using rc::SqWqe;
using rc::WcStatus;
using rc::WqeState;
using rc::WrOpcode;
using wire::Opcode;

namespace {

std::uint32_t packets_of(std::uint32_t len, std::uint32_t mtu) noexcept {
    return len == 0 ? 1u
                    : static_cast<std::uint32_t>((static_cast<std::uint64_t>(len) + mtu - 1) / mtu);
}

std::uint32_t mpr_psns(const State& s) noexcept {
    const std::uint32_t units = std::min<std::uint32_t>(s.attr.mpr, s.peer_mpr_dest);
    return std::min(kWindow, std::max<std::uint32_t>(units, 1) * wire::kMprUnit);
}

void arm_ack_timer(State& s, std::uint64_t now) noexcept {
    s.ack_deadline_ns = now + (timeout_ns(s.attr.timeout) << s.backoff_shift);
}

/** No plane can carry the next packet: counted, and the ACK timer armed, since nothing may be in
 *  flight to arm it: without it a QP with no usable plane would wait for ever instead of spending
 *  its retries (requester_timer). */
void no_usable_plane(State& s, std::uint64_t now) noexcept {
    s.count(MrcCounter::no_path);
    if (s.ack_deadline_ns == 0) arm_ack_timer(s, now);
}

/** Something was acknowledged: the retry budget is whole again (OCP: retries count per stall). */
void progress(State& s, std::uint64_t now) noexcept {
    s.linear_left = s.attr.linear_cnt;
    s.exp_left = s.attr.exp_cnt;
    s.backoff_shift = 0;
    if (s.cum != s.next_psn)
        arm_ack_timer(s, now);
    else
        s.ack_deadline_ns = 0;
}

void declare_lost(State& s, PsnEntry& e, LossCause cause) noexcept {
    if (e.sacked || e.lost) return;
    e.lost = true;
    e.cause = cause;
    if (s.inflight > 0) --s.inflight;
    s.rtx[s.rtx_tail++ & kWindowMask] = e.psn;
}

/** Marks PSN @p p delivered. @return true when it was not known before. */
bool mark_delivered(State& s, Psn p, std::uint64_t now) noexcept {
    PsnEntry& e = s.entry(p);
    if (e.psn != p.value() || e.sacked) return false;
    e.sacked = true;
    if (!e.lost && s.inflight > 0) --s.inflight;
    e.lost = false;
    if (e.tx_count == 1) { // Karn: a resent packet's echo may be its first copy's
        const std::uint64_t rtt = now - e.send_ns;
        if (s.min_rtt_ns == 0 || rtt < s.min_rtt_ns) s.min_rtt_ns = rtt;
        if (s.srtt_ns == 0) {
            s.srtt_ns = rtt;
            s.rttvar_ns = rtt / 2;
        } else {
            const std::uint64_t dev = rtt > s.srtt_ns ? rtt - s.srtt_ns : s.srtt_ns - rtt;
            s.rttvar_ns = (3 * s.rttvar_ns + dev) / 4;
            s.srtt_ns = (7 * s.srtt_ns + rtt) / 8;
        }
        if (e.send_ns > s.rack_send_ns) s.rack_send_ns = e.send_ns;
        const unsigned plane = s.evs[e.ev].plane;
        if (e.plane_seq > s.plane_delivered[plane]) s.plane_delivered[plane] = e.plane_seq;
    }
    if (p.distance_from(s.highest_sacked) >= 0) s.highest_sacked = p + 1;
    return true;
}

/**
 * Loss detection over the holes between cum and the highest PSN known delivered. A hole is lost
 * when its plane delivered reorder_pkts packets sent after it (a plane is one set of queues: what
 * went in after it came out), or, for a plane that delivers nothing any more, when a packet sent
 * after it on any plane arrived and a retransmission timeout (srtt + 4 rttvar, RFC 6298) plus the
 * reorder window passed since it left.
 */
void detect_losses(State& s, const rc::TransportCtx& ctx, std::uint64_t now) noexcept {
    s.rack_deadline_ns = 0;
    if (s.highest_sacked.distance_from(s.cum) <= 0 || s.rack_send_ns == 0) return;
    const std::uint64_t wait = s.srtt_ns + 4 * s.rttvar_ns + s.attr.reorder_window_ns;
    for (Psn p = s.cum; p != s.highest_sacked; ++p) {
        PsnEntry& e = s.entry(p);
        if (e.sacked || e.lost || e.psn != p.value()) continue;
        const unsigned plane = s.evs[e.ev].plane;
        const bool overtaken = s.plane_delivered[plane] >= e.plane_seq + s.attr.reorder_pkts;
        const bool overdue = e.send_ns < s.rack_send_ns && now >= e.send_ns + wait;
        if (overtaken || overdue) {
            s.planes[plane % kMaxPlanes].losses.fetch_add(1, std::memory_order_relaxed);
            ev_lost(s, e.ev, now, usable_planes(s, ctx));
            declare_lost(s, e, LossCause::rack);
        } else if (e.send_ns < s.rack_send_ns &&
                   (s.rack_deadline_ns == 0 || e.send_ns + wait < s.rack_deadline_ns)) {
            s.rack_deadline_ns = e.send_ns + wait;
        }
    }
}

/**
 * @p w failed a local check: it completes with @p status once it is the oldest WQE, and the QP
 * goes to ERR (as RC, IBTA §10.7.3.1).
 */
void fail_local(Qp& qp, State& s, rc::TransportCtx& ctx, SqWqe& w, WcStatus status) noexcept {
    if (status == WcStatus::loc_prot_err) qp.counters.inc(Counter::local_protection_err);
    qp.fail_wqe(w, WqeState::local_error, status);
    if (qp.sq.consumer_index() != s.next_wqe) return; // earlier WQEs complete first (reap)
    w.state = WqeState::error_due;
    rc::qp_enter_error(qp, ctx);
}

/** Completes WQEs, in order, whose every packet is acknowledged. @return a release is awaited. */
bool reap(Qp& qp, State& s, rc::TransportCtx& ctx) noexcept {
    while (qp.sq.ready() > 0 && qp.state != rc::QpState::err) {
        const std::uint32_t idx = qp.sq.consumer_index();
        SqWqe& w = qp.sq.slot(idx);
        if (w.state == WqeState::local_error) {
            w.state = WqeState::error_due;
            rc::qp_enter_error(qp, ctx);
            return false;
        }
        if (w.state != WqeState::sent || w.last_psn().distance_from(s.cum) >= 0) return false;
        if (!qp.tx_released(idx)) return true;
        if (w.opcode == WrOpcode::rdma_write_with_imm && s.wimm_inflight > 0) --s.wimm_inflight;
        rc::complete_send_wqe(qp, qp.sq_sig_all || (w.send_flags & rc::kSendSignaled),
                              WcStatus::success, w.length);
    }
    return false;
}

/** A fatal NACK for the WQE at @p wqe_index: it completes with @p status, the QP goes to ERR. */
void fail_remote(Qp& qp, State& s, rc::TransportCtx& ctx, std::uint32_t wqe_index,
                 WcStatus status) noexcept {
    for (std::uint32_t i = qp.sq.consumer_index(); i != wqe_index; ++i) {
        SqWqe& w = qp.sq.slot(i);
        if (w.state == WqeState::sent && w.last_psn().distance_from(s.cum) < 0)
            w.state = WqeState::acked;
    }
    SqWqe& w = qp.sq.slot(wqe_index);
    qp.fail_wqe(w, WqeState::error_due, status);
    rc::qp_enter_error(qp, ctx);
}

/** Stages data packet @p e (its PSN, WQE and offset) on path @p ev.
 * @return 1 staged, 0 no room this pass, -1 an SGE no longer passes its lkey check. */
int stage_data(Qp& qp, State& s, rc::TransportCtx& ctx, const PsnEntry& e, int ev,
               bool retransmit) noexcept {
    SqWqe& w = qp.sq.slot(e.wqe_index);
    std::array<std::span<const std::uint8_t>, rc::kMaxSge> spans;
    const int nspans = rc::gather_payload(qp, ctx, w, e.offset, e.len, spans);
    if (nspans < 0) return -1;
    wire::PacketFields f{};
    f.opcode = e.last && w.opcode == WrOpcode::rdma_write_with_imm
                   ? Opcode::MRC_WRITE_LAST_WITH_IMMEDIATE
                   : Opcode::MRC_WRITE;
    f.dest_qp = qp.attr.dest_qp_num;
    f.psn = Psn(e.psn);
    f.va = w.remote_addr + e.offset;
    f.rkey = w.rkey;
    f.dma_len = e.len;
    f.imm = w.imm_data;
    f.solicited =
        e.last && (w.send_flags & rc::kSendSolicited) && w.opcode == WrOpcode::rdma_write_with_imm;
    f.mrc_flags = static_cast<std::uint8_t>((e.offset == 0 ? wire::kMdethFirst : 0) |
                                            (e.last ? wire::kMdethLast : 0) |
                                            (retransmit ? wire::kMdethRetransmit : 0));
    f.mrc_path = static_cast<std::uint16_t>(ev);
    f.mrc_msn = e.wqe_index;
    f.mrc_msg_offset = e.offset;
    f.mrc_msg_length = w.length;
    TxRef* ref = nspans > 0 && !(w.send_flags & rc::kSendInline) ? qp.tx_ref(e.wqe_index) : nullptr;
    Ev& path = s.evs[static_cast<std::size_t>(ev)];
    if (!ctx.tx->append(path.hdr, path.plane, qp.loopback_peer, f,
                        std::span<const std::span<const std::uint8_t>>(
                            spans.data(), static_cast<std::size_t>(nspans)),
                        ref, &qp.counters)) {
        qp.counters.inc(Counter::tx_no_buffer);
        return 0;
    }
    if (rc::pacer_active(qp))
        rc::pacer_sent(qp, wire::frame_length(path.hdr, f.opcode, e.len), ctx.clock->now_ns(),
                       ctx.prev_pass_start_ns);
    ++path.tx_pkts;
    PlaneStats& ps = s.planes[path.plane];
    ps.tx_pkts.fetch_add(1, std::memory_order_relaxed);
    ps.tx_bytes.fetch_add(e.len, std::memory_order_relaxed);
    if (retransmit) ps.retransmits.fetch_add(1, std::memory_order_relaxed);
    return 1;
}

} // namespace

void requester_reset(State& s, Psn sq_psn, std::uint32_t first_wqe) noexcept {
    s.cum = s.next_psn = s.highest_sacked = sq_psn;
    s.next_wqe = first_wqe;
    s.inflight = 0;
    s.wimm_inflight = 0;
    s.rtx_head = s.rtx_tail = 0;
    s.rtx_hold_until_ns = 0;
    s.rack_send_ns = s.srtt_ns = s.rttvar_ns = s.min_rtt_ns = 0;
    s.plane_seq.fill(0);
    s.plane_delivered.fill(0);
    s.rack_deadline_ns = 0;
    s.ack_deadline_ns = 0;
    s.linear_left = s.attr.linear_cnt;
    s.exp_left = s.attr.exp_cnt;
    s.backoff_shift = 0;
    s.max_dist_sent = 0;
    s.peer_mpr_dest = kMaxMpr;
    for (PsnEntry& e : s.psn)
        e = PsnEntry{};
}

void planes_lost(State& s, std::uint8_t planes) noexcept {
    for (Psn p = s.cum; p != s.next_psn; ++p) {
        PsnEntry& e = s.entry(p);
        if (e.psn == p.value() && (planes & (1u << s.evs[e.ev].plane)))
            declare_lost(s, e, LossCause::plane_down);
    }
}

std::uint32_t requester_run(Qp& qp, State& s, rc::TransportCtx& ctx, std::uint32_t budget,
                            bool* wait_release) noexcept {
    if (qp.sq.consumer_index() != s.next_wqe && reap(qp, s, ctx)) *wait_release = true;
    if (qp.state != rc::QpState::rts && qp.state != rc::QpState::sqd) return 0;
    // Planes whose peer is not resolved are not usable (build_evs): with none resolved nothing
    // leaves, and WQEs that wait arm the ACK timer (no_usable_plane), so a peer nobody answers
    // for fails the QP after its retries, as a dead link does.
    if (s.resolved_planes == 0) qp.counters.inc(Counter::tx_wait_neigh);
    const std::uint64_t now = ctx.clock->now_ns();
    const std::uint32_t mtu = qp.mtu;
    std::uint32_t sent = 0;
    while (sent < budget) {
        if (rc::pacer_blocked(qp, now)) break; // DCQCN or a rate limit: not yet
        // ---- holes first: their PSNs hold the cumulative PSN back
        if (s.rtx_head != s.rtx_tail && now >= s.rtx_hold_until_ns) {
            const Psn p(s.rtx[s.rtx_head & kWindowMask]);
            PsnEntry& e = s.entry(p);
            if (p.distance_from(s.cum) < 0 || e.psn != p.value() || e.sacked || !e.lost) {
                ++s.rtx_head;
                continue;
            }
            const int ev = pick_data_ev(s, ctx, now, e.ev);
            if (ev < 0) {
                no_usable_plane(s, now);
                break;
            }
            const int r = stage_data(qp, s, ctx, e, ev, true);
            if (r < 0) { // the MR went away under a message in flight
                qp.counters.inc(Counter::local_protection_err);
                fail_remote(qp, s, ctx, e.wqe_index, WcStatus::loc_prot_err);
                break;
            }
            if (r == 0) break;
            ++s.rtx_head;
            e.lost = false;
            ++e.tx_count;
            e.send_ns = now;
            e.ev = static_cast<std::uint16_t>(ev);
            e.plane_seq = ++s.plane_seq[s.evs[e.ev].plane];
            ++s.inflight;
            s.count(MrcCounter::retransmits);
            qp.counters.inc(Counter::retransmitted_pkts);
            switch (e.cause) {
            case LossCause::nack:
                s.count(MrcCounter::retransmit_nack);
                break;
            case LossCause::rack:
            case LossCause::plane_down:
                s.count(MrcCounter::retransmit_rack);
                break;
            case LossCause::timeout:
                s.count(MrcCounter::retransmit_timeout);
                break;
            case LossCause::none:
                break;
            }
            if (s.ack_deadline_ns == 0) arm_ack_timer(s, now);
            ++sent;
            continue;
        }
        // ---- new packets
        if (s.next_wqe == qp.sq.producer_index()) break;
        SqWqe& w = qp.sq.slot(s.next_wqe);
        if (w.state == WqeState::local_error) break;
        if (s.attr.max_inflight != 0 && s.inflight >= s.attr.max_inflight) break;
        const auto dist = static_cast<std::uint32_t>(s.next_psn.distance_from(s.cum));
        if (dist >= mpr_psns(s)) break;
        if (w.state == WqeState::posted) {
            if (qp.state == rc::QpState::sqd) break;
            const bool imm = w.opcode == WrOpcode::rdma_write_with_imm;
            if (imm && s.wimm_inflight >= s.attr.max_wimm) break;
            const WcStatus st = rc::check_send_wqe(qp, ctx, w);
            if (st != WcStatus::success) {
                w.npkts = 0;
                fail_local(qp, s, ctx, w, st);
                break;
            }
            w.first_psn = s.next_psn;
            w.npkts = packets_of(w.length, mtu);
            w.sent_bytes = 0;
            w.state = WqeState::sending;
            if (imm) ++s.wimm_inflight;
        }
        const int ev = pick_data_ev(s, ctx, now, -1);
        if (ev < 0) {
            no_usable_plane(s, now);
            break;
        }
        PsnEntry& e = s.entry(s.next_psn);
        PsnEntry fresh{};
        fresh.psn = s.next_psn.value();
        fresh.wqe_index = s.next_wqe;
        fresh.offset = w.sent_bytes;
        fresh.len = std::min(w.length - w.sent_bytes, mtu);
        fresh.last = w.sent_bytes + fresh.len == w.length;
        fresh.send_ns = now;
        fresh.ev = static_cast<std::uint16_t>(ev);
        fresh.tx_count = 1;
        const int r = stage_data(qp, s, ctx, fresh, ev, false);
        if (r < 0) {
            fail_local(qp, s, ctx, w, WcStatus::loc_prot_err);
            break;
        }
        if (r == 0) break;
        e = fresh;
        e.plane_seq = ++s.plane_seq[s.evs[e.ev].plane];
        s.count(MrcCounter::data_pkts_sent);
        s.max_dist_sent = std::max(s.max_dist_sent, dist + 1);
        ++s.next_psn;
        ++s.inflight;
        w.sent_bytes += fresh.len;
        if (fresh.last) {
            w.state = WqeState::sent;
            ++s.next_wqe;
        }
        if (s.ack_deadline_ns == 0) arm_ack_timer(s, now);
        ++sent;
    }
    return sent;
}

void sack_receive(Qp& qp, State& s, const wire::ParsedFrame& pkt, rc::TransportCtx& ctx) noexcept {
    const wire::Seth* h = pkt.seth();
    s.count(MrcCounter::sacks_rcvd);
    const std::uint64_t now = ctx.clock->now_ns();
    const Psn cum(h->cum_psn.get());
    const std::int32_t ahead = cum.distance_from(s.cum);
    if (ahead > 0 && cum.distance_from(s.next_psn) > 0) {
        s.count(MrcCounter::stale_feedback); // acknowledges what was never sent: nothing of it
        return;
    }
    // The peer's state (its MPR window, its ports) only from a SACK no older than the newest
    // applied: one delayed on another plane, or forged, must not take planes away for good. A
    // SACK left the peer on one of its ports, so it cannot say that none is up.
    if (ahead >= 0) {
        if (h->mpr_dest != 0) s.peer_mpr_dest = std::min<std::uint8_t>(h->mpr_dest, kMaxMpr);
        if (h->port_mask != 0 && h->port_mask != s.remote_up_mask)
            set_remote_ports(qp, s, h->port_mask, ctx);
    }
    if (h->flags & wire::kSethEcnEcho) {
        s.count(MrcCounter::ecn_echo_rcvd);
        const std::uint16_t ev = h->path.get();
        if (ev < s.num_evs) ev_avoid(s, ev, now);
    }
    bool advanced = false;
    if (ahead > 0) {
        for (Psn p = s.cum; p != cum; ++p)
            (void)mark_delivered(s, p, now);
        s.cum = cum;
        if (s.highest_sacked.distance_from(s.cum) < 0) s.highest_sacked = s.cum;
        advanced = true;
    }
    const Psn base(h->sack_base.get());
    for (std::uint32_t word = 0; word < wire::kSackBits / 64; ++word) {
        std::uint64_t bits = h->bitmap[word].get();
        while (bits) {
            const unsigned bit = static_cast<unsigned>(__builtin_ctzll(bits));
            bits &= bits - 1;
            const Psn p = base + (word * 64 + bit);
            if (p.distance_from(s.cum) < 0 || p.distance_from(s.next_psn) >= 0) continue;
            if (mark_delivered(s, p, now)) advanced = true;
        }
    }
    if (advanced) progress(s, now);
    detect_losses(s, ctx, now);
    (void)reap(qp, s, ctx);
}

void nack_receive(Qp& qp, State& s, const wire::ParsedFrame& pkt, rc::TransportCtx& ctx) noexcept {
    const wire::Neth* h = pkt.neth();
    s.count(MrcCounter::nacks_rcvd);
    const std::uint64_t now = ctx.clock->now_ns();
    const Psn p(h->psn.get());
    PsnEntry& e = s.entry(p);
    if (p.distance_from(s.cum) < 0 || p.distance_from(s.next_psn) >= 0 || e.psn != p.value() ||
        e.sacked) {
        s.count(MrcCounter::stale_feedback);
        return;
    }
    switch (static_cast<wire::NackReason>(h->reason)) {
    case wire::NackReason::trimmed:
        ev_avoid(s, e.ev, now); // congestion on that path, not a failure
        declare_lost(s, e, LossCause::nack);
        break;
    case wire::NackReason::mpr_exceeded:
        declare_lost(s, e, LossCause::nack);
        break;
    case wire::NackReason::wimm_exceeded:
        // The responder holds max_wimm_dest immediates (its receive queue ran dry): try again
        // after a while, as after an RNR NAK.
        declare_lost(s, e, LossCause::nack);
        s.rtx_hold_until_ns = now + s.attr.probe_interval_ns;
        break;
    case wire::NackReason::remote_access:
        fail_remote(qp, s, ctx, e.wqe_index, WcStatus::rem_access_err);
        break;
    case wire::NackReason::invalid_request:
        fail_remote(qp, s, ctx, e.wqe_index, WcStatus::rem_inv_req_err);
        break;
    default:
        // Not a reason of this format version: dropped, as a packet of an unknown version is, not
        // taken for a fatal one (a forged NACK would otherwise end the QP with any byte there).
        s.count(MrcCounter::bad_nack_reason);
        break;
    }
}

void requester_timer(Qp& qp, State& s, rc::TransportCtx& ctx, std::uint64_t now) noexcept {
    if (s.rack_deadline_ns != 0 && now >= s.rack_deadline_ns) detect_losses(s, ctx, now);
    if (s.ack_deadline_ns == 0 || now < s.ack_deadline_ns) return;
    // Nothing outstanding, and nothing waiting that no plane can carry: the timer has no job. With
    // WQEs waiting and no usable plane (every local port down, or the peer's port status says all
    // of its planes are), a timeout counts as a retry, so the QP fails with RETRY_EXC_ERR when the
    // budget is spent, as an RC QP on a dead link does, instead of waiting for ever.
    if (s.cum == s.next_psn &&
        (s.next_wqe == qp.sq.producer_index() || usable_planes(s, ctx) != 0)) {
        s.ack_deadline_ns = 0;
        return;
    }
    s.count(MrcCounter::ack_timeouts);
    if (s.linear_left > 0) {
        --s.linear_left;
    } else if (s.exp_left > 0) {
        if (s.attr.exp_cnt != kExpCntInfinite) --s.exp_left;
        if (s.backoff_shift < 30) ++s.backoff_shift;
    } else {
        // Linear and exponential retries spent: the oldest outstanding WQE fails (as RC's
        // retry_cnt, IBTA §9.7.6.1.3: Transport Retry Counter Exceeded).
        const PsnEntry& e = s.entry(s.cum);
        const std::uint32_t idx = e.psn == s.cum.value() ? e.wqe_index : qp.sq.consumer_index();
        qp.counters.inc(Counter::retry_exceeded_err);
        fail_remote(qp, s, ctx, idx, WcStatus::retry_exc_err);
        s.ack_deadline_ns = 0;
        return;
    }
    // Everything unacknowledged is overdue by a whole timeout: send it all again, each on another
    // path, and take the paths it was lost on out of service.
    for (Psn p = s.cum; p != s.next_psn; ++p) {
        PsnEntry& e = s.entry(p);
        if (e.psn != p.value() || e.sacked || e.lost) continue;
        ev_lost(s, e.ev, now, usable_planes(s, ctx));
        declare_lost(s, e, LossCause::timeout);
    }
    arm_ack_timer(s, now);
}

bool requester_has_work(const Qp& qp, const State& s) noexcept {
    if (qp.state != rc::QpState::rts && qp.state != rc::QpState::sqd) return false;
    return s.rtx_head != s.rtx_tail || s.next_wqe != qp.sq.producer_index() ||
           qp.sq.consumer_index() != s.next_wqe;
}

} // namespace droce::mrc::detail
