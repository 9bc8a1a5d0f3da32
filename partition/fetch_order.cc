// The recorded use order of stage 3's parameter segments (see fetch_order.h).
#include "partition/fetch_order.h"

#include <algorithm>
#include <utility>

namespace zerotrain::partition {

FetchOrder::FetchOrder(std::vector<int64_t> segment_numel) : numel_(std::move(segment_numel)) {}

void FetchOrder::BeginIteration() {
  current_.clear();
  pos_ = 0;
  following_ = has_record_;
  departed_ = false;
  extended_ = false;
}

bool FetchOrder::OnUse(int segment) {
  current_.push_back(segment);
  if (!following_) return true;
  if (pos_ < record_.size() && record_[pos_] == segment) {
    ++pos_;
    return true;
  }
  if (pos_ == record_.size()) {
    // Past the end of a record taken from a shorter iteration (a forward without backward):
    // nothing to compare with, so this one becomes the record, without complaint.
    following_ = false;
    extended_ = true;
    return true;
  }
  following_ = false;
  departed_ = true;
  ++departures_;
  return false;
}

void FetchOrder::EndIteration() {
  if ((!has_record_ || departed_ || extended_) && !current_.empty()) {
    record_ = current_;
    has_record_ = true;
  }
  current_.clear();
  following_ = false;
}

std::vector<int> FetchOrder::Upcoming(int64_t budget_numel) const {
  std::vector<int> out;
  if (!following_) return out;
  int64_t sum = 0;
  for (size_t i = pos_; i < record_.size(); ++i) {
    const int s = record_[i];
    if (std::find(out.begin(), out.end(), s) != out.end()) continue;
    if (sum + numel_[s] > budget_numel) break;
    sum += numel_[s];
    out.push_back(s);
  }
  return out;
}

int64_t FetchOrder::ReuseDistance(int segment) const {
  if (!following_) return -1;
  int64_t distance = 0;
  for (size_t i = pos_; i < record_.size(); ++i) {
    if (record_[i] == segment) return distance;
    distance += numel_[record_[i]];
  }
  return -1;
}

}  // namespace zerotrain::partition
