/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * Helpers of the neighbour tests: the port and peer addresses, frames built byte by byte (not with
 * the lib/wire structs under test), and an independent ICMPv6 checksum oracle that assembles the
 * RFC 8200 §8.1 pseudo-header as bytes and sums it in a different way from lib/wire/icmpv6.h.
 * Header-only so the sanitizer build compiles it with its own flags.
 */
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "engine/neigh.h"

namespace droce::test {

using Bytes = std::vector<std::uint8_t>;
using wire::Ipv4Addr;
using wire::Ipv6Addr;
using wire::MacAddr;

inline constexpr MacAddr kOurMac = {0x02, 0x00, 0x00, 0x00, 0x00, 0x01};
inline constexpr MacAddr kPeerMac = {0x02, 0x00, 0x00, 0x00, 0x00, 0x02};
inline constexpr MacAddr kOtherMac = {0x02, 0x00, 0x00, 0x00, 0x00, 0x03};
inline constexpr Ipv4Addr kOurIp4 = {10, 0, 0, 1};
inline constexpr Ipv4Addr kPeerIp4 = {10, 0, 0, 2};
inline constexpr Ipv4Addr kThirdIp4 = {10, 0, 0, 3};
inline constexpr Ipv6Addr kOurIp6 = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01};
inline constexpr Ipv6Addr kOurLinkLocal = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01};
inline constexpr Ipv6Addr kPeerIp6 = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0,
                                      0,    0,    0,    0,    0, 0, 0, 0x02};
inline constexpr Ipv6Addr kThirdIp6 = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0,
                                       0,    0,    0,    0,    0, 0, 0, 0x03};

inline NeighPortAddrs our_addrs() {
    NeighPortAddrs a;
    a.mac = kOurMac;
    a.ipv4 = kOurIp4;
    a.add_ipv6(kOurLinkLocal);
    a.add_ipv6(kOurIp6);
    return a;
}

inline void put(Bytes& b, std::initializer_list<std::uint8_t> v) {
    b.insert(b.end(), v.begin(), v.end());
}
template <std::size_t N>
void put(Bytes& b, const std::array<std::uint8_t, N>& v) {
    b.insert(b.end(), v.begin(), v.end());
}
inline void put16(Bytes& b, unsigned v) {
    b.push_back(static_cast<std::uint8_t>(v >> 8));
    b.push_back(static_cast<std::uint8_t>(v));
}

inline void put_l2(Bytes& b, const MacAddr& dst, const MacAddr& src, unsigned ether_type,
                   std::optional<std::uint16_t> tci) {
    put(b, dst);
    put(b, src);
    if (tci) {
        put16(b, 0x8100);
        put16(b, *tci);
    }
    put16(b, ether_type);
}

/** An ARP frame, Ethernet/IPv4, padded to 60 bytes (64 with a tag) unless @p pad is false. */
inline Bytes arp_frame(unsigned op, const MacAddr& sha, const Ipv4Addr& spa, const MacAddr& tha,
                       const Ipv4Addr& tpa, const MacAddr& eth_dst,
                       std::optional<std::uint16_t> tci = {}, bool pad = true) {
    Bytes b;
    put_l2(b, eth_dst, sha, 0x0806, tci);
    put16(b, 1);      // htype Ethernet
    put16(b, 0x0800); // ptype IPv4
    put(b, {6, 4});
    put16(b, op);
    put(b, sha);
    put(b, spa);
    put(b, tha);
    put(b, tpa);
    if (pad) b.resize(60 + (tci ? 4 : 0), 0);
    return b;
}

/**
 * Reference ICMPv6 checksum: pseudo-header (src, dst, 32-bit length, 3 zero bytes, 58) as bytes,
 * then the message; 32-bit words summed in 64 bits, folded at the end.
 */
inline std::uint16_t ref_icmpv6_checksum(const Ipv6Addr& src, const Ipv6Addr& dst,
                                         const Bytes& msg) {
    Bytes all;
    put(all, src);
    put(all, dst);
    const auto n = static_cast<std::uint32_t>(msg.size());
    put(all, {static_cast<std::uint8_t>(n >> 24), static_cast<std::uint8_t>(n >> 16),
              static_cast<std::uint8_t>(n >> 8), static_cast<std::uint8_t>(n), 0, 0, 0, 58});
    all.insert(all.end(), msg.begin(), msg.end());
    while (all.size() % 4)
        all.push_back(0);
    std::uint64_t sum = 0;
    for (std::size_t i = 0; i < all.size(); i += 4)
        sum += (std::uint32_t{all[i]} << 24) | (std::uint32_t{all[i + 1]} << 16) |
               (std::uint32_t{all[i + 2]} << 8) | all[i + 3];
    while (sum > 0xffff)
        sum = (sum >> 16) + (sum & 0xffff);
    return static_cast<std::uint16_t>(~sum);
}

/** Recomputes the ICMPv6 checksum of an untagged ND frame in place (after a test edits it). */
inline void refresh_nd_checksum(Bytes& f) {
    const std::size_t len = (std::size_t{f[18]} << 8) | f[19];
    Ipv6Addr src, dst;
    std::copy(f.begin() + 22, f.begin() + 38, src.begin());
    std::copy(f.begin() + 38, f.begin() + 54, dst.begin());
    f[56] = f[57] = 0;
    const std::uint16_t c = ref_icmpv6_checksum(
        src, dst, Bytes(f.begin() + 54, f.begin() + 54 + static_cast<std::ptrdiff_t>(len)));
    f[56] = static_cast<std::uint8_t>(c >> 8);
    f[57] = static_cast<std::uint8_t>(c);
}

struct NdSpec {
    unsigned type = 135; ///< 135 NS, 136 NA
    MacAddr eth_src = kPeerMac;
    std::optional<MacAddr> eth_dst; ///< default: 33:33 + low 32 bits of dst
    Ipv6Addr src = kPeerIp6;
    std::optional<Ipv6Addr> dst; ///< default: solicited-node address of target
    Ipv6Addr target = kOurIp6;
    std::uint8_t hop_limit = 255;
    std::uint8_t code = 0;
    std::uint8_t na_flags = 0x60; ///< S and O
    /** Link-layer option: type (1 source, 2 target; 0 = none), MAC, length in 8-byte units. */
    unsigned opt_type = 1;
    MacAddr opt_mac = kPeerMac;
    std::uint8_t opt_len = 1;
    std::optional<std::uint16_t> tci;
    bool bad_checksum = false;
    std::size_t trailing_pad = 0; ///< Ethernet padding after the IPv6 payload
};

/** An NS or NA frame built byte by byte with the reference checksum. */
inline Bytes nd_frame(const NdSpec& s) {
    const Ipv6Addr dst = s.dst.value_or(Ipv6Addr{0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xff,
                                                 s.target[13], s.target[14], s.target[15]});
    Bytes msg;
    put(msg, {static_cast<std::uint8_t>(s.type), s.code, 0, 0});
    if (s.type == 136)
        put(msg, {s.na_flags, 0, 0, 0});
    else
        put(msg, {0, 0, 0, 0});
    put(msg, s.target);
    if (s.opt_type != 0) {
        put(msg, {static_cast<std::uint8_t>(s.opt_type), s.opt_len});
        put(msg, s.opt_mac);
        for (std::size_t i = 1; i < s.opt_len; ++i)
            put(msg, {0, 0, 0, 0, 0, 0, 0, 0});
    }
    std::uint16_t c = ref_icmpv6_checksum(s.src, dst, msg);
    if (s.bad_checksum) c ^= 0x0100;
    msg[2] = static_cast<std::uint8_t>(c >> 8);
    msg[3] = static_cast<std::uint8_t>(c);

    Bytes b;
    put_l2(b, s.eth_dst.value_or(MacAddr{0x33, 0x33, dst[12], dst[13], dst[14], dst[15]}),
           s.eth_src, 0x86dd, s.tci);
    put(b, {0x60, 0, 0, 0});
    put16(b, static_cast<unsigned>(msg.size()));
    put(b, {58, s.hop_limit});
    put(b, s.src);
    put(b, dst);
    b.insert(b.end(), msg.begin(), msg.end());
    b.resize(b.size() + s.trailing_pad, 0);
    return b;
}

} // namespace droce::test
