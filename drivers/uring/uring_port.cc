/* SPDX-License-Identifier: BSD-3-Clause */
#include "uring/uring_port.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <liburing.h>
#include <linux/filter.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bitset>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <optional>

#include "common/clock.h"
#include "common/socket_holder.h"
#include "wire/ipv4.h"
#include "wire/udp.h"

namespace droce::uring {

namespace {

// Layout of every slot. A multishot recvmsg writes io_uring_recvmsg_out, then msg_namelen bytes of
// source address, then msg_controllen bytes of control messages, then the payload; the batched
// receive points its msghdr at the same places, so both leave the payload at kPayloadOff. The
// headers rebuilt in front of it (at most 14 + 40 + 8 = 62 bytes) overwrite the address and
// control bytes once they have been read.
constexpr std::uint32_t kOutLen = 16; // sizeof(io_uring_recvmsg_out)
constexpr std::uint32_t kNameLen = 32;
constexpr std::uint32_t kCtrlLen = 64;
constexpr std::uint32_t kNameOff = kOutLen;
constexpr std::uint32_t kCtrlOff = kNameOff + kNameLen;
constexpr std::uint32_t kPayloadOff = kCtrlOff + kCtrlLen;
constexpr std::uint32_t kMaxHeaders = 14 + 40 + 8;
static_assert(kPayloadOff >= kMaxHeaders);
static_assert(kCtrlOff % 8 == 0, "control messages are read in place: keep them aligned");
constexpr std::uint32_t kMaxMtu = 9000;
constexpr unsigned short kBufGroup = 7;
// SENDMSG_ZC's usage report (kernel 6.2; liburing 2.3 predates the names): asked with the first
// flag in the SQE's ioprio, answered in the notification CQE's res.
#ifndef IORING_SEND_ZC_REPORT_USAGE
#define IORING_SEND_ZC_REPORT_USAGE (1U << 3)
#endif
#ifndef IORING_NOTIF_USAGE_ZC_COPIED
#define IORING_NOTIF_USAGE_ZC_COPIED (1U << 31)
#endif

/** What a CQE completes, in the top bits of user_data; the slot is in the low 32 bits. */
enum Tag : std::uint64_t {
    kTagTx = 1,
    kTagRxMulti = 2,
    kTagRxSingle = 3,
    kTagCancel = 4,
    kTagTxZc = 5,  ///< a SENDMSG_ZC: a result CQE, then (IORING_CQE_F_MORE) a notification CQE
    kTagTxGso = 6, ///< a sendmsg of several frames with UDP_SEGMENT: its iovecs name the slots
};
constexpr std::uint64_t user_data(Tag t, std::uint32_t slot) noexcept {
    return (static_cast<std::uint64_t>(t) << 32) | slot;
}

/** Where a slot is (UringPort::where_). */
enum Where : std::uint8_t { kFree, kKernelRx, kCaller, kTxInFlight };

std::string errno_text(const char* what, int e) {
    return std::string(what) + ": " + std::strerror(e);
}

void fill_sockaddr(bool ipv4, const wire::Ipv6Addr& a, std::uint16_t port, sockaddr_in6* out,
                   socklen_t* len) noexcept {
    std::memset(out, 0, sizeof *out);
    if (ipv4) {
        auto* s4 = reinterpret_cast<sockaddr_in*>(out);
        s4->sin_family = AF_INET;
        s4->sin_port = htons(port);
        std::memcpy(&s4->sin_addr, a.data() + 12, 4);
        *len = sizeof(sockaddr_in);
    } else {
        out->sin6_family = AF_INET6;
        out->sin6_port = htons(port);
        std::memcpy(&out->sin6_addr, a.data(), 16);
        *len = sizeof(sockaddr_in6);
    }
}

/** The interface that holds @p a, or whose subnet does (127.0.0.2 is on lo's 127.0.0.1/8); "" when
 *  none does, or when the interfaces cannot be listed (then @p list_errno is set). */
std::string interface_of(bool ipv4, const wire::Ipv6Addr& a, int* list_errno) {
    ifaddrs* list = nullptr;
    *list_errno = 0;
    if (getifaddrs(&list) != 0) {
        *list_errno = errno;
        return "";
    }
    std::string exact, subnet;
    for (ifaddrs* i = list; i; i = i->ifa_next) {
        if (!i->ifa_addr || !i->ifa_netmask) continue;
        const int fam = i->ifa_addr->sa_family;
        const std::uint8_t* ad = nullptr;
        const std::uint8_t* mk = nullptr;
        const std::uint8_t* want = ipv4 ? a.data() + 12 : a.data();
        std::size_t n = 0;
        if (ipv4 && fam == AF_INET) {
            ad = reinterpret_cast<const std::uint8_t*>(
                &reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr);
            mk = reinterpret_cast<const std::uint8_t*>(
                &reinterpret_cast<const sockaddr_in*>(i->ifa_netmask)->sin_addr);
            n = 4;
        } else if (!ipv4 && fam == AF_INET6) {
            ad = reinterpret_cast<const std::uint8_t*>(
                &reinterpret_cast<const sockaddr_in6*>(i->ifa_addr)->sin6_addr);
            mk = reinterpret_cast<const std::uint8_t*>(
                &reinterpret_cast<const sockaddr_in6*>(i->ifa_netmask)->sin6_addr);
            n = 16;
        } else {
            continue;
        }
        if (std::memcmp(ad, want, n) == 0 && exact.empty()) exact = i->ifa_name;
        bool in = true;
        for (std::size_t k = 0; k < n; ++k)
            if ((ad[k] & mk[k]) != (want[k] & mk[k])) in = false;
        if (in && subnet.empty()) subnet = i->ifa_name;
    }
    freeifaddrs(list);
    return exact.empty() ? subnet : exact;
}

bool set_int(int fd, int level, int opt, int v) noexcept {
    return setsockopt(fd, level, opt, &v, sizeof v) == 0;
}

void put_be16(std::uint8_t* p, std::uint16_t v) noexcept {
    p[0] = static_cast<std::uint8_t>(v >> 8);
    p[1] = static_cast<std::uint8_t>(v);
}
std::uint16_t get_be16(const std::uint8_t* p) noexcept {
    return static_cast<std::uint16_t>(p[0] << 8 | p[1]);
}

/**
 * The classic BPF program of the packet socket (RecvMode::packet). A SOCK_DGRAM packet socket runs
 * it on the packet from the IP header on. It keeps (whole) only what the UDP socket bound to
 * (addr, udp_port) would get: IPv4 or IPv6 with the right version, UDP, to addr and udp_port, not
 * a fragment (RoCEv2 is sent with DF; the kernel would reassemble for the UDP socket, the packet
 * socket sees pieces), and not a copy of a frame this host sends (on lo every frame is seen twice:
 * outgoing and incoming). IPv6: UDP must be the first next header (RoCEv2 uses no extension
 * headers). With @p slot >= 0 (share = yes) also only frames for that steering slot, and no
 * slot probe. Everything else never leaves the kernel.
 */
std::vector<sock_filter> packet_filter(bool ipv4, const wire::Ipv6Addr& a, std::uint16_t port,
                                       int slot) {
    std::vector<sock_filter> f;
    // Conditional jumps to the final "drop": their false branch (jf), or their true branch where
    // jt holds the placeholder 0xff. Resolved once the program's length is known.
    std::vector<std::size_t> to_drop;
    const auto stmt = [&](std::uint16_t code, std::uint32_t k) {
        f.push_back(sock_filter{code, 0, 0, k});
    };
    const auto jeq_or_drop = [&](std::uint32_t k) {
        to_drop.push_back(f.size());
        f.push_back(sock_filter{BPF_JMP | BPF_JEQ | BPF_K, 0, 0, k});
    };
    const auto be32 = [&](std::size_t i) {
        return static_cast<std::uint32_t>(a[i]) << 24 | static_cast<std::uint32_t>(a[i + 1]) << 16 |
               static_cast<std::uint32_t>(a[i + 2]) << 8 | a[i + 3];
    };
    // Not PACKET_OUTGOING (here a match drops: the true branch).
    stmt(BPF_LD | BPF_W | BPF_ABS, static_cast<std::uint32_t>(SKF_AD_OFF + SKF_AD_PKTTYPE));
    to_drop.push_back(f.size());
    f.push_back(sock_filter{BPF_JMP | BPF_JEQ | BPF_K, 0xff, 0, PACKET_OUTGOING});
    stmt(BPF_LD | BPF_B | BPF_ABS, 0);
    stmt(BPF_ALU | BPF_AND | BPF_K, 0xf0);
    jeq_or_drop(ipv4 ? 0x40 : 0x60);
    if (ipv4) {
        stmt(BPF_LD | BPF_B | BPF_ABS, 9);
        jeq_or_drop(wire::kIpProtoUdp);
        stmt(BPF_LD | BPF_H | BPF_ABS, 6); // flags and fragment offset: MF or an offset
        to_drop.push_back(f.size());
        f.push_back(sock_filter{BPF_JMP | BPF_JSET | BPF_K, 0xff, 0, 0x3fff});
        stmt(BPF_LD | BPF_W | BPF_ABS, 16);
        jeq_or_drop(be32(12));
        stmt(BPF_LDX | BPF_B | BPF_MSH, 0); // X = IHL * 4
        stmt(BPF_LD | BPF_H | BPF_IND, 2);  // UDP destination port
    } else {
        stmt(BPF_LD | BPF_B | BPF_ABS, 6);
        jeq_or_drop(wire::kIpProtoUdp);
        for (std::uint32_t w = 0; w < 4; ++w) {
            stmt(BPF_LD | BPF_W | BPF_ABS, 24 + 4 * w);
            jeq_or_drop(be32(4 * w));
        }
        stmt(BPF_LD | BPF_H | BPF_ABS, 40 + 2);
    }
    jeq_or_drop(port);
    const auto bth_byte = [&](std::uint32_t i) {
        if (ipv4)
            stmt(BPF_LD | BPF_B | BPF_IND, 8 + i); // X still IHL * 4
        else
            stmt(BPF_LD | BPF_B | BPF_ABS, 40 + 8 + i);
    };
    if (slot >= 0) {
        // A member of a shared group: its slot in the BTH destination QP's top byte.
        bth_byte(5);
        jeq_or_drop(static_cast<std::uint32_t>(slot));
    }
    // Not droce's probes (TVer 15, which no RoCE frame has): a shared group's own (on lo the
    // packet socket sees them too; they are read from the UDP socket, UringPort::share_probes)
    // and the GSO probes of Gso::automatic senders, which a packet-mode port does not answer.
    bth_byte(1);
    to_drop.push_back(f.size());
    f.push_back(sock_filter{BPF_JMP | BPF_JEQ | BPF_K, 0xff, 0, wire::kDroceProbeTverByte});
    stmt(BPF_RET | BPF_K, 0xffffffffu); // the whole packet
    stmt(BPF_RET | BPF_K, 0);           // drop
    const std::size_t drop = f.size() - 1;
    for (const std::size_t i : to_drop) {
        const auto off = static_cast<std::uint8_t>(drop - i - 1);
        if (f[i].jt == 0xff)
            f[i].jt = off;
        else
            f[i].jf = off;
    }
    return f;
}

bool attach_filter(int fd, std::vector<sock_filter>& prog) noexcept {
    sock_fprog fp{};
    fp.len = static_cast<unsigned short>(prog.size());
    fp.filter = prog.data();
    return setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &fp, sizeof fp) == 0;
}

/**
 * Packet mode: the AF_PACKET socket on @p ifname with packet_filter() attached before it is bound
 * (so not one foreign frame is queued in between), PACKET_IGNORE_OUTGOING, and a deep receive
 * buffer. @return the descriptor, or -1 with *err set.
 */
int open_packet_socket(bool ipv4, const wire::Ipv6Addr& a, std::uint16_t port, int slot,
                       const std::string& ifname, std::uint32_t rcvbuf, std::string* err) {
    // Protocol 0: no frame is queued until bind() names one.
    const int fd = socket(AF_PACKET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        const int e = errno;
        *err = errno_text("recv_mode = packet: packet socket", e);
        if (e == EPERM || e == EACCES)
            *err += " (needs CAP_NET_RAW: run as root, or grant it to the program with "
                    "`setcap cap_net_raw+ep PROGRAM`; recv_mode = auto needs no privilege but "
                    "verifies only peers that send IPv4 ID 0)";
        return -1;
    }
    const auto give_up = [&](const std::string& what, int e) {
        *err = errno_text(what.c_str(), e);
        close(fd);
        return -1;
    };
    const unsigned idx = if_nametoindex(ifname.c_str());
    if (idx == 0) return give_up("packet socket: interface " + ifname, errno);
    std::vector<sock_filter> prog = packet_filter(ipv4, a, port, slot);
    if (!attach_filter(fd, prog)) return give_up("packet socket: SO_ATTACH_FILTER", errno);
    // Linux 4.20+; the filter drops outgoing copies anyway (older kernels: ENOPROTOOPT).
    (void)set_int(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, 1);
    if (!set_int(fd, SOL_SOCKET, SO_RCVBUFFORCE, static_cast<int>(rcvbuf)))
        (void)set_int(fd, SOL_SOCKET, SO_RCVBUF, static_cast<int>(rcvbuf));
    sockaddr_ll sll{};
    sll.sll_family = AF_PACKET;
    sll.sll_protocol = htons(ipv4 ? ETH_P_IP : ETH_P_IPV6);
    sll.sll_ifindex = static_cast<int>(idx);
    if (bind(fd, reinterpret_cast<sockaddr*>(&sll), sizeof sll) != 0)
        return give_up("packet socket: bind to " + ifname, errno);
    return fd;
}

std::string addr_text(bool ipv4, const wire::Ipv6Addr& a) {
    char buf[INET6_ADDRSTRLEN] = "?";
    (void)inet_ntop(ipv4 ? AF_INET : AF_INET6, ipv4 ? a.data() + 12 : a.data(), buf, sizeof buf);
    return buf;
}

// ---- sharing one UDP port (README: "Several processes on one port") ----

// The probes' layout is wire/droce_probe.h's; the names here say what the driver does with each.
/** BTH byte that carries the top byte of the destination QP (BTH: opcode, flags, P_Key, resv8,
 *  DestQP[23:0] in bytes 5..7; IBTA Vol 1 9.2): what a shared port steers by. */
constexpr std::uint32_t kBthDestQpTopByte = 5;
static_assert(kBthDestQpTopByte == wire::kDroceProbeToSlotByte, "a probe is steered as data is");
constexpr std::uint32_t kProbeKindByte = wire::kDroceProbeKindByte;
/** A joiner looking for its own index: the probe that comes back to it names it. */
constexpr auto kProbeSelf = static_cast<std::uint8_t>(wire::DroceProbeKind::share_self);
/** A repairing member asking the socket at the named index for its slot: the member there answers
 *  with a ShareAnswer to the abstract name "<share_name>-r<nonce in hex>". */
constexpr auto kProbeWho = static_cast<std::uint8_t>(wire::DroceProbeKind::share_who);
/** Gso::automatic: "do you take GSO sends?" to (peer, byte 5 = its slot), from the asker's
 *  receive socket; byte 6 the asker's slot. The kinds from here on are steered by slot. */
constexpr auto kProbeGso = static_cast<std::uint8_t>(wire::DroceProbeKind::gso);
/** The answer of a port that receives on its UDP socket: to the probe's source, byte 5 the
 *  asker's slot, byte 6 ours, the probe's nonce. Ports that see IP headers never send it. */
constexpr auto kProbeGsoYes = static_cast<std::uint8_t>(wire::DroceProbeKind::gso_yes);
constexpr std::uint32_t kProbeFromSlotByte = wire::kDroceProbeFromSlotByte;
static_assert(sizeof(wire::kDroceProbeMagic) == 8);

} // namespace

/** The members of one group: slot_at[i] is the steering slot of the socket at index i. Its bytes
 *  are the group's table file. */
struct ShareTable {
    std::uint32_t n = 0;
    std::uint8_t slot_at[kMaxShareSlots]{};
};

namespace {

/**
 * Where a group's table lives: /dev/shm (every process of the user sees it), named by user,
 * network namespace (the port space the group lives in), address and port. The last member to
 * leave removes it.
 */
std::string table_path(bool ipv4, const wire::Ipv6Addr& a, std::uint16_t port) {
    struct stat st {};
    const unsigned long netns = stat("/proc/self/ns/net", &st) == 0 ? st.st_ino : 0;
    return "/dev/shm/droce-share-" + std::to_string(getuid()) + "-" + std::to_string(netns) + "-" +
           addr_text(ipv4, a) + "-" + std::to_string(port);
}

/** Result of read_table(): an errno (> 0) when the file could not be opened or read. */
constexpr int kTableOk = 0;
constexpr int kTableDamaged = -1; ///< too short, or more members than slots

/** Reads the table (a missing file is an empty group). @return kTableOk, kTableDamaged or an errno
 *  (EMFILE, EACCES, ...: nothing is known of the file then). */
int read_table(const std::string& path, ShareTable* t) {
    *t = ShareTable{};
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT ? kTableOk : errno;
    const ssize_t got = read(fd, t, sizeof *t);
    const int read_errno = errno;
    close(fd);
    if (got < 0) return read_errno;
    return got == static_cast<ssize_t>(sizeof *t) && t->n <= kMaxShareSlots ? kTableOk
                                                                            : kTableDamaged;
}

/** Writes the table, or removes the file when the group is empty. */
bool write_table(const std::string& path, const ShareTable& t) {
    if (t.n == 0) return unlink(path.c_str()) == 0 || errno == ENOENT;
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return false;
    const bool ok = write(fd, &t, sizeof t) == static_cast<ssize_t>(sizeof t);
    return close(fd) == 0 && ok;
}

/**
 * Attaches the group's steering program for table @p t to @p fd, a socket of the group (one
 * program per group: the last attached serves every member). For a reuseport classic BPF program
 * the kernel runs the filter with the packet pulled to the transport payload (sock_reuseport.c,
 * run_bpf_filter: pskb_pull by the UDP header length), so absolute offset 0 is BTH byte 0; the
 * return value is an index into the group's sockets, and an index past the last one falls back to
 * the hash of addresses and ports (a datagram shorter than 6 bytes ends the program with 0: index
 * 0). The program: a slot probe (TVer 15) goes to the index its byte 5 names; any other datagram
 * to the index whose member has the slot in the destination QP's top byte (one compare per
 * member), or to the hash when no member has it. Unprivileged: SO_ATTACH_REUSEPORT_CBPF needs no
 * capability.
 */
bool attach_steering(int fd, const ShareTable& t) {
    // On the stack, not the heap: a member that repairs the group does it from rx_burst().
    std::array<sock_filter, 7 + 2 * kMaxShareSlots + 1> code;
    std::size_t n = 0;
    code[n++] = BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 1); // A = SE, M, PadCount, TVer
    code[n++] = BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, wire::kDroceProbeTverByte, 0, 4); // a probe?
    code[n++] = BPF_STMT(BPF_LD | BPF_B | BPF_ABS, kProbeKindByte);
    code[n++] = BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, kProbeGso, 2, 0); // GSO: by slot, as data
    code[n++] = BPF_STMT(BPF_LD | BPF_B | BPF_ABS, kBthDestQpTopByte);
    code[n++] = BPF_STMT(BPF_RET | BPF_A, 0); // the probe's candidate index
    code[n++] = BPF_STMT(BPF_LD | BPF_B | BPF_ABS, kBthDestQpTopByte); // A = DestQP >> 16
    for (std::uint32_t i = 0; i < std::min<std::uint32_t>(t.n, kMaxShareSlots); ++i) {
        code[n++] = BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, t.slot_at[i], 0, 1);
        code[n++] = BPF_STMT(BPF_RET | BPF_K, i);
    }
    code[n++] = BPF_STMT(BPF_RET | BPF_K, 0xffffffffu); // nobody's slot: the kernel's hash
    sock_fprog prog{};
    prog.len = static_cast<unsigned short>(n);
    prog.filter = code.data();
    return setsockopt(fd, SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &prog, sizeof prog) == 0;
}

/**
 * An abstract unix socket address "<share_name>-<suffix>" (share_name: the table's file name),
 * written without allocating (a repairing member builds them in rx_burst()). @return its length.
 */
socklen_t group_name(sockaddr_un* sa, const std::string& share_name, const char* suffix) noexcept {
    *sa = sockaddr_un{};
    sa->sun_family = AF_UNIX;
    const int n = std::snprintf(sa->sun_path + 1, sizeof sa->sun_path - 1, "%s-%s",
                                share_name.c_str(), suffix);
    const auto len =
        std::min<std::size_t>(n < 0 ? 0 : static_cast<std::size_t>(n), sizeof sa->sun_path - 2);
    return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + len);
}

/**
 * A member's sign of life: an abstract unix socket name per (user, address, port, slot), bound
 * while the member is in the group. The kernel releases it when the process ends, however it
 * ends, so a joiner can tell which member of a stale table died. Also where the member sends its
 * answers to who-probes from.
 * @return the bound socket, or -errno (EADDRINUSE: a live member holds the slot).
 */
/** The sign of life's name of @p slot: "<share_name>-<slot>". */
socklen_t alive_name(sockaddr_un* sa, const std::string& share_name, unsigned slot) noexcept {
    char suffix[8];
    std::snprintf(suffix, sizeof suffix, "%u", slot);
    return group_name(sa, share_name, suffix);
}

int bind_alive(const std::string& share_name, unsigned slot) {
    sockaddr_un sa;
    const socklen_t len = alive_name(&sa, share_name, slot);
    const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    if (bind(fd, reinterpret_cast<sockaddr*>(&sa), len) != 0) {
        const int e = errno;
        close(fd);
        return -e;
    }
    return fd;
}

/**
 * A table that lists more members than the group has: members died without leaving, and for each
 * the kernel moved the group's last socket into its index. With exactly one dead member (its
 * sign of life gone) that move is known and is replayed here; with more, the order of the moves
 * is not. @return whether @p t now matches a group of @p members.
 */
bool repair_table(const std::string& share_name, ShareTable* t, unsigned members) {
    if (t->n != members + 1) return false;
    for (std::uint32_t i = 0; i < t->n; ++i) {
        const int probe = bind_alive(share_name, t->slot_at[i]);
        if (probe < 0) continue; // alive (or the name cannot be bound: taken as alive)
        close(probe);
        t->slot_at[i] = t->slot_at[t->n - 1];
        --t->n;
        return true;
    }
    return false;
}

/** A member's answer to a who-probe: the index the probe named (where it arrived) and its slot. */
struct ShareAnswer {
    std::uint8_t magic[8];
    std::uint64_t nonce;
    std::uint8_t index;
    std::uint8_t slot;
};

/** The suffix of the abstract name a who-prober reads its answers on. */
void answer_suffix(char (&out)[20], std::uint64_t nonce) noexcept {
    std::snprintf(out, sizeof out, "r%016llx", static_cast<unsigned long long>(nonce));
}

/** A slot probe: byte 5 the candidate index, TVer 15 (no RoCE stack takes it), byte 4 its kind
 *  (kProbeSelf, kProbeWho), magic, nonce. */
void build_probe(std::uint8_t* p, std::uint8_t candidate, std::uint64_t nonce,
                 std::uint8_t kind = kProbeSelf) noexcept {
    std::memset(p, 0, kShareProbeLen);
    p[1] = wire::kDroceProbeTverByte;
    p[2] = p[3] = 0xff;
    p[kProbeKindByte] = kind;
    p[kBthDestQpTopByte] = candidate;
    std::memcpy(p + wire::kDroceProbeMagicOffset, wire::kDroceProbeMagic,
                sizeof wire::kDroceProbeMagic);
    std::memcpy(p + wire::kDroceProbeNonceOffset, &nonce, sizeof nonce);
}

bool is_probe(const std::uint8_t* p, std::uint32_t len) noexcept {
    return wire::is_droce_probe(p, len);
}

/**
 * How many members of @p t have lost their sign of life (died without leaving). Asked by
 * connecting to each name, not binding it: a bind would hold a dead member's name for a moment,
 * and a joiner taking that slot meanwhile would find it taken. Only ECONNREFUSED (nobody bound)
 * counts as dead.
 */
unsigned count_dead(const std::string& share_name, const ShareTable& t,
                    std::bitset<kMaxShareSlots>* dead_slots = nullptr) noexcept {
    if (dead_slots) dead_slots->reset();
    const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return 0;
    unsigned dead = 0;
    for (std::uint32_t i = 0; i < t.n; ++i) {
        sockaddr_un sa;
        const socklen_t len = alive_name(&sa, share_name, t.slot_at[i]);
        if (connect(fd, reinterpret_cast<sockaddr*>(&sa), len) != 0 && errno == ECONNREFUSED) {
            ++dead;
            if (dead_slots) dead_slots->set(t.slot_at[i]);
        }
    }
    close(fd);
    return dead;
}

/**
 * Asks the sockets at indices 0..members-1 of a group which slot they serve: one kProbeWho per
 * index, sent to the group's own address (the program sends a probe to the index it names), and
 * each member answers with a ShareAnswer to this prober's abstract name. For a table that members
 * left without leaving in an unknown order, where the kernel's moves cannot be replayed. Only
 * answers from this user count (SO_PASSCRED). No allocation: a member repairs from rx_burst().
 */
class WhoProbe {
  public:
    WhoProbe() = default;
    WhoProbe(const WhoProbe&) = delete;
    WhoProbe& operator=(const WhoProbe&) = delete;
    ~WhoProbe() { stop(); }

    /** Binds the answer socket and sends the probes from @p group_fd (a member's receive
     *  socket, which must outlive the probe) to @p self. @return 0, or the errno of socket,
     *  bind or sendto. */
    int start(int group_fd, const sockaddr_in6& self, socklen_t selflen,
              const std::string& share_name, unsigned members) noexcept {
        stop();
        if (getrandom(&nonce_, sizeof nonce_, GRND_NONBLOCK) != sizeof nonce_)
            nonce_ = coarse_monotonic_ns() ^ (static_cast<std::uint64_t>(getpid()) << 40);
        members_ = std::min(members, kMaxShareSlots);
        answered_ = 0;
        conflict_ = false;
        slot_at_.fill(-1);
        char suffix[20];
        answer_suffix(suffix, nonce_);
        sockaddr_un sa;
        const socklen_t len = group_name(&sa, share_name, suffix);
        fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        const int on = 1;
        if (fd_ < 0 || setsockopt(fd_, SOL_SOCKET, SO_PASSCRED, &on, sizeof on) != 0 ||
            bind(fd_, reinterpret_cast<const sockaddr*>(&sa), len) != 0)
            return fail();
        group_fd_ = group_fd;
        self_ = self;
        selflen_ = selflen;
        return resend() ? 0 : fail();
    }
    /** Sends the probe of every index that has not answered yet again: an answer can be lost,
     *  since the answer socket queues only net.unix.max_dgram_qlen datagrams (10 by default)
     *  and members answer without waiting. @return false when a send failed (errno). */
    bool resend() noexcept {
        std::uint8_t pkt[kShareProbeLen];
        for (unsigned i = 0; i < members_; ++i) {
            if (slot_at_[i] >= 0) continue;
            build_probe(pkt, static_cast<std::uint8_t>(i), nonce_, kProbeWho);
            if (sendto(group_fd_, pkt, sizeof pkt, 0, reinterpret_cast<const sockaddr*>(&self_),
                       selflen_) != static_cast<ssize_t>(sizeof pkt))
                return false;
        }
        return true;
    }
    /** Takes the answers that arrived, at most 2 × members + 16 reads a call (a flood of
     *  datagrams to the answer name costs a bounded time per call). @return true once every
     *  index answered, each with its own slot. */
    bool absorb() noexcept {
        ShareAnswer a;
        alignas(cmsghdr) char ctrl[CMSG_SPACE(sizeof(ucred))];
        for (unsigned reads = 0; reads < 2 * members_ + 16; ++reads) {
            iovec iov{&a, sizeof a};
            msghdr m{};
            m.msg_iov = &iov;
            m.msg_iovlen = 1;
            m.msg_control = ctrl;
            m.msg_controllen = sizeof ctrl;
            const ssize_t got = recvmsg(fd_, &m, MSG_DONTWAIT);
            if (got < 0) break; // none left (EAGAIN), or the socket failed: the deadline ends it
            if (got != static_cast<ssize_t>(sizeof a)) continue; // not an answer
            const cmsghdr* c = CMSG_FIRSTHDR(&m);
            ucred cred{};
            if (!c || c->cmsg_type != SCM_CREDENTIALS) continue;
            std::memcpy(&cred, CMSG_DATA(c), sizeof cred);
            if (cred.uid != getuid() || a.nonce != nonce_ || a.index >= members_ ||
                std::memcmp(a.magic, wire::kDroceProbeMagic, sizeof wire::kDroceProbeMagic) != 0)
                continue;
            std::int16_t& at = slot_at_[a.index];
            if (at == a.slot) continue; // the same answer twice
            if (at >= 0) conflict_ = true;
            at = a.slot;
            ++answered_;
        }
        if (conflict_ || answered_ < members_) return false;
        std::bitset<kMaxShareSlots> seen;
        for (unsigned i = 0; i < members_; ++i) {
            if (seen.test(static_cast<std::size_t>(slot_at_[i]))) conflict_ = true;
            seen.set(static_cast<std::size_t>(slot_at_[i]));
        }
        return !conflict_;
    }
    /** Two answers for one index, or one slot at two: the group changed under the probe. */
    [[nodiscard]] bool conflicting() const noexcept { return conflict_; }
    /** The group as the answers gave it (after absorb() said complete). */
    void table(ShareTable* t) const noexcept {
        *t = ShareTable{};
        t->n = members_;
        for (unsigned i = 0; i < members_; ++i)
            t->slot_at[i] = static_cast<std::uint8_t>(slot_at_[i]);
    }
    [[nodiscard]] int fd() const noexcept { return fd_; }
    void stop() noexcept {
        if (fd_ >= 0) close(fd_);
        fd_ = -1;
    }

  private:
    int fail() noexcept {
        const int e = errno;
        stop();
        return e;
    }
    int fd_ = -1;
    int group_fd_ = -1;
    sockaddr_in6 self_{};
    socklen_t selflen_ = 0;
    std::uint64_t nonce_ = 0;
    unsigned members_ = 0;
    unsigned answered_ = 0;
    bool conflict_ = false;
    std::array<std::int16_t, kMaxShareSlots> slot_at_{};
};

/** How often a member that receives frames of other slots looks for dead members, and how long
 *  it waits after a repair that failed. */
constexpr std::uint64_t kShareCheckNs = 100'000'000;
constexpr std::uint64_t kShareRetryNs = 1'000'000'000;
/** How long a repair waits for every member's answer (a member answers from its next poll), how
 *  often it asks again those that have not answered, and how often it reads the answers. */
constexpr std::uint64_t kShareAnswerNs = 200'000'000;
constexpr std::uint64_t kShareResendNs = 20'000'000;
constexpr std::uint64_t kShareAbsorbNs = 200'000;

} // namespace

/**
 * A repair by this member (share_upkeep). The answers are awaited without the join lock (a
 * member stopped in a debugger, or a process leaving its other shared ports at exit, must not be
 * kept waiting on it); the lock is taken only to write the result, and only if the table is still
 * the one the repair started from.
 */
struct UringPort::ShareRepair {
    WhoProbe who;
    bool active = false;
    ShareTable started_from; ///< the table when the probes went out
    /** Its members that were dead then: a joiner may since have taken a dead member's slot and
     *  written a table of the same bytes (the dead member was the last, so nothing moved). */
    std::bitset<kMaxShareSlots> dead_slots;
    std::uint64_t deadline_ns = 0;
    std::uint64_t next_check_ns = 0;
    std::uint64_t next_absorb_ns = 0;
    std::uint64_t next_resend_ns = 0;
};

namespace {
// The process's hold on the host-wide lock: re-entered by nested ShareJoinLocks of one thread
// (lib/runtime holds it around a device's ports; each port's create() and destructor take it too).
std::recursive_mutex g_join_mutex;
unsigned g_join_depth = 0;
int g_join_fd = -1;

/** The lock's abstract name (it lives in the network namespace, like the UDP ports it guards). */
socklen_t join_lock_name(sockaddr_un* sa) noexcept {
    *sa = sockaddr_un{};
    sa->sun_family = AF_UNIX;
    const int n = std::snprintf(sa->sun_path + 1, sizeof sa->sun_path - 1, "droce-share-join-%u",
                                static_cast<unsigned>(getuid()));
    return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
}

/**
 * Takes the join lock without waiting, for a repair's write from rx_burst(): the name is bound on
 * a socket of its own, which the caller closes before it returns, not the process's re-entrant
 * hold. Not while this process holds the lock (a join or leave in progress). @return the
 * socket, or -1.
 */
int try_join_lock() noexcept {
    if (!g_join_mutex.try_lock()) return -1;
    int fd = -1;
    if (g_join_depth == 0) {
        sockaddr_un sa;
        const socklen_t len = join_lock_name(&sa);
        fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&sa), len) != 0) {
            close(fd);
            fd = -1;
        }
    }
    g_join_mutex.unlock();
    return fd;
}
} // namespace

ShareJoinLock::ShareJoinLock(unsigned timeout_ms, std::string* err) {
    g_join_mutex.lock();
    if (g_join_depth > 0) {
        ++g_join_depth;
        held_ = true;
        return;
    }
    sockaddr_un sa;
    const socklen_t len = join_lock_name(&sa);
    const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    int e = errno;
    for (unsigned waited = 0; fd >= 0; ++waited) {
        if (bind(fd, reinterpret_cast<sockaddr*>(&sa), len) == 0) {
            g_join_fd = fd;
            g_join_depth = 1;
            held_ = true;
            return;
        }
        e = errno;
        if (e != EADDRINUSE || waited >= timeout_ms) break;
        usleep(1000);
    }
    if (err)
        *err = e == EADDRINUSE ? "share join lock: another process of this user held it for " +
                                     std::to_string(timeout_ms) + " ms"
                               : errno_text("share join lock", e);
    if (fd >= 0) close(fd);
    g_join_mutex.unlock();
}

ShareJoinLock::~ShareJoinLock() {
    if (!held_) return;
    if (--g_join_depth == 0) {
        close(g_join_fd);
        g_join_fd = -1;
    }
    g_join_mutex.unlock();
}

/** Per-slot send/receive message headers: the kernel reads them until the request completes. */
struct SlotMsg {
    msghdr msg{};
    iovec iov{};
    sockaddr_in6 peer{};
    alignas(8) std::uint8_t ctrl[48]{};
};

struct UringPort::Ring {
    io_uring ring{};
    bool ring_ok = false;
    io_uring_buf_ring* br = nullptr;
    std::uint32_t br_entries = 0;
    bool br_registered = false;
    msghdr multishot_msg{}; ///< template of the multishot recvmsg (name and control lengths)
    int irq_fd = -1;        ///< eventfd registered with the ring (the receive interrupt), or -1
    std::vector<SlotMsg> msgs;
    /** With gso: kGsoMaxSegments iovecs per slot, used while the slot leads a GSO send. */
    std::vector<iovec> gso_iov;
};

/** A GSO send being filled: frames join it while they match (UringPortConfig::gso). */
struct UringPort::GsoGroup {
    io_uring_sqe* sqe = nullptr; ///< taken when the group opens: a full SQ never strands frames
    std::uint32_t leader = 0;    ///< slot whose SlotMsg and iovecs the send uses
    int fd = -1;                 ///< the frames' source socket (the group's key)
    int send_fd = -1;            ///< what a send of several leaves from (gso_source_socket)
    wire::Ipv6Addr peer{};
    std::uint8_t tos = 0;
    /** BTH byte 5 (the destination QP's top byte): a shared receiver's steering slot. The kernel
     *  steers a GSO send once, by its first frame, so one group goes to one slot. */
    std::uint8_t dslot = 0;
    std::uint32_t seg = 0;   ///< payload bytes of the first frame: the segment size
    std::uint32_t count = 0; ///< frames in the group (0: no group open)
    std::uint32_t bytes = 0;
    bool closed = false; ///< a shorter frame joined: it must be the last
};

const char* to_string(PortCounter c) noexcept {
    const auto i = static_cast<unsigned>(c);
    // The names are string literals: NUL-terminated.
    return i < kNumPortCounters ? kPortCounterNames[i].data() : "?";
}

/**
 * What a Gso::automatic port knows of one peer (address, steering slot). States: never asked
 * (nonce 0); asked, no answer yet; answered (grouping until yes_until_ns, asked again from
 * next_ask_ns so that a peer that went away, or came back in packet mode, is noticed).
 */
struct UringPort::GsoPeer {
    wire::Ipv6Addr addr{};
    std::uint8_t slot = 0;
    bool used = false;
    std::uint8_t asks = 0;          ///< probes without an answer since the last one
    std::uint64_t nonce = 0;        ///< of the last probe: an answer must carry it
    std::uint64_t next_ask_ns = 0;  ///< no probe before (coarse clock)
    std::uint64_t yes_until_ns = 0; ///< grouping allowed until (0: never answered)
    std::uint64_t last_use = 0; ///< gso_use_count_ when a frame to it last asked: eviction order
};

namespace {
/** A probe unanswered is sent again after this, five times, then every kGsoAskSlowNs. */
constexpr std::uint64_t kGsoAskNs = 100'000'000ull;
constexpr std::uint64_t kGsoAskSlowNs = 2'000'000'000ull;
constexpr unsigned kGsoFastAsks = 5;
/** An answer allows grouping for this long, and is asked again after half of it. */
constexpr std::uint64_t kGsoYesNs = 4'000'000'000ull;
/** Answers sent at most this many per window (a flood of probes is not echoed at its rate). */
constexpr std::uint32_t kGsoAnswersPerWindow = 64;
constexpr std::uint64_t kGsoAnswerWindowNs = 100'000'000ull;
} // namespace

const char* to_string(Gso g) noexcept {
    switch (g) {
    case Gso::automatic:
        return "auto";
    case Gso::on:
        return "on";
    case Gso::off:
        return "off";
    }
    return "?";
}

const char* to_string(SendZc z) noexcept {
    switch (z) {
    case SendZc::automatic:
        return "auto";
    case SendZc::on:
        return "on";
    case SendZc::off:
        return "off";
    }
    return "?";
}

const char* to_string(RecvMode m) noexcept {
    switch (m) {
    case RecvMode::automatic:
        return "auto";
    case RecvMode::multishot:
        return "multishot";
    case RecvMode::batched:
        return "batched";
    case RecvMode::packet:
        return "packet";
    }
    return "?";
}

UringPort::UringPort() : ring_(std::make_unique<Ring>()) {}

std::unique_ptr<UringPort> UringPort::create(const UringPortConfig& cfg, std::string* err) {
    std::string scratch;
    if (!err) err = &scratch;
    const auto fail = [&](const std::string& m) {
        *err = m;
        return nullptr;
    };
    if (cfg.addr == wire::Ipv6Addr{} || (cfg.ipv4 && !wire::is_ipv4_mapped(cfg.addr)))
        return fail("address: zero, or not IPv4-mapped for an IPv4 port");
    if (cfg.udp_port == 0) return fail("udp_port 0");
    if (cfg.mtu != 0 && (cfg.mtu < 576 || cfg.mtu > 9600))
        return fail("mtu " + std::to_string(cfg.mtu) + " outside 576..9600");
    if (cfg.n_buffers < 64 || cfg.n_buffers > 65536)
        return fail("n_buffers " + std::to_string(cfg.n_buffers) + " outside 64..65536");
    if (cfg.sq_entries < 16 || cfg.sq_entries > 4096 || (cfg.sq_entries & (cfg.sq_entries - 1)))
        return fail("sq_entries " + std::to_string(cfg.sq_entries) +
                    " is not a power of two in 16..4096");
    if (cfg.max_source_ports < 1 || cfg.max_source_ports > 65536)
        return fail("max_source_ports outside 1..65536");

    std::unique_ptr<UringPort> p(new UringPort());
    p->ipv4_ = cfg.ipv4;
    p->addr_ = cfg.addr;
    p->udp_port_ = cfg.udp_port;
    p->peer_port_ = cfg.peer_udp_port ? cfg.peer_udp_port : cfg.udp_port;
    p->port_index_ = cfg.port_index;
    p->max_sports_ = cfg.max_source_ports;
    p->mac_ = cfg.mac;
    if (p->mac_ == wire::MacAddr{})
        p->mac_ = {0x02, 0x00, cfg.addr[12], cfg.addr[13], cfg.addr[14], cfg.addr[15]};

    // The interface: its MTU now, its link state followed from here on (LinkWatch).
    int list_errno = 0;
    p->ifname_ =
        cfg.interface.empty() ? interface_of(cfg.ipv4, cfg.addr, &list_errno) : cfg.interface;
    if (list_errno != 0)
        return fail(errno_text("listing the interfaces to find this address's", list_errno));
    if (p->ifname_.empty())
        return fail("no interface holds this address or its subnet: set interface = NAME");
    if (!cfg.interface.empty()) {
        int ignored = 0;
        const std::string holder = interface_of(cfg.ipv4, cfg.addr, &ignored);
        if (!holder.empty() && holder != cfg.interface)
            p->config_note_ = "the address is on interface " + holder +
                              ", not on interface = " + cfg.interface +
                              ": the MTU and the link state are taken from " + cfg.interface +
                              " (delete the interface line, or name " + holder + ")";
    }
    if (p->ifname_.size() >= IFNAMSIZ) return fail("interface name too long: " + p->ifname_);
    const int probe = socket(cfg.ipv4 ? AF_INET : AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (probe < 0) return fail(errno_text("socket", errno));
    ifreq ifr{};
    std::memcpy(ifr.ifr_name, p->ifname_.c_str(), p->ifname_.size());
    const int mtu_rc = ioctl(probe, SIOCGIFMTU, &ifr);
    const int mtu_errno = errno;
    close(probe);
    if (mtu_rc != 0)
        return fail(errno_text(("interface " + p->ifname_ + " (SIOCGIFMTU)").c_str(), mtu_errno));
    const auto if_mtu = static_cast<std::uint32_t>(ifr.ifr_mtu);
    p->mtu_ = std::min(cfg.mtu ? std::min(cfg.mtu, if_mtu) : if_mtu, kMaxMtu);
    if (p->mtu_ < 576)
        return fail("interface " + p->ifname_ + " MTU " + std::to_string(if_mtu) + " below 576");
    std::string link_err;
    p->link_ = LinkWatch::open(p->ifname_, cfg.ipv4, cfg.addr, &link_err);
    if (!p->link_) return fail(link_err);
    p->link_seen_up_.store(p->link_->up(), std::memory_order_relaxed);

    // The pool.
    p->slot_bytes_ = (kPayloadOff + p->mtu_ + 14 + 63) & ~63u;
    const std::size_t bytes = static_cast<std::size_t>(p->slot_bytes_) * cfg.n_buffers;
    p->mem_ = static_cast<std::uint8_t*>(std::aligned_alloc(4096, (bytes + 4095) & ~4095ul));
    if (!p->mem_) return fail("cannot allocate " + std::to_string(bytes) + " bytes of buffers");
    p->bufs_.resize(cfg.n_buffers);
    p->where_.assign(cfg.n_buffers, kFree);
    p->free_.resize(cfg.n_buffers);
    for (std::uint32_t i = 0; i < cfg.n_buffers; ++i) {
        PktBuf& b = p->bufs_[i];
        b.driver = p.get();
        b.port = cfg.port_index;
        p->free_[i] = cfg.n_buffers - 1 - i;
    }
    p->free_n_ = cfg.n_buffers;
    p->ring_->msgs.resize(cfg.n_buffers);
    // Packet mode never asks (its answers would come through the packet socket): auto is off.
    if (cfg.gso == Gso::on || (cfg.gso == Gso::automatic && cfg.recv_mode != RecvMode::packet)) {
        p->ring_->gso_iov.resize(static_cast<std::size_t>(cfg.n_buffers) * kGsoMaxSegments);
        p->gso_ = true;
        p->gso_auto_ = cfg.gso == Gso::automatic;
        if (p->gso_auto_) {
            p->gso_peers_.resize(kGsoPeers);
            if (getrandom(&p->gso_key_, sizeof p->gso_key_, GRND_NONBLOCK) != sizeof p->gso_key_)
                p->gso_key_ = monotonic_ns() ^ (static_cast<std::uint64_t>(getpid()) << 32);
        }
    }
    p->sport_fd_.assign(65536, -1);
    // bind_source() appends on the engine thread; Gso::automatic on IPv4 may bind a second socket
    // per source port (with checksums, for GSO sends).
    const bool second = p->gso_auto_ && cfg.ipv4;
    if (second) p->sport_gso_fd_.assign(65536, -1);
    p->fds_.reserve(static_cast<std::size_t>(cfg.max_source_ports) * (second ? 2 : 1));

    // The receive socket.
    const int fam = cfg.ipv4 ? AF_INET : AF_INET6;
    p->rx_fd_ = socket(fam, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (p->rx_fd_ < 0) return fail(errno_text("socket", errno));
    bool ok = cfg.ipv4 ? set_int(p->rx_fd_, IPPROTO_IP, IP_RECVTOS, 1) &&
                             set_int(p->rx_fd_, SOL_SOCKET, SO_NO_CHECK, 1) &&
                             set_int(p->rx_fd_, IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO)
                       : set_int(p->rx_fd_, IPPROTO_IPV6, IPV6_V6ONLY, 1) &&
                             set_int(p->rx_fd_, IPPROTO_IPV6, IPV6_RECVTCLASS, 1) &&
                             set_int(p->rx_fd_, IPPROTO_IPV6, IPV6_MTU_DISCOVER, IPV6_PMTUDISC_DO);
    if (!ok) return fail(errno_text("setsockopt", errno));
    // Bursts of a window of datagrams arrive between two polls: a deep queue saves retransmits.
    // Unprivileged, the kernel caps SO_RCVBUF at net.core.rmem_max (no error).
    if (!set_int(p->rx_fd_, SOL_SOCKET, SO_RCVBUFFORCE, static_cast<int>(cfg.rcvbuf)))
        (void)set_int(p->rx_fd_, SOL_SOCKET, SO_RCVBUF, static_cast<int>(cfg.rcvbuf));
    if (cfg.share && !set_int(p->rx_fd_, SOL_SOCKET, SO_REUSEPORT, 1))
        return fail(errno_text("setsockopt SO_REUSEPORT", errno));
    if (cfg.recv_mode == RecvMode::packet) {
        // The UDP socket stays bound so that the kernel answers no ICMP port unreachable, but
        // every datagram is a copy of one the packet socket has: a filter returning 0 drops it
        // before it is queued, and the smallest buffer bounds what could slip through (both set
        // before bind(), so nothing else is ever queued there first). A member
        // of a shared group keeps the group's probes there (sent over lo, the packet socket
        // never sees them; rx_burst() reads them, share_probes()): for a UDP socket's filter
        // the packet starts at the UDP header, so a probe is 8 + kShareProbeLen bytes with TVer
        // 15 in byte 9.
        std::vector<sock_filter> none{sock_filter{BPF_RET | BPF_K, 0, 0, 0}};
        std::vector<sock_filter> probes{
            sock_filter{BPF_LD | BPF_W | BPF_LEN, 0, 0, 0},
            sock_filter{BPF_JMP | BPF_JEQ | BPF_K, 0, 3, 8 + kShareProbeLen},
            sock_filter{BPF_LD | BPF_B | BPF_ABS, 0, 0, 8 + 1},
            sock_filter{BPF_JMP | BPF_JEQ | BPF_K, 0, 1, wire::kDroceProbeTverByte},
            sock_filter{BPF_RET | BPF_K, 0, 0, 0xffffffffu},
            sock_filter{BPF_RET | BPF_K, 0, 0, 0},
        };
        (void)set_int(p->rx_fd_, SOL_SOCKET, SO_RCVBUF, cfg.share ? 65536 : 1);
        if (!attach_filter(p->rx_fd_, cfg.share ? probes : none))
            return fail(errno_text("UDP socket: SO_ATTACH_FILTER", errno));
    }
    // Joins (bind, probe, table) and leaves of this host's groups one at a time: the index the
    // probe finds is then the table's member count.
    std::optional<ShareJoinLock> join;
    if (cfg.share && !join.emplace(10'000, err).held()) return nullptr;
    sockaddr_in6 sa{};
    socklen_t salen = 0;
    fill_sockaddr(cfg.ipv4, cfg.addr, cfg.udp_port, &sa, &salen);
    if (bind(p->rx_fd_, reinterpret_cast<sockaddr*>(&sa), salen) != 0) {
        const int e = errno;
        const std::string where =
            "UDP port " + std::to_string(cfg.udp_port) + " on " + addr_text(cfg.ipv4, cfg.addr);
        if (e == EADDRINUSE && !cfg.share) {
            SocketHolder h;
            const std::string who =
                find_socket_holder(udp_socket_inode(cfg.ipv4 ? &cfg.addr[12] : cfg.addr.data(),
                                                    cfg.udp_port, cfg.ipv4),
                                   &h, getpid())
                    ? to_string(h)
                    : "another process";
            return fail(
                where + " is in use by " + who +
                ": stop it, give this side another udp_port (and the peer that peer_udp_port), or "
                "set share = yes in every process that shares it");
        }
        if (e == EADDRINUSE)
            return fail(where + " is held by a socket that does not share it: every process "
                                "sharing it must set share = yes and run as the same user");
        return fail(errno_text(("bind " + where).c_str(), e));
    }
    p->in_fd_ = p->rx_fd_;
    if (cfg.share) {
        p->share_ = true;
        if (!p->join_group(cfg.share_slot, err)) return nullptr;
    }
    if (cfg.recv_mode == RecvMode::packet) {
        p->pkt_fd_ = open_packet_socket(cfg.ipv4, cfg.addr, cfg.udp_port, p->share_ ? p->slot_ : -1,
                                        p->ifname_, cfg.rcvbuf, err);
        if (p->pkt_fd_ < 0) return nullptr;
        p->pkt_ifindex_ = if_nametoindex(p->ifname_.c_str());
        p->pkt_events_seen_ = p->link_->events();
        p->in_fd_ = p->pkt_fd_;
        p->receive_ = &UringPort::rebuild_packet;
    }

    // The ring. Completions outnumber submissions (a multishot receive posts many), hence the
    // larger CQ; the kernel keeps overflowing CQEs rather than dropping them.
    io_uring_params params{};
    params.flags = IORING_SETUP_CQSIZE | IORING_SETUP_SUBMIT_ALL;
    if (cfg.taskrun == TaskRun::coop)
        params.flags |= IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG;
    p->coop_ = cfg.taskrun == TaskRun::coop;
    params.cq_entries = cfg.sq_entries * 4;
    if (const int rc = io_uring_queue_init_params(cfg.sq_entries, &p->ring_->ring, &params); rc < 0)
        return fail(errno_text("io_uring_queue_init", -rc));
    p->ring_->ring_ok = true;
    // Zero-copy sends: only where the kernel has the opcode (6.0+).
    if (cfg.send_zc == SendZc::on) {
        io_uring_probe* ops = io_uring_get_probe_ring(&p->ring_->ring);
        const bool have = ops && io_uring_opcode_supported(ops, IORING_OP_SENDMSG_ZC);
        if (ops) io_uring_free_probe(ops);
        if (!have) return fail("send_zc = on: this kernel has no IORING_OP_SENDMSG_ZC");
        p->zc_min_ = cfg.send_zc_min;
    }
    // The receive interrupt. Without it the engine still works, its naps bounding the latency.
    p->ring_->irq_fd = cfg.rx_interrupt ? eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC) : -1;
    if (p->ring_->irq_fd >= 0 &&
        (io_uring_register_eventfd(&p->ring_->ring, p->ring_->irq_fd) != 0 ||
         io_uring_cq_eventfd_toggle(&p->ring_->ring, false) != 0)) {
        (void)io_uring_unregister_eventfd(&p->ring_->ring);
        close(p->ring_->irq_fd);
        p->ring_->irq_fd = -1;
    }

    // Provided buffer ring: what decides multishot. Half the pool at most, a power of two.
    std::uint32_t entries = 1;
    while (entries * 2 <= cfg.n_buffers / 2 && entries * 2 <= 32768)
        entries *= 2;
    p->ring_cap_ = std::min<std::uint32_t>(entries, cfg.sq_entries / 2);
    if (cfg.recv_mode != RecvMode::batched) {
        void* br = std::aligned_alloc(4096, (entries * sizeof(io_uring_buf) + 4095) & ~4095ul);
        int rc = -ENOMEM;
        if (br) {
            p->ring_->br = static_cast<io_uring_buf_ring*>(br);
            io_uring_buf_ring_init(p->ring_->br);
            io_uring_buf_reg reg{};
            reg.ring_addr = reinterpret_cast<std::uint64_t>(br);
            reg.ring_entries = entries;
            reg.bgid = kBufGroup;
            rc = io_uring_register_buf_ring(&p->ring_->ring, &reg, 0);
        }
        if (rc == 0) {
            p->ring_->br_registered = true;
            p->ring_->br_entries = entries;
            p->ring_cap_ = entries;
            p->mode_ = RecvMode::multishot;
            msghdr& m = p->ring_->multishot_msg;
            m.msg_namelen = kNameLen;
            m.msg_controllen = kCtrlLen;
        } else if (cfg.recv_mode == RecvMode::multishot) {
            return fail(errno_text("io_uring_register_buf_ring (multishot receive asked)", -rc));
        }
    }
    if (p->mode_ == RecvMode::batched)
        p->ring_cap_ = std::min<std::uint32_t>(cfg.n_buffers / 2, cfg.sq_entries / 2);
    return p;
}

UringPort::~UringPort() {
    if (ring_ && ring_->ring_ok) {
        // The kernel may still write into the pool (posted receives) or read from it (sends): take
        // every request back and wait for its completion before the memory goes.
        io_uring& r = ring_->ring;
        if (io_uring_sqe* sqe = io_uring_get_sqe(&r)) {
            io_uring_prep_cancel64(sqe, 0, IORING_ASYNC_CANCEL_ANY);
            io_uring_sqe_set_data64(sqe, user_data(kTagCancel, 0));
        }
        (void)io_uring_submit(&r);
        // Buffers in a provided ring are no requests: only an armed multishot receive, posted
        // single receives and sends in flight hold the kernel's attention.
        const auto busy = [this] {
            return armed_ || tx_inflight_ || (mode_ == RecvMode::batched && rx_posted_);
        };
        for (int round = 0; round < 1000 && busy(); ++round) {
            (void)reap(nullptr, 0);
            // Receives that complete with data go back to the free list here.
            PktBuf* tmp[kMaxBurst];
            const std::uint16_t got = reap(tmp, kMaxBurst);
            free_bulk(tmp, got);
            __kernel_timespec ts{0, 1'000'000};
            io_uring_cqe* cqe = nullptr;
            (void)io_uring_wait_cqe_timeout(&r, &cqe, &ts);
        }
        if (ring_->br_registered) (void)io_uring_unregister_buf_ring(&r, kBufGroup);
        io_uring_queue_exit(&r);
    }
    if (ring_ && ring_->irq_fd >= 0) close(ring_->irq_fd);
    if (ring_ && ring_->br) std::free(ring_->br);
    for (const int fd : fds_)
        close(fd);
    if (joined_) leave_group();
    if (rx_fd_ >= 0) close(rx_fd_);
    if (pkt_fd_ >= 0) close(pkt_fd_);
    std::free(mem_);
}

// ------------------------------------------------------------------------------- datapath

std::uint32_t UringPort::slot_of(const PktBuf* b) const noexcept {
    if (!b || b < bufs_.data() || b >= bufs_.data() + bufs_.size()) return UINT32_MAX;
    return static_cast<std::uint32_t>(b - bufs_.data());
}

void UringPort::put_free(std::uint32_t slot) noexcept {
    where_[slot] = kFree;
    free_[free_n_++] = slot;
}

std::uint16_t UringPort::alloc_bulk(PktBuf** bufs, std::uint16_t n) noexcept {
    if (free_n_ < n && tx_inflight_) (void)reap(nullptr, 0);
    std::uint16_t got = 0;
    while (got < n && free_n_ > 0) {
        const std::uint32_t s = free_[--free_n_];
        PktBuf& b = bufs_[s];
        b.data = mem_ + static_cast<std::size_t>(s) * slot_bytes_;
        b.len = 0;
        b.capacity = slot_bytes_;
        b.ecn_ce = false;
        b.ext_len = 0;
        where_[s] = kCaller;
        bufs[got++] = &b;
    }
    if (got < n) inc(PortCounter::alloc_failed, n - got);
    return got;
}

void UringPort::free_bulk(PktBuf** bufs, std::uint16_t n) noexcept {
    for (std::uint16_t i = 0; i < n; ++i) {
        if (!bufs[i]) continue;
        const std::uint32_t s = slot_of(bufs[i]);
        if (s == UINT32_MAX || where_[s] != kCaller) {
            inc(PortCounter::free_invalid);
            continue;
        }
        put_free(s);
    }
}

int UringPort::bind_source(std::uint16_t sport, bool checksum) noexcept {
    // Cold path: once per source port for the life of the port.
    // At most max_source_ports of each kind: the source ports, and their GSO sockets.
    std::uint32_t& bound = checksum && gso_auto_ ? gso_sports_bound_ : sports_bound_;
    if (bound >= max_sports_ || fds_.size() == fds_.capacity()) return -2;
    const int fd = socket(ipv4_ ? AF_INET : AF_INET6, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -2;
    // SO_REUSEPORT: two droce processes of one user sharing an address may both send from a
    // port. The socket receives nothing droce wants (peers send to udp_port): a small queue.
    // SO_NO_CHECK: UDP checksum 0 on IPv4, as RoCEv2 sends it (A17.3.2) and droce's DPDK ports
    // do; the ICRC covers the datagram. IPv6 requires a checksum: the kernel computes it.
    // With GSO, IPv4 keeps its checksum: the kernel refuses UDP_SEGMENT on an SO_NO_CHECK socket.
    const bool ok = set_int(fd, SOL_SOCKET, SO_REUSEPORT, 1) &&
                    (ipv4_ ? (checksum || set_int(fd, SOL_SOCKET, SO_NO_CHECK, 1)) &&
                                 set_int(fd, IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO)
                           : set_int(fd, IPPROTO_IPV6, IPV6_V6ONLY, 1) &&
                                 set_int(fd, IPPROTO_IPV6, IPV6_MTU_DISCOVER, IPV6_PMTUDISC_DO));
    (void)set_int(fd, SOL_SOCKET, SO_RCVBUF, 1);
    // A full send buffer makes io_uring park the send until it drains, and a later send may then
    // overtake it: a deep buffer keeps that rare.
    if (!set_int(fd, SOL_SOCKET, SO_SNDBUFFORCE, 4 << 20))
        (void)set_int(fd, SOL_SOCKET, SO_SNDBUF, 4 << 20);
    sockaddr_in6 sa{};
    socklen_t salen = 0;
    fill_sockaddr(ipv4_, addr_, sport, &sa, &salen);
    if (!ok || bind(fd, reinterpret_cast<sockaddr*>(&sa), salen) != 0) {
        close(fd);
        return -2;
    }
    fds_.push_back(fd); // capacity reserved at create(): no allocation
    ++bound;
    inc(PortCounter::source_ports_bound);
    return fd;
}

int UringPort::source_socket(std::uint16_t sport) noexcept {
    if (sport == udp_port_) return rx_fd_;
    const std::int32_t fd = sport_fd_[sport];
    if (fd >= 0 || fd == -2) return fd;
    // Gso::on: every IPv4 send carries a checksum; automatic: only GSO sends (gso_source_socket).
    return sport_fd_[sport] = bind_source(sport, gso_ && !gso_auto_);
}

int UringPort::gso_source_socket(std::uint16_t sport, int fd) noexcept {
    // IPv6 datagrams carry a checksum anyway; Gso::on's sockets all do.
    if (!ipv4_ || !gso_auto_) return fd;
    const std::int32_t g = sport_gso_fd_[sport];
    if (g >= 0 || g == -2) return g;
    return sport_gso_fd_[sport] = bind_source(sport, /*checksum=*/true);
}

bool UringPort::probe_index(unsigned* index, std::string* err) {
    // The kernel does not report a socket's index in its group: send probes naming candidate
    // indices to the group's own address (the program sends a probe to the index it names) and
    // see which come back to this socket.
    // A candidate below our index reaches another member (which drops it: rx_share_probes), ours
    // reaches us, and one past the last member falls back to the hash and may reach anyone: so
    // the smallest of our probes that arrives here is our index. Rounds of 16 candidates keep the
    // probes another member must drop (and its socket buffer must hold) few.
    if (getrandom(&probe_nonce_, sizeof probe_nonce_, 0) != sizeof probe_nonce_)
        probe_nonce_ = coarse_monotonic_ns() ^ (static_cast<std::uint64_t>(getpid()) << 40);
    sockaddr_in6 self{};
    socklen_t selflen = 0;
    fill_sockaddr(ipv4_, addr_, udp_port_, &self, &selflen);
    std::uint8_t pkt[kShareProbeLen];
    std::uint8_t in[2048];
    unsigned best = kMaxShareSlots;
    const std::uint64_t give_up = coarse_monotonic_ns() + 500'000'000ull;
    const auto drain = [&](int wait_ms) {
        pollfd pfd{rx_fd_, POLLIN, 0};
        while (coarse_monotonic_ns() < give_up && poll(&pfd, 1, wait_ms) > 0) {
            const ssize_t got = recv(rx_fd_, in, sizeof in, MSG_DONTWAIT);
            if (got < 0) break;
            const auto len = static_cast<std::uint32_t>(got);
            if (!is_probe(in, len)) continue; // traffic for a slot not served yet: dropped
            if (std::memcmp(in + wire::kDroceProbeNonceOffset, &probe_nonce_,
                            sizeof probe_nonce_) != 0) {
                inc(PortCounter::rx_share_probes); // another member probing at the same time
                continue;
            }
            best = std::min<unsigned>(best, in[kBthDestQpTopByte]);
        }
    };
    for (unsigned round = 0; round * 16 < kMaxShareSlots && best == kMaxShareSlots; ++round) {
        for (unsigned k = round * 16; k < round * 16 + 16; ++k) {
            build_probe(pkt, static_cast<std::uint8_t>(k), probe_nonce_);
            if (sendto(rx_fd_, pkt, sizeof pkt, 0, reinterpret_cast<sockaddr*>(&self), selflen) !=
                static_cast<ssize_t>(sizeof pkt)) {
                *err = errno_text("share: slot probe sendto", errno);
                return false;
            }
        }
        drain(2); // loopback delivers within the sendto, unless softirqs are deferred
    }
    // Late arrivals (a loaded host defers softirqs) can only lower best, never below our index.
    while (coarse_monotonic_ns() < give_up) {
        const unsigned before = best;
        drain(20);
        if (best != kMaxShareSlots && best == before) break;
    }
    if (best == kMaxShareSlots) {
        *err = "share: no slot probe came back to this socket in 500 ms (more than " +
               std::to_string(kMaxShareSlots) + " processes share UDP port " +
               std::to_string(udp_port_) + " on " + addr_text(ipv4_, addr_) + "?)";
        return false;
    }
    *index = best;
    return true;
}

bool UringPort::join_group(int want, std::string* err) {
    unsigned idx = 0;
    if (!probe_index(&idx, err)) return false;
    const std::string where =
        "UDP port " + std::to_string(udp_port_) + " on " + addr_text(ipv4_, addr_);
    table_path_ = table_path(ipv4_, addr_, udp_port_);
    share_name_ = table_path_.substr(table_path_.rfind('/') + 1);
    repair_ = std::make_unique<ShareRepair>();
    ShareTable t;
    if (const int r = read_table(table_path_, &t); r != kTableOk) {
        *err = r == kTableDamaged ? "share: " + table_path_ +
                                        " is damaged: remove it once no process shares " + where
                                  : errno_text(("share: reading " + table_path_).c_str(), r);
        return false;
    }
    if (idx == 0) t.n = 0; // alone in the group: whatever the file says is stale
    // One member dead: the kernel's move is known and replayed. More: the members before this
    // socket's index are asked who they are (they answer from their next poll).
    if (t.n != idx && !repair_table(share_name_, &t, idx) && !ask_members(idx, &t)) {
        *err = "share: " + table_path_ + " lists " + std::to_string(t.n) +
               " members but this socket is member " + std::to_string(idx) +
               " of the group: members ended without leaving (killed?), the kernel moved "
               "others into their places, and not every member answered who it is in 500 ms "
               "(a member that does not poll its port: stopped, or an older droce); stop every "
               "process sharing " +
               where + ", then start them again";
        return false;
    }
    unsigned slot = 0;
    const auto used = [&](unsigned s) {
        return std::find(t.slot_at, t.slot_at + t.n, s) != t.slot_at + t.n;
    };
    // A slot is taken by binding its sign of life, which one live process at a time can hold:
    // even a table that misses a live member (whatever made it so) never hands its slot out twice.
    int alive = -EADDRINUSE;
    // Binding can fail for another reason than a live holder (EMFILE, ENOBUFS): that is named,
    // not reported as a full group.
    const auto bind_failed = [&](int e) {
        *err = errno_text(
            ("share: binding the sign of life of slot " + std::to_string(slot) + " on " + where)
                .c_str(),
            e);
        return false;
    };
    if (want >= 0) {
        slot = static_cast<unsigned>(want);
        if (slot < kMaxShareSlots && !used(slot)) alive = bind_alive(share_name_, slot);
        if (alive < 0 && alive != -EADDRINUSE) return bind_failed(-alive);
        if (alive < 0) {
            *err = "share: slot " + std::to_string(want) +
                   " (this process's slot on its other shared ports) is another member's on " +
                   where + ": processes that share several ports must share the same ones";
            return false;
        }
    } else {
        for (; slot < kMaxShareSlots; ++slot) {
            if (used(slot)) continue;
            if ((alive = bind_alive(share_name_, slot)) >= 0) break;
            if (alive != -EADDRINUSE) return bind_failed(-alive);
            inc(PortCounter::share_slot_held_elsewhere);
        }
        if (alive < 0) {
            *err = "share: every slot of " + where + " is taken (" +
                   std::to_string(kMaxShareSlots) + " members at most)";
            return false;
        }
    }
    const auto release = [&] {
        close(alive);
        return false;
    };
    t.slot_at[idx] = static_cast<std::uint8_t>(slot);
    t.n = idx + 1;
    if (!attach_steering(rx_fd_, t)) {
        *err = errno_text("share: setsockopt SO_ATTACH_REUSEPORT_CBPF", errno);
        return release();
    }
    if (!write_table(table_path_, t)) {
        *err = errno_text(("share: writing " + table_path_).c_str(), errno);
        return release();
    }
    alive_fd_ = alive;
    slot_ = static_cast<std::uint8_t>(slot);
    joined_ = true;
    return true;
}

void UringPort::leave_share_group() noexcept {
    if (!joined_) return;
    io_uring& r = ring_->ring;
    if (io_uring_sqe* sqe = io_uring_get_sqe(&r)) {
        io_uring_prep_cancel_fd(sqe, in_fd_, IORING_ASYNC_CANCEL_ALL); // packet mode: pkt_fd_
        io_uring_sqe_set_data64(sqe, user_data(kTagCancel, 0));
        (void)io_uring_submit(&r);
    }
    const auto receiving = [this] { return armed_ || (mode_ == RecvMode::batched && rx_posted_); };
    for (int round = 0; round < 100 && receiving(); ++round) {
        PktBuf* tmp[kMaxBurst];
        free_bulk(tmp, reap(tmp, kMaxBurst)); // frames that made it in: dropped
        __kernel_timespec ts{0, 1'000'000};
        io_uring_cqe* cqe = nullptr;
        (void)io_uring_wait_cqe_timeout(&r, &cqe, &ts);
    }
    leave_group();
}

void UringPort::leave_group() noexcept {
    end_repair();
    // The kernel will move the group's last socket into our index when ours closes: steer the
    // last member's slot to our index first (until the close, its datagrams reach us and are
    // dropped; RC retransmits them), then close, under the lock so no join sees a half state.
    ShareJoinLock join(10'000, nullptr);
    ShareTable t;
    if (join.held() && read_table(table_path_, &t) == kTableOk) {
        const auto* it = std::find(t.slot_at, t.slot_at + t.n, slot_);
        if (it != t.slot_at + t.n) {
            t.slot_at[it - t.slot_at] = t.slot_at[t.n - 1];
            --t.n;
            if (t.n > 0) (void)attach_steering(rx_fd_, t);
            (void)write_table(table_path_, t);
        }
    }
    close(rx_fd_);
    rx_fd_ = -1;
    // Packet mode: its packet socket would go on taking this slot's frames, which a member
    // joining after us may take.
    if (pkt_fd_ >= 0) close(pkt_fd_);
    pkt_fd_ = -1;
    if (alive_fd_ >= 0) close(alive_fd_);
    alive_fd_ = -1;
    joined_ = false;
}

namespace {
/** Writes an IP_TOS / IPV6_TCLASS control message carrying @p tos at @p c. */
void put_tos_cmsg(cmsghdr* c, bool ipv4, std::uint8_t tos) noexcept {
    c->cmsg_level = ipv4 ? IPPROTO_IP : IPPROTO_IPV6;
    c->cmsg_type = ipv4 ? IP_TOS : IPV6_TCLASS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    const int v = tos;
    std::memcpy(CMSG_DATA(c), &v, sizeof v);
}
} // namespace

void UringPort::submit() noexcept {
    if (io_uring_sq_ready(&ring_->ring) == 0) return;
    const int rc = io_uring_submit(&ring_->ring);
    if (rc < 0) inc(PortCounter::submit_errors);
}

std::uint16_t UringPort::tx_burst(PktBuf** bufs, std::uint16_t n) noexcept {
    io_uring& r = ring_->ring;
    GsoGroup g;
    wire::Ipv6Addr refused_peer{}; // the last peer gso_allowed() refused in this burst
    int refused_slot = -1;
    std::uint16_t i = 0;
    for (; i < n; ++i) {
        PktBuf* b = bufs[i];
        const std::uint32_t s = slot_of(b);
        if (s == UINT32_MAX || where_[s] != kCaller) {
            inc(PortCounter::free_invalid); // not ours to send: taken and left alone
            continue;
        }
        const std::uint8_t* f = b->data;
        const std::uint32_t len = b->len;
        // Ethernet [802.1Q] / IPv4 or IPv6 / UDP: everything else has no meaning to the kernel.
        std::uint32_t off = 14;
        std::uint16_t et = len >= 14 ? get_be16(f + 12) : 0;
        if (et == wire::kEtherTypeVlan && len >= 18) {
            et = get_be16(f + 16);
            off = 18;
        }
        std::uint32_t udp_off = 0, l3_end = 0;
        std::uint8_t tos = 0;
        const std::uint8_t* dst = nullptr;
        bool v4 = false;
        if (et == wire::kEtherTypeIpv4 && len >= off + 20 && (f[off] >> 4) == 4) {
            const std::uint32_t ihl = (f[off] & 0xfu) * 4u;
            l3_end = off + get_be16(f + off + 2);
            if (ihl >= 20 && f[off + 9] == wire::kIpProtoUdp && l3_end <= len) {
                udp_off = off + ihl;
                tos = f[off + 1];
                dst = f + off + 16;
                v4 = true;
            }
        } else if (et == wire::kEtherTypeIpv6 && len >= off + 40 && (f[off] >> 4) == 6) {
            l3_end = off + 40 + get_be16(f + off + 4);
            if (f[off + 6] == wire::kIpProtoUdp && l3_end <= len) {
                udp_off = off + 40;
                tos = static_cast<std::uint8_t>((get_be16(f + off) >> 4) & 0xffu);
                dst = f + off + 24;
            }
        }
        if (!dst || udp_off + 8 > l3_end || get_be16(f + udp_off + 4) != l3_end - udp_off) {
            inc(PortCounter::tx_dropped_not_udp);
            put_free(s);
            continue;
        }
        if (v4 != ipv4_) {
            inc(PortCounter::tx_dropped_family);
            put_free(s);
            continue;
        }
        const std::uint16_t sport = get_be16(f + udp_off);
        const int fd = source_socket(sport);
        if (fd < 0) {
            inc(PortCounter::tx_dropped_no_socket);
            put_free(s);
            continue;
        }
        wire::Ipv6Addr peer{};
        if (v4)
            peer = wire::ipv4_mapped({dst[0], dst[1], dst[2], dst[3]});
        else
            std::memcpy(peer.data(), dst, 16);
        std::uint8_t* payload = const_cast<std::uint8_t*>(f + udp_off + 8);
        const std::uint32_t plen = l3_end - udp_off - 8;
        // rx_fd_ keeps SO_NO_CHECK (the kernel refuses GSO there) and zero-copy sends go alone.
        // A frame too short for a BTH is no RoCE frame any receiver groups: it goes alone.
        const std::uint8_t dslot = plen > kBthDestQpTopByte ? payload[kBthDestQpTopByte] : 0;
        if (gso_ && fd != rx_fd_ && plen < zc_min_ && plen > kBthDestQpTopByte) {
            if (g.count != 0 && !g.closed && g.fd == fd && g.tos == tos && g.peer == peer &&
                g.dslot == dslot && plen <= g.seg && g.count < kGsoMaxSegments &&
                g.bytes + plen <= kGsoMaxBytes) {
                // The second frame decides whether the group is one: a frame that goes alone
                // (an EV probe's reply, an ACK) never makes the port ask its peer (auto).
                if (g.count == 1) {
                    bool allowed = true;
                    if (gso_auto_) {
                        // Asked once per burst and peer, not once per frame sent singly.
                        if (dslot == refused_slot && peer == refused_peer) {
                            allowed = false;
                        } else if (!gso_allowed(peer, dslot)) {
                            allowed = false;
                            refused_peer = peer;
                            refused_slot = dslot;
                        }
                    }
                    g.send_fd = allowed ? gso_source_socket(sport, fd) : -1;
                }
                if (g.send_fd >= 0) {
                    ring_->gso_iov[static_cast<std::size_t>(g.leader) * kGsoMaxSegments + g.count] =
                        {payload, plen};
                    ++g.count;
                    g.bytes += plen;
                    g.closed = plen < g.seg;
                    where_[s] = kTxInFlight;
                    ++tx_inflight_;
                    continue;
                }
                // Not towards this peer: the group of one goes alone, this frame opens the next.
            }
            gso_flush(g);
            io_uring_sqe* sqe = io_uring_get_sqe(&r);
            if (!sqe) {
                inc(PortCounter::tx_sq_full);
                break; // the caller keeps bufs[i..n)
            }
            g.sqe = sqe;
            g.leader = s;
            g.fd = fd;
            g.send_fd = -1; // decided by the second frame
            g.peer = peer;
            g.tos = tos;
            g.dslot = dslot;
            g.seg = plen;
            g.count = 1;
            g.bytes = plen;
            g.closed = false;
            ring_->gso_iov[static_cast<std::size_t>(s) * kGsoMaxSegments] = {payload, plen};
            where_[s] = kTxInFlight;
            ++tx_inflight_;
            continue;
        }
        gso_flush(g);
        io_uring_sqe* sqe = io_uring_get_sqe(&r);
        if (!sqe) {
            inc(PortCounter::tx_sq_full);
            break; // the caller keeps bufs[i..n)
        }
        SlotMsg& m = ring_->msgs[s];
        socklen_t salen = 0;
        fill_sockaddr(ipv4_, peer, peer_port_, &m.peer, &salen);
        m.iov.iov_base = payload;
        m.iov.iov_len = plen;
        m.msg = msghdr{};
        m.msg.msg_name = &m.peer;
        m.msg.msg_namelen = salen;
        m.msg.msg_iov = &m.iov;
        m.msg.msg_iovlen = 1;
        if (tos != 0) {
            // The DSCP and ECN the engine chose (ECT(0) under DCQCN) go in the kernel's header.
            m.msg.msg_control = m.ctrl;
            m.msg.msg_controllen = CMSG_SPACE(sizeof(int));
            put_tos_cmsg(CMSG_FIRSTHDR(&m.msg), ipv4_, tos);
        }
        if (m.iov.iov_len >= zc_min_) {
            // The kernel pins the buffer instead of copying it: the slot stays in flight until
            // the notification CQE says the kernel let go (reap).
            io_uring_prep_sendmsg_zc(sqe, fd, &m.msg, 0);
            sqe->ioprio |= IORING_SEND_ZC_REPORT_USAGE;
            io_uring_sqe_set_data64(sqe, user_data(kTagTxZc, s));
        } else {
            io_uring_prep_sendmsg(sqe, fd, &m.msg, 0);
            io_uring_sqe_set_data64(sqe, user_data(kTagTx, s));
        }
        where_[s] = kTxInFlight;
        ++tx_inflight_;
    }
    gso_flush(g);
    submit();
    return i;
}

void UringPort::gso_flush(GsoGroup& g) noexcept {
    if (g.count == 0) return;
    SlotMsg& m = ring_->msgs[g.leader];
    socklen_t salen = 0;
    fill_sockaddr(ipv4_, g.peer, peer_port_, &m.peer, &salen);
    m.msg = msghdr{};
    m.msg.msg_name = &m.peer;
    m.msg.msg_namelen = salen;
    m.msg.msg_iov = &ring_->gso_iov[static_cast<std::size_t>(g.leader) * kGsoMaxSegments];
    m.msg.msg_iovlen = g.count;
    std::size_t ctrl = 0;
    if (g.count > 1) ctrl += CMSG_SPACE(sizeof(std::uint16_t));
    if (g.tos != 0) ctrl += CMSG_SPACE(sizeof(int));
    static_assert(sizeof(SlotMsg::ctrl) >=
                  CMSG_SPACE(sizeof(std::uint16_t)) + CMSG_SPACE(sizeof(int)));
    if (ctrl != 0) {
        m.msg.msg_control = m.ctrl;
        m.msg.msg_controllen = ctrl;
        cmsghdr* c = CMSG_FIRSTHDR(&m.msg);
        if (g.count > 1) {
            // Every frame but the last is exactly g.seg bytes: the kernel cuts at that size.
            c->cmsg_level = SOL_UDP;
            c->cmsg_type = UDP_SEGMENT;
            c->cmsg_len = CMSG_LEN(sizeof(std::uint16_t));
            const auto seg = static_cast<std::uint16_t>(g.seg);
            std::memcpy(CMSG_DATA(c), &seg, sizeof seg);
            c = CMSG_NXTHDR(&m.msg, c);
        }
        if (g.tos != 0) put_tos_cmsg(c, ipv4_, g.tos);
    }
    io_uring_prep_sendmsg(g.sqe, g.count > 1 ? g.send_fd : g.fd, &m.msg, 0);
    io_uring_sqe_set_data64(g.sqe, user_data(g.count > 1 ? kTagTxGso : kTagTx, g.leader));
    g.count = 0;
    g.sqe = nullptr;
}

bool UringPort::rebuild(std::uint32_t slot, const std::uint8_t* name, std::uint32_t namelen,
                        const std::uint8_t* ctrl, std::uint32_t ctrllen, std::uint32_t payload_len,
                        bool truncated) noexcept {
    if (truncated) {
        inc(PortCounter::rx_dropped_truncated);
        return false;
    }
    const std::uint8_t* bth = mem_ + static_cast<std::size_t>(slot) * slot_bytes_ + kPayloadOff;
    if (is_probe(bth, payload_len) && bth[kProbeKindByte] >= kProbeGso) {
        if (bth[kProbeKindByte] == kProbeGso)
            answer_gso(bth, name, namelen);
        else if (bth[kProbeKindByte] == kProbeGsoYes)
            take_gso_answer(bth, name, namelen);
        return false;
    }
    if (share_) {
        if (is_probe(bth, payload_len)) {
            inc(PortCounter::rx_share_probes); // a member joining or repairing: not for the engine
            if (bth[kProbeKindByte] == kProbeWho && joined_ && from_group_address(name, namelen))
                answer_who(bth);
            return false;
        }
        // QP1 (the MRC endpoint QP, low 16 bits 1) of any slot is answered by any member.
        if (payload_len >= 8 && bth[kBthDestQpTopByte] != slot_ && !(bth[6] == 0 && bth[7] == 1))
            inc(PortCounter::rx_foreign_slot); // the engine drops it (no such QP)
    }
    // The sender, and the TOS / traffic class, before the headers overwrite them.
    sockaddr_in6 from{};
    std::memcpy(&from, name, std::min<std::uint32_t>(namelen, sizeof from));
    if (namelen < (ipv4_ ? sizeof(sockaddr_in) : sizeof(sockaddr_in6)) ||
        from.sin6_family != (ipv4_ ? AF_INET : AF_INET6)) {
        inc(PortCounter::rx_dropped_bad_addr);
        return false;
    }
    std::uint8_t tos = 0;
    for (std::uint32_t off = 0; off + sizeof(cmsghdr) <= ctrllen;) {
        cmsghdr h;
        std::memcpy(&h, ctrl + off, sizeof h);
        if (h.cmsg_len < sizeof(cmsghdr) || off + h.cmsg_len > ctrllen) break;
        const std::uint8_t* data = ctrl + off + CMSG_LEN(0);
        if (ipv4_ && h.cmsg_level == IPPROTO_IP && h.cmsg_type == IP_TOS)
            tos = data[0];
        else if (!ipv4_ && h.cmsg_level == IPPROTO_IPV6 && h.cmsg_type == IPV6_TCLASS) {
            int v = 0;
            std::memcpy(&v, data, sizeof v);
            tos = static_cast<std::uint8_t>(v);
        }
        off += static_cast<std::uint32_t>(CMSG_ALIGN(h.cmsg_len));
    }
    std::uint16_t sport;
    const std::uint32_t l3 = ipv4_ ? 20 : 40;
    const std::uint32_t hdr = 14 + l3 + 8;
    std::uint8_t* base = mem_ + static_cast<std::size_t>(slot) * slot_bytes_;
    std::uint8_t* f = base + kPayloadOff - hdr;
    std::uint8_t* ip = f + 14;
    if (ipv4_) {
        const auto* s4 = reinterpret_cast<const sockaddr_in*>(&from);
        sport = ntohs(s4->sin_port);
        auto* h = reinterpret_cast<wire::Ipv4Hdr*>(ip);
        h->version_ihl = 0x45;
        h->tos = tos;
        h->total_length.set(static_cast<std::uint16_t>(20 + 8 + payload_len));
        h->id.set(0);
        h->flags_frag.set(wire::kIpv4DontFragment);
        h->ttl = 64;
        h->protocol = wire::kIpProtoUdp;
        h->checksum.set(0);
        std::memcpy(h->src.data(), &s4->sin_addr, 4);
        std::memcpy(h->dst.data(), addr_.data() + 12, 4);
        h->checksum.set(wire::ipv4_header_checksum(h, 20));
    } else {
        sport = ntohs(from.sin6_port);
        auto* h = reinterpret_cast<wire::Ipv6Hdr*>(ip);
        h->set_vtc_flow(tos, 0);
        h->payload_length.set(static_cast<std::uint16_t>(8 + payload_len));
        h->next_header = wire::kIpProtoUdp;
        h->hop_limit = 64;
        std::memcpy(h->src.data(), &from.sin6_addr, 16);
        h->dst = addr_;
    }
    std::memcpy(f, mac_.data(), 6);
    std::memcpy(f + 6, kRxSourceMac.data(), 6);
    put_be16(f + 12, ipv4_ ? wire::kEtherTypeIpv4 : wire::kEtherTypeIpv6);
    std::uint8_t* udp = ip + l3;
    put_be16(udp, sport);
    put_be16(udp + 2, wire::kRoceV2Port); // the port the engine and the ICRC know (README)
    put_be16(udp + 4, static_cast<std::uint16_t>(8 + payload_len));
    put_be16(udp + 6, 0);
    PktBuf& b = bufs_[slot];
    b.data = f;
    b.len = hdr + payload_len;
    b.capacity = slot_bytes_ - (kPayloadOff - hdr);
    b.port = port_index_;
    b.ecn_ce = (tos & 3u) == 3u;
    b.ext_len = 0;
    return true;
}

bool UringPort::rebuild_packet(std::uint32_t slot, const std::uint8_t* /*name*/,
                               std::uint32_t /*namelen*/, const std::uint8_t* /*ctrl*/,
                               std::uint32_t /*ctrllen*/, std::uint32_t payload_len,
                               bool truncated) noexcept {
    if (truncated) {
        inc(PortCounter::rx_dropped_truncated);
        return false;
    }
    // The packet as it was on the wire from the IP header on: only the Ethernet header is missing.
    // Headers too short to read go to the engine as they are: parse_frame() counts them.
    std::uint8_t* ip = mem_ + static_cast<std::size_t>(slot) * slot_bytes_ + kPayloadOff;
    std::uint32_t len = payload_len;
    std::uint8_t tos = 0;
    std::uint8_t* udp = nullptr;
    if (ipv4_ && len >= 20) {
        const std::uint32_t ihl = (ip[0] & 0xfu) * 4u;
        const std::uint32_t total = get_be16(ip + 2);
        tos = ip[1];
        // Ethernet pads a short packet (an empty RoCE SEND) to 60 bytes: the padding is not ours.
        if (total >= ihl && total <= len) len = total;
        if (ihl >= 20 && ihl + 8 <= len) udp = ip + ihl;
    } else if (!ipv4_ && len >= 40) {
        tos = static_cast<std::uint8_t>((get_be16(ip) >> 4) & 0xffu);
        const std::uint32_t total = 40u + get_be16(ip + 4);
        if (total <= len) len = total;
        if (48 <= len) udp = ip + 40;
    }
    // The engine and the ICRC know 4791 (README: destination port and tests).
    if (udp) put_be16(udp + 2, wire::kRoceV2Port);
    std::uint8_t* f = ip - 14;
    std::memcpy(f, mac_.data(), 6);
    std::memcpy(f + 6, kRxSourceMac.data(), 6);
    put_be16(f + 12, ipv4_ ? wire::kEtherTypeIpv4 : wire::kEtherTypeIpv6);
    PktBuf& b = bufs_[slot];
    b.data = f;
    b.len = 14 + len;
    b.capacity = slot_bytes_ - (kPayloadOff - 14);
    b.port = port_index_;
    b.ecn_ce = (tos & 3u) == 3u;
    b.ext_len = 0;
    return true;
}

std::uint16_t UringPort::reap(PktBuf** out, std::uint16_t n) noexcept {
    io_uring& r = ring_->ring;
    unsigned head = 0, seen = 0;
    std::uint16_t got = 0;
    io_uring_cqe* cqe = nullptr;
    // Cooperative task running (TaskRun::coop): completions the kernel holds as task work come
    // out only when this thread enters the kernel; the flag says when that is worth a system call.
    if (task_work_flagged()) (void)io_uring_get_events(&r);
    io_uring_for_each_cqe(&r, head, cqe) {
        const auto tag = static_cast<Tag>(cqe->user_data >> 32);
        const auto slot = static_cast<std::uint32_t>(cqe->user_data);
        const int res = cqe->res;
        const bool rx = tag == kTagRxMulti || tag == kTagRxSingle;
        if (rx && res >= 0 && got == n) break; // no room for the frame: leave it for next time
        ++seen;
        switch (tag) {
        case kTagTx:
            inc(res >= 0 ? PortCounter::tx_packets : PortCounter::tx_errors);
            --tx_inflight_;
            put_free(slot);
            break;
        case kTagTxGso: {
            // One result for the whole send; each iovec is a frame in its own slot.
            const msghdr& m = ring_->msgs[slot].msg;
            const auto frames = static_cast<std::uint32_t>(m.msg_iovlen);
            if (res >= 0) {
                inc(PortCounter::tx_packets, frames);
                inc(PortCounter::tx_gso_sends);
            } else {
                inc(PortCounter::tx_errors, frames);
                if (res == -EIO || res == -EINVAL) {
                    // No checksum offload on the route, or a limit this kernel has lower: the
                    // frames are lost (the transport resends them) and the port sends singly.
                    inc(PortCounter::tx_gso_refused);
                    gso_ = false;
                }
            }
            for (std::uint32_t k = 0; k < frames; ++k) {
                const auto* base = static_cast<const std::uint8_t*>(m.msg_iov[k].iov_base);
                put_free(static_cast<std::uint32_t>((base - mem_) / slot_bytes_));
            }
            tx_inflight_ -= frames;
            break;
        }
        case kTagTxZc:
            // Two CQEs with the same user_data: the send's result (IORING_CQE_F_MORE when a
            // notification follows), then the notification (IORING_CQE_F_NOTIF), after which
            // the kernel no longer reads the buffer. Only then does the slot go back.
            if (cqe->flags & IORING_CQE_F_NOTIF) {
                if (static_cast<std::uint32_t>(res) & IORING_NOTIF_USAGE_ZC_COPIED)
                    inc(PortCounter::tx_zc_copied);
            } else {
                inc(res >= 0 ? PortCounter::tx_packets : PortCounter::tx_errors);
                if (res >= 0) inc(PortCounter::tx_zc);
                if (cqe->flags & IORING_CQE_F_MORE) break; // the notification is to come
            }
            --tx_inflight_;
            put_free(slot);
            break;
        case kTagRxMulti: {
            if (!(cqe->flags & IORING_CQE_F_MORE)) armed_ = false;
            if (res == -ENOBUFS) {
                inc(PortCounter::rx_no_buffer); // rearmed once buffers are back in the ring
                break;
            }
            if (res < 0) {
                // ECANCELED: the thread that armed it exited (or the destructor); rearmed.
                if (res != -ECANCELED) inc(PortCounter::rx_errors);
                if (res == -ENETDOWN && pkt_fd_ >= 0) pkt_unhooked_ = true;
                break;
            }
            if (!(cqe->flags & IORING_CQE_F_BUFFER)) {
                inc(PortCounter::rx_errors);
                break;
            }
            const std::uint32_t s = cqe->flags >> IORING_CQE_BUFFER_SHIFT;
            --rx_posted_;
            std::uint8_t* base = mem_ + static_cast<std::size_t>(s) * slot_bytes_;
            io_uring_recvmsg_out* o = io_uring_recvmsg_validate(base, res, &ring_->multishot_msg);
            const bool ok = o && (this->*receive_)(s, base + kNameOff, o->namelen, base + kCtrlOff,
                                                   std::min<std::uint32_t>(o->controllen, kCtrlLen),
                                                   static_cast<std::uint32_t>(res) - kPayloadOff,
                                                   (o->flags & MSG_TRUNC) != 0);
            if (!o) inc(PortCounter::rx_errors);
            if (ok) {
                where_[s] = kCaller;
                out[got++] = &bufs_[s];
                inc(PortCounter::rx_packets);
            } else {
                put_free(s);
            }
            break;
        }
        case kTagRxSingle: {
            --rx_posted_;
            if (res < 0) {
                if (res != -ECANCELED) inc(PortCounter::rx_errors);
                if (res == -ENETDOWN && pkt_fd_ >= 0) pkt_unhooked_ = true;
                put_free(slot);
                break;
            }
            const msghdr& m = ring_->msgs[slot].msg;
            std::uint8_t* base = mem_ + static_cast<std::size_t>(slot) * slot_bytes_;
            if ((this->*receive_)(slot, base + kNameOff, m.msg_namelen, base + kCtrlOff,
                                  static_cast<std::uint32_t>(m.msg_controllen),
                                  static_cast<std::uint32_t>(res),
                                  (m.msg_flags & MSG_TRUNC) != 0)) {
                where_[slot] = kCaller;
                out[got++] = &bufs_[slot];
                inc(PortCounter::rx_packets);
            } else {
                put_free(slot);
            }
            break;
        }
        case kTagCancel:
            break;
        }
    }
    if (seen) io_uring_cq_advance(&r, seen);
    return got;
}

void UringPort::keep_receiving() noexcept {
    if (rx_fd_ < 0) return; // left its share group (leave_share_group)
    io_uring& r = ring_->ring;
    if (mode_ == RecvMode::multishot) {
        io_uring_buf_ring* br = ring_->br;
        const int mask = io_uring_buf_ring_mask(ring_->br_entries);
        int added = 0;
        while (rx_posted_ < ring_cap_ && free_n_ > 0) {
            const std::uint32_t s = free_[--free_n_];
            where_[s] = kKernelRx;
            io_uring_buf_ring_add(br, mem_ + static_cast<std::size_t>(s) * slot_bytes_, slot_bytes_,
                                  static_cast<unsigned short>(s), mask, added++);
            ++rx_posted_;
        }
        if (added) io_uring_buf_ring_advance(br, added);
        if (!armed_ && rx_posted_ > 0) {
            io_uring_sqe* sqe = io_uring_get_sqe(&r);
            if (!sqe) return;
            io_uring_prep_recvmsg_multishot(sqe, in_fd_, &ring_->multishot_msg, 0);
            sqe->flags |= IOSQE_BUFFER_SELECT;
            sqe->buf_group = kBufGroup;
            io_uring_sqe_set_data64(sqe, user_data(kTagRxMulti, 0));
            armed_ = true;
            inc(PortCounter::rx_armed);
        }
        return;
    }
    while (rx_posted_ < ring_cap_ && free_n_ > 0) {
        io_uring_sqe* sqe = io_uring_get_sqe(&r);
        if (!sqe) return;
        const std::uint32_t s = free_[--free_n_];
        where_[s] = kKernelRx;
        std::uint8_t* base = mem_ + static_cast<std::size_t>(s) * slot_bytes_;
        SlotMsg& m = ring_->msgs[s];
        m.iov.iov_base = base + kPayloadOff;
        m.iov.iov_len = slot_bytes_ - kPayloadOff;
        m.msg = msghdr{};
        m.msg.msg_name = base + kNameOff;
        m.msg.msg_namelen = kNameLen;
        m.msg.msg_control = base + kCtrlOff;
        m.msg.msg_controllen = kCtrlLen;
        m.msg.msg_iov = &m.iov;
        m.msg.msg_iovlen = 1;
        io_uring_prep_recvmsg(sqe, in_fd_, &m.msg, 0);
        io_uring_sqe_set_data64(sqe, user_data(kTagRxSingle, s));
        ++rx_posted_;
        inc(PortCounter::rx_armed);
    }
}

std::uint16_t UringPort::rx_burst(PktBuf** bufs, std::uint16_t n) noexcept {
    std::uint16_t got = reap(bufs, n);
    // A port whose link is down receives nothing, like a NIC's: what the kernel still had queued
    // (or delivers by another interface to this address) must not feed a QP that was told the
    // plane is gone. The state is the one the engine last asked for (no system call here).
    if (got && !link_seen_up_.load(std::memory_order_relaxed)) [[unlikely]] {
        free_bulk(bufs, got);
        inc(PortCounter::rx_dropped_link_down, got);
        // reap() counted them as handed to the engine: they were not.
        auto& rx = counters_[static_cast<unsigned>(PortCounter::rx_packets)];
        rx.store(rx.load(std::memory_order_relaxed) - got, std::memory_order_relaxed);
        got = 0;
    }
    if (pkt_fd_ >= 0) {
        // A new index (the interface deleted and one of its name created), or the kernel
        // unhooked the socket (ENETDOWN: the interface went away, to another namespace too, and
        // may have come back with its index) and the link watch has seen something since.
        const std::uint32_t idx = link_->ifindex(); // as link_up() last read it
        if ((idx != pkt_ifindex_ || (pkt_unhooked_ && link_->events() != pkt_events_seen_)) &&
            idx != 0) [[unlikely]]
            rebind_packet_socket(idx);
    }
    if (share_) [[unlikely]] {
        if (pkt_fd_ >= 0) share_probes();
        if (counter(PortCounter::rx_foreign_slot) != foreign_seen_ || (repair_ && repair_->active))
            share_upkeep();
    }
    keep_receiving();
    submit();
    return got;
}

void UringPort::rebind_packet_socket(std::uint32_t ifindex) noexcept {
    // The interface was deleted (or moved to another namespace) and one of its name is here now:
    // the kernel unhooked the packet socket (its pending receive ended with ENETDOWN) and set
    // its index to none, so nothing would arrive again, even on the same index. Binding it anew
    // keeps its filter; the armed receive goes on reading it. A refused bind is tried again only
    // after the next link event, not on every burst.
    pkt_ifindex_ = ifindex;
    pkt_events_seen_ = link_->events();
    sockaddr_ll sll{};
    sll.sll_family = AF_PACKET;
    sll.sll_protocol = htons(ipv4_ ? ETH_P_IP : ETH_P_IPV6);
    sll.sll_ifindex = static_cast<int>(ifindex);
    const bool ok = bind(pkt_fd_, reinterpret_cast<sockaddr*>(&sll), sizeof sll) == 0;
    if (ok) pkt_unhooked_ = false; // else tried again after the link watch's next event
    inc(ok ? PortCounter::packet_rebinds : PortCounter::packet_rebind_failed);
}

bool UringPort::from_group_address(const std::uint8_t* name, std::uint32_t namelen) const noexcept {
    sockaddr_in6 from{};
    std::memcpy(&from, name, std::min<std::uint32_t>(namelen, sizeof from));
    if (ipv4_) {
        const auto* s4 = reinterpret_cast<const sockaddr_in*>(&from);
        return s4->sin_family == AF_INET && ntohs(s4->sin_port) == udp_port_ &&
               std::memcmp(&s4->sin_addr, addr_.data() + 12, 4) == 0;
    }
    return from.sin6_family == AF_INET6 && ntohs(from.sin6_port) == udp_port_ &&
           std::memcmp(&from.sin6_addr, addr_.data(), 16) == 0;
}

void UringPort::share_probes() noexcept {
    // Packet mode: the UDP socket keeps only the group's probes, and nothing else reads it. At
    // most once a millisecond (the coarse clock's tick), a few at a time: a joiner's round is 16
    // probes, a repair's one per member.
    const std::uint64_t now = coarse_monotonic_ns();
    if (now < next_probe_read_ns_) return;
    next_probe_read_ns_ = now + 1'000'000;
    for (int i = 0; i < 32; ++i) {
        std::uint8_t in[kShareProbeLen + 1];
        sockaddr_in6 from{};
        socklen_t fromlen = sizeof from;
        const ssize_t got = recvfrom(rx_fd_, in, sizeof in, MSG_DONTWAIT,
                                     reinterpret_cast<sockaddr*>(&from), &fromlen);
        if (got < 0) return;
        // A GSO probe steered here (packet mode does not answer them) is not the group's.
        if (!is_probe(in, static_cast<std::uint32_t>(got)) || in[kProbeKindByte] >= kProbeGso)
            continue;
        inc(PortCounter::rx_share_probes);
        if (in[kProbeKindByte] == kProbeWho && joined_ &&
            from_group_address(reinterpret_cast<const std::uint8_t*>(&from), fromlen))
            answer_who(in);
    }
}

namespace {
/** The IPv4-mapped or IPv6 address and the port of a datagram's source (a sockaddr of @p namelen
 *  bytes from the kernel). @return false when it is not of the port's family. */
bool source_of(const std::uint8_t* name, std::uint32_t namelen, bool ipv4, wire::Ipv6Addr* addr,
               std::uint16_t* port) noexcept {
    sockaddr_in6 from{};
    std::memcpy(&from, name, std::min<std::uint32_t>(namelen, sizeof from));
    if (ipv4) {
        const auto* s4 = reinterpret_cast<const sockaddr_in*>(&from);
        if (namelen < sizeof(sockaddr_in) || s4->sin_family != AF_INET) return false;
        const auto* a = reinterpret_cast<const std::uint8_t*>(&s4->sin_addr);
        *addr = wire::ipv4_mapped({a[0], a[1], a[2], a[3]});
        *port = ntohs(s4->sin_port);
        return true;
    }
    if (namelen < sizeof(sockaddr_in6) || from.sin6_family != AF_INET6) return false;
    std::memcpy(addr->data(), &from.sin6_addr, 16);
    *port = ntohs(from.sin6_port);
    return true;
}

/** splitmix64: the nonces of GSO probes from a random key (an off-path sender cannot guess the
 *  answer to forge). */
std::uint64_t mix64(std::uint64_t x) noexcept {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}
} // namespace

bool UringPort::send_gso_datagram(std::uint8_t kind, const wire::Ipv6Addr& to, std::uint16_t port,
                                  std::uint8_t to_slot, std::uint8_t from_slot,
                                  std::uint64_t nonce) noexcept {
    std::uint8_t p[kShareProbeLen];
    build_probe(p, to_slot, nonce, kind);
    p[kProbeFromSlotByte] = from_slot;
    sockaddr_in6 sa;
    socklen_t salen = 0;
    fill_sockaddr(ipv4_, to, port, &sa, &salen);
    return sendto(rx_fd_, p, sizeof p, MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&sa), salen) ==
           static_cast<ssize_t>(sizeof p);
}

UringPort::GsoPeer* UringPort::gso_peer(const wire::Ipv6Addr& peer, std::uint8_t slot,
                                        bool insert) noexcept {
    if (gso_peers_.empty()) return nullptr;
    // Every address bit moves the place (a /24's peers differ in one byte only).
    std::uint64_t lo, hi;
    std::memcpy(&lo, peer.data(), 8);
    std::memcpy(&hi, peer.data() + 8, 8);
    const std::uint64_t h = mix64(hi ^ mix64(lo ^ slot));
    static_assert((kGsoPeers & (kGsoPeers - 1)) == 0 && kGsoPeerWays <= kGsoPeers);
    // kGsoPeerWays places per key: a lookup reads all of them (no tombstones to keep), and an
    // insert into a full window forgets the entry used longest ago there, so that peers that
    // came once (an EV probe's reply to a forged source) cannot keep out the ones in use.
    const auto base = static_cast<std::uint32_t>(h & (kGsoPeers - 1));
    GsoPeer* free_entry = nullptr;
    GsoPeer* oldest = nullptr;
    for (std::uint32_t w = 0; w < kGsoPeerWays; ++w) {
        GsoPeer& e = gso_peers_[(base + w) & (kGsoPeers - 1)];
        if (!e.used) {
            if (!free_entry) free_entry = &e;
            continue;
        }
        if (e.slot == slot && e.addr == peer) return &e;
        if (!oldest || e.last_use < oldest->last_use) oldest = &e;
    }
    if (!insert) return nullptr;
    GsoPeer* e = free_entry;
    if (!e) {
        e = oldest;
        inc(PortCounter::gso_peers_evicted);
    }
    *e = GsoPeer{};
    e->addr = peer;
    e->slot = slot;
    e->used = true;
    return e;
}

bool UringPort::gso_towards(const wire::Ipv6Addr& peer, std::uint8_t slot) const noexcept {
    if (!gso_) return false;
    if (!gso_auto_) return true;
    const GsoPeer* e = const_cast<UringPort*>(this)->gso_peer(peer, slot, false);
    return e && coarse_monotonic_ns() < e->yes_until_ns;
}

bool UringPort::gso_allowed(const wire::Ipv6Addr& peer, std::uint8_t slot) noexcept {
    GsoPeer* e = gso_peer(peer, slot, true);
    if (!e) return false;
    const std::uint64_t now = coarse_monotonic_ns();
    e->last_use = ++gso_use_count_;
    const bool yes = now < e->yes_until_ns;
    if (now >= gso_probe_window_ns_) {
        gso_probe_window_ns_ = now + kGsoAnswerWindowNs;
        gso_probes_in_window_ = 0;
    }
    // A port-wide budget, like the answers': peers forgotten and met again (more than the table
    // holds) would otherwise be asked at every group, a system call or two each.
    if (now >= e->next_ask_ns && gso_probes_in_window_ >= kGsoAnswersPerWindow) {
        inc(PortCounter::gso_probes_limited);
    } else if (now >= e->next_ask_ns) {
        ++gso_probes_in_window_;
        // Asked from the receive socket, so that the answer comes back to it, as the peer's
        // frames do; to the port the data goes to, whose socket must be the one answering.
        // Fresh random bytes per probe (a rare system call, never blocking): a nonce must not
        // tell an observer the next one. mix64 only where the kernel has no entropy yet.
        std::uint64_t nonce = 0;
        if (getrandom(&nonce, sizeof nonce, GRND_NONBLOCK) != sizeof nonce)
            nonce = mix64(gso_key_ + ++gso_asked_);
        e->nonce = nonce | 1u;
        if (send_gso_datagram(kProbeGso, peer, peer_port_, slot, slot_, e->nonce))
            inc(PortCounter::gso_probes_sent);
        if (e->asks < 255) ++e->asks;
        e->next_ask_ns = now + (yes || e->asks < kGsoFastAsks ? kGsoAskNs : kGsoAskSlowNs);
    }
    return yes;
}

void UringPort::answer_gso(const std::uint8_t* probe, const std::uint8_t* name,
                           std::uint32_t namelen) noexcept {
    // A shared member answers for its own slot only: a slot no member has is hashed to anyone.
    if (share_ && probe[kBthDestQpTopByte] != slot_) return;
    const std::uint64_t now = coarse_monotonic_ns();
    if (now >= gso_answer_window_ns_) {
        gso_answer_window_ns_ = now + kGsoAnswerWindowNs;
        gso_answers_in_window_ = 0;
    }
    if (gso_answers_in_window_ >= kGsoAnswersPerWindow) {
        inc(PortCounter::gso_answers_limited);
        return;
    }
    ++gso_answers_in_window_;
    wire::Ipv6Addr from;
    std::uint16_t from_port;
    if (!source_of(name, namelen, ipv4_, &from, &from_port)) return;
    std::uint64_t nonce;
    std::memcpy(&nonce, probe + wire::kDroceProbeNonceOffset, sizeof nonce);
    if (send_gso_datagram(kProbeGsoYes, from, from_port, probe[kProbeFromSlotByte],
                          probe[kBthDestQpTopByte], nonce))
        inc(PortCounter::gso_probes_answered);
}

void UringPort::take_gso_answer(const std::uint8_t* answer, const std::uint8_t* name,
                                std::uint32_t namelen) noexcept {
    wire::Ipv6Addr from;
    std::uint16_t from_port = 0;
    std::uint64_t nonce;
    std::memcpy(&nonce, answer + wire::kDroceProbeNonceOffset, sizeof nonce);
    GsoPeer* e = nullptr;
    // Only from the socket our frames go to, for a probe of ours still awaited or refreshed.
    if (gso_auto_ && !(share_ && answer[kBthDestQpTopByte] != slot_) &&
        source_of(name, namelen, ipv4_, &from, &from_port) && from_port == peer_port_)
        e = gso_peer(from, answer[kProbeFromSlotByte], false);
    if (!e || e->nonce == 0 || e->nonce != nonce) {
        inc(PortCounter::gso_answers_ignored);
        return;
    }
    const std::uint64_t now = coarse_monotonic_ns();
    e->yes_until_ns = now + kGsoYesNs;
    e->next_ask_ns = now + kGsoYesNs / 2;
    e->asks = 0;
    e->nonce = 0; // one answer per probe
    inc(PortCounter::gso_answers_accepted);
}

void UringPort::answer_who(const std::uint8_t* probe) noexcept {
    ShareAnswer a{};
    std::memcpy(a.magic, wire::kDroceProbeMagic, sizeof wire::kDroceProbeMagic);
    std::memcpy(&a.nonce, probe + wire::kDroceProbeNonceOffset, sizeof a.nonce);
    a.index = probe[kBthDestQpTopByte]; // the program delivered it to the index it names
    a.slot = slot_;
    char suffix[20];
    answer_suffix(suffix, a.nonce);
    sockaddr_un sa;
    const socklen_t len = group_name(&sa, share_name_, suffix);
    if (sendto(alive_fd_, &a, sizeof a, MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&sa), len) ==
        static_cast<ssize_t>(sizeof a))
        inc(PortCounter::share_who_answered);
}

void UringPort::share_upkeep() noexcept {
    foreign_seen_ = counter(PortCounter::rx_foreign_slot);
    if (!joined_ || !repair_) return;
    ShareRepair& r = *repair_;
    const std::uint64_t now = coarse_monotonic_ns();
    if (r.active) {
        if (now < r.next_absorb_ns) return; // not a recvmsg per burst
        r.next_absorb_ns = now + kShareAbsorbNs;
        if (!r.who.absorb()) {
            if (r.who.conflicting() || now >= r.deadline_ns) {
                inc(PortCounter::share_repair_failed);
                end_repair();
                r.next_check_ns = now + kShareRetryNs;
            } else if (now >= r.next_resend_ns) {
                r.next_resend_ns = now + kShareResendNs;
                (void)r.who.resend();
            }
            return;
        }
        // Every index answered. Written under the lock, and only over the table the probes
        // started from: a join, leave or other repair since then changed the group, and the
        // answers may no longer hold (the next frame steered wrong starts again).
        const int lock = try_join_lock();
        if (lock < 0) {
            if (now >= r.deadline_ns) {
                inc(PortCounter::share_repair_failed);
                end_repair();
                r.next_check_ns = now + kShareRetryNs;
            }
            return; // a join or leave in progress: tried again at the next read
        }
        ShareTable now_t, t;
        std::bitset<kMaxShareSlots> dead_now;
        bool ok = read_table(table_path_, &now_t) == kTableOk &&
                  std::memcmp(&now_t, &r.started_from, sizeof now_t) == 0 &&
                  (count_dead(share_name_, now_t, &dead_now), dead_now == r.dead_slots);
        if (ok) {
            r.who.table(&t);
            ok = attach_steering(rx_fd_, t) && write_table(table_path_, t);
        }
        close(lock);
        inc(ok ? PortCounter::share_repairs : PortCounter::share_repair_failed);
        end_repair();
        r.next_check_ns = now + (ok ? kShareCheckNs : kShareRetryNs);
        return;
    }
    if (now < r.next_check_ns) return;
    r.next_check_ns = now + kShareCheckNs;
    // Frames of other slots arrive here: stale traffic for a member that left, or members that
    // died without leaving, after which the kernel moved others into their indices and the
    // program steers by a table that no longer matches. Only the second is repaired.
    ShareTable t;
    unsigned dead = 0;
    if (read_table(table_path_, &t) != kTableOk ||
        (dead = count_dead(share_name_, t, &r.dead_slots)) == 0 || dead >= t.n)
        return;
    // The order in which the dead left is unknown, so each index is asked (this member's own
    // probe comes back through this ring and is answered like the others).
    sockaddr_in6 self{};
    socklen_t selflen = 0;
    fill_sockaddr(ipv4_, addr_, udp_port_, &self, &selflen);
    if (r.who.start(rx_fd_, self, selflen, share_name_, t.n - dead) != 0) {
        inc(PortCounter::share_repair_failed);
        end_repair();
        r.next_check_ns = now + kShareRetryNs;
        return;
    }
    r.active = true;
    r.started_from = t;
    r.deadline_ns = now + kShareAnswerNs;
    r.next_resend_ns = now + kShareResendNs;
    r.next_absorb_ns = now;
}

void UringPort::end_repair() noexcept {
    if (!repair_) return;
    repair_->who.stop();
    repair_->active = false;
}

bool UringPort::ask_members(unsigned members, ShareTable* t) {
    WhoProbe who;
    sockaddr_in6 self{};
    socklen_t selflen = 0;
    fill_sockaddr(ipv4_, addr_, udp_port_, &self, &selflen);
    if (who.start(rx_fd_, self, selflen, share_name_, members) != 0) return false;
    const std::uint64_t give_up = coarse_monotonic_ns() + 500'000'000ull;
    while (!who.absorb() && !who.conflicting() && coarse_monotonic_ns() < give_up) {
        pollfd pfd{who.fd(), POLLIN, 0};
        if (poll(&pfd, 1, 20) == 0) (void)who.resend(); // answers lost to a full queue
    }
    if (who.conflicting() || !who.absorb()) return false;
    who.table(t);
    return true;
}

void UringPort::tx_reclaim() noexcept {
    if (tx_inflight_) (void)reap(nullptr, 0);
}

int UringPort::rx_interrupt_fd() const noexcept {
    return ring_->irq_fd;
}

bool UringPort::rx_interrupt_arm() noexcept {
    if (ring_->irq_fd < 0) return true;
    (void)io_uring_cq_eventfd_toggle(&ring_->ring, true);
    // The flag store before the look at the CQ tail; the kernel posts a CQE and then reads the
    // flag. A CQE that slips between both is seen here or signalled; a missed one costs no more
    // than the nap's bound.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (task_work_flagged()) return false; // completions wait as task work: nothing announces them
    return io_uring_cq_ready(&ring_->ring) == 0;
}

bool UringPort::task_work_flagged() const noexcept {
    return coop_ && (IO_URING_READ_ONCE(*ring_->ring.sq.kflags) & IORING_SQ_TASKRUN) != 0;
}

void UringPort::rx_interrupt_disarm() noexcept {
    if (ring_->irq_fd < 0) return;
    (void)io_uring_cq_eventfd_toggle(&ring_->ring, false);
    std::uint64_t drained;
    [[maybe_unused]] const ssize_t r = read(ring_->irq_fd, &drained, sizeof drained);
}

bool UringPort::link_up() const noexcept {
    const bool up = link_->up();
    link_seen_up_.store(up, std::memory_order_relaxed);
    return up;
}

} // namespace droce::uring
