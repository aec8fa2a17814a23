/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * The RC queue pair and completion queue as the engine holds them, and the transport's entry
 * points.
 *
 * Roles follow Linux rxe: requester.cc turns send WQEs into request
 * packets; completer.cc turns ACKs, NAKs and responses into completions and drives retransmission
 * and the ACK/RNR timers; responder.cc checks and executes incoming requests and answers them.
 *
 * Thread rules: every function here runs on the engine thread (or on the application thread in
 * inline-progress mode, never both at once). None allocates, locks or throws.
 */
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "cc/dcqcn.h"
#include "common/clock.h"
#include "common/counters.h"
#include "common/spsc_ring.h"
#include "mem/mr.h"
#include "port/port.h"
#include "port/tx_stage.h"
#include "rc/types.h"
#include "wire/packet.h"

namespace droce::rc {

struct Qp;

/** A completion queue: an SPSC ring from the engine (producer) to the application (consumer). */
struct Cq {
    SpscRing<Cqe> ring;
    std::uint32_t cqn = 0;
    bool overflowed = false; ///< a CQE was lost because the ring was full (IBV_EVENT_CQ_ERR)

    /** What ibv_req_notify_cq armed: a completion event for the next CQE, or only for the next
     *  solicited or error CQE (IBTA Vol 1 §11.4.2.2 Request Completion Notification). One shot: the
     *  engine disarms the CQ when it raises the event. */
    enum Arm : std::uint8_t { kDisarmed = 0, kArmNext = 1, kArmSolicited = 2 };
    /** Written by the application thread (ibv_req_notify_cq), exchanged to kDisarmed by the engine.
     */
    std::atomic<std::uint8_t> armed{kDisarmed};
    /** Called on the engine thread when an armed CQ gets a CQE that matches the arming; it must not
     *  block, allocate or throw (the verbs layer writes one event into the completion channel's
     *  pipe). Set on the control path; null = no completion events. */
    void (*notify)(void* notify_ctx, Cq& cq) noexcept = nullptr;
    void* notify_ctx = nullptr;
};

/** Completion opcode of a send WQE of opcode @p op (ibv_wc_opcode for ibv_wr_opcode). */
[[nodiscard]] WcOpcode wc_opcode_of(WrOpcode op) noexcept;

/**
 * Completes the WQE at the SQ's consumer index: marks it completed, releases its slot to the
 * application, then (when @p cqe) pushes its completion (wr_id, opcode from wc_opcode_of,
 * @p status, @p byte_len, QPN) on the QP's send CQ. In that order, so that an application which
 * posts as soon as it sees the completion finds the slot free. Whether to complete with a CQE
 * (signaled, error) is the caller's decision. Engine thread.
 */
void complete_send_wqe(Qp& qp, bool cqe, WcStatus status, std::uint32_t byte_len) noexcept;

/**
 * Pushes @p cqe on @p cq. Returns false (and marks the CQ overflowed) when the ring is full.
 * If the CQ is armed (Cq::armed) and the CQE matches (any CQE for kArmNext; an error CQE or
 * @p solicited for kArmSolicited), disarms it and calls Cq::notify after the CQE is published.
 * @param solicited the completed receive was a SEND with the Solicited Event bit (BTH.SE)
 * Engine thread only.
 */
bool cq_push(Cq& cq, const Cqe& cqe, bool solicited = false) noexcept;

/**
 * What the transport needs from its device. Set up once per device; passed by reference to every
 * transport call.
 */
struct TransportCtx {
    Clock* clock = nullptr;
    mem::MrTable* mrs = nullptr;
    /** Device counters, for events that belong to no QP. Per-QP events go to Qp::counters only, so
     *  Device::total_counters() (device + every QP) counts each event once. */
    Counters* dev_counters = nullptr;
    /**
     * Where the transport leaves the packets it sends this pass (port/tx_stage.h). The transport
     * stages each packet on the path it chose (Qp::paths[i]: headers and port); a refused append
     * means no room this pass: the transport keeps its state, counts tx_no_buffer on the QP and
     * sends the same packet later. The engine counts sent_pkts when it builds the frame.
     */
    TxStage* tx = nullptr;
    /**
     * false: the responder sends each ACK as the request that asks for it is processed (what the
     * protocol tests assert on). true (the Device): ACKs are owed (ResponderState::ack_pending)
     * and the newest goes out at responder_flush_ack() / responder_run() or before the QP's next
     * response packet — one ACK per QP per received burst instead of one per request packet.
     */
    bool defer_acks = false;
    /**
     * With defer_acks: an owed ACK on a QP that answers what it receives may be held for the QP's
     * next request (ResponderState::ack_hold_until_ns), which needs something to run the engine
     * when the hold ends. false (Device::set_ack_hold: a device that only verb calls drive) sends
     * it at the end of the burst: a program blocked elsewhere (a TCP exchange at the end of a
     * perftest run) would otherwise leave its peer's last request unacknowledged until it
     * retried out.
     */
    bool hold_acks = true;
    /** Clock ns at the start of the engine's previous pass (0: first pass, or not driven by a
     *  Device). A held packet's lateness up to now minus this is the engine's, which the pacer
     *  forgives (rc/pacer.h, kPacerBurstBytes). */
    std::uint64_t prev_pass_start_ns = 0;
    /** Clock ns at the start of the engine's current pass (0: not driven by a Device). The time
     *  the responder's ACK hold (ResponderState::ack_hold_until_ns) is reckoned in. */
    std::uint64_t pass_start_ns = 0;
    /** The device has kPrefetchMinQps live QPs or more, more than stay in the caches between
     *  visits: the transport prefetches a QP's state ahead of its stores, which with a few QPs
     *  would only cost instructions. Written by the Device's control path (create_qp,
     *  destroy_qp, in a control section), read by the engine. */
    bool prefetch_qp_state = false;
    /** RDMA WRITEs placed with no completion (RC: messages; MRC: packets without immediate data),
     *  counted by the responders: a program learns of them only from memory, so it may wait for
     *  them without calling a verb (Device::silent_writes()). The pass owner's only. */
    std::uint64_t silent_writes = 0;
    // ---- set by the engine for each received packet, before receive_request/receive_response
    std::uint8_t rx_port = 0; ///< 0-based device port (plane) the packet arrived on
    bool rx_ecn_ce = false;   ///< the packet's IP ECN field is CE (congestion experienced)
    // ---- the device's ports, for a multiplane transport
    std::uint8_t num_ports = 1;
    /** Bit p: port p's link is up and administratively up (Device::set_port_admin). */
    std::uint8_t port_up_mask = 1;
};

/**
 * What the requester sent at one PSN, kept so a retransmission (go-back-N today, selective repeat
 * for MRC later) can find the WQE and byte offset of any unacknowledged PSN without a scan.
 * Indexed by psn & (kPsnWindow - 1); @ref psn tells a live entry from a stale one. A READ request
 * records only its request PSN (its response PSNs are derived from the WQE).
 */
struct PsnSendState {
    Psn psn;                     ///< PSN this entry describes
    std::uint32_t wqe_index = 0; ///< free-running SQ index of the WQE
    std::uint32_t offset = 0;    ///< byte offset of the packet in its message
    std::uint8_t path = 0;       ///< path the packet left on (RC: always 0)
    bool valid = false;
};

/** Requester-side state (rxe: qp->req). */
struct RequesterState {
    std::uint32_t next_wqe = 0;   ///< free-running SQ index of the WQE being (or next to be) sent
    Psn next_psn;                 ///< PSN of the next packet to send
    std::uint32_t noack_pkts = 0; ///< packets since the last AckReq
    std::uint32_t rd_atomic_inflight =
        0; ///< READ/atomic requests awaiting a response (≤ max_rd_atomic)
    std::uint64_t ack_deadline_ns = 0; ///< local ACK timer deadline; 0 = not armed
    std::uint64_t rnr_deadline_ns = 0; ///< RNR wait deadline; 0 = not waiting
    std::uint8_t retry_left = 7;       ///< retry_cnt budget left for the current PSN
    std::uint8_t rnr_retry_left = 7;   ///< rnr_retry budget left (7 = infinite)
    bool retransmitting =
        false; ///< go-back-N in progress: PSNs below resend_until were sent before
    /** The ACK timer was armed while nothing could leave for want of the peer's MAC (ARP / ND):
     *  its expiries count as retries (a peer nobody answers for fails the QP, RETRY_EXC_ERR), and
     *  the first packet sent restarts it. In the line's padding byte. */
    bool timer_for_neigh = false;
    Psn resend_until; ///< one past the highest PSN ever sent, while retransmitting
    /** TransportCtx::pass_start_ns of the last pass that sent a request packet (0: none). When it
     *  moved since the responder last owed an ACK, the QP answered the peer's last request, so
     *  the responder may hold the next ACK for its next request (ack_or_defer). */
    std::uint64_t last_request_pass_ns = 0;
    PsnSendState psn_ring[kPsnWindow]; ///< per-PSN send state of the in-flight window
};

/** Completer-side state (rxe: qp->comp). */
struct CompleterState {
    Psn oldest_unacked; ///< first PSN not yet acknowledged
    /** Free-running SQ index of the oldest WQE not yet acknowledged. WQEs in [consumer,
     * first_unacked_wqe) are acknowledged (WqeState::acked) and wait for their payload's release
     * before they complete, in order. Without transmit by reference the range is empty between
     * calls. */
    std::uint32_t first_unacked_wqe = 0;
    std::uint32_t last_msn = 0;
    bool retry_started = false; ///< a NAK/implied NAK already caused go-back-N; until progress,
                                ///< later ones are ignored
};

/** Longest an owed ACK waits for the QP's next request packet (ResponderState::ack_hold_until_ns):
 *  a peer application answers a ping in about a microsecond; a late one costs its requester this
 *  much on one completion. */
inline constexpr std::uint64_t kAckHoldNs = 20'000;

/** One responder resource: a READ or atomic kept for replay of a duplicate (rxe: resp_res). */
struct ResponderResource {
    bool valid = false;
    bool is_atomic = false;
    Psn first_psn;
    Psn last_psn;
    std::uint64_t va = 0;
    std::uint32_t rkey = 0;
    std::uint32_t length = 0;
    std::uint64_t atomic_orig = 0; ///< value returned by the atomic, replayed on a duplicate
    std::uint32_t msn = 0;
};

/**
 * Responder-side state (rxe: qp->resp). What every request packet reads or writes comes first and
 * fills one cache line (the Qp aligns it); the resource rings after it are read only for READs,
 * atomics and duplicates. With thousands of busy QPs each request finds its QP out of the caches.
 */
struct ResponderState {
    // Ordered to fill the first line exactly (words, then bytes, then the ACK's 8-byte times; a
    // static_assert below the struct checks it): a WRITE stream's request and the ACK it owes
    // read nothing beyond it.
    Psn expected_psn;
    std::uint32_t msn = 0; ///< messages completed (24 bits on the wire)
    // current message
    std::uint32_t recv_offset = 0; ///< bytes placed into the current receive WQE
    std::uint32_t write_rkey = 0;
    std::uint64_t write_va = 0;        ///< next VA of the current RDMA WRITE
    std::uint32_t write_remaining = 0; ///< bytes of the RETH DMA length not yet received
    std::uint32_t write_length =
        0; ///< RETH DMA length of the current RDMA WRITE (byte_len of WRITE with immediate)
    bool sent_psn_nak = false; ///< a PSN-sequence NAK went out; stay silent until in order
    wire::Opcode last_opcode = wire::Opcode::RC_SEND_ONLY; ///< for the opcode sequence check
    bool in_send = false;                                  ///< between SEND FIRST and LAST
    bool in_write = false;                                 ///< between RDMA WRITE FIRST and LAST
    bool have_recv_wqe = false; ///< a receive WQE is taken for the current SEND
    // READ responses in progress (a long READ is sent in pieces as the tx path allows), or an
    // atomic's ATOMIC ACKNOWLEDGE the tx path refused: `read` is being answered
    bool read_active = false;
    // Deferred ACK (TransportCtx::defer_acks): the newest ACK owed, sent by responder_flush_ack()
    // at the end of the engine's rx phase or before any other response of this QP, so one ACK
    // covers a whole received burst (ACKs are cumulative, IBTA 9.7.5.1.2). Owed while a READ
    // response is going out (for WRITEs and SENDs accepted behind it, whatever defer_acks says),
    // it leaves after that response's last packet instead. A refused one stays owed.
    bool ack_pending = false;
    /**
     * An RNR NAK (IBTA 9.7.5.2.8, for rnr_nak_psn) is owed: a SEND (or WRITE with immediate) in
     * sequence found no receive WQE behind a READ response still going out, and its NAK leaves
     * after the response's last packet and the owed ACK, not ahead of them, as rxe and a ConnectX
     * send it; or the tx path refused it (a READ response had just filled the stage). Dropped
     * instead, it cost the requester an ACK timeout and a retry_cnt (and with timeout 0 the QP
     * waited for ever). (In the byte the ACK fields left free.)
     */
    bool rnr_nak_owed = false;
    Psn ack_psn;               ///< PSN the pending ACK acknowledges
    std::uint32_t ack_msn = 0; ///< MSN at the time it was owed
    /**
     * Nonzero: the pending ACK waits for this QP's next request packet and goes out right behind
     * it, or at this time (clock ns) at the latest (kAckHoldNs). Set when the ACK becomes owed on a
     * QP whose requester sent since the previous ACK was owed (talked_at_last_owed_ns): the QP
     * answers what it receives, as in a ping-pong (ib_write_lat, an RPC) whose
     * application waits in ibv_poll_cq for its WRITE's completion then takes the peer's next
     * WRITE off the port in the same call, because that WRITE arrives before the ACK that completes
     * it; without the hold the ACK came first, the application went to spin on memory, and only
     * an engine thread could place the WRITE. ACKs are cumulative and may be coalesced (IBTA
     * 9.7.5.1.2); the requester's ACK timer is milliseconds.
     */
    std::uint64_t ack_hold_until_ns = 0;
    /** An ACK is owed and held for the QP's next request (ack_hold_until_ns). */
    [[nodiscard]] bool ack_held() const noexcept { return ack_pending && ack_hold_until_ns != 0; }
    /**
     * RequesterState::last_request_pass_ns when the last ACK became owed. Not a time window: on
     * a host with fewer cores than busy threads a round of a ping-pong that fell back to an
     * engine thread takes 0.1 - 4 ms, and with a window of 100 us (until 2026-12-04) the next
     * round did not hold either (513 of ib_write_lat's 1,000 ACKs in one run). A QP that
     * receives a stream and sends now and then holds at most one ACK per request it sends.
     */
    std::uint64_t talked_at_last_owed_ns = 0;
    // ---- READs, atomics and duplicates only
    Psn read_next_psn; ///< of the READ being answered
    std::uint32_t read_offset = 0;
    std::uint32_t next_resource = 0; ///< ring index of the next resource to overwrite
    /**
     * READ and atomic requests accepted while a READ response was still going out, answered after
     * it in PSN order (each one's resource is the first resource after the previous one's last PSN:
     * WRITEs and SENDs accepted behind the response may lie between them). rxe's requests wait in
     * its packet queue meanwhile; here they were dropped, and the requester got them back only by a
     * sequence NAK or its ACK timer: ib_read_bw ran at a tenth of ib_write_bw. At most
     * resource_capacity() - 1 (the ring must still hold each). Duplicates and requests out of
     * sequence behind a READ response are still dropped.
     */
    std::uint8_t reads_queued = 0;
    /** Queued READs and atomics begin after this PSN (the one before the first queued): the
     * response being answered may be a duplicate's replay, whose last PSN lies before it. */
    Psn queue_after;
    Psn rnr_nak_psn;        ///< of the request whose RNR NAK is owed (rnr_nak_owed)
    ResponderResource read; ///< the READ (or atomic) being answered
    ResponderResource resources[kMaxRdAtomic];
};
static_assert(offsetof(ResponderState, read_next_psn) == kCacheLine,
              "what every request and its ACK read is the responder's first line");

/** One path of a QP: the headers below its BTH and the 0-based device port it leaves by. */
struct Path {
    wire::PathHeaders hdr;
    std::uint8_t port = 0;
};

/**
 * State a transport keeps beside the Qp (the multipath transport's path set and trackers): made by
 * TransportOps::create on the control path, owned by the Qp, freed with it.
 */
struct TransportState {
    virtual ~TransportState() = default;
};

/** The peer's address on one plane (Device::set_remote_planes). */
struct RemotePlane {
    wire::Ipv6Addr gid{};
    wire::MacAddr mac{}; ///< zero: resolved by ARP / ND
};

/**
 * The per-QP pacer and DCQCN state (rc/pacer.h has the functions). A QP sends unpaced unless it has
 * a rate limit (IBV_QP_RATE_LIMIT) or DCQCN has brought its rate below the port's line rate; then
 * packets are spaced by their wire length at that rate, with some credit (rc/pacer.h,
 * kPacerBurstBytes).
 */
struct Pacer {
    std::uint64_t next_send_ns = 0; ///< earliest time the next packet may leave; 0 = no pacing
    /** The gap before next_send_ns: it started at gap_from_ns and is gap_bytes wire bytes long at
     *  the rate in force. A rate change re-times the gap at the new rate at once, as a NIC's rate
     *  limiter does: a QP cut to rpg_min_rate (1 Mb/s: 33 ms for a 4 KB packet) would otherwise
     *  sit out that gap after DCQCN had long raised its rate again. */
    std::uint64_t gap_from_ns = 0;
    std::uint64_t gap_bytes = 0;
    /** The pacer held a ready packet back (pacer_blocked): a delay past next_send_ns is then the
     *  engine's or the port's, not the QP's idleness (pacer.h, kPacerBurstBytes). */
    bool held = false;
    double rate_mbps = 0;       ///< the rate in force (0 = unpaced)
    double rate_limit_mbps = 0; ///< IBV_QP_RATE_LIMIT (0 = none)
    double line_rate_mbps = 0;  ///< the QP's port (0 = unknown: DCQCN starts at 100 Gb/s)
    /** DCQCN profile of this QP (reaction and notification point), or null: DCQCN off. Points at a
     *  profile that outlives the QP (cc::profile_by_name, or the device's). */
    const cc::DcqcnProfile* dcqcn = nullptr;
    cc::DcqcnRp rp;
    cc::DcqcnNp np;
    /** Headers of the CNPs this QP sends: its path's with DSCP cnp_dscp (built when one is sent).
     */
    wire::PathHeaders cnp_path;
};

/**
 * A QP's transport: what the engine calls for it, chosen once when the QP is created (one indirect
 * call per QP and event, never a branch on the QP type per packet). RC is
 * kRcTransport; the multipath transport brings its own table and leaves RC's requester, responder
 * and completer untouched. Every function runs on the engine thread (modify on the control path
 * inside the device's ControlSection) and none allocates, locks or throws.
 */
struct TransportOps {
    std::string_view name; ///< "rc", ...
    /**
     * One engine pass for an active QP: flush of an errored QP, completion of released WQEs,
     * responder output (deferred ACK, READ responses), requester packets (at most @p budget).
     * Sets *@p wait_release when an acknowledged WQE waits for a driver to release its payload.
     * @return units of work done (0 = nothing moved)
     */
    std::uint32_t (*run)(Qp& qp, TransportCtx& ctx, std::uint32_t budget,
                         bool* wait_release) noexcept;
    /** True while the QP has work for the next pass without a new event (frame, doorbell, timer).
     */
    bool (*has_work)(const Qp& qp) noexcept;
    /** A request packet for the QP (the responder's). */
    void (*receive_request)(Qp& qp, const wire::ParsedFrame& pkt, TransportCtx& ctx) noexcept;
    /** A response packet (ACK, NAK, READ or atomic response) for the QP (the completer's). */
    void (*receive_response)(Qp& qp, const wire::ParsedFrame& pkt, TransportCtx& ctx) noexcept;
    /** The QP's deadline (next_deadline) has passed. */
    void (*timer)(Qp& qp, TransportCtx& ctx) noexcept;
    /** The QP's next deadline in ns (clock of TransportCtx), or 0 for none. */
    std::uint64_t (*next_deadline)(const Qp& qp) noexcept;
    /** ibv_modify_qp rules of this transport (see qp_modify). @return 0 or EINVAL. */
    int (*modify)(Qp* qp, const QpAttr& attr, std::uint32_t mask,
                  std::span<const std::uint32_t> port_mtu, TransportCtx& ctx) noexcept;
    /** Bit (1 << WrOpcode) for each send operation the transport carries; post_send refuses the
     *  others with EOPNOTSUPP. */
    std::uint32_t send_opcodes = ~0u;
    /** BTH opcodes this transport takes (wire::transport_of); others are dropped before it. */
    wire::Transport family = wire::Transport::rc;
    /** True: the QP has one path per device port (Qp::paths[p] leaves by port p, num_paths =
     *  ports), and the transport spreads packets over them; false: one path, on the AV's port. */
    bool multiplane = false;
    /** Optional. Makes the transport's state (Qp::transport_state) when the QP is created, before
     *  any other call. Control path; may allocate. @return 0 or ENOMEM. */
    int (*create)(Qp& qp) = nullptr;
    /** Optional. Qp::paths were rebuilt (modify_qp with an AV, Device::set_remote_planes). Control
     *  path. */
    void (*paths_changed)(Qp& qp, TransportCtx& ctx) noexcept = nullptr;
    /** Optional. Port @p port (0-based) went down or came back (TransportCtx::port_up_mask is
     *  already updated). Engine thread. */
    void (*link_change)(Qp& qp, TransportCtx& ctx, unsigned port, bool up) noexcept = nullptr;
    /** Optional: the transport's own per-QP counters, listed by the device as "qp/<QPN>/<name>"
     *  beside the QP's Counters. counter_cells must return counter_names.size() cells that live as
     *  long as the QP. */
    std::span<const std::string_view> counter_names{};
    std::span<const std::atomic<std::uint64_t>> (*counter_cells)(const Qp& qp) noexcept = nullptr;
};

/** The RC transport (IBTA Vol 1 ch. 9): requester.cc, responder.cc, completer.cc, modify.cc. */
extern const TransportOps kRcTransport;

/** An RC queue pair. Created and modified by the control path; run by the engine. */
struct Qp {
    // The members are ordered by use, not by topic: with thousands of busy QPs every engine visit
    // finds the QP out of the caches, so what each packet reads sits in as few cache lines as
    // possible (the first line; the responder's, requester's, path's, pacer's and counters' first
    // lines), near each other. The first line is read-mostly: posters on other cores read it.
    /** The transport that runs this QP, fixed at creation (Device::create_qp). */
    const TransportOps* transport = &kRcTransport;
    std::uint32_t qpn = 0;
    QpState state = QpState::reset;
    std::uint8_t num_paths = 1; ///< paths in use (below)
    /** The peer's GID is one of this device's own ports: frames go through the device's loopback
     *  queue, never to a port (a NIC's internal loopback; pyverbs tests connect QPs this way). */
    bool loopback_peer = false;
    /** False while the peer's MAC is being resolved (ARP / ND); nothing is transmitted until then.
     */
    bool path_resolved = true;
    std::uint32_t mtu = 1024; ///< path MTU in bytes (from attr.path_mtu)
    bool sq_sig_all = false;
    const mem::Pd* pd = nullptr;
    /**
     * Release tracking of payload sent by reference: one TxRef per SQ slot (slot index & mask),
     * allocated with the QP by the control path (Device::create_qp), kept across resets (a count
     * belongs to the memory, not to a WQE), handed to the device when the QP is destroyed with
     * segments still out. Null (protocol tests): every packet is copied.
     */
    std::unique_ptr<TxRef[]> tx_refs;
    Cq* send_cq = nullptr;
    Cq* recv_cq = nullptr;
    /** One per SQ slot, at the slot's index: what a slot does not hold (SqWqeExt); made with the
     *  SQ by make_sq() (control path). In the first line, which a poster has asked for anyway:
     *  SqWqe::fill() is given the slot's SqWqeExt even when it writes nothing there. */
    std::unique_ptr<SqWqeExt[]> sq_ext;
    QpAttr attr;
    QpCap cap;
    SpscRing<SqWqe> sq; ///< app → engine; consumer index = oldest WQE not yet completed
    alignas(64) ResponderState resp;
    /** The paths the QP's packets may take: headers and the port each leaves by. RC has one
     *  (paths[0], num_paths 1); the multipath transport holds one per entropy value. Written by the
     *  control path (Device::set_path), read by the transport. */
    alignas(64) std::array<Path, kMaxPaths> paths{};
    alignas(64) Pacer pacer;
    alignas(64) Counters counters;
    SpscRing<RecvWqe> rq; ///< app → engine
    /** Multiplane QPs: the peer's address per plane (Device::set_remote_planes); control path. */
    std::array<RemotePlane, TxStage::kMaxPorts> remote_planes{};
    std::uint8_t num_remote_planes = 0;
    /** The transport's own state (TransportOps::create), or null. */
    std::unique_ptr<TransportState> transport_state;
    /** In one line with the requester's head, which an ACK updates with it; not in the first
     *  line, which posters on other cores read (it would bounce between the cores at each post). */
    alignas(64) CompleterState comp;
    /** Last: its PSN ring is 16 KiB, of which a visit reads a line or two; before it, everything a
     *  packet reads fits in about 3.6 KiB (one or two pages: TLB misses count too). */
    RequesterState req;

    /** The SqWqeExt of SQ slot @p w, which must be a slot of this QP's sq (not a copy): the
     *  slot's index in the ring is its index in sq_ext. */
    [[nodiscard]] SqWqeExt& sq_ext_of(const SqWqe& w) noexcept {
        return sq_ext[static_cast<std::size_t>(&w - &sq.slot(0))];
    }
    [[nodiscard]] const SqWqeExt& sq_ext_of(const SqWqe& w) const noexcept {
        return sq_ext[static_cast<std::size_t>(&w - &sq.slot(0))];
    }
    /** Marks SQ slot @p w failed: @p failed_state (WqeState::local_error or error_due) with @p
     * status in its SqWqeExt, the only place a failure's status is kept, set whenever those states
     * are entered (and read only in them). Engine thread. */
    void fail_wqe(SqWqe& w, WqeState failed_state, WcStatus status) noexcept {
        sq_ext_of(w).status = status;
        w.state = failed_state;
    }
    /** The SGE list of SQ slot @p w (SqWqe::sg_list). */
    [[nodiscard]] const Sge* sq_sg_list(const SqWqe& w) const noexcept {
        return w.sg_list(sq_ext_of(w));
    }
    /** The TxRef of the WQE at free-running SQ index @p wqe_index, or nullptr. */
    [[nodiscard]] TxRef* tx_ref(std::uint32_t wqe_index) noexcept {
        return tx_refs ? &tx_refs[wqe_index & (sq.capacity() - 1)] : nullptr;
    }
    /** True when no driver holds payload of the WQE at @p wqe_index any more. */
    [[nodiscard]] bool tx_released(std::uint32_t wqe_index) noexcept {
        const TxRef* r = tx_ref(wqe_index);
        return r == nullptr || r->released();
    }
};

static_assert(sizeof(Path) <= kCacheLine, "qp_prefetch asks for one line of the first path");
static_assert(sizeof(CompleterState) + offsetof(RequesterState, psn_ring) <= kCacheLine,
              "the completer and the requester's head share one line (Qp::comp is aligned)");
static_assert((static_cast<std::size_t>(Counter::acks_rcvd) + 1) * sizeof(std::uint64_t) <=
                  kCacheLine,
              "the counters a busy QP counts are in its counter block's first line");
/**
 * Prefetches the lines of @p qp that an engine visit reads (its first line and its attributes',
 * the send queue's indices, the responder's first line, the first path, the pacer's and the
 * counters' first lines, and the line of the completer and the requester's head: 10 lines),
 * without reading any of them. With thousands of busy QPs each of those lines
 * is a miss to the last-level cache, and a visit that meets them one load at a time waits for a
 * dozen misses in turn; asked for together, ahead of the visit, they arrive in parallel. The
 * engine calls it for the next QP of its active list and for each QP of a received burst. Any
 * thread; never faults (a prefetch touches no memory), so @p qp may be stale.
 */
inline void qp_prefetch(const Qp& qp) noexcept {
    // Only lines a visit reads: each prefetch holds a miss buffer, and with them all taken the
    // next one waits. Not the caps (only posters read them, and prefetch them), a second path
    // (multipath QPs only; which one a packet takes is not known here), the responder's READ
    // state or the PSN ring (the requester asks for the entries it writes).
    const auto* base = reinterpret_cast<const char*>(&qp);
    prefetch_for_read(base);
    prefetch_for_read(base + kCacheLine); // attr: the peer's QPN, access flags, max_rd_atomic
    qp.sq.prefetch_consumer_lines();
    prefetch_for_write(&qp.resp);
    prefetch_for_read(&qp.paths[0]);
    prefetch_for_read(&qp.pacer);
    prefetch_for_write(&qp.counters); // sent_pkts, rcvd_pkts, acks_sent, acks_rcvd: one line
    prefetch_for_write(&qp.comp);     // the completer and the requester's head: one line
}

// ---- requester.cc ----
/**
 * Local checks of a send WQE before its first packet (opcode, inline and message lengths, every
 * SGE's lkey, PD, bounds and access): the one place that decides a requester-side completion
 * error. @p w is a slot of @p qp's send queue (its SqWqeExt is found by its place).
 * @return success, loc_len_err, loc_qp_op_err or loc_prot_err (IBTA ch. 10, as rxe).
 * @param hosts when not null and the result is success: the host address of each SGE of non-zero
 * length (the whole SGE passed its check), for gather_payload() in the same engine pass.
 */
[[nodiscard]] WcStatus check_send_wqe(Qp& qp, TransportCtx& ctx, const SqWqe& w,
                                      std::array<std::uint8_t*, kMaxSge>* hosts = nullptr) noexcept;
/**
 * Gathers @p len bytes at message offset @p off of @p w (a slot of @p qp's send queue) into @p out
 * as spans of registered memory (or of the WQE's inline data). @return spans used, or -1 when an
 * SGE no longer passes its lkey check (the MR went away).
 * @param hosts null, or what check_send_wqe() found for @p w in this same engine pass (MRs change
 * only between passes, so they still hold): the MR lookup is then not repeated per packet.
 */
int gather_payload(Qp& qp, TransportCtx& ctx, const SqWqe& w, std::uint32_t off, std::uint32_t len,
                   std::array<std::span<const std::uint8_t>, kMaxSge>& out,
                   const std::array<std::uint8_t*, kMaxSge>* hosts = nullptr) noexcept;
/**
 * Sends packets of posted WQEs while the PSN window (kPsnWindow), max_rd_atomic, fences, the pacer
 * and the tx path allow, at most @p budget packets. Arms the local ACK timer when it sends a packet
 * that needs an acknowledgement. Only in RTS (and SQD until the current message ends).
 * @return packets sent.
 */
std::uint32_t requester_run(Qp& qp, TransportCtx& ctx, std::uint32_t budget) noexcept;

// ---- completer.cc ----
/** Handles an ACKNOWLEDGE, ATOMIC ACKNOWLEDGE or READ RESPONSE for @p qp (IBTA §9.7.5.1,
 * rxe_comp.c). */
void completer_receive(Qp& qp, const wire::ParsedFrame& pkt, TransportCtx& ctx) noexcept;
/** Fires the local ACK timer and the RNR timer of @p qp when their deadlines have passed. */
void completer_timers(Qp& qp, TransportCtx& ctx) noexcept;
/** Earliest pending deadline of @p qp in ns, or 0 if none (the engine sleeps until then): the ACK,
 *  RNR and pacer timers, and a held ACK's (ResponderState::ack_hold_until_ns). */
[[nodiscard]] std::uint64_t completer_next_deadline(const Qp& qp) noexcept;
/**
 * SQ index of the oldest WQE not yet acknowledged: CompleterState::first_unacked_wqe, first brought
 * back into [consumer, producer] (a flush or a local failure may release slots past it) and stored.
 */
[[nodiscard]] std::uint32_t clamp_first_unacked_wqe(Qp& qp) noexcept;
/**
 * Completes, in SQ order, acknowledged WQEs whose payload is released (CQE if signaled, slot back
 * to the application). The engine calls it every pass; the completer after each acknowledgement.
 * @return true when an acknowledged WQE still waits for a release (the caller may ask the ports to
 *         reclaim transmitted buffers, PortDriver::tx_reclaim()).
 */
bool completer_reap(Qp& qp) noexcept;

// ---- responder.cc ----
/** Handles a request packet for @p qp (IBTA §9.7.5.2, rxe_resp.c). */
void responder_receive(Qp& qp, const wire::ParsedFrame& pkt, TransportCtx& ctx) noexcept;
/** Continues a long READ response that the tx path could not take at once. */
void responder_run(Qp& qp, TransportCtx& ctx, std::uint32_t budget) noexcept;
/**
 * Sends the QP's deferred ACK, if one is owed (TransportCtx::defer_acks). Engine thread; call it
 * after a receive burst and before anything that may wait (responder_run() calls it first). A
 * refused transmit drops the ACK (tx_no_buffer), as an immediate one would be: the requester's
 * next AckReq or its timer recovers.
 */
void responder_flush_ack(Qp& qp, TransportCtx& ctx) noexcept;

// ---- modify.cc ----
/**
 * ibv_modify_qp for RC: the transition from the current state to attr.qp_state (or the current
 * state when @p mask lacks kQpState) must be legal, every attribute the transition requires must be
 * in @p mask and nothing the transition does not allow (IBTA Vol 1 §11.2.4.2, table of
 * ibv_modify_qp). Values are range checked (path MTU ≤ the port's MTU, timeout ≤ 31, retry counts ≤
 * 7, max_rd_atomic ≤ kMaxRdAtomic, port exists). RESET reinitialises the transport state
 * (qp_reset); ERR flushes (qp_enter_error). The caller rebuilds the QP's path headers when the AV,
 * the destination QPN or the port changed (they need the port's addresses).
 * @param port_mtu largest path MTU in bytes of each port (index = verbs port - 1)
 * @return 0 or EINVAL; on EINVAL the QP is unchanged. Control path (the engine is quiescent).
 */
int qp_modify(Qp* qp, const QpAttr& attr, std::uint32_t mask,
              std::span<const std::uint32_t> port_mtu, TransportCtx& ctx) noexcept;
/**
 * Gives a new @p qp its SQ and RQ at qp.cap's depths (rounded up to powers of two). Control path:
 * allocates. @return 0, or ENOMEM (the QP keeps whatever rings it had).
 */
[[nodiscard]] int qp_alloc_queues(Qp& qp) noexcept;
/** Back to RESET: its rings emptied in place (qp_alloc_queues made them), fresh
 *  requester/completer/responder state. Control path; allocates nothing. */
void qp_reset(Qp& qp) noexcept;
/** Gives @p qp an empty SQ of at least @p depth slots and their SqWqeExts (qp_alloc_queues();
 *  protocol tests that build a Qp by hand). Control path: allocates.
 *  @return false when there was no memory (the QP keeps its SQ). */
[[nodiscard]] bool make_sq(Qp& qp, std::uint32_t depth) noexcept;

// ---- qp.cc ----
/** TransportOps::run of RC. */
std::uint32_t qp_run(Qp& qp, TransportCtx& ctx, std::uint32_t budget, bool* wait_release) noexcept;
/** TransportOps::has_work of RC. */
[[nodiscard]] bool qp_has_work(const Qp& qp) noexcept;
/**
 * Moves @p qp to ERR (if it is not there) and completes every outstanding send and receive WQE with
 * WR_FLUSH_ERR, signaled or not (IBTA §10.7.3.1). Idempotent: WQEs are flushed exactly once.
 */
void qp_enter_error(Qp& qp, TransportCtx& ctx) noexcept;

} // namespace droce::rc
