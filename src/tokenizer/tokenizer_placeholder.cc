// The tokenizer layer (byte-level BPE, chat template) lands here.
namespace qwen35::tokenizer {
int tokenizer_layer_anchor() { return 0; }
}  // namespace qwen35::tokenizer
