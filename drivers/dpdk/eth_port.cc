/* SPDX-License-Identifier: BSD-3-Clause */
#include "eth_port.h"

#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string_view>
#include <vector>

#include <rte_dev.h>
#include <rte_devargs.h>

#include <rte_alarm.h>
#include <rte_cycles.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_interrupts.h>
#include <rte_lcore.h>
#include <rte_log.h>
#include <rte_mbuf.h>
#include <rte_memory.h>
#include <rte_mempool.h>

#include "dpdk/eal.h"
#include "dpdk/memif_unmap_guard.h"

namespace droce::dpdk {

const char* to_string(PortCounter c) noexcept {
    switch (c) {
#define DROCE_X(name)                                                                              \
    case PortCounter::name:                                                                        \
        return #name;
        DROCE_ETHPORT_COUNTERS(DROCE_X)
#undef DROCE_X
    case PortCounter::count_:
        break;
    }
    return "?";
}

const char* to_string(LinkEvent e) noexcept {
    switch (e) {
    case LinkEvent::none:
        return "none";
    case LinkEvent::up:
        return "up";
    case LinkEvent::down:
        return "down";
    }
    return "?";
}

namespace {

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 // Linux 5.14 (uapi asm-generic/mman-common.h)
#endif

/**
 * Maps in and writes once every page of this process's net_memif shared memory (the memfd regions
 * the PMD names "memif_region_N": ring descriptors and copy-mode buffers, 16 MiB a port with the
 * shipped configs) before traffic touches them. The PMD maps a region without populating it, and
 * a process took a page fault on its first touch of each page (the sender's copy into a slot,
 * the receiver's copy out of it): 12 - 17 us each on this project's VM host, and a write to a
 * populated page trapped once more in the hypervisor (5 - 7 us). Until the rings had wrapped once,
 * about 500 rounds of ib_write_lat, every round took 70 - 130 us instead of 2 (README, Progress).
 * MADV_POPULATE_WRITE (Linux 5.14; before it, the write below faults the page in) maps the pages
 * writable; the write is an atomic add of 0, so a frame the peer is writing loses no byte.
 * Control path: the EAL interrupt thread only (EthPortAccess::memif_watch).
 * @return bytes touched.
 */
std::size_t populate_memif_regions() noexcept {
    std::FILE* maps = std::fopen("/proc/self/maps", "re");
    if (!maps) return 0;
    std::size_t done = 0;
    char line[512];
    while (std::fgets(line, sizeof line, maps)) {
        if (!std::strstr(line, "/memfd:memif_region_")) continue;
        std::uintptr_t lo = 0, hi = 0;
        if (std::sscanf(line, "%" SCNxPTR "-%" SCNxPTR, &lo, &hi) != 2 || hi <= lo) continue;
        const char* perms = std::strchr(line, ' ');
        if (!perms || std::strncmp(perms + 1, "rw", 2) != 0) continue;
        (void)::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_POPULATE_WRITE);
        // Then one write to each page, of the value it holds (an atomic add of 0 loses no byte
        // the peer writes meanwhile): under a hypervisor the first write to a guest page after
        // it was populated still traps (5 - 7 us a page on this host, no guest fault counted;
        // the next write 0.02 us), and a raw memif ping-pong paid it in every slot of the first
        // ring pass (dpdk-port-ping: 26 us a round for 1,100 rounds, then 1.8).
        for (std::uintptr_t a = lo; a < hi; a += 4096)
            (void)std::atomic_ref<std::uint8_t>(*reinterpret_cast<std::uint8_t*>(a))
                .fetch_add(0, std::memory_order_relaxed);
        done += hi - lo;
    }
    std::fclose(maps);
    return done;
}

} // namespace

/** Gives the LSC callback (a C function pointer) access to the port it was registered for. */
struct EthPortAccess {
    static int lsc(std::uint16_t, rte_eth_event_type, void* arg, void*) {
        auto* port = static_cast<EthPort*>(arg);
        // Pairs with the acquire exchange in poll_link(): the engine asks the PMD after seeing it.
        port->lsc_pending_.store(true, std::memory_order_release);
        return 0;
    }
    /** A net_memif port's link watch (EAL alarm, interrupt thread): each time the link comes
     *  up, the regions the connection mapped are populated (populate_memif_regions). Every
     *  1 ms while the link is down, every 100 ms while it is up (a peer that reconnects maps new
     *  regions). Cancelled by the destructor. */
    static void memif_watch(void* arg) {
        auto* port = static_cast<EthPort*>(arg);
        const bool up = port->link_up();
        if (up && !port->memif_watch_up_) (void)populate_memif_regions();
        port->memif_watch_up_ = up;
        arm_memif_watch(port, up ? 100'000 : 1'000);
    }
    /** Sets the watch's next alarm in @p us microseconds (the destructor cancels it). */
    static void arm_memif_watch(EthPort* port, std::uint64_t us) {
        port->memif_watch_armed_.store(rte_eal_alarm_set(us, memif_watch, port) == 0,
                                       std::memory_order_release);
    }
};

namespace {

/** What close_on_interrupt_thread() hands to the alarm: the port, and when the close is done. */
struct IntrClose {
    std::uint16_t port_id = 0;
    bool started = false;
    std::atomic<bool> done{false};
};

void intr_close(void* arg) {
    auto* c = static_cast<IntrClose*>(arg);
    if (c->started) (void)rte_eth_dev_stop(c->port_id);
    (void)rte_eth_dev_close(c->port_id);
    // Pairs with the acquire loads in close_on_interrupt_thread(): the close is complete.
    c->done.store(true, std::memory_order_release);
}

/**
 * Stops and closes @p port_id on the EAL interrupt thread and waits for it (at most about 10 s,
 * then here). net_memif (DPDK 22.11) runs its control-channel handler on that thread; when the
 * peer goes away the handler calls memif_disconnect(), which unmaps and rte_free()s the shared
 * regions outside any lock, and rte_eth_dev_stop() calls the same function on the caller's
 * thread. A peer leaving while we stopped had both threads free one region: the interrupt thread
 * died in the heap's free-list insert (issue 17, `eal-intr-thread ... segfault at 68`). An alarm
 * callback runs on the interrupt thread, between two of its handlers, so there the two follow
 * one another. Called on the interrupt thread itself (an LSC callback destroying its port), it
 * closes at once: an alarm would wait for the caller.
 */
void close_on_interrupt_thread(std::uint16_t port_id, bool started) noexcept {
    IntrClose c;
    c.port_id = port_id;
    c.started = started;
    if (rte_thread_is_intr() || rte_eal_alarm_set(1, intr_close, &c) != 0) {
        intr_close(&c); // no alarm (EAL short of memory): close here, as before
        return;
    }
    // The interrupt thread runs short callbacks; give it 10 s, then take the alarm back and close
    // here if it never ran (a cancelled alarm never runs; cancel waits for one that is running).
    // While net_memif's unmap waits in droce's guard for a burst held elsewhere (a debugger), the
    // interrupt thread is inside memif_disconnect: closing here beside it would free twice.
    for (int i = 0;
         !c.done.load(std::memory_order_acquire) && (i < 100'000 || memif_unmap_guard_waiting());
         ++i)
        rte_delay_us_sleep(100);
    if (!c.done.load(std::memory_order_acquire) && rte_eal_alarm_cancel(intr_close, &c) > 0)
        intr_close(&c);
}

constexpr std::uint32_t kMinMtu = 68;
constexpr std::uint32_t kMaxMtu = 9600;
constexpr std::uint32_t kEthHdrLen = 14;
constexpr std::uint16_t kTrailerRoom =
    64; ///< data room of a segment-pool mbuf (trailers: pad + ICRC)

std::string errno_text(int e) {
    return std::string(rte_strerror(e)) + " (errno " + std::to_string(e) + ")";
}

/**
 * Data bytes per mbuf a PMD insists on whatever the MTU. net_af_packet copies whole PACKET_MMAP
 * frame slots and refuses (ENOMEM at rx queue setup) mbufs smaller than its devargs' framesz
 * (default 2048) minus the 32-byte tpacket header.
 */
/** The value of devargs key @p key ("framesz", "zero-copy") of the port's device, or "" when
 * absent. */
std::string_view devarg(const rte_eth_dev_info& info, std::string_view key) {
    const rte_devargs* da = info.device ? rte_dev_devargs(info.device) : nullptr;
    if (!da || !da->args) return {};
    const std::string_view args(da->args);
    for (std::size_t pos = 0; pos < args.size();) {
        std::size_t end = args.find(',', pos);
        if (end == std::string_view::npos) end = args.size();
        const std::string_view kv = args.substr(pos, end - pos);
        if (kv.size() > key.size() && kv.substr(0, key.size()) == key && kv[key.size()] == '=')
            return kv.substr(key.size() + 1);
        pos = end + 1;
    }
    return {};
}

std::uint32_t pmd_min_room(const rte_eth_dev_info& info) {
    std::uint32_t room = info.min_rx_bufsize;
    if (!info.device || !info.driver_name || std::strcmp(info.driver_name, "net_af_packet") != 0)
        return room;
    std::uint32_t framesz = 2048;
    std::uint32_t v = 0;
    for (const char c : devarg(info, "framesz")) {
        if (c < '0' || c > '9' || v > 1'000'000) break;
        v = v * 10 + static_cast<std::uint32_t>(c - '0');
    }
    if (v) framesz = v;
    return std::max(room, framesz);
}

/**
 * Which memory a frame segment may point into on this PMD (EthPort::ZcMemory). PMDs that copy
 * frames with the CPU read any address; net_memif in zero-copy mode hands the peer offsets into the
 * memseg list it shared at connect (region 1: the first one, DPDK 22.11 "FIXME: get region index"),
 * so only memory there; any other PMD may DMA and needs the IOVA DPDK knows for its own memory.
 */
EthPort::ZcMemory zc_memory_of(const rte_eth_dev_info& info) {
    const std::string_view d(info.driver_name ? info.driver_name : "");
    if (d == "net_memif") {
        const std::string_view zc = devarg(info, "zero-copy");
        return zc == "yes" || zc == "y" || zc == "on" ? EthPort::ZcMemory::region
                                                      : EthPort::ZcMemory::any;
    }
    if (d == "net_ring" || d == "net_af_packet" || d == "net_tap" || d == "net_pcap" ||
        d == "net_null")
        return EthPort::ZcMemory::any;
    return EthPort::ZcMemory::dpdk;
}

/** The memory net_memif zero-copy shares as region 1: the used memsegs of the first memseg list. */
struct RegionWalk {
    const rte_memseg_list* msl = nullptr;
    std::uintptr_t lo = 0;
    std::uintptr_t hi = 0;
};
int region_walk(const rte_memseg_list* msl, const rte_memseg* ms, void* arg) {
    auto* w = static_cast<RegionWalk*>(arg);
    if (w->msl == nullptr) {
        w->msl = msl;
        w->lo = reinterpret_cast<std::uintptr_t>(msl->base_va);
        w->hi = w->lo;
    }
    if (msl != w->msl) return 1; // memif maps this list as another region it never sends from
    w->hi += ms->len;            // as memif_region_init_zc sizes the region
    return 0;
}

/** free_cb of a payload segment: the PMD, a peer or free_bulk let go of it (any thread). */
void release_segment(void* /*addr*/, void* opaque) {
    // release: every read of the payload by whoever held the segment happens before the engine's
    // acquire in TxRef::released() lets the application reuse the memory.
    static_cast<TxRef*>(opaque)->detach();
}

/**
 * PMDs whose datapath does not enforce the ethdev MTU although DPDK 22.11 reports a 1518-byte
 * max_rx_pktlen for them: net_memif (frames span memif buffers) and net_af_packet (the kernel
 * interface's MTU is what limits frames; set it with `ip link set IFACE mtu N`). For these a larger
 * MTU is accepted: the ethdev is configured at its maximum and frames up to mtu + 14 still pass.
 */
bool pmd_ignores_mtu(const rte_eth_dev_info& info) {
    if (!info.driver_name) return false;
    const std::string_view d(info.driver_name);
    return d == "net_memif" || d == "net_af_packet";
}

/** Mbuf data room after headroom: the largest frame with slack or what the PMD needs, a multiple of
 * 1 KiB, >= 2 KiB. */
std::uint32_t data_room_for(std::uint32_t mtu, std::uint32_t min_room) {
    const std::uint32_t need = std::max(mtu + kEthHdrLen + 64, min_room);
    return std::max<std::uint32_t>(2048, (need + 1023) & ~1023u);
}

/** Constructs the PktBuf in each mbuf's private area once, when the pool is populated. */
void init_priv(rte_mempool*, void*, void* obj, unsigned) {
    auto* m = static_cast<rte_mbuf*>(obj);
    std::construct_at(static_cast<PktBuf*>(rte_mbuf_to_priv(m)));
}

std::atomic<unsigned> g_pool_serial{0};

} // namespace

std::unique_ptr<EthPort> EthPort::create(const EthPortConfig& cfg, std::string* err) {
    std::string scratch;
    if (!err) err = &scratch;
    const std::string who = "port " + std::to_string(cfg.port_id) + ": ";
    if (!eal_initialized()) {
        *err = who + "EAL not initialised: call eal_init() first";
        return nullptr;
    }
    if (!rte_eth_dev_is_valid_port(cfg.port_id)) {
        *err = who + "no such ethdev port";
        return nullptr;
    }
    if (cfg.mtu < kMinMtu || cfg.mtu > kMaxMtu) {
        *err = who + "mtu " + std::to_string(cfg.mtu) + " outside " + std::to_string(kMinMtu) +
               ".." + std::to_string(kMaxMtu);
        return nullptr;
    }
    // What the pool must hold besides the rings and two bursts: the mempool caches of the lcores
    // that allocate from it (the engine thread and the EAL's own), each up to 1.5 x mbuf_cache
    // before DPDK flushes it back.
    const std::uint32_t cache_room = kPoolCacheLcores * (cfg.mbuf_cache + cfg.mbuf_cache / 2);
    if (cfg.mbuf_cache > 512 || cfg.n_mbufs < static_cast<std::uint32_t>(cfg.rx_desc) +
                                                  cfg.tx_desc + 2u * kMaxBurst + cache_room) {
        *err = who + "n_mbufs " + std::to_string(cfg.n_mbufs) + " below rx_desc + tx_desc + " +
               std::to_string(2 * kMaxBurst) + " + " + std::to_string(cache_room) +
               " in lcore caches (or mbuf_cache above 512)";
        return nullptr;
    }
    rte_eth_dev_info info{};
    if (const int r = rte_eth_dev_info_get(cfg.port_id, &info); r != 0) {
        *err = who + "rte_eth_dev_info_get failed: " + errno_text(-r);
        return nullptr;
    }
    // The largest MTU the ethdev layer lets us configure (as rte_eth_dev_configure computes it).
    const std::uint32_t overhead = info.max_mtu != UINT16_MAX && info.max_rx_pktlen > info.max_mtu
                                       ? info.max_rx_pktlen - info.max_mtu
                                       : RTE_ETHER_HDR_LEN + RTE_ETHER_CRC_LEN;
    const std::uint32_t pmd_max_mtu = std::min<std::uint32_t>(
        info.max_mtu, info.max_rx_pktlen > overhead ? info.max_rx_pktlen - overhead : 0);
    std::uint32_t pmd_mtu = cfg.mtu;
    if (cfg.mtu > pmd_max_mtu) {
        if (!pmd_ignores_mtu(info)) {
            *err = who + "mtu " + std::to_string(cfg.mtu) + " above the PMD's maximum " +
                   std::to_string(pmd_max_mtu);
            return nullptr;
        }
        pmd_mtu = pmd_max_mtu;
    }
    if (cfg.mtu < info.min_mtu) {
        *err = who + "mtu " + std::to_string(cfg.mtu) + " below the PMD's minimum " +
               std::to_string(info.min_mtu);
        return nullptr;
    }

    std::unique_ptr<EthPort> p(new EthPort());
    p->port_id_ = cfg.port_id;
    p->port_index_ = cfg.port_index;
    p->mtu_ = cfg.mtu;
    p->driver_name_ = info.driver_name ? info.driver_name : "";
    if (p->driver_name_ == "net_memif" && memif_unmap_guard_install())
        p->memif_burst_ = memif_burst_slot_claim();
    if (p->driver_name_ == "net_af_packet") {
        // DPDK 22.11's af_packet reports its link up whatever the interface does; ask the kernel
        // (link_up()). The interface is in this process's network namespace, as the PMD's socket.
        const std::string_view iface = devarg(info, "iface");
        if (!iface.empty() && iface.size() < IFNAMSIZ) {
            p->kernel_iface_ = std::string(iface);
            p->ifflags_fd_ = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        }
    }
    int socket = rte_eth_dev_socket_id(cfg.port_id);
    if (socket < 0) socket = SOCKET_ID_ANY;

    // The pool: one PktBuf in each mbuf's private area, data room for the largest frame. The area
    // is a whole number of cache lines, so that a frame (the headroom after it is one too) starts a
    // line: with the 8-byte alignment DPDK asks for it started 40 bytes in, and a 62-byte ACK
    // spanned two lines.
    const auto priv = static_cast<std::uint16_t>(RTE_ALIGN(sizeof(PktBuf), RTE_CACHE_LINE_SIZE));
    const std::uint32_t data_room =
        data_room_for(cfg.mtu, std::max(pmd_min_room(info), cfg.min_data_room));
    if (data_room + RTE_PKTMBUF_HEADROOM > UINT16_MAX) {
        *err = who + "mbuf data room " + std::to_string(data_room) +
               " too large (PMD or min_data_room)";
        return nullptr;
    }
    const auto room = static_cast<std::uint16_t>(data_room + RTE_PKTMBUF_HEADROOM);
    const std::string pool_name =
        "droce_mp" + std::to_string(cfg.port_id) + "_" + std::to_string(g_pool_serial++);
    p->pool_ =
        rte_pktmbuf_pool_create(pool_name.c_str(), cfg.n_mbufs, cfg.mbuf_cache, priv, room, socket);
    if (!p->pool_) {
        *err = who + "rte_pktmbuf_pool_create(" + std::to_string(cfg.n_mbufs) + " x " +
               std::to_string(room) + " B) failed: " + errno_text(rte_errno);
        return nullptr;
    }
    rte_mempool_obj_iter(p->pool_, init_priv, nullptr);
    p->own_room_ = static_cast<std::uint32_t>(room) - RTE_PKTMBUF_HEADROOM;

    rte_eth_conf conf{};
    // net_memif's client in zero-copy mode hands its own buffers to the peer, whose core copies
    // each frame out of them (the server always copies, into buffers of its own).
    p->tx_read_by_peer_ =
        std::string_view(info.driver_name ? info.driver_name : "") == "net_memif" &&
        zc_memory_of(info) == ZcMemory::region && devarg(info, "role") == "client";
    // Transmit by reference: frames as mbuf chains, payload attached as external buffers. Segment
    // and trailer mbufs come from a second pool: no data room to speak of (a trailer is at most 8
    // bytes), the segment's rte_mbuf_ext_shared_info in the private area.
    if (cfg.tx_by_reference && (info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MULTI_SEGS)) {
        ZcMemory mem = zc_memory_of(info);
        if (mem == ZcMemory::region) {
            RegionWalk w;
            (void)rte_memseg_walk(region_walk, &w);
            p->zc_lo_ = w.lo;
            p->zc_hi_ = w.hi;
            if (w.msl == nullptr) mem = ZcMemory::none;
        }
        if (mem != ZcMemory::none) {
            const auto seg_priv = static_cast<std::uint16_t>(
                RTE_ALIGN(sizeof(rte_mbuf_ext_shared_info), RTE_MBUF_PRIV_ALIGN));
            const std::string seg_name = pool_name + "s";
            p->seg_pool_ = rte_pktmbuf_pool_create(seg_name.c_str(), 2 * cfg.n_mbufs,
                                                   cfg.mbuf_cache, seg_priv, kTrailerRoom, socket);
            if (!p->seg_pool_) {
                *err = who + "rte_pktmbuf_pool_create(" + seg_name +
                       ") failed: " + errno_text(rte_errno);
                return nullptr;
            }
            conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_MULTI_SEGS;
            p->zc_mem_ = mem;
        }
    }
    conf.rxmode.mtu = pmd_mtu;
    p->pmd_mtu_ = pmd_mtu;
    if (info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_IPV4_CKSUM) {
        conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_IPV4_CKSUM;
        p->ipv4_cksum_offload_ = true;
    }
    p->lsc_interrupt_ = info.dev_flags && (*info.dev_flags & RTE_ETH_DEV_INTR_LSC);
    conf.intr_conf.lsc = p->lsc_interrupt_ ? 1 : 0;
    p->device_ = info.device;
    if (const int r = rte_eth_dev_configure(cfg.port_id, 1, 1, &conf); r != 0) {
        *err = who + "rte_eth_dev_configure failed: " + errno_text(-r);
        return nullptr;
    }
    p->configured_ = true;
    // Not when the PMD is held below cfg.mtu: af_packet's set_mtu would shrink the kernel
    // interface's MTU.
    if (const int r = pmd_mtu == cfg.mtu
                          ? rte_eth_dev_set_mtu(cfg.port_id, static_cast<std::uint16_t>(pmd_mtu))
                          : 0;
        r != 0 && r != -ENOTSUP) {
        *err =
            who + "rte_eth_dev_set_mtu(" + std::to_string(pmd_mtu) + ") failed: " + errno_text(-r);
        return nullptr;
    }
    std::uint16_t nb_rx = cfg.rx_desc;
    std::uint16_t nb_tx = cfg.tx_desc;
    if (const int r = rte_eth_dev_adjust_nb_rx_tx_desc(cfg.port_id, &nb_rx, &nb_tx); r != 0) {
        *err = who + "rte_eth_dev_adjust_nb_rx_tx_desc failed: " + errno_text(-r);
        return nullptr;
    }
    if (const int r = rte_eth_rx_queue_setup(cfg.port_id, 0, nb_rx, static_cast<unsigned>(socket),
                                             nullptr, p->pool_);
        r != 0) {
        *err = who + "rte_eth_rx_queue_setup failed: " + errno_text(-r);
        return nullptr;
    }
    if (const int r =
            rte_eth_tx_queue_setup(cfg.port_id, 0, nb_tx, static_cast<unsigned>(socket), nullptr);
        r != 0) {
        *err = who + "rte_eth_tx_queue_setup failed: " + errno_text(-r);
        return nullptr;
    }
    if (p->lsc_interrupt_) {
        if (const int r = rte_eth_dev_callback_register(cfg.port_id, RTE_ETH_EVENT_INTR_LSC,
                                                        EthPortAccess::lsc, p.get());
            r != 0) {
            *err = who + "rte_eth_dev_callback_register(LSC) failed: " + errno_text(-r);
            return nullptr;
        }
        p->lsc_registered_ = true;
    }
    // A NIC out of promiscuous mode drops unicast frames to any MAC it was not given: cfg.mac must
    // be its default MAC (net_af_packet sets the interface's), or one more address in its table
    // (net_ring), or already its own (net_memif takes it from the devargs).
    bool mac_received = true;
    if (cfg.mac) {
        rte_ether_addr a{};
        std::memcpy(a.addr_bytes, cfg.mac->data(), 6);
        rte_ether_addr now{};
        mac_received = (rte_eth_macaddr_get(cfg.port_id, &now) == 0 &&
                        std::memcmp(now.addr_bytes, a.addr_bytes, 6) == 0) ||
                       rte_eth_dev_default_mac_addr_set(cfg.port_id, &a) == 0 ||
                       rte_eth_dev_mac_addr_add(cfg.port_id, &a, 0) == 0;
    }
    if (const int r = rte_eth_dev_start(cfg.port_id); r != 0) {
        *err = who + "rte_eth_dev_start failed: " + errno_text(-r);
        return nullptr;
    }
    p->started_ = true;
    // IPv6 Neighbor Discovery arrives on multicast groups: the exact list where the PMD filters by
    // one, else every multicast frame (the engine drops the groups it does not need).
    bool multicast_received = true;
    if (!cfg.multicast.empty()) {
        std::vector<rte_ether_addr> mc(cfg.multicast.size());
        for (std::size_t i = 0; i < mc.size(); ++i)
            std::memcpy(mc[i].addr_bytes, cfg.multicast[i].data(), 6);
        multicast_received =
            rte_eth_dev_set_mc_addr_list(cfg.port_id, mc.data(),
                                         static_cast<std::uint32_t>(mc.size())) == 0 ||
            rte_eth_allmulticast_enable(cfg.port_id) == 0;
    }
    // Some PMDs start promiscuous (net_ring): leave it unless asked, or unless it is the only way
    // the port receives its MAC or the multicast ND needs.
    if (cfg.promiscuous || !mac_received || !multicast_received)
        (void)rte_eth_promiscuous_enable(cfg.port_id);
    else
        (void)rte_eth_promiscuous_disable(cfg.port_id); // ENOTSUP where the PMD has no other mode
    p->promiscuous_ = rte_eth_promiscuous_get(cfg.port_id) == 1;
    rte_ether_addr a{};
    if (cfg.mac)
        p->mac_ = *cfg.mac;
    else if (rte_eth_macaddr_get(cfg.port_id, &a) == 0)
        std::memcpy(p->mac_.data(), a.addr_bytes, 6);
    p->last_link_up_ = p->link_up();
    // The watch runs on the EAL interrupt thread only, where net_memif maps and unmaps its
    // regions: never beside a disconnect that unmaps what it is touching.
    if (p->driver_name_ == "net_memif") EthPortAccess::arm_memif_watch(p.get(), 1'000);
    return p;
}

EthPort::~EthPort() {
    if (ifflags_fd_ >= 0) ::close(ifflags_fd_);
    // Waits for a running watch, and takes the alarm it set again too (rte_eal_alarm_cancel).
    if (memif_watch_armed_.load(std::memory_order_acquire))
        (void)rte_eal_alarm_cancel(EthPortAccess::memif_watch, this);
    if (lsc_registered_) {
        // -EAGAIN while the callback runs on the interrupt thread: it is short, try again.
        for (int i = 0; i < 1000; ++i) {
            if (rte_eth_dev_callback_unregister(port_id_, RTE_ETH_EVENT_INTR_LSC,
                                                EthPortAccess::lsc, this) != -EAGAIN)
                break;
            rte_delay_us_sleep(100);
        }
    }
    if (configured_ && driver_name_ == "net_memif") {
        close_on_interrupt_thread(port_id_, started_);
    } else {
        if (started_) (void)rte_eth_dev_stop(port_id_);
        if (configured_) (void)rte_eth_dev_close(port_id_); // rx ring's mbufs back to the pool
    }
    memif_burst_slot_release(memif_burst_); // no burst runs on a closed port
    if (configured_) {
        // Detach the device too, so that probing the same devargs again makes a fresh port (a
        // closed vdev stays plugged, and rte_dev_probe of it would fail with EEXIST).
        if (device_) (void)rte_dev_remove(device_);
    }
    if (seg_pool_) {
        if (rte_mempool_full(seg_pool_)) {
            rte_mempool_free(seg_pool_);
        } else {
            RTE_LOG(WARNING, USER1,
                    "droce: port %u: %u segment mbufs still out at destruction; pool %s left "
                    "allocated\n",
                    port_id_, rte_mempool_in_use_count(seg_pool_), seg_pool_->name);
        }
    }
    if (pool_) {
        if (rte_mempool_full(pool_)) {
            rte_mempool_free(pool_);
        } else {
            RTE_LOG(WARNING, USER1,
                    "droce: port %u: %u mbufs still out at destruction; pool %s left allocated\n",
                    port_id_, rte_mempool_in_use_count(pool_), pool_->name);
        }
    }
}

PktBuf* EthPort::attach(rte_mbuf* m) noexcept {
    auto* b = static_cast<PktBuf*>(rte_mbuf_to_priv(m));
    b->data = rte_pktmbuf_mtod(m, std::uint8_t*);
    b->len = rte_pktmbuf_data_len(m);
    b->capacity = rte_pktmbuf_tailroom(m) + b->len;
    b->port = port_index_;
    b->ecn_ce = false;
    b->driver = m;
    b->ext_len = 0;
    return b;
}

std::uint16_t EthPort::alloc_bulk(PktBuf** bufs, std::uint16_t n) noexcept {
    std::uint16_t done = 0;
    while (done < n) {
        const auto want = static_cast<std::uint16_t>(std::min<unsigned>(kMaxBurst, n - done));
        rte_mbuf** ms = tx_mbufs_.data(); // scratch: tx_mbufs_ is only live inside tx_burst
        std::uint16_t got = want;
        if (rte_pktmbuf_alloc_bulk(pool_, ms, want) != 0) {
            // All-or-nothing failed: take what is left one by one.
            got = 0;
            while (got < want) {
                rte_mbuf* m = rte_pktmbuf_alloc(pool_);
                if (!m) break;
                ms[got++] = m;
            }
        }
        for (std::uint16_t i = 0; i < got; ++i)
            bufs[done + i] = attach(ms[i]);
        done = static_cast<std::uint16_t>(done + got);
        if (got < want) {
            inc(PortCounter::alloc_failed);
            break;
        }
    }
    return done;
}

void EthPort::free_bulk(PktBuf** bufs, std::uint16_t n) noexcept {
    std::uint16_t i = 0;
    while (i < n) {
        unsigned k = 0;
        for (; i < n && k < kMaxBurst; ++i)
            if (bufs[i]) tx_mbufs_[k++] = static_cast<rte_mbuf*>(bufs[i]->driver);
        rte_pktmbuf_free_bulk(tx_mbufs_.data(), k);
    }
}

std::uint16_t EthPort::tx_burst(PktBuf** bufs, std::uint16_t n) noexcept {
    std::uint16_t sent = 0;
    while (sent < n) {
        const auto chunk = static_cast<std::uint16_t>(std::min<unsigned>(kMaxBurst, n - sent));
        for (std::uint16_t i = 0; i < chunk; ++i) {
            PktBuf* b = bufs[sent + i];
            auto* m = static_cast<rte_mbuf*>(b->driver);
            m->data_off =
                static_cast<std::uint16_t>(b->data - static_cast<std::uint8_t*>(m->buf_addr));
            m->data_len = static_cast<std::uint16_t>(b->len);
            m->pkt_len = b->len + b->ext_len; // ext_len: the chained segments of attach_payload
            if (tx_cksum_mark_ && b->len >= kEthHdrLen + 20 && b->data[12] == 0x08 &&
                b->data[13] == 0x00) {
                m->l2_len = kEthHdrLen;
                m->l3_len = static_cast<std::uint16_t>((b->data[kEthHdrLen] & 0xfu) * 4u) & 0x1ffu;
                m->ol_flags |= RTE_MBUF_F_TX_IPV4 | RTE_MBUF_F_TX_IP_CKSUM;
            }
            tx_mbufs_[i] = m;
        }
        std::uint16_t r;
        {
            const MemifBurst guard(memif_burst_);
            r = rte_eth_tx_burst(port_id_, 0, tx_mbufs_.data(), chunk);
        }
        sent = static_cast<std::uint16_t>(sent + r);
        if (r < chunk) {
            inc(PortCounter::tx_ring_full);
            break;
        }
    }
    inc(PortCounter::tx_packets, sent);
    return sent;
}

rte_mbuf* EthPort::linearize(rte_mbuf* m) noexcept {
    if (m->pkt_len > own_room_) {
        inc(PortCounter::rx_oversize_dropped);
        rte_pktmbuf_free(m);
        return nullptr;
    }
    rte_mbuf* c = rte_pktmbuf_alloc(pool_);
    if (!c) {
        inc(PortCounter::rx_nombuf_dropped);
        rte_pktmbuf_free(m);
        return nullptr;
    }
    auto* dst = rte_pktmbuf_mtod(c, std::uint8_t*);
    std::uint32_t off = 0;
    for (const rte_mbuf* s = m; s && off < m->pkt_len; s = s->next) {
        const std::uint32_t k = std::min<std::uint32_t>(s->data_len, m->pkt_len - off);
        std::memcpy(dst + off, rte_pktmbuf_mtod(s, const std::uint8_t*), k);
        off += k;
    }
    c->data_len = static_cast<std::uint16_t>(off);
    c->pkt_len = off;
    rte_pktmbuf_free(m);
    inc(PortCounter::rx_linearized);
    return c;
}

std::uint16_t EthPort::rx_burst(PktBuf** bufs, std::uint16_t n) noexcept {
    const auto want = static_cast<std::uint16_t>(std::min<unsigned>(kMaxBurst, n));
    std::uint16_t got;
    {
        const MemifBurst guard(memif_burst_);
        got = rte_eth_rx_burst(port_id_, 0, rx_mbufs_.data(), want);
    }
    std::uint16_t out = 0;
    for (std::uint16_t i = 0; i < got; ++i) {
        rte_mbuf* m = rx_mbufs_[i];
        if (m->nb_segs != 1 || m->priv_size < sizeof(PktBuf)) {
            m = linearize(m);
            if (!m) continue;
        }
        PktBuf* b = attach(m);
        // ECN from the IP header of untagged frames: 11 = CE (RFC 3168).
        if (b->len >= kEthHdrLen + 20) {
            const std::uint8_t* f = b->data;
            if (f[12] == 0x08 && f[13] == 0x00)
                b->ecn_ce = (f[15] & 3u) == 3u;
            else if (f[12] == 0x86 && f[13] == 0xdd)
                b->ecn_ce = ((f[15] >> 4) & 3u) == 3u;
        }
        bufs[out++] = b;
    }
    inc(PortCounter::rx_packets, out);
    return out;
}

bool EthPort::link_up() const noexcept {
    rte_eth_link link{};
    if (rte_eth_link_get_nowait(port_id_, &link) != 0) return false;
    return link.link_status == RTE_ETH_LINK_UP && kernel_link_up();
}

bool EthPort::kernel_link_up() const noexcept {
    if (ifflags_fd_ < 0) return true;
    // At most one ioctl per millisecond: the engine asks every few hundred passes.
    const std::uint64_t now = rte_get_tsc_cycles();
    if (now < kernel_next_tsc_.load(std::memory_order_relaxed))
        return kernel_up_.load(std::memory_order_relaxed);
    kernel_next_tsc_.store(now + rte_get_tsc_hz() / 1000, std::memory_order_relaxed);
    ifreq ifr{};
    std::memcpy(ifr.ifr_name, kernel_iface_.data(), kernel_iface_.size());
    bool up = true; // an interface that cannot be asked about is left to the PMD's word
    if (::ioctl(ifflags_fd_, SIOCGIFFLAGS, &ifr) == 0)
        up = (ifr.ifr_flags & IFF_UP) != 0 && (ifr.ifr_flags & IFF_RUNNING) != 0;
    kernel_up_.store(up, std::memory_order_relaxed);
    return up;
}

LinkEvent EthPort::poll_link() noexcept {
    if (lsc_interrupt_) {
        if (!lsc_pending_.exchange(false, std::memory_order_acquire)) return LinkEvent::none;
        inc(PortCounter::lsc_events);
    }
    const bool up = link_up();
    if (up == last_link_up_) return LinkEvent::none;
    last_link_up_ = up;
    return up ? LinkEvent::up : LinkEvent::down;
}

static_assert(std::is_same_v<rte_iova_t, std::uint64_t>);
bool EthPort::span_reachable(std::span<const std::uint8_t> s, std::uint64_t* iova) const noexcept {
    const auto a = reinterpret_cast<std::uintptr_t>(s.data());
    *iova = RTE_BAD_IOVA;
    if (s.empty() || s.size() > UINT16_MAX) return false;
    switch (zc_mem_) {
    case ZcMemory::any:
        return true;
    case ZcMemory::region:
        return a >= zc_lo_ && a + s.size() <= zc_hi_;
    case ZcMemory::dpdk:
        *iova = rte_mem_virt2iova(s.data());
        return rte_mem_virt2memseg_list(s.data()) != nullptr && *iova != RTE_BAD_IOVA;
    case ZcMemory::none:
        break;
    }
    return false;
}

bool EthPort::payload_reachable(std::span<const std::span<const std::uint8_t>> payload) noexcept {
    bool ok = !payload.empty() && payload.size() <= kMaxExtSegs;
    rte_iova_t iova;
    for (std::size_t i = 0; i < payload.size() && ok; ++i)
        ok = span_reachable(payload[i], &iova);
    if (!ok) inc(PortCounter::tx_ext_refused);
    return ok;
}

bool EthPort::attach_payload(PktBuf* buf, std::span<const std::span<const std::uint8_t>> payload,
                             std::span<const std::uint8_t> trailer, TxRef* ref) noexcept {
    const auto nspans = static_cast<unsigned>(payload.size());
    if (nspans == 0 || nspans > kMaxExtSegs || trailer.size() > kTrailerRoom || buf->ext_len != 0) {
        inc(PortCounter::tx_ext_refused);
        return false;
    }
    std::array<rte_iova_t, kMaxExtSegs> iova{};
    std::uint32_t ext = 0;
    for (unsigned i = 0; i < nspans; ++i) {
        if (!span_reachable(payload[i], &iova[i])) {
            inc(PortCounter::tx_ext_refused);
            return false;
        }
        ext += static_cast<std::uint32_t>(payload[i].size());
    }
    std::array<rte_mbuf*, kMaxExtSegs + 1> segs{};
    if (rte_pktmbuf_alloc_bulk(seg_pool_, segs.data(), nspans + 1) != 0) {
        inc(PortCounter::tx_ext_refused);
        return false;
    }
    auto* head = static_cast<rte_mbuf*>(buf->driver);
    rte_mbuf* prev = head;
    for (unsigned i = 0; i < nspans; ++i) {
        rte_mbuf* s = segs[i];
        // The shared info lives in the segment's own private area: one per segment, so its free_cb
        // runs exactly once, when this segment is freed, whoever frees it.
        auto* shinfo = static_cast<rte_mbuf_ext_shared_info*>(rte_mbuf_to_priv(s));
        shinfo->free_cb = release_segment;
        shinfo->fcb_opaque = ref;
        rte_mbuf_ext_refcnt_set(shinfo, 1);
        auto* addr = const_cast<std::uint8_t*>(
            payload[i].data()); // read only: the PMD never writes a tx buffer
        rte_pktmbuf_attach_extbuf(s, addr, iova[i], static_cast<std::uint16_t>(payload[i].size()),
                                  shinfo);
        s->data_len = static_cast<std::uint16_t>(payload[i].size());
        prev->next = s;
        prev = s;
    }
    rte_mbuf* t = segs[nspans];
    t->data_off = 0;
    if (!trailer.empty())
        std::memcpy(rte_pktmbuf_mtod(t, std::uint8_t*), trailer.data(), trailer.size());
    t->data_len = static_cast<std::uint16_t>(trailer.size());
    prev->next = t;
    t->next = nullptr;
    head->nb_segs = static_cast<std::uint16_t>(nspans + 2);
    ref->attach(nspans);
    buf->ext_len = ext + static_cast<std::uint32_t>(trailer.size());
    inc(PortCounter::tx_ext_segments, nspans);
    return true;
}

void EthPort::tx_reclaim() noexcept {
    if (!reclaim_by_burst_) {
        const int r = rte_eth_tx_done_cleanup(port_id_, 0, 0);
        if (r != -ENOTSUP) return;
        reclaim_by_burst_ = true; // asked once: this PMD has no cleanup
    }
    const MemifBurst guard(memif_burst_);
    (void)rte_eth_tx_burst(port_id_, 0, tx_mbufs_.data(), 0);
}

bool EthPort::set_tx_ipv4_cksum(bool on) noexcept {
    tx_cksum_mark_ = on && ipv4_cksum_offload_;
    return tx_cksum_mark_;
}

} // namespace droce::dpdk
