// spillway-worker: the headless engine process. All logic lives in worker/commands.*.
#include <iostream>

#include "worker/commands.h"

int main(int argc, char** argv) {
  std::ios::sync_with_stdio(false);
  return spillway::worker::run_worker({argv + 1, argv + argc}, {std::cin, std::cout, std::cerr});
}
