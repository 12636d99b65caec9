// One writer per folder: the lock a trainer, prepare, hidden and export take, refused at once with
// the holder's pid, host and start time; a lock left by a killed process never blocks; rank 0 of a
// run takes it and every rank stops when it is refused.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "dist/coordinator.h"
#include "runtime/fileio.h"
#include "tests/process_util.h"
#include "tests/test_util.h"
#include "tests/trainer_fixture.h"
#include "train/commands.h"
#include "train/folder_lock.h"
#include "train/trainer.h"

using namespace dflash;
using namespace dflash::test;
namespace fs = std::filesystem;

namespace {
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

std::string host_name() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return host;
}
}  // namespace

TEST_SUITE("folder-lock") {
  TEST_CASE("a second lock of a folder is refused naming the holder and the fix; released, it is free again") {
    TempDir tmp("lock-basic");
    const fs::path folder = tmp / "runs-x";
    const fs::path file = dump_folder_lock_file(folder);
    std::optional<FolderLock> first = FolderLock::acquire(file, folder, "choose another job.dump_folder");
    CHECK(first->held());
    CHECK(fs::exists(file));
    const std::string text = read_file_text(file);
    CHECK(text.find("pid " + std::to_string(::getpid()) + "\n") != std::string::npos);
    CHECK(text.find("host " + host_name() + "\n") != std::string::npos);
    // Refused in this process too (a second acquire is a second writer), and the file is unchanged.
    const std::string e = error_of([&] { FolderLock::acquire(file, folder, "choose another job.dump_folder"); });
    CHECK(e.find(folder.string() + " is in use by pid " + std::to_string(::getpid()) + " on host " + host_name() +
                 " since 20") != std::string::npos);
    CHECK(e.find("; wait for it, or choose another job.dump_folder") != std::string::npos);
    CHECK(read_file_text(file) == text);
    // Moving keeps one holder; releasing removes the file and frees the folder.
    FolderLock moved = std::move(*first);
    CHECK_FALSE(first->held());
    first.reset();
    CHECK(fs::exists(file));
    { FolderLock gone = std::move(moved); }
    CHECK_FALSE(fs::exists(file));
    FolderLock again = FolderLock::acquire(file, folder, "x");
    CHECK(again.held());
  }

  TEST_CASE("a lock file left by a killed process does not block; its text only names a live holder") {
    TempDir tmp("lock-killed");
    const fs::path folder = tmp / "run";
    const fs::path file = dump_folder_lock_file(folder);
    int ready[2];
    REQUIRE(::pipe(ready) == 0);
    const pid_t child = fork_child([&] {
      FolderLock lock = FolderLock::acquire(file, folder, "choose another job.dump_folder");
      (void)!::write(ready[1], "x", 1);
      for (;;) ::pause();
      return 0;
    });
    char c = 0;
    REQUIRE(::read(ready[0], &c, 1) == 1);
    ::close(ready[0]);
    ::close(ready[1]);
    // While the child lives, its lock refuses others, naming it.
    const std::string e = error_of([&] { FolderLock::acquire(file, folder, "choose another job.dump_folder"); });
    CHECK(e.find("is in use by pid " + std::to_string(child) + " on host ") != std::string::npos);
    ::kill(child, SIGKILL);
    CHECK(wait_child(child) == 128 + SIGKILL);
    REQUIRE(fs::exists(file));  // left behind, naming the dead process
    CHECK(read_file_text(file).find("pid " + std::to_string(child)) != std::string::npos);
    FolderLock mine = FolderLock::acquire(file, folder, "x");
    CHECK(read_file_text(file).find("pid " + std::to_string(::getpid())) != std::string::npos);
  }

  TEST_CASE("a lock file that names no holder yet, an unopenable lock file, and a file system without locks") {
    TempDir tmp("lock-errors");
    const fs::path folder = tmp / "run";
    fs::create_directories(folder);
    // A holder that has not written its text yet: the refusal says so.
    const fs::path file = folder / ".lock";
    FolderLock held = FolderLock::acquire(file, folder, "x");
    ::truncate(file.c_str(), 0);
    const std::string e = error_of([&] { FolderLock::acquire(file, folder, "choose another --out"); });
    CHECK(e.find(folder.string() + " is in use by another process (" + file.string() + " does not name it yet)") !=
          std::string::npos);
    CHECK(e.find("choose another --out") != std::string::npos);
    // A lock file that cannot be opened: names the file, the folder and the fix.
    const fs::path blocked = tmp / "blocked";
    fs::create_directories(blocked / ".lock" / "sub");  // a folder in the way of the file
    const std::string o = error_of([&] { FolderLock::acquire(blocked / ".lock", blocked, "choose another --out"); });
    CHECK(o.find("cannot open the lock file " + (blocked / ".lock").string() + " of " + blocked.string()) !=
          std::string::npos);
    CHECK(o.find("fix: make " + blocked.string() + " a writable folder, or choose another --out") != std::string::npos);
    // flock refused by the file system: the message names the mount options and the fix.
    const std::string u = lock_unsupported_message("/lustre/runs/x", ENOLCK, "choose another job.dump_folder");
    CHECK(u.find("cannot lock /lustre/runs/x (flock: ") != std::string::npos);
    CHECK(u.find("Lustre: the flock mount option") != std::string::npos);
    CHECK(u.find("NFS: without the nolock option") != std::string::npos);
    CHECK(u.find("or choose another job.dump_folder on a local or lock-capable file system") != std::string::npos);
  }

  TEST_CASE("the export lock lies beside --out") {
    CHECK(export_lock_file("/a/b/out") == fs::path("/a/b/.out.lock"));
    CHECK(export_lock_file("/a/b/out/") == fs::path("/a/b/.out.lock"));
    CHECK(export_lock_file("out") == fs::path(".out.lock"));
  }

  TEST_CASE("rank 0 takes the dump folder's lock for the run; refused, every rank stops with the message") {
    TempDir tmp("lock-ranks");
    const fs::path folder = tmp / "run";
    for (bool taken : {false, true}) {
      CAPTURE(taken);
      std::optional<FolderLock> other;
      if (taken) other = FolderLock::acquire(dump_folder_lock_file(folder), folder, "x");
      ThreadCoordinator coord(2);
      std::string errors[2];
      bool held[2] = {false, false};
      std::vector<std::thread> ranks;
      for (int r = 0; r < 2; ++r)
        ranks.emplace_back([&, r] {
          // Rank 0 comes last: a rank other than 0 that took the lock would refuse rank 0.
          if (r == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
          try {
            std::optional<FolderLock> lock = lock_dump_folder(folder, &coord.handle(r));
            held[r] = lock.has_value() && lock->held();
          } catch (const std::exception& e) {
            errors[r] = e.what();
          }
        });
      for (auto& t : ranks) t.join();
      if (taken) {
        CHECK(errors[0].find(folder.string() + " is in use by pid " + std::to_string(::getpid())) != std::string::npos);
        CHECK(errors[0].find("choose another job.dump_folder") != std::string::npos);
        CHECK(errors[1] == errors[0]);
        CHECK_FALSE(held[0]);
      } else {
        CHECK(errors[0].empty());
        CHECK(errors[1].empty());
        CHECK(held[0]);
        CHECK_FALSE(held[1]);  // the other ranks hold nothing
      }
    }
  }

  TEST_CASE("prepare, hidden, training and export are refused while another process writes their folder") {
    Config cfg = small_job("lock-commands", {}, 2);
    const fs::path dump = cfg.job.dump_folder;
    const std::string pid = std::to_string(::getpid());
    {
      FolderLock other = FolderLock::acquire(dump_folder_lock_file(dump), dump, "x");
      for (const char* what : {"prepare", "hidden", "train"}) {
        CAPTURE(what);
        const std::string e = error_of([&] {
          if (std::string(what) == "prepare") run_prepare(cfg);
          else if (std::string(what) == "hidden") run_hidden(cfg);
          else run_training(cfg);
        });
        CHECK(e.find(dump.string() + " is in use by pid " + pid + " on host ") != std::string::npos);
        CHECK(e.find("; wait for it, or choose another job.dump_folder") != std::string::npos);
      }
      // Nothing was written: the folder holds only the other writer's lock file.
      std::vector<std::string> names;
      for (const auto& e : fs::directory_iterator(dump)) names.push_back(e.path().filename().string());
      CHECK(names == std::vector<std::string>{".lock"});
    }
    // Free again: a run trains, and leaves no lock behind.
    TrainResult r = run_training(cfg);
    CHECK(r.steps_done == 2);
    CHECK_FALSE(fs::exists(dump_folder_lock_file(dump)));
    const fs::path out = trainer_root() / "lock-commands-export";
    {
      FolderLock other = FolderLock::acquire(export_lock_file(out), out, "x");
      const std::string e = error_of([&] { run_export(r.last_checkpoint, out, "bf16"); });
      CHECK(e.find(out.string() + " is in use by pid " + pid) != std::string::npos);
      CHECK(e.find("; wait for it, or choose another --out") != std::string::npos);
      CHECK_FALSE(fs::exists(out));
    }
    run_export(r.last_checkpoint, out, "bf16");
    CHECK(fs::exists(out / "config.json"));
    CHECK_FALSE(fs::exists(export_lock_file(out)));
  }
}
