// This process's stats page (stats_page.h): created in stats_directory() when the first
// allocator claims a slot, removed at exit. Creating it first removes this user's abandoned
// pages (of processes that were killed). A forked child stops writing to its parent's page and
// makes its own if it creates an allocator.
//
// Who writes: one thread of the publisher, started with the page, calls every registered
// source (each allocator writes its slot under its own mutex) every kInterval. The allocation
// path does nothing at all for the page: the figures are at most kInterval old, and counters
// (peaks, OOMs, device calls) miss nothing in between.
//
// Publishing is best effort: when the page cannot be created (no such directory, no space),
// the reason is logged once and the allocators run without publishing.
#pragma once

#include "stats_page.h"

#include <chrono>
#include <optional>

namespace cudacache::stats_publisher {

// A claimed slot for the allocator of `device` (the page has `device_count` slots, fixed by the
// first claim), or std::nullopt: no page, no slot of that number, or another allocator of the
// device in this copy of the library publishes there already.
std::optional<stats_page::SlotWriter> claim(int device, int device_count);

inline constexpr std::chrono::milliseconds kInterval{100};

// Registers `publish(owner)` to be called from the publisher's thread every kInterval, until
// remove_source(owner), which waits for a call in progress to end. `publish` takes the
// owner's own lock: callers must not hold it when they call remove_source.
void add_source(void* owner, void (*publish)(void* owner));
void remove_source(void* owner);
// Calls every source once, now, in the calling thread (tests, and a final write before exit).
void publish_now();

// The page's path, or empty when this process has none (tests).
std::string page_path();

}  // namespace cudacache::stats_publisher
