// Anchor sampling, evaluation passes and micro-batch staging.
#include "data/anchors.h"

#include <algorithm>

#include "runtime/error.h"

namespace dflash {

namespace {

void check_anchor_args(const char* fn, int64_t N, int64_t block_size) {
  DF_CHECK(N >= 1, fn << ": N = " << N << " anchors per sequence; fix: use at least 1 (the bucket's anchors)");
  DF_CHECK(block_size >= 1, fn << ": block size " << block_size << "; fix: use at least 1 (drafter.block_size)");
}

}  // namespace

std::vector<int32_t> valid_anchor_positions(const Sequence& s, int64_t block_size) {
  DF_CHECK(block_size >= 1, "valid_anchor_positions: block size " << block_size
                                                                  << "; fix: use at least 1 (drafter.block_size)");
  std::vector<int32_t> out;
  for (int64_t p = 0; p <= s.length() - block_size; ++p)
    if (s.loss_mask[size_t(p)] == 1) out.push_back(int32_t(p));
  return out;
}

AnchorSet sample_anchors(const Sequence& s, int64_t N, int64_t block_size, std::mt19937_64& rng) {
  check_anchor_args("sample_anchors", N, block_size);
  std::vector<int32_t> valid = valid_anchor_positions(s, block_size);
  const size_t k = std::min(size_t(N), valid.size());
  for (size_t i = 0; i < k; ++i) std::swap(valid[i], valid[i + size_t(uniform_below(rng, valid.size() - i))]);
  std::sort(valid.begin(), valid.begin() + ptrdiff_t(k));
  AnchorSet a{std::vector<int32_t>(size_t(N), 0), std::vector<uint8_t>(size_t(N), 0)};
  std::copy(valid.begin(), valid.begin() + ptrdiff_t(k), a.anchors.begin());
  std::fill(a.keep.begin(), a.keep.begin() + ptrdiff_t(k), uint8_t(1));
  return a;
}

std::vector<AnchorSet> eval_anchor_passes(const Sequence& s, int64_t N, int64_t block_size) {
  check_anchor_args("eval_anchor_passes", N, block_size);
  const std::vector<int32_t> valid = valid_anchor_positions(s, block_size);
  std::vector<AnchorSet> passes;
  for (size_t first = 0; first < valid.size(); first += size_t(N)) {
    AnchorSet a{std::vector<int32_t>(size_t(N), 0), std::vector<uint8_t>(size_t(N), 0)};
    for (size_t j = 0; j < size_t(N) && first + j < valid.size(); ++j) {
      a.anchors[j] = valid[first + j];
      a.keep[j] = 1;
    }
    passes.push_back(std::move(a));
  }
  return passes;
}

int64_t fill_batch(std::span<const Sequence> sequences, std::span<const AnchorSet> anchors, const Bucket& bucket,
                   int64_t block_size, const BatchArrays& out) {
  const int64_t S = bucket.seq, N = bucket.anchors, B = bucket.batch;
  const std::string f = "fill_batch (bucket " + bucket.str() + ")";
  DF_CHECK(int64_t(sequences.size()) <= B && anchors.size() == sequences.size(),
           f << ": " << sequences.size() << " sequences and " << anchors.size() << " anchor sets; fix: pass at most "
             << B << " sequences and one anchor set for each");
  DF_CHECK(int64_t(out.input_ids.size()) == B * S && int64_t(out.loss_mask.size()) == B * S &&
               int64_t(out.anchors.size()) == B * N && int64_t(out.keep.size()) == B * N,
           f << ": output sizes input_ids " << out.input_ids.size() << ", loss_mask " << out.loss_mask.size()
             << ", anchors " << out.anchors.size() << ", keep " << out.keep.size() << "; fix: size them B*S = "
             << B * S << " and B*N = " << B * N);
  std::fill(out.input_ids.begin(), out.input_ids.end(), 0);
  std::fill(out.loss_mask.begin(), out.loss_mask.end(), 0);
  std::fill(out.anchors.begin(), out.anchors.end(), 0);
  std::fill(out.keep.begin(), out.keep.end(), 0);
  int64_t real_tokens = 0;
  for (size_t b = 0; b < sequences.size(); ++b) {
    const Sequence& s = sequences[b];
    const int64_t len = std::min(s.length(), S);
    const AnchorSet& a = anchors[b];
    DF_CHECK(int64_t(a.anchors.size()) == N && int64_t(a.keep.size()) == N,
             f << ": the anchor set of row " << b << " has " << a.anchors.size() << " anchors and " << a.keep.size()
               << " keep flags; fix: make both N = " << N);
    std::copy(s.input_ids.begin(), s.input_ids.begin() + len, out.input_ids.begin() + int64_t(b) * S);
    std::copy(s.loss_mask.begin(), s.loss_mask.begin() + len, out.loss_mask.begin() + int64_t(b) * S);
    for (int64_t j = 0; j < N; ++j) {
      const int32_t p = a.anchors[size_t(j)];
      if (a.keep[size_t(j)]) {
        DF_CHECK(p >= 0 && p <= len - block_size && s.loss_mask[size_t(p)] == 1,
                 f << ": row " << b << " keeps anchor " << p << ", which is not a valid anchor of the sequence "
                   << "staged with length " << len << " (needs p <= length - block size " << block_size
                   << " and loss_mask[p] = 1); fix: take the anchors from the sequence truncated to S");
        out.anchors[size_t(int64_t(b) * N + j)] = p;
        out.keep[size_t(int64_t(b) * N + j)] = 1;
      }
    }
    real_tokens += len;
  }
  return real_tokens;
}

int64_t fill_batch(std::span<const Sequence> sequences, const Bucket& bucket, int64_t block_size, std::mt19937_64& rng,
                   const BatchArrays& out) {
  std::vector<AnchorSet> anchors;
  for (const Sequence& s : sequences) {
    anchors.push_back(s.length() > bucket.seq ? sample_anchors(truncate_sequence(s, bucket.seq), bucket.anchors, block_size, rng)
                                              : sample_anchors(s, bucket.anchors, block_size, rng));
  }
  return fill_batch(sequences, anchors, bucket, block_size, out);
}

}  // namespace dflash
