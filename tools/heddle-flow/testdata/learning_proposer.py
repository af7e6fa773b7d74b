#!/usr/bin/python3
"""A proposer that answers garbage until the prompt shows it the diagnostics of a rejection,
then a valid ring all-reduce: proves the rejected proposal's diagnostics reach the proposer."""
import sys

prompt = sys.stdin.read()
if "Your last proposal was rejected" not in prompt:
    print("intent oops\ncollective allreduce\ncopy all from 0 to nowhere")
    sys.exit(0)
assert '"code"' in prompt, prompt  # the diagnostics are JSON
print("""intent learned-ring
collective allreduce
for s in 0..N-1 {
  for r in 0..N {
    reduce chunks((r - s - 1) % N) from r into (r + 1) % N
  }
}
for s in 0..N-1 {
  for r in 0..N {
    copy chunks((r - s) % N) from r to (r + 1) % N
  }
}""")
