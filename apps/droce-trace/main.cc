/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * droce-trace: decode RoCEv2 packets in capture files and explain them field by field.
 *
 *   droce-trace read FILE             one line per frame
 *   droce-trace read --json FILE      one JSON object per frame (JSON Lines)
 *   droce-trace read --explain FILE   each line followed by a sentence per header
 *   droce-trace explain FILE [--json] [--qp QPN] [--html OUT.html]
 *                                     the capture as a story per connection (flow_explain.h)
 *   droce-trace [OPTIONS] FILE        the same as explain (what a newcomer types first)
 *
 * Exit status: 0 on success, 1 when the file cannot be opened or read (explain: a damaged file
 * still prints the story of the frames before the damage) or explain --qp names no connection in
 * it, 2 on bad usage.
 */
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "capture.h"
#include "flow_explain.h"
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
        DecodedFrame whole = decode_frame(raw);
        // A UDP GSO send captured before the kernel cut it: its packets, one line each.
        std::vector<std::vector<std::uint8_t>> segments;
        if (whole.kind == FrameKind::rejected) segments = split_gso_send(raw);
        for (std::size_t k = 0; k < std::max<std::size_t>(segments.size(), 1); ++k) {
            RawFrame seg = raw;
            if (!segments.empty()) {
                seg.bytes = segments[k];
                seg.wire_length = static_cast<std::uint32_t>(segments[k].size());
                seg.gso_segment = static_cast<std::uint16_t>(k + 1);
                seg.gso_segments = static_cast<std::uint16_t>(segments.size());
            }
            const DecodedFrame frame = segments.empty() ? std::move(whole) : decode_frame(seg);
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
    }
    if (std::fflush(stdout) != 0) {
        std::fprintf(stderr, "droce-trace: cannot write the output\n");
        return kExitFile;
    }
    return kExitOk;
}

struct ExplainOptions {
    std::string file;
    bool json = false;
    std::string qp;
    std::string html;
};

int run_explain(const ExplainOptions& opts) {
    using namespace droce::trace;
    StoryOptions so;
    if (!opts.qp.empty()) {
        // Hex with 0x (as droce-trace prints QPNs) or decimal.
        char* end = nullptr;
        const unsigned long v = std::strtoul(opts.qp.c_str(), &end, 0);
        if (end == opts.qp.c_str() || *end != '\0' || v > 0xffffff) {
            std::fprintf(stderr, "droce-trace: --qp %s: not a QPN (0..0xffffff)\n",
                         opts.qp.c_str());
            return kExitUsage;
        }
        so.qp = static_cast<std::uint32_t>(v);
    }
    CaptureFile capture;
    std::string error;
    if (!capture.open(opts.file, error)) {
        std::fprintf(stderr, "droce-trace: %s\n", error.c_str());
        return kExitFile;
    }
    FlowExplainer explainer;
    RawFrame raw;
    // A capture cut short (its writer killed, a copy interrupted) still tells the story of the
    // frames before the damage, as tshark does; the exit status still says the file is bad.
    std::string damage;
    std::uint64_t read_frames = 0;
    for (;;) {
        const CaptureFile::Status st = capture.next(raw, error);
        if (st == CaptureFile::Status::end) break;
        if (st == CaptureFile::Status::error) {
            damage = error;
            break;
        }
        explainer.add(raw); // a UDP GSO send too: the explainer takes its packets
        ++read_frames;
    }
    if (!damage.empty()) {
        std::fprintf(stderr, "droce-trace: %s\n", damage.c_str());
        if (read_frames == 0) return kExitFile;
        std::fprintf(stderr, "droce-trace: the story below covers the %llu frames before it\n",
                     static_cast<unsigned long long>(read_frames));
    }
    FlowStory story = explainer.finish(opts.file);
    story.capture_dropped = capture.dropped();
    if (so.qp) {
        bool found = false;
        for (const FlowConnection& c : story.connections)
            found = found || story_selects(c, so);
        if (!found) {
            std::fprintf(stderr, "droce-trace: no connection in %s has QPN 0x%06x at either end\n",
                         opts.file.c_str(), *so.qp);
            return kExitFile;
        }
    }
    if (!opts.html.empty()) {
        const std::string page = story_html(story, so);
        std::FILE* f = std::fopen(opts.html.c_str(), "wb");
        if (f == nullptr || std::fwrite(page.data(), 1, page.size(), f) != page.size() ||
            std::fclose(f) != 0) {
            std::fprintf(stderr, "droce-trace: cannot write '%s'\n", opts.html.c_str());
            return kExitFile;
        }
    }
    const std::string out = opts.json ? story_json(story, so).dump(1) : story_text(story, so);
    if (!write_out(out) || std::fflush(stdout) != 0) {
        std::fprintf(stderr, "droce-trace: cannot write the output\n");
        return kExitFile;
    }
    return damage.empty() ? kExitOk : kExitFile;
}

/** Whether @p arg, the first argument, is one droce-trace's parser takes before a subcommand (or
 *  is one); anything else (a file, explain's options) is given to explain. */
bool parsed_as_written(std::string_view arg) {
    return arg == "read" || arg == "explain" || arg == "-h" || arg == "--help" ||
           arg == "--version";
}

} // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr,
                     "usage: droce-trace FILE        tell a capture (pcap or pcapng) as a story "
                     "per connection (the same as droce-trace explain FILE)\n"
                     "       droce-trace read FILE   decode it frame by frame\n"
                     "droce-trace --help: every option\n");
        return kExitUsage;
    }
    // `droce-trace FILE` and `droce-trace --html OUT FILE` mean explain; CLI11 alone would say
    // only "A subcommand is required".
    std::vector<char*> args(argv, argv + argc);
    std::string explain_word = "explain";
    if (!parsed_as_written(argv[1])) args.insert(args.begin() + 1, explain_word.data());

    CLI::App app{"Decode RoCEv2 packets in capture files and explain them field by field. "
                 "droce-trace FILE (with explain's options) is droce-trace explain FILE.",
                 "droce-trace"};
    app.set_version_flag("--version", "droce-trace (droce) " DROCE_VERSION);
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

    ExplainOptions eopts;
    CLI::App* explain = app.add_subcommand(
        "explain", "Tell a capture as a story, per connection (QP): packets in order with long "
                   "in-order runs collapsed, why each NAK was sent, which packets were sent again "
                   "and why (sequence NAK, timeout, RNR, MRC SACK hole, a plane going down), "
                   "CNPs and the rate around them, the plane of each MRC packet.");
    explain
        ->add_option("file", eopts.file,
                     "capture file, pcap or pcapng ('-' reads standard "
                     "input, without pcapng interfaces and directions)")
        ->required();
    explain->add_flag("--json", eopts.json,
                      "print the story as one JSON object (events and counts)");
    explain->add_option("--qp", eopts.qp,
                        "only the connections with this QPN at either end (0x11 or 17)");
    explain->add_option("--html", eopts.html,
                        "also write one self-contained HTML page: the story and a timeline per "
                        "connection (time on x, PSN on y, a colour per plane)");

    try {
        app.parse(static_cast<int>(args.size()), args.data());
    } catch (const CLI::ParseError& e) {
        // --help and --version come here too, with exit code 0.
        return app.exit(e) == 0 ? kExitOk : kExitUsage;
    }
    if (read->parsed()) return run_read(opts);
    if (explain->parsed()) return run_explain(eopts);
    return kExitUsage;
}
