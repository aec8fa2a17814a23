/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * DCQCN benchmark P7 on the sim fabric (virtual clock; not a test): 2 and 16 RC flows starting
 * together at line rate into one 10 Gb/s port with RED marking (Kmin 40 KB, Kmax 160 KB, Pmax
 * 0.2; a 4 MB queue), for the `paper` and `nvidia` profiles. Samples every 20 us of each flow's
 * DCQCN rate (RC, rp_current_rate_mbps) and the port's queue depth, as the paper's figures plot
 * them; and per-flow goodput over the steady state. Writes one JSON (bench/cc/plot.py draws it):
 * per case the samples, Jain index and utilisation of the steady state (20..60 ms), drops, marks,
 * CNPs, and the convergence time (the first time after which the Jain index of the flows' rates
 * stays at or above 0.95 for 5 ms). Then `nvidia` again, 2 and 16 flows, in a lossless fabric (PFC
 * at XOFF 320 KB / XON 300 KB, sim/fabric.h): PFC pauses, and the share of time the senders spent
 * paused. Then each profile at its own operating point, with PFC for the synchronised start
 * (tests/cc/incast.h): `paper` at 40 Gb/s with the paper's RED (Kmin 5 KB, Kmax 200 KB, Pmax 1 %),
 * `nvidia` at 100 Gb/s with the HPCC artifact's RED scaled (400 KB - 1.6 MB, Pmax 0.2).
 *
 * usage: dcqcn_bench OUT.json
 */
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../../tests/cc/incast.h"

using namespace droce;
using namespace droce::test;

namespace {

constexpr std::uint64_t kSampleNs = 20'000;
constexpr std::uint64_t kTraceNs = 60'000'000;
constexpr std::uint64_t kSteadyFromNs = 20'000'000;

nlohmann::json run_case(const char* profile, std::uint32_t flows, const sim::LinkConfig& link) {
    const bool lossless = link.pfc_xoff_bytes != 0;
    const double gbps = link.bandwidth_gbps;
    Incast t(flows, link, cc::profile_by_name(profile), false, gbps);
    nlohmann::json samples = nlohmann::json::array();
    std::vector<std::uint64_t> done_at_steady;
    std::uint64_t paused_at_steady = 0;
    const std::uint64_t t0 = t.clock.now_ns();
    double converged_ms = -1;
    double good_since_ms = -1;
    while (t.clock.now_ns() - t0 < kTraceNs) {
        const std::uint64_t now = t.clock.now_ns() - t0;
        if (now >= kSteadyFromNs && done_at_steady.empty()) {
            done_at_steady = t.done;
            paused_at_steady = t.paused_ns();
        }
        // Step until the next sample time (run_for would reset the queue statistics each time;
        // here the depth is sampled directly).
        const std::uint64_t until = t.clock.now_ns() + kSampleNs;
        while (t.clock.now_ns() < until)
            t.step();
        std::vector<double> rates;
        for (rc::Qp* q : t.send_qp)
            rates.push_back(static_cast<double>(q->counters[Counter::rp_current_rate_mbps]) / 1e3);
        const double ms = static_cast<double>(t.clock.now_ns() - t0) / 1e6;
        const double j = jain(rates);
        if (j >= 0.95) {
            if (good_since_ms < 0) good_since_ms = ms;
            if (converged_ms < 0 && ms - good_since_ms >= 5.0) converged_ms = good_since_ms;
        } else {
            good_since_ms = -1;
        }
        samples.push_back({{"t_ms", ms},
                           {"rate_gbps", rates},
                           {"queue_kb", t.fabric.egress_backlog_bytes(1, 0, 0) / 1e3}});
    }
    const double steady_ns = static_cast<double>(t.clock.now_ns() - t0 - kSteadyFromNs);
    std::vector<double> goodput;
    for (std::size_t f = 0; f < t.done.size(); ++f)
        goodput.push_back((t.done[f] - done_at_steady[f]) * kMsg * 8.0 / steady_ns);
    const double total = std::accumulate(goodput.begin(), goodput.end(), 0.0);
    std::uint64_t cnps = 0;
    for (rc::Qp* q : t.send_qp)
        cnps += q->counters[Counter::rp_cnp_handled];
    const double util = total / (gbps * 4096.0 / 4154.0);
    const double paused = static_cast<double>(t.paused_ns() - paused_at_steady) / steady_ns / flows;
    std::printf("P7 %-6s %3.0f Gb/s %-8s %2u flows: Jain %.4f, utilisation %.3f, converged %s%.1f "
                "ms, drops %llu, marks %llu, CNPs %llu, senders paused %.3f of the time\n",
                profile, gbps, lossless ? "lossless" : "lossy", flows, jain(goodput), util,
                converged_ms < 0 ? "never (" : "", converged_ms < 0 ? 60.0 : converged_ms,
                static_cast<unsigned long long>(t.drops()),
                static_cast<unsigned long long>(t.marks()), static_cast<unsigned long long>(cnps),
                paused);
    return {{"profile", profile},
            {"link_gbps", gbps},
            {"kmin_kb", link.kmin_bytes / 1e3},
            {"kmax_kb", link.kmax_bytes / 1e3},
            {"pmax", link.pmax},
            {"fabric", lossless ? "lossless" : "lossy"},
            {"pfc_xoff_kb", link.pfc_xoff_bytes / 1e3},
            {"pfc_xon_kb", link.pfc_xon_bytes / 1e3},
            {"pfc_pauses", t.pauses()},
            {"paused_share", paused},
            {"flows", flows},
            {"jain", jain(goodput)},
            {"utilisation", util},
            {"goodput_gbps", goodput},
            {"convergence_ms",
             converged_ms < 0 ? nlohmann::json(nullptr) : nlohmann::json(converged_ms)},
            {"drops", t.drops()},
            {"marks", t.marks()},
            {"cnps_handled", cnps},
            {"samples", samples}};
}

} // namespace

int main(int argc, char** argv) {
    const char* out = argc > 1 ? argv[1] : "dcqcn-bench.json";
    nlohmann::json j;
    j["what"] = "DCQCN P7 on the sim fabric: N RC flows (64 KiB WRITEs, 8 outstanding) from line "
                "rate into one port, 4 MB queue, 1 us links, virtual clock; steady state 20..60 "
                "ms. link_gbps 10: RED 40-160 KB Pmax 0.2; fabric lossless: PFC pauses a sender "
                "above XOFF until the queue drains to XON (paused_share: the senders' mean share "
                "of the steady state spent paused). Each profile at its own operating point: "
                "paper at 40 Gb/s, RED 5-200 KB Pmax 0.01, XOFF 400 KB; nvidia at 100 Gb/s, RED "
                "400-1600 KB Pmax 0.2, XOFF 3.2 MB";
    j["cases"] = nlohmann::json::array();
    for (const char* profile : {"paper", "nvidia"})
        for (const std::uint32_t n : {2u, 16u})
            j["cases"].push_back(run_case(profile, n, bottleneck()));
    for (const std::uint32_t n : {2u, 16u})
        j["cases"].push_back(run_case("nvidia", n, bottleneck_pfc()));
    for (const std::uint32_t n : {2u, 16u})
        j["cases"].push_back(run_case("paper", n, bottleneck_paper_40g()));
    for (const std::uint32_t n : {2u, 16u})
        j["cases"].push_back(run_case("nvidia", n, bottleneck_nvidia_100g()));
    std::ofstream(out) << j.dump(1) << "\n";
    std::printf("wrote %s\n", out);
    return 0;
}
