/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * droce's own control datagrams on UDP port 4791: the probes and answers of droce's io_uring
 * driver (drivers/uring: a shared port's slot probes, Gso::automatic's GSO probe and answer). One
 * spelling of their layout, for the driver that sends and answers them and for droce-trace, which
 * names them in a capture.
 *
 * Layout (32 bytes, the UDP payload): BTH-shaped, so that every RoCE receiver drops it: byte 1 is
 * 0x0f (SE 0, M 0, PadCount 0, TVer 15: no RoCE stack takes a TVer other than 0, IBTA Vol 1
 * 9.2.1), bytes 2-3 0xffff, byte 4 (BTH resv8) the kind, byte 5 (the destination QP's top byte,
 * which a shared port steers by) the slot asked for, byte 6 the sender's own slot (GSO kinds),
 * bytes 8-15 kDroceProbeMagic, bytes 16-23 the sender's nonce.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace droce::wire {

/** Bytes of a droce probe datagram (UDP payload). */
inline constexpr std::size_t kDroceProbeLen = 32;
/** Byte 1 of a probe: SE 0, M 0, PadCount 0, TVer 15. */
inline constexpr std::uint8_t kDroceProbeTverByte = 0x0f;
/** Byte 4 (the BTH's reserved byte): the kind. */
inline constexpr std::size_t kDroceProbeKindByte = 4;
/** Byte 5 (the BTH destination QP's top byte): the slot the probe is for. */
inline constexpr std::size_t kDroceProbeToSlotByte = 5;
/** Byte 6 of a GSO probe or answer: the sender's own slot. */
inline constexpr std::size_t kDroceProbeFromSlotByte = 6;
/** Where kDroceProbeMagic lies in every probe: bytes 8..15. */
inline constexpr std::size_t kDroceProbeMagicOffset = 8;
/** What marks a datagram as droce's probe beside TVer 15 (a RoCE packet's bytes there are the
 *  opcode's extension headers or payload, never read as this). */
inline constexpr std::uint8_t kDroceProbeMagic[8] = {'D', 'R', 'O', 'C', 'E', 'S', 'H', 'R'};
/** Bytes 16..23: the sender's nonce (host order; only the sender reads it back). */
inline constexpr std::size_t kDroceProbeNonceOffset = 16;

/** What a probe asks (byte 4). */
enum class DroceProbeKind : std::uint8_t {
    share_self = 0, ///< a joiner of a shared port looking for its own index
    share_who = 1,  ///< a repairing member asking the socket at an index for its slot
    gso = 2,        ///< "do you take GSO sends?" (Gso::automatic); steered by slot from here on
    gso_yes = 3,    ///< the answer of a port that receives on its UDP socket
};

/** Whether the @p len bytes at @p p are a droce probe (any kind). Reads only inside them. */
[[nodiscard]] inline bool is_droce_probe(const std::uint8_t* p, std::size_t len) noexcept {
    return len == kDroceProbeLen && p[1] == kDroceProbeTverByte &&
           std::memcmp(p + kDroceProbeMagicOffset, kDroceProbeMagic, sizeof kDroceProbeMagic) == 0;
}

/** A name for probe kind @p kind, for traces ("droce GSO probe"). */
[[nodiscard]] inline const char* droce_probe_name(std::uint8_t kind) noexcept {
    switch (static_cast<DroceProbeKind>(kind)) {
    case DroceProbeKind::share_self:
        return "droce share self-probe";
    case DroceProbeKind::share_who:
        return "droce share who-probe";
    case DroceProbeKind::gso:
        return "droce GSO probe";
    case DroceProbeKind::gso_yes:
        return "droce GSO answer";
    }
    return "droce probe";
}

} // namespace droce::wire
