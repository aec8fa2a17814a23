/* SPDX-License-Identifier: BSD-3-Clause */
/** @file Atomic Acknowledge Extended Transport Header, IBTA Vol 1 §9.5.3 (8 bytes). */
#pragma once

#include "byteorder.h"

namespace droce::wire {

struct AtomicAckEth {
    Be64 orig_rem_data; ///< the remote value before the atomic operation
};
static_assert(sizeof(AtomicAckEth) == 8);

} // namespace droce::wire
