/* SPDX-License-Identifier: BSD-3-Clause */
/** @file Atomic Extended Transport Header, IBTA Vol 1 §9.3.4 (28 bytes; COMPARE_SWAP, FETCH_ADD).
 */
#pragma once

#include "byteorder.h"

namespace droce::wire {

struct AtomicEth {
    Be64 va; ///< remote address, 8-byte aligned
    Be32 rkey;
    Be64 swap_add; ///< swap value (COMPARE_SWAP) or addend (FETCH_ADD)
    Be64 compare;  ///< compare value (COMPARE_SWAP only)
};
static_assert(sizeof(AtomicEth) == 28);

} // namespace droce::wire
