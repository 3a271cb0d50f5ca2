#include "local_engine/engine.h"
#include "local_engine/scheduler.h"
#include "local_engine/sequence.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <utility>

namespace kvgate::engine {

namespace {

// Usage as the client sees it. A sequence preempted and recomputed may register some prompt
// blocks twice; the prompt is still split once: cached + written <= prompt.
Usage UsageOf(const Sequence& s) {
  return Usage{s.num_prompt, s.cached_tokens, s.completion,
               std::min(s.cache_write_tokens, s.num_prompt - s.cached_tokens),
               s.cached_offload_tokens};
}

// The pool size when the options leave it open. On cuda: run one max_batch_tokens step on a
// scratch runner (this dequantizes every weight and grows the backend's and the runner's buffers to
// their peak), then give the KV pool gpu_memory_fraction of the memory still free. The scratch
// runner's buffers are freed before the real runner allocates the same ones again.
Result<int32_t> DefaultKvBlocks(const ModelWeights& weights, Backend& backend,
                                const EngineOptions& options) {
  // On cpu: the bytes of 512 f16 blocks, in blocks of the configured dtype (an 8-bit cache holds
  // about twice the tokens in the same memory).
  constexpr int32_t kCpuDefaultF16Blocks = 512;
  if (options.device == Device::kCpu) {
    const uint64_t budget = static_cast<uint64_t>(KvBytesPerToken(weights.dims, KvDtype::kFp16)) *
                            kBlockSize * kCpuDefaultF16Blocks;
    return static_cast<int32_t>(
        std::max<int64_t>(1, KvBlocksForBytes(weights.dims, options.kv_cache_dtype, kBlockSize,
                                              budget)));
  }
  const int32_t n = static_cast<int32_t>(
      std::min<int64_t>(options.max_batch_tokens, weights.dims.context_length));
  const int32_t blocks = (n + kBlockSize - 1) / kBlockSize;
  auto scratch = ModelRunner::Create(weights, backend,
                                     KvCacheConfig{blocks, kBlockSize, options.kv_cache_dtype});
  if (!scratch) return std::unexpected(scratch.error());
  std::vector<int32_t> ids(n, 0), positions(n), table(blocks);
  std::vector<int64_t> slots(n);
  for (int32_t i = 0; i < n; ++i) positions[i] = i, slots[i] = i;
  for (int32_t b = 0; b < blocks; ++b) table[b] = b;
  const std::vector<int32_t> query_start{0, n}, context_lens{n};
  const BatchMetadata batch{.token_ids = ids,
                            .positions = positions,
                            .slot_mapping = slots,
                            .query_start = query_start,
                            .context_lens = context_lens,
                            .block_tables = table,
                            .max_blocks_per_seq = blocks,
                            .block_size = kBlockSize};
  std::vector<float> logits;
  // All-token logits: the largest output head a step of n tokens can need (rows <= tokens).
  if (auto s = (*scratch)->Forward(batch, LogitsMode::kAllTokens, logits); !s) {
    return MakeError(s.error().code, "sizing the KV pool: " + s.error().message);
  }
  auto tokens = KvTokensForMemoryFraction(options.device, options.gpu_memory_fraction,
                                          (*scratch)->KvBytesPerToken());
  if (!tokens) return std::unexpected(tokens.error());
  const int64_t pool =
      std::min<int64_t>(*tokens / kBlockSize, std::numeric_limits<int32_t>::max() / kBlockSize);
  if (pool <= 0) {
    return MakeError(ErrorCode::kResourceExhausted,
                     "device cuda: gpu_memory_fraction leaves no room for one KV block after the "
                     "weights and activations");
  }
  return static_cast<int32_t>(pool);
}

}  // namespace

std::string_view FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kNone: return "none";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
  }
  return "unknown";
}

Result<std::unique_ptr<Engine>> Engine::Create(const EngineOptions& options) {
  std::unique_ptr<Engine> e(new Engine());
  e->options_ = options;
  if (options.num_kv_blocks < 0 || options.max_batch_tokens <= 0 || options.max_running <= 0) {
    return MakeError(ErrorCode::kInvalidArgument, "engine options must be positive");
  }
  if (!(options.gpu_memory_fraction > 0.0 && options.gpu_memory_fraction <= 1.0)) {
    return MakeError(ErrorCode::kInvalidArgument, "gpu_memory_fraction must be in (0, 1]");
  }
  // The device first: a missing GPU is reported before the model is read.
  BackendSpec spec{.device = options.device, .fp8_gemm = options.fp8_gemm};
  if (options.device == Device::kCpu) {
    e->pool_ = std::make_unique<kernels::cpu::ThreadPool>(options.threads);
    spec.pool = e->pool_.get();
    spec.isa = options.force_scalar ? kernels::cpu::Isa::kScalar : kernels::cpu::BestIsa();
  }
  auto backend = MakeBackend(spec);
  if (!backend) return std::unexpected(backend.error());
  e->backend_ = std::move(*backend);
  auto file = GgufFile::Open(options.model_path);
  if (!file) return std::unexpected(file.error());
  e->file_ = std::move(*file);
  auto weights = LoadWeights(*e->file_, *e->backend_);
  if (!weights) return std::unexpected(weights.error());
  e->weights_ = std::move(*weights);
  if (e->options_.num_kv_blocks == 0) {
    auto blocks = DefaultKvBlocks(e->weights_, *e->backend_, options);
    if (!blocks) return std::unexpected(blocks.error());
    e->options_.num_kv_blocks = *blocks;
  }
  int32_t pool_blocks = e->options_.num_kv_blocks;
  if (options.cuda_graphs) {
    if (pool_blocks < 2) {
      return MakeError(ErrorCode::kInvalidArgument, "cuda_graphs needs a KV pool of 2 blocks or more");
    }
    e->scratch_block_ = --pool_blocks;
  }
  auto runner = ModelRunner::Create(e->weights_, *e->backend_,
                                    KvCacheConfig{e->options_.num_kv_blocks, kBlockSize,
                                                  options.kv_cache_dtype},
                                    RunnerOptions{.decode_graphs = options.cuda_graphs});
  if (!runner) return std::unexpected(runner.error());
  e->runner_ = std::move(*runner);
  auto tok = Tokenizer::FromGguf(*e->file_);
  if (!tok) return std::unexpected(tok.error());
  // A vocabulary of another size than the embedding table: every id past the shorter one reads
  // the wrong row or none, and the model writes garbage.
  if ((*tok)->vocab_size() != static_cast<size_t>(e->weights_.dims.vocab)) {
    return MakeError(ErrorCode::kCorruptData,
                     "tokenizer.ggml.tokens has " + std::to_string((*tok)->vocab_size()) +
                         " tokens but the embedding table has " +
                         std::to_string(e->weights_.dims.vocab) + " rows");
  }
  e->tokenizer_ = std::move(*tok);
  // End of generation: the declared EOS plus the chat-format terminators llama.cpp also treats as
  // end-of-generation when the vocabulary has them.
  if (auto eos = e->tokenizer_->eos_id()) e->eog_tokens_.push_back(*eos);
  for (std::string_view t : {"<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>"}) {
    if (auto id = e->tokenizer_->FindToken(t)) e->eog_tokens_.push_back(*id);
  }
  std::sort(e->eog_tokens_.begin(), e->eog_tokens_.end());
  e->eog_tokens_.erase(std::unique(e->eog_tokens_.begin(), e->eog_tokens_.end()),
                       e->eog_tokens_.end());
  e->trie_ = TokenTrie::FromTokenizer(*e->tokenizer_);
  e->pool_blocks_ = pool_blocks;
  // Nothing else sees the engine yet: the lock only tells the analysis so (and costs nothing).
  MutexLock pool_lock(&e->blocks_mu_);
  e->blocks_ = std::make_unique<BlockManager>(pool_blocks);
  e->scheduler_ = std::make_unique<Scheduler>(
      SchedulerConfig{.max_running = options.max_running,
                      .max_batch_tokens = options.max_batch_tokens,
                      .block_size = kBlockSize},
      *e->blocks_);
  if (!options.offload.disk_path.empty() || options.offload.host_bytes > 0) {
    if (auto st = e->OpenTier(); !st) return std::unexpected(st.error());
  }
  return e;
}

Result<uint64_t> Engine::AddRequest(EngineRequest request) {
  auto bad = [](const std::string& m) { return MakeError(ErrorCode::kInvalidArgument, m); };
  if (request.prompt.empty()) return bad("empty prompt");
  for (int32_t t : request.prompt) {
    if (t < 0 || t >= weights_.dims.vocab) return bad("prompt token id out of range: " + std::to_string(t));
  }
  if (auto s = ValidateSamplingParams(request.sampling); !s) return std::unexpected(s.error());
  if (request.n < 1 || request.n > max_choices()) {
    return bad("n must be between 1 and " + std::to_string(max_choices()) +
               " (at most the engine's max_running)");
  }
  const int64_t n = static_cast<int64_t>(request.prompt.size());
  if (n >= weights_.dims.context_length) {
    return bad("prompt of " + std::to_string(n) + " tokens does not fit the context length " +
               std::to_string(weights_.dims.context_length));
  }
  if (const int64_t pool_tokens = int64_t{pool_blocks_} * kBlockSize; n + 1 > pool_tokens) {
    return MakeError(ErrorCode::kResourceExhausted,
                     "prompt of " + std::to_string(n) + " tokens does not fit the KV cache of " +
                         std::to_string(pool_tokens) + " tokens (kv_cache_tokens)");
  }
  MutexLock lock(&inbox_mu_);
  const uint64_t id = next_id_++;
  inbox_.push_back(std::make_unique<Sequence>(id, std::move(request), *tokenizer_));
  ++live_requests_;
  return id;
}

void Engine::Cancel(uint64_t request_id) {
  MutexLock lock(&inbox_mu_);
  cancels_.push_back(request_id);
  if (InFlight(request_id)) abort_step_.store(true, std::memory_order_relaxed);
}

bool Engine::InFlight(uint64_t request_id) const {
  return std::find(in_flight_.begin(), in_flight_.end(), request_id) != in_flight_.end();
}

void Engine::CancelAll() {
  MutexLock lock(&inbox_mu_);
  cancel_all_ = true;
  if (!in_flight_.empty()) abort_step_.store(true, std::memory_order_relaxed);
}

bool Engine::HasWork() const {
  MutexLock lock(&inbox_mu_);
  return live_requests_ > 0;
}

void Engine::DrainInbox() {
  std::vector<std::unique_ptr<Sequence>> added;
  std::vector<uint64_t> cancels;
  bool cancel_all = false;
  {
    MutexLock lock(&inbox_mu_);
    added.swap(inbox_);
    cancels.swap(cancels_);
    cancel_all = std::exchange(cancel_all_, false);
  }
  for (auto& s : added) scheduler_->Enqueue(std::move(s));
  if (cancels.empty() && !cancel_all) return;
  std::sort(cancels.begin(), cancels.end());
  for (Sequence* s : scheduler_->Live()) {
    if (cancel_all || std::binary_search(cancels.begin(), cancels.end(), s->id)) {
      Finish(*s, FinishReason::kCancelled);
    }
  }
  scheduler_->RemoveFinished();
}

void Engine::Emit(Sequence& s, int32_t token, std::string_view text, FinishReason reason,
                  const TokenLogprobs* logprobs) {
  TokenEvent ev;
  ev.logprobs = logprobs;
  ev.request_id = s.id;
  ev.choice = s.choice;
  ev.token_id = token;
  ev.text = text;
  ev.finished = reason != FinishReason::kNone;
  ev.finish_reason = reason;
  ev.usage = UsageOf(s);
  if (tier_) ev.usage.offload_tier = tier_->kind();
  if (reason == FinishReason::kStop) ev.stop_string = s.stop.matched();
  if (s.on_token) s.on_token(ev);
}

void Engine::Finish(Sequence& s, FinishReason reason, std::string error) {
  blocks_->Free(s.blocks);
  s.finished = true;
  TokenEvent ev;
  ev.request_id = s.id;
  ev.finished = true;
  ev.finish_reason = reason;
  ev.usage = UsageOf(s);
  if (tier_) ev.usage.offload_tier = tier_->kind();
  ev.error = std::move(error);
  // A request that ends before its prompt was computed never forked its other choices: they end
  // with it, each with its own final event.
  for (int32_t choice = s.choice; choice <= s.choice + s.forks; ++choice) {
    ev.choice = choice;
    if (s.on_token) s.on_token(ev);
  }
  s.forks = 0;
  MutexLock lock(&inbox_mu_);
  --live_requests_;
}

int Engine::LookupCachedTokens(std::span<const int32_t> prompt, uint64_t cache_salt) const {
  MutexLock lock(&blocks_mu_);
  return blocks_->LookupCachedTokens(prompt, cache_salt);
}

CacheStats Engine::cache_stats() const {
  MutexLock lock(&blocks_mu_);
  CacheStats out{blocks_->stats(), scheduler_->num_running(), scheduler_->num_waiting(),
                 scheduler_->preemptions(), aborted_steps_};
  if (tier_) {
    out.offload = true;
    out.offload_kind = tier_->kind();
    out.offload_path = tier_->location();
    out.tier = tier_->stats();
    out.offload_hit_tokens = offload_hit_tokens_;
    out.offload_restores = offload_restores_;
    out.offload_restore_ns = offload_restore_ns_;
    out.offload_store_ns = offload_store_ns_;
  }
  return out;
}

void Engine::ConstrainLogits(Sequence& s, std::span<float> logits) {
  trie_->AllowedTokens(*s.matcher, s.allowed);
  // End of generation only where the value may end (a complete object; a top-level number that
  // could still grow), and then always; with nothing else allowed too, rather than sampling from
  // no token at all (not expected: the automaton begins no value it cannot finish under its depth
  // bound; OnSampled reports such an end as "length").
  if (s.matcher->IsComplete() || s.allowed.Count() == 0) {
    for (int32_t t : eog_tokens_) {
      if (t >= 0 && static_cast<size_t>(t) < s.allowed.size()) s.allowed.Set(static_cast<size_t>(t));
    }
  }
  MaskLogits(logits, s.allowed);
}

void Engine::OnSampled(Sequence& s, int32_t token) {
  s.tokens.push_back(token);
  ++s.completion;
  const bool is_eog = std::binary_search(eog_tokens_.begin(), eog_tokens_.end(), token);
  const bool eog = !s.params.ignore_eos && is_eog;
  // The automaton takes the token's bytes (control tokens render as nothing). Once the value is
  // complete and nothing may follow, the output ends here: that is the end-of-generation token
  // constrained decoding would force next, without a step to sample it.
  bool json_done = false, json_cut = false;
  if (s.matcher && !is_eog && tokenizer_->GetTokenType(token) != TokenType::kControl) {
    if (!s.matcher->AdvanceBytes(tokenizer_->TokenBytes(token))) {
      json_cut = true;  // not reached: the mask allowed only tokens the automaton accepts
    }
    s.matcher->Commit();
    json_done = s.matcher->IsComplete() && !s.matcher->CanContinue();
  }
  // An end of generation before the value is complete (the mask allows one only when nothing
  // else is left) is a value cut short, as by max_tokens: "length", never "stop" with text that
  // does not parse.
  if (s.matcher && eog && !s.matcher->IsComplete()) json_cut = true;
  std::string text;
  FinishReason reason = json_cut           ? FinishReason::kLength
                        : eog || json_done ? FinishReason::kStop
                                           : FinishReason::kNone;
  bool stop_string = false;
  if (!eog) {
    auto out = s.stop.Push(s.decoder->Push(token));
    text = std::move(out.text);
    stop_string = out.stopped;
    if (out.stopped) reason = FinishReason::kStop;
  }
  if (reason == FinishReason::kNone &&
      (s.completion >= s.params.max_tokens ||
       static_cast<int64_t>(s.tokens.size()) >= weights_.dims.context_length)) {
    reason = FinishReason::kLength;
  }
  if (reason != FinishReason::kNone && !stop_string) {
    // Release what the decoder and the stop matcher still hold (a stop string may still appear).
    auto tail = s.stop.Push(s.decoder->Finish());
    text += tail.text;
    if (tail.stopped) {
      reason = FinishReason::kStop;
    } else {
      text += s.stop.Flush();
    }
  }
  std::optional<TokenLogprobs> logprobs;
  if (s.params.logprobs >= 0 && !is_eog) {
    logprobs = ComputeLogprobs(s.raw_logits, token, s.params.logprobs);
  }
  Emit(s, token, text, reason, logprobs ? &*logprobs : nullptr);
  if (reason != FinishReason::kNone) {
    blocks_->Free(s.blocks);
    s.finished = true;
    MutexLock lock(&inbox_mu_);
    --live_requests_;
  }
}

void Engine::Admit() {
  std::vector<Admission> restores;
  const auto tier_blocks_for = [this](const Sequence& s) {
    blocks_mu_.AssertHeld();  // the scheduler calls it from its Admit, under this Admit's lock
    return TierBlocksFor(s);
  };
  for (const Admission& a : scheduler_->Admit(tier_blocks_for)) {
    if (a.tier_blocks > 0) {
      restores.push_back(a);  // NoteAdmitted once the tier's blocks are copied in
    } else {
      a.seq->NoteAdmitted(0);
    }
  }
  // The admissions' evicted blocks to the tier, then the blocks restored from it.
  RunTierIo(restores);
}

Status Engine::RunForward(std::span<const Chunk> chunks) {
  int32_t max_blocks = 1;
  for (const Chunk& c : chunks) {
    max_blocks = std::max<int32_t>(max_blocks, static_cast<int32_t>(c.seq->blocks.block_ids.size()));
  }
  batch_ = StepBatch{};
  batch_.table_width = options_.cuda_graphs ? PowerOfTwoBucket(max_blocks) : max_blocks;
  for (const Chunk& c : chunks) {
    batch_.AddSequence(c.seq->tokens, c.seq->num_computed, c.num_tokens, c.seq->blocks.block_ids,
                       kBlockSize);
  }
  if (options_.cuda_graphs) PadDecodeBatch(batch_, scratch_block_);  // rows past the plan: ignored
  const BatchMetadata batch = batch_.View(kBlockSize);
  // Blocks the plan's growth evicted go to the tier before the forward pass overwrites them.
  RunTierIo({});
  {
    // A cancel that came after DrainInbox, for one of these requests, stops the pass at once.
    MutexLock inbox(&inbox_mu_);
    in_flight_.clear();
    for (const Chunk& c : chunks) in_flight_.push_back(c.seq->id);
    const bool cancelled =
        cancel_all_ || std::any_of(cancels_.begin(), cancels_.end(), [this](uint64_t id) {
          inbox_mu_.AssertHeld();  // any_of runs it right here
          return InFlight(id);
        });
    abort_step_.store(cancelled, std::memory_order_relaxed);
  }
  // The forward pass only writes slots of blocks these sequences own exclusively (shared prefix
  // blocks are read-only), so lookups may read the block pool meanwhile. An aborted pass leaves
  // garbage only in slots past each sequence's num_computed, which the next pass rewrites.
  Status forward;
  {
    MutexUnlock unlocked(&blocks_mu_);
    forward = runner_->Forward(batch, LogitsMode::kLastPerSequence, logits_, &abort_step_);
  }
  MutexLock inbox(&inbox_mu_);
  in_flight_.clear();
  abort_step_.store(false, std::memory_order_relaxed);
  return forward;
}

void Engine::ForkChoices(Sequence& first, std::span<const float> row) {
  const int32_t forks = std::exchange(first.forks, 0);
  const int num_tokens = static_cast<int>(first.num_computed);
  std::vector<float> logits;
  for (int32_t index = 1; index <= forks; ++index) {
    auto fork = std::make_unique<Sequence>(first, index, *tokenizer_);
    {
      MutexLock inbox(&inbox_mu_);
      ++live_requests_;
    }
    bool shared = false;
    if (blocks_->CanFork(first.blocks, num_tokens)) {
      const BlockCopy copy = blocks_->Fork(first.blocks, num_tokens, fork->blocks);
      if (copy.dst >= 0) RunTierIo({});  // the copy's block may have held an evicted one
      shared = copy.dst < 0 || runner_->CopyBlock(copy.src, copy.dst).has_value();
      if (!shared) blocks_->Free(fork->blocks);
    }
    if (!shared) {
      scheduler_->Requeue(std::move(fork));  // admitted later: its full blocks are prefix hits
      continue;
    }
    fork->num_computed = num_tokens;
    logits.assign(row.begin(), row.end());
    if (fork->params.logprobs >= 0) fork->raw_logits = logits;
    Sequence& s = scheduler_->AddRunning(std::move(fork));
    OnSampled(s, s.sampler.Sample(logits));
  }
}

void Engine::Postprocess(std::span<const Chunk> chunks) {
  const int64_t vocab = weights_.dims.vocab;
  for (size_t i = 0; i < chunks.size(); ++i) {
    Sequence& s = *chunks[i].seq;
    s.num_computed += chunks[i].num_tokens;
    if (options_.enable_prefix_caching) {
      // Prompt blocks first, so cache_write_tokens counts prompt tokens only; then blocks filled
      // by generated tokens (the next turn of a conversation starts with them).
      const int prompt_done = static_cast<int>(std::min<int64_t>(s.num_computed, s.num_prompt));
      s.cache_write_tokens += blocks_->CommitComputed(s.tokens, prompt_done, s.blocks);
      blocks_->CommitComputed(s.tokens, static_cast<int>(s.num_computed), s.blocks);
    }
    if (s.num_remaining() == 0) {
      std::span<float> row(logits_.data() + i * vocab, vocab);
      if (s.matcher) ConstrainLogits(s, row);
      if (s.forks > 0) ForkChoices(s, row);
      if (s.params.logprobs >= 0) s.raw_logits.assign(row.begin(), row.end());
      OnSampled(s, s.sampler.Sample(row));
    }
  }
}

Status Engine::Step() {
  MutexLock lock(&blocks_mu_);
  DrainInbox();
  Admit();
  const StepPlan plan = scheduler_->Plan();
  if (plan.out_of_room) Finish(*plan.out_of_room, FinishReason::kLength);
  if (!plan.chunks.empty()) {
    if (auto forward = RunForward(plan.chunks); forward) {
      Postprocess(plan.chunks);
    } else if (forward.error().code == ErrorCode::kCancelled) {
      ++aborted_steps_;  // the next Step finishes the cancelled requests, replans the others
    } else {
      for (const Chunk& c : plan.chunks) {
        Finish(*c.seq, FinishReason::kError, forward.error().ToString());
      }
    }
  }
  scheduler_->RemoveFinished();
  return {};
}

}  // namespace kvgate::engine
