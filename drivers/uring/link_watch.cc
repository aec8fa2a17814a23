/* SPDX-License-Identifier: BSD-3-Clause */
#include "uring/link_watch.h"

#include "common/clock.h"

#include <ifaddrs.h>
#include <linux/if_addr.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace droce::uring {

namespace {

constexpr std::uint64_t kReadEveryNs = 1'000'000;
// Reads per up() at most: a burst of announcements about other interfaces must not hold the
// caller (the engine thread) for long; what is left is read a millisecond later.
constexpr int kMaxReads = 16;
// The kernel's announcements of a whole namespace land here (every interface, not only ours):
// room for a few hundred before an overrun.
constexpr int kNetlinkRcvbuf = 256 << 10;

// The rtnetlink layouts, read with memcpy (the NLMSG_* / RTA_* macros cast in C style).
constexpr std::uint32_t align4(std::uint32_t n) noexcept {
    return (n + 3u) & ~3u;
}
constexpr std::uint32_t kNlHdr = align4(sizeof(nlmsghdr));
constexpr std::uint32_t kRtaHdr = align4(sizeof(rtattr));

/** True when @p ifname holds @p addr itself (not only an address of its subnet). */
bool holds_address(const std::string& ifname, bool ipv4, const wire::Ipv6Addr& addr) {
    ifaddrs* list = nullptr;
    if (getifaddrs(&list) != 0) return false;
    bool held = false;
    for (ifaddrs* i = list; i && !held; i = i->ifa_next) {
        if (!i->ifa_addr || ifname != i->ifa_name) continue;
        if (ipv4 && i->ifa_addr->sa_family == AF_INET) {
            const auto* s = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
            held = std::memcmp(&s->sin_addr, addr.data() + 12, 4) == 0;
        } else if (!ipv4 && i->ifa_addr->sa_family == AF_INET6) {
            const auto* s = reinterpret_cast<const sockaddr_in6*>(i->ifa_addr);
            held = std::memcmp(&s->sin6_addr, addr.data(), 16) == 0;
        }
    }
    freeifaddrs(list);
    return held;
}

} // namespace

std::unique_ptr<LinkWatch> LinkWatch::open(const std::string& ifname, bool ipv4,
                                           const wire::Ipv6Addr& addr, std::string* err) {
    std::string scratch;
    if (!err) err = &scratch;
    if (ifname.empty() || ifname.size() >= IFNAMSIZ) {
        *err = "interface name empty or too long: " + ifname;
        return nullptr;
    }
    std::unique_ptr<LinkWatch> w(new LinkWatch());
    w->ifname_ = ifname;
    w->ipv4_ = ipv4;
    w->addr_ = addr;
    w->ifindex_.store(if_nametoindex(ifname.c_str()), std::memory_order_relaxed);
    if (w->ifindex() == 0) {
        *err = "interface " + ifname + ": " + std::strerror(errno);
        return nullptr;
    }
    w->ioctl_fd_ = socket(ipv4 ? AF_INET : AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (w->ioctl_fd_ < 0) {
        *err = std::string("socket (for SIOCGIFFLAGS): ") + std::strerror(errno);
        return nullptr;
    }
    // Whether the address is the interface's own is decided once: an address of lo's subnet
    // (127.0.0.2) is never added or removed, and has nothing to follow.
    w->addr_held_ = holds_address(ifname, ipv4, addr);

    const int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, NETLINK_ROUTE);
    if (fd < 0) {
        w->fallback_ = std::string("netlink socket: ") + std::strerror(errno);
    } else {
        // Unprivileged users may not raise it past net.core.rmem_max: no error then, a smaller
        // buffer (overruns are handled).
        int rcvbuf = kNetlinkRcvbuf;
        (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
        sockaddr_nl sa{};
        sa.nl_family = AF_NETLINK;
        sa.nl_groups = RTMGRP_LINK;
        if (w->addr_held_) sa.nl_groups |= ipv4 ? RTMGRP_IPV4_IFADDR : RTMGRP_IPV6_IFADDR;
        if (bind(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) != 0) {
            w->fallback_ = std::string("netlink bind (RTMGRP_LINK): ") + std::strerror(errno);
            close(fd);
        } else {
            w->nl_fd_ = fd;
        }
    }
    // After the subscription: a change from here on is announced, so this answer is never stale.
    w->ask_flags();
    return w;
}

LinkWatch::~LinkWatch() {
    if (nl_fd_ >= 0) close(nl_fd_);
    if (ioctl_fd_ >= 0) close(ioctl_fd_);
}

bool LinkWatch::up() const noexcept {
    const std::uint64_t now = coarse_monotonic_ns();
    if (now >= next_ns_.load(std::memory_order_relaxed) &&
        !reading_.test_and_set(std::memory_order_acquire)) {
        // acquire: the state the previous reader stored (and buf_) is seen before reading on.
        next_ns_.store(now + kReadEveryNs, std::memory_order_relaxed);
        if (nl_fd_ >= 0)
            drain();
        else
            ask_flags();
        reading_.clear(std::memory_order_release); // release: our stores before the next reader
    }
    return link_.load(std::memory_order_relaxed) &&
           (!addr_held_ || addr_present_.load(std::memory_order_relaxed));
}

void LinkWatch::ask_flags() const noexcept {
    // Announcements were lost: the interface may have been deleted and one of its name created
    // since (both announcements lost too), in which case the old index is gone.
    char old_name[IF_NAMESIZE];
    const unsigned idx = if_nametoindex(ifname_.c_str());
    if (idx != 0 && idx != ifindex() && !if_indextoname(ifindex(), old_name)) adopt(idx);
    ifreq ifr{};
    std::memcpy(ifr.ifr_name, ifname_.c_str(), ifname_.size()); // < IFNAMSIZ (open)
    bool up = false;
    if (ioctl(ioctl_fd_, SIOCGIFFLAGS, &ifr) == 0)
        up = (ifr.ifr_flags & IFF_UP) && (ifr.ifr_flags & IFF_RUNNING);
    link_.store(up, std::memory_order_relaxed);
}

void LinkWatch::drain() const noexcept {
    for (int i = 0; i < kMaxReads; ++i) {
        sockaddr_nl from{};
        socklen_t fromlen = sizeof from;
        const ssize_t n = recvfrom(nl_fd_, buf_, sizeof buf_, MSG_DONTWAIT,
                                   reinterpret_cast<sockaddr*>(&from), &fromlen);
        if (n < 0) {
            if (errno == ENOBUFS) { // announcements lost: ask for the flags, then read on
                overruns_.fetch_add(1, std::memory_order_relaxed);
                ask_flags();
                continue;
            }
            return; // EAGAIN: nothing more; EINTR and the rest: a millisecond later
        }
        // Only the kernel (port id 0) speaks for interfaces; rtnetlink lets no unprivileged
        // process send to its groups, and this keeps it so whatever the policy.
        if (from.nl_pid != 0) continue;
        handle(buf_, static_cast<std::uint32_t>(n));
    }
}

void LinkWatch::adopt(std::uint32_t idx) const noexcept {
    ifindex_.store(idx, std::memory_order_relaxed);
    deleted_.store(false, std::memory_order_relaxed);
    recreations_.fetch_add(1, std::memory_order_relaxed);
    if (!addr_held_) return;
    // Absent until the kernel says otherwise: the interface may hold the address already (one
    // renamed to the name, or its announcement lost in an overrun), so ask for its addresses; the
    // replies (RTM_NEWADDR from the kernel) go through handle() as announcements do.
    addr_present_.store(false, std::memory_order_relaxed);
    if (nl_fd_ < 0) return;
    struct {
        nlmsghdr h;
        ifaddrmsg a;
    } req{};
    req.h.nlmsg_len = sizeof req;
    req.h.nlmsg_type = RTM_GETADDR;
    req.h.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
    req.a.ifa_family = ipv4_ ? AF_INET : AF_INET6;
    sockaddr_nl to{};
    to.nl_family = AF_NETLINK;
    (void)sendto(nl_fd_, &req, sizeof req, MSG_DONTWAIT, reinterpret_cast<const sockaddr*>(&to),
                 sizeof to);
}

bool LinkWatch::names_me(const std::uint8_t* body, std::uint32_t body_len) const noexcept {
    for (std::uint32_t a = align4(sizeof(ifinfomsg)); a + kRtaHdr <= body_len;) {
        rtattr rta;
        std::memcpy(&rta, body + a, sizeof rta);
        if (rta.rta_len < kRtaHdr || rta.rta_len > body_len - a) return false;
        if (rta.rta_type == IFLA_IFNAME) {
            // NUL-terminated, within the attribute.
            const auto* name = reinterpret_cast<const char*>(body + a + kRtaHdr);
            const std::uint32_t n = rta.rta_len - kRtaHdr;
            return n == ifname_.size() + 1 && name[ifname_.size()] == '\0' &&
                   std::memcmp(name, ifname_.data(), ifname_.size()) == 0;
        }
        a += align4(rta.rta_len);
    }
    return false;
}

void LinkWatch::handle(const std::uint8_t* msg, std::uint32_t len) const noexcept {
    for (std::uint32_t off = 0; off + kNlHdr <= len;) {
        nlmsghdr h;
        std::memcpy(&h, msg + off, sizeof h);
        if (h.nlmsg_len < kNlHdr || h.nlmsg_len > len - off) return; // malformed: drop the rest
        const std::uint8_t* body = msg + off + kNlHdr;
        const std::uint32_t body_len = h.nlmsg_len - kNlHdr;
        off += align4(h.nlmsg_len);
        if ((h.nlmsg_type == RTM_NEWLINK || h.nlmsg_type == RTM_DELLINK) &&
            body_len >= sizeof(ifinfomsg)) {
            ifinfomsg ifi;
            std::memcpy(&ifi, body, sizeof ifi);
            if (ifi.ifi_index <= 0) continue;
            const auto idx = static_cast<std::uint32_t>(ifi.ifi_index);
            if (idx != ifindex()) {
                // Ours was deleted and an interface of its name appeared: follow that one (names
                // are unique in a namespace; a rename of ours keeps its index and is followed).
                if (h.nlmsg_type != RTM_NEWLINK || !deleted_.load(std::memory_order_relaxed) ||
                    !names_me(body, body_len))
                    continue;
                adopt(idx);
            }
            events_.fetch_add(1, std::memory_order_relaxed);
            // Ours again (moved to another namespace and back keeps the index): not deleted.
            deleted_.store(h.nlmsg_type == RTM_DELLINK, std::memory_order_relaxed);
            // ifi_flags are dev_get_flags(): IFF_RUNNING is operstate UP or UNKNOWN.
            const bool up = h.nlmsg_type == RTM_NEWLINK && (ifi.ifi_flags & IFF_UP) &&
                            (ifi.ifi_flags & IFF_RUNNING);
            link_.store(up, std::memory_order_relaxed);
        } else if ((h.nlmsg_type == RTM_NEWADDR || h.nlmsg_type == RTM_DELADDR) && addr_held_ &&
                   body_len >= sizeof(ifaddrmsg)) {
            ifaddrmsg ifa;
            std::memcpy(&ifa, body, sizeof ifa);
            if (ifa.ifa_index != ifindex() || ifa.ifa_family != (ipv4_ ? AF_INET : AF_INET6))
                continue;
            // IPv4: IFA_LOCAL is the address (IFA_ADDRESS the peer's on a point-to-point link);
            // IPv6 has IFA_ADDRESS only.
            const unsigned short want = ipv4_ ? IFA_LOCAL : IFA_ADDRESS;
            const std::uint32_t alen = ipv4_ ? 4 : 16;
            const std::uint8_t* mine = ipv4_ ? addr_.data() + 12 : addr_.data();
            for (std::uint32_t a = align4(sizeof(ifaddrmsg)); a + kRtaHdr <= body_len;) {
                rtattr rta;
                std::memcpy(&rta, body + a, sizeof rta);
                if (rta.rta_len < kRtaHdr || rta.rta_len > body_len - a) break;
                if (rta.rta_type == want && rta.rta_len - kRtaHdr == alen &&
                    std::memcmp(body + a + kRtaHdr, mine, alen) == 0) {
                    events_.fetch_add(1, std::memory_order_relaxed);
                    addr_present_.store(h.nlmsg_type == RTM_NEWADDR, std::memory_order_relaxed);
                    break;
                }
                a += align4(rta.rta_len);
            }
        }
    }
}

} // namespace droce::uring
