// `kvgate generate`: run the built-in engine on one prompt from the command line.
#pragma once

namespace kvgate::engine {

// argv[0] is the command name; the options follow:
//   --model PATH [--chat] --prompt TEXT [--max-tokens N] [--temperature T] [--seed S]
//   [--device cpu|cuda] [--threads N] [--top-k K] [--top-p P] [--min-p P] [--repeat-penalty R]
//   [--stop STR]... [--ignore-eos] [--verbose] (prints the prompt's token ids to stderr)
//   [--kv-cache-dtype f16|bf16|int8|fp8] (EngineOptions::kv_cache_dtype; not f16 needs cpu)
// Greedy by default, on the cpu. --device cuda without CUDA in the build or without a GPU fails
// with "device cuda: ...; use --device cpu" (exit 1); on cuda the KV pool takes 90% of the GPU
// memory left after the weights (EngineOptions::gpu_memory_fraction).
// Streams the generated text to stdout as tokens arrive; timings and errors go to stderr.
// Returns 0 on success, 2 for bad usage, 1 for other errors.
int RunGenerateCommand(int argc, char** argv);

}  // namespace kvgate::engine
