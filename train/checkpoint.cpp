// Training checkpoints: staged writing with a completion marker, validation (sizes, CRC-32),
// loading with name/shape checks before any write, pruning, and the atomic directory commit.
#include "train/checkpoint.h"

#include <fcntl.h>
#include <stdio.h>  // renameat2, RENAME_EXCHANGE (glibc, _GNU_SOURCE)
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "runtime/checksum.h"
#include "runtime/fileio.h"
#include "runtime/safetensors.h"
#include "train/export.h"

namespace dflash {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr const char* kParamsFile = "params.safetensors";
constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr const char* kStateFile = "state.json";
constexpr const char* kStagingPrefixes[] = {".tmp-step-", ".old-step-"};

std::string quoted(const fs::path& p) { return "'" + p.string() + "'"; }

std::string shape_text(const std::vector<int64_t>& shape) { return Shape::of(shape).str(); }

// "step-N" with N in canonical decimal form -> N.
std::optional<int64_t> step_of(const std::string& name) {
  if (name.rfind("step-", 0) != 0) return std::nullopt;
  const std::string digits = name.substr(5);
  if (digits.empty() || digits.size() > 18 || (digits.size() > 1 && digits[0] == '0')) return std::nullopt;
  for (char c : digits)
    if (c < '0' || c > '9') return std::nullopt;
  return std::stoll(digits);
}

bool is_staging_name(const std::string& name) {
  for (const char* prefix : kStagingPrefixes)
    if (name.rfind(prefix, 0) == 0) return true;
  return false;
}

// The pid a staging directory name ends with ("...-<pid>"), or -1.
long staging_pid(const std::string& name) {
  size_t dash = name.rfind('-');
  if (dash == std::string::npos || dash + 1 == name.size() || name.size() - dash > 10) return -1;
  for (size_t i = dash + 1; i < name.size(); ++i)
    if (name[i] < '0' || name[i] > '9') return -1;
  return std::stol(name.substr(dash + 1));
}

struct Listing {
  std::vector<std::pair<int64_t, fs::path>> steps;  // newest first
  std::vector<fs::path> staging;
};

// What checkpoints/ holds; nothing when it does not exist.
Listing list_checkpoints(const fs::path& checkpoints) {
  Listing out;
  std::error_code ec;
  if (!fs::exists(checkpoints, ec)) return out;
  DF_CHECK(fs::is_directory(checkpoints, ec), "checkpoints: " << quoted(checkpoints)
                                                  << " is not a directory; fix: move the file away or choose "
                                                     "another job.dump_folder");
  fs::directory_iterator it(checkpoints, ec), end;
  DF_CHECK(!ec, "checkpoints: cannot list " << quoted(checkpoints) << ": " << ec.message()
                                            << "; fix: check its permissions");
  for (; it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (auto step = step_of(name)) out.steps.emplace_back(*step, it->path());
    else if (is_staging_name(name)) out.staging.push_back(it->path());
  }
  DF_CHECK(!ec, "checkpoints: listing " << quoted(checkpoints) << " failed: " << ec.message());
  std::sort(out.steps.begin(), out.steps.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::sort(out.staging.begin(), out.staging.end());
  return out;
}

void ensure_directory(const fs::path& dir, const std::string& what) {
  std::error_code ec, probe;
  fs::create_directories(dir, ec);
  DF_CHECK(fs::is_directory(dir, probe), what << ": cannot create the directory " << quoted(dir) << ": "
                                       << (ec ? ec.message() : "a file of that name is in the way")
                                       << "; fix: check the path and its permissions, or choose another "
                                          "job.dump_folder");
}

// A parameter's offset in elements into the flat buffers (master, grads, m and v share the layout).
int64_t flat_offset(const ParameterStore& params, const std::string& name) {
  return int64_t((params.master(name).impl().offset - params.flat_master().impl().offset) / sizeof(float));
}

// A parameter-shaped view into a flat f32 buffer (no op, so no context or autograd is involved).
Tensor flat_view(const Tensor& flat, int64_t offset, const Shape& shape, const std::string& name) {
  DF_CHECK(offset >= 0 && offset + shape.numel() <= flat.numel(),
           "checkpoint: " << name << " " << shape.str() << " at offset " << offset << " lies outside "
                          << flat.describe());
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = flat.impl().storage;
  impl->offset = flat.impl().offset + size_t(offset) * dtype_size(flat.dtype());
  impl->shape = shape;
  impl->dtype = flat.dtype();
  impl->id = next_tensor_id();
  impl->name = name;
  return Tensor(std::move(impl));
}

void check_optimizer_matches(const ParameterStore& params, const AdamWOptimizer& optimizer, const std::string& what) {
  DF_CHECK(optimizer.adam_m().numel() == params.padded_numel(),
           what << ": the optimizer's moments hold " << optimizer.adam_m().numel() << " values but the parameter "
                << "store " << params.padded_numel() << "; fix: pass the optimizer built over this store");
}

nlohmann::ordered_json file_entry(const fs::path& dir, const std::string& name) {
  const fs::path p = dir / name;
  return {{"name", name}, {"bytes", fs::file_size(p)}, {"crc32", crc32_hex(crc32_file(p))}};
}

// The marker's contents, or what is wrong with it.
std::optional<std::string> marker_problem(const fs::path& dir, const json& m, bool checksums) {
  if (!m.is_object() || !m.contains("format") || m["format"] != kCheckpointFormat)
    return std::string(kCheckpointMarker) + " is not a dflash checkpoint marker (its \"format\" is not \"" +
           kCheckpointFormat + "\")";
  if (!m.contains("version") || !m["version"].is_number_integer())
    return std::string(kCheckpointMarker) + " has no integer \"version\"";
  if (m["version"].get<int64_t>() != kCheckpointVersion)
    return std::string(kCheckpointMarker) + " has format version " + m["version"].dump() +
           "; this build reads version " + std::to_string(kCheckpointVersion);
  if (!m.contains("step") || !m["step"].is_number_integer())
    return std::string(kCheckpointMarker) + " has no integer \"step\"";
  const int64_t step = m["step"].get<int64_t>();
  if (auto named = step_of(dir.filename().string()); named && *named != step)
    return std::string(kCheckpointMarker) + " says step " + std::to_string(step) + " but the directory is " +
           dir.filename().string() + " (it was renamed)";
  if (!m.contains("files") || !m["files"].is_array())
    return std::string(kCheckpointMarker) + " has no \"files\" list";
  std::vector<std::string> listed;
  for (const json& f : m["files"]) {
    if (!f.is_object() || !f.contains("name") || !f["name"].is_string() || !f.contains("bytes") ||
        !f["bytes"].is_number_unsigned() || !f.contains("crc32") || !f["crc32"].is_string())
      return std::string(kCheckpointMarker) + " has a malformed file entry " + f.dump() +
             " (each needs \"name\", \"bytes\" and \"crc32\")";
    const std::string name = f["name"].get<std::string>();
    if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos)
      return std::string(kCheckpointMarker) + " lists the file name \"" + name + "\", which is not a plain file name";
    listed.push_back(name);
    const fs::path p = dir / name;
    std::error_code ec;
    if (!fs::exists(p, ec)) return name + " is missing (" + kCheckpointMarker + " lists it)";
    if (!fs::is_regular_file(p, ec)) return name + " is not a regular file";
    const uint64_t bytes = fs::file_size(p, ec), want = f["bytes"].get<uint64_t>();
    if (ec) return name + " cannot be read: " + ec.message();
    if (bytes != want)
      return name + " has " + std::to_string(bytes) + " bytes but " + kCheckpointMarker + " records " +
             std::to_string(want) + " (the file was truncated or rewritten after the save)";
    if (checksums) {
      const std::string crc = crc32_hex(crc32_file(p)), recorded = f["crc32"].get<std::string>();
      if (crc != recorded)
        return name + " has checksum crc32 " + crc + " but " + kCheckpointMarker + " records " + recorded +
               " (the file is damaged)";
    }
  }
  // A sharded checkpoint (train/sharded_checkpoint.h) lists its manifest and shard files instead.
  const bool sharded = m.contains("layout") && m["layout"] == "sharded";
  const std::vector<const char*> required =
      sharded ? std::vector<const char*>{"manifest.json", kStateFile}
              : std::vector<const char*>{kParamsFile, kOptimizerFile, kStateFile};
  for (const char* r : required)
    if (std::find(listed.begin(), listed.end(), r) == listed.end())
      return std::string(kCheckpointMarker) + " does not list " + r;
  return std::nullopt;
}

// Every parameter under `prefix + name` in `file`, F32 with the parameter's shape, and nothing else
// except the names in `also`.
void check_tensors(const SafeTensors& file, const ParameterStore& params, const std::vector<std::string>& prefixes,
                   const std::vector<std::string>& also, const std::string& what) {
  const std::string f = what + ": " + quoted(file.path());
  const char* fix = "; fix: resume with the drafter config the checkpoint was saved with (its drafter_config.json "
                    "and state.json record it), or start a fresh run in another job.dump_folder";
  for (const std::string& prefix : prefixes)
    for (const ParamSpec& p : params.specs()) {
      const std::string key = prefix + p.name;
      DF_CHECK(file.has(key), f << " has no tensor '" << key << "' for the model's parameter of shape "
                                << p.shape.str() << " (the checkpoint is of a different model)" << fix);
      const SafeTensorInfo& t = file.info(key);
      DF_CHECK(t.dtype == "F32", f << ": tensor '" << key << "' is " << t.dtype
                                   << "; checkpoints hold F32; fix: this file was not written by save_checkpoint");
      DF_CHECK(Shape::of(t.shape) == p.shape, f << ": tensor '" << key << "' has shape " << shape_text(t.shape)
                                                << " but the model's parameter is " << p.shape.str() << fix);
    }
  for (const std::string& name : file.names()) {
    bool known = std::find(also.begin(), also.end(), name) != also.end();
    for (const std::string& prefix : prefixes)
      known = known || (name.rfind(prefix, 0) == 0 && params.has(name.substr(prefix.size())));
    DF_CHECK(known, f << ": tensor '" << name << "' is not a parameter of this model" << fix);
  }
}

[[noreturn]] void os_fail(const std::string& what, const char* step, int err) {
  DF_FAIL(what << ": " << step << ": " << std::strerror(err));
}

}  // namespace

fs::path checkpoint_dir(const fs::path& dump_folder, int64_t step) {
  return dump_folder / "checkpoints" / ("step-" + std::to_string(step));
}

void fsync_directory(const fs::path& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  int err = fd < 0 ? errno : (::fsync(fd) != 0 ? errno : 0);
  if (fd >= 0) ::close(fd);
  DF_CHECK(err == 0, "fsync of directory " << quoted(dir) << " failed: " << std::strerror(err)
                                           << "; its new entries may not survive a crash");
}

void publish_directory(const fs::path& staged, const fs::path& target) {
  const std::string what = "publishing " + quoted(staged) + " as " + quoted(target);
  const fs::path parent = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  fsync_directory(staged);
  std::error_code ec;
  const fs::file_status status = fs::symlink_status(target, ec);
  if (!fs::exists(status)) {
    if (::rename(staged.c_str(), target.c_str()) != 0) os_fail(what, "rename", errno);
  } else {
    DF_CHECK(fs::is_directory(status), what << ": " << quoted(target) << " exists and is not a directory; "
                                            << "fix: move it away");
    if (::renameat2(AT_FDCWD, staged.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) != 0) {
      const int err = errno;
      if (err != EINVAL && err != ENOSYS && err != EOPNOTSUPP) os_fail(what, "exchange", err);
      // No atomic exchange on this file system: rename the old one away, then the new one in.
      fs::path old = parent / (".old-" + target.filename().string() + "-" + std::to_string(::getpid()));
      fs::remove_all(old, ec);
      if (::rename(target.c_str(), old.c_str()) != 0) os_fail(what, "rename the old directory away", errno);
      if (::rename(staged.c_str(), target.c_str()) != 0) {
        const int e = errno;
        if (::rename(old.c_str(), target.c_str()) != 0)
          os_fail(what + " (the previous version is now at " + quoted(old) + ")", "rename", e);
        os_fail(what, "rename", e);
      }
      fsync_directory(parent);
      fs::remove_all(old, ec);
      return;
    }
    fsync_directory(parent);
    fs::remove_all(staged, ec);  // now the old content; a leftover is ignored and later pruned
    return;
  }
  fsync_directory(parent);
}

void save_checkpoint(const fs::path& dump_folder, int64_t step, const ParameterStore& params,
                     const AdamWOptimizer& optimizer, const json& state, const DrafterSpec* drafter) {
  const fs::path target = checkpoint_dir(dump_folder, step);
  const std::string what = "save_checkpoint " + quoted(target);
  DF_CHECK(step >= 0, what << ": step " << step << " is negative");
  check_optimizer_matches(params, optimizer, what);
  const int64_t counter = optimizer.step_counter().to_ints()[0];
  DF_CHECK(counter == step, what << ": step " << step << " was given but the optimizer has done " << counter
                                 << " steps; fix: pass the optimizer's step count, which names the checkpoint");
  if (drafter) {
    const std::vector<ParamSpec> specs = drafter_param_specs(*drafter);
    bool same = specs.size() == params.specs().size();
    for (size_t i = 0; same && i < specs.size(); ++i)
      same = specs[i].name == params.specs()[i].name && specs[i].shape == params.specs()[i].shape;
    DF_CHECK(same, what << ": the drafter spec given does not describe this parameter store; fix: pass the spec "
                        << "the store was built from (drafter_param_specs)");
  }
  const fs::path checkpoints = target.parent_path();
  ensure_directory(checkpoints, what);
  std::error_code ec;
  DF_CHECK(!fs::exists(target, ec) || fs::is_directory(target, ec),
           what << ": " << quoted(target) << " exists and is not a directory; fix: move it away");

  const fs::path staged =
      checkpoints / (".tmp-step-" + std::to_string(step) + "-" + std::to_string(::getpid()));
  fs::remove_all(staged, ec);
  try {
    DF_CHECK(fs::create_directory(staged, ec) && !ec, "cannot create the staging directory " << quoted(staged)
                                                          << ": " << ec.message()
                                                          << "; fix: check that the directory is writable");
    std::vector<std::pair<std::string, Tensor>> values, moments;
    for (const ParamSpec& p : params.specs()) {
      values.emplace_back(p.name, params.master(p.name));
      const int64_t off = flat_offset(params, p.name);
      moments.emplace_back("m." + p.name, flat_view(optimizer.adam_m(), off, p.shape, "m." + p.name));
      moments.emplace_back("v." + p.name, flat_view(optimizer.adam_v(), off, p.shape, "v." + p.name));
    }
    moments.emplace_back("step", optimizer.step_counter());
    const std::map<std::string, std::string> meta = {{"format", kCheckpointFormat}, {"step", std::to_string(step)}};
    write_safetensors(staged / kParamsFile, values, meta);
    write_safetensors(staged / kOptimizerFile, moments, meta);
    std::string state_text;
    try {
      state_text = state.dump(2) + "\n";
    } catch (const json::exception& e) {
      DF_FAIL(kStateFile << ": the state cannot be written as JSON (" << e.what()
                         << "); fix: keep the state's strings UTF-8");
    }
    write_file_atomic(staged / kStateFile, state_text);
    std::vector<std::string> files = {kParamsFile, kOptimizerFile, kStateFile};
    if (drafter) {
      write_file_atomic(staged / kCheckpointDrafterConfig, exported_config_json(*drafter, DType::f32).dump(2) + "\n");
      files.push_back(kCheckpointDrafterConfig);
    }
    nlohmann::ordered_json marker = {{"format", kCheckpointFormat}, {"version", kCheckpointVersion}, {"step", step}};
    marker["files"] = nlohmann::ordered_json::array();
    for (const std::string& f : files) marker["files"].push_back(file_entry(staged, f));
    write_file_atomic(staged / kCheckpointMarker, marker.dump(2) + "\n");
    publish_directory(staged, target);
  } catch (const std::exception& e) {
    fs::remove_all(staged, ec);
    DF_FAIL(what << " failed: " << e.what() << "; no checkpoint was written for step " << step
                 << " and earlier checkpoints are untouched");
  }
}

std::optional<std::string> checkpoint_problem(const fs::path& dir, bool checksums) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return std::string("it is not a directory");
  const fs::path marker = dir / kCheckpointMarker;
  if (!fs::exists(marker, ec))
    return std::string("no ") + kCheckpointMarker + ": the save did not finish (interrupted or crashed)";
  try {
    return marker_problem(dir, json::parse(read_file_text(marker)), checksums);
  } catch (const json::exception& e) {
    return std::string(kCheckpointMarker) + " is not valid JSON (" + e.what() + ")";
  } catch (const std::exception& e) {
    return std::string("it cannot be read: ") + e.what();
  }
}

std::optional<fs::path> latest_complete_checkpoint(const fs::path& dump_folder, std::vector<std::string>* warnings) {
  const Listing listing = list_checkpoints(dump_folder / "checkpoints");
  auto warn = [&](const std::string& text) {
    if (warnings) warnings->push_back(text);
  };
  for (const fs::path& p : listing.staging)
    warn("ignoring " + quoted(p) + ": a staging directory left by an interrupted save (prune_checkpoints removes it)");
  for (const auto& [step, dir] : listing.steps) {
    if (auto problem = checkpoint_problem(dir, true)) {
      warn("skipping checkpoint " + quoted(dir) + ": " + *problem);
      continue;
    }
    return dir;
  }
  return std::nullopt;
}

json load_checkpoint(const fs::path& dir, ParameterStore& params, AdamWOptimizer& optimizer) {
  const std::string what = "load_checkpoint " + quoted(dir);
  if (auto problem = checkpoint_problem(dir, true))
    DF_FAIL(what << ": not a complete checkpoint: " << *problem
                 << "; fix: resume from latest_complete_checkpoint(), which skips damaged checkpoints, or "
                    "choose another step");
  check_optimizer_matches(params, optimizer, what);
  const SafeTensors values(dir / kParamsFile), moments(dir / kOptimizerFile);
  check_tensors(values, params, {""}, {}, what);
  check_tensors(moments, params, {"m.", "v."}, {"step"}, what);
  DF_CHECK(moments.has("step") && moments.info("step").dtype == "I32" && moments.info("step").numel() == 1,
           what << ": " << quoted(moments.path()) << " has no I32 tensor 'step' of one element; fix: this file "
                << "was not written by save_checkpoint");
  // A NaN or Inf would surface steps later as divergence, or ride along into every later checkpoint.
  try {
    values.check_all_finite();
    moments.check_all_finite();
  } catch (const Error& e) {
    DF_FAIL(what << ": " << e.what() << "; nothing was loaded");
  }
  const int32_t step = moments.read_ints("step")[0];
  const int64_t recorded = json::parse(read_file_text(dir / kCheckpointMarker))["step"].get<int64_t>();
  DF_CHECK(step == recorded, what << ": " << quoted(moments.path()) << " holds step " << step << " but "
                                  << kCheckpointMarker << " records " << recorded
                                  << "; fix: the checkpoint is inconsistent; use another one");
  json state;
  try {
    state = json::parse(read_file_text(dir / kStateFile));
  } catch (const json::exception& e) {
    DF_FAIL(what << ": " << quoted(dir / kStateFile) << " is not valid JSON (" << e.what()
                 << "); fix: use another checkpoint");
  }

  for (const ParamSpec& p : params.specs()) {
    const std::vector<float> v = values.read_floats(p.name);
    params.master(p.name).copy_from_host(v.data(), v.size() * sizeof(float));
    const int64_t off = flat_offset(params, p.name);
    for (const char* kind : {"m.", "v."}) {
      const std::vector<float> x = moments.read_floats(kind + p.name);
      const Tensor& flat = kind[0] == 'm' ? optimizer.adam_m() : optimizer.adam_v();
      flat_view(flat, off, p.shape, kind + p.name).copy_from_host(x.data(), x.size() * sizeof(float));
    }
  }
  optimizer.step_counter().copy_from_host(&step, sizeof step);
  params.sync_compute_copy();
  return state;
}

void prune_checkpoints(const fs::path& dump_folder, int64_t keep, std::vector<std::string>* warnings) {
  const fs::path checkpoints = dump_folder / "checkpoints";
  DF_CHECK(keep >= 1, "prune_checkpoints " << quoted(checkpoints) << ": keep = " << keep
                                           << "; fix: keep at least 1 (the newest checkpoint)");
  const Listing listing = list_checkpoints(checkpoints);
  std::error_code ec;
  for (const fs::path& p : listing.staging)
    if (staging_pid(p.filename().string()) != long(::getpid())) fs::remove_all(p, ec);
  // Newest first: the first `keep` checkpoints that verify completely (sizes and CRC, so a new one
  // is read back before anything older goes) are kept; one that does not verify is left in place
  // and never counts, so the newest good checkpoint is never removed.
  int64_t kept = 0;
  for (const auto& [step, dir] : listing.steps) {
    if (auto problem = checkpoint_problem(dir, kept < keep)) {
      if (warnings && kept < keep)
        warnings->push_back("checkpoint " + quoted(dir) + " does not verify (" + *problem +
                            "); it is not counted among the checkpoint.keep = " + std::to_string(keep) +
                            " kept, so older good checkpoints stay");
      continue;
    }
    if (kept < keep) {
      ++kept;
      continue;
    }
    // Renamed away first, so a crash mid-delete leaves a staging leftover, not a damaged step-N.
    const fs::path doomed = checkpoints / (".old-step-" + std::to_string(step) + "-" + std::to_string(::getpid()));
    fs::remove_all(doomed, ec);
    if (::rename(dir.c_str(), doomed.c_str()) != 0)
      os_fail("prune_checkpoints: cannot remove " + quoted(dir), "rename", errno);
    fs::remove_all(doomed, ec);
    DF_CHECK(!ec, "prune_checkpoints: cannot delete " << quoted(doomed) << " (was " << quoted(dir)
                                                      << "): " << ec.message() << "; fix: check permissions");
  }
}

}  // namespace dflash
