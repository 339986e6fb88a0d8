// NodeArena: the nodes of one node-based container (std::map, std::set), carved from chunks and
// recycled through a free list, so that a container that grows with each device call (the
// page index of an address range) makes no host malloc per insert. glibc's malloc takes 100-200
// instructions for a small block that its caches cannot serve, a node from the arena about ten.
//
// The arena serves one node size, the first it is asked for; any other request (a rebound
// allocator asking for something else) goes to operator new. Nodes return to the arena, never
// to the system, until the arena is destroyed: it must outlive its container (declare it first).
// Not thread-safe: its container's lock guards it.
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace cudacache {

class NodeArena {
 public:
  NodeArena() = default;
  ~NodeArena() {
    for (void* chunk : chunks_) ::operator delete(chunk);
  }
  NodeArena(const NodeArena&) = delete;
  NodeArena& operator=(const NodeArena&) = delete;

  void* allocate(std::size_t size) {
    if (node_size_ == 0) node_size_ = node_size_for(size);
    if (node_size_for(size) != node_size_) return ::operator new(size);
    if (free_ != nullptr) {
      FreeNode* node = free_;
      free_ = node->next;
      return node;
    }
    if (next_ == end_) add_chunk();
    void* node = next_;
    next_ += node_size_;
    return node;
  }

  void deallocate(void* node, std::size_t size) noexcept {
    if (node_size_for(size) != node_size_) {
      ::operator delete(node);
      return;
    }
    free_ = new (node) FreeNode{free_};
  }

 private:
  struct FreeNode {
    FreeNode* next;
  };
  static constexpr std::size_t kFirstChunkNodes = 16;
  static constexpr std::size_t kMaxChunkNodes = 1024;

  static std::size_t node_size_for(std::size_t size) {
    constexpr std::size_t align = alignof(std::max_align_t);
    const std::size_t at_least = size < sizeof(FreeNode) ? sizeof(FreeNode) : size;
    return (at_least + align - 1) / align * align;
  }

  void add_chunk() {
    // Chunks double up to a bound: a small index costs little, a large one few mallocs.
    const std::size_t nodes =
        chunks_.empty() ? kFirstChunkNodes
                        : (chunk_nodes_ * 2 < kMaxChunkNodes ? chunk_nodes_ * 2 : kMaxChunkNodes);
    chunks_.reserve(chunks_.size() + 1);  // before the allocation: nothing leaks if it throws
    const std::size_t bytes = nodes * node_size_;
    char* chunk = static_cast<char*>(::operator new(bytes));
    chunks_.push_back(chunk);
    chunk_nodes_ = nodes;
    next_ = chunk;
    end_ = chunk + bytes;
  }

  std::size_t node_size_ = 0;
  FreeNode* free_ = nullptr;
  char* next_ = nullptr;
  char* end_ = nullptr;
  std::size_t chunk_nodes_ = 0;
  std::vector<void*> chunks_;
};

// A standard allocator over a NodeArena, for a container's template argument. Copies (and the
// copies a container rebinds to its node type) share the arena.
template <typename T>
class ArenaAllocator {
 public:
  using value_type = T;

  explicit ArenaAllocator(NodeArena* arena) noexcept : arena_(arena) {}
  template <typename U>
  ArenaAllocator(const ArenaAllocator<U>& other) noexcept : arena_(other.arena()) {}

  T* allocate(std::size_t n) {
    static_assert(alignof(T) <= alignof(std::max_align_t), "the arena aligns nodes to max_align_t");
    if (n != 1) return static_cast<T*>(::operator new(n * sizeof(T)));
    return static_cast<T*>(arena_->allocate(sizeof(T)));
  }
  void deallocate(T* pointer, std::size_t n) noexcept {
    if (n != 1) {
      ::operator delete(pointer);
      return;
    }
    arena_->deallocate(pointer, sizeof(T));
  }

  NodeArena* arena() const noexcept { return arena_; }
  template <typename U>
  bool operator==(const ArenaAllocator<U>& other) const noexcept {
    return arena_ == other.arena();
  }
  template <typename U>
  bool operator!=(const ArenaAllocator<U>& other) const noexcept {
    return arena_ != other.arena();
  }

 private:
  NodeArena* arena_;
};

}  // namespace cudacache
