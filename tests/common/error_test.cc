// SPDX-License-Identifier: Apache-2.0
// Status names and the thread-local error message (src/common/error.cc, c-ffi §2).
#include <cstring>
#include <string>
#include <thread>

#include "hurray_test_support.h"

namespace {

using hurray_test::LastErrorMentions;

TEST(Error, StatusValuesAreTheDocumentedOnes) {
  EXPECT_EQ(HURRAY_OK, 0);
  EXPECT_EQ(HURRAY_ERR_INVALID_ARGUMENT, 1);
  EXPECT_EQ(HURRAY_ERR_UNSUPPORTED_VERSION, 2);
  EXPECT_EQ(HURRAY_ERR_UNSUPPORTED_DTYPE, 3);
  EXPECT_EQ(HURRAY_ERR_UNSUPPORTED_DEVICE, 4);
  EXPECT_EQ(HURRAY_ERR_OUT_OF_MEMORY, 5);
  EXPECT_EQ(HURRAY_ERR_OVERFLOW, 6);
  EXPECT_EQ(HURRAY_ERR_DEVICE, 7);
  EXPECT_EQ(HURRAY_ERR_INTERNAL, 8);
  EXPECT_EQ(HURRAY_ERR_RELEASED, 9);
  EXPECT_EQ(HURRAY_ERR_LEAKED, 10);
  EXPECT_EQ(HURRAY_ERR_IPC, 11);
  EXPECT_EQ(HURRAY_ERR_IPC_CLOSED, 12);
  EXPECT_EQ(HURRAY_ERR_IPC_TIMEOUT, 13);
}

TEST(Error, EveryStatusHasItsName) {
  EXPECT_STREQ(hurray_status_name(HURRAY_OK), "HURRAY_OK");
  EXPECT_STREQ(hurray_status_name(HURRAY_ERR_INVALID_ARGUMENT), "HURRAY_ERR_INVALID_ARGUMENT");
  EXPECT_STREQ(hurray_status_name(HURRAY_ERR_UNSUPPORTED_VERSION),
               "HURRAY_ERR_UNSUPPORTED_VERSION");
  EXPECT_STREQ(hurray_status_name(HURRAY_ERR_UNSUPPORTED_DTYPE), "HURRAY_ERR_UNSUPPORTED_DTYPE");
  EXPECT_STREQ(hurray_status_name(HURRAY_ERR_UNSUPPORTED_DEVICE), "HURRAY_ERR_UNSUPPORTED_DEVICE");
  EXPECT_STREQ(hurray_status_name(HURRAY_ERR_OUT_OF_MEMORY), "HURRAY_ERR_OUT_OF_MEMORY");
  EXPECT_STREQ(hurray_status_name(HURRAY_ERR_OVERFLOW), "HURRAY_ERR_OVERFLOW");
  EXPECT_STREQ(hurray_status_name(HURRAY_ERR_DEVICE), "HURRAY_ERR_DEVICE");
  EXPECT_STREQ(hurray_status_name(HURRAY_ERR_INTERNAL), "HURRAY_ERR_INTERNAL");
  EXPECT_STREQ(hurray_status_name(HURRAY_ERR_RELEASED), "HURRAY_ERR_RELEASED");
  EXPECT_STREQ(hurray_status_name(HURRAY_ERR_LEAKED), "HURRAY_ERR_LEAKED");
  EXPECT_STREQ(hurray_status_name(HURRAY_ERR_IPC), "HURRAY_ERR_IPC");
  EXPECT_STREQ(hurray_status_name(HURRAY_ERR_IPC_CLOSED), "HURRAY_ERR_IPC_CLOSED");
  EXPECT_STREQ(hurray_status_name(HURRAY_ERR_IPC_TIMEOUT), "HURRAY_ERR_IPC_TIMEOUT");
}

TEST(Error, UnknownStatusesHaveTheFallbackName) {
  for (int32_t s : {-1, 14, 15, 100, INT32_MIN, INT32_MAX}) {
    const char *name = hurray_status_name(s);
    ASSERT_NE(name, nullptr);
    EXPECT_STREQ(name, "HURRAY_UNKNOWN_STATUS") << "status " << s;
  }
}

TEST(Error, StatusNamesAreStaticStorage) {
  const char *a = hurray_status_name(HURRAY_ERR_OVERFLOW);
  const char *b = hurray_status_name(HURRAY_ERR_OVERFLOW);
  EXPECT_EQ(a, b);
}

TEST(Error, LastErrorIsEmptyOnAFreshThread) {
  std::string seen = "<not run>";
  bool was_null = true;
  std::thread t([&] {
    const char *m = hurray_last_error();
    was_null = (m == nullptr);
    if (m != nullptr) seen = m;
  });
  t.join();
  EXPECT_FALSE(was_null);
  EXPECT_EQ(seen, "");
}

TEST(Error, FailureSetsAMessageNamingTheArgument) {
  EXPECT_STATUS(hurray_buffer_release(nullptr), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::strlen(hurray_last_error()), 0u);
  EXPECT_TRUE(LastErrorMentions("NULL"));
}

TEST(Error, SuccessfulCallsDoNotClearTheMessage) {
  hurray_buffer empty;
  std::memset(&empty, 0, sizeof empty);
  EXPECT_STATUS(hurray_share(&empty, 2, nullptr), HURRAY_ERR_INVALID_ARGUMENT);
  const std::string before = hurray_last_error();
  ASSERT_FALSE(before.empty());
  EXPECT_OK(hurray_buffer_release(&empty));
  EXPECT_OK(hurray_check_version(HURRAY_VERSION));
  EXPECT_EQ(std::string(hurray_last_error()), before);
}

TEST(Error, MessageIsThreadLocal) {
  // This thread fails with one message ...
  EXPECT_STATUS(hurray_check_version(0xFFFFFFFFu), HURRAY_ERR_UNSUPPORTED_VERSION);
  const std::string mine = hurray_last_error();
  ASSERT_FALSE(mine.empty());
  // ... another thread fails differently and sees only its own message.
  std::string theirs_before, theirs_after;
  int32_t theirs_status = HURRAY_OK;
  std::thread t([&] {
    theirs_before = hurray_last_error();
    theirs_status = hurray_buffer_validate(nullptr);
    theirs_after = hurray_last_error();
  });
  t.join();
  EXPECT_STATUS(theirs_status, HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(theirs_before, "");
  EXPECT_NE(theirs_after, "");
  EXPECT_NE(theirs_after, mine);
  EXPECT_EQ(std::string(hurray_last_error()), mine);
}

}  // namespace
