# Mutants of scripts/mutants.sh (sourced at the end of scripts/mutants-list-files.sh): one writer
# per folder (the lock of the trainer, prepare, hidden and export, and rank 0 taking it for a run),
# the exit status of a stop by signal, startup.json after the resume, export's --overwrite, and the
# safetensors header's space-only padding.
mutant "folder lock: a held lock not refused" "-ts=folder-lock -tc=a?second?lock*" \
  'if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {' \
  'if (false) {'
mutant "folder lock: a holder refused as a file system without locks" "-ts=folder-lock -tc=a?second?lock*" \
  'if (err == EWOULDBLOCK) DF_FAIL(' \
  'if (err == EINTR) DF_FAIL('
mutant "folder lock: the lock file left behind on release" "-ts=folder-lock -tc=a?second?lock*" \
  '  ::unlink(file_.c_str());' \
  ''
mutant "folder lock: the holder's text not written" "-ts=folder-lock -tc=a?lock?file?left*" \
  'if (::ftruncate(fd, 0) == 0 && ::pwrite(fd, text.data(), text.size(), 0) == ssize_t(text.size())) ::fsync(fd);' \
  '(void)text;'
mutant "folder lock: a holder without text named as pid ''" "-ts=folder-lock -tc=a?lock?file?that*" \
  'if (pid.empty()) return "another process ("' \
  'if (false) return "another process ("'
mutant "folder lock: every rank of a run takes the lock" "-ts=folder-lock -tc=rank?0?takes*" \
  'const bool root = !coord || coord->rank() == 0;' \
  'const bool root = true;'
mutant "folder lock: rank 0's refusal not sent to the other ranks" "-ts=folder-lock -tc=rank?0?takes*" \
  'if (coord && coord->size() > 1) refusal = coord->broadcast(refusal);' \
  ''
mutant "folder lock: training takes no lock" "-ts=folder-lock -tc=prepare??hidden*" \
  'lock = lock_dump_folder(cfg.job.dump_folder, cluster ? cluster->coord : pg ? &pg->coordinator() : nullptr);' \
  ''
mutant "folder lock: prepare takes no lock" "-ts=folder-lock -tc=prepare??hidden*" \
  'const std::optional<FolderLock> lock = lock_dump_folder(cfg.job.dump_folder, nullptr);' \
  ''
mutant "folder lock: hidden takes no lock" "-ts=folder-lock -tc=prepare??hidden*" \
  'const std::optional<FolderLock> lock = lock_dump_folder(cfg.job.dump_folder, &coord);' \
  ''
mutant "folder lock: export takes no lock" "-ts=folder-lock -tc=prepare??hidden*" \
  'const FolderLock lock = FolderLock::acquire(export_lock_file(out), out, "choose another --out");' \
  ''
mutant "export: a non-empty --out replaced without --overwrite" "-ts=refused-writes -tc=export?onto*" \
  'DF_CHECK(overwrite || !fs::is_directory(out, ec) || fs::is_empty(out, ec),' \
  'DF_CHECK(true,'
mutant "export: --overwrite not passed on by the command line" "-ts=exit-codes -tc=*SIGTERM*" \
  'run_export(a.checkpoint, a.out, a.dtype, a.overwrite);' \
  'run_export(a.checkpoint, a.out, a.dtype, false);'
mutant "exit status: a stop by SIGTERM exits 0" "-ts=exit-codes -tc=*SIGTERM*" \
  'else if (run_training(cfg).interrupted) return kStoppedStatus;' \
  'else run_training(cfg);'
mutant "startup.json written before the resume is accepted" "-ts=refused-writes -tc=a?resume?refused*" \
  '    startup_report_ = report;  // written by run() once a resume is accepted' \
  '    startup_report_ = report; if (root) write_startup_json(c.job.dump_folder, report);'
mutant "safetensors: a NUL byte in the header accepted" "-ts=refused-writes -tc=a?safetensors?header*" \
  'DF_CHECK(!nul, f << ": the header holds a NUL byte at offset "' \
  'DF_CHECK(true, f << ": the header holds a NUL byte at offset "'
mutant "safetensors: whitespace other than spaces after the header accepted" "-ts=refused-writes -tc=a?safetensors?header*" \
  'while (end > 0 && text[end - 1] == '"' '"') --end;' \
  'while (end > 0 && std::isspace(uint8_t(text[end - 1]))) --end;'
