//===- PrecisionPolicy.cpp - which op kinds run in which precision --------===//

#include "passes/PrecisionPolicy.h"
#include "dialects/Graph/GraphDialect.h"

#include <algorithm>
#include <sstream>

namespace ampc::graph {

const char *precisionRuleName(PrecisionRule rule) {
  switch (rule) {
  case PrecisionRule::Reduced:
    return "reduced";
  case PrecisionRule::Fp32:
    return "fp32";
  case PrecisionRule::Follow:
    return "follow";
  }
  return "unknown";
}

namespace {

/// The kinds of the graph ops that declare \p precisionClass in GraphOps.td.
std::vector<std::string> kindsOf(graph::PrecisionClass precisionClass) {
  std::vector<std::string> kinds;
  for (llvm::StringRef kind : graph::opKindsWith(precisionClass))
    kinds.push_back(kind.str());
  return kinds;
}

std::string trim(const std::string &text) {
  size_t begin = text.find_first_not_of(" \t\r");
  if (begin == std::string::npos)
    return "";
  size_t end = text.find_last_not_of(" \t\r");
  return text.substr(begin, end - begin + 1);
}

std::optional<PrecisionRule> parseRule(const std::string &list) {
  if (list == "reduced")
    return PrecisionRule::Reduced;
  if (list == "fp32")
    return PrecisionRule::Fp32;
  if (list == "follow")
    return PrecisionRule::Follow;
  return std::nullopt;
}

} // namespace

PrecisionPolicy PrecisionPolicy::defaults() {
  PrecisionPolicy policy;
  // The defaults are the ops' own declarations (Graph_ReducedPrecision, ... in GraphOps.td).
  for (const std::string &kind : kindsOf(graph::PrecisionClass::Reduced))
    policy.rules[kind] = PrecisionRule::Reduced;
  for (const std::string &kind : kindsOf(graph::PrecisionClass::Fp32))
    policy.rules[kind] = PrecisionRule::Fp32;
  for (const std::string &kind : kindsOf(graph::PrecisionClass::Follow))
    policy.rules[kind] = PrecisionRule::Follow;
  for (const std::string &kind : kindsOf(graph::PrecisionClass::StoresFp32))
    policy.storeFp32.insert(kind);
  return policy;
}

const std::vector<std::string> &PrecisionPolicy::knownKinds() {
  static const std::vector<std::string> kinds = [] {
    std::vector<std::string> all;
    for (graph::PrecisionClass precisionClass :
         {graph::PrecisionClass::Reduced, graph::PrecisionClass::Fp32,
          graph::PrecisionClass::Follow}) {
      std::vector<std::string> kinds = kindsOf(precisionClass);
      all.insert(all.end(), kinds.begin(), kinds.end());
    }
    std::sort(all.begin(), all.end());
    return all;
  }();
  return kinds;
}

std::optional<PrecisionRule> PrecisionPolicy::ruleFor(const std::string &kind) const {
  auto it = rules.find(kind);
  if (it == rules.end())
    return std::nullopt;
  return it->second;
}

/// Splits "a, b ,c" into kinds, checking each is known.
static std::optional<std::string> splitKinds(const std::string &kinds, const std::string &list,
                                             const std::string &origin,
                                             std::vector<PrecisionPolicy::Assignment> &out) {
  std::stringstream stream(kinds);
  std::string kind;
  bool any = false;
  while (std::getline(stream, kind, ',')) {
    kind = trim(kind);
    if (kind.empty())
      continue;
    const auto &known = PrecisionPolicy::knownKinds();
    if (!std::binary_search(known.begin(), known.end(), kind)) {
      std::string names;
      for (const std::string &name : known)
        names += (names.empty() ? "" : ", ") + name;
      return origin + ": unknown op kind '" + kind + "'; the policy governs " + names;
    }
    out.push_back({kind, list, origin});
    any = true;
  }
  if (!any)
    return origin + ": no op kinds given for '" + list + "'";
  return std::nullopt;
}

std::optional<std::string> PrecisionPolicy::parseFile(const std::string &path,
                                                      const std::string &text,
                                                      std::vector<Assignment> &out) {
  std::stringstream stream(text);
  std::string line;
  for (int number = 1; std::getline(stream, line); ++number) {
    line = trim(line.substr(0, line.find('#')));
    if (line.empty())
      continue;
    std::string origin = path + ":" + std::to_string(number);
    size_t colon = line.find(':');
    if (colon == std::string::npos)
      return origin + ": expected 'LIST: kind, kind, ...' with LIST one of reduced, fp32, "
                      "follow, store_fp32";
    std::string list = trim(line.substr(0, colon));
    if (!parseRule(list) && list != "store_fp32")
      return origin + ": unknown list '" + list +
             "'; the lists are reduced, fp32, follow and store_fp32";
    if (auto error = splitKinds(line.substr(colon + 1), list, origin, out))
      return error;
  }
  return std::nullopt;
}

std::optional<std::string> PrecisionPolicy::parseFlag(const std::string &flag,
                                                      const std::string &list,
                                                      const std::string &kinds,
                                                      std::vector<Assignment> &out) {
  return splitKinds(kinds, list, flag, out);
}

std::optional<std::string> PrecisionPolicy::apply(const std::vector<Assignment> &assignments) {
  // First the conflicts: one kind sent to two different rule lists.
  std::map<std::string, const Assignment *> ruleOf;
  for (const Assignment &assignment : assignments) {
    if (assignment.list == "store_fp32")
      continue;
    auto [it, inserted] = ruleOf.emplace(assignment.kind, &assignment);
    if (!inserted && it->second->list != assignment.list)
      return "conflicting precision policy for '" + assignment.kind + "': " + it->second->origin +
             " puts it in " + it->second->list + ", " + assignment.origin + " in " +
             assignment.list;
  }
  for (const Assignment &assignment : assignments) {
    if (assignment.list == "store_fp32")
      storeFp32.insert(assignment.kind);
    else
      rules[assignment.kind] = *parseRule(assignment.list);
  }
  return std::nullopt;
}

} // namespace ampc::graph
