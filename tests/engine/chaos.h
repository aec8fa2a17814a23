/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * The chaos soak, in one process: two droce devices with four ports each on the sim fabric's four
 * planes (virtual clock), many RC and MRC QP pairs in both directions, every link lossy,
 * reordering, duplicating and corrupting, a random plane pulled and put back every few
 * milliseconds, and QP pairs torn down and created anew while the others run. Each flow keeps a
 * window of operations in flight (RC: SEND, WRITE, WRITE with immediate, READ, FETCH_ADD, CMP_SWAP;
 * MRC: WRITE and WRITE with immediate), each on a slot of its own, and checks every completion as
 * it comes: the WQE it names is the next one of its QP (nothing lost, duplicated or reordered), its
 * status is success, every byte moved is the source's, every atomic returns what a sequential model
 * of the target says, every receive completion (SEND, immediate) arrives once, in order, with its
 * length or immediate. At the end the devices settle and nothing more may complete.
 *
 * Used by tests/engine/chaos_test.cc (bounded) and bench/engine/chaos (10^6 operations). Not a
 * gtest header: a problem is reported in ChaosResult::problems, first ones first.
 */
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/connect.h"
#include "engine/device.h"
#include "mrc/mrc.h"
#include "sim/fabric.h"

namespace droce::test {

struct ChaosOptions {
    std::uint64_t seed = 1;
    std::uint64_t ops = 20'000; ///< operations to complete (all flows together)
    unsigned rc_flows = 24;     ///< RC QP pairs (requester alternating between the two sides)
    unsigned mrc_flows = 8;     ///< MRC QP pairs
    unsigned window = 8;        ///< operations in flight per flow
    std::uint32_t max_len = 16384;
    double loss = 0.01, reorder = 0.01, duplicate = 0.005, corrupt = 0.001;
    double gbps = 25; ///< per link
    /** A plane of one endpoint is pulled every flap_every_ns for 100 us .. flap_max_ns (RC's
     *  ACK timeout is 1 ms, 8 tries: a flap costs an RC QP on that plane one retry). */
    std::uint64_t flap_every_ns = 1'000'000;
    std::uint64_t flap_max_ns = 400'000;
    /** After each of its operations a flow is torn down and replaced with this probability. */
    double churn = 0.002;
    /** Virtual time allowed for the whole run. */
    std::uint64_t max_virtual_ns = 600'000'000'000ull;
};

struct ChaosResult {
    std::uint64_t ops_completed = 0;
    std::uint64_t bytes_verified = 0;
    std::uint64_t recv_completions = 0;
    std::uint64_t atomics = 0;
    std::uint64_t qp_pairs_created = 0;
    std::uint64_t plane_flaps = 0;
    /** RC retransmitted_pkts plus MRC retransmits, both sides, of the QPs alive at the end (a
     *  destroyed QP takes its counters with it). */
    std::uint64_t retransmitted = 0;
    std::uint64_t dropped_loss = 0, reordered = 0, duplicated = 0, corrupted = 0, dropped_down = 0;
    std::uint64_t virtual_ns = 0;
    std::vector<std::string> problems; ///< empty: every check held
};

class Chaos {
  public:
    explicit Chaos(const ChaosOptions& o)
        : o_(o), rng_(o.seed), clock_(Clock::virtual_clock()), fabric_(&clock_, fabric_config(o)) {
        sim::LinkConfig link;
        link.loss = o.loss;
        link.reorder = o.reorder;
        link.reorder_max_frames = 4;
        link.duplicate = o.duplicate;
        link.corrupt = o.corrupt;
        link.bandwidth_gbps = o.gbps;
        link.delay_ns = 2'000;
        fabric_.set_all_links(link);
        for (std::uint32_t e = 0; e < 2; ++e) {
            std::vector<PortSpec> ports;
            for (std::uint32_t p = 0; p < kPlanes; ++p)
                ports.push_back(
                    PortSpec{&fabric_.port(e, p), sim::Fabric::mac(e, p), gid(e, p), 4096});
            dev_[e] = std::make_unique<Device>("chaos" + std::to_string(e), clock_, ports);
            int err = 0;
            pd_[e] = dev_[e]->alloc_pd(&err);
            cq_[e] = dev_[e]->create_cq(65536, &err);
            if (!pd_[e] || !cq_[e]) problem("set-up: pd/cq");
        }
    }

    ChaosResult run() {
        for (unsigned i = 0; i < o_.rc_flows + o_.mrc_flows && r_.problems.empty(); ++i)
            add_flow(i >= o_.rc_flows, static_cast<int>(i % 2));
        next_flap_ = clock_.now_ns() + o_.flap_every_ns;
        const std::uint64_t limit = clock_.now_ns() + o_.max_virtual_ns;
        while (r_.ops_completed < o_.ops && r_.problems.size() < 10 && clock_.now_ns() < limit) {
            for (auto& f : flows_)
                post(*f);
            step();
            flap();
        }
        if (r_.ops_completed < o_.ops && r_.problems.empty())
            problem("only " + std::to_string(r_.ops_completed) + " operations completed in " +
                    std::to_string(o_.max_virtual_ns / 1'000'000) + " ms of virtual time");
        // No more posts: what is in flight completes, then nothing more may.
        stop_posting_ = true;
        for (auto& p : pulled_)
            fabric_.set_port_up(p.endpoint, p.plane, true);
        pulled_.clear();
        const std::uint64_t settle_until = clock_.now_ns() + 2'000'000'000ull;
        while (clock_.now_ns() < settle_until && in_flight() > 0 && r_.problems.size() < 10)
            step();
        if (in_flight() > 0) problem(std::to_string(in_flight()) + " operations never completed");
        const std::uint64_t quiet_until = clock_.now_ns() + 50'000'000;
        const std::uint64_t before = r_.ops_completed + r_.recv_completions;
        while (clock_.now_ns() < quiet_until)
            step();
        if (r_.ops_completed + r_.recv_completions != before)
            problem("completions after every operation had completed");
        for (auto& f : flows_) {
            check_atomic_target(*f);
            for (std::size_t si = 0; si < o_.window; ++si)
                recheck(*f, si);
        }
        finish();
        return r_;
    }

  private:
    static constexpr std::uint32_t kPlanes = 4;

    enum class Kind : std::uint8_t { rc, mrc };
    struct Op {
        std::uint64_t seq = 0;
        rc::WrOpcode op = rc::WrOpcode::rdma_write;
        std::uint32_t len = 0;
        bool recv = false; ///< the peer owes a receive completion
        std::uint64_t atomic_expected = 0;
    };
    struct Flow {
        Kind kind = Kind::rc;
        int req = 0;           ///< the requester's side
        std::uint32_t uid = 0; ///< names the QP pair in wr_ids; new after churn
        rc::Qp* qp[2] = {};
        std::vector<std::uint8_t> local, remote; ///< window slots of max_len bytes
        std::vector<std::uint8_t> counter = std::vector<std::uint8_t>(8, 0);
        mem::Mr* local_mr = nullptr;
        mem::Mr* remote_mr = nullptr;
        mem::Mr* counter_mr = nullptr;
        std::vector<Op> last; ///< per slot: its last completed operation (valid: last_ok)
        std::vector<bool> last_ok;
        std::deque<Op> in_flight; ///< posted, completion not seen, in posting order
        std::deque<Op> recv_due;  ///< receive completions owed at the peer, in order
        std::uint64_t next_seq = 0;
        std::uint64_t counter_value = 0; ///< the atomic target's value by the model
        bool draining = false;           ///< churn: no new posts until empty, then replaced
    };
    struct Pulled {
        std::uint32_t endpoint, plane;
        std::uint64_t until;
    };

    static sim::FabricConfig fabric_config(const ChaosOptions& o) {
        sim::FabricConfig c;
        c.seed = o.seed;
        c.endpoints = 2;
        c.planes = kPlanes;
        c.pool_buffers = 32768;
        c.buffer_capacity = 4608;
        c.link_slots = 8192;
        return c;
    }
    static wire::Ipv6Addr gid(std::uint32_t e, std::uint32_t p) {
        return gid_from_ipv4(10, static_cast<std::uint8_t>(p), 0, static_cast<std::uint8_t>(e + 1));
    }

    void problem(std::string s) {
        if (r_.problems.size() < 10)
            r_.problems.push_back("[" + std::to_string(clock_.now_ns() / 1000) + " us] " + s);
    }

    std::uint64_t in_flight() const {
        std::uint64_t n = 0;
        for (const auto& f : flows_)
            n += f->in_flight.size() + f->recv_due.size();
        return n;
    }

    void add_flow(bool mrc, int req) {
        auto f = std::make_unique<Flow>();
        f->kind = mrc ? Kind::mrc : Kind::rc;
        f->req = req;
        const std::size_t bytes = std::size_t{o_.window} * o_.max_len;
        f->local.resize(bytes);
        f->remote.resize(bytes);
        f->last.resize(o_.window);
        f->last_ok.assign(o_.window, false);
        int err = 0;
        const std::uint32_t all = rc::kAccessLocalWrite | rc::kAccessRemoteWrite |
                                  rc::kAccessRemoteRead | rc::kAccessRemoteAtomic;
        const int resp = 1 - req;
        f->local_mr = dev_[req]->reg_mr(pd_[req], f->local.data(), bytes, all, &err);
        f->remote_mr = dev_[resp]->reg_mr(pd_[resp], f->remote.data(), bytes, all, &err);
        f->counter_mr = dev_[resp]->reg_mr(pd_[resp], f->counter.data(), 8, all, &err);
        if (!f->local_mr || !f->remote_mr || !f->counter_mr) return problem("reg_mr");
        connect(*f);
        flows_.push_back(std::move(f));
    }

    void connect(Flow& f) {
        f.uid = next_uid_++;
        ++r_.qp_pairs_created;
        const bool mrc = f.kind == Kind::mrc;
        const std::uint32_t plane = f.uid % kPlanes; // RC flows spread over the planes
        for (int i = 0; i < 2; ++i) {
            int err = 0;
            const rc::QpCap cap{64, 64, 1, 1, 0};
            f.qp[i] = mrc ? dev_[i]->create_qp(pd_[i], cq_[i], cq_[i], cap, false, &err,
                                               mrc::kMrcTransport)
                          : dev_[i]->create_qp(pd_[i], cq_[i], cq_[i], cap, false, &err);
            if (!f.qp[i]) return problem("create_qp errno " + std::to_string(err));
            if (mrc) {
                mrc::MrcAttr a;
                a.max_inflight = 128;
                a.timeout = 10;
                Device::ControlSection cs(*dev_[i]);
                if (mrc::set_attr(*f.qp[i], a) != 0) return problem("mrc::set_attr");
            }
        }
        const std::uint32_t psn[2] = {static_cast<std::uint32_t>(rng_() & 0xFFFFFF),
                                      static_cast<std::uint32_t>(rng_() & 0xFFFFFF)};
        for (int i = 0; i < 2; ++i) {
            const auto peer = static_cast<std::uint32_t>(1 - i);
            if (mrc) {
                std::vector<rc::RemotePlane> planes;
                for (std::uint32_t p = 0; p < kPlanes; ++p)
                    planes.push_back(rc::RemotePlane{gid(peer, p), sim::Fabric::mac(peer, p)});
                if (dev_[i]->set_remote_planes(f.qp[i], planes) != 0)
                    return problem("set_remote_planes");
            }
            RcConnectParams c;
            c.port_num = static_cast<std::uint8_t>(mrc ? 1 : plane + 1);
            c.qp_access_flags =
                rc::kAccessRemoteWrite | rc::kAccessRemoteRead | rc::kAccessRemoteAtomic;
            c.path_mtu = rc::Mtu::mtu4096;
            c.dest_qp_num = f.qp[peer]->qpn;
            c.sq_psn = psn[i];
            c.rq_psn = psn[peer];
            c.ah_attr.dgid = gid(peer, mrc ? 0 : plane);
            c.ah_attr.dmac = sim::Fabric::mac(peer, mrc ? 0 : plane);
            c.timeout = 8; // 1 ms: longer than a plane flap
            c.retry_cnt = 7;
            c.rnr_retry = 7;
            c.min_rnr_timer = 1;
            c.max_rd_atomic = 4;
            c.max_dest_rd_atomic = 4;
            if (connect_rc(*dev_[i], f.qp[i], c) != 0) return problem("connect_rc");
        }
    }

    /** Churn: both QPs of a drained flow destroyed, a new pair made on the same buffers. */
    void replace(Flow& f) {
        for (int i = 0; i < 2; ++i)
            if (dev_[i]->destroy_qp(f.qp[i]) != 0) return problem("destroy_qp");
        f.draining = false;
        connect(f);
    }

    void fill(std::uint8_t* p, std::uint32_t len) {
        std::uint64_t x = rng_();
        for (std::uint32_t i = 0; i < len; ++i) {
            if ((i & 7) == 0) x = x * 6364136223846793005ull + 1442695040888963407ull;
            p[i] = static_cast<std::uint8_t>(x >> (8 * (i & 7)));
        }
    }

    void post(Flow& f) {
        if (stop_posting_ || f.draining) return;
        const int req = f.req, resp = 1 - f.req;
        while (f.in_flight.size() < o_.window && r_.ops_completed + in_flight() < o_.ops + 1000) {
            Op op;
            op.seq = f.next_seq;
            const std::size_t slot = (op.seq % o_.window) * o_.max_len;
            op.len = rng_() % 4 == 0 ? static_cast<std::uint32_t>(rng_() % (o_.max_len + 1))
                                     : static_cast<std::uint32_t>(rng_() % 4097);
            const unsigned kind = static_cast<unsigned>(rng_() % (f.kind == Kind::mrc ? 2 : 6));
            static constexpr rc::WrOpcode kRc[] = {rc::WrOpcode::send,
                                                   rc::WrOpcode::rdma_write,
                                                   rc::WrOpcode::rdma_write_with_imm,
                                                   rc::WrOpcode::rdma_read,
                                                   rc::WrOpcode::atomic_fetch_and_add,
                                                   rc::WrOpcode::atomic_cmp_and_swp};
            static constexpr rc::WrOpcode kMrc[] = {rc::WrOpcode::rdma_write,
                                                    rc::WrOpcode::rdma_write_with_imm};
            op.op = f.kind == Kind::mrc ? kMrc[kind] : kRc[kind];
            rc::SendWqe w;
            w.wr_id = wr_id(f, op.seq);
            w.opcode = op.op;
            w.send_flags = rc::kSendSignaled;
            w.num_sge = 1;
            w.remote_addr = reinterpret_cast<std::uintptr_t>(f.remote.data() + slot);
            w.rkey = f.remote_mr->rkey;
            std::uint8_t* src = f.local.data() + slot;
            std::uint8_t* dst = f.remote.data() + slot;
            recheck(f, op.seq % o_.window);
            f.last_ok[op.seq % o_.window] = false;
            if (op.op == rc::WrOpcode::atomic_fetch_and_add ||
                op.op == rc::WrOpcode::atomic_cmp_and_swp) {
                op.len = 8;
                w.remote_addr = reinterpret_cast<std::uintptr_t>(f.counter.data());
                w.rkey = f.counter_mr->rkey;
                op.atomic_expected = f.counter_value;
                if (op.op == rc::WrOpcode::atomic_fetch_and_add) {
                    w.compare_add = 1 + rng_() % 1000;
                    f.counter_value += w.compare_add;
                } else {
                    // Compare with the model's value half the time: a swap, else no change.
                    const bool hit = rng_() % 2 == 0;
                    w.compare_add = hit ? f.counter_value : f.counter_value ^ 0x5555;
                    w.swap = rng_();
                    if (hit) f.counter_value = w.swap;
                }
                std::memset(src, 0xEE, 8);
                std::memset(src + 8, kTail, o_.max_len - 8);
            } else if (op.op == rc::WrOpcode::rdma_read) {
                fill(dst, op.len);
                fill(src, op.len);
            } else {
                fill(src, op.len);
                fill(dst, op.len);
                if (std::memcmp(src, dst, op.len) == 0 && op.len) dst[0] ^= 1;
            }
            if (!is_atomic(op.op)) { // bytes past the operation's length must never change
                std::memset(src + op.len, kTail, o_.max_len - op.len);
                std::memset(dst + op.len, kTail, o_.max_len - op.len);
            }
            w.sg_list[0] = rc::Sge{reinterpret_cast<std::uintptr_t>(src), op.len, f.local_mr->lkey};
            if (op.op == rc::WrOpcode::send || op.op == rc::WrOpcode::rdma_write_with_imm) {
                op.recv = true;
                w.imm_data = static_cast<std::uint32_t>(op.seq);
                rc::RecvWqe r;
                r.wr_id = w.wr_id;
                r.num_sge = op.op == rc::WrOpcode::send ? 1 : 0;
                r.sg_list[0] =
                    rc::Sge{reinterpret_cast<std::uintptr_t>(dst), o_.max_len, f.remote_mr->lkey};
                std::uint32_t bad = 0;
                if (dev_[resp]->post_recv(f.qp[resp], &r, 1, &bad) != 0)
                    return problem("post_recv refused");
            }
            std::uint32_t bad = 0;
            if (dev_[req]->post_send(f.qp[req], &w, 1, &bad) != 0)
                return problem("post_send refused");
            f.in_flight.push_back(op);
            if (op.recv) f.recv_due.push_back(op);
            ++f.next_seq;
        }
    }

    std::uint64_t wr_id(const Flow& f, std::uint64_t seq) const {
        return (std::uint64_t{f.uid} << 40) | seq;
    }

    Flow* flow_of(std::uint64_t wr_id) {
        const auto uid = static_cast<std::uint32_t>(wr_id >> 40);
        for (auto& f : flows_)
            if (f->uid == uid) return f.get();
        return nullptr;
    }

    void step() {
        const std::uint32_t work = dev_[0]->poll() + dev_[1]->poll();
        collect();
        if (work != 0) return;
        std::uint64_t next = next_flap_;
        for (const auto& p : pulled_)
            next = std::min(next, p.until);
        for (std::uint64_t d :
             {dev_[0]->next_deadline_ns(), dev_[1]->next_deadline_ns(), fabric_.next_event_ns()})
            if (d && d < next) next = d;
        if (next > clock_.now_ns())
            clock_.set(next);
        else
            clock_.advance(1000);
    }

    void collect() {
        rc::Cqe c[64];
        for (int side = 0; side < 2; ++side) {
            std::uint32_t n;
            while ((n = dev_[side]->poll_cq(cq_[side], c, 64)) > 0)
                for (std::uint32_t k = 0; k < n; ++k)
                    complete(side, c[k]);
        }
        for (auto& f : flows_)
            if (f->draining && f->in_flight.empty() && f->recv_due.empty()) replace(*f);
    }

    void complete(int side, const rc::Cqe& c) {
        Flow* f = flow_of(c.wr_id);
        const std::uint64_t seq = c.wr_id & ((std::uint64_t{1} << 40) - 1);
        if (!f)
            return problem("a completion for no live flow (wr_id " + std::to_string(c.wr_id) + ")");
        if (c.status != rc::WcStatus::success)
            return problem("flow " + std::to_string(f->uid) + " op " + std::to_string(seq) + ": " +
                           std::string(rc::to_string(c.status)));
        const bool is_recv = side != f->req;
        if (c.qp_num != f->qp[side]->qpn)
            problem("completion of flow " + std::to_string(f->uid) + " on QPN " +
                    std::to_string(c.qp_num) + ", not its QP's " +
                    std::to_string(f->qp[side]->qpn));
        std::deque<Op>& q = is_recv ? f->recv_due : f->in_flight;
        if (q.empty() || q.front().seq != seq)
            return problem(std::string(is_recv ? "receive" : "send") + " completion of flow " +
                           std::to_string(f->uid) + " op " + std::to_string(seq) + ", expected " +
                           (q.empty() ? "none" : std::to_string(q.front().seq)) +
                           " (lost, duplicated or reordered)");
        const Op op = q.front();
        q.pop_front();
        const std::size_t slot = (op.seq % o_.window) * o_.max_len;
        const std::uint8_t* src = f->local.data() + slot;
        const std::uint8_t* dst = f->remote.data() + slot;
        if (c.opcode != wc_opcode(op.op, is_recv))
            problem("flow " + std::to_string(f->uid) + " op " + std::to_string(op.seq) +
                    " completed as " + std::string(rc::to_string(c.opcode)) + " for " +
                    std::string(rc::to_string(op.op)));
        if (is_recv) {
            ++r_.recv_completions;
            if (op.op == rc::WrOpcode::send && c.byte_len != op.len)
                problem("SEND byte_len " + std::to_string(c.byte_len) + " of " +
                        std::to_string(op.len));
            if (op.op == rc::WrOpcode::rdma_write_with_imm &&
                ((c.wc_flags & rc::kWcWithImm) == 0 ||
                 c.imm_data != static_cast<std::uint32_t>(op.seq)))
                problem("immediate data of flow " + std::to_string(f->uid) + " op " +
                        std::to_string(op.seq));
            if (op.op == rc::WrOpcode::send && std::memcmp(src, dst, op.len) != 0)
                problem("SEND data of flow " + std::to_string(f->uid) + " op " +
                        std::to_string(op.seq));
        } else {
            ++r_.ops_completed;
            if (is_atomic(op.op)) {
                ++r_.atomics;
                if (!tail_intact(src + 8, o_.max_len - 8))
                    problem("atomic result of flow " + std::to_string(f->uid) + " op " +
                            std::to_string(op.seq) + " wrote past its 8 bytes");
                std::uint64_t got;
                std::memcpy(&got, src, 8);
                if (got != op.atomic_expected)
                    problem("atomic result of flow " + std::to_string(f->uid) + " op " +
                            std::to_string(op.seq) + ": " + std::to_string(got) + ", model " +
                            std::to_string(op.atomic_expected));
            } else if (op.op != rc::WrOpcode::send) {
                // WRITE: placed before its ACK; READ: the response is in the local slot. A SEND's
                // bytes are checked with its receive completion.
                if (std::memcmp(src, dst, op.len) != 0)
                    problem(std::string(rc::to_string(op.op)) + " data of flow " +
                            std::to_string(f->uid) + " op " + std::to_string(op.seq));
                r_.bytes_verified += op.len;
            }
            if (!is_atomic(op.op)) {
                const std::size_t si = op.seq % o_.window;
                if (!tail_intact(src + op.len, o_.max_len - op.len) ||
                    !tail_intact(dst + op.len, o_.max_len - op.len))
                    problem(std::string(rc::to_string(op.op)) + " of flow " +
                            std::to_string(f->uid) + " op " + std::to_string(op.seq) +
                            " changed bytes past its length");
                f->last[si] = op;
                f->last_ok[si] = true;
            }
            if (!f->draining && std::uniform_real_distribution<>(0, 1)(rng_) < o_.churn)
                f->draining = true;
        }
    }

    static constexpr std::uint8_t kTail = 0xC5; ///< slot bytes past an operation's length

    static bool is_atomic(rc::WrOpcode op) {
        return op == rc::WrOpcode::atomic_fetch_and_add || op == rc::WrOpcode::atomic_cmp_and_swp;
    }

    /** The completion opcode IBTA / verbs give operation @p op on the requester or responder. */
    static rc::WcOpcode wc_opcode(rc::WrOpcode op, bool recv) {
        if (recv)
            return op == rc::WrOpcode::send ? rc::WcOpcode::recv : rc::WcOpcode::recv_rdma_with_imm;
        switch (op) {
        case rc::WrOpcode::send:
            return rc::WcOpcode::send;
        case rc::WrOpcode::rdma_read:
            return rc::WcOpcode::rdma_read;
        case rc::WrOpcode::atomic_fetch_and_add:
            return rc::WcOpcode::fetch_add;
        case rc::WrOpcode::atomic_cmp_and_swp:
            return rc::WcOpcode::comp_swap;
        default:
            return rc::WcOpcode::rdma_write;
        }
    }

    static bool tail_intact(const std::uint8_t* p, std::size_t n) {
        for (std::size_t i = 0; i < n; ++i)
            if (p[i] != kTail) return false;
        return true;
    }

    /** Slot @p si still holds what its last completed operation left (a late duplicate or a
     *  stray placement after the completion would have changed it). */
    void recheck(Flow& f, std::size_t si) {
        if (!f.last_ok[si]) return;
        const Op& op = f.last[si];
        const std::uint8_t* src = f.local.data() + si * o_.max_len;
        const std::uint8_t* dst = f.remote.data() + si * o_.max_len;
        if (std::memcmp(src, dst, op.len) != 0 || !tail_intact(src + op.len, o_.max_len - op.len) ||
            !tail_intact(dst + op.len, o_.max_len - op.len))
            problem("the slot of flow " + std::to_string(f.uid) + " op " + std::to_string(op.seq) +
                    " (" + std::string(rc::to_string(op.op)) +
                    ") changed after its completion: a late or duplicated placement");
    }

    void check_atomic_target(const Flow& f) {
        std::uint64_t v;
        std::memcpy(&v, f.counter.data(), 8);
        if (v != f.counter_value)
            problem("atomic target of flow " + std::to_string(f.uid) + " is " + std::to_string(v) +
                    ", model " + std::to_string(f.counter_value) +
                    " (an atomic executed more or less than once)");
    }

    void flap() {
        const std::uint64_t now = clock_.now_ns();
        for (auto it = pulled_.begin(); it != pulled_.end();) {
            if (now >= it->until) {
                fabric_.set_port_up(it->endpoint, it->plane, true);
                it = pulled_.erase(it);
            } else {
                ++it;
            }
        }
        if (now < next_flap_ || o_.flap_every_ns == 0) return;
        next_flap_ = now + o_.flap_every_ns;
        if (!pulled_.empty()) return; // one plane at a time: MRC keeps three, RC waits it out
        const Pulled p{static_cast<std::uint32_t>(rng_() % 2),
                       static_cast<std::uint32_t>(rng_() % kPlanes),
                       now + 100'000 + rng_() % (o_.flap_max_ns - 100'000 + 1)};
        fabric_.set_port_up(p.endpoint, p.plane, false);
        pulled_.push_back(p);
        ++r_.plane_flaps;
    }

    void finish() {
        r_.virtual_ns = clock_.now_ns();
        for (int i = 0; i < 2; ++i) {
            r_.retransmitted += dev_[i]->total_counters()[Counter::retransmitted_pkts];
            dev_[i]->counter_registry().for_each(
                [&](std::string_view scope, std::string_view name, std::uint64_t v) {
                    if (scope.starts_with("qp/") && name == "retransmits") r_.retransmitted += v;
                });
        }
        for (std::uint32_t p = 0; p < kPlanes; ++p)
            for (std::uint32_t from = 0; from < 2; ++from) {
                const auto& s = fabric_.link_stats(from, 1 - from, p);
                r_.dropped_loss += s[sim::LinkCounter::dropped_loss];
                r_.reordered += s[sim::LinkCounter::reordered];
                r_.duplicated += s[sim::LinkCounter::duplicated];
                r_.corrupted += s[sim::LinkCounter::corrupted];
                r_.dropped_down += s[sim::LinkCounter::dropped_down];
            }
    }

    ChaosOptions o_;
    std::mt19937_64 rng_;
    Clock clock_;
    sim::Fabric fabric_;
    std::unique_ptr<Device> dev_[2];
    mem::Pd* pd_[2] = {};
    rc::Cq* cq_[2] = {};
    std::vector<std::unique_ptr<Flow>> flows_;
    std::vector<Pulled> pulled_;
    std::uint64_t next_flap_ = 0;
    std::uint32_t next_uid_ = 1;
    bool stop_posting_ = false;
    ChaosResult r_;
};

} // namespace droce::test
