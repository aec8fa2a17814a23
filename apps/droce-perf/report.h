/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * droce-perf's output: perftest's layout (a header block, then one table row) or one JSON object.
 * Control path; writes to the FILE given.
 */
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "perf.h"

namespace droce::perf {

/** "RDMA_Write BW Test" ... */
[[nodiscard]] std::string test_title(const Params& p);
/** The header block: test, device, QPs, depth, MTU, then local and remote QP information. */
void print_header(std::FILE* f, const Params& p, bool server, const std::string& device,
                  std::uint32_t path_mtu, const std::vector<QpInfo>& local,
                  const std::vector<QpInfo>& remote);
/**
 * @p gbps (10^9 bit/s of payload) in perftest's bandwidth unit, "MB/sec": 2^20 bytes per second
 * (perftest divides by 0x100000), so that a figure sits beside a perftest one unconverted.
 */
[[nodiscard]] constexpr double perftest_mb_per_sec(double gbps) noexcept {
    return gbps * 1e9 / 8.0 / 1048576.0;
}
/** The column titles of the bw or lat table (bw: Gb/sec and perftest's MB/sec). */
void print_table_head(std::FILE* f, Mode m);
/** One table row. */
void print_table_row(std::FILE* f, const Params& p, const Result& r);
/** "data verified: ..." and the engine counters that are not zero. */
void print_footer(std::FILE* f, const Params& p, const Result& r, bool server);
/**
 * MRC: the planes' figures (tx / rx per plane, share, retransmits), the rates between plane events,
 * the story of the events (mrc_story, client) and the non-zero MRC counters.
 */
void print_mrc(std::FILE* f, const Params& p, const Result& r, bool server);
/**
 * MRC client: one line per plane event ("plane 2 down at 3.0 s: its traffic moved to planes
 * 0,1,3 (5.98 Gb/s completed after it)") and a last one with the error completions and the
 * retransmissions by cause.
 */
[[nodiscard]] std::vector<std::string> mrc_story(const Result& r);
/** Everything as one JSON object (MRC: per-plane figures, phases, plane events, MRC counters). */
[[nodiscard]] nlohmann::json to_json(const Params& p, const Result& r, bool server,
                                     const std::string& device, std::uint32_t path_mtu);
/** The counters as a JSON object (every counter, zero included). */
[[nodiscard]] nlohmann::json counters_json(const CounterSnapshot& c);

} // namespace droce::perf
