// Sharded checkpoints: the collective save, and a reader that serves flat ranges of the masters
// and moments from either layout, so any checkpoint loads into any store.
#include "train/sharded_checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>

#include "runtime/checksum.h"
#include "runtime/fileio.h"
#include "runtime/safetensors.h"
#include "train/checkpoint.h"
#include "train/export.h"

namespace dflash {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {
constexpr const char* kManifestFormat = "dflash-sharded-checkpoint";
constexpr int kManifestVersion = 1;

std::string quoted(const fs::path& p) { return "'" + p.string() + "'"; }

std::string shard_file(int rank, int world) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "shard-%05d-of-%05d.safetensors", rank, world);
  return buf;
}

nlohmann::ordered_json file_entry(const fs::path& dir, const std::string& name) {
  const fs::path p = dir / name;
  return {{"name", name}, {"bytes", fs::file_size(p)}, {"crc32", crc32_hex(crc32_file(p))}};
}

json read_json(const fs::path& p, const std::string& what) {
  try {
    return json::parse(read_file_text(p));
  } catch (const json::exception& e) {
    DF_FAIL(what << ": " << quoted(p) << " is not valid JSON (" << e.what() << "); fix: use another checkpoint");
  }
}

// Flat ranges of "master", "m" and "v" from a checkpoint of either layout; the layout of the flat
// buffers (each parameter's offset) does not depend on the world size, only the padding does.
class Reader {
 public:
  Reader(const fs::path& dir, const ParameterStore& params, const std::string& what) : what_(what) {
    if (is_sharded_checkpoint(dir)) {
      const json m = read_json(dir / kShardedManifest, what);
      try {
        DF_CHECK(m.at("format") == kManifestFormat && m.at("version") == kManifestVersion,
                 what << ": " << quoted(dir / kShardedManifest) << " is not a version " << kManifestVersion << " "
                      << kManifestFormat << " manifest; fix: use a checkpoint written by this build");
        std::map<std::string, std::pair<Shape, int64_t>> saved;
        for (const json& p : m.at("parameters"))
          saved[p.at("name").get<std::string>()] = {Shape::of(p.at("shape").get<std::vector<int64_t>>()),
                                                    p.at("offset").get<int64_t>()};
        check_model(saved, params, quoted(dir / kShardedManifest));
        for (const json& s : m.at("shards")) {
          Shard sh;
          sh.begin = s.at("begin").get<int64_t>();
          sh.count = s.at("count").get<int64_t>();
          sh.file = std::make_unique<SafeTensors>(dir / s.at("file").get<std::string>());
          for (const char* kind : {"master", "m", "v"}) {
            DF_CHECK(sh.file->has(kind) && sh.file->info(kind).dtype == "F32" && sh.file->info(kind).numel() == sh.count,
                     what << ": " << quoted(sh.file->path()) << " has no F32 tensor '" << kind << "' of " << sh.count
                          << " values; fix: the checkpoint is damaged; use another one");
          }
          shards_.push_back(std::move(sh));
        }
        world_ = m.at("world").get<int>();
      } catch (const json::exception& e) {
        DF_FAIL(what << ": " << quoted(dir / kShardedManifest) << " is malformed (" << e.what()
                     << "); fix: use another checkpoint");
      }
      DF_CHECK(!shards_.empty(), what << ": " << quoted(dir / kShardedManifest) << " lists no shards");
      step_file_ = shards_[0].file.get();
    } else {
      values_ = std::make_unique<SafeTensors>(dir / "params.safetensors");
      moments_ = std::make_unique<SafeTensors>(dir / "optimizer.safetensors");
      std::map<std::string, std::pair<Shape, int64_t>> saved;
      for (const ParamSpec& p : params.specs()) {
        for (auto [file, key] : {std::pair{values_.get(), p.name}, std::pair{moments_.get(), "m." + p.name},
                                 std::pair{moments_.get(), "v." + p.name}}) {
          DF_CHECK(file->has(key), what << ": " << quoted(file->path()) << " has no tensor '" << key
                                        << "' (the checkpoint is of a different model); fix: resume with the drafter "
                                        << "config it was saved with");
          DF_CHECK(file->info(key).dtype == "F32" && Shape::of(file->info(key).shape) == p.shape,
                   what << ": " << quoted(file->path()) << ": tensor '" << key << "' is "
                        << file->info(key).dtype << " " << Shape::of(file->info(key).shape).str() << " but the model's "
                        << "parameter is F32 " << p.shape.str() << "; fix: resume with the drafter config it was saved with");
        }
        params_.push_back({p.name, params.offset_of(p.name), p.shape.numel()});
      }
      std::sort(params_.begin(), params_.end(), [](const auto& a, const auto& b) { return a.offset < b.offset; });
      step_file_ = moments_.get();
    }
    DF_CHECK(step_file_->has("step") && step_file_->info("step").dtype == "I32" && step_file_->info("step").numel() == 1,
             what << ": " << quoted(step_file_->path()) << " has no I32 tensor 'step'; fix: use another checkpoint");
  }

  int world() const { return world_; }
  int32_t step() const { return step_file_->read_ints("step")[0]; }

  // out[0, count) = the checkpoint's flat `kind` over [begin, begin + count); padding is 0.
  void read(const std::string& kind, int64_t begin, int64_t count, float* out) const {
    std::fill(out, out + count, 0.0f);
    const int64_t end = begin + count;
    auto copy = [&](const uint8_t* src, int64_t src_begin, int64_t src_count) {
      const int64_t lo = std::max(begin, src_begin), hi = std::min(end, src_begin + src_count);
      if (lo < hi) std::memcpy(out + (lo - begin), src + (lo - src_begin) * 4, size_t(hi - lo) * 4);
    };
    if (!shards_.empty()) {
      for (const Shard& s : shards_) copy(s.file->bytes(kind), s.begin, s.count);
      return;
    }
    for (const Param& p : params_) {
      if (p.offset >= end || p.offset + p.count <= begin) continue;
      if (kind == "master") copy(values_->bytes(p.name), p.offset, p.count);
      else copy(moments_->bytes(kind + "." + p.name), p.offset, p.count);
    }
  }

 private:
  void check_model(const std::map<std::string, std::pair<Shape, int64_t>>& saved, const ParameterStore& params,
                   const std::string& file) {
    const char* fix = "; fix: resume with the drafter config the checkpoint was saved with";
    DF_CHECK(saved.size() == params.specs().size(), what_ << ": " << file << " lists " << saved.size()
                                                          << " parameters but the model has " << params.specs().size() << fix);
    for (const ParamSpec& p : params.specs()) {
      auto it = saved.find(p.name);
      DF_CHECK(it != saved.end(), what_ << ": " << file << " has no parameter '" << p.name << "'" << fix);
      DF_CHECK(it->second.first == p.shape && it->second.second == params.offset_of(p.name),
               what_ << ": " << file << ": parameter '" << p.name << "' is " << it->second.first.str() << " at offset "
                     << it->second.second << " but the model's is " << p.shape.str() << " at offset "
                     << params.offset_of(p.name) << fix);
    }
  }

  struct Shard {
    int64_t begin = 0, count = 0;
    std::unique_ptr<SafeTensors> file;
  };
  struct Param {
    std::string name;
    int64_t offset, count;
  };
  std::string what_;
  int world_ = 1;
  std::vector<Shard> shards_;
  std::unique_ptr<SafeTensors> values_, moments_;
  std::vector<Param> params_;
  const SafeTensors* step_file_ = nullptr;
};

void check_complete(const fs::path& dir, const std::string& what) {
  if (auto problem = checkpoint_problem(dir, true))
    DF_FAIL(what << ": not a complete checkpoint: " << *problem
                 << "; fix: resume from the newest complete checkpoint, or choose another step");
}

// Every parameter's values into the store (its master part and compute copy).
void load_values(const Reader& reader, ParameterStore& params) {
  std::vector<float> v;
  for (const ParamSpec& p : params.specs()) {
    v.resize(size_t(p.shape.numel()));
    reader.read("master", params.offset_of(p.name), p.shape.numel(), v.data());
    params.set_values(p.name, v.data());
  }
  params.sync_compute_copy();
}
}  // namespace

bool is_sharded_checkpoint(const fs::path& dir) {
  std::error_code ec;
  return fs::exists(dir / kShardedManifest, ec);
}

fs::path save_sharded_checkpoint(const fs::path& dump_folder, int64_t step, const std::vector<LocalShard>& shards,
                                 Coordinator& coord, const json& state, const DrafterSpec* drafter) {
  const fs::path target = checkpoint_dir(dump_folder, step);
  const fs::path checkpoints = target.parent_path();
  const std::string what = "save_checkpoint " + quoted(target) + " (sharded)";
  const bool root = coord.rank() == 0;
  auto fail_text = [](const std::string& s) { return s.rfind("error:", 0) == 0; };

  // Rank 0 makes the staging directory; everyone learns its name (or rank 0's error).
  std::string staged_text;
  if (root) {
    try {
      std::error_code ec;
      fs::create_directories(checkpoints, ec);
      DF_CHECK(fs::is_directory(checkpoints), "cannot create " << quoted(checkpoints) << ": " << ec.message());
      const fs::path staged = checkpoints / (".tmp-step-" + std::to_string(step) + "-" + std::to_string(::getpid()));
      fs::remove_all(staged, ec);
      DF_CHECK(fs::create_directory(staged, ec) && !ec, "cannot create the staging directory " << quoted(staged) << ": "
                                                                                              << ec.message());
      staged_text = staged.string();
    } catch (const std::exception& e) {
      staged_text = std::string("error:rank 0: ") + e.what();
    }
  }
  staged_text = coord.broadcast(staged_text);
  if (fail_text(staged_text))
    DF_FAIL(what << " failed: " << staged_text.substr(6) << "; no checkpoint was written for step " << step
                 << " and earlier checkpoints are untouched");
  const fs::path staged = staged_text;

  // Every rank writes its shard; the entries (or the error) go to rank 0.
  std::string mine;
  try {
    nlohmann::ordered_json entries = nlohmann::ordered_json::array();
    for (const LocalShard& s : shards) {
      const int32_t counter = s.optimizer->step_counter().to_ints()[0];
      DF_CHECK(counter == step, "rank " << s.rank << " has done " << counter << " optimizer steps, not " << step);
      const std::string name = shard_file(s.rank, s.params->layout().world);
      const std::map<std::string, std::string> meta = {{"format", kManifestFormat},
                                                       {"step", std::to_string(step)},
                                                       {"rank", std::to_string(s.rank)},
                                                       {"world", std::to_string(s.params->layout().world)}};
      write_safetensors(staged / name,
                        {{"master", s.params->flat_master()}, {"m", s.optimizer->adam_m()},
                         {"v", s.optimizer->adam_v()}, {"step", s.optimizer->step_counter()}},
                        meta);
      entries.push_back(file_entry(staged, name));
    }
    mine = entries.dump();
  } catch (const std::exception& e) {
    mine = "error:" + std::string(e.what());
  }
  std::vector<std::string> all = coord.all_gather(mine);

  // Rank 0 completes the checkpoint once every shard is on disk (each was fsynced by its writer).
  std::string verdict = "ok";
  if (root) {
    try {
      nlohmann::ordered_json files = nlohmann::ordered_json::array();
      for (size_t p = 0; p < all.size(); ++p) {
        DF_CHECK(!fail_text(all[p]), "process " << p << " could not write its shard: " << all[p].substr(6));
        for (const auto& e : nlohmann::ordered_json::parse(all[p])) files.push_back(e);
      }
      const ParameterStore& params = *shards[0].params;
      const int world = params.layout().world;
      DF_CHECK(int64_t(files.size()) == world, "expected " << world << " shard files, got " << files.size());
      nlohmann::ordered_json manifest = {{"format", kManifestFormat},
                                         {"version", kManifestVersion},
                                         {"step", step},
                                         {"world", world},
                                         {"padded_numel", params.padded_numel()},
                                         {"shard_numel", params.shard_numel()}};
      manifest["parameters"] = nlohmann::ordered_json::array();
      for (const ParamSpec& p : params.specs())
        manifest["parameters"].push_back(
            {{"name", p.name}, {"shape", std::vector<int64_t>(p.shape.d, p.shape.d + p.shape.ndim)},
             {"offset", params.offset_of(p.name)}});
      manifest["shards"] = nlohmann::ordered_json::array();
      for (int r = 0; r < world; ++r)
        manifest["shards"].push_back({{"file", shard_file(r, world)},
                                      {"rank", r},
                                      {"begin", int64_t(r) * params.shard_numel()},
                                      {"count", params.shard_numel()}});
      write_file_atomic(staged / kShardedManifest, manifest.dump(2) + "\n");
      write_file_atomic(staged / "state.json", state.dump(2) + "\n");
      std::vector<std::string> extra = {kShardedManifest, "state.json"};
      if (drafter) {
        write_file_atomic(staged / kCheckpointDrafterConfig, exported_config_json(*drafter, DType::f32).dump(2) + "\n");
        extra.push_back(kCheckpointDrafterConfig);
      }
      for (const std::string& f : extra) files.push_back(file_entry(staged, f));
      nlohmann::ordered_json marker = {{"format", kCheckpointFormat}, {"version", kCheckpointVersion}, {"step", step},
                                       {"layout", "sharded"}};
      marker["files"] = files;
      write_file_atomic(staged / kCheckpointMarker, marker.dump(2) + "\n");
      publish_directory(staged, target);
    } catch (const std::exception& e) {
      std::error_code ec;
      fs::remove_all(staged, ec);
      verdict = std::string("error:") + e.what();
    }
  }
  verdict = coord.broadcast(verdict);
  if (fail_text(verdict))
    DF_FAIL(what << " failed: " << verdict.substr(6) << "; no checkpoint was written for step " << step
                 << " and earlier checkpoints are untouched");
  return target;
}

json load_any_checkpoint(const fs::path& dir, ParameterStore& params, AdamWOptimizer& optimizer) {
  if (!is_sharded_checkpoint(dir) && !params.sharded()) return load_checkpoint(dir, params, optimizer);
  const std::string what = "load_checkpoint " + quoted(dir);
  check_complete(dir, what);
  const Reader reader(dir, params, what);
  const json state = read_json(dir / "state.json", what);
  const int32_t step = reader.step();
  load_values(reader, params);
  const int64_t begin = params.sharded() ? params.shard_begin() : 0, count = params.flat_master().numel();
  std::vector<float> buf(static_cast<size_t>(count));
  for (const char* kind : {"m", "v"}) {
    reader.read(kind, begin, count, buf.data());
    (kind[0] == 'm' ? optimizer.adam_m() : optimizer.adam_v()).copy_from_host(buf.data(), buf.size() * sizeof(float));
  }
  optimizer.step_counter().copy_from_host(&step, sizeof step);
  return state;
}

void load_sharded_params(const fs::path& dir, ParameterStore& params, const std::string& what) {
  check_complete(dir, what);
  load_values(Reader(dir, params, what), params);
}

}  // namespace dflash
