//===- OptionParsers.h - How ampc's flags parse their values -----*- C++ -*-===//
//
// llvm::cl parsers for the value types of ampc's options. A bad value is one line, "ampc:
// error: --lr expects a number, got 'fast'", as every other usage error, rather than
// llvm::cl's wording. Used by compiler/tools/ampc.cpp, where the options are declared.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_COMPILER_TOOLS_OPTIONPARSERS_H
#define AMPC_COMPILER_TOOLS_OPTIONPARSERS_H

#include "compiler/onnx/OnnxImporter.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <string>
#include <vector>

namespace ampc::driver::parsers {

namespace cl = llvm::cl;

/// Prints a usage error; returns true, llvm::cl's "the value was not accepted".
inline bool usageError(const llvm::Twine &message) {
  llvm::errs() << "ampc: error: " << message << "\n";
  return true;
}

/// Real numbers of the pass options (double).
struct RealParser : cl::parser<double> {
  using cl::parser<double>::parser;
  bool parse(cl::Option &, llvm::StringRef name, llvm::StringRef text, double &value) {
    if (text.getAsDouble(value))
      return usageError("--" + name + " expects a number, got '" + text + "'");
    return false;
  }
};

/// GradScaler's factors: growth above 1 (--loss-scale-growth-factor), backoff in (0, 1)
/// (--loss-scale-backoff-factor), as torch.cuda.amp.GradScaler requires.
struct ScaleFactorParser : cl::parser<double> {
  using cl::parser<double>::parser;
  bool parse(cl::Option &, llvm::StringRef name, llvm::StringRef text, double &value) {
    if (text.getAsDouble(value))
      return usageError("--" + name + " expects a number, got '" + text + "'");
    const bool growth = name.contains("growth");
    if (growth ? !(value > 1) : !(value > 0 && value < 1))
      return usageError("--" + name + (growth ? " must be above 1" : " must be in (0, 1)") +
                        ", got '" + text + "'");
    return false;
  }
};

/// Integers of the pass options (int64_t). cl::parser<long> is final: this parses long long,
/// which llvm::cl converts on assignment.
struct CountParser : cl::parser<long long> {
  using cl::parser<long long>::parser;
  bool parse(cl::Option &, llvm::StringRef name, llvm::StringRef text, long long &value) {
    if (text.getAsInteger(10, value))
      return usageError("--" + name + " expects an integer, got '" + text + "'");
    return false;
  }
};

/// ampc eval's --seed (uint64_t).
struct SeedParser : cl::parser<unsigned long long> {
  using cl::parser<unsigned long long>::parser;
  bool parse(cl::Option &, llvm::StringRef name, llvm::StringRef text, unsigned long long &value) {
    if (text.getAsInteger(10, value))
      return usageError("--" + name + " expects a non-negative integer, got '" + text + "'");
    return false;
  }
};

/// On/off flags: alone, or =true/=false (=1/=0) as llvm::cl's own.
struct FlagParser : cl::parser<bool> {
  using cl::parser<bool>::parser;
  bool parse(cl::Option &, llvm::StringRef name, llvm::StringRef text, bool &value) {
    if (text.empty() || text == "1" || text.equals_insensitive("true"))
      value = true;
    else if (text == "0" || text.equals_insensitive("false"))
      value = false;
    else
      return usageError("--" + name + " is a flag: give it alone, or =true or =false, got '" +
                        text + "'");
    return false;
  }
};

/// graph-assign-precision's modes.
struct PrecisionModeParser : cl::parser<std::string> {
  using cl::parser<std::string>::parser;
  bool parse(cl::Option &, llvm::StringRef name, llvm::StringRef text, std::string &value) {
    if (text != "bf16" && text != "fp16" && text != "fp32")
      return usageError("--" + name + " is bf16, fp16 or fp32, got '" + text + "'");
    value = text.str();
    return false;
  }
};

/// The CPU backend's compute types (ampc eval).
struct CpuPrecisionParser : cl::parser<std::string> {
  using cl::parser<std::string>::parser;
  bool parse(cl::Option &, llvm::StringRef name, llvm::StringRef text, std::string &value) {
    if (text != "f32" && text != "f64")
      return usageError("--" + name + " is f32 or f64, got '" + text + "'");
    value = text.str();
    return false;
  }
};

/// ampc plot's --size WxH.
struct SizeParser : cl::parser<std::string> {
  using cl::parser<std::string>::parser;
  bool parse(cl::Option &, llvm::StringRef name, llvm::StringRef text, std::string &value) {
    auto [width, height] = text.split('x');
    unsigned w = 0, h = 0;
    if (width.getAsInteger(10, w) || height.getAsInteger(10, h) || w < 200 || h < 150 ||
        w > 10000 || h > 10000)
      return usageError("--" + name + " expects WxH in pixels (200x150 to 10000x10000), got '" +
                        text + "'");
    value = text.str();
    return false;
  }
};

/// --input-shape NAME=DIMS.
struct InputShapeParser : cl::parser<std::string> {
  using cl::parser<std::string>::parser;
  bool parse(cl::Option &, llvm::StringRef name, llvm::StringRef text, std::string &value) {
    auto [input, dims] = text.split('=');
    std::vector<int64_t> parsed;
    if (input.empty() || !parseDims(dims.str(), parsed))
      return usageError("--" + name + " expects NAME=DIMS such as tokens=4x16, got '" + text + "'");
    value = text.str();
    return false;
  }
};

/// ampc eval's --input NAME=FILE.
struct InputParser : cl::parser<std::string> {
  using cl::parser<std::string>::parser;
  bool parse(cl::Option &, llvm::StringRef name, llvm::StringRef text, std::string &value) {
    auto [input, file] = text.split('=');
    if (input.empty() || file.empty())
      return usageError("--" + name + " expects NAME=FILE, got '" + text + "'");
    value = text.str();
    return false;
  }
};

} // namespace ampc::driver::parsers

#endif // AMPC_COMPILER_TOOLS_OPTIONPARSERS_H
