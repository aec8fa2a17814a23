/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * The application side of the datapath: ibv_post_send, ibv_post_recv and ibv_poll_cq on the QP
 * and CQ rings (producer of the SQ/RQ, consumer of the CQ), and the doorbell that wakes the engine.
 */
#include "device.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <unistd.h>

namespace droce {

using namespace rc; // the engine runs the RC transport: Qp, WrOpcode, QpState ...

int Device::post_send(rc::Qp* qp, const rc::SendWqe* wrs, std::uint32_t n, std::uint32_t* bad,
                      unsigned progress_passes) noexcept {
    const int err = post_send_wqes(qp, wrs, n, bad);
    if (*bad == 0) return err;
    // Published WQEs, even when a later one failed. A poster that gets the poll ownership sends
    // them itself: no doorbell write for a napping engine thread, which would only wake to find
    // the work done (release_poll wakes it if work is left).
    const std::uint32_t slot = qp_index(qp->qpn);
    if (progress_passes && try_own_poll()) {
        ring_doorbell_bit(slot);
        for (unsigned i = 0; i < progress_passes; ++i)
            if (pass() == 0) break;
        release_poll(work_left());
        return err;
    }
    notify_engine(slot);
    return err;
}

int Device::post_recv(rc::Qp* qp, const rc::RecvWqe* wrs, std::uint32_t n,
                      std::uint32_t* bad) noexcept {
    const int err = post_recv_wqes(qp, wrs, n, bad);
    if (*bad > 0) notify_engine(qp_index(qp->qpn));
    return err;
}

void Device::notify_engine(std::uint32_t slot) noexcept {
    ring_doorbell_bit(slot);
    if (asleep_.load(std::memory_order_seq_cst)) ring_doorbell();
}

void Device::ring_doorbell_bit(std::uint32_t slot) noexcept {
    // The doorbell of a NIC: "QP slot has new WQEs". An RMW on the leaf word after the WQEs were
    // published; the engine takes the summary, then the leaf, with acquire, so a slot it finds set
    // shows every WQE published before the bit was set, and a bit set after the engine took its
    // word stays set for the next pass. Only the poster that turns a leaf word from zero to
    // non-zero sets the summary bit: while a word is non-zero its summary bit is set or about to be
    // (the engine clears the summary before the leaf), so later posters need one RMW, not two.
    const std::uint64_t before =
        doorbell_bits_[slot / 64].fetch_or(1ull << (slot % 64), std::memory_order_seq_cst);
    if (before == 0)
        doorbell_summary_[slot / 4096].fetch_or(1ull << ((slot / 64) % 64),
                                                std::memory_order_seq_cst);
}

int Device::post_send_wqes(rc::Qp* qp, const rc::SendWqe* wrs, std::uint32_t n,
                           std::uint32_t* bad) noexcept {
    *bad = 0;
    if (!qp) return EINVAL;
    // With thousands of busy QPs the QP is out of every cache when it is posted to: its first line
    // (QPN, state, transport), its caps and its send queue's indices are each a miss, and each
    // check below would wait for one after the other. Prefetches touch no memory (never fault),
    // so they may come before the handle is checked.
    prefetch_for_read(qp);
    prefetch_for_read(&qp->cap);
    qp->sq.prefetch_producer_lines();
    // A QP of another device is EINVAL (O(1): the QPN indexes this device's table).
    if (qp_by_num(qp->qpn) != qp || (n > 0 && !wrs)) return EINVAL;
    // ibv_post_send before RTS is refused; in ERR the WQEs are accepted and flushed (IBTA
    // §10.7.3.1).
    if (qp->state != QpState::rts && qp->state != QpState::sqd && qp->state != QpState::err)
        return EINVAL;
    // With thousands of busy QPs a send queue is out of every cache when it is posted to: ask for
    // the slots' lines (all a one-SGE WQE touches) at once, so that their misses overlap instead
    // of each store waiting for its line in turn. At most kPrefetchSlots: a long list would evict
    // its first lines before they are written.
    constexpr std::uint32_t kPrefetchSlots = 16;
    const std::uint32_t ahead = std::min({n, qp->sq.free_slots(), kPrefetchSlots});
    for (std::uint32_t i = 0; i < ahead; ++i)
        __builtin_prefetch(&qp->sq.producer_slot(i), 1, 3);
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
        case WrOpcode::atomic_fetch_and_add:
            break;
        default:
            return EINVAL; // LOCAL_INV, BIND_MW: not supported on droce (README)
        }
        // A transport that carries only some operations (MRC: RDMA WRITE and WRITE with
        // immediate) refuses the others as an unsupported verb.
        if (!(qp->transport->send_opcodes & (1u << static_cast<unsigned>(w.opcode))))
            return EOPNOTSUPP;
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
        rc::SqWqe& slot = qp->sq.producer_slot();
        // Inline: the application's copy is already in w.inline_data (native API), length bytes.
        if (slot.fill(w, qp->sq_ext_of(slot)) > kMaxMsgSize) return EINVAL;
        qp->sq.publish();
    }
    *bad = n;
    return 0;
}

int Device::post_recv_wqes(rc::Qp* qp, const rc::RecvWqe* wrs, std::uint32_t n,
                           std::uint32_t* bad) noexcept {
    *bad = 0;
    if (!qp || qp_by_num(qp->qpn) != qp || (n > 0 && !wrs) || qp->state == QpState::reset)
        return EINVAL;
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
    return 0;
}

std::uint32_t Device::poll_cq(rc::Cq* cq, rc::Cqe* out, std::uint32_t n) noexcept {
    if (!cq || !out) return 0;
    std::uint32_t got = std::min(n, cq->ring.ready());
    for (std::uint32_t i = 0; i < got; ++i)
        out[i] = cq->ring.slot(cq->ring.consumer_index() + i);
    cq->ring.release(got);
    return got;
}

void Device::ring_doorbell() noexcept {
    if (doorbell_fd_ < 0) return;
    const std::uint64_t one = 1;
    [[maybe_unused]] ssize_t r = write(doorbell_fd_, &one, sizeof one);
}

} // namespace droce
