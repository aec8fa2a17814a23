/* SPDX-License-Identifier: BSD-3-Clause */
#include "capture.h"

#include <pcap/pcap.h>

#include <utility>

namespace droce::trace {

CaptureFile::~CaptureFile() {
    if (handle_ != nullptr) pcap_close(handle_);
}

CaptureFile::CaptureFile(CaptureFile&& other) noexcept
    : handle_(std::exchange(other.handle_, nullptr)), count_(other.count_),
      path_(std::move(other.path_)) {}

CaptureFile& CaptureFile::operator=(CaptureFile&& other) noexcept {
    if (this != &other) {
        if (handle_ != nullptr) pcap_close(handle_);
        handle_ = std::exchange(other.handle_, nullptr);
        count_ = other.count_;
        path_ = std::move(other.path_);
    }
    return *this;
}

bool CaptureFile::open(const std::string& path, std::string& error) {
    char errbuf[PCAP_ERRBUF_SIZE] = {};
    pcap* h = pcap_open_offline(path.c_str(), errbuf);
    if (h == nullptr) {
        error = "cannot open '" + path + "': " + errbuf;
        return false;
    }
    if (handle_ != nullptr) pcap_close(handle_);
    handle_ = h;
    count_ = 0;
    path_ = path;
    return true;
}

int CaptureFile::link_type() const noexcept {
    return handle_ != nullptr ? pcap_datalink(handle_) : -1;
}

CaptureFile::Status CaptureFile::next(RawFrame& frame, std::string& error) {
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
    frame.index = count_;
    frame.link_type = pcap_datalink(handle_);
    frame.bytes = std::span<const std::uint8_t>(data, hdr->caplen);
    frame.wire_length = hdr->len;
    return Status::frame;
}

} // namespace droce::trace
