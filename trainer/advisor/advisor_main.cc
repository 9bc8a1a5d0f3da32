// //trainer/advisor:advisor — prints the ZeRO memory estimate and recommendation for a model
// size and cluster shape, without building the model. Exit code 2 on bad flags.
#include <iostream>
#include <string>
#include <vector>

#include "trainer/advisor/advisor.h"
#include "trainer/advisor/advisor_flags.h"

int main(int argc, char** argv) {
  using namespace zerotrain::advisor;
  std::vector<std::string> args(argv + 1, argv + argc);
  for (const std::string& a : args) {
    if (a == "--help" || a == "-h") {
      std::cout << AdvisorUsage();
      return 0;
    }
  }
  auto input = ParseAdvisorFlags(args);
  if (!input.ok()) {
    std::cerr << "advisor: " << input.status().message() << "\n" << AdvisorUsage();
    return 2;
  }
  auto report = EstimateMemoryReport(*input);
  if (!report.ok()) {
    std::cerr << "advisor: " << report.status().message() << "\n";
    return 2;
  }
  std::cout << *report;
  return 0;
}
