//===- PrecisionPolicy.h - which op kinds run in which precision -*- C++ -*-===//
//
// The policy graph-assign-precision applies, as plain data: every op kind (its mnemonic,
// "matmul", "layernorm_grad", ...) belongs to one of three lists, and some kinds store their
// results in f32:
//   reduced  - read their float operands in the reduced type (bf16 or f16) and accumulate in
//              f32: the matmuls, attention, and the gather of embedding rows;
//   fp32     - compute in f32: softmax, norms, losses, exp/log/sqrt/rsqrt, reductions, and their
//              gradients;
//   follow   - elementwise and data-movement ops: run in the type of their inputs, choosing the
//              one that needs the fewest conversions when the inputs differ.
// Users move kinds between the lists with a policy file or with flags; a kind placed in two
// lists by the same source, or in different lists by the file and the flags, is a conflict and
// an error, never silently resolved.
//
//===--------------------------------------------------------------------------===//

#ifndef AMPC_PASSES_PRECISIONPOLICY_H
#define AMPC_PASSES_PRECISIONPOLICY_H

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace ampc::graph {

enum class PrecisionRule { Reduced, Fp32, Follow };

/// "reduced", "fp32" or "follow".
const char *precisionRuleName(PrecisionRule rule);

class PrecisionPolicy {
public:
  /// The default policy of DESIGN.md.
  static PrecisionPolicy defaults();

  /// The rule for an op kind, or nullopt for ops the policy does not govern (reading
  /// parameters and inputs, constants, the loss, casts, the training-state ops).
  std::optional<PrecisionRule> ruleFor(const std::string &kind) const;
  /// Whether results of this kind are stored in f32 rather than the reduced type.
  bool storesFp32(const std::string &kind) const { return storeFp32.count(kind) != 0; }

  /// Every kind the policy knows, for messages.
  static const std::vector<std::string> &knownKinds();

  /// One change of the policy, from a file line or a flag.
  struct Assignment {
    std::string kind;
    /// A rule, or "store_fp32".
    std::string list;
    /// Where it came from, for messages ("policy.txt:3", "--fp32-ops").
    std::string origin;
  };

  /// Parses a policy file: lines `reduced: matmul, attention`, `fp32: gelu`, `follow: ...`,
  /// `store_fp32: layernorm`; `#` starts a comment. Appends to `out`; returns an error message
  /// (with file:line) on a malformed line or an unknown list or kind.
  static std::optional<std::string> parseFile(const std::string &path, const std::string &text,
                                              std::vector<Assignment> &out);
  /// Parses a comma-separated list of kinds given for `list` by `flag`.
  static std::optional<std::string> parseFlag(const std::string &flag, const std::string &list,
                                              const std::string &kinds,
                                              std::vector<Assignment> &out);

  /// Applies the assignments in order. A kind assigned to two different rule lists is a
  /// conflict: the error names both origins.
  std::optional<std::string> apply(const std::vector<Assignment> &assignments);

private:
  std::map<std::string, PrecisionRule> rules;
  std::set<std::string> storeFp32;
};

} // namespace ampc::graph

#endif // AMPC_PASSES_PRECISIONPOLICY_H
