// `kvgate <command> --help`, run as a user would: every command that `kvgate help` lists prints
// its own flags on stdout and exits 0 (serve and engine used to print the top-level usage).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace kvgate {
namespace {

struct Outcome {
  int exit_code = -1;
  std::string out;  // stdout only; stderr goes to the test's own
};

// Runs `kvgate ARGS` (single-quoted; none here contains a quote) and reads its stdout through a
// pipe, so that the test writes no file.
Outcome Kvgate(const std::vector<std::string>& args) {
  std::string cmd = "'" + std::string(KVGATE_BIN) + "'";
  for (const auto& a : args) cmd += " '" + a + "'";
  cmd += " </dev/null";
  Outcome r;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) return r;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;) r.out.append(buf, n);
  const int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// The commands of the top-level usage: the first word of each line indented by exactly two
// spaces under "commands:".
std::vector<std::string> ListedCommands(const std::string& usage) {
  std::vector<std::string> commands;
  std::istringstream lines(usage);
  bool in_commands = false;
  for (std::string line; std::getline(lines, line);) {
    if (line == "commands:") {
      in_commands = true;
    } else if (in_commands && line.empty()) {
      break;
    } else if (in_commands && line.starts_with("  ") && line[2] != ' ') {
      commands.push_back(line.substr(2, line.find(' ', 2) - 2));
    }
  }
  return commands;
}

// Each command's flags, as its usage must show them. A command added to `kvgate help` without an
// entry here fails the test below, so that its --help is written too.
const std::map<std::string, std::vector<std::string>>& OwnFlags() {
  static const auto* flags = new std::map<std::string, std::vector<std::string>>{
      {"serve", {"--config FILE", "--listen HOST:PORT", "--db PATH"}},
      {"engine",
       {"--model PATH", "--port N", "--host H", "--name NAME", "--db PATH", "--device cpu|cuda",
        "--kv-cache-tokens N", "--gpu-memory-fraction F", "--kv-cache-dtype"}},
      {"generate",
       {"--model PATH", "--chat", "--prompt TEXT", "--max-tokens N", "--temperature T", "--seed S",
        "--device cpu|cuda", "--threads N", "--top-k K", "--top-p P", "--min-p P",
        "--repeat-penalty R", "--stop STR", "--ignore-eos", "--verbose", "--cuda-graphs",
        "--kv-cache-dtype"}},
      {"kv-size",
       {"--model NAME", "--gguf PATH", "--hf-config PATH", "--dtype T", "--context N",
        "--gpu-mem SIZE", "--gpu-memory-utilization F", "--weights SIZE", "--gpu-mem-gib G",
        "--weights-gib W"}},
      {"sigv4-sign", {}},
      {"version", {}},
  };
  return *flags;
}

TEST(CliHelpTest, TopLevelListsTheCommands) {
  const Outcome help = Kvgate({"help"});
  EXPECT_EQ(help.exit_code, 0);
  const auto commands = ListedCommands(help.out);
  EXPECT_EQ(commands, (std::vector<std::string>{"serve", "engine", "generate", "kv-size",
                                                "sigv4-sign", "version"}))
      << help.out;
  EXPECT_NE(help.out.find("`kvgate <command> --help` lists that command's own flags"),
            std::string::npos)
      << help.out;
  EXPECT_EQ(Kvgate({"--help"}).out, help.out);
  EXPECT_EQ(Kvgate({"help", "--help"}).out, help.out);
}

TEST(CliHelpTest, EveryCommandPrintsItsOwnFlags) {
  const auto commands = ListedCommands(Kvgate({"help"}).out);
  ASSERT_FALSE(commands.empty());
  for (const std::string& command : commands) {
    SCOPED_TRACE(command);
    const auto flags = OwnFlags().find(command);
    ASSERT_NE(flags, OwnFlags().end()) << "no expected flags for `kvgate " << command << "`";
    for (const char* help : {"--help", "-h"}) {
      const Outcome r = Kvgate({command, help});
      EXPECT_EQ(r.exit_code, 0) << help;
      EXPECT_TRUE(r.out.starts_with("usage: kvgate " + command)) << help << "\n" << r.out;
      EXPECT_EQ(r.out.find("commands:"), std::string::npos) << "the top-level usage\n" << r.out;
      for (const std::string& flag : flags->second) {
        EXPECT_NE(r.out.find(flag), std::string::npos) << flag << "\n" << r.out;
      }
    }
  }
}

// --help after other flags still wins (engine's parser would take it as --model's value), and
// one command's help does not list another's flags.
TEST(CliHelpTest, HelpAnywhereAndOnlyItsOwn) {
  const Outcome engine = Kvgate({"engine", "--model", "x.gguf", "--help"});
  EXPECT_EQ(engine.exit_code, 0);
  EXPECT_TRUE(engine.out.starts_with("usage: kvgate engine")) << engine.out;
  const Outcome serve = Kvgate({"serve", "--listen", "127.0.0.1:0", "--help"});
  EXPECT_EQ(serve.exit_code, 0);
  EXPECT_TRUE(serve.out.starts_with("usage: kvgate serve")) << serve.out;
  EXPECT_EQ(serve.out.find("--kv-cache-tokens"), std::string::npos) << serve.out;
  EXPECT_EQ(Kvgate({"version", "--help"}).out.find("malloc: "), std::string::npos);
  // An unknown command is an error even with --help.
  const Outcome unknown = Kvgate({"frobnicate", "--help"});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_EQ(unknown.out, "");
}

}  // namespace
}  // namespace kvgate
