// The Node annotation through which the node agent tells the operator when its node goes away.
// The agent's notice sources know a deadline (GCE: 30 s after instance/preempted turns TRUE; AWS:
// the instance-action time); the agent writes it in the same update as its phalanx.dev/preempting
// taint, as kube::FormatKubeTime writes times (RFC 3339, UTC, whole seconds rounded down):
//   metadata.annotations["phalanx.dev/preemption-deadline"] = "2030-01-02T03:04:05Z"
// and the operator gives the job's coordinated checkpoint the earlier of that deadline and
// "first seen + spec.preemption.checkpointGraceSeconds". No annotation (or garbage in it) means
// the deadline is unknown. Shared by node_agent/ (writer) and operator/ (reader); its natural
// home is beside the taint list in common/kube/node_preemption.h, where it moves once that
// directory is free to edit (issue 12).
#pragma once

namespace phalanx::base {

inline constexpr char kPreemptionDeadlineAnnotation[] = "phalanx.dev/preemption-deadline";

}  // namespace phalanx::base
