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
// Stage results: the graph.-prefixed discardable attributes passes leave behind.
//===----------------------------------------------------------------------===//

LogicalResult GraphDialect::verifyOperationAttribute(Operation *op, NamedAttribute attribute) {
  if (attribute.getName() == kRematAttrName) {
    if (!llvm::isa<RematAttr>(attribute.getValue()))
      return op->emitError("'") << kRematAttrName << "' must be a #graph.remat, got "
                                << attribute.getValue();
    auto func = llvm::dyn_cast<func::FuncOp>(op);
    if (!func || !llvm::isa_and_nonnull<ModelOp>(op->getParentOp()))
      return op->emitError("'") << kRematAttrName
                                << "' belongs on a function of a graph.model (its micro_step)";
    return success();
  }
  return op->emitError("unknown graph dialect attribute '")
         << attribute.getName().getValue() << "'";
}

LogicalResult RematAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                int64_t budgetBytes, int64_t peakBytes,
                                int64_t noRematPeakBytes, int64_t liveBytes,
                                int64_t extraFlops, int64_t stepFlops) {
  if (budgetBytes < 0 || peakBytes < 0 || noRematPeakBytes < 0 || liveBytes < 0)
    return emitError() << "#graph.remat sizes cannot be negative";
  if (peakBytes > budgetBytes)
    return emitError() << "#graph.remat peak_bytes " << peakBytes << " exceeds budget_bytes "
                       << budgetBytes;
  if (extraFlops < 0 || stepFlops < 0)
    return emitError() << "#graph.remat FLOP counts cannot be negative";
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
      return parser.emitError(loc) << "unknown initializer field '" << key << "'; expected "
                                   << known;
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
  return parser.getChecked<UniformInitAttr>(parser.getContext(),
                                            llvm::APFloat(fields[0].value),
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
