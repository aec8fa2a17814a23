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

/**
 * Why frames of link type @p link_type (not Ethernet) are skipped: what `read --explain` says of
 * each, and `explain` of the whole capture.
 */
[[nodiscard]] std::string not_ethernet_sentence(int link_type);

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

/**
 * Why each CNP in a capture was sent: the DCQCN notification point (the receiver of ECN-CE marked
 * packets) sends one CNP back to the sending QP for the marks it saw, at most one per QP per
 * min_time_between_cnps (RoCEv2 Annex A17.9; DCQCN, SIGCOMM'15 Sec. 3). Fed every frame of a
 * capture in order, it remembers per direction (source IP -> destination IP) the latest CE-marked
 * RoCE packet and how many came since the previous CNP for that direction; a CNP from B to A is
 * about the packets A sent to B. Not thread safe; allocates.
 */
class CnpCauses {
  public:
    /**
     * Takes @p frame (capture order). For a CNP returns the sentence that explains it (the marked
     * packet it answers, or that none was seen in the capture); for anything else an empty string.
     */
    std::string observe(const DecodedFrame& frame);

  private:
    struct Marks {
        std::uint64_t last_frame = 0; ///< RawFrame::index of the latest CE-marked packet
        std::string last_what;        ///< "RDMA WRITE MIDDLE PSN 0x.. to QP 0x.."
        std::uint64_t since_cnp = 0;  ///< CE-marked packets since the last CNP of this direction
        std::uint64_t cnps = 0;       ///< CNPs seen for this direction
    };
    std::vector<std::pair<std::string, Marks>> directions_;
    Marks& at(const std::string& key);
};

} // namespace droce::trace
