// JPEG through libjpeg-turbo, with the settings PIL decodes with (the library's defaults: ISLOW
// DCT, fancy upsampling), so pixels equal PIL's. libjpeg reports errors by calling error_exit,
// which must not return: ours copies the message and longjmps out of a setjmp stage whose frame
// holds no object with a destructor. Warnings are silent, except the two that mean the data ran
// out, which are errors here (libjpeg would fill the rest of the image with gray).
#include <cstdio>
// jpeglib.h needs size_t and FILE declared first.
#include <jerror.h>
#include <jpeglib.h>

#include <csetjmp>
#include <cstring>
#include <string>

#include "image/codec.h"
#include "image/pixels.h"

namespace qwen35::image::detail {
namespace {

struct JpegErrors {
  jpeg_error_mgr pub;  // first: libjpeg sees a jpeg_error_mgr*
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX + 64];
};

struct JpegProgress {
  jpeg_progress_mgr pub;  // first
  int max_scans;
};

[[noreturn]] void fail(j_common_ptr c, const char* message) {
  auto* e = reinterpret_cast<JpegErrors*>(c->err);
  std::snprintf(e->message, sizeof e->message, "%s", message);
  std::longjmp(e->jump, 1);
}

[[noreturn]] void on_error_exit(j_common_ptr c) {
  char text[JMSG_LENGTH_MAX];
  (*c->err->format_message)(c, text);
  fail(c, text);
}

void on_emit_message(j_common_ptr c, int level) {
  if (level >= 0) return;  // trace messages
  const int code = c->err->msg_code;
  if (code == JWRN_JPEG_EOF) fail(c, kTruncated);
  if (code == JWRN_HIT_MARKER) fail(c, "corrupt data: the entropy-coded data ends early");
  c->err->num_warnings++;
}

void on_output_message(j_common_ptr) {}

void on_progress(j_common_ptr c) {
  if (!c->is_decompressor) return;
  const auto* p = reinterpret_cast<JpegProgress*>(c->progress);
  if (reinterpret_cast<j_decompress_ptr>(c)->input_scan_number > p->max_scans) {
    char text[96];
    std::snprintf(text, sizeof text, "more than %d progressive scans", p->max_scans);
    fail(c, text);
  }
}

struct JpegDecoder {
  jpeg_decompress_struct cinfo{};
  JpegErrors errors{};
  JpegProgress progress{};
  bool created = false;
  ~JpegDecoder() {
    if (created) jpeg_destroy_decompress(&cinfo);
  }
};

bool read_header(JpegDecoder& d, std::string_view bytes, size_t memory_cap) {
  if (setjmp(d.errors.jump)) return false;
  jpeg_create_decompress(&d.cinfo);
  d.created = true;
  d.cinfo.progress = &d.progress.pub;
  d.cinfo.mem->max_memory_to_use = static_cast<long>(memory_cap);
  jpeg_mem_src(&d.cinfo, reinterpret_cast<const unsigned char*>(bytes.data()),
               static_cast<unsigned long>(bytes.size()));
  jpeg_save_markers(&d.cinfo, JPEG_APP0 + 1, 0xffff);
  jpeg_read_header(&d.cinfo, TRUE);
  const J_COLOR_SPACE in = d.cinfo.jpeg_color_space;
  d.cinfo.out_color_space = (in == JCS_CMYK || in == JCS_YCCK) ? JCS_CMYK : JCS_RGB;
  jpeg_calc_output_dimensions(&d.cinfo);
  return true;
}

bool read_pixels(JpegDecoder& d, uint8_t* pixels, size_t stride) {
  if (setjmp(d.errors.jump)) return false;
  jpeg_start_decompress(&d.cinfo);
  while (d.cinfo.output_scanline < d.cinfo.output_height) {
    JSAMPROW row = pixels + stride * d.cinfo.output_scanline;
    jpeg_read_scanlines(&d.cinfo, &row, 1);
  }
  jpeg_finish_decompress(&d.cinfo);  // reads to EOI: a cut after the last scan is caught here
  return true;
}

// The stages up to the pixels: the header, the limits, the output layout.
core::Status start(JpegDecoder& d, std::string_view bytes, const ImageLimits& limits) {
  d.cinfo.err = jpeg_std_error(&d.errors.pub);
  d.errors.pub.error_exit = on_error_exit;
  d.errors.pub.emit_message = on_emit_message;
  d.errors.pub.output_message = on_output_message;
  d.progress.pub.progress_monitor = on_progress;
  d.progress.max_scans = limits.max_jpeg_scans;
  // A progressive image keeps all its coefficients: 2 bytes per sample, at most 4 components.
  const size_t memory_cap = static_cast<size_t>(limits.max_pixels) * 8 + (size_t{64} << 20);
  if (!read_header(d, bytes, memory_cap)) return core::error(d.errors.message);
  QWEN35_RETURN_IF_ERROR(check_dimensions(d.cinfo.image_width, d.cinfo.image_height, limits));
  const int comps = d.cinfo.output_components;
  if ((comps != 3 && comps != 4) || d.cinfo.output_width != d.cinfo.image_width ||
      d.cinfo.output_height != d.cinfo.image_height) {
    return core::error("unsupported color layout (" + std::to_string(comps) + " components)");
  }
  return core::ok_status();
}

}  // namespace

core::Result<Raster> probe_jpeg(std::string_view bytes, const ImageLimits& limits, int64_t* working) {
  JpegDecoder d;
  QWEN35_RETURN_IF_ERROR(start(d, bytes, limits));
  Raster r;
  r.width = d.cinfo.output_width;
  r.height = d.cinfo.output_height;
  r.channels = d.cinfo.output_components;
  // A progressive image's coefficients (2 bytes a sample, every component at full size at
  // most), else a few MCU rows; and libjpeg's own tables.
  const int64_t samples = r.width * r.height * d.cinfo.num_components;
  *working = (d.cinfo.progressive_mode ? 2 * samples : 0) + (int64_t{2} << 20);
  return r;
}

core::Result<Raster> decode_jpeg(std::string_view bytes, const ImageLimits& limits) {
  JpegDecoder d;
  QWEN35_RETURN_IF_ERROR(start(d, bytes, limits));
  const int comps = d.cinfo.output_components;
  Raster r;
  // Before the pixels: jpeg_finish_decompress frees the saved markers.
  for (jpeg_saved_marker_ptr m = d.cinfo.marker_list; m != nullptr; m = m->next) {
    if (m->marker == JPEG_APP0 + 1 && m->data_length > 6 &&
        std::memcmp(m->data, "Exif\0\0", 6) == 0) {
      r.exif.assign(reinterpret_cast<const char*>(m->data) + 6, m->data_length - 6);
      break;
    }
  }
  r.width = d.cinfo.output_width;
  r.height = d.cinfo.output_height;
  r.pixels.resize(static_cast<size_t>(r.width * r.height * comps));
  if (!read_pixels(d, r.pixels.data(), static_cast<size_t>(r.width * comps))) {
    return core::error(d.errors.message);
  }
  if (comps == 4) {
    // PIL reads every CMYK JPEG as Adobe's inverted CMYK ("CMYK;I"), then converts to RGB.
    for (auto& v : r.pixels) v = static_cast<uint8_t>(255 - v);
    cmyk_to_rgb(r.pixels.data(), r.width * r.height, r.pixels.data());  // in place: 4 -> 3
    r.pixels.resize(static_cast<size_t>(r.width * r.height * 3));
  }
  return r;
}

}  // namespace qwen35::image::detail
