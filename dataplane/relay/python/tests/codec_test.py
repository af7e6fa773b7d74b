"""heddle_relay codec bindings against a pure-numpy reference of docs/relay.md §2-§5.

Run: PYTHONPATH=build/dataplane/relay/python /usr/bin/python3 dataplane/relay/python/tests/codec_test.py
Exit code 77 (skipped under ctest) when numpy is missing.
"""

import struct
import sys
import threading
import time
import unittest

try:
    import numpy as np
except ImportError as e:  # pragma: no cover - environment without numpy
    print(f"skipped: {e}")
    sys.exit(77)

import heddle_relay as hr

try:
    import torch
except ImportError:  # the codec needs no torch; the tensor cases skip
    torch = None

F32 = np.float32


# ---- reference (docs/relay.md §2.1, §2.2, §2.3, §4, §5) ----

def ref_sign_words(v):
    """Bit j = v[j] < 0 (ordered compare), bit j%64 of word j//64, LSB first."""
    bits = (np.asarray(v, F32) < 0).astype(np.uint8)
    padded = np.zeros(-(-len(bits) // 64) * 64, np.uint8)
    padded[:len(bits)] = bits
    return np.packbits(padded, bitorder="little").view("<u8")


def ref_magnitude(chunk):
    """m = (float)(S / count); S: 16 fp32 partials per 64-value block (value b into partial b%16,
    in index order from +0), added as doubles into 16 lanes block after block, folded 8,4,2,1."""
    a = np.abs(np.asarray(chunk, F32))
    n = len(a)
    blocks = -(-n // 64)
    padded = np.zeros(blocks * 64, F32)  # +0 added to a partial changes nothing
    padded[:n] = a
    quads = padded.reshape(blocks, 4, 16)
    partial = quads[:, 0, :].copy()
    for q in range(1, 4):
        partial = (partial + quads[:, q, :]).astype(F32)
    lanes = np.cumsum(partial.astype(np.float64), axis=0)[-1].copy()  # sequential, not pairwise
    for s in (8, 4, 2, 1):
        lanes[:s] = lanes[:s] + lanes[s:2 * s]
    return F32(lanes[0] / n)


def ref_pack(v, chunk):
    v = np.asarray(v, F32)
    mags = np.array([ref_magnitude(v[k:k + chunk]) for k in range(0, len(v), chunk)], F32)
    return ref_sign_words(v), mags


def ref_decode(v_signs_words, mags, n, chunk):
    bits = np.unpackbits(v_signs_words.view(np.uint8), bitorder="little")[:n].astype(bool)
    m = np.repeat(mags, chunk)[:n]
    return np.where(bits, -m, m).astype(F32), bits


def ref_ef_encode(x, e, chunk):
    v = (np.asarray(x, F32) + e).astype(F32)
    words, mags = ref_pack(v, chunk)
    dec, _ = ref_decode(words, mags, len(v), chunk)
    return words, mags, (v - dec).astype(F32)


def ref_weights(present, weighting):
    """present: [(sender, tokens, steps)] → weights in the given order, as aggregate.cc forms
    them (p_i = n_i / N; τ_eff summed in increasing sender id; w_i = τ_eff · (p_i / τ_i))."""
    total = float(sum(t for _, t, _ in present))
    p = [t / total for _, t, _ in present]
    if weighting == "tokens":
        return p
    tau_eff = 0.0
    for i in sorted(range(len(present)), key=lambda i: present[i][0]):
        tau_eff += p[i] * float(present[i][2])
    return [tau_eff * (p[i] / float(present[i][2])) for i in range(len(present))]


def ref_aggregate(senders, weighting, chunk):
    """senders: [(sender_id, tokens, steps, words, mags, n)] → Σ w_i c_i s_i from +0 in
    increasing sender id, c = (float)(w · (double)m) per chunk, one fp32 add per value."""
    senders = sorted(senders, key=lambda s: s[0])
    w = ref_weights([(s[0], s[1], s[2]) for s in senders], weighting)
    n = senders[0][5]
    acc = np.zeros(n, F32)
    for wi, (_, _, _, words, mags, _) in zip(w, senders):
        coeff = np.array([F32(wi * float(m)) for m in mags], F32)
        dec, _ = ref_decode(words, coeff, n, chunk)
        acc = (acc + dec).astype(F32)
    return acc


def special_values(rng, n):
    x = rng.standard_normal(n).astype(F32)
    specials = np.array([0.0, -0.0, 1e-40, -1e-40, 1.0e30, -1.0e30, 1.0, -1.0], F32)
    idx = rng.choice(n, size=min(n, 16), replace=False)
    x[idx] = rng.choice(specials, size=len(idx))
    return x


def bf16_bits(x32):
    """Truncate fp32 to bf16 bit patterns (uint16)."""
    return (np.asarray(x32, F32).view(np.uint32) >> 16).astype(np.uint16)


def bf16_to_f32(bits):
    return (bits.astype(np.uint32) << 16).view(F32)


class SignCodecTest(unittest.TestCase):
    def setUp(self):
        self.rng = np.random.default_rng(1234)

    def test_bit_order_hand_case(self):
        x = np.ones(130, F32)
        x[[0, 3, 63, 64, 129]] = -1.0
        x[5] = -0.0  # -0 is not negative: bit 0
        enc = hr.SignEncoder(130, chunk_size=64, error_feedback=False)
        self.assertEqual(enc.encode(x), 0)
        self.assertEqual(list(enc.signs), [(1 << 0) | (1 << 3) | (1 << 63), 1 << 0, 1 << 1])
        frame = enc.write_frame(hr.FrameHeader(round_id=1, token_count=1))
        # Byte k, bit b is value 8k + b: the first sign byte holds values 0 and 3.
        sign_off = len(frame) - 4 - 3 * 8
        self.assertEqual(frame[sign_off], 0b00001001)
        self.assertEqual(frame[sign_off + 7], 0b10000000)

    def test_pack_matches_reference(self):
        for n in (1, 63, 64, 65, 200, 1000, 4097):
            for chunk in (64, 256, 4096):
                x = special_values(self.rng, n)
                enc = hr.SignEncoder(n, chunk_size=chunk, error_feedback=False)
                self.assertEqual(enc.encode(x), 0)
                words, mags = ref_pack(x, chunk)
                with self.subTest(n=n, chunk=chunk):
                    np.testing.assert_array_equal(enc.signs, words)
                    self.assertEqual(enc.magnitudes.tobytes(), mags.tobytes())
                    np.testing.assert_array_equal(enc.error, np.zeros(n, F32))

    def test_magnitude_is_mean_abs_per_chunk(self):
        x = np.concatenate([np.full(64, 2.0, F32), np.full(64, -4.0, F32), [6.0, -6.0]]).astype(F32)
        enc = hr.SignEncoder(len(x), chunk_size=64, error_feedback=False)
        enc.encode(x)
        np.testing.assert_array_equal(enc.magnitudes, np.array([2.0, 4.0, 6.0], F32))

    def test_error_feedback_matches_reference_over_rounds(self):
        n, chunk = 777, 128
        enc = hr.SignEncoder(n, chunk_size=chunk)
        e = np.zeros(n, F32)
        sent_sum = np.zeros(n, np.float64)
        in_sum = np.zeros(n, np.float64)
        for _ in range(20):
            x = (self.rng.standard_normal(n) * self.rng.uniform(0.1, 3.0)).astype(F32)
            self.assertEqual(enc.encode(x), 0)
            words, mags, e = ref_ef_encode(x, e, chunk)
            np.testing.assert_array_equal(enc.signs, words)
            self.assertEqual(enc.magnitudes.tobytes(), mags.tobytes())
            self.assertEqual(enc.error.tobytes(), e.tobytes())
            sent_sum += ref_decode(words, mags, n, chunk)[0]
            in_sum += x
        # §4: what was sent plus the residual is what went in (up to fp32 rounding).
        np.testing.assert_allclose(sent_sum + enc.error, in_sum, atol=1e-3)
        enc.reset_error()
        self.assertFalse(enc.error.any())

    def test_frame_round_trip(self):
        n, chunk = 1000, 256
        x = self.rng.standard_normal(n).astype(F32)
        enc = hr.SignEncoder(n, chunk_size=chunk)
        enc.encode(x)
        h = hr.FrameHeader(round_id=7, sender_id=3, tensor_id=2, token_count=4096, inner_steps=5)
        frame = enc.write_frame(h)
        chunks, words = -(-n // chunk), -(-n // 64)
        self.assertEqual(len(frame), 64 + 4 * chunks + (4 * chunks) % 8 + 8 * words + 4)
        self.assertEqual(len(frame), enc.frame_bytes)
        self.assertEqual(hr.frame_bytes(n, chunk), enc.frame_bytes)
        self.assertEqual(frame[:4], b"HGSF")
        self.assertEqual(struct.unpack_from("<QII", frame, 8), (7, 3, 2))
        f = hr.parse_frame(frame)
        got = f.header
        self.assertEqual((got.round_id, got.sender_id, got.tensor_id, got.tensor_elements,
                          got.element_count, got.chunk_size, got.inner_steps, got.token_count),
                         (7, 3, 2, n, n, chunk, 5, 4096))
        self.assertEqual(got.dtype, hr.DType.FP32)
        np.testing.assert_array_equal(f.sign_words, enc.signs)
        np.testing.assert_array_equal(f.magnitudes, enc.magnitudes)
        want, _ = ref_decode(enc.signs.copy(), enc.magnitudes.copy(), n, chunk)
        self.assertEqual(f.decode().tobytes(), want.tobytes())
        self.assertEqual(hr.decode_frame(bytearray(frame)).tobytes(), want.tobytes())
        acc = np.full(n, 0.5, F32)
        f.accumulate(acc, 0.25)
        coeff = np.array([F32(0.25 * float(m)) for m in enc.magnitudes], F32)
        self.assertEqual(acc.tobytes(),
                         (F32(0.5) + ref_decode(enc.signs.copy(), coeff, n, chunk)[0]).tobytes())
        # Written into a caller's buffer: the same bytes.
        out = bytearray(enc.frame_bytes)
        self.assertIs(enc.write_frame(h, out), out)
        self.assertEqual(bytes(out), frame)

    def test_bf16_and_fp16_inputs_equal_their_fp32_values(self):
        n, chunk = 500, 64
        x = self.rng.standard_normal(n).astype(F32)
        bits = bf16_bits(x)
        as32 = bf16_to_f32(bits)
        ref = hr.SignEncoder(n, chunk_size=chunk)
        ref.encode(as32)
        for src in [bits, bits.view(np.int16)] + (
                [torch.from_numpy(as32).to(torch.bfloat16)] if torch else []):
            enc = hr.SignEncoder(n, chunk_size=chunk)
            self.assertEqual(enc.encode(src), 0)
            np.testing.assert_array_equal(enc.signs, ref.signs)
            self.assertEqual(enc.magnitudes.tobytes(), ref.magnitudes.tobytes())
            self.assertEqual(enc.error.tobytes(), ref.error.tobytes())
            f = hr.parse_frame(enc.write_frame(hr.FrameHeader(round_id=1, token_count=1)))
            self.assertEqual(f.header.dtype, hr.DType.BF16)
        h16 = x.astype(np.float16)
        ref16 = hr.SignEncoder(n, chunk_size=chunk)
        ref16.encode(h16.astype(F32))
        for src in [h16] + ([torch.from_numpy(h16)] if torch else []):
            enc = hr.SignEncoder(n, chunk_size=chunk)
            enc.encode(src)
            self.assertEqual(enc.magnitudes.tobytes(), ref16.magnitudes.tobytes())
            self.assertEqual(enc.error.tobytes(), ref16.error.tobytes())
        # Raw 16-bit words read as fp16 when asked.
        enc = hr.SignEncoder(n, chunk_size=chunk)
        enc.encode(h16.view(np.uint16), dtype="fp16")
        self.assertEqual(enc.magnitudes.tobytes(), ref16.magnitudes.tobytes())

    @unittest.skipIf(torch is None, "torch not installed")
    def test_torch_tensors_zero_copy(self):
        n = 300
        t = torch.randn(3, 100)
        enc = hr.SignEncoder(n, chunk_size=64)
        enc.encode(t)  # any shape, C-contiguous
        enc2 = hr.SignEncoder(n, chunk_size=64)
        enc2.encode(t.t().contiguous().t())  # non-contiguous input: copied once
        enc3 = hr.SignEncoder(n, chunk_size=64)
        enc3.encode(t.t().contiguous().t().contiguous())
        np.testing.assert_array_equal(enc2.signs, enc3.signs)
        f = hr.parse_frame(enc.write_frame(hr.FrameHeader(round_id=1, token_count=1)))
        out = torch.zeros(n)
        self.assertIs(f.decode(out), out)
        np.testing.assert_array_equal(out.numpy(), f.decode())
        p = torch.nn.Parameter(torch.zeros(n))  # requires_grad: written through .detach()
        f.accumulate(p, 2.0)
        self.assertTrue(torch.equal(p.detach(), 2.0 * out))
        with self.assertRaisesRegex(ValueError, "not contiguous"):
            f.decode(torch.zeros(2 * n)[::2])
        with self.assertRaisesRegex(ValueError, "not contiguous"):
            f.decode(np.zeros(2 * n, F32)[::2])
        with self.assertRaisesRegex(TypeError, "fp32"):
            f.decode(torch.zeros(n, dtype=torch.float64))

    def test_views_are_read_only_and_keep_the_encoder_alive(self):
        enc = hr.SignEncoder(128, chunk_size=64)
        enc.encode(np.arange(-64, 64, dtype=F32))
        m = enc.magnitudes
        self.assertFalse(m.flags.writeable)
        with self.assertRaises(ValueError):
            m[0] = 1.0
        del enc
        self.assertEqual(m.tolist(), [32.5, 31.5])


class WeightsAndAggregateTest(unittest.TestCase):
    def test_hand_checked_weights(self):
        self.assertEqual(hr.compute_weights([(0, 100, 1), (1, 300, 3)], "tokens"), [0.25, 0.75])
        self.assertEqual(hr.compute_weights([(0, 100, 1), (1, 300, 3)]), [0.625, 0.625])
        w = hr.compute_weights([(0, 80, 8), (1, 80, 4), (2, 80, 2)], "fednova")
        np.testing.assert_allclose(w, [14 / 72, 14 / 36, 14 / 18], rtol=1e-15)

    def test_weights_match_reference_bitwise(self):
        rng = np.random.default_rng(5)
        for _ in range(50):
            k = int(rng.integers(1, 8))
            ids = rng.permutation(100)[:k]
            present = [(int(i), int(rng.integers(1, 10**9)), int(rng.integers(1, 64))) for i in ids]
            for weighting in ("tokens", "fednova"):
                self.assertEqual(hr.compute_weights(present, weighting),
                                 ref_weights(present, weighting))

    def test_aggregate_matches_reference_in_any_arrival_order(self):
        rng = np.random.default_rng(9)
        n, chunk = 1500, 128
        senders, frames = [], []
        for sid, tokens, steps in [(4, 1000, 10), (1, 3000, 30), (9, 500, 5), (2, 700, 12)]:
            x = rng.standard_normal(n).astype(F32) * sid
            enc = hr.SignEncoder(n, chunk_size=chunk)
            enc.encode(x)
            frames.append(enc.write_frame(hr.FrameHeader(round_id=3, sender_id=sid,
                                                         token_count=tokens, inner_steps=steps)))
            senders.append((sid, tokens, steps, enc.signs.copy(), enc.magnitudes.copy(), n))
        agg = hr.Aggregator(max_senders=4)
        for weighting in ("fednova", "tokens"):
            want = ref_aggregate(senders, weighting, chunk).tobytes()
            for perm in ([0, 1, 2, 3], [3, 2, 1, 0], [2, 0, 3, 1]):
                views = [hr.parse_frame(frames[i]) for i in perm]
                got = agg.aggregate(views, weighting=weighting)
                self.assertEqual(got.tobytes(), want, (weighting, perm))
        out = np.empty(n, F32)
        self.assertIs(agg.aggregate([hr.parse_frame(f) for f in frames], out=out), out)

    def test_quorum(self):
        enc = hr.SignEncoder(64, chunk_size=64)
        enc.encode(np.ones(64, F32))
        f = hr.parse_frame(enc.write_frame(hr.FrameHeader(round_id=1, token_count=10)))
        with self.assertRaises(hr.RelayError) as cm:
            hr.Aggregator().aggregate([f], expected_tokens=100, min_token_fraction=0.5)
        self.assertEqual(cm.exception.code, "FAILED_PRECONDITION")
        got = hr.Aggregator().aggregate([f], expected_tokens=100, min_token_fraction=0.05)
        np.testing.assert_array_equal(got, np.ones(64, F32))


class ErrorsTest(unittest.TestCase):
    def frame(self, **kw):
        enc = hr.SignEncoder(100, chunk_size=64)
        enc.encode(np.linspace(-1, 1, 100, dtype=F32))
        h = hr.FrameHeader(round_id=1, token_count=1)
        for k, v in kw.items():
            setattr(h, k, v)
        return enc.write_frame(h)

    def test_status_errors_carry_code_and_message(self):
        f = self.frame()
        with self.assertRaises(hr.RelayError) as cm:
            hr.parse_frame(f[:-1])
        self.assertEqual(cm.exception.code, "DATA_LOSS")
        self.assertIn("checksum", str(cm.exception))
        self.assertIsInstance(cm.exception, RuntimeError)
        with self.assertRaisesRegex(hr.RelayError, "chunk"):
            hr.SignEncoder(100, chunk_size=100)
        with self.assertRaisesRegex(hr.RelayError, "token") as cm:
            self.frame(token_count=0)
        self.assertEqual(cm.exception.code, "INVALID_ARGUMENT")
        with self.assertRaisesRegex(hr.RelayError, "twice"):
            hr.compute_weights([(1, 10, 1), (1, 20, 1)])
        a, b = hr.parse_frame(self.frame()), hr.parse_frame(self.frame(sender_id=1, round_id=2))
        with self.assertRaisesRegex(hr.RelayError, "round"):
            hr.Aggregator().aggregate([a, b])
        with self.assertRaisesRegex(hr.RelayError, "dtype"):
            hr.model_spec_from_string("tensors: [{name: w, elements: 4, dtype: int8}]")

    def test_nonfinite_input_is_refused(self):
        x = np.ones(128, F32)
        x[70] = np.nan
        enc = hr.SignEncoder(128, chunk_size=64)
        self.assertEqual(enc.encode(x), 1)
        with self.assertRaisesRegex(hr.RelayError, "not finite|non-finite|NaN|nan"):
            enc.write_frame(hr.FrameHeader(round_id=1, token_count=1))

    def test_bad_python_arguments(self):
        enc = hr.SignEncoder(10, chunk_size=64)
        with self.assertRaisesRegex(ValueError, "10"):
            enc.encode(np.zeros(11, F32))
        with self.assertRaisesRegex(TypeError, "fp32, fp16"):
            enc.encode(np.zeros(10, np.int32))
        with self.assertRaisesRegex(TypeError, "expected fp32"):
            enc.encode(np.zeros(10, np.float16), dtype="fp32")
        with self.assertRaisesRegex(TypeError, "numpy array"):
            enc.encode([1.0] * 10)
        with self.assertRaisesRegex(TypeError, "big-endian"):
            enc.encode(np.zeros(10, ">f4"))
        # A misaligned input is copied once; the result is that of the aligned values.
        raw = np.zeros(4 * 10 + 1, np.uint8)
        x = np.linspace(-1, 1, 10, dtype=F32)
        raw[1:].view(np.uint8)[:] = x.view(np.uint8)
        misaligned = raw[1:].view(F32)
        self.assertNotEqual(misaligned.ctypes.data % 4, 0)
        self.assertEqual(enc.encode(misaligned), 0)
        ref = hr.SignEncoder(10, chunk_size=64)
        ref.encode(x)
        self.assertEqual(enc.magnitudes.tobytes(), ref.magnitudes.tobytes())
        f = hr.parse_frame(self.frame())
        with self.assertRaisesRegex(ValueError, "contiguous and aligned"):
            f.decode(np.zeros(401, np.uint8)[1:].view(F32))
        with self.assertRaisesRegex(ValueError, "holds 99 values, expected 100"):
            f.decode(np.zeros(99, F32))
        with self.assertRaisesRegex(ValueError, "read-only"):
            f.decode(np.frombuffer(bytes(400), F32))
        with self.assertRaisesRegex(ValueError, "weighting"):
            hr.compute_weights([(1, 1, 1)], "mean")


class GilTest(unittest.TestCase):
    """The kernels run without the GIL: another Python thread makes progress during one call.

    With a huge switch interval the interpreter never forces a thread switch: the counting
    thread gives the GIL up only in its sleep, the calling thread only inside a call that
    releases it. So the counter can move between "before" and "after" only if the call
    released the GIL.
    """

    def progress_during(self, call):
        counter = [0]
        done = threading.Event()
        seen = []

        def worker():
            for _ in range(5):
                before = counter[0]
                call()
                seen.append(counter[0] - before)
            done.set()

        old = sys.getswitchinterval()
        sys.setswitchinterval(1000.0)
        try:
            t = threading.Thread(target=worker)
            t.start()
            while not done.is_set():
                counter[0] += 1
                time.sleep(1e-4)  # releases the GIL, so `call` can return
            t.join()
        finally:
            sys.setswitchinterval(old)
        return seen

    def test_encode_and_aggregate_release_the_gil(self):
        n = 1 << 23
        x = np.random.default_rng(0).standard_normal(n).astype(F32)
        enc = hr.SignEncoder(n, chunk_size=4096)
        self.assertGreater(max(self.progress_during(lambda: enc.encode(x))), 0)
        frame = enc.write_frame(hr.FrameHeader(round_id=1, token_count=1))
        views = [hr.parse_frame(frame)]
        agg = hr.Aggregator()
        out = np.empty(n, F32)
        self.assertGreater(max(self.progress_during(lambda: agg.aggregate(views, out=out))), 0)

    def test_one_object_one_thread(self):
        # The worker thread holds the encoder inside its kernel (GIL released) when the main
        # thread gets to run; the main thread's call on the same encoder is refused, not raced.
        n = 1 << 23
        x = np.zeros(n, F32)
        enc = hr.SignEncoder(n)
        started = threading.Event()

        def worker():
            started.set()
            for _ in range(20):
                enc.encode(x)

        old = sys.getswitchinterval()
        sys.setswitchinterval(1000.0)
        try:
            t = threading.Thread(target=worker)
            t.start()
            started.wait()
            with self.assertRaisesRegex(RuntimeError, "in use by another thread"):
                enc.encode(x)
            t.join()
        finally:
            sys.setswitchinterval(old)
        enc.encode(x)  # free again


if __name__ == "__main__":
    unittest.main()
