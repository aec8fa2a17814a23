/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * The out-of-band channel of droce-perf: a stream socket that carries fixed-size messages (test
 * parameters, QP information, start barrier, results) between the two ends, as perftest does over
 * TCP. The demo uses an AF_UNIX socketpair between two threads of one process; the wire format is
 * the same (both ends are the same binary on the same host architecture, so messages are plain
 * structs with a magic number and version).
 *
 * Thread rules: one Channel is used by one thread at a time. Control path only.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace droce::perf {

class Channel {
  public:
    Channel() = default;
    explicit Channel(int fd) : fd_(fd) {}
    ~Channel();
    Channel(Channel&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
    Channel& operator=(Channel&& o) noexcept;
    Channel(const Channel&) = delete;
    Channel& operator=(const Channel&) = delete;

    [[nodiscard]] bool valid() const noexcept { return fd_ >= 0; }
    /** Sends @p len bytes. @return empty, or the error (peer closed, errno text). */
    [[nodiscard]] std::string send(const void* data, std::size_t len) const;
    /**
     * Receives exactly @p len bytes, waiting at most @p timeout_ms in total.
     * @return empty, or "timed out" / "peer closed the connection" / errno text.
     */
    [[nodiscard]] std::string recv(void* data, std::size_t len, int timeout_ms) const;
    /** True when at least one byte (or end of stream) can be read without blocking. */
    [[nodiscard]] bool readable() const noexcept;

  private:
    int fd_ = -1;
};

/** What tcp_accept_one() puts in *err when @p stop_fd became readable first. */
inline constexpr const char* kStopped = "stopped";

/**
 * Listens on TCP @p port (all addresses, SO_REUSEADDR) and accepts one connection within
 * @p timeout_ms (-1: no limit). When @p stop_fd (>= 0: an eventfd or pipe) becomes readable
 * first, gives up with *err = kStopped: a server stopped by a signal while it waits.
 * @return the channel or an invalid one with *err set (bind/listen/poll/accept errno text, "no
 * client ... in time", kStopped).
 */
[[nodiscard]] Channel tcp_accept_one(std::uint16_t port, int timeout_ms, std::string* err,
                                     int stop_fd = -1);
/**
 * Connects to @p host : @p port, retrying while the server is not listening yet, for up to
 * @p timeout_ms. @return the channel or an invalid one with *err set.
 */
[[nodiscard]] Channel tcp_connect(const std::string& host, std::uint16_t port, int timeout_ms,
                                  std::string* err);
/** Two connected ends (AF_UNIX socketpair). @return false with *err set. */
[[nodiscard]] bool channel_pair(Channel* a, Channel* b, std::string* err);

} // namespace droce::perf
