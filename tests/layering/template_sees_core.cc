// Compiled with the include view of the template layer: template sees core/ and itself.
#include "core/result.h"
#include "template/chat_template.h"
