#include "services/base/secret_key.h"

#include <gtest/gtest.h>

#include <set>

namespace petra::base {
namespace {

TEST(SecretKey, EachKeyIsNewAndHasTheFormThatIsChecked) {
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    const std::string key = NewSecretKey();
    EXPECT_TRUE(IsSecretKey(key)) << key;
    EXPECT_TRUE(seen.insert(key).second) << "drawn twice: " << key;
  }
}

TEST(SecretKey, WhatIsNotAKeyIsSaidSo) {
  const std::string key = NewSecretKey();
  for (const std::string& bad :
       {std::string(), key.substr(1), key + "0", std::string(64, 'g'),
        std::string(64, 'A'), std::string(63, '0') + " "}) {
    EXPECT_FALSE(IsSecretKey(bad)) << bad;
  }
}

}  // namespace
}  // namespace petra::base
