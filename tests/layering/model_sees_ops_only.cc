// Compiled with the include view of the model layer: a concrete kernel backend is not visible
// there (only kernels/ops.h), so this must fail to compile.
#include "kernels/matrix.h"
