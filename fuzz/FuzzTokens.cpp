//===- FuzzTokens.cpp - Fuzz target: token data files -----------------------===//
//
// The input is a token file, as `--data FILE` gives a language model one: read as nanoGPT
// uint16 tokens (".bin") and as text (one token per byte), for a GPT-2-sized and a small
// vocabulary and for short and long rows, through makeBatchSource as the training executable
// calls it (the file mapped and validated, then batches of windows cut from it). DataError is
// the expected answer to a file that does not fit.
//
//===----------------------------------------------------------------------===//

#include "fuzz/FuzzSupport.h"
#include "runtime/train/Data.h"

using namespace ampc;

namespace {

/// A language model's task: [2, T] tokens and targets over a vocabulary of V.
train::Task languageTask(int64_t sequence, int64_t vocab) {
  train::Task task;
  task.kind = train::TaskKind::Language;
  task.first.name = "tokens";
  task.first.use = plan::InputUse::Indices;
  task.first.bound = vocab;
  task.labels.name = "targets";
  task.labels.use = plan::InputUse::Labels;
  task.labels.bound = vocab;
  task.firstDType = plan::DType::I32;
  task.labelsDType = plan::DType::I64;
  task.batch = 2;
  task.sequence = sequence;
  task.classes = vocab;
  return task;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string path = fuzz::writeScratchFile("tokens.bin", data, size);
  struct Case {
    train::DataFormat format;
    int64_t vocab, sequence;
  };
  // The longest rows the file holds exactly: T + 1 tokens.
  const int64_t bytes = static_cast<int64_t>(size);
  for (const Case &c :
       {Case{train::DataFormat::Tokens, 50304, 4},
        Case{train::DataFormat::Tokens, 65536, bytes / 2 - 1},
        Case{train::DataFormat::Text, 256, 8}, Case{train::DataFormat::Text, 100, bytes - 1}}) {
    if (c.sequence < 1)
      continue;
    train::DataOptions options;
    options.path = path;
    options.format = c.format;
    options.seed = size;
    try {
      auto batches = train::makeBatchSource(languageTask(c.sequence, c.vocab), options);
      for (uint64_t step = 0; step < 3; ++step)
        batches->batch(step);
      batches->describe();
    } catch (const train::DataError &) {
    }
  }
  return 0;
}
