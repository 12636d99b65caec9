// Bucket validation and choice.
#include "graphs/buckets.h"

#include <set>

#include "runtime/error.h"

namespace dflash {

std::string Bucket::str() const {
  return "{seq " + std::to_string(seq) + ", anchors " + std::to_string(anchors) + ", batch " + std::to_string(batch) + "}";
}

void validate_buckets(const std::vector<Bucket>& buckets, int64_t block_size, const std::string& source) {
  DF_CHECK(!buckets.empty(), source << ": no [[buckets]] entries; add at least one, e.g.\n[[buckets]]\nseq = 512\n"
                                    << "anchors = 16\nbatch = 1");
  DF_CHECK(block_size >= 1, source << ": block size " << block_size << " must be at least 1");
  std::set<int64_t> seen;
  for (size_t i = 0; i < buckets.size(); ++i) {
    const Bucket& b = buckets[i];
    std::string at = source + ": [[buckets]] #" + std::to_string(i + 1) + " " + b.str();
    DF_CHECK(b.seq >= block_size, at << ": seq must be at least the block size " << block_size);
    DF_CHECK(b.seq % block_size == 0, at << ": seq " << b.seq << " is not a multiple of the block size "
                                         << block_size << "; use " << (b.seq / block_size + 1) * block_size);
    DF_CHECK(b.anchors >= 1, at << ": anchors must be at least 1");
    int64_t most = b.seq - block_size + 1;
    DF_CHECK(b.anchors <= most, at << ": " << b.anchors << " anchors, but a sequence of length " << b.seq
                                   << " has at most " << most << " anchor positions (p <= seq - block size); "
                                   << "lower anchors or raise seq");
    DF_CHECK(b.batch >= 1, at << ": batch must be at least 1");
    DF_CHECK(seen.insert(b.seq).second, at << ": another bucket already has seq " << b.seq
                                           << "; each bucket needs its own seq (merge or remove one)");
  }
}

int smallest_bucket_for(const std::vector<Bucket>& buckets, int64_t length) {
  int best = -1;
  for (size_t i = 0; i < buckets.size(); ++i)
    if (buckets[i].seq >= length && (best < 0 || buckets[i].seq < buckets[size_t(best)].seq)) best = int(i);
  return best;
}

OverflowPolicy parse_overflow_policy(const std::string& value, const std::string& key) {
  if (value == "truncate") return OverflowPolicy::truncate;
  if (value == "skip") return OverflowPolicy::skip;
  if (value == "error") return OverflowPolicy::error;
  DF_FAIL(key << " = \"" << value << "\": use \"truncate\", \"skip\" or \"error\"");
}

const char* overflow_policy_name(OverflowPolicy p) {
  switch (p) {
    case OverflowPolicy::truncate: return "truncate";
    case OverflowPolicy::skip: return "skip";
    case OverflowPolicy::error: return "error";
  }
  return "?";
}

}  // namespace dflash
