/* SPDX-License-Identifier: BSD-3-Clause */
#include "runtime/shaper.h"

#include <algorithm>
#include <array>

namespace droce {

namespace {
constexpr double kWireOverhead = 24; ///< preamble 8, inter-frame gap 12, FCS 4
} // namespace

TxShaper::TxShaper(PortDriver& inner, Clock& clock, double gbps) noexcept
    : inner_(inner), clock_(clock) {
    set_rate(gbps);
}

void TxShaper::set_rate(double gbps) noexcept {
    gbps_ = gbps > 0 ? gbps : 0;
    bytes_per_ns_ = gbps_ / 8.0;
    const double frame = static_cast<double>(inner_.max_frame()) + kWireOverhead;
    depth_ = std::max(4 * frame, bytes_per_ns_ * 1'000'000.0);
    credit_ = depth_;
    last_ns_ = clock_.now_ns();
}

std::uint16_t TxShaper::tx_burst(PktBuf** bufs, std::uint16_t n) noexcept {
    if (gbps_ <= 0 || n == 0) return inner_.tx_burst(bufs, n);
    const std::uint64_t now = clock_.now_ns();
    if (now > last_ns_) {
        credit_ = std::min(depth_, credit_ + static_cast<double>(now - last_ns_) * bytes_per_ns_);
        last_ns_ = now;
    }
    // A frame leaves while there is credit left; the last one may take it below zero, which the
    // next refill pays back (so a frame larger than the credit still goes, once). Lengths are read
    // before the handoff: a frame the driver took may be gone (a net_ring peer frees it) by then.
    std::array<double, 256> cost;
    std::uint16_t k = 0;
    double spent = 0;
    while (k < n && k < cost.size() && credit_ - spent > 0) {
        cost[k] = static_cast<double>(bufs[k]->len + bufs[k]->ext_len) + kWireOverhead;
        spent += cost[k];
        ++k;
    }
    if (k < n) ++throttled_;
    if (k == 0) return 0;
    const std::uint16_t sent = inner_.tx_burst(bufs, k);
    for (std::uint16_t i = 0; i < sent; ++i)
        credit_ -= cost[i];
    return sent;
}

} // namespace droce
