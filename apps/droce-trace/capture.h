/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * Reading capture files for droce-trace.
 *
 * A thin RAII owner of a libpcap offline handle. libpcap reads classic pcap and pcapng (and ERF and
 * a few other formats). pcapng files named on the command line are read block by block here
 * instead (pcapng draft, draft-ietf-opsawg-pcapng: SHB, IDB, EPB, SPB), because libpcap's API
 * hides what droce's own capture puts in them (lib/capture/capture.h): the interface a frame was
 * seen on (one interface per device port, if_name "<device>/port<N>", so the plane) and the
 * direction in epb_flags. Standard input always goes through libpcap.
 */
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "trace_format.h"

struct pcap; // libpcap's pcap_t, kept out of this header

namespace droce::trace {

/**
 * One open capture file. Move-only; the handle is closed by the destructor.
 * Not thread safe: one reader per thread.
 */
class CaptureFile {
  public:
    /** One pcapng interface (Interface Description Block), in interface id order. */
    struct Interface {
        int link_type = kLinkTypeEthernet; ///< LINKTYPE_* of its frames
        std::string name;                  ///< if_name, empty when absent
        /** The device port (plane) index when if_name is droce's "<device>/port<N>" (N-1). */
        std::optional<std::uint32_t> port;
        std::uint8_t tsresol = 6; ///< if_tsresol: 10^-v s, or 2^-(v & 0x7f) s when bit 7 is set
    };

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
    [[nodiscard]] bool is_open() const noexcept { return handle_ != nullptr || ng_open_; }

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

    /** The interfaces a pcapng file read here has described so far (empty for libpcap reads). */
    [[nodiscard]] const std::vector<Interface>& interfaces() const noexcept { return ifaces_; }

    /**
     * Frames the capturing side dropped, as the pcapng interface statistics read so far say
     * (isb_ifdrop, the last of each interface, summed; droce counts its capture ring's
     * overflows there): frames that happened but are not in the file. 0 for libpcap reads.
     */
    [[nodiscard]] std::uint64_t dropped() const noexcept {
        std::uint64_t n = 0;
        for (const std::uint64_t d : if_dropped_)
            n += d;
        return n;
    }

  private:
    bool open_pcapng(const std::string& path, std::string& error);
    Status next_pcapng(RawFrame& frame, std::string& error);

    pcap* handle_ = nullptr;
    /** A pcapng file read here: its bytes, the offset of the next block, whether its byte order
     *  is not the host's, and the interfaces of the current section. */
    std::vector<std::uint8_t> ng_;
    std::size_t ng_pos_ = 0;
    bool ng_swap_ = false;
    bool ng_open_ = false;
    std::vector<Interface> ifaces_;
    std::vector<std::uint64_t> if_dropped_; ///< per interface id: its last isb_ifdrop
    std::uint64_t count_ = 0;               ///< frames returned so far
    std::string path_;
};

} // namespace droce::trace
