/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * ICMPv6 (RFC 4443) as far as IPv6 Neighbor Discovery (RFC 4861) needs it: the ICMPv6 header and
 * checksum, the Neighbor Solicitation and Advertisement bodies, the source/target link-layer
 * address option, and the solicited-node multicast address with its Ethernet MAC (RFC 4291 §2.7.1,
 * RFC 2464 §7).
 *
 * An NS or NA is Ethernet / IPv6 (next header 58, hop limit 255) / Icmpv6Hdr / NdNsBody or NdNaBody
 * / options, each option a multiple of 8 bytes. Everything here is constexpr, allocation-free and
 * independent of the host's byte order.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "byteorder.h"
#include "eth.h"
#include "ipv6.h"

namespace droce::wire {

/** IPv6 next header value of ICMPv6 (IANA protocol number 58). */
inline constexpr std::uint8_t kIpProtoIcmpv6 = 58;
/** Hop limit every ND message is sent with, and the only one a receiver accepts (RFC 4861 §7.1). */
inline constexpr std::uint8_t kNdHopLimit = 255;

// clang-format off
#define DROCE_ICMPV6_TYPES(X)                                                                       \
    X(echo_request, 128) X(echo_reply, 129) X(router_solicitation, 133)                             \
    X(router_advertisement, 134) X(neighbor_solicitation, 135) X(neighbor_advertisement, 136)       \
    X(redirect, 137)
// clang-format on
/** ICMPv6 message types droce names. Only the two ND types are handled; the rest are for traces. */
enum class Icmpv6Type : std::uint8_t {
#define DROCE_ICMPV6_X(name, value) name = value,
    DROCE_ICMPV6_TYPES(DROCE_ICMPV6_X)
#undef DROCE_ICMPV6_X
};

/** Name of @p t, e.g. "neighbor_solicitation", or "unknown". */
[[nodiscard]] constexpr std::string_view to_string(Icmpv6Type t) noexcept {
    switch (t) {
#define DROCE_ICMPV6_X(name, value)                                                                \
    case Icmpv6Type::name:                                                                         \
        return #name;
        DROCE_ICMPV6_TYPES(DROCE_ICMPV6_X)
#undef DROCE_ICMPV6_X
    }
    return "unknown";
}

/** ICMPv6 header (RFC 4443 §2.1), 4 bytes; the message body follows. */
struct Icmpv6Hdr {
    std::uint8_t type_byte;
    std::uint8_t code; ///< 0 for NS and NA
    Be16 checksum;     ///< over the pseudo-header and the message; see icmpv6_checksum()

    [[nodiscard]] constexpr Icmpv6Type type() const noexcept {
        return static_cast<Icmpv6Type>(type_byte);
    }
    constexpr void set_type(Icmpv6Type t) noexcept { type_byte = static_cast<std::uint8_t>(t); }
};
static_assert(sizeof(Icmpv6Hdr) == 4);

/** Neighbor Solicitation body after the ICMPv6 header (RFC 4861 §4.3), 20 bytes; options follow. */
struct NdNsBody {
    Be32 reserved;   ///< zero on send, ignored on receive
    Ipv6Addr target; ///< the address being resolved; never multicast
};
static_assert(sizeof(NdNsBody) == 20);

/** Neighbor Advertisement body after the ICMPv6 header (RFC 4861 §4.4), 20 bytes; options follow.
 */
struct NdNaBody {
    std::uint8_t flags; ///< Router (bit 7), Solicited (bit 6), Override (bit 5), reserved (4:0)
    std::uint8_t reserved[3];
    Ipv6Addr target; ///< the address whose link-layer address is advertised

    [[nodiscard]] constexpr bool router() const noexcept { return flags & 0x80u; }
    [[nodiscard]] constexpr bool solicited() const noexcept { return flags & 0x40u; }
    [[nodiscard]] constexpr bool override_flag() const noexcept { return flags & 0x20u; }
    /** Sets the three flags; the reserved bits become zero. */
    constexpr void set_flags(bool router, bool solicited, bool override_flag) noexcept {
        flags = static_cast<std::uint8_t>((router ? 0x80u : 0u) | (solicited ? 0x40u : 0u) |
                                          (override_flag ? 0x20u : 0u));
    }
};
static_assert(sizeof(NdNaBody) == 20);

/** ND option types (RFC 4861 §4.6). */
enum class NdOptType : std::uint8_t {
    source_link_addr = 1, ///< in NS (and RS, RA): the sender's MAC
    target_link_addr = 2, ///< in NA (and redirect): the target's MAC
    prefix_info = 3,
    redirected_header = 4,
    mtu = 5,
};

/** ND options are multiples of this many bytes; an option's length field counts these units. */
inline constexpr std::size_t kNdOptUnit = 8;

/** Each ND option starts with type and length (RFC 4861 §4.6); length is in 8-byte units, never 0.
 */
struct NdOptHdr {
    std::uint8_t type_byte;
    std::uint8_t length; ///< option length in units of 8 bytes, header included

    [[nodiscard]] constexpr NdOptType type() const noexcept {
        return static_cast<NdOptType>(type_byte);
    }
};
static_assert(sizeof(NdOptHdr) == 2);

/** Source/Target Link-Layer Address option for Ethernet (RFC 4861 §4.6.1, RFC 2464 §6), 8 bytes. */
struct NdLinkAddrOpt {
    std::uint8_t type_byte; ///< NdOptType::source_link_addr or target_link_addr
    std::uint8_t length;    ///< 1 (8 bytes) for Ethernet
    MacAddr addr;

    [[nodiscard]] constexpr NdOptType type() const noexcept {
        return static_cast<NdOptType>(type_byte);
    }
    constexpr void set(NdOptType t, const MacAddr& mac) noexcept {
        type_byte = static_cast<std::uint8_t>(t);
        length = 1;
        addr = mac;
    }
};
static_assert(sizeof(NdLinkAddrOpt) == 8);

/** True when @p a is an IPv6 multicast address (ff00::/8). */
[[nodiscard]] constexpr bool is_ipv6_multicast(const Ipv6Addr& a) noexcept {
    return a[0] == 0xff;
}

/** True when @p a is the unspecified address ::. */
[[nodiscard]] constexpr bool is_ipv6_unspecified(const Ipv6Addr& a) noexcept {
    for (auto b : a)
        if (b != 0) return false;
    return true;
}

/** The all-nodes link-local multicast address ff02::1 (RFC 4291 §2.7.1). */
inline constexpr Ipv6Addr kIpv6AllNodes = {0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01};

/**
 * Solicited-node multicast address of @p a (RFC 4291 §2.7.1): ff02::1:ff00:0/104 with the low 24
 * bits of @p a. A Neighbor Solicitation for @p a is sent there.
 */
[[nodiscard]] constexpr Ipv6Addr solicited_node_address(const Ipv6Addr& a) noexcept {
    return {0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xff, a[13], a[14], a[15]};
}

/** True when @p a is a solicited-node multicast address (ff02::1:ffxx:xxxx). */
[[nodiscard]] constexpr bool is_solicited_node_address(const Ipv6Addr& a) noexcept {
    const Ipv6Addr p = solicited_node_address(a);
    return p == a;
}

/** Ethernet MAC of IPv6 multicast address @p group (RFC 2464 §7): 33:33 and the group's low 32
 * bits. */
[[nodiscard]] constexpr MacAddr ipv6_multicast_mac(const Ipv6Addr& group) noexcept {
    return {0x33, 0x33, group[12], group[13], group[14], group[15]};
}

/**
 * ICMPv6 checksum (RFC 4443 §2.3, pseudo-header of RFC 8200 §8.1): the 16-bit one's complement of
 * the one's complement sum of source and destination address, the 32-bit upper-layer length, three
 * zero bytes and next header 58, then @p message (the ICMPv6 header and everything after it).
 *
 * To compute: pass the message with its checksum field zero and store the result. To verify: pass
 * the message as received; the result is 0 when the checksum is right. @p message may be any length
 * up to 2^32 - 1 bytes; an odd last byte is padded with zero, as the RFC says.
 */
[[nodiscard]] constexpr std::uint16_t
icmpv6_checksum(const Ipv6Addr& src, const Ipv6Addr& dst,
                std::span<const std::uint8_t> message) noexcept {
    std::uint64_t sum = 0;
    for (std::size_t i = 0; i < 16; i += 2) {
        sum += static_cast<std::uint32_t>(src[i] << 8 | src[i + 1]);
        sum += static_cast<std::uint32_t>(dst[i] << 8 | dst[i + 1]);
    }
    const std::uint64_t len = message.size();
    sum += (len >> 16) & 0xffffu;
    sum += len & 0xffffu;
    sum += kIpProtoIcmpv6;
    std::size_t i = 0;
    for (; i + 1 < message.size(); i += 2)
        sum += static_cast<std::uint32_t>(message[i] << 8 | message[i + 1]);
    if (i < message.size()) sum += static_cast<std::uint32_t>(message[i] << 8);
    while (sum >> 16)
        sum = (sum & 0xffffu) + (sum >> 16);
    return static_cast<std::uint16_t>(~sum & 0xffffu);
}

} // namespace droce::wire
