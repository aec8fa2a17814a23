/* SPDX-License-Identifier: BSD-3-Clause */
#include "qp.h"

namespace droce::rc {

bool cq_push(Cq& cq, const Cqe& cqe, bool solicited) noexcept {
    if (cq.ring.free_slots() == 0) {
        cq.overflowed = true;
        return false;
    }
    cq.ring.producer_slot() = cqe;
    cq.ring.publish();
    // Relaxed first look: an unarmed CQ (the common case) costs one load. The exchange is acq_rel
    // so that an application that re-arms and then polls (the ibv_req_notify_cq / ibv_poll_cq
    // idiom) either sees this CQE or gets the event.
    const std::uint8_t arm = cq.armed.load(std::memory_order_relaxed);
    if (arm != Cq::kDisarmed && cq.notify != nullptr &&
        (arm == Cq::kArmNext || solicited || cqe.status != WcStatus::success) &&
        cq.armed.exchange(Cq::kDisarmed, std::memory_order_acq_rel) != Cq::kDisarmed)
        cq.notify(cq.notify_ctx, cq);
    return true;
}

WcOpcode wc_opcode_of(WrOpcode op) noexcept {
    switch (op) {
    case WrOpcode::rdma_write:
    case WrOpcode::rdma_write_with_imm:
        return WcOpcode::rdma_write;
    case WrOpcode::rdma_read:
        return WcOpcode::rdma_read;
    case WrOpcode::atomic_cmp_and_swp:
        return WcOpcode::comp_swap;
    case WrOpcode::atomic_fetch_and_add:
        return WcOpcode::fetch_add;
    case WrOpcode::local_inv:
        return WcOpcode::local_inv;
    case WrOpcode::bind_mw:
        return WcOpcode::bind_mw;
    case WrOpcode::send:
    case WrOpcode::send_with_imm:
    case WrOpcode::send_with_inv:
        break;
    }
    return WcOpcode::send;
}

void complete_send_wqe(Qp& qp, bool cqe, WcStatus status, std::uint32_t byte_len) noexcept {
    SqWqe& w = qp.sq.slot(qp.sq.consumer_index());
    Cqe c{};
    c.wr_id = w.wr_id;
    c.status = status;
    c.opcode = wc_opcode_of(w.opcode);
    c.byte_len = byte_len;
    c.qp_num = qp.qpn;
    w.state = WqeState::completed;
    // The slot is the application's again before the completion says so: an application that
    // posts as soon as it polls a completion (ibv_rc_pingpong, one-WQE SQ) must find it free
    // (with the CQE first it sometimes got ENOMEM: "Couldn't post send").
    qp.sq.release();
    if (cqe && qp.send_cq) cq_push(*qp.send_cq, c);
}

void qp_enter_error(Qp& qp, TransportCtx& /*ctx*/) noexcept {
    qp.state = QpState::err;
    qp.attr.qp_state = QpState::err;
    qp.req.ack_deadline_ns = 0;
    qp.req.rnr_deadline_ns = 0;
    qp.resp.read_active = false;
    qp.resp.reads_queued = 0;
    // Nothing leaves an ERR QP (qp_run returns before responder_run): an ACK still owed would
    // keep qp_has_work() true, and the engine polling, for ever.
    qp.resp.ack_pending = false;
    qp.resp.ack_hold_until_ns = 0;
    qp.resp.rnr_nak_owed = false;
    // Every WQE still on the SQ completes once, in order: one acknowledged before the error
    // successfully (if signaled), the one the completer or requester failed with its own status,
    // the rest with WR_FLUSH_ERR, signaled or not (IBTA §10.7.3.1: error completions are always
    // generated). None completes while a driver still holds its payload (transmit by reference):
    // the engine calls this again on every pass while the SQ is not empty (Device::poll).
    while (qp.sq.ready() > 0) {
        const std::uint32_t idx = qp.sq.consumer_index();
        if (!qp.tx_released(idx)) break;
        const SqWqe& w = qp.sq.slot(idx);
        if (w.state == WqeState::acked) {
            complete_send_wqe(qp, qp.sq_sig_all || (w.send_flags & kSendSignaled),
                              WcStatus::success,
                              w.opcode == WrOpcode::atomic_cmp_and_swp ||
                                      w.opcode == WrOpcode::atomic_fetch_and_add
                                  ? 8u
                                  : w.length);
        } else if (w.state == WqeState::error_due) {
            complete_send_wqe(qp, true, qp.sq_ext_of(w).status, 0);
        } else {
            qp.counters.inc(Counter::flushed_wqes);
            complete_send_wqe(qp, true, WcStatus::wr_flush_err, 0);
        }
    }
    qp.req.next_wqe = qp.sq.consumer_index();
    while (qp.rq.ready() > 0) {
        RecvWqe& w = qp.rq.slot(qp.rq.consumer_index());
        Cqe c{};
        c.wr_id = w.wr_id;
        c.status = WcStatus::wr_flush_err;
        c.opcode = WcOpcode::recv;
        c.qp_num = qp.qpn;
        qp.counters.inc(Counter::flushed_wqes);
        qp.rq.release();
        if (qp.recv_cq) cq_push(*qp.recv_cq, c);
    }
    qp.resp.have_recv_wqe = false;
}

std::uint32_t qp_run(Qp& qp, TransportCtx& ctx, std::uint32_t budget, bool* wait_release) noexcept {
    if (qp.state == QpState::err) {
        // WQEs posted after the QP failed are flushed here, once each.
        if (!qp.sq.ready() && !qp.rq.ready()) return 0;
        qp_enter_error(qp, ctx);
        if (qp.sq.ready()) *wait_release = true; // held payload: completes once released
        return 1;
    }
    if (qp.state == QpState::reset || qp.state == QpState::init) return 0;
    // Acknowledged WQEs whose payload a driver held: complete them once released.
    if (qp.sq.consumer_index() != qp.comp.first_unacked_wqe && completer_reap(qp))
        *wait_release = true;
    ResponderState& r = qp.resp;
    if (r.ack_held()) {
        // An ACK held for the next request (ack_hold_until_ns) leaves right ahead of it, in the
        // same burst, or alone once its time is up (a READ response in progress sends it first).
        // Ahead, as a NIC's ACK always precedes the answer the peer's application posts after
        // it: perftest's event mode (ib_send_lat -e) waits for one event and then polls its send
        // CQ only, so an answer completed before the ACK that completes the request left it
        // polling an empty CQ and then waiting for an event already taken (9 of 13 runs hung).
        // In one burst the peer's pass still takes both: the ping's completion and the pong.
        // Nor does it wait while requests of this QP wait for their own ACK: the peer may be
        // holding that one for our next request, and neither would come before both holds ended
        // (two streams that filled their send queues would stall kAckHoldNs per round).
        const bool requests = qp.sq.producer_index() != qp.req.next_wqe;
        const bool awaiting_acks = qp.comp.first_unacked_wqe != qp.req.next_wqe;
        if (!requests && !awaiting_acks && !r.read_active && !r.rnr_nak_owed &&
            ctx.pass_start_ns < r.ack_hold_until_ns)
            return 0;
        responder_run(qp, ctx, budget);
        return requester_run(qp, ctx, budget);
    }
    responder_run(qp, ctx, budget);
    return requester_run(qp, ctx, budget);
}

bool qp_has_work(const Qp& qp) noexcept {
    if (qp.state == QpState::reset || qp.state == QpState::init) return false;
    // Responder output owed (RTR on); a held ACK waits for a request or its timer
    // (completer_next_deadline).
    if ((qp.resp.ack_pending && !qp.resp.ack_held()) || qp.resp.read_active || qp.resp.rnr_nak_owed)
        return true;
    if (qp.state == QpState::err) return qp.sq.ready() || qp.rq.ready(); // flush, held payload
    if (qp.state == QpState::rtr) return false;
    // WQEs not yet (completely) sent, or go-back-N in progress (the requester rewound next_wqe);
    // acknowledged WQEs whose payload a driver still holds. WQEs sent and waiting for their ACK
    // need no pass: the ACK (a frame) or the ACK timer brings the QP back.
    return qp.sq.producer_index() != qp.req.next_wqe ||
           qp.sq.consumer_index() != qp.comp.first_unacked_wqe;
}

const TransportOps kRcTransport = {
    .name = "rc",
    .run = &qp_run,
    .has_work = &qp_has_work,
    .receive_request = &responder_receive,
    .receive_response = &completer_receive,
    .timer = &completer_timers,
    .next_deadline = &completer_next_deadline,
    .modify = &qp_modify,
};

} // namespace droce::rc
