/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * A droce device: one software RDMA NIC with 1..4 ports (planes), and the native C++ API that
 * droce's apps and tests use (the verbs ABI will be a thin layer over it).
 *
 * Thread rules (DESIGN.md "Threading and queues"):
 *  - Control calls (alloc_pd, reg_mr, create_cq, create_qp, modify_qp, destroy_*) must not run
 *    concurrently with poll(): the quiescence rule. They may allocate.
 *  - post_send / post_recv are the producer side of a QP's SQ/RQ ring, poll_cq the consumer side of a
 *    CQ ring: one application thread per queue, concurrently with poll() on the engine thread.
 *  - poll() is the engine: one thread (an engine thread, or the application in inline-progress mode).
 *    It allocates nothing, takes no lock and throws nothing.
 * Errors are errno values as libibverbs returns them.
 */
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/counters.h"
#include "engine/neigh.h"
#include "port/port.h"
#include "mem/mr.h"
#include "rc/qp.h"
#include "wire/packet.h"

namespace droce {

/** One port of a device: its driver and its addresses. */
struct PortSpec {
    PortDriver* driver = nullptr; ///< not owned; must outlive the device
    wire::MacAddr mac{};
    wire::Ipv6Addr gid{};         ///< RoCEv2 GID: IPv4-mapped (::ffff:a.b.c.d) or an IPv6 address
    std::uint32_t mtu = 4096;     ///< largest path MTU in bytes this port allows (256..4096)
};

/** True when @p gid is an IPv4-mapped address (::ffff:a.b.c.d). */
[[nodiscard]] bool gid_is_ipv4(const wire::Ipv6Addr& gid) noexcept;
/** The IPv4-mapped GID of a.b.c.d. */
[[nodiscard]] wire::Ipv6Addr gid_from_ipv4(std::uint8_t a, std::uint8_t b, std::uint8_t c, std::uint8_t d) noexcept;

class Device {
public:
    /**
     * @param name device name as ibv_get_device_name will report it
     * @param clock the device's time source (Clock::tsc() in production, a virtual clock in tests);
     *        not owned, must outlive the device. Devices and a sim fabric in one test share one clock.
     * @param ports 1..4 ports; index i is verbs port i + 1
     */
    Device(std::string name, Clock& clock, std::vector<PortSpec> ports);
    ~Device();
    Device(const Device&) = delete;
    Device& operator=(const Device&) = delete;

    [[nodiscard]] const std::string& name() const noexcept { return name_; }
    [[nodiscard]] Clock& clock() noexcept { return *clock_; }
    /** Device-level counters: events that belong to no QP (drops before demux, tx buffer shortage). */
    [[nodiscard]] const Counters& counters() const noexcept { return counters_; }
    /** Device counters plus the counters of every live QP: what `rdma statistic` shows for a device. */
    [[nodiscard]] Counters total_counters() const noexcept;
    [[nodiscard]] const wire::ParseCounters& rx_parse_counters() const noexcept { return parse_counters_; }
    [[nodiscard]] const PortSpec& port(unsigned index0) const noexcept { return ports_[index0]; }
    [[nodiscard]] unsigned num_ports() const noexcept { return static_cast<unsigned>(ports_.size()); }

    // ---- control path ----
    /** @return a new PD, or nullptr with *err = ENOMEM. */
    [[nodiscard]] mem::Pd* alloc_pd(int* err) noexcept;
    /** @return 0, EINVAL (not this device's), EBUSY (MRs or QPs still use it). Null is a no-op. */
    int dealloc_pd(mem::Pd* pd) noexcept;
    /**
     * Registers @p length bytes at @p addr (iova = addr, as ibv_reg_mr).
     * @return the MR, or nullptr with *err = EINVAL (bad PD/flags/range) or ENOMEM (table full).
     */
    [[nodiscard]] mem::Mr* reg_mr(mem::Pd* pd, void* addr, std::uint64_t length, std::uint32_t access, int* err) noexcept;
    /** @return 0 or EINVAL. Null is a no-op. */
    int dereg_mr(mem::Mr* mr) noexcept;
    /** @param cqe minimum CQ depth (1..kMaxCqe). @return the CQ, or nullptr with *err = EINVAL / ENOMEM. */
    [[nodiscard]] rc::Cq* create_cq(std::uint32_t cqe, int* err) noexcept;
    /** @return 0, EINVAL, or EBUSY (a QP still uses it). Null is a no-op. */
    int destroy_cq(rc::Cq* cq) noexcept;
    /**
     * Creates an RC QP in RESET.
     * @return the QP, or nullptr with *err = EINVAL (null PD/CQ, caps above the limits in rc/params.h)
     *         or ENOMEM (no QPN left).
     */
    [[nodiscard]] rc::Qp* create_qp(mem::Pd* pd, rc::Cq* send_cq, rc::Cq* recv_cq, const rc::QpCap& cap,
                                    bool sq_sig_all, int* err) noexcept;
    /** @return 0 or EINVAL. Null is a no-op. */
    int destroy_qp(rc::Qp* qp) noexcept;
    /**
     * ibv_modify_qp for RC: the transition from the current state to attr.qp_state (or the current
     * state when @p mask lacks kQpState) must be legal, every attribute the transition requires must be
     * in @p mask and nothing the transition does not allow (IBTA Vol 1 §11.2.4.2, table of
     * ibv_modify_qp). Values are range checked (path MTU ≤ port MTU, timeout ≤ 31, retry counts ≤ 7,
     * max_rd_atomic ≤ kMaxRdAtomic, port exists).
     * @return 0 or EINVAL; on EINVAL the QP is unchanged.
     */
    int modify_qp(rc::Qp* qp, const rc::QpAttr& attr, std::uint32_t mask) noexcept;
    /**
     * Adds a static neighbour (config [neighbors]): @p ip (IPv6 or IPv4-mapped) is at @p mac, never
     * replaced by anything learned. @return false when the table is full.
     */
    bool add_static_neighbor(const wire::Ipv6Addr& ip, const wire::MacAddr& mac) noexcept;
    /** The neighbour table (ARP / ND), for inspection. */
    [[nodiscard]] const NeighTable& neighbors() const noexcept { return neigh_; }
    /**
     * Called on the engine thread when a port's link goes down or up (0-based port index). Set it on
     * the control path before the engine runs; it must not block.
     */
    std::function<void(unsigned port, bool up)> on_link_change;

    /** The QP named @p qpn, or nullptr. */
    [[nodiscard]] rc::Qp* qp_by_num(std::uint32_t qpn) noexcept;

    // ---- datapath, application side ----
    /**
     * Posts @p n send WQEs (ibv_post_send). Stops at the first bad one.
     * @param[out] bad index of the first WQE not posted (n when all were posted)
     * @return 0; EINVAL (QP not in RTS/SQD/ERR... see README, unsupported opcode, num_sge above the QP's
     *         cap, inline data too long or inline on READ/atomic, unaligned atomic length); ENOMEM (SQ full).
     */
    int post_send(rc::Qp* qp, const rc::SendWqe* wrs, std::uint32_t n, std::uint32_t* bad) noexcept;
    /** ibv_post_recv. @return 0, EINVAL (QP in RESET, too many SGEs), ENOMEM (RQ full). */
    int post_recv(rc::Qp* qp, const rc::RecvWqe* wrs, std::uint32_t n, std::uint32_t* bad) noexcept;
    /** ibv_poll_cq: copies up to @p n CQEs into @p out. @return how many (0..n). */
    std::uint32_t poll_cq(rc::Cq* cq, rc::Cqe* out, std::uint32_t n) noexcept;

    // ---- the engine ----
    /**
     * One pass of the engine: receive bursts on every port, demux to responder/completer, timers,
     * READ responses, requesters, then transmit. @return units of work done (0 = idle).
     */
    std::uint32_t poll() noexcept;
    /**
     * Engine thread only: blocks until ring_doorbell() is called, the next QP timer deadline, or
     * @p max_ns passes. Returns at once if an application posted work meanwhile. Publishes "asleep"
     * so that post_send/post_recv know to ring the doorbell (one eventfd write, only then).
     */
    void sleep_until_doorbell(std::uint64_t max_ns) noexcept;
    /** Wakes a sleeping engine thread. Any thread. */
    void ring_doorbell() noexcept;

    /**
     * Transmit by reference (zero-copy) on port @p port for payloads of at least @p min_payload bytes
     * (smaller ones are copied: cheaper). Only where the port's driver can (tx_by_reference());
     * UINT32_MAX turns it off. Set up at creation to rc::kTxByRefMinPayload; call on the control path.
     */
    void set_tx_by_reference(unsigned port, std::uint32_t min_payload) noexcept;
    /** The smallest payload sent by reference on @p port, or UINT32_MAX when the port copies. */
    [[nodiscard]] std::uint32_t tx_by_reference_min(unsigned port) const noexcept { return zc_min_payload_[port]; }

    /** Earliest timer deadline (ns) of any QP, or 0. Lets a test with a virtual clock jump ahead. */
    [[nodiscard]] std::uint64_t next_deadline_ns() const noexcept;

private:
    static bool emit(void* self, rc::Qp& qp, const wire::PacketFields& f,
                     std::span<const std::span<const std::uint8_t>> payload, TxRef* ref) noexcept;
    bool send_by_reference(unsigned port, const rc::Qp& qp, std::span<const std::span<const std::uint8_t>> payload,
                           const wire::PacketFields& f, PktBuf* buf, TxRef* ref) noexcept;
    /**
     * The receive path for one frame (receive.cc): parse, filter, demux. @p looped: the frame came
     * from the loopback queue (built by this device for one of its own GIDs), not from a port.
     */
    void receive(PktBuf& buf, bool looped) noexcept;
    /**
     * The destination MAC filter: true when @p pkt (Ethernet header present) is for port @p port:
     * its unicast MAC (any own port's for a @p looped frame), or, when not @p roce (UDP port 4791),
     * the broadcast MAC for ARP or an IPv6 multicast MAC (33:33:…) for IPv6: the neighbour
     * responder's.
     */
    [[nodiscard]] bool dst_mac_accepted(const wire::ParsedFrame& pkt, bool roce, unsigned port,
                                        bool looped) const noexcept;
    /** True when the destination IP of the RoCE frame @p pkt is one of the ports' GIDs. */
    [[nodiscard]] bool dst_ip_is_gid(const wire::ParsedFrame& pkt) const noexcept;
    void flush_tx(unsigned port) noexcept;
    void set_path(rc::Qp& qp) noexcept;
    void resolve_paths() noexcept;
    void check_links() noexcept;
    bool queue_raw(unsigned port, std::span<const std::uint8_t> frame) noexcept;

    static constexpr unsigned kBurst = 32;
    static constexpr unsigned kTxBatch = 64;

    struct TxQueue {
        std::array<PktBuf*, kTxBatch> pending{};
        std::uint16_t count = 0;
    };

    /**
     * Frames from a QP to a QP of this same device (Qp::loopback_peer), in emit order. Owned by the
     * device from emit until poll() has received them and given them back to their port's driver
     * (free_bulk); the destructor frees what is left. Engine thread only.
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
    std::vector<TxQueue> tx_;
    LoopbackQueue loopback_;
    mem::MrTable mrs_;
    Counters counters_;
    wire::ParseCounters parse_counters_;
    rc::TransportCtx ctx_;
    NeighTable neigh_;
    std::vector<NeighResponder> responders_; ///< one per port
    std::vector<bool> link_was_up_;
    /** Per port: smallest payload sent by reference; UINT32_MAX = copy (chosen at setup). */
    std::vector<std::uint32_t> zc_min_payload_;
    /** TxRefs of destroyed QPs that segments still pointed at (see destroy_qp, ~Device). */
    struct RetiredTxRefs {
        std::unique_ptr<TxRef[]> refs;
        std::uint32_t n = 0;
    };
    std::vector<RetiredTxRefs> retired_tx_refs_;
    std::uint32_t polls_ = 0;
    std::vector<std::unique_ptr<mem::Pd>> pds_;
    std::vector<std::unique_ptr<rc::Cq>> cqs_;
    std::vector<std::unique_ptr<rc::Qp>> qps_; ///< index = qpn - kFirstQpn
    /**
     * The live QPs (non-null entries of qps_), in QPN order: what the engine passes walk, so a pass
     * costs per QP that exists, not per kMaxQp slot (a scan of all 1024 slots was ~40 % of an
     * inline-progress memif run). Capacity kMaxQp reserved at construction; changed only by
     * create_qp / destroy_qp (control path, quiescence rule), read by the engine.
     */
    std::vector<rc::Qp*> live_qps_;
    /** True while the engine thread sleeps in sleep_until_doorbell(). Posting threads read it after
     *  publishing a WQE; the engine sets it before its last look at the rings (seq_cst on both sides,
     *  so either the engine sees the WQE or the poster sees the flag). */
    std::atomic<bool> asleep_{false};
    int doorbell_fd_ = -1;
    std::uint32_t next_pd_handle_ = 1;
    std::uint32_t next_cqn_ = 1;
};

} // namespace droce
