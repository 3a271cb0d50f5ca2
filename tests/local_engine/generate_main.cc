// Test driver for RunGenerateCommand (the gateway binary wires it as `kvgate generate`).
#include "local_engine/cli_generate.h"

int main(int argc, char** argv) { return kvgate::engine::RunGenerateCommand(argc, argv); }
