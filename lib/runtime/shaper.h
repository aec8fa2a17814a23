/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * droce::TxShaper — a transmit rate limit in front of a port, as a link of that speed would
 * impose: a token bucket refilled at the rate; tx_burst() takes only the frames the bucket covers
 * and leaves the rest with the caller (the engine keeps them in its per-port queue and offers them
 * again on its next pass), so the engine feels backpressure, nothing is dropped. With several
 * ports each shaped to the same rate, the ports (planes), not the CPU, bound what a multipath QP
 * moves: take one plane away and the total falls by that plane's share.
 *
 * Every other PortDriver call goes to the inner port unchanged (receive, buffers, link state,
 * transmit by reference). Rate 0 = no limit (tx_burst passes through).
 *
 * The bucket holds at most max(4 frames, 1 ms at the rate) of credit: an engine thread that was
 * descheduled for a moment catches up instead of losing the link's time (with 20 us, a loaded
 * 2-core host got 0.62 of 1 Gb/s), and an idle port does not save up more than that. Frame length
 * counted: bytes of the Ethernet frame (data plus payload attached by reference) plus 24 bytes of
 * preamble, inter-frame gap and FCS, as on a wire.
 *
 * Thread rules: like any port, one engine thread calls tx_burst(); set_rate() is a control call
 * made while that engine is stopped (or from the engine thread itself). rate_gbps() and stats are
 * plain reads for the control path.
 */
#pragma once

#include <cstdint>

#include "common/clock.h"
#include "port/port.h"

namespace droce {

class TxShaper final : public PortDriver {
  public:
    /** @param inner the shaped port (not owned, outlives the shaper); @param clock not owned. */
    TxShaper(PortDriver& inner, Clock& clock, double gbps = 0) noexcept;

    /** Sets the rate in Gb/s (0 = unlimited). Engine stopped. */
    void set_rate(double gbps) noexcept;
    [[nodiscard]] double rate_gbps() const noexcept { return gbps_; }
    /** tx_burst() calls that left frames with the caller for want of credit. */
    [[nodiscard]] std::uint64_t throttled() const noexcept { return throttled_; }

    std::uint16_t alloc_bulk(PktBuf** bufs, std::uint16_t n) noexcept override {
        return inner_.alloc_bulk(bufs, n);
    }
    void free_bulk(PktBuf** bufs, std::uint16_t n) noexcept override { inner_.free_bulk(bufs, n); }
    std::uint16_t tx_burst(PktBuf** bufs, std::uint16_t n) noexcept override;
    std::uint16_t rx_burst(PktBuf** bufs, std::uint16_t n) noexcept override {
        return inner_.rx_burst(bufs, n);
    }
    [[nodiscard]] std::uint32_t max_frame() const noexcept override { return inner_.max_frame(); }
    [[nodiscard]] bool link_up() const noexcept override { return inner_.link_up(); }
    [[nodiscard]] bool tx_by_reference() const noexcept override {
        return inner_.tx_by_reference();
    }
    [[nodiscard]] bool
    payload_reachable(std::span<const std::span<const std::uint8_t>> payload) noexcept override {
        return inner_.payload_reachable(payload);
    }
    bool attach_payload(PktBuf* buf, std::span<const std::span<const std::uint8_t>> payload,
                        std::span<const std::uint8_t> trailer, TxRef* ref) noexcept override {
        return inner_.attach_payload(buf, payload, trailer, ref);
    }
    void tx_reclaim() noexcept override { inner_.tx_reclaim(); }
    [[nodiscard]] bool tx_read_by_peer() const noexcept override {
        return inner_.tx_read_by_peer();
    }
    // Receive is not shaped: the inner port's interrupt is this port's.
    [[nodiscard]] int rx_interrupt_fd() const noexcept override { return inner_.rx_interrupt_fd(); }
    bool rx_interrupt_arm() noexcept override { return inner_.rx_interrupt_arm(); }
    void rx_interrupt_disarm() noexcept override { inner_.rx_interrupt_disarm(); }

  private:
    PortDriver& inner_;
    Clock& clock_;
    double gbps_ = 0;
    double bytes_per_ns_ = 0;
    double depth_ = 0;  ///< largest credit, bytes
    double credit_ = 0; ///< bytes that may leave now (may go below zero by one frame)
    std::uint64_t last_ns_ = 0;
    std::uint64_t throttled_ = 0;
};

} // namespace droce
