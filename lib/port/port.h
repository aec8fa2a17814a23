/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * The port driver interface: how the engine gets frame buffers, transmits and receives on one port
 * (one plane). drivers/sim implements it in process; drivers/dpdk will implement it over an ethdev,
 * with PktBuf living in the mbuf's private area.
 *
 * Calls are per burst. Ownership (rule 14):
 *  - alloc_bulk(): the caller owns the returned buffers until it transmits or frees them.
 *  - tx_burst(bufs, n) returning r: the driver owns bufs[0..r), the caller still owns bufs[r..n).
 *  - rx_burst(): the caller owns the returned buffers and must give each back with free_bulk().
 * Thread rules: one engine thread calls a port's functions; none of them block, allocate or throw.
 *
 * Transmit by reference (zero-copy): a driver whose tx_by_reference() is true can send a frame
 * whose headers are in a PktBuf and whose payload stays where it is (registered memory), with
 * attach_payload(). Such a frame's payload memory belongs to the driver — and to whatever the
 * driver hands it to (a PMD's tx ring, a net_ring peer, a memif peer) — until each segment
 * referencing it is released; the driver reports every release on the TxRef given with the payload.
 * The engine lets the application reuse that memory (a send CQE) only once the TxRef reads
 * released().
 */
#pragma once

#include <atomic>
#include <cstdint>
#include <span>

namespace droce {

/** One frame buffer. data[0..len) is the frame from the destination MAC; capacity bytes are usable.
 */
struct PktBuf {
    std::uint8_t* data = nullptr;
    std::uint32_t len = 0;
    std::uint32_t capacity = 0;
    std::uint8_t port = 0; ///< 0-based port index the frame arrived on / leaves by
    bool ecn_ce = false; ///< set by the sim fabric's marker; real ports read it from the IP header
    void* driver = nullptr; ///< the driver's own handle (an rte_mbuf, a sim pool slot)
    /** Bytes of the frame in segments after data[0..len) (payload by reference and trailer, see
     *  PortDriver::attach_payload); 0 for a frame that is all in data. Set by the driver. */
    std::uint32_t ext_len = 0;

    [[nodiscard]] std::span<std::uint8_t> room() noexcept { return {data, capacity}; }
    [[nodiscard]] std::span<const std::uint8_t> frame() const noexcept { return {data, len}; }
};

/**
 * Release tracking of payload sent by reference: one per send WQE slot, preallocated with the QP
 * (never on the datapath).
 *
 * Two free-running counts: attached, the payload segments a driver took by reference, written by
 * the engine thread only (in attach_payload, before the frame is transmitted: the tx handoff orders
 * it before any release); and detached, counted up with release order by whichever thread frees a
 * segment (a PMD's tx completion, a net_ring peer's engine thread, DPDK's free callback). The
 * segments still held are attached - detached (mod 2^32). The engine's side is a load and a store,
 * not a locked add: a locked instruction waits for every store before it, and after a frame's
 * headers are written into a buffer the peer's core has just read, that wait was 18 % of a memif
 * zero-copy sender's core (perf, 64 KiB WRITEs). released() reads detached with acquire, so the
 * engine sees every access the driver and its peers made to the memory as done before it completes
 * the WQE. The counts outlive the segments: a QP destroyed with segments still held hands its
 * TxRefs to the device, which keeps them (see Device::~Device).
 */
struct TxRef {
    std::atomic<std::uint32_t> attached{0}; ///< written by the engine thread only
    std::atomic<std::uint32_t> detached{0}; ///< any thread, through detach()

    /** @p n more segments lent to a driver (the engine thread, in attach_payload). */
    void attach(std::uint32_t n) noexcept {
        attached.store(attached.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
    }
    /** One segment given back (any thread; release: its reads of the payload come before). */
    void detach() noexcept { detached.fetch_add(1, std::memory_order_release); }
    /** Segments still held. The engine thread; or a thread the last attach() is ordered before
     *  (the control path inside a ControlSection, ~Device after the engine stopped). */
    [[nodiscard]] std::uint32_t held() const noexcept {
        return attached.load(std::memory_order_relaxed) - detached.load(std::memory_order_acquire);
    }
    [[nodiscard]] bool released() const noexcept { return held() == 0; }
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

    // ---- transmit by reference (optional; the defaults copy) ----
    /**
     * True when attach_payload() can work on this port (the PMD sends multi-segment frames). Fixed
     * once the port is set up: the engine asks once, at device creation, and picks copy or
     * by-reference transmit per port then.
     */
    [[nodiscard]] virtual bool tx_by_reference() const noexcept { return false; }
    /**
     * True when attach_payload() can reach every span of @p payload (memory the PMD may send
     * from); the check alone, nothing attached. The engine asks before it sums a frame's ICRC over
     * headers and payload for a split frame, so that a payload attach_payload would refuse
     * (perftest's malloc'd buffers on memif zero-copy) is not summed twice: once for the split
     * frame, then again for the copy. A driver may count the refusal. Engine thread.
     * Default: tx_by_reference().
     */
    [[nodiscard]] virtual bool
    payload_reachable(std::span<const std::span<const std::uint8_t>> /*payload*/) noexcept {
        return tx_by_reference();
    }
    /**
     * Makes @p buf (headers in data[0..len), from alloc_bulk) a multi-segment frame: headers, then
     * the bytes of @p payload by reference (not copied), then @p trailer (pad and ICRC, at most 8
     * bytes, copied). For each segment that references @p payload, ref->attach() counts it; the
     * driver calls ref->detach() when that segment is released. The payload memory must stay valid
     * and unchanged until ref->released().
     * @return true when attached (buf is then transmitted with tx_burst as any other buffer;
     * freeing it with free_bulk releases the segments too); false when this frame cannot go by
     * reference (no segment buffer free, memory the PMD cannot reach): buf is unchanged, ref
     * untouched, and the caller copies instead.
     */
    virtual bool attach_payload(PktBuf* /*buf*/,
                                std::span<const std::span<const std::uint8_t>> /*payload*/,
                                std::span<const std::uint8_t> /*trailer*/,
                                TxRef* /*ref*/) noexcept {
        return false;
    }
    /**
     * Asks the driver to release transmitted buffers it still holds (PMDs free sent mbufs lazily,
     * on a later tx burst). The engine calls it when a completion waits for a release and it has
     * nothing to transmit. Default: nothing to do.
     */
    virtual void tx_reclaim() noexcept {}
    /**
     * True when another core reads this port's transmit buffers (net_memif's client in zero-copy
     * mode: the memif server's core copies each frame out of them). The engine then writes short
     * copied frames with streaming stores, so that a buffer's next frame does not wait for the
     * lines the peer's core took. Fixed once the port is set up. Default: false.
     */
    [[nodiscard]] virtual bool tx_read_by_peer() const noexcept { return false; }

    // ---- receive interrupt (optional; the default: none, the engine's nap is bounded instead)
    // ----
    /**
     * A file descriptor that becomes readable (POLLIN) when a frame may have arrived while the
     * interrupt is armed, or -1 when the port has none. Fixed once the port is set up: the engine
     * asks once, at device creation, and polls it beside its doorbell while it naps. The driver
     * owns it (the engine never reads or closes it).
     */
    [[nodiscard]] virtual int rx_interrupt_fd() const noexcept { return -1; }
    /**
     * Called by the polling thread just before it naps: from now on, a frame arriving makes
     * rx_interrupt_fd() readable. @return false when frames already wait (the caller then polls
     * instead of napping). Either way rx_interrupt_disarm() follows. Never blocks.
     */
    virtual bool rx_interrupt_arm() noexcept { return true; }
    /**
     * Called by the polling thread after the nap: stops the signalling (a busy port does not pay
     * for it) and drains rx_interrupt_fd(). Never blocks.
     */
    virtual void rx_interrupt_disarm() noexcept {}
};

} // namespace droce
