#include "tests/localcluster/real_nodes/oci_archive.h"

#include <openssl/sha.h>

#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace phalanx::localcluster {
namespace {

std::string Sha256Hex(const std::string& data) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), digest);
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(digest), sizeof(digest)));
}

// `value` as a zero-padded octal field of `width` bytes (width-1 digits and a NUL).
void Octal(char* field, size_t width, unsigned long long value) {
  std::snprintf(field, width, "%0*llo", static_cast<int>(width - 1), value);
}

std::string Quoted(const std::string& s) { return absl::StrCat("\"", absl::CEscape(s), "\""); }

std::string Descriptor(const std::string& media_type, const std::string& blob,
                       const std::string& extra = "") {
  return absl::StrCat("{\"mediaType\":", Quoted(media_type),
                      ",\"digest\":\"sha256:", Sha256Hex(blob), "\",\"size\":", blob.size(), extra,
                      "}");
}

}  // namespace

std::string TarEntry(const std::string& path, const std::string& content, int mode) {
  char header[512];
  std::memset(header, 0, sizeof(header));
  std::strncpy(header, path.c_str(), 99);
  Octal(header + 100, 8, static_cast<unsigned>(mode));
  Octal(header + 108, 8, 0);  // uid
  Octal(header + 116, 8, 0);  // gid
  Octal(header + 124, 12, content.size());
  Octal(header + 136, 12, 0);  // mtime: reproducible
  header[156] = '0';           // a regular file
  std::memcpy(header + 257, "ustar", 6);
  std::memcpy(header + 263, "00", 2);
  // The checksum is computed with its own field as spaces.
  std::memset(header + 148, ' ', 8);
  unsigned sum = 0;
  for (unsigned char c : header) sum += c;
  std::snprintf(header + 148, 8, "%06o", sum);
  header[155] = ' ';
  std::string out(header, sizeof(header));
  out += content;
  out.append((512 - content.size() % 512) % 512, '\0');
  return out;
}

std::string TarEnd() { return std::string(1024, '\0'); }

std::string OciArchive(const ImageSpec& image) {
  std::string layer;
  for (const ImageFile& f : image.files) layer += TarEntry(f.path, f.content, f.mode);
  layer += TarEnd();

  std::vector<std::string> entrypoint;
  for (const std::string& arg : image.entrypoint) entrypoint.push_back(Quoted(arg));
  const std::string config = absl::StrCat(
      "{\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":{\"Entrypoint\":[",
      absl::StrJoin(entrypoint, ","), "]",
      image.user.empty() ? "" : ",\"User\":" + Quoted(image.user),
      "},\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"sha256:", Sha256Hex(layer), "\"]}}");
  const std::string manifest = absl::StrCat(
      "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\","
      "\"config\":",
      Descriptor("application/vnd.oci.image.config.v1+json", config), ",\"layers\":[",
      Descriptor("application/vnd.oci.image.layer.v1.tar", layer), "]}");
  const std::string index = absl::StrCat(
      "{\"schemaVersion\":2,\"manifests\":[",
      Descriptor("application/vnd.oci.image.manifest.v1+json", manifest,
                 absl::StrCat(",\"annotations\":{\"org.opencontainers.image.ref.name\":",
                              Quoted(image.name), "}")),
      "]}");

  std::string out;
  out += TarEntry("oci-layout", "{\"imageLayoutVersion\":\"1.0.0\"}", 0644);
  out += TarEntry("index.json", index, 0644);
  for (const std::string* blob : {&std::as_const(layer), &config, &manifest}) {
    out += TarEntry("blobs/sha256/" + Sha256Hex(*blob), *blob, 0644);
  }
  out += TarEnd();
  return out;
}

}  // namespace phalanx::localcluster
