/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * droce's declaration of the OCP MRC 1.0 controller API version numbers (the companion repository
 * calls its header mrc_ctl_api_ver.h); droce's own text, same names and values. The controller API
 * is versioned apart from the application API, with the same encoding (major in bits 31..24,
 * minor in 23..16, subminor in 15..0) and the same rules: MRC_CTL_API_VER_USED (and
 * MRC_CTL_VENDOR_API_VER_USED), defined by the program before the include or left to default to
 * the current version; too new or too old stops the build, the oldest supported one warns.
 */
#ifndef DROCE_MRC_CTL_API_VER_H
#define DROCE_MRC_CTL_API_VER_H

#define MRC_CTL_API_VER_MAJOR_OFFSET 24
#define MRC_CTL_API_VER_MINOR_OFFSET 16
#define MRC_CTL_API_VER_SUBMINOR_OFFSET 0

/* The controller API version number of major.minor.subminor, unsigned, usable in #if. */
#define MRC_CTL_API_VER(_major, _minor, _sub_minor)                                                \
    ((((_major) + 0u) << MRC_CTL_API_VER_MAJOR_OFFSET) |                                           \
     (((_minor) + 0u) << MRC_CTL_API_VER_MINOR_OFFSET) |                                           \
     (((_sub_minor) + 0u) << MRC_CTL_API_VER_SUBMINOR_OFFSET))

/* "Whatever is current". */
#define MRC_CTL_API_VER_LATEST MRC_CTL_API_VER(0xFF, 0xFF, 0xFFFF)

#define MRC_CTL_API_CURRENT_VERSION MRC_CTL_API_VER(1, 0, 1)
#define MRC_CTL_API_LAST_SUPPORTED_VERSION MRC_CTL_API_VER(0, 0, 0)

#if !defined(MRC_CTL_API_VER_USED)
#define MRC_CTL_API_VER_USED MRC_CTL_API_CURRENT_VERSION
#elif MRC_CTL_API_VER_USED == MRC_CTL_API_VER_LATEST
#undef MRC_CTL_API_VER_USED
#define MRC_CTL_API_VER_USED MRC_CTL_API_CURRENT_VERSION
#endif

#if MRC_CTL_API_VER_USED > MRC_CTL_API_CURRENT_VERSION
#error "MRC_CTL_API_VER_USED asks for a newer controller API than this header describes"
#elif MRC_CTL_API_VER_USED < MRC_CTL_API_LAST_SUPPORTED_VERSION
#error "MRC_CTL_API_VER_USED asks for a controller API older than the oldest one still supported"
#elif MRC_CTL_API_VER_USED == MRC_CTL_API_LAST_SUPPORTED_VERSION
#warning "MRC_CTL_API_VER_USED is the oldest controller API still supported; it may be dropped"
#endif

/* The vendor part of the controller API: its own version, same rules. */
#define MRC_CTL_VENDOR_API_CURRENT_VERSION MRC_CTL_API_VER(1, 0, 0)
#define MRC_CTL_VENDOR_API_LAST_SUPPORTED_VERSION MRC_CTL_API_VER(0, 0, 0)

#if !defined(MRC_CTL_VENDOR_API_VER_USED)
#define MRC_CTL_VENDOR_API_VER_USED MRC_CTL_VENDOR_API_CURRENT_VERSION
#elif MRC_CTL_VENDOR_API_VER_USED == MRC_CTL_API_VER_LATEST
#undef MRC_CTL_VENDOR_API_VER_USED
#define MRC_CTL_VENDOR_API_VER_USED MRC_CTL_VENDOR_API_CURRENT_VERSION
#endif

#if MRC_CTL_VENDOR_API_VER_USED > MRC_CTL_VENDOR_API_CURRENT_VERSION
#error                                                                                             \
    "MRC_CTL_VENDOR_API_VER_USED asks for a newer vendor controller API than this header describes"
#elif MRC_CTL_VENDOR_API_VER_USED < MRC_CTL_VENDOR_API_LAST_SUPPORTED_VERSION
#error                                                                                             \
    "MRC_CTL_VENDOR_API_VER_USED asks for a vendor controller API older than the oldest supported"
#elif MRC_CTL_VENDOR_API_VER_USED == MRC_CTL_VENDOR_API_LAST_SUPPORTED_VERSION
#warning                                                                                           \
    "MRC_CTL_VENDOR_API_VER_USED is the oldest vendor controller API supported; it may be dropped"
#endif

#endif /* DROCE_MRC_CTL_API_VER_H */
