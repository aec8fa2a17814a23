/* SPDX-License-Identifier: BSD-3-Clause */
#include "pacer.h"

#include <algorithm>

namespace droce::rc {

namespace {

double line_of(const Pacer& p) noexcept {
    return p.line_rate_mbps > 0 ? p.line_rate_mbps : kDefaultLineRateMbps;
}

/** The rate in force: the smaller limit below the line, or 0 (unpaced). */
void update_rate(Qp& qp) noexcept {
    Pacer& p = qp.pacer;
    double r = 0;
    // A NIC never sends faster than its line: with DCQCN on and the line rate known, the QP is
    // paced at RC even at the line (a burst of a whole window would otherwise leave at once).
    if (p.dcqcn != nullptr && (p.rp.limited() || p.line_rate_mbps > 0)) r = p.rp.rate_mbps();
    if (p.rate_limit_mbps > 0 && (r == 0 || p.rate_limit_mbps < r)) r = p.rate_limit_mbps;
    if (r != p.rate_mbps && r > 0 && p.gap_bytes != 0)
        p.next_send_ns = p.gap_from_ns +
                         static_cast<std::uint64_t>(static_cast<double>(p.gap_bytes) * 8000.0 / r);
    p.rate_mbps = r;
    qp.counters.set(Counter::rp_current_rate_mbps,
                    static_cast<std::uint64_t>(r > 0 ? r : line_of(p)));
}

} // namespace

void pacer_reset(Qp& qp) noexcept {
    Pacer& p = qp.pacer;
    p.next_send_ns = 0;
    p.held = false;
    p.gap_from_ns = 0;
    p.gap_bytes = 0;
    p.np = cc::DcqcnNp{};
    if (p.dcqcn) p.rp.init(*p.dcqcn, line_of(p));
    update_rate(qp);
}

void pacer_set_dcqcn(Qp& qp, const cc::DcqcnProfile* profile, double line_rate_mbps) noexcept {
    qp.pacer.dcqcn = profile;
    qp.pacer.line_rate_mbps = line_rate_mbps;
    pacer_reset(qp);
}

void pacer_set_rate_limit(Qp& qp, double mbps) noexcept {
    qp.pacer.rate_limit_mbps = mbps;
    update_rate(qp);
}

void pacer_sent(Qp& qp, std::uint64_t wire_bytes, std::uint64_t now_ns,
                std::uint64_t prev_pass_start_ns) noexcept {
    Pacer& p = qp.pacer;
    if (p.dcqcn != nullptr) {
        const double before = p.rp.rate_mbps();
        p.rp.on_sent(wire_bytes, now_ns);
        if (p.rp.rate_mbps() != before) update_rate(qp);
    }
    if (p.rate_mbps <= 0) return;
    // Time the QP did not send earns credit (pacer.h): a burst never exceeds it.
    std::uint64_t burst_ns = kPacerBurstNs;
    if (p.held && prev_pass_start_ns != 0 && now_ns > prev_pass_start_ns) {
        const std::uint64_t engine_away_ns = now_ns - prev_pass_start_ns;
        const auto bytes_ns = static_cast<std::uint64_t>(kPacerBurstBytes * 8000.0 / p.rate_mbps);
        burst_ns = std::max(kPacerBurstNs, std::min({engine_away_ns, bytes_ns, kPacerBurstMaxNs}));
    }
    const std::uint64_t earliest = now_ns > burst_ns ? now_ns - burst_ns : 0;
    const std::uint64_t from = std::max(p.next_send_ns, earliest);
    p.gap_from_ns = from;
    p.gap_bytes = wire_bytes;
    p.next_send_ns =
        from + static_cast<std::uint64_t>(static_cast<double>(wire_bytes) * 8000.0 / p.rate_mbps);
    // Still behind (catching up on a late engine): the next packet is due at once and counts as
    // held, so the same credit applies to it.
    p.held = p.next_send_ns <= now_ns;
}

void pacer_on_time(Qp& qp, std::uint64_t now_ns) noexcept {
    Pacer& p = qp.pacer;
    if (p.dcqcn == nullptr) return;
    const double before = p.rp.rate_mbps();
    p.rp.on_time(now_ns);
    if (p.rp.rate_mbps() != before) update_rate(qp);
}

void pacer_on_cnp(Qp& qp, std::uint64_t now_ns) noexcept {
    Pacer& p = qp.pacer;
    if (p.dcqcn == nullptr || !p.rp.on_cnp(now_ns)) {
        qp.counters.inc(Counter::rp_cnp_ignored);
        return;
    }
    qp.counters.inc(Counter::rp_cnp_handled);
    update_rate(qp);
}

std::uint64_t pacer_deadline(const Qp& qp, bool waiting) noexcept {
    const Pacer& p = qp.pacer;
    std::uint64_t d = p.dcqcn ? p.rp.next_event_ns() : 0;
    if (waiting && p.rate_mbps > 0 && p.next_send_ns != 0 && (d == 0 || p.next_send_ns < d))
        d = p.next_send_ns;
    return d;
}

} // namespace droce::rc
