/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * Debian's scapy (scapy.contrib.roce, an independent RoCEv2 implementation) against droce:
 * scapy computes the same ICRC as droce for droce-built IPv4 frames of every opcode and several
 * sizes, and droce accepts the frames scapy builds, with the values scapy put in.
 *
 * scapy computes the ICRC over IPv4 only (its IPv6 branch is a TODO), so IPv6 is covered by the
 * unit tests (captured IPv6 vector and the zlib reference) instead.
 */
#include <gtest/gtest.h>

#include "interop_util.h"
#include "wire_test_util.h"

namespace droce::interop {
namespace {

using wire::Opcode;
using wire::OpFlags;
using wire::test::Bytes;

constexpr const char* kPython = "/usr/bin/python3"; // Debian's, which sees python3-scapy

std::string script() {
    const char* s = std::getenv("DROCE_SCAPY_SCRIPT");
    return s ? s : "";
}

class Scapy : public ::testing::Test {
  protected:
    void SetUp() override {
        ASSERT_FALSE(script().empty())
            << "DROCE_SCAPY_SCRIPT is not set (tests/interop/meson.build sets it)";
        const CommandResult r =
            run_command(std::string(kPython) + " -c 'import scapy.contrib.roce' >/dev/null 2>&1");
        if (r.status != 0)
            GTEST_SKIP() << kPython << " cannot import scapy.contrib.roce (python3-scapy missing)";
        ASSERT_TRUE(dir_.ok());
    }

    CommandResult run_script(const char* mode, const std::string& pcap) {
        const std::string cmd = std::string(kPython) + " " + shell_quote(script()) + " " + mode +
                                " " + shell_quote(pcap) + " 2>" +
                                shell_quote(dir_.file("scapy.err"));
        return run_command(cmd);
    }

    ScratchDir dir_;
};

/** The ICRC as its four wire bytes in hex, least significant byte first (A17.3.3). */
std::string wire_hex(std::uint32_t icrc) {
    const std::uint8_t b[4] = {
        static_cast<std::uint8_t>(icrc), static_cast<std::uint8_t>(icrc >> 8),
        static_cast<std::uint8_t>(icrc >> 16), static_cast<std::uint8_t>(icrc >> 24)};
    return hex_bytes(b, 4);
}

TEST_F(Scapy, ComputesTheSameIcrcAsDroceForEveryOpcodeAndSize) {
    const std::size_t kSizes[] = {0, 1, 3, 4, 255, 1024, 4096};
    struct Case {
        std::string name;
        std::uint32_t icrc;
        bool zeroed;
    };
    std::vector<Case> cases;
    std::vector<Bytes> frames;
    std::uint32_t i = 0;
    for (bool vlan : {false, true}) {
        for (Opcode op : wire::kAllOpcodes) {
            for (std::size_t len : kSizes) {
                if (len != 0 && !wire::opcode_info(op).is(OpFlags::payload)) continue;
                wire::PathHeaders path = wire::test::make_path(false, vlan);
                path.tos = static_cast<std::uint8_t>(i); // the masked fields vary too
                path.ttl = static_cast<std::uint8_t>(1 + i);
                Bytes f =
                    wire::test::build(path, wire::test::make_fields(op, (i & 1) != 0, i),
                                      wire::test::make_payload(len, static_cast<std::uint8_t>(i)));
                ASSERT_FALSE(f.empty());
                const std::uint32_t icrc = wire::test::wire_icrc(f);
                // Every third frame goes out with its ICRC zeroed: scapy must compute it, not echo
                // it.
                const bool zeroed = i % 3 == 0;
                if (zeroed) std::fill(f.end() - 4, f.end(), 0);
                cases.push_back({std::string(wire::to_string(op)) + (vlan ? " vlan " : " ") +
                                     std::to_string(len) + "B",
                                 icrc, zeroed});
                frames.push_back(std::move(f));
                ++i;
            }
        }
    }
    const std::string pcap = dir_.file("droce-ipv4.pcap");
    ASSERT_EQ(wire::test::write_pcap(pcap, frames), "");

    const CommandResult r = run_script("icrc", pcap);
    ASSERT_EQ(r.status, 0) << r.out;
    const std::vector<std::string> rows = lines(r.out);
    ASSERT_EQ(rows.size(), cases.size()) << r.out;
    for (std::size_t k = 0; k < rows.size(); ++k) {
        SCOPED_TRACE(cases[k].name);
        const std::vector<std::string> cols = split(rows[k], ' ');
        ASSERT_EQ(cols.size(), 4u) << rows[k];
        EXPECT_EQ(cols[0], std::to_string(k));
        EXPECT_EQ(cols[1], wire_hex(cases[k].icrc)) << "scapy's ICRC";
        EXPECT_EQ(cols[2], cases[k].zeroed ? "00000000" : wire_hex(cases[k].icrc))
            << "ICRC scapy read";
        EXPECT_EQ(cols[3], "1") << "scapy changed bytes other than the ICRC when rebuilding";
    }
    EXPECT_GT(cases.size(), 400u);
}

/** "k=v k=v" → map. */
std::map<std::string, std::string> key_values(const std::string& row) {
    std::map<std::string, std::string> kv;
    for (const std::string& item : split(row, ' ')) {
        const auto eq = item.find('=');
        if (eq != std::string::npos) kv[item.substr(0, eq)] = item.substr(eq + 1);
    }
    return kv;
}

TEST_F(Scapy, DroceAcceptsFramesScapyBuilds) {
    const std::string pcap = dir_.file("scapy-built.pcap");
    const CommandResult r = run_script("build", pcap);
    ASSERT_EQ(r.status, 0) << r.out;
    const std::vector<std::string> rows = lines(r.out);
    const wire::test::PcapFile pf = wire::test::read_pcap(pcap);
    ASSERT_EQ(pf.error, "");
    ASSERT_EQ(pf.frames.size(), rows.size());
    ASSERT_GE(rows.size(), 5u);
    for (std::size_t k = 0; k < rows.size(); ++k) {
        SCOPED_TRACE(rows[k]);
        auto kv = key_values(rows[k]);
        const wire::test::Parsed p = wire::test::parse_copy(pf.frames[k]);
        ASSERT_EQ(p.reason, wire::RejectReason::ok);
        const wire::ParsedFrame& f = p.frame;
        EXPECT_EQ(f.icrc_wire, wire::test::reference_icrc(pf.frames[k]));
        EXPECT_EQ(static_cast<unsigned>(f.bth->opcode()), std::stoul(kv.at("opcode")));
        EXPECT_EQ(f.bth->dest_qp(), std::stoul(kv.at("dqpn")));
        EXPECT_EQ(f.bth->psn().value(), std::stoul(kv.at("psn")));
        EXPECT_EQ(hex_bytes(f.payload.data(), f.payload.size()), kv.at("payload"));
        if (kv.count("syndrome")) {
            ASSERT_NE(f.aeth, nullptr);
            EXPECT_EQ(f.aeth->syndrome, std::stoul(kv.at("syndrome")));
            EXPECT_EQ(f.aeth->msn(), std::stoul(kv.at("msn")));
        }
        EXPECT_EQ(f.bth->becn(), kv.count("becn") == 1 && kv.at("becn") == "1");
        EXPECT_EQ(f.bth->fecn(), kv.count("fecn") == 1 && kv.at("fecn") == "1");
    }
}

} // namespace
} // namespace droce::interop
