/* SPDX-License-Identifier: BSD-3-Clause */
// Hostile input: forged and malformed packets injected straight into a device's receive path, and
// bad native API calls. The standard: a malformed or hostile packet is dropped and counted, never
// crashes and never touches memory outside a registered region; a bad verbs call returns an errno.
//
// The victim is one Device on endpoint 1 of a sim fabric. Its port driver is an InjectPort:
// rx_burst hands out the frames the test queued (any bytes, any length) before the fabric's.
// Whatever the victim transmits (ACKs, NAKs, READ responses) reaches endpoint 0, where the test
// plays the attacker/peer and reads them back with the fabric port's rx_burst. Registered buffers
// sit between guard regions (canaries) that must stay intact. Built twice: plain (suite engine) and
// with ASan+UBSan (suite asan).
#include <gtest/gtest.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "engine/device.h"
#include "sim/fabric.h"
#include "wire/icrc.h"

namespace droce::test {
namespace {

using rc::QpState;
using rc::WcStatus;
using rc::WrOpcode;
using wire::AethKind;
using wire::NakCode;
using wire::Opcode;
using wire::Psn;

/** A PortDriver around a fabric port whose rx_burst first returns frames the test queued. */
class InjectPort final : public PortDriver {
  public:
    explicit InjectPort(PortDriver& inner) : inner_(inner) {}

    /** Queues @p bytes (any length up to the buffer capacity) for the next rx_burst. */
    void inject(std::span<const std::uint8_t> bytes) {
        PktBuf* b = nullptr;
        ASSERT_EQ(inner_.alloc_bulk(&b, 1), 1);
        ASSERT_LE(bytes.size(), b->capacity);
        if (!bytes.empty()) std::memcpy(b->data, bytes.data(), bytes.size());
        b->len = static_cast<std::uint32_t>(bytes.size());
        b->port = 0;
        b->ecn_ce = false;
        queued_.push_back(b);
    }

    std::uint16_t alloc_bulk(PktBuf** bufs, std::uint16_t n) noexcept override {
        return inner_.alloc_bulk(bufs, n);
    }
    void free_bulk(PktBuf** bufs, std::uint16_t n) noexcept override { inner_.free_bulk(bufs, n); }
    std::uint16_t tx_burst(PktBuf** bufs, std::uint16_t n) noexcept override {
        return inner_.tx_burst(bufs, n);
    }
    std::uint16_t rx_burst(PktBuf** bufs, std::uint16_t n) noexcept override {
        std::uint16_t k = 0;
        while (k < n && !queued_.empty()) {
            bufs[k++] = queued_.front();
            queued_.pop_front();
        }
        return static_cast<std::uint16_t>(
            k + inner_.rx_burst(bufs + k, static_cast<std::uint16_t>(n - k)));
    }
    std::uint32_t max_frame() const noexcept override { return inner_.max_frame(); }
    bool link_up() const noexcept override { return inner_.link_up(); }

  private:
    PortDriver& inner_;
    std::deque<PktBuf*> queued_;
};

constexpr std::size_t kGuard = 4096;
constexpr std::uint8_t kCanary = 0xA5;

/** A registered region of @p size bytes with kGuard canary bytes on each side. */
struct Guarded {
    std::vector<std::uint8_t> all;
    std::vector<std::uint8_t> snapshot;
    mem::Mr* mr = nullptr;
    std::size_t size = 0;
    std::uint8_t* data() { return all.data() + kGuard; }
    [[nodiscard]] std::uint64_t addr(std::size_t off = 0) {
        return reinterpret_cast<std::uintptr_t>(data()) + off;
    }
    void snap() { snapshot.assign(data(), data() + size); }
    [[nodiscard]] bool canaries_intact() const {
        for (std::size_t i = 0; i < kGuard; ++i)
            if (all[i] != kCanary || all[kGuard + size + i] != kCanary) return false;
        return true;
    }
    [[nodiscard]] bool unchanged() { return std::memcmp(snapshot.data(), data(), size) == 0; }
};

struct Victim {
    static sim::FabricConfig cfg() {
        sim::FabricConfig c;
        c.seed = 7;
        c.endpoints = 3;
        c.planes = 1;
        c.pool_buffers = 8192;
        c.buffer_capacity = 4608;
        c.link_slots = 8192;
        return c;
    }

    Victim()
        : fabric(&clock, cfg()), port(fabric.port(1, 0)),
          dev(std::make_unique<Device>(
              "victim", clock,
              std::vector<PortSpec>{
                  PortSpec{&port, sim::Fabric::mac(1, 0), gid_from_ipv4(10, 0, 0, 2), 4096}})) {
        int err = 0;
        pd = dev->alloc_pd(&err);
        pd2 = dev->alloc_pd(&err);
        cq = dev->create_cq(4096, &err);
        path.src_mac = sim::Fabric::mac(0, 0);
        path.dst_mac = sim::Fabric::mac(1, 0);
        path.src_ip = gid_from_ipv4(10, 0, 0, 1);
        path.dst_ip = gid_from_ipv4(10, 0, 0, 2);
    }
    ~Victim() {
        run();
        drain();
    }

    std::unique_ptr<Guarded> region(std::size_t size, mem::Pd* on_pd = nullptr,
                                    std::uint32_t seed = 1) {
        auto g = std::make_unique<Guarded>();
        g->size = size;
        g->all.assign(size + 2 * kGuard, kCanary);
        std::mt19937 rng(seed);
        for (std::size_t i = 0; i < size; ++i)
            g->data()[i] = static_cast<std::uint8_t>(rng());
        int err = 0;
        g->mr = dev->reg_mr(on_pd ? on_pd : pd, g->data(), size,
                            rc::kAccessLocalWrite | rc::kAccessRemoteWrite | rc::kAccessRemoteRead |
                                rc::kAccessRemoteAtomic,
                            &err);
        EXPECT_NE(g->mr, nullptr) << err;
        g->snap();
        return g;
    }

    /** A QP connected to the attacker's address (10.0.0.1, QPN kPeerQpn), in @p to (RESET..RTS). */
    rc::Qp* qp(QpState to = QpState::rts, std::uint32_t rq_psn = 0, std::uint32_t sq_psn = 0) {
        int err = 0;
        rc::Qp* q =
            dev->create_qp(pd, cq, cq, rc::QpCap{64, 64, rc::kMaxSge, rc::kMaxSge, 64}, true, &err);
        EXPECT_NE(q, nullptr) << err;
        if (!q || to == QpState::reset) return q;
        rc::QpAttr a;
        a.qp_state = QpState::init;
        a.port_num = 1;
        a.qp_access_flags =
            rc::kAccessRemoteWrite | rc::kAccessRemoteRead | rc::kAccessRemoteAtomic;
        EXPECT_EQ(dev->modify_qp(
                      q, a, rc::kQpState | rc::kQpPkeyIndex | rc::kQpPort | rc::kQpAccessFlags),
                  0);
        if (to == QpState::init) return q;
        a.qp_state = QpState::rtr;
        a.path_mtu = rc::Mtu::mtu1024;
        a.dest_qp_num = kPeerQpn;
        a.rq_psn = rq_psn;
        a.max_dest_rd_atomic = 16;
        a.min_rnr_timer = 1;
        a.ah_attr.dgid = gid_from_ipv4(10, 0, 0, 1);
        a.ah_attr.dmac = sim::Fabric::mac(0, 0);
        a.ah_attr.port_num = 1;
        EXPECT_EQ(dev->modify_qp(q, a,
                                 rc::kQpState | rc::kQpAv | rc::kQpPathMtu | rc::kQpDestQpn |
                                     rc::kQpRqPsn | rc::kQpMaxDestRdAtomic | rc::kQpMinRnrTimer),
                  0);
        if (to == QpState::rtr) return q;
        a.qp_state = QpState::rts;
        a.sq_psn = sq_psn;
        a.timeout = 10;
        a.retry_cnt = 7;
        a.rnr_retry = 7;
        a.max_rd_atomic = 16;
        EXPECT_EQ(dev->modify_qp(q, a,
                                 rc::kQpState | rc::kQpSqPsn | rc::kQpTimeout | rc::kQpRetryCnt |
                                     rc::kQpRnrRetry | rc::kQpMaxQpRdAtomic),
                  0);
        return q;
    }

    /** Builds a frame from the attacker (10.0.0.1) to the victim. */
    std::vector<std::uint8_t> frame(const wire::PacketFields& f,
                                    std::span<const std::uint8_t> payload = {}) {
        std::vector<std::uint8_t> out(4608);
        const std::size_t n = wire::build_frame(path, f, payload, out);
        EXPECT_NE(n, 0u) << "build_frame " << wire::to_string(f.opcode);
        out.resize(n);
        return out;
    }

    void inject(std::span<const std::uint8_t> bytes) { port.inject(bytes); }

    /** Polls until idle (a few passes), advancing virtual time a little. */
    void run(int passes = 8) {
        for (int i = 0; i < passes; ++i) {
            dev->poll();
            clock.advance(1000);
        }
        rc::Cqe c[64];
        std::uint32_t n;
        while ((n = dev->poll_cq(cq, c, 64)) > 0)
            cqes.insert(cqes.end(), c, c + n);
    }

    /** Everything the victim sent that reached endpoint 0 since the last drain, parsed. */
    std::vector<std::vector<std::uint8_t>> drain() {
        std::vector<std::vector<std::uint8_t>> got;
        PktBuf* bufs[32];
        std::uint16_t n;
        while ((n = fabric.port(0, 0).rx_burst(bufs, 32)) > 0) {
            for (std::uint16_t i = 0; i < n; ++i)
                got.emplace_back(bufs[i]->data, bufs[i]->data + bufs[i]->len);
            fabric.port(0, 0).free_bulk(bufs, n);
        }
        return got;
    }

    /** Injects one frame, runs the engine, returns the victim's answers. */
    std::vector<std::vector<std::uint8_t>> exchange(std::span<const std::uint8_t> bytes) {
        inject(bytes);
        run();
        return drain();
    }

    static constexpr std::uint32_t kPeerQpn = 0x4242;

    Clock clock = Clock::virtual_clock();
    sim::Fabric fabric;
    InjectPort port;
    std::unique_ptr<Device> dev;
    mem::Pd* pd = nullptr;
    mem::Pd* pd2 = nullptr;
    rc::Cq* cq = nullptr;
    wire::PathHeaders path;
    std::vector<rc::Cqe> cqes;
};

/** The AETH syndrome of the only ACKNOWLEDGE among @p frames, or -1 when there is none. */
int ack_syndrome(const std::vector<std::vector<std::uint8_t>>& frames) {
    int syn = -1;
    for (const auto& fr : frames) {
        wire::ParsedFrame pf;
        if (wire::parse_frame(fr, pf) != wire::RejectReason::ok || !pf.aeth) continue;
        if (pf.bth->opcode() == Opcode::RC_ACKNOWLEDGE) syn = pf.aeth->syndrome;
    }
    return syn;
}

constexpr int nak(NakCode c) {
    return wire::make_syndrome(AethKind::nak, static_cast<std::uint8_t>(c));
}

/** Recomputes the ICRC of a (possibly mutated) IPv4 RoCE frame in place, so that it passes that
 * check. */
void fix_icrc(std::vector<std::uint8_t>& fr) {
    constexpr std::size_t l3 = sizeof(wire::EthHdr);
    if (fr.size() < l3 + 20 + 8 + 12 + 4) return;
    const std::size_t end = fr.size() - 4;
    const std::uint32_t c = wire::icrc_compute(std::span(fr.data() + l3, end - l3), false);
    wire::store_icrc(fr.data() + end, c);
}

wire::PacketFields req(Opcode op, std::uint32_t qpn, std::uint32_t psn) {
    wire::PacketFields f;
    f.opcode = op;
    f.dest_qp = qpn;
    f.psn = Psn(psn);
    f.ack_req = true;
    return f;
}

// ------------------------------------------------------------------------------- forged keys

TEST(Hostile, ForgedRkeysAreRemoteAccessNaks) {
    Victim v;
    auto buf = v.region(4096);
    auto other = v.region(4096, v.pd2, 2);
    auto stale = v.region(4096, nullptr, 3);
    const std::uint32_t stale_key = stale->mr->rkey;
    const std::uint64_t stale_addr = stale->addr();
    ASSERT_EQ(v.dev->dereg_mr(stale->mr), 0);
    // Re-register the same memory: a new key, the old one must not match.
    int err = 0;
    mem::Mr* again = v.dev->reg_mr(v.pd, stale->data(), stale->size,
                                   rc::kAccessLocalWrite | rc::kAccessRemoteWrite, &err);
    ASSERT_NE(again, nullptr);
    ASSERT_NE(again->rkey, stale_key);

    std::mt19937 rng(99);
    struct Case {
        std::uint32_t rkey;
        std::uint64_t va;
    };
    std::vector<Case> cases = {
        {stale_key, stale_addr}, {other->mr->rkey, other->addr()}, {0, buf->addr()}};
    for (int i = 0; i < 20; ++i)
        cases.push_back({static_cast<std::uint32_t>(rng()), buf->addr()});
    std::vector<std::uint8_t> payload(64, 0xEE);
    std::uint64_t naks = 0;
    for (const Case& c : cases) {
        if (c.rkey == buf->mr->rkey) continue;
        for (Opcode op :
             {Opcode::RC_RDMA_WRITE_ONLY, Opcode::RC_RDMA_READ_REQUEST, Opcode::RC_FETCH_ADD}) {
            rc::Qp* q = v.qp();
            wire::PacketFields f = req(op, q->qpn, 0);
            f.va = c.va;
            f.rkey = c.rkey;
            f.dma_len = op == Opcode::RC_FETCH_ADD ? 8 : 64;
            f.swap_add = 1;
            auto fr =
                v.frame(f, op == Opcode::RC_RDMA_WRITE_ONLY ? std::span<const std::uint8_t>(payload)
                                                            : std::span<const std::uint8_t>());
            auto ans = v.exchange(fr);
            EXPECT_EQ(ack_syndrome(ans), nak(NakCode::remote_access_error))
                << wire::to_string(op) << " rkey " << std::hex << c.rkey;
            EXPECT_EQ(q->state, QpState::err);
            naks += q->counters[Counter::resp_remote_access_errors];
            EXPECT_EQ(v.dev->destroy_qp(q), 0);
        }
    }
    EXPECT_TRUE(buf->canaries_intact() && buf->unchanged());
    EXPECT_TRUE(other->canaries_intact() && other->unchanged());
    EXPECT_TRUE(stale->canaries_intact() && stale->unchanged());
    EXPECT_EQ(naks, 3 * cases.size());
    (void)v.dev->dereg_mr(again);
}

// -------------------------------------------------------------------------- bounds and lengths

TEST(Hostile, OutOfBoundsVaAndLengthsNeverTouchMemory) {
    Victim v;
    auto buf = v.region(4096);
    const std::uint64_t base = buf->addr();
    std::vector<std::uint8_t> payload(256, 0xEE);
    struct Case {
        std::uint64_t va;
        std::uint32_t dma_len;
        std::size_t pay;
    };
    const Case cases[] = {
        {base + 4096, 1, 1},       // just past the end
        {base + 4096 - 8, 16, 16}, // straddles the end
        {base - 1, 4, 4},          // just before the start
        {~0ull - 3, 8, 8},         // wraps 2^64
        {~0ull, 256, 256},
        {base, 0x80000000u, 256}, // DMA length 2^31
        {base, 0xFFFFFFFFu, 256}, // DMA length 2^32-1
        {base + 100, 0xFFFFFFFFu, 0},
        {base, 16, 256},                // payload longer than the DMA length
        {base, 0, 256},                 // payload on a zero-length write
        {base + 4000, 0x7FFFFFFFu, 96}, // fits the packet but not the MR
    };
    // Legal as a READ (16 and 0 bytes inside the MR): a data-carrying case only for writes.
    const auto legal_read = [&](const Case& c) {
        return c.va == base && (c.dma_len == 16 || c.dma_len == 0);
    };
    auto recv = v.region(4096, nullptr, 9);
    for (const Case& c : cases) {
        for (Opcode op :
             {Opcode::RC_RDMA_WRITE_ONLY, Opcode::RC_RDMA_WRITE_FIRST, Opcode::RC_RDMA_READ_REQUEST,
              Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE}) {
            if (op == Opcode::RC_RDMA_READ_REQUEST && legal_read(c)) continue;
            rc::Qp* q = v.qp();
            rc::RecvWqe r; // for WRITE with immediate: without one the answer would be an RNR NAK
            r.num_sge = 1;
            r.sg_list[0] = rc::Sge{recv->addr(), 4096, recv->mr->lkey};
            std::uint32_t bad = 0;
            ASSERT_EQ(v.dev->post_recv(q, &r, 1, &bad), 0);
            wire::PacketFields f = req(op, q->qpn, 0);
            f.va = c.va;
            f.rkey = buf->mr->rkey;
            f.dma_len = c.dma_len;
            const bool has_payload = op != Opcode::RC_RDMA_READ_REQUEST;
            auto fr = v.frame(f, has_payload ? std::span(payload.data(), c.pay)
                                             : std::span<const std::uint8_t>());
            auto ans = v.exchange(fr);
            const int syn = ack_syndrome(ans);
            EXPECT_TRUE(syn == nak(NakCode::remote_access_error) ||
                        syn == nak(NakCode::invalid_request))
                << wire::to_string(op) << " va " << std::hex << c.va << " len " << c.dma_len
                << " syn " << syn;
            EXPECT_TRUE(buf->canaries_intact());
            EXPECT_TRUE(buf->unchanged()) << wire::to_string(op) << " va " << std::hex << c.va;
            // A READ must not have leaked anything: no READ RESPONSE carrying data was sent.
            for (const auto& a : ans) {
                wire::ParsedFrame pf;
                ASSERT_EQ(wire::parse_frame(a, pf), wire::RejectReason::ok);
                EXPECT_EQ(pf.bth->opcode(), Opcode::RC_ACKNOWLEDGE);
            }
            EXPECT_EQ(v.dev->destroy_qp(q), 0);
        }
    }
}

TEST(Hostile, AtomicMisalignedAndAtEndOfMr) {
    Victim v;
    auto buf = v.region(4096);
    const struct {
        std::uint64_t va;
        int syn;
    } cases[] = {
        {buf->addr(3), nak(NakCode::invalid_request)},
        {buf->addr(4092), -2}, // last 4 bytes: misaligned or out of range, either way NAK
        {buf->addr(4096), nak(NakCode::remote_access_error)},
        {buf->addr(4088), 0}, // last 8 bytes: legal
    };
    for (const auto& c : cases) {
        for (Opcode op : {Opcode::RC_COMPARE_SWAP, Opcode::RC_FETCH_ADD}) {
            rc::Qp* q = v.qp();
            wire::PacketFields f = req(op, q->qpn, 0);
            f.va = c.va;
            f.rkey = buf->mr->rkey;
            f.dma_len = 8;
            f.swap_add = 0x1111111111111111ull;
            f.compare = 0;
            auto ans = v.exchange(v.frame(f));
            EXPECT_TRUE(buf->canaries_intact());
            if (c.syn == 0) {
                int n = 0;
                for (const auto& a : ans) {
                    wire::ParsedFrame pf;
                    if (wire::parse_frame(a, pf) == wire::RejectReason::ok &&
                        pf.bth->opcode() == Opcode::RC_ATOMIC_ACKNOWLEDGE)
                        ++n;
                }
                EXPECT_EQ(n, 1);
                buf->snap();
            } else {
                const int syn = ack_syndrome(ans);
                if (c.syn == -2) {
                    EXPECT_TRUE(syn == nak(NakCode::invalid_request) ||
                                syn == nak(NakCode::remote_access_error))
                        << syn;
                } else {
                    EXPECT_EQ(syn, c.syn) << wire::to_string(op) << std::hex << " va " << c.va;
                }
                EXPECT_TRUE(buf->unchanged());
            }
            EXPECT_EQ(v.dev->destroy_qp(q), 0);
        }
    }
}

// ------------------------------------------------------------------- multi-packet overruns

/** Opcodes of the frames in @p frames. */
std::vector<Opcode> opcodes(const std::vector<std::vector<std::uint8_t>>& frames) {
    std::vector<Opcode> ops;
    for (const auto& fr : frames) {
        wire::ParsedFrame pf;
        if (wire::parse_frame(fr, pf) == wire::RejectReason::ok) ops.push_back(pf.bth->opcode());
    }
    return ops;
}

TEST(Hostile, WriteMorePacketsThanTheDmaLengthSays) {
    Victim v;
    std::vector<std::uint8_t> payload(1024, 0xEE);
    for (Opcode tail : {Opcode::RC_RDMA_WRITE_LAST, Opcode::RC_RDMA_WRITE_MIDDLE}) {
        auto buf = v.region(4096);
        rc::Qp* q = v.qp();
        // FIRST: 1024 of 1100 bytes ending exactly at the MR end; then a 1024-byte LAST/MIDDLE.
        wire::PacketFields f = req(Opcode::RC_RDMA_WRITE_FIRST, q->qpn, 0);
        f.va = buf->addr(4096 - 1100);
        f.rkey = buf->mr->rkey;
        f.dma_len = 1100;
        f.ack_req = false;
        auto ans = v.exchange(v.frame(f, payload));
        EXPECT_EQ(ack_syndrome(ans), -1);
        wire::PacketFields g = req(tail, q->qpn, 1);
        ans = v.exchange(v.frame(g, payload));
        EXPECT_TRUE(ack_syndrome(ans) == nak(NakCode::invalid_request) ||
                    ack_syndrome(ans) == nak(NakCode::remote_access_error))
            << wire::to_string(tail) << " syn " << ack_syndrome(ans);
        EXPECT_TRUE(buf->canaries_intact()) << wire::to_string(tail);
        for (std::size_t i = 0; i < 4096 - 1100; ++i)
            ASSERT_EQ(buf->data()[i], buf->snapshot[i]) << i;
        EXPECT_EQ(v.dev->destroy_qp(q), 0);
        EXPECT_EQ(v.dev->dereg_mr(buf->mr), 0);
    }
}

TEST(Hostile, MultiPacketSendLongerThanTheReceive) {
    Victim v;
    auto buf = v.region(4096);
    rc::Qp* q = v.qp();
    rc::RecvWqe r;
    r.wr_id = 9;
    r.num_sge = 1;
    r.sg_list[0] = rc::Sge{buf->addr(1000), 2000, buf->mr->lkey};
    std::uint32_t bad = 0;
    ASSERT_EQ(v.dev->post_recv(q, &r, 1, &bad), 0);
    std::vector<std::uint8_t> payload(1024, 0xEE);
    std::vector<std::vector<std::uint8_t>> ans;
    std::uint32_t psn = 0;
    for (Opcode op : {Opcode::RC_SEND_FIRST, Opcode::RC_SEND_MIDDLE, Opcode::RC_SEND_MIDDLE,
                      Opcode::RC_SEND_LAST}) {
        auto a = v.exchange(v.frame(req(op, q->qpn, psn++), payload));
        ans.insert(ans.end(), a.begin(), a.end());
    }
    EXPECT_EQ(ack_syndrome(ans), nak(NakCode::invalid_request));
    EXPECT_TRUE(buf->canaries_intact());
    for (std::size_t i = 0; i < 4096; ++i) {
        if (i < 1000 || i >= 3000) {
            ASSERT_EQ(buf->data()[i], buf->snapshot[i]) << i;
        }
    }
    ASSERT_FALSE(v.cqes.empty());
    EXPECT_EQ(v.cqes[0].status, WcStatus::loc_len_err);
}

TEST(Hostile, DuplicateReadCannotWidenOrOutliveItsRegion) {
    Victim v;
    auto buf = v.region(4096);
    auto other = v.region(4096, nullptr, 8);
    rc::Qp* q = v.qp();
    wire::PacketFields f = req(Opcode::RC_RDMA_READ_REQUEST, q->qpn, 0);
    f.va = buf->addr(100);
    f.rkey = buf->mr->rkey;
    f.dma_len = 16;
    auto ans = v.exchange(v.frame(f));
    ASSERT_EQ(opcodes(ans), std::vector<Opcode>{Opcode::RC_RDMA_READ_RESPONSE_ONLY});
    // Move the expected PSN on, so that PSN 0 is a duplicate.
    wire::PacketFields w = req(Opcode::RC_RDMA_WRITE_ONLY, q->qpn, 1);
    w.va = other->addr();
    w.rkey = other->mr->rkey;
    w.dma_len = 0;
    (void)v.exchange(v.frame(w));
    // Duplicates asking for more, elsewhere, or through another key: no data goes out.
    for (auto [va, len, key] : {std::tuple{buf->addr(100), 4096u, buf->mr->rkey},
                                std::tuple{buf->addr(0), 16u, buf->mr->rkey},
                                std::tuple{other->addr(100), 16u, other->mr->rkey},
                                std::tuple{buf->addr(100), 0x80000000u, buf->mr->rkey}}) {
        wire::PacketFields d = f;
        d.va = va;
        d.dma_len = len;
        d.rkey = key;
        ans = v.exchange(v.frame(d));
        EXPECT_TRUE(opcodes(ans).empty()) << std::hex << va << " " << len;
    }
    // The region goes away: a duplicate of the READ must not read it.
    buf->all.assign(buf->all.size(), kCanary);
    ASSERT_EQ(v.dev->dereg_mr(buf->mr), 0);
    ans = v.exchange(v.frame(f));
    for (const auto& fr : ans) {
        wire::ParsedFrame pf;
        ASSERT_EQ(wire::parse_frame(fr, pf), wire::RejectReason::ok);
        EXPECT_NE(pf.bth->opcode(), Opcode::RC_RDMA_READ_RESPONSE_ONLY)
            << "replayed a READ of a deregistered MR";
    }
    EXPECT_TRUE(other->canaries_intact());
}

// ---------------------------------------------------------------------------- opcode sequence

TEST(Hostile, WriteMiddleOrLastWithoutFirstIsInvalidRequest) {
    Victim v;
    auto buf = v.region(4096);
    std::vector<std::uint8_t> payload(1024, 0xEE);
    for (Opcode op : {Opcode::RC_RDMA_WRITE_MIDDLE, Opcode::RC_RDMA_WRITE_LAST,
                      Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE, Opcode::RC_SEND_MIDDLE,
                      Opcode::RC_SEND_LAST}) {
        rc::Qp* q = v.qp();
        rc::RecvWqe r;
        r.num_sge = 1;
        r.sg_list[0] = rc::Sge{buf->addr(), 4096, buf->mr->lkey};
        std::uint32_t bad = 0;
        ASSERT_EQ(v.dev->post_recv(q, &r, 1, &bad), 0);
        wire::PacketFields f = req(op, q->qpn, 0);
        auto ans =
            v.exchange(v.frame(f, std::span(payload.data(), op == Opcode::RC_RDMA_WRITE_MIDDLE ||
                                                                    op == Opcode::RC_SEND_MIDDLE
                                                                ? 1024
                                                                : 100)));
        EXPECT_EQ(ack_syndrome(ans), nak(NakCode::invalid_request)) << wire::to_string(op);
        EXPECT_TRUE(buf->canaries_intact() && buf->unchanged()) << wire::to_string(op);
        EXPECT_EQ(q->counters[Counter::resp_invalid_request], 1u) << wire::to_string(op);
        EXPECT_EQ(v.dev->destroy_qp(q), 0);
    }
}

TEST(Hostile, SendLargerThanReceiveIsLengthError) {
    Victim v;
    auto buf = v.region(4096);
    rc::Qp* q = v.qp();
    rc::RecvWqe r;
    r.wr_id = 5;
    r.num_sge = 2;
    r.sg_list[0] = rc::Sge{buf->addr(0), 16, buf->mr->lkey};
    r.sg_list[1] = rc::Sge{buf->addr(100), 16, buf->mr->lkey};
    std::uint32_t bad = 0;
    ASSERT_EQ(v.dev->post_recv(q, &r, 1, &bad), 0);
    std::vector<std::uint8_t> payload(200, 0xEE);
    auto ans = v.exchange(v.frame(req(Opcode::RC_SEND_ONLY, q->qpn, 0), payload));
    EXPECT_EQ(ack_syndrome(ans), nak(NakCode::invalid_request));
    EXPECT_TRUE(buf->canaries_intact());
    // Only the posted SGEs may have been written.
    for (std::size_t i = 0; i < 4096; ++i)
        if (!(i < 16 || (i >= 100 && i < 116))) {
            ASSERT_EQ(buf->data()[i], buf->snapshot[i]) << i;
        }
    ASSERT_FALSE(v.cqes.empty());
    EXPECT_EQ(v.cqes[0].wr_id, 5u);
    EXPECT_EQ(v.cqes[0].status, WcStatus::loc_len_err);
    EXPECT_EQ(q->state, QpState::err);
}

// ------------------------------------------------------------------------------------ PSN games

TEST(Hostile, PsnFarAheadBehindAndWrapping) {
    Victim v;
    auto buf = v.region(4096);
    std::vector<std::uint8_t> payload(64, 0xEE);
    for (std::uint32_t start : {0u, 0xFFFFF0u}) {
        for (std::uint32_t psn : {start + 1, start + 0x7FFFFF, start + 0x800000, start - 1,
                                  start - 0x800000, start + 0xFFFFFF, 0xFFFFFFu, 0u}) {
            if ((psn & 0xFFFFFF) == start) continue;
            rc::Qp* q = v.qp(QpState::rts, start);
            wire::PacketFields f = req(Opcode::RC_RDMA_WRITE_ONLY, q->qpn, psn);
            f.va = buf->addr();
            f.rkey = buf->mr->rkey;
            f.dma_len = 64;
            auto ans = v.exchange(v.frame(f, payload));
            EXPECT_TRUE(buf->canaries_intact() && buf->unchanged())
                << std::hex << start << " " << psn;
            const int syn = ack_syndrome(ans);
            // Ahead: one PSN sequence NAK. Behind: a duplicate, re-ACKed or ignored; never
            // executed.
            const bool is_ack = syn >= 0 && (syn >> 5) == static_cast<int>(AethKind::ack);
            EXPECT_TRUE(syn == -1 || syn == nak(NakCode::psn_sequence_error) || is_ack)
                << std::hex << start << " " << psn << " syn " << syn;
            EXPECT_NE(q->state, QpState::err);
            EXPECT_EQ(v.dev->destroy_qp(q), 0);
        }
    }
}

// ---------------------------------------------------------------------------- wrong addressing

TEST(Hostile, WrongQpnStateOrSourceIsDroppedAndCounted) {
    Victim v;
    auto buf = v.region(4096);
    rc::Qp* reset = v.qp(QpState::reset);
    rc::Qp* init = v.qp(QpState::init);
    rc::Qp* err = v.qp();
    rc::QpAttr a;
    a.qp_state = QpState::err;
    ASSERT_EQ(v.dev->modify_qp(err, a, rc::kQpState), 0);
    rc::Qp* good = v.qp();
    std::vector<std::uint8_t> payload(64, 0xEE);
    const std::uint64_t before = v.dev->total_counters()[Counter::rx_dropped_bad_qp];
    int sent = 0;
    for (std::uint32_t qpn : {0u, 1u, 0x10u, 0xFFFFFFu, 0x11u + rc::kMaxQp, 0x11u + 500, reset->qpn,
                              init->qpn, err->qpn}) {
        wire::PacketFields f = req(Opcode::RC_RDMA_WRITE_ONLY, qpn, 0);
        f.va = buf->addr();
        f.rkey = buf->mr->rkey;
        f.dma_len = 64;
        auto ans = v.exchange(v.frame(f, payload));
        ++sent;
        EXPECT_TRUE(ans.empty() || qpn == err->qpn) << std::hex << qpn;
    }
    // From an address that is not the QP's peer: another IPv4 (the source check drops it), and an
    // IPv6 source (to an IPv6 address, not the victim's GID: the destination filter drops it
    // first).
    for (int i = 0; i < 2; ++i) {
        const wire::PathHeaders saved = v.path;
        if (i == 0) {
            v.path.src_ip = gid_from_ipv4(10, 0, 0, 9);
        } else {
            v.path.ipv6 = true;
            v.path.src_ip = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
            v.path.dst_ip = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
        }
        wire::PacketFields f = req(Opcode::RC_RDMA_WRITE_ONLY, good->qpn, 0);
        f.va = buf->addr();
        f.rkey = buf->mr->rkey;
        f.dma_len = 64;
        auto ans = v.exchange(v.frame(f, payload));
        ++sent;
        EXPECT_TRUE(ans.empty());
        v.path = saved;
    }
    EXPECT_TRUE(buf->canaries_intact() && buf->unchanged());
    EXPECT_GE(v.dev->total_counters()[Counter::rx_dropped_bad_qp] - before,
              static_cast<std::uint64_t>(sent - 2));
    EXPECT_EQ(v.dev->counters()[Counter::rx_dropped_dst_ip], 1u);
    EXPECT_EQ(good->state, QpState::rts);
}

/**
 * A P_Key outside the default partition (low 15 bits other than 0x7FFF) is dropped before the QP
 * sees the frame and counted, as rxe's check_keys drops it; the limited-membership default
 * (0x7FFF) is accepted like the full one.
 */
TEST(Hostile, PkeyOutsideTheDefaultPartitionIsDroppedAndCounted) {
    Victim v;
    auto buf = v.region(4096);
    rc::Qp* q = v.qp();
    std::vector<std::uint8_t> payload(64, 0xAB);
    std::uint32_t psn = 0;
    for (std::uint16_t pkey : {0x0000, 0x1234, 0x8000, 0xfffe}) {
        wire::PacketFields f = req(Opcode::RC_RDMA_WRITE_ONLY, q->qpn, psn);
        f.va = buf->addr();
        f.rkey = buf->mr->rkey;
        f.dma_len = 64;
        f.pkey = pkey;
        EXPECT_TRUE(v.exchange(v.frame(f, payload)).empty()) << std::hex << pkey;
    }
    EXPECT_EQ(v.dev->counters()[Counter::rx_dropped_bad_pkey], 4u);
    EXPECT_TRUE(buf->canaries_intact() && buf->unchanged());
    wire::PacketFields f = req(Opcode::RC_RDMA_WRITE_ONLY, q->qpn, psn);
    f.va = buf->addr();
    f.rkey = buf->mr->rkey;
    f.dma_len = 64;
    f.pkey = 0x7fff; // the default partition, limited membership
    const int syn = ack_syndrome(v.exchange(v.frame(f, payload)));
    EXPECT_TRUE(syn >= 0 && (syn & 0x60) == 0) << "not a positive ACK: syndrome " << syn;
    EXPECT_EQ(v.dev->counters()[Counter::rx_dropped_bad_pkey], 4u);
    EXPECT_FALSE(buf->unchanged());
    EXPECT_EQ(q->state, QpState::rts);
}

// ----------------------------------------------------------------------------- receive filter

/** A WRITE ONLY of @p payload to the start of @p buf through @p q at PSN 0 (what the QP expects).
 */
wire::PacketFields write_to(const rc::Qp* q, Guarded& buf, std::size_t len) {
    wire::PacketFields f = req(Opcode::RC_RDMA_WRITE_ONLY, q->qpn, 0);
    f.va = buf.addr();
    f.rkey = buf.mr->rkey;
    f.dma_len = static_cast<std::uint32_t>(len);
    return f;
}

TEST(HostileFilter, WritesNotAddressedToTheDeviceAreDroppedBeforeTheTransport) {
    Victim v;
    auto buf = v.region(4096);
    rc::Qp* q = v.qp();
    const std::vector<std::uint8_t> payload(64, 0xEE);
    const wire::MacAddr ours = sim::Fabric::mac(1, 0);
    const wire::MacAddr foreign =
        sim::Fabric::mac(2, 0); // endpoint 2 exists: a real neighbour's MAC
    const wire::Ipv6Addr our_ip = gid_from_ipv4(10, 0, 0, 2);
    const wire::Ipv6Addr foreign_ip = gid_from_ipv4(10, 0, 0, 3);
    struct Case {
        const char* what;
        wire::MacAddr dst_mac;
        wire::Ipv6Addr dst_ip;
        Counter reason;
    };
    const Case cases[] = {
        {"another host's MAC and IP", foreign, foreign_ip, Counter::rx_dropped_dst_mac},
        {"another host's MAC, our IP", foreign, our_ip, Counter::rx_dropped_dst_mac},
        {"broadcast MAC, our IP", kBroadcastMac, our_ip, Counter::rx_dropped_dst_mac},
        {"broadcast MAC, another host's IP", kBroadcastMac, foreign_ip,
         Counter::rx_dropped_dst_mac},
        {"IPv6 multicast MAC, our IP",
         {0x33, 0x33, 0xff, 0, 0, 2},
         our_ip,
         Counter::rx_dropped_dst_mac},
        {"IPv4 multicast MAC, our IP",
         {0x01, 0x00, 0x5e, 0, 0, 2},
         our_ip,
         Counter::rx_dropped_dst_mac},
        {"our MAC, another host's IP", ours, foreign_ip, Counter::rx_dropped_dst_ip},
        {"our MAC, IPv4 broadcast", ours, gid_from_ipv4(255, 255, 255, 255),
         Counter::rx_dropped_dst_ip},
        {"our MAC, the peer's own IP", ours, gid_from_ipv4(10, 0, 0, 1),
         Counter::rx_dropped_dst_ip},
    };
    const wire::PathHeaders saved = v.path;
    for (const Case& c : cases) {
        SCOPED_TRACE(c.what);
        const Counters before = v.dev->counters();
        v.path.dst_mac = c.dst_mac;
        v.path.dst_ip = c.dst_ip;
        auto fr = v.frame(write_to(q, *buf, payload.size()), payload);
        v.path = saved;
        const auto ans = v.exchange(fr);
        EXPECT_TRUE(ans.empty()) << ans.size() << " frames answered";
        EXPECT_TRUE(buf->unchanged() && buf->canaries_intact()) << "bytes placed";
        const Counters& after = v.dev->counters();
        EXPECT_EQ(after[c.reason] - before[c.reason], 1u);
        // One event, one counter: nothing further down the receive path saw the frame.
        for (Counter other :
             {Counter::rx_dropped_dst_mac, Counter::rx_dropped_dst_ip, Counter::rx_dropped_bad_qp,
              Counter::rx_dropped_malformed, Counter::rx_dropped_bad_icrc})
            if (other != c.reason) {
                EXPECT_EQ(after[other], before[other]) << to_string(other);
            }
        EXPECT_EQ(q->counters[Counter::rcvd_pkts], 0u);
        EXPECT_EQ(q->counters[Counter::acks_sent], 0u);
        EXPECT_EQ(q->state, QpState::rts);
    }
    // The responder still expects PSN 0, so none of the above moved it: the same WRITE, addressed
    // to the device, is placed and ACKed.
    const auto ans = v.exchange(v.frame(write_to(q, *buf, payload.size()), payload));
    const int syn = ack_syndrome(ans);
    ASSERT_GE(syn, 0) << "no ACK for the WRITE addressed to the device";
    EXPECT_EQ(syn >> 5, static_cast<int>(AethKind::ack));
    EXPECT_EQ(std::memcmp(buf->data(), payload.data(), payload.size()), 0);
    EXPECT_TRUE(buf->canaries_intact());
    EXPECT_EQ(q->counters[Counter::rcvd_pkts], 1u);
    EXPECT_EQ(v.dev->counters()[Counter::rx_dropped_dst_mac], 6u);
    EXPECT_EQ(v.dev->counters()[Counter::rx_dropped_dst_ip], 3u);
}

TEST(HostileFilter, MalformedRoceToAGroupMacCountsAsTheFilterDrop) {
    // The filter decides on the Ethernet header whatever the parser said: a RoCE frame with a bad
    // ICRC sent to broadcast is one rx_dropped_dst_mac, not a bad ICRC nor a neighbour frame.
    Victim v;
    auto buf = v.region(4096);
    rc::Qp* q = v.qp();
    const std::vector<std::uint8_t> payload(64, 0xEE);
    v.path.dst_mac = kBroadcastMac;
    auto fr = v.frame(write_to(q, *buf, payload.size()), payload);
    fr.back() ^= 0x5a;
    EXPECT_TRUE(v.exchange(fr).empty());
    EXPECT_EQ(v.dev->counters()[Counter::rx_dropped_dst_mac], 1u);
    EXPECT_EQ(v.dev->counters()[Counter::rx_dropped_bad_icrc], 0u);
    EXPECT_EQ(v.dev->counters()[Counter::neigh_tx], 0u);
    EXPECT_TRUE(buf->unchanged());
}

TEST(HostileFilter, ArpStillPassesOnlyWhenItIsForUs) {
    Victim v;
    NeighTable table(v.clock, 16);
    NeighPortAddrs addrs;
    addrs.mac = sim::Fabric::mac(0, 0);
    addrs.ipv4 = wire::Ipv4Addr{10, 0, 0, 1};
    NeighResponder attacker(table, addrs);
    const auto is_arp_reply = [](const std::vector<std::uint8_t>& fr) {
        return fr.size() >= 22 && fr[12] == 0x08 && fr[13] == 0x06 && fr[20] == 0 && fr[21] == 2;
    };
    std::array<std::uint8_t, kNeighMaxReply> req_buf{};
    // Broadcast (the normal request) and unicast to the device's MAC (a STALE refresh): answered.
    for (const std::optional<wire::MacAddr>& dst :
         {std::optional<wire::MacAddr>{}, std::optional(sim::Fabric::mac(1, 0))}) {
        const std::size_t n = attacker.build_arp_request({10, 0, 0, 2}, req_buf, dst);
        ASSERT_GT(n, 0u);
        const auto ans = v.exchange(std::span(req_buf.data(), n));
        ASSERT_EQ(ans.size(), 1u);
        EXPECT_TRUE(is_arp_reply(ans[0]));
        std::array<std::uint8_t, kNeighMaxReply> none{};
        EXPECT_EQ(attacker.handle_frame(ans[0], none).status, NeighStatus::arp_reply);
    }
    EXPECT_EQ(v.dev->counters()[Counter::neigh_tx], 2u);
    // Unicast to another host's MAC: that host's business, dropped at the filter.
    const std::size_t n =
        attacker.build_arp_request({10, 0, 0, 2}, req_buf, sim::Fabric::mac(2, 0));
    EXPECT_TRUE(v.exchange(std::span(req_buf.data(), n)).empty());
    EXPECT_EQ(v.dev->counters()[Counter::rx_dropped_dst_mac], 1u);
    // Broadcast that is not ARP (an IPv4 UDP broadcast): nothing the device needs.
    std::vector<std::uint8_t> bcast(60, 0);
    std::memcpy(bcast.data(), kBroadcastMac.data(), 6);
    std::memcpy(bcast.data() + 6, addrs.mac.data(), 6);
    bcast[12] = 0x08;
    bcast[13] = 0x00;
    bcast[14] = 0x45;
    bcast[14 + 9] = 17;
    EXPECT_TRUE(v.exchange(bcast).empty());
    EXPECT_EQ(v.dev->counters()[Counter::rx_dropped_dst_mac], 2u);
    EXPECT_EQ(v.dev->counters()[Counter::neigh_tx], 2u);
}

TEST(HostileFilter, StaleRkeyOfAReusedSlotIsRefused) {
    Victim v;
    auto buf = v.region(4096);
    rc::Qp* q = v.qp();
    const std::vector<std::uint8_t> payload(64, 0xEE);
    // Deregister and register again, many times: the slot is reused at once (same index), each key
    // differs from the one before, and a WRITE with the previous key is a remote access NAK that
    // places nothing, while the current key works.
    for (int round = 0; round < 40; ++round) {
        SCOPED_TRACE("round " + std::to_string(round));
        const std::uint32_t stale = buf->mr->rkey;
        ASSERT_EQ(v.dev->dereg_mr(buf->mr), 0);
        int err = 0;
        buf->mr = v.dev->reg_mr(
            v.pd, buf->data(), buf->size,
            rc::kAccessLocalWrite | rc::kAccessRemoteWrite | rc::kAccessRemoteRead, &err);
        ASSERT_NE(buf->mr, nullptr) << err;
        ASSERT_EQ(buf->mr->rkey >> 8, stale >> 8) << "the freed slot was not reused";
        ASSERT_NE(buf->mr->rkey, stale);
        EXPECT_EQ(buf->mr->lkey, buf->mr->rkey);

        wire::PacketFields f = write_to(q, *buf, payload.size());
        f.rkey = stale;
        EXPECT_EQ(ack_syndrome(v.exchange(v.frame(f, payload))), nak(NakCode::remote_access_error));
        EXPECT_TRUE(buf->unchanged() && buf->canaries_intact());
        EXPECT_EQ(q->state, QpState::err);
        EXPECT_EQ(v.dev->destroy_qp(q), 0);
        q = v.qp();
    }
    const auto ans = v.exchange(v.frame(write_to(q, *buf, payload.size()), payload));
    EXPECT_EQ(ack_syndrome(ans) >> 5, static_cast<int>(AethKind::ack));
    EXPECT_EQ(std::memcmp(buf->data(), payload.data(), payload.size()), 0);
}

// -------------------------------------------------------------------------- responses never asked

TEST(Hostile, ResponsesForPsnsNeverSent) {
    Victim v;
    auto buf = v.region(4096);
    rc::Qp* q = v.qp(QpState::rts, 0, 0x100);
    std::vector<std::uint8_t> payload(1024, 0xEE);
    std::mt19937 rng(5);
    auto responses = [&](std::uint32_t around) {
        for (int i = 0; i < 200; ++i) {
            const Opcode ops[] = {Opcode::RC_RDMA_READ_RESPONSE_FIRST,
                                  Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
                                  Opcode::RC_RDMA_READ_RESPONSE_LAST,
                                  Opcode::RC_RDMA_READ_RESPONSE_ONLY,
                                  Opcode::RC_ACKNOWLEDGE,
                                  Opcode::RC_ATOMIC_ACKNOWLEDGE};
            const Opcode op = ops[rng() % 6];
            wire::PacketFields f = req(op, q->qpn, (around + (rng() % 64) - 32) & 0xFFFFFF);
            if (i % 7 == 0) f.psn = Psn(static_cast<std::uint32_t>(rng()));
            f.syndrome = static_cast<std::uint8_t>(rng());
            f.msn = static_cast<std::uint32_t>(rng());
            f.orig_rem_data = rng();
            const bool pay = wire::opcode_info(op).is(wire::OpFlags::payload);
            v.inject(v.frame(f, pay ? std::span(payload.data(), 1 + rng() % 1024)
                                    : std::span<const std::uint8_t>()));
        }
        v.run(32);
        v.drain();
    };
    responses(0x100);
    EXPECT_TRUE(buf->canaries_intact() && buf->unchanged());
    // Now with a READ and an atomic outstanding: responses longer than asked, wrong PSNs, stray
    // atomics.
    if (q->state == QpState::rts) {
        rc::SendWqe w;
        w.opcode = WrOpcode::rdma_read;
        w.num_sge = 1;
        w.sg_list[0] = rc::Sge{buf->addr(1000), 100, buf->mr->lkey};
        w.remote_addr = 0x1000;
        w.rkey = 0x1234;
        w.send_flags = rc::kSendSignaled;
        std::uint32_t bad = 0;
        ASSERT_EQ(v.dev->post_send(q, &w, 1, &bad), 0);
        rc::SendWqe a = w;
        a.opcode = WrOpcode::atomic_fetch_and_add;
        a.sg_list[0] = rc::Sge{buf->addr(4088), 8, buf->mr->lkey};
        ASSERT_EQ(v.dev->post_send(q, &a, 1, &bad), 0);
        v.run();
        v.drain();
        buf->snap();
        // A READ RESPONSE ONLY carrying 1024 bytes for a 100-byte READ.
        wire::PacketFields f = req(Opcode::RC_RDMA_READ_RESPONSE_ONLY, q->qpn, 0x100);
        auto ans = v.exchange(v.frame(f, payload));
        EXPECT_TRUE(buf->canaries_intact());
        for (std::size_t i = 0; i < 4096; ++i)
            if (i < 1000 || i >= 1100) {
                ASSERT_EQ(buf->data()[i], buf->snapshot[i]) << i;
            }
        responses(0x101);
    }
    EXPECT_TRUE(buf->canaries_intact());
    EXPECT_GT(v.dev->total_counters()[Counter::rcvd_pkts], 0u);
}

// ------------------------------------------------------------------------------ malformed bytes

/** A few valid frames of different kinds aimed at @p q, to mutate. */
std::vector<std::vector<std::uint8_t>> seeds(Victim& v, rc::Qp* q, Guarded& buf) {
    std::vector<std::vector<std::uint8_t>> out;
    std::vector<std::uint8_t> payload(300, 0xEE);
    for (Opcode op : wire::kAllOpcodes) {
        const auto& info = wire::opcode_info(op);
        wire::PacketFields f = req(op, q->qpn, 0);
        f.va = buf.addr(64);
        f.rkey = buf.mr->rkey;
        f.dma_len = 128;
        f.qkey = 1;
        f.src_qp = 3;
        const bool pay = info.is(wire::OpFlags::payload);
        std::vector<std::uint8_t> out_frame(4608);
        const std::size_t n = wire::build_frame(
            v.path, f, pay ? std::span(payload.data(), 128) : std::span<const std::uint8_t>(),
            out_frame);
        if (n == 0) continue;
        out_frame.resize(n);
        out.push_back(std::move(out_frame));
    }
    return out;
}

TEST(Hostile, EveryOpcodeByteTruncationsAndPadCounts) {
    Victim v;
    auto buf = v.region(4096);
    auto recv = v.region(4096, nullptr, 4);
    rc::Qp* q = v.qp();
    auto base = seeds(v, q, *buf);
    ASSERT_FALSE(base.empty());
    constexpr std::size_t kBthOff = sizeof(wire::EthHdr) + 20 + 8;
    // Every opcode byte on every seed frame, ICRC fixed so the frame reaches the transport.
    for (const auto& s : base) {
        for (unsigned op = 0; op < 256; ++op) {
            auto fr = s;
            fr[kBthOff] = static_cast<std::uint8_t>(op);
            fix_icrc(fr);
            v.inject(fr);
        }
        v.run(16);
        v.drain();
    }
    // Every pad count (BTH byte 1 bits 4..5) on every seed.
    for (const auto& s : base) {
        for (unsigned pad = 0; pad < 4; ++pad) {
            auto fr = s;
            fr[kBthOff + 1] = static_cast<std::uint8_t>((fr[kBthOff + 1] & ~0x30u) | (pad << 4));
            fix_icrc(fr);
            v.inject(fr);
        }
    }
    v.run(16);
    v.drain();
    // Truncated at every length, with and without a re-computed ICRC, and with IP/UDP lengths left
    // claiming the full size.
    for (const auto& s : base) {
        for (std::size_t len = 0; len < s.size(); ++len) {
            std::vector<std::uint8_t> fr(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(len));
            v.inject(fr);
            if (len % 3 == 0) {
                fix_icrc(fr);
                v.inject(fr);
            }
        }
        v.run(16);
        v.drain();
    }
    // Intact frames with a wrong ICRC.
    for (const auto& s : base) {
        auto fr = s;
        fr.back() ^= 0x5a;
        v.inject(fr);
    }
    // Random bytes.
    std::mt19937 rng(1234);
    for (int i = 0; i < 2000; ++i) {
        std::vector<std::uint8_t> fr(rng() % 1600);
        for (auto& b : fr)
            b = static_cast<std::uint8_t>(rng());
        if (i % 2 == 0 && fr.size() >= 14) {
            // A believable Ethernet + IPv4 + UDP 4791 start so the parser goes deeper.
            fr[12] = 0x08;
            fr[13] = 0x00;
            if (fr.size() > 14 + 20 + 8) {
                fr[14] = 0x45;
                fr[14 + 9] = 17;
                fr[14 + 20 + 2] = 0x12;
                fr[14 + 20 + 3] = 0xb7;
            }
        }
        v.inject(fr);
        if (i % 32 == 0) {
            v.run(4);
            v.drain();
        }
    }
    v.run(16);
    v.drain();
    EXPECT_TRUE(buf->canaries_intact());
    EXPECT_TRUE(recv->canaries_intact() && recv->unchanged());
    const auto& pc = v.dev->rx_parse_counters();
    std::uint64_t rejects = 0;
    for (std::size_t r = 1; r < wire::kNumRejectReasons; ++r)
        rejects += pc.snapshot().v[r];
    EXPECT_GT(rejects, 1000u);
    EXPECT_GT(v.dev->counters()[Counter::rx_dropped_malformed], 0u);
    EXPECT_GT(v.dev->counters()[Counter::rx_dropped_bad_icrc], 0u);
}

TEST(Hostile, ThousandsOfOneByteMutations) {
    Victim v;
    auto buf = v.region(4096);
    auto recv = v.region(4096, nullptr, 4);
    auto outside = v.region(4096, v.pd2, 5); // another PD: never writable by this QP
    std::mt19937 rng(4242);
    rc::Qp* q = nullptr;
    std::vector<std::vector<std::uint8_t>> base;
    for (int i = 0; i < 6000; ++i) {
        if (!q || q->state == QpState::err || i % 200 == 0) {
            if (q) (void)v.dev->destroy_qp(q);
            q = v.qp();
            rc::RecvWqe r;
            r.num_sge = 1;
            r.sg_list[0] = rc::Sge{recv->addr(), 4096, recv->mr->lkey};
            std::uint32_t bad = 0;
            for (int k = 0; k < 8; ++k)
                (void)v.dev->post_recv(q, &r, 1, &bad);
            base = seeds(v, q, *buf);
        }
        auto fr = base[rng() % base.size()];
        const std::size_t pos = rng() % fr.size();
        fr[pos] = static_cast<std::uint8_t>(rng());
        if (i % 4 != 0) fix_icrc(fr);
        v.inject(fr);
        if (i % 16 == 0) {
            v.run(4);
            v.drain();
        }
    }
    v.run(32);
    v.drain();
    EXPECT_TRUE(buf->canaries_intact());
    EXPECT_TRUE(recv->canaries_intact());
    EXPECT_TRUE(outside->canaries_intact() && outside->unchanged());
    EXPECT_GT(v.dev->counters()[Counter::rx_dropped_bad_icrc], 0u);
}

TEST(Hostile, CnpFramesAreIgnored) {
    Victim v;
    auto buf = v.region(4096);
    rc::Qp* q = v.qp();
    for (std::uint32_t qpn : {q->qpn, 0u, 0xFFFFFFu}) {
        wire::PacketFields f = req(Opcode::CNP, qpn, 0);
        f.fecn = true;
        f.becn = true;
        auto ans = v.exchange(v.frame(f));
        EXPECT_TRUE(ans.empty());
    }
    EXPECT_EQ(q->state, QpState::rts);
    EXPECT_TRUE(buf->canaries_intact() && buf->unchanged());
}

// -------------------------------------------------------------------------------- bad API calls

TEST(HostileApi, NullAndForeignObjects) {
    Victim v;
    Victim other; // a second device: its objects are foreign to v.dev
    auto buf = v.region(4096);
    auto obuf = other.region(4096);
    rc::Qp* q = v.qp();
    rc::Qp* oq = other.qp();
    int err = 0;

    EXPECT_EQ(v.dev->reg_mr(nullptr, buf->data(), 16, 0, &err), nullptr);
    EXPECT_EQ(err, EINVAL);
    err = 0;
    EXPECT_EQ(v.dev->reg_mr(other.pd, buf->data(), 16, 0, &err), nullptr) << "foreign PD";
    EXPECT_EQ(err, EINVAL);
    EXPECT_EQ(v.dev->reg_mr(v.pd, nullptr, 16, 0, &err), nullptr);
    EXPECT_EQ(v.dev->reg_mr(v.pd, buf->data(), ~0ull, 0, &err), nullptr);
    EXPECT_EQ(v.dev->reg_mr(v.pd, buf->data(), 16, rc::kAccessRemoteWrite, &err), nullptr);
    EXPECT_EQ(v.dev->reg_mr(v.pd, buf->data(), 16, 0xFFFFFFFFu, &err), nullptr)
        << "garbage access flags";

    EXPECT_EQ(v.dev->dealloc_pd(other.pd), EINVAL);
    EXPECT_EQ(v.dev->dereg_mr(obuf->mr), EINVAL);
    EXPECT_EQ(v.dev->destroy_cq(other.cq), EINVAL);
    EXPECT_EQ(v.dev->destroy_qp(oq), EINVAL);
    EXPECT_EQ(v.dev->dealloc_pd(nullptr), 0);
    EXPECT_EQ(v.dev->dereg_mr(nullptr), 0);
    EXPECT_EQ(v.dev->destroy_cq(nullptr), 0);
    EXPECT_EQ(v.dev->destroy_qp(nullptr), 0);

    EXPECT_EQ(v.dev->create_qp(nullptr, v.cq, v.cq, rc::QpCap{}, false, &err), nullptr);
    EXPECT_EQ(err, EINVAL);
    EXPECT_EQ(v.dev->create_qp(v.pd, nullptr, v.cq, rc::QpCap{}, false, &err), nullptr);
    EXPECT_EQ(v.dev->create_qp(v.pd, v.cq, nullptr, rc::QpCap{}, false, &err), nullptr);
    err = 0;
    EXPECT_EQ(v.dev->create_qp(other.pd, v.cq, v.cq, rc::QpCap{}, false, &err), nullptr)
        << "foreign PD";
    EXPECT_EQ(err, EINVAL);
    err = 0;
    EXPECT_EQ(v.dev->create_qp(v.pd, other.cq, v.cq, rc::QpCap{}, false, &err), nullptr)
        << "foreign CQ";
    EXPECT_EQ(err, EINVAL);
    for (rc::QpCap cap : {rc::QpCap{0xFFFFFFFFu, 1, 1, 1, 0}, rc::QpCap{1, 0xFFFFFFFFu, 1, 1, 0},
                          rc::QpCap{1, 1, rc::kMaxSge + 1, 1, 0},
                          rc::QpCap{1, 1, 1, 0xFFFFFFFFu, 0}, rc::QpCap{1, 1, 1, 1, 0xFFFFFFFFu}})
        EXPECT_EQ(v.dev->create_qp(v.pd, v.cq, v.cq, cap, false, &err), nullptr);
    EXPECT_EQ(v.dev->create_cq(0, &err), nullptr);
    EXPECT_EQ(v.dev->create_cq(0xFFFFFFFFu, &err), nullptr);

    rc::QpAttr a;
    a.qp_state = QpState::err;
    EXPECT_EQ(v.dev->modify_qp(nullptr, a, rc::kQpState), EINVAL);
    EXPECT_EQ(v.dev->modify_qp(oq, a, rc::kQpState), EINVAL) << "foreign QP";
    EXPECT_EQ(oq->state, QpState::rts);

    rc::SendWqe w;
    w.opcode = WrOpcode::send;
    w.num_sge = 1;
    w.sg_list[0] = rc::Sge{buf->addr(), 16, buf->mr->lkey};
    std::uint32_t bad = 99;
    EXPECT_EQ(v.dev->post_send(nullptr, &w, 1, &bad), EINVAL);
    EXPECT_EQ(v.dev->post_send(oq, &w, 1, &bad), EINVAL) << "foreign QP";
    EXPECT_EQ(v.dev->post_send(q, nullptr, 1, &bad), EINVAL);
    rc::RecvWqe r;
    r.num_sge = 1;
    r.sg_list[0] = w.sg_list[0];
    EXPECT_EQ(v.dev->post_recv(nullptr, &r, 1, &bad), EINVAL);
    EXPECT_EQ(v.dev->post_recv(oq, &r, 1, &bad), EINVAL) << "foreign QP";
    EXPECT_EQ(v.dev->post_recv(q, nullptr, 1, &bad), EINVAL);
    rc::Cqe c[4];
    EXPECT_EQ(v.dev->poll_cq(nullptr, c, 4), 0u);
    EXPECT_EQ(v.dev->poll_cq(v.cq, nullptr, 4), 0u);

    // In use: EBUSY, and double destroy: EINVAL.
    EXPECT_EQ(v.dev->dealloc_pd(v.pd), EBUSY);
    EXPECT_EQ(v.dev->destroy_cq(v.cq), EBUSY);
    mem::Mr* mr2 = v.dev->reg_mr(v.pd2, buf->data(), 16, 0, &err);
    ASSERT_NE(mr2, nullptr);
    EXPECT_EQ(v.dev->dereg_mr(mr2), 0);
    EXPECT_EQ(v.dev->dereg_mr(mr2), EINVAL) << "double dereg";
    EXPECT_EQ(v.dev->dealloc_pd(v.pd2), 0);
    EXPECT_EQ(v.dev->dealloc_pd(v.pd2), EINVAL) << "double dealloc";
    v.pd2 = nullptr;
    EXPECT_EQ(other.dev->destroy_qp(oq), 0);
    EXPECT_EQ(other.dev->destroy_qp(oq), EINVAL) << "double destroy";
    EXPECT_EQ(other.dev->modify_qp(oq, a, rc::kQpState), EINVAL) << "modify after destroy";
    rc::Cq* cq2 = v.dev->create_cq(16, &err);
    ASSERT_NE(cq2, nullptr);
    EXPECT_EQ(v.dev->destroy_cq(cq2), 0);
    EXPECT_EQ(v.dev->destroy_cq(cq2), EINVAL) << "double destroy";
}

TEST(HostileApi, ModifyQpGarbage) {
    Victim v;
    std::mt19937 rng(77);
    // Every single mask bit, every state value, on a QP in each state.
    for (QpState from : {QpState::reset, QpState::init, QpState::rtr, QpState::rts}) {
        for (unsigned bit = 0; bit < 32; ++bit) {
            for (unsigned st = 0; st < 256; st += 1) {
                rc::Qp* q = v.qp(from);
                rc::QpAttr a;
                a.qp_state = static_cast<QpState>(st);
                a.cur_qp_state = static_cast<QpState>(rng() & 0xFF);
                a.path_mtu = static_cast<rc::Mtu>(rng() & 0xFF);
                a.port_num = static_cast<std::uint8_t>(rng());
                a.ah_attr.port_num = static_cast<std::uint8_t>(rng());
                a.ah_attr.sgid_index = static_cast<std::uint8_t>(rng());
                a.timeout = static_cast<std::uint8_t>(rng());
                a.retry_cnt = static_cast<std::uint8_t>(rng());
                a.rnr_retry = static_cast<std::uint8_t>(rng());
                a.max_rd_atomic = static_cast<std::uint8_t>(rng());
                a.max_dest_rd_atomic = static_cast<std::uint8_t>(rng());
                a.min_rnr_timer = static_cast<std::uint8_t>(rng());
                a.pkey_index = static_cast<std::uint16_t>(rng());
                a.dest_qp_num = static_cast<std::uint32_t>(rng());
                a.rq_psn = static_cast<std::uint32_t>(rng());
                a.sq_psn = static_cast<std::uint32_t>(rng());
                a.qp_access_flags = static_cast<std::uint32_t>(rng());
                a.ah_attr.flow_label = static_cast<std::uint32_t>(rng());
                const std::uint32_t mask =
                    (st % 3 == 0) ? static_cast<std::uint32_t>(rng()) : (1u << bit) | rc::kQpState;
                const int rc_ = v.dev->modify_qp(q, a, mask);
                EXPECT_TRUE(rc_ == 0 || rc_ == EINVAL) << rc_;
                if (rc_ == 0) {
                    EXPECT_LE(static_cast<unsigned>(q->state), 6u);
                    // Whatever was accepted, the engine keeps running with it.
                    wire::PacketFields f = req(Opcode::RC_SEND_ONLY, q->qpn, 0);
                    v.inject(v.frame(f));
                    v.run(2);
                    (void)v.drain();
                }
                ASSERT_EQ(v.dev->destroy_qp(q), 0);
                if (st > 8) st += 37; // a sample of the values past the enum
            }
        }
    }
}

TEST(HostileApi, BadPosts) {
    Victim v;
    auto buf = v.region(4096);
    rc::Qp* q = v.qp();
    std::uint32_t bad = 0;
    auto wqe = [&](WrOpcode op) {
        rc::SendWqe w;
        w.opcode = op;
        w.num_sge = 1;
        w.sg_list[0] = rc::Sge{buf->addr(), 16, buf->mr->lkey};
        w.remote_addr = 0x1000;
        w.rkey = 1;
        return w;
    };
    // num_sge above the cap.
    for (std::uint32_t n : {rc::kMaxSge + 1, 0xFFFFFFFFu, 0x80000000u}) {
        rc::SendWqe w = wqe(WrOpcode::send);
        w.num_sge = n;
        EXPECT_EQ(v.dev->post_send(q, &w, 1, &bad), EINVAL) << n;
        EXPECT_EQ(bad, 0u);
        rc::RecvWqe r;
        r.num_sge = n;
        EXPECT_EQ(v.dev->post_recv(q, &r, 1, &bad), EINVAL) << n;
    }
    // Lengths summing over 2^31 (and wrapping 2^32).
    {
        rc::SendWqe w = wqe(WrOpcode::rdma_write);
        w.num_sge = 3;
        for (int i = 0; i < 3; ++i)
            w.sg_list[i] = rc::Sge{buf->addr(), 0x60000000u, buf->mr->lkey};
        EXPECT_NE(v.dev->post_send(q, &w, 1, &bad), 0);
        w.num_sge = 2;
        w.sg_list[0].length = 0xFFFFFFFFu;
        w.sg_list[1].length = 2;
        EXPECT_NE(v.dev->post_send(q, &w, 1, &bad), 0);
        rc::RecvWqe r;
        r.num_sge = 3;
        for (int i = 0; i < 3; ++i)
            r.sg_list[i] = rc::Sge{buf->addr(), 0x60000000u, buf->mr->lkey};
        const int rr = v.dev->post_recv(q, &r, 1, &bad);
        EXPECT_TRUE(rr == 0 || rr == EINVAL);
    }
    // Unsupported opcodes and raw values past the enum.
    for (unsigned op : {7u, 8u, 10u, 11u, 12u, 100u, 200u, 255u}) {
        rc::SendWqe w = wqe(static_cast<WrOpcode>(op));
        EXPECT_EQ(v.dev->post_send(q, &w, 1, &bad), EINVAL) << op;
    }
    // Inline too long, inline on READ, misaligned atomic length.
    {
        rc::SendWqe w = wqe(WrOpcode::send);
        w.send_flags = rc::kSendInline;
        w.length = 100000; // native API: inline bytes are inline_data[0..length)
        EXPECT_EQ(v.dev->post_send(q, &w, 1, &bad), EINVAL);
        w.length = 65; // above this QP's max_inline_data (64)
        EXPECT_EQ(v.dev->post_send(q, &w, 1, &bad), EINVAL);
        w = wqe(WrOpcode::rdma_read);
        w.send_flags = rc::kSendInline;
        EXPECT_EQ(v.dev->post_send(q, &w, 1, &bad), EINVAL);
        w = wqe(WrOpcode::atomic_fetch_and_add);
        w.sg_list[0].length = 4;
        EXPECT_EQ(v.dev->post_send(q, &w, 1, &bad), EINVAL);
        w.sg_list[0].length = 8;
        w.remote_addr = 0x1003;
        const int ra = v.dev->post_send(q, &w, 1, &bad);
        EXPECT_TRUE(ra == 0 || ra == EINVAL);
    }
    // Posting on a QP in RESET / INIT (send) and RESET (recv).
    rc::Qp* reset = v.qp(QpState::reset);
    rc::SendWqe w = wqe(WrOpcode::send);
    EXPECT_EQ(v.dev->post_send(reset, &w, 1, &bad), EINVAL);
    rc::RecvWqe r;
    r.num_sge = 1;
    r.sg_list[0] = w.sg_list[0];
    EXPECT_EQ(v.dev->post_recv(reset, &r, 1, &bad), EINVAL);
    // Post on a destroyed QP: its number is gone; a QP handle of another device stands in for the
    // dangling pointer (dereferencing a freed object is UB and not testable here).
    const std::uint32_t qpn = q->qpn;
    ASSERT_EQ(v.dev->destroy_qp(q), 0);
    EXPECT_EQ(v.dev->qp_by_num(qpn), nullptr);
    // n = 0 and huge n with a short array must not read past what is posted once one fails.
    rc::Qp* q2 = v.qp();
    rc::SendWqe ws[2] = {wqe(WrOpcode::send), wqe(static_cast<WrOpcode>(200))};
    EXPECT_EQ(v.dev->post_send(q2, ws, 0, &bad), 0);
    EXPECT_EQ(v.dev->post_send(q2, ws, 2, &bad), EINVAL);
    EXPECT_EQ(bad, 1u);
    v.run();
    EXPECT_TRUE(buf->canaries_intact());
}

} // namespace
} // namespace droce::test
