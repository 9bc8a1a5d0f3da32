// Process-per-rank test runner (see spawn_ranks.h).
#include "tests/spawn_ranks.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

extern char** environ;

namespace zerotrain::testing {
namespace {

constexpr char kRankVar[] = "ZT_SPAWN_RANK";
constexpr char kDirVar[] = "ZT_SPAWN_DIR";

int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

std::string ResultPath(const std::string& dir, int rank) {
  return absl::StrCat(dir, "/rank", rank);
}

// Child side: run fn, write "<code> <seconds>\n<payload or message>", leave without gtest teardown.
[[noreturn]] void RunChild(int rank, const std::string& dir, const RankFn& fn) {
  prctl(PR_SET_PDEATHSIG,
        SIGKILL);  // a killed test (e.g. by Bazel's timeout) takes its ranks along
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::string> result = fn(rank);
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  {
    std::ofstream out(ResultPath(dir, rank) + ".tmp");
    out << static_cast<int>(result.status().code()) << " " << took.count() << "\n"
        << (result.ok() ? *result : std::string(result.status().message()));
  }
  std::rename((ResultPath(dir, rank) + ".tmp").c_str(), ResultPath(dir, rank).c_str());
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(0);
}

std::vector<std::string> ChildEnv(int rank, int world, int port, const std::string& dir,
                                  const SpawnOptions& options) {
  std::map<std::string, std::string> vars;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv(*e);
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) vars[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  // A child exits without gtest's teardown: keep it from touching Bazel's test result files.
  for (const char* v : {"TEST_PREMATURE_EXIT_FILE", "XML_OUTPUT_FILE", "GTEST_OUTPUT",
                        "GTEST_SHARD_INDEX", "GTEST_TOTAL_SHARDS", "TEST_SHARD_STATUS_FILE"}) {
    vars.erase(v);
  }
  vars["RANK"] = std::to_string(rank);
  vars["LOCAL_RANK"] = std::to_string(rank);
  vars["WORLD_SIZE"] = std::to_string(world);
  vars["MASTER_ADDR"] = "127.0.0.1";
  vars["MASTER_PORT"] = std::to_string(port);
  // Like torchrun: one intra-op thread per rank, or ranks' spinning OpenMP threads starve each
  // other's network threads on a machine with few cores.
  vars.emplace("OMP_NUM_THREADS", "1");
  vars[kRankVar] = std::to_string(rank);
  vars[kDirVar] = dir;
  for (const auto& [k, v] : options.env) vars[k] = v;
  std::vector<std::string> out;
  for (const auto& [k, v] : vars) out.push_back(k + "=" + v);
  return out;
}

// The outcome of a rank that wrote no result.
RankOutcome Unfinished(int rank, absl::Status status) {
  RankOutcome outcome;
  outcome.rank = rank;
  outcome.status = std::move(status);
  return outcome;
}

RankOutcome ReadOutcome(int rank, const std::string& dir, int wait_status) {
  RankOutcome o;
  o.rank = rank;
  std::ifstream in(ResultPath(dir, rank));
  int code = 0;
  if (in >> code >> o.seconds) {
    std::string rest((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!rest.empty() && rest[0] == '\n') rest.erase(0, 1);
    if (code == 0) {
      o.payload = rest;
    } else {
      o.status = absl::Status(static_cast<absl::StatusCode>(code), rest);
    }
  } else if (WIFSIGNALED(wait_status)) {
    o.status = absl::AbortedError(
        absl::StrCat("rank ", rank, " died from signal ", WTERMSIG(wait_status)));
  } else {
    o.status = absl::AbortedError(absl::StrCat("rank ", rank, " exited with code ",
                                               WEXITSTATUS(wait_status), " and no result"));
  }
  return o;
}

}  // namespace

std::vector<RankOutcome> SpawnRanks(int world_size, const RankFn& fn, const SpawnOptions& options) {
  if (const char* r = std::getenv(kRankVar)) {
    int rank = 0;
    if (absl::SimpleAtoi(r, &rank)) RunChild(rank, std::getenv(kDirVar), fn);
  }
  const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string filter =
      absl::StrCat("--gtest_filter=", test->test_suite_name(), ".", test->name());
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string dir_template = absl::StrCat(tmp ? tmp : "/tmp", "/spawn_ranks.XXXXXX");
  if (mkdtemp(dir_template.data()) == nullptr) {
    ADD_FAILURE() << "SpawnRanks: cannot create a temporary folder under " << dir_template;
    std::vector<RankOutcome> none(world_size);
    for (int r = 0; r < world_size; ++r)
      none[r] = Unfinished(r, absl::InternalError("no temporary folder"));
    return none;
  }
  const std::string dir = dir_template;
  const int port = FreePort();

  std::vector<pid_t> pids(world_size, -1);
  for (int rank = 0; rank < world_size; ++rank) {
    std::vector<std::string> env = ChildEnv(rank, world_size, port, dir, options);
    std::vector<char*> envp;
    for (std::string& s : env) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::string exe = "/proc/self/exe";
    std::string arg = filter;
    char* argv[] = {exe.data(), arg.data(), nullptr};
    if (posix_spawn(&pids[rank], "/proc/self/exe", nullptr, nullptr, argv, envp.data()) != 0) {
      pids[rank] = -1;
    }
  }
  std::vector<RankOutcome> outcomes(world_size);
  std::vector<bool> finished(world_size, false);
  const auto deadline = std::chrono::steady_clock::now() + options.deadline;
  int left = world_size;
  while (left > 0) {
    for (int rank = 0; rank < world_size; ++rank) {
      if (finished[rank]) continue;
      int status = 0;
      if (pids[rank] < 0 || waitpid(pids[rank], &status, WNOHANG) == pids[rank]) {
        outcomes[rank] = pids[rank] < 0 ? Unfinished(rank, absl::InternalError("spawn failed"))
                                        : ReadOutcome(rank, dir, status);
        finished[rank] = true;
        --left;
      }
    }
    const bool awaited_done =
        !options.awaited_ranks.empty() &&
        std::all_of(options.awaited_ranks.begin(), options.awaited_ranks.end(),
                    [&](int rank) { return finished.at(rank); });
    if (left > 0 && (awaited_done || std::chrono::steady_clock::now() > deadline)) {
      for (int rank = 0; rank < world_size; ++rank) {
        if (finished[rank]) continue;
        kill(pids[rank], SIGKILL);
        waitpid(pids[rank], nullptr, 0);
        outcomes[rank] =
            Unfinished(rank, awaited_done ? absl::CancelledError(absl::StrCat(
                                                "rank ", rank,
                                                " still running when the awaited ranks had "
                                                "ended; killed"))
                                          : absl::DeadlineExceededError(absl::StrCat(
                                                "rank ", rank, " still running after ",
                                                options.deadline.count(), " ms; killed")));
        finished[rank] = true;
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return outcomes;
}

std::string FormatOutcomes(const std::vector<RankOutcome>& outcomes) {
  std::ostringstream out;
  for (const RankOutcome& o : outcomes) {
    out << "rank " << o.rank << ": " << o.status.ToString() << "\n";
  }
  return out.str();
}

}  // namespace zerotrain::testing
