// Compiled with the include view of the image layer: image/ needs core alone (client bytes in,
// patch rows out) and sees no checkpoint format, so this must fail to compile.
#include "formats/safetensors.h"
