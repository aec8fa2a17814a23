/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * build_frame() then parse_frame() for every opcode droce knows, at several payload sizes, over
 * IPv4 and IPv6, with and without an 802.1Q tag: every field comes back, the payload is intact, the
 * pad is right, and the ICRC and the IP/UDP checksums verify with independent routines.
 */
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "wire_test_util.h"

namespace droce::wire::test {
namespace {

struct RoundTripCase {
    Opcode opcode;
    std::size_t payload_len;
    bool ipv6;
    bool vlan;
};

void PrintTo(const RoundTripCase& c, std::ostream* os) {
    *os << to_string(c.opcode) << (c.ipv6 ? " IPv6" : " IPv4") << (c.vlan ? " 802.1Q " : " ")
        << c.payload_len << " B";
}

std::string case_name(const ::testing::TestParamInfo<RoundTripCase>& info) {
    const RoundTripCase& c = info.param;
    return std::string(to_string(c.opcode)) + (c.ipv6 ? "_ipv6" : "_ipv4") +
           (c.vlan ? "_vlan" : "") + "_" + std::to_string(c.payload_len) + "B";
}

std::vector<RoundTripCase> all_cases() {
    const std::size_t kSizes[] = {0, 1, 3, 4, 255, 256, 1024, 4096};
    std::vector<RoundTripCase> v;
    for (Opcode op : kAllOpcodes)
        for (bool ipv6 : {false, true})
            for (bool vlan : {false, true})
                for (std::size_t len : kSizes) {
                    if (len != 0 && !opcode_info(op).is(OpFlags::payload)) continue;
                    v.push_back({op, len, ipv6, vlan});
                }
    return v;
}

TEST(RoundTripCases, CoverEveryOpcodeAndSize) {
    // 38 opcodes: 32 carry payload (8 sizes), 6 do not (size 0 only); 4 path variants each.
    EXPECT_EQ(std::size(kAllOpcodes), 38u);
    EXPECT_EQ(all_cases().size(), (32u * 8u + 6u) * 4u);
}

class RoundTrip : public ::testing::TestWithParam<RoundTripCase> {
  protected:
    void check(const PacketFields& want) const;
};

void RoundTrip::check(const PacketFields& want) const {
    const RoundTripCase& c = GetParam();
    const PathHeaders path = make_path(c.ipv6, c.vlan);
    const Bytes payload = make_payload(c.payload_len, static_cast<std::uint8_t>(c.opcode));
    const OpcodeInfo& info = opcode_info(c.opcode);

    Bytes f = build(path, want, payload);
    ASSERT_FALSE(f.empty()) << "build_frame refused";
    ASSERT_EQ(f.size(), frame_length(path, c.opcode, c.payload_len));
    const std::size_t l2 = 14 + (c.vlan ? 4 : 0);
    const std::size_t l3_hdr = c.ipv6 ? 40 : 20;
    const std::size_t pad = (-c.payload_len) & 3u;
    ASSERT_EQ(f.size(), l2 + l3_hdr + 8 + 12 + info.ext_length + c.payload_len + pad + 4);

    const Parsed parsed = parse_copy(f);
    ASSERT_EQ(parsed.reason, RejectReason::ok);
    const ParsedFrame& p = parsed.frame;

    // Ethernet and 802.1Q
    EXPECT_EQ(p.eth->dst, path.dst_mac);
    EXPECT_EQ(p.eth->src, path.src_mac);
    EXPECT_EQ(p.ether_type, c.ipv6 ? kEtherTypeIpv6 : kEtherTypeIpv4);
    EXPECT_EQ(p.l3_offset, l2);
    if (c.vlan) {
        ASSERT_NE(p.vlan, nullptr);
        EXPECT_EQ(p.eth->ether_type.get(), kEtherTypeVlan);
        EXPECT_EQ(p.vlan->tci.get(), path.vlan_tci);
        EXPECT_EQ(p.vlan->pcp(), 5u);
        EXPECT_EQ(p.vlan->vid(), 13u);
    } else {
        EXPECT_EQ(p.vlan, nullptr);
    }

    // IP, with its checksums checked by the independent routines
    if (c.ipv6) {
        ASSERT_NE(p.ipv6, nullptr);
        EXPECT_EQ(p.ipv4, nullptr);
        EXPECT_EQ(p.ipv6->version(), 6u);
        EXPECT_EQ(p.ipv6->traffic_class(), path.tos);
        EXPECT_EQ(p.ipv6->flow_label(), path.flow_label);
        EXPECT_EQ(p.ipv6->hop_limit, path.ttl);
        EXPECT_EQ(p.ipv6->next_header, kIpProtoUdp);
        EXPECT_EQ(p.ipv6->payload_length.get(), f.size() - l2 - 40);
        EXPECT_EQ(p.ipv6->src, path.src_ip);
        EXPECT_EQ(p.ipv6->dst, path.dst_ip);
        EXPECT_TRUE(ipv6_udp_checksum_valid(f, l2)) << "IPv6 UDP checksum";
    } else {
        ASSERT_NE(p.ipv4, nullptr);
        EXPECT_EQ(p.ipv6, nullptr);
        EXPECT_EQ(p.ipv4->version(), 4u);
        EXPECT_EQ(p.ipv4->header_length(), 20u);
        EXPECT_EQ(p.ipv4->tos, path.tos);
        EXPECT_EQ(p.ipv4->ttl, path.ttl);
        EXPECT_EQ(p.ipv4->protocol, kIpProtoUdp);
        EXPECT_EQ(p.ipv4->flags_frag.get(), kIpv4DontFragment);
        EXPECT_EQ(p.ipv4->total_length.get(), f.size() - l2);
        EXPECT_EQ(0, std::memcmp(p.ipv4->src.data(), path.src_ip.data() + 12, 4));
        EXPECT_EQ(0, std::memcmp(p.ipv4->dst.data(), path.dst_ip.data() + 12, 4));
        EXPECT_TRUE(ipv4_checksum_valid(f, l2)) << "IPv4 header checksum";
        EXPECT_EQ(p.udp->checksum.get(), 0u) << "UDP checksum is 0 on IPv4 (A17.3.2)";
    }

    // UDP
    EXPECT_EQ(p.udp->src_port.get(), path.udp_sport);
    EXPECT_EQ(p.udp->dst_port.get(), kRoceV2Port);
    EXPECT_EQ(p.udp->length.get(), f.size() - l2 - l3_hdr);

    // BTH
    EXPECT_EQ(p.info, &opcode_info(c.opcode));
    EXPECT_EQ(p.bth->opcode(), want.opcode);
    EXPECT_EQ(p.bth->se(), want.solicited);
    EXPECT_EQ(p.bth->mig_req(), want.mig_req);
    EXPECT_EQ(p.bth->pad_count(), pad);
    EXPECT_EQ(p.pad, pad);
    EXPECT_EQ(p.bth->tver(), 0u);
    EXPECT_EQ(p.bth->pkey.get(), want.pkey);
    EXPECT_EQ(p.bth->fecn(), want.fecn);
    EXPECT_EQ(p.bth->becn(), want.becn);
    EXPECT_EQ(p.bth->fecn_becn & 0x3fu, 0u) << "BTH resv6";
    EXPECT_EQ(p.bth->dest_qp(), want.dest_qp);
    EXPECT_EQ(p.bth->ack_req(), want.ack_req);
    EXPECT_EQ(p.bth->ackreq_byte & 0x7fu, 0u) << "BTH resv7";
    EXPECT_EQ(p.bth->psn(), want.psn);

    // Extension headers: present exactly when the opcode has them, in IBTA order, with the values.
    std::size_t ext_off = l2 + l3_hdr + 8 + 12;
    auto pos = [&](const void* hdr) { return parsed.offset_of(hdr); };
    EXPECT_EQ(p.deth != nullptr, info.is(OpFlags::deth));
    if (p.deth) {
        EXPECT_EQ(pos(p.deth), ext_off);
        ext_off += 8;
        EXPECT_EQ(p.deth->qkey.get(), want.qkey);
        EXPECT_EQ(p.deth->src_qp(), want.src_qp);
        EXPECT_EQ(p.deth->reserved, 0u);
    }
    EXPECT_EQ(p.reth != nullptr, info.is(OpFlags::reth));
    if (p.reth) {
        EXPECT_EQ(pos(p.reth), ext_off);
        ext_off += 16;
        EXPECT_EQ(p.reth->va.get(), want.va);
        EXPECT_EQ(p.reth->rkey.get(), want.rkey);
        EXPECT_EQ(p.reth->dma_len.get(), want.dma_len);
    }
    EXPECT_EQ(p.atomic_eth != nullptr, info.is(OpFlags::atomic_eth));
    if (p.atomic_eth) {
        EXPECT_EQ(pos(p.atomic_eth), ext_off);
        ext_off += 28;
        EXPECT_EQ(p.atomic_eth->va.get(), want.va);
        EXPECT_EQ(p.atomic_eth->rkey.get(), want.rkey);
        EXPECT_EQ(p.atomic_eth->swap_add.get(), want.swap_add);
        EXPECT_EQ(p.atomic_eth->compare.get(), want.compare);
    }
    EXPECT_EQ(p.aeth != nullptr, info.is(OpFlags::aeth));
    if (p.aeth) {
        EXPECT_EQ(pos(p.aeth), ext_off);
        ext_off += 4;
        EXPECT_EQ(p.aeth->syndrome, want.syndrome);
        EXPECT_EQ(p.aeth->msn(), want.msn);
    }
    EXPECT_EQ(p.atomic_ack_eth != nullptr, info.is(OpFlags::atomic_ack_eth));
    if (p.atomic_ack_eth) {
        EXPECT_EQ(pos(p.atomic_ack_eth), ext_off);
        ext_off += 8;
        EXPECT_EQ(p.atomic_ack_eth->orig_rem_data.get(), want.orig_rem_data);
    }
    EXPECT_EQ(p.immdt != nullptr, info.is(OpFlags::immdt));
    if (p.immdt) {
        EXPECT_EQ(pos(p.immdt), ext_off);
        ext_off += 4;
        EXPECT_EQ(p.immdt->imm.get(), want.imm);
    }
    EXPECT_EQ(p.ieth != nullptr, info.is(OpFlags::ieth));
    if (p.ieth) {
        EXPECT_EQ(pos(p.ieth), ext_off);
        ext_off += 4;
        EXPECT_EQ(p.ieth->rkey.get(), want.inv_rkey);
    }
    EXPECT_EQ(p.cnp != nullptr, info.is(OpFlags::cnp));
    if (p.cnp) {
        EXPECT_EQ(pos(p.cnp), ext_off);
        ext_off += 16;
        for (std::uint8_t b : p.cnp->reserved)
            EXPECT_EQ(b, 0u);
    }
    EXPECT_EQ(ext_off, l2 + l3_hdr + 8 + 12 + info.ext_length);

    // Payload, pad and ICRC
    ASSERT_EQ(p.payload.size(), c.payload_len);
    EXPECT_EQ(pos(p.payload.data()), ext_off);
    EXPECT_TRUE(std::equal(p.payload.begin(), p.payload.end(), payload.begin()))
        << "payload bytes differ";
    for (std::size_t i = 0; i < pad; ++i)
        EXPECT_EQ(f[ext_off + c.payload_len + i], 0u) << "pad byte " << i;
    EXPECT_TRUE(p.icrc_checked);
    EXPECT_EQ(p.icrc_wire, p.icrc_computed);
    EXPECT_EQ(p.icrc_wire, reference_icrc(f)) << "droce's ICRC differs from the zlib reference";
}

TEST_P(RoundTrip, EveryFieldComesBackWithFlagsSet) {
    check(make_fields(GetParam().opcode, true, 0));
}

TEST_P(RoundTrip, EveryFieldComesBackWithFlagsClear) {
    check(make_fields(GetParam().opcode, false, 0x5a5a5a));
}

INSTANTIATE_TEST_SUITE_P(AllOpcodes, RoundTrip, ::testing::ValuesIn(all_cases()), case_name);

TEST(RoundTripScatter, PayloadGatheredFromSeveralSpansEqualsOneContiguousPayload) {
    const Bytes whole = make_payload(1000, 3);
    const std::span<const std::uint8_t> w(whole);
    const std::span<const std::uint8_t> parts[] = {w.first(1), w.subspan(1, 0), w.subspan(1, 510),
                                                   w.subspan(511)};
    const PathHeaders path = make_path(true, true);
    const PacketFields fields = make_fields(Opcode::RC_RDMA_WRITE_FIRST, true);
    Bytes gathered(frame_length(path, fields.opcode, whole.size()));
    ASSERT_EQ(
        build_frame(path, fields, std::span<const std::span<const std::uint8_t>>(parts), gathered),
        gathered.size());
    EXPECT_EQ(gathered, build(path, fields, whole));
    const Parsed p = parse_copy(gathered);
    ASSERT_EQ(p.reason, RejectReason::ok);
    EXPECT_TRUE(
        std::equal(p.frame.payload.begin(), p.frame.payload.end(), whole.begin(), whole.end()));
}

TEST(RoundTripSplit, HeadersSpansAndTrailerJoinToTheFrameBuildFrameMakes) {
    // Odd span lengths and a payload that needs pad: the ICRC and the IPv6 UDP checksum continue
    // across the spans exactly as over one buffer.
    for (const std::size_t len : {1u, 3u, 64u, 999u, 4096u}) {
        const Bytes whole = make_payload(len, 9);
        const std::span<const std::uint8_t> w(whole);
        const std::size_t a = len / 3, b = len / 2;
        const std::span<const std::uint8_t> parts[] = {w.first(a), w.subspan(a, b - a),
                                                       w.subspan(b)};
        const auto spans = std::span<const std::span<const std::uint8_t>>(parts);
        for (const bool ipv6 : {false, true}) {
            for (const bool vlan : {false, true}) {
                const PathHeaders path = make_path(ipv6, vlan);
                const PacketFields fields = make_fields(Opcode::RC_SEND_LAST_WITH_IMMEDIATE, true);
                Bytes hdr(128);
                SplitFrame sf;
                ASSERT_TRUE(build_frame_split(path, fields, spans, hdr, sf));
                EXPECT_EQ(sf.payload_len, len);
                Bytes joined(hdr.begin(), hdr.begin() + static_cast<std::ptrdiff_t>(sf.header_len));
                joined.insert(joined.end(), whole.begin(), whole.end());
                const auto t = sf.trailer_bytes();
                joined.insert(joined.end(), t.begin(), t.end());
                EXPECT_EQ(joined, build(path, fields, whole))
                    << "len " << len << " ipv6 " << ipv6 << " vlan " << vlan;
                EXPECT_EQ(parse_copy(joined).reason, RejectReason::ok);
            }
        }
    }
    // Only the headers need to fit; refused where build_frame refuses (payload on an ACK).
    Bytes small(60);
    SplitFrame sf;
    const Bytes one = make_payload(1, 1);
    const std::span<const std::uint8_t> one_span(one);
    EXPECT_FALSE(
        build_frame_split(make_path(false, false), make_fields(Opcode::RC_ACKNOWLEDGE, true),
                          std::span<const std::span<const std::uint8_t>>(&one_span, 1), small, sf));
}

TEST(RoundTripLimits, BuildRefusesAnOutputBufferOneByteTooSmall) {
    const PathHeaders path = make_path(false, false);
    const PacketFields fields = make_fields(Opcode::RC_SEND_ONLY, false);
    const Bytes payload = make_payload(61);
    const std::size_t need = frame_length(path, fields.opcode, payload.size());
    Bytes out(need - 1, 0xee);
    EXPECT_EQ(build_frame(path, fields, payload, out), 0u);
    EXPECT_EQ(out, Bytes(need - 1, 0xee)) << "a refused build must not write";
}

TEST(RoundTripLimits, BuildRefusesAnIpPacketOver65535Bytes) {
    for (bool ipv6 : {false, true}) {
        const PathHeaders path = make_path(ipv6, false);
        const PacketFields fields = make_fields(Opcode::RC_SEND_ONLY, false);
        // IP length = IP header + 8 UDP + 12 BTH + payload + pad + 4 ICRC, a multiple of 4, so the
        // largest that fits is 65532.
        const std::size_t fit = 65532 - (ipv6 ? 40 : 20) - 8 - 12 - 4;
        Bytes out(70000);
        Bytes payload = make_payload(fit);
        std::size_t n = build_frame(path, fields, payload, out);
        ASSERT_EQ(n, 14 + 65532u);
        EXPECT_EQ(parse_exact(std::span<const std::uint8_t>(out).first(n)), RejectReason::ok);
        payload.push_back(0);
        EXPECT_EQ(build_frame(path, fields, payload, out), 0u) << (ipv6 ? "IPv6" : "IPv4");
    }
}

TEST(RoundTripLimits, BuildRefusesAnUnknownOpcode) {
    PacketFields fields = make_fields(Opcode::RC_SEND_ONLY, false);
    fields.opcode = static_cast<Opcode>(0x15);
    Bytes out(256);
    EXPECT_EQ(build_frame(make_path(false, false), fields, std::span<const std::uint8_t>(), out),
              0u);
}

TEST(RoundTripLimits, BuildRefusesPayloadOnAnOpcodeWithoutPayload) {
    // Otherwise it would emit a frame that its own parser rejects (length_mismatch).
    const Bytes payload = make_payload(4);
    Bytes out(512);
    for (Opcode op : kAllOpcodes) {
        if (opcode_info(op).is(OpFlags::payload)) continue;
        EXPECT_EQ(build_frame(make_path(false, false), make_fields(op, false), payload, out), 0u)
            << to_string(op);
    }
}

TEST(RoundTripFields, OutOfRangeValuesAreMaskedToTheirFieldWidth) {
    PacketFields f = make_fields(Opcode::UD_SEND_ONLY_WITH_IMMEDIATE, true);
    f.dest_qp = 0xff123456;
    f.src_qp = 0xee654321;
    f.psn = Psn(0x1abcdef0);
    PathHeaders path = make_path(true, false);
    path.flow_label = 0xfff12345;
    Bytes frame = build(path, f, make_payload(8));
    const Parsed parsed = parse_copy(frame);
    ASSERT_EQ(parsed.reason, RejectReason::ok);
    const ParsedFrame& p = parsed.frame;
    EXPECT_EQ(p.bth->dest_qp(), 0x123456u);
    EXPECT_EQ(p.deth->src_qp(), 0x654321u);
    EXPECT_EQ(p.deth->reserved, 0u);
    EXPECT_EQ(p.bth->psn().value(), 0xbcdef0u);
    EXPECT_EQ(p.ipv6->flow_label(), 0x12345u);
    EXPECT_EQ(p.ipv6->version(), 6u);
    EXPECT_EQ(p.ipv6->traffic_class(), path.tos);
}

} // namespace
} // namespace droce::wire::test
