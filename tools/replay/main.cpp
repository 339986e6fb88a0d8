// cudacache-replay: replays allocation traces through several allocators and compares them.
// See command_line.cpp (usage_text) for what it does and prints.
#include <exception>
#include <iostream>
#include <string>

#include "command_line.h"
#include "replay_tool.h"
#include "simulated_device.h"
#include "trace.h"

int main(int argc, char** argv) {
  using namespace cudacache::replay;
  try {
    const CommandLine line = parse_command_line(argc, argv);
    if (line.help) {
      std::cout << usage_text();
      return 0;
    }
    if (line.version) {
      std::cout << version_text();
      return 0;
    }
    if (line.print_config) {
      std::cout << print_config_text();
      return 0;
    }
    // The comparison needs cudasim's capacity control and counters. The tool switches to it
    // by re-executing itself with cudasim first on LD_LIBRARY_PATH (which the loader searches
    // before the RUNPATH that finds NVIDIA's runtime); --real-gpu skips that.
    if (!line.real_gpu) {
      const std::string sim_dir = cudasim_dir(CUDACACHE_REPLAY_CUDASIM_DIR);
      reexec_on_simulator(sim_dir.c_str(), argv);
    }
    return run_replay_tool(line, std::cout);
  } catch (const UsageError& error) {
    std::cerr << "cudacache-replay: " << error.what() << "\n(see cudacache-replay --help)\n";
    return 2;
  } catch (const TraceError& error) {
    std::cerr << "cudacache-replay: " << error.what() << "\n";
    return 2;
  } catch (const std::invalid_argument& error) {
    std::cerr << "cudacache-replay: " << error.what() << "\n";
    return 2;
  } catch (const std::exception& error) {
    std::cerr << "cudacache-replay: error: " << error.what() << "\n";
    return 1;
  }
}
