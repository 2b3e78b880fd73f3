// An OCI image archive (the image-layout tar `ctr images import` and `buildah pull
// oci-archive:` read) built in memory from a few files: one uncompressed layer, a config with
// the entrypoint, a manifest and an index naming the image. The real-node back end makes its
// pod sandbox ("pause") image this way, so starting nodes needs no image builder and no
// registry. Pure functions; thread-safe.
#pragma once

#include <string>
#include <vector>

namespace phalanx::localcluster {

struct ImageFile {
  std::string path;  // inside the image, relative ("pause")
  std::string content;
  int mode = 0755;
};

struct ImageSpec {
  std::string name;  // "localhost/phalanx-pause:1" (org.opencontainers.image.ref.name)
  std::vector<ImageFile> files;
  std::vector<std::string> entrypoint;
  std::string user;  // "65532:65532"; empty: the runtime's default (root)
};

// The archive's bytes (a POSIX ustar stream).
std::string OciArchive(const ImageSpec& image);

// One ustar member: header + content padded to 512 bytes (mode, size; uid/gid 0, mtime 0).
std::string TarEntry(const std::string& path, const std::string& content, int mode);
// Two zero blocks: the end of a tar stream.
std::string TarEnd();

}  // namespace phalanx::localcluster
