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

/**
 * The RFC 1071 checksum of an option-less IPv4 header (version 4, IHL 5) with these field values
 * (host order; addresses in network order), computed from the values, not read back from a
 * written header: a header just written field by field cannot be loaded in wider words until
 * those stores reach the cache, and when the buffer's line was last read by another core (memif
 * zero-copy) that wait was 12 - 20 % of a sender's core (perf, 64 KiB WRITEs). Returns the value
 * to store in Ipv4Hdr::checksum (host order). Any thread; no memory touched.
 */
[[nodiscard]] constexpr std::uint16_t
ipv4_header_checksum_of(std::uint8_t tos, std::uint16_t total_length, std::uint16_t id,
                        std::uint16_t flags_frag, std::uint8_t ttl, std::uint8_t protocol,
                        const Ipv4Addr& src, const Ipv4Addr& dst) noexcept {
    std::uint32_t sum =
        (0x45u << 8 | tos) + total_length + id + flags_frag + (std::uint32_t{ttl} << 8 | protocol);
    for (const Ipv4Addr* a : {&src, &dst})
        sum += (std::uint32_t{(*a)[0]} << 8 | (*a)[1]) + (std::uint32_t{(*a)[2]} << 8 | (*a)[3]);
    sum = (sum & 0xffffu) + (sum >> 16);
    sum = (sum & 0xffffu) + (sum >> 16);
    return static_cast<std::uint16_t>(~sum);
}

} // namespace droce::wire
