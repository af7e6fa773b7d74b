#!/usr/bin/python3
"""Unit tests of wan_emulate's spec parsing and address plan (no root needed, nothing is built)."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wan_emulate  # noqa: E402
from wan_emulate import Wan, WanError, parse_spec  # noqa: E402

SPEC = {
    "regions": ["a", "b", "c"],
    "links": [
        {"between": ["a", "b"], "rate": "1gbit", "rtt": "40ms"},
        {"between": ["a", "c"], "rate": "1gbit", "rtt": "140ms"},
        {"between": ["c", "b"], "rate": "250mbit", "rate_reverse": "100mbit",
         "delay": "30ms", "delay_reverse": "50ms"},
    ],
    "ports": [7100],
}


class UnitsTest(unittest.TestCase):
    def test_rates_durations_sizes(self):
        self.assertEqual(wan_emulate.parse_rate("250mbit"), 250e6)
        self.assertEqual(wan_emulate.parse_rate("10Gbit"), 10e9)
        self.assertAlmostEqual(wan_emulate.parse_duration("140ms"), 0.14)
        self.assertAlmostEqual(wan_emulate.parse_duration("250us"), 0.00025)
        self.assertEqual(wan_emulate.parse_size("16MiB"), 16 << 20)
        self.assertEqual(wan_emulate.parse_size(4096), 4096)
        for bad in ("1g", "fast", "0mbit"):
            with self.assertRaises(WanError):
                wan_emulate.parse_rate(bad)
        with self.assertRaises(WanError):
            wan_emulate.parse_duration("40")


class SpecTest(unittest.TestCase):
    def test_directions_follow_the_spec(self):
        regions, links, ports = parse_spec(SPEC)
        self.assertEqual(regions, ["a", "b", "c"])
        self.assertEqual(ports, [7100])
        self.assertEqual([(l.a, l.b) for l in links], [("a", "b"), ("a", "c"), ("b", "c")])
        bc = links[2]
        # The spec wrote c -> b: rate 250 Mbit/s and delay 30 ms go from c to b.
        self.assertEqual(bc.rate[("c", "b")], 250e6)
        self.assertEqual(bc.rate[("b", "c")], 100e6)
        self.assertAlmostEqual(bc.delay[("c", "b")], 0.030)
        self.assertAlmostEqual(bc.delay[("b", "c")], 0.050)
        self.assertAlmostEqual(links[1].delay[("a", "c")], 0.070)
        self.assertAlmostEqual(links[1].delay[("c", "a")], 0.070)

    def test_default_buffer_covers_the_delay_line(self):
        _, links, _ = parse_spec({"regions": ["a", "b"], "links": [
            {"between": ["a", "b"], "rate": "10gbit", "rtt": "140ms"}]})
        self.assertGreaterEqual(links[0].max_buffer, 10e9 / 8 * 0.070)
        _, links, _ = parse_spec({"regions": ["a", "b"], "links": [
            {"between": ["a", "b"], "rate": "1gbit", "rtt": "40ms", "max_buffer": "1MiB"}]})
        self.assertEqual(links[0].max_buffer, 1 << 20)

    def test_bad_specs_name_the_problem(self):
        cases = [
            ({"regions": ["a"]}, "at least two"),
            ({"regions": ["a", "A!"]}, "region name"),
            ({"regions": ["a", "a"]}, "unique"),
            ({"regions": ["a", "b"], "links": [{"between": ["a", "z"], "rate": "1gbit",
                                                "rtt": "1ms"}]}, "between"),
            ({"regions": ["a", "b"], "links": [{"between": ["a", "b"], "rtt": "1ms"}]},
             "needs a 'rate'"),
            ({"regions": ["a", "b"], "links": [{"between": ["a", "b"], "rate": "1gbit"}]},
             "needs 'rtt'"),
            ({"regions": ["a", "b"], "links": [
                {"between": ["a", "b"], "rate": "1gbit", "rtt": "1ms"},
                {"between": ["b", "a"], "rate": "1gbit", "rtt": "1ms"}]}, "two links"),
        ]
        for spec, words in cases:
            with self.assertRaises(WanError) as ctx:
                parse_spec(spec)
            self.assertIn(words, str(ctx.exception), spec)


class AddressPlanTest(unittest.TestCase):
    def test_addresses_and_names(self):
        wan = Wan(SPEC, ports=[7200], run_id="t1")
        self.assertEqual(wan.namespace("b"), "hwan-t1-b")
        self.assertEqual(wan.address("c"), "10.77.0.3")
        self.assertEqual(wan.peer_address(src="a", dst="b", port=7100), "10.79.0.2:17100")
        self.assertEqual(wan.peer_address(src="c", dst="b", port=7200), "10.79.0.2:17200")
        # The address of a region is the same from everywhere, itself included.
        self.assertEqual({wan.peer_address(src, "b", 7100) for src in "abc"}, {"10.79.0.2:17100"})
        self.assertAlmostEqual(wan.rtt("b", "c"), 0.080)
        self.assertEqual(wan.rate("b", "c"), 100e6)
        with self.assertRaises(WanError):
            wan.peer_address("a", "b", 7300)  # not relayed
        with self.assertRaises(WanError):
            wan.peer_address("a", "z", 7100)  # no such region
        with self.assertRaises(WanError):
            Wan(SPEC, ports=[60000])  # 60000 + 10000 is not a port
        with self.assertRaises(WanError):
            Wan(SPEC, run_id="Bad-Id")

    def test_missing_link_is_refused(self):
        spec = {"regions": ["a", "b", "c"],
                "links": [{"between": ["a", "b"], "rate": "1gbit", "rtt": "1ms"}]}
        wan = Wan(spec, ports=[7100], run_id="t2")
        with self.assertRaises(WanError) as ctx:
            wan.peer_address("a", "c", 7100)
        self.assertIn("no link between a and c", str(ctx.exception))

    def test_runs_get_distinct_ids(self):
        ids = {Wan(SPEC).run_id for _ in range(50)}
        self.assertEqual(len(ids), 50)


if __name__ == "__main__":
    unittest.main()
