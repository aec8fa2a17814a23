/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * droce-perf's measurements: one Endpoint (PD, CQs, QPs, one registered buffer) per side, connected
 * to the peer's, and the client / server loops for WRITE, READ, SEND and FETCH_ADD bandwidth and
 * latency with optional byte-by-byte verification.
 *
 * Buffer layout (both sides alike): QP q owns `slots` slots of `slot_bytes` bytes, slot s of QP q
 * at offset (q * slots + s) * slot_bytes. Message k of QP q uses slot k % slots on both sides. Data
 * pattern: byte i of message k of QP q is pattern(q, k, i); with --verify the sender writes it
 * before each message and the receiver (server for WRITE/SEND, client for READ) checks every byte.
 * READ sources hold pattern(q, s, i) for slot s. FETCH_ADD adds 1 to an 8-byte counter per QP (slot
 * 0 of the QP on the server): message k must return k and the counter must end at the message
 * count.
 *
 * Latency: WRITE is a ping-pong on memory (each side writes the peer's slot 0 and spins on the last
 * byte of its own, which changes every iteration); SEND is a send/recv ping-pong; both report half
 * the round trip. READ and FETCH_ADD report the completion time of each operation (a full round
 * trip).
 *
 * Thread rules: an Endpoint is created, connected and destroyed while the device's engine is
 * stopped (Device control calls); run_client / run_server then run on one application thread each
 * while the engine polls — an engine thread, or, with Params::inline_progress, the application
 * thread itself: then every wait in run_client / run_server polls the device (Device::poll()), the
 * blocking out-of-band receives included (they wait for the socket while polling), so that a side
 * that only waits (a WRITE bandwidth server) still answers its peer. Nothing is in flight before
 * run_client / run_server (the handshake and the barrier may block without polling); after them the
 * caller keeps polling a little (ACKs of the last messages) before it destroys the endpoint.
 */
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "channel.h"
#include "common/counters.h"
#include "config/config.h"
#include "engine/device.h"
#include "mrc/mrc.h"

namespace droce {
class Runtime;
}

namespace droce::perf {

enum class Op : std::uint8_t { write, read, send, atomic };
enum class Mode : std::uint8_t { bw, lat };
[[nodiscard]] const char* to_string(Op op) noexcept;
[[nodiscard]] const char* to_string(Mode m) noexcept;

inline constexpr std::uint32_t kMaxQps = 64;
inline constexpr std::uint64_t kMaxBufferBytes = 256ull << 20; ///< per side, all QPs
/** Planes (device ports) an MRC QP sprays over, at most (Device: 1..4 ports). */
inline constexpr unsigned kMaxPlanes = 4;
/** --plane-down / --plane-up events per run, at most. */
inline constexpr unsigned kMaxPlaneEvents = 16;

/** A plane taken out or given back during a run (--plane-down K@S, --plane-up K@S): at at_s
 *  seconds into the run the client calls Device::set_port_admin(plane, up) on its device. */
struct PlaneEvent {
    double at_s = 0;
    std::uint8_t plane = 0; ///< 0-based port of the device
    bool up = false;
};

/** What to measure; the client sends it to the server, which adopts it. Plain data. */
struct Params {
    Op op = Op::write;
    Mode mode = Mode::bw;
    std::uint32_t size = 65536;   ///< bytes per message (atomic: 8)
    std::uint64_t iters = 1000;   ///< messages per QP (when duration_s == 0)
    double duration_s = 0;        ///< run for this long instead (seconds), 0 = use iters
    std::uint32_t qps = 1;        ///< 1..kMaxQps
    std::uint32_t path_mtu = 0;   ///< bytes, 0 = the config's [qp] path_mtu (capped by the port)
    std::uint32_t tx_depth = 128; ///< outstanding messages per QP (bw)
    std::uint8_t timeout = 0xff;  ///< QP local ACK timeout code, 0xff = the config's
    /** Gb/s each port is shaped to on this side (the runtime's tx_shaper), 0 = not shaped: an
     *  MRC QP's default ACK timeout then covers the queue a shaped plane can hold (mrc_attr). */
    double plane_rate_gbps = 0;
    bool verify = false;
    bool progress = false; ///< print a line per second (duration runs)
    bool json = false;     ///< progress lines to stderr (stdout carries the JSON)
    /**
     * This side's engine runs inline: the application thread calls Device::poll() in every wait of
     * the run (completions, memory changes, the out-of-band end-of-run messages) and no engine
     * thread runs. One busy thread per process instead of two. Per side (the server keeps its own).
     */
    bool inline_progress = false;
    /**
     * MRC QPs (lib/mrc: one QP sprayed over every plane) instead of RC. RDMA WRITE only; a WRITE
     * latency run uses WRITE with immediate (the receiver waits for the immediate, which completes
     * once the whole message is placed: multipath placement may write a message's last byte before
     * the bytes ahead of it, so spinning on it would not do).
     */
    bool mrc = false;
    /** MRC: planes used, the device's first N ports (1..kMaxPlanes); the rest are set
     *  administratively down for the run on both sides. Resolved by the client (0 = all ports). */
    std::uint8_t planes = 0;
    std::uint8_t num_events = 0;             ///< events[0..num_events), by time (client)
    PlaneEvent events[kMaxPlaneEvents] = {}; ///< plane down / up during the run (client)
};

/**
 * One QP's connection data, exchanged out of band. Version 2 appended the GID of every port of
 * the sender's device (one per plane, for MRC's Device::set_remote_planes); gid stays port 0's.
 */
struct QpInfo {
    std::uint32_t qpn = 0;
    std::uint32_t psn = 0;
    std::uint8_t gid[16] = {}; ///< port 0 (plane 0)
    std::uint32_t rkey = 0;
    std::uint64_t va = 0;
    std::uint64_t len = 0;
    std::uint8_t num_planes = 0;                 ///< ports of the sender's device
    std::uint8_t plane_gid[kMaxPlanes][16] = {}; ///< GID of port p; plane_gid[0] == gid
};

/** Traffic of one plane during a run (MRC: mrc::plane_stats summed over this side's QPs). */
struct PlaneFigures {
    std::uint64_t tx_bytes = 0; ///< payload of data packets sent, retransmissions included
    std::uint64_t tx_pkts = 0;
    std::uint64_t retransmits = 0; ///< sent again on this plane (whichever plane lost them)
    std::uint64_t losses = 0;      ///< sent on this plane and declared lost (PlaneStats::losses)
    std::uint64_t rx_bytes = 0;    ///< payload of data packets received
    std::uint64_t rx_pkts = 0;
    double tx_gbps = 0; ///< tx_bytes over the run's time
    double rx_gbps = 0;
};

/** The run between two plane events (MRC client): what each plane carried. */
struct Phase {
    double from_s = 0, to_s = 0;
    std::string after;              ///< "start", or the event that began it: "plane 2 down"
    std::vector<double> plane_gbps; ///< per plane, from plane_stats tx_bytes
    double gbps = 0;                ///< completed messages (goodput)
};

/** One progress line (--progress, -D): the second before at_s. */
struct Sample {
    double at_s = 0;
    double gbps = 0;                ///< completed messages
    std::vector<double> plane_gbps; ///< MRC: what each plane sent (plane_stats tx_bytes)
};

/** A plane event as it was applied. */
struct AppliedEvent {
    PlaneEvent ev;
    double at_s = 0; ///< when it was applied (seconds into the run)
    int err = 0;     ///< set_port_admin's result
    /** Not droce-perf's: the engine saw the plane's port go down or come back (a cable pulled,
     *  the peer's interface gone, droce-mrcctl or the OCP MRC API setting its admin state;
     *  Device::ports_up_mask), at at_s: when droce-perf's loop first saw the engine's link check
     *  (every 256 passes) show it. */
    bool seen = false;
};

/** Results of one run on one side. */
struct Result {
    bool ok = false;                 ///< every operation completed successfully
    std::string error;               ///< why not
    bool verify = false;             ///< data was checked
    bool verified = false;           ///< this side's checks passed (true when nothing to check)
    bool peer_verified = false;      ///< the other side's checks passed
    std::uint64_t verify_errors = 0; ///< bytes / results that differed (both sides)
    std::uint64_t messages = 0;      ///< all QPs
    std::uint64_t bytes = 0;
    double seconds = 0;
    double bw_peak_gbps = 0, bw_avg_gbps = 0, msg_rate_mpps = 0;
    // latency, microseconds
    double t_min = 0, t_max = 0, t_typical = 0, t_avg = 0, t_stdev = 0, t_p99 = 0, t_p999 = 0;
    CounterSnapshot counters;     ///< engine counters of this side's device during the run
    std::uint64_t error_cqes = 0; ///< completions with an error status
    // MRC
    std::vector<PlaneFigures> planes; ///< per plane used, this side's QPs
    std::vector<Phase> phases;        ///< client: between plane events
    std::vector<AppliedEvent> events; ///< client: plane events applied
    std::vector<Sample> samples;      ///< client, bandwidth: the progress lines
    std::vector<std::pair<std::string, std::uint64_t>>
        mrc; ///< MRC counters of this side's QPs, summed (every counter)
    std::vector<std::pair<std::string, std::uint64_t>>
        impair; ///< impairment stage counters (delta)
};

/** The resources of one side. */
class Endpoint {
  public:
    /**
     * Creates PD, CQs, @p p.qps QPs in RESET and the buffer; the device's engine must be stopped.
     * @return nullptr with *err set on failure.
     */
    [[nodiscard]] static std::unique_ptr<Endpoint> create(Device& dev, const Params& p, bool server,
                                                          std::string* err);
    /** Destroys QPs, CQs, MR, PD (engine stopped); MRC: sets every port administratively up. */
    ~Endpoint();
    Endpoint(const Endpoint&) = delete;
    Endpoint& operator=(const Endpoint&) = delete;

    /** This side's data for QP @p q (its PSN, GIDs of the ports, rkey, buffer). */
    [[nodiscard]] QpInfo info(unsigned q) const noexcept;
    /**
     * Moves every QP through INIT → RTR → RTS towards the peer's QPs (@p peer[q]); the peer's MAC
     * is left to the engine's neighbour resolution (static neighbour or ARP). Posts the receive
     * WQEs a SEND run (or an MRC WRITE latency run) needs. MRC: gives each QP the peer's GID per
     * plane (Device::set_remote_planes) and sets the ports beyond Params::planes administratively
     * down (given back by the destructor). Engine stopped. @return empty or the reason.
     */
    [[nodiscard]] std::string connect(const std::vector<QpInfo>& peer, const QpDefaults& defaults,
                                      std::uint32_t port_path_mtu);

    [[nodiscard]] Device& device() noexcept { return dev_; }
    [[nodiscard]] const Params& params() const noexcept { return p_; }
    [[nodiscard]] std::uint32_t path_mtu() const noexcept { return path_mtu_; }
    [[nodiscard]] std::uint32_t slots() const noexcept { return slots_; }

    // Used by the loops (perf.cc).
    Device& dev_;
    Params p_;
    bool server_ = false;
    mem::Pd* pd_ = nullptr;
    rc::Cq* scq_ = nullptr;
    rc::Cq* rcq_ = nullptr;
    std::vector<rc::Qp*> qps_;
    std::vector<std::uint32_t> psn_;
    std::vector<QpInfo> peer_;
    std::uint8_t* buf_ = nullptr; ///< 4 KiB aligned
    bool buf_dpdk_ = false;       ///< buf_ is rte_malloc'd (hugepage EAL), else aligned_alloc
    std::uint64_t buf_len_ = 0;
    mem::Mr* mr_ = nullptr;
    std::uint32_t slot_bytes_ = 0;
    std::uint32_t slots_ = 0;
    std::uint32_t path_mtu_ = 0;

    [[nodiscard]] std::uint8_t* slot(unsigned q, std::uint64_t s) const noexcept {
        return buf_ + (static_cast<std::uint64_t>(q) * slots_ + s) * slot_bytes_;
    }
    [[nodiscard]] std::uint64_t remote_slot(unsigned q, std::uint64_t s) const noexcept {
        return peer_[q].va + (static_cast<std::uint64_t>(q) * slots_ + s) * slot_bytes_;
    }

  private:
    Endpoint(Device& dev, const Params& p, bool server) : dev_(dev), p_(p), server_(server) {}
};

/** The MRC attributes droce-perf gives its QPs on a device of @p ports ports whose QPs send
 *  frames of up to @p path_mtu payload bytes (real-time runs; see perf.cc). */
[[nodiscard]] mrc::MrcAttr mrc_attr(const Params& p, unsigned ports,
                                    std::uint32_t path_mtu = 4096) noexcept;

/**
 * MRC: per-plane traffic and the MRC counters of @p ep's QPs into @p r (planes, mrc), with plane
 * rates over r.seconds. Any thread, engine running or not (relaxed atomics).
 */
void collect_mrc(const Endpoint& ep, Result& r);

/** Byte @p i of message @p k of QP @p q. */
[[nodiscard]] inline std::uint8_t pattern(unsigned q, std::uint64_t k, std::uint64_t i) noexcept {
    return static_cast<std::uint8_t>(k * 131u + i * 7u + q * 29u + 1u + (i >> 8) * 3u);
}

/**
 * Runs the client side over a connected endpoint whose engine runs; @p ch talks to the server side.
 * Sends the end-of-run message, waits for the server's verdict.
 */
[[nodiscard]] Result run_client(Endpoint& ep, const Channel& ch);
/** Runs the server side until the client's end-of-run message; sends the verdict. */
[[nodiscard]] Result run_server(Endpoint& ep, const Channel& ch);

/**
 * The out-of-band handshake before a run, as perftest does it over TCP. Client: sends the params,
 * creates its endpoint, exchanges QP information, connects. Server: receives the params (into
 * *p), creates its endpoint, exchanges, connects. Engines must be stopped; the caller starts them
 * and then calls barrier().
 */
[[nodiscard]] std::unique_ptr<Endpoint> handshake_client(Device& dev, const Params& p,
                                                         const QpDefaults& defaults,
                                                         std::uint32_t port_path_mtu,
                                                         const Channel& ch, std::string* err);
[[nodiscard]] std::unique_ptr<Endpoint> handshake_server(Device& dev, Params* p,
                                                         const QpDefaults& defaults,
                                                         std::uint32_t port_path_mtu,
                                                         const Channel& ch, std::string* err);
/**
 * Inline progress: polls @p dev (Device::poll()) for @p ns nanoseconds, yielding the CPU after 256
 * idle passes in a row. The caller is the device's only engine (no engine thread runs).
 */
void poll_for(Device& dev, std::uint64_t ns);
/**
 * Waits until the engine of @p dev shows the links of ports 0 .. @p planes - 1 up
 * (Device::ports_up_mask), at most @p timeout_ns; with @p inline_progress this thread polls the
 * device meanwhile, else an engine thread must be running. A memif pair connects in the
 * background and the engine looks at its links every 256 passes: a run started before that would
 * report a plane coming up as an event of the run. @return the planes still down (bit p), 0 when
 * all are up.
 */
std::uint8_t wait_planes_up(Device& dev, unsigned planes, bool inline_progress,
                            std::uint64_t timeout_ns);

/** Both sides call it after starting their engines: returns when the peer is ready too. */
[[nodiscard]] std::string barrier(const Channel& ch, int timeout_ms);

/**
 * Server, at the end: waits for the client to go (its end of the out-of-band connection @p ch
 * closes when it exits, up to 10 s) and then for the memif links of device 0 of @p rt to go down
 * (up to 2 s), before the ports are torn down. DPDK 22.11's net_memif handles a peer's disconnect
 * on the EAL interrupt thread; when that ran while this thread closed the ports, the server
 * crashed in it now and then (seen with four memif interfaces on one socket, every few runs). The
 * client needs no wait: the server is still up while the client tears down. Control path, engines
 * stopped or running; blocks up to about 12 s.
 */
void wait_for_client_exit(Runtime& rt, const Channel& ch);

} // namespace droce::perf
