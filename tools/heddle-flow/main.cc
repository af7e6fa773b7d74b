// File: tools/heddle-flow/main.cc
//
// heddle-flow: OptiFlow's command line. See flow_cli.h for the commands and exit codes.
#include <iostream>

#include "tools/heddle-flow/flow_cli.h"

int main(int argc, char** argv) {
  return heddle::flow::cli::Main(argc, argv, std::cout, std::cerr);
}
