/* SPDX-License-Identifier: BSD-3-Clause */
// libFuzzer target: the responder and the completer of a live connected QP pair (RC, or MRC when
// built with FUZZ_MRC=1). Two Devices on the sim fabric (virtual clock) hold one connected QP each
// and registered MRs between guard regions; the fuzz input is a script of records, run in order:
//
//   kind (1 byte)   bits 0..1: record type; bit 2: the side it acts on (0 or 1); bit 3: fix-up
//   type 0 frame    len (2 bytes LE), then len bytes: one frame, received by that side's port
//                   (injected ahead of the fabric). With fix-up, its addresses, UDP port, BTH dest
//                   QPN, RETH/AtomicETH rkey (and VA into or just past the MR) are made those of
//                   the live pair and the ICRC recomputed, so it reaches the transport instead of
//                   being dropped by the receive filter or the ICRC check.
//   type 1 post     op, len (2 bytes LE), off (2 bytes LE): the side posts a WQE (WRITE, READ,
//                   SEND, atomics; MRC: WRITE and WRITE with immediate) and a receive, so that the
//                   completer has work that forged ACKs, NAKs and READ responses can act on.
//   type 2 run      n (1 byte): n engine passes on both sides, virtual time moving 1 us each.
//   type 3 time     n (1 byte): virtual time jumps n ms (retransmit, RNR and ACK timers fire).
//
// After each record, and at the end once both engines have run until idle (bounded), the harness
// asserts: every guard byte around every MR and local buffer is intact (nothing outside a
// registered region changed), every completion names a posted wr_id and arrives once, no QP
// completes more WQEs than were posted on it. A violation aborts.
//
// The devices live for the whole process, and so does an MRC QP pair while both its QPs stay in
// RTS; an RC pair, and an MRC pair an input left in another state, is made anew for the next
// input (Pair::reset). Building two Devices per input cost most of the time (their tables' page
// faults; about 100 inputs a second), and a new MRC QP clears its trackers. So an input may run on
// devices and QPs that earlier inputs used (counters, clock, PSNs, receive WQEs); a crash input
// replays alone in a fresh process (fuzz/run, regressions) and reproduces when the input alone
// causes it.
#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "engine/connect.h"
#include "engine/device.h"
#include "fix_icrc.h"
#include "sim/fabric.h"
#include "wire/packet.h"
#if FUZZ_MRC
#include "mrc/mrc.h"
#endif

namespace {

using namespace droce;

constexpr std::size_t kGuard = 256;
constexpr std::uint8_t kCanary = 0xA5;
constexpr std::size_t kMrSize = 8192;
constexpr std::uint32_t kPlanes = FUZZ_MRC ? 2 : 1;
/**
 * Pair::reset keeps a QP pair in RTS: for MRC (a new MRC QP clears its trackers, most of an
 * input's time); an RC pair is cheap to make and a fresh one per input runs faster.
 * DROCE_FUZZ_FRESH_QPS=1 gives every input a new pair (to triage or minimise a finding that
 * depends on what earlier inputs left in the pair).
 */
bool keep_qps() {
    static const bool keep = FUZZ_MRC != 0 && std::getenv("DROCE_FUZZ_FRESH_QPS") == nullptr;
    return keep;
}
/** Fabric buffers a drained pair may hold beyond the first drain's (engine caches): more is a
 *  leak, which would empty the pool and quietly stop the fuzzing from reaching anything. */
constexpr std::uint32_t kPoolSlack = 64;

/** Aborts with a message: a fuzz finding. */
[[noreturn]] void fail(const char* what) {
    __builtin_printf("fuzz_qp invariant broken: %s\n", what);
    std::abort();
}

/** A PortDriver around a fabric port whose rx_burst first returns frames the harness queued. */
class InjectPort final : public PortDriver {
  public:
    explicit InjectPort(PortDriver& inner) : inner_(inner) {}
    ~InjectPort() override {
        for (; head_ != tail_; ++head_)
            inner_.free_bulk(&queued_[head_ % queued_.size()], 1);
    }
    void inject(std::span<const std::uint8_t> bytes) {
        PktBuf* b = nullptr;
        // Pool empty or the queue full: the frame is lost, as on a wire.
        if (tail_ - head_ == queued_.size() || inner_.alloc_bulk(&b, 1) != 1) return;
        const std::size_t n = bytes.size() < b->capacity ? bytes.size() : b->capacity;
        if (n) std::memcpy(b->data, bytes.data(), n);
        b->len = static_cast<std::uint32_t>(n);
        b->port = 0;
        b->ecn_ce = false;
        queued_[tail_++ % queued_.size()] = b;
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
        while (k < n && head_ != tail_)
            bufs[k++] = queued_[head_++ % queued_.size()];
        return static_cast<std::uint16_t>(
            k + inner_.rx_burst(bufs + k, static_cast<std::uint16_t>(n - k)));
    }
    std::uint32_t max_frame() const noexcept override { return inner_.max_frame(); }
    bool link_up() const noexcept override { return inner_.link_up(); }

  private:
    PortDriver& inner_;
    /** Injected frames not yet received, [head_, tail_): a fixed ring, so that an input's
     *  mallocs and frees balance (a deque's blocks outlived the input: see Pair::WrIds). */
    std::array<PktBuf*, 64> queued_{};
    std::size_t head_ = 0, tail_ = 0;
};

/** kMrSize registered bytes between two kGuard canary regions. */
struct Guarded {
    std::vector<std::uint8_t> all = std::vector<std::uint8_t>(kMrSize + 2 * kGuard, kCanary);
    mem::Mr* mr = nullptr;
    std::uint8_t* data() { return all.data() + kGuard; }
    std::uint64_t addr(std::size_t off = 0) {
        return reinterpret_cast<std::uintptr_t>(data()) + off;
    }
    [[nodiscard]] bool intact() const {
        for (std::size_t i = 0; i < kGuard; ++i)
            if (all[i] != kCanary || all[kGuard + kMrSize + i] != kCanary) return false;
        return true;
    }
};

wire::Ipv6Addr gid(std::uint32_t e, std::uint32_t p) {
    return gid_from_ipv4(10, static_cast<std::uint8_t>(p), 0, static_cast<std::uint8_t>(e + 1));
}

sim::FabricConfig fabric_config() {
    sim::FabricConfig c;
    c.seed = 1;
    c.endpoints = 2;
    c.planes = kPlanes;
    c.pool_buffers = 512;
    c.buffer_capacity = 4608;
    c.link_slots = 256;
    return c;
}

struct Pair {
    Clock clock = Clock::virtual_clock();
    sim::Fabric fabric{&clock, fabric_config()};
    std::vector<std::unique_ptr<InjectPort>> ports[2];
    std::unique_ptr<Device> dev[2];
    mem::Pd* pd[2] = {};
    rc::Cq* cq[2] = {};
    rc::Qp* qp[2] = {};
    Guarded mr[2];  ///< the target of remote operations
    Guarded buf[2]; ///< local buffers: WQE sources, READ and receive destinations
    std::uint64_t next_wr_id = 1;
    std::uint64_t posted_send[2] = {}, posted_recv[2] = {};
    std::uint64_t done_send[2] = {}, done_recv[2] = {};
    std::uint32_t pool_baseline = 0; ///< fabric.pool_free() after the first drain
    /**
     * Posted WQEs (by wr_id) of the live QP pair whose CQE has not been seen. A fixed array, not a
     * node container: what an input leaves outstanding is freed in the next input's reset(), and
     * libFuzzer re-runs every input whose mallocs and frees differ under a full leak scan
     * (TryDetectingAMemoryLeak: 30 % of fuzz_mrc's time with an unordered_set here).
     */
    struct WrIds {
        /** Both QPs' send and receive queues (64 each) with room to spare. */
        std::array<std::uint64_t, 512> ids{};
        std::size_t n = 0;
        void insert(std::uint64_t id) {
            if (n == ids.size()) fail("more outstanding WQEs than the QPs' queues hold");
            ids[n++] = id;
        }
        /** Removes @p id; false when it was not there. */
        bool erase(std::uint64_t id) {
            for (std::size_t i = 0; i < n; ++i)
                if (ids[i] == id) {
                    ids[i] = ids[--n];
                    return true;
                }
            return false;
        }
        void clear() { n = 0; }
    } outstanding;

    /** Devices, PDs, CQs and MRs: made once per process (a Device's tables cost most of an
     *  input's time when built per input); the QPs are made anew for every input (reset()). */
    Pair() {
        for (std::uint32_t e = 0; e < 2; ++e) {
            std::vector<PortSpec> specs;
            for (std::uint32_t p = 0; p < kPlanes; ++p) {
                ports[e].push_back(std::make_unique<InjectPort>(fabric.port(e, p)));
                specs.push_back(
                    PortSpec{ports[e][p].get(), sim::Fabric::mac(e, p), gid(e, p), 4096});
            }
            dev[e] = std::make_unique<Device>(e ? "fuzz1" : "fuzz0", clock, specs);
            int err = 0;
            pd[e] = dev[e]->alloc_pd(&err);
            cq[e] = dev[e]->create_cq(1024, &err);
            const std::uint32_t all = rc::kAccessLocalWrite | rc::kAccessRemoteWrite |
                                      rc::kAccessRemoteRead | rc::kAccessRemoteAtomic;
            mr[e].mr = dev[e]->reg_mr(pd[e], mr[e].data(), kMrSize, all, &err);
            buf[e].mr = dev[e]->reg_mr(pd[e], buf[e].data(), kMrSize, rc::kAccessLocalWrite, &err);
            if (!pd[e] || !cq[e] || !mr[e].mr || !buf[e].mr) fail("set-up");
        }
    }

    /**
     * The pair for the next input. An MRC QP pair that is still RTS on both sides is kept
     * (keep_qps()), with what it still holds: receive
     * WQEs, their wr_ids outstanding, its PSNs. Otherwise its QPs are destroyed, every frame still
     * on the fabric is delivered (to no QP), every CQE taken, and a new pair is connected. Either
     * way the buffers go back to canaries. What always stays: the devices' tables, counters and
     * clock (virtual time only moves forward).
     */
    void reset() {
        for (int e = 0; e < 2; ++e) {
            std::fill(mr[e].all.begin(), mr[e].all.end(), kCanary);
            std::fill(buf[e].all.begin(), buf[e].all.end(), kCanary);
        }
        if (keep_qps() && qp[0] && qp[1] && qp[0]->state == rc::QpState::rts &&
            qp[1]->state == rc::QpState::rts)
            return;
        for (int e = 0; e < 2; ++e)
            if (qp[e] && dev[e]->destroy_qp(qp[e]) != 0) fail("destroy_qp");
        qp[0] = qp[1] = nullptr;
        rc::Cqe cqes[64];
        for (unsigned i = 0; i < 10'000; ++i) {
            const std::uint32_t work = dev[0]->poll() + dev[1]->poll();
            for (int e = 0; e < 2; ++e)
                while (dev[e]->poll_cq(cq[e], cqes, 64) > 0) {
                }
            const std::uint64_t next = fabric.next_event_ns();
            if (!work && next == 0) break;
            if (next > clock.now_ns())
                clock.set(next);
            else
                clock.advance(1000);
        }
        if (fabric.in_flight() != 0) fail("frames still in flight after the drain");
        if (pool_baseline == 0) pool_baseline = fabric.pool_free();
        if (fabric.pool_free() + kPoolSlack < pool_baseline) fail("fabric buffers leaked");
        for (int e = 0; e < 2; ++e)
            posted_send[e] = posted_recv[e] = done_send[e] = done_recv[e] = 0;
        outstanding.clear();
        for (std::uint32_t e = 0; e < 2; ++e) {
            int err = 0;
            qp[e] = dev[e]->create_qp(pd[e], cq[e], cq[e], rc::QpCap{64, 64, 1, 1, 64}, false, &err
#if FUZZ_MRC
                                      ,
                                      mrc::kMrcTransport
#endif
            );
            if (!qp[e]) fail("create_qp");
#if FUZZ_MRC
            Device::ControlSection cs(*dev[e]);
            mrc::MrcAttr a;
            a.max_inflight = 64;
            a.timeout = 10;
            // A short retry budget (2 at the base timeout, 2 doubling; the RC pair has retry_cnt
            // 2) and sparse probes: an input that
            // leaves a WQE stuck ends in a few dozen settle steps. With the defaults (7 linear +
            // 7 doubling timeouts, probes every 250 us) settle stepped through ~250 ms of probes,
            // thousands of passes per input: 124 inputs/s.
            a.linear_cnt = 2;
            a.exp_cnt = 2;
            a.probe_interval_ns = 1'000'000;
            if (mrc::set_attr(*qp[e], a) != 0) fail("mrc::set_attr");
#endif
        }
        for (std::uint32_t e = 0; e < 2; ++e) {
            const std::uint32_t peer = 1 - e;
#if FUZZ_MRC
            std::vector<rc::RemotePlane> planes;
            for (std::uint32_t p = 0; p < kPlanes; ++p)
                planes.push_back(rc::RemotePlane{gid(peer, p), sim::Fabric::mac(peer, p)});
            if (dev[e]->set_remote_planes(qp[e], planes) != 0) fail("set_remote_planes");
#endif
            RcConnectParams c;
            c.qp_access_flags =
                rc::kAccessRemoteWrite | rc::kAccessRemoteRead | rc::kAccessRemoteAtomic;
            c.path_mtu = rc::Mtu::mtu1024;
            c.dest_qp_num = qp[peer]->qpn;
            c.ah_attr.dgid = gid(peer, 0);
            c.ah_attr.dmac = sim::Fabric::mac(peer, 0);
            c.timeout = 8;
            c.retry_cnt = 2;
            c.rnr_retry = 2;
            c.min_rnr_timer = 1;
            c.max_rd_atomic = 4;
            c.max_dest_rd_atomic = 4;
            if (connect_rc(*dev[e], qp[e], c) != 0) fail("connect_rc");
        }
    }

    void collect() {
        rc::Cqe c[64];
        for (int e = 0; e < 2; ++e) {
            std::uint32_t n;
            while ((n = dev[e]->poll_cq(cq[e], c, 64)) > 0)
                for (std::uint32_t i = 0; i < n; ++i) {
                    // wr_ids are 2k+1 for sends, 2k+2 for receives.
                    if (!outstanding.erase(c[i].wr_id))
                        fail("CQE for no outstanding WQE (none posted, or completed twice)");
                    // By the wr_id, not the opcode: a flushed WQE's opcode is not defined.
                    if ((c[i].wr_id & 1) == 0)
                        ++done_recv[e];
                    else
                        ++done_send[e];
                }
            if (done_send[e] > posted_send[e]) fail("more send completions than WQEs");
            if (done_recv[e] > posted_recv[e]) fail("more receive completions than WQEs");
        }
    }

    void run(unsigned passes) {
        for (unsigned i = 0; i < passes; ++i) {
            dev[0]->poll();
            dev[1]->poll();
            clock.advance(1000);
        }
        collect();
    }

    /** Runs until every send WQE completed and no frame is in flight, or both engines have no
     *  deadline left, jumping virtual time to the next event, for at most @p max_steps steps (a
     *  QP retrying forever is not a finding). */
    void settle(unsigned max_steps) {
        for (unsigned i = 0; i < max_steps; ++i) {
            const std::uint32_t work = dev[0]->poll() + dev[1]->poll();
            collect();
            if (work) continue;
            // Every send WQE completed and nothing on the wire: nothing left to check. (An MRC QP
            // probes its paths for ever: waiting for no deadline at all ran every input to
            // max_steps.)
            if (posted_send[0] == done_send[0] && posted_send[1] == done_send[1] &&
                fabric.in_flight() == 0)
                return;
            std::uint64_t next = 0;
            for (std::uint64_t d :
                 {dev[0]->next_deadline_ns(), dev[1]->next_deadline_ns(), fabric.next_event_ns()})
                if (d && (next == 0 || d < next)) next = d;
            if (next == 0) return;
            if (next > clock.now_ns())
                clock.set(next);
            else
                clock.advance(1000);
        }
    }

    /** Makes frame @p f (a copy) look like it came from side 1-@p e's QP to side @p e's QP. */
    void fix_up(int e, std::vector<std::uint8_t>& f) {
        wire::ParsedFrame pf;
        if (wire::parse_frame(f, pf, {.verify_icrc = false}) != wire::RejectReason::ok) return;
        const int peer = 1 - e;
        auto* w = f.data();
        auto mut = [w, &f](const void* p) {
            return w + (static_cast<const std::uint8_t*>(p) - f.data());
        };
        auto* eth = reinterpret_cast<wire::EthHdr*>(mut(pf.eth));
        eth->dst = sim::Fabric::mac(static_cast<std::uint32_t>(e), 0);
        eth->src = sim::Fabric::mac(static_cast<std::uint32_t>(peer), 0);
        const auto sip = gid(static_cast<std::uint32_t>(peer), 0);
        const auto dip = gid(static_cast<std::uint32_t>(e), 0);
        if (pf.ipv4) {
            auto* ip = reinterpret_cast<wire::Ipv4Hdr*>(mut(pf.ipv4));
            std::memcpy(&ip->src, sip.data() + 12, 4);
            std::memcpy(&ip->dst, dip.data() + 12, 4);
        } else if (pf.ipv6) {
            auto* ip = reinterpret_cast<wire::Ipv6Hdr*>(mut(pf.ipv6));
            std::memcpy(&ip->src, sip.data(), 16);
            std::memcpy(&ip->dst, dip.data(), 16);
        }
        auto* bth = reinterpret_cast<wire::Bth*>(mut(pf.bth));
        bth->set_dest_qp(qp[e]->qpn);
        Guarded& target = mr[e];
        auto place = [&target](std::uint64_t va) {
            // Into the MR, or up to 64 bytes either side of it (bounds checks must hold).
            const std::uint64_t span = kMrSize + 128;
            return target.addr() - 64 + va % span;
        };
        if (pf.reth) {
            auto* r = reinterpret_cast<wire::Reth*>(mut(pf.reth));
            r->rkey.set(target.mr->rkey);
            r->va.set(place(r->va.get()));
        }
        if (pf.atomic_eth) {
            auto* a = reinterpret_cast<wire::AtomicEth*>(mut(pf.atomic_eth));
            a->rkey.set(target.mr->rkey);
            a->va.set(place(a->va.get()) & ~std::uint64_t{7});
        }
        (void)fuzz::fix_icrc(std::span(f), pf);
    }

    void post(int e, std::uint8_t op, std::uint16_t len, std::uint16_t off) {
        const std::uint32_t length = len % (kMrSize / 2);
        const std::uint32_t o = off % (kMrSize - length + 1);
        rc::SendWqe w;
        w.send_flags = rc::kSendSignaled;
        w.num_sge = 1;
        w.sg_list[0] = rc::Sge{buf[e].addr(o), length, buf[e].mr->lkey};
        w.remote_addr = mr[1 - e].addr(o);
        w.rkey = mr[1 - e].mr->rkey;
#if FUZZ_MRC
        static constexpr rc::WrOpcode kOps[] = {rc::WrOpcode::rdma_write,
                                                rc::WrOpcode::rdma_write_with_imm};
#else
        static constexpr rc::WrOpcode kOps[] = {rc::WrOpcode::rdma_write,
                                                rc::WrOpcode::rdma_write_with_imm,
                                                rc::WrOpcode::send,
                                                rc::WrOpcode::send_with_imm,
                                                rc::WrOpcode::rdma_read,
                                                rc::WrOpcode::atomic_cmp_and_swp,
                                                rc::WrOpcode::atomic_fetch_and_add};
#endif
        w.opcode = kOps[op % std::size(kOps)];
        if (w.opcode == rc::WrOpcode::atomic_cmp_and_swp ||
            w.opcode == rc::WrOpcode::atomic_fetch_and_add) {
            w.sg_list[0].length = 8;
            w.sg_list[0].addr = buf[e].addr(o & ~7u);
            w.remote_addr = mr[1 - e].addr(o & ~7u);
            if ((o & ~7u) + 8 > kMrSize) return;
        }
        // A receive on the peer for SENDs and immediates, on a buffer part of its own.
        rc::RecvWqe r;
        r.wr_id = next_wr_id + 1;
        r.num_sge = 1;
        r.sg_list[0] = rc::Sge{buf[1 - e].addr(kMrSize / 2), kMrSize / 2, buf[1 - e].mr->lkey};
        std::uint32_t bad = 0;
        if (dev[1 - e]->post_recv(qp[1 - e], &r, 1, &bad) == 0) {
            ++posted_recv[1 - e];
            outstanding.insert(r.wr_id);
        }
        w.wr_id = next_wr_id;
        if (dev[e]->post_send(qp[e], &w, 1, &bad) == 0) {
            ++posted_send[e];
            outstanding.insert(w.wr_id);
        }
        next_wr_id += 2;
    }

    void check() {
        for (int e = 0; e < 2; ++e)
            if (!mr[e].intact() || !buf[e].intact())
                fail("a byte outside a registered region changed");
    }
};

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    // One pair for the process (reachable from this static: not a leak), reset for every input.
    static Pair* const pair = new Pair();
    pair->reset();
    std::size_t i = 0;
    auto u16 = [&](std::size_t at) {
        return static_cast<std::uint16_t>(data[at] | data[at + 1] << 8);
    };
    unsigned records = 0;
    while (i < size && records++ < 64) {
        const std::uint8_t kind = data[i++];
        const int side = (kind >> 2) & 1;
        switch (kind & 3) {
        case 0: {
            if (i + 2 > size) break;
            std::size_t len = u16(i);
            i += 2;
            if (len > size - i) len = size - i;
            std::vector<std::uint8_t> f(data + i, data + i + len);
            i += len;
            if (kind & 8) pair->fix_up(side, f);
            pair->ports[side][0]->inject(f);
            pair->run(2);
            break;
        }
        case 1:
            if (i + 5 > size) {
                i = size;
                break;
            }
            pair->post(side, data[i], u16(i + 1), u16(i + 3));
            i += 5;
            pair->run(1);
            break;
        case 2:
            if (i < size) pair->run(1 + data[i++] % 32u);
            break;
        case 3:
            if (i < size) pair->clock.advance(std::uint64_t{data[i++]} * 1'000'000);
            pair->run(1);
            break;
        }
        pair->check();
    }
    pair->settle(4000);
    pair->check();
    return 0;
}
