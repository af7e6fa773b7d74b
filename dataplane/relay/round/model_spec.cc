#include "dataplane/relay/round/model_spec.h"

#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "common/crc32c.h"
#include "common/status_macros.h"
#include "yaml-cpp/yaml.h"

namespace heddle::relay {
namespace {

bool PrintableName(std::string_view s) {
  if (s.empty() || s.size() > 256) return false;
  for (char c : s) {
    if (c < 0x21 || c > 0x7e) return false;
  }
  return true;
}

}  // namespace

absl::Status ValidateModelSpec(const ModelSpec& spec) {
  if (spec.tensors.empty()) return absl::InvalidArgumentError("model: no tensors");
  if (spec.chunk_size < kMinChunkSize || spec.chunk_size > kMaxChunkSize ||
      spec.chunk_size % 64 != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "model: chunk_size %u: must be a multiple of 64 from %u to %u", spec.chunk_size,
        kMinChunkSize, kMaxChunkSize));
  }
  if (spec.slice_elements == 0 || spec.slice_elements % spec.chunk_size != 0 ||
      spec.slice_elements > kMaxFrameElements) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "model: slice_elements %u: must be a non-zero multiple of chunk_size %u, at most %u",
        spec.slice_elements, spec.chunk_size, kMaxFrameElements));
  }
  std::set<std::string_view> names;
  uint64_t slices = 0;
  for (size_t i = 0; i < spec.tensors.size(); ++i) {
    const TensorSpec& t = spec.tensors[i];
    if (i > 0 && t.id <= spec.tensors[i - 1].id) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "model: tensor %u (%s): ids must be unique and increasing (previous %u)", t.id, t.name,
          spec.tensors[i - 1].id));
    }
    if (!PrintableName(t.name)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "model: tensor %u: name \"%s\" must be 1..256 printable ASCII characters", t.id,
          absl::CEscape(t.name)));
    }
    if (!names.insert(t.name).second) {
      return absl::InvalidArgumentError(
          absl::StrFormat("model: tensor %u: name \"%s\" used twice", t.id, t.name));
    }
    if (t.elements == 0 || t.elements > kMaxTensorElements) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "model: tensor %s: elements %u: must be 1..%u", t.name, t.elements, kMaxTensorElements));
    }
    if (t.dtype != DType::kFloat32 && t.dtype != DType::kBFloat16 &&
        t.dtype != DType::kFloat16) {
      return absl::InvalidArgumentError(
          absl::StrFormat("model: tensor %s: unknown dtype %d", t.name, int(t.dtype)));
    }
    slices += (t.elements + spec.slice_elements - 1) / spec.slice_elements;
    if (slices > kMaxSlices) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "model: more than %u slices; raise slice_elements (now %u)", kMaxSlices,
          spec.slice_elements));
    }
  }
  return absl::OkStatus();
}

std::vector<SliceRef> Slices(const ModelSpec& spec) {
  std::vector<SliceRef> out;
  uint32_t index = 0;
  for (const TensorSpec& t : spec.tensors) {
    for (uint64_t off = 0; off < t.elements; off += spec.slice_elements) {
      out.push_back(SliceRef{.index = index++,
                             .tensor_id = t.id,
                             .dtype = t.dtype,
                             .tensor_elements = t.elements,
                             .offset = off,
                             .count = std::min(spec.slice_elements, t.elements - off)});
    }
  }
  return out;
}

uint64_t TotalElements(const ModelSpec& spec) {
  uint64_t n = 0;
  for (const TensorSpec& t : spec.tensors) n += t.elements;
  return n;
}

uint64_t SpecDigest(const ModelSpec& spec) {
  std::string b;
  auto put = [&b](uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) b.push_back(char((v >> (8 * i)) & 0xff));
  };
  put(1, 2);  // digest layout version
  put(spec.chunk_size, 4);
  put(spec.slice_elements, 8);
  put(spec.tensors.size(), 8);
  for (const TensorSpec& t : spec.tensors) {
    put(t.id, 4);
    put(t.elements, 8);
    put(uint8_t(t.dtype), 1);
    put(t.name.size(), 2);
    b += t.name;
  }
  // Two CRC-32Cs with different seeds: 64 bits against accidental equality.
  std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(b.data()), b.size());
  uint32_t lo = Crc32c(bytes);
  uint32_t hi = Crc32c(bytes, 0x9e3779b9u);
  return (uint64_t{hi} << 32) | lo;
}

FrameHeader SliceHeader(const ModelSpec& spec, const SliceRef& s, uint64_t round_id,
                        uint32_t sender_id) {
  return FrameHeader{.round_id = round_id,
                     .sender_id = sender_id,
                     .tensor_id = s.tensor_id,
                     .dtype = s.dtype,
                     .tensor_elements = s.tensor_elements,
                     .element_offset = s.offset,
                     .element_count = s.count,
                     .chunk_size = spec.chunk_size};
}

absl::Status CheckFrameForSlice(const FrameView& f, const ModelSpec& spec, const SliceRef& s,
                                uint64_t round_id, uint32_t sender_id) {
  const FrameHeader& h = f.header();
  auto mismatch = [&](const char* field, uint64_t want, uint64_t got) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "frame for slice %u (tensor %u offset %u): %s is %u, expected %u", s.index, s.tensor_id,
        s.offset, field, got, want));
  };
  if (h.round_id != round_id) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "frame for slice %u: round %u, but the round in progress is %u", s.index, h.round_id,
        round_id));
  }
  if (h.sender_id != sender_id) return mismatch("sender id", sender_id, h.sender_id);
  if (h.tensor_id != s.tensor_id) return mismatch("tensor id", s.tensor_id, h.tensor_id);
  if (h.dtype != s.dtype) return mismatch("dtype", uint64_t(s.dtype), uint64_t(h.dtype));
  if (h.tensor_elements != s.tensor_elements) {
    return mismatch("tensor elements", s.tensor_elements, h.tensor_elements);
  }
  if (h.element_offset != s.offset) return mismatch("element offset", s.offset, h.element_offset);
  if (h.element_count != s.count) return mismatch("element count", s.count, h.element_count);
  if (h.chunk_size != spec.chunk_size) return mismatch("chunk size", spec.chunk_size, h.chunk_size);
  return absl::OkStatus();
}

absl::StatusOr<DType> ParseDType(std::string_view name) {
  if (name == "fp32" || name == "float32") return DType::kFloat32;
  if (name == "bf16" || name == "bfloat16") return DType::kBFloat16;
  if (name == "fp16" || name == "float16") return DType::kFloat16;
  return absl::InvalidArgumentError(
      absl::StrFormat("dtype \"%s\": expected fp32, bf16 or fp16", absl::CEscape(std::string(name))));
}

namespace {

absl::StatusOr<uint64_t> U64(const YAML::Node& n, const char* key) {
  try {
    std::string s = n.as<std::string>();
    uint64_t v = 0;
    if (!absl::SimpleAtoi(s, &v)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("model: %s: \"%s\" is not a non-negative integer", key, s));
    }
    return v;
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrFormat("model: %s: %s", key, e.what()));
  }
}

absl::StatusOr<ModelSpec> FromNode(const YAML::Node& root) {
  if (!root.IsMap()) return absl::InvalidArgumentError("model: expected a mapping");
  ModelSpec spec;
  for (const auto& kv : root) {
    std::string key = kv.first.as<std::string>();
    if (key == "chunk_size") {
      HEDDLE_ASSIGN_OR_RETURN(uint64_t v, U64(kv.second, "chunk_size"));
      if (v > kMaxChunkSize) {
        return absl::InvalidArgumentError(absl::StrFormat("model: chunk_size %u too large", v));
      }
      spec.chunk_size = uint32_t(v);
    } else if (key == "slice_elements") {
      HEDDLE_ASSIGN_OR_RETURN(spec.slice_elements, U64(kv.second, "slice_elements"));
    } else if (key == "tensors") {
      if (!kv.second.IsSequence()) {
        return absl::InvalidArgumentError("model: tensors: expected a list");
      }
      uint32_t pos = 0;
      for (const YAML::Node& t : kv.second) {
        if (!t.IsMap()) {
          return absl::InvalidArgumentError(
              absl::StrFormat("model: tensors[%u]: expected a mapping", pos));
        }
        TensorSpec ts;
        ts.id = pos;
        ts.name = absl::StrFormat("t%u", pos);
        for (const auto& f : t) {
          std::string k = f.first.as<std::string>();
          if (k == "name") {
            ts.name = f.second.as<std::string>();
          } else if (k == "id") {
            HEDDLE_ASSIGN_OR_RETURN(uint64_t v, U64(f.second, "tensors[].id"));
            if (v > UINT32_MAX) return absl::InvalidArgumentError("model: tensor id too large");
            ts.id = uint32_t(v);
          } else if (k == "elements") {
            HEDDLE_ASSIGN_OR_RETURN(ts.elements, U64(f.second, "tensors[].elements"));
          } else if (k == "dtype") {
            HEDDLE_ASSIGN_OR_RETURN(ts.dtype, ParseDType(f.second.as<std::string>()));
          } else {
            return absl::InvalidArgumentError(absl::StrFormat(
                "model: tensors[%u]: unknown key \"%s\" (name, id, elements, dtype)", pos, k));
          }
        }
        spec.tensors.push_back(std::move(ts));
        ++pos;
      }
    } else if (key == "synthetic") {
      const YAML::Node& s = kv.second;
      if (!s.IsMap()) return absl::InvalidArgumentError("model: synthetic: expected a mapping");
      uint64_t count = 1, elements = 0;
      DType dtype = DType::kFloat32;
      for (const auto& f : s) {
        std::string k = f.first.as<std::string>();
        if (k == "tensors") {
          HEDDLE_ASSIGN_OR_RETURN(count, U64(f.second, "synthetic.tensors"));
        } else if (k == "elements") {
          HEDDLE_ASSIGN_OR_RETURN(elements, U64(f.second, "synthetic.elements"));
        } else if (k == "dtype") {
          HEDDLE_ASSIGN_OR_RETURN(dtype, ParseDType(f.second.as<std::string>()));
        } else {
          return absl::InvalidArgumentError(absl::StrFormat(
              "model: synthetic: unknown key \"%s\" (tensors, elements, dtype)", k));
        }
      }
      if (count == 0 || count > 65536) {
        return absl::InvalidArgumentError("model: synthetic.tensors must be 1..65536");
      }
      for (uint64_t i = 0; i < count; ++i) {
        spec.tensors.push_back(TensorSpec{.id = uint32_t(spec.tensors.size()),
                                          .name = absl::StrFormat("synthetic%u", i),
                                          .elements = elements,
                                          .dtype = dtype});
      }
    } else {
      return absl::InvalidArgumentError(absl::StrFormat(
          "model: unknown key \"%s\" (chunk_size, slice_elements, tensors, synthetic)", key));
    }
  }
  HEDDLE_RETURN_IF_ERROR(ValidateModelSpec(spec));
  return spec;
}

}  // namespace

absl::StatusOr<ModelSpec> ModelSpecFromString(std::string_view yaml) {
  try {
    return FromNode(YAML::Load(std::string(yaml)));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrFormat("model: %s", e.what()));
  }
}

absl::StatusOr<ModelSpec> ModelSpecFromFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrFormat("model file %s: cannot open", path));
  std::stringstream ss;
  ss << in.rdbuf();
  auto spec = ModelSpecFromString(ss.str());
  if (!spec.ok()) {
    return absl::Status(spec.status().code(),
                        absl::StrFormat("%s: %s", path, spec.status().message()));
  }
  return spec;
}

}  // namespace heddle::relay
