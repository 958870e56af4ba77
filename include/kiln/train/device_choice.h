// The device a job runs on: the one asked for, or the best one present that runs the job's ops
// natively (a GPU whose backend lacks kernels would only run them through the CPU fallback).
#pragma once

#include <functional>
#include <string>

#include "kiln/device.h"

namespace kiln::train {

// The device a name means: "cpu", "cuda", "cuda:N" (which must be present; else an error
// naming `where`).
Device parse_device(const std::string& name, const char* where = "kiln train");

struct DeviceChoice {
  Device device;
  std::string note;  // why a present GPU was not taken, for the job's first line; empty otherwise
};

// `requested` non-empty: that device. Empty: cuda:0 when it is present and has a kernel for every
// op kind that `probe` dispatches (probe runs one small step of the job on the CPU, with the
// random generator's state restored afterwards), else the CPU with a note such as
// "cuda:0 present but lacks kernels for 37 ops; --device cuda to use it anyway", or one that
// says the build has no GPU code for cuda:0's architecture and how to rebuild.
DeviceChoice choose_device(const std::string& requested, const std::function<void()>& probe);

}  // namespace kiln::train
