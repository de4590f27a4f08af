// The input side of `loom chat`: one line at a time from a terminal, with line editing and a
// history file through Debian's libedit, or from a pipe with plain reads.
#pragma once

#include <memory>
#include <string>

namespace loom::cli {

// Not thread-safe. SIGINT must be installed without SA_RESTART by the caller, so that Ctrl-C
// ends a blocked read (read() returns EINTR): the reader reports it as kInterrupted.
class LineReader {
 public:
  enum class Got {
    kLine,         // *line holds the line (no newline)
    kInterrupted,  // Ctrl-C while reading; *line holds what had been typed
    kEnd,          // end of input (Ctrl-D on an empty line, or the pipe closed)
  };

  // editing: use libedit (stdin and stderr are terminals); otherwise plain reads of stdin.
  // history_path: where the edited lines persist ("" = none); its directory is created.
  static std::unique_ptr<LineReader> open(bool editing, const std::string& history_path);
  virtual ~LineReader() = default;

  // Shows `prompt` (on stderr, for terminals) and reads one line.
  virtual Got read(const std::string& prompt, std::string* line) = 0;
  // Adds a line to the history (and its file) so that arrow-up recalls it.
  virtual void remember(const std::string& line) = 0;
  // True when line editing is in use (libedit found at build time and a terminal at run time).
  virtual bool editing() const = 0;
};

// True when this build has libedit.
bool line_editing_available();

}  // namespace loom::cli
