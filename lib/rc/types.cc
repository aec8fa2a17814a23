/* SPDX-License-Identifier: BSD-3-Clause */
#include "types.h"

namespace droce::rc {

#define DROCE_CASE(name, value)                                                                    \
    case value:                                                                                    \
        return #name;
std::string_view to_string(WrOpcode v) noexcept {
    switch (static_cast<unsigned>(v)) { DROCE_WR_OPCODES(DROCE_CASE) }
    return "unknown";
}
std::string_view to_string(WcStatus v) noexcept {
    switch (static_cast<unsigned>(v)) { DROCE_WC_STATUSES(DROCE_CASE) }
    return "unknown";
}
std::string_view to_string(WcOpcode v) noexcept {
    switch (static_cast<unsigned>(v)) { DROCE_WC_OPCODES(DROCE_CASE) }
    return "unknown";
}
std::string_view to_string(QpState v) noexcept {
    switch (static_cast<unsigned>(v)) { DROCE_QP_STATES(DROCE_CASE) }
    return "unknown";
}
#undef DROCE_CASE

} // namespace droce::rc
