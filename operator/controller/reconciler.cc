#include "operator/controller/reconciler.h"

#include <functional>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/auth/clique_ticket.h"
#include "common/auth/credentials.h"
#include "common/base/log.h"
#include "common/kube/object_key.h"
#include "common/kube/object_meta.h"
#include "operator/api/codec.h"
#include "operator/api/validation.h"
#include "operator/controller/blocked.h"
#include "operator/controller/children.h"
#include "operator/controller/observe.h"
#include "operator/controller/plan.h"

namespace phalanx::op {
namespace {

// Pods by the gRPC port of the coordinator they run (port-hash mode only: PlacementFor).
constexpr char kCoordinatorPortIndex[] = "coordinator-port";
// How long a pass skipped for a cache behind the operator's own write waits, should the write's
// watch event never wake the job (it normally does within milliseconds).
constexpr absl::Duration kOwnWriteWait = absl::Seconds(1);

bool IsOwnedBy(const Json& object, const std::string& uid) {
  std::optional<kube::OwnerReference> owner = kube::ControllerOf(object);
  return owner.has_value() && owner->uid == uid;
}

// Whether the cache holds `name` and this job (`uid`) is its controller. An object of that name
// controlled by anyone else (nobody, another job, an earlier job of the same name) is not the
// job's: the planner treats it as missing and the create that follows reports the conflict.
bool OwnedIn(const kube::Informer& informer, const std::string& ns, const std::string& name,
             const std::string& uid) {
  std::optional<Json> object = informer.Get(ns, name);
  return object.has_value() && IsOwnedBy(*object, uid);
}

// Who controls `object`, for a conflict's message.
std::string ControllerName(const Json& object) {
  std::optional<kube::OwnerReference> owner = kube::ControllerOf(object);
  if (!owner.has_value()) return "it has no controller";
  return absl::StrCat("its controller is ", owner->kind, " ", owner->name, " (uid ", owner->uid,
                      ")");
}

}  // namespace

Reconciler::Reconciler(kube::Client& client, Informers informers, kube::EventRecorder& events,
                       base::Clock& clock, OperatorMetrics* metrics, ReconcilerOptions options,
                       CoordinatorLink* link)
    : client_(client),
      informers_(informers),
      events_(events),
      clock_(clock),
      metrics_(metrics),
      options_(std::move(options)),
      agent_clique_key_(options_.agent_clique_port > 0 && !options_.operator_key.empty()
                            ? auth::AgentCliqueKey(options_.operator_key)
                            : ""),
      link_(link) {
  if (options_.coordinator_port_base > 0) {
    ports_.emplace(options_.coordinator_port_base, options_.coordinator_port_span);
    informers_.pods.AddIndex(kCoordinatorPortIndex, [](const Json& pod) {
      std::vector<std::string> port;
      if (kube::LabelsOf(pod)[kRoleLabel] != "coordinator") return port;
      if (const int grpc_port = ViewOfPod(pod).grpc_port; grpc_port > 0) {
        port.push_back(std::to_string(grpc_port));
      }
      return port;
    });
  }
}

std::string Reconciler::TokenOf(const std::string& ns, const std::string& job,
                                const std::string& uid) const {
  return auth::JobToken(options_.operator_key, ns, job, uid);
}

CoordinatorPlacement Reconciler::PlacementFor(const std::string& key, const Json& job,
                                              const JobObservation& world) {
  CoordinatorPlacement placement = options_.placement;
  if (!ports_.has_value()) return placement;
  if (world.coordinator.has_value() && world.coordinator->grpc_port > 0) {
    placement.port = world.coordinator->grpc_port;
    ports_->Keep(key, placement.port);
    return placement;
  }
  // The ports other coordinator pods hold (this job's has none, or it was kept above). From an
  // index: copying every cached pod here made each pass O(pods), the operator's creation of
  // 1,000 jobs O(jobs²) (issue 33).
  std::set<int> taken;
  for (const std::string& port : informers_.pods.IndexValues(kCoordinatorPortIndex)) {
    taken.insert(std::stoi(port));
  }
  placement.port = ports_->Assign(key, kube::MetaString(job, "uid"), taken);
  return placement;
}

JobObservation Reconciler::ObserveChildren(const Json& job) const {
  const std::string ns = kube::MetaString(job, "namespace");
  const std::string name = kube::MetaString(job, "name");
  const std::string uid = kube::MetaString(job, "uid");
  JobObservation world;
  for (const Json& pod : informers_.pods.ByIndex(kube::Informer::kOwnerIndex, uid)) {
    if (!IsOwnedBy(pod, uid)) continue;
    PodView view = ViewOfPod(pod);
    const std::string role = kube::LabelsOf(pod)[kRoleLabel];
    if (role == "coordinator") {
      world.coordinator = view;
    } else if (role == "task") {
      world.task_pods.push_back(view);
    } else if (role == "spare") {
      world.spare_pods.push_back(view);
    } else {
      continue;
    }
    // The nodes of the job's pods under a notice: their tasks checkpoint and move, their
    // coordinator moves (coordinator_move.h).
    if (!view.node.empty()) {
      std::optional<Json> node = informers_.nodes.Get("", view.node);
      if (node.has_value() && NodeIsBeingPreempted(*node)) {
        world.preempting_nodes[view.node] = NodePreemptionDeadline(*node);
      }
    }
  }
  // A coordinator pod is about to be created: it must avoid every node under a notice, not only
  // the job's (a scan of the node cache, only in the rare pass that creates one).
  if (!world.coordinator.has_value()) {
    for (const Json& node : informers_.nodes.List()) {
      if (NodeIsBeingPreempted(node)) {
        world.preempting_nodes[kube::MetaString(node, "name")] = NodePreemptionDeadline(node);
      }
    }
  }
  world.has_secret = world.has_network_policy = world.coordinator.has_value();
  world.has_tasks_service = OwnedIn(informers_.services, ns, TasksServiceName(name), uid);
  world.has_coordinator_service = OwnedIn(informers_.services, ns, CoordinatorName(name), uid);
  return world;
}

absl::StatusOr<kube::Controller::Result> Reconciler::Reconcile(const std::string& key) {
  const absl::Time started = clock_.Now();
  auto [ns, name] = kube::SplitKey(key);
  std::optional<Json> cached = informers_.jobs.Get(ns, name);
  if (!cached.has_value()) {  // deleted: owner references clean up the children
    own_writes_.Forget(key);
    if (link_ != nullptr) link_->Forget(key);
    notices_.Forget(key);
    if (ports_.has_value()) ports_->Release(key);
    return kube::Controller::Result{};
  }
  const Json& job = *cached;
  if (kube::IsBeingDeleted(job)) return kube::Controller::Result{};
  // The cache still holds a job this operator's own status write replaced: a pass now would be
  // refused (409). That write's watch event wakes the job; the requeue only guards its loss.
  if (own_writes_.CacheLags(key, kube::MetaString(job, "resourceVersion"))) {
    return kube::Controller::Result{.requeue_after = kOwnWriteWait};
  }

  const TrainingJobStatus stored = DecodeStatus(job);  // the only decode of it this pass
  TrainingJobStatus previous = stored;
  absl::StatusOr<TrainingJobSpec> spec = DecodeSpec(job);
  std::vector<std::string> problems = ValidateName(name);
  if (!spec.ok()) {
    problems.push_back(std::string(spec.status().message()));
  } else {
    for (std::string& p : ValidateSpec(*spec)) problems.push_back(std::move(p));
  }
  if (!problems.empty()) {
    absl::Status reported = ReportInvalidSpec(job, stored, problems);
    if (!reported.ok()) return reported;
    return kube::Controller::Result{};  // until a new generation
  }
  // The job's generation, not the last observed one: otherwise a new job's second pass rewrites
  // the condition (0 -> 1), one status write and watch event for nothing.
  SetCondition(previous.conditions,
               {kConditionInvalidSpec, "False", "Valid", "", clock_.Now(),
                kube::ObjectMeta::Decode(job).generation},
               clock_.Now());

  JobObservation world = ObserveChildren(job);
  const CoordinatorPlacement placement = PlacementFor(key, job, world);
  // A job told to suspend stays linked until it is Suspended: its tasks checkpoint first, through
  // the coordinator (suspend_policy.h).
  const bool active = previous.phase != kPhaseSucceeded && previous.phase != kPhaseFailed &&
                      !(spec->suspend && previous.phase == kPhaseSuspended);
  if (link_ != nullptr && !active) link_->Forget(key);
  if (!active) notices_.Forget(key);
  // The coordinator pod the link talks to this pass ("" while none runs).
  const std::string linked =
      link_ != nullptr && active ? LinkCoordinator(key, job, *spec, placement, world) : "";
  // The link wakes the job when the coordinator first answers (coordinator_link.h).
  world.coordinator_unproven =
      options_.task_pods_wait_for_coordinator && link_ != nullptr && !world.rolled_back.has_value();
  absl::StatusOr<std::optional<JobTlsFiles>> tls_files =
      TlsFilesFor(job, previous, placement, world, active);
  if (!tls_files.ok()) return tls_files.status();  // retried with back-off
  ReconcilePlan plan = PlanReconcile({job, *spec, previous, world, placement,
                                      TokenOf(ns, name, kube::MetaString(job, "uid")), clock_.Now(),
                                      options_.network_policy ? &*options_.network_policy : nullptr,
                                      options_.agent_clique_port, agent_clique_key_,
                                      tls_files->has_value() ? &**tls_files : nullptr});
  // Status first: it records the new incarnations and counters, so a pass that loses the race
  // with another writer (409) or dies half-way is redone from the record, never double-counted
  // and never lost. Acting on a stale view is impossible: a stale job fails this write.
  absl::StatusOr<Json> written = WriteStatus(job, stored, plan.status);
  if (!written.ok()) return written.status();
  if (metrics_ != nullptr) {
    // Booked once, by the write that recorded it (a 409 above returns before this).
    metrics_->Goodput(plan.status.productive_seconds - previous.productive_seconds,
                      plan.status.lost_seconds - previous.lost_seconds);
  }
  // What the API server refused shows on the job: ChildrenReady, an Event, maybe Blocked. A
  // second status write only when that changed anything (a retry that fails the same way
  // writes nothing, so it does not wake itself up through the watch).
  std::vector<ChildFailure> failures = Execute(job, *spec, plan);
  // The replacements exist now; what follows (credentials, a second status write, events) is
  // not in their latency.
  const absl::Duration until_created = clock_.Now() - started;
  if (plan.status.incarnation_bound_credentials.value_or(false) && failures.empty()) {
    if (absl::Status caught_up = CatchUpTaskCredentials(job, *spec, world); !caught_up.ok()) {
      failures.push_back({false, "Secret", "task credentials", caught_up});
    }
  }
  const bool acted = !plan.create.empty() || !plan.delete_pods.empty() || !plan.relabel.empty();
  StageResult outcome = RecordChildOutcome(plan.status, failures, acted, clock_.Now());
  absl::Status executed =
      failures.empty() ? absl::OkStatus() : failures.front().status;  // requeue with back-off
  if (absl::StatusOr<Json> again = WriteStatus(*written, plan.status, outcome.status);
      !again.ok() && executed.ok()) {
    executed = again.status();
  }
  absl::Duration requeue_after = plan.requeue_after;
  std::vector<EventNote> delivered;
  if (link_ != nullptr && active &&
      !DeliverPreemptionNotices(key, linked, spec->nproc_per_node, plan.notices, delivered)) {
    constexpr absl::Duration kNoticeRetry = absl::Seconds(1);
    requeue_after = requeue_after == absl::ZeroDuration() ? kNoticeRetry
                                                          : std::min(requeue_after, kNoticeRetry);
  }
  RecordEvents(job, plan.events);
  RecordEvents(job, outcome.events);
  RecordEvents(job, delivered);
  if (metrics_ != nullptr) RecordReplacements(plan, executed.ok(), until_created);
  if (!executed.ok()) return executed;
  if (plan.delete_job) {
    if (absl::Status deleted = DeleteFinishedJob(job); !deleted.ok()) return deleted;
    return kube::Controller::Result{};  // gone: its delete event ends the key
  }
  return kube::Controller::Result{requeue_after};
}

absl::StatusOr<std::optional<JobTlsFiles>> Reconciler::TlsFilesFor(
    const Json& job, const TrainingJobStatus& stored, const CoordinatorPlacement& placement,
    const JobObservation& world, bool active) {
  // The Secret is written once (the operator never reads it back), so its certificate is issued
  // only for a pass that will try to create it: a key pair and a signature per pass would cost
  // every pass of every job for nothing.
  if (world.has_secret || !active || !JobUsesTls(stored, world, placement.tls)) {
    return std::nullopt;
  }
  absl::StatusOr<auth::TlsKeyPair> leaf = auth::IssueServerCertificate(
      options_.coordinator_ca, CoordinatorTlsDnsNames(job), kCoordinatorCertificateValidity);
  if (!leaf.ok()) {
    PHX_LOG(WARNING) << "job " << kube::MetaString(job, "namespace") << "/"
                     << kube::MetaString(job, "name")
                     << ": issuing its coordinator's TLS certificate: " << leaf.status();
    return absl::InternalError(
        absl::StrCat("issuing the coordinator's TLS certificate: ", leaf.status().message()));
  }
  if (metrics_ != nullptr) metrics_->CoordinatorCertificateIssued();
  return JobTlsFiles{options_.coordinator_ca.cert_pem, *std::move(leaf)};
}

absl::Status Reconciler::DeleteFinishedJob(const Json& job) {
  kube::DeleteOptions options;
  options.propagation = kube::PropagationPolicy::kBackground;  // the GC takes the children
  options.uid_precondition = kube::MetaString(job, "uid");     // this job, not a new namesake
  const std::string ns = kube::MetaString(job, "namespace");
  const std::string name = kube::MetaString(job, "name");
  absl::Status deleted = client_.Delete(kTrainingJobs, ns, name, options);
  if (absl::IsNotFound(deleted)) return absl::OkStatus();  // gone already
  if (deleted.ok()) {
    PHX_LOG(INFO) << "job " << ns << "/" << name << ": ttlSecondsAfterFinished passed: deleted";
  }
  return deleted;  // an error is retried with back-off
}

absl::Status Reconciler::ReportInvalidSpec(const Json& job, const TrainingJobStatus& stored,
                                           const std::vector<std::string>& problems) {
  // The CRD's schema should have refused this; report it (phase Blocked) and wait for a new
  // generation.
  StageResult invalid =
      InvalidSpecStatus(stored, kube::ObjectMeta::Decode(job).generation, problems, clock_.Now());
  absl::StatusOr<Json> written = WriteStatus(job, stored, invalid.status);
  RecordEvents(job, invalid.events);
  return written.status();
}

std::string Reconciler::LinkCoordinator(const std::string& key, const Json& job,
                                        const TrainingJobSpec& spec,
                                        const CoordinatorPlacement& placement,
                                        JobObservation& world) {
  if (!world.coordinator.has_value() || world.coordinator->phase != PodPhase::kRunning) return "";
  const std::string token = TokenOf(kube::MetaString(job, "namespace"),
                                    kube::MetaString(job, "name"), kube::MetaString(job, "uid"));
  // The pod's own address, not its Service's: the link is the operator's, and a first answer is
  // what task pods wait for, so it must not wait on cluster DNS or kube-proxy's rules for a new
  // Service (under load a channel that found neither yet backed off for over a minute).
  CoordinatorPlacement by_ip = placement;
  by_ip.address_by_pod_ip = true;
  if (world.coordinator->grpc_port > 0) by_ip.port = world.coordinator->grpc_port;
  const std::string address = CoordinatorAddress(job, by_ip, world.coordinator->ip);
  if (token.empty() || address.empty()) return "";
  link_->Ensure(key, address, token, world.coordinator->uid,
                world.coordinator->serves_tls ? CoordinatorTlsServerName(job) : "");
  for (const auto& [task, failure] : link_->FailedTasks(key)) {
    const PodTask pod = PodOfTask(spec, task, failure.incarnation);
    // Several local ranks of one pod may be reported: the first one stands for the pod.
    world.coordinator_failed.try_emplace(
        pod.index, CoordinatorFailure{pod.incarnation, failure.reason, failure.last_heard});
  }
  for (const auto& [task, incarnation] : link_->RegisteredIncarnations(key)) {
    const PodTask pod = PodOfTask(spec, task, incarnation);
    Incarnation& newest = world.coordinator_incarnations[pod.index];
    newest = std::max(newest, pod.incarnation);
    if (spec.nproc_per_node > 1) {
      JobObservation::RankRestarts& ranks = world.rank_restarts[pod.index];
      const int restarts =
          static_cast<int>(incarnation - pod.incarnation * kLocalIncarnationStride);
      if (pod.incarnation > ranks.pod_incarnation) ranks = {pod.incarnation, 0};
      if (pod.incarnation == ranks.pod_incarnation) ranks.restarts += restarts;
    }
  }
  if (std::optional<CoordinatorLink::RolledBack> rolled_back = link_->RolledBackWork(key)) {
    world.rolled_back = RolledBackReport{rolled_back->coordinator_id, rolled_back->seconds};
  }
  world.stepping = link_->Stepping(key);
  CoordinatorLink::Spares spares = link_->SparesOf(key);
  world.spare_takeovers = std::move(spares.takeovers);
  world.spares_waiting = std::move(spares.waiting);
  return world.coordinator->uid;
}

void Reconciler::RecordReplacements(const ReconcilePlan& plan, bool executed,
                                    absl::Duration since_observed) {
  // The failure was observed when this pass read the cache; a back-off wait is policy and
  // ends before the pass that replaces the task, so it is not in since_observed.
  for (const Replacement& r : plan.replacements) {
    if (r.preemption) {
      metrics_->Preempted(r.reason);
    } else {
      metrics_->TaskRestarted(r.reason);
    }
    if (executed) metrics_->ReplacementCreated(since_observed);
  }
  // Booked by the status write that recorded it (this runs after it succeeded).
  for (double seconds : plan.recoveries) metrics_->Recovered(seconds);
}

bool Reconciler::DeliverPreemptionNotices(const std::string& key, const std::string& coordinator,
                                          int nproc_per_node,
                                          const std::vector<PreemptionNotice>& notices,
                                          std::vector<EventNote>& events) {
  const NoticeLedger::Due due = notices_.DueFor(key, coordinator, nproc_per_node, notices);
  if (due.tasks.empty()) return true;
  if (coordinator.empty()) return false;  // no coordinator runs yet: retry soon
  absl::Status notified =
      link_->NotifyPreemption(key, due.tasks, due.deadline, "node preempted or pod disrupted");
  if (!notified.ok()) {
    PHX_LOG(WARNING) << "job " << key
                     << ": preemption notice not delivered yet (will retry): " << notified;
    return false;
  }
  events.push_back(
      {false, "CheckpointRoundOpened",
       absl::StrCat("the coordinator accepted a coordinated checkpoint round for task(s) ",
                    absl::StrJoin(due.tasks, ", "), ", deadline ",
                    kube::FormatKubeTime(due.deadline))});
  notices_.Acknowledge(key, coordinator, notices);
  return true;
}

absl::Status Reconciler::WriteTaskCredential(const Json& job, const TrainingJobSpec& spec,
                                             const TaskPodRef& pod) {
  const std::string ns = kube::MetaString(job, "namespace");
  absl::StatusOr<Json> created =
      client_.Create(kSecrets, ns,
                     DesiredTaskCredentialSecret(
                         job, spec, pod,
                         TokenOf(ns, kube::MetaString(job, "name"), kube::MetaString(job, "uid"))));
  // AlreadyExists: written before this process's restart. A squatter's Secret of that name
  // cannot be told apart (no read right: ADR 0003), but its credential is refused by the
  // coordinator, so the pod fails to register and is replaced under a new name.
  if (!created.ok() && !absl::IsAlreadyExists(created.status())) {
    PHX_LOG(WARNING) << "creating Secret " << pod.name
                     << " (task pod credentials) failed: " << created.status();
    return created.status();
  }
  absl::MutexLock lock(&credentials_mu_);
  credentials_written_.insert(pod.uid);
  return absl::OkStatus();
}

absl::Status Reconciler::CatchUpTaskCredentials(const Json& job, const TrainingJobSpec& spec,
                                                const JobObservation& world) {
  std::vector<TaskPodRef> missing;
  {
    absl::MutexLock lock(&credentials_mu_);
    for (const PodView& pod : world.task_pods) {
      // A spare that took a task over mounts its spare credential, not a Secret of its own.
      // Not started: Pending, or no status yet (just created).
      const bool started = pod.phase != PodPhase::kPending && pod.phase != PodPhase::kUnknown;
      if (started || pod.being_deleted || pod.from_spare ||
          !HasOwnCredentialSecret(pod.incarnation)) {
        credentials_written_.erase(pod.uid);
        continue;
      }
      if (!credentials_written_.contains(pod.uid)) {
        missing.push_back({pod.name, pod.uid, pod.index, pod.incarnation});
      }
    }
  }
  for (const TaskPodRef& pod : missing) {
    if (absl::Status written = WriteTaskCredential(job, spec, pod); !written.ok()) return written;
  }
  return absl::OkStatus();
}

std::vector<ChildFailure> Reconciler::Execute(const Json& job, const TrainingJobSpec& spec,
                                              const ReconcilePlan& plan) {
  const std::string ns = kube::MetaString(job, "namespace");
  std::vector<ChildFailure> failures;
  // A transient failure (the server is down or throttling) ends the pass: the rest would fail
  // the same way. A permanent one is specific to its object: the others are still tried.
  auto failed = [&failures](bool deleting, const std::string& kind, const std::string& name,
                            const absl::Status& s) {
    PHX_LOG(WARNING) << (deleting ? "deleting " : "creating ") << kind << " " << name
                     << " failed: " << s;
    failures.push_back({deleting, kind, name, s});
    return !IsPermanentFailure(s);
  };
  // A spare that took a task over is labelled as the task's pod: what observation reads from
  // then on (an operator restart, a coordinator restart that forgot the take-over).
  for (const PodRelabel& r : plan.relabel) {
    Json patch = Json::object();
    patch["metadata"]["labels"][kRoleLabel] = Json::string("task");
    patch["metadata"]["labels"][kTaskLabel] = Json::string(absl::StrCat(r.task));
    patch["metadata"]["labels"][kIncarnationLabel] = Json::string(absl::StrCat(r.incarnation));
    absl::StatusOr<Json> patched =
        client_.Patch(kPods, ns, r.pod, kube::PatchType::kMerge, patch, kube::PatchOptions{});
    if (!patched.ok() && !absl::IsNotFound(patched.status()) &&
        failed(false, "Pod", r.pod, patched.status())) {
      return failures;
    }
  }
  for (const std::string& pod : plan.delete_pods) {
    kube::DeleteOptions options;
    options.propagation = kube::PropagationPolicy::kBackground;
    absl::Status s = client_.Delete(kPods, ns, pod, options);
    if (!s.ok() && !absl::IsNotFound(s) && failed(true, "Pod", pod, s)) return failures;
  }
  // After a conflict on the Secret, a Service or the coordinator pod no pod is created this
  // pass: it would read the squatter's token or reach the squatter instead of the coordinator.
  bool conflicted = false;
  bool secret_created = false;  // then the coordinator's last refusal was of the squatter's
  for (const Json& object : plan.create) {
    const std::string kind = kube::StringAt(object, "kind");
    const std::string name = kube::MetaString(object, "name");
    const kube::Resource& r = kind == "Secret"          ? kSecrets
                              : kind == "Service"       ? kServices
                              : kind == "NetworkPolicy" ? kNetworkPolicies
                                                        : kPods;
    if (conflicted && kind == "Pod") continue;
    absl::StatusOr<Json> created = client_.Create(r, ns, object);
    if (created.ok()) {
      secret_created |= kind == "Secret";
      if (kind == "Pod" && plan.status.incarnation_bound_credentials.value_or(false) &&
          kube::LabelsOf(object)[kRoleLabel] == "task") {
        // A replacement's, right after its pod, whose UID owns it (task_credentials.h).
        absl::StatusOr<TaskPodRef> pod = TaskPodRefOf(*created);
        absl::Status written = pod.status();
        if (pod.ok() && HasOwnCredentialSecret(pod->incarnation)) {
          written = WriteTaskCredential(job, spec, *pod);
        }
        if (!written.ok() && failed(false, "Secret", name, written)) return failures;
      }
      continue;
    }
    if (absl::IsAlreadyExists(created.status()) && kind == "Secret") {
      // The operator may not read Secrets (ADR 0003), so it cannot tell its own from a
      // squatter's here. It need not: the coordinator refuses a token whose SHA-256 is not the
      // one in its --token_sha256 (exiting auth::kExitTokenMismatch, which the plan reports as
      // a ChildConflict on the Secret), and a task credential from another token is refused by
      // the coordinator, so a squatting Secret stops the job with a clear error but is never
      // used.
      continue;
    }
    if (absl::IsAlreadyExists(created.status())) {
      absl::Status owned = CheckControlled(r, ns, name, kube::MetaString(job, "uid"));
      if (owned.ok()) continue;  // ours: an earlier pass created it and the cache lags
      PHX_LOG(WARNING) << "creating " << kind << " " << name << ": " << owned;
      failures.push_back({false, kind, name, owned});
      if (kube::LabelsOf(object)[kRoleLabel] != "task" || kind != "Pod") conflicted = true;
      continue;
    }
    if (failed(false, kind, name, created.status())) return failures;
  }
  if (!plan.secret_conflict.empty() && !secret_created) {
    const std::string secret = SecretName(kube::MetaString(job, "name"));
    PHX_LOG(WARNING) << "Secret " << secret << ": " << plan.secret_conflict;
    failures.push_back({false, "Secret", secret, absl::AlreadyExistsError(plan.secret_conflict)});
  }
  return failures;
}

absl::Status Reconciler::CheckControlled(const kube::Resource& r, const std::string& ns,
                                         const std::string& name, const std::string& uid) {
  absl::StatusOr<Json> existing = client_.Get(r, ns, name);
  if (absl::IsNotFound(existing.status())) {
    return absl::UnavailableError(absl::StrCat(name, " existed and is gone; creating it again"));
  }
  if (!existing.ok()) {
    // Unknown owner: not used either. Retried with back-off like any failed create.
    return absl::UnavailableError(absl::StrCat(
        name, " exists and its owner could not be read: ", existing.status().message()));
  }
  if (IsOwnedBy(*existing, uid)) return absl::OkStatus();
  return absl::AlreadyExistsError(absl::StrCat(
      name, " already exists and this TrainingJob does not control it (", ControllerName(*existing),
      "); it is not adopted: delete it, or rename the job"));
}

void Reconciler::RecordEvents(const Json& job, const std::vector<EventNote>& events) {
  for (const EventNote& e : events) {
    events_.Record(job, e.warning ? kube::EventType::kWarning : kube::EventType::kNormal, e.reason,
                   e.message);
  }
}

absl::StatusOr<Json> Reconciler::WriteStatus(const Json& job, const TrainingJobStatus& stored,
                                             const TrainingJobStatus& status) {
  // Compared as typed values: the server's JSON may spell a number differently (0 vs 0.0), and
  // DecodeStatus(EncodeStatus(s)) == s (codec_test), so equal means the write would change
  // nothing.
  if (stored == status) return job;  // no write when unchanged
  Json updated = job;
  updated["status"] = EncodeStatus(status);
  absl::StatusOr<Json> written =
      client_.UpdateStatus(kTrainingJobs, kube::MetaString(job, "namespace"), updated);
  if (written.ok()) own_writes_.Wrote(kube::KeyOf(job), kube::MetaString(job, "resourceVersion"));
  return written;
}

}  // namespace phalanx::op
