/* SPDX-License-Identifier: BSD-3-Clause */
/** @file The AETH code tables live in lib/wire/aeth.h; droce-trace names them in its own namespace.
 */
#pragma once

#include "wire/aeth.h"

namespace droce::trace {
using wire::aeth_credits;
using wire::rnr_timer_usec;
} // namespace droce::trace
