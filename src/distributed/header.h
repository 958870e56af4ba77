// What each process says it is about to run before a collective moves any data: every process
// gathers every header and compares them (distributed.cpp), so a mismatch is an error on each.
#pragma once

#include <cstdint>
#include <sstream>
#include <string>

#include "kiln/tensor.h"

namespace kiln::distributed::detail {

// Finalize: the last exchange of a process that ends (finalize(), or exit), so that one still in
// a collective hears of it at once instead of waiting for the timeout.
enum class Kind : int32_t { AllReduce, Broadcast, AllGather, ReduceScatter, Barrier, Finalize };
inline const char* kind_name(Kind k) {
  static const char* names[] = {"all_reduce", "broadcast", "all_gather", "reduce_scatter", "barrier", "finalize"};
  return names[static_cast<int>(k)];
}

// What each process says it is about to run; all must agree before any data moves.
struct Header {
  // cuda: 0 host memory; 1 a GPU's (NCCL); 2 the same, the first collective on that GPU, which
  // creates its communicator (a collective call too: every process must create one at once).
  int32_t kind = 0, dtype = -1, op = -1, root = -1, ndim = 0, cuda = 0;
  int64_t numel = 0;
  int64_t dims[8] = {};     // the first 8, for messages
  uint64_t shape_hash = 0;  // every dim (a tensor may have more than 8)
  bool operator==(const Header& o) const {
    if (kind != o.kind || dtype != o.dtype || op != o.op || root != o.root || ndim != o.ndim || numel != o.numel ||
        cuda != o.cuda || shape_hash != o.shape_hash)
      return false;
    for (int i = 0; i < 8; ++i)
      if (dims[i] != o.dims[i]) return false;
    return true;
  }
  std::string describe() const {
    std::ostringstream os;
    os << kind_name(static_cast<Kind>(kind));
    if (static_cast<Kind>(kind) == Kind::Barrier) return os.str();
    if (static_cast<Kind>(kind) == Kind::Finalize) return "finalize (its process is ending)";
    os << " of " << dtype_name(static_cast<ScalarType>(dtype)) << " [";
    for (int i = 0; i < ndim && i < 8; ++i) os << (i ? ", " : "") << dims[i];
    if (ndim > 8) os << ", ... (" << ndim << " dims, shape hash " << shape_hash << ")";
    os << "]" << (cuda == 2 ? " on a GPU (the first there: creates its NCCL communicator)" : cuda ? " on a GPU" : "");
    if (root >= 0) os << " from rank " << root;
    if (op >= 0)
      os << " (" << (op == 0 ? "sum" : op == 1 ? "average" : op == 2 ? "max" : op == 3 ? "min" : "sum in its own dtype")
         << ")";
    return os.str();
  }
};

inline Header header_of(Kind kind, const Tensor* t, int op = -1, int root = -1) {
  Header h;
  h.kind = static_cast<int32_t>(kind);
  h.op = op;
  h.root = root;
  if (t) {
    h.dtype = static_cast<int32_t>(t->dtype());
    h.ndim = static_cast<int32_t>(t->dim());
    h.numel = t->numel();
    h.cuda = t->device().is_cuda() ? 1 : 0;
    for (int64_t i = 0; i < t->dim() && i < 8; ++i) h.dims[i] = t->size(i);
    h.shape_hash = 14695981039346656037ull;  // FNV-1a over the dims
    for (int64_t d : t->shape()) h.shape_hash = (h.shape_hash ^ static_cast<uint64_t>(d)) * 1099511628211ull;
  }
  return h;
}

}  // namespace kiln::distributed::detail
