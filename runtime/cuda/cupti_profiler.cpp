// CUPTI activity tracing for the profiler (see cupti_profiler.h). Built only when CMake finds
// CUPTI (DFLASH_CUPTI); otherwise cupti_available() is false and the GPU profile refuses to run.
#include "runtime/cuda/cupti_profiler.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>

#include <cxxabi.h>

#include "runtime/error.h"

#ifdef DFLASH_CUPTI
#include <cupti.h>
#endif

namespace dflash {

#ifdef DFLASH_CUPTI
namespace {

struct Record {
  uint64_t start = 0, end = 0, node = 0;
  uint32_t correlation = 0;
  std::string name;  // kernels only
};

std::mutex g_mutex;
std::vector<Record> g_records;
bool g_subscribed = false;
bool g_buffers_registered = false;
bool g_inventory = false;           // keep kernel names, not records
std::set<std::string> g_kernel_names;  // mangled
CUpti_SubscriberHandle g_subscriber;
constexpr size_t kBufferBytes = size_t(8) << 20;

void check(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return;
  const char* s = nullptr;
  cuptiGetResultString(r, &s);
  DF_FAIL(what << " failed: " << (s ? s : "unknown CUPTI error")
               << ". The GPU profile needs CUPTI (it ships with the CUDA toolkit); run without --cuda "
                  "for the CPU profile");
}

void CUPTIAPI on_buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = kBufferBytes;
  *max_records = 0;
}

void CUPTIAPI on_buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* rec = nullptr;
  std::lock_guard<std::mutex> lock(g_mutex);
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    Record r;
    if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || rec->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
      auto* k = reinterpret_cast<CUpti_ActivityKernel10*>(rec);
      r = {k->start, k->end, k->graphNodeId, k->correlationId, k->name ? k->name : "?"};
    } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
      auto* m = reinterpret_cast<CUpti_ActivityMemset4*>(rec);
      r = {m->start, m->end, m->graphNodeId, m->correlationId, "memset"};
    } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      auto* m = reinterpret_cast<CUpti_ActivityMemcpy6*>(rec);
      r = {m->start, m->end, m->graphNodeId, m->correlationId, "memcpy"};
    } else {
      continue;
    }
    if (g_inventory) {
      if (r.name != "memset" && r.name != "memcpy") g_kernel_names.insert(r.name);
      continue;
    }
    g_records.push_back(std::move(r));
  }
  std::free(buffer);
}

// Every graph node created or cloned while a log records goes to the log (ProfileLog maps the
// captured ones to calls and the instantiated copies to their originals).
void CUPTIAPI on_callback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId id, const void* data) {
  if (domain != CUPTI_CB_DOMAIN_RESOURCE) return;
  if (id != CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED && id != CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED) return;
  ProfileLog* log = capturing_profile_log();
  if (!log) return;
  const auto* rd = static_cast<const CUpti_ResourceData*>(data);
  const auto* gd = static_cast<const CUpti_GraphData*>(rd->resourceDescriptor);
  uint64_t node = 0, original = 0;
  if (!gd || cuptiGetGraphNodeId(gd->node, &node) != CUPTI_SUCCESS) return;
  if (gd->originalNode && cuptiGetGraphNodeId(gd->originalNode, &original) != CUPTI_SUCCESS) original = 0;
  log->on_graph_node(node, original);
}

void register_buffers() {
  if (g_buffers_registered) return;
  check(cuptiActivityRegisterCallbacks(on_buffer_requested, on_buffer_completed), "cuptiActivityRegisterCallbacks");
  g_buffers_registered = true;
}

std::string demangled(const std::string& name) {
  int status = 0;
  char* d = abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status);
  std::string out = status == 0 && d ? d : name;
  std::free(d);
  return out;
}

}  // namespace

bool cupti_available() { return true; }

void cupti_inventory_start() {
  register_buffers();
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_inventory = true;
    g_kernel_names.clear();
  }
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "cuptiActivityEnable(CONCURRENT_KERNEL)");
}

std::vector<std::string> cupti_inventory_stop() {
  check(cuptiActivityFlushAll(1), "cuptiActivityFlushAll");
  cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  std::set<std::string> names;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_inventory = false;
    for (const std::string& n : g_kernel_names) names.insert(demangled(n));
    g_kernel_names.clear();
  }
  return {names.begin(), names.end()};
}

void cupti_track_graph_nodes() {
  if (g_subscribed) return;
  check(cuptiSubscribe(&g_subscriber, reinterpret_cast<CUpti_CallbackFunc>(on_callback), nullptr), "cuptiSubscribe");
  check(cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED),
        "cuptiEnableCallback(GRAPHNODE_CREATED)");
  check(cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED),
        "cuptiEnableCallback(GRAPHNODE_CLONED)");
  register_buffers();
  g_subscribed = true;
}

void cupti_start() {
  DF_CHECK(g_subscribed, "cupti_start before cupti_track_graph_nodes (a profiler bug)");
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_records.clear();
  }
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "cuptiActivityEnable(CONCURRENT_KERNEL)");
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET), "cuptiActivityEnable(MEMSET)");
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY), "cuptiActivityEnable(MEMCPY)");
}

CuptiReplayTimes cupti_stop(const ProfileLog& log, int64_t replays) {
  check(cuptiActivityFlushAll(1), "cuptiActivityFlushAll");
  cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMSET);
  cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMCPY);
  std::vector<Record> recs;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    recs.swap(g_records);
  }
  CuptiReplayTimes t;
  t.call_ms.assign(log.calls().size(), 0.0);
  // One graph launch = one correlation id; its span is first start to last end. Its records,
  // in start order, follow its program's capture order (one stream): the fallback when a
  // record's node id is not in the map.
  std::map<uint32_t, std::vector<const Record*>> launches;
  uint64_t first_start = UINT64_MAX, last_end = 0;
  for (const Record& r : recs) {
    launches[r.correlation].push_back(&r);
    first_start = std::min(first_start, r.start);
    last_end = std::max(last_end, r.end);
  }
  if (!recs.empty()) t.span_ms = double(last_end - first_start) / 1e6;
  for (auto& [corr, group] : launches) {
    std::sort(group.begin(), group.end(), [](const Record* a, const Record* b) { return a->start < b->start; });
    const std::vector<int64_t>* order = nullptr;
    int matches = 0;
    for (const auto& [program, calls] : log.capture_orders())
      if (calls.size() == group.size()) order = &calls, ++matches;
    if (matches != 1) order = nullptr;  // only a program identified by its node count
    for (size_t i = 0; i < group.size(); ++i) {
      const Record& r = *group[i];
      const double ms = double(r.end - r.start) / 1e6;
      t.records += 1;
      t.busy_ms += ms;
      auto it = log.node_calls().find(r.node);
      if (it != log.node_calls().end()) {
        t.call_ms[size_t(it->second)] += ms;
      } else if (order) {
        t.call_ms[size_t((*order)[i])] += ms;
        t.by_order += 1;
      } else {
        t.unattributed += 1;
        if (t.unattributed_example.empty())
          t.unattributed_example = r.name + " (graph node " + std::to_string(r.node) + ")";
      }
    }
  }
  (void)replays;
  return t;
}

#else

bool cupti_available() { return false; }
void cupti_track_graph_nodes() {
  DF_FAIL("this build has no CUPTI: the GPU profile needs it (CMake looks for it beside the CUDA toolkit)");
}
void cupti_start() { cupti_track_graph_nodes(); }
CuptiReplayTimes cupti_stop(const ProfileLog&, int64_t) {
  cupti_track_graph_nodes();
  return {};
}
void cupti_inventory_start() {
  DF_FAIL("this build has no CUPTI: DFLASH_KERNEL_INVENTORY needs it (CMake looks for it beside the CUDA toolkit)");
}
std::vector<std::string> cupti_inventory_stop() { return {}; }

#endif

}  // namespace dflash
