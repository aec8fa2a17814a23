/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * ARP packet for Ethernet and IPv4 (RFC 826), 28 bytes after the Ethernet header (EtherType
 * 0x0806).
 *
 * droce's ports are invisible to the kernel, so the engine answers ARP for its own IPv4 address and
 * asks for its peers' MACs itself (lib/engine/neigh.h). Only the Ethernet/IPv4 form exists here:
 * a frame with other hardware or protocol types is not one droce can answer.
 */
#pragma once

#include <cstdint>
#include <string_view>

#include "byteorder.h"
#include "eth.h"
#include "ipv4.h"

namespace droce::wire {

/** ARP hardware type of Ethernet (RFC 826 ar$hrd; IANA "Hardware Types" 1). */
inline constexpr std::uint16_t kArpHwEthernet = 1;
/** ARP protocol type of IPv4: the IPv4 EtherType (RFC 826 ar$pro). */
inline constexpr std::uint16_t kArpProtoIpv4 = kEtherTypeIpv4;

/** ARP operation (RFC 826 ar$op). Values other than these two exist (RARP, InARP) but droce ignores
 * them. */
enum class ArpOp : std::uint16_t {
    request = 1,
    reply = 2,
};

/** Name of @p op ("request", "reply"), or "unknown" for any other value. */
[[nodiscard]] constexpr std::string_view to_string(ArpOp op) noexcept {
    switch (op) {
    case ArpOp::request:
        return "request";
    case ArpOp::reply:
        return "reply";
    }
    return "unknown";
}

/** ARP packet for Ethernet hardware addresses and IPv4 protocol addresses, 28 bytes. */
struct ArpHdr {
    Be16 htype;        ///< hardware type; kArpHwEthernet
    Be16 ptype;        ///< protocol type; kArpProtoIpv4
    std::uint8_t hlen; ///< hardware address length in bytes; 6
    std::uint8_t plen; ///< protocol address length in bytes; 4
    Be16 oper;         ///< ArpOp
    MacAddr sha;       ///< sender hardware address
    Ipv4Addr spa;      ///< sender protocol address (0.0.0.0 in an RFC 5227 probe)
    MacAddr tha;       ///< target hardware address (zero in a request)
    Ipv4Addr tpa;      ///< target protocol address

    [[nodiscard]] constexpr ArpOp op() const noexcept { return static_cast<ArpOp>(oper.get()); }
    constexpr void set_op(ArpOp op) noexcept { oper.set(static_cast<std::uint16_t>(op)); }
    /** True when the four format fields say Ethernet (6-byte) addresses and IPv4 (4-byte)
     * addresses. */
    [[nodiscard]] constexpr bool is_ethernet_ipv4() const noexcept {
        return htype.get() == kArpHwEthernet && ptype.get() == kArpProtoIpv4 && hlen == 6 &&
               plen == 4;
    }
    /** Sets htype, ptype, hlen and plen to the Ethernet/IPv4 values. */
    constexpr void set_ethernet_ipv4() noexcept {
        htype.set(kArpHwEthernet);
        ptype.set(kArpProtoIpv4);
        hlen = 6;
        plen = 4;
    }
    /** Gratuitous ARP: the sender announces its own address (sender and target protocol address
     * equal). */
    [[nodiscard]] constexpr bool is_gratuitous() const noexcept { return spa == tpa; }
};
static_assert(sizeof(ArpHdr) == 28);

} // namespace droce::wire
