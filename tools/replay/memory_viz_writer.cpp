#include "memory_viz_writer.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "pickle_writer.h"

namespace cudacache::replay {
namespace {

void write_frames(PickleWriter& out) {
  // No Python stacks in a replay; PyTorch's readers expect the key.
  out.key("frames");
  out.begin_list();
  out.end_list();
}

void write_segment(PickleWriter& out, const SnapshotSegment& segment) {
  out.begin_dict();
  out.field("device", std::int64_t{0});
  out.field("address", segment.address);
  out.field("total_size", segment.total_size);
  out.field("allocated_size", segment.allocated_size);
  out.field("active_size", segment.active_size);
  out.field("requested_size", segment.requested_size);
  out.field("stream", segment.stream);
  out.field("segment_type", std::string_view(segment.segment_type));
  out.field("is_expandable", segment.is_expandable);
  write_frames(out);
  out.key("blocks");
  out.begin_list();
  for (const SnapshotBlock& block : segment.blocks) {
    out.begin_dict();
    out.field("address", block.address);
    out.field("size", block.size);
    out.field("requested_size", block.requested_size);
    out.field("state", std::string_view(block.state));
    write_frames(out);
    out.end_dict();
  }
  out.end_list();
  out.end_dict();
}

// Letters, digits, '.', '-' and '_' are kept; any run of other characters becomes one '_'.
std::string file_name_part(const std::string& name) {
  std::string out;
  for (char c : name) {
    const bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '.' || c == '-' || c == '_';
    if (keep) {
      out += c;
    } else if (out.empty() || out.back() != '_') {
      out += '_';
    }
  }
  while (out.size() > 1 && out.back() == '_') out.pop_back();
  if (out.empty() || out.front() == '.') out.insert(out.begin(), '_');
  return out;
}

}  // namespace

std::string snapshot_pickle(const ReplaySnapshot& snapshot) {
  PickleWriter out;
  out.begin_dict();
  out.key("segments");
  out.begin_list();
  for (const SnapshotSegment& segment : snapshot.segments) write_segment(out, segment);
  out.end_list();
  out.key("device_traces");
  out.begin_list();
  out.begin_list();
  for (const SnapshotEntry& entry : snapshot.trace) {
    out.begin_dict();
    out.field("action", std::string_view(entry.action));
    // PyTorch's key for an oom entry's address field: the bytes free on the device.
    out.field(entry.action == "oom" ? "device_free" : "addr", entry.address);
    out.field("size", entry.size);
    out.field("stream", entry.stream);
    out.field("time_us", entry.time_us);
    write_frames(out);
    out.end_dict();
  }
  out.end_list();
  out.end_list();
  out.end_dict();
  return out.finish();
}

std::string memory_viz_path(const std::string& directory, const std::string& trace_name,
                            const std::string& allocator_name) {
  return (std::filesystem::path(directory) /
          (file_name_part(trace_name) + "." + file_name_part(allocator_name) + ".pickle"))
      .string();
}

void prepare_memory_viz_directory(const std::string& directory) {
  namespace fs = std::filesystem;
  std::error_code error;
  if (fs::exists(directory, error) && !fs::is_directory(directory, error)) {
    throw std::runtime_error("--memory-viz " + directory + ": exists and is not a directory");
  }
  if (!fs::exists(directory, error)) {
    fs::create_directories(directory, error);
    if (error) {
      throw std::runtime_error("--memory-viz " + directory +
                               ": cannot create the directory: " + error.message());
    }
  }
  if (::access(directory.c_str(), W_OK | X_OK) != 0) {
    throw std::runtime_error("--memory-viz " + directory + ": directory is not writable");
  }
}

void write_snapshot_pickle(const std::string& path, const ReplaySnapshot& snapshot) {
  std::ofstream out(path, std::ios::binary);
  if (!out) throw std::runtime_error(path + ": cannot open for writing");
  out << snapshot_pickle(snapshot);
  out.close();
  if (!out) throw std::runtime_error(path + ": write error");
}

}  // namespace cudacache::replay
