/* SPDX-License-Identifier: BSD-3-Clause */
/** @file IPv6 fixed header (RFC 8200). RoCEv2 uses no extension headers. */
#pragma once

#include <array>
#include <cstdint>

#include "byteorder.h"

namespace droce::wire {

using Ipv6Addr = std::array<std::uint8_t, 16>;

/** IPv6 fixed header, 40 bytes. */
struct Ipv6Hdr {
    Be32 vtc_flow;      ///< version (4), traffic class (8), flow label (20)
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
