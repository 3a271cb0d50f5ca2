// kvgate_bench_json: what constrained decoding (response_format json_schema / json_object) costs
// per generated token on the CPU engine.
//
//   kvgate_bench_json --model PATH [--threads 2] [--reps 3] [--max-tokens 160]
//
// Per repetition and per constraint (a JSON Schema with nested objects, an array, an enum; and
// json_object): one chat request, greedy, generated under the constraint until the value is
// complete (or max-tokens); then the same prompt unconstrained, end-of-generation ignored, for
// as many tokens. Step time = the wall time of one decode Step (the prefill step excluded), mean
// over the request. Mask time = the constrained stage alone (trie walk + -inf over the logits),
// replayed over the constrained request's own tokens, so it is measured on exactly the states
// the run went through. Prints one JSON object per repetition and constraint.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "local_engine/chat_template.h"
#include "local_engine/engine.h"

using namespace kvgate::engine;
using Clock = std::chrono::steady_clock;

namespace {

const char* kSchema = R"({"type":"object","properties":{
  "name":{"type":"string","maxLength":40},"age":{"type":"integer"},
  "email":{"type":["string","null"],"maxLength":60},
  "address":{"type":"object","properties":{"street":{"type":"string","maxLength":60},
    "city":{"type":"string","maxLength":40},"zip":{"type":"string","maxLength":10}},
    "required":["street","city","zip"],"additionalProperties":false},
  "role":{"enum":["admin","editor","viewer"]},
  "skills":{"type":"array","items":{"type":"string","maxLength":30},"maxItems":5},
  "active":{"type":"boolean"}},
  "required":["name","age","email","address","role","skills","active"],
  "additionalProperties":false})";

struct Run {
  std::vector<int32_t> tokens;
  std::vector<double> step_s;  // decode steps only
  FinishReason reason = FinishReason::kNone;
};

Run Generate(Engine& e, const std::vector<int32_t>& prompt, SamplingParams sp) {
  Run run;
  bool done = false;
  auto id = e.AddRequest(EngineRequest{prompt, sp, [&](const TokenEvent& ev) {
    if (ev.token_id >= 0) run.tokens.push_back(ev.token_id);
    if (ev.finished) done = true, run.reason = ev.finish_reason;
  }});
  if (!id) {
    std::fprintf(stderr, "%s\n", id.error().ToString().c_str());
    return run;
  }
  if (!e.Step()) return run;  // prefill + first token
  while (!done && e.HasWork()) {
    const auto t0 = Clock::now();
    if (!e.Step()) break;
    run.step_s.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return run;
}

double Mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0.0 : s / static_cast<double>(v.size());
}

}  // namespace

int main(int argc, char** argv) {
  std::string model;
  int threads = 2, reps = 3, max_tokens = 160;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--model") model = v;
    else if (a == "--threads") threads = std::stoi(v);
    else if (a == "--reps") reps = std::stoi(v);
    else if (a == "--max-tokens") max_tokens = std::stoi(v);
  }
  auto engine = Engine::Create({.model_path = model, .threads = threads, .num_kv_blocks = 64});
  if (!engine) return std::fprintf(stderr, "%s\n", engine.error().ToString().c_str()), 1;
  Engine& e = **engine;
  auto tmpl = ChatTemplateFromGguf(e.gguf());
  if (!tmpl) return std::fprintf(stderr, "%s\n", tmpl.error().ToString().c_str()), 1;
  auto text = ApplyChatTemplate(*tmpl, {{"user", "Invent a user profile for a web shop, as JSON."}}, true);
  if (!text) return 1;
  const std::vector<int32_t> prompt = e.tokenizer().Encode(*text, true);
  auto schema = CompileJsonSchema(nlohmann::json::parse(kSchema), "schema");
  if (!schema) return std::fprintf(stderr, "%s\n", schema.error().message.c_str()), 1;
  const auto trie = TokenTrie::FromTokenizer(e.tokenizer());
  const std::pair<const char*, std::shared_ptr<const JsonGrammar>> constraints[] = {
      {"json_schema", *schema}, {"json_object", JsonObjectGrammar()}};
  std::vector<float> logits(static_cast<size_t>(e.dims().vocab), 0.0f);

  for (int r = 0; r < reps; ++r) {
    for (const auto& [name, grammar] : constraints) {
      SamplingParams sp;
      sp.max_tokens = max_tokens;
      sp.json_grammar = grammar;
      const Run constrained = Generate(e, prompt, sp);
      SamplingParams plain;
      plain.max_tokens = static_cast<int32_t>(constrained.tokens.size());
      plain.ignore_eos = true;
      const Run unconstrained = Generate(e, prompt, plain);
      // The mask stage alone, over the states the constrained run went through.
      JsonMatcher m(grammar);
      TokenBitmask allowed;
      std::vector<double> mask_s;
      size_t allowed_sum = 0;
      for (int32_t t : constrained.tokens) {
        const auto t0 = Clock::now();
        trie->AllowedTokens(m, allowed);
        MaskLogits(logits, allowed);
        mask_s.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
        allowed_sum += allowed.Count();
        if (e.tokenizer().GetTokenType(t) == TokenType::kControl) break;
        m.AdvanceBytes(e.tokenizer().TokenBytes(t));
        m.Commit();
      }
      const size_t worst_at = static_cast<size_t>(
          std::max_element(mask_s.begin(), mask_s.end()) - mask_s.begin());
      std::sort(mask_s.begin(), mask_s.end());
      const double step_c = Mean(constrained.step_s), step_u = Mean(unconstrained.step_s);
      const double mask = Mean(mask_s);
      std::printf("{\"constraint\": \"%s\", \"threads\": %d, \"tokens\": %zu, \"finish\": \"%s\", "
                  "\"step_ms_unconstrained\": %.3f, \"step_ms_constrained\": %.3f, "
                  "\"mask_ms_mean\": %.3f, \"mask_ms_p50\": %.3f, \"mask_ms_max\": %.3f, "
                  "\"mask_max_at_token\": %zu, "
                  "\"mask_share_of_step\": %.4f, \"step_overhead\": %.4f, "
                  "\"allowed_tokens_mean\": %.0f, \"trie_nodes\": %zu}\n",
                  name, threads, constrained.tokens.size(),
                  std::string(FinishReasonName(constrained.reason)).c_str(), step_u * 1e3,
                  step_c * 1e3, mask * 1e3, mask_s.empty() ? 0.0 : mask_s[mask_s.size() / 2] * 1e3,
                  mask_s.empty() ? 0.0 : mask_s.back() * 1e3, worst_at, step_u > 0 ? mask / step_u : 0.0,
                  step_u > 0 ? step_c / step_u - 1.0 : 0.0,
                  mask_s.empty() ? 0.0 : static_cast<double>(allowed_sum) / mask_s.size(),
                  trie->num_nodes());
      if (r == 0) std::fprintf(stderr, "%s output: %s\n", name, e.tokenizer().Decode(constrained.tokens, false).c_str());
      std::fflush(stdout);
    }
  }
  return 0;
}
