// SPDX-License-Identifier: Apache-2.0
// hurray_version / hurray_check_version (src/api/version.cc, c-ffi §1).
#include <cstdint>
#include <string>

#include "hurray_test_support.h"

namespace {

using hurray_test::LastErrorMentions;

uint32_t pack(uint32_t major, uint32_t minor, uint32_t patch) {
  return (major << 16) | (minor << 8) | patch;
}

std::string dotted(uint32_t v) {
  return std::to_string(v >> 16) + "." + std::to_string((v >> 8) & 0xFF) + "." +
         std::to_string(v & 0xFF);
}

TEST(Version, RuntimeVersionIsTheHeaderVersion) {
  EXPECT_EQ(hurray_version(), HURRAY_VERSION);
  EXPECT_EQ(hurray_version() >> 16, uint32_t{HURRAY_VERSION_MAJOR});
  EXPECT_EQ((hurray_version() >> 8) & 0xFFu, uint32_t{HURRAY_VERSION_MINOR});
  EXPECT_EQ(hurray_version() & 0xFFu, uint32_t{HURRAY_VERSION_PATCH});
  EXPECT_EQ(HURRAY_VERSION, pack(HURRAY_VERSION_MAJOR, HURRAY_VERSION_MINOR, HURRAY_VERSION_PATCH));
}

TEST(Version, OwnHeaderIsAccepted) { EXPECT_OK(hurray_check_version(HURRAY_VERSION)); }

TEST(Version, OlderPatchIsAcceptedAndOlderMinorOnlyFromMajorOne) {
  const uint32_t lib = hurray_version();
  const uint32_t major = lib >> 16, minor = (lib >> 8) & 0xFF, patch = lib & 0xFF;
  EXPECT_OK(hurray_check_version(pack(major, minor, 0)));
  if (patch > 0) {
    EXPECT_OK(hurray_check_version(pack(major, minor, patch - 1)));
  }
  if (minor > 0) {
    // 0.x: any minor release may change the ABI; from 1.0 minors only add.
    const int32_t expected = major == 0 ? HURRAY_ERR_UNSUPPORTED_VERSION : HURRAY_OK;
    EXPECT_STATUS(hurray_check_version(pack(major, minor - 1, 255)), expected);
  }
}

TEST(Version, NewerPatchIsRejectedAndBothVersionsAreNamed) {
  const uint32_t lib = hurray_version();
  ASSERT_LT(lib & 0xFFu, 255u);
  const uint32_t header = lib + 1;  // same major.minor, next patch
  EXPECT_STATUS(hurray_check_version(header), HURRAY_ERR_UNSUPPORTED_VERSION);
  EXPECT_TRUE(LastErrorMentions(dotted(header).c_str()));
  EXPECT_TRUE(LastErrorMentions(dotted(lib).c_str()));
}

TEST(Version, NewerMinorIsRejected) {
  const uint32_t lib = hurray_version();
  const uint32_t header = pack(lib >> 16, ((lib >> 8) & 0xFF) + 1, 0);
  EXPECT_STATUS(hurray_check_version(header), HURRAY_ERR_UNSUPPORTED_VERSION);
  EXPECT_TRUE(LastErrorMentions(dotted(header).c_str()));
}

TEST(Version, OtherMajorIsRejectedEvenWhenOlder) {
  const uint32_t lib = hurray_version();
  const uint32_t major = lib >> 16;
  EXPECT_STATUS(hurray_check_version(pack(major + 1, 0, 0)), HURRAY_ERR_UNSUPPORTED_VERSION);
  EXPECT_TRUE(LastErrorMentions(dotted(pack(major + 1, 0, 0)).c_str()));
  EXPECT_TRUE(LastErrorMentions(dotted(lib).c_str()));
  if (major > 0) {
    EXPECT_STATUS(hurray_check_version(pack(major - 1, 255, 255)), HURRAY_ERR_UNSUPPORTED_VERSION);
  }
}

TEST(Version, GarbageAboveTheMajorByteIsRejected) {
  EXPECT_STATUS(hurray_check_version(0xFFFFFFFFu), HURRAY_ERR_UNSUPPORTED_VERSION);
  EXPECT_STATUS(hurray_check_version(HURRAY_VERSION | 0x01000000u), HURRAY_ERR_UNSUPPORTED_VERSION);
}

TEST(Version, DLPackVersionWrittenOnExportIs13) {
  EXPECT_EQ(HURRAY_DLPACK_MAJOR, 1u);
  EXPECT_EQ(HURRAY_DLPACK_MINOR, 3u);
  EXPECT_EQ(HURRAY_DLPACK_MAJOR, uint32_t{DLPACK_MAJOR_VERSION});
}

}  // namespace
