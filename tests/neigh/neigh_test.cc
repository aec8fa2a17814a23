/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * Neighbour resolution (lib/engine/neigh.h): the ARP and ND responder on crafted frames, the
 * table's states and timers on a virtual clock, and every truncation of every frame kind. Frames
 * are handed over in heap blocks of exactly their size, so the sanitizer build (suite 'asan')
 * catches any read past the end.
 */
#include <gtest/gtest.h>

#include <memory>

#include "neigh_test_util.h"

namespace droce::test {
namespace {

constexpr std::uint64_t kSec = 1'000'000'000;

class NeighTest : public ::testing::Test {
  protected:
    Clock clock = Clock::virtual_clock();
    NeighTable table{clock, 16};
    NeighResponder resp{table, our_addrs()};
    std::array<std::uint8_t, kNeighMaxReply> reply{};

    NeighRx rx(const Bytes& frame) {
        // An exact-size heap copy: one byte past the end is outside the allocation.
        auto heap = std::make_unique<std::uint8_t[]>(frame.size() ? frame.size() : 1);
        std::copy(frame.begin(), frame.end(), heap.get());
        return resp.handle_frame(std::span<const std::uint8_t>(heap.get(), frame.size()), reply);
    }
    Bytes reply_bytes(const NeighRx& r) const {
        return Bytes(reply.begin(), reply.begin() + r.reply_len);
    }
    std::uint64_t count(NeighCounter c) const { return resp.counters()[c]; }
};

// ---------------------------------------------------------------------------------------------
// Wire helpers

TEST(NeighWire, HeaderSizesAndNames) {
    EXPECT_EQ(sizeof(wire::ArpHdr), 28u);
    EXPECT_EQ(sizeof(wire::Icmpv6Hdr), 4u);
    EXPECT_EQ(sizeof(wire::NdNsBody), 20u);
    EXPECT_EQ(sizeof(wire::NdNaBody), 20u);
    EXPECT_EQ(sizeof(wire::NdLinkAddrOpt), 8u);
    EXPECT_EQ(to_string(wire::ArpOp::reply), "reply");
    EXPECT_EQ(to_string(wire::Icmpv6Type::neighbor_advertisement), "neighbor_advertisement");
    EXPECT_EQ(to_string(NeighState::static_), "static");
    EXPECT_EQ(to_string(NeighState::incomplete), "incomplete");
    EXPECT_EQ(to_string(NeighCounter::arp_reply_tx), "arp_reply_tx");
    EXPECT_EQ(to_string(NeighCounter::not_neigh), "not_neigh");
    EXPECT_EQ(to_string(NeighStatus::bad_hop_limit), "bad_hop_limit");
    EXPECT_FALSE(describe(NeighStatus::ns).empty());
}

TEST(NeighWire, SolicitedNodeMulticast) {
    // RFC 4291 §2.7.1 example: 4037::01:800:200E:8C6C -> FF02::1:FF0E:8C6C.
    const Ipv6Addr a = {0x40, 0x37, 0, 0, 0, 0, 0, 0, 0, 0x01, 0x08, 0x00, 0x20, 0x0e, 0x8c, 0x6c};
    const Ipv6Addr sn = wire::solicited_node_address(a);
    const Ipv6Addr want = {0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xff, 0x0e, 0x8c, 0x6c};
    EXPECT_EQ(sn, want);
    EXPECT_TRUE(wire::is_solicited_node_address(sn));
    EXPECT_FALSE(wire::is_solicited_node_address(a));
    EXPECT_FALSE(wire::is_solicited_node_address(wire::kIpv6AllNodes));
    const MacAddr mac = wire::ipv6_multicast_mac(sn);
    EXPECT_EQ(mac, (MacAddr{0x33, 0x33, 0xff, 0x0e, 0x8c, 0x6c}));
    static_assert(wire::solicited_node_address(kPeerIp6)[15] == 0x02);
}

TEST(NeighWire, Ipv4Mapped) {
    const Ipv6Addr m = ipv4_mapped(kPeerIp4);
    EXPECT_EQ(m, (Ipv6Addr{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2}));
    EXPECT_TRUE(is_ipv4_mapped(m));
    EXPECT_FALSE(is_ipv4_mapped(kPeerIp6));
    EXPECT_EQ(ipv4_of_mapped(m), kPeerIp4);
}

TEST(NeighWire, ChecksumMatchesReference) {
    // Odd and even lengths, against the independent oracle.
    Bytes msg;
    for (unsigned n = 0; n < 70; ++n) {
        const auto c = wire::icmpv6_checksum(kPeerIp6, kOurIp6, msg);
        EXPECT_EQ(c, ref_icmpv6_checksum(kPeerIp6, kOurIp6, msg)) << n;
        msg.push_back(static_cast<std::uint8_t>(n * 37 + 11));
    }
}

// ---------------------------------------------------------------------------------------------
// ARP

TEST_F(NeighTest, ArpRequestForUsGetsExactReply) {
    const Bytes req = arp_frame(1, kPeerMac, kPeerIp4, MacAddr{}, kOurIp4, kBroadcastMac);
    const NeighRx r = rx(req);
    ASSERT_EQ(r.status, NeighStatus::arp_request);
    ASSERT_EQ(r.reply_len, 60u);

    Bytes want;
    put_l2(want, kPeerMac, kOurMac, 0x0806, std::nullopt);
    put(want, {0x00, 0x01, 0x08, 0x00, 6, 4, 0x00, 0x02}); // Ethernet, IPv4, 6, 4, reply
    put(want, kOurMac);
    put(want, kOurIp4);
    put(want, kPeerMac);
    put(want, kPeerIp4);
    want.resize(60, 0);
    EXPECT_EQ(reply_bytes(r), want);

    // Field by field, through the header struct as well.
    const auto* eth = reinterpret_cast<const wire::EthHdr*>(reply.data());
    EXPECT_EQ(eth->dst, kPeerMac);
    EXPECT_EQ(eth->src, kOurMac);
    EXPECT_EQ(eth->ether_type.get(), wire::kEtherTypeArp);
    const auto* arp = reinterpret_cast<const wire::ArpHdr*>(reply.data() + 14);
    EXPECT_TRUE(arp->is_ethernet_ipv4());
    EXPECT_EQ(arp->op(), wire::ArpOp::reply);
    EXPECT_EQ(arp->sha, kOurMac);
    EXPECT_EQ(arp->spa, kOurIp4);
    EXPECT_EQ(arp->tha, kPeerMac);
    EXPECT_EQ(arp->tpa, kPeerIp4);

    EXPECT_EQ(count(NeighCounter::arp_request_rx), 1u);
    EXPECT_EQ(count(NeighCounter::arp_reply_tx), 1u);
    // RFC 826: the requester is learned (STALE: it asked, it did not answer us).
    const auto e = table.find(ipv4_mapped(kPeerIp4));
    ASSERT_TRUE(e);
    EXPECT_EQ(e->mac, kPeerMac);
    EXPECT_EQ(e->state, NeighState::stale);
}

TEST_F(NeighTest, ArpRequestWithVlanTagIsAnsweredTagged) {
    const Bytes req = arp_frame(1, kPeerMac, kPeerIp4, MacAddr{}, kOurIp4, kBroadcastMac, 0x6064);
    const NeighRx r = rx(req);
    ASSERT_EQ(r.status, NeighStatus::arp_request);
    ASSERT_EQ(r.reply_len, 64u);
    Bytes want;
    put_l2(want, kPeerMac, kOurMac, 0x0806, 0x6064);
    put(want, {0x00, 0x01, 0x08, 0x00, 6, 4, 0x00, 0x02});
    put(want, kOurMac);
    put(want, kOurIp4);
    put(want, kPeerMac);
    put(want, kPeerIp4);
    want.resize(64, 0);
    EXPECT_EQ(reply_bytes(r), want);
}

TEST_F(NeighTest, ArpRequestUnpaddedIsAccepted) {
    const Bytes req =
        arp_frame(1, kPeerMac, kPeerIp4, MacAddr{}, kOurIp4, kBroadcastMac, {}, false);
    ASSERT_EQ(req.size(), 42u);
    EXPECT_EQ(rx(req).status, NeighStatus::arp_request);
}

TEST_F(NeighTest, ArpRequestForAnotherIpGetsNoReply) {
    reply.fill(0xee);
    const NeighRx r = rx(arp_frame(1, kPeerMac, kPeerIp4, MacAddr{}, kThirdIp4, kBroadcastMac));
    EXPECT_EQ(r.status, NeighStatus::ignored_not_for_us);
    EXPECT_EQ(r.reply_len, 0u);
    EXPECT_EQ(reply[0], 0xee); // untouched
    EXPECT_EQ(count(NeighCounter::ignored_not_for_us), 1u);
    EXPECT_EQ(count(NeighCounter::arp_reply_tx), 0u);
    EXPECT_EQ(table.size(), 0u);
}

TEST_F(NeighTest, ArpProbeIsAnsweredButTeachesNothing) {
    // RFC 5227 probe for our address: sender IP 0.0.0.0.
    const NeighRx r =
        rx(arp_frame(1, kPeerMac, Ipv4Addr{0, 0, 0, 0}, MacAddr{}, kOurIp4, kBroadcastMac));
    EXPECT_EQ(r.status, NeighStatus::arp_request);
    EXPECT_EQ(r.reply_len, 60u);
    EXPECT_EQ(table.size(), 0u);
}

TEST_F(NeighTest, ArpReplyLearnsAfterLookup) {
    const NeighLookup l = table.lookup(kPeerIp4);
    EXPECT_EQ(l.result, NeighResolve::pending);
    EXPECT_TRUE(l.send_request);

    const NeighRx r = rx(arp_frame(2, kPeerMac, kPeerIp4, kOurMac, kOurIp4, kOurMac));
    EXPECT_EQ(r.status, NeighStatus::arp_reply);
    EXPECT_EQ(r.reply_len, 0u);
    EXPECT_EQ(count(NeighCounter::arp_reply_rx), 1u);

    const NeighLookup l2 = table.lookup(kPeerIp4);
    EXPECT_EQ(l2.result, NeighResolve::resolved);
    EXPECT_EQ(l2.mac, kPeerMac);
    EXPECT_FALSE(l2.send_request);
    EXPECT_EQ(table.find(ipv4_mapped(kPeerIp4))->state, NeighState::reachable);
}

TEST_F(NeighTest, ArpReplyForAnotherHostIsIgnored) {
    (void)table.lookup(kPeerIp4);
    const NeighRx r = rx(arp_frame(2, kPeerMac, kPeerIp4, kOtherMac, kThirdIp4, kOtherMac));
    EXPECT_EQ(r.status, NeighStatus::ignored_not_for_us);
    EXPECT_EQ(table.find(ipv4_mapped(kPeerIp4))->state, NeighState::incomplete);
}

TEST_F(NeighTest, GratuitousArpLearnsAndUpdates) {
    NeighRx r = rx(arp_frame(1, kPeerMac, kPeerIp4, MacAddr{}, kPeerIp4, kBroadcastMac));
    EXPECT_EQ(r.status, NeighStatus::arp_gratuitous);
    EXPECT_EQ(r.reply_len, 0u);
    auto e = table.find(ipv4_mapped(kPeerIp4));
    ASSERT_TRUE(e);
    EXPECT_EQ(e->mac, kPeerMac);
    EXPECT_EQ(e->state, NeighState::stale);

    // The peer moved to another NIC and announces it with a gratuitous reply.
    r = rx(arp_frame(2, kOtherMac, kPeerIp4, kBroadcastMac, kPeerIp4, kBroadcastMac));
    EXPECT_EQ(r.status, NeighStatus::arp_gratuitous);
    e = table.find(ipv4_mapped(kPeerIp4));
    EXPECT_EQ(e->mac, kOtherMac);
    EXPECT_EQ(count(NeighCounter::arp_gratuitous_rx), 2u);
}

TEST_F(NeighTest, StaticEntryIsNeverOverwritten) {
    ASSERT_TRUE(table.add_static(kPeerIp4, kPeerMac));
    ASSERT_TRUE(table.add_static(kPeerIp6, kPeerMac));
    // ARP reply, gratuitous ARP, ARP request, NS and NA all claim another MAC.
    rx(arp_frame(2, kOtherMac, kPeerIp4, kOurMac, kOurIp4, kOurMac));
    rx(arp_frame(1, kOtherMac, kPeerIp4, MacAddr{}, kPeerIp4, kBroadcastMac));
    EXPECT_EQ(rx(arp_frame(1, kOtherMac, kPeerIp4, MacAddr{}, kOurIp4, kBroadcastMac)).status,
              NeighStatus::arp_request);
    NdSpec ns;
    ns.eth_src = kOtherMac;
    ns.opt_mac = kOtherMac;
    EXPECT_EQ(rx(nd_frame(ns)).status, NeighStatus::ns);
    NdSpec na;
    na.type = 136;
    na.eth_src = kOtherMac;
    na.src = kPeerIp6;
    na.dst = kOurIp6;
    na.target = kPeerIp6;
    na.opt_type = 2;
    na.opt_mac = kOtherMac;
    EXPECT_EQ(rx(nd_frame(na)).status, NeighStatus::na);
    EXPECT_EQ(count(NeighCounter::static_kept), 5u);

    for (const auto& ip : {ipv4_mapped(kPeerIp4), kPeerIp6}) {
        const auto e = table.find(ip);
        ASSERT_TRUE(e);
        EXPECT_EQ(e->state, NeighState::static_);
        EXPECT_EQ(e->mac, kPeerMac);
    }
    // And never ages.
    clock.advance(3600 * kSec);
    const NeighLookup l = table.lookup(kPeerIp4);
    EXPECT_EQ(l.result, NeighResolve::resolved);
    EXPECT_EQ(l.mac, kPeerMac);
    EXPECT_FALSE(l.send_request);
    EXPECT_EQ(table.learn(kPeerIp6, kOtherMac, NeighLearn::confirmed),
              NeighLearnResult::static_kept);
}

TEST_F(NeighTest, StaticOverridesLearned) {
    EXPECT_EQ(table.learn(kPeerIp6, kOtherMac, NeighLearn::confirmed), NeighLearnResult::created);
    ASSERT_TRUE(table.add_static(kPeerIp6, kPeerMac));
    EXPECT_EQ(table.find(kPeerIp6)->mac, kPeerMac);
    EXPECT_EQ(table.find(kPeerIp6)->state, NeighState::static_);
    EXPECT_FALSE(table.add_static(kThirdIp6, kBroadcastMac));
    EXPECT_TRUE(table.remove(kPeerIp6));
    EXPECT_FALSE(table.find(kPeerIp6));
    EXPECT_FALSE(table.remove(kPeerIp6));
}

TEST_F(NeighTest, ArpClaimingOurAddressIsAConflict) {
    const NeighRx r = rx(arp_frame(1, kOtherMac, kOurIp4, MacAddr{}, kOurIp4, kBroadcastMac));
    EXPECT_EQ(r.status, NeighStatus::address_conflict);
    EXPECT_EQ(r.reply_len, 0u);
    EXPECT_EQ(table.size(), 0u);
}

TEST_F(NeighTest, OwnLoopedArpIsIgnored) {
    std::array<std::uint8_t, 64> req{};
    const std::size_t n = resp.build_arp_request(kPeerIp4, req);
    ASSERT_EQ(n, 60u);
    EXPECT_EQ(rx(Bytes(req.begin(), req.begin() + n)).status, NeighStatus::ignored_not_for_us);
}

TEST_F(NeighTest, ArpRequestBuiltExactly) {
    std::array<std::uint8_t, 64> out{};
    out.fill(0xee);
    ASSERT_EQ(resp.build_arp_request(kPeerIp4, out), 60u);
    Bytes want;
    put_l2(want, kBroadcastMac, kOurMac, 0x0806, std::nullopt);
    put(want, {0x00, 0x01, 0x08, 0x00, 6, 4, 0x00, 0x01});
    put(want, kOurMac);
    put(want, kOurIp4);
    put(want, MacAddr{});
    put(want, kPeerIp4);
    want.resize(60, 0);
    EXPECT_EQ(Bytes(out.begin(), out.begin() + 60), want);
    EXPECT_EQ(out[60], 0xee);
    EXPECT_EQ(resp.counters()[NeighCounter::arp_request_tx], 1u);
    // Unicast refresh and a tag; too small a buffer writes nothing.
    ASSERT_EQ(resp.build_arp_request(kPeerIp4, out, kPeerMac, 0x0005), 64u);
    EXPECT_EQ(Bytes(out.begin(), out.begin() + 6), Bytes(kPeerMac.begin(), kPeerMac.end()));
    EXPECT_EQ(out[12], 0x81);
    EXPECT_EQ(out[15], 0x05);
    std::array<std::uint8_t, 59> small{};
    EXPECT_EQ(resp.build_arp_request(kPeerIp4, small), 0u);
    // A port without IPv4 builds no ARP request.
    NeighPortAddrs v6only = our_addrs();
    v6only.ipv4.reset();
    NeighResponder r6(table, v6only);
    EXPECT_EQ(r6.build_arp_request(kPeerIp4, out), 0u);
}

TEST_F(NeighTest, MalformedArpFields) {
    Bytes bad_hlen = arp_frame(1, kPeerMac, kPeerIp4, MacAddr{}, kOurIp4, kBroadcastMac);
    bad_hlen[18] = 7;
    EXPECT_EQ(rx(bad_hlen).status, NeighStatus::malformed);
    Bytes bcast_sender = arp_frame(1, kBroadcastMac, kPeerIp4, MacAddr{}, kOurIp4, kBroadcastMac);
    EXPECT_EQ(rx(bcast_sender).status, NeighStatus::malformed);
    Bytes other_proto = arp_frame(1, kPeerMac, kPeerIp4, MacAddr{}, kOurIp4, kBroadcastMac);
    other_proto[16] = 0x86; // ptype 0x86dd
    other_proto[17] = 0xdd;
    EXPECT_EQ(rx(other_proto).status, NeighStatus::ignored_not_for_us);
    Bytes rarp_op = arp_frame(3, kPeerMac, kPeerIp4, MacAddr{}, kOurIp4, kBroadcastMac);
    EXPECT_EQ(rx(rarp_op).status, NeighStatus::ignored_not_for_us);
    EXPECT_EQ(count(NeighCounter::malformed), 2u);
    EXPECT_EQ(table.size(), 0u);
}

TEST_F(NeighTest, ReplyBufferTooSmall) {
    std::array<std::uint8_t, 59> small{};
    small.fill(0xee);
    const Bytes req = arp_frame(1, kPeerMac, kPeerIp4, MacAddr{}, kOurIp4, kBroadcastMac);
    const NeighRx r = resp.handle_frame(req, small);
    EXPECT_EQ(r.status, NeighStatus::reply_no_room);
    EXPECT_EQ(r.reply_len, 0u);
    EXPECT_EQ(small[0], 0xee);
    EXPECT_EQ(count(NeighCounter::reply_no_room), 1u);
    EXPECT_EQ(count(NeighCounter::arp_request_rx), 1u);
    const NeighRx r6 =
        resp.handle_frame(nd_frame(NdSpec{}), std::span<std::uint8_t>(small.data(), 0));
    EXPECT_EQ(r6.status, NeighStatus::reply_no_room);
}

TEST_F(NeighTest, OtherTrafficIsNotNeigh) {
    Bytes ipv4;
    put_l2(ipv4, kOurMac, kPeerMac, 0x0800, std::nullopt);
    ipv4.resize(60, 0x45);
    EXPECT_EQ(rx(ipv4).status, NeighStatus::not_neigh);
    // IPv6 UDP, and ICMPv6 echo.
    Bytes udp6 = nd_frame(NdSpec{});
    udp6[20] = 17;
    EXPECT_EQ(rx(udp6).status, NeighStatus::not_neigh);
    NdSpec echo;
    echo.type = 128;
    EXPECT_EQ(rx(nd_frame(echo)).status, NeighStatus::not_neigh);
    EXPECT_EQ(count(NeighCounter::not_neigh), 3u);
}

// ---------------------------------------------------------------------------------------------
// IPv6 ND

TEST_F(NeighTest, NsForUsGetsNaWithCorrectChecksum) {
    const NeighRx r = rx(nd_frame(NdSpec{}));
    ASSERT_EQ(r.status, NeighStatus::ns);
    ASSERT_EQ(r.reply_len, kNdFrameLen);
    const Bytes out = reply_bytes(r);

    Bytes want;
    put_l2(want, kPeerMac, kOurMac, 0x86dd, std::nullopt);
    put(want, {0x60, 0, 0, 0, 0x00, 32, 58, 255});
    put(want, kOurIp6);
    put(want, kPeerIp6);
    Bytes msg;
    put(msg, {136, 0, 0, 0, 0x60, 0, 0, 0}); // NA, code 0, checksum 0 for now, flags S|O
    put(msg, kOurIp6);
    put(msg, {2, 1});
    put(msg, kOurMac);
    const std::uint16_t c = ref_icmpv6_checksum(kOurIp6, kPeerIp6, msg);
    msg[2] = static_cast<std::uint8_t>(c >> 8);
    msg[3] = static_cast<std::uint8_t>(c);
    want.insert(want.end(), msg.begin(), msg.end());
    EXPECT_EQ(out, want);

    // The checksum verifies independently over the reply as sent.
    EXPECT_EQ(ref_icmpv6_checksum(kOurIp6, kPeerIp6, Bytes(out.begin() + 54, out.end())), 0u);
    const auto* na = reinterpret_cast<const wire::NdNaBody*>(out.data() + 58);
    EXPECT_FALSE(na->router());
    EXPECT_TRUE(na->solicited());
    EXPECT_TRUE(na->override_flag());

    EXPECT_EQ(count(NeighCounter::ns_rx), 1u);
    EXPECT_EQ(count(NeighCounter::na_tx), 1u);
    // The sender is learned from its source link-layer option.
    const auto e = table.find(kPeerIp6);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->mac, kPeerMac);
    EXPECT_EQ(e->state, NeighState::stale);
}

TEST_F(NeighTest, NsForLinkLocalWithVlanAndPadding) {
    NdSpec s;
    s.target = kOurLinkLocal;
    s.src = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02};
    s.tci = 0x2007;
    s.trailing_pad = 6; // Ethernet padding after the IPv6 payload is not part of the message
    const NeighRx r = rx(nd_frame(s));
    ASSERT_EQ(r.status, NeighStatus::ns);
    ASSERT_EQ(r.reply_len, kNdFrameLen + 4);
    EXPECT_EQ(reply[12], 0x81);
    EXPECT_EQ(reply[14], 0x20);
    EXPECT_EQ(reply[15], 0x07);
    EXPECT_EQ(reply[16], 0x86);
    const Bytes out = reply_bytes(r);
    Ipv6Addr src, dst;
    std::copy(out.begin() + 26, out.begin() + 42, src.begin());
    std::copy(out.begin() + 42, out.begin() + 58, dst.begin());
    EXPECT_EQ(src, kOurLinkLocal);
    EXPECT_EQ(dst, s.src);
    EXPECT_EQ(ref_icmpv6_checksum(src, dst, Bytes(out.begin() + 58, out.end())), 0u);
}

TEST_F(NeighTest, NsWithoutSourceOptionRepliesToFrameSource) {
    NdSpec s;
    s.opt_type = 0;
    s.dst = kOurIp6; // unicast NS
    s.eth_dst = kOurMac;
    const NeighRx r = rx(nd_frame(s));
    ASSERT_EQ(r.status, NeighStatus::ns);
    EXPECT_EQ(Bytes(reply.begin(), reply.begin() + 6), Bytes(kPeerMac.begin(), kPeerMac.end()));
    EXPECT_EQ(table.size(), 0u); // nothing to learn from
}

TEST_F(NeighTest, DadProbeIsAnsweredToAllNodes) {
    NdSpec s;
    s.src = Ipv6Addr{};
    s.opt_type = 0;
    const NeighRx r = rx(nd_frame(s));
    ASSERT_EQ(r.status, NeighStatus::ns);
    const Bytes out = reply_bytes(r);
    EXPECT_EQ(Bytes(out.begin(), out.begin() + 6), (Bytes{0x33, 0x33, 0, 0, 0, 1}));
    Ipv6Addr dst;
    std::copy(out.begin() + 38, out.begin() + 54, dst.begin());
    EXPECT_EQ(dst, wire::kIpv6AllNodes);
    EXPECT_EQ(out[58], 0x20); // Override only, not Solicited (RFC 4861 §7.2.4)
    EXPECT_EQ(ref_icmpv6_checksum(kOurIp6, wire::kIpv6AllNodes, Bytes(out.begin() + 54, out.end())),
              0u);
    EXPECT_EQ(table.size(), 0u);
    // A DAD probe with a source link-layer option is invalid (RFC 4861 §7.1.1).
    s.opt_type = 1;
    EXPECT_EQ(rx(nd_frame(s)).status, NeighStatus::malformed);
}

TEST_F(NeighTest, NsForAnotherAddressIgnored) {
    NdSpec s;
    s.target = kThirdIp6;
    const NeighRx r = rx(nd_frame(s));
    EXPECT_EQ(r.status, NeighStatus::ignored_not_for_us);
    EXPECT_EQ(r.reply_len, 0u);
    EXPECT_EQ(table.size(), 0u);
}

TEST_F(NeighTest, HopLimitOtherThan255Ignored) {
    for (std::uint8_t hl : {0, 1, 64, 254}) {
        NdSpec ns;
        ns.hop_limit = hl;
        NeighRx r = rx(nd_frame(ns));
        EXPECT_EQ(r.status, NeighStatus::bad_hop_limit) << int{hl};
        EXPECT_EQ(r.reply_len, 0u);
        NdSpec na;
        na.type = 136;
        na.hop_limit = hl;
        na.dst = kOurIp6;
        na.target = kPeerIp6;
        na.opt_type = 2;
        r = rx(nd_frame(na));
        EXPECT_EQ(r.status, NeighStatus::bad_hop_limit);
    }
    EXPECT_EQ(count(NeighCounter::bad_hop_limit), 8u);
    EXPECT_EQ(table.size(), 0u);
}

TEST_F(NeighTest, BadChecksumDropped) {
    NdSpec s;
    s.bad_checksum = true;
    const NeighRx r = rx(nd_frame(s));
    EXPECT_EQ(r.status, NeighStatus::bad_checksum);
    EXPECT_EQ(r.reply_len, 0u);
    EXPECT_EQ(table.size(), 0u);
}

TEST_F(NeighTest, MalformedNdFields) {
    auto status = [&](NdSpec s) { return rx(nd_frame(s)).status; };
    NdSpec s;
    s.opt_len = 0; // zero-length option
    EXPECT_EQ(status(s), NeighStatus::malformed);
    s = NdSpec{};
    s.opt_len = 2; // Ethernet link-layer option must be one unit
    EXPECT_EQ(status(s), NeighStatus::malformed);
    s = NdSpec{};
    s.code = 1;
    EXPECT_EQ(status(s), NeighStatus::malformed);
    s = NdSpec{};
    s.target = wire::kIpv6AllNodes; // multicast target
    s.dst = wire::kIpv6AllNodes;
    EXPECT_EQ(status(s), NeighStatus::malformed);
    s = NdSpec{};
    s.opt_mac = kBroadcastMac;
    EXPECT_EQ(status(s), NeighStatus::malformed);
    s = NdSpec{};
    s.type = 136;
    s.target = kPeerIp6;
    s.opt_type = 2;
    s.dst = wire::kIpv6AllNodes; // solicited NA to a multicast group
    s.na_flags = 0x40;
    EXPECT_EQ(status(s), NeighStatus::malformed);

    // IPv6 payload length larger than the frame, and too small for an NS.
    Bytes f = nd_frame(NdSpec{});
    f[19] = static_cast<std::uint8_t>(f[19] + 1);
    EXPECT_EQ(rx(f).status, NeighStatus::malformed);
    f = nd_frame(NdSpec{});
    f[19] = 20;
    EXPECT_EQ(rx(f).status, NeighStatus::malformed);
    // Option running past the message.
    f = nd_frame(NdSpec{});
    f[54 + 24 + 1] = 2;
    refresh_nd_checksum(f);
    EXPECT_EQ(rx(f).status, NeighStatus::malformed);
    // An unknown option is skipped (RFC 4861 §4.6) ...
    f = nd_frame(NdSpec{});
    put(f, {99, 1, 0, 0, 0, 0, 0, 0});
    f[19] = 40;
    refresh_nd_checksum(f);
    EXPECT_EQ(rx(f).status, NeighStatus::ns);
    EXPECT_TRUE(table.remove(kPeerIp6)); // the sender it taught us
    // ... but not one that runs past the message.
    f[54 + 32 + 1] = 2;
    refresh_nd_checksum(f);
    EXPECT_EQ(rx(f).status, NeighStatus::malformed);
    // A truncated option header (one byte of option space left).
    f = nd_frame(NdSpec{});
    f.push_back(0);
    f[19] = 33;
    refresh_nd_checksum(f);
    EXPECT_EQ(rx(f).status, NeighStatus::malformed);
    // IPv6 version field wrong.
    f = nd_frame(NdSpec{});
    f[14] = 0x40;
    EXPECT_EQ(rx(f).status, NeighStatus::malformed);
    EXPECT_EQ(table.size(), 0u);
}

TEST_F(NeighTest, NaLearnsSolicitedReachable) {
    const NeighLookup l = table.lookup(kPeerIp6);
    EXPECT_EQ(l.result, NeighResolve::pending);
    EXPECT_TRUE(l.send_request);
    NdSpec na;
    na.type = 136;
    na.dst = kOurIp6;
    na.eth_dst = kOurMac;
    na.target = kPeerIp6;
    na.opt_type = 2;
    const NeighRx r = rx(nd_frame(na));
    EXPECT_EQ(r.status, NeighStatus::na);
    EXPECT_EQ(r.reply_len, 0u);
    EXPECT_EQ(count(NeighCounter::na_rx), 1u);
    const NeighLookup l2 = table.lookup(kPeerIp6);
    EXPECT_EQ(l2.result, NeighResolve::resolved);
    EXPECT_EQ(l2.mac, kPeerMac);
    EXPECT_EQ(table.find(kPeerIp6)->state, NeighState::reachable);
}

TEST_F(NeighTest, UnsolicitedNaRules) {
    NdSpec na;
    na.type = 136;
    na.dst = wire::kIpv6AllNodes;
    na.target = kPeerIp6;
    na.opt_type = 2;
    na.na_flags = 0x20; // Override, unsolicited
    // No entry: nothing is created (RFC 4861 §7.2.5).
    EXPECT_EQ(rx(nd_frame(na)).status, NeighStatus::na);
    EXPECT_EQ(table.size(), 0u);
    // With a REACHABLE entry: a different MAC without Override only marks it STALE.
    ASSERT_EQ(table.learn(kPeerIp6, kPeerMac, NeighLearn::confirmed), NeighLearnResult::created);
    na.na_flags = 0;
    na.opt_mac = kOtherMac;
    rx(nd_frame(na));
    EXPECT_EQ(table.find(kPeerIp6)->mac, kPeerMac);
    EXPECT_EQ(table.find(kPeerIp6)->state, NeighState::stale);
    // With Override the MAC is replaced.
    na.na_flags = 0x20;
    rx(nd_frame(na));
    EXPECT_EQ(table.find(kPeerIp6)->mac, kOtherMac);
    EXPECT_EQ(table.find(kPeerIp6)->state, NeighState::stale);
}

TEST_F(NeighTest, NaClaimingOurAddressIsAConflict) {
    NdSpec na;
    na.type = 136;
    na.dst = wire::kIpv6AllNodes;
    na.target = kOurIp6;
    na.opt_type = 2;
    na.opt_mac = kOtherMac;
    na.na_flags = 0x20;
    EXPECT_EQ(rx(nd_frame(na)).status, NeighStatus::address_conflict);
    EXPECT_EQ(count(NeighCounter::address_conflict), 1u);
}

TEST_F(NeighTest, NsBuiltToSolicitedNodeMulticast) {
    std::array<std::uint8_t, 100> out{};
    ASSERT_EQ(resp.build_ns(kPeerIp6, out), kNdFrameLen);
    const Ipv6Addr sn = {0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xff, 0, 0, 0x02};
    Bytes want;
    put_l2(want, MacAddr{0x33, 0x33, 0xff, 0, 0, 0x02}, kOurMac, 0x86dd, std::nullopt);
    put(want, {0x60, 0, 0, 0, 0x00, 32, 58, 255});
    put(want, kOurIp6); // shares 2001:db8::/64 with the target
    put(want, sn);
    Bytes msg;
    put(msg, {135, 0, 0, 0, 0, 0, 0, 0});
    put(msg, kPeerIp6);
    put(msg, {1, 1});
    put(msg, kOurMac);
    const std::uint16_t c = ref_icmpv6_checksum(kOurIp6, sn, msg);
    msg[2] = static_cast<std::uint8_t>(c >> 8);
    msg[3] = static_cast<std::uint8_t>(c);
    want.insert(want.end(), msg.begin(), msg.end());
    EXPECT_EQ(Bytes(out.begin(), out.begin() + kNdFrameLen), want);
    EXPECT_EQ(count(NeighCounter::ns_tx), 1u);

    // Link-local target: link-local source. Unicast refresh: to the target at the given MAC.
    const Ipv6Addr ll_peer = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02};
    ASSERT_EQ(resp.build_ns(ll_peer, out, kPeerMac), kNdFrameLen);
    EXPECT_EQ(Bytes(out.begin(), out.begin() + 6), Bytes(kPeerMac.begin(), kPeerMac.end()));
    Ipv6Addr src, dst;
    std::copy(out.begin() + 22, out.begin() + 38, src.begin());
    std::copy(out.begin() + 38, out.begin() + 54, dst.begin());
    EXPECT_EQ(src, kOurLinkLocal);
    EXPECT_EQ(dst, ll_peer);
    EXPECT_EQ(ref_icmpv6_checksum(src, dst, Bytes(out.begin() + 54, out.begin() + kNdFrameLen)),
              0u);

    std::array<std::uint8_t, kNdFrameLen - 1> small{};
    EXPECT_EQ(resp.build_ns(kPeerIp6, small), 0u);
    EXPECT_EQ(resp.build_ns(wire::kIpv6AllNodes, out), 0u);
    // build_request dispatches on the address family.
    EXPECT_EQ(resp.build_request(ipv4_mapped(kPeerIp4), out), kArpFrameLen);
    EXPECT_EQ(resp.build_request(kPeerIp6, out), kNdFrameLen);
}

TEST_F(NeighTest, OurNsAnsweredByAPeerResponder) {
    // Two responders talk to each other: our NS, their NA, we learn.
    Clock peer_clock = Clock::virtual_clock();
    NeighTable peer_table(peer_clock, 4);
    NeighPortAddrs pa;
    pa.mac = kPeerMac;
    pa.ipv4 = kPeerIp4;
    pa.add_ipv6(kPeerIp6);
    NeighResponder peer(peer_table, pa);

    for (const Ipv6Addr& target : {kPeerIp6, ipv4_mapped(kPeerIp4)}) {
        const NeighLookup l = table.lookup(target);
        ASSERT_TRUE(l.send_request);
        std::array<std::uint8_t, kNeighMaxReply> req{};
        const std::size_t n = resp.build_request(target, req);
        ASSERT_GT(n, 0u);
        std::array<std::uint8_t, kNeighMaxReply> ans{};
        const NeighRx pr = peer.handle_frame(std::span<const std::uint8_t>(req.data(), n), ans);
        ASSERT_GT(pr.reply_len, 0u) << to_string(pr.status);
        const NeighRx r =
            resp.handle_frame(std::span<const std::uint8_t>(ans.data(), pr.reply_len), reply);
        EXPECT_TRUE(r.status == NeighStatus::na || r.status == NeighStatus::arp_reply)
            << to_string(r.status);
        const NeighLookup l2 = table.lookup(target);
        EXPECT_EQ(l2.result, NeighResolve::resolved);
        EXPECT_EQ(l2.mac, kPeerMac);
        // The peer learned us too, from the request.
        EXPECT_EQ(peer_table.find(is_ipv4_mapped(target) ? ipv4_mapped(kOurIp4) : kOurIp6)->mac,
                  kOurMac);
    }
}

// ---------------------------------------------------------------------------------------------
// Table timers

TEST_F(NeighTest, RetransmitEverySecondThenFail) {
    const Ipv6Addr ip = ipv4_mapped(kPeerIp4);
    NeighLookup l = table.lookup(ip);
    EXPECT_EQ(l.result, NeighResolve::pending);
    EXPECT_TRUE(l.send_request); // request 1 at t=0
    clock.advance(kSec / 2);
    l = table.lookup(ip);
    EXPECT_EQ(l.result, NeighResolve::pending);
    EXPECT_FALSE(l.send_request);
    clock.advance(kSec / 2 - 1);
    EXPECT_FALSE(table.lookup(ip).send_request);
    clock.advance(1);
    EXPECT_TRUE(table.lookup(ip).send_request); // request 2 at t=1s
    EXPECT_FALSE(table.lookup(ip).send_request);
    clock.advance(kSec);
    EXPECT_TRUE(table.lookup(ip).send_request); // request 3 at t=2s
    EXPECT_EQ(table.find(ip)->probes, 3u);
    clock.advance(kSec - 1);
    EXPECT_EQ(table.lookup(ip).result, NeighResolve::pending);
    clock.advance(1);
    l = table.lookup(ip); // t=3s: three unanswered, give up
    EXPECT_EQ(l.result, NeighResolve::failed);
    EXPECT_FALSE(l.send_request);
    EXPECT_EQ(table.find(ip)->state, NeighState::failed);

    // FAILED for failed_hold_ns: no requests.
    clock.advance(table.params().failed_hold_ns - 1);
    l = table.lookup(ip);
    EXPECT_EQ(l.result, NeighResolve::failed);
    EXPECT_FALSE(l.send_request);
    clock.advance(1);
    l = table.lookup(ip); // then it starts over
    EXPECT_EQ(l.result, NeighResolve::pending);
    EXPECT_TRUE(l.send_request);
    EXPECT_EQ(table.find(ip)->probes, 1u);
}

TEST_F(NeighTest, DueRequestsDrivesRetransmitsWithoutLookups) {
    (void)table.lookup(kPeerIp6);
    (void)table.lookup(ipv4_mapped(kPeerIp4));
    std::array<Ipv6Addr, 4> due{};
    EXPECT_EQ(table.due_requests(due), 0u);
    clock.advance(kSec);
    std::array<Ipv6Addr, 1> one{};
    EXPECT_EQ(table.due_requests(one), 1u); // room for one; the other stays due
    EXPECT_EQ(table.due_requests(due), 1u);
    EXPECT_EQ(table.due_requests(due), 0u);
    clock.advance(kSec);
    EXPECT_EQ(table.due_requests(due), 2u);
    clock.advance(kSec);
    EXPECT_EQ(table.due_requests(due), 0u); // both give up at t=3s
    EXPECT_EQ(table.find(kPeerIp6)->state, NeighState::failed);
    EXPECT_EQ(table.find(ipv4_mapped(kPeerIp4))->state, NeighState::failed);
    // A late answer still resolves a FAILED address.
    EXPECT_EQ(table.learn(kPeerIp6, kPeerMac, NeighLearn::confirmed), NeighLearnResult::updated);
    EXPECT_EQ(table.lookup(kPeerIp6).result, NeighResolve::resolved);
}

TEST_F(NeighTest, ReachableBecomesStaleAndIsRefreshed) {
    ASSERT_EQ(table.learn(kPeerIp6, kPeerMac, NeighLearn::confirmed), NeighLearnResult::created);
    clock.advance(table.params().reachable_ns - 1);
    EXPECT_EQ(table.find(kPeerIp6)->state, NeighState::reachable);
    clock.advance(1);
    EXPECT_EQ(table.find(kPeerIp6)->state, NeighState::stale);
    // In use: still resolved, and a refresh is asked for once per retrans_ns.
    NeighLookup l = table.lookup(kPeerIp6);
    EXPECT_EQ(l.result, NeighResolve::resolved);
    EXPECT_EQ(l.mac, kPeerMac);
    EXPECT_TRUE(l.send_request);
    EXPECT_FALSE(table.lookup(kPeerIp6).send_request);
    // An upper-layer confirmation (a RoCE ACK) makes it REACHABLE with no ND answer.
    table.confirm(kPeerIp6);
    EXPECT_EQ(table.find(kPeerIp6)->state, NeighState::reachable);
    l = table.lookup(kPeerIp6);
    EXPECT_FALSE(l.send_request);

    // Stale and never answered: max_probes refreshes, then FAILED.
    clock.advance(table.params().reachable_ns);
    EXPECT_TRUE(table.lookup(kPeerIp6).send_request);
    clock.advance(kSec);
    EXPECT_TRUE(table.lookup(kPeerIp6).send_request);
    clock.advance(kSec);
    EXPECT_TRUE(table.lookup(kPeerIp6).send_request);
    clock.advance(kSec);
    EXPECT_EQ(table.lookup(kPeerIp6).result, NeighResolve::failed);
}

TEST_F(NeighTest, HintKeepsSameMacAndReplacesOther) {
    EXPECT_EQ(table.learn(kPeerIp6, kPeerMac, NeighLearn::hint), NeighLearnResult::created);
    EXPECT_EQ(table.find(kPeerIp6)->state, NeighState::stale);
    EXPECT_EQ(table.learn(kPeerIp6, kPeerMac, NeighLearn::hint), NeighLearnResult::unchanged);
    EXPECT_EQ(table.learn(kPeerIp6, kOtherMac, NeighLearn::hint), NeighLearnResult::updated);
    EXPECT_EQ(table.find(kPeerIp6)->mac, kOtherMac);
    EXPECT_EQ(table.learn(kPeerIp6, kBroadcastMac, NeighLearn::hint), NeighLearnResult::rejected);
    EXPECT_EQ(table.learn(kThirdIp6, kPeerMac, NeighLearn::update_only),
              NeighLearnResult::not_present);
}

TEST(NeighTable, FixedCapacityEvictionOrder) {
    Clock clock = Clock::virtual_clock();
    NeighTable t(clock, 3);
    auto ip = [](std::uint8_t n) { return ipv4_mapped(Ipv4Addr{10, 0, 1, n}); };
    ASSERT_TRUE(t.add_static(ip(1), kPeerMac));
    EXPECT_EQ(t.learn(ip(2), kPeerMac, NeighLearn::confirmed), NeighLearnResult::created);
    clock.advance(1);
    EXPECT_EQ(t.learn(ip(3), kPeerMac, NeighLearn::confirmed), NeighLearnResult::created);
    EXPECT_EQ(t.size(), 3u);
    // Full of live entries: an unsolicited hint may not evict them.
    EXPECT_EQ(t.learn(ip(4), kPeerMac, NeighLearn::hint), NeighLearnResult::no_space);
    // A lookup may: the least recently used REACHABLE one (ip 2) goes.
    EXPECT_EQ(t.lookup(ip(4)).result, NeighResolve::pending);
    EXPECT_FALSE(t.find(ip(2)));
    EXPECT_TRUE(t.find(ip(3)));
    EXPECT_TRUE(t.find(ip(1)));
    EXPECT_EQ(t.size(), 3u);
    // STALE goes before INCOMPLETE.
    clock.advance(t.params().reachable_ns);
    EXPECT_EQ(t.lookup(ip(5)).result, NeighResolve::pending);
    EXPECT_FALSE(t.find(ip(3)));
    EXPECT_TRUE(t.find(ip(4)));
    // Statics are never evicted; a table full of statics has no space.
    NeighTable s(clock, 2);
    ASSERT_TRUE(s.add_static(ip(1), kPeerMac));
    ASSERT_TRUE(s.add_static(ip(2), kPeerMac));
    EXPECT_FALSE(s.add_static(ip(3), kPeerMac));
    EXPECT_EQ(s.lookup(ip(3)).result, NeighResolve::no_space);
    EXPECT_EQ(s.learn(ip(3), kPeerMac, NeighLearn::confirmed), NeighLearnResult::no_space);
    EXPECT_EQ(s.capacity(), 2u);
}

// ---------------------------------------------------------------------------------------------
// Truncation and corruption

struct Valid {
    const char* name;
    Bytes frame;
    std::size_t min_len; ///< shortest prefix that is still the same valid message (ARP padding)
};

std::vector<Valid> valid_frames() {
    std::vector<Valid> v;
    v.push_back(
        {"arp request", arp_frame(1, kPeerMac, kPeerIp4, MacAddr{}, kOurIp4, kBroadcastMac), 42});
    v.push_back({"arp request vlan",
                 arp_frame(1, kPeerMac, kPeerIp4, MacAddr{}, kOurIp4, kBroadcastMac, 7), 46});
    v.push_back({"arp reply", arp_frame(2, kPeerMac, kPeerIp4, kOurMac, kOurIp4, kOurMac), 42});
    v.push_back({"gratuitous arp",
                 arp_frame(1, kPeerMac, kPeerIp4, MacAddr{}, kPeerIp4, kBroadcastMac), 42});
    NdSpec ns;
    v.push_back({"ns", nd_frame(ns), 0});
    ns.tci = 9;
    v.push_back({"ns vlan", nd_frame(ns), 0});
    NdSpec na;
    na.type = 136;
    na.dst = kOurIp6;
    na.target = kPeerIp6;
    na.opt_type = 2;
    v.push_back({"na", nd_frame(na), 0});
    for (auto& x : v)
        if (x.min_len == 0) x.min_len = x.frame.size();
    return v;
}

TEST(NeighTruncation, EveryPrefixDroppedAndCounted) {
    for (const Valid& f : valid_frames()) {
        for (std::size_t len = 0; len < f.min_len; ++len) {
            Clock clock = Clock::virtual_clock();
            NeighTable t(clock, 4);
            NeighResponder r(t, our_addrs());
            auto heap = std::make_unique<std::uint8_t[]>(len ? len : 1);
            std::copy(f.frame.begin(), f.frame.begin() + static_cast<std::ptrdiff_t>(len),
                      heap.get());
            std::array<std::uint8_t, kNeighMaxReply> out{};
            const NeighRx rx = r.handle_frame(std::span<const std::uint8_t>(heap.get(), len), out);
            EXPECT_EQ(rx.status, NeighStatus::malformed) << f.name << " len " << len;
            EXPECT_EQ(rx.reply_len, 0u);
            EXPECT_EQ(r.counters()[NeighCounter::malformed], 1u);
            EXPECT_EQ(t.size(), 0u);
        }
        // Every longer prefix (Ethernet padding cut short) is still the same message.
        for (std::size_t len = f.min_len; len <= f.frame.size(); ++len) {
            Clock clock = Clock::virtual_clock();
            NeighTable t(clock, 4);
            NeighResponder r(t, our_addrs());
            auto heap = std::make_unique<std::uint8_t[]>(len);
            std::copy(f.frame.begin(), f.frame.begin() + static_cast<std::ptrdiff_t>(len),
                      heap.get());
            std::array<std::uint8_t, kNeighMaxReply> out{};
            const NeighRx rx = r.handle_frame(std::span<const std::uint8_t>(heap.get(), len), out);
            EXPECT_NE(rx.status, NeighStatus::malformed) << f.name << " len " << len;
        }
    }
}

TEST(NeighTruncation, EveryByteCorruptedNeverCrashes) {
    // Each byte of each valid frame set to a few values: whatever the outcome, it stays in bounds
    // (the sanitizer build checks) and any reply is complete.
    for (const Valid& f : valid_frames()) {
        for (std::size_t i = 0; i < f.frame.size(); ++i) {
            for (std::uint8_t v :
                 {std::uint8_t{0}, std::uint8_t{0xff}, static_cast<std::uint8_t>(f.frame[i] ^ 1),
                  static_cast<std::uint8_t>(f.frame[i] + 0x80)}) {
                Clock clock = Clock::virtual_clock();
                NeighTable t(clock, 4);
                NeighResponder r(t, our_addrs());
                auto heap = std::make_unique<std::uint8_t[]>(f.frame.size());
                std::copy(f.frame.begin(), f.frame.end(), heap.get());
                heap[i] = v;
                std::array<std::uint8_t, kNeighMaxReply> out{};
                const NeighRx rx =
                    r.handle_frame(std::span<const std::uint8_t>(heap.get(), f.frame.size()), out);
                EXPECT_LE(rx.reply_len, kNeighMaxReply);
                if (rx.reply_len > 0) {
                    EXPECT_TRUE(rx.status == NeighStatus::arp_request ||
                                rx.status == NeighStatus::ns);
                }
                std::uint64_t total = 0;
                for (auto c : r.counters().snapshot().v)
                    total += c;
                EXPECT_GE(total, 1u) << f.name << " byte " << i; // every frame is counted
            }
        }
    }
}

} // namespace
} // namespace droce::test
