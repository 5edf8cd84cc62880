#include "services/base/flag_set.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace petra::base {
namespace {

std::string Quote(const std::string& s) { return absl::StrCat("\"", s, "\""); }

// Edits (insert, delete, replace, swap two neighbours) from a to b.
size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1,
                                     std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1,
                          d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

}  // namespace

absl::Status BadValue(const std::string& value, const std::string& expected) {
  return absl::InvalidArgumentError(
      absl::StrCat("bad value ", Quote(value), ": expected ", expected));
}

absl::StatusOr<int64_t> ParseIntValue(const std::string& value) {
  int64_t n;
  if (!absl::SimpleAtoi(value, &n)) return BadValue(value, "an integer");
  return n;
}

absl::StatusOr<double> ParseDoubleValue(const std::string& value) {
  double d;
  if (!absl::SimpleAtod(value, &d) || !std::isfinite(d)) {
    return BadValue(value, "a finite number");
  }
  return d;
}

absl::StatusOr<bool> ParseBoolValue(const std::string& value) {
  bool b;
  if (!absl::SimpleAtob(value, &b)) return BadValue(value, "true or false");
  return b;
}

FlagSet::FlagSet(std::string usage, std::string description)
    : usage_(std::move(usage)), description_(std::move(description)) {}

void FlagSet::AddString(const std::string& name, std::string* target,
                        const std::string& help) {
  AddCustom(name, "STRING", target->empty() ? "" : Quote(*target), help,
            [target](const std::string& v) {
              *target = v;
              return absl::OkStatus();
            });
}

namespace {
// A setter storing what `parse` returns into *target.
template <typename T, typename Parse>
std::function<absl::Status(const std::string&)> Store(T* target, Parse parse) {
  return [target, parse](const std::string& v) -> absl::Status {
    absl::StatusOr<T> value = parse(v);
    if (!value.ok()) return value.status();
    *target = *value;
    return absl::OkStatus();
  };
}
}  // namespace

void FlagSet::AddInt(const std::string& name, int64_t* target,
                     const std::string& help) {
  AddCustom(name, "INT", absl::StrCat(*target), help,
            Store(target, ParseIntValue));
}

void FlagSet::AddUint(const std::string& name, uint64_t* target,
                      const std::string& help) {
  AddCustom(name, "N", absl::StrCat(*target), help,
            Store(target, ParseUnsignedValue<uint64_t>));
}

void FlagSet::AddDouble(const std::string& name, double* target,
                        const std::string& help) {
  AddCustom(name, "NUMBER", absl::StrFormat("%g", *target), help,
            Store(target, ParseDoubleValue));
}

void FlagSet::AddBool(const std::string& name, bool* target,
                      const std::string& help) {
  AddCustom(name, "", *target ? "true" : "false", help,
            Store(target, ParseBoolValue));
}

void FlagSet::AddCustom(
    const std::string& name, const std::string& value_name,
    const std::string& default_text, const std::string& help,
    std::function<absl::Status(const std::string&)> setter) {
  Flag f;
  f.name = name;
  f.value_name = value_name;
  f.default_text = default_text;
  f.help = help;
  f.set = std::move(setter);
  f.is_bool = value_name.empty();
  flags_.push_back(std::move(f));
}

FlagSet::Flag* FlagSet::Find(const std::string& name) {
  for (Flag& f : flags_) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

bool FlagSet::WasSet(const std::string& name) const {
  for (const Flag& f : flags_) {
    if (f.name == name) return f.seen;
  }
  return false;
}

absl::Status FlagSet::Parse(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--help" || arg == "-h" || arg == "-help") {
      help_requested_ = true;
      return absl::OkStatus();
    }
    if (arg == "--") {
      positional_.insert(positional_.end(), args.begin() + i + 1, args.end());
      break;
    }
    if (arg.size() < 2 || arg[0] != '-' || arg == "-") {
      positional_.push_back(arg);
      continue;
    }
    std::string body = arg.substr(arg[1] == '-' ? 2 : 1);
    std::string name = body;
    std::string value;
    bool has_value = false;
    if (size_t eq = body.find('='); eq != std::string::npos) {
      name = body.substr(0, eq);
      value = body.substr(eq + 1);
      has_value = true;
    }
    Flag* flag = Find(name);
    if (flag == nullptr && !has_value && name.rfind("no-", 0) == 0) {
      // --no-foo for a bool flag foo.
      Flag* negated = Find(name.substr(3));
      if (negated != nullptr && negated->is_bool) {
        negated->seen = true;
        absl::Status s = negated->set("false");
        if (!s.ok()) return s;
        continue;
      }
    }
    if (flag == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag --", name, Suggestion(name)));
    }
    if (!has_value) {
      if (flag->is_bool) {
        value = "true";
      } else if (i + 1 < args.size()) {
        value = args[++i];
      } else {
        return absl::InvalidArgumentError(absl::StrCat(
            "flag --", name, " needs a value (", flag->value_name, ")"));
      }
    }
    flag->seen = true;
    absl::Status s = flag->set(value);
    if (!s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("flag --", name, ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

std::string FlagSet::Suggestion(const std::string& name) const {
  // A typo, not another word: at most 2 edits, and fewer than a third of
  // the name.
  const size_t most = std::min<size_t>(2, name.size() / 3);
  const Flag* best = nullptr;
  size_t best_distance = most + 1;
  for (const Flag& f : flags_) {
    const size_t d = EditDistance(name, f.name);
    if (d < best_distance) {
      best = &f;
      best_distance = d;
    }
  }
  return best == nullptr ? ""
                         : absl::StrCat(" (did you mean --", best->name, "?)");
}

std::string FlagSet::Help() const {
  std::string out = absl::StrCat("Usage: ", usage_, "\n\n", description_, "\n");
  if (!flags_.empty()) absl::StrAppend(&out, "\nFlags:\n");
  for (const Flag& f : flags_) {
    std::string head = absl::StrCat("  --", f.name);
    if (!f.value_name.empty()) absl::StrAppend(&head, " ", f.value_name);
    absl::StrAppend(&out, head);
    // Align descriptions in a column when the flag name is short enough.
    constexpr size_t kColumn = 30;
    if (head.size() + 2 <= kColumn) {
      out.append(kColumn - head.size(), ' ');
    } else {
      absl::StrAppend(&out, "\n", std::string(kColumn, ' '));
    }
    absl::StrAppend(&out, f.help);
    if (!f.default_text.empty()) {
      absl::StrAppend(&out, " (default: ", f.default_text, ")");
    }
    absl::StrAppend(&out, "\n");
  }
  absl::StrAppend(&out, "  --help                      show this help\n");
  return out;
}

int ParseCommandOrExit(FlagSet& flags, const std::string& command,
                       const std::vector<std::string>& args,
                       bool allow_positional) {
  absl::Status s = flags.Parse(args);
  if (flags.help_requested()) {
    std::cout << flags.Help();
    return 0;
  }
  if (s.ok() && !allow_positional && !flags.positional().empty()) {
    s = absl::InvalidArgumentError(
        absl::StrCat("unexpected argument '", flags.positional()[0], "'"));
  }
  if (!s.ok()) {
    std::cerr << command << ": " << s.message() << "\nRun '" << command
              << " --help' for the list of flags.\n";
    return 2;
  }
  return -1;
}

int ParseOrExit(FlagSet& flags, int argc, char** argv) {
  return ParseCommandOrExit(flags, argv[0],
                            std::vector<std::string>(argv + 1, argv + argc));
}

}  // namespace petra::base
