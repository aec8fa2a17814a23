/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * droce-trace's formatter over the real captures (tests/data/captures, see its README): every
 * frame of every file is formatted as text, explained text and JSON, and concrete values are
 * compared with what tshark 4.0 decodes from the same frames, e.g.
 *   tshark -r FILE -T fields -e infiniband.bth.opcode -e infiniband.bth.destqp -e
 * infiniband.bth.psn -e infiniband.bth.a -e infiniband.bth.padcnt -e infiniband.reth.va -e
 * infiniband.reth.r_key -e infiniband.reth.dmalen -e infiniband.aeth.syndrome -e
 * infiniband.aeth.msn -e infiniband.deth.q_key -e infiniband.deth.srcqp -e infiniband.immdt -e
 * udp.length (the oferby file needs -d udp.port==69,infiniband -d udp.port==72,infiniband).
 * Wireshark prints the ICRC as the four wire bytes read big-endian; droce's value is the CRC
 * itself, so 0x403964ee in tshark is icrc_value 0xee643940 with icrc_wire_bytes "403964ee".
 */
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <string>

#include "trace_test_util.h"

namespace droce::trace::test {
namespace {

constexpr const char* kMontyTest = "montybeatnik_rdma-roce-lab_test.pcap";
constexpr const char* kMontyEcn = "montybeatnik_rdma-roce-lab_roce_capture_read-write-ecn.pcap";
constexpr const char* kOferby = "oferby_proxy_roce.pcap";
constexpr const char* kScapy = "scapy_roce_uts_icrc_vectors.pcap";
constexpr const char* kErf = "srinivaskoritala_rdma-softroce-demo_infiniband_erf.pcap";
constexpr const char* kDroceMrc = "droce_mrc_plane_down_loss.pcapng";

/** Frame @p index (1-based) of @p frames; fails the test when it is missing. */
const FrameOutput& frame(const std::vector<FrameOutput>& frames, std::size_t index) {
    static const FrameOutput kNone;
    if (index == 0 || index > frames.size()) {
        ADD_FAILURE() << "no frame " << index << " (capture has " << frames.size() << ")";
        return kNone;
    }
    return frames[index - 1];
}

#define EXPECT_CONTAINS(haystack, needle)                                                          \
    EXPECT_TRUE(contains((haystack), (needle))) << "expected «" << (needle) << "» in:\n"          \
                                                << (haystack)

struct Counts {
    int roce = 0;
    int skipped = 0;
    int cut = 0; ///< rejected because the snap length cut them
};

// Per file: accepted RoCEv2 frames, skipped frames and frames cut by the snap length (captures
// README, tshark). No other frame is rejected: every whole RoCEv2 frame has a good ICRC.
const std::map<std::string, Counts> kExpectedCounts = {
    {kMontyTest, {12, 4}}, // 4 ARP
    {kMontyEcn, {12, 0}},
    {kOferby, {105, 18}}, // 4 ICMPv6, 10 TCP, 4 ARP
    {kScapy, {3, 2}},     // 2 RoCE v1
    {kErf, {0, 43}},      // link type ERF
    // droce's live capture (tests/data/captures/README.md): 2209 data packets cut at 112 bytes;
    // SACKs, port status, probes whole.
    {kDroceMrc, {2025, 0, 2209}},
};

TEST(TraceCaptures, EveryFrameOfEveryCaptureFormats) {
    const std::filesystem::path dir = captures_dir();
    ASSERT_FALSE(dir.empty()) << "DROCE_CAPTURES_DIR is not set";
    ASSERT_TRUE(std::filesystem::is_directory(dir)) << dir;
    std::set<std::string> seen;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
        const std::string ext = entry.path().extension().string();
        if (ext != ".pcap" && ext != ".pcapng") continue;
        const std::string name = entry.path().filename().string();
        SCOPED_TRACE(name);
        seen.insert(name);
        const std::vector<FrameOutput> frames = read_capture(entry.path().string());
        ASSERT_FALSE(frames.empty());
        Counts counts;
        for (const FrameOutput& f : frames) {
            SCOPED_TRACE("frame " + std::to_string(f.index));
            const std::string prefix = std::to_string(f.index) + "  ";
            EXPECT_EQ(f.text.rfind(prefix, 0), 0u) << f.text;
            EXPECT_EQ(f.text.find('\n'), std::string::npos) << "one line per frame";
            // --explain is the line, then at least one indented line.
            EXPECT_EQ(f.explained.rfind(f.text + "\n    ", 0), 0u) << f.explained;
            EXPECT_EQ(f.json["index"], f.index);
            EXPECT_EQ(nlohmann::ordered_json::parse(f.json.dump()), f.json);
            EXPECT_EQ(
                f.json_explained.value("explain", nlohmann::ordered_json()).size(),
                static_cast<std::size_t>(std::count(f.explained.begin(), f.explained.end(), '\n')));
            switch (f.kind) {
            case FrameKind::roce:
                ++counts.roce;
                EXPECT_CONTAINS(f.text, "  ICRC ok");
                EXPECT_EQ(f.json["status"], "ok");
                EXPECT_EQ(f.json["icrc"], "ok");
                EXPECT_TRUE(f.json.contains("opcode"));
                EXPECT_TRUE(f.json.contains("payload_length"));
                break;
            case FrameKind::skipped:
                ++counts.skipped;
                EXPECT_CONTAINS(f.text, "  skipped (");
                EXPECT_EQ(f.json["status"], "skipped");
                EXPECT_FALSE(f.json.contains("icrc"));
                break;
            case FrameKind::rejected:
                // Only a frame the capture's snap length cut (droce's own capture keeps 112
                // bytes of its data packets) may be refused: its IP length exceeds what is there.
                if (f.text.find("[captured ") != std::string::npos &&
                    f.reason == wire::RejectReason::bad_ip_length) {
                    ++counts.cut;
                } else {
                    ADD_FAILURE() << "rejected: " << f.text;
                }
                break;
            }
        }
        const auto it = kExpectedCounts.find(name);
        if (it != kExpectedCounts.end()) {
            EXPECT_EQ(counts.roce, it->second.roce);
            EXPECT_EQ(counts.skipped, it->second.skipped);
            EXPECT_EQ(counts.cut, it->second.cut);
        }
    }
    for (const auto& [name, counts] : kExpectedCounts)
        EXPECT_TRUE(seen.count(name)) << "missing " << name;
}

TEST(TraceMonty, CmMadsAreUdSendsToQp1) {
    const auto frames = read_shared(kMontyTest);
    const FrameOutput& f = frame(frames, 1);
    EXPECT_CONTAINS(f.text, "192.168.2.25 > 192.168.2.24  udp 55410 > 4791  UD_SEND_ONLY "
                            "dest_qp=0x000001 psn=82 ack_req=1");
    EXPECT_CONTAINS(f.text, "DETH q_key=0x80010000 src_qp=0x000001");
    EXPECT_CONTAINS(f.text, "payload=256 pad=0");
    EXPECT_EQ(f.json["deth"]["q_key"], 0x80010000u);
    EXPECT_EQ(f.json["deth"]["src_qp"], 1u);
    EXPECT_EQ(f.json["payload_length"], 256u);
    EXPECT_CONTAINS(f.explained, "QP 1 is the General Services Interface");
    EXPECT_CONTAINS(f.explained, "0x80010000 is the well-known Q_Key of QP 1");
}

TEST(TraceMonty, RdmaWriteOnly) {
    const auto frames = read_shared(kMontyTest);
    const FrameOutput& f = frame(frames, 4);
    EXPECT_EQ(
        f.text,
        "4  192.168.2.25 > 192.168.2.24  udp 62017 > 4791  RC_RDMA_WRITE_ONLY dest_qp=0x000011 "
        "psn=12726936 ack_req=1  RETH va=0x0000aaab26b58000 r_key=0x00000220 dma_length=18  "
        "payload=18 pad=2  ICRC ok");
    const auto& j = f.json;
    EXPECT_EQ(j["opcode"], "RC_RDMA_WRITE_ONLY");
    EXPECT_EQ(j["opcode_value"], 0x0au);
    EXPECT_EQ(j["dest_qp"], 0x11u);
    EXPECT_EQ(j["psn"], 12726936u);
    EXPECT_EQ(j["ack_req"], true);
    EXPECT_EQ(j["pad_count"], 2u);
    EXPECT_EQ(j["reth"]["va"], "0x0000aaab26b58000");
    EXPECT_EQ(j["reth"]["r_key"], 0x220u);
    EXPECT_EQ(j["reth"]["dma_length"], 18u);
    EXPECT_EQ(j["payload_length"], 18u);
    EXPECT_EQ(j["icrc"], "ok");
    EXPECT_EQ(j["icrc_value"], 0xee643940u);
    EXPECT_EQ(j["icrc_wire_bytes"], "403964ee");
    EXPECT_EQ(j["ip"]["src"], "192.168.2.25");
    EXPECT_EQ(j["udp"]["src_port"], 62017u);
    EXPECT_EQ(j["udp"]["dst_port"], 4791u);
    EXPECT_CONTAINS(f.explained,
                    "RDMA WRITE: the payload is placed directly in the responder's memory");
    EXPECT_CONTAINS(f.explained,
                    "ack_req   set: the requester asks the responder to acknowledge now");
    EXPECT_CONTAINS(f.explained, "pad_count 2: 2 zero bytes follow the 18-byte payload");
    EXPECT_CONTAINS(f.explained, "remote write access");
    EXPECT_CONTAINS(f.explained, "(bytes 40 39 64 ee on the wire) matches");
}

TEST(TraceMonty, AckWithCreditsNotInUse) {
    const auto frames = read_shared(kMontyTest);
    const FrameOutput& f = frame(frames, 5);
    EXPECT_CONTAINS(f.text, "RC_ACKNOWLEDGE dest_qp=0x000017 psn=12726936 ack_req=0  AETH "
                            "syndrome=0x1f (ACK credits not in use) msn=1  ICRC ok");
    EXPECT_FALSE(contains(f.text, "payload=")) << "an ACK carries no payload: " << f.text;
    const auto& aeth = f.json["aeth"];
    EXPECT_EQ(aeth["syndrome"], 0x1fu);
    EXPECT_EQ(aeth["msn"], 1u);
    EXPECT_EQ(aeth["kind"], "ACK");
    EXPECT_EQ(aeth["credit_count"], 31u);
    EXPECT_FALSE(aeth.contains("credits"));
    EXPECT_CONTAINS(f.explained,
                    "syndrome  0x1f: ACK; credit count 31 = end-to-end credits not in use.");
    EXPECT_CONTAINS(f.explained, "every request packet up to and including this PSN");
}

TEST(TraceMonty, ReadRequestAndItsResponses) {
    const auto frames = read_shared(kMontyTest);
    const FrameOutput& req = frame(frames, 6);
    EXPECT_CONTAINS(req.text, "RC_RDMA_READ_REQUEST dest_qp=0x000011 psn=12726937 ack_req=1  RETH "
                              "va=0x0000aaab26b58000 r_key=0x00000220 dma_length=4096  ICRC ok");
    EXPECT_EQ(req.json["reth"]["dma_length"], 4096u);
    EXPECT_CONTAINS(req.explained, "remote read access");

    // 4096 bytes at path MTU 1024: FIRST, MIDDLE, MIDDLE, LAST with PSNs following the request's.
    const char* names[] = {"RC_RDMA_READ_RESPONSE_FIRST", "RC_RDMA_READ_RESPONSE_MIDDLE",
                           "RC_RDMA_READ_RESPONSE_MIDDLE", "RC_RDMA_READ_RESPONSE_LAST"};
    std::uint64_t total = 0;
    for (std::size_t i = 0; i < 4; ++i) {
        const FrameOutput& f = frame(frames, 7 + i);
        SCOPED_TRACE(f.text);
        EXPECT_EQ(f.json["opcode"], names[i]);
        EXPECT_EQ(f.json["dest_qp"], 0x17u);
        EXPECT_EQ(f.json["psn"], 12726937u + i);
        EXPECT_EQ(f.json["payload_length"], 1024u);
        EXPECT_EQ(f.json["icrc"], "ok");
        const bool has_aeth = i == 0 || i == 3; // First and Last carry an AETH, Middle does not
        EXPECT_EQ(f.json.contains("aeth"), has_aeth);
        if (has_aeth) {
            EXPECT_EQ(f.json["aeth"]["syndrome"], 0x1fu);
            EXPECT_EQ(f.json["aeth"]["msn"], 2u);
            EXPECT_CONTAINS(f.text, "AETH syndrome=0x1f (ACK credits not in use) msn=2");
        }
        EXPECT_CONTAINS(f.text, std::string(names[i]) +
                                    " dest_qp=0x000017 psn=" + std::to_string(12726937 + i));
        EXPECT_CONTAINS(f.explained,
                        "READ responses are numbered on from the PSN of their READ request");
        total += f.json["payload_length"].get<std::uint64_t>();
    }
    EXPECT_EQ(total, 4096u);
}

TEST(TraceMonty, ArpIsSkipped) {
    const auto frames = read_shared(kMontyTest);
    for (std::size_t i = 12; i <= 15; ++i) {
        const FrameOutput& f = frame(frames, i);
        EXPECT_EQ(f.text, std::to_string(i) + "  skipped (ARP)");
        EXPECT_EQ(f.json["skipped"], "ARP");
        EXPECT_EQ(f.json["eth"]["ether_type"], 0x0806u);
        EXPECT_CONTAINS(f.explained, "ARP maps an IPv4 address to a MAC address");
    }
}

TEST(TraceMontyEcn, SameFlowOtherRun) {
    const auto frames = read_shared(kMontyEcn);
    const FrameOutput& w = frame(frames, 4);
    EXPECT_CONTAINS(
        w.text, "RC_RDMA_WRITE_ONLY dest_qp=0x000011 psn=9209053 ack_req=1  RETH "
                "va=0x0000aaab09dd5000 r_key=0x000002d5 dma_length=18  payload=18 pad=2  ICRC ok");
    // Despite the file name, no frame carries an ECN mark.
    for (const FrameOutput& f : frames)
        EXPECT_EQ(f.json["ip"]["ecn"], 0u) << f.text;
}

TEST(TraceScapy, CnpFromConnectX4) {
    const auto frames = read_shared(kScapy);
    const FrameOutput& f = frame(frames, 1);
    EXPECT_EQ(f.text, "1  10.0.17.1 > 10.0.18.1 ecn=ECT(0)  udp 0 > 4791  CNP dest_qp=0x000118 "
                      "psn=0 ack_req=0 becn=1  ICRC ok");
    EXPECT_EQ(f.json["opcode"], "CNP");
    EXPECT_EQ(f.json["opcode_value"], 0x81u);
    EXPECT_EQ(f.json["dest_qp"], 0x118u);
    EXPECT_EQ(f.json["becn"], true);
    EXPECT_EQ(f.json["fecn"], false);
    EXPECT_EQ(f.json["p_key"], 0xffffu);
    EXPECT_EQ(f.json["cnp"]["reserved_bytes"], 16u);
    EXPECT_EQ(f.json["icrc_wire_bytes"], "82fd002a");
    EXPECT_CONTAINS(
        f.explained,
        "becn      set: backward explicit congestion notification; every CNP carries it.");
    EXPECT_CONTAINS(f.explained, "in a CNP this is the sender's QP that must slow down");
}

TEST(TraceScapy, UcSendOnlyOverIpv4AndIpv6) {
    const auto frames = read_shared(kScapy);
    const FrameOutput& v4 = frame(frames, 2);
    EXPECT_EQ(v4.text, "2  192.168.0.7 > 192.168.0.7 ecn=ECT(1)  udp 49152 > 4791  UC_SEND_ONLY "
                       "dest_qp=0x0000d3 psn=13571856 ack_req=0  payload=18 pad=2  ICRC ok");
    EXPECT_EQ(v4.json["icrc_wire_bytes"], "78f353f3");
    EXPECT_EQ(v4.json["icrc_value"], 0xf353f378u);
    EXPECT_EQ(v4.json["m"], true); // tshark: MigReq True
    const FrameOutput& v6 = frame(frames, 3);
    EXPECT_CONTAINS(v6.text, "3  2022::1023 > 2023::1024 ecn=ECT(0)  udp 49152 > 4791  "
                             "UC_SEND_ONLY dest_qp=0x0000d3 psn=13571856");
    EXPECT_EQ(v6.json["ip"]["version"], 6);
    EXPECT_EQ(v6.json["ip"]["flow_label"], 0x1faceu);
    EXPECT_EQ(v6.json["ip"]["dscp"].get<unsigned>() * 4 + v6.json["ip"]["ecn"].get<unsigned>(),
              226u);
    EXPECT_EQ(v6.json["icrc_wire_bytes"], "3e5b743b");
    EXPECT_CONTAINS(v6.explained, "UC, unreliable connection");
}

TEST(TraceScapy, RoceV1IsSkipped) {
    const auto frames = read_shared(kScapy);
    for (std::size_t i : {4u, 5u}) {
        const FrameOutput& f = frame(frames, i);
        EXPECT_EQ(f.text, std::to_string(i) + "  skipped (RoCE v1 (EtherType 0x8915))");
        EXPECT_CONTAINS(f.explained, "RoCE v1 carries the InfiniBand GRH straight over Ethernet");
    }
}

TEST(TraceOferby, SendsWithImmediateAndAcks) {
    const auto frames = read_shared(kOferby);
    const FrameOutput& only = frame(frames, 15);
    EXPECT_CONTAINS(
        only.text,
        "192.168.70.4 > 192.168.70.6 ecn=ECT(0)  udp 69 > 4791  RC_SEND_ONLY_WITH_IMMEDIATE "
        "dest_qp=0x000048 psn=0 ack_req=1  ImmDt imm_data=0x00000001  payload=141 pad=3  ICRC ok");

    const FrameOutput& last = frame(frames, 18);
    EXPECT_CONTAINS(last.text, "RC_SEND_LAST_WITH_IMMEDIATE dest_qp=0x000045 psn=1 ack_req=1  "
                               "ImmDt imm_data=0x00000001  payload=1024 pad=0  ICRC ok");
    EXPECT_EQ(last.json["imm_data"], 1u);
    EXPECT_CONTAINS(last.explained, "imm_data  0x00000001: handed to the responder's completion");
    EXPECT_CONTAINS(last.explained, "this is the last packet of a message");

    const FrameOutput& ack = frame(frames, 16);
    EXPECT_CONTAINS(ack.text, "RC_ACKNOWLEDGE dest_qp=0x000045 psn=0 ack_req=0  AETH syndrome=0x06 "
                              "(ACK credit_count=6 (8 credits)) msn=1");
    EXPECT_EQ(ack.json["aeth"]["credit_count"], 6u);
    EXPECT_EQ(ack.json["aeth"]["credits"], 8u);
    EXPECT_CONTAINS(ack.explained, "ACK; credit count 6 = the responder has 8 receive WQEs posted");

    const FrameOutput& ack5 = frame(frames, 26);
    EXPECT_EQ(ack5.json["aeth"]["syndrome"], 5u);
    EXPECT_EQ(ack5.json["aeth"]["msn"], 3u);
    EXPECT_EQ(ack5.json["psn"], 5u);

    const FrameOutput& imm0 = frame(frames, 122);
    EXPECT_CONTAINS(imm0.text, "RC_SEND_ONLY_WITH_IMMEDIATE dest_qp=0x000045 psn=66 ack_req=1  "
                               "ImmDt imm_data=0x00000000  payload=4 pad=0  ICRC ok");

    // Whole-file tallies from tshark: 33 SEND_FIRST, 33 SEND_LAST_WITH_IMMEDIATE (imm 1 each),
    // 2 SEND_ONLY_WITH_IMMEDIATE, 37 ACKs of which 10 have syndrome 5 and 27 syndrome 6.
    std::map<std::string, int> by_opcode;
    std::map<unsigned, int> by_syndrome;
    for (const FrameOutput& f : frames) {
        if (f.kind != FrameKind::roce) continue;
        ++by_opcode[f.json["opcode"].get<std::string>()];
        if (f.json["opcode"] == "RC_SEND_LAST_WITH_IMMEDIATE") {
            EXPECT_EQ(f.json["imm_data"], 1u) << f.text;
        }
        if (f.json.contains("aeth")) ++by_syndrome[f.json["aeth"]["syndrome"].get<unsigned>()];
    }
    EXPECT_EQ(by_opcode["RC_SEND_FIRST"], 33);
    EXPECT_EQ(by_opcode["RC_SEND_LAST_WITH_IMMEDIATE"], 33);
    EXPECT_EQ(by_opcode["RC_SEND_ONLY_WITH_IMMEDIATE"], 2);
    EXPECT_EQ(by_opcode["RC_ACKNOWLEDGE"], 37);
    EXPECT_EQ(by_syndrome[5], 10);
    EXPECT_EQ(by_syndrome[6], 27);
}

TEST(TraceOferby, NonRoceFramesNameTheirProtocol) {
    const auto frames = read_shared(kOferby);
    // MLDv2 reports sit behind an IPv6 hop-by-hop header; router solicitations do not.
    EXPECT_EQ(frame(frames, 1).text,
              "1  fe80::7191:1f2d:839a:207c > ff02::16  skipped (IPv6 ICMP type 143)");
    EXPECT_EQ(frame(frames, 3).text,
              "3  fe80::7191:1f2d:839a:207c > ff02::2  skipped (IPv6 ICMP type 133)");
    for (std::size_t i = 5; i <= 14; ++i) {
        const FrameOutput& f = frame(frames, i);
        EXPECT_CONTAINS(f.text, "  skipped (TCP port 9000)");
        EXPECT_TRUE(f.json["src_port"] == 9000 || f.json["dst_port"] == 9000) << f.json.dump();
    }
    EXPECT_EQ(frame(frames, 5).json["src_port"], 47378u);
    for (std::size_t i = 118; i <= 121; ++i)
        EXPECT_EQ(frame(frames, i).text, std::to_string(i) + "  skipped (ARP)");
}

/** Appends @p v to @p out in host byte order (pcapng is written in the writer's order). */
template <typename T>
void put(std::vector<std::uint8_t>& out, T v) {
    const auto* p = reinterpret_cast<const std::uint8_t*>(&v);
    out.insert(out.end(), p, p + sizeof v);
}

/**
 * A minimal pcapng file: section header, one Ethernet interface, one enhanced packet block per
 * frame. The real captures are all classic pcap, so this checks that pcapng goes through libpcap.
 */
std::vector<std::uint8_t> make_pcapng(const std::vector<std::vector<std::uint8_t>>& frames) {
    std::vector<std::uint8_t> f;
    put<std::uint32_t>(f, 0x0a0d0d0a); // section header block
    put<std::uint32_t>(f, 28);
    put<std::uint32_t>(f, 0x1a2b3c4d); // byte-order magic
    put<std::uint16_t>(f, 1);
    put<std::uint16_t>(f, 0);
    put<std::int64_t>(f, -1); // section length unknown
    put<std::uint32_t>(f, 28);
    put<std::uint32_t>(f, 1); // interface description block
    put<std::uint32_t>(f, 20);
    put<std::uint16_t>(f, 1); // LINKTYPE_ETHERNET
    put<std::uint16_t>(f, 0);
    put<std::uint32_t>(f, 65535);
    put<std::uint32_t>(f, 20);
    for (const auto& pkt : frames) {
        const std::uint32_t padded = static_cast<std::uint32_t>((pkt.size() + 3) & ~std::size_t{3});
        put<std::uint32_t>(f, 6); // enhanced packet block
        put<std::uint32_t>(f, 32 + padded);
        put<std::uint32_t>(f, 0); // interface 0
        put<std::uint32_t>(f, 0);
        put<std::uint32_t>(f, 0);
        put<std::uint32_t>(f, static_cast<std::uint32_t>(pkt.size()));
        put<std::uint32_t>(f, static_cast<std::uint32_t>(pkt.size()));
        f.insert(f.end(), pkt.begin(), pkt.end());
        f.resize(f.size() + (padded - pkt.size()), 0);
        put<std::uint32_t>(f, 32 + padded);
    }
    return f;
}

TEST(TraceCaptureFile, ReadsPcapng) {
    wire::PacketFields fields;
    fields.opcode = wire::Opcode::RC_RDMA_WRITE_ONLY;
    fields.dest_qp = 0x77;
    fields.psn = wire::Psn(5);
    fields.dma_len = 3;
    std::vector<std::uint8_t> arp(60, 0);
    arp[12] = 0x08;
    arp[13] = 0x06;
    const auto bytes = make_pcapng({build(fields, 3), arp});

    const std::filesystem::path path =
        std::filesystem::temp_directory_path() /
        ("droce-trace-test-" + std::to_string(::getpid()) + ".pcapng");
    {
        std::FILE* out = std::fopen(path.c_str(), "wb");
        ASSERT_NE(out, nullptr) << path;
        ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), out), bytes.size());
        std::fclose(out);
    }
    const std::vector<FrameOutput> frames = read_capture(path.string());
    std::filesystem::remove(path);
    ASSERT_EQ(frames.size(), 2u);
    EXPECT_EQ(frames[0].text,
              "1  10.0.0.1 > 10.0.0.2  udp 49443 > 4791  RC_RDMA_WRITE_ONLY dest_qp=0x000077 psn=5 "
              "ack_req=0  RETH va=0x0000000000000000 r_key=0x00000000 dma_length=3  payload=3 "
              "pad=1  ICRC ok");
    EXPECT_EQ(frames[1].text, "2  skipped (ARP)");
}

TEST(TraceErf, NonEthernetLinkTypeIsSkipped) {
    const auto frames = read_shared(kErf);
    ASSERT_EQ(frames.size(), 43u);
    for (const FrameOutput& f : frames) {
        EXPECT_EQ(f.text, std::to_string(f.index) + "  skipped (link type ERF)");
        EXPECT_EQ(f.json["link_type"], "ERF");
        EXPECT_CONTAINS(f.explained, "This capture's link type is ERF, not Ethernet");
    }
}

} // namespace
} // namespace droce::trace::test
