// Pixel conversions that must match the reference pipeline to the bit (PIL under transformers).
#pragma once

#include <cstdint>

#include "image/image.h"

namespace qwen35::image {

// PIL's Image.alpha_composite of an RGBA pixel over opaque white, then the alpha dropped: what
// transformers' convert_to_rgb does to every image that is not RGB already.
void composite_on_white(const uint8_t* rgba, int64_t n_pixels, uint8_t* rgb);

// PIL's CMYK -> RGB: each channel (255 - c)·(255 - k)/255, rounded as PIL's MULDIV255.
void cmyk_to_rgb(const uint8_t* cmyk, int64_t n_pixels, uint8_t* rgb);

// EXIF orientation (1..8, the TIFF tag 0x0112): the transform PIL's ImageOps.exif_transpose
// applies. Other values leave the image as it is.
Image apply_orientation(Image image, int orientation);

}  // namespace qwen35::image
