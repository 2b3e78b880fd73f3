#include "common/base/process_main.h"

#include <pthread.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <iostream>
#include <thread>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "common/base/log.h"
#include "common/base/process_init.h"

namespace phalanx::base {

ProcessMain::ProcessMain(int argc, char** argv, const ProcessIdentity& identity)
    : program_(identity.program) {
  // Before anything that could start a thread (flag parsing does not, but callers' later code
  // does): every thread inherits this mask.
  sigemptyset(&stop_signals_);
  sigaddset(&stop_signals_, SIGTERM);
  sigaddset(&stop_signals_, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals_, nullptr);
  InitProcess(identity.log_component, identity.program);  // before --version is parsed
  absl::SetProgramUsageMessage(std::string(identity.usage));
  const std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  for (size_t i = 1; i < rest.size(); ++i) args_.emplace_back(rest[i]);
}

int ProcessMain::Fail(std::string_view message, int exit_code) const {
  PHX_LOG(ERROR) << message;
  std::cerr << program_ << ": " << message << "\n";
  return exit_code;
}

int ProcessMain::WaitForStopSignal(absl::Duration timeout) const {
  const timespec wait = absl::ToTimespec(std::max(timeout, absl::ZeroDuration()));
  const int sig = sigtimedwait(&stop_signals_, nullptr, &wait);
  return sig == SIGTERM || sig == SIGINT ? sig : 0;  // -1: timed out or interrupted
}

void ProcessMain::ExitOnStopSignal() const {
  // Copies, not `this`: the thread may outlive main()'s ProcessMain while the process exits.
  std::thread([stop = stop_signals_, program = program_] {
    int sig = 0;
    while (sigwait(&stop, &sig) != 0 || (sig != SIGTERM && sig != SIGINT)) {
    }
    std::fprintf(stderr, "%s: signal %d: stopping\n", program.c_str(), sig);
    std::fflush(nullptr);
    _exit(128 + sig);
  }).detach();
}

}  // namespace phalanx::base
