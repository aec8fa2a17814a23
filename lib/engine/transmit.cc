/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * The transmit path: a transport packet becomes a frame (copied, or headers with payload by
 * reference), is queued per port or on the loopback queue, and leaves in bursts (flush_tx). Raw
 * frames of the neighbour responder take the same queues. Engine thread only.
 */
#include "device.h"

#include <algorithm>
#include <cstring>

namespace droce {

using rc::QpState;


bool Device::emit(void* self, rc::Qp& qp, const wire::PacketFields& f,
                  std::span<const std::span<const std::uint8_t>> payload, TxRef* ref) noexcept {
    auto* dev = static_cast<Device*>(self);
    if (!qp.path_resolved) {
        qp.counters.inc(Counter::tx_wait_neigh);
        return false;
    }
    const unsigned port = qp.attr.port_num - 1u;
    TxQueue& q = dev->tx_[port];
    if (!qp.loopback_peer && q.count == kTxBatch) dev->flush_tx(port);
    if (qp.loopback_peer ? dev->loopback_.size() == LoopbackQueue::kDepth : q.count == kTxBatch) {
        dev->counters_.inc(Counter::tx_no_buffer);
        return false;
    }
    PortDriver* drv = dev->ports_[port].driver;
    PktBuf* buf = nullptr;
    if (drv->alloc_bulk(&buf, 1) != 1) {
        dev->counters_.inc(Counter::tx_no_buffer);
        return false;
    }
    buf->port = static_cast<std::uint8_t>(port);
    if (ref != nullptr && dev->send_by_reference(port, qp, payload, f, buf, ref)) {
        q.pending[q.count++] = buf;
        qp.counters.inc(Counter::sent_pkts);
        return true;
    }
    const std::size_t len = wire::build_frame(qp.path, f, payload, buf->room());
    if (len == 0) {
        drv->free_bulk(&buf, 1);
        dev->counters_.inc(Counter::tx_no_buffer);
        return false;
    }
    buf->len = static_cast<std::uint32_t>(len);
    qp.counters.inc(Counter::sent_pkts);
    if (qp.loopback_peer) {
        dev->loopback_.bufs[dev->loopback_.tail++ % LoopbackQueue::kDepth] = buf;
        qp.counters.inc(Counter::loopback_pkts);
    } else {
        q.pending[q.count++] = buf;
    }
    return true;
}

bool Device::send_by_reference(unsigned port, const rc::Qp& qp, std::span<const std::span<const std::uint8_t>> payload,
                               const wire::PacketFields& f, PktBuf* buf, TxRef* ref) noexcept {
    // zc_min_payload_ was chosen when the device was set up: UINT32_MAX on ports that copy.
    std::size_t len = 0;
    for (auto s : payload) len += s.size();
    if (len < zc_min_payload_[port]) return false;
    // A frame to a QP of this device goes through the loopback queue to the receive path, which
    // reads frame() as one buffer: copied.
    if (qp.loopback_peer) return false;
    wire::SplitFrame sf;
    if (!wire::build_frame_split(qp.path, f, payload, buf->room(), sf)) return false;
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
    const std::uint16_t sent = ports_[port].driver->tx_burst(q.pending.data(), q.count);
    // The driver owns pending[0..sent); keep the rest, in order, for the next flush.
    std::copy(q.pending.begin() + sent, q.pending.begin() + q.count, q.pending.begin());
    q.count = static_cast<std::uint16_t>(q.count - sent);
}

bool Device::queue_raw(unsigned port, std::span<const std::uint8_t> frame) noexcept {
    TxQueue& q = tx_[port];
    if (q.count == kTxBatch) flush_tx(port);
    PktBuf* buf = nullptr;
    if (q.count == kTxBatch || ports_[port].driver->alloc_bulk(&buf, 1) != 1) {
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
    q.pending[q.count++] = buf;
    counters_.inc(Counter::neigh_tx);
    return true;
}

} // namespace droce
