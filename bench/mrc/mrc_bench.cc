/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * MRC benchmarks on the sim fabric (virtual clock, 10 Gb/s planes, so the links bound what goes
 * through and the figures do not depend on this host's CPU or load):
 *  - P5: goodput with 1, 2, 3 and 4 planes, and with one of four planes black-holed;
 *  - P6: goodput at 0.1 %, 1 % and 5 % random loss on every link: MRC over four planes, MRC over
 *    one plane and RC go-back-N over one plane, each against its own lossless run;
 *  - a timeline of per-plane throughput through a plane failure and its recovery.
 * Writes JSON (argv[1], default mrc-bench.json); bench/mrc/run plots it with matplotlib.
 */
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "../../tests/mrc/mrc_pair.h"

namespace {

using droce::test::MrcOptions;
using droce::test::MrcPair;
using namespace droce;

constexpr std::size_t kMsg = 256 * 1024;

struct Run {
    MrcPair t;
    std::unique_ptr<MrcPair::Buffer> src, dst;
    std::size_t posted = 0;
    std::size_t outstanding = 64;
    Run(std::uint64_t seed, const MrcOptions& o, bool rc) : t(seed, o) {
        if (!rc) {
            t.connect();
        } else {
            const auto q = t.connect_rc_pair(8);
            t.qp[0] = q[0];
            t.qp[1] = q[1];
            outstanding = 4; // go-back-N: a larger window only feeds the retry storm
        }
        src = t.buffer(0, 16 * kMsg, 3);
        dst = t.buffer(1, 16 * kMsg, 0);
    }
    void top_up() {
        while (posted - t.send_cqes[0].size() < outstanding) {
            if (t.write(0, *src, *dst, (posted % 16) * kMsg, kMsg, posted) != 0) break;
            ++posted;
        }
    }
    /** Payload bytes placed at the responder so far: MRC counts them per packet (first
     *  placements only); RC by completed messages. */
    [[nodiscard]] std::uint64_t placed() const {
        if (!mrc::is_mrc(*t.qp[1])) return t.send_cqes[0].size() * kMsg;
        std::uint64_t b = 0;
        for (unsigned p = 0; p < t.opts.planes; ++p)
            b += mrc::plane_stats(*t.qp[1], p)->rx_bytes.load(std::memory_order_relaxed);
        return b;
    }
    /** Goodput (payload Gb/s placed) in the next @p ns of virtual time. */
    double run_for(std::uint64_t ns) {
        const std::uint64_t before = placed();
        const std::uint64_t until = t.clock.now_ns() + ns;
        while (t.clock.now_ns() < until) {
            top_up();
            t.step();
        }
        return static_cast<double>(placed() - before) * 8 / (ns / 1e9) / 1e9;
    }
    [[nodiscard]] bool clean() const {
        return t.send_errors(0) == 0 && t.qp[0]->state != rc::QpState::err;
    }
};

double goodput(std::uint32_t planes, double loss, bool rc, std::uint64_t seed) {
    MrcOptions o;
    o.planes = planes;
    Run r(seed, o, rc);
    for (unsigned p = 0; p < planes; ++p)
        r.t.set_plane_links(p, [&](sim::LinkConfig& c) { c.loss = loss; });
    (void)r.run_for(2'000'000);
    const double g = r.run_for(rc ? 40'000'000 : 10'000'000); // RC counts whole messages
    return r.clean() ? g : 0.0; // a QP that failed delivers nothing more
}

} // namespace

int main(int argc, char** argv) {
    const char* out = argc > 1 ? argv[1] : "mrc-bench.json";
    nlohmann::json j;
    j["what"] = "MRC on the sim fabric: 10 Gb/s per plane and direction, 2 us links, 4096 B MTU, "
                "256 KiB WRITEs, 64 outstanding (RC: 4), virtual clock";

    // ---- P5
    const double one = goodput(1, 0, false, 1);
    nlohmann::json p5 = nlohmann::json::array();
    for (std::uint32_t n = 1; n <= 4; ++n) {
        const double g = n == 1 ? one : goodput(n, 0, false, n);
        p5.push_back({{"planes", n}, {"gbps", g}, {"ratio_to_n_x_one", g / (n * one)}});
        std::printf("P5 %u plane(s): %6.2f Gb/s = %.3f x N x one plane\n", n, g, g / (n * one));
    }
    j["p5"] = p5;
    {
        MrcOptions o;
        Run r(9, o, false);
        (void)r.run_for(2'000'000);
        const double four = r.run_for(5'000'000);
        r.t.set_plane_links(2, [](sim::LinkConfig& c) { c.loss = 1.0; });
        (void)r.run_for(3'000'000);
        const double three = r.run_for(10'000'000);
        j["p5_one_of_four_down"] = {{"four_gbps", four},
                                    {"one_down_gbps", three},
                                    {"ratio", three / four},
                                    {"errors", r.t.send_errors(0)}};
        std::printf("P5 one of four planes black-holed: %.2f -> %.2f Gb/s (%.3f)\n", four, three,
                    three / four);
    }

    // ---- P6
    const double base_mrc4 = goodput(4, 0, false, 11);
    const double base_mrc1 = one;
    const double base_rc1 = goodput(1, 0, true, 12);
    nlohmann::json p6 = nlohmann::json::array();
    for (const double loss : {0.001, 0.01, 0.05}) {
        const double m4 = goodput(4, loss, false, 13);
        const double m1 = goodput(1, loss, false, 14);
        const double r1 = goodput(1, loss, true, 15);
        p6.push_back({{"loss", loss},
                      {"mrc_4_planes_gbps", m4},
                      {"mrc_4_planes_of_lossless", m4 / base_mrc4},
                      {"mrc_1_plane_gbps", m1},
                      {"mrc_1_plane_of_lossless", m1 / base_mrc1},
                      {"rc_1_plane_gbps", r1},
                      {"rc_1_plane_of_lossless", r1 / base_rc1}});
        std::printf("P6 loss %.1f%%: MRC 4 planes %.2f Gb/s (%.3f), MRC 1 plane %.2f (%.3f), RC 1 "
                    "plane %.2f (%.3f)\n",
                    loss * 100, m4, m4 / base_mrc4, m1, m1 / base_mrc1, r1, r1 / base_rc1);
    }
    j["p6"] = p6;
    j["p6_lossless"] = {{"mrc_4_planes_gbps", base_mrc4},
                        {"mrc_1_plane_gbps", base_mrc1},
                        {"rc_1_plane_gbps", base_rc1}};

    // ---- CPU: real time, links without a rate, both engines on this one thread: what one core
    // moves through the transport (RC and MRC over the same fabric, same run).
    {
        auto cpu = [](std::uint32_t planes, bool rc) {
            MrcOptions o;
            o.planes = planes;
            o.gbps = 0;
            o.delay_ns = 0;
            o.real_time = true;
            Run r(31, o, rc);
            r.outstanding = 16;
            (void)r.run_for(100'000'000);
            return r.run_for(500'000'000);
        };
        const double rc1 = cpu(1, true);
        nlohmann::json c = {{"rc_1_plane_gbps", rc1}};
        std::printf("CPU (one core, both engines): RC 1 plane %.2f Gb/s\n", rc1);
        for (std::uint32_t n : {1u, 4u}) {
            const double g = cpu(n, false);
            c["mrc_" + std::to_string(n) + "_planes_gbps"] = g;
            c["mrc_" + std::to_string(n) + "_planes_vs_rc"] = g / rc1;
            std::printf("CPU (one core, both engines): MRC %u plane(s) %.2f Gb/s (%.3f x RC)\n", n,
                        g, g / rc1);
        }
        j["cpu_one_core"] = c;
    }

    // ---- timeline: plane 2 black-holed at 5 ms, healed at 12 ms
    {
        MrcOptions o;
        Run r(21, o, false);
        nlohmann::json tl = nlohmann::json::array();
        constexpr std::uint64_t kStep = 250'000;
        std::array<std::uint64_t, 4> last{};
        const std::uint64_t t0 = r.t.clock.now_ns();
        for (std::uint64_t at = 0; at < 20'000'000; at += kStep) {
            if (at == 5'000'000) r.t.set_plane_links(2, [](sim::LinkConfig& c) { c.loss = 1.0; });
            if (at == 12'000'000) r.t.set_plane_links(2, [](sim::LinkConfig& c) { c.loss = 0.0; });
            const double total = r.run_for(kStep); // goodput: payload placed
            nlohmann::json row = {{"t_ms", (r.t.clock.now_ns() - t0) / 1e6},
                                  {"goodput_gbps", total}};
            for (unsigned p = 0; p < 4; ++p) {
                const std::uint64_t b = r.t.plane_tx_bytes(0, p);
                row["plane" + std::to_string(p) + "_gbps"] =
                    (b - last[p]) * 8.0 / (kStep / 1e9) / 1e9;
                last[p] = b;
            }
            tl.push_back(row);
        }
        j["timeline"] = {
            {"cut_ms", 5.0}, {"heal_ms", 12.0}, {"samples", tl}, {"errors", r.t.send_errors(0)}};
    }
    std::ofstream(out) << j.dump(2) << "\n";
    std::printf("wrote %s\n", out);
    return 0;
}
