/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * droce-trace on the MRC packets two real engines exchange: an MRC QP pair over the sim fabric's
 * four planes (tests/mrc/mrc_pair.h), every transmitted frame taken at its port with the port
 * (PktBuf::port, the plane) as the frame's interface. One data packet is dropped once, so that
 * SACKs report a hole and the packet comes back as a retransmission.
 */
#include <map>
#include <set>

#include "mrc_decode.h"
#include "mrc_pair.h"
#include "trace_test_util.h"

namespace droce::trace::test {
namespace {

using wire::Opcode;

struct Captured {
    std::vector<std::uint8_t> bytes;
    std::uint32_t port = 0;
    int device = 0;
};

#define EXPECT_CONTAINS(haystack, needle)                                                          \
    EXPECT_TRUE(contains((haystack), (needle))) << "expected «" << (needle) << "» in:\n"          \
                                                << (haystack)

TEST(TraceMrcLive, EveryFrameOfATransferDecodesWithItsPathAndPlane) {
    droce::test::MrcOptions o;
    droce::test::MrcPair pair(7, o);
    std::vector<Captured> frames;
    constexpr std::uint32_t kDropPsn = 105; // the sixth data packet (sq_psn 100)
    bool dropped = false;
    for (int e = 0; e < 2; ++e) {
        for (std::uint32_t p = 0; p < o.planes; ++p) {
            pair.taps[e][p]->on_tx = [&frames, &dropped, e, p](PktBuf& b) {
                EXPECT_EQ(b.port, p);
                const auto f = b.frame();
                wire::ParsedFrame pf;
                if (e == 0 && !dropped && wire::parse_frame(f, pf) == wire::RejectReason::ok &&
                    pf.mdeth() != nullptr && pf.bth->psn().value() == kDropPsn) {
                    dropped = true;
                    return false; // lost on the wire: not captured either
                }
                frames.push_back({std::vector<std::uint8_t>(f.begin(), f.end()), b.port, e});
                return true;
            };
        }
    }
    pair.connect();
    auto src = pair.buffer(0, 256 * 1024, 3);
    auto dst = pair.buffer(1, 256 * 1024, 0);
    ASSERT_EQ(pair.post_recv(1, 77), 0);
    ASSERT_EQ(pair.write(0, *src, *dst, 0, src->bytes.size(), 1, true, 0xabcd0123), 0);
    ASSERT_TRUE(pair.run_until([&] { return !pair.send_cqes[0].empty(); })) << pair.dump();
    pair.run_for(100'000); // the last SACKs
    ASSERT_EQ(pair.send_errors(0), 0u);
    ASSERT_EQ(src->bytes, dst->bytes);
    ASSERT_TRUE(dropped);

    std::map<std::string, std::size_t> opcodes;
    std::set<std::uint32_t> data_planes;
    std::size_t data = 0, retransmits = 0, sacks_with_hole = 0;
    std::string a_sack_line, a_retransmit_line;
    for (const Captured& c : frames) {
        RawFrame raw = raw_of(c.bytes);
        raw.interface = c.port;
        const DecodedFrame d = decode_frame(raw);
        const std::string text = format_text(d);
        SCOPED_TRACE(text);
        if (d.kind == FrameKind::skipped) continue; // ARP / ND before the first packet
        ASSERT_EQ(d.kind, FrameKind::roce);
        ASSERT_TRUE(is_mrc(d));
        const wire::ParsedFrame& p = d.parsed;
        ++opcodes[std::string(wire::to_string(p.bth->opcode()))];
        EXPECT_EQ(text.rfind("1  plane=" + std::to_string(c.port) + "  ", 0), 0u);
        EXPECT_FALSE(format_explained(d).empty());
        // Every MRC packet leaves on a path of its sender: UDP source port 0xc000 + i, on plane
        // i mod 4.
        const std::uint16_t sport = p.udp->src_port.get();
        ASSERT_GE(sport, kDefaultEvBase);
        EXPECT_EQ((sport - kDefaultEvBase) % o.planes, c.port) << "path on the wrong plane";
        if (const wire::Mdeth* m = p.mdeth()) {
            ++data;
            EXPECT_EQ(c.device, 0);
            EXPECT_EQ(sport, kDefaultEvBase + m->path.get());
            EXPECT_EQ(m->path.get() % o.planes, c.port);
            EXPECT_CONTAINS(text, "MDETH path=" + std::to_string(m->path.get()) + " ");
            const nlohmann::ordered_json j = format_json(d);
            EXPECT_EQ(j["mrc"]["plane"], c.port);
            EXPECT_EQ(j["mrc"]["ev_base"], kDefaultEvBase);
            EXPECT_EQ(j["mrc"]["trimmed"], false);
            data_planes.insert(c.port);
            if (m->flags & wire::kMdethRetransmit) {
                ++retransmits;
                EXPECT_EQ(p.bth->psn().value(), kDropPsn);
                EXPECT_CONTAINS(text, "flags=retransmit");
                a_retransmit_line = text;
            }
        }
        if (const wire::Seth* s = p.seth()) {
            EXPECT_EQ(c.device, 1);
            EXPECT_CONTAINS(text, "port_mask=0x0f (planes up 0-3)");
            EXPECT_CONTAINS(text, " sacked=");
            if (!sack_holes(*s).empty()) {
                ++sacks_with_hole;
                EXPECT_EQ(format_ranges(sack_holes(*s)).rfind(std::to_string(kDropPsn), 0), 0u)
                    << "the hole starts at the dropped PSN";
                EXPECT_EQ(s->cum_psn.get(), kDropPsn);
                a_sack_line = text;
            }
        }
    }
    EXPECT_GT(data, 60u) << "256 KiB in 4 KiB packets, plus the retransmission";
    EXPECT_EQ(data_planes.size(), 4u) << "data sprayed over every plane";
    EXPECT_EQ(retransmits, 1u);
    EXPECT_GE(sacks_with_hole, 1u);
    EXPECT_GE(opcodes["MRC_WRITE_LAST_WITH_IMMEDIATE"], 1u);
    EXPECT_GE(opcodes["MRC_SACK"], 1u);
    // Two real lines, in the XML report (--gtest_output=xml) for whoever wants to read them.
    RecordProperty("sack_with_hole", a_sack_line);
    RecordProperty("retransmission", a_retransmit_line);
}

} // namespace
} // namespace droce::trace::test
