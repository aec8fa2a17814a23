/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * The port driver interface: how the engine gets frame buffers, transmits and receives on one port
 * (one plane). drivers/sim implements it in process; drivers/dpdk will implement it over an ethdev,
 * with PktBuf living in the mbuf's private area.
 *
 * Calls are per burst (CONVENTIONS.md rule 13). Ownership (rule 14):
 *  - alloc_bulk(): the caller owns the returned buffers until it transmits or frees them.
 *  - tx_burst(bufs, n) returning r: the driver owns bufs[0..r), the caller still owns bufs[r..n).
 *  - rx_burst(): the caller owns the returned buffers and must give each back with free_bulk().
 * Thread rules: one engine thread calls a port's functions; none of them block, allocate or throw.
 */
#pragma once

#include <cstdint>
#include <span>

namespace droce {

/** One frame buffer. data[0..len) is the frame from the destination MAC; capacity bytes are usable. */
struct PktBuf {
    std::uint8_t* data = nullptr;
    std::uint32_t len = 0;
    std::uint32_t capacity = 0;
    std::uint8_t port = 0;   ///< 0-based port index the frame arrived on / leaves by
    bool ecn_ce = false;     ///< set by the sim fabric's marker; real ports read it from the IP header
    void* driver = nullptr;  ///< the driver's own handle (an rte_mbuf, a sim pool slot)

    [[nodiscard]] std::span<std::uint8_t> room() noexcept { return {data, capacity}; }
    [[nodiscard]] std::span<const std::uint8_t> frame() const noexcept { return {data, len}; }
};

class PortDriver {
public:
    virtual ~PortDriver() = default;
    /** Fills @p bufs with up to @p n empty buffers of capacity >= max_frame(); returns how many. */
    virtual std::uint16_t alloc_bulk(PktBuf** bufs, std::uint16_t n) noexcept = 0;
    /** Gives buffers back without sending them. */
    virtual void free_bulk(PktBuf** bufs, std::uint16_t n) noexcept = 0;
    /** Queues frames for transmission; returns how many the driver took (see ownership above). */
    virtual std::uint16_t tx_burst(PktBuf** bufs, std::uint16_t n) noexcept = 0;
    /** Receives up to @p n frames. */
    virtual std::uint16_t rx_burst(PktBuf** bufs, std::uint16_t n) noexcept = 0;
    /** Largest frame in bytes (Ethernet header to ICRC) the port carries. */
    [[nodiscard]] virtual std::uint32_t max_frame() const noexcept = 0;
    /** True while the link is up. */
    [[nodiscard]] virtual bool link_up() const noexcept = 0;
};

} // namespace droce
