// What a typo in a config names: the path of the section it sits in and the nearest field the
// section has, for the pbtxt reader and the ds_config.json reader alike.
#pragma once

#include <google/protobuf/descriptor.h>

#include <string>
#include <vector>

namespace zerotrain::trainer {

// The candidate nearest to `name` ("overlap_com" -> "overlap_comm"): within an edit distance of
// a quarter of its length (at least 1), or one that `name` begins ("reduce_bucket" ->
// "reduce_bucket_size"); "" when none is close enough to be the one meant.
std::string NearestName(const std::vector<std::string>& candidates, const std::string& name);

// " (did you mean NAME?)" for NearestName's answer, "" when it has none; over the fields of `d`.
std::string DidYouMean(const std::vector<std::string>& candidates, const std::string& name);
std::string DidYouMean(const google::protobuf::Descriptor& d, const std::string& name);

// protobuf's text-format error for an unknown field (`Message type "zerotrain.X" has no field
// named "y".`) rewritten as "a.b.y: unknown field (did you mean z?)", the path taken from `root`
// (the first field path from it to a message of that type); any other error unchanged.
std::string ExplainTextFormatError(const google::protobuf::Descriptor& root,
                                   const std::string& error);

}  // namespace zerotrain::trainer
