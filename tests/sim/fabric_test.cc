/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * drivers/sim: delivery by MAC, broadcast, loss, reorder bound, duplication, corruption, link
 * down, bandwidth/delay timing on a virtual clock, tail drop, RED/ECN marking, packet trimming,
 * the buffer pool and determinism. Frames are real RoCEv2 frames built with lib/wire, so the ICRC
 * tells whether the fabric changed what it may and nothing else.
 */
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <span>
#include <stdexcept>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "common/clock.h"
#include "port/port.h"
#include "sim/fabric.h"
#include "wire/arp.h"
#include "wire/icrc.h"
#include "wire/packet.h"

namespace droce::sim {
namespace {

using LC = LinkCounter;

struct Received {
    std::uint32_t seq;
    std::vector<std::uint8_t> bytes;
    bool ecn_ce;
    std::uint8_t port;
};

class FabricTest : public ::testing::Test {
  protected:
    Clock clock = Clock::virtual_clock();

    static FabricConfig config(std::uint32_t endpoints = 2, std::uint32_t planes = 1,
                               std::uint64_t seed = 7) {
        FabricConfig c;
        c.endpoints = endpoints;
        c.planes = planes;
        c.seed = seed;
        c.pool_buffers = 256;
        c.buffer_capacity = 2048;
        return c;
    }

    /**
     * Builds a RoCEv2 SEND ONLY frame from (from, plane) to @p dst_mac into a buffer of that port,
     * with @p seq in the first payload bytes; total frame length is about payload + 58 (IPv4).
     */
    static PktBuf* make_frame(Fabric& f, std::uint32_t from, std::uint32_t plane,
                              const wire::MacAddr& dst_mac, std::uint32_t seq,
                              std::size_t payload_len = 64, std::uint8_t tos = 0,
                              bool ipv6 = false) {
        PktBuf* b = nullptr;
        if (f.port(from, plane).alloc_bulk(&b, 1) != 1) return nullptr;
        wire::PathHeaders path;
        path.src_mac = Fabric::mac(from, plane);
        path.dst_mac = dst_mac;
        path.ipv6 = ipv6;
        path.src_ip[15] = static_cast<std::uint8_t>(from + 1);
        path.dst_ip[15] = 100;
        if (!ipv6) {
            path.src_ip[10] = path.src_ip[11] = 0xff;
            path.dst_ip[10] = path.dst_ip[11] = 0xff;
        }
        path.tos = tos;
        path.flow_label = 0x12345;
        wire::PacketFields fields;
        fields.opcode = wire::Opcode::RC_SEND_ONLY;
        fields.dest_qp = 0x11;
        fields.psn = wire::Psn(seq);
        std::vector<std::uint8_t> payload(std::max<std::size_t>(payload_len, 4), 0xa5);
        std::memcpy(payload.data(), &seq, sizeof(seq));
        b->len = static_cast<std::uint32_t>(wire::build_frame(path, fields, payload, b->room()));
        EXPECT_GT(b->len, 0u);
        return b;
    }

    /**
     * A frame of exactly @p total bytes (IPv4): built with the largest payload that fits, then
     * zero-padded at the end (bytes past the IP length are Ethernet padding to the parser).
     */
    static PktBuf* make_sized(Fabric& f, std::uint32_t from, std::uint32_t plane,
                              const wire::MacAddr& dst, std::uint32_t seq, std::uint32_t total,
                              std::uint8_t tos = 0) {
        PktBuf* b = make_frame(f, from, plane, dst, seq, (total - 58) & ~3u, tos);
        if (b == nullptr) return nullptr;
        EXPECT_LE(b->len, total);
        std::memset(b->data + b->len, 0, total - b->len);
        b->len = total;
        return b;
    }

    static void send(Fabric& f, std::uint32_t from, std::uint32_t plane, PktBuf* b) {
        ASSERT_NE(b, nullptr);
        EXPECT_EQ(f.port(from, plane).tx_burst(&b, 1), 1);
    }

    static std::uint32_t seq_of(const PktBuf& b) {
        wire::ParsedFrame pf;
        wire::ParseOptions opts;
        opts.verify_icrc = false;
        if (wire::parse_frame(b.frame(), pf, opts) != wire::RejectReason::ok ||
            pf.payload.size() < 4)
            return ~0u;
        std::uint32_t s = 0;
        std::memcpy(&s, pf.payload.data(), sizeof(s));
        return s;
    }

    /** Receives everything receivable now on (e, p), frees the buffers, returns copies. */
    static std::vector<Received> drain(Fabric& f, std::uint32_t e, std::uint32_t p) {
        std::vector<Received> out;
        std::array<PktBuf*, 32> bufs{};
        for (;;) {
            const std::uint16_t n =
                f.port(e, p).rx_burst(bufs.data(), static_cast<std::uint16_t>(bufs.size()));
            for (std::uint16_t i = 0; i < n; ++i) {
                const PktBuf& b = *bufs[i];
                out.push_back({seq_of(b), std::vector<std::uint8_t>(b.data, b.data + b.len),
                               b.ecn_ce, b.port});
            }
            f.port(e, p).free_bulk(bufs.data(), n);
            if (n == 0) break;
        }
        return out;
    }

    /** Advances the virtual clock event by event until nothing is in flight, receiving on (e, p).
     */
    std::vector<Received> drain_all(Fabric& f, std::uint32_t e, std::uint32_t p) {
        std::vector<Received> out = drain(f, e, p);
        while (f.in_flight() > 0) {
            const std::uint64_t t = f.next_event_ns();
            EXPECT_NE(t, 0u);
            clock.set(t);
            auto more = drain(f, e, p);
            out.insert(out.end(), more.begin(), more.end());
        }
        return out;
    }

    static bool parses_ok(const std::vector<std::uint8_t>& bytes) {
        wire::ParsedFrame pf;
        return wire::parse_frame(bytes, pf) == wire::RejectReason::ok;
    }

    /**
     * Builds an RC RDMA WRITE ONLY frame (BTH, RETH, @p payload_len bytes of payload with @p seq in
     * the first four) from (from, plane) to @p dst_mac, optionally IPv6 and/or 802.1Q tagged.
     */
    static PktBuf* make_write(Fabric& f, std::uint32_t from, std::uint32_t plane,
                              const wire::MacAddr& dst_mac, std::uint32_t seq,
                              std::size_t payload_len, std::uint8_t tos, bool ipv6,
                              bool vlan = false) {
        PktBuf* b = nullptr;
        if (f.port(from, plane).alloc_bulk(&b, 1) != 1) return nullptr;
        wire::PathHeaders path;
        path.src_mac = Fabric::mac(from, plane);
        path.dst_mac = dst_mac;
        path.has_vlan = vlan;
        path.vlan_tci = 0x2005;
        path.ipv6 = ipv6;
        path.src_ip[15] = static_cast<std::uint8_t>(from + 1);
        path.dst_ip[15] = 100;
        if (!ipv6) {
            path.src_ip[10] = path.src_ip[11] = 0xff;
            path.dst_ip[10] = path.dst_ip[11] = 0xff;
        }
        path.tos = tos;
        path.flow_label = 0x12345;
        wire::PacketFields fields;
        fields.opcode = wire::Opcode::RC_RDMA_WRITE_ONLY;
        fields.dest_qp = 0x11;
        fields.ack_req = true;
        fields.psn = wire::Psn(seq);
        fields.va = 0x1122334455667788u;
        fields.rkey = 0xabcdef01u;
        fields.dma_len = static_cast<std::uint32_t>(payload_len);
        std::vector<std::uint8_t> payload(std::max<std::size_t>(payload_len, 4));
        for (std::size_t i = 0; i < payload.size(); ++i)
            payload[i] = static_cast<std::uint8_t>(i * 7 + 3);
        std::memcpy(payload.data(), &seq, sizeof(seq));
        b->len = static_cast<std::uint32_t>(wire::build_frame(path, fields, payload, b->room()));
        EXPECT_GT(b->len, 0u);
        return b;
    }

    /** An ARP request (42 bytes) from (from, plane) to @p dst_mac. */
    static PktBuf* make_arp(Fabric& f, std::uint32_t from, std::uint32_t plane,
                            const wire::MacAddr& dst_mac) {
        PktBuf* b = nullptr;
        if (f.port(from, plane).alloc_bulk(&b, 1) != 1) return nullptr;
        wire::EthHdr eth{};
        eth.dst = dst_mac;
        eth.src = Fabric::mac(from, plane);
        eth.ether_type.set(wire::kEtherTypeArp);
        wire::ArpHdr arp{};
        arp.set_ethernet_ipv4();
        arp.set_op(wire::ArpOp::request);
        arp.sha = eth.src;
        arp.spa = {10, 0, 0, static_cast<std::uint8_t>(from + 1)};
        arp.tpa = {10, 0, 0, 100};
        std::memcpy(b->data, &eth, sizeof(eth));
        std::memcpy(b->data + sizeof(eth), &arp, sizeof(arp));
        b->len = sizeof(eth) + sizeof(arp);
        return b;
    }

    /** True if the UDP checksum of IPv6 frame @p pf is present and right (RFC 8200). */
    static bool udp6_checksum_ok(const wire::ParsedFrame& pf) {
        std::uint32_t sum = 0;
        auto add = [&sum](const std::uint8_t* p, std::size_t n) {
            for (std::size_t i = 0; i + 1 < n; i += 2)
                sum += static_cast<std::uint32_t>(p[i] << 8 | p[i + 1]);
            if (n & 1) sum += static_cast<std::uint32_t>(p[n - 1] << 8);
        };
        const std::uint32_t len = pf.udp->length.get();
        add(pf.ipv6->src.data(), 32);
        sum += len + wire::kIpProtoUdp;
        add(reinterpret_cast<const std::uint8_t*>(pf.udp), len);
        while (sum >> 16)
            sum = (sum & 0xffff) + (sum >> 16);
        return sum == 0xffff && pf.udp->checksum.get() != 0;
    }
};

TEST_F(FabricTest, MacAddresses) {
    EXPECT_EQ(Fabric::mac(3, 2), (wire::MacAddr{0x02, 0, 0, 0, 3, 2}));
    Fabric f(&clock, config(2, 4));
    EXPECT_EQ(f.endpoints(), 2u);
    EXPECT_EQ(f.planes(), 4u);
    EXPECT_EQ(f.port(0, 0).max_frame(), 2048u);
    EXPECT_TRUE(f.port(1, 3).link_up());
    EXPECT_EQ(f.next_event_ns(), 0u);
}

TEST_F(FabricTest, DeliveryByMacOnItsPlaneOnly) {
    Fabric f(&clock, config(3, 2));
    const std::uint32_t pool = f.pool_free();
    send(f, 0, 1, make_frame(f, 0, 1, Fabric::mac(2, 1), 42));
    EXPECT_EQ(f.in_flight(), 1u);
    EXPECT_TRUE(drain(f, 1, 1).empty());
    EXPECT_TRUE(drain(f, 2, 0).empty());
    EXPECT_TRUE(drain(f, 0, 1).empty());
    auto got = drain(f, 2, 1);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].seq, 42u);
    EXPECT_EQ(got[0].port, 1u);
    EXPECT_TRUE(parses_ok(got[0].bytes));
    EXPECT_EQ(f.link_stats(0, 2, 1)[LC::tx_frames], 1u);
    EXPECT_EQ(f.link_stats(0, 2, 1)[LC::delivered], 1u);
    EXPECT_EQ(f.port_stats(0, 1)[PortCounter::tx_frames], 1u);
    EXPECT_EQ(f.port_stats(2, 1)[PortCounter::rx_frames], 1u);
    EXPECT_EQ(f.pool_free(), pool);

    // Two senders into one port: both arrive, in send order.
    send(f, 0, 0, make_frame(f, 0, 0, Fabric::mac(1, 0), 1));
    send(f, 2, 0, make_frame(f, 2, 0, Fabric::mac(1, 0), 2));
    got = drain(f, 1, 0);
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0].seq, 1u);
    EXPECT_EQ(got[1].seq, 2u);
}

TEST_F(FabricTest, LoopbackToOwnMac) {
    Fabric f(&clock, config(2, 1));
    send(f, 1, 0, make_frame(f, 1, 0, Fabric::mac(1, 0), 5));
    EXPECT_TRUE(drain(f, 0, 0).empty());
    auto got = drain(f, 1, 0);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].seq, 5u);
    EXPECT_EQ(f.link_stats(1, 1, 0)[LC::delivered], 1u);
}

TEST_F(FabricTest, UnknownDestinationIsDropped) {
    Fabric f(&clock, config(2, 2));
    const std::uint32_t pool = f.pool_free();
    send(f, 0, 0, make_frame(f, 0, 0, Fabric::mac(1, 1), 1)); // MAC of plane 1 sent on plane 0
    send(f, 0, 0, make_frame(f, 0, 0, Fabric::mac(5, 0), 2)); // no endpoint 5
    send(f, 0, 0, make_frame(f, 0, 0, wire::MacAddr{0x04, 1, 2, 3, 4, 5}, 3));
    EXPECT_EQ(f.port_stats(0, 0)[PortCounter::tx_no_route], 3u);
    EXPECT_EQ(f.in_flight(), 0u);
    EXPECT_EQ(f.pool_free(), pool);
}

TEST_F(FabricTest, InvalidFramesAreCountedAndFreed) {
    Fabric f(&clock, config());
    const std::uint32_t pool = f.pool_free();
    PktBuf* b = nullptr;
    ASSERT_EQ(f.port(0, 0).alloc_bulk(&b, 1), 1);
    b->len = 10; // shorter than an Ethernet header
    EXPECT_EQ(f.port(0, 0).tx_burst(&b, 1), 1);
    // A frame longer than its buffer, and one whose data pointer left its buffer.
    ASSERT_EQ(f.port(0, 0).alloc_bulk(&b, 1), 1);
    b->len = b->capacity + 1;
    EXPECT_EQ(f.port(0, 0).tx_burst(&b, 1), 1);
    ASSERT_EQ(f.port(0, 0).alloc_bulk(&b, 1), 1);
    b->data += 100;
    b->len = b->capacity - 50;
    EXPECT_EQ(f.port(0, 0).tx_burst(&b, 1), 1);
    // Moving data inside the buffer is fine, and alloc hands the buffer out whole again.
    PktBuf* moved = make_frame(f, 0, 0, Fabric::mac(1, 0), 77, 64);
    ASSERT_NE(moved, nullptr);
    std::uint8_t* const start = moved->data;
    std::memmove(start + 8, start, moved->len);
    moved->data = start + 8;
    send(f, 0, 0, moved);
    auto got = drain(f, 1, 0);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].seq, 77u);
    PktBuf* again = nullptr;
    ASSERT_EQ(f.port(0, 0).alloc_bulk(&again, 1), 1);
    EXPECT_EQ(again->data, start); // LIFO pool: the same buffer, data restored
    EXPECT_EQ(again->capacity, 2048u);
    f.port(0, 0).free_bulk(&again, 1);

    std::uint8_t foreign_data[64] = {};
    PktBuf foreign;
    foreign.data = foreign_data;
    foreign.len = 64;
    foreign.capacity = 64;
    PktBuf* fp = &foreign;
    EXPECT_EQ(f.port(0, 0).tx_burst(&fp, 1), 1);
    f.port(0, 0).free_bulk(&fp, 1);
    EXPECT_EQ(f.port_stats(0, 0)[PortCounter::tx_invalid], 4u);
    EXPECT_EQ(f.port_stats(0, 0)[PortCounter::free_invalid], 1u);
    EXPECT_EQ(f.pool_free(), pool);
}

TEST_F(FabricTest, BroadcastGoesToEveryOtherEndpointOfThePlane) {
    Fabric f(&clock, config(4, 2));
    const std::uint32_t pool = f.pool_free();
    const wire::MacAddr bcast{0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    send(f, 1, 1, make_frame(f, 1, 1, bcast, 9));
    EXPECT_EQ(f.in_flight(), 3u);
    EXPECT_TRUE(drain(f, 1, 1).empty());
    for (std::uint32_t e : {0u, 2u, 3u}) {
        EXPECT_TRUE(drain(f, e, 0).empty());
        auto got = drain(f, e, 1);
        ASSERT_EQ(got.size(), 1u) << "endpoint " << e;
        EXPECT_EQ(got[0].seq, 9u);
        EXPECT_EQ(f.link_stats(1, e, 1)[LC::delivered], 1u);
    }
    EXPECT_EQ(f.pool_free(), pool);
}

TEST_F(FabricTest, LossRateAndSameSeedSameSequence) {
    auto run = [&](std::uint64_t seed) {
        Fabric f(&clock, config(2, 1, seed));
        LinkConfig lc;
        lc.loss = 0.1;
        f.set_link_config(0, 1, 0, lc);
        std::vector<std::uint32_t> seqs;
        for (std::uint32_t i = 0; i < 10000; ++i) {
            send(f, 0, 0, make_frame(f, 0, 0, Fabric::mac(1, 0), i));
            if (i % 64 == 63 || i == 9999)
                for (const Received& r : drain(f, 1, 0))
                    seqs.push_back(r.seq);
        }
        const LinkStats& s = f.link_stats(0, 1, 0);
        EXPECT_EQ(s[LC::tx_frames], 10000u);
        EXPECT_EQ(s[LC::delivered] + s[LC::dropped_loss], 10000u);
        EXPECT_EQ(s[LC::delivered], seqs.size());
        return seqs;
    };
    const auto a = run(1234);
    const auto b = run(1234);
    const auto c = run(99);
    const double lost = 10000.0 - static_cast<double>(a.size());
    EXPECT_NEAR(lost / 10000.0, 0.1, 0.01); // 10 standard deviations is 0.03; 0.01 is 3.3
    EXPECT_EQ(a, b);
    EXPECT_NE(a, c);
    EXPECT_TRUE(std::is_sorted(a.begin(), a.end()));
}

TEST_F(FabricTest, ReorderStaysWithinTheBound) {
    Fabric f(&clock, config(2, 1, 11));
    LinkConfig lc;
    lc.reorder = 0.3;
    lc.reorder_max_frames = 3;
    lc.reorder_max_ns = 1'000'000;
    lc.delay_ns = 500;
    f.set_link_config(0, 1, 0, lc);
    constexpr std::uint32_t kFrames = 3000;
    std::vector<Received> got;
    for (std::uint32_t i = 0; i < kFrames; ++i) {
        send(f, 0, 0, make_frame(f, 0, 0, Fabric::mac(1, 0), i));
        clock.advance(100);
        auto more = drain(f, 1, 0);
        got.insert(got.end(), more.begin(), more.end());
    }
    auto rest = drain_all(f, 1, 0);
    got.insert(got.end(), rest.begin(), rest.end());

    ASSERT_EQ(got.size(), kFrames);
    std::vector<std::uint32_t> seqs;
    for (const auto& r : got)
        seqs.push_back(r.seq);
    std::vector<std::uint32_t> sorted = seqs;
    std::sort(sorted.begin(), sorted.end());
    for (std::uint32_t i = 0; i < kFrames; ++i)
        ASSERT_EQ(sorted[i], i); // each exactly once
    std::uint32_t max_overtaken = 0, out_of_order = 0;
    for (std::size_t i = 0; i < seqs.size(); ++i) {
        std::uint32_t overtaken = 0;
        for (std::size_t j = 0; j < i; ++j)
            overtaken += seqs[j] > seqs[i] ? 1u : 0u;
        max_overtaken = std::max(max_overtaken, overtaken);
        out_of_order += overtaken > 0 ? 1u : 0u;
    }
    EXPECT_LE(max_overtaken, 3u);
    EXPECT_GT(out_of_order, kFrames / 10); // 30% held, most of them overtaken
    EXPECT_NEAR(static_cast<double>(f.link_stats(0, 1, 0)[LC::reordered]) / kFrames, 0.3, 0.04);
}

TEST_F(FabricTest, HeldFrameIsReleasedByTimeWhenNothingFollows) {
    Fabric f(&clock, config());
    LinkConfig lc;
    lc.reorder = 1.0;
    lc.reorder_max_frames = 2;
    lc.reorder_max_ns = 5000;
    f.set_link_config(0, 1, 0, lc);
    const std::uint64_t t0 = clock.now_ns();
    send(f, 0, 0, make_frame(f, 0, 0, Fabric::mac(1, 0), 1));
    EXPECT_TRUE(drain(f, 1, 0).empty());
    EXPECT_EQ(f.next_event_ns(), t0 + 5000);
    clock.set(t0 + 4999);
    EXPECT_TRUE(drain(f, 1, 0).empty());
    clock.set(t0 + 5000);
    EXPECT_EQ(drain(f, 1, 0).size(), 1u);
    EXPECT_EQ(f.next_event_ns(), 0u);
}

TEST_F(FabricTest, Duplication) {
    Fabric f(&clock, config());
    LinkConfig lc;
    lc.duplicate = 1.0;
    f.set_link_config(0, 1, 0, lc);
    for (std::uint32_t i = 0; i < 10; ++i)
        send(f, 0, 0, make_frame(f, 0, 0, Fabric::mac(1, 0), i));
    auto got = drain(f, 1, 0);
    ASSERT_EQ(got.size(), 20u);
    for (std::uint32_t i = 0; i < 10; ++i) {
        EXPECT_EQ(got[2 * i].seq, i);
        EXPECT_EQ(got[2 * i + 1].seq, i);
        EXPECT_EQ(got[2 * i].bytes, got[2 * i + 1].bytes);
        EXPECT_TRUE(parses_ok(got[2 * i + 1].bytes));
    }
    EXPECT_EQ(f.link_stats(0, 1, 0)[LC::duplicated], 10u);
    EXPECT_EQ(f.link_stats(0, 1, 0)[LC::delivered], 20u);

    lc.duplicate = 0.25;
    f.set_link_config(0, 1, 0, lc);
    std::size_t n = 0;
    for (std::uint32_t i = 0; i < 4000; ++i) {
        send(f, 0, 0, make_frame(f, 0, 0, Fabric::mac(1, 0), i));
        if (i % 64 == 63) n += drain(f, 1, 0).size();
    }
    n += drain(f, 1, 0).size();
    EXPECT_NEAR(static_cast<double>(n - 4000) / 4000.0, 0.25, 0.03);
}

TEST_F(FabricTest, CorruptionFlipsExactlyOneBitAfterTheEthernetHeader) {
    Fabric f(&clock, config(2, 1, 5));
    LinkConfig lc;
    lc.corrupt = 1.0;
    f.set_link_config(0, 1, 0, lc);
    std::vector<std::size_t> offsets;
    for (std::uint32_t i = 0; i < 400; ++i) {
        const bool v6 = i % 2 == 1;
        PktBuf* b = make_frame(f, 0, 0, Fabric::mac(1, 0), i, 16 + i % 50, 0x02, v6);
        ASSERT_NE(b, nullptr);
        const std::vector<std::uint8_t> sent(b->data, b->data + b->len);
        ASSERT_TRUE(parses_ok(sent));
        send(f, 0, 0, b);
        auto got = drain(f, 1, 0);
        ASSERT_EQ(got.size(), 1u);
        ASSERT_EQ(got[0].bytes.size(), sent.size());
        unsigned bits = 0;
        for (std::size_t k = 0; k < sent.size(); ++k) {
            const unsigned diff = static_cast<unsigned>(sent[k] ^ got[0].bytes[k]);
            if (diff != 0) {
                EXPECT_GE(k, sizeof(wire::EthHdr));
                offsets.push_back(k);
            }
            bits += static_cast<unsigned>(__builtin_popcount(diff));
        }
        EXPECT_EQ(bits, 1u) << "frame " << i;
        EXPECT_FALSE(parses_ok(got[0].bytes))
            << "frame " << i << " corrupted at " << offsets.back();
    }
    EXPECT_EQ(f.link_stats(0, 1, 0)[LC::corrupted], 400u);
    // The flips spread over the frame, headers and payload alike.
    EXPECT_LT(*std::min_element(offsets.begin(), offsets.end()), 40u);
    EXPECT_GT(*std::max_element(offsets.begin(), offsets.end()), 80u);
}

TEST_F(FabricTest, LinkDownDropsAndLinkUpReportsIt) {
    Fabric f(&clock, config(2, 2));
    f.set_link_up(0, 1, 1, false);
    EXPECT_FALSE(f.port(0, 1).link_up());
    EXPECT_TRUE(f.port(1, 1).link_up()); // the other direction is still up
    EXPECT_TRUE(f.port(0, 0).link_up()); // other planes too
    for (std::uint32_t i = 0; i < 5; ++i)
        send(f, 0, 1, make_frame(f, 0, 1, Fabric::mac(1, 1), i));
    EXPECT_TRUE(drain(f, 1, 1).empty());
    EXPECT_EQ(f.link_stats(0, 1, 1)[LC::dropped_down], 5u);
    EXPECT_EQ(f.pool_free(), 256u);

    f.set_link_up(0, 1, 1, true);
    EXPECT_TRUE(f.port(0, 1).link_up());
    send(f, 0, 1, make_frame(f, 0, 1, Fabric::mac(1, 1), 7));
    EXPECT_EQ(drain(f, 1, 1).size(), 1u);

    // Frames in flight when the link goes down are lost too.
    LinkConfig lc;
    lc.delay_ns = 1000;
    f.set_link_config(0, 1, 1, lc);
    send(f, 0, 1, make_frame(f, 0, 1, Fabric::mac(1, 1), 8));
    f.set_port_up(1, 1, false);
    EXPECT_FALSE(f.port(1, 1).link_up());
    EXPECT_FALSE(f.port(0, 1).link_up());
    clock.advance(2000);
    EXPECT_TRUE(drain(f, 1, 1).empty());
    EXPECT_EQ(f.link_stats(0, 1, 1)[LC::dropped_down], 6u);
    EXPECT_EQ(f.in_flight(), 0u);
    f.set_port_up(1, 1, true);
    EXPECT_TRUE(f.port(0, 1).link_up());
    EXPECT_TRUE(f.link_config(0, 1, 1).up);
}

TEST_F(FabricTest, BandwidthAndDelayTiming) {
    Fabric f(&clock, config());
    LinkConfig lc;
    lc.bandwidth_gbps = 100.0; // 1000 bytes = 80 ns
    lc.delay_ns = 1000;
    f.set_link_config(0, 1, 0, lc);
    const std::uint64_t t0 = clock.now_ns();
    PktBuf* a = make_sized(f, 0, 0, Fabric::mac(1, 0), 1, 1000);
    PktBuf* b = make_sized(f, 0, 0, Fabric::mac(1, 0), 2, 1000);
    ASSERT_EQ(a->len, 1000u);
    ASSERT_EQ(b->len, 1000u);
    send(f, 0, 0, a);
    send(f, 0, 0, b);
    EXPECT_EQ(f.next_event_ns(), t0 + 80 + 1000);
    clock.set(t0 + 1079);
    EXPECT_TRUE(drain(f, 1, 0).empty());
    clock.set(t0 + 1080);
    auto got = drain(f, 1, 0);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].seq, 1u);
    EXPECT_EQ(f.next_event_ns(),
              t0 + 160 + 1000); // the second waited for the first's serialisation
    clock.set(t0 + 1159);
    EXPECT_TRUE(drain(f, 1, 0).empty());
    clock.set(t0 + 1160);
    got = drain(f, 1, 0);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].seq, 2u);
    EXPECT_EQ(f.next_event_ns(), 0u);

    // An idle link starts serialising at once: the queue has drained.
    clock.advance(10'000);
    const std::uint64_t t1 = clock.now_ns();
    send(f, 0, 0, make_sized(f, 0, 0, Fabric::mac(1, 0), 3, 1000));
    EXPECT_EQ(f.next_event_ns(), t1 + 1080);

    // Infinite bandwidth, no delay: receivable at once.
    f.set_link_config(1, 0, 0, LinkConfig{});
    send(f, 1, 0, make_frame(f, 1, 0, Fabric::mac(0, 0), 4));
    EXPECT_EQ(drain(f, 0, 0).size(), 1u);
}

TEST_F(FabricTest, QueueTailDrop) {
    Fabric f(&clock, config());
    LinkConfig lc;
    lc.bandwidth_gbps = 10.0; // 1000 bytes = 800 ns
    lc.queue_bytes = 10'000;
    f.set_link_config(0, 1, 0, lc);
    for (std::uint32_t i = 0; i < 15; ++i)
        send(f, 0, 0, make_sized(f, 0, 0, Fabric::mac(1, 0), i, 1000));
    const LinkStats& s = f.link_stats(0, 1, 0);
    EXPECT_EQ(s[LC::dropped_queue_full], 5u);
    EXPECT_EQ(f.in_flight(), 10u);
    // Half the queue drains; five more fit, the sixth does not.
    clock.advance(5 * 800);
    for (std::uint32_t i = 15; i < 21; ++i)
        send(f, 0, 0, make_sized(f, 0, 0, Fabric::mac(1, 0), i, 1000));
    EXPECT_EQ(s[LC::dropped_queue_full], 6u);
    auto got = drain_all(f, 1, 0);
    ASSERT_EQ(got.size(), 15u);
    for (std::uint32_t i = 0; i < 10; ++i)
        EXPECT_EQ(got[i].seq, i);
    for (std::uint32_t i = 10; i < 15; ++i)
        EXPECT_EQ(got[i].seq, i + 5);
    EXPECT_EQ(f.pool_free(), 256u);
}

TEST_F(FabricTest, LinkRingFullIsTailDrop) {
    FabricConfig c = config();
    c.link_slots = 8;
    Fabric f(&clock, c);
    for (std::uint32_t i = 0; i < 12; ++i)
        send(f, 0, 0, make_frame(f, 0, 0, Fabric::mac(1, 0), i));
    EXPECT_EQ(f.link_stats(0, 1, 0)[LC::dropped_queue_full], 4u);
    EXPECT_EQ(drain(f, 1, 0).size(), 8u);
}

TEST_F(FabricTest, RedMarking) {
    Fabric f(&clock, config(2, 1, 3));
    LinkConfig lc;
    lc.bandwidth_gbps =
        10.0; // 1000 bytes = 800 ns, so frame k of a burst finds k × 1000 bytes queued
    lc.ecn = true;
    lc.kmin_bytes = 10'000;
    lc.kmax_bytes = 30'000;
    lc.pmax = 0.2;
    f.set_link_config(0, 1, 0, lc);
    constexpr std::uint32_t kBurst = 40, kRounds = 500;
    std::uint64_t middle_marks = 0;
    for (std::uint32_t round = 0; round < kRounds; ++round) {
        for (std::uint32_t k = 0; k < kBurst; ++k)
            send(f, 0, 0, make_sized(f, 0, 0, Fabric::mac(1, 0), k, 1000, 0x02 /* ECT(0) */));
        auto got = drain_all(f, 1, 0);
        ASSERT_EQ(got.size(), kBurst);
        for (std::uint32_t k = 0; k < kBurst; ++k) {
            const Received& r = got[k];
            ASSERT_EQ(r.seq, k);
            const bool ce = (r.bytes[15] & 3u) == 3u;
            EXPECT_EQ(ce, r.ecn_ce);
            if (k < 10) {
                EXPECT_FALSE(ce) << "below Kmin, frame " << k;
            } else if (k >= 30) {
                EXPECT_TRUE(ce) << "at or above Kmax, frame " << k;
            } else {
                middle_marks += ce ? 1 : 0;
            }
            if (ce) {
                EXPECT_EQ(r.bytes[15] >> 2, 0u); // DSCP untouched
                EXPECT_EQ(wire::ipv4_header_checksum(r.bytes.data() + 14, 20),
                          0u);                   // checksum still valid
                EXPECT_TRUE(parses_ok(r.bytes)); // the ICRC masks the ECN bits
            }
        }
        clock.advance(100'000);
    }
    // Between Kmin and Kmax: p = Pmax × (q − Kmin)/(Kmax − Kmin) for q = 10000..29000 → 1.9 marks
    // per burst.
    const double expected = 1.9 * kRounds;
    EXPECT_NEAR(static_cast<double>(middle_marks), expected, expected * 0.15);
    EXPECT_EQ(f.link_stats(0, 1, 0)[LC::ecn_marked], middle_marks + 10u * kRounds);
}

TEST_F(FabricTest, RedMarksOnlyEctFrames) {
    Fabric f(&clock, config());
    LinkConfig lc;
    lc.ecn = true; // kmin = kmax = 0: every frame is a candidate
    f.set_link_config(0, 1, 0, lc);
    struct Case {
        std::uint8_t tos;
        bool ipv6;
        bool expect_marked;
    };
    const Case cases[] = {
        {0x00, false, false}, {0x01, false, true}, {0x02, false, true}, {0x03, false, false},
        {0xb8, false, false}, {0xba, false, true}, {0x00, true, false}, {0x02, true, true},
        {0x01, true, true},   {0x03, true, false},
    };
    for (const Case& c : cases) {
        PktBuf* b = make_frame(f, 0, 0, Fabric::mac(1, 0), 1, 64, c.tos, c.ipv6);
        const std::vector<std::uint8_t> sent(b->data, b->data + b->len);
        send(f, 0, 0, b);
        auto got = drain(f, 1, 0);
        ASSERT_EQ(got.size(), 1u);
        const Received& r = got[0];
        wire::ParsedFrame pf;
        ASSERT_EQ(wire::parse_frame(r.bytes, pf), wire::RejectReason::ok) << "tos " << int{c.tos};
        const unsigned tclass = c.ipv6 ? pf.ipv6->traffic_class() : pf.ipv4->tos;
        const bool was_ce = (c.tos & 3u) == 3u;
        EXPECT_EQ(r.ecn_ce, c.expect_marked || was_ce) << "tos " << int{c.tos};
        if (c.expect_marked) {
            EXPECT_EQ(tclass, c.tos | 3u);
            if (c.ipv6) {
                EXPECT_EQ(pf.ipv6->flow_label(), 0x12345u);
            } else {
                EXPECT_EQ(wire::ipv4_header_checksum(pf.ipv4, 20), 0u);
            }
        } else {
            EXPECT_EQ(r.bytes, sent) << "tos " << int{c.tos};
        }
    }
    EXPECT_EQ(f.link_stats(0, 1, 0)[LC::ecn_marked], 5u);
}

TEST_F(FabricTest, TrimCutsARoceFrameToItsHeadersWithAFreshIcrc) {
    Fabric f(&clock, config());
    LinkConfig lc;
    lc.trim = 1.0;
    f.set_link_config(0, 1, 0, lc);
    ASSERT_EQ(lc.trim_keep_bytes, 64u);
    ASSERT_EQ(lc.trim_dscp, 9u);
    struct Case {
        bool ipv6;
        bool vlan;
        std::size_t payload;
        std::uint8_t tos;
    };
    const Case cases[] = {
        {false, false, 1000, 5 << 2 | 2}, {true, false, 1000, 5 << 2 | 1}, {false, true, 999, 0x03},
        {true, true, 1001, 0x00},         {false, false, 1000, 0xff},
    };
    for (const Case& k : cases) {
        SCOPED_TRACE(::testing::Message() << "ipv6 " << k.ipv6 << " vlan " << k.vlan << " payload "
                                          << k.payload << " tos " << int{k.tos});
        PktBuf* b = make_write(f, 0, 0, Fabric::mac(1, 0), 77, k.payload, k.tos, k.ipv6, k.vlan);
        ASSERT_NE(b, nullptr);
        const std::vector<std::uint8_t> sent(b->data, b->data + b->len);
        wire::ParsedFrame orig;
        ASSERT_EQ(wire::parse_frame(sent, orig), wire::RejectReason::ok);
        if (k.ipv6) {
            ASSERT_TRUE(udp6_checksum_ok(orig)); // the checker agrees with build_frame
        }
        send(f, 0, 0, b);
        auto got = drain(f, 1, 0);
        ASSERT_EQ(got.size(), 1u);
        const std::vector<std::uint8_t>& r = got[0].bytes;

        wire::ParsedFrame pf;
        ASSERT_EQ(wire::parse_frame(r, pf), wire::RejectReason::ok);
        EXPECT_TRUE(pf.icrc_checked);
        EXPECT_EQ(pf.icrc_computed, pf.icrc_wire);
        const std::size_t l3 = pf.l3_offset;
        const std::size_t ip_len = k.ipv6 ? sizeof(wire::Ipv6Hdr) : sizeof(wire::Ipv4Hdr);
        const std::size_t udp_len = sizeof(wire::UdpHdr) + 64 + wire::kIcrcSize;
        EXPECT_EQ(r.size(), l3 + ip_len + udp_len);
        EXPECT_EQ(pf.udp->length.get(), udp_len);
        // Ethernet and 802.1Q tag untouched; BTH and RETH kept (pad count 0), payload cut.
        EXPECT_TRUE(
            std::equal(r.begin(), r.begin() + static_cast<std::ptrdiff_t>(l3), sent.begin()));
        EXPECT_EQ(pf.vlan != nullptr, k.vlan);
        EXPECT_EQ(pf.bth->opcode(), wire::Opcode::RC_RDMA_WRITE_ONLY);
        EXPECT_EQ(pf.bth->psn(), orig.bth->psn());
        EXPECT_EQ(pf.bth->dest_qp(), 0x11u);
        EXPECT_TRUE(pf.bth->ack_req());
        EXPECT_EQ(pf.bth->pad_count(), 0u);
        EXPECT_EQ(orig.bth->pad_count(), (4u - k.payload % 4u) % 4u);
        ASSERT_NE(pf.reth, nullptr);
        EXPECT_EQ(std::memcmp(pf.reth, orig.reth, sizeof(wire::Reth)), 0);
        EXPECT_EQ(pf.reth->dma_len.get(), k.payload);
        ASSERT_EQ(pf.payload.size(), 64u - 12u - 16u);
        EXPECT_TRUE(std::equal(pf.payload.begin(), pf.payload.end(), orig.payload.begin()));
        EXPECT_EQ(got[0].seq, 77u);
        // DSCP trim_dscp, ECN kept; lengths and checksums rewritten.
        if (k.ipv6) {
            EXPECT_EQ(pf.ipv6->traffic_class() >> 2, 9u);
            EXPECT_EQ(pf.ipv6->traffic_class() & 3u, k.tos & 3u);
            EXPECT_EQ(pf.ipv6->flow_label(), 0x12345u);
            EXPECT_EQ(pf.ipv6->payload_length.get(), udp_len);
            EXPECT_TRUE(udp6_checksum_ok(pf));
        } else {
            EXPECT_EQ(pf.ipv4->dscp(), 9u);
            EXPECT_EQ(pf.ipv4->ecn(), k.tos & 3u);
            EXPECT_EQ(pf.ipv4->total_length.get(), ip_len + udp_len);
            EXPECT_EQ(wire::ipv4_header_checksum(pf.ipv4, 20), 0u);
            EXPECT_EQ(pf.udp->checksum.get(), 0u);
        }
        EXPECT_EQ(got[0].ecn_ce, (k.tos & 3u) == 3u);
    }
    const LinkStats& s = f.link_stats(0, 1, 0);
    EXPECT_EQ(s[LC::tx_frames], std::size(cases));
    EXPECT_EQ(s[LC::trimmed], std::size(cases));
    EXPECT_EQ(s[LC::delivered], std::size(cases));
    EXPECT_EQ(s[LC::dropped_loss] + s[LC::dropped_queue_full] + s[LC::dropped_down], 0u);
    EXPECT_EQ(f.pool_free(), 256u);
}

TEST_F(FabricTest, TrimKeepBytesIsRoundedDownAndAtLeastTheBth) {
    Fabric f(&clock, config());
    LinkConfig lc;
    lc.trim = 1.0;
    lc.trim_dscp = 46;
    auto trim_with = [&](std::uint16_t keep, bool ipv6) {
        lc.trim_keep_bytes = keep;
        f.set_link_config(0, 1, 0, lc);
        send(f, 0, 0, make_write(f, 0, 0, Fabric::mac(1, 0), 5, 1000, 0x02, ipv6));
        auto got = drain(f, 1, 0);
        EXPECT_EQ(got.size(), 1u);
        return got.empty() ? std::vector<std::uint8_t>{} : got[0].bytes;
    };
    for (const bool ipv6 : {false, true}) {
        SCOPED_TRACE(ipv6 ? "ipv6" : "ipv4");
        const std::size_t udp_off = 14 + (ipv6 ? 40 : 20);
        wire::ParsedFrame pf;
        // 70 keeps 68: BTH, RETH and 40 bytes of payload.
        std::vector<std::uint8_t> r = trim_with(70, ipv6);
        ASSERT_EQ(wire::parse_frame(r, pf), wire::RejectReason::ok);
        EXPECT_EQ(pf.payload.size(), 40u);
        EXPECT_EQ(r.size(), udp_off + 8 + 68 + 4);
        EXPECT_EQ((ipv6 ? pf.ipv6->traffic_class() : pf.ipv4->tos) >> 2, 46u);
        // 28: BTH and RETH only, no payload.
        r = trim_with(28, ipv6);
        ASSERT_EQ(wire::parse_frame(r, pf), wire::RejectReason::ok);
        EXPECT_EQ(pf.payload.size(), 0u);
        // 5 keeps 12, the BTH alone: the RETH is cut, which parse_frame rejects, but the lengths
        // and the ICRC are right.
        r = trim_with(5, ipv6);
        ASSERT_EQ(r.size(), udp_off + 8 + 12 + 4);
        EXPECT_EQ(wire::parse_frame(r, pf), wire::RejectReason::length_mismatch);
        EXPECT_EQ(pf.udp->length.get(), 8u + 12u + 4u);
        EXPECT_EQ(
            wire::icrc_compute(std::span<const std::uint8_t>(r.data() + 14, r.size() - 18), ipv6),
            wire::load_icrc(r.data() + r.size() - 4));
        // 65535 keeps 65532, more than the frame has: not trimmed.
        PktBuf* b = make_write(f, 0, 0, Fabric::mac(1, 0), 5, 1000, 0x02, ipv6);
        const std::vector<std::uint8_t> sent(b->data, b->data + b->len);
        lc.trim_keep_bytes = 65535;
        f.set_link_config(0, 1, 0, lc);
        send(f, 0, 0, b);
        auto got = drain(f, 1, 0);
        ASSERT_EQ(got.size(), 1u);
        EXPECT_EQ(got[0].bytes, sent);
    }
    EXPECT_EQ(f.link_stats(0, 1, 0)[LC::trimmed], 6u);
    EXPECT_EQ(f.link_stats(0, 1, 0)[LC::delivered], 8u);
}

TEST_F(FabricTest, TrimLeavesNonRoceAndShortFramesAlone) {
    Fabric f(&clock, config());
    LinkConfig lc;
    lc.trim = 1.0;
    f.set_link_config(0, 1, 0, lc);
    auto through = [&](PktBuf* b) {
        EXPECT_NE(b, nullptr);
        std::vector<std::uint8_t> sent(b->data, b->data + b->len);
        send(f, 0, 0, b);
        auto got = drain(f, 1, 0);
        EXPECT_EQ(got.size(), 1u);
        return std::make_pair(sent, got.empty() ? std::vector<std::uint8_t>{} : got[0].bytes);
    };
    // ARP.
    auto [arp_sent, arp_got] = through(make_arp(f, 0, 0, Fabric::mac(1, 0)));
    EXPECT_EQ(arp_got, arp_sent);
    // UDP to another port than 4791.
    PktBuf* other = make_write(f, 0, 0, Fabric::mac(1, 0), 1, 1000, 0, false);
    ASSERT_NE(other, nullptr);
    other->data[14 + 20 + 3] = 0xb8; // destination port 4792
    auto [udp_sent, udp_got] = through(other);
    EXPECT_EQ(udp_got, udp_sent);
    // SEND ONLY: 12 + 52 bytes of UDP payload (ICRC excluded) is not longer than 64; 12 + 56 is.
    auto [s52, g52] = through(make_frame(f, 0, 0, Fabric::mac(1, 0), 2, 52));
    EXPECT_EQ(g52, s52);
    auto [s56, g56] = through(make_frame(f, 0, 0, Fabric::mac(1, 0), 3, 56));
    EXPECT_EQ(g56.size(), s56.size() - 4);
    wire::ParsedFrame pf;
    ASSERT_EQ(wire::parse_frame(g56, pf), wire::RejectReason::ok);
    EXPECT_EQ(pf.payload.size(), 52u);
    EXPECT_EQ(f.link_stats(0, 1, 0)[LC::trimmed], 1u);
    EXPECT_EQ(f.link_stats(0, 1, 0)[LC::delivered], 4u);
}

TEST_F(FabricTest, TrimWhenFullTrimsInsteadOfTailDropping) {
    Fabric f(&clock, config());
    LinkConfig lc;
    lc.bandwidth_gbps = 10.0; // 1000 bytes = 800 ns
    lc.queue_bytes = 10'000;
    lc.trim_when_full = true;
    f.set_link_config(0, 1, 0, lc);
    // The burst of QueueTailDrop: the five frames that found the queue full are trimmed instead.
    for (std::uint32_t i = 0; i < 15; ++i)
        send(f, 0, 0, make_sized(f, 0, 0, Fabric::mac(1, 0), i, 1000, 0x02));
    const LinkStats& s = f.link_stats(0, 1, 0);
    EXPECT_EQ(s[LC::dropped_queue_full], 0u);
    EXPECT_EQ(s[LC::trimmed], 5u);
    EXPECT_EQ(f.in_flight(), 15u);
    // A frame that cannot be trimmed is tail-dropped as before.
    send(f, 0, 0, make_arp(f, 0, 0, Fabric::mac(1, 0)));
    EXPECT_EQ(s[LC::dropped_queue_full], 1u);
    const std::uint64_t t0 = clock.now_ns();
    auto got = drain_all(f, 1, 0);
    ASSERT_EQ(got.size(), 15u);
    const std::size_t trimmed_len = 14 + 20 + 8 + 64 + 4;
    for (std::uint32_t i = 0; i < 15; ++i) {
        EXPECT_EQ(got[i].seq, i);
        wire::ParsedFrame pf;
        ASSERT_EQ(wire::parse_frame(got[i].bytes, pf), wire::RejectReason::ok) << i;
        EXPECT_EQ(got[i].bytes.size(), i < 10 ? 1000u : trimmed_len) << i;
        EXPECT_EQ(pf.ipv4->dscp(), i < 10 ? 0u : 9u);
        EXPECT_EQ(pf.ipv4->ecn(), 2u);
    }
    // The trimmed frames still took their (short) turn on the wire after the full ones.
    EXPECT_EQ(clock.now_ns() - t0,
              (10u * 1000u * 8u + 5u * trimmed_len * 8u + 9u) / 10u); // ns at 10 Gb/s, rounded up
    EXPECT_EQ(s[LC::delivered], 15u);
    EXPECT_EQ(f.pool_free(), 256u);
}

TEST_F(FabricTest, TrimDrawIsDeterministicAndZeroOrOneDrawsNothing) {
    // Per delivered frame: seq × 2 + 1 if it arrived trimmed.
    auto run = [&](double trim, std::uint64_t seed) {
        Fabric f(&clock, config(2, 1, seed));
        LinkConfig lc;
        lc.loss = 0.1;
        lc.trim = trim;
        f.set_link_config(0, 1, 0, lc);
        std::vector<std::uint32_t> out;
        for (std::uint32_t i = 0; i < 4000; ++i) {
            send(f, 0, 0, make_frame(f, 0, 0, Fabric::mac(1, 0), i, 200));
            if (i % 64 == 63 || i == 3999)
                for (const Received& r : drain(f, 1, 0))
                    out.push_back(r.seq * 2 + (r.bytes.size() < 200 ? 1u : 0u));
        }
        const LinkStats& s = f.link_stats(0, 1, 0);
        EXPECT_EQ(s[LC::delivered] + s[LC::dropped_loss], 4000u);
        std::uint64_t trimmed = 0;
        for (const std::uint32_t v : out)
            trimmed += v & 1u;
        EXPECT_EQ(s[LC::trimmed], trimmed);
        return out;
    };
    const auto none = run(0.0, 42);
    const auto all = run(1.0, 42);
    ASSERT_EQ(none.size(), all.size()); // the same frames lost: trim 0 and 1 draw nothing
    for (std::size_t i = 0; i < none.size(); ++i) {
        EXPECT_EQ(none[i], all[i] - 1);
        EXPECT_EQ(all[i] & 1u, 1u);
    }
    const auto a = run(0.3, 42);
    EXPECT_EQ(a, run(0.3, 42));
    std::size_t trimmed = 0;
    for (const std::uint32_t v : a)
        trimmed += v & 1u;
    EXPECT_NEAR(static_cast<double>(trimmed) / static_cast<double>(a.size()), 0.3, 0.04);
}

TEST_F(FabricTest, PoolExhaustionReturnsFewerAndRecovers) {
    FabricConfig c = config();
    c.pool_buffers = 8;
    Fabric f(&clock, c);
    std::array<PktBuf*, 16> bufs{};
    EXPECT_EQ(f.port(0, 0).alloc_bulk(bufs.data(), 10), 8);
    EXPECT_EQ(f.pool_free(), 0u);
    EXPECT_EQ(f.port(1, 0).alloc_bulk(bufs.data() + 8, 4), 0);
    EXPECT_EQ(f.port_stats(0, 0)[PortCounter::alloc_failed], 2u);
    EXPECT_EQ(f.port_stats(1, 0)[PortCounter::alloc_failed], 4u);
    for (std::uint32_t i = 0; i < 8; ++i) {
        EXPECT_EQ(bufs[i]->capacity, 2048u);
        EXPECT_EQ(bufs[i]->len, 0u);
        for (std::uint32_t j = 0; j < i; ++j)
            EXPECT_NE(bufs[i]->data, bufs[j]->data);
    }
    f.port(0, 0).free_bulk(bufs.data(), 3);
    EXPECT_EQ(f.pool_free(), 3u);
    EXPECT_EQ(f.port(0, 0).alloc_bulk(bufs.data(), 5), 3);
    f.port(0, 0).free_bulk(bufs.data(), 8);
    EXPECT_EQ(f.pool_free(), 8u);
    // Double free is ignored.
    f.port(0, 0).free_bulk(bufs.data(), 1);
    EXPECT_EQ(f.pool_free(), 8u);
    EXPECT_EQ(f.port_stats(0, 0)[PortCounter::free_invalid], 1u);

    // Frames in flight hold their buffers; delivered ones belong to the receiver until freed.
    LinkConfig lc;
    lc.delay_ns = 100;
    lc.duplicate = 1.0;
    f.set_link_config(0, 1, 0, lc);
    for (std::uint32_t i = 0; i < 4; ++i)
        send(f, 0, 0, make_frame(f, 0, 0, Fabric::mac(1, 0), i));
    EXPECT_EQ(f.pool_free(), 0u); // 4 originals + 4 duplicates
    PktBuf* none = nullptr;
    EXPECT_EQ(f.port(0, 0).alloc_bulk(&none, 1), 0); // nothing left to send with
    EXPECT_EQ(f.in_flight(), 8u);
    clock.advance(100);
    std::array<PktBuf*, 16> rx{};
    EXPECT_EQ(f.port(1, 0).rx_burst(rx.data(), 16), 8);
    EXPECT_EQ(f.pool_free(), 0u);
    f.port(1, 0).free_bulk(rx.data(), 8);
    EXPECT_EQ(f.pool_free(), 8u);

    // With one buffer left, the duplicate cannot be made.
    EXPECT_EQ(f.port(0, 0).alloc_bulk(bufs.data(), 7), 7);
    send(f, 0, 0, make_frame(f, 0, 0, Fabric::mac(1, 0), 10));
    EXPECT_EQ(f.link_stats(0, 1, 0)[LC::dropped_no_buffer], 1u);
    f.port(0, 0).free_bulk(bufs.data(), 7);
    clock.advance(100);
    EXPECT_EQ(drain(f, 1, 0).size(), 1u);
    EXPECT_EQ(f.pool_free(), 8u);
}

TEST_F(FabricTest, EverythingAtOnceIsDeterministic) {
    auto run = [&](std::uint64_t seed) {
        Clock clk = Clock::virtual_clock();
        FabricConfig c = config(3, 2, seed);
        c.pool_buffers = 2048;
        c.link.loss = 0.05;
        c.link.reorder = 0.1;
        c.link.duplicate = 0.05;
        c.link.corrupt = 0.05;
        c.link.bandwidth_gbps = 25;
        c.link.delay_ns = 300;
        c.link.queue_bytes = 20'000;
        c.link.ecn = true;
        c.link.kmin_bytes = 2000;
        c.link.kmax_bytes = 10'000;
        c.link.pmax = 0.5;
        Fabric f(&clk, c);
        std::vector<std::vector<std::uint8_t>> out;
        std::array<PktBuf*, 32> bufs{};
        for (std::uint32_t i = 0; i < 3000; ++i) {
            // Bursts of 20 frames on one link at a time, faster than 25 Gb/s drains them.
            const std::uint32_t from = (i / 20) % 3, to = (i / 60) % 3, plane = (i / 180) % 2;
            send(f, from, plane,
                 make_frame(f, from, plane, Fabric::mac(to, plane), i, 200 + i % 700, 0x02));
            clk.advance(10);
            for (std::uint32_t e = 0; e < 3; ++e)
                for (std::uint32_t p = 0; p < 2; ++p) {
                    const std::uint16_t n = f.port(e, p).rx_burst(bufs.data(), 32);
                    for (std::uint16_t k = 0; k < n; ++k)
                        out.emplace_back(bufs[k]->data, bufs[k]->data + bufs[k]->len);
                    f.port(e, p).free_bulk(bufs.data(), n);
                }
        }
        std::uint64_t marked = 0;
        for (std::uint32_t a = 0; a < 3; ++a)
            for (std::uint32_t b = 0; b < 3; ++b)
                for (std::uint32_t p = 0; p < 2; ++p) {
                    marked += f.link_stats(a, b, p)[LC::ecn_marked];
                }
        EXPECT_GT(marked, 0u);
        return out;
    };
    const auto a = run(77);
    const auto b = run(77);
    EXPECT_EQ(a, b);
    EXPECT_NE(a, run(78));
}

TEST_F(FabricTest, CounterNames) {
    EXPECT_EQ(to_string(LC::ecn_marked), "ecn_marked");
    EXPECT_EQ(to_string(LC::dropped_queue_full), "dropped_queue_full");
    EXPECT_EQ(to_string(PortCounter::tx_no_route), "tx_no_route");
}

TEST_F(FabricTest, SharedEgressMakesIncastCongest) {
    // Endpoints 0 and 2 each send 10 frames of 1000 bytes at once to endpoint 1 over 10 Gb/s
    // links (800 ns a frame); RED marks from 15000 bytes of backlog.
    auto run = [&](bool shared, std::uint64_t& last_ns, std::uint64_t& marked) {
        FabricConfig c = config(3, 1);
        c.shared_egress = shared;
        c.link.bandwidth_gbps = 10.0;
        c.link.ecn = true;
        c.link.kmin_bytes = 15'000;
        c.link.kmax_bytes = 15'000;
        Fabric f(&clock, c);
        const std::uint64_t t0 = clock.now_ns();
        for (std::uint32_t i = 0; i < 10; ++i) {
            send(f, 0, 0, make_sized(f, 0, 0, Fabric::mac(1, 0), i, 1000, 0x02));
            send(f, 2, 0, make_sized(f, 2, 0, Fabric::mac(1, 0), 100 + i, 1000, 0x02));
        }
        auto got = drain_all(f, 1, 0);
        EXPECT_EQ(got.size(), 20u);
        last_ns = clock.now_ns() - t0;
        marked = f.link_stats(0, 1, 0)[LC::ecn_marked] + f.link_stats(2, 1, 0)[LC::ecn_marked];
        clock.advance(1'000'000);
    };
    std::uint64_t separate_ns = 0, separate_marked = 0, shared_ns = 0, shared_marked = 0;
    run(false, separate_ns, separate_marked);
    run(true, shared_ns, shared_marked);
    EXPECT_EQ(separate_ns, 10u * 800u); // two queues drain in parallel
    EXPECT_EQ(separate_marked, 0u);     // neither exceeds 9000 bytes
    EXPECT_EQ(shared_ns, 20u * 800u);   // one queue drains them all
    EXPECT_EQ(shared_marked, 5u);       // frames 16..20 find >= 15000 bytes queued
}

TEST_F(FabricTest, PfcPausesTheSenderAndXonResumesEveryPausedPortAtOnce) {
    // Endpoints 0 and 2 send 1000-byte frames (800 ns at 10 Gb/s) into endpoint 1's shared egress
    // queue; PFC pauses a sender whose frame leaves it above 5000 bytes, until it drains to 2000.
    FabricConfig c = config(4, 1);
    c.shared_egress = true;
    c.link.bandwidth_gbps = 10.0;
    c.link.queue_bytes = 100'000;
    c.link.pfc_xoff_bytes = 5000;
    c.link.pfc_xon_bytes = 2000;
    Fabric f(&clock, c);
    const std::uint64_t t0 = clock.now_ns();
    std::array<PktBuf*, 10> a{};
    for (std::uint32_t i = 0; i < a.size(); ++i)
        a[i] = make_sized(f, 0, 0, Fabric::mac(1, 0), i, 1000);
    // The sixth frame leaves 6000 bytes queued: taken (the switch's headroom), then the pause.
    ASSERT_EQ(f.port(0, 0).tx_burst(a.data(), 10), 6);
    EXPECT_EQ(f.link_stats(0, 1, 0)[LC::pfc_pauses], 1u);
    EXPECT_EQ(f.port(0, 0).tx_burst(a.data() + 6, 4), 0) << "a paused port takes nothing";
    EXPECT_EQ(f.port_stats(0, 0)[PortCounter::tx_paused], 1u);
    // Endpoint 2's frame finds the queue above XOFF: it is taken and pauses endpoint 2, whose
    // frame to endpoint 3, an idle port, must now wait too (head-of-line blocking).
    PktBuf* b = make_sized(f, 2, 0, Fabric::mac(1, 0), 100, 1000);
    ASSERT_EQ(f.port(2, 0).tx_burst(&b, 1), 1);
    PktBuf* to3 = make_sized(f, 2, 0, Fabric::mac(3, 0), 200, 1000);
    EXPECT_EQ(f.port(2, 0).tx_burst(&to3, 1), 0);
    // 7000 bytes queued: 2000 left after 5000 bytes, 4000 ns. next_event_ns() wakes a virtual
    // clock for it even when no frame is due then.
    EXPECT_LE(f.next_event_ns(), t0 + 4000);
    clock.set(t0 + 3999);
    EXPECT_EQ(f.port(0, 0).tx_burst(a.data() + 6, 4), 0);
    clock.set(t0 + 4000);
    // Endpoint 0 resumes and refills the queue past XOFF with its fourth frame (2000 + 4000)...
    ASSERT_EQ(f.port(0, 0).tx_burst(a.data() + 6, 4), 4);
    EXPECT_EQ(f.port_stats(0, 0)[PortCounter::pfc_paused_ns], 4000u);
    EXPECT_EQ(f.egress_backlog_bytes(0, 1, 0), 6000u);
    // ...but the queue did reach XON, which resumes endpoint 2 as well: its frames go.
    ASSERT_EQ(f.port(2, 0).tx_burst(&to3, 1), 1);
    EXPECT_EQ(f.link_stats(0, 1, 0)[LC::pfc_pauses], 2u);
    EXPECT_EQ(f.link_stats(2, 1, 0)[LC::pfc_pauses], 1u);
    clock.set(t0 + 1'000'000);
    EXPECT_EQ(drain(f, 1, 0).size(), 11u); // nothing dropped
    EXPECT_EQ(drain(f, 3, 0).size(), 1u);
    EXPECT_EQ(f.next_event_ns(), 0u);
    EXPECT_EQ(f.link_stats(0, 1, 0)[LC::dropped_queue_full], 0u);
    EXPECT_EQ(f.pool_free(), c.pool_buffers);
}

TEST_F(FabricTest, ShorthandConstructor) {
    Fabric f(&clock, 5, 3, 4);
    EXPECT_EQ(f.endpoints(), 3u);
    EXPECT_EQ(f.planes(), 4u);
    EXPECT_EQ(f.pool_free(), FabricConfig{}.pool_buffers);
    EXPECT_EQ(f.port(2, 3).max_frame(), FabricConfig{}.buffer_capacity);
}

TEST_F(FabricTest, SmallFramesOnFastLinksKeepSubNanosecondTiming) {
    Fabric f(&clock, config());
    LinkConfig lc;
    lc.bandwidth_gbps = 400.0; // 100 bytes = 2 ns exactly, 105 bytes = 2.1 ns
    f.set_link_config(0, 1, 0, lc);
    const std::uint64_t t0 = clock.now_ns();
    for (std::uint32_t i = 0; i < 10; ++i)
        send(f, 0, 0, make_sized(f, 0, 0, Fabric::mac(1, 0), i, 105));
    // Ten frames of 2.1 ns end at 21 ns; rounding each up to 3 ns would give 30.
    clock.set(t0 + 20);
    EXPECT_EQ(drain(f, 1, 0).size(), 9u);
    clock.set(t0 + 21);
    EXPECT_EQ(drain(f, 1, 0).size(), 1u);
}

TEST_F(FabricTest, BadConfigThrows) {
    FabricConfig c = config();
    EXPECT_THROW(Fabric(nullptr, c), std::invalid_argument);
    c.endpoints = 1;
    EXPECT_THROW(Fabric(&clock, c), std::invalid_argument);
    c = config();
    c.planes = 5;
    EXPECT_THROW(Fabric(&clock, c), std::invalid_argument);
    c = config();
    c.planes = 0;
    EXPECT_THROW(Fabric(&clock, c), std::invalid_argument);
    c = config();
    c.pool_buffers = 0;
    EXPECT_THROW(Fabric(&clock, c), std::invalid_argument);
}

} // namespace
} // namespace droce::sim
