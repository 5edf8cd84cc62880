#include "services/data/image_decode.h"

// jpeglib.h needs FILE and size_t declared first.
#include <jpeglib.h>
#include <png.h>

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"

namespace petra::data {
namespace {

absl::Status Bad(const std::string& name, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(name, ": ", why));
}

// RGB -> grey with the ITU-R BT.601 weights libjpeg itself uses.
void ToChannels(DecodedImage& img, int channels) {
  if (img.channels == channels) return;
  const int64_t n = img.height * img.width;
  std::vector<uint8_t> out(static_cast<size_t>(n * channels));
  for (int64_t i = 0; i < n; ++i) {
    if (channels == 1) {
      const uint8_t* p = &img.pixels[i * 3];
      out[i] = static_cast<uint8_t>(
          (299 * p[0] + 587 * p[1] + 114 * p[2] + 500) / 1000);
    } else {
      out[i * 3] = out[i * 3 + 1] = out[i * 3 + 2] = img.pixels[i];
    }
  }
  img.pixels = std::move(out);
  img.channels = channels;
}

// libjpeg reports fatal errors through error_exit, which must not return:
// we jump back to the decoder with the message.
struct JpegError {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void JpegErrorExit(j_common_ptr cinfo) {
  JpegError* err = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

void JpegSilence(j_common_ptr, int) {}

// One row of CMYK to RGB. Adobe's files (the Adobe marker) store the inks
// inverted, 255 for none, as Photoshop writes them.
void CmykToRgb(const uint8_t* cmyk, int width, bool adobe, uint8_t* rgb) {
  for (int x = 0; x < width; ++x, cmyk += 4, rgb += 3) {
    const int k = adobe ? cmyk[3] : 255 - cmyk[3];
    for (int c = 0; c < 3; ++c) {
      const int ink = adobe ? cmyk[c] : 255 - cmyk[c];
      rgb[c] = static_cast<uint8_t>((ink * k + 127) / 255);
    }
  }
}

absl::StatusOr<DecodedImage> DecodeJpeg(const std::string& bytes,
                                        const std::string& name,
                                        int64_t max_pixels) {
  jpeg_decompress_struct cinfo;
  JpegError err;
  std::memset(&cinfo, 0, sizeof(cinfo));
  cinfo.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = JpegErrorExit;
  err.pub.emit_message = JpegSilence;  // warnings (corrupt data) below
  err.message[0] = '\0';
  // Everything that must survive a longjmp lives outside this frame's
  // locals that change after setjmp.
  DecodedImage* img = new DecodedImage();
  std::vector<uint8_t>* cmyk_row = new std::vector<uint8_t>();
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    delete img;
    delete cmyk_row;
    return Bad(name, absl::StrCat("not a valid JPEG (", err.message, ")"));
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, reinterpret_cast<const unsigned char*>(bytes.data()),
               static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&cinfo, TRUE);
  if (static_cast<int64_t>(cinfo.image_width) * cinfo.image_height >
      max_pixels) {
    const std::string size =
        absl::StrCat(cinfo.image_width, "x", cinfo.image_height);
    jpeg_destroy_decompress(&cinfo);
    delete img;
    delete cmyk_row;
    return Bad(name, absl::StrCat("a ", size, " image is larger than ",
                                  max_pixels, " pixels"));
  }
  const bool grey = cinfo.jpeg_color_space == JCS_GRAYSCALE;
  // CMYK (print, often Adobe's) has no conversion to RGB in libjpeg: it is
  // read as CMYK and converted below.
  const bool cmyk =
      cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
  cinfo.out_color_space = grey ? JCS_GRAYSCALE : cmyk ? JCS_CMYK : JCS_RGB;
  jpeg_start_decompress(&cinfo);
  img->height = cinfo.output_height;
  img->width = cinfo.output_width;
  img->channels = cmyk ? 3 : cinfo.output_components;
  img->pixels.resize(
      static_cast<size_t>(img->height * img->width * img->channels));
  cmyk_row->resize(cmyk ? static_cast<size_t>(img->width) * 4 : 0);
  while (cinfo.output_scanline < cinfo.output_height) {
    uint8_t* out = &img->pixels[static_cast<size_t>(cinfo.output_scanline) *
                                img->width * img->channels];
    JSAMPROW row = cmyk ? cmyk_row->data() : out;
    jpeg_read_scanlines(&cinfo, &row, 1);
    if (cmyk) {
      CmykToRgb(cmyk_row->data(), img->width, cinfo.saw_Adobe_marker, out);
    }
  }
  // A truncated file decodes with libjpeg's filler and a warning: that is
  // a corrupt image for us.
  const long warnings = err.pub.num_warnings;
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  DecodedImage out = std::move(*img);
  delete img;
  delete cmyk_row;
  if (warnings > 0) {
    return Bad(name, "a corrupt or truncated JPEG");
  }
  return out;
}

struct PngReader {
  const std::string* bytes;
  size_t offset = 0;
  std::string error;
};

void PngRead(png_structp png, png_bytep out, png_size_t length) {
  PngReader* r = static_cast<PngReader*>(png_get_io_ptr(png));
  if (r->offset + length > r->bytes->size()) {
    png_error(png, "unexpected end of file");
  }
  std::memcpy(out, r->bytes->data() + r->offset, length);
  r->offset += length;
}

void PngError(png_structp png, png_const_charp message) {
  PngReader* r = static_cast<PngReader*>(png_get_error_ptr(png));
  r->error = message;
  png_longjmp(png, 1);
}

void PngWarning(png_structp, png_const_charp) {}

absl::StatusOr<DecodedImage> DecodePng(const std::string& bytes,
                                       const std::string& name,
                                       int64_t max_pixels) {
  PngReader reader{&bytes, 0, ""};
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &reader,
                                           PngError, PngWarning);
  if (png == nullptr) return absl::ResourceExhaustedError("libpng");
  png_infop info = png_create_info_struct(png);
  DecodedImage* img = new DecodedImage();
  std::vector<png_bytep>* rows = new std::vector<png_bytep>();
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    delete img;
    delete rows;
    return Bad(name, absl::StrCat("not a valid PNG (", reader.error, ")"));
  }
  if (info == nullptr) png_error(png, "out of memory");
  png_set_read_fn(png, &reader, PngRead);
  png_set_user_limits(png, 1 << 20, 1 << 20);
  png_read_info(png, info);
  const png_uint_32 w = png_get_image_width(png, info);
  const png_uint_32 h = png_get_image_height(png, info);
  if (static_cast<int64_t>(w) * h > max_pixels) {
    reader.error = absl::StrCat("a ", w, "x", h, " image is larger than ",
                                max_pixels, " pixels");
    png_destroy_read_struct(&png, &info, nullptr);
    delete img;
    delete rows;
    return Bad(name, reader.error);
  }
  const int color = png_get_color_type(png, info);
  // Everything to 8-bit grey or RGB, without alpha.
  png_set_strip_16(png);
  png_set_packing(png);
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color == PNG_COLOR_TYPE_GRAY && png_get_bit_depth(png, info) < 8) {
    png_set_expand_gray_1_2_4_to_8(png);
  }
  if (png_get_valid(png, info, PNG_INFO_tRNS)) png_set_tRNS_to_alpha(png);
  png_set_strip_alpha(png);
  png_read_update_info(png, info);
  img->height = h;
  img->width = w;
  img->channels = png_get_channels(png, info);
  if (img->channels != 1 && img->channels != 3) {
    png_error(png, "unsupported channel layout");
  }
  img->pixels.resize(static_cast<size_t>(img->height) * img->width *
                     img->channels);
  rows->resize(h);
  for (png_uint_32 y = 0; y < h; ++y) {
    (*rows)[y] = &img->pixels[static_cast<size_t>(y) * w * img->channels];
  }
  png_read_image(png, rows->data());
  png_read_end(png, nullptr);
  png_destroy_read_struct(&png, &info, nullptr);
  DecodedImage out = std::move(*img);
  delete img;
  delete rows;
  return out;
}

}  // namespace

absl::StatusOr<DecodedImage> DecodeImage(const std::string& bytes, int channels,
                                         const std::string& name,
                                         int64_t max_pixels) {
  if (channels != 1 && channels != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("channels: ", channels, " is not 1 or 3"));
  }
  const auto starts = [&](const char* magic, size_t n) {
    return bytes.size() >= n && std::memcmp(bytes.data(), magic, n) == 0;
  };
  absl::StatusOr<DecodedImage> img;
  if (starts("\xFF\xD8\xFF", 3)) {
    img = DecodeJpeg(bytes, name, max_pixels);
  } else if (starts("\x89PNG\r\n\x1A\n", 8)) {
    img = DecodePng(bytes, name, max_pixels);
  } else {
    return Bad(name, "neither a JPEG nor a PNG");
  }
  if (!img.ok()) return img.status();
  if (img->height == 0 || img->width == 0) return Bad(name, "an empty image");
  ToChannels(*img, channels);
  return img;
}

}  // namespace petra::data
