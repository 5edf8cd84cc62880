#include "services/data/image_decode.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <jpeglib.h>
#include <png.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "services/data/test_images.h"

namespace petra::data {
namespace {

using ::testing::HasSubstr;

TEST(DecodeImage, PngRoundTripsExactly) {
  const auto rgb = Pattern(5, 9, 3);
  absl::StatusOr<DecodedImage> img =
      DecodeImage(EncodePng(rgb, 5, 9, PNG_COLOR_TYPE_RGB, 3), 3, "a.png");
  ASSERT_TRUE(img.ok()) << img.status();
  EXPECT_EQ(img->height, 5);
  EXPECT_EQ(img->width, 9);
  EXPECT_EQ(img->channels, 3);
  EXPECT_EQ(img->pixels, rgb);
  // RGBA loses its alpha; grey becomes RGB and RGB grey, as asked.
  const auto rgba = Pattern(4, 4, 4);
  img = DecodeImage(EncodePng(rgba, 4, 4, PNG_COLOR_TYPE_RGBA, 4), 3, "b.png");
  ASSERT_TRUE(img.ok()) << img.status();
  EXPECT_EQ(img->pixels[4], rgba[5]);  // pixel 1, green
  const auto grey = Pattern(3, 3, 1);
  img = DecodeImage(EncodePng(grey, 3, 3, PNG_COLOR_TYPE_GRAY, 1), 3, "c.png");
  ASSERT_TRUE(img.ok());
  EXPECT_EQ(img->channels, 3);
  EXPECT_EQ(img->pixels[3 * 4 + 2], grey[4]);
  img = DecodeImage(EncodePng(rgb, 5, 9, PNG_COLOR_TYPE_RGB, 3), 1, "d.png");
  ASSERT_TRUE(img.ok());
  EXPECT_EQ(img->channels, 1);
  EXPECT_EQ(img->pixels[0],
            (299 * rgb[0] + 587 * rgb[1] + 114 * rgb[2] + 500) / 1000);
}

TEST(DecodeImage, JpegDecodesCloseToTheOriginal) {
  const auto rgb = Pattern(16, 24, 3);
  absl::StatusOr<DecodedImage> img =
      DecodeImage(EncodeJpeg(rgb, 16, 24, 3, 100), 3, "a.jpg");
  ASSERT_TRUE(img.ok()) << img.status();
  ASSERT_EQ(img->pixels.size(), rgb.size());
  int worst = 0;
  for (size_t i = 0; i < rgb.size(); ++i) {
    worst = std::max(worst, std::abs(img->pixels[i] - rgb[i]));
  }
  EXPECT_LE(worst, 12);  // lossy, at quality 100
  const auto grey = Pattern(8, 8, 1);
  img = DecodeImage(EncodeJpeg(grey, 8, 8, 1, 90), 1, "g.jpg");
  ASSERT_TRUE(img.ok()) << img.status();
  EXPECT_EQ(img->channels, 1);
}

// A CMYK JPEG (print workflows write them) decodes to RGB: no cyan, full
// magenta, no yellow, no black is (255, 0, 255).
TEST(DecodeImage, CmykJpegDecodesToRgb) {
  std::vector<uint8_t> cmyk;
  for (int i = 0; i < 8 * 8; ++i) {
    cmyk.insert(cmyk.end(), {255, 0, 255, 255});  // Adobe's inverted inks
  }
  absl::StatusOr<DecodedImage> img =
      DecodeImage(EncodeJpeg(cmyk, 8, 8, 4, 95), 3, "print.jpg");
  ASSERT_TRUE(img.ok()) << img.status();
  ASSERT_EQ(img->channels, 3);
  ASSERT_EQ(img->pixels.size(), 8u * 8 * 3);
  for (size_t i = 0; i < img->pixels.size(); i += 3) {
    EXPECT_GE(img->pixels[i], 250);
    EXPECT_LE(img->pixels[i + 1], 5);
    EXPECT_GE(img->pixels[i + 2], 250);
  }
  // Grey from CMYK goes through RGB like any colour image.
  img = DecodeImage(EncodeJpeg(cmyk, 8, 8, 4, 95), 1, "print.jpg");
  ASSERT_TRUE(img.ok()) << img.status();
  EXPECT_EQ(img->channels, 1);
}

TEST(DecodeImage, BadBytesAreErrorsNamingTheFile) {
  const auto rgb = Pattern(16, 16, 3);
  const std::string jpeg = EncodeJpeg(rgb, 16, 16, 3, 90);
  const std::string png = EncodePng(rgb, 16, 16, PNG_COLOR_TYPE_RGB, 3);
  struct Case {
    std::string bytes, want;
  };
  const std::vector<Case> cases = {
      {"", "neither a JPEG nor a PNG"},
      {"GIF89a....", "neither a JPEG nor a PNG"},
      {jpeg.substr(0, jpeg.size() / 2), "JPEG"},
      {jpeg.substr(0, 4), "JPEG"},
      {png.substr(0, png.size() / 2), "not a valid PNG"},
      {png.substr(0, 12), "not a valid PNG"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<DecodedImage> img = DecodeImage(c.bytes, 3, "dir/x.img");
    ASSERT_FALSE(img.ok()) << c.want;
    EXPECT_EQ(img.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(img.status().message(), HasSubstr("dir/x.img: "));
    EXPECT_THAT(img.status().message(), HasSubstr(c.want));
  }
  // Flipped bytes in the middle of the PNG: its CRCs catch them.
  std::string damaged = png;
  for (size_t i = 40; i < 60 && i < damaged.size(); ++i) damaged[i] ^= 0x5A;
  EXPECT_FALSE(DecodeImage(damaged, 3, "p.png").ok());
  // Larger than allowed: refused from the header alone.
  absl::StatusOr<DecodedImage> big = DecodeImage(png, 3, "big.png", 100);
  EXPECT_THAT(big.status().message(), HasSubstr("16x16 image is larger"));
  big = DecodeImage(jpeg, 3, "big.jpg", 100);
  EXPECT_THAT(big.status().message(), HasSubstr("16x16 image is larger"));
  EXPECT_FALSE(DecodeImage(png, 2, "p.png").ok());
}

}  // namespace
}  // namespace petra::data
