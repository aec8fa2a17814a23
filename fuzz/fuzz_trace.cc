/* SPDX-License-Identifier: BSD-3-Clause */
// libFuzzer target: droce-trace's capture reader (pcap through libpcap, pcapng block by block in
// apps/droce-trace/capture.cc) and its decoder and formatters, on any file contents. The input is
// written to a private temporary file (the reader opens a path) and every frame it yields is
// decoded; the first 32 are also printed as text and JSON, as `droce-trace FILE` and `--json` do.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "scratch_file.h"

#include "capture.h"
#include "trace_format.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string& path = fuzz::write_scratch("trace", data, size);
    droce::trace::CaptureFile cap;
    std::string err;
    if (!cap.open(path, err)) return 0;
    droce::trace::RawFrame raw;
    // A bounded number of frames: a tiny input can announce many empty records.
    for (int n = 0; n < 256; ++n) {
        const auto st = cap.next(raw, err);
        if (st != droce::trace::CaptureFile::Status::frame) break;
        const auto d = droce::trace::decode_frame(raw);
        // Every frame is read and decoded; the first 32 are also printed. Printing (JSON above
        // all) took most of the time on the corpus's captures of a hundred frames and more
        // (441 inputs/s), and a mutation that makes frame 100 odd can make frame 5 odd as well.
        if (n >= 32) continue;
        (void)droce::trace::format_text(d);
        (void)droce::trace::format_json(d, true).dump();
    }
    return 0;
}
