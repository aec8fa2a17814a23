/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * Live capture: every frame one or more devices send or receive, written to a pcapng file
 * (capture/pcapng.h) by a writer thread, so that a slow disk never stalls an engine.
 *
 *     engine thread (Device capture seam) --copy, up to the snap length--> per-device SPSC ring of
 *     preallocated slots --writer thread--> PcapngWriter --> file
 *
 * The engine side (on_frame) copies the frame into the next free slot and publishes it; when no
 * slot is free the frame is left out of the file and counted (capture_dropped). It never blocks,
 * allocates, locks or throws. The writer thread merges the devices' rings in timestamp order,
 * writes an Enhanced Packet Block per frame, flushes when idle, and at stop writes one Interface
 * Statistics Block per interface (frames seen, frames dropped) and closes the file.
 *
 * Interfaces: one pcapng interface per device port, in the order of the devices given and their
 * ports: if_name "<device>/port<N>" (N = the verbs port number, index + 1, as the counter scopes
 * "port<N>/..."), if_description "droce <device> port <N> (plane <index>) <ip> <mac>", if_MACaddr
 * the port's MAC, Ethernet link type, ns timestamps. The ports need not be ethdevs (sim fabric,
 * impairment stage, shaper: the interface is the device port, whatever drives it). Direction in
 * epb_flags (inbound / outbound); a frame through a device's loopback queue (one of its QPs to
 * another) is written twice, outbound when built and inbound when received, on the port its QP
 * uses, each with the comment "loopback" (it never reaches that port's wire).
 *
 * Timestamps: the device clock (Device::clock(), TSC or a test's virtual clock) shifted to the Unix
 * epoch once, when the capture starts.
 *
 * Counters: per device a block "capture" in the device's counter registry: capture_frames (frames
 * put in the ring), capture_dropped (frames that found the ring full), capture_truncated (frames
 * longer than the snap length, cut). Written by the engine thread; listed while the capture runs.
 *
 * Ownership: the Capture owns the rings (allocated at create), the writer thread and the file.
 * The devices must outlive it (or outlive stop()). Thread rules: create, stop, stats are control
 * path, from one thread; on_frame runs on each device's engine thread (or a control call's thread
 * inside that device's ControlSection, which orders it with the engine's use).
 */
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "capture/pcapng.h"
#include "common/counters.h"
#include "common/spsc_ring.h"
#include "engine/device.h"

namespace droce::capture {

// clang-format off
#define DROCE_CAPTURE_COUNTERS(X) \
    X(capture_frames)     /* frames copied into the capture ring (they reach the file) */ \
    X(capture_dropped)    /* frames left out of the capture: the ring was full (the writer behind) */ \
    X(capture_truncated)  /* frames longer than the snap length, cut to it */
// clang-format on
enum class CaptureCounter : std::uint16_t {
#define DROCE_CAPTURE_COUNTER_ENUM(name) name,
    DROCE_CAPTURE_COUNTERS(DROCE_CAPTURE_COUNTER_ENUM)
#undef DROCE_CAPTURE_COUNTER_ENUM
        count_
};
inline constexpr std::size_t kNumCaptureCounters = static_cast<std::size_t>(CaptureCounter::count_);
inline constexpr std::string_view kCaptureCounterNames[kNumCaptureCounters] = {
#define DROCE_CAPTURE_COUNTER_NAME(name) #name,
    DROCE_CAPTURE_COUNTERS(DROCE_CAPTURE_COUNTER_NAME)
#undef DROCE_CAPTURE_COUNTER_NAME
};
using CaptureCounters = CounterBlock<CaptureCounter, kNumCaptureCounters>;

/** How a capture copies and buffers frames. */
struct CaptureOptions {
    /** Bytes kept of each frame, from the Ethernet header (64..65535); 0 = whole frames. Slots are
     *  min(snaplen, the largest frame any port carries) bytes each. */
    std::uint32_t snaplen = 0;
    /** Slots in each device's ring (rounded up to a power of two, 1..65536): how many frames may
     *  wait for the writer before frames are dropped from the capture. */
    std::uint32_t ring_slots = 4096;
    /** opt_comment of the section header, empty = none. */
    std::string comment;
};

/** What a capture did. */
struct CaptureStats {
    std::uint64_t frames = 0;    ///< frames put in the rings (each is in the file unless error)
    std::uint64_t dropped = 0;   ///< frames left out: a ring was full
    std::uint64_t truncated = 0; ///< frames cut to the snap length
    std::uint64_t bytes = 0;     ///< bytes written to the file so far
    int error = 0;               ///< errno of the first failed write (the file is incomplete), or 0
};

class Capture {
  public:
    /** Smallest and largest snap length accepted (bytes). */
    static constexpr std::uint32_t kMinSnaplen = 64;
    static constexpr std::uint32_t kMaxSnaplen = 65535;
    static constexpr std::uint32_t kMaxRingSlots = 65536;

    /**
     * Opens @p path (created or truncated), writes the section header and one interface per port
     * of each device of @p devices (in that order), starts the writer thread and sets each
     * device's capture hook (Device::set_capture: waits for the engine to be between passes).
     * Allocates the rings: ring_slots × (slot size + 32) bytes per device.
     * Control path; no device may have another capture hook set.
     * @param err on failure, one line: "capture FILE: reason".
     * @return the running capture, or nullptr with *err set: the file cannot be created or
     *  written (the errno's text), snaplen or ring_slots out of range, no device, a device with a
     *  hook already, or the thread cannot start.
     */
    [[nodiscard]] static std::unique_ptr<Capture> start(const std::string& path,
                                                        std::span<Device* const> devices,
                                                        const CaptureOptions& opts,
                                                        std::string* err);
    /** stop(). */
    ~Capture();
    Capture(const Capture&) = delete;
    Capture& operator=(const Capture&) = delete;

    /**
     * Clears the devices' hooks (after which no engine touches the rings), lets the writer write
     * every frame still in the rings, writes the statistics blocks, closes the file and unlists
     * the "capture" counter blocks. Control path; idempotent: later calls return the same figures.
     */
    CaptureStats stop() noexcept;
    /** Figures so far (counters read with relaxed loads). Any thread. */
    [[nodiscard]] CaptureStats stats() const noexcept;
    [[nodiscard]] const std::string& path() const noexcept { return path_; }
    /** The devices captured, in interface order. */
    [[nodiscard]] std::vector<const Device*> devices() const {
        std::vector<const Device*> v;
        for (const auto& s : sources_)
            v.push_back(s->dev);
        return v;
    }
    /** Bytes kept per frame (the effective snap length: the slot size). */
    [[nodiscard]] std::uint32_t snaplen() const noexcept { return slot_bytes_; }

    /** The hook the devices call (Device::CaptureHook::fn), @p ctx a Source. Engine thread. */
    static void on_frame(void* ctx, const Device::CaptureFrame& f) noexcept;

  private:
    /** One frame waiting for the writer. data points into the ring's arena (slot_bytes long). */
    struct Slot {
        std::uint64_t ts_ns = 0;
        std::uint32_t orig_len = 0;
        std::uint32_t cap_len = 0;
        std::uint8_t* data = nullptr;
        std::uint8_t port = 0;
        Device::CaptureDir dir = Device::CaptureDir::rx;
        bool loopback = false;
    };
    /** One device's side: the ring its engine fills and the figures it counts. */
    struct Source {
        Device* dev = nullptr;
        Capture* owner = nullptr;
        std::uint32_t first_iface = 0; ///< pcapng interface id of port 0
        std::uint32_t slot_bytes = 0;
        std::int64_t epoch_offset_ns = 0; ///< Unix epoch ns = device clock ns + this
        SpscRing<Slot> ring;
        std::unique_ptr<std::uint8_t[]> arena; ///< ring capacity × slot_bytes; slots point here
        CaptureCounters counters;
        /** Per port: frames seen and frames dropped (engine thread writes; stop() reads after
         *  the hook is cleared). */
        std::array<std::uint64_t, 8> port_seen{};
        std::array<std::uint64_t, 8> port_dropped{};
    };

    Capture() = default;
    void writer_loop() noexcept;
    /** Writes every frame now in the rings, oldest first across devices. @return frames written.
     */
    std::size_t drain() noexcept;

    std::string path_;
    std::uint32_t slot_bytes_ = 0;
    std::uint64_t start_epoch_ns_ = 0;
    std::vector<std::unique_ptr<Source>> sources_;
    PcapngWriter file_;
    std::thread writer_;
    std::atomic<bool> stop_writer_{false};
    bool stopped_ = false;
    CaptureStats final_{};
};

/** "capture FILE: N frames, M dropped (ring full), T truncated[, write error: ...]" for reports. */
[[nodiscard]] std::string describe(const std::string& path, const CaptureStats& st);

} // namespace droce::capture
