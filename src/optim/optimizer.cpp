// Optimizer's shared machinery: parameter groups, zero_grad, state_dict and its checked loading.
#include "kiln/optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <string_view>
#include <unordered_set>

#include "kiln/autograd.h"
#include "kiln/ops.h"

namespace kiln::optim {
namespace {

// Option values take the kind of the default they override, so {"momentum", 0} is a float.
Scalar as_kind(Scalar v, Scalar::Kind kind) {
  switch (kind) {
    case Scalar::Kind::Bool: return Scalar(v.to<bool>());
    case Scalar::Kind::Int: return Scalar(v.to_int());
    default: return Scalar(v.to_double());
  }
}

std::string names_of(const std::map<std::string, Scalar>& m) {
  std::string s;
  for (const auto& [k, v] : m) s += (s.empty() ? "" : ", ") + k;
  return s;
}

// A decimal index of at most 9 digits (keys come from files: no exceptions, no overflow).
std::optional<size_t> parse_index(std::string_view s) {
  if (s.empty() || s.size() > 9) return std::nullopt;
  size_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<size_t>(c - '0');
  }
  return v;
}

// "prefix<index>.<rest>" -> (index, rest).
std::optional<std::pair<size_t, std::string>> split_key(const std::string& key, std::string_view prefix) {
  if (key.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  size_t dot = key.find('.', prefix.size());
  if (dot == std::string::npos || dot + 1 == key.size()) return std::nullopt;
  auto index = parse_index(std::string_view(key).substr(prefix.size(), dot - prefix.size()));
  if (!index) return std::nullopt;
  return std::make_pair(*index, key.substr(dot + 1));
}

Tensor number_tensor(Scalar v) {
  return v.is_floating_point() ? scalar_tensor(v.to_double(), kFloat64) : scalar_tensor(v.to_int(), kInt64);
}

}  // namespace

double OptimizerParamGroup::get(const std::string& name) const {
  auto it = options_.find(name);
  KILN_CHECK(it != options_.end(), "OptimizerParamGroup::get", "no option '", name, "' in this group (it has: ",
             names_of(options_), ")");
  return it->second.to_double();
}

Optimizer::Optimizer(std::string name, std::map<std::string, Scalar> defaults, std::vector<std::string> state_names,
                     std::vector<std::string> counter_names)
    : name_(std::move(name)), defaults_(std::move(defaults)), state_names_(std::move(state_names)),
      counter_names_(std::move(counter_names)) {}

void Optimizer::add_param_group(OptimizerParamGroup group) {
  const std::string where = name_ + "::add_param_group";
  const size_t g = groups_.size();
  for (auto& [key, value] : group.options()) {
    auto d = defaults_.find(key);
    KILN_CHECK(d != defaults_.end(), where.c_str(), "unknown option '", key, "' in param group ", g, " (", name_,
               " has: ", names_of(defaults_), ")");
    value = as_kind(value, d->second.kind());
  }
  for (const auto& [key, value] : defaults_) group.options().emplace(key, value);
  check_options(group.options(), where);

  std::unordered_set<const TensorImpl*> seen;
  for (const auto& other : groups_)
    for (const Tensor& p : other.params()) seen.insert(p.impl());
  for (size_t i = 0; i < group.params().size(); ++i) {
    const Tensor& p = group.params()[i];
    KILN_CHECK(p.defined(), where.c_str(), "parameter ", i, " of param group ", g, " is an undefined tensor");
    KILN_CHECK(p.is_leaf(), where.c_str(), "parameter ", i, " of param group ", g,
               " is not a leaf tensor (it has a grad_fn); an optimizer can only update leaves");
    KILN_CHECK(p.is_floating_point(), where.c_str(), "parameter ", i, " of param group ", g, " has dtype ",
               p.dtype(), "; parameters must be floating point");
    KILN_CHECK(seen.insert(p.impl()).second, where.c_str(), "parameter ", i, " of param group ", g,
               " appears more than once in the optimizer's param groups");
  }
  groups_.push_back(std::move(group));
}

std::vector<Tensor> Optimizer::parameters() const {
  std::vector<Tensor> all;
  for (const auto& g : groups_) all.insert(all.end(), g.params().begin(), g.params().end());
  return all;
}

const std::map<std::string, Tensor>& Optimizer::state(const Tensor& param) const {
  static const std::map<std::string, Tensor> kEmpty;
  auto it = state_.find(param.impl());
  return it == state_.end() ? kEmpty : it->second;
}

void Optimizer::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (auto& g : groups_)
    for (Tensor& p : g.params()) {
      if (set_to_none) {
        if (p.grad().defined()) p.set_grad(Tensor());
      } else if (Tensor grad = p.grad(); grad.defined()) {
        grad.zero_();
      }
    }
}

std::map<std::string, Tensor> Optimizer::state_dict() const {
  std::map<std::string, Tensor> out;
  int64_t index = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::string prefix = "param_groups." + std::to_string(g) + ".";
    std::vector<int64_t> ids;
    for (const Tensor& p : groups_[g].params()) {
      ids.push_back(index);
      auto it = state_.find(p.impl());
      if (it != state_.end())
        for (const auto& [name, t] : it->second) out["state." + std::to_string(index) + "." + name] = t;
      ++index;
    }
    out[prefix + "params"] = tensor(ids, Shape{static_cast<int64_t>(ids.size())}, kInt64);
    for (const auto& [key, value] : groups_[g].options()) out[prefix + key] = number_tensor(value);
  }
  return out;
}

void Optimizer::check_state_matches_params(const char* where) const {
  for (size_t g = 0; g < groups_.size(); ++g)
    for (size_t i = 0; i < groups_[g].params().size(); ++i) {
      const Tensor& p = groups_[g].params()[i];
      auto it = state_.find(p.impl());
      if (it == state_.end()) continue;
      for (const std::string& name : state_names_) {
        auto t = it->second.find(name);
        if (t == it->second.end() || !t->second.defined()) continue;
        const Tensor& s = t->second;
        KILN_CHECK(s.shape() == p.shape() && s.dtype() == p.dtype() && s.device() == p.device(), where, "the ", name,
                   " of parameter ", i, " of param group ", g, " is ", s.dtype(), " ", s.shape(), " on ",
                   s.device().str(), " but the parameter is ", p.dtype(), " ", p.shape(), " on ", p.device().str(),
                   " (converted after the optimizer was made? make the optimizer after model->to())");
      }
    }
}

void Optimizer::load_state_dict(const std::map<std::string, Tensor>& sd) {
  const std::string where_s = name_ + "::load_state_dict";
  const char* where = where_s.c_str();
  const std::vector<Tensor> params = parameters();
  const std::set<std::string> state_names(state_names_.begin(), state_names_.end());
  const std::set<std::string> counter_names(counter_names_.begin(), counter_names_.end());

  std::vector<std::map<std::string, Scalar>> options(groups_.size());
  std::vector<bool> has_params(groups_.size(), false);
  std::unordered_map<const TensorImpl*, std::map<std::string, Tensor>> state;
  for (const auto& [key, t] : sd) {
    KILN_CHECK(t.defined(), where, "'", key, "' is an undefined tensor");
    if (auto gk = split_key(key, "param_groups.")) {
      const auto& [g, opt] = *gk;
      KILN_CHECK(g < groups_.size(), where, "'", key, "' is for param group ", g, " but the optimizer has ",
                 groups_.size(), " param groups");
      if (opt == "params") {
        const int64_t want = static_cast<int64_t>(groups_[g].params().size());
        KILN_CHECK(t.dtype() == kInt64 && t.dim() == 1, where, "'", key, "' must be a 1-d int64 tensor, got dtype ",
                   t.dtype(), " shape ", t.shape());
        KILN_CHECK(t.numel() == want, where, "param group ", g, " has ", t.numel(),
                   " parameters in the state dict but ", want, " in the optimizer");
        has_params[g] = true;
        continue;
      }
      KILN_CHECK(t.dim() == 0, where, "'", key, "' must be a 0-d tensor, got shape ", t.shape());
      auto d = defaults_.find(opt);
      const bool want_float = d == defaults_.end() ? t.is_floating_point() : d->second.is_floating_point();
      KILN_CHECK(t.dtype() == (want_float ? kFloat64 : kInt64), where, "'", key, "' has dtype ", t.dtype(),
                 ", expected ", want_float ? kFloat64 : kInt64);
      Scalar v = want_float ? Scalar(t.item<double>()) : Scalar(t.item<int64_t>());
      options[g][opt] = d == defaults_.end() ? v : as_kind(v, d->second.kind());
    } else if (auto sk = split_key(key, "state.")) {
      const auto& [i, name] = *sk;
      KILN_CHECK(i < params.size(), where, "'", key, "' is for parameter ", i, " but the optimizer has ",
                 params.size(), " parameters");
      const Tensor& p = params[i];
      if (counter_names.count(name)) {
        KILN_CHECK(t.dim() == 0 && t.dtype() == kFloat32, where, "'", key, "' must be a 0-d float32 tensor, got ",
                   t.dtype(), " of shape ", t.shape());
        const float v = t.to(Device::cpu()).item<float>();
        KILN_CHECK(std::isfinite(v) && v >= 0 && v == std::floor(v), where, "'", key,
                   "' must hold a whole number of steps, got ", v);
        state[p.impl()][name] = t;
        continue;
      }
      KILN_CHECK(state_names.count(name), where, "unexpected key '", key, "' (", name_,
                 " keeps no state named '", name, "')");
      KILN_CHECK(t.shape() == p.shape(), where, "'", key, "' has shape ", t.shape(), " but parameter ", i,
                 " has shape ", p.shape());
      // Cast to the parameter's dtype at commit, as PyTorch does: float32 state loads into a
      // model converted to float64 (or to bfloat16).
      KILN_CHECK(t.is_floating_point(), where, "'", key, "' has dtype ", t.dtype(),
                 "; optimizer state must be floating point");
      state[p.impl()][name] = t;
    } else {
      KILN_FAIL(where, "unexpected key '", key, "'");
    }
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::string prefix = "param_groups." + std::to_string(g) + ".";
    KILN_CHECK(has_params[g], where, "missing key '", prefix, "params'");
    for (const auto& [key, value] : defaults_) {
      // An option added after a checkpoint was written is off there (torch's __setstate__ sets
      // "maximize" to False in older dicts).
      if (!options[g].count(key) && key == "maximize") options[g][key] = Scalar(false);
      KILN_CHECK(options[g].count(key), where, "missing key '", prefix, key, "'");
    }
    check_options(options[g], where_s);
  }
  // A parameter with some state has all of it (a filtered or converted state dict without Adam's
  // exp_avg_sq gave a first update many times the learning rate, silently).
  size_t i = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::vector<std::string> required = required_state(options[g]);
    for (const Tensor& p : groups_[g].params()) {
      auto it = state.find(p.impl());
      for (const std::string& name : required)
        KILN_CHECK(it == state.end() || it->second.count(name), where, "missing key 'state.", i, ".", name,
                   "' (parameter ", i, " has other state, and ", name_, " keeps all of it or none)");
      ++i;
    }
  }

  // Everything checked: commit. The optimizer owns copies, in each parameter's dtype and on its
  // device; counters ("step") stay as they are, float32 on the CPU (PyTorch keeps 'step' too).
  NoGradGuard no_grad;
  for (auto& [impl, named] : state)
    for (auto& [name, t] : named) {
      const bool counter = counter_names.count(name) != 0;
      const Device device = counter ? Device::cpu() : impl->storage->device;
      const ScalarType dtype = counter ? t.dtype() : impl->dtype;
      t = t.device() == device && t.dtype() == dtype ? t.clone() : t.to(device, dtype);
    }
  state_ = std::move(state);
  for (size_t g = 0; g < groups_.size(); ++g) groups_[g].options() = std::move(options[g]);
}

const std::map<std::string, Scalar>& Optimizer::group_options(size_t group) const {
  KILN_CHECK(group < groups_.size(), (name_ + "::options").c_str(), "param group ", group, " out of range (",
             groups_.size(), " groups)");
  return groups_[group].options();
}

Tensor Optimizer::run_closure(const LossClosure& closure) {
  if (!closure) return {};
  AutoGradMode enable(true);
  return closure();
}

}  // namespace kiln::optim
