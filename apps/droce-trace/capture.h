/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * Reading capture files for droce-trace.
 *
 * A thin RAII owner of a libpcap offline handle. libpcap reads classic pcap and pcapng (and ERF and
 * a few other formats); droce does not parse capture files itself.
 */
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "trace_format.h"

struct pcap; // libpcap's pcap_t, kept out of this header

namespace droce::trace {

/**
 * One open capture file. Move-only; the handle is closed by the destructor.
 * Not thread safe: one reader per thread.
 */
class CaptureFile {
  public:
    /** Outcome of next(). */
    enum class Status : std::uint8_t { frame, end, error };

    CaptureFile() noexcept = default;
    ~CaptureFile();
    CaptureFile(CaptureFile&& other) noexcept;
    CaptureFile& operator=(CaptureFile&& other) noexcept;
    CaptureFile(const CaptureFile&) = delete;
    CaptureFile& operator=(const CaptureFile&) = delete;

    /**
     * Opens @p path ("-" reads standard input) with pcap_open_offline().
     * @param[out] error on failure, a message naming the file and libpcap's reason.
     * @return true when the file is open and its header was understood.
     */
    [[nodiscard]] bool open(const std::string& path, std::string& error);

    /** True between a successful open() and destruction. */
    [[nodiscard]] bool is_open() const noexcept { return handle_ != nullptr; }

    /** The file's link-layer type (a pcap DLT_* value, 1 = Ethernet); -1 when not open. */
    [[nodiscard]] int link_type() const noexcept;

    /**
     * Reads the next frame.
     * @param[out] frame on Status::frame, the frame; its bytes belong to libpcap and stay valid
     *             only until the next call to next() or the destruction of this object.
     * @param[out] error on Status::error, libpcap's message (for example a truncated file).
     * @return Status::frame, Status::end after the last frame, or Status::error.
     */
    [[nodiscard]] Status next(RawFrame& frame, std::string& error);

  private:
    pcap* handle_ = nullptr;
    std::uint64_t count_ = 0; ///< frames returned so far
    std::string path_;
};

} // namespace droce::trace
