// File: dataplane/relay/python/heddle_relay_module.cc
//
// heddle_relay._core: the GeoMesh codec (SignEncoder, frames, Aggregator, weights), the model
// spec and the worker client (RelayClient) for Python. The pure-Python package around it
// (heddle_relay/__init__.py, torch_util.py) adds the torch conveniences; docs/relay-python.md
// has the API.
//
// Buffers: every array argument is taken through the buffer protocol without a copy — numpy
// arrays, bytes/bytearray/memoryview, and CPU torch tensors (through .numpy(), which shares
// the storage; a bf16 tensor through an int16 view of the same bits). Inputs may be fp32
// ('f'), fp16 ('e') or raw 16-bit words ('H'/'h') read as bf16 (or as the dtype asked for);
// non-contiguous inputs are copied once to a contiguous array. Outputs must be contiguous,
// writable fp32 of exactly the right length, and are written in place.
//
// The GIL is released around every kernel (encode, decode, accumulate, aggregate) and every
// RPC, so other Python threads run meanwhile. The buffers stay exported (pinned) for the call.
// An encoder, an aggregator or a client is used by one thread at a time: a second concurrent
// call on the same object raises instead of racing.
//
// Errors: an absl::Status comes back as heddle_relay.RelayError with the C++ message as its
// text and the status code's name ("INVALID_ARGUMENT", ...) in `.code`; bad Python arguments
// raise ValueError / TypeError.
#include <pybind11/numpy.h>
#include <pybind11/operators.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "dataplane/relay/codec/aggregate.h"
#include "dataplane/relay/codec/encoder.h"
#include "dataplane/relay/codec/frame.h"
#include "dataplane/relay/codec/sign_kernels.h"
#include "dataplane/relay/round/model_spec.h"
#ifdef HEDDLE_RELAY_HAVE_CLIENT
#include "absl/time/time.h"
#include "dataplane/relay/client/client.h"
#endif

namespace py = pybind11;

namespace heddle::relay::python {
namespace {

// ---------------------------------------------------------------------------------------------
// Status → exception.

class StatusError : public std::exception {
 public:
  explicit StatusError(absl::Status s) : status_(std::move(s)), what_(status_.message()) {}
  const absl::Status& status() const { return status_; }
  const char* what() const noexcept override { return what_.c_str(); }

 private:
  absl::Status status_;
  std::string what_;
};

void ThrowIfError(const absl::Status& s) {
  if (!s.ok()) throw StatusError(s);
}

template <typename T>
T ValueOrThrow(absl::StatusOr<T> v) {
  if (!v.ok()) throw StatusError(v.status());
  return std::move(v).value();
}

// One object used by one thread at a time; kernels run without the GIL, so a second thread
// could otherwise enter the same encoder while the first is inside it.
class BusyGuard {
 public:
  BusyGuard(std::atomic<bool>& busy, const char* what) : busy_(busy) {
    bool expected = false;
    // acq_rel: the winner sees every write the previous holder made before releasing.
    if (!busy_.compare_exchange_strong(expected, true, std::memory_order_acq_rel)) {
      throw std::runtime_error(
          absl::StrFormat("%s is in use by another thread; use one object per thread", what));
    }
  }
  ~BusyGuard() { busy_.store(false, std::memory_order_release); }
  BusyGuard(const BusyGuard&) = delete;
  BusyGuard& operator=(const BusyGuard&) = delete;

 private:
  std::atomic<bool>& busy_;
};

// ---------------------------------------------------------------------------------------------
// Buffers.

std::string DescribeFormat(const py::buffer_info& info) {
  return absl::StrFormat("format '%s' (%d-byte items)", info.format, info.itemsize);
}

bool IsCContiguous(const py::buffer_info& info) {
  py::ssize_t expect = info.itemsize;
  for (py::ssize_t d = info.ndim - 1; d >= 0; --d) {
    if (info.shape[d] != 1 && info.strides[d] != expect) return false;
    expect *= info.shape[d];
  }
  return true;
}

bool IsAligned(const py::buffer_info& info) {
  return info.itemsize <= 0 || reinterpret_cast<uintptr_t>(info.ptr) % info.itemsize == 0;
}

// The kernels read little-endian values; a big-endian array ('>f') is refused, not misread.
void CheckByteOrder(const py::buffer_info& info, const char* what) {
  if (!info.format.empty() && (info.format[0] == '>' || info.format[0] == '!')) {
    throw py::type_error(
        absl::StrFormat("%s: big-endian %s; convert it with .astype(its dtype.newbyteorder('<'))",
                        what, DescribeFormat(info)));
  }
}

bool IsTorchTensor(py::handle obj) {
  py::object cls = py::type::of(obj);
  return py::hasattr(cls, "__module__") &&
         py::str(cls.attr("__module__")).cast<std::string>().rfind("torch", 0) == 0 &&
         py::hasattr(obj, "numpy") && py::hasattr(obj, "data_ptr");
}

// obj as something with the buffer protocol, with a dtype hint for bf16 tensors (raw words).
// `input`: a non-contiguous source may be copied; an output may not.
std::pair<py::object, std::optional<DType>> AsBufferObject(py::handle obj, bool input,
                                                           const char* what) {
  if (IsTorchTensor(obj)) {
    py::object t = obj.attr("detach")();
    std::string device = py::str(t.attr("device"));
    if (device != "cpu") {
      throw py::value_error(absl::StrFormat(
          "%s: tensor on device %s; the relay codec works on CPU tensors (.cpu())", what, device));
    }
    if (!t.attr("is_contiguous")().cast<bool>()) {
      if (!input) {
        throw py::value_error(absl::StrFormat("%s: output tensor is not contiguous", what));
      }
      t = t.attr("contiguous")();
    }
    std::string dtype = py::str(t.attr("dtype"));
    std::optional<DType> hint;
    if (dtype == "torch.bfloat16") {
      t = t.attr("view")(py::module_::import("torch").attr("int16"));
      hint = DType::kBFloat16;
    }
    return {t.attr("numpy")(), hint};
  }
  if (!PyObject_CheckBuffer(obj.ptr())) {
    throw py::type_error(
        absl::StrFormat("%s: expected a numpy array, a CPU torch tensor or a buffer, got %s", what,
                        py::str(py::type::of(obj).attr("__name__")).cast<std::string>()));
  }
  return {py::reinterpret_borrow<py::object>(obj), std::nullopt};
}

// A pinned, contiguous view of an input array and the dtype its values are read as.
struct InputArray {
  py::object owner;  // keeps a contiguous copy alive when one was made
  py::buffer_info info;
  DType dtype = DType::kFloat32;
  size_t elements = 0;
  const void* data() const { return info.ptr; }
};

InputArray AsInput(py::handle obj, std::optional<DType> want, const char* what) {
  auto [o, hint] = AsBufferObject(obj, /*input=*/true, what);
  InputArray in;
  in.info = py::buffer(o).request();
  if (!IsCContiguous(in.info) || !IsAligned(in.info)) {
    // One copy into a new, aligned, contiguous array (the kernels read whole elements).
    o = py::module_::import("numpy").attr("array")(o, py::arg("copy") = true,
                                                   py::arg("order") = "C");
    in.info = py::buffer(o).request();
  }
  in.owner = o;
  CheckByteOrder(in.info, what);
  const std::string& f = in.info.format;
  char code = f.empty() ? '?' : f.back();  // "<f", "=e" and the like
  std::optional<DType> have;
  if (in.info.itemsize == 4 && code == 'f') {
    have = DType::kFloat32;
  } else if (in.info.itemsize == 2 && code == 'e') {
    have = DType::kFloat16;
  } else if (in.info.itemsize == 2 && (code == 'H' || code == 'h')) {
    // Raw 16-bit words: bf16 unless the caller says they are fp16 bits.
    have = hint ? *hint : (want ? *want : DType::kBFloat16);
    if (*have == DType::kFloat32) have.reset();
  }
  if (!have) {
    throw py::type_error(
        absl::StrFormat("%s: %s is not fp32, fp16 or 16-bit words (bf16); convert it first", what,
                        DescribeFormat(in.info)));
  }
  if (want && *want != *have) {
    throw py::type_error(absl::StrFormat("%s: values are %s, expected %s", what, DTypeName(*have),
                                         DTypeName(*want)));
  }
  in.dtype = *have;
  in.elements = size_t(in.info.size);
  return in;
}

// A pinned, writable, contiguous fp32 array of exactly n values.
struct OutputArray {
  py::object owner;  // what is returned to the caller
  py::buffer_info info;
  float* data() const { return static_cast<float*>(info.ptr); }
};

py::object NewFloatArray(size_t n) {
  return py::module_::import("numpy").attr("zeros")(n, "float32");
}

OutputArray AsOutput(py::handle obj, size_t n, const char* what) {
  OutputArray out;
  if (obj.is_none()) {
    out.owner = NewFloatArray(n);
    out.info = py::buffer(out.owner).request(/*writable=*/true);
    return out;
  }
  auto [o, hint] = AsBufferObject(obj, /*input=*/false, what);
  py::buffer_info info = py::buffer(o).request();
  if (info.readonly) throw py::value_error(absl::StrFormat("%s: output is read-only", what));
  if (!IsCContiguous(info) || !IsAligned(info)) {
    throw py::value_error(absl::StrFormat("%s: output is not contiguous and aligned", what));
  }
  CheckByteOrder(info, what);
  if (info.itemsize != 4 || info.format.empty() || info.format.back() != 'f') {
    throw py::type_error(
        absl::StrFormat("%s: output must be fp32, got %s", what, DescribeFormat(info)));
  }
  if (size_t(info.size) != n) {
    throw py::value_error(
        absl::StrFormat("%s: output holds %d values, expected %u", what, info.size, n));
  }
  out.owner = py::reinterpret_borrow<py::object>(obj);
  out.info = std::move(info);
  return out;
}

// A read-only numpy view of memory owned by `base` (no copy).
template <typename T>
py::object ReadOnlyView(const T* data, size_t n, py::handle base) {
  py::array a(py::dtype::of<T>(), {py::ssize_t(n)}, {py::ssize_t(sizeof(T))}, data, base);
  a.attr("setflags")(py::arg("write") = false);
  return a;
}

template <typename T>
py::object CopyToArray(const T* data, size_t n) {
  py::array_t<T> a(static_cast<py::ssize_t>(n));
  if (n > 0) std::memcpy(a.mutable_data(), data, n * sizeof(T));
  return a;
}

Weighting ParseWeighting(const std::string& w) {
  if (w == "fednova") return Weighting::kFedNova;
  if (w == "tokens") return Weighting::kTokens;
  throw py::value_error(absl::StrFormat("weighting \"%s\": expected \"fednova\" or \"tokens\"", w));
}

DType DTypeArg(py::handle h) {
  if (py::isinstance<py::str>(h)) return ValueOrThrow(ParseDType(h.cast<std::string>()));
  return h.cast<DType>();
}

std::optional<DType> OptionalDType(py::handle h) {
  if (h.is_none()) return std::nullopt;
  return DTypeArg(h);
}

// ---------------------------------------------------------------------------------------------
// Codec objects.

struct PyEncoder {
  explicit PyEncoder(SignEncoder e) : enc(std::move(e)) {}
  SignEncoder enc;
  std::atomic<bool> busy{false};
};

// A parsed frame: the validated view and the exported buffer it points into (pinned until the
// frame object is gone).
struct PyFrame {
  py::buffer_info info;
  FrameView view;
};

std::unique_ptr<PyFrame> Parse(py::handle obj) {
  auto [o, hint] = AsBufferObject(obj, /*input=*/true, "frame");
  auto f = std::make_unique<PyFrame>();
  f->info = py::buffer(o).request();
  if (!IsCContiguous(f->info)) throw py::value_error("frame: buffer is not contiguous");
  std::span<const uint8_t> bytes(static_cast<const uint8_t*>(f->info.ptr),
                                 size_t(f->info.size) * size_t(f->info.itemsize));
  f->view = ValueOrThrow(ParseFrame(bytes));
  return f;
}

struct PyAggregator {
  explicit PyAggregator(size_t max_senders) : agg(max_senders) {}
  Aggregator agg;
  std::atomic<bool> busy{false};
};

std::string YamlQuote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out + "\"";
}

std::string SpecToYaml(const ModelSpec& spec) {
  std::string y = absl::StrFormat("chunk_size: %u\nslice_elements: %u\ntensors:\n", spec.chunk_size,
                                  spec.slice_elements);
  for (const TensorSpec& t : spec.tensors) {
    absl::StrAppendFormat(&y, "  - {id: %u, name: %s, elements: %u, dtype: %s}\n", t.id,
                          YamlQuote(t.name), t.elements, DTypeName(t.dtype));
  }
  return y;
}

// ---------------------------------------------------------------------------------------------
// The client.

#ifdef HEDDLE_RELAY_HAVE_CLIENT
struct PyClient {
  std::unique_ptr<RelayClient> client;
  std::atomic<bool> busy{false};
  RelayClient& get() {
    if (!client) throw std::runtime_error("RelayClient: left the region; connect again");
    return *client;
  }
};
#endif

}  // namespace
}  // namespace heddle::relay::python

using namespace heddle::relay;          // NOLINT: the bindings name every type
using namespace heddle::relay::python;  // NOLINT

PYBIND11_MODULE(_core, m) {
  m.doc() = "GeoMesh relay codec, model spec and worker client (docs/relay-python.md)";

  static py::exception<StatusError> relay_error(m, "RelayError", PyExc_RuntimeError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      py::object exc = py::reinterpret_borrow<py::object>(relay_error)(
          py::str(std::string(e.status().message())));
      exc.attr("code") = py::str(absl::StatusCodeToString(e.status().code()));
      PyErr_SetObject(relay_error.ptr(), exc.ptr());
    }
  });

  py::enum_<DType>(m, "DType")
      .value("FP32", DType::kFloat32)
      .value("BF16", DType::kBFloat16)
      .value("FP16", DType::kFloat16);
  m.def("dtype_name", [](DType d) { return std::string(DTypeName(d)); });
  m.def(
      "parse_dtype", [](const std::string& s) { return ValueOrThrow(ParseDType(s)); },
      "fp32/float32, bf16/bfloat16, fp16/float16 → DType");
  m.def(
      "active_isa", [] { return std::string(IsaName(ActiveKernels().isa)); },
      "the kernel form in use: scalar, avx2 or avx512 (HEDDLE_RELAY_ISA caps it)");

  m.attr("DEFAULT_CHUNK_SIZE") = kDefaultChunkSize;
  m.attr("DEFAULT_SLICE_ELEMENTS") = kDefaultSliceElements;
  m.attr("FRAME_HEADER_BYTES") = kFrameHeaderBytes;

  py::class_<FrameHeader>(m, "FrameHeader")
      .def(py::init([](uint64_t round_id, uint32_t sender_id, uint32_t tensor_id, py::handle dtype,
                       uint64_t tensor_elements, uint64_t element_offset, uint64_t element_count,
                       uint32_t chunk_size, uint32_t inner_steps, uint64_t token_count) {
             return FrameHeader{.round_id = round_id,
                                .sender_id = sender_id,
                                .tensor_id = tensor_id,
                                .dtype = DTypeArg(dtype),
                                .tensor_elements = tensor_elements,
                                .element_offset = element_offset,
                                .element_count = element_count,
                                .chunk_size = chunk_size,
                                .inner_steps = inner_steps,
                                .token_count = token_count};
           }),
           py::kw_only(), py::arg("round_id") = 0, py::arg("sender_id") = 0,
           py::arg("tensor_id") = 0, py::arg("dtype") = DType::kFloat32,
           py::arg("tensor_elements") = 0, py::arg("element_offset") = 0,
           py::arg("element_count") = 0, py::arg("chunk_size") = kDefaultChunkSize,
           py::arg("inner_steps") = 1, py::arg("token_count") = 0)
      .def_readwrite("round_id", &FrameHeader::round_id)
      .def_readwrite("sender_id", &FrameHeader::sender_id)
      .def_readwrite("tensor_id", &FrameHeader::tensor_id)
      .def_readwrite("dtype", &FrameHeader::dtype)
      .def_readwrite("tensor_elements", &FrameHeader::tensor_elements)
      .def_readwrite("element_offset", &FrameHeader::element_offset)
      .def_readwrite("element_count", &FrameHeader::element_count)
      .def_readwrite("chunk_size", &FrameHeader::chunk_size)
      .def_readwrite("inner_steps", &FrameHeader::inner_steps)
      .def_readwrite("token_count", &FrameHeader::token_count)
      .def("validate", [](const FrameHeader& h) { ThrowIfError(ValidateHeader(h)); })
      .def(py::self == py::self)
      .def("__repr__", [](const FrameHeader& h) {
        return absl::StrFormat(
            "FrameHeader(round_id=%u, sender_id=%u, tensor_id=%u, dtype=%s, tensor_elements=%u, "
            "element_offset=%u, element_count=%u, chunk_size=%u, inner_steps=%u, "
            "token_count=%u)",
            h.round_id, h.sender_id, h.tensor_id, DTypeName(h.dtype), h.tensor_elements,
            h.element_offset, h.element_count, h.chunk_size, h.inner_steps, h.token_count);
      });

  m.def("frame_bytes", &FrameBytes, py::arg("element_count"),
        py::arg("chunk_size") = kDefaultChunkSize, "size of a frame of n values in bytes");

  py::class_<PyEncoder>(m, "SignEncoder",
                        "Error-feedback sign encoder for one tensor or slice (encoder.h)")
      .def(py::init([](uint64_t elements, uint32_t chunk_size, bool error_feedback) {
             return std::make_unique<PyEncoder>(ValueOrThrow(SignEncoder::Create(
                 elements, {.chunk_size = chunk_size, .error_feedback = error_feedback})));
           }),
           py::arg("elements"), py::kw_only(), py::arg("chunk_size") = kDefaultChunkSize,
           py::arg("error_feedback") = true)
      .def_property_readonly("elements", [](const PyEncoder& e) { return e.enc.elements(); })
      .def_property_readonly("chunk_size", [](const PyEncoder& e) { return e.enc.chunk_size(); })
      .def_property_readonly("frame_bytes", [](const PyEncoder& e) { return e.enc.FrameBytes(); })
      .def(
          "encode",
          [](PyEncoder& e, py::handle x, py::handle dtype) {
            BusyGuard busy(e.busy, "SignEncoder");
            InputArray in = AsInput(x, OptionalDType(dtype), "SignEncoder.encode");
            if (in.elements != e.enc.elements()) {
              throw py::value_error(
                  absl::StrFormat("SignEncoder.encode: %u values, the encoder was made for %u",
                                  in.elements, e.enc.elements()));
            }
            size_t nonfinite;
            {
              py::gil_scoped_release nogil;
              nonfinite = e.enc.Encode(in.dtype, in.data());
            }
            return nonfinite;
          },
          py::arg("x"), py::arg("dtype") = py::none(),
          "Encodes x + e; returns the number of chunks with a non-finite magnitude (0 = ok)")
      .def_property_readonly(
          "signs",
          [](py::object self) {
            auto s = self.cast<PyEncoder&>().enc.signs();
            return ReadOnlyView(s.data(), s.size(), self);
          },
          "the last encode's sign words (uint64, read-only view)")
      .def_property_readonly("magnitudes",
                             [](py::object self) {
                               auto s = self.cast<PyEncoder&>().enc.magnitudes();
                               return ReadOnlyView(s.data(), s.size(), self);
                             })
      .def_property_readonly("error",
                             [](py::object self) {
                               auto s = self.cast<PyEncoder&>().enc.error();
                               return ReadOnlyView(s.data(), s.size(), self);
                             })
      .def("reset_error",
           [](PyEncoder& e) {
             BusyGuard busy(e.busy, "SignEncoder");
             e.enc.ResetError();
           })
      .def(
          "write_frame",
          [](PyEncoder& e, const FrameHeader& h, py::handle out) -> py::object {
            BusyGuard busy(e.busy, "SignEncoder");
            const size_t n = e.enc.FrameBytes();
            if (out.is_none()) {
              auto b = py::reinterpret_steal<py::object>(PyBytes_FromStringAndSize(nullptr, n));
              if (!b) throw py::error_already_set();
              std::span<uint8_t> dst(reinterpret_cast<uint8_t*>(PyBytes_AS_STRING(b.ptr())), n);
              ThrowIfError(e.enc.WriteFrame(h, dst));
              return b;
            }
            py::buffer_info info =
                py::reinterpret_borrow<py::buffer>(out).request(/*writable=*/true);
            if (!IsCContiguous(info) || size_t(info.size * info.itemsize) != n) {
              throw py::value_error(absl::StrFormat(
                  "write_frame: out must be a contiguous writable buffer of %u bytes", n));
            }
            ThrowIfError(e.enc.WriteFrame(h, {static_cast<uint8_t*>(info.ptr), n}));
            return py::reinterpret_borrow<py::object>(out);
          },
          py::arg("header"), py::arg("out") = py::none(),
          "the last encode as a frame: new bytes, or written into `out` (frame_bytes long)");

  py::class_<PyFrame>(m, "Frame", "A validated frame; a zero-copy view of the parsed buffer")
      .def_property_readonly("header", [](const PyFrame& f) { return f.view.header(); })
      .def_property_readonly("chunks", [](const PyFrame& f) { return f.view.chunks(); })
      .def_property_readonly("nbytes", [](const PyFrame& f) { return f.view.bytes().size(); })
      .def_property_readonly("magnitudes",
                             [](const PyFrame& f) {
                               std::vector<float> m(f.view.chunks());
                               for (uint64_t k = 0; k < m.size(); ++k) m[k] = f.view.magnitude(k);
                               return CopyToArray(m.data(), m.size());
                             })
      .def_property_readonly("sign_words",
                             [](const PyFrame& f) {
                               std::vector<uint64_t> w(FrameWords(f.view.header().element_count));
                               for (uint64_t i = 0; i < w.size(); ++i) w[i] = f.view.sign_word(i);
                               return CopyToArray(w.data(), w.size());
                             })
      .def(
          "decode",
          [](const PyFrame& f, py::handle out) {
            OutputArray o = AsOutput(out, f.view.header().element_count, "Frame.decode");
            {
              py::gil_scoped_release nogil;
              DecodeFrame(f.view, {o.data(), size_t(o.info.size)});
            }
            return o.owner;
          },
          py::arg("out") = py::none(), "out[j] = bit j ? -m : m (fp32)")
      .def(
          "accumulate",
          [](const PyFrame& f, py::handle acc, double weight) {
            OutputArray o = AsOutput(acc, f.view.header().element_count, "Frame.accumulate");
            py::gil_scoped_release nogil;
            AccumulateFrame(f.view, weight, {o.data(), size_t(o.info.size)});
          },
          py::arg("acc"), py::arg("weight") = 1.0, "acc[j] += (float)(weight * m) * ±1 in place");

  m.def("parse_frame", &Parse, py::arg("buffer"),
        "validates a frame (ParseFrame); raises RelayError naming the bad field");
  m.def(
      "decode_frame",
      [](py::handle buffer, py::handle out) {
        std::unique_ptr<PyFrame> f = Parse(buffer);
        OutputArray o = AsOutput(out, f->view.header().element_count, "decode_frame");
        {
          py::gil_scoped_release nogil;
          DecodeFrame(f->view, {o.data(), size_t(o.info.size)});
        }
        return o.owner;
      },
      py::arg("buffer"), py::arg("out") = py::none());

  m.def(
      "compute_weights",
      [](const std::vector<std::tuple<uint32_t, uint64_t, uint32_t>>& present,
         const std::string& weighting) {
        std::vector<Contribution> c;
        for (const auto& [id, tokens, steps] : present) {
          c.push_back({.sender_id = id, .tokens = tokens, .inner_steps = steps});
        }
        return ValueOrThrow(ComputeWeights(c, ParseWeighting(weighting)));
      },
      py::arg("present"), py::arg("weighting") = "fednova",
      "weights of [(sender_id, tokens, inner_steps), ...] in the given order");

  py::class_<PyAggregator>(m, "Aggregator", "Weighted sum of one slice's frames (aggregate.h)")
      .def(py::init<size_t>(), py::arg("max_senders") = 64)
      .def(
          "aggregate",
          [](PyAggregator& a, const std::vector<const PyFrame*>& frames,
             const std::string& weighting, uint64_t expected_tokens, double min_token_fraction,
             py::handle out) {
            BusyGuard busy(a.busy, "Aggregator");
            if (frames.empty()) throw py::value_error("Aggregator.aggregate: no frames");
            std::vector<FrameView> views;
            for (const PyFrame* f : frames) {
              if (f == nullptr) throw py::type_error("Aggregator.aggregate: None in frames");
              views.push_back(f->view);
            }
            OutputArray o = AsOutput(out, views[0].header().element_count, "Aggregator.aggregate");
            AggregateOptions opt{.weighting = ParseWeighting(weighting),
                                 .expected_tokens = expected_tokens,
                                 .min_token_fraction = min_token_fraction};
            absl::Status s;
            {
              py::gil_scoped_release nogil;
              s = a.agg.Aggregate(views, opt, {o.data(), size_t(o.info.size)});
            }
            ThrowIfError(s);
            return o.owner;
          },
          py::arg("frames"), py::kw_only(), py::arg("weighting") = "fednova",
          py::arg("expected_tokens") = 0, py::arg("min_token_fraction") = 0.0,
          py::arg("out") = py::none(),
          "Δ = Σ w_i m_i s_i over the frames (sender id order), into a new or given fp32 array");

  // ---- model spec ----
  py::class_<TensorSpec>(m, "TensorSpec")
      .def(py::init([](uint32_t id, std::string name, uint64_t elements, py::handle dtype) {
             return TensorSpec{
                 .id = id, .name = std::move(name), .elements = elements, .dtype = DTypeArg(dtype)};
           }),
           py::kw_only(), py::arg("id"), py::arg("name"), py::arg("elements"),
           py::arg("dtype") = DType::kFloat32)
      .def_readwrite("id", &TensorSpec::id)
      .def_readwrite("name", &TensorSpec::name)
      .def_readwrite("elements", &TensorSpec::elements)
      .def_readwrite("dtype", &TensorSpec::dtype)
      .def("__repr__", [](const TensorSpec& t) {
        return absl::StrFormat("TensorSpec(id=%u, name=%s, elements=%u, dtype=%s)", t.id,
                               YamlQuote(t.name), t.elements, DTypeName(t.dtype));
      });

  py::class_<SliceRef>(m, "SliceRef")
      .def_readonly("index", &SliceRef::index)
      .def_readonly("tensor_id", &SliceRef::tensor_id)
      .def_readonly("dtype", &SliceRef::dtype)
      .def_readonly("tensor_elements", &SliceRef::tensor_elements)
      .def_readonly("offset", &SliceRef::offset)
      .def_readonly("count", &SliceRef::count)
      .def("__repr__", [](const SliceRef& s) {
        return absl::StrFormat("SliceRef(index=%u, tensor_id=%u, offset=%u, count=%u)", s.index,
                               s.tensor_id, s.offset, s.count);
      });

  py::class_<ModelSpec>(m, "ModelSpec")
      .def(py::init(
               [](std::vector<TensorSpec> tensors, uint32_t chunk_size, uint64_t slice_elements) {
                 ModelSpec s{.tensors = std::move(tensors),
                             .chunk_size = chunk_size,
                             .slice_elements = slice_elements};
                 ThrowIfError(ValidateModelSpec(s));
                 return s;
               }),
           py::arg("tensors"), py::kw_only(), py::arg("chunk_size") = kDefaultChunkSize,
           py::arg("slice_elements") = kDefaultSliceElements)
      .def_readonly("tensors", &ModelSpec::tensors)
      .def_readonly("chunk_size", &ModelSpec::chunk_size)
      .def_readonly("slice_elements", &ModelSpec::slice_elements)
      .def("slices", [](const ModelSpec& s) { return Slices(s); })
      .def_property_readonly("total_elements", [](const ModelSpec& s) { return TotalElements(s); })
      .def_property_readonly("digest", [](const ModelSpec& s) { return SpecDigest(s); })
      .def("to_yaml", &SpecToYaml, "the YAML a relay config's `model:` block takes")
      .def("__repr__", [](const ModelSpec& s) {
        return absl::StrFormat(
            "ModelSpec(%u tensors, %u values, chunk_size=%u, "
            "slice_elements=%u, digest=0x%016x)",
            s.tensors.size(), TotalElements(s), s.chunk_size, s.slice_elements, SpecDigest(s));
      });

  m.def(
      "model_spec_from_string",
      [](const std::string& yaml) { return ValueOrThrow(ModelSpecFromString(yaml)); },
      py::arg("yaml"));
  m.def(
      "model_spec_from_file",
      [](const std::string& path) { return ValueOrThrow(ModelSpecFromFile(path)); },
      py::arg("path"));
  m.def("slice_header", &SliceHeader, py::arg("spec"), py::arg("slice"), py::arg("round_id"),
        py::arg("sender_id"), "the header slice s's frame must carry (tokens, steps left to set)");
  m.def(
      "check_frame_for_slice",
      [](const PyFrame& f, const ModelSpec& spec, const SliceRef& s, uint64_t round_id,
         uint32_t sender_id) {
        ThrowIfError(CheckFrameForSlice(f.view, spec, s, round_id, sender_id));
      },
      py::arg("frame"), py::arg("spec"), py::arg("slice"), py::arg("round_id"),
      py::arg("sender_id"));

  // ---- client ----
#ifdef HEDDLE_RELAY_HAVE_CLIENT
  m.attr("HAVE_CLIENT") = true;
  py::class_<WorkerPlan>(m, "WorkerPlan")
      .def_readonly("valid", &WorkerPlan::valid)
      .def_readonly("version", &WorkerPlan::version)
      .def_readonly("batch_size", &WorkerPlan::batch_size)
      .def_readonly("inner_steps", &WorkerPlan::inner_steps)
      .def_readonly("seq_len", &WorkerPlan::seq_len)
      .def_readonly("tokens", &WorkerPlan::tokens)
      .def_readonly("predicted_compute_s", &WorkerPlan::predicted_compute_s)
      .def_readonly("target_round_s", &WorkerPlan::target_round_s)
      .def("__repr__", [](const WorkerPlan& p) {
        return absl::StrFormat(
            "WorkerPlan(valid=%v, version=%u, batch_size=%d, inner_steps=%d, "
            "seq_len=%d, predicted_compute_s=%g)",
            p.valid, p.version, p.batch_size, p.inner_steps, p.seq_len, p.predicted_compute_s);
      });
  py::class_<PushStats>(m, "PushStats")
      .def_readonly("round_id", &PushStats::round_id)
      .def_readonly("frame_bytes", &PushStats::frame_bytes)
      .def_readonly("source_bytes", &PushStats::source_bytes)
      .def_readonly("nonfinite_chunks", &PushStats::nonfinite_chunks);
  py::class_<PullResult>(m, "PullResult")
      .def_readonly("round_id", &PullResult::round_id)
      .def_readonly("applied", &PullResult::applied)
      .def_readonly("included", &PullResult::included)
      .def_readonly("reason", &PullResult::reason)
      .def_readonly("digest", &PullResult::digest)
      .def_readonly("regions", &PullResult::regions)
      .def_readonly("tokens", &PullResult::tokens)
      .def_readonly("bytes", &PullResult::bytes);
  py::class_<RoundStatus>(m, "RoundStatus")
      .def_readonly("current_round", &RoundStatus::current_round)
      .def_readonly("last_published", &RoundStatus::last_published);

  py::class_<PyClient>(m, "RelayClient", "RelayClient (client.h); heddle_relay.Client wraps it")
      .def_static(
          "connect",
          [](const std::string& address, const std::string& name, const std::string& token,
             const std::string& tls_ca_file, const std::string& tls_cert_file,
             const std::string& tls_key_file, const std::string& tls_server_name,
             const std::string& region, double tokens_per_s, double half_batch, int64_t max_batch,
             uint64_t memory_bytes, uint64_t fixed_bytes, uint64_t bytes_per_sample,
             int64_t seq_len, uint64_t spec_digest, double rpc_timeout_s, double push_timeout_s,
             double pull_timeout_s, bool error_feedback) {
            RelayClientOptions o{.address = address,
                                 .token = token,
                                 .tls_ca_file = tls_ca_file,
                                 .tls_cert_file = tls_cert_file,
                                 .tls_key_file = tls_key_file,
                                 .tls_server_name = tls_server_name,
                                 .rpc_timeout = absl::Seconds(rpc_timeout_s),
                                 .push_timeout = absl::Seconds(push_timeout_s),
                                 .pull_timeout = absl::Seconds(pull_timeout_s),
                                 .error_feedback = error_feedback};
            WorkerInfo me{.name = name,
                          .region = region,
                          .tokens_per_s = tokens_per_s,
                          .half_batch = half_batch,
                          .max_batch = max_batch,
                          .memory_bytes = memory_bytes,
                          .fixed_bytes = fixed_bytes,
                          .bytes_per_sample = bytes_per_sample,
                          .seq_len = seq_len};
            absl::StatusOr<std::unique_ptr<RelayClient>> c;
            {
              py::gil_scoped_release nogil;
              c = RelayClient::Connect(o, me, spec_digest);
            }
            auto pc = std::make_unique<PyClient>();
            pc->client = ValueOrThrow(std::move(c));
            return pc;
          },
          py::kw_only(), py::arg("address"), py::arg("name"), py::arg("token") = "",
          py::arg("tls_ca_file") = "", py::arg("tls_cert_file") = "", py::arg("tls_key_file") = "",
          py::arg("tls_server_name") = "", py::arg("region") = "", py::arg("tokens_per_s") = 0.0,
          py::arg("half_batch") = 0.0, py::arg("max_batch") = 0, py::arg("memory_bytes") = 0,
          py::arg("fixed_bytes") = 0, py::arg("bytes_per_sample") = 0, py::arg("seq_len") = 0,
          py::arg("spec_digest") = 0, py::arg("rpc_timeout_s") = 30.0,
          py::arg("push_timeout_s") = 600.0, py::arg("pull_timeout_s") = 3600.0,
          py::arg("error_feedback") = true)
      .def_property_readonly("spec", [](PyClient& c) { return c.get().spec(); })
      .def_property_readonly("sender_id", [](PyClient& c) { return c.get().sender_id(); })
      .def_property_readonly("region_id", [](PyClient& c) { return c.get().region_id(); })
      .def_property_readonly("next_round", [](PyClient& c) { return c.get().next_round(); })
      .def_property_readonly("plan", [](PyClient& c) { return c.get().plan(); })
      .def(
          "push",
          [](PyClient& c, uint64_t round_id, const std::vector<py::handle>& tensors,
             uint64_t tokens, uint32_t inner_steps) {
            BusyGuard busy(c.busy, "RelayClient");
            RelayClient& rc = c.get();
            const ModelSpec& spec = rc.spec();
            if (tensors.size() != spec.tensors.size()) {
              throw py::value_error(absl::StrFormat("push: %u tensors, the model spec has %u",
                                                    tensors.size(), spec.tensors.size()));
            }
            std::vector<InputArray> keep;
            std::vector<TensorInput> in;
            keep.reserve(tensors.size());
            for (size_t t = 0; t < tensors.size(); ++t) {
              const TensorSpec& ts = spec.tensors[t];
              keep.push_back(AsInput(tensors[t], ts.dtype, ts.name.c_str()));
              if (keep.back().elements != ts.elements) {
                throw py::value_error(absl::StrFormat("push: tensor %s has %u values, spec %u",
                                                      ts.name, keep.back().elements, ts.elements));
              }
              in.push_back({.data = keep.back().data(), .dtype = ts.dtype});
            }
            absl::StatusOr<PushStats> s;
            {
              py::gil_scoped_release nogil;
              s = rc.PushRound(round_id, in, tokens, inner_steps);
            }
            return ValueOrThrow(std::move(s));
          },
          py::arg("round_id"), py::arg("tensors"), py::arg("tokens"), py::arg("inner_steps"),
          "tensors in spec order (spec dtype); see client.h PushRound")
      .def(
          "retry_push",
          [](PyClient& c, uint64_t round_id) {
            BusyGuard busy(c.busy, "RelayClient");
            RelayClient& rc = c.get();
            absl::StatusOr<PushStats> s;
            {
              py::gil_scoped_release nogil;
              s = rc.RetryPush(round_id);
            }
            return ValueOrThrow(std::move(s));
          },
          py::arg("round_id"), "resends a round's frames after a transport failure")
      .def(
          "pull",
          [](PyClient& c, uint64_t round_id, const std::vector<py::handle>& outs) {
            BusyGuard busy(c.busy, "RelayClient");
            RelayClient& rc = c.get();
            const ModelSpec& spec = rc.spec();
            if (outs.size() != spec.tensors.size()) {
              throw py::value_error(absl::StrFormat("pull: %u buffers, the model spec has %u",
                                                    outs.size(), spec.tensors.size()));
            }
            std::vector<OutputArray> keep;
            std::vector<float*> ptrs;
            keep.reserve(outs.size());
            for (size_t t = 0; t < outs.size(); ++t) {
              keep.push_back(
                  AsOutput(outs[t], spec.tensors[t].elements, spec.tensors[t].name.c_str()));
              ptrs.push_back(keep.back().data());
            }
            absl::StatusOr<PullResult> r;
            {
              py::gil_scoped_release nogil;
              r = rc.PullRound(round_id, ptrs);
            }
            return ValueOrThrow(std::move(r));
          },
          py::arg("round_id"), py::arg("outs"),
          "fp32 buffers in spec order, overwritten with the round's global aggregate")
      .def(
          "report",
          [](PyClient& c, uint64_t round_id, int64_t batch_size, int64_t inner_steps,
             double compute_s) {
            BusyGuard busy(c.busy, "RelayClient");
            RelayClient& rc = c.get();
            absl::Status s;
            {
              py::gil_scoped_release nogil;
              s = rc.Report(round_id, batch_size, inner_steps, compute_s);
            }
            ThrowIfError(s);
          },
          py::arg("round_id"), py::arg("batch_size"), py::arg("inner_steps"), py::arg("compute_s"))
      .def("status",
           [](PyClient& c) {
             BusyGuard busy(c.busy, "RelayClient");
             RelayClient& rc = c.get();
             absl::StatusOr<RoundStatus> s;
             {
               py::gil_scoped_release nogil;
               s = rc.Status();
             }
             return ValueOrThrow(std::move(s));
           })
      .def("leave", [](PyClient& c) {
        BusyGuard busy(c.busy, "RelayClient");
        if (!c.client) return;
        absl::Status s;
        {
          py::gil_scoped_release nogil;
          s = c.client->Leave();
          c.client.reset();
        }
        ThrowIfError(s);
      });
#else
  m.attr("HAVE_CLIENT") = false;
#endif
}
