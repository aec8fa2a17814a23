/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * droce-stat's side of DPDK's telemetry socket (v2): finding the sockets of running droce
 * processes and asking them /droce/ commands (lib/telemetry/telemetry.h lists them).
 *
 * The socket is a Unix SOCK_SEQPACKET socket named dpdk_telemetry.v2 (dpdk_telemetry.v2:N for the
 * N-th further process of one file prefix) in the EAL runtime directory of the process's
 * --file-prefix: $RUNTIME_DIRECTORY/dpdk/PREFIX, else /var/run/dpdk/PREFIX for root and
 * $XDG_RUNTIME_DIR/dpdk/PREFIX (or /tmp/dpdk/PREFIX) for other users. On connecting, the process
 * sends one JSON message ({"version", "pid", "max_output_len"}); then each command written gets
 * one JSON reply {"<command>": value}, value null for a command the process does not know.
 */
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace droce::stat {

/** One telemetry socket of a process that answers /droce/devices. */
struct Process {
    std::string socket;      ///< path of the socket
    std::string file_prefix; ///< the directory's name: the EAL --file-prefix
    long pid = 0;            ///< from the socket's first message
    std::string version;     ///< the DPDK version the process runs
};

/** Where telemetry sockets are looked for, each followed by /dpdk/PREFIX/: $RUNTIME_DIRECTORY,
 *  /var/run, $XDG_RUNTIME_DIR, as root every /run/user/UID (a glob), and /tmp. */
[[nodiscard]] std::vector<std::string> socket_dirs();

/**
 * The telemetry sockets of running droce processes: every dpdk_telemetry.v2* under the runtime
 * directories of socket_dirs() (all of them: a root shell may read a user's processes too),
 * connected to and asked /droce/devices; sockets nobody listens on (a killed process's) and DPDK
 * processes without droce are left out. @p prefix / @p pid, when set (non-empty / non-zero), keep
 * only the matching ones.
 */
[[nodiscard]] std::vector<Process> find_processes(const std::string& prefix, long pid);

/** A connection to one process's telemetry socket. */
class Connection {
  public:
    /** Connects to @p socket and reads the first message. @param err the reason on failure. */
    [[nodiscard]] static std::optional<Connection> open(const std::string& socket,
                                                        std::string* err);
    Connection(Connection&& o) noexcept;
    Connection& operator=(Connection&&) = delete;
    Connection(const Connection&) = delete;
    ~Connection();

    /**
     * Sends @p command ("/droce/qp,droce_a/17") and returns the value of its reply (what follows
     * the command's name). @return nullopt with *err on a socket error or a reply that is not
     * JSON; a value with an "error" key when the process refused the parameters; null when the
     * process does not know the command.
     */
    [[nodiscard]] std::optional<nlohmann::ordered_json> query(const std::string& command,
                                                              std::string* err);
    [[nodiscard]] long pid() const noexcept { return pid_; }
    [[nodiscard]] const std::string& version() const noexcept { return version_; }

  private:
    Connection() = default;
    int fd_ = -1;
    long pid_ = 0;
    std::string version_;
    std::size_t max_len_ = 16384;
};

} // namespace droce::stat
