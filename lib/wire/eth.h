/* SPDX-License-Identifier: BSD-3-Clause */
/** @file Ethernet II header and the IEEE 802.1Q tag. */
#pragma once

#include <array>
#include <cstdint>
#include <cstring>

#include "byteorder.h"

namespace droce::wire {

using MacAddr = std::array<std::uint8_t, 6>;

/**
 * @p a == @p b by one 4-byte and one 2-byte compare: std::array's == on six bytes is a call to
 * libc's memcmp (about 30 instructions with the call, per received frame; bench/engine/instr).
 */
[[nodiscard]] inline bool same_mac(const MacAddr& a, const MacAddr& b) noexcept {
    std::uint32_t a4, b4;
    std::uint16_t a2, b2;
    std::memcpy(&a4, a.data(), 4);
    std::memcpy(&b4, b.data(), 4);
    std::memcpy(&a2, a.data() + 4, 2);
    std::memcpy(&b2, b.data() + 4, 2);
    return ((a4 ^ b4) | static_cast<std::uint32_t>(a2 ^ b2)) == 0;
}

inline constexpr std::uint16_t kEtherTypeIpv4 = 0x0800;
inline constexpr std::uint16_t kEtherTypeArp = 0x0806;
inline constexpr std::uint16_t kEtherTypeVlan = 0x8100;
inline constexpr std::uint16_t kEtherTypeIpv6 = 0x86dd;
/** RoCE v1: IB GRH directly over Ethernet. droce recognises it only to name it in traces. */
inline constexpr std::uint16_t kEtherTypeRoceV1 = 0x8915;

/** Ethernet II header, 14 bytes. */
struct EthHdr {
    MacAddr dst;
    MacAddr src;
    Be16 ether_type;
};
static_assert(sizeof(EthHdr) == 14);

/** IEEE 802.1Q tag as it follows the source MAC: TCI then the inner EtherType; 4 bytes. */
struct VlanTag {
    Be16 tci;
    Be16 ether_type;

    [[nodiscard]] constexpr std::uint16_t vid() const noexcept { return tci.get() & 0x0fff; }
    [[nodiscard]] constexpr std::uint8_t pcp() const noexcept { return tci.get() >> 13; }
    constexpr void set_tci(std::uint8_t pcp, std::uint16_t vid) noexcept {
        tci.set((static_cast<std::uint32_t>(pcp & 7u) << 13) | (vid & 0x0fffu));
    }
};
static_assert(sizeof(VlanTag) == 4);

} // namespace droce::wire
