// LineReader: libedit's el_gets with its history for terminals, std::getline for pipes.
// libedit is told not to handle signals (EL_SIGNAL 0): our SIGINT handler, installed without
// SA_RESTART, makes its read() fail with EINTR, and el_gets then returns with a count of -1,
// which is how a Ctrl-C at the prompt is told apart from Ctrl-D (count 0).
#include "line_reader.h"

#include <cerrno>
#include <clocale>
#include <cstdio>
#include <filesystem>
#include <iostream>

#if defined(LOOM_HAVE_LIBEDIT)
#include <histedit.h>
#include <langinfo.h>
#endif

namespace loom::cli {
namespace {

class PipeReader final : public LineReader {
 public:
  Got read(const std::string& prompt, std::string* line) override {
    if (!prompt.empty()) std::fputs(prompt.c_str(), stderr);
    line->clear();
    errno = 0;
    if (std::getline(std::cin, *line)) return Got::kLine;
    if (errno != EINTR) return Got::kEnd;
    // A read cut short by SIGINT fails the stream as the end of input would; the next read
    // should not see that.
    std::cin.clear();
    if (!prompt.empty()) std::fputc('\n', stderr);
    return Got::kInterrupted;
  }
  void remember(const std::string&) override {}
  bool editing() const override { return false; }
};

#if defined(LOOM_HAVE_LIBEDIT)

// el_gets wants the prompt from a callback; the one reader's current prompt lives here.
std::string g_prompt;
char* prompt_fn(EditLine*) { return g_prompt.data(); }

class EditReader final : public LineReader {
 public:
  explicit EditReader(std::string history_path) : path_(std::move(history_path)) {
    // libedit decodes keys and lines with the C library's multibyte functions: a UTF-8 locale
    // keeps non-ASCII text intact even when the environment names none.
    std::setlocale(LC_CTYPE, "");
    if (std::string(nl_langinfo(CODESET)) != "UTF-8") std::setlocale(LC_CTYPE, "C.UTF-8");
    hist_ = history_init();
    HistEvent ev;
    history(hist_, &ev, H_SETSIZE, 1000);
    history(hist_, &ev, H_SETUNIQUE, 1);
    if (!path_.empty()) {
      std::error_code ec;
      std::filesystem::create_directories(std::filesystem::path(path_).parent_path(), ec);
      history(hist_, &ev, H_LOAD, path_.c_str());  // a missing file is an empty history
    }
    el_ = el_init("loom", stdin, stderr, stderr);
    el_set(el_, EL_EDITOR, "emacs");
    el_set(el_, EL_SIGNAL, 0);
    el_set(el_, EL_HIST, history, hist_);
    el_set(el_, EL_PROMPT, prompt_fn);
    el_source(el_, nullptr);  // the user's ~/.editrc, as other libedit programs read it
  }
  ~EditReader() override {
    el_end(el_);
    history_end(hist_);
  }
  EditReader(const EditReader&) = delete;
  EditReader& operator=(const EditReader&) = delete;

  Got read(const std::string& prompt, std::string* line) override {
    g_prompt = prompt;
    int count = 0;
    const char* got = el_gets(el_, &count);
    line->clear();
    if (got != nullptr && count > 0) {
      line->assign(got, static_cast<size_t>(count));
      while (!line->empty() && (line->back() == '\n' || line->back() == '\r')) line->pop_back();
      return Got::kLine;
    }
    if (count < 0 && errno == EINTR) {
      // What had been typed stays in libedit's buffer until the next read resets it.
      const LineInfo* li = el_line(el_);
      if (li && li->lastchar > li->buffer) line->assign(li->buffer, li->lastchar);
      std::fputc('\n', stderr);
      return Got::kInterrupted;
    }
    return Got::kEnd;
  }

  void remember(const std::string& line) override {
    HistEvent ev;
    history(hist_, &ev, H_ENTER, line.c_str());
    // Saved at once, so a crash or a kill keeps the lines typed so far.
    if (!path_.empty()) history(hist_, &ev, H_SAVE, path_.c_str());
  }
  bool editing() const override { return true; }

 private:
  std::string path_;
  History* hist_ = nullptr;
  EditLine* el_ = nullptr;
};

#endif

}  // namespace

bool line_editing_available() {
#if defined(LOOM_HAVE_LIBEDIT)
  return true;
#else
  return false;
#endif
}

std::unique_ptr<LineReader> LineReader::open(bool editing, const std::string& history_path) {
#if defined(LOOM_HAVE_LIBEDIT)
  if (editing) return std::make_unique<EditReader>(history_path);
#else
  (void)editing;
  (void)history_path;
#endif
  return std::make_unique<PipeReader>();
}

}  // namespace loom::cli
