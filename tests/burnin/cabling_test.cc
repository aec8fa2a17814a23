/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * droce-burnin's cabling verdict (burnin::judge_cabling): from which peer planes answered on which
 * local port to PASS / FAIL and the sentence that names the ports. Pure logic, no ports.
 */
#include <gtest/gtest.h>

#include "burnin.h"

namespace droce::burnin {
namespace {

/** Four local ports, all links up, port k reached the planes in reach[k]. */
CablingInput four(std::initializer_list<std::initializer_list<unsigned>> reach) {
    CablingInput in;
    in.planes = 4;
    in.peer_planes = 4;
    unsigned k = 0;
    for (const auto& r : reach) {
        for (unsigned j : r)
            in.reached[k] = static_cast<std::uint8_t>(in.reached[k] | (1u << j));
        in.link_up[k] = true;
        ++k;
    }
    return in;
}

TEST(Cabling, StraightIsPass) {
    const CablingResult r = judge_cabling(four({{0}, {1}, {2}, {3}}));
    EXPECT_EQ(r.status, Status::pass);
    EXPECT_TRUE(r.findings.empty());
    EXPECT_FALSE(r.miswired);
    ASSERT_EQ(r.ports.size(), 4u);
    for (unsigned k = 0; k < 4; ++k) {
        EXPECT_TRUE(r.ports[k].ok);
        EXPECT_EQ(r.ports[k].reaches, std::vector<unsigned>{k});
    }
}

TEST(Cabling, TwoSwappedAreNamed) {
    const CablingResult r = judge_cabling(four({{0}, {2}, {1}, {3}}));
    EXPECT_EQ(r.status, Status::fail);
    EXPECT_TRUE(r.miswired);
    ASSERT_EQ(r.findings.size(), 1u);
    EXPECT_EQ(r.findings[0], "local port 1 reaches the peer's plane 2 and port 2 reaches plane 1: "
                             "cables of planes 1 and 2 swapped");
    EXPECT_TRUE(r.ports[0].ok);
    EXPECT_FALSE(r.ports[1].ok);
    EXPECT_FALSE(r.ports[2].ok);
    EXPECT_TRUE(r.ports[3].ok);
}

TEST(Cabling, TwoSwapsAreTwoFindings) {
    const CablingResult r = judge_cabling(four({{3}, {2}, {1}, {0}}));
    EXPECT_EQ(r.status, Status::fail);
    ASSERT_EQ(r.findings.size(), 2u);
    EXPECT_NE(r.findings[0].find("cables of planes 0 and 3 swapped"), std::string::npos);
    EXPECT_NE(r.findings[1].find("cables of planes 1 and 2 swapped"), std::string::npos);
}

TEST(Cabling, ThreeCrossedAreOneCycle) {
    const CablingResult r = judge_cabling(four({{1}, {3}, {2}, {0}}));
    EXPECT_EQ(r.status, Status::fail);
    ASSERT_EQ(r.findings.size(), 1u);
    EXPECT_EQ(r.findings[0], "local port 0 reaches the peer's plane 1, port 1 reaches plane 3 and "
                             "port 3 reaches plane 0: cables of planes 0, 1 and 3 crossed");
}

TEST(Cabling, LinkDownIsSaid) {
    CablingInput in = four({{0}, {1}, {2}, {}});
    in.link_up[3] = false;
    const CablingResult r = judge_cabling(in);
    EXPECT_EQ(r.status, Status::fail);
    EXPECT_FALSE(r.miswired) << "an unplugged cable is not a miswired one";
    ASSERT_EQ(r.findings.size(), 1u);
    EXPECT_EQ(r.findings[0], "local port 3 reaches no plane of the peer: its link is down");
}

TEST(Cabling, SilentPortWithLinkUpIsNoAnswer) {
    const CablingResult r = judge_cabling(four({{0}, {}, {2}, {3}}));
    ASSERT_EQ(r.findings.size(), 1u);
    EXPECT_EQ(r.findings[0], "local port 1 reaches no plane of the peer: no answer");
}

TEST(Cabling, PeerWithFewerPortsIsSaid) {
    CablingInput in = four({{0}, {1}, {}, {}});
    in.peer_planes = 2;
    const CablingResult r = judge_cabling(in);
    ASSERT_EQ(r.findings.size(), 2u);
    EXPECT_EQ(r.findings[0], "local port 2 reaches no plane of the peer: the peer has 2 port(s)");
}

TEST(Cabling, TwoPlanesOnOnePortIsFail) {
    const CablingResult r = judge_cabling(four({{0}, {1, 2}, {2}, {3}}));
    EXPECT_EQ(r.status, Status::fail);
    EXPECT_TRUE(r.miswired);
    ASSERT_EQ(r.findings.size(), 1u);
    EXPECT_NE(r.findings[0].find("local port 1 reaches the peer's planes 1 and 2"),
              std::string::npos);
}

TEST(Cabling, OneWayMisplugIsNamedPerPort) {
    // Port 1's cable is in plane 2's switch and port 2's is dead: no cycle.
    CablingInput in = four({{0}, {2}, {}, {3}});
    in.link_up[2] = false;
    const CablingResult r = judge_cabling(in);
    EXPECT_EQ(r.status, Status::fail);
    ASSERT_EQ(r.findings.size(), 2u);
    EXPECT_EQ(r.findings[0], "local port 1 reaches the peer's plane 2 instead of plane 1");
    EXPECT_EQ(r.findings[1], "local port 2 reaches no plane of the peer: its link is down");
}

TEST(Cabling, NoPlanesIsFail) {
    CablingInput in;
    EXPECT_EQ(judge_cabling(in).status, Status::fail);
}

TEST(Bandwidth, PayloadShareCountsEveryHeader) {
    // IPv4: Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + RETH 16 + MDETH 16 + ICRC 4 + wire 24 = 114.
    EXPECT_DOUBLE_EQ(payload_share(1024, false), 1024.0 / 1138.0);
    EXPECT_DOUBLE_EQ(payload_share(4096, true), 4096.0 / (4096.0 + 134.0));
}

/** Planes of 1 Gb/s, 0.9 of it payload. */
Options one_gbps_planes() {
    Options o;
    o.plane_gbps = 1;
    o.payload_share = 0.9;
    return o;
}

/** An all-planes run at 3.5 of the 3.6 Gb/s expected, every plane carrying. */
BandwidthRun all_planes_run() {
    BandwidthRun all;
    all.status = Status::pass;
    all.gbps = 3.5;
    all.plane_bytes = {10, 10, 10, 10};
    return all;
}

TEST(Bandwidth, JudgedAgainstPlanesAndTheAllPlanesFigure) {
    const Options o = one_gbps_planes();
    BandwidthRun all = all_planes_run();
    judge_bandwidth(all, nullptr, o, 4);
    EXPECT_EQ(all.status, Status::pass) << all.why;
    EXPECT_DOUBLE_EQ(all.expected_gbps, 3.6);

    BandwidthRun out;
    out.status = Status::pass;
    out.plane_out = 2;
    out.gbps = 2.6;
    out.plane_bytes = {10, 10, 0, 10};
    out.peer_rx_bytes = {10, 10, 0, 10};
    judge_bandwidth(out, &all, o, 4);
    EXPECT_EQ(out.status, Status::pass) << out.why;
    EXPECT_NEAR(out.ratio_to_all, 2.6 / 3.5, 1e-9);

    BandwidthRun leak = out;
    leak.status = Status::pass;
    leak.plane_bytes[2] = 4096; // the disabled plane sent something
    judge_bandwidth(leak, &all, o, 4);
    EXPECT_EQ(leak.status, Status::fail);
    EXPECT_NE(leak.why.find("plane 2 (down) sent 4096 bytes"), std::string::npos) << leak.why;

    BandwidthRun dead = all;
    dead.plane_bytes[3] = 0; // a plane carried nothing, the others made up for it
    dead.status = Status::pass;
    judge_bandwidth(dead, nullptr, o, 4);
    EXPECT_EQ(dead.status, Status::fail);
    EXPECT_NE(dead.why.find("plane 3 carried nothing"), std::string::npos) << dead.why;

    BandwidthRun slow = all;
    slow.status = Status::pass;
    slow.gbps = 2.7; // three planes' worth: 0.75 of the expected
    judge_bandwidth(slow, nullptr, o, 4);
    EXPECT_EQ(slow.status, Status::fail);

    BandwidthRun same = out; // taking a plane out cost nothing: it was not carrying its share
    same.status = Status::pass;
    same.gbps = 3.4;
    judge_bandwidth(same, &all, o, 4);
    EXPECT_EQ(same.status, Status::fail);
    EXPECT_NE(same.why.find("outside 0.65..0.85"), std::string::npos) << same.why;
}

// A plane that loses while MRC repairs on the others keeps the goodput: its loss share names it,
// and only it; losses spread over every plane alike (a busy host) name none.
TEST(Bandwidth, ALossyPlaneIsNamedAndEvenLossesAreNot) {
    const Options o = one_gbps_planes();
    BandwidthRun all = all_planes_run();
    all.plane_pkts = {10000, 10000, 10000, 10000};
    all.plane_losses = {1, 300, 2, 0};
    judge_bandwidth(all, nullptr, o, 4);
    EXPECT_EQ(all.status, Status::fail);
    EXPECT_NE(all.why.find("plane 1 lost 3.00 % of the 10000 packets it sent (300 declared lost; "
                           "limit 0.10 %; "
                           "the other planes 0.00 - 0.02 %)"),
              std::string::npos)
        << all.why;
    EXPECT_EQ(all.why.find("plane 0"), std::string::npos) << all.why;

    BandwidthRun under = all; // at the limit: 10 of 10,000 is 0.10 %
    under.status = Status::pass;
    under.plane_losses = {0, 10, 0, 0};
    judge_bandwidth(under, nullptr, o, 4);
    EXPECT_EQ(under.status, Status::pass) << under.why;

    BandwidthRun even = all; // every plane alike, above the limit: nobody's cable
    even.status = Status::pass;
    even.plane_losses = {40, 45, 38, 42};
    judge_bandwidth(even, nullptr, o, 4);
    EXPECT_EQ(even.status, Status::pass) << even.why;

    BandwidthRun two = all; // two bad planes of four: both stand out from the median
    two.status = Status::pass;
    two.plane_losses = {0, 300, 1, 250};
    judge_bandwidth(two, nullptr, o, 4);
    EXPECT_EQ(two.status, Status::fail);
    EXPECT_NE(two.why.find("plane 1 lost"), std::string::npos) << two.why;
    EXPECT_NE(two.why.find("plane 3 lost"), std::string::npos) << two.why;
    EXPECT_EQ(two.why.find("plane 2 lost"), std::string::npos) << two.why;

    BandwidthRun out; // the plane out is never named, and not part of the others' median
    out.status = Status::pass;
    out.plane_out = 2;
    out.gbps = 2.6;
    out.plane_bytes = {10, 10, 0, 10};
    out.peer_rx_bytes = {10, 10, 0, 10};
    out.plane_pkts = {10000, 10000, 0, 10000};
    out.plane_losses = {0, 200, 0, 1};
    judge_bandwidth(out, &all, o, 4);
    EXPECT_EQ(out.status, Status::fail);
    EXPECT_NE(out.why.find("plane 1 lost 2.00 %"), std::string::npos) << out.why;
    EXPECT_NE(out.why.find("the other planes 0.00 - 0.01 %"), std::string::npos) << out.why;
}

// On a busy host RACK declares lost packets that were only late (the peer's engine waited for a
// CPU: 22 of 13,996 on plane 3 in one run) and named a plane whose cable was fine. With the peer's
// count of what arrived, a plane is judged by what never reached the peer.
TEST(Bandwidth, APlaneIsJudgedByWhatNeverReachedThePeer) {
    const Options o = one_gbps_planes();
    BandwidthRun late = all_planes_run();
    late.plane_pkts = {10000, 10000, 10000, 10000};
    late.plane_losses = {0, 0, 0, 30};                // declared lost, then arrived
    late.peer_rx_pkts = {10000, 10000, 10000, 10030}; // the 30 late ones and their resends
    late.plane_wire_losses = {0, 0, 0, 0};
    judge_bandwidth(late, nullptr, o, 4);
    EXPECT_EQ(late.status, Status::pass) << late.why;

    BandwidthRun lossy = all_planes_run();
    lossy.plane_pkts = {10000, 10000, 10000, 10000};
    lossy.plane_losses = {0, 180, 0, 0}; // RACK found some of them
    lossy.plane_wire_losses = {0, 300, 1, 0};
    judge_bandwidth(lossy, nullptr, o, 4);
    EXPECT_EQ(lossy.status, Status::fail);
    EXPECT_NE(lossy.why.find("plane 1 lost 3.00 % of the 10000 packets it sent (300 never reached "
                             "the peer; limit 0.10 %; the other planes 0.00 - 0.01 %)"),
              std::string::npos)
        << lossy.why;
}

/** A plane-out run of plane @p k at @p gbps, every other plane carrying. */
BandwidthRun plane_out_run(int k, double gbps) {
    BandwidthRun out;
    out.status = Status::pass;
    out.plane_out = k;
    out.gbps = gbps;
    out.plane_bytes = {10, 10, 10, 10};
    out.plane_bytes[static_cast<std::size_t>(k)] = 0;
    out.peer_rx_bytes = out.plane_bytes;
    return out;
}

// A first all-planes run slowed by other work on the host failed every plane-out run (their
// ratios above out_high); they are compared with the better of the runs before and after them.
TEST(Bandwidth, PlaneOutRunsAreComparedWithTheBetterAllPlanesRun) {
    Report rep;
    rep.opts = one_gbps_planes();
    rep.planes = 4;
    rep.all = all_planes_run();
    rep.all.gbps = 1.6; // the host was busy
    rep.all_again = all_planes_run();
    rep.all_again.again = true;
    judge_bandwidth(rep.all, nullptr, rep.opts, 4);
    judge_bandwidth(rep.all_again, nullptr, rep.opts, 4);
    EXPECT_EQ(rep.all.status, Status::fail); // 1.6 of 3.6 expected: its own check fails
    EXPECT_EQ(rep.all_again.status, Status::pass) << rep.all_again.why;
    for (int k = 0; k < 4; ++k)
        rep.out.push_back(plane_out_run(k, 2.6));
    rep.out[3].gbps = 3.4; // plane 3 out cost nothing: not carrying its share
    judge_plane_out_runs(rep);
    for (int k = 0; k < 3; ++k) {
        EXPECT_EQ(rep.out[k].status, Status::pass) << k << ": " << rep.out[k].why;
        EXPECT_DOUBLE_EQ(rep.out[k].all_gbps, 3.5);
        EXPECT_NEAR(rep.out[k].ratio_to_all, 2.6 / 3.5, 1e-9);
    }
    EXPECT_EQ(rep.out[3].status, Status::fail);
    EXPECT_NE(rep.out[3].why.find("outside 0.65..0.85"), std::string::npos) << rep.out[3].why;
    EXPECT_NE(rep.out[3].why.find("moved from 1.60 to 3.50 Gb/s"), std::string::npos)
        << rep.out[3].why;
    EXPECT_EQ(rep.failed(), 1u + 1u + 1u + 1u); // cabling and routable not run here, all, out 3
    EXPECT_EQ(rep.checks(), 2u + 1u + 4u + 1u);

    // Two all-planes figures that agree: a failing ratio says nothing about the host.
    Report steady = rep;
    steady.all.gbps = 3.4;
    steady.out = {plane_out_run(1, 3.4)};
    judge_plane_out_runs(steady);
    EXPECT_EQ(steady.out[0].status, Status::fail);
    EXPECT_EQ(steady.out[0].why.find("moved"), std::string::npos) << steady.out[0].why;
    EXPECT_DOUBLE_EQ(steady.out[0].all_gbps, 3.5);

    // Only the first run measured (the session broke off before the second): it is the figure.
    Report once = rep;
    once.all_again = BandwidthRun{};
    once.out = {plane_out_run(0, 1.2)};
    judge_plane_out_runs(once);
    EXPECT_DOUBLE_EQ(once.out[0].all_gbps, 1.6);
    EXPECT_NEAR(once.out[0].ratio_to_all, 1.2 / 1.6, 1e-9);
}

} // namespace
} // namespace droce::burnin
