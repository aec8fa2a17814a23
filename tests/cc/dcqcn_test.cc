/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * DCQCN's reaction and notification points on a virtual timeline (lib/cc): the rate cut of a CNP,
 * alpha's decay, CNP spacing, recovery through fast recovery, additive and hyper increase in that
 * order for both profiles, and the bounds.
 */
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "cc/dcqcn.h"

namespace droce::cc {
namespace {

constexpr double kLine = 40'000; // Mb/s
constexpr std::uint64_t kUs = 1000;

/** Runs @p rp for @p ns in 1 us steps, sending at its current rate; calls @p each per step. */
template <typename F>
void run(DcqcnRp& rp, std::uint64_t& now, std::uint64_t ns, F&& each) {
    const std::uint64_t end = now + ns;
    while (now < end) {
        now += kUs;
        rp.on_sent(static_cast<std::uint64_t>(rp.rate_mbps() * 1e6 / 8 / 1e6), now); // bytes per us
        rp.on_time(now);
        each();
    }
}

TEST(Dcqcn, OneCnpAtLineRateWithAlphaOneHalvesTheRate) {
    DcqcnRp rp;
    rp.init(paper_profile(), kLine); // alpha starts at 1 (initial_alpha_value 1024)
    std::uint64_t now = 1'000'000;
    EXPECT_TRUE(rp.on_cnp(now));
    EXPECT_DOUBLE_EQ(rp.rate_mbps(), kLine / 2);
    EXPECT_DOUBLE_EQ(rp.target_mbps(), kLine);
    EXPECT_EQ(rp.last_event(), RpEvent::decrease);
    // The ConnectX profile starts alpha at 1023/1024: a hair more than half is kept.
    DcqcnRp nv;
    nv.init(nvidia_profile(), kLine);
    EXPECT_TRUE(nv.on_cnp(now));
    EXPECT_NEAR(nv.rate_mbps(), kLine * (1 - 1023.0 / 2048), 1e-6);
}

TEST(Dcqcn, AlphaDecaysWithoutCnpsAndRisesWithThem) {
    for (const DcqcnProfile& p : {nvidia_profile(), paper_profile()}) {
        DcqcnRp rp;
        rp.init(p, kLine);
        std::uint64_t now = 1'000'000;
        rp.on_cnp(now);
        const double a0 = rp.alpha();
        const double g = p.dce_tcp_g / 1024.0;
        // The period with the CNP moves alpha towards 1, then 9 periods without one decay it.
        now += 10ull * p.dce_tcp_rtt_us * kUs;
        rp.on_time(now);
        const double expect = (g * a0 + (1 - g)) * std::pow(g, 9);
        EXPECT_NEAR(rp.alpha(), expect, 1e-9) << p.name;
        EXPECT_LT(rp.alpha(), a0) << p.name;
        // A CNP in every period pushes it back up.
        const double low = rp.alpha();
        for (int i = 0; i < 50; ++i) {
            now += p.dce_tcp_rtt_us * kUs;
            rp.on_cnp(now - 1);
            rp.on_time(now);
        }
        EXPECT_GT(rp.alpha(), low) << p.name;
    }
}

TEST(Dcqcn, NotificationPointSendsAtMostOneCnpPerMinTime) {
    for (const DcqcnProfile& p : {nvidia_profile(), paper_profile()}) {
        DcqcnNp np;
        int cnps = 0;
        // A marked packet every 100 ns for 10 ms.
        for (std::uint64_t t = 1'000'000; t < 11'000'000; t += 100)
            cnps += np.on_marked(t, p);
        const int most = static_cast<int>(10'000 / p.min_time_between_cnps_us) + 1;
        EXPECT_LE(cnps, most) << p.name;
        EXPECT_GE(cnps, most - 1) << p.name;
    }
}

TEST(Dcqcn, RateRecoversToLineRateThroughTheStagesInOrder) {
    for (const DcqcnProfile& p : {nvidia_profile(), paper_profile()}) {
        DcqcnRp rp;
        rp.init(p, kLine);
        std::uint64_t now = 1'000'000;
        // A burst of congestion: for 1 ms, a CNP as often as the NP may send one (and the RP
        // take one).
        const std::uint64_t gap =
            std::max(p.min_time_between_cnps_us, p.rate_reduce_monitor_period_us) * kUs + kUs;
        for (std::uint64_t t = 0; t < 1000 * kUs; t += gap) {
            rp.on_cnp(now);
            run(rp, now, gap, [] {});
        }
        const double low = rp.rate_mbps();
        EXPECT_LT(low, kLine / 4) << p.name;
        // Marks stop. Record the stage of every rate change.
        std::vector<RpEvent> order;
        const std::uint64_t quiet = now;
        std::uint64_t back_ns = 0;
        run(rp, now, 200'000 * kUs, [&] {
            if (order.empty() || order.back() != rp.last_event()) order.push_back(rp.last_event());
            if (back_ns == 0 && rp.rate_mbps() >= kLine) back_ns = now - quiet;
        });
        ASSERT_GT(back_ns, 0u) << p.name << " never recovered";
        EXPECT_DOUBLE_EQ(rp.rate_mbps(), kLine);
        // Stages only move forward: fast recovery, additive, hyper.
        std::vector<RpEvent> want = {RpEvent::fast_recovery, RpEvent::additive_increase,
                                     RpEvent::hyper_increase};
        std::size_t w = 0;
        for (std::size_t i = 1; i < order.size(); ++i) { // order[0] is the last decrease
            while (w < want.size() && want[w] != order[i])
                ++w;
            ASSERT_LT(w, want.size())
                << p.name << ": stage " << to_string(order[i]) << " after a later one";
        }
        EXPECT_EQ(order[1], RpEvent::fast_recovery) << p.name;
        std::printf("%s: from %.0f Mb/s back to %.0f Mb/s in %.2f ms; stages:",
                    std::string(p.name).c_str(), low, kLine, back_ns / 1e6);
        for (std::size_t i = 1; i < order.size(); ++i)
            std::printf(" %s", std::string(to_string(order[i])).c_str());
        std::printf("\n");
    }
}

TEST(Dcqcn, TheProfilesReactAndRecoverAtDifferentSpeeds) {
    // After one CNP, how long to get back 90 % of the gap.
    auto recover = [](const DcqcnProfile& p) {
        DcqcnRp rp;
        rp.init(p, kLine);
        std::uint64_t now = 1'000'000;
        rp.on_cnp(now);
        const double low = rp.rate_mbps();
        std::uint64_t t90 = 0;
        const std::uint64_t start = now;
        run(rp, now, 100'000 * kUs, [&] {
            if (t90 == 0 && rp.rate_mbps() >= low + 0.9 * (kLine - low)) t90 = now - start;
        });
        return t90;
    };
    const std::uint64_t nv = recover(nvidia_profile());
    const std::uint64_t paper = recover(paper_profile());
    const DcqcnProfile nvp = nvidia_profile(), pp = paper_profile();
    std::printf(
        "reaction: a CNP at most every %u us (nvidia) vs %u us (paper); 90 %% recovery after "
        "one CNP at 40 Gb/s: nvidia %.0f us, paper %.0f us\n",
        nvp.min_time_between_cnps_us, pp.min_time_between_cnps_us, nv / 1e3, paper / 1e3);
    ASSERT_GT(nv, 0u);
    ASSERT_GT(paper, 0u);
    // ConnectX reacts sooner (CNPs up to every 4 us, not 50) and recovers later: its increases
    // wait for its 300 us timer or 2 MiB sent (840 us at the 20 Gb/s after the cut), the paper's
    // for its 55 us timer.
    EXPECT_LT(nvp.min_time_between_cnps_us, pp.min_time_between_cnps_us);
    EXPECT_GT(nv, paper);
}

TEST(Dcqcn, TheByteCounterCountsIn64ByteBlocks) {
    // ConnectX's rpg_byte_reset 32767 is 2 MiB (kRpgByteResetUnitBytes; dcqcn.h says why).
    DcqcnRp rp;
    const DcqcnProfile p = nvidia_profile();
    rp.init(p, kLine);
    const std::uint64_t now = 1'000'000;
    ASSERT_TRUE(rp.on_cnp(now));
    const double cut = rp.rate_mbps();
    const std::uint64_t b = std::uint64_t{p.rpg_byte_reset} * kRpgByteResetUnitBytes;
    EXPECT_EQ(b, 32767u * 64u);
    rp.on_sent(b - 1, now + 1000); // well before the 300 us timer
    EXPECT_EQ(rp.byte_stage(), 0u);
    EXPECT_DOUBLE_EQ(rp.rate_mbps(), cut);
    rp.on_sent(1, now + 2000);
    EXPECT_EQ(rp.byte_stage(), 1u);
    EXPECT_EQ(rp.last_event(), RpEvent::fast_recovery);
    EXPECT_DOUBLE_EQ(rp.rate_mbps(), (cut + rp.target_mbps()) / 2);
}

TEST(Dcqcn, BoundsHold) {
    DcqcnProfile p = nvidia_profile();
    p.rpg_min_rate_mbps = 1000;
    DcqcnRp rp;
    rp.init(p, kLine);
    std::uint64_t now = 1'000'000;
    for (int i = 0; i < 200; ++i) {
        now += 5 * kUs; // past rate_reduce_monitor_period (4 us): every CNP reduces
        const double before = rp.rate_mbps();
        EXPECT_TRUE(rp.on_cnp(now));
        EXPECT_GE(rp.rate_mbps(), before * p.rpg_min_dec_fac / 100.0 - 1e-9);
        EXPECT_GE(rp.rate_mbps(), 1000.0);
    }
    EXPECT_DOUBLE_EQ(rp.rate_mbps(), 1000.0);
    // rpg_min_dec_fac 80: no single CNP takes more than 20 %.
    p = nvidia_profile();
    p.rpg_min_dec_fac = 80;
    rp.init(p, kLine);
    rp.on_cnp(now);
    EXPECT_DOUBLE_EQ(rp.rate_mbps(), kLine * 0.8);
    // Within rate_reduce_monitor_period of a reduction, a CNP is ignored.
    EXPECT_FALSE(rp.on_cnp(now + 1 * kUs));
    EXPECT_DOUBLE_EQ(rp.rate_mbps(), kLine * 0.8);
    // rpg_max_rate caps the rate below the line.
    p = nvidia_profile();
    p.rpg_max_rate_mbps = 10'000;
    rp.init(p, kLine);
    EXPECT_DOUBLE_EQ(rp.rate_mbps(), 10'000);
    EXPECT_EQ(profile_by_name("paper")->rpg_threshold, 5u);
    EXPECT_EQ(profile_by_name("nope"), nullptr);
}

} // namespace
} // namespace droce::cc
