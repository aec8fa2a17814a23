/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * Limits and default knobs of the RC transport, in one place.
 * Where a value matches Linux rxe (rxe_param.h) or IBTA, the comment says so.
 */
#pragma once

#include <cstdint>

namespace droce::rc {

inline constexpr std::uint32_t kMaxSge = 16;         ///< SGEs per send or receive WQE
inline constexpr std::uint32_t kMaxInlineData = 256; ///< bytes of inline data per send WQE
inline constexpr std::uint32_t kMaxQpWr = 4096;      ///< WQEs per SQ or RQ (power of two)
inline constexpr std::uint32_t kMaxCqe = 65536;      ///< CQEs per CQ
inline constexpr std::uint32_t kMaxQp =
    16384; ///< QPs per device (a multiple of 4096: doorbell summary words)
inline constexpr std::uint32_t kFirstQpn =
    0x11; ///< first QPN handed out (QP0/QP1 are special; rxe also starts at 17)
inline constexpr std::uint32_t kMaxMr = 4096;     ///< memory regions per device
inline constexpr std::uint32_t kMaxRdAtomic = 16; ///< max_rd_atomic / max_dest_rd_atomic ceiling
inline constexpr std::uint64_t kMaxMsgSize =
    1ull << 31; ///< bytes per message (IBTA: RETH DMA length is 31 bits usable)
inline constexpr std::uint32_t kMaxPktPerAck =
    64; ///< AckReq at least every N packets (rxe RXE_MAX_PKT_PER_ACK)
inline constexpr std::uint32_t kMaxPaths =
    16; ///< paths per QP (RC uses 1; multipath one per entropy value)
inline constexpr std::uint32_t kPsnWindow =
    1024; ///< unacknowledged packets a requester keeps in flight
inline constexpr std::uint32_t kAckTimeoutMinNs =
    4096; ///< local ACK timeout unit: 4.096 us × 2^timeout (IBTA §9.7.6.1.3)
/**
 * Smallest payload a packet sends by reference (zero-copy) where the port can; smaller payloads are
 * copied into the header buffer. Measured with bench/e2e/run over memif zero-copy (README,
 * "Transmit without copying"): by reference costs two more mbufs and two more memif descriptors per
 * packet; at 1 KiB that was 33 % fewer messages per second than copying, at 4 KiB a tie (within
 * noise), at 64 B a tie. So only full 4 KiB payloads go by reference by default.
 */
inline constexpr std::uint32_t kTxByRefMinPayload = 4096;

/** Path MTU codes as ibv_mtu numbers them (1 = 256 B .. 5 = 4096 B). */
enum class Mtu : std::uint8_t { mtu256 = 1, mtu512 = 2, mtu1024 = 3, mtu2048 = 4, mtu4096 = 5 };
[[nodiscard]] constexpr std::uint32_t mtu_bytes(Mtu m) noexcept {
    return 128u << static_cast<unsigned>(m);
}
/**
 * The Mtu code of a path MTU of @p bytes, the inverse of mtu_bytes(): 256, 512, 1024 and 2048 map
 * to their codes; any other value, 4096 included, gives mtu4096.
 */
[[nodiscard]] constexpr Mtu mtu_from_bytes(std::uint32_t bytes) noexcept {
    switch (bytes) {
    case 256:
        return Mtu::mtu256;
    case 512:
        return Mtu::mtu512;
    case 1024:
        return Mtu::mtu1024;
    case 2048:
        return Mtu::mtu2048;
    default:
        return Mtu::mtu4096;
    }
}

/** Local ACK timeout in ns for the 5-bit QP attribute @p timeout; 0 means the timer is disabled. */
[[nodiscard]] constexpr std::uint64_t ack_timeout_ns(std::uint8_t timeout) noexcept {
    return timeout == 0 ? 0 : static_cast<std::uint64_t>(kAckTimeoutMinNs) << (timeout & 31u);
}

/**
 * Minimum RNR NAK timer in ns for the 5-bit code carried in an RNR NAK syndrome (IBTA table 45,
 * §9.7.5.2.8): code 0 is 655.36 ms, 1 is 0.01 ms ... 31 is 491.52 ms.
 */
[[nodiscard]] std::uint64_t rnr_timer_ns(std::uint8_t code) noexcept;

} // namespace droce::rc
