// File: tools/heddlectl/main.cc
//
// heddlectl: the operator CLI for heddled. See cli.h for the command line and exit codes.
#include <iostream>

#include "tools/heddlectl/cli.h"

int main(int argc, char** argv) { return heddle::api::cli::Main(argc, argv, std::cout, std::cerr); }
