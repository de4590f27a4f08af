// Knowledge base documents (FTS5) and skills (see kb.h).
#include "loom/evolve/kb.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "loom/base/options.h"
#include "loom/store/db.h"
#include "loom/evolve/store_names.h"

namespace loom::evolve {

std::string default_kb_dir() {
  if (std::string e = opt::get_string(opt::Opt::kKbDir); !e.empty()) return e;
#ifdef LOOM_SOURCE_DIR_FOR_KB
  return LOOM_SOURCE_DIR_FOR_KB "/kb";
#else
  std::error_code ec;
  for (std::filesystem::path p = std::filesystem::current_path(ec); !p.empty(); p = p.parent_path()) {
    if (std::filesystem::is_directory(p / "kb", ec) && std::filesystem::exists(p / "src/loom/evolve", ec))
      return (p / "kb").string();
    if (p == p.parent_path()) break;
  }
  return "";
#endif
}

Result<int> index_documents(Db& db, const std::string& dir) {
  std::error_code ec;
  if (dir.empty() || !std::filesystem::is_directory(dir, ec)) return 0;
  LOOM_ASSIGN_OR_RETURN(Stmt del, db.prepare("DELETE FROM documents WHERE path = ?1"));
  LOOM_ASSIGN_OR_RETURN(Stmt ins, db.prepare("INSERT INTO documents(path, title, body) VALUES (?1, ?2, ?3)"));
  int n = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir, ec)) {
    if (!e.is_regular_file() || e.path().extension() != ".md") continue;
    std::ifstream f(e.path());
    std::stringstream ss;
    ss << f.rdbuf();
    std::string body = ss.str(), title = e.path().stem().string();
    if (body.rfind("# ", 0) == 0) title = body.substr(2, body.find('\n') - 2);
    std::string rel = std::filesystem::relative(e.path(), dir, ec).string();
    LOOM_RETURN_IF_ERROR(del.bind(1, rel).run());
    LOOM_RETURN_IF_ERROR(ins.bind(1, rel).bind(2, title).bind(3, body).run());
    ++n;
  }
  return n;
}

Result<std::vector<Document>> search_documents(Db& db, const std::string& query, int limit) {
  // Words only (FTS5 syntax characters dropped), joined with OR.
  std::string q;
  std::string word;
  auto flush = [&] {
    if (word.size() >= 3) q += (q.empty() ? "" : " OR ") + ("\"" + word + "\"");
    word.clear();
  };
  for (char c : query) {
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '_') word += static_cast<char>(std::tolower(c));
    else flush();
  }
  flush();
  std::vector<Document> out;
  if (q.empty()) return out;
  // SQLite: FTS5 ranked by bm25. PostgreSQL: its text search (the same words, ORed), ranked by ts_rank.
  const bool pg = db.engine() == store::Engine::kPostgres;
  LOOM_ASSIGN_OR_RETURN(
      Stmt s, db.prepare(pg ? "SELECT path, title, body FROM documents WHERE to_tsvector('english', title || ' ' || body) "
                              "@@ to_tsquery('english', ?1) ORDER BY ts_rank(to_tsvector('english', title || ' ' || body), "
                              "to_tsquery('english', ?1)) DESC LIMIT ?2"
                            : "SELECT path, title, body FROM documents WHERE documents MATCH ?1 ORDER BY rank LIMIT ?2"));
  if (pg) {
    for (size_t p = 0; (p = q.find('"', p)) != std::string::npos;) q.erase(p, 1);
    for (size_t p = 0; (p = q.find(" OR ", p)) != std::string::npos;) q.replace(p, 4, " | ");
  }
  s.bind(1, q).bind(2, static_cast<int64_t>(limit));
  while (true) {
    LOOM_ASSIGN_OR_RETURN(bool has, s.step());
    if (!has) break;
    out.push_back({s.text(0), s.text(1), s.text(2)});
  }
  return out;
}

std::string op_family(std::string_view op) {
  if (op == "matvec" || op == "matmul") return "matvec";
  return std::string(op);
}

std::string device_kind(std::string_view arch) { return std::string(arch.substr(0, arch.find(':'))); }

Status record_skill(Db& db, std::string_view family, std::string_view dev_kind, const kernels::Schedule& parent,
                    const kernels::Schedule& child, double log_gain) {
  LOOM_ASSIGN_OR_RETURN(
      Stmt s, db.prepare("INSERT INTO skills(op_family, device_kind, knob, value, gains, uses, wins) VALUES (?1,?2,?3,?4,?5,1,?6) "
                         "ON CONFLICT(op_family, device_kind, knob, value) DO UPDATE SET gains = gains + ?5, "
                         "uses = uses + 1, wins = wins + ?6"));
  for (const auto& [k, v] : child) {
    auto it = parent.find(k);
    if (it != parent.end() && it->second == v) continue;
    s.bind(1, family).bind(2, dev_kind).bind(3, k).bind(4, v).bind(5, log_gain).bind(6, static_cast<int64_t>(log_gain > 0.01));
    LOOM_RETURN_IF_ERROR(s.run());
  }
  return Status();
}

Result<SkillTable> load_skills(Db& db, std::string_view family, std::string_view dev_kind) {
  SkillTable t;
  LOOM_ASSIGN_OR_RETURN(Stmt s, db.prepare("SELECT knob, value, gains, uses FROM skills WHERE op_family = ?1 AND device_kind = ?2"));
  s.bind(1, family).bind(2, dev_kind);
  while (true) {
    LOOM_ASSIGN_OR_RETURN(bool has, s.step());
    if (!has) break;
    const int uses = static_cast<int>(s.i64(3));
    if (uses <= 0) continue;
    t.score[{s.text(0), s.i64(1)}] = s.f64(2) / uses;
    t.uses[{s.text(0), s.i64(1)}] = uses;
  }
  return t;
}

Result<std::vector<std::string>> describe_skills(Db& db, std::string_view family, std::string_view dev_kind, int limit) {
  LOOM_ASSIGN_OR_RETURN(Stmt s, db.prepare("SELECT knob, value, gains / uses, uses, wins FROM skills WHERE op_family = ?1 "
                                           "AND device_kind = ?2 AND uses > 0 ORDER BY gains / uses DESC LIMIT ?3"));
  s.bind(1, family).bind(2, dev_kind).bind(3, static_cast<int64_t>(limit));
  std::vector<std::string> out;
  while (true) {
    LOOM_ASSIGN_OR_RETURN(bool has, s.step());
    if (!has) break;
    out.push_back(fmt::format("{}={}: {:+.3f} mean log speed-up over {} uses, {} wins", s.text(0), s.i64(1), s.f64(2),
                              s.i64(3), s.i64(4)));
  }
  return out;
}

}  // namespace loom::evolve
