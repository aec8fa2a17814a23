/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * The ABI of droce's declaration of the OCP MRC 1.0 API (lib/mrcapi/include): every row of
 * layout_checks.h (sizes, alignments, offsets, enum values, version macros) as C++ sees it and as C
 * sees it (layout_c.c), against the values the OCP headers give; the prototypes are checked by
 * layout_c.c's redeclarations, and its table of function addresses links only when lib_mrc.so
 * defines every application and controller function.
 */
#include <mrc_ctl.h>

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>

#include "layout_checks.h"

#define ALIGN(t) alignof(t)
#define U32(x) static_cast<std::uint32_t>(x)
#define MSIZE(t, m) sizeof(t::m)

extern "C" {
struct mrcapi_layout_row {
    const char* expr;
    long long got;
    long long want;
};
extern const mrcapi_layout_row mrcapi_layout_c[];
extern const std::size_t mrcapi_layout_c_count;
using mrcapi_fn = void (*)();
extern const mrcapi_fn mrcapi_app_functions[];
extern const std::size_t mrcapi_app_function_count;
extern const mrcapi_fn mrcapi_ctl_functions[];
extern const std::size_t mrcapi_ctl_function_count;
int mrcapi_ev_unpopulated_ok();
}

namespace {

#define MRCAPI_COUNT(e, want) +1
constexpr std::size_t kRows = 0 MRCAPI_LAYOUT_CHECKS(MRCAPI_COUNT);

TEST(MrcApiLayout, AsCxxSeesIt) {
#define MRCAPI_CXX_CHECK(e, want)                                                                  \
    EXPECT_EQ(static_cast<long long>(e), static_cast<long long>(want)) << #e;
    MRCAPI_LAYOUT_CHECKS(MRCAPI_CXX_CHECK)
    EXPECT_EQ(kRows, 300u);
}

TEST(MrcApiLayout, AsCSeesIt) {
    ASSERT_EQ(mrcapi_layout_c_count, kRows);
    for (std::size_t i = 0; i < mrcapi_layout_c_count; ++i)
        EXPECT_EQ(mrcapi_layout_c[i].got, mrcapi_layout_c[i].want) << mrcapi_layout_c[i].expr;
    EXPECT_EQ(mrcapi_ev_unpopulated_ok(), 1);
}

TEST(MrcApiLayout, EveryApplicationFunctionLinks) {
    ASSERT_EQ(mrcapi_app_function_count, 27u);
    for (std::size_t i = 0; i < mrcapi_app_function_count; ++i)
        EXPECT_NE(mrcapi_app_functions[i], nullptr) << i;
}

TEST(MrcApiLayout, EveryControllerFunctionLinks) {
    ASSERT_EQ(mrcapi_ctl_function_count, 14u);
    for (std::size_t i = 0; i < mrcapi_ctl_function_count; ++i)
        EXPECT_NE(mrcapi_ctl_functions[i], nullptr) << i;
}

TEST(MrcApiLayout, VersionSelection) {
    // A program that states nothing gets the current versions; the _ex query exists from 1.0.1.
    EXPECT_EQ(MRC_API_VER_USED, MRC_API_VER(1, 0, 1));
    EXPECT_EQ(MRC_VENDOR_API_VER_USED, MRC_API_VER(1, 0, 0));
    EXPECT_EQ(MRC_CTL_API_VER_USED, MRC_CTL_API_VER(1, 0, 1));
    EXPECT_EQ(MRC_CTL_VENDOR_API_VER_USED, MRC_CTL_API_VER(1, 0, 0));
    EXPECT_EQ(MRC_API_VER(0xFF, 0xFF, 0xFFFF), MRC_API_VER_LATEST);
}

} // namespace
