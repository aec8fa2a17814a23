/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * droce-stat: the counters of running droce processes, read from their DPDK telemetry sockets
 * (the /droce/ commands of lib/telemetry), printed the way `rdma statistic show` prints a NIC's.
 *
 *   droce-stat [show]              one line per device: its counters (device and every QP)
 *   droce-stat port [show]         one line per port (plane): state, ethdev, neighbour, MRC plane
 *   droce-stat qp [show]           one line per QP: QPN, peer QPN, type, state, counters
 *   droce-stat capture [status]    the live capture of the process
 *   droce-stat capture start FILE [--snaplen N]   /   droce-stat capture stop
 *   droce-stat list                the droce processes found
 *
 * Options before or after the command: -f/--file-prefix P, -p/--pid PID (which processes), -d/--dev
 * DEV (which device), -a/--all (zero counters too), -j/--json, -w/--watch [SECONDS] (per-second
 * rates every SECONDS, default 1), -c/--count N (with --watch: N reports, then exit; 0 = until
 * interrupted). Exit status: 0 done; 1 no process found, a process refused, or a socket error;
 * 2 usage. See README.md.
 */
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "client.h"

using json = nlohmann::ordered_json;
using namespace droce::stat;

namespace {

/** What the command line asked for. */
struct Cli {
    std::string prefix;
    long pid = 0;
    std::string dev;
    bool all = false;
    bool json = false;
    double watch = 0; ///< seconds between reports; 0 = one reading
    unsigned count = 0;
    std::string capture_action = "status";
    std::string capture_file;
    unsigned snaplen = 0;
};

/** One printed line: where (key), what it is (attributes), and its counters. */
struct Line {
    std::string key; ///< "link droce_a/1", "link droce_a/1 lqpn 17"
    std::vector<std::pair<std::string, std::string>> attrs;
    std::vector<std::pair<std::string, std::uint64_t>> counters;
    json raw;     ///< the replies it was made from, for --json
    long pid = 0; ///< the process it came from (two processes may name their devices alike)
};

/** Counters that are values, not counts: a rate makes no sense, the value is shown as it is. */
bool is_gauge(const std::string& name) {
    return name == "rp_current_rate_mbps" || name == "mrc_qps";
}

[[noreturn]] void die(const std::string& msg, int code = 1) {
    std::fprintf(stderr, "droce-stat: %s\n", msg.c_str());
    std::exit(code);
}

/** A process and its open connection. */
struct Target {
    Process proc;
    Connection conn;
};

std::vector<Target> connect_all(const Cli& cli) {
    std::vector<Target> out;
    for (Process& p : find_processes(cli.prefix, cli.pid)) {
        std::string err;
        auto c = Connection::open(p.socket, &err);
        if (c) out.push_back(Target{std::move(p), std::move(*c)});
    }
    if (out.empty()) {
        std::string which;
        if (!cli.prefix.empty()) which += " with file prefix " + cli.prefix;
        if (cli.pid) which += " with pid " + std::to_string(cli.pid);
        std::string where;
        for (const std::string& d : socket_dirs())
            where += (where.empty() ? "" : ", ") + d + "/dpdk/*";
        die("no droce process" + which + " with a telemetry socket in " + where +
            " (a process of another user, or one started with another XDG_RUNTIME_DIR, is not "
            "there; a DPDK process started with --no-telemetry has none)");
    }
    return out;
}

json ask(Target& t, const std::string& cmd) {
    std::string err;
    auto r = t.conn.query(cmd, &err);
    if (!r)
        die(t.proc.file_prefix + " (pid " + std::to_string(t.proc.pid) + "): " + cmd + ": " + err);
    if (r->is_null()) die("pid " + std::to_string(t.proc.pid) + " does not know " + cmd);
    if (r->is_object() && r->contains("error")) die(cmd + ": " + (*r)["error"].get<std::string>());
    return *r;
}

/** The device names of @p t, filtered by --dev. */
std::vector<std::pair<std::string, int>> devices_of(Target& t, const Cli& cli) {
    const json d = ask(t, "/droce/devices");
    std::vector<std::pair<std::string, int>> out;
    for (std::size_t i = 0; i < d["devices"].size(); ++i) {
        const std::string name = d["devices"][i].get<std::string>();
        if (!cli.dev.empty() && name != cli.dev) continue;
        out.emplace_back(name, d["ports"][i].get<int>());
    }
    return out;
}

void add_counters(Line& l, const json& dict, const std::string& prefix = "") {
    if (!dict.is_object()) return;
    for (const auto& [k, v] : dict.items())
        if (v.is_number_unsigned() || v.is_number_integer())
            l.counters.emplace_back(prefix + k, v.get<std::uint64_t>());
}

json origin(const Target& t) {
    return json{{"pid", t.proc.pid}, {"file_prefix", t.proc.file_prefix}};
}

/** `show`: the device lines. */
std::vector<Line> read_devices(std::vector<Target>& ts, const Cli& cli) {
    std::vector<Line> out;
    for (Target& t : ts)
        for (const auto& [name, ports] : devices_of(t, cli)) {
            const json d = ask(t, "/droce/device," + name);
            Line l;
            // The counters are the device's, over all its ports (droce counts per device and QP).
            l.key = "link " + name + "/" + (ports > 1 ? "1-" + std::to_string(ports) : "1");
            add_counters(l, d["total"]);
            if (d.contains("capture")) add_counters(l, d["capture"]);
            l.raw = origin(t);
            l.pid = t.proc.pid;
            l.raw["device"] = d;
            out.push_back(std::move(l));
        }
    return out;
}

/** `port`: one line per port. */
std::vector<Line> read_ports(std::vector<Target>& ts, const Cli& cli) {
    std::vector<Line> out;
    for (Target& t : ts)
        for (const auto& [name, ports] : devices_of(t, cli)) {
            // A uring port's own counters (drivers/uring: GSO, share, packet mode ...) are in
            // its device's registry as "port<N>/uring".
            const json dev = ask(t, "/droce/device," + name);
            for (int p = 1; p <= ports; ++p) {
                const json d = ask(t, "/droce/port," + name + "/" + std::to_string(p));
                Line l;
                l.key = "link " + name + "/" + std::to_string(p);
                for (const char* a : {"state", "physical_state", "mac", "gid"})
                    l.attrs.emplace_back(a, d.value(a, std::string()));
                if (d.contains("ethdev")) {
                    // ethtool / `ip -s link` names for the ethdev's figures.
                    static const std::pair<const char*, const char*> kNames[] = {
                        {"ipackets", "rx_packets"}, {"opackets", "tx_packets"},
                        {"ibytes", "rx_bytes"},     {"obytes", "tx_bytes"},
                        {"imissed", "rx_missed"},   {"ierrors", "rx_errors"},
                        {"oerrors", "tx_errors"},   {"rx_nombuf", "rx_nombuf"}};
                    for (const auto& [from, to] : kNames)
                        l.counters.emplace_back(to, d["ethdev"].value(from, std::uint64_t{0}));
                }
                if (d.contains("neigh")) add_counters(l, d["neigh"]);
                if (d.contains("mrc")) add_counters(l, d["mrc"], "mrc_");
                const std::string uring = "port" + std::to_string(p) + "/uring";
                if (dev.contains(uring)) add_counters(l, dev[uring]);
                l.raw = origin(t);
                l.pid = t.proc.pid;
                l.raw["port"] = d;
                if (dev.contains(uring)) l.raw["uring"] = dev[uring];
                out.push_back(std::move(l));
            }
        }
    return out;
}

/** `qp`: one line per QP. */
std::vector<Line> read_qps(std::vector<Target>& ts, const Cli& cli) {
    std::vector<Line> out;
    for (Target& t : ts)
        for (const auto& [name, ports] : devices_of(t, cli)) {
            std::vector<std::uint64_t> qpns;
            for (std::uint64_t from = 0;;) {
                const json l = ask(t, "/droce/qps," + name + "/" + std::to_string(from));
                for (const auto& q : l["qpn"])
                    qpns.push_back(q.get<std::uint64_t>());
                from = l.value("next", std::uint64_t{0});
                if (from == 0) break;
            }
            for (std::uint64_t qpn : qpns) {
                const json q = ask(t, "/droce/qp," + name + "/" + std::to_string(qpn));
                Line l;
                l.key = "link " + name + "/" + std::to_string(q.value("port", 1)) + " lqpn " +
                        std::to_string(qpn);
                l.attrs = {{"rqpn", std::to_string(q.value("dest_qpn", 0))},
                           {"type", q.value("transport", std::string())},
                           {"state", q.value("state", std::string())}};
                add_counters(l, q["counters"]);
                if (q.contains("mrc")) add_counters(l, q["mrc"], "mrc_");
                for (int p = 0; p < 4; ++p) {
                    const std::string pl = "plane" + std::to_string(p);
                    if (q.contains(pl)) add_counters(l, q[pl], pl + "_");
                }
                l.raw = origin(t);
                l.pid = t.proc.pid;
                l.raw["qp"] = q;
                out.push_back(std::move(l));
            }
        }
    return out;
}

void print_line(const Line& l, bool all) {
    std::string s = l.key;
    for (const auto& [k, v] : l.attrs)
        s += " " + k + " " + v;
    for (const auto& [k, v] : l.counters)
        if (all || v) s += " " + k + " " + std::to_string(v);
    std::printf("%s\n", s.c_str());
}

std::string now_text() {
    char b[32];
    const std::time_t t = std::time(nullptr);
    std::strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
    return b;
}

using Reader = std::vector<Line> (*)(std::vector<Target>&, const Cli&);

/** Exits 1 naming the devices there are when --dev names none of the processes' devices (a
 *  misspelt name would otherwise print nothing and exit 0). */
void require_dev(std::vector<Target>& ts, const Cli& cli) {
    if (cli.dev.empty()) return;
    std::string known;
    for (Target& t : ts) {
        const json d = ask(t, "/droce/devices");
        for (const auto& name : d["devices"]) {
            if (name.get<std::string>() == cli.dev) return;
            known += (known.empty() ? "" : ", ") + name.get<std::string>();
        }
    }
    die("no device named " + cli.dev + " (devices: " + (known.empty() ? "none" : known) + ")");
}

int show(Reader read, const Cli& cli) {
    std::vector<Target> ts = connect_all(cli);
    require_dev(ts, cli);
    if (cli.watch <= 0) {
        const std::vector<Line> lines = read(ts, cli);
        if (cli.json) {
            json a = json::array();
            for (const Line& l : lines)
                a.push_back(l.raw);
            std::printf("%s\n", a.dump(2).c_str());
        } else {
            for (const Line& l : lines)
                print_line(l, cli.all);
        }
        return 0;
    }
    // Rate view: per-second differences between two readings SECONDS apart.
    const bool tty = isatty(STDOUT_FILENO) && !cli.json;
    using clock = std::chrono::steady_clock;
    std::vector<Line> prev = read(ts, cli);
    auto prev_t = clock::now();
    for (unsigned n = 0; cli.count == 0 || n < cli.count; ++n) {
        std::this_thread::sleep_for(std::chrono::duration<double>(cli.watch));
        std::vector<Line> cur = read(ts, cli);
        const auto t = clock::now();
        const double dt = std::chrono::duration<double>(t - prev_t).count();
        std::map<std::pair<long, std::string>, const Line*> before;
        for (const Line& l : prev)
            before[{l.pid, l.key}] = &l;
        json report = {{"time", now_text()}, {"interval_s", dt}, {"lines", json::array()}};
        if (tty) std::printf("\033[H\033[2J");
        if (!cli.json)
            std::printf("droce-stat: per second over %.2f s, %s\n", dt, now_text().c_str());
        for (const Line& l : cur) {
            Line r{l.key, l.attrs, {}, {}, l.pid};
            std::map<std::string, std::uint64_t> old;
            if (auto it = before.find({l.pid, l.key}); it != before.end())
                for (const auto& [k, v] : it->second->counters)
                    old[k] = v;
            json rates = json::object();
            for (const auto& [k, v] : l.counters) {
                std::uint64_t shown = v;
                if (!is_gauge(k)) {
                    const std::uint64_t o = old.count(k) ? old[k] : v;
                    shown = v >= o ? static_cast<std::uint64_t>(std::llround((v - o) / dt)) : 0;
                }
                r.counters.emplace_back(k, shown);
                if (cli.all || shown) rates[k] = shown;
            }
            if (cli.json)
                report["lines"].push_back({{"pid", l.pid}, {"key", l.key}, {"rates", rates}});
            else
                print_line(r, cli.all);
        }
        if (cli.json) std::printf("%s\n", report.dump().c_str());
        std::fflush(stdout);
        prev = std::move(cur);
        prev_t = t;
    }
    return 0;
}

Target only_one(const Cli& cli) {
    std::vector<Target> ts = connect_all(cli);
    if (ts.size() > 1) {
        std::string s = "several droce processes; choose one with --file-prefix or --pid:";
        for (const Target& t : ts)
            s += " " + t.proc.file_prefix + " (pid " + std::to_string(t.proc.pid) + ")";
        die(s, 2);
    }
    return std::move(ts.front());
}

void print_capture(const json& c, bool as_json) {
    if (as_json) {
        std::printf("%s\n", c.dump(2).c_str());
        return;
    }
    const bool running = c.value("running", 0) != 0;
    const std::string file = c.value("file", std::string());
    if (!running && file.empty()) {
        std::printf("capture off\n");
        return;
    }
    std::printf("capture %s file %s snaplen %llu frames %llu dropped %llu truncated %llu",
                running ? "running" : "stopped", file.c_str(),
                static_cast<unsigned long long>(c.value("snaplen", 0ULL)),
                static_cast<unsigned long long>(c.value("frames", 0ULL)),
                static_cast<unsigned long long>(c.value("dropped", 0ULL)),
                static_cast<unsigned long long>(c.value("truncated", 0ULL)));
    // The writer thread owns the file: its size is known once the capture stopped.
    if (!running)
        std::printf(" bytes %llu", static_cast<unsigned long long>(c.value("bytes", 0ULL)));
    std::printf("\n");
    if (c.value("write_errno", 0) != 0)
        std::printf("capture write error: %s\n", std::strerror(c.value("write_errno", 0)));
}

int capture(const Cli& cli) {
    if (cli.capture_action == "start" && cli.capture_file.empty())
        die("capture start: FILE missing", 2);
    if (cli.capture_action != "start" && (!cli.capture_file.empty() || cli.snaplen))
        die("capture " + cli.capture_action + ": takes no FILE nor --snaplen", 2);
    Target t = only_one(cli);
    if (cli.capture_action == "status") {
        print_capture(ask(t, "/droce/capture"), cli.json);
    } else if (cli.capture_action == "start") {
        // The process has its own working directory: give it an absolute path.
        std::string path = std::filesystem::absolute(cli.capture_file).lexically_normal().string();
        std::string cmd = "/droce/capture_start," + path;
        if (cli.snaplen) cmd += "," + std::to_string(cli.snaplen);
        print_capture(ask(t, cmd), cli.json);
    } else {
        print_capture(ask(t, "/droce/capture_stop"), cli.json);
    }
    return 0;
}

int list(const Cli& cli) {
    std::vector<Target> ts = connect_all(cli);
    json a = json::array();
    for (Target& t : ts) {
        const json d = ask(t, "/droce/devices");
        if (cli.json) {
            json o = origin(t);
            o["socket"] = t.proc.socket;
            o["dpdk"] = t.proc.version;
            o["devices"] = d["devices"];
            a.push_back(o);
            continue;
        }
        std::string names;
        for (const auto& n : d["devices"])
            names += (names.empty() ? "" : ",") + n.get<std::string>();
        std::printf("%s pid %ld socket %s devices %s\n", t.proc.file_prefix.c_str(), t.proc.pid,
                    t.proc.socket.c_str(), names.c_str());
    }
    if (cli.json) std::printf("%s\n", a.dump(2).c_str());
    return 0;
}

} // namespace

int main(int argc, char** argv) {
    Cli cli;
    CLI::App app{"droce-stat: counters of running droce processes (DPDK telemetry), shaped like "
                 "`rdma statistic show`",
                 "droce-stat"};
    app.set_version_flag("--version", "droce-stat (droce) " DROCE_VERSION);
    app.fallthrough();
    app.require_subcommand(0, 1);
    app.add_option("-f,--file-prefix", cli.prefix, "only the process(es) of this EAL file prefix");
    app.add_option("-p,--pid", cli.pid, "only the process with this pid");
    app.add_option("-d,--dev", cli.dev, "only this device");
    app.add_flag("-a,--all", cli.all, "print zero counters too");
    app.add_flag("-j,--json", cli.json, "JSON instead of lines");
    app.add_option("-w,--watch", cli.watch,
                   "rate view: per-second differences every SECONDS (default 1), refreshed")
        ->expected(0, 1)
        ->default_str("1");
    app.add_option("-c,--count", cli.count,
                   "with --watch: this many reports, then exit (0, the default: until interrupted)")
        ->check(CLI::Range(0u, 1000000u));

    CLI::App* show_cmd = app.add_subcommand("show", "one line per device (the default)");
    CLI::App* port_cmd = app.add_subcommand("port", "one line per port (plane)");
    port_cmd->add_subcommand("show", "the same")->fallthrough();
    CLI::App* qp_cmd = app.add_subcommand("qp", "one line per QP");
    qp_cmd->add_subcommand("show", "the same")->fallthrough();
    CLI::App* cap_cmd = app.add_subcommand("capture", "the live capture: status, start, stop");
    cap_cmd->add_option("ACTION", cli.capture_action, "status (default), start or stop")
        ->check(CLI::IsMember({"status", "start", "stop"}));
    cap_cmd->add_option("FILE", cli.capture_file, "with start: the pcapng file to write");
    cap_cmd->add_option("--snaplen", cli.snaplen, "with start: bytes kept per frame (64..65535)")
        ->check(CLI::Range(64u, 65535u));
    CLI::App* list_cmd = app.add_subcommand("list", "the droce processes with a telemetry socket");
    for (CLI::App* s : {show_cmd, port_cmd, qp_cmd, cap_cmd, list_cmd})
        s->fallthrough();
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        const int rc = app.exit(e);
        return rc == 0 ? 0 : 2;
    }
    if (app.count("--watch")) {
        // --watch with no value means 1 s; a value given must be a positive number of seconds.
        const auto& given = app["--watch"]->results();
        const bool has_value = !given.empty() && !given.front().empty();
        if (!has_value)
            cli.watch = 1;
        else if (!(cli.watch > 0))
            die("--watch: SECONDS must be more than 0 (got " + given.front() + ")", 2);
    }
    if (cli.watch > 86400) die("--watch: at most 86400 seconds", 2);
    if (*cap_cmd) return capture(cli);
    if (*list_cmd) return list(cli);
    if (*port_cmd) return show(read_ports, cli);
    if (*qp_cmd) return show(read_qps, cli);
    return show(read_devices, cli);
}
