/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * The RC requester (IBTA Vol 1 §9.7.1-§9.7.4, the role of rxe_req.c): turns send WQEs into request
 * packets.
 *
 * A WQE is picked up at qp.req.next_wqe. On its first packet it is checked (opcode, lengths, lkeys)
 * and given its PSN range: SEND / WRITE take one PSN per MTU-sized packet (a zero-length message is
 * one ONLY packet); a READ REQUEST takes as many PSNs as response packets it asks for; an atomic
 * one. Each packet then passes, in order: the PSN window (kPsnWindow), the pacer, the path selector
 * and the tx hook. When the tx hook refuses, nothing changes, so the same packet is built again
 * next time.
 *
 * Go-back-N (done by the completer) rewinds next_wqe / next_psn and the WQE's sent_bytes; this file
 * then simply sends again from there, with the same PSNs and the same segmentation.
 *
 * WQE states: posted (no PSN yet) -> sending (PSNs given, packets going out) -> sent (all packets
 * out at least once; a rewind puts it back to sending). A WQE that fails a local check becomes done
 * with its error status; it completes when it is the oldest WQE (here, or in the completer after
 * the WQEs before it were acknowledged).
 *
 * Datapath: no allocation, exception or lock.
 */
#include <algorithm>
#include <array>
#include <span>

#include "pacer.h"
#include "qp.h"

namespace droce::rc {

namespace {

using wire::Opcode;
using wire::PacketFields;

constexpr std::uint32_t kPsnRingMask = kPsnWindow - 1;
static_assert((kPsnWindow & kPsnRingMask) == 0, "kPsnWindow must be a power of two");

/** Counts a per-QP event on the QP only (TransportCtx::dev_counters is for events of no QP). */
void count(Qp& qp, TransportCtx& /*ctx*/, Counter c) noexcept {
    qp.counters.inc(c);
}

/**
 * The path a packet of @p qp with PSN @p psn leaves on. RC has one path (qp.paths[0]); MRC will
 * spray here. The index is recorded per PSN so that a retransmission can pick another one.
 */
std::uint8_t select_path(const Qp& /*qp*/, Psn /*psn*/) noexcept {
    return 0;
}

bool is_read(const SqWqe& w) noexcept {
    return w.opcode == WrOpcode::rdma_read;
}
bool is_atomic(const SqWqe& w) noexcept {
    return w.opcode == WrOpcode::atomic_cmp_and_swp || w.opcode == WrOpcode::atomic_fetch_and_add;
}
bool is_send(const SqWqe& w) noexcept {
    return w.opcode == WrOpcode::send || w.opcode == WrOpcode::send_with_imm ||
           w.opcode == WrOpcode::send_with_inv;
}

/** Packets (and PSNs) of a SEND/WRITE of @p len bytes, or response packets of a READ of @p len
 * bytes. */
std::uint32_t packets_of(std::uint32_t len, std::uint32_t mtu) noexcept {
    return len == 0 ? 1u
                    : static_cast<std::uint32_t>((static_cast<std::uint64_t>(len) + mtu - 1) / mtu);
}

/**
 * @p w failed a local check. It completes with @p status once it is the oldest WQE: now if nothing
 * before it is outstanding, else in the completer after the earlier WQEs (completions stay in
 * order). The QP then goes to ERR (IBTA §10.7.3.1: error completions are always generated).
 */
void fail_local(Qp& qp, TransportCtx& ctx, SqWqe& w, WcStatus status) noexcept {
    if (status == WcStatus::loc_prot_err) count(qp, ctx, Counter::local_protection_err);
    qp.fail_wqe(w, WqeState::local_error, status);
    if (clamp_first_unacked_wqe(qp) != qp.req.next_wqe) return;
    // Nothing unacknowledged before it: its error completion is due now, after the acknowledged
    // WQEs before it (qp_enter_error completes them first, in order).
    w.state = WqeState::error_due;
    qp_enter_error(qp, ctx);
}

/** Request opcode of packet @p pkt_first/@p pkt_last of a SEND or WRITE (IBTA table 39). */
Opcode send_write_opcode(const SqWqe& w, bool first, bool last) noexcept {
    const bool only = first && last;
    switch (w.opcode) {
    case WrOpcode::send:
        return only    ? Opcode::RC_SEND_ONLY
               : first ? Opcode::RC_SEND_FIRST
               : last  ? Opcode::RC_SEND_LAST
                       : Opcode::RC_SEND_MIDDLE;
    case WrOpcode::send_with_imm:
        return only    ? Opcode::RC_SEND_ONLY_WITH_IMMEDIATE
               : first ? Opcode::RC_SEND_FIRST
               : last  ? Opcode::RC_SEND_LAST_WITH_IMMEDIATE
                       : Opcode::RC_SEND_MIDDLE;
    case WrOpcode::send_with_inv:
        return only    ? Opcode::RC_SEND_ONLY_WITH_INVALIDATE
               : first ? Opcode::RC_SEND_FIRST
               : last  ? Opcode::RC_SEND_LAST_WITH_INVALIDATE
                       : Opcode::RC_SEND_MIDDLE;
    case WrOpcode::rdma_write_with_imm:
        return only    ? Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE
               : first ? Opcode::RC_RDMA_WRITE_FIRST
               : last  ? Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE
                       : Opcode::RC_RDMA_WRITE_MIDDLE;
    default:
        return only    ? Opcode::RC_RDMA_WRITE_ONLY
               : first ? Opcode::RC_RDMA_WRITE_FIRST
               : last  ? Opcode::RC_RDMA_WRITE_LAST
                       : Opcode::RC_RDMA_WRITE_MIDDLE;
    }
}

} // namespace

WcStatus check_send_wqe(Qp& qp, TransportCtx& ctx, const SqWqe& w,
                        std::array<std::uint8_t*, kMaxSge>* hosts) noexcept {
    std::uint32_t access = 0;
    switch (w.opcode) {
    case WrOpcode::send:
    case WrOpcode::send_with_imm:
    case WrOpcode::send_with_inv:
    case WrOpcode::rdma_write:
    case WrOpcode::rdma_write_with_imm:
        break;
    case WrOpcode::rdma_read:
        // The response data is written into the local SGEs: they need local write (IBTA ch. 10,
        // memory access rights). rxe finds out only when the first response arrives; checking
        // before the request leaves avoids a remote READ whose data could never be placed.
        access = kAccessLocalWrite;
        break;
    case WrOpcode::atomic_cmp_and_swp:
    case WrOpcode::atomic_fetch_and_add:
        // IBTA ch. 9 atomics: the target must be 8-byte aligned, the result is one 8-byte local
        // buffer. rxe refuses such a WR in post_send (EINVAL); a WQE that reaches the engine anyway
        // is an invalid work request: Local QP Operation Error, as mlx5 reports a malformed WQE.
        if (w.remote_addr & 7u) return WcStatus::loc_qp_op_err;
        if (w.num_sge != 1 || qp.sq_sg_list(w)[0].length != 8 || (w.send_flags & kSendInline))
            return WcStatus::loc_len_err;
        access = kAccessLocalWrite;
        break;
    case WrOpcode::local_inv:
    case WrOpcode::bind_mw:
        return WcStatus::loc_qp_op_err; // not a wire operation; this engine does not execute them
    }
    if (w.length > kMaxMsgSize)
        return WcStatus::loc_len_err; // longer than max_msg_sz: Local Length Error
    if (w.send_flags & kSendInline) {
        if (is_read(w) || is_atomic(w)) return WcStatus::loc_qp_op_err;
        if (w.length > kMaxInlineData) return WcStatus::loc_len_err;
        return WcStatus::success;
    }
    if (w.num_sge > kMaxSge) return WcStatus::loc_qp_op_err;
    std::uint64_t total = 0;
    const Sge* sges = qp.sq_sg_list(w);
    for (std::uint32_t i = 0; i < w.num_sge; ++i) {
        const Sge& s = sges[i];
        total += s.length;
        if (s.length == 0) continue; // C9-88: a zero-length buffer is never checked
        std::uint8_t* host = nullptr;
        if (ctx.mrs->check(s.lkey, qp.pd, s.addr, s.length, access, &host) != mem::MemCheck::ok)
            return WcStatus::loc_prot_err; // lkey, PD, bounds or access: Local Protection Error
        if (hosts) (*hosts)[i] = host;
    }
    if (total != w.length || total > kMaxMsgSize) return WcStatus::loc_len_err;
    return WcStatus::success;
}

int gather_payload(Qp& qp, TransportCtx& ctx, const SqWqe& w, std::uint32_t off, std::uint32_t len,
                   std::array<std::span<const std::uint8_t>, kMaxSge>& out,
                   const std::array<std::uint8_t*, kMaxSge>* hosts) noexcept {
    if (len == 0) return 0;
    if (w.send_flags & kSendInline) {
        out[0] = std::span<const std::uint8_t>(qp.sq_ext_of(w).inline_data + off, len);
        return 1;
    }
    if (hosts != nullptr && w.num_sge == 1) {
        // One SGE, checked whole in this pass: its length is the message's (check_send_wqe), so
        // the bytes are at its host address plus the offset. The walk below cost a 64 B WRITE 81
        // instructions (bench/engine/instr).
        out[0] = std::span<const std::uint8_t>((*hosts)[0] + off, len);
        return 1;
    }
    int n = 0;
    std::uint32_t pos = 0; // message offset of SGE i
    const Sge* sges = qp.sq_sg_list(w);
    for (std::uint32_t i = 0; i < w.num_sge && len > 0; ++i) {
        const Sge& s = sges[i];
        if (off >= pos + s.length) {
            pos += s.length;
            continue;
        }
        const std::uint32_t in_sge = off - pos;
        const std::uint32_t take = std::min(len, s.length - in_sge);
        std::uint8_t* host = nullptr;
        if (hosts)
            host = (*hosts)[i] + in_sge;
        else if (ctx.mrs->check(s.lkey, qp.pd, s.addr + in_sge, take, 0, &host) !=
                 mem::MemCheck::ok)
            return -1;
        out[static_cast<std::size_t>(n++)] = std::span<const std::uint8_t>(host, take);
        off += take;
        len -= take;
        pos += s.length;
    }
    return len == 0 ? n : -1;
}

namespace {
/** The PSN ring entries a run sends at most: prefetched for write so that the per-packet stores
 *  into a ring out of the caches (thousands of busy QPs) do not wait for each line in turn. */
constexpr std::uint32_t kPsnPrefetchEntries = 32;

/** Prefetches for write every line of @p n entries from @p first (n <= the ring's length). */
void prefetch_psn_range(const PsnSendState* first, std::uint32_t n) noexcept {
    const auto begin = reinterpret_cast<std::uintptr_t>(first) & ~std::uintptr_t{kCacheLine - 1};
    const auto end = reinterpret_cast<std::uintptr_t>(first + n);
    for (std::uintptr_t line = begin; line < end; line += kCacheLine)
        prefetch_for_write(reinterpret_cast<const void*>(line));
}

void prefetch_psn_entries(const RequesterState& req, std::uint32_t budget) noexcept {
    const std::uint32_t n = std::min(budget, kPsnPrefetchEntries);
    const std::uint32_t first = req.next_psn.value() & kPsnRingMask;
    const std::uint32_t before_wrap = std::min(n, kPsnWindow - first);
    prefetch_psn_range(&req.psn_ring[first], before_wrap);
    if (before_wrap < n) prefetch_psn_range(&req.psn_ring[0], n - before_wrap);
}
} // namespace

std::uint32_t requester_run(Qp& qp, TransportCtx& ctx, std::uint32_t budget) noexcept {
    if (qp.state != QpState::rts && qp.state != QpState::sqd) return 0;
    const std::uint64_t now = ctx.clock->now_ns();
    RequesterState& req = qp.req;
    if (req.rnr_deadline_ns != 0) {
        // RNR wait (IBTA §9.7.5.2.8): nothing leaves before the timer the responder asked for.
        if (now < req.rnr_deadline_ns) return 0;
        req.rnr_deadline_ns = 0;
    }
    const std::uint32_t mtu = qp.mtu;
    std::uint32_t sent = 0;
    std::array<std::span<const std::uint8_t>, kMaxSge> spans;
    // The MR lookup of the WQE checked in this call, per SGE, for its packets in this call: the
    // MR table changes only between passes (control sections wait for the pass to end).
    std::array<std::uint8_t*, kMaxSge> hosts{};
    std::uint32_t hosts_wqe = 0;
    bool hosts_valid = false;
    if (ctx.prefetch_qp_state && req.next_wqe != qp.sq.producer_index())
        prefetch_psn_entries(req, budget);

    while (sent < budget) {
        if (req.next_wqe == qp.sq.producer_index()) break;
        SqWqe& w = qp.sq.slot(req.next_wqe);
        // Failed locally: waits for the completer, which completes it and takes the QP to ERR.
        if (w.state == WqeState::local_error) break;

        if (w.state == WqeState::posted) {
            // A new message. SQD: finish the current message, start no new one (IBTA ch. 10, SQD
            // state).
            if (qp.state == QpState::sqd) break;
            const bool rd_atomic = is_read(w) || is_atomic(w);
            // Fence: wait until every earlier READ / atomic has completed (IBTA ch. 10, fence
            // indicator).
            if ((w.send_flags & kSendFence) && req.rd_atomic_inflight > 0) break;
            if (rd_atomic &&
                req.rd_atomic_inflight >= std::max<std::uint32_t>(1, qp.attr.max_rd_atomic))
                break;
            if (req.next_psn.distance_from(qp.comp.oldest_unacked) >=
                static_cast<std::int32_t>(kPsnWindow))
                break;
            const WcStatus st = check_send_wqe(qp, ctx, w, &hosts);
            if (st != WcStatus::success) {
                w.npkts = 0;
                fail_local(qp, ctx, w, st);
                break;
            }
            w.first_psn = req.next_psn;
            w.npkts = is_atomic(w) ? 1u : packets_of(w.length, mtu);
            w.sent_bytes = 0;
            w.recv_bytes = 0;
            w.state = WqeState::sending;
            hosts_wqe = req.next_wqe;
            hosts_valid = true;
            if (rd_atomic) ++req.rd_atomic_inflight;
        }

        // ---- one packet ----
        if (req.next_psn.distance_from(qp.comp.oldest_unacked) >=
            static_cast<std::int32_t>(kPsnWindow))
            break;
        if (pacer_blocked(qp, now)) break;

        PacketFields f{};
        f.dest_qp = qp.attr.dest_qp_num;
        f.psn = req.next_psn;
        const std::uint32_t off = w.sent_bytes;
        std::uint32_t payload_len = 0;
        std::uint32_t npsn = 1;
        bool last = true;
        int nspans = 0;
        if (is_read(w)) {
            // One READ REQUEST for the rest of the message (after go-back-N, from va + offset).
            const std::uint32_t rem = w.length - off;
            f.opcode = Opcode::RC_RDMA_READ_REQUEST;
            f.va = w.remote_addr + off;
            f.rkey = w.rkey;
            f.dma_len = rem;
            npsn = packets_of(rem, mtu);
        } else if (is_atomic(w)) {
            f.opcode = w.opcode == WrOpcode::atomic_cmp_and_swp ? Opcode::RC_COMPARE_SWAP
                                                                : Opcode::RC_FETCH_ADD;
            f.va = w.remote_addr;
            f.rkey = w.rkey;
            const SqWqeExt& x = qp.sq_ext_of(w);
            f.swap_add = w.opcode == WrOpcode::atomic_cmp_and_swp ? x.swap : x.compare_add;
            f.compare = w.opcode == WrOpcode::atomic_cmp_and_swp ? x.compare_add : 0;
        } else {
            payload_len = std::min(w.length - off, mtu);
            const bool first = off == 0;
            last = off + payload_len == w.length;
            f.opcode = send_write_opcode(w, first, last);
            if (first && !is_send(w)) { // RETH on WRITE FIRST / ONLY: the whole DMA length
                f.va = w.remote_addr;
                f.rkey = w.rkey;
                f.dma_len = w.length;
            }
            if (last) {
                f.imm = w.imm_data;
                f.inv_rkey = w.invalidate_rkey;
                // SE only on the last packet of a SEND or an RDMA WRITE with immediate (IBTA
                // §9.2.3).
                f.solicited = (w.send_flags & kSendSolicited) &&
                              (is_send(w) || w.opcode == WrOpcode::rdma_write_with_imm);
            }
            nspans = gather_payload(qp, ctx, w, off, payload_len, spans,
                                    hosts_valid && hosts_wqe == req.next_wqe ? &hosts : nullptr);
            if (nspans < 0) { // the MR went away under a message in progress
                fail_local(qp, ctx, w, WcStatus::loc_prot_err);
                break;
            }
        }
        // AckReq on the last packet of a message and at least every kMaxPktPerAck packets (rxe);
        // READ requests and atomics are ONLY packets, so they always carry it.
        f.ack_req = last || req.noack_pkts + 1 >= kMaxPktPerAck;

        const std::uint8_t path = select_path(qp, f.psn);
        // Registered memory may go by reference (the WQE then waits for its release); inline data
        // lives in the slot's SqWqeExt and is always copied.
        TxRef* ref =
            nspans > 0 && !(w.send_flags & kSendInline) ? qp.tx_ref(req.next_wqe) : nullptr;
        if (!qp.path_resolved) { // the peer's MAC is being resolved (ARP / ND): nothing leaves yet
            count(qp, ctx, Counter::tx_wait_neigh);
            // The ACK timer runs meanwhile, as for a packet a NIC sent into a neighbour that never
            // answers: the QP then fails after its retries instead of waiting for ever.
            if (qp.attr.timeout != 0 && req.ack_deadline_ns == 0) {
                req.ack_deadline_ns = now + ack_timeout_ns(qp.attr.timeout);
                req.timer_for_neigh = true;
            }
            break;
        }
        const Path& route = qp.paths[path];
        if (!ctx.tx->append(route.hdr, route.port, qp.loopback_peer, f,
                            std::span<const std::span<const std::uint8_t>>(
                                spans.data(), static_cast<std::size_t>(nspans)),
                            ref, &qp.counters)) {
            count(qp, ctx,
                  Counter::tx_no_buffer); // state untouched: the same packet goes next time
            break;
        }

        if (pacer_active(qp))
            pacer_sent(qp, wire::frame_length(route.hdr, f.opcode, payload_len), now,
                       ctx.prev_pass_start_ns);

        PsnSendState& e = req.psn_ring[f.psn.value() & kPsnRingMask];
        e.psn = f.psn;
        e.wqe_index = req.next_wqe;
        e.offset = off;
        e.path = path;
        e.valid = true;

        if (req.retransmitting) {
            if (f.psn < req.resend_until) count(qp, ctx, Counter::retransmitted_pkts);
        }
        req.next_psn += npsn;
        if (req.retransmitting && req.next_psn >= req.resend_until) req.retransmitting = false;
        req.noack_pkts = f.ack_req ? 0 : req.noack_pkts + 1;
        w.sent_bytes = is_read(w) ? w.length : off + payload_len;
        if (last) {
            w.state = WqeState::sent;
            ++req.next_wqe;
        }
        if (qp.attr.timeout != 0 && (req.ack_deadline_ns == 0 || req.timer_for_neigh)) {
            req.ack_deadline_ns = now + ack_timeout_ns(qp.attr.timeout);
            req.timer_for_neigh = false;
        }
        ++sent;
    }
    if (sent) req.last_request_pass_ns = ctx.pass_start_ns;
    return sent;
}

} // namespace droce::rc
