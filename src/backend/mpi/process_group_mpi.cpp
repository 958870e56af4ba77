// kiln::distributed's MPI transport: MPI_COMM_WORLD, collectives with MPI's own algorithms
// (shared memory on one machine, TCP or a fabric between machines), every call checked.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
#include <thread>

#include "core/parse_number.h"
#include "distributed/process_group.h"
#include "kiln/dtype.h"
#include "kiln/error.h"

namespace kiln::distributed::detail {
namespace {

// Errors come back as return codes (MPI_ERRORS_RETURN) and become a kiln::Error naming the call.
#define KILN_MPI_CHECK(expr)                                                    \
  do {                                                                          \
    const int kiln_mpi_rc = (expr);                                             \
    if (kiln_mpi_rc != MPI_SUCCESS) [[unlikely]] fail_mpi(#expr, kiln_mpi_rc);  \
  } while (0)

// KILN_DISTRIBUTED_TIMEOUT: how long a collective waits for every process to reach it, in
// seconds (default 1800, torch.distributed's default for its CPU backend; 0: forever). Read once.
double rendezvous_timeout() {
  static const double seconds = [] {
    const char* v = std::getenv("KILN_DISTRIBUTED_TIMEOUT");
    if (v == nullptr || *v == 0) return 1800.0;
    const std::optional<double> s = kiln::detail::parse_number<double>(v);
    KILN_CHECK(s && *s >= 0, "distributed", "KILN_DISTRIBUTED_TIMEOUT must be a number of seconds >= 0, got \"",
               v, "\"");
    return *s;
  }();
  return seconds;
}

[[noreturn]] void fail_mpi(const char* call, int rc) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  MPI_Error_string(rc, text, &len);
  KILN_FAIL("distributed", call, " failed: ", std::string(text, static_cast<size_t>(len)));
}

MPI_Datatype mpi_type(Elem e) {
  switch (e) {
    case Elem::Float16:
    case Elem::BFloat16: return MPI_UINT16_T;
    case Elem::Bool: return MPI_C_BOOL;
    case Elem::UInt8: return MPI_UINT8_T;
    case Elem::Int32: return MPI_INT32_T;
    case Elem::Int64: return MPI_INT64_T;
    case Elem::Float32: return MPI_FLOAT;
    case Elem::Float64: return MPI_DOUBLE;
  }
  return MPI_BYTE;
}

// Sums of 16-bit floats in their own type: each pair added in float and rounded back.
template <class T>
void sum16(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) {
    T x, y;
    x.bits = a[i];
    y.bits = b[i];
    b[i] = T(static_cast<float>(x) + static_cast<float>(y)).bits;
  }
}

// The reduction of 16-bit floats (a sum), made once after MPI_Init, on the communication thread.
template <class T>
MPI_Op sum16_op() {
  static MPI_Op op = [] {
    MPI_Op made;
    KILN_MPI_CHECK(MPI_Op_create(&sum16<T>, /*commute=*/1, &made));
    return made;
  }();
  return op;
}

MPI_Op mpi_op(Elem e, ReduceOp op) {
  if (e == Elem::Bool) return op == ReduceOp::Min ? MPI_LAND : MPI_LOR;
  if (e == Elem::Float16 || e == Elem::BFloat16) {
    KILN_CHECK(op == ReduceOp::Sum, "distributed", "16-bit floats reduce in their own type by sums only");
    return e == Elem::Float16 ? sum16_op<Half>() : sum16_op<BFloat16>();
  }
  switch (op) {
    case ReduceOp::Max: return MPI_MAX;
    case ReduceOp::Min: return MPI_MIN;
    default: return MPI_SUM;  // Average: a sum, divided by the caller
  }
}

// MPI counts are int: larger buffers go in pieces of at most 2^30 elements (fewer under
// KILN_TEST_MPI_MAX_COUNT, which lets the tests take the pieces' path with small tensors).
constexpr int64_t kMaxCount = int64_t{1} << 30;
int64_t max_count() {
  static const int64_t count = [] {
    const char* v = std::getenv("KILN_TEST_MPI_MAX_COUNT");
    if (v == nullptr || *v == 0) return kMaxCount;
    const std::optional<int64_t> n = kiln::detail::parse_number<int64_t>(v);
    KILN_CHECK(n && *n >= 1 && *n <= kMaxCount, "distributed", "KILN_TEST_MPI_MAX_COUNT must be 1 to 2^30, got \"", v,
               "\"");
    return *n;
  }();
  return count;
}

// `n` bytes whose extent is `stride` bytes: all_gather receives piece i of every rank's block in
// one call with it; freed with it.
struct StridedPiece {
  MPI_Datatype type = MPI_DATATYPE_NULL;
  StridedPiece(int n, int64_t stride) {
    MPI_Datatype run = MPI_DATATYPE_NULL;
    KILN_MPI_CHECK(MPI_Type_contiguous(n, MPI_BYTE, &run));
    const int rc = MPI_Type_create_resized(run, 0, static_cast<MPI_Aint>(stride), &type);
    MPI_Type_free(&run);
    KILN_MPI_CHECK(rc);
    KILN_MPI_CHECK(MPI_Type_commit(&type));
  }
  ~StridedPiece() {
    if (type != MPI_DATATYPE_NULL) MPI_Type_free(&type);
  }
  StridedPiece(const StridedPiece&) = delete;
  StridedPiece& operator=(const StridedPiece&) = delete;
};

class MpiGroup final : public ProcessGroup {
 public:
  MpiGroup() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    KILN_CHECK(!initialized, "distributed", "MPI was initialised outside Kiln; call kiln::distributed::init() instead");
    int provided = 0;
    // FUNNELED: this thread (kiln::distributed's communication thread) makes every call.
    KILN_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided));
    KILN_CHECK(provided >= MPI_THREAD_FUNNELED, "distributed", "this MPI library does not support threads");
    KILN_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    KILN_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
    KILN_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));
    MPI_Comm local;
    KILN_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local));
    KILN_MPI_CHECK(MPI_Comm_rank(local, &local_rank_));
    KILN_MPI_CHECK(MPI_Comm_free(&local));
  }

  int rank() const override { return rank_; }
  int world_size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  std::string name() const override { return "mpi"; }

  void all_reduce(void* data, int64_t count, Elem elem, ReduceOp op) override {
    const size_t esize = elem_size(elem);
    for (int64_t i = 0; i < count; i += max_count()) {
      const int n = static_cast<int>(std::min(max_count(), count - i));
      KILN_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, static_cast<char*>(data) + i * esize, n, mpi_type(elem),
                                   mpi_op(elem, op), MPI_COMM_WORLD));
    }
  }

  void broadcast(void* data, int64_t bytes, int root) override {
    for (int64_t i = 0; i < bytes; i += max_count()) {
      const int n = static_cast<int>(std::min(max_count(), bytes - i));
      KILN_MPI_CHECK(MPI_Bcast(static_cast<char*>(data) + i, n, MPI_BYTE, root, MPI_COMM_WORLD));
    }
  }

  void all_gather(const void* in, void* out, int64_t bytes) override {
    if (bytes <= max_count()) {
      KILN_MPI_CHECK(MPI_Allgather(in, static_cast<int>(bytes), MPI_BYTE, out, static_cast<int>(bytes), MPI_BYTE,
                                   MPI_COMM_WORLD));
      return;
    }
    // Piece [i, i + n) of every rank lands at its place in that rank's block of `out`.
    for (int64_t i = 0; i < bytes; i += max_count()) {
      const int n = static_cast<int>(std::min(max_count(), bytes - i));
      const StridedPiece piece(n, bytes);
      KILN_MPI_CHECK(MPI_Allgather(static_cast<const char*>(in) + i, n, MPI_BYTE, static_cast<char*>(out) + i, 1,
                                   piece.type, MPI_COMM_WORLD));
    }
  }

  void rendezvous(const void* in, void* out, int64_t bytes, bool timed) override {
    const double limit = timed ? rendezvous_timeout() : 0;
    const auto t0 = std::chrono::steady_clock::now();
    MPI_Request request;
    KILN_MPI_CHECK(MPI_Iallgather(in, static_cast<int>(bytes), MPI_BYTE, out, static_cast<int>(bytes), MPI_BYTE,
                                  MPI_COMM_WORLD, &request));
    // MPI_Test drives the exchange; between tries this thread sleeps (tens of microseconds)
    // rather than spin as a blocking MPI call would.
    for (int64_t tries = 0;; ++tries) {
      int flag = 0;
      KILN_MPI_CHECK(MPI_Test(&request, &flag, MPI_STATUS_IGNORE));
      if (flag) break;
      if (tries > 16) std::this_thread::sleep_for(std::chrono::microseconds(20));
      // A process that never comes (stuck, or dead without its launcher noticing) ends the job
      // instead of a silent hang, as torch.distributed's timeout does. Here, not by an exception:
      // the pending exchange still owns `out`, and no later collective could be trusted.
      if (limit > 0 && (tries & 1023) == 0 &&
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > limit) {
        std::fprintf(stderr,
                     "[distributed] rank %d failed: not every process reached this collective within %g s: one is "
                     "stuck, or has died (KILN_DISTRIBUTED_TIMEOUT sets the limit in seconds; 0 waits forever)\n",
                     rank_, limit);
        std::fflush(nullptr);  // and what the process printed before, in its log
        abort(1);
      }
    }
  }

  void reduce_scatter(const void* in, void* out, int64_t count, Elem elem, ReduceOp op) override {
    if (count <= max_count()) {
      KILN_MPI_CHECK(MPI_Reduce_scatter_block(in, out, static_cast<int>(count), mpi_type(elem), mpi_op(elem, op),
                                              MPI_COMM_WORLD));
      return;
    }
    // Piece [i, i + n) of every rank's share of `in`, packed side by side (Open MPI refuses a
    // predefined reduction on a strided type), reduced into piece [i, i + n) of `out`; the
    // packed pieces take at most 256 MiB.
    const auto esize = static_cast<int64_t>(elem_size(elem));
    const int64_t piece = std::max<int64_t>(1, std::min(max_count(), (int64_t{256} << 20) / esize / size_));
    std::vector<char> packed(static_cast<size_t>(size_ * std::min(piece, count) * esize));
    for (int64_t i = 0; i < count; i += piece) {
      const int64_t n = std::min(piece, count - i);
      for (int64_t r = 0; r < size_; ++r)
        std::memcpy(packed.data() + r * n * esize, static_cast<const char*>(in) + (r * count + i) * esize,
                    static_cast<size_t>(n * esize));
      KILN_MPI_CHECK(MPI_Reduce_scatter_block(packed.data(), static_cast<char*>(out) + i * esize, static_cast<int>(n),
                                              mpi_type(elem), mpi_op(elem, op), MPI_COMM_WORLD));
    }
  }

  void barrier() override { KILN_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD)); }

  [[noreturn]] void abort(int code) override {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);  // MPI_Abort does not return; this is for the compiler
  }

  void finalize() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }

 private:
  static size_t elem_size(Elem e) {
    switch (e) {
      case Elem::Bool:
      case Elem::UInt8: return 1;
      case Elem::Float16:
      case Elem::BFloat16: return 2;
      case Elem::Int32:
      case Elem::Float32: return 4;
      default: return 8;
    }
  }
  int rank_ = 0, size_ = 1, local_rank_ = 0;
};

}  // namespace

std::string mpi_version() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int len = 0;
  if (MPI_Get_library_version(text, &len) != MPI_SUCCESS) return "unknown version";
  std::string v(text, static_cast<size_t>(std::max(len, 0)));
  v = v.substr(0, v.find_first_of("\n,"));  // "Open MPI v4.1.4, package: ..." -> "Open MPI v4.1.4"
  return v;
}

std::unique_ptr<ProcessGroup> make_mpi_group() { return std::make_unique<MpiGroup>(); }

}  // namespace kiln::distributed::detail
