// evaluate(): group (sequence, anchor pass) rows by bucket, run them B at a time, sum in order.
#include "train/eval.h"

#include "data/anchors.h"

namespace dflash {

nlohmann::json EvalResult::to_json() const {
  return {{"loss", loss}, {"accuracy", accuracy}, {"tau", tau}, {"blocks", blocks}, {"tokens", tokens},
          {"sequences", sequences}, {"skipped", skipped}, {"skipped_no_anchor", no_anchor}};
}

EvalResult evaluate(Replica& replica, const Dataset& data, OverflowPolicy overflow,
                    const std::function<void(int64_t, int64_t)>& progress) {
  const ReplicaOptions& o = replica.options();
  const std::vector<Bucket>& buckets = o.buckets;
  const int64_t bs = o.spec.block_size;
  int64_t largest = 0;
  for (const Bucket& b : buckets) largest = std::max(largest, b.seq);
  // Rows per bucket, in data order: (sequence, its anchors for one pass).
  struct Row {
    int64_t seq;
    AnchorSet anchors;
  };
  std::vector<std::vector<Row>> rows(buckets.size());
  EvalResult r;
  for (int64_t i = 0; i < data.size(); ++i) {
    int64_t len = data.length(i);
    if (len > largest) {
      if (overflow == OverflowPolicy::skip) {
        ++r.skipped;
        continue;
      }
      DF_CHECK(overflow == OverflowPolicy::truncate,
               data.source().string() << ": eval sequence " << i << " has " << len
                                      << " tokens, more than the largest bucket (" << largest
                                      << "); add a larger [[buckets]] entry or set data.overflow = \"truncate\" or \"skip\"");
      len = largest;
    }
    int b = smallest_bucket_for(buckets, len);
    Sequence s = truncate_sequence(data.get(i), len);
    std::vector<AnchorSet> passes = eval_anchor_passes(s, buckets[size_t(b)].anchors, bs);
    if (passes.empty()) {  // no valid anchor: nothing to measure
      ++r.skipped;
      ++r.no_anchor;
      continue;
    }
    for (AnchorSet& a : passes) rows[size_t(b)].push_back({i, std::move(a)});
    ++r.sequences;
  }
  DF_CHECK(r.sequences > 0, data.source().string()
                                << ": no eval sequence has a valid anchor (" << data.size() << " sequences, "
                                << r.no_anchor << " without a valid anchor, " << r.skipped - r.no_anchor
                                << " longer than the largest bucket and skipped), so there is nothing to measure; "
                                << "fix: mark the response tokens with loss_mask = 1, use longer sequences, or lower "
                                << "drafter.block_size");
  int64_t total = 0, done = 0;
  for (size_t b = 0; b < buckets.size(); ++b) total += (int64_t(rows[b].size()) + buckets[b].batch - 1) / buckets[b].batch;
  double sums[7] = {};
  HostBatch host;
  StepResult res;
  for (size_t b = 0; b < buckets.size(); ++b) {
    const Bucket& bucket = buckets[b];
    for (size_t first = 0; first < rows[b].size(); first += size_t(bucket.batch)) {
      size_t n = std::min(rows[b].size() - first, size_t(bucket.batch));
      std::vector<Sequence> seqs;
      std::vector<AnchorSet> anchors;
      for (size_t k = 0; k < n; ++k) {
        const Row& row = rows[b][first + k];
        seqs.push_back(truncate_sequence(data.get(row.seq), bucket.seq));
        anchors.push_back(row.anchors);
      }
      host.resize(bucket, 0, false);
      fill_batch(seqs, anchors, bucket, bs, {host.input_ids, host.loss_mask, host.anchors, host.keep});
      BucketStep& step = replica.eval_step(b);
      {
        ContextScope scope(replica.context());
        step.stage(host);
      }
      replica.run_eval(b);
      {
        ContextScope scope(replica.context());
        step.read_result(res);
      }
      for (int k = 0; k < 7; ++k) sums[k] += res.sums[k];
      if (progress) progress(++done, total);
    }
  }
  r.loss = sums[0] / (sums[1] + 1e-6);
  r.accuracy = sums[2] / (sums[3] + 1e-6);
  r.tau = sums[5] > 0 ? sums[4] / sums[5] : 0.0;
  r.blocks = int64_t(sums[5]);
  r.tokens = int64_t(sums[6]);
  return r;
}

}  // namespace dflash
