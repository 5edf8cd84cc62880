// The commands petra-local runs: those that build networks on this machine
// and so need libtorch (client/command_table.h).
#pragma once

#include <string_view>

#include "client/command_table.h"

namespace petra::client {

// The `local` command named `name`, or nullptr.
CommandFn LocalCommand(std::string_view name);

}  // namespace petra::client
