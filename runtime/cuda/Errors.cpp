//===- Errors.cpp - The CUDA backend's user-facing messages ---------------===//

#include "runtime/cuda/Errors.h"

#include <cstdio>

namespace ampc::cuda {

std::string formatCudaVersion(int version) {
  return std::to_string(version / 1000) + "." + std::to_string((version % 1000) / 10);
}

std::string formatBytes(uint64_t bytes) {
  static const char *const units[] = {"kB", "MB", "GB", "TB"};
  if (bytes < 1000)
    return std::to_string(bytes) + " B";
  double value = static_cast<double>(bytes) / 1000.0;
  int unit = 0;
  // Move up while the value would print as 1000.0 or more in this unit.
  while (value >= 999.95 && unit < 3) {
    value /= 1000.0;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, "%.1f %s", value, units[unit]);
  return text;
}

std::string minimumDriverBranch(int version) {
  // The first driver branch of each CUDA major release (NVIDIA's CUDA
  // compatibility tables): a driver of that branch or newer runs code built
  // by any minor release of the toolkit.
  switch (version / 1000) {
  case 11:
    return "R450";
  case 12:
    return "R525";
  case 13:
    return "R580";
  default:
    return "";
  }
}

std::string stubDriverMessage(const std::string &library) {
  return "no NVIDIA driver found (" + library +
         " is the CUDA toolkit's stub library, not a driver): use --device cpu";
}

std::string noDeviceMessage(const std::string &cause) {
  return "no CUDA GPU found (" + cause + "): use --device cpu";
}

std::string deviceIndexMessage(int index, int count) {
  return "CUDA device " + std::to_string(index) + " was requested, but only " +
         std::to_string(count) + (count == 1 ? " GPU is" : " GPUs are") +
         " visible (devices are numbered from 0; CUDA_VISIBLE_DEVICES limits "
         "which are visible)";
}

std::string driverTooOldMessage(int installedVersion, int requiredVersion,
                                const std::string &what) {
  const std::string branch = minimumDriverBranch(requiredVersion);
  return "the NVIDIA driver is too old: it supports CUDA " + formatCudaVersion(installedVersion) +
         ", and CUDA " + formatCudaVersion(requiredVersion) + " or newer" +
         (branch.empty() ? "" : " (driver " + branch + " or later)") + " is needed for " + what +
         ": update the NVIDIA driver or use --device cpu";
}

std::string bf16UnsupportedMessage(int index, const std::string &deviceName, int major, int minor) {
  return "GPU " + std::to_string(index) + " (" + deviceName + ") has compute capability " +
         std::to_string(major) + "." + std::to_string(minor) +
         " and cannot run bf16 kernels (they need 8.0 or newer): compile the "
         "model with --precision fp16";
}

uint64_t suggestedMemoryBudget(uint64_t usableBytes) {
  const uint64_t budget = usableBytes / 10 * 9;
  const uint64_t step = budget >= 1000000000ull ? 100000000ull : 1000000ull;
  return budget / step * step;
}

std::string formatBudget(uint64_t bytes) {
  if (bytes >= 1000000000ull)
    return std::to_string(bytes / 1000000000ull) + "." + std::to_string(bytes / 100000000ull % 10) +
           "GB";
  return std::to_string(bytes / 1000000ull) + "MB";
}

std::string outOfMemoryMessage(const std::string &what, uint64_t requested, uint64_t freeBytes,
                               uint64_t totalBytes, uint64_t heldBytes, int index,
                               const std::string &deviceName) {
  std::string message = "out of GPU memory allocating " + what + ": " + formatBytes(requested) +
                        " (" + std::to_string(requested) + " bytes) requested, " +
                        formatBytes(freeBytes) + " of " + formatBytes(totalBytes) +
                        " free on GPU " + std::to_string(index) + " (" + deviceName + ")";
  if (heldBytes > 0)
    message += " with " + formatBytes(heldBytes) + " already held by this program";
  const uint64_t budget = suggestedMemoryBudget(freeBytes + heldBytes);
  if (budget == 0)
    return message + ": the GPU is full; end the processes that hold its "
                     "memory (nvidia-smi lists them) or use --device cpu";
  message += ": compile with --memory-budget " + formatBudget(budget) + " or a smaller batch";
  // Much of the GPU is neither free nor ours: someone else holds it.
  if (freeBytes + heldBytes < totalBytes / 2)
    message += ", or end the other processes using the GPU (nvidia-smi)";
  return message;
}

std::string driverCallMessage(const std::string &call, const std::string &name,
                              const std::string &description, const std::string &doing) {
  std::string message = call + " failed: " + name;
  if (!description.empty())
    message += " (" + description + ")";
  if (!doing.empty())
    message += " while " + doing;
  return message;
}

} // namespace ampc::cuda
