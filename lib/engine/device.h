/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * A droce device: one software RDMA NIC with 1..4 ports (planes), and the native C++ API that
 * droce's apps and tests use (the verbs ABI will be a thin layer over it).
 *
 * Thread rules:
 *  - Control calls (alloc_pd, reg_mr, create_cq, create_qp, modify_qp, destroy_*) are serialised by
 *    the caller (one control thread at a time, or the caller's lock) and may run while another
 *    thread runs poll(): each one holds a ControlSection, which waits until the engine is between
 *    passes and keeps it there (the quiescence handshake, a few microseconds; only this device's
 *    engine waits, other devices run on). They may allocate. They must not be called from inside
 *    poll() (on_link_change, Cq::notify): that would wait for itself.
 *  - post_send / post_recv are the producer side of a QP's SQ/RQ ring, poll_cq the consumer side of
 * a CQ ring: one application thread per queue, concurrently with poll() on the engine thread.
 *  - poll() / progress() are the engine. Any thread may call them, concurrently: each call first
 *    try-acquires the device's poll ownership (one atomic flag, never a lock or a wait) and runs
 *    its pass only when it got it; otherwise it returns 0 at once, since another thread is running
 *    the engine. So a pass runs on at most one thread at a time, whoever holds the flag: an engine
 *    thread, or an application thread driving progress from a verb (lib/verbs: ibv_post_send,
 *    ibv_poll_cq, ibv_get_cq_event), or droce-perf --inline-progress. Ownership moves between
 *    threads with acquire/release, so the engine state needs no other synchronisation.
 *    The engine allocates nothing, takes no lock and throws nothing. Errors are errno values as
 *    libibverbs returns them.
 */
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <poll.h>

#include "common/clock.h"
#include "common/counter_registry.h"
#include "common/counters.h"
#include "common/spsc_ring.h"
#include "engine/neigh.h"
#include "engine/timer_heap.h"
#include "mem/mr.h"
#include "port/port.h"
#include "rc/qp.h"
#include "wire/packet.h"

/** 1: the engine has the capture seam (Device::set_capture); 0: compiled out (see CaptureHook). */
#ifndef DROCE_CAPTURE_SEAM
#define DROCE_CAPTURE_SEAM 1
#endif

namespace droce {

/** One port of a device: its driver and its addresses. */
struct PortSpec {
    PortDriver* driver = nullptr; ///< not owned; must outlive the device
    wire::MacAddr mac{};
    wire::Ipv6Addr gid{};     ///< RoCEv2 GID: IPv4-mapped (::ffff:a.b.c.d) or an IPv6 address
    std::uint32_t mtu = 4096; ///< largest path MTU in bytes this port allows (256..4096)
    /** Line rate in Mb/s, where DCQCN starts and returns to (0 = unknown: 100 Gb/s). */
    double line_rate_mbps = 0;
    /**
     * An IP port: its driver hands frames to the kernel's IP stack, which routes them and finds
     * the next hop itself (drivers/uring). The engine then resolves no neighbour for a path on
     * this port: a path without a MAC gets kL3PortNextHopMac, which the driver ignores. False (an
     * Ethernet port): ARP / ND in the engine, as on DPDK ports.
     */
    bool l3 = false;
};

/** Destination MAC of the frames on an IP port (PortSpec::l3): a placeholder, never on a wire. */
inline constexpr wire::MacAddr kL3PortNextHopMac = {0x02, 0x00, 0x00, 0x00, 0x00, 0x01};

/**
 * One connectionless EV probe to send (Device::send_ep_probe): the engine side of the OCP MRC
 * controller API's endpoint operation MRC_CTL_EP_OP_EV_PROBE (mrc_ctl.h, struct mrc_ctl_ep_req).
 * It goes from (sgid, port) to dgid's QP1 (wire::kMrcEndpointQpn) on the entropy value given by
 * udp_sport (and flow_label on IPv6); no QP is involved on either side.
 */
struct EpProbeRequest {
    std::uint16_t req_id = 0; ///< echoed (PETH.path): mrc_ctl_ep_req.req_id
    std::uint32_t nonce = 0;  ///< echoed (PETH.seq): lets the caller ignore stale / forged replies
    unsigned port = 0;        ///< 0-based device port it leaves by (OCP port - 1)
    wire::Ipv6Addr sgid{};    ///< source GID: must be the GID of that port (EINVAL otherwise)
    wire::Ipv6Addr dgid{};    ///< destination GID (IPv4-mapped = IPv4 frame, as set_path does)
    std::uint16_t udp_sport = 0;    ///< the EV: UDP source port, any value
    std::uint32_t flow_label = 0;   ///< IPv6 only, low 20 bits used; ignored for IPv4
    std::uint8_t traffic_class = 0; ///< IP TOS / traffic class byte (ECN bits forced to ECT(0))
};

/**
 * A reply the engine received to one of this device's EV probes (mrc_ctl_ep_rsp). The fields come
 * from the echo: a peer or an attacker can send a reply nobody asked for, which is why the caller
 * matches req_id and nonce against its probes in flight.
 */
struct EpProbeReply {
    std::uint16_t req_id = 0; ///< the echoed PETH.path
    std::uint32_t nonce = 0;  ///< the echoed PETH.seq
    std::uint8_t port = 0;    ///< 0-based port it arrived on (mrc_ctl_ep_rsp.port is this + 1)
    /** ns: the device clock when the reply was received minus the echoed send timestamp; 0 when
     *  that timestamp lies in the future (a forged reply). Includes the responder's service time
     *  (mrc_ctl_ep_rsp.adj_svc_time = 0). */
    std::uint64_t rtt_ns = 0;
};

/** The IPv4-mapped GID of a.b.c.d (wire::ipv4_mapped). */
[[nodiscard]] constexpr wire::Ipv6Addr gid_from_ipv4(std::uint8_t a, std::uint8_t b, std::uint8_t c,
                                                     std::uint8_t d) noexcept {
    return wire::ipv4_mapped({a, b, c, d});
}

class Device {
  public:
    /**
     * @param name device name as ibv_get_device_name will report it
     * @param clock the device's time source (Clock::tsc() in production, a virtual clock in tests);
     *        not owned, must outlive the device. Devices and a sim fabric in one test share one
     * clock.
     * @param ports 1..4 ports; index i is verbs port i + 1
     */
    Device(std::string name, Clock& clock, std::vector<PortSpec> ports);
    ~Device();
    Device(const Device&) = delete;
    Device& operator=(const Device&) = delete;

    [[nodiscard]] const std::string& name() const noexcept { return name_; }
    [[nodiscard]] Clock& clock() noexcept { return *clock_; }
    /** Device-level counters: events that belong to no QP (drops before demux, tx buffer shortage).
     */
    [[nodiscard]] const Counters& counters() const noexcept { return counters_; }
    /** Device counters plus the counters of every live QP: what `rdma statistic` shows for a
     * device. */
    [[nodiscard]] CounterSnapshot total_counters() const noexcept;
    /**
     * Every counter block of the device, by scope: "device", "device/parse" (receive reject
     * reasons), "port<N>/neigh" (ARP / ND responder of verbs port N), "qp/<QPN hex>" for each live
     * QP (listed by create_qp, unlisted by destroy_qp). Readable from any thread.
     */
    [[nodiscard]] const CounterRegistry& counter_registry() const noexcept { return registry_; }
    /** The same registry, for a component that lists its own block for this device (the capture
     *  writer's "capture" block): add before counting into it, remove before freeing it. */
    [[nodiscard]] CounterRegistry& counter_registry() noexcept { return registry_; }
    [[nodiscard]] const wire::ParseCounters& rx_parse_counters() const noexcept {
        return parse_counters_;
    }
    [[nodiscard]] const PortSpec& port(unsigned index0) const noexcept { return ports_[index0]; }
    [[nodiscard]] unsigned num_ports() const noexcept {
        return static_cast<unsigned>(ports_.size());
    }

    // ---- control path ----
    /** @return a new PD, or nullptr with *err = ENOMEM. */
    [[nodiscard]] mem::Pd* alloc_pd(int* err) noexcept;
    /** @return 0, EINVAL (not this device's), EBUSY (MRs or QPs still use it). Null is a no-op. */
    int dealloc_pd(mem::Pd* pd) noexcept;
    /**
     * Registers @p length bytes at @p addr (iova = addr, as ibv_reg_mr).
     * @return the MR, or nullptr with *err = EINVAL (bad PD/flags/range), EFAULT (a page of the
     * range not mapped, not readable, or not writable with local write access:
     * mem::check_host_range) or ENOMEM (table full).
     */
    [[nodiscard]] mem::Mr* reg_mr(mem::Pd* pd, void* addr, std::uint64_t length,
                                  std::uint32_t access, int* err) noexcept;
    /** @return 0 or EINVAL. Null is a no-op. */
    int dereg_mr(mem::Mr* mr) noexcept;
    /** @param cqe minimum CQ depth (1..kMaxCqe). @return the CQ, or nullptr with *err = EINVAL /
     * ENOMEM. */
    [[nodiscard]] rc::Cq* create_cq(std::uint32_t cqe, int* err) noexcept;
    /** @return 0, EINVAL, or EBUSY (a QP still uses it). Null is a no-op. */
    int destroy_cq(rc::Cq* cq) noexcept;
    /**
     * Creates a QP in RESET, run by @p transport for its whole life (RC by default).
     * @return the QP, or nullptr with *err = EINVAL (null PD/CQ, caps above the limits in
     * rc/params.h) or ENOMEM (no QPN left).
     */
    [[nodiscard]] rc::Qp* create_qp(mem::Pd* pd, rc::Cq* send_cq, rc::Cq* recv_cq,
                                    const rc::QpCap& cap, bool sq_sig_all, int* err,
                                    const rc::TransportOps& transport = rc::kRcTransport) noexcept;
    /** @return 0 or EINVAL. Null is a no-op. */
    int destroy_qp(rc::Qp* qp) noexcept;
    /**
     * ibv_modify_qp for RC: the transition from the current state to attr.qp_state (or the current
     * state when @p mask lacks kQpState) must be legal, every attribute the transition requires
     * must be in @p mask and nothing the transition does not allow (IBTA Vol 1 §11.2.4.2, table of
     * ibv_modify_qp). Values are range checked (path MTU ≤ port MTU, timeout ≤ 31, retry counts ≤
     * 7, max_rd_atomic ≤ kMaxRdAtomic, port exists, source GID index 0: one GID per port).
     * @return 0 or EINVAL; on EINVAL the QP is unchanged.
     */
    int modify_qp(rc::Qp* qp, const rc::QpAttr& attr, std::uint32_t mask) noexcept;
    /**
     * Why a path MTU of @p path_mtu_bytes cannot be used on port @p port_num (1-based), for the
     * application's stderr beside modify_qp()'s EINVAL (programs print only "Failed to modify
     * QP"); empty when the port carries it or the port does not exist. Control path, any thread
     * (reads the ports' fixed MTUs).
     */
    [[nodiscard]] std::string path_mtu_refusal(unsigned port_num,
                                               std::uint32_t path_mtu_bytes) const;
    /**
     * Adds a static neighbour (config [neighbors]): @p ip (IPv6 or IPv4-mapped) is at @p mac, never
     * replaced by anything learned. @return false when the table is full.
     */
    bool add_static_neighbor(const wire::Ipv6Addr& ip, const wire::MacAddr& mac) noexcept;
    /** The neighbour table (ARP / ND), for inspection. */
    [[nodiscard]] const NeighTable& neighbors() const noexcept { return neigh_; }
    /**
     * Called on the engine thread when a port's link goes down or up (0-based port index). Set it
     * on the control path before the engine runs; it must not block.
     */
    std::function<void(unsigned port, bool up)> on_link_change;
    /**
     * Called on the engine thread, once, when a QP goes to ERR by itself (retries exhausted, a
     * fatal NAK, a remote access error: what raises IBV_EVENT_QP_FATAL), never when modify_qp
     * moves it there; the QP's error completions are already in its CQs. Set it on the control
     * path (inside a ControlSection); it must not block nor make control calls.
     */
    std::function<void(rc::Qp& qp)> on_qp_fatal;

    /**
     * The peer's address on each plane, for a QP of a multiplane transport (MRC): entry p is the
     * peer's GID and MAC behind this device's port p (a zero MAC is resolved by ARP / ND). Without
     * it every plane uses the AV's GID and MAC. Takes effect at once (in RTR / RTS the paths are
     * rebuilt). @return 0, or EINVAL (not this device's QP, not multiplane, more planes than
     * ports).
     */
    int set_remote_planes(rc::Qp* qp, std::span<const rc::RemotePlane> planes) noexcept;
    /**
     * Administrative state of port @p port (0-based): down takes the port out as a pulled cable
     * would (multiplane QPs move their paths off it, link_downed counts it; frames arriving on it
     * for a QP are dropped, rx_dropped_port_down) while the driver's link may stay up; up gives
     * it back (OCP MRC: port admin state). Seen by the engine at its next link check (each pass).
     * @return 0 or EINVAL (no such port).
     */
    int set_port_admin(unsigned port, bool up) noexcept;
    /** True while port @p port is administratively up. */
    [[nodiscard]] bool port_admin_up(unsigned port) const noexcept { return admin_up_[port]; }
    /**
     * The ports the engine uses, bit p for port p (0-based, the first 8): administratively up and
     * with their link up, as of the engine's last link check (at most 256 passes old; from the
     * constructor's look until the first). A cable pulled, a peer gone or set_port_admin from
     * anyone (droce-mrcctl, the OCP MRC API) shows here. Any thread.
     */
    [[nodiscard]] std::uint8_t ports_up_mask() const noexcept {
        return ports_up_.load(std::memory_order_relaxed);
    }

    /**
     * DCQCN for QPs created from now on: @p profile (not owned; must outlive them: cc::
     * profile_by_name's are static), or null for off. Each QP's reaction point starts at its
     * port's line rate. Control path.
     */
    void set_dcqcn(const cc::DcqcnProfile* profile) noexcept;
    /** DCQCN for one QP (null = off), at once. @return 0 or EINVAL (not this device's QP). */
    int set_qp_dcqcn(rc::Qp* qp, const cc::DcqcnProfile* profile) noexcept;
    /** ibv_modify_qp's IBV_QP_RATE_LIMIT: paces @p qp at @p mbps (0 = no limit). @return 0 or
     *  EINVAL. */
    int set_qp_rate_limit(rc::Qp* qp, double mbps) noexcept;

    /** The QP named @p qpn, or nullptr. */
    [[nodiscard]] rc::Qp* qp_by_num(std::uint32_t qpn) noexcept;
    /** Live QPs from which the engine prefetches QP state ahead of its visits (a received
     *  burst's QPs, the next active QP, the requester's PSN ring entries;
     *  TransportCtx::prefetch_qp_state): about what stays in a core's caches between visits (a
     *  QP's hot lines are about 4 KiB); with fewer, the prefetches only cost instructions (64 B
     *  WRITEs of one QP ran 2 % slower with them, bench/engine/scale). post_send's few
     *  prefetches of the QP it is given do not wait for this many. */
    static constexpr std::size_t kPrefetchMinQps = 64;

    /** Bit of a QPN where the steering slot starts (QPN = slot << 16 | local number). */
    static constexpr unsigned kQpnSteeringShift = 16;
    static_assert(rc::kFirstQpn + rc::kMaxQp <= 1u << kQpnSteeringShift,
                  "a device's QPNs must fit below the steering slot byte");
    /**
     * Puts @p slot in the top byte of every QPN this device hands out from now on: QPN = slot << 16
     * | (rc::kFirstQpn + table index). Processes that share one UDP port (drivers/uring, share =
     * yes) each get a slot, and the kernel steers a datagram to the process whose slot is the top
     * byte of its BTH destination QP; slot 0 (the default) gives the QPNs droce always gave. QP1,
     * the MRC endpoint QP, is not slotted (wire/mrc.h). Control path, before the first QP.
     * @return 0, or EBUSY when the device already has QPs (their numbers would lose their owner).
     */
    [[nodiscard]] int set_qpn_steering_slot(std::uint8_t slot) noexcept;
    /** The steering slot set by set_qpn_steering_slot() (0 by default). Control path, or the
     *  engine (which never runs while set_qpn_steering_slot() changes it). */
    [[nodiscard]] std::uint8_t qpn_steering_slot() const noexcept {
        return static_cast<std::uint8_t>(first_qpn_ >> kQpnSteeringShift);
    }

    /**
     * The quiescence handshake, control side. While a ControlSection of this device lives, its
     * engine (whichever thread runs poll() and sleep_until_doorbell()) is between passes and starts
     * no new one, so the control path may change QP, CQ, PD and MR tables and QP state.
     * Constructing it waits (spin, then yield) for a pass in progress to end: at most one pass,
     * microseconds. Sections nest (a counter). Any thread except the engine inside poll().
     */
    class ControlSection {
      public:
        explicit ControlSection(Device& dev) noexcept : dev_(dev) { dev_.begin_control(); }
        ~ControlSection() { dev_.end_control(); }
        ControlSection(const ControlSection&) = delete;
        ControlSection& operator=(const ControlSection&) = delete;

      private:
        Device& dev_;
    };
    /** Starts a control section by hand (ControlSection is the usual way). */
    void begin_control() noexcept;
    /** Ends what begin_control() started. */
    void end_control() noexcept;

    // ---- connectionless endpoint operations (OCP MRC controller API) ----
    /** Replies to EV probes held until take_ep_replies() (a power of two); more are dropped. */
    static constexpr std::uint32_t kEpReplyDepth = 256;
    /**
     * MRC_PROBE answered at most: kEpReplyBurst at once (a full mrc_ctl_ep_batch_send_wait batch
     * is 256), then kEpReplyRate a second. Anyone on the link may send probes, each costing an
     * engine pass's time and a transmit slot the data path shares: a flood is answered at this rate
     * and the rest dropped (ep_probes_rate_limited). A reply is never larger than its probe.
     */
    static constexpr std::uint32_t kEpReplyBurst = 256;
    static constexpr std::uint64_t kEpReplyRate = 100'000;
    /**
     * Sends one connectionless EV probe (OCP MRC mrc_ctl.h, mrc_ctl_ep_batch_send_wait with
     * MRC_CTL_EP_OP_EV_PROBE): an MRC_PROBE with PETH {path = req_id, seq = nonce, timestamp_ns =
     * the device clock now} from port @p req.port's MAC and GID to @p req.dgid's QP1
     * (wire::kMrcEndpointQpn), UDP source port @p req.udp_sport, flow label (IPv6), traffic class
     * with ECN = ECT(0), TTL / hop limit 64. The peer's engine answers at once with an
     * MRC_PROBE_REPLY that take_ep_replies() returns. Nothing is retried: a lost probe or reply is
     * simply never answered (the caller's timeout). The destination MAC comes from the neighbour
     * table; when it is unknown an ARP request / Neighbor Solicitation goes out on the port and the
     * call returns EAGAIN (call again later: the engine learns the answer as it runs).
     * The RTT includes the time each engine takes to notice a frame: a busy-polling engine adds
     * about a pass; a responder engine thread napping when idle up to its max_sleep_ns (this
     * device's engine is woken by the call when it naps).
     *
     * Control path: takes a ControlSection (waits for the engine to be between passes, a few
     * microseconds), so it must not be called from inside poll() (on_link_change, on_qp_fatal);
     * calls are serialised by the caller like the other control calls. The frame is queued and
     * handed to the port's driver before returning (the capture seam sees it on this thread).
     * Allocates nothing.
     *
     * @return 0: sent (ep_probes_sent counted);
     *  EINVAL: port out of range, sgid not that port's GID, sgid and dgid of different families
     *   (IPv4-mapped vs IPv6), or dgid not a unicast address of another host (unspecified,
     *   multicast, or one of this device's own GIDs);
     *  ENETDOWN: the port is administratively down (set_port_admin) or its link is down;
     *  EAGAIN: dgid's MAC is being resolved (a request is out or was just sent): retry later
     *   (never on an l3 port, PortSpec::l3: the probe goes at once to kL3PortNextHopMac);
     *  EHOSTUNREACH: resolution failed (nobody answered max_probes requests; not asked again for
     *   NeighParams::failed_hold_ns) or the neighbour table has no room;
     *  ENOBUFS: no transmit buffer or queue slot on the port (tx_no_buffer counted).
     */
    int send_ep_probe(const EpProbeRequest& req) noexcept;
    /**
     * Moves up to out.size() received EV probe replies, oldest first, into @p out.
     * Any thread, concurrently with the engine; but one consumer at a time (the caller serialises
     * calls, e.g. with its lock): it is the consumer side of a single-producer single-consumer
     * ring the engine fills. Replies that found the ring full (kEpReplyDepth waiting) were dropped
     * (ep_probe_replies_dropped). Allocates nothing.
     * @return how many replies were written to out[0 .. n).
     */
    std::size_t take_ep_replies(std::span<EpProbeReply> out) noexcept;

    // ---- datapath, application side ----
    /**
     * Posts @p n send WQEs (ibv_post_send). Stops at the first bad one.
     * @p qp: a live QP; another device's QP or null is EINVAL (an O(1) check through the QPN it
     * holds). A destroyed QP's memory is gone: posting to it is the caller's use after free, as
     * ibv_post_send on a destroyed ibv_qp is; the control calls (modify_qp, destroy_qp, ...) find
     * QPs by address instead (owns_qp) and return EINVAL. A binary search on every post would cost
     * the datapath at 16 K QPs what one call to ibv_destroy_qp saves.
     * @param[out] bad index of the first WQE not posted (n when all were posted)
     * @return 0; EINVAL (QP not in RTS/SQD/ERR... see README, unsupported opcode, num_sge above the
     * QP's cap, inline data too long or inline on READ/atomic, unaligned atomic length); ENOMEM (SQ
     * full).
     * @param progress_passes 0: ring the doorbell (the engine runs elsewhere); N > 0: when the poll
     * ownership is free, run up to N engine passes on this thread right away (progress()), so the
     * WQEs leave without waiting for an engine thread; otherwise ring the doorbell.
     */
    int post_send(rc::Qp* qp, const rc::SendWqe* wrs, std::uint32_t n, std::uint32_t* bad,
                  unsigned progress_passes = 0) noexcept;
    /**
     * ibv_post_recv; @p qp as for post_send. @return 0, EINVAL (null or another device's QP, QP in
     * RESET, too many SGEs), ENOMEM (RQ full).
     */
    int post_recv(rc::Qp* qp, const rc::RecvWqe* wrs, std::uint32_t n, std::uint32_t* bad) noexcept;
    /** ibv_poll_cq: copies up to @p n CQEs into @p out. @return how many (0..n). */
    std::uint32_t poll_cq(rc::Cq* cq, rc::Cqe* out, std::uint32_t n) noexcept;

    // ---- the engine ----
    /**
     * One pass of the engine: receive bursts on every port, demux to responder/completer, timers,
     * READ responses, requesters, then transmit. Any thread: when another thread holds the poll
     * ownership (it is running a pass now) it returns 0 at once and runs nothing (counted by
     * poll_contended()). @return units of work done (0 = idle, or not this thread's turn).
     */
    std::uint32_t poll() noexcept;
    /**
     * The release time (clock ns) the device waits for when its last pass left nothing to do but
     * paced QPs: every QP still active had a packet held back by its pacer (rc/pacer.h: DCQCN's
     * rate or IBV_QP_RATE_LIMIT) until at least kPacerNapMinNs after the pass began, no timer is
     * due sooner, and nothing was looped back; 0 otherwise. An engine loop whose pass found no work
     * then naps until that time (or a frame, a doorbell, its max nap) instead of spinning toward
     * it: the engine sleeps until the next send time when nothing else is due. Any thread (a
     * snapshot of the last pass).
     */
    [[nodiscard]] std::uint64_t pacer_release_ns() const noexcept {
        return pacer_release_ns_.load(std::memory_order_relaxed);
    }
    /** Shortest wait for a pacer release worth a nap (ns): at 1 Gb/s a 4 KiB frame is 33 us;
     *  below this the engine spins as after any work (a nap and its wake-up cost microseconds). */
    static constexpr std::uint64_t kPacerNapMinNs = 10'000;
    /**
     * Application-driven progress: up to @p max_passes passes under one acquisition of the poll
     * ownership, stopping at the first idle pass. Any thread; returns 0 at once when another
     * thread owns the engine. When it leaves work behind (active QPs, looped-back frames, a timer
     * earlier than a napping engine's deadline) and an engine thread naps, it rings the doorbell so
     * that the engine thread carries on. @return units of work done.
     */
    std::uint32_t progress(unsigned max_passes) noexcept;
    /**
     * Counts a verb call of an application thread that offers to run this device's engine (an empty
     * ibv_poll_cq, a waiting ibv_get_cq_event: progress() follows). An engine thread with
     * EngineThread::Options::step_aside_ns steps aside while such calls come quickly (an
     * application busy-polling), so that the application's thread and its peer's have the cores
     * to themselves. Any thread; a relaxed increment on a line of its own (several application
     * threads may lose an increment to each other: a rate, not a tally).
     */
    void note_app_drive() noexcept {
        app_drives_.store(app_drives_.load(std::memory_order_relaxed) + 1,
                          std::memory_order_relaxed);
    }
    /** note_app_drive() calls so far (approximate with several application threads). Relaxed. */
    /** Drives since the last app_drive_ends() that a step-aside nap needs. */
    static constexpr std::uint64_t kStepAsideMinDrivesSinceEnd = 4;
    [[nodiscard]] std::uint64_t app_drives() const noexcept {
        return app_drives_.load(std::memory_order_relaxed);
    }
    /**
     * RDMA WRITEs this device placed with no completion (rc::TransportCtx::silent_writes), as of
     * the end of the last pass that placed one (published only after watch_step_aside()). A program
     * learns of them only from memory and may wait for them spinning on it without a verb call
     * (ib_write_lat), so an engine thread never steps aside on a device that places them
     * (EngineThread::Options::step_aside_ns). Any thread; relaxed.
     */
    [[nodiscard]] std::uint64_t silent_writes() const noexcept {
        return silent_writes_.load(std::memory_order_relaxed);
    }
    /**
     * Says that the application thread stops driving and will block (ibv_get_cq_event before its
     * read): until its next note_app_drive() no engine thread steps aside, and one stepping aside
     * now is woken (one eventfd write, only then). Any thread.
     */
    void app_drive_ends() noexcept;
    /**
     * Releases of the poll ownership that left work behind (work_left(): a large WRITE half sent,
     * frames looped back, a doorbell rung meanwhile), by any thread. An application that leaves
     * work behind may not come back for it soon (it posts, then computes): an engine thread
     * steps aside only through windows with none, and one stepping aside is woken by the
     * release that leaves work (release_poll()). Written by the poll owner as it releases; any
     * thread reads; relaxed.
     */
    [[nodiscard]] std::uint64_t releases_with_work_left() const noexcept {
        return releases_with_work_left_.load(std::memory_order_relaxed);
    }
    /**
     * An engine thread's step-aside nap (EngineThread::Options::step_aside_ns): sleeps @p ns at
     * most, and no later than the device's next timer or pacer release as the last pass left it,
     * ended early by ring_doorbell() (app_drive_ends(), a release that leaves work behind,
     * EngineThread::stop()). No nap at all when fewer than kStepAsideMinDrivesSinceEnd drives
     * came since the last app_drive_ends() (a program that arms its CQ and polls once more before
     * it waits), when a release left work behind since @p left_work_seen
     * (releases_with_work_left() as the caller last read it), or when the nap would be shorter
     * than kPacerNapMinNs. A timer armed during the nap by the application's passes is run by
     * them while it polls, and waits for the nap's end if it stopped. Unlike
     * sleep_until_doorbell() it does not publish "asleep": posts do not ring the doorbell (the
     * application that drives runs them), and it neither takes the poll ownership nor arms
     * receive interrupts. Engine thread only. @return true when it napped (for however long).
     */
    bool step_aside_nap(std::uint64_t ns, std::uint64_t left_work_seen) noexcept;
    /** Says that an engine thread of this device may step aside (EngineThread::Options::
     *  step_aside_ns): each pass then publishes what step_aside_nap() and the thread's looks read
     *  (silent_writes(), the next deadline); without one it spends nothing on them. Any thread. */
    void watch_step_aside() noexcept { step_aside_watched_.store(true, std::memory_order_relaxed); }
    /** True while an engine thread naps in step_aside_nap() (for tests). Any thread; relaxed. */
    [[nodiscard]] bool stepping_aside() const noexcept {
        return stepping_aside_.load(std::memory_order_relaxed);
    }
    /** Passes run so far, by any thread (poll() or progress()). Any thread; relaxed. */
    [[nodiscard]] std::uint64_t passes_run() const noexcept {
        return passes_run_.load(std::memory_order_relaxed);
    }
    /** Calls of poll() / progress() that found another thread running the engine. Relaxed. */
    [[nodiscard]] std::uint64_t poll_contended() const noexcept {
        return poll_contended_.load(std::memory_order_relaxed);
    }
    /**
     * Naps until ring_doorbell() is called, a port's receive interrupt fires, the next QP timer
     * deadline, @p extra_fd becomes readable (POLLIN; -1 = none), or @p max_ns passes. Returns at
     * once if an application posted work meanwhile. Publishes "asleep" so that post_send/post_recv
     * know to ring the doorbell (one eventfd write, only then). Any thread, several at once (an
     * engine thread, application threads waiting for a completion event): the thread that gets
     * the poll ownership for its look at the rings arms the receive interrupts and waits for the
     * timers; the others nap on the doorbell and @p extra_fd for at most kBusyNapNs. Must not be
     * called from inside poll(). With @p long_when_no_receiver and no QP that can receive
     * (receiving_qps() 0), the owner naps up to kNoReceiverNapNs even if @p max_ns is shorter
     * (false: a caller that serves other devices too, one of which has a receiving QP), unless
     * an MRC endpoint probe was sent or received in the last kEpActiveNs.
     * @return true when something ended the nap early or cancelled it (the doorbell, a receive
     * interrupt, @p extra_fd, work already waiting): the caller should poll busily again; false
     * when it slept its time out.
     */
    bool sleep_until_doorbell(std::uint64_t max_ns, int extra_fd = -1,
                              bool long_when_no_receiver = true) noexcept;
    /**
     * sleep_until_doorbell() for one thread that serves several devices (Runtime's shared engine
     * thread): every device in @p devs publishes "asleep", so that a post to any of them rings its
     * doorbell, and the nap ends at the first doorbell or receive interrupt of any of them, at the
     * earliest of their timer deadlines, or after @p max_ns. With @p long_when_no_receiver, the
     * long nap (kNoReceiverNapNs) only when no device has a QP that can receive. At most
     * kMaxNapDevices devices: the first ones of a longer list are served, the others' work is seen
     * when the nap ends. Thread rules and return value as sleep_until_doorbell().
     */
    static bool sleep_until_any_doorbell(std::span<Device* const> devs, std::uint64_t max_ns,
                                         int extra_fd = -1,
                                         bool long_when_no_receiver = true) noexcept;
    /**
     * Says that the calling thread's naps end on time: its timer slack is 1 ns
     * (prctl(PR_SET_TIMERSLACK), as the engine loops set it), not the 50 us default. Only such a
     * sleeper tells later poll owners when its nap ends, so that a timer they arm after that ends
     * no nap early (work_left()); another sleeper's ppoll may end 50 us late, and a timer in that
     * gap would fire late. Thread-local; call once per thread.
     */
    static void naps_end_on_time() noexcept;
    /** Devices one sleep_until_any_doorbell() call serves (a config has at most 4). */
    static constexpr std::size_t kMaxNapDevices = 4;
    /** Longest nap of a sleeper that found another thread running the engine (ns). */
    static constexpr std::uint64_t kBusyNapNs = 20'000;
    /**
     * Nap of the poll owner while no QP of the device can receive (none in RTR, RTS, SQD or SQE)
     * and no MRC endpoint probe was seen for kEpActiveNs, when the caller asked for less (ns):
     * nothing that arrives then matters to a QP (frames for it are dropped; a neighbour request
     * or the first endpoint probe waits this long at most), and the control call that brings a
     * QP up wakes the engine. A server waiting for its client then costs about 1 % of a
     * core instead of a wake-up every max_sleep_ns (verbs default 20 us: 29 % of a core).
     */
    static constexpr std::uint64_t kNoReceiverNapNs = 1'000'000;
    /** How long an MRC endpoint probe sent or received keeps the device out of the long nap. */
    static constexpr std::uint64_t kEpActiveNs = 1'000'000'000;
    /** QPs of this device in RTR, RTS, SQD or SQE (kept by modify_qp and destroy_qp; a QP the
     *  engine moves to ERR still counts until the application modifies or destroys it). Any
     *  thread (a snapshot). */
    [[nodiscard]] std::uint32_t receiving_qps() const noexcept {
        return receiving_qps_.load(std::memory_order_relaxed);
    }
    /** Wakes a sleeping engine thread. Any thread. */
    void ring_doorbell() noexcept;
    /**
     * Whether an ACK owed by a QP that answers what it receives may wait for the QP's next request
     * (rc::TransportCtx::hold_acks; on by default). Turn it off for a device no engine thread
     * runs (the verbs library's DROCE_PROGRESS=app): only a verb call would end a hold. Control
     * path (a control section); ACKs already held leave at their deadline as before.
     */
    void set_ack_hold(bool on) noexcept;

    /**
     * Transmit by reference (zero-copy) on port @p port for payloads of at least @p min_payload
     * bytes (smaller ones are copied: cheaper). Only where the port's driver can
     * (tx_by_reference()); UINT32_MAX turns it off. Set up at creation to rc::kTxByRefMinPayload;
     * call on the control path.
     */
    void set_tx_by_reference(unsigned port, std::uint32_t min_payload) noexcept;
    /** The smallest payload sent by reference on @p port, or UINT32_MAX when the port copies. */
    [[nodiscard]] std::uint32_t tx_by_reference_min(unsigned port) const noexcept {
        return zc_min_payload_[port];
    }

    /** Earliest timer deadline (ns) of any QP, or 0. Lets a test with a virtual clock jump ahead.
     */
    [[nodiscard]] std::uint64_t next_deadline_ns() const noexcept;

    /** Direction of a frame shown to the capture seam. */
    enum class CaptureDir : std::uint8_t { rx, tx };
    /**
     * One frame as the capture seam sees it. The frame on the wire is head ++ payload spans ++
     * trailer: a frame built whole has everything in head (payload and trailer empty); a frame
     * sent by reference (zero-copy) has its headers in head, its payload in the application's
     * registered memory (payload) and its pad and ICRC in trailer. Every span is valid only
     * during the hook's call (the buffer goes to a driver right after).
     */
    struct CaptureFrame {
        std::span<const std::uint8_t> head;
        std::span<const std::span<const std::uint8_t>> payload;
        std::span<const std::uint8_t> trailer;
        std::uint32_t wire_len = 0; ///< bytes of the whole frame: head + payload + trailer
        std::uint8_t port = 0;      ///< 0-based port (plane) the frame leaves by / arrived on
        CaptureDir dir = CaptureDir::rx;
        /** Through the loopback queue (a QP of this device to another of its QPs): shown once as
         *  tx when built and once as rx when received; it never reaches the port's wire. */
        bool loopback = false;
    };
    /**
     * The capture seam: when set, @p fn sees every frame the device sends (built from the transmit
     * stage, by reference or copied, neighbour and endpoint frames) or receives (from a port or
     * the loopback queue, before any check), on the engine thread (or a control call's thread
     * inside its ControlSection, for queue_raw frames of send_ep_probe). It must not keep the
     * spans, block, lock or allocate. Null fn = off: one predictable branch per frame. A build
     * with DROCE_CAPTURE_SEAM=0 (meson -Dcapture_seam=false; bench/engine builds one to measure
     * what the branch costs) has no seam at all: set_capture() is accepted and nothing is shown.
     */
    struct CaptureHook {
        void (*fn)(void* ctx, const CaptureFrame& frame) noexcept = nullptr;
        void* ctx = nullptr;
    };
    /**
     * Sets or clears (fn null) the capture seam. Control path: takes a ControlSection, so when it
     * returns the engine no longer calls the previous hook (its ctx may be freed).
     */
    void set_capture(CaptureHook hook) noexcept;
    /**
     * Sends every held ACK now (rc::ResponderState::ack_hold_until_ns): the process is exiting
     * without destroying its QPs, and the requests they acknowledge completed here. Control path
     * (takes a ControlSection).
     */
    void send_held_acks() noexcept;

  private:
    void open_tx_stage() noexcept;
    void build_staged() noexcept;
    /**
     * Sends @p qp's held ACK now (rc::ResponderState::ack_hold_until_ns), from the control path:
     * the QP is being destroyed or taken out of RTS, and the request it acknowledges has completed
     * on this side (its receive CQE may be what made the application tear the QP down), so the peer
     * must see its own completion too. A ConnectX has sent that ACK long before. Control section
     * held (no pass runs, so the transmit path is this thread's); a no-op without a held ACK.
     */
    void send_held_ack(rc::Qp& qp) noexcept;
    bool send_by_reference(unsigned port, const wire::PathHeaders& path,
                           std::span<const std::span<const std::uint8_t>> payload,
                           const wire::PacketFields& f, PktBuf* buf, TxRef* ref,
                           wire::SplitFrame& sf) noexcept;
    /** Shows @p buf (frame() whole, or the headers of a by-reference frame whose @p payload and
     *  @p trailer follow) to the capture hook. Called only when capture_.fn is set. */
    [[nodiscard]] bool capturing() const noexcept { return DROCE_CAPTURE_SEAM && capture_.fn; }
    void capture(const PktBuf& buf, CaptureDir dir, bool loopback,
                 std::span<const std::span<const std::uint8_t>> payload = {},
                 std::span<const std::uint8_t> trailer = {}) const noexcept;
    int post_send_wqes(rc::Qp* qp, const rc::SendWqe* wrs, std::uint32_t n,
                       std::uint32_t* bad) noexcept;
    int post_recv_wqes(rc::Qp* qp, const rc::RecvWqe* wrs, std::uint32_t n,
                       std::uint32_t* bad) noexcept;
    /** Any thread: rings QP slot @p slot's doorbell bit and wakes a sleeping engine. */
    void notify_engine(std::uint32_t slot) noexcept;
    /** Any thread: sets QP slot @p slot's doorbell bit only (the next pass takes it). */
    void ring_doorbell_bit(std::uint32_t slot) noexcept;
    /** Engine: QPs whose doorbell rang join the active list. @return how many rang. */
    std::uint32_t take_doorbells() noexcept;
    /** Prefetches the QP of each run of frames in @p bufs (rc::qp_prefetch), before the burst is
     *  received: with thousands of busy QPs the QPs of a burst are out of the caches, and their
     *  misses then overlap with each other and with the receive of the frames before. Engine. */
    void prefetch_qps_of(std::span<PktBuf* const> bufs) noexcept;
    /** The qps_ index (the scheduling and timer slot) of this device's QP @p qpn. */
    [[nodiscard]] std::uint32_t qp_index(std::uint32_t qpn) const noexcept {
        return qpn - first_qpn_;
    }
    /** Engine (or control inside a section): QP slot @p slot has work this pass. */
    void activate(std::uint32_t slot) noexcept {
        if (active_flag_[slot]) return;
        active_flag_[slot] = 1;
        active_.push_back(slot); // capacity kMaxQp reserved: never reallocates
    }
    /** Engine: puts the QP's next transport deadline (ACK timer, RNR wait) into the timer heap. */
    void sync_timer(const rc::Qp& qp) noexcept {
        const std::uint32_t slot = qp_index(qp.qpn);
        const std::uint64_t d = qp.transport->next_deadline(qp);
        if (d != timers_.deadline(slot)) timers_.set(slot, d);
    }
    /**
     * The receive path for one frame (receive.cc): parse, filter, demux. @p looped: the frame came
     * from the loopback queue (built by this device for one of its own GIDs), not from a port.
     */
    void receive(PktBuf& buf, bool looped) noexcept;
    /** receive() of a frame parse_frame() already took apart into @p pkt with result @p r. */
    void receive_parsed(PktBuf& buf, const wire::ParsedFrame& pkt, wire::RejectReason r,
                        bool looped) noexcept;
    /**
     * The destination MAC filter: true when @p pkt (Ethernet header present) is for port @p port:
     * its unicast MAC (any own port's for a @p looped frame), or, when not @p roce (UDP port 4791),
     * the broadcast MAC for ARP or an IPv6 multicast MAC (33:33:…) for IPv6: the neighbour
     * responder's.
     */
    [[nodiscard]] bool dst_mac_accepted(const wire::ParsedFrame& pkt, bool roce, unsigned port,
                                        bool looped) const noexcept;
    /**
     * An MRC frame to QP1 (wire::kMrcEndpointQpn) that passed the receive filter, on port @p port
     * (endpoint.cc): answers an MRC_PROBE, queues an MRC_PROBE_REPLY for take_ep_replies(), drops
     * (and counts) the rest. Engine thread.
     */
    void receive_endpoint(const wire::ParsedFrame& pkt, unsigned port) noexcept;
    /** True when the destination IP of the RoCE frame @p pkt is one of the ports' GIDs. */
    [[nodiscard]] bool dst_ip_is_gid(const wire::ParsedFrame& pkt) const noexcept;
    void flush_tx(unsigned port) noexcept;
    void set_path(rc::Qp& qp) noexcept;
    /** DCQCN NP: counts a CE-marked packet for @p qp and sends a CNP on its path @p path_index when
     *  min_time_between_cnps allows. Engine thread. */
    void send_cnp(rc::Qp& qp, unsigned path_index) noexcept;
    void build_path(rc::Qp& qp, unsigned port_index, unsigned path_index,
                    const wire::Ipv6Addr& dgid, const wire::MacAddr& dmac) noexcept;
    void resolve_paths() noexcept;
    void check_links() noexcept;
    /**
     * Copies the ready-made @p frame (ARP / ND, connectionless MRC endpoint frames) into a buffer
     * of port @p port and queues it for the next flush_tx(); counts @p sent in the device block.
     * Engine thread, or the control path inside a ControlSection. During a pass raw frames keep
     * off the queue slots reserved for the transmit stage (tx_stage_room_): when no slot is left
     * the port is flushed once, and if that frees none the frame is refused.
     * @return false (tx_no_buffer counted) when no slot or buffer is left, or the frame is larger
     * than a buffer.
     */
    bool queue_raw(unsigned port, std::span<const std::uint8_t> frame, Counter sent) noexcept;

    static constexpr unsigned kBurst = 32;
    /** Packets per port per pass the transmit stage may take. */
    static constexpr unsigned kTxBatch = 64;
    /** Per-port queue depth: kTxBatch for staged packets, the rest for neighbour frames. */
    static constexpr unsigned kTxQueueDepth = kTxBatch + 16;

    /** Frames built and waiting for the port's tx_burst (a partial burst leaves some for the next).
     */
    struct TxQueue {
        std::array<PktBuf*, kTxQueueDepth> pending{};
        std::uint16_t count = 0;
    };
    /** Empty buffers reserved for the next pass's packets (owned by the device until built; the
     *  destructor gives them back). */
    struct TxBufCache {
        std::array<PktBuf*, kTxBatch> bufs{};
        std::uint16_t count = 0;
    };

    /**
     * Frames from a QP to a QP of this same device (Qp::loopback_peer), in the order they were
     * built. Owned by the device from build_staged() until poll() has received them and given them
     * back to their port's driver (free_bulk); the destructor frees what is left. Engine thread
     * only.
     */
    struct LoopbackQueue {
        static constexpr std::uint32_t kDepth = 256; ///< power of two
        std::array<PktBuf*, kDepth> bufs{};
        std::uint32_t head = 0; ///< next to receive
        std::uint32_t tail = 0; ///< next free slot
        [[nodiscard]] std::uint32_t size() const noexcept { return tail - head; }
    };
    std::uint32_t drain_loopback(std::uint32_t budget) noexcept;

    std::string name_;
    Clock* clock_;
    std::vector<PortSpec> ports_;
    std::vector<std::uint32_t> port_mtu_; ///< ports_[i].mtu, as the QP modify rules take it
    /** The ports' GIDs by family, for the receive filter: IPv4 ones as the 4 address bytes in
     *  memory order (compared with a frame's as one word), the others as IPv6 addresses. */
    std::vector<std::uint32_t> own_ipv4_;
    std::vector<wire::Ipv6Addr> own_ipv6_;
    std::vector<TxQueue> tx_;
    std::vector<TxBufCache> tx_cache_;
    /** Per port: queue slots the transmit stage was promised by open_tx_stage() and has not yet
     *  filled (build_staged() sets it back to 0), which queue_raw() must leave free. */
    std::vector<std::uint16_t> tx_stage_room_;
    TxStage stage_;
    CaptureHook capture_;
    LoopbackQueue loopback_;
    mem::MrTable mrs_;
    Counters counters_;
    CounterRegistry registry_;
    wire::ParseCounters parse_counters_;
    /** A received burst's frames as parse_frame() took them apart, with its verdicts: pass()
     *  takes apart each run of short frames before it acts on any of them, so that the parse and
     *  ICRC of one frame overlap the next one's instead of waiting behind the transport's work
     *  between them. Members, not locals: constructing 32 frames would cost every pass, idle or
     *  not. Pass owner only; valid within one rx burst. */
    std::array<wire::ParsedFrame, kBurst> rx_parsed_;
    std::array<wire::RejectReason, kBurst> rx_verdict_;
    /** Frames up to this many bytes are taken apart in runs (pass()); larger ones one at a time. */
    static constexpr std::size_t kRxShortFrame = 512;
    rc::TransportCtx ctx_;
    /** EV probe replies: the engine (receive_endpoint) produces, take_ep_replies() consumes. */
    SpscRing<EpProbeReply> ep_replies_{kEpReplyDepth};
    /** Token bucket of the probes answered (receive_endpoint; engine thread). */
    std::uint64_t ep_reply_tokens_ = kEpReplyBurst;
    std::uint64_t ep_reply_refill_ns_ = 0;
    /** Takes one reply token at @p now_ns; false when the bucket is empty. */
    bool take_ep_reply_token(std::uint64_t now_ns) noexcept;
    NeighTable neigh_;
    std::vector<NeighResponder> responders_; ///< one per port
    std::vector<bool> link_was_up_;
    std::vector<bool> admin_up_; ///< set_port_admin; read by check_links(), receive()
    /** ctx_.port_up_mask published for other threads (ports_up_mask()); written by check_links. */
    std::atomic<std::uint8_t> ports_up_{0};
    const cc::DcqcnProfile* dcqcn_ = nullptr; ///< set_dcqcn: for new QPs
    /** Per port: smallest payload sent by reference; UINT32_MAX = copy (chosen at setup). */
    std::vector<std::uint32_t> zc_min_payload_;
    /** Per port: 1 when short copied frames go out by streaming stores
     * (PortDriver::tx_read_by_peer), decided once when the device is set up. */
    std::vector<std::uint8_t> tx_stream_;
    static constexpr std::size_t kTxScratchBytes = 256;
    /** Where build_staged() builds a short frame for a port in tx_stream_ before streaming it into
     *  the port's buffer: two, so that one frame's ICRC is summed after the next one is built (as
     *  wire::build_frame_deferred wants). Engine thread. */
    alignas(64) std::array<std::array<std::uint8_t, kTxScratchBytes>, 2> tx_scratch_{};
    /** TxRefs of destroyed QPs that segments still pointed at (see destroy_qp, ~Device). */
    struct RetiredTxRefs {
        std::unique_ptr<TxRef[]> refs;
        std::uint32_t n = 0;
    };
    std::vector<RetiredTxRefs> retired_tx_refs_;
    std::uint32_t polls_ = 0;
    std::vector<std::unique_ptr<mem::Pd>> pds_;
    std::vector<std::unique_ptr<rc::Cq>> cqs_;
    std::vector<std::unique_ptr<rc::Qp>> qps_; ///< index = qpn - first_qpn_
    /** QPN of qps_[0]: rc::kFirstQpn plus the steering slot (set_qpn_steering_slot). */
    std::uint32_t first_qpn_ = rc::kFirstQpn;
    /**
     * The live QPs (non-null entries of qps_), in QPN order: what the engine passes walk, so a pass
     * costs per QP that exists, not per kMaxQp slot (a scan of all 1024 slots was ~40 % of an
     * inline-progress memif run). Capacity kMaxQp reserved at construction; changed only by
     * create_qp / destroy_qp (control path, inside a ControlSection), read by the engine.
     */
    std::vector<rc::Qp*> live_qps_;
    /**
     * The same QPs in address order: owns_qp() tells a live QP of this device from a destroyed or
     * foreign pointer by a binary search, without reading *qp (a scan of all kMaxQp slots per
     * modify_qp cost a 16 K-QP set-up most of its time). Capacity kMaxQp reserved at construction;
     * changed by create_qp / destroy_qp only.
     */
    std::vector<const rc::Qp*> qps_by_addr_;
    /** No qps_ slot below this index is free (create_qp searches from it; destroy_qp lowers it). */
    std::uint32_t free_slot_hint_ = 0;
    /** True when @p qp is a live QP of this device. Control path. */
    [[nodiscard]] bool owns_qp(const rc::Qp* qp) const noexcept;
    std::atomic<std::uint32_t> receiving_qps_{0}; ///< receiving_qps(): written in control sections
    /** Per QP slot: counted in receiving_qps_ (set and cleared with it, control sections). */
    std::vector<std::uint8_t> counted_receiving_;
    /** Clock ns until which the long nap is off: an MRC endpoint probe was sent or received. */
    std::atomic<std::uint64_t> ep_active_until_ns_{0};
    /**
     * Scheduling (poll.cc). An engine pass runs only the QPs on active_ (slot = qp_index(qpn)),
     * so an idle QP costs nothing per pass: a QP joins when its doorbell rings (post_send /
     * post_recv), when a frame for it arrives, when its timer fires or a control call changes it,
     * and leaves once its transport's has_work() is false. Engine-owned, control path inside a
     * section.
     */
    std::vector<std::uint32_t> active_;
    std::vector<std::uint8_t> active_flag_; ///< per slot: on active_
    /** Per slot: the QP's ERR state was reported to on_qp_fatal or came from modify_qp (no report).
     *  Engine and control path inside a section. */
    std::vector<std::uint8_t> err_seen_;
    TimerHeap timers_{rc::kMaxQp};
    static constexpr std::uint32_t kDoorbellWords = rc::kMaxQp / 64;
    /** Doorbell bits, one per QP slot, set by application threads, taken by the engine; the summary
     *  has one bit per word of doorbell_bits_ so an idle pass reads kMaxQp / 4096 words. */
    std::unique_ptr<std::atomic<std::uint64_t>[]> doorbell_bits_ {
        new std::atomic<std::uint64_t>[kDoorbellWords] {}
    };
    std::array<std::atomic<std::uint64_t>, (kDoorbellWords + 63) / 64> doorbell_summary_{};
    bool paths_pending_ = false; ///< a QP waits for neighbour resolution (resolve_paths has work)
    /** True while the engine thread sleeps in sleep_until_doorbell(). Posting threads read it after
     *  publishing a WQE; the engine sets it before its last look at the rings (seq_cst on both
     * sides, so either the engine sees the WQE or the poster sees the flag). */
    std::atomic<std::uint32_t> asleep_{0}; ///< threads in sleep_until_doorbell()
    /**
     * Poll ownership: true while a thread runs a pass (or a sleeper looks at the rings). Taken by
     * try_own_poll() (test, then exchange: never waited for on the datapath), given back by
     * release_poll(). Every polling thread reads it, so what the owner writes during its pass lives
     * on other lines (from passes_run_ on): it shared this line with the pass counters, the
     * handshake flag and the failure counter until 2026-12-03, and a thread spinning on a taken
     * flag took the line from the owner on every attempt (Device::enter_pass 11 % of an
     * ib_write_bw 64 B client's samples).
     */
    alignas(64) std::atomic<bool> poll_owner_{false};
    /** The timer deadline (ns) an owner-sleeper naps until (UINT64_MAX: none, 0: no nap). Written
     *  by the sleeper while it owns the poll flag, read by later owners (release_poll's choice). */
    std::atomic<std::uint64_t> nap_deadline_ns_{0};
    /** pacer_release_ns(): written by each pass's owner, read by engine loops and sleepers. */
    std::atomic<std::uint64_t> pacer_release_ns_{0};
    /** note_app_drive(): written by application threads on every empty poll, read by the engine
     *  thread's loop; off the poll flag's line, shared only with the step-aside state below
     *  (written rarely: when the application blocks, and around an engine's step-aside nap). */
    alignas(64) std::atomic<std::uint64_t> app_drives_{0};
    /** app_drives_ when the application last said it blocks (app_drive_ends()). */
    std::atomic<std::uint64_t> app_drives_at_end_{0};
    /** True while the engine thread naps in step_aside_nap() (app_drive_ends() and a release
     *  that leaves work ring only then). */
    std::atomic<bool> stepping_aside_{false};
    /** try_own_poll() failures: written by the threads that fail, on a line of its own. */
    alignas(64) std::atomic<std::uint64_t> poll_contended_{0};
    /** The owner's pass bookkeeping, from a line start (see poll_owner_). */
    alignas(64) std::atomic<std::uint64_t> passes_run_{0}; ///< written by the owner only
    /** watch_step_aside() was called: passes publish the step-aside state. */
    std::atomic<bool> step_aside_watched_{false};
    /** Owner, end of a pass: silent_writes_ and next_due_ns_ (watch_step_aside()). */
    void publish_step_aside_state() noexcept;
    /** ctx_.silent_writes published by the pass owner at the end of a pass that changed it. */
    std::atomic<std::uint64_t> silent_writes_{0};
    /** The earliest timer deadline or pacer release (clock ns; 0: none) as the last pass left
     *  it, for step_aside_nap(); written by the pass owner when it changes. */
    std::atomic<std::uint64_t> next_due_ns_{0};
    /** releases_with_work_left(): written by the owner as it releases the poll ownership. */
    std::atomic<std::uint64_t> releases_with_work_left_{0};
    /** Clock ns at the start of the last pass (0: none yet), for TransportCtx::prev_pass_start_ns.
     *  The poll owner's only (the poll flag hands it over with acquire/release). */
    std::uint64_t last_pass_start_ns_ = 0;
    /** Doorbell, the extra fd, and up to four ports' receive interrupts. */
    static constexpr std::size_t kMaxWakeFds = 6;
    /** What a sleeper saw of one device before its nap (look_before_nap). */
    struct NapLook {
        bool owner = false;        ///< it held the poll flag for the look (timers and interrupts)
        bool work = false;         ///< work waiting, or a control section: no nap
        bool may_nap_long = false; ///< no receiving QP, no recent endpoint probe
        unsigned armed = 0;        ///< receive interrupts armed (irq_ports_[0 .. armed))
        std::uint64_t deadline_ns = 0; ///< earliest timer (0: none)
    };
    /** Raises asleep_, then (with the poll flag) looks for work and timers and arms the receive
     *  interrupts. Always followed by end_nap() with its result. */
    NapLook look_before_nap(bool long_when_no_receiver) noexcept;
    /** Disarms what look_before_nap() armed and lowers asleep_. */
    void end_nap(const NapLook& look) noexcept;
    [[nodiscard]] bool try_own_poll() noexcept;
    /** Gives the poll ownership back; rings a napping engine's doorbell when @p work_left. */
    void release_poll(bool work_left) noexcept;
    /** Owner: work the next owner must see soon (see progress()). */
    [[nodiscard]] bool work_left() const noexcept;
    /** One engine pass; the caller owns the poll flag. */
    std::uint32_t pass() noexcept;
    /**
     * The quiescence handshake (Dekker-style, seq_cst on both sides): the engine sets in_pass_ and
     * then reads control_requests_; a control thread raises control_requests_ and then reads
     * in_pass_. So either the engine sees the request and does not start the pass, or the control
     * thread sees the pass and waits for its end. control_requests_ counts open ControlSections.
     */
    std::atomic<std::uint32_t> control_requests_{0};
    std::atomic<bool> in_pass_{false};
    /** Engine side of the handshake: true = pass may run (call leave_pass() after it). */
    bool enter_pass() noexcept;
    void leave_pass() noexcept;
    std::atomic<std::uint64_t> passes_{0};        ///< passes completed (engine writes)
    std::atomic<bool> engine_turned_away_{false}; ///< enter_pass() found a section open
    /** Read by every poster (ring_doorbell): not on the owner's line above. */
    alignas(64) int doorbell_fd_ = -1;
    /** What sleep_until_doorbell() waits on: the doorbell first, then the receive interrupt of
     *  every port that has one (irq_ports_[i] is wake_fds_[i + 1]'s port). Set at creation. */
    std::vector<pollfd> wake_fds_;
    std::vector<unsigned> irq_ports_;
    std::uint32_t next_pd_handle_ = 1;
    std::uint32_t next_cqn_ = 1;
};

} // namespace droce
