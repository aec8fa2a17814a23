/* SPDX-License-Identifier: BSD-3-Clause */
#include "mrc_decode.h"

#include "trace_format.h"

namespace droce::trace {

namespace wire = droce::wire;

namespace {

/** Appends @p word to the comma-separated list @p out. */
void append_word(std::string& out, const std::string& word) {
    if (!out.empty()) out += ',';
    out += word;
}

bool sack_bit(const wire::Seth& s, unsigned i) noexcept {
    return (s.bitmap[i / 64].get() >> (i % 64)) & 1u;
}

} // namespace

std::string mdeth_flags_text(std::uint8_t flags) {
    std::string s;
    if (flags & wire::kMdethFirst) append_word(s, "first");
    if (flags & wire::kMdethLast) append_word(s, "last");
    if (flags & wire::kMdethRetransmit) append_word(s, "retransmit");
    const unsigned rest =
        flags & ~unsigned{wire::kMdethFirst | wire::kMdethLast | wire::kMdethRetransmit};
    if (rest != 0) append_word(s, hex(rest, 2));
    return s.empty() ? "none" : s;
}

std::string seth_flags_text(std::uint8_t flags) {
    std::string s;
    if (flags & wire::kSethEcnEcho) append_word(s, "ecn_echo");
    const unsigned rest = flags & ~unsigned{wire::kSethEcnEcho};
    if (rest != 0) append_word(s, hex(rest, 2));
    return s.empty() ? "none" : s;
}

const char* nack_reason_name(std::uint8_t reason) noexcept {
    switch (static_cast<wire::NackReason>(reason)) {
    case wire::NackReason::trimmed:
        return "trimmed";
    case wire::NackReason::mpr_exceeded:
        return "mpr_exceeded";
    case wire::NackReason::wimm_exceeded:
        return "wimm_exceeded";
    case wire::NackReason::remote_access:
        return "remote_access";
    case wire::NackReason::invalid_request:
        return "invalid_request";
    }
    return "unknown";
}

const char* endpoint_op_name(std::uint8_t op) noexcept {
    return op == static_cast<std::uint8_t>(wire::EndpointOp::port_status) ? "port_status"
                                                                          : "unknown";
}

std::vector<PsnRange> sack_ranges(const wire::Seth& seth) {
    std::vector<PsnRange> v;
    const wire::Psn base(seth.sack_base.get());
    for (unsigned i = 0; i < wire::kSackBits; ++i) {
        if (!sack_bit(seth, i)) continue;
        unsigned j = i;
        while (j + 1 < wire::kSackBits && sack_bit(seth, j + 1))
            ++j;
        v.push_back({(base + i).value(), (base + j).value()});
        i = j;
    }
    return v;
}

std::vector<PsnRange> ranges_from(const std::vector<PsnRange>& ranges, std::uint32_t from) {
    std::vector<PsnRange> v;
    const wire::Psn f(from);
    for (PsnRange r : ranges) {
        if (wire::Psn(r.last).distance_from(f) < 0) continue;
        if (wire::Psn(r.first).distance_from(f) < 0) r.first = f.value();
        v.push_back(r);
    }
    return v;
}

std::vector<PsnRange> sack_holes(const wire::Seth& seth) {
    const wire::Psn base(seth.sack_base.get());
    const wire::Psn cum(seth.cum_psn.get());
    auto at_or_past_cum = [&](unsigned i) { return (base + i).distance_from(cum) >= 0; };
    int highest = -1; // bitmap index of the last PSN at or past cum reported received
    for (unsigned i = 0; i < wire::kSackBits; ++i)
        if (sack_bit(seth, i) && at_or_past_cum(i)) highest = static_cast<int>(i);
    std::vector<PsnRange> v;
    for (unsigned i = 0; static_cast<int>(i) < highest; ++i) {
        if (sack_bit(seth, i) || !at_or_past_cum(i)) continue;
        unsigned j = i;
        while (static_cast<int>(j + 1) < highest && !sack_bit(seth, j + 1))
            ++j;
        v.push_back({(base + i).value(), (base + j).value()});
        i = j;
    }
    return v;
}

std::string format_ranges(const std::vector<PsnRange>& ranges) {
    std::string s;
    for (const PsnRange& r : ranges) {
        append_word(s, r.first == r.last ? std::to_string(r.first)
                                         : std::to_string(r.first) + "-" + std::to_string(r.last));
    }
    return s.empty() ? "none" : s;
}

std::string plane_list(std::uint8_t mask) {
    std::string s;
    for (unsigned i = 0; i < 8; ++i) {
        if (!((mask >> i) & 1u)) continue;
        unsigned j = i;
        while (j + 1 < 8 && ((mask >> (j + 1)) & 1u))
            ++j;
        append_word(s, i == j ? std::to_string(i) : std::to_string(i) + "-" + std::to_string(j));
        i = j;
    }
    return s.empty() ? "none" : s;
}

} // namespace droce::trace
