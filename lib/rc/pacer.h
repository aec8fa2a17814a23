/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * The per-QP pacer (rc::Pacer) and the glue between a QP and DCQCN (lib/cc): what the requesters
 * (RC and MRC) call per packet, what the engine calls when a CNP arrives or a marked packet is
 * received, and the QP's next pacing deadline.
 *
 * Pacing: after a packet of W wire bytes at rate R Mb/s the next may leave W x 8 / R us later.
 * Credit for time not sent is kept (kPacerBurstNs, kPacerBurstBytes), so a paced QP catches up on
 * an engine that ran late, and sends at most that much back to back. Rate = the smaller of
 * IBV_QP_RATE_LIMIT and DCQCN's RC; unpaced (rate 0) when neither limits below the line.
 *
 * Engine thread only (and the control path inside a ControlSection for the setters).
 */
#pragma once

#include <cstdint>

#include "rc/qp.h"

namespace droce::rc {

/**
 * Credit a paced QP keeps for time it did not send: kPacerBurstNs, as a NIC's rate limiter. More
 * when the pacer held a packet back and the engine came late because it was away (preempted, or
 * a long pass: since TransportCtx::prev_pass_start_ns): that absence, up to the time
 * kPacerBurstBytes take at the rate in force and kPacerBurstMaxNs (at 10 Gb/s 64 KiB, 52 us; at 1
 * Gb/s 200 us), so the QP keeps its rate on an engine that shares its core. On 2 cores with an
 * engine and a spinning application thread in each of two processes, the client's engine got the
 * core in turns of about 9 us out of 27, and with 2 us of credit it lost the rest: a QP paced at 10
 * Gb/s sent 2.7 Gb/s (unpaced 10.7), at 4 Gb/s 0.93, at 2 Gb/s 0.94 (droce-perf --bw over memif, 64
 * KiB WRITEs). Not for idle time, nor for a port that was full: with that much credit DCQCN flows
 * on the sim fabric burst into its queue (drops, lower utilisation and fairness).
 */
inline constexpr std::uint64_t kPacerBurstNs = 2'000;
inline constexpr std::uint64_t kPacerBurstBytes = 65'536;
inline constexpr std::uint64_t kPacerBurstMaxNs = 200'000;
/** DCQCN's starting rate when the port's line rate is not known. */
inline constexpr double kDefaultLineRateMbps = 100'000;

/** Re-initialises the rate state (RP at the line rate, no pacing debt); keeps the settings. */
void pacer_reset(Qp& qp) noexcept;
/** Sets (or clears, null) the QP's DCQCN profile and its port's line rate (0 = unknown). */
void pacer_set_dcqcn(Qp& qp, const cc::DcqcnProfile* profile, double line_rate_mbps) noexcept;
/** IBV_QP_RATE_LIMIT in Mb/s (0 = none). */
void pacer_set_rate_limit(Qp& qp, double mbps) noexcept;

/** True while the pacer holds the QP's next packet back at @p now_ns (noted: a packet is ready). */
[[nodiscard]] inline bool pacer_blocked(Qp& qp, std::uint64_t now_ns) noexcept {
    const bool blocked = qp.pacer.rate_mbps > 0 && now_ns < qp.pacer.next_send_ns;
    qp.pacer.held |= blocked;
    return blocked;
}
/** True when the QP is paced (a rate limit) or runs DCQCN: only then does pacer_sent() do
 *  anything, so a sender asks first and spares an unpaced packet its wire length and a call. */
[[nodiscard]] inline bool pacer_active(const Qp& qp) noexcept {
    return qp.pacer.rate_mbps > 0 || qp.pacer.dcqcn != nullptr;
}
/** The QP sent a packet of @p wire_bytes at @p now_ns: spaces the next one, feeds DCQCN's byte
 *  counter. @p prev_pass_start_ns: TransportCtx::prev_pass_start_ns of this pass. Does nothing
 *  unless pacer_active(). */
void pacer_sent(Qp& qp, std::uint64_t wire_bytes, std::uint64_t now_ns,
                std::uint64_t prev_pass_start_ns) noexcept;
/** Runs DCQCN's timers due at @p now_ns (the transport's timer callback calls it). */
void pacer_on_time(Qp& qp, std::uint64_t now_ns) noexcept;
/** A CNP for the QP arrived. Counts rp_cnp_handled (rate reduced) or rp_cnp_ignored (DCQCN off,
 *  or within rate_reduce_monitor_period). */
void pacer_on_cnp(Qp& qp, std::uint64_t now_ns) noexcept;
/**
 * The QP's next pacing event: DCQCN's next timer, and the pacer's release time when @p waiting
 * (the QP has a packet to send). 0 = none.
 */
[[nodiscard]] std::uint64_t pacer_deadline(const Qp& qp, bool waiting) noexcept;

} // namespace droce::rc
