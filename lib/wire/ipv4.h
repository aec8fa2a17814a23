/* SPDX-License-Identifier: BSD-3-Clause */
/** @file IPv4 header (RFC 791). RoCEv2 frames carry no IPv4 options, but the parser accepts them.
 */
#pragma once

#include <array>
#include <cstdint>

#include "byteorder.h"

namespace droce::wire {

using Ipv4Addr = std::array<std::uint8_t, 4>;

inline constexpr std::uint8_t kIpProtoUdp = 17;

/** IPv4 header without options, 20 bytes. */
struct Ipv4Hdr {
    std::uint8_t version_ihl; ///< version (4 bits) and header length in 32-bit words (4 bits)
    std::uint8_t tos;         ///< DSCP (6 bits) and ECN (2 bits); masked out of the ICRC
    Be16 total_length;        ///< bytes, header included
    Be16 id;
    Be16 flags_frag;
    std::uint8_t ttl; ///< masked out of the ICRC
    std::uint8_t protocol;
    Be16 checksum; ///< masked out of the ICRC
    Ipv4Addr src;
    Ipv4Addr dst;

    [[nodiscard]] constexpr unsigned version() const noexcept { return version_ihl >> 4; }
    /** Header length in bytes (IHL × 4). */
    [[nodiscard]] constexpr unsigned header_length() const noexcept {
        return (version_ihl & 0xfu) * 4u;
    }
    [[nodiscard]] constexpr unsigned dscp() const noexcept { return tos >> 2; }
    [[nodiscard]] constexpr unsigned ecn() const noexcept { return tos & 3u; }
};
static_assert(sizeof(Ipv4Hdr) == 20);

/** The don't-fragment bit of Ipv4Hdr::flags_frag; RoCE traffic is sent with DF set. */
inline constexpr std::uint16_t kIpv4DontFragment = 0x4000;

/** RFC 1071 header checksum over @p len bytes (an odd last byte is padded with zero); returns the
 *  value to store (host order), or 0 over a header that carries a correct checksum. */
std::uint16_t ipv4_header_checksum(const void* hdr, unsigned len) noexcept;

} // namespace droce::wire
