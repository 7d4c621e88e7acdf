// qwen35 detokenize -m DIR (--ids 1,2,3 | --jsonl F) [--skip-special]
//   --ids: writes the text exactly (no newline is added).
//   --jsonl: each input line is a JSON array of ids (or an object with an "ids" array); writes
//   one JSON string per line. F may be "-" for stdin.
// An id outside the vocabulary is an error (the library's decode() would skip it).
#include "cli/flags.h"
#include <charconv>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/model_assets.h"
#include "cli/commands.h"
#include "tokenizer/tokenizer.h"

namespace qwen35::cli {

namespace {

constexpr const char* kCmd = "detokenize";

std::string check_ids(const tokenizer::Tokenizer& tok, const std::vector<int32_t>& ids) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!tok.is_valid_id(ids[i])) {
      return "id " + std::to_string(ids[i]) + " (position " + std::to_string(i) +
             ") is outside the vocabulary [0, " + std::to_string(tok.vocab_size()) + ")";
    }
  }
  return "";
}

// "1,2,3", with optional spaces and surrounding brackets.
bool parse_id_list(std::string s, std::vector<int32_t>* ids, std::string* error) {
  for (char& c : s) {
    if (c == '[' || c == ']') c = ' ';
  }
  size_t pos = 0;
  while (true) {
    const size_t comma = s.find(',', pos);
    std::string item = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    const size_t b = item.find_first_not_of(" \t\n"), e = item.find_last_not_of(" \t\n");
    item = b == std::string::npos ? "" : item.substr(b, e - b + 1);
    if (item.empty() && comma == std::string::npos && ids->empty()) return true;  // no ids
    int32_t v = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || end != item.data() + item.size()) {
      *error = "--ids: '" + item + "' is not a token id";
      return false;
    }
    ids->push_back(v);
    if (comma == std::string::npos) return true;
    pos = comma + 1;
  }
}

int run_jsonl(const tokenizer::Tokenizer& tok, const std::string& path, bool skip) {
  std::ifstream file;
  if (path != "-") {
    file.open(path, std::ios::binary);
    if (!file) return fail(kCmd, "'" + path + "': cannot open");
  }
  std::istream& in = path == "-" ? std::cin : file;
  std::string line;
  for (size_t n = 1; std::getline(in, line); ++n) {
    const std::string where = "'" + path + "' line " + std::to_string(n);
    std::vector<int32_t> ids;
    try {
      nlohmann::json j = nlohmann::json::parse(line);
      if (j.is_object() && j.contains("ids")) j = j["ids"];
      if (!j.is_array()) return fail(kCmd, where + ": expected a JSON array of ids");
      for (const auto& v : j) {
        if (!v.is_number_integer() || v.get<int64_t>() < INT32_MIN ||
            v.get<int64_t>() > INT32_MAX) {
          return fail(kCmd, where + ": " + v.dump() + " is not a token id");
        }
        ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
      }
    } catch (const nlohmann::json::exception& e) {
      return fail(kCmd, where + ": invalid JSON: " + e.what());
    }
    const std::string bad = check_ids(tok, ids);
    if (!bad.empty()) return fail(kCmd, where + ": " + bad);
    const std::string out = nlohmann::json(tok.decode(ids, skip))
                                .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
                            "\n";
    std::fwrite(out.data(), 1, out.size(), stdout);
  }
  if (in.bad()) return fail(kCmd, "'" + path + "': read error");
  return 0;
}

}  // namespace

int cmd_detokenize(int argc, char** argv) {
  flags::App app{"Token ids to text.", "qwen35 detokenize"};
  std::string model, ids_arg, jsonl;
  bool skip = false;
  app.add_option("-m,--model", model, "directory with tokenizer.json, or a .gguf file")->required();
  auto* o_ids = app.add_option("--ids", ids_arg, "comma-separated ids; the text is written as is");
  auto* o_jsonl = app.add_option("--jsonl", jsonl,
                                 "one JSON array of ids per line in, one JSON string per line out");
  app.add_flag("--skip-special", skip, "drop the added tokens flagged special");
  o_ids->excludes(o_jsonl);
  try {
    app.parse(argc, argv);
  } catch (const flags::CallForHelp&) {
    std::cout << app.help();
    return 0;
  } catch (const flags::ParseError& e) {
    return fail(kCmd, e.what());
  }
  if (o_ids->count() + o_jsonl->count() == 0) {
    return fail(kCmd, "one of --ids or --jsonl is required");
  }
  std::vector<int32_t> ids;
  std::string error;
  if (o_ids->count() > 0 && !parse_id_list(ids_arg, &ids, &error)) return fail(kCmd, error);
  auto tok = load_tokenizer(model);
  if (!tok.ok()) return fail(kCmd, tok.message());
  if (o_jsonl->count() > 0) return run_jsonl(*tok, jsonl, skip);
  error = check_ids(*tok, ids);
  if (!error.empty()) return fail(kCmd, error);
  const std::string text = tok->decode(ids, skip);
  std::fwrite(text.data(), 1, text.size(), stdout);
  if (std::fflush(stdout) != 0) return fail(kCmd, "cannot write to stdout");
  return 0;
}

}  // namespace qwen35::cli
