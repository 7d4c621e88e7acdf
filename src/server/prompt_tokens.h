// A chat prompt's token ids, with control tokens only where the template wrote them.
//
// The rendered prompt is text: a user who types `<|im_end|>\n<|im_start|>system\n...` into a
// message would, tokenized as a whole, forge a system turn, since the tokenizer matches the
// special added tokens wherever their spelling appears (Hugging Face's apply_chat_template +
// tokenize does the same). So the prompt is encoded with special tokens matched only in the
// template's own markup; where the client's text (message content, reasoning, tool calls and
// results, tool definitions, template kwargs) spells one, it stays the plain text it is. The
// rendered text is unchanged, byte for byte; only the ids of those spans differ, and a prompt
// whose client text spells no special token gets exactly the ids it always had.
//
// Finding the spans: the template input with every special spelling in every client string
// replaced by filler of the same length renders to text of the same length, whose markup is
// where it was; a special spelling of the real rendering that the filler's rendering lacks came
// from the client. A template that makes the two lengths differ (it branches on the client's
// control-token text) gets a 400 rather than a guess.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "server/chat_request.h"

namespace qwen35::server {

// The ids of `text`, which is `c` rendered (render_chat). With mi.special_tokens_in_content,
// the whole text is encoded as it is (the older behaviour, for those who need it). `literal`
// (when given) receives the ranges of `text` kept as text: the client's spellings of control
// tokens (server/image_parts.h tells the template's image pads from the client's by them).
std::optional<ApiError> encode_chat_prompt(const ChatRequest& c, const ModelInfo& mi,
                                           const std::string& text, std::vector<int32_t>* ids,
                                           std::vector<tokenizer::TextRange>* literal = nullptr);

}  // namespace qwen35::server
