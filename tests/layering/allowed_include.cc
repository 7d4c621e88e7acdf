// Compiled with the include view of the formats layer: formats sees core/ and itself.
#include "core/result.h"
#include "formats/hf_config.h"
