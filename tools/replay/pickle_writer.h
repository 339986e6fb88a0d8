// A small pickle writer for plain data (dict, list, str, int, bool, None), the inverse of
// pickle_reader.h for what a memory snapshot needs. It writes protocol 2 opcodes only, which
// Python's pickle and the JavaScript unpickler of pytorch.org/memory_viz (protocols 2 to 4)
// both read. Containers are streamed: begin_dict() ... end_dict() with MARK/SETITEMS, so a
// large trace is never built as a tree first. As Python's pickler does, items go in batches of
// 1000 (APPENDS/SETITEMS, then a new MARK): memory_viz's unpickler pushes a batch as function
// arguments, and a 300,000-entry batch would overflow a browser's stack.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cudacache::replay {

class PickleWriter {
 public:
  PickleWriter();

  void begin_dict();
  void end_dict();
  void begin_list();
  void end_list();
  // Inside a dict, a key is followed by exactly one value.
  void key(std::string_view name) { value(name); }

  void value(std::string_view text);
  void value(const char* text) { value(std::string_view(text)); }
  void value(std::int64_t number);
  void value(std::uint64_t number);
  void value(bool flag);
  void none();

  template <typename T>
  void field(std::string_view name, const T& v) {
    key(name);
    value(v);
  }

  // Ends the pickle (STOP) and returns its bytes. Throws std::logic_error when a container is
  // still open.
  const std::string& finish();

 private:
  enum class Container : std::uint8_t { kDict, kList };
  struct Open {
    Container container;
    std::size_t items = 0;  // on the stack since the last MARK (a dict's keys count too)
  };
  void open(char empty_opcode, Container container);
  void close(char batch_opcode, Container container);
  // A value is complete (a scalar, or a container just closed): batches when one is full.
  void added();

  std::string bytes_;
  std::vector<Open> open_;
  bool finished_ = false;
};

}  // namespace cudacache::replay
