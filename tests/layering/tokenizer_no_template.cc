// Compiled with the include view of the tokenizer layer: tokenizer and template sit side by side
// and neither sees the other, so this must fail to compile.
#include "template/chat_template.h"
