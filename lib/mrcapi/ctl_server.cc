/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * lib_mrc's control socket: how droce-mrcctl reaches the controller API of a running process.
 *
 * A NIC's controller state is the NIC's, so a controller daemon reaches it from its own process.
 * droce's is the process's that runs the engine (ctl.cc), so lib_mrc listens on a Unix socket for
 * the shell tool: the abstract name "droce-mrcctl.<pid>" (no file to clean up; the network
 * namespace's, as the process's ports are), opened when the process creates its first MRC context
 * and served by one thread of its own for the process's lifetime. DROCE_MRCCTL=off turns it off.
 * Only the same user (or root) may connect (SO_PEERCRED).
 *
 * Protocol: one JSON object per connection, one line each way.
 *   {"cmd":"list"}                                      ports, QPs, their EVs, profiles
 *   {"cmd":"port","port":N,"up":bool}                   mrc_ctl_modify_port
 *   {"cmd":"ev_state","profile":ID,"value":V,"port":N,"deny":bool}
 *                                                       mrc_ctl_modify_ev_profile MODIFY_EV_STATE
 *   {"cmd":"probe","port":N,"dgid":"addr","ev":V,"count":C,"timeout_ms":T}
 *                                                       mrc_ctl_ep_batch_send_wait EV_PROBE
 * Replies: {"ok":true,...} or {"ok":false,"errno":E,"error":"text"}. Numbers must be non-negative
 * integers in range (ports 0..255 and then the device's, EV values 32 bits, probe EVs 16 bits,
 * count 1..64, timeout_ms 1..4000) and flags booleans: anything else is EINVAL, never converted.
 * A client has kClientMs to send its line (else ETIMEDOUT and the connection closed) and to take
 * the reply; one that hangs up early costs nothing (no SIGPIPE).
 *
 * The commands run on an MRC context of the server's own, on an ibv_context it opens on the same
 * device (the runtime is shared: same Device, same engine). Control path only.
 */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

#include "internal.h"

using json = nlohmann::json;
using namespace droce;
using namespace droce::mrcapi;

namespace droce::mrcapi {
namespace {

/** The device the first MRC context was made on; the server's context, made on first command. */
ibv_device* g_device = nullptr;
mrc_context* g_ctx = nullptr;

mrc_context* server_context() noexcept {
    if (g_ctx) return g_ctx;
    using OpenFn = ibv_context* (*)(ibv_device*);
    auto open = reinterpret_cast<OpenFn>(dlsym(RTLD_DEFAULT, "ibv_open_device"));
    if (!open || !g_device) return nullptr;
    ibv_context* ibv = open(g_device);
    if (!ibv) return nullptr;
    mrc_context_attr a{};
    a.mrc_api_version_used = MRC_API_CURRENT_VERSION;
    g_ctx = mrc_create_context(ibv, &a);
    return g_ctx;
}

json error(int err) {
    return json{{"ok", false}, {"errno", err}, {"error", std::strerror(err)}};
}

/** A request the server refuses (EINVAL): a field missing, of the wrong type or out of range. */
struct BadRequest : std::runtime_error {
    using std::runtime_error::runtime_error;
};

/**
 * Field @p key of @p req: a non-negative integer no larger than @p max (@p def when absent, if
 * given). Anything else is refused rather than converted: nlohmann's get<std::uint8_t>() of 257,
 * -255 or 1.5 is 1 (a static_cast), which made {"port":257} take port 1 down.
 */
std::uint64_t uint_field(const json& req, const char* key, std::uint64_t max,
                         std::optional<std::uint64_t> def = std::nullopt) {
    const auto it = req.find(key);
    if (it == req.end()) {
        if (def) return *def;
        throw BadRequest(key);
    }
    if (!it->is_number_unsigned()) throw BadRequest(key); // negative, fractional, not a number
    const auto v = it->get<std::uint64_t>();
    if (v > max) throw BadRequest(key);
    return v;
}

bool bool_field(const json& req, const char* key) {
    const auto it = req.find(key);
    if (it == req.end() || !it->is_boolean()) throw BadRequest(key);
    return it->get<bool>();
}

const char* state_name(mrc::EvState s) noexcept {
    switch (s) {
    case mrc::EvState::good:
        return "GOOD";
    case mrc::EvState::assumed_bad:
        return "ASSUMED_BAD";
    case mrc::EvState::denied:
        return "DENIED";
    }
    return "?";
}

std::string gid_text(const wire::Ipv6Addr& g) {
    char buf[INET6_ADDRSTRLEN] = {};
    if (wire::is_ipv4_mapped(g))
        inet_ntop(AF_INET, g.data() + 12, buf, sizeof buf);
    else
        inet_ntop(AF_INET6, g.data(), buf, sizeof buf);
    return buf;
}

json list(mrc_context* ctx) {
    DeviceEntry& e = *ctx->entry;
    Device& dev = *e.dev;
    json out{{"ok", true}, {"pid", static_cast<long>(getpid())}, {"device", dev.name()}};
    Control ctl(ctx->ibv);
    if (!ctl.ok()) return error(EINVAL);
    json ports = json::array();
    for (unsigned p = 0; p < dev.num_ports(); ++p) {
        const PortSpec& ps = dev.port(p);
        ports.push_back({{"port", p + 1},
                         {"admin", dev.port_admin_up(p) ? "up" : "down"},
                         {"link", ps.driver && ps.driver->link_up() ? "up" : "down"},
                         {"gid", gid_text(ps.gid)}});
    }
    out["ports"] = ports;
    json qps = json::array();
    for (mrc_context* c : e.contexts) {
        std::lock_guard<std::mutex> g(c->mu);
        for (mrc_qp* q : c->qps) {
            json evs = json::array();
            std::array<mrc::EvInfo, mrc::kMaxEvs> infos;
            const std::size_t n = mrc::ev_snapshot(*q->native, infos);
            for (std::size_t i = 0; i < n; ++i) {
                const mrc::EvInfo& in = infos[i];
                evs.push_back(
                    {{"ev", i},
                     {"value", i < q->ctl_ev_values.size() ? q->ctl_ev_values[i] : in.udp_sport},
                     {"udp_sport", in.udp_sport},
                     {"port", in.plane + 1},
                     {"state", state_name(in.state)},
                     {"tx_pkts", in.tx_pkts},
                     {"losses", in.losses}});
            }
            qps.push_back({{"qpn", q->qpn},
                           {"state", rc::to_string(q->native->state)},
                           {"ev_profile", q->ev_profile_id},
                           {"cc_profile", q->cc_profile_id},
                           {"evs", evs}});
        }
    }
    out["qps"] = qps;
    json profiles = json::array();
    for (const auto& [id, p] : e.ctl.ev)
        profiles.push_back({{"id", id},
                            {"state", static_cast<int>(p.state)},
                            {"mode", static_cast<int>(p.mode)},
                            {"count", p.count},
                            {"min_active", p.min_active}});
    out["ev_profiles"] = profiles;
    return out;
}

json handle(const json& req) {
    if (!req.is_object()) return error(EINVAL);
    const auto cmd_it = req.find("cmd");
    if (cmd_it == req.end() || !cmd_it->is_string()) return error(EINVAL);
    const std::string cmd = cmd_it->get<std::string>();
    mrc_context* ctx = server_context();
    if (!ctx) return error(ENODEV);
    if (cmd == "list") return list(ctx);
    if (cmd == "port") {
        mrc_ctl_port_attr a{};
        a.port_admin_state =
            bool_field(req, "up") ? MRC_CTL_PORT_ADMIN_ENABLED : MRC_CTL_PORT_ADMIN_DISABLED;
        const auto port = static_cast<std::uint8_t>(uint_field(req, "port", UINT8_MAX));
        if (mrc_ctl_modify_port(ctx, port, &a, MRC_CTL_PORT_ADMIN_STATE) != 0) return error(errno);
        return json{{"ok", true}};
    }
    if (cmd == "ev_state") {
        mrc_ctl_ev_op_entry en{};
        const auto value = static_cast<std::uint32_t>(uint_field(req, "value", UINT32_MAX));
        std::memcpy(en.ev.val, &value, sizeof value);
        en.ev.port = static_cast<std::uint8_t>(uint_field(req, "port", UINT8_MAX));
        en.state = bool_field(req, "deny") ? MRC_CTL_EV_DENIED : MRC_CTL_EV_GOOD;
        const std::uint64_t profile = uint_field(req, "profile", UINT64_MAX, 0);
        mrc_ctl_ev_profile_attr a{};
        a.ev_op.op = MRC_CTL_EV_OP_MODIFY_EV_STATE;
        a.ev_op.entries = &en;
        a.ev_op.entry_count = 1;
        if (mrc_ctl_modify_ev_profile(ctx, profile, &a, MRC_CTL_EV_PROFILE_EV_OP) != 0)
            return error(errno);
        return json{{"ok", true}};
    }
    if (cmd == "probe") {
        const auto port = static_cast<std::uint8_t>(uint_field(req, "port", UINT8_MAX));
        if (port < 1 || port > ctx->dev->num_ports()) return error(EINVAL);
        const auto dgid_it = req.find("dgid");
        if (dgid_it == req.end() || !dgid_it->is_string()) return error(EINVAL);
        const std::string dgid = dgid_it->get<std::string>();
        // Out of range is refused, not clamped: the caller learns its request was not run as is.
        const int count = static_cast<int>(uint_field(req, "count", 64, 1));
        if (count < 1) return error(EINVAL);
        // The EVs are UDP source ports (UDP format): first + count - 1 must fit in 16 bits.
        const auto first_ev = static_cast<std::uint32_t>(
            uint_field(req, "ev", 0xffffu - static_cast<std::uint32_t>(count - 1), 0xc000u));
        const auto timeout_ms =
            static_cast<std::uint32_t>(uint_field(req, "timeout_ms", 4000, 100));
        if (timeout_ms < 1) return error(EINVAL);
        mrc_ctl_ep_req reqs[64] = {};
        mrc_ctl_ep_rsp rsps[64] = {};
        for (int i = 0; i < count; ++i) {
            mrc_ctl_ep_req& r = reqs[i];
            r.req_id = static_cast<std::uint16_t>(i + 1);
            std::memcpy(r.sgid.raw, ctx->dev->port(port - 1u).gid.data(), 16);
            in_addr v4;
            if (inet_pton(AF_INET, dgid.c_str(), &v4) == 1) {
                const wire::Ipv6Addr m =
                    wire::ipv4_mapped({static_cast<std::uint8_t>(ntohl(v4.s_addr) >> 24),
                                       static_cast<std::uint8_t>(ntohl(v4.s_addr) >> 16),
                                       static_cast<std::uint8_t>(ntohl(v4.s_addr) >> 8),
                                       static_cast<std::uint8_t>(ntohl(v4.s_addr))});
                std::memcpy(r.dgid.raw, m.data(), 16);
            } else if (inet_pton(AF_INET6, dgid.c_str(), r.dgid.raw) != 1) {
                return error(EINVAL);
            }
            r.ev_fmt_mode = MRC_CTL_EV_FMT_MODE_UDP;
            const std::uint32_t value = first_ev + static_cast<std::uint32_t>(i);
            std::memcpy(r.req_ev.val, &value, sizeof value);
            r.req_ev.port = port;
        }
        int got = 0;
        const std::uint32_t timeout_ns = timeout_ms * 1'000'000u;
        const int rc = mrc_ctl_ep_batch_send_wait(ctx, 0, MRC_CTL_EP_OP_EV_PROBE, reqs, count,
                                                  timeout_ns, rsps, &got);
        if (rc != 0 && errno != ETIMEDOUT) return error(errno);
        json replies = json::array();
        for (int i = 0; i < got; ++i)
            replies.push_back({{"req_id", rsps[i].req_id},
                               {"ev", first_ev + rsps[i].req_id - 1u},
                               {"port", rsps[i].port},
                               {"rtt_ns", rsps[i].rtt}});
        return json{{"ok", true}, {"sent", count}, {"replies", replies}};
    }
    return error(EINVAL);
}

/** How long one client may take to send its request, and to take each part of the reply: the
 *  server is one thread, and a client that connects and never sends (or never reads) must not hold
 *  it, and every later droce-mrcctl, for ever. */
constexpr int kClientMs = 2000;
/** The longest request line read. */
constexpr std::size_t kMaxLine = 65536;

/** The request line of client @p c; empty when none came within kClientMs. */
std::string read_request(int c) {
    using clock = std::chrono::steady_clock;
    const auto deadline = clock::now() + std::chrono::milliseconds(kClientMs);
    std::string line;
    char buf[4096];
    while (line.find('\n') == std::string::npos && line.size() < kMaxLine) {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now());
        if (left.count() <= 0) return {}; // a whole line in time, or nothing (a slow drip too)
        pollfd p{c, POLLIN, 0};
        const int r = poll(&p, 1, static_cast<int>(left.count()));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return {};
        const ssize_t n = recv(c, buf, sizeof buf, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break; // end of the request (a line without its newline is taken as is)
        line.append(buf, static_cast<std::size_t>(n));
    }
    return line;
}

void serve_one(int c) {
    ucred cred{};
    socklen_t len = sizeof cred;
    const bool allowed = getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 &&
                         (cred.uid == 0 || cred.uid == getuid());
    json reply;
    if (!allowed) {
        reply = error(EPERM);
    } else {
        const std::string line = read_request(c);
        try {
            reply = line.empty() ? error(ETIMEDOUT)
                                 : handle(json::parse(line.substr(0, line.find('\n'))));
        } catch (const std::exception&) {
            reply = error(EINVAL); // not JSON, or a field missing, of the wrong type, out of range
        }
    }
    std::string out;
    try {
        out = reply.dump() + "\n";
    } catch (const std::exception&) {
        out = error(EINVAL).dump() + "\n"; // e.g. a string that is not UTF-8
    }
    // A client that hung up (droce-mrcctl interrupted) must not raise SIGPIPE in this process,
    // whose default action would end the application: MSG_NOSIGNAL. SO_SNDTIMEO: one that never
    // reads a reply larger than the socket buffer does not hold the thread.
    const timeval tv{kClientMs / 1000, (kClientMs % 1000) * 1000};
    (void)setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    std::size_t off = 0;
    while (off < out.size()) {
        const ssize_t n = send(c, out.data() + off, out.size() - off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        off += static_cast<std::size_t>(n);
    }
}

void serve(int fd) {
    for (;;) {
        const int c = accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0) {
            if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE ||
                errno == ENOBUFS || errno == ENOMEM) {
                if (errno != EINTR && errno != ECONNABORTED) // out of descriptors: not for ever
                    std::this_thread::sleep_for(std::chrono::milliseconds(100));
                continue;
            }
            return;
        }
        try {
            serve_one(c);
        } catch (...) { // std::bad_alloc: this client only
        }
        close(c);
    }
}

} // namespace

void start_control_server(ibv_device* device) noexcept {
    static std::once_flag once;
    std::call_once(once, [device] {
        if (const char* v = std::getenv("DROCE_MRCCTL"); v && std::strcmp(v, "off") == 0) return;
        g_device = device;
        const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) return;
        sockaddr_un addr{};
        addr.sun_family = AF_UNIX;
        const int n = std::snprintf(addr.sun_path + 1, sizeof addr.sun_path - 1, "droce-mrcctl.%ld",
                                    static_cast<long>(getpid()));
        const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
        if (bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 || listen(fd, 4) != 0) {
            // EADDRINUSE: another process (any user may bind an abstract name) holds the name.
            std::fprintf(stderr,
                         "droce: no control socket droce-mrcctl.%ld (%s): droce-mrcctl cannot "
                         "reach this process\n",
                         static_cast<long>(getpid()), std::strerror(errno));
            close(fd);
            return;
        }
        try {
            std::thread(serve, fd).detach();
        } catch (const std::system_error&) {
            close(fd);
        }
    });
}

} // namespace droce::mrcapi
