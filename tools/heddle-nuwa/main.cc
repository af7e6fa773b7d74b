// File: tools/heddle-nuwa/main.cc
//
// heddle-nuwa: the Nüwa compiler's command line. See nuwa_cli.h for the commands and exit codes.
#include <iostream>

#include "tools/heddle-nuwa/nuwa_cli.h"

int main(int argc, char** argv) {
  return heddle::nuwa::cli::Main(argc, argv, std::cout, std::cerr);
}
