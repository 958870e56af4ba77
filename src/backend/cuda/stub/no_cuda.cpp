// kiln::cuda in a build without the CUDA toolkit: no devices, and anything that needs one is an
// error that says so.
#include "kiln/cuda.h"
#include "kiln/error.h"

namespace kiln::cuda {
namespace {
[[noreturn]] void absent(const char* where) {
  KILN_FAIL(where, "Kiln was built without CUDA (configure with the CUDA toolkit installed, -DKILN_WITH_CUDA=ON)");
}
}  // namespace

DeviceProperties get_device_properties(int) { absent("cuda::get_device_properties"); }
std::string get_device_name(int) { absent("cuda::get_device_name"); }
Stream Stream::default_stream(int) { absent("cuda::Stream::default_stream"); }
Stream Stream::create(int, bool) { absent("cuda::Stream::create"); }
Stream Stream::from_native(void*, int) { absent("cuda::Stream::from_native"); }
bool Stream::query() const { absent("cuda::Stream::query"); }
void Stream::synchronize() const { absent("cuda::Stream::synchronize"); }
void Stream::wait(const Stream&) const { absent("cuda::Stream::wait"); }
Stream current_stream(int) { absent("cuda::current_stream"); }
StreamGuard::StreamGuard(const Stream&) { absent("cuda::StreamGuard"); }
StreamGuard::~StreamGuard() = default;
Event::Event(int, bool) { absent("cuda::Event"); }
Event::~Event() = default;
Event::Event(Event&&) noexcept = default;
Event& Event::operator=(Event&&) noexcept = default;
void Event::record(const Stream&) { absent("cuda::Event::record"); }
void Event::record() { absent("cuda::Event::record"); }
bool Event::query() const { absent("cuda::Event::query"); }
void Event::synchronize() const { absent("cuda::Event::synchronize"); }
void Event::wait(const Stream&) const { absent("cuda::Event::wait"); }
void Event::wait() const { absent("cuda::Event::wait"); }
double Event::elapsed_ms(const Event&) const { absent("cuda::Event::elapsed_ms"); }
void record_stream(const Tensor&, const Stream&) { absent("record_stream"); }
void set_allow_tf32(bool) {}
bool allow_tf32() { return false; }
std::vector<std::string> get_arch_list() { return {}; }
std::string runtime_version() { return ""; }
std::string cublas_version() { return ""; }
std::string cudnn_version() { return ""; }
}  // namespace kiln::cuda
