//===- Communicator.cpp - Deterministic exchanges between ranks, over MPI -===//

#include "runtime/train/Communicator.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace ampc::train {

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

void Communicator::allReduceSum(std::vector<float> &values, const std::string &what) {
  const int ranks = size();
  if (ranks == 1)
    return;
  // A reduce-scatter into near-equal segments, then an all-gather: each
  // rank adds only its segment, in rank order.
  std::vector<size_t> bounds(static_cast<size_t>(ranks) + 1);
  for (int r = 0; r <= ranks; ++r)
    bounds[r] = values.size() * static_cast<size_t>(r) / static_cast<size_t>(ranks);
  reduceScatterSum(values, bounds, what);
  allGatherSegments(values, bounds, what);
}

void Communicator::reduceScatterSum(std::vector<float> &values, const std::vector<size_t> &bounds,
                                    const std::string &what) {
  const size_t ranks = static_cast<size_t>(size());
  if (ranks == 1)
    return;
  // Blocks of the largest segment's size: block r of the send buffer is
  // rank r's segment of this rank's values, zero-padded.
  size_t block = 0;
  for (size_t r = 0; r < ranks; ++r)
    block = std::max(block, bounds[r + 1] - bounds[r]);
  if (block == 0)
    return;
  std::vector<float> send(ranks * block, 0.0f), receive(ranks * block);
  for (size_t r = 0; r < ranks; ++r)
    std::copy(values.begin() + bounds[r], values.begin() + bounds[r + 1], send.begin() + r * block);
  allToAll(send.data(), block * sizeof(float), receive.data(), what);
  // receive holds every rank's copy of this rank's segment: add in rank
  // order, starting from rank 0's.
  const size_t me = static_cast<size_t>(rank());
  const size_t length = bounds[me + 1] - bounds[me];
  float *segment = values.data() + bounds[me];
  std::copy(receive.begin(), receive.begin() + length, segment);
  for (size_t r = 1; r < ranks; ++r) {
    const float *other = receive.data() + r * block;
    for (size_t i = 0; i < length; ++i)
      segment[i] += other[i];
  }
}

void Communicator::allGatherSegments(std::vector<float> &values, const std::vector<size_t> &bounds,
                                     const std::string &what) {
  const size_t ranks = static_cast<size_t>(size());
  if (ranks == 1)
    return;
  size_t block = 0;
  for (size_t r = 0; r < ranks; ++r)
    block = std::max(block, bounds[r + 1] - bounds[r]);
  if (block == 0)
    return;
  const size_t me = static_cast<size_t>(rank());
  std::vector<float> send(block, 0.0f), receive(ranks * block);
  std::copy(values.begin() + bounds[me], values.begin() + bounds[me + 1], send.begin());
  allGather(send.data(), block * sizeof(float), receive.data(), what);
  for (size_t r = 0; r < ranks; ++r)
    std::copy(receive.begin() + r * block,
              receive.begin() + r * block + (bounds[r + 1] - bounds[r]),
              values.begin() + bounds[r]);
}

std::vector<double> Communicator::allGatherDouble(double value, const std::string &what) {
  std::vector<double> values(static_cast<size_t>(size()));
  allGather(&value, sizeof(double), values.data(), what);
  return values;
}

std::vector<std::string> Communicator::allGatherText(const std::string &text,
                                                     const std::string &what) {
  const size_t ranks = static_cast<size_t>(size());
  std::vector<double> lengths = allGatherDouble(static_cast<double>(text.size()), what);
  size_t longest = 0;
  for (double length : lengths)
    longest = std::max(longest, static_cast<size_t>(length));
  std::string send = text;
  send.resize(longest + 1, '\0');
  std::string receive(ranks * (longest + 1), '\0');
  allGather(send.data(), longest + 1, receive.data(), what);
  std::vector<std::string> texts(ranks);
  for (size_t r = 0; r < ranks; ++r)
    texts[r] = receive.substr(r * (longest + 1), static_cast<size_t>(lengths[r]));
  return texts;
}

//===----------------------------------------------------------------------===//
// The launch
//===----------------------------------------------------------------------===//

namespace {

/// The variable \p name as a non-negative int, or -1 when it is not set.
int intVariable(const std::function<const char *(const char *)> &getEnv, const char *name) {
  const char *text = getEnv(name);
  if (!text || !*text)
    return -1;
  char *end = nullptr;
  errno = 0;
  const long value = std::strtol(text, &end, 10);
  if (*end != '\0' || errno || value < 0 || value > INT_MAX)
    throw CommunicatorError(std::string("the launcher set ") + name + "='" + text +
                            "', which is not a non-negative integer");
  return static_cast<int>(value);
}

} // namespace

LaunchInfo detectLaunch(const std::function<const char *(const char *)> &getEnv) {
  LaunchInfo launch;
  struct Scheme {
    LaunchInfo::Kind kind;
    const char *rank, *size, *localRank;
  };
  // First match wins: mpirun sets OMPI_*; srun --mpi=pmix/pmi2 sets PMIX_RANK
  // or PMI_RANK (with SLURM_*); torchrun sets RANK/WORLD_SIZE; plain srun
  // (no PMI) only SLURM_*, which MPI_Init reads through Slurm's PMI.
  const Scheme schemes[] = {
      {LaunchInfo::Kind::Mpi, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
       "OMPI_COMM_WORLD_LOCAL_RANK"},
      {LaunchInfo::Kind::Mpi, "PMIX_RANK", "SLURM_NTASKS", "SLURM_LOCALID"},
      {LaunchInfo::Kind::Mpi, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},
      {LaunchInfo::Kind::Environment, "RANK", "WORLD_SIZE", "LOCAL_RANK"},
      {LaunchInfo::Kind::Mpi, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
  };
  for (const Scheme &scheme : schemes) {
    const int rank = intVariable(getEnv, scheme.rank);
    if (rank < 0)
      continue;
    const int size = intVariable(getEnv, scheme.size);
    if (size < 1)
      throw CommunicatorError(std::string("the launcher set ") + scheme.rank + " but not " +
                              scheme.size + " (the number of ranks)");
    if (rank >= size)
      throw CommunicatorError(std::string("the launcher set ") + scheme.rank + "=" +
                              std::to_string(rank) + ", not below " + scheme.size + "=" +
                              std::to_string(size));
    launch.kind = size == 1 ? LaunchInfo::Kind::Single : scheme.kind;
    launch.rank = rank;
    launch.size = size;
    launch.localRank = std::max(0, intVariable(getEnv, scheme.localRank));
    launch.source = std::string(scheme.rank) + "/" + scheme.size;
    if (scheme.kind == LaunchInfo::Kind::Environment) {
      const char *address = getEnv("MASTER_ADDR");
      launch.masterAddress = address && *address ? address : "127.0.0.1";
      const int port = intVariable(getEnv, "MASTER_PORT");
      launch.masterPort = port < 0 ? 29500 : port;
    }
    // A launch of one rank still says so when MPI started it, so the same
    // code path runs (mpirun -np 1).
    if (size == 1 && scheme.kind == LaunchInfo::Kind::Mpi &&
        std::strncmp(scheme.rank, "SLURM", 5) != 0)
      launch.kind = LaunchInfo::Kind::Mpi;
    return launch;
  }
  return launch;
}

//===----------------------------------------------------------------------===//
// One rank
//===----------------------------------------------------------------------===//

namespace {

class SingleRank final : public Communicator {
public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string describe() const override { return "one rank"; }
  void allGather(const void *send, size_t bytes, void *receive, const std::string &) override {
    std::memcpy(receive, send, bytes);
  }
  void allToAll(const void *send, size_t bytes, void *receive, const std::string &) override {
    std::memcpy(receive, send, bytes);
  }
};

} // namespace

std::unique_ptr<Communicator> makeSingleRankCommunicator() {
  return std::make_unique<SingleRank>();
}

//===----------------------------------------------------------------------===//
// MPI, opened at run time
//===----------------------------------------------------------------------===//

namespace {

// Open MPI's handles are pointers to its predefined objects (MPI_COMM_WORLD is
// &ompi_mpi_comm_world, MPI_BYTE &ompi_mpi_byte), and MPI_STATUS_IGNORE is
// null: declaring them as void * is the ABI of libmpi.so.40.
using Handle = void *;
using InitFn = int (*)(int *, char ***);
using FlagFn = int (*)(int *);
using CommQueryFn = int (*)(Handle, int *);
using CollectiveFn = int (*)(const void *, int, Handle, void *, int, Handle, Handle, Handle *);
using TestFn = int (*)(Handle *, int *, void *);
using FinalizeFn = int (*)();
using AbortFn = int (*)(Handle, int);
using VersionFn = int (*)(char *, int *);

class MpiWorld final : public Communicator {
public:
  explicit MpiWorld(double timeoutSeconds) : timeout(timeoutSeconds) {
    // RTLD_GLOBAL: Open MPI's plugins (mca_*.so) resolve libmpi's symbols.
    for (const char *name : {"libmpi.so.40", "libmpi.so"}) {
      library = ::dlopen(name, RTLD_NOW | RTLD_GLOBAL);
      if (library)
        break;
    }
    if (!library)
      throw CommunicatorError(
          "this run was started by an MPI launcher but libmpi.so.40 (Open MPI) cannot be "
          "opened: install Open MPI (Debian: apt-get install openmpi-bin) or put its lib "
          "directory on LD_LIBRARY_PATH");
    resolve(init, "MPI_Init");
    resolve(initialized, "MPI_Initialized");
    resolve(commRank, "MPI_Comm_rank");
    resolve(commSize, "MPI_Comm_size");
    resolve(iallgather, "MPI_Iallgather");
    resolve(ialltoall, "MPI_Ialltoall");
    resolve(test, "MPI_Test");
    resolve(finalize, "MPI_Finalize");
    resolve(abort, "MPI_Abort");
    resolve(libraryVersion, "MPI_Get_library_version");
    world = ::dlsym(library, "ompi_mpi_comm_world");
    byte = ::dlsym(library, "ompi_mpi_byte");
    if (!world || !byte)
      throw CommunicatorError("libmpi.so.40 is not Open MPI (no ompi_mpi_comm_world): this "
                              "runner speaks Open MPI's ABI; launch it with Open MPI's mpirun");
    int already = 0;
    initialized(&already);
    if (!already && init(nullptr, nullptr) != 0)
      throw CommunicatorError("MPI_Init failed");
    commRank(world, &me);
    commSize(world, &ranks);
    char version[256] = {};
    int length = 0;
    libraryVersion(version, &length);
    std::string text(version, static_cast<size_t>(std::max(0, length)));
    text = text.substr(0, text.find_first_of(",\n"));
    name = "MPI (" + text + ")";
  }

  ~MpiWorld() override {
    if (init && !aborted)
      finalize();
  }

  int rank() const override { return me; }
  int size() const override { return ranks; }
  std::string describe() const override { return name; }

  void allGather(const void *send, size_t bytes, void *receive, const std::string &what) override {
    exchange(iallgather, send, bytes, receive, false, what);
  }
  void allToAll(const void *send, size_t bytes, void *receive, const std::string &what) override {
    exchange(ialltoall, send, bytes, receive, true, what);
  }
  void abortAll(int status) override {
    aborted = true;
    abort(world, status);
  }

private:
  template <typename Function> void resolve(Function &entry, const char *symbol) {
    entry = reinterpret_cast<Function>(::dlsym(library, symbol));
    if (!entry)
      throw CommunicatorError(std::string("libmpi.so.40 has no ") + symbol +
                              " (MPI 3 or later is needed)");
  }

  /// One collective of \p bytes per rank, in pieces of at most 1 GiB (MPI
  /// counts are ints), each waited for with the time limit.
  void exchange(CollectiveFn collective, const void *send, size_t bytes, void *receive,
                bool sendIsPerRank, const std::string &what) {
    const size_t piece = size_t(1) << 30;
    const char *in = static_cast<const char *>(send);
    char *out = static_cast<char *>(receive);
    if (bytes <= piece) {
      wait(collective, in, static_cast<int>(bytes), out, what);
      return;
    }
    // Large blocks: exchange slices of every block, then put them in place.
    for (size_t offset = 0; offset < bytes; offset += piece) {
      const size_t length = std::min(piece, bytes - offset);
      const size_t blocks = sendIsPerRank ? static_cast<size_t>(ranks) : 1;
      std::vector<char> slice(blocks * length), gathered(static_cast<size_t>(ranks) * length);
      for (size_t b = 0; b < blocks; ++b)
        std::memcpy(slice.data() + b * length, in + b * bytes + offset, length);
      wait(collective, slice.data(), static_cast<int>(length), gathered.data(), what);
      for (size_t r = 0; r < static_cast<size_t>(ranks); ++r)
        std::memcpy(out + r * bytes + offset, gathered.data() + r * length, length);
    }
  }

  /// Starts the non-blocking collective and polls it until it completes or
  /// the time limit passes.
  void wait(CollectiveFn collective, const void *send, int count, void *receive,
            const std::string &what) {
    Handle request = nullptr;
    if (collective(send, count, byte, receive, count, byte, world, &request) != 0)
      throw CommunicatorError("MPI failed to start the exchange of " + what);
    const auto start = std::chrono::steady_clock::now();
    for (uint64_t polls = 0;; ++polls) {
      int done = 0;
      if (test(&request, &done, nullptr) != 0)
        throw CommunicatorError("MPI failed during the exchange of " + what);
      if (done)
        return;
      if (interrupted && !interruptNoted && polls % 1024 == 0) {
        const std::string signal = interrupted();
        if (!signal.empty()) {
          interruptNoted = true;
          std::fprintf(stderr,
                       "%s: note: %s while waiting for the other ranks in the exchange of %s; "
                       "if a rank died, the launcher is ending the run\n",
                       label.c_str(), signal.c_str(), what.c_str());
          std::fflush(stderr);
        }
      }
      if (polls > 1000)
        std::this_thread::sleep_for(std::chrono::microseconds(polls > 100000 ? 1000 : 50));
      const double waited =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (waited > timeout)
        throw CommunicatorError("rank " + std::to_string(me) + " of " + std::to_string(ranks) +
                                " waited " + std::to_string(static_cast<int>(waited)) +
                                " s for the other ranks in the exchange of " + what +
                                ": a rank died, hung or stopped early (--dist-timeout sets "
                                "this limit)");
    }
  }

  double timeout;
  void *library = nullptr;
  Handle world = nullptr, byte = nullptr;
  InitFn init = nullptr;
  FlagFn initialized = nullptr;
  CommQueryFn commRank = nullptr, commSize = nullptr;
  CollectiveFn iallgather = nullptr, ialltoall = nullptr;
  TestFn test = nullptr;
  FinalizeFn finalize = nullptr;
  AbortFn abort = nullptr;
  VersionFn libraryVersion = nullptr;
  int me = 0, ranks = 1;
  bool aborted = false, interruptNoted = false;
  std::string name;
};

} // namespace

std::unique_ptr<Communicator> makeMpiCommunicator(double timeoutSeconds) {
  return std::make_unique<MpiWorld>(timeoutSeconds);
}

} // namespace ampc::train
