/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * A pcapng file writer (IETF draft-ietf-opsawg-pcapng, "PCAP Next Generation Dump File Format"):
 * one Section Header Block, Interface Description Blocks, Enhanced Packet Blocks and Interface
 * Statistics Blocks, in the host's byte order (the byte-order magic tells readers which).
 *
 * Why droce writes the blocks itself rather than with DPDK's rte_pcapng (22.11): rte_pcapng_fdopen
 * writes one interface block per ethdev present at open, named after the ethdev, and
 * rte_pcapng_copy / rte_pcapng_write_packets take an ethdev port id and an rte_mbuf from a
 * mempool. droce's interfaces are device ports (planes), several of which may not be ethdevs at all
 * (the sim fabric, the impairment stage, a shaper in front of an ethdev), a frame sent by
 * reference is headers plus application memory rather than one mbuf, and the sim tests run with
 * no EAL. rte_pcapng 22.11 has no call to describe an interface of one's own (later releases added
 * rte_pcapng_add_interface, still per ethdev port id). libpcap 1.10's pcap_dump_open writes pcap,
 * not pcapng. The four block layouts are short and fixed; what tshark and Wireshark read back is
 * checked by tests/capture.
 *
 * Thread rules: one thread uses a PcapngWriter at a time (the capture writer thread). Blocks are
 * gathered in a buffer (allocated once, at open) and written with write(2) when it fills and on
 * flush(); every call is control path (may block on the disk). Errors are sticky: after the first
 * failed write the writer drops what it is given and error() returns the errno.
 */
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace droce::capture {

/** Enhanced Packet Block flags word (epb_flags), bits 0-1: the direction. */
enum class EpbDirection : std::uint32_t { unknown = 0, inbound = 1, outbound = 2 };

/** Statistics of one interface for its Interface Statistics Block. */
struct InterfaceStats {
    std::uint64_t start_ns = 0; ///< ns since the Unix epoch: the capture started (isb_starttime)
    std::uint64_t end_ns = 0;   ///< ns since the Unix epoch: the capture ended (isb_endtime)
    std::uint64_t received = 0; ///< frames seen on the interface, both directions (isb_ifrecv)
    std::uint64_t dropped = 0;  ///< of those, frames not in the file (isb_ifdrop)
    std::string comment;        ///< opt_comment, empty = none
};

class PcapngWriter {
  public:
    PcapngWriter() = default;
    ~PcapngWriter();
    PcapngWriter(const PcapngWriter&) = delete;
    PcapngWriter& operator=(const PcapngWriter&) = delete;

    /**
     * Creates (or truncates) @p path and writes the Section Header Block with shb_userappl
     * @p application, shb_os (uname) and opt_comment @p comment (omitted when empty).
     * @return 0, or the errno of open(2)/write(2) (EEXIST never: the file is truncated).
     */
    [[nodiscard]] int open(const std::string& path, std::string_view application,
                           std::string_view comment);
    /**
     * Writes an Interface Description Block: LINKTYPE_ETHERNET, nanosecond timestamps
     * (if_tsresol 9), @p snaplen (bytes kept per frame; 0 = no limit), if_name @p name,
     * if_description @p description (omitted when empty) and if_MACaddr @p mac (when not null).
     * @return the interface id the packets of this interface carry (0, 1, 2 ... in call order).
     */
    std::uint32_t add_interface(std::string_view name, std::string_view description,
                                const std::uint8_t* mac, std::uint32_t snaplen);
    /**
     * Writes an Enhanced Packet Block: interface @p iface, timestamp @p ts_ns (ns since the Unix
     * epoch), the @p data kept (data.size() <= @p orig_len, the frame's length on the wire),
     * epb_flags with the direction, and opt_comment @p comment when not empty.
     */
    void write_packet(std::uint32_t iface, std::uint64_t ts_ns, std::uint32_t orig_len,
                      std::span<const std::uint8_t> data, EpbDirection dir,
                      std::string_view comment = {});
    /** Writes an Interface Statistics Block for @p iface at time @p ts_ns. */
    void write_stats(std::uint32_t iface, std::uint64_t ts_ns, const InterfaceStats& st);
    /** Writes what is buffered. @return 0 or the sticky errno. */
    int flush();
    /** flush() and close(2). @return 0 or the first errno seen. No-op when not open. */
    int close();
    /** The first errno a write or open failed with, 0 if none. */
    [[nodiscard]] int error() const noexcept { return error_; }
    [[nodiscard]] bool is_open() const noexcept { return fd_ >= 0; }
    /** Bytes handed to write(2) successfully so far. */
    [[nodiscard]] std::uint64_t bytes_written() const noexcept { return written_; }

  private:
    void put32(std::uint32_t v);
    void put16(std::uint16_t v);
    void put_bytes(std::span<const std::uint8_t> b);
    void put_option(std::uint16_t code, std::span<const std::uint8_t> value);
    void put_option(std::uint16_t code, std::string_view value);
    /** Starts a block of @p type; end_block() fills in its length (both length words). */
    std::size_t begin_block(std::uint32_t type);
    void end_block(std::size_t start);
    void maybe_flush();

    int fd_ = -1;
    int error_ = 0;
    std::uint32_t interfaces_ = 0;
    std::uint64_t written_ = 0;
    std::vector<std::uint8_t> buf_;
};

} // namespace droce::capture
