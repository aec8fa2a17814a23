/* SPDX-License-Identifier: BSD-3-Clause */
/** @file RDMA Extended Transport Header, IBTA Vol 1 §9.3.3 (16 bytes; RDMA WRITE first/only, READ
 * request). */
#pragma once

#include "byteorder.h"

namespace droce::wire {

struct Reth {
    Be64 va;      ///< remote virtual address of the first byte
    Be32 rkey;    ///< remote key of the target memory region
    Be32 dma_len; ///< bytes of the whole message (not of this packet)
};
static_assert(sizeof(Reth) == 16);

} // namespace droce::wire
