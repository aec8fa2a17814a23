/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * droce-burnin: the readiness check of a four-plane host (cabling per plane, each plane routable,
 * full bandwidth with every plane, three quarters with one plane out), against a peer.
 *
 *   droce-burnin --server -c CONFIG [-p TCP_PORT]          the peer: serves one client
 *   droce-burnin SERVER_ADDR -c CONFIG --plane-gbps G ...  runs the checks against it
 *
 * Exit status (client): 0 every check passed; 1 a check failed (or could not run because another
 * failed); 2 usage error; 3 the checks could not run at all (bring-up, side channel). Server: 0
 * when it served the client, 2 usage, 3 otherwise.
 */
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "burnin.h"
#include "config/config.h"
#include "dpdk/eal.h"

namespace {

using namespace droce;
using namespace droce::burnin;

constexpr int kExitFail = 1;
constexpr int kExitUsage = 2;
constexpr int kExitCannotRun = 3;

struct Cli {
    bool server = false;
    std::string server_addr;
    std::string config;
    std::uint16_t port = 18517;
    bool json = false;
    unsigned device = 0;
    double plane_rate = 0; ///< shaper, Gb/s per port, 0 = none
    /** Nice value of the engine threads (as lib/verbs gives its own): a burn-in measures the
     *  planes, so the engine should not wait for a CPU behind other work. Needs CAP_SYS_NICE to
     *  go below 0; without it the threads keep their nice value. */
    int engine_nice = -10;
    std::string impair; ///< an impairment stage (sim::parse_impair_spec): a bad cable, played
    Options o;
};

/**
 * A run that could not start or could not check anything: @p why on stderr and, with --json, one
 * JSON object on stdout as well ({"ok": false, "exit": code, "error": why}), so that a script
 * reading stdout gets an answer whatever happened. @return @p code.
 */
int cannot(const Cli& cli, int code, const std::string& why) {
    std::fprintf(stderr, "droce-burnin: %s\n", why.c_str());
    if (cli.json && !cli.server) {
        const nlohmann::json j{{"ok", false}, {"exit", code}, {"error", why}};
        std::printf("%s\n", j.dump(2).c_str());
        std::fflush(stdout);
    }
    return code;
}

int run(const Cli& cli) {
    RuntimeOptions ro;
    ro.devices = {cli.device};
    ro.tx_shaper = cli.plane_rate > 0;
    ro.tx_rate_gbps = cli.plane_rate;
    ro.engine.nice = cli.engine_nice;
    ro.impair_spec = cli.impair;
    std::string err;
    // A config that does not parse is a usage error (2), not a bring-up failure (3).
    if (!load_config(cli.config, &err)) return cannot(cli, kExitUsage, err);
    auto rt = Runtime::create(cli.config, ro, &err);
    if (!rt) return cannot(cli, kExitCannotRun, err);
    Options o = cli.o;
    if (!cli.server && o.plane_gbps <= 0) {
        // Unless stated: the shaper's rate, else the config's line rate of port 0.
        const double line = rt->device(0).port(0).line_rate_mbps / 1e3;
        o.plane_gbps = cli.plane_rate > 0 ? cli.plane_rate : line;
        if (o.plane_gbps <= 0)
            return cannot(cli, kExitUsage,
                          "state the expected rate of one plane with --plane-gbps (or "
                          "line_rate_gbps in the config's ports)");
    }
    if (!rt->start_engines(EngineMode::per_device))
        return cannot(cli, kExitCannotRun, "cannot start the engine thread");
    Channel ch;
    if (cli.server) {
        // stderr, so that stdout stays for the results; scripts wait for this line.
        std::fprintf(stderr, "droce-burnin: waiting for a client on TCP port %u (device %s)\n",
                     cli.port, rt->device(0).name().c_str());
        ch = perf::tcp_accept_one(cli.port, 600'000, &err);
    } else {
        std::fprintf(stderr, "droce-burnin: connecting to %s TCP port %u (up to 30 s)\n",
                     cli.server_addr.c_str(), cli.port);
        ch = perf::tcp_connect(cli.server_addr, cli.port, 30'000, &err);
    }
    if (!ch.valid()) return cannot(cli, kExitCannotRun, err);
    if (cli.server) {
        err = serve(*rt, ch, true);
        rt->stop_engines();
        perf::wait_for_client_exit(*rt, ch);
        if (!err.empty()) {
            std::fprintf(stderr, "droce-burnin: %s\n", err.c_str());
            return kExitCannotRun;
        }
        std::fprintf(stderr, "droce-burnin: served the client\n");
        return 0;
    }
    const Report rep = run_client(*rt, ch, o, cli.server_addr);
    rt->stop_engines();
    // No session (the peer is not droce-burnin, another version, or went away at once): nothing
    // was checked, so no report of checks, but the reason (and with --json one object saying so).
    if (rep.peer.magic == 0)
        return cannot(cli, kExitCannotRun,
                      rep.cabling.findings.empty() ? "no session with the peer"
                                                   : rep.cabling.findings.front());
    if (cli.json)
        std::printf("%s\n", report_json(rep).dump(2).c_str());
    else
        print_report(stdout, rep);
    std::fflush(stdout);
    return rep.ok() ? 0 : kExitFail;
}

} // namespace

int main(int argc, char** argv) {
    Cli cli;
    CLI::App app{"droce-burnin: readiness check of a four-plane host against a peer",
                 "droce-burnin"};
    app.set_version_flag("--version", "droce-burnin (droce) " DROCE_VERSION);
    app.footer("Exit status: 0 every check passed; 1 a check failed (the report says which); 2 a "
               "usage error (options, config file); 3 nothing could be checked (no peer, the "
               "device did not come up). With --json, stdout holds one JSON object in every "
               "case.");
    app.add_flag("--server", cli.server, "be the peer: serve one client, then exit");
    app.add_option("server_addr", cli.server_addr, "the peer's host name or address (client)");
    app.add_option("-c,--config", cli.config,
                   "droce config file (its device's ports are the planes)")
        ->required();
    app.add_option("-p,--port", cli.port, "TCP port of the side channel");
    app.add_option("--device", cli.device, "which device of the config file (0-based)");
    app.add_flag("--json", cli.json, "print one JSON object instead of text");
    app.add_option("--plane-gbps", cli.o.plane_gbps,
                   "expected rate of one plane, Gb/s (default: --plane-rate, else the config's "
                   "line_rate_gbps)")
        ->check(CLI::Range(0.001, 1000.0));
    app.add_option("--plane-rate", cli.plane_rate,
                   "shape this side's transmit to GBPS per port, as a link of that speed would "
                   "(so that the planes, not the CPU, bound the bandwidth runs)")
        ->check(CLI::Range(0.0, 1000.0));
    app.add_option("-D,--duration", cli.o.duration_s, "seconds of each bandwidth run")
        ->check(CLI::Range(0.2, 600.0));
    app.add_option("-s,--size", cli.o.size, "bytes per RDMA WRITE of the bandwidth runs")
        ->check(CLI::Range(1024u, 1u << 24));
    app.add_option("-q,--qps", cli.o.qps, "MRC QPs of the bandwidth runs (default 1)")
        ->check(CLI::Range(1u, perf::kMaxQps));
    app.add_option("--min-fraction", cli.o.min_fraction,
                   "bandwidth passes at this share of the expected rate (default 0.85)")
        ->check(CLI::Range(0.0, 1.0));
    app.add_option("--out-low", cli.o.out_low,
                   "one plane out: lowest share of the all-planes figure (default 0.65)")
        ->check(CLI::Range(0.0, 1.0));
    app.add_option("--out-high", cli.o.out_high,
                   "one plane out: highest share of the all-planes figure (default 0.85)")
        ->check(CLI::Range(0.0, 2.0));
    app.add_option("--probes", cli.o.probes, "routable: MRC_PROBEs per plane (default 20)")
        ->check(CLI::Range(1u, 4096u));
    app.add_option("--max-rtt-ms", cli.o.max_rtt_ms,
                   "routable: fail a plane whose probe RTT exceeds this (default: no limit)")
        ->check(CLI::Range(0.0, 10000.0));
    app.add_option("--probe-timeout-ms", cli.o.probe_timeout_ms,
                   "how long a probe's reply is waited for (default 250)")
        ->check(CLI::Range(1.0, 10000.0));
    app.add_option("--engine-nice", cli.engine_nice,
                   "nice value of the engine threads (default -10; needs CAP_SYS_NICE)")
        ->check(CLI::Range(-20, 19));
    app.add_flag("--verify", cli.o.verify, "check every byte of the bandwidth runs (costs CPU)");
    app.add_option("--max-loss", cli.o.max_plane_loss,
                   "bandwidth: fail a plane that lost more than this share of its packets "
                   "(default 0.001)")
        ->check(CLI::Range(0.0, 1.0));
    app.add_option("--impair", cli.impair,
                   "an impairment stage on this side's ports, to rehearse a bad cable: "
                   "loss=0.02,ports=1 (README of droce-perf: the spec)");
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e) == 0 ? 0 : kExitUsage;
    }
    if (cli.server == !cli.server_addr.empty()) {
        std::fprintf(stderr, "droce-burnin: give either --server or the peer's address\n");
        return kExitUsage;
    }
    // CLI11's Range lets NaN through (every comparison with it is false).
    for (const double v :
         {cli.o.plane_gbps, cli.plane_rate, cli.o.duration_s, cli.o.min_fraction, cli.o.out_low,
          cli.o.out_high, cli.o.max_rtt_ms, cli.o.probe_timeout_ms}) {
        if (!std::isfinite(v)) {
            std::fprintf(stderr, "droce-burnin: a number given is not finite (nan or inf)\n");
            return kExitUsage;
        }
    }
    if (cli.o.out_low > cli.o.out_high) {
        std::fprintf(stderr, "droce-burnin: --out-low above --out-high\n");
        return kExitUsage;
    }
    const int rc = run(cli);
    // The runtime is gone (ports closed): the EAL's runtime directory and hugepage files go too.
    droce::dpdk::eal_release();
    return rc;
}
