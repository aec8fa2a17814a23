/* SPDX-License-Identifier: BSD-3-Clause */
#include "report.h"

#include <cinttypes>

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

void print_qp(std::FILE* f, const char* which, const QpInfo& i) {
    std::fprintf(f, " %s address: QPN 0x%04x PSN 0x%06x RKey 0x%08x VAddr 0x%016" PRIx64 "\n",
                 which, i.qpn, i.psn, i.rkey, i.va);
    std::fprintf(f, " GID: %s\n", gid_text(i.gid).c_str());
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
    std::fprintf(f, " Connection type : %-12s Using SRQ      : OFF\n", "RC");
    if (p.mode == Mode::bw) std::fprintf(f, " TX depth        : %u\n", p.tx_depth);
    std::fprintf(f, " Mtu             : %u[B]\n", path_mtu);
    std::fprintf(f, " Link type       : Ethernet\n");
    std::fprintf(f, " GID index       : 0\n");
    std::fprintf(f, " Max inline data : 0[B]\n");
    std::fprintf(f, " Data ex. method : Ethernet (TCP)\n");
    std::fprintf(f, " Verify data     : %s\n", p.verify ? "ON" : "OFF");
    std::fprintf(f, "%s", kRule);
    for (const QpInfo& i : local)
        print_qp(f, "local", i);
    for (const QpInfo& i : remote)
        print_qp(f, "remote", i);
    std::fprintf(f, "%s", kRule);
    std::fflush(f);
}

void print_table_head(std::FILE* f, Mode m) {
    if (m == Mode::bw)
        std::fprintf(
            f,
            " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n");
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
        std::fprintf(f, " %-10u %-10" PRIu64 "     %-18.2f %-20.2f %-.6f\n", bytes, iters,
                     r.bw_peak_gbps, r.bw_avg_gbps, r.msg_rate_mpps);
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
    (void)server;
    std::fprintf(f, "%s", kRule);
    std::fflush(f);
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
    j["counters"] = counters_json(r.counters);
    if (!r.impair.empty()) {
        nlohmann::json im = nlohmann::json::object();
        for (const auto& [name, v] : r.impair)
            im[name] = v;
        j["impair"] = im;
    }
    return j;
}

} // namespace droce::perf
