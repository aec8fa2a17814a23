/* SPDX-License-Identifier: BSD-3-Clause */
#include "report.h"

#include <cinttypes>
#include <cmath>
#include <cstring>
#include <string_view>

namespace droce::perf {

namespace {

constexpr const char* kRule =
    "---------------------------------------------------------------------------------------\n";

std::string gid_text(const std::uint8_t (&g)[16]) {
    std::string s;
    char b[4];
    for (int i = 0; i < 16; ++i) {
        std::snprintf(b, sizeof b, "%02x", g[i]);
        s += b;
        if (i != 15) s += ':';
    }
    return s;
}

void print_qp(std::FILE* f, const char* which, const QpInfo& i, unsigned planes) {
    std::fprintf(f, " %s address: QPN 0x%04x PSN 0x%06x RKey 0x%08x VAddr 0x%016" PRIx64 "\n",
                 which, i.qpn, i.psn, i.rkey, i.va);
    if (planes == 0) {
        std::fprintf(f, " GID: %s\n", gid_text(i.gid).c_str());
        return;
    }
    for (unsigned p = 0; p < planes && p < i.num_planes; ++p)
        std::fprintf(f, " GID plane %u: %s\n", p, gid_text(i.plane_gid[p]).c_str());
}

std::uint64_t mrc_value(const Result& r, std::string_view name) {
    for (const auto& [n, v] : r.mrc)
        if (n == name) return v;
    return 0;
}

/** "plane 0", "planes 0,1,3", "no plane". */
std::string plane_list(const std::vector<unsigned>& v) {
    std::string s;
    for (unsigned p : v)
        s += (s.empty() ? "" : ",") + std::to_string(p);
    return v.empty() ? "no plane" : (v.size() == 1 ? "plane " : "planes ") + s;
}

} // namespace

std::string test_title(const Params& p) {
    std::string t;
    switch (p.op) {
    case Op::write:
        t = "RDMA_Write";
        break;
    case Op::read:
        t = "RDMA_Read";
        break;
    case Op::send:
        t = "Send";
        break;
    case Op::atomic:
        t = "Atomic FETCH_AND_ADD";
        break;
    }
    return t + (p.mode == Mode::bw ? " BW Test" : " Latency Test");
}

void print_header(std::FILE* f, const Params& p, bool server, const std::string& device,
                  std::uint32_t path_mtu, const std::vector<QpInfo>& local,
                  const std::vector<QpInfo>& remote) {
    std::fprintf(f, "%s", kRule);
    std::fprintf(f, "                    %s\n", test_title(p).c_str());
    std::fprintf(f, " Role            : %-12s Device         : %s\n", server ? "server" : "client",
                 device.c_str());
    std::fprintf(f, " Number of qps   : %-12u Transport type : RoCEv2 (droce)\n", p.qps);
    std::fprintf(f, " Connection type : %-12s Using SRQ      : OFF\n", p.mrc ? "MRC" : "RC");
    if (p.mrc)
        std::fprintf(
            f, " Planes          : %u (%s of the device, one QP sprayed over them)\n", p.planes,
            p.planes == 1 ? "port 0" : ("ports 0.." + std::to_string(p.planes - 1)).c_str());
    if (p.mode == Mode::bw) std::fprintf(f, " TX depth        : %u\n", p.tx_depth);
    std::fprintf(f, " Mtu             : %u[B]\n", path_mtu);
    std::fprintf(f, " Link type       : Ethernet\n");
    std::fprintf(f, " GID index       : 0\n");
    std::fprintf(f, " Max inline data : 0[B]\n");
    std::fprintf(f, " Data ex. method : Ethernet (TCP)\n");
    std::fprintf(f, " Verify data     : %s\n", p.verify ? "ON" : "OFF");
    std::fprintf(f, "%s", kRule);
    for (const QpInfo& i : local)
        print_qp(f, "local", i, p.mrc ? p.planes : 0);
    for (const QpInfo& i : remote)
        print_qp(f, "remote", i, p.mrc ? p.planes : 0);
    std::fprintf(f, "%s", kRule);
    std::fflush(f);
}

void print_table_head(std::FILE* f, Mode m) {
    if (m == Mode::bw)
        std::fprintf(
            f, " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]   "
               "BW peak[MB/sec]    BW average[MB/sec]\n");
    else
        std::fprintf(
            f,
            " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    "
            "t_stdev[usec]   99%% percentile[usec]   99.9%% percentile[usec]\n");
}

void print_table_row(std::FILE* f, const Params& p, const Result& r) {
    const std::uint32_t bytes = p.op == Op::atomic ? 8u : p.size;
    const std::uint64_t iters = p.mode == Mode::bw ? r.messages / p.qps : r.messages;
    if (p.mode == Mode::bw)
        std::fprintf(f, " %-10u %-10" PRIu64 "     %-18.2f %-20.2f %-15.6f %-18.2f %.2f\n", bytes,
                     iters, r.bw_peak_gbps, r.bw_avg_gbps, r.msg_rate_mpps,
                     perftest_mb_per_sec(r.bw_peak_gbps), perftest_mb_per_sec(r.bw_avg_gbps));
    else
        std::fprintf(
            f, " %-7u %-10" PRIu64 "     %-14.2f %-12.2f %-18.2f %-14.2f %-15.2f %-23.2f %.2f\n",
            bytes, iters, r.t_min, r.t_max, r.t_typical, r.t_avg, r.t_stdev, r.t_p99, r.t_p999);
}

void print_footer(std::FILE* f, const Params& p, const Result& r, bool server) {
    std::fprintf(f, "%s", kRule);
    if (!r.ok) std::fprintf(f, " FAILED: %s\n", r.error.c_str());
    if (p.verify) {
        const bool all = r.verified && r.peer_verified;
        std::fprintf(f, " data verified   : %s (%" PRIu64 " differences)\n", all ? "yes" : "NO",
                     r.verify_errors);
    } else {
        std::fprintf(f, " data verified   : not checked (--verify)\n");
    }
    std::fprintf(f, " engine counters : ");
    int shown = 0;
    for (std::size_t i = 0; i < kNumCounters; ++i)
        if (r.counters.v[i])
            std::fprintf(f, "%s%s %" PRIu64, shown++ ? ", " : "", kCounterNames[i].data(),
                         r.counters.v[i]);
    std::fprintf(f, "%s\n", shown ? "" : "(all zero)");
    if (!r.impair.empty()) {
        std::fprintf(f, " impairment stage: ");
        shown = 0;
        for (const auto& [name, v] : r.impair)
            if (v) std::fprintf(f, "%s%s %" PRIu64, shown++ ? ", " : "", name.c_str(), v);
        std::fprintf(f, "%s\n", shown ? "" : "(nothing done)");
    }
    if (p.mrc) print_mrc(f, p, r, server);
    std::fprintf(f, "%s", kRule);
    std::fflush(f);
}

void print_mrc(std::FILE* f, const Params& p, const Result& r, bool server) {
    (void)p;
    std::uint64_t tx_total = 0;
    for (const PlaneFigures& pf : r.planes)
        tx_total += pf.tx_bytes;
    std::fprintf(f, " MRC planes      : plane   tx[Gb/s]  tx share  tx packets  lost here  "
                    "retransmits  rx[Gb/s]  rx packets\n");
    for (std::size_t i = 0; i < r.planes.size(); ++i) {
        const PlaneFigures& pf = r.planes[i];
        std::fprintf(f,
                     "                   %-7zu %-9.2f %5.1f %%   %-11" PRIu64 " %-10" PRIu64
                     " %-12" PRIu64 " %-9.2f %" PRIu64 "\n",
                     i, pf.tx_gbps,
                     tx_total
                         ? 100.0 * static_cast<double>(pf.tx_bytes) / static_cast<double>(tx_total)
                         : 0.0,
                     pf.tx_pkts, pf.losses, pf.retransmits, pf.rx_gbps, pf.rx_pkts);
    }
    if (!r.phases.empty() && r.phases.size() > 1) {
        std::fprintf(f, " between events  : [Gb/s] completed = what each plane sent\n");
        for (const Phase& ph : r.phases) {
            std::fprintf(
                f, "   %6.2f - %6.2f s (%s)%*s %7.2f =", ph.from_s, ph.to_s, ph.after.c_str(),
                static_cast<int>(14 - std::min<std::size_t>(14, ph.after.size())), "", ph.gbps);
            for (std::size_t i = 0; i < ph.plane_gbps.size(); ++i)
                std::fprintf(f, "%s%6.2f", i ? " +" : " ", ph.plane_gbps[i]);
            std::fprintf(f, "\n");
        }
    }
    if (!server)
        for (const std::string& line : mrc_story(r))
            std::fprintf(f, " %s\n", line.c_str());
    std::fprintf(f, " MRC counters    : ");
    int shown = 0;
    for (const auto& [name, v] : r.mrc)
        if (v) std::fprintf(f, "%s%s %" PRIu64, shown++ ? ", " : "", name.c_str(), v);
    std::fprintf(f, "%s\n", shown ? "" : "(all zero)");
}

std::vector<std::string> mrc_story(const Result& r) {
    std::vector<std::string> out;
    char b[96];
    for (std::size_t e = 0; e < r.events.size(); ++e) {
        const AppliedEvent& ae = r.events[e];
        if (ae.seen)
            std::snprintf(b, sizeof b,
                          "plane %u %s at %.1f s (not this run's event): ", ae.ev.plane,
                          ae.ev.up ? "came back" : "was lost", ae.at_s);
        else
            std::snprintf(b, sizeof b, "plane %u %s at %.1f s: ", ae.ev.plane,
                          ae.ev.up ? "up" : "down", ae.at_s);
        std::string line = b;
        if (ae.err) {
            out.push_back(line + "set_port_admin failed: " + std::strerror(ae.err));
            continue;
        }
        // The phase that this event began (phases are cut at every event, in order).
        const Phase* after = nullptr;
        for (const Phase& ph : r.phases)
            if (ph.after.rfind("plane ", 0) == 0 && std::abs(ph.from_s - ae.at_s) < 1e-6)
                after = &ph;
        if (!after) {
            out.push_back(line + "(the run ended there)");
            continue;
        }
        double total = 0;
        for (double g : after->plane_gbps)
            total += g;
        std::vector<unsigned> carrying;
        for (std::size_t i = 0; i < after->plane_gbps.size(); ++i)
            if (after->plane_gbps[i] > 0.01 * total) carrying.push_back(static_cast<unsigned>(i));
        if (!ae.ev.up) {
            const bool gone = ae.ev.plane >= after->plane_gbps.size() ||
                              after->plane_gbps[ae.ev.plane] <= 0.01 * total;
            line += gone ? "its traffic moved to " + plane_list(carrying)
                         : "it still carries traffic (" + plane_list(carrying) + ")";
        } else {
            line += plane_list(carrying) + " carry traffic";
        }
        std::snprintf(b, sizeof b, " (%.2f Gb/s completed after it)", after->gbps);
        out.push_back(line + b);
    }
    std::snprintf(b, sizeof b, "%" PRIu64 " error completion%s; %" PRIu64 " packet%s retransmitted",
                  r.error_cqes, r.error_cqes == 1 ? "" : "s", mrc_value(r, "retransmits"),
                  mrc_value(r, "retransmits") == 1 ? "" : "s");
    std::string line = b;
    const std::uint64_t rack = mrc_value(r, "retransmit_rack"),
                        tmo = mrc_value(r, "retransmit_timeout"),
                        nack = mrc_value(r, "retransmit_nack");
    if (rack + tmo + nack) {
        std::snprintf(b, sizeof b,
                      " (%" PRIu64 " found lost by SACK or a plane going down, %" PRIu64
                      " by the ACK timeout, %" PRIu64 " by NACK)",
                      rack, tmo, nack);
        line += b;
    }
    out.push_back(line);
    return out;
}

nlohmann::json counters_json(const CounterSnapshot& c) {
    nlohmann::json j = nlohmann::json::object();
    for (std::size_t i = 0; i < kNumCounters; ++i)
        j[std::string(kCounterNames[i])] = c.v[i];
    return j;
}

nlohmann::json to_json(const Params& p, const Result& r, bool server, const std::string& device,
                       std::uint32_t path_mtu) {
    nlohmann::json j;
    j["role"] = server ? "server" : "client";
    j["test"] = test_title(p);
    j["op"] = to_string(p.op);
    j["mode"] = to_string(p.mode);
    j["device"] = device;
    j["bytes"] = p.op == Op::atomic ? 8u : p.size;
    j["qps"] = p.qps;
    j["path_mtu"] = path_mtu;
    j["iterations"] = p.mode == Mode::bw ? r.messages / p.qps : r.messages;
    j["messages"] = r.messages;
    j["seconds"] = r.seconds;
    j["ok"] = r.ok;
    if (!r.error.empty()) j["error"] = r.error;
    j["verify"] = p.verify;
    j["verified"] =
        p.verify ? nlohmann::json(r.verified && r.peer_verified) : nlohmann::json(nullptr);
    j["verify_errors"] = r.verify_errors;
    if (!server) {
        if (p.mode == Mode::bw) {
            j["bw_peak_gbps"] = r.bw_peak_gbps;
            j["bw_avg_gbps"] = r.bw_avg_gbps;
            j["bw_peak_mb_per_sec"] = perftest_mb_per_sec(r.bw_peak_gbps);
            j["bw_avg_mb_per_sec"] = perftest_mb_per_sec(r.bw_avg_gbps);
            j["msg_rate_mpps"] = r.msg_rate_mpps;
        } else {
            j["t_min_usec"] = r.t_min;
            j["t_max_usec"] = r.t_max;
            j["t_typical_usec"] = r.t_typical;
            j["t_avg_usec"] = r.t_avg;
            j["t_stdev_usec"] = r.t_stdev;
            j["t_p99_usec"] = r.t_p99;
            j["t_p999_usec"] = r.t_p999;
        }
    }
    j["transport"] = p.mrc ? "mrc" : "rc";
    if (!r.samples.empty()) {
        nlohmann::json sm = nlohmann::json::array();
        for (const Sample& x : r.samples) {
            nlohmann::json e = {{"at_s", x.at_s}, {"gbps", x.gbps}};
            if (p.mrc) e["plane_gbps"] = x.plane_gbps;
            sm.push_back(e);
        }
        j["progress"] = sm;
    }
    j["error_completions"] = r.error_cqes;
    j["counters"] = counters_json(r.counters);
    if (p.mrc) {
        j["planes"] = p.planes;
        nlohmann::json pl = nlohmann::json::array();
        for (std::size_t i = 0; i < r.planes.size(); ++i) {
            const PlaneFigures& f = r.planes[i];
            pl.push_back({{"plane", i},
                          {"tx_bytes", f.tx_bytes},
                          {"tx_pkts", f.tx_pkts},
                          {"losses", f.losses},
                          {"retransmits", f.retransmits},
                          {"rx_bytes", f.rx_bytes},
                          {"rx_pkts", f.rx_pkts},
                          {"tx_gbps", f.tx_gbps},
                          {"rx_gbps", f.rx_gbps}});
        }
        j["plane"] = pl;
        nlohmann::json ph = nlohmann::json::array();
        for (const Phase& x : r.phases)
            ph.push_back({{"from_s", x.from_s},
                          {"to_s", x.to_s},
                          {"after", x.after},
                          {"gbps", x.gbps},
                          {"plane_gbps", x.plane_gbps}});
        j["phases"] = ph;
        nlohmann::json ev = nlohmann::json::array();
        for (const AppliedEvent& e : r.events)
            ev.push_back({{"plane", e.ev.plane},
                          {"up", e.ev.up},
                          {"requested_s", e.ev.at_s},
                          {"at_s", e.at_s},
                          {"error", e.err},
                          {"seen", e.seen}});
        j["plane_events"] = ev;
        nlohmann::json mc = nlohmann::json::object();
        for (const auto& [name, v] : r.mrc)
            mc[name] = v;
        j["mrc_counters"] = mc;
    }
    if (!r.impair.empty()) {
        nlohmann::json im = nlohmann::json::object();
        for (const auto& [name, v] : r.impair)
            im[name] = v;
        j["impair"] = im;
    }
    return j;
}

} // namespace droce::perf
