/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * lib/wire against frames nobody on the team made: every RoCEv2 frame of the real captures
 * (tests/data/captures, see its README) parses and its ICRC verifies; a change to any byte the ICRC
 * covers is caught; a change to a field the ICRC masks is not.
 */
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "wire_test_util.h"

namespace droce::wire::test {
namespace {

struct CaptureExpectation {
    const char* file;
    int linktype;
    std::size_t frames;
    std::map<RejectReason, std::size_t> by_reason; ///< every outcome seen, with its count
};

// Counts from the captures README and from tshark; the other frames are ARP (not_ip), RoCE v1
// (EtherType 0x8915: not_ip), and TCP and ICMPv6 (not_udp).
const CaptureExpectation kCaptures[] = {
    {"montybeatnik_rdma-roce-lab_test.pcap",
     DLT_EN10MB,
     16,
     {{RejectReason::ok, 12}, {RejectReason::not_ip, 4}}},
    {"montybeatnik_rdma-roce-lab_roce_capture_read-write-ecn.pcap",
     DLT_EN10MB,
     12,
     {{RejectReason::ok, 12}}},
    {"oferby_proxy_roce.pcap",
     DLT_EN10MB,
     123,
     {{RejectReason::ok, 105}, {RejectReason::not_udp, 14}, {RejectReason::not_ip, 4}}},
    {"scapy_roce_uts_icrc_vectors.pcap",
     DLT_EN10MB,
     5,
     {{RejectReason::ok, 3}, {RejectReason::not_ip, 2}}},
};

void PrintTo(const CaptureExpectation& c, std::ostream* os) {
    *os << c.file;
}

std::string capture_path(const char* file) {
    return captures_dir() + "/" + file;
}

PcapFile load(const char* file) {
    PcapFile pf = read_pcap(capture_path(file));
    EXPECT_EQ(pf.error, "") << capture_path(file) << " (DROCE_CAPTURES_DIR=" << captures_dir()
                            << ")";
    EXPECT_EQ(pf.truncated, 0u) << file;
    return pf;
}

class CaptureFile : public ::testing::TestWithParam<CaptureExpectation> {};

TEST_P(CaptureFile, EveryRoceV2FrameParsesAndItsIcrcVerifies) {
    const CaptureExpectation& want = GetParam();
    PcapFile pf = load(want.file);
    ASSERT_EQ(pf.linktype, want.linktype);
    ASSERT_EQ(pf.frames.size(), want.frames);

    std::map<RejectReason, std::size_t> got;
    for (std::size_t i = 0; i < pf.frames.size(); ++i) {
        const Bytes& f = pf.frames[i];
        const Parsed parsed = parse_copy(f);
        const RejectReason r = parsed.reason;
        const ParsedFrame& p = parsed.frame;
        ++got[r];
        SCOPED_TRACE("frame " + std::to_string(i + 1));
        // Untagged IPv4 or IPv6 carrying UDP to port 4791, judged from the raw bytes.
        const bool udp_4791 = [&] {
            if (f.size() < 14 + 40 + 8 || (rd16(f, 12) != 0x0800 && rd16(f, 12) != 0x86dd))
                return false;
            const Layout l = layout_of(f);
            return f[l.l3 + (l.ipv6 ? 6 : 9)] == 17 && rd16(f, l.l4 + 2) == 4791;
        }();
        // A frame is accepted exactly when it is UDP to port 4791, and then its ICRC agrees both
        // with what droce computes and with the zlib reference.
        EXPECT_EQ(r == RejectReason::ok, udp_4791) << to_string(r);
        if (r != RejectReason::ok) continue;
        EXPECT_TRUE(p.icrc_checked);
        EXPECT_EQ(p.icrc_computed, p.icrc_wire);
        EXPECT_EQ(p.icrc_wire, reference_icrc(f));
        EXPECT_EQ(p.icrc_wire, wire_icrc(f));
    }
    EXPECT_EQ(got, want.by_reason);
}

INSTANTIATE_TEST_SUITE_P(SharedCaptures, CaptureFile, ::testing::ValuesIn(kCaptures),
                         [](const auto& param_info) {
                             std::string n = param_info.param.file;
                             n = n.substr(0, n.find('.'));
                             for (char& c : n)
                                 if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                             return n;
                         });

TEST(SharedCaptures, ErfFileIsNotEthernetAndYieldsNoRoceV2Frame) {
    // Native InfiniBand on an Endace DAG: the records start with an ERF header, not a MAC address.
    // droce reads Ethernet only, so the file is skipped by link type; none of its records may pass.
    PcapFile pf = load("srinivaskoritala_rdma-softroce-demo_infiniband_erf.pcap");
    ASSERT_EQ(pf.linktype, DLT_ERF);
    ASSERT_EQ(pf.frames.size(), 43u);
    for (const Bytes& f : pf.frames)
        EXPECT_NE(parse_exact(f), RejectReason::ok);
}

TEST(SharedCaptures, ScapyVectorsCarryTheKnownIcrcs) {
    // The ICRC bytes quoted in scapy's roce.uts (captures README), in wire order.
    PcapFile pf = load("scapy_roce_uts_icrc_vectors.pcap");
    ASSERT_EQ(pf.frames.size(), 5u);
    const std::uint32_t want[3] = {0x2a00fd82, 0xf353f378, 0x3b745b3e};
    for (int i = 0; i < 3; ++i) {
        const Parsed p = parse_copy(pf.frames[static_cast<std::size_t>(i)]);
        ASSERT_EQ(p.reason, RejectReason::ok) << "frame " << i + 1;
        EXPECT_EQ(p.frame.icrc_computed, want[i]) << "frame " << i + 1;
    }
    // Frame 1 is the ConnectX CNP, frame 3 the IPv6 SEND.
    const Parsed cnp_parsed = parse_copy(pf.frames[0]);
    ASSERT_EQ(cnp_parsed.reason, RejectReason::ok);
    const ParsedFrame& cnp = cnp_parsed.frame;
    EXPECT_EQ(cnp.bth->opcode(), Opcode::CNP);
    EXPECT_TRUE(cnp.bth->becn());
    EXPECT_EQ(cnp.bth->dest_qp(), 0x000118u);
    EXPECT_NE(cnp.cnp, nullptr);
    const Parsed v6_parsed = parse_copy(pf.frames[2]);
    ASSERT_EQ(v6_parsed.reason, RejectReason::ok);
    const ParsedFrame& v6 = v6_parsed.frame;
    ASSERT_NE(v6.ipv6, nullptr);
    EXPECT_EQ(v6.ipv6->traffic_class(), 226u);
    EXPECT_EQ(v6.ipv6->flow_label(), 0x1faceu);
    EXPECT_EQ(v6.bth->opcode(), Opcode::UC_SEND_ONLY);
}

TEST(SharedCaptures, RxeReadResponsesAtPathMtu1024) {
    // montybeatnik test.pcap frames 7-10: READ RESPONSE FIRST/MIDDLE/MIDDLE/LAST of a 4096 B READ.
    PcapFile pf = load("montybeatnik_rdma-roce-lab_test.pcap");
    ASSERT_GE(pf.frames.size(), 10u);
    const Opcode ops[4] = {
        Opcode::RC_RDMA_READ_RESPONSE_FIRST, Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
        Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, Opcode::RC_RDMA_READ_RESPONSE_LAST};
    const Parsed first = parse_copy(pf.frames[6]);
    ASSERT_EQ(first.reason, RejectReason::ok);
    for (int i = 0; i < 4; ++i) {
        const Parsed parsed = parse_copy(pf.frames[static_cast<std::size_t>(6 + i)]);
        ASSERT_EQ(parsed.reason, RejectReason::ok);
        const ParsedFrame& p = parsed.frame;
        EXPECT_EQ(p.bth->opcode(), ops[i]);
        EXPECT_EQ(p.payload.size(), 1024u);
        EXPECT_EQ(p.bth->psn(), first.frame.bth->psn() + static_cast<std::uint32_t>(i));
        EXPECT_EQ(p.aeth != nullptr, i == 0 || i == 3);
    }
}

// ---------------------------------------------------------------------------------------------
// What the ICRC covers.

/** Several accepted frames of different shapes: captured (rxe, hardware, scapy IPv6) and
 * droce-built. */
std::vector<std::pair<std::string, Bytes>> icrc_sample_frames() {
    std::vector<std::pair<std::string, Bytes>> out;
    PcapFile a = read_pcap(capture_path("montybeatnik_rdma-roce-lab_test.pcap"));
    if (a.frames.size() >= 6) {
        out.emplace_back("rxe RDMA_WRITE_ONLY", a.frames[3]);
        out.emplace_back("rxe ACK", a.frames[4]);
        out.emplace_back("rxe READ_REQUEST", a.frames[5]);
        out.emplace_back("rxe UD SEND_ONLY (CM MAD)", a.frames[0]);
    }
    PcapFile b = read_pcap(capture_path("oferby_proxy_roce.pcap"));
    for (const Bytes& f : b.frames) {
        if (parse_exact(f) == RejectReason::ok && f[layout_of(f).bth] == 0x05) {
            out.emplace_back("hardware SEND_ONLY_WITH_IMMEDIATE", f);
            break;
        }
    }
    PcapFile c = read_pcap(capture_path("scapy_roce_uts_icrc_vectors.pcap"));
    if (c.frames.size() >= 3) {
        out.emplace_back("ConnectX CNP", c.frames[0]);
        out.emplace_back("scapy UC SEND_ONLY IPv6", c.frames[2]);
    }
    Bytes pl = make_payload(37);
    out.emplace_back(
        "droce ATOMIC_ACKNOWLEDGE IPv6 VLAN",
        build(make_path(true, true), make_fields(Opcode::RC_ATOMIC_ACKNOWLEDGE, true), {}));
    out.emplace_back(
        "droce COMPARE_SWAP IPv4",
        build(make_path(false, false), make_fields(Opcode::RC_COMPARE_SWAP, false), {}));
    out.emplace_back("droce WRITE_ONLY_WITH_IMM IPv6 37B",
                     build(make_path(true, false),
                           make_fields(Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE, true), pl));
    out.emplace_back("droce SEND_ONLY_WITH_INVALIDATE IPv4 VLAN 37B",
                     build(make_path(false, true),
                           make_fields(Opcode::RC_SEND_ONLY_WITH_INVALIDATE, false), pl));
    return out;
}

TEST(IcrcCoverage, SampleFramesAreAvailable) {
    // Guards the two tests below against passing vacuously on a missing capture.
    EXPECT_EQ(icrc_sample_frames().size(), 11u);
}

/** Offsets (frame-relative) of the variant bits the ICRC masks, with the bits masked. */
std::map<std::size_t, std::uint8_t> masked_bits(const Layout& l) {
    std::map<std::size_t, std::uint8_t> m;
    if (l.ipv6) {
        m[l.l3 + 0] = 0x0f; // traffic class, high nibble
        m[l.l3 + 1] = 0xff; // traffic class low nibble, flow label
        m[l.l3 + 2] = 0xff;
        m[l.l3 + 3] = 0xff;
        m[l.l3 + 7] = 0xff; // hop limit
    } else {
        m[l.l3 + 1] = 0xff;  // TOS
        m[l.l3 + 8] = 0xff;  // TTL
        m[l.l3 + 10] = 0xff; // header checksum
        m[l.l3 + 11] = 0xff;
    }
    m[l.l4 + 6] = 0xff; // UDP checksum
    m[l.l4 + 7] = 0xff;
    m[l.bth + 4] = 0xff; // FECN, BECN, resv6
    return m;
}

/**
 * True for covered bytes where no structural check applies, so a change can only be caught by the
 * ICRC: IPv4 identification and addresses, IPv6 addresses, UDP source port, BTH P_Key, DestQP,
 * AckReq, PSN, everything after the BTH, and the ICRC itself.
 */
bool only_icrc_can_catch(const Layout& l, std::size_t off) {
    if (off >= l.bth + 5) return true; // BTH bytes 5..11, extension headers, payload, pad, ICRC
    if (off >= l.bth) return off == l.bth + 2 || off == l.bth + 3; // P_Key
    if (off >= l.l4) return off == l.l4 || off == l.l4 + 1;        // UDP source port
    const std::size_t ip = off - l.l3;
    return l.ipv6 ? ip >= 8 : (ip == 4 || ip == 5 || (ip >= 12 && ip < 20));
}

TEST(IcrcCoverage, ChangingAnyCoveredByteIsRejected) {
    const std::uint8_t kFlips[] = {0x01, 0x02, 0x10, 0x80, 0xff, 0x5a};
    for (auto& [name, frame] : icrc_sample_frames()) {
        SCOPED_TRACE(name);
        ASSERT_EQ(parse_exact(frame), RejectReason::ok);
        const Layout l = layout_of(frame);
        const auto masked = masked_bits(l);
        std::size_t icrc_only_bytes = 0;
        for (std::size_t off = l.l3; off < l.l3_end; ++off) {
            const auto mit = masked.find(off);
            const std::uint8_t covered_bits =
                mit == masked.end() ? 0xff : static_cast<std::uint8_t>(~mit->second);
            if (covered_bits == 0) continue;
            const bool strict = only_icrc_can_catch(l, off);
            icrc_only_bytes += strict;
            for (std::uint8_t flip : kFlips) {
                if ((flip & covered_bits) == 0) continue;
                Bytes bad = frame;
                bad[off] ^= static_cast<std::uint8_t>(flip & covered_bits);
                const RejectReason r = parse_exact(bad);
                if (strict) {
                    ASSERT_EQ(r, RejectReason::bad_icrc)
                        << "offset " << off << " xor 0x" << std::hex << int{flip};
                } else {
                    ASSERT_NE(r, RejectReason::ok)
                        << "offset " << off << " xor 0x" << std::hex << int{flip};
                }
            }
        }
        // Every sample has addresses, a BTH tail and an ICRC: at least 8 + 7 + 4 strictly covered
        // bytes.
        EXPECT_GE(icrc_only_bytes, 19u);
    }
}

TEST(IcrcCoverage, ChangingAMaskedFieldKeepsTheIcrc) {
    const std::uint8_t kValues[] = {0x00, 0xff, 0x5a, 0xa5, 0x01, 0x80};
    for (auto& [name, frame] : icrc_sample_frames()) {
        SCOPED_TRACE(name);
        const Parsed orig = parse_copy(frame);
        ASSERT_EQ(orig.reason, RejectReason::ok);
        const std::uint32_t icrc = orig.frame.icrc_computed;
        const Layout l = layout_of(frame);
        std::size_t changes = 0;
        for (const auto& [off, bits] : masked_bits(l)) {
            for (std::uint8_t v : kValues) {
                Bytes f = frame;
                f[off] = static_cast<std::uint8_t>((f[off] & ~bits) | (v & bits));
                if (f == frame) continue;
                ++changes;
                const Parsed p = parse_copy(f);
                ASSERT_EQ(p.reason, RejectReason::ok) << "offset " << off << " value " << int{v};
                EXPECT_EQ(p.frame.icrc_computed, icrc) << "offset " << off;
            }
        }
        // All masked fields at once.
        Bytes all = frame;
        for (const auto& [off, bits] : masked_bits(l))
            all[off] ^= bits;
        const Parsed p = parse_copy(all);
        ASSERT_EQ(p.reason, RejectReason::ok);
        EXPECT_EQ(p.frame.icrc_computed, icrc);
        EXPECT_GE(changes, 20u);
    }
}

TEST(IcrcCoverage, MacAddressesAndVlanTagAreOutsideTheIcrc) {
    for (bool vlan : {false, true}) {
        Bytes f =
            build(make_path(false, vlan), make_fields(Opcode::RC_SEND_ONLY, true), make_payload(9));
        const Parsed orig = parse_copy(f);
        ASSERT_EQ(orig.reason, RejectReason::ok);
        for (std::size_t off = 0; off < 12; ++off)
            f[off] ^= 0xff;
        if (vlan) f[14] ^= 0xef; // PCP and VID
        const Parsed p = parse_copy(f);
        ASSERT_EQ(p.reason, RejectReason::ok);
        EXPECT_EQ(p.frame.icrc_computed, orig.frame.icrc_computed);
    }
}

TEST(IcrcCoverage, IcrcIsStoredLeastSignificantByteFirst) {
    // A17.3.3 sends the CRC like Ethernet's FCS: the low byte first. A big-endian store would fail.
    Bytes f =
        build(make_path(false, false), make_fields(Opcode::RC_SEND_ONLY, false), make_payload(4));
    const std::uint32_t c = reference_icrc(f);
    const std::size_t n = f.size();
    EXPECT_EQ(f[n - 4], c & 0xff);
    EXPECT_EQ(f[n - 1], c >> 24);
    std::swap(f[n - 4], f[n - 1]);
    std::swap(f[n - 3], f[n - 2]);
    EXPECT_EQ(parse_exact(f), RejectReason::bad_icrc);
}

TEST(IcrcCoverage, SkippingVerificationAcceptsABadIcrc) {
    Bytes f =
        build(make_path(true, false), make_fields(Opcode::RC_SEND_ONLY, false), make_payload(4));
    f.back() ^= 1;
    EXPECT_EQ(parse_exact(f), RejectReason::bad_icrc);
    const Parsed p = parse_copy(f, ParseOptions{.verify_icrc = false});
    EXPECT_EQ(p.reason, RejectReason::ok);
    EXPECT_FALSE(p.frame.icrc_checked);
}

} // namespace
} // namespace droce::wire::test
