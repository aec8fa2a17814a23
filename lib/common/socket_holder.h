/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * Which process holds a socket or a device node: for the errors that say "in use by PID N (name)"
 * (a memif socket, a UDP port, a vfio group). Control path only (reads /proc; allocates). Header
 * only, so that the DPDK and the io_uring drivers share it without depending on each other.
 */
#pragma once

#include <dirent.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace droce {

/** A process that holds a socket (pid 0: held, but by a process /proc does not show this user). */
struct SocketHolder {
    pid_t pid = 0;
    std::string comm; ///< /proc/PID/comm, the program's name
};

/** /proc/PID/comm of @p pid, the program's name (empty when unreadable). */
inline std::string process_comm(pid_t pid) {
    std::ifstream c("/proc/" + std::to_string(pid) + "/comm");
    std::string comm;
    std::getline(c, comm);
    return comm;
}

/** "PID 1234 (droce-perf)", or "PID 1234" without a comm. */
inline std::string to_string(const SocketHolder& h) {
    std::string s = "PID " + std::to_string(h.pid);
    if (!h.comm.empty()) s += " (" + h.comm + ")";
    return s;
}

/**
 * The first process other than @p skip with a file descriptor whose /proc/PID/fd link reads
 * @p target ("socket:[inode]", "/dev/vfio/7"). Another user's processes are visible to root only.
 * @return true when one was found (@p who filled), false otherwise.
 */
inline bool find_fd_holder(const std::string& target, SocketHolder* who, pid_t skip = 0) {
    DIR* proc = opendir("/proc");
    if (!proc) return false;
    bool found = false;
    while (!found) {
        dirent* e = readdir(proc);
        if (!e) break;
        const pid_t pid = static_cast<pid_t>(std::strtol(e->d_name, nullptr, 10));
        if (pid <= 0 || pid == skip) continue;
        const std::string fddir = std::string("/proc/") + e->d_name + "/fd";
        DIR* fds = opendir(fddir.c_str());
        if (!fds) continue;
        while (dirent* fe = readdir(fds)) {
            char buf[256];
            const ssize_t n = readlink((fddir + "/" + fe->d_name).c_str(), buf, sizeof buf - 1);
            if (n <= 0) continue;
            buf[n] = '\0';
            if (target == buf) {
                who->pid = pid;
                who->comm = process_comm(pid);
                found = true;
                break;
            }
        }
        closedir(fds);
    }
    closedir(proc);
    return found;
}

/** find_fd_holder for the socket of inode @p inode (false for inode 0), not in process @p skip. */
inline bool find_socket_holder(unsigned long inode, SocketHolder* who, pid_t skip = 0) {
    return inode != 0 && find_fd_holder("socket:[" + std::to_string(inode) + "]", who, skip);
}

/**
 * The inode of a UDP socket whose bind would clash with binding @p addr : @p port (the same
 * address or the wildcard), from /proc/net/udp (IPv4: @p addr 4 bytes, network order) or
 * /proc/net/udp6 (16 bytes); 0 when there is none. Lines: sl local_address rem_address st tx:rx
 * tr:when retrnsmt uid timeout inode ..., local_address the address as 32-bit words, each printed
 * in host order (%08X), then ':' and the port in hex.
 */
inline unsigned long udp_socket_inode(const std::uint8_t* addr, unsigned port, bool ipv4) {
    const std::size_t len = ipv4 ? 4 : 16;
    std::ifstream f(ipv4 ? "/proc/net/udp" : "/proc/net/udp6");
    std::string line;
    std::getline(f, line); // header
    while (std::getline(f, line)) {
        std::istringstream ls(line);
        std::string sl, local, remote, st, queues, timer, retr, uid, timeout, ino;
        if (!(ls >> sl >> local >> remote >> st >> queues >> timer >> retr >> uid >> timeout >>
              ino))
            continue;
        const std::size_t colon = local.rfind(':');
        if (colon != len * 2 || std::strtoul(local.c_str() + colon + 1, nullptr, 16) != port)
            continue;
        bool same = true, wildcard = true;
        for (std::size_t w = 0; w < len / 4; ++w) {
            const std::uint32_t word = static_cast<std::uint32_t>(
                std::strtoul(local.substr(w * 8, 8).c_str(), nullptr, 16));
            for (std::size_t b = 0; b < 4; ++b) {
                const auto byte = static_cast<std::uint8_t>(word >> (8 * b)); // little-endian host
                same = same && byte == addr[w * 4 + b];
                wildcard = wildcard && byte == 0;
            }
        }
        if (same || wildcard) return std::strtoul(ino.c_str(), nullptr, 10);
    }
    return 0;
}

} // namespace droce
