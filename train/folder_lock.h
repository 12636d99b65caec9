// One writer per folder: an OS lock (flock) on a lock file, held while a trainer, `dflash-train
// prepare`, `hidden` or `export` writes there. The kernel drops it when the process ends, however it
// ends, so a lock file left by a dead process never blocks; the file's text (pid, host, start time)
// only names the holder in the refusal. A process takes a folder's lock once (rank 0 of a run; its
// worker threads share it); a second acquire of the same file, in this process or another, is
// refused at once.
#pragma once
#include <filesystem>
#include <optional>
#include <string>

namespace dflash {

class Coordinator;

class FolderLock {
 public:
  FolderLock() = default;
  FolderLock(FolderLock&& other) noexcept;
  FolderLock& operator=(FolderLock&& other) noexcept;
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;
  ~FolderLock();  // releases the lock and removes the lock file

  // Locks `file` (created, with its folder, when missing), then writes this process's pid, host and
  // start time into it. Another holder: throws "<folder> is in use by pid N on host H since T; wait
  // for it, or <fix>", having written nothing. `folder` is what the messages name.
  static FolderLock acquire(const std::filesystem::path& file, const std::filesystem::path& folder,
                            const std::string& fix);
  bool held() const { return fd_ >= 0; }
  const std::filesystem::path& file() const { return file_; }

 private:
  int fd_ = -1;
  std::filesystem::path file_;
};

// The lock file of a dump folder: <folder>/.lock.
std::filesystem::path dump_folder_lock_file(const std::filesystem::path& folder);
// The lock file of an export's --out folder: beside it (<parent>/.<name>.lock), since the export
// replaces the folder as a whole.
std::filesystem::path export_lock_file(const std::filesystem::path& out);

// The refusal when flock itself fails with `err` (a file system without working locks: NFS
// mounted nolock, Lustre without the flock mount option): names the folder and the fix.
std::string lock_unsupported_message(const std::filesystem::path& folder, int err, const std::string& fix);

// For a run over several processes (coord; null or one rank: this process alone): rank 0 takes the
// dump folder's lock and every rank learns whether it got it, before any rank writes there. A
// refusal throws the same message on every rank. The lock is held by rank 0's return value only.
std::optional<FolderLock> lock_dump_folder(const std::filesystem::path& folder, Coordinator* coord);

}  // namespace dflash
