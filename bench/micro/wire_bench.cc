/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * lib/wire micro benchmark (Google Benchmark; not a test). Run it with bench/run.
 *
 * - ICRC throughput over 64, 1024 and 4096 covered bytes, next to two references measured in the
 * same run on the same buffers: memcpy of the same length, and zlib's crc32 (the CRC the ICRC is
 * made of, without the masking). Also ISA-L's crc32_gzip_refl alone, to show what the masking
 * costs.
 * - parse_frame() per frame, with and without ICRC verification, and build_frame() per frame (which
 *   always computes the ICRC), for an ACK (62 B frame) and RDMA WRITE ONLY with 1024 and 4096 B.
 *
 * Every benchmark reports bytes processed (so the console shows B/s and the JSON bytes_per_second)
 * and TSC cycles per operation. Each one warms its buffers and code up before it is timed.
 */
#include <benchmark/benchmark.h>
#include <isa-l/crc.h>
#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define DROCE_BENCH_HAVE_TSC 1
#endif

#include "wire/icrc.h"
#include "wire/packet.h"

namespace {

using namespace droce::wire;

constexpr int kWarmupIterations = 2000;

std::uint64_t tsc() noexcept {
#ifdef DROCE_BENCH_HAVE_TSC
    return __rdtsc();
#else
    return 0;
#endif
}

/** Adds "cycles" per iteration, measured with the TSC around the timed loop. */
class CycleCounter {
  public:
    explicit CycleCounter(benchmark::State& state) : state_(state), start_(tsc()) {}
    ~CycleCounter() {
#ifdef DROCE_BENCH_HAVE_TSC
        if (state_.iterations() > 0)
            state_.counters["cycles"] =
                static_cast<double>(tsc() - start_) / static_cast<double>(state_.iterations());
#endif
    }
    CycleCounter(const CycleCounter&) = delete;
    CycleCounter& operator=(const CycleCounter&) = delete;

  private:
    benchmark::State& state_;
    std::uint64_t start_;
};

PathHeaders bench_path() {
    PathHeaders p;
    p.src_mac = {0x02, 0, 0, 0, 0, 1};
    p.dst_mac = {0x02, 0, 0, 0, 0, 2};
    p.src_ip = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1};
    p.dst_ip = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2};
    p.tos = 0x02;
    p.udp_sport = 0xc132;
    return p;
}

PacketFields bench_fields(Opcode op, std::size_t len) {
    PacketFields f;
    f.opcode = op;
    f.dest_qp = 0x000011;
    f.psn = Psn(0x123456);
    f.ack_req = true;
    f.va = 0x7f0000001000;
    f.rkey = 0x1234;
    f.dma_len = static_cast<std::uint32_t>(len);
    f.syndrome = 0x1f;
    f.msn = 7;
    return f;
}

std::vector<std::uint8_t> pattern(std::size_t n) {
    std::vector<std::uint8_t> b(n);
    for (std::size_t i = 0; i < n; ++i)
        b[i] = static_cast<std::uint8_t>(i * 31 + 7);
    return b;
}

/** An IPv4 RoCE frame whose ICRC-covered part (IP header up to the ICRC) is exactly @p covered
 * bytes. */
std::vector<std::uint8_t> frame_covering(std::size_t covered) {
    const std::size_t payload = covered - sizeof(Ipv4Hdr) - sizeof(UdpHdr) - sizeof(Bth);
    const auto data = pattern(payload);
    std::vector<std::uint8_t> f(frame_length(bench_path(), Opcode::RC_SEND_ONLY, payload));
    f.resize(build_frame(bench_path(), bench_fields(Opcode::RC_SEND_ONLY, payload), data, f));
    return f;
}

// ---------------------------------------------------------------------------------------------
// ICRC and its references. The argument is the number of bytes processed.

void BM_Icrc(benchmark::State& state) {
    const auto n = static_cast<std::size_t>(state.range(0));
    const auto frame = frame_covering(n);
    const std::span<const std::uint8_t> l3(frame.data() + sizeof(EthHdr), n);
    if (frame.empty() || icrc_compute(l3, false) != load_icrc(l3.data() + n)) {
        state.SkipWithError("frame set-up failed");
        return;
    }
    for (int i = 0; i < kWarmupIterations; ++i)
        benchmark::DoNotOptimize(icrc_compute(l3, false));
    CycleCounter cycles(state);
    for (auto _ : state)
        benchmark::DoNotOptimize(icrc_compute(l3, false));
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
}

void BM_Memcpy(benchmark::State& state) {
    const auto n = static_cast<std::size_t>(state.range(0));
    const auto src = pattern(n);
    std::vector<std::uint8_t> dst(n);
    for (int i = 0; i < kWarmupIterations; ++i)
        std::memcpy(dst.data(), src.data(), n);
    CycleCounter cycles(state);
    for (auto _ : state) {
        benchmark::DoNotOptimize(dst.data());
        std::memcpy(dst.data(), src.data(), n);
        benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
}

void BM_ZlibCrc32(benchmark::State& state) {
    const auto n = static_cast<std::size_t>(state.range(0));
    const auto src = pattern(n);
    for (int i = 0; i < kWarmupIterations; ++i)
        benchmark::DoNotOptimize(crc32(0L, src.data(), static_cast<uInt>(n)));
    CycleCounter cycles(state);
    for (auto _ : state)
        benchmark::DoNotOptimize(crc32(0L, src.data(), static_cast<uInt>(n)));
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
}

void BM_IsalCrc32GzipRefl(benchmark::State& state) {
    const auto n = static_cast<std::size_t>(state.range(0));
    auto src = pattern(n);
    if (crc32_gzip_refl(0, src.data(), n) != crc32(0L, src.data(), static_cast<uInt>(n))) {
        state.SkipWithError("ISA-L and zlib disagree");
        return;
    }
    for (int i = 0; i < kWarmupIterations; ++i)
        benchmark::DoNotOptimize(crc32_gzip_refl(0, src.data(), n));
    CycleCounter cycles(state);
    for (auto _ : state)
        benchmark::DoNotOptimize(crc32_gzip_refl(0, src.data(), n));
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
}

void crc_sizes(benchmark::internal::Benchmark* b) {
    // 44: an ACK's ICRC coverage from the IP header on (IPv4); 120: a 64 B RDMA WRITE ONLY's;
    // 4136 and 4152: a 4 KiB WRITE MIDDLE's and FIRST's.
    b->ArgName("bytes")->Arg(44)->Arg(64)->Arg(120)->Arg(1024)->Arg(4096)->Arg(4136)->Arg(4152);
}

BENCHMARK(BM_Icrc)->Apply(crc_sizes);
BENCHMARK(BM_Memcpy)->Apply(crc_sizes);
BENCHMARK(BM_ZlibCrc32)->Apply(crc_sizes);
BENCHMARK(BM_IsalCrc32GzipRefl)->Apply(crc_sizes);

// ---------------------------------------------------------------------------------------------
// Frames. The argument is the payload; payload 0 is an ACK (the smallest RoCEv2 frame, 62 B).

Opcode frame_opcode(std::int64_t payload) {
    return payload == 0 ? Opcode::RC_ACKNOWLEDGE : Opcode::RC_RDMA_WRITE_ONLY;
}

void BM_ParseFrame(benchmark::State& state) {
    const auto payload_len = static_cast<std::size_t>(state.range(0));
    const ParseOptions opts{.verify_icrc = state.range(1) != 0};
    const Opcode op = frame_opcode(state.range(0));
    const auto data = pattern(payload_len);
    std::vector<std::uint8_t> frame(frame_length(bench_path(), op, payload_len));
    frame.resize(build_frame(bench_path(), bench_fields(op, payload_len), data, frame));
    ParsedFrame pf;
    if (frame.empty() || parse_frame(frame, pf, opts) != RejectReason::ok ||
        pf.icrc_checked != opts.verify_icrc) {
        state.SkipWithError("frame set-up failed");
        return;
    }
    for (int i = 0; i < kWarmupIterations; ++i)
        benchmark::DoNotOptimize(parse_frame(frame, pf, opts));
    CycleCounter cycles(state);
    for (auto _ : state) {
        benchmark::DoNotOptimize(parse_frame(frame, pf, opts));
        benchmark::DoNotOptimize(pf.bth);
    }
    state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * frame.size()));
    state.counters["frame_bytes"] = static_cast<double>(frame.size());
}

void BM_BuildFrame(benchmark::State& state) {
    const auto payload_len = static_cast<std::size_t>(state.range(0));
    const Opcode op = frame_opcode(state.range(0));
    const PathHeaders path = bench_path();
    const PacketFields fields = bench_fields(op, payload_len);
    const auto data = pattern(payload_len);
    std::vector<std::uint8_t> out(frame_length(path, op, payload_len));
    ParsedFrame pf;
    if (build_frame(path, fields, data, out) != out.size() ||
        parse_frame(out, pf) != RejectReason::ok) {
        state.SkipWithError("frame set-up failed");
        return;
    }
    for (int i = 0; i < kWarmupIterations; ++i)
        benchmark::DoNotOptimize(build_frame(path, fields, data, out));
    CycleCounter cycles(state);
    for (auto _ : state) {
        benchmark::DoNotOptimize(build_frame(path, fields, data, out));
        benchmark::ClobberMemory();
    }
    state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * out.size()));
    state.counters["frame_bytes"] = static_cast<double>(out.size());
}

BENCHMARK(BM_ParseFrame)
    ->ArgNames({"payload", "verify_icrc"})
    ->ArgsProduct({{0, 64, 1024, 4096}, {1, 0}});
BENCHMARK(BM_BuildFrame)->ArgName("payload")->Arg(0)->Arg(64)->Arg(1024)->Arg(4096);

} // namespace

BENCHMARK_MAIN();
