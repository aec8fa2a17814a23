/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * The droce-trace program itself (path in DROCE_TRACE_EXE): exit codes 0 / 1 / 2, the file name in
 * the error message, one output line per frame, and --json output that parses line by line.
 */
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <utility>

#include "trace_test_util.h"

namespace droce::trace::test {
namespace {

struct RunResult {
    int status = -1;    ///< exit status, or -1 if the program did not exit normally
    std::string output; ///< stdout and stderr together
};

std::string quoted(const std::string& s) {
    std::string q = "'";
    for (char c : s)
        q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
}

/** Runs the shell command @p cmd (stderr joined to stdout) and collects its output and status. */
RunResult run_command(const std::string& cmd) {
    RunResult r;
    FILE* p = popen((cmd + " 2>&1").c_str(), "r");
    if (p == nullptr) {
        ADD_FAILURE() << "popen failed: " << cmd;
        return r;
    }
    char buf[4096];
    std::size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0)
        r.output.append(buf, n);
    const int st = pclose(p);
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return r;
}

/** Runs droce-trace with @p args (already shell-quoted) and collects its output. */
RunResult run_trace(const std::string& args) {
    const char* exe = std::getenv("DROCE_TRACE_EXE");
    if (exe == nullptr) {
        ADD_FAILURE() << "DROCE_TRACE_EXE is not set";
        return {};
    }
    return run_command(quoted(exe) + " " + args);
}

/** Runs `./droce trace` (the wrapper in the source tree, DROCE_SCRIPT) on this build's droce-trace
 *  with @p args (already shell-quoted), from the current directory. */
RunResult run_droce_trace(const std::string& args) {
    const char* script = std::getenv("DROCE_SCRIPT");
    const char* build = std::getenv("DROCE_BUILD_ROOT");
    if (script == nullptr || build == nullptr) {
        ADD_FAILURE() << "DROCE_SCRIPT or DROCE_BUILD_ROOT is not set";
        return {};
    }
    return run_command("DROCE_NO_BUILD=1 DROCE_BUILD_DIR=" + quoted(build) + " " + quoted(script) +
                       " trace " + args);
}

std::vector<std::string> lines(const std::string& s) {
    std::vector<std::string> out;
    std::istringstream in(s);
    for (std::string l; std::getline(in, l);)
        out.push_back(l);
    return out;
}

std::string capture(const char* name) {
    return quoted(captures_dir() + "/" + name);
}

TEST(TraceCli, MissingFileExitsOneAndNamesTheFile) {
    const RunResult r = run_trace("read /nonexistent/droce-trace-test.pcap");
    EXPECT_EQ(r.status, 1) << r.output;
    EXPECT_TRUE(contains(r.output, "cannot open '/nonexistent/droce-trace-test.pcap'")) << r.output;
}

TEST(TraceCli, NotACaptureExitsOne) {
    // A file that exists but is not a capture (the README next to the captures).
    const RunResult r = run_trace("read " + quoted(captures_dir() + "/README.md"));
    EXPECT_EQ(r.status, 1) << r.output;
    EXPECT_TRUE(contains(r.output, "README.md")) << r.output;
}

TEST(TraceCli, BadUsageExitsTwo) {
    EXPECT_EQ(run_trace("").status, 2);
    EXPECT_EQ(run_trace("read").status, 2);
    EXPECT_EQ(run_trace("frobnicate x.pcap").status, 2);
    EXPECT_EQ(
        run_trace("read --no-such-option " + capture("scapy_roce_uts_icrc_vectors.pcap")).status,
        2);
    EXPECT_EQ(run_trace("read a.pcap b.pcap").status, 2);
}

TEST(TraceCli, HelpExitsZero) {
    const RunResult r = run_trace("read --help");
    EXPECT_EQ(r.status, 0);
    EXPECT_TRUE(contains(r.output, "--json")) << r.output;
    EXPECT_TRUE(contains(r.output, "--explain")) << r.output;
}

TEST(TraceCli, ReadPrintsOneLinePerFrame) {
    const RunResult r = run_trace("read " + capture("montybeatnik_rdma-roce-lab_test.pcap"));
    ASSERT_EQ(r.status, 0) << r.output;
    const auto out = lines(r.output);
    ASSERT_EQ(out.size(), 16u) << r.output;
    EXPECT_EQ(
        out[3],
        "4  192.168.2.25 > 192.168.2.24  udp 62017 > 4791  RC_RDMA_WRITE_ONLY dest_qp=0x000011 "
        "psn=12726936 ack_req=1  RETH va=0x0000aaab26b58000 r_key=0x00000220 dma_length=18  "
        "payload=18 pad=2  ICRC ok");
    EXPECT_EQ(out[11], "12  skipped (ARP)");
}

TEST(TraceCli, ReadsStandardInput) {
    const RunResult r = run_trace("read - < " + capture("scapy_roce_uts_icrc_vectors.pcap"));
    ASSERT_EQ(r.status, 0) << r.output;
    const auto out = lines(r.output);
    ASSERT_EQ(out.size(), 5u) << r.output;
    EXPECT_TRUE(contains(out[0], "CNP dest_qp=0x000118")) << out[0];
}

TEST(TraceCli, JsonLinesParse) {
    const RunResult r = run_trace("read --json " + capture("oferby_proxy_roce.pcap"));
    ASSERT_EQ(r.status, 0) << r.output;
    const auto out = lines(r.output);
    ASSERT_EQ(out.size(), 123u);
    int roce = 0;
    for (const std::string& l : out) {
        const auto j = nlohmann::json::parse(l); // throws (and fails the test) on bad JSON
        if (j["status"] == "ok") {
            ++roce;
            EXPECT_EQ(j["icrc"], "ok") << l;
        }
        EXPECT_FALSE(j.contains("explain")) << "only with --explain";
    }
    EXPECT_EQ(roce, 105);
}

TEST(TraceCli, ExplainAddsIndentedLines) {
    const RunResult r = run_trace("read --explain " + capture("scapy_roce_uts_icrc_vectors.pcap"));
    ASSERT_EQ(r.status, 0) << r.output;
    const auto out = lines(r.output);
    ASSERT_GT(out.size(), 5u);
    int frames = 0;
    for (const std::string& l : out)
        frames += l.rfind("    ", 0) == 0 ? 0 : 1;
    EXPECT_EQ(frames, 5);
    EXPECT_TRUE(contains(r.output, "\n    BTH         Base Transport Header")) << r.output;

    const RunResult j =
        run_trace("read --json --explain " + capture("scapy_roce_uts_icrc_vectors.pcap"));
    ASSERT_EQ(j.status, 0);
    const auto first = nlohmann::json::parse(lines(j.output).at(0));
    ASSERT_TRUE(first.contains("explain"));
    EXPECT_EQ(first["explain"][0]["header"], "IPv4");
}

/** An ERF capture (native InfiniBand) holds no RoCEv2 frame: explain says why, as read does,
 *  instead of a bare "0 RoCEv2". */
TEST(TraceCli, ExplainOfANonEthernetCaptureSaysWhyItHasNoRoce) {
    const std::string erf = capture("srinivaskoritala_rdma-softroce-demo_infiniband_erf.pcap");
    const RunResult read = run_trace("read --explain " + erf);
    const RunResult text = run_trace("explain " + erf);
    const RunResult json = run_trace("explain --json " + erf);
    ASSERT_EQ(read.status, 0) << read.output;
    const std::string why = "This capture's link type is ERF, not Ethernet; droce-trace decodes "
                            "RoCEv2 in Ethernet captures only, so every frame of the file is "
                            "skipped.";
    EXPECT_TRUE(contains(read.output, why)) << read.output.substr(0, 400);
    EXPECT_EQ(text.status, 0) << text.output;
    EXPECT_TRUE(contains(lines(text.output).at(0), why)) << text.output;
    ASSERT_EQ(json.status, 0) << json.output;
    const auto j = nlohmann::json::parse(json.output);
    EXPECT_EQ(j["not_ethernet"]["ERF"], j["frames"]) << json.output;
    EXPECT_GT(j["frames"].get<int>(), 0);
}

/** Writes @p frames as a classic pcap file (Ethernet, microsecond times 1 us apart) at @p path,
 *  each cut to @p snap bytes (0: whole). */
bool write_pcap(const std::string& path, const std::vector<std::vector<std::uint8_t>>& frames,
                std::uint32_t snap = 0) {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr) return false;
    const std::uint32_t head[] = {0xa1b2c3d4u, 2u | (4u << 16), 0, 0, snap ? snap : 65535, 1};
    bool ok = std::fwrite(head, sizeof head, 1, f) == 1;
    for (std::size_t i = 0; i < frames.size(); ++i) {
        const auto n = static_cast<std::uint32_t>(frames[i].size());
        const std::uint32_t kept = snap ? std::min(snap, n) : n;
        const std::uint32_t rec[] = {1, static_cast<std::uint32_t>(i), kept, n};
        ok = ok && std::fwrite(rec, sizeof rec, 1, f) == 1 &&
             std::fwrite(frames[i].data(), 1, kept, f) == kept;
    }
    return std::fclose(f) == 0 && ok;
}

/** Frames cut by the snap length inside their RoCE headers: the zeros in place of the missing
 *  bytes were told as a story (from a UD capture cut at 42 bytes, an RC connection to QP 0 whose
 *  PSN 0 was "sent again 4 times"). They are left out and said to be; a frame whose headers are
 *  whole and only its payload cut is still told. */
TEST(TraceCli, ExplainLeavesOutFramesCutInsideTheirHeaders) {
    const auto capture = [](wire::Opcode op, std::uint32_t snap) {
        std::vector<std::vector<std::uint8_t>> frames;
        for (std::uint32_t k = 0; k < 5; ++k) {
            wire::PacketFields f;
            f.opcode = op;
            f.dest_qp = 0x22;
            f.psn = wire::Psn(100 + k);
            f.va = 0x10000;
            f.rkey = 0x1234;
            f.dma_len = 64;
            frames.push_back(build(f, 64));
        }
        char path[] = "/tmp/droce-trace-snap-XXXXXX";
        const int fd = mkstemp(path);
        EXPECT_GE(fd, 0);
        close(fd);
        EXPECT_TRUE(write_pcap(path, frames, snap));
        const RunResult json = run_trace("explain --json " + quoted(path));
        const RunResult text = run_trace("explain " + quoted(path));
        unlink(path);
        EXPECT_EQ(json.status, 0) << json.output;
        return std::make_pair(nlohmann::json::parse(json.output, nullptr, false), text.output);
    };
    // Ethernet 14 + IPv4 20 + UDP 8 = 42; the BTH ends at 54, a WRITE's RETH at 70.
    for (const std::uint32_t snap : {42u, 50u}) {
        const auto [j, text] = capture(wire::Opcode::RC_SEND_ONLY, snap);
        EXPECT_TRUE(j["connections"].empty()) << snap << ": " << j.dump();
        EXPECT_EQ(j["rejected"], 5) << snap;
        EXPECT_TRUE(contains(text, "cut by the snap length inside its RoCE headers")) << text;
    }
    {
        const auto [j, text] = capture(wire::Opcode::RC_RDMA_WRITE_ONLY, 60);
        EXPECT_TRUE(j["connections"].empty()) << j.dump();
        EXPECT_EQ(j["rejected"], 5);
    }
    {
        const auto [j, text] = capture(wire::Opcode::RC_SEND_ONLY, 60); // payload cut only
        ASSERT_EQ(j["connections"].size(), 1u) << j.dump();
        EXPECT_EQ(j["connections"][0]["requests"], 5);
        EXPECT_EQ(j["connections"][0]["first_psn"], 100);
        EXPECT_EQ(j["rejected"], 0);
    }
}

/** A capture on lo of droce's uring ports with UDP GSO: two frames that are GSO sends of three
 *  RC WRITE packets each, then one ACK frame. explain counts 3 frames (not 7) and names the 7
 *  packets; the connection has its 6 requests. */
TEST(TraceCli, ExplainCountsAGsoSendAsOneFrameOfSeveralPackets) {
    std::vector<std::vector<std::uint8_t>> frames;
    for (std::uint32_t send = 0; send < 2; ++send) {
        std::vector<std::vector<std::uint8_t>> packets;
        for (std::uint32_t k = 0; k < 3; ++k) {
            wire::PacketFields f;
            f.opcode = k == 0   ? wire::Opcode::RC_RDMA_WRITE_FIRST
                       : k == 1 ? wire::Opcode::RC_RDMA_WRITE_MIDDLE
                                : wire::Opcode::RC_RDMA_WRITE_LAST;
            f.dest_qp = 0x22;
            f.psn = wire::Psn(1000 + 3 * send + k);
            f.va = 0x10000;
            f.rkey = 0x1234;
            f.dma_len = 752;
            packets.push_back(build(f, k == 0 ? 240 : k == 1 ? 256 : 256));
        }
        frames.push_back(gso_send(packets, false));
    }
    wire::PacketFields ack;
    ack.opcode = wire::Opcode::RC_ACKNOWLEDGE;
    ack.dest_qp = 0x11;
    ack.psn = wire::Psn(1005);
    ack.syndrome = 0x1f;
    wire::PathHeaders back = test_path();
    std::swap(back.src_ip, back.dst_ip);
    std::swap(back.src_mac, back.dst_mac);
    frames.push_back(build(ack, 0, back));
    char path[] = "/tmp/droce-trace-gso-XXXXXX";
    const int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    close(fd);
    ASSERT_TRUE(write_pcap(path, frames));
    const RunResult read = run_trace("read " + quoted(path));
    const RunResult text = run_trace("explain " + quoted(path));
    const RunResult json = run_trace("explain --json " + quoted(path));
    unlink(path);
    ASSERT_EQ(read.status, 0) << read.output;
    EXPECT_TRUE(contains(read.output, "gso=3/3")) << read.output;
    ASSERT_EQ(text.status, 0) << text.output;
    EXPECT_TRUE(contains(lines(text.output).at(0),
                         "3 frames, 3 RoCEv2 (7 RoCEv2 packets: 2 of the frames are UDP GSO sends "
                         "captured before the kernel cut them, 6 packets in all)"))
        << text.output;
    ASSERT_EQ(json.status, 0) << json.output;
    const auto j = nlohmann::json::parse(json.output);
    EXPECT_EQ(j["frames"], 3);
    EXPECT_EQ(j["roce_frames"], 3);
    EXPECT_EQ(j["roce_packets"], 7);
    EXPECT_EQ(j["gso_sends"], 2);
    EXPECT_EQ(j["gso_packets"], 6);
    ASSERT_EQ(j["connections"].size(), 1u) << json.output;
    EXPECT_EQ(j["connections"][0]["requests"], 6);
    EXPECT_EQ(j["connections"][0]["acks"], 1);
}

/** `./droce trace` takes explain's options before FILE as well as after it, as droce-trace explain
 *  does (it once passed `--html OUT FILE` on without `explain`: "A subcommand is required"). */
TEST(TraceCli, DroceTraceTakesOptionsBeforeTheFile) {
    const std::string file = capture("montybeatnik_rdma-roce-lab_test.pcap");
    char dir[] = "/tmp/droce-trace-html-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    const std::string before = std::string(dir) + "/before.html";
    const std::string after = std::string(dir) + "/after.html";
    const RunResult b = run_droce_trace("--html " + quoted(before) + " " + file);
    const RunResult a = run_droce_trace(file + " --html " + quoted(after));
    const RunResult j = run_droce_trace("--json --qp 0x11 " + file);
    const bool wrote_before = access(before.c_str(), F_OK) == 0;
    const bool wrote_after = access(after.c_str(), F_OK) == 0;
    std::remove(before.c_str());
    std::remove(after.c_str());
    rmdir(dir);
    EXPECT_EQ(b.status, 0) << b.output;
    EXPECT_TRUE(wrote_before) << b.output;
    EXPECT_TRUE(contains(b.output, "Connection 1: ")) << b.output;
    EXPECT_EQ(a.status, 0) << a.output;
    EXPECT_TRUE(wrote_after) << a.output;
    EXPECT_EQ(b.output, a.output);
    ASSERT_EQ(j.status, 0) << j.output;
    EXPECT_FALSE(nlohmann::json::parse(j.output)["connections"].empty());
}

// droce-trace itself (installed, no ./droce wrapper): a file or explain's options first mean
// explain, as the man page's first line says; nothing at all is a usage of two lines, exit 2.
TEST(TraceCli, AFileWithoutASubcommandIsExplained) {
    const std::string file = capture("montybeatnik_rdma-roce-lab_test.pcap");
    const RunResult plain = run_trace(file);
    const RunResult expl = run_trace("explain " + file);
    const RunResult json = run_trace("--json --qp 0x11 " + file);
    const RunResult none = run_trace("");
    EXPECT_EQ(plain.status, 0) << plain.output;
    EXPECT_TRUE(contains(plain.output, "Connection 1: ")) << plain.output;
    EXPECT_EQ(plain.output, expl.output);
    ASSERT_EQ(json.status, 0) << json.output;
    EXPECT_FALSE(nlohmann::json::parse(json.output)["connections"].empty());
    EXPECT_EQ(none.status, 2);
    EXPECT_TRUE(contains(none.output, "usage: droce-trace FILE")) << none.output;
}

TEST(TraceCli, ExplainOfAnAbsentQpSaysSoAndExitsOne) {
    const RunResult r =
        run_trace("explain --qp 0xabcdef " + capture("droce_mrc_plane_down_loss.pcapng"));
    EXPECT_EQ(r.status, 1) << r.output;
    EXPECT_TRUE(contains(r.output, "no connection")) << r.output;
    EXPECT_TRUE(contains(r.output, "0xabcdef")) << r.output;
}

TEST(TraceCli, ExplainOfACutFileTellsTheStorySoFarAndExitsOne) {
    // The first 300 KB of a 650 KB capture: the file ends inside a record.
    const std::string whole = captures_dir() + "/droce_mrc_plane_down_loss.pcapng";
    char path[] = "/tmp/droce-trace-cut-XXXXXX";
    const int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    close(fd);
    const std::string cut = path;
    ASSERT_EQ(std::system(("head -c 300001 " + quoted(whole) + " > " + quoted(cut)).c_str()), 0);
    const RunResult r = run_trace("explain " + quoted(cut));
    std::remove(cut.c_str());
    EXPECT_EQ(r.status, 1) << r.output;
    EXPECT_TRUE(contains(r.output, "the story below covers the")) << r.output;
    EXPECT_TRUE(contains(r.output, "RDMA WRITE") || contains(r.output, "WRITE")) << r.output;
}

/**
 * A droce capture whose ring overflowed says so in its interface statistics (isb_ifdrop); explain
 * reports those frames as missing from the story, in text and JSON (a gap may be the capture's).
 * The committed MRC capture with one Interface Statistics Block appended: 7 frames dropped.
 */
TEST(TraceCli, ExplainReportsFramesTheCaptureDropped) {
    const std::string src = captures_dir() + "/droce_mrc_plane_down_loss.pcapng";
    std::FILE* in = std::fopen(src.c_str(), "rb");
    ASSERT_NE(in, nullptr) << src;
    std::vector<unsigned char> bytes;
    for (int c; (c = std::fgetc(in)) != EOF;)
        bytes.push_back(static_cast<unsigned char>(c));
    std::fclose(in);
    // ISB (pcapng 4.6), host byte order as droce writes: type 5, length, interface 0, timestamp,
    // option isb_ifdrop (5) of 8 bytes = 7, opt_endofopt, length again.
    const std::uint32_t words[] = {5, 40, 0, 0, 0, 5u | (8u << 16), 7, 0, 0, 40};
    const auto* w = reinterpret_cast<const unsigned char*>(words);
    bytes.insert(bytes.end(), w, w + sizeof words);
    char path[] = "/tmp/droce-trace-isb-XXXXXX";
    const int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
    close(fd);
    const RunResult text = run_trace("explain " + quoted(path));
    const RunResult json = run_trace("explain --json " + quoted(path));
    const RunResult plain = run_trace("explain --json " + quoted(src));
    unlink(path);
    EXPECT_EQ(text.status, 0) << text.output;
    EXPECT_NE(text.output.find("the capture itself dropped 7 frames"), std::string::npos)
        << text.output.substr(0, 400);
    ASSERT_EQ(json.status, 0);
    EXPECT_EQ(nlohmann::json::parse(json.output).value("capture_dropped", -1), 7);
    ASSERT_EQ(plain.status, 0);
    EXPECT_EQ(nlohmann::json::parse(plain.output).value("capture_dropped", -1), 0);
}

} // namespace
} // namespace droce::trace::test
