// RendezvousFromEnv reads torchrun, Open MPI and Slurm variables and names what is wrong.
#include "comm/rendezvous.h"

#include <map>
#include <string>

#include "comm/store_address.h"
#include "gtest/gtest.h"

namespace zerotrain::comm {
namespace {

absl::StatusOr<RendezvousInfo> From(const std::map<std::string, std::string>& vars) {
  return RendezvousFromEnv([&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

TEST(Rendezvous, Torchrun) {
  auto info = From({{"RANK", "3"},
                    {"WORLD_SIZE", "8"},
                    {"LOCAL_RANK", "1"},
                    {"MASTER_ADDR", "10.0.0.1"},
                    {"MASTER_PORT", "29500"}});
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->rank, 3);
  EXPECT_EQ(info->world_size, 8);
  EXPECT_EQ(info->local_rank, 1);
  EXPECT_EQ(info->master_addr, "10.0.0.1");
  EXPECT_EQ(info->master_port, 29500);
  EXPECT_EQ(info->source, "torchrun");
}

TEST(Rendezvous, OpenMpiAndSlurm) {
  auto mpi = From({{"OMPI_COMM_WORLD_RANK", "2"},
                   {"OMPI_COMM_WORLD_SIZE", "4"},
                   {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                   {"MASTER_ADDR", "h"},
                   {"MASTER_PORT", "1234"}});
  ASSERT_TRUE(mpi.ok()) << mpi.status();
  EXPECT_EQ(mpi->source, "openmpi");
  EXPECT_EQ(mpi->rank, 2);
  EXPECT_EQ(mpi->local_rank, 0);
  auto slurm = From({{"SLURM_PROCID", "5"},
                     {"SLURM_NTASKS", "6"},
                     {"SLURM_LOCALID", "1"},
                     {"MASTER_ADDR", "h"},
                     {"MASTER_PORT", "1234"}});
  ASSERT_TRUE(slurm.ok()) << slurm.status();
  EXPECT_EQ(slurm->source, "slurm");
  EXPECT_EQ(slurm->world_size, 6);
  EXPECT_EQ(slurm->local_rank, 1);
}

TEST(Rendezvous, TorchrunVariablesWinOverSlurm) {
  auto info = From({{"RANK", "1"},
                    {"WORLD_SIZE", "2"},
                    {"SLURM_PROCID", "0"},
                    {"SLURM_NTASKS", "1"},
                    {"MASTER_ADDR", "h"},
                    {"MASTER_PORT", "1"}});
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->source, "torchrun");
  EXPECT_EQ(info->rank, 1);
  EXPECT_EQ(info->local_rank, 1);  // LOCAL_RANK absent: same as the rank
}

// Our launcher's id wins, then torchrun's --rdzv_id, then Slurm's job and step.
TEST(Rendezvous, JobIdComesFromTheLauncherTorchrunOrSlurm) {
  const std::map<std::string, std::string> place = {
      {"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}};
  auto with = [&](std::map<std::string, std::string> extra) {
    extra.insert(place.begin(), place.end());
    auto info = From(extra);
    EXPECT_TRUE(info.ok()) << info.status();
    return info.ok() ? info->job_id : "<error>";
  };
  EXPECT_EQ(with({}), "");
  EXPECT_EQ(with({{"SLURM_JOB_ID", "812"}}), "812");
  EXPECT_EQ(with({{"SLURM_JOB_ID", "812"}, {"SLURM_STEP_ID", "3"}}), "812.3");
  EXPECT_EQ(with({{"SLURM_JOB_ID", "812"}, {"TORCHELASTIC_RUN_ID", "rdzv7"}}), "rdzv7");
  EXPECT_EQ(with({{"ZT_JOB_ID", "host-1-ab"}, {"TORCHELASTIC_RUN_ID", "rdzv7"}}), "host-1-ab");
}

// torchrun's agent hosts the store and keeps it across restarts: each attempt gets its own prefix.
TEST(Rendezvous, TorchrunAgentStoreAndAttempt) {
  std::map<std::string, std::string> vars = {{"RANK", "0"},
                                             {"WORLD_SIZE", "2"},
                                             {"MASTER_ADDR", "h"},
                                             {"MASTER_PORT", "29500"},
                                             {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                                             {"TORCHELASTIC_RESTART_COUNT", "2"}};
  auto info = From(vars);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_TRUE(info->store_hosted_by_launcher);
  EXPECT_EQ(info->restart_count, 2);
  EXPECT_EQ(info->store_prefix, "zt/attempt2/");
  vars["TORCHELASTIC_USE_AGENT_STORE"] = "False";
  info = From(vars);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_FALSE(info->store_hosted_by_launcher);
  EXPECT_EQ(info->store_prefix, "");
  vars["TORCHELASTIC_RESTART_COUNT"] = "-1";
  EXPECT_FALSE(From(vars).ok());
}

TEST(StoreAddress, FirstSlurmHostKeepsPaddingAndStopsAtTheFirstEntry) {
  EXPECT_EQ(*FirstSlurmHost("node[07-09,12],gpu3"), "node07");
  EXPECT_EQ(*FirstSlurmHost("gpu3,node[1-2]"), "gpu3");
  EXPECT_EQ(*FirstSlurmHost("rack[2-3]-n[010-011]"), "rack2-n010");
  EXPECT_EQ(*FirstSlurmHost("localhost"), "localhost");
  EXPECT_FALSE(FirstSlurmHost("node[1-").ok());
  EXPECT_FALSE(FirstSlurmHost("node[a-b]").ok());
  EXPECT_FALSE(FirstSlurmHost("").ok());
}

// srun and mpirun users set no MASTER_ADDR/MASTER_PORT: both come from the launcher's own.
TEST(Rendezvous, SlurmAndOpenMpiDeriveTheStore) {
  auto one_node = From({{"SLURM_PROCID", "1"},
                        {"SLURM_NTASKS", "2"},
                        {"SLURM_STEP_NUM_NODES", "1"},
                        {"SLURM_STEP_NODELIST", "n1"},
                        {"SLURM_JOB_ID", "40"},
                        {"SLURM_STEP_ID", "0"}});
  ASSERT_TRUE(one_node.ok()) << one_node.status();
  EXPECT_EQ(one_node->master_addr, "127.0.0.1");
  EXPECT_EQ(one_node->master_port, 15000 + 40 * 31);
  auto next_step = From({{"SLURM_PROCID", "1"},
                         {"SLURM_NTASKS", "2"},
                         {"SLURM_STEP_NUM_NODES", "1"},
                         {"SLURM_JOB_ID", "40"},
                         {"SLURM_STEP_ID", "1"}});
  ASSERT_TRUE(next_step.ok()) << next_step.status();
  EXPECT_NE(next_step->master_port, one_node->master_port);
  auto two_nodes = From({{"SLURM_PROCID", "3"},
                         {"SLURM_NTASKS", "4"},
                         {"SLURM_STEP_NUM_NODES", "2"},
                         {"SLURM_STEP_NODELIST", "cn[08-09]"},
                         {"SLURM_JOB_ID", "999999"},
                         {"MASTER_PORT", "2222"}});
  ASSERT_TRUE(two_nodes.ok()) << two_nodes.status();
  EXPECT_EQ(two_nodes->master_addr, "cn08");
  EXPECT_EQ(two_nodes->master_port, 2222);
  auto mpi = From({{"OMPI_COMM_WORLD_RANK", "1"},
                   {"OMPI_COMM_WORLD_SIZE", "2"},
                   {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                   {"OMPI_MCA_orte_num_nodes", "1"},
                   {"OMPI_MCA_ess_base_jobid", "368508929"}});
  ASSERT_TRUE(mpi.ok()) << mpi.status();
  EXPECT_EQ(mpi->master_addr, "127.0.0.1");
  EXPECT_EQ(mpi->master_port, 15000 + static_cast<int>((368508929ull * 31) % 17000));
  EXPECT_EQ(mpi->job_id, "openmpi-368508929");
  for (const auto& info : {*one_node, *next_step, *two_nodes, *mpi}) {
    EXPECT_GE(info.master_port, 1024);
    EXPECT_LT(info.master_port, 32768);
  }
}

void ExpectError(const std::map<std::string, std::string>& vars, const std::string& needle) {
  auto info = From(vars);
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(info.status().message().find(needle), std::string::npos) << info.status();
}

TEST(Rendezvous, ErrorsNameTheVariableAndValue) {
  ExpectError({}, "none of RANK/WORLD_SIZE, OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE");
  ExpectError({{"RANK", "0"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}}, "WORLD_SIZE is not set");
  ExpectError({{"RANK", "x"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}},
              "RANK='x' is not an integer");
  ExpectError({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}},
              "RANK=2 is not below WORLD_SIZE=2");
  ExpectError({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}}, "MASTER_ADDR is not set");
  ExpectError({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}, "MASTER_PORT is not set");
  // Open MPI across nodes: where rank 0 runs is not in its variables.
  ExpectError({{"OMPI_COMM_WORLD_RANK", "0"},
               {"OMPI_COMM_WORLD_SIZE", "4"},
               {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
               {"OMPI_MCA_orte_num_nodes", "2"},
               {"OMPI_MCA_ess_base_jobid", "7"}},
              "set it to rank 0's host for every rank (mpirun -x MASTER_ADDR=HOST)");
  ExpectError({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_STEP_NUM_NODES", "2"}},
              "no SLURM_STEP_NODELIST or SLURM_JOB_NODELIST");
  ExpectError({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_STEP_NUM_NODES", "1"}},
              "MASTER_PORT is not set and slurm names no job id");
  ExpectError({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}},
              "MASTER_PORT='70000' is not an integer in [1, 65535]");
  ExpectError({{"RANK", "0"},
               {"WORLD_SIZE", "2"},
               {"LOCAL_RANK", "5"},
               {"MASTER_ADDR", "h"},
               {"MASTER_PORT", "1"}},
              "LOCAL_RANK='5'");
}

}  // namespace
}  // namespace zerotrain::comm
