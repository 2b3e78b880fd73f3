#include "examples/local_job/worker_event.h"

#include "absl/strings/numbers.h"

namespace phalanx::harness {

int64_t WorkerEvent::Int(const std::string& name, int64_t fallback) const {
  auto it = fields.find(name);
  int64_t value;
  if (it == fields.end() || !absl::SimpleAtoi(it->second, &value)) return fallback;
  return value;
}

std::optional<WorkerEvent> ParseWorkerEvent(const std::string& line) {
  constexpr char kPrefix[] = "EVENT ";
  if (line.rfind(kPrefix, 0) != 0) return std::nullopt;
  std::map<std::string, std::string> fields;
  size_t i = sizeof(kPrefix) - 1;
  while (i < line.size()) {
    while (i < line.size() && line[i] == ' ') ++i;
    const size_t eq = line.find('=', i);
    if (eq == std::string::npos) break;
    std::string key = line.substr(i, eq - i);
    std::string value;
    i = eq + 1;
    if (i < line.size() && line[i] == '"') {
      const size_t close = line.find('"', i + 1);
      const size_t end = close == std::string::npos ? line.size() : close;
      value = line.substr(i + 1, end - i - 1);
      i = end + 1;
    } else {
      const size_t space = line.find(' ', i);
      const size_t end = space == std::string::npos ? line.size() : space;
      value = line.substr(i, end - i);
      i = end;
    }
    fields[std::move(key)] = std::move(value);
  }
  WorkerEvent event;
  event.kind = fields["kind"];
  if (event.kind.empty()) return std::nullopt;
  event.t_ms = 0;
  (void)absl::SimpleAtoi(fields["t_ms"], &event.t_ms);
  (void)absl::SimpleAtoi(fields["task"], &event.task);
  (void)absl::SimpleAtoi(fields["inc"], &event.incarnation);
  for (const char* known : {"t_ms", "task", "inc", "kind"}) fields.erase(known);
  event.fields = std::move(fields);
  return event;
}

}  // namespace phalanx::harness
