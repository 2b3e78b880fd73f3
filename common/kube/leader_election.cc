#include "common/kube/leader_election.h"

#include <functional>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/log.h"
#include "common/kube/object_meta.h"

namespace phalanx::kube {
namespace {

constexpr double kJitterFactor = 1.2;  // client-go's: candidates retry within [1, 1.2]·period

const Json* SpecField(const Json& lease, const char* field) {
  if (!lease.is_object() || !lease.has_field("spec")) return nullptr;
  const Json& spec = lease.at("spec");
  if (!spec.is_object() || !spec.has_field(field)) return nullptr;
  return &spec.at(field);
}

std::string SpecString(const Json& lease, const char* field) {
  const Json* v = SpecField(lease, field);
  return v != nullptr && v->is_string() ? v->as_string() : "";
}

int64_t SpecInt(const Json& lease, const char* field) {
  const Json* v = SpecField(lease, field);
  return v != nullptr && v->is_number() ? v->as_number().to_int64() : 0;
}

Json SpecOf(const Json& lease) {
  return lease.is_object() && lease.has_field("spec") ? lease.at("spec") : Json::object();
}

}  // namespace

std::string FormatMicroTime(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", t, absl::UTCTimeZone());
}

LeaderElectionRecord LeaderElectionRecord::FromLease(const Json& lease) {
  LeaderElectionRecord r;
  r.holder_identity = SpecString(lease, "holderIdentity");
  r.lease_duration_seconds = SpecInt(lease, "leaseDurationSeconds");
  r.acquire_time = ParseKubeTime(SpecString(lease, "acquireTime"));
  r.renew_time = ParseKubeTime(SpecString(lease, "renewTime"));
  r.lease_transitions = SpecInt(lease, "leaseTransitions");
  return r;
}

void LeaderElectionRecord::EncodeInto(Json& lease) const {
  Json& spec = lease["spec"];
  if (!spec.is_object()) spec = Json::object();
  spec["holderIdentity"] = Json::string(holder_identity);
  spec["leaseDurationSeconds"] = Json::number(lease_duration_seconds);
  if (acquire_time) spec["acquireTime"] = Json::string(FormatMicroTime(*acquire_time));
  if (renew_time) spec["renewTime"] = Json::string(FormatMicroTime(*renew_time));
  spec["leaseTransitions"] = Json::number(lease_transitions);
}

absl::Status LeaderElector::Validate(const Options& o) {
  if (o.lease_name.empty() || o.lease_namespace.empty()) {
    return absl::InvalidArgumentError("leader election: lease name and namespace are required");
  }
  if (o.identity.empty()) {
    return absl::InvalidArgumentError(
        "leader election: identity is required (use the pod name or hostname)");
  }
  if (o.retry_period <= absl::ZeroDuration() || o.lease_duration < absl::Seconds(1)) {
    return absl::InvalidArgumentError(
        "leader election: retry_period must be > 0 and lease_duration at least 1s");
  }
  if (o.lease_duration <= o.renew_deadline) {
    return absl::InvalidArgumentError(absl::StrCat(
        "leader election: lease_duration (", absl::FormatDuration(o.lease_duration),
        ") must be greater than renew_deadline (", absl::FormatDuration(o.renew_deadline), ")"));
  }
  if (o.renew_deadline <= o.retry_period * kJitterFactor) {
    return absl::InvalidArgumentError(absl::StrCat(
        "leader election: renew_deadline (", absl::FormatDuration(o.renew_deadline),
        ") must be greater than 1.2 × retry_period (", absl::FormatDuration(o.retry_period), ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<LeaderElector>> LeaderElector::Create(Client& client,
                                                                     base::Clock& clock,
                                                                     Options options) {
  if (absl::Status s = Validate(options); !s.ok()) return s;
  return std::make_unique<LeaderElector>(client, clock, std::move(options));
}

LeaderElector::LeaderElector(Client& client, base::Clock& clock, Options options)
    : client_(client), clock_(clock), options_(std::move(options)) {}

LeaderElector::~LeaderElector() { Stop(); }

Json LeaderElector::NewLease(const LeaderElectionRecord& record) const {
  Json lease = Json::object();
  lease["apiVersion"] = Json::string("coordination.k8s.io/v1");
  lease["kind"] = Json::string("Lease");
  ObjectMeta{.name = options_.lease_name,
             .namespace_ = options_.lease_namespace,
             .owner_references = options_.owner_references}
      .EncodeInto(lease);
  record.EncodeInto(lease);
  return lease;
}

absl::StatusOr<bool> LeaderElector::TryAcquireOrRenew() {
  const absl::Time now = clock_.Now();
  LeaderElectionRecord desired{
      .holder_identity = options_.identity,
      .lease_duration_seconds = absl::ToInt64Seconds(options_.lease_duration),
      .acquire_time = now,
      .renew_time = now,
      .lease_transitions = 0};

  absl::StatusOr<Json> current =
      client_.Get(kLeaseResource, options_.lease_namespace, options_.lease_name);
  if (!current.ok() && !absl::IsNotFound(current.status())) return current.status();
  if (!current.ok()) {
    absl::StatusOr<Json> created =
        client_.Create(kLeaseResource, options_.lease_namespace, NewLease(desired));
    if (!created.ok()) {
      if (absl::IsAlreadyExists(created.status()) || absl::IsAborted(created.status())) {
        return false;  // another candidate created it first
      }
      return created.status();
    }
    absl::MutexLock lock(&mu_);
    observed_record_ = desired;
    observed_spec_ = SpecOf(*created);
    observed_time_ = now;
    last_renew_ = now;
    return true;
  }

  const LeaderElectionRecord old = LeaderElectionRecord::FromLease(*current);
  {
    absl::MutexLock lock(&mu_);
    const Json old_spec = SpecOf(*current);
    if (!(old_spec == observed_spec_)) {
      // Expiry counts from when WE saw the record change, not from its renewTime: the
      // holder's clock may be skewed from ours.
      observed_spec_ = old_spec;
      observed_record_ = old;
      observed_time_ = now;
    }
    const absl::Duration duration = old.lease_duration_seconds > 0
                                        ? absl::Seconds(old.lease_duration_seconds)
                                        : options_.lease_duration;
    if (!old.holder_identity.empty() && old.holder_identity != options_.identity &&
        observed_time_ + duration > now) {
      return false;  // held by another and not expired
    }
  }
  if (old.holder_identity == options_.identity) {
    desired.acquire_time = old.acquire_time;
    desired.lease_transitions = old.lease_transitions;
  } else {
    desired.lease_transitions = old.lease_transitions + 1;
  }
  Json updated = *current;  // keeps metadata.resourceVersion: the write is a compare-and-swap
  desired.EncodeInto(updated);
  absl::StatusOr<Json> written = client_.Update(kLeaseResource, options_.lease_namespace, updated);
  if (!written.ok()) {
    if (absl::IsAborted(written.status())) return false;  // 409: another candidate won
    return written.status();
  }
  absl::MutexLock lock(&mu_);
  if (old.holder_identity != options_.identity) {
    PHX_LOG(INFO) << "leader election: " << options_.identity << " acquired lease "
                  << options_.lease_namespace << "/" << options_.lease_name << " (was \""
                  << old.holder_identity << "\", transitions " << desired.lease_transitions << ")";
  }
  observed_record_ = desired;
  observed_spec_ = SpecOf(*written);
  observed_time_ = now;
  last_renew_ = now;
  return true;
}

bool LeaderElector::IsLeader() const {
  absl::MutexLock lock(&mu_);
  // Conservative: past renew_deadline without a renewal another candidate may be about to
  // take over, so we no longer claim to lead.
  return observed_record_.holder_identity == options_.identity &&
         clock_.Now() < last_renew_ + options_.renew_deadline;
}

std::string LeaderElector::ObservedHolder() const {
  absl::MutexLock lock(&mu_);
  return observed_record_.holder_identity;
}

absl::Status LeaderElector::Release() {
  {
    absl::MutexLock lock(&mu_);
    if (observed_record_.holder_identity != options_.identity) return absl::OkStatus();
  }
  absl::StatusOr<Json> current =
      client_.Get(kLeaseResource, options_.lease_namespace, options_.lease_name);
  if (absl::IsNotFound(current.status())) return absl::OkStatus();
  if (!current.ok()) return current.status();
  const LeaderElectionRecord old = LeaderElectionRecord::FromLease(*current);
  if (old.holder_identity != options_.identity) return absl::OkStatus();
  const absl::Time now = clock_.Now();
  // As client-go: no holder, a 1 s duration, transitions kept; a candidate takes it at once.
  const LeaderElectionRecord released{.holder_identity = "",
                                      .lease_duration_seconds = 1,
                                      .acquire_time = now,
                                      .renew_time = now,
                                      .lease_transitions = old.lease_transitions};
  Json updated = *current;
  released.EncodeInto(updated);
  absl::StatusOr<Json> written = client_.Update(kLeaseResource, options_.lease_namespace, updated);
  if (!written.ok()) return written.status();
  PHX_LOG(INFO) << "leader election: " << options_.identity << " released lease "
                << options_.lease_namespace << "/" << options_.lease_name;
  absl::MutexLock lock(&mu_);
  observed_record_ = released;
  observed_spec_ = SpecOf(*written);
  observed_time_ = now;
  return absl::OkStatus();
}

void LeaderElector::Run(std::function<void()> on_started_leading,
                        std::function<void()> on_stopped_leading) {
  absl::MutexLock run_lock(&run_mu_);
  {
    absl::MutexLock lock(&mu_);
    if (stopping_ || thread_.joinable()) return;
  }
  on_started_leading_ = std::move(on_started_leading);
  on_stopped_leading_ = std::move(on_stopped_leading);
  thread_ = std::thread([this] { Loop(); });
}

bool LeaderElector::SleepUnlessStopped(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&stopping_), d);
  return !stopping_;
}

void LeaderElector::Loop() {
  std::minstd_rand rng(static_cast<uint32_t>(std::hash<std::string>()(options_.identity)));
  std::uniform_real_distribution<double> jitter(1.0, kJitterFactor);
  while (true) {
    // Candidate: try every retry_period (jittered so candidates do not move in lockstep).
    while (true) {
      absl::StatusOr<bool> acquired = TryAcquireOrRenew();
      if (acquired.ok() && *acquired) break;
      if (!acquired.ok()) {
        PHX_LOG(WARNING) << "leader election: " << options_.identity
                         << " could not acquire the lease: " << acquired.status();
      }
      if (!SleepUnlessStopped(options_.retry_period * jitter(rng))) return;
    }
    {
      absl::MutexLock lock(&mu_);
      leading_ = true;
    }
    PHX_LOG(INFO) << "leader election: " << options_.identity << " started leading";
    if (on_started_leading_) on_started_leading_();

    // Leader: renew every retry_period; lost when no renewal succeeds for renew_deadline, or
    // at once when another candidate is seen holding the lease.
    while (true) {
      if (!SleepUnlessStopped(options_.retry_period)) return;  // Stop() ends leadership
      absl::StatusOr<bool> renewed = TryAcquireOrRenew();
      if (renewed.ok() && *renewed) continue;
      bool lost = renewed.ok();
      {
        absl::MutexLock lock(&mu_);
        lost = lost || clock_.Now() >= last_renew_ + options_.renew_deadline;
      }
      PHX_LOG(WARNING) << "leader election: " << options_.identity << " failed to renew: "
                       << (renewed.ok() ? "held by another" : renewed.status().ToString());
      if (lost) break;
    }
    {
      absl::MutexLock lock(&mu_);
      leading_ = false;
    }
    PHX_LOG(WARNING) << "leader election: " << options_.identity << " lost leadership";
    if (on_stopped_leading_) on_stopped_leading_();
  }
}

void LeaderElector::Stop() {
  absl::MutexLock run_lock(&run_mu_);
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
  bool was_leading;
  {
    absl::MutexLock lock(&mu_);
    was_leading = leading_;
    leading_ = false;
  }
  // Stop the leader's work first, then let a successor in: the two never overlap.
  if (was_leading && on_stopped_leading_) on_stopped_leading_();
  if (absl::Status s = Release(); !s.ok()) {
    PHX_LOG(WARNING) << "leader election: " << options_.identity
                     << " could not release the lease: " << s;
  }
}

}  // namespace phalanx::kube
