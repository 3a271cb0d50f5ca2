// `kvgate sigv4-sign` (sigv4_command.cc).
#pragma once

namespace kvgate::gateway {

// Reads one request as JSON from stdin, writes its SigV4 headers as JSON to stdout; the exit
// status is 0, or 2 for bad input.
int RunSigV4SignCommand();

}  // namespace kvgate::gateway
