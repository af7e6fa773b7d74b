#!/usr/bin/python3
"""A proposer that always answers with a direct all-reduce (in a Markdown fence, as models do)."""
import sys

prompt = sys.stdin.read()
assert "## Topology (YAML)" in prompt, prompt
print("Here is my proposal:\n```")
print("""intent proposed-direct
collective allreduce
for r in 0..N {
  for t in 1..N {
    reduce chunks((r + t) % N) from r into (r + t) % N
  }
}
for r in 0..N {
  for t in 1..N {
    copy chunks(r) from r to (r + t) % N
  }
}""")
print("```")
