/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * The small pieces of lib/wire: PSN serial arithmetic, big-endian field accessors, the opcode table
 * against IBTA Vol 1 table 39 and droce's MRC wire format v1 (wire/mrc.h), the UDP source port
 * rule, header sizes and layouts, and reject reason names.
 */
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <random>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "wire/eth.h"
#include "wire/icrc.h"
#include "wire/udp_sport.h"
#include "wire_test_util.h"

namespace droce::wire::test {
namespace {

// ---------------------------------------------------------------------------------------------
// PSN (IBTA §9.7.1: 24 bits, serial arithmetic)

TEST(Psn, ConstructorKeepsTheLow24Bits) {
    EXPECT_EQ(Psn(0x01234567).value(), 0x234567u);
    EXPECT_EQ(Psn(0xffffffff).value(), 0xffffffu);
    EXPECT_EQ(Psn(0x1000000).value(), 0u);
    EXPECT_EQ(Psn().value(), 0u);
}

TEST(Psn, IncrementWrapsFrom0xFFFFFFTo0) {
    Psn p(0xfffffe);
    ++p;
    EXPECT_EQ(p.value(), 0xffffffu);
    ++p;
    EXPECT_EQ(p.value(), 0u);
    p += 0x1000005; // 2^24 + 5: a whole turn and five
    EXPECT_EQ(p.value(), 5u);
    EXPECT_EQ((Psn(0xfffff0) + 0x20).value(), 0x10u);
    EXPECT_EQ((Psn(3) - 5).value(), 0xfffffeu);
    EXPECT_EQ((Psn(0) - 1).value(), 0xffffffu);
}

TEST(Psn, OrderingFollowsSerialArithmeticAcrossTheWrap) {
    EXPECT_LT(Psn(0xffffff), Psn(0));
    EXPECT_GT(Psn(0), Psn(0xffffff));
    EXPECT_LT(Psn(0xfffff0), Psn(0x10));
    EXPECT_LE(Psn(0xfffff0), Psn(0x10));
    EXPECT_GE(Psn(0x10), Psn(0xfffff0));
    EXPECT_LE(Psn(7), Psn(7));
    EXPECT_GE(Psn(7), Psn(7));
    EXPECT_FALSE(Psn(7) < Psn(7));
    EXPECT_FALSE(Psn(7) > Psn(7));
    // Plain integer order would say the opposite of each of these.
    EXPECT_FALSE(Psn(0) < Psn(0xffffff));
    EXPECT_TRUE(Psn(0x7fffff) > Psn(0));
    EXPECT_TRUE(Psn(0x800001) < Psn(0));
}

TEST(Psn, DistanceIsSignedAndLiesInMinus2To23UpTo2To23) {
    EXPECT_EQ(Psn(5).distance_from(Psn(2)), 3);
    EXPECT_EQ(Psn(2).distance_from(Psn(5)), -3);
    EXPECT_EQ(Psn(1).distance_from(Psn(0xfffffe)), 3);
    EXPECT_EQ(Psn(0xfffffe).distance_from(Psn(1)), -3);
    EXPECT_EQ(Psn(0x7fffff).distance_from(Psn(0)), 0x7fffff);
    EXPECT_EQ(Psn(0x800000).distance_from(Psn(0)), -0x800000);
    EXPECT_EQ(Psn(0x800001).distance_from(Psn(0)), -0x7fffff);
    for (std::uint32_t base : {0u, 1u, 0x7fffffu, 0x800000u, 0xfffff0u, 0xffffffu}) {
        for (std::int32_t d : {-0x800000, -0x7fffff, -1000, -1, 0, 1, 1000, 0x7fffff}) {
            const Psn a(base);
            const Psn b = a + static_cast<std::uint32_t>(d);
            EXPECT_EQ(b.distance_from(a), d) << "base " << base << " d " << d;
            EXPECT_EQ(b > a, d > 0);
            EXPECT_EQ(b < a, d < 0);
            EXPECT_EQ(b == a, d == 0);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Big-endian storage and header accessors

TEST(BeUint, StoresMostSignificantByteFirst) {
    Be32 v{};
    v.set(0x11223344);
    EXPECT_EQ(v.bytes[0], 0x11);
    EXPECT_EQ(v.bytes[3], 0x44);
    EXPECT_EQ(v.get(), 0x11223344u);
    Be64 w{};
    w.set(0x0102030405060708ull);
    EXPECT_EQ(w.bytes[0], 0x01);
    EXPECT_EQ(w.bytes[7], 0x08);
    EXPECT_EQ(w.get(), 0x0102030405060708ull);
}

TEST(BeUint, SetKeepsOnlyTheLowBitsOfItsWidth) {
    Be16 a{};
    a.set(0xabcd1234);
    EXPECT_EQ(a.get(), 0x1234u);
    Be24 b{};
    b.set(0xff89abcdull);
    EXPECT_EQ(b.get(), 0x89abcdu);
    Be32 c{};
    c.set(0x1122334455667788ull);
    EXPECT_EQ(c.get(), 0x55667788u);
    BeUint<5> d{};
    d.set(0xffeeddccbbaa99ull);
    EXPECT_EQ(d.get(), 0xddccbbaa99ull);
}

TEST(BeUint, NeighbouringFieldsAreNotTouched) {
    struct Pair {
        Be24 a;
        Be24 b;
    } p{};
    static_assert(sizeof(Pair) == 6);
    p.a.set(0xffffffff);
    p.b.set(0x123456);
    p.a.set(0x7fffffff);
    EXPECT_EQ(p.b.get(), 0x123456u);
    EXPECT_EQ(p.a.get(), 0xffffffu);
}

TEST(HeaderAccessors, BthSettersMaskToTheirBitFields) {
    Bth b{};
    b.fecn_becn = 0;
    b.set_flags(true, false, 7, 0x1f); // pad 7 → 3, tver 0x1f → 0xf
    EXPECT_TRUE(b.se());
    EXPECT_FALSE(b.mig_req());
    EXPECT_EQ(b.pad_count(), 3u);
    EXPECT_EQ(b.tver(), 0xfu);
    b.set_flags(false, true, 1, 0);
    EXPECT_EQ(b.flags, 0x50);
    b.set_dest_qp(0xfedcba98);
    EXPECT_EQ(b.dest_qp(), 0xdcba98u);
    EXPECT_EQ(b.fecn_becn, 0u) << "DestQP spilled into the FECN/BECN byte";
    b.set_psn(Psn(0xabcdef01));
    EXPECT_EQ(b.psn().value(), 0xcdef01u);
    b.set_ack_req(true);
    EXPECT_EQ(b.ackreq_byte, 0x80);
    EXPECT_EQ(b.psn().value(), 0xcdef01u);
    b.set_fecn_becn(false, true);
    EXPECT_EQ(b.fecn_becn, 0x40);
    EXPECT_FALSE(b.fecn());
    EXPECT_TRUE(b.becn());
    b.set_opcode(Opcode::CNP);
    EXPECT_EQ(b.opcode_byte, 0x81);
}

TEST(HeaderAccessors, OtherSettersMaskToTheirFields) {
    Aeth a{};
    a.set_msn(0x12fedcba);
    EXPECT_EQ(a.msn(), 0xfedcbau);
    EXPECT_EQ(a.syndrome, 0u);
    a.syndrome = make_syndrome(AethKind::nak, 0xe2); // low five bits: 2
    EXPECT_EQ(a.kind(), AethKind::nak);
    EXPECT_EQ(a.value(), 2u);
    EXPECT_EQ(a.syndrome, 0x62);
    EXPECT_EQ(make_syndrome(AethKind::rnr_nak, 14), 0x2e);
    EXPECT_EQ(make_syndrome(AethKind::ack, kAethCreditsInvalid), 0x1f);

    Deth d{};
    d.set_src_qp(0xff000011);
    EXPECT_EQ(d.src_qp(), 0x000011u);
    EXPECT_EQ(d.reserved, 0u);

    VlanTag v{};
    v.set_tci(9, 0x1abc); // PCP 9 → 1, VID 0x1abc → 0xabc
    EXPECT_EQ(v.pcp(), 1u);
    EXPECT_EQ(v.vid(), 0xabcu);
    EXPECT_EQ(v.tci.get(), 0x2abcu);

    Ipv6Hdr h{};
    h.set_vtc_flow(0x1e3, 0xfff1face); // traffic class → 0xe3, flow label → 0x1face
    EXPECT_EQ(h.version(), 6u);
    EXPECT_EQ(h.traffic_class(), 0xe3u);
    EXPECT_EQ(h.flow_label(), 0x1faceu);

    Ipv4Hdr ip{};
    ip.version_ihl = 0x46;
    ip.tos = 0x6b;
    EXPECT_EQ(ip.version(), 4u);
    EXPECT_EQ(ip.header_length(), 24u);
    EXPECT_EQ(ip.dscp(), 26u);
    EXPECT_EQ(ip.ecn(), 3u);
}

// same_mac compares all six bytes: a MAC that differs from another in any one bit of any byte is
// not the same, and equal ones are.
TEST(MacAddr, SameMacComparesEveryByte) {
    const MacAddr a = {0x02, 0x00, 0x00, 0x00, 0x0c, 0x00};
    EXPECT_TRUE(same_mac(a, a));
    for (std::size_t i = 0; i < a.size(); ++i)
        for (unsigned bit = 0; bit < 8; ++bit) {
            MacAddr b = a;
            b[i] ^= static_cast<std::uint8_t>(1u << bit);
            EXPECT_FALSE(same_mac(a, b)) << "byte " << i << " bit " << bit;
            EXPECT_FALSE(same_mac(b, a)) << "byte " << i << " bit " << bit;
        }
}

TEST(HeaderSizes, MatchTheWire) {
    EXPECT_EQ(sizeof(EthHdr), 14u);
    EXPECT_EQ(sizeof(VlanTag), 4u);
    EXPECT_EQ(sizeof(Ipv4Hdr), 20u);
    EXPECT_EQ(sizeof(Ipv6Hdr), 40u);
    EXPECT_EQ(sizeof(UdpHdr), 8u);
    EXPECT_EQ(sizeof(Bth), 12u);
    EXPECT_EQ(sizeof(Deth), 8u);
    EXPECT_EQ(sizeof(Reth), 16u);
    EXPECT_EQ(sizeof(AtomicEth), 28u);
    EXPECT_EQ(sizeof(Aeth), 4u);
    EXPECT_EQ(sizeof(AtomicAckEth), 8u);
    EXPECT_EQ(sizeof(ImmDt), 4u);
    EXPECT_EQ(sizeof(Ieth), 4u);
    EXPECT_EQ(sizeof(CnpBody), 16u);
    EXPECT_EQ(alignof(Bth), 1u);
    EXPECT_EQ(alignof(AtomicEth), 1u);
}

TEST(HeaderSizes, MrcHeadersMatchWireFormatV1) {
    EXPECT_EQ(sizeof(Mdeth), 16u);
    EXPECT_EQ(sizeof(Seth), 48u);
    EXPECT_EQ(sizeof(Neth), 12u);
    EXPECT_EQ(sizeof(Peth), 16u);
    EXPECT_EQ(sizeof(Epeth), 8u);
    EXPECT_EQ(alignof(Mdeth), 1u);
    EXPECT_EQ(alignof(Seth), 1u);
    EXPECT_EQ(alignof(Neth), 1u);
    EXPECT_EQ(alignof(Peth), 1u);
    EXPECT_EQ(alignof(Epeth), 1u);
    EXPECT_EQ(kMrcVersion, 1u);
    EXPECT_EQ(kSackBits, 256u);
    EXPECT_EQ(kMprUnit, 128u);
}

TEST(HeaderLayout, MdethFieldOffsets) {
    EXPECT_EQ(offsetof(Mdeth, version), 0u);
    EXPECT_EQ(offsetof(Mdeth, flags), 1u);
    EXPECT_EQ(offsetof(Mdeth, path), 2u);
    EXPECT_EQ(offsetof(Mdeth, msn), 4u);
    EXPECT_EQ(offsetof(Mdeth, msg_offset), 8u);
    EXPECT_EQ(offsetof(Mdeth, msg_length), 12u);
    EXPECT_EQ(kMdethFirst, 1u);
    EXPECT_EQ(kMdethLast, 2u);
    EXPECT_EQ(kMdethRetransmit, 4u);
}

TEST(HeaderLayout, SethFieldOffsets) {
    EXPECT_EQ(offsetof(Seth, version), 0u);
    EXPECT_EQ(offsetof(Seth, flags), 1u);
    EXPECT_EQ(offsetof(Seth, path), 2u);
    EXPECT_EQ(offsetof(Seth, cum_psn), 4u);
    EXPECT_EQ(offsetof(Seth, sack_base), 8u);
    EXPECT_EQ(offsetof(Seth, mpr_dest), 12u);
    EXPECT_EQ(offsetof(Seth, port_mask), 13u);
    EXPECT_EQ(offsetof(Seth, reserved), 14u);
    EXPECT_EQ(offsetof(Seth, bitmap), 16u);
    EXPECT_EQ(sizeof(Seth::bitmap), 32u);
    EXPECT_EQ(std::size(Seth{}.bitmap), 4u);
    EXPECT_EQ(kSethEcnEcho, 1u);
}

TEST(HeaderLayout, NethPethEpethFieldOffsets) {
    EXPECT_EQ(offsetof(Neth, version), 0u);
    EXPECT_EQ(offsetof(Neth, reason), 1u);
    EXPECT_EQ(offsetof(Neth, path), 2u);
    EXPECT_EQ(offsetof(Neth, psn), 4u);
    EXPECT_EQ(offsetof(Neth, cum_psn), 8u);

    EXPECT_EQ(offsetof(Peth, version), 0u);
    EXPECT_EQ(offsetof(Peth, reserved), 1u);
    EXPECT_EQ(offsetof(Peth, path), 2u);
    EXPECT_EQ(offsetof(Peth, seq), 4u);
    EXPECT_EQ(offsetof(Peth, timestamp_ns), 8u);

    EXPECT_EQ(offsetof(Epeth, version), 0u);
    EXPECT_EQ(offsetof(Epeth, op), 1u);
    EXPECT_EQ(offsetof(Epeth, port_mask), 2u);
    EXPECT_EQ(offsetof(Epeth, reserved), 3u);
    EXPECT_EQ(offsetof(Epeth, seq), 4u);
}

TEST(HeaderLayout, MrcEnumValuesAreTheWireValues) {
    EXPECT_EQ(static_cast<unsigned>(NackReason::trimmed), 1u);
    EXPECT_EQ(static_cast<unsigned>(NackReason::mpr_exceeded), 2u);
    EXPECT_EQ(static_cast<unsigned>(NackReason::wimm_exceeded), 3u);
    EXPECT_EQ(static_cast<unsigned>(NackReason::remote_access), 4u);
    EXPECT_EQ(static_cast<unsigned>(NackReason::invalid_request), 5u);
    EXPECT_EQ(static_cast<unsigned>(EndpointOp::port_status), 1u);
}

TEST(Checksum, Ipv4HeaderChecksumOfTheRfc1071Example) {
    // A textbook header (Wikipedia's IPv4 checksum example): checksum 0xb861.
    const std::uint8_t hdr[20] = {0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11,
                                  0x00, 0x00, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7};
    EXPECT_EQ(ipv4_header_checksum(hdr, sizeof hdr), 0xb861u);
}

TEST(WireBasics, Ipv4ChecksumMatchesRfc1071WordByWord) {
    // The word-at-a-time sum against RFC 1071's definition (16-bit big-endian words, end-around
    // carry), over random headers of every length up to 60 bytes with options, odd lengths too,
    // and all-0xff headers, whose sum carries the most.
    std::mt19937 rng(7);
    std::uint8_t hdr[61];
    for (int round = 0; round < 2000; ++round) {
        for (auto& b : hdr)
            b = round % 10 == 0 ? 0xff : static_cast<std::uint8_t>(rng());
        for (unsigned len = 0; len <= 60; ++len) {
            std::uint32_t sum = 0;
            for (unsigned i = 0; i < len; i += 2)
                sum += static_cast<std::uint32_t>(hdr[i] << 8 | (i + 1 < len ? hdr[i + 1] : 0));
            while (sum >> 16)
                sum = (sum & 0xffff) + (sum >> 16);
            ASSERT_EQ(ipv4_header_checksum(hdr, len), static_cast<std::uint16_t>(~sum))
                << "round " << round << ", " << len << " bytes";
        }
    }
}

TEST(WireBasics, Ipv4ChecksumFromFieldValuesMatchesTheHeaders) {
    // ipv4_header_checksum_of (what build_frame uses) against the sum over the header written
    // with the same values: random fields, all-0xff ones (the most carries), the textbook header.
    std::mt19937 rng(11);
    for (int round = 0; round < 20000; ++round) {
        const bool ones = round % 10 == 0;
        const auto r8 = [&] {
            return ones ? std::uint8_t{0xff} : static_cast<std::uint8_t>(rng());
        };
        const auto r16 = [&] {
            return ones ? std::uint16_t{0xffff} : static_cast<std::uint16_t>(rng());
        };
        Ipv4Hdr h{};
        h.version_ihl = 0x45;
        h.tos = r8();
        h.total_length.set(r16());
        h.id.set(r16());
        h.flags_frag.set(r16());
        h.ttl = r8();
        h.protocol = r8();
        for (auto& b : h.src)
            b = r8();
        for (auto& b : h.dst)
            b = r8();
        const std::uint16_t of =
            ipv4_header_checksum_of(h.tos, h.total_length.get(), h.id.get(), h.flags_frag.get(),
                                    h.ttl, h.protocol, h.src, h.dst);
        ASSERT_EQ(of, ipv4_header_checksum(&h, sizeof h)) << "round " << round;
        h.checksum.set(of);
        ASSERT_EQ(ipv4_header_checksum(&h, sizeof h), 0u) << "round " << round;
    }
    EXPECT_EQ(ipv4_header_checksum_of(0, 0x73, 0, 0x4000, 0x40, 0x11, {0xc0, 0xa8, 0x00, 0x01},
                                      {0xc0, 0xa8, 0x00, 0xc7}),
              0xb861u);
    // A sum whose first fold carries again (0x7ffff -> 0x10006 -> 0x0007): 0xfff9 with one fold.
    EXPECT_EQ(ipv4_header_checksum_of(0xff, 0xffff, 0xffff, 0xffff, 0xff, 0xff,
                                      {0xff, 0xff, 0xff, 0xff}, {0xff, 0xff, 0xba, 0x07}),
              0xfff8u);
}

// ---------------------------------------------------------------------------------------------
// Opcode table against IBTA Vol 1 table 39 (and Annex A17.9.3 for the CNP), typed in here from the
// specification independently of lib/wire/opcode.h.

enum Ext : unsigned {
    kDeth = 1,
    kReth = 2,
    kAtomicEth = 4,
    kAeth = 8,
    kAtomicAckEth = 16,
    kImmDt = 32,
    kIeth = 64,
    kCnp = 128,
    // MRC (wire/mrc.h)
    kMdeth = 256,
    kSeth = 512,
    kNeth = 1024,
    kPeth = 2048,
    kEpeth = 4096,
};

struct Table39Row {
    std::uint8_t code;
    const char* name;
    unsigned ext;
    bool payload;
    std::size_t ext_bytes;
};

// clang-format off
const Table39Row kTable39[] = {
    {0x00, "RC_SEND_FIRST",                     0,                 true,  0},
    {0x01, "RC_SEND_MIDDLE",                    0,                 true,  0},
    {0x02, "RC_SEND_LAST",                      0,                 true,  0},
    {0x03, "RC_SEND_LAST_WITH_IMMEDIATE",       kImmDt,            true,  4},
    {0x04, "RC_SEND_ONLY",                      0,                 true,  0},
    {0x05, "RC_SEND_ONLY_WITH_IMMEDIATE",       kImmDt,            true,  4},
    {0x06, "RC_RDMA_WRITE_FIRST",               kReth,             true,  16},
    {0x07, "RC_RDMA_WRITE_MIDDLE",              0,                 true,  0},
    {0x08, "RC_RDMA_WRITE_LAST",                0,                 true,  0},
    {0x09, "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", kImmDt,            true,  4},
    {0x0a, "RC_RDMA_WRITE_ONLY",                kReth,             true,  16},
    {0x0b, "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", kReth | kImmDt,    true,  20},
    {0x0c, "RC_RDMA_READ_REQUEST",              kReth,             false, 16},
    {0x0d, "RC_RDMA_READ_RESPONSE_FIRST",       kAeth,             true,  4},
    {0x0e, "RC_RDMA_READ_RESPONSE_MIDDLE",      0,                 true,  0},
    {0x0f, "RC_RDMA_READ_RESPONSE_LAST",        kAeth,             true,  4},
    {0x10, "RC_RDMA_READ_RESPONSE_ONLY",        kAeth,             true,  4},
    {0x11, "RC_ACKNOWLEDGE",                    kAeth,             false, 4},
    {0x12, "RC_ATOMIC_ACKNOWLEDGE",             kAeth | kAtomicAckEth, false, 12},
    {0x13, "RC_COMPARE_SWAP",                   kAtomicEth,        false, 28},
    {0x14, "RC_FETCH_ADD",                      kAtomicEth,        false, 28},
    {0x16, "RC_SEND_LAST_WITH_INVALIDATE",      kIeth,             true,  4},
    {0x17, "RC_SEND_ONLY_WITH_INVALIDATE",      kIeth,             true,  4},
    {0x20, "UC_SEND_FIRST",                     0,                 true,  0},
    {0x21, "UC_SEND_MIDDLE",                    0,                 true,  0},
    {0x22, "UC_SEND_LAST",                      0,                 true,  0},
    {0x23, "UC_SEND_LAST_WITH_IMMEDIATE",       kImmDt,            true,  4},
    {0x24, "UC_SEND_ONLY",                      0,                 true,  0},
    {0x25, "UC_SEND_ONLY_WITH_IMMEDIATE",       kImmDt,            true,  4},
    {0x26, "UC_RDMA_WRITE_FIRST",               kReth,             true,  16},
    {0x27, "UC_RDMA_WRITE_MIDDLE",              0,                 true,  0},
    {0x28, "UC_RDMA_WRITE_LAST",                0,                 true,  0},
    {0x29, "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE", kImmDt,            true,  4},
    {0x2a, "UC_RDMA_WRITE_ONLY",                kReth,             true,  16},
    {0x2b, "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", kReth | kImmDt,    true,  20},
    {0x64, "UD_SEND_ONLY",                      kDeth,             true,  8},
    {0x65, "UD_SEND_ONLY_WITH_IMMEDIATE",       kDeth | kImmDt,    true,  12},
    {0x81, "CNP",                               kCnp,              false, 16},
};

/** droce's MRC opcodes, typed in from the comment of lib/wire/mrc.h (wire format v1). */
const Table39Row kMrcRows[] = {
    {0xc0, "MRC_WRITE",                         kReth | kMdeth,          true,  32},
    {0xc1, "MRC_WRITE_LAST_WITH_IMMEDIATE",     kReth | kMdeth | kImmDt, true,  36},
    {0xc2, "MRC_SACK",                          kSeth,                   false, 48},
    {0xc3, "MRC_NACK",                          kNeth,                   false, 12},
    {0xc4, "MRC_PROBE",                         kPeth,                   false, 16},
    {0xc5, "MRC_PROBE_REPLY",                   kPeth,                   false, 16},
    {0xc6, "MRC_PORT_STATUS",                   kEpeth,                  false, 8},
};
// clang-format on

/** Every opcode droce knows, in numeric order: table 39, the CNP, then MRC. */
std::vector<Table39Row> all_rows() {
    std::vector<Table39Row> v(std::begin(kTable39), std::end(kTable39));
    v.insert(v.end(), std::begin(kMrcRows), std::end(kMrcRows));
    return v;
}

bool is_mrc(Opcode op) {
    return static_cast<unsigned>(op) >= 0xc0 && static_cast<unsigned>(op) <= 0xc6;
}

unsigned ext_set(const OpcodeInfo& info) {
    unsigned e = 0;
    if (info.is(OpFlags::deth)) e |= kDeth;
    if (info.is(OpFlags::reth)) e |= kReth;
    if (info.is(OpFlags::atomic_eth)) e |= kAtomicEth;
    if (info.is(OpFlags::aeth)) e |= kAeth;
    if (info.is(OpFlags::atomic_ack_eth)) e |= kAtomicAckEth;
    if (info.is(OpFlags::immdt)) e |= kImmDt;
    if (info.is(OpFlags::ieth)) e |= kIeth;
    if (info.is(OpFlags::cnp)) e |= kCnp;
    if (info.is(OpFlags::mdeth)) e |= kMdeth;
    if (info.is(OpFlags::seth)) e |= kSeth;
    if (info.is(OpFlags::neth)) e |= kNeth;
    if (info.is(OpFlags::peth)) e |= kPeth;
    if (info.is(OpFlags::epeth)) e |= kEpeth;
    return e;
}

TEST(WireBasics, UdpChecksumVerifiesOverItsPseudoHeader) {
    // set_udp_checksum (droce-trace rebuilds the datagrams the kernel cut from a GSO send with it)
    // against an independent sum: IPv4 and IPv6, with and without 802.1Q, even and odd payloads.
    for (const bool ipv6 : {false, true}) {
        for (const bool vlan : {false, true}) {
            for (const std::size_t len : {std::size_t{0}, std::size_t{1}, std::size_t{63},
                                          std::size_t{64}, std::size_t{1025}}) {
                SCOPED_TRACE(std::string(ipv6 ? "IPv6" : "IPv4") + (vlan ? " 802.1Q " : " ") +
                             std::to_string(len) + " bytes");
                Bytes f = build(make_path(ipv6, vlan), make_fields(Opcode::RC_SEND_ONLY, false),
                                make_payload(len, static_cast<std::uint8_t>(len)));
                ASSERT_FALSE(f.empty());
                const Layout l = layout_of(f);
                const std::size_t udp_len = rd16(f, l.l4 + 4);
                wr16(f, l.l4 + 6, 0x1234); // whatever was there is replaced
                ASSERT_TRUE(set_udp_checksum(f, l.l3, l.l4, udp_len, ipv6));
                EXPECT_NE(rd16(f, l.l4 + 6), 0u);
                std::uint32_t sum = ones_complement_sum(std::span<const std::uint8_t>(f).subspan(
                    l.l3 + (ipv6 ? 8 : 12), ipv6 ? 32 : 8));
                sum += static_cast<std::uint32_t>(udp_len) + 17;
                sum = ones_complement_sum(std::span<const std::uint8_t>(f).subspan(l.l4, udp_len),
                                          sum);
                EXPECT_EQ(sum, 0xffffu);
                if (ipv6) {
                    EXPECT_TRUE(ipv6_udp_checksum_valid(f, l.l3));
                }
                // A datagram that does not lie inside the frame is refused, the frame untouched.
                const Bytes before = f;
                EXPECT_FALSE(set_udp_checksum(f, l.l3, l.l4, f.size() - l.l4 + 1, ipv6));
                EXPECT_FALSE(set_udp_checksum(f, l.l3, l.l3, udp_len, ipv6));
                EXPECT_FALSE(
                    set_udp_checksum(f, l.l3, l.l4, SIZE_MAX, ipv6)); // no wrap past the end
                EXPECT_FALSE(set_udp_checksum(f, l.l3, SIZE_MAX, 8, ipv6));
                EXPECT_FALSE(set_udp_checksum(f, SIZE_MAX, l.l4, udp_len, ipv6));
                EXPECT_FALSE(set_udp_checksum(std::span(f).first(l.l3 + 4), l.l3, l.l4, 8, ipv6));
                EXPECT_EQ(f, before);
            }
        }
    }
}

TEST(OpcodeTable, ExtensionHeadersAndLengthsMatchIbtaTable39) {
    for (const Table39Row& row : kTable39) {
        const OpcodeInfo& info = kOpcodeTable[row.code];
        SCOPED_TRACE(row.name);
        ASSERT_TRUE(info.known);
        EXPECT_EQ(info.name, row.name);
        EXPECT_EQ(ext_set(info), row.ext);
        EXPECT_EQ(info.ext_length, row.ext_bytes);
        EXPECT_EQ(info.is(OpFlags::payload), row.payload);
    }
}

TEST(OpcodeTable, MrcRowsMatchWireFormatV1) {
    for (const Table39Row& row : kMrcRows) {
        const OpcodeInfo& info = kOpcodeTable[row.code];
        SCOPED_TRACE(row.name);
        ASSERT_TRUE(info.known);
        EXPECT_EQ(info.name, row.name);
        EXPECT_EQ(ext_set(info), row.ext);
        EXPECT_EQ(info.ext_length, row.ext_bytes);
        EXPECT_EQ(info.is(OpFlags::payload), row.payload);
        EXPECT_EQ(transport_of(static_cast<Opcode>(row.code)), Transport::mrc);
    }
}

TEST(OpcodeTable, KnowsExactlyTheOpcodesOfTable39AndMrcAndNoOther) {
    const std::vector<Table39Row> rows = all_rows();
    std::set<unsigned> spec;
    for (const Table39Row& row : rows)
        spec.insert(row.code);
    for (unsigned v = 0; v < 256; ++v)
        EXPECT_EQ(kOpcodeTable[v].known, spec.count(v) == 1) << "opcode 0x" << std::hex << v;
    ASSERT_EQ(std::size(kAllOpcodes), rows.size());
    EXPECT_EQ(rows.size(), 45u);
    for (std::size_t i = 0; i < std::size(kAllOpcodes); ++i) {
        EXPECT_EQ(static_cast<unsigned>(kAllOpcodes[i]), rows[i].code)
            << "kAllOpcodes is in numeric order";
        EXPECT_EQ(to_string(kAllOpcodes[i]), rows[i].name);
    }
    EXPECT_EQ(to_string(static_cast<Opcode>(0x15)), "UNKNOWN");
    EXPECT_TRUE(kOpcodeTable[0x15].name.empty());
}

TEST(OpcodeTable, UcOpcodesMirrorRcOpcodesAndAreNeverResponses) {
    for (unsigned v = 0x20; v <= 0x2b; ++v) {
        const OpcodeInfo& uc = kOpcodeTable[v];
        const OpcodeInfo& rc = kOpcodeTable[v - 0x20];
        ASSERT_TRUE(uc.known);
        EXPECT_EQ(uc.flags, rc.flags) << uc.name;
        EXPECT_EQ(uc.name.substr(3), rc.name.substr(3));
        EXPECT_FALSE(uc.is(OpFlags::response));
    }
}

TEST(OpcodeTable, TransportComesFromTheTopThreeBits) {
    EXPECT_EQ(transport_of(Opcode::RC_FETCH_ADD), Transport::rc);
    EXPECT_EQ(transport_of(Opcode::UC_SEND_ONLY), Transport::uc);
    EXPECT_EQ(transport_of(Opcode::UD_SEND_ONLY_WITH_IMMEDIATE), Transport::ud);
    EXPECT_EQ(transport_of(Opcode::CNP), Transport::cnp);
    EXPECT_EQ(transport_of(Opcode::MRC_WRITE), Transport::mrc);
    for (Opcode op : kAllOpcodes) {
        EXPECT_EQ(opcode_info(op).name.substr(0, 2) == "RC", transport_of(op) == Transport::rc);
        EXPECT_EQ(opcode_info(op).name.substr(0, 4) == "MRC_", transport_of(op) == Transport::mrc)
            << opcode_info(op).name;
    }
}

TEST(OpcodeTable, MessagePositionAndRoleAreConsistent) {
    for (Opcode op : kAllOpcodes) {
        const OpcodeInfo& i = opcode_info(op);
        const std::string n(i.name);
        SCOPED_TRACE(n);
        if (op == Opcode::CNP) {
            EXPECT_FALSE(i.is(OpFlags::request) || i.is(OpFlags::response));
            continue;
        }
        if (is_mrc(op)) continue; // OpcodeTable.MrcRolesAndMessagePlace
        EXPECT_NE(i.is(OpFlags::request), i.is(OpFlags::response))
            << "exactly one of request/response";
        const bool named_only =
            n.find("ONLY") != std::string::npos || n.find("REQUEST") != std::string::npos ||
            n.find("ACKNOWLEDGE") != std::string::npos ||
            n.find("COMPARE_SWAP") != std::string::npos || n.find("FETCH_ADD") != std::string::npos;
        EXPECT_EQ(i.is(OpFlags::only), named_only);
        EXPECT_EQ(i.is(OpFlags::middle), n.find("MIDDLE") != std::string::npos);
        if (n.find("FIRST") != std::string::npos) {
            EXPECT_TRUE(i.is(OpFlags::first) && !i.is(OpFlags::last));
        }
        if (n.find("LAST") != std::string::npos) {
            EXPECT_TRUE(i.is(OpFlags::last) && !i.is(OpFlags::first));
        }
        // Immediate data and SEND always complete at the responder on the last packet; plain WRITE
        // never.
        if (i.is(OpFlags::last) && (i.is(OpFlags::immdt) || i.is(OpFlags::send))) {
            EXPECT_TRUE(i.is(OpFlags::completes) && i.is(OpFlags::recv_wqe));
        }
        if (i.is(OpFlags::write) && !i.is(OpFlags::immdt)) {
            EXPECT_FALSE(i.is(OpFlags::completes) || i.is(OpFlags::recv_wqe));
        }
        // The first packet of a WRITE carries the RETH; middle and last never do.
        if (i.is(OpFlags::write)) {
            EXPECT_EQ(i.is(OpFlags::reth), i.is(OpFlags::first));
        }
    }
}

TEST(OpcodeTable, MrcRolesAndMessagePlace) {
    // Data packets: requests that write and carry payload; their place in the message is in the
    // MDETH (first / last flags), not in the opcode, and nothing in the opcode completes at the
    // responder (lib/mrc delivers an immediate once every PSN before it has arrived).
    for (Opcode op : {Opcode::MRC_WRITE, Opcode::MRC_WRITE_LAST_WITH_IMMEDIATE}) {
        const OpcodeInfo& i = opcode_info(op);
        SCOPED_TRACE(i.name);
        EXPECT_TRUE(i.is(OpFlags::request | OpFlags::payload | OpFlags::write));
        EXPECT_FALSE(i.is(OpFlags::response));
        EXPECT_FALSE(i.is(OpFlags::first) || i.is(OpFlags::middle) || i.is(OpFlags::last));
        EXPECT_FALSE(i.is(OpFlags::send) || i.is(OpFlags::read) || i.is(OpFlags::atomic));
    }
    // Control packets: one packet each, no payload; who sends them.
    const std::pair<Opcode, bool> ctl[] = {
        {Opcode::MRC_SACK, false},       {Opcode::MRC_NACK, false},
        {Opcode::MRC_PROBE, true},       {Opcode::MRC_PROBE_REPLY, false},
        {Opcode::MRC_PORT_STATUS, true},
    };
    for (const auto& [op, request] : ctl) {
        const OpcodeInfo& i = opcode_info(op);
        SCOPED_TRACE(i.name);
        EXPECT_TRUE(i.is(OpFlags::only));
        EXPECT_FALSE(i.is(OpFlags::payload));
        EXPECT_EQ(i.is(OpFlags::request), request);
        EXPECT_EQ(i.is(OpFlags::response), !request);
        EXPECT_FALSE(i.is(OpFlags::reth) || i.is(OpFlags::mdeth) || i.is(OpFlags::immdt));
    }
    // One MRC extension header per opcode.
    for (Opcode op : kAllOpcodes) {
        const OpcodeInfo& i = opcode_info(op);
        const int n = i.is(OpFlags::mdeth) + i.is(OpFlags::seth) + i.is(OpFlags::neth) +
                      i.is(OpFlags::peth) + i.is(OpFlags::epeth);
        EXPECT_EQ(n, is_mrc(op) ? 1 : 0) << i.name;
    }
}

// ---------------------------------------------------------------------------------------------
// UDP source port (Linux rdma_get_udp_sport)

TEST(UdpSourcePort, LinuxRuleOnKnownVectors) {
    EXPECT_EQ(rdma_udp_sport(0, 0x11, 0x12), 0xC132);
    EXPECT_EQ(rdma_udp_sport(0, 0xffffff, 0xffffff), 0xff21);
    EXPECT_EQ(rdma_udp_sport(0, 0x123456, 0x654321), 0xf787);
    EXPECT_EQ(rdma_udp_sport(0, 0, 5), 0xc000);
    // A given flow label is used as is (20 bits), not derived from the QPNs.
    EXPECT_EQ(rdma_udp_sport(0x12345, 1, 2), 0xe341);
    EXPECT_EQ(rdma_udp_sport(0x12345, 0x11, 0x12), 0xe341);
    EXPECT_EQ(rdma_udp_sport(0xf12345, 7, 9), 0xe341) << "flow label bits above 20 are ignored";
    EXPECT_EQ(flow_label_from_qpns(0x11, 0x12), 0x132u);
}

TEST(UdpSourcePort, IsSymmetricInTheTwoQpns) {
    std::uint32_t a = 1, b = 0xabcdef;
    for (int i = 0; i < 2000; ++i) {
        a = (a * 1103515245u + 12345u) & 0xffffff;
        b = (b * 2654435761u + 1u) & 0xffffff;
        ASSERT_EQ(rdma_udp_sport(0, a, b), rdma_udp_sport(0, b, a)) << a << " " << b;
        const std::uint16_t port = rdma_udp_sport(0, a, b);
        ASSERT_GE(port, 0xc000);
    }
}

TEST(UdpSourcePort, DifferentQpPairsSpreadOverManyPorts) {
    std::set<std::uint16_t> ports;
    for (std::uint32_t q = 0x11; q < 0x11 + 1000; ++q)
        ports.insert(rdma_udp_sport(0, q, 0x12));
    EXPECT_GT(ports.size(), 900u);
}

// ---------------------------------------------------------------------------------------------
// Reject reasons are printable

TEST(RejectReasons, EveryReasonHasADistinctNameAndDescription) {
    std::set<std::string_view> names, texts;
    for (std::size_t i = 0; i < kNumRejectReasons; ++i) {
        const auto r = static_cast<RejectReason>(i);
        EXPECT_FALSE(to_string(r).empty());
        EXPECT_FALSE(describe(r).empty());
        names.insert(to_string(r));
        texts.insert(describe(r));
    }
    EXPECT_EQ(names.size(), kNumRejectReasons);
    EXPECT_EQ(texts.size(), kNumRejectReasons);
    EXPECT_EQ(kNumRejectReasons, 14u);
    EXPECT_EQ(to_string(RejectReason::bad_icrc), "bad_icrc");
    EXPECT_EQ(to_string(RejectReason::ok), "ok");
    EXPECT_EQ(to_string(static_cast<RejectReason>(200)), "invalid");
}

TEST(RejectReasons, CountersCountPerReason) {
    ParseCounters c;
    c.count(RejectReason::bad_icrc);
    c.count(RejectReason::bad_icrc);
    c.count(RejectReason::ok);
    EXPECT_EQ(c[RejectReason::bad_icrc], 2u);
    EXPECT_EQ(c[RejectReason::ok], 1u);
    EXPECT_EQ(c[RejectReason::too_short], 0u);
}

/** A packet of @p len bytes from its IP header on (IHL @p ihl, or IPv6 when @p ihl is 16), its
 *  bytes a pattern of @p len and @p seed. */
Bytes icrc_test_packet(unsigned ihl, std::size_t len, unsigned seed = 0) {
    const bool ipv6 = ihl == 16;
    Bytes l3(len);
    for (std::size_t i = 0; i < len; ++i)
        l3[i] = static_cast<std::uint8_t>(i * 131 + len * 7 + seed * 29 + 1);
    l3[0] = static_cast<std::uint8_t>(ipv6 ? 0x60 : 0x40 | ihl);
    return l3;
}

/** The ICRC by zlib over a masked copy, as Annex A17.3.3 words it. */
std::uint32_t zlib_icrc(const Bytes& l3, unsigned ihl) {
    const bool ipv6 = ihl == 16;
    const std::size_t ip = ipv6 ? 40 : ihl * 4;
    Bytes masked = l3;
    if (ipv6) {
        masked[0] |= 0x0f;
        masked[1] = masked[2] = masked[3] = masked[7] = 0xff;
    } else {
        masked[1] = masked[8] = masked[10] = masked[11] = 0xff;
    }
    masked[ip + 6] = masked[ip + 7] = masked[ip + 8 + 4] = 0xff;
    const std::uint8_t lrh[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    uLong want = crc32(0L, Z_NULL, 0);
    want = crc32(want, lrh, sizeof lrh);
    want = crc32(want, masked.data(), static_cast<uInt>(masked.size()));
    return static_cast<std::uint32_t>(want);
}

/** Every route's ICRC of @p l3 against zlib's. */
void expect_every_route_matches_zlib(const Bytes& l3, unsigned ihl) {
    const bool ipv6 = ihl == 16;
    const std::uint32_t want = zlib_icrc(l3, ihl);
    const std::string what = (ipv6 ? "IPv6" : "IPv4 IHL " + std::to_string(ihl)) + " length " +
                             std::to_string(l3.size());
    ASSERT_EQ(icrc_compute(l3, ipv6), want) << what;
    ASSERT_EQ(detail::icrc_compute_isal(l3, ipv6), want) << "ISA-L route, " << what;
    ASSERT_EQ(detail::icrc_compute_fold128(l3, ipv6), want) << "128-bit fold route, " << what;
    ASSERT_EQ(detail::icrc_compute_fold256(l3, ipv6), want) << "256-bit fold route, " << what;
}

// icrc_compute() takes four routes: up to 256 bytes a fold in registers (512-bit VPCLMULQDQ on an
// AVX-512 CPU; PCLMULQDQ and AVX: detail::icrc_compute_fold128) or a masked copy of the whole
// packet and one ISA-L call (other CPUs: detail::icrc_compute_isal), beyond that masked headers
// then the rest in place (ISA-L, or the 256-bit fold: detail::icrc_compute_fold256): every length
// from the smallest packet to well past the switch, IPv4 and IPv6, every route this CPU can take,
// against zlib over the masked bytes (A17.3.3). IPv4 with options too (IHL 6 to 15: the masks
// move with the header's end).
TEST(Icrc, EveryLengthMatchesZlib) {
    for (unsigned ihl = 5; ihl <= 16; ++ihl) {
        const std::size_t ip = ihl == 16 ? 40 : ihl * 4;
        for (std::size_t len = ip + 8 + 12; len <= 700; ++len)
            ASSERT_NO_FATAL_FAILURE(
                expect_every_route_matches_zlib(icrc_test_packet(ihl, len), ihl));
    }
}

// The long routes at the lengths of full frames: a 1 KiB and a 4 KiB path MTU's FIRST, MIDDLE and
// LAST (with and without a RETH, pad 0 to 3), a jumbo frame's, and every length about them, so
// that the rest past the head is whole 128-byte blocks, and blocks with 1 to 127 bytes left over.
TEST(Icrc, FrameLengthsMatchZlibOnEveryRoute) {
    if (!detail::icrc_has_fold256())
        std::printf("note: this CPU has no 256-bit VPCLMULQDQ; its fold route is ISA-L's here\n");
    for (const unsigned ihl : {5u, 16u})
        for (const std::size_t around : {1024u, 2048u, 4096u, 9000u})
            for (std::size_t len = around; len <= around + 200; ++len)
                ASSERT_NO_FATAL_FAILURE(
                    expect_every_route_matches_zlib(icrc_test_packet(ihl, len, around), ihl));
}

// icrc_continue() (a frame whose payload is gathered from other buffers) takes the same long
// routes: a packet split into pieces at every alignment gives the ICRC of the whole, as does ISA-L
// continuing over the same pieces.
TEST(Icrc, ContinueAcrossPiecesMatchesTheWhole) {
    std::mt19937 rng(4791);
    for (int round = 0; round < 400; ++round) {
        const std::size_t len = 60 + rng() % 5000;
        const Bytes l3 = icrc_test_packet(5, len, static_cast<unsigned>(round));
        const std::uint32_t want = zlib_icrc(l3, 5);
        const std::size_t head = 40 + rng() % 20;
        std::uint32_t crc = icrc_compute(std::span<const std::uint8_t>(l3.data(), head), false);
        std::uint32_t by_isal = crc;
        for (std::size_t at = head; at < len;) {
            const std::size_t piece =
                std::min<std::size_t>(len - at, rng() % 2 ? rng() % 64 : rng() % 2048);
            const std::span<const std::uint8_t> more(l3.data() + at, piece);
            crc = icrc_continue(crc, more);
            by_isal = detail::icrc_continue_isal(by_isal, more);
            at += piece;
        }
        ASSERT_EQ(crc, want) << "round " << round << " length " << len;
        ASSERT_EQ(by_isal, want) << "ISA-L, round " << round << " length " << len;
    }
}

// The 512-bit route reads a packet in 64-byte blocks that start before it (its stream is laid out
// to end on a block boundary): masked loads, which read nothing and cannot fault where the mask is
// off; the 256-bit fold past the head reads whole 32-byte pieces. A packet at the very start of a
// page after an unmapped one, and at the very end of a page before an unmapped one, every length
// up to a page, through icrc_compute, the 256-bit route and icrc_continue: no fault, and the ICRC
// of the bytes given.
TEST(Icrc, ReadsNothingOutsideThePacket) {
    const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    void* map = mmap(nullptr, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(map, MAP_FAILED);
    auto* base = static_cast<std::uint8_t*>(map);
    ASSERT_EQ(mprotect(base, page, PROT_NONE), 0);
    ASSERT_EQ(mprotect(base + 2 * page, page, PROT_NONE), 0);
    std::uint8_t* const first = base + page;
    for (std::size_t len = 20 + 8 + 12; len <= page; ++len) {
        Bytes l3(len);
        for (std::size_t i = 0; i < len; ++i)
            l3[i] = static_cast<std::uint8_t>(i * 37 + len);
        l3[0] = 0x45;
        const std::uint32_t want = detail::icrc_compute_isal(l3, false);
        for (std::uint8_t* at : {first, first + page - len}) {
            std::memcpy(at, l3.data(), len);
            const std::span<const std::uint8_t> pkt(at, len);
            const std::string where = "length " + std::to_string(len) +
                                      (at == first ? " at a page's start" : " at a page's end");
            ASSERT_EQ(icrc_compute(pkt, false), want) << where;
            ASSERT_EQ(detail::icrc_compute_fold256(pkt, false), want) << "256-bit route, " << where;
            ASSERT_EQ(icrc_continue(icrc_compute(pkt.first(40), false), pkt.subspan(40)), want)
                << "icrc_continue, " << where;
        }
    }
    munmap(map, 3 * page);
}

#if defined(__x86_64__)
/** XGETBV(1): the XSAVE state components not in their initial state (bit 2: the upper halves of
 *  the YMM registers; bit 6: the upper halves of ZMM0-15), or 0 when the CPU cannot tell. */
std::uint64_t vector_state_in_use() {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid_count(0xd, 1, &a, &b, &c, &d) || (a & (1u << 2)) == 0) return 0;
    unsigned lo = 0, hi = 0;
    asm volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(1));
    return (std::uint64_t{hi} << 32) | lo;
}

// ISA-L's AVX-512 CRC returns with the vector registers' upper halves dirty; droce's own code is
// SSE, and ran in the SSE/AVX transition state after every ICRC until something cleared it (an
// ICRC of a small frame cost 120 ns instead of 15; 64 KiB WRITEs ran at 56 instead of 92 Gb/s in
// bench/engine). After icrc_compute and icrc_continue, both lengths routes, the state is clean.
TEST(Icrc, LeavesTheUpperVectorStateClean) {
    if (!__builtin_cpu_supports("avx") || !__builtin_cpu_supports("xsave"))
        GTEST_SKIP() << "no AVX: nothing can be left dirty";
    constexpr std::uint64_t kUpperHalves = (1u << 2) | (1u << 6);
    for (const std::size_t len : {std::size_t{100}, std::size_t{4096}}) {
        Bytes l3(len, 0x5a);
        l3[0] = 0x45;
        EXPECT_NE(detail::icrc_compute_fold128(l3, false), 0u);
        EXPECT_EQ(vector_state_in_use() & kUpperHalves, 0u) << "128-bit fold, length " << len;
        EXPECT_NE(detail::icrc_compute_fold256(l3, false), 0u);
        EXPECT_EQ(vector_state_in_use() & kUpperHalves, 0u) << "256-bit fold, length " << len;
        std::uint32_t crc = icrc_compute(l3, false);
        const std::uint64_t after_compute = vector_state_in_use();
        crc = icrc_continue(crc, l3);
        const std::uint64_t after_continue = vector_state_in_use();
        EXPECT_NE(crc, 0u);
        EXPECT_EQ(after_compute & kUpperHalves, 0u) << "icrc_compute, length " << len;
        EXPECT_EQ(after_continue & kUpperHalves, 0u) << "icrc_continue, length " << len;
    }
}
#endif

} // namespace
} // namespace droce::wire::test
