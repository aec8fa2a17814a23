/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * The transmit path. Each pass: open_tx_stage() reserves buffers per port in bulk and tells the
 * stage how much room there is; the transports stage their packets (port/tx_stage.h) while the pass
 * runs; build_staged() turns every staged packet into a frame (copied, or headers with the payload
 * by reference) in the order they were staged, queues it per port or on the loopback queue, and
 * flush_tx() hands each port's queue to its driver in one burst. Raw frames of the neighbour
 * responder take the same queues. Every frame passes the capture seam (capture_) here or, for
 * received and looped-back frames, in receive.cc. Engine thread only.
 */
#include "device.h"

#include "common/prefetch.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace droce {

using rc::QpState;

namespace {
/**
 * Frames build_staged() prefetches for write ahead of the one it builds: three lines from the
 * frame's start, its headers and a small payload (a 64 B WRITE is a 138-byte frame; in a buffer
 * that does not start a line, as DPDK's mbufs did before their private area was rounded up, three
 * lines hold 128 bytes of it at least). Over memif zero-copy a buffer's lines were last read by the
 * peer process's core, so each frame's header stores waited for them: write_headers was 27 % of the
 * client's core at 64 B, and 64 B WRITEs went 4.61 -> 7.04 M msg/s with the prefetch
 * (bench/e2e/ab).
 */
constexpr std::size_t kTxPrefetchAhead = 4;

/** Payload bytes up to which a frame is built in Device::tx_scratch_ and streamed out: 64 B
 *  WRITEs and SENDs, ACKs, READ requests, atomics, CNPs. One whose headers then do not fit the
 *  256-byte scratch is built in its buffer as any other. */
constexpr std::size_t kTxStreamMaxPayload = 128;

/** Copies the frame of @p len bytes at @p src (a 64-byte aligned scratch buffer with room for
 *  @p len rounded up to 64) to @p dst (16-byte aligned) with streaming stores, whole lines: a line
 *  is written without being read first, whoever held it. Over memif zero-copy the peer's core read
 *  the buffer's lines last, and a cached store waits for the line to come back (27 % of the
 *  client's core at 64 B WRITEs before the write prefetch, 22 % after it). The caller fences
 *  (sfence) before a driver may hand the frame on. */
void stream_frame(std::uint8_t* dst, const std::uint8_t* src, std::size_t len) noexcept {
    const std::size_t whole = (len + 63) & ~std::size_t{63};
#if defined(__x86_64__)
    for (std::size_t off = 0; off < whole; off += 16)
        _mm_stream_si128(reinterpret_cast<__m128i*>(dst + off),
                         _mm_load_si128(reinterpret_cast<const __m128i*>(src + off)));
#else
    std::memcpy(dst, src, whole); // no streaming stores written for this target
#endif
}

/** Orders the streamed frames before the stores that hand them to a driver. */
void fence_streamed() noexcept {
#if defined(__x86_64__)
    _mm_sfence(); // streaming stores are weakly ordered, even on x86
#else
    std::atomic_thread_fence(std::memory_order_release);
#endif
}

std::size_t payload_bytes(const TxPacket& pkt) noexcept {
    std::size_t n = 0;
    for (auto s : pkt.payload_spans())
        n += s.size();
    return n;
}

} // namespace

void Device::open_tx_stage() noexcept {
    // Buffers for the whole pass in one alloc_bulk per port (topped up, not reallocated: what a
    // pass did not use stays reserved for the next one).
    std::array<std::uint32_t, TxStage::kMaxPorts> room{};
    for (unsigned p = 0; p < ports_.size(); ++p) {
        TxBufCache& c = tx_cache_[p];
        if (c.count < kTxBatch)
            c.count = static_cast<std::uint16_t>(
                c.count +
                ports_[p].driver->alloc_bulk(c.bufs.data() + c.count,
                                             static_cast<std::uint16_t>(kTxBatch - c.count)));
        const std::uint32_t queue_room = tx_[p].count < kTxBatch ? kTxBatch - tx_[p].count : 0;
        room[p] = std::min<std::uint32_t>(c.count, queue_room);
        tx_stage_room_[p] = static_cast<std::uint16_t>(room[p]);
    }
    stage_.open(std::span(room.data(), ports_.size()), LoopbackQueue::kDepth - loopback_.size());
}

void Device::send_held_ack(rc::Qp& qp) noexcept {
    if (!qp.resp.ack_held()) return;
    open_tx_stage();
    rc::responder_flush_ack(qp, ctx_);
    build_staged();
    for (unsigned p = 0; p < ports_.size(); ++p)
        flush_tx(p);
}

void Device::build_staged() noexcept {
    // A copied frame is finished (ICRC) only after the next one is built, so that the ICRC reads
    // headers whose stores have reached the cache (wire::build_frame_deferred); then it is
    // captured and queued, so the order on the wire stays the staging order.
    const TxPacket* held = nullptr; // built, not finished
    PktBuf* held_buf = nullptr;
    std::uint8_t* held_scratch = nullptr; // where it was built, when it is to be streamed
    unsigned next_scratch = 0;
    wire::FrameFinish held_finish;
    const auto release = [this](const TxPacket& pkt, PktBuf* buf, bool by_ref,
                                const wire::SplitFrame& sf) {
        pkt.counters->inc(Counter::sent_pkts);
        if (capturing()) {
            if (by_ref)
                capture(*buf, CaptureDir::tx, false, pkt.payload_spans(), sf.trailer_bytes());
            else
                capture(*buf, CaptureDir::tx, pkt.loopback);
        }
        if (pkt.loopback) {
            loopback_.bufs[loopback_.tail++ % LoopbackQueue::kDepth] = buf;
            pkt.counters->inc(Counter::loopback_pkts);
        } else {
            TxQueue& q = tx_[pkt.port];
            q.pending[q.count++] = buf;
        }
    };
    const auto release_held = [&] {
        if (held == nullptr) return;
        if (held_scratch != nullptr) {
            wire::finish_frame(held_scratch, held_finish);
            stream_frame(held_buf->data, held_scratch, held_buf->len);
        } else {
            wire::finish_frame(held_buf->data, held_finish);
        }
        release(*held, held_buf, false, wire::SplitFrame{});
        held = nullptr;
    };
    const std::span<const TxPacket> pkts = stage_.packets();
    // A short frame for a port whose buffers another core reads is built in tx_scratch_ and
    // streamed into its buffer (stream_frame): its buffer is then not prefetched either.
    const auto streamed = [this](const TxPacket& pkt) {
        return tx_stream_[pkt.port] != 0 && !pkt.loopback &&
               payload_bytes(pkt) <= kTxStreamMaxPayload;
    };
    std::array<std::uint16_t, TxStage::kMaxPorts> ahead{}; // buffers prefetched, per port
    const auto prefetch = [&](std::size_t i) {
        if (i >= pkts.size() || streamed(pkts[i])) return;
        const unsigned port = pkts[i].port;
        const TxBufCache& c = tx_cache_[port];
        if (ahead[port] >= c.count) return;
        const std::uint8_t* d = c.bufs[c.count - 1u - ahead[port]++]->data;
        prefetch_for_write(d);
        prefetch_for_write(d + 64);
        prefetch_for_write(d + 128);
    };
    for (std::size_t i = 0; i < kTxPrefetchAhead; ++i)
        prefetch(i);
    for (std::size_t i = 0; i < pkts.size(); ++i) {
        const TxPacket& pkt = pkts[i];
        prefetch(i + kTxPrefetchAhead);
        TxBufCache& c = tx_cache_[pkt.port];
        PktBuf* buf =
            c.bufs[--c.count]; // reserved by open_tx_stage(): the stage's room ensures one
        if (ahead[pkt.port] > 0) --ahead[pkt.port];
        buf->port = pkt.port;
        buf->ext_len = 0;
        wire::SplitFrame sf;
        // The payload's length against the port's threshold first (UINT32_MAX on ports that
        // copy): send_by_reference()'s call and span walk cost every 64 B WRITE 38 instructions
        // to say no (bench/engine/instr).
        const bool by_ref = pkt.ref != nullptr && !pkt.loopback &&
                            payload_bytes(pkt) >= zc_min_payload_[pkt.port] &&
                            send_by_reference(pkt.port, *pkt.path, pkt.payload_spans(), pkt.fields,
                                              buf, pkt.ref, sf);
        if (by_ref) {
            release_held();
            release(pkt, buf, true, sf);
            continue;
        }
        wire::FrameFinish finish;
        std::uint8_t* scratch = nullptr;
        std::size_t len = 0;
        if (streamed(pkt) && (reinterpret_cast<std::uintptr_t>(buf->data) & 15) == 0 &&
            buf->capacity >= kTxScratchBytes) {
            len = wire::build_frame_deferred(*pkt.path, pkt.fields, pkt.payload_spans(),
                                             tx_scratch_[next_scratch], finish);
            if (len != 0) {
                scratch = tx_scratch_[next_scratch].data();
                next_scratch ^= 1u;
                counters_.inc(Counter::tx_streamed_pkts);
            }
        }
        if (len == 0)
            len = wire::build_frame_deferred(*pkt.path, pkt.fields, pkt.payload_spans(),
                                             buf->room(), finish);
        if (len == 0) { // larger than the port's buffers: a path MTU the port cannot carry
            ports_[pkt.port].driver->free_bulk(&buf, 1);
            counters_.inc(Counter::tx_dropped_too_long);
            continue;
        }
        buf->len = static_cast<std::uint32_t>(len);
        release_held();
        held = &pkt;
        held_buf = buf;
        held_scratch = scratch;
        held_finish = finish;
    }
    release_held();
    stage_.clear();
    std::fill(tx_stage_room_.begin(), tx_stage_room_.end(), std::uint16_t{0});
}

void Device::set_capture(CaptureHook hook) noexcept {
    ControlSection section(*this);
    capture_ = hook;
}

void Device::capture(const PktBuf& buf, CaptureDir dir, bool loopback,
                     std::span<const std::span<const std::uint8_t>> payload,
                     std::span<const std::uint8_t> trailer) const noexcept {
    CaptureFrame f;
    f.head = buf.frame();
    f.payload = payload;
    f.trailer = trailer;
    std::size_t len = f.head.size() + trailer.size();
    for (auto s : payload)
        len += s.size();
    f.wire_len = static_cast<std::uint32_t>(len);
    f.port = buf.port;
    f.dir = dir;
    f.loopback = loopback;
    capture_.fn(capture_.ctx, f);
}

bool Device::send_by_reference(unsigned port, const wire::PathHeaders& path,
                               std::span<const std::span<const std::uint8_t>> payload,
                               const wire::PacketFields& f, PktBuf* buf, TxRef* ref,
                               wire::SplitFrame& sf) noexcept {
    // zc_min_payload_ was chosen when the device was set up: UINT32_MAX on ports that copy.
    std::size_t len = 0;
    for (auto s : payload)
        len += s.size();
    if (len < zc_min_payload_[port]) return false;
    // Asked first: the split frame's ICRC covers the payload, and a payload the port cannot send
    // from would be summed again for the copy.
    if (!ports_[port].driver->payload_reachable(payload)) {
        counters_.inc(Counter::tx_zc_copied);
        return false;
    }
    if (!wire::build_frame_split(path, f, payload, buf->room(), sf)) return false;
    buf->len = static_cast<std::uint32_t>(sf.header_len);
    if (!ports_[port].driver->attach_payload(buf, payload, sf.trailer_bytes(), ref)) {
        counters_.inc(Counter::tx_zc_copied);
        return false; // buf unchanged: the caller builds the whole frame over the headers
    }
    counters_.inc(Counter::tx_zc_pkts);
    return true;
}

void Device::set_tx_by_reference(unsigned port, std::uint32_t min_payload) noexcept {
    if (port >= ports_.size()) return;
    zc_min_payload_[port] =
        ports_[port].driver && ports_[port].driver->tx_by_reference() ? min_payload : UINT32_MAX;
}

void Device::flush_tx(unsigned port) noexcept {
    TxQueue& q = tx_[port];
    if (q.count == 0) return;
    if (tx_stream_[port]) fence_streamed();
    const std::uint16_t sent = ports_[port].driver->tx_burst(q.pending.data(), q.count);
    // The driver owns pending[0..sent); keep the rest, in order, for the next flush.
    std::copy(q.pending.begin() + sent, q.pending.begin() + q.count, q.pending.begin());
    q.count = static_cast<std::uint16_t>(q.count - sent);
}

bool Device::queue_raw(unsigned port, std::span<const std::uint8_t> frame, Counter sent) noexcept {
    // Raw frames use the slots the transmit stage was not promised this pass (at least the
    // kTxQueueDepth - kTxBatch above kTxBatch): build_staged() appends up to tx_stage_room_ frames
    // without checking, so a burst of ARP requests or EV probes must not take those.
    TxQueue& q = tx_[port];
    const unsigned limit = kTxQueueDepth - tx_stage_room_[port];
    if (q.count >= limit) flush_tx(port);
    PktBuf* buf = nullptr;
    if (q.count >= limit || ports_[port].driver->alloc_bulk(&buf, 1) != 1) {
        counters_.inc(Counter::tx_no_buffer);
        return false;
    }
    if (frame.size() > buf->capacity) {
        ports_[port].driver->free_bulk(&buf, 1);
        return false;
    }
    std::memcpy(buf->data, frame.data(), frame.size());
    buf->len = static_cast<std::uint32_t>(frame.size());
    buf->port = static_cast<std::uint8_t>(port);
    if (capturing()) capture(*buf, CaptureDir::tx, false);
    q.pending[q.count++] = buf;
    counters_.inc(sent);
    return true;
}

} // namespace droce
