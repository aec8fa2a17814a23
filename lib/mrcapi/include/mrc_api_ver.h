/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * droce's declaration of the OCP MRC 1.0 application API version numbers (the companion
 * repository's mrc_api_ver.h names them; this file is droce's own text with the same names and
 * values, so that a program built against either header asks for the same version).
 *
 * A version is one 32-bit number: major in bits 31..24, minor in bits 23..16, subminor in bits
 * 15..0. A program may define MRC_API_VER_USED (and MRC_VENDOR_API_VER_USED) before including
 * mrc.h to say which version it was written for; left undefined, or set to MRC_API_VER_LATEST,
 * it means the current one. A version newer than the current one, or older than the oldest still
 * supported, stops the build; the oldest supported one builds with a warning that it may go away.
 *
 * droce's lib_mrc reports these numbers from mrc_query_version().
 */
#ifndef DROCE_MRC_API_VER_H
#define DROCE_MRC_API_VER_H

/* Where each part of a version sits in the 32-bit number. */
#define MRC_API_VER_MAJOR_OFFSET 24
#define MRC_API_VER_MINOR_OFFSET 16
#define MRC_API_VER_SUBMINOR_OFFSET 0

/* The version number of major.minor.subminor, unsigned (0xFF in the major field does not overflow)
 * and usable in #if. */
#define MRC_API_VER(_major, _minor, _sub_minor)                                                    \
    ((((_major) + 0u) << MRC_API_VER_MAJOR_OFFSET) |                                               \
     (((_minor) + 0u) << MRC_API_VER_MINOR_OFFSET) |                                               \
     (((_sub_minor) + 0u) << MRC_API_VER_SUBMINOR_OFFSET))

/* "Whatever is current": every field at its largest. */
#define MRC_API_VER_LATEST MRC_API_VER(0xFF, 0xFF, 0xFFFF)

/* This header describes 1.0.1; every version down to 0.0.0 is still accepted. */
#define MRC_API_CURRENT_VERSION MRC_API_VER(1, 0, 1)
#define MRC_API_LAST_SUPPORTED_VERSION MRC_API_VER(0, 0, 0)

#if !defined(MRC_API_VER_USED)
#define MRC_API_VER_USED MRC_API_CURRENT_VERSION
#elif MRC_API_VER_USED == MRC_API_VER_LATEST
#undef MRC_API_VER_USED
#define MRC_API_VER_USED MRC_API_CURRENT_VERSION
#endif

#if MRC_API_VER_USED > MRC_API_CURRENT_VERSION
#error "MRC_API_VER_USED asks for a newer MRC API than this mrc_api_ver.h describes"
#elif MRC_API_VER_USED < MRC_API_LAST_SUPPORTED_VERSION
#error "MRC_API_VER_USED asks for an MRC API older than the oldest one still supported"
#elif MRC_API_VER_USED == MRC_API_LAST_SUPPORTED_VERSION
#warning "MRC_API_VER_USED is the oldest MRC API still supported; it may be dropped"
#endif

/*
 * The vendor (provider-specific) part of the API has its own version, with the same encoding and
 * the same rules. droce adds no vendor-specific calls; it reports these numbers.
 */
#define MRC_VENDOR_API_CURRENT_VERSION MRC_API_VER(1, 0, 0)
#define MRC_VENDOR_API_LAST_SUPPORTED_VERSION MRC_API_VER(0, 0, 0)

#if !defined(MRC_VENDOR_API_VER_USED)
#define MRC_VENDOR_API_VER_USED MRC_VENDOR_API_CURRENT_VERSION
#elif MRC_VENDOR_API_VER_USED == MRC_API_VER_LATEST
#undef MRC_VENDOR_API_VER_USED
#define MRC_VENDOR_API_VER_USED MRC_VENDOR_API_CURRENT_VERSION
#endif

#if MRC_VENDOR_API_VER_USED > MRC_VENDOR_API_CURRENT_VERSION
#error "MRC_VENDOR_API_VER_USED asks for a newer vendor API than this mrc_api_ver.h describes"
#elif MRC_VENDOR_API_VER_USED < MRC_VENDOR_API_LAST_SUPPORTED_VERSION
#error "MRC_VENDOR_API_VER_USED asks for a vendor API older than the oldest one still supported"
#elif MRC_VENDOR_API_VER_USED == MRC_VENDOR_API_LAST_SUPPORTED_VERSION
#warning "MRC_VENDOR_API_VER_USED is the oldest vendor API still supported; it may be dropped"
#endif

#endif /* DROCE_MRC_API_VER_H */
