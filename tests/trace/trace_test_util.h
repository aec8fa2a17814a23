/* SPDX-License-Identifier: BSD-3-Clause */
/** @file Helpers for the droce-trace tests: reading the real captures (tests/data/captures),
 * building frames. */
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "capture.h"
#include "trace_explain.h"
#include "trace_format.h"

namespace droce::trace::test {

/** The captures directory (tests/data/captures), from DROCE_CAPTURES_DIR (set by
 * tests/trace/meson.build). */
inline std::string captures_dir() {
    const char* dir = std::getenv("DROCE_CAPTURES_DIR");
    return dir != nullptr ? dir : "";
}

/** Everything the formatter says about one frame, kept after libpcap's buffer is gone. */
struct FrameOutput {
    std::uint64_t index = 0;
    FrameKind kind = FrameKind::skipped;
    wire::RejectReason reason = wire::RejectReason::ok;
    std::string text;
    std::string explained;
    nlohmann::ordered_json json;
    nlohmann::ordered_json json_explained;
};

/** Formats @p raw every way droce-trace can. */
inline FrameOutput format_all(const RawFrame& raw) {
    const DecodedFrame d = decode_frame(raw);
    FrameOutput out;
    out.index = raw.index;
    out.kind = d.kind;
    out.reason = d.reason;
    out.text = format_text(d);
    out.explained = format_explained(d);
    out.json = format_json(d, false);
    out.json_explained = format_json(d, true);
    return out;
}

/** Reads and formats every frame of @p path; fails the test if the file cannot be read. */
inline std::vector<FrameOutput> read_capture(const std::string& path) {
    std::vector<FrameOutput> frames;
    CaptureFile capture;
    std::string error;
    if (!capture.open(path, error)) {
        ADD_FAILURE() << error << " (DROCE_CAPTURES_DIR=" << captures_dir() << ")";
        return frames;
    }
    RawFrame raw;
    for (;;) {
        const CaptureFile::Status st = capture.next(raw, error);
        if (st == CaptureFile::Status::end) break;
        if (st == CaptureFile::Status::error) {
            ADD_FAILURE() << error;
            break;
        }
        frames.push_back(format_all(raw));
    }
    return frames;
}

/** Reads one of the captures in tests/data/captures by file name. */
inline std::vector<FrameOutput> read_shared(const char* file) {
    return read_capture(captures_dir() + "/" + file);
}

/** An IPv4 path 10.0.0.1 > 10.0.0.2 (or IPv6 fd00::1 > fd00::2), UDP source port 0xc123. */
inline wire::PathHeaders test_path(bool ipv6 = false) {
    wire::PathHeaders p;
    p.src_mac = {0x02, 0, 0, 0, 0, 1};
    p.dst_mac = {0x02, 0, 0, 0, 0, 2};
    p.ipv6 = ipv6;
    if (ipv6) {
        p.src_ip = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
        p.dst_ip = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
    } else {
        p.src_ip = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1};
        p.dst_ip = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2};
    }
    p.udp_sport = 0xc123;
    return p;
}

/** Builds one frame with wire::build_frame(); fails the test if it does not fit. */
inline std::vector<std::uint8_t> build(const wire::PacketFields& fields,
                                       std::size_t payload_len = 0,
                                       const wire::PathHeaders& path = test_path()) {
    std::vector<std::uint8_t> payload(payload_len);
    for (std::size_t i = 0; i < payload_len; ++i)
        payload[i] = static_cast<std::uint8_t>(i * 7 + 1);
    std::vector<std::uint8_t> frame(wire::frame_length(path, fields.opcode, payload_len));
    const std::size_t n = wire::build_frame(path, fields, payload, frame);
    EXPECT_EQ(n, frame.size());
    frame.resize(n);
    return frame;
}

/** A RawFrame over @p bytes (Ethernet, index 1, nothing cut off). */
inline RawFrame raw_of(const std::vector<std::uint8_t>& bytes, int link_type = kLinkTypeEthernet) {
    RawFrame r;
    r.index = 1;
    r.link_type = link_type;
    r.bytes = bytes;
    r.wire_length = static_cast<std::uint32_t>(bytes.size());
    return r;
}

/** One UDP GSO send as a capture on lo sees it (drivers/uring gso): the packets' UDP payloads
 *  back to back behind the first packet's headers, the IP and UDP lengths the sum. */
inline std::vector<std::uint8_t> gso_send(const std::vector<std::vector<std::uint8_t>>& packets,
                                          bool ipv6) {
    const std::size_t udp_off = 14 + (ipv6 ? 40 : 20);
    std::vector<std::uint8_t> out(packets[0].begin(), packets[0].begin() + udp_off + 8);
    for (const auto& p : packets)
        out.insert(out.end(), p.begin() + udp_off + 8, p.end());
    const std::size_t udp_len = out.size() - udp_off;
    const auto put16 = [&](std::size_t at, std::size_t v) {
        out[at] = static_cast<std::uint8_t>(v >> 8);
        out[at + 1] = static_cast<std::uint8_t>(v);
    };
    put16(udp_off + 4, udp_len);
    put16(14 + (ipv6 ? 4 : 2), ipv6 ? udp_len : out.size() - 14);
    return out;
}

/** Formats a frame built from @p bytes. */
inline FrameOutput format_bytes(const std::vector<std::uint8_t>& bytes) {
    return format_all(raw_of(bytes));
}

/** True when @p haystack contains @p needle; use in EXPECT_PRED2 or with a message. */
inline bool contains(const std::string& haystack, const std::string& needle) {
    return haystack.find(needle) != std::string::npos;
}

} // namespace droce::trace::test
