/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * parse_frame() on broken frames: each is rejected, for the reason the fixed receive order
 * says. Every frame is handed over in a heap block of exactly its size, so
 * the AddressSanitizer build of this file (suite 'asan') catches any read past the end.
 *
 * Where a test breaks one rule on purpose, it recomputes the ICRC with the reference routine, so
 * that the structural check, not the ICRC, is what rejects the frame.
 */
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "wire_test_util.h"

namespace droce::wire::test {
namespace {

struct Sample {
    std::string name;
    Bytes frame;
};

/** Valid frames of different opcodes, encapsulations and origins. */
std::vector<Sample> samples() {
    std::vector<Sample> v;
    auto add = [&](const char* name, bool ipv6, bool vlan, Opcode op, std::size_t len) {
        v.push_back({name, build(make_path(ipv6, vlan), make_fields(op, true), make_payload(len))});
    };
    add("SEND_ONLY ipv4 5B", false, false, Opcode::RC_SEND_ONLY, 5);
    add("RDMA_WRITE_FIRST ipv6 vlan 64B", true, true, Opcode::RC_RDMA_WRITE_FIRST, 64);
    add("ACKNOWLEDGE ipv4 vlan", false, true, Opcode::RC_ACKNOWLEDGE, 0);
    add("COMPARE_SWAP ipv6", true, false, Opcode::RC_COMPARE_SWAP, 0);
    add("ATOMIC_ACKNOWLEDGE ipv4", false, false, Opcode::RC_ATOMIC_ACKNOWLEDGE, 0);
    add("READ_RESPONSE_ONLY ipv6 3B", true, false, Opcode::RC_RDMA_READ_RESPONSE_ONLY, 3);
    add("UD_SEND_ONLY_WITH_IMMEDIATE ipv4 vlan 2B", false, true,
        Opcode::UD_SEND_ONLY_WITH_IMMEDIATE, 2);
    add("CNP ipv4", false, false, Opcode::CNP, 0);
    add("SEND_ONLY_WITH_INVALIDATE ipv6 0B", true, false, Opcode::RC_SEND_ONLY_WITH_INVALIDATE, 0);
    add("MRC_WRITE ipv4 vlan 61B", false, true, Opcode::MRC_WRITE, 61);
    add("MRC_WRITE_LAST_WITH_IMMEDIATE ipv6 8B", true, false, Opcode::MRC_WRITE_LAST_WITH_IMMEDIATE,
        8);
    add("MRC_SACK ipv6 vlan", true, true, Opcode::MRC_SACK, 0);
    add("MRC_PORT_STATUS ipv4", false, false, Opcode::MRC_PORT_STATUS, 0);
    // Bytes after the IP packet (an Ethernet trailer or padding) are not part of it.
    v.push_back({"ACKNOWLEDGE ipv4 + 8 trailer bytes",
                 build(make_path(false, false), make_fields(Opcode::RC_ACKNOWLEDGE, false), {})});
    v.back().frame.insert(v.back().frame.end(), 8, 0);

    const std::string dir = captures_dir();
    PcapFile rxe = read_pcap(dir + "/montybeatnik_rdma-roce-lab_test.pcap");
    if (rxe.frames.size() >= 7) {
        v.push_back({"captured rxe RDMA_WRITE_ONLY (pad 2)", rxe.frames[3]});
        v.push_back({"captured rxe READ_RESPONSE_FIRST", rxe.frames[6]});
    }
    PcapFile hw = read_pcap(dir + "/oferby_proxy_roce.pcap");
    if (hw.frames.size() >= 16) v.push_back({"captured hardware ACK", hw.frames[15]});
    PcapFile scapy = read_pcap(dir + "/scapy_roce_uts_icrc_vectors.pcap");
    if (scapy.frames.size() >= 3)
        v.push_back({"captured scapy UC SEND_ONLY IPv6", scapy.frames[2]});
    return v;
}

/** The sample as a whole must parse: otherwise the cases below would prove nothing. */
class Malformed : public ::testing::Test {
  protected:
    void SetUp() override {
        all_ = samples();
        ASSERT_EQ(all_.size(), 18u)
            << "a capture is missing (DROCE_CAPTURES_DIR=" << captures_dir() << ")";
        for (const Sample& s : all_)
            ASSERT_EQ(parse_exact(s.frame), RejectReason::ok) << s.name;
    }
    std::vector<Sample> all_;
};

/** A frame with @p extra bytes of payload inserted before the ICRC, lengths and ICRC made right. */
Bytes with_inserted_bytes(const Bytes& f, std::size_t extra, std::uint8_t value = 0xa5) {
    const Layout l = layout_of(f);
    Bytes g(f.begin(), f.begin() + static_cast<std::ptrdiff_t>(l.icrc));
    g.insert(g.end(), extra, value);
    g.insert(g.end(), 4, 0);
    set_l3_length(g, l.l3_end - l.l3 + extra);
    refresh_icrc(g);
    return g;
}

// ---------------------------------------------------------------------------------------------
// Truncation

TEST_F(Malformed, TruncatedAtEveryOffsetIsRejectedForTheRegionCut) {
    // The IP length field is read before anything after it, so a frame cut after the IP header
    // always fails the IP length check; before it, the missing header makes it too short.
    std::size_t cuts = 0;
    for (const Sample& s : all_) {
        SCOPED_TRACE(s.name);
        const Layout l = layout_of(s.frame);
        for (std::size_t n = 0; n < s.frame.size(); ++n) {
            RejectReason want;
            if (n < l.l3 + l.ip_hdr)
                want = RejectReason::too_short;
            else if (n < l.l3_end)
                want = RejectReason::bad_ip_length;
            else
                want = RejectReason::ok; // only Ethernet padding was cut
            ASSERT_EQ(parse_exact(std::span(s.frame).first(n)), want)
                << "cut at " << n << " of " << s.frame.size();
            ++cuts;
        }
    }
    EXPECT_GT(cuts, 1500u);
}

TEST_F(Malformed, ACutFrameNamesItsRocePortOnceItsUdpHeaderIsWhole) {
    // What the engine counts as malformed RoCE (rx_dropped_malformed) rather than other traffic.
    for (const Sample& s : all_) {
        SCOPED_TRACE(s.name);
        const Layout l = layout_of(s.frame);
        for (std::size_t n = 0; n <= s.frame.size(); ++n) {
            const Bytes cut(s.frame.begin(), s.frame.begin() + static_cast<std::ptrdiff_t>(n));
            ASSERT_EQ(names_roce_port(cut), n >= l.l4 + 8) << "cut at " << n;
        }
        Bytes other = s.frame;
        other[l.l4 + 3] ^= 1; // destination port 4790 or 4792
        EXPECT_FALSE(names_roce_port(other));
        other = s.frame;
        other[l.l3 + (l.ipv6 ? 6 : 9)] = 6; // TCP
        EXPECT_FALSE(names_roce_port(other));
    }
}

TEST_F(Malformed, PeekDestQpReadsTheBthOnlyWhenItIsWhole) {
    // The engine's prefetch hint (Device::prefetch_qps_of) before parse_frame: it must agree with
    // the parser on a whole frame and read nothing beyond a cut one.
    for (const Sample& s : all_) {
        SCOPED_TRACE(s.name);
        const Layout l = layout_of(s.frame);
        ParsedFrame pkt;
        ASSERT_EQ(parse_frame(s.frame, pkt), RejectReason::ok);
        const std::size_t bth_end = l.l4 + 8 + sizeof(Bth);
        for (std::size_t n = 0; n <= s.frame.size(); ++n) {
            // A copy of exactly n bytes, so that ASan sees any read past the cut.
            const Bytes cut(s.frame.begin(), s.frame.begin() + static_cast<std::ptrdiff_t>(n));
            ASSERT_EQ(peek_dest_qp(cut), n >= bth_end ? pkt.bth->dest_qp() : kNoDestQp)
                << "cut at " << n;
        }
        Bytes other = s.frame;
        other[l.l4 + 3] ^= 1; // destination port 4790 or 4792
        EXPECT_EQ(peek_dest_qp(other), kNoDestQp);
    }
}

TEST_F(Malformed, TruncatedWithMatchingIpAndUdpLengthsIsRejectedForTheHeaderCut) {
    // Cut the IP packet at every length and rewrite the IP (and, when present, UDP) lengths to
    // match, so the IP layer is consistent and the cut shows at the layer it falls in.
    std::set<RejectReason> seen;
    for (const Sample& s : all_) {
        SCOPED_TRACE(s.name);
        const Layout l = layout_of(s.frame);
        Parsed whole = parse_copy(s.frame);
        const OpcodeInfo& info = *whole.frame.info;
        const std::size_t ext_end = l.bth + 12 + info.ext_length;
        const unsigned pad = whole.frame.pad;
        for (std::size_t end = l.l3 + l.ip_hdr; end < l.l3_end; ++end) {
            Bytes g(s.frame.begin(), s.frame.begin() + static_cast<std::ptrdiff_t>(end));
            set_l3_length(g, end - l.l3);
            RejectReason want;
            if (end < l.l4 + 8)
                want = RejectReason::too_short; // UDP header
            else if (end < l.bth + 12 + 4)
                want = RejectReason::too_short; // BTH and ICRC
            else if (end < ext_end + 4)
                want = RejectReason::length_mismatch; // extension headers
            else {
                const std::size_t padded = end - 4 - ext_end;
                if (!info.is(OpFlags::payload))
                    want = RejectReason::length_mismatch;
                else if (pad > padded || padded % 4 != 0)
                    want = RejectReason::pad_mismatch;
                else
                    want = RejectReason::bad_icrc; // the last four bytes are not the ICRC
            }
            ASSERT_EQ(parse_exact(g), want) << "IP packet cut to " << end - l.l3 << " bytes";
            seen.insert(want);
        }
    }
    EXPECT_EQ(seen, (std::set<RejectReason>{RejectReason::too_short, RejectReason::length_mismatch,
                                            RejectReason::pad_mismatch, RejectReason::bad_icrc}));
}

TEST_F(Malformed, EmptyFrameIsTooShort) {
    EXPECT_EQ(parse_exact(std::span<const std::uint8_t>()), RejectReason::too_short);
    const Parsed p = parse_copy(std::span<const std::uint8_t>());
    EXPECT_EQ(p.frame.eth, nullptr);
}

// ---------------------------------------------------------------------------------------------
// Ethernet and IP

TEST_F(Malformed, NonIpEtherTypesAreNotIp) {
    for (const Sample& s : all_) {
        const Layout l = layout_of(s.frame);
        for (std::uint16_t et : {0x0806, 0x8915, 0x88cc, 0x0000, 0xffff, 0x86dc, 0x0801}) {
            Bytes g = s.frame;
            wr16(g, l.l3 - 2, et);
            EXPECT_EQ(parse_exact(g), RejectReason::not_ip) << s.name << " ethertype " << et;
        }
    }
}

TEST_F(Malformed, IpVersionDisagreeingWithEtherTypeIsRejected) {
    for (const Sample& s : all_) {
        const Layout l = layout_of(s.frame);
        for (unsigned version : {0u, 4u, 5u, 6u, 15u}) {
            if (version == (l.ipv6 ? 6u : 4u)) continue;
            Bytes g = s.frame;
            g[l.l3] = static_cast<std::uint8_t>((version << 4) | (g[l.l3] & 0x0f));
            if (!l.ipv6) refresh_icrc(g);
            EXPECT_EQ(parse_exact(g), RejectReason::bad_ip_version)
                << s.name << " version " << version;
        }
    }
}

TEST_F(Malformed, Ipv4LengthsThatCannotBeAreBadIpLength) {
    for (const Sample& s : all_) {
        const Layout l = layout_of(s.frame);
        if (l.ipv6) continue;
        SCOPED_TRACE(s.name);
        const std::size_t total = l.l3_end - l.l3;
        const std::size_t room = s.frame.size() - l.l3; // includes any Ethernet padding
        auto with = [&](std::size_t ihl_words, std::size_t total_len) {
            Bytes g = s.frame;
            g[l.l3] = static_cast<std::uint8_t>(0x40 | ihl_words);
            wr16(g, l.l3 + 2, total_len);
            return parse_exact(g);
        };
        EXPECT_EQ(with(5, room + 1), RejectReason::bad_ip_length) << "total length past the frame";
        EXPECT_EQ(with(5, 0xffff), RejectReason::bad_ip_length);
        EXPECT_EQ(with(5, 19), RejectReason::bad_ip_length) << "total length below the header";
        EXPECT_EQ(with(5, 0), RejectReason::bad_ip_length);
        for (std::size_t ihl = 0; ihl < 5; ++ihl)
            EXPECT_EQ(with(ihl, total), RejectReason::bad_ip_length) << "IHL " << ihl;
        EXPECT_EQ(with(15, 59), RejectReason::bad_ip_length) << "total length below IHL 15";
    }
}

TEST_F(Malformed, Ipv6PayloadLengthPastTheFrameIsBadIpLength) {
    for (const Sample& s : all_) {
        const Layout l = layout_of(s.frame);
        if (!l.ipv6) continue;
        const std::size_t room = s.frame.size() - l.l3 - 40;
        for (std::size_t plen : {room + 1, room + 4, std::size_t{0xffff}}) {
            Bytes g = s.frame;
            wr16(g, l.l3 + 4, plen);
            EXPECT_EQ(parse_exact(g), RejectReason::bad_ip_length)
                << s.name << " payload length " << plen;
        }
    }
}

TEST_F(Malformed, IpLengthShorterThanTheUdpLengthIsBadUdpLength) {
    // IP says the packet ends four bytes early (the tail becomes Ethernet padding): UDP disagrees.
    for (const Sample& s : all_) {
        const Layout l = layout_of(s.frame);
        Bytes g = s.frame;
        if (l.ipv6)
            wr16(g, l.l3 + 4, l.l3_end - l.l3 - 40 - 4);
        else
            wr16(g, l.l3 + 2, l.l3_end - l.l3 - 4);
        EXPECT_EQ(parse_exact(g), RejectReason::bad_udp_length) << s.name;
    }
}

TEST_F(Malformed, Ipv4FragmentsAreRejected) {
    for (const Sample& s : all_) {
        const Layout l = layout_of(s.frame);
        if (l.ipv6) continue;
        for (std::uint16_t ff :
             {0x2000, 0x0001, 0x1fff, 0x6000, 0x4001}) { // MF, offsets, DF|MF, DF|offset
            Bytes g = s.frame;
            wr16(g, l.l3 + 6, ff);
            refresh_icrc(g);
            EXPECT_EQ(parse_exact(g), RejectReason::ip_fragment)
                << s.name << " flags/offset " << std::hex << ff;
        }
        for (std::uint16_t ff : {0x0000, 0x4000}) { // not a fragment, with or without DF
            Bytes g = s.frame;
            wr16(g, l.l3 + 6, ff);
            refresh_icrc(g);
            EXPECT_EQ(parse_exact(g), RejectReason::ok)
                << s.name << " flags/offset " << std::hex << ff;
        }
    }
}

TEST_F(Malformed, NonUdpProtocolsAreNotUdp) {
    for (const Sample& s : all_) {
        const Layout l = layout_of(s.frame);
        for (std::uint8_t proto :
             {6, 1, 58, 0, 136, 255}) { // TCP, ICMP, ICMPv6, hop-by-hop, UDP-Lite
            Bytes g = s.frame;
            g[l.l3 + (l.ipv6 ? 6 : 9)] = proto;
            EXPECT_EQ(parse_exact(g), RejectReason::not_udp)
                << s.name << " protocol " << int{proto};
        }
    }
}

TEST_F(Malformed, UdpToAnotherPortIsNotRoce) {
    for (const Sample& s : all_) {
        const Layout l = layout_of(s.frame);
        for (std::uint16_t port : {4790, 4792, 0, 0xffff, 0xb712}) { // 0xb712: 4791 byte-swapped
            Bytes g = s.frame;
            wr16(g, l.l4 + 2, port);
            EXPECT_EQ(parse_exact(g), RejectReason::not_roce_port) << s.name << " port " << port;
        }
    }
}

TEST_F(Malformed, WrongUdpLengthIsBadUdpLength) {
    for (const Sample& s : all_) {
        const Layout l = layout_of(s.frame);
        const std::size_t udp_len = l.l3_end - l.l4;
        for (std::size_t v : {udp_len - 1, udp_len + 1, udp_len - 4, udp_len + 4, std::size_t{0},
                              std::size_t{8}, std::size_t{0xffff}}) {
            Bytes g = s.frame;
            wr16(g, l.l4 + 4, v);
            refresh_icrc(g);
            EXPECT_EQ(parse_exact(g), RejectReason::bad_udp_length)
                << s.name << " UDP length " << v;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// BTH and what follows

TEST_F(Malformed, BthVersionOtherThanZeroIsRejected) {
    for (const Sample& s : all_) {
        const Layout l = layout_of(s.frame);
        for (unsigned tver = 1; tver < 16; ++tver) {
            Bytes g = s.frame;
            g[l.bth + 1] = static_cast<std::uint8_t>((g[l.bth + 1] & 0xf0) | tver);
            refresh_icrc(g);
            ASSERT_EQ(parse_exact(g), RejectReason::bad_bth_version) << s.name << " TVer " << tver;
        }
    }
}

TEST_F(Malformed, EveryUnknownOpcodeIsRejected) {
    // Independent of the table: the opcodes of IBTA table 39 that droce implements, and the CNP.
    std::set<unsigned> known;
    for (unsigned v = 0x00; v <= 0x14; ++v)
        known.insert(v);
    known.insert({0x16, 0x17});
    for (unsigned v = 0x20; v <= 0x2b; ++v)
        known.insert(v);
    known.insert({0x64, 0x65, 0x81});
    // droce's MRC opcodes (wire/mrc.h) in the manufacturer-specific range.
    for (unsigned v = 0xc0; v <= 0xc6; ++v)
        known.insert(v);
    ASSERT_EQ(known.size(), 45u);
    std::size_t unknown = 0;
    for (const Sample& s : all_) {
        const Layout l = layout_of(s.frame);
        for (unsigned v = 0; v < 256; ++v) {
            if (known.count(v)) continue;
            Bytes g = s.frame;
            g[l.bth] = static_cast<std::uint8_t>(v);
            refresh_icrc(g);
            ASSERT_EQ(parse_exact(g), RejectReason::unknown_opcode)
                << s.name << " opcode 0x" << std::hex << v;
            ++unknown;
        }
    }
    EXPECT_EQ(unknown, 211u * all_.size());
}

TEST_F(Malformed, PacketTooShortForTheOpcodesExtensionHeadersIsLengthMismatch) {
    // Relabel an ACK (BTH + AETH) as opcodes that need more extension header bytes.
    const Bytes ack =
        build(make_path(false, false), make_fields(Opcode::RC_ACKNOWLEDGE, false), {});
    for (Opcode op : {Opcode::RC_RDMA_WRITE_FIRST, Opcode::RC_RDMA_READ_REQUEST,
                      Opcode::RC_COMPARE_SWAP, Opcode::RC_ATOMIC_ACKNOWLEDGE, Opcode::UD_SEND_ONLY,
                      Opcode::CNP, Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE, Opcode::MRC_WRITE,
                      Opcode::MRC_WRITE_LAST_WITH_IMMEDIATE, Opcode::MRC_SACK, Opcode::MRC_NACK,
                      Opcode::MRC_PROBE, Opcode::MRC_PROBE_REPLY, Opcode::MRC_PORT_STATUS}) {
        Bytes g = ack;
        g[layout_of(g).bth] = static_cast<std::uint8_t>(op);
        refresh_icrc(g);
        EXPECT_EQ(parse_exact(g), RejectReason::length_mismatch) << to_string(op);
    }
}

TEST_F(Malformed, MrcPacketCutInsideItsExtensionHeadersIsLengthMismatch) {
    // Every MRC opcode, its IP packet ending (ICRC made right) at each byte inside its extension
    // headers: RETH + MDETH [+ ImmDt] for data, the one control header otherwise.
    std::size_t cuts = 0;
    for (Opcode op : kAllOpcodes) {
        if (transport_of(op) != Transport::mrc) continue;
        for (bool ipv6 : {false, true}) {
            const MrcCtlFields ctl = make_mrc_ctl(true);
            PacketFields fields = make_fields(op, true);
            fields.mrc_ctl = &ctl;
            const bool payload = opcode_info(op).is(OpFlags::payload);
            const Bytes f = build(make_path(ipv6, false), fields, make_payload(payload ? 16 : 0));
            ASSERT_EQ(parse_exact(f), RejectReason::ok) << to_string(op);
            const Layout l = layout_of(f);
            const std::size_t ext = opcode_info(op).ext_length;
            for (std::size_t k = 0; k < ext; ++k) {
                Bytes g(f.begin(), f.begin() + static_cast<std::ptrdiff_t>(l.bth + 12 + k));
                g.insert(g.end(), 4, 0); // room for the ICRC
                set_l3_length(g, g.size() - l.l3);
                refresh_icrc(g);
                const Parsed p = parse_copy(g);
                ASSERT_EQ(p.reason, RejectReason::length_mismatch)
                    << to_string(op) << (ipv6 ? " IPv6" : " IPv4") << " cut " << k
                    << " bytes into its " << ext << " bytes of extension headers";
                EXPECT_EQ(p.frame.mrc_ext, nullptr) << "no pointer to a header that is not there";
                EXPECT_EQ(p.frame.mdeth(), nullptr);
                EXPECT_EQ(p.frame.seth(), nullptr);
                ++cuts;
            }
        }
    }
    EXPECT_EQ(cuts, 2u * (32 + 36 + 48 + 12 + 16 + 16 + 8));
}

TEST_F(Malformed, MrcControlOpcodeWithPayloadIsLengthMismatch) {
    // A control header followed by payload bytes, lengths and ICRC right: refused.
    for (Opcode op : {Opcode::MRC_SACK, Opcode::MRC_NACK, Opcode::MRC_PROBE,
                      Opcode::MRC_PROBE_REPLY, Opcode::MRC_PORT_STATUS}) {
        for (bool ipv6 : {false, true}) {
            const MrcCtlFields ctl = make_mrc_ctl(false, 7);
            PacketFields fields = make_fields(op, false);
            fields.mrc_ctl = &ctl;
            const Bytes f = build(make_path(ipv6, true), fields, {});
            ASSERT_EQ(parse_exact(f), RejectReason::ok);
            for (std::size_t extra : {4u, 64u, 2u}) {
                EXPECT_EQ(parse_exact(with_inserted_bytes(f, extra)), RejectReason::length_mismatch)
                    << to_string(op) << " with " << extra << " payload bytes";
            }
            // build_frame will not make one either.
            const Bytes payload = make_payload(4);
            Bytes out(512);
            EXPECT_EQ(build_frame(make_path(ipv6, true), fields, payload, out), 0u);
        }
    }
    // An MRC_WRITE with 20 payload bytes relabelled MRC_SACK: 48 bytes of SETH, then 4 left over.
    Bytes w =
        build(make_path(false, false), make_fields(Opcode::MRC_WRITE, true), make_payload(20));
    w[layout_of(w).bth] = static_cast<std::uint8_t>(Opcode::MRC_SACK);
    refresh_icrc(w);
    EXPECT_EQ(parse_exact(w), RejectReason::length_mismatch);
}

TEST_F(Malformed, PayloadOnAnOpcodeWithoutPayloadIsLengthMismatch) {
    for (Opcode op : kAllOpcodes) {
        if (opcode_info(op).is(OpFlags::payload)) continue;
        for (bool ipv6 : {false, true}) {
            const Bytes f = build(make_path(ipv6, false), make_fields(op, false), {});
            ASSERT_EQ(parse_exact(f), RejectReason::ok);
            for (std::size_t extra : {4u, 8u, 1u, 3u}) {
                EXPECT_EQ(parse_exact(with_inserted_bytes(f, extra)), RejectReason::length_mismatch)
                    << to_string(op) << " with " << extra << " payload bytes";
            }
        }
    }
}

TEST_F(Malformed, PadCountLargerThanThePayloadIsPadMismatch) {
    for (Opcode op : {Opcode::RC_SEND_ONLY, Opcode::RC_RDMA_WRITE_ONLY, Opcode::RC_ACKNOWLEDGE,
                      Opcode::CNP, Opcode::RC_FETCH_ADD}) {
        // No payload at all, pad count 1..3.
        const Bytes f = build(make_path(true, true), make_fields(op, true), {});
        for (unsigned pad = 1; pad <= 3; ++pad) {
            Bytes g = f;
            const Layout l = layout_of(g);
            g[l.bth + 1] = static_cast<std::uint8_t>((g[l.bth + 1] & ~0x30u) | pad << 4);
            refresh_icrc(g);
            EXPECT_EQ(parse_exact(g), RejectReason::pad_mismatch)
                << to_string(op) << " pad " << pad;
        }
    }
}

TEST_F(Malformed, PayloadPlusPadNotAMultipleOfFourIsPadMismatch) {
    for (std::size_t len : {4u, 8u, 100u}) {
        const Bytes f = build(make_path(false, true), make_fields(Opcode::RC_SEND_MIDDLE, false),
                              make_payload(len));
        for (std::size_t extra : {1u, 2u, 3u, 5u}) {
            EXPECT_EQ(parse_exact(with_inserted_bytes(f, extra)), RejectReason::pad_mismatch)
                << len << " + " << extra << " bytes";
        }
        // The helper itself makes valid frames when the length stays a multiple of four.
        EXPECT_EQ(parse_exact(with_inserted_bytes(f, 4)), RejectReason::ok);
    }
}

TEST_F(Malformed, AnyWrongIcrcIsBadIcrcAndNothingElse) {
    for (const Sample& s : all_) {
        const Layout l = layout_of(s.frame);
        for (std::size_t i = 0; i < 4; ++i) {
            for (std::uint8_t flip : {0x01, 0x80, 0xff}) {
                Bytes g = s.frame;
                g[l.icrc + i] ^= flip;
                const Parsed p = parse_copy(g);
                ASSERT_EQ(p.reason, RejectReason::bad_icrc) << s.name;
                // The headers stay visible so that a trace can show the frame.
                EXPECT_NE(p.frame.bth, nullptr);
                EXPECT_TRUE(p.frame.icrc_checked);
                EXPECT_NE(p.frame.icrc_wire, p.frame.icrc_computed);
            }
        }
    }
}

TEST_F(Malformed, Ipv4OptionsAreCoveredByTheIcrc) {
    // A valid frame with a 4-byte IPv4 option (IHL 6): accepted; changing the option is caught.
    const Bytes f =
        build(make_path(false, false), make_fields(Opcode::RC_SEND_ONLY, true), make_payload(12));
    const Layout l = layout_of(f);
    Bytes g(f.begin(), f.begin() + static_cast<std::ptrdiff_t>(l.l4));
    const std::uint8_t nop_option[4] = {0x01, 0x01, 0x01, 0x00}; // NOP NOP NOP EOL
    g.insert(g.end(), std::begin(nop_option), std::end(nop_option));
    g.insert(g.end(), f.begin() + static_cast<std::ptrdiff_t>(l.l4), f.end());
    g[l.l3] = 0x46;
    set_l3_length(g, l.l3_end - l.l3 + 4);
    refresh_icrc(g);
    ASSERT_EQ(parse_exact(g), RejectReason::ok);
    g[l.l3 + 21] = 0x00;
    EXPECT_EQ(parse_exact(g), RejectReason::bad_icrc);
}

TEST_F(Malformed, RejectsAreCountedByReason) {
    ParseCounters c;
    for (const Sample& s : all_) {
        Bytes bad_icrc = s.frame;
        bad_icrc[layout_of(bad_icrc).icrc] ^= 1;
        for (const Bytes& g : {s.frame, bad_icrc, Bytes(s.frame.begin(), s.frame.begin() + 10)}) {
            ExactBuffer buf(g);
            ParsedFrame p;
            c.count(parse_frame(buf.span(), p));
        }
    }
    EXPECT_EQ(c[RejectReason::ok], all_.size());
    EXPECT_EQ(c[RejectReason::bad_icrc], all_.size());
    EXPECT_EQ(c[RejectReason::too_short], all_.size());
}

} // namespace
} // namespace droce::wire::test
