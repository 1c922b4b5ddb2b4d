//===- RunCheckpoint.cpp - What a training run puts in its checkpoints ----===//
//
// The runner's side of checkpoints (RunCheckpoint.h): the run's identity and
// its check on resume, the buffers and moving average a checkpoint holds, and
// finding the checkpoint --resume names.
//
//===----------------------------------------------------------------------===//

#include "runtime/train/RunCheckpoint.h"

#include <sys/stat.h>

#include <cstdio>
#include <cstring>

namespace ampc::train {

/// \p value exactly, as a hexadecimal float ("%a"), for the metadata.
std::string exactNumber(double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%a", value);
  return buffer;
}

/// The last component of \p path.
std::string fileNameOf(const std::string &path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

/// The metadata that must match for a checkpoint to continue this run bit
/// for bit: the plan and every option that changes the numbers.
std::map<std::string, std::string> runIdentity(const plan::Plan &plan, const RunnerOptions &options,
                                               const TrainingBackend &backend) {
  std::map<std::string, std::string> identity;
  identity["plan_hash"] = planHash(plan);
  identity["model"] = plan.modelName;
  identity["device"] = backend.device();
  identity["seed"] = std::to_string(options.seed);
  identity["steps"] = std::to_string(options.steps);
  identity["accumulation_steps"] = std::to_string(plan.accumulationSteps);
  identity["ema_decay"] = options.emaDecay ? exactNumber(options.emaDecay) : "none";
  if (options.dataPath.empty()) {
    identity["data"] = "synthetic";
    identity["data_bytes"] = "0";
    identity["data_format"] = "none";
  } else {
    struct stat info = {};
    identity["data"] = fileNameOf(options.dataPath);
    identity["data_bytes"] =
        std::to_string(::stat(options.dataPath.c_str(), &info) == 0 ? info.st_size : 0);
    identity["data_format"] = dataFormatName(
        options.dataFormat ? *options.dataFormat : defaultDataFormat(options.dataPath));
  }
  return identity;
}

/// Throws when \p checkpoint (read from \p file) was written by another plan
/// or with other numerics options than \p identity, naming what differs.
void checkIdentity(const Checkpoint &checkpoint, const std::string &file,
                   const std::map<std::string, std::string> &identity) {
  // The stored value of \p key; ema_decay, added after the format's first
  // checkpoints, reads as "none" where it is missing.
  auto stored = [&](const std::string &key) {
    return key == "ema_decay" ? checkpoint.valueOr(key, "none") : checkpoint.value(key, file);
  };
  auto differs = [&](const std::string &key) { return stored(key) != identity.at(key); };
  const std::string where = "cannot resume from " + file + ": ";
  if (differs("plan_hash"))
    throw CheckpointError(where + "the checkpoint was written by a plan with hash " +
                          checkpoint.value("plan_hash", file) + " (model @" +
                          checkpoint.value("model", file) + "), this executable's plan has hash " +
                          identity.at("plan_hash") + " (another model or compile options)");
  if (differs("device"))
    throw CheckpointError(where + "the checkpoint was written on the " +
                          checkpoint.value("device", file) + " backend, this run is on the " +
                          identity.at("device") + " backend, whose numerics differ (--device " +
                          checkpoint.value("device", file) + ")");
  const std::pair<const char *, const char *> options[] = {
      {"seed", "--seed"},
      {"steps", "--steps (the learning-rate schedule depends on it)"},
      {"data", "--data"},
      {"data_bytes", "--data (the file's size in bytes)"},
      {"data_format", "--data-format"},
      {"ema_decay", "--ema-decay (the checkpoint holds the moving average of that run)"}};
  for (const auto &[key, flag] : options)
    if (differs(key))
      throw CheckpointError(where + "the checkpoint was written with " + flag + " " + stored(key) +
                            ", this run has " + identity.at(key) +
                            "; resume with the options of the run that wrote it");
}

/// The buffers a checkpoint holds, in restore order: parameters (master
/// weights), their reduced-precision copies, then the state (gradient
/// accumulators, optimizer moments, loss-scale counters).
std::vector<std::pair<uint32_t, std::string>> checkpointBuffers(const plan::Plan &plan) {
  std::vector<std::pair<uint32_t, std::string>> buffers;
  const std::pair<plan::BufferRole, const char *> roles[] = {
      {plan::BufferRole::Parameter, "parameter/"},
      {plan::BufferRole::ParameterCopy, "copy/"},
      {plan::BufferRole::State, "state/"}};
  for (const auto &[role, prefix] : roles)
    for (uint32_t id = 0; id < plan.buffers.size(); ++id)
      if (plan.buffers[id].role == role)
        buffers.emplace_back(id, prefix + plan.buffers[id].name);
  return buffers;
}

/// Appends the checkpointed buffers of \p backend to \p checkpoint.
void captureBuffers(const plan::Plan &plan, TrainingBackend &backend, Checkpoint &checkpoint) {
  for (const auto &[id, name] : checkpointBuffers(plan)) {
    const plan::Buffer &buffer = plan.buffers[id];
    const std::vector<double> values = backend.readBuffer(id);
    CheckpointSection section;
    section.name = name;
    section.shape = buffer.shape;
    if (plan::isIntegerDType(buffer.dtype)) {
      section.type = SectionType::I64;
      section.bytes.resize(values.size() * 8);
      for (size_t i = 0; i < values.size(); ++i) {
        const int64_t value = static_cast<int64_t>(values[i]);
        std::memcpy(&section.bytes[i * 8], &value, 8);
      }
    } else {
      // Every float buffer holds float values (bf16/f16 ones too).
      section.type = SectionType::F32;
      section.bytes.resize(values.size() * 4);
      for (size_t i = 0; i < values.size(); ++i) {
        const float value = static_cast<float>(values[i]);
        std::memcpy(&section.bytes[i * 4], &value, 4);
      }
    }
    checkpoint.sections.push_back(std::move(section));
  }
}

/// Restores the buffers of \p checkpoint (read from \p file) into \p backend.
void restoreBuffers(const plan::Plan &plan, TrainingBackend &backend, const Checkpoint &checkpoint,
                    const std::string &file) {
  for (const auto &[id, name] : checkpointBuffers(plan)) {
    const plan::Buffer &buffer = plan.buffers[id];
    const CheckpointSection *section = checkpoint.find(name);
    const SectionType type =
        plan::isIntegerDType(buffer.dtype) ? SectionType::I64 : SectionType::F32;
    if (!section || section->type != type || section->shape != buffer.shape)
      throw CheckpointError("cannot resume from " + file + ": it has no " +
                            plan::shapeToString(buffer.shape) + " buffer '" + name + "'");
    std::vector<double> values(static_cast<size_t>(plan::numElements(buffer)));
    for (size_t i = 0; i < values.size(); ++i) {
      if (type == SectionType::I64) {
        int64_t value;
        std::memcpy(&value, &section->bytes[i * 8], 8);
        values[i] = static_cast<double>(value);
      } else {
        float value;
        std::memcpy(&value, &section->bytes[i * 4], 4);
        values[i] = value;
      }
    }
    backend.writeBuffer(id, values);
  }
}

/// Appends the moving average \p ema as sections "ema/<parameter>" (F32).
void captureAverage(const plan::Plan &plan, const WeightAverage &ema, Checkpoint &checkpoint) {
  for (size_t i = 0; i < plan.parameters.size(); ++i) {
    CheckpointSection section;
    section.name = "ema/" + plan.parameters[i].name;
    section.type = SectionType::F32;
    section.shape = plan.buffers[plan.parameters[i].buffer].shape;
    const std::vector<double> &values = ema.values()[i];
    section.bytes.resize(values.size() * 4);
    for (size_t j = 0; j < values.size(); ++j) {
      const float value = static_cast<float>(values[j]);
      std::memcpy(&section.bytes[j * 4], &value, 4);
    }
    checkpoint.sections.push_back(std::move(section));
  }
}

/// The moving average held by \p checkpoint (read from \p file).
ParameterValues restoreAverage(const plan::Plan &plan, const Checkpoint &checkpoint,
                               const std::string &file) {
  ParameterValues values;
  for (const plan::Parameter &parameter : plan.parameters) {
    const std::string name = "ema/" + parameter.name;
    const plan::Buffer &buffer = plan.buffers[parameter.buffer];
    const CheckpointSection *section = checkpoint.find(name);
    if (!section || section->type != SectionType::F32 || section->shape != buffer.shape)
      throw CheckpointError("cannot resume from " + file + ": it has no " +
                            plan::shapeToString(buffer.shape) + " buffer '" + name + "'");
    std::vector<double> &out = values.emplace_back(section->bytes.size() / 4);
    for (size_t j = 0; j < out.size(); ++j) {
      float value;
      std::memcpy(&value, &section->bytes[j * 4], 4);
      out[j] = value;
    }
  }
  return values;
}

/// Creates \p directory and its parents; errors are left to the write.
void makeDirectories(const std::string &directory) {
  for (size_t slash = directory.find('/', 1); slash != std::string::npos;
       slash = directory.find('/', slash + 1))
    ::mkdir(directory.substr(0, slash).c_str(), 0755);
  ::mkdir(directory.c_str(), 0755);
}

bool isDirectory(const std::string &path) {
  struct stat info = {};
  return ::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

/// The checkpoint --resume names, decoded, and its file; no file when
/// `--resume latest` finds no checkpoint yet (the run starts at step 0).
/// Invalid files in a directory are skipped with a warning naming them.
std::pair<std::string, Checkpoint> findResumePoint(const RunnerOptions &options,
                                                   const std::string &program,
                                                   const RunnerStreams &streams) {
  const bool latest = options.resume == "latest";
  const std::string directory = latest ? options.checkpointDir : options.resume;
  if (!latest && !isDirectory(options.resume)) {
    const std::string &file = options.resume;
    return {file, decodeCheckpoint(readWholeFile(file), file)};
  }
  const auto files = listCheckpoints(directory);
  for (const auto &candidate : files) {
    try {
      return {candidate.second,
              decodeCheckpoint(readWholeFile(candidate.second), candidate.second)};
    } catch (const CheckpointError &error) {
      std::fprintf(streams.err, "%s: warning: skipping %s\n", program.c_str(), error.what());
      std::fflush(streams.err);
    }
  }
  if (!files.empty())
    throw CheckpointError("no valid checkpoint in " + directory + " (every step-N.ckpt file " +
                          "there failed to load; see the warnings)");
  if (!latest)
    throw CheckpointError("no checkpoint to resume from in " + directory +
                          " (no step-N.ckpt file)");
  return {};
}

} // namespace ampc::train
