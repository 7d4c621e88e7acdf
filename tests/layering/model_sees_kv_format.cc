// Compiled with the include view of the model layer: the KV cache formats (kernels/kv_format.h,
// which kernels/ops.h states KvView with) are part of the interface model/ sees, so this
// compiles.
#include "kernels/kv_format.h"
#include "kernels/ops.h"
