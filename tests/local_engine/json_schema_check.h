// Test-only: an independent JSON Schema check (the subset json_grammar.h supports), and a seeded
// generator of random schemas in that subset. The constrained decoder's outputs are checked
// against the former, never against the decoder's own grammar.
#pragma once

#include <random>
#include <string>

#include <nlohmann/json.hpp>

namespace kvgate::engine::testing {

// True when `value` matches `schema`; `root` resolves $ref. `why` says where it does not.
bool MatchesSchema(const nlohmann::json& value, const nlohmann::json& schema,
                   const nlohmann::json& root, std::string* why);

// A random schema in the supported subset; deterministic for a given generator state.
nlohmann::json RandomSchema(std::mt19937_64& rng);

}  // namespace kvgate::engine::testing
