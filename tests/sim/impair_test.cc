/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * drivers/sim/impair: the impairment stage over a counting in-test port (which checks every
 * buffer's ownership) and over a sim fabric port: loss rate and determinism, the reorder bound with
 * every held frame delivered, duplication, corruption against the ICRC, probabilistic and RED ECN
 * marking, tail drop, trimming, link down, backpressure, the receive side, and the spec parser.
 */
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/clock.h"
#include "port/port.h"
#include "sim/fabric.h"
#include "sim/impair.h"
#include "wire/ipv4.h"
#include "wire/packet.h"

namespace droce::sim {
namespace {

using LC = LinkCounter;

/**
 * A PortDriver with its own pool that tracks who owns each buffer and counts every misuse:
 * tx or free of a buffer the caller does not own (double free, use after free, foreign buffer).
 * Transmitted frames are copied into `sent` and their buffers go back to the pool; inject() queues
 * frames for rx_burst().
 */
class CountingPort final : public PortDriver {
  public:
    enum class Owner : std::uint8_t { pool, caller, rxq };

    explicit CountingPort(std::uint32_t n = 512, std::uint32_t cap = 2048)
        : mem_(static_cast<std::size_t>(n) * cap), bufs_(n), owner_(n, Owner::pool) {
        for (std::uint32_t i = 0; i < n; ++i) {
            bufs_[i].data = mem_.data() + static_cast<std::size_t>(i) * cap;
            bufs_[i].capacity = cap;
            free_.push_back(n - 1 - i);
        }
        cap_ = cap;
    }

    std::uint16_t alloc_bulk(PktBuf** bufs, std::uint16_t n) noexcept override {
        std::uint16_t got = 0;
        while (got < n && !free_.empty() && alloc_ok) {
            const std::uint32_t i = free_.back();
            free_.pop_back();
            owner_[i] = Owner::caller;
            bufs_[i].data = mem_.data() + static_cast<std::size_t>(i) * cap_;
            bufs_[i].len = 0;
            bufs_[i].ecn_ce = false;
            bufs[got++] = &bufs_[i];
            ++allocs;
        }
        return got;
    }
    void free_bulk(PktBuf** bufs, std::uint16_t n) noexcept override {
        for (std::uint16_t k = 0; k < n; ++k) {
            const int i = index(bufs[k]);
            if (i < 0 || owner_[static_cast<std::size_t>(i)] != Owner::caller) {
                ++errors;
                continue;
            }
            give_back(static_cast<std::uint32_t>(i));
            ++frees;
        }
    }
    std::uint16_t tx_burst(PktBuf** bufs, std::uint16_t n) noexcept override {
        const std::uint16_t take = std::min(n, tx_limit);
        for (std::uint16_t k = 0; k < take; ++k) {
            const int i = index(bufs[k]);
            if (i < 0 || owner_[static_cast<std::size_t>(i)] != Owner::caller) {
                ++errors;
                continue;
            }
            sent.emplace_back(bufs[k]->data, bufs[k]->data + bufs[k]->len);
            give_back(static_cast<std::uint32_t>(i));
            ++txs;
        }
        return take;
    }
    std::uint16_t rx_burst(PktBuf** bufs, std::uint16_t n) noexcept override {
        std::uint16_t got = 0;
        while (got < n && rxq_pos_ < rxq_.size()) {
            const std::uint32_t i = rxq_[rxq_pos_++];
            owner_[i] = Owner::caller;
            bufs[got++] = &bufs_[i];
        }
        return got;
    }
    [[nodiscard]] std::uint32_t max_frame() const noexcept override { return cap_; }
    [[nodiscard]] bool link_up() const noexcept override { return up; }

    /** Queues a copy of @p bytes for rx_burst(). */
    void inject(const std::vector<std::uint8_t>& bytes) {
        ASSERT_FALSE(free_.empty());
        const std::uint32_t i = free_.back();
        free_.pop_back();
        owner_[i] = Owner::rxq;
        bufs_[i].data = mem_.data() + static_cast<std::size_t>(i) * cap_;
        std::memcpy(bufs_[i].data, bytes.data(), bytes.size());
        bufs_[i].len = static_cast<std::uint32_t>(bytes.size());
        rxq_.push_back(i);
        ++allocs;
    }

    [[nodiscard]] std::size_t in_pool() const { return free_.size(); }
    [[nodiscard]] std::size_t size() const { return bufs_.size(); }

    std::vector<std::vector<std::uint8_t>> sent;
    std::uint16_t tx_limit = std::numeric_limits<std::uint16_t>::max();
    bool alloc_ok = true;
    bool up = true;
    std::uint64_t allocs = 0, frees = 0, txs = 0, errors = 0;

  private:
    int index(const PktBuf* b) const {
        const auto a = reinterpret_cast<std::uintptr_t>(b);
        const auto base = reinterpret_cast<std::uintptr_t>(bufs_.data());
        if (a < base || a >= base + bufs_.size() * sizeof(PktBuf) || (a - base) % sizeof(PktBuf))
            return -1;
        return static_cast<int>((a - base) / sizeof(PktBuf));
    }
    void give_back(std::uint32_t i) {
        owner_[i] = Owner::pool;
        free_.push_back(i);
    }

    std::vector<std::uint8_t> mem_;
    std::vector<PktBuf> bufs_;
    std::vector<Owner> owner_;
    std::vector<std::uint32_t> free_;
    std::vector<std::uint32_t> rxq_;
    std::size_t rxq_pos_ = 0;
    std::uint32_t cap_ = 0;
};

/** Every buffer is back in the pool, each taken once and given back once (sent or freed). */
void expect_balanced(const CountingPort& p) {
    EXPECT_EQ(p.errors, 0u) << "double free, or tx/free of a buffer the caller did not own";
    EXPECT_EQ(p.in_pool(), p.size()) << "leaked buffers";
    EXPECT_EQ(p.allocs, p.txs + p.frees);
}

wire::MacAddr mac(std::uint8_t e) {
    return {0x02, 0, 0, 0, e, 0};
}

/** A RoCEv2 SEND ONLY frame (IPv4, or IPv6) with @p seq in its first payload bytes. */
std::vector<std::uint8_t> roce_frame(std::uint32_t seq, std::uint8_t tos = 0, bool ipv6 = false,
                                     std::size_t payload = 64, const wire::MacAddr& dst = mac(1)) {
    wire::PathHeaders path;
    path.src_mac = mac(0);
    path.dst_mac = dst;
    path.ipv6 = ipv6;
    path.src_ip[15] = 1;
    path.dst_ip[15] = 2;
    if (!ipv6) {
        path.src_ip[10] = path.src_ip[11] = 0xff;
        path.dst_ip[10] = path.dst_ip[11] = 0xff;
    }
    path.tos = tos;
    path.flow_label = 0x54321;
    wire::PacketFields f;
    f.opcode = wire::Opcode::RC_SEND_ONLY;
    f.dest_qp = 0x12;
    f.psn = wire::Psn(seq);
    std::vector<std::uint8_t> pl(std::max<std::size_t>(payload, 4), 0x5a);
    std::memcpy(pl.data(), &seq, sizeof(seq));
    std::vector<std::uint8_t> out(2048);
    const std::size_t n = wire::build_frame(path, f, pl, out);
    EXPECT_GT(n, 0u);
    out.resize(n);
    return out;
}

/** A buffer of @p port holding @p bytes (nullptr when the pool is empty). */
PktBuf* buffer_with(PortDriver& port, const std::vector<std::uint8_t>& bytes) {
    PktBuf* b = nullptr;
    if (port.alloc_bulk(&b, 1) != 1) return nullptr;
    std::memcpy(b->data, bytes.data(), bytes.size());
    b->len = static_cast<std::uint32_t>(bytes.size());
    return b;
}

std::uint32_t seq_of(const std::vector<std::uint8_t>& bytes) {
    wire::ParsedFrame pf;
    wire::ParseOptions o;
    o.verify_icrc = false;
    if (wire::parse_frame(bytes, pf, o) != wire::RejectReason::ok || pf.payload.size() < 4)
        return ~0u;
    std::uint32_t s = 0;
    std::memcpy(&s, pf.payload.data(), sizeof(s));
    return s;
}

bool icrc_ok(const std::vector<std::uint8_t>& bytes) {
    wire::ParsedFrame pf;
    return wire::parse_frame(bytes, pf) == wire::RejectReason::ok;
}

class ImpairTest : public ::testing::Test {
  protected:
    Clock clock = Clock::virtual_clock();

    /** Sends @p count frames (seq 0..count-1) through @p st, @p burst per tx_burst call. */
    static void send_frames(ImpairedPort& st, std::uint32_t count, std::uint16_t burst = 1,
                            std::uint8_t tos = 0) {
        std::vector<PktBuf*> bufs;
        for (std::uint32_t s = 0; s < count;) {
            bufs.clear();
            for (std::uint16_t k = 0; k < burst && s < count; ++k, ++s) {
                PktBuf* b = buffer_with(st, roce_frame(s, tos));
                ASSERT_NE(b, nullptr);
                bufs.push_back(b);
            }
            const auto n = static_cast<std::uint16_t>(bufs.size());
            ASSERT_EQ(st.tx_burst(bufs.data(), n), n);
        }
    }

    /** Releases everything held by time: jumps the clock and polls through rx_burst. */
    void flush_by_time(ImpairedPort& st) {
        for (int i = 0; i < 1000 && st.queued() > 0; ++i) {
            const std::uint64_t t = st.next_release_ns();
            if (t != 0) clock.set(t);
            std::array<PktBuf*, 8> rx{};
            const std::uint16_t n = st.rx_burst(rx.data(), 8);
            st.free_bulk(rx.data(), n);
        }
        EXPECT_EQ(st.queued(), 0u);
    }

    static std::vector<std::uint32_t> seqs(const CountingPort& p) {
        std::vector<std::uint32_t> v;
        for (const auto& f : p.sent)
            v.push_back(seq_of(f));
        return v;
    }
};

TEST_F(ImpairTest, NoImpairmentIsTransparent) {
    CountingPort inner;
    {
        ImpairedPort st(inner, &clock, ImpairConfig{});
        send_frames(st, 100, 7);
        ASSERT_EQ(inner.sent.size(), 100u);
        for (std::uint32_t i = 0; i < 100; ++i)
            EXPECT_EQ(inner.sent[i], roce_frame(i));
        EXPECT_EQ(st.stats()[LC::tx_frames], 100u);
        EXPECT_EQ(st.stats()[LC::delivered], 100u);
        EXPECT_EQ(st.queued(), 0u);
        EXPECT_EQ(st.max_frame(), inner.max_frame());
        EXPECT_TRUE(st.link_up());
    }
    expect_balanced(inner);
}

TEST_F(ImpairTest, LossRateAndSameSeedSameSequence) {
    auto run = [this](std::uint64_t seed) {
        CountingPort inner;
        ImpairConfig c;
        c.link.loss = 0.1;
        c.seed = seed;
        std::vector<std::uint32_t> got;
        {
            ImpairedPort st(inner, &clock, c);
            send_frames(st, 10000, 16);
            EXPECT_EQ(st.stats()[LC::tx_frames], 10000u);
            EXPECT_EQ(st.stats()[LC::dropped_loss] + st.stats()[LC::delivered], 10000u);
            EXPECT_EQ(st.stats()[LC::delivered], inner.sent.size());
            got = seqs(inner);
        }
        expect_balanced(inner);
        return got;
    };
    const auto a = run(7);
    const auto lost = 10000 - a.size();
    EXPECT_NEAR(static_cast<double>(lost), 1000.0, 120.0); // sd 30
    EXPECT_TRUE(std::is_sorted(a.begin(), a.end()));
    EXPECT_EQ(run(7), a);
    EXPECT_NE(run(8), a);
}

/** Frames with a higher seq that were sent before frame s, the most over all s. */
std::uint32_t max_overtaken(const std::vector<std::uint32_t>& order) {
    std::uint32_t worst = 0;
    for (std::size_t i = 0; i < order.size(); ++i) {
        std::uint32_t over = 0;
        for (std::size_t j = 0; j < i; ++j)
            if (order[j] > order[i]) ++over;
        worst = std::max(worst, over);
    }
    return worst;
}

TEST_F(ImpairTest, ReorderIsBoundedAndEveryHeldFrameIsDelivered) {
    for (const std::uint16_t burst : {std::uint16_t{1}, std::uint16_t{5}, std::uint16_t{32}}) {
        CountingPort inner;
        ImpairConfig c;
        c.link.reorder = 0.2;
        c.link.reorder_max_frames = 3;
        c.link.reorder_max_ns = 1'000'000;
        c.seed = 11;
        {
            ImpairedPort st(inner, &clock, c);
            send_frames(st, 3000, burst);
            EXPECT_GT(st.stats()[LC::reordered], 400u);
            // The last held frames have no followers: released by time from rx_burst calls.
            flush_by_time(st);
            const auto order = seqs(inner);
            ASSERT_EQ(order.size(), 3000u) << "burst " << burst;
            EXPECT_EQ(std::set<std::uint32_t>(order.begin(), order.end()).size(), 3000u);
            EXPECT_FALSE(std::is_sorted(order.begin(), order.end()));
            EXPECT_LE(max_overtaken(order), 3u) << "burst " << burst;
            EXPECT_EQ(st.stats()[LC::delivered], 3000u);
            EXPECT_EQ(st.held(), 0u);
        }
        expect_balanced(inner);
    }
}

TEST_F(ImpairTest, HeldFrameLeavesByTimeFromRxOrPoll) {
    CountingPort inner;
    ImpairConfig c;
    c.link.reorder = 1.0;
    c.link.reorder_max_ns = 5000;
    {
        ImpairedPort st(inner, &clock, c);
        const std::uint64_t t0 = clock.now_ns();
        send_frames(st, 1);
        EXPECT_EQ(inner.sent.size(), 0u);
        EXPECT_EQ(st.held(), 1u);
        EXPECT_EQ(st.next_release_ns(), t0 + 5000);
        clock.advance(4999);
        PktBuf* rx[4];
        EXPECT_EQ(st.rx_burst(rx, 4), 0);
        EXPECT_EQ(inner.sent.size(), 0u);
        clock.advance(1);
        EXPECT_EQ(st.rx_burst(rx, 4), 0); // the engine's rx poll sends it
        EXPECT_EQ(inner.sent.size(), 1u);
        EXPECT_EQ(st.next_release_ns(), 0u);

        send_frames(st, 1);
        clock.advance(5000);
        st.poll();
        EXPECT_EQ(inner.sent.size(), 2u);
    }
    expect_balanced(inner);
}

TEST_F(ImpairTest, FullRingReleasesItsOldestHeldFrameInsteadOfStalling) {
    CountingPort inner;
    ImpairConfig c;
    c.link.reorder = 1.0; // every frame held, 1..3 followers
    c.link.reorder_max_ns = 1'000'000'000;
    c.ring_frames = 4;
    {
        ImpairedPort st(inner, &clock, c);
        send_frames(st, 200, 8);
        EXPECT_LE(max_overtaken(seqs(inner)), 3u);
        flush_by_time(st);
        EXPECT_EQ(inner.sent.size(), 200u);
    }
    expect_balanced(inner);
}

TEST_F(ImpairTest, Duplication) {
    CountingPort inner;
    ImpairConfig c;
    c.link.duplicate = 0.1;
    c.seed = 3;
    {
        ImpairedPort st(inner, &clock, c);
        send_frames(st, 2000, 4);
        const std::uint64_t dups = st.stats()[LC::duplicated];
        EXPECT_NEAR(static_cast<double>(dups), 200.0, 60.0);
        ASSERT_EQ(inner.sent.size(), 2000u + dups);
        // A copy follows its original at once, byte for byte.
        std::uint32_t expect = 0;
        for (std::size_t i = 0; i < inner.sent.size(); ++i) {
            const std::uint32_t s = seq_of(inner.sent[i]);
            if (i > 0 && inner.sent[i] == inner.sent[i - 1]) continue;
            EXPECT_EQ(s, expect++);
        }
        EXPECT_EQ(expect, 2000u);

        // No buffer for the copy: counted, not made, nothing leaks.
        c.link.duplicate = 1.0;
        st.set_config(c);
        PktBuf* b = buffer_with(st, roce_frame(5000));
        ASSERT_NE(b, nullptr);
        inner.alloc_ok = false;
        EXPECT_EQ(st.tx_burst(&b, 1), 1);
        EXPECT_EQ(st.stats()[LC::dropped_no_buffer], 1u);
        EXPECT_EQ(inner.sent.size(), 2001u + dups);
    }
    inner.alloc_ok = true;
    expect_balanced(inner);
}

/** Byte offsets of the ICRC-masked fields of an IPv4 (or IPv6) RoCE frame without VLAN. */
std::vector<std::size_t> masked_offsets(bool ipv6) {
    const std::size_t l3 = 14;
    if (!ipv6) return {l3 + 1, l3 + 8, l3 + 10, l3 + 11, l3 + 20 + 6, l3 + 20 + 7, l3 + 28 + 4};
    return {l3 + 1, l3 + 2, l3 + 3, l3 + 7, l3 + 40 + 6, l3 + 40 + 7, l3 + 48 + 4};
}

TEST_F(ImpairTest, CorruptionFailsTheIcrcAndSparesMaskedFields) {
    for (const bool ipv6 : {false, true}) {
        CountingPort inner;
        ImpairConfig c;
        c.link.corrupt = 1.0;
        c.seed = 5;
        {
            ImpairedPort st(inner, &clock, c);
            for (std::uint32_t s = 0; s < 500; ++s) {
                PktBuf* b = buffer_with(st, roce_frame(s, 2, ipv6));
                ASSERT_EQ(st.tx_burst(&b, 1), 1);
            }
            EXPECT_EQ(st.stats()[LC::corrupted], 500u);
            ASSERT_EQ(inner.sent.size(), 500u);
            for (std::uint32_t s = 0; s < 500; ++s) {
                const auto want = roce_frame(s, 2, ipv6);
                const auto& got = inner.sent[s];
                ASSERT_EQ(got.size(), want.size());
                int bits = 0;
                std::size_t where = 0;
                for (std::size_t i = 0; i < got.size(); ++i) {
                    const int d = __builtin_popcount(static_cast<unsigned>(got[i] ^ want[i]));
                    if (d != 0) where = i;
                    bits += d;
                }
                EXPECT_EQ(bits, 1);
                EXPECT_GE(where, 14u) << "inside the Ethernet header";
                for (const std::size_t m : masked_offsets(ipv6))
                    EXPECT_EQ(got[m], want[m]) << m;
                if (ipv6) { // the traffic class's high nibble is the low nibble of byte 14
                    EXPECT_EQ(got[14] & 0x0f, want[14] & 0x0f);
                }
                EXPECT_FALSE(icrc_ok(got)) << "seq " << s << " bit at " << where;
            }
        }
        expect_balanced(inner);
    }
}

bool ipv4_checksum_ok(const std::vector<std::uint8_t>& f) {
    std::array<std::uint8_t, 20> h{};
    std::memcpy(h.data(), f.data() + 14, 20);
    const std::uint16_t stored = static_cast<std::uint16_t>(h[10] << 8 | h[11]);
    h[10] = h[11] = 0;
    return wire::ipv4_header_checksum(h.data(), 20) == stored;
}

TEST_F(ImpairTest, EcnProbabilityMarksOnlyEctFramesAndKeepsChecksums) {
    CountingPort inner;
    ImpairConfig c;
    c.ecn_mark_probability = 0.5;
    c.seed = 9;
    const std::array<std::uint8_t, 4> tos = {0x00, 0x02, 0x01, 0x03}; // Not-ECT, ECT0, ECT1, CE
    std::uint32_t marked = 0, ect = 0;
    {
        ImpairedPort st(inner, &clock, c);
        for (std::uint32_t s = 0; s < 4000; ++s) {
            PktBuf* b =
                buffer_with(st, roce_frame(s, static_cast<std::uint8_t>(0xa0 | tos[s % 4])));
            ASSERT_EQ(st.tx_burst(&b, 1), 1);
        }
        ASSERT_EQ(inner.sent.size(), 4000u);
        for (std::uint32_t s = 0; s < 4000; ++s) {
            const auto want = roce_frame(s, static_cast<std::uint8_t>(0xa0 | tos[s % 4]));
            const auto& got = inner.sent[s];
            EXPECT_TRUE(icrc_ok(got)) << s;
            EXPECT_TRUE(ipv4_checksum_ok(got)) << s;
            EXPECT_EQ(got[15] & 0xfc, 0xa0) << "DSCP kept";
            if (tos[s % 4] == 0x01 || tos[s % 4] == 0x02) {
                ++ect;
                if (got != want) {
                    EXPECT_EQ(got[15] & 3, 3);
                    ++marked;
                }
            } else {
                EXPECT_EQ(got, want) << "Not-ECT and CE frames pass unchanged";
            }
        }
        EXPECT_EQ(st.stats()[LC::ecn_marked], marked);
    }
    EXPECT_EQ(ect, 2000u);
    EXPECT_NEAR(static_cast<double>(marked), 1000.0, 110.0);
    expect_balanced(inner);
}

TEST_F(ImpairTest, RedMarksAndTailDropsOnTheModelledQueue) {
    CountingPort inner;
    ImpairConfig c;
    c.link.bandwidth_gbps = 8.0; // 1 byte per ns
    c.link.ecn = true;
    c.link.kmin_bytes = 4000;
    c.link.kmax_bytes = 8000;
    c.link.pmax = 0.5;
    c.link.queue_bytes = 12000;
    {
        ImpairedPort st(inner, &clock, c);
        // 20 frames of 998 bytes at one instant: backlog 0, 998, ... 10978, then full.
        std::vector<PktBuf*> bufs;
        for (std::uint32_t s = 0; s < 20; ++s) {
            const auto f = roce_frame(s, 0x02, false, 940);
            ASSERT_EQ(f.size(), 998u); // 1 byte per ns at 8 Gb/s: frame s finds s * 998 bytes
            bufs.push_back(buffer_with(st, f));
        }
        ASSERT_EQ(st.tx_burst(bufs.data(), 20), 20);
        EXPECT_EQ(st.stats()[LC::dropped_queue_full], 8u);
        ASSERT_EQ(inner.sent.size(), 12u);
        for (std::uint32_t s = 0; s < 12; ++s) {
            const bool ce = (inner.sent[s][15] & 3) == 3;
            if (s < 4) {
                EXPECT_FALSE(ce) << "below kmin: " << s;
            }
            if (s >= 9) {
                EXPECT_TRUE(ce) << "at or above kmax: " << s;
            }
            EXPECT_TRUE(icrc_ok(inner.sent[s]));
            EXPECT_TRUE(ipv4_checksum_ok(inner.sent[s]));
        }
        // Drained after 12 us: nothing queued, nothing marked.
        clock.advance(12'000);
        PktBuf* b = buffer_with(st, roce_frame(99, 0x02, false, 940));
        ASSERT_EQ(st.tx_burst(&b, 1), 1);
        EXPECT_EQ(inner.sent.back()[15] & 3, 2);

        // Infinite bandwidth: never a backlog, so RED between kmin and kmax never marks.
        c.link.bandwidth_gbps = 0.0;
        c.link.kmin_bytes = 1;
        st.set_config(c);
        const auto before = st.stats()[LC::ecn_marked];
        send_frames(st, 100, 10, 0x02);
        EXPECT_EQ(st.stats()[LC::ecn_marked], before);
    }
    expect_balanced(inner);
}

TEST_F(ImpairTest, LinkDownDropsOfferedAndHeldFrames) {
    CountingPort inner;
    ImpairConfig c;
    c.link.reorder = 1.0;
    c.link.reorder_max_ns = 1'000'000;
    {
        ImpairedPort st(inner, &clock, c);
        send_frames(st, 1); // held
        EXPECT_EQ(st.queued(), 1u);
        st.set_up(false);
        EXPECT_FALSE(st.link_up());
        send_frames(st, 10, 5);
        EXPECT_EQ(inner.sent.size(), 0u);
        EXPECT_EQ(st.queued(), 0u);
        EXPECT_EQ(st.stats()[LC::dropped_down], 11u);
        st.set_up(true);
        c.link.reorder = 0.0;
        st.set_config(c);
        EXPECT_TRUE(st.link_up());
        send_frames(st, 3);
        EXPECT_EQ(inner.sent.size(), 3u);
        inner.up = false;
        EXPECT_FALSE(st.link_up()) << "the inner port's link counts too";
    }
    expect_balanced(inner);
}

TEST_F(ImpairTest, BackpressureLeavesTheRestWithTheCallerAndDestructionFreesTheRing) {
    CountingPort inner(256);
    ImpairConfig c;
    c.link.loss = 0.05;
    c.link.reorder = 0.2;
    c.link.duplicate = 0.05;
    c.link.corrupt = 0.05;
    c.ecn_mark_probability = 0.2;
    c.link.reorder_max_ns = 1'000'000;
    c.ring_frames = 8;
    c.seed = 21;
    {
        ImpairedPort st(inner, &clock, c);
        inner.tx_limit = 0; // the NIC queue is full
        std::vector<PktBuf*> bufs;
        for (std::uint32_t s = 0; s < 20; ++s)
            bufs.push_back(buffer_with(st, roce_frame(s, 2)));
        const std::uint16_t took = st.tx_burst(bufs.data(), 20);
        EXPECT_GT(took, 0);
        EXPECT_LT(took, 20); // the ring (8) plus what the loss draw dropped
        EXPECT_EQ(inner.sent.size(), 0u);
        // The frames not taken are the caller's, untouched.
        for (std::uint32_t s = took; s < 20; ++s) {
            ASSERT_EQ(bufs[s]->len, roce_frame(s, 2).size());
            EXPECT_EQ(std::memcmp(bufs[s]->data, roce_frame(s, 2).data(), bufs[s]->len), 0);
        }
        // The NIC takes two per call from now on; the caller retries the rest.
        inner.tx_limit = 2;
        std::size_t next = took;
        for (int round = 0; round < 100 && next < bufs.size(); ++round)
            next += st.tx_burst(bufs.data() + next, static_cast<std::uint16_t>(bufs.size() - next));
        EXPECT_EQ(next, bufs.size());
        // Stop the NIC again and destroy the stage with frames still in its ring.
        inner.tx_limit = 0;
        for (std::uint32_t s = 0; s < 4; ++s) {
            PktBuf* b = buffer_with(st, roce_frame(100 + s, 2));
            if (st.tx_burst(&b, 1) != 1) st.free_bulk(&b, 1);
        }
        EXPECT_GT(st.queued(), 0u);
    }
    expect_balanced(inner);
}

TEST_F(ImpairTest, EverythingAtOnceIsDeterministic) {
    auto run = [this]() {
        CountingPort inner;
        ImpairConfig c;
        c.link.loss = 0.05;
        c.link.reorder = 0.1;
        c.link.duplicate = 0.05;
        c.link.corrupt = 0.05;
        c.ecn_mark_probability = 0.1;
        c.link.bandwidth_gbps = 10;
        c.link.ecn = true;
        c.link.kmin_bytes = 1000;
        c.link.kmax_bytes = 10000;
        c.link.pmax = 0.3;
        c.link.trim = 0.05;
        c.seed = 1234;
        std::vector<std::vector<std::uint8_t>> out;
        LinkStats stats;
        {
            ImpairedPort st(inner, &clock, c);
            for (int r = 0; r < 100; ++r) {
                send_frames(st, 20, 4, 0x02);
                clock.advance(500);
            }
            flush_by_time(st);
            stats = st.stats();
            out = inner.sent;
        }
        expect_balanced(inner);
        return std::make_pair(out, stats.v);
    };
    const auto a = run();
    EXPECT_EQ(run(), a);
    for (std::size_t i = 0; i < kNumLinkCounters; ++i) {
        const auto lc = static_cast<LinkCounter>(i);
        // PFC is the fabric's alone: a stage never pauses.
        if (lc != LC::dropped_down && lc != LC::dropped_queue_full && lc != LC::dropped_no_buffer &&
            lc != LC::pfc_pauses) {
            EXPECT_GT(a.second[i], 0u) << to_string(lc);
        }
    }
}

TEST_F(ImpairTest, TrimCutsThePayloadAsOnAFabricLink) {
    CountingPort inner;
    ImpairConfig c;
    ASSERT_EQ(parse_impair_spec("trim=1,trim_keep=20,trim_dscp=46", c), "");
    {
        ImpairedPort st(inner, &clock, c);
        for (std::uint32_t s = 0; s < 4; ++s) {
            PktBuf* b = buffer_with(st, roce_frame(s, 0x01, s % 2 == 1, 100 + s));
            ASSERT_EQ(st.tx_burst(&b, 1), 1);
        }
        // A frame whose payload, ICRC excluded, is no longer than what is kept passes unchanged.
        const std::vector<std::uint8_t> small = roce_frame(9, 0, false, 8);
        PktBuf* b = buffer_with(st, small);
        ASSERT_EQ(st.tx_burst(&b, 1), 1);
        ASSERT_EQ(inner.sent.size(), 5u);
        for (std::uint32_t s = 0; s < 4; ++s) {
            wire::ParsedFrame pf;
            ASSERT_EQ(wire::parse_frame(inner.sent[s], pf), wire::RejectReason::ok) << s;
            EXPECT_EQ(pf.payload.size(), 20u - 12u);
            EXPECT_EQ(seq_of(inner.sent[s]), s);
            const unsigned tclass = s % 2 == 1 ? pf.ipv6->traffic_class() : pf.ipv4->tos;
            EXPECT_EQ(tclass, 46u << 2 | 0x01u);
        }
        EXPECT_EQ(inner.sent[4], small);
        EXPECT_EQ(st.stats()[LC::trimmed], 4u);
        EXPECT_EQ(st.stats()[LC::delivered], 5u);
    }
    expect_balanced(inner);
}

TEST_F(ImpairTest, ReceiveSideImpairsWhatTheInnerPortReceives) {
    CountingPort inner(4096);
    ImpairConfig c;
    c.side = ImpairSide::rx;
    c.link.loss = 0.1;
    c.link.reorder = 0.2;
    c.link.reorder_max_frames = 3;
    c.link.reorder_max_ns = 1'000'000;
    c.link.duplicate = 0.05;
    c.seed = 4;
    std::vector<std::uint32_t> order;
    {
        ImpairedPort st(inner, &clock, c);
        // Transmit is not impaired on the receive side.
        send_frames(st, 10, 5);
        EXPECT_EQ(inner.sent.size(), 10u);
        EXPECT_EQ(st.stats()[LC::tx_frames], 0u);

        for (std::uint32_t s = 0; s < 2000; ++s)
            inner.inject(roce_frame(s));
        std::array<PktBuf*, 16> rx{};
        for (int i = 0; i < 100000 && order.size() < 2000 + st.stats()[LC::duplicated] -
                                                         st.stats()[LC::dropped_loss];
             ++i) {
            const std::uint16_t n = st.rx_burst(rx.data(), static_cast<std::uint16_t>(1 + i % 16));
            for (std::uint16_t k = 0; k < n; ++k)
                order.push_back(
                    seq_of(std::vector<std::uint8_t>(rx[k]->data, rx[k]->data + rx[k]->len)));
            st.free_bulk(rx.data(), n);
            if (n == 0 && st.next_release_ns() != 0) clock.set(st.next_release_ns());
        }
        EXPECT_EQ(st.stats()[LC::tx_frames], 2000u);
        EXPECT_EQ(st.queued(), 0u);
        EXPECT_EQ(order.size(), st.stats()[LC::delivered]);
        EXPECT_NEAR(static_cast<double>(st.stats()[LC::dropped_loss]), 200.0, 60.0);
        EXPECT_GT(st.stats()[LC::duplicated], 0u);
        EXPECT_FALSE(std::is_sorted(order.begin(), order.end()));
        std::vector<std::uint32_t> uniq = order;
        uniq.erase(std::unique(uniq.begin(), uniq.end()), uniq.end());
        EXPECT_LE(max_overtaken(uniq), 3u + 1u); // a duplicate may pass its own held original
        EXPECT_EQ(std::set<std::uint32_t>(order.begin(), order.end()).size(),
                  2000u - st.stats()[LC::dropped_loss]);

        // Cable pulled on the receive side: what arrives is dropped.
        st.set_up(false);
        inner.inject(roce_frame(7777));
        EXPECT_EQ(st.rx_burst(rx.data(), 16), 0);
        EXPECT_EQ(st.stats()[LC::dropped_down], 1u);
    }
    expect_balanced(inner);
}

TEST_F(ImpairTest, DelayHoldsEveryFrameForDelayNsInOrder) {
    CountingPort inner;
    ImpairConfig c;
    c.link.delay_ns = 2000;
    {
        ImpairedPort st(inner, &clock, c);
        const std::uint64_t t0 = clock.now_ns();
        send_frames(st, 3, 3);
        EXPECT_EQ(inner.sent.size(), 0u);
        EXPECT_EQ(st.queued(), 3u);
        EXPECT_EQ(st.held(), 0u);
        EXPECT_EQ(st.next_release_ns(), t0 + 2000);
        clock.advance(1999);
        st.poll();
        EXPECT_EQ(inner.sent.size(), 0u);
        clock.advance(1);
        st.poll();
        EXPECT_EQ(seqs(inner), (std::vector<std::uint32_t>{0, 1, 2}));
        EXPECT_EQ(st.next_release_ns(), 0u);

        // A shorter delay never lets a frame overtake one sent before it.
        auto send_seq = [&st](std::uint32_t s) {
            PktBuf* b = buffer_with(st, roce_frame(s));
            ASSERT_NE(b, nullptr);
            ASSERT_EQ(st.tx_burst(&b, 1), 1);
        };
        const std::uint64_t t1 = clock.now_ns();
        send_seq(3);
        c.link.delay_ns = 100;
        st.set_config(c);
        clock.advance(500);
        send_seq(4);
        send_seq(5);
        clock.set(t1 + 1999);
        st.poll();
        EXPECT_EQ(inner.sent.size(), 3u);
        clock.set(t1 + 2000);
        st.poll();
        EXPECT_EQ(seqs(inner), (std::vector<std::uint32_t>{0, 1, 2, 3, 4, 5}));

        // A held frame is released reorder_max_ns after it was due.
        c.link.reorder = 1.0;
        c.link.reorder_max_ns = 5000;
        st.set_config(c);
        const std::uint64_t t2 = clock.now_ns();
        send_seq(6);
        EXPECT_EQ(st.held(), 1u);
        EXPECT_EQ(st.next_release_ns(), t2 + 100 + 5000);
        clock.set(t2 + 5099);
        st.poll();
        EXPECT_EQ(inner.sent.size(), 6u);
        clock.set(t2 + 5100);
        st.poll();
        EXPECT_EQ(inner.sent.size(), 7u);
        EXPECT_EQ(st.stats()[LC::delivered], 7u);
    }
    expect_balanced(inner);
}

TEST_F(ImpairTest, DelayOnTheReceiveSide) {
    CountingPort inner;
    ImpairConfig c;
    c.side = ImpairSide::rx;
    c.link.delay_ns = 1000;
    {
        ImpairedPort st(inner, &clock, c);
        for (std::uint32_t s = 0; s < 4; ++s)
            inner.inject(roce_frame(s));
        std::array<PktBuf*, 8> rx{};
        EXPECT_EQ(st.rx_burst(rx.data(), 8), 0);
        EXPECT_EQ(st.queued(), 4u);
        clock.advance(999);
        EXPECT_EQ(st.rx_burst(rx.data(), 8), 0);
        clock.advance(1);
        ASSERT_EQ(st.rx_burst(rx.data(), 8), 4);
        for (std::uint32_t s = 0; s < 4; ++s)
            EXPECT_EQ(seq_of(std::vector<std::uint8_t>(rx[s]->data, rx[s]->data + rx[s]->len)), s);
        st.free_bulk(rx.data(), 4);
    }
    expect_balanced(inner);
}

TEST_F(ImpairTest, ReceiveSideRingFilledByDuplicatesTailDrops) {
    // rx_burst takes from the inner port what the ring has room for; the duplicates of the first
    // frames fill it, and the frames after them are tail-dropped rather than overrunning it.
    CountingPort inner;
    ImpairConfig c;
    c.side = ImpairSide::rx;
    c.link.duplicate = 1.0;
    c.ring_frames = 4;
    std::vector<std::uint32_t> order;
    {
        ImpairedPort st(inner, &clock, c);
        for (std::uint32_t s = 0; s < 8; ++s)
            inner.inject(roce_frame(s));
        std::array<PktBuf*, 16> rx{};
        for (int i = 0; i < 2; ++i) {
            const std::uint16_t n = st.rx_burst(rx.data(), 16);
            EXPECT_EQ(n, 4);
            for (std::uint16_t k = 0; k < n; ++k)
                order.push_back(
                    seq_of(std::vector<std::uint8_t>(rx[k]->data, rx[k]->data + rx[k]->len)));
            st.free_bulk(rx.data(), n);
        }
        EXPECT_EQ(st.rx_burst(rx.data(), 16), 0);
        EXPECT_EQ(st.stats()[LC::tx_frames], 8u);
        EXPECT_EQ(st.stats()[LC::duplicated], 4u);
        EXPECT_EQ(st.stats()[LC::dropped_queue_full], 4u);
        EXPECT_EQ(st.stats()[LC::delivered], 8u);
        EXPECT_EQ(st.queued(), 0u);
    }
    EXPECT_EQ(order, (std::vector<std::uint32_t>{0, 0, 1, 1, 4, 4, 5, 5}));
    expect_balanced(inner);
}

TEST_F(ImpairTest, WrapsASimFabricPortEndToEnd) {
    FabricConfig fc;
    fc.seed = 1;
    fc.pool_buffers = 512;
    fc.buffer_capacity = 2048;
    Fabric fabric(&clock, fc);
    ImpairConfig c;
    c.link.corrupt = 0.3;
    c.ecn_mark_probability = 0.3;
    c.seed = 77;
    std::uint32_t bad = 0, ce = 0, n_rx = 0;
    {
        ImpairedPort st(fabric.port(0, 0), &clock, c);
        for (std::uint32_t s = 0; s < 300; ++s) {
            PktBuf* b = buffer_with(st, roce_frame(s, 0x02, false, 64, Fabric::mac(1, 0)));
            ASSERT_NE(b, nullptr);
            ASSERT_EQ(st.tx_burst(&b, 1), 1);
            std::array<PktBuf*, 8> rx{};
            const std::uint16_t n = fabric.port(1, 0).rx_burst(rx.data(), 8);
            for (std::uint16_t k = 0; k < n; ++k) {
                ++n_rx;
                const std::vector<std::uint8_t> f(rx[k]->data, rx[k]->data + rx[k]->len);
                if (!icrc_ok(f))
                    ++bad;
                else if (rx[k]->ecn_ce)
                    ++ce;
            }
            fabric.port(1, 0).free_bulk(rx.data(), n);
        }
        EXPECT_EQ(n_rx, 300u);
        EXPECT_EQ(bad, st.stats()[LC::corrupted]);
        EXPECT_GT(ce, 0u);
        EXPECT_LE(ce, st.stats()[LC::ecn_marked]);
    }
    EXPECT_EQ(fabric.pool_free(), fc.pool_buffers);
}

TEST_F(ImpairTest, BadConstructionThrows) {
    CountingPort inner;
    EXPECT_THROW((ImpairedPort{inner, nullptr, ImpairConfig{}}), std::invalid_argument);
    ImpairConfig c;
    c.ring_frames = 0;
    EXPECT_THROW((ImpairedPort{inner, &clock, c}), std::invalid_argument);
    c.ring_frames = kMaxImpairRing + 1;
    EXPECT_THROW((ImpairedPort{inner, &clock, c}), std::invalid_argument);
}

// ---- spec parser ----

TEST(ImpairSpec, AcceptsTheDocumentedKeys) {
    ImpairConfig c;
    EXPECT_EQ(
        parse_impair_spec(
            "loss=0.01,reorder=0.01,reorder_frames=3,dup=0.005,corrupt=0.001,ecn=0.05,seed=7", c),
        "");
    EXPECT_DOUBLE_EQ(c.link.loss, 0.01);
    EXPECT_DOUBLE_EQ(c.link.reorder, 0.01);
    EXPECT_EQ(c.link.reorder_max_frames, 3);
    EXPECT_DOUBLE_EQ(c.link.duplicate, 0.005);
    EXPECT_DOUBLE_EQ(c.link.corrupt, 0.001);
    EXPECT_DOUBLE_EQ(c.ecn_mark_probability, 0.05);
    EXPECT_EQ(c.seed, 7u);
    EXPECT_FALSE(c.link.ecn);

    ImpairConfig e;
    EXPECT_EQ(parse_impair_spec(" bw = 25 ,queue_bytes=100000,red_kmin=1000,\tred_kmax=5000,"
                                "red_pmax=0.2,side=rx,up=false,ring=64,reorder_ns=500,duplicate=1",
                                e),
              "");
    EXPECT_DOUBLE_EQ(e.link.bandwidth_gbps, 25.0);
    EXPECT_EQ(e.link.queue_bytes, 100000u);
    EXPECT_TRUE(e.link.ecn);
    EXPECT_EQ(e.link.kmin_bytes, 1000u);
    EXPECT_EQ(e.link.kmax_bytes, 5000u);
    EXPECT_DOUBLE_EQ(e.link.pmax, 0.2);
    EXPECT_EQ(e.side, ImpairSide::rx);
    EXPECT_FALSE(e.link.up);
    EXPECT_EQ(e.ring_frames, 64u);
    EXPECT_EQ(e.link.reorder_max_ns, 500u);
    EXPECT_DOUBLE_EQ(e.link.duplicate, 1.0);

    // Empty spec: nothing changes. Later specs layer over earlier ones (config, then command line).
    ImpairConfig f = e;
    EXPECT_EQ(parse_impair_spec("", f), "");
    EXPECT_EQ(parse_impair_spec("   ", f), "");
    EXPECT_EQ(to_spec(f), to_spec(e));
    EXPECT_EQ(parse_impair_spec("loss=0.5,red=0", f), "");
    EXPECT_DOUBLE_EQ(f.link.loss, 0.5);
    EXPECT_FALSE(f.link.ecn);
    EXPECT_EQ(f.link.queue_bytes, 100000u);

    ImpairConfig g;
    EXPECT_EQ(parse_impair_spec("delay=1500", g), "");
    EXPECT_EQ(g.link.delay_ns, 1500u);
    EXPECT_EQ(parse_impair_spec("delay_ns=7", g), "");
    EXPECT_EQ(g.link.delay_ns, 7u);

    ImpairConfig t;
    EXPECT_DOUBLE_EQ(t.link.trim, 0.0);
    EXPECT_FALSE(t.link.trim_when_full);
    EXPECT_EQ(t.link.trim_keep_bytes, 64u);
    EXPECT_EQ(t.link.trim_dscp, 9u);
    EXPECT_EQ(parse_impair_spec("trim=0.25,trim_full=1,trim_keep=128,trim_dscp=46", t), "");
    EXPECT_DOUBLE_EQ(t.link.trim, 0.25);
    EXPECT_TRUE(t.link.trim_when_full);
    EXPECT_EQ(t.link.trim_keep_bytes, 128u);
    EXPECT_EQ(t.link.trim_dscp, 46u);
}

TEST(ImpairSpec, ToSpecRoundTrips) {
    ImpairConfig c;
    c.link.loss = 0.1234567890123;
    c.link.reorder = 1.0 / 3.0;
    c.link.reorder_max_frames = 65535;
    c.link.reorder_max_ns = std::numeric_limits<std::uint64_t>::max();
    c.link.delay_ns = 123456789;
    c.link.duplicate = 1e-9;
    c.link.corrupt = 0.5;
    c.link.bandwidth_gbps = 100;
    c.link.queue_bytes = 1 << 20;
    c.link.ecn = true;
    c.link.kmin_bytes = 5;
    c.link.kmax_bytes = 6;
    c.link.pmax = 0.75;
    c.ecn_mark_probability = 0.01;
    c.seed = std::numeric_limits<std::uint64_t>::max();
    c.side = ImpairSide::rx;
    c.link.up = false;
    c.ring_frames = 65536;
    c.link.trim = 0.125;
    c.link.trim_when_full = true;
    c.link.trim_keep_bytes = 65535;
    c.link.trim_dscp = 63;
    c.port_mask = (1u << 1) | (1u << 3) | (1u << 31);
    ImpairConfig d;
    ASSERT_EQ(parse_impair_spec(to_spec(c), d), "");
    EXPECT_EQ(d.port_mask, c.port_mask);
    EXPECT_EQ(to_spec(d), to_spec(c));
    EXPECT_EQ(d.link.loss, c.link.loss);
    EXPECT_EQ(d.link.reorder, c.link.reorder);
    EXPECT_EQ(d.seed, c.seed);
    EXPECT_EQ(d.link.reorder_max_ns, c.link.reorder_max_ns);
    EXPECT_EQ(d.link.delay_ns, c.link.delay_ns);
    EXPECT_EQ(d.link.trim, c.link.trim);
    EXPECT_EQ(d.link.trim_when_full, c.link.trim_when_full);
    EXPECT_EQ(d.link.trim_keep_bytes, c.link.trim_keep_bytes);
    EXPECT_EQ(d.link.trim_dscp, c.link.trim_dscp);
    ImpairConfig def;
    ImpairConfig e;
    e.link.loss = 0.9;
    ASSERT_EQ(parse_impair_spec(to_spec(def), e), "");
    EXPECT_EQ(to_spec(e), to_spec(def));
}

/** Parses @p spec, expects an error containing every one of @p parts, and @p out unchanged. */
void expect_rejected(std::string_view spec, std::initializer_list<std::string_view> parts) {
    ImpairConfig c;
    c.link.loss = 0.25;
    const std::string before = to_spec(c);
    const std::string err = parse_impair_spec(spec, c);
    ASSERT_FALSE(err.empty()) << spec;
    for (const std::string_view p : parts)
        EXPECT_NE(err.find(p), std::string::npos) << "'" << err << "' lacks '" << p << "'";
    EXPECT_EQ(to_spec(c), before) << "config changed by a rejected spec";
}

TEST(ImpairSpec, RejectsBadSpecsNamingTheKey) {
    expect_rejected("lose=0.1", {"unknown key", "'lose'"});
    expect_rejected("loss=0.1,bogus=1", {"unknown key", "'bogus'"});
    expect_rejected("loss=abc", {"'loss'", "'abc'", "probability"});
    expect_rejected("loss=1.5", {"'loss'", "'1.5'"});
    expect_rejected("loss=-0.1", {"'loss'", "'-0.1'"});
    expect_rejected("loss=nan", {"'loss'", "'nan'"});
    expect_rejected("loss=inf", {"'loss'"});
    expect_rejected("loss=1e400", {"'loss'"});
    expect_rejected("loss=0.1x", {"'loss'", "'0.1x'"});
    expect_rejected("loss=", {"'loss'", "''"});
    expect_rejected("dup=2", {"'dup'"});
    expect_rejected("ecn=0.5.5", {"'ecn'"});
    expect_rejected("corrupt=1,corrupt=0", {"'corrupt'", "twice"});
    expect_rejected("dup=0.1,duplicate=0.2", {"'duplicate'", "twice"});
    expect_rejected("reorder_frames=70000", {"'reorder_frames'", "'70000'"});
    expect_rejected("reorder_frames=-1", {"'reorder_frames'"});
    expect_rejected("reorder_ns=99999999999999999999999", {"'reorder_ns'"});
    expect_rejected("delay=-1", {"'delay'", "'-1'"});
    expect_rejected("delay_ns=1.5", {"'delay_ns'"});
    expect_rejected("seed=-1", {"'seed'", "'-1'"});
    expect_rejected("seed=0x10", {"'seed'"});
    expect_rejected("ring=0", {"'ring'"});
    expect_rejected("ring=65537", {"'ring'"});
    expect_rejected("side=both", {"'side'", "'both'"});
    expect_rejected("up=maybe", {"'up'", "'maybe'"});
    expect_rejected("bw=-1", {"'bw'"});
    expect_rejected("queue=1.5", {"'queue'"});
    expect_rejected("trim=1.5", {"'trim'", "'1.5'"});
    expect_rejected("trim_full=2", {"'trim_full'", "'2'"});
    expect_rejected("trim_keep=65536", {"'trim_keep'"});
    expect_rejected("trim_dscp=64", {"'trim_dscp'", "'64'"});
    expect_rejected("red_kmin=5000,red_kmax=1000", {"red_kmin", "red_kmax"});
    expect_rejected("loss", {"missing '='", "'loss'"});
    expect_rejected("loss=0.1,", {"empty item"});
    expect_rejected(",loss=0.1", {"empty item"});
    expect_rejected("loss=0.1,,dup=0.1", {"empty item"});
    expect_rejected("=0.1", {"unknown key", "''"});
    expect_rejected("ports=32", {"'ports'", "'32'"});
    expect_rejected("ports=1+", {"'ports'"});
    expect_rejected("ports=+1", {"'ports'"});
    expect_rejected("ports=1,2", {"missing '='", "'2'"}); // the comma ends the value
    expect_rejected("ports=none", {"'ports'"});
}

// ports= names the ports a device wraps (Runtime), for one bad plane among good ones.
TEST(ImpairSpec, PortsNamesASubset) {
    ImpairConfig c;
    EXPECT_EQ(c.port_mask, ~0u);
    ASSERT_EQ(parse_impair_spec("loss=0.02,ports=1", c), "");
    EXPECT_EQ(c.port_mask, 1u << 1);
    ASSERT_EQ(parse_impair_spec("ports=0+2+3", c), "");
    EXPECT_EQ(c.port_mask, 0b1101u);
    EXPECT_NE(to_spec(c).find(",ports=0+2+3"), std::string::npos) << to_spec(c);
    ASSERT_EQ(parse_impair_spec("ports=all", c), "");
    EXPECT_EQ(c.port_mask, ~0u);
    EXPECT_NE(to_spec(c).find(",ports=all"), std::string::npos);
}

TEST(ImpairSpec, HostileInputNeverCrashesAndStaysShort) {
    // Long and binary input: the message quotes at most 32 characters, printable only.
    const std::string long_key(100000, 'k');
    ImpairConfig c;
    std::string err = parse_impair_spec(long_key + "=1", c);
    EXPECT_NE(err.find("unknown key"), std::string::npos);
    EXPECT_LT(err.size(), 400u);
    err = parse_impair_spec("loss=" + std::string(100000, '9'), c);
    EXPECT_NE(err.find("'loss'"), std::string::npos);
    EXPECT_LT(err.size(), 400u);
    const std::string binary("lo\0ss=\x01\xff", 8);
    err = parse_impair_spec(binary, c);
    EXPECT_FALSE(err.empty());
    for (const char ch : err)
        EXPECT_TRUE(ch >= 0x20 && ch < 0x7f) << static_cast<int>(ch);

    std::mt19937_64 rng(99);
    std::string alphabet = "loss=,.0123456789eE+-xnaif reorder_dup \t";
    alphabet += '\0';
    alphabet += '\xff';
    for (int i = 0; i < 20000; ++i) {
        std::string s;
        const std::size_t len = rng() % 40;
        for (std::size_t k = 0; k < len; ++k)
            s += alphabet[rng() % alphabet.size()];
        ImpairConfig d;
        const std::string before = to_spec(d);
        const std::string e = parse_impair_spec(s, d);
        if (!e.empty()) {
            EXPECT_EQ(to_spec(d), before);
        } else {
            EXPECT_GE(d.link.loss, 0.0);
        }
    }
}

TEST(ImpairSpec, SideNames) {
    EXPECT_EQ(to_string(ImpairSide::tx), "tx");
    EXPECT_EQ(to_string(ImpairSide::rx), "rx");
}

} // namespace
} // namespace droce::sim
