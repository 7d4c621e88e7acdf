// The one EXIF fact the decoder needs: the orientation tag (0x0112) of IFD0.
#pragma once

#include <string_view>

namespace qwen35::image {

// `tiff` is an EXIF block as JPEG's APP1 (after "Exif\0\0"), PNG's eXIf chunk or WebP's EXIF
// chunk carries it: a TIFF header ("II*\0" or "MM\0*"), then IFDs. A leading "Exif\0\0" is
// skipped (some writers put it in the PNG and WebP chunks too). Every offset is checked against
// the block; a malformed, absent or out-of-range tag gives 1 (no transform), as PIL ignores a
// broken EXIF block rather than refusing the image.
int exif_orientation(std::string_view tiff);

}  // namespace qwen35::image
