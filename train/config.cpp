// Config parsing: a TOML file (toml++) into the structs of train/config.h, command-line overrides
// applied to the parsed tree, then validation whose messages name the file, the key, the value and the fix.
#include "train/config.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "runtime/error.h"
#include "runtime/target_attention.h"
#include "train/config_keys.h"

namespace dflash {
namespace {

using namespace config_detail;

const char* type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::array: return "an array";
    case toml::node_type::table: return "a table";
    default: return "a date/time";
  }
}

// A value as it would be written inline: "text", 3, 0.5, true, [1, 2], {seq = 64, ...}.
std::string describe(const toml::node& n) {
  if (auto s = n.as_string()) return quote(s->get());
  if (auto i = n.as_integer()) return std::to_string(i->get());
  if (auto d = n.as_floating_point()) return fmt_double(d->get());
  if (auto b = n.as_boolean()) return b->get() ? "true" : "false";
  std::string out;
  if (auto a = n.as_array()) {
    for (const toml::node& e : *a) out += (out.empty() ? "" : ", ") + describe(e);
    out = "[" + out + "]";
  } else if (auto t = n.as_table()) {
    for (auto&& [k, v] : *t) out += (out.empty() ? "" : ", ") + std::string(k.str()) + " = " + describe(v);
    out = "{" + out + "}";
  } else {
    std::ostringstream os;
    n.visit([&](auto&& v) { os << v; });
    out = os.str();
  }
  return out.size() > 100 ? out.substr(0, 97) + "..." : out;
}

class Parser {
 public:
  explicit Parser(std::string file) : file_(std::move(file)) {}

  Config run(const std::string& text, const std::vector<std::string>& overrides) {
    try {
      root_ = toml::parse(text, file_);
    } catch (const toml::parse_error& e) {
      const auto& b = e.source().begin;
      DF_FAIL(file_ << ":" << b.line << ":" << b.column << ": not valid TOML: " << e.description()
                    << "; fix the syntax at line " << b.line << ", column " << b.column);
    }
    check_known(root_, "");
    for (const std::string& o : overrides) apply_override(o);
    for (const Field& f : fields())
      if (const toml::node* n = lookup(f.key)) read_field(f, *n);
    read_buckets();
    // A synthetic table written in the file turns the generator on unless it says enabled = false.
    for (const char* s : {"target.synthetic", "data.synthetic"})
      if (synthetic_in_file_.count(s) && !lookup(std::string(s) + ".enabled"))
        *static_cast<bool*>(find_field(std::string(s) + ".enabled")->at(cfg_)) = true;
    validate();
    cfg_.source = file_;
    return std::move(cfg_);
  }

 private:
  std::string file_;
  toml::table root_;
  Config cfg_;
  std::map<std::string, std::string> overridden_;  // key -> the "--key=value" that set it
  std::map<std::string, std::string> not_toml_;    // key -> why its override value was taken as a bare string
  std::set<std::string> synthetic_in_file_;

  const toml::node* lookup(const std::string& key) const {
    const toml::node* n = &root_;
    size_t start = 0;
    while (n) {
      size_t dot = key.find('.', start);
      const toml::table* t = n->as_table();
      if (!t) return nullptr;
      n = t->get(key.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
      if (dot == std::string::npos) return n;
      start = dot + 1;
    }
    return nullptr;
  }

  std::string at_line(const toml::source_region& s) const {
    if (s.begin.line == 0) return file_;
    return file_ + ":" + std::to_string(s.begin.line) + ":" + std::to_string(s.begin.column);
  }

  // Where a key's value came from: the command line, the file's line:column, or the file (a default).
  std::string where(const std::string& key) const {
    if (auto it = overridden_.find(key); it != overridden_.end())
      return file_ + ", overridden on the command line by " + it->second;
    if (const toml::node* n = lookup(key)) return at_line(n->source());
    return file_;
  }

  // Refuses unknown sections and keys of the file, and sections that are not tables.
  void check_known(const toml::table& t, const std::string& prefix) {
    for (auto&& [k, node] : t) {
      std::string name(k.str());
      std::string full = prefix.empty() ? name : prefix + "." + name;
      bool plain = name.find('.') == std::string::npos;
      if (plain && is_section(full)) {
        DF_CHECK(node.is_table(), at_line(node.source())
                                      << ": " << full << " = " << describe(node) << " must be a section:"
                                      << " write [" << full << "] with its keys on the lines below");
        if (leaf_of(full) == "synthetic") synthetic_in_file_.insert(full);
        check_known(*node.as_table(), full);
      } else if (!(plain && (find_field(full) || full == "buckets"))) {
        unknown(full, at_line(k.source()), node.is_table() && !find_field(full));
      }
    }
  }

  [[noreturn]] void unknown(const std::string& key, const std::string& loc, bool is_table) {
    if (is_table) {
      std::string sections = "buckets";
      for (const std::string& s : kSections) sections += ", " + s;
      std::vector<std::string> cands = kSections;
      cands.push_back("buckets");
      std::string near = suggestion(key, cands);
      DF_FAIL(loc << ": unknown section [" << key << "]" << (near.empty() ? "; the sections are " + sections : near));
    }
    std::string near = suggestion(key, all_keys());
    std::string section = key.find('.') == std::string::npos ? "" : key.substr(0, key.rfind('.'));
    std::string known = is_section(section) ? "; the keys of [" + section + "] are " + keys_of_section(section)
                                            : "; see docs/config.md for every key";
    DF_FAIL(loc << ": unknown key " << key << (near.empty() ? known : near));
  }

  // "key=value": the value in TOML syntax, or a bare string when it is not TOML (or when the key
  // takes a string), put into the parsed tree before anything is read.
  void apply_override(std::string arg) {
    if (arg.rfind("--", 0) == 0) arg = arg.substr(2);
    size_t eq = arg.find('=');
    DF_CHECK(eq != std::string::npos && eq > 0,
             file_ << ": command-line override --" << arg
                   << " has no value; write --section.key=value, e.g. --training.lr=3e-4");
    std::string key = arg.substr(0, eq), text = arg.substr(eq + 1), shown = "--" + arg;
    std::string loc = file_ + ", command line " + shown;
    DF_CHECK(!is_section(key),
             loc << ": " << key << " is a section; override one key at a time, e.g. --" << fields()[0].key << "=...");
    const Field* f = find_field(key);
    if (!f && key != "buckets") unknown(key, loc, false);

    toml::table parsed;
    std::string why;
    try {
      parsed = toml::parse("x = " + text, std::string_view("command line"));
      if (parsed.size() != 1 || !parsed.get("x")) why = "more than one value", parsed = toml::table{};
    } catch (const toml::parse_error& e) {
      why = std::string(e.description());
    }
    const toml::node* value = parsed.get("x");
    bool wants_string = f && (f->kind == Kind::text || f->kind == Kind::path);
    toml::table* t = &root_;
    size_t start = 0;
    for (size_t dot; (dot = key.find('.', start)) != std::string::npos; start = dot + 1) {
      std::string part = key.substr(start, dot - start);
      if (!t->get(part)) t->insert(part, toml::table{});
      t = t->get(part)->as_table();
      DF_CHECK(t, loc << ": the file's " << key.substr(0, dot) << " is not a section");
    }
    std::string leaf = key.substr(start);
    if (value && !(wants_string && !value->is_string())) {
      t->insert_or_assign(leaf, *value);
    } else {
      t->insert_or_assign(leaf, text);
      if (!wants_string) not_toml_[key] = why.empty() ? "not a value" : why;
    }
    overridden_[key] = shown;
  }

  [[noreturn]] void fail_type(const std::string& loc, const std::string& label, const std::string& key,
                              const toml::node& n, const std::string& expected, const std::string& fix) {
    std::string note;
    if (auto it = not_toml_.find(key); it != not_toml_.end())
      note = " (the command-line value is not valid TOML: " + it->second + ")";
    DF_FAIL(loc << ": " << label << " = " << describe(n) << ": expected " << expected << ", got " << type_name(n)
                << note << "; write e.g. " << fix);
  }

  // Integers accept integral floats (3.0, 1e4); 2.5 or a string is refused.
  int64_t read_int(const toml::node& n, const std::string& loc, const std::string& label, const std::string& key,
                   const std::string& fix) {
    if (auto i = n.as_integer()) return i->get();
    if (auto d = n.as_floating_point()) {
      double v = d->get();
      DF_CHECK(std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 9.2e18,
               loc << ": " << label << " = " << fmt_double(v) << ": expected a whole number; write e.g. " << fix);
      return int64_t(v);
    }
    fail_type(loc, label, key, n, "an integer", fix);
  }

  void read_field(const Field& f, const toml::node& n) {
    std::string key = f.key, loc = where(key), fix = example(f);
    void* p = f.at(cfg_);
    switch (f.kind) {
      case Kind::integer: *static_cast<int64_t*>(p) = read_int(n, loc, key, key, fix); break;
      case Kind::optional_integer: *static_cast<std::optional<int64_t>*>(p) = read_int(n, loc, key, key, fix); break;
      case Kind::seed: {
        int64_t v = read_int(n, loc, key, key, fix);
        DF_CHECK(v >= 0, loc << ": " << key << " = " << v << ": a seed must be 0 or more; write e.g. " << fix);
        *static_cast<uint64_t*>(p) = uint64_t(v);
        break;
      }
      case Kind::number: {
        if (!n.is_number()) fail_type(loc, key, key, n, expected_type(f.kind), fix);
        double v = n.is_integer() ? double(n.as_integer()->get()) : n.as_floating_point()->get();
        DF_CHECK(std::isfinite(v),
                 loc << ": " << key << " = " << fmt_double(v) << ": must be a finite number; write e.g. " << fix);
        *static_cast<double*>(p) = v;
        break;
      }
      case Kind::boolean:
        if (!n.is_boolean()) fail_type(loc, key, key, n, expected_type(f.kind), fix);
        *static_cast<bool*>(p) = n.as_boolean()->get();
        break;
      case Kind::text:
      case Kind::path:
        if (!n.is_string()) fail_type(loc, key, key, n, expected_type(f.kind), fix);
        if (f.kind == Kind::text)
          *static_cast<std::string*>(p) = n.as_string()->get();
        else
          *static_cast<std::filesystem::path*>(p) = n.as_string()->get();
        break;
      case Kind::integer_list: {
        const toml::array* a = n.as_array();
        if (!a) fail_type(loc, key, key, n, expected_type(f.kind), fix);
        auto& out = *static_cast<std::vector<int64_t>*>(p);
        out.clear();
        for (size_t i = 0; i < a->size(); ++i)
          out.push_back(read_int(*a->get(i), loc, key + "[" + std::to_string(i) + "]", key, fix));
        break;
      }
      case Kind::text_list: {
        auto& out = *static_cast<std::vector<std::string>*>(p);
        out.clear();
        if (n.is_string() && overridden_.count(key)) {  // --key=a,b on the command line
          std::stringstream items(n.as_string()->get());
          for (std::string item; std::getline(items, item, ',');) out.push_back(item);
          break;
        }
        const toml::array* a = n.as_array();
        if (!a) fail_type(loc, key, key, n, expected_type(f.kind), fix);
        for (size_t i = 0; i < a->size(); ++i) {
          const toml::node& e = *a->get(i);
          if (!e.is_string()) fail_type(loc, key + "[" + std::to_string(i) + "]", key, e, "a quoted string", fix);
          out.push_back(e.as_string()->get());
        }
        break;
      }
    }
  }

  void read_buckets() {
    const toml::node* n = lookup("buckets");
    if (!n) return;
    std::string loc = where("buckets");
    const std::string fix =
        "[[buckets]] with seq, anchors and batch below it, or buckets = [{seq = 512, anchors = 16, batch = 1}]";
    const toml::array* a = n->as_array();
    if (!a) fail_type(loc, "buckets", "buckets", *n, "an array of tables", fix);
    bool from_cli = overridden_.count("buckets") > 0;
    for (size_t i = 0; i < a->size(); ++i) {
      const toml::node& e = *a->get(i);
      std::string at = (from_cli ? loc : at_line(e.source())) + ": [[buckets]] #" + std::to_string(i + 1);
      const toml::table* t = e.as_table();
      DF_CHECK(t, at << " = " << describe(e) << " is " << type_name(e)
                     << ", not a table; write e.g. {seq = 512, anchors = 16, batch = 1}");
      for (auto&& [k, v] : *t) {
        std::string name(k.str());
        if (std::find(kBucketKeys.begin(), kBucketKeys.end(), name) != kBucketKeys.end()) continue;
        std::string near = suggestion(name, kBucketKeys);
        DF_FAIL(at << ": unknown key " << name << (near.empty() ? "; a bucket has only seq, anchors and batch" : near));
      }
      Bucket b;
      int64_t* dst[] = {&b.seq, &b.anchors, &b.batch};
      const char* sample[] = {" = 512", " = 16", " = 1"};
      for (size_t j = 0; j < kBucketKeys.size(); ++j) {
        const toml::node* v = t->get(kBucketKeys[j]);
        DF_CHECK(v, at << ": missing " << kBucketKeys[j] << "; every bucket needs seq, anchors and batch, e.g. "
                       << "{seq = 512, anchors = 16, batch = 1}");
        *dst[j] = read_int(*v, at, "buckets." + kBucketKeys[j], "buckets", kBucketKeys[j] + sample[j]);
      }
      cfg_.buckets.push_back(b);
    }
  }

  // A bad value: the key, where it came from, its value, what is wrong, and the default as a fix.
  void require(bool ok, const std::string& key, const std::string& problem) {
    if (ok) return;
    const Field* f = find_field(key);
    Config d;
    std::string def = value_text(d, *f);
    bool has_default = f->kind != Kind::optional_integer && def != "\"\"" && def != "[]";
    DF_FAIL(where(key) << ": " << key << " = " << value_text(cfg_, *f) << ": " << problem
                       << (has_default ? " (the default is " + def + ")" : ""));
  }
  void at_least(int64_t v, int64_t min, const std::string& key) {
    require(v >= min, key, "must be at least " + std::to_string(min));
  }
  void positive(double v, const std::string& key) { require(v > 0, key, "must be greater than 0"); }
  void non_negative(double v, const std::string& key) { require(v >= 0, key, "must be 0 or more"); }
  void unit(double v, const std::string& key, bool closed) {
    require(v >= 0 && (closed ? v <= 1 : v < 1), key,
            closed ? "must be in [0, 1]" : "must be in [0, 1) (0 <= value < 1)");
  }

  static bool valid_devices(const std::string& d) {
    if (d == "auto" || d == "cpu" || d == "cuda") return true;
    if (d.rfind("cuda:", 0) != 0) return false;
    std::set<std::string> seen;
    std::stringstream ss(d.substr(5));
    std::string id;
    int count = 0;
    while (std::getline(ss, id, ',')) {
      if (id.empty() || id.size() > 4 ||
          !std::all_of(id.begin(), id.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
        return false;
      if (!seen.insert(std::to_string(std::stoi(id))).second) return false;
      ++count;
    }
    return count > 0 && d.back() != ',';
  }

  void validate() {
    Config& c = cfg_;
    require(!c.job.name.empty(), "job.name", "must not be empty");
    require(!c.job.dump_folder.empty(), "job.dump_folder", "must not be empty");

    DF_CHECK(!c.target.path.empty(),
             file_ << ": target.path is required: the target's Hugging Face directory (config.json and "
                   << "*.safetensors); with [target.synthetic], the directory the random target is "
                   << "written to; add target.path = \"path/to/target\" under [target]");
    const SyntheticTargetConfig& st = c.target.synthetic;
    require(st.architecture == "qwen3" || st.architecture == "llama", "target.synthetic.architecture",
            "use \"qwen3\" or \"llama\"");
    for (const char* k : {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                          "num_key_value_heads", "head_dim"}) {
      std::string key = std::string("target.synthetic.") + k;
      at_least(*static_cast<int64_t*>(find_field(key)->at(c)), 1, key);
    }
    require(st.num_attention_heads % st.num_key_value_heads == 0, "target.synthetic.num_key_value_heads",
            "must divide target.synthetic.num_attention_heads = " + std::to_string(st.num_attention_heads));
    positive(st.rope_theta, "target.synthetic.rope_theta");
    non_negative(st.init_std, "target.synthetic.init_std");
    std::set<int64_t> ids;
    for (int64_t id : c.target.layer_ids) {
      require(id >= 0, "target.layer_ids", "layer ids must be 0 or more");
      require(ids.insert(id).second, "target.layer_ids",
              "lists layer " + std::to_string(id) + " twice; list each layer once");
      require(!st.enabled || id < st.num_hidden_layers, "target.layer_ids",
              "layer " + std::to_string(id) +
                  " does not exist: the synthetic target has target.synthetic.num_hidden_layers = " +
                  std::to_string(st.num_hidden_layers) + " layers (ids 0.." + std::to_string(st.num_hidden_layers - 1) +
                  ")");
    }

    const DrafterConfig& dr = c.drafter;
    at_least(dr.num_hidden_layers, 1, "drafter.num_hidden_layers");
    for (const char* k : {"intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim"}) {
      std::string key = std::string("drafter.") + k;
      require(*static_cast<int64_t*>(find_field(key)->at(c)) >= 0, key, "must be 0 or more (0 takes the target's)");
    }
    require(dr.num_attention_heads == 0 || dr.num_key_value_heads == 0 ||
                dr.num_attention_heads % dr.num_key_value_heads == 0,
            "drafter.num_key_value_heads",
            "must divide drafter.num_attention_heads = " + std::to_string(dr.num_attention_heads));
    at_least(dr.block_size, 1, "drafter.block_size");
    DF_CHECK(
        dr.mask_token_id.has_value(),
        file_
            << ": drafter.mask_token_id is required: pick an id the target's tokenizer never emits (DFlash adds a mask "
            << "token; Qwen3's vocabulary has unused ids); add mask_token_id = <id> under [drafter]");
    require(*dr.mask_token_id >= 0, "drafter.mask_token_id", "must be a token id, 0 or more");
    require(!st.enabled || *dr.mask_token_id < st.vocab_size, "drafter.mask_token_id",
            "must be below the synthetic target's vocab_size " + std::to_string(st.vocab_size));
    non_negative(dr.loss_decay_gamma, "drafter.loss_decay_gamma");
    positive(dr.rms_norm_eps, "drafter.rms_norm_eps");
    require(dr.rope_theta >= 0, "drafter.rope_theta", "must be 0 or more (0 takes the target's)");
    non_negative(dr.init_std, "drafter.init_std");

    const DataConfig& da = c.data;
    DF_CHECK(
        !da.train.empty() || da.synthetic.enabled,
        file_ << ": data.train is required: a JSONL file or a shard directory written by `dflash-train prepare`; add "
              << "train = \"path/to/train.jsonl\" under [data], or add a [data.synthetic] section to generate data "
                 "from the target");
    require(da.mode == "online" || da.mode == "offline", "data.mode",
            "use \"online\" (run the target during training) or \"offline\" (read hidden-state shards)");
    parse_overflow_policy(da.overflow, where("data.overflow") + ": data.overflow");
    const SyntheticDataConfig& sd = da.synthetic;
    at_least(sd.train_sequences, 1, "data.synthetic.train_sequences");
    at_least(sd.eval_sequences, 0, "data.synthetic.eval_sequences");
    at_least(sd.prompt_length, 1, "data.synthetic.prompt_length");
    require(sd.min_length > sd.prompt_length, "data.synthetic.min_length",
            "must exceed data.synthetic.prompt_length = " + std::to_string(sd.prompt_length) +
                " (the target continues the prompt)");
    require(sd.max_length >= sd.min_length, "data.synthetic.max_length",
            "must be at least data.synthetic.min_length = " + std::to_string(sd.min_length));
    non_negative(sd.temperature, "data.synthetic.temperature");

    const TrainingConfig& t = c.training;
    at_least(t.steps, 1, "training.steps");
    positive(t.lr, "training.lr");
    unit(t.min_lr_ratio, "training.min_lr_ratio", true);
    unit(t.warmup_ratio, "training.warmup_ratio", true);
    unit(t.beta1, "training.beta1", false);
    unit(t.beta2, "training.beta2", false);
    positive(t.eps, "training.eps");
    non_negative(t.weight_decay, "training.weight_decay");
    non_negative(t.max_grad_norm, "training.max_grad_norm");
    at_least(t.grad_accum, 1, "training.grad_accum");
    at_least(t.eval_every, 0, "training.eval_every");
    at_least(t.chunk_rows, 1, "training.chunk_rows");

    at_least(c.eval.spec_every, 0, "eval.spec_every");
    at_least(c.eval.spec_max_new_tokens, 1, "eval.spec_max_new_tokens");
    at_least(c.eval.spec_prefill_chunk, 1, "eval.spec_prefill_chunk");
    for (int64_t id : c.eval.spec_stop_token_ids)
      require(id >= 0 && id <= INT32_MAX, "eval.spec_stop_token_ids", "stop ids must be token ids, 0 or more");
    require(c.eval.spec_stop_token_ids.empty() || !c.eval.spec_ignore_eos, "eval.spec_ignore_eos",
            "contradicts eval.spec_stop_token_ids (stop ids given but ignored); drop one of the two");
    require(std::isfinite(c.eval.spec_temperature) && c.eval.spec_temperature >= 0 && c.eval.spec_temperature <= 100,
            "eval.spec_temperature", "must be 0 (greedy) or a temperature in (0, 100]");
    require(std::isfinite(c.eval.spec_top_p) && c.eval.spec_top_p > 0 && c.eval.spec_top_p <= 1, "eval.spec_top_p",
            "must be in (0, 1] (1: no nucleus cut)");
    at_least(c.eval.spec_top_k, 0, "eval.spec_top_k");

    at_least(c.generate.max_new_tokens, 1, "generate.max_new_tokens");
    at_least(c.generate.batch, 1, "generate.batch");
    at_least(c.generate.max_length, 0, "generate.max_length");
    at_least(c.generate.prefill_chunk, 1, "generate.prefill_chunk");
    require(std::isfinite(c.generate.temperature) && c.generate.temperature >= 0 && c.generate.temperature <= 100,
            "generate.temperature", "must be 0 (greedy) or a temperature in (0, 100] (--temperature)");
    require(std::isfinite(c.generate.top_p) && c.generate.top_p > 0 && c.generate.top_p <= 1, "generate.top_p",
            "must be in (0, 1] (1: no nucleus cut) (--top-p)");
    at_least(c.generate.top_k, 0, "generate.top_k");
    positive(c.generate.progress_every_s, "generate.progress_every_s");

    require(
        valid_devices(c.runtime.devices), "runtime.devices",
        "use \"auto\", \"cpu\", \"cuda\" (every GPU) or \"cuda:N[,M...]\" with distinct GPU ids, e.g. \"cuda:0,1\"");
    at_least(c.runtime.cpu_workers, 1, "runtime.cpu_workers");
    non_negative(c.runtime.memory_limit_gb, "runtime.memory_limit_gb");
    non_negative(c.runtime.arena_gb, "runtime.arena_gb");
    require(c.runtime.memory_limit_gb == 0 || c.runtime.arena_gb <= c.runtime.memory_limit_gb, "runtime.arena_gb",
            "exceeds runtime.memory_limit_gb, the most the arena may take; lower it or raise the limit");
    require(c.runtime.rendezvous_port >= 0 && c.runtime.rendezvous_port <= 65535, "runtime.rendezvous_port",
            "must be a TCP port in [1, 65535], or 0 for MASTER_PORT + 1");
    positive(c.runtime.rendezvous_timeout_s, "runtime.rendezvous_timeout_s");
    positive(c.runtime.heartbeat_timeout_s, "runtime.heartbeat_timeout_s");
    require(c.runtime.reduce_dtype == "f32" || c.runtime.reduce_dtype == "bf16", "runtime.reduce_dtype",
            "use \"f32\" (the default) or \"bf16\"");
    require(c.runtime.kernels == "auto" || c.runtime.kernels == "portable", "runtime.kernels",
            "use \"auto\" (the Hopper kernels on compute capability 9.0 where the build has them, the default) or "
            "\"portable\" (the portable kernels on any GPU)");
    const std::string& ta = c.runtime.target_attention;
    require(ta == "auto" || ta == "cudnn" || ta == "own", "runtime.target_attention",
            "use \"auto\" (cuDNN where the build has it, the default), \"cudnn\" (cuDNN's fused flash attention) or "
            "\"own\" (dflash's kernel)");
    require(ta != "cudnn" || cudnn_attention_built(), "runtime.target_attention",
            "asks for cuDNN, but this build has no cuDNN path (CMake found no cuDNN or no cudnn-frontend headers in "
            ".deps/cudnn-frontend): run scripts/setup.sh and rebuild, or use \"auto\" or \"own\"");
    at_least(c.checkpoint.every, 0, "checkpoint.every");
    at_least(c.checkpoint.keep, 1, "checkpoint.keep");
    at_least(c.metrics.log_every, 1, "metrics.log_every");
    std::set<std::string> trackers;
    for (const std::string& t : c.metrics.trackers) {
      require(t == "tensorboard" || t == "wandb", "metrics.trackers",
              quote(t) + " is not a tracker; the trackers are \"tensorboard\" and \"wandb\"");
      require(trackers.insert(t).second, "metrics.trackers", "lists " + quote(t) + " twice; list each tracker once");
    }
    require(c.metrics.wandb_mode.empty() || c.metrics.wandb_mode == "online" || c.metrics.wandb_mode == "offline",
            "metrics.wandb_mode",
            "use \"online\", \"offline\" (written under <dump_folder>/wandb, `wandb sync` uploads it later) or \"\" "
            "(WANDB_MODE, else online)");

    std::string bucket_source = overridden_.count("buckets") ? where("buckets") : file_;
    if (auto it = overridden_.find("drafter.block_size"); it != overridden_.end())
      bucket_source += " (with the block size from the command line: " + it->second + ")";
    validate_buckets(c.buckets, dr.block_size, bucket_source);
  }
};

}  // namespace

Config parse_config(const std::string& toml_text, const std::filesystem::path& source,
                    const std::vector<std::string>& overrides) {
  return Parser(source.string()).run(toml_text, overrides);
}

Config load_config(const std::filesystem::path& path, const std::vector<std::string>& overrides) {
  std::error_code ec;
  DF_CHECK(std::filesystem::is_regular_file(path, ec),
           "config file " << path.string()
                          << (std::filesystem::exists(path, ec) ? " is not a regular file" : " not found")
                          << " (looked in " << std::filesystem::absolute(path, ec).string()
                          << "); pass --config with the path of an existing TOML file, e.g. configs/tiny.toml");
  std::ifstream in(path, std::ios::binary);
  DF_CHECK(in, "config file " << path.string() << " cannot be read; check its permissions");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_config(text.str(), path, overrides);
}

}  // namespace dflash