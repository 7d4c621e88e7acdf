// WebP through libwebp: still images with WebPDecode into our buffer, the first frame of an
// animation with libwebpdemux's WebPAnimDecoder (the frame composed on its canvas, as PIL shows
// it). libwebp reports errors by status codes: no jumps to guard against.
#include <webp/decode.h>
#include <webp/demux.h>

#include <cstring>
#include <memory>
#include <string>

#include "image/codec.h"

namespace qwen35::image::detail {
namespace {

const char* status_text(VP8StatusCode s) {
  switch (s) {
    case VP8_STATUS_OUT_OF_MEMORY:
      return "out of memory";
    case VP8_STATUS_INVALID_PARAM:
      return "invalid parameter";
    case VP8_STATUS_BITSTREAM_ERROR:
      return "corrupt bitstream";
    case VP8_STATUS_UNSUPPORTED_FEATURE:
      return "unsupported feature";
    case VP8_STATUS_NOT_ENOUGH_DATA:
      return "the data ends early";
    default:
      return "decoding failed";
  }
}

struct DemuxDeleter {
  void operator()(WebPDemuxer* d) const { WebPDemuxDelete(d); }
};
struct AnimDeleter {
  void operator()(WebPAnimDecoder* d) const { WebPAnimDecoderDelete(d); }
};

void copy_exif(const WebPDemuxer* demux, Raster& r) {
  WebPChunkIterator it;
  if (demux != nullptr && WebPDemuxGetChunk(demux, "EXIF", 1, &it)) {
    r.exif.assign(reinterpret_cast<const char*>(it.chunk.bytes), it.chunk.size);
    WebPDemuxReleaseChunkIterator(&it);
  }
}

core::Status decode_still(const WebPData& data, const WebPBitstreamFeatures& f, Raster& r) {
  WebPDecoderConfig config;
  if (!WebPInitDecoderConfig(&config)) return core::error("libwebp version mismatch");
  r.channels = f.has_alpha ? 4 : 3;
  r.pixels.resize(static_cast<size_t>(r.width * r.height * r.channels));
  config.output.colorspace = f.has_alpha ? MODE_RGBA : MODE_RGB;
  config.output.is_external_memory = 1;
  config.output.u.RGBA.rgba = r.pixels.data();
  config.output.u.RGBA.stride = static_cast<int>(r.width * r.channels);
  config.output.u.RGBA.size = r.pixels.size();
  const VP8StatusCode s = WebPDecode(data.bytes, data.size, &config);
  WebPFreeDecBuffer(&config.output);  // frees nothing of ours (external memory)
  if (s != VP8_STATUS_OK) return core::error(status_text(s));
  std::unique_ptr<WebPDemuxer, DemuxDeleter> demux(WebPDemux(&data));
  copy_exif(demux.get(), r);
  return core::ok_status();
}

core::Status decode_first_frame(const WebPData& data, Raster& r) {
  WebPAnimDecoderOptions options;
  if (!WebPAnimDecoderOptionsInit(&options)) return core::error("libwebp version mismatch");
  options.color_mode = MODE_RGBA;
  options.use_threads = 0;
  std::unique_ptr<WebPAnimDecoder, AnimDeleter> dec(WebPAnimDecoderNew(&data, &options));
  if (dec == nullptr) return core::error("corrupt animation");
  WebPAnimInfo info;
  if (!WebPAnimDecoderGetInfo(dec.get(), &info) || info.canvas_width != r.width ||
      info.canvas_height != r.height) {
    return core::error("corrupt animation: the canvas size disagrees with the header");
  }
  uint8_t* canvas = nullptr;
  int timestamp = 0;
  if (!WebPAnimDecoderGetNext(dec.get(), &canvas, &timestamp)) {
    return core::error("corrupt animation: its first frame does not decode");
  }
  r.channels = 4;
  r.pixels.assign(canvas, canvas + r.width * r.height * 4);
  copy_exif(WebPAnimDecoderGetDemuxer(dec.get()), r);
  return core::ok_status();
}

// The header: the file's data (to its RIFF size) and its features, within the limits.
core::Status start(std::string_view bytes, const ImageLimits& limits, WebPData* data,
                   WebPBitstreamFeatures* f) {
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  // The RIFF size covers the whole file: fewer bytes than it declares is a cut file, even when
  // the cut falls after the image data (libwebp would decode it). Bytes past it are not read.
  const uint64_t riff =
      uint64_t{p[4]} | uint64_t{p[5]} << 8 | uint64_t{p[6]} << 16 | uint64_t{p[7]} << 24;
  if (riff + 8 > bytes.size()) return core::error(kTruncated);
  *data = WebPData{p, static_cast<size_t>(riff + 8)};
  const VP8StatusCode s = WebPGetFeatures(data->bytes, data->size, f);
  if (s != VP8_STATUS_OK) return core::error(std::string("invalid header: ") + status_text(s));
  return check_dimensions(f->width, f->height, limits);
}

}  // namespace

core::Result<Raster> probe_webp(std::string_view bytes, const ImageLimits& limits, int64_t* working) {
  WebPData data;
  WebPBitstreamFeatures f;
  QWEN35_RETURN_IF_ERROR(start(bytes, limits, &data, &f));
  Raster r;
  r.width = f.width;
  r.height = f.height;
  r.channels = f.has_animation || f.has_alpha ? 4 : 3;
  // An animation is composed on libwebp's own canvas (and a frame buffer) before our copy;
  // a still image's alpha plane and the decoder's rows.
  *working = (f.has_animation ? 8 : 1) * r.width * r.height + (int64_t{2} << 20);
  return r;
}

core::Result<Raster> decode_webp(std::string_view bytes, const ImageLimits& limits) {
  WebPData data;
  WebPBitstreamFeatures f;
  QWEN35_RETURN_IF_ERROR(start(bytes, limits, &data, &f));
  Raster r;
  r.width = f.width;
  r.height = f.height;
  QWEN35_RETURN_IF_ERROR(f.has_animation ? decode_first_frame(data, r) : decode_still(data, f, r));
  return r;
}

}  // namespace qwen35::image::detail
