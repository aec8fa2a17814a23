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
/** The column titles of the bw or lat table. */
void print_table_head(std::FILE* f, Mode m);
/** One table row. */
void print_table_row(std::FILE* f, const Params& p, const Result& r);
/** "data verified: ..." and the engine counters that are not zero. */
void print_footer(std::FILE* f, const Params& p, const Result& r, bool server);
/** Everything as one JSON object. */
[[nodiscard]] nlohmann::json to_json(const Params& p, const Result& r, bool server,
                                     const std::string& device, std::uint32_t path_mtu);
/** The counters as a JSON object (every counter, zero included). */
[[nodiscard]] nlohmann::json counters_json(const CounterSnapshot& c);

} // namespace droce::perf
