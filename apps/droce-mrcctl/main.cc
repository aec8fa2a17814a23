/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * droce-mrcctl: the OCP MRC controller API of a running droce process, from the shell.
 *
 *   droce-mrcctl [--pid PID] list [--evs] [--json]   ports, MRC QPs, their EVs (paths) and states
 *   droce-mrcctl [--pid PID] port N down|up          take port (plane) N out of service / back
 *   droce-mrcctl [--pid PID] deny VALUE PORT [--profile ID]   an EV DENIED (every QP using it)
 *   droce-mrcctl [--pid PID] allow VALUE PORT [--profile ID]  back to GOOD
 *   droce-mrcctl [--pid PID] probe PORT DGID [--ev V] [--count N] [--timeout-ms T]
 *                                                     connectionless EV probes, RTT per reply
 *
 * droce has no NIC firmware shared by processes: the controller state is the process's that runs
 * the engine. Every process that made an MRC context (lib_mrc.so) listens on the abstract Unix
 * socket "droce-mrcctl.<pid>" of its network namespace; without --pid the only one found is used.
 * Exit status: 0 done; 1 the process refused (the errno is printed); 2 usage or no process.
 */
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

using json = nlohmann::json;

namespace {

constexpr const char* kPrefix = "@droce-mrcctl.";

/** PIDs of the processes listening (from /proc/net/unix: abstract names start with '@'). */
std::vector<long> find_processes() {
    std::vector<long> pids;
    std::ifstream in("/proc/net/unix");
    std::string line;
    while (std::getline(in, line)) {
        const auto at = line.find(kPrefix);
        if (at == std::string::npos) continue;
        const long pid = std::strtol(line.c_str() + at + std::strlen(kPrefix), nullptr, 10);
        if (pid > 0 && std::find(pids.begin(), pids.end(), pid) == pids.end()) pids.push_back(pid);
    }
    return pids;
}

/** Sends @p req to process @p pid and returns its reply; exits 2 when it cannot be reached. */
json call(long pid, const json& req) {
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    const int n =
        std::snprintf(addr.sun_path + 1, sizeof addr.sun_path - 1, "droce-mrcctl.%ld", pid);
    const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
    if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
        std::fprintf(stderr, "droce-mrcctl: cannot reach process %ld: %s\n", pid,
                     std::strerror(errno));
        std::exit(2);
    }
    // An abstract name is anyone's to bind: talk only to a process of this user (or root), as the
    // server only listens to them.
    ucred cred{};
    socklen_t cred_len = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cred_len) != 0 ||
        (cred.uid != getuid() && cred.uid != 0)) {
        std::fprintf(stderr, "droce-mrcctl: process %ld: the socket belongs to another user\n",
                     pid);
        std::exit(2);
    }
    // A process that never answers (stopped, or busy) does not hang the tool for ever.
    const timeval tv{30, 0};
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    const std::string out = req.dump() + "\n";
    if (send(fd, out.data(), out.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(out.size())) {
        std::fprintf(stderr, "droce-mrcctl: write: %s\n", std::strerror(errno));
        std::exit(2);
    }
    std::string reply;
    char buf[65536];
    for (;;) {
        const ssize_t r = read(fd, buf, sizeof buf);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            std::fprintf(stderr, "droce-mrcctl: process %ld did not answer\n", pid);
            std::exit(2);
        }
        if (r <= 0) break;
        reply.append(buf, static_cast<std::size_t>(r));
    }
    close(fd);
    try {
        return json::parse(reply);
    } catch (const std::exception&) {
        std::fprintf(stderr, "droce-mrcctl: process %ld sent no valid reply\n", pid);
        std::exit(2);
    }
}

/** Exits 1 with the process's error when @p r is a refusal. */
void check(const json& r, const char* what) {
    if (r.value("ok", false)) return;
    std::fprintf(stderr, "droce-mrcctl: %s: %s (errno %d)\n", what,
                 r.value("error", std::string("failed")).c_str(), r.value("errno", 0));
    std::exit(1);
}

void print_list(const json& r, bool evs) {
    std::printf("process %ld, device %s\n", r.at("pid").get<long>(),
                r.at("device").get<std::string>().c_str());
    std::printf("%-5s %-6s %-5s %s\n", "port", "admin", "link", "gid");
    for (const json& p : r.at("ports"))
        std::printf("%-5d %-6s %-5s %s\n", p.at("port").get<int>(),
                    p.at("admin").get<std::string>().c_str(),
                    p.at("link").get<std::string>().c_str(),
                    p.at("gid").get<std::string>().c_str());
    // An EV keeps its state while its port is down (the state is the path's health as last
    // seen); the transport sends nothing on it meanwhile, which the list must say.
    std::set<int> down;
    for (const json& p : r.at("ports"))
        if (p.at("admin").get<std::string>() != "up" || p.at("link").get<std::string>() != "up")
            down.insert(p.at("port").get<int>());
    const auto on_down_port = [&](const json& e) {
        return down.count(e.at("port").get<int>()) > 0;
    };
    for (const json& q : r.at("qps")) {
        std::string qp_state = q.at("state").get<std::string>(); // IBTA spells them RTS, ERR
        for (char& ch : qp_state)
            ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
        std::map<std::string, int> states;
        int unused = 0;
        for (const json& e : q.at("evs")) {
            if (on_down_port(e))
                ++unused;
            else
                ++states[e.at("state").get<std::string>()];
        }
        std::printf("QP 0x%06x %-5s EV profile %llu, CC profile %llu: %zu EVs",
                    q.at("qpn").get<unsigned>(), qp_state.c_str(),
                    static_cast<unsigned long long>(q.at("ev_profile").get<std::uint64_t>()),
                    static_cast<unsigned long long>(q.at("cc_profile").get<std::uint64_t>()),
                    q.at("evs").size());
        for (const auto& [s, n] : states)
            std::printf(", %d %s", n, s.c_str());
        if (unused > 0) std::printf(", %d on a port that is down (unused)", unused);
        std::printf("\n");
        if (!evs) continue;
        std::printf("  %-4s %-10s %-9s %-4s %-12s %10s %7s\n", "ev", "value", "udp_sport", "port",
                    "state", "tx_pkts", "losses");
        for (const json& e : q.at("evs"))
            std::printf(
                "  %-4d 0x%08x %-9u %-4d %-12s %10llu %7llu\n", e.at("ev").get<int>(),
                e.at("value").get<unsigned>(), e.at("udp_sport").get<unsigned>(),
                e.at("port").get<int>(),
                (e.at("state").get<std::string>() + (on_down_port(e) ? " (down)" : "")).c_str(),
                static_cast<unsigned long long>(e.at("tx_pkts").get<std::uint64_t>()),
                static_cast<unsigned long long>(e.at("losses").get<std::uint64_t>()));
    }
}

} // namespace

int main(int argc, char** argv) {
    CLI::App app{"droce-mrcctl: the OCP MRC controller API of a running droce process",
                 "droce-mrcctl"};
    app.set_version_flag("--version", "droce-mrcctl (droce) " DROCE_VERSION);
    app.require_subcommand(1);
    long pid = 0;
    app.add_option("--pid", pid, "the droce process (default: the only one listening)");

    CLI::App* list = app.add_subcommand("list", "ports, MRC QPs, their EVs and EV states");
    bool show_evs = false, as_json = false;
    list->add_flag("--evs", show_evs, "every EV of every QP");
    list->add_flag("--json", as_json, "the reply as JSON");

    CLI::App* port = app.add_subcommand("port", "take a port (plane) down or bring it up");
    int port_num = 0;
    std::string updown;
    port->add_option("PORT", port_num, "1-based port")->required()->check(CLI::Range(1, 255));
    port->add_option("STATE", updown, "down or up")
        ->required()
        ->check(CLI::IsMember({"down", "up"}));

    std::uint32_t ev_value = 0;
    int ev_port = 0;
    std::uint64_t profile = 0;
    CLI::App* deny = app.add_subcommand("deny", "set an EV DENIED on every QP of its profile");
    CLI::App* allow = app.add_subcommand("allow", "set a DENIED EV back to GOOD");
    for (CLI::App* s : {deny, allow}) {
        s->add_option("VALUE", ev_value, "the EV (profile 0: the UDP source port)")->required();
        s->add_option("PORT", ev_port, "its 1-based port")->required()->check(CLI::Range(1, 255));
        s->add_option("--profile", profile, "EV profile (0: droce's own paths)");
    }

    CLI::App* probe = app.add_subcommand("probe", "connectionless EV probes to a GID, with RTT");
    std::string dgid;
    std::uint32_t probe_ev = 0xc000;
    int count = 1, timeout_ms = 100;
    probe->add_option("PORT", ev_port, "1-based port to send from")
        ->required()
        ->check(CLI::Range(1, 255));
    probe->add_option("DGID", dgid, "destination IPv4 or IPv6 address (its GID)")->required();
    probe->add_option("--ev", probe_ev, "first EV (UDP source port); one more per probe");
    probe->add_option("--count", count, "probes (1..64), one EV each")->check(CLI::Range(1, 64));
    probe->add_option("--timeout-ms", timeout_ms, "wait for replies")->check(CLI::Range(1, 4000));

    CLI11_PARSE(app, argc, argv);

    if (pid == 0) {
        const std::vector<long> pids = find_processes();
        if (pids.empty()) {
            std::fprintf(stderr, "droce-mrcctl: no droce process with an MRC context in this "
                                 "network namespace (lib_mrc opens its socket at the first "
                                 "mrc_create_context; DROCE_MRCCTL=off disables it)\n");
            return 2;
        }
        if (pids.size() > 1) {
            std::fprintf(stderr, "droce-mrcctl: several droce processes; choose one with --pid:");
            for (long p : pids)
                std::fprintf(stderr, " %ld", p);
            std::fprintf(stderr, "\n");
            return 2;
        }
        pid = pids[0];
    }

    try {
        if (*list) {
            const json r = call(pid, {{"cmd", "list"}});
            check(r, "list");
            if (as_json)
                std::printf("%s\n", r.dump(2).c_str());
            else
                print_list(r, show_evs);
        } else if (*port) {
            check(call(pid, {{"cmd", "port"}, {"port", port_num}, {"up", updown == "up"}}), "port");
            std::printf("port %d %s\n", port_num, updown.c_str());
        } else if (*deny || *allow) {
            const bool d = static_cast<bool>(*deny);
            check(call(pid, {{"cmd", "ev_state"},
                             {"profile", profile},
                             {"value", ev_value},
                             {"port", ev_port},
                             {"deny", d}}),
                  d ? "deny" : "allow");
            std::printf("EV 0x%x on port %d: %s\n", ev_value, ev_port, d ? "DENIED" : "GOOD");
        } else if (*probe) {
            const json r = call(pid, {{"cmd", "probe"},
                                      {"port", ev_port},
                                      {"dgid", dgid},
                                      {"ev", probe_ev},
                                      {"count", count},
                                      {"timeout_ms", timeout_ms}});
            check(r, "probe");
            for (const json& rep : r.at("replies"))
                std::printf("reply from %s: ev 0x%x port %d rtt %u ns\n", dgid.c_str(),
                            rep.at("ev").get<unsigned>(), rep.at("port").get<int>(),
                            rep.at("rtt_ns").get<unsigned>());
            const std::size_t got = r.at("replies").size();
            std::printf("%d probes, %zu replies\n", r.at("sent").get<int>(), got);
            return got == static_cast<std::size_t>(r.at("sent").get<int>()) ? 0 : 1;
        }
    } catch (const std::exception& e) { // a reply of another shape than asked
        std::fprintf(stderr, "droce-mrcctl: process %ld sent an unexpected reply (%s)\n", pid,
                     e.what());
        return 2;
    }
    return 0;
}
