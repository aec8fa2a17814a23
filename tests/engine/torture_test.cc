/* SPDX-License-Identifier: BSD-3-Clause */
// A random mix of SEND, WRITE, READ and atomics on several QPs in both directions, over a fabric
// with 1 % loss, 1 % reorder, 0.5 % duplication and 0.1 % corruption. Every byte and every atomic
// result is verified; every WQE completes exactly once, successfully, in posting order. Bounded
// here (DROCE_TORTURE_OPS raises the count for a longer run).
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>

#include "two_engines.h"

namespace droce::test {
namespace {

using rc::WcStatus;
using rc::WrOpcode;

struct Expect {
    WrOpcode op;
    std::size_t len = 0;
    std::size_t src_off = 0; ///< offset in the requester's buffer
    std::size_t dst_off = 0; ///< offset in the responder's buffer
    std::uint64_t atomic_expected = 0;
};

std::uint32_t ops_per_qp() {
    const char* env = std::getenv("DROCE_TORTURE_OPS");
    return env ? static_cast<std::uint32_t>(std::strtoul(env, nullptr, 10)) : 150;
}

TEST(Torture, RandomMixOverAnImpairedFabricCompletesExactlyOnceInOrder) {
    TwoEngines t(2024);
    sim::LinkConfig link;
    link.loss = 0.01;
    link.reorder = 0.01;
    link.reorder_max_frames = 4;
    link.duplicate = 0.005;
    link.corrupt = 0.001;
    t.fabric.set_all_links(link);

    constexpr int kQpsPerSide = 3;
    constexpr std::size_t kSlot = 64 * 1024; // each WQE owns one slot of the buffers
    const std::uint32_t kOps = ops_per_qp();
    const std::size_t kBufBytes = kSlot * kOps;
    QpOptions o;
    o.mtu = rc::Mtu::mtu1024;
    o.timeout = 6; // 262 us: short, so lost tails recover quickly in virtual time
    o.min_rnr_timer = 1;

    struct Flow {
        int side;
        rc::Qp* qp;
        rc::Qp* peer;
        std::unique_ptr<Buffer> local;
        std::unique_ptr<Buffer> remote;
        std::unique_ptr<Buffer> counter; ///< responder's 8-byte FETCH_ADD target
        std::vector<Expect> expect;
        std::uint64_t counter_value = 0;
    };
    std::vector<Flow> flows;
    std::mt19937_64 rng(99);
    for (int i = 0; i < kQpsPerSide * 2; ++i) {
        const int side = i % 2;
        QpPair p = t.connect(o);
        Flow f;
        f.side = side;
        f.qp = p.qp[side];
        f.peer = p.qp[1 - side];
        f.local = t.buffer(side, kBufBytes, static_cast<std::uint32_t>(i + 1));
        f.remote = t.buffer(1 - side, kBufBytes, static_cast<std::uint32_t>(i + 100));
        f.counter = t.buffer(1 - side, 8, 0);
        flows.push_back(std::move(f));
    }

    std::map<std::uint32_t, std::size_t> flow_of_qpn[2];
    for (std::size_t i = 0; i < flows.size(); ++i)
        flow_of_qpn[flows[i].side][flows[i].qp->qpn] = i;

    for (std::uint32_t n = 0; n < kOps; ++n) {
        for (std::size_t fi = 0; fi < flows.size(); ++fi) {
            Flow& f = flows[fi];
            const int kind = static_cast<int>(rng() % 5);
            std::size_t len = rng() % 4 == 0 ? rng() % kSlot : rng() % 3000;
            Expect e;
            e.src_off = n * kSlot;
            e.dst_off = n * kSlot;
            e.len = len;
            rc::SendWqe w;
            w.wr_id = (static_cast<std::uint64_t>(fi) << 32) | n;
            w.send_flags = rc::kSendSignaled;
            w.num_sge = 1;
            w.sg_list[0] = rc::Sge{f.local->addr(e.src_off), static_cast<std::uint32_t>(len),
                                   f.local->mr->lkey};
            w.remote_addr = f.remote->addr(e.dst_off);
            w.rkey = f.remote->mr->rkey;
            switch (kind) {
            case 0:
                e.op = WrOpcode::send;
                ASSERT_EQ(t.post_recv(1 - f.side, f.peer, *f.remote, w.wr_id, kSlot, e.dst_off), 0);
                break;
            case 1:
                e.op = WrOpcode::rdma_write;
                break;
            case 2:
                e.op = WrOpcode::rdma_write_with_imm;
                w.imm_data = n;
                ASSERT_EQ(t.post_recv(1 - f.side, f.peer, *f.remote, w.wr_id, 0), 0);
                break;
            case 3:
                e.op = WrOpcode::rdma_read;
                break;
            default:
                e.op = WrOpcode::atomic_fetch_and_add;
                e.len = 8;
                w.sg_list[0].length = 8;
                w.remote_addr = f.counter->addr();
                w.rkey = f.counter->mr->rkey;
                w.compare_add = 1;
                e.atomic_expected = f.counter_value++;
                break;
            }
            w.opcode = e.op;
            f.expect.push_back(e);
            ASSERT_EQ(t.post_send(f.side, f.qp, w), 0);
        }
    }

    const std::size_t total = flows.size() * kOps;
    ASSERT_TRUE(t.run_until([&] { return t.send_cqes[0].size() + t.send_cqes[1].size() >= total; },
                            600'000'000'000ull))
        << "completed " << t.send_cqes[0].size() + t.send_cqes[1].size() << " of " << total;
    t.run_until([] { return false; },
                50'000'000); // let duplicates drain: nothing more may complete
    ASSERT_EQ(t.send_cqes[0].size() + t.send_cqes[1].size(), total);

    std::vector<std::uint32_t> next(flows.size(), 0);
    for (int side = 0; side < 2; ++side) {
        for (const rc::Cqe& c : t.send_cqes[side]) {
            const std::size_t fi = c.wr_id >> 32;
            const std::uint32_t n = static_cast<std::uint32_t>(c.wr_id);
            ASSERT_LT(fi, flows.size());
            ASSERT_EQ(flows[fi].side, side);
            ASSERT_EQ(n, next[fi]) << "flow " << fi << " completed out of order";
            ++next[fi];
            ASSERT_EQ(c.status, WcStatus::success)
                << rc::to_string(c.status) << " flow " << fi << " op " << n;
            const Flow& f = flows[fi];
            const Expect& e = f.expect[n];
            if (e.op == WrOpcode::rdma_read) {
                ASSERT_EQ(0, std::memcmp(f.local->bytes.data() + e.src_off,
                                         f.remote->bytes.data() + e.dst_off, e.len))
                    << "READ data, flow " << fi << " op " << n;
            } else if (e.op == WrOpcode::atomic_fetch_and_add) {
                std::uint64_t got;
                std::memcpy(&got, f.local->bytes.data() + e.src_off, 8);
                ASSERT_EQ(got, e.atomic_expected) << "FETCH_ADD result, flow " << fi << " op " << n;
            } else if (e.op != WrOpcode::rdma_write_with_imm || e.len) {
                ASSERT_EQ(0, std::memcmp(f.local->bytes.data() + e.src_off,
                                         f.remote->bytes.data() + e.dst_off, e.len))
                    << rc::to_string(e.op) << " data, flow " << fi << " op " << n;
            }
        }
    }
    for (std::size_t fi = 0; fi < flows.size(); ++fi) {
        std::uint64_t v;
        std::memcpy(&v, flows[fi].counter->bytes.data(), 8);
        EXPECT_EQ(v, flows[fi].counter_value)
            << "atomics executed more or less than once, flow " << fi;
    }
    // Receive completions: one per SEND / WRITE_WITH_IMM, in order, exactly once.
    std::size_t expected_recv[2] = {0, 0};
    for (const Flow& f : flows)
        for (const Expect& e : f.expect)
            if (e.op == WrOpcode::send || e.op == WrOpcode::rdma_write_with_imm)
                ++expected_recv[1 - f.side];
    EXPECT_EQ(t.recv_cqes[0].size(), expected_recv[0]);
    EXPECT_EQ(t.recv_cqes[1].size(), expected_recv[1]);
    for (int side = 0; side < 2; ++side)
        for (const rc::Cqe& c : t.recv_cqes[side])
            EXPECT_EQ(c.status, WcStatus::success);

    // The impairments really happened and were repaired.
    const auto& ls = t.fabric.link_stats(0, 1, 0);
    EXPECT_GT(ls[sim::LinkCounter::dropped_loss], 0u);
    EXPECT_GT(ls[sim::LinkCounter::reordered], 0u);
    EXPECT_GT(ls[sim::LinkCounter::duplicated], 0u);
    EXPECT_GT(t.dev[0]->total_counters()[Counter::retransmitted_pkts] +
                  t.dev[1]->total_counters()[Counter::retransmitted_pkts],
              0u);
    std::printf(
        "torture: %zu WQEs; retransmitted %llu + %llu packets; bad ICRC dropped %llu + %llu\n",
        total,
        static_cast<unsigned long long>(t.dev[0]->total_counters()[Counter::retransmitted_pkts]),
        static_cast<unsigned long long>(t.dev[1]->total_counters()[Counter::retransmitted_pkts]),
        static_cast<unsigned long long>(t.dev[0]->counters()[Counter::rx_dropped_bad_icrc]),
        static_cast<unsigned long long>(t.dev[1]->counters()[Counter::rx_dropped_bad_icrc]));
}

} // namespace
} // namespace droce::test
