// Must fail to compile: model/ sees only the op interface of the kernels, never a backend (docs/design.md §2).
#include "vulkan/device.h"
