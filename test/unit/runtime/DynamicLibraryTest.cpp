//===- DynamicLibraryTest.cpp - Opening libraries at run time, and failing ===//
//
// The mechanism every library the runtime opens at run time goes through
// (runtime/support/DynamicLibrary.h), with no CUDA: a library that cannot be
// opened names every file tried and the variable that chooses another (or,
// when the file came from that variable, says to correct it); a library
// that lacks symbols names all of them at once. libm stands in for a library
// that lacks the symbols asked for.
//
//===----------------------------------------------------------------------===//

#include "runtime/support/DynamicLibrary.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace {

using ampc::DynamicLibrary;
using ampc::LibraryError;
using ampc::LibrarySearch;
using ampc::SymbolResolver;
using ampc::SymbolScope;

const char *const kVariable = "AMPC_TEST_WIDGET_LIBRARY";

LibrarySearch widgetSearch(std::vector<std::string> names) {
  LibrarySearch search;
  search.what = "widget";
  search.names = std::move(names);
  search.variable = kVariable;
  search.advice = "install the widget library";
  return search;
}

/// The message DynamicLibrary::open throws for \p search ("" if it opened).
std::string openFailure(const LibrarySearch &search) {
  try {
    DynamicLibrary library = DynamicLibrary::open(search);
    return "";
  } catch (const LibraryError &error) {
    return error.what();
  }
}

TEST(DynamicLibrary, NoCandidateOpensNamesEveryFileTriedAndTheVariable) {
  const LibrarySearch search =
      widgetSearch({"libampc-no-such-widget.so.1", "", "libampc-no-such-widget.so"});
  EXPECT_FALSE(DynamicLibrary::openFirst(search.names));
  EXPECT_EQ(search.candidates(),
            (std::vector<std::string>{"libampc-no-such-widget.so.1", "libampc-no-such-widget.so"}));
  EXPECT_EQ(openFailure(search), "no widget found (tried libampc-no-such-widget.so.1, "
                                 "libampc-no-such-widget.so; set AMPC_TEST_WIDGET_LIBRARY to the "
                                 "file to use): install the widget library");
  EXPECT_EQ(search.notFoundMessage(), openFailure(search));
}

TEST(DynamicLibrary, AFileTheVariableNamesIsToBeCorrected) {
  ::setenv(kVariable, "/nonexistent/libwidget.so.1", 1);
  LibrarySearch search = widgetSearch({"libampc-no-such-widget.so.1"});
  search.applyVariable();
  ::unsetenv(kVariable);
  EXPECT_TRUE(search.namedByVariable);
  EXPECT_EQ(search.names, std::vector<std::string>{"/nonexistent/libwidget.so.1"});
  EXPECT_EQ(openFailure(search), "no widget found (tried /nonexistent/libwidget.so.1, named by "
                                 "AMPC_TEST_WIDGET_LIBRARY): correct AMPC_TEST_WIDGET_LIBRARY or "
                                 "unset it");
}

TEST(DynamicLibrary, AnEmptyVariableLeavesTheUsualNames) {
  ::setenv(kVariable, "", 1);
  LibrarySearch search = widgetSearch({"libwidget.so.1", "libwidget.so"});
  search.applyVariable();
  ::unsetenv(kVariable);
  EXPECT_FALSE(search.namedByVariable);
  EXPECT_EQ(search.names, (std::vector<std::string>{"libwidget.so.1", "libwidget.so"}));
}

TEST(DynamicLibrary, NoNamesAtAllIsSaid) {
  EXPECT_EQ(openFailure(widgetSearch({""})),
            "no widget found (no file names to try; set AMPC_TEST_WIDGET_LIBRARY to the file to "
            "use): install the widget library");
}

TEST(DynamicLibrary, OpensTheFirstCandidateThatLoads) {
  DynamicLibrary library =
      DynamicLibrary::open(widgetSearch({"libampc-no-such-widget.so.1", "libm.so.6"}));
  ASSERT_TRUE(library);
  EXPECT_EQ(library.name(), "libm.so.6");
  double (*cosine)(double) = nullptr;
  ASSERT_TRUE(library.resolve(cosine, "cos"));
  EXPECT_EQ(cosine(0.0), 1.0);
}

TEST(DynamicLibrary, MissingSymbolsAreNamedTogether) {
  DynamicLibrary library = DynamicLibrary::open(widgetSearch({"libm.so.6"}));
  struct {
    double (*cos)(double) = nullptr;
    int (*widgetInit)(int) = nullptr;
    void *widgetTable = nullptr;
  } table;
  SymbolResolver resolve(library);
  resolve(table.cos, "cos");
  resolve(table.widgetInit, "ampc_widget_init");
  resolve(table.widgetTable, "ampc_widget_table");
  EXPECT_NE(table.cos, nullptr);
  EXPECT_EQ(table.widgetInit, nullptr);
  EXPECT_EQ(resolve.missing(), (std::vector<std::string>{"ampc_widget_init", "ampc_widget_table"}));
  EXPECT_EQ(resolve.missingMessage("widget 2 or newer is needed"),
            "libm.so.6 has no ampc_widget_init, ampc_widget_table: widget 2 or newer is needed");
  try {
    resolve.check("widget 2 or newer is needed");
    FAIL() << "missing symbols were accepted";
  } catch (const LibraryError &error) {
    EXPECT_STREQ(error.what(),
                 "libm.so.6 has no ampc_widget_init, ampc_widget_table: widget 2 or newer is "
                 "needed");
  }
}

TEST(DynamicLibrary, NothingMissingIsNoMessage) {
  DynamicLibrary library = DynamicLibrary::open(widgetSearch({"libm.so.6"}));
  double (*cosine)(double) = nullptr;
  SymbolResolver resolve(library);
  resolve(cosine, "cos");
  EXPECT_EQ(resolve.missingMessage("anything"), "");
  EXPECT_NO_THROW(resolve.check("anything"));
}

TEST(DynamicLibrary, AnEmptyLibraryResolvesNothing) {
  // Not the process's own symbols: dlsym(nullptr, ...) would search them.
  const DynamicLibrary none;
  int (*function)(const char *) = nullptr;
  EXPECT_FALSE(none.resolve(function, "puts"));
}

TEST(DynamicLibrary, GlobalScopeShowsTheSymbolsToLibrariesLoadedLater) {
  // zlib is not linked into this test, so its symbols are visible globally
  // only while it is open with SymbolScope::Global.
  if (dlsym(RTLD_DEFAULT, "zlibVersion"))
    GTEST_SKIP() << "zlib is already loaded into this process";
  {
    DynamicLibrary local = DynamicLibrary::openFirst({"libz.so.1"});
    if (!local)
      GTEST_SKIP() << "libz.so.1 cannot be opened";
    EXPECT_EQ(dlsym(RTLD_DEFAULT, "zlibVersion"), nullptr);
  }
  DynamicLibrary global = DynamicLibrary::openFirst({"libz.so.1"}, SymbolScope::Global);
  ASSERT_TRUE(global);
  EXPECT_NE(dlsym(RTLD_DEFAULT, "zlibVersion"), nullptr);
}

TEST(DynamicLibrary, ReleaseKeepsTheLibraryOpen) {
  void *handle = nullptr;
  {
    DynamicLibrary library = DynamicLibrary::openFirst({"libm.so.6"});
    ASSERT_TRUE(library);
    handle = library.release();
    EXPECT_FALSE(library);
  }
  ASSERT_NE(handle, nullptr);
  EXPECT_NE(dlsym(handle, "cos"), nullptr);
  dlclose(handle);
}

} // namespace
