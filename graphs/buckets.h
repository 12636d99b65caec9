// Sequence-length buckets: the fixed shapes recorded at startup. Adding one is a config edit.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace dflash {

struct Bucket {
  int64_t seq = 0;      // S: padded sequence length
  int64_t anchors = 0;  // N: anchors (draft blocks) per sequence
  int64_t batch = 0;    // B: sequences per micro-batch
  std::string str() const;
};

// Refuses an empty list, duplicate seq, seq not a multiple of block_size, more anchors than a
// sequence of that length can have (seq - block_size + 1), anchors or batch < 1. The message
// names the entry ([[buckets]] #i in `source`) and the fix.
void validate_buckets(const std::vector<Bucket>& buckets, int64_t block_size, const std::string& source);

// The index of the smallest bucket (by seq) that holds a sequence of this length; -1 when the
// sequence is longer than every bucket.
int smallest_bucket_for(const std::vector<Bucket>& buckets, int64_t length);

// What happens to a sequence longer than the largest bucket.
enum class OverflowPolicy { truncate, skip, error };
OverflowPolicy parse_overflow_policy(const std::string& value, const std::string& key);
const char* overflow_policy_name(OverflowPolicy p);

}  // namespace dflash
