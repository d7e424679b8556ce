#include "cli/explain.h"

#include <algorithm>
#include <iostream>
#include <set>
#include <sstream>

#include "base/version.h"
#include "cli/suggest.h"

namespace rota::cli {

namespace {

std::string Trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t' || s[e - 1] == '\r')) --e;
  return std::string(s.substr(b, e - b));
}

// A table row's cells, split at pipes that are not escaped (`\|`).
std::vector<std::string> Cells(std::string_view line) {
  std::vector<std::string> out;
  std::string cell;
  for (size_t i = 1; i < line.size(); ++i) {  // after the leading '|'
    if (line[i] == '\\' && i + 1 < line.size() && line[i + 1] == '|') {
      cell += '|';
      ++i;
    } else if (line[i] == '|') {
      out.push_back(Trim(cell));
      cell.clear();
    } else {
      cell += line[i];
    }
  }
  return out;
}

// The backticked names of a first cell.
std::vector<std::string> Names(const std::string& cell) {
  std::vector<std::string> out;
  for (size_t i = cell.find('`'); i != std::string::npos; i = cell.find('`', i)) {
    const size_t end = cell.find('`', i + 1);
    if (end == std::string::npos) break;
    out.push_back(cell.substr(i + 1, end - i - 1));
    i = end + 1;
  }
  return out;
}

// The first sentence of `text` (for a list of fields).
std::string FirstSentence(const std::string& text) {
  for (size_t dot = text.find(". "); dot != std::string::npos; dot = text.find(". ", dot + 1)) {
    if (dot >= 3 && (text.compare(dot - 3, 3, "e.g") == 0 || text.compare(dot - 3, 3, "i.e") == 0)) continue;
    return text.substr(0, dot + 1);
  }
  return text;
}

void Wrapped(std::ostream& out, const std::string& text, size_t width = 96) {
  std::istringstream words(text);
  std::string word, line;
  while (words >> word) {
    if (!line.empty() && line.size() + 1 + word.size() > width) {
      out << "  " << line << "\n";
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
  }
  if (!line.empty()) out << "  " << line << "\n";
}

}  // namespace

std::vector<FieldDoc> ParseFieldTables(std::string_view markdown, const std::string& file,
                                       const std::map<std::string, std::string>& prefixes) {
  std::vector<FieldDoc> out;
  std::string section;
  const std::string* prefix = nullptr;
  int name_col = -1, type_col = -1, default_col = -1, meaning_col = -1;
  std::istringstream in{std::string(markdown)};
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("## ", 0) == 0) {
      section = Trim(std::string_view(line).substr(3));
      auto it = prefixes.find(section);
      prefix = it == prefixes.end() ? nullptr : &it->second;
      name_col = -1;
      continue;
    }
    if (prefix == nullptr || line.empty() || line[0] != '|') {
      if (line.empty() || line[0] != '|') name_col = -1;  // a table ended
      continue;
    }
    const std::vector<std::string> cells = Cells(line);
    if (name_col < 0) {  // the header row
      for (size_t c = 0; c < cells.size(); ++c) {
        if (cells[c] == "field" || cells[c] == "key") name_col = static_cast<int>(c);
        else if (cells[c] == "type") type_col = static_cast<int>(c);
        else if (cells[c] == "default") default_col = static_cast<int>(c);
        else if (cells[c] == "meaning") meaning_col = static_cast<int>(c);
      }
      if (name_col < 0) name_col = -2;  // not a field table: skip its rows
      continue;
    }
    if (name_col == -2 || cells.empty() || cells[0].rfind("---", 0) == 0) continue;
    auto cell = [&](int c) { return c >= 0 && static_cast<size_t>(c) < cells.size() ? cells[c] : std::string(); };
    std::string last;
    for (const std::string& name : Names(cell(name_col))) {
      std::string full = name;
      if (name[0] == '.' && !last.empty()) full = last.substr(0, last.rfind('.')) + name;
      last = full;
      out.push_back({*prefix + full, cell(type_col), cell(default_col), cell(meaning_col), file + ", " + section});
    }
  }
  return out;
}

const std::vector<FieldDoc>& FieldDocs() {
  static const std::vector<FieldDoc> kFields = [] {
    std::vector<FieldDoc> all;
    auto add = [&](const char* file, const std::map<std::string, std::string>& prefixes) {
      std::vector<FieldDoc> f = ParseFieldTables(EmbeddedDoc(file), file, prefixes);
      all.insert(all.end(), f.begin(), f.end());
    };
    add("docs/job-spec.md", {{"Job fields", "job."}, {"Task group fields", "job.tasks."}});
    add("docs/services.md", {{"Fields", "job."}});
    add("docs/config.md", {{"The cluster", "config."},
                           {"Queues and quotas", "config.queues."},
                           {"Policy", "config."},
                           {"Tenants", "config."}});
    // The job table and the services table both have `kind`: keep the first.
    std::set<std::string> seen;
    std::erase_if(all, [&](const FieldDoc& d) { return !seen.insert(d.path).second; });
    return all;
  }();
  return kFields;
}

int ExplainMain(const std::vector<std::string>& args) {
  constexpr const char* kUsage =
      "usage: rota explain PATH\n\n"
      "What a job-spec or cluster-config field is: its type, default and meaning, from the reference\n"
      "(docs/job-spec.md, docs/services.md, docs/config.md). PATH is a field's path, like\n"
      "job.tasks.gpu.fraction, tasks.gpus, checkpoint, service.autoscale or config.queues.quota; a\n"
      "path with fields under it lists them; `job` and `config` list every field.\n";
  if (args.size() != 1 || args[0] == "--help" || args[0] == "-h") {
    (args.size() == 1 ? std::cout : std::cerr) << kUsage;
    return args.size() == 1 ? 0 : 2;
  }
  // "tasks[0].gpu" reads as "tasks.gpu"; without a root, the job's, else the config's.
  std::string path;
  for (size_t i = 0; i < args[0].size(); ++i) {
    if (args[0][i] == '[') {
      const size_t close = args[0].find(']', i);
      if (close == std::string::npos) break;
      i = close;
      continue;
    }
    path += args[0][i];
  }
  const std::vector<FieldDoc>& fields = FieldDocs();
  auto matching = [&](const std::string& p) {
    std::vector<const FieldDoc*> exact, under;
    for (const FieldDoc& f : fields) {
      if (f.path == p) exact.push_back(&f);
      else if (f.path.rfind(p + ".", 0) == 0) under.push_back(&f);
    }
    return std::make_pair(exact, under);
  };
  std::string full = path;
  auto [exact, under] = matching(full);
  if (exact.empty() && under.empty() && path.rfind("job", 0) != 0 && path.rfind("config", 0) != 0) {
    for (const char* root : {"job.", "config."}) {
      full = root + path;
      std::tie(exact, under) = matching(full);
      if (!exact.empty() || !under.empty()) break;
    }
  }
  if (exact.empty() && under.empty()) {
    std::vector<std::string> known;
    for (const FieldDoc& f : fields) {
      known.push_back(f.path);
      for (const char* root : {"job.", "config."}) {
        if (f.path.rfind(root, 0) == 0) known.push_back(f.path.substr(std::string(root).size()));
      }
    }
    std::cerr << "rota explain: no field '" << args[0] << "' in the job spec or the cluster config"
              << DidYouMean(path, known) << "\n";
    return 2;
  }
  for (const FieldDoc* f : exact) {
    std::cout << f->path << "  (" << f->source << ")\n";
    if (!f->type.empty()) std::cout << "TYPE:     " << f->type << "\n";
    if (!f->initial.empty()) std::cout << "DEFAULT:  " << f->initial << "\n";
    std::cout << "\n";
    Wrapped(std::cout, f->meaning);
  }
  if (!under.empty()) {
    std::cout << (exact.empty() ? full + "\n" : "\n") << "FIELDS:\n";
    size_t width = 0;
    for (const FieldDoc* f : under) width = std::max(width, f->path.size() - full.size() - 1);
    for (const FieldDoc* f : under) {
      std::string name = f->path.substr(full.size() + 1);
      name.resize(std::max(width, name.size()), ' ');
      std::cout << "  " << name << "  " << (f->type.empty() ? "" : f->type + ". ") << FirstSentence(f->meaning) << "\n";
    }
  }
  return 0;
}

std::string CompletionScript(const std::string& shell, const std::vector<CompletionCommand>& commands) {
  std::string names;
  for (const CompletionCommand& c : commands) names += (names.empty() ? "" : " ") + c.name;
  std::string cases;
  for (const CompletionCommand& c : commands) {
    std::string flags, words;
    for (const std::string& f : c.flags) flags += " " + f;
    for (const std::string& w : c.words) words += (words.empty() ? "" : " ") + w;
    cases += "    " + c.name + ") flags=\"" + flags.substr(flags.empty() ? 0 : 1) + "\"; words=\"" + words + "\" ;;\n";
  }
  std::string script = std::string("# rota ") + (shell == "zsh" ? "zsh" : "bash") +
                       " completion, generated by `rota completion " + shell +
                       "` from the flags rota parses.\n"
                       "# Load it with: source <(rota completion " + shell + ")\n";
  if (shell == "zsh") script += "autoload -U +X bashcompinit && bashcompinit\n";
  script +=
      "_rota() {\n"
      "  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} cmd='' i flags words\n"
      "  for ((i = 1; i < COMP_CWORD; i++)); do\n"
      "    case ${COMP_WORDS[i]} in\n"
      "      --server|--token|-o) ((i++)) ;;\n"
      "      -*) ;;\n"
      "      *) cmd=${COMP_WORDS[i]}; break ;;\n"
      "    esac\n"
      "  done\n"
      "  case $prev in\n"
      "    -o) COMPREPLY=($(compgen -W 'table json wide csv' -- \"$cur\")); return ;;\n"
      "    --server|--token) COMPREPLY=(); return ;;\n"
      "  esac\n"
      "  if [ -z \"$cmd\" ]; then\n"
      "    COMPREPLY=($(compgen -W '" + names + " --server --token -o' -- \"$cur\")); return\n"
      "  fi\n"
      "  case $cmd in\n" + cases +
      "    *) flags=''; words='' ;;\n"
      "  esac\n"
      "  if [[ $cur == -* ]]; then\n"
      "    COMPREPLY=($(compgen -W \"$flags --help -o --server --token\" -- \"$cur\"))\n"
      "  elif [ -n \"$words\" ] && [ \"$prev\" = \"$cmd\" ]; then\n"
      "    COMPREPLY=($(compgen -W \"$words\" -- \"$cur\"))\n"
      "  else\n"
      "    COMPREPLY=($(compgen -f -- \"$cur\"))\n"
      "  fi\n"
      "}\n"
      "complete -o default -F _rota rota\n";
  return script;
}

namespace {

// Text for roff: backslashes escaped, a line starting with . or ' kept as
// text, a hyphen as a minus (flags copy and paste).
std::string Roff(const std::string& text) {
  std::string out;
  bool line_start = true;
  for (char ch : text) {
    if (line_start && (ch == '.' || ch == '\'')) out += "\\&";
    if (ch == '\\') out += "\\e";
    else if (ch == '-') out += "\\-";
    else out += ch;
    line_start = ch == '\n';
  }
  return out;
}

}  // namespace

std::string ManPage(const std::string& overview, const std::vector<std::pair<std::string, std::string>>& commands) {
  std::string out = ".TH ROTA 1 \"\" \"rota " + std::string(kVersion) +
                    "\" \"rota manual\"\n"
                    ".SH NAME\nrota \\- a GPU scheduler and cluster orchestrator\n"
                    ".SH SYNOPSIS\n.B rota\n.I command\n[flags]\n"
                    ".SH DESCRIPTION\nOne binary with subcommands: a server, node agents, and the client commands that "
                    "submit and inspect work. Every command answers\n.B \\-\\-help\nwithout a server.\n"
                    ".PP\n.nf\n" + Roff(overview) + ".fi\n.SH COMMANDS\n";
  for (const auto& [name, help] : commands) {
    out += ".SS " + Roff(name) + "\n.nf\n" + Roff(help) + (help.empty() || help.back() == '\n' ? "" : "\n") + ".fi\n";
  }
  out +=
      ".SH ENVIRONMENT\n"
      ".TP\n.B ROTA_SERVER\nThe server's URL, or several (URL1,URL2): requests follow the leader.\n"
      ".TP\n.B ROTA_TOKEN\nThe API token.\n"
      ".TP\n.B ROTA_DATA_DIR\nWhere a local rota up keeps its data; the CLI finds its address and token there.\n"
      ".SH EXIT STATUS\n0 ok, 1 server unreachable or failing, 2 bad input, 3 not found, 4 not authenticated or not "
      "allowed, 5 conflict.\n"
      ".SH SEE ALSO\nrota explain PATH (the job spec and the cluster config, field by field); docs/cli.md, "
      "docs/job-spec.md, docs/config.md in the source.\n";
  return out;
}

}  // namespace rota::cli
