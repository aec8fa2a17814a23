/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * droce::uring::UringPort — the PortDriver over kernel UDP sockets driven by io_uring: no DPDK, no
 * hugepages, no root. Include as "uring/uring_port.h". Design notes: drivers/uring/README.md.
 *
 * The engine still builds and parses whole Ethernet frames. The kernel owns everything below the
 * UDP payload, so the port translates:
 *  - transmit: from each frame it takes the IP destination, the IP TOS / IPv6 traffic class, the
 *    UDP source port and the UDP payload (BTH .. ICRC), and sends the payload with one sendmsg SQE
 *    to destination:peer_udp_port from a socket bound to (the port's address, that source port);
 *    one io_uring_submit per tx_burst. The Ethernet header (MACs) is ignored: the kernel routes.
 *  - receive: one socket bound to (address, udp_port); a multishot recvmsg over a provided buffer
 *    ring where the kernel has both (checked at create()), else a batch of single recvmsg SQEs. In
 *    front of each datagram's payload the port writes an Ethernet header (destination = mac(),
 *    source = kRxSourceMac), an IPv4 header (TOS from the kernel, ID 0, DF, TTL 64, checksum) or an
 *    IPv6 header (traffic class from the kernel, flow label 0, hop limit 64), and a UDP header
 *    (the sender's port, destination 4791, checksum 0), so that parse_frame() and its ICRC check
 *    run unchanged. The ICRC masks TOS, TTL, checksums, traffic class, flow label and hop limit;
 *    it covers the IPv4 ID and flags, which a UDP socket cannot see: they are rebuilt as 0 and DF,
 *    what an unconnected Linux UDP socket with IP_PMTUDISC_DO sends (and droce and rxe send). A
 *    peer sending another IPv4 ID fails the ICRC here (README: the IPv4 ID limit).
 *  - receive, RecvMode::packet (needs CAP_NET_RAW): the same ring reads an AF_PACKET SOCK_DGRAM
 *    socket on the interface instead, whose classic BPF filter copies only UDP to (address,
 *    udp_port). It delivers the IP header as it was on the wire (ID, flags, flow label), so the
 *    port writes only the Ethernet header in front, trims link padding to the IP length and
 *    writes 4791 as UDP destination; the ICRC then verifies for any peer. The UDP socket stays
 *    bound, so the kernel sends no ICMP port unreachable, and a filter drops all it receives.
 *
 * Source ports: the ICRC covers the UDP source port, which carries the QP's entropy, so the kernel
 * must send from exactly that port. The port keeps one socket per source port in use, bound to
 * (address, port) with SO_REUSEPORT, made the first time a frame with that source port is sent
 * (a cold path: socket, setsockopt, bind, about 10 us once per port) and kept until the port is
 * destroyed; at most max_source_ports of them. A source port that cannot be bound (another socket
 * holds it) or one beyond the limit drops its frames (tx_dropped_no_socket): a peer would drop them
 * anyway, their ICRC covering a port they would not come from.
 *
 * Buffers and ownership (port/port.h rules): one pool of n_buffers slots allocated by create(),
 * each holding one PktBuf and max_frame() + headroom bytes; nothing is allocated after that. A
 * slot is in exactly one place: the free list; the kernel (provided buffer ring, or a posted
 * recvmsg); the caller (from alloc_bulk() or rx_burst(), until it passes it to tx_burst() or
 * free_bulk()); or a send in flight (from tx_burst() until its CQE, reaped by a later rx_burst()
 * or alloc_bulk(), puts it back on the free list).
 *  - alloc_bulk(): the caller owns what it returns.
 *  - tx_burst(bufs, n) returning r: the port owns bufs[0..r) (frames it cannot send, not IP/UDP
 *    or of the other address family or without a source socket, are dropped and counted, never
 *    handed back), the caller bufs[r..n) (the submission queue was full: tx_sq_full).
 *  - rx_burst(): the caller owns what it returns; give each back with free_bulk() or transmit it.
 *  - free_bulk(): a buffer of another port, or one the caller does not own (a double free), is
 *    counted (free_invalid) and left alone.
 * The provided buffer ring holds at most half the pool, so that transmit always finds buffers.
 *
 * Thread rules: one thread at a time calls the datapath functions (alloc_bulk, free_bulk,
 * tx_burst, rx_burst, tx_reclaim): the engine thread, or an application thread in inline-progress
 * mode. io_uring ties an armed receive to the thread that submitted it: when that thread exits
 * its requests are cancelled and the next rx_burst() arms them again from the calling thread.
 * link_up() may be called from any thread (LinkWatch's rules). create() and the destructor are
 * control path. The datapath allocates no memory, takes no lock and throws nothing; it makes one
 * io_uring_enter per burst that has something to submit, and none when idle (completions are read
 * from the completion ring).
 */
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "port/port.h"
#include "uring/link_watch.h"
#include "wire/droce_probe.h"
#include "wire/eth.h"
#include "wire/ipv6.h"

namespace droce::uring {

// clang-format off
/** X(name) of the port counters (ethtool -S style names). */
#define DROCE_URING_COUNTERS(X)                                                                    \
    X(rx_packets)            /* frames handed to the engine */                                     \
    X(tx_packets)            /* sends the kernel completed */                                      \
    X(rx_dropped_truncated)  /* datagrams longer than a buffer (MSG_TRUNC): dropped */             \
    X(rx_dropped_bad_addr)   /* no or foreign-family source address from the kernel: dropped */    \
    X(rx_errors)             /* receive completions with an error (ENOBUFS, ECANCELED excluded) */ \
    X(rx_no_buffer)          /* the multishot receive stopped: the buffer ring was empty */        \
    X(rx_armed)              /* receives (re)armed: multishot starts, or single recvmsg posted */  \
    X(tx_dropped_not_udp)    /* frames that are not IPv4/IPv6 + UDP (ARP, ND, garbage) */          \
    X(tx_dropped_family)     /* IPv4 frame on an IPv6 port or the reverse */                       \
    X(tx_dropped_no_socket)  /* no socket for the frame's UDP source port (bind failed, limit) */  \
    X(tx_errors)             /* send completions with an error */                                  \
    X(tx_zc)                 /* sends made zero-copy (SENDMSG_ZC), their buffer back at the notif */\
    X(tx_zc_copied)          /* zero-copy sends the kernel copied after all (loopback, veth, ...) */\
    X(tx_gso_sends)          /* UDP GSO sends (several frames, one sendmsg; UringPortConfig::gso) */\
    X(tx_gso_refused)        /* GSO sends the kernel refused (EIO, EINVAL): GSO turned off */     \
    X(gso_probes_sent)       /* gso = auto: probes asking a peer whether it takes GSO sends */    \
    X(gso_probes_answered)   /* gso = auto: such probes of peers answered (we take them) */       \
    X(gso_answers_accepted)  /* gso = auto: answers that allowed GSO sends to a peer */            \
    X(gso_answers_ignored)   /* gso = auto: answers with no probe of ours (nonce, peer, slot) */  \
    X(gso_answers_limited)   /* gso = auto: probes not answered, the answer budget spent */       \
    X(gso_probes_limited)    /* gso = auto: probes not sent, the port's probe budget spent */      \
    X(gso_peers_evicted)     /* gso = auto: peers forgotten for room (asked again when next sent to) */\
    X(tx_sq_full)            /* tx bursts cut short: no submission queue entry free */             \
    X(submit_errors)         /* io_uring_submit failures (entries stay queued, sent later) */      \
    X(source_ports_bound)    /* sockets bound to a UDP source port so far (gso = auto, IPv4: and a second per port for GSO sends) */ \
    X(alloc_failed)          /* buffers asked of alloc_bulk that the pool could not give */        \
    X(free_invalid)          /* free_bulk of a foreign or not-owned buffer (ignored) */            \
    X(rx_dropped_link_down)  /* datagrams received while the link was down: not delivered */      \
    X(rx_share_probes)       /* share: slot probes of a joining member, dropped */                 \
    X(rx_foreign_slot)       /* share: frames for a QPN of another slot (a member left) */        \
    X(share_slot_held_elsewhere) /* share: a slot the table gave as free was a live member's */ \
    X(share_who_answered)    /* share: who-probes of a repairing member answered with our slot */ \
    X(share_repairs)         /* share: group tables this member repaired after members died */    \
    X(share_repair_failed)   /* share: repairs given up (a member did not answer in time) */  \
    X(packet_rebinds)        /* packet mode: the packet socket bound to an interface created again */ \
    X(packet_rebind_failed)  /* packet mode: such a bind refused (the errno is not kept) */
// clang-format on

enum class PortCounter : std::uint8_t {
#define DROCE_X(name) name,
    DROCE_URING_COUNTERS(DROCE_X)
#undef DROCE_X
        count_
};
inline constexpr unsigned kNumPortCounters = static_cast<unsigned>(PortCounter::count_);
/** Name of a counter, e.g. "tx_dropped_no_socket". */
[[nodiscard]] const char* to_string(PortCounter c) noexcept;
/** The counters' names in PortCounter order: the port's block in its device's CounterRegistry
 *  ("port<N>/uring", listed by the Runtime; droce-stat and telemetry show it). */
inline constexpr std::string_view kPortCounterNames[kNumPortCounters] = {
#define DROCE_X(name) #name,
    DROCE_URING_COUNTERS(DROCE_X)
#undef DROCE_X
};

/** How the port receives. */
enum class RecvMode : std::uint8_t {
    automatic, ///< multishot where the kernel has provided buffer rings, else batched
    multishot, ///< one multishot recvmsg over a provided buffer ring (create() fails without)
    batched,   ///< a batch of single-shot recvmsg SQEs, each with its own buffer
    /** A packet socket (AF_PACKET, SOCK_DGRAM, needs CAP_NET_RAW) on the interface, read like
     *  auto (multishot where the kernel has provided buffer rings, else batched): it sees the
     *  whole IP header, so a peer whose IPv4 ID is not 0 verifies. The UDP socket stays bound
     *  (no ICMP port unreachable) with a filter that drops every datagram on it. */
    packet,
};
[[nodiscard]] const char* to_string(RecvMode m) noexcept;

/** Whether frames are grouped into UDP GSO sends (UringPortConfig::gso). */
enum class Gso : std::uint8_t {
    /** Towards each peer (address and steering slot) that answered a probe saying it receives
     *  on a UDP socket (a droce uring port in socket receive mode); singly to every other. In
     *  packet receive mode the port never asks: off. */
    automatic,
    on,  ///< towards every peer (for droce uring peers in socket receive mode, and IPv6 peers)
    off, ///< one sendmsg per frame
};
[[nodiscard]] const char* to_string(Gso g) noexcept;

/** Whether large datagrams are sent with IORING_OP_SENDMSG_ZC (the kernel pins the frame buffer
 *  instead of copying it; the buffer comes back only with the notification CQE). */
enum class SendZc : std::uint8_t {
    automatic, ///< what pays: off (measured in bench/uring: README, SEND_ZC)
    on,        ///< zero-copy at send_zc_min bytes and more (create() fails without kernel support)
    off,       ///< plain sendmsg (the kernel copies the payload into its buffers)
};
[[nodiscard]] const char* to_string(SendZc z) noexcept;

/**
 * Source MAC of every frame rebuilt on receive: a locally administered address that no port has.
 * The engine does not use it (replies go by the QP's path).
 */
inline constexpr wire::MacAddr kRxSourceMac = {0x02, 0x75, 0x72, 0x69, 0x6e, 0x67};

/**
 * Sharing one UDP port between processes (UringPortConfig::share). Every member binds its receive
 * socket to the same (address, udp_port) in one SO_REUSEPORT group, and a classic BPF program
 * attached to the group steers each datagram by the top byte of its BTH destination QP (BTH byte
 * 5), the member's slot, which its device puts in its QPNs (Device::set_qpn_steering_slot). The
 * kernel only knows indices (bind order, and a member that leaves is replaced by the last one), so
 * the program maps slot to index from the group's table (/dev/shm, one per user, network
 * namespace, address and port); a joining member learns its index by a self-probe, takes a free
 * slot and rewrites the table and the program; a leaving member does the same before it closes.
 * Joins and leaves of the host are serialised by ShareJoinLock. README: "Several processes on one
 * port".
 */
inline constexpr unsigned kMaxShareSlots = 256; ///< members of one group at most (one QPN byte)
/** Most frames in one GSO send (the kernel's UDP_MAX_SEGMENTS in 6.1). */
inline constexpr unsigned kGsoMaxSegments = 64;
/** Most UDP payload bytes in one GSO send (an IPv4 datagram's 65535 less its headers). */
inline constexpr unsigned kGsoMaxBytes = 65535 - 20 - 8;
/** Bytes of a slot probe datagram (never a valid BTH: TVer 15; wire/droce_probe.h). */
inline constexpr unsigned kShareProbeLen = wire::kDroceProbeLen;
/** Peers (address, steering slot) whose GSO answer a port with Gso::automatic keeps, in a table
 *  of kGsoPeers entries where each peer has kGsoPeerWays places; a new peer whose places are
 *  all taken replaces the one there that frames were sent to longest ago (gso_peers_evicted). */
inline constexpr unsigned kGsoPeers = 256;
inline constexpr unsigned kGsoPeerWays = 8;

/**
 * How the kernel gets a receive completion to the thread that drives the port. A datagram's
 * arrival queues io_uring task work for the thread that armed the receive; the completion exists
 * only once that thread has run it in the kernel.
 *  - signal: the kernel interrupts the thread (an IPI when it runs, a wake-up when it sleeps). A
 *    thread napping on the port's receive interrupt (rx_interrupt_fd) wakes at once. On this
 *    project's 2-core VM the interrupt of a running thread took tens of microseconds: 64 B WRITE
 *    latency 51 us (droce-perf --lat --inline-progress over lo).
 *  - coop: IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG: no interrupt; the kernel raises
 *    IORING_SQ_TASKRUN in the ring and the next rx_burst() enters the kernel to run the work
 *    (io_uring_get_events). A polling thread sees it within one pass: 11.8 us in the same run.
 *    A sleeping thread is not woken by it: the receive interrupt then fires only at its nap's
 *    end (rx_interrupt_arm() still refuses a nap while work is flagged). For threads that poll
 *    (droce-perf --inline-progress, DROCE_PROGRESS=app's busy callers).
 */
enum class TaskRun : std::uint8_t { signal, coop };

/** How to set up one port. */
struct UringPortConfig {
    std::uint8_t port_index = 0; ///< droce's 0-based port index, written to PktBuf::port
    wire::Ipv6Addr addr{};       ///< local address to bind (IPv4-mapped for IPv4)
    bool ipv4 = true;            ///< addr is IPv4-mapped
    /** Interface whose MTU and link state the port follows; empty: the one whose address or
     *  subnet holds addr (getifaddrs). */
    std::string interface;
    std::uint16_t udp_port = 4791; ///< receive port (1..65535)
    /** Destination port of every datagram sent; 0 = udp_port. Another value only for tests that
     *  run two processes on one address (README: the wire then carries a port the ICRC does not
     *  cover, and a capture shows bad ICRCs). */
    std::uint16_t peer_udp_port = 0;
    /** IP MTU in bytes (576..9600); 0 = the interface's MTU, capped at 9000. */
    std::uint32_t mtu = 0;
    /** MAC the engine uses for this port (rebuilt frames carry it as destination); zero = derived
     *  from the address: 02:00 and its last four bytes. Never sent on any wire. */
    wire::MacAddr mac{};
    std::uint32_t n_buffers = 1024;        ///< buffers in the pool (64..65536)
    std::uint32_t sq_entries = 512;        ///< submission queue entries (power of two, 16..4096)
    std::uint32_t max_source_ports = 1024; ///< sockets bound to source ports at most (1..65536)
    RecvMode recv_mode = RecvMode::automatic;
    /** Socket receive buffer asked (SO_RCVBUFFORCE when allowed, else SO_RCVBUF, which the kernel
     *  caps at net.core.rmem_max). Bytes. */
    std::uint32_t rcvbuf = 8u << 20;
    /** Share (addr, udp_port) with other processes of the same user (see kMaxShareSlots): join
     *  the SO_REUSEPORT group, attach the steering program, probe the slot. false: a port
     *  someone else holds fails with EADDRINUSE. */
    bool share = false;
    /** With share: the slot to take (0..255; create() fails if another member has it), so that a
     *  process has one slot on all its shared ports; -1: the smallest free one. */
    int share_slot = -1;
    SendZc send_zc = SendZc::automatic;
    /** Smallest UDP payload (BTH .. ICRC) sent zero-copy, bytes: below it the copy is cheaper
     *  than pinning the page and reaping a second completion. */
    std::uint32_t send_zc_min = 4096;
    /**
     * UDP generic segmentation offload (UDP_SEGMENT): consecutive frames of one tx_burst from one
     * source socket to one peer and steering slot (BTH byte 5) with equal payload lengths (the
     * last may be shorter), up to kGsoMaxSegments and kGsoMaxBytes, go as one sendmsg that the
     * kernel cuts into datagrams (once, at the NIC or at the receiving socket) instead of one
     * stack traversal each. Not towards every peer, because of what a receiver that sees the IP
     * headers gets:
     *  - on a host-local path (loopback, veth) the datagrams stay one packet up to the receiving
     *    socket, so a packet socket there (DPDK af_packet, recv_mode = packet, tcpdump) sees one
     *    frame larger than the MTU;
     *  - IPv4: the kernel numbers the IP IDs of the segments 0, 1, 2 .., and the ICRC covers the
     *    ID, so a receiver that checks the ICRC over the real header (a RoCE NIC, Linux rxe,
     *    droce on DPDK or in packet mode) rejects all but the first; a droce uring peer in
     *    socket mode rebuilds the header with ID 0 and verifies every one. IPv4 sockets then
     *    send UDP checksums (the kernel refuses GSO with SO_NO_CHECK).
     * Gso::automatic (the default) therefore asks each peer first (a probe no RoCE stack takes:
     * TVer 15) and groups frames only towards those that answer (droce uring ports in socket
     * receive mode). Measured: drivers/uring/README.md, GSO.
     */
    Gso gso = Gso::automatic;
    /** Offer the receive interrupt (rx_interrupt_fd); false only to measure the engine without it
     *  (bench/uring: DROCE_URING_RX_INTERRUPT=off). */
    bool rx_interrupt = true;
    TaskRun taskrun = TaskRun::signal;
};

/**
 * Serialises the joins and leaves of shared ports of one user on this host (network namespace).
 * An abstract unix socket name per user, bound while held: no file, no privilege, released by the
 * kernel when the process dies. Re-entrant in a process (lib/runtime holds it around all the
 * shared ports of a device, whose create() take it again); other threads of the process wait.
 * Control path.
 */
class ShareJoinLock {
  public:
    /** Waits up to @p timeout_ms for the lock. held() says whether it was taken; *err why not. */
    ShareJoinLock(unsigned timeout_ms, std::string* err);
    ~ShareJoinLock();
    ShareJoinLock(const ShareJoinLock&) = delete;
    ShareJoinLock& operator=(const ShareJoinLock&) = delete;
    [[nodiscard]] bool held() const noexcept { return held_; }

  private:
    bool held_ = false;
};

/** A shared group's members by index (uring_port.cc). */
struct ShareTable;

class UringPort final : public PortDriver {
  public:
    /** Frames the destructor drains per round (the datapath calls take any n). */
    static constexpr std::uint16_t kMaxBurst = 64;

    /**
     * Sets up the port: interface and MTU, the pool, the io_uring (SQ cfg.sq_entries, CQ four
     * times that), the receive socket bound to (addr, udp_port) with IP_PMTUDISC_DO and
     * IP_RECVTOS (IPV6_RECVTCLASS, IPV6_V6ONLY), and for multishot the provided buffer ring
     * (io_uring_register_buf_ring: the check of kernel support). Receives are armed by the first
     * rx_burst(), on the thread that polls. Control path; no privilege needed.
     * @return the port, or nullptr with *err set: bad config (ranges above, zero address);
     *         interface not found or no interface holds the address (set `interface`); socket,
     *         bind (EADDRINUSE: another socket holds the port; EADDRNOTAVAIL: the address is not
     *         this host's) or setsockopt errno; io_uring_queue_init errno (ENOMEM: RLIMIT_MEMLOCK,
     *         EPERM: io_uring disabled by sysctl); multishot asked and the kernel has no
     *         provided buffer rings; packet mode without CAP_NET_RAW (EPERM: the message says
     *         so and how to grant it), or its setsockopt / bind errno.
     *         With share: the join lock not taken in 10 s; EADDRINUSE
     *         when a socket that does not share holds the port (or one of another user); the
     *         self-probe found no index (more than kMaxShareSlots members, or no probe came back
     *         in 500 ms); the group table damaged, or stale beyond repair (members killed
     *         without leaving: one is replayed, more are asked who they are, and when one of
     *         them does not answer in 500 ms the message says to restart the group);
     *         share_slot taken; SO_ATTACH_REUSEPORT_CBPF or table write errno. Without
     * share, EADDRINUSE reads "UDP port N on ADDR is in use by another process; set share = yes to
     * share it".
     */
    [[nodiscard]] static std::unique_ptr<UringPort> create(const UringPortConfig& cfg,
                                                           std::string* err);
    /** Cancels every request and waits for the kernel to let go of the buffers (up to 1 s), then
     *  closes the ring and the sockets (a shared port leaves its group first: table and program
     *  rewritten so the other members keep their datagrams) and frees the pool. Buffers still held
     * by callers become invalid. Control path, with nobody polling the port. */
    ~UringPort() override;
    UringPort(const UringPort&) = delete;
    UringPort& operator=(const UringPort&) = delete;

    /**
     * A shared port leaves its group now (as the destructor would: the group's table and program
     * rewritten so the other members keep their slots), for a process that exits without
     * destroying the port. Its receives are cancelled first (an armed receive would keep the
     * socket in the group until the ring closes); it receives nothing afterwards. No-op when not
     * shared or already left. Control path, with nobody polling the port.
     */
    void leave_share_group() noexcept;

    // ---- datapath (one polling thread) ----
    /** Up to @p n empty buffers: data at the start of the slot, len 0, capacity max_frame() or
     *  more, port = port_index. Reaps send completions first when the free list runs short.
     *  @return how many (fewer when the pool is dry: alloc_failed). */
    std::uint16_t alloc_bulk(PktBuf** bufs, std::uint16_t n) noexcept override;
    /** Gives buffers back (see ownership above). Null entries are skipped. */
    void free_bulk(PktBuf** bufs, std::uint16_t n) noexcept override;
    /** Sends the UDP payloads of bufs[0..n) (see the file comment). @return r: the port owns
     *  bufs[0..r), the caller bufs[r..n). */
    std::uint16_t tx_burst(PktBuf** bufs, std::uint16_t n) noexcept override;
    /** Reaps completions (sends, receives), keeps the receives armed and the buffer ring full,
     *  submits, and returns up to @p n rebuilt frames (a shared port also answers who-probes
     *  here, and after frames of another slot arrived looks for dead members and repairs the
     *  group: a few system calls at most every 100 ms, never a wait; README, "a member
     *  killed"): data/len the frame from the Ethernet header,
     *  port = port_index, ecn_ce from the kernel's TOS / traffic class. Completions of frames that
     *  do not fit in @p n stay in the completion ring for the next call. */
    std::uint16_t rx_burst(PktBuf** bufs, std::uint16_t n) noexcept override;
    /** Reaps send completions now (their buffers back to the free list). */
    void tx_reclaim() noexcept override;
    /** The receive interrupt: an eventfd registered with the ring (io_uring_register_eventfd),
     *  which the kernel signals on each completion while armed; -1 when the kernel refused it
     *  (the engine's nap then bounds the receive latency). */
    [[nodiscard]] int rx_interrupt_fd() const noexcept override;
    /** Turns the eventfd's signalling on (IORING_CQ_EVENTFD_DISABLED cleared). @return false when
     *  completions already wait in the completion ring. */
    bool rx_interrupt_arm() noexcept override;
    /** Turns the signalling off again (a busy ring does not pay an eventfd write per completion)
     *  and drains the eventfd. */
    void rx_interrupt_disarm() noexcept override;
    /** mtu() + 14. */
    [[nodiscard]] std::uint32_t max_frame() const noexcept override { return mtu_ + 14; }
    /** The interface's IFF_UP and IFF_RUNNING, and its own address (when it holds the port's)
     *  present, from rtnetlink announcements read at most once a millisecond (LinkWatch, in
     *  link_watch.h; SIOCGIFFLAGS where no netlink socket can be had). While it last answered
     *  false, rx_burst() delivers nothing (rx_dropped_link_down), as a NIC without a link.
     *  Any thread. */
    [[nodiscard]] bool link_up() const noexcept override;
    /** The link state's source (events, overruns, netlink or the fallback). */
    [[nodiscard]] const LinkWatch& link_watch() const noexcept { return *link_; }

    // ---- introspection (any thread; counters are written by the polling thread) ----
    [[nodiscard]] const wire::MacAddr& mac() const noexcept { return mac_; }
    [[nodiscard]] std::uint32_t mtu() const noexcept { return mtu_; }
    [[nodiscard]] const std::string& interface() const noexcept { return ifname_; }
    /** A mistake in the port's configuration worth a line on stderr, or empty: today an explicit
     *  `interface` that does not hold the address while another interface does (a config copied
     *  from `interface = lo` to a real host: the MTU and the link state would be lo's). The
     *  owner prints it (lib/runtime); the port works as configured either way. */
    [[nodiscard]] const std::string& config_note() const noexcept { return config_note_; }
    [[nodiscard]] std::uint16_t udp_port() const noexcept { return udp_port_; }
    /** True when large datagrams go zero-copy (send_zc on, and the kernel has SENDMSG_ZC). */
    [[nodiscard]] bool send_zc() const noexcept { return zc_min_ != UINT32_MAX; }
    /** True while frames may be grouped into UDP GSO sends (UringPortConfig::gso on or auto
     *  outside packet mode; false again after the kernel refused one: tx_gso_refused). */
    [[nodiscard]] bool gso() const noexcept { return gso_; }
    /** Gso::automatic in effect: frames are grouped only towards peers that answered. */
    [[nodiscard]] bool gso_auto() const noexcept { return gso_auto_; }
    /** Whether frames to @p peer (IPv4-mapped for IPv4) and steering slot @p slot are grouped now
     *  (always with Gso::on; with automatic, after its answer). Datapath thread only. */
    [[nodiscard]] bool gso_towards(const wire::Ipv6Addr& peer, std::uint8_t slot) const noexcept;
    /** multishot or batched: what create() chose (also in packet mode: how the packet socket is
     *  read). */
    [[nodiscard]] RecvMode recv_mode() const noexcept { return mode_; }
    /** True when frames come from the packet socket (RecvMode::packet). */
    [[nodiscard]] bool packet_socket() const noexcept { return pkt_fd_ >= 0; }
    [[nodiscard]] std::uint8_t port_index() const noexcept { return port_index_; }
    /** create() joined a shared group (UringPortConfig::share). */
    [[nodiscard]] bool shared() const noexcept { return share_; }
    /** The slot this member took in its group (the top byte its device gives its QPNs); 0 when
     *  not shared. */
    [[nodiscard]] std::uint8_t steering_slot() const noexcept { return slot_; }
    /** Buffers on the free list now. */
    [[nodiscard]] std::uint32_t free_buffers() const noexcept { return free_n_; }
    /** Every counter cell, in PortCounter order (kPortCounterNames); they live as long as the
     *  port. Read them with relaxed loads, from any thread. */
    [[nodiscard]] std::span<const std::atomic<std::uint64_t>> counter_cells() const noexcept {
        return counters_;
    }
    [[nodiscard]] std::uint64_t counter(PortCounter c) const noexcept {
        return counters_[static_cast<unsigned>(c)].load(std::memory_order_relaxed);
    }

    /** Implementation detail (the io_uring state, defined in uring_port.cc). */
    struct Ring;

  private:
    UringPort();
    void inc(PortCounter c, std::uint64_t by = 1) noexcept {
        auto& cell = counters_[static_cast<unsigned>(c)];
        cell.store(cell.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
    }
    [[nodiscard]] std::uint32_t slot_of(const PktBuf* b) const noexcept;
    void put_free(std::uint32_t slot) noexcept;
    std::uint16_t reap(PktBuf** out, std::uint16_t n) noexcept;
    bool rebuild(std::uint32_t slot, const std::uint8_t* name, std::uint32_t namelen,
                 const std::uint8_t* ctrl, std::uint32_t ctrllen, std::uint32_t payload_len,
                 bool truncated) noexcept;
    bool rebuild_packet(std::uint32_t slot, const std::uint8_t* name, std::uint32_t namelen,
                        const std::uint8_t* ctrl, std::uint32_t ctrllen, std::uint32_t payload_len,
                        bool truncated) noexcept;
    /** rebuild, or rebuild_packet in packet mode: chosen once by create(). */
    bool (UringPort::*receive_)(std::uint32_t, const std::uint8_t*, std::uint32_t,
                                const std::uint8_t*, std::uint32_t, std::uint32_t,
                                bool) noexcept = &UringPort::rebuild;
    void keep_receiving() noexcept;
    int source_socket(std::uint16_t sport) noexcept;
    /** A socket bound to (addr, @p sport); IPv4 with UDP checksums when @p checksum, else
     *  SO_NO_CHECK. @return it, or -2 (not retried). */
    int bind_source(std::uint16_t sport, bool checksum) noexcept;
    /** The socket GSO sends from @p sport leave from: @p fd (its source_socket()) except under
     *  Gso::automatic on IPv4, where that one keeps SO_NO_CHECK for the frames sent singly (to
     *  peers that did not answer, byte for byte as without GSO) and GSO sends (which the kernel
     *  refuses without checksums) go from a second socket bound to the same port. */
    int gso_source_socket(std::uint16_t sport, int fd) noexcept;
    std::vector<std::int32_t> sport_gso_fd_; ///< like sport_fd_, Gso::automatic on IPv4
    std::uint32_t sports_bound_ = 0;         ///< sockets in sport_fd_ (max_source_ports)
    std::uint32_t gso_sports_bound_ = 0;     ///< sockets in sport_gso_fd_ (max_source_ports)
    void submit() noexcept;
    bool probe_index(unsigned* index, std::string* err);
    bool join_group(int want, std::string* err);
    void leave_group() noexcept;
    /** Packet mode with share: reads the group's probes from the UDP socket (its filter keeps
     *  only them) at most once a millisecond and answers who-probes. */
    void share_probes() noexcept;
    std::uint64_t next_probe_read_ns_ = 0;
    /** Answers a who-probe (a repairing member asking the socket at an index for its slot). */
    void answer_who(const std::uint8_t* probe) noexcept;
    /** Whether a datagram's source (a sockaddr of namelen bytes) is the group's own address and
     *  port: where members send their probes from. */
    [[nodiscard]] bool from_group_address(const std::uint8_t* name,
                                          std::uint32_t namelen) const noexcept;
    /** A joiner's repair of a table that members left in an unknown order: asks the @p members
     *  sockets before its own index who they are (500 ms at most). @return whether *t is now
     *  the group (the joiner not yet in it). Control path. */
    bool ask_members(unsigned members, ShareTable* t);
    /** A shared port's upkeep, from rx_burst() when frames of another slot arrived or a repair
     *  waits for answers: finds members that died without leaving and repairs the group. */
    void share_upkeep() noexcept;
    /** Ends a repair in progress (answers no longer awaited, the join lock released). */
    void end_repair() noexcept;

    std::unique_ptr<Ring> ring_;
    // Pool: slot i is bufs_[i], its bytes at mem_ + i * slot_bytes_.
    std::uint8_t* mem_ = nullptr;
    std::uint32_t slot_bytes_ = 0;
    std::vector<PktBuf> bufs_;
    std::vector<std::uint8_t> where_; ///< Where of each slot (uring_port.cc)
    std::vector<std::uint32_t> free_; ///< stack of free slots, free_n_ of them
    std::uint32_t free_n_ = 0;
    std::uint32_t tx_inflight_ = 0;
    std::uint32_t rx_posted_ = 0; ///< batched: recvmsg in the kernel; multishot: buffers in ring
    bool armed_ = false;          ///< multishot receive running
    std::uint32_t ring_cap_ = 0;  ///< most buffers the kernel holds for receive at once
    // Source sockets: fd per UDP source port; -1 none yet, -2 bind failed (not retried).
    std::vector<std::int32_t> sport_fd_;
    std::vector<int> fds_; ///< every source socket, for the destructor
    std::uint32_t max_sports_ = 0;
    std::uint32_t zc_min_ = UINT32_MAX; ///< smallest payload sent zero-copy; UINT32_MAX: never
    bool gso_ = false;                  ///< UringPortConfig::gso, until the kernel refuses one
    bool gso_auto_ = false;             ///< Gso::automatic (and not packet mode)
    /** What a Gso::automatic port knows of a peer (uring_port.cc); kGsoPeers, open addressing,
     *  allocated by create(). */
    struct GsoPeer;
    std::vector<GsoPeer> gso_peers_;
    /** The entry of (@p peer, @p slot), made when @p insert; nullptr when absent or full. */
    GsoPeer* gso_peer(const wire::Ipv6Addr& peer, std::uint8_t slot, bool insert) noexcept;
    /** Gso::automatic: whether to group towards (@p peer, @p slot) now; sends a probe when the
     *  answer is missing or due for refresh. */
    bool gso_allowed(const wire::Ipv6Addr& peer, std::uint8_t slot) noexcept;
    /** Sends a GSO probe or answer (@p kind) from the receive socket to (@p to, @p port): byte 5
     *  @p to_slot (where a shared receiver steers it), byte 6 @p from_slot, the nonce. One
     *  sendto, never waiting. @return whether the kernel took it. */
    bool send_gso_datagram(std::uint8_t kind, const wire::Ipv6Addr& to, std::uint16_t port,
                           std::uint8_t to_slot, std::uint8_t from_slot,
                           std::uint64_t nonce) noexcept;
    /** Answers a GSO probe (rebuild(): this port receives on its UDP socket). */
    void answer_gso(const std::uint8_t* probe, const std::uint8_t* name,
                    std::uint32_t namelen) noexcept;
    /** Takes a GSO answer to one of our probes. */
    void take_gso_answer(const std::uint8_t* answer, const std::uint8_t* name,
                         std::uint32_t namelen) noexcept;
    std::uint64_t gso_answer_window_ns_ = 0; ///< answers: at most kGsoAnswersPerWindow a window
    std::uint64_t gso_key_ = 0;              ///< random (create()): GSO probe nonces from it
    std::uint64_t gso_asked_ = 0;            ///< GSO probes made
    std::uint64_t gso_use_count_ = 0;        ///< gso_allowed() calls: the peers' use order
    std::uint32_t gso_answers_in_window_ = 0;
    std::uint64_t gso_probe_window_ns_ = 0; ///< probes: at most kGsoAnswersPerWindow a window
    std::uint32_t gso_probes_in_window_ = 0;
    /** The GSO group tx_burst is filling (uring_port.cc); its SQE is taken when it opens. */
    struct GsoGroup;
    /** Sends an open group (one sendmsg, UDP_SEGMENT when it has several frames). */
    void gso_flush(GsoGroup& g) noexcept;

    int rx_fd_ = -1;
    int pkt_fd_ = -1; ///< packet mode: the AF_PACKET socket receives read, else -1
    /** Packet mode: the interface index pkt_fd_ is bound to. LinkWatch follows an interface
     *  deleted and created again under its name; rx_burst() then binds pkt_fd_ to the new one,
     *  and binds it again after the kernel unhooked it (ENETDOWN) and the link changed. */
    std::uint32_t pkt_ifindex_ = 0;
    bool pkt_unhooked_ = false;         ///< a receive on pkt_fd_ ended with ENETDOWN
    std::uint64_t pkt_events_seen_ = 0; ///< link_->events() at the last bind
    void rebind_packet_socket(std::uint32_t ifindex) noexcept;
    int in_fd_ = -1; ///< the socket receives read: pkt_fd_ in packet mode, else rx_fd_
    bool ipv4_ = true;
    wire::Ipv6Addr addr_{};
    std::uint16_t udp_port_ = 4791;
    std::uint16_t peer_port_ = 4791;
    std::uint32_t mtu_ = 1500;
    wire::MacAddr mac_{};
    std::uint8_t port_index_ = 0;
    RecvMode mode_ = RecvMode::batched;
    bool coop_ = false; ///< TaskRun::coop: run flagged task work in reap()
    /** TaskRun::coop and the kernel holds completions as task work (IORING_SQ_TASKRUN). */
    [[nodiscard]] bool task_work_flagged() const noexcept;
    bool share_ = false;
    bool joined_ = false; ///< in the group's table: the destructor leaves it
    std::uint8_t slot_ = 0;
    std::string table_path_;
    int alive_fd_ = -1; ///< the member's sign of life (uring_port.cc, bind_alive)
    /** The table file's name without /dev/shm/: the prefix of the group's abstract names. */
    std::string share_name_;
    /** A repair of the group by this member (uring_port.cc); allocated by the join. */
    struct ShareRepair;
    std::unique_ptr<ShareRepair> repair_;
    std::uint64_t foreign_seen_ = 0; ///< rx_foreign_slot when share_upkeep() last ran
    std::uint64_t probe_nonce_ = 0;
    std::string ifname_;
    std::string config_note_;
    std::array<std::atomic<std::uint64_t>, kNumPortCounters> counters_{};
    std::unique_ptr<LinkWatch> link_;
    /** What link_up() last answered: rx_burst() reads it without asking the kernel. */
    mutable std::atomic<bool> link_seen_up_{true};
};

} // namespace droce::uring
