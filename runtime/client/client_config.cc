#include "runtime/client/client_config.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/base/env_and_files.h"

namespace phalanx::client {
namespace {

absl::StatusOr<std::string> Required(const base::GetenvFn& getenv, const std::string& name) {
  std::optional<std::string> value = getenv(name);
  if (!value.has_value() || value->empty()) {
    return absl::InvalidArgumentError(absl::StrCat(name, " is not set"));
  }
  return *value;
}

template <typename Int>
absl::StatusOr<Int> ParseInt(const std::string& name, const std::string& text) {
  Int value;
  if (!absl::SimpleAtoi(text, &value)) {
    return absl::InvalidArgumentError(absl::StrCat(name, "='", text, "' is not a whole number"));
  }
  return value;
}

absl::StatusOr<std::string> Coordinator(const base::GetenvFn& getenv) {
  absl::StatusOr<std::string> value = Required(getenv, "PHALANX_COORDINATOR");
  if (!value.ok()) return value.status();
  if (value->find(':') == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("PHALANX_COORDINATOR='", *value, "' must be host:port"));
  }
  return value;
}

// PHALANX_TOKEN, else the file PHALANX_TOKEN_FILE names.
absl::StatusOr<std::string> Token(const base::GetenvFn& getenv) {
  std::string token;
  if (std::optional<std::string> value = getenv("PHALANX_TOKEN"); value && !value->empty()) {
    // Stripped like the coordinator strips its token file, so a trailing newline is harmless.
    token = std::string(absl::StripAsciiWhitespace(*value));
  } else if (std::optional<std::string> file = getenv("PHALANX_TOKEN_FILE");
             file && !file->empty()) {
    absl::StatusOr<std::string> text = base::ReadFileToString(*file);
    if (!text.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("PHALANX_TOKEN_FILE: ", text.status().message()));
    }
    token = std::string(absl::StripAsciiWhitespace(*text));
  }
  if (token.empty()) {
    return absl::InvalidArgumentError("neither PHALANX_TOKEN nor PHALANX_TOKEN_FILE gives a token");
  }
  return token;
}

// The PEM in PHALANX_TLS_CA_FILE ("" when it is not set) and PHALANX_TLS_SERVER_NAME.
absl::StatusOr<CoordinatorTls> Tls(const base::GetenvFn& getenv) {
  CoordinatorTls tls;
  std::optional<std::string> ca = getenv("PHALANX_TLS_CA_FILE");
  if (std::optional<std::string> name = getenv("PHALANX_TLS_SERVER_NAME"); name.has_value()) {
    tls.server_name = *name;
  }
  if (!ca.has_value() || ca->empty()) {
    if (!tls.server_name.empty()) {
      return absl::InvalidArgumentError(
          "PHALANX_TLS_SERVER_NAME is set without PHALANX_TLS_CA_FILE: the coordinator's "
          "certificate cannot be verified without the CA");
    }
    return tls;
  }
  absl::StatusOr<std::string> pem = base::ReadFileToString(*ca);
  if (!pem.ok() || pem->empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "PHALANX_TLS_CA_FILE: ", pem.ok() ? "the file is empty" : pem.status().message()));
  }
  tls.ca_pem = *std::move(pem);
  return tls;
}

}  // namespace

absl::StatusOr<SpareConfig> SpareConfig::FromEnv(const base::GetenvFn& getenv_in) {
  const base::GetenvFn getenv = getenv_in ? getenv_in : base::ProcessGetenv;
  SpareConfig config;
  absl::StatusOr<std::string> value = Coordinator(getenv);
  if (!value.ok()) return value.status();
  config.coordinator = *value;
  value = Required(getenv, "PHALANX_SPARE");
  if (!value.ok()) return value.status();
  absl::StatusOr<int> slot = ParseInt<int>("PHALANX_SPARE", *value);
  if (!slot.ok()) return slot.status();
  if (*slot < 0) return absl::InvalidArgumentError("PHALANX_SPARE must not be negative");
  config.slot = *slot;
  value = Required(getenv, "PHALANX_POD_NAME");
  if (!value.ok()) value = Required(getenv, "HOSTNAME");
  if (!value.ok())
    return absl::InvalidArgumentError("neither PHALANX_POD_NAME nor HOSTNAME is set");
  config.pod = *value;
  value = Token(getenv);
  if (!value.ok()) return value.status();
  config.credential = *value;
  absl::StatusOr<CoordinatorTls> tls = Tls(getenv);
  if (!tls.ok()) return tls.status();
  config.tls = *std::move(tls);
  return config;
}

absl::StatusOr<ClientConfig> ClientConfig::FromEnv(const base::GetenvFn& getenv_in) {
  const base::GetenvFn getenv = getenv_in ? getenv_in : base::ProcessGetenv;
  ClientConfig config;
  absl::StatusOr<std::string> value = Coordinator(getenv);
  if (!value.ok()) return value.status();
  config.coordinator = *value;
  value = Required(getenv, "PHALANX_JOB");
  if (!value.ok()) return value.status();
  config.job = *value;

  value = Required(getenv, "PHALANX_NUM_TASKS");
  if (!value.ok()) return value.status();
  absl::StatusOr<int> num_tasks = ParseInt<int>("PHALANX_NUM_TASKS", *value);
  if (!num_tasks.ok()) return num_tasks.status();
  if (*num_tasks < 1) return absl::InvalidArgumentError("PHALANX_NUM_TASKS must be at least 1");
  config.num_tasks = *num_tasks;

  value = Required(getenv, "PHALANX_TASK_ID");
  if (!value.ok() && getenv("PHALANX_SPARE").has_value()) {
    return absl::InvalidArgumentError(
        "PHALANX_TASK_ID is not set: this process is a spare (PHALANX_SPARE) that has not been "
        "given a task yet; wait for one first (phalanx.init() does; C: phalanx_await_assignment)");
  }
  if (!value.ok()) return value.status();
  absl::StatusOr<int> task_id = ParseInt<int>("PHALANX_TASK_ID", *value);
  if (!task_id.ok()) return task_id.status();
  if (*task_id < 0 || *task_id >= config.num_tasks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "PHALANX_TASK_ID=", *task_id, " is outside [0, PHALANX_NUM_TASKS=", config.num_tasks, ")"));
  }
  config.task_id = *task_id;

  if (std::optional<std::string> inc = getenv("PHALANX_INCARNATION"); inc && !inc->empty()) {
    std::optional<base::Incarnation> parsed = base::ParseIncarnation(*inc);
    if (!parsed.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "PHALANX_INCARNATION must be a whole number in [0, 2^63 - 1], got \"", *inc, "\""));
    }
    config.incarnation = *parsed;
  }

  value = Token(getenv);
  if (!value.ok()) return value.status();
  config.token = *value;
  absl::StatusOr<CoordinatorTls> tls = Tls(getenv);
  if (!tls.ok()) return tls.status();
  config.tls = *std::move(tls);
  if (std::optional<std::string> transport = getenv("PHALANX_SESSION_TRANSPORT");
      transport && !transport->empty()) {
    if (*transport == "auto") {
      config.session_transport = ClientConfig::SessionTransport::kAuto;
    } else if (*transport == "wire") {
      config.session_transport = ClientConfig::SessionTransport::kWire;
    } else if (*transport == "grpc") {
      config.session_transport = ClientConfig::SessionTransport::kGrpc;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("PHALANX_SESSION_TRANSPORT='", *transport,
                                                     "' is not one of auto, wire, grpc"));
    }
  }
  return config;
}

}  // namespace phalanx::client
