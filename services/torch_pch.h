// Precompiled header for torch-heavy targets (see cmake/PetraTorch.cmake).
// Only .cc files get it; headers must not include torch unless they need it.
#pragma once
#include <torch/torch.h>
