/* SPDX-License-Identifier: BSD-3-Clause */
// The chaos soak, bounded (chaos.h; bench/engine/chaos runs 10^6 operations): 24 RC and 8 MRC QP
// pairs over four lossy, reordering, duplicating, corrupting sim planes, a plane pulled every
// 1 ms of virtual time, QP pairs torn down and created anew while the others run. Every completion
// is checked as it comes (order, status, bytes, atomic results, receive completions).
// DROCE_CHAOS_OPS sets the number of operations (default 100000).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "chaos.h"

namespace droce::test {
namespace {

std::uint64_t ops() {
    const char* env = std::getenv("DROCE_CHAOS_OPS");
    return env ? std::strtoull(env, nullptr, 10) : 100'000;
}

TEST(Chaos, EveryOperationCompletesOnceInOrderWithItsDataThroughLossFlapsAndChurn) {
    ChaosOptions o;
    o.ops = ops();
    o.seed = 42;
    const ChaosResult r = Chaos(o).run();
    std::printf("chaos: %llu operations (%llu atomics), %llu receive completions, %llu bytes "
                "verified; %llu QP pairs created, %llu plane flaps; links: %llu lost, %llu "
                "reordered, %llu duplicated, %llu corrupted, %llu dropped on a pulled plane; "
                "%.1f ms virtual\n",
                static_cast<unsigned long long>(r.ops_completed),
                static_cast<unsigned long long>(r.atomics),
                static_cast<unsigned long long>(r.recv_completions),
                static_cast<unsigned long long>(r.bytes_verified),
                static_cast<unsigned long long>(r.qp_pairs_created),
                static_cast<unsigned long long>(r.plane_flaps),
                static_cast<unsigned long long>(r.dropped_loss),
                static_cast<unsigned long long>(r.reordered),
                static_cast<unsigned long long>(r.duplicated),
                static_cast<unsigned long long>(r.corrupted),
                static_cast<unsigned long long>(r.dropped_down), r.virtual_ns / 1e6);
    for (const std::string& p : r.problems)
        ADD_FAILURE() << p;
    EXPECT_GE(r.ops_completed, o.ops);
    // The chaos really happened.
    EXPECT_GT(r.qp_pairs_created, o.rc_flows + o.mrc_flows) << "no churn";
    EXPECT_GT(r.plane_flaps, 0u);
    EXPECT_GT(r.dropped_loss, 0u);
    EXPECT_GT(r.reordered, 0u);
    EXPECT_GT(r.duplicated, 0u);
    EXPECT_GT(r.corrupted, 0u);
    EXPECT_GT(r.dropped_down, 0u);
    EXPECT_GT(r.atomics, 0u);
}

} // namespace
} // namespace droce::test
