#include "common/kube/watch_decoder.h"

#include "absl/strings/str_cat.h"
#include "common/kube/api_status.h"

namespace phalanx::kube {

std::vector<WatchDecoder::Item> WatchDecoder::Feed(std::string_view chunk) {
  std::vector<Item> items;
  partial_.append(chunk);
  size_t start = 0;
  size_t newline;
  while ((newline = partial_.find('\n', start)) != std::string::npos) {
    std::string_view line(partial_.data() + start, newline - start);
    if (!line.empty() && line != "\r") items.push_back(DecodeLine(line));
    start = newline + 1;
  }
  partial_.erase(0, start);
  if (partial_.size() > kMaxLineBytes) {
    partial_.clear();
    items.push_back({absl::ResourceExhaustedError("watch event larger than 64 MiB"), {}});
  }
  return items;
}

WatchDecoder::Item WatchDecoder::DecodeLine(std::string_view line) {
  Item item;
  web::json::value json;
  // cpprestsdk throws on malformed JSON; nothing may escape this file.
  try {
    json = web::json::value::parse(std::string(line));
  } catch (const std::exception& e) {
    item.status = absl::InvalidArgumentError(absl::StrCat("malformed watch event: ", e.what()));
    return item;
  }
  if (!json.is_object() || !json.has_field("type") || !json.at("type").is_string() ||
      !json.has_field("object") || !json.at("object").is_object()) {
    item.status = absl::InvalidArgumentError("watch event without a type and an object");
    return item;
  }
  const std::string type = json.at("type").as_string();
  const web::json::value& object = json.at("object");
  if (type == "ERROR") {
    int code = 500;
    if (object.has_field("code") && object.at("code").is_integer())
      code = object.at("code").as_integer();
    item.status = StatusFromResponse(code, object.serialize(), "watch");
    // An ERROR event is an error whatever code its Status claims: one saying 2xx (or a number that
    // truncates to it) must not read as an event with no type.
    if (item.status.ok()) {
      item.status = StatusFromResponse(500, object.serialize(), "watch ERROR event");
    }
    return item;
  }
  if (type != "ADDED" && type != "MODIFIED" && type != "DELETED" && type != "BOOKMARK") {
    item.status = absl::InvalidArgumentError(absl::StrCat("unknown watch event type '", type, "'"));
    return item;
  }
  item.event.type = type;
  item.event.object = object;
  if (object.has_field("metadata") && object.at("metadata").is_object() &&
      object.at("metadata").has_field("resourceVersion") &&
      object.at("metadata").at("resourceVersion").is_string()) {
    item.event.resource_version = object.at("metadata").at("resourceVersion").as_string();
  }
  return item;
}

}  // namespace phalanx::kube
