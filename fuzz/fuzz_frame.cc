/* SPDX-License-Identifier: BSD-3-Clause */
// libFuzzer target: wire::parse_frame() on any bytes. The input is one Ethernet frame. It is parsed
// with and without the ICRC check; a frame whose headers parse is then given a correct ICRC and
// parsed again, so the fuzzer reaches the rules behind the ICRC (the check rejects nearly every
// mutated frame otherwise). Every header pointer parse_frame() returns must lie inside the frame:
// ASan sees reads past it only when they cross the heap copy's end.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "fix_icrc.h"
#include "wire/packet.h"

namespace {

using droce::wire::ParsedFrame;
using droce::wire::RejectReason;

/** Aborts unless [p, p + n) lies inside @p f: a parser that points outside is a bug even if no
 *  byte is read there. */
void check_inside(std::span<const std::uint8_t> f, const void* p, std::size_t n) {
    if (p == nullptr) return;
    const auto* b = static_cast<const std::uint8_t*>(p);
    if (b < f.data() || b + n > f.data() + f.size()) std::abort();
}

void check(std::span<const std::uint8_t> f, const ParsedFrame& pf) {
    check_inside(f, pf.eth, sizeof(*pf.eth));
    check_inside(f, pf.vlan, sizeof(*pf.vlan));
    check_inside(f, pf.ipv4, sizeof(*pf.ipv4));
    check_inside(f, pf.ipv6, sizeof(*pf.ipv6));
    check_inside(f, pf.udp, sizeof(*pf.udp));
    check_inside(f, pf.bth, sizeof(*pf.bth));
    check_inside(f, pf.reth, sizeof(*pf.reth));
    check_inside(f, pf.aeth, sizeof(*pf.aeth));
    check_inside(f, pf.atomic_eth, sizeof(*pf.atomic_eth));
    check_inside(f, pf.atomic_ack_eth, sizeof(*pf.atomic_ack_eth));
    check_inside(f, pf.immdt, sizeof(*pf.immdt));
    check_inside(f, pf.ieth, sizeof(*pf.ieth));
    check_inside(f, pf.deth, sizeof(*pf.deth));
    check_inside(f, pf.cnp, sizeof(*pf.cnp));
    if (!pf.payload.empty()) check_inside(f, pf.payload.data(), pf.payload.size());
    if (pf.pad > 3) std::abort();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    // An exact-size heap copy: ASan then flags a read one byte past the frame.
    std::vector<std::uint8_t> buf(data, data + size);
    const std::span<const std::uint8_t> f(buf.data(), buf.size());
    ParsedFrame pf;
    const RejectReason strict = droce::wire::parse_frame(f, pf);
    check(f, pf);
    (void)droce::wire::to_string(strict);
    ParsedFrame loose;
    const RejectReason r = droce::wire::parse_frame(f, loose, {.verify_icrc = false});
    check(f, loose);
    // A frame accepted without the ICRC check that then fails with it may only fail on the ICRC.
    if (r == RejectReason::ok && strict != RejectReason::ok && strict != RejectReason::bad_icrc)
        std::abort();
    if (r == RejectReason::ok && droce::fuzz::fix_icrc(std::span(buf), loose)) {
        // With the ICRC it computes itself, the frame must now be accepted.
        ParsedFrame fixed;
        if (droce::wire::parse_frame(f, fixed) != RejectReason::ok) std::abort();
        check(f, fixed);
    }
    return 0;
}
