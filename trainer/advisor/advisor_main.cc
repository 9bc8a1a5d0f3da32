// //trainer/advisor:advisor — prints the ZeRO memory estimate and recommendation for a model
// size and cluster shape, without building the model. Bad flags: one line, exit code 2.
#include <iostream>
#include <string>
#include <vector>

#include "trainer/advisor/advisor.h"
#include "trainer/advisor/advisor_flags.h"

int main(int argc, char** argv) {
  using namespace zerotrain::advisor;
  auto input = ParseAdvisorFlags(std::vector<std::string>(argv + 1, argv + argc));
  if (!input.ok()) {
    std::cerr << "advisor: " << input.status().message() << "\n";
    return 2;
  }
  if (AdvisorHelpRequested()) {
    std::cout << AdvisorUsage();
    return 0;
  }
  auto report = EstimateMemoryReport(*input);
  if (!report.ok()) {
    std::cerr << "advisor: " << report.status().message() << "\n";
    return 2;
  }
  std::cout << *report;
  return 0;
}
