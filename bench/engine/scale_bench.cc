/* SPDX-License-Identifier: BSD-3-Clause */
// QP scale without a NIC: N requester QPs on one droce device, each connected to its own responder
// QP on a second device over the in-process sim fabric, all of them sending 64 B RDMA WRITEs at
// once, on one core, real TSC time. The figure is the aggregate message rate; bench/engine/scale
// divides it by the one-QP rate of the same run (issue 15: 16 K QPs lose at most 20 %, 1 000 QPs
// keep >= 0.7 x the one-QP rate).
//
// The offered load is the same whatever N is: kInFlight batches of 16 WRITEs (the last signaled)
// are outstanding at all times, and each signaled CQE gives the next batch to the next QP in turn,
// so with N >= kInFlight every QP has at most one batch in flight and each is touched once per N
// batches. What changes with N is only how many QPs share the engine: their QP state, WQEs and
// timers no longer fit any cache at 16 K QPs. (Giving every QP its own full window instead would
// put 1 M WRITEs in flight at 16 K QPs: the engine, not the QP count, would then be measured, and
// ACK timeouts would fire behind the queue.)
//
// DROCE_SCALE_OP=read: 64 B RDMA READs instead (the responder answers each from its READ state).
// One QP then holds at most 16 READs in flight (max_rd_atomic, as IBTA's initiator depth), not
// 1,024 as with WRITEs: the READ ratios divide by a one-QP rate with a smaller window.
#include <benchmark/benchmark.h>

#include <x86intrin.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/connect.h"
#include "engine/device.h"
#include "sim/fabric.h"

namespace {

using namespace droce;

constexpr std::uint32_t kBatch = 16;    ///< WRITEs per post_send call, the last one signaled
constexpr std::uint32_t kInFlight = 64; ///< batches outstanding in the whole run (1024 WRITEs)
constexpr std::size_t kMsg = 64;        ///< bytes per RDMA WRITE (or READ)

/** DROCE_SCALE_OP=read: the batches are RDMA READs; otherwise RDMA WRITEs. */
bool reads() {
    const char* op = std::getenv("DROCE_SCALE_OP");
    return op != nullptr && std::strcmp(op, "read") == 0;
}

struct ScaleRig {
    Clock clock = Clock::tsc();
    sim::Fabric fabric{&clock, [] {
                           sim::FabricConfig c;
                           c.pool_buffers = 16384;
                           c.buffer_capacity = 4608;
                           c.link_slots = 16384;
                           return c;
                       }()};
    std::unique_ptr<Device> dev[2];
    rc::Cq* cq[2] = {};
    std::vector<rc::Qp*> req; ///< requester QPs on dev[0], index = the wr_id's QP part
    std::vector<std::uint8_t> src, dst;
    mem::Mr* src_mr = nullptr;
    mem::Mr* dst_mr = nullptr;

    /** Builds @p n connected QP pairs; req.size() < n when the devices ran out of something. */
    /** Send queue depth for @p n QPs: room for every batch the QP can have in flight. */
    static std::uint32_t sq_depth(std::uint32_t n) { return kBatch * ((kInFlight + n - 1) / n); }

    explicit ScaleRig(std::uint32_t n) : src(4096, 0x5a), dst(4096, 0) {
        for (std::uint32_t e = 0; e < 2; ++e) {
            PortSpec ps{&fabric.port(e, 0), sim::Fabric::mac(e, 0),
                        gid_from_ipv4(10, 0, 0, static_cast<std::uint8_t>(e + 1)), 4096};
            dev[e] = std::make_unique<Device>("droce" + std::to_string(e), clock,
                                              std::vector<PortSpec>{ps});
        }
        mem::Pd* pd[2];
        int err = 0;
        for (int e = 0; e < 2; ++e) {
            pd[e] = dev[e]->alloc_pd(&err);
            cq[e] = dev[e]->create_cq(rc::kMaxCqe, &err);
        }
        src_mr = dev[0]->reg_mr(pd[0], src.data(), src.size(), rc::kAccessLocalWrite, &err);
        dst_mr = dev[1]->reg_mr(
            pd[1], dst.data(), dst.size(),
            rc::kAccessLocalWrite | rc::kAccessRemoteWrite | rc::kAccessRemoteRead, &err);
        for (std::uint32_t i = 0; i < n; ++i) {
            rc::Qp* a = dev[0]->create_qp(pd[0], cq[0], cq[0], rc::QpCap{sq_depth(n), 1, 1, 1, 0},
                                          false, &err);
            rc::Qp* b =
                dev[1]->create_qp(pd[1], cq[1], cq[1], rc::QpCap{1, 1, 1, 1, 0}, false, &err);
            if (!a || !b) break;
            rc::Qp* pair[2] = {a, b};
            for (int e = 0; e < 2; ++e) {
                RcConnectParams c;
                c.qp_access_flags = rc::kAccessRemoteWrite | rc::kAccessRemoteRead;
                c.path_mtu = rc::Mtu::mtu4096;
                c.dest_qp_num = pair[1 - e]->qpn;
                c.max_dest_rd_atomic = 16;
                c.min_rnr_timer = 1;
                c.ah_attr.dgid = gid_from_ipv4(10, 0, 0, static_cast<std::uint8_t>(2 - e));
                c.ah_attr.dmac = sim::Fabric::mac(static_cast<std::uint32_t>(1 - e), 0);
                c.max_rd_atomic = 16;
                // 1.07 s, not the default 67 ms: on this shared host a process is sometimes off
                // its core for longer than 67 ms, and every QP then in flight timed out together
                // (seen at 16 K QPs: 60 consecutive QPs, 1.5 - 5 ms past the deadline).
                c.timeout = 18;
                connect_rc(*dev[e], pair[e], c);
            }
            req.push_back(a);
        }
    }
};

/** The non-zero counters of both devices, on stderr: why a run went wrong. */
void print_counters(ScaleRig& rig) {
    for (int e = 0; e < 2; ++e) {
        const auto c = rig.dev[e]->total_counters();
        for (std::size_t i = 0; i < kNumCounters; ++i)
            if (const auto v = c[static_cast<Counter>(i)])
                std::fprintf(stderr, "  dev%d %s %llu\n", e, std::string(kCounterNames[i]).c_str(),
                             static_cast<unsigned long long>(v));
    }
}

/** Arg(0) = number of QP pairs, all busy. */
void BM_EngineWrite64BQps(benchmark::State& state) {
    const auto n = static_cast<std::uint32_t>(state.range(0));
    const auto setup0 = std::chrono::steady_clock::now();
    ScaleRig rig(n);
    // Control path: creating and connecting the n QP pairs (both devices), per pair.
    state.counters["setup_us_per_qp"] =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - setup0)
            .count() /
        n;
    if (rig.req.size() != n) {
        state.SkipWithError("could not create the QPs");
        return;
    }
    std::array<rc::SendWqe, kBatch> batch{};
    for (std::uint32_t i = 0; i < kBatch; ++i) {
        rc::SendWqe& w = batch[i];
        w.opcode = reads() ? rc::WrOpcode::rdma_read : rc::WrOpcode::rdma_write;
        w.num_sge = 1;
        w.sg_list[0] = rc::Sge{reinterpret_cast<std::uintptr_t>(rig.src.data()),
                               static_cast<std::uint32_t>(kMsg), rig.src_mr->lkey};
        w.remote_addr = reinterpret_cast<std::uintptr_t>(rig.dst.data());
        w.rkey = rig.dst_mr->rkey;
        w.send_flags = i == kBatch - 1 ? std::uint32_t{rc::kSendSignaled} : 0u;
    }
    std::uint64_t failed_posts = 0;
    std::uint32_t next_qp = 0;
    auto post_batch = [&] {
        std::uint32_t bad = 0;
        if (rig.dev[0]->post_send(rig.req[next_qp], batch.data(), kBatch, &bad) != 0)
            ++failed_posts;
        next_qp = next_qp + 1 == n ? 0 : next_qp + 1;
    };
    for (std::uint32_t b = 0; b < kInFlight; ++b)
        post_batch();

    std::uint64_t completed = 0, errors = 0;
    rc::WcStatus first_bad{};
    std::array<rc::Cqe, 64> cqes;
    auto step = [&] {
        rig.dev[0]->poll();
        rig.dev[1]->poll();
        const std::uint32_t got = rig.dev[0]->poll_cq(rig.cq[0], cqes.data(), cqes.size());
        for (std::uint32_t k = 0; k < got; ++k) {
            if (cqes[k].status != rc::WcStatus::success) {
                if (!errors) first_bad = cqes[k].status;
                ++errors;
                continue;
            }
            completed += kBatch;
            post_batch();
        }
    };
    // Warm-up: every QP has carried two batches (16 K QPs: ~0.5 M WRITEs).
    while (completed < std::uint64_t{n} * kBatch * 2 + 20'000)
        step();
    completed = 0;
    const auto sent0 = rig.dev[0]->total_counters()[Counter::sent_pkts];
    for (auto _ : state)
        step();
    state.counters["qps"] = n;
    state.SetLabel(reads() ? "read" : "write");
    state.counters["msgs"] =
        benchmark::Counter(static_cast<double>(completed), benchmark::Counter::kIsRate);
    state.counters["pkts"] =
        static_cast<double>(rig.dev[0]->total_counters()[Counter::sent_pkts] - sent0);
    const bool retransmitted = rig.dev[0]->total_counters()[Counter::retransmitted_pkts] != 0;
    if (errors != 0 || failed_posts != 0 || retransmitted) {
        std::fprintf(stderr, "%u QPs: %llu error completions (first: %s), %llu refused posts\n", n,
                     static_cast<unsigned long long>(errors),
                     std::string(rc::to_string(first_bad)).c_str(),
                     static_cast<unsigned long long>(failed_posts));
        print_counters(rig);
        state.SkipWithError(retransmitted ? "retransmissions on a lossless fabric"
                                          : "error completions or refused posts");
    }
}

BENCHMARK(BM_EngineWrite64BQps)->Arg(1)->Arg(1000)->Arg(16384)->MinTime(1.0);

} // namespace

BENCHMARK_MAIN();
