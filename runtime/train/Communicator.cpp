//===- Communicator.cpp - Deterministic exchanges between ranks, over MPI -===//

#include "runtime/train/Communicator.h"

#include "runtime/support/DynamicLibrary.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
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

/// The length of the longest segment [bounds[r], bounds[r + 1]).
static size_t largestSegment(const std::vector<size_t> &bounds) {
  size_t block = 0;
  for (size_t r = 0; r + 1 < bounds.size(); ++r)
    block = std::max(block, bounds[r + 1] - bounds[r]);
  return block;
}

void Communicator::reduceScatterSum(std::vector<float> &values, const std::vector<size_t> &bounds,
                                    const std::string &what) {
  const size_t ranks = static_cast<size_t>(size());
  if (ranks == 1)
    return;
  // Blocks of the largest segment's size: block r of the send buffer is
  // rank r's segment of this rank's values, zero-padded.
  const size_t block = largestSegment(bounds);
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
  const size_t block = largestSegment(bounds);
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

// Every MPI function the runner calls: X(name, result type, parameter list),
// the name as in mpi.h. The member, its type and the symbol looked up all
// come from this list.
#define AMPC_MPI_ENTRY_POINTS(X)                                                                   \
  X(MPI_Init, int, (int *argc, char ***argv))                                                      \
  X(MPI_Initialized, int, (int *flag))                                                             \
  X(MPI_Comm_rank, int, (Handle comm, int *rank))                                                  \
  X(MPI_Comm_size, int, (Handle comm, int *size))                                                  \
  X(MPI_Iallgather, int,                                                                           \
    (const void *send, int sendCount, Handle sendType, void *receive, int receiveCount,            \
     Handle receiveType, Handle comm, Handle *request))                                            \
  X(MPI_Ialltoall, int,                                                                            \
    (const void *send, int sendCount, Handle sendType, void *receive, int receiveCount,            \
     Handle receiveType, Handle comm, Handle *request))                                            \
  X(MPI_Test, int, (Handle *, int *done, void *status))                                            \
  X(MPI_Finalize, int, ())                                                                         \
  X(MPI_Abort, int, (Handle comm, int status))                                                     \
  X(MPI_Get_library_version, int, (char *version, int *length))

// Open MPI's predefined objects whose addresses are the handles used.
#define AMPC_MPI_OBJECTS(X)                                                                        \
  X(ompi_mpi_comm_world)                                                                           \
  X(ompi_mpi_byte)

/// Open MPI's entry points and predefined objects, resolved from one library.
struct MpiApi {
#define AMPC_MPI_MEMBER(name, result, parameters) result(*name) parameters = nullptr;
  AMPC_MPI_ENTRY_POINTS(AMPC_MPI_MEMBER)
#undef AMPC_MPI_MEMBER
#define AMPC_MPI_OBJECT(name) Handle name = nullptr;
  AMPC_MPI_OBJECTS(AMPC_MPI_OBJECT)
#undef AMPC_MPI_OBJECT
  /// The library that opened ("libmpi.so.40").
  std::string library;
};

/// A non-blocking collective of equal blocks (MPI_Iallgather, MPI_Ialltoall).
using CollectiveFn = decltype(MpiApi::MPI_Iallgather);

/// Where MPI is looked for: the file $AMPC_MPI_LIBRARY names, else Open MPI's
/// libmpi.so.40 and libmpi.so.
LibrarySearch mpiLibrarySearch() {
  LibrarySearch search;
  search.what = "Open MPI";
  search.names = {"libmpi.so.40", "libmpi.so"};
  search.variable = "AMPC_MPI_LIBRARY";
  search.advice = "this run was started by an MPI launcher; install Open MPI (Debian: apt-get "
                  "install openmpi-bin) or put its lib directory on LD_LIBRARY_PATH";
  // Open MPI's plugins (mca_*.so) resolve libmpi's symbols globally.
  search.scope = SymbolScope::Global;
  search.applyVariable();
  return search;
}

/// Opens MPI and resolves the table; the library stays loaded for the life
/// of the process. Throws CommunicatorError.
MpiApi loadMpiApi() {
  try {
    DynamicLibrary library = DynamicLibrary::open(mpiLibrarySearch());
    MpiApi api;
    api.library = library.name();
    SymbolResolver resolve(library);
#define AMPC_MPI_RESOLVE(name, ...) resolve(api.name, #name);
    AMPC_MPI_ENTRY_POINTS(AMPC_MPI_RESOLVE)
    AMPC_MPI_OBJECTS(AMPC_MPI_RESOLVE)
#undef AMPC_MPI_RESOLVE
    resolve.check("Open MPI 3 or later is needed (this runner speaks Open MPI's ABI; launch it "
                  "with Open MPI's mpirun)");
    library.release();
    return api;
  } catch (const LibraryError &error) {
    throw CommunicatorError(error.what());
  }
}

class MpiWorld final : public Communicator {
public:
  explicit MpiWorld(double timeoutSeconds) : timeout(timeoutSeconds), mpi(loadMpiApi()) {
    int already = 0;
    mpi.MPI_Initialized(&already);
    if (!already && mpi.MPI_Init(nullptr, nullptr) != 0)
      throw CommunicatorError("MPI_Init failed");
    mpi.MPI_Comm_rank(mpi.ompi_mpi_comm_world, &me);
    mpi.MPI_Comm_size(mpi.ompi_mpi_comm_world, &ranks);
    char version[256] = {};
    int length = 0;
    mpi.MPI_Get_library_version(version, &length);
    std::string text(version, static_cast<size_t>(std::max(0, length)));
    text = text.substr(0, text.find_first_of(",\n"));
    name = "MPI (" + text + ")";
  }

  ~MpiWorld() override {
    if (!aborted)
      mpi.MPI_Finalize();
  }

  int rank() const override { return me; }
  int size() const override { return ranks; }
  std::string describe() const override { return name; }

  void allGather(const void *send, size_t bytes, void *receive, const std::string &what) override {
    exchange(mpi.MPI_Iallgather, send, bytes, receive, false, what);
  }
  void allToAll(const void *send, size_t bytes, void *receive, const std::string &what) override {
    exchange(mpi.MPI_Ialltoall, send, bytes, receive, true, what);
  }
  void abortAll(int status) override {
    aborted = true;
    mpi.MPI_Abort(mpi.ompi_mpi_comm_world, status);
  }

private:
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
    if (collective(send, count, mpi.ompi_mpi_byte, receive, count, mpi.ompi_mpi_byte,
                   mpi.ompi_mpi_comm_world, &request) != 0)
      throw CommunicatorError("MPI failed to start the exchange of " + what);
    const auto start = std::chrono::steady_clock::now();
    for (uint64_t polls = 0;; ++polls) {
      int done = 0;
      if (mpi.MPI_Test(&request, &done, nullptr) != 0)
        throw CommunicatorError("MPI failed during the exchange of " + what);
      if (done)
        return;
      if (interrupted && !interruptNoted && polls % 1024 == 0) {
        const std::string signal = interrupted();
        if (!signal.empty()) {
          interruptNoted = true;
          std::fprintf(stderr,
                       "%s: note: %s arrived while waiting for the other ranks in the "
                       "exchange of %s; the ranks stop together after this step once they "
                       "answer (if a rank died, the launcher is ending the run instead)\n",
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
  MpiApi mpi;
  int me = 0, ranks = 1;
  bool aborted = false, interruptNoted = false;
  std::string name;
};

} // namespace

std::unique_ptr<Communicator> makeMpiCommunicator(double timeoutSeconds) {
  return std::make_unique<MpiWorld>(timeoutSeconds);
}

} // namespace ampc::train

//===----------------------------------------------------------------------===//
// TCP, for environment launches
//===----------------------------------------------------------------------===//

namespace ampc::train {

namespace {

using Clock = std::chrono::steady_clock;

/// Now plus \p seconds.
Clock::time_point deadlineAfter(double seconds) {
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

class TcpWorld final : public Communicator {
public:
  TcpWorld(const LaunchInfo &launch, int port, double timeoutSeconds)
      : me(launch.rank), ranks(launch.size), timeout(timeoutSeconds),
        where(launch.masterAddress + ":" + std::to_string(port)) {
    peers.assign(static_cast<size_t>(ranks), -1);
    const auto deadline = deadlineAfter(timeout);
    if (me == 0)
      acceptPeers(port, deadline);
    else
      connectToRankZero(launch.masterAddress, port, deadline);
  }
  ~TcpWorld() override { closeAll(); }

  int rank() const override { return me; }
  int size() const override { return ranks; }
  std::string describe() const override { return "TCP via rank 0 at " + where; }

  void allGather(const void *send, size_t bytes, void *receive, const std::string &what) override {
    char *out = static_cast<char *>(receive);
    const auto deadline = deadlineAfter(timeout);
    if (me != 0) {
      writeAll(0, send, bytes, deadline, what);
      readAll(0, out, bytes * ranks, deadline, what);
      return;
    }
    std::memcpy(out, send, bytes);
    for (int r = 1; r < ranks; ++r)
      readAll(r, out + r * bytes, bytes, deadline, what);
    for (int r = 1; r < ranks; ++r)
      writeAll(r, out, bytes * ranks, deadline, what);
  }

  void allToAll(const void *send, size_t bytes, void *receive, const std::string &what) override {
    const size_t n = static_cast<size_t>(ranks);
    const auto deadline = deadlineAfter(timeout);
    if (me != 0) {
      writeAll(0, send, bytes * n, deadline, what);
      readAll(0, receive, bytes * n, deadline, what);
      return;
    }
    // Rank 0 routes: block d of rank s goes to rank d at s * bytes.
    std::vector<char> table(n * n * bytes);
    std::memcpy(table.data(), send, n * bytes);
    for (int r = 1; r < ranks; ++r)
      readAll(r, table.data() + r * n * bytes, n * bytes, deadline, what);
    std::vector<char> out(n * bytes);
    for (size_t d = 0; d < n; ++d) {
      for (size_t s = 0; s < n; ++s)
        std::memcpy(out.data() + s * bytes, table.data() + (s * n + d) * bytes, bytes);
      if (d == 0)
        std::memcpy(receive, out.data(), n * bytes);
      else
        writeAll(static_cast<int>(d), out.data(), n * bytes, deadline, what);
    }
  }

  void abortAll(int) override {
    // The others see their connection close and stop, naming this rank.
    closeAll();
  }

private:
  [[noreturn]] void lost(int peer, const std::string &what, const std::string &how) {
    const int other = me == 0 ? peer : 0;
    throw CommunicatorError(
        "rank " + std::to_string(me) + " of " + std::to_string(ranks) + ": rank " +
        std::to_string(other) + " " + how + " during the exchange of " + what +
        (how == "closed its connection" ? " (it died or stopped on an error)" : ""));
  }

  /// Waits until \p fd is ready for \p events or the deadline passes.
  bool waitFor(int fd, short events, Clock::time_point deadline) {
    while (true) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0)
        return false;
      pollfd entry = {fd, events, 0};
      const int ready = ::poll(&entry, 1, static_cast<int>(std::min<long long>(left, 1000)));
      if (ready > 0)
        return true;
      if (ready < 0 && errno != EINTR)
        return true; // let the read or write report it
    }
  }

  void readAll(int peer, void *data, size_t bytes, Clock::time_point deadline,
               const std::string &what) {
    char *at = static_cast<char *>(data);
    while (bytes > 0) {
      if (!waitFor(peers[peer], POLLIN, deadline))
        lost(peer, what,
             "did not answer within " + std::to_string(static_cast<int>(timeout)) +
                 " s (it hung, or stopped early; --dist-timeout sets this limit)");
      const ssize_t got = ::recv(peers[peer], at, bytes, 0);
      if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN))
        lost(peer, what, "closed its connection");
      if (got > 0) {
        at += got;
        bytes -= static_cast<size_t>(got);
      }
    }
  }

  void writeAll(int peer, const void *data, size_t bytes, Clock::time_point deadline,
                const std::string &what) {
    const char *at = static_cast<const char *>(data);
    while (bytes > 0) {
      if (!waitFor(peers[peer], POLLOUT, deadline))
        lost(peer, what, "did not read within " + std::to_string(static_cast<int>(timeout)) + " s");
      const ssize_t sent = ::send(peers[peer], at, bytes, MSG_NOSIGNAL);
      if (sent < 0 && errno != EINTR && errno != EAGAIN)
        lost(peer, what, "closed its connection");
      if (sent > 0) {
        at += sent;
        bytes -= static_cast<size_t>(sent);
      }
    }
  }

  static void tune(int fd) {
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }

  void acceptPeers(int port, Clock::time_point deadline) {
    listener = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in address = {};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_ANY);
    address.sin_port = htons(static_cast<uint16_t>(port));
    if (listener < 0 || ::bind(listener, reinterpret_cast<sockaddr *>(&address), sizeof(address)) ||
        ::listen(listener, ranks))
      throw CommunicatorError("rank 0 cannot listen on port " + std::to_string(port) + ": " +
                              std::strerror(errno) +
                              " (choose another MASTER_PORT, or AMPC_MASTER_PORT)");
    for (int joined = 1; joined < ranks; ++joined) {
      if (!waitFor(listener, POLLIN, deadline))
        throw CommunicatorError("rank 0 waited " + std::to_string(static_cast<int>(timeout)) +
                                " s for the other ranks to connect to port " +
                                std::to_string(port) + "; " + std::to_string(joined - 1) + " of " +
                                std::to_string(ranks - 1) +
                                " came (were all started with the same MASTER_ADDR, MASTER_PORT "
                                "and WORLD_SIZE?)");
      const int fd = ::accept(listener, nullptr, nullptr);
      if (fd < 0) {
        --joined;
        continue;
      }
      tune(fd);
      int32_t rank = -1;
      peers[0] = fd; // readAll reads peers[peer]; use slot 0 for the handshake
      readAll(0, &rank, sizeof(rank), deadline, "the connection handshake");
      peers[0] = -1;
      if (rank <= 0 || rank >= ranks || peers[rank] >= 0)
        throw CommunicatorError("a process connected to rank 0 as rank " + std::to_string(rank) +
                                ", which is not a free rank of " + std::to_string(ranks) +
                                " (two launches sharing MASTER_PORT?)");
      peers[rank] = fd;
    }
    ::close(listener);
    listener = -1;
  }

  void connectToRankZero(const std::string &host, int port, Clock::time_point deadline) {
    addrinfo hints = {}, *found = nullptr;
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || !found)
      throw CommunicatorError("cannot resolve MASTER_ADDR '" + host + "'");
    // Rank 0 may start later: retry until the deadline.
    while (true) {
      const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      if (fd >= 0 && ::connect(fd, found->ai_addr, found->ai_addrlen) == 0) {
        tune(fd);
        peers[0] = fd;
        break;
      }
      if (fd >= 0)
        ::close(fd);
      if (Clock::now() > deadline) {
        ::freeaddrinfo(found);
        throw CommunicatorError("rank " + std::to_string(me) + " could not connect to rank 0 at " +
                                where + " within " + std::to_string(static_cast<int>(timeout)) +
                                " s (is rank 0 running, and MASTER_ADDR/MASTER_PORT right?)");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ::freeaddrinfo(found);
    const int32_t rank = me;
    writeAll(0, &rank, sizeof(rank), deadline, "the connection handshake");
  }

  void closeAll() {
    for (int &fd : peers)
      if (fd >= 0) {
        ::close(fd);
        fd = -1;
      }
    if (listener >= 0)
      ::close(listener);
    listener = -1;
  }

  int me, ranks;
  double timeout;
  std::string where;
  std::vector<int> peers; ///< rank 0: a socket per rank; others: peers[0]
  int listener = -1;
};

} // namespace

std::unique_ptr<Communicator> makeTcpCommunicator(const LaunchInfo &launch, int port,
                                                  double timeoutSeconds) {
  return std::make_unique<TcpWorld>(launch, port, timeoutSeconds);
}

} // namespace ampc::train
