// The frozen target transformer (Qwen3 or Llama, forward only) loaded from a Hugging Face
// directory: it produces the drafter's context features (docs/MODEL.md, "Inputs of one sequence"),
// and the logits used for greedy data generation. Also writes random targets for tests and the
// tiny default job.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/hf_config.h"
#include "model/target_config.h"
#include "runtime/tensor.h"

namespace dflash {

class Target {
 public:
  // Loads dir (config.json, then model.safetensors or the shards of model.safetensors.index.json)
  // into persistent frozen tensors of the current context: f32 on the CPU, bf16 on CUDA. Every
  // tensor's shape is checked against the config and NaN/Inf weights are refused. layer_ids are
  // the decoder layers features() concatenates (0-based, repeats allowed); max_seq_len bounds
  // the S of every forward (the positions tensor is made here, so a forward can be recorded).
  Target(const std::filesystem::path& dir, std::vector<int64_t> layer_ids, int64_t max_seq_len);
  // A target with random weights at spec's dims, made in memory without files (benchmarks at a
  // real model's dims): linear weights and embeddings uniform with standard deviation `std`,
  // norms 1, untied, from a counter-based generator (the same seed gives the same weights).
  // model/target_random.cpp.
  static std::unique_ptr<Target> random(const TargetSpec& spec, std::vector<int64_t> layer_ids, int64_t max_seq_len,
                                        uint64_t seed, double std);

  const TargetSpec& spec() const { return spec_; }
  const std::vector<int64_t>& layer_ids() const { return layer_ids_; }
  int64_t max_seq_len() const { return max_seq_len_; }
  const Tensor& embed_tokens() const { return embed_; }  // frozen [V, H]
  const Tensor& lm_head() const { return lm_head_; }     // frozen [V, H]; embed_tokens when tied
  const Tensor& inv_freq() const { return inv_freq_; }   // f32 [hd/2], rope_inv_freq(spec())

  // ids i32 [B, S] (S <= max_seq_len) -> [B, S, F*H]: the outputs of decoder layers layer_ids,
  // concatenated in that order along the last dim. Runs layers 0..max(layer_ids) only. A defined
  // `into` (bf16 or f32 as the target, [B, S, F*H] elements) is written instead of a new tensor.
  Tensor features(const Tensor& ids, const Tensor& into = Tensor()) const;
  // All L decoder layer outputs [B, S, H] (HF hidden_states[1..L], the last before the final norm);
  // with layers in [1, L], only the first `layers` of them (the rest are not computed).
  std::vector<Tensor> layer_outputs(const Tensor& ids, int64_t layers = -1) const;
  // [B, S, V]: all layers, the final norm and lm_head.
  Tensor logits(const Tensor& ids) const;

 private:
  friend class TargetDecoder;  // model/target_decode.h: the same layers over a KV cache
  friend class SlotTargetDecoder;  // model/target_slots.h: the same layers over a slot KV cache
  Target() = default;          // for random()
  struct Layer {
    Tensor input_norm, post_norm;  // [H]
    Tensor qkv;                    // [nh*hd + 2*nkv*hd, H]: q_proj's rows, then k_proj's, then v_proj's
    Tensor q, k, v, o;             // views of qkv's parts [nh*hd, H], [nkv*hd, H] x2; [H, nh*hd]
    Tensor q_norm, k_norm;         // [hd], Qwen3 only
    Tensor gate_up;                // [2I, H]: gate_proj's rows, then up_proj's
    Tensor gate, up, down;         // views of gate_up's halves [I, H] x2; [H, I]
  };
  // Fills `into` (a persistent tensor of the checkpoint's shape and the device's dtype, or a rows()
  // view of one) with the weight named key.
  using Loader = std::function<void(const std::string& key, const Tensor& into)>;
  void build(const std::string& what, const Loader& load);  // every weight, then positions and rope
  void check_ids(const char* what, const Tensor& ids) const;
  Tensor positions(int64_t B, int64_t S) const;  // i32 [B, S], row b = 0..S-1
  struct LayerOut {
    Tensor h, x_next;  // the layer's output; it normed by the next_norm given (else undefined)
  };
  LayerOut decoder_layer(const Layer& p, const Tensor& h, const Tensor& x, const Tensor& pos,
                         const Tensor* next_norm) const;
  Tensor run_layers(const Tensor& ids, int64_t last, const Tensor* final_norm,
                    const std::function<void(int64_t, const Tensor&)>& each) const;

  TargetSpec spec_;
  std::vector<int64_t> layer_ids_;
  int64_t max_seq_len_ = 0;
  Tensor embed_, lm_head_, final_norm_;
  std::vector<Layer> layers_;
  Tensor positions_;  // i32 [max_seq_len] = 0, 1, ...
  Tensor inv_freq_;   // f32 [hd/2]
};

// CRC-32 (8 hex digits) of the embedding's and lm_head's bytes as stored in dir's weights (lm_head
// is the embedding when tied). With the target's dims they identify a target: a fine-tune under the
// same config.json differs, an edit of config.json that changes nothing computed does not.
struct TargetChecksums {
  std::string embed_tokens, lm_head;
};
TargetChecksums target_checksums(const std::filesystem::path& dir, const TargetSpec& spec);

// Writes a Hugging Face directory `dir` (config.json + model.safetensors, F32) holding a random
// target: weights ~ N(0, init_std^2) from c.seed, norms = 1, untied; with a vocab_size of at least
// kTinyTokenizerMinVocab also its tokenizer and chat template (model/tiny_tokenizer.h), and no
// eos_token_id in config.json. It is assembled in a temporary sibling and renamed into place, so
// `dir` never exists half-written. Refuses to overwrite an existing `dir`.
void write_random_target(const std::filesystem::path& dir, const SyntheticTargetConfig& c);

}  // namespace dflash
