//===- RecordingTrace.cpp - The recording driver's events as text ---------===//

#include "RecordingTrace.h"

#include <library_types.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>
#include <stdexcept>

namespace ampc::dryrun {

namespace {

const char *const kKindNames[] = {
    "alloc",  "free",   "host-alloc", "host-free",     "kernel",      "launch",       "matmul",
    "memset", "memcpy", "sync",       "capture-begin", "capture-end", "graph-launch", "violation"};
const char *const kOriginNames[] = {"eager", "captured", "replayed"};

std::string hex(uint64_t value) {
  char text[24];
  std::snprintf(text, sizeof text, "0x%" PRIx64, value);
  return text;
}

/// Appends " key=value" to a line.
class LineWriter {
public:
  explicit LineWriter(EventKind kind) : line(kKindNames[int(kind)]) {}
  void add(const char *key, const std::string &value) {
    line += ' ';
    line += key;
    line += '=';
    line += value;
  }
  void add(const char *key, uint64_t value) { add(key, std::to_string(value)); }
  void triple(const char *key, const uint32_t (&values)[3]) {
    add(key, std::to_string(values[0]) + "," + std::to_string(values[1]) + "," +
                 std::to_string(values[2]));
  }
  std::string line;
};

std::string formatLayout(const MatrixLayout &layout) {
  return std::to_string(layout.type) + ":" + std::to_string(layout.rows) + ":" +
         std::to_string(layout.cols) + ":" + std::to_string(layout.ld) + ":" +
         std::to_string(layout.batch) + ":" + std::to_string(layout.batchStride);
}

std::string formatFloat(float value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", static_cast<double>(value));
  return text;
}

void writeMatmul(LineWriter &out, const MatmulCall &m) {
  out.add("trans", std::to_string(m.transA) + "," + std::to_string(m.transB));
  out.add("epilogue", m.epilogue);
  out.add("a", formatLayout(m.a));
  out.add("b", formatLayout(m.b));
  out.add("c", formatLayout(m.c));
  out.add("d", formatLayout(m.d));
  out.add("pointers", hex(m.pointerA) + "," + hex(m.pointerB) + "," + hex(m.pointerC) + "," +
                          hex(m.pointerD) + "," + hex(m.bias) + "," + hex(m.aux));
  out.add("aux-layout", std::to_string(m.auxLd) + "," + std::to_string(m.auxBatchStride));
  out.add("workspace", hex(m.workspace) + "," + std::to_string(m.workspaceBytes));
  out.add("alignment", std::to_string(m.alignA) + "," + std::to_string(m.alignB) + "," +
                           std::to_string(m.alignC) + "," + std::to_string(m.alignD));
  out.add("scale", formatFloat(m.alpha) + "," + formatFloat(m.beta));
}

void writeKernel(LineWriter &out, const KernelInfo &kernel) {
  out.add("binary", kernel.binary);
  out.add("registers", std::to_string(kernel.registers));
  out.add("static-shared", kernel.staticShared);
  out.add("max-threads", kernel.maxThreads);
  std::string params;
  for (const KernelParam &param : kernel.params)
    params += (params.empty() ? "" : ",") + std::to_string(param.size) + "@" +
              std::to_string(param.offset);
  out.add("params", params.empty() ? "-" : params);
}

//===----------------------------------------------------------------------===//
// Parsing
//===----------------------------------------------------------------------===//

[[noreturn]] void malformed(const std::string &line, const std::string &why) {
  throw std::runtime_error("malformed trace line (" + why + "): " + line);
}

/// Splits \p text at \p separator.
std::vector<std::string> split(const std::string &text, char separator) {
  std::vector<std::string> parts;
  size_t begin = 0;
  while (true) {
    const size_t end = text.find(separator, begin);
    parts.push_back(text.substr(begin, end == std::string::npos ? std::string::npos : end - begin));
    if (end == std::string::npos)
      return parts;
    begin = end + 1;
  }
}

class LineReader {
public:
  explicit LineReader(const std::string &line) : line(line) {
    size_t at = line.find(' ');
    kindName = line.substr(0, at);
    while (at != std::string::npos) {
      const size_t begin = at + 1;
      const size_t equals = line.find('=', begin);
      if (equals == std::string::npos)
        malformed(line, "a field without '='");
      const std::string key = line.substr(begin, equals - begin);
      if (key == "text") { // the rest of the line
        fields[key] = line.substr(equals + 1);
        break;
      }
      at = line.find(' ', equals);
      fields[key] =
          line.substr(equals + 1, at == std::string::npos ? std::string::npos : at - equals - 1);
    }
  }

  bool has(const char *key) const { return fields.count(key) != 0; }
  const std::string &text(const char *key) const {
    auto found = fields.find(key);
    if (found == fields.end())
      malformed(line, std::string("no ") + key);
    return found->second;
  }
  uint64_t number(const std::string &value) const {
    char *end = nullptr;
    errno = 0;
    const bool negative = !value.empty() && value[0] == '-';
    const uint64_t parsed = negative ? static_cast<uint64_t>(std::strtoll(value.c_str(), &end, 0))
                                     : std::strtoull(value.c_str(), &end, 0);
    if (value.empty() || *end != '\0' || errno == ERANGE)
      malformed(line, "'" + value + "' is not a number");
    return parsed;
  }
  uint64_t number(const char *key) const { return number(text(key)); }
  std::vector<uint64_t> numbers(const char *key, size_t count) const {
    std::vector<uint64_t> values;
    for (const std::string &part : split(text(key), ','))
      values.push_back(number(part));
    if (count && values.size() != count)
      malformed(line, std::string(key) + " needs " + std::to_string(count) + " values");
    return values;
  }
  void triple(const char *key, uint32_t (&values)[3]) const {
    const std::vector<uint64_t> parsed = numbers(key, 3);
    for (int i = 0; i < 3; ++i)
      values[i] = static_cast<uint32_t>(parsed[i]);
  }
  MatrixLayout layout(const char *key) const {
    std::vector<uint64_t> parts;
    for (const std::string &part : split(text(key), ':'))
      parts.push_back(number(part));
    if (parts.size() != 6)
      malformed(line, std::string(key) + " is not a layout");
    MatrixLayout layout;
    layout.type = static_cast<int>(parts[0]);
    layout.rows = parts[1];
    layout.cols = parts[2];
    layout.ld = static_cast<int64_t>(parts[3]);
    layout.batch = static_cast<int32_t>(parts[4]);
    layout.batchStride = static_cast<int64_t>(parts[5]);
    return layout;
  }

  const std::string &line;
  std::string kindName;
  std::map<std::string, std::string> fields;
};

void readMatmul(const LineReader &in, MatmulCall &m) {
  const std::vector<uint64_t> trans = in.numbers("trans", 2);
  m.transA = trans[0] != 0;
  m.transB = trans[1] != 0;
  m.epilogue = static_cast<uint32_t>(in.number("epilogue"));
  m.a = in.layout("a");
  m.b = in.layout("b");
  m.c = in.layout("c");
  m.d = in.layout("d");
  const std::vector<uint64_t> pointers = in.numbers("pointers", 6);
  m.pointerA = pointers[0];
  m.pointerB = pointers[1];
  m.pointerC = pointers[2];
  m.pointerD = pointers[3];
  m.bias = pointers[4];
  m.aux = pointers[5];
  const std::vector<uint64_t> aux = in.numbers("aux-layout", 2);
  m.auxLd = static_cast<int64_t>(aux[0]);
  m.auxBatchStride = static_cast<int64_t>(aux[1]);
  const std::vector<uint64_t> workspace = in.numbers("workspace", 2);
  m.workspace = workspace[0];
  m.workspaceBytes = workspace[1];
  const std::vector<uint64_t> alignment = in.numbers("alignment", 4);
  m.alignA = static_cast<uint32_t>(alignment[0]);
  m.alignB = static_cast<uint32_t>(alignment[1]);
  m.alignC = static_cast<uint32_t>(alignment[2]);
  m.alignD = static_cast<uint32_t>(alignment[3]);
  const std::vector<std::string> scale = split(in.text("scale"), ',');
  if (scale.size() != 2)
    malformed(in.line, "scale needs alpha and beta");
  m.alpha = std::strtof(scale[0].c_str(), nullptr);
  m.beta = std::strtof(scale[1].c_str(), nullptr);
}

void readKernel(const LineReader &in, KernelInfo &kernel) {
  kernel.binary = in.text("binary");
  kernel.registers = static_cast<int>(in.number("registers"));
  kernel.staticShared = static_cast<uint32_t>(in.number("static-shared"));
  kernel.maxThreads = static_cast<uint32_t>(in.number("max-threads"));
  if (in.text("params") == "-")
    return;
  for (const std::string &param : split(in.text("params"), ',')) {
    const size_t at = param.find('@');
    if (at == std::string::npos)
      malformed(in.line, "a parameter is size@offset");
    KernelParam parsed;
    parsed.size = static_cast<uint32_t>(in.number(param.substr(0, at)));
    parsed.offset = static_cast<uint32_t>(in.number(param.substr(at + 1)));
    kernel.params.push_back(parsed);
  }
}

} // namespace

uint32_t dataTypeBytes(int type) {
  switch (type) {
  case CUDA_R_16BF:
  case CUDA_R_16F:
    return 2;
  case CUDA_R_32F:
  case CUDA_R_32I:
    return 4;
  case CUDA_R_64F:
  case CUDA_R_64I:
    return 8;
  case CUDA_R_8I:
  case CUDA_R_8U:
    return 1;
  default:
    return 0;
  }
}

uint64_t layoutBytes(const MatrixLayout &layout) {
  if (layout.rows == 0 || layout.cols == 0)
    return 0;
  return ((layout.cols - 1) * static_cast<uint64_t>(layout.ld) + layout.rows +
          static_cast<uint64_t>(layout.batch - 1) * static_cast<uint64_t>(layout.batchStride)) *
         dataTypeBytes(layout.type);
}

const char *eventKindName(EventKind kind) { return kKindNames[int(kind)]; }
const char *originName(Origin origin) { return kOriginNames[int(origin)]; }

std::string formatEvent(const Event &event) {
  LineWriter out(event.kind);
  out.add("call", event.call);
  switch (event.kind) {
  case EventKind::Alloc:
  case EventKind::HostAlloc:
    out.add("address", hex(event.address));
    out.add("bytes", event.bytes);
    break;
  case EventKind::Free:
  case EventKind::HostFree:
    out.add("address", hex(event.address));
    break;
  case EventKind::Kernel:
    out.add("function", event.function);
    out.add("name", event.name);
    writeKernel(out, event.kernel);
    break;
  case EventKind::Launch: {
    out.add("origin", originName(event.origin));
    out.add("graph", event.graph);
    out.add("function", event.function);
    out.add("name", event.name);
    out.triple("grid", event.grid);
    out.triple("block", event.block);
    out.add("shared", event.sharedBytes);
    std::string args;
    for (uint64_t arg : event.args)
      args += (args.empty() ? "" : ",") + hex(arg);
    out.add("args", args.empty() ? "-" : args);
    if (!event.wideArgs.empty()) {
      std::string words;
      for (uint64_t word : event.wideArgs)
        words += (words.empty() ? "" : ",") + hex(word);
      out.add("wide", words);
    }
    break;
  }
  case EventKind::Matmul:
    out.add("origin", originName(event.origin));
    out.add("graph", event.graph);
    out.add("stream", static_cast<uint64_t>(event.stream));
    writeMatmul(out, event.matmul);
    break;
  case EventKind::Memset:
    out.add("origin", originName(event.origin));
    out.add("graph", event.graph);
    out.add("address", hex(event.address));
    out.add("bytes", event.bytes);
    out.add("value", static_cast<uint64_t>(event.value));
    break;
  case EventKind::Memcpy:
    out.add("origin", originName(event.origin));
    out.add("graph", event.graph);
    out.add("what", event.what);
    out.add("address", hex(event.address));
    out.add("source", hex(event.source));
    out.add("bytes", event.bytes);
    if (!event.args.empty()) {
      std::string words;
      for (uint64_t word : event.args)
        words += (words.empty() ? "" : ",") + hex(word);
      out.add("data", words);
    }
    break;
  case EventKind::Sync:
    out.add("what", event.what);
    break;
  case EventKind::CaptureBegin:
    out.add("graph", event.graph);
    break;
  case EventKind::CaptureEnd:
    out.add("graph", event.graph);
    out.add("what", event.what);
    break;
  case EventKind::GraphLaunch:
    out.add("graph", event.graph);
    out.add("bytes", event.bytes);
    break;
  case EventKind::Violation:
    out.add("what", event.what);
    out.add("text", event.text);
    break;
  }
  return out.line;
}

Event parseEvent(const std::string &line) {
  const LineReader in(line);
  Event event;
  bool known = false;
  for (int kind = 0; kind <= int(EventKind::Violation); ++kind)
    if (in.kindName == kKindNames[kind]) {
      event.kind = static_cast<EventKind>(kind);
      known = true;
    }
  if (!known)
    malformed(line, "unknown event '" + in.kindName + "'");
  event.call = in.number("call");
  if (in.has("origin")) {
    const std::string &origin = in.text("origin");
    bool knownOrigin = false;
    for (int o = 0; o < 3; ++o)
      if (origin == kOriginNames[o]) {
        event.origin = static_cast<Origin>(o);
        knownOrigin = true;
      }
    if (!knownOrigin)
      malformed(line, "unknown origin '" + origin + "'");
  }
  const std::pair<const char *, uint64_t Event::*> numbers[] = {{"graph", &Event::graph},
                                                                {"address", &Event::address},
                                                                {"source", &Event::source},
                                                                {"bytes", &Event::bytes},
                                                                {"function", &Event::function}};
  for (const auto &[key, field] : numbers)
    if (in.has(key))
      event.*field = in.number(key);
  const std::pair<const char *, std::string Event::*> texts[] = {
      {"what", &Event::what}, {"text", &Event::text}, {"name", &Event::name}};
  for (const auto &[key, field] : texts)
    if (in.has(key))
      event.*field = in.text(key);
  if (in.has("value"))
    event.value = static_cast<int>(in.number("value"));
  if (event.kind == EventKind::Launch) {
    in.triple("grid", event.grid);
    in.triple("block", event.block);
    event.sharedBytes = static_cast<uint32_t>(in.number("shared"));
    if (in.text("args") != "-")
      event.args = in.numbers("args", 0);
    if (in.has("wide"))
      event.wideArgs = in.numbers("wide", 0);
  }
  if (event.kind == EventKind::Memcpy && in.has("data"))
    event.args = in.numbers("data", 0);
  if (event.kind == EventKind::Kernel)
    readKernel(in, event.kernel);
  if (event.kind == EventKind::Matmul) {
    if (in.has("stream"))
      event.stream = static_cast<uint32_t>(in.number("stream"));
    readMatmul(in, event.matmul);
  }
  return event;
}

std::vector<Event> parseTrace(std::istream &in) {
  std::vector<Event> events;
  for (std::string line; std::getline(in, line);)
    if (!line.empty())
      events.push_back(parseEvent(line));
  return events;
}

std::vector<Event> parseTraceText(const std::string &text) {
  std::istringstream in(text);
  return parseTrace(in);
}

} // namespace ampc::dryrun
