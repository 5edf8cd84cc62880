// A small command-line flag parser shared by every binary: typed flags bound
// to fields of an Options struct or a proto, generated --help, and errors
// that name the flag. Binaries only map flags to options (see main.cc files).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"

namespace petra::base {

// The value parsers behind the typed flags, for AddCustom setters that store
// into something other than a plain variable (a proto field, say). Errors
// read `bad value "V": expected ...`.
absl::Status BadValue(const std::string& value, const std::string& expected);
absl::StatusOr<int64_t> ParseIntValue(const std::string& value);
absl::StatusOr<double> ParseDoubleValue(const std::string& value);  // finite
absl::StatusOr<bool> ParseBoolValue(const std::string& value);
// uint32_t or uint64_t; a minus sign or an out-of-range value is refused.
template <typename T>
absl::StatusOr<T> ParseUnsignedValue(const std::string& value) {
  T n;
  if (value.empty() || value[0] == '-' || !absl::SimpleAtoi(value, &n)) {
    return BadValue(value, "a non-negative integer");
  }
  return n;
}

class FlagSet {
 public:
  // `usage` is the first line of --help, e.g. "petra-coordinator [flags]".
  // `description` follows it: what the program does, briefly.
  FlagSet(std::string usage, std::string description);

  // Each Add* binds --name to *target; the target's value when Parse runs
  // is shown as the default in --help. `help` says what the flag does.
  void AddString(const std::string& name, std::string* target,
                 const std::string& help);
  void AddInt(const std::string& name, int64_t* target,
              const std::string& help);
  void AddUint(const std::string& name, uint64_t* target,
               const std::string& help);
  void AddDouble(const std::string& name, double* target,
                 const std::string& help);
  // A bool flag takes no value (--name sets true), or --name=true|false.
  void AddBool(const std::string& name, bool* target, const std::string& help);
  // A flag whose value is checked and stored by `setter`; its error message
  // is reported with the flag's name. `default_text` is shown in --help.
  void AddCustom(const std::string& name, const std::string& value_name,
                 const std::string& default_text, const std::string& help,
                 std::function<absl::Status(const std::string&)> setter);

  // Parses args (without the program name). Positional arguments are
  // collected in positional(). `--` ends flag parsing. Returns
  // INVALID_ARGUMENT naming the flag for unknown flags, missing or bad
  // values. --help / -h sets help_requested() and stops parsing.
  absl::Status Parse(const std::vector<std::string>& args);

  bool help_requested() const { return help_requested_; }
  const std::vector<std::string>& positional() const { return positional_; }
  // Whether --name appeared on the command line.
  bool WasSet(const std::string& name) const;

  // The full --help text.
  std::string Help() const;

 private:
  // " (did you mean --NAME?)" for the flag a typo of `name` most likely
  // meant, or "".
  std::string Suggestion(const std::string& name) const;
  struct Flag {
    std::string name;
    std::string value_name;  // empty for bool flags
    std::string default_text;
    std::string help;
    bool is_bool = false;  // takes no value; set when value_name is empty
    std::function<absl::Status(const std::string&)> set;
    bool seen = false;
  };
  Flag* Find(const std::string& name);

  std::string usage_;
  std::string description_;
  std::vector<Flag> flags_;
  std::vector<std::string> positional_;
  bool help_requested_ = false;
};

// Parses `args` for the command `command` (e.g. "petra train"): prints help
// to stdout and returns 0 when asked; prints the error and a hint to stderr
// and returns 2 on bad flags or (unless allowed) positional arguments;
// returns -1 when the program should go on.
int ParseCommandOrExit(FlagSet& flags, const std::string& command,
                       const std::vector<std::string>& args,
                       bool allow_positional = false);

// ParseCommandOrExit for a main: the command is argv[0], args argv[1..].
int ParseOrExit(FlagSet& flags, int argc, char** argv);

}  // namespace petra::base
