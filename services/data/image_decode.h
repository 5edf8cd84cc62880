// JPEG and PNG decoding with Debian's libjpeg-turbo and libpng, for image
// folder datasets. Bytes that are not a whole, valid image of either kind
// are an error naming the file, never a crash: both libraries report
// errors through callbacks we turn into statuses.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace petra::data {

struct DecodedImage {
  int64_t height = 0, width = 0, channels = 0;  // channels: 1 or 3
  std::vector<uint8_t> pixels;                  // H x W x C, row-major
};

// Decodes `bytes` (JPEG or PNG, told apart by their signatures) into
// `channels` channels (1: grey, 3: RGB; colour converted as needed, alpha
// dropped, 16-bit PNG reduced to 8). `name` (the file) prefixes errors.
// Images above `max_pixels` are refused before their pixels are allocated.
absl::StatusOr<DecodedImage> DecodeImage(const std::string& bytes, int channels,
                                         const std::string& name,
                                         int64_t max_pixels = 1LL << 26);

}  // namespace petra::data
