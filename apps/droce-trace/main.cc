/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * droce-trace: decode RoCEv2 packets in capture files and explain them field by field.
 *
 *   droce-trace read FILE             one line per frame
 *   droce-trace read --json FILE      one JSON object per frame (JSON Lines)
 *   droce-trace read --explain FILE   each line followed by a sentence per header
 *
 * Exit status: 0 on success, 1 when the file cannot be opened or read, 2 on bad usage.
 */
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>

#include "capture.h"
#include "trace_explain.h"
#include "trace_format.h"

namespace {

constexpr int kExitOk = 0;
constexpr int kExitFile = 1;
constexpr int kExitUsage = 2;

struct ReadOptions {
    std::string file;
    bool json = false;
    bool explain = false;
};

bool write_out(const std::string& s) {
    return std::fwrite(s.data(), 1, s.size(), stdout) == s.size() &&
           std::fputc('\n', stdout) != EOF;
}

int run_read(const ReadOptions& opts) {
    using namespace droce::trace;
    CaptureFile capture;
    std::string error;
    if (!capture.open(opts.file, error)) {
        std::fprintf(stderr, "droce-trace: %s\n", error.c_str());
        return kExitFile;
    }
    RawFrame raw;
    CnpCauses cnp_causes; // --explain: why each CNP was sent, from the frames before it
    for (;;) {
        const CaptureFile::Status st = capture.next(raw, error);
        if (st == CaptureFile::Status::end) break;
        if (st == CaptureFile::Status::error) {
            std::fflush(stdout);
            std::fprintf(stderr, "droce-trace: %s\n", error.c_str());
            return kExitFile;
        }
        const DecodedFrame frame = decode_frame(raw);
        const std::string why = opts.explain ? cnp_causes.observe(frame) : std::string();
        std::string line;
        if (opts.json) {
            nlohmann::ordered_json j = format_json(frame, opts.explain);
            if (!why.empty()) j["why"] = why;
            line = j.dump();
        } else {
            line = opts.explain ? format_explained(frame) : format_text(frame);
            if (!why.empty()) line += "\n    why         " + why;
        }
        if (!write_out(line)) {
            std::fprintf(stderr, "droce-trace: cannot write the output\n");
            return kExitFile;
        }
    }
    if (std::fflush(stdout) != 0) {
        std::fprintf(stderr, "droce-trace: cannot write the output\n");
        return kExitFile;
    }
    return kExitOk;
}

} // namespace

int main(int argc, char** argv) {
    CLI::App app{"Decode RoCEv2 packets in capture files and explain them field by field.",
                 "droce-trace"};
    app.set_version_flag("--version", DROCE_VERSION);
    app.require_subcommand(1);

    ReadOptions opts;
    CLI::App* read = app.add_subcommand(
        "read", "Print one line per frame of a pcap or pcapng file; frames that are not RoCEv2 "
                "(UDP destination port 4791) are listed as skipped.");
    read->add_option("file", opts.file, "capture file, pcap or pcapng ('-' reads standard input)")
        ->required();
    read->add_flag("--json", opts.json, "print one JSON object per frame (JSON Lines)");
    read->add_flag("--explain", opts.explain,
                   "after each frame, one indented sentence per header on what it is for and what "
                   "its values mean (with --json: an \"explain\" array)");

    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        // --help and --version come here too, with exit code 0.
        return app.exit(e) == 0 ? kExitOk : kExitUsage;
    }
    if (read->parsed()) return run_read(opts);
    return kExitUsage;
}
