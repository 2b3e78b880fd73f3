// Terminal task states: once the job has ended (Succeeded or Failed), status.tasks[].state says
// how each task ended, never Running or BackingOff for a job that is over:
//
//   Succeeded  its pod succeeded
//   Failed     its own pod failed: the failure that ended the job (fatal, or one more than
//              maxRestarts allows), or it was waiting out its back-off when the job ended
//   Stopped    anything else: it was running, starting, restarting or being preempted, and the
//              operator deleted its pod because the job ended
//
// FailJob and the success stage call it when the job ends; the suspend stage again on every
// later pass of a finished job (so a status written before this rule also settles). Pure.
#pragma once

#include "operator/controller/pass.h"

namespace phalanx::op {

void SettleTaskStates(JobPass& pass);

}  // namespace phalanx::op
