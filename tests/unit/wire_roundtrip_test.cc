/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * build_frame() then parse_frame() for every opcode droce knows (IBTA and MRC), at several payload
 * sizes, over IPv4 and IPv6, with and without an 802.1Q tag: every field comes back, the payload is
 * intact, the pad is right, and the ICRC and the IP/UDP checksums verify with independent routines.
 * The MRC headers are also checked byte by byte against the layout of wire/mrc.h.
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
    // 45 opcodes: 38 of IBTA and the CNP, 32 with payload (8 sizes), 6 without (size 0 only); 7
    // MRC, 2 with payload, 5 without; 4 path variants each.
    EXPECT_EQ(std::size(kAllOpcodes), 45u);
    EXPECT_EQ(all_cases().size(), ((32u + 2u) * 8u + 6u + 5u) * 4u);
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
    // MRC: one header after the RETH (data) or right after the BTH (control), before any ImmDt.
    static constexpr MrcCtlFields kZeroCtl{};
    const MrcCtlFields& ctl = want.mrc_ctl ? *want.mrc_ctl : kZeroCtl;
    const bool mrc = info.is(OpFlags::mdeth) || info.is(OpFlags::seth) || info.is(OpFlags::neth) ||
                     info.is(OpFlags::peth) || info.is(OpFlags::epeth);
    EXPECT_EQ(p.mrc_ext != nullptr, mrc);
    EXPECT_EQ(p.mdeth() != nullptr, info.is(OpFlags::mdeth));
    EXPECT_EQ(p.seth() != nullptr, info.is(OpFlags::seth));
    EXPECT_EQ(p.neth() != nullptr, info.is(OpFlags::neth));
    EXPECT_EQ(p.peth() != nullptr, info.is(OpFlags::peth));
    EXPECT_EQ(p.epeth() != nullptr, info.is(OpFlags::epeth));
    if (p.mrc_ext) {
        EXPECT_EQ(pos(p.mrc_ext), ext_off);
        EXPECT_EQ(p.mrc_ext[0], kMrcVersion) << "every MRC header starts with the version";
    }
    if (const Mdeth* m = p.mdeth()) {
        ext_off += 16;
        EXPECT_EQ(m->version, kMrcVersion);
        EXPECT_EQ(m->flags, want.mrc_flags);
        EXPECT_EQ(m->path.get(), want.mrc_path);
        EXPECT_EQ(m->msn.get(), want.mrc_msn);
        EXPECT_EQ(m->msg_offset.get(), want.mrc_msg_offset);
        EXPECT_EQ(m->msg_length.get(), want.mrc_msg_length);
    }
    if (const Seth* h = p.seth()) {
        ext_off += 48;
        EXPECT_EQ(h->version, kMrcVersion);
        EXPECT_EQ(h->flags, ctl.flags);
        EXPECT_EQ(h->path.get(), ctl.path);
        EXPECT_EQ(h->cum_psn.get(), ctl.cum_psn & Psn::kMask);
        EXPECT_EQ(h->sack_base.get(), ctl.sack_base & Psn::kMask);
        EXPECT_EQ(h->mpr_dest, ctl.mpr_dest);
        EXPECT_EQ(h->port_mask, ctl.port_mask);
        EXPECT_EQ(h->reserved.get(), 0u);
        for (std::size_t w = 0; w < kSackBits / 64; ++w)
            EXPECT_EQ(h->bitmap[w].get(), ctl.bitmap[w]) << "bitmap word " << w;
    }
    if (const Neth* h = p.neth()) {
        ext_off += 12;
        EXPECT_EQ(h->version, kMrcVersion);
        EXPECT_EQ(h->reason, ctl.reason);
        EXPECT_EQ(h->path.get(), ctl.path);
        EXPECT_EQ(h->psn.get(), ctl.nack_psn & Psn::kMask);
        EXPECT_EQ(h->cum_psn.get(), ctl.cum_psn & Psn::kMask);
    }
    if (const Peth* h = p.peth()) {
        ext_off += 16;
        EXPECT_EQ(h->version, kMrcVersion);
        EXPECT_EQ(h->reserved, 0u);
        EXPECT_EQ(h->path.get(), ctl.path);
        EXPECT_EQ(h->seq.get(), ctl.seq);
        EXPECT_EQ(h->timestamp_ns.get(), ctl.timestamp_ns);
    }
    if (const Epeth* h = p.epeth()) {
        ext_off += 8;
        EXPECT_EQ(h->version, kMrcVersion);
        EXPECT_EQ(h->op, ctl.op);
        EXPECT_EQ(h->port_mask, ctl.port_mask);
        EXPECT_EQ(h->reserved, 0u);
        EXPECT_EQ(h->seq.get(), ctl.seq);
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
    const MrcCtlFields ctl = make_mrc_ctl(true, 0);
    PacketFields f = make_fields(GetParam().opcode, true, 0);
    f.mrc_ctl = &ctl;
    check(f);
}

TEST_P(RoundTrip, EveryFieldComesBackWithFlagsClear) {
    const MrcCtlFields ctl = make_mrc_ctl(false, 0x5a5a5a);
    PacketFields f = make_fields(GetParam().opcode, false, 0x5a5a5a);
    f.mrc_ctl = &ctl;
    check(f);
}

TEST_P(RoundTrip, MrcControlHeaderWithoutValuesIsZeroWithTheVersion) {
    // PacketFields::mrc_ctl null: build_frame writes zeroes (and the version byte).
    check(make_fields(GetParam().opcode, true, 0x33));
}

INSTANTIATE_TEST_SUITE_P(AllOpcodes, RoundTrip, ::testing::ValuesIn(all_cases()), case_name);

// ---------------------------------------------------------------------------------------------
// MRC headers byte by byte: offsets and big-endian order as the comment of wire/mrc.h states them,
// read from the frame without the header structs.

std::uint64_t be_at(std::span<const std::uint8_t> f, std::size_t off, std::size_t n) {
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < n; ++i)
        v = v << 8 | f[off + i];
    return v;
}

class MrcBytes : public ::testing::TestWithParam<bool> {}; // IPv6?

TEST_P(MrcBytes, DataPacketsCarryRethMdethAndImmDtInThatOrder) {
    const PathHeaders path = make_path(GetParam(), false);
    const std::size_t bth = 14 + (GetParam() ? 40 : 20) + 8;
    for (Opcode op : {Opcode::MRC_WRITE, Opcode::MRC_WRITE_LAST_WITH_IMMEDIATE}) {
        SCOPED_TRACE(to_string(op));
        PacketFields f;
        f.opcode = op;
        f.dest_qp = 0x000abc;
        f.psn = Psn(0xfffffe);
        f.va = 0x00007f1234560000ull;
        f.rkey = 0x1234abcd;
        f.dma_len = 1000;
        f.imm = 0xcafef00d;
        f.mrc_flags = kMdethFirst | kMdethRetransmit;
        f.mrc_path = 0x0107;
        f.mrc_msn = 0x00010203;
        f.mrc_msg_offset = 0x00100000;
        f.mrc_msg_length = 0x00200000;
        const Bytes payload = make_payload(1000, 5);
        const Bytes frame = build(path, f, payload);
        ASSERT_FALSE(frame.empty());
        const std::span<const std::uint8_t> b(frame);
        EXPECT_EQ(b[bth], static_cast<unsigned>(op));
        EXPECT_EQ(be_at(b, bth + 5, 3), 0xabcu);
        EXPECT_EQ(be_at(b, bth + 9, 3), 0xfffffeu);
        const std::size_t reth = bth + 12, mdeth = reth + 16, next = mdeth + 16;
        EXPECT_EQ(be_at(b, reth, 8), f.va);
        EXPECT_EQ(be_at(b, reth + 8, 4), f.rkey);
        EXPECT_EQ(be_at(b, reth + 12, 4), 1000u);
        EXPECT_EQ(b[mdeth], 1u) << "version";
        EXPECT_EQ(b[mdeth + 1], kMdethFirst | kMdethRetransmit);
        EXPECT_EQ(be_at(b, mdeth + 2, 2), 0x0107u);
        EXPECT_EQ(be_at(b, mdeth + 4, 4), 0x00010203u);
        EXPECT_EQ(be_at(b, mdeth + 8, 4), 0x00100000u);
        EXPECT_EQ(be_at(b, mdeth + 12, 4), 0x00200000u);
        const bool imm = op == Opcode::MRC_WRITE_LAST_WITH_IMMEDIATE;
        if (imm) {
            EXPECT_EQ(be_at(b, next, 4), 0xcafef00du);
        }
        const std::size_t pl = next + (imm ? 4 : 0);
        EXPECT_TRUE(std::equal(payload.begin(), payload.end(), frame.begin() + pl));
        const Parsed p = parse_copy(frame);
        ASSERT_EQ(p.reason, RejectReason::ok);
        EXPECT_EQ(p.offset_of(p.frame.reth), reth);
        EXPECT_EQ(p.offset_of(p.frame.mdeth()), mdeth);
        if (imm) {
            EXPECT_EQ(p.offset_of(p.frame.immdt), next);
        }
        EXPECT_EQ(p.offset_of(p.frame.payload.data()), pl);
    }
}

TEST_P(MrcBytes, SackLayout) {
    const PathHeaders path = make_path(GetParam(), true);
    const std::size_t seth = 18 + (GetParam() ? 40 : 20) + 8 + 12;
    MrcCtlFields c;
    c.flags = kSethEcnEcho;
    c.path = 0x0203;
    c.cum_psn = 0x01fffff0; // bits above 24 are dropped
    c.sack_base = 0xffffc0;
    c.mpr_dest = 16;
    c.port_mask = 0x0b;
    c.bitmap[0] = 0x8000000000000001ull;
    c.bitmap[1] = 0x0123456789abcdefull;
    c.bitmap[2] = 0;
    c.bitmap[3] = ~0ull;
    PacketFields f;
    f.opcode = Opcode::MRC_SACK;
    f.mrc_ctl = &c;
    const Bytes frame = build(path, f, {});
    ASSERT_FALSE(frame.empty());
    ASSERT_EQ(frame.size(), seth + 48 + 4);
    const std::span<const std::uint8_t> b(frame);
    EXPECT_EQ(b[seth], 1u);
    EXPECT_EQ(b[seth + 1], kSethEcnEcho);
    EXPECT_EQ(be_at(b, seth + 2, 2), 0x0203u);
    EXPECT_EQ(be_at(b, seth + 4, 4), 0xfffff0u);
    EXPECT_EQ(be_at(b, seth + 8, 4), 0xffffc0u);
    EXPECT_EQ(b[seth + 12], 16u);
    EXPECT_EQ(b[seth + 13], 0x0bu);
    EXPECT_EQ(be_at(b, seth + 14, 2), 0u);
    EXPECT_EQ(be_at(b, seth + 16, 8), 0x8000000000000001ull);
    EXPECT_EQ(be_at(b, seth + 24, 8), 0x0123456789abcdefull);
    EXPECT_EQ(be_at(b, seth + 32, 8), 0u);
    EXPECT_EQ(be_at(b, seth + 40, 8), ~0ull);
    const Parsed p = parse_copy(frame);
    ASSERT_EQ(p.reason, RejectReason::ok);
    EXPECT_EQ(p.offset_of(p.frame.seth()), seth);
    EXPECT_TRUE(p.frame.payload.empty());
}

TEST_P(MrcBytes, NackProbeAndPortStatusLayouts) {
    const PathHeaders path = make_path(GetParam(), false);
    const std::size_t ext = 14 + (GetParam() ? 40 : 20) + 8 + 12;
    MrcCtlFields c;
    c.reason = static_cast<std::uint8_t>(NackReason::mpr_exceeded);
    c.path = 0x0011;
    c.nack_psn = 0x123456;
    c.cum_psn = 0x123400;
    c.seq = 0x01020304;
    c.timestamp_ns = 0x1122334455667788ull;
    c.op = static_cast<std::uint8_t>(EndpointOp::port_status);
    c.port_mask = 0x05;
    PacketFields f;
    f.mrc_ctl = &c;

    f.opcode = Opcode::MRC_NACK;
    f.psn = Psn(0x123456);
    Bytes frame = build(path, f, {});
    ASSERT_EQ(frame.size(), ext + 12 + 4);
    std::span<const std::uint8_t> b(frame);
    EXPECT_EQ(b[ext], 1u);
    EXPECT_EQ(b[ext + 1], 2u);
    EXPECT_EQ(be_at(b, ext + 2, 2), 0x11u);
    EXPECT_EQ(be_at(b, ext + 4, 4), 0x123456u);
    EXPECT_EQ(be_at(b, ext + 8, 4), 0x123400u);
    EXPECT_EQ(parse_exact(frame), RejectReason::ok);

    for (Opcode op : {Opcode::MRC_PROBE, Opcode::MRC_PROBE_REPLY}) {
        f.opcode = op;
        frame = build(path, f, {});
        ASSERT_EQ(frame.size(), ext + 16 + 4);
        b = frame;
        EXPECT_EQ(b[ext], 1u);
        EXPECT_EQ(b[ext + 1], 0u) << "reserved";
        EXPECT_EQ(be_at(b, ext + 2, 2), 0x11u);
        EXPECT_EQ(be_at(b, ext + 4, 4), 0x01020304u);
        EXPECT_EQ(be_at(b, ext + 8, 8), 0x1122334455667788ull);
        EXPECT_EQ(parse_exact(frame), RejectReason::ok);
    }

    f.opcode = Opcode::MRC_PORT_STATUS;
    frame = build(path, f, {});
    ASSERT_EQ(frame.size(), ext + 8 + 4);
    b = frame;
    EXPECT_EQ(b[ext], 1u);
    EXPECT_EQ(b[ext + 1], 1u) << "op port_status";
    EXPECT_EQ(b[ext + 2], 0x05u);
    EXPECT_EQ(b[ext + 3], 0u) << "reserved";
    EXPECT_EQ(be_at(b, ext + 4, 4), 0x01020304u);
    EXPECT_EQ(parse_exact(frame), RejectReason::ok);
}

INSTANTIATE_TEST_SUITE_P(Mrc, MrcBytes, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) {
                             return std::string(i.param ? "ipv6" : "ipv4");
                         });

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
