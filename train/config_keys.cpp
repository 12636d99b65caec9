// The config's keys as data, and the text helpers of its messages (see train/config_keys.h).
#include "train/config_keys.h"

#include <algorithm>
#include <charconv>
#include <string>

namespace dflash {
namespace config_detail {

// clang-format off
#define DF_FIELD(member, kind) Field{#member, Kind::kind, [](Config& c) -> void* { return &c.member; }}
// clang-format on

const std::vector<Field>& fields() {
  static const std::vector<Field> all = {
      DF_FIELD(job.name, text),
      DF_FIELD(job.dump_folder, path),
      DF_FIELD(job.seed, seed),
      DF_FIELD(target.path, path),
      DF_FIELD(target.layer_ids, integer_list),
      DF_FIELD(target.synthetic.enabled, boolean),
      DF_FIELD(target.synthetic.architecture, text),
      DF_FIELD(target.synthetic.vocab_size, integer),
      DF_FIELD(target.synthetic.hidden_size, integer),
      DF_FIELD(target.synthetic.intermediate_size, integer),
      DF_FIELD(target.synthetic.num_hidden_layers, integer),
      DF_FIELD(target.synthetic.num_attention_heads, integer),
      DF_FIELD(target.synthetic.num_key_value_heads, integer),
      DF_FIELD(target.synthetic.head_dim, integer),
      DF_FIELD(target.synthetic.rope_theta, number),
      DF_FIELD(target.synthetic.init_std, number),
      DF_FIELD(target.synthetic.seed, seed),
      DF_FIELD(drafter.num_hidden_layers, integer),
      DF_FIELD(drafter.intermediate_size, integer),
      DF_FIELD(drafter.num_attention_heads, integer),
      DF_FIELD(drafter.num_key_value_heads, integer),
      DF_FIELD(drafter.head_dim, integer),
      DF_FIELD(drafter.block_size, integer),
      DF_FIELD(drafter.mask_token_id, optional_integer),
      DF_FIELD(drafter.loss_decay_gamma, number),
      DF_FIELD(drafter.rms_norm_eps, number),
      DF_FIELD(drafter.rope_theta, number),
      DF_FIELD(drafter.init_std, number),
      DF_FIELD(drafter.init, path),
      DF_FIELD(data.train, path),
      DF_FIELD(data.eval, path),
      DF_FIELD(data.shards, path),
      DF_FIELD(data.mode, text),
      DF_FIELD(data.hidden, path),
      DF_FIELD(data.overflow, text),
      DF_FIELD(data.shuffle_seed, seed),
      DF_FIELD(data.allow_changed, boolean),
      DF_FIELD(data.synthetic.enabled, boolean),
      DF_FIELD(data.synthetic.train_sequences, integer),
      DF_FIELD(data.synthetic.eval_sequences, integer),
      DF_FIELD(data.synthetic.prompt_length, integer),
      DF_FIELD(data.synthetic.min_length, integer),
      DF_FIELD(data.synthetic.max_length, integer),
      DF_FIELD(data.synthetic.temperature, number),
      DF_FIELD(data.synthetic.seed, seed),
      DF_FIELD(training.steps, integer),
      DF_FIELD(training.lr, number),
      DF_FIELD(training.min_lr_ratio, number),
      DF_FIELD(training.warmup_ratio, number),
      DF_FIELD(training.beta1, number),
      DF_FIELD(training.beta2, number),
      DF_FIELD(training.eps, number),
      DF_FIELD(training.weight_decay, number),
      DF_FIELD(training.max_grad_norm, number),
      DF_FIELD(training.grad_accum, integer),
      DF_FIELD(training.checkpointing, boolean),
      DF_FIELD(training.eval_every, integer),
      DF_FIELD(training.chunk_rows, integer),
      DF_FIELD(eval.spec_prompts, path),
      DF_FIELD(eval.spec_every, integer),
      DF_FIELD(eval.spec_max_new_tokens, integer),
      DF_FIELD(eval.spec_stop_token_ids, integer_list),
      DF_FIELD(eval.spec_ignore_eos, boolean),
      DF_FIELD(eval.spec_prefill_chunk, integer),
      DF_FIELD(eval.spec_temperature, number),
      DF_FIELD(eval.spec_top_p, number),
      DF_FIELD(eval.spec_top_k, integer),
      DF_FIELD(eval.spec_seed, seed),
      DF_FIELD(generate.max_new_tokens, integer),
      DF_FIELD(generate.batch, integer),
      DF_FIELD(generate.max_length, integer),
      DF_FIELD(generate.prefill_chunk, integer),
      DF_FIELD(generate.temperature, number),
      DF_FIELD(generate.top_p, number),
      DF_FIELD(generate.top_k, integer),
      DF_FIELD(generate.seed, seed),
      DF_FIELD(generate.progress_every_s, number),
      DF_FIELD(runtime.devices, text),
      DF_FIELD(runtime.graphs, boolean),
      DF_FIELD(runtime.cpu_workers, integer),
      DF_FIELD(runtime.memory_limit_gb, number),
      DF_FIELD(runtime.arena_gb, number),
      DF_FIELD(runtime.gemm_tuning, boolean),
      DF_FIELD(runtime.kernels, text),
      DF_FIELD(runtime.target_attention, text),
      DF_FIELD(runtime.rendezvous_port, integer),
      DF_FIELD(runtime.rendezvous_timeout_s, number),
      DF_FIELD(runtime.heartbeat_timeout_s, number),
      DF_FIELD(runtime.shard_optimizer, boolean),
      DF_FIELD(runtime.overlap_reduction, boolean),
      DF_FIELD(runtime.reduce_dtype, text),
      DF_FIELD(checkpoint.every, integer),
      DF_FIELD(checkpoint.keep, integer),
      DF_FIELD(checkpoint.resume, boolean),
      DF_FIELD(metrics.log_every, integer),
      DF_FIELD(metrics.progress, boolean),
      DF_FIELD(metrics.trackers, text_list),
      DF_FIELD(metrics.run_name, text),
      DF_FIELD(metrics.wandb_project, text),
      DF_FIELD(metrics.wandb_entity, text),
      DF_FIELD(metrics.wandb_mode, text),
  };
  return all;
}
#undef DF_FIELD

const std::vector<std::string> kSections = {"job",      "target",     "target.synthetic", "drafter", "data",
                                            "data.synthetic", "training", "eval", "generate", "runtime", "checkpoint",
                                            "metrics"};
const std::vector<std::string> kBucketKeys = {"seq", "anchors", "batch"};

const Field* find_field(const std::string& key) {
  for (const Field& f : fields())
    if (key == f.key) return &f;
  return nullptr;
}

bool is_section(const std::string& key) {
  return std::find(kSections.begin(), kSections.end(), key) != kSections.end();
}

// Shortest round-trip text, in fixed notation unless scientific is much shorter (0.0006, 1e-12).
std::string fmt_double(double v) {
  char buf[400];
  auto r = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::fixed);
  std::string fixed(buf, r.ptr);
  if (fixed.size() <= 10) return fixed;
  r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

std::string quote(const std::string& s) { return "\"" + s + "\""; }

std::string value_text(Config& c, const Field& f) {
  void* p = f.at(c);
  switch (f.kind) {
    case Kind::integer: return std::to_string(*static_cast<int64_t*>(p));
    case Kind::optional_integer: {
      const auto& o = *static_cast<std::optional<int64_t>*>(p);
      return o ? std::to_string(*o) : "(not set)";
    }
    case Kind::seed: return std::to_string(*static_cast<uint64_t*>(p));
    case Kind::number: return fmt_double(*static_cast<double*>(p));
    case Kind::boolean: return *static_cast<bool*>(p) ? "true" : "false";
    case Kind::text: return quote(*static_cast<std::string*>(p));
    case Kind::path: return quote(static_cast<std::filesystem::path*>(p)->string());
    case Kind::integer_list: {
      std::string s = "[";
      for (int64_t v : *static_cast<std::vector<int64_t>*>(p)) s += (s.size() > 1 ? ", " : "") + std::to_string(v);
      return s + "]";
    }
    case Kind::text_list: {
      std::string s = "[";
      for (const std::string& v : *static_cast<std::vector<std::string>*>(p))
        s += (s.size() > 1 ? ", " : "") + quote(v);
      return s + "]";
    }
  }
  return "?";
}

const char* expected_type(Kind k) {
  switch (k) {
    case Kind::integer:
    case Kind::optional_integer: return "an integer";
    case Kind::seed: return "an integer >= 0";
    case Kind::number: return "a number (float or integer)";
    case Kind::boolean: return "true or false";
    case Kind::text:
    case Kind::path: return "a quoted string";
    case Kind::integer_list: return "an array of integers";
    case Kind::text_list: return "an array of quoted strings";
  }
  return "?";
}

// An example assignment that fixes a type error: the default when it says something, else a sample.
std::string example(const Field& f) {
  Config d;
  std::string v = value_text(d, f);
  if (f.kind == Kind::optional_integer) v = "<a token id>";
  if (f.kind == Kind::path && v == "\"\"") v = "\"path/to/it\"";
  if (f.kind == Kind::integer_list && v == "[]") v = "[1, 2]";
  if (f.kind == Kind::text_list && v == "[]")
    v = std::string(f.key) == "metrics.trackers" ? "[\"tensorboard\"]" : "[\"a\"]";
  return std::string(f.key) + " = " + v;
}

namespace {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string leaf_of(const std::string& key) { return key.substr(key.rfind('.') + 1); }

std::string suggestion(const std::string& key, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = 3;
  for (const std::string& c : candidates) {
    size_t d = edit_distance(key, c);
    if (d < best_d) best_d = d, best = c;
  }
  if (!best.empty()) return "; did you mean " + best + "?";
  std::string same;
  for (const std::string& c : candidates)
    if (leaf_of(c) == leaf_of(key)) same += (same.empty() ? "" : " or ") + c;
  return same.empty() ? "" : "; did you mean " + same + "?";
}

std::vector<std::string> all_keys() {
  std::vector<std::string> keys;
  for (const Field& f : fields()) keys.push_back(f.key);
  return keys;
}

std::string keys_of_section(const std::string& section) {
  std::string s;
  for (const Field& f : fields())
    if (std::string(f.key).rfind(section + ".", 0) == 0 &&
        std::string(f.key).find('.', section.size() + 1) == std::string::npos)
      s += (s.empty() ? "" : ", ") + leaf_of(f.key);
  return s;
}

}  // namespace config_detail

std::vector<std::string> config_keys() {
  std::vector<std::string> keys = config_detail::all_keys();
  for (const std::string& k : config_detail::kBucketKeys) keys.push_back("buckets." + k);
  return keys;
}

}  // namespace dflash
