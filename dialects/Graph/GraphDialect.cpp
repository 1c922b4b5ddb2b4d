//===- GraphDialect.cpp - graph dialect and its attributes ----------------===//
//
// Registers the dialect's ops and attributes, and implements the textual form and the checks of
// the parameter initializer attributes.
//
//===--------------------------------------------------------------------------===//

#include "dialects/Graph/GraphDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

#include <charconv>
#include <cmath>

using namespace mlir;
using namespace ampc::graph;

#include "dialects/Graph/GraphDialect.cpp.inc"
#include "dialects/Graph/GraphEnums.cpp.inc"
#include "dialects/Graph/GraphInterfaces.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/Graph/GraphAttrs.cpp.inc"

void GraphDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialects/Graph/GraphOps.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/Graph/GraphAttrs.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// Op classes
//===----------------------------------------------------------------------===//

namespace {
/// The kinds of \p Ops that have \p Trait.
template <template <typename> class Trait, typename... Ops> std::vector<StringRef> kindsWith() {
  std::vector<StringRef> kinds;
  auto add = [&](bool has, StringRef name) {
    if (has)
      kinds.push_back(name.drop_front(GraphDialect::getDialectNamespace().size() + 1));
  };
  (add(Ops::template hasTrait<Trait>(), Ops::getOperationName()), ...);
  return kinds;
}

template <template <typename> class Trait> std::vector<StringRef> graphKindsWith() {
  return kindsWith<Trait,
#define GET_OP_LIST
#include "dialects/Graph/GraphOps.cpp.inc"
                   >();
}
} // namespace

std::vector<StringRef> ampc::graph::opKindsWith(PrecisionClass precisionClass) {
  switch (precisionClass) {
  case PrecisionClass::Reduced:
    return graphKindsWith<ReducedPrecision>();
  case PrecisionClass::Fp32:
    return graphKindsWith<Fp32Precision>();
  case PrecisionClass::Follow:
    return graphKindsWith<FollowPrecision>();
  case PrecisionClass::StoresFp32:
    return graphKindsWith<StoresFp32>();
  }
  return {};
}

//===----------------------------------------------------------------------===//
// Stage results: the graph.-prefixed discardable attributes passes leave behind.
//===----------------------------------------------------------------------===//

/// Whether \p op is a function of a graph.model, or inside one: where stage results belong.
static bool inModel(Operation *op) {
  for (Operation *parent = op; parent; parent = parent->getParentOp())
    if (llvm::isa<ModelOp>(parent))
      return true;
  return false;
}

/// The fused group ids of the ops of \p func that carry graph.fusion.
static llvm::SmallVector<int64_t> fusedGroupsOf(func::FuncOp func) {
  llvm::SmallVector<int64_t> groups;
  func.walk([&](Operation *op) {
    if (auto fusion = op->getAttrOfType<FusionAttr>(GraphDialect::kFusionAttrName))
      groups.push_back(fusion.getGroup());
  });
  return groups;
}

/// graph.fusion_schedule: a permutation of the function's group numbers 0..n-1, naming every
/// group an op of the function belongs to.
static LogicalResult verifySchedule(Operation *op, Attribute value) {
  auto schedule = llvm::dyn_cast<DenseI64ArrayAttr>(value);
  auto func = llvm::dyn_cast<func::FuncOp>(op);
  if (!schedule || !func)
    return op->emitError("'") << GraphDialect::kFusionScheduleAttrName
                              << "' is an array<i64> of group numbers on a function";
  llvm::ArrayRef<int64_t> order = schedule.asArrayRef();
  llvm::SmallVector<bool> seen(order.size(), false);
  for (int64_t group : order) {
    if (group < 0 || group >= static_cast<int64_t>(order.size()) || seen[group])
      return op->emitError("'") << GraphDialect::kFusionScheduleAttrName
                                << "' must list each group 0.." << order.size() - 1
                                << " once; group " << group << " is out of range or repeated";
    seen[group] = true;
  }
  for (int64_t group : fusedGroupsOf(func))
    if (group >= static_cast<int64_t>(order.size()))
      return op->emitError("'") << GraphDialect::kFusionScheduleAttrName << "' has " << order.size()
                                << " groups, but an op is in group " << group;
  return success();
}

/// graph.arena: every graph.arena_offsets of the function is aligned and inside the arena.
static LogicalResult verifyArena(Operation *op, Attribute value) {
  auto arena = llvm::dyn_cast<ArenaAttr>(value);
  if (!arena)
    return op->emitError("'") << GraphDialect::kArenaAttrName << "' must be a #graph.arena, got "
                              << value;
  auto func = llvm::dyn_cast<func::FuncOp>(op);
  if (!func)
    return op->emitError("'") << GraphDialect::kArenaAttrName << "' belongs on a function";
  LogicalResult result = success();
  func.walk([&](Operation *inner) {
    auto offsets = inner->getAttrOfType<DenseI64ArrayAttr>(GraphDialect::kArenaOffsetsAttrName);
    if (!offsets || failed(result))
      return;
    for (auto [offset, value] : llvm::zip(offsets.asArrayRef(), inner->getResults())) {
      if (offset < 0)
        continue;
      auto type = llvm::dyn_cast<RankedTensorType>(value.getType());
      int64_t bytes = type && type.hasStaticShape()
                          ? type.getNumElements() *
                                static_cast<int64_t>((type.getElementTypeBitWidth() + 7) / 8)
                          : 0;
      if (offset % arena.getAlignment() != 0 || offset + bytes > arena.getBytes()) {
        result = inner->emitError("arena offset ")
                 << offset << " (" << bytes << " bytes) is not " << arena.getAlignment()
                 << "-byte aligned inside the function's arena of " << arena.getBytes() << " bytes";
        return;
      }
    }
  });
  return result;
}

LogicalResult GraphDialect::verifyOperationAttribute(Operation *op, NamedAttribute attribute) {
  StringRef name = attribute.getName().getValue();
  Attribute value = attribute.getValue();
  if (name == kRematAttrName) {
    if (!llvm::isa<RematAttr>(value))
      return op->emitError("'") << kRematAttrName << "' must be a #graph.remat, got " << value;
    auto func = llvm::dyn_cast<func::FuncOp>(op);
    if (!func || !llvm::isa_and_nonnull<ModelOp>(op->getParentOp()))
      return op->emitError("'") << kRematAttrName
                                << "' belongs on a function of a graph.model (its micro_step)";
    return success();
  }
  if (name == kPrecisionModeAttrName) {
    auto mode = llvm::dyn_cast<StringAttr>(value);
    if (!mode || !llvm::is_contained({"bf16", "fp16", "fp32"}, mode.getValue()))
      return op->emitError("'") << kPrecisionModeAttrName << "' is \"bf16\", \"fp16\" or "
                                << "\"fp32\", got " << value;
    if (!llvm::isa<ModelOp>(op))
      return op->emitError("'") << kPrecisionModeAttrName << "' belongs on a graph.model";
    return success();
  }
  if (name == kDebugNonfiniteAttrName) {
    if (!llvm::isa<UnitAttr>(value) || !llvm::isa<ModelOp>(op))
      return op->emitError("'") << kDebugNonfiniteAttrName
                                << "' is a unit attribute of a graph.model";
    return success();
  }
  if (!inModel(op))
    return op->emitError("'") << name << "' belongs inside a graph.model";
  if (name == kRecomputedAttrName) {
    if (!llvm::isa<UnitAttr>(value))
      return op->emitError("'") << kRecomputedAttrName << "' is a unit attribute";
    return success();
  }
  if (name == kPrecisionAttrName) {
    if (!llvm::isa<PrecisionAttr>(value))
      return op->emitError("'") << kPrecisionAttrName << "' must be a #graph.precision, got "
                                << value;
    return success();
  }
  if (name == kFusionAttrName) {
    if (!llvm::isa<FusionAttr>(value))
      return op->emitError("'") << kFusionAttrName << "' must be a #graph.fusion, got " << value;
    return success();
  }
  if (name == kFusionScheduleAttrName)
    return verifySchedule(op, value);
  if (name == kArenaOffsetsAttrName) {
    auto offsets = llvm::dyn_cast<DenseI64ArrayAttr>(value);
    if (!offsets || offsets.size() != static_cast<int64_t>(op->getNumResults()))
      return op->emitError("'") << kArenaOffsetsAttrName << "' needs one offset per result ("
                                << op->getNumResults() << ")";
    if (llvm::any_of(offsets.asArrayRef(), [](int64_t offset) { return offset < -1; }))
      return op->emitError("'") << kArenaOffsetsAttrName
                                << "' offsets are bytes, or -1 for a result never stored";
    return success();
  }
  if (name == kArenaAttrName)
    return verifyArena(op, value);
  return op->emitError("unknown graph dialect attribute '") << name << "'";
}

LogicalResult FusionAttr::verify(function_ref<InFlightDiagnostic()> emitError, int64_t group,
                                 GroupKind) {
  if (group < 0)
    return emitError() << "#graph.fusion group numbers are not negative, got " << group;
  return success();
}

LogicalResult ArenaAttr::verify(function_ref<InFlightDiagnostic()> emitError, int64_t bytes,
                                int64_t peakLiveBytes, int64_t alignment) {
  if (bytes < 0 || peakLiveBytes < 0)
    return emitError() << "#graph.arena sizes cannot be negative";
  if (peakLiveBytes > bytes)
    return emitError() << "#graph.arena peak_live_bytes " << peakLiveBytes
                       << " exceeds the arena's " << bytes << " bytes";
  if (alignment <= 0 || (alignment & (alignment - 1)) != 0)
    return emitError() << "#graph.arena alignment must be a power of two, got " << alignment;
  return success();
}

LogicalResult RematAttr::verify(function_ref<InFlightDiagnostic()> emitError, int64_t budgetBytes,
                                int64_t peakBytes, int64_t noRematPeakBytes, int64_t liveBytes,
                                int64_t extraFlops, int64_t stepFlops, int64_t persistentBytes) {
  if (budgetBytes < 0 || peakBytes < 0 || noRematPeakBytes < 0 || liveBytes < 0 ||
      persistentBytes < 0)
    return emitError() << "#graph.remat sizes cannot be negative";
  if (peakBytes > budgetBytes)
    return emitError() << "#graph.remat peak_bytes " << peakBytes << " exceeds budget_bytes "
                       << budgetBytes;
  if (extraFlops < 0 || stepFlops < 0)
    return emitError() << "#graph.remat FLOP counts cannot be negative";
  if (persistentBytes > peakBytes)
    return emitError() << "#graph.remat persistent_bytes " << persistentBytes
                       << " exceeds peak_bytes " << peakBytes;
  return success();
}

//===----------------------------------------------------------------------===//
// Initializer attributes: `<name = value, ...>` with named, possibly defaulted fields.
//===----------------------------------------------------------------------===//

/// `value` in the shortest form that reads back exactly ("0.02", "-0.1", "1.0e-05"). MLIR's
/// float literals need a '.' before any exponent, so one is added where to_chars leaves it out
/// ("1e-05" -> "1.0e-05", "3" -> "3.0").
std::string ampc::graph::formatReal(double value) {
  char buffer[32];
  auto [end, error] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  std::string text(buffer, error == std::errc() ? end : buffer);
  bool special = text.find_first_of("in") != std::string::npos; // inf, nan
  if (!special && text.find('.') == std::string::npos) {
    size_t exponent = text.find('e');
    text.insert(exponent == std::string::npos ? text.size() : exponent, ".0");
  }
  return text;
}

static void printShortest(AsmPrinter &printer, const llvm::APFloat &value) {
  printer.getStream() << formatReal(value.convertToDouble());
}

namespace {
/// One named double field of an initializer; `present` records whether it was written.
struct InitField {
  llvm::StringRef name;
  double value;
  bool required;
  bool present = false;
};
} // namespace

/// Parses `<name = number, ...>` into `fields`, in any order, each at most once.
static LogicalResult parseInitFields(AsmParser &parser, llvm::MutableArrayRef<InitField> fields) {
  llvm::SMLoc start = parser.getCurrentLocation();
  if (parser.parseLess())
    return failure();
  auto parseOne = [&]() -> ParseResult {
    llvm::SMLoc loc = parser.getCurrentLocation();
    llvm::StringRef key;
    if (parser.parseKeyword(&key) || parser.parseEqual())
      return failure();
    InitField *field = llvm::find_if(fields, [&](InitField &f) { return f.name == key; });
    if (field == fields.end()) {
      std::string known;
      for (InitField &f : fields)
        known += (known.empty() ? "'" : ", '") + f.name.str() + "'";
      return parser.emitError(loc)
             << "unknown initializer field '" << key << "'; expected " << known;
    }
    if (field->present)
      return parser.emitError(loc) << "initializer field '" << key << "' given twice";
    field->present = true;
    return parser.parseFloat(field->value);
  };
  if (parser.parseCommaSeparatedList(parseOne) || parser.parseGreater())
    return failure();
  for (InitField &f : fields)
    if (f.required && !f.present)
      return parser.emitError(start) << "initializer needs the field '" << f.name << "'";
  return success();
}

Attribute NormalInitAttr::parse(AsmParser &parser, Type) {
  InitField fields[] = {{"mean", 0.0, false}, {"std", 0.0, true}};
  if (failed(parseInitFields(parser, fields)))
    return {};
  return parser.getChecked<NormalInitAttr>(parser.getContext(), llvm::APFloat(fields[0].value),
                                           llvm::APFloat(fields[1].value));
}

void NormalInitAttr::print(AsmPrinter &printer) const {
  printer << "<mean = ";
  printShortest(printer, getMean());
  printer << ", std = ";
  printShortest(printer, getStd());
  printer << ">";
}

LogicalResult NormalInitAttr::verify(llvm::function_ref<InFlightDiagnostic()> emitError,
                                     llvm::APFloat meanValue, llvm::APFloat stdValue) {
  double mean = meanValue.convertToDouble(), std = stdValue.convertToDouble();
  if (!std::isfinite(mean) || !std::isfinite(std) || std <= 0.0)
    return emitError() << "normal initializer needs a finite mean and std > 0, got mean = "
                       << formatReal(mean) << ", std = " << formatReal(std);
  return success();
}

Attribute UniformInitAttr::parse(AsmParser &parser, Type) {
  InitField fields[] = {{"low", 0.0, true}, {"high", 0.0, true}};
  if (failed(parseInitFields(parser, fields)))
    return {};
  return parser.getChecked<UniformInitAttr>(parser.getContext(), llvm::APFloat(fields[0].value),
                                            llvm::APFloat(fields[1].value));
}

void UniformInitAttr::print(AsmPrinter &printer) const {
  printer << "<low = ";
  printShortest(printer, getLow());
  printer << ", high = ";
  printShortest(printer, getHigh());
  printer << ">";
}

LogicalResult UniformInitAttr::verify(llvm::function_ref<InFlightDiagnostic()> emitError,
                                      llvm::APFloat lowValue, llvm::APFloat highValue) {
  double low = lowValue.convertToDouble(), high = highValue.convertToDouble();
  if (!std::isfinite(low) || !std::isfinite(high) || !(low < high))
    return emitError() << "uniform initializer needs finite bounds with low < high, got low = "
                       << formatReal(low) << ", high = " << formatReal(high);
  return success();
}
