/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * droce::dpdk::EthPort — the PortDriver over one DPDK ethdev port (net_ring, net_memif,
 * net_af_packet, net_tap, a real NIC): one rx and one tx queue, one mempool of its own.
 *
 * Buffer ownership:
 *  - mbuf + PktBuf: every mbuf of the port's pool carries a droce::PktBuf in its private area
 *    (rte_mbuf_to_priv), and PktBuf::driver points back at the mbuf. The two are one buffer:
 * whoever owns the PktBuf owns the mbuf. Never free one without the other (free_bulk() frees both).
 *  - alloc_bulk(): the caller owns the returned buffers until it passes them to tx_burst() or
 * free_bulk().
 *  - tx_burst(bufs, n) returning r: the PMD owns bufs[0..r) and frees them when sent; the caller
 *    still owns bufs[r..n) and must retry or free them. After the call the caller must not touch
 *    bufs[0..r) again.
 *  - rx_burst(): the caller owns the returned buffers and gives each back with free_bulk() (or
 *    transmits it, on this or another EthPort: an rx buffer is a valid tx buffer).
 *  - the mempool: owned by the EthPort, created in create(), freed in the destructor if every mbuf
 *    has come home; if some are still out (held by a peer net_ring port, or by the caller), it is
 *    left allocated (logged) rather than freed under them.
 *  - the ethdev port and its device: owned from create() (configure + start) to the destructor
 *    (stop, close, then rte_dev_remove of the device), also when create() fails after configuring.
 *    probe_port() with the same devargs then probes the device anew (the port id may differ).
 *
 *  - transmit by reference (attach_payload): the frame is a chain: the header mbuf (the PktBuf's),
 *    then one segment mbuf per payload span, attached with rte_pktmbuf_attach_extbuf to the
 * caller's memory, then a small trailer mbuf holding pad and ICRC; segment and trailer mbufs come
 * from the port's segment pool. The chain is one buffer for ownership: whoever owns the head owns
 * all of it (tx_burst / free_bulk take it whole). The caller's memory is only borrowed: each
 * payload segment carries an rte_mbuf_ext_shared_info (in its private area) whose free_cb
 * counts the segment back on the TxRef given to attach_payload (TxRef::detach) when it is freed —
 * by the PMD after sending (memif zero-copy: once the peer consumed it, noticed in a later tx
 * burst), by a net_ring peer's rx, or by free_bulk — on whatever thread frees it. The segment pool
 * follows the mempool rule below.
 *
 * Thread rules: one engine thread calls alloc_bulk / free_bulk / tx_burst / rx_burst / link_up /
 * poll_link of a port (the queues are not multi-thread safe). The LSC interrupt callback runs on
 * the EAL interrupt thread and only sets an atomic flag. create() and the destructor are control
 * path; for net_memif the destructor stops and closes the port on the EAL interrupt thread (an
 * alarm it waits for: net_memif's own disconnect runs there and must not run beside it), so it
 * must not be called while holding anything an interrupt-thread callback waits for. The datapath
 * functions allocate no heap memory, take no lock, throw nothing; bursts go through fixed arrays of
 * kMaxBurst mbuf pointers (longer requests are done in chunks).
 */
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "port/port.h"
#include "wire/eth.h"

struct rte_device;
struct rte_mbuf;
struct rte_mempool;

namespace droce::dpdk {

/** Port counters: named like ethtool -S names where one exists. */
#define DROCE_ETHPORT_COUNTERS(X)                                                                  \
    X(rx_packets)          /* frames handed to the engine */                                       \
    X(tx_packets)          /* frames the PMD accepted */                                           \
    X(tx_ring_full)        /* tx bursts the PMD took only partly (caller kept the rest) */         \
    X(rx_linearized)       /* multi-segment or foreign-pool frames copied into one own mbuf */     \
    X(rx_oversize_dropped) /* multi-segment frames longer than an mbuf: dropped */                 \
    X(rx_nombuf_dropped)   /* no mbuf to linearize into: dropped */                                \
    X(alloc_failed)        /* alloc_bulk returned fewer than asked */                              \
    X(tx_ext_segments)     /* payload segments sent by reference (attach_payload) */               \
    X(tx_ext_refused) /* by reference refused (payload_reachable, attach_payload): memory the PMD  \
                         cannot reach, or no segment mbuf */                                       \
    X(lsc_events)     /* RTE_ETH_EVENT_INTR_LSC callbacks */

enum class PortCounter : std::uint8_t {
#define DROCE_X(name) name,
    DROCE_ETHPORT_COUNTERS(DROCE_X)
#undef DROCE_X
        count_
};
inline constexpr unsigned kNumPortCounters = static_cast<unsigned>(PortCounter::count_);
/** Name of a counter ("rx_linearized"...). */
[[nodiscard]] const char* to_string(PortCounter c) noexcept;

/** A link state change seen by EthPort::poll_link(). */
enum class LinkEvent : std::uint8_t { none, up, down };
[[nodiscard]] const char* to_string(LinkEvent e) noexcept;

/** How to set up one port. */
struct EthPortConfig {
    std::uint16_t port_id = 0; ///< an ethdev already probed (EAL --vdev / PCI scan / probe_port())
    std::uint8_t port_index =
        0; ///< droce's 0-based port index, written to PktBuf::port on rx and alloc
    std::uint32_t mtu = 1500;      ///< IP MTU in bytes (68..9600); max_frame() = mtu + 14
    std::uint32_t n_mbufs = 4095;  ///< mbufs in the port's pool (>= rx_desc + tx_desc + 2 *
                                   ///< kMaxBurst + EthPort::kPoolCacheLcores x 1.5 x mbuf_cache)
    std::uint32_t mbuf_cache = 64; ///< per-lcore mempool cache (0..512)
    /// Data bytes per mbuf at least (0 = from the MTU). EthPort also honours the PMD's own minimum:
    /// dev_info.min_rx_bufsize, and net_af_packet's framesz devarg (its rx copies whole frame
    /// slots).
    std::uint32_t min_data_room = 0;
    std::uint16_t rx_desc = 512; ///< rx ring size asked (the PMD may adjust it)
    std::uint16_t tx_desc = 512; ///< tx ring size asked (the PMD may adjust it)
    /// Receive every frame whatever its destination MAC (where the PMD supports it). Off by
    /// default: the port then receives its own MAC, broadcast and @ref multicast, and falls back
    /// to promiscuous mode only for what it cannot be told otherwise (see EthPort::create()).
    bool promiscuous = false;
    /// Offer transmit by reference (tx_by_reference()) where the PMD sends multi-segment frames.
    bool tx_by_reference = true;
    /// The port's unicast MAC: programmed as its default MAC, else added as a second address, where
    /// the PMD supports either. Unset: the PMD's own MAC.
    std::optional<wire::MacAddr> mac;
    /// Group MACs the port must receive besides broadcast: IPv6 Neighbor Discovery's solicited-node
    /// and all-nodes groups (33:33:…) of the port's IPv6 addresses. Empty for an IPv4-only port
    /// (ARP uses broadcast).
    std::vector<wire::MacAddr> multicast;
};

class EthPort final : public PortDriver {
  public:
    static constexpr std::uint16_t kMaxBurst =
        64; ///< mbufs per PMD call; longer bursts are chunked
    /** Lcores whose mempool caches the pool must fill: the engine thread (dpdk::register_thread)
     *  and the EAL's main thread, where the control path frees mbufs. */
    static constexpr std::uint32_t kPoolCacheLcores = 2;

    /**
     * Sets up @p cfg.port_id: creates the mempool, configures 1 rx + 1 tx queue, sets the MTU,
     * requests IPv4 header checksum offload where the PMD offers it, registers the LSC callback
     * where the PMD raises LSC interrupts, programs cfg.mac, starts the port, then sets its receive
     * filter: cfg.multicast as the multicast address list, else all-multicast mode; promiscuous
     * mode when cfg.promiscuous, or as the fallback when the PMD took neither cfg.mac (as default
     * or extra address, and its own MAC differs) nor cfg.multicast; otherwise promiscuous mode is
     * turned off (where the PMD can: net_memif cannot). None of these failing is an error. The
     * engine filters destination MACs and IPs itself (Device::receive), so a port left
     * promiscuous costs work, not safety.
     * Requires eal_init(). Control path.
     * @return the port, or nullptr with *err set: EAL not initialised; invalid port id; bad config
     *         (mtu outside 68..9600, below the PMD's min_mtu, above its max (except net_memif and
     *         net_af_packet, see pmd_mtu()), n_mbufs too small, mbuf data room above 65535);
     *         rte_pktmbuf_pool_create (ENOMEM, EEXIST); rte_eth_dev_configure / rx or tx queue
     * setup / rte_eth_dev_start (the PMD's errno); rte_eth_dev_set_mtu other than ENOTSUP (PMDs
     * such as net_ring have no MTU to set and are accepted). Promiscuous mode and MAC setting
     * failures are not errors (see promiscuous(), mac()).
     */
    [[nodiscard]] static std::unique_ptr<EthPort> create(const EthPortConfig& cfg,
                                                         std::string* err);
    ~EthPort() override;
    EthPort(const EthPort&) = delete;
    EthPort& operator=(const EthPort&) = delete;

    // ---- datapath (engine thread) ----
    /**
     * Fills @p bufs with up to @p n empty buffers: data at the mbuf's data start (headroom
     * RTE_PKTMBUF_HEADROOM before it), len 0, capacity = tailroom (>= max_frame()), port =
     * port_index.
     * @return how many (fewer only when the pool runs dry; counted as alloc_failed).
     */
    std::uint16_t alloc_bulk(PktBuf** bufs, std::uint16_t n) noexcept override;
    /** Frees @p n buffers (from alloc_bulk or rx_burst of any EthPort). Null entries are skipped.
     */
    void free_bulk(PktBuf** bufs, std::uint16_t n) noexcept override;
    /**
     * Transmits bufs[0..n): each frame is data[0..len) (precondition: data + len within the mbuf's
     * buffer, len >= 14). With set_tx_ipv4_cksum(true), IPv4 frames are marked for the NIC to fill
     * the header checksum. @return r: the PMD owns bufs[0..r), the caller bufs[r..n).
     */
    std::uint16_t tx_burst(PktBuf** bufs, std::uint16_t n) noexcept override;
    /**
     * Receives up to @p n frames (at most kMaxBurst per call). Each PktBuf: data/len the frame,
     * port = port_index, ecn_ce from the IPv4/IPv6 ECN field (untagged frames). Multi-segment
     * frames and frames from a pool without room for a PktBuf are copied into one own mbuf
     * (rx_linearized) or, if too long or no mbuf is free, dropped and counted.
     */
    std::uint16_t rx_burst(PktBuf** bufs, std::uint16_t n) noexcept override;
    /**
     * True when the PMD sends multi-segment frames (RTE_ETH_TX_OFFLOAD_MULTI_SEGS) and cfg allowed
     * it. Which memory can go by reference is also fixed at setup (see zc_memory()).
     */
    [[nodiscard]] bool tx_by_reference() const noexcept override {
        return zc_mem_ != ZcMemory::none;
    }
    /** True for net_memif's client in zero-copy mode (PortDriver::tx_read_by_peer). */
    [[nodiscard]] bool tx_read_by_peer() const noexcept override { return tx_read_by_peer_; }
    /**
     * True when every span of @p payload is memory zc_memory() accepts and fits one segment (1 -
     * 65535 bytes), at most kMaxExtSegs spans; else counts tx_ext_refused. Engine thread.
     */
    [[nodiscard]] bool
    payload_reachable(std::span<const std::span<const std::uint8_t>> payload) noexcept override;
    /**
     * Chains @p payload by reference (external-buffer mbufs) and @p trailer (copied) after the
     * headers in @p buf; counts the payload segments on @p ref (TxRef::attach); each segment's free
     * callback counts it back (TxRef::detach). Refused (false, nothing changed): no segment mbufs;
     * more than kMaxExtSegs spans; a span the PMD cannot reach (zc_memory()). Spans up to 65535
     * bytes.
     */
    bool attach_payload(PktBuf* buf, std::span<const std::span<const std::uint8_t>> payload,
                        std::span<const std::uint8_t> trailer, TxRef* ref) noexcept override;
    /** Lets the PMD free transmitted mbufs now: rte_eth_tx_done_cleanup, or an empty tx burst where
     *  the PMD has no cleanup (net_memif frees sent zero-copy mbufs at its next tx burst). */
    void tx_reclaim() noexcept override;
    /** Which memory attach_payload accepts, decided at create() from the PMD. */
    enum class ZcMemory : std::uint8_t {
        none, ///< no transmit by reference (no MULTI_SEGS, or disabled)
        any,  ///< PMDs that read frames with the CPU (net_ring, net_memif copy mode, net_af_packet,
              ///< net_tap)
        region, ///< net_memif zero-copy: only memory in the memseg list the peer maps (hugepage
                ///< memory from rte_malloc)
        dpdk,   ///< other PMDs (DMA): only DPDK memory, whose IOVA is known
    };
    [[nodiscard]] ZcMemory zc_memory() const noexcept { return zc_mem_; }
    /** One span by zc_memory()'s rule, 1 - 65535 bytes; @p iova gets its IOVA on DMA ports
     *  (ZcMemory::dpdk; RTE_BAD_IOVA elsewhere). The rule payload_reachable and attach_payload
     *  share. */
    [[nodiscard]] bool span_reachable(std::span<const std::uint8_t> s,
                                      std::uint64_t* iova) const noexcept;
    static constexpr unsigned kMaxExtSegs = 16; ///< payload spans per frame attach_payload takes
    /** mtu + 14 (Ethernet header; no VLAN tag). */
    [[nodiscard]] std::uint32_t max_frame() const noexcept override { return mtu_ + 14; }
    /** rte_eth_link_get_nowait(): true while the link is up. May be a PMD call (an ioctl for tap /
     *  af_packet): not per packet; use poll_link() in the engine loop. net_af_packet: also the
     *  kernel interface's IFF_UP and IFF_RUNNING (SIOCGIFFLAGS, at most once a millisecond), as
     *  DPDK 22.11's PMD always says up: `ip link set vethX down` here, or on the veth's peer, is a
     *  pulled cable. Any thread. */
    [[nodiscard]] bool link_up() const noexcept override;
    /**
     * Reports a link change since the last call: up (down→up), down (up→down) or none.
     * With LSC interrupts (lsc_interrupt()), the PMD is asked only after the callback fired, so
     * calling it every engine iteration costs one atomic load; without, every call asks the PMD —
     * call it every few milliseconds, not per iteration.
     */
    LinkEvent poll_link() noexcept;

    // ---- control / introspection ----
    /** True when the port was configured with RTE_ETH_TX_OFFLOAD_IPV4_CKSUM (the PMD offers it). */
    [[nodiscard]] bool ipv4_cksum_offload() const noexcept { return ipv4_cksum_offload_; }
    /**
     * When @p on and ipv4_cksum_offload(), tx_burst marks IPv4 frames RTE_MBUF_F_TX_IPV4 |
     * RTE_MBUF_F_TX_IP_CKSUM (l2_len 14, l3_len from IHL) so the NIC writes the header checksum;
     * the engine may then leave it 0. Without offload the call is ignored. Returns the resulting
     * state. Call between engine polls.
     */
    bool set_tx_ipv4_cksum(bool on) noexcept;
    [[nodiscard]] bool lsc_interrupt() const noexcept { return lsc_interrupt_; }
    /** True when the port receives frames for any MAC (asked, a fallback, or the PMD's only mode).
     */
    [[nodiscard]] bool promiscuous() const noexcept { return promiscuous_; }
    [[nodiscard]] std::uint16_t port_id() const noexcept { return port_id_; }
    [[nodiscard]] std::uint8_t port_index() const noexcept { return port_index_; }
    [[nodiscard]] std::uint32_t mtu() const noexcept { return mtu_; }
    /** The MTU the ethdev was configured with: mtu(), or less for net_memif / net_af_packet whose
     *  ethdev layer admits at most 1500 in DPDK 22.11 while their datapath carries mtu() anyway. */
    [[nodiscard]] std::uint32_t pmd_mtu() const noexcept { return pmd_mtu_; }
    /**
     * The port's unicast MAC, the one the engine must use: cfg.mac when given (the port receives it
     * as its default or an extra address, or in promiscuous mode), else the MAC the PMD reports.
     */
    [[nodiscard]] const wire::MacAddr& mac() const noexcept { return mac_; }
    /** PMD name, e.g. "net_ring". */
    [[nodiscard]] const std::string& driver_name() const noexcept { return driver_name_; }
    [[nodiscard]] rte_mempool* mempool() const noexcept { return pool_; }
    [[nodiscard]] std::uint64_t counter(PortCounter c) const noexcept {
        return counters_[static_cast<unsigned>(c)];
    }

  private:
    EthPort() = default;
    void inc(PortCounter c, std::uint64_t by = 1) noexcept {
        counters_[static_cast<unsigned>(c)] += by;
    }
    PktBuf* attach(rte_mbuf* m) noexcept;
    [[nodiscard]] bool kernel_link_up() const noexcept;
    rte_mbuf* linearize(rte_mbuf* m) noexcept;
    friend struct EthPortAccess; // the LSC callback and the memif watch (eth_port.cc)

    // Fast-path data first, on its own cache lines (rule 3).
    alignas(64) std::array<rte_mbuf*, kMaxBurst> rx_mbufs_{};
    alignas(64) std::array<rte_mbuf*, kMaxBurst> tx_mbufs_{};
    alignas(64) rte_mempool* pool_ = nullptr;
    /** net_memif: this port's burst sequence (memif_unmap_guard.h), or null (other PMDs, or every
     *  sequence taken). Claimed at creation, given back by the destructor after the close. */
    std::atomic<std::uint32_t>* memif_burst_ = nullptr;
    std::uint16_t port_id_ = 0;
    std::uint8_t port_index_ = 0;
    bool tx_cksum_mark_ = false;
    ZcMemory zc_mem_ = ZcMemory::none;
    bool tx_read_by_peer_ = false;
    bool reclaim_by_burst_ = false; ///< tx_done_cleanup unsupported: reclaim with an empty tx burst
    rte_mempool* seg_pool_ = nullptr;      ///< segment and trailer mbufs of by-reference frames
    std::uintptr_t zc_lo_ = 0, zc_hi_ = 0; ///< ZcMemory::region: the memory the memif peer maps
    bool last_link_up_ = false;
    std::uint32_t mtu_ = 1500;
    std::uint32_t own_room_ = 0; ///< data room of an own mbuf after headroom
    std::uint32_t pmd_mtu_ = 1500;
    std::array<std::uint64_t, kNumPortCounters> counters_{};
    alignas(64) std::atomic<bool> lsc_pending_{false}; ///< set by the EAL interrupt thread

    // Control-path state.
    rte_device* device_ = nullptr;
    bool configured_ = false;
    bool started_ = false;
    bool lsc_interrupt_ = false;
    bool lsc_registered_ = false;
    /** net_memif: EthPortAccess::memif_watch's alarm is set (written at creation, then by the
     *  watch on the EAL interrupt thread; read by the destructor after the engine stopped). */
    std::atomic<bool> memif_watch_armed_{false};
    bool memif_watch_up_ = false; ///< the link as the watch last saw it (its thread only)
    bool ipv4_cksum_offload_ = false;
    bool promiscuous_ = false;
    wire::MacAddr mac_{};
    std::string driver_name_;
    // net_af_packet's interface, asked about by link_up() (kernel_link_up()).
    std::string kernel_iface_;
    int ifflags_fd_ = -1; ///< AF_INET datagram socket for SIOCGIFFLAGS, or -1
    mutable std::atomic<std::uint64_t> kernel_next_tsc_{0};
    mutable std::atomic<bool> kernel_up_{true};
};

} // namespace droce::dpdk
