/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * The RC responder: checks and executes incoming requests and answers them (IBTA Vol 1 §9.7.5.2,
 * §9.7.4; behaviour matched to Linux rxe's drivers/infiniband/sw/rxe/rxe_resp.c in Linux).
 *
 * One request packet runs through an explicit state machine. Each handler
 * returns the next state, so the pipeline reads as a list:
 *
 *   check_qp_state → check_psn → check_op_seq → check_op_valid → check_resource → check_length
 *     → check_rkey → execute → {complete →} acknowledge → done
 *                             → read_reply → done
 *                             → atomic_reply → done
 *   check_psn → duplicate → done          (PSN behind the expected PSN)
 *   any check → error → done              (NAK / RNR NAK / completion / QP to ERR, decided in
 * decide())
 *
 * Every arrow points to a state declared after its own (DROCE_RESP_STATES is in this order), so
 * responder_receive runs the machine in one pass down the list of states.
 *
 * Every error is decided in one switch, decide(), with its IBTA responder error class
 * (§9.9.3: A remote operational, B PSN sequence / RNR, C invalid request / remote access / length,
 * D silent drop, G CQ overrun). Class A and C errors are fatal for an RC QP: the responder NAKs,
 * completes the receive WQE it holds with the error status and moves the QP to ERR.
 *
 * Memory: every byte moved goes through MrTable::check with the exact address and length of that
 * move (rkey + remote access for the peer's target, lkey + local write for receive SGEs).
 * Zero-length READ and WRITE skip the rkey check (C9-88). Nothing here allocates, throws or locks.
 */
#include <algorithm>
#include <atomic>
#include <cassert>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

#include "qp.h"

namespace droce::rc {
namespace {

using wire::AethKind;
using wire::NakCode;
using wire::Opcode;
using wire::OpFlags;

// ------------------------------------------------------------------------------------------ states

// clang-format off
/** X(name, what the handler does). */
#define DROCE_RESP_STATES(X)                                                                       \
    X(check_qp_state, "QP accepts requests (RTR, RTS, SQD, SQE) and opcode is an RC request")      \
    X(check_psn,      "PSN is expected, behind (duplicate) or ahead (sequence error)")              \
    X(check_op_seq,   "MIDDLE/LAST follows FIRST/MIDDLE of the same kind; no FIRST/ONLY mid-message") \
    X(check_op_valid, "QP access flags allow remote write / read / atomic")                        \
    X(check_resource, "a receive WQE for SEND / WRITE with immediate; READ/atomic resources")      \
    X(check_length,   "payload against PMTU and DMA length; atomic alignment")                     \
    X(check_rkey,     "rkey, PD, bounds and access of the target memory")                          \
    X(execute,        "place SEND / WRITE payload")                                                \
    X(complete,       "message end: receive completion, MSN")                                      \
    X(acknowledge,    "advance the expected PSN; ACK when AckReq is set")                          \
    X(read_reply,     "record the READ in a responder resource and send READ RESPONSE packets")    \
    X(atomic_reply,   "execute the atomic once, record it, send ATOMIC ACKNOWLEDGE")               \
    X(duplicate,      "re-ACK a SEND/WRITE, replay a READ or an atomic from its resource")         \
    X(error,          "NAK, error completion, QP to ERR as decide() says")                         \
    X(done,           "packet consumed")
// clang-format on

enum class RespState : std::uint8_t {
#define DROCE_RESP_STATE_ENUM(name, text) name,
    DROCE_RESP_STATES(DROCE_RESP_STATE_ENUM)
#undef DROCE_RESP_STATE_ENUM
};

[[maybe_unused]] constexpr std::string_view kRespStateNames[] = {
#define DROCE_RESP_STATE_NAME(name, text) #name,
    DROCE_RESP_STATES(DROCE_RESP_STATE_NAME)
#undef DROCE_RESP_STATE_NAME
};

// clang-format off
/** X(name) of every error the responder can detect. */
#define DROCE_RESP_ERRORS(X) \
    X(none)                  \
    X(psn_ahead)             \
    X(rnr)                   \
    X(opcode_sequence)       \
    X(bad_length)            \
    X(misaligned_atomic)     \
    X(too_many_rd_atomic)    \
    X(remote_access)         \
    X(local_length)          \
    X(local_protection)      \
    X(cq_overflow)
// clang-format on

enum class RespError : std::uint8_t {
#define DROCE_RESP_ERROR_ENUM(name) name,
    DROCE_RESP_ERRORS(DROCE_RESP_ERROR_ENUM)
#undef DROCE_RESP_ERROR_ENUM
};

[[maybe_unused]] constexpr std::string_view kRespErrorNames[] = {
#define DROCE_RESP_ERROR_NAME(name) #name,
    DROCE_RESP_ERRORS(DROCE_RESP_ERROR_NAME)
#undef DROCE_RESP_ERROR_NAME
};

/** What the responder does about an error. */
struct ErrorAction {
    bool send = false; ///< transmit an ACKNOWLEDGE carrying @c syndrome
    std::uint8_t syndrome = 0;
    bool at_expected_psn =
        false; ///< the NAK carries the expected PSN (sequence error), else the offending PSN
    Counter counter = Counter::count_; ///< count_ = none
    Counter counter2 = Counter::count_;
    bool complete_wqe = false; ///< complete the held receive WQE with @c status
    WcStatus status = WcStatus::success;
    bool fatal = false; ///< move the QP to ERR
};

constexpr std::uint8_t nak(NakCode c) noexcept {
    return wire::make_syndrome(AethKind::nak, static_cast<std::uint8_t>(c));
}

/**
 * The one place that decides NAK syndrome, completion status and QP fate.
 * Classes are those of IBTA Vol 1 §9.9.3 (responder error behaviour) for an RC QP.
 */
ErrorAction decide(RespError e, const Qp& qp) noexcept {
    ErrorAction a;
    switch (e) {
    case RespError::none:
        break;
    case RespError::psn_ahead:
        // Class B (§9.7.5.2, §9.9.3): one NAK PSN sequence error carrying the expected PSN; the QP
        // stays up and later out-of-order packets are dropped until the expected PSN arrives.
        a.send = true;
        a.syndrome = nak(NakCode::psn_sequence_error);
        a.at_expected_psn = true;
        a.counter = Counter::seq_naks_sent;
        break;
    case RespError::rnr:
        // Class B (§9.7.5.2, §9.9.3): no receive WQE: RNR NAK with the QP's minimum RNR timer, PSN
        // of the request; the expected PSN does not move, the requester retries the same packet.
        a.send = true;
        a.syndrome = wire::make_syndrome(AethKind::rnr_nak, qp.attr.min_rnr_timer);
        a.counter = Counter::rnr_naks_sent;
        break;
    case RespError::opcode_sequence:    // Class C: missing FIRST, or FIRST/ONLY before LAST
    case RespError::bad_length:         // Class C: payload vs PMTU / DMA length, DMA length > 2^31
    case RespError::misaligned_atomic:  // Class C: atomic VA not 8-byte aligned
    case RespError::too_many_rd_atomic: // Class C: READ/atomic with max_dest_rd_atomic == 0
        a.send = true;
        a.syndrome = nak(NakCode::invalid_request);
        a.counter = Counter::resp_invalid_request;
        a.complete_wqe = true;
        a.status = WcStatus::rem_inv_req_err;
        a.fatal = true;
        break;
    case RespError::remote_access:
        // Class C (§9.7.4 memory checks): rkey invalid, PD, bounds or access flags (MR or QP).
        a.send = true;
        a.syndrome = nak(NakCode::remote_access_error);
        a.counter = Counter::resp_remote_access_errors;
        a.complete_wqe = true;
        a.status = WcStatus::rem_access_err;
        a.fatal = true;
        break;
    case RespError::local_length:
        // Class C: the SEND is longer than the receive WQE. The requester sees Invalid Request, the
        // responder completes the receive WQE with Local Length Error (as rxe and ConnectX do).
        a.send = true;
        a.syndrome = nak(NakCode::invalid_request);
        a.counter = Counter::resp_local_length_error;
        a.counter2 = Counter::resp_invalid_request;
        a.complete_wqe = true;
        a.status = WcStatus::loc_len_err;
        a.fatal = true;
        break;
    case RespError::local_protection:
        // Class A: a receive SGE failed its lkey check (a malformed receive WQE, not the peer's
        // fault): NAK Remote Operational Error, receive WQE completes with Local Protection Error.
        a.send = true;
        a.syndrome = nak(NakCode::remote_operational_error);
        a.counter = Counter::local_protection_err;
        a.complete_wqe = true;
        a.status = WcStatus::loc_prot_err;
        a.fatal = true;
        break;
    case RespError::cq_overflow:
        // Class G: CQ overrun: no NAK, the QP goes to ERR (the CQ is marked overflowed).
        a.fatal = true;
        break;
    }
    return a;
}

// ------------------------------------------------------------------------------------------
// helpers

/** States in which the responder accepts requests (IBTA ch. 10.3 QP states: RTR and later, until
 * ERR). */
constexpr bool accepts_requests(QpState s) noexcept {
    return s == QpState::rtr || s == QpState::rts || s == QpState::sqd || s == QpState::sqe;
}

/** Counts a per-QP event on the QP only (TransportCtx::dev_counters is for events of no QP). */
void count(Qp& qp, TransportCtx& /*ctx*/, Counter c) noexcept {
    if (c == Counter::count_) return;
    qp.counters.inc(c);
}

constexpr std::uint8_t kAckSyndrome = wire::make_syndrome(AethKind::ack, wire::kAethCreditsInvalid);

wire::PacketFields response_fields(const Qp& qp, Opcode op, Psn psn) noexcept {
    wire::PacketFields f;
    f.opcode = op;
    f.dest_qp = qp.attr.dest_qp_num;
    f.psn = psn;
    return f;
}

/**
 * Sends the owed ACK (ResponderState::ack_pending) now. Refused by a full tx path, it stays owed
 * (no longer held) for the QP's next pass, which has_work() asks for: a lost ACK would cost the
 * requester its ACK timeout when nothing after it acknowledges the same PSNs. @return whether the
 * tx path took it.
 */
bool flush_ack(Qp& qp, TransportCtx& ctx) noexcept;

/** Sends the owed RNR NAK (ResponderState::rnr_nak_owed; every RNR NAK is sent this way, fail());
 *  refused, it stays owed. @return whether the tx path took it. */
bool flush_rnr_nak(Qp& qp, TransportCtx& ctx) noexcept;

/** The owed ACK, then an owed RNR NAK, now, unless a READ response is going out: they are then for
 *  requests accepted behind that response and leave after its last packet (send_responses). */
void flush_owed_ack(Qp& qp, TransportCtx& ctx) noexcept {
    if (qp.resp.read_active) return;
    if (qp.resp.ack_pending && !flush_ack(qp, ctx)) return;
    if (qp.resp.rnr_nak_owed) (void)flush_rnr_nak(qp, ctx);
}

/**
 * Stages one response packet (TransportCtx::tx) on the QP's path, as it is: what is owed does not
 * go first (transmit() does that; the owed answers themselves are staged here). The engine counts
 * sent_pkts when it builds the frame; a refusal is counted here per QP.
 */
bool stage_response(Qp& qp, TransportCtx& ctx, const wire::PacketFields& f,
                    std::span<const std::uint8_t> data = {}) noexcept {
    if (!qp.path_resolved) { // the peer's MAC is being resolved (ARP / ND): the response is lost
        qp.counters.inc(Counter::tx_wait_neigh);
        return false;
    }
    const std::span<const std::uint8_t> parts[1] = {data};
    // Responses go back on the QP's first path; they are copied (no WQE waits for their release).
    const Path& route = qp.paths[0];
    const bool ok =
        ctx.tx != nullptr &&
        ctx.tx->append(route.hdr, route.port, qp.loopback_peer, f,
                       std::span<const std::span<const std::uint8_t>>(parts, data.empty() ? 0 : 1),
                       nullptr, &qp.counters);
    if (!ok) qp.counters.inc(Counter::tx_no_buffer);
    return ok;
}

/**
 * Stages one response packet after what is owed (a deferred ACK, an RNR NAK), so responses leave
 * in the order they were decided, except while a READ response is going out: what is owed then is
 * for requests behind the READ and waits for the READ's last response (send_responses).
 */
bool transmit(Qp& qp, TransportCtx& ctx, const wire::PacketFields& f,
              std::span<const std::uint8_t> data = {}) noexcept {
    if (qp.path_resolved) flush_owed_ack(qp, ctx);
    return stage_response(qp, ctx, f, data);
}

/** Positive ACKNOWLEDGE for @p psn with the current MSN. */
void send_ack(Qp& qp, TransportCtx& ctx, Psn psn) noexcept {
    wire::PacketFields f = response_fields(qp, Opcode::RC_ACKNOWLEDGE, psn);
    f.syndrome = kAckSyndrome;
    f.msn = qp.resp.msn;
    if (transmit(qp, ctx, f)) count(qp, ctx, Counter::acks_sent);
}

bool flush_ack(Qp& qp, TransportCtx& ctx) noexcept {
    qp.resp.ack_pending = false;
    qp.resp.ack_hold_until_ns = 0;
    wire::PacketFields f = response_fields(qp, Opcode::RC_ACKNOWLEDGE, qp.resp.ack_psn);
    f.syndrome = kAckSyndrome;
    f.msn = qp.resp.ack_msn;
    if (!stage_response(qp, ctx, f)) {
        qp.resp.ack_pending = qp.path_resolved; // unresolved: the neighbour's resolution retries
        return false;
    }
    count(qp, ctx, Counter::acks_sent);
    return true;
}

bool flush_rnr_nak(Qp& qp, TransportCtx& ctx) noexcept {
    qp.resp.rnr_nak_owed = false;
    const ErrorAction a = decide(RespError::rnr, qp);
    wire::PacketFields f = response_fields(qp, Opcode::RC_ACKNOWLEDGE, qp.resp.rnr_nak_psn);
    f.syndrome = a.syndrome;
    f.msn = qp.resp.msn;
    if (!stage_response(qp, ctx, f)) {
        qp.resp.rnr_nak_owed = qp.path_resolved;
        return false;
    }
    count(qp, ctx, a.counter);
    return true;
}

/** An ACK for @p psn: now, or owed until the end of the burst (TransportCtx::defer_acks). */
void ack_or_defer(Qp& qp, TransportCtx& ctx, Psn psn) noexcept {
    ResponderState& r = qp.resp;
    if (r.read_active) {
        // The request was accepted behind a READ response still going out: its ACK must not
        // overtake that response (a requester takes an ACK beyond an outstanding READ for a lost
        // response and retries the READ, as rxe's completer does), so it is owed until the
        // READ's last response has left (send_responses), and held for nothing else.
        r.ack_hold_until_ns = 0;
    } else if (!ctx.defer_acks) {
        send_ack(qp, ctx, psn);
        return;
    } else if (!r.ack_pending) {
        // Owed anew on a QP that answered the request before this one: held for its next
        // request (ack_hold_until_ns). A newer ACK keeps the first one's deadline, so a stream
        // cannot hold it for ever.
        const std::uint64_t now = ctx.pass_start_ns;
        const std::uint64_t talked = qp.req.last_request_pass_ns;
        const bool answered = talked != 0 && talked != r.talked_at_last_owed_ns;
        r.talked_at_last_owed_ns = talked;
        r.ack_hold_until_ns = now != 0 && ctx.hold_acks && answered && qp.state == QpState::rts
                                  ? now + kAckHoldNs
                                  : 0;
    }
    // A newer cumulative ACK replaces the owed one (same QP, later PSN, MSN not smaller).
    r.ack_pending = true;
    r.ack_psn = psn;
    r.ack_msn = r.msn;
}

/** ATOMIC ACKNOWLEDGE of the atomic at @p psn with its original value @p orig. @return whether the
 *  tx path took it. */
bool send_atomic_ack(Qp& qp, TransportCtx& ctx, Psn psn, std::uint32_t msn,
                     std::uint64_t orig) noexcept {
    wire::PacketFields f = response_fields(qp, Opcode::RC_ATOMIC_ACKNOWLEDGE, psn);
    f.syndrome = kAckSyndrome;
    f.msn = msn;
    f.orig_rem_data = orig;
    return transmit(qp, ctx, f);
}

constexpr std::uint32_t next_msn(std::uint32_t msn) noexcept {
    return (msn + 1) & 0xffffffu;
}

/** Response packets a READ of @p len bytes takes: one per PMTU, and one for a zero-length READ. */
constexpr std::uint32_t read_packets(std::uint32_t len, std::uint32_t mtu) noexcept {
    return len == 0 ? 1 : (len + mtu - 1) / mtu;
}

/** Capacity of the responder resource ring (attr.max_dest_rd_atomic, bounded by the array). */
std::uint32_t resource_capacity(const Qp& qp) noexcept {
    return std::min<std::uint32_t>(qp.attr.max_dest_rd_atomic, kMaxRdAtomic);
}

/** Stores @p res in the ring, overwriting the oldest entry (the requester's max_rd_atomic bounds
 * use). */
void record_resource(Qp& qp, const ResponderResource& res) noexcept {
    const std::uint32_t cap = resource_capacity(qp);
    const std::uint32_t i = qp.resp.next_resource % cap;
    qp.resp.resources[i] = res;
    qp.resp.next_resource = (i + 1) % cap;
}

/**
 * The READ or atomic accepted next after the one whose last PSN is @p last: of the resources that
 * lie between it and the expected PSN, the one that begins first (WRITEs and SENDs accepted behind
 * a READ response may lie between the two), or nullptr.
 */
const ResponderResource* next_response_after(const Qp& qp, Psn last) noexcept {
    const ResponderResource* next = nullptr;
    std::int32_t next_d = 0;
    const std::int32_t limit = qp.resp.expected_psn.distance_from(last);
    for (std::uint32_t i = 0; i < resource_capacity(qp); ++i) {
        const ResponderResource& r = qp.resp.resources[i];
        if (!r.valid) continue;
        const std::int32_t d = r.first_psn.distance_from(last);
        if (d > 0 && d < limit && (next == nullptr || d < next_d)) {
            next = &r;
            next_d = d;
        }
    }
    return next;
}

/** The resource whose PSN range holds @p psn, of the kind asked for, or nullptr. */
const ResponderResource* find_resource(const Qp& qp, Psn psn, bool atomic) noexcept {
    const std::uint32_t cap = resource_capacity(qp);
    for (std::uint32_t i = 0; i < cap; ++i) {
        const ResponderResource& r = qp.resp.resources[i];
        if (!r.valid || r.is_atomic != atomic) continue;
        if (psn >= r.first_psn && psn <= r.last_psn) return &r;
    }
    return nullptr;
}

/** Sum of the SGE lengths of @p w (its capacity). */
std::uint64_t recv_capacity(const RecvWqe& w) noexcept {
    std::uint64_t n = 0;
    const std::uint32_t k = std::min(w.num_sge, kMaxSge);
    for (std::uint32_t i = 0; i < k; ++i)
        n += w.sg_list[i].length;
    return n;
}

/**
 * Executes an 8-byte atomic on @p host (native byte order, as verbs defines the target) and returns
 * the value found there. Lock free on an aligned host address; the VA was checked 8-byte aligned,
 * the host address of an MR registered with an iova of another alignment falls back to a plain
 * access (only the engine thread executes atomics, so it is still exactly once).
 */
std::uint64_t execute_atomic(std::uint8_t* host, bool compare_swap, std::uint64_t swap_add,
                             std::uint64_t compare) noexcept {
    if (reinterpret_cast<std::uintptr_t>(host) %
            std::atomic_ref<std::uint64_t>::required_alignment ==
        0) {
        std::atomic_ref<std::uint64_t> target(*reinterpret_cast<std::uint64_t*>(host));
        if (!compare_swap) return target.fetch_add(swap_add, std::memory_order_seq_cst);
        std::uint64_t seen = compare;
        target.compare_exchange_strong(seen, swap_add, std::memory_order_seq_cst);
        return seen; // unchanged (== compare) on success, the current value on failure
    }
    std::uint64_t orig = 0;
    std::memcpy(&orig, host, sizeof orig);
    const std::uint64_t next = compare_swap ? (orig == compare ? swap_add : orig) : orig + swap_add;
    std::memcpy(host, &next, sizeof next);
    return orig;
}

void handle_error(Qp& qp, TransportCtx& ctx, RespError e, Psn offending_psn) noexcept;

/**
 * Sends READ RESPONSE packets of qp.resp.read from read_offset on, until the response is complete,
 * @p budget packets went out or the tx path refuses (state is kept; responder_run resumes), then
 * those of the READs and atomics queued behind it (ResponderState::reads_queued), in PSN order.
 * Each packet's data is checked again with its exact VA and length before it is read.
 */
std::uint32_t send_responses(Qp& qp, TransportCtx& ctx, std::uint32_t budget) noexcept {
    ResponderState& r = qp.resp;
    std::uint32_t sent = 0;
    while (r.read_active && sent < budget) {
        if (r.read.is_atomic) {
            // Executed when it arrived; its answer waited for its turn or for room.
            if (!send_atomic_ack(qp, ctx, r.read.first_psn, r.read.msn, r.read.atomic_orig))
                return sent;
            ++sent;
            r.read_offset = r.read.length;
            r.read_next_psn = r.read.last_psn + 1;
        } else {
            const std::uint32_t total = r.read.length;
            const std::uint32_t off = r.read_offset;
            const std::uint32_t n = std::min(qp.mtu, total - off);
            Opcode op = Opcode::RC_RDMA_READ_RESPONSE_MIDDLE;
            if (total <= qp.mtu)
                op = Opcode::RC_RDMA_READ_RESPONSE_ONLY;
            else if (off == 0)
                op = Opcode::RC_RDMA_READ_RESPONSE_FIRST;
            else if (off + n == total)
                op = Opcode::RC_RDMA_READ_RESPONSE_LAST;

            std::span<const std::uint8_t> data;
            if (n != 0) {
                std::uint8_t* host = nullptr;
                if (ctx.mrs == nullptr ||
                    ctx.mrs->check(r.read.rkey, qp.pd, r.read.va + off, n, kAccessRemoteRead,
                                   &host) != mem::MemCheck::ok) {
                    // The MR went away after the request was accepted.
                    handle_error(qp, ctx, RespError::remote_access, r.read_next_psn);
                    return sent;
                }
                data = std::span<const std::uint8_t>(host, n);
            }
            wire::PacketFields f = response_fields(qp, op, r.read_next_psn);
            f.syndrome = kAckSyndrome; // build_frame writes the AETH on FIRST/LAST/ONLY only
            f.msn = r.read.msn;
            if (!transmit(qp, ctx, f, data)) return sent;
            ++sent;
            r.read_offset += n;
            ++r.read_next_psn;
        }
        if (r.read_offset == r.read.length) {
            r.read_active = false;
            const ResponderResource* next = nullptr;
            if (r.reads_queued > 0) {
                --r.reads_queued;
                Psn from = r.read.last_psn;
                if (from.distance_from(r.queue_after) < 0) from = r.queue_after; // after a replay
                next = next_response_after(qp, from);
                if (next == nullptr) r.reads_queued = 0; // overwritten: the requester retries it
            }
            // The ACK owed for WRITEs and SENDs accepted behind this READ leaves right after its
            // last response, unless the last of them lies beyond the next READ or atomic, whose
            // responses then acknowledge them first (ACKs are cumulative).
            if (r.ack_pending && (next == nullptr || r.ack_psn.distance_from(next->first_psn) < 0))
                (void)flush_ack(qp, ctx);
            // The request that found no receive WQE came after every queued one.
            if (next == nullptr && r.rnr_nak_owed && !r.ack_pending) (void)flush_rnr_nak(qp, ctx);
            if (next != nullptr) {
                r.read = *next;
                r.read_offset = 0;
                r.read_next_psn = next->first_psn;
                r.read_active = true;
            }
        }
    }
    return sent;
}

/** Starts answering @p res (a READ from its first PSN, or an atomic). */
void start_response(Qp& qp, TransportCtx& ctx, const ResponderResource& res) noexcept {
    flush_owed_ack(qp, ctx); // for requests before this response: ahead of it
    qp.resp.read = res;
    qp.resp.read_offset = 0;
    qp.resp.read_next_psn = res.first_psn;
    qp.resp.read_active = true;
    (void)send_responses(qp, ctx, ~0u);
}

/** Completes the receive WQE the responder holds and releases its slot. @return false on CQ
 * overrun. */
bool complete_recv(Qp& qp, const Cqe& proto, bool solicited = false) noexcept {
    const RecvWqe& w = qp.rq.slot(qp.rq.consumer_index());
    Cqe c = proto;
    c.wr_id = w.wr_id;
    c.qp_num = qp.qpn;
    c.src_qp = qp.attr.dest_qp_num;
    // The slot is the application's again before the completion says so (complete_send_wqe).
    qp.rq.release();
    qp.resp.have_recv_wqe = false;
    qp.resp.recv_offset = 0;
    return qp.recv_cq == nullptr || cq_push(*qp.recv_cq, c, solicited);
}

void handle_error(Qp& qp, TransportCtx& ctx, RespError e, Psn offending_psn) noexcept {
    const ErrorAction a = decide(e, qp);
    if (a.send) {
        wire::PacketFields f = response_fields(
            qp, Opcode::RC_ACKNOWLEDGE, a.at_expected_psn ? qp.resp.expected_psn : offending_psn);
        f.syndrome = a.syndrome;
        f.msn = qp.resp.msn;
        const bool sent = transmit(qp, ctx, f);
        // The sequence NAK is sent exactly once: if the tx path refused it, the next out-of-order
        // packet tries again. A NAK that could not be sent is not counted as sent, except for the
        // fatal errors, which happened whether or not their NAK left.
        if (e == RespError::psn_ahead) qp.resp.sent_psn_nak = sent;
        if (sent || a.fatal) {
            count(qp, ctx, a.counter);
            count(qp, ctx, a.counter2);
        }
    } else {
        count(qp, ctx, a.counter);
    }
    if (a.complete_wqe && qp.resp.have_recv_wqe && qp.rq.ready() > 0) {
        Cqe c{};
        c.status = a.status;
        c.opcode = WcOpcode::recv;
        c.byte_len = qp.resp.recv_offset;
        (void)complete_recv(qp, c);
    }
    if (a.fatal) {
        qp.resp.in_send = false;
        qp.resp.in_write = false;
        qp.resp.have_recv_wqe = false;
        qp_enter_error(qp, ctx);
    }
}

// ------------------------------------------------------------------------------------------ packet

/** One request packet on its way through the state machine. */
struct Rx {
    Qp& qp;
    TransportCtx& ctx;
    const wire::ParsedFrame& pkt;
    const wire::OpcodeInfo& info;
    Opcode op;
    Psn psn;
    std::uint32_t paylen;
    /** WRITE: host address of this packet's target, approved for exactly paylen bytes.
     *  Atomic: host address of the 8-byte target. */
    std::uint8_t* host = nullptr;
    RespError err = RespError::none;
    /** Accepted while a READ response of the QP is still going out (on_check_qp_state). */
    bool behind_read = false;

    [[nodiscard]] bool is(OpFlags f) const noexcept { return info.is(f); }
    [[nodiscard]] bool first() const noexcept { return info.is(OpFlags::first); }
    [[nodiscard]] bool last() const noexcept { return info.is(OpFlags::last); }
    [[nodiscard]] bool middle() const noexcept { return info.is(OpFlags::middle); }
};

RespState fail(Rx& rx, RespError e) noexcept {
    if (e == RespError::rnr) {
        // Class B, nothing changed yet (the receive WQE is checked first). The NAK is owed and
        // leaves now, behind an owed ACK; behind a READ response still going out, after its last
        // packet; refused by the tx path, on the QP's next pass (ResponderState::rnr_nak_owed).
        if (!rx.qp.path_resolved) { // the peer's MAC is being resolved: lost, as any response
            rx.qp.counters.inc(Counter::tx_wait_neigh);
            return RespState::done;
        }
        rx.qp.resp.rnr_nak_owed = true;
        rx.qp.resp.rnr_nak_psn = rx.psn;
        flush_owed_ack(rx.qp, rx.ctx);
        return RespState::done;
    }
    if (rx.behind_read && e != RespError::cq_overflow) {
        // Its NAK would overtake the READ response, so the request is dropped as if it had not
        // been accepted (nothing before these checks changed what the retry finds) and the error
        // is answered when the requester sends it again after the response. A CQ overrun comes
        // after the data is placed and sends no NAK: it takes the QP down as always.
        rx.qp.counters.inc(Counter::tx_no_buffer);
        return RespState::done;
    }
    rx.err = e;
    return RespState::error;
}

RespState on_check_qp_state(Rx& rx) noexcept {
    Qp& qp = rx.qp;
    // Only RC requests reach the responder of an RC QP; anything else is a header error (silent
    // drop).
    if (!rx.is(OpFlags::request) || wire::transport_of(rx.op) != wire::Transport::rc) {
        count(qp, rx.ctx, Counter::rx_dropped_malformed);
        return RespState::done;
    }
    if (!accepts_requests(qp.state)) {
        count(qp, rx.ctx, Counter::rx_dropped_bad_qp);
        return RespState::done;
    }
    if (qp.resp.read_active) {
        // A READ response is still going out; it must finish before anything later is answered
        // (responses leave in PSN order). If the tx path still refuses, the request in sequence
        // is accepted behind it: a READ or an atomic is queued while the resource ring has room
        // (on_read_reply, on_atomic_reply: an atomic executes now, its answer waits), a WRITE or
        // SEND is executed and its ACK owed until the response is out (ack_or_defer), as rxe's
        // packet queue holds them for its responder. IBTA lets a later WRITE or atomic reach
        // memory before an earlier READ's data is read (the requester's fence orders them when
        // it must). Anything else (out of sequence, a duplicate, beyond the ring) is dropped:
        // the requester's timer or our sequence NAK, once the response is out, brings it back,
        // and no NAK overtakes the responses.
        (void)send_responses(qp, rx.ctx, ~0u);
        if (qp.resp.read_active) {
            if (rx.psn == qp.resp.expected_psn) {
                if ((rx.is(OpFlags::read) || rx.is(OpFlags::atomic)) &&
                    qp.resp.reads_queued + 1u < resource_capacity(qp)) {
                    rx.behind_read = true;
                    return RespState::check_psn;
                }
                // Not a SEND with Invalidate (class J) nor a completion the CQ has no room for
                // (class G): either takes the QP to ERR, which would discard the responses ahead.
                const bool fatal_ahead =
                    rx.pkt.ieth != nullptr || (rx.is(OpFlags::completes) && qp.recv_cq != nullptr &&
                                               qp.recv_cq->ring.free_slots() == 0);
                if ((rx.is(OpFlags::write) || rx.is(OpFlags::send)) && !fatal_ahead) {
                    rx.behind_read = true;
                    return RespState::check_psn;
                }
            }
            qp.counters.inc(Counter::tx_no_buffer);
            return RespState::done;
        }
        if (!accepts_requests(qp.state))
            return RespState::done; // the READ failed and took the QP down
    }
    return RespState::check_psn;
}

RespState on_check_psn(Rx& rx) noexcept {
    ResponderState& r = rx.qp.resp;
    const std::int32_t d = rx.psn.distance_from(r.expected_psn);
    if (d > 0) {
        count(rx.qp, rx.ctx, Counter::out_of_sequence);
        if (r.sent_psn_nak) return RespState::done; // one NAK per gap, then silence (class B)
        return fail(rx, RespError::psn_ahead);
    }
    if (d < 0) {
        count(rx.qp, rx.ctx, Counter::duplicate_request);
        return RespState::duplicate;
    }
    r.sent_psn_nak = false;
    r.rnr_nak_owed = false; // it was for this PSN: the request is tried again now
    return RespState::check_op_seq;
}

RespState on_check_op_seq(Rx& rx) noexcept {
    const ResponderState& r = rx.qp.resp;
    bool ok;
    if (r.in_send)
        ok = rx.is(OpFlags::send) && !rx.first();
    else if (r.in_write)
        ok = rx.is(OpFlags::write) && !rx.first();
    else
        ok = rx.first(); // FIRST or ONLY (READ and atomics are ONLY)
    return ok ? RespState::check_op_valid : fail(rx, RespError::opcode_sequence);
}

RespState on_check_op_valid(Rx& rx) noexcept {
    const std::uint32_t qp_access = rx.qp.attr.qp_access_flags;
    std::uint32_t need = 0;
    if (rx.is(OpFlags::write))
        need = kAccessRemoteWrite;
    else if (rx.is(OpFlags::read))
        need = kAccessRemoteRead;
    else if (rx.is(OpFlags::atomic))
        need = kAccessRemoteAtomic;
    // rxe answers a QP without the flag with Invalid Request; droce, like ConnectX, with Remote
    // Access Error (the QP's access enables are part of the remote access check, §9.7.4).
    if ((qp_access & need) != need) return fail(rx, RespError::remote_access);
    return RespState::check_resource;
}

RespState on_check_resource(Rx& rx) noexcept {
    Qp& qp = rx.qp;
    if (rx.is(OpFlags::recv_wqe) && !qp.resp.have_recv_wqe) {
        // SEND FIRST/ONLY or WRITE with immediate LAST/ONLY takes the next receive WQE; it is
        // released when the message completes.
        if (qp.rq.ready() == 0) return fail(rx, RespError::rnr);
        qp.resp.have_recv_wqe = true;
        qp.resp.recv_offset = 0;
    }
    if ((rx.is(OpFlags::read) || rx.is(OpFlags::atomic)) && resource_capacity(qp) == 0)
        return fail(rx, RespError::too_many_rd_atomic);
    return RespState::check_length;
}

RespState on_check_length(Rx& rx) noexcept {
    const std::uint32_t mtu = rx.qp.mtu;
    if (rx.is(OpFlags::payload)) {
        // FIRST and MIDDLE carry exactly one PMTU, LAST 1..PMTU, ONLY 0..PMTU.
        bool ok;
        if (rx.first() && rx.last())
            ok = rx.paylen <= mtu;
        else if (rx.first() || rx.middle())
            ok = rx.paylen == mtu;
        else
            ok = rx.paylen >= 1 && rx.paylen <= mtu;
        if (!ok) return fail(rx, RespError::bad_length);
    }
    if (rx.pkt.reth != nullptr && rx.pkt.reth->dma_len.get() > kMaxMsgSize)
        return fail(rx, RespError::bad_length);
    if (rx.is(OpFlags::write)) {
        // Never more than the RETH DMA length; exactly that much by the LAST packet.
        const std::uint32_t remaining =
            rx.first() ? rx.pkt.reth->dma_len.get() : rx.qp.resp.write_remaining;
        if (rx.paylen > remaining || (rx.last() && rx.paylen != remaining))
            return fail(rx, RespError::bad_length);
    }
    if (rx.is(OpFlags::atomic) && (rx.pkt.atomic_eth->va.get() & 7u) != 0)
        return fail(rx, RespError::misaligned_atomic);
    return RespState::check_rkey;
}

RespState on_check_rkey(Rx& rx) noexcept {
    Qp& qp = rx.qp;
    mem::MrTable* mrs = rx.ctx.mrs;
    if (rx.is(OpFlags::write)) {
        if (rx.first()) {
            const wire::Reth& reth = *rx.pkt.reth;
            const std::uint32_t len = reth.dma_len.get();
            if (len == 0) return RespState::execute; // C9-88: no rkey check for a zero-length WRITE
            // The whole DMA range is checked at the first packet; its host address is this
            // packet's.
            if (mrs == nullptr || mrs->check(reth.rkey.get(), qp.pd, reth.va.get(), len,
                                             kAccessRemoteWrite, &rx.host) != mem::MemCheck::ok)
                return fail(rx, RespError::remote_access);
        } else if (rx.paylen != 0) {
            // Later packets: exactly this packet's bytes (the MR may have changed since FIRST).
            if (mrs == nullptr || mrs->check(qp.resp.write_rkey, qp.pd, qp.resp.write_va, rx.paylen,
                                             kAccessRemoteWrite, &rx.host) != mem::MemCheck::ok)
                return fail(rx, RespError::remote_access);
        }
        return RespState::execute;
    }
    if (rx.is(OpFlags::read)) {
        const wire::Reth& reth = *rx.pkt.reth;
        const std::uint32_t len = reth.dma_len.get();
        if (len != 0 &&
            (mrs == nullptr || mrs->check(reth.rkey.get(), qp.pd, reth.va.get(), len,
                                          kAccessRemoteRead, nullptr) != mem::MemCheck::ok))
            return fail(rx, RespError::remote_access);
        return RespState::read_reply;
    }
    if (rx.is(OpFlags::atomic)) {
        const wire::AtomicEth& a = *rx.pkt.atomic_eth;
        if (mrs == nullptr || mrs->check(a.rkey.get(), qp.pd, a.va.get(), sizeof(std::uint64_t),
                                         kAccessRemoteAtomic, &rx.host) != mem::MemCheck::ok)
            return fail(rx, RespError::remote_access);
        return RespState::atomic_reply;
    }
    return RespState::execute; // SEND: receive SGEs are checked as the data is scattered
}

/** Scatters a SEND's payload into the held receive WQE at recv_offset, SGE by SGE. */
RespError place_send(Rx& rx) noexcept {
    Qp& qp = rx.qp;
    ResponderState& r = qp.resp;
    const RecvWqe& w = qp.rq.slot(qp.rq.consumer_index());
    if (static_cast<std::uint64_t>(r.recv_offset) + rx.paylen > recv_capacity(w))
        return RespError::local_length;
    std::uint64_t skip = r.recv_offset; // bytes of earlier packets, filled SGE by SGE
    std::uint32_t done = 0;
    const std::uint32_t k = std::min(w.num_sge, kMaxSge);
    for (std::uint32_t i = 0; i < k && done < rx.paylen; ++i) {
        const Sge& s = w.sg_list[i];
        if (skip >= s.length) {
            skip -= s.length;
            continue;
        }
        const std::uint32_t n =
            std::min(static_cast<std::uint32_t>(s.length - skip), rx.paylen - done);
        std::uint8_t* host = nullptr;
        if (rx.ctx.mrs == nullptr ||
            rx.ctx.mrs->check(s.lkey, qp.pd, s.addr + skip, n, kAccessLocalWrite, &host) !=
                mem::MemCheck::ok)
            return RespError::local_protection;
        std::memcpy(host, rx.pkt.payload.data() + done, n);
        done += n;
        skip = 0;
    }
    r.recv_offset += rx.paylen;
    return RespError::none;
}

/**
 * Places @p n > 0 bytes of a WRITE so that the last byte becomes visible to other cores after all
 * the others, as a NIC's DMA writes in address order: programs poll the last byte of a WRITE's
 * target to learn that it landed (perftest's ib_write_lat, droce-perf --lat). memcpy moves 2112
 * bytes and more with `rep movsb` here (glibc's x86_rep_movsb_threshold), whose stores may become
 * visible out of order, while the stores after a string operation are not reordered with it (Intel
 * SDM vol. 3A 8.2.2 and 8.2.4.1; AMD APM vol. 1 3.9.1 commits writes in program order). Seen as
 * 1,024 stale bytes of a 4 KiB ping-pong message whose last byte had arrived (perf-memif,
 * 2026-12-06). The release store is a plain byte store on x86 and keeps the order on weaker CPUs.
 */
void place_last_byte_last(std::uint8_t* dst, const std::uint8_t* src, std::uint32_t n) noexcept {
    std::memcpy(dst, src, n - 1);
    std::atomic_ref<std::uint8_t>(dst[n - 1]).store(src[n - 1], std::memory_order_release);
}

RespState on_execute(Rx& rx) noexcept {
    ResponderState& r = rx.qp.resp;
    if (rx.is(OpFlags::send)) {
        const RespError e = place_send(rx);
        if (e != RespError::none) return fail(rx, e);
        r.in_send = !rx.last();
    } else { // RDMA WRITE
        if (rx.first()) {
            const wire::Reth& reth = *rx.pkt.reth;
            r.write_va = reth.va.get();
            r.write_rkey = reth.rkey.get();
            r.write_length = reth.dma_len.get();
            r.write_remaining = r.write_length;
        }
        if (rx.paylen != 0) place_last_byte_last(rx.host, rx.pkt.payload.data(), rx.paylen);
        r.write_va += rx.paylen;
        r.write_remaining -= rx.paylen;
        r.in_write = !rx.last();
    }
    r.last_opcode = rx.op;
    return rx.last() ? RespState::complete : RespState::acknowledge;
}

RespState on_complete(Rx& rx) noexcept {
    Qp& qp = rx.qp;
    ResponderState& r = qp.resp;
    r.msn = next_msn(r.msn);
    if (!rx.is(OpFlags::completes)) {
        ++rx.ctx.silent_writes;        // Device::silent_writes()
        return RespState::acknowledge; // plain WRITE: no receive completion
    }
    Cqe c{};
    c.status = WcStatus::success;
    if (rx.is(OpFlags::send)) {
        c.opcode = WcOpcode::recv;
        c.byte_len = r.recv_offset;
    } else {
        c.opcode = WcOpcode::recv_rdma_with_imm;
        c.byte_len = r.write_length;
    }
    if (rx.pkt.immdt != nullptr) {
        c.imm_data = rx.pkt.immdt->imm.get();
        c.wc_flags |= kWcWithImm;
    }
    if (rx.pkt.ieth != nullptr) {
        // SEND with invalidate (IBTA §9.4.5, §10.6.6): only a type 2 memory window or a
        // fast-register MR may be invalidated by the peer, and droce has neither: every MR comes
        // from ibv_reg_mr. An invalid R_Key in IETH is class J (§9.9.3, as rxe's
        // RESPST_ERR_INVALIDATE_RKEY): the data is placed and the request acknowledged as usual,
        // the receive WQE completes with Remote Invalid Request Error, the QP goes to ERR. (It
        // used to complete with IBV_WC_WITH_INV while the MR stayed valid: the application took
        // a remote access for revoked that was not.)
        count(qp, rx.ctx, Counter::resp_invalidate_errors);
        Cqe e{};
        e.status = WcStatus::rem_inv_req_err;
        e.opcode = WcOpcode::recv;
        (void)complete_recv(qp, e, rx.pkt.bth->se()); // a full CQ is marked overflowed: ERR too
        r.expected_psn += 1;
        // Now, not deferred: the QP is in ERR after this. It covers any ACK still owed.
        r.ack_pending = false;
        if (rx.pkt.bth->ack_req()) send_ack(qp, rx.ctx, rx.psn);
        qp_enter_error(qp, rx.ctx);
        return RespState::done;
    }
    if (!complete_recv(qp, c, rx.pkt.bth->se())) {
        // Accept the packet (the data is placed) but the QP cannot go on: class G.
        r.expected_psn += 1;
        return fail(rx, RespError::cq_overflow);
    }
    return RespState::acknowledge;
}

RespState on_acknowledge(Rx& rx) noexcept {
    rx.qp.resp.expected_psn += 1;
    // ACK coalescing: the requester asks for an ACK on the last packet and every N packets.
    // With TransportCtx::defer_acks, the newest of a burst's ACKs goes out at its end.
    if (rx.pkt.bth->ack_req()) ack_or_defer(rx.qp, rx.ctx, rx.psn);
    return RespState::done;
}

RespState on_read_reply(Rx& rx) noexcept {
    Qp& qp = rx.qp;
    ResponderState& r = qp.resp;
    const wire::Reth& reth = *rx.pkt.reth;
    ResponderResource res;
    res.valid = true;
    res.is_atomic = false;
    res.va = reth.va.get();
    res.rkey = reth.rkey.get();
    res.length = reth.dma_len.get();
    res.first_psn = rx.psn;
    res.last_psn = rx.psn + (read_packets(res.length, qp.mtu) - 1);
    r.msn = next_msn(r.msn);
    res.msn = r.msn;
    record_resource(qp, res);
    r.last_opcode = rx.op;
    // The READ takes one PSN per response packet.
    r.expected_psn = res.last_psn + 1;
    if (r.read_active) {
        if (r.reads_queued == 0) r.queue_after = rx.psn - 1;
        ++r.reads_queued; // answered once the responses ahead of it are out (send_responses)
        return RespState::done;
    }
    start_response(qp, rx.ctx, res);
    return RespState::done;
}

RespState on_atomic_reply(Rx& rx) noexcept {
    Qp& qp = rx.qp;
    ResponderState& r = qp.resp;
    const wire::AtomicEth& a = *rx.pkt.atomic_eth;
    const std::uint64_t orig = execute_atomic(rx.host, rx.op == Opcode::RC_COMPARE_SWAP,
                                              a.swap_add.get(), a.compare.get());
    ResponderResource res;
    res.valid = true;
    res.is_atomic = true;
    res.first_psn = rx.psn;
    res.last_psn = rx.psn;
    res.va = a.va.get();
    res.rkey = a.rkey.get();
    res.length = sizeof(std::uint64_t);
    res.atomic_orig = orig;
    r.msn = next_msn(r.msn);
    res.msn = r.msn;
    record_resource(qp, res);
    r.last_opcode = rx.op;
    r.expected_psn += 1;
    if (r.read_active) {
        if (r.reads_queued == 0) r.queue_after = rx.psn - 1;
        ++r.reads_queued; // answered once the responses ahead of it are out (send_responses)
        return RespState::done;
    }
    // Answered now, or kept until the tx path has room: lost, it cost the requester its ACK
    // timeout (the duplicate then replays the saved result).
    start_response(qp, rx.ctx, res);
    return RespState::done;
}

RespState on_duplicate(Rx& rx) noexcept {
    Qp& qp = rx.qp;
    if (rx.is(OpFlags::send) || rx.is(OpFlags::write)) {
        // C9-105: a duplicate SEND/WRITE is not executed again; ACK the last PSN received in order
        // (rxe does so whether or not AckReq is set, so does droce).
        send_ack(qp, rx.ctx, qp.resp.expected_psn - 1);
        return RespState::done;
    }
    if (rx.is(OpFlags::atomic)) {
        // A duplicate atomic is answered from the saved result, never executed again.
        const ResponderResource* res = find_resource(qp, rx.psn, true);
        if (res == nullptr || res->first_psn != rx.psn)
            return RespState::done; // class D: silent drop
        // Lost, the requester times out and sends the duplicate again.
        (void)send_atomic_ack(qp, rx.ctx, rx.psn, res->msn, res->atomic_orig);
        return RespState::done;
    }
    if (rx.is(OpFlags::read)) {
        // Replay from the resource whose PSN range holds this PSN; the request
        // must name a subrange of the original (same rkey). Anything else is dropped (class D).
        const ResponderResource* res = find_resource(qp, rx.psn, false);
        if (res == nullptr) return RespState::done;
        if (qp.resp.read_active) {
            // Behind READs still being answered (queued ones passed on_check_qp_state): the
            // replay waits for the requester's next try rather than cut them short.
            qp.counters.inc(Counter::tx_no_buffer);
            return RespState::done;
        }
        const wire::Reth& reth = *rx.pkt.reth;
        const std::uint64_t va = reth.va.get();
        const std::uint64_t len = reth.dma_len.get();
        if (reth.rkey.get() != res->rkey || va < res->va || len > res->length ||
            va - res->va > res->length - len)
            return RespState::done;
        ResponderResource replay = *res;
        replay.va = va;
        replay.length = static_cast<std::uint32_t>(len);
        replay.first_psn = rx.psn;
        replay.last_psn = rx.psn + (read_packets(replay.length, qp.mtu) - 1);
        start_response(qp, rx.ctx, replay);
        return RespState::done;
    }
    return RespState::done;
}

RespState on_error(Rx& rx) noexcept {
    handle_error(rx.qp, rx.ctx, rx.err, rx.psn);
    return RespState::done;
}

/** The last state: nothing left to do (so that every state of the list has a step). */
RespState on_done(Rx&) noexcept {
    return RespState::done;
}

} // namespace

void responder_receive(Qp& qp, const wire::ParsedFrame& pkt, TransportCtx& ctx) noexcept {
    if (pkt.bth == nullptr || pkt.info == nullptr) return;
    Rx rx{qp,
          ctx,
          pkt,
          *pkt.info,
          pkt.bth->opcode(),
          pkt.bth->psn(),
          static_cast<std::uint32_t>(pkt.payload.size()),
          nullptr,
          RespError::none};
    // Every step names a later state than its own (DROCE_RESP_STATES lists them in the order a
    // request can take them: the checks, then placement, completion and the ACK, then the replies,
    // duplicates and errors), so one pass down that list, each state a compare the branch
    // predictor learns, runs the whole machine; a switch in a loop paid an indirect jump per step,
    // about 39 instructions a packet (bench/engine/instr). The assert at the end holds that order.
    RespState s = RespState::check_qp_state;
#define DROCE_RESP_STATE_STEP(name, text)                                                          \
    if (s == RespState::name) s = on_##name(rx);
    DROCE_RESP_STATES(DROCE_RESP_STATE_STEP)
#undef DROCE_RESP_STATE_STEP
    assert(s == RespState::done);
}

void responder_flush_ack(Qp& qp, TransportCtx& ctx) noexcept {
    flush_owed_ack(qp, ctx);
}

void responder_run(Qp& qp, TransportCtx& ctx, std::uint32_t budget) noexcept {
    flush_owed_ack(qp, ctx);
    if (!qp.resp.read_active) return;
    if (!accepts_requests(qp.state)) {
        qp.resp.read_active = false;
        return;
    }
    (void)send_responses(qp, ctx, budget);
}

} // namespace droce::rc
