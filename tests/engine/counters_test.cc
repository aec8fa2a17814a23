/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * The counter facility: a device lists every counter block in its CounterRegistry (device, parse
 * reasons, each port's neighbour responder, each QP), a QP's block comes and goes with the QP, and
 * each event is counted once — in the QP's block when it belongs to a QP, never also in the
 * device's.
 */
#include <cstdio>
#include <map>
#include <string>

#include "two_engines.h"

namespace droce::test {
namespace {

std::string qp_scope(std::uint32_t qpn) {
    char s[16];
    std::snprintf(s, sizeof s, "qp/0x%06x", qpn);
    return s;
}

TEST(Counters, RegistryListsEveryBlockAndEachEventOnce) {
    TwoEngines t;
    QpOptions o;
    o.sq_depth = 64;
    const QpPair p = t.connect(o);
    auto src = t.buffer(0, 8192, 3);
    auto dst = t.buffer(1, 8192);
    for (std::uint64_t i = 0; i < 8; ++i) {
        rc::SendWqe w = TwoEngines::wqe(rc::WrOpcode::rdma_write, i, *src, 8192);
        w.remote_addr = dst->addr();
        w.rkey = dst->mr->rkey;
        ASSERT_EQ(t.post_send(0, p.qp[0], w), 0);
    }
    ASSERT_TRUE(t.run_until([&] { return t.send_cqes[0].size() == 8; }));

    const CounterRegistry& reg = t.dev[0]->counter_registry();
    std::map<std::string, std::map<std::string, std::uint64_t>> seen;
    reg.for_each([&](std::string_view scope, std::string_view name, std::uint64_t v) {
        seen[std::string(scope)][std::string(name)] = v;
    });
    ASSERT_EQ(seen.count("device"), 1u);
    ASSERT_EQ(seen.count("device/parse"), 1u);
    ASSERT_EQ(seen.count("port1/neigh"), 1u);
    const std::string scope = qp_scope(p.qp[0]->qpn);
    ASSERT_EQ(seen.count(scope), 1u) << "the QP's block is not listed";
    EXPECT_EQ(seen["device/parse"].count("bad_icrc"), 1u);

    // 8 WRITEs of 8 KiB at path MTU 1024: 64 packets, counted on the QP and nowhere else.
    EXPECT_EQ(seen[scope]["sent_pkts"], 64u);
    EXPECT_EQ(seen["device"]["sent_pkts"], 0u);
    // total_counters() is device + QPs: equal to the sum over the registry's device and QP blocks.
    const CounterSnapshot total = t.dev[0]->total_counters();
    for (std::size_t i = 0; i < kNumCounters; ++i) {
        const std::string name(kCounterNames[i]);
        std::uint64_t sum = seen["device"][name];
        for (auto& [s, block] : seen)
            if (s.rfind("qp/", 0) == 0) sum += block[name];
        EXPECT_EQ(total.v[i], sum) << name;
    }
    // ACKs received by the requester are the responder's ACKs sent: one event each side, once.
    EXPECT_EQ(reg.value(scope, "acks_rcvd"),
              t.dev[1]->counter_registry().value(qp_scope(p.qp[1]->qpn), "acks_sent"));

    const std::size_t before = reg.size();
    rc::QpAttr a;
    a.qp_state = rc::QpState::reset;
    ASSERT_EQ(t.dev[0]->modify_qp(p.qp[0], a, rc::kQpState), 0);
    ASSERT_EQ(t.dev[0]->destroy_qp(p.qp[0]), 0);
    EXPECT_EQ(reg.size(), before - 1) << "a destroyed QP's block stays listed";
    EXPECT_EQ(reg.value(scope, "sent_pkts"), 0u);
}

} // namespace
} // namespace droce::test
