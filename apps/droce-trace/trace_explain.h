/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * `droce-trace --explain`: for every header of a frame, what the header is for and what the values
 * in this packet mean, in plain sentences (IBTA Vol 1 ch. 9 and Annex A17 are the references).
 *
 * Opcode sentences are assembled from the opcode table's flags (operation, place in the message,
 * immediate, invalidate, transport), so they follow the table rather than a second hand-typed list.
 * droce's MRC opcodes (wire/mrc.h) have a sentence each, and their headers (MDETH, SETH, NETH,
 * PETH, EPETH) are explained field by field: path and plane, SACK ranges and holes, NACK reasons.
 *
 * All functions are pure and thread safe; they allocate (std::bad_alloc may escape).
 */
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trace_format.h"

namespace droce::trace {

/** One explained item: a header (or one field of it) and a sentence about it. */
struct Explanation {
    unsigned depth = 0; ///< 0 for a header, 1 for a field of the header above
    std::string header; ///< "BTH", "opcode", "AETH" ...
    std::string text;   ///< one or two sentences, no trailing newline
};

/**
 * Explains every header of @p frame, in wire order: IP, UDP, BTH and its fields, the extension
 * headers, the payload and pad, the ICRC, then the reject reason if any. A skipped frame gets one
 * explanation of what it is and why droce-trace does not decode it.
 */
[[nodiscard]] std::vector<Explanation> explain_frame(const DecodedFrame& frame);

/**
 * format_text() of @p frame followed by its explanations, one per line, indented by four spaces
 * (six for fields) with the header name in a 10-wide column. No trailing newline.
 */
[[nodiscard]] std::string format_explained(const DecodedFrame& frame);

/** What an opcode does, e.g. for RC_RDMA_WRITE_ONLY "RDMA WRITE ... in one packet ... ". */
[[nodiscard]] std::string describe_opcode(wire::Opcode op);

/**
 * The meaning of an AETH syndrome, e.g. 0x1f → "ACK; credit count 31 = end-to-end credits not in
 * use", 0x2e → "RNR NAK: responder had no receive WQE; retry after ... (14 = 1.28 ms)",
 * 0x62 → "NAK: remote access error: ...".
 */
[[nodiscard]] std::string describe_syndrome(std::uint8_t syndrome);

/** The minimum RNR timer of @p code (0..31) in milliseconds, as text: "1.28 ms", "655.36 ms". */
[[nodiscard]] std::string format_rnr_timer(std::uint8_t code);

} // namespace droce::trace
