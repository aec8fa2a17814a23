/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * droce-burnin: the readiness check of a four-plane host against a peer (another host, or another
 * process on this one), over the device's ports (the planes) and a TCP side channel.
 *
 * Checks, in order (README.md gives the thresholds and the output):
 *  1. cabling: each local port reaches the peer's port of the same plane and only that one. From
 *     every local port k an MRC_PROBE goes to the GID of every peer plane j, with j's MAC. The peer
 *     engine's receive filter accepts a frame only for the MAC of the port it arrived on
 *     (rx_dropped_dst_mac otherwise, lib/engine/receive.cc), so exactly the plane whose port sits
 *     at the other end of k's cable answers, and its reply comes back by the same cable. Which
 *     peer plane answers on which local port is the cabling; a swap or a cross is named.
 *  2. routable: each plane end to end, N MRC_PROBEs from port p to the peer's GID of plane p:
 *     answered share and RTT min / avg / max.
 *  3. bandwidth, all planes: one MRC QP sprayed over every plane, RDMA WRITE for a few seconds
 *     (droce-perf's run, apps/droce-perf/perf.h), against planes x the expected per-plane rate.
 *  4. bandwidth, one plane out: the same with plane k administratively down (Device::
 *     set_port_admin) for each k in turn: the three others carry about three quarters of the
 *     all-planes figure, plane k nothing.
 *
 * Identity: over the side channel each side declares its device name and, per port, GID, MAC and
 * link state (Identity). The client installs the peer's MACs as static neighbours, so that a probe
 * is never held up by neighbour resolution sent down a miscabled port (the burn-in checks cables
 * and paths, not ARP / ND). The probes are real frames through both engines' ports; nothing in the
 * engine changes, and its limits on probes (answered at Device::kEpReplyRate at most, none from
 * group or own addresses, none on an administratively down port) stay as they are.
 *
 * Thread rules: everything here runs on the application thread of one side, on device 0 of the
 * Runtime. Probing needs the engine running (Runtime::start_engines); the bandwidth runs stop and
 * start it around their set-up (Endpoint creation is a control-path operation done with the engine
 * stopped). Control path: nothing here is on the datapath.
 */
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../droce-perf/channel.h"
#include "../droce-perf/perf.h"
#include "engine/device.h"
#include "runtime/runtime.h"

namespace droce::burnin {

using perf::Channel;

/** Planes checked, at most (a device has 1..4 ports). */
inline constexpr unsigned kMaxPlanes = perf::kMaxPlanes;

enum class Status : std::uint8_t { pass, fail, skip };
/** "PASS", "FAIL", "SKIP". */
[[nodiscard]] const char* to_string(Status s) noexcept;

/** Run lengths and thresholds (the CLI's options; defaults as documented in README.md). */
struct Options {
    /** Expected rate of one plane in Gb/s (> 0): a link of that speed. */
    double plane_gbps = 0;
    /**
     * Share of a link's bits that can be payload (payload_share()): the headers of each MRC WRITE
     * packet take the rest. Set by run_client from the path MTU; 1 = count no headers.
     */
    double payload_share = 1;
    /** bandwidth_all passes at goodput >= min_fraction x planes x plane_gbps x payload_share
     *  (the expected goodput); a plane-out run needs the same of planes - 1. */
    double min_fraction = 0.85;
    /** A plane-out run's goodput over the all-planes run's: within [out_low, out_high]. */
    double out_low = 0.65, out_high = 0.85;
    unsigned probes = 20;          ///< routable: MRC_PROBEs per plane (1..4096)
    double min_answered = 0.9;     ///< routable: share of them answered to pass
    double max_rtt_ms = 0;         ///< routable: largest RTT allowed, ms; 0 = no limit
    unsigned cabling_rounds = 3;   ///< cabling: probes per (local port, peer plane) pair
    double probe_timeout_ms = 250; ///< how long a probe's reply is waited for, ms
    double link_wait_s = 5;        ///< wait for the ports' links before probing, s
    double duration_s = 2;         ///< each bandwidth run, s
    std::uint32_t size = 65536;    ///< bytes per RDMA WRITE
    std::uint32_t tx_depth = 64;   ///< WRITEs in flight per QP
    /** MRC QPs of the bandwidth runs (1..perf::kMaxQps): each may have droce-perf's 128 packets
     *  in flight (perf.cc mrc_attr), so on a host whose threads wait milliseconds for a CPU one
     *  QP's window, not the planes, can bound the run. */
    std::uint32_t qps = 1;
    bool verify = false; ///< check every byte of the bandwidth runs (costs CPU)
    /** A bandwidth run fails a plane that lost more than this share of the packets it carried
     *  (mrc::PlaneStats::losses over tx_pkts, 0..1) and stands out from the others
     *  (kLossStandsOut): a bad cable or optic drops on one plane while MRC repairs on the others,
     *  so goodput alone can hide it. */
    double max_plane_loss = 0.001;
};

/**
 * The share of a link's time an MRC RDMA WRITE of full packets spends on payload: path_mtu over
 * path_mtu plus one packet's headers (Ethernet, IPv4 or IPv6, UDP, BTH, RETH and MDETH, ICRC) and
 * the 24 bytes of preamble, inter-frame gap and FCS a wire adds (what TxShaper counts too). At a
 * 1024-byte path MTU over IPv4 it is 1024 / 1138 = 0.90. @p path_mtu in bytes (256..4096).
 */
[[nodiscard]] double payload_share(std::uint32_t path_mtu, bool ipv6) noexcept;

// ---- identity (side channel) ----------------------------------------------------------------

/** One port as its side declares it. Plain data, sent as is (same binary on both ends). */
struct PortIdentity {
    std::uint8_t gid[16] = {};
    std::uint8_t mac[6] = {};
    std::uint8_t link_up = 0;
    std::uint8_t admin_up = 0;
    std::uint32_t line_rate_mbps = 0; ///< the config's line_rate_gbps x 1000, 0 = not given
};

/** A side's device: name and ports (planes). */
struct Identity {
    std::uint32_t magic = 0;
    std::uint32_t version = 0;
    char device[48] = {};
    std::uint32_t num_ports = 0; ///< ports described (at most kMaxPlanes)
    PortIdentity port[kMaxPlanes] = {};
};

/**
 * The identity of device 0 of @p rt: name, GID, MAC, link and administrative state of each port
 * (the link read inside a ControlSection, as send_ep_probe does). Engine running or stopped.
 */
[[nodiscard]] Identity identity_of(Runtime& rt);

/** "10.1.2.1" for an IPv4-mapped GID, else the IPv6 text. */
[[nodiscard]] std::string gid_text(const std::uint8_t (&gid)[16]);
/** "02:00:00:00:0c:01". */
[[nodiscard]] std::string mac_text(const std::uint8_t (&mac)[6]);

// ---- 1. cabling ----------------------------------------------------------------------------

/** What the cabling probes found: for each local port, which peer planes answered on it. */
struct CablingInput {
    unsigned planes = 0;      ///< local ports checked (min(ports, kMaxPlanes))
    unsigned peer_planes = 0; ///< the peer's ports
    /** Bit j of reached[k]: the peer's plane j answered a probe sent from local port k. */
    std::array<std::uint8_t, kMaxPlanes> reached{};
    std::array<bool, kMaxPlanes> link_up{}; ///< local port k's link when probed
};

/** One local port's cabling. */
struct PortCabling {
    unsigned port = 0;
    std::vector<unsigned> reaches; ///< peer planes that answered on it, ascending
    bool link_up = false;
    bool ok = false; ///< reaches == {port}
};

struct CablingResult {
    Status status = Status::fail;
    std::vector<PortCabling> ports;
    /** One sentence per problem, naming the ports and planes ("local port 1 reaches the peer's
     *  plane 2 and port 2 reaches plane 1: cables of planes 1 and 2 swapped"); empty on PASS. */
    std::vector<std::string> findings;
    /** Some port reaches a plane other than its own: MRC packets of those planes would be dropped
     *  by the peer's MAC filter, so the bandwidth runs are skipped. */
    bool miswired = false;
    std::uint64_t probes_sent = 0, replies = 0;
};

/**
 * Judges the cabling from what the probes found: PASS when every local port k reached exactly the
 * peer's plane k. Pure function (no I/O): planes are 0-based, as everywhere in droce.
 */
[[nodiscard]] CablingResult judge_cabling(const CablingInput& in);

// ---- 2. routable ---------------------------------------------------------------------------

struct PlaneRoute {
    unsigned plane = 0;
    Status status = Status::fail;
    unsigned sent = 0, answered = 0;
    double rtt_min_us = 0, rtt_avg_us = 0, rtt_max_us = 0; ///< of the answered probes
    std::string why; ///< empty on PASS: "link down", "3 of 20 answered", "send_ep_probe: ..."
};

struct RoutableResult {
    Status status = Status::fail;
    std::vector<PlaneRoute> planes;
};

// ---- probing (both checks) -----------------------------------------------------------------

/**
 * Sends MRC_PROBEs from device 0 of the client and collects the replies (Device::send_ep_probe,
 * take_ep_replies). Each probe carries its own req_id and the run's nonce; a reply is matched on
 * both, so a late reply of an earlier batch is never counted for a later one. The caller must be
 * the only consumer of the device's EV probe replies. Engine running.
 */
class Prober {
  public:
    /** @p peer: the peer's identity (its GIDs, one per plane). */
    Prober(Device& dev, const Identity& peer);

    /** One probe: from local port @p port to the peer's plane @p plane. */
    struct Spec {
        unsigned port = 0;
        unsigned plane = 0;
    };
    struct Outcome {
        bool sent = false;
        int err = 0; ///< send_ep_probe's error when not sent (ENETDOWN, EHOSTUNREACH, ...)
        bool answered = false;
        unsigned reply_port = 0; ///< local port the reply came in by
        std::uint64_t rtt_ns = 0;
    };
    /**
     * Sends every probe of @p specs (EAGAIN and ENOBUFS retried until the deadline) and waits up
     * to @p timeout_ms after the last one went for their replies. Blocks; sleeps between looks.
     */
    [[nodiscard]] std::vector<Outcome> batch(const std::vector<Spec>& specs, double timeout_ms);

    [[nodiscard]] std::uint64_t sent() const noexcept { return sent_; }
    [[nodiscard]] std::uint64_t replies() const noexcept { return replies_; }

  private:
    Device& dev_;
    std::vector<wire::Ipv6Addr> peer_gid_;
    std::uint32_t nonce_ = 0;
    std::uint16_t next_req_ = 1;
    std::uint64_t sent_ = 0, replies_ = 0;
};

/** The cabling check: Options::cabling_rounds probes from every local port to every peer plane. */
[[nodiscard]] CablingResult check_cabling(Prober& pr, const Identity& local, const Identity& peer,
                                          const Options& o);
/** The routable check: Options::probes probes per plane, from port p to the peer's plane p. */
[[nodiscard]] RoutableResult check_routable(Prober& pr, const Identity& local, const Identity& peer,
                                            const Options& o);

// ---- 3., 4. bandwidth ----------------------------------------------------------------------

/** One MRC bandwidth run: all planes (plane_out < 0) or plane plane_out administratively down. */
struct BandwidthRun {
    int plane_out = -1;
    Status status = Status::skip;
    std::string why;          ///< why it failed or was skipped, empty on PASS
    double link_gbps = 0;     ///< planes carrying x plane_gbps
    double expected_gbps = 0; ///< link_gbps x payload_share: the goodput a full link gives
    double gbps = 0;          ///< goodput: completed WRITEs over the run
    double ratio = 0;         ///< gbps / expected_gbps
    double ratio_to_all = 0;  ///< plane-out runs: gbps / all_gbps
    /** Plane-out runs: the all-planes figure they are compared with, the higher of the run
     *  before them and the one after (judge_plane_out_runs). */
    double all_gbps = 0;
    /** The all-planes run made again after the plane-out runs (Report::all_again). */
    bool again = false;
    double seconds = 0;
    std::vector<double> plane_gbps;           ///< what each plane sent (payload, retransmissions)
    std::vector<std::uint64_t> plane_bytes;   ///< bytes each plane sent (client)
    std::vector<std::uint64_t> peer_rx_bytes; ///< bytes each plane delivered to the peer
    std::uint64_t retransmits = 0;
    std::vector<std::uint64_t> plane_pkts;   ///< packets each plane sent (client)
    std::vector<std::uint64_t> plane_losses; ///< of them, declared lost (mrc::PlaneStats::losses)
    /** Data packets (every copy) each plane delivered to the peer, as its responder counted them
     *  (mrc::PlaneStats::rx_pkts). */
    std::vector<std::uint64_t> peer_rx_pkts;
    /** plane_pkts - peer_rx_pkts per plane: what the plane lost on its way. RACK also declares
     *  packets lost that were only late (an engine that waited for a CPU); those arrive, and
     *  their resends arrive on another plane, so they are not counted here. */
    std::vector<std::uint64_t> plane_wire_losses;
    std::uint64_t error_cqes = 0;
    bool verified = false; ///< with Options::verify: every byte right on the peer
    /** The MRC counters of the client's QPs that are not zero (retransmissions by cause, SACKs,
     *  port status sent ...), as droce-perf reports them. */
    std::vector<std::pair<std::string, std::uint64_t>> mrc_counters;
};

/**
 * Client: one bandwidth run with the peer, over @p ch (the peer runs serve()). Stops the engine
 * for the set-up (droce-perf's handshake_client), takes plane @p plane_out down when >= 0,
 * starts the engine, runs droce-perf's MRC WRITE bandwidth loop for Options::duration_s, stops it,
 * collects the per-plane figures, gets the peer's received bytes, and starts the engine again
 * (every port given back). Judging is the caller's (judge_bandwidth). @return the figures; a
 * failed run has status FAIL and why set (the side channel may then be out of step: stop).
 */
[[nodiscard]] BandwidthRun run_bandwidth(Runtime& rt, const Channel& ch, const Options& o,
                                         unsigned planes, int plane_out, bool* channel_ok);

/** A plane's loss share must exceed this many times the median of the other planes' to be
 *  named (judge_bandwidth), besides Options::max_plane_loss. */
inline constexpr double kLossStandsOut = 4.0;

/**
 * Sets status / why / ratios of @p run against the expectations of @p o; @p all is the
 * all-planes run (for a plane-out run), nullptr for the all-planes run itself. Fails the run when
 * it is below Options::min_fraction, had error completions or wrong data, a plane that is up
 * carried nothing, the plane out carried something, the plane-out ratio is outside
 * out_low..out_high, or a plane lost more than Options::max_plane_loss of its packets and more
 * than kLossStandsOut times the other planes' median share (each named in why).
 */
void judge_bandwidth(BandwidthRun& run, const BandwidthRun* all, const Options& o, unsigned planes);

/** The two all-planes runs agree when the lower is at least this share of the higher; otherwise
 *  the host's throughput moved during the burn-in (judge_plane_out_runs says so). */
inline constexpr double kSteadyShare = 0.8;

struct Report;
/**
 * Judges @p rep's plane-out runs (judge_bandwidth) against the higher figure of its two
 * all-planes runs, the one before them and the one after (Report::all, all_again): a host that
 * was busy with something else during one of them no longer fails every plane (the plane-out
 * ratios of a slow first run were all above out_high). When the two differ by more than
 * kSteadyShare allows, a plane-out run that fails its ratio says so, with both figures. Call it
 * after both all-planes runs are judged.
 */
void judge_plane_out_runs(Report& rep);

// ---- the two sides -------------------------------------------------------------------------

/**
 * What the peer's engine did during the session (its counters' deltas): the frames its receive
 * filter dropped (probes that went down a cable to another plane land in rx_dropped_dst_mac) and
 * the probes it answered.
 */
struct PeerCounters {
    std::uint64_t rx_dropped_dst_mac = 0;
    std::uint64_t rx_dropped_dst_ip = 0;
    std::uint64_t ep_probe_replies_sent = 0;
    std::uint64_t ep_probes_rate_limited = 0;
    std::uint64_t ep_dropped_port_down = 0;
};

/** Everything the client found. */
struct Report {
    Identity local, peer;
    std::string server;
    Options opts;
    unsigned planes = 0;
    std::uint32_t path_mtu = 0; ///< of the bandwidth runs, bytes
    CablingResult cabling;
    RoutableResult routable;
    BandwidthRun all;
    std::vector<BandwidthRun> out; ///< one per plane
    /** The all-planes run again, after the plane-out runs (more than one plane): a check of its
     *  own, and the second figure the plane-out runs may be compared with. */
    BandwidthRun all_again;
    std::string bandwidth_skipped; ///< why the bandwidth checks did not run, or empty
    PeerCounters peer_counters;    ///< sent by the peer at the end of the session
    bool have_peer_counters = false;
    double seconds = 0;
    [[nodiscard]] bool ok() const;
    /** Checks that failed (a skipped check counts: the host is not shown ready). */
    [[nodiscard]] unsigned failed() const;
    [[nodiscard]] unsigned checks() const;
};

/**
 * Client: runs every check against the server on @p ch (engine of @p rt running on entry and on
 * return), then tells the server the session is over. @return the report.
 */
[[nodiscard]] Report run_client(Runtime& rt, const Channel& ch, const Options& o,
                                const std::string& server);
/**
 * Server: answers one client on @p ch (the engine answers its probes by itself; this thread
 * serves the bandwidth runs) until it says the session is over or goes away. Engine running on
 * entry. @return empty, or what went wrong.
 */
[[nodiscard]] std::string serve(Runtime& rt, const Channel& ch, bool verbose);

/** The report as text (one line per check, PASS / FAIL, with the figures). */
void print_report(std::FILE* f, const Report& r);
/** The report as one JSON object (README.md: fields). */
[[nodiscard]] nlohmann::json report_json(const Report& r);

} // namespace droce::burnin
