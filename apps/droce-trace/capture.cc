/* SPDX-License-Identifier: BSD-3-Clause */
#include "capture.h"

#include <pcap/pcap.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <utility>

namespace droce::trace {

namespace {

// pcapng block types and option codes (draft-ietf-opsawg-pcapng sections 4 and 3.5).
constexpr std::uint32_t kBlockShb = 0x0a0d0d0a;
constexpr std::uint32_t kBlockIdb = 1;
constexpr std::uint32_t kBlockSpb = 3;
constexpr std::uint32_t kBlockEpb = 6;
constexpr std::uint32_t kBlockIsb = 5;
constexpr std::uint16_t kOptIsbIfDrop = 5; ///< frames the interface dropped (droce: ring full)
constexpr std::uint32_t kByteOrderMagic = 0x1a2b3c4d;
constexpr std::uint16_t kOptEnd = 0;
constexpr std::uint16_t kOptIfName = 2;
constexpr std::uint16_t kOptIfTsresol = 9;
constexpr std::uint16_t kOptEpbFlags = 2;

std::uint32_t bswap32(std::uint32_t v) noexcept {
    return __builtin_bswap32(v);
}

/** The device port of a droce interface name "<device>/port<N>" (N = port index + 1). */
std::optional<std::uint32_t> droce_port(const std::string& name) {
    const std::size_t at = name.rfind("/port");
    if (at == std::string::npos || at + 5 >= name.size()) return std::nullopt;
    std::uint32_t n = 0;
    for (std::size_t i = at + 5; i < name.size(); ++i) {
        if (name[i] < '0' || name[i] > '9' || n > 1000) return std::nullopt;
        n = n * 10 + static_cast<std::uint32_t>(name[i] - '0');
    }
    if (n == 0) return std::nullopt;
    return n - 1;
}

/** @p ts in units of @p tsresol (if_tsresol) to ns. */
std::int64_t ts_to_ns(std::uint64_t ts, std::uint8_t tsresol) noexcept {
    if (tsresol & 0x80u) {
        const unsigned shift = tsresol & 0x7fu;
        return static_cast<std::int64_t>(static_cast<unsigned __int128>(ts) * 1000000000u >>
                                         (shift > 127 ? 127 : shift));
    }
    std::uint64_t v = ts;
    if (tsresol <= 9) {
        for (unsigned i = tsresol; i < 9; ++i)
            v *= 10;
    } else {
        for (unsigned i = 9; i < tsresol; ++i)
            v /= 10;
    }
    return static_cast<std::int64_t>(v);
}

} // namespace

CaptureFile::~CaptureFile() {
    if (handle_ != nullptr) pcap_close(handle_);
}

CaptureFile::CaptureFile(CaptureFile&& other) noexcept
    : handle_(std::exchange(other.handle_, nullptr)), ng_(std::move(other.ng_)),
      ng_pos_(other.ng_pos_), ng_swap_(other.ng_swap_),
      ng_open_(std::exchange(other.ng_open_, false)), ifaces_(std::move(other.ifaces_)),
      count_(other.count_), path_(std::move(other.path_)) {}

CaptureFile& CaptureFile::operator=(CaptureFile&& other) noexcept {
    if (this != &other) {
        if (handle_ != nullptr) pcap_close(handle_);
        handle_ = std::exchange(other.handle_, nullptr);
        ng_ = std::move(other.ng_);
        ng_pos_ = other.ng_pos_;
        ng_swap_ = other.ng_swap_;
        ng_open_ = std::exchange(other.ng_open_, false);
        ifaces_ = std::move(other.ifaces_);
        count_ = other.count_;
        path_ = std::move(other.path_);
    }
    return *this;
}

bool CaptureFile::open(const std::string& path, std::string& error) {
    if (path != "-") {
        // pcapng starts with the Section Header Block type, the same in either byte order.
        std::FILE* f = std::fopen(path.c_str(), "rb");
        std::uint32_t magic = 0;
        if (f != nullptr) {
            const bool got = std::fread(&magic, sizeof magic, 1, f) == 1;
            std::fclose(f);
            if (got && magic == kBlockShb) return open_pcapng(path, error);
        }
    }
    char errbuf[PCAP_ERRBUF_SIZE] = {};
    pcap* h =
        pcap_open_offline_with_tstamp_precision(path.c_str(), PCAP_TSTAMP_PRECISION_NANO, errbuf);
    if (h == nullptr) {
        error = "cannot open '" + path + "': " + errbuf;
        return false;
    }
    if (handle_ != nullptr) pcap_close(handle_);
    handle_ = h;
    ng_open_ = false;
    ng_.clear();
    ifaces_.clear();
    count_ = 0;
    path_ = path;
    return true;
}

bool CaptureFile::open_pcapng(const std::string& path, std::string& error) {
    std::ifstream in(path, std::ios::binary);
    std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                    std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) {
        error = "cannot read '" + path + "'";
        return false;
    }
    if (handle_ != nullptr) pcap_close(handle_);
    handle_ = nullptr;
    ng_ = std::move(bytes);
    ng_pos_ = 0;
    ng_swap_ = false;
    ng_open_ = true;
    ifaces_.clear();
    count_ = 0;
    path_ = path;
    return true;
}

CaptureFile::Status CaptureFile::next_pcapng(RawFrame& frame, std::string& error) {
    auto u32 = [&](std::size_t off) {
        std::uint32_t v;
        std::memcpy(&v, ng_.data() + off, 4);
        return ng_swap_ ? bswap32(v) : v;
    };
    auto u16 = [&](std::size_t off) {
        std::uint16_t v;
        std::memcpy(&v, ng_.data() + off, 2);
        return ng_swap_ ? static_cast<std::uint16_t>(__builtin_bswap16(v)) : v;
    };
    auto fail = [&](const std::string& why) {
        error = "error reading '" + path_ + "' after frame " + std::to_string(count_) + ": " + why;
        return Status::error;
    };
    // Options run from @p off to @p end: code, length, value padded to 4 bytes.
    auto options = [&](std::size_t off, std::size_t end, auto&& each) {
        while (off + 4 <= end) {
            const std::uint16_t code = u16(off);
            const std::uint16_t len = u16(off + 2);
            if (code == kOptEnd || off + 4 + len > end) break;
            each(code, off + 4, len);
            off += 4 + ((len + 3u) & ~3u);
        }
    };
    while (ng_pos_ < ng_.size()) {
        if (ng_.size() - ng_pos_ < 12) return fail("truncated block header");
        std::uint32_t type;
        std::memcpy(&type, ng_.data() + ng_pos_, 4);
        if (type == kBlockShb) {
            // A new section: its byte-order magic decides how everything after it is read.
            std::uint32_t bom;
            std::memcpy(&bom, ng_.data() + ng_pos_ + 8, 4);
            if (bom == kByteOrderMagic) {
                ng_swap_ = false;
            } else if (bom == bswap32(kByteOrderMagic)) {
                ng_swap_ = true;
            } else {
                return fail("bad byte-order magic in a section header");
            }
            ifaces_.clear();
        } else if (ng_swap_) {
            type = bswap32(type);
        }
        const std::uint32_t len = u32(ng_pos_ + 4);
        if (len < 12 || len % 4 != 0 || len > ng_.size() - ng_pos_)
            return fail("bad block length " + std::to_string(len));
        const std::size_t b = ng_pos_;
        const std::size_t end = b + len - 4; // before the trailing length word
        ng_pos_ += len;
        if (type == kBlockIdb && len >= 20) {
            Interface ifc;
            ifc.link_type = u16(b + 8);
            options(b + 16, end, [&](std::uint16_t code, std::size_t at, std::uint16_t n) {
                if (code == kOptIfName) {
                    ifc.name.assign(reinterpret_cast<const char*>(ng_.data() + at), n);
                    while (!ifc.name.empty() && ifc.name.back() == '\0')
                        ifc.name.pop_back();
                } else if (code == kOptIfTsresol && n >= 1) {
                    ifc.tsresol = ng_[at];
                }
            });
            ifc.port = droce_port(ifc.name);
            ifaces_.push_back(std::move(ifc));
            continue;
        }
        if (type == kBlockIsb && len >= 24) {
            // Interface statistics: isb_ifdrop is cumulative, so the last one of an interface
            // counts (droce writes one per interface when its capture stops).
            const std::uint32_t iface = u32(b + 8);
            // Only for an interface a block described: the ID is the file's word, and sizing the
            // table by it let a 100-byte file ask for 32 GiB (fuzz_trace, 2026-12-04).
            if (iface >= ifaces_.size()) continue;
            options(b + 20, end, [&](std::uint16_t code, std::size_t at, std::uint16_t n) {
                if (code != kOptIsbIfDrop || n != 8) return;
                std::uint64_t v;
                std::memcpy(&v, ng_.data() + at, 8);
                if (ng_swap_) v = __builtin_bswap64(v);
                if (iface >= if_dropped_.size()) if_dropped_.resize(iface + 1, 0);
                if_dropped_[iface] = v;
            });
            continue;
        }
        if (type != kBlockEpb && type != kBlockSpb) continue; // name resolution, custom ...
        std::uint32_t iface = 0, caplen = 0, origlen = 0;
        std::uint64_t ts = 0;
        std::size_t data = 0;
        if (type == kBlockEpb) {
            if (len < 32) return fail("short enhanced packet block");
            iface = u32(b + 8);
            ts = std::uint64_t{u32(b + 12)} << 32 | u32(b + 16);
            caplen = u32(b + 20);
            origlen = u32(b + 24);
            data = b + 28;
        } else {
            if (len < 16) return fail("short simple packet block");
            origlen = u32(b + 8);
            data = b + 12;
            caplen = std::min<std::uint32_t>(origlen, static_cast<std::uint32_t>(end - data));
        }
        if (caplen > end - data) return fail("packet data past its block");
        if (iface >= ifaces_.size())
            return fail("packet of undescribed interface " + std::to_string(iface));
        frame = RawFrame{};
        frame.index = ++count_;
        frame.link_type = ifaces_[iface].link_type;
        frame.bytes = std::span<const std::uint8_t>(ng_.data() + data, caplen);
        frame.wire_length = origlen;
        frame.if_id = iface;
        if (ifaces_[iface].port) frame.interface = *ifaces_[iface].port;
        if (type == kBlockEpb) {
            frame.ts_ns = ts_to_ns(ts, ifaces_[iface].tsresol);
            const std::size_t opts = data + ((caplen + 3u) & ~3u);
            options(opts, end, [&](std::uint16_t code, std::size_t at, std::uint16_t n) {
                if (code == kOptEpbFlags && n == 4) frame.direction = u32(at) & 3u;
            });
        }
        return Status::frame;
    }
    return Status::end;
}

int CaptureFile::link_type() const noexcept {
    if (ng_open_) return ifaces_.empty() ? kLinkTypeEthernet : ifaces_.front().link_type;
    return handle_ != nullptr ? pcap_datalink(handle_) : -1;
}

CaptureFile::Status CaptureFile::next(RawFrame& frame, std::string& error) {
    if (ng_open_) return next_pcapng(frame, error);
    if (handle_ == nullptr) {
        error = "no capture file is open";
        return Status::error;
    }
    pcap_pkthdr* hdr = nullptr;
    const u_char* data = nullptr;
    const int rc = pcap_next_ex(handle_, &hdr, &data);
    if (rc == PCAP_ERROR_BREAK) return Status::end; // -2: no more frames in a savefile
    if (rc != 1) {
        error = "error reading '" + path_ + "' after frame " + std::to_string(count_) + ": " +
                pcap_geterr(handle_);
        return Status::error;
    }
    ++count_;
    frame = RawFrame{};
    frame.index = count_;
    frame.link_type = pcap_datalink(handle_);
    frame.bytes = std::span<const std::uint8_t>(data, hdr->caplen);
    frame.wire_length = hdr->len;
    // Opened with nanosecond precision: tv_usec holds nanoseconds.
    frame.ts_ns = std::int64_t{hdr->ts.tv_sec} * 1000000000 + hdr->ts.tv_usec;
    return Status::frame;
}

} // namespace droce::trace
