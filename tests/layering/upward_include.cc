// Compiled with the include view of the formats layer: formats may not see model/, so this must
// fail to compile (the layering test expects the failure).
#include "model/config.h"
