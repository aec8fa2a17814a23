/* SPDX-License-Identifier: BSD-3-Clause */
#include "capture/capture.h"

#include <arpa/inet.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>

namespace droce::capture {

namespace {

std::uint64_t realtime_ns() noexcept {
    timespec ts{};
    clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u +
           static_cast<std::uint64_t>(ts.tv_nsec);
}

/** The port's address as people write it: dotted quad for an IPv4-mapped GID. */
std::string gid_text(const wire::Ipv6Addr& gid) {
    static constexpr std::uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    char out[INET6_ADDRSTRLEN] = {};
    if (std::memcmp(gid.data(), kMapped, 12) == 0)
        inet_ntop(AF_INET, gid.data() + 12, out, sizeof out);
    else
        inet_ntop(AF_INET6, gid.data(), out, sizeof out);
    return out;
}

std::string mac_text(const wire::MacAddr& m) {
    char out[18];
    std::snprintf(out, sizeof out, "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4],
                  m[5]);
    return out;
}

/** Copies the frame (head ++ payload ++ trailer) into @p out, at most out.size() bytes.
 *  @return bytes copied. */
std::uint32_t copy_frame(const Device::CaptureFrame& f, std::span<std::uint8_t> out) noexcept {
    std::size_t n = 0;
    const auto put = [&](std::span<const std::uint8_t> s) {
        const std::size_t k = std::min(s.size(), out.size() - n);
        std::memcpy(out.data() + n, s.data(), k);
        n += k;
    };
    put(f.head);
    for (auto s : f.payload) {
        if (n == out.size()) break;
        put(s);
    }
    if (n < out.size()) put(f.trailer);
    return static_cast<std::uint32_t>(n);
}

} // namespace

std::unique_ptr<Capture> Capture::start(const std::string& path, std::span<Device* const> devices,
                                        const CaptureOptions& opts, std::string* err) {
    const auto fail = [&](const std::string& why) -> std::unique_ptr<Capture> {
        *err = "capture " + path + ": " + why;
        return nullptr;
    };
    if (devices.empty()) return fail("no device to capture");
    if (opts.snaplen != 0 && (opts.snaplen < kMinSnaplen || opts.snaplen > kMaxSnaplen))
        return fail("snap length " + std::to_string(opts.snaplen) + " is not 64..65535 (or 0)");
    if (opts.ring_slots == 0 || opts.ring_slots > kMaxRingSlots)
        return fail("ring of " + std::to_string(opts.ring_slots) + " slots is not 1..65536");
    // Slots as large as the largest frame a port carries, or the snap length if smaller.
    std::uint32_t max_frame = 64;
    for (Device* d : devices)
        for (unsigned p = 0; p < d->num_ports(); ++p)
            if (d->port(p).driver) max_frame = std::max(max_frame, d->port(p).driver->max_frame());
    std::unique_ptr<Capture> c(new Capture());
    c->path_ = path;
    c->slot_bytes_ = opts.snaplen ? std::min(opts.snaplen, max_frame) : max_frame;
    if (const int e = c->file_.open(path, "droce " DROCE_VERSION, opts.comment); e != 0)
        return fail(std::strerror(e));
    c->start_epoch_ns_ = realtime_ns();
    for (Device* d : devices) {
        auto s = std::make_unique<Source>();
        s->dev = d;
        s->owner = c.get();
        s->slot_bytes = c->slot_bytes_;
        // Both clocks read back to back for each device: the rings allocated in between take
        // milliseconds, and one reading shared by every device put their frames out of order.
        s->epoch_offset_ns = static_cast<std::int64_t>(realtime_ns()) -
                             static_cast<std::int64_t>(d->clock().now_ns());
        s->ring = SpscRing<Slot>(opts.ring_slots);
        const std::uint32_t cap = s->ring.capacity();
        s->arena = std::make_unique<std::uint8_t[]>(std::size_t{cap} * c->slot_bytes_);
        for (std::uint32_t i = 0; i < cap; ++i)
            s->ring.slot(i).data = s->arena.get() + std::size_t{i} * c->slot_bytes_;
        for (unsigned p = 0; p < d->num_ports(); ++p) {
            const PortSpec& ps = d->port(p);
            const std::string n = std::to_string(p + 1);
            const std::uint32_t id = c->file_.add_interface(
                d->name() + "/port" + n,
                "droce " + d->name() + " port " + n + " (plane " + std::to_string(p) + ") " +
                    gid_text(ps.gid) + " " + mac_text(ps.mac),
                ps.mac.data(), c->slot_bytes_);
            if (p == 0) s->first_iface = id;
        }
        c->sources_.push_back(std::move(s));
    }
    if (const int e = c->file_.flush(); e != 0) return fail(std::strerror(e));
    try {
        c->writer_ = std::thread([cp = c.get()] { cp->writer_loop(); });
    } catch (const std::exception& ex) {
        return fail(std::string("writer thread: ") + ex.what());
    }
    for (auto& s : c->sources_) {
        s->dev->counter_registry().add("capture", kCaptureCounterNames, s->counters.cells());
        s->dev->set_capture(Device::CaptureHook{&Capture::on_frame, s.get()});
    }
    return c;
}

Capture::~Capture() {
    (void)stop();
}

void Capture::on_frame(void* ctx, const Device::CaptureFrame& f) noexcept {
    Source& s = *static_cast<Source*>(ctx);
    const unsigned port = f.port < s.port_seen.size() ? f.port : 0;
    ++s.port_seen[port];
    if (s.ring.free_slots() == 0) {
        // The writer is behind (a slow disk): leave this frame out rather than wait.
        ++s.port_dropped[port];
        s.counters.inc(CaptureCounter::capture_dropped);
        return;
    }
    Slot& slot = s.ring.producer_slot();
    slot.cap_len = copy_frame(f, std::span(slot.data, s.slot_bytes));
    slot.orig_len = f.wire_len;
    slot.ts_ns = static_cast<std::uint64_t>(static_cast<std::int64_t>(s.dev->clock().now_ns()) +
                                            s.epoch_offset_ns);
    slot.port = f.port;
    slot.dir = f.dir;
    slot.loopback = f.loopback;
    s.ring.publish(); // release: the slot's bytes before the writer sees the index
    s.counters.inc(CaptureCounter::capture_frames);
    if (slot.cap_len < f.wire_len) s.counters.inc(CaptureCounter::capture_truncated);
}

std::size_t Capture::drain() noexcept {
    // Per source: how many slots are ready now (acquire: their bytes are visible), then merge by
    // timestamp so that frames of two devices come out in time order.
    std::array<std::uint32_t, 8> ready{};
    std::array<std::uint32_t, 8> taken{};
    const std::size_t n = std::min<std::size_t>(sources_.size(), ready.size());
    std::size_t total = 0;
    for (std::size_t i = 0; i < n; ++i)
        ready[i] = sources_[i]->ring.ready();
    for (;;) {
        std::size_t best = n;
        std::uint64_t best_ts = UINT64_MAX;
        for (std::size_t i = 0; i < n; ++i) {
            if (taken[i] == ready[i]) continue;
            const Slot& sl = sources_[i]->ring.slot(sources_[i]->ring.consumer_index() + taken[i]);
            if (sl.ts_ns < best_ts) {
                best_ts = sl.ts_ns;
                best = i;
            }
        }
        if (best == n) break;
        Source& s = *sources_[best];
        const Slot& sl = s.ring.slot(s.ring.consumer_index() + taken[best]);
        file_.write_packet(s.first_iface + sl.port, sl.ts_ns, sl.orig_len,
                           std::span<const std::uint8_t>(sl.data, sl.cap_len),
                           sl.dir == Device::CaptureDir::rx ? EpbDirection::inbound
                                                            : EpbDirection::outbound,
                           sl.loopback ? std::string_view("loopback") : std::string_view{});
        ++taken[best];
        ++total;
        // Give slots back in batches of 32 so the engine sees room while a big backlog drains.
        if (taken[best] == 32) {
            s.ring.release(taken[best]); // release: our reads of the slots are done
            ready[best] -= taken[best];
            taken[best] = 0;
        }
    }
    for (std::size_t i = 0; i < n; ++i)
        if (taken[i]) sources_[i]->ring.release(taken[i]);
    return total;
}

void Capture::writer_loop() noexcept {
    bool dirty = false;
    while (!stop_writer_.load(std::memory_order_acquire)) {
        if (drain() > 0) {
            dirty = true;
            continue;
        }
        if (dirty) { // idle: put what is buffered on disk, so a reader sees it soon
            (void)file_.flush();
            dirty = false;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
    // stop() cleared every hook before asking us to stop: what is in the rings now is all there is.
    while (drain() > 0) {
    }
}

CaptureStats Capture::stop() noexcept {
    if (stopped_) return final_;
    stopped_ = true;
    for (auto& s : sources_)
        s->dev->set_capture({}); // ControlSection: no engine calls on_frame after this returns
    stop_writer_.store(true, std::memory_order_release);
    if (writer_.joinable()) writer_.join();
    const std::uint64_t end_ns = realtime_ns();
    for (auto& s : sources_) {
        for (unsigned p = 0; p < s->dev->num_ports() && p < s->port_seen.size(); ++p) {
            InterfaceStats st;
            st.start_ns = start_epoch_ns_;
            st.end_ns = end_ns;
            st.received = s->port_seen[p];
            st.dropped = s->port_dropped[p];
            if (st.dropped)
                st.comment = std::to_string(st.dropped) +
                             " frames left out of the capture: its ring was full";
            file_.write_stats(s->first_iface + p, end_ns, st);
        }
    }
    (void)file_.close();
    final_ = stats();
    for (auto& s : sources_)
        s->dev->counter_registry().remove(s->counters.cells().data());
    return final_;
}

CaptureStats Capture::stats() const noexcept {
    CaptureStats st;
    for (const auto& s : sources_) {
        st.frames += s->counters[CaptureCounter::capture_frames];
        st.dropped += s->counters[CaptureCounter::capture_dropped];
        st.truncated += s->counters[CaptureCounter::capture_truncated];
    }
    if (stopped_) {
        st.bytes = file_.bytes_written();
        st.error = file_.error();
    }
    return st;
}

std::string describe(const std::string& path, const CaptureStats& st) {
    std::string s = "capture " + path + ": " + std::to_string(st.frames) + " frames, " +
                    std::to_string(st.dropped) + " dropped (ring full), " +
                    std::to_string(st.truncated) + " truncated to the snap length";
    if (st.error) s += ", write error: " + std::string(std::strerror(st.error));
    return s;
}

} // namespace droce::capture
