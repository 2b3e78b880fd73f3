// phalanx-nvml-probe: what the node agent's NVML reader sees, as one JSON object on stdout, for
// the GPU proof (scripts/gpu-proof.sh, docs/gpu-proof.md) to compare with nvidia-ml-py's answers
// on a real driver. Every read goes through the same NvmlApi and ReadInventory the agent uses, so
// a wrong struct layout or symbol in NvmlLoader shows as a value that differs from NVML's own.
//
//   phalanx-nvml-probe [--nvml_path libnvidia-ml.so.1] [--fake_gpus N] [--xid_poll 2s]
//
// Exit codes: 0 read (also with 0 GPUs), 1 NVML could not be loaded or read (the reason is in the
// JSON's "error" and on stderr), 2 bad flags.
#include <iostream>
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "common/base/process_main.h"
#include "node_agent/gpu/fake_nvml.h"
#include "node_agent/gpu/gpu_health.h"
#include "node_agent/gpu/gpu_inventory.h"
#include "node_agent/gpu/nvml_loader.h"

ABSL_FLAG(std::string, nvml_path, phalanx::agent::NvmlLoader::kDefaultPath,
          "the NVML library to load");
ABSL_FLAG(std::string, fake_gpus, "", "read N fake GPUs (\"2\" or \"2:H100\") instead of NVML");
ABSL_FLAG(absl::Duration, xid_poll, absl::Seconds(2),
          "how long to poll the XID event set (every 100 ms, never blocking)");

namespace phalanx::agent {
namespace {

std::string Quoted(absl::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      absl::StrAppend(&out, "\\u00", c < 0x10 ? "0" : "", absl::Hex(c));
    } else {
      out += c;
    }
  }
  return out + "\"";
}

template <typename T>
std::string OrNull(const std::optional<T>& value) {
  return value ? absl::StrCat(*value) : "null";
}

int Fail(const std::string& error) {
  std::cerr << "phalanx-nvml-probe: " << error << "\n";
  std::cout << "{\"error\": " << Quoted(error) << "}\n";
  return 1;
}

// The XID event set over every GPU: how many registered (and why not, per GPU), then what a
// non-blocking poll returns for `window`. On a healthy GPU: no events, and no call blocks.
std::string ProbeXidEvents(NvmlApi& nvml, const base::Clock& clock, int count,
                           absl::Duration window) {
  absl::StatusOr<NvmlEventSet> set = nvml.EventSetCreate();
  if (!set.ok()) return absl::StrCat("{\"error\": ", Quoted(set.status().ToString()), "}");
  int registered = 0;
  std::vector<std::string> refused;
  for (int i = 0; i < count; ++i) {
    absl::StatusOr<NvmlDevice> device = nvml.DeviceByIndex(i);
    absl::Status s = device.ok() ? nvml.RegisterXidEvents(*set, *device) : device.status();
    if (s.ok()) {
      ++registered;
    } else {
      refused.push_back(Quoted(absl::StrCat(i, ": ", s.ToString())));
    }
  }
  std::vector<std::string> events;
  std::string poll_error = "null";
  int polls = 0;
  absl::Duration longest_poll;
  const absl::Time end = clock.Now() + window;
  while (true) {
    const absl::Time start = clock.Now();
    absl::StatusOr<std::vector<XidEvent>> got = nvml.PollXidEvents(*set);
    const absl::Time polled = clock.Now();
    longest_poll = std::max(longest_poll, polled - start);
    ++polls;
    if (!got.ok()) {
      poll_error = Quoted(got.status().ToString());
      break;
    }
    for (const XidEvent& e : *got) {
      events.push_back(absl::StrCat("{\"gpu\": ", e.device_index, ", \"xid\": ", e.xid,
                                    ", \"fatal\": ", IsFatalXid(e.xid) ? "true" : "false", "}"));
    }
    if (polled >= end) break;
    // Paced, as the agent's own XID poll is: NVML offers no wait that a deadline could end.
    clock.SleepFor(std::min(absl::Milliseconds(100), end - polled));
  }
  (void)nvml.EventSetFree(*set);
  return absl::StrCat(
      "{\"registered\": ", registered, ", \"refused\": [", absl::StrJoin(refused, ", "),
      "], \"polls\": ", polls, ", \"longest_poll_ms\": ", absl::ToDoubleMilliseconds(longest_poll),
      ", \"poll_error\": ", poll_error, ", \"events\": [", absl::StrJoin(events, ", "), "]}");
}

int Probe() {
  std::unique_ptr<NvmlApi> nvml;
  std::string source;
  if (const std::string spec = absl::GetFlag(FLAGS_fake_gpus); !spec.empty()) {
    absl::StatusOr<std::unique_ptr<FakeNvml>> fake = FakeNvml::FromSpec(spec);
    if (!fake.ok()) return Fail(absl::StrCat("--fake_gpus: ", fake.status().message()));
    if (absl::Status s = (*fake)->Init(); !s.ok()) return Fail(s.ToString());
    nvml = *std::move(fake);
    source = absl::StrCat("fake:", spec);
  } else {
    const std::string path = absl::GetFlag(FLAGS_nvml_path);
    absl::StatusOr<std::unique_ptr<NvmlApi>> loaded = NvmlLoader::Load(path);
    if (!loaded.ok()) return Fail(loaded.status().ToString());
    nvml = *std::move(loaded);
    source = path;
  }
  absl::StatusOr<GpuInventory> inventory = ReadInventory(*nvml);
  if (!inventory.ok()) return Fail(inventory.status().ToString());
  std::vector<std::string> gpus;
  for (const GpuInfo& gpu : inventory->gpus) {
    std::vector<std::string> reasons;
    for (const std::string& r : gpu.health_reasons) reasons.push_back(Quoted(r));
    gpus.push_back(absl::StrCat("{\"index\": ", gpu.index, ", \"name\": ", Quoted(gpu.name),
                                ", \"uuid\": ", Quoted(gpu.uuid),
                                ", \"pci_bus_id\": ", Quoted(gpu.pci_bus_id),
                                ", \"memory_total_bytes\": ", gpu.memory_total_bytes,
                                ", \"temperature_c\": ", OrNull(gpu.temperature_c),
                                ", \"ecc_corrected\": ", OrNull(gpu.ecc_corrected),
                                ", \"ecc_uncorrected\": ", OrNull(gpu.ecc_uncorrected),
                                ", \"health\": ", Quoted(GpuHealthName(gpu.health)),
                                ", \"health_reasons\": [", absl::StrJoin(reasons, ", "), "]}"));
  }
  const std::string xid =
      ProbeXidEvents(*nvml, base::RealClock::Get(), static_cast<int>(inventory->gpus.size()),
                     absl::GetFlag(FLAGS_xid_poll));
  std::cout << "{\"source\": " << Quoted(source)
            << ", \"driver_version\": " << Quoted(inventory->driver_version)
            << ", \"cuda_driver_version\": " << inventory->cuda_driver_version << ", \"gpus\": ["
            << absl::StrJoin(gpus, ", ") << "], \"xid\": " << xid << "}\n";
  (void)nvml->Shutdown();
  return 0;
}

}  // namespace
}  // namespace phalanx::agent

int main(int argc, char** argv) {
  const phalanx::base::ProcessMain process(
      argc, argv,
      {"nvml-probe", "phalanx-nvml-probe",
       "prints what the node agent's NVML reader sees as JSON (docs/gpu-proof.md)"});
  process.ExitOnStopSignal();  // nothing to clean up
  if (!process.args().empty()) return process.Fail("unexpected argument " + process.args()[0]);
  return phalanx::agent::Probe();
}
