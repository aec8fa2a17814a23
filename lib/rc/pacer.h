/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * The per-QP pacer (rc::Pacer) and the glue between a QP and DCQCN (lib/cc): what the requesters
 * (RC and MRC) call per packet, what the engine calls when a CNP arrives or a marked packet is
 * received, and the QP's next pacing deadline.
 *
 * Pacing: after a packet of W wire bytes at rate R Mb/s the next may leave W x 8 / R us later.
 * Credit for idle time is kept up to kPacerBurstNs, so a paced QP sends at most that much time's
 * worth of packets back to back. Rate = the smaller of IBV_QP_RATE_LIMIT and DCQCN's RC; unpaced
 * (rate 0) when neither limits below the line.
 *
 * Engine thread only (and the control path inside a ControlSection for the setters).
 */
#pragma once

#include <cstdint>

#include "rc/qp.h"

namespace droce::rc {

/** Longest burst a paced QP may send back to back after idling. */
inline constexpr std::uint64_t kPacerBurstNs = 2'000;
/** DCQCN's starting rate when the port's line rate is not known. */
inline constexpr double kDefaultLineRateMbps = 100'000;

/** Re-initialises the rate state (RP at the line rate, no pacing debt); keeps the settings. */
void pacer_reset(Qp& qp) noexcept;
/** Sets (or clears, null) the QP's DCQCN profile and its port's line rate (0 = unknown). */
void pacer_set_dcqcn(Qp& qp, const cc::DcqcnProfile* profile, double line_rate_mbps) noexcept;
/** IBV_QP_RATE_LIMIT in Mb/s (0 = none). */
void pacer_set_rate_limit(Qp& qp, double mbps) noexcept;

/** True while the pacer holds the QP's next packet back at @p now_ns. */
[[nodiscard]] inline bool pacer_blocked(const Qp& qp, std::uint64_t now_ns) noexcept {
    return qp.pacer.rate_mbps > 0 && now_ns < qp.pacer.next_send_ns;
}
/** The QP sent a packet of @p wire_bytes at @p now_ns: spaces the next one, feeds DCQCN's byte
 *  counter. */
void pacer_sent(Qp& qp, std::uint64_t wire_bytes, std::uint64_t now_ns) noexcept;
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
