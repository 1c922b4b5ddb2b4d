//===- MpiLibraryTest.cpp - Opening MPI at run time ------------------------===//
//
// The MPI transport opens Open MPI's libmpi at run time through the same
// mechanism as the CUDA libraries (runtime/support/DynamicLibrary.h), so its
// failures read the same: a file $AMPC_MPI_LIBRARY names that cannot be
// opened, or a library without MPI's entry points (libm stands in for one).
// Then a training executable runs as two ranks under Open MPI's mpirun, to
// show the library still opens (with its symbols global, as Open MPI's
// plugins need) and the ranks exchange through it; skipped without mpirun.
//
//===----------------------------------------------------------------------===//

#include "runtime/train/Bundle.h"
#include "runtime/train/Communicator.h"
#include "test/unit/train/TrainTestUtils.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace {

using namespace ampc;

const std::string kRunner = AMPC_TRAIN_RUNNER_PATH;

/// What makeMpiCommunicator throws with $AMPC_MPI_LIBRARY set to \p file.
std::string mpiFailureWith(const std::string &file) {
  ::setenv("AMPC_MPI_LIBRARY", file.c_str(), 1);
  std::string failure;
  try {
    train::makeMpiCommunicator(5.0);
    failure = "(no failure)";
  } catch (const train::CommunicatorError &error) {
    failure = error.what();
  }
  ::unsetenv("AMPC_MPI_LIBRARY");
  return failure;
}

TEST(MpiLibrary, AFileTheVariableNamesIsToBeCorrected) {
  EXPECT_EQ(mpiFailureWith("/nonexistent/libmpi.so.40"),
            "no Open MPI found (tried /nonexistent/libmpi.so.40, named by AMPC_MPI_LIBRARY): "
            "correct AMPC_MPI_LIBRARY or unset it");
}

TEST(MpiLibrary, ALibraryWithoutMpiNamesEveryMissingSymbol) {
  EXPECT_EQ(mpiFailureWith("libm.so.6"),
            "libm.so.6 has no MPI_Init, MPI_Initialized, MPI_Comm_rank, MPI_Comm_size, "
            "MPI_Iallgather, MPI_Ialltoall, MPI_Test, MPI_Finalize, MPI_Abort, "
            "MPI_Get_library_version, ompi_mpi_comm_world, ompi_mpi_byte: Open MPI 3 or later is "
            "needed (this runner speaks Open MPI's ABI; launch it with Open MPI's mpirun)");
}

/// Open MPI's mpirun as the lit suite runs it (as root too, several ranks
/// sharing few cores), or "" when there is none.
std::string mpirun() {
  const test::CommandResult found = test::runCommand("command -v mpirun");
  if (found.status != 0 || found.output.empty())
    return "";
  const test::CommandResult version = test::runCommand("mpirun --version");
  if (version.output.find("Open MPI") == std::string::npos)
    return "";
  return "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe "
         "--bind-to none";
}

TEST(MpiLibrary, TwoRanksTrainOverOpenMpi) {
  const std::string launcher = mpirun();
  if (launcher.empty())
    GTEST_SKIP() << "no Open MPI mpirun on PATH";
  test::TempDir dir;
  const std::string exe = dir.path("train_bigram");
  train::writeTrainingExecutable(kRunner, test::bigramTrainingPlan(16, 2, 8, 4, 0.05), exe);

  const test::CommandResult run =
      test::runCommand(launcher + " -np 2 '" + exe + "' --steps 3 --device cpu --threads 1");
  ASSERT_EQ(run.status, 0) << run.output;
  EXPECT_NE(run.output.find("data parallel: 2 ranks over MPI (Open MPI "), std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("trained 3 steps"), std::string::npos) << run.output;

  // Under a launcher, a file AMPC_MPI_LIBRARY names that cannot be opened
  // stops the rank with the same message.
  const test::CommandResult wrong =
      test::runCommand("AMPC_MPI_LIBRARY=/nonexistent/libmpi.so.40 " + launcher +
                       " -np 1 -x AMPC_MPI_LIBRARY '" + exe + "' --steps 1 --device cpu");
  EXPECT_NE(wrong.status, 0) << wrong.output;
  EXPECT_NE(wrong.output.find("train_bigram: error: no Open MPI found (tried "
                              "/nonexistent/libmpi.so.40, named by AMPC_MPI_LIBRARY): correct "
                              "AMPC_MPI_LIBRARY or unset it"),
            std::string::npos)
      << wrong.output;
}

} // namespace
