/* SPDX-License-Identifier: BSD-3-Clause */
/** @file Immediate Data Extended Transport Header, IBTA Vol 1 §9.3.6 (4 bytes). */
#pragma once

#include "byteorder.h"

namespace droce::wire {

struct ImmDt {
    Be32 imm; ///< opaque to the transport; delivered in the responder's CQE (network byte order
              ///< there too)
};
static_assert(sizeof(ImmDt) == 4);

} // namespace droce::wire
