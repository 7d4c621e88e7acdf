// GIF, first frame, through giflib (errors by return codes). The frame is drawn on the logical
// screen as PIL draws frame 0: pixels it does not cover hold the transparent index if the frame
// declares one, else index 0; a frame reaching past the screen grows the canvas. The rest of the
// file is walked, not decoded, to its trailer, so that a cut file is refused as for the other
// formats.
#include <gif_lib.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "image/codec.h"

namespace qwen35::image::detail {
namespace {

struct Source {
  const uint8_t* data;
  size_t size;
  size_t pos;
};

int on_read(GifFileType* gif, GifByteType* out, int length) {
  auto* s = static_cast<Source*>(gif->UserData);
  const size_t n = std::min(static_cast<size_t>(std::max(length, 0)), s->size - s->pos);
  std::memcpy(out, s->data + s->pos, n);
  s->pos += n;
  return static_cast<int>(n);
}

struct GifCloser {
  void operator()(GifFileType* g) const {
    int err = 0;
    DGifCloseFile(g, &err);
  }
};
using GifPtr = std::unique_ptr<GifFileType, GifCloser>;

// giflib names the record it failed to read ("No screen descriptor detected") when the data ran
// out: with every byte consumed, the file was cut.
core::Status gif_error(int code, const Source& s) {
  if (code == D_GIF_ERR_READ_FAILED || code == D_GIF_ERR_EOF_TOO_SOON || s.pos == s.size) {
    return core::error(kTruncated);
  }
  const char* text = GifErrorString(code);
  return core::error(text != nullptr ? text : "decoding failed");
}

// Skips data sub-blocks (a length byte, that many bytes, until a zero length).
core::Status skip_sub_blocks(Source& s) {
  while (true) {
    if (s.pos >= s.size) return core::error(kTruncated);
    const size_t n = s.data[s.pos++];
    if (n == 0) return core::ok_status();
    if (s.size - s.pos < n) return core::error(kTruncated);
    s.pos += n;
  }
}

// Walks the records after the first frame to the trailer (0x3B) without decoding them.
core::Status walk_to_trailer(Source& s) {
  while (true) {
    if (s.pos >= s.size) return core::error(kTruncated);
    const uint8_t kind = s.data[s.pos++];
    if (kind == 0x3B) return core::ok_status();
    if (kind == 0x21) {  // extension: a label, then sub-blocks
      if (s.pos >= s.size) return core::error(kTruncated);
      ++s.pos;
    } else if (kind == 0x2C) {  // image: a 9-byte descriptor, a local table, the LZW code size
      if (s.size - s.pos < 9) return core::error(kTruncated);
      const uint8_t flags = s.data[s.pos + 8];
      s.pos += 9;
      const size_t table = (flags & 0x80) ? 3 * (size_t{2} << (flags & 7)) : 0;
      if (s.size - s.pos < table + 1) return core::error(kTruncated);
      s.pos += table + 1;
    } else {
      return core::error("corrupt data after the first frame");
    }
    QWEN35_RETURN_IF_ERROR(skip_sub_blocks(s));
  }
}

// Reads the frame's index rows (in interlaced order if it is interlaced) into `indices`.
core::Status read_indices(GifFileType* gif, const Source& src, int64_t w, int64_t h,
                          std::vector<GifPixelType>& indices) {
  indices.resize(static_cast<size_t>(w * h));
  auto read_row = [&](int64_t y) {
    return DGifGetLine(gif, &indices[static_cast<size_t>(y * w)], static_cast<int>(w)) == GIF_OK;
  };
  if (gif->Image.Interlace) {
    static constexpr int kStart[] = {0, 4, 2, 1}, kStep[] = {8, 8, 4, 2};
    for (int pass = 0; pass < 4; ++pass) {
      for (int64_t y = kStart[pass]; y < h; y += kStep[pass]) {
        if (!read_row(y)) return gif_error(gif->Error, src);
      }
    }
  } else {
    for (int64_t y = 0; y < h; ++y) {
      if (!read_row(y)) return gif_error(gif->Error, src);
    }
  }
  return core::ok_status();
}

// The canvas of the first frame (its descriptor just read): the logical screen, grown to hold
// the frame where it reaches past it.
core::Status canvas_of(const GifFileType* gif, const ImageLimits& limits, Raster& r) {
  const GifImageDesc& desc = gif->Image;
  if (desc.Width <= 0 || desc.Height <= 0) return core::error("the first frame is empty");
  r.width = std::max<int64_t>(gif->SWidth, int64_t{desc.Left} + desc.Width);
  r.height = std::max<int64_t>(gif->SHeight, int64_t{desc.Top} + desc.Height);
  r.channels = 4;
  return check_dimensions(r.width, r.height, limits);
}

// Draws the first frame (its descriptor just read, canvas_of done) on an RGBA canvas.
core::Status draw_first_frame(GifFileType* gif, const Source& src, int transparent, Raster& r) {
  const GifImageDesc& desc = gif->Image;
  const ColorMapObject* map = desc.ColorMap != nullptr ? desc.ColorMap : gif->SColorMap;
  if (map == nullptr || map->Colors == nullptr) return core::error("no color table");
  auto rgba = [&](int index, uint8_t* out) {
    const bool known = index < map->ColorCount;  // PIL's palette is black past the table
    out[0] = known ? map->Colors[index].Red : 0;
    out[1] = known ? map->Colors[index].Green : 0;
    out[2] = known ? map->Colors[index].Blue : 0;
    out[3] = index == transparent ? 0 : 255;
  };
  std::vector<GifPixelType> indices;
  QWEN35_RETURN_IF_ERROR(read_indices(gif, src, desc.Width, desc.Height, indices));
  r.pixels.resize(static_cast<size_t>(r.width * r.height * 4));
  uint8_t fill[4];
  rgba(transparent >= 0 ? transparent : 0, fill);
  for (size_t i = 0; i < r.pixels.size(); i += 4) std::memcpy(&r.pixels[i], fill, 4);
  for (int64_t y = 0; y < desc.Height; ++y) {
    for (int64_t x = 0; x < desc.Width; ++x) {
      const size_t at = static_cast<size_t>(((desc.Top + y) * r.width + desc.Left + x) * 4);
      rgba(indices[static_cast<size_t>(y * desc.Width + x)], &r.pixels[at]);
    }
  }
  return core::ok_status();
}

// Opens the file and reads its records up to the first frame's descriptor: the canvas in `r`,
// the transparent index of the graphics control before the frame (-1: none).
core::Status start(GifPtr& gif, Source& src, const ImageLimits& limits, int* transparent, Raster& r) {
  int err = 0;
  gif.reset(DGifOpen(&src, on_read, &err));
  if (gif == nullptr) return gif_error(err, src);
  QWEN35_RETURN_IF_ERROR(check_dimensions(gif->SWidth, gif->SHeight, limits));
  *transparent = -1;
  while (true) {
    GifRecordType type;
    if (DGifGetRecordType(gif.get(), &type) != GIF_OK) return gif_error(gif->Error, src);
    if (type == TERMINATE_RECORD_TYPE) return core::error("the file holds no image");
    if (type == IMAGE_DESC_RECORD_TYPE) {
      if (DGifGetImageDesc(gif.get()) != GIF_OK) return gif_error(gif->Error, src);
      return canvas_of(gif.get(), limits, r);
    }
    if (type != EXTENSION_RECORD_TYPE) return core::error("corrupt record");
    int code = 0;
    GifByteType* ext = nullptr;
    if (DGifGetExtension(gif.get(), &code, &ext) != GIF_OK) return gif_error(gif->Error, src);
    if (code == GRAPHICS_EXT_FUNC_CODE && ext != nullptr) {
      GraphicsControlBlock gcb;
      if (DGifExtensionToGCB(ext[0], ext + 1, &gcb) == GIF_OK) *transparent = gcb.TransparentColor;
    }
    while (ext != nullptr) {
      if (DGifGetExtensionNext(gif.get(), &ext) != GIF_OK) return gif_error(gif->Error, src);
    }
  }
}

}  // namespace

core::Result<Raster> probe_gif(std::string_view bytes, const ImageLimits& limits, int64_t* working) {
  Source src{reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), 0};
  GifPtr gif;
  int transparent = -1;
  Raster r;
  QWEN35_RETURN_IF_ERROR(start(gif, src, limits, &transparent, r));
  *working = r.width * r.height + (int64_t{1} << 20);  // the frame's indices (at most the canvas)
  return r;
}

core::Result<Raster> decode_gif(std::string_view bytes, const ImageLimits& limits) {
  Source src{reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), 0};
  GifPtr gif;
  int transparent = -1;
  Raster r;
  QWEN35_RETURN_IF_ERROR(start(gif, src, limits, &transparent, r));
  QWEN35_RETURN_IF_ERROR(draw_first_frame(gif.get(), src, transparent, r));
  QWEN35_RETURN_IF_ERROR(walk_to_trailer(src));
  return r;
}

}  // namespace qwen35::image::detail
