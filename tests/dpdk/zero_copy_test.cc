/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * Transmit by reference (zero-copy) over DPDK net_ring: EthPort chains the payload as external
 * buffers pointing into the caller's memory (not copied), and a send WQE completes only when it is
 * acknowledged AND every mbuf referencing its memory is released.
 *
 * Two devices, each on one end of a droce_ringpair, polled from the test thread with the TSC clock.
 * The sender's port is wrapped in a HoldPort that can keep an extra reference on every payload
 * segment it transmits: a PMD (or a peer) that has not let go of the memory yet.
 */
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <rte_eal.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>

#include "dpdk/eal.h"
#include "dpdk/eth_port.h"
#include "eal_environment.h"
#include "engine/connect.h"
#include "engine/device.h"

namespace droce::dpdk {
namespace {

::testing::Environment* const g_env =
    ::testing::AddGlobalTestEnvironment(new test::EalEnvironment("droce-zc-test", {}));

/**
 * Passes everything to an EthPort; with hold on, tx_burst takes one more reference on each payload
 * segment of a by-reference frame (as a PMD whose tx completion is late would), kept until
 * release_all().
 */
class HoldPort final : public PortDriver {
  public:
    explicit HoldPort(EthPort& inner) : inner_(inner) {}
    bool hold = false;
    std::vector<rte_mbuf*> held;
    bool unreachable =
        false; ///< payload_reachable() says no, as memif zero-copy for malloc'd memory
    unsigned attach_calls = 0;

    void release_all() {
        for (rte_mbuf* m : held)
            rte_pktmbuf_free_seg(m);
        held.clear();
    }
    std::uint16_t alloc_bulk(PktBuf** b, std::uint16_t n) noexcept override {
        return inner_.alloc_bulk(b, n);
    }
    void free_bulk(PktBuf** b, std::uint16_t n) noexcept override { inner_.free_bulk(b, n); }
    std::uint16_t tx_burst(PktBuf** bufs, std::uint16_t n) noexcept override {
        if (hold) {
            for (std::uint16_t i = 0; i < n; ++i) {
                auto* m = static_cast<rte_mbuf*>(bufs[i]->driver);
                for (rte_mbuf* s = m->next; s; s = s->next) {
                    if (!RTE_MBUF_HAS_EXTBUF(s)) continue;
                    rte_mbuf_refcnt_update(s, 1);
                    held.push_back(s);
                }
            }
        }
        return inner_.tx_burst(bufs, n);
    }
    std::uint16_t rx_burst(PktBuf** b, std::uint16_t n) noexcept override {
        return inner_.rx_burst(b, n);
    }
    std::uint32_t max_frame() const noexcept override { return inner_.max_frame(); }
    bool link_up() const noexcept override { return inner_.link_up(); }
    bool tx_by_reference() const noexcept override { return inner_.tx_by_reference(); }
    bool
    payload_reachable(std::span<const std::span<const std::uint8_t>> payload) noexcept override {
        return !unreachable && inner_.payload_reachable(payload);
    }
    bool attach_payload(PktBuf* buf, std::span<const std::span<const std::uint8_t>> payload,
                        std::span<const std::uint8_t> trailer, TxRef* ref) noexcept override {
        ++attach_calls;
        return !unreachable && inner_.attach_payload(buf, payload, trailer, ref);
    }
    void tx_reclaim() noexcept override { inner_.tx_reclaim(); }

  private:
    EthPort& inner_;
};

constexpr wire::MacAddr kMac[2] = {{0x02, 0, 0, 0, 0x0a, 1}, {0x02, 0, 0, 0, 0x0a, 2}};

class ZeroCopyTest : public ::testing::Test {
  protected:
    void SetUp() override {
        static unsigned serial = 0;
        const std::string name = "zc" + std::to_string(serial++);
        std::uint16_t pa = 0, pb = 0;
        ASSERT_EQ(create_ring_pair_end(name, 'a', 1024, &pa), "");
        ASSERT_EQ(probe_port("droce_ringpair,name=" + name + ",end=b,size=1024", &pb), "");
        std::string err;
        for (int i = 0; i < 2; ++i) {
            EthPortConfig c;
            c.port_id = i == 0 ? pa : pb;
            c.port_index = 0;
            c.mtu = 4200;
            eth_[i] = EthPort::create(c, &err);
            ASSERT_TRUE(eth_[i]) << err;
        }
        hold_ = std::make_unique<HoldPort>(*eth_[0]);
        dev_[0] = std::make_unique<Device>(
            "zc0", clock_, std::vector<PortSpec>{{hold_.get(), kMac[0], gid(0), 4096}});
        dev_[1] = std::make_unique<Device>(
            "zc1", clock_, std::vector<PortSpec>{{eth_[1].get(), kMac[1], gid(1), 4096}});
        for (int i = 0; i < 2; ++i) {
            int e = 0;
            pd_[i] = dev_[i]->alloc_pd(&e);
            cq_[i] = dev_[i]->create_cq(4096, &e);
            rcq_[i] = dev_[i]->create_cq(4096, &e);
            qp_[i] =
                dev_[i]->create_qp(pd_[i], cq_[i], rcq_[i],
                                   rc::QpCap{256, 256, rc::kMaxSge, rc::kMaxSge, 64}, false, &e);
            ASSERT_NE(qp_[i], nullptr);
        }
        for (int i = 0; i < 2; ++i)
            connect(i);
    }
    void TearDown() override {
        hold_->release_all();
        for (auto& d : dev_)
            d.reset();
        // The ring peers may still hold the other side's mbufs: drain both before the ports go.
        for (int round = 0; round < 4; ++round)
            for (auto& e : eth_) {
                PktBuf* b[64];
                const std::uint16_t n = e->rx_burst(b, 64);
                if (n) e->free_bulk(b, n);
            }
        hold_.reset();
        for (auto& e : eth_)
            e.reset();
    }

    static wire::Ipv6Addr gid(int i) {
        return gid_from_ipv4(10, 9, 0, static_cast<std::uint8_t>(i + 1));
    }

    void connect(int i) {
        const int peer = 1 - i;
        RcConnectParams c;
        c.qp_access_flags = rc::kAccessRemoteWrite | rc::kAccessRemoteRead;
        c.path_mtu = rc::Mtu::mtu4096;
        c.dest_qp_num = qp_[peer]->qpn;
        c.max_dest_rd_atomic = 16;
        c.min_rnr_timer = 1;
        c.ah_attr.dgid = gid(peer);
        c.ah_attr.dmac = kMac[peer];
        c.timeout = 18; // ~1 s: no retransmission while a test holds buffers
        c.max_rd_atomic = 16;
        rc::QpState refused = rc::QpState::rts;
        ASSERT_EQ(connect_rc(*dev_[i], qp_[i], c, &refused), 0)
            << "modify_qp to " << rc::to_string(refused);
    }

    mem::Mr* reg(int side, std::vector<std::uint8_t>& buf) {
        int e = 0;
        mem::Mr* mr = dev_[side]->reg_mr(
            pd_[side], buf.data(), buf.size(),
            rc::kAccessLocalWrite | rc::kAccessRemoteWrite | rc::kAccessRemoteRead, &e);
        EXPECT_NE(mr, nullptr);
        return mr;
    }

    /** A signaled RDMA WRITE of @p len bytes from the start of @p src to the start of @p dst. */
    static rc::SendWqe write_wqe(std::uint64_t id, const std::vector<std::uint8_t>& src,
                                 const mem::Mr* smr, const std::vector<std::uint8_t>& dst,
                                 const mem::Mr* dmr, std::uint32_t len) {
        rc::SendWqe w;
        w.wr_id = id;
        w.opcode = rc::WrOpcode::rdma_write;
        w.send_flags = rc::kSendSignaled;
        w.num_sge = 1;
        w.sg_list[0] = rc::Sge{reinterpret_cast<std::uintptr_t>(src.data()), len, smr->lkey};
        w.remote_addr = reinterpret_cast<std::uintptr_t>(dst.data());
        w.rkey = dmr->rkey;
        return w;
    }

    /** Polls both devices until @p done or 5 s pass; collects CQEs. */
    bool run_until(const std::function<bool()>& done) {
        for (std::uint64_t end = clock_.now_ns() + 5'000'000'000ull; clock_.now_ns() < end;) {
            dev_[0]->poll();
            dev_[1]->poll();
            collect();
            if (done()) return true;
        }
        return false;
    }
    void collect() {
        rc::Cqe c[32];
        for (int i = 0; i < 2; ++i) {
            std::uint32_t n;
            while ((n = dev_[i]->poll_cq(cq_[i], c, 32)) > 0)
                scqe_[i].insert(scqe_[i].end(), c, c + n);
            while ((n = dev_[i]->poll_cq(rcq_[i], c, 32)) > 0)
                rcqe_[i].insert(rcqe_[i].end(), c, c + n);
        }
    }

    Clock clock_ = Clock::tsc();
    std::unique_ptr<EthPort> eth_[2];
    std::unique_ptr<HoldPort> hold_;
    std::unique_ptr<Device> dev_[2];
    mem::Pd* pd_[2] = {};
    rc::Cq* cq_[2] = {};
    rc::Cq* rcq_[2] = {};
    rc::Qp* qp_[2] = {};
    std::vector<rc::Cqe> scqe_[2], rcqe_[2];
};

std::vector<std::uint8_t> pattern(std::size_t n, std::uint32_t seed) {
    std::vector<std::uint8_t> v(n);
    std::mt19937 rng(seed);
    for (auto& x : v)
        x = static_cast<std::uint8_t>(rng());
    return v;
}

TEST_F(ZeroCopyTest, RingPortSendsByReference) {
    EXPECT_EQ(eth_[0]->zc_memory(), EthPort::ZcMemory::any);
    EXPECT_TRUE(eth_[0]->tx_by_reference());
    EXPECT_EQ(dev_[0]->tx_by_reference_min(0), rc::kTxByRefMinPayload);
}

TEST_F(ZeroCopyTest, PayloadReachableSaysWhatAttachPayloadTakes) {
    std::vector<std::uint8_t> m(100);
    const std::span<const std::uint8_t> one(m);
    const std::span<const std::uint8_t> none;
    const std::uint64_t refused = eth_[0]->counter(PortCounter::tx_ext_refused);
    EXPECT_TRUE(eth_[0]->payload_reachable({&one, 1})); // net_ring reads any memory
    EXPECT_FALSE(eth_[0]->payload_reachable({}));
    EXPECT_FALSE(eth_[0]->payload_reachable({&none, 1}));
    std::vector<std::span<const std::uint8_t>> many(EthPort::kMaxExtSegs + 1, one);
    EXPECT_FALSE(eth_[0]->payload_reachable(many));
    EXPECT_EQ(eth_[0]->counter(PortCounter::tx_ext_refused), refused + 3);
}

/**
 * Memory the port cannot send from (perftest's malloc'd buffers on memif zero-copy) is copied,
 * and the engine learns it before it builds a split frame: the ICRC over the payload is summed
 * once (for the copy), not first for a split frame attach_payload then refuses.
 */
TEST_F(ZeroCopyTest, UnreachableMemoryIsCopiedWithoutASplitFrameFirst) {
    dev_[0]->set_tx_by_reference(0, 1);
    hold_->unreachable = true;
    std::vector<std::uint8_t> a = pattern(65536, 5), b(65536, 0);
    mem::Mr* amr = reg(0, a);
    mem::Mr* bmr = reg(1, b);
    const rc::SendWqe w = write_wqe(1, a, amr, b, bmr, 65536);
    std::uint32_t bad = 0;
    ASSERT_EQ(dev_[0]->post_send(qp_[0], &w, 1, &bad), 0);
    ASSERT_TRUE(run_until([&] { return scqe_[0].size() == 1; }));
    EXPECT_EQ(scqe_[0][0].status, rc::WcStatus::success);
    EXPECT_EQ(a, b);
    EXPECT_EQ(hold_->attach_calls, 0u) << "a split frame was built for memory the port refuses";
    EXPECT_EQ(dev_[0]->total_counters()[Counter::tx_zc_pkts], 0u);
    EXPECT_EQ(dev_[0]->total_counters()[Counter::tx_zc_copied], 16u); // 64 KiB at path MTU 4096
}

/** EthPort level: the transmitted chain's payload segment is the caller's memory, not a copy. */
TEST_F(ZeroCopyTest, PayloadSegmentPointsIntoCallerMemory) {
    std::vector<std::uint8_t> payload = pattern(3000, 7);
    wire::PathHeaders path;
    path.src_mac = kMac[0];
    path.dst_mac = kMac[1];
    path.src_ip = gid(0);
    path.dst_ip = gid(1);
    wire::PacketFields f;
    f.opcode = wire::Opcode::RC_RDMA_WRITE_ONLY;
    f.dest_qp = 0x12;
    f.va = 0x1000;
    f.rkey = 5;
    f.dma_len = 3000;
    const std::span<const std::uint8_t> span(payload);
    const std::span<const std::span<const std::uint8_t>> spans(&span, 1);

    PktBuf* b = nullptr;
    ASSERT_EQ(eth_[0]->alloc_bulk(&b, 1), 1);
    wire::SplitFrame sf;
    ASSERT_TRUE(wire::build_frame_split(path, f, spans, b->room(), sf));
    b->len = static_cast<std::uint32_t>(sf.header_len);
    TxRef ref;
    ASSERT_TRUE(eth_[0]->attach_payload(b, spans, sf.trailer_bytes(), &ref));
    EXPECT_EQ(ref.held(), 1u);
    ASSERT_EQ(eth_[0]->tx_burst(&b, 1), 1);

    // Receive the raw mbuf chain on the peer end (not through EthPort::rx_burst, which joins it).
    rte_mbuf* m = nullptr;
    ASSERT_EQ(rte_eth_rx_burst(eth_[1]->port_id(), 0, &m, 1), 1);
    ASSERT_EQ(m->nb_segs, 3);
    EXPECT_EQ(m->pkt_len, sf.header_len + 3000 + sf.trailer_len);
    EXPECT_EQ(m->data_len, sf.header_len);
    rte_mbuf* seg = m->next;
    EXPECT_TRUE(RTE_MBUF_HAS_EXTBUF(seg));
    EXPECT_EQ(rte_pktmbuf_mtod(seg, const std::uint8_t*), payload.data()) << "payload was copied";
    EXPECT_EQ(seg->data_len, 3000);
    EXPECT_EQ(seg->next->data_len, sf.trailer_len);
    EXPECT_FALSE(ref.released()) << "the peer still holds the segment";

    // The chain as one frame: the same bytes build_frame makes, and it parses with the ICRC right.
    std::vector<std::uint8_t> joined(m->pkt_len);
    ASSERT_NE(rte_pktmbuf_read(m, 0, m->pkt_len, joined.data()), nullptr);
    std::vector<std::uint8_t> copy(8192);
    const std::size_t n = wire::build_frame(path, f, spans, copy);
    copy.resize(n);
    EXPECT_EQ(joined, copy);
    wire::ParsedFrame pf;
    EXPECT_EQ(wire::parse_frame(joined, pf), wire::RejectReason::ok);

    rte_pktmbuf_free(m);
    EXPECT_TRUE(ref.released()) << "free_cb did not report the release";
}

/** The send CQE waits for the ACK and for the release of every mbuf referencing the memory. */
TEST_F(ZeroCopyTest, CqeWaitsForAckAndRelease) {
    std::vector<std::uint8_t> src = pattern(8192, 3), dst(8192, 0);
    mem::Mr* smr = reg(0, src);
    mem::Mr* dmr = reg(1, dst);
    hold_->hold = true;
    const rc::SendWqe w = write_wqe(42, src, smr, dst, dmr, 8192);
    std::uint32_t bad = 0;
    ASSERT_EQ(dev_[0]->post_send(qp_[0], &w, 1, &bad), 0);

    // Acknowledged: the data is there and the ACK came back ...
    ASSERT_TRUE(run_until([&] { return qp_[0]->counters[Counter::acks_rcvd] > 0; }));
    EXPECT_EQ(dst, src);
    EXPECT_EQ(dev_[0]->total_counters()[Counter::tx_zc_pkts], 2u); // two 4096 B packets
    EXPECT_EQ(hold_->held.size(), 2u);
    // ... but the segments are still held: no CQE, however long the engine runs.
    for (int i = 0; i < 1000; ++i) {
        dev_[0]->poll();
        dev_[1]->poll();
    }
    collect();
    EXPECT_TRUE(scqe_[0].empty()) << "completed while a driver still held the payload";

    hold_->release_all();
    ASSERT_TRUE(run_until([&] { return !scqe_[0].empty(); }));
    EXPECT_EQ(scqe_[0][0].wr_id, 42u);
    EXPECT_EQ(scqe_[0][0].status, rc::WcStatus::success);
}

/** Completions stay in order: a later WQE released first still completes after the held one. */
TEST_F(ZeroCopyTest, CompletionsStayInOrderBehindAHeldWqe) {
    std::vector<std::uint8_t> src = pattern(8192, 4), dst(8192, 0);
    mem::Mr* smr = reg(0, src);
    mem::Mr* dmr = reg(1, dst);
    const auto write = [&](std::uint64_t id, std::size_t off, std::uint32_t len) {
        rc::SendWqe w;
        w.wr_id = id;
        w.opcode = rc::WrOpcode::rdma_write;
        w.send_flags = rc::kSendSignaled;
        w.num_sge = 1;
        w.sg_list[0] = rc::Sge{reinterpret_cast<std::uintptr_t>(src.data() + off), len, smr->lkey};
        w.remote_addr = reinterpret_cast<std::uintptr_t>(dst.data() + off);
        w.rkey = dmr->rkey;
        std::uint32_t bad = 0;
        ASSERT_EQ(dev_[0]->post_send(qp_[0], &w, 1, &bad), 0);
    };
    hold_->hold = true;
    write(1, 0, 4096);
    ASSERT_TRUE(run_until([&] { return qp_[0]->counters[Counter::acks_rcvd] >= 1; }));
    hold_->hold = false;
    write(2, 4096, 4096); // copied? no: by reference, but not held
    ASSERT_TRUE(run_until([&] { return qp_[0]->counters[Counter::acks_rcvd] >= 2; }));
    for (int i = 0; i < 100; ++i)
        dev_[0]->poll();
    collect();
    EXPECT_TRUE(scqe_[0].empty()) << "WQE 2 completed before the held WQE 1";
    hold_->release_all();
    ASSERT_TRUE(run_until([&] { return scqe_[0].size() == 2; }));
    EXPECT_EQ(scqe_[0][0].wr_id, 1u);
    EXPECT_EQ(scqe_[0][1].wr_id, 2u);
    EXPECT_EQ(dst, src);
}

/** Every op over the ring pair with transmit by reference on (even for 1 byte), data verified. */
TEST_F(ZeroCopyTest, DataVerifiedEndToEnd) {
    dev_[0]->set_tx_by_reference(0, 1);
    dev_[1]->set_tx_by_reference(0, 1);
    constexpr std::size_t kLen = 3 * 65536;
    std::vector<std::uint8_t> a = pattern(kLen, 11), b(kLen, 0), r(kLen, 0);
    mem::Mr* amr = reg(0, a);
    mem::Mr* bmr = reg(1, b);
    mem::Mr* rmr = reg(0, r);
    std::uint64_t id = 0;
    for (std::uint32_t size : {1u, 64u, 1000u, 4096u, 4097u, 65536u}) {
        std::fill(b.begin(), b.end(), 0);
        std::fill(r.begin(), r.end(), 0);
        // WRITE from three SGEs (so packets carry several spans), then SEND, then READ back.
        rc::SendWqe w;
        w.wr_id = ++id;
        w.opcode = rc::WrOpcode::rdma_write;
        w.send_flags = rc::kSendSignaled;
        const std::uint32_t part = size / 3, last = size - 2 * part;
        w.num_sge = 0;
        std::uint32_t off = 0;
        for (std::uint32_t len : {part, part, last}) {
            if (len == 0) continue;
            w.sg_list[w.num_sge++] =
                rc::Sge{reinterpret_cast<std::uintptr_t>(a.data() + off), len, amr->lkey};
            off += len;
        }
        w.remote_addr = reinterpret_cast<std::uintptr_t>(b.data());
        w.rkey = bmr->rkey;
        std::uint32_t bad = 0;
        ASSERT_EQ(dev_[0]->post_send(qp_[0], &w, 1, &bad), 0);
        ASSERT_TRUE(run_until([&] { return scqe_[0].size() == id; })) << "WRITE " << size;
        EXPECT_EQ(scqe_[0].back().status, rc::WcStatus::success);
        EXPECT_TRUE(std::equal(a.begin(), a.begin() + size, b.begin())) << "WRITE " << size;

        rc::RecvWqe rw;
        rw.wr_id = 100 + id;
        rw.num_sge = 1;
        rw.sg_list[0] =
            rc::Sge{reinterpret_cast<std::uintptr_t>(b.data() + 65536), 65536, bmr->lkey};
        ASSERT_EQ(dev_[1]->post_recv(qp_[1], &rw, 1, &bad), 0);
        rc::SendWqe s = w;
        s.wr_id = ++id;
        s.opcode = rc::WrOpcode::send;
        ASSERT_EQ(dev_[0]->post_send(qp_[0], &s, 1, &bad), 0);
        ASSERT_TRUE(run_until([&] { return scqe_[0].size() == id && !rcqe_[1].empty(); }))
            << "SEND " << size;
        EXPECT_EQ(rcqe_[1].back().byte_len, size);
        EXPECT_TRUE(std::equal(a.begin(), a.begin() + size, b.begin() + 65536)) << "SEND " << size;
        rcqe_[1].clear();

        rc::SendWqe rd;
        rd.wr_id = ++id;
        rd.opcode = rc::WrOpcode::rdma_read;
        rd.send_flags = rc::kSendSignaled;
        rd.num_sge = 1;
        rd.sg_list[0] = rc::Sge{reinterpret_cast<std::uintptr_t>(r.data()), size, rmr->lkey};
        rd.remote_addr = reinterpret_cast<std::uintptr_t>(b.data());
        rd.rkey = bmr->rkey;
        ASSERT_EQ(dev_[0]->post_send(qp_[0], &rd, 1, &bad), 0);
        ASSERT_TRUE(run_until([&] { return scqe_[0].size() == id; })) << "READ " << size;
        EXPECT_TRUE(std::equal(a.begin(), a.begin() + size, r.begin())) << "READ " << size;
    }
    for (const rc::Cqe& c : scqe_[0])
        EXPECT_EQ(c.status, rc::WcStatus::success) << c.wr_id;
    EXPECT_GT(dev_[0]->total_counters()[Counter::tx_zc_pkts], 0u);
    EXPECT_EQ(dev_[0]->total_counters()[Counter::tx_zc_copied], 0u);
    EXPECT_GT(eth_[0]->counter(PortCounter::tx_ext_segments), 0u);
}

} // namespace
} // namespace droce::dpdk
