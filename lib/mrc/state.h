/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * Internal to lib/mrc: the per-QP state of the MRC transport (rc::Qp::transport_state) and the
 * functions its files share. Not installed; include only from lib/mrc sources.
 *
 * Files by role (as lib/rc): paths.cc (path set, spraying, health, probes, port status),
 * requester.cc (sending, SACK/NACK handling, loss detection, retransmission, completions, ACK
 * timer), responder.cc (placement, tracker, SACK/NACK generation, immediates), transport.cc (the
 * TransportOps table, modify, attributes). Engine thread only, except create / set_attr / modify
 * (control path).
 */
#pragma once

#include <array>
#include <cstdint>

#include "mrc/mrc.h"

namespace droce::mrc::detail {

using wire::Psn;

/** One path: an entropy value bound to a plane. */
struct Ev {
    wire::PathHeaders hdr; ///< the plane's headers with this path's UDP source port / flow label
    std::uint8_t plane = 0;
    EvState state = EvState::good;
    std::uint8_t probe_ok = 0;         ///< probes answered in a row (ASSUMED_BAD paths)
    bool probe_out = false;            ///< a probe is unanswered
    std::uint32_t probe_seq = 0;       ///< the latest probe sent
    std::uint32_t probe_first_seq = 0; ///< the oldest probe still unanswered
    std::uint64_t probe_out_since_ns = 0;
    std::uint64_t avoid_until_ns = 0; ///< skipped (congestion) until then
    std::uint64_t probe_due_ns = 0;
    std::uint64_t tx_pkts = 0;
    std::uint64_t losses = 0;
};

/** Why a PSN is being sent again (counted when it leaves). */
enum class LossCause : std::uint8_t { none, nack, rack, timeout, plane_down };

/** What the requester sent at one PSN. Indexed by psn & (kWindow - 1). */
struct PsnEntry {
    std::uint32_t psn = 0;
    std::uint32_t wqe_index = 0; ///< free-running SQ index of its WQE
    std::uint32_t offset = 0;    ///< byte offset in the message
    std::uint32_t len = 0;       ///< payload bytes
    std::uint64_t send_ns = 0;   ///< when its latest copy left
    std::uint64_t plane_seq = 0; ///< its latest copy's number on its plane (State::plane_seq)
    std::uint16_t ev = 0;        ///< path of its latest copy
    std::uint8_t tx_count = 0;   ///< copies sent
    LossCause cause = LossCause::none;
    bool last = false;   ///< last packet of its message
    bool sacked = false; ///< arrived (SACK bit or cumulative PSN)
    bool lost = false;   ///< declared lost, waiting on the retransmit queue
};

/** An immediate held by the responder until its message and every earlier one arrived. */
struct PendingImm {
    std::uint32_t last_psn = 0;
    std::uint32_t imm = 0;
    std::uint32_t byte_len = 0;
};

constexpr std::uint32_t kWindowMask = kWindow - 1;
constexpr std::uint32_t kCtlSlots = 256; ///< > packets one QP can stage in a pass (4 ports x 64)
constexpr unsigned kMaxPlanes = TxStage::kMaxPorts;
constexpr std::uint32_t kMaxDirtyBlocks = kWindow / wire::kSackBits;

struct State final : rc::TransportState {
    MrcAttr attr;
    MrcCounters counters;
    std::array<PlaneStats, kMaxPlanes> planes;

    // ---- paths (paths.cc)
    std::array<Ev, kMaxEvs> evs{};
    std::uint16_t num_evs = 0;
    /** Paths given by set_evs (explicit_evs), else num_evs paths from attr.ev_base. */
    std::array<EvSpec, kMaxEvs> ev_specs{};
    bool explicit_evs = false;
    EvEventFn ev_hook = nullptr; ///< set_ev_event_hook
    void* ev_hook_user = nullptr;
    std::uint8_t num_planes = 0;
    /** Bit p: the peer's address on plane p has a MAC (static, or ARP / ND answered; build_evs).
     *  A plane still being resolved, or that nobody answers on, carries nothing, as a plane that
     *  is down: the QP goes on over the others (Device::resolve_paths rebuilds the paths as each
     *  resolves). */
    std::uint8_t resolved_planes = 0xff;
    std::array<std::array<std::uint16_t, kMaxEvs>, kMaxPlanes> plane_evs{};
    std::array<std::uint16_t, kMaxPlanes> plane_ev_count{};
    std::array<std::uint16_t, kMaxPlanes> plane_cursor{};
    std::array<std::uint16_t, kMaxPlanes> ctl_cursor{};
    std::uint8_t plane_rr = 0;
    std::uint16_t good_evs = 0;
    std::uint16_t bad_evs = 0;
    std::uint64_t next_probe_ns = 0;
    std::uint32_t probe_seq = 0;
    std::uint8_t remote_up_mask = 0xff; ///< the peer's ports that are up (port status, SACKs)
    bool remote_ps_seen = false;
    std::uint32_t remote_ps_seq = 0;
    std::uint32_t ps_seq = 0;    ///< port status messages sent
    std::uint8_t ps_resend = 0;  ///< copies still to send
    std::uint64_t ps_due_ns = 0; ///< next copy

    // ---- requester (requester.cc)
    Psn cum;      ///< oldest PSN not acknowledged
    Psn next_psn; ///< next new PSN
    Psn highest_sacked;
    std::uint32_t next_wqe = 0;
    std::uint32_t inflight = 0;
    std::uint32_t wimm_inflight = 0;
    std::uint32_t max_dist_sent = 0;
    std::uint8_t peer_mpr_dest = kMaxMpr;
    std::array<PsnEntry, kWindow> psn{};
    std::array<std::uint32_t, kWindow> rtx{}; ///< PSNs to send again, oldest first
    std::uint32_t rtx_head = 0;
    std::uint32_t rtx_tail = 0;
    std::uint64_t rtx_hold_until_ns = 0;
    std::uint64_t rack_send_ns = 0; ///< send time of the latest-sent packet known delivered
    std::uint64_t srtt_ns = 0;      ///< smoothed round trip (RFC 6298), first copies only
    std::uint64_t rttvar_ns = 0;
    std::uint64_t min_rtt_ns = 0;
    /** Per plane: packets sent on it, numbered from 1 (PsnEntry::plane_seq), and the highest of
     *  those known delivered (first copies only). A plane's packets share its queues, so a hole
     *  reorder_pkts behind what the plane delivered is lost, whatever the queues' delays. */
    std::array<std::uint64_t, kMaxPlanes> plane_seq{};
    std::array<std::uint64_t, kMaxPlanes> plane_delivered{};
    std::uint64_t rack_deadline_ns = 0; ///< when a waiting hole passes the RACK window
    std::uint64_t ack_deadline_ns = 0;
    std::uint8_t linear_left = 0;
    std::uint8_t exp_left = 0;
    std::uint8_t backoff_shift = 0;

    // ---- responder (responder.cc)
    Psn r_cum; ///< next PSN expected: every PSN before it arrived
    std::array<std::uint64_t, kWindow / 64>
        r_bitmap{}; ///< bit psn & kWindowMask: arrived, >= r_cum
    /** SACK blocks touched since they were last reported, with the reports still due: each block
     *  goes out in two SACKs, so one lost SACK does not hide what arrived. */
    struct DirtyBlock {
        std::uint32_t base = 0;
        std::uint8_t reports = 0;
    };
    std::array<DirtyBlock, kMaxDirtyBlocks> dirty{};
    std::uint32_t num_dirty = 0;
    bool sack_owed = false;
    std::uint8_t sack_plane = 0;
    bool ece = false;
    std::uint16_t ece_path = 0;
    std::uint16_t last_rx_path = 0;
    std::array<PendingImm, kMaxWimm> imm{}; ///< sorted by last_psn
    std::uint32_t imm_count = 0;
    std::uint32_t imm_max = 0;
    std::uint32_t max_dist_rcvd = 0;

    // ---- control packet bodies staged this pass (PacketFields::mrc_ctl points here)
    std::array<wire::MrcCtlFields, kCtlSlots> ctl{};
    std::uint32_t ctl_next = 0;

    void count(MrcCounter c, std::uint64_t n = 1) noexcept { counters.inc(c, n); }
    void ev_event(std::uint16_t ev, EvState to) const noexcept {
        if (ev_hook != nullptr) ev_hook(ev_hook_user, ev, to);
    }
    PsnEntry& entry(Psn p) noexcept { return psn[p.value() & kWindowMask]; }
    wire::MrcCtlFields& next_ctl() noexcept {
        wire::MrcCtlFields& c = ctl[ctl_next++ % kCtlSlots];
        c = wire::MrcCtlFields{};
        return c;
    }
};

[[nodiscard]] inline State& state(rc::Qp& qp) noexcept {
    return static_cast<State&>(*qp.transport_state);
}
[[nodiscard]] inline const State& state(const rc::Qp& qp) noexcept {
    return static_cast<const State&>(*qp.transport_state);
}

/** ACK timeout of @p t: 1.024 us x 2^t (OCP mrc_qp_attr.timeout). */
[[nodiscard]] constexpr std::uint64_t timeout_ns(std::uint8_t t) noexcept {
    return 1024ull << t;
}

// ---- paths.cc
/** Rebuilds the path set from qp.paths (one per plane); keeps states of surviving paths. */
void build_evs(rc::Qp& qp, State& s) noexcept;
/** The planes usable now: up here and at the peer. */
[[nodiscard]] std::uint8_t usable_planes(const State& s, const rc::TransportCtx& ctx) noexcept;
/** Next path for a data packet (plane round robin, GOOD and not avoided first), never @p avoid_ev
 *  when another exists. @return path index or -1. */
[[nodiscard]] int pick_data_ev(State& s, const rc::TransportCtx& ctx, std::uint64_t now,
                               int avoid_ev) noexcept;
/** A path for a control packet (SACK, NACK, reply) toward plane @p plane, or another usable one.
 *  @return path index or -1. */
[[nodiscard]] int pick_ctl_ev(State& s, const rc::TransportCtx& ctx, unsigned plane) noexcept;
/** A loss on path @p ev: ASSUMED_BAD unless that would leave fewer than min_active_evs GOOD paths
 *  on the planes usable now (@p usable: planes up here and at the peer). */
void ev_lost(State& s, std::uint16_t ev, std::uint64_t now, std::uint8_t usable) noexcept;
/** Congestion on path @p ev (ECN echo, trim): skipped for ecn_avoid_ns. */
void ev_avoid(State& s, std::uint16_t ev, std::uint64_t now) noexcept;
/** Sends due probes and port status messages. @return packets staged. */
std::uint32_t paths_run(rc::Qp& qp, State& s, rc::TransportCtx& ctx, std::uint64_t now) noexcept;
/** A probe arrived: answer it. */
void probe_receive(rc::Qp& qp, State& s, const wire::ParsedFrame& pkt,
                   rc::TransportCtx& ctx) noexcept;
/** A probe reply arrived. */
void probe_reply_receive(State& s, const wire::ParsedFrame& pkt, std::uint64_t now) noexcept;
/** A port status message arrived. */
void port_status_receive(rc::Qp& qp, State& s, const wire::ParsedFrame& pkt,
                         rc::TransportCtx& ctx) noexcept;
/** The peer's port mask became @p mask (port status or SACK). */
void set_remote_ports(rc::Qp& qp, State& s, std::uint8_t mask, rc::TransportCtx& ctx) noexcept;
/** Earliest path deadline (probe, port status resend), or 0. */
[[nodiscard]] std::uint64_t paths_deadline(const State& s) noexcept;

// ---- requester.cc
std::uint32_t requester_run(rc::Qp& qp, State& s, rc::TransportCtx& ctx, std::uint32_t budget,
                            bool* wait_release) noexcept;
void sack_receive(rc::Qp& qp, State& s, const wire::ParsedFrame& pkt,
                  rc::TransportCtx& ctx) noexcept;
void nack_receive(rc::Qp& qp, State& s, const wire::ParsedFrame& pkt,
                  rc::TransportCtx& ctx) noexcept;
void requester_timer(rc::Qp& qp, State& s, rc::TransportCtx& ctx, std::uint64_t now) noexcept;
/** Declares lost every outstanding, unacknowledged packet whose latest copy left on a plane of
 *  @p planes (a bit mask): they go again on the others. */
void planes_lost(State& s, std::uint8_t planes) noexcept;
[[nodiscard]] bool requester_has_work(const rc::Qp& qp, const State& s) noexcept;
void requester_reset(State& s, Psn sq_psn, std::uint32_t first_wqe) noexcept;

// ---- responder.cc
void data_receive(rc::Qp& qp, State& s, const wire::ParsedFrame& pkt,
                  rc::TransportCtx& ctx) noexcept;
/** Sends owed SACKs and delivers immediates. @return packets staged. */
std::uint32_t responder_run(rc::Qp& qp, State& s, rc::TransportCtx& ctx) noexcept;
[[nodiscard]] bool responder_has_work(const rc::Qp& qp, const State& s) noexcept;
void responder_reset(State& s, Psn rq_psn) noexcept;

/** Stages a control packet (SACK, NACK, probe, reply, port status) on path @p ev. */
bool stage_ctl(rc::Qp& qp, State& s, rc::TransportCtx& ctx, wire::Opcode op, int ev,
               const wire::MrcCtlFields& body) noexcept;

} // namespace droce::mrc::detail
