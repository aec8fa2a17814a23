/* SPDX-License-Identifier: BSD-3-Clause */
// Engine cost without a NIC: two droce devices over the in-process sim fabric, on one core, real
// TSC time. RDMA WRITE 64 B message rate, 64 KiB bandwidth, and TSC cycles per packet spent in the
// requester side (device 0's poll: requester + completer) and the responder side (device 1's poll).
// Reference in the same run: the sim fabric alone moving the same frames (alloc, tx, rx, free), so
// the ratio engine/fabric is what the transport costs on top of moving frames.
//
// Capture cost: this file is built twice. engine_bench has the engine's capture seam (off unless a
// benchmark turns it on: BM_EngineWrite64BCapture writes every frame to a pcapng file through
// lib/capture); engine_bench_noseam is the same engine compiled with DROCE_CAPTURE_SEAM=0.
// bench/run runs BM_EngineWrite64B of both in turns and prints the ratios.
#include <benchmark/benchmark.h>

#include <x86intrin.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cc/dcqcn.h"
#include "engine/connect.h"
#include "engine/device.h"
#include "sim/fabric.h"
#if DROCE_CAPTURE_SEAM
#include "capture/capture.h"
#endif

namespace {

using namespace droce;

struct Rig {
    Clock clock = Clock::tsc();
    sim::Fabric fabric{&clock, [] {
                           sim::FabricConfig c;
                           c.pool_buffers = 8192;
                           c.buffer_capacity = 4608;
                           c.link_slots = 8192;
                           return c;
                       }()};
    std::unique_ptr<Device> dev[2];
    rc::Cq* cq[2] = {};
    rc::Qp* qp[2] = {};
    std::vector<std::uint8_t> src, dst;
    mem::Mr* src_mr = nullptr;
    mem::Mr* dst_mr = nullptr;

    std::vector<rc::Qp*> idle; ///< QPs in RTS that never carry traffic (BM_EngineWrite64BIdleQps)

    /** @p dcqcn: DCQCN on every QP (with the ports' line rate known, 100 Gb/s, so the pacer runs
     *  at the line even without congestion: the cost measured), or null: off. */
    explicit Rig(std::size_t bytes, std::uint32_t idle_qps = 0,
                 const cc::DcqcnProfile* dcqcn = nullptr)
        : src(bytes, 0x5a), dst(bytes, 0) {
        for (std::uint32_t e = 0; e < 2; ++e) {
            PortSpec ps{&fabric.port(e, 0), sim::Fabric::mac(e, 0),
                        gid_from_ipv4(10, 0, 0, static_cast<std::uint8_t>(e + 1)), 4096};
            if (dcqcn) ps.line_rate_mbps = 100'000;
            dev[e] = std::make_unique<Device>("droce" + std::to_string(e), clock,
                                              std::vector<PortSpec>{ps});
            dev[e]->set_dcqcn(dcqcn);
        }
        mem::Pd* pd[2];
        int err = 0;
        for (int e = 0; e < 2; ++e) {
            pd[e] = dev[e]->alloc_pd(&err);
            cq[e] = dev[e]->create_cq(8192, &err);
            qp[e] =
                dev[e]->create_qp(pd[e], cq[e], cq[e], rc::QpCap{1024, 16, 1, 1, 0}, false, &err);
        }
        src_mr = dev[0]->reg_mr(pd[0], src.data(), src.size(), rc::kAccessLocalWrite, &err);
        dst_mr = dev[1]->reg_mr(pd[1], dst.data(), dst.size(),
                                rc::kAccessLocalWrite | rc::kAccessRemoteWrite, &err);
        for (int e = 0; e < 2; ++e) {
            RcConnectParams c;
            c.qp_access_flags = rc::kAccessRemoteWrite;
            c.path_mtu = rc::Mtu::mtu4096;
            c.dest_qp_num = qp[1 - e]->qpn;
            c.max_dest_rd_atomic = 16;
            c.min_rnr_timer = 1;
            c.ah_attr.dgid = gid_from_ipv4(10, 0, 0, static_cast<std::uint8_t>(2 - e));
            c.ah_attr.dmac = sim::Fabric::mac(static_cast<std::uint32_t>(1 - e), 0);
            c.max_rd_atomic = 16;
            connect_rc(*dev[e], qp[e], c);
        }
        // Idle QPs on the sending device, connected (RTS) to QPNs nobody uses: they have no WQEs,
        // so they must cost the engine nothing per pass.
        for (std::uint32_t i = 0; i < idle_qps; ++i) {
            rc::Qp* q =
                dev[0]->create_qp(pd[0], cq[0], cq[0], rc::QpCap{1, 1, 1, 1, 0}, false, &err);
            if (!q) break;
            RcConnectParams c;
            c.path_mtu = rc::Mtu::mtu4096;
            c.dest_qp_num = 0x100000 + i;
            c.ah_attr.dgid = gid_from_ipv4(10, 0, 0, 2);
            c.ah_attr.dmac = sim::Fabric::mac(1, 0);
            connect_rc(*dev[0], q, c);
            idle.push_back(q);
        }
    }
};

/** Posts RDMA WRITEs of @p size, every 16th signaled, keeping the SQ full, for the benchmark's
 * iterations. */
void run_writes(benchmark::State& state, std::size_t size, std::uint32_t idle_qps = 0,
                const cc::DcqcnProfile* dcqcn = nullptr, bool capture = false) {
    Rig rig(size, idle_qps, dcqcn);
    if (rig.idle.size() != idle_qps) {
        state.SkipWithError("could not create the idle QPs");
        return;
    }
#if DROCE_CAPTURE_SEAM
    // Every frame of both devices to a real file (the writer thread shares the 2 cores with this
    // one, as it would beside an engine thread), whole frames, the default ring.
    std::unique_ptr<capture::Capture> cap;
    const std::string cap_path =
        (std::filesystem::temp_directory_path() / "droce-engine-bench.pcapng").string();
    if (capture) {
        Device* devs[] = {rig.dev[0].get(), rig.dev[1].get()};
        std::string err;
        cap = capture::Capture::start(cap_path, devs, capture::CaptureOptions{}, &err);
        if (!cap) {
            state.SkipWithError(err.c_str());
            return;
        }
    }
#else
    if (capture) {
        state.SkipWithError("built without the capture seam");
        return;
    }
#endif
    state.counters["idle_qps"] = static_cast<double>(idle_qps);
    rc::SendWqe w;
    w.opcode = rc::WrOpcode::rdma_write;
    w.num_sge = 1;
    w.sg_list[0] = rc::Sge{reinterpret_cast<std::uintptr_t>(rig.src.data()),
                           static_cast<std::uint32_t>(size), rig.src_mr->lkey};
    w.remote_addr = reinterpret_cast<std::uintptr_t>(rig.dst.data());
    w.rkey = rig.dst_mr->rkey;
    std::uint64_t posted = 0, completed = 0;
    std::uint64_t req_cycles = 0, resp_cycles = 0;
    rc::Cqe cqes[64];
    const std::uint64_t pkts_per_msg = (size + 4095) / 4096;
    auto step = [&] {
        while (rig.qp[0]->sq.free_slots() > 0) {
            w.wr_id = posted;
            w.send_flags = (posted % 16 == 15) ? std::uint32_t{rc::kSendSignaled} : 0u;
            std::uint32_t bad;
            if (rig.dev[0]->post_send(rig.qp[0], &w, 1, &bad) != 0) break;
            ++posted;
        }
        std::uint64_t t0 = __rdtsc();
        rig.dev[0]->poll();
        std::uint64_t t1 = __rdtsc();
        rig.dev[1]->poll();
        std::uint64_t t2 = __rdtsc();
        req_cycles += t1 - t0;
        resp_cycles += t2 - t1;
        std::uint32_t n = rig.dev[0]->poll_cq(rig.cq[0], cqes, 64);
        completed += 16ull * n;
    };
    for (int i = 0; i < 2000; ++i)
        step(); // warm-up
    completed = 0;
    req_cycles = resp_cycles = 0;
    const auto sent0 = rig.dev[0]->total_counters()[Counter::sent_pkts];
    for (auto _ : state)
        step();
    const double pkts =
        static_cast<double>(rig.dev[0]->total_counters()[Counter::sent_pkts] - sent0);
    state.SetItemsProcessed(static_cast<std::int64_t>(completed));
    state.SetBytesProcessed(static_cast<std::int64_t>(completed * size));
    state.counters["msgs"] =
        benchmark::Counter(static_cast<double>(completed), benchmark::Counter::kIsRate);
    state.counters["Gbps"] = benchmark::Counter(static_cast<double>(completed * size) * 8 / 1e9,
                                                benchmark::Counter::kIsRate);
    state.counters["req_cycles_per_pkt"] = pkts > 0 ? static_cast<double>(req_cycles) / pkts : 0;
    state.counters["resp_cycles_per_pkt"] = pkts > 0 ? static_cast<double>(resp_cycles) / pkts : 0;
    state.counters["pkts_per_msg"] = static_cast<double>(pkts_per_msg);
    if (rig.dev[0]->total_counters()[Counter::retransmitted_pkts] != 0)
        state.SkipWithError("retransmissions on a lossless fabric");
#if DROCE_CAPTURE_SEAM
    if (cap) {
        const capture::CaptureStats cs = cap->stop();
        state.counters["capture_frames"] = static_cast<double>(cs.frames);
        // Frames the writer could not keep up with: left out of the file, never a stall.
        state.counters["capture_dropped"] = static_cast<double>(cs.dropped);
        state.counters["capture_MB"] = static_cast<double>(cs.bytes) / 1e6;
        std::remove(cap_path.c_str());
    }
#endif
}

void BM_EngineWrite64B(benchmark::State& state) {
    run_writes(state, 64);
}
/** The same with DCQCN on (NVIDIA profile) and no congestion: what the reaction point, the
 *  pacer at line rate and the NP checks cost per message (DCQCN issue: >= 0.95 of the above). */
void BM_EngineWrite64BDcqcn(benchmark::State& state) {
    run_writes(state, 64, 0, cc::profile_by_name("nvidia"));
}
#if DROCE_CAPTURE_SEAM
/** BM_EngineWrite64B with a live capture of both devices (lib/capture): what capture on costs. */
void BM_EngineWrite64BCapture(benchmark::State& state) {
    run_writes(state, 64, 0, nullptr, true);
}
#endif
void BM_EngineWrite64KiB(benchmark::State& state) {
    run_writes(state, 64 * 1024);
}
/** One busy QP beside rc::kMaxQp - 1 idle ones on the same device: compare with BM_EngineWrite64B.
 */
void BM_EngineWrite64BIdleQps(benchmark::State& state) {
    run_writes(state, 64, rc::kMaxQp - 1);
}

/** Reference: the fabric alone moving frames of @p frame bytes (alloc, fill header, tx, rx, free).
 */
void run_fabric(benchmark::State& state, std::size_t frame) {
    Clock clock = Clock::tsc();
    sim::FabricConfig c;
    c.pool_buffers = 8192;
    c.buffer_capacity = 4608;
    sim::Fabric fabric(&clock, c);
    PktBuf* bufs[32];
    std::uint64_t moved = 0;
    const auto dst = sim::Fabric::mac(1, 0);
    for (auto _ : state) {
        std::uint16_t n = fabric.port(0, 0).alloc_bulk(bufs, 32);
        for (std::uint16_t i = 0; i < n; ++i) {
            std::memcpy(bufs[i]->data, dst.data(), 6);
            std::memset(bufs[i]->data + 6, 0, 8);
            bufs[i]->len = static_cast<std::uint32_t>(frame);
        }
        std::uint16_t sent = fabric.port(0, 0).tx_burst(bufs, n);
        if (sent < n)
            fabric.port(0, 0).free_bulk(bufs + sent, static_cast<std::uint16_t>(n - sent));
        std::uint16_t r = fabric.port(1, 0).rx_burst(bufs, 32);
        fabric.port(1, 0).free_bulk(bufs, r);
        moved += r;
    }
    state.counters["frames"] =
        benchmark::Counter(static_cast<double>(moved), benchmark::Counter::kIsRate);
    state.SetBytesProcessed(static_cast<std::int64_t>(moved * frame));
}
void BM_FabricOnly124B(benchmark::State& state) {
    run_fabric(state, 14 + 20 + 8 + 12 + 16 + 64 + 4);
}
void BM_FabricOnly4170B(benchmark::State& state) {
    run_fabric(state, 14 + 20 + 8 + 12 + 16 + 4096 + 4);
}

BENCHMARK(BM_FabricOnly124B)->MinTime(1.0);
BENCHMARK(BM_EngineWrite64B)->MinTime(1.0);
BENCHMARK(BM_EngineWrite64BDcqcn)->MinTime(1.0);
BENCHMARK(BM_EngineWrite64BIdleQps)->MinTime(1.0);
#if DROCE_CAPTURE_SEAM
BENCHMARK(BM_EngineWrite64BCapture)->MinTime(1.0);
#endif
BENCHMARK(BM_FabricOnly4170B)->MinTime(1.0);
BENCHMARK(BM_EngineWrite64KiB)->MinTime(1.0);

} // namespace

BENCHMARK_MAIN();
