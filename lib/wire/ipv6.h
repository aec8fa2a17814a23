/* SPDX-License-Identifier: BSD-3-Clause */
/** @file IPv6 fixed header (RFC 8200). RoCEv2 uses no extension headers. */
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "byteorder.h"
#include "ipv4.h"

namespace droce::wire {

using Ipv6Addr = std::array<std::uint8_t, 16>;

/** ::ffff:a.b.c.d, the IPv4-mapped form of @p v4 (RFC 4291 §2.5.5.2): an IPv4 address's GID. */
[[nodiscard]] constexpr Ipv6Addr ipv4_mapped(const Ipv4Addr& v4) noexcept {
    return {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, v4[0], v4[1], v4[2], v4[3]};
}
/** True when @p a is IPv4-mapped (::ffff:0:0/96), i.e. a GID that names an IPv4 address. */
[[nodiscard]] constexpr bool is_ipv4_mapped(const Ipv6Addr& a) noexcept {
    for (std::size_t i = 0; i < 10; ++i)
        if (a[i] != 0) return false;
    return a[10] == 0xff && a[11] == 0xff;
}
/** The IPv4 address inside IPv4-mapped @p a: its last four bytes (meaningless unless mapped). */
[[nodiscard]] constexpr Ipv4Addr ipv4_of_mapped(const Ipv6Addr& a) noexcept {
    return {a[12], a[13], a[14], a[15]};
}

/** IPv6 fixed header, 40 bytes. */
struct Ipv6Hdr {
    Be32 vtc_flow;       ///< version (4), traffic class (8), flow label (20)
    Be16 payload_length; ///< bytes after this header
    std::uint8_t next_header;
    std::uint8_t hop_limit; ///< masked out of the ICRC
    Ipv6Addr src;
    Ipv6Addr dst;

    [[nodiscard]] constexpr unsigned version() const noexcept { return vtc_flow.get() >> 28; }
    [[nodiscard]] constexpr unsigned traffic_class() const noexcept {
        return (vtc_flow.get() >> 20) & 0xffu;
    }
    [[nodiscard]] constexpr std::uint32_t flow_label() const noexcept {
        return vtc_flow.get() & 0xfffffu;
    }
    constexpr void set_vtc_flow(unsigned tclass, std::uint32_t flow_label) noexcept {
        vtc_flow.set((6u << 28) | ((tclass & 0xffu) << 20) | (flow_label & 0xfffffu));
    }
};
static_assert(sizeof(Ipv6Hdr) == 40);

} // namespace droce::wire
