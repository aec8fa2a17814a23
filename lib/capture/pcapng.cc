/* SPDX-License-Identifier: BSD-3-Clause */
#include "capture/pcapng.h"

#include <fcntl.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace droce::capture {

namespace {

// Block types and option codes (draft-ietf-opsawg-pcapng sections 4.1-4.6).
constexpr std::uint32_t kSectionHeaderBlock = 0x0A0D0D0A;
constexpr std::uint32_t kInterfaceDescriptionBlock = 0x00000001;
constexpr std::uint32_t kInterfaceStatisticsBlock = 0x00000005;
constexpr std::uint32_t kEnhancedPacketBlock = 0x00000006;
constexpr std::uint32_t kByteOrderMagic = 0x1A2B3C4D;
constexpr std::uint16_t kLinkTypeEthernet = 1;

constexpr std::uint16_t kOptEnd = 0;
constexpr std::uint16_t kOptComment = 1;
constexpr std::uint16_t kShbOs = 3;
constexpr std::uint16_t kShbUserAppl = 4;
constexpr std::uint16_t kIfName = 2;
constexpr std::uint16_t kIfDescription = 3;
constexpr std::uint16_t kIfMacAddr = 6;
constexpr std::uint16_t kIfTsResol = 9;
constexpr std::uint16_t kEpbFlags = 2;
constexpr std::uint16_t kIsbStartTime = 2;
constexpr std::uint16_t kIsbEndTime = 3;
constexpr std::uint16_t kIsbIfRecv = 4;
constexpr std::uint16_t kIsbIfDrop = 5;

/** Buffered bytes that trigger a write(2). */
constexpr std::size_t kFlushAt = 1u << 20;

constexpr std::size_t pad4(std::size_t n) noexcept {
    return (n + 3) & ~std::size_t{3};
}

} // namespace

PcapngWriter::~PcapngWriter() {
    (void)close();
}

int PcapngWriter::open(const std::string& path, std::string_view application,
                       std::string_view comment) {
    if (fd_ >= 0) return EBUSY;
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) return error_ = errno;
    buf_.reserve(kFlushAt + 65536 + 256);
    const std::size_t b = begin_block(kSectionHeaderBlock);
    put32(kByteOrderMagic);
    put16(1);           // major version
    put16(0);           // minor version
    put32(0xffffffffu); // section length: not given (-1, 64 bits)
    put32(0xffffffffu);
    if (!comment.empty()) put_option(kOptComment, comment);
    utsname u{};
    if (::uname(&u) == 0) {
        const std::string os = std::string(u.sysname) + " " + u.release + " " + u.machine;
        put_option(kShbOs, os);
    }
    put_option(kShbUserAppl, application);
    put_option(kOptEnd, std::string_view{});
    end_block(b);
    return flush();
}

std::uint32_t PcapngWriter::add_interface(std::string_view name, std::string_view description,
                                          const std::uint8_t* mac, std::uint32_t snaplen) {
    const std::size_t b = begin_block(kInterfaceDescriptionBlock);
    put16(kLinkTypeEthernet);
    put16(0); // reserved
    put32(snaplen);
    const std::uint8_t tsresol = 9; // 10^-9 s: timestamps in ns
    put_option(kIfTsResol, std::span(&tsresol, 1));
    put_option(kIfName, name);
    if (!description.empty()) put_option(kIfDescription, description);
    if (mac) put_option(kIfMacAddr, std::span(mac, 6));
    put_option(kOptEnd, std::string_view{});
    end_block(b);
    maybe_flush();
    return interfaces_++;
}

void PcapngWriter::write_packet(std::uint32_t iface, std::uint64_t ts_ns, std::uint32_t orig_len,
                                std::span<const std::uint8_t> data, EpbDirection dir,
                                std::string_view comment) {
    const std::size_t b = begin_block(kEnhancedPacketBlock);
    put32(iface);
    put32(static_cast<std::uint32_t>(ts_ns >> 32));
    put32(static_cast<std::uint32_t>(ts_ns));
    put32(static_cast<std::uint32_t>(data.size()));
    put32(orig_len);
    put_bytes(data);
    buf_.resize(buf_.size() + (pad4(data.size()) - data.size()), 0);
    const std::uint32_t flags = static_cast<std::uint32_t>(dir);
    std::uint8_t fb[4];
    std::memcpy(fb, &flags, 4);
    put_option(kEpbFlags, std::span<const std::uint8_t>(fb, 4));
    if (!comment.empty()) put_option(kOptComment, comment);
    put_option(kOptEnd, std::string_view{});
    end_block(b);
    maybe_flush();
}

void PcapngWriter::write_stats(std::uint32_t iface, std::uint64_t ts_ns, const InterfaceStats& st) {
    const auto u64 = [this](std::uint16_t code, std::uint64_t v) {
        std::uint8_t b8[8];
        std::memcpy(b8, &v, 8);
        put_option(code, std::span<const std::uint8_t>(b8, 8));
    };
    // isb_starttime / isb_endtime are timestamps: high 32 bits first, as in the block header.
    const auto ts = [this](std::uint16_t code, std::uint64_t v) {
        const std::uint32_t w[2] = {static_cast<std::uint32_t>(v >> 32),
                                    static_cast<std::uint32_t>(v)};
        std::uint8_t b8[8];
        std::memcpy(b8, w, 8);
        put_option(code, std::span<const std::uint8_t>(b8, 8));
    };
    const std::size_t b = begin_block(kInterfaceStatisticsBlock);
    put32(iface);
    put32(static_cast<std::uint32_t>(ts_ns >> 32));
    put32(static_cast<std::uint32_t>(ts_ns));
    if (!st.comment.empty()) put_option(kOptComment, st.comment);
    ts(kIsbStartTime, st.start_ns);
    ts(kIsbEndTime, st.end_ns);
    u64(kIsbIfRecv, st.received);
    u64(kIsbIfDrop, st.dropped);
    put_option(kOptEnd, std::string_view{});
    end_block(b);
    maybe_flush();
}

int PcapngWriter::flush() {
    std::size_t off = 0;
    while (error_ == 0 && fd_ >= 0 && off < buf_.size()) {
        const ssize_t n = ::write(fd_, buf_.data() + off, buf_.size() - off);
        if (n < 0) {
            if (errno == EINTR) continue;
            error_ = errno;
            break;
        }
        off += static_cast<std::size_t>(n);
        written_ += static_cast<std::uint64_t>(n);
    }
    buf_.clear(); // after an error what is left is dropped: the error is sticky
    return error_;
}

int PcapngWriter::close() {
    if (fd_ < 0) return error_;
    (void)flush();
    if (::close(fd_) != 0 && error_ == 0) error_ = errno;
    fd_ = -1;
    return error_;
}

void PcapngWriter::put32(std::uint32_t v) {
    std::uint8_t b[4];
    std::memcpy(b, &v, 4);
    buf_.insert(buf_.end(), b, b + 4);
}

void PcapngWriter::put16(std::uint16_t v) {
    std::uint8_t b[2];
    std::memcpy(b, &v, 2);
    buf_.insert(buf_.end(), b, b + 2);
}

void PcapngWriter::put_bytes(std::span<const std::uint8_t> b) {
    buf_.insert(buf_.end(), b.begin(), b.end());
}

void PcapngWriter::put_option(std::uint16_t code, std::span<const std::uint8_t> value) {
    put16(code);
    put16(static_cast<std::uint16_t>(value.size()));
    put_bytes(value);
    buf_.resize(buf_.size() + (pad4(value.size()) - value.size()), 0);
}

void PcapngWriter::put_option(std::uint16_t code, std::string_view value) {
    put_option(code, std::span(reinterpret_cast<const std::uint8_t*>(value.data()), value.size()));
}

std::size_t PcapngWriter::begin_block(std::uint32_t type) {
    const std::size_t start = buf_.size();
    put32(type);
    put32(0); // total length, filled in by end_block()
    return start;
}

void PcapngWriter::end_block(std::size_t start) {
    const auto len = static_cast<std::uint32_t>(buf_.size() - start + 4);
    std::memcpy(buf_.data() + start + 4, &len, 4);
    put32(len);
}

void PcapngWriter::maybe_flush() {
    if (buf_.size() >= kFlushAt) (void)flush();
}

} // namespace droce::capture
