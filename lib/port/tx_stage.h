/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * The transmit stage: where a transport (RC, and MRC next) leaves the packets it decided to send
 * during one engine pass, instead of calling up into the engine. A packet is a descriptor: the
 * header fields, spans of its payload, the path's headers and the port the chosen path leaves by,
 * and the TxRef when the payload may go by reference. The engine (lib/engine/transmit.cc) builds
 * the frames of the whole pass at once, into buffers it reserved in bulk before the pass, and
 * flushes them per port.
 *
 * Room: before each pass the owner says how many packets each port can take (buffers reserved and
 * queue space) and how many the loopback queue can take; append() refuses a packet beyond that,
 * so a transport never decides to send what cannot be sent: it keeps its state and sends the same
 * packet on a later pass (as with a full NIC send queue).
 *
 * Lifetime of what a descriptor points at: the path headers live in the QP, the payload in
 * registered memory or in the WQE's inline data; both stay put until the end of the pass (control
 * calls wait for the pass to end; a WQE completes only after its ACK, received in a later pass).
 *
 * Thread rules: the engine thread only (or a protocol test's thread). Nothing here allocates after
 * construction, locks or throws.
 */
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>

#include "common/counters.h"
#include "port/port.h"
#include "wire/packet.h"

namespace droce {

/** One packet staged for transmission. */
struct TxPacket {
    static constexpr std::uint32_t kMaxSpans = 16; ///< payload pieces (one per SGE: rc::kMaxSge)

    const wire::PathHeaders* path = nullptr; ///< headers below the BTH (the QP's chosen path)
    wire::PacketFields fields;               ///< BTH and extension header values
    std::array<std::span<const std::uint8_t>, kMaxSpans> payload{};
    std::uint8_t num_spans = 0;
    std::uint8_t port = 0; ///< 0-based port of the device the path leaves by
    bool loopback = false; ///< to a QP of this same device: the loopback queue, not the port
    TxRef* ref = nullptr;  ///< non-null: registered payload that may go by reference (see port.h)
    Counters* counters = nullptr; ///< the sending QP's counters (sent_pkts, loopback_pkts at build)

    [[nodiscard]] std::span<const std::span<const std::uint8_t>> payload_spans() const noexcept {
        return {payload.data(), num_spans};
    }
};

class TxStage {
  public:
    static constexpr unsigned kMaxPorts = 4;
    /** Packets per pass an engine's stage holds (all ports and loopback together). */
    static constexpr std::uint32_t kDepth = 512;

    /** @param depth packets the stage holds per pass (allocated here, once). */
    explicit TxStage(std::uint32_t depth = kDepth) : packets_(new TxPacket[depth]), depth_(depth) {}

    /**
     * Opens a pass: @p port_room[p] packets may leave by port p (buffers the owner reserved and
     * room in its queue), @p loopback_room may go to the loopback queue (they take port buffers
     * too). Ports beyond port_room.size() get no room.
     */
    void open(std::span<const std::uint32_t> port_room, std::uint32_t loopback_room) noexcept {
        count_ = 0;
        for (unsigned p = 0; p < kMaxPorts; ++p) {
            buf_room_[p] = p < port_room.size() ? port_room[p] : 0;
            queue_used_[p] = 0;
        }
        loop_room_ = loopback_room;
        loop_used_ = 0;
    }

    /**
     * Stages one packet. @p payload is copied as spans (not bytes): what the spans point at must
     * stay valid until the pass ends (see the file comment). At most TxPacket::kMaxSpans spans.
     * @return false when the port (or the loopback queue) has no room left this pass or the stage
     *         is full: nothing is staged and the caller keeps its state.
     */
    [[nodiscard]] bool append(const wire::PathHeaders& path, std::uint8_t port, bool loopback,
                              const wire::PacketFields& fields,
                              std::span<const std::span<const std::uint8_t>> payload, TxRef* ref,
                              Counters* counters) noexcept {
        if (count_ == depth_ || port >= kMaxPorts || payload.size() > TxPacket::kMaxSpans)
            return false;
        if (queue_used_[port] >= buf_room_[port]) return false;
        if (loopback && loop_used_ >= loop_room_) return false;
        TxPacket& p = packets_[count_++];
        p.path = &path;
        p.fields = fields;
        for (std::size_t i = 0; i < payload.size(); ++i)
            p.payload[i] = payload[i];
        p.num_spans = static_cast<std::uint8_t>(payload.size());
        p.port = port;
        p.loopback = loopback;
        p.ref = ref;
        p.counters = counters;
        ++queue_used_[port];
        if (loopback) ++loop_used_;
        return true;
    }

    /** The packets staged since open(), in the order the transports decided them. */
    [[nodiscard]] std::span<const TxPacket> packets() const noexcept {
        return {packets_.get(), count_};
    }
    [[nodiscard]] std::uint32_t size() const noexcept { return count_; }
    /** Forgets the staged packets (the owner built them); the rooms stay as they are. */
    void clear() noexcept { count_ = 0; }

  private:
    std::unique_ptr<TxPacket[]> packets_;
    std::uint32_t depth_;
    std::uint32_t count_ = 0;
    std::array<std::uint32_t, kMaxPorts> buf_room_{};
    std::array<std::uint32_t, kMaxPorts> queue_used_{};
    std::uint32_t loop_room_ = 0;
    std::uint32_t loop_used_ = 0;
};

} // namespace droce
