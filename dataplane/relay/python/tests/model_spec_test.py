"""heddle_relay model spec bindings: YAML both ways, slices, digests, the torch mapping.

Run: PYTHONPATH=build/dataplane/relay/python /usr/bin/python3 dataplane/relay/python/tests/model_spec_test.py
"""

import os
import sys
import tempfile
import unittest

try:
    import numpy as np
except ImportError as e:  # pragma: no cover
    print(f"skipped: {e}")
    sys.exit(77)

import heddle_relay as hr

try:
    import torch
except ImportError:
    torch = None


class ModelSpecTest(unittest.TestCase):
    YAML = """
chunk_size: 64
slice_elements: 128
tensors:
  - {name: embed, elements: 300, dtype: bf16}
  - {name: head, elements: 64}
"""

    def test_from_string_slices_and_digest(self):
        spec = hr.model_spec_from_string(self.YAML)
        self.assertEqual([t.name for t in spec.tensors], ["embed", "head"])
        self.assertEqual(spec.tensors[0].dtype, hr.DType.BF16)
        self.assertEqual(spec.total_elements, 364)
        got = [(s.index, s.tensor_id, s.offset, s.count) for s in spec.slices()]
        self.assertEqual(got, [(0, 0, 0, 128), (1, 0, 128, 128), (2, 0, 256, 44), (3, 1, 0, 64)])
        again = hr.model_spec_from_string(spec.to_yaml())
        self.assertEqual(again.digest, spec.digest)
        other = hr.model_spec_from_string(self.YAML.replace("64}", "65}"))
        self.assertNotEqual(other.digest, spec.digest)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "model.yaml")
            with open(path, "w") as f:
                f.write(spec.to_yaml())
            self.assertEqual(hr.model_spec_from_file(path).digest, spec.digest)

    def test_yaml_quotes_names(self):
        spec = hr.ModelSpec([hr.TensorSpec(id=0, name='a:"b"\\{c}', elements=5)], chunk_size=64,
                            slice_elements=64)
        again = hr.model_spec_from_string(spec.to_yaml())
        self.assertEqual(again.tensors[0].name, 'a:"b"\\{c}')
        self.assertEqual(again.digest, spec.digest)

    def test_invalid_specs_name_the_problem(self):
        with self.assertRaisesRegex(hr.RelayError, "used twice"):
            hr.ModelSpec([hr.TensorSpec(id=0, name="w", elements=1),
                          hr.TensorSpec(id=1, name="w", elements=1)])
        with self.assertRaisesRegex(hr.RelayError, "slice_elements 100"):
            hr.ModelSpec([hr.TensorSpec(id=0, name="w", elements=1)], chunk_size=64,
                         slice_elements=100)
        with self.assertRaises(hr.RelayError) as cm:
            hr.model_spec_from_file("/nonexistent/model.yaml")
        self.assertIn("/nonexistent/model.yaml", str(cm.exception))

    def test_slice_frames_checked(self):
        spec = hr.model_spec_from_string(self.YAML)
        s = spec.slices()[1]
        h = hr.slice_header(spec, s, 5, 2)
        self.assertEqual((h.round_id, h.sender_id, h.tensor_id, h.element_offset,
                          h.element_count, h.tensor_elements, h.dtype),
                         (5, 2, 0, 128, 128, 300, hr.DType.BF16))
        h.token_count = 10
        enc = hr.SignEncoder(s.count, chunk_size=spec.chunk_size)
        enc.encode(np.ones(s.count, np.uint16) * 0x3F80)  # bf16 1.0
        f = hr.parse_frame(enc.write_frame(h))
        hr.check_frame_for_slice(f, spec, s, 5, 2)
        with self.assertRaisesRegex(hr.RelayError, "round 5, but the round in progress is 6"):
            hr.check_frame_for_slice(f, spec, s, 6, 2)
        with self.assertRaisesRegex(hr.RelayError, "element offset is 128, expected 0"):
            hr.check_frame_for_slice(f, spec, spec.slices()[0], 5, 2)

    @unittest.skipIf(torch is None, "torch not installed")
    def test_spec_from_torch_module(self):
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(10, 20), torch.nn.ReLU(), torch.nn.Linear(20, 3))
        spec = hr.model_spec_from_module(m, chunk_size=64, slice_elements=128)
        self.assertEqual([(t.id, t.name, t.elements, t.dtype) for t in spec.tensors],
                         [(0, "0.weight", 200, hr.DType.FP32), (1, "0.bias", 20, hr.DType.FP32),
                          (2, "2.weight", 60, hr.DType.FP32), (3, "2.bias", 3, hr.DType.FP32)])
        self.assertEqual(len(spec.slices()), 5)
        bf = hr.model_spec_from_module(m, chunk_size=64, slice_elements=128, dtype=torch.bfloat16)
        self.assertTrue(all(t.dtype == hr.DType.BF16 for t in bf.tensors))
        self.assertNotEqual(bf.digest, spec.digest)
        self.assertEqual(hr.model_spec_from_string(hr.spec_yaml(m, chunk_size=64)).digest,
                         hr.model_spec_from_module(m, chunk_size=64).digest)
        with self.assertRaisesRegex(ValueError, "float64"):
            hr.model_spec_from_module(m.double())


if __name__ == "__main__":
    unittest.main()
