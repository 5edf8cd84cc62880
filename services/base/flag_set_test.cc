#include "services/base/flag_set.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace petra::base {
namespace {

using ::testing::HasSubstr;

struct Options {
  std::string listen = "0.0.0.0:50051";
  int64_t threads = 2;
  uint64_t credits = 4;
  double ratio = 0.5;
  bool verbose = false;
};

FlagSet MakeFlags(Options* o) {
  FlagSet f("prog [flags]", "Does things.");
  f.AddString("listen", &o->listen, "address to listen on");
  f.AddInt("threads", &o->threads, "worker threads");
  f.AddUint("credits", &o->credits, "credit window");
  f.AddDouble("ratio", &o->ratio, "a ratio");
  f.AddBool("verbose", &o->verbose, "say more");
  return f;
}

TEST(FlagSet, ParsesBothValueForms) {
  Options o;
  FlagSet f = MakeFlags(&o);
  ASSERT_TRUE(
      f.Parse({"--listen=127.0.0.1:0", "--threads", "8", "-credits=9",
               "--ratio", "0.25", "--verbose", "pos1", "--", "--not-a-flag"})
          .ok());
  EXPECT_EQ(o.listen, "127.0.0.1:0");
  EXPECT_EQ(o.threads, 8);
  EXPECT_EQ(o.credits, 9u);
  EXPECT_EQ(o.ratio, 0.25);
  EXPECT_TRUE(o.verbose);
  EXPECT_THAT(f.positional(), ::testing::ElementsAre("pos1", "--not-a-flag"));
  EXPECT_TRUE(f.WasSet("threads"));
  EXPECT_FALSE(f.help_requested());
}

TEST(FlagSet, BoolForms) {
  Options o;
  o.verbose = true;
  FlagSet f = MakeFlags(&o);
  ASSERT_TRUE(f.Parse({"--no-verbose"}).ok());
  EXPECT_FALSE(o.verbose);
  ASSERT_TRUE(f.Parse({"--verbose=true"}).ok());
  EXPECT_TRUE(o.verbose);
  EXPECT_FALSE(f.Parse({"--verbose=maybe"}).ok());
}

TEST(FlagSet, ErrorsNameTheFlag) {
  Options o;
  FlagSet f = MakeFlags(&o);
  absl::Status s = f.Parse({"--thread", "3"});
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("unknown flag --thread (did you mean --threads?)"));
  // A swap of two letters is one edit; a different word gets no guess.
  s = MakeFlags(&o).Parse({"--lsiten", "x"});
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("unknown flag --lsiten (did you mean --listen?)"));
  s = MakeFlags(&o).Parse({"--colour"});
  EXPECT_EQ(std::string(s.message()), "unknown flag --colour");
  s = MakeFlags(&o).Parse({"--threads", "many"});
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("flag --threads: bad value \"many\""));
  s = MakeFlags(&o).Parse({"--credits", "-4"});
  EXPECT_THAT(std::string(s.message()), HasSubstr("flag --credits"));
  s = MakeFlags(&o).Parse({"--ratio", "inf"});
  EXPECT_THAT(std::string(s.message()), HasSubstr("finite"));
  s = MakeFlags(&o).Parse({"--listen"});
  EXPECT_THAT(std::string(s.message()), HasSubstr("--listen needs a value"));
}

TEST(FlagSet, HelpListsFlagsWithDefaults) {
  Options o;
  FlagSet f = MakeFlags(&o);
  ASSERT_TRUE(f.Parse({"--help"}).ok());
  EXPECT_TRUE(f.help_requested());
  std::string help = f.Help();
  EXPECT_THAT(help, HasSubstr("Usage: prog [flags]"));
  EXPECT_THAT(help, HasSubstr("--listen STRING"));
  EXPECT_THAT(help, HasSubstr("(default: \"0.0.0.0:50051\")"));
  EXPECT_THAT(help, HasSubstr("--threads INT"));
  EXPECT_THAT(help, HasSubstr("--verbose"));
  EXPECT_THAT(help, HasSubstr("--help"));
}

}  // namespace
}  // namespace petra::base
