/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * Transport counters, named as users know them from `rdma statistic` (rxe hw counters) and mlx5
 * hardware counters. An enum plus an increment helper; one block per QP and one per device. Written
 * only by the engine thread; readers on other threads see a recent value (CounterBlock).
 * Every block a device has is listed in its CounterRegistry (common/counter_registry.h).
 */
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <span>
#include <string_view>

namespace droce {

// The counters every packet or ACK of a busy QP counts come first: a QP's block then costs a
// visit one cache line (rc::qp_prefetch), however many QPs the device has.
// clang-format off
#define DROCE_COUNTERS(X) \
    X(sent_pkts)                   /* packets transmitted */ \
    X(rcvd_pkts)                   /* valid RoCE packets received for a QP */ \
    X(acks_sent)                   /* responder: ACKNOWLEDGE packets sent */ \
    X(acks_rcvd)                   /* requester: ACKNOWLEDGE packets received */ \
    X(out_of_sequence)             /* responder: request PSN ahead of the expected PSN */ \
    X(packet_seq_err)              /* requester: NAK PSN sequence error received */ \
    X(duplicate_request)           /* responder: request PSN behind the expected PSN */ \
    X(seq_naks_sent)               /* responder: NAK PSN sequence error sent */ \
    X(rnr_naks_sent)               /* responder: RNR NAK sent (no receive WQE) */ \
    X(rnr_naks_rcvd)               /* requester: RNR NAK received */ \
    X(rnr_nak_retry_err)           /* requester: rnr_retry exhausted */ \
    X(local_ack_timeout_err)       /* requester: local ACK timer expired */ \
    X(retry_exceeded_err)          /* requester: retry_cnt exhausted */ \
    X(retransmitted_pkts)          /* requester: packets sent again */ \
    X(implied_nak_seq_err)         /* requester: READ/atomic response skipped PSNs: implied NAK */ \
    X(req_remote_access_errors)    /* requester: NAK remote access error received */ \
    X(req_remote_invalid_request)  /* requester: NAK invalid request received */ \
    X(req_remote_operational_error)/* requester: NAK remote operational error received */ \
    X(resp_remote_access_errors)   /* responder: NAK remote access error sent */ \
    X(resp_invalid_request)        /* responder: NAK invalid request sent */ \
    X(resp_local_length_error)     /* responder: message longer than the receive WQE */ \
    X(resp_invalidate_errors)      /* responder: SEND with invalidate of an R_Key no peer may invalidate (IBTA class J) */ \
    X(req_local_length_error)      /* requester: READ response longer than requested */ \
    X(local_protection_err)        /* requester: an SGE failed the lkey check */ \
    X(completer_retry_err)         /* requester: response that matches no outstanding WQE, dropped */ \
    X(rx_dropped_bad_qp)           /* receive: no QP with this dest QPN, or QP in a state that drops */ \
    X(rx_dropped_bad_icrc)         /* receive: ICRC mismatch, dropped silently */ \
    X(rx_dropped_malformed)        /* receive: frame rejected by the parser for another reason */ \
    X(rx_dropped_dst_mac)          /* receive: destination MAC not the port's, nor a group MAC for ARP / ND */ \
    X(rx_dropped_dst_ip)           /* receive: RoCE frame to an IP that is none of the device's GIDs */ \
    X(rx_dropped_port_down)        /* receive: RoCE frame for a QP on a port administratively down (set_port_admin): a pulled cable hears nothing */ \
    X(rx_dropped_bad_pkey)         /* receive: BTH P_Key not the default partition's (0x7FFF in its low 15 bits), as rxe's check_keys */ \
    X(tx_no_buffer)                /* transmit deferred: no buffer or the port queue was full */ \
    X(tx_dropped_too_long)         /* a staged packet whose frame does not fit the port's buffers */ \
    X(tx_wait_neigh)               /* transmit deferred: the peer's MAC is not resolved yet (ARP / ND) */ \
    X(tx_zc_pkts)                  /* packets whose payload went by reference (zero-copy transmit) */ \
    X(tx_zc_copied)                /* packets meant to go by reference but copied (no segment buffer, memory the PMD cannot reach) */ \
    X(tx_streamed_pkts)            /* short frames written with streaming stores (a port whose buffers another core reads: memif zero-copy) */ \
    X(neigh_tx)                    /* ARP / ND requests and replies sent by the engine */ \
    X(loopback_pkts)               /* packets to a QP of the same device, passed through the loopback queue */ \
    X(ep_probes_sent)              /* EV probes (MRC_PROBE to QP1) sent by send_ep_probe */ \
    X(ep_probe_replies_sent)       /* MRC_PROBE_REPLY sent in answer to a peer's EV probe */ \
    X(ep_probe_replies_rcvd)       /* MRC_PROBE_REPLY to QP1 received and queued for take_ep_replies */ \
    X(ep_probe_replies_dropped)    /* MRC_PROBE_REPLY to QP1 dropped: the reply ring was full */ \
    X(ep_dropped_bad_version)      /* MRC_PROBE / MRC_PROBE_REPLY to QP1 with a PETH version droce does not know */ \
    X(ep_dropped_port_down)        /* MRC_PROBE / MRC_PROBE_REPLY to QP1 on a port administratively down (set_port_admin): not answered */ \
    X(ep_dropped_bad_source)       /* MRC_PROBE from no single host (group source MAC; unspecified, multicast, broadcast, loopback or own source IP): not answered */ \
    X(ep_probes_rate_limited)      /* MRC_PROBE not answered: more than Device::kEpReplyBurst at once or kEpReplyRate a second */ \
    X(link_downed)                 /* a port's link went down (mlx5 link_downed) */ \
    X(link_upped)                  /* a port's link came (back) up */ \
    X(flushed_wqes)                /* WQEs completed with WR_FLUSH_ERR */ \
    X(np_ecn_marked_roce_packets)  /* DCQCN NP: ECN-CE marked RoCE packets received */ \
    X(np_cnp_sent)                 /* DCQCN NP: CNPs sent */ \
    X(rp_cnp_handled)              /* DCQCN RP: CNPs that reduced the QP's rate */ \
    X(rp_cnp_ignored)              /* DCQCN RP: CNPs with DCQCN off or within the monitor period */ \
    X(rp_current_rate_mbps)        /* DCQCN / pacer: the QP's rate now, Mb/s (a gauge; summed per device) */
// clang-format on

enum class Counter : std::uint16_t {
#define DROCE_COUNTER_ENUM(name) name,
    DROCE_COUNTERS(DROCE_COUNTER_ENUM)
#undef DROCE_COUNTER_ENUM
        count_
};

inline constexpr std::size_t kNumCounters = static_cast<std::size_t>(Counter::count_);

inline constexpr std::string_view kCounterNames[kNumCounters] = {
#define DROCE_COUNTER_NAME(name) #name,
    DROCE_COUNTERS(DROCE_COUNTER_NAME)
#undef DROCE_COUNTER_NAME
};

[[nodiscard]] constexpr std::string_view to_string(Counter c) noexcept {
    return static_cast<std::size_t>(c) < kNumCounters ? kCounterNames[static_cast<std::size_t>(c)]
                                                      : "unknown";
}

/** Plain values of a counter block at one moment (sums, differences, reports). */
template <typename Enum, std::size_t N>
struct CounterValues {
    std::array<std::uint64_t, N> v{};
    [[nodiscard]] std::uint64_t operator[](Enum c) const noexcept {
        return v[static_cast<std::size_t>(c)];
    }
};

/**
 * The counter facility: a block of N counters named by an X-macro enum. One writer (the engine
 * thread that owns the object) increments with a relaxed load and store, no locked instruction;
 * any other thread may read a recent value at any time (relaxed atomic loads: a telemetry thread,
 * droce-perf's report). Counting an event in two blocks is a bug: each event has one owner (the
 * QP's block when a QP is known, the device's otherwise).
 */
template <typename Enum, std::size_t N>
struct CounterBlock {
    std::array<std::atomic<std::uint64_t>, N> v{};

    CounterBlock() = default;
    /** Copies the values (control path: a block that owns its counters moves, e.g. in a vector). */
    CounterBlock(const CounterBlock& o) noexcept { *this = o; }
    CounterBlock& operator=(const CounterBlock& o) noexcept {
        for (std::size_t i = 0; i < N; ++i)
            v[i].store(o.v[i].load(std::memory_order_relaxed), std::memory_order_relaxed);
        return *this;
    }

    /** Sets a gauge (a value, not a count). */
    void set(Enum c, std::uint64_t value) noexcept {
        v[static_cast<std::size_t>(c)].store(value, std::memory_order_relaxed);
    }
    void inc(Enum c, std::uint64_t n = 1) noexcept {
        std::atomic<std::uint64_t>& a = v[static_cast<std::size_t>(c)];
        a.store(a.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
    }
    [[nodiscard]] std::uint64_t operator[](Enum c) const noexcept {
        return v[static_cast<std::size_t>(c)].load(std::memory_order_relaxed);
    }
    [[nodiscard]] CounterValues<Enum, N> snapshot() const noexcept {
        CounterValues<Enum, N> out;
        for (std::size_t i = 0; i < N; ++i)
            out.v[i] = v[i].load(std::memory_order_relaxed);
        return out;
    }
    /** The block as raw cells, for the registry. */
    [[nodiscard]] std::span<const std::atomic<std::uint64_t>> cells() const noexcept { return v; }
};

/** The transport and engine counters of one QP or one device. */
using Counters = CounterBlock<Counter, kNumCounters>;
/** Their values at one moment. */
using CounterSnapshot = CounterValues<Counter, kNumCounters>;

} // namespace droce
