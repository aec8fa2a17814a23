/* SPDX-License-Identifier: BSD-3-Clause */
/** @file Invalidate Extended Transport Header, IBTA Vol 1 §9.3.7 (4 bytes; SEND with invalidate).
 */
#pragma once

#include "byteorder.h"

namespace droce::wire {

struct Ieth {
    Be32 rkey; ///< the responder's rkey to invalidate
};
static_assert(sizeof(Ieth) == 4);

} // namespace droce::wire
