/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * The impairment stage: the sim fabric's link impairments (loss, bounded reorder, duplication,
 * corruption, RED / probabilistic ECN marking on a modelled egress queue, tail drop, packet
 * trimming, delay, link down), the same code as a fabric link's, as a PortDriver that wraps any
 * other PortDriver — a sim port, or a real DPDK EthPort on a host whose kernel has no
 * netem/red/fq_codel. Include as "sim/impair.h".
 *
 *     droce::dpdk::EthPort eth(...);
 *     droce::sim::ImpairConfig ic;
 *     if (std::string err = droce::sim::parse_impair_spec("loss=0.01,ecn=0.05,seed=7", ic);
 *         !err.empty()) { ... report err ... }
 *     droce::sim::ImpairedPort port(eth, &clock, ic);   // give `port` to the engine
 *
 * Side. By default (ImpairSide::tx) the stage impairs what the engine transmits: frames pass
 * through tx_burst(), and rx_burst() is forwarded untouched. With ImpairSide::rx it impairs what
 * the inner port receives and tx_burst() is forwarded untouched. Transmit is the default because
 * it models the egress queue of the link a frame leaves by (where a switch marks and drops) and
 * keeps received frames in the inner driver's hands until the engine asks for them. To impair
 * both directions, stack two stages (an ImpairedPort is a PortDriver).
 *
 * Order of decisions per frame, the same as on a fabric link: link down → dropped; loss draw →
 * dropped; trim draw (RoCEv2 frames long enough only; LinkConfig::trim); modelled queue full →
 * tail-dropped, or trimmed and let through with trim_when_full; ring full → tail-dropped; ECN
 * marking (RED on the modelled backlog, then the flat ecn_mark_probability; ECT frames only);
 * corruption; delay (due delay_ns after it entered the stage); reorder draw (held back);
 * duplication draw (a copy follows the original).
 *
 * The stage's ring. Every frame that survives goes into a fixed-capacity ring (ring_frames
 * entries, allocated at construction) and leaves it in order, once due, towards the sink — the
 * inner port's tx_burst() on the transmit side, the caller's array on the receive side. With
 * delay_ns > 0 the ring holds every frame for that long, so ring_frames must cover the frames sent
 * in delay_ns. A held-back frame stays in its place and is skipped; it is released once hold
 * (1..reorder_max_frames, uniform) later frames have left the ring after it, or reorder_max_ns
 * after it was due, whichever comes first, so that no frame is overtaken by more than
 * reorder_max_frames frames. On the transmit side the ring is also a short queue in front of the
 * inner port: frames the inner port does not take yet stay in the ring (in order) and are offered
 * again on the next call; when the ring is full tx_burst() takes fewer frames (backpressure), it
 * never drops them for that. On the receive side rx_burst() takes from the inner port only as many
 * frames as the ring has free entries; those that find it full after their predecessors' duplicates
 * are tail-dropped (dropped_queue_full).
 *
 * Polling. Frames held or delayed in the ring leave only from inside this stage's tx_burst(),
 * rx_burst() or poll(): the stage has no thread and no timer. The engine polls rx constantly, which
 * is enough; a user that only transmits must keep calling tx_burst() (possibly with n = 0) or
 * poll().
 *
 * Modelled egress queue. With bandwidth_gbps > 0 the stage keeps a virtual queue that drains at
 * that rate: each frame that passes the loss draw adds its length, the backlog a frame finds is
 * what RED marks on and what queue_bytes tail-drops on. Frames are NOT paced by it (the inner
 * port sends at its own speed), unlike on a fabric link; it is a phantom queue that marks and
 * drops as a bottleneck of that rate would. With bandwidth 0 (infinite) the backlog is always 0, so
 * RED never marks between kmin and kmax; use ecn_mark_probability for marking without a rate.
 *
 * Buffers and ownership (port/port.h holds exactly):
 *  - alloc_bulk() and free_bulk() are forwarded to the inner port.
 *  - tx_burst(bufs, n) returning r: the stage owns bufs[0..r) (it transmitted, holds or freed
 *    each through the inner port's free_bulk), the caller still owns bufs[r..n), untouched.
 *  - rx_burst(): the caller owns the returned frames and frees them with free_bulk() (of this
 *    stage or of the inner port: the same pool).
 *  - Dropped frames are freed through the inner port's free_bulk(). Duplicates are new buffers
 *    from the inner port's alloc_bulk(), copied; when it gives none (or the ring is full) the copy
 *    is not made and dropped_no_buffer counts it.
 *  - Frames in the ring are owned by the stage; the destructor frees them through the inner port.
 *    The inner port must outlive the stage.
 *
 * Determinism. One std::mt19937_64 seeded from ImpairConfig::seed makes every decision; the same
 * seed, configuration, clock readings and sequence of calls give the same outcome.
 *
 * Thread rules. Like any port: one thread (the engine thread) makes every call, including
 * set_config()/set_up(); the datapath functions (the PortDriver ones and poll()) do not allocate,
 * lock, block or throw.
 */
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "port/port.h"
#include "sim/fabric.h"

namespace droce::sim {

/** Which direction of the wrapped port a stage impairs. */
enum class ImpairSide : std::uint8_t { tx, rx };

/** "tx" or "rx". */
[[nodiscard]] std::string_view to_string(ImpairSide s) noexcept;

/** Largest ImpairConfig::ring_frames. */
inline constexpr std::uint32_t kMaxImpairRing = 1u << 16;

/**
 * What a stage does to frames: a fabric link's impairments (LinkConfig, with the same meaning and
 * clamping) plus what only a stage has.
 */
struct ImpairConfig {
    /**
     * The impairments, as on a fabric link: up (false also makes link_up() report false, and drops
     * every frame in the ring at the next call), loss, reorder (held in the stage's ring, see the
     * file comment), duplicate, corrupt, delay_ns (frames wait in the ring), the modelled egress
     * queue (bandwidth_gbps, queue_bytes: not paced, see the file comment), RED (ecn,
     * kmin_bytes, kmax_bytes, pmax) and trimming (trim, trim_when_full, trim_keep_bytes,
     * trim_dscp). PFC (pfc_xoff_bytes, pfc_xon_bytes) is the fabric's only: a stage pauses
     * nobody, and its pfc_pauses counter stays 0.
     */
    LinkConfig link;
    /** PRNG seed (applied at construction only). */
    std::uint64_t seed = 1;
    /** The direction impaired (construction only; see the file comment). */
    ImpairSide side = ImpairSide::tx;
    /** Probability that an ECT frame not marked by RED is marked CE anyway; needs no rate. */
    double ecn_mark_probability = 0.0;
    /** Entries of the stage's ring (rounded up to a power of two), 1..kMaxImpairRing
     *  (construction only). It bounds delayed plus held-back plus not-yet-sent frames. */
    std::uint32_t ring_frames = 1024;
    /** Which ports of a device get a stage, bit p for port p (0-based); all by default. Read by
     *  whoever wraps a device's ports (Runtime), not by the stage: one lossy plane of a
     *  multiplane device ("loss=0.02,ports=1") is how a bad cable is played. */
    std::uint32_t port_mask = ~0u;
};

/**
 * Parses an impairment spec: comma-separated key=value pairs, spaces around them ignored, an
 * empty spec is valid (all defaults). Keys (probabilities 0..1, integers decimal, no sign):
 *   loss, reorder, dup (or duplicate), corrupt, ecn (= ecn_mark_probability): probabilities;
 *   reorder_frames (0..65535), reorder_ns: reorder bound; delay (or delay_ns): ns;
 *   bw (or bandwidth_gbps): Gb/s >= 0; queue (or queue_bytes): bytes;
 *   red_kmin, red_kmax (bytes), red_pmax (probability): RED; giving any of them enables RED;
 *   trim (probability), trim_full (0|1|true|false: trim_when_full), trim_keep (bytes 0..65535:
 *   trim_keep_bytes, rounded and bounded where used), trim_dscp (0..63): packet trimming;
 *   seed; side (tx|rx); up (0|1|true|false); ring (1..65536);
 *   ports: the ports to impair, 0-based numbers 0..31 joined by '+' ("1", "0+2") or "all".
 * Each key may appear once. Keys absent from the spec keep the value @p out already has, so a
 * command-line spec can be layered over one from the config file; start from ImpairConfig{} for
 * the defaults.
 * @return empty on success; otherwise a message naming the offending key and/or value (quoted,
 *         truncated to 32 characters), and @p out is left unchanged.
 * Throws nothing but std::bad_alloc (the message is short and bounded whatever the input).
 * Thread safety: pure function.
 */
[[nodiscard]] std::string parse_impair_spec(std::string_view spec, ImpairConfig& out);

/**
 * The spec of @p c with every key written (probabilities in shortest round-trip form), which
 * parse_impair_spec() turns back into @p c when its values lie in the ranges the parser accepts
 * (the ones documented above). Throws nothing but std::bad_alloc.
 */
[[nodiscard]] std::string to_spec(const ImpairConfig& c);

class ImpairedPort final : public PortDriver {
  public:
    /**
     * Wraps @p inner. Allocates the ring; nothing is allocated afterwards.
     * @param inner the wrapped port; not owned, must outlive the stage.
     * @param clock time source for reorder release and the modelled queue; not owned, must
     *              outlive the stage; read with now_ns() only.
     * @throws std::invalid_argument on a null clock or ring_frames outside 1..kMaxImpairRing;
     *         std::bad_alloc.
     */
    ImpairedPort(PortDriver& inner, Clock* clock, const ImpairConfig& config);
    /** Frees every frame still in the ring through the inner port's free_bulk(). */
    ~ImpairedPort() override;
    ImpairedPort(const ImpairedPort&) = delete;
    ImpairedPort& operator=(const ImpairedPort&) = delete;

    /** Forwarded to the inner port. */
    std::uint16_t alloc_bulk(PktBuf** bufs, std::uint16_t n) noexcept override;
    /** Forwarded to the inner port. */
    void free_bulk(PktBuf** bufs, std::uint16_t n) noexcept override;
    /**
     * Transmit side: first sends what the ring may send, then impairs bufs[0..) in order into the
     * ring while it has room, sending as it goes. Returns how many frames the stage took (see
     * ownership); fewer than @p n only when the ring is full because the inner port takes nothing.
     * Receive side: forwarded to the inner port.
     */
    std::uint16_t tx_burst(PktBuf** bufs, std::uint16_t n) noexcept override;
    /**
     * Transmit side: sends what the ring may send, then forwards to the inner port.
     * Receive side: receives from the inner port (at most the ring's free entries), impairs the
     * frames into the ring and returns up to @p n from it, in ring order.
     */
    std::uint16_t rx_burst(PktBuf** bufs, std::uint16_t n) noexcept override;
    /** The inner port's. */
    [[nodiscard]] std::uint32_t max_frame() const noexcept override;
    /** ImpairConfig::link.up and the inner port's link_up(). */
    [[nodiscard]] bool link_up() const noexcept override;

    /**
     * Transmit side: sends what the ring may send now (released held frames, frames the inner
     * port refused before). Receive side: drops the ring's frames if the link is down, otherwise
     * nothing (received frames leave only through rx_burst()). Datapath-safe.
     */
    void poll() noexcept;

    /** Current configuration. */
    [[nodiscard]] const ImpairConfig& config() const noexcept;
    /**
     * Replaces the impairments for the frames that follow (seed, side and ring_frames keep their
     * construction values). Frames already held keep their release conditions.
     */
    void set_config(const ImpairConfig& config) noexcept;
    /** Sets ImpairConfig::link.up: pulling the cable (false) or plugging it back. */
    void set_up(bool up) noexcept;

    /** Counters, named as a fabric link's (LinkCounter): tx_frames = frames offered to the
     *  impaired direction, delivered = frames that left the stage (duplicates included). */
    [[nodiscard]] const LinkStats& stats() const noexcept;
    /** Frames in the ring (delayed, held back, or waiting for the inner port / the next
     *  rx_burst). */
    [[nodiscard]] std::uint32_t queued() const noexcept;
    /** Frames in the ring that are held back and not yet released. */
    [[nodiscard]] std::uint32_t held() const noexcept;
    /**
     * Earliest ns at which a frame in the ring leaves by time: a held frame's release (possibly
     * past, when released and not yet sent) or a delayed frame's delivery; 0 if none waits for
     * time. How far a test on a virtual clock jumps.
     */
    [[nodiscard]] std::uint64_t next_release_ns() const noexcept;
    /** The wrapped port. */
    [[nodiscard]] PortDriver& inner() noexcept { return *inner_; }

    /** Implementation detail (impair.cc); not part of the API. */
    struct Impl;

  private:
    PortDriver* inner_;
    std::unique_ptr<Impl> impl_;
};

} // namespace droce::sim
