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
 * Replies: {"ok":true,...} or {"ok":false,"errno":E,"error":"text"}.
 *
 * The commands run on an MRC context of the server's own, on an ibv_context it opens on the same
 * device (the runtime is shared: same Device, same engine). Control path only.
 */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>
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
    mrc_context* ctx = server_context();
    if (!ctx) return error(ENODEV);
    const std::string cmd = req.value("cmd", "");
    if (cmd == "list") return list(ctx);
    if (cmd == "port") {
        mrc_ctl_port_attr a{};
        a.port_admin_state =
            req.at("up").get<bool>() ? MRC_CTL_PORT_ADMIN_ENABLED : MRC_CTL_PORT_ADMIN_DISABLED;
        if (mrc_ctl_modify_port(ctx, req.at("port").get<std::uint8_t>(), &a,
                                MRC_CTL_PORT_ADMIN_STATE) != 0)
            return error(errno);
        return json{{"ok", true}};
    }
    if (cmd == "ev_state") {
        mrc_ctl_ev_op_entry en{};
        const std::uint32_t value = req.at("value").get<std::uint32_t>();
        std::memcpy(en.ev.val, &value, sizeof value);
        en.ev.port = req.at("port").get<std::uint8_t>();
        en.state = req.at("deny").get<bool>() ? MRC_CTL_EV_DENIED : MRC_CTL_EV_GOOD;
        mrc_ctl_ev_profile_attr a{};
        a.ev_op.op = MRC_CTL_EV_OP_MODIFY_EV_STATE;
        a.ev_op.entries = &en;
        a.ev_op.entry_count = 1;
        if (mrc_ctl_modify_ev_profile(ctx, req.value("profile", std::uint64_t{0}), &a,
                                      MRC_CTL_EV_PROFILE_EV_OP) != 0)
            return error(errno);
        return json{{"ok", true}};
    }
    if (cmd == "probe") {
        const auto port = req.at("port").get<std::uint8_t>();
        if (port < 1 || port > ctx->dev->num_ports()) return error(EINVAL);
        const std::string dgid = req.at("dgid").get<std::string>();
        const int count = std::clamp(req.value("count", 1), 1, 64);
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
            const std::uint32_t value = req.value("ev", 0xc000u) + static_cast<std::uint32_t>(i);
            std::memcpy(r.req_ev.val, &value, sizeof value);
            r.req_ev.port = port;
        }
        int got = 0;
        const auto timeout_ns = static_cast<std::uint32_t>(
            std::clamp(req.value("timeout_ms", 100), 1, 4000) * 1'000'000u);
        const int rc = mrc_ctl_ep_batch_send_wait(ctx, 0, MRC_CTL_EP_OP_EV_PROBE, reqs, count,
                                                  timeout_ns, rsps, &got);
        if (rc != 0 && errno != ETIMEDOUT) return error(errno);
        json replies = json::array();
        for (int i = 0; i < got; ++i)
            replies.push_back({{"req_id", rsps[i].req_id},
                               {"ev", req.value("ev", 0xc000u) + rsps[i].req_id - 1u},
                               {"port", rsps[i].port},
                               {"rtt_ns", rsps[i].rtt}});
        return json{{"ok", true}, {"sent", count}, {"replies", replies}};
    }
    return error(EINVAL);
}

void serve(int fd) {
    for (;;) {
        const int c = accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            return;
        }
        ucred cred{};
        socklen_t len = sizeof cred;
        std::string line;
        if (getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 &&
            (cred.uid == 0 || cred.uid == getuid())) {
            char buf[4096];
            while (line.find('\n') == std::string::npos && line.size() < 65536) {
                const ssize_t n = read(c, buf, sizeof buf);
                if (n <= 0) break;
                line.append(buf, static_cast<std::size_t>(n));
            }
        }
        json reply;
        try {
            reply =
                line.empty() ? error(EPERM) : handle(json::parse(line.substr(0, line.find('\n'))));
        } catch (const std::exception&) {
            reply = error(EINVAL);
        }
        const std::string out = reply.dump() + "\n";
        std::size_t off = 0;
        while (off < out.size()) {
            const ssize_t n = write(c, out.data() + off, out.size() - off);
            if (n <= 0) break;
            off += static_cast<std::size_t>(n);
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
