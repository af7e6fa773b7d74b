// File: tools/heddlectl/commands.cc
#include <google/protobuf/util/json_util.h>

#include "absl/strings/str_cat.h"
#include "tools/heddlectl/command.h"

namespace heddle::api::cli {

void RegisterAllCommands(CommandRegistry& registry) {
  RegisterShowCommands(registry);
  RegisterStormCommands(registry);
  RegisterLbCommands(registry);
  RegisterArtifactCommands(registry);
}

absl::Status PrintJson(const google::protobuf::Message& message, std::ostream& out) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = false;
  std::string json;
  const auto status = google::protobuf::util::MessageToJsonString(message, &json, options);
  if (!status.ok()) {
    return absl::InternalError(
        absl::StrCat("cannot print ", message.GetTypeName(), " as JSON: ", status.ToString()));
  }
  out << json;
  if (json.empty() || json.back() != '\n') out << '\n';
  return absl::OkStatus();
}

}  // namespace heddle::api::cli
