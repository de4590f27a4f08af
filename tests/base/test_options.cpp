// The option registry: flag over environment over default, refused values, one row per option.
#include "loom/base/options.h"

#include <map>
#include <set>
#include <string>

#include <gtest/gtest.h>

namespace loom::opt {
namespace {

// A registry over a fake environment.
struct Fake {
  std::map<std::string, std::string> vars;
  Registry reg{[this](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  }};
  Fake(std::initializer_list<std::pair<const std::string, std::string>> v) : vars(v) {}
};

TEST(Options, DefaultWhenUnset) {
  Fake f{};
  EXPECT_EQ(f.reg.get_int(Opt::kThreads), 2);
  EXPECT_EQ(f.reg.source(Opt::kThreads), Source::kDefault);
  EXPECT_EQ(f.reg.get_string(Opt::kFuse), "gpu");
  EXPECT_EQ(f.reg.get_int(Opt::kDecodeAttentionMax), 8);
  EXPECT_TRUE(f.reg.get_bool(Opt::kEvolvePersistent));
  EXPECT_FALSE(f.reg.get_bool(Opt::kProfile));
  EXPECT_TRUE(f.reg.check_environment().ok());
}

TEST(Options, EnvironmentBeatsDefault) {
  Fake f{{"LOOM_THREADS", "7"}, {"LOOM_PROFILE", "yes"}, {"LOOM_FUSE", "0"}, {"LOOM_MODEL", "/m.gguf"}};
  EXPECT_EQ(f.reg.get_int(Opt::kThreads), 7);
  EXPECT_EQ(f.reg.source(Opt::kThreads), Source::kEnv);
  EXPECT_TRUE(f.reg.get_bool(Opt::kProfile));
  EXPECT_EQ(f.reg.get_text(Opt::kProfile), "1");
  EXPECT_EQ(f.reg.get_string(Opt::kFuse), "0");
  EXPECT_EQ(f.reg.get_string(Opt::kModel), "/m.gguf");
}

TEST(Options, EmptyVariableCountsAsUnset) {
  Fake f{{"LOOM_THREADS", ""}, {"LOOM_EVOLVE_PERSISTENT", ""}};
  EXPECT_EQ(f.reg.get_int(Opt::kThreads), 2);
  EXPECT_EQ(f.reg.source(Opt::kThreads), Source::kDefault);
  EXPECT_TRUE(f.reg.get_bool(Opt::kEvolvePersistent));
}

TEST(Options, EnvironmentIsReadOnce) {
  Fake f{{"LOOM_THREADS", "3"}};
  EXPECT_EQ(f.reg.get_int(Opt::kThreads), 3);
  f.vars["LOOM_THREADS"] = "5";
  EXPECT_EQ(f.reg.get_int(Opt::kThreads), 3);
}

TEST(Options, SystemVariablesAreReadAtEachUse) {
  Fake f{{"PATH", "/a"}};
  EXPECT_EQ(f.reg.get_string(Opt::kPath), "/a");
  f.vars["PATH"] = "/b";
  EXPECT_EQ(f.reg.get_string(Opt::kPath), "/b");
  f.vars.erase("PATH");
  EXPECT_EQ(f.reg.get_string(Opt::kPath), info(Opt::kPath).def);
  EXPECT_EQ(f.reg.get_string(Opt::kTmpdir), "/tmp");
  EXPECT_FALSE(f.reg.set_from_flag(Opt::kPath, "/c").ok());
}

TEST(Options, FlagBeatsEnvironment) {
  Fake f{{"LOOM_THREADS", "7"}, {"LOOM_DEVICE", "cpu"}};
  ASSERT_TRUE(f.reg.set_from_flag(Opt::kThreads, "4").ok());
  ASSERT_TRUE(f.reg.set_from_flag(Opt::kDevice, "cuda:1").ok());
  EXPECT_EQ(f.reg.get_int(Opt::kThreads), 4);
  EXPECT_EQ(f.reg.source(Opt::kThreads), Source::kFlag);
  EXPECT_EQ(f.reg.get_string(Opt::kDevice), "cuda:1");
  f.reg.clear_flag(Opt::kThreads);
  EXPECT_EQ(f.reg.get_int(Opt::kThreads), 7);
  EXPECT_EQ(f.reg.source(Opt::kThreads), Source::kEnv);
}

TEST(Options, BadFlagValueNamesTheFlagAndTheAcceptedValues) {
  Fake f{};
  Status s = f.reg.set_from_flag(Opt::kThreads, "abc");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--threads abc"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("[1, 1024]"), std::string::npos) << s.message();
  EXPECT_EQ(f.reg.source(Opt::kThreads), Source::kDefault);  // a refused flag sets nothing
  EXPECT_FALSE(f.reg.set_from_flag(Opt::kFuse, "2").ok());
  EXPECT_FALSE(f.reg.set_from_flag(Opt::kProfile, "maybe").ok());
  EXPECT_FALSE(f.reg.set_from_flag(Opt::kThreads, "0").ok());  // below the range
}

TEST(Options, BadEnvironmentValueIsReportedNotSilentlyDefaulted) {
  Fake f{{"LOOM_THREADS", "abc"}, {"LOOM_LOG", "verbose"}, {"LOOM_NO_GRAPHS", "2"}, {"LOOM_FUSE", "1"}};
  Status s = f.reg.check_environment();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("LOOM_THREADS=abc: expected an integer in [1, 1024]"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("LOOM_LOG=verbose: expected one of error|warn|info|debug"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("LOOM_NO_GRAPHS=2: expected one of 0|1"), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find("LOOM_FUSE"), std::string::npos) << s.message();
  // A library user that reads it anyway gets the default (and one warning on stderr).
  EXPECT_EQ(f.reg.get_int(Opt::kThreads), 2);
  EXPECT_EQ(f.reg.source(Opt::kThreads), Source::kDefault);
  bool listed = false;
  for (const Resolved& r : f.reg.list())
    if (r.info->id == Opt::kThreads) listed = !r.error.empty() && r.value == "2";
  EXPECT_TRUE(listed);
  // A flag still wins over a refused environment value.
  ASSERT_TRUE(f.reg.set_from_flag(Opt::kThreads, "3").ok());
  EXPECT_EQ(f.reg.get_int(Opt::kThreads), 3);
}

TEST(Options, TableListsEachOptionOnce) {
  const auto& t = table();
  ASSERT_EQ(t.size(), static_cast<size_t>(Opt::kCount));
  std::set<std::string> names, envs, flags;
  for (size_t i = 0; i < t.size(); ++i) {
    const OptionInfo& r = t[i];
    EXPECT_EQ(static_cast<size_t>(r.id), i) << r.name;
    EXPECT_TRUE(names.insert(r.name).second) << "name listed twice: " << r.name;
    if (*r.env) {
      EXPECT_TRUE(envs.insert(r.env).second) << "variable listed twice: " << r.env;
    }
    if (*r.flag) {
      EXPECT_TRUE(flags.insert(r.flag).second) << "flag listed twice: " << r.flag;
    }
    EXPECT_TRUE(*r.env || *r.flag) << r.name << " is set by neither a variable nor a flag";
    EXPECT_STRNE(r.help, "") << r.name;
    if (r.system) {
      EXPECT_STREQ(r.flag, "") << r.name;
    }
  }
  Fake f{};
  EXPECT_EQ(f.reg.list().size(), t.size());
}

TEST(Options, SecretsAreNotListedByValue) {
  Fake f{{"LOOM_API_KEY", "hunter2"}};
  EXPECT_EQ(f.reg.get_string(Opt::kApiKey), "hunter2");
  for (const Resolved& r : f.reg.list())
    if (r.info->id == Opt::kApiKey) {
      EXPECT_EQ(r.value, "(set)");
    }
}

TEST(Options, ScopedFlagRestores) {
  const std::string before = get_text(Opt::kEvolveIsolation);
  const Source src = source(Opt::kEvolveIsolation);
  {
    ScopedFlag f(Opt::kEvolveIsolation, "exec");
    ASSERT_TRUE(f.status().ok());
    EXPECT_EQ(get_string(Opt::kEvolveIsolation), "exec");
    {
      ScopedFlag g(Opt::kEvolveIsolation, "fork");
      EXPECT_EQ(get_string(Opt::kEvolveIsolation), "fork");
    }
    EXPECT_EQ(get_string(Opt::kEvolveIsolation), "exec");
  }
  EXPECT_EQ(get_text(Opt::kEvolveIsolation), before);
  EXPECT_EQ(source(Opt::kEvolveIsolation), src);
}

}  // namespace
}  // namespace loom::opt
