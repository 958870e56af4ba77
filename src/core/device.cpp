// Device names and parsing.
#include "kiln/device.h"

#include "kiln/error.h"

namespace kiln {

Device::Device(const std::string& spec) {
  auto colon = spec.find(':');
  std::string kind = spec.substr(0, colon);
  if (kind == "cpu") {
    type = DeviceType::CPU;
  } else if (kind == "cuda") {
    type = DeviceType::CUDA;
  } else {
    KILN_FAIL("Device", "unknown device '", spec, "' (expected cpu, cuda or cuda:N)");
  }
  index = type == DeviceType::CPU ? 0 : -1;
  if (colon != std::string::npos) {
    std::string num = spec.substr(colon + 1);
    bool digits = !num.empty() && num.size() < 6 &&
                  num.find_first_not_of("0123456789") == std::string::npos;
    KILN_CHECK(digits, "Device", "bad device index in '", spec, "'");
    index = std::stoi(num);
    KILN_CHECK(type != DeviceType::CPU || index == 0, "Device", "the CPU has only index 0, got '", spec, "'");
  }
}

std::string Device::str() const {
  if (type == DeviceType::CPU) return "cpu";
  return has_index() ? "cuda:" + std::to_string(index) : "cuda";
}

std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

}  // namespace kiln
