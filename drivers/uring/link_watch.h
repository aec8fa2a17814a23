/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * droce::uring::LinkWatch — the link state of one interface from rtnetlink, for a port whose
 * frames the kernel routes (UringPort::link_up()). Include as "uring/link_watch.h".
 *
 * The watch opens a NETLINK_ROUTE socket bound to the RTMGRP_LINK group (and RTMGRP_IPV4_IFADDR or
 * RTMGRP_IPV6_IFADDR when it follows an address): the kernel then multicasts an RTM_NEWLINK to it
 * whenever the interface's flags or operational state change, which needs no privilege. up()
 * reads what has arrived with recvfrom(MSG_DONTWAIT), at most once a millisecond, so a caller
 * polling it on every engine pass pays one system call a millisecond and learns of a change at
 * most a millisecond after the kernel announced it; between reads it answers from the last state.
 *
 * Link up means the interface's IFF_UP and IFF_RUNNING (IFF_RUNNING is the kernel's operstate
 * UP or UNKNOWN: the carrier is there), as before with SIOCGIFFLAGS; an interface deleted
 * (RTM_DELLINK) is down until an interface of the same name is created (RTM_NEWLINK with its
 * IFLA_IFNAME): the watch then follows the new one's index (recreations()), which holds no address
 * until one is announced for it. When the address the port binds is one the interface holds
 * itself (not one of its subnet, as 127.0.0.2 on lo's 127.0.0.1/8), removing it (RTM_DELADDR)
 * counts as down too, adding it back (RTM_NEWADDR) as up again: the kernel sends nothing from an
 * address it no longer has.
 *
 * If the kernel overruns the socket (ENOBUFS: more announcements than its receive buffer holds,
 * e.g. many interfaces of the namespace changing at once), the link flags are asked again with
 * SIOCGIFFLAGS (overruns counted); the address is then kept as last known. Where a netlink socket
 * cannot be had (a sandbox forbidding AF_NETLINK), the watch asks SIOCGIFFLAGS at most once a
 * millisecond instead (netlink() false, the reason in fallback_reason()).
 *
 * Thread rules: up() and the introspection calls may be called from any thread, concurrently;
 * one caller at a time reads the socket (an atomic flag taken with test_and_set, never waited
 * for: a caller that finds it taken answers from the last state). up() allocates nothing, takes
 * no lock and throws nothing. open() and the destructor are control path.
 */
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "wire/ipv6.h"

namespace droce::uring {

class LinkWatch {
  public:
    /**
     * Starts watching interface @p ifname: subscribes first, then reads the present flags
     * (SIOCGIFFLAGS), so no change between the two is missed.
     * @param ifname interface name (shorter than IFNAMSIZ), in this process's network namespace.
     * @param ipv4   family of @p addr (IPv4-mapped when true).
     * @param addr   the port's address; followed only when @p ifname holds it exactly.
     * @param err    set on failure.
     * @return the watch, or nullptr with *err: the interface does not exist (if_nametoindex
     *         errno), or no socket of the family could be opened for SIOCGIFFLAGS. A netlink
     *         socket that cannot be opened or bound is no failure (the SIOCGIFFLAGS fallback).
     */
    [[nodiscard]] static std::unique_ptr<LinkWatch>
    open(const std::string& ifname, bool ipv4, const wire::Ipv6Addr& addr, std::string* err);
    /** Closes the sockets. */
    ~LinkWatch();
    LinkWatch(const LinkWatch&) = delete;
    LinkWatch& operator=(const LinkWatch&) = delete;

    /** IFF_UP and IFF_RUNNING, and the followed address present (see the file comment). At most
     *  one read of the socket (or one SIOCGIFFLAGS in the fallback) a millisecond. Any thread. */
    [[nodiscard]] bool up() const noexcept;

    // ---- introspection (any thread) ----
    /** True: state from rtnetlink; false: SIOCGIFFLAGS polled (fallback_reason() says why). */
    [[nodiscard]] bool netlink() const noexcept { return nl_fd_ >= 0; }
    [[nodiscard]] const std::string& fallback_reason() const noexcept { return fallback_; }
    /** The interface's index (if_nametoindex; a new one after the interface was deleted and
     *  created again). */
    [[nodiscard]] std::uint32_t ifindex() const noexcept {
        return ifindex_.load(std::memory_order_relaxed);
    }
    /** Times the interface was deleted and one of its name followed instead. */
    [[nodiscard]] std::uint64_t recreations() const noexcept {
        return recreations_.load(std::memory_order_relaxed);
    }
    /** True when the interface holds the port's address itself (its removal counts as down). */
    [[nodiscard]] bool follows_address() const noexcept { return addr_held_; }
    /** Announcements about this interface (link or followed address) read so far. */
    [[nodiscard]] std::uint64_t events() const noexcept {
        return events_.load(std::memory_order_relaxed);
    }
    /** Times the kernel overran the socket (ENOBUFS), each followed by a SIOCGIFFLAGS. */
    [[nodiscard]] std::uint64_t overruns() const noexcept {
        return overruns_.load(std::memory_order_relaxed);
    }

  private:
    LinkWatch() = default;
    void drain() const noexcept;
    void ask_flags() const noexcept;
    void handle(const std::uint8_t* msg, std::uint32_t len) const noexcept;
    /** Follows interface @p idx from now on (ours was deleted; one of its name exists). */
    void adopt(std::uint32_t idx) const noexcept;
    /** True when an RTM_NEWLINK body's IFLA_IFNAME is this watch's interface name. */
    [[nodiscard]] bool names_me(const std::uint8_t* body, std::uint32_t body_len) const noexcept;

    int nl_fd_ = -1;    ///< rtnetlink socket, -1 in the fallback
    int ioctl_fd_ = -1; ///< datagram socket for SIOCGIFFLAGS
    std::string ifname_;
    std::string fallback_;
    mutable std::atomic<std::uint32_t> ifindex_{0};
    mutable std::atomic<bool> deleted_{false}; ///< our index had an RTM_DELLINK
    mutable std::atomic<std::uint64_t> recreations_{0};
    bool ipv4_ = true;
    bool addr_held_ = false;
    wire::Ipv6Addr addr_{};
    mutable std::atomic_flag reading_ = ATOMIC_FLAG_INIT;
    mutable std::atomic<std::uint64_t> next_ns_{0};
    mutable std::atomic<bool> link_{false};
    mutable std::atomic<bool> addr_present_{true};
    mutable std::atomic<std::uint64_t> events_{0};
    mutable std::atomic<std::uint64_t> overruns_{0};
    /** Receive buffer, used only by the caller holding reading_: one datagram of announcements
     *  (an RTM_NEWLINK with its attributes is 1-2 KiB). */
    alignas(8) mutable std::uint8_t buf_[16384];
};

} // namespace droce::uring
