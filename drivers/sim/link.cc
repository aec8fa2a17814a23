/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * The impairment pipeline of sim/link.h. What it changes in a frame is the IP ECN field (and the
 * IPv4 header checksum with it), for corruption one bit, and, for trimming, the length: the payload
 * cut off, the lengths, checksums, DSCP and ICRC rewritten.
 */
#include "sim/link.h"

#include <algorithm>
#include <cmath>
#include <span>

#include "wire/bth.h"
#include "wire/eth.h"
#include "wire/icrc.h"
#include "wire/ipv4.h"
#include "wire/ipv6.h"
#include "wire/udp.h"

namespace droce::sim::detail {

namespace {

constexpr unsigned kEcnCe = 3;
constexpr std::uint32_t kBthFecnByte = 4; // FECN, BECN, resv6: masked by the ICRC

// ---- randomness ----

/** Uniform double in [0, 1) from the top 53 bits of one draw. */
double uniform(std::mt19937_64& rng) noexcept {
    return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

/**
 * True with probability @p p. p <= 0 (or NaN) is never and p >= 1 always, neither drawing, so
 * that a setting of 0 or 1 leaves the other decisions' draws where they were.
 */
bool chance(std::mt19937_64& rng, double p) noexcept {
    if (!(p > 0.0)) return false;
    if (p >= 1.0) return true;
    return uniform(rng) < p;
}

// ---- frame ----

/** Where the layers of a frame start, as far as the pipeline needs them. */
struct Layout {
    std::uint32_t l3 = 0;     ///< IP header offset (after Ethernet and any 802.1Q tag)
    std::uint32_t l3_len = 0; ///< IP header bytes; 0 if not IP
    bool ipv4 = false;
    bool ipv6 = false;
    bool roce = false; ///< UDP to port 4791 follows the IP header
};

/**
 * The pipeline's one frame parser. Not wire::parse_frame: that one checks and walks the whole
 * RoCEv2 frame and resets a ParsedFrame of some 200 bytes each time, which doubled the fabric's
 * cost per frame, for the few header fields read here.
 */
Layout layout_of(const PktBuf& b) noexcept {
    Layout ly;
    const std::uint8_t* d = b.data;
    std::uint32_t off = sizeof(wire::EthHdr);
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
int ecn_of(const PktBuf& b, const Layout& ly) noexcept {
    if (ly.ipv4)
        return static_cast<int>(reinterpret_cast<const wire::Ipv4Hdr*>(b.data + ly.l3)->ecn());
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
bool mark_ce(PktBuf& b, const Layout& ly) noexcept {
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
 * only between kmin and kmax.
 */
bool red_decides_mark(std::mt19937_64& rng, std::uint64_t kmin, std::uint64_t kmax, double pmax,
                      std::uint64_t backlog) noexcept {
    if (backlog >= kmax) return true;
    if (backlog < kmin) return false;
    const double frac = static_cast<double>(backlog - kmin) / static_cast<double>(kmax - kmin);
    return chance(rng, pmax * frac);
}

// ---- corruption ----

/**
 * True if bit @p bit (0 = least significant) of byte @p off is one the RoCEv2 ICRC masks
 * (IBTA A17.3.3): IPv4 TOS, TTL, checksum; IPv6 traffic class, flow label, hop limit; UDP
 * checksum; BTH FECN/BECN/resv6. Flipping those would go unnoticed.
 */
bool icrc_masked(const Layout& ly, std::uint32_t off, unsigned bit) noexcept {
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
void corrupt_one_bit(std::mt19937_64& rng, PktBuf& b, const Layout& ly) noexcept {
    const std::uint32_t first =
        ly.l3 != 0 ? ly.l3 : static_cast<std::uint32_t>(sizeof(wire::EthHdr));
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

// ---- trimming ----

constexpr std::uint32_t kIcrcBytes = 4;
constexpr std::uint32_t kBthFlagsByte = 1; // SE, MigReq, PadCnt (bits 5:4), TVer
constexpr std::uint8_t kBthPadMask = 0x30;

/** LinkConfig::trim_keep_bytes as applied: rounded down to a multiple of 4, at least a BTH. */
std::uint32_t trim_keep(const LinkConfig& c) noexcept {
    return std::max<std::uint32_t>(c.trim_keep_bytes & ~3u,
                                   static_cast<std::uint32_t>(sizeof(wire::Bth)));
}

/** RFC 1071 ones-complement sum of @p n bytes, big-endian words, added to @p sum (not folded). */
std::uint32_t ones_sum(const std::uint8_t* p, std::uint32_t n, std::uint32_t sum) noexcept {
    for (std::uint32_t i = 0; i + 1 < n; i += 2)
        sum += static_cast<std::uint32_t>(p[i] << 8 | p[i + 1]);
    if ((n & 1u) != 0) sum += static_cast<std::uint32_t>(p[n - 1] << 8);
    return sum;
}

/**
 * UDP checksum of the IPv6 datagram at @p udp (@p udp_len bytes, checksum field 0) under the
 * addresses of @p ip, as wire::build_frame computes it: 0 is sent as 0xffff (RFC 8200).
 */
std::uint16_t udp6_checksum(const wire::Ipv6Hdr& ip, const std::uint8_t* udp,
                            std::uint32_t udp_len) noexcept {
    std::uint32_t sum = ones_sum(ip.src.data(), 32, 0); // src and dst, adjacent
    sum += (udp_len >> 16) + (udp_len & 0xffffu) + wire::kIpProtoUdp;
    sum = ones_sum(udp, udp_len, sum);
    while ((sum >> 16) != 0)
        sum = (sum & 0xffffu) + (sum >> 16);
    const auto c = static_cast<std::uint16_t>(~sum);
    return c == 0 ? 0xffff : c;
}

/**
 * Trims @p b as LinkConfig documents it: keeps the headers up to UDP and trim_keep(c) bytes of the
 * UDP payload, appends a fresh ICRC, rewrites lengths, checksums, pad count and DSCP. False, with
 * @p b unchanged, when it is not a RoCEv2 frame, its lengths do not hold together or its payload
 * (ICRC excluded) is no longer than what would be kept.
 */
bool trim_frame(PktBuf& b, const Layout& ly, const LinkConfig& c) noexcept {
    if (!ly.roce) return false;
    const std::uint32_t l4 = ly.l3 + ly.l3_len;
    auto* udp = reinterpret_cast<wire::UdpHdr*>(b.data + l4);
    const std::uint32_t udp_len = udp->length.get();
    if (udp_len < sizeof(wire::UdpHdr) || l4 + udp_len > b.len) return false;
    const std::uint32_t keep = trim_keep(c);
    const std::uint32_t payload = udp_len - static_cast<std::uint32_t>(sizeof(wire::UdpHdr));
    if (payload < kIcrcBytes || payload - kIcrcBytes <= keep) return false;

    const std::uint32_t bth = l4 + static_cast<std::uint32_t>(sizeof(wire::UdpHdr));
    const std::uint32_t new_udp_len = static_cast<std::uint32_t>(sizeof(wire::UdpHdr)) + keep +
                                      kIcrcBytes; // <= payload: fits 16 bits
    b.data[bth + kBthFlagsByte] =
        static_cast<std::uint8_t>(b.data[bth + kBthFlagsByte] & ~kBthPadMask);
    const unsigned dscp = c.trim_dscp & 0x3fu;
    udp->length.set(static_cast<std::uint16_t>(new_udp_len));
    udp->checksum.set(0);
    if (ly.ipv4) {
        auto* ip = reinterpret_cast<wire::Ipv4Hdr*>(b.data + ly.l3);
        ip->tos = static_cast<std::uint8_t>(dscp << 2 | ip->ecn());
        ip->total_length.set(static_cast<std::uint16_t>(ly.l3_len + new_udp_len));
        ip->checksum.set(0);
        ip->checksum.set(wire::ipv4_header_checksum(ip, ly.l3_len));
    } else {
        auto* ip = reinterpret_cast<wire::Ipv6Hdr*>(b.data + ly.l3);
        ip->set_vtc_flow(dscp << 2 | (ip->traffic_class() & 3u), ip->flow_label());
        ip->payload_length.set(static_cast<std::uint16_t>(new_udp_len));
    }
    // The ICRC masks the UDP checksum, so it comes first; the IPv6 UDP checksum covers the ICRC.
    const std::uint32_t icrc_off = bth + keep;
    wire::store_icrc(b.data + icrc_off,
                     wire::icrc_compute(
                         std::span<const std::uint8_t>(b.data + ly.l3, icrc_off - ly.l3), ly.ipv6));
    if (ly.ipv6)
        udp->checksum.set(udp6_checksum(*reinterpret_cast<const wire::Ipv6Hdr*>(b.data + ly.l3),
                                        b.data + l4, new_udp_len));
    b.len = l4 + new_udp_len;
    return true;
}

// ---- egress queue model ----

/**
 * Bytes queued and not yet serialised at @p now_ps when the queue drains at @p gbps (Gb/s) and
 * its last byte leaves at @p busy_until_ps. 0 with infinite bandwidth.
 */
std::uint64_t backlog_bytes(std::uint64_t busy_until_ps, std::uint64_t now_ps,
                            double gbps) noexcept {
    if (!(gbps > 0.0) || busy_until_ps <= now_ps) return 0;
    // ps × Gb/s = 10^-3 bits; / 8000 gives bytes.
    return static_cast<std::uint64_t>(static_cast<double>(busy_until_ps - now_ps) * gbps / 8000.0);
}

/** ps to serialise @p len bytes at @p gbps (Gb/s); 0 with infinite bandwidth (gbps <= 0). */
std::uint64_t serialisation_ps(std::uint32_t len, double gbps) noexcept {
    if (!(gbps > 0.0)) return 0;
    return static_cast<std::uint64_t>(std::llround(static_cast<double>(len) * 8000.0 / gbps));
}

} // namespace

std::uint64_t Link::backlog(std::uint64_t now_ns) const noexcept {
    const std::uint64_t now_ps = now_ns > ctx_->t0_ns ? (now_ns - ctx_->t0_ns) * 1000u : 0;
    return backlog_bytes(egress().busy_until_ps, now_ps, config.bandwidth_gbps);
}

std::uint64_t Link::drained_to_ns(std::uint64_t bytes) const noexcept {
    const std::uint64_t busy = egress().busy_until_ps;
    if (!(config.bandwidth_gbps > 0.0)) return ctx_->t0_ns;
    const auto left_ps =
        static_cast<std::uint64_t>(static_cast<double>(bytes) * 8000.0 / config.bandwidth_gbps);
    const std::uint64_t at_ps = busy > left_ps ? busy - left_ps : 0;
    return ctx_->t0_ns + (at_ps + 999) / 1000; // rounded up: backlog() <= bytes from then on
}

void Link::drop(PktBuf* b, LinkCounter why) noexcept {
    stats.inc(why);
    ctx_->pool->release(b);
}

void Link::push(PktBuf* b, std::uint64_t deliver_ns, std::uint16_t hold_left,
                std::uint64_t hold_until_ns) noexcept {
    Entry e;
    e.buf = b;
    e.deliver_ns = deliver_ns;
    e.hold_until_ns = hold_until_ns;
    e.seq = ctx_->next_seq++;
    e.hold_left = hold_left;
    e.state = hold_left > 0 ? EntryState::held : EntryState::live;
    ring.push(e);
    ++ctx_->in_flight;
}

void Link::offer(PktBuf* b, std::uint64_t now_ns) noexcept {
    const LinkConfig& c = config;
    std::mt19937_64& rng = ctx_->rng;
    stats.inc(LinkCounter::tx_frames);
    if (!c.up) return drop(b, LinkCounter::dropped_down);
    if (chance(rng, c.loss)) return drop(b, LinkCounter::dropped_loss);
    // Serialisation times are kept in ps so that small frames on fast links do not round to whole
    // ns; 2^64 ps is 213 days after t0.
    const std::uint64_t now_ps = now_ns > ctx_->t0_ns ? (now_ns - ctx_->t0_ns) * 1000u : 0;
    EgressQueue& q = queue();
    std::uint64_t& busy_ps = q.busy_until_ps;
    const std::uint64_t backlog = backlog_bytes(busy_ps, now_ps, c.bandwidth_gbps);
    // Between arrivals the backlog only falls: what this frame finds is its low point since the
    // previous one, so a dip to XON, which resumes every port the queue paused, is seen here.
    if (c.pfc_xoff_bytes != 0 && backlog <= c.pfc_xon_bytes)
        q.xon_reached_ns = std::max(q.xon_reached_ns, drained_to_ns(c.pfc_xon_bytes));
    const Layout ly = layout_of(*b);
    // chance() draws nothing for trim 0 (or 1), so the other decisions' draws stay where they were.
    bool trimmed = chance(rng, c.trim) && trim_frame(*b, ly, c);
    bool queue_full = c.queue_bytes != 0 && backlog + b->len > c.queue_bytes;
    if (queue_full && c.trim_when_full) {
        if (!trimmed) trimmed = trim_frame(*b, ly, c);
        queue_full = !trimmed; // a trimmed frame bypasses the queue limit
    }
    if (queue_full || ring.free_slots() == 0) return drop(b, LinkCounter::dropped_queue_full);
    if (trimmed) stats.inc(LinkCounter::trimmed);

    b->ecn_ce = ecn_of(*b, ly) == static_cast<int>(kEcnCe);
    const bool mark =
        (c.ecn && red_decides_mark(rng, c.kmin_bytes, c.kmax_bytes, c.pmax, backlog)) ||
        chance(rng, ecn_mark_probability);
    if (mark && mark_ce(*b, ly)) stats.inc(LinkCounter::ecn_marked);
    if (chance(rng, c.corrupt)) {
        corrupt_one_bit(rng, *b, ly);
        stats.inc(LinkCounter::corrupted);
    }

    busy_ps = std::max(now_ps, busy_ps) + serialisation_ps(b->len, c.bandwidth_gbps);
    const std::uint64_t sent_ps = pacing == Pacing::serialise ? busy_ps : now_ps;
    std::uint64_t deliver_ns = ctx_->t0_ns + (sent_ps + 999u) / 1000u + c.delay_ns;
    // Never before a frame sent earlier, even if the delay shrank or the queue became shared.
    deliver_ns = std::max({deliver_ns, now_ns, last_deliver_ns_});
    last_deliver_ns_ = deliver_ns;

    std::uint16_t hold_left = 0;
    if (c.reorder_max_frames > 0 && chance(rng, c.reorder)) {
        hold_left = static_cast<std::uint16_t>(1 + rng() % c.reorder_max_frames);
        stats.inc(LinkCounter::reordered);
    }
    push(b, deliver_ns, hold_left, deliver_ns + c.reorder_max_ns);

    if (chance(rng, c.duplicate)) {
        PktBuf* dup = ring.free_slots() != 0 ? ctx_->pool->copy_of(*b) : nullptr;
        if (dup == nullptr) {
            stats.inc(LinkCounter::dropped_no_buffer);
        } else {
            push(dup, deliver_ns, 0, deliver_ns);
            stats.inc(LinkCounter::duplicated);
        }
    }
}

void Link::drop_in_flight() noexcept {
    ctx_->in_flight -= ring.size();
    ring.clear([this](PktBuf* b) noexcept { drop(b, LinkCounter::dropped_down); });
}

} // namespace droce::sim::detail
