#include "tests/localcluster/protobuf_body.h"

#include <cstdint>
#include <map>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/kube/json.h"

namespace phalanx::localcluster {
namespace {

using kube::Json;

enum class Kind {
  kString,
  kBytes,
  kInt64,
  kBool,
  kTime,
  kMessage,
  kStrings,
  kMessages,
  kMapString,
  kMapBytes
};

struct Message;
struct Field {
  const char* name;
  Kind kind;
  const Message* message = nullptr;
};
struct Message {
  std::map<int, Field> fields;
};

// Field numbers from k8s.io/api and k8s.io/apimachinery generated.proto (v1.26).
const Message kOwnerReference{{{1, {"kind", Kind::kString}},
                               {3, {"name", Kind::kString}},
                               {4, {"uid", Kind::kString}},
                               {5, {"apiVersion", Kind::kString}},
                               {6, {"controller", Kind::kBool}},
                               {7, {"blockOwnerDeletion", Kind::kBool}}}};
const Message kObjectMeta{{{1, {"name", Kind::kString}},
                           {2, {"generateName", Kind::kString}},
                           {3, {"namespace", Kind::kString}},
                           {5, {"uid", Kind::kString}},
                           {6, {"resourceVersion", Kind::kString}},
                           {7, {"generation", Kind::kInt64}},
                           {8, {"creationTimestamp", Kind::kTime}},
                           {9, {"deletionTimestamp", Kind::kTime}},
                           {10, {"deletionGracePeriodSeconds", Kind::kInt64}},
                           {11, {"labels", Kind::kMapString}},
                           {12, {"annotations", Kind::kMapString}},
                           {13, {"ownerReferences", Kind::kMessages, &kOwnerReference}},
                           {14, {"finalizers", Kind::kStrings}}}};
const Message kNamespaceSpec{{{1, {"finalizers", Kind::kStrings}}}};
const Message kNamespace{{{1, {"metadata", Kind::kMessage, &kObjectMeta}},
                          {2, {"spec", Kind::kMessage, &kNamespaceSpec}}}};
const Message kConfigMap{{{1, {"metadata", Kind::kMessage, &kObjectMeta}},
                          {2, {"data", Kind::kMapString}},
                          {3, {"binaryData", Kind::kMapBytes}},
                          {4, {"immutable", Kind::kBool}}}};
const Message kSecret{{{1, {"metadata", Kind::kMessage, &kObjectMeta}},
                       {2, {"data", Kind::kMapBytes}},
                       {3, {"type", Kind::kString}},
                       {4, {"stringData", Kind::kMapString}},
                       {5, {"immutable", Kind::kBool}}}};
const Message kObjectReference{{{1, {"kind", Kind::kString}},
                                {2, {"namespace", Kind::kString}},
                                {3, {"name", Kind::kString}},
                                {4, {"uid", Kind::kString}},
                                {5, {"apiVersion", Kind::kString}},
                                {6, {"resourceVersion", Kind::kString}},
                                {7, {"fieldPath", Kind::kString}}}};
const Message kLocalObjectReference{{{1, {"name", Kind::kString}}}};
const Message kServiceAccount{{{1, {"metadata", Kind::kMessage, &kObjectMeta}},
                               {2, {"secrets", Kind::kMessages, &kObjectReference}},
                               {3, {"imagePullSecrets", Kind::kMessages, &kLocalObjectReference}},
                               {4, {"automountServiceAccountToken", Kind::kBool}}}};

const Message* MessageFor(const std::string& api_version, const std::string& kind) {
  if (api_version != "v1") return nullptr;
  if (kind == "Namespace") return &kNamespace;
  if (kind == "ConfigMap") return &kConfigMap;
  if (kind == "Secret") return &kSecret;
  if (kind == "ServiceAccount") return &kServiceAccount;
  return nullptr;
}

// One field of a protobuf message on the wire.
struct WireField {
  int number = 0;
  int type = 0;  // 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32
  uint64_t varint = 0;
  std::string bytes;
};

class Reader {
 public:
  explicit Reader(const std::string& data) : data_(data) {}
  bool Done() const { return pos_ >= data_.size(); }
  bool Next(WireField& f) {
    uint64_t key = 0;
    if (!Varint(key)) return false;
    f.number = static_cast<int>(key >> 3);
    f.type = static_cast<int>(key & 7);
    switch (f.type) {
      case 0:
        return Varint(f.varint);
      case 1:
        return Skip(8);
      case 5:
        return Skip(4);
      case 2: {
        uint64_t len = 0;
        if (!Varint(len) || len > data_.size() - pos_) return false;
        f.bytes = data_.substr(pos_, len);
        pos_ += len;
        return true;
      }
      default:
        return false;
    }
  }

 private:
  bool Varint(uint64_t& v) {
    v = 0;
    for (int shift = 0; shift < 64 && pos_ < data_.size(); shift += 7) {
      const auto b = static_cast<uint8_t>(data_[pos_++]);
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  }
  bool Skip(size_t n) {
    if (n > data_.size() - pos_) return false;
    pos_ += n;
    return true;
  }
  const std::string& data_;
  size_t pos_ = 0;
};

absl::Status Malformed() {
  return absl::InvalidArgumentError(
      "malformed protobuf body (application/vnd.kubernetes.protobuf)");
}

absl::StatusOr<Json> Decode(const Message& m, const std::string& data, int depth);

// A map entry {key = 1, value = 2}.
absl::Status DecodeEntry(const std::string& data, bool bytes_value, Json& map) {
  Reader r(data);
  std::string key, value;
  WireField f;
  while (!r.Done()) {
    if (!r.Next(f)) return Malformed();
    if (f.type != 2) continue;
    if (f.number == 1) key = f.bytes;
    if (f.number == 2) value = f.bytes;
  }
  map[key] = Json::string(bytes_value ? absl::Base64Escape(value) : value);
  return absl::OkStatus();
}

absl::StatusOr<Json> Decode(const Message& m, const std::string& data, int depth) {
  if (depth > 8) return Malformed();
  Json out = Json::object();
  Reader r(data);
  WireField f;
  while (!r.Done()) {
    if (!r.Next(f)) return Malformed();
    auto it = m.fields.find(f.number);
    if (it == m.fields.end()) continue;  // a field this decoder does not map: dropped
    const Field& field = it->second;
    const bool delimited = f.type == 2;
    switch (field.kind) {
      case Kind::kString:
        if (delimited) out[field.name] = Json::string(f.bytes);
        break;
      case Kind::kBytes:
        if (delimited) out[field.name] = Json::string(absl::Base64Escape(f.bytes));
        break;
      case Kind::kInt64:
        if (f.type == 0) out[field.name] = Json::number(static_cast<int64_t>(f.varint));
        break;
      case Kind::kBool:
        if (f.type == 0) out[field.name] = Json::boolean(f.varint != 0);
        break;
      case Kind::kTime: {
        if (!delimited) break;
        Reader t(f.bytes);
        WireField tf;
        int64_t seconds = 0;
        while (!t.Done()) {
          if (!t.Next(tf)) return Malformed();
          if (tf.number == 1 && tf.type == 0) seconds = static_cast<int64_t>(tf.varint);
        }
        constexpr int64_t kGoZeroTime = -62135596800;  // metav1.Time{} on the wire
        if (seconds != kGoZeroTime && seconds != 0) {
          out[field.name] = Json::string(absl::FormatTime(
              "%Y-%m-%dT%H:%M:%SZ", absl::FromUnixSeconds(seconds), absl::UTCTimeZone()));
        }
        break;
      }
      case Kind::kMessage: {
        if (!delimited) break;
        absl::StatusOr<Json> child = Decode(*field.message, f.bytes, depth + 1);
        if (!child.ok()) return child.status();
        out[field.name] = *child;
        break;
      }
      case Kind::kStrings:
        if (!delimited) break;
        if (!out.has_field(field.name)) out[field.name] = Json::array();
        out[field.name][out[field.name].size()] = Json::string(f.bytes);
        break;
      case Kind::kMessages: {
        if (!delimited) break;
        absl::StatusOr<Json> child = Decode(*field.message, f.bytes, depth + 1);
        if (!child.ok()) return child.status();
        if (!out.has_field(field.name)) out[field.name] = Json::array();
        out[field.name][out[field.name].size()] = *child;
        break;
      }
      case Kind::kMapString:
      case Kind::kMapBytes:
        if (!delimited) break;
        if (!out.has_field(field.name)) out[field.name] = Json::object();
        if (absl::Status s = DecodeEntry(f.bytes, field.kind == Kind::kMapBytes, out[field.name]);
            !s.ok()) {
          return s;
        }
        break;
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<Json> DecodeProtobufBody(const std::string& body) {
  static const std::string kMagic("k8s\0", 4);
  if (body.compare(0, kMagic.size(), kMagic) != 0) return Malformed();
  // Reader keeps a reference: hold the envelope in a named string.
  const std::string envelope = body.substr(kMagic.size());
  Reader unknown(envelope);
  std::string api_version, kind, raw;
  WireField f;
  while (!unknown.Done()) {
    if (!unknown.Next(f)) return Malformed();
    if (f.number == 1 && f.type == 2) {  // typeMeta
      Reader t(f.bytes);
      WireField tf;
      while (!t.Done()) {
        if (!t.Next(tf)) return Malformed();
        if (tf.number == 1 && tf.type == 2) api_version = tf.bytes;
        if (tf.number == 2 && tf.type == 2) kind = tf.bytes;
      }
    } else if (f.number == 2 && f.type == 2) {
      raw = f.bytes;
    }
  }
  const Message* message = MessageFor(api_version, kind);
  if (message == nullptr) {
    return absl::UnimplementedError(absl::StrCat(
        "phalanx-localcluster's built-in API server decodes protobuf bodies only for v1 Namespace, "
        "ConfigMap, Secret and ServiceAccount, not ",
        api_version, " ", kind,
        ": send JSON (e.g. kubectl create ... --dry-run=client -o yaml | kubectl apply -f -)"));
  }
  absl::StatusOr<Json> object = Decode(*message, raw, 0);
  if (!object.ok()) return object.status();
  (*object)["apiVersion"] = Json::string(api_version);
  (*object)["kind"] = Json::string(kind);
  return object;
}

}  // namespace phalanx::localcluster
