# Mutants of scripts/mutants.sh (sourced at the end of scripts/mutants-list-files.sh): metrics.jsonl
# written one whole record per write, a failed write stopping the run after a checkpoint that keeps
# the unwritten records, the file cut back to the checkpoint's step on resume with each (kind,
# step) once, a fresh run refusing an existing file; and the data fingerprints a checkpoint keeps.
mutant "metrics: a short write taken as written" "-ts=metrics-log -tc=a?metrics?write?that?fails*" \
  'if (n == long(line.size())) return;' \
  'if (n != 0) return;'
mutant "metrics: a failed write does not stop the run" "-ts=metrics-log -tc=a?full?disk*" \
  'return g_stop_signal.load() != 0 || log_.failed() || (hooks_.stop_requested && hooks_.stop_requested());' \
  'return g_stop_signal.load() != 0 || (hooks_.stop_requested && hooks_.stop_requested());'
mutant "metrics: the checkpoint of a failed write drops the unwritten records" "-ts=metrics-log -tc=a?full?disk*" \
  'if (!log_.unwritten().empty()) state["metrics_unwritten"] = log_.unwritten();' \
  'if (false) state["metrics_unwritten"] = log_.unwritten();'
mutant "metrics: resume does not append the records its checkpoint kept" "-ts=metrics-log -tc=a?full?disk*" \
  'if (coord_->rank() == 0) resumed_unwritten_ = state.value("metrics_unwritten", std::vector<std::string>{});' \
  'if (false) resumed_unwritten_ = state.value("metrics_unwritten", std::vector<std::string>{});'
mutant "metrics: resume keeps the records past the checkpoint's step" "-ts=metrics-log -tc=resume_at*,a?torn*" \
  'if (j.is_null() || j["step"].get<int64_t>() > step) break;' \
  'if (j.is_null()) break;'
mutant "metrics: resume never cuts the file" "-ts=metrics-log -tc=resume_at*,a?torn*" \
  '  if (keep < text.size()) {' \
  '  if (false) {'
mutant "metrics: a measurement of the resumed step made again though written" "-ts=metrics-log -tc=a?torn*" \
  'return at == resumed_at && kept.find(std::string(" ") + kind + " ") != std::string::npos;' \
  'return at == resumed_at && kept.empty();'
mutant "metrics: an eval of the resumed step the stopped run had not written is not made" "-ts=metrics-log -tc=a?torn*" \
  'if (eval_ && root && step > 0 && step < total && c.training.eval_every > 0 && step % c.training.eval_every == 0 &&' \
  'if (eval_ && root && false && c.training.eval_every > 0 && step % c.training.eval_every == 0 &&'
mutant "metrics: the first step after a resume writes a record an uninterrupted run has not" "-ts=metrics-log -tc=a?torn*" \
  'const bool log_step = step % c.metrics.log_every == 0 || step == total || step == 1;' \
  'const bool log_step = step % c.metrics.log_every == 0 || step == total || step == first + 1;'
mutant "metrics: checkpoint.resume = false appends to an existing file" "-ts=metrics-log -tc=checkpoint.resume*" \
  'if (fresh && ::stat(path_.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0)' \
  'if (false)'
mutant "fingerprint: XXH64's fourth lane reads the third's bytes" "-ts=data-fingerprint -tc=Hash64*" \
  'v3 = round64(v3, read64(p + 24));' \
  'v3 = round64(v3, read64(p + 16));'
mutant "fingerprint: the cache ignores the mtime" "-ts=data-fingerprint -tc=a?JSONL?file*" \
  'files[key].value("mtime_ns", int64_t(-1)) == mtime && files[key].contains("xxh64"))' \
  'files[key].contains("xxh64"))'
mutant "fingerprint: the cache never answers" "-ts=data-fingerprint -tc=a?JSONL?file*" \
  'if (files.contains(key) && files[key].value("bytes", int64_t(-1)) == int64_t(st.st_size) &&' \
  'if (false && files[key].value("bytes", int64_t(-1)) == int64_t(st.st_size) &&'
mutant "fingerprint: other content at the same size not seen" "-ts=data-fingerprint -tc=a?JSONL?file*,resume*" \
  '  if (files.empty()) return "";' \
  '  return "";'
mutant "fingerprint: a shard directory hashes index.json only" "-ts=data-fingerprint -tc=a?token-shard*" \
  'if (e.is_regular_file() && (n == "index.json" || shard)) names.push_back(n);' \
  'if (e.is_regular_file() && n == "index.json") names.push_back(n);'
mutant "fingerprint: changed data resumed without data.allow_changed" "-ts=data-fingerprint -tc=resume*" \
  'DF_CHECK(cfg.data.allow_changed,' \
  'DF_CHECK(true,'
mutant "fingerprint: data.allow_changed keeps the old data position" "-ts=data-fingerprint -tc=resume*" \
  'changed = changed || std::string(key) == "data.train";' \
  'changed = changed && std::string(key) == "data.train";'
mutant "fingerprint: the trainer records no fingerprint" "-ts=data-fingerprint -tc=resume*" \
  'if (root) data_fingerprint_ = job_data_fingerprints(c, info);' \
  'if (false) data_fingerprint_ = job_data_fingerprints(c, info);'
