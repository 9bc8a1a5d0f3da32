// Recommendation and report text. The candidates are walked fastest first (the order of
// EstimateModelStates), so the first that fits is the recommendation and the one before it says
// why nothing faster was chosen.
#include "trainer/advisor/advisor.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tools/status_macros.h"

namespace zerotrain::advisor {
namespace {

constexpr int kPreferenceCount = 7;  // the first seven estimates; the eighth is table-only

double Gib(int64_t bytes) { return static_cast<double>(bytes) / kGiB; }

std::string Count(int64_t n) {
  if (n >= 1'000'000'000) return absl::StrFormat("%.2fB", n / 1e9);
  if (n >= 1'000'000) return absl::StrFormat("%.1fM", n / 1e6);
  return absl::StrCat(n);
}

std::string Needs(const StageEstimate& e) {
  return absl::StrFormat("%.1f GiB per device and %.1f GiB per host", Gib(e.device_bytes),
                         Gib(e.host_bytes));
}

// Why `e` was passed over.
std::string TooBig(const AdvisorInput& in, const StageEstimate& e) {
  const double usable = (1 - in.activation_fraction) * in.device_memory_gib;
  std::string why;
  if (!e.fits_device) {
    why = absl::StrFormat(
        "more than the %.1f GiB usable per device (%.1f GiB less %.0f%% kept for "
        "activations)",
        usable, in.device_memory_gib, 100 * in.activation_fraction);
  }
  if (!e.fits_host) {
    absl::StrAppend(&why, why.empty() ? "" : " and ",
                    absl::StrFormat("more than the %.1f GiB of host memory", in.host_memory_gib));
  }
  return absl::StrCat(ConfigurationName(e.stage, e.offload), " needs ", Needs(e), ", ", why, ".\n");
}

}  // namespace

std::string ConfigurationName(int stage, Offload offload, bool nvme) {
  std::string name = absl::StrCat("ZeRO stage ", stage);
  const char* where = nvme ? "NVMe" : "CPU";
  if (offload == Offload::kOptimizer) absl::StrAppend(&name, " + optimizer offload to ", where);
  if (offload == Offload::kOptimizerAndParams) {
    absl::StrAppend(&name, " + optimizer and parameter offload to ", where);
  }
  return name;
}

absl::StatusOr<Recommendation> Recommend(const AdvisorInput& in) {
  ZT_ASSIGN_OR_RETURN(const std::vector<StageEstimate> rows, EstimateModelStates(in));
  const bool skip_unsharded_grads = in.prefer_larger_batches && in.gpus_per_node * in.nodes > 1;
  const StageEstimate* previous = nullptr;
  for (int i = 0; i < kPreferenceCount; ++i) {
    const StageEstimate& e = rows[i];
    if (skip_unsharded_grads && e.stage < 2) continue;
    if (!e.fits()) {
      previous = &e;
      continue;
    }
    Recommendation r;
    r.stage = e.stage;
    r.offload = e.offload;
    r.explanation = absl::StrCat("Recommendation: ", ConfigurationName(e.stage, e.offload), ".\n");
    if (previous != nullptr) {
      absl::StrAppend(&r.explanation, TooBig(in, *previous));
    } else if (skip_unsharded_grads) {
      absl::StrAppend(&r.explanation,
                      "Larger batches were asked for: stage 2 shards gradients as "
                      "well as optimizer states, leaving the most room for "
                      "activations without sharding parameters.\n");
    }
    const double left = in.device_memory_gib - Gib(e.device_bytes);
    absl::StrAppend(
        &r.explanation, ConfigurationName(e.stage, e.offload), " needs ", Needs(e),
        absl::StrFormat(", leaving %.1f GiB per device for activations", left),
        e.stage == 0 ? "; nothing is sharded, so only gradients are all-reduced.\n" : ".\n");
    return r;
  }
  // Nothing fits in CPU memory; the last candidate (stage 3, everything offloaded) says whether
  // the device can at least hold the largest layer, in which case NVMe takes the host's place.
  const StageEstimate& last = rows[kPreferenceCount - 1];
  Recommendation r;
  r.stage = 3;
  r.offload = Offload::kOptimizerAndParams;
  r.nvme = last.fits_device;
  r.fits = last.fits_device;
  if (r.fits) {
    r.explanation = absl::StrCat(
        "Recommendation: ", ConfigurationName(3, r.offload, true), ".\n", TooBig(in, last),
        absl::StrFormat("With NVMe the host keeps only buffers; the device "
                        "holds %.1f GiB (the largest layer, gathered).\n",
                        Gib(last.device_bytes)));
  } else {
    r.explanation = absl::StrCat("Nothing fits: ", TooBig(in, last),
                                 "The largest layer alone does not fit one device; add device "
                                 "memory or split that layer.\n");
  }
  return r;
}

std::string FormatEstimateTable(const AdvisorInput& in, const std::vector<StageEstimate>& rows) {
  std::string out = absl::StrFormat("%-5s  %-22s  %14s  %12s  %s\n", "stage", "offload",
                                    "GiB per device", "GiB per host", "fits");
  std::vector<StageEstimate> sorted = rows;  // by stage for reading; rows are in advice order
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const StageEstimate& a, const StageEstimate& b) {
                     return a.stage != b.stage ? a.stage < b.stage : a.offload < b.offload;
                   });
  for (const StageEstimate& e : sorted) {
    const char* fits = e.fits()                         ? "yes"
                       : !e.fits_device && !e.fits_host ? "no (device, host)"
                       : !e.fits_device                 ? "no (device)"
                                                        : "no (host)";
    absl::StrAppendFormat(&out, "%-5d  %-22s  %14.2f  %12.2f  %s\n", e.stage,
                          OffloadName(e.offload), Gib(e.device_bytes), Gib(e.host_bytes), fits);
  }
  if (in.host_memory_gib == 0) out += "(host memory not given: host fit not checked)\n";
  return out;
}

absl::StatusOr<std::string> EstimateMemoryReport(const AdvisorInput& in) {
  ZT_ASSIGN_OR_RETURN(const std::vector<StageEstimate> rows, EstimateModelStates(in));
  ZT_ASSIGN_OR_RETURN(const Recommendation r, Recommend(in));
  std::string out = absl::StrFormat(
      "Model states (params, gradients, optimizer) for %s params, largest layer %s;\n"
      "%d node(s) x %d device(s) with %.1f GiB each (%.0f%% kept for activations)",
      Count(in.total_params), Count(in.largest_layer_params), in.nodes, in.gpus_per_node,
      in.device_memory_gib, 100 * in.activation_fraction);
  if (in.host_memory_gib > 0)
    absl::StrAppendFormat(&out, ", %.1f GiB host memory per node", in.host_memory_gib);
  if (in.bf16_master_weights) {
    absl::StrAppendFormat(&out, ";\nbf16 master weights%s: %d bytes per parameter of sharded state",
                          in.bf16_optimizer_states ? " and optimizer states" : "",
                          ShardedStateBytes(in));
  }
  if (in.zero_hpz_partition_size > 1) {
    absl::StrAppendFormat(&out,
                          ";\nstage 3 with ZeRO++ hpZ: a secondary copy of the parameters over %d "
                          "devices, 2/%d bytes per parameter more per device",
                          in.zero_hpz_partition_size, in.zero_hpz_partition_size);
  }
  absl::StrAppend(&out, ".\n\n", FormatEstimateTable(in, rows), "\n", r.explanation);
  return out;
}

}  // namespace zerotrain::advisor
