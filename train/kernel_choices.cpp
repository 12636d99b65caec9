// The startup table's kernel lines from kernels/heuristics.h (see train/kernel_choices.h).
#include "train/kernel_choices.h"

#include "runtime/kernel_paths.h"
#include "runtime/target_attention.h"
#ifdef DFLASH_CUDA
#include "runtime/cuda/cuda_backend.h"
#endif

namespace dflash {

namespace heur = kernels::heuristics;

std::vector<std::string> kernel_choice_lines(const heur::Device& device, const DrafterSpec& d,
                                             const std::vector<Bucket>& buckets, const std::string& target_attention,
                                             bool cudnn_built) {
  std::vector<std::string> lines;
  const std::string where = "compute capability " + std::to_string(device.major) + "." + std::to_string(device.minor) +
                            ", " + std::to_string(device.sms) + " SMs";
  const std::string heads = "heads " + std::to_string(d.num_attention_heads) + "/" +
                            std::to_string(d.num_key_value_heads) + ", head_dim " + std::to_string(d.head_dim) +
                            ", block " + std::to_string(d.block_size);
  // The GPU runs the drafter in bf16; its rows are 16-byte aligned (the arena's allocations).
  const heur::AttentionShape any{1, 0, 1, d.block_size, d.num_attention_heads, d.num_key_value_heads, d.head_dim};
  lines.push_back("device: " + where);
  lines.push_back("kernels: " + heur::describe(device));
  lines.push_back("attention forward (" + heads + "): " + heur::describe(heur::attention_forward(device, any, true)));
  for (const Bucket& b : buckets) {
    const heur::AttentionShape s{b.batch, b.seq, b.anchors, d.block_size, d.num_attention_heads,
                                 d.num_key_value_heads, d.head_dim};
    lines.push_back("attention backward " + b.str() + ": " +
                    heur::describe(heur::attention_backward(device, s, true, true)));
  }
  lines.push_back("lm_head + cross-entropy (V " + std::to_string(d.vocab_size) + "): " +
                  heur::describe(heur::ce_rows(device, d.vocab_size, true, true)));
  const bool cudnn = heur::target_attention_cudnn(target_attention, cudnn_built);
  std::string why = "runtime.target_attention = \"" + target_attention + "\"";
  if (target_attention == "auto") why += cudnn_built ? ", the build has cuDNN" : ", the build has no cuDNN";
  lines.push_back(std::string("target attention: ") + (cudnn ? "cuDNN's fused flash attention" : "dflash's own kernel") +
                  " (" + why + ")");
  return lines;
}

std::vector<std::string> kernel_choice_lines(const Device& device, const DrafterSpec& drafter,
                                             const std::vector<Bucket>& buckets, const std::string& target_attention) {
  if (!device.is_cuda()) return {};
#ifdef DFLASH_CUDA
  return kernel_choice_lines(rules_device(cuda_backend::device_traits(device.index)), drafter, buckets,
                             target_attention, cudnn_attention_built());
#else
  return {};
#endif
}

}  // namespace dflash
