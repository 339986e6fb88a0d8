// A restricted pickle reader for PyTorch memory snapshots (torch.cuda.memory._dump_snapshot).
// It understands only the opcodes of protocols 2..5 that build plain data, and rejects every
// opcode that would import or construct a Python object (GLOBAL, STACK_GLOBAL, REDUCE, BUILD,
// INST, OBJ, NEWOBJ, ...), so reading an untrusted snapshot can never run code.
#pragma once

#include <string>
#include <string_view>

#include "pickle_value.h"
#include "trace.h"

namespace cudacache::replay {

// Every error names `source` and the byte offset of the offending opcode, e.g.
// "x.pickle: byte offset 1234: unexpected type: opcode GLOBAL ...". Derived from TraceError so
// that the tool treats it like any other malformed input.
class PickleError : public TraceError {
 public:
  using TraceError::TraceError;
};

PickleRef parse_pickle(std::string_view bytes, const std::string& source);

// True when `bytes` starts like a protocol 2+ pickle (0x80 PROTO).
bool looks_like_pickle(std::string_view bytes);

}  // namespace cudacache::replay
