/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * Internal to drivers/sim: the pieces of impairment that the sim fabric (fabric.cc) and the
 * impairment stage (impair.cc) share, so that both make the same decisions the same way:
 *  - PRNG draws (uniform, chance) on a std::mt19937_64;
 *  - the frame layout a marker needs (where IP and UDP start, whether it is RoCEv2);
 *  - ECN: reading the ECN field, marking an ECT frame CE with the IPv4 checksum recomputed;
 *  - the RED decision (Kmin, Kmax, Pmax) on a backlog in bytes;
 *  - the corruption bit chooser: one bit after the Ethernet header, outside ICRC-masked fields;
 *  - the egress queue model: backlog bytes and serialisation time at a bandwidth in Gb/s.
 * Not a public header: not installed, include only from drivers/sim sources.
 *
 * Thread rules: pure functions over the caller's data and PRNG; no allocation, locks or throws.
 */
#pragma once

#include <cmath>
#include <cstdint>
#include <random>

#include "port/port.h"
#include "wire/eth.h"
#include "wire/ipv4.h"
#include "wire/ipv6.h"
#include "wire/udp.h"

namespace droce::sim::detail {

inline constexpr std::uint32_t kEthHeader = sizeof(wire::EthHdr);
inline constexpr std::uint32_t kBthFecnByte = 4; // FECN, BECN, resv6: masked by the ICRC
inline constexpr unsigned kEcnCe = 3;

// ---- randomness ----

/** Uniform double in [0, 1) from the top 53 bits of one draw. */
[[nodiscard]] inline double uniform(std::mt19937_64& rng) noexcept {
    return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

/**
 * True with probability @p p. p <= 0 (or NaN) is never and p >= 1 always, neither drawing from
 * @p rng; only 0 < p < 1 consumes one draw.
 */
[[nodiscard]] inline bool chance(std::mt19937_64& rng, double p) noexcept {
    if (!(p > 0.0)) return false;
    if (p >= 1.0) return true;
    return uniform(rng) < p;
}

// ---- frame layout ----

/** Where the layers of a frame start, as far as the sim needs them (ECN marking, corruption). */
struct Layout {
    std::uint32_t l3 = 0;     ///< IP header offset (after Ethernet and any 802.1Q tag)
    std::uint32_t l3_len = 0; ///< IP header bytes; 0 if not IP
    bool ipv4 = false;
    bool ipv6 = false;
    bool roce = false; ///< UDP to port 4791 follows the IP header
};

[[nodiscard]] inline Layout layout_of(const PktBuf& b) noexcept {
    Layout ly;
    const std::uint8_t* d = b.data;
    std::uint32_t off = kEthHeader;
    if (b.len < off) return ly;
    std::uint16_t type = static_cast<std::uint16_t>((d[12] << 8) | d[13]);
    if (type == wire::kEtherTypeVlan) {
        off += sizeof(wire::VlanTag);
        if (b.len < off) return ly;
        type = static_cast<std::uint16_t>((d[off - 2] << 8) | d[off - 1]);
    }
    ly.l3 = off;
    std::uint8_t proto = 0;
    if (type == wire::kEtherTypeIpv4 && b.len >= off + sizeof(wire::Ipv4Hdr)) {
        const auto* ip = reinterpret_cast<const wire::Ipv4Hdr*>(d + off);
        const unsigned hl = ip->header_length();
        if (ip->version() != 4 || hl < sizeof(wire::Ipv4Hdr) || b.len < off + hl) return ly;
        ly.ipv4 = true;
        ly.l3_len = hl;
        proto = ip->protocol;
    } else if (type == wire::kEtherTypeIpv6 && b.len >= off + sizeof(wire::Ipv6Hdr)) {
        const auto* ip = reinterpret_cast<const wire::Ipv6Hdr*>(d + off);
        if (ip->version() != 6) return ly;
        ly.ipv6 = true;
        ly.l3_len = sizeof(wire::Ipv6Hdr);
        proto = ip->next_header;
    } else {
        return ly;
    }
    const std::uint32_t l4 = ly.l3 + ly.l3_len;
    if (proto == wire::kIpProtoUdp && b.len >= l4 + sizeof(wire::UdpHdr)) {
        const auto* udp = reinterpret_cast<const wire::UdpHdr*>(d + l4);
        ly.roce = udp->dst_port.get() == wire::kRoceV2Port;
    }
    return ly;
}

// ---- ECN ----

/** ECN bits of an IP frame, or -1 for a non-IP frame. */
[[nodiscard]] inline int ecn_of(const PktBuf& b, const Layout& ly) noexcept {
    if (ly.ipv4) return static_cast<int>(reinterpret_cast<const wire::Ipv4Hdr*>(b.data + ly.l3)->ecn());
    if (ly.ipv6)
        return static_cast<int>(
            reinterpret_cast<const wire::Ipv6Hdr*>(b.data + ly.l3)->traffic_class() & 3u);
    return -1;
}

/**
 * Marks an ECT(0)/ECT(1) frame CE: IPv4 TOS (checksum recomputed) or IPv6 traffic class, and
 * PktBuf::ecn_ce. The ICRC masks these bits, so it stays valid. True if marked; Not-ECT, already
 * CE and non-IP frames are left unchanged.
 */
inline bool mark_ce(PktBuf& b, const Layout& ly) noexcept {
    const int ecn = ecn_of(b, ly);
    if (ecn != 1 && ecn != 2) return false;
    if (ly.ipv4) {
        auto* ip = reinterpret_cast<wire::Ipv4Hdr*>(b.data + ly.l3);
        ip->tos = static_cast<std::uint8_t>(ip->tos | kEcnCe);
        ip->checksum.set(0);
        ip->checksum.set(wire::ipv4_header_checksum(ip, ly.l3_len));
    } else {
        auto* ip = reinterpret_cast<wire::Ipv6Hdr*>(b.data + ly.l3);
        ip->set_vtc_flow(ip->traffic_class() | kEcnCe, ip->flow_label());
    }
    b.ecn_ce = true;
    return true;
}

/**
 * RED: whether a frame that finds @p backlog bytes queued is marked. None below @p kmin, a
 * probability rising linearly from 0 at kmin to @p pmax at @p kmax, all at or above kmax. Draws
 * from @p rng only between kmin and kmax.
 */
[[nodiscard]] inline bool red_decides_mark(std::mt19937_64& rng, std::uint64_t kmin,
                                           std::uint64_t kmax, double pmax,
                                           std::uint64_t backlog) noexcept {
    if (backlog >= kmax) return true;
    if (backlog < kmin) return false;
    const double frac =
        static_cast<double>(backlog - kmin) / static_cast<double>(kmax - kmin);
    return chance(rng, pmax * frac);
}

// ---- corruption ----

/**
 * True if bit @p bit (0 = least significant) of byte @p off is one the RoCEv2 ICRC masks
 * (IBTA A17.3.3): IPv4 TOS, TTL, checksum; IPv6 traffic class, flow label, hop limit; UDP
 * checksum; BTH FECN/BECN/resv6. Flipping those would go unnoticed.
 */
[[nodiscard]] inline bool icrc_masked(const Layout& ly, std::uint32_t off, unsigned bit) noexcept {
    if (!ly.roce || off < ly.l3) return false;
    const std::uint32_t rel = off - ly.l3;
    if (rel < ly.l3_len) {
        if (ly.ipv4) return rel == 1 || rel == 8 || rel == 10 || rel == 11;
        if (rel == 0) return bit < 4; // low nibble of byte 0: high nibble of the traffic class
        return rel == 1 || rel == 2 || rel == 3 || rel == 7;
    }
    const std::uint32_t l4 = rel - ly.l3_len;
    return l4 == 6 || l4 == 7 || l4 == sizeof(wire::UdpHdr) + kBthFecnByte;
}

/**
 * Flips one random bit of @p b after the Ethernet header (and 802.1Q tag), chosen outside the
 * ICRC-masked fields, so that the receiver's ICRC (or an earlier header check) rejects the frame.
 * A frame with nothing after the Ethernet header is left alone.
 */
inline void corrupt_one_bit(std::mt19937_64& rng, PktBuf& b, const Layout& ly) noexcept {
    const std::uint32_t first = ly.l3 != 0 ? ly.l3 : kEthHeader;
    if (b.len <= first) return;
    const std::uint32_t span = b.len - first;
    // Rejection sampling over the bits the ICRC covers; a RoCE frame always has many (its own
    // ICRC), so this ends in a few draws. The bound keeps the datapath bounded regardless.
    std::uint32_t off = b.len - 1;
    unsigned bit = 0;
    for (int tries = 0; tries < 64; ++tries) {
        const std::uint64_t r = rng();
        off = first + static_cast<std::uint32_t>((r >> 3) % span);
        bit = static_cast<unsigned>(r & 7u);
        if (!icrc_masked(ly, off, bit)) break;
    }
    b.data[off] = static_cast<std::uint8_t>(b.data[off] ^ (1u << bit));
}

// ---- egress queue model ----

/**
 * Bytes queued and not yet serialised at @p now_ps when the queue drains at @p gbps (Gb/s) and
 * its last byte leaves at @p busy_until_ps (times in ps on one origin). 0 with infinite bandwidth.
 */
[[nodiscard]] inline std::uint64_t backlog_bytes(std::uint64_t busy_until_ps, std::uint64_t now_ps,
                                                 double gbps) noexcept {
    if (!(gbps > 0.0) || busy_until_ps <= now_ps) return 0;
    // ps × Gb/s = 10^-3 bits; / 8000 gives bytes.
    return static_cast<std::uint64_t>(static_cast<double>(busy_until_ps - now_ps) * gbps / 8000.0);
}

/** ps to serialise @p len bytes at @p gbps (Gb/s); 0 with infinite bandwidth (gbps <= 0). */
[[nodiscard]] inline std::uint64_t serialisation_ps(std::uint32_t len, double gbps) noexcept {
    if (!(gbps > 0.0)) return 0;
    return static_cast<std::uint64_t>(std::llround(static_cast<double>(len) * 8000.0 / gbps));
}

} // namespace droce::sim::detail
