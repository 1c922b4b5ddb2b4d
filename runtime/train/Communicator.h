//===- Communicator.h - How the ranks of a data-parallel run talk ---------===//
//
// A data-parallel training run is N copies of the same training executable,
// one per rank, started by a launcher (mpirun, srun, torchrun). The ranks
// exchange gradients, a few flags and, with a sharded optimizer, weights and
// optimizer state. Communicator is that exchange on the host: two blocking
// primitives (all-gather and all-to-all of equal-sized byte blocks) with a
// time limit, and the reductions built on them.
//
// Every reduction here is deterministic: a rank receives the other ranks'
// contributions and adds them itself in rank order 0, 1, ..., N-1, so every
// rank computes the same bits, and a run repeated on the same world size
// gives the same bits. (MPI_Allreduce makes no such promise: its algorithm,
// and so its order of additions, may change with the message size.)
//
// The MPI transport opens libmpi.so.40 (Open MPI's stable ABI, 3.x to 5.x,
// or the file $AMPC_MPI_LIBRARY names) at run time with dlopen, as the CUDA
// backend opens the driver (runtime/support/DynamicLibrary.h): a training
// executable that is never launched by mpirun never loads MPI and starts on
// machines without it. See docs/distributed.md.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_TRAIN_COMMUNICATOR_H
#define AMPC_RUNTIME_TRAIN_COMMUNICATOR_H

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace ampc::train {

/// A failure of the exchange between ranks (MPI missing, a rank that died or
/// stopped answering); what() is one line.
class CommunicatorError : public std::runtime_error {
public:
  using runtime_error::runtime_error;
};

/// A mistake every rank finds the same way (a world size that does not fit
/// the plan, ranks started with different plans or options): rank 0 alone
/// reports it.
class RunMismatchError : public CommunicatorError {
public:
  using CommunicatorError::CommunicatorError;
};

/// The ranks of a run and the exchange between them.
class Communicator {
public:
  virtual ~Communicator() = default;
  /// This process's rank, in [0, size()).
  virtual int rank() const = 0;
  /// The number of ranks (the world size), >= 1.
  virtual int size() const = 0;
  /// One line for the start of training ("MPI (Open MPI 4.1.4)").
  virtual std::string describe() const = 0;

  /// Every rank sends its \p bytes bytes at \p send; \p receive (size() *
  /// bytes) gets rank r's block at r * bytes. \p what names the exchange in
  /// the error when it fails or times out.
  virtual void allGather(const void *send, size_t bytes, void *receive,
                         const std::string &what) = 0;
  /// \p send holds size() blocks of \p bytes; block r goes to rank r, and
  /// \p receive (size() * bytes) gets rank r's block for this rank at r * bytes.
  virtual void allToAll(const void *send, size_t bytes, void *receive, const std::string &what) = 0;
  /// Ends every rank of the run after a failure on this one, so that none
  /// waits for it (MPI_Abort); does nothing for a single rank.
  virtual void abortAll(int status) { (void)status; }
  /// Polled while waiting for the other ranks; when it returns a non-empty
  /// text (a signal arrived), a note with it is printed once to stderr, so a
  /// rank that its launcher ends after another rank died leaves a trace.
  std::function<std::string()> interrupted;
  /// How messages name this process ("train[rank 1]").
  std::string label = "rank";

  //===--------------------------------------------------------------------===//
  // Deterministic reductions over the primitives
  //===--------------------------------------------------------------------===//

  /// Sums \p values over the ranks in place, adding in rank order in float.
  /// Every rank ends with the same bits.
  void allReduceSum(std::vector<float> &values, const std::string &what);
  /// Reduce-scatter: \p values (the same length on every rank) is split into
  /// the segments [bounds[r], bounds[r + 1]); this rank's segment is summed
  /// over the ranks in rank order, in place. Other segments are left as they
  /// were. \p bounds has size() + 1 entries, from 0 to values.size().
  void reduceScatterSum(std::vector<float> &values, const std::vector<size_t> &bounds,
                        const std::string &what);
  /// All-gather of segments: rank r's segment [bounds[r], bounds[r + 1]) of
  /// \p values is copied into every rank's \p values.
  void allGatherSegments(std::vector<float> &values, const std::vector<size_t> &bounds,
                         const std::string &what);
  /// \p value from every rank, in rank order.
  std::vector<double> allGatherDouble(double value, const std::string &what);
  /// \p text from every rank, in rank order (any length).
  std::vector<std::string> allGatherText(const std::string &text, const std::string &what);
};

/// How this process was launched: by MPI (mpirun or srun with PMI/PMIx), by
/// the RANK/WORLD_SIZE variables of torchrun-style launchers, or alone.
struct LaunchInfo {
  enum class Kind { Single, Mpi, Environment } kind = Kind::Single;
  int rank = 0, size = 1;
  /// The rank among the processes of this machine (picks the GPU).
  int localRank = 0;
  /// Environment launch: where rank 0 listens (MASTER_ADDR, MASTER_PORT).
  std::string masterAddress;
  int masterPort = 0;
  /// The variables the launch was read from, for messages.
  std::string source;
};

/// Reads the launch from \p getEnv (getenv in the runner, a map in tests):
/// Open MPI's OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK, PMI(x) ranks (srun), then
/// RANK/WORLD_SIZE/LOCAL_RANK (torchrun) and SLURM_PROCID/SLURM_NTASKS.
/// Throws CommunicatorError for malformed or inconsistent values.
LaunchInfo detectLaunch(const std::function<const char *(const char *)> &getEnv);

/// A communicator for a run of one rank: the reductions are identities.
std::unique_ptr<Communicator> makeSingleRankCommunicator();

/// The ranks of an environment launch (torchrun-style RANK, WORLD_SIZE,
/// MASTER_ADDR, MASTER_PORT), connected over TCP: rank 0 listens on
/// \p port at the master address, the others connect to it, and every
/// exchange goes through rank 0 (a star: simple, and the CPU backend's
/// exchanges are small next to its steps; on GPUs only flags, the loss and
/// the NCCL id cross it). A rank that dies closes its sockets, so the others
/// stop at once naming it; one that hangs is caught by \p timeoutSeconds.
std::unique_ptr<Communicator> makeTcpCommunicator(const LaunchInfo &launch, int port,
                                                  double timeoutSeconds);

/// Opens MPI (dlopen of $AMPC_MPI_LIBRARY's file when it is set, else
/// libmpi.so.40 or libmpi.so, with RTLD_GLOBAL for Open MPI's plugins),
/// initialises it and returns the world communicator. Each exchange waits at
/// most \p timeoutSeconds for the other ranks, then fails naming the exchange
/// (a rank died or hung). Throws CommunicatorError when libmpi cannot be
/// opened ("no Open MPI found (tried ...)"), lacks an entry point
/// ("libmpi.so.40 has no MPI_Ialltoall: ...") or cannot be initialised.
std::unique_ptr<Communicator> makeMpiCommunicator(double timeoutSeconds);

} // namespace ampc::train

#endif // AMPC_RUNTIME_TRAIN_COMMUNICATOR_H
