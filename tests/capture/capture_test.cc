/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * Live capture (lib/capture) end to end: config/demo.ini's two devices on droce_ringpair ports
 * (DPDK net_ring: payloads of 2 KiB and more go by reference), brought up by droce::Runtime with
 * `capture = FILE` on both devices, polled from the test thread.
 *
 *  - VerifiedTransferIsInTheFile: RC WRITEs and a SEND from droce_a to droce_b and a WRITE between
 *    two QPs of droce_a (loopback queue), every byte verified; then every data packet (by PSN) is
 *    in the file as sent on droce_a/port1 and as received on droce_b/port1 (loopback: both on
 *    droce_a/port1, commented "loopback"), whole (the ICRC checks) and with the payload the
 *    application wrote, by-reference frames included.
 *  - TsharkReadsIt: tshark decodes the file: no malformed packet, no expert item of warning or
 *    error severity, every RoCE frame as InfiniBand BTH, interface names and directions as written.
 *  - FullRingDropsAndCounts: a capture into a FIFO nobody reads (a disk that never keeps up), 8
 *    ring slots: the transfer finishes, the frames that found the ring full are counted
 *    (capture_dropped) and reported, and the file holds exactly the frames counted as captured.
 */
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include <rte_lcore.h>

#include "dpdk/eal.h"
#include "engine/connect.h"
#include "interop_util.h"
#include "runtime/runtime.h"
#include "wire/packet.h"

namespace droce {
namespace {

using interop::run_command;
using interop::shell_quote;

// ---- a small pcapng reader (the file's layout, read back independently of the writer) ----

struct Interface {
    std::string name, description;
    std::uint32_t snaplen = 0;
    std::uint64_t ifrecv = 0, ifdrop = 0; ///< from its statistics block
    bool has_stats = false;
};
struct Packet {
    std::uint32_t iface = 0;
    std::uint64_t ts = 0;
    std::uint32_t orig_len = 0;
    std::vector<std::uint8_t> data;
    std::uint32_t flags = 0;
    std::string comment;
};
struct PcapngFile {
    bool ok = false;
    std::string error;
    std::vector<Interface> ifaces;
    std::vector<Packet> packets;
};

std::uint32_t rd32(const std::uint8_t* p) {
    std::uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}
std::uint16_t rd16(const std::uint8_t* p) {
    std::uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
}

/** Calls fn(code, value) for the options in [p, end). */
template <typename Fn>
void options(const std::uint8_t* p, const std::uint8_t* end, Fn&& fn) {
    while (p + 4 <= end) {
        const std::uint16_t code = rd16(p), len = rd16(p + 2);
        if (code == 0 || p + 4 + len > end) return;
        fn(code, std::span<const std::uint8_t>(p + 4, len));
        p += 4 + ((len + 3u) & ~3u);
    }
}

PcapngFile read_pcapng(const std::string& path) {
    PcapngFile f;
    std::ifstream in(path, std::ios::binary);
    std::vector<std::uint8_t> b((std::istreambuf_iterator<char>(in)), {});
    std::size_t off = 0;
    auto str = [](std::span<const std::uint8_t> v) { return std::string(v.begin(), v.end()); };
    while (off + 12 <= b.size()) {
        const std::uint8_t* p = b.data() + off;
        const std::uint32_t type = rd32(p), len = rd32(p + 4);
        if (len < 12 || len % 4 || off + len > b.size() || rd32(p + len - 4) != len) {
            f.error = "bad block at " + std::to_string(off);
            return f;
        }
        const std::uint8_t* end = p + len - 4;
        if (type == 0x0A0D0D0A) {
            if (rd32(p + 8) != 0x1A2B3C4D) {
                f.error = "byte-order magic";
                return f;
            }
        } else if (type == 1) {
            Interface i;
            i.snaplen = rd32(p + 12);
            options(p + 16, end, [&](std::uint16_t c, std::span<const std::uint8_t> v) {
                if (c == 2) i.name = str(v);
                if (c == 3) i.description = str(v);
            });
            f.ifaces.push_back(i);
        } else if (type == 6) {
            Packet k;
            k.iface = rd32(p + 8);
            k.ts = (std::uint64_t{rd32(p + 12)} << 32) | rd32(p + 16);
            const std::uint32_t cap = rd32(p + 20);
            k.orig_len = rd32(p + 24);
            k.data.assign(p + 28, p + 28 + cap);
            options(p + 28 + ((cap + 3u) & ~3u), end,
                    [&](std::uint16_t c, std::span<const std::uint8_t> v) {
                        if (c == 2 && v.size() == 4) k.flags = rd32(v.data());
                        if (c == 1) k.comment = str(v);
                    });
            f.packets.push_back(std::move(k));
        } else if (type == 5) {
            const std::uint32_t id = rd32(p + 8);
            if (id < f.ifaces.size()) {
                Interface& i = f.ifaces[id];
                i.has_stats = true;
                options(p + 20, end, [&](std::uint16_t c, std::span<const std::uint8_t> v) {
                    std::uint64_t x = 0;
                    if (v.size() == 8) std::memcpy(&x, v.data(), 8);
                    if (c == 4) i.ifrecv = x;
                    if (c == 5) i.ifdrop = x;
                });
            }
        }
        off += len;
    }
    f.ok = off == b.size() && !b.empty();
    if (!f.ok && f.error.empty()) f.error = "trailing bytes";
    return f;
}

// ---- the runtime, once per process (one EAL) ----

interop::ScratchDir* g_dir = nullptr;
Runtime* g_rt = nullptr;
std::string g_config_capture;

std::string read_text(const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

class RuntimeEnv : public ::testing::Environment {
  public:
    void SetUp() override {
        g_dir = new interop::ScratchDir();
        ASSERT_TRUE(g_dir->ok());
        g_config_capture = g_dir->file("config.pcapng");
        // demo.ini with its own EAL file prefix and `capture = FILE` in both [deviceN] sections.
        std::string text = read_text(std::string(DROCE_SOURCE_DIR) + "/config/demo.ini");
        ASSERT_FALSE(text.empty());
        const std::string prefix = "--file-prefix=droce-demo";
        const auto at = text.find(prefix);
        ASSERT_NE(at, std::string::npos);
        text.replace(at, prefix.size(),
                     "--file-prefix=droce-capture-test-" + std::to_string(::getpid()));
        for (const char* dev : {"name = droce_a\n", "name = droce_b\n"}) {
            const auto p = text.find(dev);
            ASSERT_NE(p, std::string::npos);
            text.insert(p + std::strlen(dev), "capture = " + g_config_capture + "\n");
        }
        const std::string cfg = g_dir->file("capture.ini");
        std::ofstream(cfg) << text;
        std::string err;
        RuntimeOptions ro;
        ro.devices = {0, 1};
        g_rt = Runtime::create(cfg, ro, &err).release();
        ASSERT_NE(g_rt, nullptr) << err;
    }
    void TearDown() override {
        delete g_rt;
        delete g_dir;
        dpdk::eal_release(); // the EAL's runtime directory (empty under --no-shconf) goes too
    }
};
::testing::Environment* const g_env = ::testing::AddGlobalTestEnvironment(new RuntimeEnv);

std::vector<std::uint8_t> pattern(std::size_t n, std::uint32_t seed) {
    std::vector<std::uint8_t> v(n);
    std::mt19937 rng(seed);
    for (auto& x : v)
        x = static_cast<std::uint8_t>(rng());
    return v;
}

/** Two RC QPs connected to each other: a on device da, b on device db (port 1 each). */
struct Conn {
    Device* dev[2] = {};
    mem::Pd* pd[2] = {};
    rc::Cq* cq[2] = {};
    rc::Qp* qp[2] = {};
    std::vector<rc::Cqe> cqes[2];

    Conn(unsigned da, unsigned db) {
        dev[0] = &g_rt->device(da);
        dev[1] = &g_rt->device(db);
        for (int i = 0; i < 2; ++i) {
            int e = 0;
            pd[i] = dev[i]->alloc_pd(&e);
            cq[i] = dev[i]->create_cq(8192, &e);
            qp[i] = dev[i]->create_qp(pd[i], cq[i], cq[i],
                                      rc::QpCap{512, 512, rc::kMaxSge, rc::kMaxSge, 64}, false, &e);
            EXPECT_NE(qp[i], nullptr) << e;
        }
        for (int i = 0; i < 2; ++i) {
            RcConnectParams c;
            c.qp_access_flags = rc::kAccessRemoteWrite | rc::kAccessRemoteRead;
            c.path_mtu = rc::Mtu::mtu4096;
            c.dest_qp_num = qp[1 - i]->qpn;
            c.rq_psn = 100u * static_cast<std::uint32_t>(2 - i);
            c.sq_psn = 100u * static_cast<std::uint32_t>(1 + i);
            c.max_dest_rd_atomic = 16;
            c.min_rnr_timer = 1;
            c.ah_attr.dgid = dev[1 - i]->port(0).gid;
            c.timeout = 18;
            c.max_rd_atomic = 16;
            EXPECT_EQ(connect_rc(*dev[i], qp[i], c), 0);
        }
    }
    mem::Mr* reg(int side, std::vector<std::uint8_t>& buf) {
        int e = 0;
        mem::Mr* mr = dev[side]->reg_mr(
            pd[side], buf.data(), buf.size(),
            rc::kAccessLocalWrite | rc::kAccessRemoteWrite | rc::kAccessRemoteRead, &e);
        EXPECT_NE(mr, nullptr);
        return mr;
    }
    /** Polls every device of the runtime until @p n CQEs arrived on side @p side (or 20 s). */
    bool run_until(int side, std::size_t n) {
        const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (std::chrono::steady_clock::now() < end) {
            for (unsigned d = 0; d < g_rt->num_devices(); ++d)
                g_rt->device(d).poll();
            rc::Cqe c[32];
            for (int i = 0; i < 2; ++i)
                if (std::uint32_t k = dev[i]->poll_cq(cq[i], c, 32))
                    cqes[i].insert(cqes[i].end(), c, c + k);
            if (cqes[side].size() >= n) return true;
        }
        return false;
    }
    rc::SendWqe write(std::uint64_t id, std::vector<std::uint8_t>& src, mem::Mr* smr,
                      std::vector<std::uint8_t>& dst, mem::Mr* dmr) {
        rc::SendWqe w;
        w.wr_id = id;
        w.opcode = rc::WrOpcode::rdma_write;
        w.send_flags = rc::kSendSignaled;
        w.remote_addr = reinterpret_cast<std::uintptr_t>(dst.data());
        w.rkey = dmr->rkey;
        w.num_sge = 1;
        w.sg_list[0] = rc::Sge{reinterpret_cast<std::uintptr_t>(src.data()),
                               static_cast<std::uint32_t>(src.size()), smr->lkey};
        return w;
    }
};

/** A data packet as found in the file. */
struct Seen {
    std::uint32_t dest_qp = 0;
    std::uint32_t psn = 0;
    std::string iface;
    std::uint32_t dir = 0; ///< epb_flags direction: 1 in, 2 out
    bool loopback = false;
    auto operator<=>(const Seen&) const = default;
};

/** Lcores given to threads the EAL did not start (rte_thread_register). */
unsigned non_eal_lcores() {
    unsigned n = 0;
    for (unsigned i = 0; i < RTE_MAX_LCORE; ++i)
        n += rte_eal_lcore_role(i) == ROLE_NON_EAL;
    return n;
}

TEST(Runtime, EngineThreadsHaveLcoresOfTheirOwnWhileTheyRun) {
    // With the EAL up, each engine thread registers (mempool caches serve it) and gives its lcore
    // id back when it stops: an engine restarted a hundred times must not run out of ids.
    ASSERT_EQ(non_eal_lcores(), 0u);
    for (int round = 0; round < 3; ++round) {
        ASSERT_TRUE(g_rt->start_engines(EngineMode::per_device));
        const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (non_eal_lcores() < 2 && std::chrono::steady_clock::now() < end)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        EXPECT_EQ(non_eal_lcores(), 2u) << "round " << round;
        g_rt->stop_engines();
        EXPECT_EQ(non_eal_lcores(), 0u) << "round " << round;
    }
    ASSERT_TRUE(g_rt->start_engines(EngineMode::shared));
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (non_eal_lcores() < 1 && std::chrono::steady_clock::now() < end)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_EQ(non_eal_lcores(), 1u);
    g_rt->stop_engines();
    EXPECT_EQ(non_eal_lcores(), 0u);
}

TEST(Capture, VerifiedTransferIsInTheFile) {
    ASSERT_TRUE(g_rt->capturing()) << "the config's capture keys started no capture";
    Device& a = g_rt->device(0);
    Device& b = g_rt->device(1);
    Conn ab(0, 1);
    Conn lo(0, 0); // two QPs of droce_a: the loopback queue
    ASSERT_EQ(a.tx_by_reference_min(0), rc::kTxByRefMinPayload) << "net_ring sends by reference";

    // Three WRITEs of 17 packets (64 KiB + 100 at a 4096 path MTU), one SEND of 3, from a to b.
    constexpr std::size_t kWrite = 65536 + 100;
    std::vector<std::vector<std::uint8_t>> src, dst;
    for (int i = 0; i < 3; ++i) {
        src.push_back(pattern(kWrite, 10 + i));
        dst.emplace_back(kWrite, 0);
    }
    std::vector<std::uint8_t> send_src = pattern(10000, 99), send_dst(10000, 0);
    std::vector<std::uint8_t> lo_src = pattern(8192, 77), lo_dst(8192, 0);
    std::vector<rc::SendWqe> wrs;
    for (int i = 0; i < 3; ++i)
        wrs.push_back(ab.write(i, src[i], ab.reg(0, src[i]), dst[i], ab.reg(1, dst[i])));
    rc::RecvWqe r;
    r.wr_id = 50;
    r.num_sge = 1;
    r.sg_list[0] = rc::Sge{reinterpret_cast<std::uintptr_t>(send_dst.data()), 10000,
                           ab.reg(1, send_dst)->lkey};
    std::uint32_t bad = 0;
    ASSERT_EQ(b.post_recv(ab.qp[1], &r, 1, &bad), 0);
    rc::SendWqe s;
    s.wr_id = 3;
    s.opcode = rc::WrOpcode::send;
    s.send_flags = rc::kSendSignaled;
    s.num_sge = 1;
    s.sg_list[0] = rc::Sge{reinterpret_cast<std::uintptr_t>(send_src.data()), 10000,
                           ab.reg(0, send_src)->lkey};
    wrs.push_back(s);
    const std::uint64_t zc_before = a.counters()[Counter::tx_zc_pkts];
    ASSERT_EQ(a.post_send(ab.qp[0], wrs.data(), static_cast<std::uint32_t>(wrs.size()), &bad), 0);
    rc::SendWqe lw = lo.write(9, lo_src, lo.reg(0, lo_src), lo_dst, lo.reg(1, lo_dst));
    ASSERT_EQ(a.post_send(lo.qp[0], &lw, 1, &bad), 0);

    ASSERT_TRUE(ab.run_until(0, 4)) << "WRITEs and SEND not completed";
    ASSERT_TRUE(ab.run_until(1, 1)) << "SEND not received";
    ASSERT_TRUE(lo.run_until(0, 1)) << "loopback WRITE not completed";
    for (const auto& c : ab.cqes[0])
        EXPECT_EQ(c.status, rc::WcStatus::success);
    for (int i = 0; i < 3; ++i)
        EXPECT_EQ(src[i], dst[i]) << "WRITE " << i;
    EXPECT_EQ(send_src, send_dst);
    EXPECT_EQ(lo_src, lo_dst);
    EXPECT_GT(a.counters()[Counter::tx_zc_pkts], zc_before) << "no frame went by reference";
    EXPECT_GT(a.counter_registry().value("capture", "capture_frames"), 0u);
    EXPECT_EQ(a.counter_registry().value("capture", "capture_dropped"), 0u);

    const capture::CaptureStats st = g_rt->stop_capture(false);
    EXPECT_EQ(st.dropped, 0u);
    EXPECT_EQ(st.error, 0);
    EXPECT_GT(st.frames, 0u);
    EXPECT_EQ(a.counter_registry().value("capture", "capture_frames"), 0u) << "block unlisted";

    const PcapngFile f = read_pcapng(g_config_capture);
    ASSERT_TRUE(f.ok) << f.error;
    ASSERT_EQ(f.ifaces.size(), 8u);
    for (unsigned d = 0; d < 2; ++d)
        for (unsigned p = 0; p < 4; ++p) {
            const Interface& i = f.ifaces[d * 4 + p];
            const std::string dev = d == 0 ? "droce_a" : "droce_b";
            EXPECT_EQ(i.name, dev + "/port" + std::to_string(p + 1));
            EXPECT_NE(i.description.find("10.0." + std::to_string(p) + "." + std::to_string(d + 1)),
                      std::string::npos)
                << i.description;
            EXPECT_TRUE(i.has_stats);
            EXPECT_EQ(i.ifdrop, 0u);
        }
    EXPECT_EQ(f.packets.size(), st.frames);

    // Every data packet, by (dest QP, PSN, interface, direction); payload compared with what the
    // application wrote.
    std::set<Seen> seen;
    std::map<std::uint32_t, std::uint64_t> sent_ts, rcvd_ts; ///< PSN -> timestamp, a to b
    std::size_t by_ref_sized = 0;
    for (const Packet& k : f.packets) {
        ASSERT_LT(k.iface, f.ifaces.size());
        EXPECT_EQ(k.data.size(), k.orig_len) << "whole frames by default";
        EXPECT_TRUE(k.flags == 1 || k.flags == 2) << k.flags;
        wire::ParsedFrame pf;
        if (wire::parse_frame(k.data, pf) != wire::RejectReason::ok || !pf.bth) continue;
        EXPECT_TRUE(pf.icrc_checked && pf.icrc_wire == pf.icrc_computed) << "frame not whole";
        if (pf.payload.empty()) continue;
        const std::uint32_t qpn = pf.bth->dest_qp();
        const std::uint32_t psn = pf.bth->psn().value();
        seen.insert(Seen{qpn, psn, f.ifaces[k.iface].name, k.flags, k.comment == "loopback"});
        if (qpn == ab.qp[1]->qpn && k.comment != "loopback")
            (k.flags == 2 ? sent_ts : rcvd_ts)[psn] = k.ts;
        if (pf.payload.size() >= rc::kTxByRefMinPayload) ++by_ref_sized;
        // Payload check: which message, which offset (4096 bytes per packet).
        const std::vector<std::uint8_t>* msg = nullptr;
        std::uint32_t first = 0;
        if (qpn == ab.qp[1]->qpn) {
            const std::uint32_t i = (psn - 100) / 17; // the three WRITEs, then the SEND
            msg = i < 3 ? &src[i] : &send_src;
            first = 100 + 17 * std::min<std::uint32_t>(i, 3);
        } else if (qpn == lo.qp[1]->qpn) {
            msg = &lo_src;
            first = 100;
        }
        ASSERT_NE(msg, nullptr) << "data packet for QP " << qpn;
        const std::size_t off = std::size_t{psn - first} * 4096;
        ASSERT_LE(off + pf.payload.size(), msg->size());
        EXPECT_TRUE(std::equal(pf.payload.begin(), pf.payload.end(), msg->begin() + off))
            << "payload of PSN " << psn;
    }
    EXPECT_GT(by_ref_sized, 0u);
    for (std::uint32_t psn = 100; psn < 100 + 3 * 17 + 3; ++psn) {
        EXPECT_TRUE(seen.count(Seen{ab.qp[1]->qpn, psn, "droce_a/port1", 2, false}))
            << "sent PSN " << psn;
        EXPECT_TRUE(seen.count(Seen{ab.qp[1]->qpn, psn, "droce_b/port1", 1, false}))
            << "received PSN " << psn;
    }
    for (std::uint32_t psn = 100; psn < 102; ++psn) {
        EXPECT_TRUE(seen.count(Seen{lo.qp[1]->qpn, psn, "droce_a/port1", 2, true}))
            << "loopback sent PSN " << psn;
        EXPECT_TRUE(seen.count(Seen{lo.qp[1]->qpn, psn, "droce_a/port1", 1, true}))
            << "loopback received PSN " << psn;
    }
    // One time line for both devices: a packet is stamped received (on b) no earlier than sent
    // (on a), and within the run.
    ASSERT_EQ(sent_ts.size(), rcvd_ts.size());
    for (const auto& [psn, ts] : sent_ts) {
        EXPECT_GE(rcvd_ts[psn], ts) << "PSN " << psn << " received before it was sent";
        EXPECT_LT(rcvd_ts[psn] - ts, 1'000'000'000u) << "PSN " << psn;
    }
    // Nothing else carried data (no retransmissions expected on a ring pair).
    EXPECT_EQ(seen.size(), 2u * (3 * 17 + 3) + 2u * 2);
}

TEST(Capture, TsharkReadsIt) {
    if (run_command("tshark --version >/dev/null 2>&1").status != 0)
        GTEST_SKIP() << "tshark is not installed";
    const PcapngFile f = read_pcapng(g_config_capture);
    ASSERT_TRUE(f.ok) << "run VerifiedTransferIsInTheFile first: " << f.error;
    std::filesystem::create_directory(g_dir->file("wireshark"));
    // As tests/interop/tshark_test.cc: a private configuration, and the heuristic dissectors that
    // guess at protocols inside InfiniBand payloads (RPC-over-RDMA, SMB Direct ...) turned off so
    // that droce's random test pattern is not judged as one of them.
    std::string tshark = "WIRESHARK_CONFIG_DIR=" + shell_quote(g_dir->file("wireshark")) +
                         " tshark -n -r " + shell_quote(g_config_capture);
    const interop::CommandResult h = run_command("tshark -G heuristic-decodes 2>/dev/null");
    for (const std::string& row : interop::lines(h.out)) {
        const auto cols = interop::split(row, '\t');
        if (cols.size() == 3 && cols[0] == "infiniband.payload" && cols[2] == "T" &&
            cols[1] != "ethertype")
            tshark += " --disable-protocol " + shell_quote(cols[1]);
    }
    const interop::CommandResult bad = run_command(
        tshark + " -Y '_ws.malformed || _ws.expert.severity >= warning' -T fields -e frame.number"
                 " 2>/dev/null");
    EXPECT_EQ(bad.status, 0);
    EXPECT_EQ(bad.out, "") << "malformed or expert warnings in frames";
    const interop::CommandResult ex = run_command(tshark + " -q -z expert,warn 2>/dev/null");
    EXPECT_EQ(ex.status, 0);
    EXPECT_EQ(ex.out.find("Errors ("), std::string::npos) << ex.out;
    EXPECT_EQ(ex.out.find("Warnings ("), std::string::npos) << ex.out;

    // Every RoCE frame decodes as InfiniBand (BTH), with the interface and direction written.
    const interop::CommandResult ib = run_command(
        tshark + " -T fields -E separator=, -e frame.interface_name -e frame.packet_flags_direction"
                 " -e infiniband.bth.opcode -e udp.dstport 2>/dev/null");
    ASSERT_EQ(ib.status, 0) << ib.out;
    const auto rows = interop::lines(ib.out);
    ASSERT_EQ(rows.size(), f.packets.size());
    std::size_t roce = 0;
    for (std::size_t i = 0; i < rows.size(); ++i) {
        const auto c = interop::split(rows[i], ',');
        ASSERT_EQ(c.size(), 4u) << rows[i];
        EXPECT_EQ(c[0], f.ifaces[f.packets[i].iface].name);
        EXPECT_EQ(std::stoul(c[1], nullptr, 16), f.packets[i].flags) << rows[i];
        if (c[3] == "4791") {
            ++roce;
            EXPECT_FALSE(c[2].empty()) << "RoCE frame " << i + 1 << " not decoded as BTH";
        }
    }
    EXPECT_GT(roce, 100u);
}

TEST(Capture, FullRingDropsAndCounts) {
    (void)g_rt->stop_capture(false);
    const std::string fifo = g_dir->file("slow.pcapng");
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    // A reader that exists (so open(O_WRONLY) does not wait) but reads nothing until the end: the
    // writer thread blocks on a full pipe, as on a disk that cannot keep up.
    const int rfd = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
    ASSERT_GE(rfd, 0);
    capture::CaptureOptions co;
    co.ring_slots = 8;
    ASSERT_EQ(g_rt->start_capture(fifo, co), "");
    Device& a = g_rt->device(0);

    Conn ab(0, 1);
    constexpr std::size_t kMsg = 65536;
    constexpr int kMsgs = 100; // 1600 data packets and their ACKs: far more than 8 slots + a pipe
    std::vector<std::uint8_t> src = pattern(kMsg, 5), dst(kMsg, 0);
    mem::Mr* smr = ab.reg(0, src);
    mem::Mr* dmr = ab.reg(1, dst);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kMsgs; ++i) {
        rc::SendWqe w = ab.write(static_cast<std::uint64_t>(i), src, smr, dst, dmr);
        std::uint32_t bad = 0;
        ASSERT_EQ(a.post_send(ab.qp[0], &w, 1, &bad), 0);
        ASSERT_TRUE(ab.run_until(0, static_cast<std::size_t>(i) + 1)) << "stalled at " << i;
    }
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(src, dst);
    ASSERT_EQ(ab.cqes[0].size(), static_cast<std::size_t>(kMsgs));
    for (const auto& c : ab.cqes[0])
        EXPECT_EQ(c.status, rc::WcStatus::success);
    const std::uint64_t dropped = a.counter_registry().value("capture", "capture_dropped");
    EXPECT_GT(dropped, 0u) << "the ring never filled";
    EXPECT_LT(secs, 15.0);
    std::printf(
        "full ring: %d WRITEs of %zu bytes in %.3f s, %llu frames dropped from the capture\n",
        kMsgs, kMsg, secs, static_cast<unsigned long long>(dropped));

    // Now read the FIFO to its end while the capture stops (the writer flushes into it).
    ::fcntl(rfd, F_SETFL, 0);
    const std::string copy = g_dir->file("slow-copy.pcapng");
    std::thread reader([&] {
        std::ofstream out(copy, std::ios::binary);
        char buf[65536];
        for (ssize_t n; (n = ::read(rfd, buf, sizeof buf)) > 0;)
            out.write(buf, n);
    });
    const capture::CaptureStats st = g_rt->stop_capture(false);
    reader.join();
    ::close(rfd);
    EXPECT_GE(st.dropped, dropped);
    EXPECT_EQ(st.error, 0);
    const std::string line = capture::describe(fifo, st);
    EXPECT_NE(line.find(std::to_string(st.dropped) + " dropped"), std::string::npos) << line;

    const PcapngFile f = read_pcapng(copy);
    ASSERT_TRUE(f.ok) << f.error;
    EXPECT_EQ(f.packets.size(), st.frames) << "every frame counted as captured is in the file";
    std::uint64_t recv = 0, drop = 0;
    for (const Interface& i : f.ifaces) {
        recv += i.ifrecv;
        drop += i.ifdrop;
    }
    EXPECT_EQ(drop, st.dropped);
    EXPECT_EQ(recv, st.frames + st.dropped);
}

} // namespace
} // namespace droce
