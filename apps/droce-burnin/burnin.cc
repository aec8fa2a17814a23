/* SPDX-License-Identifier: BSD-3-Clause */
#include "burnin.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>

#include "wire/bth.h"
#include "wire/eth.h"
#include "wire/ipv4.h"
#include "wire/ipv6.h"
#include "wire/opcode.h"
#include "wire/packet.h"
#include "wire/udp.h"

namespace droce::burnin {

namespace {

constexpr std::uint32_t kMagic = 0x44524249; // "DRBI"
constexpr std::uint32_t kVersion = 2;        // 2: BandwidthReply::rx_pkts
constexpr int kChannelMs = 30'000;

/** Client → server: what comes next in the session. */
struct Command {
    enum Kind : std::uint32_t { bandwidth = 1, done = 2 };
    std::uint32_t magic = kMagic;
    std::uint32_t kind = done;
};

/** Server → client, the answer to Command::done: what the peer's engine did with the probes. */
struct PeerCountersMsg {
    std::uint32_t magic = kMagic;
    std::uint32_t pad = 0;
    PeerCounters c;
};

/** Server → client after a bandwidth run: what each plane delivered on the server. */
struct BandwidthReply {
    std::uint32_t magic = kMagic;
    std::uint32_t ok = 0;
    std::uint64_t rx_bytes[kMaxPlanes] = {};
    std::uint64_t rx_pkts[kMaxPlanes] = {}; ///< MRC data packets, duplicates included
    char error[160] = {};
};

using Clk = std::chrono::steady_clock;

double ms_since(Clk::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clk::now() - t0).count();
}

std::string plane_list(const std::vector<unsigned>& v) {
    std::string s;
    for (std::size_t i = 0; i < v.size(); ++i) {
        if (i) s += i + 1 == v.size() ? " and " : ", ";
        s += std::to_string(v[i]);
    }
    return s;
}

/** The settle of droce-perf: ACKs in flight land before the engines stop and the QPs go away. */
void settle() {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

} // namespace

const char* to_string(Status s) noexcept {
    switch (s) {
    case Status::pass:
        return "PASS";
    case Status::fail:
        return "FAIL";
    case Status::skip:
        return "SKIP";
    }
    return "?";
}

std::string gid_text(const std::uint8_t (&gid)[16]) {
    char b[INET6_ADDRSTRLEN] = {};
    wire::Ipv6Addr a;
    std::memcpy(a.data(), gid, 16);
    if (wire::is_ipv4_mapped(a))
        (void)inet_ntop(AF_INET, gid + 12, b, sizeof b);
    else
        (void)inet_ntop(AF_INET6, gid, b, sizeof b);
    return b;
}

std::string mac_text(const std::uint8_t (&mac)[6]) {
    char b[18];
    std::snprintf(b, sizeof b, "%02x:%02x:%02x:%02x:%02x:%02x", mac[0], mac[1], mac[2], mac[3],
                  mac[4], mac[5]);
    return b;
}

double payload_share(std::uint32_t path_mtu, bool ipv6) noexcept {
    constexpr std::size_t kWireExtra = 24; // preamble 8, inter-frame gap 12, FCS 4
    const std::size_t headers =
        sizeof(wire::EthHdr) + (ipv6 ? sizeof(wire::Ipv6Hdr) : sizeof(wire::Ipv4Hdr)) +
        sizeof(wire::UdpHdr) + sizeof(wire::Bth) +
        wire::opcode_info(wire::Opcode::MRC_WRITE).ext_length + wire::kIcrcSize + kWireExtra;
    const double mtu = static_cast<double>(path_mtu);
    return mtu > 0 ? mtu / (mtu + static_cast<double>(headers)) : 0;
}

Identity identity_of(Runtime& rt) {
    Device& dev = rt.device(0);
    Identity id;
    id.magic = kMagic;
    id.version = kVersion;
    std::snprintf(id.device, sizeof id.device, "%s", dev.name().c_str());
    id.num_ports = std::min(dev.num_ports(), kMaxPlanes);
    Device::ControlSection cs(dev); // the driver's link_up() is the engine's between passes
    for (unsigned p = 0; p < id.num_ports; ++p) {
        const PortSpec& ps = dev.port(p);
        std::memcpy(id.port[p].gid, ps.gid.data(), 16);
        std::memcpy(id.port[p].mac, ps.mac.data(), 6);
        id.port[p].link_up = ps.driver && ps.driver->link_up() ? 1 : 0;
        id.port[p].admin_up = dev.port_admin_up(p) ? 1 : 0;
        id.port[p].line_rate_mbps = static_cast<std::uint32_t>(ps.line_rate_mbps);
    }
    return id;
}

// ---- cabling ---------------------------------------------------------------------------------

CablingResult judge_cabling(const CablingInput& in) {
    CablingResult r;
    const unsigned n = std::min(in.planes, kMaxPlanes);
    std::array<int, kMaxPlanes> only{}; // the one plane port k reached, -1 for none or several
    for (unsigned k = 0; k < n; ++k) {
        PortCabling pc;
        pc.port = k;
        pc.link_up = in.link_up[k];
        for (unsigned j = 0; j < kMaxPlanes; ++j)
            if (in.reached[k] & (1u << j)) pc.reaches.push_back(j);
        pc.ok = pc.reaches.size() == 1 && pc.reaches[0] == k;
        only[k] = pc.reaches.size() == 1 ? static_cast<int>(pc.reaches[0]) : -1;
        if (!pc.reaches.empty() && !pc.ok) r.miswired = true;
        r.ports.push_back(std::move(pc));
    }
    // Ports that reach one other plane: follow port k → plane only[k] → port only[k] ... A cycle
    // is a set of cables swapped (two) or crossed (more); what does not close is told port by
    // port.
    std::array<bool, kMaxPlanes> told{};
    for (unsigned k = 0; k < n; ++k) {
        if (told[k] || only[k] < 0 || static_cast<unsigned>(only[k]) == k) continue;
        std::vector<unsigned> cyc{k};
        unsigned at = static_cast<unsigned>(only[k]);
        while (at < n && at != k && only[at] >= 0 && cyc.size() <= n) {
            cyc.push_back(at);
            at = static_cast<unsigned>(only[at]);
        }
        if (at != k) continue; // not a cycle: told below
        std::string s;
        for (std::size_t i = 0; i < cyc.size(); ++i) {
            const unsigned from = cyc[i], to = cyc[(i + 1) % cyc.size()];
            if (i == 0)
                s += "local port " + std::to_string(from) + " reaches the peer's plane " +
                     std::to_string(to);
            else
                s += std::string(i + 1 == cyc.size() ? " and" : ",") + " port " +
                     std::to_string(from) + " reaches plane " + std::to_string(to);
            told[from] = true;
        }
        std::vector<unsigned> sorted = cyc;
        std::sort(sorted.begin(), sorted.end());
        s += ": cables of planes " + plane_list(sorted) +
             (cyc.size() == 2 ? " swapped" : " crossed");
        r.findings.push_back(std::move(s));
    }
    for (unsigned k = 0; k < n; ++k) {
        const PortCabling& pc = r.ports[k];
        if (pc.ok || told[k]) continue;
        const std::string port = "local port " + std::to_string(k);
        if (pc.reaches.empty()) {
            if (!pc.link_up)
                r.findings.push_back(port + " reaches no plane of the peer: its link is down");
            else if (k >= in.peer_planes)
                r.findings.push_back(port + " reaches no plane of the peer: the peer has " +
                                     std::to_string(in.peer_planes) + " port(s)");
            else
                r.findings.push_back(port + " reaches no plane of the peer: no answer");
        } else if (pc.reaches.size() > 1) {
            r.findings.push_back(port + " reaches the peer's planes " + plane_list(pc.reaches) +
                                 ": only plane " + std::to_string(k) +
                                 " should answer there (planes joined in one network?)");
        } else {
            r.findings.push_back(port + " reaches the peer's plane " +
                                 std::to_string(pc.reaches[0]) + " instead of plane " +
                                 std::to_string(k));
        }
    }
    r.status = r.findings.empty() && n > 0 ? Status::pass : Status::fail;
    return r;
}

// ---- probing ---------------------------------------------------------------------------------

Prober::Prober(Device& dev, const Identity& peer) : dev_(dev) {
    for (unsigned j = 0; j < peer.num_ports && j < kMaxPlanes; ++j) {
        wire::Ipv6Addr g;
        std::memcpy(g.data(), peer.port[j].gid, 16);
        peer_gid_.push_back(g);
    }
    std::random_device rd;
    nonce_ = rd();
    // Replies to probes of an earlier user of this device are not ours.
    std::array<EpProbeReply, 64> buf;
    while (dev_.take_ep_replies(buf) > 0) {
    }
}

std::vector<Prober::Outcome> Prober::batch(const std::vector<Spec>& specs, double timeout_ms) {
    std::vector<Outcome> out(specs.size());
    std::vector<std::uint16_t> req(specs.size());
    std::vector<bool> done(specs.size(), false); // sent, or given up
    for (std::size_t i = 0; i < specs.size(); ++i)
        req[i] = next_req_++;
    std::size_t pending = specs.size(), unanswered = 0;
    const auto t0 = Clk::now();
    auto last_sent = t0;
    std::array<EpProbeReply, 64> buf;
    for (;;) {
        for (std::size_t i = 0; i < specs.size(); ++i) {
            if (done[i]) continue;
            const Spec& s = specs[i];
            EpProbeRequest q;
            q.req_id = req[i];
            q.nonce = nonce_;
            q.port = s.port;
            q.sgid = dev_.port(s.port).gid;
            if (s.plane >= peer_gid_.size()) {
                out[i].err = EHOSTUNREACH; // the peer has no such plane
                done[i] = true;
                --pending;
                continue;
            }
            q.dgid = peer_gid_[s.plane];
            // Entropy: a UDP source port per probe, so that a plane with several paths (ECMP)
            // is probed on more than one of them.
            q.udp_sport = static_cast<std::uint16_t>(0xc000u | (req[i] & 0x3fffu));
            const int e = dev_.send_ep_probe(q);
            if (e == EAGAIN || e == ENOBUFS) {
                // Neighbour being resolved, or no transmit slot: again, until the deadline.
                if (ms_since(t0) < timeout_ms) continue;
            }
            out[i].err = e;
            out[i].sent = e == 0;
            done[i] = true;
            --pending;
            if (e == 0) {
                ++sent_;
                ++unanswered;
                last_sent = Clk::now();
            }
        }
        const std::size_t n = dev_.take_ep_replies(buf);
        for (std::size_t k = 0; k < n; ++k) {
            const EpProbeReply& rep = buf[k];
            if (rep.nonce != nonce_) continue; // stale or forged
            for (std::size_t i = 0; i < specs.size(); ++i) {
                if (req[i] != rep.req_id || !out[i].sent || out[i].answered) continue;
                out[i].answered = true;
                out[i].reply_port = rep.port;
                out[i].rtt_ns = rep.rtt_ns;
                ++replies_;
                --unanswered;
                break;
            }
        }
        if (pending == 0 && unanswered == 0) break;
        if (pending == 0 &&
            std::chrono::duration<double, std::milli>(Clk::now() - last_sent).count() >= timeout_ms)
            break;
        if (n == 0) std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    return out;
}

CablingResult check_cabling(Prober& pr, const Identity& local, const Identity& peer,
                            const Options& o) {
    CablingInput in;
    in.planes = local.num_ports;
    in.peer_planes = peer.num_ports;
    for (unsigned k = 0; k < in.planes; ++k)
        in.link_up[k] = local.port[k].link_up != 0;
    std::vector<Prober::Spec> specs;
    for (unsigned round = 0; round < std::max(1u, o.cabling_rounds); ++round)
        for (unsigned k = 0; k < in.planes; ++k)
            for (unsigned j = 0; j < peer.num_ports; ++j)
                specs.push_back({k, j});
    const std::uint64_t sent0 = pr.sent(), rep0 = pr.replies();
    const std::vector<Prober::Outcome> out = pr.batch(specs, o.probe_timeout_ms);
    for (std::size_t i = 0; i < specs.size(); ++i) {
        const unsigned k = specs[i].port;
        if (out[i].err == ENETDOWN) in.link_up[k] = false;
        // A reply counts where it came in: by the cable the probe left on (the peer answers on
        // the port it heard the probe on).
        if (out[i].answered && out[i].reply_port == k)
            in.reached[k] = static_cast<std::uint8_t>(in.reached[k] | (1u << specs[i].plane));
    }
    CablingResult r = judge_cabling(in);
    r.probes_sent = pr.sent() - sent0;
    r.replies = pr.replies() - rep0;
    return r;
}

RoutableResult check_routable(Prober& pr, const Identity& local, const Identity& peer,
                              const Options& o) {
    RoutableResult r;
    const unsigned n = local.num_ports;
    std::vector<std::vector<double>> rtt(n);
    r.planes.resize(n);
    std::vector<int> err(n, 0);
    // One probe per plane at a time, the planes side by side: N rounds.
    for (unsigned round = 0; round < std::max(1u, o.probes); ++round) {
        std::vector<Prober::Spec> specs;
        for (unsigned p = 0; p < n; ++p)
            specs.push_back({p, p});
        const std::vector<Prober::Outcome> out = pr.batch(specs, o.probe_timeout_ms);
        for (unsigned p = 0; p < n; ++p) {
            if (out[p].sent) ++r.planes[p].sent;
            if (!out[p].sent && out[p].err) err[p] = out[p].err;
            if (out[p].answered && out[p].reply_port == p) {
                ++r.planes[p].answered;
                rtt[p].push_back(static_cast<double>(out[p].rtt_ns) / 1e3);
            }
        }
    }
    const unsigned want = std::max(1u, o.probes);
    bool all = n > 0;
    for (unsigned p = 0; p < n; ++p) {
        PlaneRoute& pl = r.planes[p];
        pl.plane = p;
        if (!rtt[p].empty()) {
            pl.rtt_min_us = *std::min_element(rtt[p].begin(), rtt[p].end());
            pl.rtt_max_us = *std::max_element(rtt[p].begin(), rtt[p].end());
            double sum = 0;
            for (double v : rtt[p])
                sum += v;
            pl.rtt_avg_us = sum / static_cast<double>(rtt[p].size());
        }
        const bool enough =
            static_cast<double>(pl.answered) >= o.min_answered * static_cast<double>(want);
        const bool fast = o.max_rtt_ms <= 0 || pl.rtt_max_us <= o.max_rtt_ms * 1e3;
        pl.status = enough && fast ? Status::pass : Status::fail;
        if (p >= peer.num_ports)
            pl.why = "the peer has no plane " + std::to_string(p);
        else if (pl.sent == 0 && err[p] == ENETDOWN)
            pl.why = "link down";
        else if (pl.sent == 0 && err[p])
            pl.why = "send_ep_probe: " + std::string(std::strerror(err[p]));
        else if (pl.answered == 0)
            pl.why = "no answer";
        else if (!enough) {
            char b[64];
            std::snprintf(b, sizeof b, "fewer than %.0f %% answered", o.min_answered * 100);
            pl.why = b;
        } else if (!fast) {
            char b[96];
            std::snprintf(b, sizeof b, "RTT up to %.1f us, above %.1f us", pl.rtt_max_us,
                          o.max_rtt_ms * 1e3);
            pl.why = b;
        }
        all = all && pl.status == Status::pass;
    }
    r.status = all ? Status::pass : Status::fail;
    return r;
}

// ---- bandwidth -------------------------------------------------------------------------------

namespace {

/** @p shaper_gbps: the rate this side's ports are shaped to (--plane-rate), 0 = not shaped: the
 *  MRC QPs' ACK timeout then covers the shaped planes' queues (perf::mrc_attr). */
perf::Params bandwidth_params(const Options& o, unsigned planes, double shaper_gbps) {
    perf::Params p;
    p.op = perf::Op::write;
    p.mode = perf::Mode::bw;
    p.mrc = true;
    p.planes = static_cast<std::uint8_t>(planes);
    p.size = o.size;
    p.duration_s = o.duration_s;
    p.tx_depth = o.tx_depth;
    p.qps = o.qps;
    p.verify = o.verify;
    p.plane_rate_gbps = shaper_gbps;
    p.json = true; // any progress text to stderr (none: progress is off)
    return p;
}

} // namespace

BandwidthRun run_bandwidth(Runtime& rt, const Channel& ch, const Options& o, unsigned planes,
                           int plane_out, bool* channel_ok) {
    BandwidthRun b;
    b.plane_out = plane_out;
    b.status = Status::fail;
    *channel_ok = false;
    Device& dev = rt.device(0);
    const DeviceConfig& dc = rt.device_config(0);
    Command c;
    c.kind = Command::bandwidth;
    if (std::string e = ch.send(&c, sizeof c); !e.empty()) {
        b.why = "side channel: " + e;
        return b;
    }
    rt.stop_engines(); // endpoints are made with the engine stopped (perf.h)
    std::string err;
    const TxShaper* shaper = rt.shaper(0, 0);
    const perf::Params p = bandwidth_params(o, planes, shaper ? shaper->rate_gbps() : 0);
    auto ep = perf::handshake_client(dev, p, dc.qp, rt.max_path_mtu(0, 0), ch, &err);
    if (!ep) {
        b.why = err;
        (void)rt.start_engines(EngineMode::per_device);
        return b;
    }
    // Before the engine runs, so that not one packet takes the plane (the endpoint's destructor
    // gives every port back).
    if (plane_out >= 0) (void)dev.set_port_admin(static_cast<unsigned>(plane_out), false);
    if (!rt.start_engines(EngineMode::per_device)) {
        b.why = "cannot start the engine thread";
        return b;
    }
    if (err = perf::barrier(ch, kChannelMs); !err.empty()) {
        b.why = err;
        return b;
    }
    perf::Result r = perf::run_client(*ep, ch);
    settle();
    rt.stop_engines();
    perf::collect_mrc(*ep, r);
    BandwidthReply rep;
    const std::string e = ch.recv(&rep, sizeof rep, kChannelMs);
    ep.reset();
    (void)rt.start_engines(EngineMode::per_device);
    b.seconds = r.seconds;
    b.gbps = r.bw_avg_gbps;
    b.error_cqes = r.error_cqes;
    for (const auto& [name, v] : r.mrc)
        if (v) b.mrc_counters.emplace_back(name, v);
    for (const perf::PlaneFigures& f : r.planes) {
        b.plane_gbps.push_back(f.tx_gbps);
        b.plane_bytes.push_back(f.tx_bytes);
        b.plane_pkts.push_back(f.tx_pkts);
        b.plane_losses.push_back(f.losses);
        b.retransmits += f.retransmits;
    }
    if (!e.empty() || rep.magic != kMagic) {
        b.why = "side channel: " + (e.empty() ? std::string("bad message") : e);
        return b;
    }
    rep.error[sizeof rep.error - 1] = '\0'; // the peer's text, whatever it sent
    *channel_ok = true;
    for (unsigned k = 0; k < planes; ++k) {
        b.peer_rx_bytes.push_back(rep.rx_bytes[k]);
        b.peer_rx_pkts.push_back(rep.rx_pkts[k]);
        // Every copy sent on plane k that did not arrive there: a packet RACK took for lost that
        // only came late (a busy host) arrives, and its resend arrives on another plane.
        const std::uint64_t sent = k < b.plane_pkts.size() ? b.plane_pkts[k] : 0;
        b.plane_wire_losses.push_back(sent > rep.rx_pkts[k] ? sent - rep.rx_pkts[k] : 0);
    }
    b.verified = o.verify && r.verified && r.peer_verified;
    if (!r.ok) {
        b.why = "the run failed: " + r.error;
        return b;
    }
    if (!rep.ok) {
        b.why = std::string("the peer: ") + rep.error;
        return b;
    }
    b.status = Status::pass; // judged by judge_bandwidth
    return b;
}

void judge_bandwidth(BandwidthRun& b, const BandwidthRun* all, const Options& o, unsigned planes) {
    const unsigned carrying = b.plane_out >= 0 ? planes - 1 : planes;
    b.link_gbps = carrying * o.plane_gbps;
    b.expected_gbps = b.link_gbps * o.payload_share;
    b.ratio = b.expected_gbps > 0 ? b.gbps / b.expected_gbps : 0;
    if (all && all->gbps > 0) b.ratio_to_all = b.gbps / all->gbps;
    if (b.status != Status::pass) return; // the run itself failed: why says so
    char t[200];
    std::vector<std::string> why;
    if (b.ratio < o.min_fraction) {
        std::snprintf(t, sizeof t, "%.2f Gb/s is %.2f of the %.2f Gb/s expected (below %.2f)",
                      b.gbps, b.ratio, b.expected_gbps, o.min_fraction);
        why.emplace_back(t);
    }
    if (b.error_cqes) why.push_back(std::to_string(b.error_cqes) + " error completion(s)");
    if (o.verify && !b.verified) why.emplace_back("data differ at the peer");
    // Every plane that is up carries a share: a plane that carried nothing is dead, however much
    // the others made up for it.
    for (unsigned k = 0; k < b.plane_bytes.size(); ++k)
        if (static_cast<int>(k) != b.plane_out && b.plane_bytes[k] == 0)
            why.push_back("plane " + std::to_string(k) + " carried nothing");
    // Where the packets were lost, plane by plane: MRC retransmits on the good planes, so a plane
    // that drops shows in the goodput only when it drops a lot. A plane is named when it lost
    // more than the limit and more than kLossStandsOut times the median of the other planes that
    // carried traffic: losses spread over every plane alike (a busy host, retransmission
    // timeouts, which declare what is in flight on every plane lost) are nobody's cable.
    // The packets that never reached the peer when it counted them (the wire's losses), else
    // RACK's declarations, which on a busy host include packets that were only late.
    const bool wire =
        !b.plane_wire_losses.empty() && b.plane_wire_losses.size() == b.plane_pkts.size();
    const std::vector<std::uint64_t>& lost = wire ? b.plane_wire_losses : b.plane_losses;
    const auto loss_share = [&](unsigned k) {
        return b.plane_pkts[k] ? static_cast<double>(lost[k]) / b.plane_pkts[k] : 0.0;
    };
    const unsigned n = static_cast<unsigned>(std::min(lost.size(), b.plane_pkts.size()));
    for (unsigned k = 0; k < n; ++k) {
        if (static_cast<int>(k) == b.plane_out || loss_share(k) <= o.max_plane_loss) continue;
        std::vector<double> others;
        for (unsigned j = 0; j < n; ++j)
            if (j != k && static_cast<int>(j) != b.plane_out && b.plane_pkts[j])
                others.push_back(loss_share(j));
        std::sort(others.begin(), others.end());
        const double median =
            others.empty() ? 0.0
                           : (others[(others.size() - 1) / 2] + others[others.size() / 2]) / 2;
        if (loss_share(k) <= kLossStandsOut * median) continue;
        std::snprintf(t, sizeof t,
                      "plane %u lost %.2f %% of the %" PRIu64 " packets it sent (%" PRIu64
                      "%s; limit %.2f %%",
                      k, 100 * loss_share(k), b.plane_pkts[k], lost[k],
                      wire ? " never reached the peer" : " declared lost", 100 * o.max_plane_loss);
        std::string w = t;
        if (!others.empty()) {
            std::snprintf(t, sizeof t, "; the other planes %.2f - %.2f %%", 100 * others.front(),
                          100 * others.back());
            w += t;
        }
        why.push_back(w + ")");
    }
    if (b.plane_out >= 0) {
        const auto k = static_cast<unsigned>(b.plane_out);
        if (k < b.plane_bytes.size() && b.plane_bytes[k] != 0)
            why.push_back("plane " + std::to_string(k) + " (down) sent " +
                          std::to_string(b.plane_bytes[k]) + " bytes");
        if (k < b.peer_rx_bytes.size() && b.peer_rx_bytes[k] != 0)
            why.push_back("plane " + std::to_string(k) + " (down) delivered " +
                          std::to_string(b.peer_rx_bytes[k]) + " bytes to the peer");
        if (!all || all->gbps <= 0) {
            why.emplace_back("no all-planes figure to compare with");
        } else if (b.ratio_to_all < o.out_low || b.ratio_to_all > o.out_high) {
            std::snprintf(t, sizeof t, "%.2f of the all-planes %.2f Gb/s (outside %.2f..%.2f)",
                          b.ratio_to_all, all->gbps, o.out_low, o.out_high);
            why.emplace_back(t);
        }
    }
    if (!why.empty()) {
        b.status = Status::fail;
        b.why.clear();
        for (std::size_t i = 0; i < why.size(); ++i)
            b.why += (i ? "; " : "") + why[i];
    }
}

void judge_plane_out_runs(Report& rep) {
    const auto measured = [](const BandwidthRun& b) {
        return b.status != Status::skip && b.gbps > 0 ? &b : nullptr;
    };
    const BandwidthRun* first = measured(rep.all);
    const BandwidthRun* again = measured(rep.all_again);
    const BandwidthRun* base = first;
    if (again && (!base || again->gbps > base->gbps)) base = again;
    const bool steady =
        !first || !again ||
        std::min(first->gbps, again->gbps) >= kSteadyShare * std::max(first->gbps, again->gbps);
    for (BandwidthRun& b : rep.out) {
        judge_bandwidth(b, base, rep.opts, rep.planes);
        if (base) b.all_gbps = base->gbps;
        if (steady || b.status != Status::fail ||
            (b.ratio_to_all >= rep.opts.out_low && b.ratio_to_all <= rep.opts.out_high))
            continue;
        char t[200];
        std::snprintf(t, sizeof t,
                      "; the all-planes figure moved from %.2f to %.2f Gb/s between the first "
                      "and the last run: the host was not steady (other load?); run it again",
                      first->gbps, again->gbps);
        b.why += t;
    }
}

// ---- sessions --------------------------------------------------------------------------------

bool Report::ok() const {
    return failed() == 0;
}

unsigned Report::checks() const {
    return 2 + 1 + static_cast<unsigned>(planes > 1 ? planes + 1 : 0);
}

unsigned Report::failed() const {
    unsigned n = 0;
    n += cabling.status != Status::pass;
    n += routable.status != Status::pass;
    n += all.status != Status::pass;
    if (planes > 1) {
        for (const BandwidthRun& b : out)
            n += b.status != Status::pass;
        n += all_again.status != Status::pass;
        n += static_cast<unsigned>(planes > out.size() ? planes - out.size() : 0);
    }
    return n;
}

namespace {

/** Waits up to @p secs for every port's link (memif connects as its peer appears). */
Identity wait_for_links(Runtime& rt, double secs) {
    const auto t0 = Clk::now();
    for (;;) {
        Identity id = identity_of(rt);
        bool up = true;
        for (unsigned p = 0; p < id.num_ports; ++p)
            up = up && id.port[p].link_up;
        if (up || ms_since(t0) >= secs * 1e3) return id;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
}

std::string exchange_identity(const Channel& ch, const Identity& mine, Identity* theirs,
                              bool send_first) {
    if (send_first)
        if (std::string e = ch.send(&mine, sizeof mine); !e.empty()) return e;
    if (std::string e = ch.recv(theirs, sizeof *theirs, kChannelMs); !e.empty()) return e;
    if (theirs->magic != kMagic) return "the peer is not droce-burnin";
    if (theirs->version != kVersion)
        return "the peer's droce-burnin speaks side-channel version " +
               std::to_string(theirs->version) + ", this one " + std::to_string(kVersion) +
               ": run the same droce release on both hosts";
    if (theirs->num_ports > kMaxPlanes)
        return "the peer declared " + std::to_string(theirs->num_ports) + " ports (at most " +
               std::to_string(kMaxPlanes) + ")";
    theirs->device[sizeof theirs->device - 1] = '\0';
    if (!send_first)
        if (std::string e = ch.send(&mine, sizeof mine); !e.empty()) return e;
    return {};
}

} // namespace

Report run_client(Runtime& rt, const Channel& ch, const Options& o, const std::string& server) {
    const auto t0 = Clk::now();
    Report rep;
    rep.opts = o;
    rep.server = server;
    Device& dev = rt.device(0);
    rep.local = wait_for_links(rt, o.link_wait_s);
    rep.planes = rep.local.num_ports;
    rep.all.plane_out = -1;
    rep.all_again.again = true;
    if (std::string e = exchange_identity(ch, rep.local, &rep.peer, true); !e.empty()) {
        rep.cabling.findings.push_back("side channel: " + e);
        rep.peer = Identity{}; // no session: what was read is not a peer's identity
        rep.routable.status = Status::fail;
        rep.bandwidth_skipped = "no session with the peer";
        rep.seconds = ms_since(t0) / 1e3;
        return rep;
    }
    // The peer's MACs as it declared them: probes never wait on ARP / ND sent down a miscabled
    // port (one device-wide neighbour table would hold the failure for every port).
    for (unsigned j = 0; j < rep.peer.num_ports; ++j) {
        wire::Ipv6Addr g;
        wire::MacAddr m;
        std::memcpy(g.data(), rep.peer.port[j].gid, 16);
        std::memcpy(m.data(), rep.peer.port[j].mac, 6);
        (void)dev.add_static_neighbor(g, m);
    }
    {
        const std::uint32_t cfg_mtu = rt.device_config(0).qp.path_mtu;
        const std::uint32_t mtu = std::min(cfg_mtu ? cfg_mtu : 4096u, rt.max_path_mtu(0, 0));
        rep.path_mtu = mtu;
        rep.opts.payload_share = payload_share(mtu, !wire::is_ipv4_mapped(dev.port(0).gid));
    }
    Prober pr(dev, rep.peer);
    rep.cabling = check_cabling(pr, rep.local, rep.peer, o);
    rep.routable = check_routable(pr, rep.local, rep.peer, o);

    if (rep.cabling.miswired)
        rep.bandwidth_skipped = "cabling: a port reaches another plane, whose MRC packets the "
                                "peer would drop (fix the cables first)";
    else if (rep.peer.num_ports < rep.planes)
        rep.bandwidth_skipped = "the peer has " + std::to_string(rep.peer.num_ports) +
                                " port(s), this host " + std::to_string(rep.planes);
    if (rep.bandwidth_skipped.empty()) {
        bool channel_ok = false;
        rep.all = run_bandwidth(rt, ch, o, rep.planes, -1, &channel_ok);
        judge_bandwidth(rep.all, nullptr, rep.opts, rep.planes);
        for (unsigned k = 0; channel_ok && rep.planes > 1 && k < rep.planes; ++k)
            rep.out.push_back(
                run_bandwidth(rt, ch, o, rep.planes, static_cast<int>(k), &channel_ok));
        if (rep.planes > 1) {
            if (channel_ok) {
                rep.all_again = run_bandwidth(rt, ch, o, rep.planes, -1, &channel_ok);
                judge_bandwidth(rep.all_again, nullptr, rep.opts, rep.planes);
            } else {
                rep.all_again.why = "the session with the peer broke off";
            }
            rep.all_again.again = true;
        }
        judge_plane_out_runs(rep);
        // A run that broke the side channel ends the session: the runs after it are not made.
        for (unsigned k = static_cast<unsigned>(rep.out.size()); rep.planes > 1 && k < rep.planes;
             ++k) {
            BandwidthRun b;
            b.plane_out = static_cast<int>(k);
            b.why = "the session with the peer broke off";
            rep.out.push_back(b);
        }
    } else {
        rep.all.status = Status::skip;
        rep.all.why = rep.bandwidth_skipped;
        rep.all_again.why = rep.bandwidth_skipped;
        for (unsigned k = 0; rep.planes > 1 && k < rep.planes; ++k) {
            BandwidthRun b;
            b.plane_out = static_cast<int>(k);
            b.why = rep.bandwidth_skipped;
            rep.out.push_back(b);
        }
    }
    Command c;
    c.kind = Command::done;
    PeerCountersMsg pc;
    if (ch.send(&c, sizeof c).empty() && ch.recv(&pc, sizeof pc, kChannelMs).empty() &&
        pc.magic == kMagic) {
        rep.peer_counters = pc.c;
        rep.have_peer_counters = true;
    }
    rep.seconds = ms_since(t0) / 1e3;
    return rep;
}

std::string serve(Runtime& rt, const Channel& ch, bool verbose) {
    Device& dev = rt.device(0);
    const DeviceConfig& dc = rt.device_config(0);
    Identity peer;
    const Identity mine = identity_of(rt);
    const CounterSnapshot before = dev.total_counters();
    if (std::string e = exchange_identity(ch, mine, &peer, false); !e.empty())
        return "side channel: " + e;
    if (verbose)
        std::fprintf(stderr, "droce-burnin: client %s (%u port(s)) connected\n", peer.device,
                     peer.num_ports);
    for (;;) {
        Command c;
        // The client probes for a while before its first command: no timeout shorter than its
        // whole run.
        if (std::string e = ch.recv(&c, sizeof c, 3'600'000); !e.empty())
            return e == "peer closed the connection"
                       ? "the client left before the end of the session"
                       : "side channel: " + e;
        if (c.magic != kMagic) return "side channel: bad message";
        if (c.kind == Command::done) {
            const CounterSnapshot now = dev.total_counters();
            PeerCountersMsg pc;
            auto d = [&](Counter k) { return now[k] - before[k]; };
            pc.c.rx_dropped_dst_mac = d(Counter::rx_dropped_dst_mac);
            pc.c.rx_dropped_dst_ip = d(Counter::rx_dropped_dst_ip);
            pc.c.ep_probe_replies_sent = d(Counter::ep_probe_replies_sent);
            pc.c.ep_probes_rate_limited = d(Counter::ep_probes_rate_limited);
            pc.c.ep_dropped_port_down = d(Counter::ep_dropped_port_down);
            if (verbose)
                std::fprintf(stderr,
                             "droce-burnin: this engine answered %" PRIu64
                             " MRC_PROBEs; dropped %" PRIu64 " frames for another port's MAC "
                             "(rx_dropped_dst_mac)\n",
                             pc.c.ep_probe_replies_sent, pc.c.rx_dropped_dst_mac);
            (void)ch.send(&pc, sizeof pc);
            return {};
        }
        if (c.kind != Command::bandwidth) return "side channel: unknown command";
        rt.stop_engines();
        perf::Params p;
        p.json = true;
        std::string err;
        auto ep = perf::handshake_server(dev, &p, dc.qp, rt.max_path_mtu(0, 0), ch, &err);
        if (!ep) {
            (void)rt.start_engines(EngineMode::per_device);
            return err;
        }
        if (!rt.start_engines(EngineMode::per_device)) return "cannot start the engine thread";
        if (err = perf::barrier(ch, kChannelMs); !err.empty()) return err;
        perf::Result r = perf::run_server(*ep, ch);
        settle();
        rt.stop_engines();
        perf::collect_mrc(*ep, r);
        BandwidthReply rep;
        rep.ok = r.ok && (!p.verify || r.verified) ? 1 : 0;
        for (unsigned k = 0; k < r.planes.size() && k < kMaxPlanes; ++k) {
            rep.rx_bytes[k] = r.planes[k].rx_bytes;
            rep.rx_pkts[k] = r.planes[k].rx_pkts;
        }
        std::snprintf(rep.error, sizeof rep.error, "%s", r.error.c_str());
        ep.reset();
        if (!rt.start_engines(EngineMode::per_device)) return "cannot start the engine thread";
        if (std::string e = ch.send(&rep, sizeof rep); !e.empty()) return "side channel: " + e;
        if (verbose) {
            std::fprintf(stderr, "droce-burnin: bandwidth run served: received per plane [MB]:");
            for (unsigned k = 0; k < r.planes.size(); ++k)
                std::fprintf(stderr, " %.1f", static_cast<double>(r.planes[k].rx_bytes) / 1e6);
            std::fprintf(stderr, "%s\n", rep.ok ? "" : " (failed)");
        }
    }
}

} // namespace droce::burnin
