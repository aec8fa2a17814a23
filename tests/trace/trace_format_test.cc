/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * droce-trace's formatter on frames built here with wire::build_frame(): the opcodes, AETH
 * syndromes and failure cases no real capture holds (NAKs, RNR NAKs, atomics, invalidate, UD
 * with immediate, VLAN, ECN CE, bad ICRC, truncation), and the classification of non-RoCE frames.
 */
#include <algorithm>
#include <cstring>
#include <utility>

#include "aeth_decode.h"
#include "trace_test_util.h"

namespace droce::trace::test {
namespace {

using wire::AethKind;
using wire::Opcode;
using wire::PacketFields;

#define EXPECT_CONTAINS(haystack, needle)                                                          \
    EXPECT_TRUE(contains((haystack), (needle))) << "expected «" << (needle) << "» in:\n"          \
                                                << (haystack)

// Byte offsets in an untagged IPv4 frame from test_path().
constexpr std::size_t kIpOff = 14;
constexpr std::size_t kUdpOff = kIpOff + 20;
constexpr std::size_t kBthOff = kUdpOff + 8;

PacketFields fields(Opcode op) {
    PacketFields f;
    f.opcode = op;
    f.dest_qp = 0x000123;
    f.psn = wire::Psn(1000);
    return f;
}

FrameOutput ack_with(std::uint8_t syndrome, std::uint32_t msn = 7) {
    PacketFields f = fields(Opcode::RC_ACKNOWLEDGE);
    f.syndrome = syndrome;
    f.msn = msn;
    return format_bytes(build(f));
}

TEST(TraceAeth, CreditAndRnrTables) {
    // IBTA credit count encoding and RNR timer encoding, spot values.
    EXPECT_EQ(aeth_credits(0), 0u);
    EXPECT_EQ(aeth_credits(4), 4u);
    EXPECT_EQ(aeth_credits(6), 8u);
    EXPECT_EQ(aeth_credits(15), 192u);
    EXPECT_EQ(aeth_credits(16), 256u);
    EXPECT_EQ(aeth_credits(30), 32768u);
    EXPECT_FALSE(aeth_credits(31).has_value());
    // RNR timer codes in microseconds (the names of Linux's enum ib_rnr_timeout spell the same
    // values in milliseconds, e.g. IB_RNR_TIMER_000_96 = 13).
    const std::pair<std::uint8_t, std::uint32_t> rnr[] = {
        {0, 655360}, {1, 10},      {2, 20},      {3, 30},      {4, 40},    {5, 60},
        {6, 80},     {7, 120},     {13, 960},    {14, 1280},   {19, 7680}, {25, 61440},
        {26, 81920}, {29, 245760}, {30, 327680}, {31, 491520},
    };
    for (const auto& [code, usec] : rnr)
        EXPECT_EQ(rnr_timer_usec(code), usec) << int(code);
    EXPECT_EQ(rnr_timer_usec(32), 0u);
    EXPECT_EQ(format_rnr_timer(0), "655.36 ms");
    EXPECT_EQ(format_rnr_timer(1), "0.01 ms");
    EXPECT_EQ(format_rnr_timer(14), "1.28 ms");
    EXPECT_EQ(format_rnr_timer(18), "5.12 ms");
    EXPECT_EQ(format_rnr_timer(31), "491.52 ms");
    // Monotonic from code 1 to 31; code 0 is the longest of all.
    for (std::uint8_t c = 2; c < 32; ++c)
        EXPECT_GT(rnr_timer_usec(c), rnr_timer_usec(c - 1)) << int(c);
    EXPECT_GT(rnr_timer_usec(0), rnr_timer_usec(31));
}

TEST(TraceAeth, AckWithCredits) {
    const FrameOutput f = ack_with(wire::make_syndrome(AethKind::ack, 5), 42);
    EXPECT_EQ(f.kind, FrameKind::roce);
    EXPECT_CONTAINS(f.text, "RC_ACKNOWLEDGE dest_qp=0x000123 psn=1000 ack_req=0  AETH "
                            "syndrome=0x05 (ACK credit_count=5 (6 credits)) msn=42  ICRC ok");
    EXPECT_EQ(f.json["aeth"]["credits"], 6u);
    EXPECT_CONTAINS(f.explained, "ACK; credit count 5 = the responder has 6 receive WQEs posted");
}

TEST(TraceAeth, RnrNak) {
    const FrameOutput f = ack_with(wire::make_syndrome(AethKind::rnr_nak, 14));
    EXPECT_CONTAINS(f.text, "AETH syndrome=0x2e (RNR NAK rnr_timer=14 1.28 ms) msn=7");
    EXPECT_EQ(f.json["aeth"]["kind"], "RNR NAK");
    EXPECT_EQ(f.json["aeth"]["rnr_timer"], 14u);
    EXPECT_DOUBLE_EQ(f.json["aeth"]["rnr_timer_ms"].get<double>(), 1.28);
    EXPECT_CONTAINS(
        f.explained,
        "0x2e: RNR NAK: responder had no receive WQE; retry after the encoded minimum RNR "
        "timer (14 = 1.28 ms)");
    EXPECT_CONTAINS(f.explained, "the requester resends from it once the RNR timer has run out");

    const FrameOutput longest = ack_with(wire::make_syndrome(AethKind::rnr_nak, 0));
    EXPECT_CONTAINS(longest.explained, "(0 = 655.36 ms)");
}

TEST(TraceAeth, NakCodes) {
    struct Case {
        std::uint8_t code;
        const char* name;
        const char* sentence;
    };
    const Case cases[] = {
        {0, "psn_sequence_error",
         "NAK: PSN sequence error: a request arrived with a PSN past the one"},
        {1, "invalid_request", "NAK: invalid request: the responder cannot carry out this request"},
        {2, "remote_access_error",
         "NAK: remote access error: the R_Key, the address range or the access rights"},
        {3, "remote_operational_error",
         "NAK: remote operational error: the responder hit a fault of its own"},
        {4, "invalid_rd_request", "NAK: invalid RD request"},
        {9, "reserved", "NAK: reserved NAK code 9"},
    };
    for (const Case& c : cases) {
        const std::uint8_t syndrome = wire::make_syndrome(AethKind::nak, c.code);
        const FrameOutput f = ack_with(syndrome);
        SCOPED_TRACE(f.text);
        EXPECT_EQ(syndrome, 0x60 + c.code);
        EXPECT_CONTAINS(f.text, std::string("(NAK ") + c.name + ")");
        EXPECT_EQ(f.json["aeth"]["kind"], "NAK");
        EXPECT_EQ(f.json["aeth"]["nak_code"], c.code);
        EXPECT_EQ(f.json["aeth"]["nak"], c.name);
        EXPECT_CONTAINS(f.explained, c.sentence);
    }
    EXPECT_CONTAINS(ack_with(0x60).explained, "the PSN the NAK refers to");
}

TEST(TraceAeth, ReservedSyndrome) {
    const FrameOutput f = ack_with(0x45);
    EXPECT_EQ(f.json["aeth"]["kind"], "reserved");
    EXPECT_CONTAINS(f.explained, "reserved syndrome");
}

TEST(TraceOpcodes, CompareSwap) {
    PacketFields p = fields(Opcode::RC_COMPARE_SWAP);
    p.va = 0x00007f0000001000;
    p.rkey = 0xabcd1234;
    p.swap_add = 0x1111222233334444;
    p.compare = 0x5555666677778888;
    p.ack_req = true;
    const FrameOutput f = format_bytes(build(p));
    EXPECT_EQ(f.kind, FrameKind::roce);
    EXPECT_CONTAINS(
        f.text,
        "RC_COMPARE_SWAP dest_qp=0x000123 psn=1000 ack_req=1  AtomicETH va=0x00007f0000001000 "
        "r_key=0xabcd1234 swap_data=0x1111222233334444 compare_data=0x5555666677778888  ICRC ok");
    const auto& a = f.json["atomic_eth"];
    EXPECT_EQ(a["va"], "0x00007f0000001000");
    EXPECT_EQ(a["r_key"], 0xabcd1234u);
    EXPECT_EQ(a["swap_add_data"], "0x1111222233334444");
    EXPECT_EQ(a["compare_data"], "0x5555666677778888");
    EXPECT_CONTAINS(f.explained, "COMPARE & SWAP: the responder atomically compares");
    EXPECT_CONTAINS(f.explained,
                    "swap_data 0x1111222233334444: written to the target if the compare succeeds.");
    EXPECT_FALSE(contains(f.explained, "not aligned"));

    p.va = 0x00007f0000001004; // misaligned
    EXPECT_CONTAINS(format_bytes(build(p)).explained,
                    "this one is not, so the responder must answer NAK invalid request");
}

TEST(TraceOpcodes, FetchAddAndAtomicAck) {
    PacketFields p = fields(Opcode::RC_FETCH_ADD);
    p.va = 0x1000;
    p.rkey = 7;
    p.swap_add = 5;
    const FrameOutput fa = format_bytes(build(p));
    EXPECT_CONTAINS(fa.text, "AtomicETH va=0x0000000000001000 r_key=0x00000007 "
                             "add_data=0x0000000000000005 compare_data=0x0000000000000000");
    EXPECT_CONTAINS(fa.explained, "FETCH & ADD");
    EXPECT_CONTAINS(fa.explained, "unused by FETCH & ADD");

    PacketFields ack = fields(Opcode::RC_ATOMIC_ACKNOWLEDGE);
    ack.syndrome = wire::make_syndrome(AethKind::ack, wire::kAethCreditsInvalid);
    ack.msn = 3;
    ack.orig_rem_data = 0x0123456789abcdef;
    const FrameOutput aa = format_bytes(build(ack));
    EXPECT_CONTAINS(
        aa.text,
        "RC_ATOMIC_ACKNOWLEDGE dest_qp=0x000123 psn=1000 ack_req=0  AETH syndrome=0x1f (ACK "
        "credits not in use) msn=3  AtomicAckETH orig_remote_data=0x0123456789abcdef  ICRC ok");
    EXPECT_EQ(aa.json["atomic_ack_eth"]["orig_remote_data"], "0x0123456789abcdef");
    EXPECT_CONTAINS(
        aa.explained,
        "orig_remote_data 0x0123456789abcdef: the 8 bytes at the target before the atomic ran");
}

TEST(TraceOpcodes, SendWithInvalidate) {
    PacketFields p = fields(Opcode::RC_SEND_ONLY_WITH_INVALIDATE);
    p.inv_rkey = 0x00c0ffee;
    const FrameOutput f = format_bytes(build(p, 5));
    EXPECT_CONTAINS(f.text, "RC_SEND_ONLY_WITH_INVALIDATE dest_qp=0x000123 psn=1000 ack_req=0  "
                            "IETH r_key=0x00c0ffee  payload=5 pad=3  ICRC ok");
    EXPECT_EQ(f.json["ieth"]["r_key"], 0x00c0ffeeu);
    EXPECT_EQ(f.json["pad_count"], 3u);
    EXPECT_EQ(f.json["payload_length"], 5u);
    EXPECT_CONTAINS(f.explained,
                    "with invalidate, the responder invalidates the R_Key in the IETH");
    EXPECT_CONTAINS(f.explained, "ack_req   clear: no immediate acknowledgement is asked for");
}

TEST(TraceOpcodes, UdSendWithImmediate) {
    PacketFields p = fields(Opcode::UD_SEND_ONLY_WITH_IMMEDIATE);
    p.qkey = 0x11111111;
    p.src_qp = 0x42;
    p.imm = 0xdeadbeef;
    const FrameOutput f = format_bytes(build(p, 8));
    EXPECT_CONTAINS(
        f.text,
        "UD_SEND_ONLY_WITH_IMMEDIATE dest_qp=0x000123 psn=1000 ack_req=0  DETH q_key=0x11111111 "
        "src_qp=0x000042  ImmDt imm_data=0xdeadbeef  payload=8 pad=0  ICRC ok");
    EXPECT_EQ(f.json["imm_data"], 0xdeadbeefu);
    EXPECT_EQ(f.json["deth"]["q_key"], 0x11111111u);
    EXPECT_CONTAINS(f.explained, "UD, unreliable datagram");
    EXPECT_FALSE(contains(f.explained, "controlled key")) << "high bit clear";
}

TEST(TraceOpcodes, EveryOpcodeHasASentence) {
    for (Opcode op : wire::kAllOpcodes) {
        const std::string s = describe_opcode(op);
        EXPECT_FALSE(contains(s, "no sentence")) << wire::to_string(op) << ": " << s;
        EXPECT_GT(s.size(), 40u) << wire::to_string(op);
    }
    EXPECT_CONTAINS(describe_opcode(Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE),
                    "consumes a receive WQE");
    EXPECT_CONTAINS(describe_opcode(Opcode::RC_SEND_MIDDLE), "a middle packet");
    EXPECT_CONTAINS(describe_opcode(Opcode::RC_RDMA_WRITE_FIRST),
                    "the first packet of a multi-packet message");
}

TEST(TraceOpcodes, SolicitedEventAndPkey) {
    PacketFields p = fields(Opcode::RC_SEND_ONLY);
    p.solicited = true;
    p.pkey = 0x8001;
    p.fecn = true;
    const FrameOutput f = format_bytes(build(p, 4));
    EXPECT_CONTAINS(f.text, "ack_req=0 se=1 fecn=1 p_key=0x8001");
    EXPECT_EQ(f.json["se"], true);
    EXPECT_EQ(f.json["p_key"], 0x8001u);
    EXPECT_CONTAINS(f.explained, "set (solicited event)");
    EXPECT_CONTAINS(f.explained, "a receiver drops packets whose P_Key is not in its table");
}

TEST(TraceHeaders, VlanIpv6AndEcnCe) {
    wire::PathHeaders path = test_path(true);
    path.has_vlan = true;
    path.vlan_tci = static_cast<std::uint16_t>(3 << 13 | 100);
    path.tos = (26 << 2) | 3; // DSCP 26, CE
    path.flow_label = 0x12345;
    const FrameOutput f = format_bytes(build(fields(Opcode::RC_RDMA_WRITE_MIDDLE), 64, path));
    EXPECT_EQ(f.kind, FrameKind::roce) << f.text;
    EXPECT_EQ(
        f.text.rfind(
            "1  vlan=100 pcp=3  fd00::1 > fd00::2 ecn=CE  udp 49443 > 4791  RC_RDMA_WRITE_MIDDLE",
            0),
        0u)
        << f.text;
    EXPECT_EQ(f.json["vlan"]["vid"], 100u);
    EXPECT_EQ(f.json["vlan"]["pcp"], 3u);
    EXPECT_EQ(f.json["ip"]["dscp"], 26u);
    EXPECT_EQ(f.json["ip"]["ecn_name"], "CE");
    EXPECT_EQ(f.json["ip"]["flow_label"], 0x12345u);
    EXPECT_EQ(f.json["eth"]["ether_type"], 0x86ddu);
    EXPECT_CONTAINS(f.explained, "the receiver (DCQCN notification point) answers with a CNP");
    EXPECT_CONTAINS(f.explained, "PFC pauses traffic per priority");
    EXPECT_FALSE(contains(f.explained, "UDP checksum is 0"))
        << "IPv6 RoCE carries a real UDP checksum";
}

TEST(TraceRejects, BadIcrc) {
    std::vector<std::uint8_t> bytes = build(fields(Opcode::RC_SEND_ONLY), 16);
    bytes[kBthOff + 12 + 3] ^= 0x40; // a payload byte
    const FrameOutput f = format_bytes(bytes);
    EXPECT_EQ(f.kind, FrameKind::rejected);
    EXPECT_EQ(f.reason, wire::RejectReason::bad_icrc);
    EXPECT_CONTAINS(
        f.text,
        "RC_SEND_ONLY dest_qp=0x000123 psn=1000 ack_req=0  payload=16 pad=0  ICRC BAD wire=0x");
    EXPECT_CONTAINS(f.text, "  rejected bad_icrc (ICRC does not match the packet)");
    EXPECT_FALSE(contains(f.text, "ICRC ok"));
    EXPECT_EQ(f.json["status"], "rejected");
    EXPECT_EQ(f.json["reject"], "bad_icrc");
    EXPECT_EQ(f.json["icrc"], "bad");
    EXPECT_TRUE(f.json.contains("icrc_computed"));
    EXPECT_NE(f.json["icrc_computed"], f.json["icrc_value"]);
    EXPECT_CONTAINS(f.explained, "ICRC BAD: the packet carries 0x");
}

TEST(TraceRejects, StructuralRejectsShowTheReason) {
    std::vector<std::uint8_t> bytes = build(fields(Opcode::RC_SEND_ONLY), 8);
    bytes[kBthOff + 1] |= 0x01; // TVer 1
    const FrameOutput tver = format_bytes(bytes);
    EXPECT_EQ(tver.kind, FrameKind::rejected);
    EXPECT_CONTAINS(tver.text, "udp 49443 > 4791  RC_SEND_ONLY dest_qp=0x000123");
    EXPECT_CONTAINS(tver.text, "  rejected bad_bth_version (BTH TVer is not 0)");
    EXPECT_FALSE(contains(tver.text, "ICRC")) << "the ICRC is never reached";
    EXPECT_EQ(tver.json["reject"], "bad_bth_version");
    EXPECT_CONTAINS(tver.explained, "rejected    bad_bth_version: BTH TVer is not 0.");

    std::vector<std::uint8_t> unknown = build(fields(Opcode::RC_SEND_ONLY), 8);
    unknown[kBthOff] = 0x1f; // not in the opcode table
    const FrameOutput u = format_bytes(unknown);
    EXPECT_EQ(u.reason, wire::RejectReason::unknown_opcode);
    EXPECT_CONTAINS(u.text, "opcode 0x1f dest_qp=0x000123");
    EXPECT_EQ(u.json["opcode"], "UNKNOWN");
    EXPECT_EQ(u.json["opcode_value"], 0x1fu);
}

TEST(TraceRejects, TruncatedCapture) {
    const std::vector<std::uint8_t> bytes = build(fields(Opcode::RC_SEND_ONLY), 100);
    RawFrame raw = raw_of(bytes);
    raw.bytes = raw.bytes.first(64); // a snap length cut the frame
    const FrameOutput f = format_all(raw);
    EXPECT_EQ(f.kind, FrameKind::rejected);
    EXPECT_EQ(f.reason, wire::RejectReason::bad_ip_length);
    EXPECT_CONTAINS(f.text, "10.0.0.1 > 10.0.0.2  rejected bad_ip_length");
    EXPECT_CONTAINS(f.text, "[captured 64 of " + std::to_string(bytes.size()) + " bytes]");
    EXPECT_EQ(f.json["captured_length"], 64u);
}

TEST(TraceRejects, FirstFragmentOfRoceIsRejectedLaterFragmentSkipped) {
    std::vector<std::uint8_t> bytes = build(fields(Opcode::RC_SEND_ONLY), 8);
    bytes[kIpOff + 6] = 0x20; // MF, offset 0: the UDP header is here and says 4791
    const FrameOutput first = format_bytes(bytes);
    EXPECT_EQ(first.kind, FrameKind::rejected);
    EXPECT_CONTAINS(first.text, "rejected ip_fragment");

    bytes[kIpOff + 7] = 0x10; // offset 128 bytes
    const FrameOutput later = format_bytes(bytes);
    EXPECT_EQ(later.kind, FrameKind::skipped);
    EXPECT_EQ(later.text,
              "1  10.0.0.1 > 10.0.0.2  skipped (IPv4 fragment, protocol 17, offset 128)");
}

/** drivers/uring's probes (TVer 15, 32 bytes, magic "DROCESHR") are named, not rejected; TVer 15
 *  without the magic is still a RoCE packet that broke a rule. */
TEST(TraceSkips, DroceProbesAreNamed) {
    std::vector<std::uint8_t> bytes = build(fields(Opcode::RC_SEND_ONLY), 16); // 32 B of UDP data
    bytes[kBthOff + 1] = 0x0f;
    bytes[kBthOff + 4] = 2;
    std::memcpy(bytes.data() + kBthOff + 8, "DROCESHR", 8);
    const FrameOutput probe = format_bytes(bytes);
    EXPECT_EQ(probe.kind, FrameKind::skipped);
    EXPECT_CONTAINS(probe.text, "skipped (droce GSO probe)");
    EXPECT_EQ(probe.json["skipped"], "droce GSO probe");
    EXPECT_CONTAINS(probe.explained, "transport version 15");
    bytes[kBthOff + 4] = 3;
    EXPECT_EQ(format_bytes(bytes).json["skipped"], "droce GSO answer");
    bytes[kBthOff + 8] = 'X';
    EXPECT_EQ(format_bytes(bytes).kind, FrameKind::rejected);
}

TEST(TraceGso, ASendCapturedBeforeTheKernelCutItSplitsIntoItsPackets) {
    for (const bool ipv6 : {false, true}) {
        SCOPED_TRACE(ipv6);
        std::vector<std::vector<std::uint8_t>> packets;
        for (std::uint32_t k = 0; k < 3; ++k) {
            PacketFields f = fields(k == 0   ? Opcode::RC_RDMA_WRITE_FIRST
                                    : k == 1 ? Opcode::RC_RDMA_WRITE_MIDDLE
                                             : Opcode::RC_RDMA_WRITE_LAST);
            f.psn = wire::Psn(1000 + k);
            // Equal UDP payloads (the RETH's 16 bytes less payload in the first), the last shorter.
            packets.push_back(build(f, k == 0 ? 240 : k == 1 ? 256 : 100, test_path(ipv6)));
        }
        const std::vector<std::uint8_t> send = gso_send(packets, ipv6);
        const RawFrame raw = raw_of(send);
        EXPECT_EQ(decode_frame(raw).kind, FrameKind::rejected); // one packet: its ICRC is wrong
        const std::vector<std::vector<std::uint8_t>> segs = split_gso_send(raw);
        ASSERT_EQ(segs.size(), 3u);
        for (std::size_t k = 0; k < 3; ++k) {
            EXPECT_EQ(segs[k].size(), packets[k].size()) << k;
            RawFrame r = raw_of(segs[k]);
            r.gso_segment = static_cast<std::uint16_t>(k + 1);
            r.gso_segments = 3;
            const FrameOutput o = format_all(r);
            EXPECT_EQ(o.kind, FrameKind::roce) << o.text;
            EXPECT_CONTAINS(o.text, "gso=" + std::to_string(k + 1) + "/3");
            EXPECT_CONTAINS(o.text, "ICRC ok");
            EXPECT_EQ(o.json["gso_segments"], 3u);
            // The packet as sent (IPv4 header and IPv6 UDP checksums written again).
            EXPECT_EQ(0, std::memcmp(segs[k].data(), packets[k].data(), segs[k].size())) << k;
        }
        // A packet of another PSN, or a damaged one, in the send: not split.
        EXPECT_TRUE(split_gso_send(raw_of(gso_send({packets[0], packets[2]}, ipv6))).empty());
        std::vector<std::uint8_t> damaged = send;
        damaged[damaged.size() - 50] ^= 1;
        EXPECT_TRUE(split_gso_send(raw_of(damaged)).empty());
        // A plain packet with a bad ICRC stays one rejected frame.
        std::vector<std::uint8_t> bad = packets[1];
        bad.back() ^= 1;
        EXPECT_TRUE(split_gso_send(raw_of(bad)).empty());
    }
}

TEST(TraceSkips, OtherUdpAndIpProtocols) {
    std::vector<std::uint8_t> bytes = build(fields(Opcode::RC_SEND_ONLY), 8);
    bytes[kUdpOff + 2] = 0;
    bytes[kUdpOff + 3] = 53;
    const FrameOutput dns = format_bytes(bytes);
    EXPECT_EQ(dns.kind, FrameKind::skipped);
    EXPECT_EQ(dns.text, "1  10.0.0.1 > 10.0.0.2  skipped (UDP port 53)");
    EXPECT_EQ(dns.json["dst_port"], 53u);
    EXPECT_EQ(dns.json["src_port"], 0xc123u);

    // RoCEv2 is the destination port: a datagram from 4791 to elsewhere is not RoCE.
    bytes[kUdpOff] = 4791 >> 8;
    bytes[kUdpOff + 1] = 4791 & 0xff;
    bytes[kUdpOff + 2] = 0x30;
    bytes[kUdpOff + 3] = 0x39;
    EXPECT_CONTAINS(
        format_bytes(bytes).text,
        "skipped (UDP port 12345 (source port 4791; RoCEv2 is recognised by destination port))");

    // RoCEv2 whatever the source port, even 0 (the ICRC covers the port, so build it that way).
    wire::PathHeaders path = test_path();
    path.udp_sport = 0;
    EXPECT_EQ(format_bytes(build(fields(Opcode::RC_SEND_ONLY), 8, path)).kind, FrameKind::roce);

    std::vector<std::uint8_t> igmp = build(fields(Opcode::RC_SEND_ONLY), 8);
    igmp[kIpOff + 9] = 2;
    EXPECT_EQ(format_bytes(igmp).text, "1  10.0.0.1 > 10.0.0.2  skipped (IPv4 IGMP)");
    igmp[kIpOff + 9] = 132;
    EXPECT_EQ(format_bytes(igmp).text, "1  10.0.0.1 > 10.0.0.2  skipped (IPv4 protocol 132)");
    igmp[kIpOff + 9] =
        1; // the ICMP type is then the first byte after the IP header: 0xc1 of port 0xc123
    EXPECT_EQ(format_bytes(igmp).text, "1  10.0.0.1 > 10.0.0.2  skipped (IPv4 ICMP type 193)");
}

TEST(TraceSkips, EtherTypes) {
    std::vector<std::uint8_t> frame(60, 0);
    auto with_type = [&](std::uint16_t et) {
        frame[12] = static_cast<std::uint8_t>(et >> 8);
        frame[13] = static_cast<std::uint8_t>(et);
        return format_bytes(frame);
    };
    EXPECT_EQ(with_type(0x88b5).text, "1  skipped (unknown EtherType 0x88b5)");
    EXPECT_EQ(with_type(0x8808).text, "1  skipped (MAC control, PAUSE or PFC (EtherType 0x8808))");
    EXPECT_CONTAINS(with_type(0x8808).explained, "priority flow control (PFC)");
    EXPECT_EQ(with_type(0x88cc).text, "1  skipped (LLDP (EtherType 0x88cc))");
    EXPECT_EQ(with_type(0x0026).text, "1  skipped (IEEE 802.3 frame with length 38 (LLC))");
    EXPECT_EQ(with_type(0x0806).json["skipped"], "ARP");
    EXPECT_EQ(with_type(0x8915).json["skipped"], "RoCE v1 (EtherType 0x8915)");

    const std::vector<std::uint8_t> runt(10, 0xff);
    EXPECT_EQ(format_bytes(runt).text, "1  skipped (truncated Ethernet frame, 10 bytes)");
}

TEST(TraceSkips, LinkTypes) {
    const std::vector<std::uint8_t> bytes = build(fields(Opcode::RC_SEND_ONLY), 8);
    EXPECT_EQ(format_all(raw_of(bytes, 247)).text, "1  skipped (link type INFINIBAND)");
    EXPECT_EQ(format_all(raw_of(bytes, 113)).text, "1  skipped (link type LINUX_SLL)");
    EXPECT_EQ(format_all(raw_of(bytes, 197)).json["link_type"], "ERF");
    EXPECT_EQ(link_type_name(101), "DLT 101");
}

} // namespace
} // namespace droce::trace::test

namespace droce::trace::test {
namespace {

// Every prefix of a frame, and every single-byte corruption of its headers, must format without
// reading outside the frame (the asan build of this test catches such reads) and still produce
// one line naming the frame.
TEST(TraceRobustness, PrefixesAndCorruptionsFormat) {
    std::vector<std::vector<std::uint8_t>> frames;
    PacketFields cs = fields(Opcode::RC_COMPARE_SWAP);
    frames.push_back(build(cs));
    PacketFields ud = fields(Opcode::UD_SEND_ONLY_WITH_IMMEDIATE);
    frames.push_back(build(ud, 13));
    wire::PathHeaders v6 = test_path(true);
    v6.has_vlan = true;
    frames.push_back(build(fields(Opcode::RC_SEND_LAST_WITH_INVALIDATE), 6, v6));
    frames.push_back(build(fields(Opcode::CNP)));
    for (const auto& full : frames) {
        for (std::size_t n = 0; n <= full.size(); ++n) {
            const std::vector<std::uint8_t> prefix(full.begin(),
                                                   full.begin() + static_cast<long>(n));
            const FrameOutput f = format_bytes(prefix);
            EXPECT_EQ(f.text.rfind("1  ", 0), 0u) << f.text;
            if (n < full.size()) {
                EXPECT_NE(f.kind, FrameKind::roce) << n << ": " << f.text;
            }
        }
        const std::size_t headers = std::min<std::size_t>(full.size(), 100);
        for (std::size_t i = 0; i < headers; ++i) {
            for (std::uint8_t x : {0x01, 0x80, 0xff}) {
                std::vector<std::uint8_t> bad = full;
                bad[i] ^= x;
                const FrameOutput f = format_bytes(bad);
                EXPECT_EQ(f.text.find('\n'), std::string::npos);
                EXPECT_FALSE(f.json.dump().empty());
            }
        }
    }
}

} // namespace
} // namespace droce::trace::test

namespace droce::trace::test {
namespace {

/** The reverse of test_path(): B (10.0.0.2) back to A (10.0.0.1). */
wire::PathHeaders reverse_path() {
    wire::PathHeaders p = test_path();
    std::swap(p.src_mac, p.dst_mac);
    std::swap(p.src_ip, p.dst_ip);
    return p;
}

TEST(TraceCnp, WhyEachCnpWasSent) {
    CnpCauses causes;
    std::vector<std::vector<std::uint8_t>> frames;
    const auto feed = [&](const std::vector<std::uint8_t>& bytes, std::uint64_t index) {
        RawFrame r = raw_of(bytes);
        r.index = index;
        return causes.observe(decode_frame(r));
    };
    wire::PacketFields cnp{};
    cnp.opcode = wire::Opcode::CNP;
    cnp.becn = true;
    cnp.pkey = 0xffff;
    cnp.dest_qp = 0x11; // A's sending QP
    // 1. A CNP with no mark before it in the capture.
    EXPECT_PRED2(contains, feed(build(cnp, 0, reverse_path()), 1), "no ECN-CE marked packet");
    // 2. Two WRITEs A -> B, the second marked CE by a switch; one unmarked B -> A (other way).
    wire::PacketFields w{};
    w.opcode = wire::Opcode::RC_RDMA_WRITE_ONLY;
    w.dest_qp = 0x12;
    w.psn = wire::Psn(5);
    w.rkey = 0x100;
    w.dma_len = 64;
    wire::PathHeaders ce = test_path();
    EXPECT_EQ(feed(build(w, 64, ce), 2), "");
    ce.tos = 3; // CE
    w.psn = wire::Psn(6);
    EXPECT_EQ(feed(build(w, 64, ce), 3), "");
    wire::PathHeaders back_ce = reverse_path();
    back_ce.tos = 3;
    EXPECT_EQ(feed(build(w, 64, back_ce), 4), ""); // marked, but in the other direction
    // 3. B's CNP to A's QP 0x11 answers frame 3 (not frame 4).
    const std::string why = feed(build(cnp, 0, reverse_path()), 5);
    EXPECT_PRED2(contains, why, "1 since the previous CNP");
    EXPECT_PRED2(contains, why, "frame #3");
    EXPECT_PRED2(contains, why, "PSN 0x000006 to QP 0x000012");
    EXPECT_PRED2(contains, why, "tells QP 0x000011 to slow down");
    // 4. Another CNP with no new mark: it says so.
    EXPECT_PRED2(contains, feed(build(cnp, 0, reverse_path()), 6), "no new CE mark");
    // 5. A's CNP to B answers frame 4.
    EXPECT_PRED2(contains, feed(build(cnp, 0, test_path()), 7), "frame #4");
    // 6. A marked packet cut by the capture's snap length (80 of its bytes) still counts.
    w.psn = wire::Psn(9);
    std::vector<std::uint8_t> cut = build(w, 1024, ce);
    RawFrame r = raw_of(cut);
    r.index = 8;
    r.bytes = std::span<const std::uint8_t>(cut.data(), 80);
    EXPECT_EQ(causes.observe(decode_frame(r)), "");
    const std::string why_cut = feed(build(cnp, 0, reverse_path()), 9);
    EXPECT_PRED2(contains, why_cut, "frame #8");
    EXPECT_PRED2(contains, why_cut, "PSN 0x000009");
}

} // namespace
} // namespace droce::trace::test
