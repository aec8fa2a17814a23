/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * The RC completer (IBTA Vol 1 §9.7.5.1 requester-side response handling, §9.7.6.1.3 local ACK
 * timeout; the role of rxe_comp.c): turns ACKs, NAKs, READ responses and ATOMIC ACKs into send
 * completions and drives retransmission (go-back-N), the local ACK timer and the RNR timer.
 *
 * Bookkeeping: comp.oldest_unacked is the first PSN not yet acknowledged; comp.first_unacked_wqe
 * the first WQE not yet acknowledged. An acknowledged WQE completes (CQE, slot back to the
 * application) in SQ order once no driver holds its payload any more (transmit by reference,
 * Qp::tx_refs): completer_reap(). An acknowledgement with PSN p (ACK, or implicitly a NAK /
 * response with PSN p + 1) covers every PSN <= p. WQEs complete strictly in SQ order; a READ or
 * atomic completes only by its own responses, so an acknowledgement that reaches past an unfinished
 * READ / atomic means its responses were lost: an implied NAK (§9.7.5.1), retried from the first
 * response PSN not yet received.
 *
 * completer_receive() runs an explicit state machine; every completion error
 * and every counted drop is decided in decide() (rule 11).
 *
 * Datapath: no allocation, exception or lock.
 */
#include <algorithm>
#include <array>
#include <cstring>
#include <string_view>

#include "pacer.h"
#include "qp.h"

namespace droce::rc {

namespace {

using wire::AethKind;
using wire::NakCode;
using wire::Opcode;

constexpr std::uint32_t kPsnRingMask = kPsnWindow - 1;

// clang-format off
/** X(name, what the state does). */
#define DROCE_COMP_STATES(X)                                                          \
    X(check_psn,    "is the PSN one that was sent and is not yet acknowledged?")      \
    X(check_ack,    "decode the opcode and the AETH syndrome")                        \
    X(ack,          "positive ACK: complete every WQE it covers")                     \
    X(read,         "place one READ response")                                        \
    X(atomic,       "store the original value returned by an atomic")                 \
    X(nak_seq,      "NAK PSN sequence error: implicit ACK, then go back")             \
    X(rnr,          "RNR NAK: implicit ACK, wait the RNR timer, then go back")        \
    X(remote_error, "NAK invalid request / remote access / remote operational")       \
    X(retry,        "go-back-N while retry_cnt allows")                               \
    X(complete,     "complete the oldest WQE (its responses are all in)")             \
    X(error,        "complete the oldest WQE in error and move the QP to ERR")        \
    X(drop,         "discard the packet, counted")                                    \
    X(done,         "finished with this packet")

/** X(name) of every outcome decide() resolves. */
#define DROCE_COMP_ERRORS(X) \
    X(none) X(nak_invalid_request) X(nak_remote_access) X(nak_remote_operational)     \
    X(nak_invalid_rd_request) X(retry_exceeded) X(rnr_retry_exceeded) X(read_length)   \
    X(local_protection) X(unsent_psn) X(unexpected_response) X(reserved_nak_code) X(reserved_syndrome)
// clang-format on

enum class CompState : std::uint8_t {
#define DROCE_COMP_STATE_ENUM(name, text) name,
    DROCE_COMP_STATES(DROCE_COMP_STATE_ENUM)
#undef DROCE_COMP_STATE_ENUM
};

[[maybe_unused]] constexpr std::string_view kCompStateNames[] = {
#define DROCE_COMP_STATE_NAME(name, text) #name,
    DROCE_COMP_STATES(DROCE_COMP_STATE_NAME)
#undef DROCE_COMP_STATE_NAME
};

enum class CompError : std::uint8_t {
#define DROCE_COMP_ERROR_ENUM(name) name,
    DROCE_COMP_ERRORS(DROCE_COMP_ERROR_ENUM)
#undef DROCE_COMP_ERROR_ENUM
};

/** What an error means: the completion status of the oldest WQE (fail) or a counted drop. */
struct Decision {
    bool fail = false; ///< complete the oldest WQE with @ref status and flush the QP
    WcStatus status = WcStatus::success;
    bool counted = false;
    Counter counter = Counter::sent_pkts;
};

/** The one place that turns a completer-side error into a status or a drop.
 */
constexpr Decision decide(CompError e) noexcept {
    switch (e) {
    case CompError::none:
        return {};
    // NAK codes, IBTA table 46; all are fatal to the QP (§9.7.5.1, class B/C errors, §10.7.3.1).
    case CompError::nak_invalid_request:
        return {true, WcStatus::rem_inv_req_err, true, Counter::req_remote_invalid_request};
    case CompError::nak_remote_access:
        return {true, WcStatus::rem_access_err, true, Counter::req_remote_access_errors};
    case CompError::nak_remote_operational:
        return {true, WcStatus::rem_op_err, true, Counter::req_remote_operational_error};
    case CompError::nak_invalid_rd_request: // RD only; an RC peer sending it is broken: remote
                                            // invalid RD request
        return {true, WcStatus::rem_inv_rd_req_err, true, Counter::req_remote_invalid_request};
    // §9.7.6.1.3 / §9.7.5.1: transport retry counter exhausted (timeouts, sequence and implied
    // NAKs).
    case CompError::retry_exceeded:
        return {true, WcStatus::retry_exc_err, true, Counter::retry_exceeded_err};
    // §9.7.5.2.8: RNR retry counter exhausted.
    case CompError::rnr_retry_exceeded:
        return {true, WcStatus::rnr_retry_exc_err, true, Counter::rnr_nak_retry_err};
    // READ response payload not the length requested (longer, or a short LAST / non-MTU
    // FIRST/MIDDLE). rxe: the copy into the SGEs fails -> IB_WC_LOC_PROT_ERR; same status here,
    // counted as a length error.
    case CompError::read_length:
        return {true, WcStatus::loc_prot_err, true, Counter::req_local_length_error};
    // Response data / atomic result cannot be written to the local SGE (lkey, PD, bounds, local
    // write).
    case CompError::local_protection:
        return {true, WcStatus::loc_prot_err, true, Counter::local_protection_err};
    // §9.7.5.1: an acknowledgement for a PSN never sent is invalid: silently dropped.
    case CompError::unsent_psn:
    case CompError::unexpected_response:
        return {false, WcStatus::success, true, Counter::completer_retry_err};
    // Table 46 reserved NAK codes: the responder failed in a way this requester cannot name; as
    // rxe, a remote operational error (fatal).
    case CompError::reserved_nak_code:
        return {true, WcStatus::rem_op_err, true, Counter::req_remote_operational_error};
    // Table 45 reserved AETH type (010), or a NAK / RNR syndrome on a response that must carry an
    // ACK: not a valid acknowledgement, silently dropped (§9.7.5.1), counted.
    case CompError::reserved_syndrome:
        return {false, WcStatus::success, true, Counter::completer_retry_err};
    }
    return {};
}

/** Counts a per-QP event on the QP only (TransportCtx::dev_counters is for events of no QP). */
void count(Qp& qp, TransportCtx& /*ctx*/, Counter c) noexcept {
    qp.counters.inc(c);
}

bool is_read(const SqWqe& w) noexcept {
    return w.opcode == WrOpcode::rdma_read;
}
bool is_atomic(const SqWqe& w) noexcept {
    return w.opcode == WrOpcode::atomic_cmp_and_swp || w.opcode == WrOpcode::atomic_fetch_and_add;
}

/** One past the highest PSN ever sent. */
Psn high_psn(const Qp& qp) noexcept {
    return qp.req.retransmitting && qp.req.resend_until > qp.req.next_psn ? qp.req.resend_until
                                                                          : qp.req.next_psn;
}

/** First response PSN of READ / atomic @p w not yet received. */
Psn expected_response(const Qp& qp, const SqWqe& w) noexcept {
    return is_read(w) ? w.first_psn + w.recv_bytes / qp.mtu : w.first_psn;
}

/**
 * The oldest WQE, or nullptr when there is none whose request went out in the current pass (a READ
 * or atomic rewound by go-back-N and not yet re-sent ignores responses to its earlier request).
 */
SqWqe* oldest(Qp& qp) noexcept {
    const std::uint32_t idx = clamp_first_unacked_wqe(qp);
    if (idx == qp.sq.producer_index() || idx == qp.req.next_wqe) return nullptr;
    SqWqe& w = qp.sq.slot(idx);
    return w.state == WqeState::posted ? nullptr : &w;
}

/**
 * The oldest unacknowledged WQE @p w is acknowledged (all its responses in): it completes
 * successfully now, or, while a driver still holds its payload, as soon as completer_reap() sees it
 * released (always in SQ order).
 */
void complete_ok(Qp& qp, SqWqe& w) noexcept {
    if ((is_read(w) || is_atomic(w)) && qp.req.rd_atomic_inflight > 0) --qp.req.rd_atomic_inflight;
    w.state = WqeState::acked;
    ++qp.comp.first_unacked_wqe;
    (void)completer_reap(qp);
}

/**
 * Completes the oldest unacknowledged WQE with @p status (always, signaled or not: IBTA §10.7.3.1)
 * and moves the QP to ERR, which completes the acknowledged WQEs before it and flushes every later
 * WQE with WR_FLUSH_ERR exactly once (qp_enter_error).
 */
void complete_error(Qp& qp, TransportCtx& ctx, WcStatus status) noexcept {
    const std::uint32_t idx = clamp_first_unacked_wqe(qp);
    if (idx != qp.sq.producer_index()) {
        SqWqe& w = qp.sq.slot(idx);
        qp.fail_wqe(w, WqeState::error_due, status);
    }
    qp_enter_error(qp, ctx);
}

/** Forward progress: fresh retry budgets (§9.7.6.1.3), the ACK timer restarted or stopped. */
void on_progress(Qp& qp, TransportCtx& ctx) noexcept {
    qp.req.retry_left = qp.attr.retry_cnt;
    qp.req.rnr_retry_left = qp.attr.rnr_retry;
    qp.comp.retry_started = false;
    if (qp.comp.oldest_unacked == high_psn(qp) || qp.attr.timeout == 0)
        qp.req.ack_deadline_ns = 0;
    else
        qp.req.ack_deadline_ns = ctx.clock->now_ns() + ack_timeout_ns(qp.attr.timeout);
}

/** Moves oldest_unacked forward to @p p (never back); reports progress. */
void advance_unacked(Qp& qp, TransportCtx& ctx, Psn p) noexcept {
    if (p > qp.comp.oldest_unacked) {
        qp.comp.oldest_unacked = p;
        on_progress(qp, ctx);
    }
}

enum class AckOutcome : std::uint8_t { ok, implied_nak, qp_error };

/**
 * Acknowledges every PSN <= @p p: completes, in order, the WQEs that end at or before @p p.
 * Stops at a READ / atomic whose responses are not all in: if @p p reaches its first missing
 * response PSN, that is an implied NAK (@p retry_psn = that PSN). A WQE that failed locally
 * completes with its status when it becomes the oldest, and the QP goes to ERR.
 */
AckOutcome ack_through(Qp& qp, TransportCtx& ctx, Psn p, Psn& retry_psn) noexcept {
    for (std::uint32_t idx = clamp_first_unacked_wqe(qp); idx != qp.sq.producer_index();
         idx = clamp_first_unacked_wqe(qp)) {
        SqWqe& w = qp.sq.slot(idx);
        if (w.state == WqeState::posted) break;
        if (w.state == WqeState::local_error) { // failed in the requester (its status is set)
            complete_error(qp, ctx, qp.sq_ext_of(w).status);
            return AckOutcome::qp_error;
        }
        // Only WQEs whose packets all went out in the current pass complete. After go-back-N a late
        // ACK may cover WQEs that are queued for resending: they complete when the resend is acked
        // (the responder re-ACKs duplicates), so a slot is never released under the requester.
        if (idx == qp.req.next_wqe) break;
        if (is_read(w) || is_atomic(w)) {
            const Psn e = expected_response(qp, w);
            if (p >= e) { // acknowledged past a response that never came (§9.7.5.1 implied NAK)
                advance_unacked(qp, ctx, e);
                if (!qp.comp.retry_started) count(qp, ctx, Counter::implied_nak_seq_err);
                retry_psn = e;
                return AckOutcome::implied_nak;
            }
            break;
        }
        if (w.last_psn() > p) break;
        complete_ok(qp, w);
    }
    // Never past what the current pass has sent (a late ACK during go-back-N).
    advance_unacked(qp, ctx, p + 1 > qp.req.next_psn ? qp.req.next_psn : p + 1);
    return AckOutcome::ok;
}

/** Index of the WQE whose PSN range holds @p p, searching [consumer, next_wqe]; false if none. */
bool find_wqe(Qp& qp, Psn p, std::uint32_t& idx) noexcept {
    const std::uint32_t lo = clamp_first_unacked_wqe(qp);
    const std::uint32_t prod = qp.sq.producer_index();
    const std::uint32_t hi = qp.req.next_wqe == prod ? prod : qp.req.next_wqe + 1; // exclusive
    auto holds = [&](std::uint32_t i) {
        const SqWqe& w = qp.sq.slot(i);
        return w.state != WqeState::posted && w.npkts != 0 && p >= w.first_psn && p <= w.last_psn();
    };
    // The per-PSN ring knows every request PSN in flight; PSNs inside a READ's response range fall
    // back to the scan.
    const PsnSendState& e = qp.req.psn_ring[p.value() & kPsnRingMask];
    if (e.valid && e.psn == p && e.wqe_index - lo < hi - lo && holds(e.wqe_index)) {
        idx = e.wqe_index;
        return true;
    }
    for (std::uint32_t i = lo; i != hi; ++i) {
        if (holds(i)) {
            idx = i;
            return true;
        }
    }
    return false;
}

/**
 * Go-back-N (IBTA §9.7.5.1): resend everything from PSN @p p. The WQE holding @p p restarts at byte
 * (p - first_psn) * MTU (a READ asks again only for the rest, from va + offset, with PSN p); every
 * later WQE already started is sent again from its beginning, with the same PSNs.
 */
void go_back_n(Qp& qp, Psn p) noexcept {
    RequesterState& req = qp.req;
    std::uint32_t idx = 0;
    if (p == req.next_psn || !find_wqe(qp, p, idx)) return;
    if (!req.retransmitting || req.next_psn > req.resend_until) req.resend_until = req.next_psn;
    req.retransmitting = true;
    const std::uint32_t prod = qp.sq.producer_index();
    const std::uint32_t end = req.next_wqe == prod ? prod : req.next_wqe + 1;
    for (std::uint32_t i = idx + 1; i != end; ++i) {
        SqWqe& w = qp.sq.slot(i);
        if (w.state == WqeState::posted) break;
        if (w.state == WqeState::local_error) continue;
        w.sent_bytes = 0;
        w.recv_bytes = 0;
        w.state = WqeState::sending;
    }
    SqWqe& w = qp.sq.slot(idx);
    const std::uint64_t off =
        is_atomic(w) ? 0 : static_cast<std::uint64_t>(p.distance_from(w.first_psn)) * qp.mtu;
    w.sent_bytes = static_cast<std::uint32_t>(std::min<std::uint64_t>(off, w.length));
    if (is_read(w)) w.recv_bytes = w.sent_bytes;
    w.state = WqeState::sending;
    req.next_wqe = idx;
    req.next_psn = p;
    req.noack_pkts = 0;
}

/** Writes @p data at message offset @p off of @p w's SGEs, each piece checked for local write. */
bool scatter(Qp& qp, TransportCtx& ctx, const SqWqe& w, std::uint32_t off,
             std::span<const std::uint8_t> data) noexcept {
    std::uint32_t pos = 0;
    const Sge* sges = qp.sq_sg_list(w);
    for (std::uint32_t i = 0; i < w.num_sge && !data.empty(); ++i) {
        const Sge& s = sges[i];
        if (off >= pos + s.length) {
            pos += s.length;
            continue;
        }
        const std::uint32_t in_sge = off - pos;
        const std::uint32_t take =
            std::min<std::uint32_t>(static_cast<std::uint32_t>(data.size()), s.length - in_sge);
        std::uint8_t* host = nullptr;
        if (ctx.mrs->check(s.lkey, qp.pd, s.addr + in_sge, take, kAccessLocalWrite, &host) !=
            mem::MemCheck::ok)
            return false;
        std::memcpy(host, data.data(), take);
        data = data.subspan(take);
        off += take;
        pos += s.length;
    }
    return data.empty();
}

/** One incoming response packet on its way through the state machine. */
struct Rx {
    const wire::ParsedFrame& pkt;
    Psn psn;
    Opcode op;
    AethKind kind = AethKind::ack;
    std::uint8_t aeth_value = 0;
    CompError err = CompError::none;
    Psn retry_psn;
};

/** Implicit acknowledgement of every PSN before the packet's own (NAKs and responses, §9.7.5.1). */
CompState implicit_ack(Qp& qp, TransportCtx& ctx, Rx& rx, CompState next) noexcept {
    if (!(rx.psn > qp.comp.oldest_unacked)) return next;
    switch (ack_through(qp, ctx, rx.psn - 1, rx.retry_psn)) {
    case AckOutcome::ok:
        return next;
    case AckOutcome::implied_nak:
        return CompState::retry;
    case AckOutcome::qp_error:
        return CompState::done;
    }
    return next;
}

CompState do_check_psn(Qp& qp, Rx& rx) noexcept {
    switch (rx.op) {
    case Opcode::RC_ACKNOWLEDGE:
    case Opcode::RC_ATOMIC_ACKNOWLEDGE:
    case Opcode::RC_RDMA_READ_RESPONSE_FIRST:
    case Opcode::RC_RDMA_READ_RESPONSE_MIDDLE:
    case Opcode::RC_RDMA_READ_RESPONSE_LAST:
    case Opcode::RC_RDMA_READ_RESPONSE_ONLY:
        break;
    default:
        rx.err = CompError::unexpected_response;
        return CompState::drop;
    }
    if (rx.psn >= high_psn(qp)) { // never sent
        rx.err = CompError::unsent_psn;
        return CompState::drop;
    }
    if (rx.psn < qp.comp.oldest_unacked) return CompState::done; // duplicate / stale: ignored
    return CompState::check_ack;
}

CompState do_check_ack(Rx& rx) noexcept {
    switch (rx.op) {
    case Opcode::RC_ACKNOWLEDGE:
        switch (rx.kind) {
        case AethKind::ack:
            return CompState::ack;
        case AethKind::rnr_nak:
            return CompState::rnr;
        case AethKind::nak:
            switch (static_cast<NakCode>(rx.aeth_value)) {
            case NakCode::psn_sequence_error:
                return CompState::nak_seq;
            case NakCode::invalid_request:
                rx.err = CompError::nak_invalid_request;
                return CompState::remote_error;
            case NakCode::remote_access_error:
                rx.err = CompError::nak_remote_access;
                return CompState::remote_error;
            case NakCode::remote_operational_error:
                rx.err = CompError::nak_remote_operational;
                return CompState::remote_error;
            case NakCode::invalid_rd_request:
                rx.err = CompError::nak_invalid_rd_request;
                return CompState::remote_error;
            }
            rx.err = CompError::reserved_nak_code;
            return CompState::remote_error;
        case AethKind::reserved:
            break;
        }
        rx.err = CompError::reserved_syndrome;
        return CompState::drop;
    case Opcode::RC_ATOMIC_ACKNOWLEDGE:
        if (rx.kind != AethKind::ack) break;
        return CompState::atomic;
    case Opcode::RC_RDMA_READ_RESPONSE_MIDDLE:
        return CompState::read; // no AETH
    default:
        if (rx.kind != AethKind::ack) break;
        return CompState::read;
    }
    rx.err = CompError::reserved_syndrome;
    return CompState::drop;
}

CompState do_ack(Qp& qp, TransportCtx& ctx, Rx& rx) noexcept {
    switch (ack_through(qp, ctx, rx.psn, rx.retry_psn)) {
    case AckOutcome::ok:
        break;
    case AckOutcome::implied_nak:
        return CompState::retry;
    case AckOutcome::qp_error:
        return CompState::done;
    }
    return CompState::done;
}

CompState do_nak_seq(Qp& qp, TransportCtx& ctx, Rx& rx) noexcept {
    count(qp, ctx, Counter::packet_seq_err);
    rx.retry_psn = rx.psn; // go back to the NAK PSN, unless an implied NAK reaches further back
    return implicit_ack(qp, ctx, rx, CompState::retry);
}

CompState do_rnr(Qp& qp, TransportCtx& ctx, Rx& rx) noexcept {
    count(qp, ctx, Counter::rnr_naks_rcvd);
    const CompState s = implicit_ack(qp, ctx, rx, CompState::rnr);
    if (s != CompState::rnr) return s;
    if (qp.req.rnr_retry_left == 0) {
        rx.err = CompError::rnr_retry_exceeded;
        return CompState::error;
    }
    if (qp.attr.rnr_retry != 7) --qp.req.rnr_retry_left; // 7 = retry forever (IBTA §9.7.5.2.8)
    // Wait at least the timer the responder asked for; the ACK timer must not fire meanwhile (rxe
    // once retried on the ACK timeout before the RNR timer): it is stopped and restarts with the
    // resend.
    qp.req.rnr_deadline_ns = ctx.clock->now_ns() + rnr_timer_ns(rx.aeth_value);
    qp.req.ack_deadline_ns = 0;
    go_back_n(qp, rx.psn);
    return CompState::done;
}

CompState do_remote_error(Qp& qp, TransportCtx& ctx, Rx& rx) noexcept {
    const CompState s = implicit_ack(qp, ctx, rx, CompState::error);
    return s == CompState::done ? s : CompState::error; // the NAK is fatal either way
}

CompState do_retry(Qp& qp, Rx& rx) noexcept {
    // One go-back-N per loss: until progress, later NAKs / implied NAKs of the same gap are ignored
    // (rxe started_retry). The ACK timer still retries if the resend is lost too.
    if (qp.comp.retry_started) return CompState::done;
    if (qp.req.retry_left == 0) {
        rx.err = CompError::retry_exceeded;
        return CompState::error;
    }
    --qp.req
          .retry_left; // retry_cnt 7 is seven retries, not infinite (IBTA §9.7.6.1.3; rxe differs)
    qp.comp.retry_started = true;
    go_back_n(qp, rx.retry_psn);
    return CompState::done;
}

CompState do_read(Qp& qp, TransportCtx& ctx, Rx& rx) noexcept {
    const CompState s = implicit_ack(qp, ctx, rx, CompState::read);
    if (s != CompState::read) return s;
    SqWqe* w = oldest(qp);
    if (!w || w->state == WqeState::local_error || !is_read(*w) || rx.psn < w->first_psn ||
        rx.psn > w->last_psn()) {
        rx.err = CompError::unexpected_response;
        return CompState::drop;
    }
    const Psn e = expected_response(qp, *w);
    if (rx.psn < e) return CompState::done; // a duplicate of a response already placed
    if (rx.psn > e) {                       // responses skipped: implied NAK, ask again from e
        // Counted once per gap, like the go-back-N it starts; later responses of the same gap are
        // the tail of the lost burst, not new losses.
        if (!qp.comp.retry_started) count(qp, ctx, Counter::implied_nak_seq_err);
        rx.retry_psn = e;
        return CompState::retry;
    }
    const auto len = static_cast<std::uint32_t>(rx.pkt.payload.size());
    const std::uint32_t rem = w->length - w->recv_bytes;
    const bool last =
        rx.op == Opcode::RC_RDMA_READ_RESPONSE_LAST || rx.op == Opcode::RC_RDMA_READ_RESPONSE_ONLY;
    // FIRST / MIDDLE carry exactly one MTU and leave data to come; LAST / ONLY carry the rest, at
    // most one MTU (§9.7.5.1). Anything else is more (or less) data than the READ asked for.
    if (len > rem || (last ? len != rem : (len != qp.mtu || len == rem))) {
        rx.err = CompError::read_length;
        return CompState::error;
    }
    if (!scatter(qp, ctx, *w, w->recv_bytes, rx.pkt.payload)) {
        rx.err = CompError::local_protection;
        return CompState::error;
    }
    w->recv_bytes += len;
    advance_unacked(qp, ctx, rx.psn + 1);
    return last ? CompState::complete : CompState::done;
}

CompState do_atomic(Qp& qp, TransportCtx& ctx, Rx& rx) noexcept {
    const CompState s = implicit_ack(qp, ctx, rx, CompState::atomic);
    if (s != CompState::atomic) return s;
    SqWqe* w = oldest(qp);
    if (!w || w->state == WqeState::local_error || !is_atomic(*w) || w->first_psn != rx.psn ||
        !rx.pkt.atomic_ack_eth) {
        rx.err = CompError::unexpected_response;
        return CompState::drop;
    }
    const std::uint64_t orig = rx.pkt.atomic_ack_eth->orig_rem_data.get();
    const Sge& sge = qp.sq_sg_list(*w)[0];
    std::uint8_t* host = nullptr;
    if (w->num_sge != 1 || ctx.mrs->check(sge.lkey, qp.pd, sge.addr, 8, kAccessLocalWrite, &host) !=
                               mem::MemCheck::ok) {
        rx.err = CompError::local_protection;
        return CompState::error;
    }
    std::memcpy(host, &orig, sizeof orig);
    advance_unacked(qp, ctx, rx.psn + 1);
    return CompState::complete;
}

CompState do_complete(Qp& qp, TransportCtx& ctx) noexcept {
    const std::uint32_t idx = clamp_first_unacked_wqe(qp);
    if (idx == qp.sq.producer_index()) return CompState::done;
    complete_ok(qp, qp.sq.slot(idx));
    const std::uint32_t next = clamp_first_unacked_wqe(qp);
    if (next != qp.sq.producer_index() && qp.sq.slot(next).state == WqeState::local_error)
        complete_error(qp, ctx, qp.sq_ext_of(qp.sq.slot(next)).status);
    return CompState::done;
}

CompState do_error(Qp& qp, TransportCtx& ctx, Rx& rx) noexcept {
    const Decision d = decide(rx.err);
    if (d.counted) count(qp, ctx, d.counter);
    if (d.fail) complete_error(qp, ctx, d.status);
    return CompState::done;
}

} // namespace

void completer_receive(Qp& qp, const wire::ParsedFrame& pkt, TransportCtx& ctx) noexcept {
    if (!pkt.bth) return;
    if (qp.state != QpState::rts && qp.state != QpState::sqd)
        return; // RESET/INIT/RTR/ERR: nothing to complete
    Rx rx{pkt, pkt.bth->psn(), pkt.bth->opcode(), AethKind::ack, 0, CompError::none, Psn()};
    if (pkt.aeth) {
        rx.kind = pkt.aeth->kind();
        rx.aeth_value = pkt.aeth->value();
        qp.comp.last_msn = pkt.aeth->msn();
    }
    if (rx.op == Opcode::RC_ACKNOWLEDGE) count(qp, ctx, Counter::acks_rcvd);

    CompState s = CompState::check_psn;
    while (s != CompState::done) {
        switch (s) {
        case CompState::check_psn:
            s = do_check_psn(qp, rx);
            break;
        case CompState::check_ack:
            s = do_check_ack(rx);
            break;
        case CompState::ack:
            s = do_ack(qp, ctx, rx);
            break;
        case CompState::read:
            s = do_read(qp, ctx, rx);
            break;
        case CompState::atomic:
            s = do_atomic(qp, ctx, rx);
            break;
        case CompState::nak_seq:
            s = do_nak_seq(qp, ctx, rx);
            break;
        case CompState::rnr:
            s = do_rnr(qp, ctx, rx);
            break;
        case CompState::remote_error:
            s = do_remote_error(qp, ctx, rx);
            break;
        case CompState::retry:
            s = do_retry(qp, rx);
            break;
        case CompState::complete:
            s = do_complete(qp, ctx);
            break;
        case CompState::error:
        case CompState::drop:
            s = do_error(qp, ctx, rx);
            break;
        case CompState::done:
            break;
        }
    }
}

namespace {

/** A local ACK timeout (IBTA §9.7.6.1.3): counted, and one retry of retry_cnt spent. @return
 *  false when none was left: the oldest WQE then failed with RETRY_EXC_ERR and the QP with it. */
bool spend_ack_retry(Qp& qp, TransportCtx& ctx) noexcept {
    count(qp, ctx, Counter::local_ack_timeout_err);
    if (qp.req.retry_left == 0) {
        const Decision d = decide(CompError::retry_exceeded);
        count(qp, ctx, d.counter);
        complete_error(qp, ctx, d.status);
        return false;
    }
    --qp.req.retry_left;
    return true;
}

} // namespace

void completer_timers(Qp& qp, TransportCtx& ctx) noexcept {
    if (qp.state != QpState::rts && qp.state != QpState::sqd) return;
    RequesterState& req = qp.req;
    const std::uint64_t now = ctx.clock->now_ns();
    pacer_on_time(qp, now);
    // RNR wait over: the requester resends from the NAK PSN (rewound when the NAK arrived).
    if (req.rnr_deadline_ns != 0 && now >= req.rnr_deadline_ns) req.rnr_deadline_ns = 0;
    if (req.ack_deadline_ns == 0 || now < req.ack_deadline_ns) return;
    if (qp.comp.oldest_unacked == high_psn(qp)) { // nothing outstanding
        if (req.timer_for_neigh && !qp.path_resolved && req.next_wqe != qp.sq.producer_index()) {
            // Nothing could leave, the peer's MAC still unknown: a retry spent, as if the packets
            // had gone into a link with nobody there.
            if (spend_ack_retry(qp, ctx))
                req.ack_deadline_ns = now + ack_timeout_ns(qp.attr.timeout);
            return;
        }
        req.ack_deadline_ns = 0;
        req.timer_for_neigh = false;
        return;
    }
    if (req.rnr_deadline_ns != 0) { // never retry before the RNR timer
        req.ack_deadline_ns = req.rnr_deadline_ns + ack_timeout_ns(qp.attr.timeout);
        return;
    }
    // Local ACK timeout (IBTA §9.7.6.1.3): retry from the oldest unacknowledged PSN.
    if (!spend_ack_retry(qp, ctx)) return;
    qp.comp.retry_started = true;
    go_back_n(qp, qp.comp.oldest_unacked);
    req.ack_deadline_ns = now + ack_timeout_ns(qp.attr.timeout);
}

std::uint32_t clamp_first_unacked_wqe(Qp& qp) noexcept {
    const std::uint32_t cons = qp.sq.consumer_index();
    // Kept in [consumer, producer]: a flush or a local failure may release slots past it.
    if (qp.comp.first_unacked_wqe - cons > qp.sq.producer_index() - cons)
        qp.comp.first_unacked_wqe = cons;
    return qp.comp.first_unacked_wqe;
}

bool completer_reap(Qp& qp) noexcept {
    const std::uint32_t end = clamp_first_unacked_wqe(qp);
    for (std::uint32_t idx = qp.sq.consumer_index(); idx != end; ++idx) {
        if (!qp.tx_released(idx)) return true; // a driver still holds its payload: not reusable yet
        const SqWqe& w = qp.sq.slot(idx);
        complete_send_wqe(qp, qp.sq_sig_all || (w.send_flags & kSendSignaled), WcStatus::success,
                          is_atomic(w) ? 8u : w.length);
    }
    return false;
}

std::uint64_t completer_next_deadline(const Qp& qp) noexcept {
    std::uint64_t d = 0;
    // The pacer's release time counts only while a packet waits for it.
    const bool waiting = qp.sq.producer_index() != qp.req.next_wqe;
    const std::uint64_t ack_hold = qp.resp.ack_held() ? qp.resp.ack_hold_until_ns : 0;
    for (const std::uint64_t t :
         {qp.req.ack_deadline_ns, qp.req.rnr_deadline_ns, pacer_deadline(qp, waiting), ack_hold})
        if (t != 0 && (d == 0 || t < d)) d = t;
    return d;
}

} // namespace droce::rc
