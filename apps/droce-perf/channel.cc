/* SPDX-License-Identifier: BSD-3-Clause */
#include "channel.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

namespace droce::perf {

namespace {

std::int64_t now_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

std::string errno_text(const char* what) {
    return std::string(what) + ": " + std::strerror(errno);
}

} // namespace

Channel::~Channel() {
    if (fd_ >= 0) close(fd_);
}

Channel& Channel::operator=(Channel&& o) noexcept {
    if (this != &o) {
        if (fd_ >= 0) close(fd_);
        fd_ = o.fd_;
        o.fd_ = -1;
    }
    return *this;
}

std::string Channel::send(const void* data, std::size_t len) const {
    const auto* p = static_cast<const std::uint8_t*>(data);
    while (len > 0) {
        const ssize_t n = ::send(fd_, p, len, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR) continue;
            return errno_text("send");
        }
        p += n;
        len -= static_cast<std::size_t>(n);
    }
    return {};
}

std::string Channel::recv(void* data, std::size_t len, int timeout_ms) const {
    auto* p = static_cast<std::uint8_t*>(data);
    const std::int64_t deadline = now_ms() + timeout_ms;
    while (len > 0) {
        const std::int64_t left = deadline - now_ms();
        if (left <= 0) return "timed out";
        pollfd pfd{fd_, POLLIN, 0};
        const int r = poll(&pfd, 1, static_cast<int>(left));
        if (r < 0) {
            if (errno == EINTR) continue;
            return errno_text("poll");
        }
        if (r == 0) continue;
        const ssize_t n = ::recv(fd_, p, len, 0);
        if (n == 0) return "peer closed the connection";
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN) continue;
            return errno_text("recv");
        }
        p += n;
        len -= static_cast<std::size_t>(n);
    }
    return {};
}

bool Channel::readable() const noexcept {
    pollfd pfd{fd_, POLLIN, 0};
    return poll(&pfd, 1, 0) > 0;
}

Channel tcp_accept_one(std::uint16_t port, int timeout_ms, std::string* err, int stop_fd) {
    const int ls = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int fam = AF_INET6;
    int lfd = ls;
    if (lfd < 0) {
        lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        fam = AF_INET;
    }
    if (lfd < 0) {
        *err = errno_text("socket");
        return {};
    }
    const int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    int rc;
    if (fam == AF_INET6) {
        const int zero = 0;
        setsockopt(lfd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero); // IPv4 clients too
        sockaddr_in6 a{};
        a.sin6_family = AF_INET6;
        a.sin6_port = htons(port);
        a.sin6_addr = in6addr_any;
        rc = bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    } else {
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(port);
        a.sin_addr.s_addr = htonl(INADDR_ANY);
        rc = bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    }
    if (rc < 0 || listen(lfd, 1) < 0) {
        *err = errno_text(("listen on TCP port " + std::to_string(port)).c_str());
        close(lfd);
        return {};
    }
    pollfd pfd[2] = {{lfd, POLLIN, 0}, {stop_fd, POLLIN, 0}};
    int r;
    do
        r = poll(pfd, stop_fd >= 0 ? 2 : 1, timeout_ms);
    while (r < 0 && errno == EINTR);
    if (r <= 0 || (pfd[0].revents & POLLIN) == 0) {
        *err = r == 0  ? "no client connected to TCP port " + std::to_string(port) + " in time"
               : r < 0 ? errno_text("poll")
                       : std::string(kStopped);
        close(lfd);
        return {};
    }
    const int fd = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    close(lfd);
    if (fd < 0) {
        *err = errno_text("accept");
        return {};
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return Channel(fd);
}

Channel tcp_connect(const std::string& host, std::uint16_t port, int timeout_ms, std::string* err) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    const std::string service = std::to_string(port);
    if (const int g = getaddrinfo(host.c_str(), service.c_str(), &hints, &res); g != 0) {
        *err = "cannot resolve " + host + ": " + gai_strerror(g);
        return {};
    }
    const std::int64_t deadline = now_ms() + timeout_ms;
    std::string last = "timed out";
    while (now_ms() < deadline) {
        for (addrinfo* ai = res; ai; ai = ai->ai_next) {
            const int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
            if (fd < 0) continue;
            if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
                freeaddrinfo(res);
                const int one = 1;
                setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                return Channel(fd);
            }
            last = errno_text("connect");
            close(fd);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    freeaddrinfo(res);
    *err = "cannot connect to " + host + ":" + service + ": " + last;
    return {};
}

bool channel_pair(Channel* a, Channel* b, std::string* err) {
    int fds[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) < 0) {
        *err = errno_text("socketpair");
        return false;
    }
    *a = Channel(fds[0]);
    *b = Channel(fds[1]);
    return true;
}

} // namespace droce::perf
