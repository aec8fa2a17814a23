/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * MRC loss recovery on the sim fabric's four planes, virtual clock, data verified every time:
 * random loss (against RC go-back-N in the same test), reordering with loss (one retransmission
 * per lost packet, none for reordered ones), trimmed packets (NACK, no ACK timeout), ECN marks
 * (path avoided, not retired), a dropped last packet (the ACK timeout), and a peer that never
 * answers (linear then exponential retries, then RETRY_EXC_ERR).
 */
#include "mrc_pair.h"

namespace droce::test {
namespace {

constexpr std::size_t kMsg = 256 * 1024;

/** Streams @p n messages of kMsg bytes from side 0 to side 1 (@p outstanding at a time); returns
 *  the goodput in Gb/s from the first post to the last completion, in virtual time. */
double stream(MrcPair& t, const MrcPair::Buffer& src, const MrcPair::Buffer& dst, std::size_t n,
              std::size_t outstanding = 64) {
    std::size_t posted = 0;
    const std::size_t slots = src.bytes.size() / kMsg;
    const std::uint64_t start = t.clock.now_ns();
    const bool done = t.run_until([&] {
        while (posted < n && posted - t.send_cqes[0].size() < outstanding) {
            if (t.write(0, src, dst, (posted % slots) * kMsg, kMsg, posted) != 0) break;
            ++posted;
        }
        return t.send_cqes[0].size() >= n;
    });
    EXPECT_TRUE(done) << t.dump();
    if (!done) return 0;
    const double secs = static_cast<double>(t.send_cqe_ns[0][n - 1] - start) / 1e9;
    return static_cast<double>(n) * kMsg * 8 / secs / 1e9;
}

std::uint64_t data_link_losses(const MrcPair& t) {
    std::uint64_t n = 0;
    for (std::uint32_t p = 0; p < t.opts.planes; ++p)
        n += t.fabric.link_stats(0, 1, p)[sim::LinkCounter::dropped_loss];
    return n;
}

TEST(MrcRecovery, OnePercentLossKeepsHalfTheLosslessGoodputAndTriplesRcGoBackN) {
    // Lossless MRC first, the same way.
    double lossless = 0;
    {
        MrcPair t(21);
        t.connect();
        auto src = t.buffer(0, 16 * kMsg, 5);
        auto dst = t.buffer(1, 16 * kMsg, 0);
        lossless = stream(t, *src, *dst, 96);
    }
    MrcPair t(22);
    for (unsigned p = 0; p < 4; ++p)
        t.set_plane_links(p, [](sim::LinkConfig& c) { c.loss = 0.01; });
    t.connect();
    auto src = t.buffer(0, 16 * kMsg, 5);
    auto dst = t.buffer(1, 16 * kMsg, 0);
    const double lossy = stream(t, *src, *dst, 96);
    EXPECT_EQ(t.send_errors(0), 0u);
    EXPECT_EQ(std::memcmp(src->bytes.data(), dst->bytes.data(), src->bytes.size()), 0);
    EXPECT_GT(t.mrc_counter(0, mrc::MrcCounter::retransmits), 0u);

    // RC on one plane of the same fabric, with the same loss, the same way.
    double rc_gbps = 0;
    {
        MrcOptions o;
        o.planes = 1;
        MrcPair r(23, o);
        r.set_plane_links(0, [](sim::LinkConfig& c) { c.loss = 0.01; });
        const auto q = r.connect_rc_pair(8); // 1 ms: the same as the MRC QP's
        r.qp[0] = q[0];
        r.qp[1] = q[1];
        auto rs = r.buffer(0, 16 * kMsg, 5);
        auto rd = r.buffer(1, 16 * kMsg, 0);
        // Go-back-N resends the whole window behind a loss: a few messages in flight (256 packets)
        // is what keeps an RC QP alive at 1 % loss (with 64, retry_cnt runs out).
        rc_gbps = stream(r, *rs, *rd, 24, 4);
        EXPECT_EQ(r.send_errors(0), 0u) << r.dump();
        EXPECT_EQ(std::memcmp(rs->bytes.data(), rd->bytes.data(), 16 * kMsg), 0);
    }
    std::printf("goodput: MRC lossless %.2f Gb/s, MRC 1%% loss %.2f Gb/s, RC 1 plane 1%% loss %.2f "
                "Gb/s\n",
                lossless, lossy, rc_gbps);
    EXPECT_GE(lossy, 0.5 * lossless) << t.dump();
    EXPECT_GE(lossy, 3.0 * rc_gbps);
}

TEST(MrcRecovery, ReorderingCausesNoRetransmissionAndEachLostPacketGoesOnce) {
    MrcOptions o;
    o.attr.reorder_window_ns = 100'000;
    MrcPair t(31, o);
    for (unsigned p = 0; p < 4; ++p)
        t.set_plane_links(
            p,
            [](sim::LinkConfig& c) {
                c.reorder = 0.2;
                c.reorder_max_frames = 64;
                c.reorder_max_ns = 50'000;
            },
            true);
    t.connect();
    auto src = t.buffer(0, 16 * kMsg, 3);
    auto dst = t.buffer(1, 16 * kMsg, 0);
    (void)stream(t, *src, *dst, 32);
    EXPECT_EQ(std::memcmp(src->bytes.data(), dst->bytes.data(), src->bytes.size()), 0);
    EXPECT_GT(t.mrc_counter(1, mrc::MrcCounter::ooo_pkts_rcvd), 100u);
    EXPECT_EQ(t.mrc_counter(0, mrc::MrcCounter::retransmits), 0u) << "reordered packets resent";

    // Now with loss on the data links too: exactly one retransmission per data frame lost.
    for (unsigned p = 0; p < 4; ++p)
        t.set_plane_links(
            p, [](sim::LinkConfig& c) { c.loss = 0.005; }, false);
    const std::size_t before = t.send_cqes[0].size();
    std::size_t posted = before;
    ASSERT_TRUE(t.run_until([&] {
        while (posted < before + 32 && posted - t.send_cqes[0].size() < 64) {
            if (t.write(0, *src, *dst, (posted % 16) * kMsg, kMsg, posted) != 0) break;
            ++posted;
        }
        return t.send_cqes[0].size() >= before + 32;
    })) << t.dump();
    EXPECT_EQ(t.send_errors(0), 0u);
    for (std::size_t i = 0; i < t.send_cqes[0].size(); ++i)
        ASSERT_EQ(t.send_cqes[0][i].wr_id, i) << "completions out of order";
    EXPECT_EQ(std::memcmp(src->bytes.data(), dst->bytes.data(), src->bytes.size()), 0);
    const std::uint64_t lost = data_link_losses(t);
    EXPECT_GT(lost, 0u);
    EXPECT_EQ(t.mrc_counter(0, mrc::MrcCounter::retransmits), lost) << t.dump();
}

TEST(MrcRecovery, TrimmedPacketsAreNackedAndResentWithoutAckTimeout) {
    MrcPair t(41);
    t.set_plane_links(
        1, [](sim::LinkConfig& c) { c.trim = 0.05; }, false);
    t.connect();
    auto src = t.buffer(0, 16 * kMsg, 4);
    auto dst = t.buffer(1, 16 * kMsg, 0);
    (void)stream(t, *src, *dst, 32);
    EXPECT_EQ(std::memcmp(src->bytes.data(), dst->bytes.data(), src->bytes.size()), 0);
    const std::uint64_t trimmed = t.fabric.link_stats(0, 1, 1)[sim::LinkCounter::trimmed];
    EXPECT_GT(trimmed, 0u);
    EXPECT_EQ(t.mrc_counter(1, mrc::MrcCounter::trims_rcvd), trimmed);
    EXPECT_EQ(t.mrc_counter(0, mrc::MrcCounter::retransmit_nack), trimmed);
    EXPECT_EQ(t.mrc_counter(0, mrc::MrcCounter::ack_timeouts), 0u);
    EXPECT_EQ(t.mrc_counter(0, mrc::MrcCounter::retransmit_timeout), 0u);
    EXPECT_EQ(t.mrc_counter(0, mrc::MrcCounter::ev_assumed_bad), 0u) << "a trim is not a failure";
}

TEST(MrcRecovery, EcnMarkedPathIsAvoidedButNotRetired) {
    MrcPair t(51);
    t.connect();
    auto src = t.buffer(0, 16 * kMsg, 6);
    auto dst = t.buffer(1, 16 * kMsg, 0);
    (void)stream(t, *src, *dst, 8);
    // Mark every ECT frame on plane 2 (RED with kmin = kmax = 0 marks all).
    t.set_plane_links(
        2,
        [](sim::LinkConfig& c) {
            c.ecn = true;
            c.kmin_bytes = 0;
            c.kmax_bytes = 0;
            c.pmax = 1.0;
        },
        false);
    const std::uint64_t p2_before = t.plane_tx_bytes(0, 2);
    std::size_t posted = 8;
    ASSERT_TRUE(t.run_until([&] {
        while (posted < 24 && posted - t.send_cqes[0].size() < 64) {
            if (t.write(0, *src, *dst, (posted % 16) * kMsg, kMsg, posted) != 0) break;
            ++posted;
        }
        return t.send_cqes[0].size() >= 24;
    }));
    EXPECT_EQ(std::memcmp(src->bytes.data(), dst->bytes.data(), src->bytes.size()), 0);
    EXPECT_GT(t.mrc_counter(1, mrc::MrcCounter::ce_rcvd), 0u);
    EXPECT_GT(t.mrc_counter(0, mrc::MrcCounter::ecn_echo_rcvd), 0u);
    std::array<mrc::EvInfo, mrc::kMaxEvs> evs{};
    const std::size_t n = mrc::ev_snapshot(*t.qp[0], evs);
    std::size_t avoided = 0;
    for (std::size_t i = 0; i < n; ++i) {
        EXPECT_EQ(evs[i].state, mrc::EvState::good) << "path " << i << " retired by ECN";
        avoided += evs[i].plane == 2 && evs[i].avoid_until_ns > 0;
    }
    EXPECT_GT(avoided, 0u);
    EXPECT_EQ(t.mrc_counter(0, mrc::MrcCounter::retransmits), 0u);
    (void)p2_before;
}

TEST(MrcRecovery, DroppedLastPacketIsRecoveredByTheAckTimeout) {
    MrcPair t(61);
    t.connect();
    auto src = t.buffer(0, kMsg, 8);
    auto dst = t.buffer(1, kMsg, 0);
    // Drop the first copy of the message's last packet, whichever plane it takes.
    bool dropped = false;
    for (auto& tap : t.taps[0])
        tap->on_tx = [&](PktBuf& b) {
            const wire::ParsedFrame f = parse_frame_of(b);
            if (!dropped && f.mdeth() && (f.mdeth()->flags & wire::kMdethLast)) {
                dropped = true;
                return false;
            }
            return true;
        };
    ASSERT_EQ(t.write(0, *src, *dst, 0, kMsg, 1), 0);
    const std::uint64_t start = t.clock.now_ns();
    ASSERT_TRUE(t.run_until([&] { return t.send_cqes[0].size() == 1; })) << t.dump();
    EXPECT_TRUE(dropped);
    EXPECT_EQ(t.send_cqes[0][0].status, rc::WcStatus::success);
    EXPECT_EQ(std::memcmp(src->bytes.data(), dst->bytes.data(), kMsg), 0);
    EXPECT_EQ(t.mrc_counter(0, mrc::MrcCounter::ack_timeouts), 1u);
    EXPECT_EQ(t.mrc_counter(0, mrc::MrcCounter::retransmit_timeout), 1u);
    EXPECT_GE(t.clock.now_ns() - start, 1024ull << t.opts.attr.timeout); // 1.024 us x 2^timeout
}

/** A 32.768 us ACK timeout (5), 3 linear and 4 exponential retries: 34 timeouts in all. */
MrcOptions short_retries() {
    MrcOptions o;
    o.attr.timeout = 5;
    o.attr.linear_cnt = 3;
    o.attr.exp_cnt = 4;
    return o;
}

TEST(MrcRecovery, PeerThatNeverAnswersFailsTheQpAfterLinearThenExponentialRetries) {
    MrcPair t(71, short_retries());
    t.connect();
    auto src = t.buffer(0, 8192, 8);
    auto dst = t.buffer(1, 8192, 0);
    for (auto& tap : t.taps[1])
        tap->on_tx = [](PktBuf&) { return false; }; // the responder's answers never arrive
    ASSERT_EQ(t.write(0, *src, *dst, 0, 8192, 7), 0);
    ASSERT_EQ(t.write(0, *src, *dst, 0, 100, 8), 0);
    const std::uint64_t start = t.clock.now_ns();
    ASSERT_TRUE(t.run_until([&] { return t.send_cqes[0].size() == 2; })) << t.dump();
    const std::uint64_t took = t.clock.now_ns() - start;
    EXPECT_EQ(t.send_cqes[0][0].wr_id, 7u);
    EXPECT_EQ(t.send_cqes[0][0].status, rc::WcStatus::retry_exc_err);
    EXPECT_EQ(t.send_cqes[0][1].status, rc::WcStatus::wr_flush_err);
    EXPECT_EQ(t.qp[0]->state, rc::QpState::err);
    // Each expiry is one retry of everything outstanding: the first wait is T, the linear_cnt
    // retries wait T each, the exp_cnt retries 2T, 4T, 8T, 16T, and the expiry after them finds
    // the budget spent: T + 3 T + (2 + 4 + 8 + 16) T = 34 T, and 1 + 3 + 4 = 8 expiries.
    const std::uint64_t T = 1024ull << 5;
    EXPECT_EQ(t.mrc_counter(0, mrc::MrcCounter::ack_timeouts), 8u);
    EXPECT_GE(took, 34 * T);
    EXPECT_LT(took, 34 * T + 20'000);
}

/** A connected pair whose side 0 has every plane down, then one 4 KiB WRITE @p wr_id posted on it
 *  (its source and destination buffers in @p src and @p dst). */
/**
 * The peer's address on one plane never resolves (nobody answers ARP there): the QP goes on over
 * the other three, every byte placed. Before 2026-12-06 the whole QP waited for all four planes
 * and a WRITE never completed, with no error either. With no plane resolving, the QP spends its
 * retries and fails with RETRY_EXC_ERR, as on a dead link.
 */
TEST(MrcRecovery, APlaneWhosePeerNeverResolvesIsLeftOutAndNoneFailsTheQp) {
    {
        MrcPair t(220);
        t.connect(0b1000);
        auto src = t.buffer(0, 1 << 20, 5);
        auto dst = t.buffer(1, 1 << 20, 0);
        ASSERT_EQ(t.write(0, *src, *dst, 0, 1 << 20, 1), 0);
        ASSERT_TRUE(t.run_until([&] { return t.send_cqes[0].size() == 1; }, 20'000'000'000ull))
            << t.dump();
        EXPECT_EQ(t.send_cqes[0][0].status, rc::WcStatus::success);
        EXPECT_EQ(std::memcmp(src->bytes.data(), dst->bytes.data(), 1 << 20), 0);
        EXPECT_EQ(mrc::plane_stats(*t.qp[1], 3)->rx_pkts.load(), 0u) << "data on plane 3";
        EXPECT_GT(mrc::plane_stats(*t.qp[1], 0)->rx_pkts.load(), 0u);
    }
    MrcPair t(221, short_retries());
    t.connect(0b1111);
    auto src = t.buffer(0, 8192, 6);
    auto dst = t.buffer(1, 8192, 0);
    ASSERT_EQ(t.write(0, *src, *dst, 0, 4096, 2), 0);
    ASSERT_TRUE(t.run_until([&] { return t.send_cqes[0].size() == 1; })) << t.dump();
    EXPECT_EQ(t.send_cqes[0][0].status, rc::WcStatus::retry_exc_err);
    EXPECT_EQ(t.qp[0]->state, rc::QpState::err);
}

void write_with_every_plane_down(MrcPair& t, std::uint64_t wr_id, std::unique_ptr<Buffer>& src,
                                 std::unique_ptr<Buffer>& dst) {
    t.connect();
    src = t.buffer(0, 8192, static_cast<std::uint32_t>(wr_id));
    dst = t.buffer(1, 8192, 0);
    for (unsigned p = 0; p < 4; ++p)
        t.fabric.set_port_up(0, p, false);
    ASSERT_EQ(t.write(0, *src, *dst, 0, 4096, wr_id), 0);
}

/**
 * Every plane of the requester down before a WRITE is posted: nothing is in flight to arm the ACK
 * timer, yet the QP spends its retries and fails with RETRY_EXC_ERR, as RC does on a dead link
 * (before 2026-12-06 it waited for ever; a forged port status with no plane up did the same).
 * With the planes back before the budget is spent, the WRITE goes through.
 */
TEST(MrcRecovery, NoUsablePlaneFailsTheQpAfterItsRetriesInsteadOfWaitingForEver) {
    const MrcOptions o = short_retries();
    MrcPair t(72, o);
    std::unique_ptr<Buffer> src, dst;
    ASSERT_NO_FATAL_FAILURE(write_with_every_plane_down(t, 11, src, dst));
    ASSERT_TRUE(t.run_until([&] { return t.send_cqes[0].size() == 1; })) << t.dump();
    EXPECT_EQ(t.send_cqes[0][0].wr_id, 11u);
    EXPECT_EQ(t.send_cqes[0][0].status, rc::WcStatus::retry_exc_err);
    EXPECT_EQ(t.qp[0]->state, rc::QpState::err);
    EXPECT_GT(t.mrc_counter(0, mrc::MrcCounter::no_path), 0u);
    EXPECT_EQ(t.mrc_counter(0, mrc::MrcCounter::ack_timeouts), 8u); // 1 + linear 3 + exp 4

    MrcOptions generous = o; // a budget of 261 ms: 7 x 1 ms, then 2, 4, ..., 128 ms
    generous.attr.timeout = 10;
    generous.attr.linear_cnt = 7;
    generous.attr.exp_cnt = 7;
    // In real time: the engine looks at link state every 256 passes, which the virtual clock
    // would stretch over many expiries.
    generous.real_time = true;
    MrcPair u(73, generous);
    std::unique_ptr<Buffer> src2, dst2;
    ASSERT_NO_FATAL_FAILURE(write_with_every_plane_down(u, 12, src2, dst2));
    u.run_for(3 * (1024ull << 10)); // about three expiries: well within the budget
    EXPECT_TRUE(u.send_cqes[0].empty());
    for (unsigned p = 0; p < 4; ++p)
        u.fabric.set_port_up(0, p, true);
    ASSERT_TRUE(u.run_until([&] { return u.send_cqes[0].size() == 1; })) << u.dump();
    EXPECT_EQ(u.send_cqes[0][0].status, rc::WcStatus::success) << u.dump();
    EXPECT_EQ(std::memcmp(src2->bytes.data(), dst2->bytes.data(), 4096), 0);
}

} // namespace
} // namespace droce::test
