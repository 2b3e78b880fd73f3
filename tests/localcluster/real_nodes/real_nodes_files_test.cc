// The real-node back end's pure parts: the sandbox image archive (read back by the system's
// tar, as containerd's importer reads it), the host-change record, and the node layout and
// configuration facts verified on these machines (../shared/kubernetes-v1.28.7/README.md).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "common/process/subprocess.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/localcluster/real_nodes/host_changes.h"
#include "tests/localcluster/real_nodes/node_config.h"
#include "tests/localcluster/real_nodes/oci_archive.h"

namespace phalanx::localcluster {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

// `tar ARGS` on `archive`, its stdout lines.
std::vector<std::string> Tar(const std::vector<std::string>& args) {
  process::SubprocessOptions o;
  o.argv = {"/bin/tar"};
  o.argv.insert(o.argv.end(), args.begin(), args.end());
  auto p = process::Subprocess::Start(o);
  EXPECT_TRUE(p.ok());
  EXPECT_TRUE((*p)->Wait(absl::Seconds(30)).has_value());
  EXPECT_EQ((*p)->ExitCode(), 0) << "tar " << absl::StrJoin(args, " ");
  return (*p)->Lines();
}

TEST(OciArchive, SystemTarReadsTheLayoutAndTheLayerHoldsTheFiles) {
  ImageSpec image;
  image.name = "localhost/phalanx-pause:1";
  image.files.push_back({"pause", std::string(70000, 'x'), 0755});  // more than one block
  image.entrypoint = {"/pause"};
  const std::string dir = ::testing::TempDir() + "/oci-archive-test";
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/image.tar";
  std::ofstream(path, std::ios::binary) << OciArchive(image);

  std::vector<std::string> members = Tar({"-tf", path});
  ASSERT_EQ(members.size(), 5u);
  EXPECT_EQ(members[0], "oci-layout");
  EXPECT_EQ(members[1], "index.json");
  for (size_t i = 2; i < members.size(); ++i) EXPECT_THAT(members[i], HasSubstr("blobs/sha256/"));
  std::vector<std::string> index = Tar({"-xOf", path, "index.json"});
  ASSERT_EQ(index.size(), 1u);
  EXPECT_THAT(index[0],
              HasSubstr("\"org.opencontainers.image.ref.name\":\"localhost/phalanx-pause:1\""));

  // Every blob's name is its own sha256 (what an importer verifies).
  for (size_t i = 2; i < members.size(); ++i) {
    process::SubprocessOptions o;
    o.argv = {"/bin/sh", "-c", "tar -xOf '" + path + "' '" + members[i] + "' | sha256sum"};
    auto p = process::Subprocess::Start(o);
    ASSERT_TRUE(p.ok());
    (*p)->Wait(absl::Seconds(30));
    ASSERT_FALSE((*p)->Lines().empty());
    EXPECT_EQ("blobs/sha256/" + (*p)->Lines()[0].substr(0, 64), members[i]);
  }
  // The layer (the biggest blob) is a tar holding the file with its mode.
  Tar({"-xf", path, "-C", dir});
  std::string layer;
  uintmax_t biggest = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir + "/blobs/sha256")) {
    if (e.file_size() > biggest) biggest = e.file_size(), layer = e.path().string();
  }
  std::vector<std::string> listing = Tar({"-tvf", layer});
  ASSERT_EQ(listing.size(), 1u);
  EXPECT_THAT(listing[0], HasSubstr("-rwxr-xr-x"));
  EXPECT_THAT(listing[0], HasSubstr("70000"));
  EXPECT_TRUE(absl::EndsWith(listing[0], " pause"));
  std::filesystem::remove_all(dir);
}

TEST(HostRecord, FormatsAndParsesBack) {
  HostRecord record;
  record.owner = 4242;
  record.work_dir = "/tmp/phalanx-localcluster-abc";
  record.sysctls = {{"net/ipv4/ip_forward", "0"}, {"kernel/panic", "10"}};
  record.created_dirs = {"/var/run/phalanx"};
  absl::StatusOr<HostRecord> parsed = ParseHostRecord(FormatHostRecord(record));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->owner, 4242);
  EXPECT_EQ(parsed->work_dir, record.work_dir);
  EXPECT_EQ(parsed->sysctls, record.sysctls);
  EXPECT_THAT(parsed->created_dirs, ElementsAre("/var/run/phalanx"));
}

TEST(HostRecord, GarbageIsRefusedNotGuessed) {
  EXPECT_FALSE(ParseHostRecord("owner 1\n").ok());  // no work_dir: nothing to undo safely
  EXPECT_FALSE(ParseHostRecord("owner 1\nwork_dir relative/path\n").ok());
  EXPECT_FALSE(ParseHostRecord("owner 1\nwork_dir /x\nrm -rf /\n").ok());
  EXPECT_FALSE(ParseHostRecord(std::string("\0\xff", 2)).ok());
}

TEST(NodeLayout, EachNodeHasItsOwnSubnetAddressBridgeAndCgroupRoot) {
  const NodeLayout a = LayOutNode("/w", 0), b = LayOutNode("/w", 7);
  EXPECT_EQ(b.name, "node-7");
  EXPECT_EQ(b.pod_subnet, "10.244.7.0/24");
  EXPECT_EQ(b.address, "10.244.7.1");
  EXPECT_EQ(b.bridge, "phx-node7");
  EXPECT_LE(LayOutNode("/w", 199).bridge.size(), 15u);  // IFNAMSIZ
  EXPECT_EQ(b.cgroup_root, "phalanx-node-7");
  EXPECT_NE(a.containerd_socket(), b.containerd_socket());
  EXPECT_EQ(b.host_path("/var/log/pods"), "/w/nodes/node-7/host/var/log/pods");
}

TEST(NodeConfig, CarriesWhatThisMachineNeeds) {
  NodeLayout node = LayOutNode("/w", 1);
  node.kubelet_port = 10250;
  const std::string containerd = ContainerdConfig(node, "localhost/phalanx-pause:1");
  EXPECT_THAT(containerd, HasSubstr("restrict_oom_score_adj = true"));  // no CAP_SYS_RESOURCE
  EXPECT_THAT(containerd, HasSubstr("snapshotter = \"native\""));
  EXPECT_THAT(containerd, HasSubstr("sandbox_image = \"localhost/phalanx-pause:1\""));
  const std::string kubelet = KubeletConfig(node, "/w/ca.crt");
  EXPECT_THAT(kubelet, HasSubstr("cgroupRoot: /phalanx-node-1"));
  EXPECT_THAT(kubelet, HasSubstr("oomScoreAdj: 0"));
  EXPECT_THAT(kubelet, HasSubstr("address: 10.244.1.1"));
  EXPECT_THAT(kubelet, HasSubstr("clusterDNS: [10.244.1.1]"));
  EXPECT_THAT(kubelet, HasSubstr("anonymous: {enabled: false}"));
  EXPECT_THAT(CniNetwork(node), HasSubstr("\"hairpinMode\": true"));
  const std::string corefile = Corefile({LayOutNode("/w", 0), node}, "/w/dns.kubeconfig");
  EXPECT_THAT(corefile, HasSubstr("bind 10.244.0.1 10.244.1.1"));
  EXPECT_THAT(corefile, HasSubstr("kubernetes cluster.local"));
}

}  // namespace
}  // namespace phalanx::localcluster
