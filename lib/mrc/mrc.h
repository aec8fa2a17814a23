/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * The MRC transport (Multipath Reliable Connection): one queue pair sprayed over every path of
 * every plane (device port), placed out of order at the responder, repaired by selective
 * acknowledgement, going on without error when a plane dies.
 *
 * Semantics follow the OCP MRC 1.0 application API (mrc.h of the OCP companion repository) and the
 * MRC papers: RDMA WRITE and WRITE with immediate only; receives for immediates are pre-posted and
 * never draw RNR; in-flight WRITE with immediate bounded by max_wimm (requester) and max_wimm_dest
 * (responder); MPR (maximum PSN range, units of 128 PSNs) bounds how far past the cumulative PSN a
 * requester may send; ACK timeout 1.024 us x 2^timeout with linear then exponential retries. The
 * wire format is droce's own (wire/mrc.h).
 *
 * Paths. The QP holds num_evs paths (entropy values), split evenly over the device's ports; a path
 * is a UDP source port (and IPv6 flow label) bound to one port, and each port is a plane. Path
 * states are GOOD, ASSUMED_BAD (the transport saw a loss on it) and DENIED (the operator's). Each
 * packet goes to the next plane in turn that is up here and at the peer and has a usable path, and
 * on that plane to the next GOOD path not avoided for congestion, so two consecutive packets never
 * share a path and the planes share bytes equally.
 *
 * Loss and congestion told apart. A trimmed packet (payload cut by a switch) draws an immediate
 * NACK: retransmitted at once, its path avoided for a while (congestion). An ECN-marked packet
 * makes its path avoided for ecn_avoid_ns, never retired. A packet lost outright is found by the
 * SACKs (a packet sent after it arrived and a round trip plus the reorder window passed: RACK) or
 * by the ACK timeout; its path becomes ASSUMED_BAD at once (never below min_active_evs paths), and
 * a probe every probe_interval_ns brings it back after probe_successes answers in a row.
 *
 * Use (native API): create the QP with Device::create_qp(..., mrc::kMrcTransport), call
 * mrc::set_attr() in RESET or INIT, give the peer's address per plane with
 * Device::set_remote_planes() (or let every plane use the AV's), then modify to INIT, RTR, RTS as
 * for RC (rc/connect.h's connect_rc works: RC attributes that MRC does not use are accepted and
 * ignored).
 *
 * Thread rules: as every transport (rc/qp.h): the engine thread, control calls inside the device's
 * ControlSection. Nothing on the datapath allocates, locks or throws.
 */
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <span>
#include <string_view>

#include "common/counters.h"
#include "rc/qp.h"
#include "wire/mrc.h"

namespace droce::mrc {

/** Largest MPR in kMprUnit PSNs (mrc_device_attr.mpr_attr.max_mpr); the tracker window. */
inline constexpr std::uint32_t kMaxMpr = 32;
/** PSNs the requester's and responder's trackers cover: kMaxMpr x 128. */
inline constexpr std::uint32_t kWindow = kMaxMpr * wire::kMprUnit;
/** Largest num_evs. */
inline constexpr std::uint32_t kMaxEvs = 256;
/** Largest max_wimm / max_wimm_dest. */
inline constexpr std::uint32_t kMaxWimm = 256;
/** Largest linear_cnt (OCP mrc_qp_attr.retry.linear_cnt). */
inline constexpr std::uint8_t kMaxLinearCnt = 7;
/** exp_cnt that means "retry for ever" (OCP mrc_qp_attr.retry.exp_cnt). */
inline constexpr std::uint8_t kExpCntInfinite = 25;
/** Largest timeout exponent (1.024 us x 2^24 = 17.18 s, OCP mrc_qp_attr.timeout). */
inline constexpr std::uint8_t kMaxTimeout = 24;

/** MRC attributes of a QP (OCP mrc_qp_attr, plus droce's path and loss-detection settings). */
struct MrcAttr {
    std::uint8_t mpr = 16;       ///< requester MPR, kMprUnit PSNs (1..kMaxMpr)
    std::uint8_t mpr_dest = 16;  ///< responder MPR (tracker window), kMprUnit PSNs (1..kMaxMpr)
    std::uint16_t max_wimm = 64; ///< WRITE with immediate in flight as requester (1..kMaxWimm)
    std::uint16_t max_wimm_dest = 64; ///< as responder (1..kMaxWimm)
    std::uint8_t timeout = 14;        ///< ACK timeout 1.024 us x 2^timeout (1..kMaxTimeout)
    std::uint8_t linear_cnt = 7;      ///< retries at the base timeout (0..7)
    std::uint8_t exp_cnt = 7;    ///< then retries with the timeout doubling (0..25, 25 = infinite)
    std::uint16_t num_evs = 128; ///< paths (entropy values), split over the ports (1..kMaxEvs)
    std::uint16_t min_active_evs =
        4; ///< loss detection leaves at least this many GOOD (ev_min_active)
    std::uint16_t ev_base = 0xc000; ///< UDP source port of path 0; path i uses ev_base + i
    /** Packets in flight (sent, neither acknowledged nor declared lost) at most; 0 = only MPR. A
     *  fixed window standing in for congestion control (the CC issue brings a real one). */
    std::uint32_t max_inflight = 0;
    /** A hole is lost once its plane delivered this many packets sent after it (the largest
     *  reordering within one plane the QP rides out without a retransmission). */
    std::uint16_t reorder_pkts = 64;
    /** Or once a packet sent after it on any plane arrived and srtt + 4 rttvar + this passed since
     *  it was sent (a plane that delivers nothing any more). */
    std::uint64_t reorder_window_ns = 20'000;
    std::uint64_t ecn_avoid_ns = 50'000;       ///< a CE-marked or trimmed path is skipped this long
    std::uint64_t probe_interval_ns = 250'000; ///< ASSUMED_BAD paths are probed this often
    std::uint8_t probe_successes = 3;          ///< answered probes in a row that make a path GOOD
    bool trim_nack = true; ///< answer a trimmed packet with a NACK (OCP MRC_CAP_TRIM_NACK)
};

/** Path (EV) states (OCP mrc_ctl: GOOD, ASSUMED_BAD, DENIED). */
enum class EvState : std::uint8_t { good, assumed_bad, denied };
[[nodiscard]] std::string_view to_string(EvState s) noexcept;

// clang-format off
/** X(name, description) of the MRC counters of one QP. */
#define DROCE_MRC_COUNTERS(X) \
    X(data_pkts_sent,      "MRC WRITE packets sent, first transmissions") \
    X(retransmits,         "MRC WRITE packets sent again (selective repeat)") \
    X(retransmit_nack,     "retransmissions caused by a NACK (trim, MPR)") \
    X(retransmit_rack,     "retransmissions caused by SACK loss detection") \
    X(retransmit_timeout,  "retransmissions caused by the ACK timeout") \
    X(ack_timeouts,        "ACK timer expiries") \
    X(sacks_sent,          "SACKs sent") \
    X(sacks_rcvd,          "SACKs received") \
    X(nacks_sent,          "NACKs sent") \
    X(nacks_rcvd,          "NACKs received") \
    X(trims_rcvd,          "trimmed packets received (NACKed)") \
    X(ecn_echo_rcvd,       "SACKs echoing a CE mark on a path") \
    X(ce_rcvd,             "data packets received marked CE") \
    X(dup_pkts_rcvd,       "data packets received again (already placed)") \
    X(ooo_pkts_rcvd,       "data packets received past a hole (placed out of order)") \
    X(mpr_exceeded,        "data packets beyond the responder's MPR window (dropped)") \
    X(wimm_exceeded,       "WRITE with immediate beyond max_wimm_dest (dropped)") \
    X(access_errors,       "data packets refused: rkey, bounds or access") \
    X(bad_version,         "MRC packets of an unknown wire version (dropped)") \
    X(stale_feedback,      "SACK / NACK / probe replies that matched nothing outstanding") \
    X(bad_nack_reason,     "NACKs with a reason the format does not define (dropped)") \
    X(ev_assumed_bad,      "paths marked ASSUMED_BAD after a loss") \
    X(ev_restored,         "paths back to GOOD after probes") \
    X(ev_floor_kept,       "losses that left a path GOOD to keep min_active_evs") \
    X(probes_sent,         "path probes sent") \
    X(probe_replies_rcvd,  "path probe replies received") \
    X(port_status_sent,    "port status messages sent") \
    X(port_status_rcvd,    "port status messages received") \
    X(no_path,             "passes with data to send and no usable path") \
    X(imm_delivered,       "immediates completed to the receive CQ") \
    X(imm_wait_recv,       "passes an immediate waited for a posted receive")
// clang-format on

enum class MrcCounter : std::uint8_t {
#define DROCE_MRC_ENUM(name, text) name,
    DROCE_MRC_COUNTERS(DROCE_MRC_ENUM)
#undef DROCE_MRC_ENUM
        count_
};
inline constexpr std::size_t kNumMrcCounters = static_cast<std::size_t>(MrcCounter::count_);
inline constexpr std::string_view kMrcCounterNames[kNumMrcCounters] = {
#define DROCE_MRC_NAME(name, text) #name,
    DROCE_MRC_COUNTERS(DROCE_MRC_NAME)
#undef DROCE_MRC_NAME
};
/** Per-QP MRC counters: one writer (the engine), any reader. */
struct MrcCounters : CounterBlock<MrcCounter, kNumMrcCounters> {};

/** Per-plane traffic of one QP, written by the engine, readable from any thread (relaxed). */
struct PlaneStats {
    std::atomic<std::uint64_t> tx_pkts{0};
    std::atomic<std::uint64_t> tx_bytes{0}; ///< payload bytes of data packets (first and again)
    std::atomic<std::uint64_t> retransmits{0};
    /** Packets sent on this plane that RACK declared lost (overtaken by later packets of the
     *  same plane, or overdue while later ones arrived): where a loss happened, where retransmits
     *  counts where the repair went (any plane). A retransmission timeout declares everything
     *  outstanding lost, on every plane, and is not counted here (MrcCounter::ack_timeouts):
     *  it says that something was lost, not where. */
    std::atomic<std::uint64_t> losses{0};
    std::atomic<std::uint64_t> rx_pkts{0};
    std::atomic<std::uint64_t> rx_bytes{0};
};

/** A snapshot of one path. */
struct EvInfo {
    std::uint16_t udp_sport = 0;
    std::uint32_t flow_label = 0; ///< IPv6 paths; the low 20 bits
    std::uint8_t plane = 0;       ///< 0-based device port
    EvState state = EvState::good;
    std::uint64_t avoid_until_ns = 0; ///< skipped for congestion until then (ECN echo, trim)
    std::uint64_t tx_pkts = 0;
    std::uint64_t losses = 0;
};

/**
 * Sets the MRC attributes of @p qp (an MRC QP) in RESET or INIT, before RTR, as mrc_modify_qp with
 * the MRC mask does; the path set is rebuilt. Control path: call inside the device's
 * ControlSection (mrc::Device-level wrapper: Device::ControlSection section(dev)). Paths given by
 * set_evs are dropped: num_evs paths from ev_base again.
 * @return 0, EINVAL (not an MRC QP, a value out of range) or EBUSY (not in RESET or INIT).
 */
int set_attr(rc::Qp& qp, const MrcAttr& attr) noexcept;
/**
 * Sets only the requester's attributes of @p qp (an MRC QP) — mpr, max_wimm, timeout, linear_cnt,
 * exp_cnt; the other fields of @p attr are not looked at — in RESET, INIT or RTR, before it sends
 * (the OCP API gives them with the modify to RTS, when set_attr no longer may). The requester
 * starts from them at RTS. Control path, inside the device's ControlSection.
 * @return 0, EINVAL (not an MRC QP, a value out of range) or EBUSY (RTS or later).
 */
int set_requester_attr(rc::Qp& qp, const MrcAttr& attr) noexcept;
/** The QP's MRC attributes. @return nullptr when @p qp is not an MRC QP. */
[[nodiscard]] const MrcAttr* get_attr(const rc::Qp& qp) noexcept;

/** True when @p qp is run by the MRC transport. */
[[nodiscard]] bool is_mrc(const rc::Qp& qp) noexcept;
/** The QP's MRC counters, or nullptr when not an MRC QP. */
[[nodiscard]] const MrcCounters* counters(const rc::Qp& qp) noexcept;
/** Traffic of plane @p plane (0-based port), or nullptr. */
[[nodiscard]] const PlaneStats* plane_stats(const rc::Qp& qp, unsigned plane) noexcept;
/** Paths of the QP; @p out gets up to out.size() entries. Engine quiescent (ControlSection) or the
 *  engine thread. @return paths written. */
std::size_t ev_snapshot(const rc::Qp& qp, std::span<EvInfo> out) noexcept;
/** Path @p ev of the QP into @p out (the engine thread, or the engine quiescent). @return false
 *  when @p qp is not an MRC QP or has no such path. */
bool ev_info(const rc::Qp& qp, std::uint32_t ev, EvInfo& out) noexcept;
/**
 * Sets path @p ev DENIED (@p deny) or back to GOOD (OCP mrc_ctl EV state). Control path.
 * @return 0 or EINVAL.
 */
int set_ev_denied(rc::Qp& qp, std::uint32_t ev, bool deny) noexcept;
/**
 * One path given explicitly (an entry of an OCP MRC controller EV profile, mrc_ctl_ev: a value
 * bound to a port). droce puts an EV in the UDP source port and, on IPv6 paths, the flow label.
 */
struct EvSpec {
    std::uint16_t udp_sport = 0;
    std::uint32_t flow_label = 0; ///< IPv6 paths only, low 20 bits used
    std::uint8_t plane = 0;       ///< 0-based device port
    bool denied = false;          ///< starts DENIED (never used until set GOOD)
};
/**
 * Replaces the QP's path set by @p evs (instead of num_evs paths from ev_base spread over the
 * ports): num_evs becomes evs.size(); every path starts GOOD (or DENIED). min_active_evs is
 * lowered to evs.size() when above it. In RESET, INIT or RTR, before the QP sends. Control path
 * (the device's ControlSection).
 * @return 0; EINVAL (not an MRC QP, no path or more than kMaxEvs, a plane >= kMaxPlanes of the
 *         transmit stage); EBUSY (RTS or later: the requester has packets on the old paths).
 */
int set_evs(rc::Qp& qp, std::span<const EvSpec> evs) noexcept;
/**
 * Changes the value of path @p ev in place (OCP MRC_CTL_EV_OP_REPLACE_EV on an ONLINE profile):
 * its packets from now on carry @p udp_sport / @p flow_label; its plane and state stay. Any QP
 * state. Control path. @return 0 or EINVAL (not an MRC QP, @p ev out of range).
 */
int replace_ev(rc::Qp& qp, std::uint32_t ev, std::uint16_t udp_sport,
               std::uint32_t flow_label) noexcept;
/**
 * Sets min_active_evs (OCP ev_min_active) in any state: loss detection leaves at least this many
 * GOOD paths. Control path. @return 0 or EINVAL (not an MRC QP, more than num_evs).
 */
int set_min_active_evs(rc::Qp& qp, std::uint16_t min_active) noexcept;
/**
 * Called on the engine thread when a path changes state by itself: GOOD -> ASSUMED_BAD (a loss) or
 * ASSUMED_BAD -> GOOD (probes answered). The OCP MRC controller's EV events come from it. Must not
 * block, allocate or throw (it runs inside the engine's pass).
 */
using EvEventFn = void (*)(void* user, std::uint16_t ev, EvState state) noexcept;
/** Installs (or, with nullptr, removes) @p fn for @p qp. Control path. No effect on RC QPs. */
void set_ev_event_hook(rc::Qp& qp, EvEventFn fn, void* user) noexcept;

/** WRITE with immediate the responder holds right now (arrived, not yet completed) and the most
 *  it ever held: the max_wimm_dest bound is kept when max <= max_wimm_dest. */
struct WimmUse {
    std::uint32_t now = 0;
    std::uint32_t max = 0;
};
[[nodiscard]] WimmUse wimm_dest_use(const rc::Qp& qp) noexcept;
/** Largest distance (PSNs) a received data packet was past the responder's cumulative PSN. */
[[nodiscard]] std::uint32_t max_psn_distance_rcvd(const rc::Qp& qp) noexcept;
/** Largest distance (PSNs) the requester ever sent past its cumulative PSN. */
[[nodiscard]] std::uint32_t max_psn_distance_sent(const rc::Qp& qp) noexcept;

/** The MRC transport's table (rc::TransportOps): pass it to Device::create_qp. */
extern const rc::TransportOps kMrcTransport;

} // namespace droce::mrc
