// `rota explain PATH` (like kubectl explain): a job-spec or cluster-config
// field's type, default and meaning, read from the field tables of the
// reference docs built into the binary (docs/job-spec.md, docs/services.md,
// docs/config.md), so that what it says is what the docs say.
//
// `rota completion bash|zsh`: a completion script from the tables the CLI
// parses its flags with.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace rota::cli {

struct FieldDoc {
  std::string path;     // "job.tasks.gpu.fraction", "config.queues.quota"
  std::string type;     // "" where the table has no type column
  std::string initial;  // the default
  std::string meaning;
  std::string source;   // "docs/job-spec.md, Task group fields"
};

// The rows of `markdown`'s field tables: a table under a "## " heading that
// `prefixes` names gets its fields' paths prefixed with that ("job.tasks.").
// A row's first cell holds its backticked field names; one starting with
// "." continues the one before ("`a.period`, `.timeout`": a.timeout).
std::vector<FieldDoc> ParseFieldTables(std::string_view markdown, const std::string& file,
                                       const std::map<std::string, std::string>& prefixes);

// Every field of the embedded docs.
const std::vector<FieldDoc>& FieldDocs();

// The embedded text of `path` ("docs/job-spec.md"); empty if none.
std::string_view EmbeddedDoc(std::string_view path);

int ExplainMain(const std::vector<std::string>& args);

// `commands`: each command with the flags it takes and the words that may
// follow it (subcommands).
struct CompletionCommand {
  std::string name;
  std::vector<std::string> flags;
  std::vector<std::string> words;
};
std::string CompletionScript(const std::string& shell, const std::vector<CompletionCommand>& commands);

// `rota help --man`: a man page (roff) of `overview` (the global help) and
// each command's help text, in order.
std::string ManPage(const std::string& overview, const std::vector<std::pair<std::string, std::string>>& commands);

}  // namespace rota::cli
