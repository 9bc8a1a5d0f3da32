// FetchOrder: the order in which ZeRO stage 3 uses its parameter segments, recorded during the
// first iteration (one forward and its backward) and replayed afterwards. While an iteration
// follows the record, the segments needed next can be gathered ahead of use and a segment that
// will be used again soon can be kept; once it departs (another branch taken), it says so and
// the rest of that iteration fetches on demand. A departed iteration becomes the new record, and
// so does one that follows the record to its end and goes on (the record was an evaluation
// forward; this one has a backward too).
// Pure bookkeeping: no LibTorch, no communication.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace zerotrain::partition {

class FetchOrder {
 public:
  explicit FetchOrder(std::vector<int64_t> segment_numel);

  void BeginIteration();
  // `segment` is used now and the previous use was another segment. Returns false only for the
  // first use of an iteration that departs from the record.
  bool OnUse(int segment);
  // Ends the iteration: the first one becomes the record, and so does one that departed from it
  // or outgrew it; one that stopped early along the record (a forward without backward) leaves
  // it as it is.
  void EndIteration();

  // This iteration is following a record (prefetching and reuse decisions are meaningful).
  bool following() const { return following_; }
  // The recorded segments after the current position, nearest first, each once, while their
  // element counts add up to at most `budget_numel`.
  std::vector<int> Upcoming(int64_t budget_numel) const;
  // Elements of other segments used before `segment` is used again, along the record; -1 when it
  // is not used again this iteration or the order is not known.
  int64_t ReuseDistance(int segment) const;

  const std::vector<int>& recorded() const { return record_; }
  int64_t departures() const { return departures_; }  // iterations that left the record

 private:
  std::vector<int64_t> numel_;
  std::vector<int> record_;
  std::vector<int> current_;
  bool has_record_ = false;
  bool following_ = false;
  bool departed_ = false;
  bool extended_ = false;
  size_t pos_ = 0;  // the record's next expected use
  int64_t departures_ = 0;
};

}  // namespace zerotrain::partition
