// Compiled with the include view of the template layer: the Jinja interpreter depends on core
// only, so the tokenizer is not visible and this must fail to compile.
#include "tokenizer/tokenizer.h"
