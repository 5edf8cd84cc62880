// Images for the data tests, encoded by the same libraries that decode them
// (libjpeg-turbo, libpng), and a folder of them in the ImageFolder layout.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace petra::data {

// A smooth test pattern: channel c of pixel (y, x) is y * 5 + x * 3 + c * 40
// (no wrap-around for images up to 16 x 24 x 3).
std::vector<uint8_t> Pattern(int h, int w, int c);

// c: 1 (grey), 3 (RGB) or 4 (CMYK, stored as given, with libjpeg's Adobe
// marker: inks inverted, 255 for none).
std::string EncodeJpeg(const std::vector<uint8_t>& pixels, int h, int w, int c,
                       int quality);
// color_type: PNG_COLOR_TYPE_GRAY (0), _RGB (2) or _RGBA (6).
std::string EncodePng(const std::vector<uint8_t>& pixels, int h, int w,
                      int color_type, int c);

// Writes `bytes` to `path`, creating its folders.
void WriteFile(const std::filesystem::path& path, const std::string& bytes);

}  // namespace petra::data
