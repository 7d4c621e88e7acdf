// The routes that need only the tokenizer and the chat template: /tokenize, /detokenize,
// /apply-template. Separate from server.cc so that they link without the engine (the HTTP fuzz
// harness serves them).
#include "server/server.h"

namespace qwen35::server {
namespace {

HttpResponse json_response(const Json& j) {
  HttpResponse res;
  res.set_content(dump(j), "application/json");
  return res;
}

}  // namespace

void answer_utility(const Context& ctx, const std::string& path, const Json& b, Responder& r) {
  auto send_error = [&r](const ApiError& e) { r.send(error_response(e)); };
  if (path == "/tokenize") {
    if (auto e = check_model(b, ctx.mi)) return send_error(*e);
    std::string text;
    std::vector<int32_t> ids;
    if (b.contains("messages")) {
      // The ids a chat request of these messages gets (control tokens in content stay text).
      if (auto e = render_messages(b, ctx.mi, &text, &ids)) return send_error(*e);
    } else if (b.contains("prompt") && b["prompt"].is_string()) {
      auto enc = ctx.mi.tok->encode(b["prompt"].get<std::string>());
      if (!enc.ok()) return send_error(invalid("prompt", enc.message()));
      ids = std::move(*enc);
    } else {
      return send_error(invalid("prompt", "'prompt' (a string) or 'messages' is required"));
    }
    return r.send(json_response(
        Json{{"count", ids.size()}, {"max_model_len", ctx.mi.ctx}, {"tokens", ids}}));
  }
  if (path == "/detokenize") {
    std::vector<int32_t> ids;
    if (auto e = parse_detokenize(b, ctx.mi, &ids)) return send_error(*e);
    return r.send(json_response(Json{{"prompt", ctx.mi.tok->decode(ids)}}));
  }
  // /apply-template
  std::string text;
  if (auto e = render_messages(b, ctx.mi, &text)) return send_error(*e);
  r.send(json_response(Json{{"prompt", text}}));
}

}  // namespace qwen35::server
