/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * droce-perf: perftest-shaped bandwidth and latency for RDMA WRITE, READ, SEND and FETCH_ADD over
 * droce devices on DPDK ports.
 *
 *   droce-perf --server -c CONFIG [options]            serve clients on TCP -p PORT until stopped
 *                                                      (SIGINT / SIGTERM; --once: one client)
 *   droce-perf SERVER_ADDR -c CONFIG --op OP [options] run against it
 *   droce-perf --demo [-c config/demo.ini]             two devices in one process, every op
 * verified
 *
 * The client's test parameters are sent to the server, which adopts them (a server needs only
 * --server and -c). QP information travels over TCP as in perftest; the peer's MAC comes from the
 * engine's neighbour resolution. Exit status: 0 when every operation completed (and, with --verify,
 * every byte was right on both sides; a server: in every run it served); 1 otherwise; 2 for usage
 * errors; 128 + N when signal N stopped a run in progress.
 */
#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "config/default_path.h"
#include "dpdk/eal.h"
#include "perf.h"
#include "report.h"
#include "runtime/runtime.h"
#include "sim/impair.h"
#include "telemetry/telemetry.h"

#if !defined(DROCE_DEFAULT_CONFIG) || !defined(DROCE_BUILD_DEFAULT_CONFIG) ||                      \
    !defined(DROCE_BUILD_APPDIR)
#error "meson passes DROCE_DEFAULT_CONFIG, DROCE_BUILD_DEFAULT_CONFIG and DROCE_BUILD_APPDIR"
#endif

namespace droce::perf {
namespace {

/** Transmit rate of each plane in the demo's MRC part (--plane-rate overrides). */
constexpr double kDemoPlaneGbps = 1.0;

struct Cli {
    bool server = false;
    bool once = false; ///< --once: the server serves one client and exits (perftest's way)
    std::string server_addr;
    std::string op = "write";
    std::uint32_t size = 65536;
    std::uint64_t iters = 0;
    double duration = 0;
    bool bw = false, lat = false;
    std::uint32_t qps = 1;
    std::uint32_t mtu = 0;
    std::string config;
    bool verify = false;
    bool json = false;
    std::uint16_t port = 18515;
    std::string impair;
    bool demo = false;
    std::uint32_t tx_depth = 128;
    int timeout = -1;
    unsigned device = 0;
    bool inline_progress = false;
    bool mrc = false;
    unsigned planes = 0;
    std::vector<std::string> plane_down, plane_up;
    bool progress = false;
    double plane_rate = -1;    ///< -1: not given
    std::string capture;       ///< --capture FILE: pcapng of every frame (lib/capture)
    std::uint32_t snaplen = 0; ///< --snaplen N: bytes kept per captured frame; 0 = whole frames
    std::string demo_capture;  ///< --demo-capture FILE: the demo's short captured scene
};

/** "K@SECONDS" → event; empty on success, else the reason. */
std::string parse_plane_event(const std::string& s, bool up, PlaneEvent* ev) {
    const std::size_t at = s.find('@');
    if (at == std::string::npos || at == 0 || at + 1 == s.size())
        return "\"" + s + "\": expected PLANE@SECONDS, e.g. 2@3.0";
    char* end = nullptr;
    const unsigned long k = std::strtoul(s.c_str(), &end, 10);
    if (end != s.c_str() + at || k >= kMaxPlanes)
        return "\"" + s + "\": the plane is 0.." + std::to_string(kMaxPlanes - 1);
    const double t = std::strtod(s.c_str() + at + 1, &end);
    if (*end != '\0' || !(t >= 0) || t > 86400)
        return "\"" + s + "\": the time is seconds into the run (0..86400)";
    ev->plane = static_cast<std::uint8_t>(k);
    ev->at_s = t;
    ev->up = up;
    return {};
}

CounterSnapshot delta(const CounterSnapshot& after, const CounterSnapshot& before) {
    CounterSnapshot d;
    for (std::size_t i = 0; i < kNumCounters; ++i)
        d.v[i] = after.v[i] - before.v[i];
    // A gauge is reported as it stands at the end, not as a difference.
    const auto gauge = static_cast<std::size_t>(Counter::rp_current_rate_mbps);
    d.v[gauge] = after.v[gauge];
    return d;
}

std::vector<std::pair<std::string, std::uint64_t>> impair_delta(const sim::LinkStats& after,
                                                                const sim::LinkStats& before) {
    std::vector<std::pair<std::string, std::uint64_t>> v;
    for (std::size_t i = 0; i < sim::kNumLinkCounters; ++i)
        v.emplace_back(std::string(sim::to_string(static_cast<sim::LinkCounter>(i))),
                       after.v[i] - before.v[i]);
    return v;
}

sim::LinkStats stage_stats(Runtime& rt, unsigned dev) {
    sim::LinkStats s;
    for (unsigned p = 0; p < rt.device(dev).num_ports(); ++p)
        if (sim::ImpairedPort* st = rt.impair_stage(dev, p))
            for (std::size_t i = 0; i < sim::kNumLinkCounters; ++i)
                s.v[i] += st->stats().v[i];
    return s;
}

bool passed(const Params& p, const Result& r) {
    return r.ok && (!p.verify || (r.verified && r.peer_verified));
}

/** A wait after a run so that ACKs in flight land before the engines stop and the QPs go away. */
void settle() {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

// ---------------------------------------------------------------------------------------------
// Stopping: SIGINT / SIGTERM / SIGHUP

/**
 * Signals are blocked in every thread (main blocks them before the EAL and the engines start, and
 * threads inherit the mask) and taken by one watcher thread with sigwait(), so no handler runs in
 * the middle of the datapath. The watcher tells the main thread through g_stop_fd (a server waiting
 * for a client returns at once and tears everything down as on a normal exit); when the main
 * thread is in a run and does not finish within kStopGrace, the watcher removes what would outlive
 * the process (the EAL runtime directory, hugepage files) and exits with 128 + the signal.
 */
int g_stop_fd = -1;
std::atomic<int> g_stop_signal{0};
std::atomic<bool> g_main_done{false};
constexpr auto kStopGrace = std::chrono::milliseconds(1500);

void block_stop_signals(sigset_t* set) {
    sigemptyset(set);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGTERM);
    sigaddset(set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, set, nullptr);
}

void start_stop_watcher() {
    static sigset_t set;
    block_stop_signals(&set);
    g_stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    std::thread([] {
        int sig = 0;
        if (sigwait(&set, &sig) != 0) return;
        g_stop_signal.store(sig, std::memory_order_release);
        const std::uint64_t one = 1;
        if (g_stop_fd >= 0) (void)!write(g_stop_fd, &one, sizeof one);
        const auto until = std::chrono::steady_clock::now() + kStopGrace;
        while (std::chrono::steady_clock::now() < until) {
            if (g_main_done.load(std::memory_order_acquire)) return;
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        std::fprintf(stderr, "droce-perf: %s during a run: stopped without finishing it\n",
                     strsignal(sig));
        dpdk::release_files_on_exit();
        telemetry::remove_socket_dir_on_signal();
        _exit(128 + sig);
    }).detach();
}

bool stop_requested() noexcept {
    return g_stop_signal.load(std::memory_order_acquire) != 0;
}

// ---------------------------------------------------------------------------------------------
// Two processes

/** One client served (server) or one run against the server (client), on channel @p ch. */
int run_one(const Cli& cli, Params p, Runtime& rt_ref, Channel& ch);

int run_remote(const Cli& cli, Params p) {
    RuntimeOptions ro;
    ro.impair_spec = cli.impair;
    ro.devices = {cli.device};
    ro.capture_path = cli.capture;
    ro.capture_snaplen = cli.snaplen;
    ro.tx_shaper = cli.plane_rate > 0;
    ro.tx_rate_gbps = cli.plane_rate;
    // Inline progress: this thread polls and never naps on a port's receive interrupt, so uring
    // ports may hand over completions without interrupting it (drivers/uring TaskRun::coop).
    ro.uring_coop_taskrun = p.inline_progress;
    std::string err;
    auto rt = Runtime::create(cli.config, ro, &err);
    if (!rt) {
        std::fprintf(stderr, "droce-perf: %s\n", err.c_str());
        return 1;
    }
    Device& dev = rt->device(0);
    const DeviceConfig& dc = rt->device_config(0);
    if (p.mrc && !cli.server) {
        // The client decides the planes (the server adopts them): all ports unless --planes.
        const unsigned ports = std::min(dev.num_ports(), kMaxPlanes);
        if (cli.planes > ports) {
            std::fprintf(stderr, "droce-perf: --planes %u: device %s has %u port(s)\n", cli.planes,
                         dc.name.c_str(), dev.num_ports());
            return 2;
        }
        p.planes = static_cast<std::uint8_t>(cli.planes ? cli.planes : ports);
        for (unsigned i = 0; i < p.num_events; ++i)
            if (p.events[i].plane >= p.planes) {
                std::fprintf(stderr, "droce-perf: --plane-%s %u@%g: the run uses planes 0..%u\n",
                             p.events[i].up ? "up" : "down", p.events[i].plane, p.events[i].at_s,
                             p.planes - 1u);
                return 2;
            }
    }
    if (!cli.server) {
        Channel ch = tcp_connect(cli.server_addr, cli.port, 30'000, &err);
        if (!ch.valid()) {
            std::fprintf(stderr, "droce-perf: %s\n", err.c_str());
            return 1;
        }
        return run_one(cli, p, *rt, ch);
    }
    int rc = 0;
    for (unsigned served = 0;; ++served) {
        // On stderr, so that --json keeps stdout for the one object; scripts wait for this line.
        std::fprintf(stderr, "droce-perf: waiting for a client on TCP port %u (device %s)%s\n",
                     cli.port, dc.name.c_str(),
                     cli.once ? ""
                     : served ? "; Ctrl-C stops"
                              : "; serving until stopped (Ctrl-C)");
        Channel ch = tcp_accept_one(cli.port, cli.once ? 600'000 : -1, &err, g_stop_fd);
        if (!ch.valid()) {
            if (err == kStopped) {
                std::fprintf(stderr, "droce-perf: stopped (%s) after %u client(s)\n",
                             strsignal(g_stop_signal.load()), served);
                break;
            }
            std::fprintf(stderr, "droce-perf: %s\n", err.c_str());
            return 1;
        }
        const int r = run_one(cli, p, *rt, ch);
        if (r != 0) rc = r;
        if (cli.once || stop_requested()) break;
    }
    return rc;
}

int run_one(const Cli& cli, Params p, Runtime& rt_ref, Channel& ch) {
    std::string err;
    Runtime* rt = &rt_ref;
    Device& dev = rt->device(0);
    const DeviceConfig& dc = rt->device_config(0);
    const std::uint32_t port_mtu = rt->max_path_mtu(0, 0);
    auto ep = cli.server ? handshake_server(dev, &p, dc.qp, port_mtu, ch, &err)
                         : handshake_client(dev, p, dc.qp, port_mtu, ch, &err);
    if (!ep) {
        std::fprintf(stderr, "droce-perf: %s\n", err.c_str());
        return 1;
    }
    const CounterSnapshot before = dev.total_counters();
    const sim::LinkStats st_before = stage_stats(*rt, 0);
    // Inline progress: no engine thread; run_client / run_server poll the device in every wait.
    // Nothing is in flight during the barrier, so it may block without polling.
    if (!p.inline_progress && !rt->start_engines(EngineMode::per_device)) {
        std::fprintf(stderr, "droce-perf: cannot start the engine thread\n");
        return 1;
    }
    // Whatever way this run ends, the engines stop before the QPs go (ep is destroyed after
    // this): a server's next client starts them again.
    struct EnginesStop {
        Runtime* rt;
        ~EnginesStop() { rt->stop_engines(); }
    } engines_stop{rt};
    if (p.mrc) {
        // A plane whose link is still down after this starts the run down (the engine sprays
        // over the others) and its coming up is reported as an event of the run.
        if (const std::uint8_t down =
                wait_planes_up(dev, p.planes, p.inline_progress, 5'000'000'000);
            down != 0) {
            std::string list;
            for (unsigned i = 0; i < 8; ++i)
                if (down & (1u << i)) list += (list.empty() ? "" : " ") + std::to_string(i);
            std::fprintf(stderr,
                         "droce-perf: plane(s) %s: link not up after 5 s; starting without\n",
                         list.c_str());
        }
    }
    if (err = barrier(ch, 30'000); !err.empty()) {
        std::fprintf(stderr, "droce-perf: %s\n", err.c_str());
        return 1;
    }
    std::vector<QpInfo> local, remote;
    for (unsigned q = 0; q < p.qps; ++q) {
        local.push_back(ep->info(q));
        remote.push_back(ep->peer_[q]);
    }
    if (!cli.json) {
        print_header(stdout, p, cli.server, dc.name, ep->path_mtu(), local, remote);
        if (!cli.server) print_table_head(stdout, p.mode);
    }
    Result r = cli.server ? run_server(*ep, ch) : run_client(*ep, ch);
    if (p.inline_progress)
        poll_for(dev, 20'000'000); // as settle(), but this thread is the engine
    else
        settle();
    rt->stop_engines();
    collect_mrc(*ep, r);
    r.counters = delta(dev.total_counters(), before);
    if (!cli.impair.empty()) r.impair = impair_delta(stage_stats(*rt, 0), st_before);
    if (cli.json) {
        std::printf("%s\n", to_json(p, r, cli.server, dc.name, ep->path_mtu()).dump(2).c_str());
    } else {
        if (!cli.server)
            print_table_row(stdout, p, r);
        else
            std::printf(" %" PRIu64 " messages of %u bytes on %u QP(s)\n", r.messages,
                        p.op == Op::atomic ? 8u : p.size, p.qps);
        print_footer(stdout, p, r, cli.server);
    }
    std::fflush(stdout);
    if (cli.server) wait_for_client_exit(*rt, ch);
    ep.reset();
    return passed(p, r) ? 0 : 1;
}

// ---------------------------------------------------------------------------------------------
// The demo: two devices in one process

struct PairResult {
    Result client, server;
    bool ok = false;
};

/** One run between device 0 (client) and device 1 (server) of @p rt. */
PairResult run_pair(Runtime& rt, const Params& p) {
    PairResult pr;
    std::string err;
    Device& a = rt.device(0);
    Device& b = rt.device(1);
    auto ca = Endpoint::create(a, p, false, &err);
    auto sb = ca ? Endpoint::create(b, p, true, &err) : nullptr;
    if (!sb) {
        pr.client.error = err;
        return pr;
    }
    std::vector<QpInfo> ia, ib;
    for (unsigned q = 0; q < p.qps; ++q) {
        ia.push_back(ca->info(q));
        ib.push_back(sb->info(q));
    }
    const std::uint32_t mtu = std::min(rt.max_path_mtu(0, 0), rt.max_path_mtu(1, 0));
    if (err = ca->connect(ib, rt.device_config(0).qp, mtu); err.empty())
        err = sb->connect(ia, rt.device_config(1).qp, mtu);
    if (!err.empty()) {
        pr.client.error = err;
        return pr;
    }
    Channel cch, sch;
    if (!channel_pair(&cch, &sch, &err)) {
        pr.client.error = err;
        return pr;
    }
    const CounterSnapshot before = a.total_counters();
    const CounterSnapshot before_b = b.total_counters();
    const sim::LinkStats st_a = stage_stats(rt, 0), st_b = stage_stats(rt, 1);
    if (!rt.start_engines(EngineMode::shared)) {
        pr.client.error = "cannot start the engine thread";
        return pr;
    }
    std::thread server([&] { pr.server = run_server(*sb, sch); });
    pr.client = run_client(*ca, cch);
    server.join();
    settle();
    rt.stop_engines();
    collect_mrc(*ca, pr.client);
    collect_mrc(*sb, pr.server);
    // The demo's counter table: what both engines did (client + server side).
    const CounterSnapshot ac = delta(a.total_counters(), before),
                          bc = delta(b.total_counters(), before_b);
    for (std::size_t i = 0; i < kNumCounters; ++i)
        pr.client.counters.v[i] = ac.v[i] + bc.v[i];
    const sim::LinkStats sa = stage_stats(rt, 0), sb2 = stage_stats(rt, 1);
    sim::LinkStats sum, base;
    for (std::size_t i = 0; i < sim::kNumLinkCounters; ++i) {
        sum.v[i] = sa.v[i] + sb2.v[i];
        base.v[i] = st_a.v[i] + st_b.v[i];
    }
    pr.client.impair = impair_delta(sum, base);
    pr.ok = passed(p, pr.client) && pr.server.ok && (!p.verify || pr.server.verified);
    return pr;
}

std::uint64_t impair_value(const Result& r, const char* name) {
    for (const auto& [n, v] : r.impair)
        if (n == name) return v;
    return 0;
}

/** Shapes every port of both demo devices to @p gbps (0 = unlimited). Engines stopped. */
void set_demo_plane_rate(Runtime& rt, double gbps) {
    for (unsigned d = 0; d < 2; ++d)
        for (unsigned port = 0; port < rt.device(d).num_ports(); ++port)
            if (TxShaper* sh = rt.shaper(d, port)) sh->set_rate(gbps);
}

/**
 * The MRC part of the demo: one MRC QP over every plane of the demo's devices, 64 KiB WRITEs with
 * every byte checked, each plane shaped to a link rate (so that the planes, not the CPU, bound the
 * total), one plane cut a third into the run. @return true when it passed.
 */
bool run_mrc_demo(Runtime& rt, const Cli& cli) {
    Device& a = rt.device(0);
    const unsigned planes = std::min({a.num_ports(), rt.device(1).num_ports(), kMaxPlanes});
    const double rate = cli.plane_rate >= 0 ? cli.plane_rate : kDemoPlaneGbps;
    const double run_s = cli.duration > 0 ? cli.duration : 6.0;
    const double cut_s = run_s / 3;
    const unsigned cut = planes > 2 ? 2u : planes - 1u;
    if (planes < 2) {
        std::printf(
            "\nMRC: skipped (the config's devices have %u plane(s); it needs two or more)\n",
            planes);
        return true;
    }
    set_demo_plane_rate(rt, rate);
    Params p;
    p.mrc = true;
    p.planes = static_cast<std::uint8_t>(planes);
    p.op = Op::write;
    p.mode = Mode::bw;
    p.size = 65536;
    p.duration_s = run_s;
    p.tx_depth = 64;
    p.verify = true;
    p.progress = true;
    p.num_events = 1;
    p.events[0] = PlaneEvent{cut_s, static_cast<std::uint8_t>(cut), false};
    std::printf("\nMRC (multipath reliable connection): one QP sprayed over the %u planes, 64 KiB "
                "RDMA WRITEs for %.0f s,\nevery byte checked.",
                planes, run_s);
    if (rate > 0)
        std::printf(" Each plane's transmit is shaped to %.1f Gb/s, as a link of that speed\n"
                    "would be, so that the planes, not this host's CPU, bound the run.",
                    rate);
    std::printf("\nAt %.1f s plane %u is cut (Device::set_port_admin(%u, false) on %s, as a pulled "
                "cable):\nthe QP has to carry on over the other planes, without an error.\n",
                cut_s, cut, cut, rt.device_config(0).name.c_str());
    const PairResult pr = run_pair(rt, p);
    set_demo_plane_rate(rt, 0);
    const Result& c = pr.client;
    std::printf("\n");
    const Phase* before = nullptr;
    const Phase* after = nullptr;
    for (const Phase& ph : c.phases)
        (ph.after == "start" ? before : after) = &ph;
    auto phase_line = [&](const char* what, const Phase* ph) {
        if (!ph) return;
        std::printf(" %-15s %4.1f - %4.1f s: %6.2f Gb/s completed; per plane [Gb/s]", what,
                    ph->from_s, ph->to_s, ph->gbps);
        for (std::size_t i = 0; i < ph->plane_gbps.size(); ++i)
            std::printf("%s%5.2f", i ? " + " : " ", ph->plane_gbps[i]);
        if (ph == after && before && before->gbps > 0)
            std::printf("   (%.0f %% of before)", 100.0 * ph->gbps / before->gbps);
        std::printf("\n");
    };
    phase_line("before the cut", before);
    phase_line("after the cut", after);
    for (const std::string& line : mrc_story(c))
        std::printf(" %s\n", line.c_str());
    std::uint64_t dups = 0, rtx = 0;
    for (const auto& [name, v] : pr.server.mrc)
        if (name == "dup_pkts_rcvd") dups = v;
    for (const auto& [name, v] : c.mrc)
        if (name == "retransmits") rtx = v;
    if (rtx)
        std::printf(" %" PRIu64 " of them reached %s twice (dup_pkts_rcvd: the first copy got "
                    "through after all), placed once\n",
                    std::min(dups, rtx), rt.device_config(1).name.c_str());
    std::printf(" data            : %s (%" PRIu64 " messages of 64 KiB, %" PRIu64 " differences)\n",
                pr.ok ? "verified, every byte"
                      : ("FAILED: " + (c.error.empty() ? pr.server.error : c.error)).c_str(),
                c.messages, c.verify_errors);
    auto counters_line = [](const char* who, const std::string& dev, const Result& r,
                            std::initializer_list<const char*> names) {
        std::printf(" %-15s ", (std::string(who) + " " + dev).c_str());
        int shown = 0;
        for (const char* n : names)
            for (const auto& [name, v] : r.mrc)
                if (name == n) std::printf("%s%s %" PRIu64, shown++ ? ", " : "", n, v);
        std::printf("\n");
    };
    std::printf(" MRC counters (lib/mrc, per QP; the device's counter registry lists them under "
                "qp/0x.../mrc):\n");
    counters_line("sender", rt.device_config(0).name, c,
                  {"data_pkts_sent", "retransmits", "retransmit_rack", "retransmit_timeout",
                   "sacks_rcvd", "ev_assumed_bad", "ev_restored", "port_status_sent", "no_path"});
    counters_line(
        "receiver", rt.device_config(1).name, pr.server,
        {"sacks_sent", "ooo_pkts_rcvd", "dup_pkts_rcvd", "port_status_rcvd", "port_status_sent"});
    std::printf(
        "\n How to read it: the sender sprays packets over every plane in turn; the receiver "
        "places each one\n where it belongs whatever the order it came in (ooo_pkts_rcvd: past a "
        "hole) and acknowledges them\n selectively (SACKs). When plane %u goes down the engine "
        "takes it out of the QP's path set: new\n packets go to the other planes only, the "
        "packets in flight on it are declared lost and sent again\n on the others, and a port "
        "status message (port_status_sent / _rcvd) tells the receiver, whose SACKs\n then "
        "avoid plane %u too. Nothing waits for a timeout and no work request fails. A packet "
        "sent\n "
        "again that the receiver already had (dup_pkts_rcvd) is placed once: the packets in "
        "flight on plane %u\n at the cut still got through its ring, the cut being %s's own "
        "decision. Beyond those,\n retransmissions are packets that were late, not lost: on a "
        "busy host a packet can wait behind a\n descheduled thread for longer than the reorder "
        "window; loss detection then also takes its path out\n for a while (ev_assumed_bad) until "
        "probes bring it back (ev_restored).\n",
        cut, cut, cut, rt.device_config(0).name.c_str());
    return pr.ok && c.error_cqes == 0;
}

/** Sets the impairment stages of both demo devices to drop @p loss of the frames they send. */
void set_demo_loss(Runtime& rt, double loss) {
    for (unsigned d = 0; d < 2; ++d)
        for (unsigned port = 0; port < rt.device(d).num_ports(); ++port)
            if (sim::ImpairedPort* st = rt.impair_stage(d, port)) {
                sim::ImpairConfig c = st->config();
                c.link.loss = loss;
                st->set_config(c); // engines are stopped between runs: this thread may call it
            }
}

/**
 * The demo's captured scene (--demo-capture FILE): two short runs small enough to read frame by
 * frame, written to FILE whole: RC RDMA WRITEs of 16 KiB with 2 % loss (sequence NAKs, go-back-N,
 * perhaps a timeout), then one MRC QP over every plane, 16 KiB WRITEs two at a time, each plane
 * shaped to 0.02 Gb/s, plane 2 cut 0.25 s into a 0.6 s run (a few MB in all). Few packets in flight
 * on purpose: at these link rates a full window would wait in the shaper longer than the ACK
 * timeout, and the scene would show timeouts instead of the plane's death. droce-trace explains it
 * (`droce-trace explain FILE --html PAGE`; ./droce demo does that). @return true when both runs
 * passed and the file was written whole.
 */
bool run_demo_capture(Runtime& rt, const std::string& path) {
    capture::CaptureOptions co;
    co.comment = "droce demo: RC WRITEs with 2% loss, then MRC over every plane with plane 2 cut";
    if (std::string e = rt.start_capture(path, co); !e.empty()) {
        std::printf("\nCaptured scene: %s\n", e.c_str());
        return false;
    }
    set_demo_loss(rt, 0.02);
    Params rc;
    rc.op = Op::write;
    rc.mode = Mode::bw;
    rc.size = 16384;
    rc.iters = 50;
    rc.tx_depth = 8;
    rc.verify = true;
    rc.timeout = 12;
    const PairResult r1 = run_pair(rt, rc);
    set_demo_loss(rt, 0);
    bool ok = r1.ok;
    const unsigned planes =
        std::min({rt.device(0).num_ports(), rt.device(1).num_ports(), kMaxPlanes});
    bool mrc_ok = true;
    if (planes >= 3) {
        set_demo_plane_rate(rt, 0.02);
        Params m;
        m.mrc = true;
        m.planes = static_cast<std::uint8_t>(planes);
        m.op = Op::write;
        m.mode = Mode::bw;
        m.size = 16384;
        m.duration_s = 0.6;
        m.tx_depth = 2;
        m.verify = true;
        m.num_events = 1;
        m.events[0] = PlaneEvent{0.25, 2, false};
        const PairResult r2 = run_pair(rt, m);
        set_demo_plane_rate(rt, 0);
        mrc_ok = r2.ok && r2.client.error_cqes == 0;
    }
    ok = ok && mrc_ok;
    const capture::CaptureStats cs = rt.stop_capture(false);
    std::printf("\nCaptured scene: RC WRITEs of 16 KiB with 2%% loss (%s), then MRC over %u planes "
                "with plane 2 cut (%s),\n %" PRIu64 " frames in %s%s\n",
                r1.ok ? "verified" : "FAILED", planes,
                planes < 3 ? "skipped: fewer than 3 planes"
                : mrc_ok   ? "verified"
                           : "FAILED",
                cs.frames, path.c_str(),
                cs.dropped || cs.error ? " (INCOMPLETE: frames dropped or a write failed)" : "");
    return ok && cs.dropped == 0 && cs.error == 0;
}

int run_demo(const Cli& cli) {
    // The build tree's droce-perf takes the source tree's config/demo.ini, an installed one
    // <sysconfdir>/droce/demo.ini: which one this is shows in where the program file lies.
    std::error_code ec;
    const std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
    const std::string cfg =
        cli.config.empty() ? default_config_path(self.c_str(), DROCE_BUILD_APPDIR,
                                                 DROCE_BUILD_DEFAULT_CONFIG, DROCE_DEFAULT_CONFIG)
                           : cli.config;
    RuntimeOptions ro;
    ro.impair_spec =
        cli.impair.empty() ? "loss=0,seed=11" : cli.impair; // a stage on every port, idle for now
    ro.devices = {0, 1};
    ro.capture_path = cli.capture; // both devices, one file
    ro.capture_snaplen = cli.snaplen;
    ro.tx_shaper = true; // unlimited until the MRC part
    ro.tx_rate_gbps = 0;
    std::string err;
    const auto t_start = std::chrono::steady_clock::now();
    auto rt = Runtime::create(cfg, ro, &err);
    if (!rt) {
        std::fprintf(stderr, "droce-perf --demo: %s\n", err.c_str());
        return 1;
    }
    const std::uint32_t mtu = std::min(rt->max_path_mtu(0, 0), rt->max_path_mtu(1, 0));
    std::printf(
        "droce demo: devices %s and %s in one process, joined by %u planes of DPDK ring-pair "
        "ports\n"
        "            (%s, ...), path MTU %u; one engine thread polls both,\n"
        "            and every byte of every transfer is checked. RC first (one QP on plane 0),\n"
        "            then MRC (one QP sprayed over every plane).\n\n",
        rt->device_config(0).name.c_str(), rt->device_config(1).name.c_str(),
        rt->device(0).num_ports(), rt->device_config(0).ports[0].devargs.c_str(), mtu);
    bool all_ok = true;
    const std::uint32_t sizes[] = {64, 4096, 65536};
    const Op ops[] = {Op::write, Op::read, Op::send};
    auto bw_iters = [](std::uint32_t s) -> std::uint64_t {
        return s <= 64 ? 4000 : s <= 4096 ? 2000 : 400;
    };
    auto lat_iters = [](std::uint32_t s) -> std::uint64_t {
        return s <= 64 ? 200 : s <= 4096 ? 100 : 50;
    };

    std::printf("Bandwidth (%u QP, %u outstanding)\n", 1u, 64u);
    std::printf(" %-7s %-8s %-11s %-16s %-19s %-14s %s\n", "op", "#bytes", "#iterations",
                "BW peak[Gb/sec]", "BW average[Gb/sec]", "MsgRate[Mpps]", "data");
    for (Op op : ops)
        for (std::uint32_t s : sizes) {
            Params p;
            p.op = op;
            p.mode = Mode::bw;
            p.size = s;
            p.iters = bw_iters(s);
            p.tx_depth = 64;
            p.verify = true;
            const PairResult pr = run_pair(*rt, p);
            all_ok = all_ok && pr.ok;
            std::printf(
                " %-7s %-8u %-11" PRIu64 " %-16.2f %-19.2f %-14.6f %s\n", to_string(op), s,
                pr.client.messages, pr.client.bw_peak_gbps, pr.client.bw_avg_gbps,
                pr.client.msg_rate_mpps,
                pr.ok ? "verified"
                      : ("FAILED: " + (pr.client.error.empty() ? pr.server.error : pr.client.error))
                            .c_str());
            std::fflush(stdout);
        }
    std::printf(
        "\nLatency (write and send: half round trip of a ping-pong; read: full round trip)\n");
    std::printf(" %-7s %-8s %-11s %-12s %-16s %-12s %-12s %-14s %s\n", "op", "#bytes",
                "#iterations", "t_min[usec]", "t_typical[usec]", "t_avg[usec]", "t_max[usec]",
                "99%[usec]", "data");
    for (Op op : ops)
        for (std::uint32_t s : sizes) {
            Params p;
            p.op = op;
            p.mode = Mode::lat;
            p.size = s;
            p.iters = lat_iters(s);
            p.verify = true;
            const PairResult pr = run_pair(*rt, p);
            all_ok = all_ok && pr.ok;
            std::printf(
                " %-7s %-8u %-11" PRIu64 " %-12.2f %-16.2f %-12.2f %-12.2f %-14.2f %s\n",
                to_string(op), s, pr.client.messages, pr.client.t_min, pr.client.t_typical,
                pr.client.t_avg, pr.client.t_max, pr.client.t_p99,
                pr.ok ? "verified"
                      : ("FAILED: " + (pr.client.error.empty() ? pr.server.error : pr.client.error))
                            .c_str());
            std::fflush(stdout);
        }

    // Loss: 1 % of the frames each device transmits are dropped by the impairment stage.
    set_demo_loss(*rt, 0.01);
    std::printf("\nWith 1%% loss injected on both devices' transmit side (impairment stage), 64 "
                "KiB messages:\n");
    std::printf(" %-6s %-10s %-8s %-8s %-9s %-9s %-11s %-10s %-12s %-12s %s\n", "op", "BW",
                "frames", "retrans", "seq NAKs", "seq NAKs", "out_of_seq", "duplicate", "local_ack",
                "implied_nak", "data");
    std::printf(" %-6s %-10s %-8s %-8s %-9s %-9s %-11s %-10s %-12s %-12s %s\n", "", "[Gb/sec]",
                "dropped", "pkts", "sent", "received", "(resp.)", "request", "timeout_err",
                "seq_err", "");
    for (Op op : {Op::write, Op::read}) {
        Params p;
        p.op = op;
        p.mode = Mode::bw;
        p.size = 65536;
        p.iters = 400;
        p.tx_depth = 64;
        p.verify = true;
        p.timeout = 12; // 16.8 ms: a lost last packet costs one timeout
        const PairResult pr = run_pair(*rt, p);
        all_ok = all_ok && pr.ok;
        const CounterSnapshot& c = pr.client.counters;
        std::printf(
            " %-6s %-10.2f %-8" PRIu64 " %-8" PRIu64 " %-9" PRIu64 " %-9" PRIu64 " %-11" PRIu64
            " %-10" PRIu64 " %-12" PRIu64 " %-12" PRIu64 " %s\n",
            to_string(op), pr.client.bw_avg_gbps, impair_value(pr.client, "dropped_loss"),
            c[Counter::retransmitted_pkts], c[Counter::seq_naks_sent], c[Counter::packet_seq_err],
            c[Counter::out_of_sequence], c[Counter::duplicate_request],
            c[Counter::local_ack_timeout_err], c[Counter::implied_nak_seq_err],
            pr.ok ? "verified"
                  : ("FAILED: " + (pr.client.error.empty() ? pr.server.error : pr.client.error))
                        .c_str());
        std::fflush(stdout);
    }
    std::printf("\n How to read it: a lost data packet makes the responder see a later PSN "
                "(out_of_seq) and answer\n"
                " with a PSN-sequence NAK; the requester goes back to the NAK PSN and sends again "
                "(retrans). A lost\n"
                " READ response is noticed by the requester itself (implied_nak_seq_err). Losses "
                "with nothing behind\n"
                " them (the last packet, a lost ACK) end in a local ACK timeout. duplicate_request "
                "counts packets the\n"
                " responder had already placed: re-ACKed, not placed twice.\n");
    // Loss off again for the MRC part.
    set_demo_loss(*rt, 0);
    all_ok = run_mrc_demo(*rt, cli) && all_ok;
    if (!cli.demo_capture.empty()) all_ok = run_demo_capture(*rt, cli.demo_capture) && all_ok;
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
    std::printf("\ndroce demo: %s (%.1f s)\n", all_ok ? "PASS, all data verified" : "FAIL", secs);
    return all_ok ? 0 : 1;
}

int run(const Cli& cli);

} // namespace
} // namespace droce::perf

int main(int argc, char** argv) {
    using namespace droce::perf;
    Cli cli;
    CLI::App app{"droce-perf: RDMA bandwidth and latency over droce (perftest-shaped)",
                 "droce-perf"};
    app.set_version_flag("--version", "droce-perf (droce) " DROCE_VERSION);
    app.add_flag("--server", cli.server,
                 "serve clients (each sends its test parameters) until stopped (SIGINT/SIGTERM)");
    app.add_flag("--once", cli.once, "with --server: serve one client, then exit (perftest's way)");
    app.add_option("server_addr", cli.server_addr, "the server's host name or address (client)");
    app.add_option("--op", cli.op, "write | read | send | atomic (fetch_add)")
        ->check(CLI::IsMember({"write", "read", "send", "atomic"}));
    app.add_option("-s,--size", cli.size, "message size in bytes, 0 included (atomic: 8)")
        ->check(CLI::Range(0u, 1u << 30));
    auto* n_opt =
        app.add_option("-n,--iters", cli.iters, "messages per QP (default: bw 5000, lat 1000)");
    auto* d_opt = app.add_option("-D,--duration", cli.duration, "run for this many seconds instead")
                      ->check(CLI::Range(0.1, 86400.0));
    n_opt->excludes(d_opt);
    auto* bw_opt = app.add_flag("--bw", cli.bw, "bandwidth (default)");
    app.add_flag("--lat", cli.lat, "latency")->excludes(bw_opt);
    app.add_option("-q,--qps", cli.qps, "QPs (bandwidth)")->check(CLI::Range(1u, kMaxQps));
    app.add_option("--mtu", cli.mtu, "path MTU in bytes (256..4096; default from the config)")
        ->check(CLI::IsMember({256u, 512u, 1024u, 2048u, 4096u}));
    app.add_option("-c,--config", cli.config, "droce config file");
    app.add_flag("--verify", cli.verify, "check every byte (and every atomic result)");
    app.add_flag("--json", cli.json, "print one JSON object instead of tables");
    app.add_option("-p,--port", cli.port, "TCP port of the out-of-band exchange");
    app.add_option("--impair", cli.impair,
                   "impairment stage on this side's ports, e.g. loss=0.01,seed=3");
    app.add_flag("--demo", cli.demo,
                 "two devices in one process (config/demo.ini): every op, verified, then 1% loss");
    app.add_option("-t,--tx-depth", cli.tx_depth, "outstanding messages per QP (bandwidth)")
        ->check(CLI::Range(1u, 2048u));
    app.add_option("--timeout", cli.timeout,
                   "QP local ACK timeout code (4.096 us << T; default from the config)")
        ->check(CLI::Range(0, 31));
    app.add_option("--device", cli.device, "which device of the config file (0-based)");
    app.add_flag("--inline-progress", cli.inline_progress,
                 "no engine thread: the application thread polls the device while it waits "
                 "(one busy thread per process; per side)");
    app.add_flag("--mrc", cli.mrc,
                 "MRC QPs (one QP sprayed over every plane) instead of RC: WRITE bw and lat only");
    app.add_option("--planes", cli.planes,
                   "MRC: use the device's first N ports as planes (default: all of them)")
        ->check(CLI::Range(1u, kMaxPlanes));
    app.add_option("--plane-down", cli.plane_down,
                   "MRC client: K@SECONDS, take plane K out (Device::set_port_admin) that far into "
                   "the run; repeatable")
        ->take_all();
    app.add_option("--plane-up", cli.plane_up,
                   "MRC client: K@SECONDS, give plane K back that far into the run; repeatable")
        ->take_all();
    app.add_flag("--progress", cli.progress,
                 "a progress line each second (per plane with --mrc); always on with -D");
    app.add_option("--plane-rate", cli.plane_rate,
                   "shape this side's transmit to GBPS per port, as a link of that speed would "
                   "(planes, not the CPU, then bound an MRC run)")
        ->check(CLI::Range(0.0, 1000.0));
    app.add_option("--capture", cli.capture,
                   "write every frame this side's device(s) send and receive to a pcapng file "
                   "(Wireshark; the count of frames, and of frames dropped from it, on stderr)");
    app.add_option("--snaplen", cli.snaplen,
                   "with --capture: bytes kept of each frame (default: whole frames)")
        ->check(CLI::Range(64u, 65535u));
    app.add_option("--demo-capture", cli.demo_capture,
                   "with --demo: end with a short scene (RC with 2% loss, MRC with a plane cut) "
                   "captured to this pcapng file, for droce-trace explain");
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e) == 0 ? 0 : 2;
    }
    // Before anything starts a thread: every thread inherits the blocked stop signals.
    start_stop_watcher();
    const int rc = run(cli);
    // Last, with every port closed: hugepages, the mp socket and the runtime directory go back.
    droce::dpdk::eal_release();
    g_main_done.store(true, std::memory_order_release);
    return rc;
}

namespace droce::perf {
namespace {

int run(const Cli& cli) {
    if (cli.demo) return run_demo(cli);
    if (cli.config.empty()) {
        std::fprintf(stderr, "droce-perf: -c CONFIG is required (or --demo)\n");
        return 2;
    }
    if (cli.server == !cli.server_addr.empty()) {
        std::fprintf(stderr, "droce-perf: give either --server or the server's address\n");
        return 2;
    }
    Params p;
    p.op = cli.op == "read"     ? Op::read
           : cli.op == "send"   ? Op::send
           : cli.op == "atomic" ? Op::atomic
                                : Op::write;
    p.mode = cli.lat ? Mode::lat : Mode::bw;
    p.size = p.op == Op::atomic ? 8u : cli.size;
    p.iters = cli.iters ? cli.iters : (p.mode == Mode::bw ? 5000 : 1000);
    p.duration_s = cli.duration;
    p.qps = cli.qps;
    p.path_mtu = cli.mtu;
    p.tx_depth = cli.tx_depth;
    p.timeout = cli.timeout >= 0 ? static_cast<std::uint8_t>(cli.timeout) : 0xff;
    p.plane_rate_gbps = cli.plane_rate > 0 ? cli.plane_rate : 0;
    p.verify = cli.verify;
    p.json = cli.json;
    p.inline_progress = cli.inline_progress;
    if (p.mode == Mode::lat && p.op == Op::write && p.size == 0) {
        // The WRITE latency test waits for the last byte of the message to change.
        std::fprintf(stderr, "droce-perf: a WRITE latency run needs -s 1 or more\n");
        return 2;
    }
    if (p.mode == Mode::lat && p.qps != 1) {
        std::fprintf(stderr, "droce-perf: latency tests use one QP (-q 1)\n");
        return 2;
    }
    p.progress = cli.duration > 0 || cli.progress;
    p.mrc = cli.mrc;
    if (!cli.mrc && (cli.planes || !cli.plane_down.empty() || !cli.plane_up.empty())) {
        std::fprintf(stderr, "droce-perf: --planes, --plane-down and --plane-up need --mrc (an RC "
                             "QP uses one port)\n");
        return 2;
    }
    if (cli.mrc && p.op != Op::write) {
        std::fprintf(stderr, "droce-perf: --mrc carries RDMA WRITE only (MRC has no READ, SEND or "
                             "atomics): use --op write (--bw or --lat)\n");
        return 2;
    }
    if (cli.mrc && cli.timeout >= 0 &&
        (cli.timeout == 0 || cli.timeout > static_cast<int>(droce::mrc::kMaxTimeout))) {
        std::fprintf(stderr,
                     "droce-perf: --timeout with --mrc: 1..%u (ACK timeout 1.024 us x 2^T)\n",
                     static_cast<unsigned>(droce::mrc::kMaxTimeout));
        return 2;
    }
    if (cli.server && (!cli.plane_down.empty() || !cli.plane_up.empty())) {
        std::fprintf(stderr, "droce-perf: --plane-down / --plane-up are client options\n");
        return 2;
    }
    {
        std::vector<PlaneEvent> evs;
        for (int up = 0; up < 2; ++up)
            for (const std::string& s : up ? cli.plane_up : cli.plane_down) {
                PlaneEvent ev;
                if (std::string e = parse_plane_event(s, up != 0, &ev); !e.empty()) {
                    std::fprintf(stderr, "droce-perf: --plane-%s %s\n", up ? "up" : "down",
                                 e.c_str());
                    return 2;
                }
                evs.push_back(ev);
            }
        if (evs.size() > kMaxPlaneEvents) {
            std::fprintf(stderr, "droce-perf: at most %u plane events\n", kMaxPlaneEvents);
            return 2;
        }
        std::stable_sort(evs.begin(), evs.end(),
                         [](const PlaneEvent& a, const PlaneEvent& b) { return a.at_s < b.at_s; });
        p.num_events = static_cast<std::uint8_t>(evs.size());
        std::copy(evs.begin(), evs.end(), p.events);
    }
    return run_remote(cli, p);
}

} // namespace
} // namespace droce::perf
