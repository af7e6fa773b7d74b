// File: common/yaml_documents.h
//
// One YAML document per file, checked before yaml-cpp loads it. yaml-cpp 0.7 neither rejects nor
// consumes a stray ',' before a document's content: Load() returns an empty document and
// LoadAll() loops forever, yielding more of them. So the config, the Nüwa fabric DSL and the
// collective topology reader walk the documents with the event parser first, stopping at the
// second:
//
//   if (std::optional<SecondYamlDocument> d = FindSecondYamlDocument(text)) {
//     if (d->stray) ... "unexpected 'x' where the document's content should start" at d->mark
//     else ...        "a second YAML document starts at line d->mark.line + 1"
//   }
//   node = YAML::Load(text);
//
// It throws what YAML::Parser throws (YAML::ParserException); callers already catch it around
// YAML::Load. Users link yaml-cpp themselves.
#pragma once

#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "yaml-cpp/eventhandler.h"
#include "yaml-cpp/yaml.h"

namespace heddle {

struct SecondYamlDocument {
  YAML::Mark mark;     // where the second document starts
  bool stray = false;  // it starts where the first did: a stray token, a syntax error
};

namespace internal {
// Records where each document starts; the content is read by YAML::Load.
class YamlDocumentStarts : public YAML::EventHandler {
 public:
  std::vector<YAML::Mark> marks;
  void OnDocumentStart(const YAML::Mark& m) override { marks.push_back(m); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};
}  // namespace internal

// nullopt when `text` holds at most one document.
inline std::optional<SecondYamlDocument> FindSecondYamlDocument(const std::string& text) {
  std::istringstream in(text);
  YAML::Parser events(in);
  internal::YamlDocumentStarts starts;
  if (!events.HandleNextDocument(starts) || !events.HandleNextDocument(starts)) {
    return std::nullopt;
  }
  const YAML::Mark& m = starts.marks.back();
  return SecondYamlDocument{m, starts.marks.size() == 2 && m.pos == starts.marks[0].pos};
}

}  // namespace heddle
