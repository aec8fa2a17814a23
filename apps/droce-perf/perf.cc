/* SPDX-License-Identifier: BSD-3-Clause */
#include "perf.h"

#include <immintrin.h>
#include <sched.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

#include <rte_eal.h>
#include <rte_malloc.h>

#include "dpdk/eal.h"
#include "dpdk/eth_port.h"
#include "engine/connect.h"
#include "runtime/runtime.h"

namespace droce::perf {

namespace {

constexpr std::uint32_t kMagic = 0x44525046; // "DRPF"
constexpr std::uint32_t kVersion = 2; ///< 2: QpInfo carries a GID per plane; Params MRC fields
constexpr int kHandshakeMs = 30'000;
constexpr std::uint64_t kStallNs = 20'000'000'000ull; ///< no progress for this long: the run failed
constexpr std::uint64_t kWindowNs = 10'000'000ull;    ///< bandwidth peak window
constexpr unsigned kPostBatch = 16;
constexpr unsigned kPollBatch = 64;

struct Hello {
    std::uint32_t magic = kMagic;
    std::uint32_t version = kVersion;
    Params p;
};
struct SetupMsg {
    std::uint32_t magic = kMagic;
    std::uint32_t nqp = 0;
    QpInfo qp[kMaxQps];
};
/** Client → server at the end of a run: how many messages each QP completed. */
struct DoneMsg {
    std::uint32_t magic = kMagic;
    std::uint32_t client_ok = 0;
    std::uint64_t count[kMaxQps] = {};
};
/** Server → client: the server's checks. */
struct VerdictMsg {
    std::uint32_t magic = kMagic;
    std::uint32_t ok = 0;
    std::uint64_t errors = 0;
    char msg[160] = {};
};

void fill(std::uint8_t* dst, unsigned q, std::uint64_t k, std::uint32_t len) {
    for (std::uint32_t i = 0; i < len; ++i)
        dst[i] = pattern(q, k, i);
}

/** Bytes of @p src that differ from message k's pattern. */
std::uint64_t check(const std::uint8_t* src, unsigned q, std::uint64_t k, std::uint32_t len) {
    std::uint64_t bad = 0;
    for (std::uint32_t i = 0; i < len; ++i)
        bad += src[i] != pattern(q, k, i);
    return bad;
}

/** Reads a byte the engine thread writes (the last byte of a ping-pong slot). */
std::uint8_t load_acquire(const std::uint8_t* p) {
    return std::atomic_ref<const std::uint8_t>(*p).load(std::memory_order_acquire);
}

std::uint64_t load_u64(const std::uint8_t* p) {
    std::uint64_t v;
    std::memcpy(&v, p, 8);
    return v;
}

/** Back-off for the application's spin loops: spin, then give the core away now and then. */
struct Backoff {
    std::uint32_t idle = 0;
    void reset() { idle = 0; }
    void wait() {
        if (++idle < 256)
            _mm_pause();
        else {
            idle = 0;
            sched_yield();
        }
    }
};

std::string status_error(const rc::Cqe& c) {
    return std::string("completion with status ") + std::string(rc::to_string(c.status)) +
           " (wr_id " + std::to_string(c.wr_id) + ", vendor_err " + std::to_string(c.vendor_err) +
           ")";
}

/**
 * Checks a completion of a bandwidth loop: success status and a wr_id naming one of @p nq QPs
 * (QP index in the top 32 bits). On failure marks @p r failed with the reason and returns false.
 */
bool accept_cqe(const rc::Cqe& c, unsigned nq, Result& r, unsigned& q, const char* what) {
    if (c.status != rc::WcStatus::success) {
        r.ok = false;
        r.error = status_error(c);
        ++r.error_cqes;
        return false;
    }
    q = static_cast<unsigned>(c.wr_id >> 32);
    if (q >= nq) {
        r.ok = false;
        r.error = std::string(what) + " of an unknown wr_id";
        return false;
    }
    return true;
}

void lat_stats(std::vector<double>& ns, Result& r) {
    if (ns.empty()) return;
    std::sort(ns.begin(), ns.end());
    const double n = static_cast<double>(ns.size());
    double sum = 0;
    for (double v : ns)
        sum += v;
    const double avg = sum / n;
    double var = 0;
    for (double v : ns)
        var += (v - avg) * (v - avg);
    auto pct = [&](double f) {
        std::size_t i = static_cast<std::size_t>(std::ceil(f * n));
        if (i > 0) --i;
        return ns[std::min(i, ns.size() - 1)];
    };
    r.t_min = ns.front() / 1e3;
    r.t_max = ns.back() / 1e3;
    r.t_typical = ns[ns.size() / 2] / 1e3;
    r.t_avg = avg / 1e3;
    r.t_stdev = std::sqrt(var / n) / 1e3;
    r.t_p99 = pct(0.99) / 1e3;
    r.t_p999 = pct(0.999) / 1e3;
}

/**
 * Receives @p len bytes from @p ch within @p timeout_ms (as Channel::recv); with @p inline_dev set,
 * polls that device (inline progress) until the first byte is readable, so that the engine of a
 * side that waits for its peer's message still answers the peer's packets. Control path.
 */
std::string recv_polling(const Channel& ch, Device* inline_dev, void* data, std::size_t len,
                         int timeout_ms) {
    if (inline_dev) {
        Clock& clk = inline_dev->clock();
        const std::uint64_t t0 = clk.now_ns();
        const std::uint64_t limit = static_cast<std::uint64_t>(timeout_ms) * 1'000'000ull;
        std::uint32_t idle = 0;
        std::uint64_t next_check = t0;
        for (;;) {
            // A readable() check is a poll(2) system call, some microseconds on a virtual machine:
            // once a millisecond (one per 64 engine passes was 5 - 8 % of a busy server's core).
            const std::uint64_t now = clk.now_ns();
            if (now >= next_check) {
                if (ch.readable()) break;
                next_check = now + 1'000'000;
            }
            if (inline_dev->poll() != 0) {
                idle = 0;
            } else if (++idle >= 256) {
                idle = 0;
                sched_yield();
            }
            if (now - t0 > limit) {
                if (ch.readable()) break; // it came within the last millisecond
                return "timed out";
            }
        }
    }
    return ch.recv(data, len, timeout_ms);
}

/** Sends the end-of-run message and waits for the server's verdict. */
void finish_client(const Channel& ch, Device* inline_dev, const std::vector<std::uint64_t>& counts,
                   Result& r, int timeout_ms) {
    DoneMsg d;
    d.client_ok = r.ok ? 1 : 0;
    for (std::size_t q = 0; q < counts.size() && q < kMaxQps; ++q)
        d.count[q] = counts[q];
    if (std::string e = ch.send(&d, sizeof d); !e.empty()) {
        r.ok = false;
        if (r.error.empty()) r.error = "sending the end of the run: " + e;
        return;
    }
    VerdictMsg v;
    if (std::string e = recv_polling(ch, inline_dev, &v, sizeof v, timeout_ms);
        !e.empty() || v.magic != kMagic) {
        r.ok = false;
        if (r.error.empty())
            r.error = "waiting for the server's verdict: " + (e.empty() ? "bad message" : e);
        return;
    }
    r.peer_verified = v.ok != 0;
    r.verify_errors += v.errors;
    if (!v.ok && r.error.empty()) r.error = std::string("server: ") + v.msg;
}

/**
 * MRC, client side: applies the plane events (--plane-down / --plane-up) when they are due, with a
 * control call from this thread (Device::set_port_admin; allowed while the engine runs), keeps the
 * planes' byte counts at each event so that the report can give what every plane carried between
 * events (phases), and writes the per-plane part of the progress lines. Reads mrc::plane_stats:
 * relaxed atomics the engine writes, readable from any thread. Inert for RC.
 */
class PlaneWatch {
  public:
    PlaneWatch(Endpoint& ep, std::uint64_t start_ns) : ep_(ep), p_(ep.p_), start_(start_ns) {
        if (!p_.mrc) return;
        n_ = p_.planes;
        seen_up_ = ep_.dev_.ports_up_mask();
        snaps_.push_back(Snap{start_ns, tx(), 0, "start"});
        prog_ = snaps_.back().tx;
        prog_rtx_ = retransmits();
        prog_ns_ = start_ns;
    }

    /** Applies the events due at @p now; @p done_bytes: bytes of the messages completed so far. */
    void tick(std::uint64_t now, std::uint64_t done_bytes, Result& r) {
        while (next_ < p_.num_events &&
               static_cast<double>(now - start_) >= p_.events[next_].at_s * 1e9) {
            const PlaneEvent& ev = p_.events[next_++];
            const int e = ep_.dev_.set_port_admin(ev.plane, ev.up);
            // The engine's link check will show this change soon: it is this event, not another.
            // Only a change the mask does not show yet is awaited, and only for a while: an event
            // that changes nothing (up on a plane that is up, down on a plane whose link is down)
            // or is undone before the next check would otherwise swallow a later real change.
            if (e == 0 && ev.plane < 8) {
                const auto bit = static_cast<std::uint8_t>(1u << ev.plane);
                if (((ep_.dev_.ports_up_mask() & bit) != 0) != ev.up) {
                    expect_up_ =
                        static_cast<std::uint8_t>(ev.up ? expect_up_ | bit : expect_up_ & ~bit);
                    expect_until_ns_[ev.plane] = now + kExpectNs;
                } else {
                    expect_until_ns_[ev.plane] = 0;
                }
            }
            const double at = static_cast<double>(now - start_) / 1e9;
            r.events.push_back(AppliedEvent{ev, at, e});
            const std::string what =
                "plane " + std::to_string(ev.plane) + (ev.up ? " up" : " down");
            snaps_.push_back(Snap{now, tx(), done_bytes, what});
            if (p_.progress) {
                std::FILE* f = p_.json ? stderr : stdout;
                std::fprintf(f, " [%5.1f s] %s: Device::set_port_admin(%u, %s)%s\n", at,
                             what.c_str(), ev.plane, ev.up ? "true" : "false",
                             e ? (" failed: " + std::string(std::strerror(e))).c_str() : "");
                std::fflush(f);
            }
        }
        watch_links(now, done_bytes, r);
    }

    /**
     * "   per plane [Gb/s]: a b c d   retransmits +n" since the previous call (MRC), else "";
     * @p sample (if given) gets the planes' rates.
     */
    std::string progress_text(std::uint64_t now, Sample* sample = nullptr) {
        if (!p_.mrc) return {};
        const auto cur = tx();
        const std::uint64_t rtx = retransmits();
        const double dt = static_cast<double>(now - prog_ns_);
        std::string t = "   per plane [Gb/s]:";
        char b[32];
        for (unsigned p = 0; p < n_; ++p) {
            const double g = dt > 0 ? static_cast<double>(cur[p] - prog_[p]) * 8.0 / dt : 0.0;
            if (sample) sample->plane_gbps.push_back(g);
            std::snprintf(b, sizeof b, " %6.2f", g);
            t += b;
        }
        std::snprintf(b, sizeof b, "   retransmits +%" PRIu64, rtx - prog_rtx_);
        t += b;
        prog_ = cur;
        prog_rtx_ = rtx;
        prog_ns_ = now;
        return t;
    }

    /** The phases between events, closed at @p end with @p done_bytes completed. */
    void finish(std::uint64_t end, std::uint64_t done_bytes, Result& r) {
        if (!p_.mrc) return;
        snaps_.push_back(Snap{std::max(end, snaps_.back().t), tx(), done_bytes, "end"});
        for (std::size_t i = 0; i + 1 < snaps_.size(); ++i) {
            const Snap& a = snaps_[i];
            const Snap& b = snaps_[i + 1];
            const double dt = static_cast<double>(b.t - a.t);
            if (dt <= 0) continue;
            Phase ph;
            ph.from_s = static_cast<double>(a.t - start_) / 1e9;
            ph.to_s = static_cast<double>(b.t - start_) / 1e9;
            ph.after = a.what;
            for (unsigned p = 0; p < n_; ++p)
                ph.plane_gbps.push_back(static_cast<double>(b.tx[p] - a.tx[p]) * 8.0 / dt);
            ph.gbps = static_cast<double>(b.done - a.done) * 8.0 / dt;
            r.phases.push_back(std::move(ph));
        }
    }

  private:
    /** Records the planes whose port the engine found gone or back since the last look, unless it
     *  was one of this run's own events: a cable pulled mid-run is an event of the run. */
    void watch_links(std::uint64_t now, std::uint64_t done_bytes, Result& r) {
        const std::uint8_t up = ep_.dev_.ports_up_mask();
        const auto changed = static_cast<std::uint8_t>(up ^ seen_up_);
        seen_up_ = up;
        for (unsigned p = 0; p < n_ && p < 8; ++p) {
            const auto bit = static_cast<std::uint8_t>(1u << p);
            if (!(changed & bit)) continue;
            const bool is_up = (up & bit) != 0;
            if (expect_until_ns_[p] > now && ((expect_up_ & bit) != 0) == is_up) {
                expect_until_ns_[p] = 0; // ours
                continue;
            }
            const double at = static_cast<double>(now - start_) / 1e9;
            AppliedEvent ae;
            ae.ev = PlaneEvent{at, static_cast<std::uint8_t>(p), is_up};
            ae.at_s = at;
            ae.seen = true;
            r.events.push_back(ae);
            const std::string what = "plane " + std::to_string(p) + (is_up ? " back" : " lost");
            snaps_.push_back(Snap{now, tx(), done_bytes, what});
            if (p_.progress) {
                std::FILE* f = p_.json ? stderr : stdout;
                std::fprintf(f,
                             " [%5.1f s] %s: the engine found port %u %s (not this run's event)\n",
                             at, what.c_str(), p, is_up ? "up again" : "down");
                std::fflush(f);
            }
        }
    }

    using Bytes = std::array<std::uint64_t, kMaxPlanes>;
    struct Snap {
        std::uint64_t t = 0;
        Bytes tx{};
        std::uint64_t done = 0;
        std::string what;
    };
    [[nodiscard]] Bytes tx() const {
        Bytes v{};
        for (const rc::Qp* qp : ep_.qps_)
            for (unsigned p = 0; p < n_; ++p)
                if (const mrc::PlaneStats* ps = mrc::plane_stats(*qp, p))
                    v[p] += ps->tx_bytes.load(std::memory_order_relaxed);
        return v;
    }
    [[nodiscard]] std::uint64_t retransmits() const {
        std::uint64_t n = 0;
        for (const rc::Qp* qp : ep_.qps_)
            for (unsigned p = 0; p < n_; ++p)
                if (const mrc::PlaneStats* ps = mrc::plane_stats(*qp, p))
                    n += ps->retransmits.load(std::memory_order_relaxed);
        return n;
    }

    Endpoint& ep_;
    const Params& p_;
    const std::uint64_t start_;
    unsigned n_ = 0;
    unsigned next_ = 0;
    std::uint8_t seen_up_ = 0; ///< Device::ports_up_mask at the last look
    /** How long one of this run's own events is awaited in the mask (the engine checks links
     *  every 256 passes: microseconds, or a scheduler slice on a busy host). */
    static constexpr std::uint64_t kExpectNs = 200'000'000;
    std::uint8_t expect_up_ = 0; ///< the state this run's own events set, per plane
    /** Per plane: until when a change to expect_up_ is this run's own event (0: none awaited). */
    std::array<std::uint64_t, 8> expect_until_ns_{};
    std::vector<Snap> snaps_;
    Bytes prog_{};
    std::uint64_t prog_rtx_ = 0;
    std::uint64_t prog_ns_ = 0;
};

class Runner {
  public:
    Runner(Endpoint& ep, const Channel& ch)
        : ep_(ep), ch_(ch), dev_(ep.dev_), p_(ep.p_), clk_(ep.dev_.clock()),
          inline_(ep.p_.inline_progress) {}

    /** The device this thread drives (inline progress), or nullptr when an engine thread does. */
    [[nodiscard]] Device* inline_dev() const { return inline_ ? &dev_ : nullptr; }
    /** One engine pass when the engine runs inline; @return its work units (0 otherwise). */
    std::uint32_t progress() { return inline_ ? dev_.poll() : 0u; }
    /**
     * A wait step of the application's spin loops: one engine pass inline (and no back-off while
     * it finds work), else the Backoff.
     */
    void idle(Backoff& bo) {
        if (inline_ && dev_.poll() != 0) {
            bo.reset();
            return;
        }
        bo.wait();
    }

    std::uint64_t now() const { return clk_.now_ns(); }
    [[nodiscard]] bool time_up(std::uint64_t start) const {
        return p_.duration_s > 0 && static_cast<double>(now() - start) >= p_.duration_s * 1e9;
    }
    [[nodiscard]] bool count_up(std::uint64_t k) const {
        return p_.duration_s <= 0 && k >= p_.iters;
    }

    /** Posts one WQE; false with r.error on failure. */
    bool post(const rc::SendWqe& w, unsigned q, Result& r) {
        std::uint32_t bad = 0;
        if (const int e = dev_.post_send(ep_.qps_[q], &w, 1, &bad); e != 0) {
            r.error = "post_send: " + std::string(std::strerror(e));
            return false;
        }
        return true;
    }
    bool post_recv(unsigned q, std::uint64_t k, std::uint64_t slot_index, Result& r) {
        rc::RecvWqe w;
        w.wr_id = (static_cast<std::uint64_t>(q) << 32) | (k & 0xffffffffu);
        w.num_sge = 1;
        w.sg_list[0] = rc::Sge{reinterpret_cast<std::uintptr_t>(ep_.slot(q, slot_index)),
                               ep_.slot_bytes_, ep_.mr_->lkey};
        std::uint32_t bad = 0;
        if (const int e = dev_.post_recv(ep_.qps_[q], &w, 1, &bad); e != 0) {
            r.error = "post_recv: " + std::string(std::strerror(e));
            return false;
        }
        return true;
    }
    /** Reaps send completions without waiting; false on an error completion. */
    bool reap_sends(Result& r, std::uint64_t* reaped = nullptr) {
        rc::Cqe c[kPollBatch];
        std::uint32_t n;
        while ((n = dev_.poll_cq(ep_.scq_, c, kPollBatch)) > 0) {
            for (std::uint32_t i = 0; i < n; ++i)
                if (c[i].status != rc::WcStatus::success) {
                    r.error = status_error(c[i]);
                    ++r.error_cqes;
                    return false;
                }
            if (reaped) *reaped += n;
        }
        return true;
    }

    rc::SendWqe wqe(unsigned q, std::uint64_t k, std::uint64_t local_slot,
                    std::uint64_t remote_slot) const {
        rc::SendWqe w;
        w.wr_id = (static_cast<std::uint64_t>(q) << 32) | (k & 0xffffffffu);
        w.send_flags = rc::kSendSignaled;
        w.num_sge = 1;
        const std::uint32_t len = p_.op == Op::atomic ? 8u : p_.size;
        w.sg_list[0] =
            rc::Sge{reinterpret_cast<std::uintptr_t>(ep_.slot(q, local_slot)), len, ep_.mr_->lkey};
        w.rkey = ep_.peer_[q].rkey;
        switch (p_.op) {
        case Op::write:
            // MRC latency: WRITE with immediate, whose receive completion says the whole message
            // is placed (Params::mrc).
            w.opcode = imm_lat() ? rc::WrOpcode::rdma_write_with_imm : rc::WrOpcode::rdma_write;
            w.imm_data = static_cast<std::uint32_t>(k);
            w.remote_addr = ep_.remote_slot(q, remote_slot);
            break;
        case Op::read:
            w.opcode = rc::WrOpcode::rdma_read;
            w.remote_addr = ep_.remote_slot(q, remote_slot);
            break;
        case Op::send:
            w.opcode = rc::WrOpcode::send;
            break;
        case Op::atomic:
            w.opcode = rc::WrOpcode::atomic_fetch_and_add;
            w.remote_addr = ep_.remote_slot(q, 0);
            w.compare_add = 1;
            break;
        }
        return w;
    }

    /** An MRC WRITE latency run: WRITE with immediate, the receiver waits for its completion. */
    [[nodiscard]] bool imm_lat() const {
        return p_.mrc && p_.op == Op::write && p_.mode == Mode::lat;
    }

    Result client_bw();
    Result client_lat();
    Result server_bw();
    Result server_lat();
    /** When the client's end-of-run message arrived (server), 0 before. */
    std::uint64_t done_at_ = 0;

  private:
    void progress_line(double secs, double gbps, double mpps, const std::string& planes) const {
        std::FILE* f = p_.json ? stderr : stdout;
        std::fprintf(f, " [%5.1f s] %10.2f Gb/s %10.4f Mpps%s\n", secs, gbps, mpps, planes.c_str());
        std::fflush(f);
    }
    bool wait_done(DoneMsg& d, Result& r, int timeout_ms) {
        if (std::string e = recv_polling(ch_, inline_dev(), &d, sizeof d, timeout_ms);
            !e.empty() || d.magic != kMagic) {
            r.error = "waiting for the client's end of run: " + (e.empty() ? "bad message" : e);
            return false;
        }
        done_at_ = now();
        return true;
    }
    void send_verdict(const Result& r) {
        VerdictMsg v;
        v.ok = r.ok && r.verified ? 1 : 0;
        v.errors = r.verify_errors;
        std::snprintf(v.msg, sizeof v.msg, "%s",
                      r.error.empty() ? (v.ok ? "ok" : "data differ") : r.error.c_str());
        (void)ch_.send(&v, sizeof v);
    }
    int done_timeout_ms() const {
        return static_cast<int>(
            std::min(3'600'000.0, (p_.duration_s > 0 ? p_.duration_s * 1000 : 0) + 600'000));
    }

    Endpoint& ep_;
    const Channel& ch_;
    Device& dev_;
    const Params& p_;
    Clock& clk_;
    const bool inline_;
};

Result Runner::client_bw() {
    Result r;
    r.verify = p_.verify;
    const unsigned nq = p_.qps;
    const std::uint32_t S = ep_.slots_;
    const std::uint32_t depth = std::min(p_.tx_depth, S);
    const std::uint32_t msg_bytes = p_.op == Op::atomic ? 8u : p_.size;
    std::vector<std::uint64_t> posted(nq, 0), done(nq, 0);
    std::uint64_t total_done = 0;
    bool stop = false;
    const std::uint64_t start = now();
    std::uint64_t last_progress_ns = start, last_completion = start, end = start;
    std::uint64_t win_start = start, win_msgs = 0, prog_msgs = 0;
    double peak = 0;
    rc::Cqe cqes[kPollBatch];
    // WQEs built once per QP (a SendWqe is ~600 bytes: constructing and copying one per message
    // was a visible share of the client's time); the loop sets only wr_id and the addresses.
    std::vector<std::array<rc::SendWqe, kPostBatch>> batches(nq);
    for (unsigned q = 0; q < nq; ++q)
        batches[q].fill(wqe(q, 0, 0, 0));
    PlaneWatch watch(ep_, start);
    Backoff bo;
    r.ok = true;
    while (r.ok) {
        const std::uint64_t t = now();
        if (!stop && (time_up(start))) stop = true;
        watch.tick(t, total_done * msg_bytes, r);
        bool all_posted = true;
        for (unsigned q = 0; q < nq && r.ok; ++q) {
            std::uint32_t nb = 0;
            while (!stop && !count_up(posted[q]) && posted[q] - done[q] < depth &&
                   nb < kPostBatch) {
                const std::uint64_t k = posted[q];
                const std::uint64_t s = k % S;
                if (p_.verify) {
                    if (p_.op == Op::write || p_.op == Op::send)
                        fill(ep_.slot(q, s), q, k, msg_bytes);
                    else
                        std::memset(ep_.slot(q, s), 0, msg_bytes);
                }
                rc::SendWqe& w = batches[q][nb++];
                w.wr_id = (static_cast<std::uint64_t>(q) << 32) | (k & 0xffffffffu);
                // Selective signaling, as perftest's --cq-mod: only the last WQE of each post batch
                // (set below) asks for a CQE, which completes every earlier WQE of the QP too (RC
                // completes in order). With --verify every WQE does: each one is checked.
                w.send_flags = p_.verify ? rc::kSendSignaled : 0u;
                w.sg_list[0].addr = reinterpret_cast<std::uintptr_t>(ep_.slot(q, s));
                if (p_.op == Op::write || p_.op == Op::read) w.remote_addr = ep_.remote_slot(q, s);
                ++posted[q];
            }
            if (nb) {
                batches[q][nb - 1].send_flags = rc::kSendSignaled;
                std::uint32_t bad = 0;
                if (const int e = dev_.post_send(ep_.qps_[q], batches[q].data(), nb, &bad);
                    e != 0) {
                    r.ok = false;
                    r.error = "post_send: " + std::string(std::strerror(e));
                }
            }
            if (!stop && !count_up(posted[q])) all_posted = false;
        }
        if (!r.ok) break;
        // Inline progress: one engine pass per round (transmits what was just posted, receives
        // ACKs, writes CQEs).
        const std::uint32_t worked = progress();
        const std::uint32_t n = dev_.poll_cq(ep_.scq_, cqes, kPollBatch);
        for (std::uint32_t i = 0; i < n; ++i) {
            const rc::Cqe& c = cqes[i];
            unsigned q = 0;
            if (!accept_cqe(c, nq, r, q, "completion")) break;
            // Message k (its low 32 bits are in wr_id) and every earlier one of QP q are done.
            const std::uint64_t k =
                done[q] + ((static_cast<std::uint32_t>(c.wr_id) - done[q]) & 0xffffffffu);
            total_done += k + 1 - done[q];
            done[q] = k + 1;
            if (p_.verify) {
                const std::uint64_t s = k % S;
                if (p_.op == Op::read)
                    r.verify_errors += check(ep_.slot(q, s), q, s, msg_bytes);
                else if (p_.op == Op::atomic)
                    r.verify_errors += load_u64(ep_.slot(q, s)) != k;
            }
        }
        if (n) {
            bo.reset();
            last_completion = now();
            end = last_completion;
        } else {
            if (worked == 0) bo.wait();
            if (t - last_completion > kStallNs) {
                r.ok = false;
                r.error = "no completion for 20 s";
                break;
            }
        }
        if (t - win_start >= kWindowNs) {
            const double rate = static_cast<double>(total_done - win_msgs) * msg_bytes * 8.0 /
                                static_cast<double>(t - win_start);
            peak = std::max(peak, rate);
            win_start = t;
            win_msgs = total_done;
        }
        if (p_.progress && t - last_progress_ns >= 1'000'000'000ull) {
            const double dt = static_cast<double>(t - last_progress_ns);
            const double m = static_cast<double>(total_done - prog_msgs);
            Sample smp;
            smp.at_s = static_cast<double>(t - start) / 1e9;
            smp.gbps = m * msg_bytes * 8.0 / dt;
            progress_line(smp.at_s, smp.gbps, m * 1e3 / dt, watch.progress_text(t, &smp));
            r.samples.push_back(std::move(smp));
            last_progress_ns = t;
            prog_msgs = total_done;
        }
        if (all_posted || stop) {
            bool fin = true;
            for (unsigned q = 0; q < nq; ++q)
                fin = fin && done[q] == posted[q];
            if (fin) break;
        }
    }
    r.messages = total_done;
    r.bytes = total_done * msg_bytes;
    r.seconds = static_cast<double>(end - start) / 1e9;
    if (r.seconds > 0) {
        r.bw_avg_gbps = static_cast<double>(r.bytes) * 8.0 / (r.seconds * 1e9);
        r.msg_rate_mpps = static_cast<double>(r.messages) / (r.seconds * 1e6);
    }
    r.bw_peak_gbps = std::max(peak, r.bw_avg_gbps);
    r.verified = r.verify_errors == 0;
    watch.finish(end, total_done * msg_bytes, r);
    finish_client(ch_, inline_dev(), done, r, 60'000);
    return r;
}

Result Runner::server_bw() {
    Result r;
    r.verify = p_.verify;
    r.ok = true;
    const unsigned nq = p_.qps;
    const std::uint32_t S = ep_.slots_;
    DoneMsg d;
    if (p_.op != Op::send) {
        if (!wait_done(d, r, done_timeout_ms())) {
            r.ok = false;
            send_verdict(r);
            return r;
        }
    } else {
        // Receive, check and re-post until the client's end-of-run message and every message it
        // counted have arrived.
        std::vector<std::uint64_t> got(nq, 0);
        bool have_done = false;
        rc::Cqe cqes[kPollBatch];
        Backoff bo;
        std::uint64_t last = now();
        std::uint32_t spins = 0;
        while (r.ok) {
            const std::uint32_t n = dev_.poll_cq(ep_.rcq_, cqes, kPollBatch);
            for (std::uint32_t i = 0; i < n && r.ok; ++i) {
                const rc::Cqe& c = cqes[i];
                unsigned q = 0;
                if (!accept_cqe(c, nq, r, q, "receive completion")) break;
                const std::uint64_t k = got[q]++;
                const std::uint64_t s = k % S;
                if (p_.verify) {
                    if (c.byte_len != p_.size) ++r.verify_errors;
                    r.verify_errors += check(ep_.slot(q, s), q, k, std::min(c.byte_len, p_.size));
                }
                if (!post_recv(q, k + S, s, r)) r.ok = false;
            }
            if (!r.ok) break;
            if (n) {
                bo.reset();
                last = now();
            } else {
                idle(bo);
            }
            if (!have_done && (n == 0 || (++spins & 1023u) == 0) && ch_.readable()) {
                if (!wait_done(d, r, 10'000)) {
                    r.ok = false;
                    break;
                }
                have_done = true;
                last = now();
            }
            if (have_done) {
                bool fin = true;
                for (unsigned q = 0; q < nq; ++q)
                    fin = fin && got[q] >= d.count[q];
                if (fin) break;
                if (now() - last > 5'000'000'000ull) {
                    r.ok = false;
                    r.error = "messages the client counted never arrived";
                    break;
                }
            }
        }
        for (std::uint64_t g : got)
            r.messages += g;
        r.bytes = r.messages * p_.size;
        if (!have_done) {
            send_verdict(r);
            return r;
        }
    }
    if (r.ok && d.client_ok && p_.verify) {
        for (unsigned q = 0; q < nq; ++q) {
            const std::uint64_t nmsg = d.count[q];
            if (p_.op == Op::write) {
                for (std::uint64_t s = 0; s < S && s < nmsg; ++s) {
                    const std::uint64_t k =
                        s + ((nmsg - 1 - s) / S) * S; // last message into slot s
                    r.verify_errors += check(ep_.slot(q, s), q, k, p_.size);
                }
            } else if (p_.op == Op::atomic) {
                r.verify_errors += load_u64(ep_.slot(q, 0)) != nmsg;
            }
        }
    }
    if (p_.op != Op::send)
        for (unsigned q = 0; q < nq; ++q)
            r.messages += d.count[q];
    r.verified = r.verify_errors == 0;
    if (!d.client_ok && r.error.empty()) r.error = "the client failed";
    r.ok = r.ok && d.client_ok;
    r.peer_verified = true;
    send_verdict(r);
    return r;
}

Result Runner::client_lat() {
    Result r;
    r.verify = p_.verify;
    r.ok = true;
    const std::uint32_t len = p_.op == Op::atomic ? 8u : p_.size;
    std::vector<double> samples;
    samples.reserve(p_.duration_s > 0
                        ? 1u << 16
                        : static_cast<std::size_t>(std::min<std::uint64_t>(p_.iters, 1u << 24)));
    std::uint8_t* in = ep_.slot(0, 0);
    std::uint8_t* src = ep_.slot(0, 1);
    const std::uint64_t start = now();
    std::uint64_t last_progress_ns = start;
    std::size_t prog_samples = 0;
    std::uint64_t k = 0;
    rc::Cqe c[kPollBatch];
    std::uint64_t reaped = 0; // send completions seen
    PlaneWatch watch(ep_, start);
    for (; r.ok && !time_up(start) && !count_up(k); ++k) {
        watch.tick(now(), k * len, r);
        if (p_.op == Op::write || p_.op == Op::send) {
            if (p_.verify)
                fill(src, 0, k, len);
            else
                src[len - 1] = pattern(0, k, len - 1);
        } else if (p_.verify) {
            std::memset(in, 0, len);
        }
        // write/send: from slot 1 to the peer's slot 0; read/atomic: into slot 0 from the peer's
        // slot 0.
        const rc::SendWqe w =
            (p_.op == Op::write || p_.op == Op::send) ? wqe(0, k, 1, 0) : wqe(0, k, 0, 0);
        const std::uint64_t t0 = now();
        if (!post(w, 0, r)) {
            r.ok = false;
            break;
        }
        Backoff bo;
        std::uint64_t t1 = 0;
        if (p_.op == Op::write && !imm_lat()) {
            const std::uint8_t want = pattern(0, k, len - 1);
            while (load_acquire(in + len - 1) != want) {
                if (!reap_sends(r, &reaped)) break;
                if (now() - t0 > kStallNs) {
                    r.error = "no reply for 20 s";
                    break;
                }
                idle(bo);
            }
            t1 = now();
            if (!r.error.empty())
                r.ok = false;
            else if (!reap_sends(r, &reaped))
                r.ok = false;
        } else if (p_.op == Op::send || imm_lat()) {
            for (;;) {
                const std::uint32_t n = dev_.poll_cq(ep_.rcq_, c, 1);
                if (n) {
                    t1 = now();
                    if (c[0].status != rc::WcStatus::success) {
                        r.error = status_error(c[0]);
                        ++r.error_cqes;
                    } else if (p_.verify && c[0].byte_len != len)
                        ++r.verify_errors;
                    break;
                }
                if (!reap_sends(r, &reaped)) break;
                if (now() - t0 > kStallNs) {
                    r.error = "no reply for 20 s";
                    break;
                }
                idle(bo);
            }
            if (!r.error.empty() || !reap_sends(r, &reaped))
                r.ok = false;
            else if (!post_recv(0, k + 1, 0, r))
                r.ok = false;
        } else {
            for (;;) {
                const std::uint32_t n = dev_.poll_cq(ep_.scq_, c, 1);
                if (n) {
                    t1 = now();
                    ++reaped;
                    if (c[0].status != rc::WcStatus::success) {
                        r.error = status_error(c[0]);
                        ++r.error_cqes;
                    }
                    break;
                }
                if (now() - t0 > kStallNs) {
                    r.error = "no completion for 20 s";
                    break;
                }
                idle(bo);
            }
            if (!r.error.empty()) r.ok = false;
        }
        if (!r.ok) break;
        const double ns = static_cast<double>(t1 - t0);
        samples.push_back(p_.op == Op::write || p_.op == Op::send ? ns / 2 : ns);
        if (p_.progress && t1 - last_progress_ns >= 1'000'000'000ull) {
            double sum = 0;
            for (std::size_t i = prog_samples; i < samples.size(); ++i)
                sum += samples[i];
            const std::size_t n = samples.size() - prog_samples;
            std::FILE* f = p_.json ? stderr : stdout;
            std::fprintf(f, " [%5.1f s] %8zu iterations, t_avg %.2f usec%s\n",
                         static_cast<double>(t1 - start) / 1e9, n,
                         n ? sum / static_cast<double>(n) / 1e3 : 0.0,
                         watch.progress_text(t1).c_str());
            std::fflush(f);
            last_progress_ns = t1;
            prog_samples = samples.size();
        }
        if (p_.verify) {
            if (p_.op == Op::atomic)
                r.verify_errors += load_u64(in) != k;
            else if (p_.op == Op::read)
                r.verify_errors += check(in, 0, 0, len);
            else
                r.verify_errors += check(in, 0, k, len);
        }
    }
    // Let the last sends complete before the QP goes away.
    const std::uint64_t t_end = now();
    while (r.ok && reaped < k && now() - t_end < 2'000'000'000ull) {
        if (!reap_sends(r, &reaped)) r.ok = false;
        if (progress() == 0) sched_yield();
    }
    r.messages = samples.size();
    r.bytes = r.messages * len;
    const std::uint64_t t_fin = now();
    r.seconds = static_cast<double>(t_fin - start) / 1e9;
    watch.finish(t_fin, r.bytes, r);
    lat_stats(samples, r);
    r.verified = r.verify_errors == 0;
    std::vector<std::uint64_t> counts{k};
    finish_client(ch_, inline_dev(), counts, r, 60'000);
    return r;
}

Result Runner::server_lat() {
    Result r;
    r.verify = p_.verify;
    r.ok = true;
    const std::uint32_t len = p_.op == Op::atomic ? 8u : p_.size;
    DoneMsg d;
    bool have_done = false;
    std::uint64_t k = 0;
    if (p_.op == Op::write || p_.op == Op::send) {
        std::uint8_t* in = ep_.slot(0, 0);
        std::uint8_t* src = ep_.slot(0, 1);
        rc::Cqe c[kPollBatch];
        while (r.ok && !have_done) {
            // Wait for message k (or the end of the run).
            Backoff bo;
            bool arrived = false;
            std::uint32_t spins = 0;
            std::uint32_t rlen = len;
            while (!arrived && r.ok) {
                if (p_.op == Op::write && !imm_lat()) {
                    arrived = load_acquire(in + len - 1) == pattern(0, k, len - 1);
                } else {
                    const std::uint32_t n = dev_.poll_cq(ep_.rcq_, c, 1);
                    if (n) {
                        arrived = true;
                        rlen = c[0].byte_len;
                        if (c[0].status != rc::WcStatus::success) {
                            r.error = status_error(c[0]);
                            ++r.error_cqes;
                            r.ok = false;
                        }
                    }
                }
                if (arrived) break;
                if (!reap_sends(r)) {
                    r.ok = false;
                    break;
                }
                if ((++spins & 4095u) == 0 && ch_.readable()) {
                    if (!wait_done(d, r, 10'000)) r.ok = false;
                    have_done = true;
                    break;
                }
                idle(bo);
            }
            if (!arrived || !r.ok) break;
            if (p_.verify) {
                if (rlen != len) ++r.verify_errors;
                r.verify_errors += check(in, 0, k, len);
            }
            if ((p_.op == Op::send || imm_lat()) && !post_recv(0, k + 1, 0, r)) {
                r.ok = false;
                break;
            }
            if (p_.verify)
                fill(src, 0, k, len);
            else
                src[len - 1] = pattern(0, k, len - 1);
            if (!post(wqe(0, k, 1, 0), 0, r)) {
                r.ok = false;
                break;
            }
            ++k;
        }
        if (!have_done && !wait_done(d, r, 60'000)) r.ok = false;
    } else {
        if (!wait_done(d, r, done_timeout_ms())) r.ok = false;
        k = d.count[0];
        if (r.ok && p_.op == Op::atomic && p_.verify && d.client_ok)
            r.verify_errors += load_u64(ep_.slot(0, 0)) != k;
    }
    r.messages = k;
    r.bytes = k * len;
    r.verified = r.verify_errors == 0;
    if (!d.client_ok && r.error.empty()) r.error = "the client failed";
    r.ok = r.ok && d.client_ok;
    r.peer_verified = true;
    send_verdict(r);
    return r;
}

} // namespace

const char* to_string(Op op) noexcept {
    switch (op) {
    case Op::write:
        return "write";
    case Op::read:
        return "read";
    case Op::send:
        return "send";
    case Op::atomic:
        return "atomic";
    }
    return "?";
}

const char* to_string(Mode m) noexcept {
    return m == Mode::bw ? "bw" : "lat";
}

mrc::MrcAttr mrc_attr(const Params& p, unsigned ports, std::uint32_t path_mtu) noexcept {
    mrc::MrcAttr a; // lib/mrc's defaults: 128 paths, MPR 16 x 128 PSNs, max_wimm 64, ...
    // At most 128 packets in flight: bounds the queues the QP builds in front of the ports (the
    // engine's transmit queues, a memif or PACKET_MMAP ring of 512 - 1024 slots, a shaped plane)
    // in the absence of congestion control, and still covers the round trip of four planes here.
    a.max_inflight = 128;
    // ACK timeout 1.024 us x 2^14 = 16.8 ms: far above any round trip here, short enough that a
    // packet lost with nothing behind it costs little. On shaped planes (--plane-rate) the round
    // trip is the queue in front of the shaper: all 128 packets on one plane (its share after a
    // plane went down, retransmissions queued behind new packets) take 21.5 ms at 0.2 Gb/s with
    // 4 KiB frames, and 16.8 ms then fired on every stall of a descheduled engine, resent the
    // whole window into the same queues and collapsed the run (0.07 Gb/s of 0.6 after a plane
    // went down, 13 timeouts). So the default covers four times that drain.
    std::uint8_t t = 14;
    if (p.plane_rate_gbps > 0) {
        const double frame_bits = (path_mtu + 98.0) * 8; // headers, preamble, gap, FCS
        const double drain_ns = a.max_inflight * frame_bits / p.plane_rate_gbps;
        while (t < mrc::kMaxTimeout &&
               static_cast<double>(1024ull << t) /* 1.024 us x 2^t */ < 4 * drain_ns)
            ++t;
    }
    a.timeout = p.timeout != 0xff ? std::min<std::uint8_t>(p.timeout, mrc::kMaxTimeout) : t;
    // Threads are scheduled, not clocked, and the planes queue independently: a packet may reach
    // the peer milliseconds after one sent later on another plane (a fuller queue, a descheduled
    // thread), far more than a wire reorders. With lib/mrc's 20 us a shaped demo plane saw
    // hundreds of spurious retransmissions and its paths taken out; on a loaded 2-core host (load
    // average 7) 3 ms still sent 12 000 - 14 000 packets again in the demo's 6 s, all of them
    // duplicates at the receiver, and 10 ms 140 - 150. The ACK timeout (16.8 ms) still catches what
    // RACK misses.
    a.reorder_window_ns = 10'000'000;
    // A probe must be answered within the interval, and it queues behind the data of its plane and
    // waits for scheduled threads: at 1 ms, and at 5 ms on a loaded host, paths taken out never
    // came back.
    a.probe_interval_ns = 10'000'000;
    // Loss detection takes paths out (ASSUMED_BAD) on the first loss it sees on them. On a host
    // whose engine threads are descheduled now and then, late packets are far more often the
    // scheduler than a broken path, and a loaded 2-core host had all the paths of two healthy
    // planes taken out within seconds. So loss detection may take out at most one plane's worth
    // of paths (with one plane, all but four); a plane that goes down is announced by its link
    // state (the engine's link check, set_port_admin, the peer's port status) instead. The paths
    // are split over every port of the device and lib/mrc's floor counts the GOOD paths of planes
    // that are down too (ports beyond --planes), so it is set above those.
    const unsigned nports = std::max(1u, ports);
    const unsigned used = std::clamp<unsigned>(p.planes, 1, nports);
    const unsigned per_plane = a.num_evs / nports;
    const unsigned may_go = used > 1 ? per_plane : (per_plane > 4 ? per_plane - 4 : 0);
    a.min_active_evs = static_cast<std::uint16_t>(
        std::max<unsigned>(a.min_active_evs, a.num_evs - std::min<unsigned>(may_go, a.num_evs)));
    return a;
}

void collect_mrc(const Endpoint& ep, Result& r) {
    if (!ep.p_.mrc) return;
    const unsigned n = ep.p_.planes;
    r.planes.assign(n, PlaneFigures{});
    std::array<std::uint64_t, mrc::kNumMrcCounters> sum{};
    for (const rc::Qp* qp : ep.qps_) {
        for (unsigned p = 0; p < n; ++p) {
            const mrc::PlaneStats* ps = mrc::plane_stats(*qp, p);
            if (!ps) continue;
            PlaneFigures& f = r.planes[p];
            f.tx_bytes += ps->tx_bytes.load(std::memory_order_relaxed);
            f.tx_pkts += ps->tx_pkts.load(std::memory_order_relaxed);
            f.retransmits += ps->retransmits.load(std::memory_order_relaxed);
            f.losses += ps->losses.load(std::memory_order_relaxed);
            f.rx_bytes += ps->rx_bytes.load(std::memory_order_relaxed);
            f.rx_pkts += ps->rx_pkts.load(std::memory_order_relaxed);
        }
        if (const mrc::MrcCounters* c = mrc::counters(*qp))
            for (std::size_t i = 0; i < mrc::kNumMrcCounters; ++i)
                sum[i] += (*c)[static_cast<mrc::MrcCounter>(i)];
    }
    if (r.seconds > 0)
        for (PlaneFigures& f : r.planes) {
            f.tx_gbps = static_cast<double>(f.tx_bytes) * 8.0 / (r.seconds * 1e9);
            f.rx_gbps = static_cast<double>(f.rx_bytes) * 8.0 / (r.seconds * 1e9);
        }
    r.mrc.clear();
    for (std::size_t i = 0; i < mrc::kNumMrcCounters; ++i)
        r.mrc.emplace_back(std::string(mrc::kMrcCounterNames[i]), sum[i]);
}

std::unique_ptr<Endpoint> Endpoint::create(Device& dev, const Params& p, bool server,
                                           std::string* err) {
    if (p.mrc && p.op != Op::write) {
        *err = "MRC carries RDMA WRITE only (no READ, SEND or atomics): use --op write";
        return nullptr;
    }
    if (p.mrc && (p.planes < 1 || p.planes > std::min(dev.num_ports(), kMaxPlanes))) {
        *err = std::to_string(p.planes) + " planes asked for; device " + dev.name() + " has " +
               std::to_string(dev.num_ports()) + " port(s)";
        return nullptr;
    }
    std::unique_ptr<Endpoint> ep(new Endpoint(dev, p, server));
    const std::uint32_t msg = p.op == Op::atomic ? 8u : std::max<std::uint32_t>(p.size, 1u);
    ep->slot_bytes_ = (std::max<std::uint32_t>(msg, 8u) + 63u) & ~63u;
    if (p.mode == Mode::lat) {
        ep->slots_ = 2;
    } else {
        const std::uint64_t fit =
            kMaxBufferBytes / (static_cast<std::uint64_t>(ep->slot_bytes_) * p.qps);
        ep->slots_ = static_cast<std::uint32_t>(
            std::max<std::uint64_t>(1, std::min<std::uint64_t>(p.tx_depth, fit)));
    }
    ep->buf_len_ =
        (static_cast<std::uint64_t>(p.qps) * ep->slots_ * ep->slot_bytes_ + 4095u) & ~4095ull;
    // In DPDK's memory when the EAL runs on hugepages: net_memif in zero-copy mode shares only that
    // memory with its peer, so only there can the payload go by reference (drivers/dpdk/README.md).
    if (dpdk::eal_initialized() && rte_eal_has_hugepages()) { // no EAL: uring ports only
        ep->buf_ = static_cast<std::uint8_t*>(rte_malloc("droce-perf", ep->buf_len_, 4096));
        ep->buf_dpdk_ = ep->buf_ != nullptr;
    }
    if (!ep->buf_) ep->buf_ = static_cast<std::uint8_t*>(std::aligned_alloc(4096, ep->buf_len_));
    if (!ep->buf_) {
        *err = "cannot allocate " + std::to_string(ep->buf_len_) + " bytes";
        return nullptr;
    }
    std::memset(ep->buf_, 0, ep->buf_len_);
    if (server && p.op == Op::read)
        for (unsigned q = 0; q < p.qps; ++q)
            for (std::uint32_t s = 0; s < ep->slots_; ++s)
                fill(ep->slot(q, s), q, s, msg);
    if (p.mode == Mode::lat && (p.op == Op::write || p.op == Op::send))
        ep->slot(0, 0)[msg - 1] =
            static_cast<std::uint8_t>(~pattern(0, 0, msg - 1)); // not yet message 0

    int e = 0;
    ep->pd_ = dev.alloc_pd(&e);
    if (!ep->pd_) {
        *err = "alloc_pd: " + std::string(std::strerror(e));
        return nullptr;
    }
    ep->mr_ = dev.reg_mr(ep->pd_, ep->buf_, ep->buf_len_,
                         rc::kAccessLocalWrite | rc::kAccessRemoteWrite | rc::kAccessRemoteRead |
                             rc::kAccessRemoteAtomic,
                         &e);
    if (!ep->mr_) {
        *err = "reg_mr: " + std::string(std::strerror(e));
        return nullptr;
    }
    const std::uint32_t sq =
        std::min(rc::kMaxQpWr, std::bit_ceil(std::max<std::uint32_t>(p.tx_depth, 16) * 2));
    const std::uint32_t rq =
        std::min(rc::kMaxQpWr, std::bit_ceil(std::max<std::uint32_t>(ep->slots_, 16) * 2));
    const std::uint32_t cqe =
        std::min<std::uint32_t>(rc::kMaxCqe, std::bit_ceil((sq + rq) * p.qps));
    ep->scq_ = dev.create_cq(cqe, &e);
    ep->rcq_ = ep->scq_ ? dev.create_cq(cqe, &e) : nullptr;
    if (!ep->rcq_) {
        *err = "create_cq: " + std::string(std::strerror(e));
        return nullptr;
    }
    std::random_device rd;
    for (unsigned q = 0; q < p.qps; ++q) {
        const rc::QpCap cap{sq, rq, 1, 1, 0};
        rc::Qp* qp =
            p.mrc ? dev.create_qp(ep->pd_, ep->scq_, ep->rcq_, cap, false, &e, mrc::kMrcTransport)
                  : dev.create_qp(ep->pd_, ep->scq_, ep->rcq_, cap, false, &e);
        if (!qp) {
            *err = "create_qp: " + std::string(std::strerror(e));
            return nullptr;
        }
        ep->qps_.push_back(qp);
        if (p.mrc) {
            Device::ControlSection cs(dev);
            if (const int ae =
                    mrc::set_attr(*qp, mrc_attr(p, dev.num_ports(),
                                                p.path_mtu ? std::min(p.path_mtu, dev.port(0).mtu)
                                                           : dev.port(0).mtu));
                ae != 0) {
                *err = "mrc::set_attr: " + std::string(std::strerror(ae));
                return nullptr;
            }
        }
        ep->psn_.push_back(rd() & 0xffffffu);
    }
    return ep;
}

Endpoint::~Endpoint() {
    // Ports this endpoint or the plane events took down are given back (the demo runs on).
    if (p_.mrc)
        for (unsigned port = 0; port < dev_.num_ports(); ++port)
            if (!dev_.port_admin_up(port)) (void)dev_.set_port_admin(port, true);
    for (rc::Qp* qp : qps_)
        (void)dev_.destroy_qp(qp);
    (void)dev_.destroy_cq(scq_);
    (void)dev_.destroy_cq(rcq_);
    (void)dev_.dereg_mr(mr_);
    (void)dev_.dealloc_pd(pd_);
    if (buf_dpdk_)
        rte_free(buf_);
    else
        std::free(buf_);
}

QpInfo Endpoint::info(unsigned q) const noexcept {
    QpInfo i;
    i.qpn = qps_[q]->qpn;
    i.psn = psn_[q];
    const wire::Ipv6Addr& gid = dev_.port(0).gid;
    std::memcpy(i.gid, gid.data(), 16);
    i.num_planes = static_cast<std::uint8_t>(std::min(dev_.num_ports(), kMaxPlanes));
    for (unsigned p = 0; p < i.num_planes; ++p)
        std::memcpy(i.plane_gid[p], dev_.port(p).gid.data(), 16);
    i.rkey = mr_->rkey;
    i.va = reinterpret_cast<std::uintptr_t>(buf_);
    i.len = buf_len_;
    return i;
}

std::string Endpoint::connect(const std::vector<QpInfo>& peer, const QpDefaults& defaults,
                              std::uint32_t port_path_mtu) {
    if (peer.size() != qps_.size())
        return "the peer has " + std::to_string(peer.size()) + " QPs, this side " +
               std::to_string(qps_.size());
    peer_ = peer;
    for (const QpInfo& i : peer)
        if (i.len < buf_len_) return "the peer's buffer is smaller than this side's";
    path_mtu_ = std::min(p_.path_mtu ? p_.path_mtu : defaults.path_mtu, port_path_mtu);
    if (p_.mrc)
        for (const QpInfo& i : peer)
            if (i.num_planes < p_.planes)
                return "the peer's device has " + std::to_string(i.num_planes) + " port(s), " +
                       std::to_string(p_.planes) + " planes asked for";
    for (unsigned q = 0; q < qps_.size(); ++q) {
        if (p_.mrc) {
            // The peer's GID on each plane; its MAC from the engine (static neighbour or ARP /
            // ND on that port). Ports beyond the planes used are down for the run (below) and
            // never carry a frame; their entry gets a MAC (this port's own) only so that the QP
            // does not wait for a neighbour no one would answer there.
            std::vector<rc::RemotePlane> rp(dev_.num_ports());
            for (unsigned p = 0; p < rp.size(); ++p) {
                const bool used = p < p_.planes;
                std::memcpy(rp[p].gid.data(), peer[q].plane_gid[used ? p : 0], 16);
                if (!used) rp[p].mac = dev_.port(p).mac;
            }
            if (const int e = dev_.set_remote_planes(qps_[q], rp); e != 0)
                return "set_remote_planes: " + std::string(std::strerror(e));
        }
        RcConnectParams c;
        c.qp_access_flags =
            rc::kAccessRemoteWrite | rc::kAccessRemoteRead | rc::kAccessRemoteAtomic;
        c.path_mtu = rc::mtu_from_bytes(path_mtu_);
        c.dest_qp_num = peer[q].qpn;
        c.rq_psn = peer[q].psn;
        c.max_dest_rd_atomic = static_cast<std::uint8_t>(rc::kMaxRdAtomic);
        c.min_rnr_timer = defaults.min_rnr_timer;
        std::memcpy(c.ah_attr.dgid.data(), peer[q].gid, 16);
        // dmac stays zero: resolved by the engine (static neighbour or ARP / ND)
        c.sq_psn = psn_[q];
        c.timeout = p_.timeout != 0xff ? p_.timeout : defaults.timeout;
        c.retry_cnt = defaults.retry_cnt;
        c.rnr_retry = defaults.rnr_retry;
        c.max_rd_atomic = static_cast<std::uint8_t>(std::max<unsigned>(defaults.max_rd_atomic, 1));
        rc::QpState refused = rc::QpState::rts;
        if (int e = connect_rc(dev_, qps_[q], c, &refused)) {
            const char* to = refused == rc::QpState::init  ? "INIT"
                             : refused == rc::QpState::rtr ? "RTR"
                                                           : "RTS";
            return "modify_qp " + std::string(to) + ": " + std::string(std::strerror(e));
        }
    }
    if (p_.mrc) {
        // Planes beyond the ones asked for: administratively down for the run (no MRC packet
        // takes them; the destructor gives them back).
        for (unsigned p = p_.planes; p < dev_.num_ports(); ++p)
            (void)dev_.set_port_admin(p, false);
    }
    // Receive WQEs: a SEND bandwidth server fills every slot; SEND latency uses slot 0 on both
    // sides, as does an MRC WRITE latency run (WRITE with immediate).
    if (p_.op == Op::send || (p_.mrc && p_.op == Op::write && p_.mode == Mode::lat)) {
        Channel none;
        Runner run(*this, none);
        Result r;
        if (p_.mode == Mode::bw && server_) {
            for (unsigned q = 0; q < qps_.size(); ++q)
                for (std::uint32_t s = 0; s < slots_; ++s)
                    if (!run.post_recv(q, s, s, r)) return r.error;
        } else if (p_.mode == Mode::lat) {
            if (!run.post_recv(0, 0, 0, r)) return r.error;
        }
    }
    return {};
}

Result run_client(Endpoint& ep, const Channel& ch) {
    Runner run(ep, ch);
    return ep.p_.mode == Mode::bw ? run.client_bw() : run.client_lat();
}

Result run_server(Endpoint& ep, const Channel& ch) {
    Runner run(ep, ch);
    const std::uint64_t t0 = run.now();
    Result r = ep.p_.mode == Mode::bw ? run.server_bw() : run.server_lat();
    // The server's time: from its start to the client's end-of-run message.
    if (r.seconds == 0 && run.done_at_ > t0)
        r.seconds = static_cast<double>(run.done_at_ - t0) / 1e9;
    return r;
}

namespace {

std::string exchange(Endpoint& ep, const QpDefaults& defaults, std::uint32_t port_path_mtu,
                     const Channel& ch) {
    SetupMsg mine;
    mine.nqp = static_cast<std::uint32_t>(ep.qps_.size());
    for (unsigned q = 0; q < mine.nqp; ++q)
        mine.qp[q] = ep.info(q);
    if (std::string e = ch.send(&mine, sizeof mine); !e.empty())
        return "sending QP information: " + e;
    SetupMsg theirs;
    if (std::string e = ch.recv(&theirs, sizeof theirs, kHandshakeMs); !e.empty())
        return "receiving QP information: " + e;
    if (theirs.magic != kMagic || theirs.nqp > kMaxQps) return "bad QP information from the peer";
    return ep.connect(std::vector<QpInfo>(theirs.qp, theirs.qp + theirs.nqp), defaults,
                      port_path_mtu);
}

} // namespace

std::unique_ptr<Endpoint> handshake_client(Device& dev, const Params& p, const QpDefaults& defaults,
                                           std::uint32_t port_path_mtu, const Channel& ch,
                                           std::string* err) {
    Hello h;
    h.p = p;
    if (std::string e = ch.send(&h, sizeof h); !e.empty()) {
        *err = "sending the test parameters: " + e;
        return nullptr;
    }
    auto ep = Endpoint::create(dev, p, false, err);
    if (!ep) return nullptr;
    if (std::string e = exchange(*ep, defaults, port_path_mtu, ch); !e.empty()) {
        *err = e;
        return nullptr;
    }
    return ep;
}

std::unique_ptr<Endpoint> handshake_server(Device& dev, Params* p, const QpDefaults& defaults,
                                           std::uint32_t port_path_mtu, const Channel& ch,
                                           std::string* err) {
    Hello h;
    if (std::string e = ch.recv(&h, sizeof h, kHandshakeMs); !e.empty()) {
        *err = "receiving the test parameters: " + e;
        return nullptr;
    }
    if (h.magic != kMagic || h.version != kVersion) {
        *err = "the client is not droce-perf (or another version)";
        return nullptr;
    }
    if (h.p.qps < 1 || h.p.qps > kMaxQps || h.p.size > (1u << 30) ||
        (h.p.mode == Mode::lat && h.p.qps != 1) || static_cast<unsigned>(h.p.op) > 3 ||
        (h.p.mode == Mode::lat && h.p.op == Op::write && h.p.size == 0) || h.p.tx_depth < 1 ||
        h.p.tx_depth > 2048 || (h.p.mrc && h.p.op != Op::write) ||
        (h.p.mrc && (h.p.planes < 1 || h.p.planes > kMaxPlanes))) {
        *err = "the client's parameters are out of range";
        return nullptr;
    }
    const bool json = p->json, progress = p->progress, inl = p->inline_progress;
    *p = h.p;
    p->json = json;
    p->progress = progress;
    p->inline_progress = inl; // per side: the server keeps its own
    p->num_events = 0;        // plane events are the client's
    auto ep = Endpoint::create(dev, *p, true, err);
    if (!ep) return nullptr;
    if (std::string e = exchange(*ep, defaults, port_path_mtu, ch); !e.empty()) {
        *err = e;
        return nullptr;
    }
    return ep;
}

void poll_for(Device& dev, std::uint64_t ns) {
    Clock& clk = dev.clock();
    const std::uint64_t t0 = clk.now_ns();
    std::uint32_t idle = 0;
    while (clk.now_ns() - t0 < ns) {
        if (dev.poll() != 0) {
            idle = 0;
        } else if (++idle >= 256) {
            idle = 0;
            sched_yield();
        }
    }
}

std::uint8_t wait_planes_up(Device& dev, unsigned planes, bool inline_progress,
                            std::uint64_t timeout_ns) {
    const auto want = static_cast<std::uint8_t>((1u << std::min(planes, 8u)) - 1u);
    Clock& clk = dev.clock();
    const std::uint64_t t0 = clk.now_ns();
    while ((dev.ports_up_mask() & want) != want && clk.now_ns() - t0 < timeout_ns) {
        if (inline_progress)
            poll_for(dev, 1'000'000);
        else
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return static_cast<std::uint8_t>(want & ~dev.ports_up_mask());
}

std::string barrier(const Channel& ch, int timeout_ms) {
    const char r = 'R';
    if (std::string e = ch.send(&r, 1); !e.empty()) return "start barrier: " + e;
    char got = 0;
    if (std::string e = ch.recv(&got, 1, timeout_ms); !e.empty()) return "start barrier: " + e;
    return got == 'R' ? std::string() : std::string("start barrier: bad byte");
}

void wait_for_client_exit(Runtime& rt, const Channel& ch) {
    char byte = 0;
    (void)ch.recv(&byte, 1, 10'000); // "peer closed the connection" once the client has exited
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    for (;;) {
        bool up = false;
        for (unsigned port = 0; port < rt.device(0).num_ports(); ++port) {
            const dpdk::EthPort* eth = rt.eth_port(0, port); // null: a uring port
            if (eth && eth->driver_name() == "net_memif" && eth->link_up()) up = true;
        }
        if (!up || std::chrono::steady_clock::now() > until) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50)); // the handler's last steps
}

} // namespace droce::perf
