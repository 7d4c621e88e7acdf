// qwen35 tokenize -m DIR (--text STR | --file F | --jsonl F)
//   --text / --file: prints one JSON array of ids.
//   --jsonl: each input line is a JSON string (or an object with a "text" string); writes one
//   JSON array of ids per line. F may be "-" for stdin.
#include "cli/flags.h"
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "cli/model_assets.h"
#include "cli/commands.h"
#include "tokenizer/tokenizer.h"

namespace qwen35::cli {

namespace {

constexpr const char* kCmd = "tokenize";

void write_ids(const std::vector<int32_t>& ids, std::string* out) {
  out->push_back('[');
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) out->push_back(',');
    out->append(std::to_string(ids[i]));
  }
  out->append("]\n");
}

bool read_all(const std::string& path, std::string* out) {
  if (path == "-") {
    std::ostringstream ss;
    ss << std::cin.rdbuf();
    *out = std::move(ss).str();
    return !std::cin.bad();
  }
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::ostringstream ss;
  ss << f.rdbuf();
  *out = std::move(ss).str();
  return !f.bad();
}

int run_jsonl(const tokenizer::Tokenizer& tok, const std::string& path) {
  std::ifstream file;
  if (path != "-") {
    file.open(path, std::ios::binary);
    if (!file) return fail(kCmd, "'" + path + "': cannot open");
  }
  std::istream& in = path == "-" ? std::cin : file;
  std::string line, out;
  std::vector<int32_t> ids;
  for (size_t n = 1; std::getline(in, line); ++n) {
    const std::string where = "'" + path + "' line " + std::to_string(n);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      return fail(kCmd, where + ": invalid JSON: " + e.what());
    }
    if (j.is_object() && j.contains("text")) j = j["text"];
    if (!j.is_string()) return fail(kCmd, where + ": expected a JSON string");
    ids.clear();
    const auto st = tok.encode_into(j.get_ref<const std::string&>(), &ids);
    if (!st.ok()) return fail(kCmd, where + ": " + st.message());
    out.clear();
    write_ids(ids, &out);
    std::fwrite(out.data(), 1, out.size(), stdout);
  }
  if (in.bad()) return fail(kCmd, "'" + path + "': read error");
  return 0;
}

}  // namespace

int cmd_tokenize(int argc, char** argv) {
  flags::App app{"Text to token ids, printed as a JSON array.", "qwen35 tokenize"};
  std::string model, text, file, jsonl;
  app.add_option("-m,--model", model, "directory with tokenizer.json, or a .gguf file")->required();
  auto* o_text = app.add_option("--text", text, "text to tokenize");
  auto* o_file = app.add_option("--file", file, "file whose bytes are the text ('-': stdin)");
  auto* o_jsonl =
      app.add_option("--jsonl", jsonl, "one JSON string per line in, one JSON array per line out");
  o_text->excludes(o_file)->excludes(o_jsonl);
  o_file->excludes(o_jsonl);
  try {
    app.parse(argc, argv);
  } catch (const flags::CallForHelp&) {
    std::cout << app.help();
    return 0;
  } catch (const flags::ParseError& e) {
    return fail(kCmd, e.what());
  }
  if (o_text->count() + o_file->count() + o_jsonl->count() == 0) {
    return fail(kCmd, "one of --text, --file or --jsonl is required");
  }
  auto tok = load_tokenizer(model);
  if (!tok.ok()) return fail(kCmd, tok.message());
  if (o_jsonl->count() > 0) return run_jsonl(*tok, jsonl);
  if (o_file->count() > 0 && !read_all(file, &text)) {
    return fail(kCmd, "'" + file + "': cannot read");
  }
  auto ids = tok->encode(text);
  if (!ids.ok()) return fail(kCmd, ids.message());
  std::string out;
  write_ids(*ids, &out);
  std::fwrite(out.data(), 1, out.size(), stdout);
  if (std::fflush(stdout) != 0) return fail(kCmd, "cannot write to stdout");
  return 0;
}

}  // namespace qwen35::cli
