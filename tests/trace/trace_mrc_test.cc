/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * droce-trace on MRC packets (wire format v1, lib/wire/mrc.h) built here with wire::build_frame():
 * every MRC opcode is decoded (path and UDP source port, plane when the interface is known, MDETH,
 * SACK ranges, NACK reasons, probes, port status) and explained, in text, JSON and --explain.
 */
#include <cstring>

#include "mrc_decode.h"
#include "trace_test_util.h"

namespace droce::trace::test {
namespace {

using wire::Opcode;
using wire::PacketFields;

#define EXPECT_CONTAINS(haystack, needle)                                                          \
    EXPECT_TRUE(contains((haystack), (needle))) << "expected «" << (needle) << "» in:\n"          \
                                                << (haystack)

/** An MRC path: test_path() with UDP source port ev_base 0xc000 + @p path. */
wire::PathHeaders mrc_path(std::uint16_t path, bool ipv6 = false) {
    wire::PathHeaders p = test_path(ipv6);
    p.udp_sport = static_cast<std::uint16_t>(0xc000 + path);
    return p;
}

PacketFields data_fields(Opcode op, std::uint16_t path) {
    PacketFields f;
    f.opcode = op;
    f.dest_qp = 0x000123;
    f.psn = wire::Psn(1200);
    f.va = 0x00007f0000011000;
    f.rkey = 0x00abcdef;
    f.dma_len = 1024;
    f.mrc_flags = wire::kMdethLast | wire::kMdethRetransmit;
    f.mrc_path = path;
    f.mrc_msn = 7;
    f.mrc_msg_offset = 4096;
    f.mrc_msg_length = 5120;
    f.imm = 0x11223344;
    return f;
}

PacketFields ctl_fields(Opcode op, const wire::MrcCtlFields& c, std::uint32_t psn = 0) {
    PacketFields f;
    f.opcode = op;
    f.dest_qp = 0x000456;
    f.psn = wire::Psn(psn);
    f.mrc_ctl = &c;
    return f;
}

/** Formats @p bytes as seen on @p interface. */
FrameOutput format_on(const std::vector<std::uint8_t>& bytes, std::uint32_t interface) {
    RawFrame raw = raw_of(bytes);
    raw.interface = interface;
    return format_all(raw);
}

/** Sets PSN @p psn in @p c's bitmap (relative to c.sack_base). */
void sack(wire::MrcCtlFields& c, std::uint32_t first, std::uint32_t last) {
    for (std::uint32_t p = first; p <= last; ++p) {
        const std::uint32_t i = (p - c.sack_base) & wire::Psn::kMask;
        c.bitmap[i / 64] |= 1ull << (i % 64);
    }
}

// ---------------------------------------------------------------------------------------------
// The helpers of mrc_decode.h

TEST(TraceMrcDecode, FlagNamesReasonsAndPlaneLists) {
    EXPECT_EQ(mdeth_flags_text(0), "none");
    EXPECT_EQ(mdeth_flags_text(wire::kMdethFirst | wire::kMdethLast), "first,last");
    EXPECT_EQ(mdeth_flags_text(0x0c), "retransmit,0x08");
    EXPECT_EQ(seth_flags_text(wire::kSethEcnEcho), "ecn_echo");
    EXPECT_EQ(seth_flags_text(0), "none");
    EXPECT_STREQ(nack_reason_name(1), "trimmed");
    EXPECT_STREQ(nack_reason_name(2), "mpr_exceeded");
    EXPECT_STREQ(nack_reason_name(3), "wimm_exceeded");
    EXPECT_STREQ(nack_reason_name(4), "remote_access");
    EXPECT_STREQ(nack_reason_name(5), "invalid_request");
    EXPECT_STREQ(nack_reason_name(0), "unknown");
    EXPECT_STREQ(endpoint_op_name(1), "port_status");
    EXPECT_STREQ(endpoint_op_name(9), "unknown");
    EXPECT_EQ(plane_list(0), "none");
    EXPECT_EQ(plane_list(0x01), "0");
    EXPECT_EQ(plane_list(0x03), "0-1");
    EXPECT_EQ(plane_list(0xb5), "0,2,4-5,7");
    EXPECT_EQ(plane_list(0xff), "0-7");
}

TEST(TraceMrcDecode, SackRangesHolesAndTheWrap) {
    wire::Seth h{};
    h.cum_psn.set(1200);
    h.sack_base.set(1152);
    EXPECT_TRUE(sack_ranges(h).empty());
    EXPECT_EQ(format_ranges(sack_ranges(h)), "none");
    // 1152..1199 (before cum, all set as lib/mrc fills them), 1210..1263, 1300..1310, 1407.
    auto set = [&](std::uint32_t first, std::uint32_t last) {
        for (std::uint32_t p = first; p <= last; ++p) {
            const std::uint32_t i = p - 1152;
            h.bitmap[i / 64].set(h.bitmap[i / 64].get() | 1ull << (i % 64));
        }
    };
    set(1152, 1199);
    set(1210, 1263);
    set(1300, 1310);
    set(1407, 1407);
    EXPECT_EQ(format_ranges(sack_ranges(h)), "1152-1199,1210-1263,1300-1310,1407");
    EXPECT_EQ(format_ranges(ranges_from(sack_ranges(h), 1200)), "1210-1263,1300-1310,1407");
    EXPECT_EQ(format_ranges(ranges_from(sack_ranges(h), 1230)), "1230-1263,1300-1310,1407");
    EXPECT_EQ(format_ranges(sack_holes(h)), "1200-1209,1264-1299,1311-1406");
    EXPECT_EQ(sack_ranges(h)[1].count(), 54u);

    // Across the 24-bit wrap: base 0xffffc0, bits 60..67 = PSNs 0xfffffc..3.
    wire::Seth w{};
    w.sack_base.set(0xffffc0);
    w.cum_psn.set(0xfffff0);
    w.bitmap[0].set(0xfull << 60);
    w.bitmap[1].set(0xf);
    const std::vector<PsnRange> r = sack_ranges(w);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0], (PsnRange{0xfffffc, 3}));
    EXPECT_EQ(r[0].count(), 8u);
    EXPECT_EQ(format_ranges(sack_holes(w)), "16777200-16777211");
}

// ---------------------------------------------------------------------------------------------
// One test per opcode: text, JSON and explanation

TEST(TraceMrc, WriteShowsPathMdethAndPlane) {
    const std::vector<std::uint8_t> bytes =
        build(data_fields(Opcode::MRC_WRITE, 5), 1024, mrc_path(5));
    const FrameOutput f = format_on(bytes, 1);
    EXPECT_EQ(f.kind, FrameKind::roce) << f.text;
    EXPECT_EQ(f.text, "1  plane=1  10.0.0.1 > 10.0.0.2  udp 49157 > 4791  MRC_WRITE "
                      "dest_qp=0x000123 psn=1200 ack_req=0  RETH va=0x00007f0000011000 "
                      "r_key=0x00abcdef dma_length=1024  MDETH path=5 msn=7 msg_offset=4096 "
                      "msg_length=5120 flags=last,retransmit  payload=1024 pad=0  ICRC ok");
    EXPECT_EQ(f.json["opcode"], "MRC_WRITE");
    EXPECT_EQ(f.json["opcode_value"], 0xc0u);
    EXPECT_EQ(f.json["interface"], 1u);
    EXPECT_EQ(f.json["mrc"]["path"], 5u);
    EXPECT_EQ(f.json["mrc"]["udp_src_port"], 0xc005u);
    EXPECT_EQ(f.json["mrc"]["ev_base"], 0xc000u);
    EXPECT_EQ(f.json["mrc"]["plane"], 1u);
    EXPECT_EQ(f.json["mrc"]["trimmed"], false);
    const auto& m = f.json["mdeth"];
    EXPECT_EQ(m["version"], 1u);
    EXPECT_EQ(m["msn"], 7u);
    EXPECT_EQ(m["msg_offset"], 4096u);
    EXPECT_EQ(m["msg_length"], 5120u);
    EXPECT_EQ(m["first"], false);
    EXPECT_EQ(m["last"], true);
    EXPECT_EQ(m["retransmit"], true);
    EXPECT_EQ(m["flag_names"], "last,retransmit");

    EXPECT_CONTAINS(f.explained, "MRC WRITE: one packet of an RDMA WRITE");
    EXPECT_CONTAINS(f.explained, "MRC, droce's multipath reliable connection");
    EXPECT_CONTAINS(f.explained, "so this packet crossed plane 1.");
    EXPECT_CONTAINS(f.explained, "The MDETH names path 5, so this QP's ev_base is 0xc000 "
                                 "(the default).");
    EXPECT_CONTAINS(f.explained, "path      5: the requester's path (entropy value index) this "
                                 "packet left on, sent from UDP source port ev_base + 5 = 49157; "
                                 "it was seen on interface 1, so this path is on plane 1.");
    EXPECT_CONTAINS(f.explained, "msg_offset 4096: this packet's payload starts 4096 bytes into "
                                 "the message (bytes 4096-5119).");
    EXPECT_CONTAINS(f.explained, "the last packet of its message (by offset");
    EXPECT_CONTAINS(f.explained, "a retransmission of a PSN sent before");
    EXPECT_CONTAINS(f.explained, "dma_length 1024: bytes of this packet's payload, not of the "
                                 "message.");
    EXPECT_CONTAINS(f.explained, "psn       1200: this packet's place in the QP's one PSN "
                                 "sequence");
    EXPECT_CONTAINS(f.explained, "MRC does not use the bit");
    EXPECT_FALSE(contains(f.explained, "only the first packet of a message carries it"))
        << "RC's RETH sentence does not apply to MRC";
    EXPECT_FALSE(contains(f.explained, "kept fixed per QP")) << "RC's UDP sentence";
}

TEST(TraceMrc, WriteWithoutInterfaceDerivesNoPlane) {
    PacketFields p = data_fields(Opcode::MRC_WRITE, 2);
    p.mrc_flags = wire::kMdethFirst;
    p.mrc_msg_offset = 0;
    const FrameOutput f = format_bytes(build(p, 1024, mrc_path(2, true)));
    EXPECT_EQ(f.kind, FrameKind::roce) << f.text;
    EXPECT_EQ(f.text.rfind("1  fd00::1 > fd00::2  udp 49154 > 4791  MRC_WRITE", 0), 0u) << f.text;
    EXPECT_CONTAINS(f.text, "MDETH path=2 msn=7 msg_offset=0 msg_length=5120 flags=first  ");
    EXPECT_FALSE(f.json.contains("interface"));
    EXPECT_FALSE(f.json["mrc"].contains("plane"));
    EXPECT_FALSE(contains(f.explained, "crossed plane"));
    EXPECT_CONTAINS(f.explained, "path i runs on plane i mod (the QP's number of planes), which "
                                 "the capture does not tell.");
    EXPECT_CONTAINS(f.explained, "flags     first: the first packet of its message; a first "
                                 "transmission.");
}

TEST(TraceMrc, TrimmedWriteIsFlagged) {
    // A switch cut the payload to 64 bytes; RETH still says 1024. The ICRC is recomputed by the
    // trimming switch in real fabrics; here it is built that way.
    PacketFields p = data_fields(Opcode::MRC_WRITE, 3);
    const FrameOutput f = format_bytes(build(p, 64, mrc_path(3)));
    EXPECT_EQ(f.kind, FrameKind::roce) << f.text;
    EXPECT_CONTAINS(f.text, "dma_length=1024  MDETH path=3");
    EXPECT_CONTAINS(f.text, "payload=64 pad=0 trimmed=1  ICRC ok");
    EXPECT_EQ(f.json["mrc"]["trimmed"], true);
    EXPECT_CONTAINS(f.explained, "only 64 arrived: a switch trimmed this packet under "
                                 "congestion, so the responder answers NACK trimmed");
}

TEST(TraceMrc, WriteLastWithImmediate) {
    PacketFields p = data_fields(Opcode::MRC_WRITE_LAST_WITH_IMMEDIATE, 0x81);
    p.solicited = true;
    p.mrc_flags = wire::kMdethFirst | wire::kMdethLast;
    p.mrc_msg_offset = 0;
    p.mrc_msg_length = 1024;
    const FrameOutput f = format_on(build(p, 1024, mrc_path(0x81)), 0);
    EXPECT_EQ(f.kind, FrameKind::roce) << f.text;
    EXPECT_CONTAINS(f.text, "1  plane=0  10.0.0.1 > 10.0.0.2  udp 49281 > 4791  "
                            "MRC_WRITE_LAST_WITH_IMMEDIATE dest_qp=0x000123 psn=1200 ack_req=0 "
                            "se=1  RETH va=0x00007f0000011000 r_key=0x00abcdef dma_length=1024  "
                            "MDETH path=129 msn=7 msg_offset=0 msg_length=1024 flags=first,last  "
                            "ImmDt imm_data=0x11223344  payload=1024 pad=0  ICRC ok");
    EXPECT_EQ(f.json["imm_data"], 0x11223344u);
    EXPECT_EQ(f.json["mdeth"]["path"], 0x81u);
    EXPECT_CONTAINS(f.explained, "completes a pre-posted receive WQE at the responder only once "
                                 "every PSN up to this one has arrived");
    EXPECT_CONTAINS(f.explained, "the whole message is in this packet");
    EXPECT_CONTAINS(f.explained, "with at most max_wimm_dest such messages waiting");
}

TEST(TraceMrc, SackShowsRangesMissingPsnsEcnEchoAndPeerPlanes) {
    wire::MrcCtlFields c;
    c.flags = wire::kSethEcnEcho;
    c.path = 9;
    c.cum_psn = 1200;
    c.sack_base = 1152;
    c.mpr_dest = 16;
    c.port_mask = 0x0b;
    sack(c, 1152, 1199);
    sack(c, 1210, 1263);
    sack(c, 1300, 1310);
    const FrameOutput f = format_on(build(ctl_fields(Opcode::MRC_SACK, c), 0, mrc_path(12)), 0);
    EXPECT_EQ(f.kind, FrameKind::roce) << f.text;
    EXPECT_EQ(f.text, "1  plane=0  10.0.0.1 > 10.0.0.2  udp 49164 > 4791  MRC_SACK "
                      "dest_qp=0x000456 psn=0 ack_req=0  SETH path=9 cum_psn=1200 sack_base=1152 "
                      "mpr_dest=16 (2048 PSNs) port_mask=0x0b (planes up 0-1,3) flags=ecn_echo "
                      "sacked=1152-1199,1210-1263,1300-1310  ICRC ok");
    const auto& s = f.json["seth"];
    EXPECT_EQ(s["cum_psn"], 1200u);
    EXPECT_EQ(s["sack_base"], 1152u);
    EXPECT_EQ(s["ecn_echo"], true);
    EXPECT_EQ(s["mpr_dest_psns"], 2048u);
    EXPECT_EQ(s["planes_up"], nlohmann::ordered_json::parse("[0,1,3]"));
    EXPECT_EQ(s["sacked"], "1152-1199,1210-1263,1300-1310");
    EXPECT_EQ(s["sacked_past_cum"], "1210-1263,1300-1310");
    EXPECT_EQ(s["missing"], "1200-1209,1264-1299");
    EXPECT_EQ(s["bitmap"][0], "0xfc00ffffffffffff"); // 1152-1199 and 1210-1215
    EXPECT_EQ(s["bitmap"][1], "0x0000ffffffffffff"); // 1216-1263
    EXPECT_EQ(f.json["payload_length"], 0u);

    EXPECT_CONTAINS(f.explained, "MRC SACK: the responder's selective acknowledgement");
    EXPECT_CONTAINS(f.explained, "cum_psn   1200: every PSN before 1200 has arrived");
    EXPECT_CONTAINS(f.explained, "sack_base 1152: bit i of the bitmap stands for PSN 1152 + i, so "
                                 "this SACK covers PSNs 1152-1407.");
    EXPECT_CONTAINS(f.explained, "bitmap    sacked 1152-1199,1210-1263,1300-1310: the PSNs the "
                                 "bitmap reports received; past the cumulative PSN: "
                                 "1210-1263,1300-1310; still missing before them: "
                                 "1200-1209,1264-1299.");
    EXPECT_CONTAINS(f.explained, "(RACK)");
    EXPECT_CONTAINS(f.explained, "flags     ecn_echo: a data packet on path 9 arrived marked CE");
    EXPECT_CONTAINS(f.explained, "mpr_dest  16 x 128 = 2048 PSNs: the responder's MPR window");
    EXPECT_CONTAINS(f.explained, "port_mask 0x0b: planes 0-1,3 are up at the responder");
    EXPECT_CONTAINS(f.explained, "with the default ev_base 0xc000 this is its path 12.");
    EXPECT_CONTAINS(f.explained, "psn       0: not used by this MRC control packet");
}

TEST(TraceMrc, SackInOrderHasNothingPastTheCumulativePsn) {
    wire::MrcCtlFields c;
    c.path = 1;
    c.cum_psn = 0x000130;
    c.sack_base = 0x000100;
    c.mpr_dest = 32;
    c.port_mask = 0x01;
    sack(c, 0x100, 0x12f);
    const FrameOutput f = format_bytes(build(ctl_fields(Opcode::MRC_SACK, c), 0, mrc_path(1)));
    EXPECT_CONTAINS(f.text, "SETH path=1 cum_psn=304 sack_base=256 mpr_dest=32 (4096 PSNs) "
                            "port_mask=0x01 (planes up 0) sacked=256-303  ICRC ok");
    EXPECT_FALSE(contains(f.text, "flags=")) << "no flag set";
    EXPECT_EQ(f.json["seth"]["missing"], "none");
    EXPECT_CONTAINS(f.explained, "none past the cumulative PSN");
    EXPECT_CONTAINS(f.explained, "flags     none: no CE-marked packet since the last SACK.");
}

TEST(TraceMrc, NackReasonsInWords) {
    struct Case {
        wire::NackReason reason;
        const char* name;
        const char* sentence;
    };
    const Case cases[] = {
        {wire::NackReason::trimmed, "trimmed", "a switch cut the payload off under congestion"},
        {wire::NackReason::mpr_exceeded, "mpr_exceeded",
         "the PSN lies beyond the responder's MPR window"},
        {wire::NackReason::wimm_exceeded, "wimm_exceeded",
         "max_wimm_dest WRITE-with-immediate messages already wait"},
        {wire::NackReason::remote_access, "remote_access", "completes with REM_ACCESS_ERR"},
        {wire::NackReason::invalid_request, "invalid_request", "completes with REM_INV_REQ_ERR"},
    };
    for (const Case& k : cases) {
        wire::MrcCtlFields c;
        c.reason = static_cast<std::uint8_t>(k.reason);
        c.path = 6;
        c.nack_psn = 1234;
        c.cum_psn = 1200;
        const FrameOutput f =
            format_bytes(build(ctl_fields(Opcode::MRC_NACK, c, 1234), 0, mrc_path(4)));
        SCOPED_TRACE(f.text);
        EXPECT_EQ(f.kind, FrameKind::roce);
        EXPECT_CONTAINS(f.text, std::string("MRC_NACK dest_qp=0x000456 psn=1234 ack_req=0  NETH "
                                            "reason=") +
                                    k.name + " path=6 psn=1234 cum_psn=1200  ICRC ok");
        EXPECT_EQ(f.json["neth"]["reason_name"], k.name);
        EXPECT_EQ(f.json["neth"]["reason"], static_cast<unsigned>(k.reason));
        EXPECT_EQ(f.json["neth"]["psn"], 1234u);
        EXPECT_CONTAINS(f.explained, std::string("reason    ") + k.name + ": ");
        EXPECT_CONTAINS(f.explained, k.sentence);
        EXPECT_CONTAINS(f.explained, "psn       1234: the refused PSN, as in the NETH.");
        EXPECT_CONTAINS(f.explained, "MRC NACK: the responder refuses one PSN");
    }
    wire::MrcCtlFields c;
    c.reason = 77;
    const FrameOutput u = format_bytes(build(ctl_fields(Opcode::MRC_NACK, c), 0, mrc_path(4)));
    EXPECT_CONTAINS(u.text, "NETH reason=77 (unknown)");
    EXPECT_EQ(u.json["neth"]["reason_name"], "unknown");
    EXPECT_CONTAINS(u.explained, "77: a reason droce does not know");
}

TEST(TraceMrc, ProbeAndReply) {
    wire::MrcCtlFields c;
    c.path = 17;
    c.seq = 42;
    c.timestamp_ns = 1234567890123ull;
    const FrameOutput probe =
        format_on(build(ctl_fields(Opcode::MRC_PROBE, c), 0, mrc_path(17)), 1);
    EXPECT_EQ(probe.text, "1  plane=1  10.0.0.1 > 10.0.0.2  udp 49169 > 4791  MRC_PROBE "
                          "dest_qp=0x000456 psn=0 ack_req=0  PETH path=17 seq=42 "
                          "timestamp_ns=1234567890123  ICRC ok");
    EXPECT_EQ(probe.json["peth"]["path"], 17u);
    EXPECT_EQ(probe.json["peth"]["seq"], 42u);
    EXPECT_EQ(probe.json["peth"]["timestamp_ns"], "0x0000011f71fb04cb");
    EXPECT_CONTAINS(probe.explained, "MRC PROBE: the requester tests a path it marked ASSUMED_BAD");
    EXPECT_CONTAINS(probe.explained, "path      17: the prober's path under test; the probe is "
                                     "sent on it (UDP source port ev_base + 17).");
    EXPECT_CONTAINS(probe.explained, "seq       42: the prober's probe number");

    const FrameOutput reply =
        format_bytes(build(ctl_fields(Opcode::MRC_PROBE_REPLY, c), 0, mrc_path(3)));
    EXPECT_CONTAINS(reply.text, "MRC_PROBE_REPLY dest_qp=0x000456 psn=0 ack_req=0  PETH path=17 "
                                "seq=42 timestamp_ns=1234567890123  ICRC ok");
    EXPECT_CONTAINS(reply.explained, "MRC PROBE REPLY: the responder's echo of a probe");
    EXPECT_CONTAINS(reply.explained, "the prober's clock now minus this is the path's round trip "
                                     "time.");
    EXPECT_CONTAINS(reply.explained, "the reply itself travels on a path of the responder's");
}

TEST(TraceMrc, PortStatusListsPlanesUpAndDown) {
    wire::MrcCtlFields c;
    c.op = static_cast<std::uint8_t>(wire::EndpointOp::port_status);
    c.port_mask = 0x05;
    c.seq = 9;
    const FrameOutput f =
        format_on(build(ctl_fields(Opcode::MRC_PORT_STATUS, c), 0, mrc_path(2, true)), 2);
    EXPECT_EQ(f.text, "1  plane=2  fd00::1 > fd00::2  udp 49154 > 4791  MRC_PORT_STATUS "
                      "dest_qp=0x000456 psn=0 ack_req=0  EPETH op=port_status port_mask=0x05 "
                      "(planes up 0,2; down 1,3-7) seq=9  ICRC ok");
    EXPECT_EQ(f.json["epeth"]["op_name"], "port_status");
    EXPECT_EQ(f.json["epeth"]["planes_up"], nlohmann::ordered_json::parse("[0,2]"));
    EXPECT_EQ(f.json["epeth"]["seq"], 9u);
    EXPECT_CONTAINS(f.explained, "MRC PORT STATUS: the sender tells its peer which of its ports");
    EXPECT_CONTAINS(f.explained, "port_mask 0x05: planes up at the sender: 0,2; down or absent: "
                                 "1,3-7");
    EXPECT_CONTAINS(f.explained, "the receiver applies only one newer than the last it applied");

    c.op = 7;
    const FrameOutput u =
        format_bytes(build(ctl_fields(Opcode::MRC_PORT_STATUS, c), 0, mrc_path(2)));
    EXPECT_CONTAINS(u.text, "EPETH op=7 (unknown)");
    EXPECT_CONTAINS(u.explained, "7: an operation droce does not know; ignored.");
}

TEST(TraceMrc, UnknownVersionIsShownAndExplained) {
    std::vector<std::uint8_t> bytes = build(data_fields(Opcode::MRC_WRITE, 1), 8, mrc_path(1));
    bytes[14 + 20 + 8 + 12 + 16] = 2; // MDETH version; the ICRC no longer matches
    const FrameOutput f = format_bytes(bytes);
    EXPECT_EQ(f.reason, wire::RejectReason::bad_icrc);
    EXPECT_CONTAINS(f.text, "MDETH version=2 path=1");
    EXPECT_CONTAINS(f.explained, "2: not a version droce knows (it speaks 1)");
    EXPECT_EQ(f.json["mdeth"]["version"], 2u);
}

TEST(TraceMrc, OtherFramesShowTheirInterface) {
    PacketFields p;
    p.opcode = Opcode::RC_SEND_ONLY;
    const FrameOutput f = format_on(build(p, 4), 3);
    EXPECT_EQ(f.text.rfind("1  if=3  10.0.0.1 > 10.0.0.2", 0), 0u) << f.text;
    EXPECT_EQ(f.json["interface"], 3u);
    EXPECT_FALSE(f.json.contains("mrc"));
    EXPECT_CONTAINS(f.explained, "interface   3: the frame was seen on port 3 of its device");
}

TEST(TraceMrc, MalformedMrcPacketsAreRejectedButShown) {
    wire::MrcCtlFields c;
    c.port_mask = 1;
    std::vector<std::uint8_t> bytes = build(ctl_fields(Opcode::MRC_PORT_STATUS, c), 0);
    // Relabel an 8-byte EPETH packet as a NACK (12-byte NETH): too short for its headers.
    bytes[14 + 20 + 8] = static_cast<std::uint8_t>(Opcode::MRC_NACK);
    const FrameOutput f = format_bytes(bytes);
    EXPECT_EQ(f.kind, FrameKind::rejected);
    EXPECT_EQ(f.reason, wire::RejectReason::length_mismatch);
    EXPECT_CONTAINS(f.text, "MRC_NACK dest_qp=0x000456 psn=0 ack_req=0  rejected length_mismatch");
    EXPECT_FALSE(f.json.contains("neth"));

    // A SACK with four payload bytes (IP and UDP lengths made to match): rejected, SETH shown.
    std::vector<std::uint8_t> sack_frame = build(ctl_fields(Opcode::MRC_SACK, c), 0);
    sack_frame.insert(sack_frame.end() - 4, 4, 0xab);
    const std::size_t ip_len = sack_frame.size() - 14;
    sack_frame[14 + 2] = static_cast<std::uint8_t>(ip_len >> 8);
    sack_frame[14 + 3] = static_cast<std::uint8_t>(ip_len);
    sack_frame[14 + 20 + 4] = static_cast<std::uint8_t>((ip_len - 20) >> 8);
    sack_frame[14 + 20 + 5] = static_cast<std::uint8_t>(ip_len - 20);
    const FrameOutput s = format_bytes(sack_frame);
    EXPECT_EQ(s.reason, wire::RejectReason::length_mismatch) << s.text;
    EXPECT_CONTAINS(s.text, "MRC_SACK dest_qp=0x000456 psn=0 ack_req=0  SETH path=0");
    EXPECT_CONTAINS(s.text, "rejected length_mismatch (packet too short for its extension "
                            "headers, or payload on an opcode without one)");
}

TEST(TraceMrc, EveryMrcOpcodeIsDecodedAndExplained) {
    const wire::MrcCtlFields c;
    for (Opcode op : wire::kAllOpcodes) {
        if (wire::transport_of(op) != wire::Transport::mrc) continue;
        const bool data = wire::opcode_info(op).is(wire::OpFlags::mdeth);
        const PacketFields p = data ? data_fields(op, 1) : ctl_fields(op, c);
        const FrameOutput f = format_bytes(build(p, data ? 1024 : 0, mrc_path(1)));
        SCOPED_TRACE(f.text);
        EXPECT_EQ(f.kind, FrameKind::roce);
        EXPECT_EQ(f.json["opcode"], std::string(wire::to_string(op)));
        EXPECT_TRUE(f.json.contains("mrc"));
        const char* hdr = data                            ? "MDETH"
                          : op == Opcode::MRC_SACK        ? "SETH"
                          : op == Opcode::MRC_NACK        ? "NETH"
                          : op == Opcode::MRC_PORT_STATUS ? "EPETH"
                                                          : "PETH";
        EXPECT_CONTAINS(f.text, std::string("  ") + hdr + " ");
        EXPECT_CONTAINS(f.explained, std::string("\n    ") + hdr + " ");
        EXPECT_CONTAINS(f.explained, "MRC, droce's multipath reliable connection");
        EXPECT_CONTAINS(f.explained, "version   1: droce's MRC wire format v1.");
        EXPECT_FALSE(contains(describe_opcode(op), "no sentence"));
    }
}

// Prefixes and single-byte corruptions of MRC frames format without reading outside them.
TEST(TraceMrc, PrefixesAndCorruptionsFormat) {
    wire::MrcCtlFields c;
    c.port_mask = 3;
    sack(c, 0, 100);
    std::vector<std::vector<std::uint8_t>> frames;
    frames.push_back(build(data_fields(Opcode::MRC_WRITE_LAST_WITH_IMMEDIATE, 4), 13, mrc_path(4)));
    frames.push_back(build(ctl_fields(Opcode::MRC_SACK, c), 0, mrc_path(1, true)));
    frames.push_back(build(ctl_fields(Opcode::MRC_NACK, c), 0, mrc_path(1)));
    frames.push_back(build(ctl_fields(Opcode::MRC_PORT_STATUS, c), 0, mrc_path(1)));
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
        for (std::size_t i = 0; i < full.size(); ++i) {
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
