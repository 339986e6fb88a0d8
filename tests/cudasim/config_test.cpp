// Environment configuration and the exit report, checked by running the probe program with
// chosen variables. Also: an unimplemented runtime function fails loudly, naming itself.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <regex>
#include <string>

#include "sim_test.h"

namespace {

struct ProbeRun {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

ProbeRun run_probe(const std::string& environment, const std::string& mode) {
  const std::string command = "env " + environment + " '" CUDASIM_PROBE "' " + mode + " 2>&1";
  ProbeRun run;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return run;
  char buffer[512];
  while (fgets(buffer, sizeof(buffer), pipe) != nullptr) run.output += buffer;
  const int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return run;
}

using Config = SimTest;

TEST_F(Config, Defaults) {
  const ProbeRun run = run_probe("-u CUDASIM_CAPACITY -u CUDASIM_DEVICES", "devices");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(run.output, "devices=1 capacity=85899345920\n");
}

TEST_F(Config, CapacitySuffixes) {
  const std::pair<const char*, const char*> cases[] = {
      {"1048576", "1048576"},   {"24GiB", "25769803776"}, {"16GB", "16000000000"},
      {"512M", "536870912"},    {"512MiB", "536870912"},  {"3K", "3072"},
      {"2KB", "2000"},          {"1T", "1099511627776"},  {"1TiB", "1099511627776"},
      {"2TB", "2000000000000"}, {"7G", "7516192768"},     {"100MB", "100000000"},
  };
  for (const auto& [value, bytes] : cases) {
    const ProbeRun run = run_probe(std::string("CUDASIM_CAPACITY=") + value, "devices");
    EXPECT_EQ(run.exit_code, 0) << value << ": " << run.output;
    EXPECT_EQ(run.output, std::string("devices=1 capacity=") + bytes + "\n") << value;
  }
}

TEST_F(Config, DeviceCount) {
  const ProbeRun run = run_probe("CUDASIM_DEVICES=3", "devices");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(run.output, "devices=3 capacity=8589934592\n");
  EXPECT_EQ(run_probe("CUDASIM_DEVICES=64", "devices").output, "devices=64 capacity=8589934592\n");
}

TEST_F(Config, BadValuesStopTheProgramAtLoad) {
  const std::pair<const char*, const char*> cases[] = {
      {"CUDASIM_CAPACITY", "banana"},
      {"CUDASIM_CAPACITY", "1.5GiB"},
      {"CUDASIM_CAPACITY", "12XB"},
      {"CUDASIM_CAPACITY", "0"},
      {"CUDASIM_CAPACITY", ""},
      {"CUDASIM_CAPACITY", "99999999999999999999"},
      {"CUDASIM_DEVICES", "0"},
      {"CUDASIM_DEVICES", "999"},
      {"CUDASIM_DEVICES", "2x"},
      {"CUDASIM_DEVICES", "-1"},
      {"CUDASIM_DEVICES", " 2"},
      {"CUDASIM_DEVICES", "+2"},
      {"CUDASIM_REPORT", "yes"},
      {"CUDASIM_VMM", "no"},
      {"CUDASIM_VMM", "2"},
      {"CUDASIM_VMM", " 0"},
      {"CUDASIM_FAIL_NTH", "bogus:1"},
      {"CUDASIM_FAIL_NTH", "free"},
      {"CUDASIM_FAIL_NTH", "free:0"},
      {"CUDASIM_FAIL_NTH", "free:x"},
      {"CUDASIM_FAIL_NTH", "free:1x"},
      {"CUDASIM_FAIL_NTH", "free:1@"},
      {"CUDASIM_FAIL_NTH", "free:1@1"},
      {"CUDASIM_FAIL_NTH", "free:-1"},
      {"CUDASIM_FAIL_NTH", "free:99999999999"},
      {"CUDASIM_FAIL_NTH", "free:1@99999999999999999999"},
      {"CUDASIM_MALLOC_PAGE", "0"},
      {"CUDASIM_MALLOC_PAGE", "300"},
      {"CUDASIM_MALLOC_PAGE", "2MB"},
      {"CUDASIM_MALLOC_PAGE", "pages"},
      {"CUDASIM_MALLOC_PAGE", "2TiB"},
  };
  for (const auto& [name, value] : cases) {
    const ProbeRun run = run_probe(std::string(name) + "='" + value + "'", "devices");
    EXPECT_EQ(run.exit_code, 2) << name << "=" << value << ": " << run.output;
    EXPECT_NE(run.output.find(std::string("cudasim: invalid ") + name + "='" + value + "'"),
              std::string::npos)
        << run.output;
    EXPECT_EQ(run.output.find("devices="), std::string::npos) << "main() must not run";
  }
}

TEST_F(Config, AMallocTakesItsSizeIn256ByteUnits) {
  const ProbeRun run = run_probe("-u CUDASIM_MALLOC_PAGE", "footprint");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(run.output,
            "1:256\n512:512\n1048576:1048576\n1048577:1048832\n3145728:3145728\n"
            "4194304:4194304\n5243180:5243392\nasync 3145728:3145728\n");
}

// CUDASIM_MALLOC_PAGE: cudaMalloc's memory in pages, as PyTorch's pull request 17120 describes it.
TEST_F(Config, WithAMallocPageALargeMallocTakesWholePages) {
  const ProbeRun run = run_probe("CUDASIM_MALLOC_PAGE=2MiB", "footprint");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  // Alone on the device, a small allocation takes a page too; a large one whole pages.
  EXPECT_EQ(run.output,
            "1:2097152\n512:2097152\n1048576:2097152\n1048577:2097152\n3145728:4194304\n"
            "4194304:4194304\n5243180:6291456\nasync 3145728:4194304\n");
  EXPECT_EQ(run_probe("CUDASIM_MALLOC_PAGE=65536", "footprint").output,
            "1:65536\n512:65536\n1048576:1048576\n1048577:1114112\n3145728:3145728\n"
            "4194304:4194304\n5243180:5308416\nasync 3145728:3145728\n");
}

TEST_F(Config, WithAMallocPageSmallMallocsShareThePagesLeftOver) {
  const ProbeRun run = run_probe("CUDASIM_MALLOC_PAGE=2MiB", "shared_pages");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  // 3 MiB takes two pages; two of 512 KiB fill the second one's last MiB; 1 byte more needs a
  // third page, which the 1 MiB after it shares. Freeing the large one gives back only its first
  // page: the second holds the small ones in it until the last of them goes.
  EXPECT_EQ(run.output,
            "large:4194304\nsmall:4194304\nsmall:4194304\nsmall:6291456\nsmall:6291456\n"
            "free large:4194304\nfree small:4194304\nfree small:2097152\nfree small:2097152\n"
            "free small:0\n");
  // Without pages, each takes its own bytes.
  EXPECT_EQ(run_probe("-u CUDASIM_MALLOC_PAGE", "shared_pages").output,
            "large:3145728\nsmall:3670016\nsmall:4194304\nsmall:4194560\nsmall:5243136\n"
            "free large:2097408\nfree small:1573120\nfree small:1048832\nfree small:1048576\n"
            "free small:0\n");
}

TEST_F(Config, WithAMallocPageASmallMallocGoesIntoTheFullestPageThatHoldsIt) {
  const ProbeRun run = run_probe("CUDASIM_MALLOC_PAGE=2MiB", "best_fit");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  // 3 MiB and 2.5 MiB: four pages; the 0.75 MiB one shares the first's last page (1 MiB free,
  // against the second's 1.5 MiB), which stays when the first goes.
  EXPECT_EQ(run.output, "small:8388608\nfree first:6291456\nfree second:2097152\nfree small:0\n");
}

TEST_F(Config, WithAMallocPageALargeMallocStartsAPage) {
  EXPECT_EQ(run_probe("CUDASIM_MALLOC_PAGE=2MiB", "aligned_2mib").output, "aligned=20\n");
  EXPECT_EQ(run_probe("CUDASIM_MALLOC_PAGE=64KiB", "aligned_64kib").output, "aligned=20\n");
}

TEST_F(Config, WithAMallocPageRandomMallocsAndFreesHoldWholePagesAndGiveThemAllBack) {
  const ProbeRun run = run_probe("CUDASIM_MALLOC_PAGE=2MiB", "random_pages");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(run.output, "ok\n");
}

TEST_F(Config, ReportIsOneLine) {
  const ProbeRun run = run_probe("CUDASIM_REPORT=1", "alloc");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  // a (1024), b (2048), c (1 MiB) malloc'd; a, b freed; 2 MiB reserved, cuMemCreate'd, mapped,
  // made accessible, unmapped, released and the range freed, while c is alive; then one
  // cudaMalloc that fails (a call, not an allocation) and a cudaDeviceSynchronize.
  EXPECT_EQ(run.output,
            "cudasim: mallocs=4 frees=3 maps=1 unmaps=1 in_use=1048576 peak=3145728"
            " calls: malloc=4 free=2 create=1 release=1 map=1 unmap=1 set_access=1"
            " synchronize=1 reserve=1 address_free=1 mem_get_info=0\n");
  // The first six fields are as before the call counts were added, in the same order.
  const std::regex format(
      "cudasim: mallocs=[0-9]+ frees=[0-9]+ maps=[0-9]+ unmaps=[0-9]+ in_use=[0-9]+ "
      "peak=[0-9]+ calls: malloc=[0-9]+ free=[0-9]+ create=[0-9]+ release=[0-9]+ map=[0-9]+ "
      "unmap=[0-9]+ set_access=[0-9]+ synchronize=[0-9]+ reserve=[0-9]+ address_free=[0-9]+ "
      "mem_get_info=[0-9]+\n");
  EXPECT_TRUE(std::regex_match(run.output, format)) << run.output;
}

// The report sums the call counts over devices.
TEST_F(Config, ReportSumsDevices) {
  const ProbeRun run = run_probe("CUDASIM_REPORT=1 CUDASIM_DEVICES=2", "vmm");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(run.output,
            "device 0: vmm=1 create=0 granularity=0\n"
            "device 1: vmm=1 create=0 granularity=0\n"
            "malloc=0\n"
            "cudasim: mallocs=3 frees=3 maps=0 unmaps=0 in_use=0 peak=2097152"
            " calls: malloc=1 free=1 create=2 release=2 map=0 unmap=0 set_access=0"
            " synchronize=0 reserve=0 address_free=0 mem_get_info=0\n");
}

// CUDASIM_VMM=0: no device supports VMM; cudaMalloc works as usual.
TEST_F(Config, VmmCanBeUnsupported) {
  const ProbeRun off = run_probe("CUDASIM_VMM=0 CUDASIM_DEVICES=2", "vmm");
  EXPECT_EQ(off.exit_code, 0) << off.output;
  EXPECT_EQ(off.output,
            "device 0: vmm=0 create=801 granularity=801\n"
            "device 1: vmm=0 create=801 granularity=801\n"
            "malloc=0\n");
  for (const char* on : {"CUDASIM_VMM=1", "CUDASIM_VMM=", "-u CUDASIM_VMM"}) {
    const ProbeRun run = run_probe(on, "vmm");
    EXPECT_EQ(run.exit_code, 0) << on << ": " << run.output;
    EXPECT_EQ(run.output, "device 0: vmm=1 create=0 granularity=0\nmalloc=0\n") << on;
  }
}

std::string read_file(const std::string& path) {
  std::string text;
  if (FILE* file = std::fopen(path.c_str(), "r")) {
    char buffer[512];
    while (std::fgets(buffer, sizeof(buffer), file) != nullptr) text += buffer;
    std::fclose(file);
  }
  return text;
}

// CUDASIM_CALL_REPORT: the calls of the whole run by kind, what a fault sweep reads; with
// CUDASIM_FAIL_NTH, which device had a call failed and the bytes a failed free kept.
TEST_F(Config, CallReportAndFailNth) {
  char path[] = "/tmp/cudasim-call-report-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  const std::string report = std::string("CUDASIM_CALL_REPORT=") + path;
  const ProbeRun clean = run_probe(report, "alloc");
  EXPECT_EQ(clean.exit_code, 0) << clean.output;
  EXPECT_EQ(read_file(path),
            "device 0 malloc 4\ndevice 0 free 2\ndevice 0 create 1\ndevice 0 release 1\n"
            "device 0 map 1\ndevice 0 unmap 1\ndevice 0 set_access 1\n"
            "device 0 synchronize 1\ndevice 0 reserve 1\ndevice 0 address_free 1\n");
  // The second cudaFree (of 2048 bytes) fails: the probe stops there.
  const ProbeRun failed_free = run_probe(report + " CUDASIM_FAIL_NTH=free:2", "alloc");
  EXPECT_EQ(failed_free.exit_code, 1);
  EXPECT_EQ(failed_free.output, "probe: cudaMalloc/cudaFree failed\n");
  EXPECT_EQ(read_file(path), "device 0 malloc 3\ndevice 0 free 2\ninjected 0 2048\nfired 0\n");
  // A failed map keeps nothing; only the device whose call failed is named.
  const ProbeRun failed_map =
      run_probe(report + " CUDASIM_DEVICES=2 CUDASIM_FAIL_NTH=map:1@0", "alloc");
  EXPECT_EQ(failed_map.exit_code, 1);
  EXPECT_EQ(failed_map.output, "probe: VMM failed\n");
  EXPECT_EQ(read_file(path),
            "device 0 malloc 3\ndevice 0 free 2\ndevice 0 create 1\ndevice 0 map 1\n"
            "device 0 reserve 1\ninjected 0 0\nfired 0\n");
  // A call of device 1 is asked to fail; the probe uses device 0 only, so nothing fails.
  const ProbeRun elsewhere =
      run_probe(report + " CUDASIM_DEVICES=2 CUDASIM_FAIL_NTH=malloc:1@1", "alloc");
  EXPECT_EQ(elsewhere.exit_code, 0) << elsewhere.output;
  EXPECT_EQ(read_file(path).find("injected"), std::string::npos);
  // A failed unmap keeps the 2 MiB page mapped.
  const ProbeRun failed_unmap = run_probe(report + " CUDASIM_FAIL_NTH=unmap:1", "alloc");
  EXPECT_EQ(failed_unmap.exit_code, 1);
  EXPECT_NE(read_file(path).find("injected 0 2097152\nfired 0\n"), std::string::npos);
  std::remove(path);
  // A report that cannot be written is said on stderr; the program's own result stands.
  const ProbeRun unwritable = run_probe("CUDASIM_CALL_REPORT=/nonexistent-dir/report", "alloc");
  EXPECT_EQ(unwritable.exit_code, 0) << unwritable.output;
  EXPECT_EQ(unwritable.output,
            "cudasim: cannot write CUDASIM_CALL_REPORT='/nonexistent-dir/report'\n");
}

TEST_F(Config, NoReportByDefault) {
  const ProbeRun run = run_probe("-u CUDASIM_REPORT", "alloc");
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_EQ(run.output, "");
}

// cudasim exports only what it implements, so the dynamic linker itself reports a call to
// anything else, naming the function.
// CUDASIM_VERBOSE=1 names each driver function a program looks up and cudasim lacks.
TEST_F(Config, VerboseLogsMissingDriverLookups) {
  const ProbeRun quiet = run_probe("-u CUDASIM_VERBOSE", "lookup");
  EXPECT_EQ(quiet.exit_code, 0) << quiet.output;
  EXPECT_EQ(quiet.output, "missing=1 present=1\n");
  const ProbeRun verbose = run_probe("CUDASIM_VERBOSE=1", "lookup");
  EXPECT_EQ(verbose.exit_code, 0) << verbose.output;
  EXPECT_EQ(verbose.output,
            "cudasim: driver function cuNoSuchFunction looked up (CUDA 12000): not provided\n"
            "missing=1 present=1\n");
  const ProbeRun bad = run_probe("CUDASIM_VERBOSE=yes", "lookup");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.output.find("invalid CUDASIM_VERBOSE='yes'"), std::string::npos) << bad.output;
}

TEST_F(Config, UnimplementedFunctionFailsLoudlyNamingIt) {
  for (const char* binding : {"-u LD_BIND_NOW", "LD_BIND_NOW=1"}) {
    const ProbeRun run = run_probe(binding, "unimplemented");
    EXPECT_NE(run.exit_code, 0) << binding;
    EXPECT_NE(run.output.find("undefined symbol: cudaMallocPitch"), std::string::npos)
        << binding << ": " << run.output;
    EXPECT_EQ(run.output.find("cudaMallocPitch returned"), std::string::npos) << run.output;
  }
}

}  // namespace
