/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * The sim fabric: an in-process network that joins droce engines through N ports (planes), for
 * deterministic tests and benches. Include as "sim/fabric.h".
 *
 * Topology. E endpoints, P planes (1..4). Endpoint e has one port per plane, each a PortDriver
 * (port/port.h) with MAC 02:00:00:00:<e>:<p>. On every plane each ordered pair of endpoints
 * (from, to) — and each endpoint with itself, for loopback — is joined by one directed link; so the
 * plane is a full mesh of point-to-point links (or, with FabricConfig::shared_egress, a switch
 * whose egress queue toward each port is shared by all senders). A frame sent on port (e, p) goes
 * to the endpoint whose port on plane p owns the destination MAC (its own MAC: back to itself); a
 * broadcast or multicast destination (group bit set) is copied to every other endpoint on that
 * plane; any other destination is dropped (PortCounter::tx_no_route).
 *
 * Links. Each directed link has a LinkConfig (loss, reorder, duplication, corruption, up/down,
 * bandwidth, propagation delay, a finite egress queue with tail drop, RED/ECN marking, packet
 * trimming, PFC pausing of the sender) that can be changed at run time, and LinkCounters. A frame
 * crosses its link in this order: down → dropped; loss draw → dropped; trim draw (RoCEv2 frames
 * long enough only); queue full → tail-dropped (or, with trim_when_full, trimmed and let through);
 * RED mark (ECT frames only); corruption; timing (queue drain at the link bandwidth, then the
 * propagation delay); reorder draw; duplication draw.
 *
 * Time. The fabric reads the Clock given at construction (a virtual clock in tests). A frame is
 * receivable by rx_burst() once clock.now_ns() >= its delivery time; with bandwidth 0 and delay 0
 * that is at once. next_event_ns() tells a test driving a virtual clock how far to jump.
 *
 * Determinism. One PRNG (std::mt19937_64) seeded from FabricConfig::seed drives every random
 * decision; the same seed, configuration and sequence of calls give the same outcome.
 *
 * Buffers. One pool of FabricConfig::pool_buffers buffers of buffer_capacity bytes is allocated at
 * construction and shared by all ports; nothing is allocated after that. Ownership follows
 * port/port.h: alloc_bulk() and rx_burst() hand buffers to the caller, tx_burst() and free_bulk()
 * take them back. Frames in flight hold their buffer (a pool of B buffers therefore bounds what can
 * be in flight). Broadcast copies and duplicates take extra buffers from the pool; when it is empty
 * the copy is not made (LinkCounter::dropped_no_buffer). Every buffer must be freed before the
 * Fabric is destroyed; the memory goes away with it.
 *
 * Port functions, beyond port/port.h:
 *  - alloc_bulk(bufs, n): up to n buffers with len 0, capacity buffer_capacity; fewer (possibly 0)
 *    when the pool runs dry (PortCounter::alloc_failed counts the shortfall).
 *  - tx_burst(bufs, n): returns n, i.e. takes every buffer, unless PFC pauses the port
 *    (LinkConfig::pfc_xoff_bytes): then it returns how many it took before the pause (0 while the
 *    port stays paused) and the caller keeps the rest. A frame that cannot travel (no route, link
 *    down, lost, queue full, invalid) is dropped, counted and its buffer returned to the pool; it
 *    is never handed back to the caller. Buffers not from this fabric's pool are counted
 *    (tx_invalid) and left alone.
 *  - rx_burst(bufs, n): up to n frames receivable now, merged over the incoming links by delivery
 *    time; PktBuf::port is set to the plane, PktBuf::ecn_ce tells whether the IP ECN field is CE.
 *  - free_bulk(bufs, n): back to the pool; foreign or already free buffers are counted and ignored.
 *  - max_frame(): buffer_capacity. link_up(): true while at least one link from this port to
 *    another endpoint is up (see set_link_up/set_port_up).
 *
 * Thread rules. Not thread safe: one thread (the test, or the one engine thread that drives all
 * endpoints) makes every call on the fabric and on all of its ports. No port function allocates,
 * locks, blocks or throws.
 */
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "common/clock.h"
#include "port/port.h"
#include "wire/eth.h"

namespace droce::sim {

/** Upper bound of FabricConfig::planes. */
inline constexpr std::uint32_t kMaxPlanes = 4;
/** Upper bound of FabricConfig::endpoints (the endpoint number is one byte of the MAC). */
inline constexpr std::uint32_t kMaxEndpoints = 255;

/**
 * Behaviour of one directed link (from endpoint, to endpoint, plane). Probabilities are in 0..1
 * (values outside are clamped: <= 0 never, >= 1 always) and are drawn independently per frame.
 */
struct LinkConfig {
    /**
     * False: every frame sent on the link, and every frame still in flight on it when it would be
     * delivered, is dropped (dropped_down).
     */
    bool up = true;
    /** Probability that a frame is lost (dropped_loss). */
    double loss = 0.0;
    /**
     * Probability that a frame is held back (reordered): it is released after 1..reorder_max_frames
     * (uniform) later frames on the same link have been delivered, or reorder_max_ns after its
     * normal delivery time, whichever comes first. No frame is overtaken by more than
     * reorder_max_frames frames of its link. reorder_max_frames 0 disables reordering.
     */
    double reorder = 0.0;
    std::uint16_t reorder_max_frames = 3;
    /** ns; the longest extra delay of a held-back frame. */
    std::uint64_t reorder_max_ns = 20'000;
    /** Probability that a frame is delivered twice (duplicated); the copy follows the original. */
    double duplicate = 0.0;
    /**
     * Probability that one random bit of the frame is flipped (corrupted). The bit lies after the
     * Ethernet header (and 802.1Q tag) and, in a RoCEv2 frame, outside the fields the ICRC masks,
     * so that the receiver's ICRC (or an earlier header check) rejects the frame.
     */
    double corrupt = 0.0;
    /** Gb/s (10^9 bits per second); 0 = infinite (no serialisation time, no queue ever builds). */
    double bandwidth_gbps = 0.0;
    /** ns of propagation delay added after serialisation. */
    std::uint64_t delay_ns = 0;
    /**
     * Bytes of egress queue. A frame that finds backlog + its length > queue_bytes is tail-dropped
     * (dropped_queue_full). 0 = unlimited. The backlog is the bytes sent on the link and not yet
     * serialised at the link bandwidth, so it is always 0 with infinite bandwidth.
     */
    std::uint64_t queue_bytes = 0;
    /**
     * RED ECN marking, decided on the backlog a frame finds on arrival: none below kmin_bytes, a
     * probability rising linearly from 0 at kmin_bytes to pmax at kmax_bytes, every frame at or
     * above kmax_bytes (so kmin = kmax = 0 marks everything). Only ECT(0)/ECT(1) frames are marked:
     * their IPv4 TOS / IPv6 traffic class ECN bits become CE (11), the IPv4 header checksum is
     * recomputed (the ICRC masks those bits, so it stays valid) and PktBuf::ecn_ce is set. Not-ECT
     * and already-CE frames pass unchanged.
     */
    bool ecn = false;
    std::uint64_t kmin_bytes = 0;
    std::uint64_t kmax_bytes = 0;
    double pmax = 0.0;
    /**
     * Packet trimming, as a congested switch of an MRC / UET fabric does it: instead of dropping a
     * frame it cuts the payload off and forwards the headers, so that the receiver learns at once
     * which packet was lost. A trimmed frame keeps its Ethernet [802.1Q] / IP / UDP headers and the
     * first trim_keep_bytes bytes of the UDP payload (the BTH and what follows it), then gets a
     * freshly computed ICRC; the BTH pad count becomes 0, the IPv4 total length and header
     * checksum, or the IPv6 payload length, and the UDP length are rewritten, the UDP checksum is 0
     * on IPv4 and recomputed on IPv6, and the DSCP becomes trim_dscp (the ECN bits are kept). It is
     * counted in `trimmed` and delivered like any other frame (never counted as dropped).
     *
     * Only RoCEv2 frames (IPv4 or IPv6, UDP destination port 4791, with or without an 802.1Q tag)
     * whose UDP payload minus the 4-byte ICRC is longer than trim_keep_bytes (as rounded below)
     * are trimmed; any other frame takes the normal path. The result passes wire::parse_frame()
     * when the kept bytes hold the BTH and all of the opcode's extension headers (the payload is
     * merely shorter); when trim_keep_bytes cuts into the extension headers, parse_frame() rejects
     * it as length_mismatch. The ICRC is computed afresh over the trimmed frame, not checked first.
     *
     * trim: probability that a frame is trimmed; drawn after the loss draw, before the queue-full
     * check (which then sees the trimmed length). A frame drawn that cannot be trimmed is not.
     */
    double trim = 0.0;
    /**
     * True: a frame that would be tail-dropped because the egress queue is full (queue_bytes) is
     * trimmed instead and bypasses the queue limit (its trimmed length is still added to the
     * backlog); so does a frame the trim draw trimmed. A frame that cannot be trimmed is
     * tail-dropped as before, and so is every frame when the link's ring is full.
     */
    bool trim_when_full = false;
    /**
     * Bytes of the UDP payload, from the BTH on, that a trimmed frame keeps (its ICRC not
     * included): rounded down to a multiple of 4, at least 12 (the BTH).
     */
    std::uint16_t trim_keep_bytes = 64;
    /** DSCP (0..63; higher bits ignored) of a trimmed frame. */
    std::uint8_t trim_dscp = 9;
    /**
     * Priority flow control (IEEE 802.1Qbb), which keeps a RoCE fabric lossless: bytes of egress
     * backlog above which the switch pauses the port a frame came from. When a frame sent on port
     * (from, plane) leaves the backlog of the queue it joined above pfc_xoff_bytes (after it was
     * queued: the switch's headroom takes it), that port is paused: its tx_burst() takes no frame
     * (the NIC's transmit queue is full; the frames stay with the caller, as a paused ConnectX's
     * stay in its send queue) until that queue has drained to pfc_xon_bytes. The pause stops every
     * flow of the port, also those to other, uncongested ports: PFC's head-of-line blocking. It
     * acts at once (no pause frame's flight time, so the overshoot is at most one frame per
     * sender: size queue_bytes above xoff by the senders' MTUs for zero drops), pauses unicast
     * traffic only, and a paused port still receives. 0 = no PFC. pfc_xon_bytes <= pfc_xoff_bytes.
     */
    std::uint64_t pfc_xoff_bytes = 0;
    std::uint64_t pfc_xon_bytes = 0;
};

// clang-format off
/** X(name) of the counters of one directed link. */
#define DROCE_SIM_LINK_COUNTERS(X) \
    X(tx_frames)          /* frames offered to the link (broadcast copies included) */ \
    X(delivered)          /* frames handed to the receiver by rx_burst (duplicates included) */ \
    X(dropped_loss)       /* lost by the loss draw */ \
    X(dropped_down)       /* sent on, or in flight on, a link that is down */ \
    X(dropped_queue_full) /* tail drop: egress queue or the link's in-flight ring full */ \
    X(dropped_no_buffer)  /* a broadcast copy or duplicate not made: pool empty (or ring full) */ \
    X(duplicated)         /* extra copies delivered */ \
    X(reordered)          /* frames held back */ \
    X(corrupted)          /* frames with one bit flipped */ \
    X(ecn_marked)         /* ECT frames marked CE by RED */ \
    X(trimmed)            /* frames let on the link trimmed: by the trim draw or when full */ \
    X(pfc_pauses)         /* times a frame of this link left its queue above pfc_xoff_bytes */
/** X(name) of the counters of one port. */
#define DROCE_SIM_PORT_COUNTERS(X) \
    X(tx_frames)      /* frames taken by tx_burst */ \
    X(rx_frames)      /* frames returned by rx_burst */ \
    X(tx_no_route)    /* unicast destination MAC owned by no port of the plane */ \
    X(tx_invalid)     /* not a buffer of this fabric's pool, or length < 14 or > max_frame() */ \
    X(alloc_failed)   /* buffers asked of alloc_bulk that the empty pool could not give */ \
    X(free_invalid)   /* free_bulk of a foreign or already free buffer (ignored) */ \
    X(tx_paused)      /* tx_burst calls that took nothing: the port was paused by PFC */ \
    X(pfc_paused_ns)  /* ns the port spent paused by PFC (counted when the pause ends) */
// clang-format on

enum class LinkCounter : std::uint8_t {
#define DROCE_SIM_ENUM(name) name,
    DROCE_SIM_LINK_COUNTERS(DROCE_SIM_ENUM)
#undef DROCE_SIM_ENUM
        count_
};
enum class PortCounter : std::uint8_t {
#define DROCE_SIM_ENUM(name) name,
    DROCE_SIM_PORT_COUNTERS(DROCE_SIM_ENUM)
#undef DROCE_SIM_ENUM
        count_
};
inline constexpr std::size_t kNumLinkCounters = static_cast<std::size_t>(LinkCounter::count_);
inline constexpr std::size_t kNumPortCounters = static_cast<std::size_t>(PortCounter::count_);

/** Counter name, e.g. "ecn_marked". */
[[nodiscard]] std::string_view to_string(LinkCounter c) noexcept;
[[nodiscard]] std::string_view to_string(PortCounter c) noexcept;

/** Counters indexed by enum; plain values, copied out by Fabric::link_stats()/port_stats(). */
template <typename E, std::size_t N>
struct CounterSet {
    std::array<std::uint64_t, N> v{};
    void inc(E c, std::uint64_t n = 1) noexcept { v[static_cast<std::size_t>(c)] += n; }
    [[nodiscard]] std::uint64_t operator[](E c) const noexcept {
        return v[static_cast<std::size_t>(c)];
    }
};
using LinkStats = CounterSet<LinkCounter, kNumLinkCounters>;
using PortStats = CounterSet<PortCounter, kNumPortCounters>;

struct FabricConfig {
    /** PRNG seed; same seed → same losses, reorders, marks and corrupted bits. */
    std::uint64_t seed = 1;
    /** Endpoints, 2..kMaxEndpoints. */
    std::uint32_t endpoints = 2;
    /** Ports per endpoint, 1..kMaxPlanes. */
    std::uint32_t planes = 1;
    /** Buffers in the shared pool (>= 1). */
    std::uint32_t pool_buffers = 1024;
    /** Bytes per buffer (>= 64); also max_frame() of every port. */
    std::uint32_t buffer_capacity = 9216;
    /**
     * Frames a link can hold in flight (rounded up to a power of two); beyond it frames are
     * tail-dropped as dropped_queue_full.
     */
    std::uint32_t link_slots = 1024;
    /**
     * False (default): every directed link has its own egress queue. True: the links into one port
     * (to, plane) share one queue, as the egress of a switch toward that port does, so that two
     * senders into one receiver congest it (incast). Each frame still uses the bandwidth, queue
     * limit and RED settings of the link it came by; give the links into a port equal settings.
     */
    bool shared_egress = false;
    /** Initial configuration of every link. */
    LinkConfig link{};
};

class Fabric {
  public:
    /**
     * Builds the fabric and allocates all of its memory (pool, link rings).
     * @param clock time source; not owned, must outlive the fabric. Read with now_ns() only.
     * @throws std::invalid_argument on a null clock or a config outside the ranges above;
     *         std::bad_alloc when memory runs out.
     */
    Fabric(Clock* clock, const FabricConfig& config);
    /** Shorthand: FabricConfig defaults with @p seed, @p endpoints (2..255), @p planes (1..4). */
    Fabric(Clock* clock, std::uint64_t seed, std::uint32_t endpoints, std::uint32_t planes);
    /** Releases all memory. Buffers still held by callers become invalid. */
    ~Fabric();
    Fabric(const Fabric&) = delete;
    Fabric& operator=(const Fabric&) = delete;

    /** Endpoints and planes as configured. */
    [[nodiscard]] std::uint32_t endpoints() const noexcept;
    [[nodiscard]] std::uint32_t planes() const noexcept;

    /**
     * The port of @p endpoint (0..endpoints()-1) on @p plane (0..planes()-1). The reference stays
     * valid for the life of the fabric. Out-of-range arguments are clamped to the last
     * endpoint/plane.
     */
    [[nodiscard]] PortDriver& port(std::uint32_t endpoint, std::uint32_t plane) noexcept;

    /** MAC address 02:00:00:00:<endpoint>:<plane> of a port. */
    [[nodiscard]] static wire::MacAddr mac(std::uint32_t endpoint, std::uint32_t plane) noexcept;

    /** Current configuration of the directed link @p from → @p to on @p plane. */
    [[nodiscard]] const LinkConfig& link_config(std::uint32_t from, std::uint32_t to,
                                                std::uint32_t plane) const noexcept;
    /**
     * Replaces the configuration of one directed link; takes effect for the next frame sent (and,
     * for `up`, for frames in flight). Bandwidth changes apply to frames sent from now on.
     */
    void set_link_config(std::uint32_t from, std::uint32_t to, std::uint32_t plane,
                         const LinkConfig& config) noexcept;
    /** Sets the configuration of every link (all pairs, loopback included, all planes). */
    void set_all_links(const LinkConfig& config) noexcept;
    /** Sets `up` of one directed link. */
    void set_link_up(std::uint32_t from, std::uint32_t to, std::uint32_t plane, bool up) noexcept;
    /**
     * Sets `up` of both directions of every link of port (@p endpoint, @p plane): pulling its
     * cable.
     */
    void set_port_up(std::uint32_t endpoint, std::uint32_t plane, bool up) noexcept;

    /** Counters of one directed link. */
    [[nodiscard]] const LinkStats& link_stats(std::uint32_t from, std::uint32_t to,
                                              std::uint32_t plane) const noexcept;
    /**
     * Bytes queued on the egress of directed link (@p from, @p to, @p plane) and not yet
     * serialised, now: with shared_egress, the queue of port (@p to, @p plane) that every link into
     * it shares (what RED marks on). 0 with infinite bandwidth.
     */
    [[nodiscard]] std::uint64_t egress_backlog_bytes(std::uint32_t from, std::uint32_t to,
                                                     std::uint32_t plane) const noexcept;
    /** Counters of one port. */
    [[nodiscard]] const PortStats& port_stats(std::uint32_t endpoint,
                                              std::uint32_t plane) const noexcept;

    /**
     * Earliest time in ns at which something in flight becomes receivable (a delivery time, or the
     * release time of a held-back frame), possibly already past, or, if sooner, the future time at
     * which a port paused by PFC may send again; 0 when there is neither.
     */
    [[nodiscard]] std::uint64_t next_event_ns() const noexcept;
    /** Frames in flight on all links. */
    [[nodiscard]] std::uint32_t in_flight() const noexcept;
    /** Buffers free in the pool. */
    [[nodiscard]] std::uint32_t pool_free() const noexcept;

    /** Implementation detail (the ports in fabric.cc reach it); not part of the API. */
    struct Impl;

  private:
    std::unique_ptr<Impl> impl_;
};

} // namespace droce::sim
