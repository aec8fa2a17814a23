/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * The MRC responder: places each WRITE packet on arrival, in any order (its RETH names its own
 * bytes), tracks arrived PSNs in a bitmap over the MPR window, answers with SACKs (coalesced: one
 * per received burst, per 256-PSN block touched) and NACKs (trimmed packet, MPR exceeded, too many
 * immediates, access error), and releases immediates in message order.
 *
 * Placement is idempotent: a copy of a packet already placed (a retransmission that crossed its
 * SACK) is not written again and only refreshes the SACK. An immediate waits until the cumulative
 * PSN passes its last packet (its message and every earlier one arrived) and a receive WQE is
 * posted; at most max_wimm_dest wait at once, a further one is refused with a NACK and not placed.
 */
#include <algorithm>
#include <cstring>

#include "state.h"

namespace droce::mrc::detail {

using rc::Qp;
using wire::Opcode;

namespace {

bool arrived(const State& s, Psn p) noexcept {
    const std::uint32_t i = p.value() & kWindowMask;
    return (s.r_bitmap[i / 64] >> (i % 64)) & 1u;
}
void set_arrived(State& s, Psn p, bool v) noexcept {
    const std::uint32_t i = p.value() & kWindowMask;
    if (v)
        s.r_bitmap[i / 64] |= 1ull << (i % 64);
    else
        s.r_bitmap[i / 64] &= ~(1ull << (i % 64));
}

void mark_dirty(State& s, Psn p) noexcept {
    const std::uint32_t base = p.value() & ~(wire::kSackBits - 1) & Psn::kMask;
    for (std::uint32_t i = 0; i < s.num_dirty; ++i) {
        if (s.dirty[i].base != base) continue;
        s.dirty[i].reports = 2;
        return;
    }
    if (s.num_dirty < kMaxDirtyBlocks) s.dirty[s.num_dirty++] = State::DirtyBlock{base, 2};
}

void nack(Qp& qp, State& s, rc::TransportCtx& ctx, Psn p, std::uint16_t path,
          wire::NackReason why) noexcept {
    wire::MrcCtlFields& c = s.next_ctl();
    c.reason = static_cast<std::uint8_t>(why);
    c.path = path;
    c.nack_psn = p.value();
    c.cum_psn = s.r_cum.value();
    if (stage_ctl(qp, s, ctx, Opcode::MRC_NACK, pick_ctl_ev(s, ctx, ctx.rx_port), c))
        s.count(MrcCounter::nacks_sent);
    else
        qp.counters.inc(Counter::tx_no_buffer); // the requester's RACK or timer recovers
}

/** Fills SACK block @p base: PSNs before r_cum arrived, then the tracker bits in the window. */
void fill_sack(const State& s, std::uint32_t base, wire::MrcCtlFields& c) noexcept {
    const std::uint32_t window = std::min(kWindow, s.attr.mpr_dest * wire::kMprUnit);
    for (std::uint32_t word = 0; word < wire::kSackBits / 64; ++word) {
        const Psn first = Psn(base) + word * 64;
        const std::int32_t d = first.distance_from(s.r_cum);
        std::uint64_t bits = 0;
        if (d + 64 <= 0) {
            bits = ~0ull; // all before the cumulative PSN
        } else if (d >= 0 && static_cast<std::uint32_t>(d) + 64 <= window) {
            bits = s.r_bitmap[(first.value() & kWindowMask) / 64]; // base is 64-aligned
        } else {
            for (unsigned b = 0; b < 64; ++b) {
                const Psn p = first + b;
                const std::int32_t pd = p.distance_from(s.r_cum);
                if (pd < 0 || (static_cast<std::uint32_t>(pd) < window && arrived(s, p)))
                    bits |= 1ull << b;
            }
        }
        c.bitmap[word] = bits;
    }
}

void deliver_imms(Qp& qp, State& s) noexcept {
    std::uint32_t done = 0;
    while (done < s.imm_count && Psn(s.imm[done].last_psn).distance_from(s.r_cum) < 0) {
        if (qp.rq.ready() == 0) {
            s.count(MrcCounter::imm_wait_recv); // pre-posted receives ran out: never an RNR
            break;
        }
        const rc::RecvWqe& r = qp.rq.slot(qp.rq.consumer_index());
        rc::Cqe c{};
        c.wr_id = r.wr_id;
        c.status = rc::WcStatus::success;
        c.opcode = rc::WcOpcode::recv_rdma_with_imm;
        c.byte_len = s.imm[done].byte_len;
        c.imm_data = s.imm[done].imm;
        c.wc_flags = rc::kWcWithImm;
        c.qp_num = qp.qpn;
        c.src_qp = qp.attr.dest_qp_num;
        qp.rq.release();
        if (qp.recv_cq) rc::cq_push(*qp.recv_cq, c);
        s.count(MrcCounter::imm_delivered);
        ++done;
    }
    if (done == 0) return;
    std::copy(s.imm.begin() + done, s.imm.begin() + s.imm_count, s.imm.begin());
    s.imm_count -= done;
}

} // namespace

void responder_reset(State& s, Psn rq_psn) noexcept {
    s.r_cum = rq_psn;
    s.r_bitmap.fill(0);
    s.num_dirty = 0;
    s.sack_owed = false;
    s.ece = false;
    s.imm_count = 0;
    s.imm_max = 0;
    s.max_dist_rcvd = 0;
}

namespace {

/**
 * The MDETH of a data packet of @p len payload bytes says where they go in a message that could
 * exist: inside it, a zero-length packet only as a whole zero-length message (a message's packets
 * carry bytes, all but the last a full MTU), and the last packet (flag LAST; a WRITE with
 * immediate is always one) ends it, so that its msg_length, the receiver's byte_len, is the
 * message's. Zero-length packets need no R_Key (IBTA C9-88): a forged one that claimed a place in
 * a larger message marked its PSN arrived, and the real packet there was dropped as a duplicate
 * while its requester got SUCCESS. (A forged zero-length message of its own, at a PSN in the
 * window, still can: RoCE authenticates nothing, README: Security model.)
 */
bool mdeth_consistent(const wire::Mdeth& m, std::uint32_t len, bool imm) noexcept {
    const std::uint32_t off = m.msg_offset.get();
    const std::uint32_t total = m.msg_length.get();
    if (off > total || total - off < len) return false;
    if (len == 0 && (off != 0 || total != 0)) return false;
    if ((imm || (m.flags & wire::kMdethLast)) && total - off != len) return false;
    return true;
}

} // namespace

void data_receive(Qp& qp, State& s, const wire::ParsedFrame& pkt, rc::TransportCtx& ctx) noexcept {
    if (qp.state != rc::QpState::rtr && qp.state != rc::QpState::rts &&
        qp.state != rc::QpState::sqd)
        return;
    const wire::Mdeth& m = *pkt.mdeth();
    const wire::Reth& reth = *pkt.reth;
    const Psn p = pkt.bth->psn();
    const std::uint16_t path = m.path.get();
    PlaneStats& ps = s.planes[ctx.rx_port % kMaxPlanes];
    ps.rx_pkts.fetch_add(1, std::memory_order_relaxed);
    s.last_rx_path = path;
    s.sack_plane = ctx.rx_port;
    if (ctx.rx_ecn_ce) {
        s.count(MrcCounter::ce_rcvd);
        s.ece = true;
        s.ece_path = path;
        s.sack_owed = true;
    }
    const std::int32_t d = p.distance_from(s.r_cum);
    if (d < 0 || arrived(s, p)) {
        s.count(MrcCounter::dup_pkts_rcvd);
        mark_dirty(s, p);
        s.sack_owed = true; // the requester has not heard: tell it again
        return;
    }
    if (static_cast<std::uint32_t>(d) >= std::min(kWindow, s.attr.mpr_dest * wire::kMprUnit)) {
        s.count(MrcCounter::mpr_exceeded);
        nack(qp, s, ctx, p, path, wire::NackReason::mpr_exceeded);
        return;
    }
    const std::uint32_t len = reth.dma_len.get();
    if (pkt.payload.size() < len) { // a switch cut the payload off: congestion, not loss
        s.count(MrcCounter::trims_rcvd);
        if (s.attr.trim_nack) nack(qp, s, ctx, p, path, wire::NackReason::trimmed);
        return;
    }
    const bool imm = pkt.bth->opcode() == Opcode::MRC_WRITE_LAST_WITH_IMMEDIATE;
    if (!mdeth_consistent(m, len, imm) || pkt.payload.size() != len) {
        s.count(MrcCounter::access_errors);
        nack(qp, s, ctx, p, path, wire::NackReason::invalid_request);
        return;
    }
    if (imm && s.imm_count >= std::min<std::uint32_t>(s.attr.max_wimm_dest, kMaxWimm)) {
        s.count(MrcCounter::wimm_exceeded);
        nack(qp, s, ctx, p, path, wire::NackReason::wimm_exceeded);
        return;
    }
    if (len > 0) {
        std::uint8_t* host = nullptr;
        if (!(qp.attr.qp_access_flags & rc::kAccessRemoteWrite) || ctx.mrs == nullptr ||
            ctx.mrs->check(reth.rkey.get(), qp.pd, reth.va.get(), len, rc::kAccessRemoteWrite,
                           &host) != mem::MemCheck::ok) {
            s.count(MrcCounter::access_errors);
            qp.counters.inc(Counter::resp_remote_access_errors);
            nack(qp, s, ctx, p, path, wire::NackReason::remote_access);
            return;
        }
        std::memcpy(host, pkt.payload.data(), len);
        if (!imm) ++ctx.silent_writes; // Device::silent_writes()
    }
    ps.rx_bytes.fetch_add(len, std::memory_order_relaxed);
    if (d > 0) s.count(MrcCounter::ooo_pkts_rcvd);
    s.max_dist_rcvd = std::max(s.max_dist_rcvd, static_cast<std::uint32_t>(d));
    if (imm) {
        // Sorted by PSN from the cumulative PSN: released in message order.
        std::uint32_t at = s.imm_count;
        while (at > 0 && Psn(s.imm[at - 1].last_psn).distance_from(p) > 0) {
            s.imm[at] = s.imm[at - 1];
            --at;
        }
        s.imm[at] = PendingImm{p.value(), pkt.immdt->imm.get(), m.msg_length.get()};
        s.imm_max = std::max(s.imm_max, ++s.imm_count);
    }
    set_arrived(s, p, true);
    mark_dirty(s, p);
    while (arrived(s, s.r_cum)) {
        set_arrived(s, s.r_cum, false);
        ++s.r_cum;
    }
    s.sack_owed = true;
    if (s.imm_count) deliver_imms(qp, s);
    if (!ctx.defer_acks) (void)responder_run(qp, s, ctx);
}

std::uint32_t responder_run(Qp& qp, State& s, rc::TransportCtx& ctx) noexcept {
    if (s.imm_count) deliver_imms(qp, s);
    if (!s.sack_owed) return 0;
    if (s.num_dirty == 0)
        s.dirty[s.num_dirty++] =
            State::DirtyBlock{s.r_cum.value() & ~(wire::kSackBits - 1) & Psn::kMask, 1};
    std::uint32_t sent = 0;
    for (std::uint32_t i = 0; i < s.num_dirty; ++i) {
        State::DirtyBlock& b = s.dirty[i];
        if (b.reports == 0) continue;
        wire::MrcCtlFields& c = s.next_ctl();
        c.flags = s.ece ? wire::kSethEcnEcho : 0;
        c.path = s.ece ? s.ece_path : s.last_rx_path;
        c.cum_psn = s.r_cum.value();
        c.sack_base = b.base;
        c.mpr_dest = s.attr.mpr_dest;
        c.port_mask = ctx.port_up_mask;
        fill_sack(s, b.base, c);
        if (!stage_ctl(qp, s, ctx, Opcode::MRC_SACK, pick_ctl_ev(s, ctx, s.sack_plane), c)) {
            qp.counters.inc(Counter::tx_no_buffer);
            return sent; // still owed: the next pass
        }
        s.count(MrcCounter::sacks_sent);
        s.ece = false;
        --b.reports;
        ++sent;
    }
    // Blocks reported twice leave the list; those with a report left stay for the next burst.
    std::uint32_t kept = 0;
    for (std::uint32_t i = 0; i < s.num_dirty; ++i)
        if (s.dirty[i].reports > 0) s.dirty[kept++] = s.dirty[i];
    s.num_dirty = kept;
    s.sack_owed = false;
    return sent;
}

bool responder_has_work(const Qp& qp, const State& s) noexcept {
    return s.sack_owed || (s.imm_count > 0 && qp.rq.ready() > 0);
}

} // namespace droce::mrc::detail
