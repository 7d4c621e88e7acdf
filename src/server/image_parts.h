// Images in chat requests (docs/design.md "Images through the server"). Each API's parser reads
// its own image parts (OpenAI chat image_url, Responses input_image, Anthropic image blocks)
// into the message's ChatImages: the encoded bytes, decoded from base64 here, and where the
// client sent them ("messages[1].content[0]"), which every error about the image names. The
// server fetches nothing: a remote URL is a 400.
//
// After the conversation is rendered and encoded (prompt_tokens.h), attach_images reads every
// image's header (ImageEncoder::plan): a prompt that its images make longer than the context,
// and images that need more memory than --image-request-mb, are a 400 before any pixel is
// decoded; the memory is then reserved from the server's --image-mem-mb (full now: a 429 with
// Retry-After) until the images are patch rows. Then each image runs through the ImageEncoder
// (runtime/image_encoder.h) and the template's one <|image_pad|> per image is widened into the
// image's (h/2)·(w/2) tokens. Only pads that the template wrote
// count: client text that spells <|image_pad|> stays text (prompt_tokens.h), so a forged pad can
// never become an image slot; a prompt whose pads do not match its images is a 400.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/chat_request.h"

namespace qwen35::server {

// An image URL from a client: a data: URL (data:image/...;base64,...) or bare base64; the
// decoded bytes into *bytes. http(s) and other URLs are refused: the server fetches nothing.
std::optional<ApiError> read_image_url(const std::string& url, const std::string& where, std::string* bytes);

// Base64 (standard or URL-safe alphabet, padding optional, line breaks allowed);
// false on any other character or a bad length.
bool base64_decode(std::string_view in, std::string* out);

// A content part of a video type (video_url, input_video, video): the clear refusal.
ApiError video_refused(const std::string& type, const std::string& where);

// Appends an image part to *m at the current end of its text (m->content).
void add_image(ChatMessage* m, std::string bytes, std::string origin);

// The request's images, in conversation order: each through the encoder (limits, the model's
// tower), and each template-made <|image_pad|> of `ids` (the encoded `text`; `literal`: the
// client-text ranges encode_chat_prompt kept as text) widened to its image's tokens. Fills
// r->images, r->image_token, r->image_tokens. With `text_out`, also the rendered text with the
// pads widened the same way (what /apply-template shows).
std::optional<ApiError> attach_images(const ChatRequest& c, const ModelInfo& mi, const std::string& text,
                                      const std::vector<tokenizer::TextRange>& literal,
                                      std::vector<int32_t>* ids, CompletionRequest* r,
                                      std::string* text_out = nullptr);

// Whether a request body holds a part of an image type anywhere ({"type": "image_url" |
// "input_image" | "image"}): every image any API reads is one, so a body without one is decoded
// on no image (the server runs such requests on its HTTP workers, the others on the image lane).
bool mentions_images(const Json& body);

// Whether any message of `c` carries an image.
bool has_images(const ChatRequest& c);

}  // namespace qwen35::server
