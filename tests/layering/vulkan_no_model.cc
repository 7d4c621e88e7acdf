// Must fail to compile: the Vulkan backend sits beside model/, below it in nothing (docs/design.md §2).
#include "model/model.h"
