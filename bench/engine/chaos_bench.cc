/* SPDX-License-Identifier: BSD-3-Clause */
// The chaos soak (tests/engine/chaos.h) run long: chaos_bench [OPS] [SEED] prints one JSON object
// (the options, every figure of ChaosResult, the wall time) and exits 0 when every check held.
// bench/engine/chaos runs it for 10^6 operations and keeps the JSON.
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "chaos.h"

int main(int argc, char** argv) {
    droce::test::ChaosOptions o;
    o.ops = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1'000'000;
    o.seed = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1;
    const auto t0 = std::chrono::steady_clock::now();
    const droce::test::ChaosResult r = droce::test::Chaos(o).run();
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    nlohmann::json j;
    j["options"] = {{"ops", o.ops},
                    {"seed", o.seed},
                    {"rc_qp_pairs", o.rc_flows},
                    {"mrc_qp_pairs", o.mrc_flows},
                    {"window", o.window},
                    {"max_len", o.max_len},
                    {"loss", o.loss},
                    {"reorder", o.reorder},
                    {"duplicate", o.duplicate},
                    {"corrupt", o.corrupt},
                    {"link_gbps", o.gbps},
                    {"flap_every_ns", o.flap_every_ns},
                    {"flap_max_ns", o.flap_max_ns},
                    {"churn_per_op", o.churn}};
    j["ops_completed"] = r.ops_completed;
    j["atomics"] = r.atomics;
    j["recv_completions"] = r.recv_completions;
    j["bytes_verified"] = r.bytes_verified;
    j["qp_pairs_created"] = r.qp_pairs_created;
    j["plane_flaps"] = r.plane_flaps;
    j["retransmitted_pkts_live_qps"] = r.retransmitted;
    j["links"] = {{"dropped_loss", r.dropped_loss},
                  {"reordered", r.reordered},
                  {"duplicated", r.duplicated},
                  {"corrupted", r.corrupted},
                  {"dropped_down", r.dropped_down}};
    j["virtual_ms"] = static_cast<double>(r.virtual_ns) / 1e6;
    j["wall_s"] = wall;
    j["problems"] = r.problems;
    j["ok"] = r.problems.empty() && r.ops_completed >= o.ops;
    std::printf("%s\n", j.dump(2).c_str());
    return j["ok"].get<bool>() ? 0 : 1;
}
