#include "oom_report.h"

#include "size_policy.h"

#include <algorithm>
#include <cstdio>

namespace cudacache {

std::string describe_oom(const OomReport& r, const Options& options) {
  char fragmentation_text[32];
  std::snprintf(fragmentation_text, sizeof fragmentation_text, "%.2f", r.fragmentation);
  std::string text =
      "CUDA out of memory (cudacache). Tried to allocate " + format_size(r.requested_bytes) +
      " on device " + std::to_string(r.device) + ". Device " + std::to_string(r.device) +
      (r.device_total_bytes == 0
           ? std::string(" could not say how much memory it has (cudaMemGetInfo failed).")
           : " has a total capacity of " + format_size(r.device_total_bytes) + " of which " +
                 format_size(r.device_free_bytes) + " is free.") +
      " Of the memory cudacache holds, " + format_size(r.allocated_bytes) + " is allocated and " +
      format_size(r.reserved_unallocated_bytes) +
      " is reserved but unallocated (reserved in total: " + format_size(r.reserved_bytes) +
      "); the largest free cached block is " + format_size(r.largest_free_cached_block) +
      ", fragmentation " + fragmentation_text +
      " (1 - largest free cached block / reserved but unallocated).";
  if (r.free_on_other_streams_bytes > 0) {
    text += ' ';
    text += format_size(r.free_on_other_streams_bytes);
    text +=
        " of the free cached memory belongs to other streams (a cached block is reused "
        "only on the stream that allocated it).";
  }
  if (r.pages) {
    text += " Reserved memory is mapped pages; " + format_size(r.free_in_partial_pages_bytes) +
            " of the free memory lies in pages that also hold allocated memory, so it can be "
            "neither unmapped nor moved to where the request needs it";
    if (r.free_beside_in_use_bytes > 0) {
      text += " (" + format_size(r.free_beside_in_use_bytes) +
              " of it in the 2 MiB granules, the least a page can be, that it shares with "
              "memory in use)";
    }
    text += '.';
  }
  if (r.address_range_refused_bytes > 0) {
    text += " The driver refused " + format_size(r.address_range_refused_bytes) +
            " of virtual address space for a new range of this stream's pool: the process's "
            "address space ran out, not the device's memory (each stream that allocates holds "
            "a range of about 9/8 of the device per pool).";
  }
  if (r.fraction_cap_hit) {
    text += " The per_process_memory_fraction cap (" +
            options.per_process_memory_fraction.to_string() + " of the device) was reached.";
  }
  const std::size_t suggested_split_mb = std::max<std::size_t>(20, r.requested_bytes >> 20);
  if (r.device_total_bytes > 0 && r.requested_bytes > r.device_total_bytes) {
    text += " The request is larger than the whole device: no setting can satisfy it.";
  } else if (r.address_range_refused_bytes > 0) {
    text +=
        " Allocate on fewer streams, free the tensors that keep other streams' ranges in use "
        "and call empty_cache(), or use CUDACACHE_CONF=policy:pytorch (segments of the "
        "request's size, no ranges).";
  } else if (r.fraction_cap_hit) {
    text += " Raise per_process_memory_fraction, or free memory.";
  } else if (r.free_on_other_streams_bytes * 2 > r.reserved_unallocated_bytes) {
    // What is cached is not this stream's: no split setting or empty_cache() helps.
    text +=
        " Allocate on the stream that freed the memory, or free the tensors that keep "
        "those streams' segments in use.";
  } else if (r.pages) {  // max_split_size and empty_cache cannot free partial pages
    text +=
        " Free tensors you no longer need (the pages they free can be moved), reduce the "
        "batch size, or register a retry hook that releases memory.";
    // Free whole granules of larger pages would have been movable in pages cut where blocks
    // end (Note [Cut pages]), and in pages of one granule.
    const std::size_t in_larger_pages =
        r.free_in_partial_pages_bytes -
        std::min(r.free_beside_in_use_bytes, r.free_in_partial_pages_bytes);
    if (options.policy.is_cudacache() && options.max_page_size_mb.bytes > kSmallPage &&
        in_larger_pages >= kSmallPage) {
      text += " " + format_size(in_larger_pages) +
              " of the free memory lies in whole 2 MiB granules of larger pages, which cannot "
              "move alone:";
      if (!options.cut_pages.enabled) {
        text +=
            " with CUDACACHE_CONF=cut_pages:True a page that a block ends inside is cut once "
            "the device has no room, at up to three cuMemCreate per cut;";
      }
      text +=
          " with CUDACACHE_CONF=max_page_size_mb:2 every page is one granule, at one "
          "cuMemCreate per 2 MiB.";
    }
  } else if (r.reserved_unallocated_bytes >= r.requested_bytes) {
    text +=
        " Reserved but unallocated memory is large enough for the request but not "
        "contiguous: CUDACACHE_CONF=expandable_segments:True avoids this fragmentation; "
        "or set max_split_size_mb:" +
        std::to_string(suggested_split_mb) +
        " so that large cached blocks are not split, or call empty_cache() between phases.";
  } else if (r.fragmentation > 0.5) {
    text += " The cached free memory is fragmented: CUDACACHE_CONF=max_split_size_mb:" +
            std::to_string(suggested_split_mb) + " limits splitting of large blocks.";
  } else {
    text +=
        " Free tensors you no longer need, reduce the batch size, or register a retry hook "
        "that releases memory.";
  }
  return text;
}

}  // namespace cudacache
