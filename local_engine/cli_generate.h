// `kvgate generate`: run the built-in engine on one prompt from the command line.
#pragma once

namespace kvgate::engine {

// argv[0] is the command name; the options follow:
//   --model PATH [--chat] --prompt TEXT [--max-tokens N] [--temperature T] [--seed S] [--threads N]
//   [--top-k K] [--top-p P] [--min-p P] [--repeat-penalty R] [--stop STR]... [--ignore-eos]
//   [--verbose] (prints the prompt's token ids to stderr)
// Greedy by default. Streams the generated text to stdout as tokens arrive; timings and errors go
// to stderr. Returns 0 on success, 2 for bad usage, 1 for other errors.
int RunGenerateCommand(int argc, char** argv);

}  // namespace kvgate::engine
