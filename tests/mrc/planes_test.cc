/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * Planes failing and coming back, on the sim fabric's four planes with link-rate-bound planes and a
 * virtual clock, data verified: a black-holed plane (frames vanish, links stay up) costs a quarter
 * of the goodput and no error completion, its paths go ASSUMED_BAD, and when it heals probes bring
 * them back and the plane's share returns; a cable pull (link down both ways) and an
 * administrative port-down on one side only (the peer learns it from the port status message).
 */
#include "mrc_pair.h"

namespace droce::test {
namespace {

constexpr std::size_t kMsg = 256 * 1024;

/** Keeps @p outstanding WRITEs of kMsg in flight from side 0 to side 1 while stepping. */
struct Streamer {
    MrcPair& t;
    const MrcPair::Buffer& src;
    const MrcPair::Buffer& dst;
    std::size_t outstanding = 64;
    std::size_t posted = 0;

    void top_up() {
        const std::size_t slots = src.bytes.size() / kMsg;
        while (posted - t.send_cqes[0].size() < outstanding) {
            if (t.write(0, src, dst, (posted % slots) * kMsg, kMsg, posted) != 0) break;
            ++posted;
        }
    }
    /** Runs for @p ns of virtual time; returns payload Gb/s completed in that time. */
    double run_for(std::uint64_t ns) {
        const std::size_t before = t.send_cqes[0].size();
        const std::uint64_t until = t.clock.now_ns() + ns;
        while (t.clock.now_ns() < until) {
            top_up();
            t.step();
        }
        return static_cast<double>(t.send_cqes[0].size() - before) * kMsg * 8 /
               (static_cast<double>(ns) / 1e9) / 1e9;
    }
    /** Plane shares of the bytes side 0 sent during the next @p ns. */
    std::array<double, 4> shares(std::uint64_t ns) {
        std::array<std::uint64_t, 4> b0{};
        for (unsigned p = 0; p < 4; ++p)
            b0[p] = t.plane_tx_bytes(0, p);
        (void)run_for(ns);
        std::array<double, 4> out{};
        double total = 0;
        for (unsigned p = 0; p < 4; ++p)
            total += static_cast<double>(t.plane_tx_bytes(0, p) - b0[p]);
        for (unsigned p = 0; p < 4; ++p)
            out[p] = static_cast<double>(t.plane_tx_bytes(0, p) - b0[p]) / total;
        return out;
    }
    /** Stops posting and runs until everything posted completed. */
    void drain() {
        ASSERT_TRUE(t.run_until([&] { return t.send_cqes[0].size() == posted; })) << t.dump();
    }
};

std::size_t evs_in_state(const MrcPair& t, int side, unsigned plane, mrc::EvState st) {
    std::array<mrc::EvInfo, mrc::kMaxEvs> evs{};
    const std::size_t n = mrc::ev_snapshot(*t.qp[side], evs);
    std::size_t k = 0;
    for (std::size_t i = 0; i < n; ++i)
        k += evs[i].plane == plane && evs[i].state == st;
    return k;
}

TEST(MrcPlanes, BlackHoledPlaneCostsAQuarterWithoutErrorAndComesBack) {
    MrcPair t(81);
    t.connect();
    auto src = t.buffer(0, 16 * kMsg, 12);
    auto dst = t.buffer(1, 16 * kMsg, 0);
    Streamer s{t, *src, *dst};
    (void)s.run_for(2'000'000); // warm up: queues filled
    const double four = s.run_for(5'000'000);

    // Plane 2 black-holed both ways: links stay up (no link event), every frame vanishes.
    t.set_plane_links(2, [](sim::LinkConfig& c) { c.loss = 1.0; });
    const std::uint64_t cut = t.clock.now_ns();
    const std::uint64_t timeout = 1024ull << t.opts.attr.timeout;
    (void)s.run_for(3 * timeout); // detection and repair of what was in flight on plane 2
    EXPECT_EQ(evs_in_state(t, 0, 2, mrc::EvState::good), 0u)
        << "plane 2's paths still GOOD a few timeouts after the cut";
    EXPECT_GT(t.mrc_counter(0, mrc::MrcCounter::ev_assumed_bad), 0u);
    const double three = s.run_for(5'000'000);
    std::printf("goodput: four planes %.2f Gb/s, plane 2 black-holed %.2f Gb/s (%.3f)\n", four,
                three, three / four);
    EXPECT_GE(three / four, 0.72);
    EXPECT_LE(three / four, 0.78);
    EXPECT_EQ(t.send_errors(0), 0u);
    (void)cut;

    // Healed: probes find the paths good again and the plane takes its share back.
    t.set_plane_links(2, [](sim::LinkConfig& c) { c.loss = 0.0; });
    const std::uint64_t healed = t.clock.now_ns();
    const std::uint64_t bound = 4 * t.opts.attr.probe_interval_ns * t.opts.attr.probe_successes;
    ASSERT_TRUE(t.run_until(
        [&] {
            s.top_up();
            return evs_in_state(t, 0, 2, mrc::EvState::good) >= 8;
        },
        bound))
        << "plane 2's paths not back within " << bound << " ns";
    std::printf("plane 2 back after %.0f us\n", (t.clock.now_ns() - healed) / 1e3);
    (void)s.run_for(1'000'000);
    const auto share = s.shares(4'000'000);
    for (unsigned p = 0; p < 4; ++p)
        EXPECT_NEAR(share[p], 0.25, 0.05) << "plane " << p;
    EXPECT_GT(t.mrc_counter(0, mrc::MrcCounter::ev_restored), 0u);
    s.drain();
    EXPECT_EQ(t.send_errors(0), 0u);
    EXPECT_EQ(std::memcmp(src->bytes.data(), dst->bytes.data(), src->bytes.size()), 0);
}

TEST(MrcPlanes, CablePullMovesTrafficAtOnceAndTheLinkComingBackRestoresIt) {
    MrcPair t(82);
    t.connect();
    auto src = t.buffer(0, 16 * kMsg, 13);
    auto dst = t.buffer(1, 16 * kMsg, 0);
    Streamer s{t, *src, *dst};
    (void)s.run_for(2'000'000);
    t.fabric.set_port_up(0, 1, false); // plane 1's cable of side 0: both directions down
    (void)s.run_for(500'000);
    const std::uint64_t p1 = t.plane_tx_bytes(0, 1);
    const auto share = s.shares(3'000'000);
    EXPECT_EQ(t.plane_tx_bytes(0, 1), p1) << "data still sent on the dead plane";
    EXPECT_NEAR(share[0], 1.0 / 3, 0.03);
    EXPECT_EQ(t.dev[0]->total_counters()[Counter::link_downed], 1u);
    t.fabric.set_port_up(0, 1, true);
    (void)s.run_for(1'000'000);
    const auto back = s.shares(3'000'000);
    for (unsigned p = 0; p < 4; ++p)
        EXPECT_NEAR(back[p], 0.25, 0.05) << "plane " << p;
    s.drain();
    EXPECT_EQ(t.send_errors(0), 0u);
    EXPECT_EQ(std::memcmp(src->bytes.data(), dst->bytes.data(), src->bytes.size()), 0);
}

TEST(MrcPlanes, PortDownOnOneSideIsLearnedByThePeerFromThePortStatusMessage) {
    MrcPair t(83);
    t.connect();
    auto src = t.buffer(0, 16 * kMsg, 14);
    auto dst = t.buffer(1, 16 * kMsg, 0);
    Streamer s{t, *src, *dst};
    (void)s.run_for(2'000'000);
    // Side 1 (the responder) takes its plane 3 out administratively; its link stays up, so side 0
    // sees no link event: only the port status message can tell it.
    ASSERT_EQ(t.dev[1]->set_port_admin(3, false), 0);
    (void)s.run_for(500'000);
    EXPECT_GT(t.mrc_counter(1, mrc::MrcCounter::port_status_sent), 0u);
    EXPECT_GT(t.mrc_counter(0, mrc::MrcCounter::port_status_rcvd), 0u);
    const std::uint64_t p3 = t.plane_tx_bytes(0, 3);
    (void)s.run_for(2'000'000);
    EXPECT_EQ(t.plane_tx_bytes(0, 3), p3) << "side 0 still sends toward the peer's dead plane";
    EXPECT_EQ(t.dev[0]->total_counters()[Counter::link_downed], 0u);
    ASSERT_EQ(t.dev[1]->set_port_admin(3, true), 0);
    (void)s.run_for(1'000'000);
    const auto back = s.shares(3'000'000);
    EXPECT_NEAR(back[3], 0.25, 0.05);
    s.drain();
    EXPECT_EQ(t.send_errors(0), 0u);
    EXPECT_EQ(std::memcmp(src->bytes.data(), dst->bytes.data(), src->bytes.size()), 0);
}

} // namespace
} // namespace droce::test
