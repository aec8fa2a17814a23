/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * droce-burnin's output: one line per check (PASS / FAIL / SKIP and the figures, details indented
 * below it), or one JSON object. Control path.
 */
#include <cinttypes>
#include <cstdio>

#include "burnin.h"

namespace droce::burnin {

namespace {

std::string planes_gbps(const std::vector<double>& v) {
    std::string s;
    char b[16];
    for (std::size_t i = 0; i < v.size(); ++i) {
        std::snprintf(b, sizeof b, "%s%.2f", i ? " + " : "", v[i]);
        s += b;
    }
    return s;
}

void print_bandwidth(std::FILE* f, const BandwidthRun& b, unsigned planes) {
    const std::string what =
        b.plane_out < 0
            ? "bandwidth, all " + std::to_string(planes) + " planes" + (b.again ? ", again" : "")
            : "bandwidth, plane " + std::to_string(b.plane_out) + " out";
    if (b.status == Status::skip) {
        std::fprintf(f, "[%s] %s: not run: %s\n", to_string(b.status), what.c_str(), b.why.c_str());
        return;
    }
    std::fprintf(f, "[%s] %s: %.2f Gb/s of %.2f expected (%.2f)", to_string(b.status), what.c_str(),
                 b.gbps, b.expected_gbps, b.ratio);
    if (b.plane_out >= 0)
        std::fprintf(f, ", %.2f of the all-planes %.2f Gb/s", b.ratio_to_all, b.all_gbps);
    std::fprintf(f, "\n");
    if (!b.plane_gbps.empty())
        std::fprintf(f, "       per plane sent [Gb/s]: %s; %" PRIu64 " packets sent again\n",
                     planes_gbps(b.plane_gbps).c_str(), b.retransmits);
    const auto sum_line = [](const std::vector<std::uint64_t>& v) {
        std::string l;
        for (std::size_t k = 0; k < v.size(); ++k)
            l += (k ? " + " : "") + std::to_string(v[k]);
        return l;
    };
    if (!b.plane_wire_losses.empty())
        std::fprintf(f, "       per plane never reached the peer [packets]: %s\n",
                     sum_line(b.plane_wire_losses).c_str());
    if (!b.plane_losses.empty())
        std::fprintf(f, "       per plane declared lost by RACK [packets]: %s\n",
                     sum_line(b.plane_losses).c_str());
    if (b.plane_out >= 0 && static_cast<std::size_t>(b.plane_out) < b.plane_bytes.size()) {
        const auto k = static_cast<std::size_t>(b.plane_out);
        std::fprintf(f,
                     "       plane %d (administratively down): %" PRIu64 " bytes sent, %" PRIu64
                     " delivered to the peer\n",
                     b.plane_out, b.plane_bytes[k],
                     k < b.peer_rx_bytes.size() ? b.peer_rx_bytes[k] : 0);
    }
    if (!b.why.empty()) std::fprintf(f, "       %s\n", b.why.c_str());
}

nlohmann::json bandwidth_json(const BandwidthRun& b) {
    nlohmann::json j;
    j["status"] = to_string(b.status);
    j["plane_out"] = b.plane_out;
    j["why"] = b.why;
    j["link_gbps"] = b.link_gbps;
    j["expected_gbps"] = b.expected_gbps;
    j["gbps"] = b.gbps;
    j["ratio"] = b.ratio;
    if (b.plane_out >= 0) {
        j["ratio_to_all"] = b.ratio_to_all;
        j["all_gbps"] = b.all_gbps;
    }
    j["seconds"] = b.seconds;
    j["plane_gbps"] = b.plane_gbps;
    j["plane_tx_bytes"] = b.plane_bytes;
    j["peer_rx_bytes"] = b.peer_rx_bytes;
    j["retransmits"] = b.retransmits;
    j["plane_tx_pkts"] = b.plane_pkts;
    j["plane_losses"] = b.plane_losses;
    j["peer_rx_pkts"] = b.peer_rx_pkts;
    j["plane_wire_losses"] = b.plane_wire_losses;
    j["error_completions"] = b.error_cqes;
    j["verified"] = b.verified;
    nlohmann::json m = nlohmann::json::object();
    for (const auto& [name, v] : b.mrc_counters)
        m[name] = v;
    j["mrc_counters"] = m;
    return j;
}

nlohmann::json identity_json(const Identity& id) {
    nlohmann::json j;
    j["device"] = id.device;
    nlohmann::json ports = nlohmann::json::array();
    for (unsigned p = 0; p < id.num_ports; ++p)
        ports.push_back({{"port", p},
                         {"gid", gid_text(id.port[p].gid)},
                         {"mac", mac_text(id.port[p].mac)},
                         {"link_up", id.port[p].link_up != 0}});
    j["ports"] = ports;
    return j;
}

} // namespace

void print_report(std::FILE* f, const Report& r) {
    std::fprintf(f, "droce-burnin: %s (%u plane(s)) against %s at %s\n", r.local.device, r.planes,
                 r.peer.device[0] ? r.peer.device : "?", r.server.c_str());
    std::fprintf(f,
                 "  expected per plane: a %.2f Gb/s link, %.2f Gb/s of payload at path MTU %u "
                 "(%.3f of its bits);\n  bandwidth runs of %.1f s, %u-byte RDMA WRITEs on %u MRC "
                 "QP(s)\n",
                 r.opts.plane_gbps, r.opts.plane_gbps * r.opts.payload_share, r.path_mtu,
                 r.opts.payload_share, r.opts.duration_s, r.opts.size, r.opts.qps);
    // The thresholds every verdict below is held to, before any of them (a PASS said nothing of
    // what it had to reach; a FAIL named only the one it missed).
    std::fprintf(f, "  to pass: %.0f %% of the probes answered", 100 * r.opts.min_answered);
    if (r.opts.max_rtt_ms > 0) std::fprintf(f, " within %.3g ms", r.opts.max_rtt_ms);
    std::fprintf(f,
                 "; goodput at least %.2f of the expected;\n  a plane out %.2f - %.2f of the "
                 "all-planes figure; no plane losing over %.2f %% of its packets\n  (and over "
                 "%.0f x the others' median)\n\n",
                 r.opts.min_fraction, r.opts.out_low, r.opts.out_high, 100 * r.opts.max_plane_loss,
                 kLossStandsOut);

    const CablingResult& c = r.cabling;
    std::fprintf(f, "[%s] cabling: ", to_string(c.status));
    if (c.status == Status::pass)
        std::fprintf(f, "each local port reaches the peer's port of its plane and only that one\n");
    else
        std::fprintf(f, "%s\n", c.findings.empty() ? "no plane checked" : c.findings[0].c_str());
    for (std::size_t i = 1; i < c.findings.size(); ++i)
        std::fprintf(f, "       %s\n", c.findings[i].c_str());
    for (const PortCabling& pc : c.ports) {
        std::string to;
        for (unsigned j : pc.reaches)
            to += (to.empty() ? "" : ", ") + std::string("plane ") + std::to_string(j) + " (" +
                  gid_text(r.peer.port[j].gid) + " " + mac_text(r.peer.port[j].mac) + ")";
        std::fprintf(f, "       local port %u (%s) -> %s%s\n", pc.port,
                     gid_text(r.local.port[pc.port].gid).c_str(),
                     to.empty() ? "nothing" : ("the peer's " + to).c_str(),
                     pc.link_up ? "" : ", link down");
    }
    std::fprintf(f, "       %" PRIu64 " MRC_PROBEs sent, %" PRIu64 " answered\n", c.probes_sent,
                 c.replies);
    if (r.have_peer_counters)
        std::fprintf(f,
                     "       the peer's engine (whole session): %" PRIu64
                     " MRC_PROBEs answered, %" PRIu64 " frames dropped for another port's MAC\n",
                     r.peer_counters.ep_probe_replies_sent, r.peer_counters.rx_dropped_dst_mac);

    std::fprintf(f, "[%s] routable:\n", to_string(r.routable.status));
    for (const PlaneRoute& p : r.routable.planes) {
        std::fprintf(f, "       [%s] plane %u: %u of %u answered", to_string(p.status), p.plane,
                     p.answered, r.opts.probes);
        if (p.answered)
            std::fprintf(f, ", RTT min %.1f avg %.1f max %.1f us", p.rtt_min_us, p.rtt_avg_us,
                         p.rtt_max_us);
        std::fprintf(f, "%s%s\n", p.why.empty() ? "" : ": ", p.why.c_str());
    }

    print_bandwidth(f, r.all, r.planes);
    for (const BandwidthRun& b : r.out)
        print_bandwidth(f, b, r.planes);
    if (r.planes > 1) print_bandwidth(f, r.all_again, r.planes);

    std::fprintf(f, "\ndroce-burnin: %s (%u of %u checks not passed; %.1f s)\n",
                 r.ok() ? "PASS" : "FAIL", r.failed(), r.checks(), r.seconds);
}

nlohmann::json report_json(const Report& r) {
    nlohmann::json j;
    j["ok"] = r.ok();
    j["failed"] = r.failed();
    j["checks"] = r.checks();
    j["seconds"] = r.seconds;
    j["server"] = r.server;
    j["local"] = identity_json(r.local);
    j["peer"] = identity_json(r.peer);
    j["planes"] = r.planes;
    j["path_mtu"] = r.path_mtu;
    j["thresholds"] = {
        {"plane_gbps", r.opts.plane_gbps},     {"payload_share", r.opts.payload_share},
        {"min_fraction", r.opts.min_fraction}, {"out_low", r.opts.out_low},
        {"out_high", r.opts.out_high},         {"probes", r.opts.probes},
        {"min_answered", r.opts.min_answered}, {"max_rtt_ms", r.opts.max_rtt_ms},
        {"duration_s", r.opts.duration_s},     {"max_plane_loss", r.opts.max_plane_loss}};

    nlohmann::json c;
    c["status"] = to_string(r.cabling.status);
    c["findings"] = r.cabling.findings;
    c["miswired"] = r.cabling.miswired;
    c["probes_sent"] = r.cabling.probes_sent;
    c["replies"] = r.cabling.replies;
    nlohmann::json ports = nlohmann::json::array();
    for (const PortCabling& pc : r.cabling.ports)
        ports.push_back(
            {{"port", pc.port}, {"reaches", pc.reaches}, {"link_up", pc.link_up}, {"ok", pc.ok}});
    c["ports"] = ports;
    j["cabling"] = c;

    nlohmann::json rt;
    rt["status"] = to_string(r.routable.status);
    nlohmann::json planes = nlohmann::json::array();
    for (const PlaneRoute& p : r.routable.planes)
        planes.push_back({{"plane", p.plane},
                          {"status", to_string(p.status)},
                          {"sent", p.sent},
                          {"answered", p.answered},
                          {"rtt_min_us", p.rtt_min_us},
                          {"rtt_avg_us", p.rtt_avg_us},
                          {"rtt_max_us", p.rtt_max_us},
                          {"why", p.why}});
    rt["planes"] = planes;
    j["routable"] = rt;

    if (r.have_peer_counters)
        j["peer_counters"] = {{"rx_dropped_dst_mac", r.peer_counters.rx_dropped_dst_mac},
                              {"rx_dropped_dst_ip", r.peer_counters.rx_dropped_dst_ip},
                              {"ep_probe_replies_sent", r.peer_counters.ep_probe_replies_sent},
                              {"ep_probes_rate_limited", r.peer_counters.ep_probes_rate_limited},
                              {"ep_dropped_port_down", r.peer_counters.ep_dropped_port_down}};
    j["bandwidth_all"] = bandwidth_json(r.all);
    nlohmann::json out = nlohmann::json::array();
    for (const BandwidthRun& b : r.out)
        out.push_back(bandwidth_json(b));
    j["plane_out"] = out;
    if (r.planes > 1) j["bandwidth_all_again"] = bandwidth_json(r.all_again);
    return j;
}

} // namespace droce::burnin
