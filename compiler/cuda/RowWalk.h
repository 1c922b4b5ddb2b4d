//===- RowWalk.h - How a row kernel's passes walk its row -------*- C++ -*-===//
//
// Private to the CUDA code generator: the walk the row kernels (CudaCodegenRows.cpp) and the
// classifier (CudaCodegenReductions.cpp) share, one element at a time or in 16-byte packs.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_COMPILER_CUDA_ROWWALK_H
#define AMPC_COMPILER_CUDA_ROWWALK_H

#include "compiler/cuda/KernelGenerator.h"

#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace ampc {
namespace cudagen {

/// The C element type of a kernel parameter's dtype, for its packs.
inline std::string packElement(const std::string &dtype) {
  return dtype == "f32" ? "float" : dtype == "bf16" ? "bfloat16" : "half16";
}

/// How the passes of a row kernel walk its row.
///
/// Unpacked (block-per-row kernels, and warp-per-row kernels whose operands cannot be packed):
/// rowLoop, lanes striding over the row one element at a time, every pass reading the row again
/// (and evaluating the fused producers again) from L1/L2.
///
/// Packed (a warp per row, L a multiple of the pack width, every tensor operand either a row
/// of the same length or a per-column vector of length L): the row is P = L / W packs of W
/// elements, lane `lane` takes packs lane, lane + 32, ..., at most Q = ceil(P / 32) of them
/// (the classifier's block per row walks the same way with its T threads: packs t, t + T, ...),
/// each read with one access of W x the element size (16 bytes for bf16/f16, 32 bytes = two
/// 16-byte accesses for an f32 operand beside them). A load pass reads each row operand once
/// and keeps what the passes need (the norm's input; a norm gradient's x and g = dy * gamma) in
/// fully unrolled register arrays of Q * W floats; the statistics and the final pass then work
/// from those registers, and only per-column vectors (gamma, beta) are read again. Both walks
/// take the same elements in the same f32 arithmetic; only the order of a lane's partial sums
/// differs.
///
/// Held packs (packed, holdPacks): every row operand a pass reads is kept as it is stored, Q
/// packs a thread (`hp_<name>[Q]`, 16 bytes each), filled by one load pass (holdLoad) that the
/// caller places before the first pass; every pass then takes its packs from those registers, so
/// the row is read from memory once however many passes there are, and all of a thread's loads
/// are in flight together. For rows whose packs fit the registers (heldRegisters()): the
/// classifier's 50304-long bf16 rows are 7 packs, 28 registers, a thread of 1024.
class RowWalk {
public:
  /// \p threads: the threads of a row (32 for a warp; a block-per-row kernel's block size,
  /// compiled in).
  RowWalk(const RowSpan &span, KernelWriter &writer, int threads = 32)
      : span(span), writer(writer), threads(threads) {}

  const RowSpan span;
  KernelWriter &writer;
  const int threads;
  bool packed = false;
  /// Elements a pack (packed walk).
  int width = 1;
  /// Packs a row, L / width, compiled in.
  int64_t packs = 0;
  /// Rows of the kernel: an operand with rows * L elements is a row operand, one with L a
  /// per-column vector.
  int64_t rows = 0;
  /// Whether any pass read an element at another index than its own (a broadcast of another
  /// shape) or through a gather: such reads cannot be packed.
  bool broadcastRead = false;
  /// Packed: whether every tensor read or written in packs is a float row operand (rows * L
  /// elements) or a per-column vector (L), so that its packs are where packIndex says.
  bool packsValid = true;

  /// Packed: keep the row operands' packs in registers (see the class comment).
  bool holdPacks = false;

  /// Packs a thread takes at most.
  int64_t perLane() const { return (packs + threads - 1) / threads; }

  /// The 32-bit registers a thread's held packs take (the passes emitted so far).
  int64_t heldRegisters() const {
    int64_t bytes = 0;
    for (const auto &[name, pack] : heldPacks)
      bytes += pack.bytes;
    return perLane() * bytes / 4;
  }

  /// Held packs: the register arrays of the row operands the passes emitted so far read, and the
  /// load pass that fills them; empty otherwise. Emitted inside the row loop, before the passes.
  std::string holdLoad() const {
    if (heldPacks.empty())
      return "";
    const std::string q = std::to_string(perLane());
    std::string text = "    // The row's packs, read once into registers: every pass below reads them "
                       "there.\n";
    for (const auto &[name, pack] : heldPacks)
      text += "    " + pack.type + " hp_" + name + "[" + q + "];\n";
    text += "#pragma unroll\n    for (int q = 0; q < " + q + "; ++q) {\n" +
            "      const long long p = " + span.first() + " + " + std::to_string(threads) +
            "ll * q;\n" + guard();
    for (const auto &[name, pack] : heldPacks)
      text += "        hp_" + name + "[q] = reinterpret_cast<const " + pack.type + " *>(" + name +
              ")[row * " + std::to_string(packs) + "ll + p];\n";
    return text + "      }\n    }\n";
  }

  /// A row value kept in the register array `array` by the load pass: element e of the lane is
  /// `expression` at the lane's e-th element; when `value` is set, later passes read that value
  /// from the array.
  struct Held {
    std::string array;
    std::function<std::string(Scope &)> expression;
    Value value;
  };

  /// Packed: declares the register arrays and emits the load pass that fills them. Unpacked:
  /// nothing (each pass evaluates the row's values itself).
  std::string load(std::vector<Held> values) {
    if (!packed)
      return "";
    held = std::move(values);
    std::string text = "    // Each lane's elements of the row, read once (16-byte packs).\n";
    for (const Held &value : held)
      text += "    float " + value.array + "[" + std::to_string(perLane() * width) + "];\n";
    return text + packedLoop(
                      [&](Scope &s) {
                        for (const Held &value : held)
                          s.line(value.array + "[e] = " + value.expression(s) + ";");
                      },
                      "L", false);
  }

  /// One pass over the row's first `limit` elements: `body` emits one element's statements (the
  /// column `j`, the flat index `i`; packed, also the register slot `e`).
  std::string pass(const std::function<void(Scope &)> &body, const std::string &limit = "L") {
    if (packed)
      return packedLoop(body, limit, true);
    return rowLoop(
        span,
        [&](Scope &s) {
          body(s);
          broadcastRead = broadcastRead || s.broadcastRead || s.gatherRead;
        },
        limit);
  }

private:
  std::vector<Held> held;
  /// Held packs: the row operands read so far, by parameter name.
  struct HeldPack {
    std::string type;
    int64_t bytes;
  };
  std::map<std::string, HeldPack> heldPacks;

  /// The test that pack p of the round exists (the last round is partial unless the row's
  /// threads divide P), with its opening brace.
  std::string guard() const {
    return packs % threads == 0 ? "      {\n"
                                : "      if (p < " + std::to_string(packs) + "ll) {\n";
  }

  /// Whether \p param holds rows * L elements (its pack p of the row follows the row's), not
  /// a per-column vector of L.
  bool rowOperand(const KernelParam &param) const {
    return !(numElements(param.shape) == packs * width && rows != 1);
  }

  /// The index of pack p of the row in \p param: a row operand's packs follow the row's, a
  /// per-column vector's are the same for every row.
  std::string packIndex(const KernelParam &param) const {
    return rowOperand(param) ? "row * " + std::to_string(packs) + "ll + p" : "p";
  }

  /// Emits a pass over the lane's packs: the pack loads of the inputs \p body reads, the
  /// unrolled loop over each pack's elements (those before \p limit) around \p body, and the
  /// pack stores of the outputs it writes. With \p readHeld, the held values are read from
  /// their registers.
  std::string packedLoop(const std::function<void(Scope &)> &body, const std::string &limit,
                         bool readHeld) {
    const std::string w = std::to_string(width);
    Scope scope;
    scope.vector = true;
    scope.indent = limit == "L" ? "          " : "            ";
    if (readHeld)
      for (const Held &value : held)
        if (value.value)
          KernelWriter::bind(scope, value.value, "i", value.array + "[e]");
    body(scope);
    broadcastRead = broadcastRead || scope.broadcastRead || scope.gatherRead;
    std::ostringstream text;
    text << "#pragma unroll\n"
         << "    for (int q = 0; q < " << perLane() << "; ++q) {\n"
         << "      const long long p = " << span.first() << " + " << threads << "ll * q;\n";
    // Every thread has Q packs when P is a multiple of the row's threads; otherwise the last
    // round is partial.
    text << guard();
    for (const KernelParam &param : writer.params) {
      const bool inPacks = (param.role == Role::Input && scope.packsRead.count(param.name)) ||
                           (param.role == Role::Output && scope.packsWritten.count(param.name));
      const int64_t elements = numElements(param.shape);
      if (inPacks && ((elements != packs * width * rows && elements != packs * width) ||
                      (param.elementType != "f32" && param.elementType != "bf16" &&
                       param.elementType != "f16")))
        packsValid = false;
      const std::string pack = "Pack<" + packElement(param.elementType) + ", " + w + ">";
      if (param.role == Role::Input && scope.packsRead.count(param.name) && holdPacks &&
          rowOperand(param)) {
        heldPacks[param.name] = {pack, width * (param.elementType == "f32" ? 4 : 2)};
        text << "        const " << pack << " pk_" << param.name << " = hp_" << param.name
             << "[q];\n";
      } else if (param.role == Role::Input && scope.packsRead.count(param.name))
        text << "        const " << pack << " pk_" << param.name << " = reinterpret_cast<const "
             << pack << " *>(" << param.name << ")[" << packIndex(param) << "];\n";
      else if (param.role == Role::Output && scope.packsWritten.count(param.name))
        text << "        " << pack << " po_" << param.name << ";\n";
    }
    text << "#pragma unroll\n"
         << "        for (int k = 0; k < " << w << "; ++k) {\n"
         << "          const int e = q * " << w << " + k;\n"
         << "          const long long j = p * " << w << " + k;\n"
         << "          const long long i = row * L + j;\n"
         << "          (void)e;\n          (void)j;\n          (void)i;\n";
    if (limit != "L")
      text << "          if (j < " << limit << ") {\n" << scope.text.str() << "          }\n";
    else
      text << scope.text.str();
    text << "        }\n";
    for (const KernelParam &param : writer.params)
      if (param.role == Role::Output && scope.packsWritten.count(param.name)) {
        const std::string pack = "Pack<" + packElement(param.elementType) + ", " + w + ">";
        text << "        reinterpret_cast<" << pack << " *>(" << param.name << ")["
             << packIndex(param) << "] = po_" << param.name << ";\n";
      }
    text << "      }\n    }\n";
    return text.str();
  }
};

} // namespace cudagen
} // namespace ampc

#endif // AMPC_COMPILER_CUDA_ROWWALK_H
