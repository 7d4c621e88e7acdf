// Compiled with the include view of the grammar layer: grammars see token bytes only (a Vocab),
// never the tokenizer, so this must fail to compile.
#include "tokenizer/tokenizer.h"
