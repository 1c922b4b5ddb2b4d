//===- HostKernel.h - A generated kernel compiled for the device emulator -===//
//
// A generated kernel's CUDA source compiled as host C++ (test/unit/emulation's DeviceEmulator.h
// included first) into a shared library whose entry unpacks a cuLaunchKernel-style argument
// array and runs the kernel's grid thread by thread in the emulator. The including target
// defines AMPC_SOURCE_DIR and AMPC_DEVICE_EMULATOR_LIBRARY and links the dl library; the host
// compiler is $CXX, else c++, without floating-point contraction (as the CPU backend is built),
// so every f32 operation of the kernel rounds on its own and can be compared bit for bit.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_TEST_UNIT_COMPILER_HOSTKERNEL_H
#define AMPC_TEST_UNIT_COMPILER_HOSTKERNEL_H

#include "compiler/cuda/CudaCodegen.h"
#include "compiler/cuda/DeviceProgramBuilder.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace ampc::test {

/// A generated kernel compiled for the host.
class HostKernel {
public:
  using Entry = void (*)(unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void **);

  /// Compiles \p kernel into \p directory; ok() is false (with the compiler's output in
  /// error()) when that fails.
  HostKernel(const GeneratedKernel &kernel, const std::filesystem::path &directory) {
    const std::filesystem::path source = directory / (kernel.name + ".cpp");
    const std::filesystem::path library = directory / (kernel.name + ".so");
    const std::filesystem::path log = directory / (kernel.name + ".log");
    std::ofstream(source) << kernel.source << "\n"
                          << "#include <utility>\n"
                          << "namespace {\n"
                          << "template <typename... P, std::size_t... I>\n"
                          << "void ampcCallAt(void (*f)(P...), void **args, "
                             "std::index_sequence<I...>) {\n"
                          << "  f(*static_cast<P *>(args[I])...);\n"
                          << "}\n"
                          << "template <typename... P> void ampcCall(void (*f)(P...), void **args) "
                             "{\n"
                          << "  ampcCallAt(f, args, std::index_sequence_for<P...>{});\n"
                          << "}\n"
                          << "} // namespace\n"
                          << "extern \"C\" void ampc_emulated_launch(unsigned gx, unsigned gy, "
                             "unsigned gz, unsigned bx, unsigned by, unsigned bz, void **args) {\n"
                          << "  ::ampc::emu::launch({gx, gy, gz}, {bx, by, bz}, [&] { ampcCall(&"
                          << kernel.name << ", args); });\n"
                          << "}\n";
    const char *compiler = std::getenv("CXX");
    const std::string command =
        std::string(compiler && *compiler ? compiler : "c++") +
        " -std=c++17 -O1 -ffp-contract=off -fPIC -shared -w -include " AMPC_SOURCE_DIR
        "/test/unit/emulation/DeviceEmulator.h -I" AMPC_SOURCE_DIR " " +
        source.string() + " " AMPC_DEVICE_EMULATOR_LIBRARY " -o " + library.string() + " > " +
        log.string() + " 2>&1";
    if (std::system(command.c_str()) != 0) {
      std::ifstream in(log);
      compileError = command + "\n" + std::string(std::istreambuf_iterator<char>(in), {});
      return;
    }
    handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      compileError = dlerror();
      return;
    }
    entry = reinterpret_cast<Entry>(dlsym(handle, "ampc_emulated_launch"));
  }
  ~HostKernel() {
    if (handle)
      dlclose(handle);
  }
  HostKernel(const HostKernel &) = delete;
  HostKernel &operator=(const HostKernel &) = delete;

  bool ok() const { return entry != nullptr; }
  const std::string &error() const { return compileError; }
  /// Runs the kernel with the launch shape the device program gives it; \p arguments holds one
  /// pointer per kernel parameter, as cuLaunchKernel's.
  void run(const KernelLaunch &launch, std::vector<void *> &arguments) const {
    const KernelShape shape = kernelShape(launch);
    entry(static_cast<unsigned>(shape.grid), shape.gridY, 1, shape.block[0], shape.block[1], 1,
          arguments.data());
  }

private:
  void *handle = nullptr;
  Entry entry = nullptr;
  std::string compileError;
};

/// A temporary directory removed with this object.
struct TemporaryDirectory {
  std::filesystem::path path;
  explicit TemporaryDirectory(const std::string &stem) {
    path = std::filesystem::temp_directory_path() /
           (stem + "_" + std::to_string(getpid()) + "_" +
            std::to_string(reinterpret_cast<uintptr_t>(this)));
    std::filesystem::create_directories(path);
  }
  ~TemporaryDirectory() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
};

} // namespace ampc::test

#endif // AMPC_TEST_UNIT_COMPILER_HOSTKERNEL_H
