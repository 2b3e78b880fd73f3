// spec.placement as the scheduler reads it (the way JobSet's exclusive placement does it): pod
// affinity and anti-affinity on every task pod, so that any scheduler that honours them (the
// real kube-scheduler, the local cluster's) keeps a job in one topology domain:
//
//   required pod affinity      to the job's own task pods, over topologyKey: every task pod
//                              goes to the domain (e.g. the rack) where its job's others are;
//                              the first one goes wherever it fits (a pod may match its own
//                              term), and a replacement follows the survivors
//   required pod anti-affinity with exclusive: to every other job's task pods, in any
//                              namespace, over the same key: no two jobs share a domain
//                              (anti-affinity is symmetric, so a later job without `exclusive`
//                              stays out as well)
//
// The template's own required pod affinity cannot be combined with this (validation.cc refuses
// it): Kubernetes counts a placed pod toward a pod's required affinity only if it matches every
// term, so the job's term and another would never be met together.
//
// A domain without room for the whole job leaves the rest Pending with the scheduler's message,
// which the schedulability stage reports (condition Unschedulable) and, with spec.gang, the gang
// stage turns into a release. Pure.
#pragma once

#include <string>

#include "operator/api/types.h"

namespace phalanx::op {

// The task pods' affinity for job `job` in namespace `ns`: `user` (the template's core/v1
// Affinity, or null) with the terms above appended. `placement.topology_key` must be set.
Json TaskPlacementAffinity(const std::string& ns, const std::string& job,
                           const PlacementSpec& placement, const Json& user);

}  // namespace phalanx::op
