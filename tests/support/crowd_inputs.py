"""The shapes the forecast's tests share (tests/schema/test_forecast.py and
test_predict_measured.py): two candidates, a CPU-like machine's cost per pass and three
contributors' acceptance per draft position. Invented: a forecast's rules are checked
against themselves here, with no store or server (tests/support/crowd.py has the
results and probes the server's prediction tests post)."""

from __future__ import annotations

from specschema.crowd import Candidate, CostUnit

NGRAM = Candidate("llama-server", "server_launch", "ngram-simple", 8)
DRAFT = Candidate("llama-server", "server_launch", "draft-simple", 4, draft="small",
                  draft_digest="d" * 64)
# A CPU-like machine: checking k tokens costs more than one step. Measured at 1 + each
# depth the candidates draft (4, 8) and one more, as a probe's sizes would be.
CPU = CostUnit({1: (0.010, 0.011, 0.010), 2: (0.013, 0.012), 4: (0.017, 0.018),
                5: (0.019, 0.020), 8: (0.024, 0.026), 9: (0.026, 0.027)})
# Three contributors' acceptance at draft positions 1-8.
GOOD = ((0.9, 0.85, 0.8, 0.8, 0.75, 0.7, 0.7, 0.6), (0.92, 0.88, 0.8, 0.78, 0.7, 0.7, 0.65,
        0.6), (0.88, 0.8, 0.75, 0.7, 0.7, 0.6, 0.6, 0.5))
