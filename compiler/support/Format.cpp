//===- Format.cpp - how the compiler writes locations and sizes for people --===//

#include "compiler/support/Format.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

namespace ampc {

std::string formatLocation(Location loc, bool brief) {
  if (auto file = llvm::dyn_cast<FileLineColLoc>(loc)) {
    llvm::StringRef name = file.getFilename().getValue();
    if (brief)
      name = name.substr(name.find_last_of('/') + 1);
    return (name + ":" + llvm::Twine(file.getLine()) + ":" + llvm::Twine(file.getColumn())).str();
  }
  if (auto call = llvm::dyn_cast<CallSiteLoc>(loc)) {
    std::string callee = formatLocation(call.getCallee(), brief);
    std::string caller = formatLocation(call.getCaller(), brief);
    if (brief) // the caller is in the same file: its line and column
      return callee + " <- " + caller.substr(caller.find(':') + 1);
    return callee + " (called from " + caller + ")";
  }
  if (auto name = llvm::dyn_cast<NameLoc>(loc)) {
    // An imported ONNX node: the file (line 0: no lines in a binary file) and the node's name.
    auto file = llvm::dyn_cast<FileLineColLoc>(name.getChildLoc());
    if (file && file.getLine() == 0) {
      llvm::StringRef path = file.getFilename().getValue();
      if (brief)
        path = path.substr(path.find_last_of('/') + 1);
      return (path + ":" + name.getName().getValue()).str();
    }
    return formatLocation(name.getChildLoc(), brief);
  }
  if (auto fused = llvm::dyn_cast<FusedLoc>(loc))
    if (!fused.getLocations().empty())
      return formatLocation(fused.getLocations().front(), brief);
  return "unknown location";
}

std::string formatBytes(int64_t bytes) {
  double value = double(bytes);
  const char *unit = "B";
  for (const char *larger : {"kB", "MB", "GB", "TB"})
    if (value >= 1000) {
      value /= 1000;
      unit = larger;
    }
  std::string text;
  llvm::raw_string_ostream os(text);
  if (unit[0] == 'B')
    os << bytes << " B";
  else
    os << llvm::format("%.1f %s", value, unit);
  return text;
}

} // namespace ampc
