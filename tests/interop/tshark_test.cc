/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * Wireshark (Debian's tshark) reads frames built by droce: every opcode, IPv4 and IPv6 over 802.1Q,
 * is decoded with no malformed packet and no expert item, and tshark finds in each header the
 * values droce put there. A control frame that is broken on purpose shows that the checks do see
 * problems.
 *
 * droce's MRC opcodes (0xC0-0xC6, lib/wire/mrc.h) are in the BTH range IBTA leaves to
 * manufacturers. Wireshark 4.0 decodes their BTH (opcode number, shown as "Unknown", P_Key,
 * dest QP, PSN ...) and hands every byte after it, the MRC headers, payload, pad and ICRC alike,
 * to its "Unknown/Vendor Specific Data" field (infiniband.vendor): it finds no RETH, no ImmDt, no
 * ICRC and no payload in an MRC packet. The tests assert exactly that.
 */
#include <gtest/gtest.h>

#include <functional>

#include "interop_util.h"
#include "wire_test_util.h"

namespace droce::interop {
namespace {

using wire::Opcode;
using wire::OpFlags;
using wire::test::Bytes;

/** One frame written to the pcap, with what droce put in it. */
struct Written {
    wire::PathHeaders path;
    wire::PacketFields fields;
    Bytes payload;
    Bytes frame;
    std::uint32_t icrc = 0;

    [[nodiscard]] const wire::OpcodeInfo& info() const { return wire::opcode_info(fields.opcode); }
    [[nodiscard]] bool has(OpFlags f) const { return info().is(f); }
    /** An MRC packet: tshark decodes its BTH only (see the file comment). */
    [[nodiscard]] bool mrc() const {
        return wire::transport_of(fields.opcode) == wire::Transport::mrc;
    }
};

std::vector<Written> frames_of_every_opcode() {
    const std::size_t kSizes[] = {13, 0, 1, 256, 1024, 4};
    std::vector<Written> v;
    std::uint32_t i = 0;
    for (bool ipv6 : {false, true}) {
        for (Opcode op : wire::kAllOpcodes) {
            Written w;
            w.path = wire::test::make_path(ipv6, ipv6);
            w.path.udp_sport = static_cast<std::uint16_t>(0xc000 + i);
            w.fields = wire::test::make_fields(op, (i & 1) != 0, i);
            const bool payload = wire::opcode_info(op).is(OpFlags::payload);
            w.payload = wire::test::make_payload(payload ? kSizes[i % std::size(kSizes)] : 0,
                                                 static_cast<std::uint8_t>(i));
            w.frame = wire::test::build(w.path, w.fields, w.payload);
            w.icrc = wire::test::wire_icrc(w.frame);
            v.push_back(std::move(w));
            ++i;
        }
    }
    return v;
}

/** A tshark field and the text tshark should print for it (empty: the field must be absent). */
struct FieldCheck {
    const char* field;
    std::function<std::string(const Written&)> want;
};

std::string dec(std::uint64_t v) {
    return std::to_string(v);
}
std::string flag(bool b) {
    return b ? "1" : "0";
}

const std::vector<FieldCheck>& field_checks() {
    static const std::vector<FieldCheck> checks = {
        {"infiniband.bth.opcode",
         [](const Written& w) { return dec(static_cast<unsigned>(w.fields.opcode)); }},
        {"infiniband.bth.se", [](const Written& w) { return flag(w.fields.solicited); }},
        {"infiniband.bth.m", [](const Written& w) { return flag(w.fields.mig_req); }},
        {"infiniband.bth.padcnt", [](const Written& w) { return dec(-w.payload.size() & 3u); }},
        {"infiniband.bth.tver", [](const Written&) { return std::string("0"); }},
        {"infiniband.bth.p_key", [](const Written& w) { return dec(w.fields.pkey); }},
        {"infiniband.bth.destqp", [](const Written& w) { return hex(w.fields.dest_qp, 6); }},
        {"infiniband.bth.a", [](const Written& w) { return flag(w.fields.ack_req); }},
        {"infiniband.bth.psn", [](const Written& w) { return dec(w.fields.psn.value()); }},
        // Wireshark shows the AtomicETH's address and key in the RETH fields.
        // Not in an MRC packet, whose RETH is inside the vendor data.
        {"infiniband.reth.va",
         [](const Written& w) {
             return !w.mrc() && (w.has(OpFlags::reth) || w.has(OpFlags::atomic_eth))
                        ? hex(w.fields.va, 16)
                        : "";
         }},
        {"infiniband.reth.r_key",
         [](const Written& w) {
             return !w.mrc() && (w.has(OpFlags::reth) || w.has(OpFlags::atomic_eth))
                        ? hex(w.fields.rkey, 8)
                        : "";
         }},
        {"infiniband.reth.dmalen",
         [](const Written& w) {
             return !w.mrc() && w.has(OpFlags::reth) ? dec(w.fields.dma_len) : "";
         }},
        {"infiniband.aeth.syndrome",
         [](const Written& w) { return w.has(OpFlags::aeth) ? dec(w.fields.syndrome) : ""; }},
        {"infiniband.aeth.msn",
         [](const Written& w) { return w.has(OpFlags::aeth) ? dec(w.fields.msn) : ""; }},
        {"infiniband.atomiceth.swapdt",
         [](const Written& w) { return w.has(OpFlags::atomic_eth) ? dec(w.fields.swap_add) : ""; }},
        {"infiniband.atomiceth.cmpdt",
         [](const Written& w) { return w.has(OpFlags::atomic_eth) ? dec(w.fields.compare) : ""; }},
        {"infiniband.atomicacketh.origremdt",
         [](const Written& w) {
             return w.has(OpFlags::atomic_ack_eth) ? dec(w.fields.orig_rem_data) : "";
         }},
        {"infiniband.immdt",
         [](const Written& w) {
             return !w.mrc() && w.has(OpFlags::immdt) ? hex(w.fields.imm, 8).substr(2) : "";
         }},
        {"infiniband.ieth",
         [](const Written& w) {
             return w.has(OpFlags::ieth) ? hex(w.fields.inv_rkey, 8).substr(2) : "";
         }},
        {"infiniband.deth.q_key",
         [](const Written& w) { return w.has(OpFlags::deth) ? hex(w.fields.qkey, 16) : ""; }},
        {"infiniband.deth.srcqp",
         [](const Written& w) { return w.has(OpFlags::deth) ? hex(w.fields.src_qp, 8) : ""; }},
        // tshark reads the four ICRC bytes as a big-endian number; droce stores the CRC low byte
        // first. Wireshark 4.0 calls opcode 0x81 "Unknown" and stops after the BTH of a CNP, and
        // of an MRC packet.
        {"infiniband.invariant.crc",
         [](const Written& w) {
             return w.fields.opcode == Opcode::CNP || w.mrc() ? std::string()
                                                              : hex(__builtin_bswap32(w.icrc), 8);
         }},
        // The payload, followed by the pad bytes (zero), reaches the generic data dissector
        // (except in MRC packets: vendor data).
        {"data.data",
         [](const Written& w) {
             if (w.mrc()) return std::string();
             Bytes padded = w.payload;
             padded.resize(w.payload.size() + (-w.payload.size() & 3u), 0);
             return hex_bytes(padded.data(), padded.size());
         }},
        {"udp.srcport", [](const Written& w) { return dec(w.path.udp_sport); }},
        {"udp.dstport", [](const Written&) { return std::string("4791"); }},
        // With checksum validation on: 1 = good, 3 = not present (zero UDP checksum on IPv4).
        {"udp.checksum.status",
         [](const Written& w) { return std::string(w.path.ipv6 ? "1" : "3"); }},
        {"ip.checksum.status",
         [](const Written& w) { return std::string(w.path.ipv6 ? "" : "1"); }},
        {"ipv6.flow",
         [](const Written& w) { return w.path.ipv6 ? hex(w.path.flow_label, 5) : ""; }},
        {"vlan.id",
         [](const Written& w) { return w.path.has_vlan ? dec(w.path.vlan_tci & 0xfff) : ""; }},
        {"_ws.malformed", [](const Written&) { return std::string(); }},
        {"_ws.expert", [](const Written&) { return std::string(); }},
    };
    return checks;
}

class Tshark : public ::testing::Test {
  protected:
    void SetUp() override {
        if (run_command("tshark --version >/dev/null 2>&1").status != 0)
            GTEST_SKIP() << "tshark is not installed";
        ASSERT_TRUE(dir_.ok());
        // A private, empty configuration directory: the user's Wireshark preferences do not apply.
        std::filesystem::create_directory(dir_.file("wireshark"));
        tshark_ = "WIRESHARK_CONFIG_DIR=" + shell_quote(dir_.file("wireshark")) + " tshark -n";
        // A RoCE payload is opaque bytes, but Wireshark guesses at protocols inside it
        // (RPC-over-RDMA, Mellanox EoIB, SMB Direct ...) and reports droce's test pattern as a
        // malformed packet of that protocol. Turn off the protocols that guess at InfiniBand
        // payloads, so the checks judge droce's headers. "ethertype" stays: it also decodes the
        // Ethernet header.
        const CommandResult h = run_command("tshark -G heuristic-decodes 2>/dev/null");
        ASSERT_EQ(h.status, 0);
        for (const std::string& row : lines(h.out)) {
            const std::vector<std::string> cols = split(row, '\t');
            if (cols.size() == 3 && cols[0] == "infiniband.payload" && cols[2] == "T" &&
                cols[1] != "ethertype")
                tshark_ += " --disable-protocol " + shell_quote(cols[1]);
        }
        ASSERT_NE(tshark_.find("--disable-protocol"), std::string::npos) << h.out;
    }

    /** Writes @p frames to a pcap in the scratch directory and returns its path. */
    std::string write(const std::vector<Bytes>& frames, const std::string& name) {
        const std::string path = dir_.file(name);
        EXPECT_EQ(wire::test::write_pcap(path, frames), "");
        return path;
    }

    /** tshark's -z expert summary of @p pcap. */
    std::string expert_summary(const std::string& pcap) {
        CommandResult r =
            run_command(tshark_ + " -r " + shell_quote(pcap) + " -q -z expert 2>/dev/null");
        EXPECT_EQ(r.status, 0);
        return r.out;
    }

    ScratchDir dir_;
    std::string tshark_;
};

bool has_expert_section(const std::string& summary) {
    for (const char* s : {"Errors (", "Warnings (", "Notes (", "Chats ("})
        if (summary.find(s) != std::string::npos) return true;
    return false;
}

TEST_F(Tshark, DecodesEveryOpcodeWithTheValuesDroceWrote) {
    const std::vector<Written> written = frames_of_every_opcode();
    std::vector<Bytes> frames;
    for (const Written& w : written) {
        ASSERT_FALSE(w.frame.empty());
        frames.push_back(w.frame);
    }
    const std::string pcap = write(frames, "every-opcode.pcap");

    std::string cmd = tshark_ + " -r " + shell_quote(pcap) +
                      " -o ip.check_checksum:TRUE -o udp.check_checksum:TRUE"
                      " -T fields -E separator=/t -E occurrence=f -e frame.number";
    for (const FieldCheck& c : field_checks())
        cmd += std::string(" -e ") + c.field;
    cmd += " 2>" + shell_quote(dir_.file("tshark.err"));
    const CommandResult r = run_command(cmd);
    ASSERT_EQ(r.status, 0) << cmd;

    const std::vector<std::string> rows = lines(r.out);
    ASSERT_EQ(rows.size(), written.size()) << r.out;
    std::size_t compared = 0;
    for (std::size_t i = 0; i < rows.size(); ++i) {
        const Written& w = written[i];
        SCOPED_TRACE(
            "frame " + std::to_string(i + 1) + " " + std::string(wire::to_string(w.fields.opcode)) +
            (w.path.ipv6 ? " IPv6" : " IPv4") + " payload " + std::to_string(w.payload.size()));
        const std::vector<std::string> cols = split(rows[i], '\t');
        ASSERT_EQ(cols.size(), field_checks().size() + 1) << rows[i];
        EXPECT_EQ(cols[0], std::to_string(i + 1));
        for (std::size_t k = 0; k < field_checks().size(); ++k) {
            const std::string want = field_checks()[k].want(w);
            if (want.starts_with("0x") && cols[k + 1].starts_with("0x")) {
                // Hex fields: the number matters, not how many digits tshark pads it to.
                EXPECT_EQ(std::stoull(cols[k + 1], nullptr, 16), std::stoull(want, nullptr, 16))
                    << field_checks()[k].field << ": tshark " << cols[k + 1] << ", droce " << want;
            } else {
                EXPECT_EQ(cols[k + 1], want) << field_checks()[k].field;
            }
            compared += !cols[k + 1].empty();
        }
    }
    // Guards against a tshark that prints nothing in every column.
    EXPECT_GT(compared, written.size() * 14);
}

TEST_F(Tshark, FindsNoMalformedPacketAndNoExpertItem) {
    std::vector<Bytes> frames;
    for (const Written& w : frames_of_every_opcode())
        frames.push_back(w.frame);
    const std::string pcap = write(frames, "every-opcode.pcap");
    const std::string summary = expert_summary(pcap);
    EXPECT_FALSE(has_expert_section(summary)) << summary;

    // The RoCE dissector, not a fallback, decoded every frame.
    const CommandResult r = run_command(tshark_ + " -r " + shell_quote(pcap) +
                                        " -Y infiniband.bth 2>/dev/null | wc -l");
    EXPECT_EQ(r.out, std::to_string(frames.size()) + "\n");
}

/** One MRC frame for the MRC test, with realistic values (wire/mrc.h). */
Written mrc_frame(Opcode op, bool ipv6, std::uint16_t path, const wire::MrcCtlFields* ctl) {
    Written w;
    w.path = wire::test::make_path(ipv6, ipv6);
    w.path.udp_sport = static_cast<std::uint16_t>(0xc000 + path); // ev_base + path
    w.fields.opcode = op;
    w.fields.dest_qp = 0x00c0de + path;
    w.fields.psn = wire::Psn(0xfffff0 + path); // close to the wrap
    w.fields.ack_req = false;
    w.fields.solicited = op == Opcode::MRC_WRITE_LAST_WITH_IMMEDIATE;
    w.fields.mrc_ctl = ctl;
    if (wire::opcode_info(op).is(OpFlags::mdeth)) {
        w.payload = wire::test::make_payload(1021, static_cast<std::uint8_t>(path));
        w.fields.va = 0x00007f0000100000ull + 1021u * path;
        w.fields.rkey = 0x00001234;
        w.fields.dma_len = 1021;
        w.fields.imm = 0xfeedf00d;
        w.fields.mrc_flags = wire::kMdethLast;
        w.fields.mrc_path = path;
        w.fields.mrc_msn = 3;
        w.fields.mrc_msg_offset = 1021u * path;
        w.fields.mrc_msg_length = 1021u * (path + 1);
    }
    if (op == Opcode::MRC_NACK) w.fields.psn = wire::Psn(ctl->nack_psn);
    w.frame = wire::test::build(w.path, w.fields, w.payload);
    w.icrc = wire::test::wire_icrc(w.frame);
    return w;
}

TEST_F(Tshark, DecodesTheBthOfEveryMrcOpcode) {
    wire::MrcCtlFields ctl;
    ctl.flags = wire::kSethEcnEcho;
    ctl.path = 3;
    ctl.cum_psn = 0xfffff2;
    ctl.sack_base = 0xffff00;
    ctl.mpr_dest = 16;
    ctl.port_mask = 0x03;
    ctl.bitmap[3] = 0xffff000000000000ull;
    ctl.reason = static_cast<std::uint8_t>(wire::NackReason::trimmed);
    ctl.nack_psn = 0xfffff4;
    ctl.seq = 12;
    ctl.timestamp_ns = 1'700'000'000'000'000'000ull;
    ctl.op = static_cast<std::uint8_t>(wire::EndpointOp::port_status);
    std::vector<Written> written;
    std::vector<Bytes> frames;
    std::uint16_t path = 1;
    for (bool ipv6 : {false, true}) {
        for (Opcode op : wire::kAllOpcodes) {
            if (wire::transport_of(op) != wire::Transport::mrc) continue;
            written.push_back(mrc_frame(op, ipv6, path++, &ctl));
            ASSERT_FALSE(written.back().frame.empty()) << wire::to_string(op);
            frames.push_back(written.back().frame);
        }
    }
    ASSERT_EQ(frames.size(), 14u);
    const std::string pcap = write(frames, "mrc.pcap");

    // -E occurrence=l: tshark 4.0 fills infiniband.vendor twice, first with the first four bytes,
    // then with all of them; the last is the whole rest of the packet.
    const std::string cmd =
        tshark_ + " -r " + shell_quote(pcap) +
        " -T fields -E separator=/t -E occurrence=l -e infiniband.bth.opcode"
        " -e infiniband.bth.destqp -e infiniband.bth.psn -e infiniband.bth.padcnt"
        " -e infiniband.bth.se -e infiniband.bth.a -e infiniband.bth.tver -e infiniband.bth.p_key"
        " -e udp.srcport -e infiniband.vendor -e infiniband.reth.va -e infiniband.invariant.crc"
        " -e _ws.col.Info 2>/dev/null";
    const CommandResult r = run_command(cmd);
    ASSERT_EQ(r.status, 0) << cmd;
    const std::vector<std::string> rows = lines(r.out);
    ASSERT_EQ(rows.size(), written.size()) << r.out;
    for (std::size_t i = 0; i < rows.size(); ++i) {
        const Written& w = written[i];
        SCOPED_TRACE(std::string(wire::to_string(w.fields.opcode)) +
                     (w.path.ipv6 ? " IPv6: " : " IPv4: ") + rows[i]);
        const std::vector<std::string> c = split(rows[i], '\t');
        ASSERT_EQ(c.size(), 13u);
        // The BTH: opcode number (0xc0 = 192 ...), dest QP and PSN as droce wrote them.
        EXPECT_EQ(c[0], dec(static_cast<unsigned>(w.fields.opcode)));
        EXPECT_EQ(std::stoul(c[1], nullptr, 16), w.fields.dest_qp);
        EXPECT_EQ(c[2], dec(w.fields.psn.value()));
        EXPECT_EQ(c[3], dec(-w.payload.size() & 3u));
        EXPECT_EQ(c[4], flag(w.fields.solicited));
        EXPECT_EQ(c[5], "0");
        EXPECT_EQ(c[6], "0");
        EXPECT_EQ(c[7], dec(wire::kDefaultPkey));
        EXPECT_EQ(c[8], dec(w.path.udp_sport));
        // Everything after the BTH is vendor data: MRC headers, payload, pad and the ICRC.
        const std::size_t bth = 14 + (w.path.has_vlan ? 4 : 0) + (w.path.ipv6 ? 40 : 20) + 8;
        EXPECT_EQ(c[9], hex_bytes(w.frame.data() + bth + 12, w.frame.size() - bth - 12));
        // A data packet's vendor data starts with its RETH, a control packet's with the version.
        const std::string first = w.has(OpFlags::mdeth) ? hex(w.fields.va, 16).substr(2) : "01";
        EXPECT_TRUE(c[9].starts_with(first)) << first;
        EXPECT_EQ(c[10], "") << "no RETH decoded";
        EXPECT_EQ(c[11], "") << "no ICRC decoded";
        EXPECT_NE(c[12].find("Unknown"), std::string::npos) << "Info column";
    }

    // Decoded as InfiniBand, without a malformed packet or an expert item.
    const std::string summary = expert_summary(pcap);
    EXPECT_FALSE(has_expert_section(summary)) << summary;
    const CommandResult n = run_command(tshark_ + " -r " + shell_quote(pcap) +
                                        " -Y infiniband.bth 2>/dev/null | wc -l");
    EXPECT_EQ(n.out, std::to_string(frames.size()) + "\n");
}

TEST_F(Tshark, ControlFramesBrokenOnPurposeAreReportedAsMalformed) {
    // If these are not flagged, the two tests above could not fail either.
    const Bytes good = wire::test::build(wire::test::make_path(false, false),
                                         wire::test::make_fields(Opcode::RC_RDMA_WRITE_ONLY, true),
                                         wire::test::make_payload(40));
    const Bytes cut(good.begin(), good.begin() + 60); // inside the RETH; IP length unchanged
    Bytes bad_udp_len = good;
    wire::test::wr16(bad_udp_len, 14 + 20 + 4, 0x100);
    const std::string pcap = write({cut, bad_udp_len}, "broken.pcap");
    const std::string summary = expert_summary(pcap);
    EXPECT_TRUE(has_expert_section(summary)) << summary;
    const CommandResult r = run_command(tshark_ + " -r " + shell_quote(pcap) +
                                        " -T fields -E occurrence=f -e _ws.malformed 2>/dev/null");
    EXPECT_EQ(r.out, "_ws.malformed\n_ws.malformed\n");
}

} // namespace
} // namespace droce::interop
