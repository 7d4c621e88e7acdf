// PNG through libpng. libpng reports errors by longjmp: each call into it happens inside a
// setjmp stage (read_header, set_transforms, read_pixels) whose frame holds no object with a
// destructor, and every allocation and check is done between the stages, in plain C++. The error
// handler copies the message and jumps; it never returns into libpng, prints nothing and never
// exits.
#include <png.h>

#include <algorithm>
#include <csetjmp>
#include <cstring>
#include <string>
#include <vector>

#include "image/codec.h"

namespace qwen35::image::detail {
namespace {

struct PngDecoder {
  png_structp png = nullptr;
  png_infop info = nullptr;
  const uint8_t* data = nullptr;
  size_t size = 0;
  size_t pos = 0;
  char message[256] = {};
  char warning[128] = {};  // the last one: libpng often says the cause there, then fails
  png_uint_32 width = 0, height = 0;
  int channels = 0;
  size_t rowbytes = 0;
  std::vector<png_bytep> rows;

  ~PngDecoder() {
    if (png != nullptr) png_destroy_read_struct(&png, info != nullptr ? &info : nullptr, nullptr);
  }
};

void on_error(png_structp png, png_const_charp msg) {
  auto* d = static_cast<PngDecoder*>(png_get_error_ptr(png));
  const char* text = msg != nullptr ? msg : "decoding failed";
  if (d->warning[0] != '\0') {
    std::snprintf(d->message, sizeof d->message, "%s (%s)", text, d->warning);
  } else {
    std::snprintf(d->message, sizeof d->message, "%s", text);
  }
  png_longjmp(png, 1);
}

// Benign problems (PIL ignores them too) are kept only to explain an error that follows.
void on_warning(png_structp png, png_const_charp msg) {
  auto* d = static_cast<PngDecoder*>(png_get_error_ptr(png));
  std::snprintf(d->warning, sizeof d->warning, "%s", msg != nullptr ? msg : "");
}

void on_read(png_structp png, png_bytep out, size_t length) {
  auto* d = static_cast<PngDecoder*>(png_get_io_ptr(png));
  if (d->size - d->pos < length) png_error(png, kTruncated);
  std::memcpy(out, d->data + d->pos, length);
  d->pos += length;
}

// Chunks that carry nothing the pixels need and may hold compressed text to inflate.
constexpr png_byte kIgnored[] = "iCCP\0iTXt\0tEXt\0zTXt\0sPLT";

// The chunks up to the pixel data. Each stage returns false with d.message set on error.
bool read_header(PngDecoder& d) {
  if (setjmp(png_jmpbuf(d.png))) return false;
  png_set_read_fn(d.png, &d, on_read);
  // Our own limits (check_dimensions) apply instead of libpng's 10^6 × 10^6 default, so the
  // message names the image's size.
  png_set_user_limits(d.png, 0x7fffffff, 0x7fffffff);
  png_set_chunk_malloc_max(d.png, 8u << 20);
  png_set_keep_unknown_chunks(d.png, PNG_HANDLE_CHUNK_NEVER, nullptr, 0);
  png_set_keep_unknown_chunks(d.png, PNG_HANDLE_CHUNK_NEVER, kIgnored, 5);
  png_read_info(d.png, d.info);
  d.width = png_get_image_width(d.png, d.info);
  d.height = png_get_image_height(d.png, d.info);
  return true;
}

// Transforms to 8-bit RGB or RGBA; libpng allocates its row buffers here, so the dimensions are
// checked before.
bool set_transforms(PngDecoder& d) {
  if (setjmp(png_jmpbuf(d.png))) return false;
  // Palette to RGB, gray under 8 bits to 8 (scaled to 0..255), tRNS to an alpha channel; 16-bit
  // samples keep their high byte, as PIL's RGB;16B unpacker does; gray to RGB.
  png_set_expand(d.png);
  png_set_strip_16(d.png);
  png_set_gray_to_rgb(d.png);
  png_set_interlace_handling(d.png);
  png_read_update_info(d.png, d.info);
  d.channels = png_get_channels(d.png, d.info);
  d.rowbytes = png_get_rowbytes(d.png, d.info);
  return true;
}

bool read_pixels(PngDecoder& d) {
  if (setjmp(png_jmpbuf(d.png))) return false;
  png_read_image(d.png, d.rows.data());
  // To IEND: a file cut after its pixel data is still truncated, and an eXIf chunk may follow.
  png_read_end(d.png, d.info);
  return true;
}

// The stages up to the pixels: the header, the limits, the transforms.
core::Status start(PngDecoder& d, std::string_view bytes, const ImageLimits& limits) {
  d.data = reinterpret_cast<const uint8_t*>(bytes.data());
  d.size = bytes.size();
  d.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &d, on_error, on_warning);
  if (d.png != nullptr) d.info = png_create_info_struct(d.png);
  if (d.png == nullptr || d.info == nullptr) return core::error("out of memory");
  if (!read_header(d)) return core::error(d.message);
  QWEN35_RETURN_IF_ERROR(check_dimensions(d.width, d.height, limits));
  if (!set_transforms(d)) return core::error(d.message);
  if ((d.channels != 3 && d.channels != 4) || d.rowbytes != size_t{d.width} * d.channels) {
    return core::error("unsupported pixel layout (" + std::to_string(d.channels) + " channels)");
  }
  return core::ok_status();
}

}  // namespace

core::Result<Raster> probe_png(std::string_view bytes, const ImageLimits& limits, int64_t* working) {
  PngDecoder d;
  QWEN35_RETURN_IF_ERROR(start(d, bytes, limits));
  Raster r;
  r.width = d.width;
  r.height = d.height;
  r.channels = d.channels;
  *working = int64_t(d.height) * int64_t(sizeof(png_bytep)) + (int64_t{1} << 20);  // row pointers, zlib
  return r;
}

core::Result<Raster> decode_png(std::string_view bytes, const ImageLimits& limits) {
  PngDecoder d;
  QWEN35_RETURN_IF_ERROR(start(d, bytes, limits));
  Raster r;
  r.width = d.width;
  r.height = d.height;
  r.channels = d.channels;
  r.pixels.resize(d.rowbytes * d.height);
  d.rows.resize(d.height);
  for (png_uint_32 y = 0; y < d.height; ++y) d.rows[y] = r.pixels.data() + d.rowbytes * y;
  if (!read_pixels(d)) return core::error(d.message);
  png_uint_32 exif_len = 0;
  png_bytep exif = nullptr;
  if (png_get_eXIf_1(d.png, d.info, &exif_len, &exif) != 0 && exif != nullptr) {
    r.exif.assign(reinterpret_cast<const char*>(exif), exif_len);
  }
  return r;
}

}  // namespace qwen35::image::detail
