/* SPDX-License-Identifier: BSD-3-Clause */
#include "client.h"

#include <glob.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <set>

namespace droce::stat {

namespace {

/** How long a reply may take: a command waits up to 2 s for a control lock in the process. */
constexpr int kReplyMs = 5000;

/** Reads one message of at most @p max bytes within kReplyMs. */
bool read_message(int fd, std::size_t max, std::string* out, std::string* err) {
    pollfd p{fd, POLLIN, 0};
    const int r = poll(&p, 1, kReplyMs);
    if (r <= 0) {
        *err = r == 0 ? "no reply within 5 s" : std::strerror(errno);
        return false;
    }
    out->assign(max + 1, '\0');
    const ssize_t n = recv(fd, out->data(), out->size(), 0);
    if (n <= 0) {
        *err = n == 0 ? "the process closed the socket" : std::strerror(errno);
        return false;
    }
    out->resize(static_cast<std::size_t>(n));
    return true;
}

} // namespace

std::optional<Connection> Connection::open(const std::string& socket_path, std::string* err) {
    sockaddr_un addr{};
    if (socket_path.size() >= sizeof addr.sun_path) {
        *err = socket_path + ": path too long";
        return std::nullopt;
    }
    Connection c;
    c.fd_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (c.fd_ < 0) {
        *err = std::strerror(errno);
        return std::nullopt;
    }
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, socket_path.c_str(), socket_path.size());
    if (connect(c.fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
        *err = socket_path + ": " + std::strerror(errno);
        return std::nullopt;
    }
    std::string msg;
    if (!read_message(c.fd_, 4096, &msg, err)) {
        *err = socket_path + ": " + *err;
        return std::nullopt;
    }
    const nlohmann::ordered_json info = nlohmann::ordered_json::parse(msg, nullptr, false);
    if (!info.is_object() || !info.contains("pid")) {
        *err = socket_path + ": not a DPDK telemetry v2 socket";
        return std::nullopt;
    }
    c.pid_ = info.value("pid", 0L);
    c.version_ = info.value("version", std::string());
    c.max_len_ = info.value("max_output_len", std::size_t{16384});
    return c;
}

Connection::Connection(Connection&& o) noexcept
    : fd_(o.fd_), pid_(o.pid_), version_(std::move(o.version_)), max_len_(o.max_len_) {
    o.fd_ = -1;
}

Connection::~Connection() {
    if (fd_ >= 0) close(fd_);
}

std::optional<nlohmann::ordered_json> Connection::query(const std::string& command,
                                                        std::string* err) {
    if (send(fd_, command.data(), command.size(), MSG_NOSIGNAL) < 0) {
        *err = std::strerror(errno);
        return std::nullopt;
    }
    std::string msg;
    if (!read_message(fd_, max_len_, &msg, err)) return std::nullopt;
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(msg, nullptr, false);
    if (j.is_discarded() || !j.is_object() || j.size() != 1) {
        *err = "reply to " + command + " is not JSON (longer than the process's reply limit?)";
        return std::nullopt;
    }
    return j.begin().value();
}

std::vector<std::string> socket_dirs() {
    std::vector<std::string> bases;
    if (const char* r = std::getenv("RUNTIME_DIRECTORY"); r && *r) bases.emplace_back(r);
    bases.emplace_back("/var/run");
    if (const char* x = std::getenv("XDG_RUNTIME_DIR"); x && *x) bases.emplace_back(x);
    // Root reads every user's processes: theirs are under their own runtime directories.
    if (geteuid() == 0) bases.emplace_back("/run/user/*");
    bases.emplace_back("/tmp");
    return bases;
}

std::vector<Process> find_processes(const std::string& prefix, long pid) {
    std::vector<Process> out;
    std::set<std::string> seen;
    for (const std::string& base : socket_dirs()) {
        const std::string pattern =
            base + "/dpdk/" + (prefix.empty() ? "*" : prefix) + "/dpdk_telemetry.v2*";
        glob_t g{};
        if (glob(pattern.c_str(), 0, nullptr, &g) == 0) {
            for (std::size_t i = 0; i < g.gl_pathc; ++i) {
                char real[PATH_MAX];
                const std::string path = g.gl_pathv[i];
                if (!realpath(path.c_str(), real) || !seen.insert(real).second) continue;
                std::string err;
                auto c = Connection::open(path, &err);
                if (!c || (pid && c->pid() != pid)) continue;
                auto devs = c->query("/droce/devices", &err);
                if (!devs || !devs->is_object() || !devs->contains("devices")) continue;
                const std::string dir = path.substr(0, path.rfind('/'));
                out.push_back(
                    Process{path, dir.substr(dir.rfind('/') + 1), c->pid(), c->version()});
            }
        }
        globfree(&g);
    }
    std::sort(out.begin(), out.end(),
              [](const Process& a, const Process& b) { return a.pid < b.pid; });
    return out;
}

} // namespace droce::stat
